//! Prometheus metrics, kept and written by the `prometheus` crate: requests by endpoint and
//! status, a latency histogram whose buckets reach the request timeout, requests in flight
//! and allocation permits in use, per plugin the time spent and the servers removed, build
//! information, and the process's own figures (`process_*`: resident memory, open
//! descriptors, CPU seconds; Linux).

use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{
    Counter, CounterVec, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

use crate::engine::Step;

/// Upper bounds of the latency buckets, seconds; the request timeout (and nothing beyond
/// it) is added when it is longer.
const BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The git commit the binary was built from (`build.rs`), when known.
pub const GIT_COMMIT: &str = match option_env!("BUILD_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

/// The service's metrics, shared by all requests.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    in_flight: IntGauge,
    permits_in_use: IntGauge,
    plugin_runs: IntCounterVec,
    plugin_seconds: CounterVec,
    plugin_removed: IntCounterVec,
    /// Each plugin's three counters by its name: looking them up by label (three SipHashes
    /// and three locks per step) was 2% of an inventory allocation's CPU.
    by_plugin: std::sync::Mutex<PluginCounterMap>,
}

type PluginCounterMap = std::collections::HashMap<&'static str, PluginCounters, crate::fxhash::FxBuild>;

/// One plugin's counters ([`Metrics::record_steps`]).
struct PluginCounters {
    runs: IntCounter,
    seconds: Counter,
    removed: IntCounter,
}

/// Latency buckets: [`BUCKETS`] below the request timeout, then the timeout itself, so that
/// the slowest requests (those cut at the timeout) fall into a bucket of their own.
fn latency_buckets(request_timeout: Duration) -> Vec<f64> {
    let timeout = request_timeout.as_secs_f64();
    let mut buckets: Vec<f64> = BUCKETS.iter().copied().filter(|&b| b < timeout).collect();
    if timeout > 0.0 {
        buckets.push(timeout);
    }
    buckets
}

/// Registers `metric`, returning it. Registration only fails for a name registered twice,
/// which the names below never are; a failure is logged and the metric kept out.
fn register<C: Collector + Clone + 'static>(registry: &Registry, metric: C) -> C {
    if let Err(e) = registry.register(Box::new(metric.clone())) {
        tracing::error!(error = %e, "a metric could not be registered");
    }
    metric
}

impl Metrics {
    pub fn new(request_timeout: Duration, max_permits: usize) -> Metrics {
        let registry = Registry::new();
        // The options and label names below are constant and valid: building them cannot
        // fail, but the crate's constructors return a Result anyway.
        let requests = IntCounterVec::new(
            Opts::new("dapi_http_requests_total", "HTTP requests by endpoint and status."),
            &["endpoint", "status"],
        );
        let latency = HistogramVec::new(
            HistogramOpts::new("dapi_http_request_duration_seconds", "Request latency by endpoint.")
                .buckets(latency_buckets(request_timeout)),
            &["endpoint"],
        );
        let in_flight = IntGauge::new("dapi_http_requests_in_flight", "Requests being handled now.");
        let permits_in_use = IntGauge::new(
            "dapi_allocation_permits_in_use",
            "Allocation permits (limits.max_concurrent_allocations) held now.",
        );
        let permits_max = IntGauge::new("dapi_allocation_permits", "Allocation permits in all.");
        let plugin_runs = IntCounterVec::new(Opts::new("dapi_plugin_runs_total", "Plugin runs."), &["plugin"]);
        let plugin_seconds =
            CounterVec::new(Opts::new("dapi_plugin_seconds_total", "Time spent in each plugin."), &["plugin"]);
        let plugin_removed = IntCounterVec::new(
            Opts::new("dapi_plugin_servers_removed_total", "Servers each plugin removed."),
            &["plugin"],
        );
        let build = IntGaugeVec::new(
            Opts::new("dapi_build_info", "The running build: version and git commit (always 1)."),
            &["version", "git_commit"],
        );
        let (
            Ok(requests),
            Ok(latency),
            Ok(in_flight),
            Ok(permits_in_use),
            Ok(permits_max),
            Ok(plugin_runs),
            Ok(plugin_seconds),
            Ok(plugin_removed),
            Ok(build),
        ) = (
            requests,
            latency,
            in_flight,
            permits_in_use,
            permits_max,
            plugin_runs,
            plugin_seconds,
            plugin_removed,
            build,
        )
        else {
            unreachable!("the metric definitions are constant and valid")
        };
        build.with_label_values(&[env!("CARGO_PKG_VERSION"), GIT_COMMIT]).set(1);
        permits_max.set(max_permits as i64);
        #[cfg(target_os = "linux")]
        if let Err(e) = registry.register(Box::new(prometheus::process_collector::ProcessCollector::for_self())) {
            tracing::error!(error = %e, "process metrics could not be registered");
        }
        Metrics {
            requests: register(&registry, requests),
            latency: register(&registry, latency),
            in_flight: register(&registry, in_flight),
            permits_in_use: register(&registry, permits_in_use),
            plugin_runs: register(&registry, plugin_runs),
            plugin_seconds: register(&registry, plugin_seconds),
            plugin_removed: register(&registry, plugin_removed),
            by_plugin: std::sync::Mutex::default(),
            registry: {
                register(&registry, permits_max);
                register(&registry, build);
                registry
            },
        }
    }

    /// Counts a request as in flight until the guard is dropped.
    pub fn request_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    pub fn record_request(&self, endpoint: &str, status: u16, latency: Duration) {
        let status = status.to_string();
        self.requests.with_label_values(&[endpoint, status.as_str()]).inc();
        self.latency.with_label_values(&[endpoint]).observe(latency.as_secs_f64());
    }

    pub fn record_steps(&self, steps: &[Step]) {
        let mut by_plugin = self.by_plugin.lock().unwrap_or_else(|e| e.into_inner());
        for step in steps {
            let counters = by_plugin.entry(step.plugin).or_insert_with(|| {
                let plugin = [step.plugin];
                PluginCounters {
                    runs: self.plugin_runs.with_label_values(&plugin),
                    seconds: self.plugin_seconds.with_label_values(&plugin),
                    removed: self.plugin_removed.with_label_values(&plugin),
                }
            });
            counters.runs.inc();
            counters.seconds.inc_by(step.elapsed.as_secs_f64());
            counters.removed.inc_by(step.received.saturating_sub(step.remaining.len()) as u64);
        }
    }

    /// The text exposition format, with the permits in use as of now.
    pub fn render(&self, permits_in_use: usize) -> String {
        self.permits_in_use.set(permits_in_use as i64);
        let mut out = String::new();
        if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "metrics could not be written");
        }
        out
    }
}

/// A request in flight; dropping it counts it out.
pub struct InFlight(IntGauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_buckets_reach_the_request_timeout() {
        assert_eq!(latency_buckets(Duration::from_secs(30)).last(), Some(&30.0));
        assert_eq!(
            latency_buckets(Duration::from_millis(300)),
            [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.3]
        );
    }

    #[test]
    fn the_exposition_names_every_family() {
        let metrics = Metrics::new(Duration::from_secs(30), 4);
        metrics.record_request("/ping", 200, Duration::from_millis(3));
        let text = metrics.render(1);
        for line in [
            "dapi_http_requests_total{endpoint=\"/ping\",status=\"200\"} 1",
            "dapi_http_request_duration_seconds_bucket{endpoint=\"/ping\",le=\"30\"} 1",
            "dapi_allocation_permits_in_use 1",
            "dapi_allocation_permits 4",
            "dapi_http_requests_in_flight 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(text.contains(&format!(
            "dapi_build_info{{git_commit=\"{GIT_COMMIT}\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
    }
}
