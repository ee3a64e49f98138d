//! Properties over generated input: requests from the vendored conformance cases, randomly
//! mutated (fields dropped, types swapped, numbers out of range), fed to the engine.
//!
//! * nothing panics, and an engine error never happens on input that passed validation;
//! * a chosen server survived every hard filter of the top-level chain;
//! * the same request, config and seed give the same answer.
//!
//! `PROPTEST_CASES=5000 cargo test --release --test properties` runs a longer search.

use std::path::Path;
use std::sync::OnceLock;

use dapi::engine::{Engine, Expr};
use dapi::model::parse_allocate_body;
use dapi::plugins::Kind;
use dapi::validate::validate_allocate;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

struct Case {
    engine: Engine,
    request: Value,
}

fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
        let mut paths: Vec<_> =
            std::fs::read_dir(dir).expect("cases").filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        paths
            .iter()
            .map(|p| {
                let case: Value = serde_json::from_str(&std::fs::read_to_string(p).expect("read")).expect("json");
                let engine = Engine::from_config(&case["config"]).expect("case config");
                Case { engine, request: case["request"].clone() }
            })
            .collect()
    })
}

/// A random JSON value of any type, including awkward numbers.
fn random_value(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..10) {
        0 => Value::Null,
        1 => json!(rng.gen::<bool>()),
        2 => json!(-rng.gen_range(0..1_000_000)),
        3 => json!(1e300),
        4 => json!(rng.gen::<f64>()),
        5 => json!(""),
        6 => json!("not-a-uuid"),
        7 => json!([]),
        8 => json!({}),
        _ => json!(u64::MAX),
    }
}

/// Applies one mutation at a random place of `value`.
fn mutate(value: &mut Value, rng: &mut StdRng, depth: usize) {
    let descend = depth < 6 && rng.gen_bool(0.75);
    match value {
        Value::Object(map) if !map.is_empty() => {
            let i = rng.gen_range(0..map.len());
            let key = map.keys().nth(i).cloned().unwrap_or_default();
            if descend {
                if let Some(child) = map.get_mut(&key) {
                    return mutate(child, rng, depth + 1);
                }
            }
            if rng.gen_bool(0.5) {
                map.shift_remove(&key);
            } else {
                map.insert(key, random_value(rng));
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.gen_range(0..items.len());
            if descend {
                return mutate(&mut items[i], rng, depth + 1);
            }
            if rng.gen_bool(0.3) {
                items.remove(i);
            } else {
                items[i] = random_value(rng);
            }
        }
        other => *other = random_value(rng),
    }
}

/// Hard filters at the top level of the chain: the final servers passed each of them.
fn top_level_hard_filters(chain: &Expr) -> Vec<&'static str> {
    match chain {
        Expr::Pipe(items) => items
            .iter()
            .filter_map(|e| match e {
                Expr::Plugin(p) if p.kind() == Kind::HardFilter => Some(p.step()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn allocate(case: &Case, body: &[u8]) -> Option<Value> {
    let mut request = parse_allocate_body(body).ok()?;
    validate_allocate(&mut request).ok()?;
    let allocation = match case.engine.allocate(&request) {
        Ok(a) => a,
        Err(e) => panic!("engine error on validated input: {e}"),
    };
    Some(serde_json::to_value(allocation.answer(&request.raw_servers, &request.servers)).expect("answer serialises"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn mutated_requests_never_break_the_engine(pick in 0usize..1000, seed in any::<u64>(), mutations in 1usize..6) {
        let cases = cases();
        let case = &cases[pick % cases.len()];
        let mut rng = StdRng::seed_from_u64(seed);
        let mut request = case.request.clone();
        for _ in 0..mutations {
            mutate(&mut request, &mut rng, 0);
        }
        if let Value::Object(map) = &mut request {
            map.insert("seed".into(), json!(seed));
        }
        let body = serde_json::to_vec(&request).expect("serialise");
        let Some(answer) = allocate(case, &body) else { return Ok(()) };

        if let Some(uuid) = answer["server"].get("uuid") {
            let steps = answer["steps"].as_array().expect("steps");
            for name in top_level_hard_filters(case.engine.chain()) {
                for step in steps.iter().filter(|s| s["step"] == name) {
                    let remaining = step["remaining"].as_array().expect("remaining");
                    prop_assert!(remaining.contains(uuid), "chosen {uuid} was removed by {name}");
                }
            }
        }
        let again = allocate(case, &body).expect("valid the second time too");
        prop_assert_eq!(&again, &answer);
    }
}
