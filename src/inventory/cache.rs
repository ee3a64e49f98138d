//! The replica's copy of the inventory, in the engine's own model.
//!
//! Each server is parsed on its own, when it changes, by the reader the stateless path uses
//! (so an allocation here reads it exactly as a request's body would be read); its derived
//! state (VM summaries, owner counts, the schema's verdict) is computed while parsing. The
//! look-ups kept across allocations (VMs for affinity, reason keys) are updated for the
//! changed server only; a server added after the others (the usual case) is appended to
//! them; one added elsewhere, deleted or moved in the order rebuilds them once.
//! Nothing is re-read per allocation: the engine runs on the held servers in place.
//!
//! Claims are kept apart ([`Claims`](super::claims::Claims)).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::store::ServerChange;
use crate::engine::HeldTickets;
use crate::engine::{Held, KeyTable, Lookups};
use crate::model::Server;
use crate::record::SharedText;
use crate::wire::parse_capacity_body;

/// One server parsed from its own text, which it borrows from.
pub struct ParsedServer {
    // Declared before `text`: they borrow from it and are dropped first.
    server: Server<'static>,
    raw: &'static str,
    /// Shared, so that a record of an allocation can keep the texts it was decided on
    /// without copying them.
    text: Arc<String>,
}

impl ParsedServer {
    /// Parses one server object (as it would be read inside a request's `servers`). The
    /// text is kept, not copied (a replica's first catch-up reads every server's: 50 MB
    /// at 5,000 servers).
    pub fn new(mut object: String) -> Result<ParsedServer, String> {
        object.reserve_exact(2);
        object.insert(0, '[');
        object.push(']');
        let text = Arc::new(object);
        // SAFETY: `server` and `raw` borrow from `text`, whose bytes never move (the
        // String's heap buffer stays put when the Arc moves) and are never changed (the
        // Arc is never made mutable); they are dropped before it (field order), and
        // handed out only while `self` is borrowed.
        let borrowed: &'static str = unsafe { &*(text.as_str() as *const str) };
        let (mut raw, mut servers) = parse_capacity_body(borrowed.as_bytes()).map_err(|e| format!("{e:?}"))?;
        match (raw.pop(), servers.pop()) {
            (Some(raw), Some(server)) if servers.is_empty() => Ok(ParsedServer { server, raw, text }),
            _ => Err("not one server object".into()),
        }
    }
}

/// A change made ready off the lock: its server parsed.
pub struct Prepared {
    uuid: String,
    generation: i64,
    position: i64,
    deleted: bool,
    parsed: Option<ParsedServer>,
}

/// Servers parsed between two hand-backs of the freed heap while preparing many.
const TRIM_EVERY: usize = 512;

/// Parses the changed servers (the slow part, done before the model is locked).
pub fn prepare(changes: Vec<ServerChange>) -> Result<Vec<Prepared>, String> {
    let many = changes.len() > TRIM_EVERY;
    changes
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            if many && i % TRIM_EVERY == TRIM_EVERY - 1 {
                // The texts read are copied into the model's and freed in order: what they
                // took is given back as it goes, not held at the peak until the next trim
                // (a replica's first catch-up: 50 MB of them at 5,000 servers).
                crate::wire::pages::release_freed_heap();
            }
            let parsed = match c.text {
                Some(text) => Some(ParsedServer::new(text).map_err(|e| format!("server {}: {e}", c.uuid))?),
                None => None,
            };
            Ok(Prepared { uuid: c.uuid, generation: c.generation, position: c.position, deleted: c.deleted, parsed })
        })
        .collect()
}

/// One server while the order is rebuilt: position, uuid, generation, parsed, raw, text.
type Row = (i64, String, i64, Server<'static>, &'static str, Arc<String>);

/// The servers allocations run on, in inventory order.
pub struct Model {
    // `servers`, `raw` and `lookups` borrow from or index `texts`: declared (dropped) first.
    servers: Vec<Server<'static>>,
    raw: Vec<&'static str>,
    lookups: Lookups,
    texts: Vec<Arc<String>>,
    uuids: Vec<String>,
    positions: Vec<i64>,
    /// Each server's generation; an own claim moves it without the write lock.
    generations: Vec<AtomicI64>,
    index: HashMap<String, usize>,
    /// The generation everything is current to (catch-ups read what is newer).
    generation: AtomicI64,
    /// Moves when held servers' ids change (servers deleted, reordered or added among
    /// them); servers appended after every held one take the next ids and leave it.
    layout: u64,
    /// Per server, moves when it is parsed anew (its facts may have changed).
    revisions: Vec<u64>,
}

impl Default for Model {
    fn default() -> Model {
        Model {
            servers: Vec::new(),
            raw: Vec::new(),
            lookups: Lookups::default(),
            texts: Vec::new(),
            uuids: Vec::new(),
            positions: Vec::new(),
            generations: Vec::new(),
            index: HashMap::new(),
            generation: AtomicI64::new(0),
            layout: 0,
            revisions: Vec::new(),
        }
    }
}

/// What an apply changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Servers re-parsed (their content changed).
    pub reparsed: usize,
    /// Servers whose generation alone moved (claims).
    pub bumped: usize,
    /// Servers added after every held one (appended; the look-ups take their VMs).
    pub appended: usize,
    /// Whether servers were added elsewhere, deleted or reordered (look-ups rebuilt).
    pub rebuilt: bool,
}

impl Model {
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, their texts and the look-ups, with `tickets`, for the engine.
    pub fn held<'h>(&'h self, tickets: &'h dyn HeldTickets) -> Held<'h> {
        Held { servers: &self.servers, raw_servers: &self.raw, lookups: Some(&self.lookups), tickets }
    }

    pub fn servers<'s>(&'s self) -> &'s [Server<'s>] {
        &self.servers
    }

    pub fn raw(&self) -> &[&str] {
        &self.raw
    }

    pub fn uuid(&self, id: usize) -> &str {
        &self.uuids[id]
    }

    /// Moves whenever a server id may stand for another server than before (not when
    /// servers are appended: ids past the old count are new ones).
    pub fn layout(&self) -> u64 {
        self.layout
    }

    /// Moves whenever server `id` is parsed anew.
    pub fn revision_of(&self, id: usize) -> u64 {
        self.revisions[id]
    }

    /// The id of the server `uuid`.
    pub fn id_of(&self, uuid: &str) -> Option<usize> {
        self.index.get(uuid).copied()
    }

    pub fn generation_of(&self, id: usize) -> i64 {
        self.generations[id].load(Ordering::Acquire)
    }

    /// The generation everything is current to.
    pub fn generation(&self) -> i64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Applies changes that only move generations (claims) without the write lock;
    /// `None` when some change needs it (a server changed, added, deleted or moved).
    pub fn bump_only(&self, changes: &[Prepared]) -> Option<Applied> {
        let pure = |c: &Prepared| {
            c.parsed.is_none()
                && match self.index.get(&c.uuid) {
                    Some(&i) => !c.deleted && self.positions[i] == c.position,
                    None => !c.deleted,
                }
        };
        if !changes.iter().all(pure) {
            return None;
        }
        let mut applied = Applied::default();
        for c in changes {
            self.generation.fetch_max(c.generation, Ordering::AcqRel);
            if let Some(&i) = self.index.get(&c.uuid) {
                self.generations[i].fetch_max(c.generation, Ordering::AcqRel);
                applied.bumped += 1;
            }
        }
        Some(applied)
    }

    /// After an own claim: the server's generation is at least `generation`.
    pub fn bump(&self, uuid: &str, generation: i64) {
        if let Some(&i) = self.index.get(uuid) {
            self.generations[i].fetch_max(generation, Ordering::AcqRel);
        }
    }

    /// Applies prepared changes: a changed server is replaced where it is (its VMs re-indexed),
    /// a generation-only change moves the generation; added, deleted or reordered servers
    /// rebuild the order and the look-ups once.
    pub fn apply(&mut self, changes: Vec<Prepared>) -> Applied {
        let mut applied = Applied::default();
        let mut removed: HashSet<usize> = HashSet::new();
        let mut added: Vec<(String, i64, i64, ParsedServer)> = Vec::new();
        let mut reorder = false;
        for change in changes {
            self.generation.fetch_max(change.generation, Ordering::AcqRel);
            match (self.index.get(&change.uuid).copied(), change.deleted, change.parsed) {
                (Some(i), true, _) => {
                    removed.insert(i);
                }
                (None, true, _) | (None, false, None) => {}
                (None, false, Some(parsed)) => {
                    // Added twice in one catch-up cannot happen (one row per server).
                    added.push((change.uuid, change.generation, change.position, parsed));
                }
                (Some(i), false, parsed) => {
                    removed.remove(&i);
                    self.generations[i].fetch_max(change.generation, Ordering::AcqRel);
                    if self.positions[i] != change.position {
                        self.positions[i] = change.position;
                        reorder = true;
                    }
                    match parsed {
                        Some(parsed) => {
                            self.replace(i, parsed);
                            applied.reparsed += 1;
                        }
                        None => applied.bumped += 1,
                    }
                }
            }
        }
        applied.reparsed += added.len();
        if removed.is_empty() && added.is_empty() && !reorder {
            // Unindexed VMs still take a slot each: the index made again past the live count.
            if self.lookups.vm_index.get().is_some_and(|index| index.dead() > index.len().max(1024)) {
                self.rebuild_lookups();
            }
            return applied;
        }
        let last = self.positions.last().copied().unwrap_or(i64::MIN);
        if removed.is_empty() && !reorder && added.iter().all(|a| a.2 > last) {
            // New servers at the end (the usual case): appended, their VMs indexed, the
            // 150,000 others left as they are.
            applied.appended = added.len();
            self.append(added);
            return applied;
        }
        applied.rebuilt = true;
        self.rebuild(removed, added);
        applied
    }

    /// Servers placed after every held one: pushed in position order; the VM index takes
    /// their VMs and the key table is made again (one uuid per server: cheap).
    fn append(&mut self, mut added: Vec<(String, i64, i64, ParsedServer)>) {
        added.sort_by_key(|a| a.2);
        self.reserve(added.len());
        for (uuid, generation, position, parsed) in added {
            let id = self.servers.len();
            self.index.insert(uuid.clone(), id);
            self.positions.push(position);
            self.uuids.push(uuid);
            self.generations.push(AtomicI64::new(generation));
            self.revisions.push(0);
            self.servers.push(parsed.server);
            self.raw.push(parsed.raw);
            self.texts.push(parsed.text);
            if let Some(index) = self.lookups.vm_index.get_mut() {
                index.append_server(&self.servers, id);
            }
        }
        self.lookups.keys = std::sync::OnceLock::new();
        let _ = self.lookups.keys.set(std::sync::Arc::new(KeyTable::new(&self.servers)));
    }

    /// Room for `more` servers, with a sixteenth to spare rather than the doubling a push
    /// would make: a server (~1.2 KB parsed) is held for the replica's life.
    fn reserve(&mut self, more: usize) {
        let len = self.servers.len();
        if self.servers.capacity() >= len + more {
            return;
        }
        let more = more.max(len / 16);
        self.servers.reserve_exact(more);
        self.raw.reserve_exact(more);
        self.texts.reserve_exact(more);
        self.uuids.reserve_exact(more);
        self.positions.reserve_exact(more);
        self.generations.reserve_exact(more);
        self.revisions.reserve_exact(more);
    }

    /// Replaces server `i` in place; the VM look-ups follow.
    fn replace(&mut self, i: usize, parsed: ParsedServer) {
        if let Some(index) = self.lookups.vm_index.get_mut() {
            index.remove_server(&self.servers, i);
        }
        self.revisions[i] += 1;
        // Each old part is dropped before the old text it borrows from.
        self.servers[i] = parsed.server;
        self.raw[i] = parsed.raw;
        self.texts[i] = parsed.text;
        if let Some(index) = self.lookups.vm_index.get_mut() {
            index.append_server(&self.servers, i);
        }
    }

    /// The servers put in position order again without those removed and with those added.
    fn rebuild(&mut self, removed: HashSet<usize>, added: Vec<(String, i64, i64, ParsedServer)>) {
        self.layout += 1;
        let servers = std::mem::take(&mut self.servers);
        let raw = std::mem::take(&mut self.raw);
        let texts = std::mem::take(&mut self.texts);
        let uuids = std::mem::take(&mut self.uuids);
        let positions = std::mem::take(&mut self.positions);
        let generations = std::mem::take(&mut self.generations);
        self.lookups = Lookups::default();
        let mut rows: Vec<Row> = servers
            .into_iter()
            .zip(raw)
            .zip(texts)
            .zip(uuids)
            .zip(positions)
            .zip(generations)
            .enumerate()
            .filter(|(i, _)| !removed.contains(i))
            .map(|(_, (((((s, r), t), u), p), g))| (p, u, g.into_inner(), s, r, t))
            .collect();
        rows.extend(added.into_iter().map(|(u, g, p, parsed)| (p, u, g, parsed.server, parsed.raw, parsed.text)));
        rows.sort_by_key(|r| r.0);
        self.index.clear();
        self.revisions = vec![0; rows.len()];
        self.reserve(rows.len());
        for (i, (p, u, g, s, r, t)) in rows.into_iter().enumerate() {
            self.index.insert(u.clone(), i);
            self.positions.push(p);
            self.uuids.push(u);
            self.generations.push(AtomicI64::new(g));
            self.servers.push(s);
            self.raw.push(r);
            self.texts.push(t);
        }
        self.rebuild_lookups();
    }

    /// Builds the key table now, off the allocations' path. The VM index (about 35 bytes
    /// a VM) is left to the first allocation that looks a VM up (affinity, volumes-from):
    /// a datacenter never asked for one does not hold it. Once built it is kept current.
    fn rebuild_lookups(&mut self) {
        self.lookups = Lookups::default();
        let _ = self.lookups.keys.set(std::sync::Arc::new(KeyTable::new(&self.servers)));
    }

    /// Each server's JSON (as [`Model::raw`] has it), shared: kept past the lock without
    /// a copy.
    pub fn shared_texts(&self) -> Vec<SharedText> {
        self.texts
            .iter()
            .zip(&self.raw)
            .map(|(text, raw)| {
                // `raw` is a slice of `text`.
                let start = (raw.as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
                SharedText { text: text.clone(), range: start..start + raw.len() }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::vm_index::VmIndex;

    fn server(uuid: &str, vms: &[&str]) -> String {
        let vms: Vec<String> =
            vms.iter().map(|v| format!(r#""{v}":{{"uuid":"{v}","owner_uuid":"o","state":"running"}}"#)).collect();
        format!(r#"{{"uuid":"{uuid}","status":"running","vms":{{{}}}}}"#, vms.join(","))
    }

    fn change(uuid: &str, generation: i64, position: i64, text: Option<String>) -> ServerChange {
        ServerChange { uuid: uuid.into(), generation, position, deleted: false, text }
    }

    #[test]
    fn a_changed_server_is_replaced_in_place_and_only_it_is_parsed() {
        let mut model = Model::default();
        let changes =
            vec![change("b", 2, 2, Some(server("b", &["v1"]))), change("a", 1, 1, Some(server("a", &["v2", "v3"])))];
        let applied = model.apply(prepare(changes).expect("parses"));
        assert_eq!((applied.appended, applied.rebuilt), (2, false));
        assert_eq!((model.uuid(0), model.uuid(1)), ("a", "b"), "in position order");
        assert!(model.lookups.vm_index.get().is_none(), "built on first use");
        assert_eq!(model.lookups.vm_index.get_or_init(|| VmIndex::build(model.servers())).len(), 3);
        let applied = model.apply(prepare(vec![change("b", 3, 2, Some(server("b", &["v4", "v5"])))]).expect("parses"));
        assert_eq!(applied, Applied { reparsed: 1, bumped: 0, appended: 0, rebuilt: false });
        assert_eq!(model.servers()[1].inline_vm_count(), 2);
        let index = model.lookups.vm_index.get().expect("kept").on(model.servers());
        assert_eq!(model.lookups.vm_index.get().map(VmIndex::len), Some(4), "v1 unlisted, v4 and v5 listed");
        assert!(index.get("v1", None).is_err());
        assert_eq!(index.get("v4", None).ok().map(|vm| vm.server), Some(1));
        let applied = model.apply(prepare(vec![change("a", 4, 1, None)]).expect("parses"));
        assert_eq!(applied, Applied { reparsed: 0, bumped: 1, appended: 0, rebuilt: false });
        assert_eq!((model.generation_of(0), model.generation()), (4, 4));
        let bump = ServerChange { generation: 6, ..change("b", 0, 2, None) };
        assert_eq!(model.bump_only(&prepare(vec![bump]).expect("parses")).map(|a| a.bumped), Some(1));
        assert_eq!((model.generation_of(1), model.generation()), (6, 6));
        let moved = change("b", 7, 9, None);
        assert!(model.bump_only(&prepare(vec![moved]).expect("parses")).is_none(), "a move needs the write lock");
        // Added after the others: appended, its VMs found, owners' lists in order.
        let applied = model.apply(prepare(vec![change("c", 7, 10, Some(server("c", &["v6", "v1"])))]).expect("parses"));
        assert_eq!((applied.appended, applied.rebuilt), (1, false));
        assert_eq!(model.uuid(2), "c");
        let index = model.lookups.vm_index.get().expect("kept").on(model.servers());
        assert_eq!(index.get("v6", None).ok().map(|vm| vm.server), Some(2));
        let q = crate::engine::vm_index::ListQuery { owner: "o", active: false, predicate: None, fields: &["uuid"] };
        let listed: Vec<String> = index.list(&q).iter().map(|v| v.get("uuid").to_js_string()).collect();
        assert_eq!(listed, ["v2", "v3", "v4", "v5", "v6", "v1"], "as a build would list them");
        assert_eq!(model.lookups.keys.get().map(|k| k.len()), Some(3));
        let index = model.lookups.vm_index.get().map(|i| i.len());
        let built = VmIndex::build(model.servers()).len();
        assert_eq!(index, Some(built));
        let deleted = ServerChange { deleted: true, ..change("c", 8, 10, None) };
        assert!(model.apply(prepare(vec![deleted]).expect("parses")).rebuilt);
        let deleted = ServerChange { deleted: true, ..change("a", 8, 1, None) };
        assert!(model.apply(prepare(vec![deleted]).expect("parses")).rebuilt);
        assert_eq!((model.len(), model.uuid(0)), (1, "b"));
        assert!(model.lookups.vm_index.get().is_none(), "made again on next use");
        assert_eq!(VmIndex::build(model.servers()).len(), 2);
    }
}
