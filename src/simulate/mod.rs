//! `dapi simulate`: what a chain does to a datacenter over time (issue 13 §3, after the
//! original's `bin/sim.js`).
//!
//! A datacenter (a CNAPI server dump, or generated racks: [`datacenter`]) takes a workload
//! (a VMAPI dump replayed in time order, or a seeded package mix: [`workload`]); each
//! creation is allocated by the engine on the datacenter as it is then, with up to K
//! provisions in flight as tickets, and each destruction unlisted ([`run`]). One or two
//! configs run on the same workload (two at once, one per core). The figures
//! ([`report`]) come out as a terminal summary ([`text`]), JSON, CSV, or one self-contained
//! HTML page ([`html`]).

pub mod datacenter;
pub mod html;
pub mod report;
pub mod run;
pub mod text;
pub mod workload;

use serde_json::Value;

use crate::engine::Engine;
use crate::model::FieldError;

/// Where the servers come from.
#[derive(Debug, Clone)]
pub enum Servers {
    /// A CNAPI dump's JSON (`{"servers": [...]}` or a bare array), as `/capacity` takes it.
    Dump(Vec<u8>),
    Generate(datacenter::Generate),
}

/// Everything a simulation needs besides the engines.
#[derive(Debug, Clone)]
pub struct Simulation {
    pub servers: Servers,
    /// The workload file's bytes.
    pub workload: Vec<u8>,
    pub seed: u64,
    pub concurrency: usize,
    /// Include wall-clock figures (decision times).
    pub timing: bool,
}

/// Why a simulation could not run.
#[derive(Debug)]
pub enum SimError {
    /// An input is wrong: the field and what to fix.
    Invalid(FieldError),
    /// The engine failed (a bug, or a custom plugin's error).
    Engine(String),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Invalid(e) => write!(f, "{}: {}", e.field, e.message),
            SimError::Engine(m) => write!(f, "internal error: {m}"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<FieldError> for SimError {
    fn from(e: FieldError) -> SimError {
        SimError::Invalid(e)
    }
}

/// One config of a simulation.
pub struct Chain<'e> {
    /// How the reports name it (its file).
    pub label: String,
    pub engine: &'e Engine,
    /// Whether its plugins read the servers' JSON (owner filters, custom plugins): only
    /// then is each server's JSON rewritten when its VMs change.
    pub reads_json: bool,
}

impl<'e> Chain<'e> {
    /// `engine`, reading the servers' JSON when it has owner filters or `custom_plugins`.
    pub fn new(label: String, engine: &'e Engine, custom_plugins: bool) -> Chain<'e> {
        let owner_filters = engine.defaults().filter_owner_server.as_obj().is_some_and(|o| !o.is_empty());
        Chain { label, engine, reads_json: owner_filters || custom_plugins }
    }
}

/// Runs the simulation with each chain (one or two) and returns the report document
/// ([`report::document`]).
pub fn simulate(sim: &Simulation, engines: &[Chain<'_>]) -> Result<Value, SimError> {
    if sim.concurrency == 0 || sim.concurrency > 10_000 {
        return Err(FieldError::invalid("concurrency", "must be from 1 to 10000").into());
    }
    let (text, source) = match &sim.servers {
        Servers::Dump(bytes) => {
            let text = std::str::from_utf8(bytes)
                .map_err(|_| FieldError::invalid("servers", "the server dump is not UTF-8"))?
                .to_string();
            (text, "dump")
        }
        Servers::Generate(g) => {
            g.check()?;
            (g.to_json(), "generated")
        }
    };
    // Read once here so that a bad dump is reported before any run, naming the field.
    let server_count = {
        let (_, servers) = crate::wire::parse_capacity_body(text.as_bytes()).map_err(|e| match e {
            crate::model::BodyError::Malformed(m) => FieldError::invalid("servers", m),
            crate::model::BodyError::Invalid(errors) => {
                errors.into_iter().next().unwrap_or_else(|| FieldError::invalid("servers", "cannot be read"))
            }
        })?;
        crate::validate::validate_server_list(&servers)?;
        if servers.is_empty() {
            return Err(FieldError::invalid("servers", "the datacenter has no servers").into());
        }
        servers.len()
    };
    let workload = workload::read(&sim.workload, sim.seed)?;
    let classes = report::classes(&workload);
    let options = run::RunOptions { seed: sim.seed, concurrency: sim.concurrency, samples: 100, keep_json: false };
    // Two configs run at once, one per core; each has its own datacenter.
    let results: Vec<Result<run::RunResult, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = engines
            .iter()
            .map(|chain| {
                let options = run::RunOptions { keep_json: chain.reads_json, ..options };
                let (text, workload, classes) = (&text, &workload, &classes);
                scope.spawn(move || run::run(chain.engine, text, workload, classes, options))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a run panicked".into()))).collect()
    });
    let mut runs = Vec::with_capacity(results.len());
    for (chain, result) in engines.iter().zip(results) {
        runs.push((chain.label.clone(), result.map_err(SimError::Engine)?));
    }
    let inputs = report::Inputs {
        datacenter: source,
        servers: server_count,
        workload: &workload,
        seed: sim.seed,
        concurrency: sim.concurrency,
        classes: &classes,
        timing: sim.timing,
    };
    Ok(report::document(&inputs, &runs))
}
