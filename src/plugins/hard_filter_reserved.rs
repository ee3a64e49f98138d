//! `hard-filter-reserved`: keeps servers an operator has not reserved (falsy `reserved`).

use crate::engine::{Declaration, Kind, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterReserved;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-reserved", Kind::HardFilter, "Servers which are not reserved");

impl ServerFilter for HardFilterReserved {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        Verdict::keep_if(!req.server(id).reserved.truthy())
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
