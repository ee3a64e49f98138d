//! Batch allocation (`vms: [...]` or `count: N` in `POST /allocate`, `dapi allocate
//! --count`): VMs placed in order, each seeing the ones before it.

mod common;

use std::collections::HashMap;

use common::{example_request, post_json, start};
use dapi::answer::{self, AnswerOptions};
use dapi::batch::BatchOptions;
use dapi::config::ServiceConfig;
use dapi::outcome::{AnswerError, Verdict};
use serde_json::{json, Value};

fn engine() -> (dapi::engine::Engine, dapi::config::Limits) {
    let config = ServiceConfig::load(None, Vec::new()).expect("built-in config");
    (config.engine().expect("engine"), config.limits)
}

fn run(body: &Value, options: BatchOptions) -> Result<(Verdict, Value), AnswerError> {
    let (engine, limits) = engine();
    let bytes = serde_json::to_vec(body).expect("json");
    let answer = answer::allocate_with(&engine, &limits, &bytes, AnswerOptions::default(), options, None)?;
    Ok((answer.verdict, serde_json::from_slice(&answer.body).expect("json answer")))
}

/// Unreserved RAM (MiB) per server uuid, as `/capacity` reports it.
fn unreserved_ram(body: &Value) -> HashMap<String, f64> {
    let (engine, limits) = engine();
    let bytes = serde_json::to_vec(body).expect("json");
    let answer = answer::capacity(&engine, &limits, &bytes, false).expect("capacity");
    let v: Value = serde_json::from_slice(&answer.body).expect("json");
    v["capacities"]
        .as_object()
        .expect("capacities")
        .iter()
        .map(|(k, c)| (k.clone(), c["ram"].as_f64().unwrap_or(0.0)))
        .collect()
}

fn with_ram(ram: u64) -> Value {
    let mut body = example_request();
    body["vm"]["ram"] = json!(ram);
    body["vm"]["max_physical_memory"] = json!(ram);
    body["package"]["max_physical_memory"] = json!(ram);
    body
}

#[test]
fn a_batch_never_books_a_server_beyond_its_room() {
    let ram = 180_000;
    let mut body = with_ram(ram);
    let room = unreserved_ram(&body);
    let fits: usize = room.values().map(|r| (r / ram as f64).floor() as usize).sum();
    assert!(fits >= 4, "the example's servers hold {fits} such VMs");
    body["count"] = json!(fits + 3);
    let (verdict, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(verdict.status(), 200);
    let vms = answer["vms"].as_array().expect("vms");
    assert_eq!(vms.len(), fits + 3);
    let mut per_server: HashMap<String, usize> = HashMap::new();
    for vm in vms {
        if let Some(s) = vm["server_uuid"].as_str() {
            *per_server.entry(s.to_string()).or_default() += 1;
        }
    }
    for (server, n) in &per_server {
        assert!((*n as f64) * ram as f64 <= room[server], "{server} got {n} VMs of {ram} MiB, room {}", room[server]);
    }
    // The datacenter fills exactly: every VM that fits is placed, the rest are refused for RAM.
    assert_eq!((answer["placed"].as_u64(), answer["failed"].as_u64()), (Some(fits as u64), Some(3)));
    for vm in &vms[fits..] {
        assert_eq!(vm["server_uuid"], Value::Null);
        assert_eq!(vm["message"], "No compute resources available: no servers with enough unreserved RAM");
    }
    // Uuids are generated, all different.
    let mut uuids: Vec<&str> = vms.iter().filter_map(|v| v["uuid"].as_str()).collect();
    uuids.sort();
    uuids.dedup();
    assert_eq!(uuids.len(), fits + 3);
}

fn tagged_vms(n: usize, averse: bool) -> Value {
    let mut body = example_request();
    let vm = body.as_object_mut().expect("object").remove("vm").expect("vm");
    let vms: Vec<Value> = (0..n)
        .map(|i| {
            let mut v = vm.clone();
            v["vm_uuid"] = json!(format!("5e1ec7ed-0000-4000-8000-{i:012x}"));
            v["alias"] = json!(format!("web{i}"));
            v["tags"] = json!({"role": "web"});
            if averse && i > 0 {
                v["affinity"] =
                    json!([{"key": "role", "operator": "!=", "value": "web", "valueType": "exact", "isSoft": false}]);
            }
            v
        })
        .collect();
    body["vms"] = Value::Array(vms);
    body
}

#[test]
fn anti_affinity_holds_among_the_vms_of_a_batch() {
    let servers = example_request()["servers"].as_array().expect("servers").len();
    let (_, answer) = run(&tagged_vms(servers + 1, true), BatchOptions::default()).expect("answered");
    let vms = answer["vms"].as_array().expect("vms");
    let chosen: Vec<&str> = vms.iter().filter_map(|v| v["server_uuid"].as_str()).collect();
    let mut distinct = chosen.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(chosen.len(), servers, "{answer}");
    assert_eq!(distinct.len(), servers, "two tagged VMs share a server: {chosen:?}");
    assert_eq!(vms[servers]["server_uuid"], Value::Null);
    assert_eq!(vms[servers]["uuid"], "5e1ec7ed-0000-4000-8000-000000000004");
    // Without the rule they stack (the same VMs, same seed).
    let (_, free) = run(&tagged_vms(servers + 1, false), BatchOptions::default()).expect("answered");
    assert_eq!(free["placed"], json!(servers + 1));
}

#[test]
fn all_or_nothing_answers_409_and_places_nothing() {
    let servers = example_request()["servers"].as_array().expect("servers").len();
    let mut body = tagged_vms(servers + 1, true);
    body["all_or_nothing"] = json!(true);
    let (verdict, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(verdict.status(), 409);
    assert_eq!(answer["code"], "NoAllocatableServersError");
    assert_eq!(answer["placed"], 0);
    assert_eq!(answer["failed"]["index"], json!(servers));
    assert!(answer.get("vms").is_none());
    let msg = answer["message"].as_str().expect("message");
    assert!(msg.contains(&format!("vms[{servers}]")), "{msg}");
    // When everything fits it is an ordinary 200.
    let mut fits = tagged_vms(servers, true);
    fits["all_or_nothing"] = json!(true);
    let (verdict, answer) = run(&fits, BatchOptions::default()).expect("answered");
    assert_eq!((verdict.status(), answer["placed"].as_u64()), (200, Some(servers as u64)));
}

#[test]
fn steps_are_compact_unless_asked_for_in_full() {
    let mut body = example_request();
    body["count"] = json!(2);
    let (_, compact) = run(&body, BatchOptions::default()).expect("answered");
    assert!(compact["vms"][0]["steps"][0].get("removed").is_some());
    let full = BatchOptions { steps: Some(dapi::engine::StepsFormat::Full), count: None };
    let (_, full) = run(&body, full).expect("answered");
    assert!(full["vms"][0]["steps"][0].get("remaining").is_some());
    // Full steps for a big batch would take gigabytes: refused, naming `steps`.
    let mut big = example_request();
    big["count"] = json!(1000);
    let servers = big["servers"].as_array().expect("servers").clone();
    let mut many = Vec::new();
    for i in 0..1001 {
        let mut s = servers[i % servers.len()].clone();
        s["uuid"] = json!(format!("00000000-0000-4000-8000-{i:012x}"));
        many.push(s);
    }
    big["servers"] = Value::Array(many);
    let full = BatchOptions { steps: Some(dapi::engine::StepsFormat::Full), count: None };
    match run(&big, full) {
        Err(AnswerError::Invalid(errors)) => assert_eq!(errors[0].field, "steps"),
        other => panic!("expected 422, got {:?}", other.map(|(v, _)| v)),
    }
    // `--count` on a single request makes it a batch too.
    let single = example_request();
    let (_, counted) = run(&single, BatchOptions { steps: None, count: Some(3) }).expect("answered");
    assert_eq!(counted["vms"].as_array().map(Vec::len), Some(3));
}

fn invalid_field(body: &Value) -> String {
    match run(body, BatchOptions::default()) {
        Err(AnswerError::Invalid(errors)) => errors[0].field.clone(),
        other => panic!("expected 422, got {other:?}"),
    }
}

#[test]
fn bad_batch_fields_are_named() {
    let mut body = tagged_vms(4, false);
    body["vms"][3]["ram"] = json!("lots");
    assert_eq!(invalid_field(&body), "vms[3].ram");
    let mut body = tagged_vms(2, false);
    body["vms"][1]["vm_uuid"] = json!("not-a-uuid");
    assert_eq!(invalid_field(&body), "vms[1].vm_uuid");
    let mut body = tagged_vms(2, false);
    body["vms"][1]["vm_uuid"] = body["vms"][0]["vm_uuid"].clone();
    assert_eq!(invalid_field(&body), "vms[1].vm_uuid");
    let mut body = tagged_vms(2, false);
    body["vms"][0]["package"] = json!(7);
    assert_eq!(invalid_field(&body), "vms[0].package");
    let mut body = tagged_vms(2, false);
    body["vms"][1] = json!("vm");
    assert_eq!(invalid_field(&body), "vms[1]");
    let mut body = example_request();
    body["vms"] = json!({});
    assert_eq!(invalid_field(&body), "vms");
    for count in [json!(0), json!(1.5), json!("3"), json!(100_000)] {
        let mut body = example_request();
        body["count"] = count;
        assert_eq!(invalid_field(&body), "count");
    }
    let mut body = example_request();
    body["count"] = json!(2);
    body["all_or_nothing"] = json!("yes");
    assert_eq!(invalid_field(&body), "all_or_nothing");
    let mut body = example_request();
    body.as_object_mut().expect("object").remove("vm");
    body["count"] = json!(2);
    assert_eq!(invalid_field(&body), "vm");
}

/// A VM's own tags are checked as its own whatever the top-level ones; the top-level ones
/// are named as the top level's (before, a VM's own `"nic_tags": "abc"` beside top-level tags
/// went unchecked to the engine: a 500).
#[test]
fn a_batch_vms_own_nic_tags_and_the_top_level_ones_are_named_apart() {
    let message = |body: &Value| match run(body, BatchOptions::default()) {
        Err(AnswerError::Invalid(errors)) => (errors[0].field.clone(), errors[0].message.clone()),
        other => panic!("expected 422, got {other:?}"),
    };
    for top in [None, Some(json!(["external"]))] {
        for (own, expected) in [
            (json!("abc"), r#"VM "nic_tags" is not an array"#),
            (json!(["external", 1]), r#"VM "nic_tags" contains invalid type in array"#),
        ] {
            let mut body = tagged_vms(2, false);
            body["vms"][1]["nic_tags"] = own;
            if let Some(top) = &top {
                body["nic_tags"] = top.clone();
            }
            assert_eq!(message(&body), ("vms[1].nic_tags".to_string(), expected.to_string()), "top {top:?}");
        }
    }
    // Bad top-level tags are named so, whether a VM takes them or has its own.
    for strip in [false, true] {
        let mut body = tagged_vms(2, false);
        if strip {
            body["vms"][1].as_object_mut().map(|vm| vm.remove("nic_tags"));
        }
        body["nic_tags"] = json!(["external", 1]);
        assert_eq!(message(&body), ("nic_tags".to_string(), "invalid nic_tag".to_string()), "strip {strip}");
    }
    let mut body = example_request();
    body["count"] = json!(2);
    body["nic_tags"] = json!(["external", 1]);
    assert_eq!(message(&body), ("nic_tags".to_string(), "invalid nic_tag".to_string()));
}

#[test]
fn each_vm_may_bring_its_own_package() {
    let ram = 180_000;
    let mut body = tagged_vms(2, false);
    // The first asks for more RAM than any server has; the second for the shared package's.
    body["vms"][0]["ram"] = json!(10_000_000);
    body["vms"][0]["package"] = json!({"max_physical_memory": 10_000_000, "cpu_cap": 50, "quota": 12288});
    body["vms"][1]["ram"] = json!(ram);
    let (_, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(answer["vms"][0]["server_uuid"], Value::Null);
    assert!(answer["vms"][1]["server_uuid"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_places_a_batch_and_a_single_vm_as_before() {
    let service = start(&[]).await;
    let mut body = tagged_vms(3, true);
    body["seed"] = json!(7);
    let reply = post_json(service.addr, "/allocate", &body).await;
    assert_eq!(reply.status, 200, "{}", String::from_utf8_lossy(&reply.body));
    let answer = reply.json();
    assert_eq!(answer["placed"], 3);
    assert!(answer["vms"][0]["steps"][0].get("removed").is_some());
    let reply = post_json(service.addr, "/allocate?steps=full", &body).await;
    assert!(reply.json()["vms"][0]["steps"][0].get("remaining").is_some());

    let mut bad = tagged_vms(2, false);
    bad["vms"][1]["ram"] = json!(-1);
    let reply = post_json(service.addr, "/allocate", &bad).await;
    assert_eq!(reply.status, 422);
    assert!(String::from_utf8_lossy(&reply.body).contains("vms[1].ram"), "{}", String::from_utf8_lossy(&reply.body));

    let mut aon = tagged_vms(5, true);
    aon["all_or_nothing"] = json!(true);
    let reply = post_json(service.addr, "/allocate", &aon).await;
    assert_eq!(reply.status, 409);

    let reply = post_json(service.addr, "/allocate", &example_request()).await;
    assert_eq!(reply.status, 200);
    let single = reply.json();
    assert!(single["server"]["uuid"].is_string() && single.get("vms").is_none());
}

/// A VM of a fractional size is placed (its payload is valid), and so is the next: the VMs
/// a batch places are not held to the schema of the VMs callers send, whose
/// `max_physical_memory` is whole (before, the first VM made its server invalid, and the
/// second found no server).
#[test]
fn vms_of_a_fractional_size_are_placed_one_after_another() {
    let mut body = with_ram(1024);
    body["vm"]["ram"] = json!(1024.5);
    body["vm"]["max_physical_memory"] = json!(1024.5);
    body["package"]["max_physical_memory"] = json!(1024.5);
    let servers = body["servers"].as_array().expect("servers").len();
    body["count"] = json!(servers + 2);
    let (verdict, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(verdict.status(), 200, "{answer}");
    let vms = answer["vms"].as_array().expect("vms");
    assert_eq!(vms.len(), servers + 2);
    assert!(vms.iter().all(|vm| vm["server_uuid"].is_string()), "{answer}");
}

/// A batch asked to be explained is refused, naming `explain`, rather than answered without
/// the member asked for; over HTTP too, where `why_not` asks for it as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_not_explained_but_refused() {
    let (engine, limits) = engine();
    let mut body = example_request();
    body["count"] = json!(2);
    let bytes = serde_json::to_vec(&body).expect("json");
    let asked = Some(dapi::explain::ExplainOptions::default());
    match answer::allocate_with(&engine, &limits, &bytes, AnswerOptions::default(), BatchOptions::default(), asked) {
        Err(AnswerError::Invalid(errors)) => assert_eq!(errors[0].field, "explain"),
        other => panic!("expected 422, got {other:?}"),
    }
    let service = start(&[]).await;
    for query in ["?explain=true", "?why_not=00000000-0000-4000-8000-000000000000"] {
        let reply = post_json(service.addr, &format!("/allocate{query}"), &body).await;
        let text = String::from_utf8_lossy(&reply.body).into_owned();
        assert_eq!(reply.status, 422, "{text}");
        assert!(text.contains("explain"), "{text}");
    }
    assert_eq!(post_json(service.addr, "/allocate", &body).await.status, 200);
}

/// A VM of `vms` named by `uuid` alone is placed under it (it was refused: `"vm.vm_uuid" is
/// an invalid UUID`, about a field it did not send).
#[test]
fn a_vm_given_by_its_uuid_alone_is_placed_under_it() {
    let mut body = example_request();
    let vm = body["vm"].clone();
    let mut by_uuid = vm.clone();
    by_uuid.as_object_mut().expect("vm").remove("vm_uuid");
    by_uuid["uuid"] = json!("0b2f6a7e-5a43-4d8e-9a40-6f1c2f0d7c11");
    body["vms"] = json!([by_uuid]);
    let (verdict, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(verdict.status(), 200, "{answer}");
    assert_eq!(answer["vms"][0]["uuid"], "0b2f6a7e-5a43-4d8e-9a40-6f1c2f0d7c11");
    assert!(answer["vms"][0]["server_uuid"].is_string(), "{answer}");
}

/// With `vms`, the request's `vm` gives nothing to them (its NIC tags made every VM without
/// its own fail); the top-level `nic_tags` still apply to each.
#[test]
fn a_batch_of_vms_takes_nothing_from_vm() {
    let mut body = example_request();
    let mut own = body["vm"].clone();
    own.as_object_mut().expect("vm").remove("nic_tags");
    body["vms"] = json!([own]);
    body["vm"]["nic_tags"] = json!(["no_such_tag"]);
    body["vm"]["ram"] = json!(-1);
    let (verdict, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!((verdict.status(), answer["placed"].as_u64()), (200, Some(1)), "{answer}");
    body["nic_tags"] = json!(["no_such_tag"]);
    let (_, answer) = run(&body, BatchOptions::default()).expect("answered");
    assert_eq!(answer["placed"], 0, "{answer}");
    assert!(answer["vms"][0]["message"].as_str().is_some_and(|m| m.contains("NIC")), "{answer}");
}
