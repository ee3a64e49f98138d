//! `dapi simulate` as a process: a generated datacenter filled exactly by a package mix,
//! creations and destructions in time order, in-flight provisions as tickets, the same
//! seed giving the same figures, two configs compared, the outputs (CSV, HTML) and bad
//! input named.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::dapi;
use serde_json::{json, Value};

/// A new file of the test's own holding `value`.
fn file(name: &str, value: &Value) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir =
        std::env::temp_dir().join(format!("dapi-simulate-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst)));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).expect("written");
    path
}

fn simulate(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = dapi().arg("simulate").args(args).output().expect("dapi runs");
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into())
}

/// The JSON figures of a run that must succeed.
fn figures(args: &[&str]) -> Value {
    let mut all = vec!["--json", "--no-timing"];
    all.extend_from_slice(args);
    let (code, out, err) = simulate(&all);
    assert_eq!(code, 0, "dapi simulate {all:?} failed: {err}");
    serde_json::from_str(&out).expect("JSON out")
}

fn arr(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

/// 4 servers of 20000 MiB (17000 usable after the 0.15 reservation) take exactly 17 VMs of
/// 1000 MiB each: 68 fit, the 69th fails for want of RAM, every server is full.
#[test]
fn a_package_mix_fills_a_generated_datacenter_exactly() {
    let mix = file(
        "mix.json",
        &json!({"packages": [{"max_physical_memory": 1000, "cpu_cap": 100, "quota": 10240}], "count": 69}),
    );
    let doc = figures(&["--racks", "2", "--servers-per-rack", "2", "--ram", "20000M", mix.to_str().expect("path")]);
    let run = &doc["runs"][0];
    assert_eq!(run["placed"], 68);
    assert_eq!(run["failed"], 1);
    assert_eq!(run["servers_used"], 4);
    assert_eq!(run["first_failure"]["event"], 68);
    assert_eq!(run["first_failure"]["reason"], "no servers with enough unreserved RAM");
    for s in arr(&run["servers"]) {
        assert_eq!(s["vms"], 17, "{s}");
        assert_eq!(s["ram_pct"], 100.0, "{s}");
    }
    assert_eq!(run["utilisation"]["ram"]["histogram"][19], 4);
    assert_eq!(run["utilisation"]["ram"]["mean"], 100.0);
    // Full on RAM: the CPU and disk left are stranded on all four.
    assert_eq!(run["stranded"]["servers"], 4);
    assert_eq!(run["stranded"]["ram_mib"], 0.0);
    assert!(run["stranded"]["disk_mib"].as_f64().unwrap_or(0.0) > 0.0);
    let racks: Vec<&str> = arr(&run["servers"]).iter().map(|s| s["rack"].as_str().unwrap_or("")).collect();
    assert_eq!(racks, ["R00", "R00", "R01", "R01"]);
    assert_eq!(doc["datacenter"]["racks"], 2);
    // The timeline ends where the run did.
    let last = arr(&run["timeline"]).last().cloned().unwrap_or_default();
    assert_eq!(
        (last["events"].clone(), last["placed"].clone(), last["failed"].clone()),
        (json!(69), json!(68), json!(1))
    );
}

/// One server with room for one VM: `a` lives from t1 to t3, `c` asks at t2 (fails: `a` is
/// still there), `b` at t4 (fits: `a` is gone), whatever the dump's order.
#[test]
fn creations_and_destructions_are_replayed_in_time_order() {
    let ram = 17000;
    let dump = file(
        "dump.json",
        &json!([
            {"uuid": "b0000000-0000-4000-8000-000000000000", "ram": ram, "owner_uuid": "0e000000-0000-4000-8000-000000000000",
             "create_timestamp": "2024-01-04T00:00:00Z"},
            {"uuid": "c0000000-0000-4000-8000-000000000000", "ram": ram, "owner_uuid": "0e000000-0000-4000-8000-000000000000",
             "create_timestamp": "2024-01-02T00:00:00Z"},
            {"uuid": "a0000000-0000-4000-8000-000000000000", "ram": ram, "owner_uuid": "0e000000-0000-4000-8000-000000000000",
             "create_timestamp": "2024-01-01T00:00:00Z", "destroyed": "2024-01-03T00:00:00Z"},
            {"uuid": "d0000000-0000-4000-8000-000000000000", "ram": ram, "owner_uuid": "0e000000-0000-4000-8000-000000000000"}
        ]),
    );
    let doc = figures(&["--racks", "1", "--servers-per-rack", "1", "--ram", "20000M", dump.to_str().expect("path")]);
    let run = &doc["runs"][0];
    assert_eq!(doc["workload"]["skipped"], 1, "d has no create_timestamp");
    assert_eq!(doc["workload"]["destructions"], 1);
    assert_eq!(run["placed"], 2, "{run}");
    assert_eq!(run["failed"], 1);
    assert_eq!(run["destroyed"], 1);
    assert_eq!(run["first_failure"]["uuid"], "c0000000-0000-4000-8000-000000000000");
    assert_eq!(run["first_failure"]["event"], 1);
    assert_eq!(run["servers"][0]["vms"], 1);
    let placed: Vec<u64> = arr(&run["timeline"]).iter().map(|p| p["placed"].as_u64().unwrap_or(99)).collect();
    assert_eq!(placed, [1, 1, 1, 2]);
}

/// A CNAPI dump's servers with their VMs: a workload VM they list already is not placed
/// again, and its destruction takes it off its server.
#[test]
fn a_server_dump_keeps_its_vms_and_loses_the_destroyed_ones() {
    let servers = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/capacity.json");
    let owner = "0e000000-0000-4000-8000-000000000000";
    let dump = file(
        "dump.json",
        &json!([
            {"uuid": "5cde1411-da97-45b4-b542-e61d30792ccd", "owner_uuid": owner, "ram": 1024,
             "create_timestamp": "2020-01-01T00:00:00Z", "destroyed": "2024-01-01T00:00:00Z"},
            {"uuid": "f0000000-0000-4000-8000-000000000001", "owner_uuid": owner, "ram": 2048, "quota": 20, "cpu_cap": 100,
             "create_timestamp": "2024-01-02T00:00:00Z"}
        ]),
    );
    let before =
        figures(&["--servers", servers.to_str().expect("path"), file("none.json", &json!([])).to_str().expect("path")]);
    let after = figures(&["--servers", servers.to_str().expect("path"), dump.to_str().expect("path")]);
    let run = &after["runs"][0];
    assert_eq!(after["datacenter"]["source"], "dump");
    assert_eq!(
        (run["already_listed"].clone(), run["placed"].clone(), run["destroyed"].clone()),
        (json!(1), json!(1), json!(1)),
        "{run}"
    );
    let vms = |doc: &Value| {
        arr(&doc["runs"][0]["servers"]).iter().map(|s| s["vms"].as_i64().unwrap_or(-1)).collect::<Vec<_>>()
    };
    let (b, a) = (vms(&before), vms(&after));
    assert_eq!(b.iter().sum::<i64>(), a.iter().sum::<i64>(), "one VM gone, one placed: {b:?} {a:?}");
    // The destroyed VM was on the first server: it has one VM less, unless the new one
    // landed there.
    let landed_elsewhere = a[1..] != b[1..];
    assert_eq!(a[0], if landed_elsewhere { b[0] - 1 } else { b[0] }, "{b:?} {a:?}");
}

/// With K provisions in flight, the K−1 before a VM are open tickets, not yet VMs on the
/// server: the ticket's RAM still counts, so a server with room for two takes two of three.
#[test]
fn provisions_in_flight_are_tickets_that_count() {
    let mix = file(
        "mix.json",
        &json!({"packages": [{"max_physical_memory": 8000, "cpu_cap": 100, "quota": 1024}], "count": 3}),
    );
    for k in ["1", "3"] {
        let doc = figures(&[
            "--racks",
            "1",
            "--servers-per-rack",
            "1",
            "--ram",
            "20000M",
            "--concurrency",
            k,
            mix.to_str().expect("path"),
        ]);
        let run = &doc["runs"][0];
        assert_eq!((run["placed"].clone(), run["failed"].clone()), (json!(2), json!(1)), "concurrency {k}: {run}");
        assert_eq!(run["servers"][0]["vms"], 2, "in-flight VMs are listed by the end");
        assert_eq!(doc["workload"]["concurrency"], k.parse::<u64>().expect("number"));
    }
    // A chain that does not count tickets books the server past its room while provisions
    // are in flight: what the flag is there to show.
    let default: Value = serde_json::from_str(include_str!("../config/default.json")).expect("default config");
    let chain: Vec<Value> = arr(&default["allocationDescription"])
        .iter()
        .filter(|p| p.as_str() != Some("calculate-ticketed-vms"))
        .cloned()
        .collect();
    let blind = file("no-tickets.json", &json!({"allocationDescription": chain}));
    let blind = blind.to_str().expect("path");
    for (k, placed) in [("1", 2), ("3", 3)] {
        let args =
            ["--racks", "1", "--servers-per-rack", "1", "--ram", "20000M", "--concurrency", k, "--config", blind];
        let mut args = args.to_vec();
        args.push(mix.to_str().expect("path"));
        let run = &figures(&args)["runs"][0];
        assert_eq!(run["placed"], placed, "a chain blind to tickets, concurrency {k}: {run}");
    }
}

/// The same seed gives the same bytes; another seed another draw.
#[test]
fn the_same_seed_gives_identical_json() {
    let mix = file(
        "mix.json",
        &json!({"packages": [{"max_physical_memory": 1024, "cpu_cap": 50, "quota": 10240},
                             {"max_physical_memory": 8192, "cpu_cap": 200, "quota": 51200}],
                "weights": [4, 1], "count": 300, "owners": 7}),
    );
    let path = mix.to_str().expect("path");
    let args = |seed: &'static str| {
        vec!["--json", "--no-timing", "--racks", "3", "--servers-per-rack", "4", "--ram", "64G", "--seed", seed, path]
    };
    let (c1, one, e1) = simulate(&args("42"));
    let (c2, two, e2) = simulate(&args("42"));
    let (c3, other, e3) = simulate(&args("43"));
    assert_eq!((c1, c2, c3), (0, 0, 0), "{e1}{e2}{e3}");
    assert_eq!(one, two);
    assert_ne!(one, other);
    // With timing, the decision times are there.
    let doc = figures(&["--racks", "1", "--servers-per-rack", "2", path]);
    assert!(doc["runs"][0]["decision_us"].is_null(), "--no-timing leaves them out");
    let (code, out, err) = simulate(&["--json", "--racks", "1", "--servers-per-rack", "2", path]);
    assert_eq!(code, 0, "{err}");
    let timed: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(timed["runs"][0]["decision_us"]["placements"], 300);
}

/// Two configs on the same workload: the same config twice moves nothing; flipping the RAM
/// score's sign (fill the fullest server rather than the emptiest) moves VMs, and the
/// comparison names each one with both servers, as the runs placed them.
#[test]
fn two_configs_side_by_side_report_the_vms_that_moved() {
    let mix = file(
        "mix.json",
        &json!({"packages": [{"max_physical_memory": 2048, "cpu_cap": 100, "quota": 10240}], "count": 40}),
    );
    let same = file("same.json", &json!({"defaults": {"weight_uniform_random": 0}}));
    let flipped = file("flipped.json", &json!({"defaults": {"weight_uniform_random": 0, "weight_unreserved_ram": -2}}));
    let base = ["--racks", "2", "--servers-per-rack", "4", "--ram", "64G"];
    let run_with = |b: &PathBuf| {
        let mut args = base.to_vec();
        args.extend([
            "--config",
            same.to_str().expect("path"),
            "--vs",
            b.to_str().expect("path"),
            mix.to_str().expect("path"),
        ]);
        figures(&args)
    };
    let doc = run_with(&same);
    assert_eq!(arr(&doc["runs"]).len(), 2);
    assert_eq!(doc["compare"]["moved"], 0);

    let doc = run_with(&flipped);
    let (a, b) = (&doc["runs"][0], &doc["runs"][1]);
    assert_eq!(b["config"], flipped.to_str().expect("path"));
    let moved = arr(&doc["compare"]["vms"]);
    assert!(!moved.is_empty(), "a sign flip of the RAM score moved nothing: {}", doc["compare"]);
    assert_eq!(doc["compare"]["moved"], moved.len());
    for m in moved {
        assert_ne!(m["a"], m["b"], "{m}");
    }
    // What moved shows in the layouts: the VMs per server differ.
    let per_server = |run: &Value| arr(&run["servers"]).iter().map(|s| s["vms"].clone()).collect::<Vec<_>>();
    assert_ne!(per_server(a), per_server(b));
    assert_eq!(a["placed"], 40);
    assert_eq!(b["placed"], 40);

    // The terminal summary shows both columns and the moved VMs.
    let mut args = base.to_vec();
    args.extend([
        "--config",
        same.to_str().expect("path"),
        "--vs",
        flipped.to_str().expect("path"),
        mix.to_str().expect("path"),
    ]);
    let (code, out, err) = simulate(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("A: ") && out.contains("B: "), "{out}");
    assert!(out.contains("Landed differently: "), "{out}");
    assert!(out.contains("R01 "), "rack layout: {out}");
}

/// --csv: a line per server; --report: one page with its charts, nothing fetched.
#[test]
fn csv_and_html_outputs() {
    let mix = file(
        "mix.json",
        &json!({"packages": [{"max_physical_memory": 4096, "cpu_cap": 100, "quota": 10240}], "count": 30}),
    );
    let dir = mix.parent().expect("dir").to_path_buf();
    let (csv, html) = (dir.join("out.csv"), dir.join("out.html"));
    let (code, _, err) = simulate(&[
        "--racks",
        "3",
        "--servers-per-rack",
        "2",
        "--ram",
        "64G",
        "--csv",
        csv.to_str().expect("path"),
        "--report",
        html.to_str().expect("path"),
        "--vs",
        mix.to_str().expect("path"), // not a config: refused
        mix.to_str().expect("path"),
    ]);
    assert_eq!(code, 2, "a workload given as a config is refused: {err}");

    let (code, _, err) = simulate(&[
        "--racks",
        "3",
        "--servers-per-rack",
        "2",
        "--ram",
        "64G",
        "--csv",
        csv.to_str().expect("path"),
        "--report",
        html.to_str().expect("path"),
        mix.to_str().expect("path"),
    ]);
    assert_eq!(code, 0, "{err}");
    let csv = std::fs::read_to_string(&csv).expect("csv written");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines[0], "server,hostname,rack,vms,ram_pct,disk_pct,cpu_pct");
    assert_eq!(lines.len(), 7);
    let vms: u64 =
        lines[1..].iter().map(|l| l.split(',').nth(3).and_then(|n| n.parse::<u64>().ok()).expect("vms")).sum();
    assert_eq!(vms, 30);

    let page = std::fs::read_to_string(&html).expect("page written");
    assert!(page.starts_with("<!DOCTYPE html>"));
    for id in ["summary", "histogram-ram", "histogram-disk", "histogram-cpu", "timeline", "racks-0"] {
        assert!(page.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    assert!(!page.contains("http:") && !page.contains("https:"), "the page refers to the network");
    assert!(!page.contains("<script"), "the page has a script");

    // Standard output holds one document: two asked there are refused before the run.
    for both in [&["--json", "--csv", "-"][..], &["--csv", "-", "--report", "-"], &["--json", "--report", "-"]] {
        let mut args = vec!["--racks", "1", "--servers-per-rack", "2"];
        args.extend_from_slice(both);
        args.push(mix.to_str().expect("path"));
        let (code, out, err) = simulate(&args);
        assert_eq!(code, 2, "{both:?}: {err}");
        assert!(err.contains("would all write to standard output"), "{both:?}: {err}");
        assert!(out.is_empty(), "{both:?}: {out}");
    }
    // The page alone on standard output, without the summary after it.
    let (code, out, err) =
        simulate(&["--racks", "1", "--servers-per-rack", "2", "--report", "-", mix.to_str().expect("path")]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("<!DOCTYPE html>") && out.trim_end().ends_with("</html>"),
        "{}",
        &out[out.len().saturating_sub(200)..]
    );
}

/// Bad input stops with exit 2 and names what to fix.
#[test]
fn bad_input_is_named() {
    let cases = [
        (
            json!([{"uuid": "a", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": "lots", "create_timestamp": 1}]),
            "vms[0].ram",
        ),
        (json!([{"uuid": "a", "ram": 1024, "create_timestamp": 1}]), "vms[0].owner_uuid"),
        (
            json!([{"uuid": "a", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1, "create_timestamp": "yesterday"}]),
            "vms[0].create_timestamp",
        ),
        (json!({"packages": [{"max_physical_memory": 1024}], "weights": [0], "count": 3}), "weights"),
        // Each finite, their sum not: the sampler panicked.
        (
            json!({"packages": [{"max_physical_memory": 1}, {"max_physical_memory": 2}], "weights": [1e308, 1e308], "count": 3}),
            "weights",
        ),
        (json!({"packages": [], "count": 3}), "packages"),
        (json!("nothing"), "workload"),
    ];
    for (workload, field) in cases {
        let path = file("w.json", &workload);
        let (code, out, err) = simulate(&["--racks", "1", "--servers-per-rack", "1", path.to_str().expect("path")]);
        assert_eq!(code, 2, "{workload}: {out}");
        assert!(err.contains(&format!("{field}:")), "{workload}: {err}");
    }
    let mix = file("mix.json", &json!({"packages": [{"max_physical_memory": 1024}], "count": 1}));
    let path = mix.to_str().expect("path");
    let (code, _, err) = simulate(&["--ram", "lots", path]);
    assert_eq!(code, 2);
    assert!(err.contains("ram:"), "{err}");
    let (code, _, err) = simulate(&["--concurrency", "0", path]);
    assert_eq!(code, 2);
    assert!(err.contains("concurrency:"), "{err}");
    let servers = file("servers.json", &json!({"servers": "none"}));
    let (code, _, err) = simulate(&["--servers", servers.to_str().expect("path"), path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("servers"), "{err}");
    // Standard input read for both would leave the second empty.
    let (code, _, err) = simulate(&["--servers", "-", "-"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("servers: standard input (-) can give the servers or the workload, not both"), "{err}");
}

/// Stranded capacity is counted where no VM of the workload fits any more, by the chain's
/// own rules: one core holds four VMs capped at 100% (the CPU ratio is 4), so after three
/// the server still takes one and strands nothing; after four it is full of CPU, and its
/// free RAM is stranded.
#[test]
fn stranded_capacity_is_where_no_vm_fits_by_the_chains_rules() {
    for (count, stranding) in [(3, 0), (4, 1)] {
        let mix = file(
            "cpu-bound.json",
            &json!({"packages": [{"name": "p", "max_physical_memory": 512, "quota": 10240, "cpu_cap": 100}], "count": count}),
        );
        let doc = figures(&["--racks", "1", "--servers-per-rack", "1", "--cpus", "1", mix.to_str().expect("path")]);
        let run = &doc["runs"][0];
        assert_eq!(run["placed"], count, "{run}");
        assert_eq!(run["stranded"]["servers"], stranding, "{count} VMs: {}", run["stranded"]);
        let ram = run["stranded"]["ram_mib"].as_f64().expect("a figure");
        assert_eq!(ram > 0.0, stranding == 1, "{count} VMs: {}", run["stranded"]);
        assert_eq!(run["stranded"]["cpu_pct"], 0.0, "{}", run["stranded"]);
    }
}

/// The summary's header gives the seed as given, past 2^53 too (it was printed as a double:
/// 9007199254740993 read 9007199254740992.00).
#[test]
fn the_summary_gives_the_seed_as_given() {
    let mix = file("seeded.json", &json!({"packages": [{"max_physical_memory": 1024}], "count": 3}));
    let path = mix.to_str().expect("path");
    let (code, out, err) =
        simulate(&["--no-timing", "--racks", "1", "--servers-per-rack", "2", "--seed", "9007199254740993", path]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("seed 9007199254740993,"), "{out}");
}
