//! `hard-filter-headnode`: removes headnodes unless `filter_headnode` is set and false.

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterHeadnode;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-headnode", Kind::HardFilter, "Servers which are not headnodes");

impl ServerFilter for HardFilterHeadnode {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<()>, PluginError> {
        Ok(match req.defaults.filter_headnode.switched_off() {
            true => PreFilter::Skip("Do not filter out headnodes".into()),
            false => PreFilter::Run(()),
        })
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        Verdict::keep_if(!req.server(id).headnode.truthy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn removes_headnodes() {
        let servers = vec![with(server("a"), json!({"headnode": true})), server("b")];
        let out = Fixture::new(servers).run(&HardFilterHeadnode);
        assert_eq!(out.remaining, ["b"]);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn skips_when_disabled() {
        let servers = vec![with(server("a"), json!({"headnode": true})), server("b")];
        let out = Fixture::new(servers).defaults(json!({"filter_headnode": false})).run(&HardFilterHeadnode);
        assert_eq!(out.remaining, ["a", "b"]);
        assert_eq!(out.reason("skip"), Some("Do not filter out headnodes"));
    }
}
