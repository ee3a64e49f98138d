//! Placing VMs of one request one after another without re-running the whole chain for
//! every server each time.
//!
//! Between two placements only the server that got the VM changed. The chain's leading
//! per-server plugins ([`Declaration::per_server`](super::plugin::Declaration::per_server):
//! every `ServerFilter`, and the filters and transforms that declare it) do to each server
//! what depends only on the request and that server, so the [`Placer`] keeps each server's
//! outcome of that part (removed, or the state written for it) and re-runs it only for the
//! server that changed. The rest of the chain (anything comparing servers: soft filters,
//! scorers, `or` expressions, custom plugins) runs as in a full run, over the servers the
//! per-server part kept, in the same order and with the same states: the choice is the one
//! [`Engine::place`] would make.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::context::{Request, RequestWrites, ServerId, ServerState};
use super::datacenter::{Datacenter, PlaceError, ProvisionedVm, VmRequest};
use super::expr::Expr;
use super::plugin::{Data, Kind, Plugin, PluginError};
use super::reasons::Reasons;
use super::{select, Engine};
use crate::js::sort::KeptOrder;

/// A server's outcome of the chain's per-server part.
#[derive(Debug, Clone)]
enum Memo {
    /// Not known: never run, or the server changed since.
    Stale,
    Removed,
    Kept(Box<ServerState>),
}

/// The chain split where the first plugin that compares servers stands.
struct Split {
    per_server: Vec<Arc<dyn Plugin>>,
    /// The top-level elements after them.
    rest: Vec<Expr>,
    /// Whether the rest writes nothing per server but scores: then a kept server's state
    /// needs only its score put back between placements (what it writes for the request as
    /// a whole is written again to each placement's new request).
    rest_writes_scores_only: bool,
}

/// A list-only scorer's increments ([`Declaration::list_only`](super::plugin::Declaration::list_only))
/// for the list it was last given.
enum Increments {
    /// By position in that list.
    InOrder { input: Vec<ServerId>, deltas: Vec<f64> },
    /// For a scorer [`order_free`](Plugin::order_free) for the request: by server id, `None`
    /// for the servers not in the list, which had `count` servers.
    ByServer { count: usize, deltas: Vec<Option<f64>> },
}

impl Increments {
    /// Whether these are the increments for `servers`.
    fn are_for(&self, servers: &[ServerId]) -> bool {
        match self {
            Increments::InOrder { input, .. } => input == servers,
            Increments::ByServer { count, deltas } => {
                servers.len() == *count && servers.iter().all(|&id| deltas.get(id).is_some_and(Option::is_some))
            }
        }
    }

    /// The increment of the server at `position` in `servers` (for which they are).
    fn of(&self, position: usize, id: ServerId) -> f64 {
        match self {
            Increments::InOrder { deltas, .. } => deltas[position],
            Increments::ByServer { deltas, .. } => deltas[id].unwrap_or(0.0),
        }
    }
}

/// Places VMs of one request into a [`Datacenter`] one after another (see the module).
pub struct Placer<'e> {
    engine: &'e Engine,
    split: Option<Split>,
    memo: Vec<Memo>,
    /// What the per-server part wrote for the request as a whole, from the first run (the
    /// same whatever servers it is given, see `Declaration::per_server`).
    writes: Option<RequestWrites>,
    /// Per element of the rest of the chain, a list-only scorer's last increments.
    increments: Vec<Option<Increments>>,
    /// The servers' states, handed from one placement's request to the next.
    states: Vec<ServerState>,
    /// The sorted orders the rest of the chain kept, likewise.
    orders: Vec<KeptOrder>,
}

impl<'e> Placer<'e> {
    pub fn new(engine: &'e Engine) -> Placer<'e> {
        Placer {
            engine,
            split: None,
            memo: Vec::new(),
            writes: None,
            increments: Vec::new(),
            states: Vec::new(),
            orders: Vec::new(),
        }
    }

    /// Runs the chain for `request` on the datacenter as it is and lists the VM (as `uuid`)
    /// on the chosen server, as [`Engine::place`] does; the server chosen, if any. Every call
    /// must be for the same request and datacenter, changed only by the placements made here.
    pub fn place(
        &mut self,
        dc: &mut Datacenter<'_>,
        request: &VmRequest<'_>,
        uuid: &str,
    ) -> Result<Option<ServerId>, PlaceError> {
        let (chosen, cpu_cap) = {
            let engine = self.engine;
            let seed = request.seed.or(engine.defaults.seed);
            let rng = match seed {
                Some(s) => StdRng::seed_from_u64(s),
                None => StdRng::from_entropy(),
            };
            let servers = dc.servers();
            if self.memo.len() != servers.len() {
                self.memo = vec![Memo::Stale; servers.len()];
                self.states = vec![ServerState::default(); servers.len()];
            }
            let mut req = Request::with_states(
                servers,
                request.vm,
                request.image,
                request.package,
                request.tickets,
                &engine.defaults,
                rng,
                std::mem::take(&mut self.states),
            );
            req.share_lookups(dc.lookups());
            req.keep_orders(std::mem::take(&mut self.orders));
            let raw_servers = dc.raw_servers();
            req.raw_servers = &raw_servers;
            let ran = self.run(&mut req);
            self.orders = req.take_orders();
            let cpu_cap = req.vm_cpu_cap().clone();
            let states = req.into_states();
            let chosen = ran.map(|output| select(&output, &states));
            self.states = states;
            (chosen.map_err(PlaceError::Engine)?, cpu_cap)
        };
        if let Some(id) = chosen {
            dc.add_vm(id, ProvisionedVm::of(uuid, request, &cpu_cap)).map_err(PlaceError::Datacenter)?;
            self.memo[id] = Memo::Stale;
        }
        Ok(chosen)
    }

    /// The chain on `req`: the per-server part for the servers whose outcome is not known,
    /// the others' outcomes put back, then the rest over the servers kept.
    fn run(&mut self, req: &mut Request<'_>) -> Result<Vec<ServerId>, PluginError> {
        let n = req.servers.len();
        let split = self.split.get_or_insert_with(|| split_chain(&self.engine.chain, req));
        let stale: Vec<ServerId> = (0..n).filter(|&id| matches!(self.memo[id], Memo::Stale)).collect();
        for &id in &stale {
            req.set_state(id, ServerState::default());
        }
        let mut kept = stale.clone();
        for plugin in &split.per_server {
            if kept.is_empty() {
                break;
            }
            kept = plugin.run(req, &kept, &mut Reasons::discarding())?;
        }
        // Per-server plugins keep the order of what they are given: `kept` is sorted.
        let mut next = kept.iter().peekable();
        for id in stale {
            self.memo[id] = if next.next_if_eq(&&id).is_some() {
                Memo::Kept(Box::new(req.state(id).clone()))
            } else {
                Memo::Removed
            };
        }
        match &self.writes {
            Some(writes) => req.restore_request_writes(writes),
            None => self.writes = Some(req.request_writes()),
        }
        // The states were handed on from the last placement: the servers that changed got
        // theirs afresh above; the others' are as the per-server part left them, but for
        // what the rest of the chain wrote since, put back.
        let mut survivors = Vec::with_capacity(n);
        for (id, memo) in self.memo.iter().enumerate() {
            if let Memo::Kept(state) = memo {
                if split.rest_writes_scores_only {
                    req.set_score(id, state.score);
                } else {
                    req.set_state(id, (**state).clone());
                }
                survivors.push(id);
            }
        }
        self.increments.resize_with(split.rest.len(), || None);
        let mut current = survivors;
        for (item, increments) in split.rest.iter().zip(&mut self.increments) {
            if current.is_empty() {
                break;
            }
            current = match item {
                Expr::Plugin(p) if p.declaration().list_only && p.declaration().kind == Kind::Scorer => {
                    score(p.as_ref(), req, current, increments, n)?
                }
                _ => item.run_unrecorded(req, current)?,
            };
        }
        Ok(current)
    }
}

/// Runs a list-only scorer on `servers`, or adds its increments again when it was last given
/// the same list. Its increments are taken by running it from scores of 0 (`0 + x` is `x`),
/// then added to the scores as it adds them (`score + x`, one addition per server).
fn score(
    plugin: &dyn Plugin,
    req: &mut Request<'_>,
    servers: Vec<ServerId>,
    increments: &mut Option<Increments>,
    server_count: usize,
) -> Result<Vec<ServerId>, PluginError> {
    // Scorers refuse a NaN score before theirs: run as is, to fail as it fails.
    if servers.iter().any(|&id| req.state(id).score.is_nan()) {
        return plugin.run(req, &servers, &mut Reasons::discarding());
    }
    let known = increments.as_ref().is_some_and(|i| i.are_for(&servers));
    if !known {
        let before: Vec<f64> = servers.iter().map(|&id| req.state(id).score).collect();
        servers.iter().for_each(|&id| req.set_score(id, 0.0));
        plugin.run(req, &servers, &mut Reasons::discarding())?;
        let deltas: Vec<f64> = servers.iter().map(|&id| req.state(id).score).collect();
        servers.iter().zip(before).for_each(|(&id, score)| req.set_score(id, score));
        *increments = Some(if plugin.order_free(req) {
            let mut by_server = vec![None; server_count];
            servers.iter().zip(&deltas).for_each(|(&id, &delta)| by_server[id] = Some(delta));
            Increments::ByServer { count: servers.len(), deltas: by_server }
        } else {
            Increments::InOrder { input: servers.clone(), deltas }
        });
    }
    if let Some(known) = increments {
        for (position, &id) in servers.iter().enumerate() {
            req.set_score(id, req.state(id).score + known.of(position, id));
        }
    }
    // A scorer passes its list on unchanged.
    Ok(servers)
}

/// The chain's leading per-server plugins (for this request) and what follows them.
fn split_chain(chain: &Expr, req: &Request<'_>) -> Split {
    let Expr::Pipe(items) = chain else {
        return Split::new(Vec::new(), vec![chain.clone()]);
    };
    let leading = items.iter().take_while(|e| matches!(e, Expr::Plugin(p) if p.per_server(req))).count();
    let per_server = items[..leading]
        .iter()
        .filter_map(|e| match e {
            Expr::Plugin(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    Split::new(per_server, items[leading..].to_vec())
}

impl Split {
    fn new(per_server: Vec<Arc<dyn Plugin>>, rest: Vec<Expr>) -> Split {
        let rest_writes_scores_only = rest
            .iter()
            .flat_map(Expr::plugins)
            .all(|p| p.declaration().writes.iter().all(|&data| data == Data::Scores || !data.per_server()));
        Split { per_server, rest, rest_writes_scores_only }
    }
}
