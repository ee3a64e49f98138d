//! `load-server-vms`: in Triton this loaded each server's VMs from VMAPI. dapi's callers send
//! the VMs inline in `servers[].vms`, so it passes everything on and says so.

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct LoadServerVms;

static DECLARATION: Declaration =
    Declaration::new("load-server-vms", Kind::Transform, "Load info about all VMs for each server").per_server();

impl Plugin for LoadServerVms {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        reasons.skip("getServerVms not set; assuming server.vms is already populated");
        Ok(servers.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, Fixture};

    #[test]
    fn vms_are_already_inline() {
        let out = Fixture::new(vec![server("a")]).run(&LoadServerVms);
        assert_eq!(out.remaining, ["a"]);
        assert_eq!(out.reason("skip"), Some("getServerVms not set; assuming server.vms is already populated"));
    }
}
