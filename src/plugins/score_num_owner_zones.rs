//! `score-num-owner-zones`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreNumOwnerZones;

impl Plugin for ScoreNumOwnerZones {
    fn name(&self) -> &'static str {
        "score-num-owner-zones"
    }
    fn step(&self) -> &'static str {
        "Score servers based on number of zones belonging to owner"
    }
    fn kind(&self) -> Kind {
        Kind::Scorer
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Err(PluginError("score-num-owner-zones is not implemented yet".into()))
    }
}
