//! `make bench-owner-filter`: what `filter_owner_server` snippets cost an allocation.
//!
//! For each size, the repository's benchmark body (benches/input.rs) is allocated with the
//! production chain and its defaults, then with three owners' snippets configured (the
//! requesting owner has none, so every snippet runs over every server that reaches the
//! step, as the original's `filterNotOwners` does), then with a snippet for the requesting
//! owner only. Engine time only (the body is parsed once); medians. The first call on a
//! thread also compiles the snippets into that thread's sandbox; it is reported on its own.
//!
//! Options (environment): `BENCH_SIZES=500,5000` (the default), `BENCH_SECONDS=2`.

#[path = "input.rs"]
mod input;
#[path = "variants.rs"]
mod variants;

use dapi::engine::Engine;
use serde_json::{json, Value};

/// Snippets of the kind operators write, one reading a nested object member.
const OTHERS: [(&str, &str); 3] = [
    ("2316e149-1562-47ff-abea-00bda80d0e7f", "server.rack_identifier === 'R07'"),
    ("10a4ca4c-26e9-11e6-a0db-28cfe91f7d53", "server.traits.ssd === true && server.hostname.indexOf('cn0') === 0"),
    ("9094b92e-26e9-11e6-b476-28cfe91f7d53", "server.sysinfo['CPU Total Cores'] > 64"),
];

fn config(filters: Option<Value>) -> Value {
    let built_in: Value = serde_json::from_str(dapi::config::DEFAULT_CONFIG).expect("built-in config");
    let mut defaults = input::config()["defaults"].clone();
    if let Some(filters) = filters {
        defaults["filter_owner_server"] = filters;
    }
    json!({"allocationDescription": built_in["allocationDescription"], "defaults": defaults})
}

fn main() {
    let (sizes, budget) = variants::options();
    let registry = dapi::registry::built_in();
    println!("| servers | body bytes | filters | first call ms | engine ms (median) | added ms |");
    println!("|--------:|-----------:|---------|--------------:|-------------------:|---------:|");
    for &n in &sizes {
        let body = input::body(n, 30);
        let mut request = dapi::wire::parse_allocate_body(&body).expect("body parses");
        dapi::validate::validate_allocate(&mut request).expect("body is valid");
        let owner: Value = serde_json::from_slice::<Value>(&body).expect("body")["vm"]["owner_uuid"].clone();
        let others: serde_json::Map<String, Value> = OTHERS.iter().map(|(o, s)| (o.to_string(), json!(s))).collect();
        let mut own = serde_json::Map::new();
        own.insert(owner.as_str().expect("owner uuid").to_string(), json!("server.ram >= 393216"));
        let variants = [
            ("none", None),
            ("3 other owners' snippets", Some(Value::Object(others))),
            ("the owner's own snippet", Some(Value::Object(own))),
        ];
        let mut base = None;
        for (label, filters) in variants {
            let engine = Engine::from_config(&config(filters), &registry).expect("engine");
            variants::row(&engine, &request, body.len(), label, budget, &mut base);
        }
    }
}
