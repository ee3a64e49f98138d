//! `hard-filter-platform-versions`: keeps servers whose SDC version and platform meet the
//! package's `min_platform` and the image's `requirements.min_platform`/`max_platform`
//! (in that order, each on the survivors of the previous one; reasons accumulate).
//!
//! The package's `max_platform` is never applied, as in the original. A map that is not an
//! object (the original throws; validation normally rejects it) fails the allocation with an
//! internal error naming it, except an array, which the original accepts and which then
//! holds no version key, and a package map still in JSON text, which is parsed as CNAPI's
//! validation would have parsed it (see [`PlatformMap::from_js`]).

use super::shared::platform::{filter_max_platforms, filter_min_platforms, PlatformMap};
use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterPlatformVersions;

static DECLARATION: Declaration = Declaration::new(
    "hard-filter-platform-versions",
    Kind::HardFilter,
    "Servers which meet image manifest and package platform requirements",
)
.per_server();

impl Plugin for HardFilterPlatformVersions {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let mut servers = servers.to_vec();
        if let Some(pkg) = req.package() {
            let min = &pkg.package.min_platform;
            if min.truthy() {
                let map = PlatformMap::from_js(min, "package.min_platform")?;
                servers = filter_min_platforms(req, &map, &servers, "Package", reasons);
            }
        }
        let requirements = &req.image.requirements;
        if !requirements.truthy() {
            return Ok(servers);
        }
        let min = requirements.get("min_platform");
        if min.truthy() {
            let map = PlatformMap::from_js(min, "image.requirements.min_platform")?;
            servers = filter_min_platforms(req, &map, &servers, "Image", reasons);
        }
        let max = requirements.get("max_platform");
        if max.truthy() {
            let map = PlatformMap::from_js(max, "image.requirements.max_platform")?;
            servers = filter_max_platforms(req, &map, &servers, "Image", reasons);
        }
        Ok(servers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{versioned, Fixture};
    use serde_json::{json, Value};

    /// Nine servers: SDC 6.5 / none (6.5) / 7.0 / 7.1 with older and newer platforms.
    fn servers() -> Vec<Value> {
        vec![
            versioned("s0", Some("6.5"), "20121218T203452Z"),
            versioned("s1", Some("6.5"), "20121210T203034Z"),
            versioned("s2", None, "20130129T122401Z"),
            versioned("s3", Some("7.0"), "20121218T203452Z"),
            versioned("s4", Some("7.0"), "20121210T203034Z"),
            versioned("s5", Some("7.0"), "20130129T122401Z"),
            versioned("s6", Some("7.1"), "20121218T203452Z"),
            versioned("s7", Some("7.1"), "20121210T203034Z"),
            versioned("s8", Some("7.1"), "20130129T122401Z"),
        ]
    }

    #[test]
    fn nothing_required_keeps_everyone() {
        let out = Fixture::new(servers()).package(json!({})).run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining.len(), 9);
        assert!(out.reasons.is_empty());
        let out = Fixture::new(servers()).image(json!({"requirements": {}})).run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining.len(), 9);
    }

    #[test]
    fn package_min_platform() {
        let out = Fixture::new(servers())
            .package(json!({"min_platform": {"7.0": "20121211T203034Z"}}))
            .run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining, ["s3", "s5", "s6", "s7", "s8"]);
        assert_eq!(
            out.reason("s2"),
            Some(
                r#"Package requires min platforms {"7.0":"20121211T203034Z"}, but server has {"6.5":"20130129T122401Z"}"#
            )
        );
        assert_eq!(out.reasons.len(), 4);
    }

    #[test]
    fn image_min_and_max_accumulate_in_order() {
        let out = Fixture::new(servers())
            .image(json!({"requirements": {
                "min_platform": {"6.5": "20121211T203034Z", "smartos": "20121217T203452Z"},
                "max_platform": {"7.1": "20121217T203452Z", "smartos": "20121211T203034Z"}
            }}))
            .run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining, ["s0", "s2", "s3", "s4", "s5", "s7"]);
        assert_eq!(
            out.reason_list(),
            [
                (
                    "s1".to_string(),
                    r#"Image requires min platforms {"6.5":"20121211T203034Z"}, but server has {"6.5":"20121210T203034Z"}"#
                        .to_string()
                ),
                (
                    "s6".to_string(),
                    r#"Image requires max platforms {"7.1":"20121217T203452Z"}, but server has {"7.1":"20121218T203452Z"}"#
                        .to_string()
                ),
                (
                    "s8".to_string(),
                    r#"Image requires max platforms {"7.1":"20121217T203452Z"}, but server has {"7.1":"20130129T122401Z"}"#
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn package_then_image() {
        let out = Fixture::new(servers())
            .package(json!({"min_platform": {"6.5": "20121210T203034Z"}}))
            .image(json!({"requirements": {
                "min_platform": {"6.5": "20121218T203452Z"},
                "max_platform": {"7.1": "20121217T203452Z"}
            }}))
            .run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining, ["s0", "s2", "s3", "s4", "s5", "s7"]);
        assert_eq!(out.reasons.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["s1", "s6", "s8"]);
    }

    #[test]
    fn min_and_max_on_the_same_version() {
        let out = Fixture::new(servers())
            .image(json!({"requirements": {
                "min_platform": {"6.5": "20121211T203034Z"},
                "max_platform": {"6.5": "20130128T203034Z"}
            }}))
            .run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining, ["s0"]);
        assert_eq!(
            out.reason("s4"),
            Some(
                r#"Image requires max platforms {"6.5":"20130128T203034Z"}, but server has {"7.0":"20121210T203034Z"}"#
            )
        );
    }

    #[test]
    fn maps_that_are_not_objects() {
        let f = Fixture::new(servers()).package(json!({"min_platform": 7}));
        let mut req = f.request();
        let mut reasons = Reasons::default();
        let err = HardFilterPlatformVersions.run(&mut req, &[0, 1], &mut reasons).expect_err("not a map");
        assert!(err.0.contains("package.min_platform"), "{err}");
        // Falsy maps are not applied at all; a JSON text package map is read as CNAPI parsed it.
        let out = Fixture::new(servers()).package(json!({"min_platform": ""})).run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining.len(), 9);
        let out = Fixture::new(servers())
            .package(json!({"min_platform": "{\"7.0\":\"20121211T203034Z\"}"}))
            .run(&HardFilterPlatformVersions);
        assert_eq!(out.remaining.len(), 5);
    }
}
