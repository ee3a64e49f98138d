//! Locality hints shared by the hard and soft locality filters: reading `vm.locality`,
//! normalising `near`/`far` to uuid lists, and filtering out servers that host a `far` VM.
//!
//! Only VMs of the requesting owner count (the "owner guard"): a VM of someone else on a
//! server never makes the server near or far. Where the original asserted and threw
//! (owner not a uuid, `locality` not an object, `strict` not a boolean, a `near`/`far` entry
//! not a uuid) the plugins fail with a [`PluginError`] naming the field.

use crate::engine::PluginError;
use crate::engine::{Reasons, Request, ServerId};
use crate::js::Js;

/// Appended to every reason of a non-strict filter that would have removed every server.
pub const IGNORED_NON_STRICT: &str = " (ignored b/c non-strict)";

/// A uuid as assert-plus accepts it: 8-4-4-4-12 hex digits, either case.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `vm.owner_uuid`, which must be a uuid.
pub fn owner_uuid(vm_owner: &Js) -> Result<&str, PluginError> {
    match vm_owner.as_str() {
        Some(s) if is_uuid(s) => Ok(s),
        _ => Err(PluginError(format!("opts.vm.owner_uuid (uuid) is required, got {}", vm_owner.stringify()))),
    }
}

/// `vm.locality` as an object to read from: absent or null reads as `{}`; anything else
/// that is not an object (or array) is an error.
pub fn locality_object(locality: &Js) -> Result<&Js, PluginError> {
    match locality {
        Js::Undefined | Js::Null | Js::Obj(_) | Js::Arr(_) => Ok(locality),
        other => Err(PluginError(format!("opts.vm.locality (object) is required, got {}", other.stringify()))),
    }
}

/// `Boolean(locality.strict)`; a present `strict` must be a boolean.
pub fn strict_flag(locality: &Js) -> Result<bool, PluginError> {
    match locality.get("strict") {
        Js::Undefined | Js::Null => Ok(false),
        Js::Bool(b) => Ok(*b),
        other => Err(PluginError(format!("locality.strict (bool) is required, got {}", other.stringify()))),
    }
}

/// `near` or `far` as a list of uuids: a string is a one-element list, a falsy value the
/// empty list; every entry must be a uuid.
pub fn norm_near_far(value: &Js, name: &str) -> Result<Vec<String>, PluginError> {
    let bad = || PluginError(format!("locality.{name} ([uuid]) is required, got {}", value.stringify()));
    let items: &[Js] = match value {
        Js::Str(_) => std::slice::from_ref(value),
        v if !v.truthy() => &[],
        Js::Arr(a) => a,
        _ => return Err(bad()),
    };
    items.iter().map(|i| i.as_str().filter(|s| is_uuid(s)).map(str::to_owned).ok_or_else(bad)).collect()
}

/// Whether the server hosts VM `uuid` and it belongs to `owner` (inline or ticketed VMs).
pub fn hosts_owned(req: &Request<'_>, id: ServerId, uuid: &str, owner: &str) -> bool {
    req.vm_on(id, uuid).is_some_and(|vm| vm.owner_uuid().as_str() == Some(owner))
}

/// Removes servers hosting any `far` VM of the owner, with reason `exclude: inst!=<uuid>`
/// (the first such VM in `far` order). When not strict and every server would go, keeps them
/// all and marks every reason so far as ignored.
pub fn filter_far(
    req: &Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    far: &[String],
    strict: bool,
    owner: &str,
) -> Vec<ServerId> {
    let mut kept = Vec::with_capacity(servers.len());
    for &id in servers {
        match far.iter().find(|u| hosts_owned(req, id, u, owner)) {
            Some(u) => reasons.set(req.key(id), format!("exclude: inst!={u}")),
            None => kept.push(id),
        }
    }
    if !strict && kept.is_empty() {
        reasons.append_to_all(IGNORED_NON_STRICT);
        return servers.to_vec();
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    const OWNER: &str = "00000000-0000-0000-0000-0000000000bb";
    const V1: &str = "11111111-1111-1111-1111-111111111111";
    const V2: &str = "22222222-2222-2222-2222-222222222222";

    fn fixture() -> Fixture {
        Fixture::new(vec![
            with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}})),
            with(server("s2"), json!({"vms": {V2: {"owner_uuid": "someone-else"}}})),
            server("s3"),
        ])
    }

    #[test]
    fn normalises_near_and_far() {
        assert_eq!(norm_near_far(&Js::str(V1), "near").expect("string"), [V1]);
        assert!(norm_near_far(&Js::Undefined, "near").expect("absent").is_empty());
        assert!(norm_near_far(&Js::Bool(false), "near").expect("falsy").is_empty());
        // A string is taken as one entry, so even "" must be a uuid.
        assert!(norm_near_far(&Js::str(""), "near").is_err());
        let list = Js::Arr(vec![Js::str(V1), Js::str(&V2.to_uppercase())]);
        assert_eq!(norm_near_far(&list, "far").expect("list").len(), 2);
        assert!(norm_near_far(&Js::str("web1"), "near").is_err());
        assert!(norm_near_far(&Js::Arr(vec![Js::Num(1.0)]), "far").is_err());
        assert!(norm_near_far(&Js::Num(3.0), "far").is_err());
    }

    #[test]
    fn reads_strict_and_owner_strictly() {
        assert!(!strict_flag(&Js::Undefined).expect("absent"));
        let obj: Js = serde_json::from_value(json!({"strict": true})).expect("js");
        assert!(strict_flag(&obj).expect("bool"));
        let obj: Js = serde_json::from_value(json!({"strict": "true"})).expect("js");
        assert!(strict_flag(&obj).is_err());
        assert!(owner_uuid(&Js::str(OWNER)).is_ok());
        assert!(owner_uuid(&Js::str("bob")).is_err());
        assert!(owner_uuid(&Js::Undefined).is_err());
        assert!(locality_object(&Js::Bool(false)).is_err());
        assert!(locality_object(&Js::Null).is_ok());
    }

    #[test]
    fn far_removes_servers_hosting_the_owners_vms_only() {
        let f = fixture();
        let req = f.request();
        let mut reasons = Reasons::default();
        let far = [V2.to_string(), V1.to_string()];
        let kept = filter_far(&req, &[0, 1, 2], &mut reasons, &far, true, OWNER);
        assert_eq!(kept, [1, 2]);
        assert_eq!(reasons.iter().collect::<Vec<_>>(), [("s1", &*format!("exclude: inst!={V1}"))]);
    }

    #[test]
    fn strict_far_may_empty_the_list_non_strict_far_may_not() {
        let f = fixture();
        let req = f.request();
        let far = [V1.to_string()];
        let mut reasons = Reasons::default();
        assert!(filter_far(&req, &[0], &mut reasons, &far, true, OWNER).is_empty());
        assert_eq!(reasons.get("s1"), Some(&*format!("exclude: inst!={V1}")));
        let mut reasons = Reasons::default();
        assert_eq!(filter_far(&req, &[0], &mut reasons, &far, false, OWNER), [0]);
        assert_eq!(reasons.get("s1"), Some(&*format!("exclude: inst!={V1} (ignored b/c non-strict)")));
    }
}
