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
//! Claims are kept apart ([`Claims`]): tickets handed to the engine as they are.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::store::{ServerChange, StoredClaim};
use crate::engine::vm_index::VmIndex;
use crate::engine::{Held, KeyTable, Lookups};
use crate::fxhash::FxBuild;
use crate::model::{Server, Ticket};
use crate::record::SharedText;
use crate::wire::parse_capacity_body;

/// One server parsed from its own text, which it borrows from.
pub struct ParsedServer {
    // Declared before `text`: they borrow from it and are dropped first.
    server: Server<'static>,
    raw: &'static str,
    /// Shared, so that a record of an allocation can keep the texts it was decided on
    /// without copying them.
    text: Arc<str>,
}

impl ParsedServer {
    /// Parses one server object (as it would be read inside a request's `servers`).
    pub fn new(object: &str) -> Result<ParsedServer, String> {
        let text: Arc<str> = Arc::from(format!("[{object}]"));
        // SAFETY: `server` and `raw` borrow from `text`, whose bytes never move (an Arc's
        // heap data stays put when the Arc moves) and are never changed; they are
        // dropped before it (field order), and handed out only while `self` is borrowed.
        let borrowed: &'static str = unsafe { &*(text.as_ref() as *const str) };
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

/// Parses the changed servers (the slow part, done before the model is locked).
pub fn prepare(changes: Vec<ServerChange>) -> Result<Vec<Prepared>, String> {
    changes
        .into_iter()
        .map(|c| {
            let parsed = match &c.text {
                Some(text) => Some(ParsedServer::new(text).map_err(|e| format!("server {}: {e}", c.uuid))?),
                None => None,
            };
            Ok(Prepared { uuid: c.uuid, generation: c.generation, position: c.position, deleted: c.deleted, parsed })
        })
        .collect()
}

/// One server while the order is rebuilt: position, uuid, generation, parsed, raw, text.
type Row = (i64, String, i64, Server<'static>, &'static str, Arc<str>);

/// The servers allocations run on, in inventory order.
pub struct Model {
    // `servers`, `raw` and `lookups` borrow from or index `texts`: declared (dropped) first.
    servers: Vec<Server<'static>>,
    raw: Vec<&'static str>,
    lookups: Lookups,
    texts: Vec<Arc<str>>,
    uuids: Vec<String>,
    positions: Vec<i64>,
    /// Each server's generation; an own claim moves it without the write lock.
    generations: Vec<AtomicI64>,
    index: HashMap<String, usize>,
    /// The generation everything is current to (catch-ups read what is newer).
    generation: AtomicI64,
    /// Moves when servers are added, deleted or reordered (their ids change).
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
    pub fn held<'h>(&'h self, tickets: &'h [Ticket]) -> Held<'h> {
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

    /// Moves whenever a server id may stand for another server than before.
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
        self.layout += 1;
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
        if self.lookups.vm_index.get().is_none() {
            self.rebuild_lookups();
            return;
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

    /// Builds the look-ups now, off the allocations' path.
    fn rebuild_lookups(&mut self) {
        self.lookups = Lookups::default();
        let _ = self.lookups.vm_index.set(VmIndex::build(&self.servers));
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

    /// Approximate bytes held: the servers' texts (the parsed model is about as big).
    pub fn text_bytes(&self) -> usize {
        self.texts.iter().map(|t| t.len()).sum()
    }
}

/// A claim as the engine counts it: a ticket, until `expires` (Unix seconds).
#[derive(Debug, Clone)]
pub struct Claim {
    pub vm_uuid: String,
    pub server_uuid: String,
    pub expires: f64,
    /// Decided here but not yet committed (catch-ups keep it).
    pub pending: bool,
    /// The generation it was committed at, as far as known (a catch-up that read the
    /// store before it keeps it too).
    pub generation: i64,
}

/// The live claims: tickets handed to the engine as one slice, with what each one is.
#[derive(Default)]
pub struct Claims {
    tickets: Vec<Ticket>,
    claims: Vec<Claim>,
    /// The earliest expiry (pruned once passed).
    earliest: f64,
    /// Each claim's position, by VM uuid.
    positions: HashMap<String, usize, FxBuild>,
    /// The servers whose tickets changed, latest last, numbered from `logged - log.len()`.
    log: VecDeque<String>,
    logged: u64,
}

/// Server changes remembered for [`Claims::changed_since`]; a reader further behind sees
/// every server changed.
const LOGGED: usize = 4096;

fn ticket(vm_uuid: &str, server_uuid: &str, resources: &str) -> Ticket {
    let extra: serde_json::Value = serde_json::from_str(resources).unwrap_or(serde_json::Value::Null);
    serde_json::from_value(serde_json::json!({
        "uuid": format!("claim-{vm_uuid}"),
        "id": vm_uuid,
        "server_uuid": server_uuid,
        "scope": "vm",
        "action": "provision",
        "status": "active",
        "extra": extra,
    }))
    .unwrap_or_default()
}

/// A claim's ticket as a request would carry it in `tickets` (read back as it was made).
pub fn ticket_json(ticket: &Ticket) -> serde_json::Value {
    let fields = [
        ("uuid", &ticket.uuid),
        ("id", &ticket.id),
        ("server_uuid", &ticket.server_uuid),
        ("scope", &ticket.scope),
        ("action", &ticket.action),
        ("status", &ticket.status),
        ("extra", &ticket.extra),
    ];
    serde_json::Value::Object(
        fields.into_iter().filter(|(_, v)| !v.is_undefined()).map(|(k, v)| (k.to_string(), v.to_json())).collect(),
    )
}

impl Claims {
    pub fn len(&self) -> usize {
        self.claims.len()
    }

    pub fn is_empty(&self) -> bool {
        self.claims.is_empty()
    }

    /// How many ticket changes there have been (for [`Claims::changed_since`]).
    pub fn changes(&self) -> u64 {
        self.logged
    }

    /// The servers whose tickets changed after the first `seen` changes; `None` when that
    /// is no longer known.
    pub fn changed_since(&self, seen: u64) -> Option<impl Iterator<Item = &str>> {
        let first = self.logged - self.log.len() as u64;
        if seen < first || seen > self.logged {
            return None;
        }
        Some(self.log.iter().skip((seen - first) as usize).map(String::as_str))
    }

    fn note(&mut self, server_uuid: &str) {
        if self.log.len() == LOGGED {
            self.log.pop_front();
        }
        self.log.push_back(server_uuid.to_string());
        self.logged += 1;
    }

    /// Drops the claim at `i`.
    fn drop_at(&mut self, i: usize) {
        self.tickets.remove(i);
        let claim = self.claims.remove(i);
        self.positions.remove(&claim.vm_uuid);
        // Those after it moved up (the tickets keep their order: it is counted in).
        self.positions.values_mut().filter(|p| **p > i).for_each(|p| *p -= 1);
        self.note(&claim.server_uuid);
    }

    /// Keeps the claims `keep` says so of, in order.
    fn retain(&mut self, keep: impl Fn(&Claim) -> bool) {
        let kept: Vec<bool> = self.claims.iter().map(&keep).collect();
        if kept.iter().all(|&k| k) {
            return;
        }
        // Where each kept claim moves: up by the number dropped before it.
        let mut moved_to = Vec::with_capacity(kept.len());
        let mut next = 0;
        for &k in &kept {
            moved_to.push(next);
            next += usize::from(k);
        }
        self.positions.retain(|_, at| kept[*at]);
        self.positions.values_mut().for_each(|at| *at = moved_to[*at]);
        let mut dropped = Vec::new();
        let mut i = 0;
        self.claims.retain(|c| {
            i += 1;
            if !kept[i - 1] {
                dropped.push(c.server_uuid.clone());
            }
            kept[i - 1]
        });
        let mut i = 0;
        self.tickets.retain(|_| {
            i += 1;
            kept[i - 1]
        });
        for server in dropped {
            self.note(&server);
        }
    }

    fn position(&self, vm_uuid: &str) -> Option<usize> {
        self.positions.get(vm_uuid).copied()
    }

    /// Adds (or replaces) the claim of `vm_uuid`.
    pub fn upsert(&mut self, claim: Claim, resources: &str) {
        let t = ticket(&claim.vm_uuid, &claim.server_uuid, resources);
        self.earliest = if self.claims.is_empty() { claim.expires } else { self.earliest.min(claim.expires) };
        self.note(&claim.server_uuid);
        match self.position(&claim.vm_uuid) {
            Some(i) => {
                if self.claims[i].server_uuid != claim.server_uuid {
                    let before = self.claims[i].server_uuid.clone();
                    self.note(&before);
                }
                self.tickets[i] = t;
                self.claims[i] = claim;
            }
            None => {
                self.positions.insert(claim.vm_uuid.clone(), self.claims.len());
                self.tickets.push(t);
                self.claims.push(claim);
            }
        }
    }

    pub fn remove(&mut self, vm_uuid: &str) {
        if let Some(i) = self.position(vm_uuid) {
            self.drop_at(i);
        }
    }

    /// An own claim committed at `generation`: it expires at `expires`.
    pub fn committed(&mut self, vm_uuid: &str, generation: i64, expires: f64) {
        if let Some(i) = self.position(vm_uuid) {
            self.claims[i].pending = false;
            self.claims[i].generation = generation;
            self.claims[i].expires = expires;
            self.earliest = self.earliest.min(expires);
        }
    }

    /// The committed claims of `servers` replaced by the store's (`fresh`, read at a
    /// snapshot holding every generation up to `upto`); claims decided here and not yet
    /// committed, or committed after the snapshot, stay.
    pub fn replace_for(&mut self, servers: &HashSet<String>, fresh: Vec<(StoredClaim, i64)>, upto: i64) {
        if servers.is_empty() && fresh.is_empty() {
            return;
        }
        // Usually a server or two: compared directly rather than hashed per claim.
        let touched: Option<Vec<&str>> = (servers.len() <= 8).then(|| servers.iter().map(String::as_str).collect());
        let is_touched = |uuid: &str| match &touched {
            Some(few) => few.contains(&uuid),
            None => servers.contains(uuid),
        };
        // Those the store still has are kept where they are (and changed only if they
        // differ): a catch-up after an own claim's commit changes nothing.
        let in_store: HashSet<&str> = fresh.iter().map(|(c, _)| c.vm_uuid.as_str()).collect();
        self.retain(|c| {
            c.pending || c.generation > upto || !is_touched(&c.server_uuid) || in_store.contains(c.vm_uuid.as_str())
        });
        for (c, generation) in fresh {
            if let Some(i) = self.position(&c.vm_uuid) {
                let held = &self.claims[i];
                if held.generation > upto && !held.pending {
                    continue;
                }
                let same = !held.pending
                    && held.server_uuid == c.server_uuid
                    && held.expires == c.expires
                    && self.tickets[i] == ticket(&c.vm_uuid, &c.server_uuid, &c.resources);
                if same {
                    self.claims[i].generation = generation;
                    continue;
                }
            }
            let claim = Claim {
                vm_uuid: c.vm_uuid,
                server_uuid: c.server_uuid,
                expires: c.expires,
                pending: false,
                generation,
            };
            self.upsert(claim, &c.resources);
        }
    }

    /// Drops the claims past their expiry (cheap until the earliest one passes).
    pub fn prune(&mut self, now: f64) {
        if self.claims.is_empty() || self.earliest > now {
            return;
        }
        self.retain(|c| c.pending || c.expires > now);
        self.earliest = self.claims.iter().map(|c| c.expires).fold(f64::INFINITY, f64::min);
    }

    /// The tickets to count for placing `vm_uuid`: all of them, or (when it holds a claim
    /// already, being placed again) a copy without its own.
    pub fn tickets_for(&self, vm_uuid: &str) -> std::borrow::Cow<'_, [Ticket]> {
        match self.position(vm_uuid) {
            None => std::borrow::Cow::Borrowed(&self.tickets),
            Some(i) => {
                let mut copy = self.tickets.clone();
                copy.remove(i);
                std::borrow::Cow::Owned(copy)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(model.lookups.vm_index.get().map(VmIndex::len), Some(3));
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
        assert_eq!(model.lookups.vm_index.get().map(VmIndex::len), Some(2));
    }

    #[test]
    fn claims_are_tickets_and_pending_ones_survive_a_catch_up() {
        let mut claims = Claims::default();
        let resources = r#"{"max_physical_memory": 1024}"#;
        let claim = |vm: &str, expires: f64, pending: bool, generation: i64| Claim {
            vm_uuid: vm.into(),
            server_uuid: "s".into(),
            expires,
            pending,
            generation,
        };
        claims.upsert(claim("v1", 10.0, false, 3), resources);
        claims.upsert(claim("v2", 20.0, true, i64::MAX), resources);
        claims.upsert(claim("v3", 20.0, false, 9), resources);
        assert_eq!(claims.tickets_for("x").len(), 3);
        assert_eq!(claims.tickets_for("v1").len(), 2, "a VM placed again does not count against itself");
        let servers: HashSet<String> = ["s".to_string()].into();
        claims.replace_for(&servers, Vec::new(), 5);
        assert_eq!(claims.len(), 2, "v1 released in the store; v2 not committed yet, v3 after the snapshot");
        claims.committed("v2", 10, 5.0);
        claims.prune(6.0);
        assert_eq!(claims.len(), 1, "v2 expired");
    }

    #[test]
    fn claims_keep_their_order_and_say_which_servers_changed() {
        let mut claims = Claims::default();
        let resources = r#"{"max_physical_memory": 1024}"#;
        let claim = |vm: &str, server: &str, expires: f64| Claim {
            vm_uuid: vm.into(),
            server_uuid: server.into(),
            expires,
            pending: false,
            generation: 1,
        };
        let ids = |tickets: &[Ticket]| -> Vec<String> { tickets.iter().map(|t| t.id.to_js_string()).collect() };
        for (vm, server, expires) in [("v1", "a", 5.0), ("v2", "b", 50.0), ("v3", "c", 50.0), ("v4", "a", 50.0)] {
            claims.upsert(claim(vm, server, expires), resources);
        }
        let seen = claims.changes();
        claims.remove("v2");
        let changed: Vec<&str> = claims.changed_since(seen).expect("known").collect();
        assert_eq!(changed, ["b"]);
        assert_eq!(ids(&claims.tickets_for("v4")), ["v1", "v3"]);
        claims.prune(10.0);
        assert_eq!(ids(&claims.tickets_for("x")), ["v3", "v4"]);
        assert_eq!(ids(&claims.tickets_for("v4")), ["v3"], "v4's position follows the claims dropped before it");
        let seen = claims.changes();
        claims.replace_for(&["c".to_string()].into(), Vec::new(), 1);
        assert_eq!(ids(&claims.tickets_for("x")), ["v4"]);
        assert_eq!(ids(&claims.tickets_for("v4")), Vec::<String>::new());
        assert_eq!(claims.changed_since(seen).expect("known").collect::<Vec<_>>(), ["c"]);
        // Moving a claim to another server changes both.
        let seen = claims.changes();
        claims.upsert(claim("v4", "d", 50.0), resources);
        let mut changed: Vec<&str> = claims.changed_since(seen).expect("known").collect();
        changed.sort_unstable();
        assert_eq!(changed, ["a", "d"]);
        // A reader further behind than what is remembered is told nothing is known.
        for n in 0..LOGGED {
            claims.upsert(claim(&format!("w{n}"), "e", 50.0), resources);
        }
        assert!(claims.changed_since(seen).is_none());
        assert!(claims.changed_since(claims.changes()).is_some_and(|mut c| c.next().is_none()));
    }
}
