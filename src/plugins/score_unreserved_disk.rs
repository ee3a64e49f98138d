//! `score-unreserved-disk`: ranks servers by unreserved disk and adds position-based
//! increments (`linear`). A positive weight favours servers with *less* unreserved disk
//! (packing), a negative one emptier servers.
//!
//! No deprecated spread maps to disk: any spread set switches this scorer off. Only an
//! exact 0 weight skips (as in the original; `Defaults` never lets a NaN weight through).

use super::score_unreserved_ram::{order_holds, score_by_unreserved};
use super::shared::scoring;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct ScoreUnreservedDisk;

static DECLARATION: Declaration =
    Declaration::new("score-unreserved-disk", Kind::Scorer, "Score servers based on unreserved disk")
        .reads(&[Data::Unreserved])
        .writes(&[Data::Scores]);

impl Plugin for ScoreUnreservedDisk {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        match weight(req) {
            Ok(weight) => score_by_unreserved(req, servers, weight, |u| u.disk_mib, reasons)?,
            Err(skip) => reasons.skip(skip),
        }
        Ok(servers.to_vec())
    }

    fn unchanged_by(&self, req: &mut Request<'_>, servers: &[ServerId], _: &[ServerId], changed: &[ServerId]) -> bool {
        match weight(req) {
            Ok(weight) => order_holds(req, servers, weight, |u| u.disk_mib, changed),
            Err(_) => true,
        }
    }
}

/// The weight in force, or why the scorer skips.
fn weight(req: &Request<'_>) -> Result<f64, String> {
    let spread = scoring::spread(req);
    if spread.truthy() {
        return Err(scoring::spread_skip(spread));
    }
    match req.defaults.weight_unreserved_disk.num() {
        0.0 => Err("Resolved score weight to 0.00; no changes".into()),
        weight => Ok(weight),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::plugins::testing::{run_on, server, Fixture, Outcome};
    use serde_json::json;

    const GIB: f64 = 1024.0;

    fn fixture(defaults: serde_json::Value) -> Fixture {
        Fixture::new(vec![server("s256"), server("s768"), server("s512")]).defaults(defaults)
    }

    /// Runs with scores starting at 1 and the given unreserved disk values.
    fn run(f: &Fixture, disk: &[f64]) -> Outcome {
        let mut req = f.request();
        for (state, &d) in req.states_mut().iter_mut().zip(disk) {
            state.score = 1.0;
            state.unreserved = Some(Unreserved { cpu_pct: 100.0, ram_mib: 1000.0, disk_mib: d });
        }
        run_on(&mut req, &ScoreUnreservedDisk)
    }

    fn scores(out: &Outcome) -> Vec<f64> {
        out.state.iter().map(|s| s.score).collect()
    }

    const DISK: [f64; 3] = [256.0 * GIB, 768.0 * GIB, 512.0 * GIB];

    #[test]
    fn positive_weight_favours_less_unreserved_disk() {
        let out = run(&fixture(json!({"weight_unreserved_disk": 4})), &DISK);
        assert_eq!(out.remaining, ["s256", "s768", "s512"]);
        assert_eq!(scores(&out), [5.0, 1.0, 3.0]);
        assert_eq!(
            out.reason_list(),
            [
                ("s256".into(), "increased score by 4.00 to 5.00".into()),
                ("s512".into(), "increased score by 2.00 to 3.00".into()),
                ("s768".into(), "increased score by 0.00 to 1.00".into()),
            ]
        );
    }

    #[test]
    fn negative_weight_favours_more_unreserved_disk() {
        let out = run(&fixture(json!({"weight_unreserved_disk": -4})), &DISK);
        assert_eq!(scores(&out), [1.0, 5.0, 3.0]);
        assert_eq!(out.reason("s768"), Some("increased score by 4.00 to 5.00"));
    }

    #[test]
    fn zero_weight_skips() {
        let out = run(&fixture(json!({"weight_unreserved_disk": "0"})), &DISK);
        assert_eq!(out.reason_list(), [("skip".into(), "Resolved score weight to 0.00; no changes".into())]);
        assert_eq!(scores(&out), [1.0, 1.0, 1.0]);
    }

    #[test]
    fn any_spread_skips() {
        let out = run(&fixture(json!({"weight_unreserved_disk": 4, "server_spread": "min-owner"})), &DISK);
        assert_eq!(out.reason_list(), [("skip".into(), "pkg or default set to spread with: min-owner".into())]);
        let f = fixture(json!({"weight_unreserved_disk": 4})).package(json!({"alloc_server_spread": "min-ram"}));
        let out = run(&f, &DISK);
        assert_eq!(out.reason_list(), [("skip".into(), "pkg or default set to spread with: min-ram".into())]);
        assert_eq!(scores(&out), [1.0, 1.0, 1.0]);
    }

    #[test]
    fn one_server_and_none() {
        let f = Fixture::new(vec![server("s256")]).defaults(json!({"weight_unreserved_disk": 4}));
        let out = run(&f, &DISK[..1]);
        assert_eq!(out.reason_list(), [("s256".into(), "increased score by 4.00 to 5.00".into())]);
        let f = Fixture::new(vec![]).defaults(json!({"weight_unreserved_disk": 4}));
        assert!(run(&f, &[]).reasons.is_empty());
    }

    #[test]
    fn unknown_disk_compares_as_equal_to_everything() {
        // A NaN unreserved disk (missing disk field) makes every comparison with it "equal";
        // Node sorts [NaN, 10, 5] by `a - b` into [NaN, 5, 10].
        let out = run(&fixture(json!({"weight_unreserved_disk": 1})), &[f64::NAN, 10.0, 5.0]);
        assert_eq!(scores(&out), [2.0, 1.0, 1.5]);
    }
}
