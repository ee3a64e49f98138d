//! Requests built from the models' shapes: servers, their VMs, the VM payload, image,
//! package and tickets, each field present or not, mostly of its own type and sometimes of
//! another (the fuzzer's bytes choose), through the whole request path.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

const OWNERS: &[&str] = &["20000000-0000-4000-8000-000000000001", "20000000-0000-4000-8000-000000000002"];
const TAGS: &[&str] = &["admin", "external", "internal", "storage"];
const BRANDS: &[&str] = &["joyent", "joyent-minimal", "lx", "kvm", "bhyve"];
const PLATFORMS: &[&str] = &["20150101T000000Z", "20200101T000000Z", "20240101T000000Z", "junk"];

fn uuid(kind: u8, n: u64) -> String {
    format!("{kind}0000000-0000-4000-8000-{n:012}")
}

/// Any JSON value, awkward ones included.
fn any_value(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=11)? {
        0 => Value::Null,
        1 => json!(u.arbitrary::<bool>()?),
        2 => json!(u.arbitrary::<i64>()?),
        3 => json!(u.arbitrary::<f64>()?.clamp(-1e300, 1e300)),
        4 => json!(u.arbitrary::<String>()?),
        5 => json!(""),
        6 => json!([]),
        7 => json!({}),
        8 => json!(u64::MAX),
        9 => json!(-0.5),
        10 => json!([u.arbitrary::<String>()?]),
        _ => json!({"k": u.arbitrary::<String>()?}),
    })
}

/// The field's own kind of value most of the time, anything else sometimes.
fn field(
    u: &mut Unstructured,
    map: &mut Map<String, Value>,
    name: &str,
    own: impl FnOnce(&mut Unstructured) -> Result<Value>,
) -> Result<()> {
    match u.int_in_range(0..=9)? {
        0 => {}
        1 => {
            map.insert(name.into(), any_value(u)?);
        }
        _ => {
            map.insert(name.into(), own(u)?);
        }
    }
    Ok(())
}

fn pick<'a>(u: &mut Unstructured, from: &[&'a str]) -> Result<&'a str> {
    Ok(from[u.choose_index(from.len())?])
}

fn size(u: &mut Unstructured, max: u64) -> Result<Value> {
    Ok(json!(u.int_in_range(0..=max)?))
}

fn server_vm(u: &mut Unstructured) -> Result<Value> {
    let mut vm = Map::new();
    field(u, &mut vm, "owner_uuid", |u| Ok(json!(pick(u, OWNERS)?)))?;
    field(u, &mut vm, "max_physical_memory", |u| size(u, 65_536))?;
    field(u, &mut vm, "quota", |u| size(u, 500))?;
    field(u, &mut vm, "cpu_cap", |u| size(u, 800))?;
    field(u, &mut vm, "brand", |u| Ok(json!(pick(u, BRANDS)?)))?;
    field(u, &mut vm, "state", |u| Ok(json!(pick(u, &["running", "stopped", "failed", "destroyed"])?)))?;
    field(u, &mut vm, "alias", |u| Ok(json!(u.arbitrary::<String>()?)))?;
    field(u, &mut vm, "tags", |u| Ok(json!({pick(u, &["role", "sdc_docker"])?: u.arbitrary::<String>()?})))?;
    field(u, &mut vm, "uuid", |u| Ok(json!(uuid(1, u.int_in_range(0..=20)?))))?;
    Ok(Value::Object(vm))
}

fn server(u: &mut Unstructured, n: u64) -> Result<Value> {
    let mut s = Map::new();
    s.insert("uuid".into(), json!(uuid(0, n)));
    field(u, &mut s, "setup", |u| Ok(json!(u.ratio(9, 10)?)))?;
    field(u, &mut s, "status", |u| Ok(json!(pick(u, &["running", "unknown"])?)))?;
    field(u, &mut s, "reserved", |u| Ok(json!(u.ratio(1, 10)?)))?;
    field(u, &mut s, "headnode", |u| Ok(json!(u.ratio(1, 10)?)))?;
    field(u, &mut s, "memory_available_bytes", |u| size(u, 1 << 37))?;
    field(u, &mut s, "memory_total_bytes", |u| size(u, 1 << 37))?;
    field(u, &mut s, "reservation_ratio", |u| Ok(json!(f64::from(u.int_in_range(0..=12u8)?) / 10.0)))?;
    for disk in [
        "disk_pool_size_bytes",
        "disk_pool_alloc_bytes",
        "disk_installed_images_used_bytes",
        "disk_zone_quota_bytes",
        "disk_kvm_quota_bytes",
    ] {
        field(u, &mut s, disk, |u| size(u, 1 << 42))?;
    }
    field(u, &mut s, "overprovision_ratios", |u| {
        Ok(json!({"ram": f64::from(u.int_in_range(1..=4u8)?), "cpu": 4, "disk": 1}))
    })?;
    field(u, &mut s, "traits", |u| Ok(json!({pick(u, &["ssd", "hpc"])?: u.arbitrary::<bool>()?})))?;
    field(u, &mut s, "current_platform", |u| Ok(json!(pick(u, PLATFORMS)?)))?;
    field(u, &mut s, "next_reboot", |u| Ok(json!(pick(u, &["2024-01-01T00:00:00.000Z", "bad"])?)))?;
    field(u, &mut s, "sysinfo", |u| {
        Ok(json!({"Live Image": pick(u, PLATFORMS)?, "SDC Version": pick(u, &["6.5", "7.0"])?,
                  "CPU Total Cores": u.int_in_range(0..=128u32)?, "Zpool Size in GiB": u.int_in_range(0..=4000u32)?,
                  "Network Interfaces": {"e0": {"NIC Names": [pick(u, TAGS)?], "Link Status": pick(u, &["up", "down"])?}}}))
    })?;
    field(u, &mut s, "vms", |u| {
        let mut vms = Map::new();
        for i in 0..u.int_in_range(0..=6u64)? {
            vms.insert(uuid(1, n * 10 + i), server_vm(u)?);
        }
        Ok(Value::Object(vms))
    })?;
    Ok(Value::Object(s))
}

fn request(u: &mut Unstructured) -> Result<Value> {
    let mut servers = Vec::new();
    for n in 0..u.int_in_range(1..=8u64)? {
        servers.push(server(u, n)?);
    }
    let mut vm = Map::new();
    field(u, &mut vm, "vm_uuid", |_| Ok(json!(uuid(3, 1))))?;
    field(u, &mut vm, "owner_uuid", |u| Ok(json!(pick(u, OWNERS)?)))?;
    field(u, &mut vm, "ram", |u| size(u, 131_072))?;
    field(u, &mut vm, "quota", |u| size(u, 500))?;
    field(u, &mut vm, "cpu_cap", |u| size(u, 1000))?;
    field(u, &mut vm, "brand", |u| Ok(json!(pick(u, BRANDS)?)))?;
    field(u, &mut vm, "nic_tags", |u| Ok(json!([pick(u, TAGS)?])))?;
    field(u, &mut vm, "traits", |u| Ok(json!({"ssd": u.arbitrary::<bool>()?})))?;
    field(u, &mut vm, "locality", |u| {
        Ok(json!({"strict": u.arbitrary::<bool>()?, "near": [uuid(1, u.int_in_range(0..=20)?)], "far": uuid(1, 3)}))
    })?;
    field(u, &mut vm, "affinity", |u| {
        Ok(json!([{"key": pick(u, &["instance", "role", "container"])?, "operator": pick(u, &["==", "!="])?,
                   "value": u.arbitrary::<String>()?, "isSoft": u.arbitrary::<bool>()?, "valueType": pick(u, &["exact", "glob", "re"])?}]))
    })?;
    let mut image = Map::new();
    field(u, &mut image, "image_size", |u| size(u, 1 << 20))?;
    field(u, &mut image, "requirements", |u| {
        Ok(
            json!({"min_ram": u.int_in_range(0..=4096u32)?, "max_ram": u.int_in_range(0..=65536u32)?, "min_platform": {"7.0": pick(u, PLATFORMS)?}}),
        )
    })?;
    field(u, &mut image, "traits", |u| Ok(json!({"ssd": u.arbitrary::<bool>()?})))?;
    let mut package = Map::new();
    field(u, &mut package, "max_physical_memory", |u| size(u, 131_072))?;
    field(u, &mut package, "quota", |u| size(u, 1 << 20))?;
    field(u, &mut package, "cpu_cap", |u| size(u, 1000))?;
    field(u, &mut package, "overprovision_memory", |u| Ok(json!(pick(u, &["1", "1.5", "2"])?)))?;
    field(u, &mut package, "min_platform", |u| Ok(json!({"7.0": pick(u, PLATFORMS)?})))?;
    let mut body = Map::new();
    body.insert("servers".into(), Value::Array(servers));
    body.insert("vm".into(), Value::Object(vm));
    body.insert("image".into(), Value::Object(image));
    field(u, &mut body, "package", |_| Ok(Value::Object(package)))?;
    field(u, &mut body, "tickets", |u| {
        Ok(
            json!([{"uuid": uuid(4, 1), "server_uuid": uuid(0, u.int_in_range(0..=8)?), "status": pick(u, &["active", "queued"])?,
                   "scope": "vm", "id": uuid(5, 1), "action": "provision", "extra": {"max_physical_memory": 1024, "cpu_cap": 100, "quota": 10, "brand": "joyent"}}]),
        )
    })?;
    field(u, &mut body, "seed", |u| Ok(json!(u.arbitrary::<u32>()?)))?;
    Ok(Value::Object(body))
}

fuzz_target!(|bytes: &[u8]| {
    let mut u = Unstructured::new(bytes);
    let Ok(request) = request(&mut u) else { return };
    let body = serde_json::to_vec(&request).expect("serialise");
    dapi_fuzz::check_request_path(dapi_fuzz::production(), &body);
});
