//! `score-unreserved-ram`: ranks servers by unreserved RAM and adds position-based
//! increments (`linear`). A positive weight favours servers with *less* unreserved RAM
//! (packing); a negative one spreads VMs onto emptier servers.
//!
//! The deprecated spread setting overrides the weight: `min-ram` means +2, `max-ram` −2, any
//! other value set (even `null` or `""`) hands scoring to another plugin and this one skips.
//! Servers whose unreserved RAM was never calculated compare like the original's `undefined`
//! (every difference with them is NaN, i.e. "equal" to the sort).

use super::shared::scoring::{self, linear};
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId, Unreserved};
use crate::js::Js;

pub struct ScoreUnreservedRam;

static DECLARATION: Declaration =
    Declaration::new("score-unreserved-ram", Kind::Scorer, "Score servers based on unreserved RAM")
        .reads(&[Data::Unreserved])
        .writes(&[Data::Scores]);

impl Plugin for ScoreUnreservedRam {
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
            Ok(weight) => score_by_unreserved(req, servers, weight, |u| u.ram_mib, reasons)?,
            Err(skip) => reasons.skip(skip),
        }
        Ok(servers.to_vec())
    }

    fn unchanged_by(&self, req: &mut Request<'_>, servers: &[ServerId], _: &[ServerId], changed: &[ServerId]) -> bool {
        match weight(req) {
            Ok(weight) => order_holds(req, servers, weight, |u| u.ram_mib, changed),
            Err(_) => true,
        }
    }
}

/// The weight in force, or why the scorer skips.
fn weight(req: &Request<'_>) -> Result<f64, &'static str> {
    let weight = match scoring::spread(req) {
        Js::Undefined => req.defaults.weight_unreserved_ram.num(),
        Js::Str(s) if &**s == "min-ram" => 2.0,
        Js::Str(s) if &**s == "max-ram" => -2.0,
        _ => return Err("pkg or default set to score with other plugin"),
    };
    if weight == 0.0 || weight.is_nan() {
        return Err("Resolved score weight to 0.00; no changes");
    }
    Ok(weight)
}

/// For [`Plugin::unchanged_by`]: whether [`score_by_unreserved`]'s sort of `servers` keeps its
/// order (and so every increment) now that only `changed` servers' unreserved values differ.
pub(crate) fn order_holds(
    req: &mut Request<'_>,
    servers: &[ServerId],
    weight: f64,
    value: fn(&Unreserved) -> f64,
    changed: &[ServerId],
) -> bool {
    req.kept_order_holds(servers, changed, weight, |req, id| unreserved_of(req, id, value))
}

/// A server's unreserved value, or NaN (as the original's `undefined`) before it is known.
fn unreserved_of(req: &Request<'_>, id: ServerId, value: fn(&Unreserved) -> f64) -> f64 {
    req.state(id).unreserved.as_ref().map_or(f64::NAN, value)
}

/// Sorts a copy of `servers` by `weight × (a − b)` of an unreserved value (ascending, as the
/// original's comparator) and scores that order with `linear` and `|weight|`. Shared with
/// `score-unreserved-disk`.
pub(crate) fn score_by_unreserved(
    req: &mut Request<'_>,
    servers: &[ServerId],
    weight: f64,
    value: fn(&Unreserved) -> f64,
    reasons: &mut Reasons,
) -> Result<(), PluginError> {
    let mib: Vec<f64> = servers.iter().map(|&id| unreserved_of(req, id, value)).collect();
    if req.explaining() {
        for (&id, &mib) in servers.iter().zip(&mib) {
            req.note_raw(id, crate::js::num_to_json(mib));
        }
    }
    let mut order = servers.to_vec();
    req.sort_by_scaled(&mut order, &mib, weight);
    linear(req, &order, weight.abs(), reasons)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, Fixture, Outcome};
    use serde_json::{json, Value};

    fn fixture() -> Fixture {
        Fixture::new(vec![server("s256"), server("s768"), server("s512")])
    }

    /// Runs with scores starting at 1 and the given unreserved RAM values.
    fn run(f: &Fixture, ram: &[f64]) -> Outcome {
        let mut req = f.request();
        for (state, &r) in req.states_mut().iter_mut().zip(ram) {
            state.score = 1.0;
            state.unreserved = Some(Unreserved { cpu_pct: 100.0, ram_mib: r, disk_mib: 1000.0 });
        }
        run_on(&mut req, &ScoreUnreservedRam)
    }

    fn scores(out: &Outcome) -> Vec<f64> {
        out.state.iter().map(|s| s.score).collect()
    }

    fn with_defaults(defaults: Value) -> Fixture {
        fixture().defaults(defaults)
    }

    #[test]
    fn positive_weight_favours_less_unreserved_ram() {
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4})), &[256.0, 768.0, 512.0]);
        assert_eq!(out.remaining, ["s256", "s768", "s512"]);
        assert_eq!(scores(&out), [5.0, 1.0, 3.0]);
        assert_eq!(out.reason("s256"), Some("increased score by 4.00 to 5.00"));
        assert_eq!(out.reason("s768"), Some("increased score by 0.00 to 1.00"));
        assert_eq!(out.reason("s512"), Some("increased score by 2.00 to 3.00"));
    }

    #[test]
    fn negative_weight_favours_more_unreserved_ram() {
        let out = run(&with_defaults(json!({"weight_unreserved_ram": "-4"})), &[256.0, 768.0, 512.0]);
        assert_eq!(scores(&out), [1.0, 5.0, 3.0]);
    }

    #[test]
    fn zero_weight_skips() {
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 0})), &[256.0, 768.0, 512.0]);
        assert_eq!(out.reason_list(), [("skip".into(), "Resolved score weight to 0.00; no changes".into())]);
        assert_eq!(scores(&out), [1.0, 1.0, 1.0]);
    }

    #[test]
    fn spread_overrides_the_weight() {
        let ram = [256.0, 768.0, 512.0];
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": "min-ram"})), &ram);
        assert_eq!(scores(&out), [3.0, 1.0, 2.0]);
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": "max-ram"})), &ram);
        assert_eq!(scores(&out), [1.0, 3.0, 2.0]);
        // The package's spread wins over the default one.
        let f = with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": "max-ram"}))
            .package(json!({"alloc_server_spread": "min-ram"}));
        assert_eq!(scores(&run(&f, &ram)), [3.0, 1.0, 2.0]);
        let f = with_defaults(json!({"weight_unreserved_ram": 4})).package(json!({"alloc_server_spread": "min-ram"}));
        assert_eq!(scores(&run(&f, &ram)), [3.0, 1.0, 2.0]);
    }

    #[test]
    fn other_spreads_skip() {
        let ram = [256.0, 768.0, 512.0];
        let skip = [("skip".to_string(), "pkg or default set to score with other plugin".to_string())];
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": "min-owner"})), &ram);
        assert_eq!(out.reason_list(), skip);
        let f = with_defaults(json!({"weight_unreserved_ram": 4})).package(json!({"alloc_server_spread": "random"}));
        assert_eq!(run(&f, &ram).reason_list(), skip);
        // Even a falsy spread that is not undefined hands over to another plugin.
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": false})), &ram);
        assert_eq!(out.reason_list(), skip);
        // An empty one in the config is metadata left unset, as CNAPI read it: no spread.
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 4, "server_spread": ""})), &ram);
        assert_eq!(scores(&out), [5.0, 1.0, 3.0]);
    }

    #[test]
    fn ties_get_different_increments_by_position() {
        let out = run(&with_defaults(json!({"weight_unreserved_ram": 2})), &[500.0, 500.0, 100.0]);
        assert_eq!(scores(&out), [2.0, 1.0, 3.0]);
    }

    #[test]
    fn one_server_gets_the_whole_weight_and_none_nothing() {
        let f = Fixture::new(vec![server("s256")]).defaults(json!({"weight_unreserved_ram": 4}));
        let out = run(&f, &[256.0]);
        assert_eq!(out.reason_list(), [("s256".into(), "increased score by 4.00 to 5.00".into())]);
        let f = Fixture::new(vec![]).defaults(json!({"weight_unreserved_ram": 4}));
        let out = run(&f, &[]);
        assert!(out.reasons.is_empty() && out.remaining.is_empty());
    }

    #[test]
    fn production_weight_packs_the_fuller_server() {
        // CNAPI's default weight 2: the server with less unreserved RAM gets the +2.
        let f = Fixture::new(vec![server("big"), server("small")]);
        let mut req = f.request();
        req.set_unreserved(0, Unreserved { cpu_pct: 0.0, ram_mib: 111_411.0, disk_mib: 0.0 });
        req.set_unreserved(1, Unreserved { cpu_pct: 0.0, ram_mib: 55_705.0, disk_mib: 0.0 });
        let out = run_on(&mut req, &ScoreUnreservedRam);
        assert_eq!(out.reason("small"), Some("increased score by 2.00 to 2.00"));
        assert_eq!(out.reason("big"), Some("increased score by 0.00 to 0.00"));
    }
}
