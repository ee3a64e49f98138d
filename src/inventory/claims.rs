//! The replica's live claims: each a ticket the engine counts (after the request's own),
//! until its VM appears, it is released, or it expires.
//!
//! Thousands may be live at once (one per provision in flight), while an allocation that
//! runs again only the servers changed since the last one wants only their tickets, and a
//! catch-up replaces only the touched servers' claims. So claims are kept in the order they
//! were first made (the order the engine counts them in, as a request's tickets would be)
//! and found by VM, by server and by expiry without looking through the others.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use super::store::StoredClaim;
use crate::engine::HeldTickets;
use crate::fxhash::FxBuild;
use crate::js::Js;
use crate::model::Ticket;

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

struct Entry {
    claim: Claim,
    ticket: Ticket,
}

/// Where a claim stands in the order they were first made (a replaced claim keeps it).
type Seq = u64;

/// The live claims (see the module).
#[derive(Default)]
pub struct Claims {
    entries: BTreeMap<Seq, Entry>,
    next: Seq,
    by_vm: HashMap<String, Seq, FxBuild>,
    /// Each server's claims, in order.
    by_server: HashMap<String, Vec<Seq>, FxBuild>,
    /// Every claim by its expiry (the bits of a positive `f64` order as it does).
    by_expiry: BTreeSet<(u64, Seq)>,
    /// The servers whose tickets changed, latest last, numbered from `logged - log.len()`.
    log: VecDeque<String>,
    logged: u64,
}

/// Server changes remembered for [`Claims::changed_since`]; a reader further behind sees
/// every server changed.
pub(super) const LOGGED: usize = 4096;

fn expiry_key(expires: f64) -> u64 {
    expires.max(0.0).to_bits()
}

fn ticket(vm_uuid: &str, server_uuid: &str, resources: &str) -> Ticket {
    let text = |s: &str| Js::Str(s.into());
    Ticket {
        uuid: Js::Str(format!("claim-{vm_uuid}").into()),
        id: text(vm_uuid),
        server_uuid: text(server_uuid),
        scope: text("vm"),
        action: text("provision"),
        status: text("active"),
        // Written by `claim_resources`: read as it was made.
        extra: serde_json::from_str(resources).unwrap_or(Js::Null),
    }
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
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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

    fn list_on(&mut self, server_uuid: &str, seq: Seq) {
        let list = self.by_server.entry(server_uuid.to_string()).or_default();
        // New claims come last; a claim moved from another server goes back in its place.
        let at = list.partition_point(|&s| s < seq);
        list.insert(at, seq);
    }

    fn unlist_from(&mut self, server_uuid: &str, seq: Seq) {
        if let Some(list) = self.by_server.get_mut(server_uuid) {
            if let Ok(at) = list.binary_search(&seq) {
                list.remove(at);
            }
            if list.is_empty() {
                self.by_server.remove(server_uuid);
            }
        }
    }

    /// Drops the claim at `seq`.
    fn drop_claim(&mut self, seq: Seq) {
        let Some(entry) = self.entries.remove(&seq) else { return };
        let claim = entry.claim;
        self.by_vm.remove(&claim.vm_uuid);
        self.by_expiry.remove(&(expiry_key(claim.expires), seq));
        self.unlist_from(&claim.server_uuid, seq);
        self.note(&claim.server_uuid);
    }

    /// Adds (or replaces) the claim of `vm_uuid`.
    pub fn upsert(&mut self, claim: Claim, resources: &str) {
        let ticket = ticket(&claim.vm_uuid, &claim.server_uuid, resources);
        self.note(&claim.server_uuid);
        match self.by_vm.get(&claim.vm_uuid).copied() {
            Some(seq) => {
                let Some(before) = self.entries.remove(&seq) else { return };
                let before = before.claim;
                if before.server_uuid != claim.server_uuid {
                    self.note(&before.server_uuid);
                    self.unlist_from(&before.server_uuid, seq);
                    self.list_on(&claim.server_uuid, seq);
                }
                self.by_expiry.remove(&(expiry_key(before.expires), seq));
                self.by_expiry.insert((expiry_key(claim.expires), seq));
                self.entries.insert(seq, Entry { claim, ticket });
            }
            None => {
                let seq = self.next;
                self.next += 1;
                self.by_vm.insert(claim.vm_uuid.clone(), seq);
                self.list_on(&claim.server_uuid, seq);
                self.by_expiry.insert((expiry_key(claim.expires), seq));
                self.entries.insert(seq, Entry { claim, ticket });
            }
        }
    }

    pub fn remove(&mut self, vm_uuid: &str) {
        if let Some(&seq) = self.by_vm.get(vm_uuid) {
            self.drop_claim(seq);
        }
    }

    /// An own claim committed at `generation`: it expires at `expires`.
    pub fn committed(&mut self, vm_uuid: &str, generation: i64, expires: f64) {
        let Some(&seq) = self.by_vm.get(vm_uuid) else { return };
        let Some(entry) = self.entries.get_mut(&seq) else { return };
        let before = expiry_key(entry.claim.expires);
        entry.claim.pending = false;
        entry.claim.generation = generation;
        entry.claim.expires = expires;
        self.by_expiry.remove(&(before, seq));
        self.by_expiry.insert((expiry_key(expires), seq));
    }

    /// The committed claims of `servers` replaced by the store's (`fresh`, read at a
    /// snapshot holding every generation up to `upto`); claims decided here and not yet
    /// committed, or committed after the snapshot, stay.
    pub fn replace_for(&mut self, servers: &HashSet<String>, fresh: Vec<(StoredClaim, i64)>, upto: i64) {
        if servers.is_empty() && fresh.is_empty() {
            return;
        }
        // Those the store still has are kept where they are (and changed only if they
        // differ): a catch-up after an own claim's commit changes nothing.
        let in_store: HashSet<&str> = fresh.iter().map(|(c, _)| c.vm_uuid.as_str()).collect();
        let mut gone: Vec<Seq> = Vec::new();
        for server in servers {
            for &seq in self.by_server.get(server).map_or(&[][..], Vec::as_slice) {
                let Some(entry) = self.entries.get(&seq) else { continue };
                let c = &entry.claim;
                if !(c.pending || c.generation > upto || in_store.contains(c.vm_uuid.as_str())) {
                    gone.push(seq);
                }
            }
        }
        gone.sort_unstable();
        for seq in gone {
            self.drop_claim(seq);
        }
        for (c, generation) in fresh {
            if let Some(entry) = self.by_vm.get(&c.vm_uuid).and_then(|seq| self.entries.get_mut(seq)) {
                let held = &entry.claim;
                if held.generation > upto && !held.pending {
                    continue;
                }
                let same = !held.pending
                    && held.server_uuid == c.server_uuid
                    && held.expires == c.expires
                    && entry.ticket == ticket(&c.vm_uuid, &c.server_uuid, &c.resources);
                if same {
                    entry.claim.generation = generation;
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

    /// Drops the committed claims past their expiry.
    pub fn prune(&mut self, now: f64) {
        let expired: Vec<Seq> = self
            .by_expiry
            .range(..=(expiry_key(now), Seq::MAX))
            .map(|&(_, seq)| seq)
            .filter(|seq| self.entries.get(seq).is_some_and(|e| !e.claim.pending))
            .collect();
        for seq in expired {
            self.drop_claim(seq);
        }
    }

    /// The tickets to count for placing `vm_uuid`: all of them, but its own claim when it
    /// holds one already (being placed again).
    pub fn tickets_for(&self, vm_uuid: &str) -> ClaimTickets<'_> {
        ClaimTickets { claims: self, except: self.by_vm.get(vm_uuid).copied() }
    }
}

/// The claims as the engine counts them (without the placed VM's own, if it has one).
pub struct ClaimTickets<'c> {
    claims: &'c Claims,
    except: Option<Seq>,
}

impl ClaimTickets<'_> {
    /// The server of the claim the VM being placed holds already (left out here), if any.
    pub fn own_claim_server(&self) -> Option<&str> {
        let entry = self.claims.entries.get(&self.except?)?;
        Some(entry.claim.server_uuid.as_str())
    }
}

impl HeldTickets for ClaimTickets<'_> {
    fn all(&self) -> Box<dyn Iterator<Item = &Ticket> + '_> {
        let except = self.except;
        Box::new(self.claims.entries.iter().filter(move |(&seq, _)| Some(seq) != except).map(|(_, e)| &e.ticket))
    }

    fn of_server<'t>(&'t self, server: &'t str) -> Box<dyn Iterator<Item = &'t Ticket> + 't> {
        let except = self.except;
        let seqs = self.claims.by_server.get(server).map_or(&[][..], Vec::as_slice);
        Box::new(
            seqs.iter()
                .filter(move |&&seq| Some(seq) != except)
                .filter_map(|seq| self.claims.entries.get(seq))
                .map(|e| &e.ticket),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(tickets: &ClaimTickets<'_>) -> Vec<String> {
        tickets.all().map(|t| t.id.to_js_string()).collect()
    }

    #[test]
    fn a_claims_ticket_is_the_ticket_a_request_would_carry() {
        let resources = r#"{"owner_uuid":"o1","max_physical_memory":1024,"cpu_cap":null,"quota":10.5,"brand":"joyent","disks":[{"size":2048}]}"#;
        let made = ticket("vm-1", "server-1", resources);
        let sent: Ticket = serde_json::from_value(serde_json::json!({
            "uuid": "claim-vm-1",
            "id": "vm-1",
            "server_uuid": "server-1",
            "scope": "vm",
            "action": "provision",
            "status": "active",
            "extra": serde_json::from_str::<serde_json::Value>(resources).expect("json"),
        }))
        .expect("ticket");
        assert_eq!(made, sent);
        assert_eq!(ticket_json(&made)["extra"].to_string(), resources);
        assert_eq!(ticket("vm-1", "server-1", "not json").extra, Js::Null);
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
        assert_eq!(claims.tickets_for("x").all().count(), 3);
        assert_eq!(claims.tickets_for("v1").all().count(), 2, "a VM placed again does not count against itself");
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
        for (vm, server, expires) in [("v1", "a", 5.0), ("v2", "b", 50.0), ("v3", "c", 50.0), ("v4", "a", 50.0)] {
            claims.upsert(claim(vm, server, expires), resources);
        }
        let on_a: Vec<String> = claims.tickets_for("v1").of_server("a").map(|t| t.id.to_js_string()).collect();
        assert_eq!(on_a, ["v4"], "a server's own, in order, but the placed VM's");
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
