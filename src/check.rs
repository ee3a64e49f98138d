//! `dapi check SERVERS.json --ram MiB --disk GiB --cpu CAP`: what the original's
//! `bin/check.js` was for. Which servers could take a VM of that size, why not the others,
//! and the VMs whose missing CPU cap or quota skews the figures.
//!
//! check.js did its own arithmetic (and skipped headnodes and servers not set up, ignored
//! traits and reserved flags but for a note, used a fixed 4× CPU ratio). Here the VM is
//! counted as a package of that size is by `dapi capacity` ([`crate::capacity`]): the
//! configured chain's placement-independent filters decide who is left out and why, and the
//! allocator's own unreserved figures and ratios decide whether one more VM fits.

use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use crate::capacity::{count, prepare, vm_of};
use crate::engine::Engine;
use crate::js::{fmt_num, num_to_json};
use crate::model::{Image, Package, Server, VmPayload};
use crate::outcome::AnswerError;
use crate::validate::FieldError;

/// The VM asked about: RAM in MiB, disk in GiB, CPU cap in percent of one core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CheckQuery {
    pub ram_mib: f64,
    pub disk_gib: f64,
    pub cpu_cap: f64,
}

impl CheckQuery {
    /// The query, each figure checked (422 naming `ram`, `disk` or `cpu` otherwise).
    pub fn new(ram_mib: f64, disk_gib: f64, cpu_cap: f64) -> Result<CheckQuery, AnswerError> {
        // Past 2^53 a figure is no longer a whole number to the arithmetic (JS's
        // Number.MAX_SAFE_INTEGER), and no server comes near it.
        const MOST: f64 = 9_007_199_254_740_991.0;
        let mut errors = Vec::new();
        if !(ram_mib > 0.0 && ram_mib <= MOST) {
            errors.push(FieldError::invalid("ram", format!("must be a number of MiB above 0, at most {MOST}")));
        }
        for (name, v, unit) in [("disk", disk_gib, "GiB"), ("cpu", cpu_cap, "percent of one core")] {
            if !(0.0..=MOST).contains(&v) {
                errors.push(FieldError::invalid(name, format!("must be a number of {unit}, 0 to {MOST}")));
            }
        }
        if errors.is_empty() {
            Ok(CheckQuery { ram_mib, disk_gib, cpu_cap })
        } else {
            Err(AnswerError::Invalid(errors))
        }
    }

    /// The package of that size (a cap of 0 is no cap, as in a package).
    fn package(&self) -> Value {
        let mut p = json!({
            "name": "check",
            "max_physical_memory": num_to_json(self.ram_mib),
            "quota": num_to_json(self.disk_gib * 1024.0),
        });
        if self.cpu_cap > 0.0 {
            p["cpu_cap"] = num_to_json(self.cpu_cap);
        }
        p
    }
}

/// The answer: `{"ask", "fit", "servers": [{server, fits, slots?, why?, unreserved?,
/// notes?}], "warnings": [{server, vm, problem}]}`, servers in the order received.
pub fn check(engine: &Engine, servers: &[Server<'_>], query: &CheckQuery) -> Result<Value, AnswerError> {
    let invalid = |e: serde_json::Error| AnswerError::Internal(e.to_string());
    let package_json = query.package();
    let package: Package = serde_json::from_value(package_json.clone()).map_err(invalid)?;
    let vm: VmPayload = serde_json::from_value(vm_of(&json!({}), &package_json)).map_err(invalid)?;
    let image = Image::default();
    let prepared = prepare(engine, servers, &package, &vm, &image);
    let counts = count(engine, &prepared, &package, &vm, &image);
    let mut slots: Vec<Option<&crate::capacity::Slots>> = vec![None; servers.len()];
    for (id, s) in &counts {
        slots[*id] = Some(s);
    }
    let disk_mib = query.disk_gib * 1024.0;
    let mut fit = 0usize;
    let mut list = Vec::with_capacity(servers.len());
    for (id, server) in servers.iter().enumerate() {
        let key = server.reason_key();
        let mut entry = Map::new();
        entry.insert("server".into(), json!(key));
        match slots[id] {
            Some(s) => {
                let fits = s.slots >= 1.0;
                fit += usize::from(fits);
                entry.insert("fits".into(), json!(fits));
                entry.insert("slots".into(), num_to_json(s.slots));
                if !fits {
                    entry.insert("why".into(), json!(why_short(s)));
                }
                if let Some(u) = prepared.unreserved(id) {
                    entry.insert(
                        "unreserved".into(),
                        json!({"ram": num_to_json(u.ram_mib), "cpu": num_to_json(u.cpu_pct), "disk": num_to_json(u.disk_mib)}),
                    );
                    // check.js reported low disk even though it never decided on it; so
                    // does this when the chain does not check disk.
                    if !prepared.checks_disk() && u.disk_mib < disk_mib {
                        entry.insert(
                            "notes".into(),
                            json!([format!(
                                "low disk: {} MiB unreserved, {} MiB asked (the chain does not check disk)",
                                fmt_num(u.disk_mib.floor()),
                                fmt_num(disk_mib)
                            )]),
                        );
                    }
                }
            }
            None => {
                entry.insert("fits".into(), json!(false));
                let why = prepared.left_out.get(&key).cloned().unwrap_or_else(|| json!("left out"));
                entry.insert("why".into(), why);
            }
        }
        list.push(Value::Object(entry));
    }
    Ok(json!({
        "ask": {"ram": num_to_json(query.ram_mib), "disk": num_to_json(query.disk_gib), "cpu": num_to_json(query.cpu_cap)},
        "received": servers.len(),
        "fit": fit,
        "servers": list,
        "warnings": warnings(servers),
    }))
}

/// Why a server that passed the filters has no room: the limiting dimension's shortfall.
fn why_short(s: &crate::capacity::Slots) -> String {
    match (&s.short, s.limiting) {
        (Some(short), "vms") => {
            format!("vms: {} VMs already, the limit is {}", fmt_num(short.needed - 1.0), fmt_num(short.available))
        }
        (Some(short), resource) => format!(
            "{resource}: needs {} {unit}, {} {unit} unreserved (short by {})",
            fmt_num(short.needed),
            fmt_num(short.available.floor()),
            fmt_num((short.needed - short.available).ceil()),
            unit = short.unit,
        ),
        (None, ratio) => format!("{ratio}: the server has an overprovision ratio the VM's package does not"),
    }
}

/// check.js's warnings: VMs without a quota, and VMs (not failed) without a CPU cap, whose
/// server then has no spare CPU for capped VMs.
fn warnings(servers: &[Server<'_>]) -> Vec<Value> {
    let mut out = Vec::new();
    for server in servers {
        for (uuid, vm) in server.inline_vms() {
            if !vm.quota_gib().truthy() {
                out.push(json!({"server": server.reason_key(), "vm": uuid, "problem": "no quota"}));
            }
            if vm.state().as_str() != Some("failed") && !vm.cpu_cap_pct().truthy() {
                out.push(json!({"server": server.reason_key(), "vm": uuid, "problem": "no cpu_cap"}));
            }
        }
    }
    out
}

/// The answer as a table for people: one line per server (fits, slots, why not), the count,
/// then the warnings.
pub fn table(answer: &Value) -> String {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut rows = vec![["SERVER".to_string(), "FITS".into(), "SLOTS".into(), "WHY NOT".into()]];
    for s in answer["servers"].as_array().into_iter().flatten() {
        let fits = if s["fits"] == json!(true) { "yes" } else { "no" };
        let mut why = s.get("why").map(text).unwrap_or_default();
        for note in s["notes"].as_array().into_iter().flatten() {
            if !why.is_empty() {
                why.push_str("; ");
            }
            why.push_str(&text(note));
        }
        rows.push([text(&s["server"]), fits.into(), s.get("slots").map_or("-".into(), text), why]);
    }
    let mut out = crate::capacity::columns(&rows);
    let ask = &answer["ask"];
    let _ = writeln!(
        out,
        "\n{} of {} servers could take a VM of {} MiB RAM, {} GiB disk, CPU cap {}.",
        text(&answer["fit"]),
        text(&answer["received"]),
        text(&ask["ram"]),
        text(&ask["disk"]),
        text(&ask["cpu"])
    );
    let warnings = answer["warnings"].as_array().map_or(&[][..], Vec::as_slice);
    if !warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings ({}):", warnings.len());
        for w in warnings {
            let _ =
                writeln!(out, "  VM {} on server {} has {}", text(&w["vm"]), text(&w["server"]), text(&w["problem"]));
        }
    }
    out
}
