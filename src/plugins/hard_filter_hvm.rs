//! `hard-filter-hvm`: for HVM VMs (`bhyve`, `kvm`), keeps servers that can run them. bhyve
//! needs a bhyve-capable server with enough CPUs for the requested vcpus (at most
//! `Bhyve Max Vcpus`, 16 on older platforms, and never more than the online CPUs). Without
//! the `HVM API` a server cannot mix the two hypervisors, so a server already hosting the
//! other HVM brand (ticketed VMs included) is removed. Other brands pass untouched.
//!
//! Where the original throws: a non-string brand is treated as not HVM; a non-numeric
//! `vcpus` is compared with JS coercion; a server without sysinfo or `vms` reads them as
//! empty.

use super::shared::unreserved::is_hvm_brand;
use crate::engine::{Data, Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::js::{fmt_num, js_gt, js_lt, Js};

/// Max vcpus of a bhyve guest on platforms that do not report it.
const OLD_BHYVE_MAX_VCPUS: f64 = 16.0;

pub struct HardFilterHvm;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-hvm", Kind::HardFilter, "Servers which are capable of requested virtualization")
        .reads(&[Data::TicketVms]);

/// The HVM brand asked for, and the vcpus it requests.
#[derive(Default)]
pub struct Hvm {
    brand: String,
    vcpus: Js,
}

impl ServerFilter for HardFilterHvm {
    type Prepared = Hvm;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<Hvm>, PluginError> {
        let brand = &req.vm.brand;
        if !is_hvm_brand(brand) {
            return Ok(PreFilter::PassAll);
        }
        // A missing or zero vcpus shows as -1, which no server accepts.
        let vcpus = if req.vm.vcpus.truthy() { req.vm.vcpus.clone() } else { Js::Num(-1.0) };
        Ok(PreFilter::Run(Hvm { brand: brand.to_js_string(), vcpus }))
    }
    fn filter(&self, req: &Request<'_>, hvm: &Hvm, id: ServerId) -> Verdict {
        match rejection(req, id, hvm.brand == "bhyve", &hvm.brand, &hvm.vcpus) {
            None => Verdict::Keep,
            Some(why) => Verdict::fail(why),
        }
    }
}

/// Why server `id` cannot host the VM, if it cannot.
fn rejection(req: &Request<'_>, id: ServerId, bhyve: bool, brand: &str, vcpus: &Js) -> Option<String> {
    let sysinfo = req.server(id).sysinfo();
    let mut max_vcpus = sysinfo.bhyve_max_vcpus.num();
    if max_vcpus.is_nan() {
        max_vcpus = OLD_BHYVE_MAX_VCPUS;
    }
    let cpus = if sysinfo.cpu_online_count.is_undefined() {
        sysinfo.cpu_total_cores.num()
    } else {
        sysinfo.cpu_online_count.num()
    };
    if cpus < max_vcpus {
        max_vcpus = cpus;
    }
    if bhyve {
        if sysinfo.bhyve_capable != Js::Bool(true) {
            return Some("Server does not support \"bhyve\" VMs".into());
        }
        if js_lt(vcpus, &Js::Num(1.0)) || js_gt(vcpus, &Js::Num(max_vcpus)) {
            return Some(format!(
                "bhyve VM {} is requesting {} vcpus whereas server supports 1 - {} vcpus",
                req.vm.uuid.to_js_string(),
                vcpus.to_js_string(),
                fmt_num(max_vcpus)
            ));
        }
    }
    if sysinfo.hvm_api.truthy() {
        // Such servers run both hypervisors side by side.
        return None;
    }
    let clash =
        req.vms(id).map(|(_, vm)| vm).find(|vm| is_hvm_brand(vm.brand()) && vm.brand().as_str() != Some(brand))?;
    Some(format!(
        "VM {} has brand {} which is incompatible with new VMs using brand {}",
        clash.uuid().to_js_string(),
        clash.brand().to_js_string(),
        brand
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    fn srv(name: &str, sysinfo: Value, vms: Value) -> Value {
        with(server(name), json!({"sysinfo": sysinfo, "vms": vms}))
    }

    fn bhyve_vm(vcpus: Value) -> Value {
        json!({"brand": "bhyve", "ram": 512, "vcpus": vcpus})
    }

    #[test]
    fn other_brands_pass_whatever_the_server_hosts() {
        let s = srv("a", json!({"Bhyve Capable": true}), json!({"b": {"brand": "bhyve"}, "k": {"brand": "kvm"}}));
        let out = Fixture::new(vec![s]).vm(json!({"brand": "joyent", "ram": 512})).run(&HardFilterHvm);
        assert_eq!(out.remaining, ["a"]);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn kvm_on_an_empty_server_passes_without_vcpu_checks() {
        let out = Fixture::new(vec![srv("a", json!({}), json!({}))])
            .vm(json!({"brand": "kvm", "ram": 512}))
            .run(&HardFilterHvm);
        assert_eq!(out.remaining, ["a"]);
    }

    #[test]
    fn bhyve_needs_a_capable_server() {
        let f = Fixture::new(vec![
            srv("yes", json!({"Bhyve Capable": true}), json!({})),
            srv("no", json!({}), json!({})),
            srv("truthy", json!({"Bhyve Capable": "true"}), json!({})),
        ])
        .vm(bhyve_vm(json!(1)));
        let out = f.run(&HardFilterHvm);
        assert_eq!(out.remaining, ["yes"]);
        assert_eq!(out.reason("no"), Some("Server does not support \"bhyve\" VMs"));
        assert_eq!(out.reason("truthy"), Some("Server does not support \"bhyve\" VMs"));
    }

    #[test]
    fn the_other_hvm_brand_conflicts_unless_the_server_has_the_hvm_api() {
        for (wanted, other) in [("bhyve", "kvm"), ("kvm", "bhyve")] {
            let vms = json!({"x": {"uuid": "3ac37ee8", "brand": other}});
            let f = Fixture::new(vec![
                srv("busy", json!({"Bhyve Capable": true}), vms.clone()),
                srv("free", json!({"Bhyve Capable": true}), json!({})),
                srv("api", json!({"Bhyve Capable": true, "HVM API": true}), vms),
            ])
            .vm(json!({"brand": wanted, "ram": 512, "vcpus": 1}));
            let out = f.run(&HardFilterHvm);
            assert_eq!(out.remaining, ["free", "api"]);
            let msg = format!("VM 3ac37ee8 has brand {other} which is incompatible with new VMs using brand {wanted}");
            assert_eq!(out.reason_list(), [("busy".into(), msg)]);
        }
    }

    #[test]
    fn vcpus_are_bounded_by_bhyve_max_and_online_cpus() {
        let cases = [
            (json!({"Bhyve Max Vcpus": 56, "CPU Total Cores": 32}), 33, Some(32)),
            (json!({"Bhyve Max Vcpus": 56, "CPU Total Cores": 32}), 32, None),
            (json!({"Bhyve Max Vcpus": 56, "CPU Total Cores": 32, "CPU Online Count": 16}), 17, Some(16)),
            (json!({"Bhyve Max Vcpus": 56, "CPU Total Cores": 32, "CPU Online Count": 16}), 16, None),
            (json!({"CPU Total Cores": 32}), 17, Some(16)),
            (json!({"Bhyve Max Vcpus": 32, "CPU Total Cores": 32}), 1, None),
        ];
        for (mut sysinfo, vcpus, max) in cases {
            sysinfo["Bhyve Capable"] = json!(true);
            let out = Fixture::new(vec![srv("s", sysinfo, json!({}))]).vm(bhyve_vm(json!(vcpus))).run(&HardFilterHvm);
            let expected = max.map(|m| {
                format!("bhyve VM undefined is requesting {vcpus} vcpus whereas server supports 1 - {m} vcpus")
            });
            assert_eq!(out.reason("s").map(str::to_string), expected, "{vcpus} vcpus");
        }
    }

    #[test]
    fn zero_vcpus_read_as_minus_one_and_the_uuid_is_the_vms() {
        let sysinfo = json!({"Bhyve Capable": true, "Bhyve Max Vcpus": 32, "CPU Total Cores": 32});
        let f =
            Fixture::new(vec![srv("s", sysinfo, json!({}))]).vm(json!({"brand": "bhyve", "vcpus": 0, "uuid": "v-1"}));
        let out = f.run(&HardFilterHvm);
        assert_eq!(out.reason("s"), Some("bhyve VM v-1 is requesting -1 vcpus whereas server supports 1 - 32 vcpus"));
    }

    #[test]
    fn ticketed_vms_conflict_too() {
        let f = Fixture::new(vec![srv("s", json!({"Bhyve Capable": true}), json!({}))])
            .vm(json!({"brand": "kvm"}))
            .tickets(json!([{
                "id": "t1", "server_uuid": "s", "scope": "vm", "action": "provision", "status": "active",
                "extra": {"brand": "bhyve", "max_physical_memory": 128, "quota": 1}
            }]));
        let out = f.run_after(&["calculate-ticketed-vms"], &HardFilterHvm);
        assert_eq!(out.reason("s"), Some("VM t1 has brand bhyve which is incompatible with new VMs using brand kvm"));
    }
}
