//! Inventory mode's benchmark (`make bench-inventory`; not run by `cargo test`): a throwaway
//! PostgreSQL, the benchmark's generated datacenter (benches/input.rs) loaded, then replica
//! start-up, allocations/s and latency with their claims committed, side by side with the
//! stateless request of the same size, and the memory of a replica process against the
//! stateless one's for one request. Clients keep their connections alive, as CNAPI's do.
//! Figures are printed (BENCHMARKS.md), not asserted.
//! INVENTORY_BENCH_SERVERS (5000), INVENTORY_BENCH_SECONDS (10), INVENTORY_BENCH_CLIENTS (16),
//! INVENTORY_BENCH_STEPS (the allocations' `steps` form: inventory mode's default, `removed`,
//! unless given), INVENTORY_BENCH_RATES (the open loop's rates, `100,500,1000`: each run
//! for half of INVENTORY_BENCH_SECONDS).

mod common;
mod pg;

#[path = "../benches/input.rs"]
mod input;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::send;
use dapi::config::ServiceConfig;
use dapi::http::AppState;
use dapi::inventory::Inventory;
use serde_json::{json, Value};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn status_kib(field: &str) -> u64 {
    status_of("/proc/self/status", field)
}

fn status_kib_of(pid: u32, field: &str) -> u64 {
    status_of(&format!("/proc/{pid}/status"), field)
}

fn status_of(path: &str, field: &str) -> u64 {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

fn peak_kib() -> u64 {
    status_kib("VmHWM:")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Where each client's VM uuid goes in the request's text.
const VM_UUID_TEMPLATE: &str = "b0000000-0000-4000-8000-vmuuidvmuuid";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether the answer's chosen server is `uuid`: read from the `server` object (before
/// `"steps"`) without parsing the answer, which lists every server.
fn chosen_is(body: &[u8], uuid: &str) -> bool {
    let head = find(body, b"\"steps\":").map_or(body, |end| &body[..end]);
    find(head, format!("\"uuid\":\"{uuid}\"").as_bytes()).is_some()
}

/// A `dapi serve` of its own on a free port, with `vars` set: the child and its address.
async fn serve_process(config: &std::path::Path, vars: &[(&str, &str)]) -> (std::process::Child, std::net::SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a port").port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_dapi"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("DAPI_LISTEN", format!("127.0.0.1:{port}"))
        .env("DAPI_LOG_LEVEL", "warn")
        .envs(vars.iter().copied())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("dapi serve");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, addr)
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

    let rss_before = rss_kib();
    let started = Instant::now();
    let config = ServiceConfig::load(Some(&config_path), vars()).expect("config");
    let second = Inventory::start(&config.inventory).await.expect("starts");
    println!(
        "replica start-up with {} servers: {:?}; its memory: {} MiB more RSS ({} MiB of server texts)",
        second.model().len(),
        started.elapsed(),
        rss_kib().saturating_sub(rss_before) / 1024,
        second.model().text_bytes() >> 20
    );
    let second_app = Arc::new(AppState::new(config, None).expect("engine"));
    second_app.set_inventory(second);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let second_addr = listener.local_addr().expect("addr");
    tokio::spawn(dapi::http::serve(listener, second_app));

    // Stateless, same size, for comparison (a few requests).
    let mut stateless = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let reply = send(addr, "POST", "/allocate?steps=removed", &[("Content-Type", "application/json")], &body).await;
        assert!(matches!(reply.status, 200 | 409), "{}", reply.status);
        stateless.push(t.elapsed());
    }
    println!("stateless POST /allocate at {servers} servers: {:?} each", stateless);

    // The stateless path's memory for one request of this size: a `dapi serve` of its own.
    let (mut child, child_addr) = serve_process(&config_path, &[]).await;
    let idle = status_kib_of(child.id(), "VmRSS:");
    let reply =
        send(child_addr, "POST", "/allocate?steps=removed", &[("Content-Type", "application/json")], &body).await;
    assert!(matches!(reply.status, 200 | 409), "{}", reply.status);
    println!(
        "stateless dapi serve, one request of {servers} servers: peak RSS {} MiB (idle {} MiB)",
        status_kib_of(child.id(), "VmHWM:") / 1024,
        idle / 1024
    );
    let _ = child.kill();
    let _ = child.wait();
    // A replica's: a `dapi serve` in inventory mode, once it holds the inventory (after
    // its periodic heap trim has run).
    let (mut child, child_addr) = serve_process(&config_path, &[("DAPI_INVENTORY__URL", &url)]).await;
    while send(child_addr, "GET", "/ping", &[], b"").await.json()["inventory"]["servers"] != json!(servers) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "replica dapi serve holding {servers} servers: RSS {} MiB (peak {} MiB, while loading)",
        status_kib_of(child.id(), "VmRSS:") / 1024,
        status_kib_of(child.id(), "VmHWM:") / 1024
    );
    let _ = child.kill();
    let _ = child.wait();

    // The request's text made once, each client putting in its VM's uuid: the clients
    // share the two cores with the replicas, so they build and read as little as they can.
    let mut vm_request = request.clone();
    vm_request.as_object_mut().expect("object").remove("servers");
    vm_request["vm"]["vm_uuid"] = json!(VM_UUID_TEMPLATE);
    vm_request["vm"]["uuid"] = json!(VM_UUID_TEMPLATE);
    let vm_request = Arc::new(serde_json::to_string(&vm_request).expect("json"));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let path: Arc<str> = match std::env::var("INVENTORY_BENCH_STEPS").ok().filter(|s| !s.is_empty()) {
        Some(steps) => format!("/allocate?steps={steps}").into(),
        None => "/allocate".into(),
    };
    println!("inventory allocations: POST {path}");
    for _ in 0..clients {
        let (vm_request, counter, path) = (vm_request.clone(), counter.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = std::collections::BTreeMap::new();
            let mut first_on_newcomer: Option<Instant> = None;
            let mut answer_bytes = 0usize;
            // A kept-alive connection per client, as CNAPI's restify client pools them.
            let mut connection = common::Connection::open(addr).await;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let r = vm_request.replace(VM_UUID_TEMPLATE, &format!("b0000000-0000-4000-8000-{n:012}"));
                let t = Instant::now();
                let reply = connection.send("POST", &path, &[("Content-Type", "application/json")], r.as_bytes()).await;
                latencies.push(t.elapsed());
                answer_bytes += reply.body.len();
                *statuses.entry(reply.status).or_insert(0usize) += 1;
                if first_on_newcomer.is_none()
                    && reply.status == 200
                    && chosen_is(&reply.body, "b1000000-0000-4000-8000-000000000001")
                {
                    // When its answer arrived (an upper bound of when it was decided).
                    first_on_newcomer = Some(Instant::now());
                }
            }
            (latencies, statuses, first_on_newcomer, answer_bytes)
        }));
    }
    // Mid-run, a server with the most free RAM is put through the other replica: how long
    // until this one's allocations use it.
    let mut big = request["servers"][0].clone();
    let newcomer = "b1000000-0000-4000-8000-000000000001";
    big["uuid"] = json!(newcomer);
    big["memory_total_bytes"] = json!(4_u64 << 40);
    big["memory_available_bytes"] = json!(4_u64 << 40);
    big["vms"] = json!({});
    let put_at = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(seconds / 2)).await;
        let bytes = serde_json::to_vec(&big).expect("json");
        let put = send(
            second_addr,
            "PUT",
            &format!("/inventory/servers/{newcomer}"),
            &[("Content-Type", "application/json")],
            &bytes,
        )
        .await;
        assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
        let put_at = Instant::now();
        // When this replica holds it (what its next decision reads).
        while send(addr, "GET", "/ping", &[], b"").await.json()["inventory"]["servers"] != json!(servers + 1) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (put_at, put_at.elapsed())
    });
    let started = Instant::now();
    let mut latencies = Vec::new();
    let mut statuses = std::collections::BTreeMap::new();
    let mut first_use: Option<Instant> = None;
    let mut answer_bytes = 0;
    for t in tasks {
        let (l, s, first, bytes) = t.await.expect("client");
        answer_bytes += bytes;
        latencies.extend(l);
        first_use = match (first_use, first) {
            (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
            (a, b) => a.or(b),
        };
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
    println!("answers of {} KiB on average", answer_bytes / latencies.len().max(1) / 1024);
    let (put_at, held_after) = put_at.await.expect("put");
    println!("a server committed through the other replica was held by this one {held_after:?} after its PUT answered");
    match first_use {
        Some(first) => println!(
            "a server committed through the other replica was used by this one's allocations {:?} after its PUT answered",
            first.saturating_duration_since(put_at)
        ),
        None => println!("the server committed through the other replica was never chosen"),
    }
    // Open loop: requests sent at a fixed rate whatever the answers' pace, each latency
    // taken from when its request was due (a closed loop of 16 clients cannot show p99
    // under 16 / rate: at 1,000/s its mean is 16 ms by Little's law). Connections are
    // taken from a pool, opened as needed.
    let rates = std::env::var("INVENTORY_BENCH_RATES").unwrap_or_else(|_| "100,500,1000".into());
    let next_vm = Arc::new(std::sync::atomic::AtomicUsize::new(counter.load(std::sync::atomic::Ordering::Relaxed)));
    for rate in rates.split(',').filter_map(|r| r.trim().parse::<u64>().ok()).filter(|&r| r > 0) {
        let pool: Arc<tokio::sync::Mutex<Vec<common::Connection>>> = Arc::default();
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = rate * seconds / 2;
        let interval = Duration::from_nanos(1_000_000_000 / rate);
        let start = tokio::time::Instant::now() + Duration::from_millis(50);
        let mut sent = Vec::with_capacity(count as usize);
        for i in 0..count {
            let due = start + interval * i as u32;
            tokio::time::sleep_until(due).await;
            let (pool, opened, vm_request, path, next_vm) =
                (pool.clone(), opened.clone(), vm_request.clone(), path.clone(), next_vm.clone());
            sent.push(tokio::spawn(async move {
                let n = next_vm.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let r = vm_request.replace(VM_UUID_TEMPLATE, &format!("b0000000-0000-4000-8000-{n:012}"));
                let taken = pool.lock().await.pop();
                let mut connection = match taken {
                    Some(c) => c,
                    None => {
                        opened.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        common::Connection::open(addr).await
                    }
                };
                let reply = connection.send("POST", &path, &[("Content-Type", "application/json")], r.as_bytes()).await;
                let latency = due.elapsed();
                pool.lock().await.push(connection);
                (reply.status, latency)
            }));
        }
        let mut latencies = Vec::with_capacity(sent.len());
        let mut statuses = std::collections::BTreeMap::new();
        for task in sent {
            let (status, latency) = task.await.expect("request");
            *statuses.entry(status).or_insert(0usize) += 1;
            latencies.push(latency);
        }
        let took = start.elapsed();
        latencies.sort();
        println!(
            "inventory POST /allocate at a fixed {rate}/s for {:?} ({} connections): {statuses:?}; {:.0} answered/s; p50 {:?} p99 {:?} max {:?}",
            interval * count as u32,
            opened.load(std::sync::atomic::Ordering::Relaxed),
            latencies.len() as f64 / took.as_secs_f64(),
            percentile(&latencies, 0.5),
            percentile(&latencies, 0.99),
            latencies.last().copied().unwrap_or_default()
        );
    }
    println!("claims in the store: {}", pg.psql("bench", "SELECT count(*) FROM claims"));
    println!("peak RSS of the bench process (both replicas, clients, bodies): {} MiB", peak_kib() / 1024);
}
