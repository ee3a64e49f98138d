//! `engine::Recurring` (inventory mode's allocations of one request shape, the per-server
//! part re-run only for the servers that changed) answers as a full run does: the same
//! server, the same counts at every step, allocation after allocation, while claims are
//! added and servers change under it.

mod common;

#[path = "../benches/input.rs"]
mod input;

use dapi::engine::{Allocation, Changed, Held, Recurring, RecurringKey, ServerId, StepsFormat};
use dapi::model::{AllocateBody, Ticket};
use serde_json::{json, Value};

fn parse(text: &[u8]) -> AllocateBody<'_> {
    common::parse_valid(text)
}

/// `body`'s servers, without tickets held.
fn held_of<'a>(body: &'a AllocateBody<'a>) -> Held<'a> {
    Held { servers: &body.servers, raw_servers: &body.raw_servers, lookups: None, tickets: &dapi::engine::NO_TICKETS }
}

/// `base` with `vm`'s fields put in its VM.
fn with_vm(base: &Value, vm: &Value) -> Value {
    let mut request = base.clone();
    for (k, v) in vm.as_object().expect("object") {
        request["vm"][k] = v.clone();
    }
    request
}

fn counts(allocation: &Allocation, body: &AllocateBody<'_>) -> String {
    let bytes = allocation.answer_json(body, StepsFormat::Counts).expect("answer");
    String::from_utf8(bytes).expect("UTF-8")
}

/// What changes between two allocations besides the claim on the chosen server, every
/// third round in turn: a server stops running; it runs again; a VM
/// appears on one; a server boots a newer platform, and its reboot is put off. In rounds
/// 6 and 30 a new server is appended (an empty one, or a copy of one with its VMs).
fn change(round: usize, servers: &mut Vec<Value>) -> Option<ServerId> {
    let id = (round * 7) % servers.len();
    if round % 24 == 6 {
        let mut added = servers[id].clone();
        added["uuid"] = json!(format!("add0add0-0000-4000-8000-{round:012x}"));
        added["hostname"] = json!(format!("added-{round}"));
        if round == 6 {
            added["vms"] = json!({});
        } else if let Some(vms) = added["vms"].as_object_mut() {
            let renamed = std::mem::take(vms).into_iter().enumerate().map(|(i, (_, mut vm))| {
                let uuid = format!("add0add0-{i:04x}-4000-8000-{round:012x}");
                vm["uuid"] = json!(uuid);
                (uuid, vm)
            });
            *vms = renamed.collect();
        }
        servers.push(added);
        return Some(servers.len() - 1);
    }
    match round % 12 {
        2 => servers[id]["status"] = json!("unknown"),
        5 => {
            // The one stopped three rounds ago.
            let id = ((round - 3) * 7) % servers.len();
            servers[id]["status"] = json!("running");
            return Some(id);
        }
        11 => {
            servers[id]["current_platform"] = json!("20991231T000000Z");
            servers[id]["next_reboot"] = json!("2099-01-01T00:00:00.000Z");
        }
        8 => {
            let vms = servers[id]["vms"].as_object_mut()?;
            let (_, sample) = vms.iter().next()?;
            let mut vm = sample.clone();
            let uuid = format!("0dd0dd00-0000-4000-8000-{round:012x}");
            vm["uuid"] = json!(uuid);
            vms.insert(uuid, vm);
        }
        _ => return None,
    }
    Some(id)
}

#[test]
fn recurring_allocations_answer_as_full_runs_do() {
    let interleaved = json!([
        "pipe",
        "hard-filter-setup",
        "hard-filter-running",
        ["or", "hard-filter-large-servers", "identity"],
        "override-overprovisioning",
        "calculate-ticketed-vms",
        "calculate-server-unreserved",
        "hard-filter-min-ram",
        "hard-filter-vm-count",
        "soft-filter-locality-hints",
        "score-unreserved-disk",
        "score-num-owner-zones",
        "score-uniform-random"
    ]);
    let engines = [
        ("default", common::engine_with(None, input::config()["defaults"].clone())),
        ("seeded random, vm limit", common::engine_with(None, json!({"filter_vm_limit": 40, "seed": 7}))),
        (
            "spread",
            common::engine_with(
                None,
                json!({"weight_num_owner_zones": 2, "weight_unreserved_ram": -1, "weight_uniform_random": 0,
                    "filter_large_servers": false, "overprovision_ratio_ram": 1.5}),
            ),
        ),
        ("interleaved", common::engine_with(Some(interleaved), json!({"weight_num_owner_zones": 1, "seed": 3}))),
    ];
    let base: Value = serde_json::from_slice(&input::body(40, 12)).expect("bench body");
    // The request's owner, another with VMs here, and one without.
    let other = base["servers"][1]["vms"].as_object().and_then(|vms| vms.values().next()).expect("a VM");
    let owners =
        [base["vm"]["owner_uuid"].clone(), other["owner_uuid"].clone(), json!("930896af-bf8c-48d4-885c-6573a94b1853")];
    assert_ne!(owners[0], owners[1]);
    let templates = [
        json!({}),
        json!({"ram": 256}),
        json!({"ram": 65536, "brand": "kvm"}),
        json!({"locality": {"far": [base["servers"][3]["vms"].as_object().and_then(|v| v.keys().next()).cloned()],
            "strict": false}}),
        json!({"affinity": [{"key": "instance", "operator": "!=", "value": "bench*", "valueType": "glob", "isSoft": true}]}),
    ];
    let (mut placed, mut reused) = (0, 0);
    let mut reused_rest = vec![0; engines.len()];
    for (e, (name, engine)) in engines.iter().enumerate() {
        // Each sequence twice: by one owner, and by three in turn.
        for (t, template, owners_in_turn) in templates.iter().enumerate().flat_map(|(t, x)| [(t, x, 1), (t, x, 3)]) {
            let mut request = with_vm(&base, template);
            let mut servers: Vec<Value> = request["servers"].as_array().cloned().expect("servers");
            let mut recurring = Recurring::new();
            let mut claims: Vec<Ticket> = Vec::new();
            let mut changed: Option<(Vec<ServerId>, Vec<ServerId>)> = None;
            let mut kind: Option<RecurringKey> = None;
            for round in 0..40 {
                let case = format!("{name}, template {t}, {owners_in_turn} owner(s), round {round}");
                request["servers"] = json!(servers);
                // Each VM named, tagged and described as a caller's are, ordered by one
                // owner or by each in turn, a few VMs each: one kind all along.
                request["vm"]["owner_uuid"] = owners[round / 4 % owners_in_turn].clone();
                request["vm"]["vm_uuid"] = json!(format!("5e1ec7ed-0000-4000-8000-{round:012x}"));
                request["vm"]["alias"] = json!(format!("web-{round}"));
                request["vm"]["tags"] = json!({"role": "web", "seq": round});
                request["vm"]["internal_metadata"] = json!({"docker:id": format!("{round:064x}")});
                let text = serde_json::to_vec(&request).expect("json");
                let body = parse(&text);
                let key = RecurringKey::of(&body);
                assert!(kind.get_or_insert_with(|| key.clone()) == &key, "{case}: another kind");
                let held =
                    Held { servers: &body.servers, raw_servers: &body.raw_servers, lookups: None, tickets: &claims };
                let full = engine.allocate_on(held, &body, false).expect("full run");
                let which = match &changed {
                    None => Changed::All,
                    Some((changed, facts)) => Changed::Servers { changed, facts },
                };
                let again = recurring.allocate(engine, held, &body, which).expect("recurring run");
                assert_eq!(again.chosen, full.chosen, "{case}");
                assert_eq!(counts(&again, &body), counts(&full, &body), "{case}");
                let mut next = Vec::new();
                if let Some(id) = again.chosen {
                    let uuid = servers[id]["uuid"].as_str().expect("uuid").to_string();
                    claims.push(common::claim(placed, &uuid, &request["vm"]));
                    next.push(id);
                    placed += 1;
                }
                recurring.recycle(again);
                // The claim changes its server's tickets; a change fed changes its facts.
                let facts: Vec<ServerId> = change(round, &mut servers).into_iter().collect();
                next.extend(&facts);
                changed = Some((next, facts));
            }
            reused += recurring.reused();
            if owners_in_turn == 1 {
                reused_rest[e] += recurring.reused_rest();
            }
        }
    }
    assert!(placed > 800, "only {placed} VMs placed");
    // Every allocation but each sequence's first re-ran the per-server part for a few
    // servers only.
    assert_eq!(reused, engines.len() * templates.len() * 2 * 39, "{reused} reused");
    // Now and then the rest of the chain is not run either (here: the default chain, whose
    // soft filter and scorers often still do what they did; the others' spread the owner's
    // VMs, so each claim changes what they do).
    assert!(reused_rest[0] > 0, "rest reused per chain: {reused_rest:?}");
}

#[test]
fn changes_not_reported_are_not_seen_and_all_resets() {
    // Told nothing changed while a server did, the kept outcome stands (the caller's
    // contract); told `All`, the change is seen.
    let engine = common::engine_with(None, json!({"weight_uniform_random": 0}));
    let base: Value = serde_json::from_slice(&input::body(20, 4)).expect("bench body");
    let text = serde_json::to_vec(&base).expect("json");
    let body = parse(&text);
    let held = held_of(&body);
    let mut recurring = Recurring::new();
    let first = recurring.allocate(&engine, held, &body, Changed::All).expect("run");
    let chosen = first.chosen.expect("a server fits");
    recurring.recycle(first);

    let mut changed = base.clone();
    changed["servers"][chosen]["status"] = json!("unknown");
    let text = serde_json::to_vec(&changed).expect("json");
    let body = parse(&text);
    let held = held_of(&body);
    let full = engine.allocate_on(held, &body, false).expect("full run");
    assert_ne!(full.chosen, Some(chosen));
    let stale = recurring.allocate(&engine, held, &body, Changed::Servers { changed: &[], facts: &[] }).expect("run");
    assert_eq!(stale.chosen, Some(chosen), "nothing said changed: the kept outcome is used");
    recurring.recycle(stale);
    let told = recurring
        .allocate(&engine, held, &body, Changed::Servers { changed: &[chosen], facts: &[chosen] })
        .expect("run");
    assert_eq!(told.chosen, full.chosen);
    assert_eq!(counts(&told, &body), counts(&full, &body));
    let reset = recurring.allocate(&engine, held, &body, Changed::All).expect("run");
    assert_eq!(counts(&reset, &body), counts(&full, &body));
}

#[test]
fn the_rest_is_reused_again_and_again_while_its_steps_are_handed_back() {
    let engine = common::engine_with(None, json!({"weight_uniform_random": 0}));
    let base: Value = serde_json::from_slice(&input::body(20, 4)).expect("bench body");
    let text = serde_json::to_vec(&base).expect("json");
    let body = parse(&text);
    let held = held_of(&body);
    let mut recurring = Recurring::new();
    let first = recurring.allocate(&engine, held, &body, Changed::All).expect("run");
    let (chosen, steps) = (first.chosen, counts(&first, &body));
    recurring.recycle(first);
    let nothing = Changed::Servers { changed: &[], facts: &[] };
    for round in 1..=3 {
        let again = recurring.allocate(&engine, held, &body, nothing).expect("run");
        assert_eq!((again.chosen, counts(&again, &body)), (chosen, steps.clone()), "round {round}");
        recurring.recycle(again);
        assert_eq!(recurring.reused_rest(), round, "the rest's steps, lent and handed back, are reused");
    }
    // An answer never handed back: the rest is run again, to the same decision.
    let kept = recurring.allocate(&engine, held, &body, nothing).expect("run");
    let again = recurring.allocate(&engine, held, &body, nothing).expect("run");
    assert_eq!((again.chosen, counts(&again, &body)), (chosen, steps.clone()));
    assert_eq!((kept.chosen, counts(&kept, &body)), (chosen, steps));
    assert_eq!(recurring.reused_rest(), 4, "not reused while lent");
}

#[test]
fn kinds_differ_in_what_per_server_plugins_read() {
    let base: Value = serde_json::from_slice(&input::body(4, 2)).expect("bench body");
    let plain_text = serde_json::to_vec(&base).expect("json");
    let plain_body = parse(&plain_text);
    let plain = RecurringKey::of(&plain_body);
    // The key of a request with `vm` put in, checked to agree with `fits` both ways.
    let key_with = |vm: Value| {
        let request = with_vm(&base, &vm);
        let text = serde_json::to_vec(&request).expect("json");
        let body = parse(&text);
        let key = RecurringKey::of(&body);
        assert_eq!(key == plain, plain.fits(&body), "{vm}");
        assert_eq!(key == plain, key.fits(&plain_body), "{vm}");
        key
    };
    // Neither what names the VM nor its owner.
    assert!(
        key_with(json!({"alias": "another", "tags": {"role": "db"}, "internal_metadata": {"x": 1},
            "owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853"}))
            == plain
    );
    for read in [
        json!({"tags": {"triton.placement.exclude_virtual_servers": true}}),
        json!({"internal_metadata": {"force_designation_failure": true}}),
        json!({"internal_metadata": {"encrypted": true}}),
        json!({"internal_metadata": {"volapi-nfs-version": 2}}),
        json!({"ram": 256}),
        json!({"brand": "lx"}),
        json!({"traits": {"ssd": true}}),
        // Whether `hard-filter-locality-hints` and `calculate-affinity` are per-server
        // plugins depends on these.
        json!({"locality": {"near": ["930896af-bf8c-48d4-885c-6573a94b1853"], "strict": true}}),
        json!({"affinity": [{"key": "role", "operator": "==", "value": "db", "valueType": "exact", "isSoft": false}]}),
    ] {
        assert!(key_with(read.clone()) != plain, "{read}: the same kind");
    }
    // Each of those keys changes what the chain's per-server part does to some server.
    let engine = common::engine_with(None, input::config()["defaults"].clone());
    for read in [
        json!({"internal_metadata": {"force_designation_failure": true}}),
        json!({"internal_metadata": {"encrypted": true}}),
    ] {
        let request = with_vm(&base, &read);
        let text = serde_json::to_vec(&request).expect("json");
        let body = parse(&text);
        let held = held_of(&body);
        assert_eq!(engine.allocate_on(held, &body, false).expect("run").chosen, None, "{read}");
    }
}

#[test]
fn another_owner_runs_the_rest_again_and_the_first_finds_its_own_kept() {
    let engine = common::engine_with(None, json!({"weight_uniform_random": 0, "weight_num_owner_zones": 1}));
    let base: Value = serde_json::from_slice(&input::body(20, 4)).expect("bench body");
    let mut other = base.clone();
    other["vm"]["owner_uuid"] = base["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|server| server["vms"].as_object())
        .flat_map(|vms| vms.values())
        .map(|vm| vm["owner_uuid"].clone())
        .find(|owner| *owner != base["vm"]["owner_uuid"])
        .expect("another owner's VM");
    assert_ne!(other["vm"]["owner_uuid"], base["vm"]["owner_uuid"]);
    let texts = [serde_json::to_vec(&base).expect("json"), serde_json::to_vec(&other).expect("json")];
    let bodies = [parse(&texts[0]), parse(&texts[1])];
    let mut recurring = Recurring::new();
    let nothing = Changed::Servers { changed: &[], facts: &[] };
    let mut run = |owner: usize, which: Changed<'_>| {
        let body = &bodies[owner];
        let held = held_of(body);
        let full = engine.allocate_on(held, body, false).expect("full run");
        let again = recurring.allocate(&engine, held, body, which).expect("run");
        assert_eq!((again.chosen, counts(&again, body)), (full.chosen, counts(&full, body)), "owner {owner}");
        recurring.recycle(again);
        recurring.reused_rest()
    };
    assert_eq!(run(0, Changed::All), 0);
    assert_eq!(run(0, nothing), 1, "the same owner: the rest reused");
    assert_eq!(run(1, nothing), 1, "another owner: the rest run");
    assert_eq!(run(1, nothing), 2, "that owner again: reused");
    assert_eq!(run(0, nothing), 3, "the first owner back: its own last run reused");
    assert_eq!(run(1, nothing), 4, "and the other's");
    // A server changed while an owner was away: its last run is checked against it.
    let last_server = bodies[0].servers.len() - 1;
    assert_eq!(run(0, Changed::Servers { changed: &[last_server], facts: &[] }), 5);
    assert_eq!(run(1, nothing), 6, "the change was seen and still changes nothing");
    assert_eq!(recurring.reused(), 7, "the per-server part reused throughout");
}

#[test]
fn a_server_fed_anew_is_scored_anew_by_every_owner() {
    // Every reboot scheduled alike, then one server's put off: the next-reboot scorer
    // (list-only, reading the servers' facts) now favours that one. Neither the current
    // owner's last run nor another owner's, kept aside, may be reused past that change.
    let engine = common::engine_with(None, json!({"weight_uniform_random": 0, "weight_next_reboot": 10}));
    let mut base: Value = serde_json::from_slice(&input::body(20, 4)).expect("bench body");
    let owner = base["vm"]["owner_uuid"].clone();
    let servers = base["servers"].as_array_mut().expect("servers");
    for server in servers.iter_mut() {
        server["next_reboot"] = json!("2099-01-01T00:00:00.000Z");
    }
    let other_owner = servers
        .iter()
        .filter_map(|server| server["vms"].as_object())
        .flat_map(|vms| vms.values())
        .map(|vm| vm["owner_uuid"].clone())
        .find(|other| *other != owner)
        .expect("another owner's VM");
    let before = serde_json::to_vec(&base).expect("json");
    let before_body = parse(&before);
    let first = engine.allocate_on(held_of(&before_body), &before_body, false).expect("full run").chosen;
    // A server that wins once its reboot is no longer scheduled.
    let fed = (0..20)
        .map(|id| {
            let mut after = base.clone();
            after["servers"][id]["next_reboot"] = Value::Null;
            (id, after)
        })
        .find(|(id, after)| {
            let text = serde_json::to_vec(after).expect("json");
            let body = parse(&text);
            *id != first.unwrap_or(usize::MAX)
                && engine.allocate_on(held_of(&body), &body, false).expect("full run").chosen == Some(*id)
        });
    let (fed, after) = fed.expect("a server the scorer turns the choice to");
    let mut other = after.clone();
    other["vm"]["owner_uuid"] = other_owner;
    let mut other_before = base.clone();
    other_before["vm"]["owner_uuid"] = other["vm"]["owner_uuid"].clone();
    let texts = [
        serde_json::to_vec(&other_before).expect("json"),
        serde_json::to_vec(&after).expect("json"),
        serde_json::to_vec(&other).expect("json"),
    ];
    let (other_before, after, other) = (parse(&texts[0]), parse(&texts[1]), parse(&texts[2]));

    let mut recurring = Recurring::new();
    let nothing = Changed::Servers { changed: &[], facts: &[] };
    let mut run = |body: &AllocateBody<'_>, which: Changed<'_>| {
        let full = engine.allocate_on(held_of(body), body, false).expect("full run");
        let again = recurring.allocate(&engine, held_of(body), body, which).expect("run");
        assert_eq!((again.chosen, counts(&again, body)), (full.chosen, counts(&full, body)));
        let chosen = again.chosen;
        recurring.recycle(again);
        (chosen, recurring.reused_rest())
    };
    // Both owners' runs kept, the first's twice (so its last run is reused).
    run(&other_before, Changed::All);
    run(&before_body, nothing);
    assert_eq!(run(&before_body, nothing), (first, 1));
    assert_eq!(run(&after, Changed::Servers { changed: &[fed], facts: &[fed] }).0, Some(fed));
    assert_eq!(run(&other, nothing).0, Some(fed), "the other owner's kept run, after the change");
}
