//! `hard-filter-large-servers`: keeps the emptiest 15% of servers (by unreserved RAM) back for
//! large VMs. With 7 servers or more, the `floor(n × 0.15)` servers with the most unreserved
//! RAM are dropped silently, and the rest are passed on sorted by unreserved RAM, largest
//! first: this filter reorders its output.
//!
//! The sort is the one the original's runtime performs (V8's TimSort, see `js::sort`),
//! so it is stable and also places servers whose unreserved RAM is unknown (NaN comparisons)
//! exactly where the original did.

use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

/// The share of servers held back.
const LARGE_POOL_RATIO: f64 = 0.15;

pub struct HardFilterLargeServers;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-large-servers", Kind::HardFilter, "Filter out the largest and most empty servers")
        .reads(&[Data::Unreserved])
        .reorders();

impl Plugin for HardFilterLargeServers {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if req.defaults.filter_large_servers.switched_off() {
            reasons.skip("Do not filter out large servers");
            return Ok(servers.to_vec());
        }
        let held_back = servers.len() as f64 * LARGE_POOL_RATIO;
        if held_back < 1.0 {
            return Ok(servers.to_vec());
        }
        let ram: Vec<f64> = servers.iter().map(|&id| unreserved_ram(req, id)).collect();
        let mut sorted = servers.to_vec();
        // Descending: the comparator is `b - a`, which is `-1 × (a - b)` exactly.
        req.sort_by_scaled(&mut sorted, &ram, -1.0);
        sorted.drain(..held_back as usize);
        Ok(sorted)
    }

    /// The same servers are held back, the rest in the same order, while the sort's order
    /// holds.
    fn unchanged_by(&self, req: &mut Request<'_>, servers: &[ServerId], _: &[ServerId], changed: &[ServerId]) -> bool {
        if req.defaults.filter_large_servers.switched_off() || (servers.len() as f64 * LARGE_POOL_RATIO) < 1.0 {
            return true;
        }
        req.kept_order_holds(servers, changed, -1.0, unreserved_ram)
    }
}

fn unreserved_ram(req: &Request<'_>, id: ServerId) -> f64 {
    req.state(id).unreserved.map_or(f64::NAN, |u| u.ram_mib)
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
            req.set_unreserved(i, Unreserved { cpu_pct: 0.0, ram_mib: r, disk_mib: 0.0 });
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
}
