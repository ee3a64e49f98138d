//! Reading request bodies into the typed models.
//!
//! Bodies are read once: servers are kept as borrowed raw JSON (for echoing the chosen
//! server back as received) and parsed into [`Server`]s. Type problems of the top-level
//! parameters are collected and reported together, the way CNAPI's parameter check does.

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Image, Package, Server, Ticket, VmPayload};
use crate::js::Js;
use crate::validate::FieldError;

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

type TopLevel<'a> = IndexMap<String, &'a RawValue>;

fn top_level(body: &[u8]) -> Result<TopLevel<'_>, BodyError> {
    serde_json::from_slice::<TopLevel>(body)
        .map_err(|e| BodyError::Malformed(format!("body is not a JSON object: {e}")))
}

fn not_object(field: &str, t: ParamType) -> FieldError {
    FieldError::invalid(field, format!("value is not an object. (was: {})", t.tag()))
}

fn not_array(field: &str) -> FieldError {
    FieldError::invalid(field, "value was not an array")
}

fn parse_typed<'a, T: Deserialize<'a>>(field: &str, raw: &'a RawValue, errors: &mut Vec<FieldError>) -> Option<T> {
    match serde_json::from_str::<T>(raw.get()) {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(FieldError::invalid(field, format!("cannot be read: {e}")));
            None
        }
    }
}

/// Reads the servers array: every element must be an object.
fn parse_servers<'a>(
    field: &str,
    raw: &'a RawValue,
    errors: &mut Vec<FieldError>,
) -> Option<(Vec<&'a str>, Vec<Server<'a>>)> {
    let raws: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        Err(_) => {
            errors.push(not_array(field));
            return None;
        }
    };
    let mut servers = Vec::with_capacity(raws.len());
    let before = errors.len();
    for (i, r) in raws.iter().enumerate() {
        let t = ParamType::of(Some(r));
        if t != ParamType::Object {
            errors.push(not_object(&format!("{field}[{i}]"), t));
            continue;
        }
        if let Some(s) = parse_typed::<Server>(&format!("{field}[{i}]"), r, errors) {
            servers.push(s);
        }
    }
    (errors.len() == before).then_some((raws.iter().map(|r| r.get()).collect(), servers))
}

/// The `servers` member as read in the one pass over the body.
enum ServersMember<'a> {
    /// An array: each server's text and typed form, or the problems of its elements.
    Array(Result<(Vec<&'a str>, Vec<Server<'a>>), Vec<FieldError>>),
    /// Something else.
    NotArray,
}

/// A cursor over the body text. The top-level object and the servers array are walked here
/// so that each server is read once, straight into its typed form, while its text is
/// remembered; every value itself is read by serde_json from the cursor's position.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.text.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = bytes.get(self.pos) {
            self.pos += 1;
        }
        bytes.get(self.pos).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        let found = self.peek() == Some(b);
        self.pos += usize::from(found);
        found
    }

    fn expect(&mut self, b: u8) -> serde_json::Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(serde::de::Error::custom(format!("expected `{}` at byte {}", b as char, self.pos)))
        }
    }

    /// Reads the JSON value at the cursor, returning it and its text. On error the cursor
    /// stays at the value's start.
    fn value<T: Deserialize<'a>>(&mut self) -> serde_json::Result<(T, &'a str)> {
        self.peek();
        let rest = &self.text[self.pos..];
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<T>();
        match stream.next() {
            Some(Ok(v)) => {
                let end = stream.byte_offset();
                self.pos += end;
                Ok((v, &rest[..end]))
            }
            Some(Err(e)) => Err(e),
            None => Err(serde::de::Error::custom("unexpected end of input")),
        }
    }

    /// The servers array, the cursor being at its `[`.
    fn servers(&mut self) -> serde_json::Result<ServersMember<'a>> {
        self.expect(b'[')?;
        let (mut raws, mut servers, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        let mut i = 0;
        while !self.eat(b']') {
            if i > 0 {
                self.expect(b',')?;
            }
            let field = || format!("servers[{i}]");
            if self.peek() == Some(b'{') {
                match self.value::<Server>() {
                    Ok((server, raw)) => {
                        raws.push(raw);
                        servers.push(server);
                    }
                    // Well-formed JSON the model cannot take (a repeated field).
                    Err(e) if e.classify() == serde_json::error::Category::Data => {
                        errors.push(FieldError::invalid(field(), format!("cannot be read: {e}")));
                        self.value::<serde::de::IgnoredAny>()?;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let (raw, _) = self.value::<&RawValue>()?;
                errors.push(not_object(&field(), ParamType::of(Some(raw))));
            }
            i += 1;
        }
        servers.shrink_to_fit();
        Ok(ServersMember::Array(if errors.is_empty() { Ok((raws, servers)) } else { Err(errors) }))
    }

    /// The top-level object: every member but `servers` as raw JSON (a repeated key keeps
    /// its first position and its last value, as `JSON.parse` does).
    fn allocate_body(&mut self) -> serde_json::Result<(TopLevel<'a>, Option<ServersMember<'a>>)> {
        let (mut top, mut servers) = (TopLevel::new(), None);
        self.expect(b'{')?;
        let mut first = true;
        while !self.eat(b'}') {
            if !first {
                self.expect(b',')?;
            }
            first = false;
            if self.peek() != Some(b'"') {
                return Err(serde::de::Error::custom("expected a key"));
            }
            let (key, _) = self.value::<String>()?;
            self.expect(b':')?;
            if key == "servers" {
                servers = Some(if self.peek() == Some(b'[') {
                    self.servers()?
                } else {
                    self.value::<&RawValue>()?;
                    ServersMember::NotArray
                });
            } else {
                let (raw, _) = self.value::<&RawValue>()?;
                top.insert(key, raw);
            }
        }
        if self.peek().is_some() {
            return Err(serde::de::Error::custom("trailing characters"));
        }
        Ok((top, servers))
    }
}

/// Why a body that could not be walked is malformed, worded as serde_json words it.
fn malformed(body: &[u8], walk_error: serde_json::Error) -> BodyError {
    match top_level(body) {
        Err(e) => e,
        Ok(_) => BodyError::Malformed(format!("body is not a JSON object: {walk_error}")),
    }
}

/// Reads the tickets; a ticket that is not an object gets `validateTickets`' message.
fn parse_tickets(raw: &RawValue, errors: &mut Vec<FieldError>) -> Option<Vec<Ticket>> {
    let raws: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        Err(e) => {
            errors.push(FieldError::invalid("tickets", format!("cannot be read: {e}")));
            return None;
        }
    };
    let mut tickets = Vec::with_capacity(raws.len());
    for r in raws {
        if ParamType::of(Some(r)) != ParamType::Object {
            errors.push(FieldError::invalid("tickets", r#"ticket uuid "undefined" - "ticket" has invalid type"#));
            return None;
        }
        tickets.push(parse_typed::<Ticket>("tickets", r, errors)?);
    }
    Some(tickets)
}

/// Reads a `POST /allocate` body: `{servers, vm, image|img, package|pkg?, tickets?,
/// nic_tags?, nic_tag_requirements?, seed?}`. Top-level `nic_tags` and
/// `nic_tag_requirements` are copied into the VM, as CNAPI did.
pub fn parse_allocate_body(body: &[u8]) -> Result<AllocateBody<'_>, BodyError> {
    let text = std::str::from_utf8(body).map_err(|e| malformed(body, serde::de::Error::custom(e)))?;
    let (top, servers_member) = Cursor { text, pos: 0 }.allocate_body().map_err(|e| malformed(body, e))?;
    let get = |names: &[&str]| names.iter().find_map(|n| top.get(*n).copied());
    let mut errors = Vec::new();

    let servers = match servers_member {
        Some(ServersMember::Array(Ok(servers))) => Some(servers),
        Some(ServersMember::Array(Err(problems))) => {
            errors.extend(problems);
            None
        }
        Some(ServersMember::NotArray) | None => {
            errors.push(not_array("servers"));
            None
        }
    };
    let mut object = |field: &str, names: &[&str], required: bool| -> Option<&RawValue> {
        let raw = get(names);
        match ParamType::of(raw) {
            ParamType::Object => raw,
            ParamType::Undefined if !required => None,
            t => {
                errors.push(not_object(field, t));
                None
            }
        }
    };
    let package_raw = object("package", &["package", "pkg"], false);
    let image_raw = object("image", &["image", "img"], true);
    let vm_raw = object("vm", &["vm"], true);
    let mut array = |field: &str| -> Option<&RawValue> {
        let raw = get(&[field]);
        match ParamType::of(raw) {
            ParamType::Array => raw,
            ParamType::Undefined => None,
            _ => {
                errors.push(not_array(field));
                None
            }
        }
    };
    let nic_tag_requirements = array("nic_tag_requirements");
    let nic_tags = array("nic_tags");
    let tickets_raw = array("tickets");

    let seed = match get(&["seed"]) {
        None => None,
        Some(raw) => match serde_json::from_str::<u64>(raw.get()) {
            Ok(s) => Some(s),
            Err(_) => {
                errors.push(FieldError::invalid("seed", "must be a non-negative integer"));
                None
            }
        },
    };

    let package = package_raw.and_then(|r| parse_typed::<Package>("package", r, &mut errors));
    let image = image_raw.and_then(|r| parse_typed::<Image>("image", r, &mut errors));
    let mut vm = vm_raw.and_then(|r| parse_typed::<VmPayload>("vm", r, &mut errors));
    let tickets = match tickets_raw {
        Some(r) => parse_tickets(r, &mut errors),
        None => Some(Vec::new()),
    };

    if !errors.is_empty() {
        return Err(BodyError::Invalid(errors));
    }
    let (Some((raw_servers, servers)), Some(image), Some(vm_payload), Some(tickets)) =
        (servers, image, vm.as_mut(), tickets)
    else {
        return Err(BodyError::Malformed("body could not be read".into()));
    };
    if let Some(r) = nic_tag_requirements {
        vm_payload.nic_tag_requirements = serde_json::from_str::<Js>(r.get()).unwrap_or_default();
    }
    if let Some(r) = nic_tags {
        vm_payload.nic_tags = serde_json::from_str::<Js>(r.get()).unwrap_or_default();
    }
    let vm = vm.unwrap_or_default();
    Ok(AllocateBody { raw_servers, servers, vm, image, package, tickets, seed })
}

/// Reads a `POST /capacity` body: `{servers: [...]}` or a bare array of servers.
pub fn parse_capacity_body(body: &[u8]) -> Result<(Vec<&str>, Vec<Server<'_>>), BodyError> {
    let root: &RawValue =
        serde_json::from_slice(body).map_err(|e| BodyError::Malformed(format!("body is not JSON: {e}")))?;
    let mut errors = Vec::new();
    let parsed = match ParamType::of(Some(root)) {
        ParamType::Array => parse_servers("servers", root, &mut errors),
        ParamType::Object => {
            let top = top_level(body)?;
            match top.get("servers") {
                Some(r) if ParamType::of(Some(r)) == ParamType::Array => parse_servers("servers", r, &mut errors),
                _ => {
                    errors.push(not_array("servers"));
                    None
                }
            }
        }
        _ => return Err(BodyError::Malformed("body must be an array of servers or {\"servers\": [...]}".into())),
    };
    match parsed {
        Some(p) if errors.is_empty() => Ok(p),
        _ => Err(BodyError::Invalid(errors)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_type_problem_together() {
        let Err(BodyError::Invalid(errs)) = parse_allocate_body(br#"{"servers": 5, "vm": null, "nic_tags": {}}"#)
        else {
            panic!("expected invalid parameters");
        };
        let fields: Vec<_> = errs.iter().map(|e| (e.field.as_str(), e.message.as_str())).collect();
        assert_eq!(
            fields,
            vec![
                ("servers", "value was not an array"),
                ("image", "value is not an object. (was: [object Undefined])"),
                ("vm", "value is not an object. (was: [object Null])"),
                ("nic_tags", "value was not an array"),
            ]
        );
    }

    #[test]
    fn accepts_aliases_and_copies_nic_tags_into_the_vm() {
        let body = br#"{"servers": [{"uuid": "x"}], "vm": {"ram": 1}, "img": {}, "pkg": {"cpu_cap": 5},
                        "nic_tags": ["admin"]}"#;
        let parsed = parse_allocate_body(body).expect("valid body");
        assert_eq!(parsed.servers.len(), 1);
        assert_eq!(parsed.raw_servers[0], r#"{"uuid": "x"}"#);
        assert!(parsed.package.is_some());
        assert_eq!(parsed.vm.nic_tags.stringify(), r#"["admin"]"#);
    }

    #[test]
    fn a_server_that_is_not_an_object_is_named() {
        let Err(BodyError::Invalid(errs)) = parse_allocate_body(br#"{"servers": [{}, 3], "vm": {}, "image": {}}"#)
        else {
            panic!("expected invalid parameters");
        };
        assert_eq!(errs[0].field, "servers[1]");
    }

    #[test]
    fn capacity_takes_an_array_or_an_object() {
        assert_eq!(parse_capacity_body(br#"[{"uuid":"a"}]"#).map(|p| p.1.len()).ok(), Some(1));
        assert_eq!(parse_capacity_body(br#"{"servers":[{"uuid":"a"},{}]}"#).map(|p| p.1.len()).ok(), Some(2));
        assert!(matches!(parse_capacity_body(b"nope"), Err(BodyError::Malformed(_))));
    }
}
