//! Command-line front end: the same engine as the service, one request from a file.
//!
//! * `dapi allocate [--config FILE] [--steps full|removed] REQUEST.json` prints what
//!   `POST /allocate` answers (`--steps removed`: what `POST /allocate?steps=removed` answers).
//! * `dapi capacity [--config FILE] SERVERS.json` prints what `POST /capacity` answers.
//! * `dapi serve [--config FILE]` runs the HTTP service.
//! * `dapi openapi` prints the service's OpenAPI document.
//!
//! Exit status: 0 when an answer was printed (whether or not a server was chosen), 2 for
//! invalid input or config, 1 for an internal error.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use crate::answer::{self, AnswerError, AnswerOptions, NoFitBody};
use crate::config::{Limits, ServiceConfig};
use crate::engine::{Engine, StepsFormat};

const USAGE: &str = "usage: dapi serve [--config FILE]
       dapi allocate [--config FILE] [--steps full|removed] REQUEST.json
       dapi capacity [--config FILE] SERVERS.json
       dapi openapi";

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
        Some("serve") => serve(&args[1..]),
        Some("openapi") => {
            print!("{}", crate::http::openapi::document());
            Ok(())
        }
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

/// Options of `allocate` (and `capacity`, which takes none but `--config`).
#[derive(Default)]
struct Options {
    steps: Option<StepsFormat>,
}

type Command = fn(&Engine, &Limits, &[u8], &Options) -> Result<Vec<u8>, Failure>;

fn run(args: &[String], command: Command) -> Result<(), Failure> {
    let mut config_path = None;
    let mut input = None;
    let mut options = Options::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--config" => {
                config_path = Some(rest.next().ok_or_else(|| Failure::Usage("--config needs a FILE".into()))?)
            }
            "--steps" => {
                let name = rest.next().ok_or_else(|| Failure::Usage("--steps needs full or removed".into()))?;
                let format = StepsFormat::parse(name)
                    .ok_or_else(|| Failure::Usage(format!("--steps must be full or removed, not {name:?}")))?;
                options.steps = Some(format);
            }
            _ if input.is_none() => input = Some(arg),
            _ => return Err(Failure::Usage(format!("unexpected argument {arg}\n{USAGE}"))),
        }
    }
    let input = input.ok_or_else(|| Failure::Usage(USAGE.into()))?;
    let config =
        ServiceConfig::from_process(config_path.map(Path::new)).map_err(|e| Failure::Invalid(e.to_string()))?;
    let engine = config.engine().map_err(|e| Failure::Invalid(e.to_string()))?;
    let body = std::fs::read(input).map_err(|e| Failure::Invalid(format!("cannot read {input}: {e}")))?;
    let mut out = command(&engine, &config.limits, &body, &options)?;
    out.push(b'\n');
    std::io::stdout().lock().write_all(&out).map_err(|e| Failure::Internal(e.to_string()))
}

fn answer_error(e: AnswerError) -> Failure {
    match e {
        AnswerError::Internal(msg) => Failure::Internal(msg),
        e => Failure::Invalid(e.to_string()),
    }
}

fn allocate(engine: &Engine, limits: &Limits, body: &[u8], options: &Options) -> Result<Vec<u8>, Failure> {
    // No fit prints {"server": null, "steps": [...]} (exit 0), not the service's 409 body.
    let options = AnswerOptions { steps: options.steps.unwrap_or_default(), no_fit: NoFitBody::NullServer };
    Ok(answer::allocate(engine, limits, body, options).map_err(answer_error)?.body)
}

fn capacity(engine: &Engine, limits: &Limits, body: &[u8], options: &Options) -> Result<Vec<u8>, Failure> {
    if options.steps.is_some() {
        return Err(Failure::Usage(format!("--steps is an option of allocate only\n{USAGE}")));
    }
    Ok(answer::capacity(engine, limits, body).map_err(answer_error)?.body)
}

fn serve(args: &[String]) -> Result<(), Failure> {
    let config_path = match args {
        [] => None,
        [flag, path] if flag == "--config" => Some(path.as_str()),
        _ => return Err(Failure::Usage(USAGE.into())),
    };
    let config =
        ServiceConfig::from_process(config_path.map(Path::new)).map_err(|e| Failure::Invalid(e.to_string()))?;
    crate::http::logging::init(&config.log_level);
    let file = config_path.map(std::path::PathBuf::from).or_else(|| std::env::var_os("DAPI_CONFIG").map(Into::into));
    let listen = config.listen.clone();
    let digest = config.digest();
    let app = crate::http::AppState::new(config, file).map_err(|e| Failure::Invalid(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Internal(format!("cannot start the runtime: {e}")))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|e| Failure::Invalid(format!("cannot listen on {listen}: {e}")))?;
        let addr = listener.local_addr().map_or(listen.clone(), |a| a.to_string());
        tracing::info!(addr = %addr, config = %digest, version = env!("CARGO_PKG_VERSION"), "dapi listening");
        crate::http::serve(listener, std::sync::Arc::new(app))
            .await
            .map_err(|e| Failure::Internal(format!("server failed: {e}")))
    })
}
