//! The `dapi` command: `serve`, `allocate`, `explain`, `capacity`, `check`, `plugins`,
//! `replay`, `simulate`, `inventory load`, `openapi`.
//!
//! `allocate` and `capacity` run one request through the same answer path as the service
//! ([`crate::answer`]) and print the answer; `serve` runs the HTTP service. The help texts
//! below are the command's documentation (`dapi --help`, `dapi allocate --help`).

use std::ffi::OsString;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::answer::{self, AnswerOptions, NoFitBody};
use crate::config::{ConfigError, ServiceConfig};
use crate::engine::{Engine, Registry, StepsFormat};
use crate::explain::ExplainOptions;
use crate::outcome::AnswerError;
use crate::plugins::custom_js::CustomSet;
use crate::wire::pages::Input;

const CONFIG_HELP: &str = "\
Configuration (later layers win, key by key):
  1. built-in: CNAPI's production plugin chain and defaults
  2. --config FILE (or DAPI_CONFIG=FILE): a JSON object with any of allocationDescription
     (replaces the chain), defaults (merged), listen, log_level, limits, auth_token,
     plugins_dir, record, shadow_config, shadow_cpu_ms_per_s, inventory
  3. environment variables DAPI_<KEY>, with __ between nested keys

Environment:
  DAPI_CONFIG                      the config file, when --config is not given
  DAPI_LISTEN                      host:port to serve on [127.0.0.1:8080]; a host name
                                   (localhost:8080) or IPv6 in brackets ([::1]:8080)
  DAPI_LOG_LEVEL                   error, warn, info, debug or trace [info]
  DAPI_AUTH_TOKEN                  bearer token /allocate, /capacity, /admin/reload and
                                   /inventory/* require
  DAPI_LIMITS__MAX_SERVERS         most servers in one request [20000]
  DAPI_LIMITS__MAX_VMS_PER_SERVER  most VMs on one server of a request [10000]
  DAPI_LIMITS__MAX_BODY_BYTES      largest request body (serve) [268435456]
  DAPI_LIMITS__MAX_CONCURRENT_ALLOCATIONS
                                   allocations served at once (serve) [2 per core]
  DAPI_LIMITS__REQUEST_TIMEOUT_MS  longest a request may take (serve) [30000]
  DAPI_PLUGINS_DIR                 a directory of custom plugins: every *.js file in it
                                   (module.exports = {name, run(servers, opts, cb)}) is
                                   usable in the chain under its file name
  DAPI_LIMITS__PLUGIN_TIMEOUT_MS   longest one call of a custom plugin [1000]
  DAPI_LIMITS__PLUGIN_MEMORY_BYTES memory of the custom plugins' engine, per thread [536870912]
  DAPI_RECORD__DIR                 record /allocate requests here for `dapi replay` (serve);
                                   DAPI_RECORD__MAX_COUNT [10000], DAPI_RECORD__MAX_BYTES [1 GiB]
  DAPI_SHADOW_CONFIG               a second config file each allocation is also decided with,
                                   divergences logged and counted (serve);
                                   DAPI_SHADOW_CPU_MS_PER_S its CPU budget [250]
  DAPI_INVENTORY__URL              PostgreSQL URL (postgresql://user@host/db): inventory mode,
                                   the datacenter kept by dapi, /allocate needs only the VM
                                   (serve); DAPI_INVENTORY__STALENESS_MS [3000],
                                   DAPI_INVENTORY__CLAIM_TTL_S [600],
                                   DAPI_INVENTORY__RECURRING_KINDS [4]
  DAPI_DEFAULTS__<NAME>            one allocator default, e.g. DAPI_DEFAULTS__FILTER_HEADNODE=false
                                   (read as a boolean or number when it looks like one)
  DAPI_DEFAULTS                    all allocator defaults, as a JSON object
  DAPI_ALLOCATIONDESCRIPTION       the plugin chain, as JSON: [\"pipe\", \"hard-filter-setup\", ...]

Exit status:
  0  the answer was printed (for allocate: also when no server fits)
  1  the decision failed: a bug of ours, or a custom plugin that threw or called back
     with an error (the message names it)
  2  invalid request, config or command line (the message on stderr says what to fix);
     for replay also: no records in DIR, or some could not be replayed or checked against
     their recorded config in DIR/configs (report printed)";

const ALLOCATE_HELP: &str = "\
Runs the plugin chain on one request and prints the answer on one line, as
POST /allocate answers it.

REQUEST is a JSON file, or - for standard input, holding what POST /allocate takes:
  {\"servers\": [...],    CNAPI server objects, each with its \"vms\" (uuid → VM)
   \"vm\": {...},         the VM to place: brand, ram, owner_uuid, nic_tags, ...
   \"image\": {...},      its image (also read as \"img\")
   \"package\": {...},    optional, its package (also \"pkg\")
   \"tickets\": [...],    optional, open provisioning tickets
   \"nic_tags\", \"nic_tag_requirements\" (optional, copied into the VM as CNAPI did),
   \"seed\": N}           optional, makes score-uniform-random repeatable

Output:
  a server fits   {\"server\": {...}, \"steps\": [...]}  (the service: 200, the same body)
  none fits       {\"server\": null, \"steps\": [...]}   (the service: 409 with
                  {\"code\": \"NoAllocatableServersError\",
                   \"message\": \"No compute resources available: <reason>\", \"steps\": [...]})
Both exit 0. Each step is {\"step\", \"remaining\": [uuid...], \"reasons\"?: {uuid: why}};
with --steps removed: {\"step\", \"removed\": [uuid...], \"remaining_count\", \"reasons\"?};
with --steps counts: {\"step\", \"remaining_count\"} (nothing per server).";

const CAPACITY_HELP: &str = "\
Prints the spare CPU, RAM and disk of each server, as POST /capacity answers it.

SERVERS is a JSON file, or - for standard input: {\"servers\": [...]} or a bare array of
CNAPI server objects (with their \"vms\").

Output: {\"capacities\": {uuid: {\"cpu\", \"ram\", \"disk\"}}, \"reasons\": {...}}: cpu in
percent of one core, ram and disk in MiB; reasons say why servers were left out.";

const CHECK_HELP: &str = "\
Says which servers could take a VM of the given RAM, disk and CPU cap, and why not the
others, as the original's bin/check.js did (its successor: counted as dapi capacity
counts a package of that size, with the configured chain's filters and the allocator's
unreserved figures). Also lists the VMs with no quota or no cpu_cap, as check.js warned.

SERVERS is a JSON file, or - for standard input: {\"servers\": [...]} or a bare array of
CNAPI server objects (with their \"vms\").

Output: a table (SERVER, FITS, SLOTS, WHY NOT), the count, the warnings; with --json
{\"ask\", \"received\", \"fit\", \"servers\": [{\"server\", \"fits\", \"slots\"?, \"why\"?,
\"unreserved\"?, \"notes\"?}], \"warnings\": [{\"server\", \"vm\", \"problem\"}]}.";

const EXPLAIN_HELP: &str = "\
Runs the plugin chain on one request, as `dapi allocate --explain` does, and prints a
report for people: the servers removed grouped by cause (with the one that fell
shortest), the best candidates with their score broken down by scorer, and each
server asked about with --server (where it left, the reason, the shortfall in MiB or
CPU units). Colour when standard output is a terminal (not with NO_COLOR set).";

const REPLAY_HELP: &str = "\
Decides every request the service recorded (record.dir) again with the config given
(--config, laid over the built-in one as for serve) and reports how many decisions change,
which, and why: the first step that leaves other servers than with the recorded config
(kept in DIR/configs), or, when every step agrees, the scores of the two winners by
scorer. Records whose own config no longer gives the recorded answer are listed.";
const SIMULATE_HELP: &str = "\
Replays a workload on a datacenter with the plugin chain, as the original's bin/sim.js did,
and reports what it did: placements, failures (the first with its reason), utilisation per
dimension, servers used, stranded capacity, VMs per owner per server, decision times, and
the servers rack by rack. With --vs, a second config runs on the same workload and each
figure is shown side by side, with the VMs that landed differently.

Datacenter: --servers FILE (a CNAPI dump, as dapi capacity reads it), or generated:
  --racks, --servers-per-rack, --ram, --disk, --cpus (sizes as 512M, 256G, 3T).

WORKLOAD is a JSON file:
  a VMAPI dump: [{uuid, owner_uuid, ram, cpu_cap, quota, brand, create_timestamp,
    destroyed}, ...] (or {\"vms\": [...]}); creations and destructions replayed in time
    order; entries without create_timestamp are skipped;
  or a package mix: {\"packages\": [PAPI package, ...], \"weights\": [n, ...],
    \"count\": N, \"owners\": N?, \"brand\": \"joyent\"?}, drawn with --seed.

Output: the summary on standard output (or --json); --csv FILE and --report FILE (one
self-contained HTML page) as well. The same seed gives the same figures (--no-timing
leaves out the only ones that vary: decision times).";

const PLUGINS_HELP: &str = "\
Lists the plugins an allocation description may name: the built-in ones, then the custom
ones loaded from plugins_dir (DAPI_PLUGINS_DIR), each with its kind, its step name (as
answers show it) and, for custom ones, its file and the file's digest. A plugin file that
does not load is reported as serve would report it.";

const SERVE_HELP: &str = "\
Serves the HTTP API on the configured listen address (127.0.0.1:8080 unless set):
POST /allocate, POST /capacity, GET /ping, GET /metrics, GET /openapi.json,
POST /admin/reload; in inventory mode (inventory.url set) also /inventory/*, and
POST /allocate decides on the servers kept in PostgreSQL. Logs are bunyan JSON lines on
stdout. SIGHUP (or POST /admin/reload) re-reads the config file and environment; SIGTERM
or SIGINT stop accepting and let the requests in flight finish.";

/// Chooses the compute node for a new VM (a Rust revival of Triton's DAPI allocator).
#[derive(Debug, Parser)]
#[command(
    name = "dapi",
    version,
    arg_required_else_help = true,
    long_about = "Chooses the compute node for a new VM (a Rust revival of Triton's DAPI allocator).\n\n\
        Given the candidate servers (CNAPI server objects with their VMs), the VM, its image\n\
        and package, dapi runs a configurable chain of filters and scorers and answers with\n\
        the chosen server and every step that led there, or with why none fits.",
    after_help = CONFIG_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API
    #[command(long_about = SERVE_HELP, after_long_help = CONFIG_HELP)]
    Serve(ConfigArg),
    /// Choose a server for one request and print the answer
    #[command(long_about = ALLOCATE_HELP, after_long_help = CONFIG_HELP)]
    Allocate {
        #[command(flatten)]
        config: ConfigArg,
        /// How each step lists servers [default: full; removed for a batch]
        #[arg(long, value_enum)]
        steps: Option<Steps>,
        /// Place N copies of the request's vm, each seeing the ones before (a batch; a
        /// request with `vms` or `count` is one already)
        #[arg(long, value_name = "N")]
        count: Option<usize>,
        /// Add an "explain" member: where each server left and by how much it fell short,
        /// score breakdowns and ranks, causes grouped (the rest of the answer is unchanged)
        #[arg(long)]
        explain: bool,
        /// Explain only these servers (implies --explain; joins the body's "why_not")
        #[arg(long = "why-not", value_name = "UUID")]
        why_not: Vec<String>,
        /// The request: a JSON file, or - for standard input
        #[arg(value_name = "REQUEST")]
        request: PathBuf,
    },
    /// Explain an allocation in words: why this server, why not the others
    #[command(long_about = EXPLAIN_HELP, after_long_help = CONFIG_HELP)]
    Explain {
        #[command(flatten)]
        config: ConfigArg,
        /// A server to explain in detail (repeatable; joins the body's "why_not")
        #[arg(long = "server", value_name = "UUID")]
        servers: Vec<String>,
        /// The request: a JSON file, or - for standard input
        #[arg(value_name = "REQUEST")]
        request: PathBuf,
    },
    /// Print the spare CPU, RAM and disk of each server
    #[command(long_about = CAPACITY_HELP, after_long_help = CONFIG_HELP)]
    Capacity {
        #[command(flatten)]
        config: ConfigArg,
        /// A package (JSON file: one package object or an array of them); repeatable.
        /// Prints how many more VMs of each fit, as a table
        #[arg(long = "package", value_name = "PKG.json")]
        packages: Vec<PathBuf>,
        /// The VM template for --package (JSON file: brand, owner_uuid, traits, ...)
        #[arg(long, value_name = "VM.json", requires = "packages")]
        vm: Option<PathBuf>,
        /// Also count by placing VMs one after another with the whole chain
        #[arg(long, requires = "packages")]
        exact: bool,
        /// With --package: print the JSON answer rather than the table
        #[arg(long, requires = "packages")]
        json: bool,
        /// The servers: a JSON file, or - for standard input
        #[arg(value_name = "SERVERS")]
        servers: PathBuf,
    },
    /// Which servers could take a VM of this size, and why not the others (check.js)
    #[command(long_about = CHECK_HELP, after_long_help = CONFIG_HELP)]
    Check {
        #[command(flatten)]
        config: ConfigArg,
        /// The VM's RAM, MiB
        #[arg(long, value_name = "MiB", allow_negative_numbers = true)]
        ram: f64,
        /// The VM's disk (quota), GiB
        #[arg(long, value_name = "GiB", allow_negative_numbers = true)]
        disk: f64,
        /// The VM's CPU cap, percent of one core (0: uncapped)
        #[arg(long, value_name = "CAP", allow_negative_numbers = true)]
        cpu: f64,
        /// Print the JSON answer rather than the table
        #[arg(long)]
        json: bool,
        /// The servers: a JSON file, or - for standard input
        #[arg(value_name = "SERVERS")]
        servers: PathBuf,
    },
    /// List the plugins a chain may name: built-in ones and those of plugins_dir
    #[command(long_about = PLUGINS_HELP, after_long_help = CONFIG_HELP)]
    Plugins {
        #[command(flatten)]
        config: ConfigArg,
        /// Print JSON ([{name, kind, step, source, file?, digest?}]) instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Decide recorded requests again with a new config and show what changes
    #[command(long_about = REPLAY_HELP, after_long_help = CONFIG_HELP)]
    Replay {
        #[command(flatten)]
        config: ConfigArg,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
        /// The record directory (the service's record.dir)
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Replay a workload on a datacenter and report what the chain did (one or two configs)
    #[command(long_about = SIMULATE_HELP, after_long_help = CONFIG_HELP)]
    Simulate(Box<SimulateArgs>),
    /// Print the service's OpenAPI document
    Openapi,
    /// Inventory mode: feed the PostgreSQL inventory
    #[command(subcommand)]
    Inventory(InventoryCommand),
}

#[derive(Debug, Subcommand)]
enum InventoryCommand {
    /// Replace the whole inventory with a dump, in one transaction (as POST /inventory/load)
    Load {
        /// The inventory's PostgreSQL URL (postgresql://user@host:port/db)
        #[arg(long, env = "DAPI_INVENTORY__URL", value_name = "URL")]
        url: String,
        /// The dump: {"servers": [...]} or a bare array of CNAPI server objects (with
        /// their "vms"); - for standard input
        #[arg(value_name = "DUMP")]
        dump: PathBuf,
    },
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Config A (JSON, laid over the built-in config) [default: $DAPI_CONFIG, if set]
    #[arg(long, value_name = "A.json")]
    config: Option<PathBuf>,
    /// Config B, run on the same workload beside A
    #[arg(long, value_name = "B.json")]
    vs: Option<PathBuf>,
    /// The datacenter: a CNAPI server dump ({"servers": [...]} or a bare array)
    #[arg(long, value_name = "SERVERS.json", conflicts_with_all = ["racks", "servers_per_rack", "ram", "disk", "cpus"])]
    servers: Option<PathBuf>,
    /// Generated datacenter: racks
    #[arg(long, default_value_t = 24)]
    racks: usize,
    /// Generated datacenter: servers in each rack
    #[arg(long, default_value_t = 12)]
    servers_per_rack: usize,
    /// Generated datacenter: RAM of each server
    #[arg(long, default_value = "256G")]
    ram: String,
    /// Generated datacenter: zpool size of each server
    #[arg(long, default_value = "3T")]
    disk: String,
    /// Generated datacenter: CPU cores of each server
    #[arg(long, default_value_t = 32)]
    cpus: u32,
    /// Seed of the package mix and of score-uniform-random (placement n uses seed + n)
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Provisions in flight: each VM is allocated while the K-1 before it are still
    /// open tickets
    #[arg(long, default_value_t = 1, value_name = "K")]
    concurrency: usize,
    /// Print the figures as JSON instead of the summary
    #[arg(long)]
    json: bool,
    /// Also write per-server figures as CSV (- for standard output)
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Also write a self-contained HTML report
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Leave out decision times (the only figures that differ between identical runs)
    #[arg(long)]
    no_timing: bool,
    /// The workload: a VMAPI VM dump or a package mix (JSON file, - for standard input)
    #[arg(value_name = "WORKLOAD")]
    workload: PathBuf,
}

#[derive(Debug, Args)]
struct ConfigArg {
    /// Config file (JSON) laid over the built-in config [default: $DAPI_CONFIG, if set]
    // DAPI_CONFIG is read with the other layers (ServiceConfig::from_process), where an
    // empty value names no file; clap's `env` would refuse it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

impl ConfigArg {
    /// The config (its layers over the built-in one) and the engine it describes.
    fn load(&self) -> Result<(ServiceConfig, Engine), CliError> {
        let config = ServiceConfig::from_process(self.config.as_deref())?;
        let engine = config.engine()?;
        Ok((config, engine))
    }
}

/// `--steps`: the CLI's name for [`StepsFormat`].
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Steps {
    /// Every step lists the servers left after it (what CNAPI reads)
    Full,
    /// Every step lists only the servers it removed (much smaller for big datacenters)
    Removed,
    /// Every step gives only how many servers it left (the smallest answer)
    Counts,
}

impl From<Steps> for StepsFormat {
    fn from(steps: Steps) -> StepsFormat {
        match steps {
            Steps::Full => StepsFormat::Full,
            Steps::Removed => StepsFormat::Removed,
            Steps::Counts => StepsFormat::Counts,
        }
    }
}

/// Why the command failed.
#[derive(Debug)]
pub enum CliError {
    /// The config cannot be used.
    Config(ConfigError),
    /// The input cannot be read (`input` as given; `-` is standard input).
    Read { input: PathBuf, error: std::io::Error },
    /// An output file cannot be written.
    Write { output: PathBuf, error: std::io::Error },
    /// The request was refused (or, for `Internal`, failed).
    Answer(AnswerError),
    /// The listen address cannot be bound.
    Listen { addr: String, error: std::io::Error },
    /// The async runtime, the server or the output failed.
    Io { what: &'static str, error: std::io::Error },
    /// Inventory mode's database cannot be used (out of reach, refused the migration).
    Inventory(String),
}

impl CliError {
    /// 2 for what the caller can fix (input, config, address), 1 for our own failures.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Answer(e) if !e.is_caller_error() => 1,
            CliError::Io { .. } => 1,
            _ => 2,
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Config(e) => e.fmt(f),
            CliError::Read { input, error } if input == Path::new("-") => {
                write!(f, "cannot read standard input: {error}")
            }
            CliError::Read { input, error } => write!(f, "cannot read {}: {error}", input.display()),
            CliError::Write { output, error } => write!(f, "cannot write {}: {error}", output.display()),
            CliError::Answer(e) => e.fmt(f),
            CliError::Listen { addr, error } => write!(f, "cannot listen on {addr}: {error}"),
            CliError::Io { what, error } => write!(f, "internal error: {what}: {error}"),
            CliError::Inventory(message) => write!(f, "inventory: {message}"),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Config(e) => Some(e),
            CliError::Answer(e) => Some(e),
            CliError::Read { error, .. }
            | CliError::Write { error, .. }
            | CliError::Listen { error, .. }
            | CliError::Io { error, .. } => Some(error),
            CliError::Inventory(_) => None,
        }
    }
}

impl From<ConfigError> for CliError {
    fn from(e: ConfigError) -> CliError {
        CliError::Config(e)
    }
}

impl From<AnswerError> for CliError {
    fn from(e: AnswerError) -> CliError {
        CliError::Answer(e)
    }
}

/// Runs the command line `args` (the program name first) and says how it went.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // --help and --version land here too (exit 0); usage errors exit 2.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader of the answer stopped reading (`| head`): it has what it wanted.
        Err(CliError::Io { error, .. }) if error.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dapi: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(command: Command) -> Result<(), CliError> {
    match command {
        Command::Serve(ConfigArg { config }) => serve(config),
        Command::Allocate { config, steps, count, explain, why_not, request } => {
            let (config, engine) = config.load()?;
            let body = read_input(&request)?;
            // No fit prints {"server": null, "steps": [...]} and exits 0 (the service: 409).
            let options = AnswerOptions {
                steps: steps.unwrap_or(Steps::Full).into(),
                no_fit: NoFitBody::NullServer,
                exiting: true,
            };
            let batch = crate::batch::BatchOptions { steps: steps.map(Into::into), count };
            let explain = (explain || !why_not.is_empty()).then(|| explain_options(why_not));
            // Printed while it is written: a big answer (~8 MB at 5000 servers) is then
            // never whole in memory next to the request.
            let mut printer = PartPrinter::new();
            let answer = answer::allocate_in_parts(
                &engine,
                &config.limits,
                &body,
                options,
                batch,
                explain,
                Some(PRINT_PART_BYTES),
                &mut |out| printer.part_done(out),
            )?;
            printer.finish(answer.body)
        }
        Command::Explain { config, servers, request } => {
            use std::io::IsTerminal;
            let (config, engine) = config.load()?;
            let body = read_input(&request)?;
            let colour = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            let text = answer::explain_report(&engine, &config.limits, &body, explain_options(servers), colour)?;
            print(text.into_bytes())
        }
        Command::Inventory(InventoryCommand::Load { url, dump }) => inventory_load(&url, &dump),
        Command::Capacity { config, packages, vm, exact, json, servers } => {
            let (config, engine) = config.load()?;
            let mut body = read_input(&servers)?;
            if !packages.is_empty() {
                body = Input::Read(package_body(&body, &packages, vm.as_deref(), exact)?);
            }
            let answer = answer::capacity(&engine, &config.limits, &body, true)?;
            if packages.is_empty() || json {
                return print(answer.body);
            }
            let text = std::str::from_utf8(&answer.body)
                .map_err(|e| CliError::Answer(AnswerError::Internal(e.to_string())))?;
            let value: serde_json::Value =
                crate::js::json::from_str(text).map_err(|e| CliError::Answer(AnswerError::Internal(e.to_string())))?;
            print(crate::capacity::table(&value).into_bytes())
        }
        Command::Check { config, ram, disk, cpu, json, servers } => {
            let (config, engine) = config.load()?;
            let body = read_input(&servers)?;
            let query = crate::check::CheckQuery::new(ram, disk, cpu)?;
            let answer = answer::check(&engine, &config.limits, &body, &query, true)?;
            if json {
                return print(answer.to_string().into_bytes());
            }
            print(crate::check::table(&answer).into_bytes())
        }
        Command::Plugins { config, json } => {
            let config = ServiceConfig::from_process(config.config.as_deref())?;
            let (registry, custom) = config.registry()?;
            print(plugin_list(&registry, custom.as_deref(), json))
        }
        Command::Replay { config, json, dir } => {
            let (config, engine) = config.load()?;
            let report = crate::replay::replay(&dir, &config, &engine)
                .map_err(|error| CliError::Read { input: dir.clone(), error })?;
            match json {
                true => print(
                    serde_json::to_vec(&report).map_err(|e| CliError::Answer(AnswerError::Internal(e.to_string())))?,
                )?,
                false => print(crate::replay::text(&report, &dir).into_bytes())?,
            }
            // A script checking a new config must not take a wrong directory or broken records
            // for "nothing changes".
            let unreplayed = match (report.replayed, report.failed, report.without_config) {
                (0, 0, _) => {
                    Some("it holds no recorded requests (the service writes them where record.dir says)".into())
                }
                (_, 0, 0) => None,
                (_, 0, unchecked) => Some(format!(
                    "{unchecked} of its records could not be checked against their recorded config (missing from {} \
                     or no longer loading; listed in the report)",
                    dir.join("configs").display()
                )),
                (_, failed, _) => Some(format!("{failed} of its records could not be replayed (listed in the report)")),
            };
            match unreplayed {
                Some(why) => {
                    Err(CliError::Read { input: dir, error: std::io::Error::new(std::io::ErrorKind::InvalidData, why) })
                }
                None => Ok(()),
            }
        }
        Command::Openapi => print(crate::http::openapi::document().into_bytes()),
        Command::Simulate(args) => simulate(*args),
    }
}

/// `dapi simulate`: reads the inputs, runs [`crate::simulate`], writes the outputs.
fn simulate(args: SimulateArgs) -> Result<(), CliError> {
    use crate::simulate::{datacenter, Chain, Servers, SimError, Simulation};
    let invalid = |field: &str, message: String| {
        CliError::Answer(AnswerError::Invalid(vec![crate::model::FieldError::invalid(field, message)]))
    };
    let label = |path: Option<&Path>| path.map_or("built-in".to_string(), |p| p.display().to_string());
    let config_a = ServiceConfig::from_process(args.config.as_deref())?;
    let engine_a = config_a.engine()?;
    let config_b = args.vs.as_deref().map(|path| ServiceConfig::from_process(Some(path))).transpose()?;
    let engine_b = config_b.as_ref().map(ServiceConfig::engine).transpose()?;
    let stdin = Path::new("-");
    if args.servers.as_deref() == Some(stdin) && args.workload == stdin {
        return Err(invalid("servers", "standard input (-) can give the servers or the workload, not both".into()));
    }
    // Standard output holds one document, or it could not be read back.
    let csv_out = args.csv.as_deref() == Some(stdin);
    let report_out = args.report.as_deref() == Some(stdin);
    let on_stdout: Vec<&str> = [(args.json, "--json"), (csv_out, "--csv -"), (report_out, "--report -")]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect();
    if on_stdout.len() > 1 {
        return Err(invalid(
            "output",
            format!("{} would all write to standard output: give the others a file", on_stdout.join(" and ")),
        ));
    }
    let servers = match &args.servers {
        Some(path) => Servers::Dump(read_input(path)?.into_vec()),
        None => Servers::Generate(datacenter::Generate {
            racks: args.racks,
            servers_per_rack: args.servers_per_rack,
            ram_mib: datacenter::parse_size(&args.ram).map_err(|m| invalid("ram", m))?,
            disk_mib: datacenter::parse_size(&args.disk).map_err(|m| invalid("disk", m))?,
            cpu_cores: args.cpus,
            ..datacenter::Generate::default()
        }),
    };
    let sim = Simulation {
        servers,
        workload: read_input(&args.workload)?.into_vec(),
        seed: args.seed,
        concurrency: args.concurrency,
        timing: !args.no_timing,
    };
    let env_config = std::env::var_os("DAPI_CONFIG").filter(|v| !v.is_empty()).map(PathBuf::from);
    let a_label = label(args.config.as_deref().or(env_config.as_deref()));
    let mut engines = vec![Chain::new(a_label, &engine_a, config_a.plugins_dir.is_some())];
    if let (Some(config), Some(engine)) = (&config_b, &engine_b) {
        engines.push(Chain::new(label(args.vs.as_deref()), engine, config.plugins_dir.is_some()));
    }
    let doc = crate::simulate::simulate(&sim, &engines).map_err(|e| match e {
        SimError::Invalid(f) => CliError::Answer(AnswerError::Invalid(vec![f])),
        SimError::Engine(m) => CliError::Answer(AnswerError::Internal(m)),
    })?;
    let write = |path: &Path, bytes: Vec<u8>| -> Result<(), CliError> {
        if path == Path::new("-") {
            return print(bytes);
        }
        std::fs::write(path, bytes).map_err(|error| CliError::Write { output: path.to_path_buf(), error })
    };
    if let Some(path) = &args.csv {
        write(path, crate::simulate::report::csv(&doc).into_bytes())?;
    }
    if let Some(path) = &args.report {
        write(path, crate::simulate::html::page(&doc).into_bytes())?;
    }
    if args.json {
        print(doc.to_string().into_bytes())
    } else if csv_out || report_out {
        Ok(())
    } else {
        print(crate::simulate::text::summary(&doc).into_bytes())
    }
}

/// The `POST /capacity` body of `dapi capacity --package`: the servers file with the
/// packages (and template) of the other files.
fn package_body(servers: &[u8], packages: &[PathBuf], vm: Option<&Path>, exact: bool) -> Result<Vec<u8>, CliError> {
    use serde_json::Value;
    let json = |input: &Path, bytes: &[u8]| -> Result<Value, CliError> {
        let not_json = |e: &dyn std::fmt::Display| {
            CliError::Answer(AnswerError::Malformed(format!("{} is not JSON: {e}", input.display())))
        };
        // Read as JSON.parse reads it, as the body it becomes will be.
        let text = std::str::from_utf8(bytes).map_err(|e| not_json(&e))?;
        crate::js::json::from_str(text).map_err(|e| not_json(&e))
    };
    let mut list = Vec::new();
    for path in packages {
        match json(path, &read_input(path)?)? {
            Value::Array(items) => list.extend(items),
            one => list.push(one),
        }
    }
    let mut rest = serde_json::json!({"packages": list, "exact": exact});
    if let Some(path) = vm {
        rest["vm"] = json(path, &read_input(path)?)?;
    }
    // The servers' text goes into the body as it is when it can be found without reading
    // it whole (megabytes at thousands of servers); anything unusual is read as JSON.parse
    // reads it and written again.
    let servers_text = match servers_as_sent(servers) {
        Some(text) => std::borrow::Cow::Borrowed(text),
        None => {
            let servers = match json(Path::new("SERVERS"), servers)? {
                Value::Object(mut top) => top.remove("servers").unwrap_or(Value::Null),
                other => other,
            };
            std::borrow::Cow::Owned(servers.to_string())
        }
    };
    let rest = rest.to_string();
    let mut body = Vec::with_capacity(servers_text.len() + rest.len() + 16);
    body.extend_from_slice(b"{\"servers\":");
    body.extend_from_slice(servers_text.as_bytes());
    body.push(b',');
    body.extend_from_slice(&rest.as_bytes()[1..]);
    Ok(body)
}

/// The text of the servers array in a servers file (`{"servers": [...]}` or a bare array),
/// when serde_json reads the file as it is and finds `servers` once.
fn servers_as_sent(file: &[u8]) -> Option<&str> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        servers: &'a RawValue,
    }
    let text = std::str::from_utf8(file).ok()?;
    let raw = if text.trim_start().starts_with('[') {
        serde_json::from_str::<&RawValue>(text).ok()?
    } else {
        serde_json::from_str::<Top<'_>>(text).ok()?.servers
    };
    Some(raw.get())
}

/// Explain options asking about `uuids` (every server when there are none).
fn explain_options(uuids: Vec<String>) -> ExplainOptions {
    let mut options = ExplainOptions::default();
    if !uuids.is_empty() {
        options.ask_about(uuids);
    }
    options
}

/// `dapi plugins`: a table (or JSON) of the registry's plugins.
fn plugin_list(registry: &Registry, custom: Option<&CustomSet>, json: bool) -> Vec<u8> {
    let files = custom.map_or(&[][..], |c| &c.files[..]);
    let rows: Vec<serde_json::Value> = registry
        .iter()
        .map(|plugin| {
            let d = plugin.declaration();
            let mut row = serde_json::json!({"name": d.name, "kind": d.kind.as_str(), "step": d.step});
            match files.iter().find(|f| f.lookup == d.name) {
                Some(f) => {
                    row["source"] = "custom".into();
                    row["file"] = f.file.clone().into();
                    row["digest"] = f.digest.clone().into();
                }
                None => row["source"] = "built-in".into(),
            }
            row
        })
        .collect();
    if json {
        return serde_json::Value::Array(rows).to_string().into_bytes();
    }
    let text = |row: &serde_json::Value, key: &str| row[key].as_str().unwrap_or_default().to_string();
    let source = |row: &serde_json::Value| match row.get("file") {
        Some(_) => format!("custom {} {}", text(row, "file"), text(row, "digest")),
        None => text(row, "source"),
    };
    let name_width = rows.iter().map(|r| text(r, "name").len()).max().unwrap_or(0);
    let source_width = rows.iter().map(|r| source(r).len()).max().unwrap_or(0);
    let mut out = format!("{:name_width$}  {:11}  {:source_width$}  STEP\n", "NAME", "KIND", "SOURCE");
    for row in &rows {
        let (name, kind, step) = (text(row, "name"), text(row, "kind"), text(row, "step"));
        out.push_str(&format!("{name:name_width$}  {kind:11}  {:source_width$}  {step}\n", source(row)));
    }
    out.into_bytes()
}

/// The bytes of `input`: a file (mapped when big), or standard input for `-` (into a body
/// buffer: huge pages for a big one). See `wire::pages`.
fn read_input(input: &Path) -> Result<Input, CliError> {
    let read = if input == Path::new("-") {
        crate::wire::pages::read_body(std::io::stdin().lock(), 0).map(Input::Read)
    } else {
        crate::wire::pages::read_file(input)
    };
    read.map_err(|error| CliError::Read { input: input.to_path_buf(), error })
}

/// The answer is printed in parts of at least this many bytes.
const PRINT_PART_BYTES: usize = 256 * 1024;

/// Standard output for an answer, written straight to its descriptor. Rust's `stdout` is
/// line-buffered: it looks for the last newline of every write, a scan of the whole answer
/// (8 MB at 5,000 servers) for the one newline at its end. The lock is held all the while, so
/// nothing else is printed in between; where the descriptor cannot be had, `stdout` it is.
struct AnswerOut {
    stdout: std::io::StdoutLock<'static>,
    direct: Option<std::fs::File>,
}

impl AnswerOut {
    fn new() -> AnswerOut {
        let mut stdout = std::io::stdout().lock();
        // Whatever was printed before goes first.
        let _ = stdout.flush();
        #[cfg(unix)]
        let direct = {
            use std::os::fd::AsFd;
            let direct = stdout.as_fd().try_clone_to_owned().ok().map(std::fs::File::from);
            #[cfg(target_os = "linux")]
            if let Some(file) = &direct {
                widen_pipe(file);
            }
            direct
        };
        #[cfg(not(unix))]
        let direct = None;
        AnswerOut { stdout, direct }
    }
}

impl AnswerOut {
    fn target(&mut self) -> &mut dyn Write {
        match &mut self.direct {
            Some(file) => file,
            None => &mut self.stdout,
        }
    }
}

impl Write for AnswerOut {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.target().write(bytes)
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.target().write_all(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.target().flush()
    }
}

/// A pipe's buffer raised from its 64 KiB to [`PIPE_BYTES`]: an answer (8 MB at 5,000
/// servers) goes through a pipe of 64 KiB in 128 waits for the reader, and the writer runs
/// ahead by at most one buffer. Whether it was raised; anything but a pipe, or a pipe the
/// system will not widen (past its `pipe-max-size` for a user), is left as it is.
#[cfg(target_os = "linux")]
fn widen_pipe(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    let is_pipe = file.metadata().is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_fifo(&m.file_type()));
    // SAFETY: F_SETPIPE_SZ only resizes the buffer of the pipe this open file refers to;
    // a refusal changes nothing.
    is_pipe && unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) } >= PIPE_BYTES
}

/// The pipe buffer asked for: Linux's default `pipe-max-size` for unprivileged processes.
#[cfg(target_os = "linux")]
const PIPE_BYTES: libc::c_int = 1 << 20;

/// Prints an answer in parts as it is written, then the rest and a newline.
struct PartPrinter {
    stdout: AnswerOut,
    /// The first write error; nothing more is written after it.
    error: Option<std::io::Error>,
    last: Option<u8>,
}

impl PartPrinter {
    fn new() -> PartPrinter {
        PartPrinter { stdout: AnswerOut::new(), error: None, last: None }
    }

    fn part_done(&mut self, out: &mut Vec<u8>) {
        if out.len() < PRINT_PART_BYTES {
            return;
        }
        if self.error.is_none() {
            self.last = out.last().copied();
            self.error = self.stdout.write_all(out).err();
        }
        out.clear();
    }

    fn finish(mut self, mut rest: Vec<u8>) -> Result<(), CliError> {
        if rest.last().copied().or(self.last) != Some(b'\n') {
            rest.push(b'\n');
        }
        let error = match self.error.take() {
            Some(error) => Some(error),
            None => self.stdout.write_all(&rest).and_then(|()| self.stdout.flush()).err(),
        };
        error.map_or(Ok(()), |error| Err(CliError::Io { what: "cannot write the answer", error }))
    }
}

/// Writes the answer and a newline to standard output.
fn print(mut out: Vec<u8>) -> Result<(), CliError> {
    if out.last() != Some(&b'\n') {
        out.push(b'\n');
    }
    let mut stdout = AnswerOut::new();
    stdout
        .write_all(&out)
        .and_then(|()| stdout.flush())
        .map_err(|error| CliError::Io { what: "cannot write the answer", error })
}

fn serve(config_file: Option<PathBuf>) -> Result<(), CliError> {
    let config = ServiceConfig::from_process(config_file.as_deref())?;
    crate::http::logging::init(&config.log_level);
    let listen = config.listen.clone();
    let digest = config.digest();
    let inventory_config = config.inventory.clone();
    // Before any thread is started (the engine's included).
    crate::wire::pages::tune_allocator(inventory_config.url.is_some());
    let worker_threads = config.limits.worker_threads;
    let app = crate::http::AppState::new(config, config_file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(worker_threads)
        .enable_all()
        .build()
        .map_err(|error| CliError::Io { what: "cannot start the runtime", error })?;
    runtime.block_on(async move {
        if inventory_config.url.is_some() {
            let started = std::time::Instant::now();
            let inventory = crate::inventory::Inventory::start(&inventory_config)
                .await
                .map_err(|e| CliError::Inventory(format!("{e} (check inventory.url / DAPI_INVENTORY__URL)")))?;
            let servers = inventory.model().len();
            let ms = started.elapsed().as_millis() as u64;
            tracing::info!(servers, ms, "inventory loaded");
            app.set_inventory(inventory);
        }
        // A host name is resolved here; the first of its addresses that binds is used.
        let listener = tokio::net::TcpListener::bind(&listen)
            .await
            .map_err(|error| CliError::Listen { addr: listen.clone(), error })?;
        let addr = listener.local_addr().map_or(listen.clone(), |a| a.to_string());
        tracing::info!(addr = %addr, config = %digest, version = env!("CARGO_PKG_VERSION"), "dapi listening");
        crate::http::serve(listener, std::sync::Arc::new(app))
            .await
            .map_err(|error| CliError::Io { what: "the server failed", error })
    })
}

/// `dapi inventory load`: the dump checked as `POST /inventory/load` checks it, stored in
/// one transaction.
fn inventory_load(url: &str, dump: &Path) -> Result<(), CliError> {
    let body = read_input(dump)?;
    let limits = crate::config::Limits::default();
    let records = crate::inventory::records::dump(&body, limits.max_vms_per_server).map_err(|e| match e {
        crate::inventory::records::RecordError::Malformed(m) => CliError::Answer(AnswerError::Malformed(m)),
        crate::inventory::records::RecordError::Invalid(errors) => CliError::Answer(AnswerError::Invalid(errors)),
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| CliError::Io { what: "cannot start the runtime", error })?;
    let generation = runtime.block_on(async {
        let store =
            crate::inventory::store::Store::connect(url).await.map_err(|e| CliError::Inventory(e.to_string()))?;
        store.load(&records).await.map_err(|e| CliError::Inventory(e.to_string()))
    })?;
    print(serde_json::json!({"servers": records.len(), "generation": generation}).to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Standard output that is a pipe gets the wider buffer; a file is left alone.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_pipe_for_the_answer_is_widened_and_a_file_is_not() {
        use std::os::fd::{AsRawFd, OwnedFd};
        let (_reader, writer) = std::io::pipe().expect("a pipe");
        let writer = std::fs::File::from(OwnedFd::from(writer));
        // SAFETY: F_GETPIPE_SZ only reads the pipe's buffer size.
        let size = || unsafe { libc::fcntl(writer.as_raw_fd(), libc::F_GETPIPE_SZ) };
        assert!(size() < PIPE_BYTES, "a new pipe starts smaller");
        let max: libc::c_int =
            std::fs::read_to_string("/proc/sys/fs/pipe-max-size").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
        let widened = widen_pipe(&writer);
        assert_eq!(widened, size() == PIPE_BYTES);
        if max >= PIPE_BYTES {
            assert!(widened, "pipe-max-size {max} allows {PIPE_BYTES}");
        }
        let file = scratch_file();
        assert!(!widen_pipe(&file));
    }

    fn scratch_file() -> std::fs::File {
        let path = std::env::temp_dir().join(format!("dapi-widen-pipe-{}", std::process::id()));
        let file = std::fs::File::create(&path).expect("a file");
        let _ = std::fs::remove_file(&path);
        file
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn dash_is_standard_input_and_steps_are_named() {
        let cli = Cli::try_parse_from(["dapi", "allocate", "--steps", "removed", "-"]).expect("parses");
        match cli.command {
            Command::Allocate { steps: Some(Steps::Removed), request, .. } => assert_eq!(request, Path::new("-")),
            other => panic!("{other:?}"),
        }
        let err = Cli::try_parse_from(["dapi", "allocate", "--steps", "some", "x.json"]).expect_err("bad value");
        assert_eq!(err.exit_code(), 2);
    }
}
