//! `hard-filter-setup`: keeps servers that have been set up (truthy `setup`).

use crate::engine::{Declaration, Kind, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterSetup;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-setup", Kind::HardFilter, "Servers which have been setup");

impl ServerFilter for HardFilterSetup {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        Verdict::keep_if(req.server(id).setup.truthy())
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
