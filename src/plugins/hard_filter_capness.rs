//! `hard-filter-capness`: keeps capped VMs (VM or package `cpu_cap`) on servers whose VMs are
//! all capped, and uncapped VMs on servers whose VMs are all uncapped, because one uncapped VM
//! makes CPU accounting on its server meaningless.
//!
//! Every VM on the server counts, failed and ticketed ones included; the first mismatch is
//! reported, naming the VM object's own `uuid` (`undefined` if it has none). A server without
//! a `vms` object (the original throws) reads as having no VMs.

use crate::engine::{Data, Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterCapness;

static DECLARATION: Declaration = Declaration::new(
    "hard-filter-capness",
    Kind::HardFilter,
    "Servers which have same existence of cpu_cap as package",
)
.reads(&[Data::CpuCap, Data::TicketVms]);

impl ServerFilter for HardFilterCapness {
    /// Whether the new VM is capped.
    type Prepared = bool;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<bool>, PluginError> {
        if req.defaults.filter_capness.switched_off() {
            return Ok(PreFilter::Skip("Do not filter out cpu_cap disparities".into()));
        }
        let capped = req.vm_cpu_cap().truthy() || req.package().is_some_and(|p| p.package.cpu_cap_pct.truthy());
        Ok(PreFilter::Run(capped))
    }
    fn filter(&self, req: &Request<'_>, &capped: &bool, id: ServerId) -> Verdict {
        match req.first_vm_capped(id, !capped) {
            None => Verdict::Keep,
            Some(vm) => Verdict::fail(format!(
                "VM {} has {} cpu_cap, while the package {}",
                vm.uuid().to_js_string(),
                if capped { "no" } else { "a" },
                if capped { "does" } else { "does not" }
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    fn vm(uuid: &str, cap: Option<u32>) -> (String, Value) {
        let mut v = json!({"uuid": uuid, "owner_uuid": "o"});
        if let Some(c) = cap {
            v["cpu_cap"] = json!(c);
        }
        (uuid.to_string(), v)
    }

    fn srv(name: &str, vms: Vec<(String, Value)>) -> Value {
        let map: serde_json::Map<String, Value> = vms.into_iter().collect();
        with(server(name), json!({"vms": map}))
    }

    fn servers() -> Vec<Value> {
        vec![
            srv("capped", vec![vm("c1", Some(100)), vm("c2", Some(300))]),
            srv("uncapped", vec![vm("u1", None), vm("u2", None)]),
            srv("capped-first", vec![vm("m1", Some(100)), vm("m2", None)]),
            srv("uncapped-first", vec![vm("n1", None), vm("n2", Some(400))]),
            srv("empty", vec![]),
        ]
    }

    #[test]
    fn capped_package_needs_all_vms_capped() {
        let out = Fixture::new(servers()).vm(json!({})).package(json!({"cpu_cap": 100})).run(&HardFilterCapness);
        assert_eq!(out.remaining, ["capped", "empty"]);
        assert_eq!(
            out.reason_list(),
            [
                ("uncapped".into(), "VM u1 has no cpu_cap, while the package does".into()),
                ("capped-first".into(), "VM m2 has no cpu_cap, while the package does".into()),
                ("uncapped-first".into(), "VM n1 has no cpu_cap, while the package does".into()),
            ]
        );
    }

    #[test]
    fn uncapped_package_needs_all_vms_uncapped() {
        let out = Fixture::new(servers()).vm(json!({})).package(json!({})).run(&HardFilterCapness);
        assert_eq!(out.remaining, ["uncapped", "empty"]);
        assert_eq!(
            out.reason_list(),
            [
                ("capped".into(), "VM c1 has a cpu_cap, while the package does not".into()),
                ("capped-first".into(), "VM m1 has a cpu_cap, while the package does not".into()),
                ("uncapped-first".into(), "VM n2 has a cpu_cap, while the package does not".into()),
            ]
        );
    }

    #[test]
    fn can_be_switched_off() {
        for pkg in [json!({"cpu_cap": 100}), json!({})] {
            let f = Fixture::new(servers()).vm(json!({})).package(pkg).defaults(json!({"filter_capness": false}));
            let out = f.run(&HardFilterCapness);
            assert_eq!(out.remaining.len(), 5);
            assert_eq!(out.reason_list(), [("skip".into(), "Do not filter out cpu_cap disparities".into())]);
        }
    }

    #[test]
    fn vm_cap_counts_and_vms_without_uuid_print_undefined() {
        let s = with(server("s"), json!({"vms": {"k": {"owner_uuid": "o"}}}));
        let out = Fixture::new(vec![s]).vm(json!({"cpu_cap": 50})).run(&HardFilterCapness);
        assert_eq!(out.reason("s"), Some("VM undefined has no cpu_cap, while the package does"));
    }

    #[test]
    fn ticketed_vms_count() {
        let f = Fixture::new(vec![server("s")]).vm(json!({})).package(json!({})).tickets(json!([{
            "id": "t1", "server_uuid": "s", "scope": "vm", "action": "provision", "status": "queued",
            "extra": {"brand": "joyent", "cpu_cap": 100, "max_physical_memory": 128, "quota": 1}
        }]));
        let out = f.run_after(&["calculate-ticketed-vms"], &HardFilterCapness);
        assert_eq!(out.reason("s"), Some("VM t1 has a cpu_cap, while the package does not"));
    }
}
