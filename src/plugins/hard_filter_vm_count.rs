//! `hard-filter-vm-count`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterVmCount;

impl Plugin for HardFilterVmCount {
    fn name(&self) -> &'static str {
        "hard-filter-vm-count"
    }
    fn step(&self) -> &'static str {
        "Servers with more VMs than limit"
    }
    fn kind(&self) -> Kind {
        Kind::HardFilter
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Err(PluginError("hard-filter-vm-count is not implemented yet".into()))
    }
}
