//! The parts of the `json-schema` 0.4.0 validator (through `jsprim.validateJsonObject`) that
//! the dapi schemas exercise, with its lax semantics (`VALIDATION.md` §9.2–9.4):
//!
//! * `integer` accepts anything whose `x % 1 === 0` under JS coercion (`"5"`, `null`, `[]`);
//! * `object` is `typeof x == "object"` (arrays and `null` pass, and skip nested checks);
//! * `minimum`/`maximum` apply to numbers only, `pattern`/`minLength` to strings only;
//! * `exclusiveMinimum` and `patternProperties` are ignored.
//!
//! Reasons come back lower-cased and the caller wraps them as `property "<path>": <reason>`.
//! Nothing allocates unless a violation is found.

use crate::js::{fmt_num, Js};

pub mod patterns;
mod server;

pub use patterns::{is_platform, is_uuid, uuid_shaped};
pub use server::{plain_numbers_valid, still_valid_after, validate_server, vm_violation};

/// A schema `type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    Integer,
    Number,
    String,
    Boolean,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Integer => "integer",
            Ty::Number => "number",
            Ty::String => "string",
            Ty::Boolean => "boolean",
        }
    }

    fn accepts(self, v: &Js) -> bool {
        match self {
            // `typeof v != "integer"` always holds, so only `v % 1 === 0` lets a value pass.
            Ty::Integer => {
                // `n % 1 === 0`, without a libm call.
                let n = v.num();
                n.is_finite() && n.trunc() == n
            }
            Ty::Number => matches!(v, Js::Num(_)),
            Ty::String => matches!(v, Js::Str(_)),
            Ty::Boolean => matches!(v, Js::Bool(_)),
        }
    }
}

/// A string `pattern` of the schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Uuid,
    Ipv4,
}

impl Pattern {
    fn matches(self, s: &str) -> bool {
        match self {
            Pattern::Uuid => patterns::is_uuid(s),
            Pattern::Ipv4 => patterns::is_ipv4(s),
        }
    }

    /// The pattern as the message prints it (already lower-case).
    fn source(self) -> &'static str {
        match self {
            Pattern::Uuid => "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
            Pattern::Ipv4 => r"^(?:(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])\.){3}(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])$",
        }
    }
}

/// A schema for a scalar value.
#[derive(Debug, Clone, Copy)]
pub struct Leaf {
    pub ty: Ty,
    pub required: bool,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub min_length: usize,
    pub pattern: Option<Pattern>,
    pub enumeration: &'static [&'static str],
}

impl Leaf {
    pub const fn of(ty: Ty) -> Leaf {
        Leaf { ty, required: false, minimum: None, maximum: None, min_length: 0, pattern: None, enumeration: &[] }
    }
    pub const fn required(mut self) -> Leaf {
        self.required = true;
        self
    }
    pub const fn min(mut self, n: f64) -> Leaf {
        self.minimum = Some(n);
        self
    }
    pub const fn max(mut self, n: f64) -> Leaf {
        self.maximum = Some(n);
        self
    }
    pub const fn min_len(mut self, n: usize) -> Leaf {
        self.min_length = n;
        self
    }
    pub const fn pattern(mut self, p: Pattern) -> Leaf {
        self.pattern = Some(p);
        self
    }
    pub const fn one_of(mut self, values: &'static [&'static str]) -> Leaf {
        self.enumeration = values;
        self
    }

    /// The first violation of `v` against this schema, as a lower-cased reason.
    #[inline]
    pub fn check(&self, v: &Js) -> Option<String> {
        if self.passes_at_once(v) {
            return None;
        }
        self.first_violation(v)
    }

    /// Whether `v` is a number or a flag this leaf takes as it is: what nearly every
    /// server's numbers and flags are, told without the general walk (a server is checked
    /// field by field on every request).
    #[inline]
    fn passes_at_once(&self, v: &Js) -> bool {
        match *v {
            // Patterns and lengths apply to strings only; an enumeration lists strings.
            Js::Num(n) => {
                // NaN (which JSON never holds) takes the general walk.
                self.enumeration.is_empty()
                    && self.ty.accepts(v)
                    && self.minimum.is_none_or(|min| min <= n)
                    && self.maximum.is_none_or(|max| n <= max)
            }
            Js::Bool(_) => self.ty == Ty::Boolean && self.enumeration.is_empty(),
            _ => false,
        }
    }

    fn first_violation(&self, v: &Js) -> Option<String> {
        if v.is_undefined() {
            return self.required.then(missing);
        }
        if !self.ty.accepts(v) {
            return Some(type_error(v, self.ty.name()));
        }
        match v {
            Js::Str(s) => {
                if let Some(p) = self.pattern {
                    if !p.matches(s) {
                        return Some(format!("does not match the regex pattern {}", p.source()));
                    }
                }
                // Lengths count UTF-16 code units, as JS `length` does.
                if self.min_length > 0 && s.encode_utf16().count() < self.min_length {
                    return Some(format!("must be at least {} characters long", self.min_length));
                }
            }
            Js::Num(n) => {
                if let Some(min) = self.minimum {
                    if min > *n {
                        return Some(format!("must have a minimum value of {}", fmt_num(min)));
                    }
                }
                if let Some(max) = self.maximum {
                    if max < *n {
                        return Some(format!("must have a maximum value of {}", fmt_num(max)));
                    }
                }
            }
            // `null` skips every further check; arrays have no `items` in a leaf schema.
            _ => return None,
        }
        if !self.enumeration.is_empty() && !matches!(v, Js::Str(s) if self.enumeration.contains(&&**s)) {
            return Some(format!("does not have a value in the enumeration {}", self.enumeration.join(", ")));
        }
        None
    }
}

/// `is missing and it is required`.
pub fn missing() -> String {
    "is missing and it is required".into()
}

/// `<value> - <typeof> value found, but a <type> is required`, lower-cased.
pub fn type_error(v: &Js, schema_type: &str) -> String {
    type_error_of(&v.to_js_string(), v.type_of(), schema_type)
}

/// [`type_error`] from a value's string form and `typeof`.
pub fn type_error_of(value: &str, js_type: &str, schema_type: &str) -> String {
    format!("{} - {js_type} value found, but a {schema_type} is required", value.to_lowercase())
}

/// `property "<path>": <reason>`.
pub fn property(path: &str, reason: &str) -> String {
    format!("property \"{path}\": {reason}")
}

/// The received value of an `object`-typed property, when its properties are to be checked:
/// `Ok(None)` when absent (and optional), `null` or an array (nothing nested is checked).
pub fn object(v: &Js, required: bool) -> Result<Option<&crate::js::JsObject>, String> {
    match v {
        Js::Undefined if required => Err(missing()),
        Js::Obj(o) => Ok(Some(o)),
        Js::Undefined | Js::Null | Js::Arr(_) => Ok(None),
        other => Err(type_error(other, "object")),
    }
}

/// [`object`] for a typed field.
pub fn shape<T>(v: &crate::model::Shape<T>, required: bool) -> Result<Option<&T>, String> {
    use crate::model::Shape;
    match v {
        Shape::Absent if required => Err(missing()),
        Shape::Absent => Ok(None),
        Shape::Obj(t) => Ok(Some(t)),
        Shape::Other(other) => object(other, required).map(|_| None),
    }
}

/// An `array`-typed value: its elements, or why it is not an array (`null` is not).
pub fn array(v: &Js, required: bool) -> Result<Option<&[Js]>, String> {
    match v {
        Js::Undefined if required => Err(missing()),
        Js::Undefined => Ok(None),
        Js::Arr(items) => Ok(Some(items)),
        other => Err(type_error(other, "array")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn js(text: &str) -> Js {
        serde_json::from_str(text).expect("test JSON")
    }

    #[test]
    fn integer_is_lax() {
        let leaf = Leaf::of(Ty::Integer).required().min(1.0);
        for ok in ["5", r#""5""#, r#""""#, "true", "false", "null", "[]", "[7]", r#"["3"]"#, "[[]]", r#""0""#] {
            assert_eq!(leaf.check(&js(ok)), None, "{ok}");
        }
        assert_eq!(leaf.check(&js("1.5")).as_deref(), Some("1.5 - number value found, but a integer is required"));
        assert_eq!(leaf.check(&js(r#""ABC""#)).as_deref(), Some("abc - string value found, but a integer is required"));
        assert_eq!(leaf.check(&js(r#""5.5""#)).as_deref(), Some("5.5 - string value found, but a integer is required"));
        assert_eq!(
            leaf.check(&js("{}")).as_deref(),
            Some("[object object] - object value found, but a integer is required")
        );
        assert_eq!(leaf.check(&js("[1,2]")).as_deref(), Some("1,2 - object value found, but a integer is required"));
        assert_eq!(leaf.check(&js("0")).as_deref(), Some("must have a minimum value of 1"));
        assert_eq!(leaf.check(&Js::Undefined).as_deref(), Some("is missing and it is required"));
        assert_eq!(Leaf::of(Ty::Integer).check(&Js::Undefined), None);
    }

    #[test]
    fn strict_types_and_bounds() {
        let ratio = Leaf::of(Ty::Number).required().min(0.0).max(1.0);
        assert_eq!(ratio.check(&js("1.5")).as_deref(), Some("must have a maximum value of 1"));
        assert_eq!(ratio.check(&js("-0.5")).as_deref(), Some("must have a minimum value of 0"));
        assert_eq!(ratio.check(&js(r#""0.1""#)).as_deref(), Some("0.1 - string value found, but a number is required"));
        assert_eq!(ratio.check(&js("null")).as_deref(), Some("null - object value found, but a number is required"));
        let flag = Leaf::of(Ty::Boolean).required();
        assert_eq!(
            flag.check(&js(r#""FALSE""#)).as_deref(),
            Some("false - string value found, but a boolean is required")
        );
        assert_eq!(
            flag.check(&js("[true, 1]")).as_deref(),
            Some("true,1 - object value found, but a boolean is required")
        );
    }

    #[test]
    fn strings_pattern_length_enum() {
        let status = Leaf::of(Ty::String).required().one_of(&["up", "down", "unknown"]);
        assert_eq!(status.check(&js(r#""up""#)), None);
        assert_eq!(
            status.check(&js(r#""UP""#)).as_deref(),
            Some("does not have a value in the enumeration up, down, unknown")
        );
        assert_eq!(status.check(&js("5")).as_deref(), Some("5 - number value found, but a string is required"));
        let image = Leaf::of(Ty::String).required().min_len(1);
        assert_eq!(image.check(&js(r#""""#)).as_deref(), Some("must be at least 1 characters long"));
        let ip = Leaf::of(Ty::String).pattern(Pattern::Ipv4);
        assert!(ip.check(&js(r#""1.2.3""#)).is_some_and(|m| m.starts_with("does not match the regex pattern ^(?:")));
        assert_eq!(ip.check(&js(r#""10.0.0.1""#)), None);
    }

    #[test]
    fn objects_and_arrays() {
        assert_eq!(object(&js("null"), true), Ok(None));
        assert_eq!(object(&js("[1]"), true), Ok(None));
        assert_eq!(object(&Js::Undefined, false), Ok(None));
        assert_eq!(object(&Js::Undefined, true), Err(missing()));
        assert_eq!(
            object(&js(r#""Sysinfo""#), true),
            Err("sysinfo - string value found, but a object is required".into())
        );
        assert_eq!(array(&js("null"), true), Err("null - object value found, but a array is required".into()));
        assert_eq!(array(&js("{}"), true), Err("[object object] - object value found, but a array is required".into()));
    }

    /// The quick pass for numbers and flags says no more than the general walk: every leaf
    /// shape against values at and around its bounds.
    #[test]
    fn the_quick_pass_agrees_with_the_walk() {
        let leaves = [
            Leaf::of(Ty::Integer).required().min(0.0),
            Leaf::of(Ty::Integer).min(1.0),
            Leaf::of(Ty::Number).required().min(0.0).max(1.0),
            Leaf::of(Ty::Number),
            Leaf::of(Ty::Boolean).required(),
            Leaf::of(Ty::String).required().pattern(Pattern::Uuid),
            Leaf::of(Ty::String).one_of(&["up", "down"]),
            Leaf::of(Ty::Integer).one_of(&["1"]),
            Leaf::of(Ty::Boolean).one_of(&["true"]),
        ];
        let mut values: Vec<Js> =
            [0.0, -0.0, 0.5, 1.0, 1.5, -1.0, 2.0, 1e300, f64::NAN, f64::INFINITY, f64::NEG_INFINITY]
                .into_iter()
                .map(Js::Num)
                .collect();
        values.extend([Js::Bool(true), Js::Bool(false), Js::Null, Js::Undefined, js(r#""1""#), js("[]"), js("{}")]);
        for leaf in &leaves {
            for v in &values {
                assert_eq!(leaf.check(v), leaf.first_violation(v), "{leaf:?} {v:?}");
            }
        }
    }
}
