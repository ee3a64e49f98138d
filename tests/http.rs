//! End-to-end tests of the HTTP service: the real server on a loopback port, every endpoint
//! and every status it answers.

mod common;

use std::path::Path;

use common::{example_request, post_json, send, start};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_reports_version_and_config() {
    let s = start(&[]).await;
    let r = send(s.addr, "GET", "/ping", &[], b"").await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!(body["status"], "OK");
    assert_eq!(body["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(body["config"].as_str().map(str::len), Some(16));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocate_chooses_a_server_and_lists_the_steps() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["seed"] = json!(7);
    let r = post_json(s.addr, "/allocate", &req).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let body = r.json();
    let server = &body["server"];
    assert!(server["uuid"].is_string());
    assert!(server.get("vms").is_none(), "the chosen server is returned without vms");
    for key in ["score", "unreserved_cpu", "unreserved_ram", "unreserved_disk"] {
        assert!(server.get(key).is_some(), "{key} is set on the chosen server");
    }
    let steps = body["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["step"], "Received by DAPI");
    assert_eq!(steps[0]["remaining"].as_array().map(Vec::len), req["servers"].as_array().map(Vec::len));
    // The same request and seed give the same answer.
    let again = post_json(s.addr, "/allocate", &req).await.json();
    assert_eq!(again["server"]["uuid"], server["uuid"]);
    // The NIC tag filter ran: the original wrote each NIC's name into it, and so the
    // chosen server's NICs carry `interface`.
    let nics = server["sysinfo"]["Network Interfaces"].as_object().expect("NICs");
    assert!(!nics.is_empty());
    for (name, nic) in nics {
        assert_eq!(nic["interface"], json!(name), "{nic}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn affinity_regexes_are_read_in_xregexps_dialect() {
    let s = start(&[]).await;
    let (owner, vm) = ("a3e2889c-795e-446b-9bd5-f6d2f09529af", "5cde1411-da97-45b4-b542-e61d30792ccd");
    let patterns = [
        r"/^\p{L}+-(?=\d)\d$/",
        r"/^(\w)\pL\1-\d$/",
        r"/^(?<first>w)\P{N}\k<first>/",
        r"/(?n)^(w)\p{InLatin_1_Supplement}w-1$/",
        r"/(?<=\p{Latin})w-1$/",
        r"/(?x) ^ w # a comment
            \p{Ll}{2} - 1 $/",
    ];
    for pattern in patterns {
        let mut req = example_request();
        req["vm"]["owner_uuid"] = json!(owner);
        req["servers"][0]["vms"][vm]["alias"] = json!("wéw-1");
        req["vm"]["affinity"] =
            json!([{"key": "instance", "operator": "!=", "value": pattern, "valueType": "re", "isSoft": false}]);
        let r = post_json(s.addr, "/allocate", &req).await;
        assert!(r.status == 200 || r.status == 409, "{pattern}: {}", String::from_utf8_lossy(&r.body));
        let body = r.json();
        let excluded = body["steps"].as_array().expect("steps").iter().any(|st| {
            st["reasons"][req["servers"][0]["uuid"].as_str().unwrap_or_default()]
                == json!(format!("exclude: inst!={vm}"))
        });
        assert!(excluded, "{pattern} did not name the VM: {}", String::from_utf8_lossy(&r.body));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_fitting_server_is_a_409_with_cnapis_reason_and_the_steps() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["vm"]["internal_metadata"] = json!({"force_designation_failure": true});
    let r = post_json(s.addr, "/allocate", &req).await;
    assert_eq!(r.status, 409);
    let body = r.json();
    assert_eq!(body["code"], "NoAllocatableServersError");
    assert_eq!(body["message"], "No compute resources available: forced failure");
    let steps = body["steps"].as_array().expect("steps");
    assert_eq!(steps.last().map(|s| s["step"].clone()), Some(json!("Forced failure")));

    // Every server filtered out by the first step.
    req["vm"]["internal_metadata"] = json!({});
    for server in req["servers"].as_array_mut().expect("servers") {
        server["setup"] = json!(false);
    }
    let body = post_json(s.addr, "/allocate", &req).await.json();
    assert_eq!(body["message"], "No compute resources available: no servers which have been setup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_parameters_are_a_422_naming_the_field() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["vm"]["ram"] = json!("lots");
    let r = post_json(s.addr, "/allocate", &req).await;
    assert_eq!(r.status, 422);
    let body = r.json();
    assert_eq!(body["code"], "InvalidParameters");
    assert_eq!(body["message"], "Request parameters failed validation");
    assert_eq!(body["errors"], json!([{"field": "vm", "code": "Invalid", "message": "VM \"ram\" is not a number"}]));

    let r = post_json(s.addr, "/allocate", &json!({"servers": [], "vm": null})).await;
    assert_eq!(r.status, 422);
    let fields: Vec<_> = r.json()["errors"].as_array().expect("errors").iter().map(|e| e["field"].clone()).collect();
    assert_eq!(fields, [json!("image"), json!("vm")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_and_wrong_content_types() {
    let s = start(&[]).await;
    let r = send(s.addr, "POST", "/allocate", &[("Content-Type", "application/json")], b"{\"servers\": [").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["code"], "InvalidJson");
    let r = send(s.addr, "POST", "/allocate", &[("Content-Type", "text/plain")], b"{}").await;
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["code"], "UnsupportedMediaType");
}

/// Bytes past 127 anywhere in a body that is read whole: text that is not UTF-8 is a 400
/// wherever it lies (the ASCII seen while copying spares only bodies that are all ASCII
/// their UTF-8 check), and UTF-8 text past ASCII is read as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_ascii_are_checked_as_utf8() {
    let s = start(&[]).await;
    let example = serde_json::to_vec(&example_request()).expect("JSON");
    let hostname = b"\"hostname\":\"";
    let at = example.windows(hostname.len()).position(|w| w == hostname).expect("a hostname") + hostname.len();
    // `/capacity` reads the same body (its `vm`, `image` and `package` unused).
    for path in ["/allocate", "/capacity"] {
        for (inserted, status) in [(&b"\xff"[..], 400), (b"\xc3\xa9", 200), (b"\xe2\x82", 400)] {
            let mut body = example.clone();
            body.splice(at..at, inserted.iter().copied());
            let r = send(s.addr, "POST", path, &[("Content-Type", "application/json")], &body).await;
            assert_eq!(r.status, status, "{path} {inserted:?}: {}", String::from_utf8_lossy(&r.body));
            if status == 400 {
                assert_eq!(r.json()["code"], "InvalidJson");
                assert!(r.json()["message"].as_str().is_some_and(|m| m.contains("unicode")), "{}", r.json());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_limit_are_a_413() {
    let s = start(&[("DAPI_LIMITS__MAX_BODY_BYTES", "1000")]).await;
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["code"], "PayloadTooLarge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_servers_is_a_422() {
    let s = start(&[("DAPI_LIMITS__MAX_SERVERS", "2")]).await;
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["field"], "servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods() {
    let s = start(&[]).await;
    let r = send(s.addr, "GET", "/nowhere", &[], b"").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], "ResourceNotFound");
    let r = send(s.addr, "GET", "/allocate", &[], b"").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.json()["code"], "MethodNotAllowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_reports_spare_resources_and_reasons() {
    let s = start(&[]).await;
    let mut servers = example_request()["servers"].clone();
    servers[0]["status"] = json!("unknown");
    let r = post_json(s.addr, "/capacity", &json!({ "servers": servers })).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let body = r.json();
    let caps = body["capacities"].as_object().expect("capacities");
    assert_eq!(caps.len(), servers.as_array().map_or(0, |a| a.len() - 1));
    let first = caps.values().next().expect("a capacity");
    for key in ["cpu", "ram", "disk"] {
        assert!(first[key].is_i64(), "{key} is an integer");
    }
    let down = servers[0]["uuid"].as_str().expect("uuid");
    assert_eq!(body["reasons"][down], "Server has status: unknown");

    // A bare array works too; a non-array is named.
    assert_eq!(post_json(s.addr, "/capacity", &servers).await.status, 200);
    let r = post_json(s.addr, "/capacity", &json!({"servers": 5})).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["field"], "servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_are_echoed_or_made() {
    let s = start(&[]).await;
    let r = send(s.addr, "GET", "/ping", &[("X-Request-Id", "abc-123")], b"").await;
    assert_eq!(r.header("x-request-id"), Some("abc-123"));
    let r = send(s.addr, "GET", "/ping", &[], b"").await;
    assert_eq!(r.header("x-request-id").map(str::len), Some(36));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_and_plugins() {
    let s = start(&[]).await;
    post_json(s.addr, "/allocate", &example_request()).await;
    let r = send(s.addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(r.status, 200);
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("dapi_http_requests_total{endpoint=\"/allocate\",status=\"200\"} 1"), "{text}");
    assert!(text.contains("dapi_http_request_duration_seconds_count{endpoint=\"/allocate\"} 1"));
    assert!(text.contains("dapi_plugin_servers_removed_total{plugin=\"hard-filter-setup\"}"));
    // Latency buckets reach the request timeout (30 s by default).
    assert!(text.contains("dapi_http_request_duration_seconds_bucket{endpoint=\"/allocate\",le=\"30\"} 1"), "{text}");
    let value = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok()).unwrap_or(-1.0)
    };
    // This scrape is the one request in flight; no allocation holds a permit.
    assert_eq!(value("dapi_http_requests_in_flight"), 1.0, "{text}");
    assert_eq!(value("dapi_allocation_permits_in_use"), 0.0);
    assert!(value("dapi_allocation_permits") >= 4.0, "twice the cores, at least 4");
    // The process: resident memory, descriptors, CPU time.
    assert!(value("process_resident_memory_bytes") > 1e6, "{text}");
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_cpu_seconds_total") >= 0.0);
    let build = text.lines().find(|l| l.starts_with("dapi_build_info{")).unwrap_or_default();
    assert!(build.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION"))) && build.ends_with(" 1"), "{build}");
    assert!(build.contains("git_commit=\""), "{build}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_allocations_time_out_with_a_503_and_retry_after() {
    let s = start(&[("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "1")]).await;
    let mut req = example_request();
    let one = req["servers"][0].clone();
    let mut many = Vec::new();
    for i in 0..3000 {
        let mut server = one.clone();
        server["uuid"] = json!(format!("00000000-0000-0000-0000-{i:012}"));
        many.push(server);
    }
    req["servers"] = json!(many);
    let r = post_json(s.addr, "/allocate", &req).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["code"], "ServiceUnavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_and_matches_the_checked_in_one() {
    let s = start(&[]).await;
    let r = send(s.addr, "GET", "/openapi.json", &[], b"").await;
    assert_eq!(r.status, 200);
    let served = String::from_utf8_lossy(&r.body).into_owned();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        served == checked_in,
        "openapi/openapi.json is out of date: regenerate it with `cargo run --release -- openapi > openapi/openapi.json`"
    );
    let doc = r.json();
    for path in ["/allocate", "/capacity", "/ping", "/metrics", "/openapi.json"] {
        assert!(doc["paths"].get(path).is_some(), "{path} is documented");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_swaps_in_a_valid_config_and_keeps_the_old_one_otherwise() {
    let dir = std::env::temp_dir().join(format!("dapi-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("config.json");
    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "identity"]}"#).expect("write");
    let s = common::start_with(Some(&path), &[]).await;
    let before = send(s.addr, "GET", "/ping", &[], b"").await.json()["config"].clone();

    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "no-such-plugin"]}"#).expect("write");
    let err = s.app.reload().expect_err("invalid config refused").to_string();
    assert!(err.contains("Unrecognized algorithm: no-such-plugin"), "{err}");
    assert_eq!(send(s.addr, "GET", "/ping", &[], b"").await.json()["config"], before);

    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "hard-filter-setup"]}"#).expect("write");
    s.app.reload().expect("valid config accepted");
    assert_ne!(send(s.addr, "GET", "/ping", &[], b"").await.json()["config"], before);
    let body = post_json(s.addr, "/allocate", &example_request()).await.json();
    assert_eq!(body["steps"][1]["step"], "Servers which have been setup");

    // Settings the process took at start-up are named, not silently dropped.
    let answer = send(s.addr, "POST", "/admin/reload", &[], b"").await;
    assert_eq!(answer.json()["restart_needed"], serde_json::json!([]));
    std::fs::write(
        &path,
        r#"{"allocationDescription": ["pipe", "hard-filter-setup"], "listen": "127.0.0.1:1", "limits": {"worker_threads": 7, "max_body_bytes": 2000000}}"#,
    )
    .expect("write");
    let answer = send(s.addr, "POST", "/admin/reload", &[], b"").await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.json()["restart_needed"], serde_json::json!(["listen", "limits.worker_threads"]));
    assert_eq!(s.app.limits().max_body_bytes, 2_000_000, "a limit read per request applies at once");
    // Still differing from what the process runs with: named again by the next reload.
    let (_, again) = s.app.reload().expect("the same file again");
    assert_eq!(again, ["listen", "limits.worker_threads"]);
    std::fs::write(
        &path,
        r#"{"allocationDescription": ["pipe", "hard-filter-setup"], "limits": {"max_concurrent_allocations": 3}}"#,
    )
    .expect("write");
    let (_, permits) = s.app.reload().expect("valid");
    assert_eq!(permits, ["limits.max_concurrent_allocations"], "the permits are counted at start-up");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_token_guards_allocate_capacity_and_reload() {
    let s = start(&[("DAPI_AUTH_TOKEN", "s3cret")]).await;
    let body = serde_json::to_vec(&example_request()).expect("body");
    let json_ct = ("Content-Type", "application/json");
    let r = send(s.addr, "POST", "/allocate", &[json_ct], &body).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert_eq!(r.json()["code"], "Unauthorized");
    let r = send(s.addr, "POST", "/allocate", &[json_ct, ("Authorization", "Bearer wrong")], &body).await;
    assert_eq!(r.status, 401);
    // The scheme's name in any case (RFC 9110 §11.1).
    for authorization in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let r = send(s.addr, "POST", "/allocate", &[json_ct, ("Authorization", authorization)], &body).await;
        assert_eq!(r.status, 200, "{authorization}");
    }
    let r = send(s.addr, "POST", "/allocate", &[json_ct, ("Authorization", "Basic s3cret")], &body).await;
    assert_eq!(r.status, 401);
    assert_eq!(send(s.addr, "POST", "/capacity", &[json_ct], b"[]").await.status, 401);
    assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 401);
    assert_eq!(send(s.addr, "GET", "/ping", &[], b"").await.status, 200);
    assert_eq!(send(s.addr, "GET", "/metrics", &[], b"").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reload_answers_with_the_new_config_or_refuses() {
    let dir = std::env::temp_dir().join(format!("dapi-admin-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("config.json");
    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "identity"]}"#).expect("write");
    let s = common::start_with(Some(&path), &[]).await;
    std::fs::write(&path, r#"{"defaults": {"filter_headnode": "yes"}}"#).expect("write");
    let r = send(s.addr, "POST", "/admin/reload", &[], b"").await;
    assert_eq!(r.status, 409);
    // The message names the file the bad default came from.
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert_eq!(message, format!("config file {}: Defaults filter_headnode is not boolean", path.display()));
    std::fs::write(&path, r#"{"allocationDescription": ["pipe", "hard-filter-running"]}"#).expect("write");
    let r = send(s.addr, "POST", "/admin/reload", &[], b"").await;
    assert_eq!(r.status, 200);
    let digest = r.json()["config"].clone();
    assert_eq!(send(s.addr, "GET", "/ping", &[], b"").await.json()["config"], digest);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_concurrency_limit_requests_get_503_at_once() {
    use tokio::io::AsyncWriteExt;
    let s = start(&[("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "1")]).await;
    // Hold the only permit: a request whose body is still arriving.
    let mut slow = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    let head = "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
    slow.write_all(head.as_bytes()).await.expect("head");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("1"));
    drop(slow);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(post_json(s.addr, "/allocate", &example_request()).await.status, 200, "the permit came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_one_request_after_another_is_never_refused() {
    // With one permit, each answer must give it back before the client can see the answer.
    let s = start(&[("DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS", "1")]).await;
    let body = serde_json::to_vec(&example_request()).expect("body");
    let mut stream = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    for i in 0..100 {
        let reply = keep_alive_post(&mut stream, &body).await;
        assert_eq!(reply.status, 200, "request {i} on one connection");
    }
    for i in 0..20 {
        assert_eq!(post_json(s.addr, "/allocate", &example_request()).await.status, 200, "request {i}");
    }
}

/// One POST /allocate on a kept-alive connection; reads exactly its answer.
async fn keep_alive_post(stream: &mut tokio::net::TcpStream, body: &[u8]) -> common::Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let head = format!(
        "POST /allocate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // One write: a head and a body written apart meet Nagle and delayed ACKs (40 ms each).
    stream.write_all(&[head.as_bytes(), body].concat()).await.expect("request");
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = stream.read(&mut buf).await.expect("read");
        assert!(n > 0, "connection closed");
        raw.extend_from_slice(&buf[..n]);
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let reply = common::parse_reply(&raw[..split + 4]);
            let length: usize = reply.header("content-length").and_then(|v| v.parse().ok()).expect("length");
            if raw.len() >= split + 4 + length {
                return common::parse_reply(&raw);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_fit_example_is_a_409_with_cnapis_reason() {
    let s = start(&[]).await;
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/allocate-no-fit.json");
    let body: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("JSON");
    let r = post_json(s.addr, "/allocate", &body).await;
    assert_eq!(r.status, 409);
    let answer = r.json();
    assert_eq!(answer["code"], "NoAllocatableServersError");
    assert_eq!(answer["message"], "No compute resources available: no servers with enough unreserved RAM");
    assert!(answer.get("server").is_none());
    assert!(answer["steps"].as_array().is_some_and(|s| s.len() > 20));
}
