//! `hard-filter-invalid-servers`: keeps the servers that pass the dapi server schema
//! ([`crate::validate::validate_server`], worked out as the server is read); each other server is removed with the schema's first violation as
//! its reason (e.g. `property "memory_total_bytes": is missing and it is required`), so one
//! malformed server never fails a whole request.

use crate::engine::{Declaration, Kind, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterInvalidServers;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-invalid-servers", Kind::HardFilter, "Servers objects which are valid");

impl ServerFilter for HardFilterInvalidServers {
    type Prepared = ();
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn filter(&self, req: &Request<'_>, _: &(), id: ServerId) -> Verdict {
        let Some(msg) = req.server(id).schema_violation() else { return Verdict::Keep };
        // The original warned only about set-up servers: unset-up ones are routinely
        // incomplete.
        if req.server(id).setup.truthy() {
            tracing::warn!(server = %req.key(id), "skipping invalid server: {msg}");
        }
        Verdict::fail(msg.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::json;

    #[test]
    fn keeps_valid_servers_in_order_and_names_the_first_violation_of_the_others() {
        let mut no_live_image = server("c");
        if let Some(sysinfo) = no_live_image["sysinfo"].as_object_mut() {
            sysinfo.shift_remove("Live Image");
        }
        let out = Fixture::new(vec![
            server("00000000-0000-0000-0000-00000000000a"),
            with(server("b"), json!({})),
            with(no_live_image, json!({"uuid": "00000000-0000-0000-0000-00000000000c"})),
            with(server("00000000-0000-0000-0000-00000000000d"), json!({"reserved": "false", "setup": null})),
            server("00000000-0000-0000-0000-00000000000e"),
        ])
        .run(&HardFilterInvalidServers);
        assert_eq!(out.remaining, ["00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000e"]);
        let pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
        assert_eq!(
            out.reason_list(),
            [
                ("b".into(), format!(r#"property "uuid": does not match the regex pattern {pattern}"#)),
                (
                    "00000000-0000-0000-0000-00000000000c".into(),
                    r#"property "sysinfo.Live Image": is missing and it is required"#.into()
                ),
                (
                    "00000000-0000-0000-0000-00000000000d".into(),
                    r#"property "reserved": false - string value found, but a boolean is required"#.into()
                ),
            ]
        );
    }

    #[test]
    fn a_server_without_uuid_is_reported_under_undefined() {
        let out = Fixture::new(vec![with(server("x"), json!({"uuid": null}))]).run(&HardFilterInvalidServers);
        assert!(out.remaining.is_empty());
        assert_eq!(
            out.reason_list(),
            [("undefined".into(), r#"property "uuid": is missing and it is required"#.into())]
        );
    }

    #[test]
    fn inline_vms_are_validated_too() {
        let uuid = "00000000-0000-0000-0000-000000000001";
        let vm = "62559b33-4f3a-4505-a942-87cc557fdf4e";
        let bad_vm = json!({vm: {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "max_physical_memory": 0, "state": "running"}});
        let out = Fixture::new(vec![with(server(uuid), json!({"vms": bad_vm}))]).run(&HardFilterInvalidServers);
        assert!(out.remaining.is_empty());
        assert_eq!(
            out.reason(uuid),
            Some(format!(r#"property "vms.{vm}.max_physical_memory": must have a minimum value of 1"#).as_str())
        );
    }

    #[test]
    fn a_server_without_a_sysinfo_object_leaves_here() {
        let uuid = "00000000-0000-0000-0000-000000000001";
        for sysinfo in [json!(null), json!([])] {
            let out =
                Fixture::new(vec![with(server(uuid), json!({"sysinfo": sysinfo}))]).run(&HardFilterInvalidServers);
            assert!(out.remaining.is_empty());
            assert!(
                out.reason(uuid).is_some_and(|r| r.starts_with(r#"property "sysinfo": "#)),
                "{:?}",
                out.reason(uuid)
            );
        }
    }

    #[test]
    fn lax_values_pass_as_in_the_original() {
        let uuid = "00000000-0000-0000-0000-000000000001";
        let lax = json!({"memory_total_bytes": "5", "disk_pool_alloc_bytes": [], "traits": ["x"], "vms": []});
        let out = Fixture::new(vec![with(server(uuid), lax)]).run(&HardFilterInvalidServers);
        assert_eq!(out.remaining, [uuid]);
        assert!(out.reasons.is_empty());
    }
}
