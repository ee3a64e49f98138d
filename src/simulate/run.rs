//! One chain run over the whole workload: every creation allocated with the engine on the
//! datacenter as it is at that moment, every destruction taken off its server.
//!
//! The datacenter is parsed once into an engine [`Datacenter`]; a placed VM is listed on its
//! server with [`Datacenter::add_vm`] and a destroyed one unlisted with
//! [`Datacenter::remove_vm`], so each placement costs one engine run, not a re-read of the
//! servers. With `--concurrency K` the last K−1 placements are still in flight when the next
//! VM is allocated: they are open provisioning tickets (as CNAPI passes them), not yet VMs on
//! their servers, and are listed once K−1 newer ones have started (or when destroyed first,
//! dropped).

use std::collections::VecDeque;
use std::time::Instant;

use serde_json::json;

use super::datacenter::rack_and_host;
use super::workload::{EventKind, SimVm, Workload};
use crate::engine::{Datacenter, Engine, ProvisionedVm, ServerId, Unreserved, VmRequest};
use crate::js::Js;
use crate::model::{Image, RawParams, Server, Ticket, VmPayload};
use crate::outcome::failure_reason;

const MIB: f64 = 1_048_576.0;

/// What happened to a workload VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Its creation was not reached (or it was skipped).
    NotCreated,
    Placed(ServerId),
    Failed,
}

/// The first creation that found no server.
#[derive(Debug, Clone)]
pub struct FirstFailure {
    /// Its event's number (from 0).
    pub event: usize,
    pub vm: usize,
    pub reason: String,
}

/// The datacenter's state after an event, sampled for the over-time charts.
#[derive(Debug, Clone, Copy)]
pub struct TimePoint {
    /// Events done.
    pub events: usize,
    pub placed: usize,
    pub failed: usize,
    /// VMs on servers (and in flight).
    pub live: usize,
    /// RAM of the VMs over the usable RAM of every server, percent.
    pub ram_pct: f64,
}

/// One server at the end.
#[derive(Debug, Clone)]
pub struct ServerEnd {
    pub uuid: String,
    pub hostname: String,
    pub rack: String,
    pub vms: usize,
    /// RAM of its VMs (MiB) and what they may use: total × (1 − reservation_ratio).
    pub ram_used: f64,
    pub ram_total: f64,
    /// Zone quotas and KVM volumes (MiB) and the pool's size.
    pub disk_used: f64,
    pub disk_total: f64,
    /// CPU caps (percent of one core) and the cores × 100.
    pub cpu_used: f64,
    pub cpu_total: f64,
    /// RAM of its VMs per RAM class (the report's classes, the last one for all others).
    pub ram_by_class: Vec<f64>,
    /// VMs per owner on this server.
    pub owners: Vec<(String, usize)>,
    /// What the chain's capacity pass sees free; `None` when it leaves the server out.
    pub free: Option<Unreserved>,
    /// When no VM of the workload fits any more (as `dapi capacity` counts it): for RAM,
    /// CPU and disk, whether it was what some VM lacked. `None` when one still fits.
    pub stranding: Option<[bool; 3]>,
}

/// A chain's whole run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub fates: Vec<Fate>,
    pub placed: usize,
    pub failed: usize,
    pub destroyed: usize,
    /// Destructions of VMs not on any server (their creation failed).
    pub destroy_ignored: usize,
    /// Creations of VMs the datacenter dump lists already (not allocated again).
    pub already_listed: usize,
    pub first_failure: Option<FirstFailure>,
    /// Each placement's engine time, microseconds, in event order.
    pub decision_us: Vec<f64>,
    pub timeline: Vec<TimePoint>,
    pub servers: Vec<ServerEnd>,
}

/// A provision in flight: its VM, server and listing, and the ticket the engine reads.
struct InFlight {
    vm: usize,
    server: ServerId,
    listed: ProvisionedVm,
}

/// What a server's VMs add up to, and the VM's RAM per class.
fn server_end(server: &Server<'_>, raw: &str, classes: &[f64]) -> ServerEnd {
    let (rack, hostname) = rack_and_host(raw);
    let mut end = ServerEnd {
        uuid: server.reason_key(),
        hostname,
        rack,
        vms: server.inline_vm_count(),
        ram_used: 0.0,
        ram_total: finite(server.memory_total_bytes.num() / MIB * (1.0 - finite(server.reservation_ratio.num()))),
        disk_used: (finite(server.disk_zone_quota_bytes.num()) + finite(server.disk_kvm_zvol_volsize_bytes.num()))
            / MIB,
        disk_total: finite(server.disk_pool_size_bytes.num()) / MIB,
        cpu_used: 0.0,
        cpu_total: finite(server.sysinfo().cpu_total_cores.num()) * 100.0,
        ram_by_class: vec![0.0; classes.len() + 1],
        owners: Vec::new(),
        free: None,
        stranding: None,
    };
    let mut owners: std::collections::BTreeMap<String, usize> = Default::default();
    for (_, vm) in server.inline_vms() {
        let load = vm.load();
        if load.failed {
            continue;
        }
        let ram = finite(load.ram_mib);
        end.ram_used += ram;
        end.cpu_used += load.cpu_cap.map_or(0.0, finite);
        let class = classes.iter().position(|c| *c == ram).unwrap_or(classes.len());
        end.ram_by_class[class] += ram;
        if let Some(owner) = vm.owner_uuid().as_str() {
            *owners.entry(owner.to_string()).or_default() += 1;
        }
    }
    end.owners = owners.into_iter().collect();
    end
}

fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// Options of a run.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub seed: u64,
    /// Provisions in flight at once (at least 1).
    pub concurrency: usize,
    /// Points of the over-time series.
    pub samples: usize,
    /// Keep each server's JSON current (rewritten at every change) for plugins that read it.
    pub keep_json: bool,
}

/// Runs `engine` over the workload on the servers of `text` (already checked readable).
pub fn run(
    engine: &Engine,
    text: &str,
    workload: &Workload,
    classes: &[f64],
    options: RunOptions,
) -> Result<RunResult, String> {
    let (raw, servers) = crate::wire::parse_capacity_body(text.as_bytes()).map_err(|e| format!("{e:?}"))?;
    let raw_copy = raw.clone();
    // Rewriting a server's JSON at each change costs more than the change: only for chains
    // that read it.
    let mut dc = Datacenter::new(servers, if options.keep_json { raw } else { Vec::new() });
    let image = Image::default();
    let concurrency = options.concurrency.max(1);

    let mut ram_used: f64 = 0.0;
    let mut ram_total: f64 = 0.0;
    for s in dc.servers() {
        ram_total += finite(s.memory_total_bytes.num() / MIB * (1.0 - finite(s.reservation_ratio.num())));
        ram_used +=
            s.inline_vms().map(|(_, vm)| vm.load()).filter(|l| !l.failed).map(|l| finite(l.ram_mib)).sum::<f64>();
    }
    let mut live = dc.servers().iter().map(Server::inline_vm_count).sum::<usize>();
    // VMs the dump's servers list already: a workload dump taken with them holds their
    // creations too, which are not placed again.
    let listed: std::collections::HashMap<String, ServerId> = dc
        .servers()
        .iter()
        .enumerate()
        .flat_map(|(id, s)| s.inline_vms().map(move |(uuid, _)| (uuid.to_string(), id)))
        .collect();

    let mut fates = vec![Fate::NotCreated; workload.vms.len()];
    let mut placed_ram = vec![0.0; workload.vms.len()];
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut tickets: Vec<Ticket> = Vec::new();
    // Their JSON texts, in the same order (custom plugins see `opts.tickets`).
    let mut ticket_texts: Vec<String> = Vec::new();
    let mut result = RunResult {
        fates: Vec::new(),
        placed: 0,
        failed: 0,
        destroyed: 0,
        destroy_ignored: 0,
        already_listed: 0,
        first_failure: None,
        decision_us: Vec::with_capacity(workload.vms.len()),
        timeline: Vec::new(),
        servers: Vec::new(),
    };
    let every = workload.events.len().div_ceil(options.samples.max(1)).max(1);

    let complete = |dc: &mut Datacenter<'_>, f: InFlight| -> Result<(), String> {
        dc.add_vm(f.server, f.listed).map_err(|e| e.to_string())
    };

    for (n, event) in workload.events.iter().enumerate() {
        let sim = &workload.vms[event.vm];
        match event.kind {
            EventKind::Create if listed.contains_key(&sim.uuid) => {
                fates[event.vm] = listed.get(&sim.uuid).map_or(Fate::NotCreated, |id| Fate::Placed(*id));
                result.already_listed += 1;
            }
            EventKind::Create => {
                while in_flight.len() >= concurrency {
                    if let Some(f) = in_flight.pop_front() {
                        tickets.remove(0);
                        ticket_texts.remove(0);
                        complete(&mut dc, f)?;
                    }
                }
                let vm = VmPayload {
                    vm_uuid: Js::str(&sim.uuid),
                    owner_uuid: sim.owner.as_deref().map_or(Js::Undefined, Js::str),
                    ..sim.sized_payload()
                };
                let package = sim.package(workload);
                let (vm_text, package_text) = sim.texts(workload);
                let tickets_text = format!("[{}]", ticket_texts.join(","));
                let request = VmRequest {
                    vm: &vm,
                    image: &image,
                    package: Some(&package),
                    tickets: &tickets,
                    seed: Some(options.seed.wrapping_add(n as u64)),
                    raw: RawParams {
                        vm: Some(&vm_text),
                        image: None,
                        package: Some(&package_text),
                        tickets: Some(&tickets_text),
                    },
                };
                let started = Instant::now();
                let placement = engine.allocate_in(&dc, &request).map_err(|e| e.to_string())?;
                result.decision_us.push(started.elapsed().as_secs_f64() * 1e6);
                match placement.allocation.chosen {
                    Some(id) => {
                        let listed = ProvisionedVm::of(&sim.uuid, &request, &placement.cpu_cap);
                        fates[event.vm] = Fate::Placed(id);
                        result.placed += 1;
                        live += 1;
                        let ram = finite(listed.vm.max_physical_memory_mib.num());
                        placed_ram[event.vm] = ram;
                        ram_used += ram;
                        if concurrency == 1 {
                            dc.add_vm(id, listed).map_err(|e| e.to_string())?;
                        } else {
                            let (typed, text) = ticket(sim, &listed, &dc.servers()[id].uuid);
                            tickets.push(typed);
                            ticket_texts.push(text);
                            in_flight.push_back(InFlight { vm: event.vm, server: id, listed });
                        }
                    }
                    None => {
                        fates[event.vm] = Fate::Failed;
                        result.failed += 1;
                        if result.first_failure.is_none() {
                            result.first_failure = Some(FirstFailure {
                                event: n,
                                vm: event.vm,
                                reason: failure_reason(&placement.allocation.steps),
                            });
                        }
                    }
                }
            }
            EventKind::Destroy => {
                if let Some(pos) = in_flight.iter().position(|f| f.vm == event.vm) {
                    in_flight.remove(pos);
                    tickets.remove(pos);
                    ticket_texts.remove(pos);
                    ram_used -= placed_ram[event.vm];
                    live -= 1;
                    result.destroyed += 1;
                } else if let Some(id) = dc.server_of(&sim.uuid) {
                    let ram = dc.servers()[id]
                        .inline_vms()
                        .find(|(k, _)| *k == sim.uuid)
                        .map(|(_, vm)| vm.load())
                        .filter(|l| !l.failed)
                        .map_or(0.0, |l| finite(l.ram_mib));
                    dc.remove_vm(&sim.uuid);
                    ram_used -= ram;
                    live -= 1;
                    result.destroyed += 1;
                } else {
                    result.destroy_ignored += 1;
                }
            }
        }
        if (n + 1) % every == 0 || n + 1 == workload.events.len() {
            result.timeline.push(TimePoint {
                events: n + 1,
                placed: result.placed,
                failed: result.failed,
                live,
                ram_pct: if ram_total > 0.0 { 100.0 * ram_used / ram_total } else { 0.0 },
            });
        }
    }
    while let Some(f) = in_flight.pop_front() {
        complete(&mut dc, f)?;
    }

    let capacity = engine.capacity(dc.servers()).map_err(|e| e.to_string())?;
    let mut servers: Vec<ServerEnd> =
        dc.servers().iter().zip(&raw_copy).map(|(s, raw)| server_end(s, raw, classes)).collect();
    for (id, free) in capacity.servers {
        servers[id].free = Some(free);
    }
    for (id, short) in stranding(engine, dc.servers(), workload, &image) {
        servers[id].stranding = Some(short);
    }
    result.servers = servers;
    result.fates = fates;
    Ok(result)
}

/// A kind of VM as a stranding count tells them apart: its package, its RAM and quota (as
/// bits), its CPU cap, its brand.
type VmKind<'w> = (Option<usize>, [u64; 2], Option<u64>, &'w str);

fn kind(v: &SimVm) -> VmKind<'_> {
    (v.package, [v.ram_mib.to_bits(), v.quota_gib.to_bits()], v.cpu_cap.map(f64::to_bits), v.brand.as_str())
}

/// The servers where no VM of the workload fits any more, counted as `dapi capacity`
/// counts a package (the chain's rules and ratios), with the dimensions some VM lacked.
fn stranding(
    engine: &Engine,
    servers: &[Server<'_>],
    workload: &Workload,
    image: &Image,
) -> Vec<(ServerId, [bool; 3])> {
    // One count per kind of VM, counted for one VM of that kind.
    let mut kinds: Vec<&SimVm> = workload.vms.iter().collect();
    kinds.sort_unstable_by_key(|v| kind(v));
    kinds.dedup_by_key(|v| kind(v));
    let mut fits = vec![false; servers.len()];
    let mut short = vec![[false; 3]; servers.len()];
    let mut counted = vec![false; servers.len()];
    for vm in kinds {
        let (counts, _) = crate::capacity::analytic(engine, servers, &vm.package(workload), &vm.sized_payload(), image);
        for (id, slots) in counts {
            counted[id] = true;
            if slots.slots >= 1.0 {
                fits[id] = true;
                continue;
            }
            match slots.limiting.trim_end_matches("_ratio") {
                "ram" => short[id][0] = true,
                "cpu" => short[id][1] = true,
                "disk" => short[id][2] = true,
                _ => {}
            }
        }
    }
    (0..servers.len()).filter(|&id| counted[id] && !fits[id]).map(|id| (id, short[id])).collect()
}

/// The open provisioning ticket of a VM in flight, as CNAPI's waitlist holds it (RAM as
/// asked: the ticket reader adds the hypervisor's share of HVM brands itself).
fn ticket(sim: &SimVm, listed: &ProvisionedVm, server_uuid: &Js) -> (Ticket, String) {
    let extra = json!({
        "owner_uuid": sim.owner,
        "max_physical_memory": sim.ram_mib,
        "cpu_cap": serde_json::to_value(&listed.vm.cpu_cap_pct).unwrap_or_default(),
        "quota": sim.quota_gib,
        "brand": sim.brand,
    });
    let ticket = Ticket {
        uuid: Js::str(&format!("sim-ticket-{}", listed.uuid)),
        id: Js::str(&listed.uuid),
        server_uuid: server_uuid.clone(),
        scope: Js::str("vm"),
        action: Js::str("provision"),
        status: Js::str("active"),
        extra: Js::from_json(&extra),
    };
    let text = crate::js::json::stringify(&json!({
        "uuid": ticket.uuid.to_json(),
        "id": ticket.id.to_json(),
        "server_uuid": ticket.server_uuid.to_json(),
        "scope": "vm",
        "action": "provision",
        "status": "active",
        "extra": extra,
    }));
    (ticket, text)
}
