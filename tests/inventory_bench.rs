//! Inventory mode's benchmark (`make bench-inventory`; not run by `cargo test`): a throwaway
//! PostgreSQL, the benchmark's generated datacenter (benches/input.rs) loaded, then replica
//! start-up, allocations/s and latency with their claims committed, side by side with the
//! stateless request of the same size, and the memory of a replica process against the
//! stateless one's for one request. The replicas are `dapi serve` processes, as deployed; this
//! process only sends requests, keeping its connections alive as CNAPI's clients do.
//! Figures are printed (BENCHMARKS.md), not asserted.
//! INVENTORY_BENCH_SERVERS (5000), INVENTORY_BENCH_SECONDS (10), INVENTORY_BENCH_CLIENTS (4),
//! INVENTORY_BENCH_STEPS (the allocations' `steps` form, `counts`, as a caller that reads only
//! the decision asks; empty: inventory mode's default, `removed`), INVENTORY_BENCH_RATES
//! (the open loop's rates, `100,500,1000`: each run for half of INVENTORY_BENCH_SECONDS),
//! INVENTORY_BENCH_DAPI (the replicas' binary, to compare another build's; default this one),
//! INVENTORY_BENCH_SHAPES (1: every request the same but for its VM's uuid; N: as callers
//! send them, each VM with its own alias, tags and metadata, its owner and size one of N
//! in turn).

mod common;
mod pg;

#[path = "../benches/input.rs"]
mod input;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::env_usize as env;
use common::send;
use serde_json::{json, Value};

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:`), 0 if unreadable.
fn status_kib_of(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The fields of `/proc/PID/stat` after the command's closing parenthesis (state, ppid, ...;
/// utime and stime are the 12th and 13th); empty if unreadable.
fn stat_fields(pid: u32) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect()
}

/// CPU time (user + system) of a process so far, in clock ticks (10 ms).
fn cpu_ticks(pid: u32) -> u64 {
    let fields = stat_fields(pid);
    fields.get(11).unwrap_or(&0) + fields.get(12).unwrap_or(&0)
}

/// CPU ticks of PostgreSQL's processes: the postmaster and its children (`postmaster.pid`
/// in the data directory names it).
fn postgres_ticks(data_dir: &std::path::Path) -> u64 {
    let postmaster: Option<u32> = std::fs::read_to_string(data_dir.join("data").join("postmaster.pid"))
        .ok()
        .and_then(|t| t.lines().next()?.trim().parse().ok());
    let Some(postmaster) = postmaster else { return 0 };
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok());
    let children = pids.filter(|&pid| stat_fields(pid).get(1) == Some(&u64::from(postmaster)));
    children.map(cpu_ticks).sum::<u64>() + cpu_ticks(postmaster)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Where each client's VM uuid goes in the request's text.
const VM_UUID_TEMPLATE: &str = "b0000000-0000-4000-8000-vmuuidvmuuid";
const VM_NAME_TEMPLATE: &str = "bench-vm-name-template";

/// The allocation requests the clients send: their text made once per shape, each request
/// putting in its VM's uuid (and, with several shapes, its name): the clients share the two
/// cores with the replicas and PostgreSQL, so they build and read as little as they can.
struct VmRequests {
    templates: Vec<String>,
    named: bool,
}

impl VmRequests {
    fn new(request: &Value, shapes: usize) -> VmRequests {
        let owners: Vec<Value> = request["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|server| server["vms"].as_object()?.values().next().map(|vm| vm["owner_uuid"].clone()))
            .take(shapes)
            .collect();
        let templates = (0..shapes)
            .map(|shape| {
                let mut vm_request = request.clone();
                vm_request.as_object_mut().expect("object").remove("servers");
                let vm = &mut vm_request["vm"];
                vm["vm_uuid"] = json!(VM_UUID_TEMPLATE);
                vm["uuid"] = json!(VM_UUID_TEMPLATE);
                if shapes > 1 {
                    // What differs from VM to VM in a caller's requests, and what differs
                    // from one customer's order to another's.
                    vm["alias"] = json!(VM_NAME_TEMPLATE);
                    vm["tags"] = json!({"role": "web", "name": VM_NAME_TEMPLATE});
                    vm["internal_metadata"] = json!({"provisioned-as": VM_NAME_TEMPLATE});
                    vm["owner_uuid"] = owners.get(shape).cloned().unwrap_or_else(|| vm["owner_uuid"].clone());
                    let ram = [1024, 2048, 4096, 8192][shape % 4];
                    vm["ram"] = json!(ram);
                    vm["max_physical_memory"] = json!(ram);
                    vm_request["package"]["max_physical_memory"] = json!(ram);
                }
                serde_json::to_string(&vm_request).expect("json")
            })
            .collect();
        VmRequests { templates, named: shapes > 1 }
    }

    /// The `n`th request: the `n`th VM, of shape `n` mod the shapes.
    fn nth(&self, n: usize) -> String {
        let text = self.templates[n % self.templates.len()]
            .replace(VM_UUID_TEMPLATE, &format!("b0000000-0000-4000-8000-{n:012}"));
        if self.named {
            text.replace(VM_NAME_TEMPLATE, &format!("bench-{n}"))
        } else {
            text
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A fixed CPU loop's best time of three: the host's phase (its speed changes by a third
/// from hour to hour), printed beside the figures so runs can be compared.
fn host_reference() -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            let mut x = 0x9E37_79B9_7F4A_7C15_u64;
            for _ in 0..25_000_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
            }
            std::hint::black_box(x);
            started.elapsed()
        })
        .min()
        .unwrap_or_default()
}

/// How many servers the allocation received (its first step's `remaining_count`, in the
/// `removed` and `counts` forms), read without parsing the answer.
fn servers_received(body: &[u8]) -> Option<usize> {
    let step = &body[find(body, b"\"Received by DAPI\"")?..];
    let step = &step[..find(step, b"}")?];
    let count = &step[find(step, b"\"remaining_count\":")? + b"\"remaining_count\":".len()..];
    let digits = count.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&count[..digits]).ok()?.parse().ok()
}

/// A `dapi serve` of its own on a free port, with `vars` set, killed when dropped (a
/// failed assertion must not leave replicas following the benchmark's database).
struct Served {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl Served {
    /// Started and listening: a replica listens once it holds the inventory.
    async fn start(config: &std::path::Path, vars: &[(&str, &str)]) -> Served {
        let port = common::unclaimed_port();
        // INVENTORY_BENCH_DAPI: another build's binary, to compare two side by side.
        let binary = std::env::var("INVENTORY_BENCH_DAPI").unwrap_or_else(|_| env!("CARGO_BIN_EXE_dapi").to_string());
        let child = std::process::Command::new(binary)
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
        let mut served = Served { child, addr };
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            // A replica that stopped (a config it refused: its error is on stderr) would
            // otherwise be waited for forever.
            if let Ok(Some(status)) = served.child.try_wait() {
                panic!("dapi serve exited before listening ({status})");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        served
    }

    fn kib(&self, field: &str) -> u64 {
        status_kib_of(self.child.id(), field)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: make bench-inventory"]
async fn inventory_benchmark() {
    let Some(pg) = pg::start("inventory benchmark") else { return };
    println!("host reference loop: {:?}", host_reference());
    let servers = env("INVENTORY_BENCH_SERVERS", 5000);
    let seconds = env("INVENTORY_BENCH_SECONDS", 10) as u64;
    let clients = env("INVENTORY_BENCH_CLIENTS", 4);
    let url = pg.database("bench");
    let dir = pg.dir().to_path_buf();
    let config_path = dir.join("bench-config.json");
    std::fs::write(&config_path, input::config().to_string()).expect("config");
    let body = input::body(servers, 30);
    let request: Value = serde_json::from_slice(&body).expect("bench body");
    // Replicas are `dapi serve` processes, as deployed; this process only sends requests.
    let replica_vars = [("DAPI_INVENTORY__URL", url.as_str()), ("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "64")];

    let started = Instant::now();
    let first = Served::start(&config_path, &replica_vars).await;
    let addr = first.addr;
    println!("empty replica start-up (process start to listening): {:?}", started.elapsed());

    let started = Instant::now();
    let loaded = send(addr, "POST", "/inventory/load", &[("Content-Type", "application/json")], &body).await;
    assert_eq!(loaded.status, 200, "{}", String::from_utf8_lossy(&loaded.body));
    println!(
        "load {servers} servers x 30 VMs ({} MB) through POST /inventory/load: {:?}",
        body.len() / 1_000_000,
        started.elapsed()
    );

    let started = Instant::now();
    let second = Served::start(&config_path, &replica_vars).await;
    let second_addr = second.addr;
    println!("replica start-up with {servers} servers (process start to listening): {:?}", started.elapsed());
    assert_eq!(send(second_addr, "GET", "/ping", &[], b"").await.json()["inventory"]["servers"], json!(servers));
    // Its memory once its periodic heap trim has run.
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "replica dapi serve holding {servers} servers: RSS {} MiB (peak {} MiB, while loading)",
        second.kib("VmRSS:") / 1024,
        second.kib("VmHWM:") / 1024
    );

    // The stateless path at the same size, in a `dapi serve` of its own: its time for a few
    // requests and its peak memory for one.
    let stateless_server = Served::start(&config_path, &[]).await;
    let idle = stateless_server.kib("VmRSS:");
    let mut stateless = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let reply = send(
            stateless_server.addr,
            "POST",
            "/allocate?steps=removed",
            &[("Content-Type", "application/json")],
            &body,
        )
        .await;
        assert!(matches!(reply.status, 200 | 409), "{}", reply.status);
        stateless.push(t.elapsed());
        if stateless.len() == 1 {
            println!(
                "stateless dapi serve, one request of {servers} servers: peak RSS {} MiB (idle {} MiB)",
                stateless_server.kib("VmHWM:") / 1024,
                idle / 1024
            );
        }
    }
    println!("stateless POST /allocate at {servers} servers: {:?} each", stateless);
    drop(stateless_server);

    let shapes = env("INVENTORY_BENCH_SHAPES", 1).max(1);
    let vm_request = Arc::new(VmRequests::new(&request, shapes));
    println!("request shapes: {shapes}");
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let path: Arc<str> = match std::env::var("INVENTORY_BENCH_STEPS").unwrap_or_else(|_| "counts".into()).as_str() {
        "" => "/allocate".into(),
        steps => format!("/allocate?steps={steps}").into(),
    };
    println!("inventory allocations: POST {path}");
    let ticks_before = [cpu_ticks(first.child.id()), cpu_ticks(second.child.id()), cpu_ticks(std::process::id())];
    let pg_before = postgres_ticks(pg.dir());
    for _ in 0..clients {
        let (vm_request, counter, path) = (vm_request.clone(), counter.clone(), path.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut statuses = std::collections::BTreeMap::new();
            let mut first_with_newcomer: Option<Instant> = None;
            let mut answer_bytes = 0usize;
            // A kept-alive connection per client, as CNAPI's restify client pools them.
            let mut connection = common::Connection::open(addr).await;
            while Instant::now() < deadline {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let r = vm_request.nth(n);
                let t = Instant::now();
                let reply = connection.send("POST", &path, &[("Content-Type", "application/json")], r.as_bytes()).await;
                latencies.push(t.elapsed());
                answer_bytes += reply.body.len();
                *statuses.entry(reply.status).or_insert(0usize) += 1;
                if first_with_newcomer.is_none() && servers_received(&reply.body) == Some(servers + 1) {
                    // When its answer arrived (an upper bound of when it was decided).
                    first_with_newcomer = Some(Instant::now());
                }
            }
            (latencies, statuses, first_with_newcomer, answer_bytes)
        }));
    }
    // Mid-run, a new server is put through the other replica: how long until this one's
    // allocations consider it (they received one server more).
    let mut newcomer_server = request["servers"][0].clone();
    let newcomer = "b1000000-0000-4000-8000-000000000001";
    newcomer_server["uuid"] = json!(newcomer);
    newcomer_server["vms"] = json!({});
    let put_at = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(seconds / 2)).await;
        let bytes = serde_json::to_vec(&newcomer_server).expect("json");
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
    let ticks_after = [cpu_ticks(first.child.id()), cpu_ticks(second.child.id()), cpu_ticks(std::process::id())];
    // A backend that ended took its ticks with it.
    let pg_ticks = postgres_ticks(pg.dir()).saturating_sub(pg_before);
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
    let per_answer = |ticks: u64| ticks as f64 * 10.0 / latencies.len().max(1) as f64;
    println!(
        "CPU per answer: deciding replica {:.3} ms, the other {:.3} ms, PostgreSQL {:.3} ms, the clients (this process) {:.3} ms",
        per_answer(ticks_after[0].saturating_sub(ticks_before[0])),
        per_answer(ticks_after[1].saturating_sub(ticks_before[1])),
        per_answer(pg_ticks),
        per_answer(ticks_after[2].saturating_sub(ticks_before[2])),
    );
    let (put_at, held_after) = put_at.await.expect("put");
    println!("a server committed through the other replica was held by this one {held_after:?} after its PUT answered");
    match first_use {
        Some(first) => println!(
            "a server committed through the other replica was considered by this one's allocations {:?} after its PUT answered",
            first.saturating_duration_since(put_at)
        ),
        None => println!(
            "the server committed through the other replica was never among the servers an allocation received \
             (steps=full answers do not count them)"
        ),
    }
    // Open loop: requests sent at a fixed rate whatever the answers' pace, each latency
    // taken from when its request was due (a closed loop's latency is bound to its clients
    // by Little's law: 16 of them at 1,000/s wait 16 ms on average). Connections are taken
    // from a pool, opened as needed.
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
                let r = vm_request.nth(n);
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
    println!("host reference loop: {:?}", host_reference());
    println!(
        "replica RSS after the run: {} MiB (the other: {} MiB), claims held",
        first.kib("VmRSS:") / 1024,
        second.kib("VmRSS:") / 1024
    );
}
