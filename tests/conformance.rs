//! Replays the vendored subset of the original allocator's recorded decisions
//! (`tests/conformance/cases`, picked so every plugin runs) through the engine and compares
//! the chosen server, every step's name and remaining list, and every step's reasons.
//! The full set lives in `../shared/conformance` and is replayed by `.ci/run`.

use std::path::Path;

use dapi::engine::Engine;
use dapi::validate::validate_allocate;
use dapi::wire::parse_allocate_body;
use serde_json::Value;

fn replay(case: &Value) -> Result<Value, String> {
    let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(&case["request"]).map_err(|e| e.to_string())?;
    let mut request = parse_allocate_body(&body).map_err(|e| format!("{e:?}"))?;
    validate_allocate(&mut request).map_err(|e| format!("{}: {}", e.field, e.message))?;
    let allocation = engine.allocate(&request).map_err(|e| e.to_string())?;
    serde_json::to_value(allocation.answer(&request.raw_servers, &request.servers)).map_err(|e| e.to_string())
}

/// The first difference between the recorded answer and ours, if any.
fn difference(case: &Value, got: &Value) -> Option<String> {
    let expected = &case["expected"];
    let got_uuid = got["server"].get("uuid").cloned().unwrap_or(Value::Null);
    if expected["server_uuid"] != got_uuid {
        return Some(format!("chose {got_uuid}, expected {}", expected["server_uuid"]));
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
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/conformance/cases exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 40, "the vendored subset has at least 40 cases");
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).expect("readable case");
        let case: Value = serde_json::from_str(&text).expect("case is JSON");
        let name = case["name"].as_str().unwrap_or("?").to_string();
        match replay(&case) {
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
