//! Inventory mode's endpoints: feeding the inventory (`/inventory/...`) and `POST
//! /allocate` without `servers`. Thin: the work is `crate::inventory`'s.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use serde_json::json;

use super::errors::ApiError;
use super::handlers::{json_response, written_answer, AnswerBody};
use super::watch::Watch;
use super::{AppState, Outcome};
use crate::answer;
use crate::engine::{Allocation, Engine, StepsFormat};
use crate::explain::ExplainOptions;
use crate::inventory::claims::ticket_json;
use crate::inventory::records::{self, RecordError};
use crate::inventory::store::StoreError;
use crate::inventory::{AllocateError, Attempt, Decided, Inventory, CLAIM_RETRIES};
use crate::model::{AllocateBody, Server};
use crate::outcome::{AnswerError, Verdict};
use crate::record::DecidedOn;
use crate::validate::validate_payload;
use crate::wire::parse_allocate_body;

pub(super) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/inventory/servers", get(list_servers))
        .route("/inventory/servers/{uuid}", get(get_server).put(put_server).delete(delete_server))
        .route("/inventory/vms/{uuid}", put(put_vm).delete(delete_vm))
        .route("/inventory/claims/{vm_uuid}", delete(release_claim))
        .route("/inventory/load", post(load))
}

fn inventory(app: &AppState) -> Result<Arc<Inventory>, ApiError> {
    app.inventory().cloned().ok_or_else(|| ApiError::NotFound("inventory mode is off (set inventory.url)".into()))
}

impl From<RecordError> for ApiError {
    fn from(e: RecordError) -> ApiError {
        match e {
            RecordError::Malformed(m) => ApiError::Malformed(m),
            RecordError::Invalid(errors) => ApiError::InvalidParameters(errors),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::Unavailable(format!("the inventory database: {e}"))
    }
}

/// The body of a write: JSON, as `/allocate`'s (415 otherwise: a form posted here by
/// mistake would replace the datacenter), and not compressed.
async fn read_body(app: &AppState, headers: &HeaderMap, body: Body) -> Result<axum::body::Bytes, ApiError> {
    super::intake::check_content_type(headers)?;
    if super::intake::body_encoding(headers)? != super::intake::BodyEncoding::Identity {
        return Err(ApiError::UnsupportedMediaType("inventory bodies are sent uncompressed".into()));
    }
    let limit = app.limits().max_body_bytes;
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| ApiError::Malformed(format!("the body could not be read (at most {limit} bytes): {e}")))
}

/// This replica reads its own writes: it catches up before answering (the others do on
/// the notification).
async fn caught_up(inventory: &Arc<Inventory>) {
    if let Err(e) = inventory.refresh().await {
        tracing::warn!(error = %e, "inventory catch-up after a write failed");
    }
}

fn ok(body: serde_json::Value) -> Response {
    json_response(StatusCode::OK, body.to_string().into_bytes(), Outcome::Ping)
}

fn result(r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(IntoResponse::into_response)
}

/// Store a server (with `vms`: they replace the stored ones; without: they stay). Inventory mode only.
#[utoipa::path(
    put,
    tag = "inventory",
    path = "/inventory/servers/{uuid}",
    params(("uuid" = String, Path, description = "The server's uuid")),
    request_body(content = super::request_schema::Server, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = super::openapi::InventoryChangeResponse),
        (status = 422, description = "Invalid: each field named", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content, or a compressed body", body = super::openapi::ErrorResponse),
        (status = 404, description = "Inventory mode is off, or no such server", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn put_server(
    State(app): State<Arc<AppState>>,
    Path(uuid): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, &headers, body).await?;
            let (record, vms_given) = records::server(&bytes, &uuid, app.limits().max_vms_per_server)?;
            let generation = inventory.store().put_server(&record, vms_given).await?;
            caught_up(&inventory).await;
            Ok(ok(json!({"uuid": uuid, "generation": generation})))
        }
        .await,
    )
}

/// Remove a server, its VMs and claims. Inventory mode only.
#[utoipa::path(
    delete,
    tag = "inventory",
    path = "/inventory/servers/{uuid}",
    params(("uuid" = String, Path, description = "The server's uuid")),
    responses(
        (status = 200, description = "Deleted", body = super::openapi::InventoryChangeResponse),
        (status = 404, description = "Inventory mode is off, or no such server", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn delete_server(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            if !inventory.store().delete_server(&uuid).await? {
                return Err(ApiError::NotFound(format!("no server {uuid} in the inventory")));
            }
            caught_up(&inventory).await;
            Ok(ok(json!({"uuid": uuid, "deleted": true})))
        }
        .await,
    )
}

#[derive(serde::Deserialize)]
pub(super) struct VmQuery {
    server_uuid: Option<String>,
}

/// Store a VM on its server; its claim, if any, ends. Inventory mode only.
#[utoipa::path(
    put,
    tag = "inventory",
    path = "/inventory/vms/{uuid}",
    params(("uuid" = String, Path, description = "The VM's uuid"), ("server_uuid" = Option<String>, Query, description = "The VM's server, when the VM does not say")),
    request_body(content = super::request_schema::InventoryVm, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = super::openapi::InventoryChangeResponse),
        (status = 422, description = "Invalid: each field named", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content, or a compressed body", body = super::openapi::ErrorResponse),
        (status = 404, description = "Inventory mode is off, or no such VM", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn put_vm(
    State(app): State<Arc<AppState>>,
    Path(uuid): Path<String>,
    Query(query): Query<VmQuery>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, &headers, body).await?;
            let (server, object) = records::vm(&bytes, &uuid, query.server_uuid.as_deref())?;
            match inventory.store().put_vm(&uuid, &server, &object).await? {
                Some(generation) => Ok({
                    caught_up(&inventory).await;
                    ok(json!({"uuid": uuid, "server_uuid": server, "generation": generation}))
                }),
                None => Err(ApiError::InvalidParameters(vec![crate::model::FieldError::invalid(
                    "server_uuid",
                    format!("no server {server} in the inventory"),
                )])),
            }
        }
        .await,
    )
}

/// Remove a VM. Inventory mode only.
#[utoipa::path(
    delete,
    tag = "inventory",
    path = "/inventory/vms/{uuid}",
    params(("uuid" = String, Path, description = "The VM's uuid")),
    responses(
        (status = 200, description = "Deleted", body = super::openapi::InventoryChangeResponse),
        (status = 404, description = "Inventory mode is off, or no such VM", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn delete_vm(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            if !inventory.store().delete_vm(&uuid).await? {
                return Err(ApiError::NotFound(format!("no VM {uuid} in the inventory")));
            }
            caught_up(&inventory).await;
            Ok(ok(json!({"uuid": uuid, "deleted": true})))
        }
        .await,
    )
}

/// Release a claim (a provision that failed). Inventory mode only.
#[utoipa::path(
    delete,
    tag = "inventory",
    path = "/inventory/claims/{vm_uuid}",
    params(("vm_uuid" = String, Path, description = "The claimed VM's uuid")),
    responses(
        (status = 200, description = "Released", body = super::openapi::InventoryChangeResponse),
        (status = 404, description = "Inventory mode is off, or no such claim", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn release_claim(State(app): State<Arc<AppState>>, Path(vm_uuid): Path<String>) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            if !inventory.store().release(&vm_uuid, None).await? {
                return Err(ApiError::NotFound(format!("no claim for VM {vm_uuid}")));
            }
            caught_up(&inventory).await;
            Ok(ok(json!({"vm_uuid": vm_uuid, "released": true})))
        }
        .await,
    )
}

/// Replace the whole inventory with a dump, in one transaction. Inventory mode only.
#[utoipa::path(
    post,
    tag = "inventory",
    path = "/inventory/load",
    request_body(content = super::request_schema::InventoryDump, content_type = "application/json"),
    responses(
        (status = 200, description = "Loaded", body = super::openapi::InventoryChangeResponse),
        (status = 422, description = "Invalid: each field named", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content, or a compressed body", body = super::openapi::ErrorResponse),
        (status = 404, description = "Inventory mode is off, or no such server", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn load(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, &headers, body).await?;
            let max_vms = app.limits().max_vms_per_server;
            let records = tokio::task::spawn_blocking(move || records::dump(&bytes, max_vms))
                .await
                .map_err(|e| ApiError::Internal(e.to_string()))??;
            let generation = inventory.store().load(&records).await?;
            caught_up(&inventory).await;
            Ok(ok(json!({"servers": records.len(), "generation": generation})))
        }
        .await,
    )
}

/// The stored servers with their VMs, as CNAPI lists them. Inventory mode only.
#[utoipa::path(
    get,
    tag = "inventory",
    path = "/inventory/servers",
    responses(
        (status = 200, description = "The servers, in inventory order", body = Vec<Object>),
        (status = 404, description = "Inventory mode is off, or no such server", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn list_servers(State(app): State<Arc<AppState>>) -> Response {
    servers(app, None).await
}

/// One stored server with its VMs. Inventory mode only.
#[utoipa::path(
    get,
    tag = "inventory",
    path = "/inventory/servers/{uuid}",
    params(("uuid" = String, Path, description = "The server's uuid")),
    responses(
        (status = 200, description = "The server", body = Object),
        (status = 404, description = "Inventory mode is off, or no such server", body = super::openapi::ErrorResponse),
        (status = 503, description = "The inventory database is out of reach; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn get_server(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
    servers(app, Some(uuid)).await
}

/// The stored servers (with their VMs), as CNAPI lists them; or one of them.
async fn servers(app: Arc<AppState>, uuid: Option<String>) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let rows = inventory.store().servers(uuid.as_deref()).await?;
            let mut out = Vec::new();
            for (record, _) in &rows {
                let text = crate::inventory::records::server_text(record).map_err(ApiError::Internal)?;
                out.push(text);
            }
            let body = match uuid {
                Some(uuid) => {
                    out.pop().ok_or_else(|| ApiError::NotFound(format!("no server {uuid} in the inventory")))?
                }
                None => format!("[{}]", out.join(",")),
            };
            Ok(json_response(StatusCode::OK, body.into_bytes(), Outcome::Ping))
        }
        .await,
    )
}

/// The body with `"servers": []` put first when it has no `servers` (an inventory
/// allocation); `None` when it has them (a stateless one) or is not a JSON object (the
/// stateless reader says why).
pub(super) fn patched(body: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(body).ok()?;
    let top: indexmap::IndexMap<String, &serde_json::value::RawValue> = crate::js::json::from_str(text).ok()?;
    if top.contains_key("servers") {
        return None;
    }
    let text = text.trim_start();
    let rest = text.strip_prefix('{')?.trim_start();
    let mut patched = Vec::with_capacity(body.len() + 16);
    patched.extend_from_slice(br#"{"servers":[]"#);
    if !rest.starts_with('}') {
        patched.push(b',');
    }
    patched.extend_from_slice(rest.as_bytes());
    Some(patched)
}

/// An allocation's answer (status, body, log outcome), or why there is none.
type Written = Result<(StatusCode, AnswerBody, Outcome), ApiError>;

/// What a watched inventory allocation decided, and on what: for its record.
struct Answered {
    verdict: Verdict,
    digest: String,
    seed: Option<u64>,
    decided_on: DecidedOn,
}

/// How an inventory allocation was asked for.
pub(super) struct Asked {
    pub steps: StepsFormat,
    pub explain: Option<ExplainOptions>,
    pub watch: Option<Arc<Watch>>,
}

/// `POST /allocate` without `servers` in inventory mode (`body`: [`patched`]), on the
/// request's own task. Each attempt reads and validates the request as the stateless one
/// is, decides on the inventory and answers by the same writer ([`written_answer`]) while
/// the servers decided on are held; then the chosen server's claim is awaited, the core
/// given back meanwhile. An attempt on the recurring path (compact steps, no explain, the
/// shape of the last request on the same servers) takes a fraction of a millisecond and
/// runs here: handing it to the blocking pool and back cost a replica more CPU than the
/// decision (context switches). Others (a run over every server, or an answer that lists
/// them) run in the blocking pool, off the runtime's thread. A recorded allocation hands
/// its record over once answered.
pub(super) async fn allocate(app: Arc<AppState>, inventory: Arc<Inventory>, body: Vec<u8>, asked: Asked) -> Written {
    let Asked { steps, explain, watch } = asked;
    let recording = watch.as_ref().is_some_and(|w| w.recording());
    let short = steps == StepsFormat::Counts && explain.is_none();
    let body = Arc::new(body);
    for _ in 0..CLAIM_RETRIES {
        let core = app.cpu_slots.clone().acquire_owned().await.map_err(|e| ApiError::Internal(e.to_string()))?;
        let engine = app.engine();
        let (attempted, answered) = match short.then(|| read(&body)).transpose()? {
            Some(request) if inventory.recurs(&request) => {
                attempt(&engine, &app, &inventory, &body, request, steps, explain.as_ref(), recording)
            }
            // A run over every server: not on the runtime's thread.
            _ => {
                let (app, inventory, body, explain) = (app.clone(), inventory.clone(), body.clone(), explain.clone());
                tokio::task::spawn_blocking(move || {
                    let request = read(&body)?;
                    Ok::<_, ApiError>(attempt(
                        &engine,
                        &app,
                        &inventory,
                        &body,
                        request,
                        steps,
                        explain.as_ref(),
                        recording,
                    ))
                })
                .await
                .map_err(|e| ApiError::Internal(format!("the request failed unexpectedly: {e}")))??
            }
        };
        drop(core);
        let answer = match attempted? {
            Attempt::Answered(answer) => answer,
            Attempt::Claiming { answer, commit } => match inventory.claimed(answer, commit).await.map_err(api_error)? {
                Some(answer) => answer,
                None => continue,
            },
        };
        // Recorded only when answered.
        if let (Some(w), Some(a), true) = (&watch, answered, answer.is_ok()) {
            let body = Arc::try_unwrap(body).unwrap_or_else(|shared| shared.to_vec());
            let asked = w.asked_as(steps, explain.as_ref());
            w.record_body(&app, body, asked, (a.verdict, a.digest, a.seed), Some(a.decided_on));
        }
        return answer;
    }
    Err(ApiError::Unavailable(format!("the chosen server kept changing ({CLAIM_RETRIES} tries); retry")))
}

fn api_error(e: AllocateError) -> ApiError {
    match e {
        AllocateError::Unavailable(m) => ApiError::Unavailable(m),
        AllocateError::Invalid(e) => ApiError::InvalidParameters(vec![e]),
        AllocateError::Internal(m) => ApiError::Internal(m),
    }
}

/// An attempt's outcome, and (recording) what it decided on.
type Attempted = (Result<Attempt<Written>, ApiError>, Option<Answered>);

fn read(body: &[u8]) -> Result<AllocateBody<'_>, ApiError> {
    let request = parse_allocate_body(body).map_err(AnswerError::from)?;
    // A batch is placed on the servers its request brings; a replica decides one VM at a
    // time against the inventory (before, `count` was ignored and `vms` refused for `vm`).
    if request.batch.is_batch() {
        let field = if request.batch.vms.is_some() { "vms" } else { "count" };
        let message = "a batch is placed on the servers it brings; in inventory mode send one VM per request";
        return Err(ApiError::InvalidParameters(vec![crate::model::FieldError::invalid(field, message)]));
    }
    Ok(request)
}

/// One attempt ([`Inventory::decide`]) for `request`, read from `body`. With `recording`,
/// also what it decided and the servers and claims it was decided on (shared, not copied:
/// the answer is not delayed).
#[allow(clippy::too_many_arguments)]
fn attempt(
    engine: &Engine,
    app: &AppState,
    inventory: &Arc<Inventory>,
    body: &[u8],
    mut request: AllocateBody<'_>,
    steps: StepsFormat,
    explain: Option<&ExplainOptions>,
    recording: bool,
) -> Attempted {
    if recording {
        // A replay must draw the same random numbers as the answer did.
        super::watch::fix_seed(&mut request, engine);
    }
    let mut answered = None;
    let result = (|| {
        validate_payload(&mut request).map_err(AnswerError::from)?;
        let explain = explain.cloned().map(|o| answer::with_body_why_not(o, body)).transpose()?;
        let seed = request.seed;
        let mut write = |d: &Decided<'_>| {
            app.metrics.record_steps(&d.allocation.steps);
            let answer = written_answer(d.raw, d.servers, d.allocation, steps, explain.as_ref());
            if let (true, Ok((_, AnswerBody::Whole(out), _))) = (recording, &answer) {
                answered = Some(Answered {
                    verdict: verdict(d.servers, d.allocation),
                    digest: crate::digest::digest(out),
                    seed,
                    decided_on: DecidedOn {
                        servers: d.shared_texts(),
                        tickets: d.claims.unwrap_or_default().iter().map(ticket_json).collect(),
                    },
                });
            }
            answer
        };
        let counts = steps == StepsFormat::Counts;
        inventory.decide(engine, &request, explain.is_some(), counts, recording, &mut write).map_err(api_error)
    })();
    (result, answered)
}

/// What an allocation on `servers` decided (as [`Verdict::of`] says of a request's).
fn verdict(servers: &[Server<'_>], allocation: &Allocation) -> Verdict {
    match allocation.chosen {
        Some(id) => Verdict::Chosen { uuid: servers[id].reason_key() },
        None => Verdict::NoFit { reason: crate::outcome::failure_reason(&allocation.steps) },
    }
}

#[cfg(test)]
mod tests {
    use super::patched;

    #[test]
    fn a_body_without_servers_is_an_inventory_request() {
        assert_eq!(patched(br#"{"vm": {}}"#).as_deref(), Some(&br#"{"servers":[],"vm": {}}"#[..]));
        assert_eq!(patched(br#" { } "#).as_deref(), Some(&br#"{"servers":[]} "#[..]));
        assert_eq!(patched(br#"{"servers": [], "vm": {}}"#), None);
        assert_eq!(patched(b"not json"), None);
    }
}
