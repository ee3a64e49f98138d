//! `explain`: every vendored recorded case run with and without it gives the same answer
//! bytes before the `explain` member, and what it says agrees with the steps (the winner
//! ranked first, each removed server's step naming it, score parts adding up to the score,
//! shortfalls carrying the reasons' numbers). Also over HTTP, and `dapi explain`'s report.

mod common;

use std::path::Path;

use dapi::answer::{allocate_with, AnswerOptions, NoFitBody};
use dapi::batch::BatchOptions;
use dapi::config::Limits;
use dapi::engine::Engine;
use dapi::explain::ExplainOptions;
use serde_json::{json, Value};

fn cases() -> Vec<Value> {
    common::recorded_cases()
}

/// The plain answer and the explained one, for the CLI's and the service's no-fit forms.
fn both(engine: &Engine, body: &[u8], no_fit: NoFitBody) -> Option<(Vec<u8>, Vec<u8>)> {
    let options = AnswerOptions { no_fit, ..AnswerOptions::default() };
    let limits = Limits::default();
    let plain = allocate_with(engine, &limits, body, options, BatchOptions::default(), None).ok()?;
    let explained =
        allocate_with(engine, &limits, body, options, BatchOptions::default(), Some(ExplainOptions::default()))
            .expect("the plain request was answered, so is the explained one");
    assert_eq!(plain.verdict, explained.verdict);
    Some((plain.body, explained.body))
}

/// The numbers in a reason, in order (`VM's calculated 512 RAM is less than server's spare
/// 256` → [512, 256]).
fn numbers(text: &str) -> Vec<f64> {
    let mut found = Vec::new();
    let mut current = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() || c == '.' || (c == '-' && current.is_empty()) || (c == 'e' && !current.is_empty()) {
            current.push(c);
        } else {
            if let Ok(n) = current.trim_end_matches('.').parse::<f64>() {
                found.push(n);
            }
            current.clear();
        }
    }
    found
}

fn check_case(case: &Value) -> Result<usize, String> {
    let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec(&case["request"]).map_err(|e| e.to_string())?;
    let mut checked = 0;
    for no_fit in [NoFitBody::NullServer, NoFitBody::Error] {
        let Some((plain, explained)) = both(&engine, &body, no_fit) else { return Ok(0) };
        // Byte-identical up to the added member.
        let head = &plain[..plain.len() - 1];
        if !explained.starts_with(head) || !explained[head.len()..].starts_with(b",\"explain\":") {
            return Err("the explained answer does not begin with the plain one".into());
        }
        checked += 1;
        let answer: Value = serde_json::from_slice(&explained).map_err(|e| e.to_string())?;
        let explain = &answer["explain"];
        let steps = answer["steps"].as_array().ok_or("no steps")?;
        let servers = explain["servers"].as_array().ok_or("no servers")?;
        let received = case["request"]["servers"].as_array().map_or(0, Vec::len);
        if servers.len() != received || explain["received"] != json!(received) {
            return Err(format!("{} servers explained, {received} received", servers.len()));
        }
        // The winner ranks first, with the chosen uuid.
        let chosen = answer["server"].get("uuid").cloned();
        match &chosen {
            Some(uuid) => {
                if explain["winner"]["server"] != *uuid || explain["top"][0]["server"] != *uuid {
                    return Err(format!(
                        "winner {} / top {} is not the chosen {uuid}",
                        explain["winner"], explain["top"][0]
                    ));
                }
                if explain["top"][0]["rank"] != json!(1) || explain["top"][0]["outcome"] != "chosen" {
                    return Err("the chosen server is not ranked first".into());
                }
            }
            None => {
                if explain.get("winner").is_some() {
                    return Err("a winner without a chosen server".into());
                }
            }
        }
        let mut removed = 0;
        for s in servers {
            let uuid = s["server"].as_str().unwrap_or("undefined");
            match s["outcome"].as_str() {
                Some("removed") => {
                    removed += 1;
                    let left = &s["left"];
                    let name = left["step"].as_str().ok_or("left without a step")?;
                    // The step it left at is the first step (the one of that name whose
                    // reasons name it, when it gave one) that no longer lists it.
                    let position = steps.iter().position(|st| {
                        st["step"] == name && !st["remaining"].as_array().is_some_and(|r| r.contains(&s["server"]))
                    });
                    let Some(position) = position else { return Err(format!("{uuid}: left at {name}, not a step")) };
                    let reason = steps[position]["reasons"].get(uuid).and_then(Value::as_str);
                    if left["reason"].as_str() != reason {
                        return Err(format!("{uuid}: reason {} given, the step says {reason:?}", left["reason"]));
                    }
                    // Every earlier step still listed it (steps of `or` branches aside: they
                    // are not on the path, so only a step before `position` that removed it
                    // and named it would be a mistake).
                    for earlier in &steps[..position] {
                        let gone = !earlier["remaining"].as_array().is_some_and(|r| r.contains(&s["server"]));
                        let named = earlier["reasons"]
                            .get(uuid)
                            .and_then(Value::as_str)
                            .is_some_and(|r| !r.starts_with("increased score"));
                        if gone && named && earlier["step"] != name {
                            // Allowed only when that step belongs to a branch given up on:
                            // then a later step lists it again.
                            let back = steps[..position]
                                .iter()
                                .any(|st| st["remaining"].as_array().is_some_and(|r| r.contains(&s["server"])));
                            if !back {
                                return Err(format!("{uuid}: named by {} before {name}", earlier["step"]));
                            }
                        }
                    }
                    // Shortfalls carry the reason's numbers.
                    for f in left["shortfalls"].as_array().into_iter().flatten() {
                        let (needed, available, missing) =
                            (f["needed"].as_f64(), f["available"].as_f64(), f["missing"].as_f64());
                        let (Some(n), Some(a), Some(m)) = (needed, available, missing) else {
                            return Err(format!("{uuid}: shortfall {f} without numbers"));
                        };
                        if (n - a - m).abs() > 1e-9 * n.abs().max(1.0) {
                            return Err(format!("{uuid}: missing {m} is not {n} - {a}"));
                        }
                        let said = numbers(reason.unwrap_or(""));
                        if f["unit"] != "VMs" && f["unit"] != "ratio" && !(said.contains(&n) && said.contains(&a)) {
                            return Err(format!("{uuid}: shortfall {f} not in the reason {reason:?}"));
                        }
                    }
                }
                Some("chosen") | Some("candidate") => {
                    let score = s["score"].as_f64().ok_or("a candidate without a score")?;
                    let sum = s["scores"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .fold(0.0, |acc, p| acc + p["contribution"].as_f64().unwrap_or(f64::NAN));
                    if sum != score {
                        return Err(format!("{uuid}: contributions add to {sum}, the score is {score}"));
                    }
                }
                other => return Err(format!("{uuid}: outcome {other:?}")),
            }
        }
        if explain["removed"] != json!(removed) {
            return Err(format!("removed {} but {removed} servers say so", explain["removed"]));
        }
        let counted: u64 = explain["causes"].as_array().into_iter().flatten().filter_map(|c| c["count"].as_u64()).sum();
        if counted != removed as u64 {
            return Err(format!("causes count {counted}, {removed} removed"));
        }
    }
    Ok(checked)
}

#[test]
fn every_recorded_case_explained_keeps_its_answer_and_agrees_with_its_steps() {
    let mut failures = Vec::new();
    let mut checked = 0;
    let all = cases();
    for case in &all {
        match check_case(case) {
            Ok(n) => checked += n,
            Err(e) => failures.push(format!("{}: {e}", case["name"].as_str().unwrap_or("?"))),
        }
    }
    assert!(failures.is_empty(), "{} cases:\n{}", failures.len(), failures.join("\n"));
    assert!(checked >= all.len(), "only {checked} answers checked of {} cases", all.len());
}

/// The direct writer the answers use gives the bytes serializing the `explain` object gives,
/// for every vendored case, whole and with `why_not` (a uuid received, one not).
#[test]
fn explain_written_directly_is_what_serializing_it_writes() {
    let mut compared = 0;
    for case in &cases() {
        let engine = Engine::from_config(&case["config"], &dapi::registry::built_in()).expect("recorded config");
        let body = serde_json::to_vec(&case["request"]).expect("request");
        let Ok(mut request) = dapi::wire::parse_allocate_body(&body) else { continue };
        if dapi::validate::validate_allocate(&mut request).is_err() {
            continue;
        }
        let allocation = engine.allocate_noting(&request, true).expect("the recorded request runs");
        let first = request.servers.first().and_then(|s| s.uuid.as_str()).map(str::to_string);
        let asked = ExplainOptions {
            why_not: Some(first.into_iter().chain(["00000000-0000-0000-0000-00000000beef".to_string()]).collect()),
        };
        for options in [ExplainOptions::default(), asked] {
            let explained = dapi::explain::explain(&request.servers, &allocation, &options);
            let mut direct = Vec::new();
            explained.write_json(&mut direct).expect("written");
            let serialized = dapi::js::json::to_vec(&explained).expect("serialized");
            assert_eq!(String::from_utf8_lossy(&direct), String::from_utf8_lossy(&serialized), "{}", case["name"]);
            compared += 1;
        }
    }
    assert!(compared >= 80, "only {compared} explanations compared");
}

fn ram_request() -> Value {
    let mut request = common::example_request();
    request["vm"]["ram"] = json!(1_000_000);
    request
}

#[test]
fn shortfalls_name_the_missing_mib() {
    let engine = dapi::config::ServiceConfig::load(None, Vec::new()).expect("config").engine().expect("engine");
    let body = serde_json::to_vec(&ram_request()).expect("json");
    let options = AnswerOptions { no_fit: NoFitBody::NullServer, ..AnswerOptions::default() };
    let answer = allocate_with(
        &engine,
        &Limits::default(),
        &body,
        options,
        BatchOptions::default(),
        Some(ExplainOptions::default()),
    )
    .expect("answered");
    let answer: Value = serde_json::from_slice(&answer.body).expect("json");
    let explain = &answer["explain"];
    let short: Vec<&Value> = explain["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .filter(|s| s["left"]["plugin"] == "hard-filter-min-ram")
        .collect();
    assert!(!short.is_empty(), "{explain}");
    for s in &short {
        let f = &s["left"]["shortfalls"][0];
        assert_eq!((f["resource"].as_str(), f["unit"].as_str()), (Some("ram"), Some("MiB")), "{s}");
        assert_eq!(f["needed"], json!(1_000_000));
        assert_eq!(f["missing"].as_f64(), Some(1_000_000.0 - f["available"].as_f64().expect("available")));
    }
    let cause = explain["causes"].as_array().expect("causes").iter().find(|c| c["plugin"] == "hard-filter-min-ram");
    let closest = &cause.expect("a RAM cause")["closest"];
    let least =
        short.iter().filter_map(|s| s["left"]["shortfalls"][0]["missing"].as_f64()).fold(f64::INFINITY, f64::min);
    assert_eq!(closest["missing"].as_f64(), Some(least));
    assert!(explain["summary"].as_str().expect("summary").contains("hard-filter-min-ram"), "{explain}");
}

#[tokio::test]
async fn over_http_explain_is_added_to_200_and_409_and_why_not_restricts() {
    let s = common::start(&[]).await;
    let mut request = common::example_request();
    request["seed"] = json!(7);
    let plain = common::post_json(s.addr, "/allocate", &request).await;
    let explained = common::post_json(s.addr, "/allocate?explain=true", &request).await;
    assert_eq!((plain.status, explained.status), (200, 200));
    let (p, e) = (plain.json(), explained.json());
    assert!(p.get("explain").is_none());
    assert!(p["steps"] == e["steps"], "the steps differ");
    assert_eq!(e["explain"]["winner"]["server"], e["server"]["uuid"]);

    let no_fit = ram_request();
    let r = common::post_json(s.addr, "/allocate?explain=1", &no_fit).await;
    assert_eq!(r.status, 409);
    let body = r.json();
    assert_eq!(body["code"], "NoAllocatableServersError");
    assert!(body["explain"]["causes"].as_array().is_some_and(|c| !c.is_empty()), "{body}");

    let first = request["servers"][0]["uuid"].as_str().expect("uuid").to_string();
    // The comma as typed, as URLSearchParams and urlencode escape it, and the parameter
    // given twice: the same two servers asked about.
    for query in [
        format!("why_not={first},not-a-server"),
        format!("why_not={first}%2Cnot-a-server"),
        format!("why_not={first}&why_not=not%2Da%2Dserver&steps=%66ull&explain=%74rue"),
    ] {
        let r = common::post_json(s.addr, &format!("/allocate?{query}"), &no_fit).await.json();
        let servers = r["explain"]["servers"].as_array().expect("servers");
        assert_eq!(servers.len(), 2, "{query}: {r}");
        assert_eq!(servers[0]["server"], json!(first), "{query}");
        assert_eq!(servers[1]["server"], "not-a-server", "{query}");
        assert_eq!(servers[1]["outcome"], "not_received", "{query}");
    }

    let mut in_body = no_fit.clone();
    in_body["why_not"] = json!([first]);
    let r = common::post_json(s.addr, "/allocate?explain=true", &in_body).await.json();
    assert_eq!(r["explain"]["servers"].as_array().map(Vec::len), Some(1), "{r}");
    // Without explain the body's why_not is not read (and CNAPI-shaped answers are as ever).
    let r = common::post_json(s.addr, "/allocate", &in_body).await.json();
    assert!(r.get("explain").is_none());

    in_body["why_not"] = json!("x");
    let r = common::post_json(s.addr, "/allocate?explain=true", &in_body).await;
    assert_eq!(r.status, 422);
    assert!(String::from_utf8_lossy(&r.body).contains("why_not"));
    let r = common::post_json(s.addr, "/allocate?explain=maybe", &request).await;
    assert_eq!(r.status, 422);
    assert!(String::from_utf8_lossy(&r.body).contains("explain"));
}

/// `dapi explain ARGS...`'s report (run from the crate's root, not on a terminal: no
/// colour), as text.
fn explain_report(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dapi"))
        .arg("explain")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("DAPI_CONFIG")
        // The golden test's own switch, which dapi would refuse as a setting it does not know.
        .env_remove("DAPI_BLESS")
        .output()
        .expect("dapi runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// `dapi explain`'s report on `examples/allocate-filtered.json` against
/// `tests/golden/explain-filtered.txt`. `DAPI_BLESS=1` rewrites the golden file.
#[test]
fn the_explain_report_matches_its_golden_file() {
    let got = explain_report(&[
        "examples/allocate-filtered.json",
        "--server",
        "5428b803-d510-42f6-a4b8-41e60dbe6bc1",
        "--server",
        "c95613ef-1071-46da-8467-3e230ee06e0b",
        "--server",
        "00000000-0000-0000-0000-000000000000",
    ]);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/explain-filtered.txt");
    if std::env::var_os("DAPI_BLESS").is_some() {
        std::fs::write(&golden, &got).expect("golden file written");
    }
    let want = std::fs::read_to_string(&golden).expect("tests/golden/explain-filtered.txt");
    assert!(!got.contains('\x1b'), "colour on a pipe");
    assert_eq!(got, want, "the report changed; DAPI_BLESS=1 rewrites the golden file when that is intended");
}

/// Every figure of the report for people is rounded as its heading rounds it (four decimals
/// at most); the scores of `examples/allocate.json` are thirds.
#[test]
fn the_report_for_people_rounds_every_score() {
    let text = explain_report(&["examples/allocate.json"]);
    let candidates: Vec<&str> = text.lines().filter(|l| l.contains(", score ")).collect();
    assert!(candidates.len() >= 2, "{text}");
    let long_fraction = |word: &str| word.split_once('.').is_some_and(|(_, f)| f.trim_end_matches(',').len() > 4);
    for line in candidates {
        assert!(!line.split_whitespace().any(long_fraction), "{line}");
    }
}

/// `dapi explain` on a batch body refuses it as `--explain` and `?explain=true` do, whether
/// the batch is a `count` or a `vms` list (which has no `vm` of its own to explain).
#[test]
fn dapi_explain_refuses_a_batch() {
    let dir = std::env::temp_dir().join(format!("dapi-explain-batch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut counted = common::example_request();
    counted["count"] = json!(3);
    let mut listed = common::example_request();
    let vm = listed.as_object_mut().and_then(|o| o.remove("vm")).expect("the example has a vm");
    listed["vms"] = json!([vm]);
    for (name, body) in [("count", counted), ("vms", listed)] {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, body.to_string()).expect("written");
        let out =
            common::dapi().arg("explain").arg(&path).current_dir(env!("CARGO_MANIFEST_DIR")).output().expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains("explains one allocation, not a batch"), "{name}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
