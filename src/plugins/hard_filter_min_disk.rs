//! `hard-filter-min-disk`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterMinDisk;

impl Plugin for HardFilterMinDisk {
    fn name(&self) -> &'static str {
        "hard-filter-min-disk"
    }
    fn step(&self) -> &'static str {
        "Servers with enough unreserved disk"
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
        Err(PluginError("hard-filter-min-disk is not implemented yet".into()))
    }
}
