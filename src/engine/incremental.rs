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
//!
//! Most placements then change nothing the rest of the chain looks at but where the changed
//! server stands among the others: when every plugin of the rest says it would do what it
//! did last time ([`Plugin::unchanged_by`]: the same servers passed on, the same
//! increments), the choice is the last one again, and the rest is not run at all.

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
pub(super) struct Split {
    pub(super) per_server: Vec<Arc<dyn Plugin>>,
    /// The top-level elements after them.
    pub(super) rest: Vec<Expr>,
    /// Whether the rest writes nothing per server but scores: then a kept server's state
    /// needs only its score put back between placements (what it writes for the request as
    /// a whole is written again to each placement's new request).
    pub(super) rest_writes_scores_only: bool,
}

/// A list-only scorer's increments ([`Declaration::list_only`](super::plugin::Declaration::list_only))
/// for the list it was last given.
pub(super) enum Increments {
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
    /// The servers whose memo is stale, in order.
    stale: Vec<ServerId>,
    /// The servers the per-server part keeps, in order.
    survivors: Vec<ServerId>,
    /// What the per-server part wrote for the request as a whole, from the first run (the
    /// same whatever servers it is given, see `Declaration::per_server`).
    writes: Option<RequestWrites>,
    /// Per element of the rest of the chain, a list-only scorer's last increments.
    increments: Vec<Option<Increments>>,
    /// The servers' states, handed from one placement's request to the next.
    states: Vec<ServerState>,
    /// The sorted orders the rest of the chain kept, likewise.
    orders: Vec<KeptOrder>,
    /// What the rest of the chain did in its last run, while it still holds.
    last: Option<LastRun>,
    /// Placements chosen without running the rest of the chain.
    reused: usize,
}

/// The rest of the chain's last run (given the survivors as they still are): what each of
/// its plugins passed on, in the order they ran, and the server chosen.
struct LastRun {
    outputs: Vec<Vec<ServerId>>,
    chosen: ServerId,
}

impl<'e> Placer<'e> {
    pub fn new(engine: &'e Engine) -> Placer<'e> {
        Placer {
            engine,
            split: None,
            memo: Vec::new(),
            stale: Vec::new(),
            survivors: Vec::new(),
            writes: None,
            increments: Vec::new(),
            states: Vec::new(),
            orders: Vec::new(),
            last: None,
            reused: 0,
        }
    }

    /// How many placements were chosen without running the rest of the chain.
    pub fn reused(&self) -> usize {
        self.reused
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
                self.stale = (0..servers.len()).collect();
                self.survivors.clear();
                self.last = None;
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
            req.raw_params = request.raw;
            req.keep_orders(std::mem::take(&mut self.orders));
            req.rng_seeded = seed.is_some();
            let raw_servers = dc.raw_servers();
            req.raw_servers = &raw_servers;
            let chosen = self.run(&mut req);
            self.orders = req.take_orders();
            let cpu_cap = req.vm_cpu_cap().clone();
            self.states = req.into_states();
            (chosen.map_err(PlaceError::Engine)?, cpu_cap)
        };
        if let Some(id) = chosen {
            dc.add_vm(id, ProvisionedVm::of(uuid, request, &cpu_cap)).map_err(PlaceError::Datacenter)?;
            self.memo[id] = Memo::Stale;
            self.stale.push(id);
        }
        Ok(chosen)
    }

    /// The chain on `req`: the per-server part for the servers whose outcome is not known,
    /// the others' outcomes put back, then the rest over the servers kept, unless it would
    /// do as it did last time; the server chosen.
    fn run(&mut self, req: &mut Request<'_>) -> Result<Option<ServerId>, PluginError> {
        let n = req.servers.len();
        let split = self.split.get_or_insert_with(|| split_chain(&self.engine.chain, req));
        let changed = std::mem::take(&mut self.stale);
        // Each changed server got the request's VM (or has no state yet): its owner's VM
        // count, when it is a string's, is one more.
        let owner_is_text = req.vm.owner_uuid.as_str().is_some();
        for &id in &changed {
            let fresh = if owner_is_text { req.state(id).afresh_after_own_vm() } else { ServerState::default() };
            req.set_state(id, fresh);
        }
        let mut kept = changed.clone();
        for plugin in &split.per_server {
            if kept.is_empty() {
                break;
            }
            kept = plugin.run(req, &kept, &mut Reasons::discarding())?;
        }
        // Per-server plugins keep the order of what they are given: `kept` is sorted, as
        // `changed` and the survivors are.
        let mut next = kept.iter().peekable();
        let mut survivors_changed = false;
        for &id in &changed {
            let now = next.next_if_eq(&&id).is_some();
            self.memo[id] = if now { Memo::Kept(Box::new(req.state(id).clone())) } else { Memo::Removed };
            let was = self.survivors.binary_search(&id);
            match (was, now) {
                (Err(at), true) => self.survivors.insert(at, id),
                (Ok(at), false) => drop(self.survivors.remove(at)),
                _ => continue,
            }
            survivors_changed = true;
        }
        match &self.writes {
            Some(writes) => req.restore_request_writes(writes),
            None => self.writes = Some(req.request_writes()),
        }
        if let Some(last) = self.last.as_ref().filter(|_| !survivors_changed) {
            let sorts_from = req.kept_orders_next();
            let mut outputs = last.outputs.iter();
            if unchanged_pipe(&split.rest, req, &self.survivors, &mut outputs, &changed).is_some() {
                self.reused += 1;
                return Ok(Some(last.chosen));
            }
            req.set_kept_orders_next(sorts_from);
        }
        // The states were handed on from the last placement: the servers that changed got
        // theirs afresh above; the others' are as the per-server part left them, but for
        // what the rest of the chain wrote since, put back.
        for &id in &self.survivors {
            if let Memo::Kept(state) = &self.memo[id] {
                if split.rest_writes_scores_only {
                    req.set_score(id, state.score);
                } else {
                    req.set_state(id, (**state).clone());
                }
            }
        }
        self.increments.resize_with(split.rest.len(), || None);
        let mut outputs = Vec::new();
        let mut current = self.survivors.clone();
        for (item, increments) in split.rest.iter().zip(&mut self.increments) {
            if current.is_empty() {
                break;
            }
            current = match item {
                Expr::Plugin(p) if p.declaration().list_only && p.declaration().kind == Kind::Scorer => {
                    let output = score(p.as_ref(), req, current, increments, n)?;
                    outputs.push(output.clone());
                    output
                }
                _ => item.run_noting(req, current, &mut outputs)?,
            };
        }
        let chosen = select(&current, req.states());
        self.last = chosen.map(|chosen| LastRun { outputs, chosen });
        Ok(chosen)
    }
}

/// What `items` run as a pipe on `input` would pass on, when every plugin on the way would
/// do as it did in the run that noted `outputs` (taken in the order that run made them):
/// `input` is that run's, and only the `changed` servers differ since. `None` as soon as
/// one plugin might not.
pub(super) fn unchanged_pipe<'o>(
    items: &[Expr],
    req: &mut Request<'_>,
    input: &'o [ServerId],
    outputs: &mut dyn Iterator<Item = &'o Vec<ServerId>>,
    changed: &[ServerId],
) -> Option<&'o [ServerId]> {
    let mut current = input;
    for item in items {
        if current.is_empty() {
            break;
        }
        current = unchanged(item, req, current, outputs, changed)?;
    }
    Some(current)
}

/// [`unchanged_pipe`] for one element.
fn unchanged<'o>(
    expr: &Expr,
    req: &mut Request<'_>,
    input: &'o [ServerId],
    outputs: &mut dyn Iterator<Item = &'o Vec<ServerId>>,
    changed: &[ServerId],
) -> Option<&'o [ServerId]> {
    match expr {
        Expr::Plugin(plugin) => {
            let last = outputs.next()?;
            let declaration = plugin.declaration();
            let same = if declaration.list_only && declaration.kind == Kind::Scorer {
                true
            } else if plugin.per_server(req) && !declaration.reads.contains(&Data::Scores) {
                per_server_unchanged(plugin.as_ref(), req, input, last, changed)
            } else {
                plugin.unchanged_by(req, input, last, changed)
            };
            same.then_some(last.as_slice())
        }
        Expr::Pipe(items) => unchanged_pipe(items, req, input, outputs, changed),
        Expr::Or(items) => {
            let mut output: &[ServerId] = &[];
            for (i, item) in items.iter().enumerate() {
                if i > 0 && !output.is_empty() {
                    break;
                }
                output = unchanged(item, req, input, outputs, changed)?;
            }
            Some(output)
        }
    }
}

/// A per-server plugin passes on what it did while each changed server it is given is still
/// kept, or still removed: run on that server alone, it does to it what it does in the list.
fn per_server_unchanged(
    plugin: &dyn Plugin,
    req: &mut Request<'_>,
    input: &[ServerId],
    last: &[ServerId],
    changed: &[ServerId],
) -> bool {
    changed.iter().filter(|id| input.contains(id)).all(|&id| {
        plugin.run(req, &[id], &mut Reasons::discarding()).is_ok_and(|kept| kept.is_empty() != last.contains(&id))
    })
}

/// Runs a list-only scorer on `servers`, or adds its increments again when it was last given
/// the same list. Its increments are taken by running it from scores of 0 (`0 + x` is `x`),
/// then added to the scores as it adds them (`score + x`, one addition per server).
pub(super) fn score(
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
        // Order-freedom depends on the request and the servers' facts only, which the
        // increments replaced were kept under too: asked again only when they were not.
        let order_free = matches!(increments, Some(Increments::ByServer { .. })) || plugin.order_free(req);
        *increments = Some(if order_free {
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
pub(super) fn split_chain(chain: &Expr, req: &Request<'_>) -> Split {
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
