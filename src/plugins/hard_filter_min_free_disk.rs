//! `hard-filter-min-free-disk`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterMinFreeDisk;

impl Plugin for HardFilterMinFreeDisk {
    fn name(&self) -> &'static str {
        "hard-filter-min-free-disk"
    }
    fn step(&self) -> &'static str {
        "Servers with enough free disk"
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
        Err(PluginError("hard-filter-min-free-disk is not implemented yet".into()))
    }
}
