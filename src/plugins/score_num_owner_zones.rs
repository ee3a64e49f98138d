//! `score-num-owner-zones`: counts the requesting owner's VMs on each server and adds
//! position-based increments (`linear`), so that with a positive weight servers hosting
//! fewer of the owner's VMs score higher (spreading an owner's VMs).
//!
//! The deprecated spread `min-owner` forces weight 2; any other spread set switches this
//! scorer off. Reasons end with `; N owner zones found`. VMs added from tickets count; a
//! server without `vms` (the original throws) counts 0 VMs.

use indexmap::IndexMap;

use super::shared::scoring::{self, linear};
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct ScoreNumOwnerZones;

static DECLARATION: Declaration = Declaration::new(
    "score-num-owner-zones",
    Kind::Scorer,
    "Score servers based on number of zones belonging to owner",
)
.reads(&[Data::TicketVms])
.writes(&[Data::Scores]);

impl Plugin for ScoreNumOwnerZones {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let Some(weight) = weight(req, reasons) else {
            return Ok(servers.to_vec());
        };

        let owner = &req.vm.owner_uuid;
        let counts: Vec<(ServerId, u32)> = servers.iter().map(|&id| (id, req.vms_of(id, owner) as u32)).collect();
        // Per reasons key; a repeated key keeps the later server's count, as in the original.
        let mut found: IndexMap<String, u32> = IndexMap::new();
        for &(id, count) in &counts {
            found.insert(req.key(id).to_string(), count);
        }

        if req.explaining() {
            for &(id, count) in &counts {
                req.note_raw(id, count.into());
            }
        }
        let keys: Vec<f64> = counts.iter().map(|c| f64::from(c.1)).collect();
        let mut order: Vec<ServerId> = counts.iter().map(|&(id, _)| id).collect();
        req.sort_by_scaled(&mut order, &keys, weight);
        linear(req, &order, weight.abs(), reasons)?;

        for (key, count) in found {
            let message = format!("{}; {count} owner zones found", reasons.get(&key).unwrap_or("undefined"));
            reasons.set(key, message);
        }
        Ok(servers.to_vec())
    }

    /// The increments hold while the sort by the owner's VM counts keeps its order.
    fn unchanged_by(&self, req: &mut Request<'_>, servers: &[ServerId], _: &[ServerId], changed: &[ServerId]) -> bool {
        let Some(weight) = weight(req, &mut Reasons::discarding()) else { return true };
        req.kept_order_holds(servers, changed, weight, |req, id| req.vms_of(id, &req.vm.owner_uuid) as f64)
    }
}

/// The weight in force, or `None` when the scorer skips (the reason written).
fn weight(req: &Request<'_>, reasons: &mut Reasons) -> Option<f64> {
    let configured = &req.defaults.weight_num_owner_zones;
    scoring::weight_in_force(req, reasons, "min-owner", configured, "Resolved score weight to 0.00; no changes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{run_on, server, with, Fixture, Outcome};
    use serde_json::{json, Map, Value};

    const OWNER: &str = "e6667010-7831-462f-ba1f-e345f8288106";
    const OTHER: &str = "cfd6858c-9819-4599-bc11-35faf27ffc4c";

    /// A server hosting `mine` VMs of the owner and `others` of someone else.
    fn host(uuid: &str, mine: usize, others: usize) -> Value {
        let mut vms = Map::new();
        for i in 0..mine + others {
            let owner = if i < mine { OWNER } else { OTHER };
            vms.insert(
                format!("{uuid}-vm{i}"),
                json!({"owner_uuid": owner, "max_physical_memory": 128, "state": "running"}),
            );
        }
        with(server(uuid), json!({"vms": vms}))
    }

    fn fixture(defaults: Value) -> Fixture {
        Fixture::new(vec![host("s12", 12, 1), host("s2", 2, 2), host("s0", 0, 0)])
            .vm(json!({"owner_uuid": OWNER, "brand": "joyent", "ram": 128}))
            .defaults(defaults)
    }

    fn run(f: &Fixture) -> Outcome {
        let mut req = f.request();
        req.states_mut().iter_mut().for_each(|s| s.score = 1.0);
        run_on(&mut req, &ScoreNumOwnerZones)
    }

    fn scores(out: &Outcome) -> Vec<f64> {
        out.state.iter().map(|s| s.score).collect()
    }

    #[test]
    fn positive_weight_favours_fewer_owner_vms() {
        // 12 vs 2 must compare as numbers (a string sort would put 12 before 2).
        let out = run(&fixture(json!({"weight_num_owner_zones": 4})));
        assert_eq!(out.remaining, ["s12", "s2", "s0"]);
        assert_eq!(scores(&out), [1.0, 3.0, 5.0]);
        assert_eq!(
            out.reason_list(),
            [
                ("s0".into(), "increased score by 4.00 to 5.00; 0 owner zones found".into()),
                ("s2".into(), "increased score by 2.00 to 3.00; 2 owner zones found".into()),
                ("s12".into(), "increased score by 0.00 to 1.00; 12 owner zones found".into()),
            ]
        );
    }

    #[test]
    fn negative_weight_favours_more_owner_vms() {
        let out = run(&fixture(json!({"weight_num_owner_zones": -4})));
        assert_eq!(scores(&out), [5.0, 3.0, 1.0]);
        assert_eq!(out.reason("s12"), Some("increased score by 4.00 to 5.00; 12 owner zones found"));
    }

    #[test]
    fn zero_weight_skips() {
        let out = run(&fixture(json!({"weight_num_owner_zones": 0})));
        assert_eq!(out.reason_list(), [("skip".into(), "Resolved score weight to 0.00; no changes".into())]);
    }

    #[test]
    fn min_owner_spread_forces_weight_two() {
        let expect = [1.0, 2.0, 3.0];
        let out = run(&fixture(json!({"weight_num_owner_zones": 4, "server_spread": "min-owner"})));
        assert_eq!(scores(&out), expect);
        assert_eq!(out.reason("s2"), Some("increased score by 1.00 to 2.00; 2 owner zones found"));
        let f = fixture(json!({"weight_unreserved_ram": 4})).package(json!({"alloc_server_spread": "min-owner"}));
        assert_eq!(scores(&run(&f)), expect);
        // The package's spread wins over the default one; and it works with weight 0.
        let f = fixture(json!({"weight_num_owner_zones": 0, "server_spread": "max-ram"}))
            .package(json!({"alloc_server_spread": "min-owner"}));
        assert_eq!(scores(&run(&f)), expect);
    }

    #[test]
    fn other_spreads_skip() {
        let out = run(&fixture(json!({"weight_num_owner_zones": 4, "server_spread": "min-ram"})));
        assert_eq!(out.reason_list(), [("skip".into(), "pkg or default set to spread with: min-ram".into())]);
        let f = fixture(json!({"weight_num_owner_zones": 4})).package(json!({"alloc_server_spread": "max-ram"}));
        assert_eq!(run(&f).reason_list(), [("skip".into(), "pkg or default set to spread with: max-ram".into())]);
    }

    #[test]
    fn one_server_none_and_missing_vms() {
        let f = Fixture::new(vec![host("s12", 12, 0)])
            .vm(json!({"owner_uuid": OWNER, "brand": "joyent", "ram": 128}))
            .defaults(json!({"weight_num_owner_zones": 4}));
        let out = run(&f);
        assert_eq!(out.reason_list(), [("s12".into(), "increased score by 4.00 to 5.00; 12 owner zones found".into())]);
        let f = Fixture::new(vec![]).defaults(json!({"weight_num_owner_zones": 4}));
        assert!(run(&f).reasons.is_empty());
        let f = Fixture::new(vec![with(server("novms"), json!({"vms": null})), host("s1", 1, 0)])
            .vm(json!({"owner_uuid": OWNER, "brand": "joyent", "ram": 128}))
            .defaults(json!({"weight_num_owner_zones": 1}));
        let out = run(&f);
        assert_eq!(out.reason("novms"), Some("increased score by 1.00 to 2.00; 0 owner zones found"));
    }

    #[test]
    fn ticketed_vms_count() {
        let f = Fixture::new(vec![host("a", 1, 0), host("b", 0, 0)])
            .vm(json!({"owner_uuid": OWNER, "brand": "joyent", "ram": 128}))
            .defaults(json!({"weight_num_owner_zones": 1}));
        let mut req = f.request();
        let vm = crate::model::ServerVm::from(crate::model::FullVm {
            owner_uuid: crate::js::Js::str(OWNER),
            ..Default::default()
        });
        req.add_ticket_vm(1, "t1", vm.clone(), &[], 0.0);
        req.add_ticket_vm(1, "t2", vm, &[], 0.0);
        let out = run_on(&mut req, &ScoreNumOwnerZones);
        assert_eq!(out.reason("a"), Some("increased score by 1.00 to 1.00; 1 owner zones found"));
        assert_eq!(out.reason("b"), Some("increased score by 0.00 to 0.00; 2 owner zones found"));
    }
}
