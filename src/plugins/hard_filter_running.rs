//! `hard-filter-running`: keeps servers whose `status` is exactly `running`.

use crate::engine::parallel::sift;
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterRunning;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-running", Kind::HardFilter, "Servers which are currently running");

impl Plugin for HardFilterRunning {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let req = &*req;
        let (kept, removed) = sift(servers, |id| {
            let status = &req.server(id).status;
            (status.as_str() != Some("running")).then_some(status)
        });
        for (id, status) in removed {
            reasons.set(req.key(id), format!("Server has status: {}", status.to_js_string()));
        }
        Ok(kept)
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
