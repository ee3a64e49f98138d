//! `hard-filter-traits`: keeps servers whose `traits` match the traits requested by the VM
//! (or, when the VM has none, its package) merged with the image's.
//!
//! Matching is exact-set: a server must carry exactly as many traits as requested, each one
//! compatible (booleans equal, strings equal or contained, arrays intersecting); with nothing
//! requested only servers without traits pass. Traits are read as JavaScript reads them
//! (`Object.keys`, property reads), so odd shapes behave as in the original.
//!
//! Decision: a server whose `traits` is `null` counts as having no traits when none are
//! requested (the original throws there); when traits are requested it is rejected like a
//! server without traits (`... but server has null`), as the original does.

use std::borrow::Cow;

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::js::{strict_eq, Js, JsObject};

pub struct HardFilterTraits;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-traits", Kind::HardFilter, "Servers with correct traits");

/// The traits requested (VM or package, merged with the image's) and their names.
#[derive(Default)]
pub struct Requested {
    traits: Js,
    names: Vec<String>,
}

impl ServerFilter for HardFilterTraits {
    type Prepared = Requested;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<Requested>, PluginError> {
        // Any truthy VM traits (even `{}`) hide the package's completely.
        let vm_traits = match (&req.vm.traits, req.package()) {
            (t, _) if t.truthy() => t,
            (_, Some(pkg)) => &pkg.package.traits,
            (t, None) => t,
        };
        let requested = merge(vm_traits, &req.image.traits);
        let names = requested.as_deref().map(keys).unwrap_or_default();
        let traits = requested.map_or(Js::Undefined, Cow::into_owned);
        Ok(PreFilter::Run(Requested { traits, names }))
    }
    fn filter(&self, req: &Request<'_>, requested: &Requested, id: ServerId) -> Verdict {
        let traits = &req.server(id).traits;
        let names = &requested.names;
        if names.is_empty() {
            let traitless = matches!(traits, Js::Undefined | Js::Null) || keys(traits).is_empty();
            if traitless {
                return Verdict::Keep;
            }
            return Verdict::fail(format!(
                "Combined vm/pkg/img require no traits but server has {}",
                traits.stringify()
            ));
        }
        if !traits.truthy() || keys(traits).len() != names.len() {
            return Verdict::fail(format!(
                "Combined vm/pkg/img traits require {} but server has {}",
                requested.traits.stringify(),
                traits.stringify()
            ));
        }
        let failure = names.iter().find_map(|name| {
            trait_mismatch(&property(traits, name), &property(&requested.traits, name))
                .map(|why| format!("{name} comparison failed: {why}"))
        });
        match failure {
            Some(why) => Verdict::fail(why),
            None => Verdict::Keep,
        }
    }
}

/// Requested traits: neither side → none; one side → that value as it is; both → a new
/// object with the VM-side keys, then the image's (overwriting in place, or appended).
fn merge<'a>(vm: &'a Js, image: &'a Js) -> Option<Cow<'a, Js>> {
    match (vm.truthy(), image.truthy()) {
        (false, false) => None,
        (false, true) => Some(Cow::Borrowed(image)),
        (true, false) => Some(Cow::Borrowed(vm)),
        (true, true) => {
            let mut merged = JsObject::new();
            for side in [vm, image] {
                for key in keys(side) {
                    let value = property(side, &key).into_owned();
                    merged.insert(key.into(), value);
                }
            }
            Some(Cow::Owned(Js::obj(merged)))
        }
    }
}

/// `Object.keys(x)` (also what `for..in` visits here): an object's keys, the indexes of an
/// array or a string, nothing for other values.
fn keys(v: &Js) -> Vec<String> {
    match v {
        Js::Obj(o) => o.keys().map(|k| k.to_string()).collect(),
        Js::Arr(a) => (0..a.len()).map(|i| i.to_string()).collect(),
        Js::Str(s) => (0..s.encode_utf16().count()).map(|i| i.to_string()).collect(),
        _ => Vec::new(),
    }
}

/// `x[key]` on a value that is not `null`/`undefined`: object members, array elements and
/// string characters (and `length`); `undefined` otherwise.
fn property<'a>(v: &'a Js, key: &str) -> Cow<'a, Js> {
    let index = || key.parse::<usize>().ok().filter(|i| i.to_string() == key);
    match v {
        Js::Obj(o) => o.get(key).map_or(Cow::Owned(Js::Undefined), Cow::Borrowed),
        Js::Arr(a) if key == "length" => Cow::Owned(Js::Num(a.len() as f64)),
        Js::Arr(a) => index().and_then(|i| a.get(i)).map_or(Cow::Owned(Js::Undefined), Cow::Borrowed),
        Js::Str(s) if key == "length" => Cow::Owned(Js::Num(s.encode_utf16().count() as f64)),
        Js::Str(s) => Cow::Owned(
            index()
                .and_then(|i| s.encode_utf16().nth(i))
                .map_or(Js::Undefined, |unit| Js::Str(String::from_utf16_lossy(&[unit]).into())),
        ),
        _ => Cow::Owned(Js::Undefined),
    }
}

/// Why a server trait cannot fulfil a requested one (`None` when it can).
fn trait_mismatch(server: &Js, requested: &Js) -> Option<&'static str> {
    const UNSUPPORTED: &str = "unsupported combination of property types";
    if server.is_undefined() || requested.is_undefined() {
        return Some("undefined property");
    }
    let contains = |list: &[Js], item: &Js| list.iter().any(|x| strict_eq(x, item));
    match (requested, server) {
        (Js::Bool(_), _) => (!strict_eq(server, requested)).then_some("boolean did not match"),
        (Js::Str(want), Js::Str(have)) => (want != have).then_some("strings did not match"),
        (Js::Str(_), Js::Arr(have)) => {
            (!contains(have, requested)).then_some("server trait array did not contain trait")
        }
        (Js::Str(_), _) => Some(UNSUPPORTED),
        (Js::Arr(want), Js::Str(_)) => {
            (!contains(want, server)).then_some("server trait was not in requested trait array")
        }
        (Js::Arr(want), Js::Arr(have)) => {
            (!want.iter().any(|w| contains(have, w))).then_some("server and requested trait arrays do not intersect")
        }
        _ => Some(UNSUPPORTED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    fn traited(uuid: &str, traits: Value) -> Value {
        with(server(uuid), json!({ "traits": traits }))
    }

    /// Six servers with assorted traits.
    fn servers() -> Vec<Value> {
        vec![
            traited("ssd_john", json!({"ssd": true, "users": "john"})),
            traited("ssd_pair", json!({"ssd": true, "users": ["john", "jane"]})),
            traited("ssd", json!({"ssd": true})),
            traited("no_ssd", json!({"ssd": false})),
            traited("jack_jane", json!({"users": ["jack", "jane"]})),
            traited("john", json!({"users": "john"})),
        ]
    }

    fn vm(traits: Value) -> Value {
        json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": "o", "brand": "joyent", "traits": traits})
    }

    #[test]
    fn boolean_trait_needs_the_exact_set() {
        let out = Fixture::new(servers()).vm(vm(json!({"ssd": true}))).run(&HardFilterTraits);
        assert_eq!(out.remaining, ["ssd"]);
        assert_eq!(
            out.reason_list(),
            [
                (
                    "ssd_john".into(),
                    r#"Combined vm/pkg/img traits require {"ssd":true} but server has {"ssd":true,"users":"john"}"#.into()
                ),
                (
                    "ssd_pair".into(),
                    r#"Combined vm/pkg/img traits require {"ssd":true} but server has {"ssd":true,"users":["john","jane"]}"#
                        .into()
                ),
                ("no_ssd".into(), "ssd comparison failed: boolean did not match".into()),
                ("jack_jane".into(), "ssd comparison failed: undefined property".into()),
                ("john".into(), "ssd comparison failed: undefined property".into()),
            ]
        );
    }

    #[test]
    fn string_traits_match_strings_and_arrays() {
        let out = Fixture::new(servers()).image(json!({"traits": {"users": "john"}})).run(&HardFilterTraits);
        assert_eq!(out.remaining, ["john"]);
        assert_eq!(out.reason("jack_jane"), Some("users comparison failed: server trait array did not contain trait"));
        let out = Fixture::new(servers()).vm(vm(json!({"users": "jack"}))).run(&HardFilterTraits);
        assert_eq!(out.remaining, ["jack_jane"]);
        assert_eq!(out.reason("john"), Some("users comparison failed: strings did not match"));
        assert_eq!(out.reason("ssd"), Some("users comparison failed: undefined property"));
    }

    #[test]
    fn array_traits_intersect() {
        let out = Fixture::new(servers()).vm(vm(json!({"users": ["john", "jane"]}))).run(&HardFilterTraits);
        assert_eq!(out.remaining, ["jack_jane", "john"]);
        let out = Fixture::new(servers()).vm(vm(json!({"users": ["bob"]}))).run(&HardFilterTraits);
        assert_eq!(
            out.reason("jack_jane"),
            Some("users comparison failed: server and requested trait arrays do not intersect")
        );
        assert_eq!(out.reason("john"), Some("users comparison failed: server trait was not in requested trait array"));
        let out = Fixture::new(servers()).vm(vm(json!({"ssd": ["x"]}))).run(&HardFilterTraits);
        assert_eq!(out.reason("ssd"), Some("ssd comparison failed: unsupported combination of property types"));
    }

    #[test]
    fn unsupported_combinations() {
        let list = vec![traited("n", json!({"a": 1})), traited("s", json!({"a": "x"})), traited("o", json!({"a": {}}))];
        let out = Fixture::new(list.clone()).vm(vm(json!({"a": 1}))).run(&HardFilterTraits);
        assert!(out.remaining.is_empty());
        assert!(out.reasons.iter().all(|(_, m)| m == "a comparison failed: unsupported combination of property types"));
        let out = Fixture::new(list.clone()).vm(vm(json!({"a": "x"}))).run(&HardFilterTraits);
        assert_eq!(out.remaining, ["s"]);
        assert_eq!(out.reason("n"), Some("a comparison failed: unsupported combination of property types"));
        let out = Fixture::new(list).vm(vm(json!({"a": false}))).run(&HardFilterTraits);
        assert_eq!(out.reason("n"), Some("a comparison failed: boolean did not match"));
    }

    #[test]
    fn merge_order_vm_hides_package_image_overrides() {
        let list = vec![
            traited("abc", json!({"a": "x", "b": false, "c": "y"})),
            traited("ab", json!({"a": "x", "b": true})),
            traited("p", json!({"p": true})),
        ];
        let out = Fixture::new(list.clone())
            .vm(vm(json!({"a": "x", "b": true})))
            .package(json!({"traits": {"p": true}}))
            .image(json!({"traits": {"b": false, "c": "y"}}))
            .run(&HardFilterTraits);
        assert_eq!(out.remaining, ["abc"]);
        assert_eq!(
            out.reason("ab"),
            Some(r#"Combined vm/pkg/img traits require {"a":"x","b":false,"c":"y"} but server has {"a":"x","b":true}"#)
        );
        // Without VM traits the package's count; an empty VM object still hides them.
        let out = Fixture::new(list.clone())
            .vm(vm(json!(null)))
            .package(json!({"traits": {"p": true}}))
            .run(&HardFilterTraits);
        assert_eq!(out.remaining, ["p"]);
        let out = Fixture::new(list).vm(vm(json!({}))).package(json!({"traits": {"p": true}})).run(&HardFilterTraits);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("p"), Some(r#"Combined vm/pkg/img require no traits but server has {"p":true}"#));
    }

    #[test]
    fn no_requested_traits_keeps_traitless_servers() {
        let list = vec![
            traited("empty", json!({})),
            with(server("absent"), json!({"traits": null})),
            traited("null", json!(null)),
            traited("some", json!({"ssd": true})),
        ];
        // `with` drops a null key, so "absent" has no traits at all; "null" keeps its null.
        let mut f = Fixture::new(list);
        f.servers[2].traits = Js::Null;
        let out = f.run(&HardFilterTraits);
        assert_eq!(out.remaining, ["empty", "absent", "null"]);
        assert_eq!(out.reason("some"), Some(r#"Combined vm/pkg/img require no traits but server has {"ssd":true}"#));
    }

    #[test]
    fn missing_server_traits_print_undefined() {
        let list = vec![with(server("absent"), json!({"traits": null}))];
        let mut f = Fixture::new(list).vm(vm(json!({"ssd": true})));
        let out = f.run(&HardFilterTraits);
        assert_eq!(
            out.reason("absent"),
            Some(r#"Combined vm/pkg/img traits require {"ssd":true} but server has undefined"#)
        );
        f.servers[0].traits = Js::Null;
        let out = f.run(&HardFilterTraits);
        assert_eq!(
            out.reason("absent"),
            Some(r#"Combined vm/pkg/img traits require {"ssd":true} but server has null"#)
        );
    }

    #[test]
    fn javascript_reads_of_odd_shapes() {
        assert_eq!(keys(&Js::str("ab")), ["0", "1"]);
        assert_eq!(*property(&Js::str("ab"), "1"), Js::str("b"));
        assert_eq!(*property(&Js::str("ab"), "length"), Js::Num(2.0));
        assert_eq!(*property(&Js::Arr(vec![Js::Null]), "01"), Js::Undefined);
        assert!(keys(&Js::Num(3.0)).is_empty());
        let (a, b) = (Js::from_json(&json!({"a": 1, "b": 2})), Js::from_json(&json!({"b": 3, "c": 4})));
        let merged = merge(&a, &b);
        assert_eq!(merged.map(|m| m.stringify()), Some(r#"{"a":1,"b":3,"c":4}"#.to_string()));
    }
}
