//! The engine's datacenter (`engine::datacenter`): a VM placed and listed on its server, then
//! the next allocation, must decide exactly what the same datacenter sent again with that VM
//! inline decides, step by step; removing VMs must give back what the datacenter without
//! them decides. The datacenters are the vendored recorded cases (every plugin runs in one
//! of them), with the production chain of each case's config.

use std::path::Path;

use dapi::engine::{Allocation, Datacenter, Engine, ProvisionedVm, StepsFormat, VmRequest};
use dapi::model::{AllocateBody, Server};
use dapi::validate::validate_allocate;
use dapi::wire::parse_allocate_body;
use serde_json::{json, Value};

fn cases() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
    let mut paths: Vec<_> = std::fs::read_dir(&dir).expect("cases").map(|e| e.expect("entry").path()).collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("case");
            (p.file_name().expect("name").to_string_lossy().into_owned(), serde_json::from_str(&text).expect("json"))
        })
        .collect()
}

/// Steps and choice of an allocation, as the answer writes them.
fn outcome(allocation: &Allocation, servers: &[Server<'_>]) -> (Option<String>, Vec<Value>) {
    let mut steps = Vec::new();
    allocation.steps_view(servers, StepsFormat::Full).write_json(&mut steps);
    let chosen = allocation.chosen.map(|id| servers[id].reason_key());
    let steps: Value = serde_json::from_slice(&steps).expect("json");
    (chosen, steps.as_array().cloned().unwrap_or_default())
}

/// Panics with the first difference between two outcomes.
fn assert_same(got: (Option<String>, Vec<Value>), want: (Option<String>, Vec<Value>), what: &str) {
    for (i, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
        assert_eq!(g, w, "{what}: step {i} differs");
    }
    assert_eq!(got.1.len(), want.1.len(), "{what}: number of steps");
    assert_eq!(got.0, want.0, "{what}: chosen server");
}

/// The request's body with `placed` VMs (server index, VM) listed inline as CNAPI lists
/// provisioned ones, and the servers' disk figures grown by them.
fn resent(request: &Value, placed: &[(usize, ProvisionedVm)]) -> Vec<u8> {
    let mut body = request.clone();
    for (id, vm) in placed {
        let server = &mut body["servers"][*id];
        if !server["vms"].is_object() {
            server["vms"] = json!({});
        }
        let entry = vm.to_json();
        server["vms"][vm.uuid.as_str()] = entry;
        for (field, bytes) in
            [("disk_zone_quota_bytes", vm.quota_bytes), ("disk_kvm_zvol_volsize_bytes", vm.zvol_bytes)]
        {
            if bytes != 0.0 {
                let now = server[field].as_f64().expect("a numeric disk figure on a chosen server");
                server[field] = json!(now + bytes);
            }
        }
    }
    serde_json::to_vec(&body).expect("json")
}

fn parse(body: &[u8]) -> Option<AllocateBody<'_>> {
    let mut request = parse_allocate_body(body).ok()?;
    validate_allocate(&mut request).ok()?;
    Some(request)
}

fn vm_uuid(n: usize) -> String {
    format!("5e1ec7ed-0000-4000-8000-{n:012x}")
}

/// Places up to `n` VMs one after another, checking each decision against the re-sent
/// datacenter; then removes them (in the given order) checking again. Returns how many
/// were placed.
fn place_and_remove(name: &str, case: &Value, n: usize, removal: &dyn Fn(usize) -> Vec<usize>) -> Option<usize> {
    let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).expect("engine");
    let mut request_json = case["request"].clone();
    let seed = request_json.get("seed").and_then(Value::as_u64).or_else(|| case["seed"].as_u64()).unwrap_or(1);
    request_json["seed"] = json!(seed);
    if !request_json["vm"].is_object() {
        return None;
    }
    // Every VM is tagged; every other one keeps away from the first (by instance) and from
    // the others (by tag), which the look-ups must see.
    request_json["vm"]["alias"] = json!("dc-test");
    request_json["vm"]["tags"] = json!({"role": "dc-test"});
    request_json["vm"].as_object_mut()?.remove("affinity");
    request_json["vm"].as_object_mut()?.remove("locality");
    let mut averse_json = request_json.clone();
    averse_json["vm"]["affinity"] = json!([
        {"key": "instance", "operator": "!=", "value": vm_uuid(0), "valueType": "exact", "isSoft": false},
        {"key": "role", "operator": "!=", "value": "dc-test", "valueType": "exact", "isSoft": false}
    ]);
    let original = serde_json::to_vec(&request_json).expect("json");
    let averse_body = serde_json::to_vec(&averse_json).expect("json");
    let mut first = parse(&original)?;
    let averse = parse(&averse_body)?;
    let servers = std::mem::take(&mut first.servers);
    let mut dc = Datacenter::new(servers, std::mem::take(&mut first.raw_servers));
    let mut placed: Vec<(usize, ProvisionedVm)> = Vec::new();

    for i in 0..n {
        let (asked, body_json) = if i % 2 == 0 { (&first, &request_json) } else { (&averse, &averse_json) };
        let request = VmRequest {
            vm: &asked.vm,
            image: &first.image,
            package: first.package.as_ref(),
            tickets: &first.tickets,
            seed: Some(seed),
            raw: asked.raw,
        };
        let placement = engine.allocate_in(&dc, &request).expect("allocates");
        let body = resent(body_json, &placed);
        let again = parse(&body).expect("the re-sent body is valid");
        let expected = engine.allocate(&again).expect("allocates");
        assert_same(
            outcome(&placement.allocation, dc.servers()),
            outcome(&expected, &again.servers),
            &format!("{name}: placement {i} against the re-sent datacenter"),
        );
        let Some(id) = placement.allocation.chosen else { continue };
        let vm = ProvisionedVm::of(&vm_uuid(i), &request, &placement.cpu_cap);
        dc.add_vm(id, vm.clone()).expect("listed");
        placed.push((id, vm));
    }
    let count = placed.len();
    let listed: Vec<(usize, String)> = placed.iter().map(|(id, vm)| (*id, vm.uuid.clone())).collect();

    for k in removal(count) {
        let (server, uuid) = listed[k].clone();
        let from = dc.remove_vm(&uuid).expect("was placed");
        assert_eq!(from, server);
        placed.retain(|(_, vm)| vm.uuid != uuid);
        let request = VmRequest {
            vm: &averse.vm,
            image: &first.image,
            package: first.package.as_ref(),
            tickets: &first.tickets,
            seed: Some(seed),
            raw: averse.raw,
        };
        let placement = engine.allocate_in(&dc, &request).expect("allocates");
        let body = resent(&averse_json, &placed);
        let again = parse(&body).expect("valid");
        let expected = engine.allocate(&again).expect("allocates");
        assert_same(
            outcome(&placement.allocation, dc.servers()),
            outcome(&expected, &again.servers),
            &format!("{name}: after removing VM {k}"),
        );
    }
    Some(count)
}

#[test]
fn placed_vms_decide_as_the_datacenter_sent_again_with_them_inline() {
    let mut checked = 0;
    let mut placed_total = 0;
    for (name, case) in cases() {
        // Out of order: the middle one, then the last, then the rest from the front.
        let removal = |count: usize| {
            let mut order: Vec<usize> = Vec::new();
            for k in [count / 2, count.saturating_sub(1)].into_iter().chain(0..count) {
                if k < count && !order.contains(&k) {
                    order.push(k);
                }
            }
            order
        };
        if let Some(n) = place_and_remove(&name, &case, 6, &removal) {
            checked += 1;
            placed_total += n;
        }
    }
    assert!(checked >= 40, "only {checked} valid cases");
    assert!(placed_total >= 100, "only {placed_total} VMs placed");
}

#[test]
fn a_datacenter_left_alone_decides_as_a_single_allocation() {
    for (name, case) in cases() {
        let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).expect("engine");
        let body = serde_json::to_vec(&case["request"]).expect("json");
        let Some(mut request) = parse(&body) else { continue };
        let single = engine.allocate(&request).expect("allocates");
        let single = outcome(&single, &request.servers);
        let servers = std::mem::take(&mut request.servers);
        let dc = Datacenter::new(servers, std::mem::take(&mut request.raw_servers));
        let vm_request = VmRequest {
            vm: &request.vm,
            image: &request.image,
            package: request.package.as_ref(),
            tickets: &request.tickets,
            seed: request.seed,
            raw: request.raw,
        };
        let placement = engine.allocate_in(&dc, &vm_request).expect("allocates");
        assert_same(outcome(&placement.allocation, dc.servers()), single, &name);
    }
}

/// A server's schema verdict is kept across a VM listed on it or taken off it only while it
/// is what checking the whole server again gives.
#[test]
fn the_schema_verdict_follows_listed_vms() {
    use dapi::js::Js;
    use dapi::model::FullVm;
    use std::borrow::Cow;
    let (_, case) = cases().into_iter().next().expect("a vendored case");
    let text = serde_json::to_vec(&json!({"servers": case["request"]["servers"].clone()})).expect("servers");
    let (_, mut servers) = dapi::wire::parse_capacity_body(&text).expect("servers parse");
    let server = servers.iter_mut().find(|s| s.schema_violation().is_none()).expect("a valid server");
    let vm = |owner: &str, ram: f64| FullVm {
        owner_uuid: Js::str(owner),
        max_physical_memory_mib: Js::Num(ram),
        state: Js::str("running"),
        ..FullVm::default()
    };
    let owner = "930896af-bf8c-48d4-885c-6573a94b1853";
    let whole = |s: &Server<'_>| dapi::model::schema::validate_server(s);
    server.add_vm(Cow::Borrowed("00000000-0000-4000-9000-000000000001"), vm(owner, 512.0).into());
    assert_eq!(server.schema_violation(), None);
    assert_eq!(whole(server), None);
    // A VM whose RAM is not a whole number makes the server invalid, as sent again it is.
    server.add_vm(Cow::Borrowed("00000000-0000-4000-9000-000000000002"), vm(owner, 512.5).into());
    let violation = server.schema_violation().map(str::to_owned);
    assert!(violation.is_some());
    assert_eq!(violation, whole(server));
    server.remove_vm("00000000-0000-4000-9000-000000000002").expect("listed");
    assert_eq!(server.schema_violation(), None);
    // A key that is not a uuid, likewise.
    server.add_vm(Cow::Borrowed("not-a-uuid"), vm(owner, 512.0).into());
    assert!(server.schema_violation().is_some());
    assert_eq!(server.schema_violation().map(str::to_owned), whole(server));
}
