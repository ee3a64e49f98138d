//! `hard-filter-vlans`: keeps servers that can reach every network the VM needs, i.e. that
//! have, for each group of alternative NIC tags requested, one tag on a NIC whose link is up.
//!
//! Groups come from `vm.nic_tag_requirements` (each inner array is one group), else from
//! `vm.nic_tags` (one group per tag). A server's tags come from its physical NICs' `NIC Names`
//! and its virtual NICs' `Overlay Nic Tags`, indexed as online (link `up`) or offline; a group
//! with no online tag but an offline one names the NIC that is down.
//!
//! Decisions where the original throws or worse: a server without sysinfo reads as one
//! without interfaces (`Server missing interfaces in sysinfo`); a NIC whose tag list is not
//! an array (missing, a string, a number), or a NIC or interface map that is not an object,
//! contributes no tags; requirements (or a requirement group, or `nic_tags`) that are not
//! arrays fail the allocation with an internal error (validation rejects them up front).
//! The original names the group's last tag where it means the last offline one (and crashes
//! when they differ); this names the last offline tag, which agrees wherever it did not crash.

use crate::engine::{keep_passing, Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId, Verdict};
use crate::js::Js;
use crate::model::Shape;

pub struct HardFilterVlans;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-vlans", Kind::HardFilter, "Servers supporting required NIC Tags")
        .writes(&[Data::NicNames])
        .per_server();

impl Plugin for HardFilterVlans {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let Some(groups) = requested_groups(&req.vm.nic_tag_requirements, &req.vm.nic_tags)? else {
            reasons.skip("No NIC Tag requirements to filter on");
            return Ok(servers.to_vec());
        };
        // The original indexed every server's tags first, writing each NIC's name into it
        // as `interface`; the chosen server is answered with those names.
        for &id in servers {
            if req.server(id).sysinfo().network_interfaces.truthy() {
                req.name_nics(id);
            }
        }
        let keys = tag_keys(&groups);
        Ok(keep_passing(req, servers, reasons, true, |req, id| match check_server(req, id, &groups, &keys) {
            None => Verdict::Keep,
            Some(why) => Verdict::fail(why),
        }))
    }
}

/// The tag groups: `None` when nothing is requested (an empty array is zero groups).
fn requested_groups(requirements: &Js, nic_tags: &Js) -> Result<Option<Vec<Vec<Js>>>, PluginError> {
    if requirements.truthy() {
        let Some(list) = requirements.as_arr() else {
            return Err(PluginError(format!("vm.nic_tag_requirements is not an array: {}", requirements.stringify())));
        };
        let groups = list
            .iter()
            .map(|g| {
                g.as_arr().map(<[Js]>::to_vec).ok_or_else(|| {
                    PluginError(format!("vm.nic_tag_requirements holds a non-array group: {}", g.stringify()))
                })
            })
            .collect::<Result<_, _>>()?;
        return Ok(Some(groups));
    }
    if nic_tags.truthy() {
        let Some(tags) = nic_tags.as_arr() else {
            return Err(PluginError(format!("vm.nic_tags is not an array: {}", nic_tags.stringify())));
        };
        return Ok(Some(tags.iter().map(|t| vec![t.clone()]).collect()));
    }
    Ok(None)
}

/// The NIC carrying a tag: its interface name (the key in sysinfo) and `Link Status`.
#[derive(Clone, Copy)]
struct Carrier<'a> {
    interface: &'a str,
    status: &'a Js,
}

/// A requested tag as compared (`String(tag)`).
fn tag_keys(groups: &[Vec<Js>]) -> Vec<Vec<String>> {
    groups.iter().map(|g| g.iter().map(Js::to_js_string).collect()).collect()
}

/// `String(v) === key`, without building the string for a string value.
fn string_is(v: &Js, key: &str) -> bool {
    match v {
        Js::Str(s) => &**s == key,
        other => other.to_js_string() == key,
    }
}

/// `None` when the server satisfies every group, else why not.
///
/// A tag counts as online when any NIC whose link is exactly `up` carries it; otherwise the
/// last NIC in sysinfo order (physical, then virtual) carrying it is the one named as down.
fn check_server(req: &Request<'_>, id: ServerId, groups: &[Vec<Js>], keys: &[Vec<String>]) -> Option<String> {
    let sysinfo = req.server(id).sysinfo();
    if !sysinfo.network_interfaces.truthy() {
        return Some("Server missing interfaces in sysinfo".into());
    }
    let physical = entries(&sysinfo.network_interfaces).map(|(name, nic)| (name, &nic.link_status, &nic.nic_names));
    let virtual_nics = entries(&sysinfo.virtual_network_interfaces)
        .map(|(name, vnic)| (name, &vnic.link_status, &vnic.overlay_nic_tags));
    // Walked afresh for each tag: no per-server list to allocate.
    let nics = physical.chain(virtual_nics);
    for (group, group_keys) in groups.iter().zip(keys) {
        let mut last_offline = None;
        let mut satisfied = false;
        for key in group_keys {
            let mut offline = None;
            for (interface, status, tags) in nics.clone() {
                if !tags.as_arr().unwrap_or_default().iter().any(|t| string_is(t, key)) {
                    continue;
                }
                if status.as_str() == Some("up") {
                    satisfied = true;
                    break;
                }
                offline = Some(Carrier { interface, status });
            }
            if satisfied {
                break;
            }
            if let Some(carrier) = offline {
                last_offline = Some((key, carrier));
            }
        }
        if satisfied {
            continue;
        }
        return Some(match last_offline {
            Some((tag, nic)) => format!("NIC {} for tag \"{tag}\" is {}", nic.interface, nic.status.to_js_string()),
            None => {
                // Array.prototype.join: null and undefined print as nothing.
                let names: Vec<String> = group
                    .iter()
                    .map(|t| if matches!(t, Js::Null | Js::Undefined) { String::new() } else { t.to_js_string() })
                    .collect();
                format!("Server must have one of the NIC Tags: {}", names.join(", "))
            }
        });
    }
    None
}

/// The NICs of an interface map, in sysinfo order (none when it is not an object, and a NIC
/// that is not an object has no fields).
fn entries<T: crate::model::EmptyValue>(
    map: &Shape<crate::model::NicMap<T>>,
) -> impl Iterator<Item = (&str, &T)> + Clone {
    map.as_obj().into_iter().flat_map(|m| m.iter().map(|(k, v)| (k, v.obj_or_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    fn nics(uuid: &str, physical: Value, virtual_nics: Option<Value>) -> Value {
        let mut sysinfo = json!({"Network Interfaces": physical, "SDC Version": "7.0"});
        if let Some(v) = virtual_nics {
            sysinfo["Virtual Network Interfaces"] = v;
        }
        with(server(uuid), json!({ "sysinfo": sysinfo }))
    }

    fn nic(status: &str, tags: Value) -> Value {
        json!({"Link Status": status, "NIC Names": tags})
    }

    fn servers() -> Vec<Value> {
        vec![
            nics("up", json!({"e0": nic("up", json!(["external"])), "e1": nic("up", json!(["admin"]))}), None),
            nics("down", json!({"e0": nic("down", json!(["external"])), "e1": nic("up", json!(["admin"]))}), None),
            nics(
                "cust",
                json!({"e0": nic("up", json!(["external", "customer12"])), "e1": nic("up", json!(["admin"]))}),
                None,
            ),
            nics(
                "overlay",
                json!({}),
                Some(json!({"sdc_underlay0": {"Link Status": "up", "Overlay Nic Tags": ["sdc_overlay"]}})),
            ),
            nics(
                "overlay_down",
                json!({}),
                Some(json!({"e0": {"Link Status": "down", "Overlay Nic Tags": ["sdc_overlay"]}})),
            ),
            nics(
                "mixed",
                json!({"ixgbe0": nic("up", json!(["customer13"]))}),
                Some(json!({"sdc_underlay0": {"Link Status": "up", "Overlay Nic Tags": ["sdc_overlay"]}})),
            ),
            nics("no_overlay_tags", json!({}), Some(json!({"e0": {"Link Status": "up"}}))),
        ]
    }

    fn vm(extra: Value) -> Value {
        with(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": "o", "brand": "joyent"}), extra)
    }

    fn missing(tags: &str) -> String {
        format!("Server must have one of the NIC Tags: {tags}")
    }

    #[test]
    fn no_requirements_skip() {
        let out = Fixture::new(servers()).vm(vm(json!({}))).run(&HardFilterVlans);
        assert_eq!(out.remaining.len(), 7);
        assert_eq!(out.reason_list(), [("skip".to_string(), "No NIC Tag requirements to filter on".to_string())]);
    }

    #[test]
    fn empty_nic_tags_filter_only_servers_without_interfaces() {
        let mut list = servers();
        list.push(with(server("bare"), json!({"sysinfo": {"SDC Version": "7.0"}})));
        list.push(with(server("nosysinfo"), json!({"sysinfo": null})));
        let out = Fixture::new(list).vm(vm(json!({"nic_tags": []}))).run(&HardFilterVlans);
        assert_eq!(out.remaining.len(), 7);
        assert_eq!(
            out.reason_list(),
            [
                ("bare".to_string(), "Server missing interfaces in sysinfo".to_string()),
                ("nosysinfo".to_string(), "Server missing interfaces in sysinfo".to_string())
            ]
        );
    }

    #[test]
    fn single_tags() {
        let out = Fixture::new(servers()).vm(vm(json!({"nic_tags": ["external"]}))).run(&HardFilterVlans);
        assert_eq!(out.remaining, ["up", "cust"]);
        assert_eq!(out.reason("down"), Some(r#"NIC e0 for tag "external" is down"#));
        assert_eq!(out.reason("overlay"), Some(missing("external").as_str()));
        assert_eq!(out.reasons.len(), 5);

        let out = Fixture::new(servers()).vm(vm(json!({"nic_tags": ["sdc_overlay"]}))).run(&HardFilterVlans);
        assert_eq!(out.remaining, ["overlay", "mixed"]);
        assert_eq!(out.reason("overlay_down"), Some(r#"NIC e0 for tag "sdc_overlay" is down"#));
        assert_eq!(out.reason("no_overlay_tags"), Some(missing("sdc_overlay").as_str()));
    }

    #[test]
    fn every_tag_is_needed_first_failure_reported() {
        let out = Fixture::new(servers()).vm(vm(json!({"nic_tags": ["admin", "doesnotexist"]}))).run(&HardFilterVlans);
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason("up"), Some(missing("doesnotexist").as_str()));
        assert_eq!(out.reason("overlay"), Some(missing("admin").as_str()));
    }

    #[test]
    fn groups_are_alternatives() {
        let reqs = json!({"nic_tag_requirements": [["sdc_overlay"], ["customer13", "customer12"]]});
        let out = Fixture::new(servers()).vm(vm(reqs)).run(&HardFilterVlans);
        assert_eq!(out.remaining, ["mixed"]);
        assert_eq!(out.reason("cust"), Some(missing("sdc_overlay").as_str()));
        assert_eq!(out.reason("overlay"), Some(missing("customer13, customer12").as_str()));
        // Requirements win over nic_tags.
        let both = json!({"nic_tag_requirements": [["admin"]], "nic_tags": ["nope"]});
        let out = Fixture::new(servers()).vm(vm(both)).run(&HardFilterVlans);
        assert_eq!(out.remaining, ["up", "down", "cust"]);
    }

    #[test]
    fn the_last_offline_tag_of_the_group_is_named() {
        let list = vec![
            nics("a", json!({"e0": nic("down", json!(["a"]))}), None),
            nics("ab", json!({"e0": nic("down", json!(["a"])), "e1": nic("unknown", json!(["b"]))}), None),
            nics("x", json!({"e0": nic("up", json!(["x"])), "e1": nic("down", json!(["x"]))}), None),
        ];
        let out =
            Fixture::new(list.clone()).vm(vm(json!({"nic_tag_requirements": [["b", "a"]]}))).run(&HardFilterVlans);
        assert_eq!(out.reason("a"), Some(r#"NIC e0 for tag "a" is down"#));
        assert_eq!(out.reason("ab"), Some(r#"NIC e0 for tag "a" is down"#));
        let out =
            Fixture::new(list.clone()).vm(vm(json!({"nic_tag_requirements": [["a", "b"]]}))).run(&HardFilterVlans);
        assert_eq!(out.reason("ab"), Some(r#"NIC e1 for tag "b" is unknown"#));
        // Online anywhere beats offline elsewhere.
        let out = Fixture::new(list).vm(vm(json!({"nic_tags": ["x"]}))).run(&HardFilterVlans);
        assert_eq!(out.remaining, ["x"]);
    }

    #[test]
    fn later_nics_overwrite_and_odd_shapes_carry_no_tags() {
        let list = vec![
            nics("two_down", json!({"e0": nic("down", json!(["t"])), "e1": {"NIC Names": ["t"]}}), None),
            nics("strings", json!({"e0": nic("up", json!("t")), "e1": "garbage"}), Some(json!(["t"]))),
        ];
        let out = Fixture::new(list).vm(vm(json!({"nic_tag_requirements": [["t"], []]}))).run(&HardFilterVlans);
        assert_eq!(out.reason("two_down"), Some(r#"NIC e1 for tag "t" is undefined"#));
        assert_eq!(out.reason("strings"), Some(missing("t").as_str()));
        let list = vec![nics("up", json!({"e0": nic("up", json!(["t"]))}), None)];
        let out = Fixture::new(list).vm(vm(json!({"nic_tag_requirements": [["t"], []]}))).run(&HardFilterVlans);
        assert_eq!(out.reason("up"), Some("Server must have one of the NIC Tags: "));
    }

    #[test]
    fn malformed_requirements_are_an_internal_error() {
        for bad in
            [json!({"nic_tag_requirements": "a"}), json!({"nic_tag_requirements": ["a"]}), json!({"nic_tags": "a"})]
        {
            let f = Fixture::new(servers()).vm(vm(bad));
            let mut req = f.request();
            let mut reasons = Reasons::default();
            assert!(HardFilterVlans.run(&mut req, &[0], &mut reasons).is_err());
        }
    }
}
