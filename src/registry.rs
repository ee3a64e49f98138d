//! The plugins an allocation description may name, assembled above the engine (which knows
//! plugins only through this registry) and the plugins (which know only the engine).

use crate::engine::Registry;

/// The built-in plugins.
pub fn built_in() -> Registry {
    let mut registry = Registry::default();
    for plugin in crate::plugins::built_in() {
        // Names are distinct (a plugins test says so), so this cannot fail.
        if let Err(e) = registry.register(plugin) {
            tracing::error!("{e}");
        }
    }
    registry
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
}
