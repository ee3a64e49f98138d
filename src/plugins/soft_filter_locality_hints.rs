//! `soft-filter-locality-hints`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct SoftFilterLocalityHints;

impl Plugin for SoftFilterLocalityHints {
    fn name(&self) -> &'static str {
        "soft-filter-locality-hints"
    }
    fn step(&self) -> &'static str {
        "Servers with requested soft locality considered"
    }
    fn kind(&self) -> Kind {
        Kind::SoftFilter
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Err(PluginError("soft-filter-locality-hints is not implemented yet".into()))
    }
}
