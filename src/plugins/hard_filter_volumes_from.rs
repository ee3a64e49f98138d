//! `hard-filter-volumes-from`: a Docker container created with `--volumes-from` must land on
//! the server that holds the containers it takes volumes from.
//!
//! The listed VMs (`internal_metadata["docker:volumesfrom"]`, parsed by validation into
//! `vm.volumes_from`) are looked up one at a time, as the original did through VMAPI, here
//! in the request's VMs (any owner, any state): each keeps only the server holding it, the
//! others get `VM needs volumes from <uuid>, which was not found on server`; a VM that does
//! not exist empties the list with `*` = `Error loading VM <uuid>: VM not found`. Look-ups
//! stop once no server is left, and at most the first remaining server is passed on.

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::strict_eq;

pub struct HardFilterVolumesFrom;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-volumes-from", Kind::HardFilter, "Servers containing VMs required for volumesfrom");

impl Plugin for HardFilterVolumesFrom {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }

    /// A VM taking no volumes passes every server on; otherwise the first holder is kept,
    /// which depends on the other servers.
    fn per_server(&self, req: &Request<'_>) -> bool {
        let vm = req.vm;
        !vm.docker.truthy() || !vm.internal_metadata.truthy() || vm.volumes_from.as_deref().is_none_or(<[_]>::is_empty)
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let vm = req.vm;
        if !vm.docker.truthy() || !vm.internal_metadata.truthy() {
            reasons.skip("Requested VM is not a Docker container and/or has no internal_metadata");
            return Ok(servers.to_vec());
        }
        let required = match vm.volumes_from.as_deref() {
            Some(list) if !list.is_empty() => list,
            _ => {
                reasons.skip("Requested VM has no VMs listed in internal_data docker:volumesfrom");
                return Ok(servers.to_vec());
            }
        };
        let mut kept = servers.to_vec();
        for wanted in required {
            if kept.is_empty() {
                break;
            }
            let uuid = wanted.to_js_string();
            let holder = match req.vm_index().get(&uuid, None) {
                Ok(found) => found.server_uuid.clone(),
                Err(not_found) => {
                    reasons.all(format!("Error loading VM {uuid}: {not_found}"));
                    return Ok(Vec::new());
                }
            };
            kept.retain(|&id| {
                let holds = strict_eq(&req.server(id).uuid, &holder);
                if !holds {
                    reasons.set(req.key(id), format!("VM needs volumes from {uuid}, which was not found on server"));
                }
                holds
            });
        }
        kept.truncate(1);
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js::Js;
    use crate::plugins::testing::{run_on, server, with, Fixture};
    use serde_json::json;

    const OWNER: &str = "00000000-0000-0000-0000-0000000000bb";
    const OTHER: &str = "00000000-0000-0000-0000-0000000000cc";
    const V1: &str = "11111111-1111-1111-1111-111111111111";
    const V2: &str = "22222222-2222-2222-2222-222222222222";
    const V3: &str = "33333333-3333-3333-3333-333333333333";
    const GONE: &str = "99999999-9999-9999-9999-999999999999";

    /// s1 holds V1 and V2 (V2 someone else's, failed), s2 holds V3, s3 holds nothing.
    fn fixture() -> Fixture {
        Fixture::new(vec![
            with(
                server("s1"),
                json!({"vms": {V1: {"owner_uuid": OWNER}, V2: {"owner_uuid": OTHER, "state": "failed"}}}),
            ),
            with(server("s2"), json!({"vms": {V3: {"owner_uuid": OWNER}}})),
            server("s3"),
        ])
        .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "brand": "lx",
                   "docker": true, "internal_metadata": {"docker:volumesfrom": "[]"}}))
    }

    fn run_with(f: &mut Fixture, uuids: &[&str]) -> crate::plugins::testing::Outcome {
        f.vm.volumes_from = Some(uuids.iter().map(|u| Js::str(u)).collect());
        let mut req = f.request();
        run_on(&mut req, &HardFilterVolumesFrom)
    }

    fn msg(uuid: &str) -> String {
        format!("VM needs volumes from {uuid}, which was not found on server")
    }

    #[test]
    fn skips_non_docker_vms_and_empty_lists() {
        let f = fixture().vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER,
                                    "internal_metadata": {}}));
        let out = f.run(&HardFilterVolumesFrom);
        assert_eq!(out.remaining, ["s1", "s2", "s3"]);
        assert_eq!(out.reason("skip"), Some("Requested VM is not a Docker container and/or has no internal_metadata"));
        let mut f = fixture();
        let out = run_with(&mut f, &[]);
        assert_eq!(out.remaining.len(), 3);
        assert_eq!(out.reason("skip"), Some("Requested VM has no VMs listed in internal_data docker:volumesfrom"));
    }

    #[test]
    fn keeps_the_server_holding_every_listed_vm() {
        let mut f = fixture();
        let out = run_with(&mut f, &[V1, V2]);
        assert_eq!(out.remaining, ["s1"]);
        assert_eq!(out.reason_list(), [("s2".into(), msg(V1)), ("s3".into(), msg(V1))]);
    }

    #[test]
    fn vms_on_different_servers_leave_none() {
        let mut f = fixture();
        let out = run_with(&mut f, &[V1, V3, GONE]);
        assert!(out.remaining.is_empty());
        // The unknown VM is never asked for once no server is left.
        assert_eq!(out.reason_list(), [("s2".into(), msg(V1)), ("s3".into(), msg(V1)), ("s1".into(), msg(V3))]);
    }

    #[test]
    fn unknown_vm_empties_the_list() {
        let mut f = fixture();
        let out = run_with(&mut f, &[V3, GONE]);
        assert!(out.remaining.is_empty());
        assert_eq!(
            out.reason_list(),
            [
                ("s1".into(), msg(V3)),
                ("s3".into(), msg(V3)),
                ("*".into(), format!("Error loading VM {GONE}: VM not found"))
            ]
        );
    }

    #[test]
    fn holder_outside_the_candidates_leaves_none_and_at_most_one_passes() {
        let mut f = fixture();
        f.vm.volumes_from = Some(vec![Js::str(V3)]);
        let mut req = f.request();
        let mut reasons = Reasons::default();
        assert_eq!(HardFilterVolumesFrom.run(&mut req, &[0, 2], &mut reasons), Ok(vec![]));
        // Two servers with the same uuid both hold it; only the first goes on.
        let mut f = Fixture::new(vec![with(server("s1"), json!({"vms": {V1: {"owner_uuid": OWNER}}})), server("s1")])
            .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER, "docker": true,
                   "internal_metadata": {"a": 1}}));
        let out = run_with(&mut f, &[V1]);
        assert_eq!(out.ids, [0]);
    }
}
