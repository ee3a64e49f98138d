//! `calculate-affinity`: turns the VM's affinity rules (`instance==web1`, `role!=db`, ...)
//! into locality hints, which replace `vm.locality` for the locality filters that follow.
//!
//! The rules are resolved against the VMs sent in the request (there is no VMAPI here), see
//! [`super::shared::affinity`]. A rule that cannot be satisfied, an ambiguous Docker-id
//! prefix or an invalid regex empties the server list with the message as the `*` reason.
//! Where the original asserted and threw (affinity present but not an array, an element not
//! of the validated shape, owner not a uuid) the plugin fails with an error naming the field.

use super::shared::affinity::{locality_from_affinity, Affinity};
use super::shared::locality::owner_uuid;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct CalculateAffinity;

static DECLARATION: Declaration =
    Declaration::new("calculate-affinity", Kind::Transform, "Convert affinity to locality hints")
        .writes(&[Data::Locality]);

impl Plugin for CalculateAffinity {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        let affinity = &req.vm.affinity;
        if affinity.is_undefined() {
            reasons.skip("No affinity found");
            return Ok(servers.to_vec());
        }
        let owner = owner_uuid(&req.vm.owner_uuid)?;
        let list = affinity.as_arr().ok_or_else(|| {
            PluginError(format!("opts.affinity ([object]) is required, got {}", affinity.stringify()))
        })?;
        let affinities = list.iter().map(Affinity::from_js).collect::<Result<Vec<_>, _>>().map_err(PluginError)?;
        match locality_from_affinity(&affinities, owner, req.vm_index()) {
            Err(message) => {
                reasons.all(message);
                Ok(Vec::new())
            }
            Ok(None) => Ok(servers.to_vec()),
            Ok(Some(locality)) => {
                req.set_vm_locality(locality.to_js());
                Ok(servers.to_vec())
            }
        }
    }

    /// Without affinity rules it passes every server on and writes nothing.
    fn per_server(&self, req: &Request<'_>) -> bool {
        req.vm.affinity.is_undefined()
    }

    fn unchanged_by(&self, req: &mut Request<'_>, _: &[ServerId], _: &[ServerId], _: &[ServerId]) -> bool {
        req.vm.affinity.is_undefined()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, with, Fixture};
    use serde_json::json;

    const OWNER: &str = "b20ae67c-48d9-11e9-bef6-17de1751b73a";
    const WEB3: &str = "fb02171e-4970-11e9-b315-7f49301411e7";

    fn fixture(affinity: serde_json::Value) -> Fixture {
        let mut vm = json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": OWNER,
                            "brand": "joyent", "ram": 256, "locality": {"near": WEB3}});
        if !affinity.is_null() {
            vm["affinity"] = affinity;
        }
        Fixture::new(vec![
            server("s1"),
            with(server("s2"), json!({"vms": {WEB3: {"owner_uuid": OWNER, "alias": "webhead3", "state": "running"}}})),
        ])
        .vm(vm)
    }

    fn rule(key: &str, op: &str, value: &str, soft: bool) -> serde_json::Value {
        json!({"key": key, "operator": op, "value": value, "valueType": "exact", "isSoft": soft})
    }

    #[test]
    fn without_affinity_skips_and_keeps_the_callers_locality() {
        let f = fixture(json!(null));
        let mut req = f.request();
        let out = run_on(&mut req, &CalculateAffinity);
        assert_eq!(out.remaining, ["s1", "s2"]);
        assert_eq!(out.reason_list(), [("skip".into(), "No affinity found".into())]);
        assert_eq!(req.vm_locality().stringify(), format!(r#"{{"near":"{WEB3}"}}"#));
    }

    #[test]
    fn empty_affinity_changes_nothing() {
        let f = fixture(json!([]));
        let mut req = f.request();
        let out = run_on(&mut req, &CalculateAffinity);
        assert_eq!(out.remaining, ["s1", "s2"]);
        assert!(out.reasons.is_empty());
        assert_eq!(req.vm_locality().stringify(), format!(r#"{{"near":"{WEB3}"}}"#));
    }

    #[test]
    fn derived_locality_replaces_the_callers() {
        let f = fixture(json!([rule("instance", "!=", "webhead3", false)]));
        let mut req = f.request();
        let out = run_on(&mut req, &CalculateAffinity);
        assert_eq!(out.remaining, ["s1", "s2"]);
        assert!(out.reasons.is_empty());
        assert_eq!(req.vm_locality().stringify(), format!(r#"{{"strict":true,"far":["{WEB3}"]}}"#));
    }

    #[test]
    fn unsatisfiable_rule_empties_the_list() {
        let f = fixture(json!([rule("instance", "==", "webhead9", false)]));
        let mut req = f.request();
        let out = run_on(&mut req, &CalculateAffinity);
        assert!(out.remaining.is_empty());
        assert_eq!(
            out.reason_list(),
            [(
                "*".into(),
                r#"no active containers found matching "webhead9" for affinity "instance==webhead9""#.into()
            )]
        );
        // The caller's locality stays.
        assert_eq!(req.vm_locality().stringify(), format!(r#"{{"near":"{WEB3}"}}"#));
    }

    #[test]
    fn empty_input_stays_empty_without_reasons() {
        let f = fixture(json!([rule("instance", "==", "webhead9", false)]));
        let mut req = f.request();
        let mut reasons = Reasons::default();
        assert_eq!(CalculateAffinity.run(&mut req, &[], &mut reasons), Ok(Vec::new()));
        assert!(reasons.is_empty());
    }

    #[test]
    fn malformed_affinity_is_an_error_not_a_panic() {
        for bad in [json!(false), json!([{"key": "instance"}]), json!([null])] {
            let f = fixture(json!([])).vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa",
                                                  "owner_uuid": OWNER, "affinity": bad}));
            let mut req = f.request();
            let mut reasons = Reasons::default();
            assert!(CalculateAffinity.run(&mut req, &[0], &mut reasons).is_err());
        }
        let f = fixture(json!([])).vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "affinity": []}));
        let mut req = f.request();
        let mut reasons = Reasons::default();
        assert!(CalculateAffinity.run(&mut req, &[0], &mut reasons).is_err());
    }
}
