//! The plugins an allocation description may name, assembled above the engine (which knows
//! plugins only through this registry) and the plugins (which know only the engine).

use std::path::Path;
use std::sync::Arc;

use crate::engine::Registry;
use crate::js::sandbox::Budget;
use crate::plugins::custom_js::CustomSet;

/// The chain `serverCapacity()` always runs, whatever the configured description.
const CAPACITY_CHAIN: &[&str] = &[
    "hard-filter-setup",
    "hard-filter-running",
    "hard-filter-invalid-servers",
    "load-server-vms",
    "override-overprovisioning",
    "calculate-server-unreserved",
];

/// The built-in plugins, and the capacity chain made of them.
pub fn built_in() -> Registry {
    let mut registry = Registry::default();
    registry.set_capacity_chain(CAPACITY_CHAIN);
    for plugin in crate::plugins::built_in() {
        // Names are distinct (a plugins test says so), so this cannot fail.
        if let Err(e) = registry.register(plugin) {
            tracing::error!("{e}");
        }
    }
    registry
}

/// The built-in plugins and the custom ones of `plugins_dir` (when set), and those custom
/// plugins' files.
pub fn with_custom(plugins_dir: Option<&Path>, budget: Budget) -> Result<(Registry, Option<Arc<CustomSet>>), String> {
    let mut registry = built_in();
    let Some(dir) = plugins_dir else { return Ok((registry, None)) };
    let set = Arc::new(CustomSet::load(dir, budget)?);
    for (plugin, file) in set.plugins().into_iter().zip(&set.files) {
        if registry.lookup(plugin.name()).is_some() {
            return Err(format!(
                "plugin file {}: {:?} is the name of a built-in plugin; rename the file",
                dir.join(&file.file).display(),
                file.lookup
            ));
        }
        registry.register(plugin)?;
    }
    Ok((registry, Some(set)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_built_in_plugin_is_registered() {
        let registry = super::built_in();
        assert_eq!(registry.len(), 39);
        assert!(registry.lookup("hard-filter-min-ram").is_some());
        assert!(registry.lookup("pick-random").is_none());
    }

    fn warnings(description: serde_json::Value) -> Vec<String> {
        let config = serde_json::json!({ "allocationDescription": description });
        let engine = crate::engine::Engine::from_config(&config, &super::built_in()).expect("valid chain");
        engine.warnings().to_vec()
    }

    #[test]
    fn the_production_chain_reads_nothing_before_it_is_written() {
        let config: serde_json::Value =
            serde_json::from_str(include_str!("../config/default.json")).expect("the built-in config");
        assert_eq!(warnings(config["allocationDescription"].clone()), Vec::<String>::new());
    }

    #[test]
    fn a_filter_before_what_it_needs_is_named() {
        let chain = serde_json::json!(["pipe", "hard-filter-min-ram", "calculate-server-unreserved"]);
        assert_eq!(
            warnings(chain),
            ["hard-filter-min-ram reads the servers' unreserved resources before calculate-server-unreserved \
              writes it: move calculate-server-unreserved earlier in the chain"]
        );
        let chain = serde_json::json!(["pipe", "hard-filter-setup", "score-unreserved-ram"]);
        assert_eq!(
            warnings(chain),
            ["score-unreserved-ram reads the servers' unreserved resources, which no plugin before it writes"]
        );
        // Owner filters see the servers as they stand: what nothing wrote yet is absent
        // for them, as in the original, not a mistake.
        let chain = serde_json::json!(["pipe", "hard-filter-owners-servers", "calculate-server-unreserved"]);
        assert_eq!(warnings(chain), Vec::<String>::new());
        let owners = super::built_in().lookup("hard-filter-owners-servers").map(|p| p.declaration().reads.to_vec());
        assert!(owners.is_some_and(|r| r.contains(&crate::engine::Data::Unreserved)));
    }
}
