//! How a request gets in: a concurrency permit (or 503 at once), the body (whole, or read
//! while it arrives), a core to compute on, and the reply that gives them back.
//!
//! Memory stays bounded: at most `max_concurrent_allocations` requests are held at a time
//! (plus those answered and being freed, for a few ms); at most one allocation per core
//! computes at a time, the others wait their turn.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::http::{header, HeaderMap};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::errors::ApiError;
use super::AppState;
use crate::config::Limits;
use crate::engine::Engine;
use crate::wire::pages::Body as WholeBody;
use crate::wire::Arriving;

/// Refuses any content type but JSON (a missing one is taken as JSON).
pub(super) fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else { return Ok(()) };
    let ct = ct.to_str().unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if mime == "application/json" || mime.ends_with("+json") {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!("content type must be application/json, not {ct:?}")))
    }
}

/// How a request body is encoded on the wire (`Content-Encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyEncoding {
    Identity,
    /// Decompressed while it arrives; the size limit applies to the decompressed bytes.
    Gzip,
}

/// Reads `Content-Encoding`: none or `identity` (as is), `gzip` (or `x-gzip`); anything else
/// (`br`, `deflate`, `zstd`, several layers) is a 415, before the body is read.
pub(super) fn body_encoding(headers: &HeaderMap) -> Result<BodyEncoding, ApiError> {
    let mut encoding = BodyEncoding::Identity;
    for value in headers.get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().unwrap_or("\u{fffd}");
        for token in text.split(',').map(|t| t.trim().to_ascii_lowercase()).filter(|t| !t.is_empty()) {
            match (token.as_str(), encoding) {
                ("identity", _) => {}
                ("gzip" | "x-gzip", BodyEncoding::Identity) => encoding = BodyEncoding::Gzip,
                _ => {
                    return Err(ApiError::UnsupportedMediaType(format!(
                        "content encoding must be gzip or identity, not {text:?}"
                    )))
                }
            }
        }
    }
    Ok(encoding)
}

/// The decompressed body, refusing to grow past the size limit: a small compressed body
/// that inflates to gigabytes (a "gzip bomb") stops at `limit` bytes.
struct Bounded {
    buf: Vec<u8>,
    limit: usize,
    over: bool,
}

impl std::io::Write for Bounded {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.over = true;
            return Err(std::io::Error::other("over the body size limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Reads a gzip body, decompressing each frame as it arrives (the compressed body is never
/// held whole); both its compressed and its decompressed size must stay within `limit`.
async fn read_gzip_body(body: Body, limit: usize, pace: UploadPace) -> Result<(WholeBody, BodySeen), ApiError> {
    use std::io::Write as _;
    let mut decoder = flate2::write::MultiGzDecoder::new(Bounded { buf: Vec::new(), limit, over: false });
    let fail = |decoder: &flate2::write::MultiGzDecoder<Bounded>, e: std::io::Error| {
        if decoder.get_ref().over {
            ApiError::TooLarge(limit)
        } else {
            ApiError::Malformed(format!("the gzip body cannot be decompressed: {e}"))
        }
    };
    let seen = read_frames(body, limit, pace, |data| decoder.write_all(data).map_err(|e| fail(&decoder, e))).await?;
    if let Err(e) = decoder.try_finish() {
        return Err(fail(&decoder, e));
    }
    let bounded = decoder.finish().map_err(|e| ApiError::Malformed(format!("the gzip body is incomplete: {e}")))?;
    Ok((WholeBody::new(bounded.buf), seen))
}

/// The body's declared length, refused when over `limit`.
fn declared_length(headers: &HeaderMap, limit: usize) -> Result<Option<usize>, ApiError> {
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    match declared {
        Some(n) if n > limit => Err(ApiError::TooLarge(limit)),
        _ => Ok(declared),
    }
}

/// How long a body may take to arrive: `body_timeout_ms`, plus one second per
/// `min_body_bytes_per_sec` bytes received so far (Apache's mod_reqtimeout rule). A client
/// sending at a fair rate is never cut off; one trickling a few bytes at a time loses its
/// permit after `body_timeout_ms`, not after the whole request timeout.
#[derive(Debug, Clone, Copy)]
pub(super) struct UploadPace {
    grace: Duration,
    min_rate: u64,
}

impl UploadPace {
    pub(super) fn of(limits: &Limits) -> UploadPace {
        UploadPace {
            grace: Duration::from_millis(limits.body_timeout_ms),
            min_rate: limits.min_body_bytes_per_sec.max(1),
        }
    }

    /// When a body that began arriving at `start` must have arrived, `bytes` in.
    pub(super) fn deadline(&self, start: Instant, bytes: usize) -> Instant {
        let earned = Duration::from_secs_f64(bytes as f64 / self.min_rate as f64);
        start + self.grace + earned
    }
}

/// Whether a body read failed because the client went away (hung up, reset) rather than
/// because it sent something malformed.
pub(super) fn client_went_away(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            return matches!(io.kind(), UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe);
        }
        cause = e.source();
    }
    false
}

/// Reads the body frame by frame, handing each to `keep`, refusing more than `limit`
/// bytes or a body slower than `pace`; its size and digest (each frame digested as it
/// arrives, while the client is still sending).
async fn read_frames(
    body: Body,
    limit: usize,
    pace: UploadPace,
    mut keep: impl FnMut(&[u8]) -> Result<(), ApiError>,
) -> Result<BodySeen, ApiError> {
    let mut digest = crate::digest::Digest::default();
    let mut bytes = 0;
    let mut body = std::pin::pin!(body);
    let start = Instant::now();
    loop {
        let next = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx));
        let Ok(frame) = tokio::time::timeout_at(pace.deadline(start, bytes), next).await else {
            return Err(ApiError::BodyTimeout(format!(
                "the body arrived too slowly ({bytes} bytes in {} ms)",
                start.elapsed().as_millis()
            )));
        };
        let Some(frame) = frame else { break };
        let frame = frame.map_err(|e| {
            if client_went_away(&e) {
                ApiError::ClientClosed(format!("the client went away before its body was whole: {e}"))
            } else {
                ApiError::Malformed(format!("cannot read the request body: {e}"))
            }
        })?;
        if let Ok(data) = frame.into_data() {
            if bytes + data.len() > limit {
                return Err(ApiError::TooLarge(limit));
            }
            bytes += data.len();
            keep(&data)?;
            digest.update(&data);
        }
    }
    Ok(BodySeen { bytes, digest: digest.finish(), phases: Phases::default() })
}

/// Reads the whole body into one buffer sized from `Content-Length`, so a large request is
/// held once (collecting the frames first and then joining them would hold it twice).
async fn read_body(
    declared: Option<usize>,
    body: Body,
    limit: usize,
    pace: UploadPace,
) -> Result<(WholeBody, BodySeen), ApiError> {
    let mut buf = crate::wire::pages::body_buffer_soon(declared.unwrap_or(0)).await;
    let mut ascii = true;
    let seen = read_frames(body, limit, pace, |data| {
        ascii &= crate::scan::extend_noting_ascii(&mut buf, data);
        Ok(())
    })
    .await?;
    Ok((if ascii { WholeBody::known_ascii(buf) } else { WholeBody::new(buf) }, seen))
}

/// A request body as handed to the work: whole, or (a big one, for `/allocate` or
/// `/capacity`) still arriving.
pub enum Received {
    Whole(crate::wire::pages::Body),
    Arriving(Arc<Arriving>),
}

impl Received {
    /// Called once the answer has left, before the request is freed: a big body's buffer is
    /// then on its way back, and the next big body (a client sending one after another)
    /// waits for it rather than take fresh pages.
    pub fn answered(&self) {
        match self {
            Received::Whole(body) => body.answered(),
            Received::Arriving(body) => body.answered(),
        }
    }
}

/// Bodies at least this big are read while they arrive (when the endpoint can). Smaller
/// ones (CNAPI's usual tens of servers) arrive in a fraction of a millisecond: they are
/// read whole and parsed under the one-per-core gate, which serves many of them best.
const ARRIVING_FROM: usize = 1 << 20;

/// Size and digest of a request body, logged instead of the body itself; and when, after
/// its reading began, it was in, read and decided.
#[derive(Debug, Clone)]
pub struct BodySeen {
    pub bytes: usize,
    pub digest: String,
    pub phases: Phases,
}

/// Where a request's time went, each in ms from when its body began to be read: the body
/// in (its last byte received), the body read (parsed), the answer decided. A big body is
/// read while it arrives, so `read_ms` comes soon after `body_ms`; what follows `decided_ms`
/// is writing and sending the answer. A phase not reached (or not timed: a small request
/// answered inline) is `None`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Phases {
    pub body_ms: Option<f64>,
    pub read_ms: Option<f64>,
    pub decided_ms: Option<f64>,
}

/// What a request's work noted of its phases ([`Reply::read`], [`Reply::decided`]).
#[derive(Debug, Clone, Copy, Default)]
struct WorkMarks {
    read: Option<Duration>,
    decided: Option<Duration>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// How a request's work hands back its result: as soon as the answer is ready, so that
/// freeing the parsed request (a few ms at datacenter scale) happens after the answer has
/// left. Sending also gives back the request's core and its permit: the request is
/// answered, so its client may send the next one at once and not be refused.
pub struct Reply<T> {
    tx: tokio::sync::oneshot::Sender<(Result<T, ApiError>, WorkMarks)>,
    core: Option<OwnedSemaphorePermit>,
    cores: Arc<tokio::sync::Semaphore>,
    permit: OwnedSemaphorePermit,
    /// When the body began to be read.
    origin: Instant,
    marks: WorkMarks,
}

impl<T> Reply<T> {
    /// Waits for a core unless the request holds one already (a body read while it
    /// arrived is parsed without one: that work mostly waits on the network).
    pub(super) fn computing(&mut self) {
        if self.core.is_none() {
            self.take_core();
        }
    }

    /// Waits for a core, unless nobody waits for the answer any more (then false).
    fn take_core(&mut self) -> bool {
        let cores = self.cores.clone();
        let tx = &mut self.tx;
        self.core = tokio::runtime::Handle::current().block_on(async {
            tokio::select! {
                biased;
                // Nobody waits for the answer any more (the request timed out): no core for it.
                () = tx.closed() => None,
                // The semaphore is never closed, so waiting only ends with a core.
                core = cores.acquire_owned() => core.ok(),
            }
        });
        self.core.is_some()
    }

    /// Whether nobody waits for the answer any more (the request timed out).
    pub(super) fn abandoned(&self) -> bool {
        self.tx.is_closed()
    }

    /// Notes that the body has been read (parsed), for the request's log line.
    pub(super) fn read(&mut self) {
        self.marks.read = Some(self.origin.elapsed());
    }

    /// Notes that the answer has been decided, for the request's log line.
    pub(super) fn decided(&mut self) {
        self.marks.decided = Some(self.origin.elapsed());
    }

    pub(super) fn send(self, result: Result<T, ApiError>) {
        let Reply { tx, core: _core, permit, marks, .. } = self;
        // Given back before the answer leaves, or the client's next request could find
        // them still taken.
        drop((_core, permit));
        // The request may have timed out and gone: nobody is left to answer.
        let _ = tx.send((result, marks));
    }

    /// Sends the head of an answer whose body follows in parts: the permit stays with the
    /// caller until the last part is sent (the request is held until then).
    pub(super) fn send_head(self, result: Result<T, ApiError>) -> OwnedSemaphorePermit {
        let Reply { tx, core, permit, marks, .. } = self;
        drop(core);
        let _ = tx.send((result, marks));
        permit
    }
}

/// Takes a concurrency permit (or answers 503 at once, before reading anything), reads the
/// body, waits for a free core and runs `work` on it in the blocking pool, all within the
/// request timeout. Memory stays bounded: at most `max_concurrent_allocations` requests are
/// held at a time (plus those answered and being freed, for a few ms); at most one
/// allocation per core computes at a time.
pub(super) async fn run_limited<T: Send + 'static>(
    app: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    arriving: bool,
    work: impl FnOnce(Arc<Engine>, Received, Reply<T>) + Send + 'static,
) -> (Option<BodySeen>, Result<T, ApiError>) {
    run_limited_or_inline(app, headers, body, arriving, |_: &[u8]| None, work).await
}

/// Work that runs on the request's own task instead of the blocking pool, made from a
/// whole body: it holds the request's permit, and takes a core itself while it computes.
pub(super) type Inline<T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, ApiError>> + Send>>;

/// [`run_limited`], but a whole body under 1 MiB is first offered to `inline`: when it
/// takes it (its work is short, or waits mostly), that work runs where it is, within the
/// same permit and timeout, and `work` is not run.
pub(super) async fn run_limited_or_inline<T: Send + 'static>(
    app: &Arc<AppState>,
    headers: &HeaderMap,
    body: Body,
    arriving: bool,
    inline: impl FnOnce(&[u8]) -> Option<Inline<T>>,
    work: impl FnOnce(Arc<Engine>, Received, Reply<T>) + Send + 'static,
) -> (Option<BodySeen>, Result<T, ApiError>) {
    let encoding = match check_content_type(headers).and_then(|()| body_encoding(headers)) {
        Ok(encoding) => encoding,
        Err(e) => return (None, Err(e)),
    };
    let Ok(permit) = app.permits.clone().try_acquire_owned() else {
        return (None, Err(ApiError::Unavailable("too many allocations in progress; retry shortly".into())));
    };
    let limits = app.limits();
    let timeout = Duration::from_millis(limits.request_timeout_ms);
    let pace = UploadPace::of(&limits);
    let engine = app.engine();
    let mut seen = None;
    let origin = Instant::now();
    let run = async {
        let declared = declared_length(headers, limits.max_body_bytes)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        let cores = app.cpu_slots.clone();
        // A gzip body's decompressed length is unknown until its end: it is read whole.
        let arriving = arriving && encoding == BodyEncoding::Identity;
        let task = match declared.filter(|&n| arriving && n >= ARRIVING_FROM) {
            // Read while it arrives: the work starts now, and takes a core once parsed.
            Some(len) => {
                let (body_so_far, mut writer) =
                    Arriving::in_buffer(crate::wire::pages::body_buffer_soon(len).await, len);
                let reply = Reply { tx, core: None, cores, permit, origin, marks: WorkMarks::default() };
                let task = tokio::task::spawn_blocking(move || work(engine, Received::Arriving(body_so_far), reply));
                let too_long = || ApiError::Malformed("the body is longer than its Content-Length".into());
                seen = Some(
                    read_frames(body, limits.max_body_bytes, pace, |data| {
                        writer.push(data).then_some(()).ok_or_else(too_long)
                    })
                    .await?,
                );
                if let Some(seen) = seen.as_mut() {
                    seen.phases.body_ms = Some(ms(origin.elapsed()));
                }
                if !writer.finish() {
                    return Err(ApiError::Malformed("the body is shorter than its Content-Length".into()));
                }
                task
            }
            None => {
                let (bytes, mut body_seen) = match encoding {
                    BodyEncoding::Identity => read_body(declared, body, limits.max_body_bytes, pace).await?,
                    BodyEncoding::Gzip => read_gzip_body(body, limits.max_body_bytes, pace).await?,
                };
                body_seen.phases.body_ms = Some(ms(origin.elapsed()));
                seen = Some(body_seen);
                // Only bodies that could have been read whole anyway: a big one (gzip) is
                // not looked at on the runtime's thread.
                if let Some(inline) = (bytes.len() < ARRIVING_FROM).then(|| inline(&bytes)).flatten() {
                    drop(bytes);
                    let result = inline.await;
                    drop(permit);
                    return result;
                }
                // The core is waited for on the blocking thread itself: an allocation that
                // ends hands its core straight to the next one's thread, with no turn of the
                // runtime's thread in between (under load that turn left the cores idle).
                let mut reply = Reply { tx, core: None, cores, permit, origin, marks: WorkMarks::default() };
                tokio::task::spawn_blocking(move || {
                    if reply.take_core() {
                        work(engine, Received::Whole(bytes), reply)
                    }
                })
            }
        };
        match rx.await {
            Ok((result, marks)) => {
                if let Some(seen) = seen.as_mut() {
                    seen.phases.read_ms = marks.read.map(ms);
                    seen.phases.decided_ms = marks.decided.map(ms);
                }
                result
            }
            // The work ended without answering: it panicked.
            Err(_) => match task.await {
                Err(join) => Err(ApiError::Internal(format!("the request failed unexpectedly: {join}"))),
                Ok(()) => Err(ApiError::Internal("the request ended without an answer".into())),
            },
        }
    };
    let result = match tokio::time::timeout(timeout, run).await {
        Err(_) => Err(ApiError::Unavailable(format!("the request took longer than {} ms", timeout.as_millis()))),
        Ok(result) => result,
    };
    (seen, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::response::IntoResponse;

    #[test]
    fn a_body_earns_time_at_the_minimum_rate() {
        let pace = UploadPace { grace: Duration::from_secs(5), min_rate: 1000 };
        let start = Instant::now();
        assert_eq!(pace.deadline(start, 0), start + Duration::from_secs(5));
        assert_eq!(pace.deadline(start, 3000), start + Duration::from_secs(8));
    }

    #[test]
    fn a_hang_up_is_told_from_a_malformed_body() {
        let gone = axum::Error::new(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        assert!(client_went_away(&gone));
        let reset = axum::Error::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(client_went_away(&reset));
        let bad_chunk = axum::Error::new(std::io::Error::new(std::io::ErrorKind::InvalidData, "invalid chunk size"));
        assert!(!client_went_away(&bad_chunk));
    }

    #[tokio::test]
    async fn a_panic_inside_a_request_is_a_500_and_frees_its_permit() {
        let config = crate::config::ServiceConfig::load(None, Vec::new()).expect("config");
        let app = Arc::new(AppState::new(config, None).expect("state"));
        let (permits, cores) = (app.permits.available_permits(), app.cpu_slots.available_permits());
        let (seen, result) =
            run_limited(&app, &HeaderMap::new(), Body::from("{}"), false, |_, _, _: Reply<()>| panic!("a bug")).await;
        assert!(matches!(result, Err(ApiError::Internal(_))), "{result:?}");
        assert_eq!(seen.map(|s| s.bytes), Some(2));
        assert_eq!(app.permits.available_permits(), permits);
        assert_eq!(app.cpu_slots.available_permits(), cores);
        let response = result.map_or_else(IntoResponse::into_response, |()| StatusCode::OK.into_response());
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }

    /// Runs one request while every core is taken, until it times out; whether its work
    /// computed. Its thread must stop waiting for a core then, with the cores still taken.
    async fn given_up_while_every_core_is_taken(body: Vec<u8>, arriving: bool) -> bool {
        let env = [("DAPI_LIMITS__REQUEST_TIMEOUT_MS".to_string(), "200".to_string())];
        let config = crate::config::ServiceConfig::load(None, env).expect("config");
        let app = Arc::new(AppState::new(config, None).expect("state"));
        let (permits, cores) = (app.permits.available_permits(), app.cpu_slots.available_permits());
        let every_core = app.cpu_slots.clone().acquire_many_owned(cores as u32).await.expect("cores");
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, body.len().into());
        let computed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let computed_in_work = computed.clone();
        let (_, result) = run_limited(&app, &headers, Body::from(body), arriving, move |_, _, mut reply: Reply<()>| {
            reply.computing();
            computed_in_work.store(!reply.abandoned(), std::sync::atomic::Ordering::SeqCst);
            reply.send(Ok(()));
        })
        .await;
        assert!(matches!(result, Err(ApiError::Unavailable(_))), "{result:?}");
        for _ in 0..200 {
            if app.permits.available_permits() == permits {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(app.permits.available_permits(), permits, "the request's thread still waits for a core");
        drop(every_core);
        assert_eq!(app.cpu_slots.available_permits(), cores);
        computed.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_request_given_up_while_waiting_for_a_core_lets_go() {
        // A whole body waits for its core before its work starts; one read while it arrives
        // (1 MiB and more) is parsed first, and waits for the core to compute.
        assert!(!given_up_while_every_core_is_taken(b"{}".to_vec(), false).await);
        assert!(!given_up_while_every_core_is_taken(vec![b' '; ARRIVING_FROM], true).await);
    }

    #[tokio::test]
    async fn the_answer_leaves_before_the_request_is_freed() {
        let config = crate::config::ServiceConfig::load(None, Vec::new()).expect("config");
        let app = Arc::new(AppState::new(config, None).expect("state"));
        let (freed_tx, freed_rx) = std::sync::mpsc::channel();
        let (_, result) =
            run_limited(&app, &HeaderMap::new(), Body::from("{}"), false, move |_, _, reply: Reply<i32>| {
                reply.send(Ok(7));
                // Freeing takes a while; the answer is already on its way.
                std::thread::sleep(Duration::from_millis(200));
                let _ = freed_tx.send(());
            })
            .await;
        assert_eq!(result.ok(), Some(7));
        assert!(freed_rx.try_recv().is_err(), "the answer waited for the freeing");
        assert!(freed_rx.recv_timeout(Duration::from_secs(5)).is_ok());
    }
}
