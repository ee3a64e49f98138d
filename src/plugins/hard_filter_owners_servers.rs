//! `hard-filter-owners-servers`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterOwnersServers;

impl Plugin for HardFilterOwnersServers {
    fn name(&self) -> &'static str {
        "hard-filter-owners-servers"
    }
    fn step(&self) -> &'static str {
        "Filter CNs based on owner filters"
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
        Err(PluginError("hard-filter-owners-servers is not implemented yet".into()))
    }
}
