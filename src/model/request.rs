//! A request as read (`wire` reads it): the allocation body, and what can be wrong with it.

use serde_json::value::RawValue;

use super::{Image, Package, Server, Ticket, VmPayload};

/// One bad request field: `{field, code, message}` as CNAPI reported it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FieldError {
    pub field: String,
    pub code: String,
    pub message: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), code: "Invalid".into(), message: message.into() }
    }

    /// `field` holds well-formed JSON that cannot be taken (a repeated field): serde_json's
    /// message without its position, which counts from the start of the field's own text
    /// rather than the body's and so would point elsewhere.
    pub fn unreadable(field: impl Into<String>, error: &serde_json::Error) -> FieldError {
        let text = error.to_string();
        let message = match text.rsplit_once(" at line ") {
            Some((message, _)) if error.line() > 0 => message,
            _ => &text,
        };
        FieldError::invalid(field, format!("cannot be read: {message}"))
    }
}

/// A parsed `POST /allocate` body (not yet validated). Strings of the servers' VMs borrow
/// from the body.
#[derive(Debug)]
pub struct AllocateBody<'a> {
    /// Each server's JSON text as received, for the answer and for owner filters.
    pub raw_servers: Vec<&'a str>,
    pub servers: Vec<Server<'a>>,
    pub vm: VmPayload,
    pub image: Image,
    pub package: Option<Package>,
    pub tickets: Vec<Ticket>,
    /// Seed for `score-uniform-random`, overriding the configured one.
    pub seed: Option<u64>,
    /// The members that make the body a batch, read by `crate::batch`.
    pub batch: BatchFields<'a>,
    /// The VM's own `nic_tags` where the top-level `nic_tags` replaced them (`Undefined`
    /// when it had none): CNAPI checked the VM as sent, then the top-level tags
    /// (`crate::validate`).
    pub vm_own_nic_tags: Option<crate::js::Js>,
    /// The JSON text of the other parameters, for plugins that see them whole.
    pub raw: RawParams<'a>,
}

/// The JSON text of the request's `vm`, `image`, `package` and `tickets` as received (absent
/// when not sent), borrowed from the body.
#[derive(Debug, Default, Clone, Copy)]
pub struct RawParams<'a> {
    pub vm: Option<&'a str>,
    pub image: Option<&'a str>,
    pub package: Option<&'a str>,
    pub tickets: Option<&'a str>,
}

/// A batch body's own members, as received: `vms` (one VM payload each) or `count` (copies
/// of `vm`), and `all_or_nothing`. A body with neither `vms` nor `count` is one allocation.
#[derive(Debug, Default, Clone, Copy)]
pub struct BatchFields<'a> {
    pub vms: Option<&'a RawValue>,
    pub count: Option<&'a RawValue>,
    pub all_or_nothing: Option<&'a RawValue>,
}

impl BatchFields<'_> {
    pub fn is_batch(&self) -> bool {
        self.vms.is_some() || self.count.is_some()
    }
}

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Not JSON, or not a JSON object/array where one is required.
    Malformed(String),
    /// Parameters of the wrong type, each named.
    Invalid(Vec<FieldError>),
}

/// The JSON type of a parameter, named as CNAPI's checks name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamType {
    Undefined,
    Null,
    Array,
    Object,
    String,
    Number,
    Boolean,
}

impl ParamType {
    pub fn of(raw: Option<&RawValue>) -> ParamType {
        let Some(raw) = raw else { return ParamType::Undefined };
        match raw.get().trim_start().as_bytes().first() {
            Some(b'{') => ParamType::Object,
            Some(b'[') => ParamType::Array,
            Some(b'"') => ParamType::String,
            Some(b'n') => ParamType::Null,
            Some(b't' | b'f') => ParamType::Boolean,
            _ => ParamType::Number,
        }
    }

    /// `Object.prototype.toString` tag, as in `value is not an object. (was: [object Null])`.
    pub fn tag(self) -> &'static str {
        match self {
            ParamType::Undefined => "[object Undefined]",
            ParamType::Null => "[object Null]",
            ParamType::Array => "[object Array]",
            ParamType::Object => "[object Object]",
            ParamType::String => "[object String]",
            ParamType::Number => "[object Number]",
            ParamType::Boolean => "[object Boolean]",
        }
    }
}
