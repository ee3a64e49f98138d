//! `hard-filter-locality-hints`: applies strict locality hints (`vm.locality` with
//! `strict: true`, written by the caller or by `calculate-affinity`): servers hosting a `far`
//! VM of the owner are removed, and `near` keeps only the one server hosting every near VM.
//!
//! Strict near looks for the first server (list order) hosting `near[0]` (owned by the
//! requester) and requires the other near VMs on that same server (mere presence), so it
//! yields at most one server. Malformed input the original asserted on (owner not a uuid,
//! `locality` or `strict` of the wrong type, non-uuid near/far entries) fails the plugin.

use super::shared::locality::{filter_far, hosts_owned, locality_object, norm_near_far, owner_uuid, strict_flag};
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterLocalityHints;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-locality-hints", Kind::HardFilter, "Servers with requested hard locality considered")
        .reads(&[Data::Locality, Data::TicketVms]);

impl Plugin for HardFilterLocalityHints {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    /// Without strict hints it passes every server on.
    fn per_server(&self, req: &Request<'_>) -> bool {
        !strict(req)
    }
    fn unchanged_by(&self, req: &mut Request<'_>, _: &[ServerId], _: &[ServerId], _: &[ServerId]) -> bool {
        !strict(req)
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let owner = owner_uuid(&req.vm.owner_uuid)?;
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        let locality = locality_object(req.vm_locality())?;
        if !strict_flag(locality)? {
            reasons.skip("No strict locality requested");
            return Ok(servers.to_vec());
        }
        let far = norm_near_far(locality.get("far"), "far")?;
        let near = norm_near_far(locality.get("near"), "near")?;
        if near.is_empty() && far.is_empty() {
            reasons.skip("No near or far localities requested");
            return Ok(servers.to_vec());
        }
        // Far first: it wins over near.
        let mut kept =
            if far.is_empty() { servers.to_vec() } else { filter_far(req, servers, reasons, &far, true, owner) };
        if !kept.is_empty() && !near.is_empty() {
            kept = filter_near_strict(req, &kept, reasons, &near, owner);
        }
        Ok(kept)
    }
}

/// The first server hosting the owner's `near[0]`, if it also holds every other near VM.
fn filter_near_strict(
    req: &Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    near: &[String],
    owner: &str,
) -> Vec<ServerId> {
    let joined = near.join(",");
    let candidate = servers.iter().copied().find(|&id| hosts_owned(req, id, &near[0], owner));
    match candidate {
        Some(id) if near[1..].iter().all(|u| req.vm_on(id, u).is_some()) => {
            reasons.set(req.key(id), format!("include: inst=={joined}"));
            vec![id]
        }
        _ => {
            reasons.all(format!("exclude: inst=={joined}"));
            Vec::new()
        }
    }
}

/// Whether the hints in force are strict (an unreadable hint or owner counts as strict:
/// the run fails on it).
fn strict(req: &Request<'_>) -> bool {
    owner_uuid(&req.vm.owner_uuid).is_err() || locality_object(req.vm_locality()).and_then(strict_flag).unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    const OWNER: &str = "00000000-0000-0000-0000-0000000000bb";
    const OTHER: &str = "00000000-0000-0000-0000-0000000000cc";
    const V1: &str = "11111111-1111-1111-1111-111111111111";
    const V2: &str = "22222222-2222-2222-2222-222222222222";
    const V3: &str = "33333333-3333-3333-3333-333333333333";
    const V4: &str = "44444444-4444-4444-4444-444444444444";

    /// s1 hosts V1 and V4, s2 hosts V2, s3 hosts someone else's V3; s4 is empty.
    fn fixture(locality: serde_json::Value) -> Fixture {
        Fixture::new(vec![
            with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}, V4: {"owner_uuid": OTHER}}})),
            with(server("s2"), json!({"vms": {V2: {"owner_uuid": OWNER}}})),
            with(server("s3"), json!({"vms": {V3: {"owner_uuid": OTHER}}})),
            server("s4"),
        ])
        .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "joyent",
                   "ram": 256, "locality": locality}))
    }

    fn pairs(list: &[(&str, String)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn skips_without_strict_locality() {
        let out = fixture(json!({"near": V1})).run(&HardFilterLocalityHints);
        assert_eq!(out.remaining, ["s1", "s2", "s3", "s4"]);
        assert_eq!(out.reason("skip"), Some("No strict locality requested"));
        let out = fixture(json!({"strict": true})).run(&HardFilterLocalityHints);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(out.reason("skip"), Some("No near or far localities requested"));
    }

    #[test]
    fn strict_near_keeps_the_one_server_hosting_it() {
        let out = fixture(json!({"strict": true, "near": [V2]})).run(&HardFilterLocalityHints);
        assert_eq!(out.remaining, ["s2"]);
        assert_eq!(out.reason_list(), pairs(&[("s2", format!("include: inst=={V2}"))]));
    }

    #[test]
    fn strict_near_on_two_servers_keeps_none() {
        let out = fixture(json!({"strict": true, "near": [V1, V2]})).run(&HardFilterLocalityHints);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason_list(), pairs(&[("*", format!("exclude: inst=={V1},{V2}"))]));
    }

    #[test]
    fn strict_near_honours_only_the_owners_first_vm() {
        let out = fixture(json!({"strict": true, "near": V3})).run(&HardFilterLocalityHints);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("*"), Some(&*format!("exclude: inst=={V3}")));
        // Later near VMs need only be present, whoever owns them.
        let out = fixture(json!({"strict": true, "near": [V1, V4]})).run(&HardFilterLocalityHints);
        assert_eq!(out.remaining, ["s1"]);
        assert_eq!(out.reason("s1"), Some(&*format!("include: inst=={V1},{V4}")));
    }

    #[test]
    fn strict_far_removes_hosts_and_may_empty_the_list() {
        let out = fixture(json!({"strict": true, "far": [V3, V1]})).run(&HardFilterLocalityHints);
        assert_eq!(out.remaining, ["s2", "s3", "s4"]);
        assert_eq!(out.reason_list(), pairs(&[("s1", format!("exclude: inst!={V1}"))]));
        let f = Fixture::new(vec![with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}}))])
            .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "joyent",
                   "locality": {"strict": true, "far": V1}}));
        let out = f.run(&HardFilterLocalityHints);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason_list(), pairs(&[("s1", format!("exclude: inst!={V1}"))]));
    }

    #[test]
    fn far_wins_over_near() {
        let out = fixture(json!({"strict": true, "far": V1, "near": V1})).run(&HardFilterLocalityHints);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("s1"), Some(&*format!("exclude: inst!={V1}")));
        assert_eq!(out.reason("*"), Some(&*format!("exclude: inst=={V1}")));
    }

    #[test]
    fn uses_the_locality_calculate_affinity_derived() {
        let f = fixture(json!(null));
        let mut req = f.request();
        req.set_vm_locality(serde_json::from_value(json!({"strict": true, "near": [V2]})).expect("js"));
        let out = crate::plugins::testing::run_on(&mut req, &HardFilterLocalityHints);
        assert_eq!(out.remaining, ["s2"]);
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let f = fixture(json!({"strict": "yes", "near": V1}));
        let mut req = f.request();
        let mut reasons = Reasons::default();
        assert!(HardFilterLocalityHints.run(&mut req, &[0, 1], &mut reasons).is_err());
        let f = fixture(json!({"strict": true, "near": "web1"}));
        let mut req = f.request();
        assert!(HardFilterLocalityHints.run(&mut req, &[0, 1], &mut reasons).is_err());
    }
}
