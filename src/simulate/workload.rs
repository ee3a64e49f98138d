//! The simulated workload: what is created and destroyed, in time order.
//!
//! Two sources: a VMAPI VM dump (`[{uuid, owner_uuid, ram, cpu_cap, quota, brand,
//! create_timestamp, destroyed}, ...]` or `{"vms": [...]}`), whose creations and
//! destructions are replayed in time order as the original's `bin/sim.js` did, or a package
//! mix (`{"packages": [...], "weights": [...], "count": N}`) drawn with a seed, creations
//! only. A dump entry without `create_timestamp` is skipped (counted), as sim.js skipped it.

use rand::distributions::{Distribution, WeightedIndex};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::Value;

use super::datacenter::counter_uuid;
use crate::js::Js;
use crate::model::{FieldError, Package, VmPayload};

/// The most VMs a workload may hold.
pub const MAX_VMS: usize = 10_000_000;

/// One VM of the workload: what it asks for.
#[derive(Debug, Clone)]
pub struct SimVm {
    pub uuid: String,
    pub owner: Option<String>,
    pub brand: String,
    pub ram_mib: f64,
    /// Percent of one core; `None`: uncapped.
    pub cpu_cap: Option<f64>,
    pub quota_gib: f64,
    /// The mix's package it was drawn from (its index), if any.
    pub package: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Create,
    Destroy,
}

/// A creation or destruction of VM `vm` (an index into [`Workload::vms`]) at `at`
/// (milliseconds since the epoch for a dump; the draw's number for a mix).
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub at: f64,
    pub kind: EventKind,
    pub vm: usize,
}

/// The workload, its events sorted.
#[derive(Debug, Clone)]
pub struct Workload {
    pub vms: Vec<SimVm>,
    pub events: Vec<Event>,
    /// The mix's packages as given (PAPI objects), handed to the engine with their VMs.
    pub packages: Vec<Package>,
    /// Their JSON texts, which custom plugins see (`opts.pkg`).
    pub package_texts: Vec<String>,
    /// Package names (its `name`, else its RAM) for the reports.
    pub package_names: Vec<String>,
    /// `"dump"` or `"mix"`.
    pub source: &'static str,
    /// Dump entries left out (no `create_timestamp`).
    pub skipped: usize,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError::invalid(field, message)
}

/// Reads a workload file: a package mix when it is an object with `packages`, else a dump.
pub fn read(bytes: &[u8], seed: u64) -> Result<Workload, FieldError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| invalid("workload", format!("is not JSON: {e}")))?;
    match value {
        Value::Object(top) if top.contains_key("packages") => mix(&top, seed),
        Value::Object(mut top) => match top.remove("vms") {
            Some(Value::Array(vms)) => dump(vms),
            _ => Err(invalid("workload", "must be a VM dump ([...] or {\"vms\": [...]}) or a package mix ({\"packages\": [...], \"weights\": [...], \"count\": N})")),
        },
        Value::Array(vms) => dump(vms),
        _ => Err(invalid("workload", "must be a JSON array of VMs or an object")),
    }
}

/// A non-negative finite number (or a numeric string, as VMAPI sometimes sends).
fn number(v: &Value) -> Option<f64> {
    let n = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }?;
    (n.is_finite() && n >= 0.0).then_some(n)
}

/// A time: an ISO 8601 date (what VMAPI sends) or milliseconds since the epoch.
fn time(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64().filter(|n| n.is_finite()),
        // As sim.js read it (`new Date(text)`: `2020-01-01` too), then any RFC 3339 time.
        Value::String(s) => crate::js::date::parse_js_date(s.trim())
            .or_else(|| chrono::DateTime::parse_from_rfc3339(s.trim()).ok().map(|t| t.timestamp_millis() as f64))
            .or_else(|| s.trim().parse::<f64>().ok().filter(|n| n.is_finite())),
        _ => None,
    }
}

fn dump(entries: Vec<Value>) -> Result<Workload, FieldError> {
    if entries.len() > MAX_VMS {
        return Err(invalid("vms", format!("at most {MAX_VMS} VMs")));
    }
    let mut vms = Vec::with_capacity(entries.len());
    let mut events = Vec::with_capacity(entries.len() * 2);
    let mut skipped = 0;
    let mut seen = std::collections::HashSet::new();
    for (i, entry) in entries.iter().enumerate() {
        let field = |name: &str| format!("vms[{i}].{name}");
        let Some(vm) = entry.as_object() else {
            return Err(invalid(format!("vms[{i}]"), "is not an object"));
        };
        let uuid = match vm.get("uuid") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(invalid(field("uuid"), "must be a non-empty string")),
        };
        if !seen.insert(uuid.clone()) {
            return Err(invalid(field("uuid"), format!("{uuid} appears twice")));
        }
        let created = match vm.get("create_timestamp") {
            None | Some(Value::Null) => {
                skipped += 1;
                continue;
            }
            Some(v) => {
                time(v).ok_or_else(|| invalid(field("create_timestamp"), "must be an ISO 8601 date or milliseconds"))?
            }
        };
        let destroyed =
            match vm.get("destroyed") {
                None | Some(Value::Null) | Some(Value::Bool(false)) => None,
                Some(v) => Some(time(v).ok_or_else(|| {
                    invalid(field("destroyed"), "must be an ISO 8601 date, milliseconds, null or false")
                })?),
            };
        let ram_mib = vm
            .get("ram")
            .and_then(number)
            .filter(|n| *n > 0.0)
            .ok_or_else(|| invalid(field("ram"), "must be a positive number (MiB)"))?;
        let cpu_cap = match vm.get("cpu_cap") {
            None | Some(Value::Null) => None,
            Some(v) => Some(number(v).ok_or_else(|| invalid(field("cpu_cap"), "must be a non-negative number"))?)
                .filter(|c| *c > 0.0),
        };
        let quota_gib = match vm.get("quota") {
            None | Some(Value::Null) => 0.0,
            Some(v) => number(v).ok_or_else(|| invalid(field("quota"), "must be a non-negative number (GiB)"))?,
        };
        let brand = match vm.get("brand") {
            None | Some(Value::Null) => "joyent".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(invalid(field("brand"), "must be a string")),
        };
        // CNAPI requires an owner of every VM it places.
        let owner = match vm.get("owner_uuid") {
            Some(Value::String(s)) if uuid::Uuid::parse_str(s).is_ok() => Some(s.clone()),
            _ => return Err(invalid(field("owner_uuid"), "must be a UUID (the VM's owner)")),
        };
        let index = vms.len();
        vms.push(SimVm { uuid, owner, brand, ram_mib, cpu_cap, quota_gib, package: None });
        events.push(Event { at: created, kind: EventKind::Create, vm: index });
        if let Some(at) = destroyed {
            events.push(Event { at, kind: EventKind::Destroy, vm: index });
        }
    }
    // Time order; at the same time a creation comes first (a VM created and destroyed at
    // once is still placed), then the dump's order.
    events.sort_by(|a, b| {
        a.at.total_cmp(&b.at)
            .then((a.kind == EventKind::Destroy).cmp(&(b.kind == EventKind::Destroy)))
            .then(a.vm.cmp(&b.vm))
    });
    // A destruction dated before its creation happens right after it.
    let mut created = vec![false; vms.len()];
    let mut early = Vec::new();
    let mut ordered = Vec::with_capacity(events.len());
    for e in events {
        match e.kind {
            EventKind::Create => {
                created[e.vm] = true;
                ordered.push(e);
                if let Some(pos) = early.iter().position(|d: &Event| d.vm == e.vm) {
                    let mut d = early.swap_remove(pos);
                    d.at = e.at;
                    ordered.push(d);
                }
            }
            EventKind::Destroy if !created[e.vm] => early.push(e),
            EventKind::Destroy => ordered.push(e),
        }
    }
    Ok(Workload {
        vms,
        events: ordered,
        packages: Vec::new(),
        package_texts: Vec::new(),
        package_names: Vec::new(),
        source: "dump",
        skipped,
    })
}

fn mix(top: &serde_json::Map<String, Value>, seed: u64) -> Result<Workload, FieldError> {
    let packages = match top.get("packages") {
        Some(Value::Array(p)) if !p.is_empty() => p,
        _ => return Err(invalid("packages", "must be a non-empty array of packages")),
    };
    let weights: Vec<f64> = match top.get("weights") {
        None | Some(Value::Null) => vec![1.0; packages.len()],
        Some(Value::Array(w)) if w.len() == packages.len() => w
            .iter()
            .enumerate()
            .map(|(i, v)| number(v).ok_or_else(|| invalid(format!("weights[{i}]"), "must be a non-negative number")))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(invalid("weights", format!("must be an array of {} numbers, one per package", packages.len())))
        }
    };
    if !weights.iter().sum::<f64>().is_finite() {
        // The sampler would overflow; weights only count relative to one another.
        return Err(invalid(
            "weights",
            "must add up to a finite number (they are relative: 3 and 1 draw as 300 and 100 do)",
        ));
    }
    let chooser = WeightedIndex::new(&weights).map_err(|_| invalid("weights", "need one weight above 0"))?;
    let count =
        top.get("count")
            .and_then(Value::as_u64)
            .filter(|n| (1..=MAX_VMS as u64).contains(n))
            .ok_or_else(|| invalid("count", format!("must be a whole number from 1 to {MAX_VMS}")))? as usize;
    let owners = match top.get("owners") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=1_000_000).contains(n))
            .ok_or_else(|| invalid("owners", "must be a whole number from 1 to 1000000"))?,
    };
    let brand = match top.get("brand") {
        None | Some(Value::Null) => "joyent".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid("brand", "must be a string")),
    };
    let mut typed = Vec::with_capacity(packages.len());
    let mut texts = Vec::with_capacity(packages.len());
    let mut names = Vec::with_capacity(packages.len());
    let mut asks = Vec::with_capacity(packages.len());
    for (i, p) in packages.iter().enumerate() {
        let field = |name: &str| format!("packages[{i}].{name}");
        if !p.is_object() {
            return Err(invalid(format!("packages[{i}]"), "is not an object"));
        }
        let ram = p
            .get("max_physical_memory")
            .and_then(number)
            .filter(|n| *n > 0.0)
            .ok_or_else(|| invalid(field("max_physical_memory"), "must be a positive number (MiB)"))?;
        let cpu_cap = match p.get("cpu_cap") {
            None | Some(Value::Null) => None,
            Some(v) => Some(number(v).ok_or_else(|| invalid(field("cpu_cap"), "must be a non-negative number"))?)
                .filter(|c| *c > 0.0),
        };
        let quota_mib = match p.get("quota") {
            None | Some(Value::Null) => 0.0,
            Some(v) => number(v).ok_or_else(|| invalid(field("quota"), "must be a non-negative number (MiB)"))?,
        };
        let package: Package =
            serde_json::from_value(p.clone()).map_err(|e| invalid(format!("packages[{i}]"), e.to_string()))?;
        typed.push(package);
        texts.push(crate::js::json::stringify(p));
        names.push(match p.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => format!("{} MiB", ram),
        });
        asks.push((ram, cpu_cap, quota_mib / 1024.0));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut vms = Vec::with_capacity(count);
    let mut events = Vec::with_capacity(count);
    for n in 0..count {
        let p = chooser.sample(&mut rng);
        let owner = if owners == 1 { 0 } else { rand::Rng::gen_range(&mut rng, 0..owners) };
        let (ram_mib, cpu_cap, quota_gib) = asks[p];
        vms.push(SimVm {
            uuid: counter_uuid(0x5e7_0001, n as u64),
            owner: Some(counter_uuid(0x5e7_0002, owner)),
            brand: brand.clone(),
            ram_mib,
            cpu_cap,
            quota_gib,
            package: Some(p),
        });
        events.push(Event { at: n as f64, kind: EventKind::Create, vm: n });
    }
    Ok(Workload { vms, events, packages: typed, package_texts: texts, package_names: names, source: "mix", skipped: 0 })
}

impl SimVm {
    /// The package the engine sees: the mix's own, else one made of the VM's figures.
    pub fn package(&self, workload: &Workload) -> Package {
        if let Some(p) = self.package.and_then(|i| workload.packages.get(i)) {
            return p.clone();
        }
        Package {
            max_physical_memory_mib: Js::Num(self.ram_mib),
            cpu_cap_pct: self.cpu_cap.map_or(Js::Undefined, Js::Num),
            quota_mib: Js::Num(self.quota_gib * 1024.0),
            ..Package::default()
        }
    }

    /// The VM's payload as far as its size and brand go (what a count of its kind reads);
    /// a placement adds its uuid and owner.
    pub fn sized_payload(&self) -> VmPayload {
        VmPayload {
            brand: Js::str(&self.brand),
            ram_mib: Js::Num(self.ram_mib),
            quota_gib: Js::Num(self.quota_gib),
            cpu_cap_pct: self.cpu_cap.map_or(Js::Undefined, Js::Num),
            ..VmPayload::default()
        }
    }

    /// The JSON texts of the VM payload and of [`SimVm::package`], as custom plugins see
    /// them in a request (`opts.vm`, `opts.pkg`).
    pub fn texts(&self, workload: &Workload) -> (String, String) {
        let mut vm = serde_json::Map::new();
        vm.insert("vm_uuid".into(), self.uuid.clone().into());
        if let Some(owner) = &self.owner {
            vm.insert("owner_uuid".into(), owner.clone().into());
        }
        vm.insert("brand".into(), self.brand.clone().into());
        vm.insert("ram".into(), self.ram_mib.into());
        vm.insert("quota".into(), self.quota_gib.into());
        if let Some(cap) = self.cpu_cap {
            vm.insert("cpu_cap".into(), cap.into());
        }
        let package = match self.package.and_then(|i| workload.package_texts.get(i)) {
            Some(text) => text.clone(),
            None => {
                let mut p = serde_json::Map::new();
                p.insert("max_physical_memory".into(), self.ram_mib.into());
                if let Some(cap) = self.cpu_cap {
                    p.insert("cpu_cap".into(), cap.into());
                }
                p.insert("quota".into(), (self.quota_gib * 1024.0).into());
                crate::js::json::stringify(&Value::Object(p))
            }
        };
        (crate::js::json::stringify(&Value::Object(vm)), package)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dump_events_are_in_time_order_creation_first() {
        let dump = json!([
            {"uuid": "a", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1024, "create_timestamp": "2020-01-01T00:00:00Z", "destroyed": "2020-01-03T00:00:00Z"},
            // A date alone, as `new Date()` reads it: midnight UTC.
            {"uuid": "b", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1024, "create_timestamp": "2020-01-02"},
            {"uuid": "c", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1024, "create_timestamp": "2020-01-03T00:00:00Z", "destroyed": "2020-01-03T00:00:00Z"},
            {"uuid": "d", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1024},
            {"uuid": "e", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": 1024, "create_timestamp": 1577836800000i64, "destroyed": 1}
        ]);
        let w = read(dump.to_string().as_bytes(), 0).expect("reads");
        let order: Vec<(String, EventKind)> = w.events.iter().map(|e| (w.vms[e.vm].uuid.clone(), e.kind)).collect();
        use EventKind::*;
        let want = [
            ("a", Create),
            ("e", Create),
            ("e", Destroy),
            ("b", Create),
            ("c", Create),
            ("a", Destroy),
            ("c", Destroy),
        ];
        let want: Vec<(String, EventKind)> = want.iter().map(|(u, k)| (u.to_string(), *k)).collect();
        assert_eq!(order, want);
        assert_eq!(w.skipped, 1);
    }

    #[test]
    fn bad_entries_name_their_field() {
        let e = read(br#"[{"uuid": "a", "owner_uuid": "0e000000-0000-4000-8000-000000000000", "ram": "lots", "create_timestamp": 1}]"#, 0).expect_err("bad");
        assert_eq!(e.field, "vms[0].ram");
        let e = read(br#"{"packages": [{"max_physical_memory": 1024}], "weights": [1, 2], "count": 3}"#, 0)
            .expect_err("bad");
        assert_eq!(e.field, "weights");
        let e = read(br#"{"packages": [{"max_physical_memory": 1}, {"max_physical_memory": 2}], "weights": [1e308, 1e308], "count": 3}"#, 0)
            .expect_err("a sum past any double");
        assert_eq!(e.field, "weights");
        assert!(e.message.contains("finite"), "{}", e.message);
        let e = read(br#"{"packages": [{"max_physical_memory": 1024}], "count": 0}"#, 0).expect_err("bad");
        assert_eq!(e.field, "count");
    }

    #[test]
    fn a_mix_is_the_same_under_the_same_seed() {
        let mix = br#"{"packages": [{"max_physical_memory": 1024}, {"max_physical_memory": 4096}], "weights": [3, 1], "count": 200, "owners": 5}"#;
        let a = read(mix, 7).expect("reads");
        let b = read(mix, 7).expect("reads");
        let c = read(mix, 8).expect("reads");
        let sizes = |w: &Workload| w.vms.iter().map(|v| (v.ram_mib, v.owner.clone())).collect::<Vec<_>>();
        assert_eq!(sizes(&a), sizes(&b));
        assert_ne!(sizes(&a), sizes(&c));
        let big = a.vms.iter().filter(|v| v.ram_mib == 4096.0).count();
        assert!((20..=80).contains(&big), "weights 3:1 gave {big} of 200 large");
    }
}
