//! `filter_owner_server` snippets: per-owner JavaScript expressions over `server`, compiled
//! once at start-up and evaluated by `hard-filter-owners-servers` against each server's JSON.
//!
//! The original runs each snippet as the body `return <snippet>` of a JavaScript function.
//! Running JavaScript is neither needed nor safe, so this is a small parser and evaluator for
//! the expressions operators actually write:
//!
//! * `server`, property reads `.x`, `['x']`, `["x"]`, `[expr]`, `.length` of strings and
//!   arrays, and `.indexOf(x[, from])` on strings and arrays;
//! * string, number, `true`/`false`/`null`/`undefined`/`NaN`/`Infinity` literals;
//! * `===`, `!==`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||` (returning an operand, as in
//!   JavaScript), `!`, unary `-`/`+`, parentheses; comments and a trailing `;`.
//!
//! Values follow JavaScript: reading a missing property gives `undefined`; reading a property
//! *of* `undefined`/`null`, or calling `indexOf` on something without it, is a runtime error
//! (the plugin's "Error running filter" path). Objects compare by identity, so
//! `server.traits === server.traits` holds while two distinct objects never are equal.
//!
//! A snippet outside this subset is refused when the configuration is loaded, naming the
//! owner and the problem (the original would fail at allocation time instead, reporting
//! `Error running filter ...` for every request of that owner). An empty snippet, or one
//! starting on a new line (automatic semicolon insertion turns `return` + newline into
//! `return;`), yields `undefined`, as in the original.

use std::fmt;

use crate::js::{fmt_num, js_le, js_lt, strict_eq, Js};

/// Compiled per-owner server filters, in the configuration's key order.
#[derive(Debug, Default)]
pub struct OwnerFilters {
    filters: Vec<OwnerFilter>,
}

/// One owner's filter.
#[derive(Debug)]
pub struct OwnerFilter {
    pub owner: Box<str>,
    /// `String(snippet)`: the text that was compiled and that reasons quote.
    pub source: String,
    /// Truthiness of the configured value itself (`filters[owner]` is tested before use).
    pub truthy: bool,
    program: Program,
}

impl OwnerFilters {
    /// Compiles `defaults.filter_owner_server` (unset or falsy: no filters).
    pub fn compile(config: &Js) -> Result<OwnerFilters, String> {
        if !config.truthy() {
            return Ok(OwnerFilters::default());
        }
        let Some(map) = config.as_obj() else {
            return Err("Defaults filter_owner_server is an invalid type".into());
        };
        let mut filters = Vec::with_capacity(map.len());
        for (owner, snippet) in map {
            let source = snippet.to_js_string();
            let program = Program::parse(&source).map_err(|e| {
                format!("Defaults filter_owner_server: the filter for owner {owner} cannot be used: {e} (in: {source})")
            })?;
            filters.push(OwnerFilter { owner: owner.clone(), source, truthy: snippet.truthy(), program });
        }
        Ok(OwnerFilters { filters })
    }

    /// The filter configured for this owner uuid (as `filters[String(owner)]` finds it).
    pub fn get(&self, owner: &str) -> Option<&OwnerFilter> {
        self.filters.iter().find(|f| &*f.owner == owner)
    }

    /// Every filter, in the configuration's key order.
    pub fn iter(&self) -> impl Iterator<Item = &OwnerFilter> {
        self.filters.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

impl OwnerFilter {
    /// The snippet's value for this server (`Err`: what JavaScript would have thrown).
    pub fn eval(&self, server: &Js) -> Result<Js, EvalError> {
        self.program.run(server)
    }

    /// Whether the snippet's value for this server is truthy.
    pub fn matches(&self, server: &Js) -> Result<bool, EvalError> {
        self.eval(server).map(|v| v.truthy())
    }
}

/// A runtime error of a snippet (a JavaScript `TypeError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// ------------------------------------------------------------------------------------------
// Syntax

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
enum BinOp {
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
enum Expr {
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
struct Program {
    expr: Option<Expr>,
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Program {
    fn parse(src: &str) -> Result<Program, String> {
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

    fn run(&self, server: &Js) -> Result<Js, EvalError> {
        match &self.expr {
            None => Ok(Js::Undefined),
            Some(e) => eval(e, server).map(Val::into_js),
        }
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

// ------------------------------------------------------------------------------------------
// Evaluation

/// A value during evaluation: borrowed from the server (objects keep their identity) or made.
enum Val<'a> {
    Ref(&'a Js),
    Own(Js),
}

impl Val<'_> {
    fn js(&self) -> &Js {
        match self {
            Val::Ref(v) => v,
            Val::Own(v) => v,
        }
    }

    fn into_js(self) -> Js {
        match self {
            Val::Ref(v) => v.clone(),
            Val::Own(v) => v,
        }
    }
}

/// Same object (arrays and objects are equal only to themselves).
fn identical(a: &Val<'_>, b: &Val<'_>) -> bool {
    match (a, b) {
        (Val::Ref(x), Val::Ref(y)) => std::ptr::eq(*x, *y),
        _ => false,
    }
}

fn is_object(v: &Js) -> bool {
    matches!(v, Js::Obj(_) | Js::Arr(_))
}

fn strict_equals(a: &Val<'_>, b: &Val<'_>) -> bool {
    if is_object(a.js()) || is_object(b.js()) {
        return identical(a, b);
    }
    strict_eq(a.js(), b.js())
}

/// `ToPrimitive`: objects and arrays become their string form.
fn prim(v: &Js) -> Js {
    if is_object(v) {
        Js::Str(v.to_js_string().into())
    } else {
        v.clone()
    }
}

/// `==`.
fn loose_equals(a: &Val<'_>, b: &Val<'_>) -> bool {
    let (x, y) = (a.js(), b.js());
    match (x, y) {
        _ if is_object(x) && is_object(y) => identical(a, b),
        (Js::Undefined | Js::Null, Js::Undefined | Js::Null) => true,
        (Js::Undefined | Js::Null, _) | (_, Js::Undefined | Js::Null) => false,
        _ if is_object(x) => loose_equals(&Val::Own(prim(x)), b),
        _ if is_object(y) => loose_equals(a, &Val::Own(prim(y))),
        (Js::Str(_), Js::Str(_)) | (Js::Num(_), Js::Num(_)) | (Js::Bool(_), Js::Bool(_)) => strict_eq(x, y),
        // Mixed primitives compare as numbers (booleans and strings converted).
        _ => x.num() == y.num(),
    }
}

fn compare(op: BinOp, a: &Js, b: &Js) -> bool {
    let (a, b) = (prim(a), prim(b));
    match op {
        BinOp::Lt => js_lt(&a, &b),
        BinOp::Le => js_le(&a, &b),
        BinOp::Gt => js_lt(&b, &a),
        _ => js_le(&b, &a),
    }
}

/// `ToPropertyKey`.
fn property_key(v: &Js) -> String {
    v.to_js_string()
}

fn type_error_reading(base: &Js, key: &str) -> EvalError {
    EvalError(format!("Cannot read properties of {} (reading '{key}')", base.to_js_string()))
}

/// A canonical array index (`"0"`, `"12"`, not `"01"` or `"1.0"`).
fn array_index(key: &str) -> Option<usize> {
    key.parse::<usize>().ok().filter(|i| i.to_string() == key)
}

/// `base[key]`.
fn read<'a>(base: Val<'a>, key: &str) -> Result<Val<'a>, EvalError> {
    let undefined = Ok(Val::Own(Js::Undefined));
    match base {
        Val::Ref(Js::Obj(o)) => Ok(o.get(key).map_or(Val::Own(Js::Undefined), Val::Ref)),
        Val::Ref(Js::Arr(a)) if key != "length" => {
            Ok(array_index(key).and_then(|i| a.get(i)).map_or(Val::Own(Js::Undefined), Val::Ref))
        }
        base => match base.js() {
            Js::Undefined | Js::Null => Err(type_error_reading(base.js(), key)),
            Js::Obj(o) => Ok(Val::Own(o.get(key).cloned().unwrap_or_default())),
            Js::Arr(a) if key == "length" => Ok(Val::Own(Js::Num(a.len() as f64))),
            Js::Arr(a) => Ok(Val::Own(array_index(key).and_then(|i| a.get(i)).cloned().unwrap_or_default())),
            Js::Str(s) if key == "length" => Ok(Val::Own(Js::Num(s.encode_utf16().count() as f64))),
            Js::Str(s) => Ok(Val::Own(
                array_index(key)
                    .and_then(|i| s.encode_utf16().nth(i))
                    .map_or(Js::Undefined, |u| Js::Str(String::from_utf16_lossy(&[u]).into())),
            )),
            _ => undefined,
        },
    }
}

/// `ToIntegerOrInfinity`.
fn to_integer(v: &Js) -> f64 {
    let n = prim(v).num();
    if n.is_nan() {
        0.0
    } else {
        n.trunc()
    }
}

/// The start position `indexOf` uses for a list of `len` items.
fn start_index(from: Option<&Js>, len: usize, negative_from_end: bool) -> usize {
    let Some(from) = from else { return 0 };
    let n = to_integer(from);
    let len_f = len as f64;
    let start = if n < 0.0 && negative_from_end { (len_f + n).max(0.0) } else { n.max(0.0) };
    start.min(len_f) as usize
}

fn index_of(target: &Val<'_>, args: &[Val<'_>]) -> Result<Js, EvalError> {
    let search = args.first();
    let found = match target.js() {
        Js::Str(s) => {
            let hay: Vec<u16> = s.encode_utf16().collect();
            let needle: Vec<u16> =
                search.map_or_else(|| "undefined".to_string(), |v| v.js().to_js_string()).encode_utf16().collect();
            let start = start_index(args.get(1).map(Val::js), hay.len(), false);
            (start..=hay.len())
                .find(|&i| hay.len() - i >= needle.len() && hay[i..i + needle.len()] == needle[..])
                .map_or(-1.0, |i| i as f64)
        }
        Js::Arr(items) => {
            let start = start_index(args.get(1).map(Val::js), items.len(), true);
            let undefined = Val::Own(Js::Undefined);
            let wanted = search.unwrap_or(&undefined);
            items[start..]
                .iter()
                .position(|item| {
                    // Elements of a borrowed array keep their identity.
                    let item = match target {
                        Val::Ref(_) => Val::Ref(item),
                        Val::Own(_) => Val::Own(item.clone()),
                    };
                    strict_equals(&item, wanted)
                })
                .map_or(-1.0, |i| (start + i) as f64)
        }
        Js::Undefined | Js::Null => return Err(type_error_reading(target.js(), "indexOf")),
        other => return Err(EvalError(format!("{}.indexOf is not a function", other.type_of()))),
    };
    Ok(Js::Num(found))
}

fn eval<'a>(e: &Expr, server: &'a Js) -> Result<Val<'a>, EvalError> {
    Ok(match e {
        Expr::Server => Val::Ref(server),
        Expr::Lit(v) => Val::Own(v.clone()),
        Expr::Member(base, key) => {
            let base = eval(base, server)?;
            let key = property_key(eval(key, server)?.js());
            read(base, &key)?
        }
        Expr::IndexOf(target, args) => {
            let target = eval(target, server)?;
            if matches!(target.js(), Js::Undefined | Js::Null) {
                return Err(type_error_reading(target.js(), "indexOf"));
            }
            let args = args.iter().map(|a| eval(a, server)).collect::<Result<Vec<_>, _>>()?;
            Val::Own(index_of(&target, &args)?)
        }
        Expr::Not(x) => Val::Own(Js::Bool(!eval(x, server)?.js().truthy())),
        Expr::Neg(x) => Val::Own(Js::Num(-prim(eval(x, server)?.js()).num())),
        Expr::Plus(x) => Val::Own(Js::Num(prim(eval(x, server)?.js()).num())),
        Expr::And(a, b) => {
            let left = eval(a, server)?;
            if left.js().truthy() {
                eval(b, server)?
            } else {
                left
            }
        }
        Expr::Or(a, b) => {
            let left = eval(a, server)?;
            if left.js().truthy() {
                left
            } else {
                eval(b, server)?
            }
        }
        Expr::Bin(op, a, b) => {
            let (a, b) = (eval(a, server)?, eval(b, server)?);
            let result = match op {
                BinOp::StrictEq => strict_equals(&a, &b),
                BinOp::StrictNe => !strict_equals(&a, &b),
                BinOp::LooseEq => loose_equals(&a, &b),
                BinOp::LooseNe => !loose_equals(&a, &b),
                _ => compare(*op, a.js(), b.js()),
            };
            Val::Own(Js::Bool(result))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(src: &str) -> OwnerFilter {
        let config = Js::from_json(&json!({ "o": src }));
        match OwnerFilters::compile(&config) {
            Ok(f) => f.filters.into_iter().next().expect("one filter"),
            Err(e) => panic!("{src}: {e}"),
        }
    }

    fn eval_on(src: &str, server: &serde_json::Value) -> Result<Js, EvalError> {
        filter(src).eval(&Js::from_json(server))
    }

    fn value(src: &str, server: &serde_json::Value) -> Js {
        eval_on(src, server).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    fn srv() -> serde_json::Value {
        json!({
            "uuid": "b8ab34e9-2914-48c4-af75-5c6440240ce1",
            "hostname": "cn0042",
            "rack_identifier": "R01",
            "reservation_ratio": 0.1,
            "memory_total_bytes": 274877906944_u64,
            "unreserved_ram": 768,
            "traits": {"customer": "acme", "rack": ["r1", "r2"], "internal": false},
            "sysinfo": {"CPU Total Cores": 48, "Live Image": "20200101T000000Z"},
            "list": [1, "1", null, {"a": 1}],
            "empty": ""
        })
    }

    #[test]
    fn the_recorded_snippets() {
        let s = srv();
        let t = |src: &str| value(src, &s).truthy();
        assert!(t("server.uuid === \"b8ab34e9-2914-48c4-af75-5c6440240ce1\""));
        assert!(!t("server.unreserved_ram > 1024"));
        assert!(t("!server.traits.internal && server.rack_identifier !== 'R02'"));
        assert!(t("server.hostname.indexOf('cn00') === 0"));
        assert!(t("server.memory_total_bytes > 200000000000"));
        assert!(t("server.rack_identifier === 'R01'"));
        assert!(t("server.reservation_ratio < 0.15 || server.rack_identifier === 'R03'"));
        assert!(t("server.sysinfo['CPU Total Cores'] >= 48"));
        assert!(t("server.traits.customer === 'acme'"));
        assert!(t("server.traits.rack.length > 0"));
    }

    #[test]
    fn missing_properties_are_undefined_and_their_properties_throw() {
        let s = srv();
        assert_eq!(value("server.nope", &s), Js::Undefined);
        assert_eq!(value("server.traits.nope === undefined", &s), Js::Bool(true));
        let err = eval_on("server.nope.deeper", &s).expect_err("TypeError");
        assert_eq!(err.0, "Cannot read properties of undefined (reading 'deeper')");
        assert!(eval_on("server.nope.indexOf('x')", &s).is_err());
        assert!(eval_on("server.unreserved_ram.indexOf(1)", &s).is_err());
        assert!(eval_on("server.traits.indexOf('x')", &s).is_err());
        // Short-circuits skip the failing side.
        assert_eq!(value("server.nope && server.nope.deeper", &s), Js::Undefined);
        assert_eq!(value("server.uuid || server.nope.deeper", &s), Js::str("b8ab34e9-2914-48c4-af75-5c6440240ce1"));
        // `.length` of a number is undefined, not an error.
        assert_eq!(value("server.unreserved_ram.length", &s), Js::Undefined);
    }

    #[test]
    fn logical_operators_return_operands() {
        let s = srv();
        assert_eq!(value("server.empty || 'fallback'", &s), Js::str("fallback"));
        assert_eq!(value("server.empty && 'x'", &s), Js::str(""));
        assert_eq!(value("server.unreserved_ram && server.rack_identifier", &s), Js::str("R01"));
        assert_eq!(value("!server.empty", &s), Js::Bool(true));
        assert_eq!(value("!!server.traits", &s), Js::Bool(true));
        assert_eq!(value("1 || 0 && 0", &s), Js::Num(1.0));
        assert_eq!(value("(1 || 0) && 0", &s), Js::Num(0.0));
    }

    #[test]
    fn equality_and_comparison_follow_javascript() {
        let s = srv();
        let v = |src: &str| value(src, &s);
        assert_eq!(v("server.unreserved_ram == '768'"), Js::Bool(true));
        assert_eq!(v("server.unreserved_ram === '768'"), Js::Bool(false));
        assert_eq!(v("server.nope == null"), Js::Bool(true));
        assert_eq!(v("server.nope === null"), Js::Bool(false));
        assert_eq!(v("server.nope != null"), Js::Bool(false));
        assert_eq!(v("true == 1"), Js::Bool(true));
        assert_eq!(v("NaN == NaN"), Js::Bool(false));
        assert_eq!(v("server.traits === server.traits"), Js::Bool(true));
        assert_eq!(v("server.traits == server.sysinfo"), Js::Bool(false));
        assert_eq!(v("server.traits.rack == 'r1,r2'"), Js::Bool(true));
        assert_eq!(v("'10.0' < '7.0'"), Js::Bool(true));
        assert_eq!(v("10 < 7"), Js::Bool(false));
        assert_eq!(v("'10' < 7"), Js::Bool(false));
        assert_eq!(v("server.nope < 1 || server.nope >= 1"), Js::Bool(false));
        assert_eq!(v("null >= 0"), Js::Bool(true));
        assert_eq!(v("-1 < -0.5"), Js::Bool(true));
        assert_eq!(v("server.traits.rack.indexOf('r3') > -1"), Js::Bool(false));
    }

    #[test]
    fn index_of_on_strings_and_arrays() {
        let s = srv();
        let v = |src: &str| value(src, &s);
        assert_eq!(v("server.hostname.indexOf('00')"), Js::Num(2.0));
        assert_eq!(v("server.hostname.indexOf('00', 3)"), Js::Num(-1.0));
        assert_eq!(v("server.hostname.indexOf('')"), Js::Num(0.0));
        assert_eq!(v("server.traits.rack.indexOf('r2')"), Js::Num(1.0));
        assert_eq!(v("server.list.indexOf('1')"), Js::Num(1.0));
        assert_eq!(v("server.list.indexOf(null)"), Js::Num(2.0));
        assert_eq!(v("server.list.indexOf(1, -3)"), Js::Num(-1.0));
        assert_eq!(v("server.list.indexOf(server.list[3])"), Js::Num(3.0));
        assert_eq!(v("server.list.length"), Js::Num(4.0));
        assert_eq!(v("server['hostname'].length"), Js::Num(6.0));
        assert_eq!(v("server.hostname[0]"), Js::str("c"));
        assert_eq!(v("server.list[0]"), Js::Num(1.0));
        assert_eq!(v("server[\"sysinfo\"]['Live Image']"), Js::str("20200101T000000Z"));
    }

    #[test]
    fn literals() {
        let s = json!({});
        let v = |src: &str| value(src, &s);
        assert_eq!(v("'a\\'b'"), Js::str("a'b"));
        assert_eq!(v(r#""\x41\u0042\u{43}\n""#), Js::str("ABC\n"));
        assert_eq!(v("0x10"), Js::Num(16.0));
        assert_eq!(v("1.5e3"), Js::Num(1500.0));
        assert_eq!(v(".5"), Js::Num(0.5));
        assert_eq!(v("017"), Js::Num(15.0));
        assert_eq!(v("019"), Js::Num(19.0));
        assert_eq!(v("null"), Js::Null);
        assert_eq!(v("undefined"), Js::Undefined);
        assert_eq!(v("-'3'"), Js::Num(-3.0));
        assert_eq!(v("true /* comment */ ; // trailing"), Js::Bool(true));
    }

    #[test]
    fn return_on_its_own_line_yields_undefined() {
        let s = srv();
        assert_eq!(value("", &s), Js::Undefined);
        assert_eq!(value("  ", &s), Js::Undefined);
        assert_eq!(value("\nserver.uuid", &s), Js::Undefined);
        assert_eq!(value("/*\n*/ true", &s), Js::Undefined);
        // A newline later on is fine; a second statement is unreachable.
        assert_eq!(value("server.rack_identifier\n=== 'R01'", &s), Js::Bool(true));
        assert_eq!(value("server.rack_identifier\nserver.nope.deeper", &s), Js::str("R01"));
    }

    #[test]
    fn snippets_outside_the_subset_are_configuration_errors() {
        for bad in [
            "sdasd ++",
            "server.x = 1",
            "server.x ===",
            "server.uuid.toUpperCase()",
            "process.exit()",
            "(server.x",
            "server.x server.y",
            "`tpl`",
            "'unterminated",
            "server.x ? 1 : 2",
            "server.a.indexOf()",
            "3in",
        ] {
            let config = Js::from_json(&json!({ "2316e149-1562-47ff-abea-00bda80d0e7f": bad }));
            let err = OwnerFilters::compile(&config).expect_err(bad);
            assert!(err.contains("2316e149-1562-47ff-abea-00bda80d0e7f"), "{err}");
            assert!(err.contains(bad), "{err}");
        }
        assert!(OwnerFilters::compile(&Js::str("x")).is_err());
    }

    #[test]
    fn non_string_snippets_are_read_as_their_text() {
        let config = Js::from_json(&json!({ "a": true, "b": 0, "c": null, "d": "" }));
        let filters = OwnerFilters::compile(&config).expect("valid");
        let got: Vec<(bool, String, Js)> =
            filters.iter().map(|f| (f.truthy, f.source.clone(), f.eval(&Js::Null).expect("evaluates"))).collect();
        assert_eq!(
            got,
            [
                (true, "true".into(), Js::Bool(true)),
                (false, "0".into(), Js::Num(0.0)),
                (false, "null".into(), Js::Null),
                (false, String::new(), Js::Undefined),
            ]
        );
        assert!(filters.get("b").is_some() && filters.get("z").is_none());
        assert!(OwnerFilters::compile(&Js::Null).expect("unset").is_empty());
    }
}
