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

/// A reader that reads nothing: asked for a struct, it notes the struct's field names
/// (which a derived reader hands over) and gives up.
struct FieldNames(&'static [&'static str]);

impl<'de> serde::Deserializer<'de> for &mut FieldNames {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("only a struct's field names are read"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        self.deserialize_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
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
    /// Every key a config's `defaults` may hold, as the struct's reader knows them (so a
    /// config can name the one a typo meant).
    pub fn keys() -> &'static [&'static str] {
        static KEYS: std::sync::OnceLock<&'static [&'static str]> = std::sync::OnceLock::new();
        KEYS.get_or_init(|| {
            let mut asked = FieldNames(&[]);
            let _ = Defaults::deserialize(&mut asked);
            asked.0
        })
    }

    /// Builds the defaults from the config's `defaults` object: read as CNAPI read its
    /// metadata ([`as_cnapi_read`]), CNAPI's values fill the gaps, then `validateDefaults`,
    /// dapi's own checks and the owner-filter compiler check the result.
    pub fn from_json(value: &serde_json::Value) -> Result<Defaults, String> {
        let mut given = value.clone();
        let seed = take_seed(&mut given)?;
        let mut merged = as_cnapi_read(&given);
        validate_defaults(&Js::from_json(&merged))?;
        if let (Some(obj), serde_json::Value::Object(base)) = (merged.as_object_mut(), cnapi_defaults()) {
            for (key, val) in base {
                obj.entry(key).or_insert(val);
            }
        }
        let mut defaults: Defaults = serde_json::from_value(merged.clone()).map_err(|e| format!("Defaults: {e}"))?;
        // A score adds at most each weight's magnitude: past the double range it would be
        // Infinity (the answer's `score: null`, a tie between every server).
        for (name, weight) in defaults.weights() {
            if !weight.num().is_finite() {
                return Err(format!("Defaults {name} is not a finite number"));
            }
        }
        if !defaults.weights().iter().map(|(_, w)| w.num().abs()).sum::<f64>().is_finite() {
            return Err("Defaults weight_*: their magnitudes add up past the largest number (1.8e308)".into());
        }
        defaults.seed = seed;
        if let (Some(seed), Some(obj)) = (seed, merged.as_object_mut()) {
            obj.insert("seed".into(), seed.into());
        }
        defaults.json = merged;
        defaults.owner_filters = OwnerFilters::compile(&defaults.filter_owner_server)?;
        Ok(defaults)
    }

    /// The six scorers' weights, by name.
    fn weights(&self) -> [(&'static str, &Js); 6] {
        [
            ("weight_current_platform", &self.weight_current_platform),
            ("weight_next_reboot", &self.weight_next_reboot),
            ("weight_num_owner_zones", &self.weight_num_owner_zones),
            ("weight_uniform_random", &self.weight_uniform_random),
            ("weight_unreserved_disk", &self.weight_unreserved_disk),
            ("weight_unreserved_ram", &self.weight_unreserved_ram),
        ]
    }

    /// CNAPI's defaults with nothing overridden.
    pub fn cnapi() -> Defaults {
        match Defaults::from_json(&serde_json::json!({})) {
            Ok(d) => d,
            Err(e) => unreachable!("built-in defaults are valid: {e}"),
        }
    }
}

/// The defaults CNAPI took from its SAPI metadata (`CNAPI_CONTRACT.md` §2.1), where `""` is
/// a knob left unset. The four NFS and flexible-disk platform stamps are not among them
/// (always CNAPI's hard-coded values): an empty one keeps the allocator's reading, as an
/// unknown key keeps its refusal.
const FROM_METADATA: [&str; 19] = [
    "server_spread",
    "filter_capness",
    "filter_headnode",
    "filter_min_resources",
    "filter_large_servers",
    "filter_docker_min_platform",
    "filter_vm_limit",
    "filter_owner_server",
    "disable_override_overprovisioning",
    "overprovision_ratio_cpu",
    "overprovision_ratio_ram",
    "overprovision_ratio_disk",
    "minimum_free_disk",
    "weight_current_platform",
    "weight_next_reboot",
    "weight_num_owner_zones",
    "weight_uniform_random",
    "weight_unreserved_disk",
    "weight_unreserved_ram",
];

/// The defaults as CNAPI read its SAPI metadata into them (`CNAPI_CONTRACT.md` §2.2), so
/// that a config carried over in that form means what it meant there: `""` (metadata left
/// empty) is the hard-coded default, `"true"` and `"false"` are booleans, and
/// `filter_owner_server` given as JSON text (as SAPI holds it) is that JSON. An object CNAPI
/// built holds none of these, so it is read unchanged.
fn as_cnapi_read(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let Value::Object(given) = value else { return value.clone() };
    let mut read = serde_json::Map::with_capacity(given.len());
    for (key, val) in given {
        let val = match val.as_str() {
            Some("") if FROM_METADATA.contains(&key.as_str()) => continue,
            Some("true") => Value::Bool(true),
            Some("false") => Value::Bool(false),
            Some(text) if key == "filter_owner_server" => match serde_json::from_str(text) {
                Ok(owners @ Value::Object(_)) => owners,
                _ => val.clone(),
            },
            _ => val.clone(),
        };
        read.insert(key.clone(), val);
    }
    Value::Object(read)
}

/// dapi's `seed`, taken out of the defaults: a whole number (`7`, `7.0`, `7e2`, as a body's
/// `seed` reads), or one written as text; `""` is none.
fn take_seed(defaults: &mut serde_json::Value) -> Result<Option<u64>, String> {
    let Some(seed) = defaults.as_object_mut().and_then(|d| d.remove("seed")) else { return Ok(None) };
    let whole = |f: f64| (f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64);
    let read = match &seed {
        serde_json::Value::Null => return Ok(None),
        serde_json::Value::String(s) if s.trim().is_empty() => return Ok(None),
        serde_json::Value::Number(n) => n.as_u64().or_else(|| n.as_f64().and_then(whole)),
        serde_json::Value::String(s) => s.trim().parse().ok().or_else(|| s.trim().parse().ok().and_then(whole)),
        _ => None,
    };
    read.map(Some).ok_or_else(|| format!("Defaults seed is not a whole number from 0 to {}: {seed}", u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_the_ones_the_reader_takes() {
        let keys = Defaults::keys();
        assert!(keys.contains(&"filter_headnode") && keys.contains(&"weight_unreserved_ram") && keys.contains(&"seed"));
        assert!(!keys.contains(&"owner_filters") && !keys.contains(&"json"), "not read from a config");
        for key in keys {
            let value = if *key == "seed" { serde_json::json!(1) } else { serde_json::Value::Null };
            let mut one = serde_json::Map::new();
            one.insert(key.to_string(), value);
            let read = serde_json::from_value::<Defaults>(serde_json::Value::Object(one)).map(|_| ());
            assert!(read.as_ref().err().is_none_or(|e| !e.to_string().contains("unknown field")), "{key}: {read:?}");
        }
    }

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
    fn metadata_as_sapi_holds_it_reads_as_cnapi_read_it() {
        let owners = r#"{"930896af-bf8c-48d4-885c-6573a94b1853": "server.hostname === 'cn1'"}"#;
        let d = Defaults::from_json(&serde_json::json!({
            "filter_headnode": "false", "filter_capness": "true", "weight_unreserved_ram": "",
            "server_spread": "", "filter_docker_min_platform": "", "filter_owner_server": owners, "seed": "42"
        }))
        .expect("metadata as SAPI holds it");
        assert_eq!(d.filter_headnode, Js::Bool(false));
        assert_eq!(d.filter_capness, Js::Bool(true));
        assert_eq!(d.weight_unreserved_ram, Js::Num(2.0), "empty: the hard-coded default");
        assert_eq!(d.server_spread, Js::Undefined);
        assert_eq!(d.filter_docker_min_platform, Js::Undefined);
        assert!(d.filter_owner_server.as_obj().is_some(), "{:?}", d.filter_owner_server);
        assert_eq!(d.seed, Some(42));
        assert_eq!(d.json["seed"], 42);
        // Any other text for a boolean is refused, as validateDefaults refused it.
        let err = Defaults::from_json(&serde_json::json!({"filter_headnode": "yes"})).expect_err("not a boolean");
        assert_eq!(err, "Defaults filter_headnode is not boolean");
    }

    #[test]
    fn a_weight_must_be_finite_and_a_seed_whole() {
        for weight in ["Infinity", "-Infinity", "1e999"] {
            let err = Defaults::from_json(&serde_json::json!({"weight_unreserved_ram": weight})).expect_err(weight);
            assert_eq!(err, "Defaults weight_unreserved_ram is not a finite number");
        }
        for seed in [serde_json::json!("abc"), serde_json::json!(-1), serde_json::json!(1.5), serde_json::json!([1])] {
            let err = Defaults::from_json(&serde_json::json!({ "seed": seed })).expect_err("not a seed");
            assert!(err.starts_with("Defaults seed is not a whole number"), "{err}");
        }
        for seed in [serde_json::json!(7), serde_json::json!(7.0), serde_json::json!("7"), serde_json::json!("7e0")] {
            assert_eq!(Defaults::from_json(&serde_json::json!({ "seed": seed })).map(|d| d.seed), Ok(Some(7)));
        }
        assert_eq!(Defaults::from_json(&serde_json::json!({"seed": ""})).map(|d| d.seed), Ok(None));
        let err = Defaults::from_json(&serde_json::json!({"seed": "true"})).expect_err("not a seed");
        assert!(err.ends_with(": \"true\""), "the value as written: {err}");
        // Each finite, but a score adding them would not be.
        let err = Defaults::from_json(
            &serde_json::json!({"weight_unreserved_ram": "1e308", "weight_unreserved_disk": 1e308}),
        )
        .expect_err("past the range together");
        assert!(err.starts_with("Defaults weight_*: their magnitudes add up past"), "{err}");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = Defaults::from_json(&serde_json::json!({"filter_headnodes": true})).expect_err("typo");
        assert!(err.contains("filter_headnodes"), "{err}");
        // Left empty too: an empty value is dropped for CNAPI's own knobs only.
        let err = Defaults::from_json(&serde_json::json!({"filter_headnodes": ""})).expect_err("typo");
        assert!(err.contains("filter_headnodes"), "{err}");
        // The flexible-disk stamp keeps the allocator's reading of "": not a stamp.
        let err =
            Defaults::from_json(&serde_json::json!({"filter_flexible_disk_min_platform": ""})).expect_err("empty");
        assert_eq!(err, "Defaults filter_flexible_disk_min_platform is not an ISO UTC timestamp");
    }
}
