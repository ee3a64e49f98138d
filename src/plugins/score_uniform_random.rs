//! `score-uniform-random`: shuffles the servers uniformly (Fisher–Yates with the request's
//! RNG, so tests and seeded runs are reproducible) and adds position-based increments
//! (`linear`) in that order: every server gets a distinct share of the weight, one the whole
//! weight and one nothing. This breaks ties between otherwise equal servers at random.
//!
//! The deprecated spread `random` forces weight 2; any other spread set switches this
//! scorer off. The original never returns on an empty list; here it is a no-op.

use rand::Rng;

use super::shared::scoring::{self, linear};
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct ScoreUniformRandom;

static DECLARATION: Declaration =
    Declaration::new("score-uniform-random", Kind::Scorer, "Increase server scores randomly").writes(&[Data::Scores]);

impl Plugin for ScoreUniformRandom {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let Some(weight) = weight(req, reasons) else {
            return Ok(servers.to_vec());
        };
        let mut order = servers.to_vec();
        for i in (1..order.len()).rev() {
            let j = req.rng.gen_range(0..=i);
            order.swap(i, j);
        }
        linear(req, &order, weight.abs(), reasons)?;
        Ok(servers.to_vec())
    }

    /// A seeded run shuffles the same list the same way.
    fn unchanged_by(&self, req: &mut Request<'_>, _: &[ServerId], _: &[ServerId], _: &[ServerId]) -> bool {
        req.rng_seeded || weight(req, &mut Reasons::discarding()).is_none()
    }
}

/// The weight in force, or `None` when the scorer skips (the reason written).
fn weight(req: &Request<'_>, reasons: &mut Reasons) -> Option<f64> {
    // Unlike the other scorers, this message says `0`, not `0.00`.
    let configured = &req.defaults.weight_uniform_random;
    scoring::weight_in_force(req, reasons, "random", configured, "Resolved score weight to 0; no changes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, Fixture, Outcome};
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use serde_json::{json, Value};

    fn fixture(defaults: Value) -> Fixture {
        Fixture::new(vec![server("a"), server("b"), server("c")]).defaults(defaults)
    }

    fn run(f: &Fixture, seed: u64) -> Outcome {
        let mut req = f.request();
        req.rng = StdRng::seed_from_u64(seed);
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        run_on(&mut req, &ScoreUniformRandom)
    }

    /// Over many seeds, each server's lowest and highest resulting score.
    fn ranges(f: &Fixture) -> Vec<(f64, f64)> {
        let mut ranges = vec![(f64::INFINITY, f64::NEG_INFINITY); 3];
        for seed in 0..50 {
            let out = run(f, seed);
            assert_eq!(out.remaining, ["a", "b", "c"]);
            for (r, state) in ranges.iter_mut().zip(&out.state) {
                *r = (r.0.min(state.score), r.1.max(state.score));
            }
        }
        ranges
    }

    #[test]
    fn weight_is_shared_out_in_random_order() {
        let f = fixture(json!({"weight_uniform_random": 4}));
        for seed in 0..50 {
            let out = run(&f, seed);
            let mut got: Vec<f64> = out.state.iter().map(|s| s.score).collect();
            got.sort_by(f64::total_cmp);
            assert_eq!(got, [1.0, 3.0, 5.0], "seed {seed}");
        }
        // Every server sometimes gets everything and sometimes nothing.
        assert_eq!(ranges(&f), [(1.0, 5.0); 3]);
    }

    #[test]
    fn random_spread_forces_weight_two() {
        for f in [
            fixture(json!({"weight_uniform_random": 4, "server_spread": "random"})),
            fixture(json!({"weight_uniform_random": 4})).package(json!({"alloc_server_spread": "random"})),
            fixture(json!({"weight_uniform_random": 4, "server_spread": "min-ram"}))
                .package(json!({"alloc_server_spread": "random"})),
        ] {
            assert_eq!(ranges(&f), [(1.0, 3.0); 3]);
        }
    }

    #[test]
    fn other_spreads_and_zero_weight_skip() {
        let out = run(&fixture(json!({"weight_uniform_random": 4, "server_spread": "min-owner"})), 1);
        assert_eq!(out.reason_list(), [("skip".into(), "pkg or default set to spread with: min-owner".into())]);
        let f = fixture(json!({"server_spread": "min-owner"})).package(json!({}));
        assert_eq!(run(&f, 1).reason_list(), [("skip".into(), "pkg or default set to spread with: min-owner".into())]);
        let out = run(&fixture(json!({"weight_uniform_random": 0})), 1);
        assert_eq!(out.reason_list(), [("skip".into(), "Resolved score weight to 0; no changes".into())]);
        assert!(out.state.iter().all(|s| s.score == 1.0));
    }

    #[test]
    fn negative_weight_counts_by_magnitude_and_edges_are_safe() {
        let out = run(&fixture(json!({"weight_uniform_random": -0.5})), 3);
        let mut got: Vec<f64> = out.state.iter().map(|s| s.score).collect();
        got.sort_by(f64::total_cmp);
        assert_eq!(got, [1.0, 1.25, 1.5]);
        let one = Fixture::new(vec![server("a")]);
        assert_eq!(run(&one, 0).reason_list(), [("a".into(), "increased score by 0.50 to 1.50".into())]);
        let none = Fixture::new(vec![]);
        let out = run(&none, 0);
        assert!(out.remaining.is_empty() && out.reasons.is_empty());
    }
}
