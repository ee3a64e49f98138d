//! Allocator defaults: the tunables every plugin may read (`filter_*`, `weight_*`,
//! `overprovision_ratio_*`, ...), as CNAPI built them.
//!
//! Values stay [`Js`] because CNAPI passed many of them as strings (`"224"`, `"0.5"`) and the
//! plugins coerce them the way the original did. A key the config omits takes CNAPI's
//! hard-coded default, so all six weights are always set (the original produces NaN scores
//! without them); an explicit `null` disables a platform check.

use serde::Deserialize;

use crate::js::owner_filter::OwnerFilters;
use crate::js::Js;
use validate::validate_defaults;

mod validate;

/// Validated allocator defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Defaults {
    pub disable_override_overprovisioning: Js,
    pub filter_capness: Js,
    pub filter_headnode: Js,
    pub filter_min_resources: Js,
    pub filter_large_servers: Js,
    pub filter_vm_limit: Js,
    pub filter_docker_min_platform: Js,
    pub filter_docker_nfs_volumes_automount_min_platform: Js,
    pub filter_non_docker_nfs_volumes_automount_min_platform: Js,
    pub filter_volapi_nfs_v2_min_platform: Js,
    pub filter_flexible_disk_min_platform: Js,
    /// Owner uuid → expression over `server`; compiled into [`Defaults::owner_filters`].
    pub filter_owner_server: Js,
    /// Minimum free pool space, MiB.
    pub minimum_free_disk: Js,
    pub overprovision_ratio_cpu: Js,
    pub overprovision_ratio_ram: Js,
    pub overprovision_ratio_disk: Js,
    /// Deprecated spread (`min-ram`, `max-ram`, `min-owner`, `random`).
    pub server_spread: Js,
    pub weight_current_platform: Js,
    pub weight_next_reboot: Js,
    pub weight_num_owner_zones: Js,
    pub weight_uniform_random: Js,
    pub weight_unreserved_disk: Js,
    pub weight_unreserved_ram: Js,
    /// dapi only: seed of `score-uniform-random` (random per request when unset).
    pub seed: Option<u64>,
    #[serde(skip)]
    pub owner_filters: OwnerFilters,
    /// The defaults as one JSON object (CNAPI's values filling the gaps), for plugins that
    /// read them whole (custom plugins get them as `opts.defaults`).
    #[serde(skip)]
    pub json: serde_json::Value,
}

/// CNAPI's hard-coded defaults, applied to keys the config leaves out.
fn cnapi_defaults() -> serde_json::Value {
    serde_json::json!({
        "disable_override_overprovisioning": false,
        "filter_capness": true,
        "filter_headnode": true,
        "filter_min_resources": true,
        "filter_large_servers": true,
        "filter_docker_nfs_volumes_automount_min_platform": "20160613T123039Z",
        "filter_non_docker_nfs_volumes_automount_min_platform": "20170925T211846Z",
        "filter_volapi_nfs_v2_min_platform": "20200213T123742Z",
        "filter_flexible_disk_min_platform": "20181206T190647Z",
        "weight_current_platform": 1,
        "weight_next_reboot": 0.5,
        "weight_num_owner_zones": 0,
        "weight_uniform_random": 0.5,
        "weight_unreserved_disk": 1,
        "weight_unreserved_ram": 2
    })
}

impl Defaults {
    /// Builds the defaults from the config's `defaults` object: CNAPI's values fill the gaps,
    /// then `validateDefaults` and the owner-filter compiler check the result.
    pub fn from_json(value: &serde_json::Value) -> Result<Defaults, String> {
        validate_defaults(&Js::from_json(value))?;
        let mut merged = value.clone();
        if let (Some(obj), serde_json::Value::Object(base)) = (merged.as_object_mut(), cnapi_defaults()) {
            for (key, val) in base {
                obj.entry(key).or_insert(val);
            }
        }
        let mut defaults: Defaults = serde_json::from_value(merged.clone()).map_err(|e| format!("Defaults: {e}"))?;
        defaults.json = merged;
        defaults.owner_filters = OwnerFilters::compile(&defaults.filter_owner_server)?;
        Ok(defaults)
    }

    /// CNAPI's defaults with nothing overridden.
    pub fn cnapi() -> Defaults {
        match Defaults::from_json(&serde_json::json!({})) {
            Ok(d) => d,
            Err(e) => unreachable!("built-in defaults are valid: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_take_cnapi_values_and_null_stays_null() {
        let d = Defaults::from_json(
            &serde_json::json!({"weight_unreserved_ram": "-1", "filter_flexible_disk_min_platform": null}),
        )
        .expect("valid defaults");
        assert_eq!(d.weight_unreserved_ram, Js::str("-1"));
        assert_eq!(d.weight_next_reboot, Js::Num(0.5));
        assert_eq!(d.filter_flexible_disk_min_platform, Js::Null);
        assert_eq!(d.filter_vm_limit, Js::Undefined);
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = Defaults::from_json(&serde_json::json!({"filter_headnodes": true})).expect_err("typo");
        assert!(err.contains("filter_headnodes"), "{err}");
    }
}
