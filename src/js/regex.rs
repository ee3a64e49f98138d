//! JavaScript regular expressions (the `re` affinities): the source is translated to the
//! `regex` crate's syntax where the two differ and compiled with tight size limits.

use regex::{Regex, RegexBuilder};

/// Upper bounds for compiling user regexes.
const REGEX_SIZE_LIMIT: usize = 1 << 18;
const REGEX_NEST_LIMIT: u32 = 64;

/// Compiles a JavaScript regular expression (no flags) with bounded size.
pub fn js_regex(source: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(&translate_js_regex(source))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .nest_limit(REGEX_NEST_LIMIT)
        .build()
}

/// Rewrites JavaScript regex syntax into the `regex` crate's where the two differ: ASCII
/// `\d`/`\w`/`\b`, `.` excluding every JS line terminator, identity escapes (`\a` is `a`),
/// literal `{`, `}` and `]` where they are not syntax, `[`/`&`/`~` literal inside classes,
/// and the empty classes `[]`/`[^]`. Unsupported constructs (look-around, back-references)
/// are left for the compiler to reject.
fn translate_js_regex(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len() + 8);
    let mut in_class = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '\\' => {
                let Some(&n) = chars.get(i) else {
                    out.push('\\'); // a trailing backslash: invalid in both
                    break;
                };
                i += 1;
                match n {
                    'd' => out.push_str("[0-9]"),
                    'D' => out.push_str("[^0-9]"),
                    'w' => out.push_str("[0-9A-Za-z_]"),
                    'W' => out.push_str("[^0-9A-Za-z_]"),
                    'b' if in_class => out.push_str("\\x08"),
                    'b' => out.push_str("(?-u:\\b)"),
                    'B' if !in_class => out.push_str("(?-u:\\B)"),
                    '0' if !chars.get(i).is_some_and(char::is_ascii_digit) => out.push_str("\\x00"),
                    'c' if chars.get(i).is_some_and(char::is_ascii_alphabetic) => {
                        let code = chars[i] as u32 % 32;
                        out.push_str(&format!("\\x{{{code:x}}}"));
                        i += 1;
                    }
                    'x' if hex_run(&chars, i, 2) => {
                        out.push_str("\\x");
                        out.extend(&chars[i..i + 2]);
                        i += 2;
                    }
                    'u' if hex_run(&chars, i, 4) => {
                        out.push_str("\\u{");
                        out.extend(&chars[i..i + 4]);
                        out.push('}');
                        i += 4;
                    }
                    't' | 'n' | 'r' | 'f' | 'v' | 's' | 'S' | '1'..='9' | 'k' => {
                        out.push('\\');
                        out.push(n);
                    }
                    n if n.is_alphanumeric() => out.push(n),
                    n => out.push_str(&regex::escape(n.encode_utf8(&mut [0; 4]))),
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
            ']' | '}' => out.push_str(if c == ']' { "\\]" } else { "\\}" }),
            '{' => match quantifier_len(&chars, i) {
                Some(len) => {
                    out.push('{');
                    out.extend(&chars[i..i + len]);
                    i += len;
                }
                None => out.push_str("\\{"),
            },
            '.' if !in_class => out.push_str("[^\\n\\r\\u{2028}\\u{2029}]"),
            c => out.push(c),
        }
    }
    out
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

    #[test]
    fn js_regex_syntax_is_translated() {
        let m = |re: &str, s: &str| js_regex(re).expect("compiles").is_match(s);
        assert!(m(r"^\d+$", "123"));
        assert!(!m(r"^\d+$", "١٢٣"));
        assert!(m(r"\w\b", "ab"));
        assert!(m(r"a{", "a{"));
        assert!(m(r"a{2}", "aa"));
        assert!(m(r"a{2,}", "aaa"));
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
        assert!(js_regex(r"(?=a)").is_err());
        assert!(js_regex(r"(a)\1").is_err());
        assert!(js_regex(r"a(").is_err());
        assert!(js_regex(r"a\").is_err());
        // Huge repetitions hit the size limit instead of eating memory.
        assert!(js_regex(r"(\w{100}){100}").is_err());
    }
}
