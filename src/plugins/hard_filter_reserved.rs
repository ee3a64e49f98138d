//! `hard-filter-reserved`: keeps servers an operator has not reserved (falsy `reserved`).

use super::retain;
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterReserved;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-reserved", Kind::HardFilter, "Servers which are not reserved");

impl Plugin for HardFilterReserved {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Ok(retain(servers, |id| !req.server(id).reserved.truthy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn removes_reserved_servers_silently() {
        let out =
            Fixture::new(vec![with(server("a"), json!({"reserved": true})), server("b")]).run(&HardFilterReserved);
        assert_eq!(out.remaining, ["b"]);
        assert!(out.reasons.is_empty());
    }
}
