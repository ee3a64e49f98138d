//! `make bench-custom`: what a custom plugin (plugins_dir) adds to an allocation.
//!
//! For each size, the repository's benchmark body (benches/input.rs) is allocated with the
//! production chain, then with the same chain plus one custom filter (a rack filter that
//! reads every server) inserted after `hard-filter-min-ram`, then plus three custom plugins
//! (the filter, a RAM-headroom filter, a VM-count scorer). Engine time only (the body is
//! parsed once); medians. The first call on a thread also loads the plugins into that
//! thread's sandbox; it is reported on its own.
//!
//! Options (environment): `BENCH_SIZES=500,5000` (the default), `BENCH_SECONDS=2`.

#[path = "input.rs"]
mod input;
#[path = "variants.rs"]
mod variants;

use std::time::Duration;

use dapi::engine::Engine;
use serde_json::{json, Value};

const AVOID: &str = r#"module.exports = {
    name: 'Servers outside the racks to avoid',
    run: function (servers, opts, cb) {
        var avoid = ['R9'];
        var reasons = {};
        var kept = servers.filter(function (s) {
            if (avoid.indexOf(s.rack_identifier) !== -1) { reasons[s.uuid] = 'rack avoided'; return false; }
            return true;
        });
        cb(null, kept, reasons);
    }
};"#;

const HEADROOM: &str = r#"module.exports = {
    name: 'Servers keeping some RAM free',
    run: function (servers, opts, cb) {
        var reasons = {};
        var kept = servers.filter(function (s) {
            var pct = 100 * (s.unreserved_ram - (opts.vm.ram || 0)) / (s.memory_total_bytes / 1048576);
            if (pct < 1) { reasons[s.uuid] = 'would leave ' + pct.toFixed(1) + '%'; return false; }
            return true;
        });
        cb(null, kept, reasons);
    }
};"#;

const FEWEST: &str = r#"module.exports = {
    name: 'Score servers by fewest VMs',
    run: function (servers, opts, cb) {
        var counts = servers.map(function (s) { return Object.keys(s.vms || {}).length; });
        var most = Math.max.apply(null, counts);
        var reasons = {};
        servers.forEach(function (s, i) {
            var add = most === 0 ? 1 : (most - counts[i]) / most;
            s.score += add;
            reasons[s.uuid] = 'increased score by ' + add.toFixed(2);
        });
        cb(null, servers, reasons);
    }
};"#;

fn chain_with(extra: &[&str]) -> Value {
    let config: Value = serde_json::from_str(dapi::config::DEFAULT_CONFIG).expect("built-in config");
    let mut chain: Vec<Value> = config["allocationDescription"].as_array().cloned().unwrap_or_default();
    let at = chain.iter().position(|p| p == "hard-filter-min-ram").map_or(chain.len(), |i| i + 1);
    for (i, name) in extra.iter().enumerate() {
        let name = *name;
        if name.starts_with("score-") {
            let before_scores = chain.iter().position(|p| p.as_str().is_some_and(|s| s.starts_with("score-")));
            chain.insert(before_scores.unwrap_or(chain.len()), json!(name));
        } else {
            chain.insert(at + i, json!(name));
        }
    }
    json!({"allocationDescription": chain, "defaults": input::config()["defaults"]})
}

fn main() {
    let (sizes, budget) = variants::options();
    let dir = std::env::temp_dir().join(format!("dapi-bench-custom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    for (name, text) in
        [("hard-filter-avoid.js", AVOID), ("hard-filter-headroom.js", HEADROOM), ("score-fewest.js", FEWEST)]
    {
        std::fs::write(dir.join(name), text).expect("plugin written");
    }
    let limits = dapi::config::Limits::default();
    let budget_js = dapi::js::sandbox::Budget {
        time: Duration::from_millis(limits.plugin_timeout_ms),
        memory_bytes: limits.plugin_memory_bytes,
    };
    let (registry, _) = dapi::registry::with_custom(Some(&dir), budget_js).expect("plugins load");
    let variants: [(&str, &[&str]); 3] = [
        ("production chain", &[]),
        ("+ 1 custom filter", &["hard-filter-avoid"]),
        ("+ 3 custom plugins", &["hard-filter-avoid", "hard-filter-headroom", "score-fewest"]),
    ];
    println!("| servers | body bytes | chain | first call ms | engine ms (median) | added ms |");
    println!("|--------:|-----------:|-------|--------------:|-------------------:|---------:|");
    for &n in &sizes {
        let body = input::body(n, 30);
        let mut request = dapi::wire::parse_allocate_body(&body).expect("body parses");
        dapi::validate::validate_allocate(&mut request).expect("body is valid");
        let mut base = None;
        for (label, extra) in variants {
            let engine = Engine::from_config(&chain_with(extra), &registry).expect("engine");
            variants::row(&engine, &request, body.len(), label, budget, &mut base);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
