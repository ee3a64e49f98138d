//! The shadow config (`shadow_config`): every allocation is decided a second time with
//! another config, after its answer has left, and a different decision is logged (with
//! the request id) and counted, so that a new chain or new weights can be tried on live
//! traffic without answering with them.
//!
//! The second run costs CPU the service may need: it runs only when a core is spare (the
//! caller says so) and a token bucket of shadow CPU time (`shadow_cpu_ms_per_s`, with at
//! most one second's worth saved up) allows; otherwise the request is skipped and counted.
//! It runs on the request as parsed and validated (the engine never changes it), with the
//! same seed, so that only the config differs.
//!
//! A batch is placed again whole by the shadow engine (each VM seeing the ones before it,
//! with the uuids the answer gave them) from its body read anew, and compared VM by VM:
//! it counts as one evaluation, and as one divergence when any VM got another server (or
//! a 409 instead of one, or the reverse); the VMs that differ are counted apart and logged
//! (the first few) with their index and uuid. A batch's run is bigger than one
//! allocation's: the budget may go into debt, paid back before the next run starts.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::batch::VmOutcome;
use crate::config::{ConfigError, ServiceConfig};
use crate::engine::{Allocation, Engine, Step};
use crate::model::AllocateBody;
use crate::outcome::Verdict;

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
    /// VMs of batches the shadow placed otherwise.
    batch_vm_divergences: AtomicU64,
    bucket: Mutex<Option<Bucket>>,
}

/// The budget a shadow run needs left to start (about what a run at a few hundred servers
/// takes).
const MIN_TO_START: Duration = Duration::from_millis(1);

/// Shadow CPU time that may be spent now, refilled at the configured rate; negative (a
/// debt) after a run bigger than what was left.
#[derive(Debug)]
struct Bucket {
    available_s: f64,
    at: Instant,
}

impl ShadowStats {
    /// Whether a shadow run may start now, with `ms_per_s` of CPU time a second allowed.
    fn admit(&self, ms_per_s: u64) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let full = ms_per_s as f64 / 1000.0;
        let b = bucket.get_or_insert(Bucket { available_s: full, at: now });
        let earned = now.duration_since(b.at).as_secs_f64() * full;
        b.available_s = (b.available_s + earned).min(full);
        b.at = now;
        // Time trickles back continuously: a run waits until a useful amount has.
        b.available_s >= MIN_TO_START.as_secs_f64()
    }

    /// Takes the time a run took out of the bucket (into debt if it took more than was
    /// left, so that big runs, batches, keep to the rate too).
    fn spend(&self, took: Duration) {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = bucket.as_mut() {
            b.available_s -= took.as_secs_f64();
        }
    }

    pub fn evaluations(&self) -> u64 {
        self.evaluations.load(Ordering::Relaxed)
    }

    pub fn divergences(&self) -> u64 {
        self.divergences.load(Ordering::Relaxed)
    }

    pub fn batch_vm_divergences(&self) -> u64 {
        self.batch_vm_divergences.load(Ordering::Relaxed)
    }

    /// The counters in Prometheus's text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP dapi_shadow_evaluations_total Allocations (a batch: one) decided again with shadow_config.\n\
             # TYPE dapi_shadow_evaluations_total counter\ndapi_shadow_evaluations_total {}\n\
             # HELP dapi_shadow_divergences_total Shadow decisions that differ from the answer's (a batch: any VM differs).\n\
             # TYPE dapi_shadow_divergences_total counter\ndapi_shadow_divergences_total {}\n\
             # HELP dapi_shadow_batch_vm_divergences_total VMs of batches that the shadow config placed otherwise.\n\
             # TYPE dapi_shadow_batch_vm_divergences_total counter\ndapi_shadow_batch_vm_divergences_total {}\n\
             # HELP dapi_shadow_skipped_total Allocations not shadowed: no core spare, or the shadow CPU budget spent.\n\
             # TYPE dapi_shadow_skipped_total counter\n\
             dapi_shadow_skipped_total{{reason=\"busy\"}} {}\ndapi_shadow_skipped_total{{reason=\"budget\"}} {}\n\
             # HELP dapi_shadow_failures_total Shadow runs that failed (an error of the shadow chain).\n\
             # TYPE dapi_shadow_failures_total counter\ndapi_shadow_failures_total {}\n",
            get(&self.evaluations),
            get(&self.divergences),
            get(&self.batch_vm_divergences),
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
    let Some(result) = stats.run(ms_per_s, core_spare, || shadow.engine.allocate_noting(request, false)) else {
        return;
    };
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

impl ShadowStats {
    /// Runs `run` when a core is spare and the budget allows (else counts the skip),
    /// taking the time it took out of the budget.
    fn run<T>(&self, ms_per_s: u64, core_spare: bool, run: impl FnOnce() -> T) -> Option<T> {
        if !core_spare {
            self.skipped_busy.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        if !self.admit(ms_per_s) {
            self.skipped_budget.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let started = Instant::now();
        let result = run();
        self.spend(started.elapsed());
        Some(result)
    }
}

/// VMs of a diverging batch logged one by one, at most (then how many more).
const LOGGED_VMS: usize = 10;

/// Places a batch again with the shadow engine (`place`: the batch read anew and placed
/// by the engine it is given), when `core_spare` and the budget allow, and logs and counts
/// the VMs placed differently from `main`, the answer's.
pub fn evaluate_batch(
    shadow: &ShadowEngine,
    stats: &ShadowStats,
    ms_per_s: u64,
    core_spare: bool,
    main: &[VmOutcome],
    request_id: &str,
    place: impl FnOnce(&Engine) -> Result<Vec<VmOutcome>, String>,
) {
    let Some(result) = stats.run(ms_per_s, core_spare, || place(&shadow.engine)) else { return };
    let other = match result {
        Ok(other) => other,
        Err(e) => {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(req_id = %request_id, shadow = %shadow.path.display(), error = %e, "shadow batch failed");
            return;
        }
    };
    stats.evaluations.fetch_add(1, Ordering::Relaxed);
    let differing = batch_differences(main, &other);
    if differing.is_empty() {
        return;
    }
    stats.divergences.fetch_add(1, Ordering::Relaxed);
    stats.batch_vm_divergences.fetch_add(differing.len() as u64, Ordering::Relaxed);
    let decision = |v: Option<&VmOutcome>| match v.map(|o| &o.verdict) {
        Some(Verdict::Chosen { uuid }) => format!("server {uuid}"),
        Some(Verdict::NoFit { reason }) => format!("no fit: {reason}"),
        Some(Verdict::Batch { .. }) => "batch".to_string(),
        // `all_or_nothing` stopped before it.
        None => "not decided".to_string(),
    };
    for &index in differing.iter().take(LOGGED_VMS) {
        let (a, b) = (main.get(index), other.get(index));
        let vm = a.or(b).map_or("", |o| o.uuid.as_str());
        tracing::warn!(
            req_id = %request_id,
            shadow = %shadow.path.display(),
            shadow_config = %shadow.digest,
            vm_index = index,
            vm_uuid = %vm,
            answered = %decision(a),
            shadow_decision = %decision(b),
            "shadow config placed a batch's VM differently"
        );
    }
    if differing.len() > LOGGED_VMS {
        tracing::warn!(
            req_id = %request_id,
            shadow = %shadow.path.display(),
            vms = main.len().max(other.len()),
            differing = differing.len(),
            "shadow config placed {} more of the batch's VMs differently",
            differing.len() - LOGGED_VMS
        );
    }
}

/// The indexes of the VMs decided differently by two runs of one batch (one decided by
/// only one run, `all_or_nothing` having stopped the other before it, included).
pub fn batch_differences(a: &[VmOutcome], b: &[VmOutcome]) -> Vec<usize> {
    (0..a.len().max(b.len())).filter(|&i| a.get(i).map(|o| &o.verdict) != b.get(i).map(|o| &o.verdict)).collect()
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
        let rewind = |by: Duration| {
            let mut bucket = stats.bucket.lock().expect("lock");
            let b = bucket.as_mut().expect("started");
            b.at -= by;
        };
        // 400 ms of debt at 100 ms/s: still none after 3 s, some after 5 s.
        rewind(Duration::from_secs(3));
        assert!(!stats.admit(100), "the debt is paid back first");
        rewind(Duration::from_secs(2));
        assert!(stats.admit(100));
        rewind(Duration::from_secs(60));
        assert!(stats.admit(100));
        let available = stats.bucket.lock().expect("lock").as_ref().map(|b| b.available_s);
        assert!(available.is_some_and(|a| (a - 0.1).abs() < 1e-9), "{available:?}");
    }

    fn vm(uuid: &str, server: Option<&str>) -> VmOutcome {
        let verdict = match server {
            Some(s) => Verdict::Chosen { uuid: s.into() },
            None => Verdict::NoFit { reason: "full".into() },
        };
        VmOutcome { uuid: uuid.into(), verdict }
    }

    #[test]
    fn batch_vms_differ_by_server_by_fit_and_by_being_decided() {
        let a = [vm("v0", Some("s1")), vm("v1", Some("s2")), vm("v2", None)];
        assert!(batch_differences(&a, &a).is_empty());
        let b = [vm("v0", Some("s1")), vm("v1", Some("s3")), vm("v2", Some("s1"))];
        assert_eq!(batch_differences(&a, &b), [1, 2]);
        assert_eq!(batch_differences(&a, &a[..1]), [1, 2]);
    }

    #[test]
    fn server_lists_compare_as_sets() {
        assert!(same_servers(&[1, 2, 3], &[3, 1, 2]));
        assert!(!same_servers(&[1, 2], &[1, 2, 3]));
        assert!(!same_servers(&[1, 2], &[1, 3]));
    }
}
