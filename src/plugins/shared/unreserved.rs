//! Unreserved CPU, RAM and disk of a server (ALGORITHMS.md §3 `calculate-server-unreserved`):
//! what is left once every VM on it, inline or ticketed, has taken its promised share, with
//! the server's overprovision ratios applied.
//!
//! The arithmetic is the original's JS arithmetic: every field is coerced with unary plus, so
//! a missing numeric field makes its result NaN (and NaN survives `min`). The two sums the
//! original writes with `+` go through [`js_add`], so a numeric string there concatenates as
//! it did.

use crate::engine::{Request, ServerId, Unreserved};
use crate::js::{js_add, js_min, Js, JsObject, JsRef};
use crate::model::Shape;

pub const MIB: f64 = 1_048_576.0;
pub const GIB: f64 = 1_073_741_824.0;
/// The fraction of the zpool treated as usable; the rest goes to ZFS metadata.
pub const POOL_USABLE_RATIO: f64 = 0.94;
/// Reserved per KVM VM on top of the zvol sizes, because KVM quotas were misapplied in
/// production and cannot be trusted.
const KVM_EXTRA_BYTES: f64 = 10.0 * GIB;

/// The ratios a server without any is treated with: RAM and disk never overprovisioned,
/// CPU four times (key order ram, disk, cpu, as the server object shows it).
pub fn default_ratios() -> Js {
    let ratios: JsObject =
        [("ram", 1.0), ("disk", 1.0), ("cpu", 4.0)].into_iter().map(|(k, v)| (k.into(), Js::Num(v))).collect();
    Js::obj(ratios)
}

/// HVM brands: their memory is never overprovisioned and they carry zvols.
pub fn is_hvm_brand<'v>(brand: impl Into<JsRef<'v>>) -> bool {
    matches!(brand.into().as_str(), Some("bhyve" | "kvm"))
}

/// `ratio || 1`: a missing, zero or NaN ratio means full accounting.
pub fn ratio_or_one(ratio: &Js) -> f64 {
    if ratio.truthy() {
        ratio.num()
    } else {
        1.0
    }
}

/// A byte count the ticketed VMs added to: unchanged when nothing was added (so its JS type
/// is kept for the later `+`), else the numeric sum.
fn with_added(field: &Js, added: f64) -> Js {
    if added == 0.0 {
        field.clone()
    } else {
        Js::Num(field.num() + added)
    }
}

/// The server's unreserved resources, reading its effective ratios (`req.ratios(id)`, which
/// the caller defaults first) and its VMs in order, ticketed ones last.
///
/// A server without (truthy) sysinfo has nothing unreserved. A missing or null `vms` (the
/// original throws) reads as no VMs.
pub fn unreserved(req: &Request<'_>, id: ServerId) -> Unreserved {
    let server = req.server(id);
    if !server.sysinfo.truthy() {
        return Unreserved { cpu_pct: 0.0, ram_mib: 0.0, disk_mib: 0.0 };
    }
    let ratios = req.ratios(id);
    let sysinfo = server.sysinfo();

    let mut cpu = if sysinfo.cpu_online_count.is_undefined() {
        sysinfo.cpu_total_cores.num() * 100.0
    } else {
        // The key counts even when its value is null.
        sysinfo.cpu_online_count.num() * 100.0
    };
    let mut ram = server.memory_total_bytes.num() / MIB * (1.0 - server.reservation_ratio.num());

    let rc = ratio_or_one(ratios.get("cpu"));
    let rr = ratio_or_one(ratios.get("ram"));
    let mut kvms = 0usize;
    for (_, vm) in req.vms(id) {
        let load = vm.load();
        // Only `kvm` gets the disk allowance; bhyve zvols live inside the zone quota.
        kvms += usize::from(load.kvm);
        match load.cpu_cap {
            Some(cap) if !load.failed => cpu -= cap / rc,
            Some(_) => {}
            // An uncapped VM may use every CPU: nothing is left, whatever came before.
            None => cpu = 0.0,
        }
        if !load.failed {
            ram -= if load.hvm { load.ram_mib } else { load.ram_mib / rr };
        }
    }
    let disk = disk_mib(req, id, ratios, kvms as f64);

    // The original returns before flooring when `vms` is falsy yet enumerable (0, false, "").
    let unfloored = matches!(&server.vms, Shape::Other(v) if !v.truthy() && !matches!(v, Js::Null))
        && req.state[id].ticket_vms.is_empty();
    if !unfloored {
        cpu = cpu.floor();
        ram = ram.floor();
    }
    Unreserved { cpu_pct: cpu, ram_mib: ram, disk_mib: disk }
}

/// Unreserved disk in MiB (floored): usable pool minus system, images, cores, zvols (plus a
/// KVM allowance), used zone quota and overprovisioned unused zone quota, capped at the
/// pool's actual free space.
fn disk_mib(req: &Request<'_>, id: ServerId, ratios: &Js, kvms: f64) -> f64 {
    let s = req.server(id);
    let state = &req.state[id];
    let usable = s.disk_pool_size_bytes.num() * POOL_USABLE_RATIO;
    let mut unreserved = usable
        - s.disk_system_used_bytes.num()
        - s.disk_installed_images_used_bytes.num()
        - s.disk_cores_quota_used_bytes.num();

    let zvols = with_added(&s.disk_kvm_zvol_volsize_bytes, state.kvm_zvol_added_bytes);
    // (Exact: counts times 10 GiB stay far below 2^53.)
    unreserved -= js_add(&zvols, &Js::Num(kvms * KVM_EXTRA_BYTES)).num();

    let rd = ratio_or_one(ratios.get("disk"));
    let zone_quota = with_added(&s.disk_zone_quota_bytes, state.zone_quota_added_bytes);
    let zone_free = zone_quota.num() - s.disk_zone_quota_used_bytes.num();
    unreserved -= js_add(&s.disk_zone_quota_used_bytes, &Js::Num(zone_free / rd)).num();

    let pool_free = usable - s.disk_pool_alloc_bytes.num();
    (js_min(unreserved, pool_free) / MIB).floor()
}
