//! How many more VMs of a package fit: `POST /capacity` with `packages`, `dapi capacity
//! --package`.
//!
//! Analytic: the configured chain's hard filters that do not depend on where the VM goes
//! (setup, running, reserved, headnode, traits, platform, NIC tags, ratios, ...) plus the
//! transforms that compute unreserved resources run once per package; then for each server
//! left, each dimension counts how many VMs fit one after the other, as the allocator would
//! see them: a VM needs what `hard-filter-min-{ram,cpu,disk}` ask for and, once placed (as
//! an open provisioning ticket), takes what `calculate-server-unreserved` subtracts for it.
//! The count is the least over RAM, CPU, disk and the VM-count limit.
//!
//! The placement-independent part is run once per distinct VM template (packages that differ
//! only in RAM, quota and CPU cap share it), then each package is counted from what it left.
//!
//! Exact (`exact: true`): the whole chain is run again and again in an engine `Datacenter`,
//! each VM listed on the server chosen for it, until nothing fits; spreading, locality and
//! scorers are honoured.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::engine::context::PackageState;
use crate::engine::{Datacenter, Engine, Expr, Placer, Request, ServerId, Shortfall, Unreserved, VmRequest};
use crate::js::{num_to_json, write_num_json, write_uint_json, Js};
use crate::model::{Image, Package, Server, VmPayload};
use crate::outcome::AnswerError;
use crate::plugins::shared::unreserved::{is_hvm_brand, ratio_or_one, MIB, POOL_USABLE_RATIO};
use crate::validate::FieldError;

/// Chain plugins whose verdict does not change as VMs of the same package are placed.
const PLACEMENT_INDEPENDENT: &[&str] = &[
    "hard-filter-setup",
    "hard-filter-running",
    "hard-filter-invalid-servers",
    "hard-filter-os",
    "hard-filter-virtual-servers",
    "hard-filter-zpool-encryption",
    "hard-filter-reserved",
    "hard-filter-min-free-disk",
    "hard-filter-vlans",
    "hard-filter-platform-versions",
    "hard-filter-feature-min-platform",
    "hard-filter-traits",
    "hard-filter-headnode",
    "override-overprovisioning",
    "hard-filter-overprovision-ratios",
    "load-server-vms",
    "calculate-ticketed-vms",
    "hard-filter-capness",
    "hard-filter-hvm",
    "hard-filter-reservoir",
    "calculate-server-unreserved",
];

/// Chain filters whose verdict on a server can only turn from keep to remove as VMs of the
/// same package are placed (room shrinks, the VM count grows).
/// `hard-filter-force-failure` reads only the VM asked for: it decides the same throughout.
const MONOTONE: &[&str] = &[
    "hard-filter-min-ram",
    "hard-filter-min-cpu",
    "hard-filter-min-disk",
    "hard-filter-vm-count",
    "hard-filter-force-failure",
];

/// `vm-count`'s default limit, when the defaults set none.
const DEFAULT_VM_LIMIT: f64 = 224.0;
const FUDGE_MIB: f64 = 10.0 * 1024.0;
const KVM_EXTRA_MIB: f64 = 10.0 * 1024.0;
const KVM_MEM_OVERHEAD_MIB: f64 = 1024.0;
const BHYVE_MEM_OVERHEAD_MIB: f64 = 1024.0 + 256.0;
/// Exact mode stops after this many placements (per package).
const EXACT_MAX: usize = 100_000;

/// The packages part of a capacity request.
#[derive(Debug, Default)]
pub struct PackageQuery {
    pub packages: Vec<(Package, Value)>,
    pub vm: Value,
    pub image: Value,
    pub exact: bool,
}

/// Reads `packages`, `vm`, `image` and `exact` from a capacity body; `None` when it has no
/// `packages`. Each bad entry is a 422 naming its field.
pub fn package_query(body: &[u8]) -> Result<Option<PackageQuery>, Vec<FieldError>> {
    let Ok(members) = crate::scan::utf8(body)
        .map_err(|_| ())
        .and_then(|t| crate::js::json::from_str::<IndexMap<String, &RawValue>>(t).map_err(|_| ()))
    else {
        return Ok(None);
    };
    package_query_in(&members)
}

/// [`package_query`] from the body's top-level members as read (`servers` aside): only the
/// members it needs are parsed.
pub fn package_query_in(members: &IndexMap<String, &RawValue>) -> Result<Option<PackageQuery>, Vec<FieldError>> {
    let top: Map<String, Value> = ["packages", "vm", "image", "img", "exact"]
        .into_iter()
        .filter_map(|name| {
            let raw = members.get(name)?;
            Some((name.to_string(), crate::js::json::from_str::<Value>(raw.get()).ok()?))
        })
        .collect();
    let Some(packages) = top.get("packages") else { return Ok(None) };
    let mut errors = Vec::new();
    let Value::Array(list) = packages else {
        return Err(vec![FieldError::invalid("packages", "must be an array of package objects")]);
    };
    if list.is_empty() {
        errors.push(FieldError::invalid("packages", "must name at least one package"));
    }
    // Numbers past the double range read as null in a `Value`; JavaScript reads them as
    // ±Infinity, a figure no count can use.
    let non_finite = non_finite_figures(members.get("packages").map(|r| r.get()));
    let mut parsed = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let Value::Object(given) = p else {
            errors.push(FieldError::invalid(format!("packages[{i}]"), "must be a package object"));
            continue;
        };
        let mut fields = given.clone();
        figures_as_numbers(&mut fields);
        let ram = fields.get("max_physical_memory");
        if !ram.is_some_and(|r| r.as_f64().is_some_and(|r| r > 0.0)) {
            errors.push(FieldError::invalid(
                format!("packages[{i}].max_physical_memory"),
                "must be a number of MiB above 0",
            ));
        }
        for (name, min) in [("quota", 0.0), ("cpu_cap", 0.0)] {
            if non_finite.contains(&(i, name)) {
                errors.push(FieldError::invalid(format!("packages[{i}].{name}"), "must be a finite number ≥ 0"));
                continue;
            }
            match fields.get(name) {
                None | Some(Value::Null) => {}
                Some(v) if v.as_f64().is_some_and(|x| x >= min) => {}
                Some(_) => errors.push(FieldError::invalid(format!("packages[{i}].{name}"), "must be a number ≥ 0")),
            }
        }
        for (name, v) in fields.iter().filter(|(k, _)| k.starts_with("overprovision_")) {
            let ok = match v {
                Value::Null => true,
                Value::Number(n) => n.as_f64().is_some_and(|x| x > 0.0),
                Value::String(s) => s.parse::<f64>().is_ok_and(|x| x > 0.0),
                _ => false,
            };
            if !ok {
                errors.push(FieldError::invalid(format!("packages[{i}].{name}"), "must be a ratio above 0"));
            }
        }
        let package = Value::Object(fields);
        match serde_json::from_value::<Package>(package.clone()) {
            Ok(read) => parsed.push((read, package)),
            Err(e) => errors.push(FieldError::invalid(format!("packages[{i}]"), format!("is not a package: {e}"))),
        }
    }
    let vm = top.get("vm").cloned().unwrap_or_else(|| json!({}));
    let image = top.get("image").or_else(|| top.get("img")).cloned().unwrap_or_else(|| json!({}));
    if !vm.is_object() {
        errors.push(FieldError::invalid("vm", "must be an object (the VM template: brand, owner_uuid, traits, ...)"));
    }
    if !image.is_object() {
        errors.push(FieldError::invalid("image", "must be an object"));
    }
    let exact = match top.get("exact") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(FieldError::invalid("exact", "must be true or false"));
            false
        }
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Some(PackageQuery { packages: parsed, vm, image, exact }))
}

/// A package's figures given as numeric text (`"1024"`, `"0x400"`), read as `/allocate`
/// reads a package's (JavaScript's `Number`), made numbers: they become the VM's, which must
/// be numbers.
fn figures_as_numbers(fields: &mut Map<String, Value>) {
    for name in ["max_physical_memory", "quota", "cpu_cap"] {
        let Some(Value::String(text)) = fields.get(name) else { continue };
        let number = Some(Js::str(text).num()).filter(|n| n.is_finite()).map(num_to_json);
        if let Some(number) = number {
            fields.insert(name.into(), number);
        }
    }
}

/// The VM of a package: the template with the package's RAM, disk and CPU cap.
pub fn vm_of(template: &Value, package: &Value) -> Value {
    let mut vm = template.as_object().cloned().unwrap_or_default();
    if let Some(ram) = package.get("max_physical_memory") {
        vm.insert("ram".into(), ram.clone());
    }
    if let Some(quota) = package.get("quota").and_then(Value::as_f64) {
        vm.insert("quota".into(), num_to_json(quota / 1024.0));
    }
    if let Some(cap) = package.get("cpu_cap").filter(|c| !c.is_null()) {
        vm.insert("cpu_cap".into(), cap.clone());
    }
    vm.entry("brand").or_insert_with(|| json!("joyent"));
    // Exact mode runs allocations, which validate these; any uuid will do.
    vm.entry("vm_uuid").or_insert_with(|| json!("00000000-0000-4000-8000-000000000000"));
    vm.entry("owner_uuid").or_insert_with(|| json!("00000000-0000-4000-8000-000000000001"));
    Value::Object(vm)
}

/// What one VM of the package needs on a server, and takes once placed.
#[derive(Debug, Clone, Copy)]
struct Cost {
    need: f64,
    take: f64,
}

/// One server's count for a package.
#[derive(Debug, Clone, PartialEq)]
pub struct Slots {
    pub slots: f64,
    /// `ram`, `cpu`, `disk`, `vms`, or `<resource>_ratio` (the package gives none, the server
    /// has one: nothing fits).
    pub limiting: &'static str,
    /// What is left of the other dimensions once `slots` VMs are placed (MiB, CPU units, MiB;
    /// `None`: the dimension does not bound this package).
    pub stranded: [Option<f64>; 3],
    /// When nothing fits: what one VM needs of the limiting dimension and what the server
    /// has (for `vms`: the count it would reach and the limit).
    pub short: Option<Shortfall>,
}

/// How many VMs fit one after the other on `spare`: each needs `need` free, takes `take`.
fn fit(spare: f64, cost: Cost) -> f64 {
    if spare.is_nan() || spare < cost.need {
        return 0.0;
    }
    if cost.take <= 0.0 {
        return f64::INFINITY;
    }
    ((spare - cost.need) / cost.take).floor() + 1.0
}

/// The chain's placement-independent part run for one VM template: who passes, why the
/// others do not, and what each survivor has, read once and shared by every package of the
/// same template (the part only reads the package's ratios and whether it is capped).
pub struct Prepared<'r> {
    req: Request<'r>,
    facts: Vec<Facts>,
    /// Why each server left out was: its step's reason, else the step's name.
    pub left_out: Map<String, Value>,
    checks: [bool; 4],
}

impl Prepared<'_> {
    /// Server `id`'s unreserved resources, when it passed.
    pub fn unreserved(&self, id: ServerId) -> Option<Unreserved> {
        // Filters keep the servers' order, so the survivors are sorted by id.
        match self.facts.binary_search_by_key(&id, |f| f.id) {
            Ok(i) => Some(self.facts[i].u),
            Err(_) => self.facts.iter().find(|f| f.id == id).map(|f| f.u),
        }
    }

    /// Whether the chain checks disk (`hard-filter-min-disk`, resource filters on).
    pub fn checks_disk(&self) -> bool {
        self.checks[2]
    }
}

/// What a surviving server has for counting: unreserved resources, its ratios, its pool's
/// free space and its VM count.
#[derive(Debug, Clone, Copy)]
struct Facts {
    id: ServerId,
    u: Unreserved,
    /// CPU, RAM and disk overprovision ratios (1 when absent).
    ratios: [f64; 3],
    /// Whether the server has a CPU, RAM and disk ratio at all.
    has_ratio: [bool; 3],
    pool_free: f64,
    vms: f64,
}

/// Runs the placement-independent part of the engine's chain for `package` (its ratios and
/// cap) and the VM template `vm`.
pub fn prepare<'r>(
    engine: &'r Engine,
    servers: &'r [Server<'r>],
    package: &'r Package,
    vm: &'r VmPayload,
    image: &'r Image,
) -> Prepared<'r> {
    // Only the dimensions the configured chain checks bound the count.
    let names: Vec<&str> = engine.chain().plugins().iter().map(|p| p.name()).collect();
    let resources_on = !engine.defaults().filter_min_resources.switched_off();
    let checks = |name: &str| names.contains(&name);
    let checks = [
        resources_on && checks("hard-filter-min-ram"),
        resources_on && checks("hard-filter-min-cpu"),
        resources_on && checks("hard-filter-min-disk"),
        checks("hard-filter-vm-count"),
    ];
    let chain: Vec<Expr> = engine
        .chain()
        .plugins()
        .into_iter()
        .filter(|p| PLACEMENT_INDEPENDENT.contains(&p.name()))
        .map(|p| Expr::Plugin(p.clone()))
        .collect();
    let rng = rand::SeedableRng::seed_from_u64(0);
    let mut req = Request::new(servers, vm, image, Some(package), &[], engine.defaults(), rng);
    let mut steps = Vec::new();
    // A plugin failure leaves no server counted (its step's reasons say why).
    let survivors = Expr::Pipe(chain).run(&mut req, (0..servers.len()).collect(), &mut steps).unwrap_or_default();
    let mut left_out = Map::new();
    let mut alive: Vec<bool> = vec![true; servers.len()];
    let mut kept = vec![usize::MAX; servers.len()];
    for (k, step) in steps.iter().enumerate() {
        step.remaining.iter().for_each(|&id| kept[id] = k);
        for (id, live) in alive.iter_mut().enumerate() {
            if *live && kept[id] != k {
                *live = false;
                let key = servers[id].reason_key();
                let why = step.reasons.get(&key).map_or_else(|| step.name.to_string(), str::to_string);
                left_out.insert(key, Value::String(why));
            }
        }
    }
    let facts = survivors
        .into_iter()
        .filter_map(|id| {
            let u = req.state(id).unreserved?;
            let r = req.ratios(id);
            let server = req.server(id);
            let pool_free =
                ((server.disk_pool_size_bytes.num() * POOL_USABLE_RATIO - server.disk_pool_alloc_bytes.num()) / MIB)
                    .floor();
            Some(Facts {
                id,
                u,
                ratios: [ratio_or_one(r.get("cpu")), ratio_or_one(r.get("ram")), ratio_or_one(r.get("disk"))],
                has_ratio: [r.get("cpu").truthy(), r.get("ram").truthy(), r.get("disk").truthy()],
                pool_free,
                vms: req.vm_count(id) as f64,
            })
        })
        .collect();
    Prepared { req, facts, left_out, checks }
}

/// The packages' `quota` and `cpu_cap` given as numbers past the double range.
fn non_finite_figures(packages: Option<&str>) -> Vec<(usize, &'static str)> {
    let Some(list) = packages.and_then(|text| crate::js::json::from_str::<Js>(text).ok()) else { return Vec::new() };
    let list = list.as_arr().unwrap_or_default();
    let mut found = Vec::new();
    for (i, package) in list.iter().enumerate() {
        for name in ["quota", "cpu_cap"] {
            if matches!(package.get(name), Js::Num(n) if !n.is_finite()) {
                found.push((i, name));
            }
        }
    }
    found
}

/// What of a package and its VM template the placement-independent part reads: packages
/// alike in it share one [`prepare`].
fn template_key(vm: &Value, package: &Value) -> String {
    let strip = |v: &Value, names: &[&str]| {
        let mut m = v.as_object().cloned().unwrap_or_default();
        for name in names {
            m.remove(*name);
        }
        m
    };
    let capped = package.get("cpu_cap").is_some_and(|c| Js::from_json(c).truthy())
        || vm.get("cpu_cap").is_some_and(|c| Js::from_json(c).truthy());
    let vm = strip(vm, &["ram", "quota", "cpu_cap"]);
    let package = strip(package, &["max_physical_memory", "quota", "cpu_cap", "name", "uuid"]);
    json!([vm, package, capped]).to_string()
}

/// Counts package slots on each server of `servers` that passes the placement-independent
/// part of the engine's chain. Returns the counts and the reasons of those left out.
pub fn analytic(
    engine: &Engine,
    servers: &[Server<'_>],
    package: &Package,
    vm: &VmPayload,
    image: &Image,
) -> (Vec<(usize, Slots)>, Map<String, Value>) {
    let prepared = prepare(engine, servers, package, vm, image);
    let counts = count(engine, &prepared, package, vm, image);
    (counts, prepared.left_out)
}

/// Counts `package`'s slots on the servers `prepared` kept (prepared for a template alike).
pub fn count(
    engine: &Engine,
    prepared: &Prepared<'_>,
    package: &Package,
    vm: &VmPayload,
    image: &Image,
) -> Vec<(usize, Slots)> {
    let [check_ram, check_cpu, check_disk, check_vms] = prepared.checks;
    // The package's ratios as the chain left them (override-overprovisioning may set them);
    // packages sharing a preparation have the same ones.
    let pkg = prepared.req.package().cloned().unwrap_or_else(|| PackageState::massage(package));
    let hvm = is_hvm_brand(&vm.brand);
    let kvm = vm.brand.as_str() == Some("kvm");
    let ram = package.max_physical_memory_mib.num();
    let quota = package.quota_mib.num();
    let quota = if quota.is_finite() { quota } else { 0.0 };
    let cap = package.cpu_cap_pct.truthy().then(|| package.cpu_cap_pct.num());
    let files_mib = image
        .files
        .as_arr()
        .unwrap_or_default()
        .iter()
        .map(|f| f.get("size").num())
        .filter(|n| n.is_finite())
        .sum::<f64>()
        / MIB;
    let image_mib = if image.image_size_mib.num().is_finite() { image.image_size_mib.num() } else { 0.0 };
    let limit = match engine.defaults().filter_vm_limit.num() {
        l if l == 0.0 || l.is_nan() => DEFAULT_VM_LIMIT,
        l => l,
    };
    let zvol_gib = if hvm { ((image_mib + quota) / 1024.0).ceil() } else { 0.0 };
    let (pkg_ram, pkg_cpu, pkg_disk) =
        (pkg.overprovision_ram.num(), pkg.overprovision_cpu.num(), pkg.overprovision_disk.num());
    let (has_pkg_ram, has_pkg_cpu, has_pkg_disk) =
        (pkg.overprovision_ram.truthy(), pkg.overprovision_cpu.truthy(), pkg.overprovision_disk.truthy());

    prepared
        .facts
        .iter()
        .map(|f| {
            let u = f.u;
            let [rc, rr, rd] = f.ratios;
            // RAM: min-ram asks for the VM's RAM (over the package ratio unless HVM); a
            // ticketed VM takes its RAM (plus the HVM overhead) over the server's ratio.
            let ram_cost = has_pkg_ram.then(|| Cost {
                need: if hvm { ram } else { ram / pkg_ram },
                take: match (hvm, kvm) {
                    (true, true) => ram + KVM_MEM_OVERHEAD_MIB,
                    (true, false) => ram + BHYVE_MEM_OVERHEAD_MIB,
                    _ => ram / rr,
                },
            });
            // CPU: only a capped package is checked; an uncapped VM zeroes the spare CPU,
            // which nothing checks for an uncapped package.
            let cpu_cost = match cap {
                Some(cap) if has_pkg_cpu => Some(Some(Cost { need: cap / pkg_cpu, take: cap / rc })),
                Some(_) => None,
                None => Some(None),
            };
            // Disk: min-disk asks for the quota (over the package ratio, rounded up) plus the
            // image files and 10 GiB; a placed VM takes its quota over the server's ratio (HVM:
            // its zvol, and for KVM 10 GiB more), unless the pool's free space is the
            // smaller figure, which placing VMs does not change.
            let disk_cost = (quota > 0.0).then(|| {
                has_pkg_disk.then(|| {
                    let need =
                        if hvm { quota + image_mib } else { (quota / pkg_disk).ceil() } + files_mib.ceil() + FUDGE_MIB;
                    let take = if u.disk_mib >= f.pool_free {
                        0.0
                    } else if kvm {
                        quota / rd + zvol_gib * 1024.0 + KVM_EXTRA_MIB
                    } else if hvm {
                        (quota + zvol_gib * 1024.0) / rd
                    } else {
                        quota / rd
                    };
                    Cost { need, take }
                })
            });
            let [has_cpu_ratio, has_ram_ratio, has_disk_ratio] = f.has_ratio;
            let ram_cost = ram_cost.filter(|_| check_ram);
            let cpu_cost = cpu_cost.filter(|_| check_cpu);
            let disk_cost = disk_cost.filter(|_| check_disk);
            // Each dimension: its name, how many fit, what one VM needs and what is spare.
            let mut dims: [(&'static str, f64, f64, f64); 4] = [("none", f64::INFINITY, 0.0, 0.0); 4];
            let mut n = 0;
            let mut push = |d: (&'static str, f64, f64, f64)| {
                dims[n] = d;
                n += 1;
            };
            match ram_cost {
                Some(c) => push(("ram", fit(u.ram_mib, c), c.need, u.ram_mib)),
                None if check_ram && has_ram_ratio => push(("ram_ratio", 0.0, f64::NAN, f64::NAN)),
                None => {}
            }
            match cpu_cost {
                Some(Some(c)) => push(("cpu", fit(u.cpu_pct, c), c.need, u.cpu_pct)),
                None if check_cpu && has_cpu_ratio => push(("cpu_ratio", 0.0, f64::NAN, f64::NAN)),
                _ => {}
            }
            match disk_cost {
                Some(Some(c)) => push(("disk", fit(u.disk_mib, c), c.need, u.disk_mib)),
                Some(None) if check_disk && has_disk_ratio => push(("disk_ratio", 0.0, f64::NAN, f64::NAN)),
                _ => {}
            }
            if check_vms {
                push(("vms", (limit - f.vms).max(0.0).ceil(), f.vms + 1.0, limit));
            }
            let (limiting, slots, need, spare) = dims[..n]
                .iter()
                .copied()
                .fold(("none", f64::INFINITY, 0.0, 0.0), |best, d| if d.1 < best.1 { d } else { best });
            let left = |spare: f64, cost: Option<Cost>| cost.map(|c| (spare - slots * c.take).max(0.0));
            let stranded = [
                left(u.ram_mib, ram_cost),
                left(u.cpu_pct, cpu_cost.flatten()),
                left(u.disk_mib, disk_cost.flatten()).map(|d| if d.is_finite() { d } else { u.disk_mib }),
            ];
            let short = (slots == 0.0 && !need.is_nan()).then_some(Shortfall {
                resource: limiting,
                unit: match limiting {
                    "cpu" => "CPU units",
                    "vms" => "VMs",
                    _ => "MiB",
                },
                needed: need,
                available: spare,
            });
            (f.id, Slots { slots, limiting, stranded, short })
        })
        .collect()
}

/// Exact count: allocations one after the other with the whole chain in an engine
/// [`Datacenter`], each VM listed on the server chosen for it (as a batch places them), until
/// none fits. Per server. The chain's leading per-server part is re-run only for the server
/// that got the last VM ([`Placer`]); the choices are those of a whole chain run per
/// placement ([`placements`] with `incremental` false, the reference tests compare with).
pub fn exact(
    engine: &Engine,
    raw_servers: &[&str],
    vm: &Value,
    image: &Value,
    package: &Value,
) -> Result<Vec<usize>, AnswerError> {
    let placed = placements(engine, raw_servers, vm, image, package, true)?;
    Ok(per_server(&placed.order, raw_servers.len()))
}

/// How many of `order`'s placements went to each of `servers` servers.
fn per_server(order: &[ServerId], servers: usize) -> Vec<usize> {
    let mut counts = vec![0usize; servers];
    order.iter().for_each(|&id| counts[id] += 1);
    counts
}

/// The placements [`exact`] makes.
#[derive(Debug)]
pub struct Placements {
    /// The servers chosen, in order.
    pub order: Vec<ServerId>,
    /// How many were chosen without running the chain past its per-server part
    /// ([`Placer::reused`]).
    pub reused: usize,
}

/// The placements [`exact`] makes (`incremental`), or those of a whole chain run per
/// placement: the same servers in the same order.
pub fn placements(
    engine: &Engine,
    raw_servers: &[&str],
    vm: &Value,
    image: &Value,
    package: &Value,
    incremental: bool,
) -> Result<Placements, AnswerError> {
    // The request is read and checked as an allocation's is (the VM as CNAPI would send it).
    let mut text = String::from("{\"servers\":[");
    for (i, raw) in raw_servers.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(raw);
    }
    let rest = json!({"vm": vm, "image": image, "package": package});
    text.push_str("],");
    let rest = rest.to_string();
    text.push_str(&rest[1..]);
    let mut body = crate::wire::parse_allocate_body(text.as_bytes())?;
    crate::validate::validate_allocate(&mut body)?;
    let servers = std::mem::take(&mut body.servers);
    let raw = std::mem::take(&mut body.raw_servers);
    // Only owner filters and custom plugins read the servers' JSON; keeping it current
    // (rewritten at each placement) is the dearest part of listing a VM.
    let registry = crate::registry::built_in();
    let names: Vec<&str> = engine.chain().plugins().iter().map(|p| p.name()).collect();
    let reads_json = engine.defaults().filter_owner_server.truthy()
        || names.iter().any(|n| !registry.iter().any(|p| p.name() == *n));
    let raw = if reads_json { raw } else { Vec::new() };
    let mut order = Vec::new();
    let mut dc = Datacenter::new(servers, raw);
    let request = VmRequest {
        vm: &body.vm,
        image: &body.image,
        package: body.package.as_ref(),
        tickets: &body.tickets,
        seed: Some(1),
        raw: body.raw,
    };
    let uuid = |n: usize| format!("00000000-0000-4000-9000-{n:012x}");
    if incremental {
        let mut placer = Placer::new(engine);
        for n in 0..EXACT_MAX {
            let chosen = placer.place(&mut dc, &request, &uuid(n)).map_err(|e| AnswerError::Internal(e.to_string()))?;
            let Some(id) = chosen else { break };
            order.push(id);
        }
        return Ok(Placements { order, reused: placer.reused() });
    }
    // A server removed by one of the chain's leading per-server filters stays removed as
    // VMs are placed (those filters do not see the placement, or only see room shrink), and
    // nothing before them compares servers: later placements need not offer it again.
    // `hard-filter-volumes-from` passes every server on when the VM takes no volumes (it
    // keeps the first holder otherwise, which depends on the others).
    let no_volumes = !body.vm.docker.truthy() || !body.vm.internal_metadata.truthy();
    let safe = |name: &str| {
        PLACEMENT_INDEPENDENT.contains(&name)
            || MONOTONE.contains(&name)
            || (no_volumes && name == "hard-filter-volumes-from")
    };
    let prunable: Vec<&str> = match engine.chain() {
        Expr::Pipe(items) => items
            .iter()
            .map_while(|e| match e {
                Expr::Plugin(p) if safe(p.name()) => Some(p.name()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let mut candidates: Vec<ServerId> = (0..dc.servers().len()).collect();
    let mut offered = vec![false; dc.servers().len()];
    for n in 0..EXACT_MAX {
        let allocation = engine
            .place_among(&mut dc, &request, &uuid(n), candidates.clone())
            .map_err(|e| AnswerError::Internal(e.to_string()))?;
        let Some(id) = allocation.chosen else { break };
        order.push(id);
        // The steps of the leading filters, in order: what the last of them kept goes on.
        let leading = allocation.steps.iter().take_while(|s| prunable.contains(&s.plugin)).count();
        if leading == prunable.len() && leading > 0 {
            offered.iter_mut().for_each(|o| *o = false);
            allocation.steps[leading - 1].remaining.iter().for_each(|&id| offered[id] = true);
            candidates.retain(|&id| offered[id]);
        }
    }
    Ok(Placements { order, reused: 0 })
}

/// Servers in a totals group: count, free and total (CPU units, MiB, MiB), why left out.
type Group = (usize, [f64; 3], [f64; 3], Map<String, Value>);

/// The capacity.js-style totals: free and total CPU, RAM and disk over usable servers, and
/// apart over the reserved and unusable ones, with their counts and why.
pub fn totals(engine: &Engine, servers: &[Server<'_>]) -> Value {
    let capacity = engine.capacity(servers).ok();
    let mut free = vec![None; servers.len()];
    if let Some(c) = &capacity {
        for (id, u) in &c.servers {
            free[*id] = Some(*u);
        }
    }
    let mut groups: [Group; 3] = Default::default();
    for (id, s) in servers.iter().enumerate() {
        let cores = s.sysinfo().cpu_total_cores.num();
        let total = [
            if cores.is_finite() { cores * 100.0 } else { 0.0 },
            (s.memory_total_bytes.num() / MIB).floor(),
            (s.disk_pool_size_bytes.num() / MIB).floor(),
        ];
        let (group, why) = match (free[id], s.reserved.truthy()) {
            (Some(_), false) => (0, None),
            (Some(_), true) => (1, Some("reserved".to_string())),
            (None, _) => {
                let why = capacity
                    .as_ref()
                    .and_then(|c| c.reasons.get(&s.reason_key()).map(str::to_string))
                    .unwrap_or_else(|| "left out".into());
                (2, Some(why))
            }
        };
        let g = &mut groups[group];
        g.0 += 1;
        for (t, v) in g.2.iter_mut().zip(total) {
            *t += if v.is_finite() { v } else { 0.0 };
        }
        if let Some(u) = free[id] {
            for (f, v) in g.1.iter_mut().zip([u.cpu_pct, u.ram_mib, u.disk_mib]) {
                *f += v.max(0.0);
            }
        }
        if let Some(why) = why {
            let count = g.3.entry(why).or_insert(json!(0));
            *count = json!(count.as_u64().unwrap_or(0) + 1);
        }
    }
    let group = |g: &Group, with_free: bool, with_why: bool| {
        let mut out = json!({"servers": g.0});
        for (i, name) in ["cpu", "ram", "disk"].iter().enumerate() {
            out[*name] = if with_free {
                json!({"free": num_to_json(g.1[i]), "total": num_to_json(g.2[i])})
            } else {
                json!({"total": num_to_json(g.2[i])})
            };
        }
        if with_why {
            out["why"] = Value::Object(g.3.clone());
        }
        out
    };
    json!({
        "usable": group(&groups[0], true, false),
        "reserved": group(&groups[1], true, true),
        "unusable": group(&groups[2], false, true),
    })
}

/// The `packages` answer: per package, the total, per server, limiting counts and the
/// stranded capacity.
pub fn packages_answer(
    engine: &Engine,
    servers: &[Server<'_>],
    raw_servers: &[&str],
    query: &PackageQuery,
) -> Result<Vec<PackageSlots>, AnswerError> {
    let invalid =
        |field: &str, e: serde_json::Error| AnswerError::Invalid(vec![FieldError::invalid(field, e.to_string())]);
    let image: Image = serde_json::from_value(query.image.clone()).map_err(|e| invalid("image", e))?;
    let vm_jsons: Vec<Value> = query.packages.iter().map(|(_, raw)| vm_of(&query.vm, raw)).collect();
    let vms = vm_jsons
        .iter()
        .map(|v| serde_json::from_value::<VmPayload>(v.clone()).map_err(|e| invalid("vm", e)))
        .collect::<Result<Vec<_>, _>>()?;
    check_template(&image, &vms)?;
    // The placement-independent part runs once per distinct template, not per package.
    // Its reasons for the servers left out are shared by those packages' answers.
    let mut prepared: Vec<(String, Prepared<'_>, LeftOut)> = Vec::new();
    let keys: Arc<[String]> = servers.iter().map(Server::reason_key).collect();
    let heads = Arc::new(Heads::new(&keys));
    let mut answers = Vec::new();
    for (i, (package, raw)) in query.packages.iter().enumerate() {
        let (vm_json, vm) = (&vm_jsons[i], &vms[i]);
        let key = template_key(vm_json, raw);
        let at = match prepared.iter().position(|(k, _, _)| *k == key) {
            Some(at) => at,
            None => {
                let group = prepare(engine, servers, package, vm, &image);
                let left_out = LeftOut(Arc::new(group.left_out.clone()));
                prepared.push((key, group, left_out));
                prepared.len() - 1
            }
        };
        let (_, group, left_out) = &prepared[at];
        let counts = count(engine, group, package, vm, &image);
        // Few distinct dimensions: counted in a list, in the order first seen (as the map keeps).
        let mut limits: Vec<(&'static str, u64)> = Vec::new();
        let mut stranded = [0.0f64; 3];
        let (mut slots, mut with_room) = (0.0, 0usize);
        for (_, s) in &counts {
            slots += s.slots;
            if s.slots > 0.0 {
                with_room += 1;
            }
            match limits.iter_mut().find(|(name, _)| *name == s.limiting) {
                Some((_, n)) => *n += 1,
                None => limits.push((s.limiting, 1)),
            }
            for (t, v) in stranded.iter_mut().zip(s.stranded) {
                *t += v.unwrap_or(0.0);
            }
        }
        let limiting: Map<String, Value> = limits.into_iter().map(|(name, n)| (name.to_string(), json!(n))).collect();
        let exact = if query.exact {
            let exact_counts = exact(engine, raw_servers, vm_json, &query.image, raw)?;
            let per: Map<String, Value> = exact_counts
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(id, &n)| (keys[id].clone(), json!(n)))
                .collect();
            Some(json!({"slots": exact_counts.iter().sum::<usize>(), "servers": per}))
        } else {
            None
        };
        answers.push(PackageSlots {
            package: raw.get("uuid").or_else(|| raw.get("name")).cloned().unwrap_or(json!(i)),
            slots,
            servers_with_room: with_room,
            limiting,
            stranded: stranded.map(Some),
            servers: ServerSlots { keys: keys.clone(), heads: heads.clone(), counts },
            left_out: left_out.clone(),
            exact,
        });
    }
    Ok(answers)
}

/// One package's part of the answer, written straight to JSON (at thousands of servers a
/// tree of `Value`s per server costs more than the counting).
#[derive(Debug, Serialize)]
pub struct PackageSlots {
    /// The package's uuid, else its name, else its index.
    pub package: Value,
    #[serde(serialize_with = "js_num")]
    pub slots: f64,
    pub servers_with_room: usize,
    pub limiting: Map<String, Value>,
    #[serde(serialize_with = "stranded_out")]
    pub stranded: [Option<f64>; 3],
    pub servers: ServerSlots,
    pub left_out: LeftOut,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exact: Option<Value>,
}

/// What a package gives its VM, by the VM's attribute: a message about one is about the
/// package.
const FROM_PACKAGE: [(&str, &str); 3] = [("ram", "max_physical_memory"), ("quota", "quota"), ("cpu_cap", "cpu_cap")];

/// The image and each package's VM checked as `/allocate` checks its own (a template with
/// `brand: 5` would otherwise be counted as some VM).
fn check_template(image: &Image, vms: &[VmPayload]) -> Result<(), AnswerError> {
    use crate::validate::{validate_image, validate_image_extensions, validate_vm_extensions, validate_vm_payload};
    if let Some(message) = validate_image(image).or_else(|| validate_image_extensions(image)) {
        return Err(AnswerError::Invalid(vec![FieldError::invalid("image", message)]));
    }
    for (i, vm) in vms.iter().enumerate() {
        let mut checked = vm.clone();
        if let Some(message) =
            validate_vm_payload(&mut checked, &image.requirements).or_else(|| validate_vm_extensions(&checked))
        {
            let field = crate::validate::vm_field("vm", &message);
            let field = match FROM_PACKAGE.iter().find(|(attr, _)| field.strip_prefix("vm.") == Some(*attr)) {
                Some((_, name)) => format!("packages[{i}].{name}"),
                None => field,
            };
            return Err(AnswerError::Invalid(vec![FieldError::invalid(field, message)]));
        }
    }
    Ok(())
}

/// Why servers were left out, shared by the packages of one template.
#[derive(Debug, Clone)]
pub struct LeftOut(pub Arc<Map<String, Value>>);

impl Serialize for LeftOut {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// The `packages` answer as JSON, appended to `out`: the bytes `js::json::to_writer` gives
/// for it, with the per-server entries (tens of thousands for thousands of servers) written
/// directly, without a serializer call or an allocation per entry.
pub fn write_packages(out: &mut Vec<u8>, packages: &[PackageSlots]) -> serde_json::Result<()> {
    use crate::js::json::to_writer;
    let entries: usize = packages.iter().map(|p| p.servers.counts.len()).sum();
    out.reserve(entries * 112 + packages.len() * 256);
    out.push(b'[');
    for (i, p) in packages.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"package\":");
        to_writer(&mut *out, &p.package)?;
        out.extend_from_slice(b",\"slots\":");
        write_num_json(out, p.slots);
        out.extend_from_slice(b",\"servers_with_room\":");
        write_uint_json(out, p.servers_with_room as u64);
        out.extend_from_slice(b",\"limiting\":");
        to_writer(&mut *out, &p.limiting)?;
        out.extend_from_slice(b",\"stranded\":");
        write_stranded(out, &p.stranded);
        out.extend_from_slice(b",\"servers\":");
        p.servers.write_json(out);
        out.extend_from_slice(b",\"left_out\":");
        to_writer(&mut *out, &*p.left_out.0)?;
        if let Some(exact) = &p.exact {
            out.extend_from_slice(b",\"exact\":");
            to_writer(&mut *out, exact)?;
        }
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

/// `{"ram", "cpu", "disk"}` as [`stranded_out`] writes it.
fn write_stranded(out: &mut Vec<u8>, v: &[Option<f64>; 3]) {
    for (name, x) in [&b"{\"ram\":"[..], b",\"cpu\":", b",\"disk\":"].iter().zip(v) {
        out.extend_from_slice(name);
        match x {
            Some(x) => write_num_json(out, *x),
            None => out.extend_from_slice(b"null"),
        }
    }
    out.push(b'}');
}

/// Each server's entry opening, `"uuid":{"slots":`, made once per answer and copied into
/// every package's part.
#[derive(Debug)]
struct Heads {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Heads {
    fn new(keys: &[String]) -> Heads {
        let mut bytes = Vec::with_capacity(keys.iter().map(|k| k.len() + 12).sum());
        let mut ends = Vec::with_capacity(keys.len());
        for key in keys {
            crate::engine::write_json_str(&mut bytes, key);
            bytes.extend_from_slice(b":{\"slots\":");
            ends.push(bytes.len());
        }
        Heads { bytes, ends }
    }

    fn get(&self, id: ServerId) -> &[u8] {
        let start = id.checked_sub(1).map_or(0, |i| self.ends[i]);
        &self.bytes[start..self.ends[id]]
    }
}

/// Per server: `{uuid: {"slots", "limiting", "stranded": {"ram", "cpu", "disk"}}}`.
#[derive(Debug)]
pub struct ServerSlots {
    keys: Arc<[String]>,
    heads: Arc<Heads>,
    pub counts: Vec<(ServerId, Slots)>,
}

impl ServerSlots {
    /// The entries as JSON (as serialized below), appended to `out`.
    fn write_json(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        for (i, (id, slots)) in self.counts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(self.heads.get(*id));
            write_num_json(out, slots.slots);
            out.extend_from_slice(b",\"limiting\":");
            crate::engine::write_json_str(out, slots.limiting);
            out.extend_from_slice(b",\"stranded\":");
            write_stranded(out, &slots.stranded);
            out.push(b'}');
        }
        out.push(b'}');
    }
}

impl Serialize for ServerSlots {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(Serialize)]
        struct Entry<'a> {
            #[serde(serialize_with = "js_num")]
            slots: &'a f64,
            limiting: &'a str,
            #[serde(serialize_with = "stranded_out")]
            stranded: &'a [Option<f64>; 3],
        }
        let mut map = s.serialize_map(Some(self.counts.len()))?;
        for (id, slots) in &self.counts {
            let entry = Entry { slots: &slots.slots, limiting: slots.limiting, stranded: &slots.stranded };
            map.serialize_entry(&self.keys[*id], &entry)?;
        }
        map.end()
    }
}

fn js_num<S: serde::Serializer>(n: &f64, s: S) -> Result<S::Ok, S::Error> {
    num_to_json(*n).serialize(s)
}

/// `{"ram", "cpu", "disk"}`, `null` for a dimension that does not bound the package.
fn stranded_out<S: serde::Serializer>(v: &[Option<f64>; 3], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(3))?;
    for (name, x) in ["ram", "cpu", "disk"].iter().zip(v) {
        map.serialize_entry(name, &x.map_or(Value::Null, num_to_json))?;
    }
    map.end()
}

/// The packages part of a capacity answer as a table (`dapi capacity --package`): per
/// package, the slots, servers with room, what limits them, and what is left stranded.
pub fn table(answer: &Value) -> String {
    use std::fmt::Write as _;
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    };
    let mut rows = vec![[
        "PACKAGE".to_string(),
        "SLOTS".into(),
        "EXACT".into(),
        "SERVERS WITH ROOM".into(),
        "LIMITED BY".into(),
        "STRANDED RAM MiB".into(),
        "STRANDED CPU".into(),
        "STRANDED DISK MiB".into(),
    ]];
    for p in answer["packages"].as_array().into_iter().flatten() {
        let limiting = p["limiting"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        rows.push([
            text(&p["package"]),
            text(&p["slots"]),
            text(&p["exact"]["slots"]),
            text(&p["servers_with_room"]),
            limiting,
            text(&p["stranded"]["ram"]),
            text(&p["stranded"]["cpu"]),
            text(&p["stranded"]["disk"]),
        ]);
    }
    let mut out = columns(&rows);
    // Why servers hold no slot of a package (a package that fits nowhere says nothing else).
    const LEFT_OUT_SHOWN: usize = 5;
    for p in answer["packages"].as_array().into_iter().flatten() {
        let Some(left_out) = p["left_out"].as_object().filter(|l| !l.is_empty()) else { continue };
        let _ = write!(out, "\npackage {} leaves out {} server(s):", text(&p["package"]), left_out.len());
        for (server, why) in left_out.iter().take(LEFT_OUT_SHOWN) {
            let _ = write!(out, "\n  {server}: {}", text(why));
        }
        if left_out.len() > LEFT_OUT_SHOWN {
            let _ = write!(out, "\n  ... and {} more (--json lists them all)", left_out.len() - LEFT_OUT_SHOWN);
        }
    }
    let totals = &answer["totals"];
    for group in ["usable", "reserved", "unusable"] {
        let g = &totals[group];
        let _ = write!(out, "\n{group} servers: {}", text(&g["servers"]));
        for dim in ["cpu", "ram", "disk"] {
            match g[dim].get("free") {
                Some(free) => {
                    let _ = write!(out, ", {dim} {} free of {}", text(free), text(&g[dim]["total"]));
                }
                None => {
                    let _ = write!(out, ", {dim} {} total", text(&g[dim]["total"]));
                }
            }
        }
        if let Some(why) = g["why"].as_object().filter(|w| !w.is_empty()) {
            let reasons: Vec<String> = why.iter().map(|(k, v)| format!("{v} {k}")).collect();
            let _ = write!(out, " ({})", reasons.join("; "));
        }
    }
    out.push('\n');
    out
}

/// Rows as left-aligned columns, two spaces apart, each line without trailing blanks.
pub(crate) fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    use std::fmt::Write;
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(widths) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_are_written_as_the_serializer_writes_them() {
        let keys: Arc<[String]> = ["a", "b\"c", "\u{10FFFF}d"].iter().map(|s| s.to_string()).collect();
        let slot = |slots: f64, stranded: [Option<f64>; 3]| Slots { slots, limiting: "ram", stranded, short: None };
        let counts = vec![
            (0, slot(3.0, [Some(1.5), None, Some(f64::INFINITY)])),
            (1, slot(f64::INFINITY, [Some(-2.0), Some(0.1 + 0.2), Some(1e300)])),
            (2, slot(0.0, [Some(9.007_199_254_740_993e15), Some(-0.0), None])),
        ];
        let mut left = Map::new();
        left.insert("x".into(), json!("reserved"));
        let package = |exact| PackageSlots {
            package: json!("p"),
            slots: 12.25,
            servers_with_room: 2,
            limiting: Map::from_iter([("ram".to_string(), json!(2))]),
            stranded: [Some(1.0), None, Some(2.5)],
            servers: ServerSlots { keys: keys.clone(), heads: Arc::new(Heads::new(&keys)), counts: counts.clone() },
            left_out: LeftOut(Arc::new(left.clone())),
            exact,
        };
        let packages = [package(None), package(Some(json!({"slots": 3})))];
        let mut written = Vec::new();
        write_packages(&mut written, &packages).expect("writes");
        let serialized = crate::js::json::to_vec(&packages[..]).expect("serializes");
        assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&serialized));
    }
}
