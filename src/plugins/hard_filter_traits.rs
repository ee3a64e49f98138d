//! `hard-filter-traits`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterTraits;

impl Plugin for HardFilterTraits {
    fn name(&self) -> &'static str {
        "hard-filter-traits"
    }
    fn step(&self) -> &'static str {
        "Servers with correct traits"
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
        Err(PluginError("hard-filter-traits is not implemented yet".into()))
    }
}
