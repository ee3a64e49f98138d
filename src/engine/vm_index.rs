//! VM look-ups without VMAPI.
//!
//! The original asked VMAPI for VMs when resolving affinities and volumes-from. A standalone
//! allocator only knows the VMs sent inline in the request, so those are indexed once (per
//! request, on first use) and the two VMAPI calls the plugins made are answered from here:
//!
//! * [`VmIndex::get`]: one VM by uuid, optionally of one owner; a missing VM, or one of
//!   another owner, is VMAPI's 404 `VM not found`.
//! * [`VmIndex::list`]: the owner's VMs, optionally only `active` ones (any state but
//!   `destroyed` and `failed`), filtered by `eq`/`or`/`and` predicates, each returned as an
//!   object carrying only the requested fields, in the requested order.
//!
//! VMs are taken in request order (servers in order, then each `vms` object's keys in
//! order) whatever the server's state or validity; a VM's uuid is its key, its server the
//! server holding it; missing `tags` and `internal_metadata` read as `{}`. VMs added from
//! tickets are not visible, as they were not in VMAPI.

use std::collections::HashMap;

use crate::engine::ServerId;
use crate::js::{Js, JsObject, JsRef};
use crate::model::{Server, ServerVm};

/// One VM as the look-ups see it.
#[derive(Debug, Clone)]
pub struct IndexedVm {
    /// The key of the VM in its server's `vms`.
    pub uuid: Box<str>,
    /// The server holding it.
    pub server: ServerId,
    /// That server's `uuid`.
    pub server_uuid: Js,
    pub owner_uuid: Js,
    pub alias: Js,
    pub state: Js,
    /// `{}` when the VM has none.
    pub tags: Js,
    /// `{}` when the VM has none.
    pub internal_metadata: Js,
    pub docker: Js,
}

impl IndexedVm {
    /// VMAPI's `state=active`: anything but destroyed or failed.
    pub fn is_active(&self) -> bool {
        !matches!(self.state.as_str(), Some("destroyed" | "failed"))
    }

    /// The VM's value for a VMAPI field name (`undefined` for fields not kept).
    pub fn field(&self, name: &str) -> Js {
        match name {
            "uuid" => Js::str(&self.uuid),
            "server_uuid" => self.server_uuid.clone(),
            "owner_uuid" => self.owner_uuid.clone(),
            "alias" => self.alias.clone(),
            "state" => self.state.clone(),
            "tags" => self.tags.clone(),
            "internal_metadata" => self.internal_metadata.clone(),
            "docker" => self.docker.clone(),
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
        self.owner_uuid.as_str() == Some(owner)
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
                Some(key) => tag_matches(vm.tags.get(key), vm.tags.has(key), pattern),
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

impl VmNotFound {
    pub const STATUS: u16 = 404;
}

impl std::fmt::Display for VmNotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VM not found")
    }
}

impl std::error::Error for VmNotFound {}

/// Every VM sent inline in the request, by uuid and by owner; a datacenter that places
/// VMs one after another updates it as it lists and unlists them ([`VmIndex::insert`],
/// [`VmIndex::remove`]), keeping request order as if they had been sent inline.
#[derive(Debug, Default)]
pub struct VmIndex {
    /// Entries; `None` once removed.
    vms: Vec<Option<IndexedVm>>,
    /// Each entry's place in request order: its server, then its position there (VMs
    /// inserted later come after every VM the server was sent with).
    order: Vec<(ServerId, u32)>,
    /// First VM (request order) under each uuid.
    by_uuid: HashMap<Box<str>, usize>,
    /// Each owner's VMs, in request order.
    by_owner: HashMap<Box<str>, Vec<usize>>,
    /// Whether some uuid is on more than one entry (removals then look for the next one).
    duplicates: bool,
    live: usize,
    next_position: u32,
}

/// Positions of inserted VMs start here, past any server's own VMs.
const INSERTED: u32 = 1 << 31;

fn indexed(uuid: &str, server: ServerId, server_uuid: &Js, vm: &ServerVm<'_>) -> IndexedVm {
    let or_empty = |v: JsRef| if v.is_undefined() { Js::obj(JsObject::new()) } else { v.to_js() };
    IndexedVm {
        uuid: uuid.into(),
        server,
        server_uuid: server_uuid.clone(),
        owner_uuid: vm.owner_uuid().to_js(),
        alias: vm.alias().to_js(),
        state: vm.state().to_js(),
        tags: or_empty(vm.tags()),
        internal_metadata: or_empty(vm.internal_metadata()),
        docker: vm.docker().to_js(),
    }
}

impl VmIndex {
    pub fn build(servers: &[Server]) -> VmIndex {
        let mut index = VmIndex { next_position: INSERTED, ..VmIndex::default() };
        for (server, s) in servers.iter().enumerate() {
            index.append_server(server, s);
        }
        index
    }

    /// Indexes the inline VMs of `s`, server `server`, which comes after every server
    /// indexed so far: the index is then as [`VmIndex::build`] would make it with `s` last.
    pub fn append_server(&mut self, server: ServerId, s: &Server) {
        for (position, (uuid, vm)) in s.inline_vms().enumerate() {
            self.add(indexed(uuid, server, &s.uuid, vm), (server, position as u32));
        }
    }

    /// Adds an entry at its place in request order.
    fn add(&mut self, vm: IndexedVm, place: (ServerId, u32)) {
        let at = self.vms.len();
        match self.by_uuid.entry(vm.uuid.clone()) {
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(at);
            }
            std::collections::hash_map::Entry::Occupied(mut e) => {
                self.duplicates = true;
                if self.order[*e.get()] > place {
                    e.insert(at);
                }
            }
        }
        if let Some(owner) = vm.owner_uuid.as_str() {
            let order = &self.order;
            let list = self.by_owner.entry(owner.into()).or_default();
            // Built in order, this is the end; an inserted VM goes after its server's.
            let pos = list.partition_point(|&i| order[i] < place);
            list.insert(pos, at);
        }
        self.vms.push(Some(vm));
        self.order.push(place);
        self.live += 1;
    }

    /// Lists `vm` (key `uuid`) after the other VMs of `server`, whose uuid is `server_uuid`.
    pub fn insert(&mut self, server: ServerId, server_uuid: &Js, uuid: &str, vm: &ServerVm<'_>) {
        let place = (server, self.next_position);
        self.next_position += 1;
        self.add(indexed(uuid, server, server_uuid, vm), place);
    }

    /// Unlists the VM `uuid` of `server`; false when it is not listed there.
    pub fn remove(&mut self, server: ServerId, uuid: &str) -> bool {
        let on_server = |i: usize| self.vms[i].as_ref().is_some_and(|vm| vm.server == server && &*vm.uuid == uuid);
        let found = match self.by_uuid.get(uuid) {
            Some(&i) if on_server(i) => Some(i),
            Some(_) if self.duplicates => (0..self.vms.len()).find(|&i| on_server(i)),
            _ => None,
        };
        let Some(at) = found else { return false };
        let Some(vm) = self.vms[at].take() else { return false };
        self.live -= 1;
        if let Some(owner) = vm.owner_uuid.as_str() {
            if let Some(list) = self.by_owner.get_mut(owner) {
                list.retain(|&i| i != at);
            }
        }
        if self.by_uuid.get(uuid) == Some(&at) {
            let next = if self.duplicates {
                let same = |i: &usize| self.vms[*i].as_ref().is_some_and(|vm| &*vm.uuid == uuid);
                (0..self.vms.len()).filter(same).min_by_key(|&i| self.order[i])
            } else {
                None
            };
            match next {
                Some(i) => self.by_uuid.insert(uuid.into(), i),
                None => self.by_uuid.remove(uuid),
            };
        }
        true
    }

    /// Number of VMs indexed.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `GetVm`: the VM with this uuid, which must belong to `owner` when one is given.
    pub fn get(&self, uuid: &str, owner: Option<&str>) -> Result<&IndexedVm, VmNotFound> {
        let vm = self.by_uuid.get(uuid).and_then(|&i| self.vms[i].as_ref()).ok_or(VmNotFound)?;
        match owner {
            Some(o) if !vm.owned_by(o) => Err(VmNotFound),
            _ => Ok(vm),
        }
    }

    /// The owner's VMs that satisfy the query, in request order.
    pub fn matching<'s>(&'s self, q: &'s ListQuery<'_>) -> impl Iterator<Item = &'s IndexedVm> + 's {
        let ids = self.by_owner.get(q.owner).map_or(&[][..], Vec::as_slice);
        ids.iter()
            .filter_map(|&i| self.vms[i].as_ref())
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
        let s = sample();
        let mut idx = VmIndex::build(&s);
        let vm: crate::model::ServerVm = crate::model::FullVm {
            owner_uuid: Js::str(OWNER),
            alias: Js::str("web9"),
            state: Js::str("running"),
            ..Default::default()
        }
        .into();
        idx.insert(0, &Js::str("s1"), "v9", &vm);
        let q = ListQuery { owner: OWNER, active: false, predicate: None, fields: &["uuid"] };
        // After s1's own VMs, before s3's.
        assert_eq!(uuids(&idx.list(&q)), ["v1", "v3", "v9", "v4"]);
        assert_eq!(idx.get("v9", Some(OWNER)).expect("v9").server, 0);
        assert_eq!(idx.len(), 6);
        assert!(idx.remove(0, "v9"));
        assert!(!idx.remove(0, "v9"));
        assert_eq!(uuids(&idx.list(&q)), ["v1", "v3", "v4"]);
        assert!(idx.get("v9", None).is_err());
        // A repeated uuid: removing the first occurrence makes the next one found.
        assert!(idx.remove(0, "v1"));
        assert_eq!(idx.get("v1", None).expect("the other v1").server, 2);
        assert_eq!(idx.len(), 4);
    }

    #[test]
    fn indexes_every_inline_vm_in_request_order() {
        let s = sample();
        let idx = VmIndex::build(&s);
        assert_eq!(idx.len(), 5);
        let v4 = idx.get("v4", None).expect("v4");
        assert_eq!((v4.server, v4.server_uuid.to_js_string()), (2, "s3".into()));
        // Missing tags / internal_metadata read as {}.
        let v2 = idx.get("v2", None).expect("v2");
        assert_eq!((v2.tags.stringify(), v2.internal_metadata.stringify()), ("{}".into(), "{}".into()));
        // A repeated uuid resolves to its first occurrence.
        assert_eq!(idx.get("v1", None).expect("v1").server, 0);
    }

    #[test]
    fn get_hides_missing_vms_and_other_owners() {
        let s = sample();
        let idx = VmIndex::build(&s);
        assert!(idx.get("v1", Some(OWNER)).is_ok());
        assert_eq!(idx.get("v2", Some(OWNER)).map(|v| v.uuid.clone()), Err(VmNotFound));
        assert_eq!(idx.get("nope", None).map(|v| v.uuid.clone()), Err(VmNotFound));
        assert_eq!(VmNotFound.to_string(), "VM not found");
        // A failed VM is still found by uuid.
        assert!(idx.get("v3", None).is_ok());
    }

    #[test]
    fn list_filters_by_owner_state_and_predicates() {
        let s = sample();
        let idx = VmIndex::build(&s);
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
        let idx = VmIndex::build(&s);
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
        let idx = VmIndex::build(&s);
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
