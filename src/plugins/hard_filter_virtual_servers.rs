//! `hard-filter-virtual-servers`: for Docker VMs (or VMs tagged
//! `triton.placement.exclude_virtual_servers`), removes servers whose sysinfo
//! `System Type` is `Virtual`.

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::model::TAG_EXCLUDE_VIRTUAL_SERVERS;

pub struct HardFilterVirtualServers;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-virtual-servers", Kind::HardFilter, "Servers which are not virtual servers");

impl ServerFilter for HardFilterVirtualServers {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<()>, PluginError> {
        let vm = req.vm;
        let active = vm.docker.truthy() || vm.tags.get(TAG_EXCLUDE_VIRTUAL_SERVERS).truthy();
        Ok(if active { PreFilter::Run(()) } else { PreFilter::PassAll })
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        match req.server(id).sysinfo().system_type.as_str() {
            Some("Virtual") => Verdict::fail("Server is a virtual server - excluding"),
            _ => Verdict::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    fn servers() -> Vec<serde_json::Value> {
        let mut virt = server("v");
        virt["sysinfo"]["System Type"] = json!("Virtual");
        vec![virt, with(server("p"), json!({}))]
    }

    #[test]
    fn docker_vms_avoid_virtual_servers() {
        let out = Fixture::new(servers()).vm(json!({"docker": true})).run(&HardFilterVirtualServers);
        assert_eq!(out.remaining, ["p"]);
        assert_eq!(out.reason("v"), Some("Server is a virtual server - excluding"));
    }

    #[test]
    fn the_placement_tag_also_enables_it() {
        let vm = json!({"tags": {"triton.placement.exclude_virtual_servers": true}});
        let out = Fixture::new(servers()).vm(vm).run(&HardFilterVirtualServers);
        assert_eq!(out.remaining, ["p"]);
    }

    #[test]
    fn other_vms_pass_without_reasons() {
        let out = Fixture::new(servers()).run(&HardFilterVirtualServers);
        assert_eq!(out.remaining, ["v", "p"]);
        assert!(out.reasons.is_empty());
    }
}
