//! `hard-filter-force-failure`: removes every server when the VM's
//! `internal_metadata.force_designation_failure` is truthy (used to test failure handling).

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterForceFailure;

static DECLARATION: Declaration = Declaration::new("hard-filter-force-failure", Kind::HardFilter, "Forced failure");

impl Plugin for HardFilterForceFailure {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
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
