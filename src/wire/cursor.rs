//! A cursor over a request body's text, for reading it in one pass.
//!
//! Values are read by serde_json from the cursor's position ([`Cursor::value`]). The shapes
//! that make up most of a datacenter-sized body (plain strings, small integers, VM objects)
//! also have fast readers here that accept only input serde_json would read the same way
//! and give up (`None`, cursor unmoved by the caller's reset) on anything else, so that the
//! caller can hand that value to serde_json instead: the result is the same either way.

use serde::Deserialize;

use super::strings::SharedStrings;
use super::vms::VmShape;
use crate::js::Js;
use crate::model::UuidRef;

/// The readers below are `#[inline]`: they run for every value of a datacenter-sized body,
/// and without the hint whether they are inlined into the server and VM readers depends on
/// how the crate happens to be split into codegen units (measured: 8–10% of the CPU of
/// `dapi allocate` at 5000 servers between two builds of the same reader code).
pub(super) struct Cursor<'a> {
    pub text: &'a str,
    pub pos: usize,
    /// The shape of the last VM read, which the next VM most likely has too.
    pub vm_shape: VmShape,
    /// The short strings read lately, handed out again for the same text.
    pub strings: SharedStrings,
}

/// A short list read item by item and held for the whole request, so made at its exact
/// size (a list grown and then shrunk costs two allocations): its first four items
/// gathered in place, any more in a growing list.
pub(super) struct ExactList<T> {
    first: [Option<T>; 4],
    gathered: usize,
    more: Vec<T>,
}

impl<T> Default for ExactList<T> {
    fn default() -> Self {
        ExactList { first: Default::default(), gathered: 0, more: Vec::new() }
    }
}

impl<T> ExactList<T> {
    pub fn push(&mut self, item: T) {
        match self.first.get_mut(self.gathered) {
            Some(slot) => *slot = Some(item),
            None => self.more.push(item),
        }
        self.gathered += 1;
    }

    pub fn finish(self) -> Vec<T> {
        let mut items = Vec::with_capacity(self.gathered);
        items.extend(self.first.into_iter().flatten());
        items.extend(self.more);
        items
    }
}

/// The text of `text` between `start` and `end`, which the caller found next to ASCII
/// bytes (a quote, a colon): both are then char boundaries.
#[inline(always)]
pub fn text_between(text: &str, start: usize, end: usize) -> Option<&str> {
    let bytes = text.as_bytes().get(start..end)?;
    debug_assert!(text.is_char_boundary(start) && text.is_char_boundary(end));
    // SAFETY: `text` is UTF-8 and both ends are next to ASCII bytes, so at boundaries.
    Some(unsafe { std::str::from_utf8_unchecked(bytes) })
}

/// [`Cursor::small_uint`] at `at`: the number and the position after it.
#[inline(always)]
pub fn small_uint_at(bytes: &[u8], at: usize) -> Option<(f64, usize)> {
    small_whole_at(bytes, at).map(|(value, end)| (value as f64, end))
}

/// [`small_uint_at`], the number as the integer it is (below 10^15, so its double is exact).
#[inline(always)]
pub fn small_whole_at(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    let mut end = at;
    while let Some(&d) = bytes.get(end) {
        let digit = d.wrapping_sub(b'0');
        if digit > 9 {
            break;
        }
        value = value * 10 + u64::from(digit);
        end += 1;
        if end - at > 15 {
            return None;
        }
    }
    let digits = end - at;
    if digits == 0 || (digits > 1 && bytes[at] == b'0') {
        return None;
    }
    // What follows must end the number: no fraction, exponent or other character.
    match bytes.get(end) {
        None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') => {}
        Some(_) => return None,
    }
    Some((value, end))
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Cursor<'a> {
        Cursor::at(text, 0)
    }

    pub fn at(text: &'a str, pos: usize) -> Cursor<'a> {
        Cursor { text, pos, vm_shape: VmShape::default(), strings: SharedStrings::default() }
    }

    /// Skips whitespace; the next byte. Bodies as CNAPI sends them have no whitespace
    /// between tokens, so the first byte usually answers.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        let b = *self.text.as_bytes().get(self.pos)?;
        if b > b' ' {
            return Some(b);
        }
        self.skip_whitespace()
    }

    fn skip_whitespace(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.pos) {
            self.pos += 1;
        }
        bytes.get(self.pos).copied()
    }

    /// The byte at `at`, or 0 past the end: 0 is never a token, so a reader that meets it
    /// gives up as it would at the end.
    #[inline(always)]
    pub fn byte_at(&self, at: usize) -> u8 {
        self.text.as_bytes().get(at).copied().unwrap_or(0)
    }

    /// Skips whitespace, if any.
    #[inline(always)]
    pub fn skip_ws(&mut self) {
        if self.byte_at(self.pos) <= b' ' {
            self.skip_whitespace();
        }
    }

    /// The text between `start` and `end`, which the caller found next to ASCII bytes (a
    /// quote, a colon): both are then char boundaries of the body.
    #[inline(always)]
    pub fn str_between(&self, start: usize, end: usize) -> Option<&'a str> {
        text_between(self.text, start, end)
    }

    /// A string without escapes at the cursor (no whitespace before it): where its text
    /// starts and ends; the cursor moves past it. `None` (cursor unmoved) otherwise.
    #[inline(always)]
    pub fn plain_span(&mut self) -> Option<(usize, usize)> {
        if self.byte_at(self.pos) != b'"' {
            return None;
        }
        let start = self.pos + 1;
        let end = crate::scan::string_end(self.text.as_bytes(), start)?;
        if self.byte_at(end) != b'"' {
            return None;
        }
        self.pos = end + 1;
        Some((start, end))
    }

    #[inline(always)]
    pub fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.pos += usize::from(found);
        found
    }

    pub fn expect(&mut self, b: u8) -> serde_json::Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(serde::de::Error::custom(format!("expected `{}` at byte {}", b as char, self.pos)))
        }
    }

    /// Reads the JSON value at the cursor with serde_json (as `JSON.parse` reads it: see
    /// [`crate::js::json`]), returning it and its text. On error the cursor stays at the
    /// value's start.
    pub fn value<T: Deserialize<'a>>(&mut self) -> serde_json::Result<(T, &'a str)> {
        self.peek();
        let rest = &self.text[self.pos..];
        let (v, end) = crate::js::json::from_str_prefix::<T>(rest)?;
        self.pos += end;
        Ok((v, &rest[..end]))
    }

    /// A string without escapes at the cursor, borrowed; `None` (cursor unmoved) otherwise.
    #[inline(always)]
    pub fn plain_str(&mut self) -> Option<&'a str> {
        self.skip_ws();
        let (start, end) = self.plain_span()?;
        self.str_between(start, end)
    }

    /// A lower-case uuid string at the cursor (what the schema's uuid pattern takes),
    /// borrowed; `None` (cursor unmoved) otherwise.
    #[inline(always)]
    pub fn uuid(&mut self) -> Option<UuidRef<'a>> {
        self.skip_ws();
        let start = self.pos + 1;
        if self.byte_at(self.pos) != b'"' || self.byte_at(start + 36) != b'"' {
            return None;
        }
        let uuid = UuidRef::from_bytes(self.text.as_bytes().get(start..start + 36)?)?;
        self.pos = start + 37;
        Some(uuid)
    }

    /// A whole number of 1 to 15 digits without sign, fraction or exponent (which serde_json
    /// reads exactly, as this does); `None` (cursor unmoved) otherwise.
    #[inline(always)]
    pub fn small_uint(&mut self) -> Option<f64> {
        self.peek();
        let (value, end) = small_uint_at(self.text.as_bytes(), self.pos)?;
        self.pos = end;
        Some(value)
    }

    /// A value as [`Js`]: `true`, `false`, `null`, plain strings and small whole numbers
    /// read here, anything else through serde_json.
    pub fn js(&mut self) -> serde_json::Result<Js> {
        if let Some(s) = self.plain_str() {
            return Ok(Js::Str(self.strings.get(s)));
        }
        if let Some(n) = self.small_uint() {
            return Ok(Js::Num(n));
        }
        if let Some(v) = self.literal() {
            return Ok(v);
        }
        let start = self.pos;
        if let Some(v) = self.plain_array_or_empty_object() {
            return Ok(v);
        }
        self.pos = start;
        self.value::<Js>().map(|(v, _)| v)
    }

    /// `{}`, or an array of plain strings and small whole numbers (a NIC's tags): as serde
    /// reads them; `None` (cursor moved) for anything else.
    fn plain_array_or_empty_object(&mut self) -> Option<Js> {
        if self.eat(b'{') {
            return self.eat(b'}').then(|| Js::obj(crate::js::JsObject::default()));
        }
        if !self.eat(b'[') {
            return None;
        }
        if self.eat(b']') {
            return Some(Js::Arr(Vec::new()));
        }
        // Held for the whole request (a server's NIC names, one or two of them).
        let mut items = ExactList::default();
        loop {
            items.push(match self.plain_str() {
                Some(s) => Js::Str(self.strings.get(s)),
                None => Js::Num(self.small_uint()?),
            });
            if self.eat(b']') {
                return Some(Js::Arr(items.finish()));
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// `true`, `false` or `null` at the cursor, followed by what may end a value; `None`
    /// (cursor unmoved) otherwise.
    fn literal(&mut self) -> Option<Js> {
        let rest = self.text.as_bytes().get(self.pos..)?;
        let (value, len) = match rest.first()? {
            b't' if rest.starts_with(b"true") => (Js::Bool(true), 4),
            b'f' if rest.starts_with(b"false") => (Js::Bool(false), 5),
            b'n' if rest.starts_with(b"null") => (Js::Null, 4),
            _ => return None,
        };
        match rest.get(len) {
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') => {}
            Some(_) => return None,
        }
        self.pos += len;
        Some(value)
    }

    /// Steps over the value at the cursor (plain strings quickly, the rest with serde_json,
    /// which checks it is well-formed).
    pub fn skip(&mut self) -> serde_json::Result<()> {
        if self.plain_str().is_some() || self.small_uint().is_some() {
            return Ok(());
        }
        self.value::<serde::de::IgnoredAny>().map(|_| ())
    }

    /// An object key without escapes, and the `:` after it; `None` (cursor unmoved)
    /// otherwise.
    #[inline(always)]
    pub fn key(&mut self) -> Option<&'a str> {
        let start = self.pos;
        let key = self.plain_str();
        if key.is_some() && self.eat(b':') {
            return key;
        }
        self.pos = start;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Numbers short and long, with every ending, in the middle of a text and at its end.
    #[test]
    fn small_whole_numbers_read_as_json_writes_them() {
        let expected = |b: &[u8]| {
            let digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
            let value = b[..digits].iter().fold(0u64, |v, &d| v.wrapping_mul(10).wrapping_add(u64::from(d - b'0')));
            let ends = matches!(b.get(digits), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            (digits > 0 && digits <= 15 && !(digits > 1 && b[0] == b'0') && ends).then_some((value, digits))
        };
        let numbers = ["", "0", "7", "00", "01", "10", "512", "0512", "1048576", "4294967295", "123456789012345"];
        for number in numbers.iter().chain(&["1234567890123456", "1.5", "1e3", "-1", "x"]) {
            for ending in [",", "}", "]", " ", "\t", "\n", "\r", "x", ".", "e", "\"", ""] {
                for padding in ["", "aaaaaaaaaaaaaaaa", "0000000000000000"] {
                    let text = format!("{number}{ending}{padding}");
                    assert_eq!(small_whole_at(text.as_bytes(), 0), expected(text.as_bytes()), "{text:?}");
                    let shifted = format!(" {text}");
                    let at_one = expected(text.as_bytes()).map(|(v, n)| (v, n + 1));
                    assert_eq!(small_whole_at(shifted.as_bytes(), 1), at_one, "{shifted:?}");
                }
            }
        }
    }

    #[test]
    fn fast_reads_agree_with_serde_or_give_up() {
        for text in [
            r#""abc""#,
            r#""a\"b""#,
            "\"a\tb\"",
            r#""é""#,
            r#""""#,
            "0",
            "7",
            "123456789012345",
            "1234567890123456",
            "01",
            "1.5",
            "1e3",
            "-1",
            "12,",
            "12}",
            "12 ",
            "12x",
            "true",
            "true,",
            "truex",
            "false}",
            "fals",
            "null",
            "null ",
            "nul",
            "[1]",
            "[]",
            "[ ]",
            "[\"a\", 2,\"b\"]",
            "[\"a\",]",
            "[\"a\" \"b\"]",
            "[1.5]",
            "[\"a\",\"b\",3,\"c\"]",
            "[\"a\",\"b\",3,\"c\",5]",
            "[1,2,3,4,5,6,7,8,9,\"x\"]",
            "[1,2,3,4,5,1.5]",
            "[[]]",
            "{}",
            "{ }",
            "{\"a\":1}",
        ] {
            let mut c = Cursor::new(text);
            if let Some(s) = c.plain_str() {
                assert_eq!(serde_json::from_str::<String>(text).ok().as_deref(), Some(s), "{text}");
            }
            let mut c = Cursor::new(text);
            if let Some(n) = c.small_uint() {
                let end = c.pos;
                assert_eq!(serde_json::from_str::<f64>(&text[..end]).ok(), Some(n), "{text}");
            }
            let mut c = Cursor::new(text);
            let fast = c.js().ok();
            let slow = serde_json::Deserializer::from_str(text).into_iter::<Js>().next().and_then(Result::ok);
            assert_eq!(fast, slow, "{text}");
        }
    }
}
