//! `hard-filter-reservoir`: keeps servers outside the reservoir (falsy `reservoir`).
//! Production wraps it in `["or", "hard-filter-reservoir", "identity"]`, so reservoir
//! servers are used only when nothing else is left.

use crate::engine::{Declaration, Kind, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterReservoir;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-reservoir", Kind::HardFilter, "Servers which are not in the reservoir");

impl ServerFilter for HardFilterReservoir {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        Verdict::keep_if(!req.server(id).reservoir.truthy())
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
