//! Service configuration: the allocation description, the defaults, and the service's own
//! settings (listen address, log level, limits, token).
//!
//! Layers, later ones winning key by key:
//! 1. the embedded `config/default.json` (CNAPI's production chain and defaults);
//! 2. the JSON file named by `--config` or `DAPI_CONFIG` (any subset of the keys; an
//!    `allocationDescription` replaces the chain, `defaults` are merged key by key);
//! 3. environment variables `DAPI_<KEY>`, with `__` between nested keys:
//!    `DAPI_LISTEN=localhost:8080`, `DAPI_LOG_LEVEL=debug`, `DAPI_LIMITS__MAX_SERVERS=20000`,
//!    `DAPI_DEFAULTS__WEIGHT_UNIFORM_RANDOM=0`. After the prefix, names are
//!    case-insensitive. Each value is read as its key's type: limits as whole numbers,
//!    `DAPI_ALLOCATIONDESCRIPTION` and `DAPI_DEFAULTS` as JSON, one default as a boolean or
//!    a number when it looks like one (else as text).
//!
//! The layering is done here rather than by a config library so that every error says
//! where the value came from: the variable's name, or the file's path as it was given.

use std::fmt;
use std::path::Path;

use serde_json::{Map, Value};

use std::sync::Arc;

use crate::engine::{Engine, Registry};
use crate::js::sandbox::Budget;
use crate::plugins::custom_js::CustomSet;

/// The built-in configuration: CNAPI's production chain and defaults.
pub const DEFAULT_CONFIG: &str = include_str!("../config/default.json");

/// Everything the service reads at start-up.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The plugin chain, a `["pipe", ...]` expression.
    pub allocation_description: Value,
    /// Allocator defaults (`filter_*`, `weight_*`, ...); CNAPI's fill the gaps.
    pub defaults: Value,
    /// `host:port` to listen on (loopback unless told otherwise); the host may be a name,
    /// resolved when binding, or an IPv6 address in brackets.
    pub listen: String,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub log_level: String,
    pub limits: Limits,
    /// When set, `/allocate`, `/capacity` and `/admin/reload` need
    /// `Authorization: Bearer <token>` (`/ping`, `/metrics`, `/openapi.json` stay open).
    pub auth_token: Option<String>,
    /// A directory of custom plugins (`*.js` files, each usable in the chain under its file
    /// name), loaded with the engine; where the setting came from, for errors.
    pub plugins_dir: Option<(std::path::PathBuf, Source)>,
    /// Inventory mode (off unless `inventory.url` is set): see `crate::inventory`.
    pub inventory: InventoryConfig,
    /// Recording of `/allocate` requests for `dapi replay` (off unless `record.dir` is set):
    /// see `crate::record`.
    pub record: RecordConfig,
    /// A second config every allocation is also decided with, after its answer has left
    /// (`crate::shadow`); where the setting came from, for errors.
    pub shadow_config: Option<(std::path::PathBuf, Source)>,
    /// CPU time shadow evaluations may take, in milliseconds per second (a token bucket).
    pub shadow_cpu_ms_per_s: u64,
    /// The chain and defaults settings in the order applied, to tell which source an
    /// engine error comes from.
    engine_settings: Vec<Setting>,
}

/// The longest a claim may count, in seconds.
const MAX_CLAIM_TTL_S: u64 = 365 * 24 * 3600;

/// Inventory mode's settings (`inventory.*`, `DAPI_INVENTORY__*`).
#[derive(Debug, Clone)]
pub struct InventoryConfig {
    /// PostgreSQL URL (`postgresql://user@host:port/db`); set, it switches inventory mode on.
    pub url: Option<String>,
    /// Oldest state an allocation may be decided on: past it, with the database out of
    /// reach, allocations answer 503.
    pub staleness_ms: u64,
    /// How long a claim counts (like a ticket) unless its VM appears or it is released.
    pub claim_ttl_s: u64,
    /// How many kinds of request (a [`RecurringKey`](crate::engine::RecurringKey): size,
    /// image, package...) keep what their last allocation found, so that the next one of that
    /// kind re-runs only the servers changed since (each holds about 0.6 KB per server:
    /// 3 MiB at 5,000 servers).
    pub recurring_kinds: u64,
}

impl Default for InventoryConfig {
    fn default() -> InventoryConfig {
        InventoryConfig { url: None, staleness_ms: 3000, claim_ttl_s: 600, recurring_kinds: 4 }
    }
}

impl InventoryConfig {
    /// The keys of `inventory`, as a config file spells them.
    pub const KEYS: [&'static str; 4] = ["url", "staleness_ms", "claim_ttl_s", "recurring_kinds"];

    fn set(&mut self, key: &str, value: &Value) -> Result<(), String> {
        let whole = |v: &Value| match v.as_u64() {
            Some(n) if n > 0 => Ok(n),
            _ => Err(format!("must be a whole number above 0, not {}", shown(v))),
        };
        match key {
            "url" => {
                let url = value.as_str().ok_or_else(|| format!("must be a string, not {}", shown(value)))?;
                url.parse::<tokio_postgres::Config>().map_err(|e| format!("not a PostgreSQL URL: {e}"))?;
                self.url = Some(url.to_string());
            }
            "staleness_ms" => self.staleness_ms = whole(value)?,
            // A claim's expiry is a database timestamp: a lifetime past any use (a year) is a
            // mistake to report now, not an out-of-range error on every allocation later.
            "claim_ttl_s" => {
                self.claim_ttl_s = whole(value)?;
                if self.claim_ttl_s > MAX_CLAIM_TTL_S {
                    return Err(format!("must be at most {MAX_CLAIM_TTL_S} (a year), not {}", shown(value)));
                }
            }
            "recurring_kinds" => self.recurring_kinds = whole(value)?,
            _ => unreachable!("inventory.{key} is not in InventoryConfig::KEYS"),
        }
        Ok(())
    }
}

/// Recording's settings (`record.*`, `DAPI_RECORD__*`).
#[derive(Debug, Clone)]
pub struct RecordConfig {
    /// The directory records are written to; set, it switches recording on. Where the
    /// setting came from, for errors.
    pub dir: Option<(std::path::PathBuf, Source)>,
    /// Most records kept; past it the oldest are removed.
    pub max_count: u64,
    /// Most bytes of records kept; past it the oldest are removed.
    pub max_bytes: u64,
}

impl Default for RecordConfig {
    fn default() -> RecordConfig {
        RecordConfig { dir: None, max_count: 10_000, max_bytes: 1 << 30 }
    }
}

impl RecordConfig {
    /// The keys of `record`, as a config file spells them.
    pub const KEYS: [&'static str; 3] = ["dir", "max_count", "max_bytes"];

    /// Checks one value (`dir`: a string, or null or empty for none; the bounds: ≥ 1).
    fn check(key: &str, value: &Value) -> Result<(), String> {
        match key {
            "dir" if value.is_null() || value.is_string() => Ok(()),
            "dir" => Err(format!("must be a directory (a string), not {}", shown(value))),
            _ => match value.as_u64() {
                Some(n) if n > 0 => Ok(()),
                _ => Err(format!("must be a whole number above 0, not {}", shown(value))),
            },
        }
    }

    fn set(&mut self, key: &str, value: &Value, source: &Source) {
        match key {
            "dir" => {
                let dir = value.as_str().filter(|d| !d.is_empty());
                self.dir = dir.map(|d| (std::path::PathBuf::from(d), source.clone()));
            }
            "max_count" => self.max_count = value.as_u64().unwrap_or(self.max_count),
            "max_bytes" => self.max_bytes = value.as_u64().unwrap_or(self.max_bytes),
            _ => unreachable!("record.{key} is not in RecordConfig::KEYS"),
        }
    }
}

/// Bounds on the work one request may ask for.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body; the default fits 10,000 servers with 30 VMs each.
    pub max_body_bytes: usize,
    /// Most servers in one request.
    pub max_servers: usize,
    /// Most VMs on one server of a request.
    pub max_vms_per_server: usize,
    /// Allocations running at once; beyond it requests are refused with 503.
    pub max_concurrent_allocations: usize,
    /// Longest an allocation may take before the request fails with 503; and how long a
    /// client may take none of a big answer before its connection is reset.
    pub request_timeout_ms: u64,
    /// A request's headers must arrive within this, counted from the connection's opening
    /// or, on a kept-alive connection, from the first byte of the next request; past it the
    /// connection is closed.
    pub header_timeout_ms: u64,
    /// A kept-alive connection with no request for this long is closed.
    pub idle_timeout_ms: u64,
    /// A body must arrive within this plus one second per `min_body_bytes_per_sec` bytes
    /// received (and within `request_timeout_ms`), or the request is answered 408 and its
    /// permit freed: a client trickling its body cannot hold a permit for long.
    pub body_timeout_ms: u64,
    /// The upload rate that earns a body more time (see `body_timeout_ms`).
    pub min_body_bytes_per_sec: u64,
    /// After an early answer (503, 413, 401...), up to this many bytes of the unread body
    /// are read and thrown away (same time rule as a body), so that a client that writes
    /// its whole body before reading gets to read the answer. 0 turns draining off.
    pub drain_max_bytes: usize,
    /// Connections served at once; past it (and past `health_connections`) new ones wait
    /// in the listen queue. Read at start-up, and lowered to fit the descriptor limit.
    pub max_connections: usize,
    /// Connections accepted beyond `max_connections` that serve only `/ping`, `/metrics`
    /// and `/openapi.json` (anything else gets 503), one request each, so that health
    /// checks still get in when every ordinary connection is taken. 0: no reserve.
    pub health_connections: usize,
    /// The async runtime's threads: they move the bytes of requests and answers, and (in
    /// inventory mode) decide, one allocation at a time. Computing a stateless allocation
    /// runs in a pool of its own (one per core at a time). Read at start-up. Fewer threads
    /// wake each other less: on two cores, one thread took 9-22% less CPU per request
    /// than two (BENCHMARKS.md).
    pub worker_threads: usize,
    /// Longest one call of a custom plugin may run (then the allocation fails with 500), and
    /// one `filter_owner_server` snippet's pass over the servers (then the step fails with
    /// `Error running filter ...`).
    pub plugin_timeout_ms: u64,
    /// Memory the JavaScript engine of custom plugins may hold on one thread (code, module
    /// state, and the servers of the call); the owner filters' engine has as much again.
    pub plugin_memory_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        let cores = crate::cores().unwrap_or(2);
        Limits {
            max_body_bytes: 256 * 1024 * 1024,
            max_servers: 20_000,
            max_vms_per_server: 10_000,
            max_concurrent_allocations: cores.max(2) * 2,
            request_timeout_ms: 30_000,
            header_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            body_timeout_ms: 5_000,
            min_body_bytes_per_sec: 1024 * 1024,
            drain_max_bytes: 256 * 1024 * 1024,
            max_connections: 1024,
            health_connections: 16,
            worker_threads: (cores / 2).max(1),
            plugin_timeout_ms: 1000,
            plugin_memory_bytes: 512 * 1024 * 1024,
        }
    }
}

impl Limits {
    /// The keys of `limits`, as a config file spells them.
    pub const KEYS: [&'static str; 15] = [
        "max_body_bytes",
        "max_servers",
        "max_vms_per_server",
        "max_concurrent_allocations",
        "request_timeout_ms",
        "header_timeout_ms",
        "idle_timeout_ms",
        "body_timeout_ms",
        "min_body_bytes_per_sec",
        "drain_max_bytes",
        "max_connections",
        "health_connections",
        "worker_threads",
        "plugin_timeout_ms",
        "plugin_memory_bytes",
    ];

    /// Limits where 0 means "none" (no draining, no health reserve); every other is ≥ 1.
    const MAY_BE_ZERO: [&'static str; 2] = ["drain_max_bytes", "health_connections"];

    fn set(&mut self, key: &str, value: u64) {
        let size = usize::try_from(value).unwrap_or(usize::MAX);
        match key {
            "max_body_bytes" => self.max_body_bytes = size,
            "max_servers" => self.max_servers = size,
            "max_vms_per_server" => self.max_vms_per_server = size,
            "max_concurrent_allocations" => self.max_concurrent_allocations = size,
            "request_timeout_ms" => self.request_timeout_ms = value,
            "header_timeout_ms" => self.header_timeout_ms = value,
            "idle_timeout_ms" => self.idle_timeout_ms = value,
            "body_timeout_ms" => self.body_timeout_ms = value,
            "min_body_bytes_per_sec" => self.min_body_bytes_per_sec = value,
            "drain_max_bytes" => self.drain_max_bytes = size,
            "max_connections" => self.max_connections = size,
            "health_connections" => self.health_connections = size,
            "worker_threads" => self.worker_threads = size,
            "plugin_timeout_ms" => self.plugin_timeout_ms = value,
            "plugin_memory_bytes" => self.plugin_memory_bytes = size,
            _ => unreachable!("limits.{key} is not in Limits::KEYS"),
        }
    }
}

/// The top-level keys of a config file.
const TOP_KEYS: [&str; 11] = [
    "allocationDescription",
    "defaults",
    "listen",
    "log_level",
    "limits",
    "auth_token",
    "plugins_dir",
    "inventory",
    "record",
    "shadow_config",
    "shadow_cpu_ms_per_s",
];

/// Where a setting came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    BuiltIn,
    /// The config file, its path as given.
    File(String),
    /// An environment variable, by name.
    Env(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::BuiltIn => f.write_str("built-in config"),
            Source::File(path) => write!(f, "config file {path}"),
            Source::Env(name) => f.write_str(name),
        }
    }
}

/// A config that cannot be used, and where the problem is.
#[derive(Debug)]
pub enum ConfigError {
    /// The config file cannot be read.
    Read { path: String, error: std::io::Error },
    /// The config file is not JSON.
    NotJson { path: String, error: serde_json::Error },
    /// A key nothing reads; `hint` suggests the likely one, or lists them.
    UnknownKey { source: Source, key: String, hint: String },
    /// A value of the wrong type or out of range.
    Invalid { source: Source, key: String, message: String },
    /// The engine refused the chain or the defaults (its message), from `source` when it
    /// could be told.
    Engine { source: Option<Source>, message: String },
    /// The shadow config (`shadow_config`, set by `source`) cannot be used.
    Shadow { source: Source, path: String, error: Box<ConfigError> },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, error } => write!(f, "cannot read config file {path}: {error}"),
            ConfigError::NotJson { path, error } => write!(f, "config file {path} is not JSON: {error}"),
            // A variable's name says which key it sets.
            ConfigError::UnknownKey { source: source @ Source::Env(_), hint, .. } => {
                write!(f, "{source}: no such setting; {hint}")
            }
            ConfigError::UnknownKey { source, key, hint } => write!(f, "{source}: unknown key {key:?}; {hint}"),
            ConfigError::Invalid { source: source @ Source::Env(_), message, .. } => write!(f, "{source}: {message}"),
            ConfigError::Invalid { source, key, message } => write!(f, "{source}: {key}: {message}"),
            ConfigError::Engine { source: Some(source), message } => write!(f, "{source}: {message}"),
            ConfigError::Engine { source: None, message } => f.write_str(message),
            ConfigError::Shadow { source, path, error } => write!(f, "{source}: shadow_config {path}: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Read { error, .. } => Some(error),
            ConfigError::NotJson { error, .. } => Some(error),
            ConfigError::Shadow { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// One value a layer sets, already checked.
#[derive(Debug, Clone)]
enum Set {
    Chain(Value),
    /// A default (or, with an empty path, all of them), at its path below `defaults`.
    Default(Vec<String>, Value),
    Listen(String),
    LogLevel(String),
    AuthToken(Option<String>),
    /// `null` or an empty path unsets it.
    PluginsDir(Option<std::path::PathBuf>),
    Limit(&'static str, u64),
    /// An `inventory` key, its value checked.
    Inventory(&'static str, Value),
    /// A `record` key, its value checked.
    Record(&'static str, Value),
    /// `null` or an empty path unsets it.
    ShadowConfig(Option<std::path::PathBuf>),
    ShadowCpu(u64),
}

#[derive(Debug, Clone)]
struct Setting {
    source: Source,
    set: Set,
}

impl ServiceConfig {
    /// The settings a reload leaves as they were (the process took them at start-up) that
    /// differ between `self` and the config the process `started` with, named as a config
    /// file spells them.
    pub fn start_up_only_changes(&self, started: &ServiceConfig) -> Vec<&'static str> {
        let (new, old) = (self, started);
        let dir = |c: &ServiceConfig| c.record.dir.as_ref().map(|d| d.0.clone());
        [
            ("listen", new.listen != old.listen),
            ("log_level", new.log_level != old.log_level),
            ("limits.max_connections", new.limits.max_connections != old.limits.max_connections),
            ("limits.health_connections", new.limits.health_connections != old.limits.health_connections),
            ("limits.worker_threads", new.limits.worker_threads != old.limits.worker_threads),
            (
                "limits.max_concurrent_allocations",
                new.limits.max_concurrent_allocations != old.limits.max_concurrent_allocations,
            ),
            ("record.dir", dir(new) != dir(old)),
            ("record.max_count", new.record.max_count != old.record.max_count),
            ("record.max_bytes", new.record.max_bytes != old.record.max_bytes),
            ("inventory.url", new.inventory.url != old.inventory.url),
            ("inventory.staleness_ms", new.inventory.staleness_ms != old.inventory.staleness_ms),
            ("inventory.claim_ttl_s", new.inventory.claim_ttl_s != old.inventory.claim_ttl_s),
            ("inventory.recurring_kinds", new.inventory.recurring_kinds != old.inventory.recurring_kinds),
        ]
        .into_iter()
        .filter_map(|(name, changed)| changed.then_some(name))
        .collect()
    }

    /// Loads the layers; `env` is the process environment (passed in for tests).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ServiceConfig, ConfigError> {
        let built_in: Value = serde_json::from_str(DEFAULT_CONFIG)
            .map_err(|error| ConfigError::NotJson { path: "config/default.json".into(), error })?;
        let mut settings = json_settings(&Source::BuiltIn, built_in)?;
        if let Some(path) = file {
            settings.extend(file_settings(path)?);
        }
        settings.extend(env_settings(env)?);
        let mut config = ServiceConfig {
            allocation_description: Value::Null,
            defaults: Value::Object(Map::new()),
            listen: "127.0.0.1:8080".into(),
            log_level: "info".into(),
            limits: Limits::default(),
            auth_token: None,
            plugins_dir: None,
            inventory: InventoryConfig::default(),
            record: RecordConfig::default(),
            shadow_config: None,
            shadow_cpu_ms_per_s: 250,
            engine_settings: Vec::new(),
        };
        for setting in settings {
            config.apply(setting);
        }
        Ok(config)
    }

    /// Loads the file named by `--config` (else by `DAPI_CONFIG`) over the built-in one,
    /// then the process environment.
    pub fn from_process(file: Option<&Path>) -> Result<ServiceConfig, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        // An empty DAPI_CONFIG names no file (as clap reads it for --config).
        let from_env =
            env.iter().find(|(k, v)| k == "DAPI_CONFIG" && !v.is_empty()).map(|(_, v)| std::path::PathBuf::from(v));
        ServiceConfig::load(file.or(from_env.as_deref()), env)
    }

    fn apply(&mut self, setting: Setting) {
        match &setting.set {
            Set::Chain(chain) => self.allocation_description = chain.clone(),
            Set::Default(path, value) => merge_at(&mut self.defaults, path, value.clone()),
            Set::Listen(listen) => self.listen = listen.clone(),
            Set::LogLevel(level) => self.log_level = level.clone(),
            Set::AuthToken(token) => self.auth_token = token.clone(),
            Set::PluginsDir(dir) => self.plugins_dir = dir.clone().map(|d| (d, setting.source.clone())),
            Set::Limit(key, value) => self.limits.set(key, *value),
            // Checked when the setting was read.
            Set::Inventory(key, value) => {
                let _ = self.inventory.set(key, value);
            }
            Set::Record(key, value) => self.record.set(key, value, &setting.source),
            Set::ShadowConfig(path) => self.shadow_config = path.clone().map(|p| (p, setting.source.clone())),
            Set::ShadowCpu(ms) => self.shadow_cpu_ms_per_s = *ms,
        }
        if matches!(setting.set, Set::Chain(_) | Set::Default(..)) {
            self.engine_settings.push(setting);
        }
    }

    /// The allocation engine this config describes.
    pub fn engine(&self) -> Result<Engine, ConfigError> {
        Ok(self.engine_and_plugins()?.0)
    }

    /// The plugins a chain may name: the built-in ones and those of `plugins_dir`.
    pub fn registry(&self) -> Result<(Registry, Option<Arc<CustomSet>>), ConfigError> {
        let dir = self.plugins_dir.as_ref();
        let loaded =
            crate::registry::with_custom(dir.map(|(d, _)| d.as_path()), self.script_budget()).map_err(|message| {
                ConfigError::Invalid {
                    source: dir.map_or(Source::BuiltIn, |(_, s)| s.clone()),
                    key: "plugins_dir".into(),
                    message,
                }
            })?;
        for (_, skipped) in loaded.1.iter().flat_map(|set| &set.skipped) {
            // The command line sets no log (its output is the answer): its warnings go to
            // standard error.
            if tracing::dispatcher::has_been_set() {
                tracing::warn!("plugins_dir: {skipped}");
            } else {
                eprintln!("dapi: warning: {skipped}");
            }
        }
        Ok(loaded)
    }

    /// What one call of operators' JavaScript may use (custom plugins, owner filters).
    fn script_budget(&self) -> Budget {
        Budget {
            time: std::time::Duration::from_millis(self.limits.plugin_timeout_ms),
            memory_bytes: self.limits.plugin_memory_bytes,
        }
    }

    /// The engine, and the custom plugins it was built with (loaded once, here).
    pub fn engine_and_plugins(&self) -> Result<(Engine, Option<Arc<CustomSet>>), ConfigError> {
        let (registry, custom) = self.registry()?;
        let mut engine = build_engine(&self.allocation_description, &self.defaults, &registry).map_err(|message| {
            // A chain naming a file that was skipped as no plugin says so.
            let skipped = custom
                .iter()
                .flat_map(|set| &set.skipped)
                .find(|(name, _)| message.ends_with(&format!("Unrecognized algorithm: {name}")));
            let message = match skipped {
                Some((_, why)) => format!("{message} ({why})"),
                None => message,
            };
            ConfigError::Engine { source: self.blame(&registry), message }
        })?;
        engine.set_script_budget(self.script_budget());
        for warning in engine.warnings() {
            tracing::warn!("allocation description: {warning}");
        }
        Ok((engine, custom))
    }

    /// The source whose chain or defaults settings make the engine refuse the config: they
    /// are applied again source by source (each variable on its own), and the first after
    /// which the engine is refused is named. Only run on the error path.
    fn blame(&self, registry: &Registry) -> Option<Source> {
        let mut chain = Value::Null;
        let mut defaults = Value::Object(Map::new());
        let mut settings = self.engine_settings.iter().peekable();
        while let Some(first) = settings.next() {
            let mut group = vec![first];
            while let Some(next) = settings.next_if(|s| s.source == first.source) {
                group.push(next);
            }
            for setting in group {
                match &setting.set {
                    Set::Chain(c) => chain = c.clone(),
                    Set::Default(path, value) => merge_at(&mut defaults, path, value.clone()),
                    _ => {}
                }
            }
            if build_engine(&chain, &defaults, registry).is_err() {
                return (first.source != Source::BuiltIn).then(|| first.source.clone());
            }
        }
        None
    }

    /// A short hash of the engine configuration, to tell which one a running service has.
    pub fn digest(&self) -> String {
        let text = serde_json::json!([self.allocation_description, self.defaults]).to_string();
        crate::digest::digest(text.as_bytes())
    }
}

fn build_engine(chain: &Value, defaults: &Value, registry: &Registry) -> Result<Engine, String> {
    let config = serde_json::json!({"allocationDescription": chain, "defaults": defaults});
    Engine::from_config(&config, registry).map_err(|e| e.to_string())
}

/// Sets `value` at `path` below `target`, merging objects key by key (a default that is an
/// object, such as `filter_owner_server`, is merged rather than replaced).
fn merge_at(target: &mut Value, path: &[String], value: Value) {
    let Some((last, parents)) = path.split_last() else {
        return merge(target, value);
    };
    let mut at = target;
    for key in parents {
        at = object(at).entry(key.clone()).or_insert_with(|| Value::Object(Map::new()));
    }
    match object(at).get_mut(last) {
        Some(existing) => merge(existing, value),
        None => {
            object(at).insert(last.clone(), value);
        }
    }
}

fn merge(target: &mut Value, value: Value) {
    match (target, value) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, v) in from {
                merge_at_key(into, key, v);
            }
        }
        (target, value) => *target = value,
    }
}

fn merge_at_key(into: &mut Map<String, Value>, key: String, value: Value) {
    match into.get_mut(&key) {
        Some(existing) => merge(existing, value),
        None => {
            into.insert(key, value);
        }
    }
}

/// `value` as an object, replacing it with an empty one if it is not.
fn object(value: &mut Value) -> &mut Map<String, Value> {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

fn file_settings(path: &Path) -> Result<Vec<Setting>, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read(path).map_err(|error| ConfigError::Read { path: shown.clone(), error })?;
    let value = serde_json::from_slice(&text).map_err(|error| ConfigError::NotJson { path: shown.clone(), error })?;
    json_settings(&Source::File(shown), value)
}

/// The settings of a config file (or of the built-in config).
fn json_settings(source: &Source, value: Value) -> Result<Vec<Setting>, ConfigError> {
    let invalid =
        |key: &str, message: String| ConfigError::Invalid { source: source.clone(), key: key.into(), message };
    let Value::Object(top) = value else {
        return Err(invalid("(top level)", format!("must be a JSON object, not {}", shown(&value))));
    };
    let mut sets = Vec::new();
    for (key, value) in top {
        match key.as_str() {
            "allocationDescription" | "allocationdescription" => sets.push(Set::Chain(value)),
            "defaults" => match value {
                Value::Object(defaults) => {
                    if let Some(key) = defaults.keys().find(|k| !is_default(k)) {
                        let known: Vec<String> = default_keys().map(|d| format!("defaults.{d}")).collect();
                        return Err(unknown(source, &format!("defaults.{key}"), &known));
                    }
                    sets.extend(defaults.into_iter().map(|(k, v)| Set::Default(vec![k], v)))
                }
                other => return Err(invalid("defaults", format!("must be an object, not {}", shown(&other)))),
            },
            "listen" => sets.push(Set::Listen(text(&value).and_then(check_listen).map_err(|m| invalid("listen", m))?)),
            "log_level" => {
                let level = text(&value).and_then(check_log_level).map_err(|m| invalid("log_level", m))?;
                sets.push(Set::LogLevel(level));
            }
            "auth_token" => {
                let token = match &value {
                    Value::Null => None,
                    v => Some(text(v).and_then(check_token).map_err(|m| invalid("auth_token", m))?),
                };
                sets.push(Set::AuthToken(token));
            }
            "plugins_dir" => {
                let dir = match &value {
                    Value::Null => None,
                    v => Some(text(v).map_err(|m| invalid("plugins_dir", m))?),
                };
                sets.push(Set::PluginsDir(dir.filter(|d| !d.is_empty()).map(std::path::PathBuf::from)));
            }
            "limits" => {
                let Value::Object(limits) = value else {
                    return Err(invalid("limits", format!("must be an object, not {}", shown(&value))));
                };
                for (name, v) in limits {
                    let Some(&name) = Limits::KEYS.iter().find(|k| **k == name) else {
                        let typed = format!("limits.{name}");
                        let known = Limits::KEYS.map(|k| format!("limits.{k}"));
                        return Err(unknown(source, &typed, &known));
                    };
                    let key = format!("limits.{name}");
                    let count = match v.as_u64() {
                        Some(n) => check_limit(name, n),
                        None => Err(format!("must be a whole number, not {}", shown(&v))),
                    };
                    sets.push(Set::Limit(name, count.map_err(|m| invalid(&key, m))?));
                }
            }
            "inventory" => {
                let Value::Object(keys) = value else {
                    return Err(invalid("inventory", format!("must be an object, not {}", shown(&value))));
                };
                for (name, v) in keys {
                    let Some(&name) = InventoryConfig::KEYS.iter().find(|k| **k == name) else {
                        let known = InventoryConfig::KEYS.map(|k| format!("inventory.{k}"));
                        return Err(unknown(source, &format!("inventory.{name}"), &known));
                    };
                    InventoryConfig::default().set(name, &v).map_err(|m| invalid(&format!("inventory.{name}"), m))?;
                    sets.push(Set::Inventory(name, v));
                }
            }
            "record" => {
                let Value::Object(keys) = value else {
                    return Err(invalid("record", format!("must be an object, not {}", shown(&value))));
                };
                for (name, v) in keys {
                    let Some(&name) = RecordConfig::KEYS.iter().find(|k| **k == name) else {
                        let known = RecordConfig::KEYS.map(|k| format!("record.{k}"));
                        return Err(unknown(source, &format!("record.{name}"), &known));
                    };
                    RecordConfig::check(name, &v).map_err(|m| invalid(&format!("record.{name}"), m))?;
                    sets.push(Set::Record(name, v));
                }
            }
            "shadow_config" => {
                let path = match &value {
                    Value::Null => None,
                    v => Some(text(v).map_err(|m| invalid("shadow_config", m))?),
                };
                sets.push(Set::ShadowConfig(path.filter(|p| !p.is_empty()).map(std::path::PathBuf::from)));
            }
            "shadow_cpu_ms_per_s" => match value.as_u64() {
                Some(ms) if ms > 0 => sets.push(Set::ShadowCpu(ms)),
                _ => {
                    return Err(invalid(
                        "shadow_cpu_ms_per_s",
                        format!("must be a whole number above 0, not {}", shown(&value)),
                    ))
                }
            },
            _ => return Err(unknown(source, &key, &TOP_KEYS.map(String::from))),
        }
    }
    Ok(sets.into_iter().map(|set| Setting { source: source.clone(), set }).collect())
}

/// The environment's settings: every `DAPI_*` variable but `DAPI_CONFIG` (the file's name).
fn env_settings(env: impl IntoIterator<Item = (String, String)>) -> Result<Vec<Setting>, ConfigError> {
    let mut vars: Vec<(String, String)> =
        env.into_iter().filter(|(k, _)| k.starts_with("DAPI_") && k != "DAPI_CONFIG").collect();
    // By name, so that `DAPI_DEFAULTS` (all of them) comes before `DAPI_DEFAULTS__X`.
    vars.sort();
    let mut settings = Vec::new();
    for (name, raw) in vars {
        let source = Source::Env(name.clone());
        let invalid =
            |key: &str, message: String| ConfigError::Invalid { source: source.clone(), key: key.into(), message };
        let lowered = name["DAPI_".len()..].to_ascii_lowercase();
        let path: Vec<&str> = lowered.split("__").collect();
        let mut sets = Vec::new();
        match path.as_slice() {
            ["allocationdescription" | "allocation_description"] => {
                let chain = serde_json::from_str(&raw)
                    .map_err(|e| invalid("allocationDescription", format!("not JSON: {e}")))?;
                sets.push(Set::Chain(chain));
            }
            ["defaults"] => match serde_json::from_str(&raw) {
                Ok(Value::Object(defaults)) => {
                    if let Some(key) = defaults.keys().find(|k| !is_default(k)) {
                        let known: Vec<String> = default_keys().map(str::to_string).collect();
                        let hint = key_hint(closest(key, &known), &known);
                        return Err(invalid("defaults", format!("unknown key {key:?}; {hint}")));
                    }
                    sets.extend(defaults.into_iter().map(|(k, v)| Set::Default(vec![k], v)));
                }
                Ok(other) => return Err(invalid("defaults", format!("must be a JSON object, not {}", shown(&other)))),
                Err(e) => return Err(invalid("defaults", format!("not JSON: {e}"))),
            },
            ["defaults", rest @ ..] if rest.iter().all(|k| !k.is_empty()) => {
                if !is_default(rest[0]) {
                    let known: Vec<String> =
                        default_keys().map(|d| format!("DAPI_DEFAULTS__{}", d.to_ascii_uppercase())).collect();
                    return Err(unknown(&source, &name, &known));
                }
                sets.push(Set::Default(rest.iter().map(|k| k.to_string()).collect(), env_scalar(&raw)));
            }
            ["listen"] => sets.push(Set::Listen(check_listen(&raw).map_err(|m| invalid("listen", m))?)),
            ["log_level"] => sets.push(Set::LogLevel(check_log_level(&raw).map_err(|m| invalid("log_level", m))?)),
            ["plugins_dir"] => {
                sets.push(Set::PluginsDir(Some(raw.as_str()).filter(|d| !d.is_empty()).map(std::path::PathBuf::from)))
            }
            ["auth_token"] => sets.push(Set::AuthToken(Some(check_token(&raw).map_err(|m| invalid("auth_token", m))?))),
            ["limits", typed] => {
                let Some(key) = Limits::KEYS.iter().copied().find(|k| k == typed) else {
                    return Err(unknown(&source, &name, &env_names()));
                };
                let count = raw
                    .trim()
                    .parse::<u64>()
                    .map_err(|e| format!("{e} (a whole number is needed, not {raw:?})"))
                    .and_then(|n| check_limit(key, n));
                sets.push(Set::Limit(key, count.map_err(|m| invalid(&format!("limits.{key}"), m))?));
            }
            ["inventory", typed] => {
                let Some(key) = InventoryConfig::KEYS.iter().copied().find(|k| k == typed) else {
                    return Err(unknown(&source, &name, &env_names()));
                };
                let value = if key == "url" { Value::String(raw.clone()) } else { env_scalar(raw.trim()) };
                InventoryConfig::default().set(key, &value).map_err(|m| invalid(&format!("inventory.{key}"), m))?;
                sets.push(Set::Inventory(key, value));
            }
            ["record", typed] => {
                let Some(key) = RecordConfig::KEYS.iter().copied().find(|k| k == typed) else {
                    return Err(unknown(&source, &name, &env_names()));
                };
                let value = if key == "dir" { Value::String(raw.clone()) } else { env_scalar(raw.trim()) };
                RecordConfig::check(key, &value).map_err(|m| invalid(&format!("record.{key}"), m))?;
                sets.push(Set::Record(key, value));
            }
            ["shadow_config"] => {
                sets.push(Set::ShadowConfig(Some(raw.as_str()).filter(|p| !p.is_empty()).map(std::path::PathBuf::from)))
            }
            ["shadow_cpu_ms_per_s"] => match raw.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => sets.push(Set::ShadowCpu(ms)),
                _ => {
                    return Err(invalid("shadow_cpu_ms_per_s", format!("must be a whole number above 0, not {raw:?}")))
                }
            },
            _ => return Err(unknown(&source, &name, &env_names())),
        }
        settings.extend(sets.into_iter().map(|set| Setting { source: source.clone(), set }));
    }
    Ok(settings)
}

/// The variables that set each key.
fn env_names() -> Vec<String> {
    let mut names: Vec<String> = ["ALLOCATIONDESCRIPTION", "DEFAULTS", "DEFAULTS__<NAME>", "LISTEN", "LOG_LEVEL"]
        .iter()
        .map(|n| format!("DAPI_{n}"))
        .collect();
    names.extend(Limits::KEYS.iter().map(|k| format!("DAPI_LIMITS__{}", k.to_ascii_uppercase())));
    names.push("DAPI_AUTH_TOKEN".into());
    names.push("DAPI_PLUGINS_DIR".into());
    names.extend(InventoryConfig::KEYS.iter().map(|k| format!("DAPI_INVENTORY__{}", k.to_ascii_uppercase())));
    names.extend(RecordConfig::KEYS.iter().map(|k| format!("DAPI_RECORD__{}", k.to_ascii_uppercase())));
    names.push("DAPI_SHADOW_CONFIG".into());
    names.push("DAPI_SHADOW_CPU_MS_PER_S".into());
    names
}

/// A single default from the environment: a boolean or a number when it reads as one
/// (`false`, `0.5`), else the text.
fn env_scalar(raw: &str) -> Value {
    if let Ok(b) = raw.to_ascii_lowercase().parse::<bool>() {
        return Value::Bool(b);
    }
    if let Ok(n) = raw.parse::<i64>() {
        return Value::from(n);
    }
    match raw.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        Some(n) => Value::Number(n),
        None => Value::String(raw.to_string()),
    }
}

/// An unknown key, with the closest known one suggested (or all of them listed, once).
fn unknown(source: &Source, typed: &str, known: &[String]) -> ConfigError {
    let hint = match suggest(typed, known) {
        Some(s) if matches!(source, Source::Env(_)) => format!("did you mean {s}?"),
        None if matches!(source, Source::Env(_)) => format!("the settings are {}", known.join(", ")),
        suggested => key_hint(suggested, known),
    };
    ConfigError::UnknownKey { source: source.clone(), key: typed.to_string(), hint }
}

/// What to say of an unknown key of JSON: the `suggested` one, or every `known` one.
fn key_hint(suggested: Option<String>, known: &[String]) -> String {
    match suggested {
        Some(s) => format!("did you mean {s:?}?"),
        None => format!("the keys are {}", known.join(", ")),
    }
}

/// The allocator defaults a config may set (`filter_headnode`, `weight_unreserved_ram`...).
fn default_keys() -> impl Iterator<Item = &'static str> {
    crate::engine::Defaults::keys().iter().copied()
}

fn is_default(key: &str) -> bool {
    default_keys().any(|k| k == key)
}

/// [`closest`], and for variables a default named with one `_` where `__` was meant
/// (`DAPI_DEFAULTS_FILTER_HEADNODE`), or as `DEFAULT`.
fn suggest(typed: &str, known: &[String]) -> Option<String> {
    let upper = typed.to_ascii_uppercase();
    for prefix in ["DAPI_DEFAULTS_", "DAPI_DEFAULT__", "DAPI_DEFAULT_"] {
        if let Some(rest) = upper.strip_prefix(prefix).filter(|r| !r.is_empty() && !r.starts_with('_')) {
            return Some(format!("DAPI_DEFAULTS__{rest}"));
        }
    }
    closest(typed, known)
}

/// The known key closest to `typed` (ignoring case), when it is close enough to be the
/// one meant: at most a third of its letters differ.
fn closest(typed: &str, known: &[String]) -> Option<String> {
    let typed_lower = typed.to_lowercase();
    let (best, distance) =
        known.iter().map(|k| (k, edit_distance(&typed_lower, &k.to_lowercase()))).min_by_key(|(_, d)| *d)?;
    (distance <= (typed.chars().count() / 3).max(1)).then(|| best.clone())
}

/// Levenshtein distance: the fewest one-character insertions, deletions and substitutions
/// that turn `a` into `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substituted = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substituted.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

fn text(value: &Value) -> Result<&str, String> {
    value.as_str().ok_or_else(|| format!("must be a string, not {}", shown(value)))
}

/// A JSON value as a message shows it (shortened).
fn shown(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(60) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

/// `host:port` as binding takes it: an IP address (IPv6 in brackets) or a host name,
/// resolved when the service binds (`localhost:8080`, `[::1]:8080`, `0.0.0.0:8080`).
fn check_listen(listen: &str) -> Result<String, String> {
    let wrong = |why: &str| {
        Err(format!("must be host:port such as 127.0.0.1:8080, localhost:8080 or [::1]:8080, not {listen:?} ({why})"))
    };
    if listen.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(listen.to_string());
    }
    let Some((host, port)) = listen.rsplit_once(':') else { return wrong("no port") };
    if port.parse::<u16>().is_err() {
        return wrong("the port is a number from 0 to 65535");
    }
    if host.starts_with('[') {
        return wrong("not an IPv6 address in brackets");
    }
    if host.contains(':') {
        return wrong("an IPv6 address goes in brackets");
    }
    let name_chars = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.';
    if host.is_empty() || !host.chars().all(name_chars) {
        return wrong("not a host name or address");
    }
    Ok(listen.to_string())
}

fn check_log_level(level: &str) -> Result<String, String> {
    let lowered = level.to_ascii_lowercase();
    match lowered.as_str() {
        "error" | "warn" | "info" | "debug" | "trace" => Ok(lowered),
        _ => Err(format!("must be error, warn, info, debug or trace, not {level:?}")),
    }
}

fn check_token(token: &str) -> Result<String, String> {
    if token.trim().is_empty() {
        return Err("must not be empty (leave it out to disable authentication)".into());
    }
    Ok(token.to_string())
}

fn check_limit(key: &str, value: u64) -> Result<u64, String> {
    if value == 0 && !Limits::MAY_BE_ZERO.contains(&key) {
        return Err("must be at least 1".into());
    }
    if key == "plugin_memory_bytes" && value < MIN_PLUGIN_MEMORY_BYTES {
        return Err(format!(
            "must be at least {MIN_PLUGIN_MEMORY_BYTES} (1 MiB: below it the JavaScript engine has next to no room for a plugin or an owner filter), not {value}"
        ));
    }
    Ok(value)
}

/// The least `limits.plugin_memory_bytes`: below it, no plugin or owner filter could run.
const MIN_PLUGIN_MEMORY_BYTES: u64 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn load_env(vars: &[(&str, &str)]) -> Result<ServiceConfig, String> {
        ServiceConfig::load(None, env(vars)).map_err(|e| e.to_string())
    }

    /// A config file in a fresh directory, removed when dropped.
    struct TmpFile(std::path::PathBuf);

    impl TmpFile {
        fn new(name: &str, text: &str) -> TmpFile {
            let dir = std::env::temp_dir().join(format!("dapi-config-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("tmp dir");
            let path = dir.join("c.json");
            std::fs::write(&path, text).expect("write");
            TmpFile(path)
        }

        fn load(&self) -> Result<ServiceConfig, String> {
            ServiceConfig::load(Some(&self.0), env(&[])).map_err(|e| e.to_string())
        }
    }

    impl Drop for TmpFile {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    #[test]
    fn built_in_config_is_cnapis_production_chain() {
        let c = load_env(&[]).expect("default config");
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(c.log_level, "info");
        assert_eq!(c.allocation_description[1], "hard-filter-setup");
        assert_eq!(c.defaults["weight_uniform_random"], 0.5);
        assert_eq!(c.limits.max_servers, 20_000);
        assert!(c.limits.worker_threads >= 1);
        assert_eq!(c.inventory.recurring_kinds, 4);
        c.engine().expect("default engine");
    }

    #[test]
    fn environment_overrides_nested_keys() {
        let c = load_env(&[
            ("DAPI_LISTEN", "127.0.0.1:9999"),
            ("DAPI_LIMITS__MAX_SERVERS", "12"),
            ("DAPI_LIMITS__REQUEST_TIMEOUT_MS", "5000"),
            ("DAPI_LIMITS__WORKER_THREADS", "3"),
            ("DAPI_INVENTORY__RECURRING_KINDS", "16"),
            ("DAPI_DEFAULTS__WEIGHT_UNIFORM_RANDOM", "0"),
            ("DAPI_DEFAULTS__FILTER_HEADNODE", "false"),
            ("DAPI_DEFAULTS__WEIGHT_NEXT_REBOOT", "0.25"),
            ("DAPI_LOG_LEVEL", "DEBUG"),
            ("DAPI_AUTH_TOKEN", "12345"),
            ("OTHER", "x"),
        ])
        .expect("config");
        assert_eq!(c.listen, "127.0.0.1:9999");
        assert_eq!(c.limits.max_servers, 12);
        assert_eq!(c.limits.request_timeout_ms, 5000);
        assert_eq!(c.limits.worker_threads, 3);
        assert_eq!(c.inventory.recurring_kinds, 16);
        assert_eq!(c.defaults["weight_uniform_random"], 0);
        assert_eq!(c.defaults["filter_headnode"], false);
        assert_eq!(c.defaults["weight_next_reboot"], 0.25);
        assert_eq!(c.log_level, "debug");
        // A token is text even when it looks like a number.
        assert_eq!(c.auth_token.as_deref(), Some("12345"));
        c.engine().expect("engine");
    }

    #[test]
    fn whole_values_from_the_environment_are_json() {
        let c = load_env(&[
            ("DAPI_ALLOCATIONDESCRIPTION", r#"["pipe", "identity"]"#),
            ("DAPI_DEFAULTS", r#"{"filter_vm_limit": "10", "filter_headnode": true}"#),
            ("DAPI_DEFAULTS__FILTER_HEADNODE", "false"),
        ])
        .expect("config");
        assert_eq!(c.allocation_description, serde_json::json!(["pipe", "identity"]));
        assert_eq!(c.defaults["filter_vm_limit"], "10");
        // The more specific variable wins, whatever the environment's order.
        assert_eq!(c.defaults["filter_headnode"], false);
        let err = load_env(&[("DAPI_ALLOCATIONDESCRIPTION", "[pipe")]).expect_err("not JSON");
        assert!(err.starts_with("DAPI_ALLOCATIONDESCRIPTION: not JSON: "), "{err}");
    }

    #[test]
    fn listen_takes_host_names_and_ipv6() {
        for good in ["localhost:8080", "[::1]:8080", "0.0.0.0:0", "dapi.example.com:80", "[::]:8080"] {
            assert_eq!(load_env(&[("DAPI_LISTEN", good)]).map(|c| c.listen), Ok(good.to_string()), "{good}");
        }
        for (bad, why) in [
            ("nowhere", "no port"),
            ("localhost:99999", "the port is a number"),
            ("::1:8080", "an IPv6 address goes in brackets"),
            ("[::1:8080", "not an IPv6 address in brackets"),
            (":8080", "not a host name"),
            ("my host:80", "not a host name"),
        ] {
            let err = load_env(&[("DAPI_LISTEN", bad)]).expect_err(bad);
            assert!(err.starts_with("DAPI_LISTEN: must be host:port"), "{err}");
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn an_error_from_the_environment_names_the_variable() {
        let err = load_env(&[("DAPI_LIMITS__MAX_SERVERS", "2k")]).expect_err("not a number");
        assert_eq!(
            err,
            r#"DAPI_LIMITS__MAX_SERVERS: invalid digit found in string (a whole number is needed, not "2k")"#
        );
        let err = load_env(&[("DAPI_LIMITS__MAX_SERVERS", "0")]).expect_err("zero");
        assert_eq!(err, "DAPI_LIMITS__MAX_SERVERS: must be at least 1");
        let err = load_env(&[("DAPI_LIMITS__WORKER_THREADS", "0")]).expect_err("no threads");
        assert_eq!(err, "DAPI_LIMITS__WORKER_THREADS: must be at least 1");
        let err = load_env(&[("DAPI_LIMITS__PLUGIN_MEMORY_BYTES", "1000")]).expect_err("no room for the engine");
        assert!(err.starts_with("DAPI_LIMITS__PLUGIN_MEMORY_BYTES: must be at least 1048576 (1 MiB"), "{err}");
        assert!(err.ends_with("not 1000"), "{err}");
        assert_eq!(
            load_env(&[("DAPI_LIMITS__PLUGIN_MEMORY_BYTES", "1048576")]).map(|c| c.limits.plugin_memory_bytes),
            Ok(1 << 20)
        );
        let err = load_env(&[("DAPI_INVENTORY__RECURRING_KINDS", "0")]).expect_err("no kinds");
        assert!(err.starts_with("DAPI_INVENTORY__RECURRING_KINDS: must be a whole number above 0"), "{err}");
        let err = load_env(&[("DAPI_INVENTORY__CLAIM_TTL_S", "999999999999999")]).expect_err("ttl past any use");
        assert_eq!(err, "DAPI_INVENTORY__CLAIM_TTL_S: must be at most 31536000 (a year), not 999999999999999");
        assert_eq!(
            load_env(&[("DAPI_INVENTORY__CLAIM_TTL_S", "31536000")]).map(|c| c.inventory.claim_ttl_s),
            Ok(31536000)
        );
        let err = load_env(&[("DAPI_LOG_LEVEL", "loud")]).expect_err("level");
        assert!(err.starts_with("DAPI_LOG_LEVEL: must be error, warn"), "{err}");
        let err = load_env(&[("DAPI_AUTH_TOKEN", " ")]).expect_err("empty token");
        assert!(err.starts_with("DAPI_AUTH_TOKEN: must not be empty"), "{err}");
        // Defaults are checked by the engine; its error is traced back to the variable.
        let err = load_env(&[("DAPI_DEFAULTS__WEIGHT_UNRESERVED_RAM", "2"), ("DAPI_DEFAULTS__FILTER_HEADNODE", "yes")])
            .expect("loads")
            .engine()
            .expect_err("invalid default")
            .to_string();
        assert_eq!(err, "DAPI_DEFAULTS__FILTER_HEADNODE: Defaults filter_headnode is not boolean");
        let err = load_env(&[("DAPI_ALLOCATIONDESCRIPTION", r#"["pipe", "hard-filter-foo"]"#)])
            .expect("loads")
            .engine()
            .expect_err("invalid chain")
            .to_string();
        assert!(err.starts_with("DAPI_ALLOCATIONDESCRIPTION: Bad expression given: "), "{err}");
    }

    #[test]
    fn record_and_shadow_settings_come_from_a_file_or_the_environment() {
        let config = load_env(&[
            ("DAPI_RECORD__DIR", "/var/tmp/records"),
            ("DAPI_RECORD__MAX_COUNT", "5"),
            ("DAPI_SHADOW_CONFIG", "shadow.json"),
            ("DAPI_SHADOW_CPU_MS_PER_S", "100"),
        ])
        .expect("loads");
        assert_eq!(config.record.dir, Some(("/var/tmp/records".into(), Source::Env("DAPI_RECORD__DIR".into()))));
        assert_eq!((config.record.max_count, config.record.max_bytes), (5, 1 << 30));
        assert_eq!(config.shadow_config.map(|(p, _)| p), Some("shadow.json".into()));
        assert_eq!(config.shadow_cpu_ms_per_s, 100);
        let off = load_env(&[]).expect("loads");
        assert!(off.record.dir.is_none() && off.shadow_config.is_none(), "both are off by default");

        let err = load_env(&[("DAPI_RECORD__MAX_BYTES", "0")]).expect_err("zero");
        assert_eq!(err, "DAPI_RECORD__MAX_BYTES: must be a whole number above 0, not 0");
        let err = load_env(&[("DAPI_SHADOW_CPU_MS_PER_S", "lots")]).expect_err("not a number");
        assert_eq!(err, r#"DAPI_SHADOW_CPU_MS_PER_S: must be a whole number above 0, not "lots""#);
        let file = TmpFile::new("record.json", r#"{"record": {"dri": "x"}}"#);
        let err = file.load().expect_err("mistyped");
        assert!(err.contains(r#"unknown key "record.dri"; did you mean "record.dir"?"#), "{err}");
        let file = TmpFile::new("record-count.json", r#"{"record": {"max_count": "many"}}"#);
        let err = file.load().expect_err("not a number");
        assert!(err.ends_with(r#"record.max_count: must be a whole number above 0, not "many""#), "{err}");
    }

    #[test]
    fn a_file_error_shows_the_path_as_given() {
        let err = ServiceConfig::load(Some(Path::new("no/such/dapi.json")), env(&[])).expect_err("missing");
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        assert!(err.to_string().starts_with("cannot read config file no/such/dapi.json: "), "{err}");

        let file = TmpFile::new("not-json", "{\"listen\": \n");
        let err = file.load().expect_err("not JSON");
        assert!(err.starts_with(&format!("config file {} is not JSON: ", file.0.display())), "{err}");
        assert!(err.contains("line 2"), "{err}");

        let file = TmpFile::new("bad-value", r#"{"limits": {"max_servers": "many"}}"#);
        let err = file.load().expect_err("not a number");
        assert_eq!(
            err,
            format!(r#"config file {}: limits.max_servers: must be a whole number, not "many""#, file.0.display())
        );

        let file = TmpFile::new("bad-chain", r#"{"allocationDescription": ["pipe", "hard-filter-foo"]}"#);
        let err = file.load().expect("loads").engine().expect_err("bad chain").to_string();
        assert!(err.starts_with(&format!("config file {}: Bad expression given: ", file.0.display())), "{err}");
    }

    #[test]
    fn a_mistyped_key_suggests_the_right_one_once() {
        let file = TmpFile::new("typo-top", r#"{"allocationdescriptoin": []}"#);
        let err = file.load().expect_err("typo");
        assert!(
            err.ends_with(r#"unknown key "allocationdescriptoin"; did you mean "allocationDescription"?"#),
            "{err}"
        );
        let file = TmpFile::new("typo-limits", r#"{"limits": {"max_server": 1}}"#);
        let err = file.load().expect_err("typo");
        assert!(err.ends_with(r#"unknown key "limits.max_server"; did you mean "limits.max_servers"?"#), "{err}");
        // Nothing close: each key is listed once (no case variants).
        let file = TmpFile::new("typo-far", r#"{"timeout": 1}"#);
        let err = file.load().expect_err("unknown");
        assert!(
            err.ends_with(
                "the keys are allocationDescription, defaults, listen, log_level, limits, auth_token, plugins_dir, \
                 inventory, record, shadow_config, shadow_cpu_ms_per_s"
            ),
            "{err}"
        );

        let err = load_env(&[("DAPI_LIMITS__MAX_SERVER", "1")]).expect_err("typo");
        assert_eq!(err, "DAPI_LIMITS__MAX_SERVER: no such setting; did you mean DAPI_LIMITS__MAX_SERVERS?");
        let err = load_env(&[("DAPI_LOGLEVEL", "debug")]).expect_err("typo");
        assert!(err.ends_with("did you mean DAPI_LOG_LEVEL?"), "{err}");
        let err = load_env(&[("DAPI_DEFAULTS_FILTER_HEADNODE", "false")]).expect_err("one underscore");
        assert!(err.ends_with("did you mean DAPI_DEFAULTS__FILTER_HEADNODE?"), "{err}");
        let err = load_env(&[("DAPI_DEFAULT__FILTER_HEADNODE", "false")]).expect_err("no S");
        assert!(err.ends_with("did you mean DAPI_DEFAULTS__FILTER_HEADNODE?"), "{err}");
        let err = load_env(&[("DAPI_COLOUR", "blue")]).expect_err("unknown");
        assert!(err.contains("the settings are DAPI_ALLOCATIONDESCRIPTION, DAPI_DEFAULTS, "), "{err}");

        // A default's key, wherever it is set, as for the service's own keys.
        let file = TmpFile::new("typo-default", r#"{"defaults": {"filter_headnod": true}}"#);
        let err = file.load().expect_err("typo");
        assert!(
            err.ends_with(r#"unknown key "defaults.filter_headnod"; did you mean "defaults.filter_headnode"?"#),
            "{err}"
        );
        let err = load_env(&[("DAPI_DEFAULTS__FILTER_HEADNOD", "false")]).expect_err("typo");
        assert_eq!(err, "DAPI_DEFAULTS__FILTER_HEADNOD: no such setting; did you mean DAPI_DEFAULTS__FILTER_HEADNODE?");
        let err = load_env(&[("DAPI_DEFAULTS", r#"{"weight_unreserved_rm": 1}"#)]).expect_err("typo");
        assert_eq!(err, r#"DAPI_DEFAULTS: unknown key "weight_unreserved_rm"; did you mean "weight_unreserved_ram"?"#);
        let err = load_env(&[("DAPI_DEFAULTS", r#"{"colour": "blue"}"#)]).expect_err("unknown");
        assert!(err.contains(r#"unknown key "colour"; the keys are disable_override_overprovisioning, "#), "{err}");
        // Every key the defaults take is taken.
        let all: Map<String, Value> =
            crate::engine::Defaults::keys().iter().map(|k| (k.to_string(), Value::Null)).collect();
        let file = TmpFile::new("every-default", &serde_json::json!({"defaults": all}).to_string());
        file.load().expect("every default's key is known");
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("listen", "listen"), 0);
        assert_eq!(edit_distance("listn", "listen"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(suggest("max_concurrent", &Limits::KEYS.map(String::from)), None);
        assert_eq!(suggest("request_timeout", &Limits::KEYS.map(String::from)).as_deref(), Some("request_timeout_ms"));
    }

    #[test]
    fn object_key_order_survives_loading() {
        // filter_owner_server's key order decides which owner a removed server is blamed on.
        let owners = [
            "955ed486-8483-4058-a292-b2e92a947db9",
            "cf16e1c8-80c4-457c-9f81-ce22a2b05ca8",
            "0aae0b14-c55f-442a-83c9-4dbee0d73413",
        ];
        let filters: Map<String, Value> = owners.iter().map(|o| (o.to_string(), Value::from("true"))).collect();
        let text = serde_json::json!({"defaults": {"filter_owner_server": filters}}).to_string();
        let file = TmpFile::new("order", &text);
        let c = file.load().expect("config");
        let keys: Vec<&String> = c.defaults["filter_owner_server"].as_object().expect("object").keys().collect();
        assert_eq!(keys, owners);
    }

    #[test]
    fn a_file_replaces_the_chain_and_merges_defaults() {
        let file = TmpFile::new(
            "merge",
            r#"{"allocationDescription": ["pipe", "identity"], "defaults": {"filter_vm_limit": "10"}}"#,
        );
        let c = file.load().expect("config");
        assert_eq!(c.allocation_description, serde_json::json!(["pipe", "identity"]));
        assert_eq!(c.defaults["filter_vm_limit"], "10");
        assert_eq!(c.defaults["weight_unreserved_ram"], 2);
        // The environment wins over the file, key by key.
        let c = ServiceConfig::load(Some(&file.0), env(&[("DAPI_DEFAULTS__FILTER_VM_LIMIT", "12")])).expect("config");
        assert_eq!(c.defaults["filter_vm_limit"], 12);
        assert_eq!(c.allocation_description, serde_json::json!(["pipe", "identity"]));
    }
}
