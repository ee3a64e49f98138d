//! The shadow config (`shadow_config`): every allocation is decided a second time with
//! another config, after its answer has left, and a different decision is logged (with
//! the request id) and counted, so that a new chain or new weights can be tried on live
//! traffic without answering with them.
//!
//! The second run costs CPU the service may need: it runs only when a core is spare (the
//! caller says so) and a token bucket of shadow CPU time (`shadow_cpu_ms_per_s`, with at
//! most one second's worth saved up) allows; otherwise the request is skipped and counted.
//! It runs on the request as parsed and validated (the engine never changes it), with the
//! same seed, so that only the config differs. Batches are not shadowed.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::answer::Verdict;
use crate::config::{ConfigError, ServiceConfig};
use crate::engine::{Allocation, Engine, Step};
use crate::model::AllocateBody;

/// The second config's engine.
pub struct ShadowEngine {
    pub engine: Engine,
    /// The shadow config's file, as given.
    pub path: PathBuf,
    pub digest: String,
}

impl ShadowEngine {
    /// The engine of `shadow_config`, when set: the file laid over the built-in config (no
    /// environment: that speaks for the main config). A file that cannot be read or whose
    /// engine is refused refuses the whole config, naming the setting.
    pub fn load(config: &ServiceConfig) -> Result<Option<ShadowEngine>, ConfigError> {
        let Some((path, source)) = &config.shadow_config else { return Ok(None) };
        let wrap = |error: ConfigError| ConfigError::Shadow {
            source: source.clone(),
            path: path.display().to_string(),
            error: Box::new(error),
        };
        let shadow = ServiceConfig::load(Some(path), Vec::new()).map_err(wrap)?;
        let engine = shadow.engine().map_err(wrap)?;
        Ok(Some(ShadowEngine { engine, path: path.clone(), digest: shadow.digest() }))
    }
}

/// The shadow's counters and CPU budget, kept across reloads.
#[derive(Debug, Default)]
pub struct ShadowStats {
    evaluations: AtomicU64,
    divergences: AtomicU64,
    skipped_busy: AtomicU64,
    skipped_budget: AtomicU64,
    failed: AtomicU64,
    bucket: Mutex<Option<Bucket>>,
}

/// The budget a shadow run needs left to start (about what a run at a few hundred servers
/// takes).
const MIN_TO_START: Duration = Duration::from_millis(1);

/// Shadow CPU time that may be spent now, refilled at the configured rate.
#[derive(Debug)]
struct Bucket {
    available: Duration,
    at: Instant,
}

impl ShadowStats {
    /// Whether a shadow run may start now, with `ms_per_s` of CPU time a second allowed.
    fn admit(&self, ms_per_s: u64) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let full = Duration::from_millis(ms_per_s);
        let b = bucket.get_or_insert(Bucket { available: full, at: now });
        let earned = now.duration_since(b.at).mul_f64(ms_per_s as f64 / 1000.0);
        b.available = (b.available + earned).min(full);
        b.at = now;
        // Time trickles back continuously: a run waits until a useful amount has.
        b.available >= MIN_TO_START
    }

    /// Takes the time a run took out of the bucket.
    fn spend(&self, took: Duration) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = bucket.as_mut() {
            b.available = b.available.saturating_sub(took);
        }
    }

    pub fn evaluations(&self) -> u64 {
        self.evaluations.load(Ordering::Relaxed)
    }

    pub fn divergences(&self) -> u64 {
        self.divergences.load(Ordering::Relaxed)
    }

    /// The counters in Prometheus's text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP dapi_shadow_evaluations_total Allocations decided again with shadow_config.\n\
             # TYPE dapi_shadow_evaluations_total counter\ndapi_shadow_evaluations_total {}\n\
             # HELP dapi_shadow_divergences_total Shadow decisions that differ from the answer's.\n\
             # TYPE dapi_shadow_divergences_total counter\ndapi_shadow_divergences_total {}\n\
             # HELP dapi_shadow_skipped_total Allocations not shadowed: no core spare, or the shadow CPU budget spent.\n\
             # TYPE dapi_shadow_skipped_total counter\n\
             dapi_shadow_skipped_total{{reason=\"busy\"}} {}\ndapi_shadow_skipped_total{{reason=\"budget\"}} {}\n\
             # HELP dapi_shadow_failures_total Shadow runs that failed (an error of the shadow chain).\n\
             # TYPE dapi_shadow_failures_total counter\ndapi_shadow_failures_total {}\n",
            get(&self.evaluations),
            get(&self.divergences),
            get(&self.skipped_busy),
            get(&self.skipped_budget),
            get(&self.failed),
        );
    }
}

/// Decides `request` again with the shadow engine, when `core_spare` and the budget allow,
/// and logs and counts a different decision. `main` is the allocation that was answered.
pub fn evaluate(
    shadow: &ShadowEngine,
    stats: &ShadowStats,
    ms_per_s: u64,
    core_spare: bool,
    request: &AllocateBody<'_>,
    main: &Allocation,
    request_id: &str,
) {
    if !core_spare {
        stats.skipped_busy.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if !stats.admit(ms_per_s) {
        stats.skipped_budget.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let started = Instant::now();
    let result = shadow.engine.allocate_noting(request, false);
    stats.spend(started.elapsed());
    let other = match result {
        Ok(other) => other,
        Err(e) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(req_id = %request_id, shadow = %shadow.path.display(), error = %e, "shadow allocation failed");
            return;
        }
    };
    stats.evaluations.fetch_add(1, Ordering::Relaxed);
    let (answered, shadowed) = (Verdict::of(request, main), Verdict::of(request, &other));
    if answered == shadowed {
        return;
    }
    stats.divergences.fetch_add(1, Ordering::Relaxed);
    let at = match first_different_step(&main.steps, &other.steps) {
        Some(k) => {
            let (a, b) = (main.steps.get(k), other.steps.get(k));
            let name = |s: Option<&Step>| s.map_or("(none)", |s| s.plugin);
            format!("step {k}: {} left {}, {} left {}", name(a), left(a), name(b), left(b))
        }
        None => "the scores".to_string(),
    };
    let decision = |v: &Verdict| match v {
        Verdict::Chosen { uuid } => format!("server {uuid}"),
        Verdict::NoFit { reason } => format!("no fit: {reason}"),
        Verdict::Batch { .. } => "batch".to_string(),
    };
    tracing::warn!(
        req_id = %request_id,
        shadow = %shadow.path.display(),
        shadow_config = %shadow.digest,
        answered = %decision(&answered),
        shadow_decision = %decision(&shadowed),
        differs_at = %at,
        "shadow config decided differently"
    );
}

fn left(step: Option<&Step>) -> String {
    step.map_or_else(|| "-".to_string(), |s| format!("{} servers", s.remaining.len()))
}

/// The first step whose plugin or remaining servers differ between two runs on one request
/// (`None`: every step agrees, so the scores made the difference).
pub fn first_different_step(a: &[Step], b: &[Step]) -> Option<usize> {
    let n = a.len().max(b.len());
    (0..n).find(|&k| match (a.get(k), b.get(k)) {
        (Some(x), Some(y)) => x.plugin != y.plugin || !same_servers(&x.remaining, &y.remaining),
        _ => true,
    })
}

/// Whether two server lists hold the same servers (in any order).
pub fn same_servers(a: &[usize], b: &[usize]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refills_at_its_rate_and_saves_at_most_a_second() {
        let stats = ShadowStats::default();
        assert!(stats.admit(100));
        stats.spend(Duration::from_millis(500));
        assert!(!stats.admit(100), "100 ms spent over: none left");
        {
            let mut bucket = stats.bucket.lock().expect("lock");
            let b = bucket.as_mut().expect("started");
            b.at -= Duration::from_secs(60);
        }
        assert!(stats.admit(100));
        let available = stats.bucket.lock().expect("lock").as_ref().map(|b| b.available);
        assert_eq!(available, Some(Duration::from_millis(100)));
    }

    #[test]
    fn server_lists_compare_as_sets() {
        assert!(same_servers(&[1, 2, 3], &[3, 1, 2]));
        assert!(!same_servers(&[1, 2], &[1, 2, 3]));
        assert!(!same_servers(&[1, 2], &[1, 3]));
    }
}
