//! `calculate-server-unreserved`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct CalculateServerUnreserved;

impl Plugin for CalculateServerUnreserved {
    fn name(&self) -> &'static str {
        "calculate-server-unreserved"
    }
    fn step(&self) -> &'static str {
        "Calculate unreserved resources on each server"
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
        Err(PluginError("calculate-server-unreserved is not implemented yet".into()))
    }
}
