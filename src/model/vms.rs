//! The VMs on a server (`server.vms`), kept compactly.
//!
//! A datacenter-sized request is mostly VMs (about 30 per server), so how they are held
//! decides the request's memory and much of its parse time. A VM whose fields are the
//! ordinary ones — strings borrowed from the request body, plain numbers, and values that
//! pass the server schema's VM checks — is a [`PlainVm`] of about 100 bytes that allocates
//! nothing. Any other VM (an odd type, a value the schema refuses, `tags`,
//! `internal_metadata` or `docker` present, a string with escapes) is kept whole as a
//! [`FullVm`] of [`Js`] values, exactly as received. Plugins read either through the same
//! accessors ([`ServerVm::brand`], ...), which return [`JsRef`] views. How they are read off
//! the wire is `wire::vms`.

use std::borrow::Cow;

use super::Shape;
use crate::js::{Js, JsRef};

/// A VM already on a server (an entry of `server.vms`), or one added from a ticket.
#[derive(Debug, Clone)]
pub enum ServerVm<'a> {
    Plain(PlainVm<'a>),
    Full(Box<FullVm>),
}

/// A VM whose fields are all ordinary, borrowed from the request body. Holding one means
/// the VM passes the server schema's VM checks (`owner_uuid` a lower-case uuid, `state` a
/// non-empty string, `max_physical_memory` an integer ≥ 1, `quota` a number ≥ 0 if given,
/// `cpu_cap` an integer ≥ 1 if given) and has no `tags`, `internal_metadata` or `docker`.
/// Absent numbers are NaN (JSON numbers never are).
#[derive(Debug, Clone, Copy)]
pub struct PlainVm<'a> {
    pub uuid: Option<&'a str>,
    pub owner_uuid: &'a str,
    pub brand: Option<&'a str>,
    pub state: &'a str,
    pub alias: Option<&'a str>,
    pub max_physical_memory_mib: f64,
    pub quota_gib: f64,
    pub cpu_cap_pct: f64,
}

/// A VM with every field as received (or as built from a ticket).
#[derive(Debug, Default, Clone)]
pub struct FullVm {
    pub uuid: Js,
    pub owner_uuid: Js,
    pub brand: Js,
    pub state: Js,
    /// Promised RAM (`max_physical_memory`), MiB.
    pub max_physical_memory_mib: Js,
    /// Promised disk (`quota`), GiB.
    pub quota_gib: Js,
    /// CPU cap, percent of one core.
    pub cpu_cap_pct: Js,
    pub alias: Js,
    pub tags: Js,
    pub internal_metadata: Js,
    pub docker: Js,
}

impl From<FullVm> for ServerVm<'_> {
    fn from(vm: FullVm) -> Self {
        ServerVm::Full(Box::new(vm))
    }
}

impl PlainVm<'_> {
    /// Every field absent (reading `undefined`).
    pub const EMPTY: PlainVm<'static> = PlainVm {
        uuid: None,
        owner_uuid: "",
        brand: None,
        state: "",
        alias: None,
        max_physical_memory_mib: f64::NAN,
        quota_gib: f64::NAN,
        cpu_cap_pct: f64::NAN,
    };
}

/// What a missing or non-object VM entry reads as: every field `undefined`.
pub static EMPTY_VM: ServerVm<'static> = ServerVm::Plain(PlainVm::EMPTY);

macro_rules! accessors {
    ($($(#[$doc:meta])* $name:ident: $plain:expr;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> JsRef<'_> {
            match self {
                ServerVm::Plain(p) => {
                    let read: fn(&PlainVm<'a>) -> JsRef<'a> = $plain;
                    read(p)
                }
                ServerVm::Full(f) => JsRef::Js(&f.$name),
            }
        }
    )*};
}

impl<'a> ServerVm<'a> {
    accessors! {
        uuid: |p| JsRef::opt_str(p.uuid);
        owner_uuid: |p| nonempty(p.owner_uuid);
        brand: |p| JsRef::opt_str(p.brand);
        state: |p| nonempty(p.state);
        alias: |p| JsRef::opt_str(p.alias);
        /// Promised RAM (`max_physical_memory`), MiB.
        max_physical_memory_mib: |p| JsRef::nan_absent(p.max_physical_memory_mib);
        /// Promised disk (`quota`), GiB.
        quota_gib: |p| JsRef::nan_absent(p.quota_gib);
        /// CPU cap, percent of one core.
        cpu_cap_pct: |p| JsRef::nan_absent(p.cpu_cap_pct);
        tags: |_| JsRef::Undefined;
        internal_metadata: |_| JsRef::Undefined;
        docker: |_| JsRef::Undefined;
    }

    /// What the capacity sums read from the VM (as the accessors would give it).
    pub fn load(&self) -> VmLoad {
        match self {
            ServerVm::Plain(p) => {
                let cap = p.cpu_cap_pct;
                let brand = p.brand.unwrap_or("");
                VmLoad {
                    failed: p.state == "failed",
                    cpu_cap: (cap != 0.0 && !cap.is_nan()).then_some(cap),
                    ram_mib: p.max_physical_memory_mib,
                    hvm: brand == "kvm" || brand == "bhyve",
                    kvm: brand == "kvm",
                }
            }
            ServerVm::Full(_) => {
                let cap = self.cpu_cap_pct();
                let brand = self.brand().as_str();
                VmLoad {
                    failed: self.state().as_str() == Some("failed"),
                    cpu_cap: cap.truthy().then(|| cap.num()),
                    ram_mib: self.max_physical_memory_mib().num(),
                    hvm: matches!(brand, Some("kvm" | "bhyve")),
                    kvm: brand == Some("kvm"),
                }
            }
        }
    }

    /// `vm.owner_uuid === owner` for a string `owner`.
    pub fn owned_by(&self, owner: &str) -> bool {
        match self {
            ServerVm::Plain(p) => same_str(p.owner_uuid, owner),
            ServerVm::Full(f) => f.owner_uuid.as_str() == Some(owner),
        }
    }

    /// The VM with every field as a [`Js`] (allocates for a plain VM).
    pub fn to_full(&self) -> FullVm {
        match self {
            ServerVm::Full(f) => (**f).clone(),
            ServerVm::Plain(_) => FullVm {
                uuid: self.uuid().to_js(),
                owner_uuid: self.owner_uuid().to_js(),
                brand: self.brand().to_js(),
                state: self.state().to_js(),
                max_physical_memory_mib: self.max_physical_memory_mib().to_js(),
                quota_gib: self.quota_gib().to_js(),
                cpu_cap_pct: self.cpu_cap_pct().to_js(),
                alias: self.alias().to_js(),
                tags: Js::Undefined,
                internal_metadata: Js::Undefined,
                docker: Js::Undefined,
            },
        }
    }
}

/// What the capacity sums read from a VM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmLoad {
    /// `state` is `failed`.
    pub failed: bool,
    /// `cpu_cap` as a number when truthy (a falsy cap is no cap).
    pub cpu_cap: Option<f64>,
    /// `+max_physical_memory`.
    pub ram_mib: f64,
    /// `brand` is `kvm` or `bhyve`.
    pub hvm: bool,
    pub kvm: bool,
}

/// String equality that rejects most different uuids on their first eight bytes.
fn same_str(a: &str, b: &str) -> bool {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    x.len() == y.len() && (x.len() < 8 || x[..8] == y[..8]) && x == y
}

/// Plain VMs always carry these; only [`EMPTY_VM`] leaves them empty, reading `undefined`.
fn nonempty(s: &str) -> JsRef<'_> {
    if s.is_empty() {
        JsRef::Undefined
    } else {
        JsRef::Str(s)
    }
}

/// `server.vms`: VM uuid → VM (or whatever non-object value was sent), in the order sent;
/// a repeated key keeps its first position and its last value, as `JSON.parse` does.
#[derive(Debug, Clone)]
pub struct VmMap<'a> {
    entries: Vec<(Cow<'a, str>, Shape<ServerVm<'a>>)>,
    /// Every entry is a plain VM (so every VM passes the schema's VM checks). May be false
    /// when they all are, never true when one is not.
    all_plain: bool,
    summary: VmSummary,
}

impl Default for VmMap<'_> {
    fn default() -> Self {
        VmMap { entries: Vec::new(), all_plain: true, summary: VmSummary::default() }
    }
}

/// What the capacity plugins need from a server's VMs, gathered once when the VMs are read
/// (in entry order, a non-object entry reading as a VM without fields), so that a request
/// does not walk every VM of every server at each step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VmSummary {
    /// VMs whose brand is `kvm`.
    pub kvm_count: u32,
    /// The first VM whose `cpu_cap` is truthy, and the first whose is not.
    pub first_capped: Option<u32>,
    pub first_uncapped: Option<u32>,
    /// Whether some VM is uncapped (after which the CPU count restarts from nothing), and
    /// the sum of the caps of the VMs after the last such one that are not `failed`; `None`
    /// when one of those caps is not a whole number ≥ 0 below 2^53.
    pub reset: bool,
    pub cap_sum: Option<u128>,
    /// Promised RAM of the VMs that are not `failed`: HVM ones, the others; `None` when one
    /// is not a whole number ≥ 0 below 2^53.
    pub ram_sums: Option<(u128, u128)>,
    /// A 256-bit filter of the VMs' string `owner_uuid`s ([`owner_bits`]): a VM of owner
    /// `o` can only be here if both of `o`'s bits are set.
    pub owners: [u64; 4],
}

/// The two filter bits of an owner string (any fixed function would do; the first four
/// characters of a uuid are spread enough).
pub fn owner_bits(owner: &str) -> (u8, u8) {
    let b = owner.as_bytes();
    let nib = |i: usize| b.get(i).map_or(0, |&c| (c & 0x0f) + 9 * (c >> 6));
    (nib(0) << 4 | (nib(1) & 0x0f), nib(2) << 4 | (nib(3) & 0x0f))
}

/// A whole number ≥ 0 below 2^53, as an integer.
fn whole(n: f64) -> Option<u128> {
    ((0.0..9_007_199_254_740_992.0).contains(&n) && n.fract() == 0.0).then_some(n as u128)
}

impl VmSummary {
    fn of<'v, 'a: 'v>(vms: impl Iterator<Item = &'v ServerVm<'a>>) -> VmSummary {
        let mut s = VmSummary { cap_sum: Some(0), ram_sums: Some((0, 0)), ..VmSummary::default() };
        for (i, vm) in vms.enumerate() {
            s.add(i as u32, vm);
        }
        s
    }

    /// Takes in the VM at position `i`, after those already summarised.
    fn add(&mut self, i: u32, vm: &ServerVm<'_>) {
        let s = self;
        let load = vm.load();
        s.kvm_count += u32::from(load.kvm);
        match load.cpu_cap {
            Some(cap) => {
                s.first_capped.get_or_insert(i);
                if !load.failed {
                    s.cap_sum = s.cap_sum.zip(whole(cap)).map(|(sum, c)| sum + c);
                }
            }
            None => {
                s.first_uncapped.get_or_insert(i);
                s.reset = true;
                s.cap_sum = Some(0);
            }
        }
        if !load.failed {
            s.ram_sums =
                s.ram_sums.zip(whole(load.ram_mib)).map(
                    |((hvm, other), ram)| {
                        if load.hvm {
                            (hvm + ram, other)
                        } else {
                            (hvm, other + ram)
                        }
                    },
                );
        }
        if let Some(owner) = vm.owner_uuid().as_str() {
            let (x, y) = owner_bits(owner);
            s.owners[usize::from(x >> 6)] |= 1 << (x & 63);
            s.owners[usize::from(y >> 6)] |= 1 << (y & 63);
        }
    }

    /// Whether a VM owned by `owner` may be among these (false: certainly not).
    pub fn may_be_owned_by(&self, owner: &str) -> bool {
        let (x, y) = owner_bits(owner);
        self.owners[usize::from(x >> 6)] & (1 << (x & 63)) != 0
            && self.owners[usize::from(y >> 6)] & (1 << (y & 63)) != 0
    }
}

/// The summary of no VMs.
pub fn empty_summary() -> &'static VmSummary {
    &EMPTY_SUMMARY
}

static EMPTY_SUMMARY: VmSummary = VmSummary {
    kvm_count: 0,
    first_capped: None,
    first_uncapped: None,
    reset: false,
    cap_sum: Some(0),
    ram_sums: Some((0, 0)),
    owners: [0; 4],
};

impl<'a> VmMap<'a> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry is a plain VM, hence valid.
    pub fn all_plain(&self) -> bool {
        self.all_plain
    }

    /// What the capacity plugins need from these VMs.
    pub fn summary(&self) -> &VmSummary {
        &self.summary
    }

    /// The VM at position `i` (a non-object entry reads as a VM without fields).
    pub fn vm_at(&self, i: usize) -> &ServerVm<'a> {
        self.entries.get(i).and_then(|(_, v)| v.as_obj()).unwrap_or(&EMPTY_VM)
    }

    /// The map of these entries (keys already unique); `all_plain` as [`VmMap::all_plain`]
    /// says. The summary is gathered here, once.
    pub fn from_entries(mut entries: Vec<(Cow<'a, str>, Shape<ServerVm<'a>>)>, all_plain: bool) -> VmMap<'a> {
        // Held for the whole request: give back what the growth left unused.
        entries.shrink_to_fit();
        let summary = VmSummary::of(entries.iter().map(|(_, v)| v.as_obj().unwrap_or(&EMPTY_VM)));
        VmMap { entries, all_plain, summary }
    }

    /// Adds a VM after the others, as a server that has just provisioned it lists it. A
    /// key already present keeps its position and takes the new value (as `JSON.parse`
    /// reads a repeated key).
    pub fn push(&mut self, key: Cow<'a, str>, vm: ServerVm<'a>) {
        self.all_plain &= matches!(vm, ServerVm::Plain(_));
        if let Some(at) = self.entries.iter().position(|(k, _)| *k == key) {
            self.entries[at].1 = Shape::Obj(vm);
            self.summary = VmSummary::of(self.entries.iter().map(|(_, v)| v.as_obj().unwrap_or(&EMPTY_VM)));
            return;
        }
        self.summary.add(self.entries.len() as u32, &vm);
        self.entries.push((key, Shape::Obj(vm)));
    }

    /// Takes out the VM under `key` (the others keep their order).
    pub fn remove(&mut self, key: &str) -> Option<Shape<ServerVm<'a>>> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        let (_, vm) = self.entries.remove(at);
        self.summary = VmSummary::of(self.entries.iter().map(|(_, v)| v.as_obj().unwrap_or(&EMPTY_VM)));
        Some(vm)
    }

    /// The entries, in order.
    pub fn as_slice(&self) -> &[(Cow<'a, str>, Shape<ServerVm<'a>>)] {
        &self.entries
    }

    pub fn get(&self, key: &str) -> Option<&Shape<ServerVm<'a>>> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Shape<ServerVm<'a>>)> + Clone {
        self.entries.iter().map(|(k, v)| (&**k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| &**k)
    }
}
