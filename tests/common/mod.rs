//! Shared helpers for end-to-end tests: start the real service on a loopback port and talk
//! HTTP/1.1 to it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use dapi::config::ServiceConfig;
use dapi::http::AppState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A service running in this process on 127.0.0.1:<random port>.
pub struct Service {
    pub addr: SocketAddr,
    pub app: Arc<AppState>,
}

/// Starts the service with the built-in config changed by `env` (as `DAPI_*` variables).
pub async fn start(env: &[(&str, &str)]) -> Service {
    start_with(None, env).await
}

pub async fn start_with(file: Option<&Path>, env: &[(&str, &str)]) -> Service {
    let vars = env.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    let config = ServiceConfig::load(file, vars).expect("test config is valid");
    let app = Arc::new(AppState::new(config, file.map(Path::to_path_buf)).expect("engine builds"));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(dapi::http::serve(listener, app.clone()));
    Service { addr, app }
}

/// A free loopback port for a process the test starts (PostgreSQL, `dapi serve`), outside
/// the kernel's ephemeral range: the tests' own client connections take their local ports
/// from that range, and one of them could hold a port picked there before the process binds
/// it (a test cluster failed to start so in CI).
pub fn unclaimed_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    loop {
        let port = rng.gen_range(20_000..32_000);
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A response: status, lower-cased headers, body.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends one request (`Connection: close`) and reads the whole answer.
pub async fn send(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // The server may answer (413, 503) and close before the whole body is sent: keep what it
    // said rather than the write error.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    parse_reply(&raw)
}

/// One kept-alive HTTP/1.1 connection, as a pooling client (Node's agent, restify) uses:
/// requests one after another, each answer read to its end.
pub struct Connection {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    addr: SocketAddr,
}

impl Connection {
    pub async fn open(addr: SocketAddr) -> Connection {
        let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let _ = stream.set_nodelay(true);
        Connection { stream: tokio::io::BufReader::new(stream), addr }
    }

    pub async fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        use tokio::io::AsyncBufReadExt;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n", self.addr, body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body);
        self.stream.get_mut().write_all(&out).await.expect("request written");
        let mut raw = Vec::new();
        loop {
            let before = raw.len();
            let n = self.stream.read_until(b'\n', &mut raw).await.expect("answer head");
            assert!(n > 0, "the connection closed before the answer's head");
            if &raw[before..] == b"\r\n" {
                break;
            }
        }
        let head = parse_reply(&raw);
        let mut body = Vec::new();
        if let Some(length) = head.header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(length, 0);
            self.stream.read_exact(&mut body).await.expect("answer body");
        } else if head.header("transfer-encoding") == Some("chunked") {
            loop {
                let mut line = Vec::new();
                self.stream.read_until(b'\n', &mut line).await.expect("chunk size");
                let size = usize::from_str_radix(String::from_utf8_lossy(&line).trim(), 16).unwrap_or(0);
                let at = body.len();
                body.resize(at + size + 2, 0);
                self.stream.read_exact(&mut body[at..]).await.expect("chunk");
                body.truncate(at + size);
                if size == 0 {
                    break;
                }
            }
        }
        Reply { body, ..head }
    }
}

pub fn parse_reply(raw: &[u8]) -> Reply {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("complete head");
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':').map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string())))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v == "chunked") {
        body = dechunk(&body);
    }
    Reply { status, headers, body }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&data[..end]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[end + 2..end + 2 + size]);
        data = &data[end + 2 + size + 2..];
    }
    out
}

pub async fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Reply {
    let bytes = serde_json::to_vec(body).expect("serialisable");
    send(addr, "POST", path, &[("Content-Type", "application/json")], &bytes).await
}

/// The `dapi` binary, with none of the caller's `DAPI_*` settings (they would change its
/// config).
pub fn dapi() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_dapi"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("DAPI_") {
            command.env_remove(key);
        }
    }
    command
}

/// The example request shipped in `examples/allocate.json`.
pub fn example_request() -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/allocate.json"))
        .expect("examples/allocate.json");
    serde_json::from_str(&text).expect("example is JSON")
}

/// The example request with its servers repeated `copies` times under new uuids, and a
/// `seed` so that answers can be compared byte for byte.
pub fn example_datacenter(copies: usize, seed: u64) -> serde_json::Value {
    let mut req = example_request();
    let servers = req["servers"].as_array().cloned().unwrap_or_default();
    let mut many = Vec::new();
    for i in 0..copies {
        for (j, server) in servers.iter().enumerate() {
            let mut server = server.clone();
            server["uuid"] = serde_json::json!(format!("{i:08x}-0000-4000-8000-{j:012x}"));
            many.push(server);
        }
    }
    req["servers"] = serde_json::json!(many);
    req["seed"] = serde_json::json!(seed);
    req
}

/// A server built from the example's first one: no VMs, `cores` CPUs, `ram_gib` of memory,
/// a 4 TiB pool with nothing used, then `changes` laid over it.
pub fn empty_server(uuid: &str, cores: u32, ram_gib: f64, changes: serde_json::Value) -> serde_json::Value {
    let example = example_request();
    let mut s = example["servers"][0].clone();
    s["uuid"] = serde_json::json!(uuid);
    s["vms"] = serde_json::json!({});
    s["sysinfo"]["UUID"] = serde_json::json!(uuid);
    s["sysinfo"]["CPU Total Cores"] = serde_json::json!(cores);
    s["sysinfo"]["CPU Online Count"] = serde_json::json!(cores);
    s["memory_total_bytes"] = serde_json::json!(ram_gib * 1_073_741_824.0);
    for key in [
        "disk_cores_quota_used_bytes",
        "disk_installed_images_used_bytes",
        "disk_kvm_zvol_volsize_bytes",
        "disk_system_used_bytes",
        "disk_zone_quota_bytes",
        "disk_zone_quota_used_bytes",
        "disk_pool_alloc_bytes",
    ] {
        s[key] = serde_json::json!(0);
    }
    s["disk_pool_size_bytes"] = serde_json::json!(4096.0 * 1_073_741_824.0);
    if let (Some(s), Some(c)) = (s.as_object_mut(), changes.as_object()) {
        for (k, v) in c {
            s.insert(k.clone(), v.clone());
        }
    }
    s
}

/// The vendored recorded cases (`tests/conformance/cases`), in file-name order.
pub fn recorded_cases() -> Vec<serde_json::Value> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/conformance/cases exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 40, "the vendored subset has at least 40 cases");
    paths.iter().map(|p| serde_json::from_str(&std::fs::read_to_string(p).expect("readable")).expect("JSON")).collect()
}

/// `dapi replay DIR --json [--config FILE]`, its report.
pub fn replay(dir: &Path, config: Option<&Path>) -> serde_json::Value {
    let mut command = dapi();
    command.arg("replay").arg(dir).arg("--json");
    if let Some(file) = config {
        command.arg("--config").arg(file);
    }
    let out = command.output().expect("dapi runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

/// The value of one sample line of `/metrics` (0 when absent).
pub async fn metric(addr: SocketAddr, sample: &str) -> u64 {
    let text = String::from_utf8(send(addr, "GET", "/metrics", &[], b"").await.body).expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// The engine of `config/default.json` with `chain` in place of its description when given,
/// and `defaults` laid over its defaults.
pub fn engine_with(chain: Option<serde_json::Value>, defaults: serde_json::Value) -> dapi::engine::Engine {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.json")).expect("config");
    let mut config: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    if let Some(chain) = chain {
        config["allocationDescription"] = chain;
    }
    for (k, v) in defaults.as_object().expect("object") {
        config["defaults"][k] = v.clone();
    }
    dapi::engine::Engine::from_config(&config, &dapi::registry::built_in()).expect("engine")
}

/// A request body parsed and validated as the service does, for tests driving the engine.
pub fn parse_valid(text: &[u8]) -> dapi::model::AllocateBody<'_> {
    let mut body = dapi::wire::parse_allocate_body(text).expect("parsed");
    dapi::validate::validate_allocate(&mut body).expect("valid");
    body
}

/// A claim on `server` for a VM of `vm`'s owner and size (`owner_uuid`, `ram`, `brand`), as
/// inventory mode makes it; `n` tells claims apart.
pub fn claim(n: usize, server: &str, vm: &serde_json::Value) -> dapi::model::Ticket {
    serde_json::from_value(serde_json::json!({
        "uuid": format!("claim-{n}"), "id": format!("c1a1c1a1-0000-4000-8000-{n:012x}"),
        "server_uuid": server, "scope": "vm", "action": "provision", "status": "active",
        "extra": {"owner_uuid": vm["owner_uuid"], "max_physical_memory": vm["ram"], "cpu_cap": 100,
                  "quota": 40, "brand": vm["brand"]}
    }))
    .expect("ticket")
}

/// A benchmark's setting from the environment, `default` when unset or not a number.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
