//! `hard-filter-invalid-servers`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterInvalidServers;

impl Plugin for HardFilterInvalidServers {
    fn name(&self) -> &'static str {
        "hard-filter-invalid-servers"
    }
    fn step(&self) -> &'static str {
        "Servers objects which are valid"
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
        Err(PluginError("hard-filter-invalid-servers is not implemented yet".into()))
    }
}
