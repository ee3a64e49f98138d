//! What the six scorers share: the three ways of turning an order or raw values into score
//! increments (`linear`, `linear_buckets`, `normalize`, `PIPELINE.md` §5), the deprecated
//! spread setting (§5.5), and JS date parsing/formatting for the date-based scorers.
//!
//! Scores are plain doubles accumulated in `req.state(id).score`; the arithmetic below keeps
//! the original's evaluation order so that results match to the last bit (e.g.
//! `3.9999999999999996`). Every increment writes `increased score by X.XX to Y.YY` under the
//! server's key. The original asserts that scores are numbers before adding to them; a NaN
//! score here is an internal error (it cannot happen while all weights are filled in, which
//! `Defaults` guarantees).

use crate::engine::PluginError;
use crate::engine::{Msg, Reasons, Request, ServerId};
use crate::js::Js;

/// The deprecated spread in force: the package's `alloc_server_spread` if truthy, else
/// `defaults.server_spread` (possibly `undefined`).
pub fn spread<'a>(req: &'a Request<'_>) -> &'a Js {
    match req.package() {
        Some(pkg) if pkg.package.alloc_server_spread.truthy() => &pkg.package.alloc_server_spread,
        _ => &req.defaults.server_spread,
    }
}

/// The skip message of a scorer that a spread setting switches off.
pub fn spread_skip(spread: &Js) -> String {
    format!("pkg or default set to spread with: {}", spread.to_js_string())
}

/// The weight of a scorer that one spread value forces to 2: that spread gives 2, no spread
/// gives the configured weight, any other spread skips the scorer (`None`, reason written).
pub fn weight_or_spread(
    req: &Request<'_>,
    reasons: &mut Reasons,
    forcing_spread: &str,
    configured: &Js,
) -> Option<f64> {
    let spread = spread(req);
    if !spread.truthy() {
        return Some(configured.num());
    }
    if spread.as_str() == Some(forcing_spread) {
        return Some(2.0);
    }
    reasons.skip(spread_skip(spread));
    None
}

/// [`weight_or_spread`], also skipping (with `zero_skip` as the reason) a weight of 0 or NaN.
pub fn weight_in_force(
    req: &Request<'_>,
    reasons: &mut Reasons,
    forcing_spread: &str,
    configured: &Js,
    zero_skip: &'static str,
) -> Option<f64> {
    let weight = weight_or_spread(req, reasons, forcing_spread, configured)?;
    if weight == 0.0 || weight.is_nan() {
        reasons.skip(zero_skip);
        return None;
    }
    Some(weight)
}

/// Adds `delta` to the server's score and records the reason (and, when explaining, the
/// value the server was placed by and the weight).
fn bump(req: &mut Request<'_>, id: ServerId, delta: f64, reasons: &mut Reasons, raw: f64, weight: f64) {
    let score = req.state(id).score + delta;
    req.set_score(id, score);
    req.note_score(id, raw, weight, delta);
    if reasons.keeps() {
        reasons.set(req.key(id), Msg::Score { delta, total: score });
    }
}

/// The original's "score must be a number" assertion, as an internal error.
fn check_scores(req: &Request<'_>, ids: impl IntoIterator<Item = ServerId>) -> Result<(), PluginError> {
    for id in ids {
        if req.state(id).score.is_nan() {
            return Err(PluginError(format!("score of server {} is not a number", req.key(id))));
        }
    }
    Ok(())
}

/// Position-based increments: the first server in `order` gets the whole `weight`, the last
/// nothing, the others evenly in between (so tied raw values get different increments).
pub fn linear(
    req: &mut Request<'_>,
    order: &[ServerId],
    weight: f64,
    reasons: &mut Reasons,
) -> Result<(), PluginError> {
    match order.len() {
        0 => {}
        // A single server is not checked for a NaN score, as in the original.
        1 => bump(req, order[0], weight, reasons, 0.0, weight),
        n => {
            check_scores(req, order.iter().copied())?;
            let step = 1.0 / (n - 1) as f64;
            for (i, &id) in order.iter().enumerate() {
                let delta = ((n - 1 - i) as f64 * step) * weight;
                bump(req, id, delta, reasons, i as f64, weight);
            }
        }
    }
    Ok(())
}

/// Like [`linear`], per bucket: every server in bucket `i` gets the same increment. A single
/// bucket gets the whole weight. Returns the buckets flattened.
pub fn linear_buckets(
    req: &mut Request<'_>,
    buckets: &[Vec<ServerId>],
    weight: f64,
    reasons: &mut Reasons,
) -> Result<Vec<ServerId>, PluginError> {
    let b = buckets.len();
    if b == 0 {
        return Ok(Vec::new());
    }
    check_scores(req, buckets.iter().flatten().copied())?;
    // Infinite for a single bucket; the non-finite delta then falls back to the weight.
    let step = 1.0 / (b as f64 - 1.0);
    for (i, bucket) in buckets.iter().enumerate() {
        let mut delta = ((b - 1 - i) as f64 * step) * weight;
        if !delta.is_finite() {
            delta = weight;
        }
        for &id in bucket {
            bump(req, id, delta, reasons, i as f64, weight);
        }
    }
    Ok(buckets.concat())
}

/// Value-based increments: raw values are scaled into `[0, |weight|]` (highest raw gets the
/// most for a positive weight, lowest for a negative one). When all raws are equal every
/// server gets the signed `weight` itself.
pub fn normalize(
    req: &mut Request<'_>,
    raws: &[(ServerId, f64)],
    weight: f64,
    reasons: &mut Reasons,
) -> Result<(), PluginError> {
    if raws.is_empty() {
        return Ok(());
    }
    check_scores(req, raws.iter().map(|&(id, _)| id))?;
    if let Some(&(id, _)) = raws.iter().find(|(_, raw)| raw.is_nan()) {
        return Err(PluginError(format!("raw score of server {} is not a number", req.key(id))));
    }
    let min = raws.iter().fold(f64::INFINITY, |m, &(_, r)| m.min(r));
    let max = raws.iter().fold(f64::NEG_INFINITY, |m, &(_, r)| m.max(r));
    let scale = (1.0 / (max - min)) * weight.abs();
    for &(id, raw) in raws {
        let delta = if min == max {
            weight
        } else {
            let distance = if weight > 0.0 { raw - min } else { max - raw };
            distance * scale
        };
        bump(req, id, delta, reasons, raw, weight);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, Fixture};

    fn fixture(n: usize) -> Fixture {
        Fixture::new((0..n).map(|i| server(&format!("s{i}"))).collect())
    }

    fn reasons_of(reasons: &Reasons) -> Vec<String> {
        reasons.iter().map(|(k, v)| format!("{k}: {v}")).collect()
    }

    #[test]
    fn linear_spreads_the_weight_by_position() {
        let f = fixture(3);
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear(&mut req, &[0, 1, 2], 2.0, &mut reasons).expect("scores");
        assert_eq!(req.states().iter().map(|s| s.score).collect::<Vec<_>>(), [3.0, 2.0, 1.0]);
        assert_eq!(
            reasons_of(&reasons),
            [
                "s0: increased score by 2.00 to 3.00",
                "s1: increased score by 1.00 to 2.00",
                "s2: increased score by 0.00 to 1.00"
            ]
        );

        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear(&mut req, &[2, 0, 1], 3.0, &mut reasons).expect("scores");
        assert_eq!(req.states().iter().map(|s| s.score).collect::<Vec<_>>(), [2.5, 1.0, 4.0]);
        assert_eq!(reasons.get("s0"), Some("increased score by 1.50 to 2.50"));
        // Reasons follow the scoring order.
        assert_eq!(reasons.iter().next().map(|(k, _)| k), Some("s2"));
    }

    #[test]
    fn linear_edge_sizes() {
        let f = fixture(2);
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear(&mut req, &[0, 1], 2.0, &mut reasons).expect("scores");
        assert_eq!((req.state(0).score, req.state(1).score), (3.0, 1.0));

        let mut req = f.request();
        let mut reasons = Reasons::default();
        linear(&mut req, &[1], 2.0, &mut reasons).expect("scores");
        assert_eq!(reasons_of(&reasons), ["s1: increased score by 2.00 to 2.00"]);

        let mut reasons = Reasons::default();
        linear(&mut req, &[], 2.0, &mut reasons).expect("scores");
        assert!(reasons.is_empty());
    }

    #[test]
    fn linear_prints_exact_eighths_rounded_away_from_zero() {
        let f = fixture(9);
        let mut req = f.request();
        let mut reasons = Reasons::default();
        linear(&mut req, &(0..9).collect::<Vec<_>>(), 1.0, &mut reasons).expect("scores");
        let deltas: Vec<&str> = reasons.iter().map(|(_, v)| &v["increased score by ".len()..][..4]).collect();
        assert_eq!(deltas, ["1.00", "0.88", "0.75", "0.63", "0.50", "0.38", "0.25", "0.13", "0.00"]);
    }

    #[test]
    fn linear_refuses_a_nan_score_among_several() {
        let f = fixture(2);
        let mut req = f.request();
        req.set_score(1, f64::NAN);
        let mut reasons = Reasons::default();
        assert!(linear(&mut req, &[0, 1], 1.0, &mut reasons).is_err());
    }

    #[test]
    fn linear_buckets_share_an_increment_per_bucket() {
        let f = fixture(6);
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        let flat = linear_buckets(&mut req, &[vec![0, 1], vec![2, 3], vec![4, 5]], 2.0, &mut reasons).expect("ok");
        assert_eq!(flat, [0, 1, 2, 3, 4, 5]);
        assert_eq!(req.states().iter().map(|s| s.score).collect::<Vec<_>>(), [3.0, 3.0, 2.0, 2.0, 1.0, 1.0]);

        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear_buckets(&mut req, &[vec![0], vec![1], vec![2]], 3.0, &mut reasons).expect("ok");
        assert_eq!(req.states().iter().take(3).map(|s| s.score).collect::<Vec<_>>(), [4.0, 2.5, 1.0]);

        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear_buckets(&mut req, &[vec![3], vec![4]], 2.0, &mut reasons).expect("ok");
        assert_eq!(
            reasons_of(&reasons),
            ["s3: increased score by 2.00 to 3.00", "s4: increased score by 0.00 to 1.00"]
        );
    }

    #[test]
    fn linear_buckets_single_and_empty() {
        let f = fixture(2);
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        let mut reasons = Reasons::default();
        linear_buckets(&mut req, &[vec![0, 1]], 2.0, &mut reasons).expect("ok");
        assert_eq!(
            reasons_of(&reasons),
            ["s0: increased score by 2.00 to 3.00", "s1: increased score by 2.00 to 3.00"]
        );

        let mut reasons = Reasons::default();
        assert!(linear_buckets(&mut req, &[], 2.0, &mut reasons).expect("ok").is_empty());
        assert!(reasons.is_empty());
    }

    #[test]
    fn normalize_scales_raw_values() {
        let f = fixture(3);
        let run = |raws: &[f64], weight: f64| {
            let mut req = f.request();
            req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
            let tuples: Vec<_> = raws.iter().copied().enumerate().collect();
            let mut reasons = Reasons::default();
            normalize(&mut req, &tuples, weight, &mut reasons).expect("ok");
            (req.states().iter().take(raws.len()).map(|s| s.score).collect::<Vec<_>>(), reasons_of(&reasons))
        };
        assert_eq!(run(&[10.0, 10.0, -5.0], 2.0).0, [3.0, 3.0, 1.0]);
        assert_eq!(run(&[10.0, 10.0, -5.0], -2.0).0, [1.0, 1.0, 3.0]);
        let (scores, reasons) = run(&[2.0, 1.5, 0.0], 3.0);
        assert_eq!(scores, [4.0, 3.25, 1.0]);
        assert_eq!(reasons[1], "s1: increased score by 2.25 to 3.25");
        // All equal: everyone gets the signed weight.
        assert_eq!(run(&[1.0, 1.0], 2.0).0, [3.0, 3.0]);
        assert_eq!(run(&[1.0, 1.0], -2.0).0, [-1.0, -1.0]);
        // Weight 0 still writes a reason per server.
        assert_eq!(
            run(&[1.0, 2.0], 0.0).1,
            ["s0: increased score by 0.00 to 1.00", "s1: increased score by 0.00 to 1.00"]
        );
        assert!(run(&[], 2.0).1.is_empty());
    }

    #[test]
    fn normalize_refuses_nan_raws() {
        let f = fixture(2);
        let mut req = f.request();
        let mut reasons = Reasons::default();
        assert!(normalize(&mut req, &[(0, 1.0), (1, f64::NAN)], 1.0, &mut reasons).is_err());
    }

    #[test]
    fn spread_prefers_a_truthy_package_value() {
        let f = fixture(1).defaults(serde_json::json!({"server_spread": "max-ram"}));
        assert_eq!(spread(&f.request()), &Js::str("max-ram"));
        let f = f.package(serde_json::json!({"alloc_server_spread": ""}));
        assert_eq!(spread(&f.request()), &Js::str("max-ram"));
        let f = f.package(serde_json::json!({"alloc_server_spread": "min-owner"}));
        assert_eq!(spread(&f.request()), &Js::str("min-owner"));
        assert_eq!(spread(&fixture(1).request()), &Js::Undefined);
        assert_eq!(spread_skip(&Js::str("random")), "pkg or default set to spread with: random");
    }
}
