//! Helpers for plugin unit tests: build a request from JSON and run one plugin on it.

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};

use super::Plugin;
use crate::engine::{Defaults, Reasons, Request, ServerId, ServerState};
use crate::model::{from_test_json, Image, Package, Server, Ticket, VmPayload};

/// A valid CNAPI server (passes the server schema) with the given uuid, no VMs, 64 GiB of
/// RAM, 32 cores, a 1 TiB pool. Adjust fields with [`with`].
pub fn server(uuid: &str) -> Value {
    json!({
        "uuid": uuid,
        "status": "running",
        "setup": true,
        "reserved": false,
        "headnode": false,
        "reservation_ratio": 0.15,
        "memory_available_bytes": 60_000_000_000_u64,
        "memory_total_bytes": 68_719_476_736_u64,
        "disk_pool_size_bytes": 1_099_511_627_776_u64,
        "disk_pool_alloc_bytes": 0,
        "disk_system_used_bytes": 0,
        "disk_installed_images_used_bytes": 0,
        "disk_cores_quota_used_bytes": 0,
        "disk_zone_quota_bytes": 0,
        "disk_zone_quota_used_bytes": 0,
        "disk_kvm_quota_bytes": 0,
        "disk_kvm_zvol_volsize_bytes": 0,
        "current_platform": "20200101T000000Z",
        "traits": {},
        "sysinfo": {
            "Live Image": "20200101T000000Z",
            "SDC Version": "7.0",
            "System Type": "SunOS",
            "CPU Total Cores": 32,
            "CPU Online Count": 32,
            "Network Interfaces": {
                "igb0": {"Link Status": "up", "NIC Names": ["admin", "external"]}
            }
        },
        "vms": {}
    })
}

/// `base` with the top-level keys of `changes` replaced (a `null` in `changes` removes the key).
pub fn with(mut base: Value, changes: Value) -> Value {
    if let (Some(obj), Value::Object(ch)) = (base.as_object_mut(), changes) {
        for (k, v) in ch {
            if v.is_null() {
                obj.shift_remove(&k);
            } else {
                obj.insert(k, v);
            }
        }
    }
    base
}

/// A server whose sysinfo has only a `Live Image` and, if given, an `SDC Version`.
pub fn versioned(uuid: &str, version: Option<&str>, platform: &str) -> Value {
    let mut sysinfo = json!({"Live Image": platform});
    if let Some(v) = version {
        sysinfo["SDC Version"] = json!(v);
    }
    with(server(uuid), json!({ "sysinfo": sysinfo }))
}

/// A request under test.
pub struct Fixture {
    pub servers: Vec<Server<'static>>,
    /// The servers' JSON, as a request body carries it.
    pub raw_servers: Vec<&'static str>,
    pub vm: VmPayload,
    pub image: Image,
    pub package: Option<Package>,
    pub tickets: Vec<Ticket>,
    pub defaults: Defaults,
}

/// What one plugin run produced.
#[derive(Debug)]
pub struct Outcome {
    /// `String(uuid)` of each server passed on, in order.
    pub remaining: Vec<String>,
    pub ids: Vec<ServerId>,
    pub reasons: Reasons,
    pub state: Vec<ServerState>,
}

impl Outcome {
    /// The reasons as `(key, message)` pairs, in order.
    pub fn reason_list(&self) -> Vec<(String, String)> {
        self.reasons.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    pub fn reason(&self, key: &str) -> Option<&str> {
        self.reasons.get(key)
    }
}

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    match serde_json::from_value(v) {
        Ok(t) => t,
        Err(e) => panic!("test JSON does not fit the model: {e}"),
    }
}

impl Fixture {
    /// Servers from JSON; the VM is `{}`-like with a brand and owner, CNAPI's defaults.
    pub fn new(servers: Vec<Value>) -> Fixture {
        let raw_servers: Vec<&'static str> =
            servers.iter().map(|s| &*Box::leak(s.to_string().into_boxed_str())).collect();
        Fixture {
            servers: servers.iter().map(from_test_json).collect(),
            raw_servers,
            vm: from(
                json!({"vm_uuid": "00000000-0000-0000-0000-0000000000aa", "owner_uuid": "00000000-0000-0000-0000-0000000000bb", "brand": "joyent", "ram": 1024}),
            ),
            image: Image::default(),
            package: None,
            tickets: Vec::new(),
            defaults: Defaults::cnapi(),
        }
    }

    pub fn vm(mut self, vm: Value) -> Fixture {
        self.vm = from(vm);
        self
    }

    pub fn image(mut self, image: Value) -> Fixture {
        self.image = from(image);
        self
    }

    pub fn package(mut self, package: Value) -> Fixture {
        self.package = Some(from(package));
        self
    }

    pub fn tickets(mut self, tickets: Value) -> Fixture {
        self.tickets = from(tickets);
        self
    }

    /// Defaults as CNAPI builds them with these overrides.
    pub fn defaults(mut self, defaults: Value) -> Fixture {
        self.defaults = match Defaults::from_json(&defaults) {
            Ok(d) => d,
            Err(e) => panic!("test defaults invalid: {e}"),
        };
        self
    }

    /// A fresh working set with a seeded RNG.
    pub fn request(&self) -> Request<'_> {
        let mut req = Request::new(
            &self.servers,
            &self.vm,
            &self.image,
            self.package.as_ref(),
            &self.tickets,
            &self.defaults,
            StdRng::seed_from_u64(1),
        );
        req.raw_servers = &self.raw_servers;
        req
    }

    /// Runs `plugin` on every server, in order.
    pub fn run(&self, plugin: &dyn Plugin) -> Outcome {
        let mut req = self.request();
        run_on(&mut req, plugin)
    }

    /// Runs the named plugins first (e.g. `calculate-server-unreserved`), then `plugin`.
    pub fn run_after(&self, before: &[&str], plugin: &dyn Plugin) -> Outcome {
        let mut req = self.request();
        for name in before {
            let all = super::built_in();
            let p = all.iter().find(|p| p.name() == *name).unwrap_or_else(|| panic!("no plugin {name}"));
            run_on(&mut req, p.as_ref());
        }
        run_on(&mut req, plugin)
    }
}

/// Runs `plugin` on every server of `req`.
pub fn run_on(req: &mut Request<'_>, plugin: &dyn Plugin) -> Outcome {
    let all: Vec<ServerId> = (0..req.servers.len()).collect();
    let mut reasons = Reasons::default();
    let ids = match plugin.run(req, &all, &mut reasons) {
        Ok(ids) => ids,
        Err(e) => panic!("{} failed: {e}", plugin.name()),
    };
    Outcome {
        remaining: ids.iter().map(|&id| req.key(id).to_string()).collect(),
        ids,
        reasons,
        state: req.states().to_vec(),
    }
}
