//! The plugin contract: what a plugin is, what it may touch, and how the engine holds them.
//!
//! Two ways to write one, as in kube-scheduler's framework and Nomad's feasibility checkers:
//!
//! * [`ServerFilter`]: a hard filter that decides each server on its own states only its
//!   rule (`filter`), plus what it works out once per run (`pre_filter`). The engine owns the
//!   loop, the reasons and the split over the cores.
//! * [`Plugin`]: the whole-list contract (soft filters, scorers, transforms, and filters that
//!   compare servers with each other): the ordered candidates in, the ones passed on out.
//!
//! Every plugin carries a [`Declaration`]: its lookup name, step name, kind, and what of the
//! working set ([`Data`]) it reads and writes, which the engine checks against the chain's
//! order when it is built. Plugins depend on the engine, never the reverse: the engine knows
//! plugins only through a [`Registry`] handed to it.

use std::sync::Arc;

use super::context::{Request, ServerId, Shortfall};
use super::parallel::{on_one_core, sift};
use super::reasons::{Msg, Reasons};

/// What a plugin does: hard filters remove servers that cannot host the VM, soft filters
/// remove servers while enough remain, scorers add to scores, transforms compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HardFilter,
    SoftFilter,
    Scorer,
    Transform,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::HardFilter => "hard filter",
            Kind::SoftFilter => "soft filter",
            Kind::Scorer => "scorer",
            Kind::Transform => "transform",
        }
    }
}

/// A part of the per-request working set ([`Request`]) that plugins write for later ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// Each server's unreserved CPU, RAM and disk; undefined until written.
    Unreserved,
    /// Each server's effective overprovision ratios; the server's own until written.
    Ratios,
    /// VMs added to servers from open provisioning tickets; none until written.
    TicketVms,
    /// The VM's locality hints, as derived from its affinity rules; `vm.locality` until
    /// written.
    Locality,
    /// The VM's CPU cap, possibly copied from the package; `vm.cpu_cap` until written.
    CpuCap,
    /// Each server's score; 0 until written.
    Scores,
    /// Servers whose sysinfo NICs carry their interface name (as the original's NIC tag
    /// filter wrote it into them); none until written. Read by the answer.
    NicNames,
}

impl Data {
    /// Data kept per server (in each server's state), rather than for the request as a whole.
    pub fn per_server(self) -> bool {
        !matches!(self, Data::Locality | Data::CpuCap)
    }

    /// Data that has no meaningful value before it is written: reading it from a chain
    /// where nothing writes it first is a configuration mistake.
    pub fn needs_writer(self) -> bool {
        matches!(self, Data::Unreserved)
    }
}

/// What a plugin is, in one place.
#[derive(Debug)]
pub struct Declaration {
    /// Lookup name, as used in allocation descriptions (`hard-filter-min-ram`).
    pub name: &'static str,
    /// Step name, as reported in the step summary (`Servers with enough unreserved RAM`).
    pub step: &'static str,
    pub kind: Kind,
    pub reads: &'static [Data],
    pub writes: &'static [Data],
    /// A plugin whose output list is any subset of its input, in any order: a filter that
    /// reorders what it keeps, or a custom plugin, whose list the original passed on
    /// whatever its kind (a [`Kind`] otherwise promises its order, or the list unchanged).
    pub reorders: bool,
    /// What the plugin does to a server (keeps, removes, writes its state) depends only on
    /// the request and that server (with what earlier plugins wrote for it), never on the
    /// other servers given or on the rng, and what it writes beyond the servers' states is
    /// the same whatever servers it is given: running it on one server alone does to that
    /// server what running it on the whole list does. Lets a caller placing VMs one after
    /// another keep each server's outcome and re-run only the server that changed
    /// ([`Placer`](super::incremental::Placer)). Every [`ServerFilter`] is per-server by
    /// construction.
    pub per_server: bool,
    /// A scorer whose increment for each server (one per server) depends only on the
    /// request and the list of servers given (their order and their fixed facts: not their
    /// states, scores or VMs): a caller placing VMs one after another may add the same
    /// increments again while the list stays the same ([`Placer`](super::incremental::Placer)).
    pub list_only: bool,
    /// Hands the servers to operators' JavaScript as they stand: what it reads is read
    /// only where an earlier plugin wrote it (absent otherwise, as in the original), so a
    /// chain that writes it later or never is not a mistake to warn about.
    pub reads_as_written: bool,
}

impl Declaration {
    /// A plugin that reads and writes nothing of the working set and keeps the order.
    pub const fn new(name: &'static str, kind: Kind, step: &'static str) -> Declaration {
        Declaration {
            name,
            step,
            kind,
            reads: &[],
            writes: &[],
            reorders: false,
            per_server: false,
            list_only: false,
            reads_as_written: false,
        }
    }

    pub const fn reads_as_written(mut self) -> Declaration {
        self.reads_as_written = true;
        self
    }

    pub const fn list_only(mut self) -> Declaration {
        self.list_only = true;
        self
    }

    pub const fn per_server(mut self) -> Declaration {
        self.per_server = true;
        self
    }

    pub const fn reads(mut self, data: &'static [Data]) -> Declaration {
        self.reads = data;
        self
    }

    pub const fn writes(mut self, data: &'static [Data]) -> Declaration {
        self.writes = data;
        self
    }

    pub const fn reorders(mut self) -> Declaration {
        self.reorders = true;
        self
    }
}

/// An internal failure inside a plugin (never the caller's mistake).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError(pub String);

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PluginError {}

/// One allocation step, over the whole candidate list.
pub trait Plugin: Sync + Send {
    fn declaration(&self) -> &'static Declaration;

    /// Runs on `servers` (in order) and returns the servers passed on, in order.
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError>;

    fn name(&self) -> &'static str {
        self.declaration().name
    }

    /// For a list-only scorer ([`Declaration::list_only`]): whether, for this request, its
    /// increments depend only on which servers it is given, not on their order (a scorer
    /// working from the list's minimum and maximum, say). Its increments may then be added
    /// again while the same servers come in another order. It may read the request and the
    /// servers' facts, not their state: the answer is kept while those stay the same.
    fn order_free(&self, _req: &Request<'_>) -> bool {
        false
    }

    /// Whether the plugin is per-server (see [`Declaration::per_server`]) for this request:
    /// a plugin that compares servers only for some requests says so here.
    fn per_server(&self, _req: &Request<'_>) -> bool {
        self.declaration().per_server
    }

    /// For a caller placing VMs one after another ([`Placer`](super::incremental::Placer)):
    /// whether a run on `servers`, the very list its last run was given (and passed `last`
    /// on from), would pass on the same servers in the same order and add the same score
    /// increments, now that only the servers of `changed` differ from then (their states
    /// and VMs; the request and every other server are as they were). `false` when that
    /// cannot be told without running: the caller then runs the chain. A plugin that sorts
    /// takes the kept order its run would take ([`Request::kept_order_holds`]).
    /// Per-server and list-only plugins need not say: the caller knows them already.
    fn unchanged_by(
        &self,
        _req: &mut Request<'_>,
        _servers: &[ServerId],
        _last: &[ServerId],
        _changed: &[ServerId],
    ) -> bool {
        false
    }
}

/// What a [`ServerFilter`] works out once per run.
pub enum PreFilter<T> {
    /// Check every server with this.
    Run(T),
    /// The filter is switched off: every server passes, with this `skip` reason.
    Skip(Msg),
    /// Every server passes, without a reason.
    PassAll,
}

/// A [`ServerFilter`]'s verdict on one server.
pub enum Verdict {
    Keep,
    /// Removed without a reason (as some of the original's filters do).
    Remove,
    /// Removed, with the reason recorded under the server's key.
    RemoveBecause(Msg),
    /// Removed with the reason, and what the server lacks in numbers (noted when
    /// explaining: the engine, not the filter, writes the note, so parallel passes share
    /// nothing mutable).
    Short(Msg, Shortfall),
}

impl Verdict {
    /// Removed because of `why`.
    pub fn fail(why: impl Into<Msg>) -> Verdict {
        Verdict::RemoveBecause(why.into())
    }

    /// Removed because of `why`, short by `shortfall`.
    pub fn short(why: impl Into<Msg>, shortfall: Shortfall) -> Verdict {
        Verdict::Short(why.into(), shortfall)
    }

    /// [`Verdict::Keep`] when `keep` holds, else [`Verdict::Remove`].
    pub fn keep_if(keep: bool) -> Verdict {
        if keep {
            Verdict::Keep
        } else {
            Verdict::Remove
        }
    }
}

/// A hard filter that decides each server on its own (kube's `Filter`, Nomad's `Feasible`).
pub trait ServerFilter: Sync + Send {
    /// What [`ServerFilter::pre_filter`] works out for [`ServerFilter::filter`].
    type Prepared: Sync + Default;

    /// Split the servers over the cores past `parallel::PARALLEL_FROM` candidates per core. A
    /// pass over thousands of servers spends its time fetching each one from memory, which
    /// the cores share (5,000 servers: the decision 8.5 -> 7.8 ms with every filter split,
    /// against the heavy ones only); a rule whose check is costly to share may opt out.
    const PARALLEL: bool = true;

    fn declaration(&self) -> &'static Declaration;

    /// Once per run, before any server: what the rule needs from the request, or whether
    /// the filter is switched off.
    fn pre_filter(&self, _req: &Request<'_>) -> Result<PreFilter<Self::Prepared>, PluginError> {
        Ok(PreFilter::Run(Self::Prepared::default()))
    }

    /// The rule: whether server `id` can host the VM.
    fn filter(&self, req: &Request<'_>, prepared: &Self::Prepared, id: ServerId) -> Verdict;
}

impl<F: ServerFilter> Plugin for F {
    fn declaration(&self) -> &'static Declaration {
        ServerFilter::declaration(self)
    }

    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let prepared = match self.pre_filter(req)? {
            PreFilter::Run(prepared) => prepared,
            PreFilter::Skip(why) => {
                reasons.skip(why);
                return Ok(servers.to_vec());
            }
            PreFilter::PassAll => return Ok(servers.to_vec()),
        };
        Ok(keep_passing(req, servers, reasons, F::PARALLEL, |req, id| self.filter(req, &prepared, id)))
    }

    fn per_server(&self, _req: &Request<'_>) -> bool {
        true
    }
}

/// The servers `check` keeps, in order; the reasons of the others recorded under their keys
/// (in server order), and their shortfalls noted when explaining. `parallel`: split the
/// servers over the cores when there are many.
pub fn keep_passing(
    req: &mut Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    parallel: bool,
    check: impl Fn(&Request<'_>, ServerId) -> Verdict + Sync,
) -> Vec<ServerId> {
    let shared = &*req;
    let check = |id| match check(shared, id) {
        Verdict::Keep => None,
        Verdict::Remove => Some((None, None)),
        Verdict::RemoveBecause(why) => Some((Some(why), None)),
        Verdict::Short(why, short) => Some((Some(why), Some(short))),
    };
    let (kept, removed) = if parallel { sift(servers, check) } else { on_one_core(|| sift(servers, check)) };
    for (id, (why, short)) in removed {
        if let Some(short) = short {
            req.note_shortfall(id, short);
        }
        if let Some(why) = why {
            reasons.set(req.key(id), why);
        }
    }
    kept
}

/// Every plugin a chain may name, by lookup name. Assembled above the engine (the built-in
/// plugins, and any loaded at start-up) and handed to it.
#[derive(Clone, Default)]
pub struct Registry {
    plugins: Vec<Arc<dyn Plugin>>,
    /// The lookup names of the chain `serverCapacity()` runs, whatever the configured
    /// description (`Engine::capacity`); none: a capacity pass keeps every server.
    capacity_chain: &'static [&'static str],
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.plugins.iter().map(|p| p.name())).finish()
    }
}

impl Registry {
    /// Adds a plugin; an error names a lookup name already taken.
    pub fn register(&mut self, plugin: Arc<dyn Plugin>) -> Result<(), String> {
        if self.lookup(plugin.name()).is_some() {
            return Err(format!("plugin name {:?} is already registered", plugin.name()));
        }
        self.plugins.push(plugin);
        Ok(())
    }

    /// Sets the chain capacity passes run (lookup names, in order).
    pub fn set_capacity_chain(&mut self, names: &'static [&'static str]) {
        self.capacity_chain = names;
    }

    pub fn capacity_chain(&self) -> &'static [&'static str] {
        self.capacity_chain
    }

    /// The plugin registered under a lookup name.
    pub fn lookup(&self, name: &str) -> Option<&Arc<dyn Plugin>> {
        self.plugins.iter().find(|p| p.name() == name)
    }

    /// Every plugin, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn Plugin>> {
        self.plugins.iter()
    }

    pub fn len(&self) -> usize {
        self.plugins.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }
}

/// What a plugin's [`Kind`] promises about its output, broken: a filter returns a
/// subsequence of its input, a scorer or transform returns its input unchanged, and a
/// plugin that declares it reorders returns a subset. Checked after every step in debug
/// builds.
pub fn broken_promise(decl: &Declaration, input: &[ServerId], output: &[ServerId]) -> Option<String> {
    let name = decl.name;
    match decl.kind {
        _ if decl.reorders => {
            let mut seen = vec![false; input.iter().max().map_or(0, |m| m + 1)];
            input.iter().for_each(|&id| seen[id] = true);
            let foreign = output.iter().find(|&&id| !seen.get(id).copied().unwrap_or(false));
            foreign.map(|id| format!("{name} returned server {id}, which it was not given"))
        }
        Kind::HardFilter | Kind::SoftFilter => {
            let mut rest = input.iter();
            let stray = output.iter().find(|&&id| !rest.any(|&i| i == id));
            stray.map(|id| format!("{name} returned server {id} out of order or not given"))
        }
        Kind::Scorer | Kind::Transform if input != output => {
            Some(format!("{name} is a {} but changed the server list", decl.kind.as_str()))
        }
        Kind::Scorer | Kind::Transform => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::stub_request;

    const FILTER: Declaration = Declaration::new("f", Kind::HardFilter, "F");
    const SORTER: Declaration = Declaration::new("s", Kind::HardFilter, "S").reorders();
    const SCORER: Declaration = Declaration::new("c", Kind::Scorer, "C");

    struct OddOut;

    static ODD_OUT: Declaration = Declaration::new("odd-out", Kind::HardFilter, "Even servers");

    impl ServerFilter for OddOut {
        type Prepared = usize;
        fn declaration(&self) -> &'static Declaration {
            &ODD_OUT
        }
        fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<usize>, PluginError> {
            Ok(match req.servers.len() {
                0 => PreFilter::PassAll,
                1 => PreFilter::Skip("only one".into()),
                n => PreFilter::Run(n),
            })
        }
        fn filter(&self, _: &Request<'_>, n: &usize, id: ServerId) -> Verdict {
            match id % 2 {
                0 => Verdict::Keep,
                _ if id + 1 == *n => Verdict::Remove,
                _ => Verdict::fail(format!("{id} is odd")),
            }
        }
    }

    #[test]
    fn a_server_filter_states_its_rule_and_the_engine_runs_the_loop() {
        let servers: Vec<_> = (0..4).map(|i| serde_json::json!({"uuid": format!("s{i}")})).collect();
        let (kept, reasons) = stub_request(&servers, |req| {
            let mut reasons = Reasons::default();
            let kept = OddOut.run(req, &[0, 1, 2, 3], &mut reasons).expect("runs");
            (kept, reasons.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>())
        });
        assert_eq!(kept, [0, 2]);
        assert_eq!(reasons, ["s1: 1 is odd"]);
        let skipped = stub_request(&servers[..1], |req| {
            let mut reasons = Reasons::default();
            let kept = OddOut.run(req, &[0], &mut reasons).expect("runs");
            (kept, reasons.get("skip").map(str::to_string))
        });
        assert_eq!(skipped, (vec![0], Some("only one".to_string())));
    }

    #[test]
    fn kinds_keep_their_promises() {
        assert_eq!(broken_promise(&FILTER, &[3, 1, 2], &[3, 2]), None);
        assert!(broken_promise(&FILTER, &[3, 1, 2], &[2, 3]).is_some());
        assert!(broken_promise(&FILTER, &[3, 1], &[4]).is_some());
        assert_eq!(broken_promise(&SORTER, &[3, 1, 2], &[2, 3]), None);
        assert!(broken_promise(&SORTER, &[3, 1], &[0]).is_some());
        assert_eq!(broken_promise(&SCORER, &[3, 1], &[3, 1]), None);
        assert!(broken_promise(&SCORER, &[3, 1], &[1, 3]).is_some());
    }
}
