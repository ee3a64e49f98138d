//! Content encodings end to end: gzip request bodies (decompressed as they arrive, the size
//! limit on the decompressed bytes), compressed answers (gzip, zstd) for clients that ask,
//! 415 for any other encoding; and the same with real clients (curl, Python's urllib,
//! Node's http).

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{example_datacenter, send, start};
use serde_json::Value;

const JSON: (&str, &str) = ("Content-Type", "application/json");

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).expect("gzip");
    enc.finish().expect("gzip")
}

fn gunzip(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out).expect("a gzip answer");
    out
}

/// The example request at `copies` times its size, as bytes.
fn request(copies: usize) -> Vec<u8> {
    serde_json::to_vec(&example_datacenter(copies, 5)).expect("body")
}

async fn post(addr: SocketAddr, headers: &[(&str, &str)], body: &[u8]) -> common::Reply {
    let mut all = vec![JSON];
    all.extend_from_slice(headers);
    send(addr, "POST", "/allocate", &all, body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_body_is_answered_as_the_plain_one() {
    let s = start(&[]).await;
    for copies in [1, 300] {
        let body = request(copies);
        let plain = post(s.addr, &[], &body).await;
        assert_eq!(plain.status, 200);
        let zipped = post(s.addr, &[("Content-Encoding", "gzip")], &gzip(&body)).await;
        assert_eq!(zipped.status, 200, "{}", String::from_utf8_lossy(&zipped.body));
        assert!(zipped.body == plain.body, "{copies} copies: the gzip body's answer differs");
    }
    // `x-gzip` and an explicit `identity` too.
    let body = request(1);
    assert_eq!(post(s.addr, &[("Content-Encoding", "x-gzip")], &gzip(&body)).await.status, 200);
    assert_eq!(post(s.addr, &[("Content-Encoding", "identity")], &body).await.status, 200);
    let capacity = send(s.addr, "POST", "/capacity", &[JSON, ("Content-Encoding", "gzip")], &gzip(&body)).await;
    assert_eq!(capacity.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_encodings_are_a_415_naming_the_encoding() {
    let s = start(&[]).await;
    let body = request(1);
    for encoding in ["br", "deflate", "zstd", "compress", "gzip, gzip", "gzip, br"] {
        let r = post(s.addr, &[("Content-Encoding", encoding)], &gzip(&body)).await;
        assert_eq!(r.status, 415, "{encoding}");
        let answer = r.json();
        assert_eq!(answer["code"], "UnsupportedMediaType");
        assert!(answer["message"].as_str().is_some_and(|m| m.contains(encoding)), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_gzip_body_is_a_400() {
    let s = start(&[]).await;
    let zipped = gzip(&request(1));
    for broken in [&zipped[..zipped.len() / 2], &b"{\"servers\": []}"[..]] {
        let r = post(s.addr, &[("Content-Encoding", "gzip")], broken).await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["code"], "InvalidJson");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_limit_applies_to_the_decompressed_body() {
    let body = request(20);
    let s = start(&[("DAPI_LIMITS__MAX_BODY_BYTES", &(body.len() - 1).to_string())]).await;
    let zipped = gzip(&body);
    assert!(zipped.len() < body.len() / 4);
    let r = post(s.addr, &[("Content-Encoding", "gzip")], &zipped).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["code"], "PayloadTooLarge");
}

/// A small compressed body that inflates to far more than the limit is refused at the
/// limit: the service never holds more than the limit of it.
#[test]
fn a_gzip_bomb_is_a_413_without_holding_the_inflated_body() {
    let limit = 8 << 20;
    let inflated: u64 = 1 << 30;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![b' '; 1 << 20];
    for _ in 0..(inflated >> 20) {
        enc.write_all(&zeros).expect("gzip");
    }
    let bomb = enc.finish().expect("gzip");
    assert!(bomb.len() < 2 << 20, "the bomb is small: {} bytes", bomb.len());

    let port = common::unclaimed_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_dapi"))
        .arg("serve")
        .env("DAPI_LISTEN", format!("127.0.0.1:{port}"))
        .env("DAPI_LIMITS__MAX_BODY_BYTES", limit.to_string())
        .env("DAPI_LOG_LEVEL", "warn")
        .env_remove("DAPI_CONFIG")
        .stdout(Stdio::null())
        .spawn()
        .expect("dapi starts");
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut up = false;
    for _ in 0..200 {
        if std::net::TcpStream::connect(addr).is_ok() {
            up = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(up, "dapi serve listens");
    let r = runtime.block_on(post(addr, &[("Content-Encoding", "gzip")], &bomb));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["code"], "PayloadTooLarge");
    let peak_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("the server's peak RSS");
    // Its idle RSS is a few MiB; the limit is 8 MiB; the bomb inflates to 1 GiB.
    assert!(peak_kib < 64 * 1024, "peak RSS {peak_kib} KiB while refusing a bomb");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_compressed_for_clients_that_ask() {
    let s = start(&[]).await;
    for copies in [1, 300] {
        let body = request(copies);
        let plain = post(s.addr, &[], &body).await;
        assert_eq!(plain.header("content-encoding"), None, "not compressed unless asked");

        let zipped = post(s.addr, &[("Accept-Encoding", "gzip")], &body).await;
        assert_eq!(zipped.status, 200);
        assert_eq!(zipped.header("content-encoding"), Some("gzip"));
        assert_eq!(zipped.header("vary"), Some("accept-encoding"));
        assert!(zipped.body.len() < plain.body.len() / 3, "{} of {}", zipped.body.len(), plain.body.len());
        assert!(gunzip(&zipped.body) == plain.body, "{copies} copies: the gzip answer differs");

        let z = post(s.addr, &[("Accept-Encoding", "zstd")], &body).await;
        assert_eq!(z.header("content-encoding"), Some("zstd"));
        let unz = zstd::stream::decode_all(&z.body[..]).expect("a zstd answer");
        assert!(unz == plain.body, "{copies} copies: the zstd answer differs");
    }
    // Errors too, and in both directions at once.
    let r = post(s.addr, &[("Accept-Encoding", "gzip"), ("Content-Encoding", "br")], b"{}").await;
    assert_eq!(r.status, 415);
    let error: Value = serde_json::from_slice(&gunzip(&r.body)).expect("a JSON error");
    assert_eq!(error["code"], "UnsupportedMediaType");
    let body = request(1);
    let both = post(s.addr, &[("Accept-Encoding", "gzip"), ("Content-Encoding", "gzip")], &gzip(&body)).await;
    assert_eq!(both.status, 200);
    assert_eq!(serde_json::from_slice::<Value>(&gunzip(&both.body)).ok().map(|v| v["server"].is_object()), Some(true));
}

/// Runs `program` with `args`, the request body on its standard input; its standard output.
fn run(program: &str, args: &[&str], input: &[u8]) -> Vec<u8> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).expect("write the body");
    }
    let out = child.wait_with_output().expect("its output");
    assert!(out.status.success(), "{program} {args:?} failed: {}", String::from_utf8_lossy(&out.stdout));
    out.stdout
}

const PYTHON: &str = r#"
import gzip, json, sys, urllib.request
url, body = sys.argv[1], sys.stdin.buffer.read()
req = urllib.request.Request(url, data=gzip.compress(body), method="POST", headers={
    "Content-Type": "application/json", "Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
with urllib.request.urlopen(req) as r:
    assert r.headers["Content-Encoding"] == "gzip", r.headers
    sys.stdout.buffer.write(gzip.decompress(r.read()))
"#;

const NODE: &str = r#"
const http = require('http'), zlib = require('zlib');
const chunks = [];
process.stdin.on('data', (c) => chunks.push(c)).on('end', () => {
  const body = zlib.gzipSync(Buffer.concat(chunks));
  const req = http.request(process.argv[process.argv.length - 1], {method: 'POST', agent: new http.Agent({keepAlive: true}), headers: {
    'Content-Type': 'application/json', 'Content-Encoding': 'gzip', 'Content-Length': body.length,
    'Accept-Encoding': 'gzip'}}, (res) => {
    const parts = [];
    res.on('data', (c) => parts.push(c)).on('end', () => {
      if (res.statusCode !== 200 || res.headers['content-encoding'] !== 'gzip') {
        console.error(res.statusCode, res.headers); process.exit(1);
      }
      // Exiting at once would cut a big write to a pipe short.
      process.stdout.write(zlib.gunzipSync(Buffer.concat(parts)), () => process.exit(0));
    });
  });
  req.on('error', (e) => { console.error(e); process.exit(1); });
  req.end(body);
});
"#;

/// curl (`--compressed`), Python's urllib and Node's http send gzip bodies and read
/// compressed answers: each gets the answer a plain request gets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_send_and_read_gzip() {
    let s = start(&[]).await;
    let url = format!("http://{}/allocate", s.addr);
    for copies in [1, 300] {
        let body = request(copies);
        let plain = post(s.addr, &[], &body).await.body;
        let zipped = gzip(&body);

        let (url2, zipped2) = (url.clone(), zipped.clone());
        let curl = tokio::task::spawn_blocking(move || {
            let args = [
                "-sS",
                "--fail",
                "--compressed",
                "-H",
                "Content-Type: application/json",
                "-H",
                "Content-Encoding: gzip",
                "--data-binary",
                "@-",
                &url2,
            ];
            run("curl", &args, &zipped2)
        });
        assert!(curl.await.ok().as_ref() == Some(&plain), "curl, {copies} copies");

        let (url2, body2) = (url.clone(), body.clone());
        let python = tokio::task::spawn_blocking(move || run("python3", &["-c", PYTHON, &url2], &body2));
        assert!(python.await.ok().as_ref() == Some(&plain), "urllib, {copies} copies");

        // Node is not needed by the rest of the tests: where it is missing, say so.
        if Command::new("node").arg("--version").output().is_err() {
            eprintln!("node is not installed: the Node http client was not tried");
            continue;
        }
        let (url2, body2) = (url.clone(), body.clone());
        let node = tokio::task::spawn_blocking(move || run("node", &["-e", NODE, &url2], &body2));
        assert!(node.await.ok().as_ref() == Some(&plain), "node http, {copies} copies");
    }
}
