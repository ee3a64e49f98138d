//! Inventory mode's endpoints: feeding the inventory (`/inventory/...`) and `POST
//! /allocate` without `servers`. Thin: the work is `crate::inventory`'s.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use serde_json::json;

use super::errors::ApiError;
use super::handlers::{
    allocate_body, explain_options, json_response, reply_allocation, reply_batch, respond, steps_format, AnswerBody,
};
use super::intake::{run_limited, Received};
use super::{AppState, Outcome};
use crate::answer::{self, AnswerError, AnswerOptions, NoFitBody};
use crate::engine::StepsFormat;
use crate::inventory::records::{self, RecordError};
use crate::inventory::store::StoreError;
use crate::inventory::{AllocateError, Inventory};
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

async fn read_body(app: &AppState, body: Body) -> Result<axum::body::Bytes, ApiError> {
    let limit = app.limits().max_body_bytes;
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|e| ApiError::Malformed(format!("the body could not be read (at most {limit} bytes): {e}")))
}

/// This replica reads its own writes: it catches up before answering (the others do on
/// the notification).
async fn caught_up(inventory: &Inventory) {
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

async fn put_server(State(app): State<Arc<AppState>>, Path(uuid): Path<String>, body: Body) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, body).await?;
            let (record, vms_given) = records::server(&bytes, &uuid, app.limits().max_vms_per_server)?;
            let generation = inventory.store().put_server(&record, vms_given).await?;
            caught_up(&inventory).await;
            Ok(ok(json!({"uuid": uuid, "generation": generation})))
        }
        .await,
    )
}

async fn delete_server(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
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
struct VmQuery {
    server_uuid: Option<String>,
}

async fn put_vm(
    State(app): State<Arc<AppState>>,
    Path(uuid): Path<String>,
    Query(query): Query<VmQuery>,
    body: Body,
) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, body).await?;
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

async fn delete_vm(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
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

async fn release_claim(State(app): State<Arc<AppState>>, Path(vm_uuid): Path<String>) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            if !inventory.store().release(&vm_uuid).await? {
                return Err(ApiError::NotFound(format!("no claim for VM {vm_uuid}")));
            }
            caught_up(&inventory).await;
            Ok(ok(json!({"vm_uuid": vm_uuid, "released": true})))
        }
        .await,
    )
}

async fn load(State(app): State<Arc<AppState>>, body: Body) -> Response {
    result(
        async {
            let inventory = inventory(&app)?;
            let bytes = read_body(&app, body).await?;
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

async fn list_servers(State(app): State<Arc<AppState>>) -> Response {
    servers(app, None).await
}

async fn get_server(State(app): State<Arc<AppState>>, Path(uuid): Path<String>) -> Response {
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
                let text = crate::inventory::cache::server_text(record).map_err(ApiError::Internal)?;
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
fn inventory_request(body: &[u8]) -> Option<Vec<u8>> {
    let top: indexmap::IndexMap<String, &serde_json::value::RawValue> = serde_json::from_slice(body).ok()?;
    if top.contains_key("servers") {
        return None;
    }
    let text = std::str::from_utf8(body).ok()?.trim_start();
    let rest = text.strip_prefix('{')?.trim_start();
    let mut patched = Vec::with_capacity(body.len() + 16);
    patched.extend_from_slice(br#"{"servers":[]"#);
    if !rest.starts_with('}') {
        patched.push(b',');
    }
    patched.extend_from_slice(rest.as_bytes());
    Some(patched)
}

/// `POST /allocate` in inventory mode: without `servers`, on the inventory (compact steps
/// unless `steps=full`); with them, as in stateless mode.
pub(super) async fn allocate(app: Arc<AppState>, query: Option<String>, headers: HeaderMap, body: Body) -> Response {
    let given_steps = query.as_deref().unwrap_or("").split('&').any(|p| p.starts_with("steps="));
    let (format, explain) =
        match steps_format(query.as_deref()).and_then(|f| Ok((f, explain_options(query.as_deref())?))) {
            Ok(parsed) => parsed,
            Err(e) => return e.into_response(),
        };
    let app2 = app.clone();
    let patience = Duration::from_millis(app.limits().request_timeout_ms);
    let handle = tokio::runtime::Handle::current();
    let (seen, result) = run_limited(&app, &headers, body, true, move |engine, received, mut reply| {
        let patched = match &received {
            Received::Whole(bytes) => inventory_request(bytes),
            Received::Arriving(_) => None,
        };
        let Some(patched) = patched else {
            let mut explain = explain;
            match allocate_body(&engine, &app2, &received, &mut reply, &mut explain, false) {
                Ok((request, Some(allocation))) => {
                    reply_allocation(&request, &allocation, format, explain.as_ref(), patience, reply, false);
                }
                Ok((request, None)) => {
                    reply_batch(&engine, &app2, request, given_steps.then_some(format), reply, false);
                }
                Err(e) => reply.send(Err(e)),
            }
            return;
        };
        let steps = if given_steps { format } else { StepsFormat::Removed };
        let answer = (|| -> Result<(StatusCode, AnswerBody, Outcome), ApiError> {
            let inventory = inventory(&app2)?;
            let mut request = parse_allocate_body(&patched).map_err(AnswerError::from)?;
            validate_payload(&mut request).map_err(AnswerError::from)?;
            reply.computing();
            let allocated = inventory.allocate(&engine, &request, explain.is_some(), &handle).map_err(|e| match e {
                AllocateError::Unavailable(m) => ApiError::Unavailable(m),
                AllocateError::Invalid(e) => ApiError::InvalidParameters(vec![e]),
                AllocateError::Internal(m) => ApiError::Internal(m),
            })?;
            let (view, allocation) = (&allocated.view, &allocated.allocation);
            let servers = view.parsed.servers();
            app2.metrics.record_steps(&allocation.steps);
            let count = servers.len();
            let (status, outcome) = match allocation.chosen {
                Some(id) => (StatusCode::OK, Outcome::Allocated { servers: count, uuid: servers[id].reason_key() }),
                None => (
                    StatusCode::CONFLICT,
                    Outcome::NoServer { servers: count, reason: answer::failure_reason(&allocation.steps) },
                ),
            };
            let options = AnswerOptions { steps, no_fit: NoFitBody::Error };
            let mut out = Vec::with_capacity(allocation.answer_size_hint(count, steps));
            answer::write_allocation_on(view.parsed.raw(), servers, allocation, options, &mut out, &mut |_| {})?;
            if let Some(asked) = explain.as_ref() {
                let explained = crate::explain::explain(servers, allocation, asked);
                crate::explain::append_to_answer(&mut out, &explained)
                    .map_err(|e| ApiError::Internal(e.to_string()))?;
            }
            Ok((status, AnswerBody::Whole(out), outcome))
        })();
        reply.send(answer);
    })
    .await;
    respond(seen, result.map(|(status, out, outcome)| json_response(status, out, outcome)))
}

#[cfg(test)]
mod tests {
    use super::inventory_request;

    #[test]
    fn a_body_without_servers_is_an_inventory_request() {
        assert_eq!(inventory_request(br#"{"vm": {}}"#).as_deref(), Some(&br#"{"servers":[],"vm": {}}"#[..]));
        assert_eq!(inventory_request(br#" { } "#).as_deref(), Some(&br#"{"servers":[]} "#[..]));
        assert_eq!(inventory_request(br#"{"servers": [], "vm": {}}"#), None);
        assert_eq!(inventory_request(b"not json"), None);
    }
}
