//! JavaScript regular expressions, in the two dialects the original compiled: native
//! `RegExp` (instance globs turned into regexes) and XRegExp 3.1 (`re` affinity values).
//!
//! The source is translated to `fancy-regex` syntax where the dialects differ, then compiled
//! by `fancy-regex`: patterns without look-around or back-references run on the `regex`
//! crate's linear-time engine, the others on a backtracking VM with a hard backtrack limit,
//! so no pattern can hang a request (past the limit a match is an error, not a hang).
//!
//! XRegExp on top of native syntax: a leading mode modifier `(?imnsx)` (`n`: only named
//! groups capture, `s`: `.` matches line terminators, `x`: free spacing with `#` comments),
//! `(?#...)` comments, named groups `(?<name>...)` and `\k<name>`, and Unicode tokens
//! `\pL`, `\p{L}`, `\P{N}`, `\p{^L}` (categories, scripts, properties, `In<Block>` blocks;
//! names match loosely). Like XRegExp, it refuses octal escapes and back-references to
//! groups that do not exist; like native `RegExp`, a quantifier with nothing to repeat
//! (`a**`, `a{2}+`) is an error.

use fancy_regex::{Regex, RegexBuilder};

use super::regex_blocks::BLOCKS;

/// Upper bounds for compiling user regexes.
const REGEX_SIZE_LIMIT: usize = 1 << 18;
/// Group nesting past this is refused (the parsers recurse).
const REGEX_NEST_LIMIT: usize = 64;
/// Backtracking steps one match may take (about a millisecond of work per 100,000).
const BACKTRACK_LIMIT: usize = 200_000;

/// Which parser the original used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `new RegExp(source)`, no flags.
    Native,
    /// `XRegExp(source)` (3.1), no flags.
    XRegExp,
}

/// Why a pattern does not compile.
#[derive(Debug, Clone, PartialEq)]
pub enum RegexError {
    /// Past the size or nesting limits.
    TooBig,
    /// The original would have thrown a SyntaxError (or dapi cannot express it).
    Invalid(String),
}

impl std::fmt::Display for RegexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegexError::TooBig => f.write_str("regular expression is too large"),
            RegexError::Invalid(why) => write!(f, "invalid regular expression: {why}"),
        }
    }
}

/// A match that needed more backtracking than allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManySteps;

/// A compiled JavaScript regex.
#[derive(Debug, Clone)]
pub struct JsRegex(Regex);

impl JsRegex {
    /// `re.test(text)`.
    pub fn is_match(&self, text: &str) -> Result<bool, TooManySteps> {
        self.0.is_match(text).map_err(|_| TooManySteps)
    }
}

/// Compiles a native JavaScript regular expression (no flags) with bounded size: the
/// tests' way into the native dialect.
#[cfg(test)]
pub fn js_regex(source: &str) -> Result<JsRegex, RegexError> {
    compile(source, Dialect::Native)
}

/// Compiles `XRegExp(source)` (3.1, no flags) with bounded size.
pub fn xregexp(source: &str) -> Result<JsRegex, RegexError> {
    compile(source, Dialect::XRegExp)
}

/// Compiles a pattern of either dialect.
pub fn compile(source: &str, dialect: Dialect) -> Result<JsRegex, RegexError> {
    let translated = translate(source, dialect)?;
    RegexBuilder::new(&translated)
        .delegate_size_limit(REGEX_SIZE_LIMIT)
        .delegate_dfa_size_limit(REGEX_SIZE_LIMIT)
        .backtrack_limit(BACKTRACK_LIMIT)
        .build()
        .map(JsRegex)
        .map_err(|e| match e {
            fancy_regex::Error::CompileError(c) => match *c {
                fancy_regex::CompileError::InnerError(inner) if inner.size_limit().is_some() => RegexError::TooBig,
                fancy_regex::CompileError::PatternTooComplex => RegexError::TooBig,
                other => RegexError::Invalid(other.to_string()),
            },
            fancy_regex::Error::ParseError(_, fancy_regex::ParseError::RecursionExceeded) => RegexError::TooBig,
            other => RegexError::Invalid(other.to_string()),
        })
}

/// XRegExp's mode modifier flags.
#[derive(Default, Clone, Copy)]
struct Modes {
    dot_all: bool,
    free_spacing: bool,
    explicit_capture: bool,
}

fn invalid(why: &str) -> RegexError {
    RegexError::Invalid(why.to_string())
}

/// Rewrites the source into `fancy-regex` syntax where the dialects differ: ASCII
/// `\d`/`\w`/`\b`, `.` excluding every JS line terminator, identity escapes (`\a` is `a`),
/// literal `{`, `}` and `]` where they are not syntax, `[`/`&`/`~`/`-` literal inside
/// classes, the empty classes `[]`/`[^]`, and XRegExp's additions (see the module header).
fn translate(src: &str, dialect: Dialect) -> Result<String, RegexError> {
    let xre = dialect == Dialect::XRegExp;
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len() + 8);
    let mut modes = Modes::default();
    let mut i = 0;
    if xre {
        if let Some(len) = leading_modifier(&chars) {
            for &flag in &chars[2..len - 1] {
                match flag {
                    'i' => out.push_str("(?i)"),
                    'm' => out.push_str("(?m)"),
                    's' => modes.dot_all = true,
                    'x' => modes.free_spacing = true,
                    'n' => modes.explicit_capture = true,
                    _ => return Err(RegexError::Invalid(format!("flag {flag} in mode modifier"))),
                }
            }
            i = len;
        }
    }
    let groups = count_groups(&chars, xre && modes.explicit_capture)?;
    let mut in_class = false;
    let mut depth = 0usize;
    // Whether the last item can take a quantifier; whether the last item is a quantifier
    // (which may take one `?`, its lazy mark, and nothing else).
    let mut repeatable = false;
    let mut quantifier = Quantified::No;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if xre && modes.free_spacing && !in_class {
            if c.is_whitespace() || c == '\u{feff}' {
                continue;
            }
            if c == '#' {
                while i < chars.len() && !matches!(chars[i], '\n' | '\r' | '\u{2028}' | '\u{2029}') {
                    i += 1;
                }
                continue;
            }
        }
        if !in_class && is_quantifier_at(&chars, i - 1) {
            if c == '?' && quantifier == Quantified::Greedy {
                out.push('?');
                quantifier = Quantified::Lazy;
                continue;
            }
            if !repeatable {
                return Err(invalid("nothing to repeat"));
            }
            out.push(c);
            if c == '{' {
                let len = quantifier_len(&chars, i).unwrap_or(0);
                out.extend(&chars[i..i + len]);
                i += len;
            }
            repeatable = false;
            quantifier = Quantified::Greedy;
            continue;
        }
        quantifier = Quantified::No;
        repeatable = true;
        match c {
            '\\' => {
                let Some(&n) = chars.get(i) else {
                    return Err(invalid("\\ at end of pattern"));
                };
                i += 1;
                match n {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    'b' if in_class => out.push_str("\\x08"),
                    // JS word boundaries are ASCII ones (fancy-regex cannot switch Unicode
                    // off inline, so they are spelled with look-around).
                    'b' => {
                        out.push_str("(?:(?<=[0-9A-Za-z_])(?![0-9A-Za-z_])|(?<![0-9A-Za-z_])(?=[0-9A-Za-z_]))");
                        repeatable = false;
                    }
                    'B' if !in_class => {
                        out.push_str("(?:(?<=[0-9A-Za-z_])(?=[0-9A-Za-z_])|(?<![0-9A-Za-z_])(?![0-9A-Za-z_]))");
                        repeatable = false;
                    }
                    '0' if !chars.get(i).is_some_and(char::is_ascii_digit) => out.push_str("\\x00"),
                    'c' if chars.get(i).is_some_and(char::is_ascii_alphabetic) => {
                        let code = chars[i] as u32 % 32;
                        out.push_str(&format!("\\x{{{code:x}}}"));
                        i += 1;
                    }
                    'x' if hex_run(&chars, i, 2) => {
                        out.push_str("\\x{");
                        out.extend(&chars[i..i + 2]);
                        out.push('}');
                        i += 2;
                    }
                    'u' if hex_run(&chars, i, 4) => {
                        out.push_str("\\x{");
                        out.extend(&chars[i..i + 4]);
                        out.push('}');
                        i += 4;
                    }
                    'p' | 'P' if xre => i = unicode_token(&chars, i, n == 'P', &mut out)?,
                    '0'..='9' if xre || !in_class => {
                        let digits = 1 + chars[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                        let text: String = chars[i - 1..i - 1 + digits].iter().collect();
                        if n == '0' || in_class {
                            return Err(invalid("octal escape"));
                        }
                        match text.parse::<usize>() {
                            Ok(k) if k <= groups => {
                                out.push_str(&format!("\\{k}"));
                                i += digits - 1;
                            }
                            _ if xre => return Err(invalid("back-reference to an undefined group")),
                            // Native JS reads such an escape as octal or identity: unsupported.
                            _ => return Err(invalid("octal escape")),
                        }
                    }
                    'k' if chars.get(i) == Some(&'<') => {
                        let end = chars[i..].iter().position(|&c| c == '>').ok_or_else(|| invalid("\\k<"))?;
                        out.push_str("\\k<");
                        out.extend(&chars[i + 1..i + end]);
                        out.push('>');
                        i += end + 1;
                    }
                    't' | 'n' | 'r' | 'f' | 'v' | 's' | 'S' => {
                        out.push('\\');
                        out.push(n);
                    }
                    n if n.is_alphanumeric() => out.push_str(&escape_char(n)),
                    n => out.push_str(&escape_char(n)),
                }
            }
            '[' if !in_class => {
                let negated = chars.get(i) == Some(&'^');
                let close_at = if negated { i + 1 } else { i };
                if chars.get(close_at) == Some(&']') {
                    // `[]` never matches, `[^]` matches anything.
                    out.push_str(if negated { "[\\s\\S]" } else { "[^\\s\\S]" });
                    i = close_at + 1;
                } else {
                    in_class = true;
                    out.push('[');
                    if negated {
                        out.push('^');
                        i += 1;
                    }
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            '(' => {
                depth += 1;
                if depth > REGEX_NEST_LIMIT {
                    return Err(RegexError::TooBig);
                }
                repeatable = false;
                if chars.get(i) != Some(&'?') {
                    out.push_str(if xre && modes.explicit_capture { "(?:" } else { "(" });
                } else if xre && chars.get(i + 1) == Some(&'#') {
                    // A comment: it leaves an empty group behind, as XRegExp's `(?:)`.
                    let end = chars[i..].iter().position(|&c| c == ')').ok_or_else(|| invalid("unclosed comment"))?;
                    i += end + 1;
                    depth -= 1;
                    out.push_str("(?:)");
                    repeatable = true;
                } else {
                    match chars.get(i + 1) {
                        Some(':' | '=' | '!') => out.push('('),
                        Some('<') if matches!(chars.get(i + 2), Some('=' | '!')) => out.push('('),
                        Some('<') => out.push('('),
                        Some('P') if xre => out.push('('),
                        _ => return Err(invalid("invalid group")),
                    }
                }
            }
            ')' if !in_class => {
                depth = depth.checked_sub(1).ok_or_else(|| invalid("unmatched )"))?;
                out.push(')');
            }
            '^' | '$' if !in_class => {
                out.push(c);
                repeatable = false;
            }
            '|' if !in_class => {
                out.push('|');
                repeatable = false;
            }
            ']' | '}' => out.push_str(if c == ']' { "\\]" } else { "\\}" }),
            '{' => out.push_str("\\{"),
            '.' if !in_class => out.push_str(if modes.dot_all { "(?s:.)" } else { "[^\\n\\r\\u{2028}\\u{2029}]" }),
            c => out.push(c),
        }
    }
    Ok(out)
}

/// What the last item written was, for quantifier checks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quantified {
    No,
    Greedy,
    Lazy,
}

/// Whether `chars[at]` starts a quantifier (`*`, `+`, `?`, `{n}`, `{n,}`, `{n,m}`), outside
/// a class (the caller checks). A `?` right after `(` belongs to the group syntax.
fn is_quantifier_at(chars: &[char], at: usize) -> bool {
    match chars[at] {
        '*' | '+' => true,
        '?' => at == 0 || chars[at - 1] != '(' || escaped(chars, at - 1),
        '{' => quantifier_len(chars, at + 1).is_some(),
        _ => false,
    }
}

/// Whether `chars[at]` is escaped by an odd run of backslashes before it.
fn escaped(chars: &[char], at: usize) -> bool {
    chars[..at].iter().rev().take_while(|&&c| c == '\\').count() % 2 == 1
}

/// `(?flags)` at the very start (XRegExp's leading mode modifier): its length.
fn leading_modifier(chars: &[char]) -> Option<usize> {
    if chars.len() < 4 || chars[0] != '(' || chars[1] != '?' {
        return None;
    }
    let flags = chars[2..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == '_' || **c == '$').count();
    (flags > 0 && chars.get(2 + flags) == Some(&')')).then_some(3 + flags)
}

/// Capturing groups in the pattern (`(` not followed by `?`, and named groups), for telling
/// back-references from octal escapes. A group name used twice is an error, as in JS.
fn count_groups(chars: &[char], explicit_capture: bool) -> Result<usize, RegexError> {
    let mut n = 0;
    let mut names: Vec<String> = Vec::new();
    let mut in_class = false;
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '[' => in_class = true,
            ']' => in_class = false,
            '(' if !in_class => {
                let rest = &chars[i + 1..];
                let name_at = match rest {
                    ['?', 'P', '<', ..] => Some(3),
                    ['?', '<', c, ..] if !matches!(c, '=' | '!') => Some(2),
                    _ => None,
                };
                if let Some(at) = name_at {
                    let name: String = rest[at..].iter().take_while(|&&c| c != '>').collect();
                    if names.contains(&name) {
                        return Err(RegexError::Invalid(format!("group name {name} used twice")));
                    }
                    names.push(name);
                    n += 1;
                } else if rest.first() != Some(&'?') && !explicit_capture {
                    n += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Ok(n)
}

/// An escaped literal character in `fancy-regex` syntax.
fn escape_char(c: char) -> String {
    if c.is_ascii_punctuation() || c.is_whitespace() {
        format!("\\x{{{:x}}}", c as u32)
    } else {
        c.to_string()
    }
}

/// XRegExp's `\p`/`\P` token starting at `chars[at]` (after the letter): `\pL`, `\p{Name}` or
/// `\p{^Name}`. Writes the class and returns where the token ends.
fn unicode_token(chars: &[char], at: usize, negated: bool, out: &mut String) -> Result<usize, RegexError> {
    let (name, end) = match chars.get(at) {
        Some('{') => {
            let close = chars[at..].iter().position(|&c| c == '}').ok_or_else(|| invalid("unclosed \\p{"))?;
            (chars[at + 1..at + close].iter().collect::<String>(), at + close + 1)
        }
        Some(c) if c.is_ascii_alphabetic() => (c.to_string(), at + 1),
        _ => return Err(invalid("invalid Unicode token")),
    };
    let (name, negated) = match name.strip_prefix('^') {
        Some(rest) => (rest.to_string(), !negated),
        None => (name, negated),
    };
    let loose: String = name.chars().filter(|c| !matches!(c, ' ' | '-' | '_')).flat_map(char::to_lowercase).collect();
    if loose.is_empty() {
        return Err(invalid("empty Unicode token"));
    }
    if let Some(block) = loose.strip_prefix("in") {
        if let Some(&(_, lo, hi)) = BLOCKS.iter().find(|(b, _, _)| *b == block) {
            out.push_str(&format!("[{}\\x{{{lo:x}}}-\\x{{{hi:x}}}]", if negated { "^" } else { "" }));
            return Ok(end);
        }
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '-' | '_')) {
        return Err(invalid("invalid Unicode token"));
    }
    out.push_str(if negated { "\\P{" } else { "\\p{" });
    out.push_str(&loose);
    out.push('}');
    Ok(end)
}

fn hex_run(chars: &[char], at: usize, n: usize) -> bool {
    chars.get(at..at + n).is_some_and(|s| s.iter().all(char::is_ascii_hexdigit))
}

/// Length of `n}`, `n,}` or `n,m}` starting at `at` (just after a `{`), if it is one.
fn quantifier_len(chars: &[char], at: usize) -> Option<usize> {
    let digits = |from: usize| chars[from.min(chars.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut j = at;
    let first = digits(j);
    if first == 0 {
        return None;
    }
    j += first;
    if chars.get(j) == Some(&',') {
        j += 1;
        j += digits(j);
    }
    (chars.get(j) == Some(&'}')).then_some(j + 1 - at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(re: &str, s: &str) -> bool {
        xregexp(re).unwrap_or_else(|e| panic!("{re}: {e}")).is_match(s).expect("bounded")
    }

    #[test]
    fn js_regex_syntax_is_translated() {
        assert!(m(r"^\d+$", "123"));
        assert!(!m(r"^\d+$", "١٢٣"));
        assert!(m(r"\w\b", "ab"));
        assert!(m(r"a{", "a{"));
        assert!(m(r"a{2}", "aa"));
        assert!(m(r"a{2,}", "aaa"));
        assert!(m(r"a{2,}?b", "aaab"));
        assert!(m(r"x]", "x]"));
        assert!(m(r"[[a]", "["));
        assert!(m(r"[a&&b]", "&"));
        assert!(m(r"\a\/", "a/"));
        assert!(m(r"\<", "<"));
        assert!(!m(r"^.$", "\u{2028}"));
        assert!(m(r"[^]", "\n"));
        assert!(!m(r"[]", "a"));
        assert!(m(r"\x41\u0042", "AB"));
        assert!(m(r"^(db|zzz)[0-9]+$", "db12"));
        assert!(m(r"a??b", "ab"));
        assert!(js_regex(r"a(").is_err());
        assert!(js_regex(r"a\").is_err());
        // Huge repetitions hit the size limit instead of eating memory.
        assert_eq!(js_regex(r"(\w{100}){100}").err(), Some(RegexError::TooBig));
        assert_eq!(js_regex(&format!("{}a{}", "(".repeat(100), ")".repeat(100))).err(), Some(RegexError::TooBig));
    }

    #[test]
    fn what_javascript_has_and_the_regex_crate_lacks() {
        assert!(m(r"^web(?=\d)", "web1"));
        assert!(!m(r"^web(?!\d)", "web1"));
        assert!(m(r"(?<=db)\d", "db1"));
        assert!(!m(r"(?<!db)\d$", "db1"));
        assert!(m(r"^(\w)\1$", "aa"));
        assert!(!m(r"^(\w)\1$", "ab"));
        assert!(m(r"^(?<x>\w)-\k<x>$", "a-a"));
        assert!(js_regex(r"^(?<x>\w)-\k<x>$").expect("native named groups").is_match("b-b").expect("bounded"));
    }

    #[test]
    fn xregexp_unicode_tokens() {
        assert!(m(r"^\p{L}+$", "Zoë"));
        assert!(m(r"^\pL+$", "Zoë"));
        assert!(!m(r"^\pL+$", "Zo1"));
        assert!(m(r"^\P{N}+$", "abc"));
        assert!(!m(r"^\P{N}+$", "a1"));
        assert!(m(r"^\p{^N}+$", "abc"));
        assert!(m(r"^\p{Latin}+$", "abc"));
        assert!(!m(r"^\p{Latin}+$", "αβγ"));
        assert!(m(r"^\p{Greek}+$", "αβγ"));
        assert!(m(r"^\p{InBasic_Latin}+$", "abc"));
        assert!(!m(r"^\p{InBasic_Latin}+$", "é"));
        assert!(m(r"^\p{In_Latin_1_Supplement}$", "é"));
        assert!(m(r"^[\p{InBasic_Latin}\p{Greek}]+$", "aβ"));
        assert!(m(r"^\p{Uppercase_Letter}", "Éa"));
        assert!(m(r"^\p{Alphabetic}", "a"));
        // Native RegExp reads `\p` as `p`.
        assert!(js_regex(r"^\p{2}$").expect("native").is_match("pp").expect("bounded"));
        assert!(xregexp(r"\p{NotAProperty}").is_err());
    }

    #[test]
    fn xregexp_modes_and_comments() {
        assert!(m(r"(?i)^WEB$", "web"));
        assert!(m(r"(?s)^a.b$", "a\nb"));
        assert!(!m(r"^a.b$", "a\nb"));
        assert!(m(r"(?x) ^ web \d + # trailing comment", "web12"));
        assert!(m(r"^we(?#a comment)b$", "web"));
        // (?n): plain groups do not capture, so `\1` names nothing.
        assert!(m(r"(?n)^(a)(?<b>b)\k<b>$", "abb"));
        assert!(xregexp(r"(?n)(a)\1").is_err());
        assert!(xregexp(r"(?g)a").is_err());
    }

    #[test]
    fn what_the_original_refused_is_refused() {
        for bad in [
            r"a**",
            r"a+*",
            r"a{2}{3}",
            r"*a",
            r"a|*",
            r"^*",
            r"a???",
            r"\01",
            r"(a)\2",
            r"\k<nope>",
            r"(?<a>x)(?<a>y)",
        ] {
            assert!(xregexp(bad).is_err(), "{bad} compiled");
        }
    }

    #[test]
    fn backtracking_is_bounded() {
        let re = xregexp(r"^(a|aa)+\1b$").expect("compiles");
        let text = format!("{}c", "a".repeat(48));
        assert_eq!(re.is_match(&text), Err(TooManySteps));
    }
}
