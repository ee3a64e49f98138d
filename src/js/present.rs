//! The servers as operators' JavaScript sees them (custom plugins and `filter_owner_server`
//! snippets): each server object as the caller sent it, plus what earlier plugins wrote on
//! it, built inside a [`crate::js::sandbox::Sandbox`] by [`PRESENT_JS`].
//!
//! Parsing every server's JSON in QuickJS (about 60 MB/s) would cost far more than the code
//! that reads it, which mostly reads a few scalars. So each server is handed over as its
//! scalar members (one `JSON.parse` for all servers) and the JSON text of its object and
//! array members (`sysinfo`, `vms`, `traits`...), which an accessor parses the first time a
//! member is read (and then replaces by the value, as a plain data property). Key order,
//! `in`, `Object.keys`, `JSON.stringify` and assignment behave as on the parsed object.

use rquickjs::{Array, Ctx};
use serde_json::value::RawValue;

/// The servers of one call, ready to hand to [`PRESENT_JS`]'s `present`.
pub struct Presented<'a> {
    /// One array: each server's scalar members (object and array members hold a `0`
    /// placeholder, keeping their place among the others).
    json: String,
    /// Per server: the deferred members, as (key, JSON text).
    lazy: Vec<Vec<(String, &'a str)>>,
    /// What earlier plugins wrote on each server (see `present` in [`PRESENT_JS`]).
    patches: String,
}

impl<'a> Presented<'a> {
    /// Room for `count` servers of about `bytes` bytes of JSON in all.
    pub fn with_capacity(count: usize, bytes: usize) -> Presented<'a> {
        let mut json = String::with_capacity(bytes / 8 + count + 2);
        json.push('[');
        Presented { json, lazy: Vec::with_capacity(count), patches: String::new() }
    }

    /// Adds a server from its JSON text as received; when there is none (or it is not an
    /// object), from `fallback`, the JSON text of an object to show instead.
    pub fn push(&mut self, raw: Option<&'a str>, fallback: impl FnOnce() -> String) {
        if !self.lazy.is_empty() {
            self.json.push(',');
        }
        let members = raw.and_then(|raw| {
            crate::js::json::from_str::<indexmap::IndexMap<std::borrow::Cow<'a, str>, &'a RawValue>>(raw).ok()
        });
        let Some(members) = members else {
            self.json.push_str(&fallback());
            self.lazy.push(Vec::new());
            return;
        };
        let mut deferred = Vec::new();
        self.json.push('{');
        for (m, (key, value)) in members.iter().enumerate() {
            if m > 0 {
                self.json.push(',');
            }
            let text = value.get();
            self.json.push_str(&crate::js::json::stringify(key.as_ref()));
            self.json.push(':');
            if text.starts_with('{') || text.starts_with('[') {
                self.json.push('0');
                deferred.push((key.to_string(), text));
            } else {
                self.json.push_str(text);
            }
        }
        self.json.push('}');
        self.lazy.push(deferred);
    }

    /// Closes the list; `patches` is a JSON array with one entry per server (see `present`).
    pub fn finish(mut self, patches: String) -> Presented<'a> {
        self.json.push(']');
        self.patches = patches;
        self
    }

    pub fn len(&self) -> usize {
        self.lazy.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lazy.is_empty()
    }

    /// The arguments of `present(serversJson, lazy, patchesJson)` in `ctx`.
    pub fn arguments<'js>(&self, ctx: &Ctx<'js>) -> rquickjs::Result<(&str, Array<'js>, &str)> {
        let lazy = Array::new(ctx.clone())?;
        for (i, members) in self.lazy.iter().enumerate() {
            let flat = Array::new(ctx.clone())?;
            for (j, (key, raw)) in members.iter().enumerate() {
                flat.set(2 * j, key.as_str())?;
                flat.set(2 * j + 1, *raw)?;
            }
            lazy.set(i, flat)?;
        }
        Ok((self.json.as_str(), lazy, self.patches.as_str()))
    }
}

/// A script whose value is `present(serversJson, lazy, patchesJson)`, returning the servers
/// as an array of objects. A patch is a score (`null`: NaN), or `[score, ticket VMs as
/// [key, vm] pairs, zone quota added, zvol size added, replaced ratios or null, [unreserved
/// cpu, ram, disk] or null]`, applied in the original's order.
pub const PRESENT_JS: &str = r#"(function () {
'use strict';
function settle(obj, key, value) {
    Object.defineProperty(obj, key, { value: value, writable: true, enumerable: true, configurable: true });
}
// A member parsed on first read (or replaced on first write), in its place among the others.
// One accessor per member name, shared by every server (the texts are on the server, under
// RAW), so that nothing refers back to a server and freeing one needs no cycle collection.
var RAW = Symbol('dapi raw members');
var accessors = Object.create(null);
function accessor(key) {
    var a = accessors[key];
    if (a === undefined) {
        a = accessors[key] = {
            enumerable: true,
            configurable: true,
            get: function () {
                var m = this[RAW], v;
                for (var i = 0; i < m.length; i += 2) {
                    if (m[i] === key) { v = JSON.parse(m[i + 1]); break; }
                }
                settle(this, key, v);
                return v;
            },
            set: function (v) { settle(this, key, v); }
        };
    }
    return a;
}
return function present(serversJson, lazy, patchesJson) {
    var servers = JSON.parse(serversJson);
    var patches = JSON.parse(patchesJson);
    for (var i = 0; i < servers.length; i++) {
        var s = servers[i], p = patches[i], members = lazy[i];
        if (members.length > 0) {
            Object.defineProperty(s, RAW, { value: members });
            for (var m = 0; m < members.length; m += 2) Object.defineProperty(s, members[m], accessor(members[m]));
        }
        if (typeof p === 'number' || p === null) {
            s.score = p === null ? NaN : p;
            continue;
        }
        s.score = p[0] === null ? NaN : p[0];
        if (p[1].length > 0) {
            if (!s.vms) s.vms = {};
            for (var t = 0; t < p[1].length; t++) s.vms[p[1][t][0]] = p[1][t][1];
            s.disk_zone_quota_bytes += p[2];
            if (p[3] !== 0) s.disk_kvm_zvol_volsize_bytes += p[3];
        }
        if (p[4] !== null) s.overprovision_ratios = p[4];
        if (p[5] !== null) {
            s.unreserved_cpu = p[5][0];
            s.unreserved_ram = p[5][1];
            s.unreserved_disk = p[5][2];
        }
    }
    return servers;
};
})()"#;
