//! Bodies left unread by an early answer (503 overload, 413, 401, 415, 404...).
//!
//! hyper closes a connection whose request body was not read to the end. When the client
//! is still writing a body bigger than the socket buffers, that close resets the connection
//! and the client, which writes its whole body before reading (urllib, Node's agents),
//! sees EPIPE or ECONNRESET instead of the answer. So the unread rest is read and thrown
//! away after the answer is sent, without a permit and without keeping it, within
//! `limits.drain_max_bytes` and the body's time rule ([`UploadPace`]); a connection whose
//! body was drained whole stays open for the next request.
//!
//! A client that sent `Expect: 100-continue` and whose body was never asked for has not
//! sent it: nothing is drained, hyper answers without `100 Continue` and closes.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::conn::ConnHandle;
use super::intake::{client_went_away, UploadPace};
use super::AppState;

/// What a request's handler left of its body.
struct Leftover {
    body: Body,
    /// Whether the handler asked for any of it (after which hyper has sent `100 Continue`).
    polled: bool,
    /// Bytes the handler read.
    read: u64,
}

/// The request body as the handler sees it: when dropped unfinished, what is left goes
/// back to the middleware.
struct Tracked {
    body: Option<Body>,
    polled: bool,
    read: u64,
    left: Arc<Mutex<Option<Leftover>>>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.polled = true;
        let Some(body) = self.body.as_mut() else { return Poll::Ready(None) };
        let polled = Pin::new(body).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.read += n;
            }
            // Ended or broken: nothing left to drain.
            Poll::Ready(None | Some(Err(_))) => self.body = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(HttpBody::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body.as_ref().map_or_else(|| SizeHint::with_exact(0), HttpBody::size_hint)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if let Some(body) = self.body.take().filter(|b| !b.is_end_stream()) {
            let leftover = Leftover { body, polled: self.polled, read: self.read };
            *self.left.lock().unwrap_or_else(|e| e.into_inner()) = Some(leftover);
        }
    }
}

/// How drains ended, for `/metrics`.
#[derive(Default)]
pub struct DrainStats {
    /// Bodies read to their end: the client got its answer, the connection stays open.
    complete: AtomicU64,
    /// Given up: over `drain_max_bytes`, too slow, or declared too big to try.
    given_up: AtomicU64,
    /// The client hung up while being drained.
    gone: AtomicU64,
    bytes: AtomicU64,
}

impl DrainStats {
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        out.push_str(
            "# HELP dapi_http_bodies_drained_total Bodies left unread by an early answer, read and discarded, by how it ended.\n# TYPE dapi_http_bodies_drained_total counter\n",
        );
        for (result, n) in [("complete", &self.complete), ("given_up", &self.given_up), ("client_gone", &self.gone)] {
            let _ =
                writeln!(out, "dapi_http_bodies_drained_total{{result=\"{result}\"}} {}", n.load(Ordering::Relaxed));
        }
        out.push_str("# HELP dapi_http_drained_bytes_total Bytes read and discarded after early answers.\n# TYPE dapi_http_drained_bytes_total counter\n");
        let _ = writeln!(out, "dapi_http_drained_bytes_total {}", self.bytes.load(Ordering::Relaxed));
    }
}

/// Middleware: after the answer, drains what the handler left of the request body.
pub(super) async fn drain_leftover(State(app): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let expects_continue =
        request.headers().get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let conn = request.extensions().get::<ConnHandle>().cloned();
    let left = Arc::new(Mutex::new(None));
    let request =
        request.map(|body| Body::new(Tracked { body: Some(body), polled: false, read: 0, left: left.clone() }));
    let response = next.run(request).await;
    let leftover = left.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(leftover) = leftover else { return response };
    // Not asked for, so not sent: hyper skips `100 Continue` and closes after the answer.
    if expects_continue && !leftover.polled {
        return response;
    }
    let limits = app.limits();
    let cap = limits.drain_max_bytes as u64;
    let rest = declared.map(|n| n.saturating_sub(leftover.read));
    // A body too slow to wait for (408), or known to be beyond the cap: closing at once
    // beats reading a part of it.
    if response.status() == StatusCode::REQUEST_TIMEOUT || cap == 0 || rest.is_some_and(|n| n > cap) {
        app.drains.given_up.fetch_add(1, Ordering::Relaxed);
        return response;
    }
    // The connection counts as busy while draining, so its idle and header timers wait.
    let busy = conn.map(|c| c.busy());
    tokio::spawn(drain(app, leftover.body, cap, UploadPace::of(&limits), busy));
    response
}

/// Reads and discards `body` until it ends, `cap` bytes have come, or it is too slow;
/// dropping it unfinished makes hyper close the connection.
async fn drain<T>(app: Arc<AppState>, body: Body, cap: u64, pace: UploadPace, _busy: Option<T>) {
    let mut body = std::pin::pin!(body);
    let start = Instant::now();
    let mut drained = 0u64;
    let stats = &app.drains;
    let ended = loop {
        let deadline = pace.deadline(start, drained as usize);
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(None) => break &stats.complete,
            Ok(Some(Ok(frame))) => {
                drained += frame.data_ref().map_or(0, |d| d.len() as u64);
                if drained > cap {
                    break &stats.given_up;
                }
            }
            Ok(Some(Err(e))) if client_went_away(&e) => break &stats.gone,
            Ok(Some(Err(_))) | Err(_) => break &stats.given_up,
        }
    };
    ended.fetch_add(1, Ordering::Relaxed);
    stats.bytes.fetch_add(drained, Ordering::Relaxed);
    tracing::debug!(drained, ms = start.elapsed().as_millis() as u64, "drained an unread request body");
}
