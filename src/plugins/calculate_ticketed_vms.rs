//! `calculate-ticketed-vms`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct CalculateTicketedVms;

impl Plugin for CalculateTicketedVms {
    fn name(&self) -> &'static str {
        "calculate-ticketed-vms"
    }
    fn step(&self) -> &'static str {
        "Add VMs which have open provisioning tickets"
    }
    fn kind(&self) -> Kind {
        Kind::Transform
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Err(PluginError("calculate-ticketed-vms is not implemented yet".into()))
    }
}
