//! Command-line front end: the same engine as the service, one request from a file.
//!
//! * `dapi allocate [--config FILE] REQUEST.json` prints what `POST /allocate` answers.
//! * `dapi capacity [--config FILE] SERVERS.json` prints what `POST /capacity` answers.
//!
//! Exit status: 0 when an answer was printed (whether or not a server was chosen), 2 for
//! invalid input or config, 1 for an internal error.

use std::io::Write;
use std::process::ExitCode;

use crate::config;
use crate::engine::Engine;
use crate::model::{parse_allocate_body, parse_capacity_body, BodyError};
use crate::validate::validate_allocate;

const USAGE: &str = "usage: dapi allocate [--config FILE] REQUEST.json
       dapi capacity [--config FILE] SERVERS.json";

/// Why the command failed, and with which exit status.
enum Failure {
    Usage(String),
    Invalid(String),
    Internal(String),
}

pub fn main(args: &[String]) -> ExitCode {
    let result = match args.first().map(String::as_str) {
        Some("allocate") => run(&args[1..], allocate),
        Some("capacity") => run(&args[1..], capacity),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(Failure::Usage(USAGE.into())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg) | Failure::Invalid(msg)) => {
            eprintln!("dapi: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Internal(msg)) => {
            eprintln!("dapi: internal error: {msg}");
            ExitCode::from(1)
        }
    }
}

type Command = fn(&Engine, &[u8]) -> Result<String, Failure>;

fn run(args: &[String], command: Command) -> Result<(), Failure> {
    let mut config_path = None;
    let mut input = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--config" => {
                config_path = Some(rest.next().ok_or_else(|| Failure::Usage("--config needs a FILE".into()))?)
            }
            _ if input.is_none() => input = Some(arg),
            _ => return Err(Failure::Usage(format!("unexpected argument {arg}\n{USAGE}"))),
        }
    }
    let input = input.ok_or_else(|| Failure::Usage(USAGE.into()))?;
    let engine_config = match config_path {
        Some(path) => config::read_engine_config(path),
        None => config::default_engine_config(),
    }
    .map_err(Failure::Invalid)?;
    let engine = Engine::from_config(&engine_config).map_err(Failure::Invalid)?;
    let body = std::fs::read(input).map_err(|e| Failure::Invalid(format!("cannot read {input}: {e}")))?;
    let out = command(&engine, &body)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{out}").map_err(|e| Failure::Internal(e.to_string()))
}

fn body_error(e: BodyError) -> Failure {
    match e {
        BodyError::Malformed(msg) => Failure::Invalid(msg),
        BodyError::Invalid(errors) => Failure::Invalid(
            errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; "),
        ),
    }
}

fn allocate(engine: &Engine, body: &[u8]) -> Result<String, Failure> {
    let mut request = parse_allocate_body(body).map_err(body_error)?;
    validate_allocate(&mut request).map_err(|e| Failure::Invalid(format!("{}: {}", e.field, e.message)))?;
    let allocation = engine.allocate(&request).map_err(|e| Failure::Internal(e.to_string()))?;
    let answer = allocation.answer(&request.raw_servers, &request.servers);
    serde_json::to_string(&answer).map_err(|e| Failure::Internal(e.to_string()))
}

fn capacity(engine: &Engine, body: &[u8]) -> Result<String, Failure> {
    let (_, servers) = parse_capacity_body(body).map_err(body_error)?;
    let capacity = engine.capacity(&servers).map_err(|e| Failure::Internal(e.to_string()))?;
    serde_json::to_string(&capacity.answer(&servers)).map_err(|e| Failure::Internal(e.to_string()))
}
