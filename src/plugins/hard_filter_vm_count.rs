//! `hard-filter-vm-count`: removes servers already holding `filter_vm_limit` VMs or more
//! (224 when unset, 0 or not a number), counting every VM: failed, stopped and ticketed ones
//! too. (The step name says "more VMs than limit"; it is the original's, kept verbatim.)
//! A server without a `vms` object (the original throws) reads as having no VMs.

use crate::engine::{
    Data, Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Shortfall, Verdict,
};
use crate::js::fmt_num;

/// The default maximum number of VMs on one server.
const DEFAULT_VM_LIMIT: f64 = 224.0;

pub struct HardFilterVmCount;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-vm-count", Kind::HardFilter, "Servers with more VMs than limit")
        .reads(&[Data::TicketVms]);

impl ServerFilter for HardFilterVmCount {
    /// The limit in force.
    type Prepared = f64;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<f64>, PluginError> {
        let configured = req.defaults.filter_vm_limit.num();
        Ok(PreFilter::Run(if configured == 0.0 || configured.is_nan() { DEFAULT_VM_LIMIT } else { configured }))
    }
    fn filter(&self, req: &Request<'_>, &limit: &f64, id: ServerId) -> Verdict {
        let count = req.vm_count(id);
        if (count as f64) < limit {
            return Verdict::Keep;
        }
        // One more VM is needed below the limit: `limit - count` slots are left (≤ 0).
        let why = format!("Server has {count} VMs (limit is {})", fmt_num(limit));
        if req.explaining() {
            return Verdict::short(
                why,
                Shortfall { resource: "vms", unit: "VMs", needed: 1.0, available: limit - count as f64 },
            );
        }
        Verdict::fail(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Map, Value};

    fn with_vms(name: &str, n: usize) -> Value {
        let vms: Map<String, Value> = (0..n).map(|i| (format!("{name}-vm{i}"), json!({"owner_uuid": "o"}))).collect();
        with(server(name), json!({"vms": vms}))
    }

    #[test]
    fn removes_servers_at_or_over_the_limit() {
        let f = Fixture::new(vec![with_vms("three", 3), with_vms("two", 2), with_vms("four", 4), with_vms("none", 0)])
            .defaults(json!({"filter_vm_limit": 3}));
        let out = f.run(&HardFilterVmCount);
        assert_eq!(out.remaining, ["two", "none"]);
        assert_eq!(
            out.reason_list(),
            [
                ("three".into(), "Server has 3 VMs (limit is 3)".into()),
                ("four".into(), "Server has 4 VMs (limit is 3)".into())
            ]
        );
    }

    #[test]
    fn default_limit_is_224() {
        let out = Fixture::new(vec![with_vms("a", 223), with_vms("b", 224)]).run(&HardFilterVmCount);
        assert_eq!(out.remaining, ["a"]);
        assert_eq!(out.reason("b"), Some("Server has 224 VMs (limit is 224)"));
        let out =
            Fixture::new(vec![with_vms("b", 224)]).defaults(json!({"filter_vm_limit": "0"})).run(&HardFilterVmCount);
        assert_eq!(out.reason("b"), Some("Server has 224 VMs (limit is 224)"));
    }

    #[test]
    fn string_limit_is_coerced_and_ticketed_vms_count() {
        let f = Fixture::new(vec![with_vms("s", 1)]).defaults(json!({"filter_vm_limit": "2"})).tickets(json!([{
            "id": "t1", "server_uuid": "s", "scope": "vm", "action": "provision", "status": "queued",
            "extra": {"brand": "joyent", "max_physical_memory": 128, "quota": 1}
        }]));
        assert_eq!(f.run(&HardFilterVmCount).remaining, ["s"]);
        let out = f.run_after(&["calculate-ticketed-vms"], &HardFilterVmCount);
        assert_eq!(out.reason("s"), Some("Server has 2 VMs (limit is 2)"));
    }
}
