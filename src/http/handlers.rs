//! The endpoints. Each takes its request in through [`super::intake`], parses and validates
//! it, runs the engine, and maps the result to a status code and an answer.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::intake::{run_limited, BodySeen, Received, Reply};
use super::stream;
use super::{AppState, Outcome};
use crate::engine::{write_json_str, Allocation, Engine, Step, StepsFormat};
use crate::model::{AllocateBody, BodyError, Server};
use crate::validate::{validate_allocate, validate_server_list, FieldError};
use crate::wire::{parse_allocate_body, parse_arriving_allocate_body, parse_capacity_body};

fn json_response(status: StatusCode, body: impl Into<AnswerBody>, outcome: Outcome) -> Response {
    let body = match body.into() {
        AnswerBody::Whole(bytes) => Body::from(bytes),
        AnswerBody::Streamed(parts) => Body::new(parts),
    };
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.extensions_mut().insert(outcome);
    response
}

fn body_error(e: BodyError) -> ApiError {
    match e {
        BodyError::Malformed(m) => ApiError::Malformed(m),
        BodyError::Invalid(errors) => ApiError::InvalidParameters(errors),
    }
}

/// Refuses requests that ask for more work than the limits allow.
fn check_size(app: &AppState, servers: &[Server]) -> Result<(), ApiError> {
    let limits = app.limits();
    if servers.len() > limits.max_servers {
        return Err(ApiError::InvalidParameters(vec![FieldError::invalid(
            "servers",
            format!("{} servers given; the limit is {}", servers.len(), limits.max_servers),
        )]));
    }
    for (i, s) in servers.iter().enumerate() {
        let n = s.vms.as_obj().map_or(0, |m| m.len());
        if n > limits.max_vms_per_server {
            return Err(ApiError::InvalidParameters(vec![FieldError::invalid(
                format!("servers[{i}].vms"),
                format!("{n} VMs given; the limit is {}", limits.max_vms_per_server),
            )]));
        }
    }
    Ok(())
}

/// The answer, with the body's size and digest attached for the request log.
fn respond(seen: Option<BodySeen>, result: Result<Response, ApiError>) -> Response {
    let mut response = result.unwrap_or_else(IntoResponse::into_response);
    if let Some(seen) = seen {
        response.extensions_mut().insert(seen);
    }
    response
}

/// CNAPI's 409 reason: the last step's `*` reason, else its name with the first letter
/// lower-cased and `no ` before a leading `servers `.
pub fn failure_reason(steps: &[Step]) -> String {
    let (name, star) = match steps.last() {
        Some(step) => (step.name, step.reasons.get("*").filter(|r| !r.is_empty())),
        None => ("Received by DAPI", None),
    };
    if let Some(star) = star {
        return star.to_string();
    }
    let mut chars = name.chars();
    let lowered: String = chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default();
    if lowered.starts_with("servers ") {
        format!("no {lowered}")
    } else {
        lowered
    }
}

/// The status and log outcome of an allocation.
fn outcome_of(body: &AllocateBody<'_>, allocation: &Allocation) -> (StatusCode, Outcome) {
    let servers = body.servers.len();
    match allocation.chosen {
        Some(id) => (StatusCode::OK, Outcome::Allocated { servers, uuid: body.servers[id].reason_key() }),
        None => (StatusCode::CONFLICT, Outcome::NoServer { servers, reason: failure_reason(&allocation.steps) }),
    }
}

/// The answer's body (200: server and steps; 409: CNAPI's error and the steps), appended
/// to `out`, with `part_done` called after each step.
fn write_allocation(
    body: &AllocateBody<'_>,
    allocation: &Allocation,
    format: StepsFormat,
    out: &mut Vec<u8>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<(), ApiError> {
    if allocation.chosen.is_some() {
        return allocation
            .write_answer(&body.raw_servers, &body.servers, format, out, part_done)
            .map_err(|e| ApiError::Internal(e.to_string()));
    }
    // {"code", "message", "steps"}, written the way the 200 answer is.
    let reason = failure_reason(&allocation.steps);
    out.extend_from_slice(br#"{"code":"NoAllocatableServersError","message":"#);
    write_json_str(out, &format!("No compute resources available: {reason}"));
    out.extend_from_slice(br#","steps":"#);
    allocation.steps_view(&body.servers, format).write_json_in_parts(out, part_done);
    out.push(b'}');
    Ok(())
}

/// An answer's body: whole, or (big ones) sent while it is written.
pub enum AnswerBody {
    Whole(Vec<u8>),
    Streamed(stream::StreamedBody),
}

impl From<Vec<u8>> for AnswerBody {
    fn from(bytes: Vec<u8>) -> AnswerBody {
        AnswerBody::Whole(bytes)
    }
}

/// Answers expected to be bigger than this are streamed.
const STREAM_FROM: usize = 1 << 20;

/// Parses (while it arrives, if it does), then with a core validates and allocates one body.
fn allocate_body<'a, T>(
    engine: &Engine,
    app: &AppState,
    received: &'a Received,
    reply: &mut Reply<T>,
) -> Result<(AllocateBody<'a>, Allocation), ApiError> {
    let parsed = match received {
        Received::Whole(bytes) => parse_allocate_body(bytes),
        Received::Arriving(body) => parse_arriving_allocate_body(body),
    };
    let mut request = parsed.map_err(body_error)?;
    reply.computing();
    if reply.abandoned() {
        return Err(ApiError::Unavailable("the request was given up before it was allocated".into()));
    }
    check_size(app, &request.servers)?;
    validate_allocate(&mut request).map_err(|e| ApiError::InvalidParameters(vec![e]))?;
    let allocation = engine.allocate(&request).map_err(|e| ApiError::Internal(e.to_string()))?;
    app.metrics.record_steps(&allocation.steps);
    Ok((request, allocation))
}

/// Writes the answer and replies with it: whole when small; when big, the reply (status,
/// headers) goes first and the body follows in parts as it is written.
fn reply_allocation(
    request: &AllocateBody<'_>,
    allocation: &Allocation,
    format: StepsFormat,
    patience: Duration,
    reply: Reply<(StatusCode, AnswerBody, Outcome)>,
) {
    let (status, outcome) = outcome_of(request, allocation);
    let size = allocation.answer_size_hint(request.servers.len(), format);
    if size < STREAM_FROM {
        let mut out = Vec::with_capacity(size);
        let written = write_allocation(request, allocation, format, &mut out, &mut |_| {});
        return reply.send(written.map(|()| (status, AnswerBody::Whole(out), outcome)));
    }
    let (mut parts, body) = stream::channel(patience);
    let _permit = reply.send_head(Ok((status, AnswerBody::Streamed(body), outcome)));
    let mut out = Vec::with_capacity(2 * stream::PART_BYTES);
    match write_allocation(request, allocation, format, &mut out, &mut |out| parts.part_done(out, false)) {
        Ok(()) => {
            parts.part_done(&mut out, true);
            if !parts.delivered() {
                tracing::warn!("the client hung up or stopped reading before the whole answer was sent");
            }
        }
        Err(e) => {
            tracing::error!(error = ?e, "could not finish a streamed answer");
            parts.fail(&format!("{e:?}"));
        }
    }
}

/// The `steps` query parameter: `full` (the default) or `removed`.
fn steps_format(query: Option<&str>) -> Result<StepsFormat, ApiError> {
    let mut format = StepsFormat::Full;
    for pair in query.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "steps" {
            format = StepsFormat::parse(value).ok_or_else(|| {
                ApiError::InvalidParameters(vec![FieldError::invalid(
                    "steps",
                    format!("must be full or removed, not {value:?}"),
                )])
            })?;
        }
    }
    Ok(format)
}

/// Choose a server for a new VM.
#[utoipa::path(
    post,
    tag = "dapi",
    path = "/allocate",
    params(("steps" = Option<String>, Query, description = "`full` (default): every step lists the servers left after it, as CNAPI expects. `removed`: every step lists only the servers it removed, plus how many remain; much smaller for big datacenters.")),
    request_body(content = super::openapi::AllocateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "A server was chosen", body = super::openapi::AllocateResponse),
        (status = 409, description = "No server fits", body = super::openapi::NoServersResponse),
        (status = 422, description = "Invalid parameters", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 408, description = "The body arrived too slowly (`limits.body_timeout_ms`); the connection is closed", body = super::openapi::ErrorResponse),
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse),
        (status = 500, description = "Internal error", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub async fn allocate(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let format = match steps_format(query.as_deref()) {
        Ok(f) => f,
        Err(e) => return e.into_response(),
    };
    let app2 = app.clone();
    let patience = Duration::from_millis(app.limits().request_timeout_ms);
    let (seen, result) = run_limited(&app, &headers, body, true, move |engine, received, mut reply| {
        match allocate_body(&engine, &app2, &received, &mut reply) {
            Ok((request, allocation)) => reply_allocation(&request, &allocation, format, patience, reply),
            Err(e) => reply.send(Err(e)),
        }
        // The parsed request is freed here, after the answer has left.
    })
    .await;
    respond(seen, result.map(|(status, out, outcome)| json_response(status, out, outcome)))
}

/// Spare CPU, RAM and disk of each server.
#[utoipa::path(
    post,
    tag = "dapi",
    path = "/capacity",
    request_body(content = super::openapi::CapacityRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Unreserved resources per server", body = super::openapi::CapacityResponse),
        (status = 422, description = "Invalid parameters", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 408, description = "The body arrived too slowly (`limits.body_timeout_ms`); the connection is closed", body = super::openapi::ErrorResponse),
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub async fn capacity(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let app2 = app.clone();
    let (seen, result) = run_limited(&app, &headers, body, false, move |engine, received, reply| {
        let result = (|| {
            let bytes = received.whole().ok_or_else(|| ApiError::Malformed("the body did not arrive whole".into()))?;
            let (_, servers) = parse_capacity_body(bytes).map_err(body_error)?;
            check_size(&app2, &servers)?;
            validate_server_list(&servers).map_err(|e| ApiError::InvalidParameters(vec![e]))?;
            let capacity = engine.capacity(&servers).map_err(|e| ApiError::Internal(e.to_string()))?;
            let out = serde_json::to_vec(&capacity.answer(&servers)).map_err(|e| ApiError::Internal(e.to_string()))?;
            Ok((out, servers.len()))
        })();
        reply.send(result);
    })
    .await;
    respond(seen, result.map(|(out, servers)| json_response(StatusCode::OK, out, Outcome::Capacity { servers })))
}

/// Re-reads the config file and environment; a valid config replaces the running one.
#[utoipa::path(
    post,
    tag = "admin",
    path = "/admin/reload",
    responses(
        (status = 200, description = "Reloaded", body = super::openapi::ReloadResponse),
        (status = 409, description = "Refused; the running config stays", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token", body = super::openapi::ErrorResponse)
    ),
    security(("bearer" = []))
)]
pub async fn reload(State(app): State<Arc<AppState>>) -> Response {
    let result = tokio::task::spawn_blocking(move || app.reload()).await;
    match result {
        Ok(Ok(digest)) => {
            tracing::info!(config = %digest, "config reloaded");
            let body = serde_json::json!({"status": "reloaded", "config": digest});
            json_response(StatusCode::OK, body.to_string().into_bytes(), Outcome::Ping)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "config reload refused; keeping the running config");
            ApiError::ConfigRejected(e).into_response()
        }
        Err(join) => ApiError::Internal(format!("reload failed unexpectedly: {join}")).into_response(),
    }
}

/// Health check.
#[utoipa::path(get, tag = "dapi", path = "/ping", responses((status = 200, description = "Up", body = super::openapi::PingResponse)))]
pub async fn ping(State(app): State<Arc<AppState>>) -> Response {
    let body = serde_json::json!({
        "status": "OK",
        "version": env!("CARGO_PKG_VERSION"),
        "config": app.config_digest(),
        "uptime_seconds": app.started.elapsed().as_secs(),
    });
    json_response(StatusCode::OK, body.to_string().into_bytes(), Outcome::Ping)
}

/// This document.
#[utoipa::path(get, tag = "dapi", path = "/openapi.json", responses((status = 200, description = "The OpenAPI document")))]
pub async fn openapi_json() -> Response {
    json_response(StatusCode::OK, super::openapi::document().into_bytes(), Outcome::Ping)
}

/// Prometheus metrics.
#[utoipa::path(get, tag = "dapi", path = "/metrics", responses((status = 200, description = "Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let mut text = app.metrics.render();
    app.conns.render(&mut text);
    app.drains.render(&mut text);
    let mut response = (StatusCode::OK, text).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4"));
    response
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("{} does not exist", uri.path()))
}

pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not supported on {}", uri.path()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Reasons;

    fn step(name: &'static str, star: Option<&str>) -> Step {
        let mut reasons = Reasons::default();
        if let Some(s) = star {
            reasons.all(s.to_string());
        }
        Step { plugin: "x", name, remaining: vec![], reasons, received: 1, input: None, elapsed: Duration::ZERO }
    }

    #[test]
    fn the_409_reason_follows_cnapi() {
        assert_eq!(
            failure_reason(&[step("Servers with enough unreserved RAM", None)]),
            "no servers with enough unreserved RAM"
        );
        assert_eq!(failure_reason(&[step("Forced failure", None)]), "forced failure");
        assert_eq!(
            failure_reason(&[step("Servers with requested hard locality considered", Some("exclude: inst==x"))]),
            "exclude: inst==x"
        );
        assert_eq!(failure_reason(&[]), "received by DAPI");
        assert_eq!(
            failure_reason(&[step("Add VMs which have open provisioning tickets", None)]),
            "add VMs which have open provisioning tickets"
        );
    }
}
