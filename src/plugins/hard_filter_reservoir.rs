//! `hard-filter-reservoir`: keeps servers outside the reservoir (falsy `reservoir`).
//! Production wraps it in `["or", "hard-filter-reservoir", "identity"]`, so reservoir
//! servers are used only when nothing else is left.

use super::retain;
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterReservoir;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-reservoir", Kind::HardFilter, "Servers which are not in the reservoir");

impl Plugin for HardFilterReservoir {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Ok(retain(servers, |id| !req.server(id).reservoir.truthy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn removes_reservoir_servers_silently() {
        let out =
            Fixture::new(vec![with(server("a"), json!({"reservoir": true})), server("b")]).run(&HardFilterReservoir);
        assert_eq!(out.remaining, ["b"]);
        assert!(out.reasons.is_empty());
    }
}
