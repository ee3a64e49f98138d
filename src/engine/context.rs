//! The per-request working set.
//!
//! The parsed request is read-only. Everything the original allocator wrote onto the request
//! objects (scores, unreserved resources, replaced overprovision ratios, VMs from tickets, the
//! VM's copied `cpu_cap` and affinity-derived `locality`, the massaged package) lives here
//! instead, and plugins read the effective values through these accessors.

use crate::js::sort::{js_sort_ids_by_scaled, KeptOrder};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use rand::rngs::StdRng;

use super::defaults::Defaults;
use super::reasons::{KeyTable, ServerKey};
use super::vm_index::{VmIndex, VmLookup};
use super::HeldTickets;
use crate::js::Js;
use crate::model::{Image, Package, RawParams, Server, ServerVm, Ticket, VmPayload, EMPTY_VM};

/// Index of a server in the request's `servers` list.
pub type ServerId = usize;

/// Unreserved resources, as `calculate-server-unreserved` computes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Unreserved {
    /// Percent of one core.
    pub cpu_pct: f64,
    pub ram_mib: f64,
    pub disk_mib: f64,
}

/// What the allocation has learnt or changed about one server.
#[derive(Debug, Clone, Default)]
pub struct ServerState {
    pub score: f64,
    /// `overprovision_ratios` as replaced by `override-overprovisioning` or defaulted by
    /// `calculate-server-unreserved`; `None` reads the server's own. Shared: every server
    /// gets the same replacement.
    pub ratios: Option<Arc<Js>>,
    pub unreserved: Option<Unreserved>,
    /// VMs added from open provisioning tickets, after the server's own.
    pub ticket_vms: Vec<(Box<str>, ServerVm<'static>)>,
    /// Added to `disk_zone_quota_bytes` for ticketed VMs.
    pub zone_quota_added_bytes: f64,
    /// Added to `disk_kvm_zvol_volsize_bytes` for ticketed KVM VMs.
    pub kvm_zvol_added_bytes: f64,
    /// Each sysinfo NIC (physical and virtual) carries its `interface` name in the answer.
    pub nics_named: bool,
    /// How many of the server's VMs the request's VM's owner has, once counted.
    pub(crate) owner_vms: CountOnce,
}

impl ServerState {
    /// Forgets the count of the request's owner's VMs (the request's owner changed).
    pub(crate) fn forget_owner_vms(&mut self) {
        self.owner_vms = CountOnce::default();
    }

    /// A state afresh for a server that has listed one more VM of the request's owner since
    /// this state was worked out (a placement): the owner's VM count, if known, carried on.
    pub fn afresh_after_own_vm(&self) -> ServerState {
        let fresh = ServerState::default();
        if let Some(count) = self.owner_vms.get() {
            fresh.owner_vms.set(count + 1);
        }
        fresh
    }
}

/// A count worked out on first use (atomic: per-server passes may run on several threads).
#[derive(Debug, Default)]
pub(crate) struct CountOnce(AtomicU32);

impl CountOnce {
    fn get(&self) -> Option<usize> {
        let stored = self.0.load(Ordering::Relaxed);
        (stored != 0).then(|| stored as usize - 1)
    }

    fn set(&self, count: usize) {
        if let Ok(stored) = u32::try_from(count + 1) {
            self.0.store(stored, Ordering::Relaxed);
        }
    }
}

impl Clone for CountOnce {
    fn clone(&self) -> Self {
        CountOnce(AtomicU32::new(self.0.load(Ordering::Relaxed)))
    }
}

/// The package after massaging (`PIPELINE.md` §3.2) and any overriding: ratios under their
/// internal names.
#[derive(Debug, Clone)]
pub struct PackageState<'r> {
    pub package: &'r Package,
    pub overprovision_cpu: Js,
    pub overprovision_ram: Js,
    pub overprovision_disk: Js,
    pub overprovision_io: Js,
    pub overprovision_net: Js,
}

impl<'r> PackageState<'r> {
    /// Converts the PAPI ratio names to the internal ones and defaults RAM to 1 when the
    /// package carries no ratio at all.
    pub fn massage(package: &'r Package) -> PackageState<'r> {
        let convert = |from: &Js, existing: &Js| if from.truthy() { Js::Num(from.num()) } else { existing.clone() };
        let mut state = PackageState {
            package,
            overprovision_cpu: convert(&package.overprovision_cpu, &package.overprovision_cpu),
            overprovision_ram: convert(&package.overprovision_memory, &package.overprovision_ram),
            overprovision_disk: convert(&package.overprovision_storage, &package.overprovision_disk),
            overprovision_io: convert(&package.overprovision_io, &package.overprovision_io),
            overprovision_net: convert(&package.overprovision_network, &package.overprovision_net),
        };
        let any = [
            &state.overprovision_cpu,
            &state.overprovision_ram,
            &state.overprovision_disk,
            &state.overprovision_io,
            &state.overprovision_net,
        ]
        .iter()
        .any(|r| r.truthy());
        if !any {
            state.overprovision_ram = Js::Num(1.0);
        }
        state
    }
}

/// What plugins write for the request as a whole rather than for a server (the VM's CPU
/// cap and locality, the package's ratios), to be carried from one run to another.
#[derive(Debug, Clone)]
pub struct RequestWrites {
    vm_cpu_cap: Js,
    /// Only when written (it is the request's own otherwise, which a request of the same
    /// [`RecurringKey`](super::RecurringKey) need not share).
    vm_locality: Option<Js>,
    /// CPU, RAM, disk, I/O and network ratios of the package, when there is one.
    package_ratios: Option<[Js; 5]>,
}

/// Look-ups built on first use from the servers, kept by a
/// [`Datacenter`](super::datacenter::Datacenter) across the allocations it runs (and kept
/// current as it lists VMs) instead of being built again by each.
#[derive(Debug, Default)]
pub struct Lookups {
    pub vm_index: OnceLock<VmIndex>,
    pub keys: OnceLock<Arc<KeyTable>>,
}

/// One allocation (or capacity) run's working set. What plugins learn or change is written
/// through the named writers below (`set_unreserved`, `add_ticket_vm`, ...), each the write
/// side of a [`Data`](super::plugin::Data) a plugin declares.
pub struct Request<'r> {
    pub servers: &'r [Server<'r>],
    state: Vec<ServerState>,
    pub vm: &'r VmPayload,
    /// `vm.cpu_cap`, possibly copied from the package by `hard-filter-min-cpu`.
    vm_cpu_cap: Js,
    /// `vm.locality`, possibly replaced by `calculate-affinity`.
    vm_locality: Js,
    pub image: &'r Image,
    /// The package, its ratios possibly replaced by `override-overprovisioning`
    /// ([`Request::set_package_ratios`]).
    package: Option<PackageState<'r>>,
    pub tickets: &'r [Ticket],
    /// Tickets the caller holds across requests (inventory mode's claims), counted after
    /// the request's own: handed over without being copied into `tickets`.
    pub held_tickets: &'r dyn HeldTickets,
    pub defaults: &'r Defaults,
    pub rng: StdRng,
    /// Whether `rng` was seeded by the caller: a run repeated with the same seed draws the
    /// same numbers ([`Placer`](super::incremental::Placer) sets it).
    pub rng_seeded: bool,
    /// Each server's JSON as received, in `servers` order, for plugins that read fields the
    /// typed model leaves out (`hard-filter-owners-servers`). Empty when the caller has none.
    pub raw_servers: &'r [&'r str],
    /// The other parameters' JSON as received, for plugins that see them whole (custom
    /// plugins). Empty when the caller has none.
    pub raw_params: RawParams<'r>,
    vm_index: OnceLock<VmIndex>,
    keys: OnceLock<Arc<KeyTable>>,
    /// A datacenter's look-ups, used instead of the two above when given.
    shared: Option<&'r Lookups>,
    /// Notes for an explained allocation; `None` (the plain path) records nothing.
    recorder: Option<Recorder>,
    /// Sorted orders kept across runs by a caller that runs the chain again and again on
    /// nearly the same servers (the [`Placer`](super::incremental::Placer)), one per sort
    /// in the order the run makes them, and the next one's index.
    kept_orders: Option<(Vec<KeptOrder>, usize)>,
}

/// A resource a filter found short on a server, in the answer's units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shortfall {
    /// `ram`, `cpu`, `disk`, `free_disk`, `vms`, or `<resource>_ratio`.
    pub resource: &'static str,
    /// `MiB`, `CPU units` (percent of one core), `VMs` or `ratio`.
    pub unit: &'static str,
    pub needed: f64,
    pub available: f64,
}

/// What a plugin noted about one server while explaining.
#[derive(Debug, Clone, PartialEq)]
pub enum NoteKind {
    Shortfall(Shortfall),
    /// One score increment: the value the scorer placed the server by (its position in
    /// the scorer's order unless the scorer noted the value itself), the weight and the
    /// increment.
    Score {
        raw: f64,
        weight: f64,
        contribution: f64,
    },
    /// The value a scorer ordered servers by, when it is not the position (unreserved
    /// MiB, owner zones, a date).
    Raw(serde_json::Value),
}

/// A note, tagged with the step (its index in the allocation's steps) that wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct Note {
    pub step: usize,
    pub server: ServerId,
    pub kind: NoteKind,
}

/// Collects notes while an allocation is explained, in the request's own working set: only
/// whole-list code with the request borrowed mutably writes them (per-server filters hand
/// their shortfalls back in their verdicts), so no lock is taken.
#[derive(Debug, Default)]
pub struct Recorder {
    step: usize,
    notes: Vec<Note>,
}

impl Recorder {
    fn add(&mut self, server: ServerId, kind: NoteKind) {
        self.notes.push(Note { step: self.step, server, kind });
    }

    /// The notes, in step order and in the order they were written within each step.
    pub fn into_notes(self) -> Vec<Note> {
        self.notes
    }
}

impl<'r> Request<'r> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        servers: &'r [Server<'r>],
        vm: &'r VmPayload,
        image: &'r Image,
        package: Option<&'r Package>,
        tickets: &'r [Ticket],
        defaults: &'r Defaults,
        rng: StdRng,
    ) -> Request<'r> {
        let state = vec![ServerState::default(); servers.len()];
        Request::with_states(servers, vm, image, package, tickets, defaults, rng, state)
    }

    /// [`Request::new`] over states the caller already has, one per server (taken back
    /// with [`Request::into_states`]): a run that keeps them across runs spares their
    /// allocation and whatever they hold that it knows to be still true.
    #[allow(clippy::too_many_arguments)]
    pub fn with_states(
        servers: &'r [Server<'r>],
        vm: &'r VmPayload,
        image: &'r Image,
        package: Option<&'r Package>,
        tickets: &'r [Ticket],
        defaults: &'r Defaults,
        rng: StdRng,
        state: Vec<ServerState>,
    ) -> Request<'r> {
        debug_assert_eq!(state.len(), servers.len());
        Request {
            servers,
            state,
            vm,
            vm_cpu_cap: vm.cpu_cap_pct.clone(),
            vm_locality: vm.locality.clone(),
            image,
            package: package.map(PackageState::massage),
            tickets,
            held_tickets: &super::NO_TICKETS,
            defaults,
            rng,
            rng_seeded: false,
            raw_servers: &[],
            raw_params: RawParams::default(),
            vm_index: OnceLock::new(),
            keys: OnceLock::new(),
            shared: None,
            recorder: None,
            kept_orders: None,
        }
    }

    /// Hands the request the orders an earlier run kept (see [`Request::sort_by_scaled`]).
    pub fn keep_orders(&mut self, orders: Vec<KeptOrder>) {
        self.kept_orders = Some((orders, 0));
    }

    /// The orders kept, to hand to the next run.
    pub fn take_orders(&mut self) -> Vec<KeptOrder> {
        self.kept_orders.take().map(|(orders, _)| orders).unwrap_or_default()
    }

    /// Sorts `ids` (`keys[i]` the key of `ids[i]`) as `list.sort((a, b) => weight * (a.key -
    /// b.key))` does; from the order the same sort kept in the last run, when there is one.
    pub fn sort_by_scaled(&mut self, ids: &mut Vec<ServerId>, keys: &[f64], weight: f64) {
        let kept = self.kept_orders.as_mut().map(|(orders, next)| {
            if orders.len() <= *next {
                orders.push(KeptOrder::default());
            }
            *next += 1;
            &mut orders[*next - 1]
        });
        js_sort_ids_by_scaled(ids, keys, weight, kept);
    }

    /// For a check that a run would sort as the last one did ([`Plugin::unchanged_by`](super::plugin::Plugin::unchanged_by)):
    /// takes the next kept order, as [`Request::sort_by_scaled`] would, and tells whether
    /// sorting `servers` (the list last sorted) again by `key` gives that order now that
    /// only the servers of `changed` may have new keys. `false` when no order is kept.
    pub fn kept_order_holds(
        &mut self,
        servers: &[ServerId],
        changed: &[ServerId],
        weight: f64,
        key: impl Fn(&Request<'r>, ServerId) -> f64,
    ) -> bool {
        let keys: Vec<(ServerId, f64)> =
            changed.iter().filter(|id| servers.contains(id)).map(|&id| (id, key(self, id))).collect();
        let Some((orders, next)) = self.kept_orders.as_mut() else { return false };
        *next += 1;
        orders.get_mut(*next - 1).is_some_and(|kept| kept.holds(servers.len(), &keys, weight))
    }

    /// Where the next sort takes its kept order from (see [`Request::sort_by_scaled`]).
    pub fn kept_orders_next(&self) -> usize {
        self.kept_orders.as_ref().map_or(0, |(_, next)| *next)
    }

    /// Sets where the next sort takes its kept order from (after a check that did not hold).
    pub fn set_kept_orders_next(&mut self, at: usize) {
        if let Some((_, next)) = self.kept_orders.as_mut() {
            *next = at;
        }
    }

    /// Turns on notes for an explained allocation.
    pub fn record_notes(&mut self) {
        // Scorers note twice per server each: reserved once rather than regrown.
        let notes = Vec::with_capacity(self.servers.len() * 8);
        self.recorder = Some(Recorder { step: 0, notes });
    }

    /// The engine says which step runs next (notes are tagged with it).
    pub fn begin_note_step(&mut self, step: usize) {
        if let Some(r) = &mut self.recorder {
            r.step = step;
        }
    }

    /// Whether notes are being taken (plugins skip work that only feeds notes).
    pub fn explaining(&self) -> bool {
        self.recorder.is_some()
    }

    /// Notes that server `id` falls short on a resource (explaining only).
    pub fn note_shortfall(&mut self, id: ServerId, shortfall: Shortfall) {
        if let Some(r) = &mut self.recorder {
            r.add(id, NoteKind::Shortfall(shortfall));
        }
    }

    /// Notes one score increment of server `id` (explaining only).
    pub fn note_score(&mut self, id: ServerId, raw: f64, weight: f64, contribution: f64) {
        if let Some(r) = &mut self.recorder {
            r.add(id, NoteKind::Score { raw, weight, contribution });
        }
    }

    /// Notes the value a scorer ordered server `id` by (explaining only: callers make the
    /// value only when [`Request::explaining`]).
    pub fn note_raw(&mut self, id: ServerId, value: serde_json::Value) {
        if let Some(r) = &mut self.recorder {
            r.add(id, NoteKind::Raw(value));
        }
    }

    /// The run's states and notes (none unless explaining), once it is over.
    pub fn finish(self) -> (Vec<ServerState>, Vec<Note>) {
        (self.state, self.recorder.map(Recorder::into_notes).unwrap_or_default())
    }

    /// Reads VMs and server keys through `lookups` (a datacenter's, kept across runs).
    pub fn share_lookups(&mut self, lookups: &'r Lookups) {
        self.shared = Some(lookups);
    }

    pub fn server(&self, id: ServerId) -> &'r Server<'r> {
        &self.servers[id]
    }

    /// What the allocation has learnt or changed about server `id` so far.
    pub fn state(&self, id: ServerId) -> &ServerState {
        &self.state[id]
    }

    /// Every server's state, in `servers` order.
    pub fn states(&self) -> &[ServerState] {
        &self.state
    }

    /// The states, once the run is over.
    pub fn into_states(self) -> Vec<ServerState> {
        self.state
    }

    /// Server `id`'s state as an earlier run left it (see
    /// [`Placer`](super::incremental::Placer)).
    pub fn set_state(&mut self, id: ServerId, state: ServerState) {
        self.state[id] = state;
    }

    /// What plugins have written for the request as a whole so far.
    pub fn request_writes(&self) -> RequestWrites {
        let package_ratios = self.package.as_ref().map(|p| {
            [
                p.overprovision_cpu.clone(),
                p.overprovision_ram.clone(),
                p.overprovision_disk.clone(),
                p.overprovision_io.clone(),
                p.overprovision_net.clone(),
            ]
        });
        let vm_locality = (self.vm_locality != self.vm.locality).then(|| self.vm_locality.clone());
        RequestWrites { vm_cpu_cap: self.vm_cpu_cap.clone(), vm_locality, package_ratios }
    }

    /// Puts back what [`Request::request_writes`] took (from a run of the same request).
    pub fn restore_request_writes(&mut self, writes: &RequestWrites) {
        self.vm_cpu_cap = writes.vm_cpu_cap.clone();
        if let Some(locality) = &writes.vm_locality {
            self.vm_locality = locality.clone();
        }
        if let (Some(p), Some([cpu, ram, disk, io, net])) = (self.package.as_mut(), &writes.package_ratios) {
            p.overprovision_cpu = cpu.clone();
            p.overprovision_ram = ram.clone();
            p.overprovision_disk = disk.clone();
            p.overprovision_io = io.clone();
            p.overprovision_net = net.clone();
        }
    }

    /// Direct access for tests that set up a state mid-chain.
    #[cfg(test)]
    pub fn states_mut(&mut self) -> &mut [ServerState] {
        &mut self.state
    }

    /// Writes [`Data::Scores`](super::plugin::Data::Scores).
    pub fn set_score(&mut self, id: ServerId, score: f64) {
        self.state[id].score = score;
    }

    /// Writes [`Data::Unreserved`](super::plugin::Data::Unreserved).
    pub fn set_unreserved(&mut self, id: ServerId, unreserved: Unreserved) {
        self.state[id].unreserved = Some(unreserved);
    }

    /// Writes [`Data::NicNames`](super::plugin::Data::NicNames).
    pub fn name_nics(&mut self, id: ServerId) {
        self.state[id].nics_named = true;
    }

    /// Writes [`Data::Ratios`](super::plugin::Data::Ratios): the server's effective
    /// `overprovision_ratios` (shared: many servers get the same replacement).
    pub fn set_ratios(&mut self, id: ServerId, ratios: Arc<Js>) {
        self.state[id].ratios = Some(ratios);
    }

    /// Writes [`Data::TicketVms`](super::plugin::Data::TicketVms): a VM of an open ticket
    /// on server `id`, and what it adds to the server's zone quotas (term by term, in the
    /// original's order of additions) and KVM zvols.
    pub fn add_ticket_vm(
        &mut self,
        id: ServerId,
        key: &str,
        vm: ServerVm<'static>,
        quota_bytes: &[f64],
        zvol_bytes: f64,
    ) {
        let state = &mut self.state[id];
        state.owner_vms = CountOnce::default();
        for bytes in quota_bytes {
            state.zone_quota_added_bytes += bytes;
        }
        state.kvm_zvol_added_bytes += zvol_bytes;
        state.ticket_vms.push((key.into(), vm));
    }

    /// The request's tickets, then the held ones.
    pub fn all_tickets(&self) -> impl Iterator<Item = &'r Ticket> + 'r {
        self.tickets.iter().chain(self.held_tickets.all())
    }

    /// The tickets whose `String(server_uuid)` is `key`, in [`Request::all_tickets`]'s
    /// order (held ones are found by their server, whose uuid they hold as a string).
    pub fn tickets_of<'k>(&self, key: &'k str) -> impl Iterator<Item = &'k Ticket> + 'k
    where
        'r: 'k,
    {
        let own = self.tickets.iter().filter(move |t| match t.server_uuid.as_str() {
            Some(uuid) => uuid == key,
            None => t.server_uuid.to_js_string() == key,
        });
        own.chain(self.held_tickets.of_server(key))
    }

    /// The package, with its ratios in effect.
    pub fn package(&self) -> Option<&PackageState<'r>> {
        self.package.as_ref()
    }

    /// Replaces the package's ratios (CPU, RAM, disk; I/O and network cleared), as
    /// `override-overprovisioning` does with the configured ones. No package: nothing.
    pub fn set_package_ratios(&mut self, cpu: f64, ram: f64, disk: f64) {
        if let Some(pkg) = self.package.as_mut() {
            pkg.overprovision_cpu = Js::Num(cpu);
            pkg.overprovision_ram = Js::Num(ram);
            pkg.overprovision_disk = Js::Num(disk);
            pkg.overprovision_io = Js::Undefined;
            pkg.overprovision_net = Js::Undefined;
        }
    }

    /// The package to change, for tests that set up a state mid-chain.
    #[cfg(test)]
    pub fn package_mut(&mut self) -> Option<&mut PackageState<'r>> {
        self.package.as_mut()
    }

    /// `vm.cpu_cap` in effect ([`Data::CpuCap`](super::plugin::Data::CpuCap)).
    pub fn vm_cpu_cap(&self) -> &Js {
        &self.vm_cpu_cap
    }

    /// Writes [`Data::CpuCap`](super::plugin::Data::CpuCap).
    pub fn set_vm_cpu_cap(&mut self, cap: Js) {
        self.vm_cpu_cap = cap;
    }

    /// `vm.locality` in effect ([`Data::Locality`](super::plugin::Data::Locality)).
    pub fn vm_locality(&self) -> &Js {
        &self.vm_locality
    }

    /// Writes [`Data::Locality`](super::plugin::Data::Locality).
    pub fn set_vm_locality(&mut self, locality: Js) {
        self.vm_locality = locality;
    }

    /// `String(server.uuid)`: the reasons key for a server.
    pub fn key(&self, id: ServerId) -> ServerKey<'_> {
        ServerKey::new(self.keys(), id)
    }

    /// Every server's reason key (made on first use).
    pub fn keys(&self) -> &Arc<KeyTable> {
        let keys = self.shared.map_or(&self.keys, |s| &s.keys);
        keys.get_or_init(|| Arc::new(KeyTable::new(self.servers)))
    }

    /// The server's effective `overprovision_ratios`.
    pub fn ratios(&self, id: ServerId) -> &Js {
        self.state[id].ratios.as_deref().unwrap_or(&self.servers[id].overprovision_ratios)
    }

    /// The server's VMs: those sent inline, then those added from tickets.
    pub fn vms(&self, id: ServerId) -> impl Iterator<Item = (&str, &ServerVm<'r>)> {
        self.servers[id].inline_vms().chain(self.state[id].ticket_vms.iter().map(|(k, v)| (&**k, v)))
    }

    /// Whether the server has a VM (inline or ticketed) whose `owner_uuid` is `owner`.
    #[inline]
    pub fn hosts_vm_of(&self, id: ServerId, owner: &str) -> bool {
        if self.vm.owner_uuid.as_str().is_some_and(|own| std::ptr::eq(own, owner) || own == owner) {
            return self.vms_of(id, &self.vm.owner_uuid) > 0;
        }
        let server = &self.servers[id];
        // Newest first: VMs placed one after another (a batch, exact capacity) are listed
        // last, and are often the owner's; the answer is the same either way.
        let inline =
            server.vm_summary().may_be_owned_by(owner) && server.inline_vms().rev().any(|(_, vm)| vm.owned_by(owner));
        inline || self.state[id].ticket_vms.iter().any(|(_, vm)| vm.owned_by(owner))
    }

    /// How many of the server's VMs (inline and ticketed) have `owner_uuid === owner`.
    #[inline]
    pub fn vms_of(&self, id: ServerId, owner: &Js) -> usize {
        // The request's own owner is asked about every server, by the spreading and by the
        // owner-zone scorer alike: counted once per server state (which a run that keeps
        // states across placements keeps; a ticket VM added forgets it).
        let own = std::ptr::eq(owner, &self.vm.owner_uuid) || crate::js::strict_eq(owner, &self.vm.owner_uuid);
        if let Some(count) = self.state[id].owner_vms.get().filter(|_| own) {
            return count;
        }
        let count = self.count_vms_of(id, owner);
        if own {
            self.state[id].owner_vms.set(count);
        }
        count
    }

    fn count_vms_of(&self, id: ServerId, owner: &Js) -> usize {
        let server = &self.servers[id];
        let inline = match owner.as_str() {
            Some(o) if !server.vm_summary().may_be_owned_by(o) => 0,
            Some(o) => server.inline_vms().filter(|(_, vm)| vm.owned_by(o)).count(),
            None => server.inline_vms().filter(|(_, vm)| vm.owner_uuid().strict_eq(owner)).count(),
        };
        inline + self.state[id].ticket_vms.iter().filter(|(_, vm)| vm.owner_uuid().strict_eq(owner)).count()
    }

    /// The first of the server's VMs (inline, then ticketed) whose `cpu_cap` is truthy
    /// (`capped`) or not.
    pub fn first_vm_capped(&self, id: ServerId, capped: bool) -> Option<&ServerVm<'r>> {
        let server = &self.servers[id];
        let summary = server.vm_summary();
        match if capped { summary.first_capped } else { summary.first_uncapped } {
            Some(i) => Some(server.inline_vm_at(i as usize)),
            None => self.state[id].ticket_vms.iter().map(|(_, vm)| vm).find(|vm| vm.cpu_cap_pct().truthy() == capped),
        }
    }

    /// `server.vms[uuid]`, looking at inline and ticketed VMs.
    pub fn vm_on(&self, id: ServerId, uuid: &str) -> Option<&ServerVm<'r>> {
        let inline = self.servers[id].vms.as_obj().and_then(|m| m.get(uuid)).map(|v| v.as_obj().unwrap_or(&EMPTY_VM));
        inline.or_else(|| self.state[id].ticket_vms.iter().find(|(k, _)| &**k == uuid).map(|(_, v)| v))
    }

    /// Number of VMs on the server (inline and ticketed).
    pub fn vm_count(&self, id: ServerId) -> usize {
        self.servers[id].inline_vm_count() + self.state[id].ticket_vms.len()
    }

    /// The request's VMs, indexed for affinity and volumes-from look-ups (built on first use,
    /// from the VMs sent inline: ticketed VMs are not visible to look-ups).
    pub fn vm_index(&self) -> VmLookup<'_, 'r> {
        let index = self.shared.map_or(&self.vm_index, |s| &s.vm_index);
        index.get_or_init(|| VmIndex::build(self.servers)).on(self.servers)
    }

    /// The server's unreserved resources as `Js` numbers (`undefined` before they are
    /// calculated), for messages and JS comparisons.
    pub fn unreserved_js(&self, id: ServerId) -> [Js; 3] {
        match self.state[id].unreserved {
            Some(u) => [Js::Num(u.cpu_pct), Js::Num(u.ram_mib), Js::Num(u.disk_mib)],
            None => [Js::Undefined, Js::Undefined, Js::Undefined],
        }
    }
}

/// Plugins check servers on several cores at once, sharing the request.
const _: fn() = || {
    fn shared<T: Sync>() {}
    shared::<Request<'static>>();
};

#[cfg(test)]
mod tests {
    use super::*;

    fn package(text: &str) -> Package {
        serde_json::from_str(text).expect("test package")
    }

    #[test]
    fn massaging_renames_and_defaults_ratios() {
        let p = package("{}");
        let m = PackageState::massage(&p);
        assert_eq!(m.overprovision_ram, Js::Num(1.0));
        let p = package(r#"{"overprovision_memory": "1.5", "overprovision_storage": 1, "overprovision_cpu": "4"}"#);
        let m = PackageState::massage(&p);
        assert_eq!((m.overprovision_cpu.num(), m.overprovision_ram.num(), m.overprovision_disk.num()), (4.0, 1.5, 1.0));
        let p = package(r#"{"overprovision_memory": 0}"#);
        assert_eq!(PackageState::massage(&p).overprovision_ram, Js::Num(1.0));
        let p = package(r#"{"overprovision_network": 2}"#);
        let m = PackageState::massage(&p);
        assert_eq!((m.overprovision_net.clone(), m.overprovision_ram.clone()), (Js::Num(2.0), Js::Undefined));
    }
}
