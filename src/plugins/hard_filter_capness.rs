//! `hard-filter-capness`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterCapness;

impl Plugin for HardFilterCapness {
    fn name(&self) -> &'static str {
        "hard-filter-capness"
    }
    fn step(&self) -> &'static str {
        "Servers which have same existence of cpu_cap as package"
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
        Err(PluginError("hard-filter-capness is not implemented yet".into()))
    }
}
