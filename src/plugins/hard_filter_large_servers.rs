//! `hard-filter-large-servers`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterLargeServers;

impl Plugin for HardFilterLargeServers {
    fn name(&self) -> &'static str {
        "hard-filter-large-servers"
    }
    fn step(&self) -> &'static str {
        "Filter out the largest and most empty servers"
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
        Err(PluginError("hard-filter-large-servers is not implemented yet".into()))
    }
}
