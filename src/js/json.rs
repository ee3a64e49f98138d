//! `JSON.parse` and `JSON.stringify` where they differ from serde_json.
//!
//! The original read request bodies with `JSON.parse`, which accepts two things serde_json
//! refuses: a string holding a lone UTF-16 surrogate (`"\ud800"` not followed by a low
//! surrogate, or a low one alone), and a number beyond the double range (`1e999`, which is
//! `Infinity`). Everything else the two read alike, so serde_json reads every value first
//! ([`from_str`], [`from_str_prefix`]) and only a value it refuses for one of those two
//! reasons is read again by this module's parser, which reads JSON as `JSON.parse` does
//! into the same serde models.
//!
//! A Rust string cannot hold a lone surrogate, so one is kept as a stand-in character: the
//! lone code unit `0xD800 + k` becomes U+10F800 + k (plane 16's last 2,048 code points,
//! private use). The stand-in stays inside the program; the answers are written through
//! [`to_writer`] (and [`crate::js::Js::stringify`]), which write it back as `JSON.stringify`
//! writes the lone surrogate: the escape `\ud800` (lower-case hex). A character of that
//! range sent as such is therefore echoed as an escape too; plane 16's private use area
//! has no assigned meaning, so nothing a caller sends relies on it.
//!
//! `±Infinity` is a plain `f64`: JavaScript's arithmetic and comparisons on it are IEEE's,
//! and `JSON.stringify` writes it `null` (as [`crate::js::num_to_json`] and serde_json's
//! `Value` do).

use std::io;

use serde::de::{self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// The first of the stand-ins for lone surrogates (that of `0xD800`).
const STAND_IN_BASE: u32 = 0x10_F800;

/// The stand-in character for a lone surrogate code unit (`0xD800..=0xDFFF`).
pub fn lone_surrogate_stand_in(unit: u16) -> char {
    char::from_u32(STAND_IN_BASE + u32::from(unit.saturating_sub(0xD800) & 0x7FF)).unwrap_or('\u{FFFD}')
}

/// The lone surrogate a character stands in for, if it is a stand-in.
pub fn stood_in_surrogate(c: char) -> Option<u16> {
    let c = c as u32;
    (c >= STAND_IN_BASE).then(|| 0xD800 + (c - STAND_IN_BASE) as u16)
}

/// Whether serde_json refused a value for a reason `JSON.parse` does not have.
fn read_differently(e: &serde_json::Error) -> bool {
    let m = e.to_string();
    m.starts_with("lone leading surrogate")
        || m.starts_with("unexpected end of hex escape")
        || m.starts_with("number out of range")
}

/// Reads `T` from the whole of `text` as `JSON.parse` would read it.
pub fn from_str<'a, T: Deserialize<'a>>(text: &'a str) -> serde_json::Result<T> {
    match serde_json::from_str(text) {
        Err(e) if read_differently(&e) => {
            let mut p = Parser::new(text);
            let read = T::deserialize(&mut p).and_then(|v| p.end().map(|()| v));
            p.verdict(read, e)
        }
        other => other,
    }
}

/// [`from_str`] of the first value in `text` (whitespace before it allowed): the value and
/// the length of `text` it took. What may follow is what serde_json's stream reader allows.
pub fn from_str_prefix<'a, T: Deserialize<'a>>(text: &'a str) -> serde_json::Result<(T, usize)> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<T>();
    match stream.next() {
        Some(Ok(v)) => Ok((v, stream.byte_offset())),
        Some(Err(e)) if read_differently(&e) => {
            let mut p = Parser::new(text);
            let read = T::deserialize(&mut p).and_then(|v| p.end_of_value().map(|()| (v, p.pos)));
            p.verdict(read, e)
        }
        Some(Err(e)) => Err(e),
        None => Err(de::Error::custom("unexpected end of input")),
    }
}

/// Writes `value` as JSON as `JSON.stringify` does: serde_json's compact form, with the
/// stand-ins for lone surrogates written as their escapes.
pub fn to_writer<W: io::Write, T: serde::Serialize + ?Sized>(out: W, value: &T) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, Stringify);
    value.serialize(&mut ser)
}

/// [`to_writer`] into a new buffer.
pub fn to_vec<T: serde::Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::new();
    to_writer(&mut out, value)?;
    Ok(out)
}

/// Whether `raw`, the text of one JSON value as read, is written back byte for byte by
/// [`to_writer`] of what [`from_str`] reads from it: no whitespace between tokens, strings
/// without escapes (and without plane 16's last characters, which are written as escapes),
/// numbers only as whole numbers of up to 18 digits without a needless sign or zero
/// (serde_json writes any other number in its own form), and no key twice in an object
/// (the value keeps one). Such text can be copied into an answer instead of read and
/// written again. `false` does not mean the text differs, only that this check does not
/// vouch for it (objects of more than 64 keys in all or 16 deep are not looked at).
pub fn is_written_as_read(raw: &str) -> bool {
    let b = raw.as_bytes();
    // The keys of the open objects, and where each open object's keys begin.
    let mut keys = [(0usize, 0usize); 64];
    let mut listed = 0;
    let mut opened = [0usize; 16];
    let mut depth = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' => {
                let Some(first) = opened.get_mut(depth) else { return false };
                *first = listed;
                depth += 1;
                i += 1;
            }
            b'}' => {
                let Some(d) = depth.checked_sub(1) else { return false };
                depth = d;
                listed = opened[d];
                i += 1;
            }
            b'[' | b']' | b':' | b',' => i += 1,
            b'"' => {
                let start = i + 1;
                i = start;
                loop {
                    match b.get(i) {
                        Some(b'"') => break,
                        // An escape, a control character (refused by the reader anyway), or
                        // the lead byte of a character the writer escapes.
                        Some(b'\\' | 0..=0x1F | 0xF4) | None => return false,
                        Some(_) => i += 1,
                    }
                }
                let text = &b[start..i];
                i += 1;
                if b.get(i) == Some(&b':') && depth > 0 {
                    let siblings = &keys[opened[depth - 1]..listed];
                    if listed == keys.len() || siblings.iter().any(|&(s, e)| &b[s..e] == text) {
                        return false;
                    }
                    keys[listed] = (start, start + text.len());
                    listed += 1;
                }
            }
            b't' if b[i..].starts_with(b"true") => i += 4,
            b'f' if b[i..].starts_with(b"false") => i += 5,
            b'n' if b[i..].starts_with(b"null") => i += 4,
            b'-' | b'0'..=b'9' => {
                let negative = b[i] == b'-';
                i += usize::from(negative);
                let digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
                let zero_led = b.get(i) == Some(&b'0') && (digits > 1 || negative);
                if digits == 0 || digits > 18 || zero_led {
                    return false;
                }
                i += digits;
                if matches!(b.get(i), Some(b'.' | b'e' | b'E')) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// serde_json's compact formatter, but stand-ins are written as `\udXXX` escapes.
struct Stringify;

impl serde_json::ser::Formatter for Stringify {
    fn write_string_fragment<W: ?Sized + io::Write>(&mut self, out: &mut W, fragment: &str) -> io::Result<()> {
        // Stand-ins are four-byte characters starting with 0xF4: most fragments have none.
        if !fragment.as_bytes().contains(&0xF4) {
            return out.write_all(fragment.as_bytes());
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if let Some(unit) = stood_in_surrogate(c) {
                out.write_all(&fragment.as_bytes()[start..i])?;
                write!(out, "\\u{unit:04x}")?;
                start = i + c.len_utf8();
            }
        }
        out.write_all(&fragment.as_bytes()[start..])
    }
}

/// A JSON reader with `JSON.parse`'s two differences from serde_json. It reads the JSON
/// grammar exactly as serde_json does (numbers, escapes, nesting limit), so that a value
/// both can read comes out the same.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    /// Arrays and objects that may still be opened (serde_json's recursion limit).
    depth: u8,
    /// Whether the text broke the grammar (then serde_json's first error stands).
    syntax: bool,
}

type Result<T> = std::result::Result<T, serde_json::Error>;

impl<'a> Parser<'a> {
    fn new(text: &'a str) -> Parser<'a> {
        Parser { text, pos: 0, depth: 128, syntax: false }
    }

    /// The answer of a second reading: a value, or the model's objection to it, or (for
    /// text that is not JSON) serde_json's first error.
    fn verdict<T>(&self, read: Result<T>, first: serde_json::Error) -> Result<T> {
        match read {
            Err(_) if self.syntax => Err(first),
            other => other,
        }
    }

    fn syntax_error(&mut self, what: &str) -> serde_json::Error {
        self.syntax = true;
        de::Error::custom(format!("{what} at byte {}", self.pos))
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&mut self) -> Option<u8> {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes().get(self.pos) {
            self.pos += 1;
        }
        self.bytes().get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.pos += usize::from(found);
        found
    }

    fn expect(&mut self, b: u8, what: &str) -> Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(self.syntax_error(what))
        }
    }

    /// Nothing but whitespace left.
    fn end(&mut self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.syntax_error("trailing characters")),
        }
    }

    /// What serde_json's stream reader requires after a value that does not close itself.
    fn end_of_value(&mut self) -> Result<()> {
        let closed = matches!(self.text.as_bytes()[..self.pos].last(), Some(b'"' | b']' | b'}'));
        match self.bytes().get(self.pos) {
            _ if closed => Ok(()),
            None | Some(b' ' | b'\n' | b'\t' | b'\r' | b'"' | b'[' | b']' | b'{' | b'}' | b',' | b':') => Ok(()),
            Some(_) => Err(self.syntax_error("trailing characters")),
        }
    }

    fn literal(&mut self, word: &str) -> Result<()> {
        if self.bytes()[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.syntax_error("expected value"))
        }
    }

    /// Four hex digits of a `\u` escape.
    fn hex4(&mut self) -> Result<u16> {
        let digits = self.bytes().get(self.pos..self.pos + 4).ok_or_else(|| self.syntax_error("EOF in escape"))?;
        let mut n = 0u16;
        for &d in digits {
            let v = (d as char).to_digit(16).ok_or_else(|| self.syntax_error("invalid escape"))?;
            n = n * 16 + v as u16;
        }
        self.pos += 4;
        Ok(n)
    }

    /// The string at the cursor (its `"` next): borrowed when it has no escapes.
    fn string(&mut self) -> Result<std::borrow::Cow<'a, str>> {
        self.expect(b'"', "expected a string")?;
        let bytes = self.bytes();
        let start = self.pos;
        let mut owned: Option<String> = None;
        let mut chunk = start;
        loop {
            let Some(&b) = bytes.get(self.pos) else {
                return Err(self.syntax_error("EOF while parsing a string"));
            };
            match b {
                b'"' => {
                    let tail = &self.text[chunk..self.pos];
                    self.pos += 1;
                    return Ok(match owned {
                        None => tail.into(),
                        Some(mut s) => {
                            s.push_str(tail);
                            s.into()
                        }
                    });
                }
                b'\\' => {
                    let s = owned.get_or_insert_with(String::new);
                    s.push_str(&self.text[chunk..self.pos]);
                    self.pos += 1;
                    let Some(&e) = bytes.get(self.pos) else {
                        return Err(self.syntax_error("EOF while parsing a string"));
                    };
                    self.pos += 1;
                    let c = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let unit = self.hex4()?;
                            self.unit(unit)?
                        }
                        _ => return Err(self.syntax_error("invalid escape")),
                    };
                    if let Some(s) = owned.as_mut() {
                        s.push(c);
                    }
                    chunk = self.pos;
                }
                0..=0x1f => return Err(self.syntax_error("control character while parsing a string")),
                _ => self.pos += 1,
            }
        }
    }

    /// The character of a `\u` escape's code unit: a surrogate pair when the next escape
    /// completes it, otherwise a lone surrogate's stand-in.
    fn unit(&mut self, unit: u16) -> Result<char> {
        if (0xD800..0xDC00).contains(&unit) && self.bytes()[self.pos..].starts_with(b"\\u") {
            let back = self.pos;
            self.pos += 2;
            let low = self.hex4()?;
            if (0xDC00..0xE000).contains(&low) {
                let c = 0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00);
                return Ok(char::from_u32(c).unwrap_or('\u{FFFD}'));
            }
            // Not a low surrogate: that escape is read on its own.
            self.pos = back;
        }
        Ok(match char::from_u32(u32::from(unit)) {
            Some(c) => c,
            None => lone_surrogate_stand_in(unit),
        })
    }

    /// The number at the cursor, as serde_json hands it to a visitor: a whole number in
    /// `u64` or `i64` as such, anything else as `f64` (±Infinity beyond the double range).
    fn number<V: Visitor<'a>>(&mut self, visitor: V) -> Result<V::Value> {
        let bytes = self.bytes();
        let start = self.pos;
        let negative = bytes.get(self.pos) == Some(&b'-');
        self.pos += usize::from(negative);
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.bytes().get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos - from
        };
        let int_start = self.pos;
        let int_digits = digits(self);
        if int_digits == 0 || (int_digits > 1 && bytes[int_start] == b'0') {
            return Err(self.syntax_error("invalid number"));
        }
        let mut integral = true;
        if bytes.get(self.pos) == Some(&b'.') {
            integral = false;
            self.pos += 1;
            if digits(self) == 0 {
                return Err(self.syntax_error("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = bytes.get(self.pos) {
            integral = false;
            self.pos += 1;
            if let Some(b'+' | b'-') = bytes.get(self.pos) {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.syntax_error("invalid number"));
            }
        }
        let text = &self.text[start..self.pos];
        if integral {
            let magnitude = &self.text[int_start..self.pos];
            if let Ok(n) = magnitude.parse::<u64>() {
                if !negative {
                    return visitor.visit_u64(n);
                }
                if n != 0 && n <= 1 << 63 {
                    return visitor.visit_i64((n as i64).wrapping_neg());
                }
            }
        }
        // Rust's reading is correctly rounded, as serde_json's with `float_roundtrip`.
        let n: f64 = text.parse().map_err(|_| self.syntax_error("invalid number"))?;
        visitor.visit_f64(n)
    }

    /// Steps over the value at the cursor.
    fn skip(&mut self) -> Result<()> {
        de::IgnoredAny::deserialize(self).map(|_| ())
    }

    fn enter(&mut self) -> Result<()> {
        self.depth -= 1;
        if self.depth == 0 {
            return Err(self.syntax_error("recursion limit exceeded"));
        }
        Ok(())
    }
}

impl<'de> Deserializer<'de> for &mut Parser<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        match self.peek() {
            Some(b'n') => {
                self.literal("null")?;
                visitor.visit_unit()
            }
            Some(b't') => {
                self.literal("true")?;
                visitor.visit_bool(true)
            }
            Some(b'f') => {
                self.literal("false")?;
                visitor.visit_bool(false)
            }
            Some(b'"') => match self.string()? {
                std::borrow::Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
                std::borrow::Cow::Owned(s) => visitor.visit_string(s),
            },
            Some(b'-' | b'0'..=b'9') => self.number(visitor),
            Some(b'[') => {
                self.pos += 1;
                self.enter()?;
                let value = visitor.visit_seq(Elements { p: self, first: true })?;
                self.depth += 1;
                if self.eat(b']') {
                    Ok(value)
                } else {
                    Err(self.syntax_error("trailing characters in an array"))
                }
            }
            Some(b'{') => {
                self.pos += 1;
                self.enter()?;
                let value = visitor.visit_map(Members { p: self, first: true })?;
                self.depth += 1;
                if self.eat(b'}') {
                    Ok(value)
                } else {
                    Err(self.syntax_error("trailing characters in an object"))
                }
            }
            Some(_) => Err(self.syntax_error("expected value")),
            None => Err(self.syntax_error("EOF while parsing a value")),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        if self.peek() == Some(b'n') {
            self.literal("null")?;
            visitor.visit_none()
        } else {
            visitor.visit_some(self)
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value> {
        if name == RAW_VALUE_TOKEN {
            // serde_json's `RawValue`: the value's text, as serde_json hands it over.
            self.peek();
            let start = self.pos;
            self.skip()?;
            return visitor.visit_map(RawValueText(Some(&self.text[start..self.pos])));
        }
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value> {
        // Unit variants only, as strings (no model has another kind).
        let variant = self.string()?.into_owned();
        visitor.visit_enum(variant.into_deserializer())
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value> {
        self.deserialize_any(de::IgnoredAny)?;
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct seq tuple tuple_struct map struct identifier
    }
}

/// serde_json's name for the newtype that `RawValue` deserializes through.
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// The one-entry map through which serde_json hands a `RawValue` its text.
struct RawValueText<'a>(Option<&'a str>);

impl<'de> MapAccess<'de> for RawValueText<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.0.is_none() {
            return Ok(None);
        }
        seed.deserialize(de::value::BorrowedStrDeserializer::new(RAW_VALUE_TOKEN)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        let text = self.0.take().unwrap_or("null");
        seed.deserialize(de::value::BorrowedStrDeserializer::new(text))
    }
}

struct Elements<'p, 'a> {
    p: &'p mut Parser<'a>,
    first: bool,
}

impl<'de> SeqAccess<'de> for Elements<'_, 'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>> {
        if self.p.peek() == Some(b']') {
            return Ok(None);
        }
        if !self.first {
            self.p.expect(b',', "expected `,` or `]`")?;
            if self.p.peek() == Some(b']') {
                return Err(self.p.syntax_error("trailing comma"));
            }
        }
        self.first = false;
        seed.deserialize(&mut *self.p).map(Some)
    }
}

struct Members<'p, 'a> {
    p: &'p mut Parser<'a>,
    first: bool,
}

impl<'de> MapAccess<'de> for Members<'_, 'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>> {
        if self.p.peek() == Some(b'}') {
            return Ok(None);
        }
        if !self.first {
            self.p.expect(b',', "expected `,` or `}`")?;
            if self.p.peek() == Some(b'}') {
                return Err(self.p.syntax_error("trailing comma"));
            }
        }
        self.first = false;
        if self.p.peek() != Some(b'"') {
            return Err(self.p.syntax_error("key must be a string"));
        }
        let key = self.p.string()?;
        self.p.expect(b':', "expected `:`")?;
        match key {
            std::borrow::Cow::Borrowed(s) => seed.deserialize(de::value::BorrowedStrDeserializer::new(s)),
            std::borrow::Cow::Owned(s) => seed.deserialize(de::value::StringDeserializer::new(s)),
        }
        .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value> {
        seed.deserialize(&mut *self.p)
    }
}

/// `JSON.stringify(value)` as a string: the JSON text handed to the sandbox, lone surrogates
/// written back as the escapes `JSON.parse` read them from.
pub fn stringify<T: serde::Serialize + ?Sized>(value: &T) -> String {
    to_vec(value).ok().and_then(|bytes| String::from_utf8(bytes).ok()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js::Js;

    /// What the check vouches for is written back byte for byte; what it turns down is
    /// each of the things the writer writes its own way.
    #[test]
    fn text_written_as_read_is_written_back_as_it_was() {
        let plain = [
            r#"{"a":[1,-2,0,true,false,null,"x y"],"b":{"c":{}},"d":[],"e":"é😀"}"#,
            "123456789012345678",
            "-123456789012345678",
            r#""""#,
            r#"{"a":{"k":1},"b":{"k":2},"k":3}"#,
        ];
        let odd = [
            r#"{"a": 1}"#,
            "1.50",
            "1e3",
            "-0",
            "12345678901234567890123",
            r#""a\/b""#,
            r#""\u0041""#,
            "\"\u{10F800}\"",
            r#"{"a":1,"a":2}"#,
            r#"{"o":{"a":1,"b":{},"a":2}}"#,
            "[1,\n2]",
        ];
        for text in plain {
            assert!(is_written_as_read(text), "{text}");
            let value: serde_json::Value = from_str(text).expect("JSON");
            assert_eq!(String::from_utf8(to_vec(&value).expect("JSON")).expect("UTF-8"), text);
        }
        for text in odd {
            assert!(!is_written_as_read(text), "{text}");
            let value: serde_json::Value = from_str(text).expect("JSON");
            assert_ne!(String::from_utf8(to_vec(&value).expect("JSON")).expect("UTF-8"), text, "{text}");
        }
        // Turned down though written back the same: a fraction, an escape, 19 digits (not
        // every such number fits an integer), an object of many keys (not compared).
        assert!(!is_written_as_read("1.5"));
        assert!(!is_written_as_read(r#""a\"b""#));
        assert!(!is_written_as_read("1234567890123456789"));
        let many = format!("{{{}}}", (0..65).map(|i| format!(r#""k{i}":{i}"#)).collect::<Vec<_>>().join(","));
        assert!(!is_written_as_read(&many));
    }

    #[test]
    fn reads_lone_surrogates_and_numbers_beyond_the_double_range() {
        let v: Js =
            from_str(r#"{"a\ud800": ["\udc00x", "\ud83d\ude00", "\ud800\u0041"], "n": [1e999, -1e400, 1e-999]}"#)
                .expect("JSON.parse reads it");
        let stand_in = |u: u16| lone_surrogate_stand_in(u).to_string();
        let key = format!("a{}", stand_in(0xD800));
        assert_eq!(v.get(&key).as_arr().map(<[Js]>::len), Some(3));
        let strings = v.get(&key).as_arr().unwrap_or_default();
        assert_eq!(strings[0], Js::Str(format!("{}x", stand_in(0xDC00)).into()));
        assert_eq!(strings[1], Js::str("\u{1F600}"));
        assert_eq!(strings[2], Js::Str(format!("{}A", stand_in(0xD800)).into()));
        let numbers: Vec<f64> = v.get("n").as_arr().unwrap_or_default().iter().map(Js::num).collect();
        assert_eq!(numbers, [f64::INFINITY, f64::NEG_INFINITY, 0.0]);
        // Written back as JSON.stringify writes them.
        let out = String::from_utf8(to_vec(&v).unwrap_or_default()).unwrap_or_default();
        assert_eq!(out, r#"{"a\ud800":["\udc00x","😀","\ud800A"],"n":[null,null,0]}"#);
        assert_eq!(v.stringify(), out);
    }

    #[test]
    fn reads_what_serde_json_reads_the_same_way() {
        for text in [
            r#"{"a": [1, -0, 0.5, 18446744073709551615, 18446744073709551616, -9223372036854775808, 1e3, "é\n\u00e9", true, null, {}], "b": {"c": []}}"#,
            r#"[12345678901234567890123, -12345678901234567890123, 1.7976931348623157e308, 5e-324]"#,
        ] {
            let serde: Js = serde_json::from_str(text).expect("valid");
            let mut p = Parser::new(text);
            let ours = Js::deserialize(&mut p).and_then(|v| p.end().map(|()| v)).expect("valid");
            assert_eq!(format!("{serde:?}"), format!("{ours:?}"), "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_json() {
        for text in [
            r#""\ud800"x"#,
            r#"["\ud800",]"#,
            r#"{"\ud800" 1}"#,
            r#"["\ud800", 01]"#,
            r#"["\ud800", 1.]"#,
            r#"["\ud800", 1e]"#,
            r#"["\ud800", "\x"]"#,
            r#"["\ud800", "\u12"]"#,
            "[\"\\ud800\", \"\t\"]",
            r#"["\ud800" "#,
            r#"{"a": 1e999,}"#,
            r#"[1e999 1]"#,
        ] {
            assert!(from_str::<Js>(text).is_err(), "{text}");
        }
        let deep = format!("[1e999{}{}", ",[".repeat(200), "]".repeat(201));
        assert!(from_str::<Js>(&deep).is_err());
    }

    #[test]
    fn a_prefix_ends_where_serde_json_ends_it() {
        let (v, end) = from_str_prefix::<Js>(r#" "\ud800" , 2"#).expect("a string");
        assert_eq!(v, Js::Str(lone_surrogate_stand_in(0xD800).to_string().into()));
        assert_eq!(end, 9);
        let (v, end) = from_str_prefix::<Js>("1e999}").expect("a number");
        assert_eq!((v, end), (Js::Num(f64::INFINITY), 5));
        assert!(from_str_prefix::<Js>("1e999x").is_err());
    }

    #[test]
    fn raw_values_keep_their_text() {
        let map: indexmap::IndexMap<String, &serde_json::value::RawValue> =
            from_str(r#"{"\udfff": [1e999, "\ud800"], "b": 2}"#).expect("an object");
        let texts: Vec<&str> = map.values().map(|r| r.get()).collect();
        assert_eq!(texts, [r#"[1e999, "\ud800"]"#, "2"]);
    }
}
