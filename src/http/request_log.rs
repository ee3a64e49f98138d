//! The one log line per request, written once its answer has been handed on whole.
//!
//! A big answer (megabytes of steps) is sent while it is written, after its head: a line
//! written with the head would leave out the sending. So the answer's body is wrapped, and
//! the line (and the request's duration in the metrics) is taken when its last part is
//! handed on for sending, or, when the body is dropped before that, when the client went
//! away (`answer_cut`). `latency_ms` thus runs from the request's head to its answer's last
//! byte: the time issue 15's throughput is measured over.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::Method;
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::intake::{BodySeen, Phases};
use super::{endpoint_label, AppState, Outcome};

/// What a request's log line says, gathered when its answer's head is ready.
pub(super) struct RequestLine {
    pub app: Arc<AppState>,
    pub id: String,
    pub method: Method,
    pub path: String,
    pub status: u16,
    pub started: Instant,
    pub seen: Option<BodySeen>,
    pub outcome: Option<Outcome>,
}

impl RequestLine {
    /// Counts the request and writes its line; `cut` when the answer was not handed on whole.
    fn write(self, cut: bool) {
        let RequestLine { app, id, method, path, status, started, seen, outcome } = self;
        let latency = started.elapsed();
        app.metrics.record_request(endpoint_label(&path), status, latency);
        let latency_ms = latency.as_secs_f64() * 1000.0;
        let method = method.as_str();
        // Bodies are never logged: their size and digest identify them.
        let (body_bytes, body_digest, phases) = match &seen {
            Some(seen) => (seen.bytes, seen.digest.as_str(), seen.phases),
            None => (0, "", Phases::default()),
        };
        let Phases { body_ms, read_ms, decided_ms } = phases;
        // Only when true: the client hung up (or stopped reading) before the answer's end.
        let answer_cut = cut.then_some(true);
        match outcome {
            Some(Outcome::Allocated { servers, uuid }) => tracing::info!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, servers, server = %uuid, "request"
            ),
            Some(Outcome::NoServer { servers, reason }) => tracing::info!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, servers, reason = %reason, "request"
            ),
            Some(Outcome::Capacity { servers }) => tracing::info!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, servers, "request"
            ),
            // Shedding load (503) is normal operation: a warning, not an error.
            Some(Outcome::Failed(error)) if status == 503 => tracing::warn!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, error = %error, "request"
            ),
            Some(Outcome::Failed(error)) if status >= 500 => tracing::error!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, error = %error, "request"
            ),
            Some(Outcome::Failed(error)) => tracing::info!(
                req_id = %id, method, path, status, latency_ms, body_ms, read_ms, decided_ms, answer_cut, body_bytes, body_digest, error = %error, "request"
            ),
            Some(Outcome::Ping) | None => {
                tracing::debug!(req_id = %id, method, path, status, latency_ms, answer_cut, "request")
            }
        }
    }
}

/// A request not answered yet. Dropped so (hyper drops a request whose client closed its
/// connection before the answer was ready), it is still logged, as 499.
pub(super) struct Pending(Option<RequestLine>);

impl Pending {
    pub fn new(app: Arc<AppState>, id: String, method: Method, path: String, started: Instant) -> Pending {
        let status = super::errors::CLIENT_CLOSED;
        Pending(Some(RequestLine { app, id, method, path, status, started, seen: None, outcome: None }))
    }

    pub fn id(&self) -> &str {
        self.0.as_ref().map_or("", |line| &line.id)
    }

    /// The line of the answer: its status, and what the handler noted of the request.
    pub fn answered(mut self, status: u16, seen: Option<BodySeen>, outcome: Option<Outcome>) -> Option<RequestLine> {
        let mut line = self.0.take()?;
        (line.status, line.seen, line.outcome) = (status, seen, outcome);
        Some(line)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(mut line) = self.0.take() {
            line.outcome = Some(Outcome::Failed("the client closed the connection before the answer was ready".into()));
            line.write(false);
        }
    }
}

/// An answer's body that writes its request's line once its last part has been handed on.
pub(super) struct Logged {
    body: Body,
    line: Option<RequestLine>,
}

impl Logged {
    pub fn new(body: Body, line: Option<RequestLine>) -> Logged {
        Logged { body, line }
    }

    fn write_line(&mut self, cut: bool) {
        if let Some(line) = self.line.take() {
            line.write(cut);
        }
    }
}

impl HttpBody for Logged {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            // hyper stops polling a body that says it has ended, so its last part counts.
            Poll::Ready(Some(Ok(_))) if self.body.is_end_stream() => self.write_line(false),
            Poll::Ready(None) => self.write_line(false),
            Poll::Ready(Some(Err(_))) => self.write_line(true),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        // An empty answer (axum empties the answer to HEAD too) is whole unpolled; any other
        // left here was cut short.
        let cut = !self.body.is_end_stream();
        self.write_line(cut);
    }
}
