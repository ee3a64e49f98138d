//! Prometheus metrics: requests by endpoint and status, latency histograms, and per plugin
//! the time spent and the servers removed.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use crate::engine::Step;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct PluginStats {
    runs: u64,
    seconds: f64,
    removed: u64,
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
    plugins: BTreeMap<&'static str, PluginStats>,
}

/// The service's counters, shared by all requests.
#[derive(Default)]
pub struct Metrics(Mutex<Inner>);

impl Metrics {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means a panic elsewhere; the counters are still usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn record_request(&self, endpoint: &str, status: u16, latency: Duration) {
        let mut inner = self.inner();
        *inner.requests.entry((endpoint.to_string(), status)).or_default() += 1;
        let h = inner.latency.entry(endpoint.to_string()).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; BUCKETS.len()];
        }
        let secs = latency.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    pub fn record_steps(&self, steps: &[Step]) {
        let mut inner = self.inner();
        for step in steps {
            let stats = inner.plugins.entry(step.plugin).or_default();
            stats.runs += 1;
            stats.seconds += step.elapsed.as_secs_f64();
            stats.removed += step.received.saturating_sub(step.remaining.len()) as u64;
        }
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let inner = self.inner();
        let mut out = String::new();
        out.push_str("# HELP dapi_http_requests_total HTTP requests by endpoint and status.\n");
        out.push_str("# TYPE dapi_http_requests_total counter\n");
        for ((endpoint, status), n) in &inner.requests {
            let _ = writeln!(out, "dapi_http_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}");
        }
        out.push_str("# HELP dapi_http_request_duration_seconds Request latency by endpoint.\n");
        out.push_str("# TYPE dapi_http_request_duration_seconds histogram\n");
        for (endpoint, h) in &inner.latency {
            for (bound, n) in BUCKETS.iter().zip(&h.counts) {
                let _ = writeln!(
                    out,
                    "dapi_http_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "dapi_http_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(out, "dapi_http_request_duration_seconds_sum{{endpoint=\"{endpoint}\"}} {}", h.sum);
            let _ = writeln!(out, "dapi_http_request_duration_seconds_count{{endpoint=\"{endpoint}\"}} {}", h.count);
        }
        out.push_str("# HELP dapi_plugin_runs_total Plugin runs.\n# TYPE dapi_plugin_runs_total counter\n");
        for (plugin, s) in &inner.plugins {
            let _ = writeln!(out, "dapi_plugin_runs_total{{plugin=\"{plugin}\"}} {}", s.runs);
        }
        out.push_str(
            "# HELP dapi_plugin_seconds_total Time spent in each plugin.\n# TYPE dapi_plugin_seconds_total counter\n",
        );
        for (plugin, s) in &inner.plugins {
            let _ = writeln!(out, "dapi_plugin_seconds_total{{plugin=\"{plugin}\"}} {}", s.seconds);
        }
        out.push_str(
            "# HELP dapi_plugin_servers_removed_total Servers each plugin removed.\n# TYPE dapi_plugin_servers_removed_total counter\n",
        );
        for (plugin, s) in &inner.plugins {
            let _ = writeln!(out, "dapi_plugin_servers_removed_total{{plugin=\"{plugin}\"}} {}", s.removed);
        }
        out
    }
}
