//! `hard-filter-vlans`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterVlans;

impl Plugin for HardFilterVlans {
    fn name(&self) -> &'static str {
        "hard-filter-vlans"
    }
    fn step(&self) -> &'static str {
        "Servers supporting required NIC Tags"
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
        Err(PluginError("hard-filter-vlans is not implemented yet".into()))
    }
}
