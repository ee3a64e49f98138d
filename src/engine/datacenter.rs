//! A datacenter that VMs are placed into one after another.
//!
//! A single allocation reads the request and leaves it as it was. Placing many VMs (a batch,
//! the simulator) needs each placement to see the ones before it, without the request being
//! read again: the [`Datacenter`] owns the parsed servers, and once a server is chosen it
//! lists the VM there as CNAPI lists a provisioned one ([`Datacenter::add_vm`]): an entry
//! of the server's `vms` (after the others, so unreserved resources, owner zone counts,
//! capness and VM counts see it), its quota in `disk_zone_quota_bytes` (and, for KVM, its
//! root disk in `disk_kvm_zvol_volsize_bytes`), and an entry of the VM look-ups affinity and
//! locality read. The next allocation is then what the same datacenter sent again with
//! the VM inline would give. [`Datacenter::remove_vm`] is the inverse.
//!
//! Only what plugins read changes: `memory_available_bytes` and the pool's allocation
//! follow from real use, which a just provisioned VM has not made yet.

use std::borrow::Cow;
use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::context::{Lookups, Request};
use super::plugin::PluginError;
use super::{select, Allocation, Engine, ServerId};
use crate::fxhash::FxBuild;
use crate::js::Js;
use crate::model::{FullVm, Image, Package, RawParams, Server, ServerVm, Ticket, VmPayload};

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;
/// Memory the hypervisor takes for each HVM guest on top of its RAM, MiB, as vmadm counts it
/// in `max_physical_memory` (the same figures as for a ticketed VM).
const KVM_MEM_OVERHEAD_MIB: f64 = 1024.0;
const BHYVE_MEM_OVERHEAD_MIB: f64 = 1024.0 + 256.0;

/// What one placement asks for: the VM and what comes with it.
#[derive(Debug, Clone, Copy)]
pub struct VmRequest<'r> {
    pub vm: &'r VmPayload,
    pub image: &'r Image,
    pub package: Option<&'r Package>,
    pub tickets: &'r [Ticket],
    /// Seed of `score-uniform-random` (else the configured one, else entropy).
    pub seed: Option<u64>,
    /// The JSON texts of the above, for custom plugins' `opts` (what is absent they see as
    /// in a request without it).
    pub raw: RawParams<'r>,
}

/// A placed VM as its server lists it, and what it adds to the server's disk figures.
#[derive(Debug, Clone)]
pub struct ProvisionedVm {
    pub uuid: String,
    pub vm: FullVm,
    /// Added to `disk_zone_quota_bytes`.
    pub quota_bytes: f64,
    /// Added to `disk_kvm_zvol_volsize_bytes` (a KVM VM's root disk).
    pub zvol_bytes: f64,
}

impl ProvisionedVm {
    /// The VM `uuid` of `request` as listed once running: RAM (the VM's, else the
    /// package's, plus the hypervisor's share for HVM brands), quota (the VM's in GiB, else
    /// the package's), the CPU cap in effect (`cpu_cap`: the VM's, else the package's as
    /// `hard-filter-min-cpu` copies it), brand, owner, alias, tags and metadata.
    pub fn of(uuid: &str, request: &VmRequest<'_>, cpu_cap: &Js) -> ProvisionedVm {
        let vm = request.vm;
        let package = request.package;
        let ram = if vm.ram_mib.truthy() {
            vm.ram_mib.num()
        } else {
            package.map_or(f64::NAN, |p| p.max_physical_memory_mib.num())
        };
        let overhead = match vm.brand.as_str() {
            Some("kvm") => KVM_MEM_OVERHEAD_MIB,
            Some("bhyve") => BHYVE_MEM_OVERHEAD_MIB,
            _ => 0.0,
        };
        let quota_gib = if vm.quota_gib.truthy() {
            vm.quota_gib.num()
        } else {
            package.map_or(0.0, |p| if p.quota_mib.truthy() { p.quota_mib.num() / 1024.0 } else { 0.0 })
        };
        let root_mib = request.image.image_size_mib.num();
        let zvol_bytes = if vm.brand.as_str() == Some("kvm") && root_mib.is_finite() { root_mib * MIB } else { 0.0 };
        let cap = if cpu_cap.truthy() { Js::Num(cpu_cap.num()) } else { Js::Undefined };
        ProvisionedVm {
            uuid: uuid.to_string(),
            vm: FullVm {
                uuid: Js::str(uuid),
                owner_uuid: vm.owner_uuid.clone(),
                brand: vm.brand.clone(),
                state: Js::str("running"),
                max_physical_memory_mib: Js::Num(ram + overhead),
                quota_gib: Js::Num(quota_gib),
                cpu_cap_pct: cap,
                alias: vm.alias.clone(),
                tags: vm.tags.clone(),
                internal_metadata: vm.internal_metadata.clone(),
                docker: vm.docker.clone(),
                placed: true,
            },
            quota_bytes: quota_gib * GIB,
            zvol_bytes,
        }
    }
}

impl ProvisionedVm {
    /// The VM's entry in its server's `vms`, as CNAPI lists it (fields it lacks left out).
    pub fn to_json(&self) -> serde_json::Value {
        let f = &self.vm;
        let mut entry = serde_json::Map::new();
        let fields: [(&str, &Js); 11] = [
            ("uuid", &f.uuid),
            ("owner_uuid", &f.owner_uuid),
            ("brand", &f.brand),
            ("state", &f.state),
            ("max_physical_memory", &f.max_physical_memory_mib),
            ("quota", &f.quota_gib),
            ("cpu_cap", &f.cpu_cap_pct),
            ("alias", &f.alias),
            ("tags", &f.tags),
            ("internal_metadata", &f.internal_metadata),
            ("docker", &f.docker),
        ];
        for (name, value) in fields {
            if !value.is_undefined() {
                entry.insert(name.into(), serde_json::to_value(value).unwrap_or(serde_json::Value::Null));
            }
        }
        serde_json::Value::Object(entry)
    }
}

/// Why a VM could not be listed or unlisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatacenterError {
    NoSuchServer(ServerId),
    /// The server lists a VM with that uuid already.
    AlreadyThere {
        uuid: String,
        server: ServerId,
    },
}

impl std::fmt::Display for DatacenterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatacenterError::NoSuchServer(id) => write!(f, "no server {id}"),
            DatacenterError::AlreadyThere { uuid, server } => write!(f, "VM {uuid} is on server {server} already"),
        }
    }
}

impl std::error::Error for DatacenterError {}

/// What listing a VM added to its server's figures, to take back.
#[derive(Debug, Clone, Copy)]
struct Added {
    server: ServerId,
    quota_bytes: f64,
    zvol_bytes: f64,
}

/// The servers, owned, with the VMs placed so far listed on them.
#[derive(Debug)]
pub struct Datacenter<'a> {
    servers: Vec<Server<'a>>,
    /// Each server's JSON as received (owner filters read it); may be empty.
    raw_servers: Vec<&'a str>,
    /// The JSON of servers whose VMs changed, as CNAPI would now send it.
    rewritten: HashMap<ServerId, String>,
    lookups: Lookups,
    /// VMs listed by [`Datacenter::add_vm`], by uuid.
    added: HashMap<String, Added, FxBuild>,
}

impl<'a> Datacenter<'a> {
    /// The servers and (when the caller has it) each one's JSON text, in the same order.
    pub fn new(servers: Vec<Server<'a>>, raw_servers: Vec<&'a str>) -> Datacenter<'a> {
        let raw_servers = if raw_servers.len() == servers.len() { raw_servers } else { Vec::new() };
        Datacenter {
            servers,
            raw_servers,
            rewritten: HashMap::new(),
            lookups: Lookups::default(),
            added: HashMap::default(),
        }
    }

    /// Each server's JSON as CNAPI would send it now (empty when it was not given).
    pub fn raw_servers(&self) -> Vec<&str> {
        if self.rewritten.is_empty() {
            return self.raw_servers.clone();
        }
        (0..self.raw_servers.len())
            .map(|id| self.rewritten.get(&id).map_or(self.raw_servers[id], String::as_str))
            .collect()
    }

    /// Rewrites server `id`'s JSON: `vm` listed under `uuid` (or unlisted when `None`), and
    /// its disk figures as the typed server now has them.
    fn rewrite_json(&mut self, id: ServerId, uuid: &str, vm: Option<serde_json::Value>) {
        let Some(&raw) = self.raw_servers.get(id) else { return };
        let text = self.rewritten.get(&id).map_or(raw, String::as_str);
        let Ok(serde_json::Value::Object(mut server)) = crate::js::json::from_str::<serde_json::Value>(text) else {
            return;
        };
        match vm {
            Some(vm) => {
                let vms = server.entry("vms").or_insert_with(|| serde_json::Value::Object(Default::default()));
                if !vms.is_object() {
                    *vms = serde_json::Value::Object(Default::default());
                }
                if let Some(map) = vms.as_object_mut() {
                    map.insert(uuid.into(), vm);
                }
            }
            None => {
                if let Some(map) = server.get_mut("vms").and_then(serde_json::Value::as_object_mut) {
                    map.shift_remove(uuid);
                }
            }
        }
        let typed = &self.servers[id];
        for (name, value) in [
            ("disk_zone_quota_bytes", &typed.disk_zone_quota_bytes),
            ("disk_kvm_zvol_volsize_bytes", &typed.disk_kvm_zvol_volsize_bytes),
        ] {
            if !value.is_undefined() {
                server.insert(name.into(), serde_json::to_value(value).unwrap_or(serde_json::Value::Null));
            }
        }
        if let Ok(text) = serde_json::to_string(&server) {
            self.rewritten.insert(id, text);
        }
    }

    /// The look-ups kept across the allocations run on the datacenter.
    pub fn lookups(&self) -> &Lookups {
        &self.lookups
    }

    pub fn servers(&self) -> &[Server<'a>] {
        &self.servers
    }

    /// Lists `vm` on server `id`, after its other VMs, and adds its disk to the server's.
    pub fn add_vm(&mut self, id: ServerId, vm: ProvisionedVm) -> Result<(), DatacenterError> {
        let server = self.servers.get_mut(id).ok_or(DatacenterError::NoSuchServer(id))?;
        let present = server.vms.as_obj().is_some_and(|m| m.get(&vm.uuid).is_some());
        if present {
            return Err(DatacenterError::AlreadyThere { uuid: vm.uuid, server: id });
        }
        add_bytes(&mut server.disk_zone_quota_bytes, vm.quota_bytes);
        add_bytes(&mut server.disk_kvm_zvol_volsize_bytes, vm.zvol_bytes);
        let json = (!self.raw_servers.is_empty()).then(|| vm.to_json());
        let ProvisionedVm { uuid, vm: fields, quota_bytes, zvol_bytes } = vm;
        server.add_new_vm(Cow::Owned(uuid.clone()), ServerVm::from(fields));
        if let Some(index) = self.lookups.vm_index.get_mut() {
            index.insert(&self.servers, id);
        }
        if let Some(json) = json {
            self.rewrite_json(id, &uuid, Some(json));
        }
        self.added.insert(uuid, Added { server: id, quota_bytes, zvol_bytes });
        Ok(())
    }

    /// Unlists the VM `uuid` (one placed here, else the first server sent with it) and
    /// takes its disk back off the server's figures; the server it was on, if any.
    pub fn remove_vm(&mut self, uuid: &str) -> Option<ServerId> {
        let added = match self.added.remove(uuid) {
            Some(added) => added,
            None => {
                let id = self.servers.iter().position(|s| s.vms.as_obj().is_some_and(|m| m.get(uuid).is_some()))?;
                let quota = self.servers[id].vms.as_obj().and_then(|m| m.get(uuid)).and_then(|v| v.as_obj());
                let quota_gib = quota.map_or(0.0, |vm| vm.quota_gib().num());
                let quota_bytes = if quota_gib.is_finite() { quota_gib * GIB } else { 0.0 };
                Added { server: id, quota_bytes, zvol_bytes: 0.0 }
            }
        };
        if let Some(index) = self.lookups.vm_index.get_mut() {
            index.remove(&self.servers, added.server, uuid);
        }
        let server = &mut self.servers[added.server];
        server.remove_vm(uuid)?;
        add_bytes(&mut server.disk_zone_quota_bytes, -added.quota_bytes);
        add_bytes(&mut server.disk_kvm_zvol_volsize_bytes, -added.zvol_bytes);
        if !self.raw_servers.is_empty() {
            self.rewrite_json(added.server, uuid, None);
        }
        Some(added.server)
    }

    /// The server listing VM `uuid`, if any.
    pub fn server_of(&self, uuid: &str) -> Option<ServerId> {
        match self.added.get(uuid) {
            Some(a) => Some(a.server),
            None => self.servers.iter().position(|s| s.vms.as_obj().is_some_and(|m| m.get(uuid).is_some())),
        }
    }
}

/// A byte figure grown (or shrunk) by `bytes`; a figure that was not a number becomes one,
/// as CNAPI reports it.
fn add_bytes(field: &mut Js, bytes: f64) {
    if bytes != 0.0 {
        *field = Js::Num(field.num() + bytes);
    }
}

/// One placement's outcome: the allocation, and the VM as it is listed if it was placed.
#[derive(Debug)]
pub struct Placement {
    pub allocation: Allocation,
    /// The CPU cap in effect at the end of the run (the package's when the VM had none).
    pub cpu_cap: Js,
}

impl Engine {
    /// Runs the description for `request` on the datacenter as it is now (nothing changes).
    pub fn allocate_in(&self, dc: &Datacenter<'_>, request: &VmRequest<'_>) -> Result<Placement, PluginError> {
        let input: Vec<ServerId> = (0..dc.servers.len()).collect();
        self.allocate_among(dc, request, input)
    }

    /// [`Engine::allocate_in`] given only the servers of `input` (a caller that knows the
    /// others would be removed before anything compares servers, e.g. exact capacity).
    pub fn allocate_among(
        &self,
        dc: &Datacenter<'_>,
        request: &VmRequest<'_>,
        input: Vec<ServerId>,
    ) -> Result<Placement, PluginError> {
        let seed = request.seed.or(self.defaults.seed);
        let rng = match seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_entropy(),
        };
        let mut req =
            Request::new(&dc.servers, request.vm, request.image, request.package, request.tickets, &self.defaults, rng);
        req.share_lookups(&dc.lookups);
        req.raw_params = request.raw;
        let raw_servers = dc.raw_servers();
        req.raw_servers = &raw_servers;
        let mut steps = Vec::new();
        let survivors = self.chain.run(&mut req, input, &mut steps)?;
        let chosen = select(&survivors, req.states());
        let cpu_cap = req.vm_cpu_cap().clone();
        Ok(Placement { allocation: Allocation { chosen, steps, state: req.into_states(), notes: Vec::new() }, cpu_cap })
    }

    /// [`Engine::allocate_in`], then the VM (as `uuid`) listed on the chosen server.
    pub fn place(
        &self,
        dc: &mut Datacenter<'_>,
        request: &VmRequest<'_>,
        uuid: &str,
    ) -> Result<Allocation, PlaceError> {
        let input: Vec<ServerId> = (0..dc.servers.len()).collect();
        self.place_among(dc, request, uuid, input)
    }

    /// [`Engine::place`] given only the servers of `input` (see [`Engine::allocate_among`]).
    pub fn place_among(
        &self,
        dc: &mut Datacenter<'_>,
        request: &VmRequest<'_>,
        uuid: &str,
        input: Vec<ServerId>,
    ) -> Result<Allocation, PlaceError> {
        let placement = self.allocate_among(dc, request, input).map_err(PlaceError::Engine)?;
        if let Some(id) = placement.allocation.chosen {
            let vm = ProvisionedVm::of(uuid, request, &placement.cpu_cap);
            dc.add_vm(id, vm).map_err(PlaceError::Datacenter)?;
        }
        Ok(placement.allocation)
    }
}

/// Why [`Engine::place`] failed.
#[derive(Debug)]
pub enum PlaceError {
    Engine(PluginError),
    Datacenter(DatacenterError),
}

impl std::fmt::Display for PlaceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlaceError::Engine(e) => write!(f, "{e}"),
            PlaceError::Datacenter(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PlaceError {}
