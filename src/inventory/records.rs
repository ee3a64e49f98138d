//! Servers and VMs as fed to the inventory: read by the reader `/allocate` uses, checked
//! against the server schema (an invalid server is refused, not stored: in a request
//! `hard-filter-invalid-servers` would drop it), and split into the server object and its
//! VMs for the store.

use indexmap::IndexMap;
use serde_json::value::RawValue;

use super::store::ServerRecord;
use crate::model::schema::vm_violation;
use crate::model::{BodyError, FieldError, Server};
use crate::validate::validate_server_list;
use crate::wire::parse_capacity_body;

/// Why a feed was refused.
#[derive(Debug)]
pub enum RecordError {
    /// Not JSON, or not of the expected shape (400).
    Malformed(String),
    /// Fields that fail the checks, each named (422).
    Invalid(Vec<FieldError>),
}

impl From<BodyError> for RecordError {
    fn from(e: BodyError) -> RecordError {
        match e {
            BodyError::Malformed(m) => RecordError::Malformed(m),
            BodyError::Invalid(errors) => RecordError::Invalid(errors),
        }
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> RecordError {
    RecordError::Invalid(vec![FieldError::invalid(field, message)])
}

/// One server (`PUT /inventory/servers/{uuid}`): its uuid must be `uuid`. `vms_given`
/// tells whether the body carried `vms` (if not, the stored VMs stay).
pub fn server(body: &[u8], uuid: &str, max_vms: usize) -> Result<(ServerRecord, bool), RecordError> {
    if !crate::model::schema::patterns::is_uuid(uuid) {
        return Err(invalid("uuid", format!("{uuid:?} in the path is not a server uuid")));
    }
    let text = crate::scan::utf8(body).map_err(|e| RecordError::Malformed(format!("body is not UTF-8: {e}")))?;
    let wrapped = format!("[{text}]");
    let (raw, servers) = parse_capacity_body(wrapped.as_bytes()).map_err(|e| match e {
        BodyError::Invalid(errors) => RecordError::Invalid(renamed(errors, "servers[0]", "server")),
        other => other.into(),
    })?;
    let (Some(&raw), Some(server)) = (raw.first(), servers.first()) else {
        return Err(RecordError::Malformed("body must be one server object".into()));
    };
    check(server, "server", max_vms)?;
    if server.uuid.as_str() != Some(uuid) {
        return Err(invalid("server.uuid", format!("must be {uuid}, the uuid in the path")));
    }
    split(raw, uuid)
}

/// A whole dump (`POST /inventory/load`): `{"servers": [...]}` or a bare array.
pub fn dump(body: &[u8], max_vms: usize) -> Result<Vec<ServerRecord>, RecordError> {
    let (raw, servers) = parse_capacity_body(body)?;
    validate_server_list(&servers).map_err(|e| RecordError::Invalid(vec![e]))?;
    let mut records = Vec::with_capacity(servers.len());
    // The store keeps a VM once, on one server: a VM listed twice would lose a copy.
    let mut listed: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for (i, (server, raw)) in servers.iter().zip(raw).enumerate() {
        check(server, &format!("servers[{i}]"), max_vms)?;
        for key in server.vms.as_obj().into_iter().flat_map(|vms| vms.keys()) {
            if let Some(first) = listed.insert(key, i).filter(|&first| first != i) {
                return Err(invalid(format!("servers[{i}].vms.{key}"), format!("VM {key} is on servers[{first}] too")));
            }
        }
        let uuid = server.uuid.as_str().unwrap_or_default();
        records.push(split(raw, uuid)?.0);
    }
    Ok(records)
}

/// A VM (`PUT /inventory/vms/{uuid}`): its object, and the server it is on (its
/// `server_uuid`, else `server_uuid` given apart).
pub fn vm(body: &[u8], uuid: &str, server_uuid: Option<&str>) -> Result<(String, String), RecordError> {
    let text = crate::scan::utf8(body).map_err(|e| RecordError::Malformed(format!("body is not UTF-8: {e}")))?;
    let fields: IndexMap<String, &RawValue> = crate::js::json::from_str(text)
        .map_err(|e| RecordError::Malformed(format!("body must be a VM object: {e}")))?;
    let own = fields.get("server_uuid").and_then(|r| crate::js::json::from_str::<String>(r.get()).ok());
    let server = match (own, server_uuid) {
        (Some(own), Some(given)) if own != given => {
            return Err(invalid("server_uuid", format!("{given} given, but the VM says {own}")))
        }
        (Some(own), _) => own,
        (None, Some(given)) => given.to_string(),
        (None, None) => {
            return Err(invalid("server_uuid", "the VM's server_uuid is needed (in the VM or ?server_uuid=)"))
        }
    };
    let own_uuid = fields.get("uuid").map(|r| crate::js::json::from_str::<String>(r.get()).ok());
    if own_uuid.is_some_and(|own| own.as_deref() != Some(uuid)) {
        return Err(invalid("vm.uuid", format!("must be {uuid}, the uuid in the path")));
    }
    // Read and checked as it would be on a server in a request (a server with such a VM
    // would be refused), to refuse what those refuse.
    let probe = format!(r#"[{{"uuid":{},"vms":{{{}:{text}}}}}]"#, json_str(&server), json_str(uuid));
    let (_, probed) = parse_capacity_body(probe.as_bytes()).map_err(|e| match e {
        // A duplicate field is named at the server the probe wraps the VM in.
        BodyError::Invalid(errors) => {
            RecordError::Invalid(renamed(renamed(errors, "servers[0].vms", "vm"), "servers[0]", "vm"))
        }
        other => other.into(),
    })?;
    let vms = probed.first().and_then(|s| s.vms.as_obj());
    if let Some(violation) = vms.and_then(|vms| vms.iter().find_map(|(key, vm)| vm_violation(key, vm))) {
        return Err(invalid("vm", format!("invalid VM: {violation}")));
    }
    Ok((server, compact(text)))
}

/// A text as stored: without whitespace between tokens (a replica holds every server's
/// text; a pretty-printed feed would take a third more of its memory).
fn compact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    crate::scan::push_compact_json(&mut out, text);
    out
}

fn json_str(s: &str) -> String {
    crate::js::json::stringify(s)
}

fn renamed(errors: Vec<FieldError>, from: &str, to: &str) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|mut e| {
            if let Some(rest) = e.field.strip_prefix(from) {
                let rest = rest.split_once('.').map_or(rest, |(_, r)| r);
                e.field = if rest.is_empty() || rest.starts_with('[') {
                    format!("{to}{rest}")
                } else {
                    format!("{to}.{rest}")
                };
            }
            e
        })
        .collect()
}

/// The checks `/allocate` applies to each server, plus the schema (refused here).
fn check(server: &Server, field: &str, max_vms: usize) -> Result<(), RecordError> {
    if server.uuid.as_str().is_none_or(str::is_empty) {
        return Err(invalid(format!("{field}.uuid"), "must be a string"));
    }
    if let Some(violation) = server.schema_violation() {
        return Err(invalid(field.to_string(), format!("invalid server: {violation}")));
    }
    let n = server.inline_vm_count();
    if n > max_vms {
        return Err(invalid(format!("{field}.vms"), format!("{n} VMs given; the limit is {max_vms}")));
    }
    Ok(())
}

/// The server object with its `vms` object emptied, and the VMs apart, both [`compact`];
/// the flag says whether `vms` was given at all. Read and written as `JSON.parse` and
/// `JSON.stringify` do, so lone surrogates and numbers past the double range are stored
/// as they came.
fn split(raw: &str, uuid: &str) -> Result<(ServerRecord, bool), RecordError> {
    let raw = compact(raw);
    let fields: IndexMap<String, &RawValue> =
        crate::js::json::from_str(&raw).map_err(|e| RecordError::Malformed(format!("server is not an object: {e}")))?;
    let given = fields.contains_key("vms");
    let vms: Option<IndexMap<String, &RawValue>> =
        fields.get("vms").and_then(|raw_vms| crate::js::json::from_str(raw_vms.get()).ok());
    let object = object_text(&fields, vms.is_some().then_some("{}"));
    let vms = vms.map_or_else(Vec::new, |map| map.into_iter().map(|(k, v)| (k, v.get().to_string())).collect());
    Ok((ServerRecord { uuid: uuid.to_string(), object, vms }, given))
}

/// The server's text as a request would carry it: its object with `vms` (uuid → VM)
/// put back where it was (or appended); the inverse of [`split`].
pub fn server_text(record: &ServerRecord) -> Result<String, String> {
    if record.vms.is_empty() {
        return Ok(record.object.clone());
    }
    let mut vms = String::from("{");
    for (i, (uuid, object)) in record.vms.iter().enumerate() {
        if i > 0 {
            vms.push(',');
        }
        vms.push_str(&crate::js::json::stringify(uuid.as_str()));
        vms.push(':');
        vms.push_str(object);
    }
    vms.push('}');
    with_vms(&record.uuid, &record.object, Some(&vms))
}

/// Server `uuid`'s stored `object` with `vms` (the text of an object, uuid → VM) put
/// back.
pub fn with_vms(uuid: &str, object: &str, vms: Option<&str>) -> Result<String, String> {
    let fields: IndexMap<String, &RawValue> =
        crate::js::json::from_str(object).map_err(|e| format!("server {uuid}: {e}"))?;
    Ok(object_text(&fields, vms))
}

/// An object's text from its members' texts, `vms` replaced by `vms` when given (appended
/// when missing). Written by hand rather than through `RawValue`, whose check refuses what
/// `JSON.parse` reads (a lone surrogate): the texts were read that way already.
fn object_text(fields: &IndexMap<String, &RawValue>, vms: Option<&str>) -> String {
    // Room for the brackets a replica puts around it too (cache::ParsedServer).
    // (A key, its quotes, colon and comma: escapes in keys are rare enough to regrow for.)
    let members = fields.iter().map(|(k, v)| k.len() + 4 + v.get().len()).sum::<usize>();
    let mut out = String::with_capacity(members + vms.map_or(0, str::len) + 4);
    out.push('{');
    let mut first = true;
    let mut member = |out: &mut String, key: &str, value: &str| {
        if !std::mem::take(&mut first) {
            out.push(',');
        }
        out.push_str(&crate::js::json::stringify(key));
        out.push(':');
        out.push_str(value);
    };
    for (key, value) in fields {
        match (key.as_str(), vms) {
            ("vms", Some(vms)) => member(&mut out, key, vms),
            _ => member(&mut out, key, value.get()),
        }
    }
    if let (Some(vms), false) = (vms, fields.contains_key("vms")) {
        member(&mut out, "vms", vms);
    }
    out.push('}');
    out
}
