//! `hard-filter-min-cpu`: removes servers whose unreserved CPU cannot hold the VM's CPU cap
//! divided by the package's CPU ratio.
//!
//! A VM without a cap takes the package's (`req.vm_cpu_cap`; later plugins see it). A VM that
//! still has no cap passes everywhere. Without a package CPU ratio the servers must not
//! overprovision CPU either (unless there is no package at all). A server without an
//! `overprovision_ratios` object (the original throws) reads as having no ratio.

use super::shared::min_resource::{Requirement, Resource};
use crate::engine::{keep_passing, Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::Js;

pub struct HardFilterMinCpu;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-min-cpu", Kind::HardFilter, "Servers with enough unreserved CPU")
        .reads(&[Data::CpuCap, Data::Ratios, Data::Unreserved])
        .writes(&[Data::CpuCap])
        .per_server();

impl Plugin for HardFilterMinCpu {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if req.defaults.filter_min_resources.switched_off() {
            reasons.skip("Do not filter out based on minimum free CPU");
            return Ok(servers.to_vec());
        }
        if let Some(pkg) = req.package() {
            if !req.vm_cpu_cap().truthy() && pkg.package.cpu_cap_pct.truthy() {
                req.set_vm_cpu_cap(pkg.package.cpu_cap_pct.clone());
            }
        }
        // Uncapped VMs are allowed anywhere.
        let Some(pkg) = req.package().filter(|_| req.vm_cpu_cap().truthy()) else {
            return Ok(servers.to_vec());
        };
        let requirement = match pkg.overprovision_cpu.truthy() {
            true => Requirement::Spare(Js::Num(req.vm_cpu_cap().num() / pkg.overprovision_cpu.num())),
            false => Requirement::NoRatio,
        };
        Ok(keep_passing(req, servers, reasons, true, |req, id| {
            Resource::Cpu.verdict(req, id, &requirement, |want, spare| {
                format!("VM's calculated {want} CPU is less than server's spare {spare}")
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::{json, Value};

    fn servers(ratios: [Value; 4]) -> Vec<Value> {
        ratios
            .into_iter()
            .zip(["a", "b", "c", "d"])
            .map(|(r, n)| with(server(n), json!({"overprovision_ratios": r})))
            .collect()
    }

    fn mixed() -> Vec<Value> {
        servers([json!({}), json!({}), json!({"cpu": 1.0}), json!({"cpu": 1.0})])
    }

    const SPARE: [f64; 4] = [400.0, 590.0, 610.0, 900.0];

    /// Runs with unreserved CPU set; returns the outcome and the VM's cap afterwards.
    fn run(f: &Fixture, spare: &[f64]) -> (Outcome, Js) {
        let mut req = f.request();
        for (i, &cpu) in spare.iter().enumerate() {
            req.set_unreserved(i, Unreserved { cpu_pct: cpu, ram_mib: 0.0, disk_mib: 0.0 });
        }
        let out = run_on(&mut req, &HardFilterMinCpu);
        (out, req.vm_cpu_cap().clone())
    }

    #[test]
    fn package_without_cpu_ratio_rejects_servers_with_one() {
        // Massaging leaves no CPU ratio on a package that only has a RAM one.
        let f = Fixture::new(mixed()).vm(json!({"cpu_cap": 900})).package(json!({"overprovision_memory": 1}));
        let (out, _) = run(&f, &SPARE);
        assert_eq!(out.remaining, ["a", "b"]);
        let msg = "Package gave no CPU overprovision ratio, but server has ratio 1";
        assert_eq!(out.reason_list(), [("c".into(), msg.into()), ("d".into(), msg.into())]);
    }

    #[test]
    fn without_package_everything_passes() {
        let (out, _) = run(&Fixture::new(mixed()).vm(json!({"cpu_cap": 900})), &SPARE);
        assert_eq!(out.remaining, ["a", "b", "c", "d"]);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn can_be_switched_off_before_copying_the_cap() {
        let f = Fixture::new(mixed())
            .vm(json!({}))
            .package(json!({"cpu_cap": 100, "overprovision_cpu": 1}))
            .defaults(json!({"filter_min_resources": false}));
        let (out, cap) = run(&f, &SPARE);
        assert_eq!(out.remaining, ["a", "b", "c", "d"]);
        assert_eq!(out.reason("skip"), Some("Do not filter out based on minimum free CPU"));
        assert_eq!(cap, Js::Undefined);
    }

    #[test]
    fn cap_is_divided_by_the_package_ratio() {
        let f = Fixture::new(servers([(); 4].map(|_| json!({"cpu": 1.0}))))
            .vm(json!({"cpu_cap": 900}))
            .package(json!({"overprovision_cpu": 1.5}));
        let (out, _) = run(&f, &SPARE);
        assert_eq!(out.remaining, ["c", "d"]);
        assert_eq!(
            out.reason_list(),
            [
                ("a".into(), "VM's calculated 600 CPU is less than server's spare 400".into()),
                ("b".into(), "VM's calculated 600 CPU is less than server's spare 590".into())
            ]
        );
    }

    #[test]
    fn uncapped_vm_passes_everywhere() {
        let f = Fixture::new(mixed()).vm(json!({})).package(json!({"overprovision_cpu": 4}));
        let (out, cap) = run(&f, &[0.0; 4]);
        assert_eq!(out.remaining, ["a", "b", "c", "d"]);
        assert!(out.reasons.is_empty());
        assert_eq!(cap, Js::Undefined);
    }

    #[test]
    fn package_cap_is_copied_to_the_vm_and_used() {
        let f = Fixture::new(vec![server("x"), server("y")])
            .vm(json!({"cpu_cap": 0}))
            .package(json!({"cpu_cap": 350, "overprovision_cpu": 4}));
        let (out, cap) = run(&f, &[50.0, 87.5]);
        assert_eq!(cap, Js::Num(350.0));
        assert_eq!(out.remaining, ["y"]);
        assert_eq!(out.reason("x"), Some("VM's calculated 87.5 CPU is less than server's spare 50"));
    }
}
