//! `override-overprovisioning`: replaces every server's and the package's overprovision
//! ratios with the configured ones (`overprovision_ratio_cpu/ram/disk`, default 4/1/1), so
//! that ratios sent by callers cannot skew capacity.

use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::{Js, JsObject};

pub struct OverrideOverprovisioning;

static DECLARATION: Declaration =
    Declaration::new("override-overprovisioning", Kind::Transform, "Force overprovisioning to fixed values")
        .writes(&[Data::Ratios])
        .per_server();

impl Plugin for OverrideOverprovisioning {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let d = req.defaults;
        if d.disable_override_overprovisioning.truthy() {
            reasons.skip("Do not override overprovisioning numbers");
            return Ok(servers.to_vec());
        }
        // `num(x) || fallback`: 0 and NaN fall back too.
        let or = |v: &Js, fallback: f64| {
            let n = v.num();
            if n == 0.0 || n.is_nan() {
                fallback
            } else {
                n
            }
        };
        let (cpu, ram, disk) = (
            or(&d.overprovision_ratio_cpu, 4.0),
            or(&d.overprovision_ratio_ram, 1.0),
            or(&d.overprovision_ratio_disk, 1.0),
        );
        let ratios: JsObject =
            [("cpu", cpu), ("ram", ram), ("disk", disk)].into_iter().map(|(k, v)| (k.into(), Js::Num(v))).collect();
        let ratios = std::sync::Arc::new(Js::obj(ratios));
        for &id in servers {
            req.set_ratios(id, ratios.clone());
        }
        req.set_package_ratios(cpu, ram, disk);
        Ok(servers.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, Fixture};
    use serde_json::json;

    #[test]
    fn sets_configured_ratios_on_servers_and_package() {
        let f = Fixture::new(vec![server("a")])
            .package(json!({"overprovision_memory": 2, "overprovision_io": 1}))
            .defaults(json!({"overprovision_ratio_cpu": "6", "overprovision_ratio_ram": 0}));
        let mut req = f.request();
        let out = run_on(&mut req, &OverrideOverprovisioning);
        assert_eq!(out.remaining, ["a"]);
        assert!(out.reasons.is_empty());
        assert_eq!(req.ratios(0).stringify(), r#"{"cpu":6,"ram":1,"disk":1}"#);
        let pkg = req.package().expect("package");
        assert_eq!(
            (pkg.overprovision_cpu.num(), pkg.overprovision_ram.num(), pkg.overprovision_disk.num()),
            (6.0, 1.0, 1.0)
        );
        assert!(pkg.overprovision_io.is_undefined());
    }

    #[test]
    fn can_be_disabled() {
        let f = Fixture::new(vec![server("a")]).defaults(json!({"disable_override_overprovisioning": true}));
        let out = f.run(&OverrideOverprovisioning);
        assert_eq!(out.reason("skip"), Some("Do not override overprovisioning numbers"));
        assert!(out.state[0].ratios.is_none());
    }
}
