//! Platform-version predicates (spec §2.2): does a server's SDC version and live image satisfy
//! a `{"<sdc version>": "<platform stamp>"}` minimum or maximum map?
//!
//! Everything is compared the way the original compares it: with JavaScript's `<`/`>` on
//! whatever values the map and sysinfo hold (strings compare lexicographically, so
//! `"10.0" < "7.0"`). A map's keys that are not `N.N` version numbers are dropped before use
//! (the original deletes them from the request object; cleaning is idempotent, so a cleaned
//! copy gives the same checks and the same messages).
//!
//! A server's SDC version is `sysinfo["SDC Version"]` when truthy, else `"6.5"`; its platform
//! is `sysinfo["Live Image"]`. A server without sysinfo (the original throws) reads as an empty
//! sysinfo: version `6.5`, no platform.

use std::borrow::Cow;

use crate::engine::PluginError;
use crate::engine::{Reasons, Request, ServerId};
use crate::js::{js_ge, js_gt, js_le, js_lt, str_lt, Js, JsObject};

/// A cleaned platform map: only `N.N` keys, in the order the caller sent them.
#[derive(Debug, Clone, PartialEq)]
pub struct PlatformMap {
    map: JsObject,
}

/// `^\d+\.\d+$` (ASCII digits, nothing after the second number).
fn is_version(key: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    matches!(key.split_once('.'), Some((major, minor)) if digits(major) && digits(minor))
}

impl PlatformMap {
    /// Reads a (truthy) map from the request; `what` names it in errors (`pkg.min_platform`).
    ///
    /// * an object: its version keys are kept;
    /// * an array: no key survives the cleaning (as in the original, which accepts arrays),
    ///   so the check passes every server;
    /// * a string (a package map that validation did not parse): parsed as JSON text, as
    ///   CNAPI's validation would have done, and it must then be an object;
    /// * anything else: the original throws; this is an internal error naming the field.
    pub fn from_js(value: &Js, what: &str) -> Result<PlatformMap, PluginError> {
        match value {
            Js::Obj(o) => Ok(PlatformMap::clean(o)),
            Js::Arr(_) => Ok(PlatformMap { map: JsObject::new() }),
            Js::Str(text) => match crate::js::json::from_str::<Js>(text) {
                Ok(Js::Obj(o)) => Ok(PlatformMap::clean(&o)),
                _ => Err(PluginError(format!("{what} is not an object: {}", value.stringify()))),
            },
            other => Err(PluginError(format!("{what} is not an object: {}", other.stringify()))),
        }
    }

    /// The one-entry map `{"7.0": platform}` the feature checks use.
    pub fn single(platform: &Js) -> PlatformMap {
        let mut map = JsObject::new();
        map.insert("7.0".into(), platform.clone());
        PlatformMap { map }
    }

    fn clean(o: &JsObject) -> PlatformMap {
        PlatformMap { map: o.iter().filter(|(k, _)| is_version(k)).map(|(k, v)| (k.clone(), v.clone())).collect() }
    }

    /// The version keys sorted as JS `Array.prototype.sort()` sorts strings.
    fn sorted_versions(&self) -> Vec<&str> {
        let mut keys: Vec<&str> = self.map.keys().map(|k| &**k).collect();
        keys.sort_by(|a, b| {
            if str_lt(a, b) {
                std::cmp::Ordering::Less
            } else if str_lt(b, a) {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        });
        keys
    }

    /// `JSON.stringify` of the cleaned map.
    pub fn json(&self) -> String {
        Js::obj(self.map.clone()).stringify()
    }

    /// `map[String(version)]` (`undefined` when absent).
    fn at(&self, version: &Js) -> &Js {
        self.map.get(version.to_js_string().as_str()).unwrap_or(&crate::js::UNDEFINED)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// JS relational operators convert objects and arrays to strings first (ToPrimitive).
fn prim(v: &Js) -> Cow<'_, Js> {
    match v {
        Js::Arr(_) | Js::Obj(_) => Cow::Owned(Js::Str(v.to_js_string().into())),
        other => Cow::Borrowed(other),
    }
}

fn lt(a: &Js, b: &Js) -> bool {
    js_lt(&prim(a), &prim(b))
}

fn gt(a: &Js, b: &Js) -> bool {
    js_gt(&prim(a), &prim(b))
}

/// The server's `(SDC version, live image)` as the original reads them.
fn server_facts(req: &Request<'_>, id: ServerId) -> (Js, Js) {
    let sysinfo = req.server(id).sysinfo();
    let version = if sysinfo.sdc_version.truthy() { sysinfo.sdc_version.clone() } else { Js::str("6.5") };
    (version, sysinfo.live_image.clone())
}

/// `{"<version>":"<platform>"}` as the original concatenates it (no escaping).
fn server_has(version: &Js, platform: &Js) -> String {
    format!("{{\"{}\":\"{}\"}}", version.to_js_string(), platform.to_js_string())
}

/// Minimum check: keeps the servers meeting the minimum platforms of `map`; each removed
/// server gets `<label> requires min platforms <map>, but server has {"<v>":"<p>"}`.
pub fn filter_min_platforms(
    req: &Request<'_>,
    map: &PlatformMap,
    servers: &[ServerId],
    label: &str,
    reasons: &mut Reasons,
) -> Vec<ServerId> {
    let sorted = map.sorted_versions();
    // The highest version, and the lowest of those left once it is taken (absent with one key).
    let Some((&max, rest)) = sorted.split_last() else { return servers.to_vec() };
    let max = Js::str(max);
    let min = rest.first().map_or(Js::Undefined, |&v| Js::str(v));
    let json = map.json();
    let mut kept = Vec::with_capacity(servers.len());
    for &id in servers {
        let (version, platform) = server_facts(req, id);
        let required = map.at(&version);
        let newer_version = gt(&version, &max);
        let new_enough = js_ge(&prim(&platform), &prim(required));
        let between = !required.truthy() && lt(&min, &version) && lt(&version, &max);
        if newer_version || new_enough || between {
            kept.push(id);
        } else {
            let msg =
                format!("{label} requires min platforms {json}, but server has {}", server_has(&version, &platform));
            reasons.set(req.key(id), msg);
        }
    }
    kept
}

/// Maximum check: keeps the servers within the maximum platforms of `map`; each removed
/// server gets `<label> requires max platforms <map>, but server has {"<v>":"<p>"}`.
///
/// Not the mirror image of the minimum check: with a single key nothing above that version
/// is accepted.
pub fn filter_max_platforms(
    req: &Request<'_>,
    map: &PlatformMap,
    servers: &[ServerId],
    label: &str,
    reasons: &mut Reasons,
) -> Vec<ServerId> {
    let sorted = map.sorted_versions();
    // The lowest version, and the highest of those left once it is taken (absent with one key).
    let Some((&min, rest)) = sorted.split_first() else { return servers.to_vec() };
    let min = Js::str(min);
    let max = rest.last().map_or(Js::Undefined, |&v| Js::str(v));
    let json = map.json();
    let mut kept = Vec::with_capacity(servers.len());
    for &id in servers {
        let (version, platform) = server_facts(req, id);
        let allowed = map.at(&version);
        let older_version = lt(&version, &min);
        let old_enough = js_le(&prim(&platform), &prim(allowed));
        let between = !allowed.truthy() && lt(&min, &version) && lt(&version, &max);
        if older_version || old_enough || between {
            kept.push(id);
        } else {
            let msg =
                format!("{label} requires max platforms {json}, but server has {}", server_has(&version, &platform));
            reasons.set(req.key(id), msg);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    /// A server with the given SDC Version (`None`: sysinfo lacks it) and Live Image.
    fn versioned(uuid: &str, version: Option<&str>, platform: &str) -> Value {
        let mut sysinfo = json!({"Live Image": platform, "Network Interfaces": {}});
        if let Some(v) = version {
            sysinfo["SDC Version"] = json!(v);
        }
        with(server(uuid), json!({ "sysinfo": sysinfo }))
    }

    fn map(v: Value) -> PlatformMap {
        PlatformMap::from_js(&Js::from_json(&v), "test map").expect("a map")
    }

    fn run(
        servers: Vec<Value>,
        m: &PlatformMap,
        check: fn(&Request<'_>, &PlatformMap, &[ServerId], &str, &mut Reasons) -> Vec<ServerId>,
    ) -> (Vec<String>, Reasons) {
        let f = Fixture::new(servers);
        let req = f.request();
        let all: Vec<ServerId> = (0..req.servers.len()).collect();
        let mut reasons = Reasons::default();
        let kept = check(&req, m, &all, "Image", &mut reasons);
        (kept.iter().map(|&id| req.key(id).to_string()).collect(), reasons)
    }

    #[test]
    fn version_keys_are_n_dot_n_only() {
        assert!(is_version("7.0") && is_version("10.12") && is_version("0.0"));
        for bad in ["7", "7.", ".0", "7.0.1", "smartos", "7.0\n", " 7.0", "7.x", "٧.٠", ""] {
            assert!(!is_version(bad), "{bad:?}");
        }
        let m = map(json!({"smartos": "x", "7.1": "b", "6.5": "a", "7": "c"}));
        assert_eq!(m.json(), r#"{"7.1":"b","6.5":"a"}"#);
        assert_eq!(m.sorted_versions(), ["6.5", "7.1"]);
    }

    #[test]
    fn min_check_worked_example() {
        let servers = vec![
            versioned("a", Some("6.5"), "20121218T203452Z"),
            versioned("b", None, "20130129T122401Z"),
            versioned("c", Some("7.0"), "20121210T203034Z"),
            versioned("d", Some("7.0"), "20121218T203452Z"),
            versioned("e", Some("7.1"), "20121210T203034Z"),
            versioned("f", Some("10.0"), "20991210T203034Z"),
        ];
        let (kept, reasons) = run(servers, &map(json!({"7.0": "20121211T203034Z"})), filter_min_platforms);
        assert_eq!(kept, ["d", "e"]);
        let say =
            |has: &str| format!("Image requires min platforms {{\"7.0\":\"20121211T203034Z\"}}, but server has {has}");
        assert_eq!(reasons.get("a"), Some(say(r#"{"6.5":"20121218T203452Z"}"#).as_str()));
        assert_eq!(reasons.get("b"), Some(say(r#"{"6.5":"20130129T122401Z"}"#).as_str()));
        assert_eq!(reasons.get("c"), Some(say(r#"{"7.0":"20121210T203034Z"}"#).as_str()));
        // "10.0" sorts before "7.0", and the map has no "10.0" entry to compare platforms with.
        assert_eq!(reasons.get("f"), Some(say(r#"{"10.0":"20991210T203034Z"}"#).as_str()));
        assert_eq!(reasons.len(), 4);
    }

    #[test]
    fn max_check_rejects_newer_versions_with_a_single_key() {
        let servers = vec![
            versioned("a", Some("6.5"), "20991218T203452Z"),
            versioned("b", Some("7.0"), "20121210T203034Z"),
            versioned("c", Some("7.0"), "20121218T203452Z"),
            versioned("d", Some("7.1"), "20001210T203034Z"),
        ];
        let (kept, reasons) = run(servers, &map(json!({"7.0": "20121211T203034Z"})), filter_max_platforms);
        assert_eq!(kept, ["a", "b"]);
        assert_eq!(
            reasons.get("d"),
            Some(
                r#"Image requires max platforms {"7.0":"20121211T203034Z"}, but server has {"7.1":"20001210T203034Z"}"#
            )
        );
        assert_eq!(reasons.len(), 2);
    }

    #[test]
    fn versions_between_keys_pass_without_their_own_entry() {
        let m = map(json!({"6.5": "20130101T122401Z", "7.1": "20121217T203452Z"}));
        let servers = vec![
            versioned("a", Some("7.0"), "20990101T000000Z"),
            versioned("b", None, "20130129T122401Z"),
            versioned("c", Some("7.1"), "20121210T203034Z"),
            versioned("d", Some("7.1"), "20121218T203452Z"),
        ];
        let (kept, reasons) = run(servers, &m, filter_max_platforms);
        assert_eq!(kept, ["a", "c"]);
        assert_eq!(
            reasons.get("b"),
            Some(
                r#"Image requires max platforms {"6.5":"20130101T122401Z","7.1":"20121217T203452Z"}, but server has {"6.5":"20130129T122401Z"}"#
            )
        );
        let servers = vec![
            versioned("a", Some("7.0"), "20000101T000000Z"),
            versioned("b", Some("6.5"), "20121210T203034Z"),
            versioned("c", Some("7.1"), "20121210T203034Z"),
        ];
        let m = map(json!({"6.5": "20121211T203034Z", "7.1": "20121211T203034Z"}));
        let (kept, _) = run(servers, &m, filter_min_platforms);
        assert_eq!(kept, ["a"]);
    }

    #[test]
    fn empty_maps_and_missing_platforms() {
        let servers = vec![versioned("a", Some("7.0"), "x"), with(server("b"), json!({"sysinfo": null}))];
        let (kept, reasons) = run(servers.clone(), &map(json!({"smartos": "1"})), filter_min_platforms);
        assert_eq!((kept.len(), reasons.len()), (2, 0));
        let (kept, _) = run(servers.clone(), &map(json!([1, 2])), filter_max_platforms);
        assert_eq!(kept.len(), 2);
        // Missing sysinfo: version 6.5, platform undefined (never compares true).
        let (kept, reasons) = run(servers, &map(json!({"6.5": "20000101T000000Z"})), filter_min_platforms);
        assert_eq!(kept, ["a"]);
        assert_eq!(
            reasons.get("b"),
            Some(r#"Image requires min platforms {"6.5":"20000101T000000Z"}, but server has {"6.5":"undefined"}"#)
        );
    }

    #[test]
    fn map_shapes() {
        let parsed = PlatformMap::from_js(&Js::str(r#"{"7.0":"20200101T000000Z"}"#), "pkg.min_platform");
        assert_eq!(parsed.map(|m| m.json()), Ok(r#"{"7.0":"20200101T000000Z"}"#.to_string()));
        let err = PlatformMap::from_js(&Js::Num(5.0), "pkg.min_platform").expect_err("a number is no map");
        assert!(err.0.contains("pkg.min_platform"), "{err}");
        assert!(PlatformMap::from_js(&Js::str("nope"), "x").is_err());
        assert!(PlatformMap::single(&Js::str("P")).json() == r#"{"7.0":"P"}"#);
    }

    #[test]
    fn non_string_values_compare_as_javascript_does() {
        // A number platform against a string requirement compares numerically: NaN → false.
        let servers = vec![versioned("a", Some("7.0"), "20200101T000000Z")];
        let (kept, _) = run(servers, &map(json!({"7.0": 5})), filter_min_platforms);
        assert!(kept.is_empty());
        let servers = vec![versioned("a", Some("7.0"), "20200101T000000Z")];
        let (kept, _) = run(servers, &map(json!({"7.0": 5})), filter_max_platforms);
        assert!(kept.is_empty());
        // An array version compares as its string form ("7.1" > "7.0"), as relational
        // operators convert objects to strings first.
        let listed = with(server("a"), json!({"sysinfo": {"SDC Version": ["7.1"], "Live Image": "1"}}));
        let (kept, _) = run(vec![listed], &map(json!({"7.0": "2"})), filter_min_platforms);
        assert_eq!(kept, ["a"]);
    }
}
