//! `hard-filter-overprovision-ratios`: keeps servers whose overprovision ratios (cpu, ram,
//! disk, io, net) equal the package's, compared at two decimals, so that a VM only lands where
//! its promises are accounted the same way.
//!
//! A falsy ratio on either side reads as "none" (`null`). The original calls `toFixed` on the
//! raw value and throws on a string (or any non-number) ratio; here such a ratio is coerced
//! with unary plus first (`"1.5"` → `1.50`, `"abc"` → `NaN`). A server without an
//! `overprovision_ratios` object (the original throws) reads as having no ratios.

use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId, Shortfall};
use crate::js::{to_fixed2, Js};

pub struct HardFilterOverprovisionRatios;

/// `x.toFixed(2)`, or `None` (JS `null`) for a falsy ratio.
fn canonical(ratio: &Js) -> Option<String> {
    ratio.truthy().then(|| to_fixed2(ratio.num()))
}

fn show(c: &Option<String>) -> &str {
    c.as_deref().unwrap_or("null")
}

/// `<resource>_ratio`, the name of a ratio in explained answers.
fn ratio_resource(resource: &str) -> &'static str {
    match resource {
        "cpu" => "cpu_ratio",
        "ram" => "ram_ratio",
        "disk" => "disk_ratio",
        "io" => "io_ratio",
        _ => "net_ratio",
    }
}

static DECLARATION: Declaration = Declaration::new(
    "hard-filter-overprovision-ratios",
    Kind::HardFilter,
    "Servers with same overprovision ratios as requested VM",
)
.reads(&[Data::Ratios])
.per_server();

impl Plugin for HardFilterOverprovisionRatios {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let Some(pkg) = req.package() else {
            reasons.skip("No pkg provided");
            return Ok(servers.to_vec());
        };
        let pairs = [
            ("cpu", &pkg.overprovision_cpu),
            ("ram", &pkg.overprovision_ram),
            ("disk", &pkg.overprovision_disk),
            ("io", &pkg.overprovision_io),
            ("net", &pkg.overprovision_net),
        ];
        let mut kept = servers.to_vec();
        // Noted once the passes are over (the passes borrow the request).
        let mut shortfalls: Vec<(ServerId, Shortfall)> = Vec::new();
        // One pass per resource, each over the servers the previous ones kept.
        for (resource, pkg_ratio) in pairs {
            let wanted = canonical(pkg_ratio);
            let wanted_num = pkg_ratio.truthy().then(|| pkg_ratio.num());
            // Servers usually share one ratios object (override-overprovisioning gives every
            // server the same): once it passes, it passes for all of them.
            let mut passed: Option<&Js> = None;
            kept.retain(|&id| {
                let ratios = req.ratios(id);
                if passed.is_some_and(|p| std::ptr::eq(p, ratios)) {
                    return true;
                }
                let ratio = ratios.get(resource);
                // The same number (or none on both sides) prints the same: no need to.
                let same = match (wanted_num, ratio.truthy()) {
                    (None, false) => true,
                    (Some(w), true) => w == ratio.num(),
                    _ => false,
                };
                if same {
                    passed = Some(ratios);
                    return true;
                }
                let has = canonical(ratio);
                if has == wanted {
                    return true;
                }
                if req.explaining() {
                    // The ratio asked for against the server's (0 for none).
                    let needed = wanted_num.unwrap_or(0.0);
                    let available = if ratio.truthy() { ratio.num() } else { 0.0 };
                    if needed.is_finite() && available.is_finite() {
                        let resource = ratio_resource(resource);
                        shortfalls.push((id, Shortfall { resource, unit: "ratio", needed, available }));
                    }
                }
                let msg =
                    format!("Package over-provision ratio of {} does not match server's {}", show(&wanted), show(&has));
                reasons.set(req.key(id), msg);
                false
            });
        }
        for (id, shortfall) in shortfalls {
            req.note_shortfall(id, shortfall);
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::json;

    const RAM: [(&str, f64); 10] = [
        ("s0", 1.0),
        ("s1", 1.01),
        ("s2", 1.001),
        ("s3", 2.0),
        ("s4", 1.5),
        ("s5", 10.0),
        ("s6", 1.0),
        ("s7", 0.999),
        ("s8", 0.99),
        ("s9", 1.0),
    ];

    fn fixture() -> Fixture {
        Fixture::new(RAM.iter().map(|(n, r)| with(server(n), json!({"overprovision_ratios": {"ram": r}}))).collect())
    }

    /// Runs with a package holding only the given RAM ratio.
    fn run_with_ram(ram: Js) -> Outcome {
        let f = fixture().package(json!({}));
        let mut req = f.request();
        if let Some(p) = req.package_mut() {
            p.overprovision_ram = ram;
        }
        run_on(&mut req, &HardFilterOverprovisionRatios)
    }

    #[test]
    fn ratios_match_at_two_decimals() {
        let out = run_with_ram(Js::Num(1.0));
        assert_eq!(out.remaining, ["s0", "s2", "s6", "s7", "s9"]);
        let m = |pkg: &str, srv: &str| format!("Package over-provision ratio of {pkg} does not match server's {srv}");
        assert_eq!(
            out.reason_list(),
            [
                ("s1".into(), m("1.00", "1.01")),
                ("s3".into(), m("1.00", "2.00")),
                ("s4".into(), m("1.00", "1.50")),
                ("s5".into(), m("1.00", "10.00")),
                ("s8".into(), m("1.00", "0.99")),
            ]
        );
        let out = run_with_ram(Js::Num(1.5));
        assert_eq!(out.remaining, ["s4"]);
        assert_eq!(out.reasons.len(), 9);
        assert_eq!(out.reason("s7"), Some(m("1.50", "1.00").as_str()));
    }

    #[test]
    fn string_ratio_is_coerced() {
        assert_eq!(run_with_ram(Js::str("1.5")).remaining, ["s4"]);
    }

    #[test]
    fn no_package_skips() {
        let out = fixture().run(&HardFilterOverprovisionRatios);
        assert_eq!(out.remaining.len(), 10);
        assert_eq!(out.reason_list(), [("skip".into(), "No pkg provided".into())]);
    }

    #[test]
    fn earlier_resources_filter_first_and_absent_matches_zero() {
        let f = Fixture::new(vec![
            with(server("cpu"), json!({"overprovision_ratios": {"cpu": 2, "ram": 3}})),
            with(server("ram"), json!({"overprovision_ratios": {"cpu": 4, "ram": 3}})),
            with(server("ok"), json!({"overprovision_ratios": {"cpu": 4, "ram": 1, "disk": 0}})),
            server("none"),
        ])
        .package(json!({"overprovision_cpu": 4, "overprovision_memory": 1}));
        let out = f.run(&HardFilterOverprovisionRatios);
        assert_eq!(out.remaining, ["ok"]);
        assert_eq!(
            out.reason_list(),
            [
                ("cpu".into(), "Package over-provision ratio of 4.00 does not match server's 2.00".into()),
                ("none".into(), "Package over-provision ratio of 4.00 does not match server's null".into()),
                ("ram".into(), "Package over-provision ratio of 1.00 does not match server's 3.00".into()),
            ]
        );
    }
}
