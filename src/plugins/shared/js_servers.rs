//! The servers of a request as operators' JavaScript gets them (custom plugins, owner-filter
//! snippets): the JSON the caller sent, with what earlier plugins wrote on each server, in a
//! form [`crate::js::present`] turns into objects inside the sandbox.

use std::fmt::Write;

use crate::engine::{Request, ServerId};
use crate::js::present::Presented;
use crate::js::Js;

/// `servers` as the original's plugins saw them at this point of the chain: each server
/// object as sent, plus `score`, VMs from open tickets and the quota they add, replaced
/// `overprovision_ratios`, `unreserved_cpu`, `_ram` and `_disk`.
pub fn present<'a>(req: &Request<'a>, servers: &[ServerId]) -> Presented<'a> {
    let bytes: usize = servers.iter().map(|&id| req.raw_servers.get(id).map_or(2, |r| r.len())).sum();
    let mut presented = Presented::with_capacity(servers.len(), bytes);
    for &id in servers {
        // Callers without the raw text (tests): the typed server's uuid.
        presented.push(req.raw_servers.get(id).copied(), || {
            serde_json::json!({"uuid": req.server(id).uuid.to_json()}).to_string()
        });
    }
    presented.finish(patches_json(req, servers))
}

/// What earlier plugins wrote on each server, for `present` to apply in the original's
/// order: `score`, or `[score, ticket VMs, zone quota added, zvol added, ratios, unreserved]`.
fn patches_json(req: &Request<'_>, servers: &[ServerId]) -> String {
    let num = |out: &mut String, n: f64| {
        // JSON has no NaN or infinities; `present` reads null as NaN.
        if n.is_finite() {
            let _ = write!(out, "{n}");
        } else {
            out.push_str("null");
        }
    };
    let mut out = String::with_capacity(servers.len() * 48 + 2);
    // Servers share one replacement of their ratios: its JSON is made once.
    let mut ratios_json: Option<(*const Js, String)> = None;
    out.push('[');
    for (n, &id) in servers.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        let state = req.state(id);
        if state.ticket_vms.is_empty() && state.ratios.is_none() && state.unreserved.is_none() {
            num(&mut out, state.score);
            continue;
        }
        out.push('[');
        num(&mut out, state.score);
        out.push_str(",[");
        for (i, (key, vm)) in state.ticket_vms.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut o = serde_json::Map::new();
            let mut put = |k: &str, v: Js| {
                if !v.is_undefined() {
                    o.insert(k.into(), v.to_json());
                }
            };
            put("uuid", vm.uuid().to_js());
            put("owner_uuid", vm.owner_uuid().to_js());
            put("max_physical_memory", vm.max_physical_memory_mib().to_js());
            put("cpu_cap", vm.cpu_cap_pct().to_js());
            put("quota", vm.quota_gib().to_js());
            put("brand", vm.brand().to_js());
            put("zone_state", Js::str("running"));
            put("state", vm.state().to_js());
            out.push_str(&serde_json::json!([key.as_ref(), o]).to_string());
        }
        out.push_str("],");
        num(&mut out, state.zone_quota_added_bytes);
        out.push(',');
        num(&mut out, state.kvm_zvol_added_bytes);
        out.push(',');
        match state.ratios.as_deref() {
            Some(ratios) => {
                let ptr: *const Js = ratios;
                match &ratios_json {
                    Some((p, text)) if *p == ptr => out.push_str(text),
                    _ => {
                        let text = ratios.to_json().to_string();
                        out.push_str(&text);
                        ratios_json = Some((ptr, text));
                    }
                }
            }
            None => out.push_str("null"),
        }
        out.push(',');
        match state.unreserved {
            Some(u) => {
                out.push('[');
                num(&mut out, u.cpu_pct);
                out.push(',');
                num(&mut out, u.ram_mib);
                out.push(',');
                num(&mut out, u.disk_mib);
                out.push(']');
            }
            None => out.push_str("null"),
        }
        out.push(']');
    }
    out.push(']');
    out
}
