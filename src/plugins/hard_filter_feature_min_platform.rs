//! `hard-filter-feature-min-platform`: features of the VM (docker, NFS volume automount,
//! volapi NFS v2, flexible disk size) need a minimum platform, configured in the defaults; a
//! server on SDC 7.0 must run at least that platform (newer SDC versions always pass).
//!
//! Each applicable check runs in a fixed order on the survivors of the previous one, as the
//! min-platform predicate of spec §2.2 with the map `{"7.0": <default>}`; reasons accumulate
//! and a check whose default is unset (falsy) is skipped. A server without sysinfo (the
//! original throws) reads as SDC 6.5 with no platform, so any applicable check removes it.

use super::shared::platform::{filter_min_platforms, PlatformMap};
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::{strict_eq, Js};
use crate::model::METADATA_NFS_VERSION;

pub struct HardFilterFeatureMinPlatform;

static DECLARATION: Declaration = Declaration::new(
    "hard-filter-feature-min-platform",
    Kind::HardFilter,
    "Servers which meet various features' platform requirements",
)
.per_server();

impl Plugin for HardFilterFeatureMinPlatform {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let (vm, d) = (req.vm, req.defaults);
        let docker = vm.docker.truthy();
        let volumes = vm.volumes.truthy();
        // The number 2 exactly: the string "2" does not count.
        let nfs_v2 =
            vm.internal_metadata.truthy() && strict_eq(vm.internal_metadata.get(METADATA_NFS_VERSION), &Js::Num(2.0));
        let checks: [(bool, &Js, &str); 5] = [
            (docker, &d.filter_docker_min_platform, "Docker support"),
            (docker && volumes, &d.filter_docker_nfs_volumes_automount_min_platform, "Docker volume automount support"),
            (
                !docker && volumes,
                &d.filter_non_docker_nfs_volumes_automount_min_platform,
                "Non-docker volume automount support",
            ),
            (nfs_v2, &d.filter_volapi_nfs_v2_min_platform, "volapi nfs v2 support"),
            (vm.flexible_disk_size.truthy(), &d.filter_flexible_disk_min_platform, "Flexible disk size support"),
        ];
        let mut servers = servers.to_vec();
        for (applies, platform, label) in checks {
            if applies && platform.truthy() {
                servers = filter_min_platforms(req, &PlatformMap::single(platform), &servers, label, reasons);
            }
        }
        Ok(servers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{versioned, with, Fixture};
    use serde_json::{json, Value};

    fn servers() -> Vec<Value> {
        vec![
            versioned("old65", Some("6.5"), "20121218T203452Z"),
            versioned("none", None, "20200129T122401Z"),
            versioned("old70", Some("7.0"), "20121210T203034Z"),
            versioned("dkr70", Some("7.0"), "20160613T123039Z"),
            versioned("nfs70", Some("7.0"), "20170925T211846Z"),
            versioned("v2_70", Some("7.0"), "20200213T123742Z"),
            versioned("old71", Some("7.1"), "20000101T000000Z"),
            versioned("old10", Some("10.0"), "20991231T000000Z"),
        ]
    }

    fn vm(extra: Value) -> Value {
        with(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": "o", "brand": "joyent"}), extra)
    }

    #[test]
    fn nothing_requested_passes_everyone() {
        let out = Fixture::new(servers())
            .defaults(json!({"filter_docker_min_platform": "20121218T203452Z"}))
            .run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining.len(), 8);
        assert!(out.reasons.is_empty());
    }

    #[test]
    fn docker_needs_the_docker_platform() {
        let out = Fixture::new(servers())
            .vm(vm(json!({"docker": true})))
            .defaults(json!({"filter_docker_min_platform": "20160613T123039Z"}))
            .run(&HardFilterFeatureMinPlatform);
        // "7.1" sorts after "7.0"; "10.0" does not.
        assert_eq!(out.remaining, ["dkr70", "nfs70", "v2_70", "old71"]);
        assert_eq!(
            out.reason("old70"),
            Some(
                r#"Docker support requires min platforms {"7.0":"20160613T123039Z"}, but server has {"7.0":"20121210T203034Z"}"#
            )
        );
        assert_eq!(
            out.reason("none"),
            Some(
                r#"Docker support requires min platforms {"7.0":"20160613T123039Z"}, but server has {"6.5":"20200129T122401Z"}"#
            )
        );
        assert_eq!(out.reasons.len(), 4);
    }

    #[test]
    fn docker_with_volumes_runs_both_checks_in_order() {
        let mut list = servers();
        list.push(versioned("mid70", Some("7.0"), "20150101T000000Z"));
        let out = Fixture::new(list)
            .vm(vm(json!({"docker": true, "volumes": []})))
            .defaults(json!({"filter_docker_min_platform": "20121218T203452Z"}))
            .run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining, ["dkr70", "nfs70", "v2_70", "old71"]);
        assert_eq!(
            out.reason("old70"),
            Some(
                r#"Docker support requires min platforms {"7.0":"20121218T203452Z"}, but server has {"7.0":"20121210T203034Z"}"#
            )
        );
        // Passed the docker check, failed the automount one (CNAPI's default platform).
        assert_eq!(
            out.reason("mid70"),
            Some(
                r#"Docker volume automount support requires min platforms {"7.0":"20160613T123039Z"}, but server has {"7.0":"20150101T000000Z"}"#
            )
        );
        assert_eq!(out.reasons.len(), 5);
    }

    #[test]
    fn non_docker_volumes_and_volapi_v2_and_flexible_disk() {
        let out =
            Fixture::new(servers()).vm(vm(json!({"volumes": [{"name": "v"}]}))).run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining, ["nfs70", "v2_70", "old71"]);
        assert_eq!(
            out.reason("dkr70"),
            Some(
                r#"Non-docker volume automount support requires min platforms {"7.0":"20170925T211846Z"}, but server has {"7.0":"20160613T123039Z"}"#
            )
        );

        let out = Fixture::new(servers())
            .vm(vm(json!({"internal_metadata": {"volapi-nfs-version": 2}})))
            .run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining, ["v2_70", "old71"]);
        assert!(out.reason("nfs70").is_some_and(|m| m.starts_with("volapi nfs v2 support requires min platforms")));
        let out = Fixture::new(servers())
            .vm(vm(json!({"internal_metadata": {"volapi-nfs-version": "2"}})))
            .run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining.len(), 8);

        let out = Fixture::new(servers()).vm(vm(json!({"flexible_disk_size": 100}))).run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining, ["v2_70", "old71"]);
        assert!(out.reason("old65").is_some_and(|m| m.starts_with("Flexible disk size support requires")));
    }

    #[test]
    fn unset_defaults_skip_their_check() {
        let out = Fixture::new(servers())
            .vm(vm(json!({"volumes": [], "internal_metadata": {"volapi-nfs-version": 2}})))
            .defaults(json!({
                "filter_volapi_nfs_v2_min_platform": null,
                "filter_non_docker_nfs_volumes_automount_min_platform": ""
            }))
            .run(&HardFilterFeatureMinPlatform);
        assert_eq!(out.remaining.len(), 8);
        assert!(out.reasons.is_empty());
    }
}
