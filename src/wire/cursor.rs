//! A cursor over a request body's text, for reading it in one pass.
//!
//! Values are read by serde_json from the cursor's position ([`Cursor::value`]). The shapes
//! that make up most of a datacenter-sized body (plain strings, small integers, VM objects)
//! also have fast readers here that accept only input serde_json would read the same way
//! and give up (`None`, cursor unmoved by the caller's reset) on anything else, so that the
//! caller can hand that value to serde_json instead: the result is the same either way.

use serde::Deserialize;

use crate::js::Js;

/// The readers below are `#[inline]`: they run for every value of a datacenter-sized body,
/// and without the hint whether they are inlined into the server and VM readers depends on
/// how the crate happens to be split into codegen units (measured: 8–10% of the CPU of
/// `dapi allocate` at 5000 servers between two builds of the same reader code).
pub(super) struct Cursor<'a> {
    pub text: &'a str,
    pub pos: usize,
}

/// Bytes that end the fast read of a string: the quote, a backslash, and control characters
/// (which JSON does not allow raw, so serde_json reports them).
fn string_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The position of the first [`string_stop`] byte at or after `from`, eight bytes at a time.
#[inline]
fn find_string_stop(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Bytes below `n` have their high bit set in the result; the lowest such byte is exact.
    let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGH;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let hits = below(w ^ (ONES * u64::from(b'"')), 1) | below(w ^ (ONES * u64::from(b'\\')), 1) | below(w, 0x20);
        if hits != 0 {
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    bytes.get(i..)?.iter().position(|&b| string_stop(b)).map(|p| i + p)
}

impl<'a> Cursor<'a> {
    pub fn new(text: &'a str) -> Cursor<'a> {
        Cursor { text, pos: 0 }
    }

    /// Skips whitespace; the next byte.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.pos) {
            self.pos += 1;
        }
        bytes.get(self.pos).copied()
    }

    #[inline]
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
    #[inline]
    pub fn plain_str(&mut self) -> Option<&'a str> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let bytes = self.text.as_bytes();
        let start = self.pos + 1;
        let end = find_string_stop(bytes, start)?;
        if bytes[end] != b'"' {
            return None;
        }
        let len = end - start;
        self.pos = end + 1;
        // The body is valid UTF-8 and the quotes are ASCII, so this is a char boundary.
        self.text.get(start..start + len)
    }

    /// A lower-case uuid string at the cursor (what the schema's uuid pattern takes),
    /// borrowed; `None` (cursor unmoved) otherwise.
    #[inline]
    pub fn uuid_str(&mut self) -> Option<&'a str> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let start = self.pos + 1;
        let bytes = self.text.as_bytes();
        if bytes.get(start + 36) != Some(&b'"') || !crate::model::schema::uuid_shaped(bytes.get(start..start + 36)?) {
            return None;
        }
        self.pos = start + 37;
        self.text.get(start..start + 36)
    }

    /// The key at the cursor when it is one of `keys` (given with their closing quote, e.g.
    /// `uuid"`), and the `:` after it: its index; `Some(None)` for any other key without
    /// escapes; `None` (cursor unmoved) for a key with escapes or no key.
    #[inline]
    pub fn known_key(&mut self, keys: &[&str]) -> Option<Option<usize>> {
        if self.peek() != Some(b'"') {
            return None;
        }
        let rest = &self.text.as_bytes()[self.pos + 1..];
        let first = rest.first()?;
        let found = keys.iter().position(|k| k.as_bytes()[0] == *first && rest.starts_with(k.as_bytes()));
        match found {
            Some(i) => {
                let start = self.pos;
                self.pos += 1 + keys[i].len();
                if self.eat(b':') {
                    return Some(Some(i));
                }
                self.pos = start;
                None
            }
            None => self.key().map(|_| None),
        }
    }

    /// A whole number of 1 to 15 digits without sign, fraction or exponent (which serde_json
    /// reads exactly, as this does); `None` (cursor unmoved) otherwise.
    #[inline]
    pub fn small_uint(&mut self) -> Option<f64> {
        self.peek();
        let bytes = self.text.as_bytes();
        let digits = bytes[self.pos..].iter().take(16).take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 || digits > 15 || (digits > 1 && bytes[self.pos] == b'0') {
            return None;
        }
        // What follows must end the number: no fraction, exponent or other character.
        match bytes.get(self.pos + digits) {
            None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') => {}
            Some(_) => return None,
        }
        let value = bytes[self.pos..self.pos + digits].iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
        self.pos += digits;
        Some(value as f64)
    }

    /// A value that has no fast reading: `true`, `false`, `null`, plain strings and small
    /// whole numbers as [`Js`]; anything else through serde_json.
    pub fn js(&mut self) -> serde_json::Result<Js> {
        if let Some(s) = self.plain_str() {
            return Ok(Js::str(s));
        }
        if let Some(n) = self.small_uint() {
            return Ok(Js::Num(n));
        }
        self.value::<Js>().map(|(v, _)| v)
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
    #[inline]
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

    #[test]
    fn finds_the_first_stop_byte() {
        let text: Vec<u8> = (0u8..=255).collect();
        for start in 0..200 {
            for stop in [b'"', b'\\', 0x00, 0x1f] {
                let mut t: Vec<u8> = text.iter().map(|&b| if string_stop(b) { b'a' } else { b }).collect();
                for at in [start, start + 1, start + 7, start + 8, start + 15, start + 40] {
                    if at < t.len() {
                        t[at] = stop;
                        assert_eq!(find_string_stop(&t, start), Some(at), "{stop} at {at} from {start}");
                        t[at] = b'a';
                    }
                }
                assert_eq!(find_string_stop(&t, start), None);
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
            "null",
            "[1]",
            "{}",
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
