//! The simulation's figures, as one JSON document: the terminal summary, the CSV and the
//! HTML page are all drawn from it, so every output shows the same numbers.
//!
//! Per run: placements, failures (the first with its reason), utilisation per dimension
//! (RAM of the VMs over what they may use after `reservation_ratio`, disk quotas and KVM
//! volumes over the pool, CPU caps over the cores; distribution over servers, mean,
//! p50/p90), servers used, stranded capacity (free on a server where no VM of the workload
//! fits any more, in the dimensions no VM lacked there), VMs per owner per server,
//! decision time per placement, the over-time series and each server. For two configs,
//! which VMs landed differently.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::run::{Fate, RunResult};
use super::workload::{EventKind, Workload};

/// Width of a histogram band, percent.
pub const BAND: usize = 5;

/// Band `b` of `bands`, as the summary and the report name it: the last holds everything
/// from its floor up (CPU caps and disk quotas can pass 100%).
pub fn band_label(b: usize, bands: usize) -> String {
    let low = b * BAND;
    if b + 1 == bands {
        format!("{low}%+")
    } else {
        format!("{low}-{}%", low + BAND)
    }
}
/// RAM classes the per-server bars tell apart (the rest are one "other" class).
const CLASSES: usize = 7;

fn round2(x: f64) -> f64 {
    if x.is_finite() {
        (x * 100.0).round() / 100.0
    } else {
        0.0
    }
}

fn pct(used: f64, total: f64) -> f64 {
    if total > 0.0 {
        100.0 * used / total
    } else {
        0.0
    }
}

/// The nearest-rank percentile `p` of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Mean, p50, p90, min, max and the 5% bands of a distribution (values over 100 in the last).
fn distribution(values: &[f64]) -> Value {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mean = if sorted.is_empty() { 0.0 } else { sorted.iter().sum::<f64>() / sorted.len() as f64 };
    let mut bands = vec![0u64; 100 / BAND];
    for v in &sorted {
        let band = ((v / BAND as f64).floor().max(0.0) as usize).min(bands.len() - 1);
        bands[band] += 1;
    }
    json!({
        "mean": round2(mean),
        "p50": round2(percentile(&sorted, 50.0)),
        "p90": round2(percentile(&sorted, 90.0)),
        "min": round2(sorted.first().copied().unwrap_or(0.0)),
        "max": round2(sorted.last().copied().unwrap_or(0.0)),
        "histogram": bands,
    })
}

/// The RAM sizes the per-server bars show apart: the most frequent ones of the workload,
/// smallest first.
pub fn classes(workload: &Workload) -> Vec<f64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for vm in &workload.vms {
        *counts.entry(vm.ram_mib.to_bits()).or_default() += 1;
    }
    let mut by_count: Vec<(f64, usize)> = counts.into_iter().map(|(bits, n)| (f64::from_bits(bits), n)).collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.total_cmp(&b.0)));
    let mut top: Vec<f64> = by_count.into_iter().take(CLASSES).map(|(ram, _)| ram).collect();
    top.sort_by(f64::total_cmp);
    top
}

/// A RAM size for people: `4 GiB`, `1536 MiB`.
pub fn size_label(mib: f64) -> String {
    if mib >= 1024.0 && (mib / 1024.0).fract() == 0.0 {
        format!("{} GiB", mib / 1024.0)
    } else {
        format!("{mib} MiB")
    }
}

/// Labels of the classes (the mix's package name where one package has that RAM), then
/// "other".
fn class_labels(workload: &Workload, classes: &[f64]) -> Vec<String> {
    let mut labels: Vec<String> = classes
        .iter()
        .map(|ram| {
            let named: Vec<&String> = workload
                .package_names
                .iter()
                .zip(&workload.packages)
                .filter(|(_, p)| p.max_physical_memory_mib.num() == *ram)
                .map(|(n, _)| n)
                .collect();
            match named.as_slice() {
                [one] if !one.ends_with(" MiB") => format!("{one} ({})", size_label(*ram)),
                _ => size_label(*ram),
            }
        })
        .collect();
    labels.push("other".into());
    labels
}

/// What the header of every output says about the inputs.
pub struct Inputs<'a> {
    pub datacenter: &'a str,
    pub servers: usize,
    pub workload: &'a Workload,
    pub seed: u64,
    pub concurrency: usize,
    pub classes: &'a [f64],
    /// Leave the wall-clock figures out (so that outputs can be compared byte for byte).
    pub timing: bool,
}

/// The smallest ask of the workload per dimension: RAM MiB, CPU (0 when some VM is
/// uncapped: CPU then never decides), disk MiB.
fn smallest_ask(workload: &Workload) -> [f64; 3] {
    let ram = workload.vms.iter().map(|v| v.ram_mib).fold(f64::INFINITY, f64::min);
    let cpu = if workload.vms.iter().all(|v| v.cpu_cap.is_some()) {
        workload.vms.iter().filter_map(|v| v.cpu_cap).fold(f64::INFINITY, f64::min)
    } else {
        0.0
    };
    let disk = workload.vms.iter().map(|v| v.quota_gib * 1024.0).fold(f64::INFINITY, f64::min);
    [ram, cpu, disk].map(|x| if x.is_finite() { x } else { 0.0 })
}

/// One run's figures.
pub fn run_figures(label: &str, run: &RunResult, inputs: &Inputs<'_>) -> Value {
    let workload = inputs.workload;
    let servers = &run.servers;
    let ram: Vec<f64> = servers.iter().map(|s| pct(s.ram_used, s.ram_total)).collect();
    let disk: Vec<f64> = servers.iter().map(|s| pct(s.disk_used, s.disk_total)).collect();
    let cpu: Vec<f64> = servers.iter().map(|s| pct(s.cpu_used, s.cpu_total)).collect();

    // Stranded: what is free on servers where no VM of the workload fits any more, in the
    // dimensions no VM lacked there.
    let ask = smallest_ask(workload);
    let mut stranded = [0.0f64; 3];
    let mut stranded_servers = 0;
    let mut free_total = [0.0f64; 3];
    for s in servers {
        let Some(free) = s.free else { continue };
        let free = [free.ram_mib.max(0.0), free.cpu_pct.max(0.0), free.disk_mib.max(0.0)];
        for d in 0..3 {
            free_total[d] += free[d];
        }
        if let Some(short) = s.stranding {
            stranded_servers += 1;
            for d in 0..3 {
                if !short[d] {
                    stranded[d] += free[d];
                }
            }
        }
    }

    // Spread: per owner, the most VMs on one server and the servers used.
    let mut owners: HashMap<&str, (usize, usize, usize)> = HashMap::new();
    for s in servers {
        for (owner, n) in &s.owners {
            let e = owners.entry(owner.as_str()).or_default();
            e.0 = e.0.max(*n);
            e.1 += 1;
            e.2 += n;
        }
    }
    let owner_count = owners.len();
    let mean = |f: &dyn Fn(&(usize, usize, usize)) -> f64| {
        if owner_count == 0 {
            0.0
        } else {
            owners.values().map(f).sum::<f64>() / owner_count as f64
        }
    };
    let spread = json!({
        "owners": owner_count,
        "mean_max_vms_per_server": round2(mean(&|o| o.0 as f64)),
        "max_vms_per_server": owners.values().map(|o| o.0).max().unwrap_or(0),
        "mean_servers_per_owner": round2(mean(&|o| o.1 as f64)),
        "mean_vms_per_owner": round2(mean(&|o| o.2 as f64)),
    });

    let first_failure = run
        .first_failure
        .as_ref()
        .map_or(Value::Null, |f| json!({"event": f.event, "uuid": workload.vms[f.vm].uuid, "reason": f.reason}));
    let mut out = json!({
        "config": label,
        "placed": run.placed,
        "failed": run.failed,
        "destroyed": run.destroyed,
        "destroy_ignored": run.destroy_ignored,
        "already_listed": run.already_listed,
        "first_failure": first_failure,
        "servers_used": servers.iter().filter(|s| s.vms > 0).count(),
        "utilisation": {"ram": distribution(&ram), "disk": distribution(&disk), "cpu": distribution(&cpu)},
        "stranded": {
            "smallest_vm": {"ram_mib": ask[0], "cpu_pct": ask[1], "disk_mib": ask[2]},
            "servers": stranded_servers,
            "ram_mib": round2(stranded[0]),
            "cpu_pct": round2(stranded[1]),
            "disk_mib": round2(stranded[2]),
            "free": {"ram_mib": round2(free_total[0]), "cpu_pct": round2(free_total[1]), "disk_mib": round2(free_total[2])},
        },
        "spread": spread,
    });
    if inputs.timing {
        let mut sorted = run.decision_us.clone();
        sorted.sort_by(f64::total_cmp);
        let mean = if sorted.is_empty() { 0.0 } else { sorted.iter().sum::<f64>() / sorted.len() as f64 };
        out["decision_us"] = json!({
            "placements": sorted.len(),
            "mean": round2(mean),
            "p50": round2(percentile(&sorted, 50.0)),
            "p90": round2(percentile(&sorted, 90.0)),
            "p99": round2(percentile(&sorted, 99.0)),
            "max": round2(sorted.last().copied().unwrap_or(0.0)),
            "total_ms": round2(sorted.iter().sum::<f64>() / 1000.0),
        });
    }
    out["timeline"] = run
        .timeline
        .iter()
        .map(|t| json!({"events": t.events, "placed": t.placed, "failed": t.failed, "live": t.live, "ram_pct": round2(t.ram_pct)}))
        .collect();
    out["servers"] = servers
        .iter()
        .zip(ram.iter().zip(disk.iter().zip(&cpu)))
        .map(|(s, (ram, (disk, cpu)))| {
            json!({
                "uuid": s.uuid,
                "hostname": s.hostname,
                "rack": s.rack,
                "vms": s.vms,
                "ram_pct": round2(*ram),
                "disk_pct": round2(*disk),
                "cpu_pct": round2(*cpu),
                "ram_by_class_pct": s.ram_by_class.iter().map(|r| round2(pct(*r, s.ram_total))).collect::<Vec<_>>(),
            })
        })
        .collect();
    out
}

/// The whole document: inputs, one or two runs, and for two which VMs landed differently.
pub fn document(inputs: &Inputs<'_>, runs: &[(String, RunResult)]) -> Value {
    let w = inputs.workload;
    let creations = w.events.iter().filter(|e| e.kind == EventKind::Create).count();
    let racks: std::collections::BTreeSet<&str> =
        runs.first().map(|(_, r)| r.servers.iter().map(|s| s.rack.as_str()).collect()).unwrap_or_default();
    let mut doc = json!({
        "datacenter": {"source": inputs.datacenter, "servers": inputs.servers, "racks": racks.len()},
        "workload": {
            "source": w.source,
            "vms": w.vms.len(),
            "events": w.events.len(),
            "creations": creations,
            "destructions": w.events.len() - creations,
            "skipped": w.skipped,
            "packages": w.package_names,
            "seed": inputs.seed,
            "concurrency": inputs.concurrency,
        },
        "classes": class_labels(w, inputs.classes),
        "runs": runs.iter().map(|(label, run)| run_figures(label, run, inputs)).collect::<Vec<_>>(),
    });
    if let [(_, a), (_, b)] = runs {
        doc["compare"] = compare(w, a, b);
    }
    doc
}

/// VMs placed on different servers by the two runs (or placed by one only).
fn compare(workload: &Workload, a: &RunResult, b: &RunResult) -> Value {
    let server = |run: &RunResult, fate: Fate| match fate {
        Fate::Placed(id) => Value::String(run.servers[id].uuid.clone()),
        _ => Value::Null,
    };
    let mut moved = Vec::new();
    let (mut both, mut only_a, mut only_b) = (0, 0, 0);
    for (i, (fa, fb)) in a.fates.iter().zip(&b.fates).enumerate() {
        let differ = match (fa, fb) {
            (Fate::Placed(x), Fate::Placed(y)) => {
                if x != y {
                    both += 1;
                }
                x != y
            }
            (Fate::Placed(_), _) => {
                only_a += 1;
                true
            }
            (_, Fate::Placed(_)) => {
                only_b += 1;
                true
            }
            _ => false,
        };
        if differ {
            moved.push(json!({"uuid": workload.vms[i].uuid, "a": server(a, *fa), "b": server(b, *fb)}));
        }
    }
    json!({
        "moved": moved.len(),
        "other_server": both,
        "placed_by_a_only": only_a,
        "placed_by_b_only": only_b,
        "vms": moved,
    })
}

/// Per server: VMs, RAM %, disk %, CPU % (with the config's label when there are two).
pub fn csv(doc: &Value) -> String {
    let runs = doc["runs"].as_array().map_or(&[][..], Vec::as_slice);
    let two = runs.len() > 1;
    let mut out = String::from(if two { "config," } else { "" });
    out.push_str("server,hostname,rack,vms,ram_pct,disk_pct,cpu_pct\n");
    for run in runs {
        for s in run["servers"].as_array().map_or(&[][..], Vec::as_slice) {
            if two {
                out.push_str(&csv_field(run["config"].as_str().unwrap_or("")));
                out.push(',');
            }
            let text = |k: &str| csv_field(s[k].as_str().unwrap_or(""));
            out.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                text("uuid"),
                text("hostname"),
                text("rack"),
                s["vms"],
                s["ram_pct"],
                s["disk_pct"],
                s["cpu_pct"]
            ));
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 5.0);
        assert_eq!(percentile(&v, 90.0), 9.0);
        assert_eq!(percentile(&v, 100.0), 10.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }

    #[test]
    fn distribution_bands_hold_every_server() {
        let d = distribution(&[0.0, 4.99, 5.0, 50.0, 100.0, 130.0]);
        let bands: Vec<u64> = serde_json::from_value(d["histogram"].clone()).expect("bands");
        assert_eq!(bands.iter().sum::<u64>(), 6);
        assert_eq!(bands[0], 2);
        assert_eq!(bands[1], 1);
        assert_eq!(bands[10], 1);
        assert_eq!(bands[19], 2);
    }

    #[test]
    fn csv_quotes_what_needs_it() {
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("plain"), "plain");
    }
}
