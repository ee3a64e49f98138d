//! `hard-filter-virtual-servers`: for Docker VMs (or VMs tagged
//! `triton.placement.exclude_virtual_servers`), removes servers whose sysinfo
//! `System Type` is `Virtual`.

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterVirtualServers;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-virtual-servers", Kind::HardFilter, "Servers which are not virtual servers");

impl Plugin for HardFilterVirtualServers {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let vm = req.vm;
        let active = vm.docker.truthy() || vm.tags.get("triton.placement.exclude_virtual_servers").truthy();
        if !active {
            return Ok(servers.to_vec());
        }
        let mut kept = Vec::with_capacity(servers.len());
        for &id in servers {
            if req.server(id).sysinfo().system_type.as_str() == Some("Virtual") {
                reasons.set(req.key(id), "Server is a virtual server - excluding");
            } else {
                kept.push(id);
            }
        }
        Ok(kept)
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
