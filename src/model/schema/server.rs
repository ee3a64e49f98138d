//! `validateServer`: the dapi server JSON schema (`VALIDATION.md` §9), walked depth-first in
//! schema order so the first violation reported is the one the original reported.
//!
//! The walk reads the typed [`Server`]: every schema property has a field there, and
//! sub-objects received as objects are [`Shape::Obj`] (their string form, should a message
//! need it, is `[object object]`). Keys of `vms`, `Network Interfaces` and
//! `overprovision_ratios` are visited in JS enumeration order.

use crate::js::{Js, JsObject};
use crate::model::{Nic, Server, ServerVm, Shape, Sysinfo};

use super::patterns::{first_in_js_order, first_of_entries_in_js_order};
use super::{self as schema, property, Leaf, Pattern, Ty};

const UUID: Leaf = Leaf::of(Ty::String).required().pattern(Pattern::Uuid);
const COUNT_0: Leaf = Leaf::of(Ty::Integer).required().min(0.0);
const COUNT_1: Leaf = Leaf::of(Ty::Integer).required().min(1.0);
const FLAG: Leaf = Leaf::of(Ty::Boolean).required();
const RESERVATION_RATIO: Leaf = Leaf::of(Ty::Number).required().min(0.0).max(1.0);
/// Written as an exclusive minimum of 0, which the validator ignores.
const OVERPROVISION_RATIO: Leaf = Leaf::of(Ty::Number).min(0.0);
const OVERPROVISION_KEYS: [&str; 5] = ["ram", "disk", "cpu", "io", "net"];

const CPU_COUNT: Leaf = Leaf::of(Ty::Integer).min(1.0);
const LINK_STATUS: Leaf = Leaf::of(Ty::String).required().one_of(&["up", "down", "unknown"]);
const NIC_NAME: Leaf = Leaf::of(Ty::String).min_len(1);

const VM_MAX_PHYSICAL_MEMORY: Leaf = Leaf::of(Ty::Integer).required().min(1.0);
const VM_QUOTA: Leaf = Leaf::of(Ty::Number).min(0.0);
const VM_CPU_CAP: Leaf = Leaf::of(Ty::Integer).min(1.0);
const VM_STATE: Leaf = Leaf::of(Ty::String).required().min_len(1);

const FLAG_OPTIONAL: Leaf = Leaf::of(Ty::Boolean);
const BHYVE_MAX_VCPUS: Leaf = Leaf::of(Ty::Integer).min(0.0);
const ADMIN_NIC_TAG: Leaf = Leaf::of(Ty::String);
const ADMIN_IP: Leaf = Leaf::of(Ty::String).pattern(Pattern::Ipv4);
const LIVE_IMAGE: Leaf = Leaf::of(Ty::String).required().min_len(1);
const SDC_VERSION: Leaf = Leaf::of(Ty::String).min_len(1);

/// Names an `Object.prototype` member: the validator's "is this key declared" test reads
/// `schema.properties[key]`, which finds these inherited members, so such keys are never
/// reported as unsupported.
const INHERITED: [&str; 7] =
    ["constructor", "hasOwnProperty", "isPrototypeOf", "propertyIsEnumerable", "toLocaleString", "toString", "valueOf"];

/// The dapi server schema; `None` when valid, else the first violation's message, e.g.
/// `property "memory_total_bytes": is missing and it is required`. After the original's
/// schema come dapi's checks of what the original crashed on: VM keys that are not uuids,
/// and a `sysinfo` that is `null` or an array.
pub fn validate_server(s: &Server) -> Option<String> {
    if let Some(msg) = top_level(s) {
        return Some(msg);
    }
    match schema::object(&s.overprovision_ratios, false) {
        Err(reason) => return Some(property("overprovision_ratios", &reason)),
        Ok(Some(ratios)) => {
            if let Some(msg) = overprovision_ratios(ratios) {
                return Some(msg);
            }
        }
        Ok(None) => {}
    }
    match schema::shape(&s.sysinfo, true) {
        Err(reason) => return Some(property("sysinfo", &reason)),
        Ok(Some(sysinfo)) => {
            if let Some(msg) = validate_sysinfo(sysinfo) {
                return Some(msg);
            }
        }
        Ok(None) => {}
    }
    // The traits schema only ever applies its type: nothing nested is checked.
    if let Err(reason) = schema::object(&s.traits, false) {
        return Some(property("traits", &reason));
    }
    let vms = match schema::shape(&s.vms, false) {
        Err(reason) => return Some(property("vms", &reason)),
        Ok(Some(vms)) => Some(vms),
        Ok(None) => None,
    };
    if let Some(msg) = vms.and_then(plain_and_keys) {
        return Some(msg);
    }
    // dapi, after the original's schema: its lax `object` type lets an array of VMs through
    // (VMAPI lists VMs so), and the original then counted the elements as VMs keyed "0",
    // "1", ... As for any VM not keyed by its uuid (above), such a server leaves here: read
    // as having no VMs, it would be filled past its capacity.
    if let Shape::Other(v @ Js::Arr(items)) = &s.vms {
        if !items.is_empty() {
            return Some(property("vms", &schema::type_error_of(&v.to_js_string(), "array", "object")));
        }
    }
    // dapi, after the original's schema: its lax `object` type lets `null` and arrays
    // through as sysinfo, on which the original's filters crashed; nothing can be known of
    // such a server.
    match &s.sysinfo {
        Shape::Other(Js::Null) => Some(property("sysinfo", "null - null value found, but a object is required")),
        Shape::Other(v @ Js::Arr(_)) => {
            Some(property("sysinfo", &schema::type_error_of(&v.to_js_string(), "array", "object")))
        }
        _ => None,
    }
}

/// A list of scalar fields, each with its leaf.
type Leaves<'v, const N: usize> = [(&'static str, &'v Js, &'static Leaf); N];

/// The first field of `fields` (in order) that its leaf refuses, as `property "<path>"`
/// where `path` names the field.
#[inline]
fn first_refused(fields: &[(&str, &Js, &Leaf)], path: impl Fn(&str) -> String) -> Option<String> {
    fields.iter().find_map(|(name, value, leaf)| leaf.check(value).map(|reason| property(&path(name), &reason)))
}

/// The server's own scalar fields, checked first.
fn top_level(s: &Server) -> Option<String> {
    // Leaves by reference, not copied into the list: this runs for every server read.
    let top: Leaves<14> = [
        ("uuid", &s.uuid, &UUID),
        ("memory_available_bytes", &s.memory_available_bytes, &COUNT_0),
        ("memory_total_bytes", &s.memory_total_bytes, &COUNT_1),
        ("disk_pool_size_bytes", &s.disk_pool_size_bytes, &COUNT_1),
        ("disk_pool_alloc_bytes", &s.disk_pool_alloc_bytes, &COUNT_0),
        ("disk_system_used_bytes", &s.disk_system_used_bytes, &COUNT_0),
        ("disk_installed_images_used_bytes", &s.disk_installed_images_used_bytes, &COUNT_0),
        ("disk_cores_quota_used_bytes", &s.disk_cores_quota_used_bytes, &COUNT_0),
        ("disk_zone_quota_bytes", &s.disk_zone_quota_bytes, &COUNT_0),
        ("disk_kvm_quota_bytes", &s.disk_kvm_quota_bytes, &COUNT_0),
        ("disk_kvm_zvol_volsize_bytes", &s.disk_kvm_zvol_volsize_bytes, &COUNT_0),
        ("reserved", &s.reserved, &FLAG),
        ("setup", &s.setup, &FLAG),
        ("reservation_ratio", &s.reservation_ratio, &RESERVATION_RATIO),
    ];
    first_refused(&top, str::to_string)
}

/// Whether a server that was valid is still valid after one VM was listed on it (`added`,
/// its key and entry) or taken off it (`None`), its disk figures changed with it: nothing
/// else of it changed, so only its own fields and that VM need checking again.
pub fn still_valid_after(s: &Server, added: Option<(&str, &Shape<ServerVm>)>) -> bool {
    if top_level(s).is_some() || s.vms.as_obj().is_none() {
        return false;
    }
    added.is_none_or(|(key, vm)| vm_violation(key, vm).is_none())
}

/// One VM's checks as its server's make them (its own fields, then dapi's check of its
/// key), for a VM fed on its own: `None` when valid, else the message.
pub fn vm_violation(key: &str, vm: &Shape<ServerVm>) -> Option<String> {
    validate_vm(key, vm)
        .or_else(|| (!super::patterns::is_uuid(key)).then(|| property(&format!("vms.{key}"), "key is not a UUID")))
}

/// The inline VMs' checks, then dapi's check of their keys.
fn plain_and_keys(vms: &crate::model::VmMap<'_>) -> Option<String> {
    // Plain VMs passed these checks when they were read.
    if !vms.all_plain() {
        if let Some(msg) = first_of_entries_in_js_order(vms.iter(), validate_vm) {
            return Some(msg);
        }
    }
    // dapi, after the original's schema: VMs are keyed by uuid. Affinity rules resolve to
    // these keys and the locality filters assert uuids, so a server keyed otherwise leaves
    // here rather than failing the request later. A plain VM keyed by its own uuid has a
    // uuid-shaped key.
    if vms.as_slice().iter().all(crate::model::VmEntry::keyed_by_own_uuid) {
        return None;
    }
    first_of_entries_in_js_order(vms.iter(), |key, _| {
        (!super::patterns::is_uuid(key)).then(|| property(&format!("vms.{key}"), "key is not a UUID"))
    })
}

fn overprovision_ratios(ratios: &JsObject) -> Option<String> {
    for key in OVERPROVISION_KEYS {
        if let Some(reason) = OVERPROVISION_RATIO.check(ratios.get(key).unwrap_or(&Js::Undefined)) {
            return Some(property(&format!("overprovision_ratios.{key}"), &reason));
        }
    }
    // `additionalProperties: false`; jsprim names the key (lower-cased with the reason).
    first_in_js_order(ratios, |key, _| {
        let declared = OVERPROVISION_KEYS.contains(&key) || INHERITED.contains(&key) || key.starts_with("__");
        (!declared).then(|| property(&format!("overprovision_ratios.{}", key.to_lowercase()), "unsupported property"))
    })
}

fn validate_sysinfo(si: &Sysinfo) -> Option<String> {
    let before_nics: Leaves<10> = [
        ("Bhyve Capable", &si.bhyve_capable, &FLAG_OPTIONAL),
        ("Bhyve Max Vcpus", &si.bhyve_max_vcpus, &BHYVE_MAX_VCPUS),
        ("CPU Total Cores", &si.cpu_total_cores, &CPU_COUNT),
        ("CPU Socket Count", &si.cpu_socket_count, &CPU_COUNT),
        ("CPU Core Count", &si.cpu_core_count, &CPU_COUNT),
        ("CPU Online Count", &si.cpu_online_count, &CPU_COUNT),
        ("CPU Count", &si.cpu_count, &CPU_COUNT),
        ("Admin NIC Tag", &si.admin_nic_tag, &ADMIN_NIC_TAG),
        ("Admin IP", &si.admin_ip, &ADMIN_IP),
        ("HVM API", &si.hvm_api, &FLAG_OPTIONAL),
    ];
    if let Some(msg) = first_refused(&before_nics, |name| format!("sysinfo.{name}")) {
        return Some(msg);
    }
    match schema::shape(&si.network_interfaces, true) {
        Err(reason) => return Some(property("sysinfo.Network Interfaces", &reason)),
        Ok(Some(nics)) => {
            if let Some(msg) = first_of_entries_in_js_order(nics.iter(), validate_nic) {
                return Some(msg);
            }
        }
        Ok(None) => {}
    }
    let after_nics: Leaves<2> =
        [("Live Image", &si.live_image, &LIVE_IMAGE), ("SDC Version", &si.sdc_version, &SDC_VERSION)];
    first_refused(&after_nics, |name| format!("sysinfo.{name}"))
}

fn validate_nic(name: &str, nic: &Shape<Nic>) -> Option<String> {
    let path = || format!("sysinfo.Network Interfaces.{name}");
    let nic = match schema::shape(nic, false) {
        Err(reason) => return Some(property(&path(), &reason)),
        Ok(None) => return None,
        Ok(Some(nic)) => nic,
    };
    if let Some(reason) = LINK_STATUS.check(&nic.link_status) {
        return Some(property(&format!("{}.Link Status", path()), &reason));
    }
    match schema::array(&nic.nic_names, true) {
        Err(reason) => Some(property(&format!("{}.NIC Names", path()), &reason)),
        Ok(names) => names.unwrap_or_default().iter().enumerate().find_map(|(i, n)| {
            NIC_NAME.check(n).map(|reason| property(&format!("{}.NIC Names[{i}]", path()), &reason))
        }),
    }
}

/// Whether a VM's numbers pass the VM checks below (`max_physical_memory` an integer ≥ 1,
/// `quota` absent or ≥ 0, `cpu_cap` absent or an integer ≥ 1; absent is NaN), one of the
/// conditions for holding it as a [`crate::model::PlainVm`] (whose check is then a no-op).
///
/// Written out (this runs for every VM of every request); a test holds it to the schema
/// leaves.
pub fn plain_numbers_valid(ram: f64, quota: f64, cap: f64) -> bool {
    // Every double from 2^52 up is whole; below, the cast tells (no `trunc` library call:
    // this runs for every VM read).
    let integer_from_one = |n: f64| n >= 1.0 && n.is_finite() && (n >= 4_503_599_627_370_496.0 || n as u64 as f64 == n);
    integer_from_one(ram) && (quota.is_nan() || quota >= 0.0) && (cap.is_nan() || integer_from_one(cap))
}

#[cfg(test)]
#[test]
fn plain_number_checks_are_the_schema_leaves() {
    let number = |n: f64| if n.is_nan() { Js::Undefined } else { Js::Num(n) };
    let values = [f64::NAN, 0.0, -0.0, 0.5, 1.0, 1.5, 2.0, -1.0, 1e300, f64::INFINITY, 4096.0, 0.999];
    for ram in values {
        for quota in values {
            for cap in values {
                let leaves = VM_MAX_PHYSICAL_MEMORY.check(&number(ram)).is_none()
                    && VM_QUOTA.check(&number(quota)).is_none()
                    && VM_CPU_CAP.check(&number(cap)).is_none();
                assert_eq!(plain_numbers_valid(ram, quota, cap), leaves, "{ram} {quota} {cap}");
            }
        }
    }
}

fn validate_vm(key: &str, vm: &Shape<ServerVm>) -> Option<String> {
    let vm = match schema::shape(vm, false) {
        Err(reason) => return Some(property(&format!("vms.{key}"), &reason)),
        Ok(None) => return None,
        // Plain VMs passed these checks when they were read.
        Ok(Some(ServerVm::Plain(_))) => return None,
        Ok(Some(ServerVm::Full(vm))) if vm.placed => return None,
        Ok(Some(ServerVm::Full(vm))) => vm,
    };
    let fields: Leaves<5> = [
        ("owner_uuid", &vm.owner_uuid, &UUID),
        ("max_physical_memory", &vm.max_physical_memory_mib, &VM_MAX_PHYSICAL_MEMORY),
        ("quota", &vm.quota_gib, &VM_QUOTA),
        ("cpu_cap", &vm.cpu_cap_pct, &VM_CPU_CAP),
        ("state", &vm.state, &VM_STATE),
    ];
    first_refused(&fields, |name| format!("vms.{key}.{name}"))
}
