//! Big answers (megabytes of steps) are sent while they are written: the bytes must be
//! exactly those of a small answer written whole.

mod common;

use common::{example_datacenter, send, start};
use dapi::engine::StepsFormat;
use serde_json::{json, Value};

/// The example request with its servers repeated `copies` times under new uuids.
fn datacenter(copies: usize) -> Value {
    example_datacenter(copies, 11)
}

/// What the engine answers, written whole.
fn expected(body: &[u8], format: StepsFormat) -> Vec<u8> {
    let config = dapi::config::ServiceConfig::load(None, Vec::new()).expect("default config");
    let engine = config.engine().expect("engine");
    let mut request = dapi::wire::parse_allocate_body(body).unwrap_or_else(|_| panic!("the body parses"));
    dapi::validate::validate_allocate(&mut request).expect("valid");
    let allocation = engine.allocate(&request).expect("allocation");
    allocation.answer_json(&request, format).expect("answer")
}

async fn post(addr: std::net::SocketAddr, body: &[u8]) -> common::Reply {
    send(addr, "POST", "/allocate", &[("Content-Type", "application/json")], body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_answer_is_streamed_byte_for_byte() {
    let s = start(&[]).await;
    let body = serde_json::to_vec(&datacenter(500)).expect("body");
    let reply = post(s.addr, &body).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("transfer-encoding"), Some("chunked"), "a big answer is sent in parts");
    let want = expected(&body, StepsFormat::Full);
    assert!(want.len() > 1 << 20, "the answer is big: {} bytes", want.len());
    assert!(reply.body == want, "streamed answer differs from the whole one");

    // A small one keeps its Content-Length.
    let small = serde_json::to_vec(&datacenter(1)).expect("body");
    let reply = post(s.addr, &small).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-length"), Some(expected(&small, StepsFormat::Full).len().to_string().as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_409_is_streamed_too() {
    let s = start(&[]).await;
    let mut req = datacenter(500);
    req["vm"]["internal_metadata"] = json!({"force_designation_failure": true});
    let reply = post(s.addr, &serde_json::to_vec(&req).expect("body")).await;
    assert_eq!(reply.status, 409);
    let answer = reply.json();
    assert_eq!(answer["code"], "NoAllocatableServersError");
    let steps = answer["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["remaining"].as_array().map(Vec::len), Some(2000));
    assert_eq!(steps.last().map(|s| s["step"].clone()), Some(json!("Forced failure")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_body_is_read_as_it_arrives_with_the_same_answers() {
    let s = start(&[]).await;
    let req = datacenter(500);
    let body = serde_json::to_vec(&req).expect("body");
    assert!(body.len() > 1 << 20, "big enough to be read while it arrives");

    // The members in another order: read whole, same answer.
    let mut reordered = serde_json::Map::new();
    for key in ["vm", "image", "package", "tickets", "seed", "servers"] {
        if let Some(v) = req.get(key) {
            reordered.insert(key.into(), v.clone());
        }
    }
    let reordered = serde_json::to_vec(&reordered).expect("body");
    let reply = post(s.addr, &reordered).await;
    assert_eq!(reply.status, 200);
    assert!(reply.body == expected(&reordered, StepsFormat::Full));

    // Broken JSON at the very end, and a server the schema refuses: the same errors as
    // for a body read whole.
    let mut broken = body.clone();
    broken.pop();
    let reply = post(s.addr, &broken).await;
    assert_eq!(reply.status, 400);
    let Err(dapi::model::BodyError::Malformed(message)) = dapi::wire::parse_allocate_body(&broken) else {
        panic!("a body cut short is malformed")
    };
    assert_eq!(reply.json()["message"], json!(message));

    let mut bad = req.clone();
    bad["servers"][1500] = json!(7);
    let reply = post(s.addr, &serde_json::to_vec(&bad).expect("body")).await;
    assert_eq!(reply.status, 422);
    assert_eq!(reply.json()["errors"][0]["field"], "servers[1500]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_capacity_body_is_read_as_it_arrives_with_the_same_answers() {
    let s = start(&[]).await;
    let req = datacenter(500);
    let config = dapi::config::ServiceConfig::load(None, Vec::new()).expect("default config");
    let engine = config.engine().expect("engine");
    let capacity = |body: &[u8]| dapi::answer::capacity(&engine, &config.limits, body, false);
    // `{"servers": [...], ...}` (read while it arrives) and the bare array (read whole).
    let bare = serde_json::to_vec(&req["servers"]).expect("body");
    for body in [serde_json::to_vec(&req).expect("body"), bare] {
        assert!(body.len() > 1 << 20, "big enough to be read while it arrives");
        let reply = send(s.addr, "POST", "/capacity", &[("Content-Type", "application/json")], &body).await;
        assert_eq!(reply.status, 200);
        assert!(reply.body == capacity(&body).expect("a capacity answer").body, "the answers differ");
    }
    // A server the schema refuses, and a body cut short: the errors of a body read whole.
    let mut bad = req.clone();
    bad["servers"][1500] = json!(7);
    let reply = send(
        s.addr,
        "POST",
        "/capacity",
        &[("Content-Type", "application/json")],
        &serde_json::to_vec(&bad).expect("body"),
    )
    .await;
    assert_eq!(reply.status, 422);
    assert_eq!(reply.json()["errors"][0]["field"], "servers[1500]");
    let mut broken = serde_json::to_vec(&req).expect("body");
    broken.pop();
    let reply = send(s.addr, "POST", "/capacity", &[("Content-Type", "application/json")], &broken).await;
    assert_eq!(reply.status, 400);
    let Err(dapi::model::BodyError::Malformed(message)) = dapi::wire::parse_capacity_request(&broken) else {
        panic!("a body cut short is malformed")
    };
    assert_eq!(reply.json()["message"], json!(message));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_big_body_that_stops_arriving_is_given_up_and_frees_its_permit() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s =
        start(&[("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "1"), ("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "500")]).await;
    let body = serde_json::to_vec(&datacenter(500)).expect("body");
    let head = format!(
        "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );

    // Half a body, then silence: the request times out with 503.
    let mut stalled = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    stalled.write_all(head.as_bytes()).await.expect("head");
    stalled.write_all(&body[..body.len() / 2]).await.expect("half");
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), stalled.read(&mut answer))
        .await
        .expect("an answer within the timeout")
        .expect("read");
    assert!(
        String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&answer[..n])
    );

    // Its reader gives the permit back as soon as it notices the body will not come.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    // Half a body, then a hang-up.
    let mut gone = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    gone.write_all(head.as_bytes()).await.expect("head");
    gone.write_all(&body[..body.len() / 3]).await.expect("a third");
    drop(gone);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    // The one permit came back both times.
    let reply = post(s.addr, &body).await;
    assert_eq!(reply.status, 200);
}
