//! The OpenAPI description of the service (served at `GET /openapi.json`, checked in as
//! `openapi/openapi.json`). The schema types here document the wire format only.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::{OpenApi, ToSchema};

/// The `steps` query parameter of `/allocate`.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StepsParam {
    Full,
    Removed,
}

/// One plugin run (or `Received by DAPI`, first). The default (`steps=full`, CNAPI's format)
/// has `remaining`; `steps=removed` has `removed` and `remaining_count` instead.
#[derive(Serialize, ToSchema)]
pub struct StepDoc {
    pub step: String,
    /// Uuids of the servers left after this step, in order (`steps=full`).
    pub remaining: Option<Vec<Option<String>>>,
    /// Uuids of the servers this step was given and did not pass on (`steps=removed`).
    pub removed: Option<Vec<Option<String>>>,
    /// How many servers are left after this step (`steps=removed`).
    pub remaining_count: Option<u64>,
    /// Server uuid, `skip` or `*` → message; absent when empty.
    pub reasons: Option<BTreeMap<String, String>>,
}

/// A server was chosen.
#[derive(Serialize, ToSchema)]
pub struct AllocateResponse {
    /// The chosen server as sent, without `vms`, plus `score`, `overprovision_ratios` and
    /// `unreserved_cpu` (percent), `unreserved_ram` (MiB), `unreserved_disk` (MiB).
    #[schema(value_type = Object)]
    pub server: serde_json::Value,
    pub steps: Vec<StepDoc>,
}

/// No server fits (409).
#[derive(Serialize, ToSchema)]
pub struct NoServersResponse {
    /// `NoAllocatableServersError`.
    pub code: String,
    /// `No compute resources available: <reason from the last step>`.
    pub message: String,
    pub steps: Vec<StepDoc>,
}

/// A named bad field.
#[derive(Serialize, ToSchema)]
pub struct FieldErrorDoc {
    pub field: String,
    /// Always `Invalid`.
    pub code: String,
    pub message: String,
}

/// Invalid parameters (422).
#[derive(Serialize, ToSchema)]
pub struct InvalidParametersResponse {
    /// `InvalidParameters`.
    pub code: String,
    /// `Request parameters failed validation`.
    pub message: String,
    pub errors: Vec<FieldErrorDoc>,
}

/// Any other error: `InvalidJson` (400), `ResourceNotFound` (404), `MethodNotAllowed` (405),
/// `PayloadTooLarge` (413), `UnsupportedMediaType` (415), `InternalError` (500),
/// `ServiceUnavailable` (503, with `Retry-After`).
#[derive(Serialize, ToSchema)]
pub struct ErrorResponse {
    pub code: String,
    pub message: String,
}

/// Spare resources of one server.
#[derive(Serialize, ToSchema)]
pub struct CapacityEntry {
    /// Unreserved CPU, percent of one core.
    pub cpu: Option<i64>,
    /// Unreserved RAM, MiB.
    pub ram: Option<i64>,
    /// Unreserved disk, MiB.
    pub disk: Option<i64>,
}

/// Spare resources per server, and why servers were left out.
#[derive(Serialize, ToSchema)]
pub struct CapacityResponse {
    pub capacities: BTreeMap<String, CapacityEntry>,
    pub reasons: BTreeMap<String, String>,
}

/// Health.
#[derive(Serialize, ToSchema)]
pub struct PingResponse {
    /// `OK`.
    pub status: String,
    pub version: String,
    /// Short hash of the loaded allocation description and defaults.
    pub config: String,
    pub uptime_seconds: u64,
}

/// A reload was accepted.
#[derive(Serialize, ToSchema)]
pub struct ReloadResponse {
    /// `reloaded`.
    pub status: String,
    /// Short hash of the now-running allocation description and defaults.
    pub config: String,
}

/// Declares the optional bearer token.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "dapi",
        description = "Designation API: chooses the compute node on which a new VM goes, and reports spare capacity."
    ),
    paths(
        super::handlers::allocate,
        super::handlers::capacity,
        super::handlers::ping,
        super::handlers::openapi_json,
        super::handlers::metrics,
        super::handlers::reload
    ),
    modifiers(&BearerAuth),
    components(schemas(
        StepsParam,
        AllocateResponse,
        NoServersResponse,
        StepDoc,
        InvalidParametersResponse,
        FieldErrorDoc,
        ErrorResponse,
        CapacityResponse,
        CapacityEntry,
        PingResponse,
        ReloadResponse
    ))
)]
pub struct ApiDoc;

/// The document, pretty-printed with a trailing newline (as checked in).
pub fn document() -> String {
    let mut doc = ApiDoc::openapi();
    doc.info.version = env!("CARGO_PKG_VERSION").to_string();
    let mut text = match serde_json::to_value(&doc) {
        Ok(mut value) => {
            if let Some(schemas) = value.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
                schemas.extend(super::request_schema::schemas());
                schemas.sort_keys();
            }
            serde_json::to_string_pretty(&value).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
        }
        Err(e) => format!("{{\"error\": \"{e}\"}}"),
    };
    text.push('\n');
    text
}
