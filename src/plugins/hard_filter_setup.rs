//! `hard-filter-setup`: keeps servers that have been set up (truthy `setup`).

use super::retain;
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterSetup;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-setup", Kind::HardFilter, "Servers which have been setup");

impl Plugin for HardFilterSetup {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Ok(retain(servers, |id| req.server(id).setup.truthy()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn keeps_truthy_setup_without_reasons() {
        let out = Fixture::new(vec![
            server("a"),
            with(server("b"), json!({"setup": false})),
            with(server("c"), json!({"setup": null})),
            with(server("d"), json!({"setup": "yes"})),
        ])
        .run(&HardFilterSetup);
        assert_eq!(out.remaining, ["a", "d"]);
        assert!(out.reasons.is_empty());
    }
}
