//! Arbitrary configs (allocation descriptions, defaults, owner-filter snippets): the engine
//! is either built or refused with an error; it never panics. A built engine then allocates
//! a small fixed request without an internal error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const REQUEST: &str = r#"{"servers": [
  {"uuid": "00000000-0000-4000-8000-000000000001", "ram": 65536, "memory_available_bytes": 60000000000,
   "memory_total_bytes": 68719476736, "reservation_ratio": 0.15, "status": "running", "setup": true,
   "sysinfo": {"Live Image": "20240101T000000Z", "CPU Total Cores": 32, "Zpool Size in GiB": 2000,
               "Network Interfaces": {"ixgbe0": {"NIC Names": ["external", "admin"], "Link Status": "up"}}},
   "disk_pool_size_bytes": 2000000000000, "disk_installed_images_used_bytes": 0, "disk_zone_quota_bytes": 0,
   "disk_kvm_quota_bytes": 0, "overprovision_ratios": {"ram": 1, "cpu": 4, "disk": 1},
   "vms": {"10000000-0000-4000-8000-000000000001": {"owner_uuid": "20000000-0000-4000-8000-000000000001",
           "max_physical_memory": 2048, "quota": 10, "cpu_cap": 100, "brand": "joyent", "state": "running"}}}],
  "vm": {"vm_uuid": "30000000-0000-4000-8000-000000000001", "ram": 1024, "quota": 10, "cpu_cap": 100,
         "owner_uuid": "20000000-0000-4000-8000-000000000002", "nic_tags": ["external"]},
  "image": {}, "package": {"cpu_cap": 100, "max_physical_memory": 1024, "quota": 10240}}"#;

fuzz_target!(|bytes: &[u8]| {
    let Ok(config) = serde_json::from_slice::<Value>(bytes) else { return };
    let Ok(engine) = dapi::engine::Engine::from_config(&config, &dapi::registry::built_in()) else { return };
    dapi_fuzz::check_request_path(&engine, REQUEST.as_bytes());
});
