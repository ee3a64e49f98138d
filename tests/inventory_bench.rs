//! Inventory mode's benchmark (`make bench-inventory`; not run by `cargo test`): a throwaway
//! PostgreSQL, the benchmark's generated datacenter (benches/input.rs) loaded, then replica
//! start-up, allocations/s and latency with their claims committed, side by side with the
//! stateless request of the same size. Figures are printed (BENCHMARKS.md), not asserted.
//! INVENTORY_BENCH_SERVERS (5000), INVENTORY_BENCH_SECONDS (10), INVENTORY_BENCH_CLIENTS (16).

mod common;
mod pg;

#[path = "../benches/input.rs"]
mod input;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{post_json, send};
use dapi::config::ServiceConfig;
use dapi::http::AppState;
use dapi::inventory::Inventory;
use serde_json::{json, Value};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-inventory"]
async fn inventory_benchmark() {
    let Some(pg) = pg::start("inventory benchmark") else { return };
    let servers = env("INVENTORY_BENCH_SERVERS", 5000);
    let seconds = env("INVENTORY_BENCH_SECONDS", 10) as u64;
    let clients = env("INVENTORY_BENCH_CLIENTS", 16);
    let url = pg.database("bench");
    let dir = pg.dir().to_path_buf();
    let config_path = dir.join("bench-config.json");
    std::fs::write(&config_path, input::config().to_string()).expect("config");
    let body = input::body(servers, 30);
    let request: Value = serde_json::from_slice(&body).expect("bench body");
    let vars = || {
        vec![
            ("DAPI_INVENTORY__URL".to_string(), url.clone()),
            ("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS".to_string(), "64".to_string()),
        ]
    };

    let started = Instant::now();
    let config = ServiceConfig::load(Some(&config_path), vars()).expect("config");
    let inventory = Inventory::start(&config.inventory).await.expect("starts");
    let app = Arc::new(AppState::new(config, None).expect("engine"));
    app.set_inventory(inventory);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(dapi::http::serve(listener, app.clone()));
    println!("empty replica start-up: {:?}", started.elapsed());

    let started = Instant::now();
    let loaded = send(addr, "POST", "/inventory/load", &[("Content-Type", "application/json")], &body).await;
    assert_eq!(loaded.status, 200, "{}", String::from_utf8_lossy(&loaded.body));
    println!(
        "load {servers} servers x 30 VMs ({} MB) through POST /inventory/load: {:?}",
        body.len() / 1_000_000,
        started.elapsed()
    );

    let started = Instant::now();
    let config = ServiceConfig::load(Some(&config_path), vars()).expect("config");
    let second = Inventory::start(&config.inventory).await.expect("starts");
    println!("replica start-up with {} servers: {:?}", second.view().generations.len(), started.elapsed());
    drop(second);

    // Stateless, same size, for comparison (a few requests).
    let mut stateless = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let reply = send(addr, "POST", "/allocate?steps=removed", &[("Content-Type", "application/json")], &body).await;
        assert!(matches!(reply.status, 200 | 409), "{}", reply.status);
        stateless.push(t.elapsed());
    }
    println!("stateless POST /allocate at {servers} servers: {:?} each", stateless);

    let mut vm_request = request.clone();
    vm_request.as_object_mut().expect("object").remove("servers");
    let vm_request = Arc::new(vm_request);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (vm_request, counter) = (vm_request.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = std::collections::BTreeMap::new();
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut r = (*vm_request).clone();
                let vm = format!("b0000000-0000-4000-8000-{n:012}");
                r["vm"]["vm_uuid"] = json!(vm);
                r["vm"]["uuid"] = json!(vm);
                let t = Instant::now();
                let reply = post_json(addr, "/allocate", &r).await;
                latencies.push(t.elapsed());
                *statuses.entry(reply.status).or_insert(0usize) += 1;
            }
            (latencies, statuses)
        }));
    }
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    for t in tasks {
        let (l, s) = t.await.expect("client");
        latencies.extend(l);
        for (k, v) in s {
            *statuses.entry(k).or_insert(0) += v;
        }
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let ok = statuses.get(&200).copied().unwrap_or(0);
    println!(
        "inventory POST /allocate, {clients} clients, {:?}: {} answers {statuses:?}; {:.0} allocations/s with claims committed; p50 {:?} p99 {:?}",
        elapsed,
        latencies.len(),
        ok as f64 / elapsed.as_secs_f64(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99)
    );
    println!("claims in the store: {}", pg.psql("bench", "SELECT count(*) FROM claims"));
}
