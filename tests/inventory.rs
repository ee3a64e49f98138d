//! Inventory mode end to end, on a throwaway PostgreSQL (tests/pg): fidelity with the
//! stateless path on every vendored recorded case, replicas seeing each other's changes,
//! no over-commit under concurrent replicas, and a database restart.

mod common;
mod pg;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{metric, post_json, replay, send, Service};
use dapi::config::ServiceConfig;
use dapi::http::AppState;
use dapi::inventory::Inventory;
use serde_json::{json, Value};

/// A replica on `url` (config file `file` over the built-in one, `env` over both).
async fn replica(file: Option<&Path>, url: &str, env: &[(&str, &str)]) -> Service {
    let mut vars: Vec<(String, String)> = vec![("DAPI_INVENTORY__URL".into(), url.into())];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = ServiceConfig::load(file, vars).expect("test config is valid");
    let inventory = Inventory::start(&config.inventory).await.expect("the inventory starts");
    let app = Arc::new(AppState::new(config, None).expect("engine builds"));
    app.set_inventory(inventory);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(dapi::http::serve(listener, app.clone()));
    Service { addr, app }
}

async fn put_json(addr: std::net::SocketAddr, path: &str, body: &Value) -> common::Reply {
    let bytes = serde_json::to_vec(body).expect("serialisable");
    send(addr, "PUT", path, &[("Content-Type", "application/json")], &bytes).await
}

fn cases() -> Vec<Value> {
    common::recorded_cases()
}

fn steps_and_choice(answer: &Value) -> (Value, Value) {
    let chosen = answer["server"].get("uuid").cloned().unwrap_or(Value::Null);
    (chosen, answer["steps"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_vendored_case_decides_the_same_on_the_inventory() {
    let Some(pg) = pg::start("inventory fidelity") else { return };
    let url = pg.database("fidelity");
    let dir = pg.dir().to_path_buf();
    let (mut compared, mut refused) = (0, Vec::new());
    for (i, case) in cases().iter().enumerate() {
        let name = case["name"].as_str().unwrap_or("?").to_string();
        let config_path = dir.join(format!("case-{i}.json"));
        std::fs::write(&config_path, serde_json::to_vec(&case["config"]).expect("config")).expect("write config");
        let service = replica(Some(&config_path), &url, &[]).await;
        let mut request = case["request"].clone();
        if request["vm"].get("vm_uuid").is_none() && request["vm"].get("uuid").is_none() {
            request["vm"]["vm_uuid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
        }
        let vm_uuid = request["vm"]["vm_uuid"].as_str().or(request["vm"]["uuid"].as_str()).map(str::to_string);
        let loaded = post_json(service.addr, "/inventory/load", &json!({"servers": request["servers"]})).await;
        if loaded.status == 422 {
            // Invalid servers are refused, not stored; the error names the field.
            let body = loaded.json();
            assert!(body["errors"][0]["field"].as_str().is_some_and(|f| f.starts_with("servers")), "{name}: {body}");
            refused.push(name);
            continue;
        }
        assert_eq!(loaded.status, 200, "{name}: load: {}", String::from_utf8_lossy(&loaded.body));
        let stateless = post_json(service.addr, "/allocate?steps=full", &request).await;
        let mut without = request.clone();
        without.as_object_mut().expect("object").remove("servers");
        let inventory = post_json(service.addr, "/allocate?steps=full", &without).await;
        assert_eq!(inventory.status, stateless.status, "{name}: {}", String::from_utf8_lossy(&inventory.body));
        let (a, b) = (stateless.json(), inventory.json());
        if stateless.status == 200 || stateless.status == 409 {
            assert_eq!(steps_and_choice(&b), steps_and_choice(&a), "{name}: inventory vs stateless");
        } else {
            assert_eq!(b, a, "{name}: the same error");
        }
        if inventory.status == 200 {
            release(service.addr, vm_uuid.as_deref(), &name).await;
        }
        // Counts answers are made from the per-server outcomes kept (here, of this first
        // request of its kind): the same bytes as the stateless answer's.
        let stateless = post_json(service.addr, "/allocate?steps=counts", &request).await;
        let inventory = post_json(service.addr, "/allocate?steps=counts", &without).await;
        assert_eq!(inventory.status, stateless.status, "{name}: counts");
        if stateless.status == 200 || stateless.status == 409 {
            assert_eq!(inventory.body, stateless.body, "{name}: counts, inventory vs stateless");
        }
        if inventory.status == 200 {
            release(service.addr, vm_uuid.as_deref(), &name).await;
        }
        compared += 1;
    }
    println!("fidelity: {compared} cases compared, {} refused at load (invalid servers): {refused:?}", refused.len());
    assert!(compared >= 40, "most vendored cases load and compare ({compared})");
}

async fn release(addr: std::net::SocketAddr, vm_uuid: Option<&str>, name: &str) {
    let vm = vm_uuid.expect("a placed VM has a uuid");
    let released = send(addr, "DELETE", &format!("/inventory/claims/{vm}"), &[], b"").await;
    assert_eq!(released.status, 200, "{name}: the claim is released");
}

/// The example request's first server, renamed, as a template; its VMs renamed after it
/// too (the inventory keeps a VM on one server: a load listing one twice is refused).
fn server(uuid: &str) -> Value {
    let mut s = common::example_request()["servers"][0].clone();
    s["uuid"] = json!(uuid);
    s["hostname"] = json!(format!("cn-{}", &uuid[..8]));
    let vms = s["vms"].as_object().cloned().unwrap_or_default();
    let renamed: serde_json::Map<String, Value> = vms
        .into_iter()
        .map(|(key, mut vm)| {
            let own = format!("{}{}", &key[..24], &uuid[24..]);
            vm["uuid"] = json!(own);
            (own, vm)
        })
        .collect();
    s["vms"] = Value::Object(renamed);
    s
}

fn big_vm(vm_uuid: &str) -> Value {
    let mut request = common::example_request();
    request.as_object_mut().expect("object").remove("servers");
    request["vm"]["vm_uuid"] = json!(vm_uuid);
    request["vm"]["uuid"] = json!(vm_uuid);
    request["vm"]["ram"] = json!(65536);
    request["vm"]["max_physical_memory"] = json!(65536);
    request["package"]["max_physical_memory"] = json!(65536);
    request
}

fn uuid(prefix: u32, n: usize) -> String {
    format!("{prefix:08x}-0000-4000-8000-{n:012}")
}

/// Puts a server without VMs, of `gib` GiB of RAM.
async fn put_empty_server(addr: std::net::SocketAddr, uuid: &str, gib: u64) {
    let mut s = server(uuid);
    s["vms"] = json!({});
    s["memory_total_bytes"] = json!(gib << 30);
    s["memory_available_bytes"] = json!(gib << 30);
    let put = put_json(addr, &format!("/inventory/servers/{uuid}"), &s).await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
}

/// Puts servers without VMs, one of each RAM size (GiB), uuids `uuid(1, 1..)`.
async fn put_empty_servers(addr: std::net::SocketAddr, gibs: &[u64]) {
    for (i, &gib) in gibs.iter().enumerate() {
        put_empty_server(addr, &uuid(1, i + 1), gib).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_replica_sees_a_committed_change() {
    let Some(pg) = pg::start("inventory replicas") else { return };
    let url = pg.database("replicas");
    let a = replica(None, &url, &[]).await;
    let b = replica(None, &url, &[]).await;
    let s1 = uuid(1, 1);
    let put = put_json(a.addr, &format!("/inventory/servers/{s1}"), &server(&s1)).await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    let started = Instant::now();
    loop {
        let reply = post_json(b.addr, "/allocate", &big_vm(&uuid(9, 1))).await;
        if reply.status == 200 {
            assert_eq!(reply.json()["server"]["uuid"], json!(s1));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "replica b never saw the server: {}", reply.status);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("replica b used a server put through replica a after {:?}", started.elapsed());
    // b's claim is seen by a: the GET lists the server, the claim is in the store.
    let listed = send(a.addr, "GET", "/inventory/servers", &[], b"").await;
    assert_eq!(listed.json().as_array().map(Vec::len), Some(1));
    assert_eq!(pg.psql("replicas", "SELECT server_uuid FROM claims"), s1);
    // Deleting through b empties a.
    let deleted = send(b.addr, "DELETE", &format!("/inventory/servers/{s1}"), &[], b"").await;
    assert_eq!(deleted.status, 200);
    let started = Instant::now();
    loop {
        let reply = post_json(a.addr, "/allocate", &big_vm(&uuid(9, 2))).await;
        if reply.status == 409 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "replica a never saw the deletion: {}", reply.status);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feeding_is_validated_like_allocate() {
    let Some(pg) = pg::start("inventory validation") else { return };
    let url = pg.database("feeding");
    let a = replica(None, &url, &[]).await;
    let s1 = uuid(1, 1);
    let mut bad = server(&s1);
    bad["memory_total_bytes"] = json!("lots");
    let reply = put_json(a.addr, &format!("/inventory/servers/{s1}"), &bad).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["errors"][0]["field"], json!("server"));
    assert!(reply.json()["errors"][0]["message"].as_str().is_some_and(|m| m.contains("memory_total_bytes")));
    let reply = put_json(a.addr, &format!("/inventory/servers/{}", uuid(1, 2)), &server(&s1)).await;
    assert_eq!(reply.status, 422);
    assert_eq!(reply.json()["errors"][0]["field"], json!("server.uuid"));
    assert_eq!(pg.psql("feeding", "SELECT count(*) FROM servers"), "0", "invalid servers are not stored");
    // A VM needs a known server.
    let vm = json!({"uuid": uuid(7, 1), "server_uuid": s1, "ram": 1024, "max_physical_memory": 1024, "state": "running", "brand": "joyent", "owner_uuid": uuid(8, 1)});
    let reply = put_json(a.addr, &format!("/inventory/vms/{}", uuid(7, 1)), &vm).await;
    assert_eq!(reply.status, 422);
    assert_eq!(reply.json()["errors"][0]["field"], json!("server_uuid"));
    let reply = put_json(a.addr, &format!("/inventory/servers/{s1}"), &server(&s1)).await;
    assert_eq!(reply.status, 200);
    let reply = put_json(a.addr, &format!("/inventory/vms/{}", uuid(7, 1)), &vm).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let got = send(a.addr, "GET", &format!("/inventory/servers/{s1}"), &[], b"").await;
    assert!(got.json()["vms"].get(uuid(7, 1)).is_some(), "the VM is listed on its server");
    // VMs listed as VMAPI lists them (an array) would go uncounted: refused, as a request's.
    let mut listed = server(&s1);
    listed["vms"] = json!([vm.clone()]);
    let reply = put_json(a.addr, &format!("/inventory/servers/{s1}"), &listed).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.json()["errors"][0]["message"].as_str().is_some_and(|m| m.contains(r#"property "vms""#)));
    // A path that is no uuid is named as such, not as the body's uuid to change.
    let reply = put_json(a.addr, "/inventory/servers/xyz", &server(&s1)).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["errors"][0]["field"], json!("uuid"));
    // A field given twice in a VM is named at the VM.
    let twice = format!(
        r#"{{"uuid":"{}","server_uuid":"{s1}","max_physical_memory":1024,"max_physical_memory":2048,"state":"running","owner_uuid":"{}"}}"#,
        uuid(7, 4),
        uuid(8, 1)
    );
    let reply = send(a.addr, "PUT", &format!("/inventory/vms/{}", uuid(7, 4)), &[], twice.as_bytes()).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["errors"][0]["field"], json!("vm"));
    // Only JSON replaces what is stored: a form or text posted by mistake is refused whole.
    for (kind, value) in [("Content-Type", "text/plain"), ("Content-Type", "application/x-www-form-urlencoded")] {
        let reply = send(a.addr, "POST", "/inventory/load", &[(kind, value)], br#"{"servers":[]}"#).await;
        assert_eq!(reply.status, 415, "{value}: {}", String::from_utf8_lossy(&reply.body));
        let reply = send(a.addr, "PUT", &format!("/inventory/servers/{s1}"), &[(kind, value)], b"{}").await;
        assert_eq!(reply.status, 415, "{value}: {}", String::from_utf8_lossy(&reply.body));
    }
    let reply = send(a.addr, "POST", "/inventory/load", &[("Content-Encoding", "gzip")], br#"{"servers":[]}"#).await;
    assert_eq!(reply.status, 415, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(pg.psql("feeding", "SELECT count(*) FROM servers"), "1", "nothing replaced");
    // A VM alone is checked as on its server (its fields, its key), and its own uuid against
    // the path's.
    let mut odd = vm.clone();
    odd["uuid"] = json!(uuid(7, 2));
    odd["max_physical_memory"] = json!("x");
    let reply = put_json(a.addr, &format!("/inventory/vms/{}", uuid(7, 2)), &odd).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["errors"][0]["field"], json!("vm"));
    assert!(reply.json()["errors"][0]["message"].as_str().is_some_and(|m| m.contains("max_physical_memory")));
    let mut abc = vm.clone();
    abc["uuid"] = json!("abc");
    let reply = put_json(a.addr, "/inventory/vms/abc", &abc).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.json()["errors"][0]["message"].as_str().is_some_and(|m| m.contains("key is not a UUID")));
    let reply = put_json(a.addr, &format!("/inventory/vms/{}", uuid(7, 3)), &vm).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(reply.json()["errors"][0]["field"], json!("vm.uuid"));
    let refused = format!("SELECT count(*) FROM vms WHERE uuid IN ('{}', 'abc', '{}')", uuid(7, 2), uuid(7, 3));
    assert_eq!(pg.psql("feeding", &refused), "0", "refused VMs are not stored");
    // Pretty-printed feeds are stored without the whitespace between their tokens.
    for (path, body) in
        [(format!("/inventory/servers/{s1}"), server(&s1)), (format!("/inventory/vms/{}", uuid(7, 1)), vm)]
    {
        let pretty = serde_json::to_vec_pretty(&body).expect("json");
        let reply = send(a.addr, "PUT", &path, &[("Content-Type", "application/json")], &pretty).await;
        assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    }
    let spaced =
        "SELECT count(*) FROM (SELECT object::text AS t FROM servers UNION ALL SELECT object::text FROM vms) o \
                  WHERE strpos(t, E'\\n') > 0 OR strpos(t, ': ') > 0";
    assert_eq!(pg.psql("feeding", spaced), "0", "stored compact");
    assert_ne!(pg.psql("feeding", "SELECT count(*) FROM vms"), "0", "VMs were checked too");
    // An allocation without a VM uuid cannot claim.
    let mut request = big_vm(&uuid(9, 1));
    request["vm"].as_object_mut().expect("object").remove("vm_uuid");
    request["vm"].as_object_mut().expect("object").remove("uuid");
    let reply = post_json(a.addr, "/allocate", &request).await;
    assert_eq!(reply.status, 422);
    assert!(reply.json()["errors"][0]["field"].as_str().is_some_and(|f| f.starts_with("vm")), "{}", reply.json());
    // A load listing a VM on two servers is refused (the store keeps a VM on one server, so
    // a copy would be lost); one that drops a server drops that server's claims with it.
    let s2 = uuid(1, 2);
    let mut twice = server(&s2);
    twice["vms"] = server(&s1)["vms"].clone();
    let reply = post_json(a.addr, "/inventory/load", &json!({"servers": [server(&s1), twice]})).await;
    assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.json()["errors"][0]["field"].as_str().is_some_and(|f| f.starts_with("servers[1].vms.")));
    assert_eq!(
        pg.psql("feeding", "SELECT count(*) FROM servers WHERE NOT deleted"),
        "1",
        "a refused load changes nothing"
    );
    // (The VM fed above has no cpu_cap, which the package's would refuse.)
    assert_eq!(send(a.addr, "DELETE", &format!("/inventory/vms/{}", uuid(7, 1)), &[], b"").await.status, 200);
    let mut small = big_vm(&uuid(9, 2));
    small["vm"]["ram"] = json!(1024);
    small["vm"]["max_physical_memory"] = json!(1024);
    small["package"]["max_physical_memory"] = json!(1024);
    // A batch is refused, naming its member, and claims nothing.
    for (member, value) in [("count", json!(2)), ("vms", json!([small["vm"].clone()]))] {
        let mut batch = small.clone();
        batch[member] = value;
        let reply = post_json(a.addr, "/allocate", &batch).await;
        assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(&reply.body));
        assert_eq!(reply.json()["errors"][0]["field"], member);
    }
    let reply = post_json(a.addr, "/allocate", &small).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    assert_eq!(pg.psql("feeding", "SELECT count(*) FROM claims"), "1");
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": [server(&s2)]})).await.status, 200);
    assert_eq!(pg.psql("feeding", "SELECT count(*) FROM claims"), "0", "the dropped server's claim went with it");
    let started = Instant::now();
    while send(a.addr, "GET", "/ping", &[], b"").await.json()["inventory"]["claims"] != json!(0) {
        assert!(started.elapsed() < Duration::from_secs(5), "the replica still counts the dropped claim");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `text` with its first `from` replaced by `to` (edits serde_json cannot write).
fn edited(text: &str, edits: &[(&str, &str)]) -> String {
    let mut text = text.to_string();
    for (from, to) in edits {
        assert!(text.contains(from), "{from} is in the text");
        text = text.replacen(from, to, 1);
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_json_parse_reads_are_read_and_answered_as_in_a_stateless_request() {
    // Lone surrogates and numbers past the double range, in a server fed to the inventory
    // and in the allocation: stored as given, and the allocation on the inventory answers
    // byte for byte what the stateless request with the same servers answers.
    let Some(pg) = pg::start("inventory JSON.parse bodies") else { return };
    let url = pg.database("jsonparse");
    let a = replica(None, &url, &[]).await;
    let mut request = common::example_request();
    request["seed"] = json!(7);
    let servers = serde_json::to_string(&request["servers"]).expect("servers");
    let servers = edited(&servers, &[(r#""hostname":"CN0002""#, r#""hostname":"CN\uD8000002","x\udc00":[1e999]"#)]);
    let reply = send(a.addr, "POST", "/inventory/load", &[], format!(r#"{{"servers":{servers}}}"#).as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let without = {
        let mut r = request.clone();
        r.as_object_mut().expect("object").remove("servers");
        edited(&serde_json::to_string(&r).expect("request"), &[(r#""alias":""#, r#""alias":"a\ud800"#)])
    };
    let stateless = format!(r#"{{"servers":{servers},{}"#, &without[1..]);
    let s = send(a.addr, "POST", "/allocate?steps=full", &[], stateless.as_bytes()).await;
    let i = send(a.addr, "POST", "/allocate?steps=full", &[], without.as_bytes()).await;
    let (s_text, i_text) = (String::from_utf8_lossy(&s.body), String::from_utf8_lossy(&i.body));
    assert_eq!((s.status, i.status), (200, 200), "{i_text}");
    assert_eq!(i_text, s_text, "the inventory answers as the stateless request does");
    assert!(i_text.contains(r#""hostname":"CN\ud8000002","x\udc00":[null]"#), "echoed as JSON.stringify: {i_text}");
    // A server put alone with such a key is stored and listed.
    let s1 = uuid(1, 1);
    let one = edited(
        &serde_json::to_string(&server(&s1)).expect("server"),
        &[(r#""hostname":"#, r#""k\ud800":1e999,"hostname":"#)],
    );
    let reply = send(a.addr, "PUT", &format!("/inventory/servers/{s1}"), &[], one.as_bytes()).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let got = send(a.addr, "GET", &format!("/inventory/servers/{s1}"), &[], b"").await;
    let got = String::from_utf8_lossy(&got.body).to_string();
    assert!(got.contains(r#""k\ud800":1e999"#), "stored as given: {got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn inventory_allocations_are_recorded_whole_and_replay_unchanged() {
    let Some(pg) = pg::start("inventory recording") else { return };
    let url = pg.database("recording");
    let records = pg.dir().join("records");
    let a = replica(None, &url, &[("DAPI_RECORD__DIR", records.to_str().expect("utf-8"))]).await;
    let servers: Vec<Value> = (0..3).map(|n| server(&uuid(1, n))).collect();
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    // One after the other until nothing fits: each decision counts the claims before it.
    let mut sent: u64 = 0;
    let mut placed = 0;
    loop {
        // Counts answers come from the per-server outcomes kept since the last allocation
        // of the same request; the replay below makes each one afresh.
        let path = match sent % 3 {
            _ if sent == 1 => "/allocate?steps=full",
            0 => "/allocate",
            _ => "/allocate?steps=counts",
        };
        let reply = post_json(a.addr, path, &big_vm(&uuid(9, sent as usize))).await;
        sent += 1;
        match reply.status {
            200 => placed += 1,
            409 => break,
            s => panic!("unexpected {s}: {}", String::from_utf8_lossy(&reply.body)),
        }
        assert!(sent < 100, "the servers never fill");
    }
    assert!(placed >= 3, "{placed} placed");
    let mut written = 0;
    for _ in 0..200 {
        written = metric(a.addr, "dapi_records_written_total").await;
        if written >= sent {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(written, sent);

    // Each record is a stateless request: the servers decided on, and the claims counted
    // as tickets (the last one, a 409, counts every VM placed before it).
    let files = dapi::record::record_files(&records).expect("records");
    assert_eq!(files.len() as u64, sent);
    let last: Value = serde_json::from_slice(&std::fs::read(&files[files.len() - 1].1).expect("read")).expect("JSON");
    assert_eq!(last["status"], 409, "{}", last["decision"]);
    assert_eq!(last["body"]["servers"].as_array().map(Vec::len), Some(3));
    let tickets = last["body"]["tickets"].as_array().expect("tickets");
    let claimed: Vec<&str> =
        tickets.iter().filter_map(|t| t["id"].as_str()).filter(|id| id.starts_with("00000009")).collect();
    assert_eq!(claimed.len(), placed, "{tickets:?}");
    assert!(last["seed"].is_u64(), "{last}");

    // Replayed with the same config, every decision and answer is the recorded one.
    let same = replay(&records, None);
    assert_eq!(same["replayed"], sent, "{same}");
    assert_eq!(same["changed"], 0, "{same}");
    assert_eq!(same["not_reproduced"], 0, "{same}");
    assert_eq!(same["failed"], 0, "{same}");
    // Without the claims the servers would not be full: the last decision would change.
    let mut body = last["body"].clone();
    body["tickets"] = json!([]);
    let alone = records.join("alone");
    std::fs::create_dir_all(alone.join("configs")).expect("dir");
    let mut record = last.clone();
    record["body"] = body;
    std::fs::write(alone.join("000000000001.json"), record.to_string()).expect("write");
    let config = format!("configs/{}.json", last["config"].as_str().expect("digest"));
    std::fs::copy(records.join(&config), alone.join(&config)).expect("config");
    let report = replay(&alone, None);
    assert_eq!(report["changed"], 1, "{report}");
}

/// Fills servers with VMs through `replicas` from `clients` concurrent clients until every
/// allocation answers 409; the 200s (VM → server).
async fn fill(replicas: &[std::net::SocketAddr], clients: usize, prefix: u32) -> BTreeMap<String, String> {
    let placed = Arc::new(std::sync::Mutex::new(BTreeMap::new()));
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in 0..clients {
        let addr = replicas[c % replicas.len()];
        // Half the clients ask for counts: their allocations re-run only changed servers.
        let path = if c % 2 == 1 { "/allocate?steps=counts" } else { "/allocate" };
        let (placed, counter) = (placed.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut unavailable_since: Option<Instant> = None;
            loop {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let vm = uuid(prefix, n);
                let reply = post_json(addr, path, &big_vm(&vm)).await;
                match reply.status {
                    200 => {
                        unavailable_since = None;
                        let server = reply.json()["server"]["uuid"].as_str().expect("uuid").to_string();
                        placed.lock().expect("lock").insert(vm, server);
                    }
                    409 => return,
                    // Busy (more clients than permits) or lost races: retry, within bounds.
                    503 => {
                        let since = *unavailable_since.get_or_insert_with(Instant::now);
                        assert!(
                            since.elapsed() < Duration::from_secs(30),
                            "503 for ever: {}",
                            String::from_utf8_lossy(&reply.body)
                        );
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                    s => panic!("unexpected {s}: {}", String::from_utf8_lossy(&reply.body)),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client ran");
    }
    let placed = placed.lock().expect("lock").clone();
    placed
}

fn per_server(placed: &BTreeMap<String, String>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for server in placed.values() {
        *counts.entry(server.clone()).or_insert(0) += 1;
    }
    counts
}

/// The claims in the store, by SQL: VM → server.
fn stored_claims(pg: &pg::Postgres, db: &str) -> BTreeMap<String, String> {
    let rows = pg.psql(db, "SELECT vm_uuid || ' ' || server_uuid FROM claims ORDER BY 1");
    rows.lines().filter_map(|l| l.split_once(' ').map(|(v, s)| (v.to_string(), s.to_string()))).collect()
}

/// Two replicas on one database, 16 concurrent clients, for `INVENTORY_CONCURRENCY_SECONDS`
/// (60): the datacenter is filled until every allocation answers 409, checked by SQL, half
/// of the claims released (through either replica), filled again, and so on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_with_concurrent_clients_never_over_commit() {
    let Some(pg) = pg::start("inventory concurrency") else { return };
    let seconds: u64 = std::env::var("INVENTORY_CONCURRENCY_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    let servers: Vec<Value> = (0..6).map(|n| server(&uuid(1, n))).collect();
    // What the chain allows: one client, one replica, until nothing fits.
    let url = pg.database("sequential");
    let one = replica(None, &url, &[]).await;
    assert_eq!(post_json(one.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    let allowed = per_server(&fill(&[one.addr], 1, 0xa).await);
    let total: usize = allowed.values().sum();
    assert!(total >= servers.len(), "each server takes at least one VM ({allowed:?})");
    // Two replicas, 16 clients.
    let url = pg.database("concurrent");
    let a = replica(None, &url, &[]).await;
    let b = replica(None, &url, &[]).await;
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    let started = Instant::now();
    let mut answered: BTreeMap<String, String> = BTreeMap::new();
    let mut rounds = 0;
    loop {
        rounds += 1;
        let placed = fill(&[a.addr, b.addr], 16, 0xb0 + rounds).await;
        answered.extend(placed);
        // The store's claims, by SQL: no server holds more than the chain allows, every 200
        // has its claim and no claim lacks its 200.
        let claims = stored_claims(&pg, "concurrent");
        assert_eq!(claims, answered, "round {rounds}: claims and 200s match one to one");
        for (server, n) in per_server(&claims) {
            assert!(n <= allowed.get(&server).copied().unwrap_or(0), "{server}: {n} claims, {allowed:?} allowed");
        }
        assert_eq!(claims.len(), total, "round {rounds}: the datacenter is filled as far as the chain allows");
        if started.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
        // Half of the claims released (failed provisions), alternately through each replica.
        let release: Vec<String> = answered.keys().step_by(2).cloned().collect();
        for (i, vm) in release.iter().enumerate() {
            let via = if i % 2 == 0 { a.addr } else { b.addr };
            let reply = send(via, "DELETE", &format!("/inventory/claims/{vm}"), &[], b"").await;
            assert_eq!(reply.status, 200, "release {vm}: {}", String::from_utf8_lossy(&reply.body));
            answered.remove(vm);
        }
    }
    println!(
        "{rounds} rounds of filling by 2 replicas and 16 clients in {:?}; {total} VMs fit ({allowed:?})",
        started.elapsed()
    );
}

/// A change committed while a replica is cut off from the database (its connections
/// terminated by the server) is seen once it reconnects: it catches up by generation.
/// An allocation given up while its claim is on its way (its request timed out: 503)
/// leaves no claim once that claim commits, in the store or in the replica; its retry is
/// placed and claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_allocation_given_up_while_its_claim_waits_leaves_no_claim() {
    let Some(pg) = pg::start("inventory given up") else { return };
    let url = pg.database("givenup");
    let a = replica(None, &url, &[("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "1000")]).await;
    let s1 = uuid(1, 1);
    let put = put_json(a.addr, &format!("/inventory/servers/{s1}"), &server(&s1)).await;
    assert_eq!(put.status, 200, "{}", String::from_utf8_lossy(&put.body));
    // Claims wait while another session holds their table.
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("a second session");
    tokio::spawn(connection);
    client.batch_execute("BEGIN; LOCK TABLE claims IN EXCLUSIVE MODE").await.expect("the claims table locked");
    let vm = uuid(9, 1);
    let given_up = post_json(a.addr, "/allocate", &big_vm(&vm)).await;
    assert_eq!(given_up.status, 503, "{}", String::from_utf8_lossy(&given_up.body));
    client.batch_execute("COMMIT").await.expect("the claims table unlocked");
    // The claim goes in once the table is free, and out again.
    let started = Instant::now();
    loop {
        let stored = pg.psql("givenup", "SELECT count(*) FROM claims");
        let held = send(a.addr, "GET", "/ping", &[], b"").await.json()["inventory"]["claims"].clone();
        if stored == "0" && held == json!(0) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the given-up allocation's claim stayed: {stored} stored, {held} held by the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let retried = post_json(a.addr, "/allocate", &big_vm(&vm)).await;
    assert_eq!(retried.status, 200, "{}", String::from_utf8_lossy(&retried.body));
    assert_eq!(stored_claims(&pg, "givenup").get(&vm), Some(&s1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_committed_while_disconnected_is_seen_after_reconnecting() {
    let Some(pg) = pg::start("inventory reconnect") else { return };
    let url = pg.database("reconnect");
    let a = replica(None, &url, &[]).await;
    let servers: Vec<Value> = (0..2).map(|n| server(&uuid(1, n))).collect();
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    let ping = || async { send(a.addr, "GET", "/ping", &[], b"").await.json()["inventory"].clone() };
    // The load's own notification may still be caught up on: wait until the replica follows.
    let started = Instant::now();
    while ping().await["state"] != json!("following") {
        assert!(started.elapsed() < Duration::from_secs(10), "the replica never settled after the load");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pg.psql(
        "reconnect",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = 'reconnect' AND pid <> pg_backend_pid()",
    );
    let started = Instant::now();
    while ping().await["state"] == json!("following") {
        assert!(started.elapsed() < Duration::from_secs(5), "the replica never noticed");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Committed by another connection while the replica is not listening (no NOTIFY: it
    // could not hear it anyway), as a feed writes.
    let s9 = uuid(1, 9);
    let object = server(&s9).to_string().replace('\'', "''");
    pg.psql(
        "reconnect",
        &format!(
            "BEGIN; SELECT pg_advisory_xact_lock(1684107369); \
             INSERT INTO servers (uuid, position, object, generation, revision) VALUES \
             ('{s9}', nextval('inventory_position'), '{object}'::json, nextval('inventory_generation'), \
             currval('inventory_generation')); COMMIT;"
        ),
    );
    let started = Instant::now();
    loop {
        let state = ping().await;
        if state["servers"] == json!(3) && state["state"] == json!("following") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the change never arrived: {state}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("a change committed while disconnected was seen {:?} after it", started.elapsed());
    // And it is allocated on: fill until 409, the new server among those used.
    let placed = fill(&[a.addr], 2, 0xc).await;
    assert!(placed.values().any(|s| *s == s9), "the server committed while disconnected is used: {placed:?}");
}

/// `dapi serve` in inventory mode as a process of its own (killed with SIGKILL).
struct Process {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl Process {
    fn start(url: &str) -> Process {
        let port = common::unclaimed_port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_dapi"))
            .arg("serve")
            .env("DAPI_LISTEN", format!("127.0.0.1:{port}"))
            .env("DAPI_INVENTORY__URL", url)
            .env("DAPI_LOG_LEVEL", "warn")
            .env_remove("DAPI_CONFIG")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("dapi starts");
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let started = Instant::now();
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "dapi serve never listened");
            std::thread::sleep(Duration::from_millis(20));
        }
        Process { child, addr }
    }

    fn kill(&mut self) {
        let _ = self.child.kill(); // SIGKILL
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One request to a process that may be killed meanwhile: `None` when no answer came.
async fn try_post(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> Option<common::Reply> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    raw.windows(4).any(|w| w == b"\r\n\r\n").then(|| common::parse_reply(&raw))
}

/// A replica killed (SIGKILL) while a load is being written, then while allocating: after
/// a restart the store holds every committed write and nothing half-written, every 200 has
/// its claim, and the restarted replica holds what the store holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_load_and_mid_allocations_loses_nothing_committed() {
    let Some(pg) = pg::start("inventory kill") else { return };
    let url = pg.database("killed");
    let mut a = Process::start(&url);
    let first: Vec<Value> = (0..4).map(|n| server(&uuid(1, n))).collect();
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": first})).await.status, 200);
    // A big dump, killed while its transaction is writing.
    let big: Vec<Value> = (0..3000).map(|n| server(&uuid(2, n))).collect();
    let big = serde_json::to_vec(&json!({"servers": big})).expect("json");
    let addr = a.addr;
    let loading = tokio::spawn(async move { try_post(addr, "/inventory/load", &big).await });
    let started = Instant::now();
    let writing = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'killed' AND backend_xid IS NOT NULL";
    while pg.psql("killed", writing) == "0" {
        assert!(started.elapsed() < Duration::from_secs(30), "the load never started writing");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    a.kill();
    assert!(loading.await.expect("client").is_none(), "the killed load was not answered");
    let live = "SELECT count(*) FROM servers WHERE NOT deleted";
    let mut b = Process::start(&url);
    assert_eq!(pg.psql("killed", live), "4", "the half-written load was rolled back, the committed one kept");
    let listed = send(b.addr, "GET", "/inventory/servers", &[], b"").await.json();
    let uuids: Vec<&str> = listed.as_array().expect("list").iter().filter_map(|s| s["uuid"].as_str()).collect();
    assert_eq!(uuids, (0..4).map(|n| uuid(1, n)).collect::<Vec<_>>(), "the restarted replica holds the store's");

    // Allocations from 8 clients, the replica killed while they run.
    let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (answered, counter, addr) = (answered.clone(), counter.clone(), b.addr);
        clients.push(tokio::spawn(async move {
            loop {
                let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mut request = big_vm(&uuid(0xd, n));
                request["vm"]["ram"] = json!(1024);
                request["vm"]["max_physical_memory"] = json!(1024);
                request["package"]["max_physical_memory"] = json!(1024);
                let body = serde_json::to_vec(&request).expect("json");
                match try_post(addr, "/allocate", &body).await {
                    Some(reply) if reply.status == 200 => answered.lock().expect("lock").push(uuid(0xd, n)),
                    Some(reply) => assert!(matches!(reply.status, 409 | 503), "{}", reply.status),
                    None => return,
                }
            }
        }));
    }
    while answered.lock().expect("lock").len() < 20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    b.kill();
    for c in clients {
        c.await.expect("client");
    }
    let answered = answered.lock().expect("lock").clone();
    let claims = stored_claims(&pg, "killed");
    for vm in &answered {
        assert!(claims.contains_key(vm), "the 200 for {vm} has its claim");
    }
    // A claim committed just before the kill may lack its 200 (its answer was lost).
    assert!(claims.len() <= answered.len() + 8, "{} claims, {} answered", claims.len(), answered.len());
    let c = Process::start(&url);
    let ping = send(c.addr, "GET", "/ping", &[], b"").await.json();
    assert_eq!(ping["inventory"]["claims"], json!(claims.len()), "the restarted replica counts every claim: {ping}");
    assert_eq!(ping["inventory"]["servers"], json!(4));
    println!("killed after {} answered allocations; {} claims stored", answered.len(), claims.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_restart_gives_503s_then_recovers() {
    let Some(mut pg) = pg::start("inventory restart") else { return };
    let url = pg.database("restart");
    let a = replica(None, &url, &[("DAPI_INVENTORY__STALENESS_MS", "300")]).await;
    let servers: Vec<Value> = (0..3).map(|n| server(&uuid(1, n))).collect();
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    assert_eq!(post_json(a.addr, "/allocate", &big_vm(&uuid(9, 0))).await.status, 200);
    pg.stop_server();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let reply = post_json(a.addr, "/allocate", &big_vm(&uuid(9, 1))).await;
    assert_eq!(reply.status, 503, "{}", String::from_utf8_lossy(&reply.body));
    assert!(reply.header("retry-after").is_some(), "503 says when to retry");
    let ping = send(a.addr, "GET", "/ping", &[], b"").await.json();
    assert_eq!(ping["inventory"]["state"], json!("stale"), "{ping}");
    pg.start_server();
    let started = Instant::now();
    loop {
        let reply = post_json(a.addr, "/allocate", &big_vm(&uuid(9, 2))).await;
        if reply.status == 200 {
            break;
        }
        assert_eq!(reply.status, 503);
        assert!(started.elapsed() < Duration::from_secs(15), "never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("recovered {:?} after the database came back", started.elapsed());
    // A change committed by another replica after the restart is seen; nothing committed
    // before it was lost.
    let b = replica(None, &url, &[]).await;
    let s9 = uuid(1, 9);
    assert_eq!(put_json(b.addr, &format!("/inventory/servers/{s9}"), &server(&s9)).await.status, 200);
    let ping = send(a.addr, "GET", "/ping", &[], b"").await.json();
    assert_eq!(ping["inventory"]["state"], json!("following"), "{ping}");
    assert_eq!(pg.psql("restart", "SELECT count(*) FROM claims"), "2");
    let started = Instant::now();
    while send(a.addr, "GET", "/ping", &[], b"").await.json()["inventory"]["servers"] != json!(4) {
        assert!(started.elapsed() < Duration::from_secs(5), "replica a never saw the new server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_wrong_url_is_a_clear_start_up_error() {
    let vars = vec![("DAPI_INVENTORY__URL".to_string(), "mysql://nope".to_string())];
    let err = ServiceConfig::load(None, vars).expect_err("not a PostgreSQL URL");
    assert!(err.to_string().contains("DAPI_INVENTORY__URL"), "{err}");
    // Unreachable: nothing listens on port 1.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let vars = vec![("DAPI_INVENTORY__URL".to_string(), "postgresql://postgres@127.0.0.1:1/x".to_string())];
    let config = ServiceConfig::load(None, vars).expect("a well-formed URL");
    let err = rt.block_on(Inventory::start(&config.inventory)).err().expect("unreachable database");
    assert!(err.to_string().to_lowercase().contains("connect"), "{err}");
}

/// Each step's name and how many servers it left, whatever the steps' form.
fn step_counts(answer: &Value) -> Vec<(String, usize)> {
    let steps = answer["steps"].as_array().cloned().unwrap_or_default();
    steps
        .iter()
        .map(|step| {
            let count = step["remaining_count"]
                .as_u64()
                .map(|n| n as usize)
                .or_else(|| step["remaining"].as_array().map(Vec::len))
                .expect("a count or a list");
            (step["step"].as_str().unwrap_or_default().to_string(), count)
        })
        .collect()
}

/// A VM placed again (a retried provision: its claim is held already and left out of its
/// own tickets) is decided on the recurring path as the full chain decides it, and so is
/// the next VM, which counts that claim again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vm_placed_again_is_decided_as_the_full_chain_decides_it() {
    let Some(pg) = pg::start("inventory placed again") else { return };
    let url = pg.database("again");
    let a = replica(None, &url, &[]).await;
    // Servers of 2 or 3 such VMs each, told apart by their RAM: which one a VM gets
    // depends on every claim counted.
    put_empty_servers(a.addr, &[160, 192, 224, 256, 288]).await;
    let place = |vm: usize, steps: &'static str| {
        let addr = a.addr;
        async move {
            let reply = post_json(addr, &format!("/allocate?steps={steps}"), &big_vm(&uuid(9, vm))).await;
            (reply.status, reply.json())
        }
    };
    let mut placed = 0;
    for vm in 1..=8 {
        let (status, answer) = place(vm, "counts").await;
        if status != 200 {
            break;
        }
        assert!(answer["server"]["uuid"].is_string(), "{answer}");
        placed = vm;
    }
    assert!(placed >= 4, "the servers took only {placed} VMs");
    for vm in [2, placed] {
        // Counts: the recurring path; full: the whole chain. The first placing again moves
        // the claim (or keeps it): the second sees the same claims.
        let (status, recurring) = place(vm, "counts").await;
        let (full_status, full) = place(vm, "full").await;
        assert_eq!((status, full_status), (200, 200), "{recurring} {full}");
        assert_eq!(recurring["server"]["uuid"], full["server"]["uuid"], "VM {vm} placed again");
        assert_eq!(step_counts(&recurring), step_counts(&full), "VM {vm} placed again");
        // The next VM counts that claim again.
        let next = placed + 1 + vm;
        let (status, recurring) = place(next, "counts").await;
        let (full_status, full) = place(next, "full").await;
        assert_eq!(status, full_status, "{recurring} {full}");
        assert_eq!(recurring["server"]["uuid"], full["server"]["uuid"], "VM {next} after a VM placed again");
        assert_eq!(step_counts(&recurring), step_counts(&full), "VM {next} after a VM placed again");
    }
}

/// Allocations of three kinds of request in turn (sizes 32, 48 and 64 GiB, every VM with
/// its own alias, tags and metadata, of two owners, as a caller's are), on a replica that keeps two kinds'
/// work: each is decided as the full chain decides it, whether its kind's work was kept
/// (the servers changed since re-run), or dropped for another kind's and made afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn allocations_of_kinds_in_turn_are_decided_as_the_full_chain_decides_them() {
    let Some(pg) = pg::start("inventory kinds in turn") else { return };
    let url = pg.database("kinds");
    let a = replica(None, &url, &[("DAPI_INVENTORY__RECURRING_KINDS", "2")]).await;
    put_empty_servers(a.addr, &[160, 192, 224, 256, 288, 320]).await;
    let place = |vm: usize, steps: &'static str| {
        let addr = a.addr;
        async move {
            let mut request = big_vm(&uuid(9, vm));
            let mib = [32768, 49152, 65536][vm % 3];
            request["vm"]["ram"] = json!(mib);
            request["vm"]["max_physical_memory"] = json!(mib);
            request["package"]["max_physical_memory"] = json!(mib);
            // Seeded: the default config's random scorer (0.5) would otherwise draw apart
            // the two runs compared whenever the leading scores come within it.
            request["seed"] = json!(7);
            request["vm"]["alias"] = json!(format!("vm-{vm}"));
            request["vm"]["tags"] = json!({"role": "web", "n": vm});
            request["vm"]["internal_metadata"] = json!({"seq": vm});
            if vm % 4 == 1 {
                request["vm"]["owner_uuid"] = json!("930896af-bf8c-48d4-885c-6573a94b1853");
            }
            let reply = post_json(addr, &format!("/allocate?steps={steps}"), &request).await;
            (reply.status, reply.json())
        }
    };
    let (mut placed, mut vm) = (0, 0);
    // Twice through the three kinds in one order, then in another (each kind last seen
    // one or two allocations back); now and then a server added after the others (a kind's
    // work kept across it, the newcomer run through the chain).
    for (round, order) in
        [[0usize, 1, 2], [0, 1, 2], [2, 0, 1], [1, 1, 0], [2, 2, 1], [0, 2, 1]].into_iter().enumerate()
    {
        if round % 2 == 1 {
            put_empty_server(a.addr, &uuid(1, 100 + round), 320 + 64 * round as u64).await;
        }
        for kind in order {
            vm += 3 - (vm % 3) + kind;
            // Counts: the recurring path, which claims; full: the whole chain, for the
            // same VM (placed again: its own claim left out), on the same claims.
            let (status, recurring) = place(vm, "counts").await;
            let (full_status, full) = place(vm, "full").await;
            assert_eq!(status, full_status, "VM {vm}: {recurring} {full}");
            assert_eq!(recurring["server"]["uuid"], full["server"]["uuid"], "VM {vm}, round {round}");
            assert_eq!(step_counts(&recurring), step_counts(&full), "VM {vm}");
            placed += usize::from(status == 200);
        }
    }
    assert!(placed >= 12, "only {placed} VMs placed");
}

/// The staleness bound counts from when the change feed was lost, not from the last change:
/// after a quiet spell longer than the bound, a lost feed (the database still there for
/// claims) does not turn every allocation into a 503 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_change_feed_counts_staleness_from_its_loss() {
    let Some(pg) = pg::start("inventory feed lost") else { return };
    let url = pg.database("feedlost");
    let a = replica(None, &url, &[("DAPI_INVENTORY__STALENESS_MS", "1500")]).await;
    let servers: Vec<Value> = (0..3).map(|n| server(&uuid(1, n))).collect();
    assert_eq!(post_json(a.addr, "/inventory/load", &json!({"servers": servers})).await.status, 200);
    assert_eq!(post_json(a.addr, "/allocate", &big_vm(&uuid(9, 0))).await.status, 200);
    // Quiet for longer than the bound, then the feed's connection is cut.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let cut = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'";
    assert_eq!(pg.psql("feedlost", cut), "1");
    let started = Instant::now();
    let ping = loop {
        let ping = send(a.addr, "GET", "/ping", &[], b"").await.json();
        if ping["inventory"]["state"] != json!("following") {
            break ping;
        }
        assert!(started.elapsed() < Duration::from_secs(2), "the loss was never noticed: {ping}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    assert_eq!(ping["inventory"]["state"], json!("catching-up"), "{ping}");
    let reply = post_json(a.addr, "/allocate", &big_vm(&uuid(9, 1))).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
}
