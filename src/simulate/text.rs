//! The terminal summary: the figures side by side (one column per config), then per config
//! the servers rack by rack (one line per rack, `VMs/RAM%` per server, as sim.js showed
//! them) and a histogram of RAM utilisation, then the VMs that landed differently.

use serde_json::Value;

use super::report::band_label;

pub(super) fn arr(v: &Value) -> &[Value] {
    v.as_array().map_or(&[][..], Vec::as_slice)
}

pub(super) fn num(v: &Value) -> String {
    match v {
        // Whole numbers as they are (a seed past 2^53 is not a double's).
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if f.fract() == 0.0 && f.abs() < 1e15 {
                format!("{}", f as i64)
            } else {
                format!("{f:.2}")
            }
        }
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// The rows of the side-by-side table: label, and how to read it from a run.
/// How a row of the table reads its cell from a run.
pub(super) type Cell = Box<dyn Fn(&Value) -> String>;

pub(super) fn rows() -> Vec<(&'static str, Cell)> {
    let dist = |dim: &'static str| {
        Box::new(move |r: &Value| {
            let u = &r["utilisation"][dim];
            format!("{} / {} / {}", num(&u["mean"]), num(&u["p50"]), num(&u["p90"]))
        }) as Cell
    };
    vec![
        ("placements", Box::new(|r: &Value| num(&r["placed"]))),
        ("failures", Box::new(|r: &Value| num(&r["failed"]))),
        (
            "destroyed (ignored)",
            Box::new(|r: &Value| format!("{} ({})", num(&r["destroyed"]), num(&r["destroy_ignored"]))),
        ),
        ("servers used", Box::new(|r: &Value| num(&r["servers_used"]))),
        ("RAM % mean/p50/p90", dist("ram")),
        ("disk % mean/p50/p90", dist("disk")),
        ("CPU % mean/p50/p90", dist("cpu")),
        (
            "stranded RAM GiB",
            Box::new(|r: &Value| format!("{:.1}", r["stranded"]["ram_mib"].as_f64().unwrap_or(0.0) / 1024.0)),
        ),
        ("stranded CPU %", Box::new(|r: &Value| num(&r["stranded"]["cpu_pct"]))),
        (
            "stranded disk GiB",
            Box::new(|r: &Value| format!("{:.1}", r["stranded"]["disk_mib"].as_f64().unwrap_or(0.0) / 1024.0)),
        ),
        ("servers stranding", Box::new(|r: &Value| num(&r["stranded"]["servers"]))),
        (
            "owner: max VMs/server",
            Box::new(|r: &Value| {
                format!(
                    "{} (mean {})",
                    num(&r["spread"]["max_vms_per_server"]),
                    num(&r["spread"]["mean_max_vms_per_server"])
                )
            }),
        ),
        ("owner: servers (mean)", Box::new(|r: &Value| num(&r["spread"]["mean_servers_per_owner"]))),
        (
            "decision µs mean/p50/p90",
            Box::new(|r: &Value| {
                let d = &r["decision_us"];
                if d.is_null() {
                    "-".into()
                } else {
                    format!("{} / {} / {}", num(&d["mean"]), num(&d["p50"]), num(&d["p90"]))
                }
            }),
        ),
        (
            "first failure",
            Box::new(|r: &Value| {
                let f = &r["first_failure"];
                if f.is_null() {
                    "none".into()
                } else {
                    format!("event {}: {}", num(&f["event"]), f["reason"].as_str().unwrap_or(""))
                }
            }),
        ),
    ]
}

/// The whole summary.
pub fn summary(doc: &Value) -> String {
    let mut out = String::new();
    let dc = &doc["datacenter"];
    let w = &doc["workload"];
    out.push_str(&format!(
        "dapi simulate: {} servers in {} racks ({}); workload: {} ({} VMs, {} creations, {} destructions{}); seed {}, concurrency {}\n\n",
        num(&dc["servers"]),
        num(&dc["racks"]),
        dc["source"].as_str().unwrap_or(""),
        w["source"].as_str().unwrap_or(""),
        num(&w["vms"]),
        num(&w["creations"]),
        num(&w["destructions"]),
        if w["skipped"].as_u64().unwrap_or(0) > 0 { format!(", {} skipped", num(&w["skipped"])) } else { String::new() },
        num(&w["seed"]),
        num(&w["concurrency"]),
    ));
    let runs = arr(&doc["runs"]);
    let labels: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{}: {}", ["A", "B"].get(i).unwrap_or(&"?"), r["config"].as_str().unwrap_or("")))
        .collect();
    let table: Vec<(&str, Vec<String>)> =
        rows().into_iter().map(|(name, f)| (name, runs.iter().map(&f).collect())).collect();
    let width = table
        .iter()
        .flat_map(|(_, cells)| cells.iter().map(|c| c.chars().count()))
        .chain(labels.iter().map(|l| l.chars().count()))
        .max()
        .unwrap_or(10)
        .min(60);
    out.push_str(&format!("{:26}", ""));
    for l in &labels {
        out.push_str(&format!("  {l:width$}"));
    }
    out.push('\n');
    for (name, cells) in &table {
        out.push_str(&format!("{name:26}"));
        for c in cells {
            out.push_str(&format!("  {c:width$}"));
        }
        out.push('\n');
    }
    for (run, label) in runs.iter().zip(&labels) {
        out.push_str(&format!("\nLayout ({label}): a line per rack, VMs/RAM% per server\n"));
        out.push_str(&layout(run));
        out.push_str(&format!("\nRAM utilisation over servers ({label})\n"));
        out.push_str(&histogram(&run["utilisation"]["ram"]["histogram"]));
    }
    let compare = &doc["compare"];
    if !compare.is_null() {
        out.push_str(&format!(
            "\nLanded differently: {} VMs ({} on another server, {} placed by A only, {} by B only)\n",
            num(&compare["moved"]),
            num(&compare["other_server"]),
            num(&compare["placed_by_a_only"]),
            num(&compare["placed_by_b_only"]),
        ));
        for m in arr(&compare["vms"]).iter().take(10) {
            let side = |v: &Value| v.as_str().unwrap_or("(failed)").to_string();
            out.push_str(&format!("  {}  {} -> {}\n", m["uuid"].as_str().unwrap_or(""), side(&m["a"]), side(&m["b"])));
        }
        if arr(&compare["vms"]).len() > 10 {
            out.push_str("  ... (all of them in --json)\n");
        }
    }
    out
}

/// The servers rack by rack, in the order racks first appear.
fn layout(run: &Value) -> String {
    let mut racks: Vec<(String, Vec<String>)> = Vec::new();
    for s in arr(&run["servers"]) {
        let rack = s["rack"].as_str().unwrap_or("-").to_string();
        let cell = format!("{}/{:.0}", num(&s["vms"]), s["ram_pct"].as_f64().unwrap_or(0.0));
        match racks.iter_mut().find(|(r, _)| *r == rack) {
            Some((_, cells)) => cells.push(cell),
            None => racks.push((rack, vec![cell])),
        }
    }
    let rack_width = racks.iter().map(|(r, _)| r.chars().count()).max().unwrap_or(1);
    let mut out = String::new();
    for (rack, cells) in racks {
        out.push_str(&format!("{rack:rack_width$} "));
        for c in cells {
            out.push_str(&format!(" {c:>7}"));
        }
        out.push('\n');
    }
    out
}

/// One line per 5% band: its share of the servers as a bar, and the count.
fn histogram(bands: &Value) -> String {
    let bands: Vec<u64> = arr(bands).iter().map(|v| v.as_u64().unwrap_or(0)).collect();
    let total: u64 = bands.iter().sum();
    let mut out = String::new();
    for (i, n) in bands.iter().enumerate() {
        let bar = if total > 0 { (*n as f64 / total as f64 * 60.0).round() as usize } else { 0 };
        let band = band_label(i, bands.len());
        out.push_str(&format!("{band:>8} |{} {n}\n", "#".repeat(bar)));
    }
    out
}
