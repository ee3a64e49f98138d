//! `score-uniform-random`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreUniformRandom;

impl Plugin for ScoreUniformRandom {
    fn name(&self) -> &'static str {
        "score-uniform-random"
    }
    fn step(&self) -> &'static str {
        "Increase server scores randomly"
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
        Err(PluginError("score-uniform-random is not implemented yet".into()))
    }
}
