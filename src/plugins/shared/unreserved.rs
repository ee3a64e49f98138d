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

/// `x - a₁/r₁ - a₂/r₂ - …` taken left to right, for whole numbers `a ≥ 0` given as
/// `(Σa, r)` per divisor, when no step of that sequence rounds, whatever the order of the
/// terms; `None` when that cannot be shown (then the caller takes the steps one by one).
///
/// With every divisor a power of two, every term and `x` are multiples of the smallest of
/// their lowest bits, `2^q`, and each partial result lies between `x` and the final one
/// (the terms are ≥ 0); below 2^53 units of `2^q` all of them are doubles, so each step is
/// exact and the result is the exact one, computed here in integers.
pub fn exact_subtract(x: f64, terms: &[(u128, f64)]) -> Option<f64> {
    if !x.is_finite() || terms.len() > 2 {
        return None;
    }
    if terms.iter().all(|&(sum, _)| sum == 0) {
        // Taking away zeros leaves `x` as it is (-0 included).
        return Some(x);
    }
    // The exponent of each divisor's reciprocal (r = 2^-k).
    let mut ks = [0i32; 2];
    for (k, &(_, r)) in ks.iter_mut().zip(terms) {
        *k = -power_of_two(r)?;
    }
    let (x_units, x_q) = units(x);
    let q = ks[..terms.len()].iter().copied().fold(x_q.unwrap_or(i32::MAX), i32::min);
    if !(-1000..=1000).contains(&q) {
        return None;
    }
    let scale = |from: i32| u32::try_from(from - q).ok().filter(|&s| s < 60).map(|s| 1i128 << s);
    let mut total: i128 = 0;
    for (&(sum, _), &k) in terms.iter().zip(&ks) {
        total = total.checked_add(i128::try_from(sum).ok()?.checked_mul(scale(k)?)?)?;
    }
    let start = match x_q {
        Some(x_q) => x_units.checked_mul(scale(x_q)?)?,
        None => 0,
    };
    let end = start.checked_sub(total)?;
    const LIMIT: i128 = 1 << 53;
    if start.abs() >= LIMIT || end.abs() >= LIMIT {
        return None;
    }
    // Exact: |end| < 2^53 and 2^q is a normal double.
    Some(end as f64 * f64::from_bits(((q + 1023) as u64) << 52))
}

/// `k` when `r` is exactly `2^k` (a normal double).
fn power_of_two(r: f64) -> Option<i32> {
    let bits = r.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    (r > 0.0 && bits & ((1 << 52) - 1) == 0 && exp != 0 && exp != 0x7ff).then_some(exp - 1023)
}

/// `x` as `units × 2^q` with `units` odd; `q` is `None` for zero.
fn units(x: f64) -> (i128, Option<i32>) {
    if x == 0.0 {
        return (0, None);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1 << 52) - 1);
    let (mantissa, e) = if exp == 0 { (fraction, -1074) } else { (fraction | 1 << 52, exp - 1075) };
    let tz = mantissa.trailing_zeros();
    let m = i128::from(mantissa >> tz);
    (if x < 0.0 { -m } else { m }, Some(e + tz as i32))
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
    // The inline VMs in one go when their sums give exactly what the steps would.
    let summary = server.vm_summary();
    let start = if summary.reset { 0.0 } else { cpu };
    let cpu_sum = summary.cap_sum.and_then(|sum| exact_subtract(start, &[(sum.into(), rc)]));
    let ram_sum =
        summary.ram_sums.and_then(|(hvm, other)| exact_subtract(ram, &[(hvm.into(), 1.0), (other.into(), rr)]));
    let inline = match (cpu_sum, ram_sum) {
        (Some(c), Some(r)) => {
            (cpu, ram) = (c, r);
            kvms = summary.kvm_count as usize;
            0
        }
        _ => server.inline_vm_count(),
    };
    let ticketed = req.state(id).ticket_vms.iter().map(|(_, vm)| vm);
    for vm in (0..inline).map(|i| server.inline_vm_at(i)).chain(ticketed) {
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
        && req.state(id).ticket_vms.is_empty();
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
    let state = req.state(id);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Whenever the sums are taken in one go, they give what the steps give, in any order.
    #[test]
    fn sums_in_one_go_equal_the_steps() {
        let mut state = 0x853c_49e6_748f_ea9b_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut taken = 0;
        for round in 0..20_000 {
            let x = match round % 6 {
                0 => (next() % 10_000) as f64 * 100.0,
                1 => (next() % 1_000_000) as f64 / 1048576.0 * 0.85,
                2 => 274877906944.0 / MIB * (1.0 - 0.15),
                3 => -((next() % 1000) as f64) / 3.0,
                4 => 0.0,
                _ => f64::from_bits(next() % (1 << 62)),
            };
            let divisors = [1.0, 4.0, 0.5, 2.0, 3.0, 1.5, 1024.0];
            let (r1, r2) = (divisors[(next() % 7) as usize], divisors[(next() % 7) as usize]);
            let n = (next() % 40) as usize;
            let terms: Vec<(u64, bool)> = (0..n)
                .map(|_| {
                    let a = match next() % 5 {
                        0 => next() % 4,
                        1 => next() % 100_000,
                        2 => next() % (1 << 53),
                        _ => next() % 4096,
                    };
                    (a, next() % 2 == 0)
                })
                .collect();
            let mut stepped = x;
            for &(a, first) in &terms {
                stepped -= if first { a as f64 / r1 } else { a as f64 / r2 };
            }
            let sum = |first: bool| terms.iter().filter(|t| t.1 == first).map(|t| u128::from(t.0)).sum::<u128>();
            if let Some(got) = exact_subtract(x, &[(sum(true), r1), (sum(false), r2)]) {
                taken += 1;
                assert_eq!(got.to_bits(), stepped.to_bits(), "x {x:e}, r {r1} {r2}, terms {terms:?}");
            }
        }
        assert!(taken > 1000, "the one-go path was taken {taken} times");
    }
}
