//! The step summary and the answer bodies.
//!
//! Steps keep server ids; uuids are written only when the answer is serialised, and the
//! chosen server is echoed as the caller sent it, without `vms`, plus what the allocation
//! computed for it (`score`, `overprovision_ratios`, `unreserved_*`).

use indexmap::IndexMap;
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::Value;

use super::context::{ServerId, ServerState};
use crate::js::{num_to_json, Js};
use crate::model::Server;

/// A step's reasons: server key (or `skip`, `*`) → message, in insertion order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reasons(IndexMap<String, String>);

impl Reasons {
    /// Sets a reason; a repeated key keeps its first position, as in a JS object.
    pub fn set(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.insert(key.into(), message.into());
    }

    /// `{"skip": message}`: the plugin did nothing, and says why.
    pub fn skip(&mut self, message: impl Into<String>) {
        self.set("skip", message);
    }

    /// `{"*": message}`: a message about the whole step.
    pub fn all(&mut self, message: impl Into<String>) {
        self.set("*", message);
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut String> {
        self.0.values_mut()
    }

    /// Merges `other` in, later keys overwriting earlier ones.
    pub fn extend(&mut self, other: &Reasons) {
        for (k, v) in other.iter() {
            self.set(k, v);
        }
    }
}

impl Serialize for Reasons {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

/// One plugin run.
#[derive(Debug, Clone)]
pub struct Step {
    /// The plugin's lookup name (for metrics).
    pub plugin: &'static str,
    /// The step name reported to callers.
    pub name: &'static str,
    pub remaining: Vec<ServerId>,
    pub reasons: Reasons,
    /// How many servers the plugin was given.
    pub received: usize,
    pub elapsed: std::time::Duration,
}

/// The step summary as `POST /allocate` answers it: `Received by DAPI` first, then one
/// `{step, remaining, reasons?}` per plugin run.
pub struct StepsView<'a> {
    pub servers: &'a [Server<'a>],
    pub received: usize,
    pub steps: &'a [Step],
}

impl Serialize for StepsView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.steps.len() + 1))?;
        seq.serialize_element(&StepView {
            servers: self.servers,
            name: "Received by DAPI",
            ids: Ids::All(self.received),
            reasons: None,
        })?;
        for step in self.steps {
            let reasons = (!step.reasons.is_empty()).then_some(&step.reasons);
            seq.serialize_element(&StepView {
                servers: self.servers,
                name: step.name,
                ids: Ids::List(&step.remaining),
                reasons,
            })?;
        }
        seq.end()
    }
}

enum Ids<'a> {
    All(usize),
    List(&'a [ServerId]),
}

struct StepView<'a> {
    servers: &'a [Server<'a>],
    name: &'a str,
    ids: Ids<'a>,
    reasons: Option<&'a Reasons>,
}

impl Serialize for StepView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2 + usize::from(self.reasons.is_some())))?;
        map.serialize_entry("step", self.name)?;
        match self.ids {
            Ids::All(n) => map.serialize_entry("remaining", &UuidList(self.servers, 0..n))?,
            Ids::List(ids) => map.serialize_entry("remaining", &UuidList(self.servers, ids.iter().copied()))?,
        }
        if let Some(r) = self.reasons {
            map.serialize_entry("reasons", r)?;
        }
        map.end()
    }
}

/// Server uuids (`null` for a server without one).
struct UuidList<'a, I>(&'a [Server<'a>], I);

impl<I: Iterator<Item = ServerId> + Clone> Serialize for UuidList<'_, I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for id in self.1.clone() {
            match &self.0[id].uuid {
                Js::Undefined => seq.serialize_element(&Js::Null)?,
                uuid => seq.serialize_element(uuid)?,
            }
        }
        seq.end()
    }
}

/// The chosen server as the caller sent it, without `vms`, with the allocation's
/// additions written over or appended in the order the original set them.
pub fn chosen_server_json(raw: &str, server: &Server, state: &ServerState) -> Value {
    let mut value: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
    let Some(obj) = value.as_object_mut() else { return value };
    obj.insert("score".into(), num_to_json(state.score));
    if let Some(ratios) = &state.ratios {
        obj.insert("overprovision_ratios".into(), ratios.to_json());
    }
    if state.zone_quota_added_bytes != 0.0 {
        let total = server.disk_zone_quota_bytes.num() + state.zone_quota_added_bytes;
        obj.insert("disk_zone_quota_bytes".into(), num_to_json(total));
    }
    if state.kvm_zvol_added_bytes != 0.0 {
        let total = server.disk_kvm_zvol_volsize_bytes.num() + state.kvm_zvol_added_bytes;
        obj.insert("disk_kvm_zvol_volsize_bytes".into(), num_to_json(total));
    }
    obj.shift_remove("vms");
    if let Some(u) = state.unreserved {
        obj.insert("unreserved_cpu".into(), num_to_json(u.cpu_pct));
        obj.insert("unreserved_ram".into(), num_to_json(u.ram_mib));
        obj.insert("unreserved_disk".into(), num_to_json(u.disk_mib));
    }
    value
}
