//! Connections: accepting them under a cap, and closing the ones that send nothing useful.
//!
//! * At most `limits.max_connections` are served at once; `limits.health_connections`
//!   more are served for health checks only (`/ping`, `/metrics`, `/openapi.json`, one
//!   request per connection). Past both, new connections wait in the kernel's listen queue
//!   until one closes: those in progress are never disturbed, and the process stays well
//!   below its descriptor limit.
//! * A connection must send a request's headers within `limits.header_timeout_ms` (from
//!   its opening, or on a kept-alive connection from the first byte of the next request),
//!   and is closed after `limits.idle_timeout_ms` without a request. hyper's own header
//!   timer is not used: it also runs while a kept-alive connection is idle, so the two
//!   limits could not differ. Answers on a connection kept alive say so (`Keep-Alive:
//!   timeout=N`), so that pooling clients retire it before it is closed under them.
//! * An answer given up on part-way (`ConnHandle::abort`: its client stalled past the
//!   request timeout) resets its connection at once, rather than leaving hyper to wait for
//!   the client to read what it already holds.
//! * Each connection is served by hyper's HTTP/1 server directly (axum::serve exposes
//!   none of this).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::ServiceExt;

use super::errors::ApiError;
use super::AppState;

/// One connection's activity, shared by its reader, its requests and its watchdog.
struct ConnState {
    opened: Instant,
    /// Requests being handled, answers being sent and bodies being drained.
    busy: AtomicUsize,
    /// Requests started on this connection.
    requests: AtomicU64,
    /// When the connection last fell idle, ms after `opened`.
    idle_since: AtomicU64,
    /// When the first byte after that came, ms after `opened` plus 1 (0: none yet).
    head_since: AtomicU64,
    /// Set when an answer was given up on: the connection is reset at once.
    aborted: AtomicBool,
    /// Bytes written to the socket so far.
    written: AtomicU64,
    /// The socket (for how much of what was written the client has yet to take).
    socket: Option<std::os::fd::RawFd>,
    /// The connection is still served, its socket open.
    served: AtomicBool,
    /// Woken when the connection falls idle, when the next request begins to arrive, and
    /// when it is aborted.
    changed: Notify,
}

impl ConnState {
    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.opened + Duration::from_millis(ms)
    }

    /// When the watchdog must act next, and why; `None` while busy.
    fn deadline(&self, header: Duration, idle: Duration) -> Option<(Instant, Expiry)> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        if self.requests.load(Ordering::Acquire) == 0 {
            return Some((self.opened + header, Expiry::Header));
        }
        match self.head_since.load(Ordering::Acquire) {
            0 => Some((self.at(self.idle_since.load(Ordering::Acquire)) + idle, Expiry::Idle)),
            since => Some((self.at(since - 1) + header, Expiry::Header)),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expiry {
    /// A request's headers did not come in time.
    Header,
    /// No request came in time.
    Idle,
    /// Told to close for idleness, it did not finish closing in time.
    Closing,
}

/// Marks its connection busy while it lives: the idle and header timers do not run.
pub struct Busy(Arc<ConnState>);

impl Drop for Busy {
    fn drop(&mut self) {
        let state = &self.0;
        if state.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            state.idle_since.store(state.now_ms(), Ordering::Release);
            state.head_since.store(0, Ordering::Release);
            state.changed.notify_one();
        }
    }
}

/// The connection a request came on, in its extensions.
#[derive(Clone)]
pub struct ConnHandle {
    state: Arc<ConnState>,
    /// Accepted past `max_connections`: health checks only.
    health_only: bool,
}

impl ConnHandle {
    /// Resets the connection: an answer was given up on part-way (its client stalled past the
    /// request timeout). hyper would otherwise wait for the parts it already holds to be read,
    /// holding the slot and the socket's buffered megabytes for as long as the client stays.
    pub fn abort(&self) {
        self.state.aborted.store(true, Ordering::Release);
        self.state.changed.notify_one();
    }

    /// How many of the bytes written the client has taken (acknowledged): it grows while the
    /// client reads, even when the socket's buffer is too full for more to be written.
    pub fn taken(&self) -> Option<u64> {
        let state = &self.state;
        let socket = state.socket.filter(|_| state.served.load(Ordering::Acquire))?;
        let mut unsent: libc::c_int = 0;
        // SAFETY: TIOCOUTQ writes one int. The socket is open while `served` holds (a
        // request ending just as it closes could ask a reused descriptor, which only gives
        // a wrong count for one look).
        let asked = unsafe { libc::ioctl(socket, libc::TIOCOUTQ, &mut unsent) };
        (asked == 0).then(|| state.written.load(Ordering::Acquire).saturating_sub(unsent.max(0) as u64))
    }

    pub fn busy(&self) -> Busy {
        self.state.busy.fetch_add(1, Ordering::AcqRel);
        Busy(self.state.clone())
    }
}

/// The socket, noting when the first byte of a request arrives on an idle connection.
struct Watched {
    stream: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let state = &self.state;
        if buf.filled().len() > before && state.busy.load(Ordering::Acquire) == 0 {
            let now = state.now_ms() + 1;
            // The first byte of the next request: the watchdog swaps the idle timer for the
            // header timer.
            if state.head_since.compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                state.changed.notify_one();
            }
        }
        polled
    }
}

impl Watched {
    fn count(&self, polled: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = polled {
            self.state.written.fetch_add(n as u64, Ordering::AcqRel);
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.count(polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.count(polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// An answer's body, keeping its connection busy until it is sent.
struct Answer {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Connection counters for `/metrics`.
#[derive(Default)]
pub struct ConnStats {
    open: AtomicU64,
    ordinary: AtomicU64,
    health_only: AtomicU64,
    header_timeouts: AtomicU64,
    idle_closed: AtomicU64,
}

impl ConnStats {
    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections accepted since start-up.
    pub fn accepted(&self) -> u64 {
        self.ordinary.load(Ordering::Relaxed) + self.health_only.load(Ordering::Relaxed)
    }

    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP dapi_http_connections_open Connections open now.\n# TYPE dapi_http_connections_open gauge\ndapi_http_connections_open {}\n\
             # HELP dapi_http_connections_total Connections accepted, by slot.\n# TYPE dapi_http_connections_total counter\n\
             dapi_http_connections_total{{slot=\"ordinary\"}} {}\ndapi_http_connections_total{{slot=\"health\"}} {}\n\
             # HELP dapi_http_connections_closed_total Connections closed by dapi for sending nothing in time.\n# TYPE dapi_http_connections_closed_total counter\n\
             dapi_http_connections_closed_total{{reason=\"header_timeout\"}} {}\ndapi_http_connections_closed_total{{reason=\"idle\"}} {}\n",
            get(&self.open),
            get(&self.ordinary),
            get(&self.health_only),
            get(&self.header_timeouts),
            get(&self.idle_closed),
        );
    }
}

/// Middleware: on a connection accepted past the cap, only health checks are served.
pub(super) async fn health_only_gate(request: Request, next: Next) -> Response {
    let health_only = request.extensions().get::<ConnHandle>().is_some_and(|c| c.health_only);
    let cheap =
        request.method() == Method::GET && matches!(request.uri().path(), "/ping" | "/metrics" | "/openapi.json");
    if health_only && !cheap {
        let mut response = ApiError::Unavailable("too many connections; retry shortly".into()).into_response();
        response.headers_mut().insert(axum::http::header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    next.run(request).await
}

/// The header timeout of a connection in the health reserve, at most.
const HEALTH_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Descriptors kept for everything but connections (listener, logs, runtime, files).
const SPARE_DESCRIPTORS: u64 = 128;

/// `(ordinary, health)` connection slots, lowered to fit the descriptor limit.
fn fit_to_descriptors(max: usize, health: usize) -> (usize, usize) {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return (max, health);
    }
    let room = limit.rlim_cur.saturating_sub(SPARE_DESCRIPTORS).max(2);
    if (max + health) as u64 <= room {
        return (max, health);
    }
    let health = health.min(room as usize / 8);
    let max = (room as usize - health).max(1);
    tracing::warn!(
        descriptors = limit.rlim_cur,
        max_connections = max,
        health_connections = health,
        "the connection limits exceed the descriptor limit (ulimit -n); lowered to fit"
    );
    (max, health)
}

/// A connection slot, held while the connection is open: ordinary, or for health checks
/// only.
struct Slot {
    _permit: OwnedSemaphorePermit,
    health_only: bool,
}

async fn take_slot(ordinary: &Arc<Semaphore>, health: &Arc<Semaphore>) -> Option<Slot> {
    if let Ok(p) = ordinary.clone().try_acquire_owned() {
        return Some(Slot { _permit: p, health_only: false });
    }
    if let Ok(p) = health.clone().try_acquire_owned() {
        return Some(Slot { _permit: p, health_only: true });
    }
    // Both full: accept nothing until a connection closes (the semaphores are never
    // closed, so waiting only ends with a slot).
    tokio::select! {
        biased;
        p = ordinary.clone().acquire_owned() => p.ok().map(|p| Slot { _permit: p, health_only: false }),
        p = health.clone().acquire_owned() => p.ok().map(|p| Slot { _permit: p, health_only: true }),
    }
}

/// Whether an accept error concerns only the one connection (it is skipped at once).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// Resolves once the service is told to stop.
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone: nobody can stop the service any more.
    if stop.wait_for(|&s| s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Accepts and serves connections until `stop` resolves; then stops accepting, finishes
/// the requests in flight, and returns once every connection is closed.
pub(super) async fn serve(
    listener: TcpListener,
    app: Arc<AppState>,
    service: super::Service,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let limits = app.limits();
    let (max, health) = fit_to_descriptors(limits.max_connections, limits.health_connections);
    let (ordinary, health) = (Arc::new(Semaphore::new(max)), Arc::new(Semaphore::new(health)));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        stop.await;
        let _ = stop_tx.send(true);
    });
    let mut stopping = stop_rx.clone();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            slot = take_slot(&ordinary, &health) => slot,
            _ = stopped(&mut stopping) => break,
        };
        let Some(slot) = slot else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stopped(&mut stopping) => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors or memory: give the connections in progress time to
                // close some, rather than spin.
                tracing::error!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        connections.spawn(serve_connection(stream, slot, app.clone(), service.clone(), stop_rx.clone()));
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// `Keep-Alive: timeout=N`: how long, in whole seconds, this connection may lie idle before it
/// is closed. A pooling client that reads it retires the connection before then, so it never
/// sends a request on a connection the service is closing at that moment (the request then
/// fails with a reset). Node's agent (from v19) closes its pooled socket a second before the
/// announced time; without the hint, an agent whose own timeout equals ours raced us.
fn keep_alive_hint(idle: Duration) -> Option<HeaderValue> {
    HeaderValue::from_str(&format!("timeout={}", idle.as_secs())).ok()
}

/// Whether the connection stays open after answering `request`: HTTP/1.1 unless it asks to
/// close, HTTP/1.0 only when it asks to be kept alive (as hyper decides).
fn stays_open<B>(request: &Request<B>) -> bool {
    let says = |token| connection_says(request.headers(), token);
    match request.version() {
        axum::http::Version::HTTP_11 => !says("close"),
        axum::http::Version::HTTP_10 => says("keep-alive") && !says("close"),
        _ => false,
    }
}

/// Whether the `Connection` header lists `token` (`close`, `keep-alive`), in any case.
fn connection_says(headers: &axum::http::HeaderMap, token: &str) -> bool {
    headers
        .get_all(axum::http::header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))))
}

async fn serve_connection(
    stream: TcpStream,
    slot: Slot,
    app: Arc<AppState>,
    service: super::Service,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let stats = &app.conns;
    stats.open.fetch_add(1, Ordering::Relaxed);
    let health_only = slot.health_only;
    (if health_only { &stats.health_only } else { &stats.ordinary }).fetch_add(1, Ordering::Relaxed);
    // Small answers go out at once rather than waiting on Nagle's algorithm.
    let _ = stream.set_nodelay(true);
    let limits = app.limits();
    let (mut header, idle) =
        (Duration::from_millis(limits.header_timeout_ms), Duration::from_millis(limits.idle_timeout_ms));
    if health_only {
        // A health check sends its request at once: a connection in the reserve that does
        // not is closed soon, so that a flood of silent ones cannot keep health checks out.
        header = header.min(HEALTH_HEADER_TIMEOUT);
    }
    let socket = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let state = Arc::new(ConnState {
        opened: Instant::now(),
        busy: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
        idle_since: AtomicU64::new(0),
        head_since: AtomicU64::new(0),
        aborted: Default::default(),
        written: AtomicU64::new(0),
        socket: Some(socket),
        served: AtomicBool::new(true),
        changed: Notify::new(),
    });
    let handle = ConnHandle { state: state.clone(), health_only };
    let hint = (!health_only).then(|| keep_alive_hint(idle)).flatten();
    let calls = hyper::service::service_fn(move |request: Request<Incoming>| {
        let busy = handle.busy();
        handle.state.requests.fetch_add(1, Ordering::AcqRel);
        let mut request = request.map(Body::new);
        let hint = hint.clone().filter(|_| stays_open(&request));
        request.extensions_mut().insert(handle.clone());
        let answer = service.clone().oneshot(request);
        async move {
            let mut response = answer.await?;
            if let Some(hint) = hint.filter(|_| !connection_says(response.headers(), "close")) {
                response.headers_mut().insert(axum::http::header::HeaderName::from_static("keep-alive"), hint);
            }
            Ok::<_, Infallible>(response.map(|body| Body::new(Answer { body, _busy: busy })))
        }
    });
    let io = TokioIo::new(Watched { stream, state: state.clone() });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // A health-check connection serves one request, so it frees its slot at once.
    builder.keep_alive(!health_only);
    let connection = builder.serve_connection(io, calls);
    let mut connection = std::pin::pin!(connection);
    let mut shutting_down = false;
    // When an idle connection was told to close: it gets the header time to do so.
    let mut closing: Option<Instant> = None;
    let deadline = |closing: Option<Instant>| match (state.deadline(header, idle), closing) {
        (Some((_, Expiry::Idle)), Some(since)) => Some((since + header, Expiry::Closing)),
        (next, _) => next,
    };
    loop {
        if state.aborted.load(Ordering::Acquire) {
            reset_on_close(socket);
            break;
        }
        let next = deadline(closing);
        let sleep = async {
            match next {
                Some((at, _)) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = connection.as_mut() => break,
            // The connection fell idle, or a request began: the deadline changed.
            _ = state.changed.notified() => {}
            _ = sleep => {
                // Re-read: a request may have begun since the deadline was taken.
                match deadline(closing) {
                    Some((at, expiry)) if at <= Instant::now() => match expiry {
                        Expiry::Header => {
                            stats.header_timeouts.fetch_add(1, Ordering::Relaxed);
                            tracing::debug!("closing a connection that did not send its headers in time");
                            break;
                        }
                        Expiry::Idle => {
                            stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                            // hyper closes an idle connection at once; a request that
                            // slipped in is answered first.
                            connection.as_mut().graceful_shutdown();
                            closing = Some(Instant::now());
                        }
                        // It could not close cleanly in time (an answer nobody reads).
                        Expiry::Closing => break,
                    },
                    _ => {}
                }
            }
            _ = stopped(&mut stop), if !shutting_down => {
                shutting_down = true;
                // Nothing in flight: nothing to finish.
                if state.busy.load(Ordering::Acquire) == 0 {
                    break;
                }
                connection.as_mut().graceful_shutdown();
            }
        }
    }
    // The socket closes when this returns: no more looks at it.
    state.served.store(false, Ordering::Release);
    stats.open.fetch_sub(1, Ordering::Relaxed);
    drop(slot);
}

/// Makes closing `socket` reset the connection (RST), dropping what its buffer still holds:
/// a client must not take a part of an answer for the whole, and the memory goes at once.
fn reset_on_close(socket: std::os::fd::RawFd) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: `socket` is the connection's own, still open (the connection closes it when
    // dropped, after this); setsockopt only reads the struct it is given.
    unsafe {
        libc::setsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_times_headers_then_idleness_and_nothing_in_between() {
        let (header, idle) = (Duration::from_secs(10), Duration::from_secs(60));
        let state = Arc::new(ConnState {
            opened: Instant::now(),
            busy: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            aborted: Default::default(),
            written: AtomicU64::new(0),
            socket: None,
            served: Default::default(),
            changed: Notify::new(),
        });
        // A new connection: its first head is timed from the opening, bytes or not.
        assert_eq!(state.deadline(header, idle), Some((state.opened + header, Expiry::Header)));
        let handle = ConnHandle { state: state.clone(), health_only: false };
        let busy = handle.busy();
        state.requests.fetch_add(1, Ordering::AcqRel);
        assert_eq!(state.deadline(header, idle), None, "a request in progress is never timed out here");
        let draining = handle.busy();
        drop(busy);
        assert_eq!(state.deadline(header, idle), None, "nor is a body being drained");
        drop(draining);
        let since = state.at(state.idle_since.load(Ordering::Acquire));
        assert_eq!(state.deadline(header, idle), Some((since + idle, Expiry::Idle)));
        // The next request's first byte, 5 s in: its head is timed from there.
        state.head_since.store(5001, Ordering::Release);
        assert_eq!(state.deadline(header, idle), Some((state.at(5000) + header, Expiry::Header)));
    }
}
