//! End-to-end tests of the `dapi` process itself: start-up errors, bunyan log lines,
//! SIGTERM draining in-flight requests, SIGHUP reloading the config.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_dapi");

fn tmp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

/// A running `dapi serve` and its log lines.
struct Server {
    child: Child,
    addr: SocketAddr,
    logs: mpsc::Receiver<Value>,
}

impl Server {
    fn start(config: Option<&Path>) -> Server {
        Server::start_with(config, &[])
    }

    fn start_with(config: Option<&Path>, env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(BIN);
        cmd.arg("serve").env("DAPI_LISTEN", "127.0.0.1:0").env("DAPI_LOG_LEVEL", "info").env_remove("DAPI_CONFIG");
        cmd.envs(env.iter().copied());
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("dapi starts");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, logs) = mpsc::channel();
        std::thread::spawn(move || forward_logs(stdout, tx));
        let first = logs.recv_timeout(Duration::from_secs(20)).expect("a first log line");
        assert_eq!(first["msg"], "dapi listening", "{first}");
        let addr = first["addr"].as_str().and_then(|a| a.parse().ok()).expect("listening address");
        Server { child, addr, logs }
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{name}");
    }

    /// Sends `POST /allocate` with `body` on a new connection (`Connection: close`) in
    /// `version` ("1.1", "1.0"); the answer is left to the caller.
    fn post(&self, body: &[u8], version: &str) -> TcpStream {
        let mut s = TcpStream::connect(self.addr).expect("connect");
        write!(
            s,
            "POST /allocate HTTP/{version}\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .expect("head");
        s.write_all(body).expect("body");
        s
    }

    /// The next log line whose `msg` is `msg`.
    fn log(&self, msg: &str) -> Value {
        loop {
            let line =
                self.logs.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("no {msg:?} log line"));
            if line["msg"] == msg {
                return line;
            }
        }
    }

    fn get(&self, path: &str) -> common::Reply {
        let mut s = TcpStream::connect(self.addr).expect("connect");
        write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
        let mut raw = Vec::new();
        s.read_to_end(&mut raw).expect("read");
        common::parse_reply(&raw)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn forward_logs(stdout: ChildStdout, tx: mpsc::Sender<Value>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        let value = serde_json::from_str(&line).unwrap_or_else(|_| panic!("log line is not JSON: {line}"));
        if tx.send(value).is_err() {
            break;
        }
    }
}

#[test]
fn a_bad_config_stops_start_up_with_a_message() {
    let dir = tmp_dir("badconfig");
    let path = dir.join("c.json");
    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "hard-filter-nope"]}"#).expect("write");
    let out = Command::new(BIN).args(["serve", "--config"]).arg(&path).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Bad expression given: Unrecognized algorithm: hard-filter-nope"), "{err}");

    let out = Command::new(BIN).arg("serve").env("DAPI_DEFAULTS__FILTER_HEADNODE", "yes").output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Defaults filter_headnode is not boolean"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_request_is_one_bunyan_line() {
    let server = Server::start(None);
    let mut s = TcpStream::connect(server.addr).expect("connect");
    let body = serde_json::to_vec(&common::example_request()).expect("body");
    write!(
        s,
        "POST /allocate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nX-Request-Id: req-42\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
    s.write_all(&body).expect("body");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("answer");
    let reply = common::parse_reply(&raw);
    assert_eq!(reply.status, 200);

    let line = server.log("request");
    for key in ["name", "hostname", "pid", "level", "msg", "time", "v"] {
        assert!(line.get(key).is_some(), "bunyan field {key} in {line}");
    }
    assert_eq!(line["name"], "dapi");
    assert_eq!(line["level"], 30);
    assert_eq!(line["v"], 0);
    assert_eq!(line["req_id"], "req-42");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/allocate");
    assert_eq!(line["status"], 200);
    assert_eq!(line["servers"], 4);
    assert_eq!(line["server"], reply.json()["server"]["uuid"]);
    assert!(line["latency_ms"].is_number());
    // Where the time went, in order: the body in, read, decided, then answered.
    let phases: Vec<f64> = ["body_ms", "read_ms", "decided_ms", "latency_ms"]
        .iter()
        .map(|key| line[key].as_f64().unwrap_or_else(|| panic!("{key} is a number in {line}")))
        .collect();
    assert!(phases.windows(2).all(|w| w[0] <= w[1]), "phases out of order: {phases:?} in {line}");
}

/// A big answer is sent in parts while it is written. Read whole, its request's line is
/// written once the last part has gone, and times it; a client that stops reading for longer
/// than the request timeout is given up on, and the connection closes without the chunked
/// message's end, so the parts it did get can never pass for a whole answer.
#[test]
fn a_big_answer_given_up_on_never_looks_whole() {
    let server = Server::start_with(None, &[("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "1000"), ("DAPI_LOG_LEVEL", "debug")]);
    // 6,000 servers: an answer of about 10 MB, more than the two sockets' buffers hold.
    let body = serde_json::to_vec(&common::example_datacenter(1500, 11)).expect("body");
    let post = || server.post(&body, "1.1");

    let mut raw = Vec::new();
    post().read_to_end(&mut raw).expect("answer");
    let whole = raw.len();
    let reply = common::parse_reply(&raw);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("transfer-encoding"), Some("chunked"), "sent in parts");
    assert!(reply.body.len() > 8 << 20, "a big answer: {} bytes", reply.body.len());
    assert_eq!(reply.json()["server"]["uuid"].as_str().map(str::len), Some(36));
    let line = server.log("request");
    assert!(line.get("answer_cut").is_none(), "{line}");
    let (decided, latency) = (line["decided_ms"].as_f64(), line["latency_ms"].as_f64());
    assert!(decided.is_some_and(|d| latency.is_some_and(|l| d <= l)), "{line}");

    // Nothing read until well after the timeout, then what is left.
    let mut s = post();
    std::thread::sleep(Duration::from_millis(2500));
    let mut raw = Vec::new();
    // The connection is reset: what had arrived may be read, or dropped with the reset.
    let _ = s.read_to_end(&mut raw);
    assert!(raw.len() < whole, "given up on: {} of {whole} bytes", raw.len());
    assert!(!raw.ends_with(b"\r\n0\r\n\r\n"), "the chunked message must not end");
    let line = server.log("request");
    assert_eq!(line["answer_cut"], true, "{line}");
    assert_eq!(line["status"], 200);
    // Given up on at the timeout, not when the client came back: the connection was reset
    // then, rather than kept for the parts hyper held.
    assert!(line["latency_ms"].as_f64().is_some_and(|ms| ms < 2400.0), "{line}");

    // HTTP/1.0 has no chunked encoding, so a cut answer could not be told from a whole one:
    // it gets every answer whole, with its length.
    let mut raw = Vec::new();
    server.post(&body, "1.0").read_to_end(&mut raw).expect("answer");
    let old = common::parse_reply(&raw);
    assert_eq!(old.status, 200);
    assert_eq!(old.header("transfer-encoding"), None);
    assert_eq!(old.header("content-length"), Some(reply.body.len().to_string().as_str()));
    assert!(old.body == reply.body, "the same answer, whole");
    server.log("request");

    // A client that closes its side right after its request is taken for gone (hyper
    // drops the request); its line still comes, as 499.
    let mut s = post();
    s.shutdown(std::net::Shutdown::Write).expect("half-close");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let line = server.log("request");
    assert_eq!(line["status"], 499, "{line}");
    assert_eq!(line["error"], "the client closed the connection before the answer was ready", "{line}");

    // An answer to HEAD has no body to cut (its line is at debug level).
    let mut s = TcpStream::connect(server.addr).expect("connect");
    write!(s, "HEAD /openapi.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("head");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("answer");
    assert!(raw.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&raw));
    let line = server.log("request");
    assert_eq!((&line["method"], &line["path"]), (&Value::from("HEAD"), &Value::from("/openapi.json")), "{line}");
    assert!(line.get("answer_cut").is_none(), "{line}");
}

/// A client that reads a big answer slowly but steadily gets all of it, though the kernel
/// lets more be written only in bursts, each once a good share of the socket's buffer
/// (megabytes) has drained: far longer than the request timeout here.
#[test]
fn a_steady_slow_reader_gets_the_whole_answer() {
    let server = Server::start_with(None, &[("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "500")]);
    let body = serde_json::to_vec(&common::example_datacenter(1000, 11)).expect("body");
    let mut s = server.post(&body, "1.1");
    // About 1.5 MB/s, in reads of 16 KiB.
    let (mut raw, mut piece) = (Vec::new(), vec![0u8; 16 << 10]);
    let started = std::time::Instant::now();
    loop {
        match s.read(&mut piece) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&piece[..n]),
            Err(e) => panic!("cut after {} bytes: {e}", raw.len()),
        }
        let due = Duration::from_secs_f64(raw.len() as f64 / 1.5e6);
        std::thread::sleep(due.saturating_sub(started.elapsed()));
    }
    let reply = common::parse_reply(&raw);
    assert_eq!(reply.status, 200);
    assert!(reply.body.len() > 6 << 20, "a big answer: {} bytes", reply.body.len());
    assert_eq!(reply.json()["server"]["uuid"].as_str().map(str::len), Some(36));
    let line = server.log("request");
    assert!(line.get("answer_cut").is_none(), "{line}");
}

#[test]
fn sigterm_lets_in_flight_requests_finish() {
    let mut server = Server::start(None);
    let body = serde_json::to_vec(&common::example_request()).expect("body");
    let mut s = TcpStream::connect(server.addr).expect("connect");
    write!(
        s,
        "POST /allocate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .expect("head");
    s.write_all(&body[..body.len() / 2]).expect("half the body");
    s.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(200));
    server.signal("TERM");
    server.log("shutting down: finishing in-flight requests");
    s.write_all(&body[body.len() / 2..]).expect("the rest");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("answer");
    assert_eq!(common::parse_reply(&raw).status, 200, "the in-flight request completed");
    let status = server.child.wait().expect("exits");
    assert!(status.success(), "clean exit: {status:?}");
    assert!(TcpStream::connect(server.addr).is_err(), "no longer accepting");
}

#[test]
fn sighup_reloads_a_valid_config_and_keeps_the_old_one_otherwise() {
    let dir = tmp_dir("sighup");
    let path = dir.join("c.json");
    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "identity"]}"#).expect("write");
    let server = Server::start(Some(&path));
    let before = server.get("/ping").json()["config"].clone();

    std::fs::write(&path, r#"{"allocationDescription": ["or", "identity"]}"#).expect("write");
    server.signal("HUP");
    let refused = server.log("config reload refused; keeping the running config");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("sexp too short")), "{refused}");
    assert_eq!(server.get("/ping").json()["config"], before);

    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "hard-filter-setup"]}"#).expect("write");
    server.signal("HUP");
    let reloaded = server.log("config reloaded");
    assert_ne!(reloaded["config"], before);
    assert_eq!(server.get("/ping").json()["config"], reloaded["config"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn overload_is_a_warning_and_a_hang_up_is_not_a_bad_request() {
    let dir = tmp_dir("overload-log");
    let path = dir.join("c.json");
    std::fs::write(&path, r#"{"limits": {"max_concurrent_allocations": 1}}"#).expect("write");
    let server = Server::start(Some(&path));
    // Holds the only permit with a body that never comes.
    let mut held = TcpStream::connect(server.addr).expect("connect");
    write!(
        held,
        "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
    )
    .expect("head");
    held.flush().expect("flush");
    std::thread::sleep(Duration::from_millis(300));

    let body = serde_json::to_vec(&common::example_request()).expect("body");
    let mut raw = Vec::new();
    server.post(&body, "1.1").read_to_end(&mut raw).expect("answer");
    assert_eq!(common::parse_reply(&raw).status, 503);
    let line = server.log("request");
    assert_eq!((line["status"].as_u64(), line["level"].as_u64()), (Some(503), Some(40)), "{line}");

    drop(held);
    let line = server.log("request");
    assert_eq!((line["status"].as_u64(), line["level"].as_u64()), (Some(499), Some(30)), "{line}");
    assert!(line["error"].as_str().is_some_and(|e| e.starts_with("ClientClosedRequest")), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}
