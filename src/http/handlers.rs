//! The endpoints. Each takes its request in through [`super::intake`], then runs the answer
//! path it shares with the CLI ([`crate::answer`]) and maps the result to a status code.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use axum::Extension;

use super::conn::ConnHandle;
use super::errors::ApiError;
use super::intake::{run_limited, run_limited_or_inline, BodySeen, Inline, Received, Reply};
use super::stream;
use super::{AppState, Outcome};
use crate::answer::{self, AnswerOptions, NoFitBody};
use crate::engine::{Allocation, Engine, StepsFormat};
use crate::explain::ExplainOptions;
use crate::model::{AllocateBody, Server};
use crate::outcome::{AnswerError, Verdict};
use crate::validate::FieldError;
use crate::wire::{
    parse_allocate_body, parse_allocate_text, parse_arriving_allocate_body, parse_arriving_capacity_body,
    parse_capacity_request, parse_capacity_text,
};

pub(super) fn json_response(status: StatusCode, body: impl Into<AnswerBody>, outcome: Outcome) -> Response {
    let body = match body.into() {
        // A pooled buffer is given back (`wire::pages::recycle`) once the connection has sent it.
        AnswerBody::Whole(bytes) if crate::wire::pages::is_pooled(bytes.capacity()) => {
            Body::from(Bytes::from_owner(crate::wire::pages::Body::new(bytes)))
        }
        AnswerBody::Whole(bytes) => Body::from(bytes),
        AnswerBody::Streamed(parts) => Body::new(parts),
    };
    let mut response = (status, body).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.extensions_mut().insert(outcome);
    response
}

impl From<AnswerError> for ApiError {
    fn from(e: AnswerError) -> ApiError {
        match e {
            AnswerError::Malformed(m) => ApiError::Malformed(m),
            AnswerError::Invalid(errors) => ApiError::InvalidParameters(errors),
            AnswerError::Internal(m) => ApiError::Internal(m),
        }
    }
}

/// The answer, with the body's size and digest attached for the request log.
pub(super) fn respond(seen: Option<BodySeen>, result: Result<Response, ApiError>) -> Response {
    let mut response = result.unwrap_or_else(IntoResponse::into_response);
    if let Some(seen) = seen {
        response.extensions_mut().insert(seen);
    }
    response
}

/// The status and log outcome of an allocation on `servers`.
pub(super) fn outcome_of(servers: &[Server<'_>], allocation: &Allocation) -> (StatusCode, Outcome) {
    let count = servers.len();
    match allocation.chosen {
        Some(id) => (StatusCode::OK, Outcome::Allocated { servers: count, uuid: servers[id].reason_key() }),
        None => (
            StatusCode::CONFLICT,
            Outcome::NoServer { servers: count, reason: crate::outcome::failure_reason(&allocation.steps) },
        ),
    }
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
pub(super) fn allocate_body<'a, T>(
    engine: &Engine,
    app: &AppState,
    received: &'a Received,
    reply: &mut Reply<T>,
    explain: &mut Option<ExplainOptions>,
    watched: bool,
) -> Result<(AllocateBody<'a>, Option<Allocation>), ApiError> {
    let mut request = match received {
        Received::Whole(body) => match body.ascii_text() {
            Some(text) => parse_allocate_text(text),
            None => parse_allocate_body(body),
        },
        Received::Arriving(body) => parse_arriving_allocate_body(body),
    }
    .map_err(AnswerError::from)?;
    reply.read();
    if watched {
        // A replay or the shadow must draw the same random numbers as the answer did.
        super::watch::fix_seed(&mut request, engine);
    }
    if request.batch.is_batch() {
        answer::batch_not_explained(explain.as_ref())?;
    }
    if let Some(options) = explain.take() {
        // The body's `why_not` is read only when an explanation is asked for.
        let whole = match received {
            Received::Whole(bytes) => Some(&bytes[..]),
            Received::Arriving(body) => body.complete(),
        };
        *explain = Some(match whole {
            Some(bytes) => answer::with_body_why_not(options, bytes)?,
            None => options,
        });
    }
    reply.computing();
    if reply.abandoned() {
        return Err(ApiError::Unavailable("the request was given up before it was allocated".into()));
    }
    if request.batch.is_batch() {
        return Ok((request, None));
    }
    let allocation = answer::decide_noting(engine, &app.limits(), &mut request, explain.is_some())?;
    app.metrics.record_steps(&allocation.steps);
    reply.decided();
    Ok((request, Some(allocation)))
}

/// Places a batch (`crate::batch`) and replies with its answer; when `watched`, returns
/// what it decided (for the shadow) and the digest of the answer (for a record).
pub(super) fn reply_batch(
    engine: &Engine,
    app: &AppState,
    request: AllocateBody<'_>,
    format: Option<StepsFormat>,
    mut reply: Reply<(StatusCode, AnswerBody, Outcome)>,
    watched: bool,
) -> Option<BatchDone> {
    let servers = request.servers.len();
    let options = crate::batch::BatchOptions { steps: format, count: None };
    let mut done = None;
    let result = crate::batch::allocate_batch(engine, &app.limits(), request, options).map(|answer| {
        let summary = format!("batch: {} placed, {} not", answer.placed, answer.failed);
        let (status, outcome) = match answer.status {
            200 => (StatusCode::OK, Outcome::Allocated { servers, uuid: summary }),
            _ => (StatusCode::CONFLICT, Outcome::NoServer { servers, reason: summary }),
        };
        if watched {
            let digest = crate::digest::digest(&answer.body);
            done = Some(BatchDone { verdict: answer.verdict(), digest, vms: answer.vms });
        }
        (status, AnswerBody::Whole(answer.body), outcome)
    });
    reply.decided();
    reply.send(result.map_err(ApiError::from));
    done
}

/// What a batch decided, kept for the shadow and the record once it is answered.
pub(super) struct BatchDone {
    pub verdict: Verdict,
    pub digest: String,
    pub vms: Vec<crate::batch::VmOutcome>,
}

/// The whole answer of an allocation on `servers` (each one's JSON in `raw_servers`):
/// status, body and log outcome. Both modes write it here (inventory mode while it holds
/// the servers decided on).
pub(super) fn written_answer(
    raw_servers: &[&str],
    servers: &[Server<'_>],
    allocation: &Allocation,
    format: StepsFormat,
    explain: Option<&ExplainOptions>,
) -> Result<(StatusCode, AnswerBody, Outcome), ApiError> {
    let (status, outcome) = outcome_of(servers, allocation);
    let mut out = crate::wire::pages::buffer(answer_size(servers, allocation, format, explain));
    write_answer(raw_servers, servers, allocation, format, explain, &mut out, &mut |_| {})?;
    Ok((status, AnswerBody::Whole(out), outcome))
}

fn answer_size(
    servers: &[Server<'_>],
    allocation: &Allocation,
    format: StepsFormat,
    explain: Option<&ExplainOptions>,
) -> usize {
    allocation.answer_size_hint(servers.len(), format) + answer::explain_size_hint_on(servers.len(), explain)
}

/// The service's answer: CNAPI's 409 error body when nothing fits, `explain` appended when
/// asked for.
fn write_answer(
    raw_servers: &[&str],
    servers: &[Server<'_>],
    allocation: &Allocation,
    format: StepsFormat,
    explain: Option<&ExplainOptions>,
    out: &mut Vec<u8>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<(), AnswerError> {
    let options = AnswerOptions { steps: format, no_fit: NoFitBody::Error, exiting: false };
    answer::write_explained_allocation_on(raw_servers, servers, allocation, options, explain, out, part_done)
}

/// How a big answer may be sent in parts: how long a part may wait for the client, and the
/// connection (reset when the client is given up on).
pub(super) struct Streaming {
    patience: Duration,
    conn: Option<ConnHandle>,
}

/// Writes the answer and replies with it: whole when small (or when it may not be
/// `streaming`); when big, the reply (status, headers) goes first and the body follows in
/// parts as it is written. With `digest`, the digest of the answer's body is returned (for a
/// record).
pub(super) fn reply_allocation(
    request: &AllocateBody<'_>,
    allocation: &Allocation,
    format: StepsFormat,
    explain: Option<&ExplainOptions>,
    streaming: Option<Streaming>,
    reply: Reply<(StatusCode, AnswerBody, Outcome)>,
    digest: bool,
) -> Option<String> {
    let (raw, servers) = (&request.raw_servers[..], &request.servers[..]);
    let streaming = streaming.filter(|_| answer_size(servers, allocation, format, explain) >= STREAM_FROM);
    let Some(Streaming { patience, conn }) = streaming else {
        let answer = written_answer(raw, servers, allocation, format, explain);
        let digest = match (&answer, digest) {
            (Ok((_, AnswerBody::Whole(out), _)), true) => Some(crate::digest::digest(out)),
            _ => None,
        };
        reply.send(answer);
        return digest;
    };
    let (status, outcome) = outcome_of(servers, allocation);
    let (mut parts, body) = stream::channel(patience, conn);
    let _permit = reply.send_head(Ok((status, AnswerBody::Streamed(body), outcome)));
    let mut out = stream::part_buffer();
    let mut digested = digest.then(crate::digest::Digest::default);
    let written = write_answer(raw, servers, allocation, format, explain, &mut out, &mut |out| {
        // What part_done sends, digested first.
        if let (Some(d), true) = (digested.as_mut(), out.len() >= stream::PART_BYTES) {
            d.update(out);
        }
        parts.part_done(out, false)
    });
    match written {
        Ok(()) => {
            if let Some(d) = digested.as_mut() {
                d.update(&out);
            }
            // A client gone before the end is told by the request's log line (`answer_cut`).
            parts.part_done(&mut out, true);
        }
        Err(e) => {
            tracing::error!(error = %e, "could not finish a streamed answer");
            parts.fail(&e.to_string());
            return None;
        }
    }
    digested.map(|d| d.finish())
}

/// The query's parameters, decoded as a form's (`%2C`, `+`): what Node's
/// `URLSearchParams` and Python's `urlencode` send.
fn query_pairs(query: Option<&str>) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
}

/// The `explain` (`true`/`1`/empty or `false`/`0`) and `why_not` (uuids, comma-separated;
/// asks for an explanation too) query parameters.
pub(super) fn explain_options(query: Option<&str>) -> Result<Option<ExplainOptions>, ApiError> {
    let mut explain: Option<ExplainOptions> = None;
    let mut why_not: Vec<String> = Vec::new();
    for (key, value) in query_pairs(query) {
        match &*key {
            "explain" => match &*value {
                "true" | "1" | "" => explain = Some(explain.unwrap_or_default()),
                "false" | "0" => explain = None,
                _ => {
                    return Err(ApiError::InvalidParameters(vec![FieldError::invalid(
                        "explain",
                        format!("must be true or false (or 1 or 0), not {value:?}"),
                    )]))
                }
            },
            "why_not" => why_not.extend(value.split(',').filter(|u| !u.is_empty()).map(str::to_string)),
            _ => {}
        }
    }
    if !why_not.is_empty() {
        explain.get_or_insert_with(ExplainOptions::default).ask_about(why_not);
    }
    Ok(explain)
}

/// The `steps` query parameter: `full` (the default), `removed` or `counts`; `None` when
/// not given.
pub(super) fn steps_format(query: Option<&str>) -> Result<Option<StepsFormat>, ApiError> {
    let mut format = None;
    for (key, value) in query_pairs(query) {
        if key == "steps" {
            format = Some(StepsFormat::parse(&value).ok_or_else(|| {
                ApiError::InvalidParameters(vec![FieldError::invalid(
                    "steps",
                    format!("must be full, removed or counts, not {value:?}"),
                )])
            })?);
        }
    }
    Ok(format)
}

/// Choose a server for a new VM.
#[utoipa::path(
    post,
    tag = "dapi",
    path = "/allocate",
    params(
        ("steps" = Option<super::openapi::StepsParam>, Query, description = "`full` (default; a batch: `removed` unless given): every step lists the servers left after it, as CNAPI expects. `removed`: every step lists only the servers it removed, plus how many remain; much smaller for big datacenters. `counts`: every step gives only how many servers it left (nothing per server: the smallest answer; `explain=true` says why)."),
        ("explain" = Option<bool>, Query, description = "`true`: add an `explain` member to the 200 and 409 answers (where each server left and by how much it fell short, score breakdowns, ranks, causes grouped); everything else in the answer stays byte-identical. The body's `why_not` is read only then. A batch (`vms` or `count`) is not explained: 422 naming `explain`."),
        ("why_not" = Option<String>, Query, description = "Server uuids, comma-separated: restricts the per-server part of `explain` to them (a uuid not in the request is answered too). Implies `explain=true`; joins the body's `why_not: [uuid, ...]`.")
    ),
    request_body(content = super::request_schema::AllocateRequest, content_type = "application/json", description = "Sent as is, or gzip-compressed with `Content-Encoding: gzip` (the size limit applies to the decompressed body). Answers are gzip- or zstd-compressed when the client sends `Accept-Encoding`."),
    responses(
        (status = 200, description = "A server was chosen (a batch, `vms` or `count`: a `BatchResponse`)", body = super::openapi::AllocateOrBatchResponse),
        (status = 409, description = "No server fits (an `all_or_nothing` batch: a `BatchFailedResponse`)", body = super::openapi::NoFitResponse),
        (status = 422, description = "Invalid parameters", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 408, description = "The body arrived too slowly (`limits.body_timeout_ms`); the connection is closed", body = super::openapi::ErrorResponse),
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content, or a content encoding other than gzip", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse),
        (status = 500, description = "Internal error", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub async fn allocate(
    State(app): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    version: Version,
    conn: Option<Extension<ConnHandle>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // `steps` as given: a batch (and, in inventory mode, an allocation on the inventory)
    // lists compact steps unless it is given.
    let (batch_format, explain) =
        match steps_format(query.as_deref()).and_then(|f| Ok((f, explain_options(query.as_deref())?))) {
            Ok(parsed) => parsed,
            Err(e) => return e.into_response(),
        };
    let format = batch_format.unwrap_or(StepsFormat::Full);
    let app2 = app.clone();
    // HTTP/1.0 has no chunked encoding: an answer cut short would end as a whole one does,
    // by the connection closing. So a 1.0 client gets every answer whole.
    let streaming = (version >= Version::HTTP_11).then(|| Streaming {
        patience: Duration::from_millis(app.limits().request_timeout_ms),
        conn: conn.map(|Extension(conn)| conn),
    });
    // Recording and the shadow config, when on: they act after the answer has left.
    let watch = super::watch::Watch::of(&app, &headers, batch_format);
    let watch = watch.map(Arc::new);
    // In inventory mode, a whole body without `servers` is allocated on the inventory.
    let inventory_work = {
        let (app, watch, explain) = (app.clone(), watch.clone(), explain.clone());
        move |bytes: &[u8]| -> Option<Inline<_>> {
            let inventory = app.inventory()?.clone();
            let body = super::inventory::patched(bytes)?;
            let steps = batch_format.unwrap_or(StepsFormat::Removed);
            let asked = super::inventory::Asked { steps, explain, watch };
            Some(Box::pin(super::inventory::allocate(app, inventory, body, asked)))
        }
    };
    let (seen, result) =
        run_limited_or_inline(&app, &headers, body, true, inventory_work, move |engine, received, mut reply| {
            let mut explain = explain;
            let asked = watch.as_ref().map(|w| w.asked(explain.as_ref()));
            let watched = watch.is_some();
            let answered = match allocate_body(&engine, &app2, &received, &mut reply, &mut explain, watched) {
                Ok((request, Some(allocation))) => {
                    let digest =
                        reply_allocation(&request, &allocation, format, explain.as_ref(), streaming, reply, watched);
                    received.answered();
                    if let Some(w) = &watch {
                        w.shadow(&app2, &request, &allocation);
                    }
                    digest.map(|d| (Verdict::of(&request, &allocation), d, request.seed))
                }
                Ok((request, None)) => {
                    let seed = request.seed;
                    let done = reply_batch(&engine, &app2, request, batch_format, reply, watched);
                    if let (Some(w), Some(done)) = (&watch, &done) {
                        w.shadow_batch(&app2, &received, seed, &done.vms);
                    }
                    done.map(|d| (d.verdict, d.digest, seed))
                }
                Err(e) => {
                    reply.send(Err(e));
                    received.answered();
                    None
                }
            };
            // The parsed request is freed by now, after the answer has left; then it is recorded.
            if let (Some(w), Some(answered), Some(asked)) = (&watch, answered, asked) {
                w.record(&app2, received, asked, answered);
            }
        })
        .await;
    respond(seen, result.map(|(status, out, outcome)| json_response(status, out, outcome)))
}

/// Spare CPU, RAM and disk of each server.
#[utoipa::path(
    post,
    tag = "dapi",
    path = "/capacity",
    request_body(content = super::request_schema::CapacityRequest, content_type = "application/json", description = "As for `/allocate`: plain or `Content-Encoding: gzip`."),
    responses(
        (status = 200, description = "Unreserved resources per server; with `packages`, how many more VMs of each fit and the totals", body = super::openapi::CapacityResponse),
        (status = 422, description = "Invalid parameters", body = super::openapi::InvalidParametersResponse),
        (status = 400, description = "Body is not JSON", body = super::openapi::ErrorResponse),
        (status = 408, description = "The body arrived too slowly (`limits.body_timeout_ms`); the connection is closed", body = super::openapi::ErrorResponse),
        (status = 413, description = "Body too large", body = super::openapi::ErrorResponse),
        (status = 415, description = "Not JSON content, or a content encoding other than gzip", body = super::openapi::ErrorResponse),
        (status = 503, description = "Overloaded or timed out; retry", body = super::openapi::ErrorResponse),
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub async fn capacity(State(app): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let app2 = app.clone();
    // A big body is read while it arrives, as `/allocate`'s is.
    let (seen, result) = run_limited(&app, &headers, body, true, move |engine, received, mut reply| {
        let mut parsed = None;
        let mut result = || {
            let request = parsed.insert(
                match &received {
                    Received::Whole(body) => match body.ascii_text() {
                        Some(text) => parse_capacity_text(text),
                        None => parse_capacity_request(body),
                    },
                    Received::Arriving(body) => parse_arriving_capacity_body(body),
                }
                .map_err(AnswerError::from)?,
            );
            reply.read();
            reply.computing();
            if reply.abandoned() {
                return Err(ApiError::Unavailable("the request was given up before it was answered".into()));
            }
            let answer = answer::capacity_of(&engine, &app2.limits(), request, false)?;
            reply.decided();
            Ok((answer.body, answer.servers))
        };
        let result = result();
        reply.send(result);
        received.answered();
        // Freed once the answer is on its way, as an allocation's request is.
        drop(parsed);
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
        (status = 401, description = "Missing or wrong bearer token (when one is configured)", body = super::openapi::ErrorResponse)
    ),
    security((), ("bearer" = []))
)]
pub async fn reload(State(app): State<Arc<AppState>>) -> Response {
    let result = tokio::task::spawn_blocking(move || app.reload()).await;
    match result {
        Ok(Ok((digest, restart_needed))) => {
            tracing::info!(config = %digest, "config reloaded");
            let body = serde_json::json!({"status": "reloaded", "config": digest, "restart_needed": restart_needed});
            json_response(StatusCode::OK, body.to_string().into_bytes(), Outcome::Ping)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "config reload refused; keeping the running config");
            ApiError::ConfigRejected(e.to_string()).into_response()
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
        "plugins": app.custom_plugins(),
    });
    let mut body = body;
    if let Some(inventory) = app.inventory() {
        body["inventory"] = inventory.health();
    }
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
    let permits_in_use = app.max_permits.saturating_sub(app.permits.available_permits());
    let mut text = app.metrics.render(permits_in_use);
    app.conns.render(&mut text);
    app.drains.render(&mut text);
    app.shadow_stats.render(&mut text);
    match &app.recorder {
        Some(recorder) => recorder.stats().render(&mut text),
        None => crate::record::RecordStats::default().render(&mut text),
    }
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
