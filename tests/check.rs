//! `dapi check SERVERS.json --ram --disk --cpu` (check.js's successor) as a process, on a
//! hand-built datacenter whose answer is known: who fits, why each other server does not,
//! the low-disk note, and the VMs without quota or cpu_cap.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

const GIB: f64 = 1_073_741_824.0;

const A: &str = "a0000000-0000-4000-8000-00000000000a";
const B: &str = "b0000000-0000-4000-8000-00000000000b";
const C: &str = "c0000000-0000-4000-8000-00000000000c";
const D: &str = "d0000000-0000-4000-8000-00000000000d";
const E: &str = "e0000000-0000-4000-8000-00000000000e";
const F: &str = "f0000000-0000-4000-8000-00000000000f";
const G: &str = "00000000-0000-4000-8000-000000000009";
const UNCAPPED: &str = "11111111-0000-4000-8000-000000000001";

/// Seven servers, asked for 8192 MiB, 100 GiB, cap 800 (needing 200 CPU units at the
/// default 4× ratio): a is short of RAM, b of CPU, c fits six (RAM), d is reserved, e holds
/// a VM with neither quota nor cap (capness leaves it out), f is not set up, g fits but its
/// pool is smaller than the disk asked (the production chain does not check disk).
fn datacenter() -> Value {
    let uncapped = json!({UNCAPPED: {"uuid": UNCAPPED, "owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853",
        "brand": "joyent", "state": "running", "max_physical_memory": 512}});
    json!([
        common::empty_server(A, 32, 6.0, json!({})),
        common::empty_server(B, 1, 64.0, json!({})),
        common::empty_server(C, 32, 64.0, json!({})),
        common::empty_server(D, 32, 64.0, json!({"reserved": true})),
        common::empty_server(E, 32, 64.0, json!({"vms": uncapped})),
        common::empty_server(F, 32, 64.0, json!({"setup": false})),
        common::empty_server(G, 32, 64.0, json!({"disk_pool_size_bytes": 20.0 * GIB})),
    ])
}

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dapi"))
        .arg("check")
        .args(args)
        .arg(dir.join("servers.json"))
        .env_remove("DAPI_CONFIG")
        .output()
        .expect("dapi runs")
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-check-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::fs::write(dir.join("servers.json"), json!({"servers": datacenter()}).to_string()).expect("written");
    dir
}

const ASK: [&str; 6] = ["--ram", "8192", "--disk", "100", "--cpu", "800"];

#[test]
fn json_says_who_fits_why_not_the_others_and_warns() {
    let dir = temp_dir("json");
    let out = run(&dir, &[&ASK[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(answer["received"], json!(7));
    assert_eq!(answer["fit"], json!(2));
    assert_eq!(answer["ask"], json!({"ram": 8192, "disk": 100, "cpu": 800}));
    let servers = answer["servers"].as_array().expect("servers");
    // In the order received.
    let order: Vec<&str> = servers.iter().map(|s| s["server"].as_str().unwrap_or("?")).collect();
    assert_eq!(order, [A, B, C, D, E, F, G]);
    let by = |uuid: &str| servers.iter().find(|s| s["server"] == json!(uuid)).expect("listed").clone();
    let why = |uuid: &str| by(uuid)["why"].as_str().unwrap_or("").to_string();

    // 6 GiB × 0.85 = 5222 MiB unreserved: short by 2970 MiB.
    assert_eq!(by(A)["fits"], json!(false));
    assert_eq!(by(A)["slots"], json!(0));
    assert_eq!(why(A), "ram: needs 8192 MiB, 5222 MiB unreserved (short by 2970)");
    // One core is 100 CPU units; a cap of 800 needs 800 / 4 = 200.
    assert_eq!(why(B), "cpu: needs 200 CPU units, 100 CPU units unreserved (short by 100)");
    // 64 GiB × 0.85 = 55705.6 MiB: (55705.6 - 8192) / 8192 + 1 = 6 VMs.
    assert_eq!((by(C)["fits"].clone(), by(C)["slots"].clone()), (json!(true), json!(6)));
    assert!(by(C).get("why").is_none() && by(C).get("notes").is_none(), "{}", by(C));
    assert_eq!(by(C)["unreserved"]["ram"].as_f64().map(f64::floor), Some(55705.0));
    // Left out by the chain's filters, with their reasons.
    assert_eq!(by(D)["fits"], json!(false));
    assert!(why(D).contains("reserved"), "{}", why(D));
    assert!(by(D).get("slots").is_none());
    assert!(!why(E).is_empty() && by(E).get("slots").is_none(), "{}", by(E));
    assert!(!why(F).is_empty(), "{}", by(F));
    // g fits (disk is not checked by the production chain) but is noted as low on disk.
    assert_eq!(by(G)["fits"], json!(true));
    let note = by(G)["notes"][0].as_str().unwrap_or("").to_string();
    assert!(note.starts_with("low disk:") && note.contains("102400 MiB asked"), "{note}");

    // The VM without quota and cap is warned about twice; every other server has no VMs.
    assert_eq!(
        answer["warnings"],
        json!([
            {"server": E, "vm": UNCAPPED, "problem": "no quota"},
            {"server": E, "vm": UNCAPPED, "problem": "no cpu_cap"},
        ])
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_table_lists_every_server_the_count_and_the_warnings() {
    let dir = temp_dir("table");
    let out = run(&dir, &ASK);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).expect("UTF-8");
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("SERVER") && lines[0].contains("WHY NOT"), "{table}");
    let row = |uuid: &str| lines.iter().find(|l| l.starts_with(uuid)).copied().unwrap_or("");
    assert!(row(A).split_whitespace().nth(1) == Some("no") && row(A).contains("short by 2970"), "{table}");
    assert_eq!(row(C).split_whitespace().collect::<Vec<_>>(), [C, "yes", "6"], "{table}");
    assert!(row(G).contains("yes") && row(G).contains("low disk"), "{table}");
    assert!(table.contains("2 of 7 servers could take a VM of 8192 MiB RAM, 100 GiB disk, CPU cap 800."), "{table}");
    assert!(table.contains(&format!("Warnings (2):\n  VM {UNCAPPED} on server {E} has no quota\n")), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_figure_or_servers_file_exits_2_naming_it() {
    let dir = temp_dir("bad");
    let out = run(&dir, &["--ram", "0", "--disk", "100", "--cpu", "800"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ram"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = run(&dir, &["--ram", "1024", "--disk=-1", "--cpu", "800"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("disk"), "{}", String::from_utf8_lossy(&out.stderr));
    // A negative figure written apart from its flag reaches dapi's own check too (not the
    // argument parser's "unexpected argument").
    let out = run(&dir, &["--ram", "-5", "--disk", "100", "--cpu", "800"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ram: must be a number of MiB above 0"), "{stderr}");
    // Figures past any server, or not finite, are named too (not printed back as 1.9e22).
    for (flag, value) in [("--ram", "inf"), ("--ram", "18446744073709551615"), ("--disk", "1e300"), ("--cpu", "NaN")] {
        let mut args = vec!["--ram", "1024", "--disk", "100", "--cpu", "800"];
        let at = args.iter().position(|a| *a == flag).expect("flag") + 1;
        args[at] = value;
        let out = run(&dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(&format!("{}:", &flag[2..])) && stderr.contains("9007199254740991"), "{stderr}");
    }
    std::fs::write(dir.join("servers.json"), "{\"servers\": 5}").expect("written");
    let out = run(&dir, &ASK);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("servers"), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
