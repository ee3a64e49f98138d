//! `score-current-platform`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreCurrentPlatform;

impl Plugin for ScoreCurrentPlatform {
    fn name(&self) -> &'static str {
        "score-current-platform"
    }
    fn step(&self) -> &'static str {
        "Score servers running newer platforms more highly"
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
        Err(PluginError("score-current-platform is not implemented yet".into()))
    }
}
