//! `validateDefaults` (`VALIDATION.md` §10): the allocator defaults, checked once at start-up.

use crate::js::Js;

use crate::model::schema::patterns::{self, is_platform, is_uuid};

const BOOLEAN: [&str; 5] = [
    "filter_headnode",
    "filter_min_resources",
    "filter_large_servers",
    "disable_override_overprovisioning",
    "filter_capness",
];

const NUMERIC: [&str; 10] = [
    "filter_vm_limit",
    "overprovision_ratio_cpu",
    "overprovision_ratio_ram",
    "overprovision_ratio_disk",
    "weight_current_platform",
    "weight_next_reboot",
    "weight_num_owner_zones",
    "weight_uniform_random",
    "weight_unreserved_disk",
    "weight_unreserved_ram",
];

/// `Err` holds the message (e.g. `Defaults filter_headnode is not boolean`). "Present"
/// means any value but `undefined`: a JSON `null` is present (so `filter_headnode: null` is
/// refused) — except for the two platform stamps, where dapi reads an explicit `null` as
/// "no such platform check" (the original refused it at start-up).
pub fn validate_defaults(defaults: &Js) -> Result<(), String> {
    if defaults.as_obj().is_none() {
        return Err("Defaults object is an invalid type".into());
    }
    for attr in BOOLEAN {
        if !matches!(defaults.get(attr), Js::Undefined | Js::Bool(_)) {
            return Err(format!("Defaults {attr} is not boolean"));
        }
    }
    for attr in NUMERIC {
        let v = defaults.get(attr);
        if !v.is_undefined() && v.num().is_nan() {
            return Err(format!("Defaults {attr} is not a number"));
        }
    }
    for attr in ["filter_docker_min_platform", "filter_flexible_disk_min_platform"] {
        let v = defaults.get(attr);
        if !matches!(v, Js::Undefined | Js::Null) && !patterns::test(v, is_platform) {
            return Err(format!("Defaults {attr} is not an ISO UTC timestamp"));
        }
    }
    let owners = defaults.get("filter_owner_server");
    if owners.truthy() {
        let Some(filters) = owners.as_obj() else {
            return Err("Defaults filter_owner_server is an invalid type".into());
        };
        if !filters.keys().all(|k| is_uuid(k)) {
            return Err("Defaults filter_owner_server keys are not all UUIDs".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: serde_json::Value) -> Result<(), String> {
        validate_defaults(&Js::from_json(&v))
    }

    #[test]
    fn the_originals_test_defaults_are_valid() {
        let defaults = json!({
            "filter_headnode": true, "filter_min_resources": true, "filter_large_servers": true,
            "filter_capness": true, "filter_docker_min_platform": "20130308T102805Z", "filter_vm_limit": true,
            "filter_owner_server": {"ee6ab4fc-2bcd-11e6-a757-28cfe91f7d53": "server.unreserved_ram > 256"},
            "disable_override_overprovisioning": true, "overprovision_ratio_cpu": 1.0,
            "overprovision_ratio_ram": 1.0, "overprovision_ratio_disk": 1.0, "weight_current_platform": 0.5,
            "weight_next_reboot": 0.5, "weight_num_owner_zones": 0.5, "weight_uniform_random": 0.5,
            "weight_unreserved_disk": 0.5, "weight_unreserved_ram": 0.5
        });
        assert_eq!(check(defaults), Ok(()));
        assert_eq!(check(json!({})), Ok(()));
    }

    #[test]
    fn every_rule_and_message() {
        let cases = [
            (json!(null), "Defaults object is an invalid type"),
            (json!([]), "Defaults object is an invalid type"),
            (json!("x"), "Defaults object is an invalid type"),
            (json!({"filter_headnode": "blah"}), "Defaults filter_headnode is not boolean"),
            (json!({"filter_headnode": null}), "Defaults filter_headnode is not boolean"),
            (json!({"filter_min_resources": 1}), "Defaults filter_min_resources is not boolean"),
            (json!({"filter_large_servers": "true"}), "Defaults filter_large_servers is not boolean"),
            (
                json!({"disable_override_overprovisioning": 0}),
                "Defaults disable_override_overprovisioning is not boolean",
            ),
            (json!({"filter_capness": [], "filter_headnode": 1}), "Defaults filter_headnode is not boolean"),
            (json!({"filter_capness": {}}), "Defaults filter_capness is not boolean"),
            (json!({"filter_vm_limit": "abc"}), "Defaults filter_vm_limit is not a number"),
            (json!({"overprovision_ratio_cpu": {}}), "Defaults overprovision_ratio_cpu is not a number"),
            (json!({"overprovision_ratio_ram": [1, 2]}), "Defaults overprovision_ratio_ram is not a number"),
            (json!({"overprovision_ratio_disk": "1x"}), "Defaults overprovision_ratio_disk is not a number"),
            (json!({"weight_current_platform": "x"}), "Defaults weight_current_platform is not a number"),
            (json!({"weight_next_reboot": "x"}), "Defaults weight_next_reboot is not a number"),
            (json!({"weight_num_owner_zones": "x"}), "Defaults weight_num_owner_zones is not a number"),
            (json!({"weight_uniform_random": "x"}), "Defaults weight_uniform_random is not a number"),
            (json!({"weight_unreserved_disk": "x"}), "Defaults weight_unreserved_disk is not a number"),
            (json!({"weight_unreserved_ram": "x", "filter_headnode": "x"}), "Defaults filter_headnode is not boolean"),
            (json!({"weight_unreserved_ram": "x"}), "Defaults weight_unreserved_ram is not a number"),
            (
                json!({"filter_docker_min_platform": "2013-03-08"}),
                "Defaults filter_docker_min_platform is not an ISO UTC timestamp",
            ),
            (
                json!({"filter_flexible_disk_min_platform": 20181206}),
                "Defaults filter_flexible_disk_min_platform is not an ISO UTC timestamp",
            ),
            (json!({"filter_owner_server": "x"}), "Defaults filter_owner_server is an invalid type"),
            (json!({"filter_owner_server": ["x"]}), "Defaults filter_owner_server is an invalid type"),
            (
                json!({"filter_owner_server": {"ee6ab4fc-2bcd-11e6-a757-28cfe91f7d53": "true", "admin": "true"}}),
                "Defaults filter_owner_server keys are not all UUIDs",
            ),
        ];
        for (input, message) in cases {
            assert_eq!(check(input.clone()), Err(message.to_string()), "{input}");
        }
    }

    #[test]
    fn lax_values_pass() {
        let ok = [
            json!({"filter_vm_limit": "224", "weight_unreserved_ram": "-1", "overprovision_ratio_cpu": null}),
            json!({"weight_next_reboot": true, "weight_num_owner_zones": "", "weight_uniform_random": [], "weight_unreserved_disk": [3]}),
            json!({"filter_docker_min_platform": ["20130308T102805Z"]}),
            json!({"filter_docker_min_platform": null, "filter_flexible_disk_min_platform": null}),
            json!({"filter_owner_server": null, "server_spread": 5, "minimum_free_disk": "x"}),
            json!({"filter_owner_server": ""}),
            json!({"filter_owner_server": {}}),
            json!({"filter_volapi_nfs_v2_min_platform": "garbage"}),
        ];
        for input in ok {
            assert_eq!(check(input.clone()), Ok(()), "{input}");
        }
    }
}
