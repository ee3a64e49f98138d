//! The HTTP service: a thin axum layer over the engine.
//!
//! `POST /allocate`, `POST /capacity`, `GET /ping`, `GET /openapi.json`, `GET /metrics`,
//! `POST /admin/reload`, and in inventory mode `/inventory/*` (`inventory`). One engine is
//! built at start-up and shared; SIGHUP or `POST /admin/reload` swaps in a new one
//! atomically when the new config is valid. Every request is logged as one bunyan line and
//! counted in the metrics.

mod conn;
mod drain;
mod errors;
mod handlers;
mod intake;
mod inventory;
pub mod logging;
mod metrics;
pub mod openapi;
mod request_log;
mod request_schema;
mod stream;
mod watch;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

pub use errors::ApiError;

use crate::config::{ConfigError, Limits, ServiceConfig};
use crate::engine::Engine;
use crate::plugins::custom_js::CustomSet;
use crate::record::Recorder;
use crate::shadow::{ShadowEngine, ShadowStats};
use metrics::Metrics;

/// What a request ended with, for its log line.
#[derive(Debug, Clone)]
pub enum Outcome {
    Allocated { servers: usize, uuid: String },
    NoServer { servers: usize, reason: String },
    Capacity { servers: usize },
    Ping,
    Failed(String),
}

struct Loaded {
    engine: Arc<Engine>,
    config: Arc<ServiceConfig>,
    /// The custom plugins the engine was built with.
    custom: Option<Arc<CustomSet>>,
    /// The engine of `shadow_config`, when set.
    shadow: Option<Arc<ShadowEngine>>,
}

/// State shared by every request.
pub struct AppState {
    loaded: RwLock<Loaded>,
    /// The `--config` file, re-read on reload.
    config_file: Option<PathBuf>,
    /// The config the process started with: what the settings read at start-up only
    /// still hold, whatever reloads came since.
    at_start: Arc<ServiceConfig>,
    permits: Arc<Semaphore>,
    max_permits: usize,
    /// One per core: allocations whose bodies are read wait here for a core, in arrival
    /// order, rather than all computing at once and sharing the cores (and their caches).
    cpu_slots: Arc<Semaphore>,
    metrics: Metrics,
    conns: conn::ConnStats,
    drains: drain::DrainStats,
    started: Instant,
    /// Inventory mode's replica, when `inventory.url` is set.
    inventory: std::sync::OnceLock<Arc<crate::inventory::Inventory>>,
    /// Recording (`record.dir`), when on; its settings are read at start-up only.
    recorder: Option<Recorder>,
    /// The shadow config's counters and CPU budget.
    shadow_stats: ShadowStats,
}

impl AppState {
    /// Builds the state; fails (naming what to fix) when the config's engine is invalid.
    pub fn new(config: ServiceConfig, config_file: Option<PathBuf>) -> Result<AppState, ConfigError> {
        let (engine, custom) = config.engine_and_plugins()?;
        let engine = Arc::new(engine);
        let shadow = ShadowEngine::load(&config)?.map(Arc::new);
        let recorder = Recorder::start(&config.record, &config)?;
        let max_permits = config.limits.max_concurrent_allocations;
        let permits = Arc::new(Semaphore::new(max_permits));
        let metrics = Metrics::new(std::time::Duration::from_millis(config.limits.request_timeout_ms), max_permits);
        let config = Arc::new(config);
        Ok(AppState {
            loaded: RwLock::new(Loaded { engine, config: config.clone(), custom, shadow }),
            config_file,
            at_start: config,
            permits,
            cpu_slots: Arc::new(Semaphore::new(crate::cores().unwrap_or(2))),
            max_permits,
            metrics,
            conns: conn::ConnStats::default(),
            drains: drain::DrainStats::default(),
            started: Instant::now(),
            inventory: std::sync::OnceLock::new(),
            recorder,
            shadow_stats: ShadowStats::default(),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Switches inventory mode on (once, at start-up).
    pub fn set_inventory(&self, inventory: Arc<crate::inventory::Inventory>) {
        let _ = self.inventory.set(inventory);
    }

    pub fn inventory(&self) -> Option<&Arc<crate::inventory::Inventory>> {
        self.inventory.get()
    }

    pub fn engine(&self) -> Arc<Engine> {
        self.read().engine.clone()
    }

    pub fn limits(&self) -> Limits {
        self.read().config.limits.clone()
    }

    fn auth_token(&self) -> Option<String> {
        self.read().config.auth_token.clone()
    }

    /// Connections open now and accepted since start-up.
    pub fn connections(&self) -> (u64, u64) {
        (self.conns.open(), self.conns.accepted())
    }

    pub fn config_digest(&self) -> String {
        self.read().config.digest()
    }

    /// The loaded custom plugin files: `{name, file, step, digest}` each.
    pub fn custom_plugins(&self) -> serde_json::Value {
        let loaded = self.read();
        let files = loaded.custom.as_ref().map_or(&[][..], |c| &c.files[..]);
        files
            .iter()
            .map(|f| serde_json::json!({"name": f.lookup, "file": f.file, "step": f.step, "digest": f.digest}))
            .collect()
    }

    /// Re-reads the config (file and environment); a valid one replaces the engine for new
    /// requests, an invalid one is refused and the old one stays. Returns the new config's
    /// digest and the changed settings that take a restart (logged as a warning).
    pub fn reload(&self) -> Result<(String, Vec<&'static str>), ConfigError> {
        let config = ServiceConfig::from_process(self.config_file.as_deref())?;
        let (engine, custom) = config.engine_and_plugins()?;
        let engine = Arc::new(engine);
        let shadow = ShadowEngine::load(&config)?.map(Arc::new);
        let digest = config.digest();
        if let Some(recorder) = &self.recorder {
            // Saved before any record names it.
            if let Err(e) = recorder.save_config(&config) {
                tracing::warn!(error = %e, "the reloaded config could not be saved in record.dir");
            }
        }
        // Against the start-up values, which such settings keep: a second reload of the same
        // file still names them.
        let restart_needed = config.start_up_only_changes(&self.at_start);
        if !restart_needed.is_empty() {
            let settings = restart_needed.join(", ");
            tracing::warn!(settings = %settings, "read at start-up only: restart for the new values to apply");
        }
        let mut loaded = self.loaded.write().unwrap_or_else(|e| e.into_inner());
        *loaded = Loaded { engine, config: Arc::new(config), custom, shadow };
        Ok((digest, restart_needed))
    }
}

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Endpoint label for metrics (unknown paths share one label).
fn endpoint_label(path: &str) -> &'static str {
    match path {
        "/allocate" => "/allocate",
        "/capacity" => "/capacity",
        "/ping" => "/ping",
        "/metrics" => "/metrics",
        "/openapi.json" => "/openapi.json",
        "/admin/reload" => "/admin/reload",
        p if p.starts_with("/inventory/") => "/inventory",
        _ => "other",
    }
}

/// Request id, timing, metrics and the one log line per request (`request_log`: written
/// once the answer has been handed on whole).
async fn observe(State(app): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request
        .headers()
        .get(&REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 200)
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    // Handlers read it (recording, the shadow's log lines) as the log line does.
    if let Ok(value) = HeaderValue::from_str(&id) {
        request.headers_mut().insert(REQUEST_ID, value);
    }
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let pending = request_log::Pending::new(app.clone(), id, method, path, started);
    let in_flight = app.metrics.request_started();
    let mut response = next.run(request).await;
    drop(in_flight);
    if let Ok(value) = HeaderValue::from_str(pending.id()) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let status = response.status().as_u16();
    let (mut parts, body) = response.into_parts();
    // Only the line reads these.
    let seen = parts.extensions.remove::<intake::BodySeen>();
    let outcome = parts.extensions.remove::<Outcome>();
    let line = pending.answered(status, seen, outcome);
    Response::from_parts(parts, axum::body::Body::new(request_log::Logged::new(body, line)))
}

/// Checks `Authorization: Bearer <token>` when a token is configured.
async fn require_token(State(app): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(token) = app.auth_token() {
        let given = request
            .headers()
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .unwrap_or("");
        if !constant_time_eq(given.trim().as_bytes(), token.as_bytes()) {
            return axum::response::IntoResponse::into_response(ApiError::Unauthorized);
        }
    }
    next.run(request).await
}

/// The credentials of `Bearer <token>`; the scheme's name is case-insensitive (RFC 9110
/// §11.1), so `bearer` does too.
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(credentials)
}

/// Compares without an early exit, so timing does not reveal how much of a token matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// What every connection calls: the routes under the layers every request passes.
pub type Service =
    tower::util::BoxCloneSyncService<axum::extract::Request, axum::response::Response, std::convert::Infallible>;

/// The service with every endpoint and layer. The layers wrap the router once, from
/// outside: `Router::layer` would wrap each route in its own box, and a middleware clones
/// the service it wraps on every call, so boxes nested five deep were cloned recursively
/// (some 40 allocations per request, for nothing).
pub fn service(app: Arc<AppState>) -> Service {
    let guarded = Router::new()
        .route("/allocate", post(handlers::allocate))
        .route("/capacity", post(handlers::capacity))
        .route("/admin/reload", post(handlers::reload))
        .merge(inventory::routes())
        .route_layer(middleware::from_fn_with_state(app.clone(), require_token));
    let routes = Router::new()
        .merge(guarded)
        .route("/ping", get(handlers::ping))
        .route("/openapi.json", get(handlers::openapi_json))
        .route("/metrics", get(handlers::metrics))
        .fallback(handlers::not_found)
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .with_state(app.clone());
    layered(app, routes)
}

/// `routes` under the layers every request passes, outermost first.
fn layered(app: Arc<AppState>, routes: Router) -> Service {
    let layered = tower::ServiceBuilder::new()
        // Outermost: every answer, errors included, is compressed when the client asks
        // (`Accept-Encoding: gzip` or `zstd`) and it is worth it (over 32 bytes).
        .layer(answer_compression())
        .layer(middleware::from_fn_with_state(app.clone(), observe))
        // Outside every early answer (the gate, the token check, 404...), so that each
        // has what is left of its body drained.
        .layer(middleware::from_fn_with_state(app, drain::drain_leftover))
        .layer(middleware::from_fn(conn::health_only_gate))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(ApiError::Internal("the request failed unexpectedly".into()))
        }))
        .service(routes);
    Service::new(tower::ServiceExt::map_response(layered, axum::response::IntoResponse::into_response))
}

/// Compression of answers, at the fastest level (one level for both codecs): at 5000
/// servers gzip turns the 7.4 MB answer into 5.8 MB for about 50 ms of CPU, where its default
/// level (3.8 MB) costs 120 ms; zstd gives 0.9 MB at no measurable cost (BENCHMARKS.md,
/// "Encodings").
fn answer_compression() -> tower_http::compression::CompressionLayer {
    use tower_http::compression::{CompressionLayer, CompressionLevel};
    CompressionLayer::new().gzip(true).zstd(true).no_br().no_deflate().quality(CompressionLevel::Fastest)
}

/// Serves until SIGTERM or SIGINT, then stops accepting and lets in-flight requests finish.
/// SIGHUP reloads the config. Connections are capped and timed out as `limits` says
/// (see [`conn`]).
pub async fn serve(listener: TcpListener, app: Arc<AppState>) -> std::io::Result<()> {
    spawn_reload_on_sighup(app.clone());
    crate::wire::pages::tune_allocator(app.inventory().is_some());
    if app.inventory().is_none() {
        spawn_memory_release();
    }
    let service = service(app.clone());
    conn::serve(listener, app, service, shutdown_signal()).await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// Hands freed heap back to the OS every few seconds. Large requests come and go; without
/// this glibc keeps their pages in its per-thread arenas and the RSS stays at the peak.
/// Not for a replica: its one arena gives its free top back by itself, and a trim holds
/// that arena (every allocation of the replica) while it walks the free blocks: at a fixed
/// 1,000 allocations/s the p99 was 9.7-52.4 ms (median of five runs 11.6) with the trim,
/// 8.3-17.3 ms (median of four 8.6) without, the RSS after the run the same. A big
/// stateless request on a replica is still followed by one.
fn spawn_memory_release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::spawn(async {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
        loop {
            tick.tick().await;
            let _ = tokio::task::spawn_blocking(crate::wire::pages::release_freed_heap).await;
        }
    });
}

fn spawn_reload_on_sighup(app: Arc<AppState>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot listen for SIGHUP; config reload by signal is off");
        return;
    };
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match app.reload() {
                Ok((digest, _)) => tracing::info!(config = %digest, "config reloaded"),
                Err(e) => tracing::error!(error = %e, "config reload refused; keeping the running config"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_route_that_panics_is_answered_500_through_every_layer() {
        let config = crate::config::ServiceConfig::load(None, std::iter::empty()).expect("the built-in config loads");
        let app = Arc::new(AppState::new(config, None).expect("the engine builds"));
        let panics = Router::new().route("/panics", get(|| async { panic!("a handler's bug") as &'static str }));
        let request = axum::http::Request::get("/panics")
            .header("x-request-id", "r-1")
            .header("accept-encoding", "gzip")
            .body(Body::empty())
            .expect("a request");
        let response = layered(app, panics).oneshot(request).await.expect("the service never fails");
        assert_eq!(response.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        // `observe` (outside the panic's catching) still tagged the answer, and compression
        // (outermost) still saw it.
        assert_eq!(response.headers().get("x-request-id").map(|v| v.as_bytes()), Some(&b"r-1"[..]));
        assert_eq!(response.headers().get("content-encoding").map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    }
}
