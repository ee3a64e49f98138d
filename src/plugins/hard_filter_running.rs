//! `hard-filter-running`: keeps servers whose `status` is exactly `running`.

use crate::engine::{Declaration, Kind, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterRunning;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-running", Kind::HardFilter, "Servers which are currently running");

impl ServerFilter for HardFilterRunning {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        let status = &req.server(id).status;
        match status.as_str() {
            Some("running") => Verdict::Keep,
            _ => Verdict::fail(format!("Server has status: {}", status.to_js_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn removes_servers_not_running_and_says_their_status() {
        let out = Fixture::new(vec![
            server("a"),
            with(server("b"), json!({"status": "unknown"})),
            with(server("c"), json!({"status": null})),
        ])
        .run(&HardFilterRunning);
        assert_eq!(out.remaining, ["a"]);
        assert_eq!(
            out.reason_list(),
            [("b".into(), "Server has status: unknown".into()), ("c".into(), "Server has status: undefined".into())]
        );
    }
}
