//! `hard-filter-owners-servers`: operator-written `filter_owner_server` snippets reserve
//! servers for owners. An owner with a filter gets only the servers it accepts; any other
//! owner loses every server that some owner's filter accepts.
//!
//! Snippets are JavaScript, compiled once with the defaults and run in the sandbox (see
//! [`OwnerFilters`]). A snippet that throws on any server, or runs out of its time or
//! memory budget (where the original would have hung), empties the list with an
//! `Error running filter ...` reason, as the original did for a throw; the failure itself
//! is logged (`warn`).
//!
//! Snippets read the servers as the original's did at this point of the chain: the JSON the
//! caller sent plus what earlier steps wrote onto it (`score`, VMs from open tickets and the
//! quota they add, replaced `overprovision_ratios`, `unreserved_*`); every snippet of one
//! run reads the same objects. What a snippet changes on them is not seen by later plugins.

use std::collections::HashMap;

use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::owner_filter::{OwnerFilter, OwnerFilters};
use crate::js::sandbox::Failure;
use crate::plugins::shared::js_servers;

pub struct HardFilterOwnersServers;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-owners-servers", Kind::HardFilter, "Filter CNs based on owner filters")
        .reads(&[Data::Ratios, Data::TicketVms, Data::Scores, Data::Unreserved])
        .reads_as_written();

impl Plugin for HardFilterOwnersServers {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    /// Without snippets it passes every server on.
    fn per_server(&self, req: &Request<'_>) -> bool {
        !req.defaults.filter_owner_server.truthy()
    }
    fn unchanged_by(&self, req: &mut Request<'_>, _: &[ServerId], _: &[ServerId], _: &[ServerId]) -> bool {
        !req.defaults.filter_owner_server.truthy()
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let filters: &OwnerFilters = &req.defaults.owner_filters;
        if !req.defaults.filter_owner_server.truthy() {
            reasons.skip("No filter_owner_server default to run");
            return Ok(servers.to_vec());
        }
        let owner = req.vm.owner_uuid.to_js_string();
        let own = filters.get(&owner).filter(|f| f.truthy);
        let which: Vec<&OwnerFilter> = match own {
            Some(filter) => vec![filter],
            None => filters.iter().collect(),
        };
        let outcomes = run_filters(req, filters, servers, &which)?;
        if let Some(filter) = own {
            return Ok(match outcomes.into_iter().next() {
                Some(Ok(kept)) => {
                    reasons.all(format!("Servers pass filter for owner {owner}: {}", filter.source));
                    kept.into_iter().filter_map(|i| servers.get(i).copied()).collect()
                }
                failed => {
                    report(filter, failed);
                    reasons.all(format!("Error running filter for owner {owner}: {}", filter.source));
                    Vec::new()
                }
            });
        }
        // Server key (String(uuid)) → the last owner, in key order, whose filter accepts it.
        let mut claimed: HashMap<String, &str> = HashMap::new();
        let mut outcomes = outcomes.into_iter();
        for filter in which {
            let kept = match outcomes.next() {
                Some(Ok(kept)) => kept,
                failed => {
                    report(filter, failed);
                    reasons.all(format!("Error running filter for owner {}: {}", filter.owner, filter.source));
                    return Ok(Vec::new());
                }
            };
            for id in kept.into_iter().filter_map(|i| servers.get(i).copied()) {
                claimed.insert(req.key(id).to_string(), &filter.owner);
            }
        }
        let mut kept = Vec::with_capacity(servers.len());
        for &id in servers {
            let key = req.key(id);
            match claimed.get(&*key) {
                Some(owner) if !owner.is_empty() => reasons.set(key, format!("Removed by filter for owner {owner}")),
                _ => kept.push(id),
            }
        }
        Ok(kept)
    }
}

/// Each filter's outcome in turn, ending at the first that failed. With no servers no
/// snippet runs (as `[].filter(fn)` calls nothing).
fn run_filters(
    req: &Request<'_>,
    filters: &OwnerFilters,
    servers: &[ServerId],
    which: &[&OwnerFilter],
) -> Result<Vec<Result<Vec<usize>, Failure>>, PluginError> {
    if servers.is_empty() || which.is_empty() {
        return Ok(which.iter().map(|_| Ok(Vec::new())).collect());
    }
    let presented = js_servers::present(req, servers);
    filters.run(&presented, which).map_err(|e| PluginError(format!("owner filters could not be run: {e}")))
}

/// Logs why a snippet failed (the step's reason quotes only the snippet, as the original's).
fn report(filter: &OwnerFilter, failed: Option<Result<Vec<usize>, Failure>>) {
    let why = match failed {
        Some(Err(failure)) => failure.to_string(),
        _ => "gave no answer".to_string(),
    };
    tracing::warn!(owner = %filter.owner, "Error running filter for owner {}: {}: {why}", filter.owner, filter.source);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::js::Js;
    use crate::plugins::testing::{run_on, server, with, Fixture};
    use serde_json::{json, Value};

    const A: &str = "2316e149-1562-47ff-abea-00bda80d0e7f";
    const B: &str = "10a4ca4c-26e9-11e6-a0db-28cfe91f7d53";
    const OTHER: &str = "9094b92e-26e9-11e6-b476-28cfe91f7d53";
    const S0: &str = "33ce31d0-f376-4efd-ad41-f17c430b9782";
    const S1: &str = "b8ab34e9-2914-48c4-af75-5c6440240ce1";
    const S2: &str = "ff962080-5e04-463c-87b7-1f83d5b8c949";

    fn servers() -> Vec<Value> {
        vec![
            with(server(S0), json!({"rack_identifier": "R01"})),
            with(server(S1), json!({"rack_identifier": "R02"})),
            with(server(S2), json!({"rack_identifier": "R03", "hostname": "cn0003"})),
        ]
    }

    fn fixture(owner: &str, filters: Value) -> Fixture {
        Fixture::new(servers())
            .vm(json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": owner, "brand": "joyent"}))
            .defaults(json!({ "filter_owner_server": filters }))
    }

    /// Runs with unreserved RAM set to 1024, 768 and 2048 MiB, as an earlier step would.
    fn run(f: &Fixture) -> crate::plugins::testing::Outcome {
        let mut req = f.request();
        for (id, ram) in [1024.0, 768.0, 2048.0].into_iter().enumerate() {
            req.set_unreserved(id, Unreserved { cpu_pct: 100.0, ram_mib: ram, disk_mib: 1.0 });
        }
        run_on(&mut req, &HardFilterOwnersServers)
    }

    fn two_filters() -> Value {
        json!({ A: format!("server.uuid === \"{S1}\""), B: "server.unreserved_ram > 1024" })
    }

    #[test]
    fn an_owner_with_a_filter_gets_what_it_accepts() {
        let out = run(&fixture(A, two_filters()));
        assert_eq!(out.remaining, [S1]);
        assert_eq!(
            out.reason_list(),
            [("*".to_string(), format!("Servers pass filter for owner {A}: server.uuid === \"{S1}\""))]
        );
    }

    #[test]
    fn other_owners_lose_what_any_filter_accepts() {
        let out = run(&fixture(OTHER, two_filters()));
        assert_eq!(out.remaining, [S0]);
        assert_eq!(
            out.reason_list(),
            [
                (S1.to_string(), format!("Removed by filter for owner {A}")),
                (S2.to_string(), format!("Removed by filter for owner {B}"))
            ]
        );
        // The last owner (in key order) whose filter accepts a server is named.
        let out =
            run(&fixture(OTHER, json!({ A: "server.rack_identifier !== 'R01'", B: "server.unreserved_ram > 1024" })));
        assert_eq!(out.remaining, [S0]);
        assert_eq!(out.reason(S1), Some(format!("Removed by filter for owner {A}").as_str()));
        assert_eq!(out.reason(S2), Some(format!("Removed by filter for owner {B}").as_str()));
    }

    #[test]
    fn a_throwing_filter_empties_the_list() {
        let bad = "server.hostname.indexOf('cn') === 0";
        let out = run(&fixture(A, json!({ A: bad, B: "true" })));
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason_list(), [("*".to_string(), format!("Error running filter for owner {A}: {bad}"))]);
        let out = run(&fixture(OTHER, json!({ B: "server.unreserved_ram > 1024", A: bad })));
        assert!(out.remaining.is_empty());
        assert_eq!(out.reason_list(), [("*".to_string(), format!("Error running filter for owner {A}: {bad}"))]);
    }

    #[test]
    fn no_filters_skip_and_no_servers_still_report() {
        let out = run(&Fixture::new(servers()));
        assert_eq!(out.remaining.len(), 3);
        assert_eq!(out.reason_list(), [("skip".to_string(), "No filter_owner_server default to run".to_string())]);
        let f = fixture(A, json!({ A: "server.ram > 128" }));
        let mut req = f.request();
        let mut reasons = Reasons::default();
        let kept = HardFilterOwnersServers.run(&mut req, &[], &mut reasons).expect("runs");
        assert!(kept.is_empty());
        assert_eq!(reasons.get("*"), Some(format!("Servers pass filter for owner {A}: server.ram > 128").as_str()));
    }

    #[test]
    fn a_falsy_snippet_for_the_owner_counts_as_none() {
        // The owner's own empty snippet is skipped; it still runs (and matches nothing) as a
        // filter of others.
        let out = run(&fixture(A, json!({ A: "", B: "server.rack_identifier === 'R03'" })));
        assert_eq!(out.remaining, [S0, S1]);
        assert_eq!(out.reason(S2), Some(format!("Removed by filter for owner {B}").as_str()));
    }

    #[test]
    fn filters_see_what_earlier_steps_wrote() {
        let f = fixture(
            A,
            json!({ A: "server.score === 0 && server.overprovision_ratios && server.overprovision_ratios.cpu === 4" }),
        );
        let mut req = f.request();
        req.set_ratios(1, std::sync::Arc::new(Js::from_json(&json!({"cpu": 4, "ram": 1}))));
        let out = run_on(&mut req, &HardFilterOwnersServers);
        assert_eq!(out.remaining, [S1]);
        let out = run(&fixture(A, json!({ A: "server.unreserved_ram >= 1024 && server.reserved === false" })));
        assert_eq!(out.remaining, [S0, S2]);
    }
}
