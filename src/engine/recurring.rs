//! Allocating request after request of one shape on a datacenter that changes at known
//! servers: inventory mode, where each allocation claims one server and feeds change a few.
//!
//! The chain's leading per-server part ([`Declaration::per_server`](super::plugin::Declaration::per_server))
//! does to each server what depends only on the request and that server. For requests of
//! one [`RecurringKey`] (differing only in what no per-server decision reads), [`Recurring`] keeps
//! each server's outcome of that part (removed by which plugin, or the state written for
//! it) and runs it again only for the servers the caller says changed. The rest of the
//! chain runs as in a full run, over the servers kept, with the same states: the decision
//! is the one [`Engine::allocate_on`] makes, and so are the steps' counts. What the rest
//! keeps to be run cheaper next time (its last run, sorted orders, list-only increments) is
//! kept per VM owner, which it reads: a caller's owners in turn each find their own.
//!
//! Only answers that give the steps' counts are made this way: per-server steps' reasons
//! are not kept (some name the VM, which differs from request to request), and the rest's
//! are not made. An allocation that finds no server is made again in full, for its reason.

use std::time::Duration;

use super::context::{CountOnce, RequestWrites, ServerId, ServerState};
use super::expr::{copied_into, Expr};
use super::incremental::{score, split_chain, unchanged_pipe, Increments, Split};
use super::plugin::{Kind, Plugin, PluginError};
use super::reasons::Reasons;
use super::summary::Step;
use super::{select, Allocation, Engine, Held};
use crate::js::sort::KeptOrder;
use crate::js::Js;
use crate::model::{AllocateBody, Image, Package, Ticket, VmPayload};

/// What of a request the chain's per-server part reads: requests with equal keys have every
/// server decided alike by that part, so they may share one [`Recurring`]. It leaves out
/// the owner and what names the VM alone (uuid, alias, and tags and metadata no
/// per-server plugin reads: [`VmPayload::as_read_per_server`](crate::model::VmPayload::as_read_per_server)),
/// so a caller's VMs of one size share it whoever orders them.
#[derive(Debug, Clone, PartialEq)]
pub struct RecurringKey {
    vm: VmPayload,
    image: Image,
    package: Option<Package>,
    tickets: Vec<Ticket>,
    seed: Option<u64>,
}

impl RecurringKey {
    pub fn of(request: &AllocateBody<'_>) -> RecurringKey {
        RecurringKey {
            vm: request.vm.as_read_per_server(),
            image: request.image.clone(),
            package: request.package.clone(),
            tickets: request.tickets.clone(),
            seed: request.seed,
        }
    }

    /// Whether `request` has this key (without building its own).
    pub fn fits(&self, request: &AllocateBody<'_>) -> bool {
        self.image == request.image
            && self.package == request.package
            && self.tickets == request.tickets
            && self.seed == request.seed
            && self.vm.read_alike_per_server(&request.vm)
    }
}

/// Which servers changed since the last allocation.
#[derive(Debug, Clone, Copy)]
pub enum Changed<'c> {
    /// Any: nothing kept is used.
    All,
    /// Those listed; servers past the last allocation's (appended since, taking the next
    /// ids) count as changed whether listed or not.
    Servers {
        /// Their VMs, tickets or facts changed.
        changed: &'c [ServerId],
        /// Of those, the ones whose own facts (what list-only scorers read) may have.
        facts: &'c [ServerId],
    },
}

/// A server's outcome of the chain's per-server part.
#[derive(Debug, Clone)]
enum Outcome {
    /// Not known: never run, or the server changed since.
    Stale,
    /// Removed by the per-server plugin at this position.
    RemovedBy(usize),
    /// Kept, with the state the part left it in: whole when the rest of the chain writes
    /// more than scores (the rest starts from it), else only its score (the states are
    /// handed from one allocation to the next, and a whole copy per kind of request would
    /// hold every ticketed VM once more).
    Kept(Box<ServerState>),
    KeptScored(f64),
}

impl Outcome {
    /// How many of the part's `plugins` the server passed (`None`: not known).
    fn steps_passed(&self, plugins: usize) -> Option<usize> {
        match self {
            Outcome::Stale => None,
            Outcome::RemovedBy(position) => Some(*position),
            Outcome::Kept(_) | Outcome::KeptScored(_) => Some(plugins),
        }
    }
}

/// The per-server part's steps from every server's outcome, one per plugin of it (past
/// a step that leaves nobody, empty ones).
fn per_server_steps(split: &Split, outcomes: &[Outcome]) -> Vec<Step> {
    // Most plugins remove nobody: their list is the one before, copied.
    let mut removed_by = vec![0usize; split.per_server.len()];
    for outcome in outcomes {
        if let Outcome::RemovedBy(position) = outcome {
            removed_by[*position] += 1;
        }
    }
    let all: Vec<ServerId> = (0..outcomes.len()).collect();
    let mut steps: Vec<Step> = Vec::with_capacity(split.per_server.len() + split.rest.len() + 4);
    for (position, plugin) in split.per_server.iter().enumerate() {
        let before: &[ServerId] = steps.last().map_or(&all, |step| &step.remaining);
        let remaining: Vec<ServerId> = if removed_by[position] == 0 {
            before.to_vec()
        } else {
            before
                .iter()
                .copied()
                .filter(|&id| !matches!(outcomes[id], Outcome::RemovedBy(p) if p == position))
                .collect()
        };
        let (received, input) = (before.len(), steps.len().checked_sub(1));
        steps.push(counted_step(plugin.as_ref(), remaining, received, input, Duration::ZERO));
    }
    steps
}

/// A step of a counts answer (no reasons): what `plugin` passed on of the `received`
/// servers of step `input`.
fn counted_step(
    plugin: &dyn Plugin,
    remaining: Vec<ServerId>,
    received: usize,
    input: Option<usize>,
    elapsed: Duration,
) -> Step {
    let declaration = plugin.declaration();
    Step {
        plugin: declaration.name,
        name: declaration.step,
        remaining,
        reasons: Reasons::discarding(),
        received,
        input,
        elapsed,
    }
}

/// What allocations of one request shape keep for the next (see the module). The caller
/// keeps one per shape and says what changed between two allocations.
#[derive(Default)]
pub struct Recurring {
    engine: Option<u64>,
    split: Option<Split>,
    outcomes: Vec<Outcome>,
    /// What the per-server part wrote for the request as a whole, from a run through all of
    /// it (the same whatever servers it is given).
    writes: Option<RequestWrites>,
    /// The servers' states, handed from one allocation to the next ([`Recurring::recycle`]).
    states: Vec<ServerState>,
    /// The per-server part's steps (one per plugin of it), handed from one allocation to
    /// the next and changed at the changed servers; empty when not known.
    steps: Vec<Step>,
    /// Whether the last allocation returned was made here (its states and steps are ours
    /// to take back).
    lent: bool,
    /// What the rest of the chain kept from its runs for the current owner's VMs.
    rest: RestMemo,
    /// Allocations whose per-server part ran for some servers only.
    reused: usize,
    /// Allocations that did not run the rest of the chain either.
    reused_rest: usize,
    /// The last allocation's VM owner (the rest of the chain reads it, the key leaves it
    /// out): `rest`, and the owner's VM counts the states keep, are that owner's.
    owner: Js,
    /// Other owners' memos from their last allocations here (the most recent last): an
    /// owner back is counted again only on the servers changed since, and the rest of the
    /// chain starts from what it kept for that owner.
    others: Vec<OwnerMemo>,
}

/// What the rest of the chain kept from its runs for one owner's VMs (it reads the owner:
/// its soft filters pass each owner a list of its own, which the next run of that owner's
/// VMs finds nearly unchanged).
#[derive(Default)]
struct RestMemo {
    /// The sorted orders it kept, handed from one run to the next.
    orders: Vec<KeptOrder>,
    /// The servers the per-server part kept in the last run, in order.
    survivors: Vec<ServerId>,
    /// What it did in its last run, while it still holds.
    last: Option<LastRest>,
    /// Per element of the rest of the chain, a list-only scorer's last increments.
    increments: Vec<Option<Increments>>,
    /// For a memo set aside, the servers changed since its last run (which a check that
    /// the run would do as it did must look at), while `last` is kept.
    changed_since: Vec<ServerId>,
}

impl RestMemo {
    /// Forgets what a change of the servers' facts may undo: the list-only scorers' increments
    /// (they read facts), and the last run, whose check takes those scorers as unchanged.
    fn forget_facts(&mut self) {
        self.increments.clear();
        self.last = None;
        self.changed_since.clear();
    }

    /// Notes that the `changed` servers changed while this memo was set aside; past
    /// [`CHANGED_SINCE_KEPT`] of them, its last run is forgotten (the check would cost more
    /// than it saves).
    fn note_changed(&mut self, changed: &[ServerId]) {
        if self.last.is_none() || changed.is_empty() {
            return;
        }
        self.changed_since.extend_from_slice(changed);
        if self.changed_since.len() > CHANGED_SINCE_KEPT {
            self.last = None;
            self.changed_since = Vec::new();
        }
    }
}

/// Another owner's memo, set aside until its next allocation here.
struct OwnerMemo {
    owner: Js,
    /// Its VM counts on each server (empty when the states were lent when it was set aside).
    counts: Vec<CountOnce>,
    rest: RestMemo,
}

/// How many servers changed since a memo was set aside it tracks before forgetting its
/// last run.
const CHANGED_SINCE_KEPT: usize = 64;

/// How many owners' memos [`Recurring`] keeps besides the current one's.
const OWNERS_KEPT: usize = 8;

/// The rest of the chain's last run on the same survivors: the steps it recorded (each
/// one's `remaining`: what its plugin passed on), and the server chosen with its score. The
/// steps are taken back from the allocation once its answer is written
/// ([`Recurring::recycle`]) rather than copied (a few lists of thousands of servers), and
/// lent to the next allocation that reuses them the same way.
struct LastRest {
    steps: Vec<Step>,
    /// Whether `steps` were handed back.
    complete: bool,
    chosen: ServerId,
    score: f64,
}

impl Recurring {
    pub fn new() -> Recurring {
        Recurring::default()
    }

    /// How many allocations ran the per-server part for the changed servers only.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// How many allocations did not run the rest of the chain either: every plugin of it
    /// would have done what it did last time ([`Plugin::unchanged_by`](super::plugin::Plugin::unchanged_by)).
    pub fn reused_rest(&self) -> usize {
        self.reused_rest
    }

    /// Sets the current owner's counts (in the servers' states, `n` of them) and rest memo
    /// aside and takes `owner`'s back, where still kept.
    fn change_owner(&mut self, owner: &Js, n: usize) {
        let counts = if self.states.len() == n {
            self.states.iter().map(|state| state.owner_vms.clone()).collect()
        } else {
            Vec::new()
        };
        if self.others.len() == OWNERS_KEPT {
            self.others.remove(0);
        }
        let rest = std::mem::take(&mut self.rest);
        self.others.push(OwnerMemo { owner: std::mem::take(&mut self.owner), counts, rest });
        for state in &mut self.states {
            state.forget_owner_vms();
        }
        for outcome in &mut self.outcomes {
            if let Outcome::Kept(state) = outcome {
                state.forget_owner_vms();
            }
        }
        if let Some(at) = self.others.iter().position(|memo| memo.owner == *owner) {
            let memo = self.others.remove(at);
            if memo.counts.len() == n {
                for (state, count) in self.states.iter_mut().zip(memo.counts) {
                    state.owner_vms = count;
                }
            }
            self.rest = memo.rest;
        }
        self.owner = owner.clone();
    }

    /// Takes back the states and steps of an allocation made here, once its answer is
    /// written, so that the next one starts from them.
    pub fn recycle(&mut self, allocation: Allocation) {
        let per_server = self.split.as_ref().map_or(0, |split| split.per_server.len());
        if std::mem::take(&mut self.lent)
            && allocation.state.len() == self.outcomes.len()
            && allocation.steps.len() >= per_server
        {
            self.states = allocation.state;
            self.steps = allocation.steps;
            let rest = self.steps.split_off(per_server);
            if let Some(last) = self.rest.last.as_mut().filter(|last| !last.complete) {
                (last.steps, last.complete) = (rest, true);
            }
        }
    }

    /// [`Engine::allocate_on`] for `body`, a request of the previous ones' [`RecurringKey`],
    /// on `held`, which differs from the previous allocation's only at the `changed`
    /// servers. The steps carry no reasons (see the module).
    pub fn allocate(
        &mut self,
        engine: &Engine,
        held: Held<'_>,
        body: &AllocateBody<'_>,
        changed: Changed<'_>,
    ) -> Result<Allocation, PluginError> {
        self.lent = false;
        let n = held.servers.len();
        let known =
            self.engine == Some(engine.id) && self.outcomes.len() <= n && self.states.len() == self.outcomes.len();
        // The changed servers with how many per-server steps each passed before.
        let mut passed_before: Vec<(ServerId, Option<usize>)> = Vec::new();
        let plugins = self.split.as_ref().map_or(0, |split| split.per_server.len());
        match changed {
            Changed::Servers { changed, facts } if known => {
                if self.outcomes.len() < n {
                    // Servers appended: the others keep their ids and outcomes.
                    self.outcomes.resize(n, Outcome::Stale);
                    self.states.resize_with(n, ServerState::default);
                    for memo in self.others.iter_mut().filter(|memo| !memo.counts.is_empty()) {
                        memo.counts.resize_with(n, CountOnce::default);
                    }
                }
                for &id in changed.iter().chain(facts) {
                    if let Some(outcome) = self.outcomes.get_mut(id) {
                        if !matches!(outcome, Outcome::Stale) {
                            passed_before.push((id, outcome.steps_passed(plugins)));
                            *outcome = Outcome::Stale;
                        }
                    }
                }
                if !facts.is_empty() {
                    // Rare (a server fed again): the scorers that read facts run afresh.
                    self.rest.forget_facts();
                    self.others.iter_mut().for_each(|memo| memo.rest.forget_facts());
                }
            }
            _ => {
                *self = Recurring {
                    engine: Some(engine.id),
                    outcomes: vec![Outcome::Stale; n],
                    states: vec![ServerState::default(); n],
                    reused: self.reused,
                    reused_rest: self.reused_rest,
                    ..Recurring::default()
                };
            }
        }
        if self.owner != body.vm.owner_uuid {
            // Another owner's VM: the per-server outcomes hold (that part does not read the
            // owner), the rest of the chain starts from what it kept for that owner.
            self.change_owner(&body.vm.owner_uuid, n);
        }
        let mut req = engine.request(held, body, std::mem::take(&mut self.states));
        let split = self.split.get_or_insert_with(|| split_chain(&engine.chain, &req));

        // The per-server part for the servers whose outcome is not known.
        let stale: Vec<ServerId> = (0..n).filter(|&id| matches!(self.outcomes[id], Outcome::Stale)).collect();
        if stale.len() < n {
            self.reused += 1;
        }
        for memo in &mut self.others {
            for &id in &stale {
                if let Some(count) = memo.counts.get_mut(id) {
                    *count = CountOnce::default();
                }
            }
            memo.rest.note_changed(&stale);
        }
        // The servers changed since the current owner's rest last ran.
        let mut changed_for_rest = std::mem::take(&mut self.rest.changed_since);
        if !changed_for_rest.is_empty() {
            changed_for_rest.extend_from_slice(&stale);
            changed_for_rest.sort_unstable();
            changed_for_rest.dedup();
        }
        for &id in &stale {
            req.set_state(id, ServerState::default());
        }
        let mut kept = stale.clone();
        let mut through_all = true;
        for (position, plugin) in split.per_server.iter().enumerate() {
            if kept.is_empty() {
                through_all = false;
                break;
            }
            let output = plugin.run(&mut req, &kept, &mut Reasons::discarding())?;
            // Per-server plugins pass on a part of what they are given, in its order.
            let mut passed = output.iter().peekable();
            for &id in &kept {
                if passed.next_if_eq(&&id).is_none() {
                    self.outcomes[id] = Outcome::RemovedBy(position);
                }
            }
            kept = output;
        }
        for &id in &kept {
            self.outcomes[id] = if split.rest_writes_scores_only {
                Outcome::KeptScored(req.state(id).score)
            } else {
                Outcome::Kept(Box::new(req.state(id).clone()))
            };
        }
        match &self.writes {
            Some(writes) => req.restore_request_writes(writes),
            None if through_all => self.writes = Some(req.request_writes()),
            None => {}
        }

        // The per-server part's steps (as its run over every server would record them):
        // the last ones, with the changed servers moved in or out, or made from the outcomes.
        let per_server = split.per_server.len();
        let mut steps = std::mem::take(&mut self.steps);
        let patchable = steps.len() == per_server
            && passed_before.len() == stale.len()
            && passed_before.iter().all(|(_, before)| before.is_some());
        if patchable {
            for &(id, before) in &passed_before {
                let (before, now) = (before.unwrap_or(0), self.outcomes[id].steps_passed(per_server).unwrap_or(0));
                for step in steps.iter_mut().take(before.max(now)).skip(before.min(now)) {
                    match (step.remaining.binary_search(&id), now > before) {
                        (Err(at), true) => step.remaining.insert(at, id),
                        (Ok(at), false) => drop(step.remaining.remove(at)),
                        _ => {}
                    }
                }
            }
            for j in 0..steps.len() {
                steps[j].received = if j == 0 { n } else { steps[j - 1].remaining.len() };
            }
        } else {
            steps = per_server_steps(split, &self.outcomes);
        }
        if steps.iter().any(|step| step.remaining.is_empty()) {
            // Nothing passes the per-server part: the answer says why, from a full run.
            self.steps = steps;
            self.states = req.into_states();
            return engine.allocate_on(held, body, false);
        }
        let (current, source) = match steps.last() {
            Some(step) => (step.remaining.clone(), Some(steps.len() - 1)),
            None => ((0..n).collect(), None),
        };
        let rest_from = steps.len();
        let rest = &mut self.rest;
        req.keep_orders(std::mem::take(&mut rest.orders));

        // The rest: not run when it would do what it did on the same survivors last time
        // but for the changed servers (the same servers passed on, the same increments,
        // so the same choice with the same score); otherwise run as in a full run.
        let same_survivors = current == rest.survivors;
        let changed_for_rest = if changed_for_rest.is_empty() { &stale } else { &changed_for_rest };
        let unchanged = match &rest.last {
            Some(last) if same_survivors && split.rest_writes_scores_only && last.complete => {
                let sorts_from = req.kept_orders_next();
                let mut outputs = last.steps.iter().map(|step| &step.remaining);
                let same = unchanged_pipe(&split.rest, &mut req, &current, &mut outputs, changed_for_rest).is_some();
                if !same {
                    req.set_kept_orders_next(sorts_from);
                }
                same
            }
            _ => false,
        };
        let chosen = match rest.last.as_mut().filter(|_| unchanged) {
            Some(last) => {
                self.reused_rest += 1;
                // Lent to the answer, not copied: handed back by `recycle` (until then,
                // incomplete, they are not reused).
                let lent = std::mem::take(&mut last.steps);
                last.complete = false;
                steps.extend(lent.into_iter().map(|step| Step { elapsed: Duration::ZERO, ..step }));
                req.set_score(last.chosen, last.score);
                Some(last.chosen)
            }
            None => {
                // The kept servers' states put back as the per-server part left them.
                for &id in &current {
                    match &self.outcomes[id] {
                        Outcome::KeptScored(score) => req.set_score(id, *score),
                        Outcome::Kept(state) => req.set_state(id, (**state).clone()),
                        _ => {}
                    }
                }
                rest.survivors.clone_from(&current);
                rest.increments.resize_with(split.rest.len(), || None);
                // The last run's lists are replaced by this run's: their buffers hold them.
                let mut spare: Vec<Vec<ServerId>> = rest
                    .last
                    .take()
                    .map(|last| last.steps.into_iter().map(|step| step.remaining).collect())
                    .unwrap_or_default();
                let mut output = (current, source);
                for (item, increments) in split.rest.iter().zip(&mut rest.increments) {
                    if output.0.is_empty() {
                        break;
                    }
                    output = match item {
                        // Given the list it was last given, a list-only scorer adds the
                        // same increments: added again rather than worked out.
                        Expr::Plugin(p) if p.declaration().list_only && p.declaration().kind == Kind::Scorer => {
                            let (received, started) = (output.0.len(), std::time::Instant::now());
                            let scored = score(p.as_ref(), &mut req, output.0, increments, n)?;
                            let listed = copied_into(spare.pop().unwrap_or_default(), &scored);
                            steps.push(counted_step(p.as_ref(), listed, received, output.1, started.elapsed()));
                            (scored, Some(steps.len() - 1))
                        }
                        _ => item.run_counting(&mut req, output.0, output.1, &mut steps)?,
                    };
                }
                let chosen = select(&output.0, req.states());
                debug_assert_eq!(rest_from, split.per_server.len(), "the rest's steps follow the per-server part's");
                rest.last = chosen.map(|chosen| LastRest {
                    steps: Vec::new(),
                    complete: false,
                    chosen,
                    score: req.state(chosen).score,
                });
                chosen
            }
        };
        rest.orders = req.take_orders();
        let (state, notes) = req.finish();
        let allocation = Allocation { chosen, steps, state, notes };
        if chosen.is_none() {
            // The answer names why nothing fits from the last step's reasons: made in full.
            self.lent = true;
            self.recycle(allocation);
            return engine.allocate_on(held, body, false);
        }
        self.lent = true;
        Ok(allocation)
    }
}
