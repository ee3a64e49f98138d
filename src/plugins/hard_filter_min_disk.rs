//! `hard-filter-min-disk`: removes servers whose unreserved disk cannot hold the VM's quota
//! (the VM's, in GiB, else the package's, in MiB), the image's files and a 10 GiB margin.
//!
//! Zone quotas are overprovisioned by the package's disk ratio; HVM (or zvol image) quotas
//! are not, and need room for the image's root disk on top. Without a package disk ratio the
//! servers must not overprovision disk either (unless there is no package at all).
//!
//! The sums follow JS `+`, so a string-valued operand concatenates as in the original. Where
//! the original throws: image `files` that is not an array reads as no files, and a server
//! without an `overprovision_ratios` object reads as having no ratio.

use super::shared::min_resource::{Requirement, Resource};
use super::shared::unreserved::{is_hvm_brand, MIB};
use crate::engine::{Data, Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::js::{js_add, Js};

/// Room left beyond the VM's needs, MiB, just in case.
const FUDGE_MIB: f64 = 10.0 * 1024.0;

pub struct HardFilterMinDisk;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-min-disk", Kind::HardFilter, "Servers with enough unreserved disk")
        .reads(&[Data::Ratios, Data::Unreserved]);

impl ServerFilter for HardFilterMinDisk {
    type Prepared = Requirement;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<Requirement>, PluginError> {
        if req.defaults.filter_min_resources.switched_off() {
            return Ok(PreFilter::Skip("Do not filter out based on unreserved disk".into()));
        }
        let vm_quota = &req.vm.quota_gib;
        let pkg_quota = req.package().map(|p| &p.package.quota_mib);
        if !vm_quota.truthy() && !pkg_quota.is_some_and(Js::truthy) {
            return Ok(PreFilter::Skip("Vm and pkg have no quota".into()));
        }
        let Some(pkg) = req.package() else { return Ok(PreFilter::PassAll) };
        if !pkg.overprovision_disk.truthy() {
            return Ok(PreFilter::Run(Requirement::NoRatio));
        }
        Ok(PreFilter::Run(Requirement::Spare(requested_mib(req, &pkg.package.quota_mib, &pkg.overprovision_disk))))
    }
    fn filter(&self, req: &Request<'_>, requirement: &Requirement, id: ServerId) -> Verdict {
        Resource::Disk.verdict(req, id, requirement, |want, spare| {
            format!("VM's calculated {want} MiB disk is more than server's spare {spare} MiB")
        })
    }
}

/// The disk the VM needs, MiB (a `Js` value: a string operand makes it a string, as in JS).
fn requested_mib(req: &Request<'_>, pkg_quota_mib: &Js, ratio: &Js) -> Js {
    let quota =
        if req.vm.quota_gib.truthy() { Js::Num(req.vm.quota_gib.num() * 1024.0) } else { pkg_quota_mib.clone() };
    let hvm = is_hvm_brand(&req.vm.brand) || req.image.image_type.as_str() == Some("zvol");
    let requested = if hvm {
        // The image fills the root disk; the quota is the data disk.
        js_add(&quota, &req.image.image_size_mib)
    } else {
        Js::Num((quota.num() / ratio.num()).ceil())
    };
    let files = req.image.files.as_arr().unwrap_or_default();
    let bytes = files.iter().fold(Js::Num(0.0), |acc, f| js_add(&acc, f.get("size")));
    let overhead = bytes.num() / MIB;
    js_add(&requested, &Js::Num(overhead.ceil() + FUDGE_MIB))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::{json, Value};

    const MIB_U: u64 = 1 << 20;

    fn servers(ratios: [Value; 4]) -> Vec<Value> {
        ratios
            .into_iter()
            .zip(["a", "b", "c", "d"])
            .map(|(r, n)| with(server(n), json!({"overprovision_ratios": r})))
            .collect()
    }

    fn run(f: &Fixture, spare: &[f64]) -> Outcome {
        let mut req = f.request();
        for (i, &disk) in spare.iter().enumerate() {
            req.set_unreserved(i, Unreserved { cpu_pct: 0.0, ram_mib: 0.0, disk_mib: disk });
        }
        run_on(&mut req, &HardFilterMinDisk)
    }

    fn image(zvol: bool) -> Value {
        let mut img = json!({"image_size": 10240, "files": [{"size": 150 * MIB_U}]});
        if zvol {
            img["type"] = json!("zvol");
        }
        img
    }

    const SMALL: [f64; 4] = [2560.0, 5110.0, 5120.0, 7680.0];
    const LARGE: [f64; 4] = [25600.0, 50000.0, 51200.0, 76800.0];

    fn mixed() -> Vec<Value> {
        servers([json!({}), json!({}), json!({"disk": 1.0}), json!({"disk": 1.0})])
    }

    fn ratio_one() -> Vec<Value> {
        servers([(); 4].map(|_| json!({"disk": 1.0})))
    }

    #[test]
    fn package_without_disk_ratio_rejects_servers_with_one() {
        let f = Fixture::new(mixed()).vm(json!({"quota": 5})).image(json!({})).package(json!({}));
        let out = run(&f, &SMALL);
        assert_eq!(out.remaining, ["a", "b"]);
        let msg = "Package gave no disk overprovision ratio, but server has ratio 1";
        assert_eq!(out.reason_list(), [("c".into(), msg.into()), ("d".into(), msg.into())]);
    }

    #[test]
    fn without_package_everything_passes() {
        let out = run(&Fixture::new(mixed()).vm(json!({"quota": 5})), &SMALL);
        assert_eq!(out.remaining, ["a", "b", "c", "d"]);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn can_be_switched_off() {
        let f = Fixture::new(ratio_one())
            .vm(json!({"quota": 5}))
            .package(json!({"overprovision_storage": 1}))
            .defaults(json!({"filter_min_resources": false}));
        let out = run(&f, &SMALL);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(out.reason_list(), [("skip".into(), "Do not filter out based on unreserved disk".into())]);
    }

    #[test]
    fn zvol_images_need_quota_plus_image_plus_files_plus_margin() {
        let f = Fixture::new(ratio_one())
            .vm(json!({"quota": 29}))
            .image(image(true))
            .package(json!({"quota": 51200, "overprovision_disk": 1.5}));
        let out = run(&f, &LARGE);
        assert_eq!(out.remaining, ["c", "d"]);
        assert_eq!(
            out.reason_list(),
            [
                ("a".into(), "VM's calculated 50326 MiB disk is more than server's spare 25600 MiB".into()),
                ("b".into(), "VM's calculated 50326 MiB disk is more than server's spare 50000 MiB".into())
            ]
        );
        // An HVM brand takes the same path with any image type.
        let f = f.vm(json!({"quota": 29, "brand": "bhyve"})).image(image(false));
        assert_eq!(run(&f, &LARGE).remaining, ["c", "d"]);
    }

    #[test]
    fn zone_quota_is_overprovisioned() {
        let f = Fixture::new(ratio_one())
            .vm(json!({"quota": 29}))
            .image(image(false))
            .package(json!({"quota": 51200, "overprovision_disk": 1.5}));
        let out = run(&f, &LARGE);
        assert_eq!(out.remaining, ["b", "c", "d"]);
        assert_eq!(out.reason("a"), Some("VM's calculated 30188 MiB disk is more than server's spare 25600 MiB"));
    }

    #[test]
    fn package_quota_is_used_without_a_vm_quota() {
        let f = Fixture::new(ratio_one())
            .vm(json!({}))
            .image(image(false))
            .package(json!({"quota": 29696, "overprovision_disk": 1.5}));
        let out = run(&f, &LARGE);
        assert_eq!(out.remaining, ["b", "c", "d"]);
        assert_eq!(out.reason("a"), Some("VM's calculated 30188 MiB disk is more than server's spare 25600 MiB"));
    }

    #[test]
    fn no_quota_anywhere_skips() {
        let f = Fixture::new(ratio_one()).vm(json!({})).package(json!({"overprovision_disk": 1}));
        let out = run(&f, &SMALL);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(out.reason_list(), [("skip".into(), "Vm and pkg have no quota".into())]);
    }

    #[test]
    fn missing_image_size_on_the_hvm_path_fails_every_server() {
        let f = Fixture::new(ratio_one())
            .vm(json!({"quota": 1, "brand": "kvm"}))
            .image(json!({"files": []}))
            .package(json!({"overprovision_disk": 1}));
        let out = run(&f, &LARGE);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("d"), Some("VM's calculated NaN MiB disk is more than server's spare 76800 MiB"));
    }

    #[test]
    fn string_package_quota_concatenates_like_js() {
        // "1024" + 0 → "10240", then + (0 + 10240) → "1024010240".
        let f = Fixture::new(vec![server("x")])
            .vm(json!({"brand": "kvm"}))
            .image(json!({"image_size": 0}))
            .package(json!({"quota": "1024", "overprovision_disk": 1}));
        let out = run(&f, &[1.0]);
        assert_eq!(out.reason("x"), Some("VM's calculated 1024010240 MiB disk is more than server's spare 1 MiB"));
    }
}
