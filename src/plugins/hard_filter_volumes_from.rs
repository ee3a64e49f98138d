//! `hard-filter-volumes-from`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterVolumesFrom;

impl Plugin for HardFilterVolumesFrom {
    fn name(&self) -> &'static str {
        "hard-filter-volumes-from"
    }
    fn step(&self) -> &'static str {
        "Servers containing VMs required for volumesfrom"
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
        Err(PluginError("hard-filter-volumes-from is not implemented yet".into()))
    }
}
