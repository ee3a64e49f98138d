//! The allocation engine: built once from the allocation description and the defaults,
//! shared by every request. Knows nothing of HTTP.
//!
//! A request flows: typed body → [`Request`] working set → the description's plugins, each
//! narrowing the candidate list and recording a [`Step`] → selection of the highest score.

mod busy;
pub mod context;
pub mod datacenter;
pub mod defaults;
pub mod expr;
pub mod incremental;
pub mod parallel;
pub mod plugin;
pub mod reasons;
pub mod recurring;
pub mod summary;
#[cfg(test)]
pub(crate) mod testing;
pub mod vm_index;

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::value::RawValue;
use serde_json::Value;

pub use context::{Lookups, Note, NoteKind, Recorder, Request, ServerId, ServerState, Shortfall, Unreserved};
pub use datacenter::{Datacenter, DatacenterError, PlaceError, Placement, ProvisionedVm, VmRequest};
pub use defaults::Defaults;
pub use expr::Expr;
pub use incremental::Placer;
pub use plugin::{
    keep_passing, Data, Declaration, Kind, Plugin, PluginError, PreFilter, Registry, ServerFilter, Verdict,
};
pub use reasons::{write_json_str, KeyTable, Msg, ReasonKey, Reasons, ServerKey};
pub use recurring::{Changed, Recurring, RecurringKey};
pub use summary::{Step, StepsFormat, StepsView};

use crate::js::num_to_json;
use crate::model::{AllocateBody, Image, Server, Ticket, VmPayload};

/// What an allocation runs on besides the request's VM: the servers (and each one's JSON),
/// look-ups kept across allocations (built on first use when `None`), and tickets held
/// apart from the request's own (counted after them).
#[derive(Clone, Copy)]
pub struct Held<'h> {
    pub servers: &'h [Server<'h>],
    pub raw_servers: &'h [&'h str],
    pub lookups: Option<&'h Lookups>,
    pub tickets: &'h dyn HeldTickets,
}

/// No tickets held.
pub static NO_TICKETS: Vec<Ticket> = Vec::new();

/// Tickets held apart from the request's (inventory mode's claims): thousands of them, of
/// which a run over a few servers wants only theirs.
pub trait HeldTickets: Sync {
    /// Every one, in order.
    fn all(&self) -> Box<dyn Iterator<Item = &Ticket> + '_>;
    /// Those whose `server_uuid` is the string `server`, in order.
    fn of_server<'t>(&'t self, server: &'t str) -> Box<dyn Iterator<Item = &'t Ticket> + 't>;
}

/// A plain list: looked through.
impl HeldTickets for Vec<Ticket> {
    fn all(&self) -> Box<dyn Iterator<Item = &Ticket> + '_> {
        Box::new(self.iter())
    }

    fn of_server<'t>(&'t self, server: &'t str) -> Box<dyn Iterator<Item = &'t Ticket> + 't> {
        Box::new(self.iter().filter(move |t| t.server_uuid.as_str() == Some(server)))
    }
}

/// The allocator: description, capacity chain and defaults.
#[derive(Debug)]
pub struct Engine {
    chain: Expr,
    capacity_chain: Expr,
    defaults: Defaults,
    warnings: Vec<String>,
    /// Tells engines apart (a config reload builds another): what one kept across
    /// requests ([`Recurring`]) is not used with another.
    id: u64,
}

/// Why an engine could not be built: what to fix in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The allocation description (`Bad expression given: ...`).
    Description(String),
    /// The defaults (`Defaults filter_headnode is not boolean`, ...).
    Defaults(String),
    /// The config is not `{"allocationDescription": [...], "defaults": {...}}`.
    Config(String),
}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineError::Description(e) | EngineError::Defaults(e) | EngineError::Config(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for EngineError {}

/// The outcome of one allocation.
#[derive(Debug)]
pub struct Allocation {
    pub chosen: Option<ServerId>,
    pub steps: Vec<Step>,
    pub state: Vec<ServerState>,
    /// What plugins noted while explaining (empty otherwise), ordered by step.
    pub notes: Vec<Note>,
}

/// Unreserved resources per surviving server, and why the others were left out.
#[derive(Debug)]
pub struct Capacity {
    pub servers: Vec<(ServerId, Unreserved)>,
    pub reasons: Reasons,
}

impl Engine {
    /// Builds the engine over the plugins of `registry`; errors name what to fix.
    pub fn new(description: &Value, defaults: Defaults, registry: &Registry) -> Result<Engine, EngineError> {
        let chain = Expr::parse(description, registry).map_err(EngineError::Description)?;
        let capacity_chain = match registry.capacity_chain() {
            [] => Expr::Pipe(Vec::new()),
            names => {
                let mut capacity: Vec<Value> = vec!["pipe".into()];
                capacity.extend(names.iter().map(|&n| Value::from(n)));
                Expr::parse(&Value::Array(capacity), registry).map_err(EngineError::Description)?
            }
        };
        let warnings = chain.data_flow_warnings();
        static BUILT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = BUILT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Engine { chain, capacity_chain, defaults, warnings, id })
    }

    /// Builds the engine from `{"allocationDescription": [...], "defaults": {...}}`.
    pub fn from_config(config: &Value, registry: &Registry) -> Result<Engine, EngineError> {
        let description = config.get("allocationDescription").ok_or_else(|| {
            EngineError::Config("config: \"allocationDescription\" is missing (a [\"pipe\", ...] plugin chain)".into())
        })?;
        let defaults = match config.get("defaults") {
            None => Defaults::cnapi(),
            Some(d) => Defaults::from_json(d).map_err(EngineError::Defaults)?,
        };
        Engine::new(description, defaults, registry)
    }

    /// What looks wrong in the chain without making it unusable (a plugin that reads what
    /// nothing before it writes), to be logged at start-up.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The time and memory budget of each `filter_owner_server` snippet's pass over the
    /// servers (the config's `limits.plugin_*`; the sandbox's default until set).
    pub fn set_script_budget(&mut self, budget: crate::js::sandbox::Budget) {
        self.defaults.owner_filters.set_budget(budget);
    }

    pub fn defaults(&self) -> &Defaults {
        &self.defaults
    }

    pub fn chain(&self) -> &Expr {
        &self.chain
    }

    /// Runs the description on a validated request.
    pub fn allocate(&self, body: &AllocateBody<'_>) -> Result<Allocation, PluginError> {
        self.allocate_noting(body, false)
    }

    /// [`Engine::allocate`], with plugins' notes (shortfalls, score parts) when `explain`;
    /// the decision and the steps are the same either way.
    pub fn allocate_noting(&self, body: &AllocateBody<'_>, explain: bool) -> Result<Allocation, PluginError> {
        let held = Held { servers: &body.servers, raw_servers: &body.raw_servers, lookups: None, tickets: &NO_TICKETS };
        self.allocate_on(held, body, explain)
    }

    /// [`Engine::allocate_noting`] on servers (and tickets) held elsewhere than in the body:
    /// inventory mode keeps the datacenter in memory and takes only the VM from the caller.
    pub fn allocate_on(
        &self,
        held: Held<'_>,
        body: &AllocateBody<'_>,
        explain: bool,
    ) -> Result<Allocation, PluginError> {
        parallel::deciding(held.servers.len(), || {
            let mut req = self.request(held, body, vec![ServerState::default(); held.servers.len()]);
            if explain {
                req.record_notes();
            }
            // Every server's reason key is made here rather than in whichever plugin records
            // the first reason, so that each plugin's time (`/metrics`) is its own.
            req.keys();
            let mut steps = Vec::new();
            let input: Vec<ServerId> = (0..held.servers.len()).collect();
            let survivors = self.chain.run(&mut req, input, &mut steps)?;
            let chosen = select(&survivors, req.states());
            let (state, notes) = req.finish();
            Ok(Allocation { chosen, steps, state, notes })
        })
    }

    /// The working set of an allocation of `body` on `held`, over `states` (one per server).
    fn request<'r>(&'r self, held: Held<'r>, body: &'r AllocateBody<'_>, states: Vec<ServerState>) -> Request<'r> {
        let seed = body.seed.or(self.defaults.seed);
        let rng = match seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        let mut req = Request::with_states(
            held.servers,
            &body.vm,
            &body.image,
            body.package.as_ref(),
            &body.tickets,
            &self.defaults,
            rng,
            states,
        );
        req.raw_servers = held.raw_servers;
        req.held_tickets = held.tickets;
        if let Some(lookups) = held.lookups {
            req.share_lookups(lookups);
        }
        req.raw_params = body.raw;
        req
    }

    /// Unreserved CPU, RAM and disk of each server that passes the capacity chain.
    pub fn capacity(&self, servers: &[Server<'_>]) -> Result<Capacity, PluginError> {
        let (vm, image) = (VmPayload::default(), Image::default());
        let mut req = Request::new(servers, &vm, &image, None, &[], &self.defaults, StdRng::seed_from_u64(0));
        let mut steps = Vec::new();
        let survivors = parallel::deciding(servers.len(), || {
            self.capacity_chain.run(&mut req, (0..servers.len()).collect(), &mut steps)
        })?;
        let mut reasons = Reasons::default();
        for step in &steps {
            reasons.extend(&step.reasons);
        }
        let servers = survivors.into_iter().filter_map(|id| req.state(id).unreserved.map(|u| (id, u))).collect();
        Ok(Capacity { servers, reasons })
    }
}

/// The highest score wins; on a tie the later server in the final list does.
pub fn select(survivors: &[ServerId], state: &[ServerState]) -> Option<ServerId> {
    let mut best = *survivors.first()?;
    for &id in &survivors[1..] {
        // Keep the current best only when strictly greater (NaN picks the later server).
        let best_is_greater = state[best].score > state[id].score;
        if !best_is_greater {
            best = id;
        }
    }
    Some(best)
}

/// `{"server": {...} | null, "steps": [...]}` for serde serializers.
pub struct AllocateAnswer<'a> {
    allocation: &'a Allocation,
    raw_servers: &'a [&'a str],
    servers: &'a [Server<'a>],
}

impl serde::Serialize for AllocateAnswer<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut bytes = Vec::with_capacity(self.allocation.answer_size_hint(self.servers.len(), StepsFormat::Full));
        self.allocation
            .write_answer(self.raw_servers, self.servers, StepsFormat::Full, &mut bytes, &mut |_| {})
            .map_err(S::Error::custom)?;
        let text = String::from_utf8(bytes).map_err(S::Error::custom)?;
        RawValue::from_string(text).map_err(S::Error::custom)?.serialize(s)
    }
}

impl Allocation {
    /// `{"server": {...} | null, "steps": [...]}`, as `POST /allocate` answers, as JSON.
    pub fn answer_json(&self, body: &AllocateBody<'_>, format: StepsFormat) -> serde_json::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.answer_size_hint(body.servers.len(), format));
        self.write_answer(&body.raw_servers, &body.servers, format, &mut out, &mut |_| {})?;
        Ok(out)
    }

    /// [`Allocation::answer_json`] appended to `out`, calling `part_done` after each step
    /// (see [`StepsView::write_json_in_parts`]).
    pub fn write_answer(
        &self,
        raw_servers: &[&str],
        servers: &[Server<'_>],
        format: StepsFormat,
        out: &mut Vec<u8>,
        part_done: &mut dyn FnMut(&mut Vec<u8>),
    ) -> serde_json::Result<()> {
        out.extend_from_slice(b"{\"server\":");
        match self.chosen {
            Some(id) => {
                summary::write_chosen_server(out, raw_servers[id], &servers[id], &self.state[id])?;
            }
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"steps\":");
        self.steps_view(servers, format).write_json_in_parts(out, part_done);
        out.push(b'}');
        Ok(())
    }

    /// The full-format answer as a serde value (the service writes [`Allocation::answer_json`]).
    pub fn answer<'a>(&'a self, raw_servers: &'a [&'a str], servers: &'a [Server<'a>]) -> AllocateAnswer<'a> {
        AllocateAnswer { allocation: self, raw_servers, servers }
    }

    /// The steps, to write into an answer.
    pub fn steps_view<'a>(&'a self, servers: &'a [Server<'a>], format: StepsFormat) -> StepsView<'a> {
        StepsView { servers, received: servers.len(), steps: &self.steps, format }
    }

    /// About how many bytes the answer takes, so that it is written without regrowing.
    pub fn answer_size_hint(&self, servers: usize, format: StepsFormat) -> usize {
        let listed = match format {
            StepsFormat::Full => servers + self.steps.iter().map(|s| s.remaining.len()).sum::<usize>(),
            StepsFormat::Removed => servers,
            StepsFormat::Counts => return 4096 + self.steps.len() * 96,
        };
        let reasons: usize = self.steps.iter().map(|s| s.reasons.len()).sum();
        4096 + listed * 39 + reasons * 80 + self.steps.len() * 96
    }
}

impl Capacity {
    /// [`Capacity::answer`] written straight as JSON, without building the value (at 5,000
    /// servers that value's map and its freeing cost more than writing it); `None` (nothing
    /// written) where a server's uuid is not a string, whose keys could repeat (the
    /// value's map then keeps the first place and the last entry).
    pub fn write_answer(&self, servers: &[Server], out: &mut Vec<u8>) -> Option<serde_json::Result<()>> {
        let start = out.len();
        out.extend_from_slice(b"{\"capacities\":{");
        for (i, (id, u)) in self.servers.iter().enumerate() {
            let Some(uuid) = servers[*id].uuid.as_str() else {
                out.truncate(start);
                return None;
            };
            if i > 0 {
                out.push(b',');
            }
            write_json_str(out, uuid);
            for (name, n) in [(&b":{\"cpu\":"[..], u.cpu_pct), (b",\"ram\":", u.ram_mib), (b",\"disk\":", u.disk_mib)] {
                out.extend_from_slice(name);
                crate::js::write_num_json(out, n);
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"},\"reasons\":");
        let reasons = crate::js::json::to_writer(&mut *out, &self.reasons);
        out.push(b'}');
        Some(reasons)
    }

    /// `{"capacities": {uuid: {cpu, ram, disk}}, "reasons": {...}}`.
    pub fn answer(&self, servers: &[Server]) -> Value {
        let capacities: serde_json::Map<String, Value> = self
            .servers
            .iter()
            .map(|(id, u)| {
                let entry = serde_json::json!({
                    "cpu": num_to_json(u.cpu_pct),
                    "ram": num_to_json(u.ram_mib),
                    "disk": num_to_json(u.disk_mib),
                });
                (servers[*id].reason_key(), entry)
            })
            .collect();
        serde_json::json!({ "capacities": capacities, "reasons": self.reasons })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(scores: &[f64]) -> Vec<ServerState> {
        scores.iter().map(|&score| ServerState { score, ..ServerState::default() }).collect()
    }

    #[test]
    fn ties_go_to_the_later_server() {
        assert_eq!(select(&[0, 1, 2], &state(&[2.5, 3.5, 3.5])), Some(2));
        assert_eq!(select(&[0, 1], &state(&[3.5, 1.0])), Some(0));
        assert_eq!(select(&[1, 0], &state(&[3.5, 3.5])), Some(0));
        assert_eq!(select(&[], &state(&[])), None);
        assert_eq!(select(&[0, 1], &state(&[f64::NAN, 1.0])), Some(1));
    }
}
