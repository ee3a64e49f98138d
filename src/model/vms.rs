//! The VMs on a server (`server.vms`), kept compactly.
//!
//! A datacenter-sized request is mostly VMs (about 30 per server), so how they are held
//! decides the request's memory and much of its parse time. A VM whose fields are the
//! ordinary ones — strings borrowed from the request body, plain numbers, and values that
//! pass the server schema's VM checks — is a [`PlainVm`] of about 100 bytes that allocates
//! nothing. Any other VM (an odd type, a value the schema refuses, `tags`,
//! `internal_metadata` or `docker` present, a string with escapes) is kept whole as a
//! [`FullVm`] of [`Js`] values, exactly as received. Plugins read either through the same
//! accessors ([`ServerVm::brand`], ...), which return [`JsRef`] views.

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{value::MapAccessDeserializer, value::SeqAccessDeserializer, Deserialize, Deserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};

use super::cursor::Cursor;
use super::Shape;
use crate::fxhash::FxBuild;
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

/// What a missing or non-object VM entry reads as: every field `undefined`.
pub static EMPTY_VM: ServerVm<'static> = ServerVm::Plain(PlainVm {
    uuid: None,
    owner_uuid: "",
    brand: None,
    state: "",
    alias: None,
    max_physical_memory_mib: f64::NAN,
    quota_gib: f64::NAN,
    cpu_cap_pct: f64::NAN,
});

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

/// A field as the parser first sees it: borrowed string, number, absent, or anything else.
#[derive(Debug, Default)]
enum Raw<'a> {
    #[default]
    Absent,
    Str(&'a str),
    Num(f64),
    Other(Js),
}

impl<'a> Raw<'a> {
    fn into_js(self) -> Js {
        match self {
            Raw::Absent => Js::Undefined,
            Raw::Str(s) => Js::str(s),
            Raw::Num(n) => Js::Num(n),
            Raw::Other(v) => v,
        }
    }

    /// `Some(None)` when absent, `Some(Some(s))` for a borrowed string, else `None`.
    fn opt_str(&self) -> Option<Option<&'a str>> {
        match self {
            Raw::Absent => Some(None),
            Raw::Str(s) => Some(Some(s)),
            _ => None,
        }
    }

    fn str(&self) -> Option<&'a str> {
        match self {
            Raw::Str(s) => Some(s),
            _ => None,
        }
    }

    /// `Some(NaN)` when absent, `Some(n)` for a number, else `None`.
    fn opt_num(&self) -> Option<f64> {
        match self {
            Raw::Absent => Some(f64::NAN),
            Raw::Num(n) => Some(*n),
            _ => None,
        }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Raw<'de>, E> {
        Ok(Raw::Str(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Raw<'de>, E> {
        Ok(Raw::Other(Js::str(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Raw<'de>, E> {
        Ok(Raw::Num(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Raw<'de>, E> {
        Ok(Raw::Num(v as f64))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Raw<'de>, E> {
        Ok(Raw::Num(v as f64))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Raw<'de>, E> {
        Ok(Raw::Other(Js::Bool(v)))
    }
    fn visit_unit<E>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Other(Js::Null))
    }
    fn visit_none<E>(self) -> Result<Raw<'de>, E> {
        Ok(Raw::Other(Js::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Raw<'de>, A::Error> {
        Js::deserialize(SeqAccessDeserializer::new(seq)).map(Raw::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Raw<'de>, A::Error> {
        Js::deserialize(MapAccessDeserializer::new(map)).map(Raw::Other)
    }
}

/// A VM object's fields as received, before choosing its form.
#[derive(Default, serde::Deserialize)]
#[serde(default)]
struct Received<'a> {
    #[serde(borrow)]
    uuid: Raw<'a>,
    #[serde(borrow)]
    owner_uuid: Raw<'a>,
    #[serde(borrow)]
    brand: Raw<'a>,
    #[serde(borrow)]
    state: Raw<'a>,
    #[serde(borrow)]
    max_physical_memory: Raw<'a>,
    #[serde(borrow)]
    quota: Raw<'a>,
    #[serde(borrow)]
    cpu_cap: Raw<'a>,
    #[serde(borrow)]
    alias: Raw<'a>,
    #[serde(borrow)]
    tags: Raw<'a>,
    #[serde(borrow)]
    internal_metadata: Raw<'a>,
    #[serde(borrow)]
    docker: Raw<'a>,
}

impl<'a> Received<'a> {
    fn plain(&self) -> Option<PlainVm<'a>> {
        let absent = |r: &Raw| matches!(r, Raw::Absent);
        if !(absent(&self.tags) && absent(&self.internal_metadata) && absent(&self.docker)) {
            return None;
        }
        let vm = PlainVm {
            uuid: self.uuid.opt_str()?,
            owner_uuid: self.owner_uuid.str()?,
            brand: self.brand.opt_str()?,
            state: self.state.str()?,
            alias: self.alias.opt_str()?,
            max_physical_memory_mib: self.max_physical_memory.opt_num()?,
            quota_gib: self.quota.opt_num()?,
            cpu_cap_pct: self.cpu_cap.opt_num()?,
        };
        crate::model::schema::plain_vm_is_valid(&vm).then_some(vm)
    }

    fn into_vm(self) -> ServerVm<'a> {
        if let Some(plain) = self.plain() {
            return ServerVm::Plain(plain);
        }
        ServerVm::from(FullVm {
            uuid: self.uuid.into_js(),
            owner_uuid: self.owner_uuid.into_js(),
            brand: self.brand.into_js(),
            state: self.state.into_js(),
            max_physical_memory_mib: self.max_physical_memory.into_js(),
            quota_gib: self.quota.into_js(),
            cpu_cap_pct: self.cpu_cap.into_js(),
            alias: self.alias.into_js(),
            tags: self.tags.into_js(),
            internal_metadata: self.internal_metadata.into_js(),
            docker: self.docker.into_js(),
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ServerVm<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Received::deserialize(d).map(Received::into_vm)
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
            let i = i as u32;
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
                s.ram_sums = s.ram_sums.zip(whole(load.ram_mib)).map(|((hvm, other), ram)| {
                    if load.hvm {
                        (hvm + ram, other)
                    } else {
                        (hvm, other + ram)
                    }
                });
            }
            if let Some(owner) = vm.owner_uuid().as_str() {
                let (x, y) = owner_bits(owner);
                s.owners[usize::from(x >> 6)] |= 1 << (x & 63);
                s.owners[usize::from(y >> 6)] |= 1 << (y & 63);
            }
        }
        s
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

    fn finish(&mut self) {
        // Held for the whole request: give back what the growth left unused.
        self.entries.shrink_to_fit();
        self.summary = VmSummary::of(self.entries.iter().map(|(_, v)| v.as_obj().unwrap_or(&EMPTY_VM)));
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

fn is_plain(value: &Shape<ServerVm<'_>>) -> bool {
    matches!(value, Shape::Obj(ServerVm::Plain(_)))
}

/// A map key, borrowed from the body unless it had escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// Builds a [`VmMap`] entry by entry with `JSON.parse`'s rule for a repeated key.
///
/// Repeated keys are rare, so they are found through a 1024-bit filter of key fingerprints
/// (an entry is compared with the others only when its bit is already set), and through a
/// hash map once the map is large enough for the filter to fill up.
struct Builder<'a> {
    map: VmMap<'a>,
    bits: [u64; 16],
    index: Option<HashMap<Cow<'a, str>, usize, FxBuild>>,
}

/// Past this many entries repeated keys are looked up in a hash map.
const INDEXED: usize = 256;

impl<'a> Builder<'a> {
    fn new(capacity: usize) -> Builder<'a> {
        Builder { map: VmMap { entries: Vec::with_capacity(capacity), ..VmMap::default() }, bits: [0; 16], index: None }
    }

    fn push(&mut self, key: Cow<'a, str>, value: Shape<ServerVm<'a>>) {
        self.map.all_plain &= is_plain(&value);
        let entries = &mut self.map.entries;
        if let Some(index) = &mut self.index {
            match index.get(&key) {
                Some(&i) => entries[i].1 = value,
                None => {
                    index.insert(key.clone(), entries.len());
                    entries.push((key, value));
                }
            }
            return;
        }
        let f = fingerprint(&key);
        let (word, bit) = (f >> 6, 1u64 << (f & 63));
        if self.bits[word] & bit != 0 {
            if let Some(entry) = entries.iter_mut().find(|(k, _)| *k == key) {
                entry.1 = value;
                return;
            }
        }
        self.bits[word] |= bit;
        entries.push((key, value));
        if entries.len() == INDEXED {
            self.index = Some(entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect());
        }
    }

    fn finish(mut self) -> VmMap<'a> {
        self.map.finish();
        self.map
    }
}

/// 10 bits from a key's length and first 8 bytes (VM uuids differ there).
fn fingerprint(key: &str) -> usize {
    let b = key.as_bytes();
    let mut word = [0u8; 8];
    let n = b.len().min(8);
    word[..n].copy_from_slice(&b[..n]);
    let mixed = (u64::from_le_bytes(word) ^ b.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed >> 54) as usize
}

impl<'de: 'a, 'a> Deserialize<'de> for VmMap<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = VmMap<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of VMs")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<VmMap<'a>, A::Error> {
                let mut vms = Builder::new(map.size_hint().unwrap_or(32));
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    vms.push(key, map.next_value()?);
                }
                Ok(vms.finish())
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl<'a> VmMap<'a> {
    /// `server.vms` at the cursor: objects of ordinary VMs are read by [`Cursor`]'s fast
    /// readers, everything else (a VM that is not plain, a key with escapes, a value that is
    /// not an object) by serde_json, with the same result.
    pub(super) fn read(c: &mut Cursor<'a>) -> serde_json::Result<Shape<VmMap<'a>>> {
        let start = c.pos;
        if c.peek() == Some(b'{') {
            if let Some(map) = VmMap::read_fast(c) {
                return Ok(Shape::Obj(map));
            }
            c.pos = start;
        }
        c.value::<Shape<VmMap>>().map(|(v, _)| v)
    }

    fn read_fast(c: &mut Cursor<'a>) -> Option<VmMap<'a>> {
        c.eat(b'{');
        let mut vms = Builder::new(32);
        if !c.eat(b'}') {
            loop {
                let key = c.key()?;
                let start = c.pos;
                let value = match (c.peek() == Some(b'{')).then(|| ServerVm::read_fast(c)).flatten() {
                    Some(vm) => Shape::Obj(vm),
                    None => {
                        c.pos = start;
                        c.value::<Shape<ServerVm>>().ok()?.0
                    }
                };
                vms.push(Cow::Borrowed(key), value);
                if c.eat(b'}') {
                    break;
                }
                if !c.eat(b',') {
                    return None;
                }
            }
        }
        Some(vms.finish())
    }
}

/// The VM fields the fast reader looks for, with their closing quote, in the order they
/// usually come.
const FAST_VM_KEYS: [&str; 11] = [
    "uuid\"",
    "owner_uuid\"",
    "brand\"",
    "state\"",
    "max_physical_memory\"",
    "quota\"",
    "cpu_cap\"",
    "alias\"",
    "tags\"",
    "internal_metadata\"",
    "docker\"",
];

impl<'a> ServerVm<'a> {
    /// A plain VM: strings without escapes, small whole numbers, values that pass the
    /// checks a [`PlainVm`] stands for. Anything else (including a repeated field, which
    /// serde_json reports) gives up, and serde_json reads the VM.
    fn read_fast(c: &mut Cursor<'a>) -> Option<ServerVm<'a>> {
        c.eat(b'{');
        let mut vm = PlainVm {
            uuid: None,
            owner_uuid: "",
            brand: None,
            state: "",
            alias: None,
            max_physical_memory_mib: f64::NAN,
            quota_gib: f64::NAN,
            cpu_cap_pct: f64::NAN,
        };
        let mut seen = 0u16;
        if !c.eat(b'}') {
            loop {
                match c.known_key(&FAST_VM_KEYS)? {
                    Some(i) => {
                        if seen & (1 << i) != 0 {
                            return None;
                        }
                        seen |= 1 << i;
                        match i {
                            0 => vm.uuid = Some(c.uuid_str().or_else(|| c.plain_str())?),
                            1 => vm.owner_uuid = c.uuid_str()?,
                            2 => vm.brand = Some(c.plain_str()?),
                            3 => vm.state = c.plain_str()?,
                            4 => vm.max_physical_memory_mib = c.small_uint()?,
                            5 => vm.quota_gib = c.small_uint()?,
                            6 => vm.cpu_cap_pct = c.small_uint()?,
                            7 => vm.alias = Some(c.plain_str()?),
                            // tags, internal_metadata, docker: not a plain VM.
                            _ => return None,
                        }
                    }
                    None => c.skip().ok()?,
                }
                if c.eat(b'}') {
                    break;
                }
                if !c.eat(b',') {
                    return None;
                }
            }
        }
        // Required: owner_uuid, state, max_physical_memory (and what the schema says of them).
        (seen & 0b1_1010 == 0b1_1010 && crate::model::schema::plain_vm_is_valid(&vm)).then_some(ServerVm::Plain(vm))
    }
}

/// The fields [`ServerVm::read_fast`] reads, as the derived reader names them.
#[cfg(test)]
const VM_FIELDS: [&str; 11] = [
    "uuid",
    "owner_uuid",
    "brand",
    "state",
    "max_physical_memory",
    "quota",
    "cpu_cap",
    "alias",
    "tags",
    "internal_metadata",
    "docker",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn vms(text: &'static str) -> VmMap<'static> {
        serde_json::from_str(text).expect("VM map")
    }

    fn vm<'m>(map: &'m VmMap<'static>, key: &str) -> &'m ServerVm<'static> {
        map.get(key).and_then(Shape::as_obj).expect("a VM object")
    }

    const OWNER: &str = "930896af-bf8c-48d4-885c-6573a94b1853";

    #[test]
    fn ordinary_vms_are_plain_and_read_like_js() {
        let text = r#"{"a": {"uuid": "a", "owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "brand": "lx",
                        "state": "running", "max_physical_memory": 512, "quota": 10, "alias": "x", "other": [1]}}"#;
        let m = vms(text);
        let v = vm(&m, "a");
        assert!(matches!(v, ServerVm::Plain(_)));
        assert_eq!(v.owner_uuid().as_str(), Some(OWNER));
        assert_eq!(v.brand().as_str(), Some("lx"));
        assert_eq!(v.max_physical_memory_mib().num(), 512.0);
        assert!(v.cpu_cap_pct().is_undefined() && !v.cpu_cap_pct().truthy());
        assert!(v.tags().is_undefined());
        assert_eq!(v.quota_gib().stringify(), "10");
    }

    #[test]
    fn anything_unusual_keeps_the_whole_vm() {
        for body in [
            r#"{"a": {"owner_uuid": "nope", "state": "running", "max_physical_memory": 512}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "", "max_physical_memory": 512}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": "512"}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 0.5}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 5, "cpu_cap": 0}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 5, "quota": -1}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 5, "tags": {}}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "run\u006eing", "max_physical_memory": 5}}"#,
            r#"{"a": {"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 5, "brand": null}}"#,
        ] {
            let m = vms(body);
            let v = vm(&m, "a");
            assert!(matches!(v, ServerVm::Full(_)), "{body}");
        }
        let m = vms(r#"{"a": {"owner_uuid": 5, "state": "run\u006eing", "brand": null, "tags": {"k": 1}}}"#);
        let v = vm(&m, "a");
        assert_eq!(v.owner_uuid().num(), 5.0);
        assert_eq!(v.state().as_str(), Some("running"));
        assert_eq!(v.brand().stringify(), "null");
        assert_eq!(v.tags().get("k").num(), 1.0);
    }

    #[test]
    fn a_repeated_key_keeps_its_first_place_and_last_value() {
        for n in [3, 20] {
            let mut text = String::from("{");
            for i in 0..n {
                text.push_str(&format!("\"k{i}\": {{\"alias\": \"first{i}\"}},"));
            }
            text.push_str("\"k1\": {\"alias\": \"second\"}, \"z\": 1}");
            let text: &'static str = Box::leak(text.into_boxed_str());
            let m = vms(text);
            assert_eq!(m.len(), n + 1);
            let keys: Vec<&str> = m.keys().collect();
            assert_eq!(keys[1], "k1");
            assert_eq!(keys[n], "z");
            assert_eq!(vm(&m, "k1").alias().as_str(), Some("second"));
            assert!(matches!(m.get("z"), Some(Shape::Other(Js::Num(_)))));
        }
    }

    #[test]
    fn the_fast_reader_knows_every_vm_field() {
        assert_eq!(crate::model::request::tests::serde_fields::<Received>(), VM_FIELDS);
    }

    #[test]
    fn keys_with_escapes_are_owned() {
        let m = vms(r#"{"a\"b": {}}"#);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a\"b"]);
    }
}
