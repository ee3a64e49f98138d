//! `calculate-ticketed-vms`: counts in-flight provisions. CNAPI does not list a VM until it
//! exists, so every open `vm`/`provision` ticket (queued or active) becomes a VM on its
//! server, and its disk is added to the server's zone quota and zvol totals, so that later
//! capacity checks see it.
//!
//! A ticket without `extra` (from an old VMAPI/CNAPI) makes its server unusable: the server is
//! dropped silently. A ticket whose VM is already on the server is skipped. Where the original
//! throws (a truthy `extra.disks` that is not an array) no zvol is counted.

use indexmap::IndexMap;

use super::shared::unreserved::{is_hvm_brand, GIB};
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::{js_add, Js};
use crate::model::{FullVm, ServerVm, Ticket};

/// Memory the hypervisor itself takes for each HVM guest, MiB (bhyve's matches
/// `BHYVE_MEM_OVERHEAD` in vmadm).
const KVM_MEM_OVERHEAD_MIB: f64 = 1024.0;
const BHYVE_MEM_OVERHEAD_MIB: f64 = 1024.0 + 256.0;

pub struct CalculateTicketedVms;

static DECLARATION: Declaration =
    Declaration::new("calculate-ticketed-vms", Kind::Transform, "Add VMs which have open provisioning tickets")
        .writes(&[Data::TicketVms])
        .per_server();

impl Plugin for CalculateTicketedVms {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let mut kept = Vec::with_capacity(servers.len());
        if servers.len() <= FEW_SERVERS {
            // A few servers (inventory mode runs again those that changed, with thousands
            // of claims as tickets): each one's tickets found by its key rather than every
            // ticket grouped by server. Servers sharing a key each take the ticket, as
            // grouping by key gives it.
            for &id in servers {
                let key = req.key(id).as_str().to_string();
                let theirs: Vec<&Ticket> = req.tickets_of(&key).filter(|t| is_open_provision(t)).collect();
                if theirs.is_empty() || add_ticketed(req, id, &theirs) {
                    kept.push(id);
                }
            }
            return Ok(kept);
        }
        let open = open_tickets(req.all_tickets());
        for &id in servers {
            let Some(tickets) = open.get(req.key(id).as_str()) else {
                kept.push(id);
                continue;
            };
            if add_ticketed(req, id, tickets) {
                kept.push(id);
            }
        }
        Ok(kept)
    }
}

/// Lists of at most this many servers pick their tickets out of the list.
const FEW_SERVERS: usize = 16;

/// Whether the ticket is an open (queued or active) VM provision.
fn is_open_provision(t: &Ticket) -> bool {
    let open = matches!(t.status.as_str(), Some("queued" | "active"));
    t.scope.as_str() == Some("vm") && t.action.as_str() == Some("provision") && open
}

/// Open provision tickets grouped by `String(server_uuid)`, in ticket order.
fn open_tickets<'t>(tickets: impl Iterator<Item = &'t Ticket>) -> IndexMap<String, Vec<&'t Ticket>> {
    let mut by_server: IndexMap<String, Vec<&Ticket>> = IndexMap::new();
    for t in tickets.filter(|t| is_open_provision(t)) {
        by_server.entry(t.server_uuid.to_js_string()).or_default().push(t);
    }
    by_server
}

/// Adds the tickets' VMs to server `id`; false when a ticket without `extra` rules the server
/// out (what was added before it stays, as the original's mutations do).
fn add_ticketed(req: &mut Request<'_>, id: ServerId, tickets: &[&Ticket]) -> bool {
    for ticket in tickets {
        if !ticket.extra.truthy() {
            return false;
        }
        let key = ticket.id.to_js_string();
        if req.vm_on(id, &key).is_some() {
            continue;
        }
        let (mut vm, zvol_gib) = vm_from_ticket(ticket);
        let quota_bytes = vm.quota_gib.num() * GIB;
        let (quota_terms, zvol_bytes) = match vm.brand.as_str() {
            Some("kvm") => ([quota_bytes, 0.0], zvol_gib * GIB),
            Some("bhyve") => {
                // vmadm adds a bhyve VM's zvols to its quota once it exists; do it ahead.
                vm.quota_gib = js_add(&vm.quota_gib, &Js::Num(zvol_gib));
                ([quota_bytes, zvol_gib * GIB], 0.0)
            }
            _ => ([quota_bytes, 0.0], 0.0),
        };
        req.add_ticket_vm(id, &key, ServerVm::from(vm), &quota_terms, zvol_bytes);
    }
    true
}

/// The VM a ticket stands for, and (for HVM brands) its zvols in GiB.
fn vm_from_ticket(ticket: &Ticket) -> (FullVm, f64) {
    let extra = &ticket.extra;
    let mut vm = FullVm {
        uuid: ticket.id.clone(),
        owner_uuid: extra.get("owner_uuid").clone(),
        max_physical_memory_mib: extra.get("max_physical_memory").clone(),
        cpu_cap_pct: extra.get("cpu_cap").clone(),
        quota_gib: extra.get("quota").clone(),
        brand: extra.get("brand").clone(),
        state: Js::str("running"),
        ..FullVm::default()
    };
    let mut zvol_gib = 0.0;
    if is_hvm_brand(&vm.brand) {
        let overhead = if vm.brand.as_str() == Some("kvm") { KVM_MEM_OVERHEAD_MIB } else { BHYVE_MEM_OVERHEAD_MIB };
        vm.max_physical_memory_mib = js_add(&vm.max_physical_memory_mib, &Js::Num(overhead));
        if let Some(disks) = extra.get("disks").as_arr() {
            // Sizes are MiB; the image disk carries only `image_size` and counts 0 here.
            let total = disks.iter().fold(Js::Num(0.0), |acc, disk| {
                let size = disk.get("size");
                js_add(&acc, if size.truthy() { size } else { &Js::Num(0.0) })
            });
            zvol_gib = (total.num() / 1024.0).ceil();
        }
    }
    (vm, zvol_gib)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    const GIB_U: u64 = 1 << 30;

    fn ticket(id: &str, server: &str, status: &str, extra: Value) -> Value {
        let mut t = json!({"uuid": format!("t-{id}"), "id": id, "server_uuid": server, "scope": "vm",
                           "action": "provision", "status": status});
        if !extra.is_null() {
            t["extra"] = extra;
        }
        t
    }

    fn extra(brand: &str, ram: u32, quota: u32, disks: Value) -> Value {
        let mut e =
            json!({"owner_uuid": "o", "max_physical_memory": ram, "cpu_cap": 150, "quota": quota, "brand": brand});
        if !disks.is_null() {
            e["disks"] = disks;
        }
        e
    }

    fn hvm_disks() -> Value {
        json!([{"image_uuid": "i", "image_size": 10240}, {"size": 25600, "refreservation": 25600}])
    }

    fn vm_json(vm: &ServerVm) -> String {
        format!(
            "{} {} {} {} {} {}",
            vm.uuid().stringify(),
            vm.owner_uuid().stringify(),
            vm.max_physical_memory_mib().stringify(),
            vm.cpu_cap_pct().stringify(),
            vm.quota_gib().stringify(),
            vm.brand().stringify()
        )
    }

    /// The original suite, rewritten: closed and non-provision tickets are ignored, a VM
    /// already present is not added twice, a ticket without extra drops its server, and
    /// joyent / kvm / bhyve tickets add their VMs and disk.
    fn five_servers_and_their_tickets() -> Fixture {
        Fixture::new(vec![
            with(server("untouched"), json!({"vms": {"u1": {"owner_uuid": "o", "brand": "kvm"}}})),
            with(server("old"), json!({"vms": {"present": {"owner_uuid": "o", "brand": "joyent"}}})),
            with(server("zone"), json!({"vms": {}})),
            with(server("kvm"), json!({"vms": null})),
            server("bhyve"),
        ])
        .tickets(json!([
            ticket("done", "zone", "finished", extra("smartos", 1024, 25, Value::Null)),
            {"uuid": "t-stop", "id": "stopped", "server_uuid": "zone", "scope": "vm", "action": "stop",
             "status": "queued", "extra": extra("smartos", 256, 20, Value::Null)},
            ticket("present", "old", "queued", extra("smartos", 512, 10, Value::Null)),
            ticket("noextra", "old", "active", Value::Null),
            ticket("z1", "zone", "queued", extra("smartos", 768, 10, Value::Null)),
            ticket("k1", "kvm", "active", extra("kvm", 2048, 10, hvm_disks())),
            ticket("b1", "bhyve", "active", extra("bhyve", 2048, 10, hvm_disks())),
            ticket("elsewhere", "not-in-list", "active", extra("smartos", 1, 1, Value::Null)),
        ]))
    }

    #[test]
    fn adds_open_provisions_and_drops_servers_with_old_tickets() {
        let f = five_servers_and_their_tickets();
        let out = f.run(&CalculateTicketedVms);
        assert_eq!(out.remaining, ["untouched", "zone", "kvm", "bhyve"]);
        assert!(out.reasons.is_empty());
        let st = &out.state;
        assert!(st[0].ticket_vms.is_empty() && st[1].ticket_vms.is_empty());

        assert_eq!(st[2].ticket_vms.len(), 1);
        assert_eq!(&*st[2].ticket_vms[0].0, "z1");
        assert_eq!(vm_json(&st[2].ticket_vms[0].1), r#""z1" "o" 768 150 10 "smartos""#);
        assert_eq!(st[2].ticket_vms[0].1.state().as_str(), Some("running"));
        assert_eq!((st[2].zone_quota_added_bytes, st[2].kvm_zvol_added_bytes), (10.0 * GIB, 0.0));

        assert_eq!(vm_json(&st[3].ticket_vms[0].1), r#""k1" "o" 3072 150 10 "kvm""#);
        assert_eq!((st[3].zone_quota_added_bytes, st[3].kvm_zvol_added_bytes), (10.0 * GIB, 25.0 * GIB));

        assert_eq!(vm_json(&st[4].ticket_vms[0].1), r#""b1" "o" 3328 150 35 "bhyve""#);
        assert_eq!((st[4].zone_quota_added_bytes, st[4].kvm_zvol_added_bytes), (35.0 * GIB, 0.0));
    }

    #[test]
    fn a_few_servers_get_what_they_get_in_the_whole_list() {
        let f = five_servers_and_their_tickets();
        let whole = f.run(&CalculateTicketedVms);
        let mut req = f.request();
        let mut kept = Vec::new();
        for id in 0..5 {
            kept.extend(CalculateTicketedVms.run(&mut req, &[id], &mut Reasons::default()).expect("runs"));
        }
        let keys: Vec<String> = kept.iter().map(|&id| req.key(id).to_string()).collect();
        assert_eq!(keys, whole.remaining);
        for id in 0..5 {
            let (alone, within) = (req.state(id), &whole.state[id]);
            let vms = |s: &crate::engine::ServerState| -> Vec<String> {
                s.ticket_vms.iter().map(|(k, vm)| format!("{k} {}", vm_json(vm))).collect()
            };
            assert_eq!(vms(alone), vms(within), "server {id}");
            assert_eq!(alone.zone_quota_added_bytes, within.zone_quota_added_bytes, "server {id}");
            assert_eq!(alone.kvm_zvol_added_bytes, within.kvm_zvol_added_bytes, "server {id}");
        }
    }

    #[test]
    fn without_tickets_nothing_changes() {
        let out = Fixture::new(vec![server("a"), server("b")]).run(&CalculateTicketedVms);
        assert_eq!(out.remaining, ["a", "b"]);
        assert!(out.state.iter().all(|s| s.ticket_vms.is_empty() && s.zone_quota_added_bytes == 0.0));
    }

    #[test]
    fn ticketed_vms_come_after_inline_ones_and_are_not_added_twice() {
        let f = Fixture::new(vec![with(server("s"), json!({"vms": {"a": {"owner_uuid": "o"}}}))]).tickets(json!([
            ticket("t1", "s", "queued", extra("joyent", 128, 1, Value::Null)),
            ticket("t1", "s", "active", extra("joyent", 256, 2, Value::Null)),
        ]));
        let mut req = f.request();
        let out = crate::plugins::testing::run_on(&mut req, &CalculateTicketedVms);
        assert_eq!(out.remaining, ["s"]);
        let keys: Vec<&str> = req.vms(0).map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "t1"]);
        assert_eq!(req.vm_count(0), 2);
        assert_eq!(req.state(0).zone_quota_added_bytes, GIB);
        // Running it again adds nothing.
        crate::plugins::testing::run_on(&mut req, &CalculateTicketedVms);
        assert_eq!(req.vm_count(0), 2);
    }

    #[test]
    fn a_ticket_without_extra_drops_the_server_after_earlier_ones_applied() {
        let f = Fixture::new(vec![server("s"), server("t")]).tickets(json!([
            ticket("first", "s", "queued", extra("joyent", 128, 3, Value::Null)),
            ticket("bare", "s", "queued", Value::Null),
        ]));
        let out = f.run(&CalculateTicketedVms);
        assert_eq!(out.remaining, ["t"]);
        assert!(out.reasons.is_empty());
        assert_eq!(out.state[0].ticket_vms.len(), 1);
        assert_eq!(out.state[0].zone_quota_added_bytes, 3.0 * GIB_U as f64);
    }

    #[test]
    fn hvm_disk_sizes_round_up_to_gib_and_missing_disks_count_zero() {
        let f = Fixture::new(vec![server("k"), server("n")]).tickets(json!([
            ticket("k1", "k", "queued", extra("kvm", 1024, 0, json!([{"size": 1}, {"size": 1024}, {}]))),
            ticket("n1", "n", "queued", extra("kvm", 1024, 0, Value::Null)),
        ]));
        let out = f.run(&CalculateTicketedVms);
        assert_eq!(out.state[0].kvm_zvol_added_bytes, 2.0 * GIB);
        assert_eq!(out.state[1].kvm_zvol_added_bytes, 0.0);
        assert_eq!(out.state[1].ticket_vms[0].1.max_physical_memory_mib().num(), 2048.0);
    }
}
