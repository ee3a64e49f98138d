//! `dapi replay DIR --config NEW.json`: every request recorded by the service
//! ([`crate::record`]) decided again with a new config, and what changed.
//!
//! Each record is decided twice on the same parsed request with the recorded seed: with
//! the config it was recorded under (kept in `DIR/configs/`, the baseline) and with the new
//! one. The baseline should give the recorded decision and the same answer digest; a
//! record where it does not is reported as not reproduced (a custom plugin that changed, a
//! config file missing). Where the new decision differs from the recorded one, the two runs
//! are compared step by step (steps of a chain that changed are matched by plugin): the
//! first step whose remaining servers differ made the change; when every step agrees, the
//! scores did, and the scorer whose contributions swung the two winners' margin most is
//! named, with each scorer's contributions in both runs.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::answer::{self, AnswerOptions, NoFitBody};
use crate::batch::BatchOptions;
use crate::config::{Limits, ServiceConfig};
use crate::engine::{Allocation, Engine, StepsFormat};
use crate::explain::{self, ExplainOptions};
use crate::model::AllocateBody;
use crate::outcome::{AnswerError, Verdict};
use crate::record::{self, AnswerAsked, Decision, RecordFile};
use crate::shadow::same_servers;
use crate::wire::parse_allocate_body;

/// What a replay found.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The new config's digest.
    pub config: String,
    pub replayed: usize,
    pub changed: usize,
    pub unchanged: usize,
    /// Records whose own config no longer gives the recorded decision or answer.
    pub not_reproduced: usize,
    /// Of those, records whose config is missing from `DIR/configs` or no longer loads:
    /// compared with their recorded decision only.
    pub without_config: usize,
    /// Records that could not be replayed (unreadable, refused).
    pub failed: usize,
    pub changes: Vec<Change>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_reproduced_records: Vec<NotReproduced>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<RecordError>,
}

/// A decision the new config changes.
#[derive(Debug, Serialize)]
pub struct Change {
    /// The record's file name.
    pub record: String,
    pub request_id: String,
    pub recorded: Decision,
    pub replayed: Decision,
    pub difference: Difference,
}

/// Where the two runs part.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Difference {
    /// A step leaves different servers: `changed` (the same plugin in both chains),
    /// `added` (a plugin only the new chain has), `dropped` (one only the old chain has),
    /// `reordered` (the chains run their plugins in another order from here).
    Step {
        change: &'static str,
        /// The step's index in the answer's `steps` of the run that has it (the new one, but
        /// for `dropped`); 0 is `Received by DAPI`.
        index: usize,
        plugin: &'static str,
        step: &'static str,
        /// Servers left after this point with the recorded config only.
        only_recorded: Vec<String>,
        /// Servers left after this point with the new config only.
        only_replayed: Vec<String>,
    },
    /// Every step leaves the same servers: the scores chose another winner.
    Scores {
        recorded_winner: String,
        replayed_winner: String,
        /// The scorer whose contributions moved the margin between the two winners most
        /// towards the new one.
        decisive: Option<&'static str>,
        scorers: Vec<ScoreSwing>,
    },
    /// A batch: the VMs whose server changed (not explained step by step).
    Batch { vms: Vec<BatchVm> },
    /// The recorded config is not in the directory: the runs cannot be compared.
    Unexplained { why: String },
}

/// One scorer's contributions to the two winners' scores, in both runs.
#[derive(Debug, Serialize)]
pub struct ScoreSwing {
    pub plugin: &'static str,
    /// Contributions with the recorded config: [recorded winner, replayed winner].
    pub recorded: [f64; 2],
    /// Contributions with the new config: [recorded winner, replayed winner].
    pub replayed: [f64; 2],
    /// How much this scorer moved the margin towards the replayed winner.
    pub swing: f64,
}

#[derive(Debug, Serialize)]
pub struct BatchVm {
    pub index: usize,
    pub recorded: Option<String>,
    pub replayed: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct NotReproduced {
    pub record: String,
    pub request_id: String,
    pub why: String,
}

#[derive(Debug, Serialize)]
pub struct RecordError {
    pub record: String,
    pub error: String,
}

/// Replays every record of `dir` with `config` (its engine and limits).
pub fn replay(dir: &Path, config: &ServiceConfig, engine: &Engine) -> std::io::Result<Report> {
    let files = record::record_files(dir)?;
    let mut report = Report {
        config: config.digest(),
        replayed: 0,
        changed: 0,
        unchanged: 0,
        not_reproduced: 0,
        without_config: 0,
        failed: 0,
        changes: Vec::new(),
        not_reproduced_records: Vec::new(),
        errors: Vec::new(),
    };
    let mut baselines: HashMap<String, Result<Engine, String>> = HashMap::new();
    for (_, path, _) in files {
        let name = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let outcome = record::read_record(&path).and_then(|file| {
            let baseline =
                baselines.entry(file.head.config.clone()).or_insert_with(|| baseline(dir, &file.head.config));
            let without_config = baseline.is_err();
            replay_one(&file, baseline.as_ref(), engine, &config.limits).map(|o| (file, o, without_config))
        });
        let (file, outcome, without_config) = match outcome {
            Ok(done) => done,
            Err(error) => {
                report.failed += 1;
                report.errors.push(RecordError { record: name, error });
                continue;
            }
        };
        report.replayed += 1;
        report.without_config += usize::from(without_config);
        if let Some(why) = outcome.not_reproduced {
            report.not_reproduced += 1;
            report.not_reproduced_records.push(NotReproduced {
                record: name.clone(),
                request_id: file.head.request_id.clone(),
                why,
            });
        }
        match outcome.difference {
            None => report.unchanged += 1,
            Some(difference) => {
                report.changed += 1;
                report.changes.push(Change {
                    record: name,
                    request_id: file.head.request_id,
                    recorded: file.head.decision,
                    replayed: outcome.replayed,
                    difference,
                });
            }
        }
    }
    Ok(report)
}

/// The engine of a recorded config.
fn baseline(dir: &Path, digest: &str) -> Result<Engine, String> {
    let path = record::config_path(dir, digest);
    if !path.exists() {
        return Err(format!("the recorded config {digest} is not in {}", dir.join("configs").display()));
    }
    let config = ServiceConfig::load(Some(&path), Vec::new()).map_err(|e| e.to_string())?;
    config.engine().map_err(|e| e.to_string())
}

struct Outcome {
    replayed: Decision,
    /// Why the baseline does not give the recorded answer, if it does not.
    not_reproduced: Option<String>,
    /// Set when the decision changed.
    difference: Option<Difference>,
}

fn replay_one(
    file: &RecordFile,
    baseline: Result<&Engine, &String>,
    engine: &Engine,
    limits: &Limits,
) -> Result<Outcome, String> {
    let body = file.body.get().as_bytes();
    let head = &file.head;
    let parse = || -> Result<AllocateBody<'_>, String> {
        let mut request = parse_allocate_body(body).map_err(|e| AnswerError::from(e).to_string())?;
        request.seed = head.seed.or(request.seed);
        Ok(request)
    };
    if parse()?.batch.is_batch() {
        return replay_batch(file, baseline, engine, limits, &parse);
    }
    let decide = |engine: &Engine| -> Result<(AllocateBody<'_>, Allocation), String> {
        let mut request = parse()?;
        let allocation = answer::decide_noting(engine, limits, &mut request, true).map_err(|e| e.to_string())?;
        Ok((request, allocation))
    };
    let (request, new) = decide(engine)?;
    let replayed = Decision::from(&Verdict::of(&request, &new));
    let changed = replayed != head.decision;
    let (old_request, old) = match baseline {
        Ok(old_engine) => decide(old_engine)?,
        Err(why) => {
            let difference = changed.then(|| Difference::Unexplained { why: why.clone() });
            return Ok(Outcome { replayed, not_reproduced: Some(why.clone()), difference });
        }
    };
    let baseline_decision = Decision::from(&Verdict::of(&old_request, &old));
    let not_reproduced = if baseline_decision != head.decision {
        Some(format!("its own config decides {baseline_decision}"))
    } else {
        let digest = answer_digest(&old_request, &old, &head.asked)?;
        (digest != head.answer_digest).then(|| "its own config writes another answer (digest differs)".to_string())
    };
    let difference = changed.then(|| difference(&request, &old, &new));
    Ok(Outcome { replayed, not_reproduced, difference })
}

/// The digest of the answer the service would have written.
fn answer_digest(request: &AllocateBody<'_>, allocation: &Allocation, asked: &AnswerAsked) -> Result<String, String> {
    let steps = match asked.steps.as_deref() {
        Some(name) => StepsFormat::parse(name).unwrap_or_default(),
        None => StepsFormat::Full,
    };
    let explain = asked.explain.as_ref().map(|uuids| {
        let mut options = ExplainOptions::default();
        if !uuids.is_empty() {
            options.ask_about(uuids.iter().cloned());
        }
        options
    });
    let options = AnswerOptions { steps, no_fit: NoFitBody::Error, exiting: false };
    let mut out = Vec::new();
    answer::write_explained_allocation(request, allocation, options, explain.as_ref(), &mut out, &mut |_| {})
        .map_err(|e| e.to_string())?;
    Ok(crate::digest::digest(&out))
}

/// Where the recorded config's run (`old`) and the new one part, on one request.
fn difference(request: &AllocateBody<'_>, old: &Allocation, new: &Allocation) -> Difference {
    let uuid = |id: usize| request.servers[id].reason_key();
    let all: Vec<usize> = (0..request.servers.len()).collect();
    let step_difference = |change, index: usize, step: &crate::engine::Step, before: &[usize], after: &[usize]| {
        let only = |a: &[usize], b: &[usize]| -> Vec<String> {
            let mut ids: Vec<usize> = a.iter().copied().filter(|id| !b.contains(id)).collect();
            ids.sort_unstable();
            ids.into_iter().map(uuid).collect()
        };
        Difference::Step {
            change,
            // The answer lists `Received by DAPI` before the plugins' steps.
            index: index + 1,
            plugin: step.plugin,
            step: step.name,
            only_recorded: only(before, after),
            only_replayed: only(after, before),
        }
    };
    let (a, b) = (&old.steps, &new.steps);
    let (mut i, mut j) = (0, 0);
    loop {
        let old_at = if i == 0 { &all[..] } else { &a[i - 1].remaining[..] };
        let new_at = if j == 0 { &all[..] } else { &b[j - 1].remaining[..] };
        match (a.get(i), b.get(j)) {
            (None, None) => break,
            (Some(o), Some(n)) if o.plugin == n.plugin => {
                if !same_servers(&o.remaining, &n.remaining) {
                    return step_difference("changed", j, n, &o.remaining, &n.remaining);
                }
                i += 1;
                j += 1;
            }
            (_, Some(n)) if !a[i..].iter().any(|o| o.plugin == n.plugin) => {
                if !same_servers(old_at, &n.remaining) {
                    return step_difference("added", j, n, old_at, &n.remaining);
                }
                j += 1;
            }
            (Some(o), _) if !b[j..].iter().any(|n| n.plugin == o.plugin) => {
                if !same_servers(&o.remaining, new_at) {
                    return step_difference("dropped", i, o, &o.remaining, new_at);
                }
                i += 1;
            }
            (Some(o), Some(n)) => return step_difference("reordered", j, n, &o.remaining, &n.remaining),
            // Unreachable: one side ended, so the other's plugin is not in it.
            (None, Some(_)) | (Some(_), None) => break,
        }
    }
    score_difference(request, old, new)
}

/// Both runs kept the same servers at every step: compare the two winners' score parts.
fn score_difference(request: &AllocateBody<'_>, old: &Allocation, new: &Allocation) -> Difference {
    let (Some(a), Some(b)) = (old.chosen, new.chosen) else {
        return Difference::Unexplained { why: "every step left the same servers, yet one run chose none".into() };
    };
    let options = ExplainOptions::default();
    let (old_x, new_x) =
        (explain::explain(&request.servers, old, &options), explain::explain(&request.servers, new, &options));
    let parts = |x: &explain::Explain, id: usize| -> Vec<(&'static str, f64)> {
        x.servers().nth(id).map(|s| s.scores.iter().map(|p| (p.plugin, p.contribution)).collect()).unwrap_or_default()
    };
    let (old_a, old_b, new_a, new_b) = (parts(&old_x, a), parts(&old_x, b), parts(&new_x, a), parts(&new_x, b));
    let mut plugins: Vec<&'static str> = Vec::new();
    for (p, _) in old_a.iter().chain(&old_b).chain(&new_a).chain(&new_b) {
        if !plugins.contains(p) {
            plugins.push(p);
        }
    }
    let of = |list: &[(&'static str, f64)], plugin: &str| {
        list.iter().filter(|(p, _)| *p == plugin).map(|(_, c)| c).sum::<f64>()
    };
    let scorers: Vec<ScoreSwing> = plugins
        .into_iter()
        .map(|plugin| {
            let recorded = [of(&old_a, plugin), of(&old_b, plugin)];
            let replayed = [of(&new_a, plugin), of(&new_b, plugin)];
            let swing = (replayed[1] - replayed[0]) - (recorded[1] - recorded[0]);
            ScoreSwing { plugin, recorded, replayed, swing }
        })
        .collect();
    let decisive =
        scorers.iter().filter(|s| s.swing > 0.0).max_by(|x, y| x.swing.total_cmp(&y.swing)).map(|s| s.plugin);
    Difference::Scores {
        recorded_winner: request.servers[a].reason_key(),
        replayed_winner: request.servers[b].reason_key(),
        decisive,
        scorers,
    }
}

/// A batch: decided whole with each config, compared VM by VM.
fn replay_batch<'b>(
    file: &RecordFile,
    baseline: Result<&Engine, &String>,
    engine: &Engine,
    limits: &Limits,
    parse: &dyn Fn() -> Result<AllocateBody<'b>, String>,
) -> Result<Outcome, String> {
    let options = BatchOptions { steps: file.head.asked.steps.as_deref().and_then(StepsFormat::parse), count: None };
    let run =
        |engine: &Engine| crate::batch::allocate_batch(engine, limits, parse()?, options).map_err(|e| e.to_string());
    let new = run(engine)?;
    let replayed = Decision::from(&new.verdict());
    let Ok(old_engine) = baseline else {
        let why = baseline.err().cloned().unwrap_or_default();
        let difference = (replayed != file.head.decision).then(|| Difference::Unexplained { why: why.clone() });
        return Ok(Outcome { replayed, not_reproduced: Some(why), difference });
    };
    let old = run(old_engine)?;
    let recorded_decision = Decision::from(&old.verdict());
    let not_reproduced = if recorded_decision != file.head.decision {
        Some(format!("its own config decides {recorded_decision}"))
    } else {
        None
    };
    let (old_vms, new_vms) = (batch_servers(&old.body), batch_servers(&new.body));
    let vms: Vec<BatchVm> = (0..old_vms.len().max(new_vms.len()))
        .filter_map(|index| {
            let (recorded, replayed) = (old_vms.get(index).cloned().flatten(), new_vms.get(index).cloned().flatten());
            (recorded != replayed).then_some(BatchVm { index, recorded, replayed })
        })
        .collect();
    let changed = !vms.is_empty() || replayed != file.head.decision;
    Ok(Outcome { replayed, not_reproduced, difference: changed.then_some(Difference::Batch { vms }) })
}

/// Each VM's server in a batch answer (`None`: not placed).
fn batch_servers(body: &[u8]) -> Vec<Option<String>> {
    let answer: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    answer["vms"]
        .as_array()
        .map(|vms| vms.iter().map(|vm| vm["server_uuid"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The report for people.
pub fn text(report: &Report, dir: &Path) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Replayed {} recorded requests from {} with config {}: {} decisions changed, {} unchanged.",
        report.replayed,
        dir.display(),
        report.config,
        report.changed,
        report.unchanged
    );
    if report.not_reproduced > 0 {
        let _ = writeln!(out, "{} records not reproduced by their own config:", report.not_reproduced);
        for r in &report.not_reproduced_records {
            let _ = writeln!(out, "  {} (request {}): {}", r.record, r.request_id, r.why);
        }
    }
    if report.failed > 0 {
        let _ = writeln!(out, "{} records could not be replayed:", report.failed);
        for e in &report.errors {
            let _ = writeln!(out, "  {}: {}", e.record, e.error);
        }
    }
    for change in &report.changes {
        let _ = writeln!(out, "\n{} (request {})", change.record, change.request_id);
        let _ = writeln!(out, "  recorded: {}", change.recorded);
        let _ = writeln!(out, "  replayed: {}", change.replayed);
        match &change.difference {
            Difference::Step { change, index, plugin, step, only_recorded, only_replayed } => {
                let what = match *change {
                    "added" => "a step only the new chain has",
                    "dropped" => "a step only the recorded chain has",
                    "reordered" => "the chains' steps run in another order from here",
                    _ => "the step leaves other servers",
                };
                let _ = writeln!(out, "  differs at step {index}: {plugin} ({step}): {what}");
                if !only_recorded.is_empty() {
                    let _ = writeln!(out, "    left only with the recorded config: {}", list(only_recorded));
                }
                if !only_replayed.is_empty() {
                    let _ = writeln!(out, "    left only with the new config: {}", list(only_replayed));
                }
            }
            Difference::Scores { recorded_winner, replayed_winner, decisive, scorers } => {
                let _ = writeln!(
                    out,
                    "  every step left the same servers; the scores differ{}",
                    decisive.map_or(String::new(), |d| format!(" (decisive: {d})"))
                );
                let _ = writeln!(
                    out,
                    "    {:<28} {:>21} {:>21} {:>9}",
                    "SCORER", "RECORDED (A / B)", "NEW (A / B)", "SWING"
                );
                for s in scorers {
                    let _ = writeln!(
                        out,
                        "    {:<28} {:>21} {:>21} {:>9}",
                        s.plugin,
                        format!("{} / {}", short(s.recorded[0]), short(s.recorded[1])),
                        format!("{} / {}", short(s.replayed[0]), short(s.replayed[1])),
                        short(s.swing)
                    );
                }
                let _ = writeln!(out, "    A = {recorded_winner}, B = {replayed_winner}");
            }
            Difference::Batch { vms } => {
                for vm in vms {
                    let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".into());
                    let _ = writeln!(out, "  vm {}: {} → {}", vm.index, show(&vm.recorded), show(&vm.replayed));
                }
            }
            Difference::Unexplained { why } => {
                let _ = writeln!(out, "  not explained: {why}");
            }
        }
    }
    out
}

fn list(uuids: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = uuids.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if uuids.len() > SHOWN {
        let _ = write!(text, " and {} more", uuids.len() - SHOWN);
    }
    text
}

fn short(n: f64) -> String {
    let text = format!("{n:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".into()
    } else {
        text.to_string()
    }
}
