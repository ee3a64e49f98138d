//! `score-unreserved-disk`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreUnreservedDisk;

impl Plugin for ScoreUnreservedDisk {
    fn name(&self) -> &'static str {
        "score-unreserved-disk"
    }
    fn step(&self) -> &'static str {
        "Score servers based on unreserved disk"
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
        Err(PluginError("score-unreserved-disk is not implemented yet".into()))
    }
}
