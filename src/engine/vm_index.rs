//! VM look-ups without VMAPI.
//!
//! The original asked VMAPI for VMs when resolving affinities and volumes-from. A standalone
//! allocator only knows the VMs sent inline in the request, so those are indexed once (per
//! request, on first use; inventory mode keeps its index and changes it server by server)
//! and the two VMAPI calls the plugins made are answered from here:
//!
//! * [`VmLookup::get`]: one VM by uuid, optionally of one owner; a missing VM, or one of
//!   another owner, is VMAPI's 404 `VM not found`.
//! * [`VmLookup::list`]: the owner's VMs, optionally only `active` ones (any state but
//!   `destroyed` and `failed`), filtered by `eq`/`or`/`and` predicates, each returned as an
//!   object carrying only the requested fields, in the requested order.
//!
//! VMs are taken in request order (servers in order, then each `vms` object's keys in
//! order) whatever the server's state or validity; a VM's uuid is its key, its server the
//! server holding it; missing `tags` and `internal_metadata` read as `{}`. VMs added from
//! tickets are not visible, as they were not in VMAPI.
//!
//! The index holds no copy of a VM: an entry is where the VM is listed (its server and its
//! place in that server's `vms`), read there when asked for, and uuids are hashed from
//! those places too. At 150,000 VMs that is ~3 MB where copies took ~110 MB, which counts
//! in inventory mode, whose index lives as long as the replica.

use std::collections::HashMap;

use hashbrown::HashTable;

use crate::engine::ServerId;
use crate::fxhash::{hash_str, FxBuild};
use crate::js::{Js, JsObject, JsRef};
use crate::model::{Server, ServerVm};

/// One VM as the look-ups see it, read where it is listed.
#[derive(Debug, Clone, Copy)]
pub struct IndexedVm<'s, 'a> {
    /// The key of the VM in its server's `vms`.
    pub uuid: &'s str,
    /// The server holding it.
    pub server: ServerId,
    /// That server's `uuid`.
    pub server_uuid: &'s Js,
    vm: &'s ServerVm<'a>,
}

impl<'s> IndexedVm<'s, '_> {
    /// VMAPI's `state=active`: anything but destroyed or failed.
    pub fn is_active(&self) -> bool {
        !matches!(self.vm.state().as_str(), Some("destroyed" | "failed"))
    }

    pub fn owner_uuid(&self) -> JsRef<'s> {
        self.vm.owner_uuid()
    }

    pub fn docker(&self) -> JsRef<'s> {
        self.vm.docker()
    }

    /// `undefined` when the VM has none (VMAPI's `{}`: see [`IndexedVm::field`]).
    pub fn tags(&self) -> JsRef<'s> {
        self.vm.tags()
    }

    /// `undefined` when the VM has none (VMAPI's `{}`: see [`IndexedVm::field`]).
    pub fn internal_metadata(&self) -> JsRef<'s> {
        self.vm.internal_metadata()
    }

    /// The VM's value for a VMAPI field name (`undefined` for fields not kept; `{}` for
    /// missing `tags` and `internal_metadata`).
    pub fn field(&self, name: &str) -> Js {
        let or_empty = |v: JsRef| if v.is_undefined() { Js::obj(JsObject::new()) } else { v.to_js() };
        match name {
            "uuid" => Js::str(self.uuid),
            "server_uuid" => self.server_uuid.clone(),
            "owner_uuid" => self.vm.owner_uuid().to_js(),
            "alias" => self.vm.alias().to_js(),
            "state" => self.vm.state().to_js(),
            "tags" => or_empty(self.vm.tags()),
            "internal_metadata" => or_empty(self.vm.internal_metadata()),
            "docker" => self.vm.docker().to_js(),
            _ => Js::Undefined,
        }
    }

    /// The VM as VMAPI returns it with `fields=...`: only those, in that order (absent ones
    /// stay `undefined` and so vanish from JSON).
    pub fn project(&self, fields: &[&str]) -> Js {
        let obj: JsObject = fields.iter().map(|&f| (f.into(), self.field(f))).collect();
        Js::obj(obj)
    }

    fn owned_by(&self, owner: &str) -> bool {
        self.vm.owner_uuid().as_str() == Some(owner)
    }
}

/// A VMAPI list predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// `{eq: [field, value]}`: `*` in `value` matches any run of characters.
    Eq(String, String),
    Or(Vec<Predicate>),
    And(Vec<Predicate>),
}

impl Predicate {
    pub fn eq(field: impl Into<String>, value: impl Into<String>) -> Predicate {
        Predicate::Eq(field.into(), value.into())
    }

    fn matches(&self, vm: &IndexedVm) -> bool {
        match self {
            Predicate::Or(ps) => ps.iter().any(|p| p.matches(vm)),
            Predicate::And(ps) => ps.iter().all(|p| p.matches(vm)),
            Predicate::Eq(field, pattern) => match field.strip_prefix("tag.") {
                Some(key) => tag_matches(vm.tags().get(key), vm.tags().has(key), pattern),
                None => value_matches(&vm.field(field), pattern),
            },
        }
    }
}

/// `eq` on `tag.KEY`: the VM must have the tag; `*` takes any value, a string value is
/// glob-matched, any other value is compared as `String(value)`.
fn tag_matches(value: &Js, present: bool, pattern: &str) -> bool {
    if !present {
        return false;
    }
    if pattern == "*" {
        return true;
    }
    match value {
        Js::Str(s) => glob_match(pattern, s),
        other => other.to_js_string() == pattern,
    }
}

/// `eq` on a plain field (`alias`): an absent or null field never matches; otherwise the
/// value's string form is glob-matched.
fn value_matches(value: &Js, pattern: &str) -> bool {
    match value {
        Js::Undefined | Js::Null => false,
        Js::Str(s) => glob_match(pattern, s),
        other => glob_match(pattern, &other.to_js_string()),
    }
}

/// Whole-string glob match where only `*` is special (any run of characters, possibly empty).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Greedy match with backtracking to the last `*` only: linear in practice.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// A VMAPI `ListVms` query.
#[derive(Debug, Clone)]
pub struct ListQuery<'a> {
    pub owner: &'a str,
    /// `state: "active"`.
    pub active: bool,
    pub predicate: Option<Predicate>,
    /// The fields each returned object carries, in order.
    pub fields: &'a [&'a str],
}

/// VMAPI's 404 for a VM that does not exist (or belongs to someone else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmNotFound;

impl std::fmt::Display for VmNotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VM not found")
    }
}

impl std::error::Error for VmNotFound {}

/// Where a VM is listed: its server, then its place in that server's `vms`. Ordered as
/// request order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    server: u32,
    position: u32,
}

/// Every VM listed on the servers, by uuid and by owner. A datacenter that lists and
/// unlists VMs one after another keeps it current ([`VmIndex::insert`],
/// [`VmIndex::remove`]), in request order as if they had been sent inline. Each call is
/// given the servers the index was built on, as they are then.
#[derive(Debug, Default)]
pub struct VmIndex {
    /// Each entry's place (kept current as VMs listed before it on its server are
    /// unlisted); `None` once unlisted.
    entries: Vec<Option<Place>>,
    /// Each server's entries, so that unlisting a VM moves up the later ones.
    of_server: Vec<Vec<u32>>,
    /// The first entry (request order) under each uuid, hashed from the key where it is
    /// listed.
    by_uuid: HashTable<u32>,
    /// Each owner's entries, in request order.
    by_owner: HashMap<Box<str>, Vec<u32>, FxBuild>,
    /// Whether some uuid is on more than one entry (removals then look for the next one).
    duplicates: bool,
    live: usize,
}

/// The VM listed at `place`, with its key.
fn listed_at<'s, 'a>(servers: &'s [Server<'a>], place: Place) -> Option<(&'s str, &'s ServerVm<'a>)> {
    servers.get(place.server as usize)?.inline_vm(place.position as usize)
}

/// The key of entry `at` (empty once unlisted: never asked for then).
fn key_of<'s>(entries: &[Option<Place>], servers: &'s [Server<'_>], at: u32) -> &'s str {
    entries[at as usize].and_then(|place| listed_at(servers, place)).map_or("", |(key, _)| key)
}

impl VmIndex {
    pub fn build(servers: &[Server]) -> VmIndex {
        let mut index = VmIndex::default();
        for server in 0..servers.len() {
            index.append_server(servers, server);
        }
        // Kept as long as the servers (inventory mode: the replica's life).
        index.entries.shrink_to_fit();
        index.by_uuid.shrink_to_fit(|&e| hash_str(key_of(&index.entries, servers, e)));
        index
    }

    /// Indexes the VMs of server `server`, none of them indexed yet (a server added, or
    /// one replaced after [`VmIndex::remove_server`]): each takes its place in request
    /// order, as [`VmIndex::build`] would give it.
    pub fn append_server(&mut self, servers: &[Server], server: ServerId) {
        for position in 0..servers.get(server).map_or(0, Server::inline_vm_count) {
            self.add(servers, Place { server: server as u32, position: position as u32 });
        }
    }

    /// Adds an entry for the VM at `place`, in its place in request order.
    fn add(&mut self, servers: &[Server], place: Place) {
        let Some((uuid, vm)) = listed_at(servers, place) else { return };
        let at = self.entries.len() as u32;
        self.entries.push(Some(place));
        let entries = &self.entries;
        let hash = hash_str(uuid);
        match self.by_uuid.find_mut(hash, |&e| key_of(entries, servers, e) == uuid) {
            Some(first) => {
                self.duplicates = true;
                if entries[*first as usize].is_none_or(|p| p > place) {
                    *first = at;
                }
            }
            None => {
                self.by_uuid.insert_unique(hash, at, |&e| hash_str(key_of(entries, servers, e)));
            }
        }
        if let Some(owner) = vm.owner_uuid().as_str() {
            let list = self.by_owner.entry(owner.into()).or_default();
            // Built in order, this is the end; an inserted VM goes after its server's.
            let pos = list.partition_point(|&i| entries[i as usize] < Some(place));
            list.insert(pos, at);
        }
        if self.of_server.len() <= place.server as usize {
            self.of_server.resize_with(place.server as usize + 1, Vec::new);
        }
        self.of_server[place.server as usize].push(at);
        self.live += 1;
    }

    /// Indexes the VM listed last on `server` (call once it is listed there).
    pub fn insert(&mut self, servers: &[Server], server: ServerId) {
        let count = servers.get(server).map_or(0, Server::inline_vm_count);
        if let Some(last) = count.checked_sub(1) {
            self.add(servers, Place { server: server as u32, position: last as u32 });
        }
    }

    /// Unindexes the VM `uuid` of `server` (call before it is unlisted there: the VMs
    /// after it on the server move up); false when it is not indexed there.
    pub fn remove(&mut self, servers: &[Server], server: ServerId, uuid: &str) -> bool {
        let found = self
            .of_server
            .get(server)
            .and_then(|own| own.iter().copied().find(|&e| key_of(&self.entries, servers, e) == uuid));
        let Some(at) = found else { return false };
        let Some(place) = self.unindex(servers, at) else { return false };
        for &e in &self.of_server[server] {
            if let Some(p) = &mut self.entries[e as usize] {
                if p.position > place.position {
                    p.position -= 1;
                }
            }
        }
        self.of_server[server].retain(|&e| e != at);
        true
    }

    /// Unindexes every VM of `server` (call before the server is replaced or dropped).
    pub fn remove_server(&mut self, servers: &[Server], server: ServerId) {
        for at in self.of_server.get_mut(server).map(std::mem::take).unwrap_or_default() {
            self.unindex(servers, at);
        }
    }

    /// Takes entry `at` out of the look-ups (its VM still listed where the entry says).
    fn unindex(&mut self, servers: &[Server], at: u32) -> Option<Place> {
        let place = self.entries[at as usize]?;
        let (uuid, vm) = listed_at(servers, place)?;
        if let Some(owner) = vm.owner_uuid().as_str() {
            if let Some(list) = self.by_owner.get_mut(owner) {
                let entries = &self.entries;
                if let Ok(i) = list.binary_search_by_key(&Some(place), |&e| entries[e as usize]) {
                    list.remove(i);
                }
            }
        }
        let hash = hash_str(uuid);
        let entries = &self.entries;
        if let Ok(first) = self.by_uuid.find_entry(hash, |&e| e == at) {
            // The next entry (request order) under the same uuid, if any, is found next.
            let next = if self.duplicates {
                (0..entries.len() as u32)
                    .filter(|&e| e != at && key_of(entries, servers, e) == uuid)
                    .min_by_key(|&e| entries[e as usize])
            } else {
                None
            };
            match next {
                Some(next) => *first.into_mut() = next,
                None => drop(first.remove()),
            }
        }
        self.entries[at as usize] = None;
        self.live -= 1;
        Some(place)
    }

    /// Number of VMs indexed.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Entries of VMs unindexed since the index was built (each still takes a slot).
    pub fn dead(&self) -> usize {
        self.entries.len() - self.live
    }

    /// The look-ups on `servers`, the servers it was built on (as they are now).
    pub fn on<'s, 'a>(&'s self, servers: &'s [Server<'a>]) -> VmLookup<'s, 'a> {
        VmLookup { index: self, servers }
    }
}

/// An index with the servers its entries point into: what the plugins query.
#[derive(Debug, Clone, Copy)]
pub struct VmLookup<'s, 'a> {
    index: &'s VmIndex,
    servers: &'s [Server<'a>],
}

impl<'s, 'a> VmLookup<'s, 'a> {
    fn at(&self, e: u32) -> Option<IndexedVm<'s, 'a>> {
        let place = self.index.entries.get(e as usize).copied().flatten()?;
        let (uuid, vm) = listed_at(self.servers, place)?;
        let server = &self.servers[place.server as usize];
        Some(IndexedVm { uuid, server: place.server as usize, server_uuid: &server.uuid, vm })
    }

    /// `GetVm`: the VM with this uuid, which must belong to `owner` when one is given.
    pub fn get(&self, uuid: &str, owner: Option<&str>) -> Result<IndexedVm<'s, 'a>, VmNotFound> {
        let (entries, servers) = (&self.index.entries, self.servers);
        let first = self.index.by_uuid.find(hash_str(uuid), |&e| key_of(entries, servers, e) == uuid);
        let vm = first.and_then(|&e| self.at(e)).ok_or(VmNotFound)?;
        match owner {
            Some(o) if !vm.owned_by(o) => Err(VmNotFound),
            _ => Ok(vm),
        }
    }

    /// The owner's VMs that satisfy the query, in request order.
    pub fn matching<'q>(&self, q: &'q ListQuery<'_>) -> impl Iterator<Item = IndexedVm<'s, 'a>> + 'q
    where
        's: 'q,
    {
        let this = *self;
        let ids = self.index.by_owner.get(q.owner).map_or(&[][..], Vec::as_slice);
        ids.iter()
            .filter_map(move |&e| this.at(e))
            .filter(move |vm| (!q.active || vm.is_active()) && q.predicate.as_ref().is_none_or(|p| p.matches(vm)))
    }

    /// `ListVms`: the matching VMs as objects with only the requested fields.
    pub fn list(&self, q: &ListQuery<'_>) -> Vec<Js> {
        self.matching(q).map(|vm| vm.project(q.fields)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OWNER: &str = "00000000-0000-0000-0000-0000000000bb";
    const OTHER: &str = "00000000-0000-0000-0000-0000000000cc";

    fn servers(v: serde_json::Value) -> Vec<Server<'static>> {
        crate::model::from_test_json(&v)
    }

    fn sample() -> Vec<Server<'static>> {
        servers(json!([
            {"uuid": "s1", "vms": {
                "v1": {"owner_uuid": OWNER, "alias": "web1", "state": "running", "tags": {"role": "web", "n": 2}},
                "v2": {"owner_uuid": OTHER, "alias": "web2", "state": "running"},
                "v3": {"owner_uuid": OWNER, "alias": "db1", "state": "failed", "tags": {"role": "db"}}
            }},
            {"uuid": "s2", "vms": []},
            {"uuid": "s3", "status": "unknown", "vms": {
                "v4": {"owner_uuid": OWNER, "state": "stopped", "docker": true,
                       "internal_metadata": {"docker:id": "abc"}, "tags": {"docker:label:role": "webby", "flag": true}},
                "v1": {"owner_uuid": OTHER, "alias": "dup"}
            }}
        ]))
    }

    fn uuids(list: &[Js]) -> Vec<String> {
        list.iter().map(|v| v.get("uuid").to_js_string()).collect()
    }

    #[test]
    fn inserted_vms_take_their_place_in_request_order_and_removal_undoes_them() {
        let mut s = sample();
        let mut idx = VmIndex::build(&s);
        let vm: crate::model::ServerVm = crate::model::FullVm {
            owner_uuid: Js::str(OWNER),
            alias: Js::str("web9"),
            state: Js::str("running"),
            ..Default::default()
        }
        .into();
        s[0].add_new_vm("v9".into(), vm);
        idx.insert(&s, 0);
        let q = ListQuery { owner: OWNER, active: false, predicate: None, fields: &["uuid"] };
        // After s1's own VMs, before s3's.
        assert_eq!(uuids(&idx.on(&s).list(&q)), ["v1", "v3", "v9", "v4"]);
        assert_eq!(idx.on(&s).get("v9", Some(OWNER)).expect("v9").server, 0);
        assert_eq!(idx.len(), 6);
        assert!(idx.remove(&s, 0, "v9"));
        s[0].remove_vm("v9");
        assert!(!idx.remove(&s, 0, "v9"));
        assert_eq!(uuids(&idx.on(&s).list(&q)), ["v1", "v3", "v4"]);
        assert!(idx.on(&s).get("v9", None).is_err());
        // A repeated uuid: removing the first occurrence makes the next one found.
        assert!(idx.remove(&s, 0, "v1"));
        s[0].remove_vm("v1");
        assert_eq!(idx.on(&s).get("v1", None).expect("the other v1").server, 2);
        assert_eq!(idx.len(), 4);
        // The VMs after an unlisted one moved up: still found, with their own fields.
        let v3 = idx.on(&s).get("v3", None).expect("v3");
        assert_eq!((v3.uuid, v3.field("alias").to_js_string()), ("v3", "db1".to_string()));
        assert_eq!(uuids(&idx.on(&s).list(&q)), ["v3", "v4"]);
        assert_eq!(idx.dead(), 2);
    }

    #[test]
    fn a_replaced_server_is_indexed_again_where_it_stands() {
        let mut s = sample();
        let mut idx = VmIndex::build(&s);
        idx.remove_server(&s, 0);
        s[0] = servers(json!([{"uuid": "s1", "vms": {
            "v7": {"owner_uuid": OWNER, "alias": "web7", "state": "running"},
            "v1": {"owner_uuid": OWNER, "alias": "web1", "state": "running"}
        }}]))
        .remove(0);
        idx.append_server(&s, 0);
        let q = ListQuery { owner: OWNER, active: false, predicate: None, fields: &["uuid"] };
        assert_eq!(uuids(&idx.on(&s).list(&q)), ["v7", "v1", "v4"]);
        assert_eq!(idx.on(&s).get("v1", None).expect("v1 on s1 again").server, 0);
        assert!(idx.on(&s).get("v2", None).is_err());
        assert_eq!((idx.len(), idx.dead()), (4, 3));
    }

    #[test]
    fn indexes_every_inline_vm_in_request_order() {
        let s = sample();
        let built = VmIndex::build(&s);
        let idx = built.on(&s);
        assert_eq!(built.len(), 5);
        let v4 = idx.get("v4", None).expect("v4");
        assert_eq!((v4.server, v4.server_uuid.to_js_string()), (2, "s3".into()));
        // Missing tags / internal_metadata read as {}.
        let v2 = idx.get("v2", None).expect("v2");
        assert_eq!(
            (v2.field("tags").stringify(), v2.field("internal_metadata").stringify()),
            ("{}".into(), "{}".into())
        );
        // A repeated uuid resolves to its first occurrence.
        assert_eq!(idx.get("v1", None).expect("v1").server, 0);
    }

    #[test]
    fn get_hides_missing_vms_and_other_owners() {
        let s = sample();
        let built = VmIndex::build(&s);
        let idx = built.on(&s);
        assert!(idx.get("v1", Some(OWNER)).is_ok());
        assert_eq!(idx.get("v2", Some(OWNER)).map(|v| v.uuid), Err(VmNotFound));
        assert_eq!(idx.get("nope", None).map(|v| v.uuid), Err(VmNotFound));
        assert_eq!(VmNotFound.to_string(), "VM not found");
        // A failed VM is still found by uuid.
        assert!(idx.get("v3", None).is_ok());
    }

    #[test]
    fn list_filters_by_owner_state_and_predicates() {
        let s = sample();
        let built = VmIndex::build(&s);
        let idx = built.on(&s);
        let all = ListQuery { owner: OWNER, active: false, predicate: None, fields: &["uuid"] };
        assert_eq!(uuids(&idx.list(&all)), ["v1", "v3", "v4"]);
        let active = ListQuery { active: true, ..all.clone() };
        assert_eq!(uuids(&idx.list(&active)), ["v1", "v4"]);
        let alias = ListQuery { predicate: Some(Predicate::eq("alias", "w*")), ..active.clone() };
        assert_eq!(uuids(&idx.list(&alias)), ["v1"]);
        let tag = ListQuery {
            predicate: Some(Predicate::Or(vec![
                Predicate::eq("tag.role", "web*"),
                Predicate::eq("tag.docker:label:role", "web*"),
            ])),
            ..active.clone()
        };
        assert_eq!(uuids(&idx.list(&tag)), ["v1", "v4"]);
        let both = ListQuery {
            predicate: Some(Predicate::And(vec![Predicate::eq("tag.role", "*"), Predicate::eq("alias", "web1")])),
            ..active.clone()
        };
        assert_eq!(uuids(&idx.list(&both)), ["v1"]);
        let other = ListQuery { owner: OTHER, ..all.clone() };
        assert_eq!(uuids(&idx.list(&other)), ["v2", "v1"]);
    }

    #[test]
    fn non_string_tags_compare_as_strings_without_globbing() {
        let s = sample();
        let built = VmIndex::build(&s);
        let idx = built.on(&s);
        let q = |p: Predicate| ListQuery { owner: OWNER, active: false, predicate: Some(p), fields: &["uuid"] };
        assert_eq!(uuids(&idx.list(&q(Predicate::eq("tag.n", "2")))), ["v1"]);
        assert!(idx.list(&q(Predicate::eq("tag.n", "2*"))).is_empty());
        assert_eq!(uuids(&idx.list(&q(Predicate::eq("tag.flag", "true")))), ["v4"]);
        assert_eq!(uuids(&idx.list(&q(Predicate::eq("tag.flag", "*")))), ["v4"]);
        assert!(idx.list(&q(Predicate::eq("tag.missing", "*"))).is_empty());
    }

    #[test]
    fn returned_objects_carry_the_requested_fields_in_order() {
        let s = sample();
        let built = VmIndex::build(&s);
        let idx = built.on(&s);
        let q = ListQuery {
            owner: OWNER,
            active: true,
            predicate: None,
            fields: &["uuid", "alias", "internal_metadata", "docker"],
        };
        let list = idx.list(&q);
        assert_eq!(list[0].stringify(), r#"{"uuid":"v1","alias":"web1","internal_metadata":{}}"#);
        assert_eq!(list[1].stringify(), r#"{"uuid":"v4","internal_metadata":{"docker:id":"abc"},"docker":true}"#);
    }

    #[test]
    fn glob_only_knows_star() {
        assert!(glob_match("*", ""));
        assert!(glob_match("web*", "web"));
        assert!(glob_match("*b*1", "webhead1"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("web?", "web1"));
        assert!(glob_match("web?", "web?"));
        assert!(glob_match("w.b", "w.b"));
        assert!(!glob_match("w.b", "wxb"));
        assert!(!glob_match("web", "web1"));
        assert!(!glob_match("*1", "web2"));
    }
}
