//! Affinity rules with arbitrary values (globs and regexes in the original's dialect) and
//! operators, against servers whose VMs carry arbitrary aliases and tags: bounded time (the
//! fuzzer's per-input timeout) and no panic through the whole request path.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::json;

#[derive(Debug, Arbitrary)]
struct Input {
    rules: Vec<(u8, String, String)>,
    aliases: Vec<String>,
    tag: (String, String),
}

const OPERATORS: &[&str] = &["==", "!=", "==~", "!=~"];
const KEYS: &[&str] = &["instance", "container", "role", "alias"];

fuzz_target!(|input: Input| {
    let affinity: Vec<String> = input
        .rules
        .iter()
        .take(4)
        .map(|(pick, key, value)| {
            let key = if pick & 0x10 == 0 { KEYS[(*pick as usize >> 5) % KEYS.len()] } else { key.as_str() };
            format!("{key}{}{value}", OPERATORS[*pick as usize % OPERATORS.len()])
        })
        .collect();
    let servers: Vec<_> = (0..3)
        .map(|s| {
            let vms: serde_json::Map<_, _> = input
                .aliases
                .iter()
                .take(8)
                .enumerate()
                .filter(|(i, _)| i % 3 == s)
                .map(|(i, alias)| {
                    (
                        format!("10000000-0000-4000-8000-{i:012}"),
                        json!({"owner_uuid": "20000000-0000-4000-8000-000000000001", "alias": alias,
                               "tags": {input.tag.0.clone(): input.tag.1.clone()},
                               "max_physical_memory": 128, "quota": 1, "brand": "joyent", "state": "running"}),
                    )
                })
                .collect();
            json!({"uuid": format!("00000000-0000-4000-8000-{s:012}"), "ram": 65536, "status": "running",
                   "setup": true, "memory_available_bytes": 60_000_000_000u64, "memory_total_bytes": 68_719_476_736u64,
                   "reservation_ratio": 0.15, "disk_pool_size_bytes": 2_000_000_000_000u64,
                   "sysinfo": {"Live Image": "20240101T000000Z", "CPU Total Cores": 32, "Zpool Size in GiB": 2000},
                   "vms": vms})
        })
        .collect();
    let body = json!({
        "servers": servers,
        "vm": {"vm_uuid": "30000000-0000-4000-8000-000000000001", "ram": 128, "quota": 1,
               "owner_uuid": "20000000-0000-4000-8000-000000000001", "affinity": affinity},
        "image": {}, "package": {"max_physical_memory": 128, "quota": 1024}
    });
    let body = serde_json::to_vec(&body).expect("serialise");
    dapi_fuzz::check_request_path(dapi_fuzz::production(), &body);
});
