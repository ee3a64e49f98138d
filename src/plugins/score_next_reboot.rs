//! `score-next-reboot`: favours servers that will not be rebooted soon. Servers are put in
//! buckets and scored per bucket with `linear_buckets`: first every server with no usable
//! scheduled reboot, then the others latest `next_reboot` first, grouped by week (a bucket
//! holds the reboots within 7 days after its first member's). A negative weight reverses
//! the bucket order. There is no skip for weight 0.
//!
//! The dates are ISO strings compared as strings, as in the original, including the week
//! limit (`YYYY-MM-DDTHH:MM:SS.sssZ` of 7 days before the bucket's first reboot). The
//! original sorts with a broken comparator; this implements the intended descending order
//! (the recorded cases were made that way). Odd values (numbers, non-ISO strings) are
//! treated as the original treats them; where it would throw (an unreadable date becomes the
//! latest reboot or a bucket's first member), servers with unreadable dates count as
//! unscheduled instead. Only ISO date strings are read as dates; one without an offset is
//! read as UTC (the original uses the process's time zone; Triton nodes run UTC).

use super::shared::scoring::linear_buckets;
use crate::engine::parallel::map_servers;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::date::{parse_js_date, to_iso_string, WEEK_MS};
use crate::js::sort::js_sort_by;
use std::borrow::Cow;

use crate::js::{js_gt, js_lt, str_cmp, Js};
use crate::model::RebootKey;

pub struct ScoreNextReboot;

/// `new Date(0).toISOString()`: where the search for the latest reboot starts.
const EPOCH_ISO: &str = "1970-01-01T00:00:00.000Z";

static DECLARATION: Declaration =
    Declaration::new("score-next-reboot", Kind::Scorer, "Score servers that will not be rebooted soon more highly")
        .writes(&[Data::Scores])
        .list_only();

impl Plugin for ScoreNextReboot {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    /// Buckets are made of the dates in order: when every scheduled date compares as a
    /// string, the order is the one of the strings whatever the list's, and each bucket's
    /// servers get its one increment. Other values sort the JS way, order and all.
    fn order_free(&self, req: &Request<'_>) -> bool {
        req.servers.iter().all(|s| !s.next_reboot.truthy() || primitive(&s.next_reboot).as_str().is_some())
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if servers.len() < 2 {
            reasons.skip("One or fewer servers");
            return Ok(servers.to_vec());
        }
        let mut buckets = buckets(req, servers);
        if req.explaining() {
            for &id in servers {
                let raw = req.server(id).next_reboot.to_json();
                req.note_raw(id, raw);
            }
        }
        let weight = req.defaults.weight_next_reboot.num();
        if weight < 0.0 {
            buckets.reverse();
        }
        linear_buckets(req, &buckets, weight.abs(), reasons)?;
        Ok(servers.to_vec())
    }
}

/// `new Date(value)` in milliseconds (NaN for an invalid date). Only the ISO forms are read
/// from strings (the JS engine also accepts other formats).
fn date_ms(value: &Js) -> f64 {
    match value {
        Js::Str(text) => parse_js_date(text).unwrap_or(f64::NAN),
        // A time value beyond the Date range is invalid; fractions are dropped.
        Js::Num(n) if n.abs() <= 8.64e15 => n.trunc() + 0.0,
        Js::Num(_) | Js::Undefined => f64::NAN,
        other => other.num(),
    }
}

/// `new Date(new Date(value) - WEEK).toISOString()`; `None` where JS throws.
fn week_before(value: &Js) -> Option<String> {
    to_iso_string(date_ms(value) - WEEK_MS)
}

/// Objects take part in comparisons as their string form (JS `ToPrimitive`).
fn primitive(value: &Js) -> Cow<'_, Js> {
    match value {
        Js::Arr(_) | Js::Obj(_) => Cow::Owned(Js::Str(value.to_js_string().into())),
        other => Cow::Borrowed(other),
    }
}

/// The buckets, highest-scoring first for a positive weight.
///
/// Follows the original step by step, including its quirks (a non-date `next_reboot` that
/// is truthy counts as scheduled and compares the JS way; when no reboot sorts after the
/// epoch an empty bucket is made, which still takes a share). Where the original would
/// throw (an unreadable date becomes the latest reboot or a bucket's anchor), the servers
/// with unreadable dates are counted as unscheduled instead.
fn buckets(req: &Request<'_>, servers: &[ServerId]) -> Vec<Vec<ServerId>> {
    dated_buckets(req, servers)
        .or_else(|| bucket(req, servers, false))
        .or_else(|| bucket(req, servers, true))
        .unwrap_or_else(|| vec![servers.to_vec()])
}

/// How a server's `next_reboot` is ordered: unscheduled (none, or before the last boot), a
/// date in the form `toISOString` writes (years 1971 to 9999, the week before it in that
/// form too), or anything else.
fn reboot_key(server: &crate::model::Server<'_>) -> RebootKey {
    let next = primitive(&server.next_reboot);
    if is_unscheduled(&next, server) {
        return RebootKey::Unscheduled;
    }
    let Some(text) = next.as_str() else { return RebootKey::Unusual };
    let ms = parse_js_date(text).filter(|&ms| ms >= FIRST_DATED_MS);
    match ms.and_then(|ms| to_iso_string(ms).filter(|iso| iso == text).map(|_| ms as i64)) {
        Some(ms) => RebootKey::At(ms),
        None => RebootKey::Unusual,
    }
}

/// No reboot, or one before the last boot (stale: as good as none).
fn is_unscheduled(next: &Js, server: &crate::model::Server<'_>) -> bool {
    !next.truthy() || js_lt(next, &primitive(&server.last_boot))
}

/// 1971-01-01T00:00:00.000Z: from then on, a date and the week before it are written with
/// four-digit years, so that their strings compare as their times do.
const FIRST_DATED_MS: f64 = 31_536_000_000.0;

/// [`bucket`] when every scheduled reboot is such a date (the usual case): the strings'
/// order is the times', so the same buckets come from integers, each server's read once.
/// `None` when some date is not of that form.
fn dated_buckets(req: &Request<'_>, servers: &[ServerId]) -> Option<Vec<Vec<ServerId>>> {
    let keys = map_servers(servers, |id| req.server(id).reboot_key(reboot_key));
    let mut unscheduled = Vec::new();
    let mut scheduled: Vec<(i64, ServerId)> = Vec::new();
    for (&id, key) in servers.iter().zip(keys) {
        match key {
            RebootKey::Unscheduled => unscheduled.push(id),
            RebootKey::At(ms) => scheduled.push((ms, id)),
            RebootKey::Unusual => return None,
        }
    }
    let mut buckets = Vec::new();
    if !unscheduled.is_empty() {
        buckets.push(unscheduled);
    }
    // As the general path: ascending (stable), then reversed.
    scheduled.sort_by_key(|&(ms, _)| ms);
    scheduled.reverse();
    let week = WEEK_MS as i64;
    let mut limit = scheduled.first().map_or(0, |&(latest, _)| latest - week);
    let mut bucket = Vec::new();
    for (ms, id) in scheduled {
        if ms > limit {
            bucket.push(id);
        } else {
            buckets.push(std::mem::take(&mut bucket));
            bucket.push(id);
            limit = ms - week;
        }
    }
    if !bucket.is_empty() {
        buckets.push(bucket);
    }
    Some(buckets)
}

/// One bucketing pass; `None` where the original throws. With `strict`, only dates that can
/// be read and moved back a week count as scheduled, so it always succeeds.
fn bucket(req: &Request<'_>, servers: &[ServerId], strict: bool) -> Option<Vec<Vec<ServerId>>> {
    let mut unscheduled = Vec::new();
    let mut scheduled: Vec<(ServerId, Cow<'_, Js>)> = Vec::new();
    let epoch = Js::str(EPOCH_ISO);
    let mut latest: &Js = &epoch;
    let dates = map_servers(servers, |id| {
        let server = req.server(id);
        let next = primitive(&server.next_reboot);
        (!is_unscheduled(&next, server) && (!strict || week_before(&next).is_some())).then_some(next)
    });
    for (&id, next) in servers.iter().zip(dates) {
        match next {
            Some(next) => scheduled.push((id, next)),
            None => unscheduled.push(id),
        }
    }
    for (_, next) in &scheduled {
        if js_lt(latest, next) {
            latest = next;
        }
    }

    let mut buckets = Vec::new();
    if !unscheduled.is_empty() {
        buckets.push(unscheduled);
    }
    // The intended order: ascending by the JS relational operators (as the engine sorts),
    // then reversed, so latest first.
    let mut order: Vec<usize> = (0..scheduled.len()).collect();
    let strings: Option<Vec<&str>> = scheduled.iter().map(|(_, next)| next.as_str()).collect();
    match strings {
        // Strings compare consistently, so the engine's sort gives the one stable order.
        Some(texts) => order.sort_by(|&a, &b| str_cmp(texts[a], texts[b])),
        None => js_sort_by(&mut order, |&a, &b| {
            let (x, y) = (&*scheduled[a].1, &*scheduled[b].1);
            if js_gt(x, y) {
                1.0
            } else if js_lt(x, y) {
                -1.0
            } else {
                0.0
            }
        }),
    }
    order.reverse();

    let mut limit = Js::Str(week_before(latest)?.into());
    let mut bucket = Vec::new();
    for i in order {
        let (id, next) = &scheduled[i];
        if js_gt(next, &limit) {
            bucket.push(*id);
        } else {
            buckets.push(std::mem::take(&mut bucket));
            bucket.push(*id);
            limit = Js::Str(week_before(next)?.into());
        }
    }
    if !bucket.is_empty() {
        buckets.push(bucket);
    }
    Some(buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::{json, Value};

    const DAY_MS: f64 = 86_400_000.0;
    /// A fixed "now" for the relative dates.
    const NOW_MS: f64 = 1_461_160_916_447.0;

    fn day(offset: f64) -> String {
        to_iso_string(NOW_MS + offset * DAY_MS).expect("valid date")
    }

    fn at(uuid: &str, next: Option<f64>, last: Option<f64>) -> Value {
        let mut changes = json!({});
        if let Some(n) = next {
            changes["next_reboot"] = json!(day(n));
        }
        if let Some(l) = last {
            changes["last_boot"] = json!(day(l));
        }
        with(server(uuid), changes)
    }

    /// A +75, B +70, C +10, D unscheduled, E stale (−35, booted −30), F today (booted −30).
    fn six() -> Vec<Value> {
        vec![
            at("A", Some(75.0), None),
            at("B", Some(70.0), None),
            at("C", Some(10.0), None),
            at("D", None, None),
            at("E", Some(-35.0), Some(-30.0)),
            at("F", Some(0.0), Some(-30.0)),
        ]
    }

    fn run(f: &Fixture) -> Outcome {
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        run_on(&mut req, &ScoreNextReboot)
    }

    fn scores(out: &Outcome) -> Vec<f64> {
        out.state.iter().map(|s| s.score).collect()
    }

    #[test]
    fn unscheduled_first_then_latest_reboots_by_week() {
        let out = run(&Fixture::new(six()).defaults(json!({"weight_next_reboot": 3})));
        assert_eq!(out.remaining, ["A", "B", "C", "D", "E", "F"]);
        assert_eq!(scores(&out), [3.0, 3.0, 2.0, 4.0, 4.0, 1.0]);
        assert_eq!(out.reason("D"), Some("increased score by 3.00 to 4.00"));
        assert_eq!(out.reason("E"), Some("increased score by 3.00 to 4.00"));
        assert_eq!(out.reason("A"), Some("increased score by 2.00 to 3.00"));
        assert_eq!(out.reason("C"), Some("increased score by 1.00 to 2.00"));
        assert_eq!(out.reason("F"), Some("increased score by 0.00 to 1.00"));
        // Reasons follow the buckets: unscheduled first, then latest first.
        let keys: Vec<String> = out.reason_list().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["D", "E", "A", "B", "C", "F"]);
    }

    #[test]
    fn negative_weight_reverses_the_buckets() {
        let out = run(&Fixture::new(six()).defaults(json!({"weight_next_reboot": -3})));
        assert_eq!(scores(&out), [2.0, 2.0, 3.0, 1.0, 1.0, 4.0]);
        assert_eq!(out.reason("F"), Some("increased score by 3.00 to 4.00"));
    }

    #[test]
    fn one_or_no_servers_skip() {
        let skip = [("skip".to_string(), "One or fewer servers".to_string())];
        assert_eq!(run(&Fixture::new(vec![at("A", Some(1.0), None)])).reason_list(), skip);
        assert_eq!(run(&Fixture::new(vec![])).reason_list(), skip);
    }

    #[test]
    fn buckets_are_anchored_on_their_first_member() {
        // 20, 15, 10, 5 days: 15 joins 20's week; 10 starts a new one (not within 7 days of
        // 20), 5 joins 10's. Not sliding: 10 is within 7 days of 15 yet starts a bucket.
        let list = vec![
            at("a", Some(20.0), None),
            at("b", Some(15.0), None),
            at("c", Some(10.0), None),
            at("d", Some(5.0), None),
        ];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 1})));
        assert_eq!(scores(&out), [2.0, 2.0, 1.0, 1.0]);
        // Exactly 7 days before the anchor is outside (the limit is exclusive).
        let list = vec![at("a", Some(20.0), None), at("b", Some(13.0), None)];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 1})));
        assert_eq!(scores(&out), [2.0, 1.0]);
    }

    #[test]
    fn all_unscheduled_or_all_in_one_week_get_the_whole_weight() {
        let out = run(&Fixture::new(vec![at("a", None, None), at("b", None, None)]));
        assert_eq!(scores(&out), [1.5, 1.5]);
        let list = vec![at("a", Some(3.0), None), at("b", Some(1.0), None)];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 0})));
        assert_eq!(out.reason("a"), Some("increased score by 0.00 to 1.00"));
    }

    #[test]
    fn odd_values_compare_the_js_way() {
        // A number is a valid `new Date(...)` and is scheduled; it never compares greater
        // than a date string, so it ends up in the last bucket (as the original does).
        let list = vec![
            with(server("num"), json!({"next_reboot": 12345})),
            at("later", Some(30.0), None),
            at("soon", Some(1.0), None),
        ];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 2})));
        assert_eq!(scores(&out), [1.0, 3.0, 2.0]);
    }

    #[test]
    fn unreadable_dates_that_make_the_original_throw_count_as_unscheduled() {
        // "zzz" sorts after every date, so the original computes its week limit and throws.
        let list = vec![
            with(server("zzz"), json!({"next_reboot": "zzz"})),
            at("later", Some(30.0), None),
            at("soon", Some(1.0), None),
        ];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 2})));
        assert_eq!(scores(&out), [3.0, 2.0, 1.0]);
        // Readable odd values keep their JS treatment in that case: only "bad" moves.
        let list = vec![
            with(server("bad"), json!({"next_reboot": "next tuesday"})),
            with(server("num"), json!({"next_reboot": 12345})),
            at("later", Some(30.0), None),
            at("soon", Some(1.0), None),
        ];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 2})));
        assert_eq!(scores(&out), [3.0, 1.0, 1.0 + 4.0 / 3.0, 1.0 + 2.0 / 3.0]);
    }

    #[test]
    fn reboots_before_the_epoch_make_an_empty_first_bucket() {
        // The latest-reboot search starts at the epoch, so for reboots all before it the
        // first limit is 1969-12-25 and the first server closes an empty bucket, which still
        // takes a share: buckets [unscheduled], [], [1969-06-01] → 2, 1, 0.
        let list =
            vec![at("none", None, None), with(server("old"), json!({"next_reboot": "1969-06-01T00:00:00.000Z"}))];
        let out = run(&Fixture::new(list).defaults(json!({"weight_next_reboot": 2})));
        assert_eq!(scores(&out), [3.0, 1.0]);
    }

    #[test]
    fn dates_in_iso_form_are_bucketed_as_their_strings_would_be() {
        // Ties, stale reboots, weeks apart and just within one, in a scrambled order.
        let offsets = [75.0, 70.0, 10.0, 70.0, 3.0, -35.0, 0.0, 6.999, 7.0, 14.0, 13.5, 70.0, 200.0, 193.0];
        let mut list: Vec<Value> =
            offsets.iter().enumerate().map(|(i, &o)| at(&format!("s{i}"), Some(o), Some(-30.0))).collect();
        list.push(at("none", None, None));
        let f = Fixture::new(list);
        let req = f.request();
        let servers: Vec<ServerId> = (0..req.servers.len()).rev().collect();
        let dated = dated_buckets(&req, &servers).expect("every date in ISO form");
        assert_eq!(Some(dated), bucket(&req, &servers, false));
        // One date in another form: the general path decides.
        let odd = with(server("odd"), json!({"next_reboot": "2016-04-20"}));
        let f = Fixture::new(vec![at("a", Some(3.0), None), odd]);
        let req = f.request();
        assert_eq!(dated_buckets(&req, &[0, 1]), None);
        assert_eq!(reboot_key(req.server(0)), RebootKey::At((NOW_MS + 3.0 * DAY_MS) as i64));
        // A day that overflows into the next month reads as a later date than its string.
        let overflow = with(server("feb"), json!({"next_reboot": "2015-02-30T00:00:00.000Z"}));
        let f = Fixture::new(vec![overflow]);
        assert_eq!(reboot_key(f.request().server(0)), RebootKey::Unusual);
    }
}
