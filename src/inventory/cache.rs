//! The replica's copy of the inventory, in the engine's own model.
//!
//! Servers are parsed once, when they change, by the reader the stateless path uses (so an
//! allocation here reads them exactly as a request's body would be read); their derived
//! state (VM summaries, owner counts, the schema's verdict) is computed while parsing.
//! Allocations share the current [`View`] (an `Arc`) and never wait for a refresh.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::value::RawValue;

use super::store::{Changes, ServerRecord};
use crate::model::{Server, Ticket};
use crate::wire::parse_capacity_body;

/// Servers parsed from one text they borrow from.
pub struct Parsed {
    // Declared before `text` so that they are dropped first: they borrow from it.
    servers: Vec<Server<'static>>,
    raw: Vec<&'static str>,
    // Never mutated nor replaced while `servers` and `raw` live; a `Box<str>`'s bytes stay
    // put when the box moves.
    #[allow(dead_code)]
    text: Box<str>,
}

impl Parsed {
    /// Parses `[server, ...]`.
    pub fn new(text: String) -> Result<Parsed, String> {
        let text: Box<str> = text.into_boxed_str();
        // SAFETY: the borrowed parts never outlive `text` (field order above, and the
        // accessors hand them out only for as long as `self` is borrowed).
        let borrowed: &'static str = unsafe { &*(text.as_ref() as *const str) };
        let (raw, servers) = parse_capacity_body(borrowed.as_bytes()).map_err(|e| format!("{e:?}"))?;
        Ok(Parsed { servers, raw, text })
    }

    pub fn empty() -> Parsed {
        Parsed { servers: Vec::new(), raw: Vec::new(), text: Box::from("") }
    }

    pub fn servers<'s>(&'s self) -> &'s [Server<'s>] {
        &self.servers
    }

    pub fn raw(&self) -> &[&str] {
        &self.raw
    }
}

/// A claim as the engine counts it: a ticket, until `expires` (Unix seconds).
#[derive(Debug, Clone)]
pub struct Claim {
    pub vm_uuid: String,
    pub server_uuid: String,
    pub ticket: Ticket,
    pub expires: f64,
}

impl Claim {
    pub fn new(vm_uuid: String, server_uuid: String, resources: &str, expires: f64) -> Claim {
        let extra: serde_json::Value = serde_json::from_str(resources).unwrap_or(serde_json::Value::Null);
        let ticket = serde_json::from_value(serde_json::json!({
            "uuid": format!("claim-{vm_uuid}"),
            "id": vm_uuid,
            "server_uuid": server_uuid,
            "scope": "vm",
            "action": "provision",
            "status": "active",
            "extra": extra,
        }))
        .unwrap_or_default();
        Claim { vm_uuid, server_uuid, ticket, expires }
    }
}

/// What allocations read: the servers (in inventory order), each one's generation, the
/// claims, and the generation everything is current to.
pub struct View {
    pub parsed: Arc<Parsed>,
    /// Generation of `parsed.servers()[i]`.
    pub generations: Vec<i64>,
    pub index: HashMap<String, usize>,
    pub claims: Vec<Claim>,
    pub generation: i64,
}

impl View {
    pub fn empty() -> View {
        View {
            parsed: Arc::new(Parsed::empty()),
            generations: Vec::new(),
            index: HashMap::new(),
            claims: Vec::new(),
            generation: 0,
        }
    }

    /// The claims not yet expired at `now` (Unix seconds), as tickets; the VM being
    /// placed again (`except`) does not count against itself.
    pub fn live_tickets(&self, now: f64, except: &str) -> Vec<Ticket> {
        self.claims.iter().filter(|c| c.expires > now && c.vm_uuid != except).map(|c| c.ticket.clone()).collect()
    }
}

/// One server as the replica holds it.
struct Row {
    position: i64,
    generation: i64,
    /// The server's text with its VMs in (`None`: deleted).
    text: Option<String>,
}

/// The rows behind the view, changed by catch-ups.
#[derive(Default)]
pub struct Rows {
    rows: HashMap<String, Row>,
}

impl Rows {
    /// Applies `changes`; the new view (re-parsing the servers only when one's content
    /// changed).
    pub fn apply(&mut self, current: &View, changes: Changes) -> Result<View, String> {
        let mut content_changed = false;
        let mut generation = current.generation;
        for (uuid, gen, position, deleted, record) in changes.servers {
            generation = generation.max(gen);
            if deleted {
                content_changed |= self.rows.remove(&uuid).is_some();
                continue;
            }
            let row = self.rows.entry(uuid).or_insert(Row { position, generation: gen, text: None });
            row.generation = gen;
            row.position = position;
            if let Some(record) = record {
                row.text = Some(server_text(&record)?);
                content_changed = true;
            }
        }
        let mut ordered: Vec<(&String, &Row)> = self.rows.iter().filter(|(_, r)| r.text.is_some()).collect();
        ordered.sort_by_key(|(_, r)| r.position);
        let parsed = if content_changed || current.index.len() != ordered.len() {
            let mut text = String::with_capacity(
                ordered.iter().map(|(_, r)| r.text.as_ref().map_or(0, String::len) + 1).sum::<usize>() + 2,
            );
            text.push('[');
            for (i, (_, row)) in ordered.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                text.push_str(row.text.as_deref().unwrap_or("{}"));
            }
            text.push(']');
            Arc::new(Parsed::new(text)?)
        } else {
            current.parsed.clone()
        };
        let generations = ordered.iter().map(|(_, r)| r.generation).collect();
        let index = ordered.iter().enumerate().map(|(i, (u, _))| ((*u).clone(), i)).collect();
        let claims = changes
            .claims
            .into_iter()
            .map(|(vm, server, resources, expires)| Claim::new(vm, server, &resources, expires))
            .collect();
        Ok(View { parsed, generations, index, claims, generation })
    }

    /// After this replica's own claim: the server's new generation and the claim, without
    /// waiting for the notification.
    pub fn claimed(&mut self, current: &View, server: &str, generation: i64, claim: Claim) -> View {
        if let Some(row) = self.rows.get_mut(server) {
            row.generation = generation;
        }
        let mut generations = current.generations.clone();
        if let Some(&i) = current.index.get(server) {
            generations[i] = generation;
        }
        let mut claims: Vec<Claim> = current.claims.iter().filter(|c| c.vm_uuid != claim.vm_uuid).cloned().collect();
        claims.push(claim);
        View {
            parsed: current.parsed.clone(),
            generations,
            index: current.index.clone(),
            claims,
            generation: current.generation,
        }
    }
}

/// The server's text as a request would carry it: its object with `vms` (uuid → VM)
/// put back where it was (or appended).
pub fn server_text(record: &ServerRecord) -> Result<String, String> {
    if record.vms.is_empty() {
        return Ok(record.object.clone());
    }
    let mut fields: IndexMap<&str, &RawValue> =
        serde_json::from_str(&record.object).map_err(|e| format!("server {}: {e}", record.uuid))?;
    let mut vms = String::from("{");
    for (i, (uuid, object)) in record.vms.iter().enumerate() {
        if i > 0 {
            vms.push(',');
        }
        vms.push_str(&serde_json::to_string(uuid).map_err(|e| e.to_string())?);
        vms.push(':');
        vms.push_str(object);
    }
    vms.push('}');
    let vms_raw: Box<RawValue> = RawValue::from_string(vms).map_err(|e| format!("server {}: {e}", record.uuid))?;
    fields.insert("vms", &vms_raw);
    serde_json::to_string(&fields).map_err(|e| e.to_string())
}
