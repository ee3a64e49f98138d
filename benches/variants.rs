//! What the variant benchmarks share (`bench-custom`, `bench-owner-filter`): their options,
//! and one chain variant timed and printed as a table row beside the first variant.

use std::time::{Duration, Instant};

use dapi::engine::Engine;
use dapi::model::AllocateBody;

/// `BENCH_SIZES` (default 500 and 5000 servers) and `BENCH_SECONDS` (default 2).
pub fn options() -> (Vec<usize>, Duration) {
    let sizes = std::env::var("BENCH_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![500, 5000]);
    let budget =
        Duration::from_secs_f64(std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0));
    (sizes, budget)
}

/// The first call and the median of the following ones, on a thread of its own, so that
/// what the first call on a thread sets up (a sandbox, compiled snippets) is timed apart.
fn time(engine: &Engine, request: &AllocateBody<'_>, budget: Duration) -> (Duration, Duration) {
    std::thread::scope(|s| {
        s.spawn(|| {
            let started = Instant::now();
            engine.allocate(request).expect("allocates");
            let first = started.elapsed();
            let mut times = Vec::new();
            let begun = Instant::now();
            while times.len() < 5 || (begun.elapsed() < budget && times.len() < 200) {
                let started = Instant::now();
                engine.allocate(request).expect("allocates");
                times.push(started.elapsed());
            }
            times.sort();
            (first, times[times.len() / 2])
        })
        .join()
        .expect("bench thread")
    })
}

/// Times `engine` and prints `| servers | body bytes | label | first ms | median ms | added
/// ms |`, the time added over `base` (the first variant's median, set by the first call).
pub fn row(
    engine: &Engine,
    request: &AllocateBody<'_>,
    body_bytes: usize,
    label: &str,
    budget: Duration,
    base: &mut Option<Duration>,
) {
    let (first, median) = time(engine, request, budget);
    let added = base.map_or(String::from("–"), |b| format!("{:.2}", (median.as_secs_f64() - b.as_secs_f64()) * 1e3));
    base.get_or_insert(median);
    println!(
        "| {} | {body_bytes} | {label} | {:.2} | {:.2} | {added} |",
        request.servers.len(),
        first.as_secs_f64() * 1e3,
        median.as_secs_f64() * 1e3
    );
}
