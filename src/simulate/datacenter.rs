//! The simulated datacenter: a CNAPI server dump as `POST /capacity` takes it, or servers
//! generated rack by rack (`--racks 24 --servers-per-rack 12 --ram 256G --disk 3T`).
//!
//! Either way the result is JSON text read by the capacity body reader
//! ([`crate::wire::parse_capacity_body`]), so generated and dumped servers go through the
//! same path, and the engine borrows the servers from that text.

use serde_json::{json, Value};

use crate::model::FieldError;

const MIB: f64 = 1_048_576.0;

/// What generated servers look like. Every one is the same, setup, running, not reserved,
/// not the headnode, on a platform recent enough for the built-in chain's minimums.
#[derive(Debug, Clone)]
pub struct Generate {
    pub racks: usize,
    pub servers_per_rack: usize,
    pub ram_mib: f64,
    pub disk_mib: f64,
    pub cpu_cores: u32,
    pub platform: String,
    /// Share of RAM kept for the system (CNAPI's default is 0.15).
    pub reservation_ratio: f64,
}

impl Default for Generate {
    fn default() -> Generate {
        Generate {
            racks: 24,
            servers_per_rack: 12,
            ram_mib: 256.0 * 1024.0,
            disk_mib: 3.0 * 1024.0 * 1024.0,
            cpu_cores: 32,
            platform: "20240101T000000Z".into(),
            reservation_ratio: 0.15,
        }
    }
}

/// A size with a unit, in MiB: `512M`, `256G`, `3T` (powers of 1024; `MiB`/`GiB`/`TiB` too);
/// a bare number is GiB.
pub fn parse_size(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: f64 = number.parse().map_err(|_| format!("{text:?} is not a size (e.g. 512M, 256G, 3T)"))?;
    let factor = match unit.trim().to_ascii_uppercase().as_str() {
        "M" | "MB" | "MIB" => 1.0,
        "" | "G" | "GB" | "GIB" => 1024.0,
        "T" | "TB" | "TIB" => 1024.0 * 1024.0,
        _ => return Err(format!("{text:?}: the unit must be M, G or T")),
    };
    let mib = n * factor;
    if !(mib.is_finite() && mib >= 1.0) {
        return Err(format!("{text:?} must be at least 1M"));
    }
    Ok(mib.floor())
}

/// A uuid made from a counter, so generated datacenters and workloads are the same on
/// every run (`kind` keeps servers, VMs and owners apart).
pub fn counter_uuid(kind: u32, n: u64) -> String {
    format!("{kind:08x}-0000-4000-8000-{n:012x}")
}

impl Generate {
    pub fn check(&self) -> Result<(), FieldError> {
        if self.racks == 0 || self.servers_per_rack == 0 {
            return Err(FieldError::invalid("racks", "--racks and --servers-per-rack must be at least 1"));
        }
        if self.racks.saturating_mul(self.servers_per_rack) > 100_000 {
            return Err(FieldError::invalid("racks", "at most 100,000 servers"));
        }
        if self.cpu_cores == 0 {
            return Err(FieldError::invalid("cpus", "must be at least 1"));
        }
        Ok(())
    }

    /// `{"servers": [...]}` as CNAPI lists them.
    pub fn to_json(&self) -> String {
        let ram_bytes = self.ram_mib * MIB;
        let disk_bytes = self.disk_mib * MIB;
        let mut servers = Vec::with_capacity(self.racks * self.servers_per_rack);
        for rack in 0..self.racks {
            for slot in 0..self.servers_per_rack {
                let i = rack * self.servers_per_rack + slot;
                let uuid = counter_uuid(0x5e7, i as u64);
                let hostname = format!("r{rack:02}s{slot:02}");
                let sysinfo = json!({
                    "Live Image": self.platform,
                    "System Type": "SunOS",
                    "Setup": "true",
                    "VM Capable": true,
                    "Bhyve Capable": true,
                    "HVM API": true,
                    "UUID": uuid,
                    "Hostname": hostname,
                    "CPU Total Cores": self.cpu_cores,
                    "CPU Online Count": self.cpu_cores,
                    "MiB of Memory": format!("{}", self.ram_mib),
                    "Zpool": "zones",
                    "Zpool Size in GiB": (self.disk_mib / 1024.0).floor(),
                    "Network Interfaces": {
                        "ixgbe0": {"Link Status": "up", "NIC Names": ["admin"]},
                        "ixgbe1": {"Link Status": "up", "NIC Names": ["external", "internal"]}
                    }
                });
                servers.push(json!({
                    "uuid": uuid,
                    "hostname": hostname,
                    "rack_identifier": format!("R{rack:02}"),
                    "headnode": false,
                    "reserved": false,
                    "reservoir": false,
                    "setup": true,
                    "status": "running",
                    "current_platform": self.platform,
                    "boot_platform": self.platform,
                    "reservation_ratio": self.reservation_ratio,
                    "traits": {},
                    "memory_total_bytes": ram_bytes,
                    "memory_available_bytes": (ram_bytes * (1.0 - self.reservation_ratio)).floor(),
                    "disk_pool_size_bytes": disk_bytes,
                    "disk_pool_alloc_bytes": 0,
                    "disk_system_used_bytes": 0,
                    "disk_installed_images_used_bytes": 0,
                    "disk_cores_quota_used_bytes": 0,
                    "disk_zone_quota_bytes": 0,
                    "disk_zone_quota_used_bytes": 0,
                    "disk_kvm_quota_bytes": 0,
                    "disk_kvm_zvol_volsize_bytes": 0,
                    "sysinfo": sysinfo,
                    "vms": {}
                }));
            }
        }
        json!({ "servers": Value::Array(servers) }).to_string()
    }
}

/// Each server's rack and host name, read from its JSON (`rack_identifier`, `hostname`);
/// servers without a rack share the rack `-`.
pub fn rack_and_host(raw: &str) -> (String, String) {
    #[derive(serde::Deserialize)]
    struct Names {
        rack_identifier: Option<Value>,
        hostname: Option<Value>,
    }
    let text = |v: Option<Value>| match v {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    match serde_json::from_str::<Names>(raw) {
        Ok(n) => (text(n.rack_identifier).unwrap_or_else(|| "-".into()), text(n.hostname).unwrap_or_default()),
        Err(_) => ("-".into(), String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_units() {
        assert_eq!(parse_size("256G"), Ok(262144.0));
        assert_eq!(parse_size("3T"), Ok(3.0 * 1024.0 * 1024.0));
        assert_eq!(parse_size("512M"), Ok(512.0));
        assert_eq!(parse_size("2"), Ok(2048.0));
        assert!(parse_size("3X").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("0.1M").is_err());
    }

    #[test]
    fn generated_servers_are_read_by_the_capacity_reader() {
        let g = Generate { racks: 2, servers_per_rack: 3, ..Generate::default() };
        let text = g.to_json();
        let (raw, servers) = crate::wire::parse_capacity_body(text.as_bytes()).expect("reads");
        assert_eq!(servers.len(), 6);
        assert_eq!(rack_and_host(raw[4]), ("R01".to_string(), "r01s01".to_string()));
        assert!(crate::validate::validate_server_list(&servers).is_ok());
    }
}
