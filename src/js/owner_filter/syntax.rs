//! Tokenizer and parser of owner-filter snippets: text to an expression tree.

use crate::js::{fmt_num, Js};

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Num(f64),
    Str(String),
    Punct(&'static str),
}

#[derive(Debug, Clone)]
struct Token {
    tok: Tok,
    /// A line terminator precedes it (automatic semicolon insertion).
    newline_before: bool,
    /// Character offset in the snippet, for messages.
    at: usize,
}

const PUNCTUATORS: [&str; 20] =
    ["===", "!==", "==", "!=", "<=", ">=", "&&", "||", "<", ">", "!", "(", ")", "[", "]", ".", ",", ";", "-", "+"];

fn is_line_terminator(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}')
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == '$'
}

fn is_ident_part(c: char) -> bool {
    is_ident_start(c) || c.is_ascii_digit()
}

fn tokenize(src: &str) -> Result<Vec<Token>, String> {
    let chars: Vec<char> = src.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let mut newline = false;
    while i < chars.len() {
        let c = chars[i];
        if is_line_terminator(c) {
            newline = true;
            i += 1;
            continue;
        }
        if c.is_whitespace() || c == '\u{feff}' {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && !is_line_terminator(chars[i]) {
                i += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            let start = i;
            i += 2;
            loop {
                match chars.get(i) {
                    None => return Err(format!("unterminated comment at {start}")),
                    Some('*') if chars.get(i + 1) == Some(&'/') => {
                        i += 2;
                        break;
                    }
                    Some(&ch) => {
                        newline |= is_line_terminator(ch);
                        i += 1;
                    }
                }
            }
            continue;
        }
        let at = i;
        let tok = if is_ident_start(c) {
            let start = i;
            while i < chars.len() && is_ident_part(chars[i]) {
                i += 1;
            }
            Tok::Ident(chars[start..i].iter().collect())
        } else if c.is_ascii_digit() || (c == '.' && next.is_some_and(|n| n.is_ascii_digit())) {
            let (n, end) = number(&chars, i)?;
            i = end;
            Tok::Num(n)
        } else if c == '"' || c == '\'' {
            let (s, end) = string(&chars, i)?;
            i = end;
            Tok::Str(s)
        } else {
            let rest: String = chars[i..chars.len().min(i + 3)].iter().collect();
            let Some(p) = PUNCTUATORS.iter().find(|p| rest.starts_with(**p)) else {
                return Err(format!("unsupported character {c:?} at {at}"));
            };
            i += p.chars().count();
            Tok::Punct(p)
        };
        tokens.push(Token { tok, newline_before: newline, at });
        newline = false;
    }
    Ok(tokens)
}

/// A numeric literal starting at `start`; returns its value and the end offset.
fn number(chars: &[char], start: usize) -> Result<(f64, usize), String> {
    let mut i = start;
    let take_while = |i: &mut usize, f: &dyn Fn(char) -> bool| {
        let s = *i;
        while *i < chars.len() && f(chars[*i]) {
            *i += 1;
        }
        chars[s..*i].iter().collect::<String>()
    };
    let radix = match (chars[i], chars.get(i + 1).map(|c| c.to_ascii_lowercase())) {
        ('0', Some('x')) => Some(16),
        ('0', Some('o')) => Some(8),
        ('0', Some('b')) => Some(2),
        _ => None,
    };
    let value = if let Some(r) = radix {
        i += 2;
        let digits = take_while(&mut i, &|c| c.is_digit(r));
        if digits.is_empty() {
            return Err(format!("malformed number at {start}"));
        }
        digits.chars().fold(0f64, |acc, d| acc * f64::from(r) + f64::from(d.to_digit(r).unwrap_or(0)))
    } else {
        let int = take_while(&mut i, &|c| c.is_ascii_digit());
        if int.len() > 1 && int.starts_with('0') {
            // Legacy octal (sloppy mode): `017` is 15, `019` is 19.
            if int.chars().all(|d| d < '8') {
                let n = int.chars().fold(0f64, |acc, d| acc * 8.0 + f64::from(d.to_digit(8).unwrap_or(0)));
                return finish_number(chars, i, n, start);
            }
        }
        let mut text = int;
        if chars.get(i) == Some(&'.') {
            i += 1;
            text.push('.');
            text.push_str(&take_while(&mut i, &|c| c.is_ascii_digit()));
        }
        if matches!(chars.get(i), Some('e' | 'E')) {
            let save = i;
            i += 1;
            let mut exp = String::from("e");
            if let Some(&s @ ('+' | '-')) = chars.get(i) {
                exp.push(s);
                i += 1;
            }
            let digits = take_while(&mut i, &|c| c.is_ascii_digit());
            if digits.is_empty() {
                i = save;
                return Err(format!("malformed number at {start} (offset {i})"));
            }
            text.push_str(&exp);
            text.push_str(&digits);
        }
        let text = if text.starts_with('.') { format!("0{text}") } else { text };
        text.parse::<f64>().map_err(|_| format!("malformed number at {start}"))?
    };
    finish_number(chars, i, value, start)
}

/// A number may not run straight into an identifier or another digit (`3in`, `0x1g`).
fn finish_number(chars: &[char], end: usize, value: f64, start: usize) -> Result<(f64, usize), String> {
    match chars.get(end) {
        Some(&c) if is_ident_part(c) => Err(format!("malformed number at {start}")),
        _ => Ok((value, end)),
    }
}

/// A string literal starting at the quote at `start`; returns its value and the end offset.
fn string(chars: &[char], start: usize) -> Result<(String, usize), String> {
    let quote = chars[start];
    let mut units: Vec<u16> = Vec::new();
    let mut i = start + 1;
    let push = |units: &mut Vec<u16>, c: char| {
        let mut buf = [0u16; 2];
        units.extend_from_slice(c.encode_utf16(&mut buf));
    };
    let hex = |i: usize, n: usize| -> Option<u32> {
        let s: String = chars.get(i..i + n)?.iter().collect();
        if s.chars().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(&s, 16).ok()
        } else {
            None
        }
    };
    loop {
        let Some(&c) = chars.get(i) else { return Err(format!("unterminated string at {start}")) };
        i += 1;
        if c == quote {
            break;
        }
        if c == '\n' || c == '\r' {
            return Err(format!("unterminated string at {start}"));
        }
        if c != '\\' {
            push(&mut units, c);
            continue;
        }
        let Some(&e) = chars.get(i) else { return Err(format!("unterminated string at {start}")) };
        i += 1;
        match e {
            'n' => units.push(0x0a),
            'r' => units.push(0x0d),
            't' => units.push(0x09),
            'b' => units.push(0x08),
            'f' => units.push(0x0c),
            'v' => units.push(0x0b),
            'x' => {
                let v = hex(i, 2).ok_or_else(|| format!("bad \\x escape at {}", i - 2))?;
                units.push(v as u16);
                i += 2;
            }
            'u' if chars.get(i) == Some(&'{') => {
                let close = chars[i..].iter().position(|&c| c == '}').map(|p| i + p);
                let v = close
                    .filter(|&end| end > i + 1)
                    .and_then(|end| hex(i + 1, end - i - 1).map(|v| (v, end)))
                    .and_then(|(v, end)| char::from_u32(v).map(|c| (c, end)));
                let (ch, end) = v.ok_or_else(|| format!("bad \\u escape at {}", i - 2))?;
                push(&mut units, ch);
                i = end + 1;
            }
            'u' => {
                let v = hex(i, 4).ok_or_else(|| format!("bad \\u escape at {}", i - 2))?;
                units.push(v as u16);
                i += 4;
            }
            '\r' => {
                // A line continuation; `\r\n` counts as one line terminator.
                if chars.get(i) == Some(&'\n') {
                    i += 1;
                }
            }
            '\n' | '\u{2028}' | '\u{2029}' => {}
            '0'..='7' => {
                // Legacy octal escapes (sloppy mode), at most \377.
                let mut v = e.to_digit(8).unwrap_or(0);
                while let Some(d) = chars.get(i).and_then(|c| c.to_digit(8)) {
                    if v * 8 + d > 0o377 {
                        break;
                    }
                    v = v * 8 + d;
                    i += 1;
                }
                units.push(v as u16);
            }
            other => push(&mut units, other),
        }
    }
    Ok((String::from_utf16_lossy(&units), i))
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum BinOp {
    StrictEq,
    StrictNe,
    LooseEq,
    LooseNe,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Server,
    Lit(Js),
    Member(Box<Expr>, Box<Expr>),
    IndexOf(Box<Expr>, Vec<Expr>),
    Not(Box<Expr>),
    Neg(Box<Expr>),
    Plus(Box<Expr>),
    Bin(BinOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// A compiled snippet: `None` when it returns `undefined` without evaluating anything.
#[derive(Debug)]
pub(super) struct Program {
    pub(super) expr: Option<Expr>,
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Program {
    pub(super) fn parse(src: &str) -> Result<Program, String> {
        let tokens = tokenize(src)?;
        let returns_nothing = tokens.first().is_none_or(|t| t.newline_before);
        let mut p = Parser { tokens, pos: 0 };
        let mut first = None;
        // `return <expr>` then, optionally, more (unreachable) expression statements.
        while p.pos < p.tokens.len() {
            if p.eat(";") {
                continue;
            }
            let expr = p.expr()?;
            if first.is_none() {
                first = Some(expr);
            }
            match p.peek() {
                None => break,
                Some(t) if t.tok == Tok::Punct(";") || t.newline_before => {}
                Some(t) => return Err(format!("unexpected {} at {}", describe(&t.tok), t.at)),
            }
        }
        Ok(Program { expr: if returns_nothing { None } else { first } })
    }
}

fn describe(tok: &Tok) -> String {
    match tok {
        Tok::Ident(s) => format!("identifier `{s}`"),
        Tok::Num(n) => format!("number {}", fmt_num(*n)),
        Tok::Str(s) => format!("string {}", Js::str(s).stringify()),
        Tok::Punct(p) => format!("`{p}`"),
    }
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Token { tok: Tok::Punct(q), .. }) if *q == p)
    }

    fn eat(&mut self, p: &str) -> bool {
        let hit = self.is(p);
        if hit {
            self.pos += 1;
        }
        hit
    }

    fn unexpected(&self) -> String {
        match self.peek() {
            None => "unexpected end of the expression".into(),
            Some(t) => format!("unexpected {} at {}", describe(&t.tok), t.at),
        }
    }

    fn expect(&mut self, p: &str) -> Result<(), String> {
        if self.eat(p) {
            Ok(())
        } else {
            Err(format!("expected `{p}`: {}", self.unexpected()))
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        self.or()
    }

    fn or(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat("||") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.equality()?;
        while self.eat("&&") {
            left = Expr::And(Box::new(left), Box::new(self.equality()?));
        }
        Ok(left)
    }

    fn binary(&mut self, ops: &[(&str, BinOp)], next: fn(&mut Parser) -> Result<Expr, String>) -> Result<Expr, String> {
        let mut left = next(self)?;
        'outer: loop {
            for &(p, op) in ops {
                if self.eat(p) {
                    left = Expr::Bin(op, Box::new(left), Box::new(next(self)?));
                    continue 'outer;
                }
            }
            return Ok(left);
        }
    }

    fn equality(&mut self) -> Result<Expr, String> {
        const OPS: [(&str, BinOp); 4] =
            [("===", BinOp::StrictEq), ("!==", BinOp::StrictNe), ("==", BinOp::LooseEq), ("!=", BinOp::LooseNe)];
        self.binary(&OPS, Parser::relational)
    }

    fn relational(&mut self) -> Result<Expr, String> {
        const OPS: [(&str, BinOp); 4] = [("<=", BinOp::Le), (">=", BinOp::Ge), ("<", BinOp::Lt), (">", BinOp::Gt)];
        self.binary(&OPS, Parser::unary)
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat("!") {
            return Ok(Expr::Not(Box::new(self.unary()?)));
        }
        if self.eat("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat("+") {
            return Ok(Expr::Plus(Box::new(self.unary()?)));
        }
        self.postfix()
    }

    fn postfix(&mut self) -> Result<Expr, String> {
        let mut e = self.primary()?;
        loop {
            if self.eat(".") {
                let name = match self.peek() {
                    Some(Token { tok: Tok::Ident(name), .. }) => name.clone(),
                    _ => return Err(format!("expected a property name: {}", self.unexpected())),
                };
                self.pos += 1;
                if self.is("(") {
                    if name != "indexOf" {
                        return Err(format!("unsupported method call .{name}() (only .indexOf() is supported)"));
                    }
                    self.pos += 1;
                    let args = self.arguments()?;
                    e = Expr::IndexOf(Box::new(e), args);
                } else {
                    e = Expr::Member(Box::new(e), Box::new(Expr::Lit(Js::str(&name))));
                }
            } else if self.eat("[") {
                let key = self.expr()?;
                self.expect("]")?;
                if self.is("(") {
                    return Err("unsupported call of a computed property (only .indexOf() is supported)".into());
                }
                e = Expr::Member(Box::new(e), Box::new(key));
            } else if self.is("(") {
                return Err("unsupported function call (only .indexOf() is supported)".into());
            } else {
                return Ok(e);
            }
        }
    }

    /// Arguments after `(`, through `)`: one or two for `indexOf`.
    fn arguments(&mut self) -> Result<Vec<Expr>, String> {
        let mut args = Vec::new();
        while !self.eat(")") {
            if !args.is_empty() {
                self.expect(",")?;
                if self.eat(")") {
                    break;
                }
            }
            args.push(self.expr()?);
        }
        if args.is_empty() || args.len() > 2 {
            return Err(format!(".indexOf() takes one or two arguments, not {}", args.len()));
        }
        Ok(args)
    }

    fn primary(&mut self) -> Result<Expr, String> {
        let Some(token) = self.peek().cloned() else { return Err(self.unexpected()) };
        self.pos += 1;
        Ok(match token.tok {
            Tok::Num(n) => Expr::Lit(Js::Num(n)),
            Tok::Str(s) => Expr::Lit(Js::str(&s)),
            Tok::Punct("(") => {
                let e = self.expr()?;
                self.expect(")")?;
                e
            }
            Tok::Ident(name) => match name.as_str() {
                "server" => Expr::Server,
                "true" => Expr::Lit(Js::Bool(true)),
                "false" => Expr::Lit(Js::Bool(false)),
                "null" => Expr::Lit(Js::Null),
                "undefined" => Expr::Lit(Js::Undefined),
                "NaN" => Expr::Lit(Js::Num(f64::NAN)),
                "Infinity" => Expr::Lit(Js::Num(f64::INFINITY)),
                _ => return Err(format!("unknown name `{name}` at {} (only `server` is defined)", token.at)),
            },
            Tok::Punct(_) => {
                self.pos -= 1;
                return Err(self.unexpected());
            }
        })
    }
}
