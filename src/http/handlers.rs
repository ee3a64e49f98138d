//! The endpoints. Each parses, validates, hands CPU work to the blocking pool under the
//! concurrency limit, and maps the engine's result to a status code.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::errors::ApiError;
use super::{AppState, Outcome};
use crate::engine::{write_json_str, Allocation, Engine, Step, StepsFormat};
use crate::model::{parse_allocate_body, parse_capacity_body, AllocateBody, BodyError, Server};
use crate::validate::{validate_allocate, FieldError};

fn json_response(status: StatusCode, body: Vec<u8>, outcome: Outcome) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.extensions_mut().insert(outcome);
    response
}

/// The body bytes of a JSON request, or the 4xx that says why not.
///
/// The body is read frame by frame into one buffer sized from `Content-Length`, so a large
/// request is held once (collecting the frames first and then joining them would hold it
/// twice). The limit is `limits.max_body_bytes`, as for the router's body limit.
async fn json_body(app: &AppState, headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(ApiError::UnsupportedMediaType(format!("content type must be application/json, not {ct:?}")));
        }
    }
    let limit = app.limits().max_body_bytes;
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge(limit));
    }
    let mut buf = Vec::with_capacity(declared.unwrap_or(0));
    let mut body = std::pin::pin!(body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let frame = frame.map_err(|e| ApiError::Malformed(format!("cannot read the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(ApiError::TooLarge(limit));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
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

/// Runs `work` on the blocking pool if a concurrency permit is free, within the timeout.
async fn run_limited<T: Send + 'static>(
    app: &Arc<AppState>,
    work: impl FnOnce(Arc<Engine>) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let permit = app
        .permits
        .clone()
        .try_acquire_owned()
        .map_err(|_| ApiError::Unavailable("too many allocations in progress; retry shortly".into()))?;
    let engine = app.engine();
    let timeout = Duration::from_millis(app.limits().request_timeout_ms);
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        work(engine)
    });
    match tokio::time::timeout(timeout, task).await {
        Err(_) => Err(ApiError::Unavailable(format!("allocation took longer than {} ms", timeout.as_millis()))),
        Ok(Err(join)) => Err(ApiError::Internal(format!("allocation failed unexpectedly: {join}"))),
        Ok(Ok(result)) => result,
    }
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

fn answer_allocation(
    body: &AllocateBody<'_>,
    allocation: &Allocation,
    format: StepsFormat,
) -> Result<(StatusCode, Vec<u8>, Outcome), ApiError> {
    let servers = body.servers.len();
    match allocation.chosen {
        Some(id) => {
            let answer = allocation.answer_json(body, format).map_err(|e| ApiError::Internal(e.to_string()))?;
            let uuid = body.servers[id].reason_key();
            Ok((StatusCode::OK, answer, Outcome::Allocated { servers, uuid }))
        }
        None => {
            let reason = failure_reason(&allocation.steps);
            // {"code", "message", "steps"}, written the way the 200 answer is.
            let mut out = Vec::with_capacity(allocation.answer_size_hint(servers, format));
            out.extend_from_slice(br#"{"code":"NoAllocatableServersError","message":"#);
            write_json_str(&mut out, &format!("No compute resources available: {reason}"));
            out.extend_from_slice(br#","steps":"#);
            allocation.steps_view(&body.servers, format).write_json(&mut out);
            out.push(b'}');
            Ok((StatusCode::CONFLICT, out, Outcome::NoServer { servers, reason }))
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
    request_body(content = super::openapi::AllocateRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "A server was chosen", body = super::openapi::AllocateResponse),
        (status = 409, description = "No server fits", body = super::openapi::NoServersResponse),
        (status = 422, description = "Invalid parameters", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse),
        (status = 500, description = "Internal error", body = super::openapi::ErrorResponse)
    )
)]
pub async fn allocate(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let format = steps_format(query.as_deref())?;
    let bytes = json_body(&app, &headers, body).await?;
    let app2 = app.clone();
    let (status, out, outcome) = run_limited(&app, move |engine| {
        let mut request = parse_allocate_body(&bytes).map_err(body_error)?;
        check_size(&app2, &request.servers)?;
        validate_allocate(&mut request).map_err(|e| ApiError::InvalidParameters(vec![e]))?;
        let allocation = engine.allocate(&request).map_err(|e| ApiError::Internal(e.to_string()))?;
        app2.metrics.record_steps(&allocation.steps);
        answer_allocation(&request, &allocation, format)
    })
    .await?;
    Ok(json_response(status, out, outcome))
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
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse)
    )
)]
pub async fn capacity(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let bytes = json_body(&app, &headers, body).await?;
    let app2 = app.clone();
    let (out, servers) = run_limited(&app, move |engine| {
        let (_, servers) = parse_capacity_body(&bytes).map_err(body_error)?;
        check_size(&app2, &servers)?;
        let capacity = engine.capacity(&servers).map_err(|e| ApiError::Internal(e.to_string()))?;
        let out = serde_json::to_vec(&capacity.answer(&servers)).map_err(|e| ApiError::Internal(e.to_string()))?;
        Ok((out, servers.len()))
    })
    .await?;
    Ok(json_response(StatusCode::OK, out, Outcome::Capacity { servers }))
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
    let mut response = (StatusCode::OK, app.metrics.render()).into_response();
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
