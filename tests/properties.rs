//! Properties over generated input, fed to the engine: requests built from the models'
//! shapes, and requests from the vendored conformance cases randomly mutated (fields dropped,
//! types swapped, numbers out of range).
//!
//! * nothing panics, and an engine error never happens on input that passed validation;
//! * a chosen server survived every hard filter of the top-level chain;
//! * the same request, config and seed give the same answer.
//!
//! `PROPTEST_CASES=5000 cargo test --release --test properties` runs a longer search. Each
//! run draws a new seed, printed with any failure; `PROPTEST_RNG_SEED=N` replays run N.

use std::path::Path;
use std::sync::OnceLock;

use dapi::engine::Engine;
use dapi::validate::validate_allocate;
use dapi::wire::parse_allocate_body;
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
                let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).expect("case config");
                Case { engine, request: case["request"].clone() }
            })
            .collect()
    })
}

/// A random JSON value of any type, including awkward numbers.
fn random_value(rng: &mut StdRng) -> Value {
    match rng.gen_range(0..14) {
        // Falsy values CNAPI's truthy-only checks let through, and a uuid in an array (which
        // passes a regex test on its string form).
        10 => json!(0),
        11 => json!(false),
        12 => json!(["0a000000-0000-4000-8000-000000000001"]),
        13 => json!({"near": [["0a000000-0000-4000-8000-000000000001"]], "strict": true}),
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

fn allocate(engine: &Engine, body: &[u8]) -> Option<Value> {
    let mut request = parse_allocate_body(body).ok()?;
    validate_allocate(&mut request).ok()?;
    let allocation = match engine.allocate(&request) {
        Ok(a) => a,
        Err(e) => panic!("engine error on validated input: {e}"),
    };
    Some(serde_json::to_value(allocation.answer(&request.raw_servers, &request.servers)).expect("answer serialises"))
}

/// 200 cases unless `PROPTEST_CASES` says otherwise, from a seed that changes per run
/// unless `PROPTEST_RNG_SEED` fixes it; the seed is printed (shown when a test fails).
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200);
    let seed = std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        now.as_nanos() as u64 ^ u64::from(std::process::id())
    });
    eprintln!("proptest: {cases} cases, seed {seed} (replay with PROPTEST_RNG_SEED={seed})");
    ProptestConfig { cases, rng_seed: proptest::test_runner::RngSeed::Fixed(seed), ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

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
        check(&case.engine, &request)?;
    }

    #[test]
    fn generated_requests_never_break_the_engine(request in arb_request()) {
        check(production(), &request)?;
    }
}

/// The engine on the built-in (production) config.
fn production() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let config: Value = serde_json::from_str(dapi::config::DEFAULT_CONFIG).expect("built-in config");
        Engine::from_config(&config, &dapi::registry::built_in()).expect("built-in engine")
    })
}

/// The properties every request must keep: no panic and no engine error on validated input,
/// a chosen server survived every top-level hard filter, and the answer is reproducible.
fn check(engine: &Engine, request: &Value) -> Result<(), TestCaseError> {
    let body = serde_json::to_vec(request).expect("serialise");
    let Some(answer) = allocate(engine, &body) else { return Ok(()) };
    if let Some(uuid) = answer["server"].get("uuid") {
        let steps = answer["steps"].as_array().expect("steps");
        for name in engine.chain().top_level_hard_filters() {
            for step in steps.iter().filter(|s| s["step"] == name) {
                let remaining = step["remaining"].as_array().expect("remaining");
                prop_assert!(remaining.contains(uuid), "chosen {uuid} was removed by {name}");
            }
        }
    }
    let again = allocate(engine, &body).expect("valid the second time too");
    prop_assert_eq!(&again, &answer);
    Ok(())
}

const OWNERS: &[&str] = &["0a000000-0000-4000-8000-000000000001", "0a000000-0000-4000-8000-000000000002"];
const TAGS: &[&str] = &["admin", "external", "internal", "storage"];

fn uuid(n: u32) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// A number, sometimes in a form the lax validator lets through (string, null).
fn loose(range: std::ops::Range<u64>) -> impl Strategy<Value = Value> {
    prop_oneof![
        8 => range.clone().prop_map(|n| json!(n)),
        1 => range.prop_map(|n| json!(n.to_string())),
        1 => Just(Value::Null),
    ]
}

fn arb_vm_on_server() -> impl Strategy<Value = Value> {
    (0..2usize, 1u64..65_536, 0u64..200, prop::option::of(0u64..800), prop::sample::select(vec!["running", "stopped", "failed"]),
        prop::sample::select(vec!["joyent", "lx", "kvm", "bhyve"]))
        .prop_map(|(owner, ram, quota, cap, state, brand)| {
            let mut vm = json!({"owner_uuid": OWNERS[owner], "max_physical_memory": ram, "quota": quota, "state": state, "brand": brand});
            if let Some(c) = cap {
                vm["cpu_cap"] = json!(c);
            }
            vm
        })
}

fn arb_server(n: u32) -> impl Strategy<Value = Value> {
    (
        (prop::bool::weighted(0.9), prop::bool::weighted(0.9), prop::bool::weighted(0.1), prop::bool::weighted(0.1)),
        (loose(1 << 30..1 << 40), 0.0f64..1.2, loose(1 << 36..1 << 42), loose(0..1 << 36)),
        (prop::sample::subsequence(TAGS.to_vec(), 0..4), prop::sample::select(vec!["up", "down", "unknown"])),
        (prop::sample::select(vec!["6.5", "7.0", "7.1"]), 2015u32..2024, 1u64..128),
        prop::collection::vec(arb_vm_on_server(), 0..6),
        prop::option::of(prop::sample::select(vec![json!({}), json!({"ssd": true}), json!({"ssd": false})])),
    )
        .prop_map(
            move |(
                (setup, running, reserved, headnode),
                (mem, ratio, pool, alloc),
                (tags, link),
                (sdc, year, cores),
                vms,
                traits,
            )| {
                let vms: serde_json::Map<String, Value> =
                    vms.into_iter().enumerate().map(|(i, vm)| (uuid(n * 100 + i as u32), vm)).collect();
                let platform = format!("{year}0101T000000Z");
                let mut server = json!({
                    "uuid": uuid(n),
                    "setup": setup,
                    "reserved": reserved,
                    "headnode": headnode,
                    "memory_available_bytes": 1,
                    "memory_total_bytes": mem,
                    "reservation_ratio": ratio,
                    "disk_pool_size_bytes": pool,
                    "disk_pool_alloc_bytes": alloc,
                    "disk_system_used_bytes": 0,
                    "disk_installed_images_used_bytes": 0,
                    "disk_cores_quota_used_bytes": 0,
                    "disk_zone_quota_bytes": 0,
                    "disk_zone_quota_used_bytes": 0,
                    "disk_kvm_quota_bytes": 0,
                    "disk_kvm_zvol_volsize_bytes": 0,
                    "current_platform": platform,
                    "sysinfo": {
                        "Live Image": platform,
                        "SDC Version": sdc,
                        "CPU Total Cores": cores,
                        "Network Interfaces": {"e0": {"Link Status": link, "NIC Names": tags}}
                    },
                    "vms": vms,
                });
                if running {
                    server["status"] = json!("running");
                }
                if let Some(t) = traits {
                    server["traits"] = t;
                }
                server
            },
        )
}

fn arb_request() -> impl Strategy<Value = Value> {
    let servers = (1u32..12).prop_flat_map(|n| (0..n).map(arb_server).collect::<Vec<_>>());
    let vm = (
        0..2usize,
        0u64..131_072,
        prop::option::of(0u64..500),
        prop::option::of(0u64..1000),
        prop::sample::select(vec!["joyent", "joyent-minimal", "lx", "kvm", "bhyve"]),
        prop::sample::subsequence(TAGS.to_vec(), 0..3),
        prop::option::of(prop::sample::select(vec![json!({"ssd": true}), json!({})])),
        prop::option::of((prop::bool::ANY, 0u32..30).prop_map(|(strict, v)| json!({"strict": strict, "far": [uuid(v)]}))),
    )
        .prop_map(|(owner, ram, quota, cap, brand, tags, traits, locality)| {
            let mut vm = json!({"vm_uuid": uuid(999_999), "owner_uuid": OWNERS[owner], "ram": ram, "brand": brand, "nic_tags": tags});
            if let Some(q) = quota {
                vm["quota"] = json!(q);
            }
            if let Some(c) = cap {
                vm["cpu_cap"] = json!(c);
            }
            if let Some(t) = traits {
                vm["traits"] = t;
            }
            if let Some(l) = locality {
                vm["locality"] = l;
            }
            vm
        });
    let package = prop::option::of(
        (prop::option::of(1u64..400), prop::option::of(prop::sample::select(vec!["1", "1.5", "2"]))).prop_map(
            |(cap, ratio)| {
                let mut p = json!({"max_physical_memory": 1024});
                if let Some(c) = cap {
                    p["cpu_cap"] = json!(c);
                }
                if let Some(r) = ratio {
                    p["overprovision_memory"] = json!(r);
                }
                p
            },
        ),
    );
    (servers, vm, package, any::<u64>()).prop_map(|(servers, vm, package, seed)| {
        let mut req = json!({"servers": servers, "vm": vm, "image": {}, "tickets": [], "seed": seed});
        if let Some(p) = package {
            req["package"] = p;
        }
        req
    })
}
