//! `hard-filter-headnode`: removes headnodes unless `filter_headnode` is set and false.

use super::retain;
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterHeadnode;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-headnode", Kind::HardFilter, "Servers which are not headnodes");

impl Plugin for HardFilterHeadnode {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if req.defaults.filter_headnode.switched_off() {
            reasons.skip("Do not filter out headnodes");
            return Ok(servers.to_vec());
        }
        Ok(retain(servers, |id| !req.server(id).headnode.truthy()))
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
