//! Benchmark inputs built in the repository: one `POST /allocate` body per datacenter size.
//!
//! A datacenter of `n` CNAPI-like servers (SmartOS compute nodes with a zpool, two NICs,
//! 256–512 GiB of RAM) carrying about `vms` VMs each, a 4 GiB VM to place, its image and
//! package, and a few open provisioning tickets. A few servers are not set up, reserved or
//! not running, and some are nearly full, so that the filters have work to do; every server
//! is valid (passes `hard-filter-invalid-servers`) and a server always fits.
//!
//! The bytes depend only on `n` and `vms` (a fixed-seed splitmix64 generator), so figures
//! taken on different machines or days measure the same input.

use serde_json::{json, Map, Value};

/// The config the bodies are measured with: the built-in production chain, with
/// `score-uniform-random` weighted 0 so that the chosen server does not vary between runs.
pub fn config() -> Value {
    json!({"defaults": {"weight_uniform_random": 0}})
}

/// The `POST /allocate` body for `servers` servers with about `vms` VMs each.
pub fn body(servers: usize, vms: usize) -> Vec<u8> {
    let mut dc = Datacenter { rng: SplitMix(0x5eed_da91 ^ ((servers as u64) << 16) ^ vms as u64), vms };
    let request = dc.request(servers);
    serde_json::to_vec(&request).unwrap_or_default()
}

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;
const PLATFORMS: [&str; 5] =
    ["20200813T030805Z", "20210225T002022Z", "20210826T002459Z", "20211111T003535Z", "20220407T001427Z"];
/// 2023-06-01T12:00:00Z: "now" for the tickets and the reboot schedule.
const NOW: i64 = 1_685_620_800;
const DAY: i64 = 86_400;

/// splitmix64: small, fast, and the same sequence everywhere.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            8 + (b >> 62),
            (b >> 48) & 0xfff,
            b & 0xffff_ffff_ffff
        )
    }

    fn mac(&mut self) -> String {
        let bytes = self.next().to_be_bytes();
        bytes[..6].iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
    }
}

/// `2023-06-01T12:00:00.000Z` for Unix seconds, as CNAPI writes dates.
fn iso(seconds: i64) -> String {
    chrono::DateTime::from_timestamp(seconds, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S.000Z").to_string())
        .unwrap_or_default()
}

struct Datacenter {
    rng: SplitMix,
    vms: usize,
}

impl Datacenter {
    fn request(&mut self, servers: usize) -> Value {
        let owner = self.rng.uuid();
        let mut owners: Vec<String> = (0..150).map(|_| self.rng.uuid()).collect();
        owners.push(owner.clone());
        let servers: Vec<Value> = (0..servers).map(|i| self.server(i, &owners)).collect();
        let image_uuid = self.rng.uuid();
        let package_uuid = self.rng.uuid();
        let tickets: Vec<Value> = (0..(servers.len() / 10).min(20))
            .map(|_| {
                let server = self.rng.pick(&servers)["uuid"].clone();
                json!({
                    "uuid": self.rng.uuid(), "server_uuid": server, "scope": "vm", "action": "provision",
                    "id": self.rng.uuid(), "status": if self.rng.chance(50) { "active" } else { "queued" },
                    "created_at": iso(NOW), "updated_at": iso(NOW), "expires_at": iso(NOW + 600),
                    "extra": {
                        "owner_uuid": self.rng.pick(&owners), "max_physical_memory": 2048, "cpu_cap": 100,
                        "quota": 25, "brand": "joyent"
                    }
                })
            })
            .collect();
        json!({
            "servers": servers,
            "vm": {
                "vm_uuid": self.rng.uuid(), "owner_uuid": owner, "brand": "joyent", "ram": 4096,
                "max_physical_memory": 4096, "quota": 80, "cpu_cap": 100, "max_lwps": 4000,
                "zfs_io_priority": 100, "billing_id": package_uuid, "image_uuid": image_uuid,
                "alias": "bench-vm", "tags": {}, "customer_metadata": {}, "internal_metadata": {},
                "nic_tags": ["external"]
            },
            "image": {
                "uuid": image_uuid, "name": "base-64-lts", "version": "22.4.0", "os": "smartos",
                "type": "zone-dataset", "state": "active", "disabled": false, "public": true,
                "requirements": {}, "v": 2,
                "files": [{"sha1": format!("{:016x}{:016x}", self.rng.next(), self.rng.next()),
                           "size": 210 * MIB, "compression": "gzip"}]
            },
            "package": {
                "uuid": package_uuid, "name": "g4-general-4G", "version": "1.0.0", "active": true,
                "cpu_cap": 100, "max_physical_memory": 4096, "max_swap": 8192, "max_lwps": 4000,
                "quota": 81920, "zfs_io_priority": 100, "vcpus": 1, "v": 1
            },
            "tickets": tickets
        })
    }

    fn vm(&mut self, owner: &str) -> Value {
        let rng = &mut self.rng;
        let ram = *rng.pick(&[256u64, 512, 1024, 1024, 2048, 4096, 4096, 8192, 16384]);
        json!({
            "uuid": rng.uuid(),
            "owner_uuid": owner,
            "brand": rng.pick(&["joyent", "joyent", "joyent-minimal", "lx", "bhyve"]),
            "state": if rng.chance(92) { "running" } else { *rng.pick(&["stopped", "failed", "provisioning"]) },
            "max_physical_memory": ram,
            "quota": rng.pick(&[10, 25, 50, 100, 200]),
            "cpu_cap": (ram / 1024 * 50).max(25),
            "last_modified": iso(NOW - 400 * DAY + rng.below(390 * DAY as u64) as i64),
            "alias": format!("{}{}", rng.pick(&["web", "db", "api", "cache", "queue"]), rng.below(1000)),
        })
    }

    fn server(&mut self, i: usize, owners: &[String]) -> Value {
        let uuid = self.rng.uuid();
        let hostname = format!("cn{:05}", i + 1);
        let memory = *self.rng.pick(&[256u64, 384, 512]) * GIB;
        let pool = *self.rng.pick(&[3_600u64, 7_200]) * GIB;
        let platform = *self.rng.pick(&PLATFORMS);
        let boot = NOW - 150 * DAY + self.rng.below(140 * DAY as u64) as i64;
        // One in ten servers is nearly full: three times the usual VMs.
        let count = if self.rng.chance(10) { self.vms * 3 } else { self.vms } + self.rng.below(11) as usize;
        let mut vms = Map::new();
        for _ in 0..count.saturating_sub(5) {
            let owner = self.rng.pick(owners).clone();
            let vm = self.vm(&owner);
            if let Some(id) = vm["uuid"].as_str() {
                vms.insert(id.to_string(), vm);
            }
        }
        let used_mib: u64 =
            vms.values().filter(|v| v["state"] != "failed").filter_map(|v| v["max_physical_memory"].as_u64()).sum();
        let zone_quota = vms.values().filter_map(|v| v["quota"].as_u64()).sum::<u64>() * GIB;
        let zone_used = zone_quota / 100 * (20 + self.rng.below(40));
        let system = (5 + self.rng.below(35)) * GIB;
        let images = (5 + self.rng.below(55)) * GIB;
        let nic = |rng: &mut SplitMix, ip: String, names: &[&str]| json!({"MAC Address": rng.mac(), "ip4addr": ip, "Link Status": "up", "NIC Names": names});
        let admin_nic = nic(&mut self.rng, format!("10.0.{}.{}", i / 250, i % 250 + 2), &["admin"]);
        let external_nic = nic(&mut self.rng, String::new(), &["external", "internal"]);
        let sysinfo = json!({
            "Live Image": platform,
            "System Type": "SunOS",
            "Boot Time": boot.to_string(),
            "SDC Version": "7.0",
            "Setup": "true",
            "VM Capable": true,
            "Bhyve Capable": true,
            "Bhyve Max Vcpus": 32,
            "HVM API": true,
            "UUID": uuid,
            "Hostname": hostname,
            "CPU Total Cores": 48,
            "CPU Online Count": 48,
            "MiB of Memory": (memory / MIB).to_string(),
            "Zpool": "zones",
            "Zpool Size in GiB": pool / GIB,
            "Admin NIC Tag": "admin",
            "Network Interfaces": {"ixgbe0": admin_nic, "ixgbe1": external_nic}
        });
        let mut server = json!({
            "uuid": uuid,
            "hostname": hostname,
            "datacenter": "bench-1",
            "headnode": i == 0,
            "reserved": self.rng.chance(1),
            "reservoir": false,
            "setup": !self.rng.chance(1),
            "setting_up": false,
            "status": if self.rng.chance(99) { "running" } else { "unknown" },
            "rack_identifier": format!("R{:02}", i / 40),
            "boot_platform": platform,
            "current_platform": platform,
            "last_boot": iso(boot),
            "ram": memory / MIB,
            "reservation_ratio": 0.15,
            "system_type": "SunOS",
            "traits": if self.rng.chance(5) { json!({"ssd": true}) } else { json!({}) },
            "memory_total_bytes": memory,
            "memory_available_bytes": (memory / 100 * 85).saturating_sub(used_mib * MIB),
            "disk_pool_size_bytes": pool,
            "disk_pool_alloc_bytes": system + images + zone_used,
            "disk_system_used_bytes": system,
            "disk_installed_images_used_bytes": images,
            "disk_cores_quota_used_bytes": 0,
            "disk_zone_quota_bytes": zone_quota,
            "disk_zone_quota_used_bytes": zone_used,
            "disk_kvm_quota_bytes": 0,
            "disk_kvm_zvol_volsize_bytes": 0,
            "sysinfo": sysinfo,
            "vms": vms
        });
        if self.rng.chance(20) {
            server["next_reboot"] = Value::from(iso(NOW + self.rng.below(90 * DAY as u64) as i64));
        }
        server
    }
}
