//! `engine::Recurring`'s benchmark (not run by `cargo test`; BENCHMARKS.md): allocation after
//! allocation on one datacenter held in memory, as a replica makes them but without the
//! service, PostgreSQL or the claims' bookkeeping, so that the engine's share can be measured
//! on its own, under `valgrind --tool=callgrind` too (instructions, which the host's noise
//! does not move).
//!
//! Each allocation claims its chosen server (a ticket), which is the one server changed for
//! the next. The VMs come from RECURRING_BENCH_OWNERS (8) owners in turn, each an owner of
//! VMs in the datacenter (its locality hints then pass on a list of its own).
//! RECURRING_BENCH_SERVERS (5000), RECURRING_BENCH_ROUNDS (200).
//!
//! ```sh
//! make bench-recurring   # cargo test --release --test recurring_bench -- --ignored --nocapture
//! ```

mod common;

#[path = "../benches/input.rs"]
mod input;

use common::env_usize as env;
use dapi::engine::{Changed, Held, Lookups, Recurring, ServerId};
use dapi::model::Ticket;
use serde_json::{json, Value};

#[test]
#[ignore = "a benchmark: cargo test --release --test recurring_bench -- --ignored --nocapture"]
fn owners_in_turn() {
    let engine = common::engine_with(None, input::config()["defaults"].clone());
    let (servers, owners, rounds) =
        (env("RECURRING_BENCH_SERVERS", 5000), env("RECURRING_BENCH_OWNERS", 8), env("RECURRING_BENCH_ROUNDS", 200));
    let base: Value = serde_json::from_slice(&input::body(servers, 30)).expect("bench body");
    // The owner of server o's first VM, for each o: owners with VMs here. Each request
    // is sent with one server only: the datacenter is the model's, held as a replica holds it.
    let texts: Vec<Vec<u8>> = (0..owners)
        .map(|o| {
            let vm = base["servers"][o % servers]["vms"].as_object().and_then(|vms| vms.values().next());
            let mut request = json!({
                "vm": base["vm"], "image": base["image"], "package": base["package"],
                "tickets": base["tickets"], "servers": [base["servers"][0]],
            });
            request["vm"]["owner_uuid"] = vm.expect("a VM")["owner_uuid"].clone();
            serde_json::to_vec(&request).expect("json")
        })
        .collect();
    let bodies: Vec<_> = texts.iter().map(|text| common::parse_valid(text)).collect();
    // One model and one set of lookups serve every allocation, as a replica's do (what is
    // read from a server on first use is read once).
    let model_text = serde_json::to_vec(&base).expect("json");
    let model = common::parse_valid(&model_text);
    let lookups = Lookups::default();
    let mut recurring = Recurring::new();
    let mut claims: Vec<Ticket> = Vec::new();
    let mut changed: Option<Vec<ServerId>> = None;
    let started = std::time::Instant::now();
    for round in 0..rounds {
        let body = &bodies[round % owners];
        let held = Held {
            servers: &model.servers,
            raw_servers: &model.raw_servers,
            lookups: Some(&lookups),
            tickets: &claims,
        };
        let which = match &changed {
            None => Changed::All,
            Some(changed) => Changed::Servers { changed, facts: &[] },
        };
        let allocation = recurring.allocate(&engine, held, body, which).expect("allocated");
        let chosen = allocation.chosen.expect("a server fits");
        recurring.recycle(allocation);
        let vm = json!({"owner_uuid": body.vm.owner_uuid.as_str().expect("owner"), "ram": 1024, "brand": "joyent"});
        claims.push(common::claim(round, model.servers[chosen].uuid.as_str().expect("uuid"), &vm));
        changed = Some(vec![chosen]);
    }
    let each = started.elapsed().as_secs_f64() * 1e3 / rounds as f64;
    println!(
        "{servers} servers, {owners} owners in turn, {rounds} allocations: {each:.3} ms each; per-server part reused {}, the rest {}",
        recurring.reused(),
        recurring.reused_rest()
    );
    assert_eq!(recurring.reused(), rounds - 1, "every allocation but the first reused the per-server part");
}
