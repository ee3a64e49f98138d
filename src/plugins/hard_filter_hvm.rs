//! `hard-filter-hvm`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterHvm;

impl Plugin for HardFilterHvm {
    fn name(&self) -> &'static str {
        "hard-filter-hvm"
    }
    fn step(&self) -> &'static str {
        "Servers which are capable of requested virtualization"
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
        Err(PluginError("hard-filter-hvm is not implemented yet".into()))
    }
}
