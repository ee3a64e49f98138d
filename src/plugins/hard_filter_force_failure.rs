//! `hard-filter-force-failure`: removes every server when the VM's
//! `internal_metadata.force_designation_failure` is truthy (used to test failure handling).

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::model::METADATA_FORCE_FAILURE;

pub struct HardFilterForceFailure;

static DECLARATION: Declaration = Declaration::new("hard-filter-force-failure", Kind::HardFilter, "Forced failure");

impl ServerFilter for HardFilterForceFailure {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<()>, PluginError> {
        let forced = req.vm.internal_metadata.get(METADATA_FORCE_FAILURE).truthy();
        Ok(if forced { PreFilter::Run(()) } else { PreFilter::PassAll })
    }
    fn filter(&self, _: &Request<'_>, _: &(), _: ServerId) -> Verdict {
        Verdict::fail("force_designation_failure set, failing")
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
