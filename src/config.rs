//! Service configuration: the allocation description, the defaults, and the service's own
//! settings (listen address, log level, limits).
//!
//! Layers, later ones winning key by key: the embedded `config/default.json` (CNAPI's
//! production chain and defaults), then the file named by `--config` or `DAPI_CONFIG`, then
//! environment variables prefixed `DAPI_`, with `__` between nested keys:
//! `DAPI_LISTEN=0.0.0.0:8080`, `DAPI_LOG_LEVEL=debug`, `DAPI_LIMITS__MAX_SERVERS=20000`,
//! `DAPI_DEFAULTS__WEIGHT_UNIFORM_RANDOM=0`. Environment values are read as booleans or
//! numbers when they look like one.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::engine::Engine;

/// The built-in configuration: CNAPI's production chain and defaults.
pub const DEFAULT_CONFIG: &str = include_str!("../config/default.json");

/// Everything the service reads at start-up.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// The plugin chain, a `["pipe", ...]` expression.
    #[serde(rename = "allocationDescription", alias = "allocationdescription")]
    pub allocation_description: Value,
    /// Allocator defaults (`filter_*`, `weight_*`, ...); CNAPI's fill the gaps.
    #[serde(default)]
    pub defaults: Value,
    /// Address to listen on (loopback unless told otherwise).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    #[serde(default = "default_log_level")]
    pub log_level: String,
    #[serde(default)]
    pub limits: Limits,
    /// When set, `/allocate`, `/capacity` and `/admin/reload` need
    /// `Authorization: Bearer <token>` (`/ping`, `/metrics`, `/openapi.json` stay open).
    #[serde(default)]
    pub auth_token: Option<String>,
}

/// Bounds on the work one request may ask for.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest request body; the default fits 10,000 servers with 30 VMs each.
    pub max_body_bytes: usize,
    /// Most servers in one request.
    pub max_servers: usize,
    /// Most VMs on one server of a request.
    pub max_vms_per_server: usize,
    /// Allocations running at once; beyond it requests are refused with 503.
    pub max_concurrent_allocations: usize,
    /// Longest an allocation may take before the request fails with 503.
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
    /// checks still get in when every ordinary connection is taken.
    pub health_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
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
        }
    }
}

impl Limits {
    /// The connection and upload limits must all be at least 1 (`drain_max_bytes` and
    /// `health_connections` may be 0: no draining, no reserve).
    fn check_connection_limits(&self) -> Result<(), String> {
        for (name, value) in [
            ("header_timeout_ms", self.header_timeout_ms),
            ("idle_timeout_ms", self.idle_timeout_ms),
            ("body_timeout_ms", self.body_timeout_ms),
            ("min_body_bytes_per_sec", self.min_body_bytes_per_sec),
            ("max_connections", self.max_connections as u64),
        ] {
            if value == 0 {
                return Err(format!("config: limits.{name} must be at least 1"));
            }
        }
        Ok(())
    }
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

fn default_log_level() -> String {
    "info".into()
}

impl ServiceConfig {
    /// Loads the layers; `env` is the process environment (passed in for tests).
    pub fn load(file: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<ServiceConfig, String> {
        use config::{Config, Environment, File, FileFormat};
        let mut builder = Config::builder().add_source(File::from_str(DEFAULT_CONFIG, FileFormat::Json));
        if let Some(path) = file {
            if !path.is_file() {
                return Err(format!("config file {} does not exist", path.display()));
            }
            builder = builder.add_source(File::from(path).format(FileFormat::Json));
        }
        let vars: config::Map<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with("DAPI_") && k != "DAPI_CONFIG").collect();
        builder = builder.add_source(
            Environment::with_prefix("DAPI").prefix_separator("_").separator("__").try_parsing(true).source(Some(vars)),
        );
        let merged = builder.build().map_err(|e| format!("config: {e}"))?;
        let config: ServiceConfig = merged.try_deserialize().map_err(|e| format!("config: {e}"))?;
        config.check()?;
        Ok(config)
    }

    /// Loads the file named by `--config` (or `DAPI_CONFIG`) over the built-in one.
    pub fn from_process(file: Option<&str>) -> Result<ServiceConfig, String> {
        let env: Vec<(String, String)> = std::env::vars().collect();
        let from_env = env.iter().find(|(k, _)| k == "DAPI_CONFIG").map(|(_, v)| v.clone());
        let file = file.map(str::to_string).or(from_env);
        ServiceConfig::load(file.as_deref().map(Path::new), env)
    }

    fn check(&self) -> Result<(), String> {
        if self.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(format!("config: listen must be an address such as 127.0.0.1:8080, not {:?}", self.listen));
        }
        if !matches!(self.log_level.as_str(), "error" | "warn" | "info" | "debug" | "trace") {
            return Err(format!(
                "config: log_level must be error, warn, info, debug or trace, not {:?}",
                self.log_level
            ));
        }
        let l = &self.limits;
        for (name, value) in [
            ("max_body_bytes", l.max_body_bytes),
            ("max_servers", l.max_servers),
            ("max_vms_per_server", l.max_vms_per_server),
            ("max_concurrent_allocations", l.max_concurrent_allocations),
        ] {
            if value == 0 {
                return Err(format!("config: limits.{name} must be at least 1"));
            }
        }
        if self.auth_token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err("config: auth_token must not be empty (leave it out to disable authentication)".into());
        }
        if l.request_timeout_ms == 0 {
            return Err("config: limits.request_timeout_ms must be at least 1".into());
        }
        l.check_connection_limits()?;
        Ok(())
    }

    /// The allocation engine this config describes.
    pub fn engine(&self) -> Result<Engine, String> {
        let defaults = if self.defaults.is_null() { Value::Object(Default::default()) } else { self.defaults.clone() };
        let engine_config = serde_json::json!({
            "allocationDescription": self.allocation_description,
            "defaults": defaults,
        });
        let engine = Engine::from_config(&engine_config, &crate::registry::built_in()).map_err(|e| e.to_string())?;
        for warning in engine.warnings() {
            tracing::warn!("allocation description: {warning}");
        }
        Ok(engine)
    }

    /// A short hash of the engine configuration, to tell which one a running service has.
    pub fn digest(&self) -> String {
        let text = serde_json::json!([self.allocation_description, self.defaults]).to_string();
        digest(text.as_bytes())
    }
}

/// XXH3, 64 bits, as hex: a short digest stable across runs and builds (unlike the std
/// hasher); not for security. Fast enough to run over every request body (tens of GB/s,
/// where a byte-at-a-time hash such as FNV cost a quarter of a request's CPU).
pub fn digest(bytes: &[u8]) -> String {
    let mut d = Digest::default();
    d.update(bytes);
    d.finish()
}

/// [`digest`] of input that arrives in pieces (a request body, frame by frame).
#[derive(Default)]
pub struct Digest(xxhash_rust::xxh3::Xxh3);

impl Digest {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(&self) -> String {
        format!("{:016x}", self.0.digest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_digest_does_not_depend_on_how_the_input_is_cut() {
        // XXH3-64 of nothing, as every implementation gives it.
        assert_eq!(digest(b""), "2d06800538d394c2");
        let text: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut pieces = Digest::default();
        for chunk in text.chunks(333) {
            pieces.update(chunk);
        }
        assert_eq!(pieces.finish(), digest(&text));
        assert_ne!(digest(&text[1..]), digest(&text));
    }

    #[test]
    fn built_in_config_is_cnapis_production_chain() {
        let c = ServiceConfig::load(None, env(&[])).expect("default config");
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(c.allocation_description[1], "hard-filter-setup");
        assert_eq!(c.defaults["weight_uniform_random"], 0.5);
        c.engine().expect("default engine");
    }

    #[test]
    fn environment_overrides_nested_keys() {
        let c = ServiceConfig::load(
            None,
            env(&[
                ("DAPI_LISTEN", "127.0.0.1:9999"),
                ("DAPI_LIMITS__MAX_SERVERS", "12"),
                ("DAPI_DEFAULTS__WEIGHT_UNIFORM_RANDOM", "0"),
                ("DAPI_DEFAULTS__FILTER_HEADNODE", "false"),
                ("OTHER", "x"),
            ]),
        )
        .expect("config");
        assert_eq!(c.listen, "127.0.0.1:9999");
        assert_eq!(c.limits.max_servers, 12);
        assert_eq!(c.defaults["weight_uniform_random"], 0);
        assert_eq!(c.defaults["filter_headnode"], false);
        c.engine().expect("engine");
    }

    #[test]
    fn bad_values_name_the_key() {
        let err = ServiceConfig::load(None, env(&[("DAPI_DEFAULTS__FILTER_HEADNODE", "yes")]))
            .expect("loads")
            .engine()
            .expect_err("invalid default");
        assert_eq!(err, "Defaults filter_headnode is not boolean");
        let err = ServiceConfig::load(None, env(&[("DAPI_LIMITS__MAX_SERVER", "1")])).expect_err("typo");
        assert!(err.contains("max_server"), "{err}");
        let err = ServiceConfig::load(None, env(&[("DAPI_LISTEN", "nowhere")])).expect_err("bad address");
        assert!(err.contains("listen"), "{err}");
    }

    #[test]
    fn object_key_order_survives_loading() {
        // filter_owner_server's key order decides which owner a removed server is blamed on.
        let dir = std::env::temp_dir().join(format!("dapi-config-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("c.json");
        let owners = [
            "955ed486-8483-4058-a292-b2e92a947db9",
            "cf16e1c8-80c4-457c-9f81-ce22a2b05ca8",
            "0aae0b14-c55f-442a-83c9-4dbee0d73413",
        ];
        let filters: serde_json::Map<String, Value> =
            owners.iter().map(|o| (o.to_string(), Value::from("true"))).collect();
        let text = serde_json::json!({"defaults": {"filter_owner_server": filters}}).to_string();
        std::fs::write(&path, text).expect("write");
        let c = ServiceConfig::load(Some(&path), env(&[])).expect("config");
        let keys: Vec<&String> = c.defaults["filter_owner_server"].as_object().expect("object").keys().collect();
        assert_eq!(keys, owners);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_replaces_the_chain_and_merges_defaults() {
        let dir = std::env::temp_dir().join(format!("dapi-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let path = dir.join("c.json");
        std::fs::write(
            &path,
            r#"{"allocationDescription": ["pipe", "identity"], "defaults": {"filter_vm_limit": "10"}}"#,
        )
        .expect("write");
        let c = ServiceConfig::load(Some(&path), env(&[])).expect("config");
        assert_eq!(c.allocation_description, serde_json::json!(["pipe", "identity"]));
        assert_eq!(c.defaults["filter_vm_limit"], "10");
        assert_eq!(c.defaults["weight_unreserved_ram"], 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
