//! `hard-filter-min-cpu`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterMinCpu;

impl Plugin for HardFilterMinCpu {
    fn name(&self) -> &'static str {
        "hard-filter-min-cpu"
    }
    fn step(&self) -> &'static str {
        "Servers with enough unreserved CPU"
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
        Err(PluginError("hard-filter-min-cpu is not implemented yet".into()))
    }
}
