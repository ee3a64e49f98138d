//! `hard-filter-min-ram`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterMinRam;

impl Plugin for HardFilterMinRam {
    fn name(&self) -> &'static str {
        "hard-filter-min-ram"
    }
    fn step(&self) -> &'static str {
        "Servers with enough unreserved RAM"
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
        Err(PluginError("hard-filter-min-ram is not implemented yet".into()))
    }
}
