//! The OpenAPI description of the service (served at `GET /openapi.json`, checked in as
//! `openapi/openapi.json`). The schema types here document the wire format only.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

/// `POST /allocate` body.
#[derive(Serialize, ToSchema)]
pub struct AllocateRequest {
    /// Candidate servers: CNAPI server objects, each with the VMs on it in `vms` (keyed by VM uuid).
    #[schema(value_type = Vec<Object>)]
    pub servers: Vec<serde_json::Value>,
    /// The VM payload (`ram` MiB, `quota` GiB, `owner_uuid`, `brand`, `traits`, `affinity`, `locality`, ...).
    /// Required, except in a batch given as `vms`; with `count` it is the VM copied.
    #[schema(value_type = Option<Object>)]
    pub vm: Option<serde_json::Value>,
    /// A batch: VM payloads placed in order, each seeing the ones before it (no server is
    /// booked beyond its room; anti-affinity among them holds). Each may carry its own
    /// `image` and `package`; a VM's uuid is its `vm_uuid` (else `uuid`, else a new one).
    /// Answered with a `BatchResponse`; at most 1000.
    #[schema(value_type = Option<Vec<Object>>)]
    pub vms: Option<Vec<serde_json::Value>>,
    /// A batch of this many copies of `vm` (1 to 1000), each with a new uuid.
    pub count: Option<u64>,
    /// In a batch: if any VM does not fit, answer 409 (`BatchFailedResponse`) and place none.
    pub all_or_nothing: Option<bool>,
    /// The IMGAPI image manifest (`img` is accepted too).
    #[schema(value_type = Object)]
    pub image: serde_json::Value,
    /// The PAPI package (`pkg` is accepted too).
    #[schema(value_type = Option<Object>)]
    pub package: Option<serde_json::Value>,
    /// Open provisioning tickets (CNAPI waitlist tickets).
    #[schema(value_type = Option<Vec<Object>>)]
    pub tickets: Option<Vec<serde_json::Value>>,
    /// NIC tags the VM needs; copied into `vm.nic_tags`.
    pub nic_tags: Option<Vec<String>>,
    /// Groups of alternative NIC tags; copied into `vm.nic_tag_requirements`.
    pub nic_tag_requirements: Option<Vec<Vec<String>>>,
    /// Seed for `score-uniform-random`, making the decision reproducible.
    pub seed: Option<u64>,
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

/// One VM of a batch: its server, or why none fits.
#[derive(Serialize, ToSchema)]
pub struct BatchVmResult {
    /// The VM's uuid (given or generated).
    pub uuid: String,
    /// The chosen server's uuid; null when none fits.
    pub server_uuid: Option<String>,
    /// `NoAllocatableServersError` when none fits.
    pub code: Option<String>,
    /// `No compute resources available: <reason>` when none fits.
    pub message: Option<String>,
    /// Compact (`removed`) unless `steps=full` is asked for.
    pub steps: Vec<StepDoc>,
}

/// A batch's answer (200): every VM in order, and how many were placed or not.
#[derive(Serialize, ToSchema)]
pub struct BatchResponse {
    pub vms: Vec<BatchVmResult>,
    pub placed: u64,
    pub failed: u64,
}

/// The VM of an `all_or_nothing` batch that did not fit.
#[derive(Serialize, ToSchema)]
pub struct BatchFailedVm {
    /// Its position in the batch.
    pub index: u64,
    pub uuid: String,
    pub steps: Vec<StepDoc>,
}

/// An `all_or_nothing` batch that does not fit whole (409): nothing is placed.
#[derive(Serialize, ToSchema)]
pub struct BatchFailedResponse {
    /// `NoAllocatableServersError`.
    pub code: String,
    /// `No compute resources available: vms[i] (<uuid>): <reason>`.
    pub message: String,
    /// Always 0.
    pub placed: u64,
    pub failed: BatchFailedVm,
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

/// `POST /capacity` body: `{"servers": [...]}` (a bare array of servers is accepted too).
#[derive(Serialize, ToSchema)]
pub struct CapacityRequest {
    #[schema(value_type = Vec<Object>)]
    pub servers: Vec<serde_json::Value>,
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
        AllocateRequest,
        AllocateResponse,
        NoServersResponse,
        BatchResponse,
        BatchVmResult,
        BatchFailedResponse,
        BatchFailedVm,
        StepDoc,
        InvalidParametersResponse,
        FieldErrorDoc,
        ErrorResponse,
        CapacityRequest,
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
    let mut text = doc.to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}
