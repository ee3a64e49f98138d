//! `score-current-platform`: favours servers running newer platform images. Each server's
//! `current_platform` stamp (`YYYYMMDDTHHMMSSZ`) is read as a UTC instant and the instants
//! are scaled into increments with `normalize` (newest gets the whole weight, oldest none; a
//! negative weight favours older platforms). There is no skip for weight 0: every server
//! still gets a (zero) reason.
//!
//! A server whose `current_platform` is missing, not a string, or not a valid stamp makes the
//! original throw. Here such a server counts as running the oldest platform among the
//! candidates: no bonus for a positive weight where platforms differ, the same increment as
//! every server where all readable stamps are alike (as `normalize` scores equal values); if
//! no server has a readable stamp, all count as equal.

use super::shared::scoring::normalize;
use crate::engine::parallel::map_parts;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct ScoreCurrentPlatform;

static DECLARATION: Declaration =
    Declaration::new("score-current-platform", Kind::Scorer, "Score servers running newer platforms more highly")
        .writes(&[Data::Scores])
        .list_only();

impl Plugin for ScoreCurrentPlatform {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    /// `normalize` works from the list's oldest and newest platforms.
    fn order_free(&self, _req: &Request<'_>) -> bool {
        true
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if servers.len() <= 1 {
            reasons.skip("One or fewer servers");
            return Ok(servers.to_vec());
        }
        let shared = &*req;
        let stamps: Vec<Option<f64>> = map_parts(servers, |part| {
            part.iter().map(|&id| shared.server(id).current_platform_ms()).collect::<Vec<_>>()
        })
        .concat();
        let oldest = stamps.iter().flatten().copied().reduce(f64::min).unwrap_or(0.0);
        let raws: Vec<(ServerId, f64)> =
            servers.iter().zip(&stamps).map(|(&id, ms)| (id, ms.unwrap_or(oldest))).collect();
        let weight = req.defaults.weight_current_platform.num();
        if req.explaining() {
            for &id in servers {
                let raw = req.server(id).current_platform.to_json();
                req.note_raw(id, raw);
            }
        }
        normalize(req, &raws, weight, reasons)?;
        Ok(servers.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js::Js;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::{json, Value};

    const PLATFORMS: [&str; 6] = [
        "20160305T083338Z",
        "20160304T083338Z",
        "20160301T083338Z",
        "20160212T083338Z",
        "20160205T083338Z",
        "20150305T083338Z",
    ];

    fn servers(platforms: &[&str]) -> Vec<Value> {
        platforms
            .iter()
            .enumerate()
            .map(|(i, p)| with(server(&format!("s{i}")), json!({"current_platform": p})))
            .collect()
    }

    fn run(f: &Fixture) -> Outcome {
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        run_on(&mut req, &ScoreCurrentPlatform)
    }

    fn scores(out: &Outcome) -> Vec<f64> {
        out.state.iter().map(|s| s.score).collect()
    }

    #[test]
    fn newer_platforms_score_higher_to_the_last_bit() {
        let out = run(&Fixture::new(servers(&PLATFORMS)).defaults(json!({"weight_current_platform": 3})));
        assert_eq!(out.remaining, ["s0", "s1", "s2", "s3", "s4", "s5"]);
        assert_eq!(
            scores(&out),
            [3.9999999999999996, 3.9918032786885242, 3.9672131147540983, 3.8196721311475406, 3.762295081967213, 1.0]
        );
        let deltas: Vec<&str> = out.reasons.iter().map(|(_, v)| v).collect();
        assert_eq!(
            deltas,
            [
                "increased score by 3.00 to 4.00",
                "increased score by 2.99 to 3.99",
                "increased score by 2.97 to 3.97",
                "increased score by 2.82 to 3.82",
                "increased score by 2.76 to 3.76",
                "increased score by 0.00 to 1.00"
            ]
        );
    }

    #[test]
    fn negative_weight_favours_older_platforms() {
        let out = run(&Fixture::new(servers(&PLATFORMS)).defaults(json!({"weight_current_platform": -3})));
        assert_eq!(
            scores(&out),
            [1.0, 1.0081967213114753, 1.0327868852459017, 1.180327868852459, 1.2377049180327868, 3.9999999999999996]
        );
        assert_eq!(out.reason("s1"), Some("increased score by 0.01 to 1.01"));
        assert_eq!(out.reason("s4"), Some("increased score by 0.24 to 1.24"));
    }

    #[test]
    fn one_or_no_servers_skip() {
        let skip = [("skip".to_string(), "One or fewer servers".to_string())];
        assert_eq!(run(&Fixture::new(servers(&PLATFORMS[..1]))).reason_list(), skip);
        assert_eq!(run(&Fixture::new(vec![])).reason_list(), skip);
    }

    #[test]
    fn equal_platforms_get_the_raw_weight_even_when_negative() {
        let same = ["20200101T000000Z", "20200101T000000Z"];
        let out = run(&Fixture::new(servers(&same)).defaults(json!({"weight_current_platform": 2})));
        assert_eq!(scores(&out), [3.0, 3.0]);
        let out = run(&Fixture::new(servers(&same)).defaults(json!({"weight_current_platform": -1})));
        assert_eq!(scores(&out), [0.0, 0.0]);
        assert_eq!(out.reason("s0"), Some("increased score by -1.00 to 0.00"));
    }

    #[test]
    fn zero_weight_still_writes_reasons() {
        let out = run(&Fixture::new(servers(&PLATFORMS[..2])).defaults(json!({"weight_current_platform": 0})));
        assert_eq!(out.reason_list().len(), 2);
        assert_eq!(out.reason("s0"), Some("increased score by 0.00 to 1.00"));
    }

    #[test]
    fn unreadable_platforms_count_as_the_oldest() {
        let mut list = servers(&["20160305T083338Z", "20150305T083338Z", "garbage", "20161399T000000Z"]);
        list.push(with(server("none"), json!({"current_platform": null})));
        let out = run(&Fixture::new(list).defaults(json!({"weight_current_platform": 1})));
        assert_eq!(scores(&out), [2.0, 1.0, 1.0, 1.0, 1.0]);
        // None readable: all equal.
        let out = run(&Fixture::new(servers(&["x", "y"])).defaults(json!({"weight_current_platform": 1})));
        assert_eq!(scores(&out), [2.0, 2.0]);
    }

    /// A server's `current_platform` of `value`, read as an instant.
    fn platform_ms(value: &Js) -> Option<f64> {
        let servers: Vec<crate::model::Server> =
            crate::model::from_test_json(&json!([{"uuid": "s", "current_platform": value.to_json()}]));
        servers[0].current_platform_ms()
    }

    #[test]
    fn stamps_read_like_js_dates() {
        assert_eq!(platform_ms(&Js::str("19700101T000001Z")), Some(1000.0));
        assert_eq!(platform_ms(&Js::str("20150230T000000Z")), platform_ms(&Js::str("20150302T000000Z")));
        assert_eq!(platform_ms(&Js::str("20150101T240000Z")), platform_ms(&Js::str("20150102T000000Z")));
        for bad in ["20150101T240001Z", "20150132T000000Z", "2015010T000000Z", "20150101T000000", "２0150101T000000Z"]
        {
            assert_eq!(platform_ms(&Js::str(bad)), None, "{bad}");
        }
        assert_eq!(platform_ms(&Js::Num(20150101.0)), None);
    }
}
