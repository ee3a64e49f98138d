//! `hard-filter-large-servers`: keeps the emptiest 15% of servers (by unreserved RAM) back for
//! large VMs. With 7 servers or more, the `floor(n × 0.15)` servers with the most unreserved
//! RAM are dropped silently, and the rest are passed on sorted by unreserved RAM, largest
//! first: this filter reorders its output.
//!
//! The sort is the one the original's runtime performs (V8's TimSort, which on these sizes is
//! a run detection plus a binary insertion sort), so it is stable and also places servers
//! whose unreserved RAM is unknown (NaN comparisons) exactly where the original did.

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

/// The share of servers held back.
const LARGE_POOL_RATIO: f64 = 0.15;

pub struct HardFilterLargeServers;

impl Plugin for HardFilterLargeServers {
    fn name(&self) -> &'static str {
        "hard-filter-large-servers"
    }
    fn step(&self) -> &'static str {
        "Filter out the largest and most empty servers"
    }
    fn kind(&self) -> Kind {
        Kind::HardFilter
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let flag = &req.defaults.filter_large_servers;
        if !flag.is_undefined() && !flag.truthy() {
            reasons.skip("Do not filter out large servers");
            return Ok(servers.to_vec());
        }
        let held_back = servers.len() as f64 * LARGE_POOL_RATIO;
        if held_back < 1.0 {
            return Ok(servers.to_vec());
        }
        let ram = |id: ServerId| req.unreserved_js(id)[1].num();
        let mut sorted = servers.to_vec();
        // Descending: the comparator is `b - a`.
        js_sort(&mut sorted, |&a, &b| ram(b) - ram(a));
        Ok(sorted.split_off(held_back as usize))
    }
}

/// `Array.prototype.sort` with a numeric comparator as V8 (Node ≥ 11) runs it on arrays
/// below 64 elements: detect the leading run (reversing a strictly descending one), then
/// binary-insert the rest. A NaN comparator result counts as 0 ("equal"), as the language
/// specifies. Larger arrays get the same insertion sort: the same order as V8's merges
/// whenever the comparator is consistent (no NaN), which is all a stable sort can promise.
fn js_sort<T: Copy>(items: &mut [T], mut user_cmp: impl FnMut(&T, &T) -> f64) {
    let mut cmp = |a: &T, b: &T| {
        let order = user_cmp(a, b);
        if order.is_nan() {
            0.0
        } else {
            order
        }
    };
    let n = items.len();
    if n < 2 {
        return;
    }
    let mut run = 2;
    let descending = cmp(&items[1], &items[0]) < 0.0;
    while run < n {
        let order = cmp(&items[run], &items[run - 1]);
        if (descending && order >= 0.0) || (!descending && order < 0.0) {
            break;
        }
        run += 1;
    }
    if descending {
        items[..run].reverse();
    }
    for start in run..n {
        let pivot = items[start];
        let (mut left, mut right) = (0, start);
        while left < right {
            let mid = left + (right - left) / 2;
            if cmp(&pivot, &items[mid]) < 0.0 {
                right = mid;
            } else {
                left = mid + 1;
            }
        }
        items.copy_within(left..start, left + 1);
        items[left] = pivot;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::plugins::testing::{run_on, server, Fixture, Outcome};
    use serde_json::json;

    fn run(f: &Fixture, ram: &[f64]) -> Outcome {
        let mut req = f.request();
        for (i, &r) in ram.iter().enumerate() {
            req.state[i].unreserved = Some(Unreserved { cpu_pct: 0.0, ram_mib: r, disk_mib: 0.0 });
        }
        run_on(&mut req, &HardFilterLargeServers)
    }

    fn fixture(n: usize) -> Fixture {
        Fixture::new((0..n).map(|i| server(&format!("s{i}"))).collect())
    }

    #[test]
    fn drops_the_largest_fifteen_percent_and_sorts_descending() {
        let ram: Vec<f64> = (0..20).map(|i| f64::from(i) * 8192.0).collect();
        let out = run(&fixture(20), &ram);
        let expected: Vec<String> = (0..17).rev().map(|i| format!("s{i}")).collect();
        assert_eq!(out.remaining, expected);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn spec_example_keeps_ties_in_input_order() {
        let ram = [0., 4000., 8000., 1000., 5000., 9000., 2000., 6000., 10000., 3000., 7000., 0., 4000., 8000.];
        let out = run(&fixture(14), &ram);
        let order = [2, 13, 10, 7, 4, 1, 12, 9, 6, 3, 0, 11];
        assert_eq!(out.remaining, order.map(|i| format!("s{i}")));
    }

    #[test]
    fn counts_dropped() {
        for (n, dropped) in [(6, 0), (7, 1), (13, 1), (14, 2), (20, 3), (100, 15)] {
            let ram: Vec<f64> = (0..n).map(f64::from).collect();
            let out = run(&fixture(n as usize), &ram);
            assert_eq!(out.remaining.len(), n as usize - dropped, "n = {n}");
        }
    }

    #[test]
    fn small_lists_keep_their_order() {
        let out = run(&fixture(6), &[1., 5., 3., 9., 2., 4.]);
        assert_eq!(out.remaining, ["s0", "s1", "s2", "s3", "s4", "s5"]);
    }

    #[test]
    fn can_be_switched_off() {
        let f = fixture(20).defaults(json!({"filter_large_servers": false}));
        let out = run(&f, &[1.0; 20]);
        assert_eq!(out.remaining.len(), 20);
        assert_eq!(out.reason_list(), [("skip".into(), "Do not filter out large servers".into())]);
    }

    #[test]
    fn js_sort_matches_v8_with_nan() {
        // Orders Node 20 produces for `.sort((a, b) => b - a)`: a NaN comparison counts as
        // "equal", so NaNs stay where the run detection and insertion leave them.
        let nan = f64::NAN;
        let long = [
            11., 18., 19., nan, 8., 0., 6., 16., 6., 4., 17., 0., 8., 9., 17., 4., 1., 3., 9., 10., nan, 5., 15., nan,
            11., nan, 4., 10., 7., 18., 2.,
        ];
        let long_sorted = [
            "19", "18", "18", "17", "17", "11", "NaN", "16", "15", "11", "10", "10", "9", "9", "8", "8", "7", "6", "6",
            "5", "4", "4", "4", "3", "1", "0", "0", "NaN", "NaN", "NaN", "2",
        ];
        let cases: [(&[f64], &[&str]); 4] = [
            (&[3.0, f64::NAN, 1.0, 2.0], &["3", "NaN", "2", "1"]),
            (&[5.0, f64::NAN, 4.0, f64::NAN, 7.0, 1.0, 8.0], &["5", "NaN", "4", "NaN", "8", "7", "1"]),
            (&[f64::NAN, 5.0, f64::NAN, 4.0, 9.0, 1.0, 8.0], &["NaN", "5", "NaN", "9", "8", "4", "1"]),
            (&long, &long_sorted),
        ];
        for (input, expected) in cases {
            let mut v = input.to_vec();
            js_sort(&mut v, |a, b| b - a);
            let shown: Vec<String> = v.iter().map(|x| x.to_string()).collect();
            assert_eq!(shown, expected);
        }
        let mut w = [1, 2, 3, 0, 5, 4];
        js_sort(&mut w, |a, b| f64::from(*a) - f64::from(*b));
        assert_eq!(w, [0, 1, 2, 3, 4, 5]);
    }
}
