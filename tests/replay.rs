//! Recording, `dapi replay` and the shadow config, end to end: the real service records
//! requests sent over HTTP, the `dapi` process replays the directory, and the shadow's
//! counters are read on `/metrics`.

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::{dapi, example_request, metric, post_json, replay, start, start_with};
use serde_json::{json, Value};

/// A fresh directory under the system's temporary one.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-replay-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

/// Waits (up to 10 s) until a counter reaches `at_least`, and returns it.
async fn wait_for(addr: SocketAddr, sample: &str, at_least: u64) -> u64 {
    for _ in 0..200 {
        let n = metric(addr, sample).await;
        if n >= at_least {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metric(addr, sample).await
}

/// Requests of several kinds: chosen (various RAM, seeded or not, compact steps,
/// explained), a no fit, and a batch.
async fn send_requests(addr: SocketAddr) -> usize {
    let mut sent = 0;
    for (i, ram) in [512, 1024, 2048, 4096, 8192].into_iter().enumerate() {
        let mut req = example_request();
        req["vm"]["ram"] = json!(ram);
        if i % 2 == 0 {
            req["seed"] = json!(i);
        }
        let path = match i {
            1 => "/allocate?steps=removed",
            3 => "/allocate?explain=true",
            _ => "/allocate",
        };
        assert_eq!(post_json(addr, path, &req).await.status, 200);
        sent += 1;
    }
    let mut no_fit = example_request();
    no_fit["vm"]["ram"] = json!(100_000_000);
    assert_eq!(post_json(addr, "/allocate", &no_fit).await.status, 409);
    let mut batch = example_request();
    batch["count"] = json!(3);
    assert_eq!(post_json(addr, "/allocate", &batch).await.status, 200);
    // Fits by RAM, but no server has the disk (the built-in chain does not check it).
    let mut huge = example_request();
    huge["vm"]["quota"] = json!(100_000);
    huge["package"]["quota"] = json!(100_000 * 1024);
    assert_eq!(post_json(addr, "/allocate", &huge).await.status, 200);
    sent + 3
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_directory_replays_unchanged_with_its_config_and_changed_with_a_flipped_weight() {
    let dir = tmp("record");
    let records = dir.join("records");
    let s = start(&[("DAPI_RECORD__DIR", records.to_str().expect("utf-8"))]).await;
    let sent = send_requests(s.addr).await as u64;
    assert_eq!(wait_for(s.addr, "dapi_records_written_total", sent).await, sent);
    assert_eq!(metric(s.addr, "dapi_records_dropped_total{reason=\"queue_full\"}").await, 0);

    // The same (built-in) config: nothing changes, and every answer is reproduced.
    let same = replay(&records, None);
    assert_eq!(same["replayed"], sent, "{same}");
    assert_eq!(same["changed"], 0, "{same}");
    assert_eq!(same["not_reproduced"], 0, "{same}");
    assert_eq!(same["failed"], 0, "{same}");

    // Least unreserved RAM preferred: winners change, and the RAM scorer is why.
    let flipped = dir.join("flipped.json");
    std::fs::write(&flipped, r#"{"defaults": {"weight_unreserved_ram": -2}}"#).expect("write");
    let report = replay(&records, Some(&flipped));
    assert_eq!(report["replayed"], sent, "{report}");
    let changes = report["changes"].as_array().expect("changes");
    assert!(!changes.is_empty(), "{report}");
    for change in changes {
        let difference = &change["difference"];
        match difference["kind"].as_str() {
            Some("scores") => {
                assert_eq!(difference["decisive"], "score-unreserved-ram", "{change}");
                assert_eq!(change["replayed"]["server"], difference["replayed_winner"], "{change}");
            }
            // A batch's decision is its counts; the VMs that moved are listed.
            Some("batch") => assert!(!difference["vms"].as_array().expect("vms").is_empty(), "{change}"),
            _ => panic!("a weight change is explained by the scores: {change}"),
        }
        if difference["kind"] != "batch" {
            assert_ne!(change["recorded"], change["replayed"], "{change}");
        }
    }
    // The no fit stays one: no weight makes RAM appear.
    assert!(changes.iter().all(|c| c["recorded"].get("no_fit").is_none()), "{report}");

    // A filter added (minimum disk) that only the huge-quota request fails: that decision,
    // and no other, changes, at the added step.
    let chain: Value = serde_json::from_str(include_str!("../config/default.json")).expect("built-in config");
    let mut chain = chain["allocationDescription"].clone();
    let steps = chain.as_array_mut().expect("pipe");
    let at = steps.iter().position(|p| p == "hard-filter-min-cpu").expect("min-cpu in the chain");
    steps.insert(at + 1, json!("hard-filter-min-disk"));
    let filtered = dir.join("filtered.json");
    std::fs::write(&filtered, json!({"allocationDescription": chain}).to_string()).expect("write");
    let report = replay(&records, Some(&filtered));
    assert_eq!(report["changed"], 1, "{report}");
    let change = &report["changes"][0];
    assert!(change["recorded"]["server"].is_string(), "{change}");
    assert!(change["replayed"]["no_fit"].as_str().is_some_and(|r| r.contains("unreserved disk")), "{change}");
    let difference = &change["difference"];
    assert_eq!(difference["kind"], "step", "{change}");
    assert_eq!(difference["change"], "added", "{change}");
    assert_eq!(difference["plugin"], "hard-filter-min-disk", "{change}");
    assert_eq!(difference["index"], at + 1, "{change}");
    assert_eq!(difference["only_recorded"].as_array().map(Vec::len), Some(4), "{change}");
    let out = dapi().arg("replay").arg(&records).arg("--config").arg(&filtered).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 decisions changed"), "{text}");
    assert!(
        text.contains("hard-filter-min-disk (Servers with enough unreserved disk): a step only the new chain has"),
        "{text}"
    );

    // The recorded configs gone (a directory copied without them): the records are still
    // compared with their recorded decisions, but the exit says they could not be checked.
    std::fs::remove_dir_all(records.join("configs")).expect("configs removed");
    let out = dapi().arg("replay").arg(&records).arg("--json").output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{sent} of its records could not be checked against their recorded config")),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report, as JSON");
    assert_eq!(report["without_config"], sent, "{report}");
    assert_eq!(report["changed"], 0, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_bounds_drop_the_oldest() {
    let dir = tmp("bounds");
    let s = start(&[("DAPI_RECORD__DIR", dir.to_str().expect("utf-8")), ("DAPI_RECORD__MAX_COUNT", "3")]).await;
    for (i, ram) in [512, 1024, 2048, 4096, 8192].into_iter().enumerate() {
        let mut req = example_request();
        req["vm"]["ram"] = json!(ram);
        assert_eq!(post_json(s.addr, "/allocate", &req).await.status, 200);
        // A record is offered after its answer has left, so the next request could be
        // recorded first: wait for each, so that the oldest is known.
        assert_eq!(wait_for(s.addr, "dapi_records_written_total", i as u64 + 1).await, i as u64 + 1);
    }
    assert_eq!(metric(s.addr, "dapi_records_removed_total").await, 2);
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert_eq!(names, ["000000000003.json", "000000000004.json", "000000000005.json"]);
    // The newest is the 8192 MiB request.
    let last: Value = serde_json::from_slice(&std::fs::read(dir.join(&names[2])).expect("read")).expect("JSON");
    assert_eq!(last["body"]["vm"]["ram"], 8192);
    assert_eq!(last["status"], 200);
    assert!(last["decision"]["server"].is_string(), "{last}");
    assert_eq!(last["answer_digest"].as_str().map(str::len), Some(16));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts the service with `shadow` as its shadow config file, sends four requests and
/// returns (evaluations, divergences) once the four are evaluated.
async fn shadowed(name: &str, shadow: &str) -> (u64, u64) {
    let dir = tmp(name);
    let file = dir.join("shadow.json");
    std::fs::write(&file, shadow).expect("write");
    let s = start(&[("DAPI_SHADOW_CONFIG", file.to_str().expect("utf-8"))]).await;
    for ram in [512, 1024, 2048, 4096] {
        let mut req = example_request();
        req["vm"]["ram"] = json!(ram);
        assert_eq!(post_json(s.addr, "/allocate", &req).await.status, 200);
    }
    let evaluations = wait_for(s.addr, "dapi_shadow_evaluations_total", 4).await;
    let skipped = metric(s.addr, "dapi_shadow_skipped_total{reason=\"busy\"}").await
        + metric(s.addr, "dapi_shadow_skipped_total{reason=\"budget\"}").await;
    assert_eq!(evaluations + skipped, 4);
    let divergences = metric(s.addr, "dapi_shadow_divergences_total").await;
    let _ = std::fs::remove_dir_all(&dir);
    (evaluations, divergences)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_divergences_are_counted_when_the_shadow_config_differs() {
    let (evaluations, divergences) = shadowed("same", "{}").await;
    assert_eq!(evaluations, 4);
    assert_eq!(divergences, 0);
    let (evaluations, divergences) = shadowed("flipped", r#"{"defaults": {"weight_unreserved_ram": -2}}"#).await;
    assert_eq!(evaluations, 4);
    assert!(divergences >= 1, "{divergences}");
}

/// Starts the service with `shadow` as its shadow config file, sends a batch of five VMs
/// (`count`) and one of three (`vms`, one without a uuid), and returns (evaluations,
/// divergences, VMs placed differently) once both are evaluated.
async fn shadowed_batches(name: &str, shadow: &str) -> (u64, u64, u64) {
    let dir = tmp(name);
    let file = dir.join("shadow.json");
    std::fs::write(&file, shadow).expect("write");
    let s = start(&[("DAPI_SHADOW_CONFIG", file.to_str().expect("utf-8"))]).await;
    let mut counted = example_request();
    counted["count"] = json!(5);
    counted["vm"]["ram"] = json!(8192);
    assert_eq!(post_json(s.addr, "/allocate", &counted).await.status, 200);
    let mut listed = example_request();
    let vm = listed["vm"].clone();
    let mut unnamed = vm.clone();
    unnamed.as_object_mut().expect("object").remove("vm_uuid");
    unnamed.as_object_mut().expect("object").remove("uuid");
    let mut third = vm.clone();
    third["vm_uuid"] = json!("5f4f6f35-3b3c-4b41-9a3c-3d3b8c0e0b03");
    third["uuid"] = third["vm_uuid"].clone();
    third["ram"] = json!(4096);
    listed["vms"] = json!([vm, unnamed, third]);
    listed.as_object_mut().expect("object").remove("vm");
    let answer = post_json(s.addr, "/allocate", &listed).await;
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    let evaluations = wait_for(s.addr, "dapi_shadow_evaluations_total", 2).await;
    let skipped = metric(s.addr, "dapi_shadow_skipped_total{reason=\"busy\"}").await
        + metric(s.addr, "dapi_shadow_skipped_total{reason=\"budget\"}").await;
    assert_eq!(evaluations + skipped, 2);
    assert_eq!(metric(s.addr, "dapi_shadow_failures_total").await, 0);
    let divergences = metric(s.addr, "dapi_shadow_divergences_total").await;
    let vms = metric(s.addr, "dapi_shadow_batch_vm_divergences_total").await;
    let _ = std::fs::remove_dir_all(&dir);
    (evaluations, divergences, vms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_shadowed_vm_by_vm() {
    // The same config places every VM of both batches as the answer did (the generated
    // uuids included: the shadow places the same VMs).
    assert_eq!(shadowed_batches("batch-same", "{}").await, (2, 0, 0));
    // Least unreserved RAM preferred: VMs of the batches land elsewhere.
    let (evaluations, divergences, vms) =
        shadowed_batches("batch-flipped", r#"{"defaults": {"weight_unreserved_ram": -2}}"#).await;
    assert_eq!(evaluations, 2);
    assert!(divergences >= 1, "{divergences}");
    assert!(vms >= divergences, "{vms} VMs in {divergences} batches");
}

/// A script checking a new config cannot take a wrong directory, or records it could not
/// replay, for "nothing changes": both exit 2, saying why (the report is still printed).
#[test]
fn replaying_nothing_or_a_broken_record_exits_2() {
    let dir = tmp("nothing");
    let out = dapi().arg("replay").arg(&dir).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds no recorded requests"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Replayed 0 recorded requests"));

    // A request body where a record should be: reported, and the exit says so.
    std::fs::write(dir.join("000000000001.json"), example_request().to_string()).expect("write");
    let out = dapi().arg("replay").arg(&dir).arg("--json").output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("1 of its records could not be replayed"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report, as JSON");
    assert_eq!((report["replayed"].as_u64(), report["failed"].as_u64()), (Some(0), Some(1)), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_shadow_config_or_record_dir_stops_start_up_naming_it() {
    let dir = tmp("bad");
    let missing = dir.join("no-such-shadow.json");
    let out = dapi()
        .arg("serve")
        .env("DAPI_SHADOW_CONFIG", &missing)
        .env("DAPI_LISTEN", "127.0.0.1:0")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("DAPI_SHADOW_CONFIG: shadow_config"), "{stderr}");
    assert!(stderr.contains("no-such-shadow.json"), "{stderr}");

    let bad_chain = dir.join("bad-chain.json");
    std::fs::write(&bad_chain, r#"{"allocationDescription": ["pipe", "no-such-plugin"]}"#).expect("write");
    let config = dir.join("config.json");
    std::fs::write(&config, json!({"shadow_config": bad_chain}).to_string()).expect("write");
    let out =
        dapi().arg("serve").arg("--config").arg(&config).env("DAPI_LISTEN", "127.0.0.1:0").output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("shadow_config") && stderr.contains("bad-chain.json"), "{stderr}");
    assert!(stderr.contains("Unrecognized algorithm: no-such-plugin"), "{stderr}");

    // A record.dir under a file cannot be created.
    let file = dir.join("a-file");
    std::fs::write(&file, b"").expect("write");
    let out = dapi()
        .arg("serve")
        .env("DAPI_RECORD__DIR", file.join("records"))
        .env("DAPI_LISTEN", "127.0.0.1:0")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("DAPI_RECORD__DIR") && stderr.contains("cannot be created"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_reloads_the_shadow_config_and_refuses_a_bad_one() {
    let dir = tmp("reload");
    let shadow = dir.join("shadow.json");
    std::fs::write(&shadow, "{}").expect("write");
    let config = dir.join("config.json");
    std::fs::write(&config, json!({"shadow_config": shadow}).to_string()).expect("write");
    let s = start_with(Some(&config), &[]).await;
    std::fs::write(&shadow, r#"{"allocationDescription": ["pipe", "no-such-plugin"]}"#).expect("write");
    let err = s.app.reload().expect_err("a bad shadow config is refused").to_string();
    assert!(err.contains("shadow_config") && err.contains("no-such-plugin"), "{err}");
    // The old shadow stays and still agrees; a valid new one that differs is taken.
    std::fs::write(&shadow, r#"{"defaults": {"weight_unreserved_ram": -2}}"#).expect("write");
    s.app.reload().expect("a valid shadow config is taken");
    for ram in [512, 1024, 2048, 4096] {
        let mut req = example_request();
        req["vm"]["ram"] = json!(ram);
        assert_eq!(post_json(s.addr, "/allocate", &req).await.status, 200);
    }
    let evaluations = wait_for(s.addr, "dapi_shadow_evaluations_total", 4).await;
    assert_eq!(evaluations, 4);
    assert!(metric(s.addr, "dapi_shadow_divergences_total").await >= 1);
    let _ = std::fs::remove_dir_all(&dir);
}
