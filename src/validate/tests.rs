//! Table-driven tests of every rule and message of `VALIDATION.md`, and a replay of the
//! recorded conformance cases (all of them valid requests; their invalid servers carry the
//! original's schema messages).

use serde_json::{json, Value};

use super::*;
use crate::model::{Image, Package, Server, Ticket, VmPayload};
use crate::wire::parse_allocate_body;

const VM_KEY: &str = "62559b33-4f3a-4505-a942-87cc557fdf4e";

/// A server that passes the schema, with every schema property set and one VM.
fn base_server() -> Value {
    json!({
        "uuid": "564d9a1b-0b5c-4cc3-8b8e-4a8e3c9f0001",
        "memory_available_bytes": 200_280_608_768_u64,
        "memory_total_bytes": 274_832_932_864_u64,
        "disk_pool_size_bytes": 4_179_003_179_008_u64,
        "disk_pool_alloc_bytes": 1_000_000,
        "disk_system_used_bytes": 105_906_176,
        "disk_installed_images_used_bytes": 22_598_883_328_u64,
        "disk_cores_quota_used_bytes": 0,
        "disk_zone_quota_bytes": 2_154_999_840_768_u64,
        "disk_kvm_quota_bytes": 10_737_418_240_u64,
        "disk_kvm_zvol_volsize_bytes": 526_133_493_760_u64,
        "reserved": false,
        "setup": true,
        "reservation_ratio": 0.15,
        "overprovision_ratios": {"ram": 1, "cpu": 4},
        "status": "running",
        "sysinfo": {
            "Bhyve Capable": true,
            "Bhyve Max Vcpus": 16,
            "CPU Total Cores": 32,
            "CPU Socket Count": 2,
            "CPU Core Count": 16,
            "CPU Online Count": 32,
            "CPU Count": 32,
            "Admin NIC Tag": "admin",
            "Admin IP": "10.99.99.7",
            "HVM API": true,
            "Network Interfaces": {
                "igb0": {"MAC Address": "90:e2:ba:39:b9:29", "Link Status": "up", "NIC Names": ["admin", "external"]},
                "igb1": {"Link Status": "down", "NIC Names": []}
            },
            "Live Image": "20150124T202823Z",
            "SDC Version": "7.0",
            "System Type": "SunOS"
        },
        "traits": {"ssd": true},
        "vms": {
            VM_KEY: {
                "uuid": VM_KEY,
                "owner_uuid": "069a9150-ee34-4f93-a648-3ddfe6379dc6",
                "max_physical_memory": 4096,
                "quota": 120,
                "cpu_cap": 800,
                "state": "running",
                "brand": "joyent"
            }
        }
    })
}

/// `v` with the value at `path` replaced (`None` removes it).
fn set(mut v: Value, path: &[&str], new: Option<Value>) -> Value {
    let (last, parents) = path.split_last().expect("non-empty path");
    let mut cur = &mut v;
    for p in parents {
        cur = cur.get_mut(*p).unwrap_or_else(|| panic!("no {p} in {path:?}"));
    }
    let obj = cur.as_object_mut().expect("parent object");
    match new {
        Some(n) => {
            obj.insert((*last).to_string(), n);
        }
        None => {
            obj.shift_remove(*last);
        }
    }
    v
}

fn server_message(v: Value) -> Option<String> {
    let s: Server = crate::model::from_test_json(&v);
    validate_server(&s)
}

const UUID_PATTERN: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

#[test]
fn the_base_server_and_lax_values_are_valid() {
    assert_eq!(server_message(base_server()), None);
    let lax: Vec<(&[&str], Value)> = vec![
        (&["memory_total_bytes"], json!("5")),
        (&["memory_total_bytes"], json!("0")),
        (&["memory_total_bytes"], json!(null)),
        (&["memory_available_bytes"], json!(true)),
        (&["disk_pool_alloc_bytes"], json!([])),
        (&["disk_pool_alloc_bytes"], json!([7])),
        (&["disk_system_used_bytes"], json!("")),
        (&["overprovision_ratios"], json!({"ram": 0})),
        (&["overprovision_ratios"], json!([1, 2])),
        (&["overprovision_ratios"], json!(null)),
        (&["overprovision_ratios"], json!({"__x": 1, "constructor": 2, "toString": 3})),
        (&["traits"], json!({"ssd": 5})),
        (&["traits"], json!(["x"])),
        (&["traits"], json!(null)),
        (&["vms"], json!([])),
        (&["vms"], json!(null)),
        (&["vms"], json!({"00000000-0000-0000-0000-0000000000ff": null})),
        (&["vms", VM_KEY, "quota"], json!(1.5)),
        (&["vms", VM_KEY, "state"], json!("not-a-real-state")),
        (&["vms", VM_KEY, "max_physical_memory"], json!("0")),
        (&["sysinfo", "Network Interfaces"], json!(null)),
        (&["sysinfo", "Network Interfaces"], json!({})),
        (&["sysinfo", "Network Interfaces", "igb0"], json!(null)),
        (&["sysinfo", "Network Interfaces", "igb0"], json!([1])),
    ];
    for (path, value) in &lax {
        let v = set(base_server(), path, Some(value.clone()));
        assert_eq!(server_message(v), None, "{path:?} = {value}");
    }
    // dapi's checks after the original's schema: what the original crashed on.
    let dapi = [
        (&["sysinfo"][..], json!(null), r#"property "sysinfo": null - null value found, but a object is required"#),
        (&["sysinfo"], json!([]), r#"property "sysinfo":  - array value found, but a object is required"#),
        (&["vms"], json!({"foo": null}), r#"property "vms.foo": key is not a UUID"#),
        // VMs listed as VMAPI lists them: the original counted them, keyed "0", "1", ...
        (
            &["vms"],
            json!([{"owner_uuid": "8f138999-8869-410d-b4a0-2517e1ff83ab", "max_physical_memory": 6900, "state": "running"}]),
            r#"property "vms": [object object] - array value found, but a object is required"#,
        ),
        (&["vms"], json!([1, 2]), r#"property "vms": 1,2 - array value found, but a object is required"#),
    ];
    for (path, value, message) in dapi {
        assert_eq!(server_message(set(base_server(), path, Some(value.clone()))).as_deref(), Some(message));
    }
    for path in [&["overprovision_ratios"][..], &["traits"], &["vms"], &["sysinfo", "SDC Version"]] {
        assert_eq!(server_message(set(base_server(), path, None)), None, "without {path:?}");
    }
}

#[test]
fn every_example_of_the_server_table() {
    let k = VM_KEY;
    let vm = |field: &str| format!("vms.{k}.{field}");
    let cases: Vec<(Vec<&str>, Option<Value>, String)> = vec![
        (
            vec!["uuid"],
            Some(json!("564D9A1B-0B5C-4CC3-8B8E-4A8E3C9F0001")),
            format!(r#"property "uuid": does not match the regex pattern {UUID_PATTERN}"#),
        ),
        (vec!["memory_total_bytes"], None, r#"property "memory_total_bytes": is missing and it is required"#.into()),
        (
            vec!["memory_total_bytes"],
            Some(json!(1.5)),
            r#"property "memory_total_bytes": 1.5 - number value found, but a integer is required"#.into(),
        ),
        (
            vec!["memory_total_bytes"],
            Some(json!("abc")),
            r#"property "memory_total_bytes": abc - string value found, but a integer is required"#.into(),
        ),
        (
            vec!["memory_total_bytes"],
            Some(json!(0)),
            r#"property "memory_total_bytes": must have a minimum value of 1"#.into(),
        ),
        (
            vec!["memory_available_bytes"],
            Some(json!(-1)),
            r#"property "memory_available_bytes": must have a minimum value of 0"#.into(),
        ),
        (
            vec!["reserved"],
            Some(json!("false")),
            r#"property "reserved": false - string value found, but a boolean is required"#.into(),
        ),
        (
            vec!["reserved"],
            Some(json!(null)),
            r#"property "reserved": null - object value found, but a boolean is required"#.into(),
        ),
        (
            vec!["reservation_ratio"],
            Some(json!(1.5)),
            r#"property "reservation_ratio": must have a maximum value of 1"#.into(),
        ),
        (
            vec!["reservation_ratio"],
            Some(json!("0.1")),
            r#"property "reservation_ratio": 0.1 - string value found, but a number is required"#.into(),
        ),
        (
            vec!["overprovision_ratios"],
            Some(json!({"RAM": 1})),
            r#"property "overprovision_ratios.ram": unsupported property"#.into(),
        ),
        (
            vec!["overprovision_ratios"],
            Some(json!({"ram": -1})),
            r#"property "overprovision_ratios.ram": must have a minimum value of 0"#.into(),
        ),
        (
            vec!["overprovision_ratios"],
            Some(json!({"ram": "1"})),
            r#"property "overprovision_ratios.ram": 1 - string value found, but a number is required"#.into(),
        ),
        (
            vec!["overprovision_ratios"],
            Some(json!("x")),
            r#"property "overprovision_ratios": x - string value found, but a object is required"#.into(),
        ),
        (vec!["sysinfo"], None, r#"property "sysinfo": is missing and it is required"#.into()),
        (
            vec!["sysinfo"],
            Some(json!("x")),
            r#"property "sysinfo": x - string value found, but a object is required"#.into(),
        ),
        (
            vec!["sysinfo", "Live Image"],
            None,
            r#"property "sysinfo.Live Image": is missing and it is required"#.into(),
        ),
        (
            vec!["sysinfo", "Live Image"],
            Some(json!("")),
            r#"property "sysinfo.Live Image": must be at least 1 characters long"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces"],
            None,
            r#"property "sysinfo.Network Interfaces": is missing and it is required"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb0", "Link Status"],
            Some(json!("sideways")),
            r#"property "sysinfo.Network Interfaces.igb0.Link Status": does not have a value in the enumeration up, down, unknown"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb0", "NIC Names"],
            Some(json!(["a", 1])),
            r#"property "sysinfo.Network Interfaces.igb0.NIC Names[1]": 1 - number value found, but a string is required"#.into(),
        ),
        (
            vec!["sysinfo", "CPU Online Count"],
            Some(json!(0)),
            r#"property "sysinfo.CPU Online Count": must have a minimum value of 1"#.into(),
        ),
        (
            vec!["sysinfo", "Bhyve Capable"],
            Some(json!("true")),
            r#"property "sysinfo.Bhyve Capable": true - string value found, but a boolean is required"#.into(),
        ),
        (
            vec!["sysinfo", "Admin IP"],
            Some(json!("1.2.3")),
            r#"property "sysinfo.Admin IP": does not match the regex pattern ^(?:(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])\.){3}(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])$"#.into(),
        ),
        (
            vec!["traits"],
            Some(json!("x")),
            r#"property "traits": x - string value found, but a object is required"#.into(),
        ),
        (
            vec!["vms", k, "owner_uuid"],
            None,
            format!(r#"property "{}": is missing and it is required"#, vm("owner_uuid")),
        ),
        (
            vec!["vms", k, "max_physical_memory"],
            Some(json!(0)),
            format!(r#"property "{}": must have a minimum value of 1"#, vm("max_physical_memory")),
        ),
        (
            vec!["vms", k, "cpu_cap"],
            Some(json!(0)),
            format!(r#"property "{}": must have a minimum value of 1"#, vm("cpu_cap")),
        ),
        (
            vec!["vms", k, "state"],
            Some(json!("")),
            format!(r#"property "{}": must be at least 1 characters long"#, vm("state")),
        ),
        (
            vec!["vms"],
            Some(json!({"foo": {}})),
            r#"property "vms.foo.owner_uuid": is missing and it is required"#.into(),
        ),
    ];
    for (path, value, expected) in cases {
        let v = set(base_server(), &path, value.clone());
        assert_eq!(server_message(v).as_deref(), Some(expected.as_str()), "{path:?} = {value:?}");
    }
}

#[test]
fn more_server_rules() {
    let k = VM_KEY;
    let cases: Vec<(Vec<&str>, Option<Value>, String)> = vec![
        (vec!["uuid"], None, r#"property "uuid": is missing and it is required"#.into()),
        (vec!["uuid"], Some(json!(5)), r#"property "uuid": 5 - number value found, but a string is required"#.into()),
        (vec!["setup"], None, r#"property "setup": is missing and it is required"#.into()),
        (
            vec!["disk_kvm_zvol_volsize_bytes"],
            Some(json!({})),
            r#"property "disk_kvm_zvol_volsize_bytes": [object object] - object value found, but a integer is required"#
                .into(),
        ),
        (
            vec!["sysinfo", "Bhyve Max Vcpus"],
            Some(json!("bacon")),
            r#"property "sysinfo.Bhyve Max Vcpus": bacon - string value found, but a integer is required"#.into(),
        ),
        (
            vec!["sysinfo", "Bhyve Max Vcpus"],
            Some(json!(-1)),
            r#"property "sysinfo.Bhyve Max Vcpus": must have a minimum value of 0"#.into(),
        ),
        (
            vec!["sysinfo", "Admin NIC Tag"],
            Some(json!(["Admin", "X"])),
            r#"property "sysinfo.Admin NIC Tag": admin,x - object value found, but a string is required"#.into(),
        ),
        (
            vec!["sysinfo", "HVM API"],
            Some(json!(1)),
            r#"property "sysinfo.HVM API": 1 - number value found, but a boolean is required"#.into(),
        ),
        (
            vec!["sysinfo", "SDC Version"],
            Some(json!("")),
            r#"property "sysinfo.SDC Version": must be at least 1 characters long"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces"],
            Some(json!("none")),
            r#"property "sysinfo.Network Interfaces": none - string value found, but a object is required"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb1"],
            Some(json!(7)),
            r#"property "sysinfo.Network Interfaces.igb1": 7 - number value found, but a object is required"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb1", "Link Status"],
            None,
            r#"property "sysinfo.Network Interfaces.igb1.Link Status": is missing and it is required"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb1", "NIC Names"],
            None,
            r#"property "sysinfo.Network Interfaces.igb1.NIC Names": is missing and it is required"#.into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb1", "NIC Names"],
            Some(json!(null)),
            r#"property "sysinfo.Network Interfaces.igb1.NIC Names": null - object value found, but a array is required"#
                .into(),
        ),
        (
            vec!["sysinfo", "Network Interfaces", "igb1", "NIC Names"],
            Some(json!(["ok", ""])),
            r#"property "sysinfo.Network Interfaces.igb1.NIC Names[1]": must be at least 1 characters long"#.into(),
        ),
        (
            vec!["vms", k],
            Some(json!("gone")),
            format!(r#"property "vms.{k}": gone - string value found, but a object is required"#),
        ),
        (
            vec!["vms", k, "owner_uuid"],
            Some(json!("X")),
            format!(r#"property "vms.{k}.owner_uuid": does not match the regex pattern {UUID_PATTERN}"#),
        ),
        (
            vec!["vms", k, "quota"],
            Some(json!(-5)),
            format!(r#"property "vms.{k}.quota": must have a minimum value of 0"#),
        ),
        (
            vec!["vms", k, "cpu_cap"],
            Some(json!(12.5)),
            format!(r#"property "vms.{k}.cpu_cap": 12.5 - number value found, but a integer is required"#),
        ),
        (vec!["vms", k, "state"], None, format!(r#"property "vms.{k}.state": is missing and it is required"#)),
        (vec!["vms"], Some(json!(3)), r#"property "vms": 3 - number value found, but a object is required"#.into()),
        (
            vec!["overprovision_ratios"],
            Some(json!({"ram": 1, "Disk_Ratio": 1})),
            r#"property "overprovision_ratios.disk_ratio": unsupported property"#.into(),
        ),
    ];
    for (path, value, expected) in cases {
        let v = set(base_server(), &path, value.clone());
        assert_eq!(server_message(v).as_deref(), Some(expected.as_str()), "{path:?} = {value:?}");
    }
}

#[test]
fn the_first_violation_in_schema_order_wins() {
    let without_two = set(set(base_server(), &["uuid"], None), &["memory_total_bytes"], None);
    assert_eq!(server_message(without_two).as_deref(), Some(r#"property "uuid": is missing and it is required"#));
    let both = set(set(base_server(), &["uuid"], None), &["reserved"], Some(json!("x")));
    assert_eq!(server_message(both).as_deref(), Some(r#"property "uuid": is missing and it is required"#));
    let null_sysinfo = set(set(base_server(), &["sysinfo"], Some(json!(null))), &["setup"], None);
    assert_eq!(server_message(null_sysinfo).as_deref(), Some(r#"property "setup": is missing and it is required"#));
    // Declared ratios before unknown keys; sysinfo before traits before vms.
    let ratios = set(base_server(), &["overprovision_ratios"], Some(json!({"RAM": 1, "net": -1})));
    assert_eq!(
        server_message(ratios).as_deref(),
        Some(r#"property "overprovision_ratios.net": must have a minimum value of 0"#)
    );
    let late = set(set(base_server(), &["traits"], Some(json!(1))), &["sysinfo", "Live Image"], None);
    assert_eq!(
        server_message(late).as_deref(),
        Some(r#"property "sysinfo.Live Image": is missing and it is required"#)
    );
    // VMs in JS key order: array-index keys first.
    let vms = json!({"b": {}, "7": {"owner_uuid": "x"}});
    assert_eq!(
        server_message(set(base_server(), &["vms"], Some(vms))).as_deref(),
        Some(format!(r#"property "vms.7.owner_uuid": does not match the regex pattern {UUID_PATTERN}"#).as_str())
    );
    // A NIC's Link Status before its names; NICs in order.
    let nics = json!({"e0": {"Link Status": "up", "NIC Names": [1]}, "e1": {}});
    assert_eq!(
        server_message(set(base_server(), &["sysinfo", "Network Interfaces"], Some(nics))).as_deref(),
        Some(
            r#"property "sysinfo.Network Interfaces.e0.NIC Names[0]": 1 - number value found, but a string is required"#
        )
    );
}

// ---------------------------------------------------------------------------------------
// VM payload, image, package, NIC tags, tickets

const OWNER: &str = "b4f66289-c30f-4d29-9645-21f8f939bcb2";
const VM_UUID: &str = "6c5ac296-ff76-4581-8d39-4b3c35484082";
const U1: &str = "c85e0079-fe94-461e-8b1f-9a6d7c0d9b5c";

fn base_vm() -> Value {
    json!({"vm_uuid": VM_UUID, "owner_uuid": OWNER, "ram": 1024, "brand": "joyent"})
}

fn vm_with(changes: Value) -> VmPayload {
    let mut vm = base_vm();
    for (k, v) in changes.as_object().expect("object").clone() {
        vm = set(vm, &[&k], if v.is_null() { None } else { Some(v) });
    }
    serde_json::from_value(vm).expect("vm fits the model")
}

fn vm_message(changes: Value, requirements: Value) -> Option<String> {
    let mut vm = vm_with(changes);
    validate_vm_payload(&mut vm, &Js::from_json(&requirements))
}

#[test]
fn vm_payload_rules_in_order() {
    let none = json!(null);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"owner_uuid": null}), r#"VM "owner_uuid" is not a valid UUID"#),
        (json!({"owner_uuid": "B4F66289-C30F-4D29-9645-21F8F939BCB2"}), r#"VM "owner_uuid" is not a valid UUID"#),
        (json!({"owner_uuid": 5, "ram": "x"}), r#"VM "owner_uuid" is not a valid UUID"#),
        (json!({"ram": null}), r#"VM "ram" is not a number"#),
        (json!({"ram": "64"}), r#"VM "ram" is not a number"#),
        (json!({"quota": "5"}), r#"VM "quota" is not a number"#),
        (json!({"quota": true}), r#"VM "quota" is not a number"#),
        (json!({"cpu_cap": "100"}), r#"VM "cpu_cap" is not a number"#),
        (json!({"traits": "x"}), r#"VM property "": x - string value found, but a object is required"#),
        (json!({"traits": 5}), r#"VM property "": 5 - number value found, but a object is required"#),
        (json!({"affinity": {}}), r#"VM "affinity" is not an array"#),
        (
            json!({"affinity": [{"key": "a", "operator": "=~", "value": "b", "valueType": "exact", "isSoft": true}]}),
            r#"VM "affinity.operator" has invalid operator"#,
        ),
        (json!({"locality": "near"}), r#"VM "locality" is has wrong type"#),
        (json!({"locality": {"near": 5}}), r#"VM "locality.near" is neither string nor array"#),
        (json!({"nic_tags": "admin"}), r#"VM "nic_tags" is not an array"#),
        (json!({"nic_tags": ["admin", 5]}), r#"VM "nic_tags" contains invalid type in array"#),
        (json!({"vm_uuid": null}), r#""vm.vm_uuid" is an invalid UUID"#),
        (json!({"vm_uuid": "6C5AC296-FF76-4581-8D39-4B3C35484082"}), r#""vm.vm_uuid" is an invalid UUID"#),
        (json!({"internal_metadata": "x"}), r#""vm.internal_metadata" is not a hash"#),
        (json!({"internal_metadata": 5}), r#""vm.internal_metadata" is not a hash"#),
        (
            json!({"internal_metadata": {"docker:volumesfrom": "[nope"}}),
            r#""vm.internal_metadata['docker:volumesfrom']" is not valid JSON"#,
        ),
        (
            json!({"internal_metadata": {"docker:volumesfrom": ["a"]}}),
            r#""vm.internal_metadata['docker:volumesfrom']" is not valid JSON"#,
        ),
        (
            json!({"internal_metadata": {"docker:volumesfrom": "{}"}}),
            r#""vm.internal_metadata['docker:volumesfrom']" does not contain an array"#,
        ),
        (
            json!({"internal_metadata": {"docker:volumesfrom": 5}}),
            r#""vm.internal_metadata['docker:volumesfrom']" does not contain an array"#,
        ),
    ];
    for (changes, expected) in cases {
        assert_eq!(vm_message(changes.clone(), none.clone()).as_deref(), Some(expected), "{changes}");
    }
}

#[test]
fn vm_payload_accepts_falsy_and_lax_values() {
    let ok = [
        json!({}),
        json!({"quota": 0, "cpu_cap": ""}),
        json!({"quota": 10, "cpu_cap": 200, "traits": {"foo": ["bar"], "quux": false}, "nic_tags": ["a", "b"]}),
        json!({"traits": [1], "affinity": [], "locality": {}}),
        json!({"traits": "", "affinity": 0, "locality": false, "nic_tags": ""}),
        json!({"owner_uuid": [OWNER]}),
        json!({"internal_metadata": [1, 2]}),
        json!({"internal_metadata": {"docker:volumesfrom": ""}}),
        json!({"internal_metadata": {"docker:volumesfrom": "[]"}}),
        json!({"locality": {"near": U1, "far": [U1, U1], "strict": true, "other": 5}}),
    ];
    for changes in ok {
        assert_eq!(vm_message(changes.clone(), json!(null)), None, "{changes}");
    }
}

#[test]
fn vm_payload_parses_volumes_from() {
    let mut vm = vm_with(json!({"internal_metadata": {"docker:volumesfrom": format!("[\"{U1}\"]")}}));
    assert_eq!(validate_vm_payload(&mut vm, &Js::Undefined), None);
    assert_eq!(vm.volumes_from, Some(vec![Js::str(U1)]));
    let mut vm = vm_with(json!({"internal_metadata": {"docker:volumesfrom": "[]"}}));
    assert_eq!(validate_vm_payload(&mut vm, &Js::Undefined), None);
    assert_eq!(vm.volumes_from, Some(vec![]));
    let mut vm = vm_with(json!({"internal_metadata": {}}));
    assert_eq!(validate_vm_payload(&mut vm, &Js::Undefined), None);
    assert_eq!(vm.volumes_from, None);
}

#[test]
fn image_ram_requirements() {
    let small = r#""vm.ram" is smaller than "image.requirements.min_ram""#;
    let large = r#""vm.ram" is larger than "image.requirements.max_ram""#;
    let cases: Vec<(Value, Option<&str>)> = vec![
        (json!({"min_ram": 768}), None),
        (json!({"min_ram": 2048}), Some(small)),
        (json!({"min_ram": 1024.005}), None),
        (json!({"min_ram": 1024.02}), Some(small)),
        (json!({"min_ram": "2048"}), Some(small)),
        (json!({"max_ram": 768}), Some(large)),
        (json!({"max_ram": 2048}), None),
        (json!({"max_ram": 1023.995}), None),
        (json!({"max_ram": 1023.98}), Some(large)),
        // "102" + 0.01 is "1020.01": 1024 is larger.
        (json!({"max_ram": "102"}), Some(large)),
        // "1024" + 0.01 is "10240.01".
        (json!({"max_ram": "1000"}), None),
        (json!({"max_ram": [1000]}), None),
        (json!({"max_ram": true}), Some(large)),
        (json!({"max_ram": {}}), None),
        (json!({"min_ram": 0, "max_ram": 0}), None),
        (json!({"min_ram": 2048, "max_ram": 10}), Some(small)),
    ];
    for (requirements, expected) in cases {
        assert_eq!(vm_message(json!({}), requirements.clone()).as_deref(), expected, "{requirements}");
    }
}

#[test]
fn affinity_rules() {
    let good = json!({"key": "instance", "operator": "!=", "value": "web", "isSoft": false, "valueType": "exact"});
    let bad = |field: &str, value: Value| {
        let mut rule = good.clone();
        rule[field] = value;
        Js::from_json(&json!([good.clone(), rule]))
    };
    let cases = [
        (bad("operator", json!("=~")), r#""affinity.operator" has invalid operator"#),
        (bad("valueType", json!("foo")), r#""affinity.valueType" has invalid value"#),
        (bad("isSoft", json!(1)), r#""affinity.isSoft" is not a boolean"#),
        (bad("key", json!(1)), r#""affinity.key" is not a string"#),
        (bad("operator", json!(1)), r#""affinity.operator" is not a string"#),
        (bad("value", json!(1)), r#""affinity.value" is not a string"#),
        (bad("valueType", json!(1)), r#""affinity.valueType" is not a string"#),
        (Js::from_json(&json!([null])), r#""affinity.key" is not a string"#),
        (Js::from_json(&json!(["instance==web"])), r#""affinity.key" is not a string"#),
        (Js::from_json(&json!({"key": "a"})), r#""affinity" is not an array"#),
        (Js::str("x"), r#""affinity" is not an array"#),
        // dapi: patterns that would not compile when the rule is resolved.
        (
            Js::from_json(
                &json!([{"key": "instance", "operator": "==", "value": "/web(/", "isSoft": false, "valueType": "re"}]),
            ),
            r#""affinity.value" "/web(/" is not a valid regular expression"#,
        ),
        (
            Js::from_json(
                &json!([{"key": "container", "operator": "==", "value": "db(*", "isSoft": false, "valueType": "glob"}]),
            ),
            r#""affinity.value" "db(*" is not a valid regular expression"#,
        ),
        (
            Js::from_json(
                &json!([{"key": "role", "operator": "==", "value": "/(\\w{100}){100}/", "isSoft": false, "valueType": "re"}]),
            ),
            r#""affinity.value" "/(\\w{100}){100}/" is too large"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(validate_affinity(&input).as_deref(), Some(expected), "{}", input.stringify());
    }
    // A tag glob is matched by the look-up itself, never compiled: any text is fine.
    let tag_glob = json!([{"key": "role", "operator": "==", "value": "db(*", "isSoft": false, "valueType": "glob"}]);
    assert_eq!(validate_affinity(&Js::from_json(&tag_glob)), None);
    for ok in [
        json!([]),
        json!([good.clone()]),
        json!([{"key": "role", "operator": "==", "value": "/w/", "isSoft": true, "valueType": "re"}, {"key": "c", "operator": "==", "value": "w*", "isSoft": true, "valueType": "glob"}]),
    ] {
        assert_eq!(validate_affinity(&Js::from_json(&ok)), None, "{ok}");
    }
}

#[test]
fn locality_rules() {
    let cases = [
        (json!([U1]), r#""locality" is has wrong type"#),
        (json!({"near": "foo"}), r#""locality.near" is not a UUID"#),
        (json!({"far": "foo"}), r#""locality.far" is not a UUID"#),
        (json!({"near": {}}), r#""locality.near" is neither string nor array"#),
        (json!({"far": true}), r#""locality.far" is neither string nor array"#),
        (json!({"near": [U1, "x"]}), r#""locality.near" contains an malformed UUID"#),
        (json!({"far": [U1, null]}), r#""locality.far" contains an malformed UUID"#),
        (json!({"near": "x", "far": "y"}), r#""locality.near" is not a UUID"#),
        (json!({"far": U1, "strict": "blah"}), r#""locality.strict" is given, but not boolean"#),
        (json!({"strict": null}), r#""locality.strict" is given, but not boolean"#),
    ];
    for (input, expected) in cases {
        assert_eq!(validate_locality(&Js::from_json(&input)).as_deref(), Some(expected), "{input}");
    }
    for ok in [
        json!({}),
        json!({"far": U1}),
        json!({"far": U1, "strict": false}),
        json!({"near": U1, "far": [U1, [U1]]}),
        json!({"near": "", "far": 0, "strict": true}),
        json!({"near": []}),
    ] {
        assert_eq!(validate_locality(&Js::from_json(&ok)), None, "{ok}");
    }
}

#[test]
fn traits_only_need_typeof_object() {
    for ok in [
        json!({}),
        json!({"cabbages": true}),
        json!({"foo": ["bar", "baz"], "quux": false}),
        json!([1]),
        json!(null),
        json!({"Bad Key": 5}),
    ] {
        assert_eq!(validate_traits(&Js::from_json(&ok)), None, "{ok}");
    }
    let cases = [
        (json!("x"), r#"property "": x - string value found, but a object is required"#),
        (json!("SSD"), r#"property "": ssd - string value found, but a object is required"#),
        (json!(5), r#"property "": 5 - number value found, but a object is required"#),
        (json!(true), r#"property "": true - boolean value found, but a object is required"#),
    ];
    for (input, expected) in cases {
        assert_eq!(validate_traits(&Js::from_json(&input)).as_deref(), Some(expected), "{input}");
    }
}

fn image_message(image: Value) -> Option<String> {
    let image: Image = serde_json::from_value(image).expect("image fits the model");
    validate_image(&image)
}

#[test]
fn image_rules() {
    let cases = [
        (json!({"image_size": "foo"}), r#""image.image_size" has invalid type"#),
        (json!({"image_size": true, "traits": 5}), r#""image.image_size" has invalid type"#),
        (json!({"traits": 5}), r#"property "": 5 - number value found, but a object is required"#),
        (json!({"requirements": "x"}), r#""image.requirements" has invalid type"#),
        (json!({"requirements": [1]}), r#""image.requirements" has invalid type"#),
        (
            json!({"requirements": {"min_platform": {"7": "20121211T203034Z"}}}),
            r#""requirements.min_platform" contains an invalid SDC version"#,
        ),
        (
            json!({"requirements": {"max_platform": {"7.0": 5}}}),
            r#""requirements.max_platform" contains an invalid platform date"#,
        ),
        (json!({"requirements": {"min_platform": null}}), r#""requirements.min_platform" is not a hash"#),
        (json!({"requirements": {"min_platform": "x"}}), r#""requirements.min_platform" is not a hash"#),
        (
            json!({"requirements": {"min_platform": {}, "max_platform": {"7.0": "2012"}}}),
            r#""requirements.max_platform" contains an invalid platform date"#,
        ),
        (
            json!({"requirements": {"min_platform": {"7.0": "x"}, "max_platform": 5}}),
            r#""requirements.min_platform" contains an invalid platform date"#,
        ),
        // JS visits "7" before "7.0".
        (
            json!({"requirements": {"min_platform": {"7.0": 5, "7": "20121211T203034Z"}}}),
            r#""requirements.min_platform" contains an invalid SDC version"#,
        ),
        (
            json!({"requirements": {"min_platform": {"7.00": "20121211T203034Z"}}}),
            r#""requirements.min_platform" contains an invalid SDC version"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(image_message(input.clone()).as_deref(), Some(expected), "{input}");
    }
    for ok in [
        json!({}),
        json!({"image_size": 0, "traits": "", "requirements": ""}),
        json!({"image_size": 10240, "traits": {"a": 1}, "requirements": {"networks": [{"name": "net0"}]}}),
        json!({"requirements": {"min_platform": {"6.5": "20120901T113025Z", "7.1": "20130308T102805Z"}}}),
        json!({"requirements": {"min_ram": "x", "max_ram": {}, "minRam": "x"}}),
    ] {
        assert_eq!(image_message(ok.clone()), None, "{ok}");
    }
}

fn package_message(pkg: Value) -> (Option<String>, Package) {
    let mut pkg: Package = serde_json::from_value(pkg).expect("package fits the model");
    (validate_package(&mut pkg), pkg)
}

#[test]
fn package_rules() {
    let cases = [
        (json!({"overprovision_cpu": "x"}), r#""package.overprovision_cpu" has invalid type"#),
        (json!({"overprovision_memory": {}}), r#""package.overprovision_memory" has invalid type"#),
        (json!({"overprovision_storage": "1.5x"}), r#""package.overprovision_storage" has invalid type"#),
        (json!({"overprovision_network": [1, 2]}), r#""package.overprovision_network" has invalid type"#),
        (json!({"overprovision_io": "abc"}), r#""package.overprovision_io" has invalid type"#),
        (json!({"alloc_server_spread": "max-cpu"}), r#""alloc_server_spread" has invalid value"#),
        (json!({"alloc_server_spread": ["random"]}), r#""alloc_server_spread" has invalid value"#),
        (json!({"min_platform": "{nope"}), r#""package.min_platform" has invalid type"#),
        (json!({"min_platform": "[]"}), r#""package.min_platform" is not a hash"#),
        (json!({"min_platform": "null"}), r#""package.min_platform" is not a hash"#),
        (json!({"min_platform": 5}), r#""package.min_platform" is not a hash"#),
        (
            json!({"min_platform": "{\"7\": \"20121211T203034Z\"}"}),
            r#""package.min_platform" contains an invalid SDC version"#,
        ),
        (json!({"max_platform": {"7.0": "x"}}), r#""package.max_platform" contains an invalid platform date"#),
        (json!({"traits": "{nope"}), r#""package.traits": "package.traits" has invalid type"#),
        (json!({"traits": 5}), r#""package.traits": property "": 5 - number value found, but a object is required"#),
        (json!({"traits": "5"}), r#""package.traits": property "": 5 - number value found, but a object is required"#),
        (
            json!({"traits": "\"X\""}),
            r#""package.traits": property "": x - string value found, but a object is required"#,
        ),
        (
            json!({"traits": "false"}),
            r#""package.traits": property "": false - boolean value found, but a object is required"#,
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(package_message(input.clone()).0.as_deref(), Some(expected), "{input}");
    }
    for ok in [
        json!({}),
        json!({"overprovision_cpu": "2", "overprovision_memory": true, "overprovision_storage": [], "overprovision_io": 0}),
        json!({"alloc_server_spread": "min-owner", "min_platform": "", "max_platform": null, "traits": ""}),
        json!({"traits": "null"}),
        json!({"traits": "[1]"}),
    ] {
        assert_eq!(package_message(ok.clone()).0, None, "{ok}");
    }
}

#[test]
fn package_json_text_is_parsed_in_place() {
    let (msg, pkg) = package_message(json!({
        "min_platform": "{\"7.0\": \"20130308T102805Z\"}",
        "max_platform": "{}",
        "traits": "{\"ssd\": true}",
    }));
    assert_eq!(msg, None);
    assert_eq!(pkg.min_platform.stringify(), r#"{"7.0":"20130308T102805Z"}"#);
    assert_eq!(pkg.max_platform.stringify(), "{}");
    assert_eq!(pkg.traits.stringify(), r#"{"ssd":true}"#);
    // A failed parse leaves the text.
    let (_, pkg) = package_message(json!({"traits": "{"}));
    assert_eq!(pkg.traits, Js::str("{"));
}

#[test]
fn nic_tag_requirements_messages() {
    let cases = [
        (json!([["a", ""]]), r#"property "0[1]": must be at least 1 characters long"#),
        (json!(["a"]), r#"property "0": a - string value found, but a array is required"#),
        (json!([[1]]), r#"property "0[0]": 1 - number value found, but a string is required"#),
        (json!([["a"], ["b", 2]]), r#"property "1[1]": 2 - number value found, but a string is required"#),
        (json!({}), r#"property "": [object object] - object value found, but a array is required"#),
        (json!(null), r#"property "": null - object value found, but a array is required"#),
        (json!([["a"], null]), r#"property "1": null - object value found, but a array is required"#),
    ];
    for (input, expected) in cases {
        assert_eq!(validate_nic_tag_requirements(&Js::from_json(&input)).as_deref(), Some(expected), "{input}");
    }
    for ok in [json!([["a"], ["b", "c"], []]), json!([])] {
        assert_eq!(validate_nic_tag_requirements(&Js::from_json(&ok)), None, "{ok}");
    }
}

fn ticket(changes: Value) -> Ticket {
    let mut t = json!({
        "uuid": "4de2031d-2a49-4895-a2a1-d04af8eecd63", "server_uuid": "d5d6da5c-db47-43df-83e2-d8ada9e7f7c0",
        "scope": "vm", "action": "provision", "id": "cf534f80-618a-4a8a-b5dc-485aa622a0ba", "status": "active",
    });
    for (k, v) in changes.as_object().expect("object").clone() {
        t = set(t, &[&k], if v.is_null() { None } else { Some(v) });
    }
    serde_json::from_value(t).expect("ticket fits the model")
}

#[test]
fn ticket_rules() {
    assert_eq!(validate_ticket(&ticket(json!({}))), None);
    let cases = [
        (json!({"id": "foo"}), r#""id" is not a valid UUID"#),
        (json!({"id": null, "server_uuid": "x"}), r#""id" is not a valid UUID"#),
        (json!({"server_uuid": "x"}), r#""server_uuid" is not a valid UUID"#),
        (json!({"scope": 5}), r#""scope" is not a string"#),
        (json!({"action": null}), r#""action" is not a string"#),
        (json!({"status": ["active"]}), r#""status" is not a string"#),
    ];
    for (changes, expected) in cases {
        assert_eq!(validate_ticket(&ticket(changes.clone())).as_deref(), Some(expected), "{changes}");
    }
    let tickets = [ticket(json!({})), ticket(json!({"id": "foo"})), ticket(json!({"scope": 1}))];
    assert_eq!(validate_tickets(&tickets).as_deref(), Some(r#"ticket uuid "foo" - "id" is not a valid UUID"#));
    let tickets = [ticket(json!({"id": null}))];
    assert_eq!(validate_tickets(&tickets).as_deref(), Some(r#"ticket uuid "undefined" - "id" is not a valid UUID"#));
    assert_eq!(validate_tickets(&[]), None);
}

// ---------------------------------------------------------------------------------------
// validate_allocate: order, fields and side effects

fn allocate(body: Value) -> Result<(), FieldError> {
    let bytes = serde_json::to_vec(&body).expect("json");
    let mut parsed = parse_allocate_body(&bytes).expect("body reads");
    validate_allocate(&mut parsed)
}

fn body(changes: Value) -> Value {
    let mut b = json!({"servers": [{"uuid": U1}], "vm": base_vm(), "image": {}, "package": {}, "tickets": []});
    for (k, v) in changes.as_object().expect("object").clone() {
        b = set(b, &[&k], if v.is_null() { None } else { Some(v) });
    }
    b
}

fn field_error(field: &str, message: &str) -> Result<(), FieldError> {
    Err(FieldError::invalid(field, message))
}

#[test]
fn allocate_checks_in_cnapis_order() {
    let bad_vm = json!({"ram": "x", "brand": 5});
    assert_eq!(allocate(body(json!({}))), Ok(()));
    assert_eq!(
        allocate(body(json!({"image": {"image_size": "x"}, "package": {"traits": 5}, "vm": bad_vm}))),
        field_error("image", r#""image.image_size" has invalid type"#)
    );
    assert_eq!(
        allocate(body(json!({"package": {"traits": 5}, "vm": bad_vm}))),
        field_error("package", r#""package.traits": property "": 5 - number value found, but a object is required"#)
    );
    assert_eq!(
        allocate(body(json!({"package": null, "vm": bad_vm}))),
        field_error("vm", r#"VM "owner_uuid" is not a valid UUID"#)
    );
    let mut vm = base_vm();
    vm["ram"] = json!("x");
    vm["brand"] = json!(5);
    assert_eq!(allocate(body(json!({"vm": vm}))), field_error("vm", r#"VM "ram" is not a number"#));
}

#[test]
fn allocate_image_requirements_reach_the_vm_rules() {
    let image = json!({"requirements": {"min_ram": 4096}});
    assert_eq!(
        allocate(body(json!({"image": image}))),
        field_error("vm", r#""vm.ram" is smaller than "image.requirements.min_ram""#)
    );
}

#[test]
fn allocate_dapi_vm_checks() {
    let with_vm = |k: &str, v: Option<Value>| body(json!({"vm": set(base_vm(), &[k], v)}));
    assert_eq!(allocate(with_vm("brand", None)), field_error("vm", r#"VM "brand" is not a string"#));
    assert_eq!(allocate(with_vm("brand", Some(json!(null)))), field_error("vm", r#"VM "brand" is not a string"#));
    assert_eq!(allocate(with_vm("brand", Some(json!(["lx"])))), field_error("vm", r#"VM "brand" is not a string"#));
    assert_eq!(allocate(with_vm("vcpus", Some(json!("2")))), field_error("vm", r#"VM "vcpus" is not a number"#));
    assert_eq!(allocate(with_vm("vcpus", Some(json!(false)))), field_error("vm", r#"VM "vcpus" is not a number"#));
    for name in ["ram", "quota", "cpu_cap", "vcpus"] {
        let message = format!(r#"VM "{name}" must not be negative"#);
        assert_eq!(allocate(with_vm(name, Some(json!(-1)))), field_error("vm", &message));
    }
    for ok in [json!(null), json!(0), json!(4)] {
        assert_eq!(allocate(with_vm("vcpus", Some(ok.clone()))), Ok(()), "{ok}");
    }
    assert_eq!(allocate(with_vm("brand", Some(json!("")))), Ok(()));
}

#[test]
fn allocate_nic_tag_requirements_and_tags() {
    let with_vm = |k: &str, v: Value| body(json!({"vm": set(base_vm(), &[k], Some(v))}));
    assert_eq!(
        allocate(with_vm("nic_tag_requirements", json!([["a"], [""]]))),
        field_error("nic_tag_requirements", r#"property "1[0]": must be at least 1 characters long"#)
    );
    assert_eq!(
        allocate(with_vm("nic_tag_requirements", json!("external"))),
        field_error("nic_tag_requirements", r#"property "": external - string value found, but a array is required"#)
    );
    // Top-level parameters land in the VM, as CNAPI copies them there.
    assert_eq!(
        allocate(body(json!({"nic_tag_requirements": [[1]]}))),
        field_error("nic_tag_requirements", r#"property "0[0]": 1 - number value found, but a string is required"#)
    );
    assert_eq!(allocate(with_vm("nic_tag_requirements", json!([["external"], []]))), Ok(()));
    assert_eq!(allocate(body(json!({"nic_tags": []}))), Ok(()));
    // CNAPI checked the VM as sent (the payload rule on its own tags), then the top-level
    // tags, then copied them into the VM.
    assert_eq!(allocate(body(json!({"nic_tags": ["a", 1]}))), field_error("nic_tags", "invalid nic_tag"));
    assert_eq!(
        allocate(with_vm("nic_tags", json!(["a", 1]))),
        field_error("vm", r#"VM "nic_tags" contains invalid type in array"#)
    );
    let mut own_bad = with_vm("nic_tags", json!(["a", 1]));
    own_bad["nic_tags"] = json!(["a"]);
    assert_eq!(allocate(own_bad), field_error("vm", r#"VM "nic_tags" contains invalid type in array"#));
    let mut own_good = with_vm("nic_tags", json!(["a"]));
    own_good["nic_tags"] = json!(["b", 2]);
    assert_eq!(allocate(own_good), field_error("nic_tags", "invalid nic_tag"));
    assert_eq!(validate_nic_tags_param(&Js::from_json(&json!(["a", 1]))).as_deref(), Some("invalid nic_tag"));
    assert_eq!(validate_nic_tags_param(&Js::from_json(&json!(["a"]))), None);
    assert_eq!(validate_nic_tags_param(&Js::Undefined), None);
}

#[test]
fn allocate_tickets_last() {
    let t = |id: &str| {
        json!({"uuid": "4de2031d-2a49-4895-a2a1-d04af8eecd63", "server_uuid": "d5d6da5c-db47-43df-83e2-d8ada9e7f7c0",
               "scope": "vm", "action": "provision", "id": id, "status": "queued"})
    };
    assert_eq!(allocate(body(json!({"tickets": [t(VM_UUID)]}))), Ok(()));
    assert_eq!(
        allocate(body(json!({"tickets": [t(VM_UUID), t("nope")]}))),
        field_error("tickets", r#"ticket uuid "nope" - "id" is not a valid UUID"#)
    );
}

#[test]
fn allocate_side_effects() {
    let vm = set(base_vm(), &["internal_metadata"], Some(json!({"docker:volumesfrom": format!("[\"{U1}\"]")})));
    let b = body(json!({"vm": vm, "package": {"min_platform": "{\"7.0\": \"20130308T102805Z\"}", "traits": "{}"}}));
    let bytes = serde_json::to_vec(&b).expect("json");
    let mut parsed = parse_allocate_body(&bytes).expect("body reads");
    assert_eq!(validate_allocate(&mut parsed), Ok(()));
    assert_eq!(parsed.vm.volumes_from, Some(vec![Js::str(U1)]));
    let pkg = parsed.package.as_ref().expect("package");
    assert_eq!(pkg.min_platform.stringify(), r#"{"7.0":"20130308T102805Z"}"#);
    assert_eq!(pkg.traits.stringify(), "{}");
}

// ---------------------------------------------------------------------------------------
// The recorded cases

#[derive(serde::Deserialize)]
struct Case<'a> {
    #[serde(borrow)]
    request: &'a serde_json::value::RawValue,
    expected: Value,
}

/// The vendored subset of the recorded cases (the full set is replayed by `make conformance`
/// where `../shared` is present).
const CASES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/cases");
const STEP: &str = "Servers objects which are valid";

/// Every recorded request passes `validate_allocate`, and every server that reached
/// `hard-filter-invalid-servers` gets the original's verdict (kept, or the recorded reason).
#[test]
fn recorded_cases_agree() {
    let dir = std::fs::read_dir(CASES).unwrap_or_else(|e| panic!("{CASES}: {e}"));
    let mut files: Vec<_> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    files.sort();
    let (mut requests, mut servers_checked, mut messages_checked) = (0, 0, 0);
    for path in files.iter().filter(|p| p.extension().is_some_and(|e| e == "json")) {
        let text = std::fs::read(path).expect("case reads");
        let case: Case = serde_json::from_slice(&text).expect("case JSON");
        let name = path.display();
        let mut parsed =
            parse_allocate_body(case.request.get().as_bytes()).unwrap_or_else(|e| panic!("{name}: body: {e:?}"));
        assert_eq!(validate_allocate(&mut parsed), Ok(()), "{name}");
        requests += 1;
        let steps = case.expected["steps"].as_array().expect("steps");
        for step in steps.iter().filter(|s| s["step"] == STEP) {
            let reasons = step["reasons"].as_object().cloned().unwrap_or_default();
            let remaining: Vec<String> = step["remaining"]
                .as_array()
                .expect("remaining")
                .iter()
                .filter_map(|u| u.as_str().map(String::from))
                .collect();
            for server in &parsed.servers {
                let key = server.reason_key();
                let kept = remaining.contains(&key);
                match (kept, reasons.get(&key)) {
                    (true, None) => assert_eq!(validate_server(server), None, "{name}: server {key}"),
                    (false, Some(msg)) => {
                        assert_eq!(validate_server(server).as_deref(), msg.as_str(), "{name}: server {key}");
                        messages_checked += 1;
                    }
                    _ => continue,
                }
                servers_checked += 1;
            }
        }
    }
    eprintln!("recorded cases: {requests} requests, {servers_checked} servers, {messages_checked} messages");
    // The subset holds a case for each kind of schema message the full set has (21).
    assert!(
        requests >= 60 && servers_checked >= 700 && messages_checked >= 25,
        "{requests} requests, {servers_checked} servers, {messages_checked} messages"
    );
}

#[test]
fn server_list_may_be_empty_but_without_duplicate_uuids() {
    fn check(servers: Value) -> Result<(), FieldError> {
        let text = servers.to_string();
        let parsed: Vec<crate::model::Server<'_>> = serde_json::from_str(&text).expect("servers");
        validate_server_list(&parsed)
    }
    assert!(check(json!([])).is_ok(), "CNAPI ran the allocator on no servers too");
    let err = check(json!([{"uuid": U1}, {}, {}, {"uuid": U1}])).expect_err("duplicate");
    assert_eq!(err.field, "servers[3].uuid");
    assert_eq!(err.message, format!("duplicate server uuid {U1} (also servers[0])"));
    // Servers without a string uuid are not compared (hard-filter-invalid-servers reports them).
    assert!(check(json!([{}, {}, {"uuid": 5}, {"uuid": 5}])).is_ok());
}

#[test]
fn validation_messages_name_the_vm_attribute() {
    assert_eq!(vm_field("vms[3]", r#"VM "ram" is not a number"#), "vms[3].ram");
    assert_eq!(vm_field("vms[0]", r#""vm.vm_uuid" is an invalid UUID"#), "vms[0].vm_uuid");
    assert_eq!(
        vm_field("vms[1]", r#""vm.internal_metadata['docker:volumesfrom']" is not valid JSON"#),
        "vms[1].internal_metadata"
    );
    assert_eq!(vm_field("vms[2]", "something else"), "vms[2]");
}
