//! `soft-filter-locality-hints`: applies non-strict locality hints, never emptying the list.
//!
//! * No `near`/`far` at all: spreads the owner's VMs, removing servers that already host one
//!   of the owner's VMs unless that would remove every server.
//! * Strict hints: left to `hard-filter-locality-hints` (skip).
//! * Non-strict hints: `far` removes hosts of the owner's listed VMs (ignored when it would
//!   remove all), then `near` keeps servers hosting any of the owner's listed VMs (ignored
//!   when none does).
//!
//! Malformed input the original asserted on fails the plugin, as in the hard filter.

use super::shared::locality::{
    filter_far, hosts_owned, locality_object, norm_near_far, owner_uuid, strict_flag, IGNORED_NON_STRICT,
};
use crate::engine::parallel::map_servers;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct SoftFilterLocalityHints;

static DECLARATION: Declaration =
    Declaration::new("soft-filter-locality-hints", Kind::SoftFilter, "Servers with requested soft locality considered")
        .reads(&[Data::Locality, Data::TicketVms]);

impl Plugin for SoftFilterLocalityHints {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
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
        let strict = strict_flag(locality)?;
        let far = norm_near_far(locality.get("far"), "far")?;
        let near = norm_near_far(locality.get("near"), "near")?;
        if near.is_empty() && far.is_empty() {
            return Ok(spread_by_owner(req, servers, reasons, owner));
        }
        if strict {
            reasons.skip("Strict locality requested and no spreading needed");
            return Ok(servers.to_vec());
        }
        let mut kept =
            if far.is_empty() { servers.to_vec() } else { filter_far(req, servers, reasons, &far, false, owner) };
        if !kept.is_empty() && !near.is_empty() {
            kept = filter_near_non_strict(req, &kept, reasons, &near, owner);
        }
        Ok(kept)
    }

    /// Spreading by owner keeps the same servers while the changed ones still host (or
    /// still do not host) the owner's VMs as they did; strict hints skip.
    fn unchanged_by(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        last: &[ServerId],
        changed: &[ServerId],
    ) -> bool {
        let vm = req.vm;
        let hints = owner_uuid(&vm.owner_uuid).and_then(|owner| {
            let locality = locality_object(req.vm_locality())?;
            let far_or_near = !norm_near_far(locality.get("far"), "far")?.is_empty()
                || !norm_near_far(locality.get("near"), "near")?.is_empty();
            Ok((owner, strict_flag(locality)?, far_or_near))
        });
        match hints {
            Ok((owner, _, false)) => spread_unchanged(req, servers, last, changed, owner),
            Ok((_, strict, true)) => strict,
            Err(_) => false,
        }
    }
}

/// Whether [`spread_by_owner`] on `servers` still gives `last`, now that only the `changed`
/// servers may host other VMs.
fn spread_unchanged(
    req: &Request<'_>,
    servers: &[ServerId],
    last: &[ServerId],
    changed: &[ServerId],
    owner: &str,
) -> bool {
    let spared = |id: ServerId| !req.hosts_vm_of(id, owner);
    let changed = || changed.iter().copied().filter(|id| servers.contains(id));
    if last.len() != servers.len() {
        // Some were excluded: each changed server must be on the side it was.
        return changed().all(|id| spared(id) == last.contains(&id));
    }
    // All were passed on: all were spared, or none was and spreading was ignored. So they
    // still are while the changed servers agree with an unchanged one, or among themselves.
    let unchanged = servers.iter().copied().find(|&id| !changed().any(|c| c == id));
    let mut verdicts = unchanged.into_iter().chain(changed()).map(spared);
    let first = verdicts.next();
    verdicts.all(|v| Some(v) == first)
}

/// Keeps servers without any VM of the owner, unless there are none.
fn spread_by_owner(req: &Request<'_>, servers: &[ServerId], reasons: &mut Reasons, owner: &str) -> Vec<ServerId> {
    let hosts = map_servers(servers, |id| req.hosts_vm_of(id, owner));
    let kept: Vec<ServerId> = servers.iter().zip(&hosts).filter(|(_, &hosts)| !hosts).map(|(&id, _)| id).collect();
    if kept.is_empty() {
        reasons.all(format!("exclude: spread by owner{IGNORED_NON_STRICT}"));
        return servers.to_vec();
    }
    if reasons.keeps() {
        for (&id, _) in servers.iter().zip(&hosts).filter(|(_, &hosts)| hosts) {
            reasons.set(req.key(id), "exclude: spread by owner");
        }
    }
    kept
}

/// Keeps servers hosting any of the owner's near VMs, unless there are none.
fn filter_near_non_strict(
    req: &Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    near: &[String],
    owner: &str,
) -> Vec<ServerId> {
    let mut kept = Vec::new();
    for &id in servers {
        if let Some(u) = near.iter().find(|u| hosts_owned(req, id, u, owner)) {
            reasons.set(req.key(id), format!("include: inst==~{u}"));
            kept.push(id);
        }
    }
    if kept.is_empty() {
        let listed = if near.len() > 2 { format!("{},...", near[..2].join(",")) } else { near.join(",") };
        reasons.all(format!("exclude: inst==~{listed}{IGNORED_NON_STRICT}"));
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
    const OTHER: &str = "00000000-0000-0000-0000-0000000000cc";
    const V1: &str = "11111111-1111-1111-1111-111111111111";
    const V2: &str = "22222222-2222-2222-2222-222222222222";
    const V3: &str = "33333333-3333-3333-3333-333333333333";
    const V4: &str = "44444444-4444-4444-4444-444444444444";
    const V5: &str = "55555555-5555-5555-5555-555555555555";

    /// s1 hosts the owner's V1, s2 the owner's V2, s3 someone else's V3; s4 is empty.
    fn fixture(locality: serde_json::Value) -> Fixture {
        Fixture::new(vec![
            with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}})),
            with(server("s2"), json!({"vms": {V2: {"owner_uuid": OWNER}}})),
            with(server("s3"), json!({"vms": {V3: {"owner_uuid": OTHER}}})),
            server("s4"),
        ])
        .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "joyent",
                   "ram": 256, "locality": locality}))
    }

    #[test]
    fn without_hints_spreads_the_owners_vms() {
        let out = fixture(json!(null)).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s3", "s4"]);
        assert_eq!(out.reason("s1"), Some("exclude: spread by owner"));
        assert_eq!(out.reason("s2"), Some("exclude: spread by owner"));
        assert_eq!(out.reasons.len(), 2);
        // Strict without near/far spreads too.
        let out = fixture(json!({"strict": true})).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s3", "s4"]);
    }

    #[test]
    fn spreading_that_would_remove_all_is_ignored() {
        let f = Fixture::new(vec![with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}}))])
            .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "joyent"}));
        let out = f.run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s1"]);
        assert_eq!(out.reason_list(), [("*".into(), "exclude: spread by owner (ignored b/c non-strict)".into())]);
    }

    #[test]
    fn strict_hints_are_left_to_the_hard_filter() {
        let out = fixture(json!({"strict": true, "near": V1})).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(out.reason("skip"), Some("Strict locality requested and no spreading needed"));
    }

    #[test]
    fn near_keeps_every_server_hosting_one() {
        let out = fixture(json!({"near": [V1, V2]})).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s1", "s2"]);
        assert_eq!(out.reason("s1"), Some(&*format!("include: inst==~{V1}")));
        assert_eq!(out.reason("s2"), Some(&*format!("include: inst==~{V2}")));
        assert_eq!(out.reasons.len(), 2);
    }

    #[test]
    fn far_then_near() {
        let out = fixture(json!({"far": V1, "near": V2})).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s2"]);
        assert_eq!(
            out.reason_list(),
            [("s1".into(), format!("exclude: inst!={V1}")), ("s2".into(), format!("include: inst==~{V2}"))]
        );
    }

    #[test]
    fn near_found_nowhere_is_ignored_with_a_shortened_list() {
        let out = fixture(json!({"strict": false, "near": [V3, V4, V5]})).run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining.len(), 4);
        assert_eq!(
            out.reason_list(),
            [("*".into(), format!("exclude: inst==~{V3},{V4},... (ignored b/c non-strict)"))]
        );
        let out = fixture(json!({"near": [V4, V5]})).run(&SoftFilterLocalityHints);
        assert_eq!(out.reason("*"), Some(&*format!("exclude: inst==~{V4},{V5} (ignored b/c non-strict)")));
    }

    #[test]
    fn far_removing_everything_is_ignored() {
        let f = Fixture::new(vec![with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}}))])
            .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "joyent",
                   "locality": {"far": [V1]}}));
        let out = f.run(&SoftFilterLocalityHints);
        assert_eq!(out.remaining, ["s1"]);
        assert_eq!(out.reason("s1"), Some(&*format!("exclude: inst!={V1} (ignored b/c non-strict)")));
    }
}
