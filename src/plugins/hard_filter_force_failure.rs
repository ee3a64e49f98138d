//! `hard-filter-force-failure`: removes every server when the VM's
//! `internal_metadata.force_designation_failure` is truthy (used to test failure handling).

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct HardFilterForceFailure;

impl Plugin for HardFilterForceFailure {
    fn name(&self) -> &'static str {
        "hard-filter-force-failure"
    }
    fn step(&self) -> &'static str {
        "Forced failure"
    }
    fn kind(&self) -> Kind {
        Kind::HardFilter
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if !req.vm.internal_metadata.get("force_designation_failure").truthy() {
            return Ok(servers.to_vec());
        }
        for &id in servers {
            reasons.set(req.key(id), "force_designation_failure set, failing");
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, Fixture};
    use serde_json::json;

    #[test]
    fn fails_everything_when_asked() {
        let f = Fixture::new(vec![server("a"), server("b")])
            .vm(json!({"brand": "joyent", "internal_metadata": {"force_designation_failure": "false"}}));
        let out = f.run(&HardFilterForceFailure);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("b"), Some("force_designation_failure set, failing"));
    }

    #[test]
    fn passes_everything_otherwise() {
        let f = Fixture::new(vec![server("a")]).vm(json!({"internal_metadata": {"force_designation_failure": false}}));
        let out = f.run(&HardFilterForceFailure);
        assert_eq!(out.remaining, ["a"]);
        assert!(out.reasons.is_empty());
    }
}
