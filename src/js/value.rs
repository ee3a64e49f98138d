//! JavaScript values: truthiness, numeric coercion, `String(x)`, `toFixed`, comparisons,
//! `+` and `JSON.stringify`.

use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value as JavaScript sees it, plus `undefined` for an absent key.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Js {
    #[default]
    Undefined,
    Null,
    Bool(bool),
    Num(f64),
    /// Shared: a datacenter's servers repeat most of their strings, which the body
    /// readers then hold once (`wire::strings`).
    Str(std::sync::Arc<str>),
    Arr(Vec<Js>),
    /// Boxed: objects are rare next to scalars, and this keeps every `Js` at 24 bytes (the
    /// other variants' tags fit in the room a `Vec`'s capacity cannot use).
    Obj(Box<JsObject>),
}

/// An object with JS key order (insertion order; a repeated key keeps its first position).
pub type JsObject = IndexMap<Box<str>, Js>;

/// What `obj[missing]` reads.
pub static UNDEFINED: Js = Js::Undefined;

/// A property of an object: small objects (ratios, requirements) are scanned rather than
/// hashed.
fn obj_get<'o>(o: &'o JsObject, key: &str) -> Option<&'o Js> {
    if o.len() <= 8 {
        o.iter().find(|(k, _)| short_eq(k, key)).map(|(_, v)| v)
    } else {
        o.get(key)
    }
}

/// String equality that compares short strings byte by byte rather than calling `memcmp`.
fn short_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && if a.len() <= 16 { a.iter().zip(b).all(|(x, y)| x == y) } else { a == b }
}

impl Js {
    pub fn str(s: &str) -> Js {
        Js::Str(s.into())
    }

    pub fn obj(o: JsObject) -> Js {
        Js::Obj(Box::new(o))
    }

    pub fn is_undefined(&self) -> bool {
        matches!(self, Js::Undefined)
    }

    /// JS truthiness: `false`, `0`, `-0`, `NaN`, `""`, `null`, `undefined` are falsy.
    pub fn truthy(&self) -> bool {
        match self {
            Js::Undefined | Js::Null => false,
            Js::Bool(b) => *b,
            Js::Num(n) => *n != 0.0 && !n.is_nan(),
            Js::Str(s) => !s.is_empty(),
            Js::Arr(_) | Js::Obj(_) => true,
        }
    }

    /// A filter switch in the defaults is off only when it is set and falsy (absent means on).
    pub fn switched_off(&self) -> bool {
        !self.is_undefined() && !self.truthy()
    }

    /// Unary plus (`+x`).
    #[inline]
    pub fn num(&self) -> f64 {
        match self {
            Js::Num(n) => *n,
            other => other.num_slow(),
        }
    }

    #[cold]
    fn num_slow(&self) -> f64 {
        match self {
            Js::Undefined => f64::NAN,
            Js::Null => 0.0,
            Js::Bool(b) => f64::from(u8::from(*b)),
            Js::Num(n) => *n,
            Js::Str(s) => string_to_number(s),
            Js::Arr(_) => string_to_number(&self.to_js_string()),
            Js::Obj(_) => f64::NAN,
        }
    }

    /// `typeof x` (`null` and arrays are `object`).
    pub fn type_of(&self) -> &'static str {
        match self {
            Js::Undefined => "undefined",
            Js::Bool(_) => "boolean",
            Js::Num(_) => "number",
            Js::Str(_) => "string",
            Js::Null | Js::Arr(_) | Js::Obj(_) => "object",
        }
    }

    /// "Is a hash": a plain object (not null, not an array).
    pub fn as_obj(&self) -> Option<&JsObject> {
        match self {
            Js::Obj(o) => Some(o),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Js::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_arr(&self) -> Option<&[Js]> {
        match self {
            Js::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub fn as_num(&self) -> Option<f64> {
        match self {
            Js::Num(n) => Some(*n),
            _ => None,
        }
    }

    /// `x[key]` for objects; `undefined` for everything else (and for absent keys).
    pub fn get(&self, key: &str) -> &Js {
        match self {
            Js::Obj(o) => obj_get(o, key).unwrap_or(&UNDEFINED),
            _ => &UNDEFINED,
        }
    }

    /// `key in x` for objects.
    pub fn has(&self, key: &str) -> bool {
        matches!(self, Js::Obj(o) if obj_get(o, key).is_some())
    }

    /// `String(x)`.
    pub fn to_js_string(&self) -> String {
        match self {
            Js::Undefined => "undefined".into(),
            Js::Null => "null".into(),
            Js::Bool(b) => b.to_string(),
            Js::Num(n) => fmt_num(*n),
            Js::Str(s) => s.to_string(),
            Js::Arr(items) => items
                .iter()
                .map(|i| match i {
                    Js::Undefined | Js::Null => String::new(),
                    other => other.to_js_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            Js::Obj(_) => "[object Object]".into(),
        }
    }

    /// `JSON.stringify(x)` concatenated into a string (so `undefined` reads `undefined`).
    pub fn stringify(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Js::Undefined => out.push_str("undefined"),
            Js::Null => out.push_str("null"),
            Js::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Js::Num(n) if n.is_finite() => out.push_str(&fmt_num(*n)),
            Js::Num(_) => out.push_str("null"),
            Js::Str(s) => write_json_string(out, s),
            Js::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    match item {
                        Js::Undefined => out.push_str("null"),
                        other => other.write_json(out),
                    }
                }
                out.push(']');
            }
            Js::Obj(o) => {
                out.push('{');
                let mut first = true;
                for (k, v) in o.iter() {
                    if v.is_undefined() {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    write_json_string(out, k);
                    out.push(':');
                    v.write_json(out);
                }
                out.push('}');
            }
        }
    }

    /// Converts to a `serde_json::Value` (`undefined` becomes `null`, NaN `null`).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Js::Undefined | Js::Null => Value::Null,
            Js::Bool(b) => Value::Bool(*b),
            Js::Num(n) => num_to_json(*n),
            Js::Str(s) => Value::String(s.to_string()),
            Js::Arr(a) => Value::Array(a.iter().map(Js::to_json).collect()),
            Js::Obj(o) => Value::Object(
                o.iter().filter(|(_, v)| !v.is_undefined()).map(|(k, v)| (k.to_string(), v.to_json())).collect(),
            ),
        }
    }

    pub fn from_json(v: &serde_json::Value) -> Js {
        use serde_json::Value;
        match v {
            Value::Null => Js::Null,
            Value::Bool(b) => Js::Bool(*b),
            Value::Number(n) => Js::Num(n.as_f64().unwrap_or(f64::NAN)),
            Value::String(s) => Js::str(s),
            Value::Array(a) => Js::Arr(a.iter().map(Js::from_json).collect()),
            Value::Object(o) => Js::obj(o.iter().map(|(k, v)| (k.as_str().into(), Js::from_json(v))).collect()),
        }
    }
}

/// A read-only view of a value: a [`Js`], or a plain string or number that a compact model
/// keeps without building a `Js` (the VMs on servers). Reads follow the same JS rules as
/// the `Js` methods of the same names.
#[derive(Debug, Clone, Copy)]
pub enum JsRef<'a> {
    Undefined,
    Num(f64),
    Str(&'a str),
    Js(&'a Js),
}

impl<'a> From<&'a Js> for JsRef<'a> {
    fn from(v: &'a Js) -> JsRef<'a> {
        JsRef::Js(v)
    }
}

impl<'a> JsRef<'a> {
    /// An optional string: absent reads as `undefined`.
    pub fn opt_str(s: Option<&'a str>) -> JsRef<'a> {
        s.map_or(JsRef::Undefined, JsRef::Str)
    }

    /// A number where NaN marks an absent value (JSON numbers are never NaN).
    pub fn nan_absent(n: f64) -> JsRef<'a> {
        if n.is_nan() {
            JsRef::Undefined
        } else {
            JsRef::Num(n)
        }
    }

    pub fn is_undefined(self) -> bool {
        match self {
            JsRef::Undefined => true,
            JsRef::Js(v) => v.is_undefined(),
            _ => false,
        }
    }

    pub fn as_str(self) -> Option<&'a str> {
        match self {
            JsRef::Str(s) => Some(s),
            JsRef::Js(v) => v.as_str(),
            _ => None,
        }
    }

    pub fn truthy(self) -> bool {
        match self {
            JsRef::Undefined => false,
            JsRef::Num(n) => n != 0.0 && !n.is_nan(),
            JsRef::Str(s) => !s.is_empty(),
            JsRef::Js(v) => v.truthy(),
        }
    }

    pub fn num(self) -> f64 {
        match self {
            JsRef::Undefined => f64::NAN,
            JsRef::Num(n) => n,
            JsRef::Str(s) => string_to_number(s),
            JsRef::Js(v) => v.num(),
        }
    }

    /// `x[key]`: only objects have properties.
    pub fn get(self, key: &str) -> &'a Js {
        match self {
            JsRef::Js(v) => v.get(key),
            _ => &UNDEFINED,
        }
    }

    pub fn has(self, key: &str) -> bool {
        matches!(self, JsRef::Js(v) if v.has(key))
    }

    /// The value as an owned [`Js`].
    pub fn to_js(self) -> Js {
        match self {
            JsRef::Undefined => Js::Undefined,
            JsRef::Num(n) => Js::Num(n),
            JsRef::Str(s) => Js::str(s),
            JsRef::Js(v) => v.clone(),
        }
    }

    pub fn to_js_string(self) -> String {
        match self {
            JsRef::Undefined => "undefined".into(),
            JsRef::Num(n) => fmt_num(n),
            JsRef::Str(s) => s.to_string(),
            JsRef::Js(v) => v.to_js_string(),
        }
    }

    pub fn stringify(self) -> String {
        match self {
            JsRef::Js(v) => v.stringify(),
            other => other.to_js().stringify(),
        }
    }

    /// `self === other`.
    pub fn strict_eq(self, other: &Js) -> bool {
        match (self, other) {
            (JsRef::Js(v), _) => strict_eq(v, other),
            (JsRef::Undefined, Js::Undefined) => true,
            (JsRef::Num(x), Js::Num(y)) => x == *y,
            (JsRef::Str(x), Js::Str(y)) => x == &**y,
            _ => false,
        }
    }
}

/// A number as JSON: integral values print without a fraction, NaN/Infinity as `null`.
pub fn num_to_json(n: f64) -> serde_json::Value {
    if !n.is_finite() {
        return serde_json::Value::Null;
    }
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        // Exact: the magnitude is below 2^53.
        return serde_json::Value::from(n as i64);
    }
    serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

/// A number as [`num_to_json`] gives it, appended as JSON without making a `Value` (answers
/// with thousands of numbers are written this way).
pub fn write_num_json(out: &mut Vec<u8>, n: f64) {
    // The common case, a whole number, without making a `Value`.
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        if n < 0.0 {
            out.push(b'-');
        }
        write_uint_json(out, n.abs() as u64);
        return;
    }
    match num_to_json(n) {
        serde_json::Value::Number(x) => match (x.as_u64(), x.as_i64()) {
            (Some(u), _) => write_uint_json(out, u),
            (None, Some(i)) => {
                out.push(b'-');
                write_uint_json(out, i.unsigned_abs());
            }
            // A fraction: serde_json's float writer, as the serializer would use.
            _ => {
                let _ = serde_json::to_writer(&mut *out, &x);
            }
        },
        _ => out.extend_from_slice(b"null"),
    }
}

/// An unsigned integer as JSON (its decimal digits).
pub fn write_uint_json(out: &mut Vec<u8>, mut u: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            // A lone surrogate read by `JSON.parse` (kept as a stand-in, see `js::json`).
            c => match super::json::stood_in_surrogate(c) {
                Some(unit) => {
                    let _ = write!(out, "\\u{unit:04x}");
                }
                None => out.push(c),
            },
        }
    }
    out.push('"');
}

/// JS `ToNumber` on a string.
pub fn string_to_number(s: &str) -> f64 {
    let t = s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if t.is_empty() {
        return 0.0;
    }
    let radix = |digits: &str, r: u32| {
        if digits.is_empty() {
            return f64::NAN;
        }
        digits
            .chars()
            .try_fold(0f64, |acc, c| c.to_digit(r).map(|d| acc * f64::from(r) + f64::from(d)))
            .unwrap_or(f64::NAN)
    };
    for (prefix, r) in [("0x", 16), ("0X", 16), ("0o", 8), ("0O", 8), ("0b", 2), ("0B", 2)] {
        if let Some(rest) = t.strip_prefix(prefix) {
            return radix(rest, r);
        }
    }
    match t {
        "Infinity" | "+Infinity" => return f64::INFINITY,
        "-Infinity" => return f64::NEG_INFINITY,
        _ => {}
    }
    // Rust's parser also accepts "inf", "nan" and the like, which JS does not.
    let ok = t.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if !ok {
        return f64::NAN;
    }
    t.parse::<f64>().unwrap_or(f64::NAN)
}

/// JS `String(number)`: shortest round-trip digits, exponent form outside [1e-6, 1e21).
pub fn fmt_num(n: f64) -> String {
    if n.is_nan() {
        return "NaN".into();
    }
    if n.is_infinite() {
        return if n > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if n == 0.0 {
        return "0".into();
    }
    // `{:e}` gives the shortest round-trip digits: "d.ddddde±x".
    let sci = format!("{:e}", n.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i32; // number of significant digits
    let point = exp + 1; // position of the decimal point relative to the digits
    let mut out = String::new();
    if n < 0.0 {
        out.push('-');
    }
    if k <= point && point <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (point - k) as usize));
    } else if 0 < point && point <= 21 {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    } else if -6 < point && point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-point) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if point >= 1 { '+' } else { '-' });
        out.push_str(&(point - 1).abs().to_string());
    }
    out
}

/// JS `n.toFixed(2)`: the exact binary value rounded to two decimals, ties away from zero.
pub fn to_fixed2(n: f64) -> String {
    let mut out = String::with_capacity(24);
    push_fixed2(&mut out, n);
    out
}

/// [`to_fixed2`] appended to `out`. Exact and allocation-free: the binary value times 100 is
/// computed as an integer (`m·2^e·100` fits in 128 bits below 1e21) and rounded from its
/// remainder, so no decimal expansion is needed.
pub fn push_fixed2(out: &mut String, n: f64) {
    if n.is_nan() {
        out.push_str("NaN");
        return;
    }
    if n.abs() >= 1e21 || n.is_infinite() {
        out.push_str(&fmt_num(n));
        return;
    }
    if n == 0.0 {
        out.push_str("0.00");
        return;
    }
    let bits = n.abs().to_bits();
    let exp_bits = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, exp) = if exp_bits == 0 { (fraction, -1074) } else { (fraction | 1 << 52, exp_bits - 1075) };
    let scaled = u128::from(mantissa) * 100;
    let cents: u128 = if exp >= 0 {
        scaled << exp
    } else {
        let shift = exp.unsigned_abs();
        if shift >= 127 {
            0
        } else {
            let (q, r) = (scaled >> shift, scaled & ((1u128 << shift) - 1));
            // On an exact tie JS takes the larger magnitude.
            q + u128::from(r >= 1u128 << (shift - 1))
        }
    };
    if n < 0.0 {
        out.push('-');
    }
    push_digits(out, cents / 100);
    out.push('.');
    let frac = (cents % 100) as u8;
    out.push(char::from(b'0' + frac / 10));
    out.push(char::from(b'0' + frac % 10));
}

fn push_digits(out: &mut String, mut v: u128) {
    let mut buf = [0u8; 40];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// JS `<` between two values: objects become strings first (ToPrimitive); two strings
/// compare by UTF-16 code units, anything else as numbers.
pub fn js_lt(a: &Js, b: &Js) -> bool {
    let (a, b) = (to_primitive(a), to_primitive(b));
    match (&*a, &*b) {
        (Js::Str(x), Js::Str(y)) => str_lt(x, y),
        (x, y) => x.num() < y.num(),
    }
}

/// JS `<=`: false whenever a NaN is involved.
pub fn js_le(a: &Js, b: &Js) -> bool {
    let (a, b) = (to_primitive(a), to_primitive(b));
    match (&*a, &*b) {
        (Js::Str(x), Js::Str(y)) => !str_lt(y, x),
        (x, y) => x.num() <= y.num(),
    }
}

pub fn js_gt(a: &Js, b: &Js) -> bool {
    js_lt(b, a)
}

pub fn js_ge(a: &Js, b: &Js) -> bool {
    js_le(b, a)
}

/// Arrays and objects compare through `String(x)`.
fn to_primitive(v: &Js) -> std::borrow::Cow<'_, Js> {
    match v {
        Js::Arr(_) | Js::Obj(_) => std::borrow::Cow::Owned(Js::Str(v.to_js_string().into())),
        other => std::borrow::Cow::Borrowed(other),
    }
}

/// Lexicographic order by UTF-16 code unit, as JS compares strings.
pub fn str_lt(a: &str, b: &str) -> bool {
    str_cmp(a, b).is_lt()
}

/// The order of two strings by UTF-16 code unit. Where the first differing bytes are both
/// ASCII (dates, uuids, names) the bytes decide, as the text before them is the same;
/// elsewhere UTF-8 and UTF-16 orders can differ, so the code units are compared.
pub fn str_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    match x.iter().zip(y).position(|(p, q)| p != q) {
        None => x.len().cmp(&y.len()),
        Some(i) if x[i].is_ascii() && y[i].is_ascii() => x[i].cmp(&y[i]),
        Some(_) => a.encode_utf16().cmp(b.encode_utf16()),
    }
}

/// JS `===`.
pub fn strict_eq(a: &Js, b: &Js) -> bool {
    match (a, b) {
        (Js::Undefined, Js::Undefined) | (Js::Null, Js::Null) => true,
        (Js::Bool(x), Js::Bool(y)) => x == y,
        (Js::Num(x), Js::Num(y)) => x == y,
        (Js::Str(x), Js::Str(y)) => x == y,
        // Distinct parsed objects are never identical.
        _ => false,
    }
}

/// JS binary `+`: concatenation when either side is a string (objects and arrays convert
/// through `String()` first), numeric addition otherwise. The original adds byte counts and
/// sizes this way, so a numeric string on either side concatenates.
pub fn js_add(a: &Js, b: &Js) -> Js {
    let stringy = |v: &Js| matches!(v, Js::Str(_) | Js::Arr(_) | Js::Obj(_));
    if stringy(a) || stringy(b) {
        Js::Str(format!("{}{}", a.to_js_string(), b.to_js_string()).into())
    } else {
        Js::Num(a.num() + b.num())
    }
}

/// JS `Math.min(a, b)` / `Math.max(a, b)` on numbers: NaN wins (Rust's `f64::min` ignores it).
pub fn js_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a < b || (a == b && a.is_sign_negative()) {
        a
    } else {
        b
    }
}

pub fn js_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else if a > b || (a == b && a.is_sign_positive()) {
        a
    } else {
        b
    }
}

impl<'de> Deserialize<'de> for Js {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Js, D::Error> {
        d.deserialize_any(JsVisitor)
    }
}

struct JsVisitor;

impl<'de> Visitor<'de> for JsVisitor {
    type Value = Js;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Js, E> {
        Ok(Js::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Js, E> {
        Ok(Js::Num(v as f64))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Js, E> {
        Ok(Js::Num(v as f64))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Js, E> {
        Ok(Js::Num(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Js, E> {
        Ok(Js::str(v))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Js, E> {
        Ok(Js::Str(v.into()))
    }
    fn visit_unit<E>(self) -> Result<Js, E> {
        Ok(Js::Null)
    }
    fn visit_none<E>(self) -> Result<Js, E> {
        Ok(Js::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Js, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Js::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Js, A::Error> {
        let mut obj = JsObject::with_capacity(map.size_hint().unwrap_or(0));
        while let Some((k, v)) = map.next_entry::<Box<str>, Js>()? {
            // JSON.parse keeps the last value of a repeated key at its first position.
            obj.insert(k, v);
        }
        Ok(Js::obj(obj))
    }
}

impl serde::Serialize for Js {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Js::Undefined | Js::Null => s.serialize_unit(),
            Js::Bool(b) => s.serialize_bool(*b),
            Js::Num(n) => num_to_json(*n).serialize(s),
            Js::Str(v) => s.serialize_str(v),
            Js::Arr(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for item in a {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Js::Obj(o) => {
                let mut map = s.serialize_map(None)?;
                for (k, v) in o.iter().filter(|(_, v)| !v.is_undefined()) {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_takes_twenty_four_bytes() {
        assert_eq!(std::mem::size_of::<Js>(), 24);
    }

    fn js(text: &str) -> Js {
        serde_json::from_str(text).expect("test JSON")
    }

    #[test]
    fn strings_compare_by_utf16_code_unit() {
        let words = [
            "",
            "a",
            "ab",
            "b",
            "2026-01-02T00:00:00Z",
            "2026-01-10T00:00:00Z",
            "é",
            "e\u{301}",
            "\u{ffff}",
            "\u{10000}",
            "a\u{10000}",
            "a\u{ffff}",
            "\u{e000}x",
            "\u{1f600}",
        ];
        for a in words {
            for b in words {
                let expected = a.encode_utf16().cmp(b.encode_utf16());
                assert_eq!(str_cmp(a, b), expected, "{a:?} vs {b:?}");
                assert_eq!(str_lt(a, b), expected.is_lt(), "{a:?} < {b:?}");
            }
        }
        // Where UTF-8 and UTF-16 disagree: U+10000 sorts before U+FFFF in JS.
        assert!(str_lt("\u{10000}", "\u{ffff}"));
    }

    #[test]
    fn plus_concatenates_strings_and_min_max_keep_nan() {
        assert_eq!(js_add(&Js::Num(1.0), &Js::Num(2.0)), Js::Num(3.0));
        assert_eq!(js_add(&Js::str("100"), &Js::Num(0.0)), Js::str("1000"));
        assert_eq!(js_add(&Js::Num(29696.0), &Js::str("")), Js::str("29696"));
        assert!(js_add(&Js::Undefined, &Js::Num(1.0)).num().is_nan());
        assert_eq!(js_add(&Js::Null, &Js::Bool(true)), Js::Num(1.0));
        assert!(js_min(f64::NAN, 1.0).is_nan() && js_min(1.0, f64::NAN).is_nan());
        assert_eq!(js_min(-3.0, 2.0), -3.0);
        assert!(js_max(0.0, f64::NAN).is_nan());
        assert!(js_max(0.0, -0.0).is_sign_positive() && js_max(-0.0, 0.0).is_sign_positive());
    }

    #[test]
    fn number_to_string_matches_js() {
        assert_eq!(fmt_num(512.0), "512");
        assert_eq!(fmt_num(-0.0), "0");
        assert_eq!(fmt_num(1024.0 / 1.5), "682.6666666666666");
        assert_eq!(fmt_num(1e21), "1e+21");
        assert_eq!(fmt_num(1e-7), "1e-7");
        assert_eq!(fmt_num(1.5e-7), "1.5e-7");
        assert_eq!(fmt_num(0.000001), "0.000001");
        assert_eq!(fmt_num(123456789012345680000.0), "123456789012345680000");
        assert_eq!(fmt_num(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(fmt_num(-87.5), "-87.5");
        assert_eq!(fmt_num(f64::NAN), "NaN");
    }

    #[test]
    fn to_fixed_rounds_exact_ties_away_from_zero() {
        assert_eq!(to_fixed2(0.125), "0.13");
        assert_eq!(to_fixed2(0.375), "0.38");
        assert_eq!(to_fixed2(0.625), "0.63");
        assert_eq!(to_fixed2(-0.125), "-0.13");
        assert_eq!(to_fixed2(1.005), "1.00");
        assert_eq!(to_fixed2(-0.0), "0.00");
        assert_eq!(to_fixed2(2.0), "2.00");
        assert_eq!(to_fixed2(3.9999999999999996), "4.00");
        assert_eq!(to_fixed2(f64::NAN), "NaN");
        assert_eq!(to_fixed2(1.0 / 8.0 * 7.0), "0.88");
    }

    /// The formatter-based reference `to_fixed2` was first written as.
    fn to_fixed2_reference(n: f64) -> String {
        if n.is_nan() {
            return "NaN".into();
        }
        if n.abs() >= 1e21 || n.is_infinite() {
            return fmt_num(n);
        }
        if n == 0.0 {
            return "0.00".into();
        }
        let eighths = n * 8.0;
        if eighths.fract() == 0.0 && eighths % 2.0 != 0.0 {
            let cents = (n.abs() * 100.0).ceil();
            let sign = if n < 0.0 { "-" } else { "" };
            let whole = (cents / 100.0).trunc();
            let frac = cents - whole * 100.0;
            return format!("{sign}{whole:.0}.{frac:02.0}");
        }
        format!("{n:.2}")
    }

    #[test]
    fn to_fixed_agrees_with_the_decimal_expansion() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut values = vec![0.005, 0.015, 0.025, 1.005, 2.675, 1e20, 9.99e20, 5e-324, 1e-300, 0.004999, -0.001];
        for _ in 0..200_000 {
            let r = next();
            values.push(f64::from_bits(r) % 1e6);
            values.push((r % 100_000_000) as f64 / 1000.0);
            values.push((r % 1_000_000) as f64 / 8.0 - 60_000.0);
            values.push((r >> 11) as f64 * (1.0 / (1u64 << 40) as f64));
        }
        for v in values.into_iter().filter(|v| v.is_finite()) {
            assert_eq!(to_fixed2(v), to_fixed2_reference(v), "{v:e}");
        }
    }

    #[test]
    fn coercions() {
        assert_eq!(js(r#""2""#).num(), 2.0);
        assert_eq!(js(r#""""#).num(), 0.0);
        assert!(js(r#""abc""#).num().is_nan());
        assert_eq!(js("true").num(), 1.0);
        assert_eq!(js("null").num(), 0.0);
        assert!(Js::Undefined.num().is_nan());
        assert_eq!(js("[]").num(), 0.0);
        assert_eq!(js("[5]").num(), 5.0);
        assert!(js(r#""inf""#).num().is_nan());
        assert_eq!(js(r#"" 0x1A ""#).num(), 26.0);
        assert!(js(r#""0""#).truthy());
        assert!(!js("0").truthy());
        assert!(js("[]").truthy());
    }

    #[test]
    fn stringify_and_string_forms() {
        let v = js(r#"{"b":1.0,"a":[true,null,"x\"y"],"c":0.5}"#);
        assert_eq!(v.stringify(), r#"{"b":1,"a":[true,null,"x\"y"],"c":0.5}"#);
        assert_eq!(Js::Undefined.stringify(), "undefined");
        assert_eq!(js("[1,[2,3],null]").to_js_string(), "1,2,3,");
        assert_eq!(js("{}").to_js_string(), "[object Object]");
    }

    #[test]
    fn comparisons() {
        assert!(js_lt(&Js::str("10.0"), &Js::str("7.0")));
        assert!(!js_lt(&Js::Undefined, &Js::str("7.0")));
        assert!(!js_ge(&Js::Undefined, &Js::str("7.0")));
        assert!(js_ge(&Js::str("20170316T213525Z"), &Js::str("20160613T123039Z")));
        assert!(js_lt(&Js::Num(2.0), &Js::str("10")));
        assert!(js_lt(&js("[\"10\"]"), &Js::str("7")));
        assert!(!js_lt(&js("{}"), &Js::str("[object Array]")));
    }

    #[test]
    fn repeated_keys_keep_first_position_last_value() {
        let v = js(r#"{"a":1,"b":2,"a":3}"#);
        assert_eq!(v.stringify(), r#"{"a":3,"b":2}"#);
    }
}
