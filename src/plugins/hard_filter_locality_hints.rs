//! `hard-filter-locality-hints`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterLocalityHints;

impl Plugin for HardFilterLocalityHints {
    fn name(&self) -> &'static str {
        "hard-filter-locality-hints"
    }
    fn step(&self) -> &'static str {
        "Servers with requested hard locality considered"
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
        Err(PluginError("hard-filter-locality-hints is not implemented yet".into()))
    }
}
