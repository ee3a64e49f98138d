//! With thousands of candidates the engine splits each pass over the servers across the
//! cores (`engine::parallel`); the answer must be exactly the one a single core gives: the
//! same server, the same steps, the same reasons in the same order.

use dapi::engine::{parallel, StepsFormat};
use serde_json::{json, Value};

/// Every vendored case's request.
fn case_requests() -> Vec<Value> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
    let mut requests = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the vendored cases").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("a case");
        let case: Value = serde_json::from_str(&text).expect("a case is JSON");
        requests.push(case["request"].clone());
    }
    assert!(requests.len() > 10, "the vendored cases are there");
    requests
}

#[test]
fn many_servers_split_across_the_cores_decide_as_on_one() {
    let requests = case_requests();
    // The servers of every case under fresh uuids, repeated well past the size from which
    // passes are split: they fail different filters for different reasons.
    let every_server: Vec<Value> =
        requests.iter().flat_map(|r| r["servers"].as_array().cloned().unwrap_or_default()).collect();
    let copies = (4 * parallel::PARALLEL_FROM).div_ceil(every_server.len().max(1));
    let mut servers = Vec::new();
    for copy in 0..copies {
        for (i, server) in every_server.iter().enumerate() {
            let mut server = server.clone();
            if server.is_object() {
                server["uuid"] = json!(format!("{copy:08x}-0000-4000-8000-{i:012x}"));
            }
            servers.push(server);
        }
    }
    let config = dapi::config::ServiceConfig::load(None, Vec::new()).expect("the default config");
    let engine = config.engine().expect("an engine");
    let mut decided = 0;
    for (n, request) in requests.iter().enumerate() {
        let mut request = request.clone();
        request["servers"] = json!(servers);
        request["seed"] = json!(n);
        let body = serde_json::to_vec(&request).expect("a body");
        let Ok(mut parsed) = dapi::wire::parse_allocate_body(&body) else { continue };
        if dapi::validate::validate_allocate(&mut parsed).is_err() {
            continue;
        }
        let split = engine.allocate(&parsed).expect("an allocation");
        let single = parallel::on_one_core(|| engine.allocate(&parsed)).expect("an allocation");
        let answer = |allocation: &dapi::engine::Allocation| {
            allocation.answer_json(&parsed, StepsFormat::Full).expect("an answer")
        };
        assert!(answer(&split) == answer(&single), "case {n}: the answers differ");
        decided += 1;
    }
    assert!(decided > 10, "only {decided} requests were decided");
}
