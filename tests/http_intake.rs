//! End-to-end tests of how requests and connections get in: early answers that the
//! client still reads (the unread body is drained), slow bodies, silent and idle
//! connections, the connection cap and its health-check reserve.
//!
//! Clients here write their whole body before reading, as urllib and Node's agents do,
//! with plain blocking sockets. Timeouts are configured short; assertions on time only
//! have generous bounds.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{example_request, send, start, Reply};

/// Reads one answer (sized by `Content-Length`) from a connection that may stay open.
fn read_answer(stream: &mut TcpStream) -> std::io::Result<Reply> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = common::parse_reply(&raw[..split + 4]);
            let length: usize = head.header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            if raw.len() >= split + 4 + length {
                return Ok(common::parse_reply(&raw[..split + 4 + length]));
            }
        }
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed before a whole answer"));
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

/// Like urllib: writes the head and the whole body, and only then reads the answer. A
/// write error here is what a client sees when the server closes on an unread body.
fn upload_then_read(addr: SocketAddr, path: &str, headers: &str, body: &[u8]) -> (Reply, TcpStream) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("head");
    stream.write_all(body).unwrap_or_else(|e| panic!("the client could not send its whole body: {e}"));
    let reply = read_answer(&mut stream).unwrap_or_else(|e| panic!("the client could not read the answer: {e}"));
    (reply, stream)
}

fn get_on(stream: &mut TcpStream, path: &str) -> std::io::Result<Reply> {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")?;
    read_answer(stream)
}

/// Requests that hold their allocation permits: a head and the first byte of a body
/// that never comes (kept as long as the returned streams live).
async fn hold_permits(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    use tokio::io::AsyncWriteExt;
    let mut held = Vec::new();
    for _ in 0..n {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head =
            "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
        s.write_all(head.as_bytes()).await.expect("head");
        held.push(s);
    }
    // Until every one of them holds its permit.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held
}

fn big_body(bytes: usize) -> Vec<u8> {
    let mut body = b"{\"pad\":\"".to_vec();
    body.resize(bytes - 2, b'x');
    body.extend_from_slice(b"\"}");
    body
}

/// A metric's value, from `/metrics`.
async fn metric(addr: SocketAddr, line_start: &str) -> Option<f64> {
    let text = String::from_utf8(send(addr, "GET", "/metrics", &[], b"").await.body).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// A metric's value once it reaches `value` (it is counted just after the client has
/// its answer), or after 5 s.
async fn metric_reaching(addr: SocketAddr, line_start: &str, value: f64) -> Option<f64> {
    let mut seen = None;
    for _ in 0..50 {
        seen = metric(addr, line_start).await;
        if seen >= Some(value) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_upload_before_reading_see_the_overload_503() {
    let s = start(&[
        ("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "2"),
        ("DAPI_LIMITS__BODY_TIMEOUT_MS", "60000"),
        ("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "60000"),
    ])
    .await;
    let held = hold_permits(s.addr, 2).await;
    // Far bigger than the socket buffers: the server must read it for the client to
    // finish writing.
    let body = std::sync::Arc::new(big_body(6 << 20));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, body) = (s.addr, body.clone());
            tokio::task::spawn_blocking(move || {
                let (reply, mut stream) = upload_then_read(addr, "/allocate", "", &body);
                // The body was drained whole: the connection serves the next request.
                let next = get_on(&mut stream, "/ping").map(|r| r.status);
                (reply, next)
            })
        })
        .collect();
    for client in clients {
        let (reply, next) = client.await.expect("client thread");
        assert_eq!(reply.status, 503, "{}", String::from_utf8_lossy(&reply.body));
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(reply.json()["code"], "ServiceUnavailable");
        assert_eq!(next.ok(), Some(200), "the connection stays usable after the drained body");
    }
    let drained = metric_reaching(s.addr, "dapi_http_bodies_drained_total{result=\"complete\"}", 8.0).await;
    assert_eq!(drained, Some(8.0));
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_uploads_too_much_before_reading_sees_the_413() {
    let s = start(&[("DAPI_LIMITS__MAX_BODY_BYTES", "1000000")]).await;
    let body = big_body(3 << 20);
    let addr = s.addr;
    // Declared too big: refused before reading.
    let declared = {
        let body = body.clone();
        tokio::task::spawn_blocking(move || upload_then_read(addr, "/allocate", "", &body).0)
    };
    let reply = declared.await.expect("client");
    assert_eq!(reply.status, 413);
    assert_eq!(reply.json()["code"], "PayloadTooLarge");

    // Chunked, so found too big only while reading: the rest is drained all the same.
    let chunked = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let head = "POST /capacity HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        stream.write_all(head.as_bytes()).expect("head");
        for chunk in body.chunks(64 * 1024) {
            write!(stream, "{:x}\r\n", chunk.len()).expect("chunk size");
            stream.write_all(chunk).unwrap_or_else(|e| panic!("the client could not send its whole body: {e}"));
            stream.write_all(b"\r\n").expect("chunk end");
        }
        stream.write_all(b"0\r\n\r\n").expect("last chunk");
        read_answer(&mut stream).expect("an answer")
    });
    let reply = chunked.await.expect("client");
    assert_eq!(reply.status, 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_body_is_read_reach_the_client() {
    let s = start(&[("DAPI_AUTH_TOKEN", "sesame")]).await;
    let addr = s.addr;
    let body = std::sync::Arc::new(big_body(4 << 20));
    let b = body.clone();
    let unauthorized = tokio::task::spawn_blocking(move || upload_then_read(addr, "/allocate", "", &b).0);
    let reply = unauthorized.await.expect("client");
    assert_eq!(reply.status, 401);
    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));

    let b = body.clone();
    let wrong_type = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let head = format!(
            "POST /allocate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sesame\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
            b.len()
        );
        stream.write_all(head.as_bytes()).expect("head");
        stream.write_all(&b).unwrap_or_else(|e| panic!("the client could not send its whole body: {e}"));
        read_answer(&mut stream).expect("an answer")
    });
    assert_eq!(wrong_type.await.expect("client").status, 415);

    let b = body.clone();
    let nowhere = tokio::task::spawn_blocking(move || upload_then_read(addr, "/nowhere", "", &b).0);
    assert_eq!(nowhere.await.expect("client").status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_to_continue_is_refused_before_it_uploads() {
    let s = start(&[
        ("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "1"),
        ("DAPI_LIMITS__BODY_TIMEOUT_MS", "60000"),
        ("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "60000"),
    ])
    .await;
    let held = hold_permits(s.addr, 1).await;
    let addr = s.addr;
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let head = "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\nExpect: 100-continue\r\n\r\n";
        stream.write_all(head.as_bytes()).expect("head");
        // No body: the answer must come without one, and without `100 Continue`.
        read_answer(&mut stream).expect("an answer")
    });
    let reply = answer.await.expect("client");
    assert_eq!(reply.status, 503);
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_upload_is_counted_as_gone() {
    use tokio::io::AsyncWriteExt;
    let s = start(&[]).await;
    let body = serde_json::to_vec(&example_request()).expect("body");
    let mut gone = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    let head = format!(
        "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    gone.write_all(head.as_bytes()).await.expect("head");
    gone.write_all(&body[..body.len() / 2]).await.expect("half");
    drop(gone);
    let counted = metric_reaching(s.addr, "dapi_http_requests_total{endpoint=\"/allocate\",status=\"499\"}", 1.0).await;
    assert_eq!(counted, Some(1.0), "counted as the client going away");
    assert_eq!(metric(s.addr, "dapi_http_requests_total{endpoint=\"/allocate\",status=\"400\"}").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_give_their_permits_back_after_the_upload_deadline() {
    use tokio::io::AsyncReadExt;
    let s = start(&[("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "2"), ("DAPI_LIMITS__BODY_TIMEOUT_MS", "500")]).await;
    let started = Instant::now();
    let mut held = hold_permits(s.addr, 2).await;

    // Health checks do not wait behind them.
    let ping = tokio::time::timeout(Duration::from_secs(5), send(s.addr, "GET", "/ping", &[], b"")).await;
    assert_eq!(ping.map(|r| r.status).ok(), Some(200));

    // A normal allocation gets in once the stalled bodies are given up (the request
    // timeout, 30 s, is not waited for).
    let mut status = 0;
    while started.elapsed() < Duration::from_secs(20) {
        status = common::post_json(s.addr, "/allocate", &example_request()).await.status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200);
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());

    // The stalled clients were told, and their connections closed.
    for stalled in &mut held {
        let mut raw = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut raw)).await;
        assert!(read.is_ok(), "closed");
        let reply = common::parse_reply(&raw);
        assert_eq!(reply.status, 408);
        assert_eq!(reply.json()["code"], "RequestTimeout");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_at_a_fair_rate_may_take_longer_than_the_body_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = start(&[("DAPI_LIMITS__BODY_TIMEOUT_MS", "300"), ("DAPI_LIMITS__MIN_BODY_BYTES_PER_SEC", "1000")]).await;
    let body = serde_json::to_vec(&example_request()).expect("body");
    let mut stream = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    let head = format!(
        "POST /allocate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    // About 16 KB over a second or more: far above 1000 bytes/s, far beyond 300 ms.
    for chunk in body.chunks(body.len() / 8 + 1) {
        stream.write_all(chunk).await.expect("chunk");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("answer");
    assert_eq!(common::parse_reply(&raw).status, 200);
}

/// Whether the server closed `stream` (end of file or reset) within `within`.
fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let _ = stream.set_read_timeout(Some(within));
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_do_not_finish_their_headers_are_closed() {
    let s = start(&[("DAPI_LIMITS__HEADER_TIMEOUT_MS", "300")]).await;
    let addr = s.addr;
    let closed = tokio::task::spawn_blocking(move || {
        let mut silent = TcpStream::connect(addr).expect("connect");
        let mut partial = TcpStream::connect(addr).expect("connect");
        partial.write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n").expect("part of a head");
        let started = Instant::now();
        let both =
            closed_within(&mut silent, Duration::from_secs(10)) && closed_within(&mut partial, Duration::from_secs(10));
        (both, started.elapsed())
    });
    let (both, took) = closed.await.expect("client");
    assert!(both, "both closed");
    assert!(took < Duration::from_secs(10), "{took:?}");

    // On a kept-alive connection, the next request's head has the same time.
    let next = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let first = get_on(&mut stream, "/ping").map(|r| r.status).ok();
        stream.write_all(b"GET /ping HTTP/1.1\r\n").expect("part of the next head");
        (first, closed_within(&mut stream, Duration::from_secs(10)))
    });
    assert_eq!(next.await.expect("client"), (Some(200), true));
    let closed = metric_reaching(s.addr, "dapi_http_connections_closed_total{reason=\"header_timeout\"}", 3.0).await;
    assert!(closed >= Some(3.0), "{closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_kept_alive_connections_are_closed() {
    let s = start(&[("DAPI_LIMITS__IDLE_TIMEOUT_MS", "300")]).await;
    let addr = s.addr;
    let closed = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let first = get_on(&mut stream, "/ping").map(|r| r.status).ok();
        (first, closed_within(&mut stream, Duration::from_secs(10)))
    });
    assert_eq!(closed.await.expect("client"), (Some(200), true));
    assert_eq!(metric_reaching(s.addr, "dapi_http_connections_closed_total{reason=\"idle\"}", 1.0).await, Some(1.0));
}

/// Answers on a connection that stays open say how long it may lie idle (`Keep-Alive:
/// timeout=N`, whole seconds); answers on one that closes do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_alive_answers_announce_the_idle_timeout() {
    let s = start(&[("DAPI_LIMITS__IDLE_TIMEOUT_MS", "2500")]).await;
    let addr = s.addr;
    let hints = tokio::task::spawn_blocking(move || {
        let hint = |head: &str| {
            let mut stream = TcpStream::connect(addr).expect("connect");
            write!(stream, "GET /ping {head}\r\n\r\n").expect("request");
            let reply = read_answer(&mut stream).expect("answer");
            assert_eq!(reply.status, 200, "{head}");
            reply.header("keep-alive").map(str::to_string)
        };
        [
            hint("HTTP/1.1\r\nHost: x"),
            hint("HTTP/1.1\r\nHost: x\r\nConnection: close"),
            hint("HTTP/1.0"),
            hint("HTTP/1.0\r\nConnection: keep-alive"),
        ]
    });
    let expected = [Some("timeout=2"), None, None, Some("timeout=2")].map(|h| h.map(str::to_string));
    assert_eq!(hints.await.expect("client"), expected);
}

/// Node's agent reads the hint and retires a pooled connection a second before the service
/// would close it; without it, an agent whose own timeout is as long as the service's sent
/// its next request on a connection being closed at that moment (a reset). Here the agent's
/// timeout is 10 s and the service's 2 s: the pooled socket is set to time out after 1 s, and
/// a request 1.3 s later goes out on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_retires_a_pooled_connection_before_the_service_closes_it() {
    // Node is not needed by the rest of the tests: where it is missing, say so.
    if std::process::Command::new("node").arg("--version").output().is_err() {
        eprintln!("node is not installed: Node's agent was not tried");
        return;
    }
    let s = start(&[("DAPI_LIMITS__IDLE_TIMEOUT_MS", "2000")]).await;
    let url = format!("http://{}/ping", s.addr);
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node").args(["-e", NODE_AGENT, &url]).output().expect("node runs")
    });
    let out = out.await.expect("node");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).expect("node's JSON");
    assert_eq!(seen, serde_json::json!({"hint": "timeout=2", "timeout": 1000, "reused": false}));
}

const NODE_AGENT: &str = r#"
const http = require('http');
const url = process.argv[process.argv.length - 1];
const agent = new http.Agent({keepAlive: true, timeout: 10000});
const get = (then) => {
  const req = http.get(url, {agent}, (res) => res.resume().on('end', () => then(res, req)));
  req.on('error', (e) => { console.error(e); process.exit(1); });
};
get((res) => setTimeout(() => {
  const pooled = Object.values(agent.freeSockets).flat();
  const timeout = pooled.length === 1 ? pooled[0].timeout : `${pooled.length} pooled`;
  setTimeout(() => get((_, req) => {
    console.log(JSON.stringify({hint: res.headers['keep-alive'], timeout, reused: req.reusedSocket}));
    process.exit(0);
  }), 1300);
}, 50));
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_new_connections_wait_and_the_others_carry_on() {
    let s = start(&[("DAPI_LIMITS__MAX_CONNECTIONS", "4"), ("DAPI_LIMITS__HEALTH_CONNECTIONS", "0")]).await;
    let addr = s.addr;
    let mut open: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(addr).expect("connect");
        assert_eq!(get_on(&mut stream, "/ping").map(|r| r.status).ok(), Some(200));
        open.push(stream);
    }
    // A fifth connects (the kernel queues it) but is not accepted while four are open.
    let mut fifth = TcpStream::connect(addr).expect("connect");
    write!(fifth, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n").expect("request");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(s.app.connections(), (4, 4), "(open, accepted)");
    // Those in progress are unharmed.
    for stream in &mut open {
        assert_eq!(get_on(stream, "/ping").map(|r| r.status).ok(), Some(200));
    }
    // One closes: the fifth gets in and is answered.
    drop(open.pop());
    let answered = tokio::task::spawn_blocking(move || read_answer(&mut fifth).map(|r| r.status).ok());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), answered).await.ok().and_then(Result::ok),
        Some(Some(200))
    );
    for stream in &mut open {
        assert_eq!(get_on(stream, "/ping").map(|r| r.status).ok(), Some(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_get_in_past_the_connection_cap() {
    let s = start(&[("DAPI_LIMITS__MAX_CONNECTIONS", "2"), ("DAPI_LIMITS__HEALTH_CONNECTIONS", "1")]).await;
    let addr = s.addr;
    let mut open: Vec<TcpStream> = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addr).expect("connect");
        assert_eq!(get_on(&mut stream, "/ping").map(|r| r.status).ok(), Some(200));
        open.push(stream);
    }
    let health = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        let ping = get_on(&mut stream, "/ping").map(|r| (r.status, r.header("connection").map(str::to_string))).ok();
        // One request per reserve connection.
        let closed = closed_within(&mut stream, Duration::from_secs(10));
        let body = serde_json::to_vec(&example_request()).expect("body");
        let (refused, _) = upload_then_read(addr, "/allocate", "", &body);
        (ping, closed, refused.status, refused.header("connection").map(str::to_string))
    });
    let (ping, closed, refused, connection) = health.await.expect("client");
    assert_eq!(ping.map(|p| p.0), Some(200));
    assert!(closed);
    assert_eq!(refused, 503);
    assert_eq!(connection.as_deref(), Some("close"));
    for stream in &mut open {
        assert_eq!(get_on(stream, "/ping").map(|r| r.status).ok(), Some(200));
    }
}
