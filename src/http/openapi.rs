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
    /// With `explain=true`: restrict the per-server part of `explain` to these server uuids
    /// (a uuid not in `servers` is answered too).
    pub why_not: Option<Vec<String>>,
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
    /// Only with `explain=true` (or `why_not`); always the last member.
    pub explain: Option<ExplainDoc>,
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
    /// Only with `explain=true` (or `why_not`); always the last member.
    pub explain: Option<ExplainDoc>,
}

/// Why this server, why not the others: added by `explain=true`.
#[derive(Serialize, ToSchema)]
pub struct ExplainDoc {
    pub received: u64,
    pub removed: u64,
    pub remaining: u64,
    /// One line: `412 of 500 servers removed: 300 by hard-filter-min-ram (Servers with
    /// enough unreserved RAM; closest: <uuid> short by 512 MiB ram), ...; 88 left; chosen:
    /// <uuid> (score 3.2, margin 0.4)`.
    pub summary: String,
    /// Removed servers grouped by the step that removed them, most first.
    pub causes: Vec<ExplainCauseDoc>,
    pub winner: Option<ExplainWinnerDoc>,
    /// The best candidates (up to five), best first, with their score breakdown.
    pub top: Vec<ExplainServerDoc>,
    /// Every server received in request order, or those named by `why_not` in its order.
    pub servers: Vec<ExplainServerDoc>,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainCauseDoc {
    pub step: String,
    pub plugin: String,
    pub count: u64,
    /// The removed server that fell shortest (resource filters only).
    pub closest: Option<ExplainClosestDoc>,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainClosestDoc {
    pub server: String,
    pub resource: String,
    pub unit: String,
    pub missing: f64,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainWinnerDoc {
    pub server: String,
    pub score: f64,
    /// Its score minus the runner-up's; absent when it had no rival.
    pub margin: Option<f64>,
    pub runner_up: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainServerDoc {
    pub server: String,
    /// `chosen`, `candidate` (passed every step, not chosen), `removed`, or `not_received`
    /// (named by `why_not` but not in the request).
    pub outcome: String,
    /// For removed servers: where they left.
    pub left: Option<ExplainLeftDoc>,
    /// For candidates: 1 for the chosen server, then by score.
    pub rank: Option<u64>,
    pub score: Option<f64>,
    /// For candidates: the score by scorer, in the order they ran; the contributions add up
    /// to `score`.
    pub scores: Option<Vec<ExplainScoreDoc>>,
    /// For the chosen server: its score minus the runner-up's.
    pub margin: Option<f64>,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainLeftDoc {
    pub step: String,
    pub plugin: String,
    /// The step's reason for this server (`null` where the filter gives none).
    pub reason: Option<String>,
    /// Resource filters (RAM, CPU, disk, free disk, overprovision ratios, VM count): by how
    /// much the server fell short.
    pub shortfalls: Option<Vec<ExplainShortfallDoc>>,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainShortfallDoc {
    /// `ram`, `cpu`, `disk`, `free_disk`, `vms`, or `<cpu|ram|disk|io|net>_ratio`.
    pub resource: String,
    /// `MiB`, `CPU units` (percent of one core), `VMs` or `ratio`.
    pub unit: String,
    pub needed: f64,
    pub available: f64,
    /// `needed - available`.
    pub missing: f64,
}

#[derive(Serialize, ToSchema)]
pub struct ExplainScoreDoc {
    pub plugin: String,
    /// What the scorer placed servers by: unreserved MiB, owner zones, a date, a platform
    /// stamp, or the server's position in the scorer's order.
    #[schema(value_type = Object)]
    pub raw: serde_json::Value,
    /// `contribution / |weight|`.
    pub normalised: f64,
    pub weight: f64,
    pub contribution: f64,
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
    /// The custom plugins loaded from `plugins_dir` (empty when none).
    pub plugins: Vec<CustomPluginInfo>,
}

/// One custom plugin file.
#[derive(Serialize, ToSchema)]
pub struct CustomPluginInfo {
    /// The lookup name (the file name before `.js`), as used in the allocation description.
    pub name: String,
    pub file: String,
    /// The module's `name`: the step name in answers.
    pub step: String,
    /// XXH3 of the file's bytes, hex.
    pub digest: String,
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
        ExplainDoc,
        ExplainCauseDoc,
        ExplainClosestDoc,
        ExplainWinnerDoc,
        ExplainServerDoc,
        ExplainLeftDoc,
        ExplainShortfallDoc,
        ExplainScoreDoc,
        InvalidParametersResponse,
        FieldErrorDoc,
        ErrorResponse,
        CapacityRequest,
        CapacityResponse,
        CapacityEntry,
        PingResponse,
        CustomPluginInfo,
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
