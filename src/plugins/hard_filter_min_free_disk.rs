//! `hard-filter-min-free-disk`: removes servers whose zpool has less actually free space
//! (usable pool minus allocated, in MiB, rounded up) than `defaults.minimum_free_disk`, so
//! that nearly full pools are left alone whatever has been promised on them.
//!
//! The required value is printed as configured (a string stays a string); `null` counts as 0.

use super::shared::unreserved::{MIB, POOL_USABLE_RATIO};
use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Shortfall, Verdict};
use crate::js::{fmt_num, js_max, Js};

pub struct HardFilterMinFreeDisk;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-min-free-disk", Kind::HardFilter, "Servers with enough free disk");

impl ServerFilter for HardFilterMinFreeDisk {
    /// `minimum_free_disk` as configured.
    type Prepared = Js;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<Js>, PluginError> {
        Ok(match &req.defaults.minimum_free_disk {
            Js::Undefined => PreFilter::Skip("No minimum free disk set".into()),
            required => PreFilter::Run(required.clone()),
        })
    }
    fn filter(&self, req: &Request<'_>, required: &Js, id: ServerId) -> Verdict {
        let s = req.server(id);
        let free_bytes = s.disk_pool_size_bytes.num() * POOL_USABLE_RATIO - s.disk_pool_alloc_bytes.num();
        let free = js_max(0.0, (free_bytes / MIB).ceil());
        if free >= required.num() {
            return Verdict::Keep;
        }
        let why = format!("Server requires {}MB free disk, but only has {}MB", required.to_js_string(), fmt_num(free));
        if req.explaining() && required.num().is_finite() && free.is_finite() {
            let shortfall = Shortfall { resource: "free_disk", unit: "MiB", needed: required.num(), available: free };
            return Verdict::short(why, shortfall);
        }
        Verdict::fail(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    const TIB: u64 = 1 << 40;

    fn pools() -> Vec<Value> {
        [("a", 4, 3), ("b", 4, 2), ("c", 8, 7), ("d", 8, 4)]
            .into_iter()
            .map(|(n, size, alloc)| {
                with(server(n), json!({"disk_pool_size_bytes": size * TIB, "disk_pool_alloc_bytes": alloc * TIB}))
            })
            .collect()
    }

    #[test]
    fn removes_servers_with_too_little_free_pool() {
        let out = Fixture::new(pools()).defaults(json!({"minimum_free_disk": 1572864})).run(&HardFilterMinFreeDisk);
        assert_eq!(out.remaining, ["b", "d"]);
        assert_eq!(
            out.reason_list(),
            [
                ("a".into(), "Server requires 1572864MB free disk, but only has 796918MB".into()),
                ("c".into(), "Server requires 1572864MB free disk, but only has 545260MB".into())
            ]
        );
    }

    #[test]
    fn string_minimum_is_coerced_and_printed_as_given() {
        let out = Fixture::new(pools()).defaults(json!({"minimum_free_disk": "1572864.0"})).run(&HardFilterMinFreeDisk);
        assert_eq!(out.remaining, ["b", "d"]);
        assert_eq!(out.reason("a"), Some("Server requires 1572864.0MB free disk, but only has 796918MB"));
    }

    #[test]
    fn unset_minimum_skips() {
        let out = Fixture::new(pools()).run(&HardFilterMinFreeDisk);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(out.reason_list(), [("skip".into(), "No minimum free disk set".into())]);
    }

    #[test]
    fn overfull_pools_have_zero_free_and_missing_sizes_fail() {
        let full = with(server("full"), json!({"disk_pool_size_bytes": TIB, "disk_pool_alloc_bytes": TIB}));
        let unknown = with(server("unknown"), json!({"disk_pool_alloc_bytes": null}));
        let mut unknown = unknown;
        unknown.as_object_mut().expect("object").shift_remove("disk_pool_size_bytes");
        let out =
            Fixture::new(vec![full, unknown]).defaults(json!({"minimum_free_disk": 0})).run(&HardFilterMinFreeDisk);
        assert_eq!(out.remaining, ["full"]);
        assert_eq!(out.reason("unknown"), Some("Server requires 0MB free disk, but only has NaNMB"));
    }
}
