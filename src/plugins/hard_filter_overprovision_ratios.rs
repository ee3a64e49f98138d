//! `hard-filter-overprovision-ratios`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterOverprovisionRatios;

impl Plugin for HardFilterOverprovisionRatios {
    fn name(&self) -> &'static str {
        "hard-filter-overprovision-ratios"
    }
    fn step(&self) -> &'static str {
        "Servers with same overprovision ratios as requested VM"
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
        Err(PluginError("hard-filter-overprovision-ratios is not implemented yet".into()))
    }
}
