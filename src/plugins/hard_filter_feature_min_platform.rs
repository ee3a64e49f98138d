//! `hard-filter-feature-min-platform`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterFeatureMinPlatform;

impl Plugin for HardFilterFeatureMinPlatform {
    fn name(&self) -> &'static str {
        "hard-filter-feature-min-platform"
    }
    fn step(&self) -> &'static str {
        "Servers which meet various features' platform requirements"
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
        Err(PluginError("hard-filter-feature-min-platform is not implemented yet".into()))
    }
}
