//! The built-in plugins ("algorithms"), one file each, named after the lookup name.
//!
//! A plugin implements the engine's contract (`engine::plugin`): a per-server rule
//! ([`ServerFilter`](crate::engine::ServerFilter)) or a pass over the whole candidate list
//! ([`Plugin`]), with its [`Declaration`](crate::engine::Declaration). To add one: write the
//! file, add it to `mod` and to [`built_in`]. `shared/` holds the domain logic several
//! plugins use (unreserved resources, platforms, locality, affinity, scoring).

pub mod custom_js;
pub mod shared;

mod calculate_affinity;
mod calculate_server_unreserved;
mod calculate_ticketed_vms;
mod hard_filter_capness;
mod hard_filter_feature_min_platform;
mod hard_filter_force_failure;
mod hard_filter_headnode;
mod hard_filter_hvm;
mod hard_filter_invalid_servers;
mod hard_filter_large_servers;
mod hard_filter_locality_hints;
mod hard_filter_min_cpu;
mod hard_filter_min_disk;
mod hard_filter_min_free_disk;
mod hard_filter_min_ram;
mod hard_filter_os;
mod hard_filter_overprovision_ratios;
mod hard_filter_owners_servers;
mod hard_filter_platform_versions;
mod hard_filter_reserved;
mod hard_filter_reservoir;
mod hard_filter_running;
mod hard_filter_setup;
mod hard_filter_traits;
mod hard_filter_virtual_servers;
mod hard_filter_vlans;
mod hard_filter_vm_count;
mod hard_filter_volumes_from;
mod hard_filter_zpool_encryption;
mod identity;
mod load_server_vms;
mod override_overprovisioning;
mod score_current_platform;
mod score_next_reboot;
mod score_num_owner_zones;
mod score_uniform_random;
mod score_unreserved_disk;
mod score_unreserved_ram;
mod soft_filter_locality_hints;

#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use crate::engine::Plugin;

/// Every built-in plugin, once.
pub fn built_in() -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(calculate_affinity::CalculateAffinity),
        Arc::new(calculate_server_unreserved::CalculateServerUnreserved),
        Arc::new(calculate_ticketed_vms::CalculateTicketedVms),
        Arc::new(hard_filter_capness::HardFilterCapness),
        Arc::new(hard_filter_feature_min_platform::HardFilterFeatureMinPlatform),
        Arc::new(hard_filter_force_failure::HardFilterForceFailure),
        Arc::new(hard_filter_headnode::HardFilterHeadnode),
        Arc::new(hard_filter_hvm::HardFilterHvm),
        Arc::new(hard_filter_invalid_servers::HardFilterInvalidServers),
        Arc::new(hard_filter_large_servers::HardFilterLargeServers),
        Arc::new(hard_filter_locality_hints::HardFilterLocalityHints),
        Arc::new(hard_filter_min_cpu::HardFilterMinCpu),
        Arc::new(hard_filter_min_disk::HardFilterMinDisk),
        Arc::new(hard_filter_min_free_disk::HardFilterMinFreeDisk),
        Arc::new(hard_filter_min_ram::HardFilterMinRam),
        Arc::new(hard_filter_os::HardFilterOs),
        Arc::new(hard_filter_overprovision_ratios::HardFilterOverprovisionRatios),
        Arc::new(hard_filter_owners_servers::HardFilterOwnersServers),
        Arc::new(hard_filter_platform_versions::HardFilterPlatformVersions),
        Arc::new(hard_filter_reserved::HardFilterReserved),
        Arc::new(hard_filter_reservoir::HardFilterReservoir),
        Arc::new(hard_filter_running::HardFilterRunning),
        Arc::new(hard_filter_setup::HardFilterSetup),
        Arc::new(hard_filter_traits::HardFilterTraits),
        Arc::new(hard_filter_virtual_servers::HardFilterVirtualServers),
        Arc::new(hard_filter_vlans::HardFilterVlans),
        Arc::new(hard_filter_vm_count::HardFilterVmCount),
        Arc::new(hard_filter_volumes_from::HardFilterVolumesFrom),
        Arc::new(hard_filter_zpool_encryption::HardFilterZpoolEncryption),
        Arc::new(identity::Identity),
        Arc::new(load_server_vms::LoadServerVms),
        Arc::new(override_overprovisioning::OverrideOverprovisioning),
        Arc::new(score_current_platform::ScoreCurrentPlatform),
        Arc::new(score_next_reboot::ScoreNextReboot),
        Arc::new(score_num_owner_zones::ScoreNumOwnerZones),
        Arc::new(score_uniform_random::ScoreUniformRandom),
        Arc::new(score_unreserved_disk::ScoreUnreservedDisk),
        Arc::new(score_unreserved_ram::ScoreUnreservedRam),
        Arc::new(soft_filter_locality_hints::SoftFilterLocalityHints),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_are_39_plugins_with_distinct_names() {
        let mut names: Vec<_> = built_in().iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), 39);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 39);
    }

    #[test]
    fn each_plugin_lives_in_the_file_named_after_it() {
        for plugin in built_in() {
            let file = format!("{}/src/plugins/{}.rs", env!("CARGO_MANIFEST_DIR"), plugin.name().replace('-', "_"));
            assert!(std::path::Path::new(&file).exists(), "{file}");
        }
    }
}
