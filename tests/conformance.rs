//! Replays the vendored subset of the original allocator's recorded decisions
//! (`tests/conformance/cases`, picked so every plugin runs) through the engine and compares
//! the chosen server (its uuid, and the whole object as the original returned it), every
//! step's name and remaining list, and every step's reasons.
//! The full set lives in `../shared/conformance` and is replayed by `.ci/run`.
//!
//! `tests/conformance/custom`: a subset of the cases recorded with three custom plugins
//! installed (their files in `plugins/`), replayed with those files loaded the way
//! `plugins_dir` loads them.

use std::path::Path;

use dapi::engine::{Engine, Registry};
use dapi::validate::validate_allocate;
use dapi::wire::parse_allocate_body;
use serde_json::Value;

fn replay(case: &Value, registry: &Registry) -> Result<Value, String> {
    let engine = Engine::from_config(&case["config"], registry).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(&case["request"]).map_err(|e| e.to_string())?;
    let mut request = parse_allocate_body(&body).map_err(|e| format!("{e:?}"))?;
    validate_allocate(&mut request).map_err(|e| format!("{}: {}", e.field, e.message))?;
    let allocation = engine.allocate(&request).map_err(|e| e.to_string())?;
    serde_json::to_value(allocation.answer(&request.raw_servers, &request.servers)).map_err(|e| e.to_string())
}

/// Fields of the chosen server the allocation computes (checked for type only).
const COMPUTED: &[&str] = &[
    "score",
    "overprovision_ratios",
    "unreserved_cpu",
    "unreserved_ram",
    "unreserved_disk",
    "disk_zone_quota_bytes",
    "disk_kvm_zvol_volsize_bytes",
];

/// The chosen server as the original returned it: the recording's `server` if it has one,
/// else the request's server object without `vms`, each sysinfo NIC carrying its name as
/// `interface` when the NIC tag filter ran (the original wrote the names into the objects).
fn expected_server(case: &Value) -> Value {
    let expected = &case["expected"];
    if let Some(server) = expected.get("server") {
        return server.clone();
    }
    let servers = case["request"]["servers"].as_array().map(Vec::as_slice).unwrap_or_default();
    let Some(mut server) = servers.iter().find(|s| s["uuid"] == expected["server_uuid"]).cloned() else {
        return Value::Null;
    };
    if let Some(obj) = server.as_object_mut() {
        obj.shift_remove("vms");
    }
    let steps = expected["steps"].as_array().map(Vec::as_slice).unwrap_or_default();
    let named = steps
        .iter()
        .any(|st| st["step"] == "Servers supporting required NIC Tags" && st["reasons"].get("skip").is_none());
    let has_nics = server["sysinfo"]["Network Interfaces"].is_object();
    if named && has_nics {
        for key in ["Network Interfaces", "Virtual Network Interfaces"] {
            // (`get_mut`: indexing mutably would insert a missing key.)
            let nics = server.get_mut("sysinfo").and_then(|s| s.get_mut(key)).and_then(Value::as_object_mut);
            if let Some(nics) = nics {
                for (name, nic) in nics.iter_mut() {
                    if let Some(nic) = nic.as_object_mut() {
                        nic.insert("interface".into(), Value::String(name.clone()));
                    }
                }
            }
        }
    }
    server
}

/// The server without its computed fields, as text (so that key order counts too).
fn stripped(server: &Value) -> String {
    let mut s = server.clone();
    if let Some(obj) = s.as_object_mut() {
        obj.retain(|k, _| !COMPUTED.contains(&k.as_str()));
    }
    s.to_string()
}

/// The first difference between the recorded answer and ours, if any.
fn difference(case: &Value, got: &Value) -> Option<String> {
    let expected = &case["expected"];
    let got_uuid = got["server"].get("uuid").cloned().unwrap_or(Value::Null);
    if expected["server_uuid"] != got_uuid {
        return Some(format!("chose {got_uuid}, expected {}", expected["server_uuid"]));
    }
    if !got["server"].is_null() {
        if !got["server"]["score"].is_number() {
            return Some(format!("the chosen server's score is {}", got["server"]["score"]));
        }
        let (want, have) = (stripped(&expected_server(case)), stripped(&got["server"]));
        if want != have {
            let at = want.bytes().zip(have.bytes()).take_while(|(a, b)| a == b).count().saturating_sub(80);
            let (want, have) = (want.get(at..).unwrap_or(&want), have.get(at..).unwrap_or(&have));
            return Some(format!(
                "chosen server differs at byte {at}:\n  expected {want:.300}\n  got      {have:.300}"
            ));
        }
    }
    let (want, have) = (expected["steps"].as_array()?, got["steps"].as_array()?);
    for (i, (w, h)) in want.iter().zip(have).enumerate() {
        if w["step"] != h["step"] || w["remaining"] != h["remaining"] {
            return Some(format!(
                "step {i}: expected {} {}, got {} {}",
                w["step"], w["remaining"], h["step"], h["remaining"]
            ));
        }
        let empty = Value::Object(Default::default());
        let (wr, hr) = (w.get("reasons").unwrap_or(&empty), h.get("reasons").unwrap_or(&empty));
        if wr != hr {
            return Some(format!("step {i} {}: reasons {wr} expected, got {hr}", w["step"]));
        }
    }
    (want.len() != have.len()).then(|| format!("{} steps expected, got {}", want.len(), have.len()))
}

#[test]
fn vendored_cases_match_the_original() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
    replay_all(&dir, &dapi::registry::built_in(), 40);
}

#[test]
fn vendored_custom_plugin_cases_match_the_original() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/custom");
    let (registry, custom) =
        dapi::registry::with_custom(Some(&root.join("plugins")), Default::default()).expect("the plugins load");
    assert_eq!(custom.map(|c| c.files.len()), Some(3));
    replay_all(&root.join("cases"), &registry, 7);
}

fn replay_all(dir: &Path, registry: &Registry, at_least: usize) {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("the cases directory exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= at_least, "the vendored subset has at least {at_least} cases");
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("readable case");
        let case: Value = serde_json::from_str(&text).expect("case is JSON");
        let name = case["name"].as_str().unwrap_or("?").to_string();
        match replay(&case, registry) {
            Ok(got) => {
                if let Some(diff) = difference(&case, &got) {
                    failures.push(format!("{name}: {diff}"));
                }
            }
            Err(e) => failures.push(format!("{name}: error: {e}")),
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), paths.len(), failures.join("\n"));
}
