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
    Counts,
}

/// One plugin run (or `Received by DAPI`, first). The default (`steps=full`, CNAPI's format)
/// has `remaining`; `steps=removed` has `removed` and `remaining_count` instead;
/// `steps=counts` only `remaining_count`.
#[derive(Serialize, ToSchema)]
pub struct StepDoc {
    pub step: String,
    /// Uuids of the servers left after this step, in order (`steps=full`).
    pub remaining: Option<Vec<Option<String>>>,
    /// Uuids of the servers this step was given and did not pass on (`steps=removed`).
    pub removed: Option<Vec<Option<String>>>,
    /// How many servers are left after this step (`steps=removed`, `steps=counts`).
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

/// The 200 answer of `/allocate`: one VM's, or a batch's.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum AllocateOrBatchResponse {
    One(Box<AllocateResponse>),
    Batch(BatchResponse),
}

/// The 409 answer of `/allocate`: CNAPI's error, or an `all_or_nothing` batch's.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum NoFitResponse {
    One(NoServersResponse),
    Batch(BatchFailedResponse),
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
    /// With `packages`: free and total CPU, RAM, disk over usable servers, and apart over
    /// reserved and unusable ones (with counts and why).
    #[schema(value_type = Option<Object>)]
    pub totals: Option<serde_json::Value>,
    /// With `packages`, one per package, in order.
    pub packages: Option<Vec<PackageSlotsDoc>>,
}

/// How many more VMs of one package fit.
#[derive(Serialize, ToSchema)]
pub struct PackageSlotsDoc {
    /// The package's `uuid`, else its `name`, else its index.
    pub package: serde_json::Value,
    /// Analytic count over the datacenter (an upper bound of `exact.slots`).
    pub slots: u64,
    pub servers_with_room: u64,
    /// How many servers each dimension limits: `ram`, `cpu`, `disk`, `vms`, `<dim>_ratio`.
    pub limiting: BTreeMap<String, u64>,
    /// What is left on the other dimensions once the limiting one is full (MiB, CPU units,
    /// MiB), summed over the servers.
    #[schema(value_type = Object)]
    pub stranded: serde_json::Value,
    /// Per server uuid: `{slots, limiting, stranded: {ram, cpu, disk}}` (`null`: the
    /// dimension does not bound this package).
    #[schema(value_type = Object)]
    pub servers: serde_json::Value,
    /// Servers the placement-independent filters left out, with why.
    pub left_out: BTreeMap<String, String>,
    /// With `exact: true`: `{slots, servers: {uuid: n}}`.
    #[schema(value_type = Option<Object>)]
    pub exact: Option<serde_json::Value>,
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

/// What an inventory write did (the fields that apply to it).
#[derive(Serialize, ToSchema)]
pub struct InventoryChangeResponse {
    pub uuid: Option<String>,
    pub server_uuid: Option<String>,
    pub vm_uuid: Option<String>,
    /// The inventory's generation after the write (replicas catch up to it).
    pub generation: Option<i64>,
    pub deleted: Option<bool>,
    pub released: Option<bool>,
    /// `POST /inventory/load`: servers stored.
    pub servers: Option<u64>,
}

/// A reload was accepted.
#[derive(Serialize, ToSchema)]
pub struct ReloadResponse {
    /// `reloaded`.
    pub status: String,
    /// Short hash of the now-running allocation description and defaults.
    pub config: String,
    /// Settings changed in the file or environment that the process took at start-up
    /// (`listen`, `log_level`, `limits.max_connections`, `limits.health_connections`,
    /// `limits.worker_threads`, `record.*`, `inventory.*`): they apply after a restart.
    pub restart_needed: Vec<String>,
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
        super::handlers::reload,
        super::inventory::list_servers,
        super::inventory::get_server,
        super::inventory::put_server,
        super::inventory::delete_server,
        super::inventory::put_vm,
        super::inventory::delete_vm,
        super::inventory::release_claim,
        super::inventory::load
    ),
    modifiers(&BearerAuth),
    components(schemas(
        StepsParam,
        AllocateOrBatchResponse,
        NoFitResponse,
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
        CapacityResponse,
        CapacityEntry,
        PackageSlotsDoc,
        PingResponse,
        CustomPluginInfo,
        ReloadResponse,
        InventoryChangeResponse
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
