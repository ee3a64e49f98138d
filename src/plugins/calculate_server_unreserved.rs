//! `calculate-server-unreserved`: works out each server's unreserved CPU, RAM and disk (see
//! [`shared::unreserved`](super::shared::unreserved)), which the resource filters and
//! scorers then compare against the VM.
//!
//! A server without ratios gets `{ram: 1, disk: 1, cpu: 4}`, which stays visible in the
//! answer. Servers without sysinfo get zeros and keep their ratios. Where the original
//! throws (no `vms` object) the server is read as having no VMs.

use super::shared::unreserved::{default_ratios, unreserved};
use crate::engine::parallel::map_servers;
use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct CalculateServerUnreserved;

static DECLARATION: Declaration =
    Declaration::new("calculate-server-unreserved", Kind::Transform, "Calculate unreserved resources on each server")
        .reads(&[Data::Ratios, Data::TicketVms])
        .writes(&[Data::Ratios, Data::Unreserved])
        .per_server();

impl Plugin for CalculateServerUnreserved {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let defaults = std::sync::Arc::new(default_ratios());
        let shared = &*req;
        let need_defaults =
            map_servers(servers, |id| shared.server(id).sysinfo.truthy() && !shared.ratios(id).truthy());
        for (&id, needs) in servers.iter().zip(need_defaults) {
            if needs {
                req.set_ratios(id, defaults.clone());
            }
        }
        let shared = &*req;
        let computed = map_servers(servers, |id| unreserved(shared, id));
        for (&id, u) in servers.iter().zip(computed) {
            req.set_unreserved(id, u);
        }
        Ok(servers.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Unreserved;
    use crate::plugins::testing::{server, with, Fixture};
    use serde_json::{json, Value};

    const GIB: u64 = 1 << 30;

    fn triple(u: Option<Unreserved>) -> (f64, f64, f64) {
        let u = u.expect("unreserved computed");
        (u.cpu_pct, u.ram_mib, u.disk_mib)
    }

    fn unreserved_of(servers: Vec<Value>) -> Vec<(f64, f64, f64)> {
        let out = Fixture::new(servers).run(&CalculateServerUnreserved);
        assert!(out.reasons.is_empty());
        out.state.iter().map(|s| triple(s.unreserved)).collect()
    }

    /// The spec's worked example: capped, uncapped, HVM and failed VMs, all three ratios.
    #[test]
    fn worked_example() {
        let s = with(
            server("w"),
            json!({
                "memory_total_bytes": 64 * GIB,
                "reservation_ratio": 0.15,
                "overprovision_ratios": {"cpu": 4, "ram": 1.5, "disk": 2},
                "disk_pool_size_bytes": 1024 * GIB,
                "disk_pool_alloc_bytes": 300 * GIB,
                "disk_system_used_bytes": 10 * GIB,
                "disk_installed_images_used_bytes": 20 * GIB,
                "disk_cores_quota_used_bytes": 5 * GIB,
                "disk_zone_quota_bytes": 400 * GIB,
                "disk_zone_quota_used_bytes": 100 * GIB,
                "disk_kvm_zvol_volsize_bytes": 40 * GIB,
                "sysinfo": {"CPU Total Cores": 48, "CPU Online Count": 32},
                "vms": {
                    "a": {"brand": "joyent", "state": "running", "cpu_cap": 400, "max_physical_memory": 4096},
                    "b": {"brand": "kvm", "state": "stopped", "cpu_cap": 200, "max_physical_memory": 2048},
                    "c": {"brand": "joyent", "state": "failed", "cpu_cap": 100, "max_physical_memory": 8192}
                }
            }),
        );
        assert_eq!(unreserved_of(vec![s]), [(3050.0, 50926.0, 642621.0)]);
    }

    /// An uncapped VM zeroes the running CPU total; capped VMs after it still subtract.
    #[test]
    fn uncapped_vm_order_matters() {
        let base = with(server("o"), json!({"sysinfo": {"CPU Total Cores": 16}, "overprovision_ratios": {"cpu": 4}}));
        let x = json!({"cpu_cap": 0, "max_physical_memory": 1});
        let y = json!({"cpu_cap": 350, "max_physical_memory": 1});
        let xy = with(base.clone(), json!({"vms": {"x": x.clone(), "y": y.clone()}}));
        let yx = with(base, json!({"vms": {"y": y, "x": x}}));
        let out = unreserved_of(vec![xy, yx]);
        assert_eq!((out[0].0, out[1].0), (-88.0, 0.0));
    }

    /// The original test suite's servers (sizes in GiB), rewritten.
    #[test]
    fn original_suite_servers() {
        #[allow(clippy::too_many_arguments)]
        fn srv(
            mem: u64,
            rr: f64,
            pool: u64,
            alloc: u64,
            sys: u64,
            images: u64,
            zq: u64,
            zq_used: u64,
            zvol: u64,
            cores_used: u64,
            sysinfo: Value,
            vms: Value,
        ) -> Value {
            json!({
                "uuid": "s", "memory_total_bytes": mem, "reservation_ratio": rr,
                "disk_pool_size_bytes": pool * GIB, "disk_pool_alloc_bytes": alloc * GIB,
                "disk_system_used_bytes": sys * GIB, "disk_installed_images_used_bytes": images * GIB,
                "disk_zone_quota_bytes": zq * GIB, "disk_zone_quota_used_bytes": zq_used * GIB,
                "disk_kvm_zvol_volsize_bytes": zvol * GIB, "disk_cores_quota_used_bytes": cores_used * GIB,
                "sysinfo": sysinfo, "vms": vms
            })
        }
        let vm = |brand: &str, cap: u32, ram: u32| json!({"brand": brand, "cpu_cap": cap, "max_physical_memory": ram});
        let two = |b1: &str, r1: u32, b2: &str, r2: u32| json!({"v1": vm(b1, 350, r1), "v2": vm(b2, 350, r2)});
        let cores16 = json!({"CPU Total Cores": 16});
        let s0 = srv(2942881792, 0.15, 2048, 50, 5, 1, 0, 0, 30, 1, cores16.clone(), two("kvm", 2048, "kvm", 128));
        let s1 = srv(
            9132881112,
            0.25,
            2048,
            40,
            2,
            2,
            20,
            10,
            10,
            1,
            json!({"CPU Total Cores": 24}),
            two("joyent", 512, "kvm", 4096),
        );
        let s2 = with(
            srv(
                9132881112,
                0.15,
                4096,
                30,
                2,
                3,
                30,
                20,
                0,
                0,
                json!({"CPU Total Cores": 32}),
                two("joyent", 512, "joyent", 4096),
            ),
            json!({"overprovision_ratios": {"ram": 1.5}}),
        );
        let s3 = with(
            srv(
                9132881112,
                0.15,
                4096,
                50,
                5,
                4,
                50,
                50,
                30,
                1,
                json!({"CPU Total Cores": 32}),
                json!({
                    "r": {"brand": "joyent", "state": "running", "cpu_cap": 700, "max_physical_memory": 512},
                    "i": {"brand": "kvm", "state": "installed", "cpu_cap": 200, "max_physical_memory": 4096},
                    "f": {"brand": "joyent", "state": "failed", "cpu_cap": 200, "max_physical_memory": 4096}
                }),
            ),
            json!({"overprovision_ratios": {"ram": 1.5, "disk": 2.0, "cpu": 2.0}}),
        );
        let s4 = srv(2942881792, 0.15, 2048, 1024, 10, 1, 0, 0, 30, 1, cores16.clone(), two("kvm", 2048, "kvm", 128));
        let s5 = srv(2942881792, 0.15, 2048, 1024, 10, 1, 0, 0, 0, 1, cores16, two("bhyve", 2048, "bhyve", 128));
        let s6 = srv(
            2942881792,
            0.15,
            2048,
            1024,
            10,
            1,
            0,
            0,
            0,
            1,
            json!({"CPU Total Cores": 16, "CPU Online Count": 8}),
            two("bhyve", 2048, "bhyve", 128),
        );
        let out = unreserved_of(vec![s0, s1, s2, s3, s4, s5, s6]);
        assert_eq!(
            out,
            [
                (1425.0, 209.0, 1912954.0),
                (2225.0, 1924.0, 1925242.0),
                (2500.0, 4331.0, 3906805.0),
                (2750.0, 2965.0, 3840245.0),
                (1425.0, 209.0, 922746.0),
                (1425.0, 209.0, 922746.0),
                (625.0, 209.0, 922746.0),
            ]
        );
    }

    #[test]
    fn defaults_ratios_only_where_missing_and_only_with_sysinfo() {
        let f = Fixture::new(vec![
            with(server("none"), json!({"overprovision_ratios": null})),
            with(server("own"), json!({"overprovision_ratios": {"ram": 2}})),
            with(server("bare"), json!({"sysinfo": null})),
        ]);
        let out = f.run(&CalculateServerUnreserved);
        assert_eq!(out.remaining, ["none", "own", "bare"]);
        let shown: Vec<_> = out.state.iter().map(|s| s.ratios.as_ref().map(|r| r.stringify())).collect();
        assert_eq!(shown, [Some(r#"{"ram":1,"disk":1,"cpu":4}"#.to_string()), None, None]);
        assert_eq!(triple(out.state[2].unreserved), (0.0, 0.0, 0.0));
    }

    #[test]
    fn null_coerces_to_zero_and_absent_to_nan() {
        let mut s = with(server("n"), json!({"vms": {"v": {"cpu_cap": 100}}}));
        let obj = s.as_object_mut().expect("object");
        obj.insert("disk_system_used_bytes".into(), Value::Null);
        obj.insert("reservation_ratio".into(), Value::Null);
        obj.insert("sysinfo".into(), json!({"CPU Total Cores": 8, "CPU Online Count": null}));
        let out = unreserved_of(vec![s.clone()]);
        // Online count null → 0 CPUs, less the VM's 100 / 4; its absent RAM makes RAM NaN;
        // a null byte count is 0: 1 TiB × 0.94 in MiB.
        assert_eq!(out[0].0, -25.0);
        assert!(out[0].1.is_nan());
        assert_eq!(out[0].2, 985_661.0);
        s.as_object_mut().expect("object").shift_remove("disk_system_used_bytes");
        assert!(unreserved_of(vec![s])[0].2.is_nan());
    }

    #[test]
    fn missing_vms_read_as_none() {
        let out = unreserved_of(vec![with(server("m"), json!({"vms": null}))]);
        assert_eq!(out[0].0, 3200.0);
        assert_eq!(out[0].1, (65536.0_f64 * 0.85).floor());
    }

    #[test]
    fn ticketed_vms_and_their_disk_count() {
        let f = Fixture::new(vec![with(
            server("t"),
            json!({"vms": {"v": {"brand": "joyent", "cpu_cap": 100, "max_physical_memory": 1024}}}),
        )])
        .tickets(json!([{
            "id": "k", "server_uuid": "t", "scope": "vm", "action": "provision", "status": "active",
            "extra": {"brand": "kvm", "cpu_cap": 200, "max_physical_memory": 2048, "quota": 10,
                      "disks": [{"image_size": 10240}, {"size": 25600}]}
        }]));
        let out = f.run_after(&["calculate-ticketed-vms"], &CalculateServerUnreserved);
        let (cpu, ram, disk) = triple(out.state[0].unreserved);
        assert_eq!(cpu, 3200.0 - 25.0 - 50.0);
        assert_eq!(ram, (65536.0_f64 * 0.85 - 1024.0 - 3072.0).floor());
        // 1 TiB × 0.94, less 25 GiB of zvol, 10 GiB for the KVM and 10 GiB of zone quota.
        assert_eq!(disk, ((1024.0_f64 * 0.94 - 45.0) * 1024.0).floor());
    }
}
