//! `hard-filter-platform-versions`: TODO (not yet implemented).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterPlatformVersions;

impl Plugin for HardFilterPlatformVersions {
    fn name(&self) -> &'static str {
        "hard-filter-platform-versions"
    }
    fn step(&self) -> &'static str {
        "Servers which meet image manifest and package platform requirements"
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
        Err(PluginError("hard-filter-platform-versions is not implemented yet".into()))
    }
}
