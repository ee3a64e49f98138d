//! Configuration files: the allocation description and the defaults.

use serde_json::Value;

/// The built-in configuration: CNAPI's production chain and defaults.
pub const DEFAULT_CONFIG: &str = include_str!("../config/default.json");

/// Reads an engine config file (`{"allocationDescription": [...], "defaults": {...}}`).
pub fn read_engine_config(path: &str) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read config {path}: {e}"))?;
    serde_json::from_str(&text).map_err(|e| format!("config {path} is not valid JSON: {e}"))
}

/// The embedded default config.
pub fn default_engine_config() -> Result<Value, String> {
    serde_json::from_str(DEFAULT_CONFIG).map_err(|e| format!("built-in config is not valid JSON: {e}"))
}
