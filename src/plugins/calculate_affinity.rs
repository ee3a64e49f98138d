//! `calculate-affinity`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct CalculateAffinity;

impl Plugin for CalculateAffinity {
    fn name(&self) -> &'static str {
        "calculate-affinity"
    }
    fn step(&self) -> &'static str {
        "Convert affinity to locality hints"
    }
    fn kind(&self) -> Kind {
        Kind::Transform
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Err(PluginError("calculate-affinity is not implemented yet".into()))
    }
}
