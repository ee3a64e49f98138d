//! `score-unreserved-ram`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreUnreservedRam;

impl Plugin for ScoreUnreservedRam {
    fn name(&self) -> &'static str {
        "score-unreserved-ram"
    }
    fn step(&self) -> &'static str {
        "Score servers based on unreserved RAM"
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
        Err(PluginError("score-unreserved-ram is not implemented yet".into()))
    }
}
