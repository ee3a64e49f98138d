//! `score-next-reboot`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct ScoreNextReboot;

impl Plugin for ScoreNextReboot {
    fn name(&self) -> &'static str {
        "score-next-reboot"
    }
    fn step(&self) -> &'static str {
        "Score servers that will not be rebooted soon more highly"
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
        Err(PluginError("score-next-reboot is not implemented yet".into()))
    }
}
