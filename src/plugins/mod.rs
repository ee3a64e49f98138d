//! The plugins ("algorithms") and their registry.
//!
//! Every plugin is one file named after its lookup name, implementing [`Plugin`]: it gets the
//! working set and the ordered candidate list, returns the candidates it passes on, and
//! writes its reasons. To add one: write the file, add it to `mod` and to [`REGISTRY`].

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

use crate::engine::{Reasons, Request, ServerId};

/// What a plugin does: hard filters remove servers that cannot host the VM, soft filters
/// remove servers while enough remain, scorers add to scores, transforms compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    HardFilter,
    SoftFilter,
    Scorer,
    Transform,
}

/// An internal failure inside a plugin (never the caller's mistake).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError(pub String);

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PluginError {}

/// One allocation step.
pub trait Plugin: Sync + Send {
    /// Lookup name, as used in allocation descriptions (`hard-filter-min-ram`).
    fn name(&self) -> &'static str;
    /// Step name, as reported in the step summary (`Servers with enough unreserved RAM`).
    fn step(&self) -> &'static str;
    fn kind(&self) -> Kind;
    /// Runs on `servers` (in order) and returns the servers passed on, in order.
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError>;
}

/// Every plugin, once.
pub static REGISTRY: &[&dyn Plugin] = &[
    &calculate_affinity::CalculateAffinity,
    &calculate_server_unreserved::CalculateServerUnreserved,
    &calculate_ticketed_vms::CalculateTicketedVms,
    &hard_filter_capness::HardFilterCapness,
    &hard_filter_feature_min_platform::HardFilterFeatureMinPlatform,
    &hard_filter_force_failure::HardFilterForceFailure,
    &hard_filter_headnode::HardFilterHeadnode,
    &hard_filter_hvm::HardFilterHvm,
    &hard_filter_invalid_servers::HardFilterInvalidServers,
    &hard_filter_large_servers::HardFilterLargeServers,
    &hard_filter_locality_hints::HardFilterLocalityHints,
    &hard_filter_min_cpu::HardFilterMinCpu,
    &hard_filter_min_disk::HardFilterMinDisk,
    &hard_filter_min_free_disk::HardFilterMinFreeDisk,
    &hard_filter_min_ram::HardFilterMinRam,
    &hard_filter_os::HardFilterOs,
    &hard_filter_overprovision_ratios::HardFilterOverprovisionRatios,
    &hard_filter_owners_servers::HardFilterOwnersServers,
    &hard_filter_platform_versions::HardFilterPlatformVersions,
    &hard_filter_reserved::HardFilterReserved,
    &hard_filter_reservoir::HardFilterReservoir,
    &hard_filter_running::HardFilterRunning,
    &hard_filter_setup::HardFilterSetup,
    &hard_filter_traits::HardFilterTraits,
    &hard_filter_virtual_servers::HardFilterVirtualServers,
    &hard_filter_vlans::HardFilterVlans,
    &hard_filter_vm_count::HardFilterVmCount,
    &hard_filter_volumes_from::HardFilterVolumesFrom,
    &hard_filter_zpool_encryption::HardFilterZpoolEncryption,
    &identity::Identity,
    &load_server_vms::LoadServerVms,
    &override_overprovisioning::OverrideOverprovisioning,
    &score_current_platform::ScoreCurrentPlatform,
    &score_next_reboot::ScoreNextReboot,
    &score_num_owner_zones::ScoreNumOwnerZones,
    &score_uniform_random::ScoreUniformRandom,
    &score_unreserved_disk::ScoreUnreservedDisk,
    &score_unreserved_ram::ScoreUnreservedRam,
    &soft_filter_locality_hints::SoftFilterLocalityHints,
];

/// The plugin registered under a lookup name.
pub fn lookup(name: &str) -> Option<&'static dyn Plugin> {
    REGISTRY.iter().copied().find(|p| p.name() == name)
}

/// Keeps the servers for which `keep` holds, in order.
pub fn retain(servers: &[ServerId], mut keep: impl FnMut(ServerId) -> bool) -> Vec<ServerId> {
    servers.iter().copied().filter(|&id| keep(id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_holds_the_39_plugins_once_each() {
        let mut names: Vec<_> = REGISTRY.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), 39);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 39);
        assert!(lookup("hard-filter-min-ram").is_some());
        assert!(lookup("pick-random").is_none());
    }
}
