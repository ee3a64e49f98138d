//! Typed request models: CNAPI server objects (with the VMs on them), the VM payload, the
//! image manifest, the package and waitlist tickets.
//!
//! Fields the original reads loosely (numbers that may arrive as strings, flags that are
//! only tested for truthiness) are [`Js`] values: absent reads as `Js::Undefined`, and the
//! plugins apply JS coercion through [`crate::js`]. Wire names that do not carry a unit get
//! one in the Rust name (`ram` → `ram_mib`). Unknown fields are ignored. Reading them off the
//! wire is [`crate::wire`]'s business; what a valid server is, [`schema`]'s.

pub mod affinity;
mod request;
pub mod schema;
mod shape;
mod vms;

pub use request::{AllocateBody, BatchFields, BodyError, FieldError, ParamType, RawParams};
pub use shape::{EmptyValue, Shape};
pub use vms::{
    owner_bits, FullVm, PlainFields, PlainVm, ServerVm, SmallNum, UuidRef, VmEntry, VmLoad, VmMap, VmSummary, EMPTY_VM,
};

use std::sync::Arc;

use serde::Deserialize;

use crate::js::Js;

crate::empty_value!(Sysinfo, Nic, VirtualNic);

/// Reads test JSON into a model that borrows from its text, as a request body's models do
/// (the text is leaked, so tests only).
#[cfg(test)]
pub fn from_test_json<T: serde::Deserialize<'static>>(v: &serde_json::Value) -> T {
    let text: &'static str = Box::leak(v.to_string().into_boxed_str());
    serde_json::from_str(text).unwrap_or_else(|e| panic!("test JSON does not fit the model: {e}"))
}

/// Declares [`Server`] from one list of its loosely read fields, so that the struct, the
/// serde reader and the fast reader (`wire::body`) always know the same fields: adding a
/// server field is one line here.
macro_rules! server_model {
    ($($(#[$doc:meta])* $field:ident,)*) => {
        /// A CNAPI server object. Strings of its VMs borrow from the request body (`'a`).
        #[derive(Debug, Default, Deserialize)]
        #[serde(default)]
        pub struct Server<'a> {
            $($(#[$doc])* pub $field: Js,)*
            pub sysinfo: Shape<Sysinfo>,
            #[serde(borrow)]
            pub vms: Shape<VmMap<'a>>,
            /// The server schema's verdict ([`schema::validate_server`]), worked out while
            /// the server is read (its data is then at hand) or on first use.
            #[serde(skip)]
            schema: std::sync::OnceLock<Option<String>>,
            /// `current_platform` read as an instant ([`Server::current_platform_ms`]), on
            /// first use: a server held across allocations (inventory mode) reads it once.
            #[serde(skip)]
            platform_ms: std::sync::OnceLock<Option<f64>>,
            /// `next_reboot` as `score-next-reboot` reads it ([`Server::reboot_key`]), on
            /// first use.
            #[serde(skip)]
            reboot: std::sync::OnceLock<RebootKey>,
        }

        impl Server<'_> {
            /// Every field read from a server object, as named on the wire (the tests hold
            /// the fast reader to it).
            #[cfg(test)]
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($field),)* "sysinfo", "vms"];

            /// The loosely read ([`Js`]) field named `name` on the wire.
            pub fn js_field_mut(&mut self, name: &str) -> Option<&mut Js> {
                // What is read from the fields on first use is read again after a change.
                self.platform_ms = std::sync::OnceLock::new();
                self.reboot = std::sync::OnceLock::new();
                match name {
                    $(stringify!($field) => Some(&mut self.$field),)*
                    _ => None,
                }
            }
        }
    };
}

/// A server's `next_reboot` as `score-next-reboot` orders it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootKey {
    /// None, or one before the last boot.
    Unscheduled,
    /// A date in the one form whose string order is its time order (milliseconds).
    At(i64),
    /// Anything else: ordered the JS way, by the scorer's general path.
    Unusual,
}

server_model! {
    uuid,
    status,
    setup,
    reserved,
    reservoir,
    headnode,
    traits,
    current_platform,
    next_reboot,
    last_boot,
    memory_available_bytes,
    memory_total_bytes,
    reservation_ratio,
    disk_pool_size_bytes,
    disk_pool_alloc_bytes,
    disk_system_used_bytes,
    disk_installed_images_used_bytes,
    disk_cores_quota_used_bytes,
    disk_zone_quota_bytes,
    disk_zone_quota_used_bytes,
    disk_kvm_quota_bytes,
    disk_kvm_zvol_volsize_bytes,
    /// `{cpu, ram, disk, io, net}` ratios; an object in valid servers.
    overprovision_ratios,
}

impl<'a> Server<'a> {
    /// The server schema's first violation, if any (`hard-filter-invalid-servers`).
    pub fn schema_violation(&self) -> Option<&str> {
        self.schema.get_or_init(|| schema::validate_server(self)).as_deref()
    }
    /// `String(server.uuid)`: the key of this server's entry in step reasons.
    pub fn reason_key(&self) -> String {
        self.uuid.to_js_string()
    }

    /// `current_platform` (a stamp `YYYYMMDDTHHMMSSZ`) as milliseconds since the epoch, read
    /// as JS reads the equivalent `YYYY-MM-DDTHH:MM:SSZ` (day 30 of February rolls over into
    /// March); `None` when it is missing, not a string or not such a stamp.
    pub fn current_platform_ms(&self) -> Option<f64> {
        *self.platform_ms.get_or_init(|| platform_stamp_ms(&self.current_platform))
    }

    /// The server's scheduled reboot as `read` (the scorer's rule) finds it, read once: a
    /// server held across allocations (inventory mode, placing many VMs) is not read again.
    pub fn reboot_key(&self, read: impl FnOnce(&Self) -> RebootKey) -> RebootKey {
        *self.reboot.get_or_init(|| read(self))
    }

    /// The server's sysinfo; a missing or non-object sysinfo reads as an empty one.
    pub fn sysinfo(&self) -> &Sysinfo {
        self.sysinfo.obj_or_empty()
    }

    /// The VMs sent inline; a missing, null or array `vms` reads as no VMs, and an entry
    /// that is not an object as a VM without fields.
    pub fn inline_vms(&self) -> impl DoubleEndedIterator<Item = (&str, &ServerVm<'a>)> + Clone {
        let entries = self.vms.as_obj().map_or(&[][..], VmMap::as_slice);
        entries.iter().map(|e| (e.key(), e.vm()))
    }

    /// Number of VMs sent inline.
    pub fn inline_vm_count(&self) -> usize {
        self.vms.as_obj().map_or(0, VmMap::len)
    }

    /// What the capacity plugins need from the VMs sent inline.
    pub fn vm_summary(&self) -> &VmSummary {
        self.vms.as_obj().map_or(vms::empty_summary(), VmMap::summary)
    }

    /// Lists a VM on the server after the others, as CNAPI does once it is provisioned
    /// (a server sent without a `vms` object gets one). Only the VM list changes; the
    /// caller updates the disk and memory figures.
    pub fn add_vm(&mut self, key: std::borrow::Cow<'a, str>, vm: ServerVm<'a>) {
        self.list_vm(key, vm, false);
    }

    /// [`Server::add_vm`] for a caller that knows no VM is listed under `key` (spares the
    /// search of the server's VMs for one to replace).
    pub fn add_new_vm(&mut self, key: std::borrow::Cow<'a, str>, vm: ServerVm<'a>) {
        self.list_vm(key, vm, true);
    }

    fn list_vm(&mut self, key: std::borrow::Cow<'a, str>, vm: ServerVm<'a>, known_new: bool) {
        let was_valid = self.vms.as_obj().is_some() && matches!(self.schema.get(), Some(None));
        let listed_before = self.inline_vm_count();
        if self.vms.as_obj().is_none() {
            self.vms = Shape::Obj(VmMap::default());
        }
        if let Shape::Obj(map) = &mut self.vms {
            if known_new {
                map.push_new(key, vm);
            } else {
                map.push(key, vm);
            }
        }
        // The schema's verdict covers the VMs: kept when the server was valid and the VM
        // (the last entry, unless it replaced one under its key) is, else taken again when
        // next asked.
        self.schema = std::sync::OnceLock::new();
        let appended = self.inline_vm_count() > listed_before;
        let added = self.vms.as_obj().and_then(|m| m.as_slice().last()).map(|e| (e.key(), e.value()));
        if was_valid && appended && schema::still_valid_after(self, added) {
            let _ = self.schema.set(None);
        }
    }

    /// Takes the VM under `key` off the server's list (the inverse of [`Server::add_vm`]).
    pub fn remove_vm(&mut self, key: &str) -> Option<Shape<ServerVm<'a>>> {
        let Shape::Obj(map) = &mut self.vms else { return None };
        let removed = map.remove(key)?;
        let was_valid = matches!(self.schema.get(), Some(None));
        self.schema = std::sync::OnceLock::new();
        if was_valid && schema::still_valid_after(self, None) {
            let _ = self.schema.set(None);
        }
        Some(removed)
    }

    /// The inline VM at position `i`, with its key.
    pub fn inline_vm(&self, i: usize) -> Option<(&str, &ServerVm<'a>)> {
        let entry = self.vms.as_obj()?.as_slice().get(i)?;
        Some((entry.key(), entry.vm()))
    }

    /// The inline VM at position `i`.
    pub fn inline_vm_at(&self, i: usize) -> &ServerVm<'a> {
        self.vms.as_obj().map_or(&EMPTY_VM, |m| m.vm_at(i))
    }
}

/// The parts of a server's `sysinfo(1)` output that the allocator reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Sysinfo {
    #[serde(rename = "Bhyve Capable")]
    pub bhyve_capable: Js,
    #[serde(rename = "Bhyve Max Vcpus")]
    pub bhyve_max_vcpus: Js,
    #[serde(rename = "CPU Total Cores")]
    pub cpu_total_cores: Js,
    #[serde(rename = "CPU Socket Count")]
    pub cpu_socket_count: Js,
    #[serde(rename = "CPU Core Count")]
    pub cpu_core_count: Js,
    #[serde(rename = "CPU Online Count")]
    pub cpu_online_count: Js,
    #[serde(rename = "CPU Count")]
    pub cpu_count: Js,
    #[serde(rename = "Admin NIC Tag")]
    pub admin_nic_tag: Js,
    #[serde(rename = "Admin IP")]
    pub admin_ip: Js,
    #[serde(rename = "HVM API")]
    pub hvm_api: Js,
    #[serde(rename = "Network Interfaces")]
    pub network_interfaces: Shape<NicMap<Nic>>,
    #[serde(rename = "Virtual Network Interfaces")]
    pub virtual_network_interfaces: Shape<NicMap<VirtualNic>>,
    #[serde(rename = "Live Image")]
    pub live_image: Js,
    #[serde(rename = "SDC Version")]
    pub sdc_version: Js,
    #[serde(rename = "System Type")]
    pub system_type: Js,
    #[serde(rename = "Zpool Encrypted")]
    pub zpool_encrypted: Js,
}

/// A sysinfo map of NICs by name, in insertion order: the pairs in one exact allocation.
/// A server has two or three NICs, read in order and never looked up by name, so an
/// `IndexMap` (its own allocation, spare capacity and a hash table) cost ~250 bytes more per
/// server, 1.3 MB of a 5,000-server request. The names are shared strings: servers repeat
/// them, and the body readers hand out one string per name (`wire::strings`).
#[derive(Debug)]
pub struct NicMap<T>(Box<[(Arc<str>, Shape<T>)]>);

impl<T> NicMap<T> {
    /// From pairs in insertion order; a repeated name keeps its first position and takes
    /// the last value, as `JSON.parse` reads a repeated key (and `IndexMap::insert` does).
    pub fn from_pairs(pairs: Vec<(Arc<str>, Shape<T>)>) -> NicMap<T> {
        // A handful of NICs are compared directly; many (only a hostile body has them)
        // through a hash set, so that reading stays linear.
        let repeated = if pairs.len() <= 16 {
            (1..pairs.len()).any(|i| pairs[..i].iter().any(|(k, _)| *k == pairs[i].0))
        } else {
            let mut seen = std::collections::HashSet::with_capacity(pairs.len());
            !pairs.iter().all(|(k, _)| seen.insert(&**k))
        };
        if !repeated {
            return NicMap(pairs.into_boxed_slice());
        }
        let map: indexmap::IndexMap<Arc<str>, Shape<T>> = pairs.into_iter().collect();
        NicMap(map.into_iter().collect())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Shape<T>)> + Clone {
        self.0.iter().map(|(k, v)| (&**k, v))
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for NicMap<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Pairs<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Pairs<T> {
            type Value = NicMap<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of NICs")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NicMap<T>, A::Error> {
                let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((name, nic)) = map.next_entry::<Box<str>, Shape<T>>()? {
                    pairs.push((Arc::from(name), nic));
                }
                Ok(NicMap::from_pairs(pairs))
            }
        }
        d.deserialize_map(Pairs(std::marker::PhantomData))
    }
}

/// A physical NIC in sysinfo.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Nic {
    #[serde(rename = "Link Status")]
    pub link_status: Js,
    #[serde(rename = "NIC Names")]
    pub nic_names: Js,
}

/// A virtual NIC in sysinfo (overlay networks).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct VirtualNic {
    #[serde(rename = "Link Status")]
    pub link_status: Js,
    #[serde(rename = "Overlay Nic Tags")]
    pub overlay_nic_tags: Js,
}

/// The VM payload: what is to be allocated.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct VmPayload {
    pub vm_uuid: Js,
    pub uuid: Js,
    pub owner_uuid: Js,
    pub brand: Js,
    /// RAM (`ram`), MiB.
    #[serde(rename = "ram")]
    pub ram_mib: Js,
    /// Disk (`quota`), GiB.
    #[serde(rename = "quota")]
    pub quota_gib: Js,
    /// CPU cap, percent of one core.
    #[serde(rename = "cpu_cap")]
    pub cpu_cap_pct: Js,
    pub vcpus: Js,
    pub traits: Js,
    pub nic_tags: Js,
    pub nic_tag_requirements: Js,
    pub locality: Js,
    pub affinity: Js,
    pub internal_metadata: Js,
    pub docker: Js,
    pub volumes: Js,
    pub flexible_disk_size: Js,
    pub tags: Js,
    /// Read only to list the VM on its server once placed (affinity by alias).
    pub alias: Js,
    /// `internal_metadata["docker:volumesfrom"]`, parsed from its JSON text by validation.
    #[serde(skip)]
    pub volumes_from: Option<Vec<Js>>,
}

/// `vm.tags` key asking to keep the VM off virtual servers (`hard-filter-virtual-servers`).
pub const TAG_EXCLUDE_VIRTUAL_SERVERS: &str = "triton.placement.exclude_virtual_servers";
/// `vm.internal_metadata` key that fails the allocation on purpose (`hard-filter-force-failure`).
pub const METADATA_FORCE_FAILURE: &str = "force_designation_failure";
/// `vm.internal_metadata` key asking for an encrypted zpool (`hard-filter-zpool-encryption`).
pub const METADATA_ENCRYPTED: &str = "encrypted";
/// `vm.internal_metadata` key naming the NFS volumes version (`hard-filter-feature-min-platform`).
pub const METADATA_NFS_VERSION: &str = "volapi-nfs-version";

const TAGS_READ_PER_SERVER: &[&str] = &[TAG_EXCLUDE_VIRTUAL_SERVERS];
const METADATA_READ_PER_SERVER: &[&str] = &[METADATA_FORCE_FAILURE, METADATA_ENCRYPTED, METADATA_NFS_VERSION];

impl VmPayload {
    /// The payload as the chain's per-server part reads it: without its owner (no
    /// per-server plugin reads it) and what names this VM alone (its uuid and alias), its
    /// tags and internal metadata cut to the keys that part reads (the constants above).
    /// Locality and affinity stay: whether a plugin is per-server at all can depend on
    /// them (`calculate-affinity` without rules, `hard-filter-locality-hints` without
    /// strict hints), and the part is split from the chain once per kind. Two requests
    /// alike in this (and in their image, package, tickets and seed) have every server
    /// decided alike by that part: a caller's VMs, each with its own name, tags and
    /// metadata, share one recurring allocation
    /// ([`RecurringKey`](crate::engine::RecurringKey)). A per-server plugin that reads
    /// another key of them must add it here.
    pub fn as_read_per_server(&self) -> VmPayload {
        VmPayload {
            vm_uuid: Js::Undefined,
            uuid: Js::Undefined,
            alias: Js::Undefined,
            owner_uuid: Js::Undefined,
            tags: only_keys(&self.tags, TAGS_READ_PER_SERVER),
            internal_metadata: only_keys(&self.internal_metadata, METADATA_READ_PER_SERVER),
            ..self.clone()
        }
    }

    /// Whether the per-server part reads the two payloads alike (`as_read_per_server` of
    /// each equal), without making either.
    pub fn read_alike_per_server(&self, other: &VmPayload) -> bool {
        // Destructured so that a field added to the payload must be added here.
        let VmPayload {
            vm_uuid: _,
            uuid: _,
            alias: _,
            owner_uuid: _,
            tags,
            internal_metadata,
            brand,
            ram_mib,
            quota_gib,
            cpu_cap_pct,
            vcpus,
            traits,
            nic_tags,
            nic_tag_requirements,
            locality,
            affinity,
            docker,
            volumes,
            flexible_disk_size,
            volumes_from,
        } = self;
        *brand == other.brand
            && *ram_mib == other.ram_mib
            && *quota_gib == other.quota_gib
            && *cpu_cap_pct == other.cpu_cap_pct
            && *vcpus == other.vcpus
            && *traits == other.traits
            && *nic_tags == other.nic_tags
            && *nic_tag_requirements == other.nic_tag_requirements
            && *locality == other.locality
            && *affinity == other.affinity
            && *docker == other.docker
            && *volumes == other.volumes
            && *flexible_disk_size == other.flexible_disk_size
            && *volumes_from == other.volumes_from
            && alike_at_keys(tags, &other.tags, TAGS_READ_PER_SERVER)
            && alike_at_keys(internal_metadata, &other.internal_metadata, METADATA_READ_PER_SERVER)
    }
}

/// An object cut to `keys` (those it has, in that order); any other value as it is (its
/// truthiness and its `undefined` properties are what a reader of those keys sees).
fn only_keys(value: &Js, keys: &[&str]) -> Js {
    match value {
        Js::Obj(_) => {
            Js::obj(keys.iter().filter(|&&k| value.has(k)).map(|&k| (k.into(), value.get(k).clone())).collect())
        }
        other => other.clone(),
    }
}

/// Whether `only_keys` of the two values are equal.
fn alike_at_keys(a: &Js, b: &Js, keys: &[&str]) -> bool {
    match (a, b) {
        (Js::Obj(_), Js::Obj(_)) => keys.iter().all(|&k| a.has(k) == b.has(k) && a.get(k) == b.get(k)),
        _ => a == b,
    }
}

/// An IMGAPI image manifest.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct Image {
    #[serde(rename = "type")]
    pub image_type: Js,
    /// Root disk size of an HVM image (`image_size`), MiB.
    #[serde(rename = "image_size")]
    pub image_size_mib: Js,
    pub traits: Js,
    /// `{min_ram, max_ram, min_platform, max_platform}`.
    pub requirements: Js,
    /// `[{size (bytes), ...}]`.
    pub files: Js,
}

/// A PAPI package.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct Package {
    pub overprovision_cpu: Js,
    pub overprovision_memory: Js,
    pub overprovision_storage: Js,
    pub overprovision_network: Js,
    pub overprovision_io: Js,
    // Internal ratio names, accepted as sent (the original never coerces these).
    pub overprovision_ram: Js,
    pub overprovision_disk: Js,
    pub overprovision_net: Js,
    pub alloc_server_spread: Js,
    pub min_platform: Js,
    pub max_platform: Js,
    pub traits: Js,
    /// CPU cap, percent of one core.
    #[serde(rename = "cpu_cap")]
    pub cpu_cap_pct: Js,
    /// Disk (`quota`), MiB.
    #[serde(rename = "quota")]
    pub quota_mib: Js,
    /// RAM (`max_physical_memory`), MiB.
    #[serde(rename = "max_physical_memory")]
    pub max_physical_memory_mib: Js,
}

/// A CNAPI waitlist ticket (an in-flight provision holds one).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct Ticket {
    pub uuid: Js,
    /// The VM uuid for `scope: vm` tickets.
    pub id: Js,
    pub server_uuid: Js,
    pub scope: Js,
    pub action: Js,
    pub status: Js,
    /// `{owner_uuid, max_physical_memory (MiB), cpu_cap, quota (GiB), brand, disks: [{size (MiB)}]}`.
    pub extra: Js,
}

/// A platform stamp `YYYYMMDDTHHMMSSZ` as milliseconds since the epoch (see
/// [`Server::current_platform_ms`]).
fn platform_stamp_ms(platform: &Js) -> Option<f64> {
    let text = platform.as_str()?;
    let b = text.as_bytes();
    let shaped =
        b.len() == 16 && b[8] == b'T' && b[15] == b'Z' && b[..8].iter().chain(&b[9..15]).all(u8::is_ascii_digit);
    if !shaped {
        return None;
    }
    // YYYY-MM-DDTHH:MM:SSZ from the stamp's digits.
    let mut iso = *b"0000-00-00T00:00:00Z";
    for (to, from) in [(0..4, 0..4), (5..7, 4..6), (8..10, 6..8), (11..13, 9..11), (14..16, 11..13), (17..19, 13..15)] {
        iso[to].copy_from_slice(&b[from]);
    }
    crate::js::date::parse_js_date(std::str::from_utf8(&iso).ok()?)
}

#[cfg(test)]
mod tests {
    use super::{Js, NicMap, Shape};

    /// A repeated NIC name keeps its first position and takes the last value, with a
    /// handful of NICs and with many.
    #[test]
    fn a_nic_map_reads_repeated_names_as_json_parse_does() {
        for count in [3, 40] {
            let mut pairs: Vec<(super::Arc<str>, Shape<super::Nic>)> =
                (0..count).map(|i| (format!("nic{i}").into(), Shape::Other(Js::Num(i as f64)))).collect();
            pairs.push(("nic1".into(), Shape::Other(Js::str("last"))));
            pairs.push(("new".into(), Shape::Absent));
            let map = NicMap::from_pairs(pairs);
            let names: Vec<&str> = map.iter().map(|(k, _)| k).collect();
            let mut expected: Vec<String> = (0..count).map(|i| format!("nic{i}")).collect();
            expected.push("new".into());
            assert_eq!(names, expected);
            assert!(matches!(map.iter().nth(1), Some((_, Shape::Other(v))) if v.as_str() == Some("last")));
            assert!(matches!(map.iter().nth(2), Some((_, Shape::Other(Js::Num(n)))) if *n == 2.0));
        }
    }

    /// Thousands of servers are held per request: these sizes are the largest part of a
    /// 5,000-server request's model (after its VMs).
    #[test]
    fn a_server_stays_within_its_size() {
        let sizes = (std::mem::size_of::<super::Server>(), std::mem::size_of::<super::Sysinfo>());
        assert!(sizes.0 <= 1144 && sizes.1 <= 384, "{sizes:?}");
    }
}
