//! The VMs on a server (`server.vms`), kept compactly.
//!
//! A datacenter-sized request is mostly VMs (about 30 per server), so how they are held
//! decides the request's memory and much of its parse time. A VM whose fields are the
//! ordinary ones — uuids and the alias borrowed from the request body, the usual brands and
//! states, whole numbers below 2^32 − 1, values that pass the server schema's VM checks — is
//! a [`PlainVm`] of 40 bytes that allocates nothing, and its entry in `server.vms` (keyed by
//! its own uuid) 40 bytes. Any other VM (an odd type, a value the schema refuses or the
//! compact form cannot hold, `tags`, `internal_metadata` or `docker` present, a string with
//! escapes) is kept whole as a [`FullVm`] of [`Js`] values, exactly as received. Plugins read either through the same
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

/// A VM whose fields are all ordinary, in 40 bytes: uuids and the alias (under 64 KiB)
/// borrowed from the request body, `brand` and `state` among the usual words, numbers
/// whole and below 2^32 − 1. Holding one means the VM passes the server schema's VM checks (`owner_uuid`
/// a lower-case uuid, `state` a non-empty string, `max_physical_memory` an integer ≥ 1,
/// `quota` a number ≥ 0 if given, `cpu_cap` an integer ≥ 1 if given) and has no `tags`,
/// `internal_metadata` or `docker`. Built only by [`PlainVm::new`]; every field `None` (or
/// absent) only in [`PlainVm::EMPTY`].
#[derive(Clone, Copy)]
pub struct PlainVm<'a> {
    uuid: Option<UuidRef<'a>>,
    owner_uuid: Option<UuidRef<'a>>,
    /// The alias's start; its length is `alias_len`.
    alias: Option<ThinStr<'a>>,
    max_physical_memory_mib: SmallNum,
    quota_gib: SmallNum,
    cpu_cap_pct: SmallNum,
    alias_len: u16,
    brand: Option<Brand>,
    state: Option<VmState>,
}

/// Where a string borrowed from the request body starts: a thin pointer, its length kept
/// apart (a VM's alias: the length beside the VM's other small fields takes 2 bytes where a
/// `&str` would take 8 more). Made only from a whole `&'a str`, so it stands for a borrow
/// of that string.
#[derive(Clone, Copy)]
struct ThinStr<'a> {
    start: std::ptr::NonNull<u8>,
    borrowed: std::marker::PhantomData<&'a str>,
}

// SAFETY: a `ThinStr` is a shared borrow of a `str` (only ever read), as `&'a str` is, and
// `&str` is both.
unsafe impl Send for ThinStr<'_> {}
unsafe impl Sync for ThinStr<'_> {}

impl<'a> ThinStr<'a> {
    /// `s` split into its start and its length, when the length fits 16 bits.
    fn split(s: &'a str) -> Option<(ThinStr<'a>, u16)> {
        let len = u16::try_from(s.len()).ok()?;
        let start = std::ptr::NonNull::from(s).cast::<u8>();
        Some((ThinStr { start, borrowed: std::marker::PhantomData }, len))
    }

    /// The string again, given the length it was split with.
    fn with_len(self, len: u16) -> &'a str {
        // SAFETY: `start` and `len` come from one `&'a str` ([`ThinStr::split`]; `PlainVm`
        // keeps the two together), still borrowed for `'a`.
        unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(self.start.as_ptr(), usize::from(len))) }
    }
}

impl std::fmt::Debug for PlainVm<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainVm")
            .field("uuid", &self.uuid)
            .field("owner_uuid", &self.owner_uuid)
            .field("alias", &self.alias())
            .field("max_physical_memory_mib", &self.max_physical_memory_mib)
            .field("quota_gib", &self.quota_gib)
            .field("cpu_cap_pct", &self.cpu_cap_pct)
            .field("brand", &self.brand)
            .field("state", &self.state)
            .finish()
    }
}

/// A VM's fields as read, before choosing its form: strings borrowed from the body (the
/// uuids already checked, as readers check them where they read them), numbers in the
/// compact form (a reader keeps the whole VM for one that does not fit it).
#[derive(Debug, Clone, Copy)]
pub struct PlainFields<'a> {
    pub uuid: Option<UuidRef<'a>>,
    pub owner_uuid: UuidRef<'a>,
    pub brand: Option<&'a str>,
    pub state: &'a str,
    pub alias: Option<&'a str>,
    pub max_physical_memory_mib: SmallNum,
    pub quota_gib: SmallNum,
    pub cpu_cap_pct: SmallNum,
}

/// A lower-case uuid borrowed from the request body, behind a thin pointer (its length is
/// known). Built only from a whole `&str` that is uuid-shaped.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UuidRef<'a>(&'a [u8; 36]);

impl<'a> UuidRef<'a> {
    /// `s` when it is a lower-case uuid (what the schema's uuid pattern takes).
    pub fn new(s: &'a str) -> Option<UuidRef<'a>> {
        UuidRef::from_bytes(s.as_bytes())
    }

    /// [`UuidRef::new`] on bytes (a uuid-shaped slice is ASCII, so it is a whole `&str`).
    #[inline]
    pub fn from_bytes(b: &'a [u8]) -> Option<UuidRef<'a>> {
        let bytes: &'a [u8; 36] = b.try_into().ok()?;
        super::schema::uuid_shaped(bytes).then_some(UuidRef(bytes))
    }

    /// [`UuidRef::from_bytes`], told without the check when `b` holds the same text as
    /// `known`, a uuid checked already (CNAPI keys each VM by its uuid: the key, read
    /// first, then stands for the VM's `uuid` too).
    #[inline]
    pub fn from_bytes_like(known: Option<UuidRef<'a>>, b: &'a [u8]) -> Option<UuidRef<'a>> {
        match known {
            Some(k) if <&[u8; 36]>::try_from(b).is_ok_and(|b| same_36(b, k.0)) => Some(k),
            _ => UuidRef::from_bytes(b),
        }
    }

    pub fn as_str(self) -> &'a str {
        // SAFETY: the bytes are uuid-shaped, so ASCII (the constructors check it).
        unsafe { std::str::from_utf8_unchecked(self.0) }
    }
}

/// Whether two 36-byte texts are the same, in three word compares (an array `==` of this
/// size calls `memcmp`; this runs for every VM read).
#[inline(always)]
fn same_36(a: &[u8; 36], b: &[u8; 36]) -> bool {
    let (a_head, a_tail) = a.split_at(32);
    let (b_head, b_tail) = b.split_at(32);
    let words = |head: &[u8]| -> [u128; 2] {
        let word = |i: usize| {
            let mut w = [0u8; 16];
            w.copy_from_slice(&head[16 * i..16 * i + 16]);
            u128::from_ne_bytes(w)
        };
        [word(0), word(1)]
    };
    let tail = |t: &[u8]| {
        let mut w = [0u8; 4];
        w.copy_from_slice(t);
        u32::from_ne_bytes(w)
    };
    words(a_head) == words(b_head) && tail(a_tail) == tail(b_tail)
}

impl std::fmt::Debug for UuidRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// A whole number from 0 to 2^32 − 2 in four bytes (exactly the double it was read as);
/// [`SmallNum::ABSENT`] reads `undefined`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmallNum(u32);

impl SmallNum {
    pub const ABSENT: SmallNum = SmallNum(u32::MAX);

    /// `n` when it fits (NaN, an absent number, is [`SmallNum::ABSENT`]); `None` for a
    /// fraction, a negative number, −0 or one too large.
    pub fn of(n: f64) -> Option<SmallNum> {
        if n.is_nan() {
            return Some(SmallNum::ABSENT);
        }
        let whole = n as u32;
        (f64::from(whole) == n && whole != u32::MAX && n.to_bits() != (-0.0f64).to_bits()).then_some(SmallNum(whole))
    }

    /// [`SmallNum::of`] a whole number as the fast readers read it, without the double.
    #[inline]
    pub fn of_whole(n: u64) -> Option<SmallNum> {
        u32::try_from(n).ok().filter(|&n| n != u32::MAX).map(SmallNum)
    }

    /// The number as an integer, `None` when absent.
    fn whole(self) -> Option<u64> {
        (self != SmallNum::ABSENT).then_some(u64::from(self.0))
    }

    /// The number, NaN when absent.
    fn get(self) -> f64 {
        if self == SmallNum::ABSENT {
            f64::NAN
        } else {
            f64::from(self.0)
        }
    }
}

/// `text`'s bytes as an array (its length being `N`).
const fn word_bytes<const N: usize>(text: &str) -> [u8; N] {
    let (mut word, mut i) = ([0u8; N], 0);
    while i < N {
        word[i] = text.as_bytes()[i];
        i += 1;
    }
    word
}

/// Declares a one-byte enum of the usual values of a VM string field, so that a plain VM
/// holds the byte rather than a 16-byte `&str` (any other value keeps the VM a [`FullVm`]).
macro_rules! vm_words {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($variant,)* }

        impl $name {
            /// Compared as fixed-size arrays after the length: inline word compares, where
            /// a `match` on the text calls `memcmp` for each word of the same length (this
            /// runs for every VM read).
            fn of(s: &str) -> Option<$name> {
                let b = s.as_bytes();
                $({
                    const N: usize = $text.len();
                    const WORD: [u8; N] = word_bytes($text);
                    if <&[u8; N]>::try_from(b).is_ok_and(|a| *a == WORD) {
                        return Some($name::$variant);
                    }
                })*
                None
            }

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}

vm_words! {
    /// The zone brands (`brand`) Triton knows.
    Brand {
        Joyent = "joyent",
        JoyentMinimal = "joyent-minimal",
        Lx = "lx",
        Kvm = "kvm",
        Bhyve = "bhyve",
        Builder = "builder",
    }
}

vm_words! {
    /// `vmadm`'s VM states (`state`).
    VmState {
        Running = "running",
        Stopped = "stopped",
        Failed = "failed",
        Provisioning = "provisioning",
        Stopping = "stopping",
        ShuttingDown = "shutting_down",
        Configured = "configured",
        Ready = "ready",
        Receiving = "receiving",
        Down = "down",
        Incomplete = "incomplete",
        Installed = "installed",
        Uninitialized = "uninitialized",
        Destroyed = "destroyed",
        Unknown = "unknown",
    }
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
    /// Listed by dapi itself: a VM it placed (a batch's, exact capacity's, a
    /// simulation's), built from a request already checked. The server schema's VM checks are
    /// for the VMs callers send, so they do not apply (a VM of 1024.5 MiB placed in a batch
    /// is listed so, and its server stays valid for the next VM).
    pub placed: bool,
}

impl From<FullVm> for ServerVm<'_> {
    fn from(vm: FullVm) -> Self {
        ServerVm::Full(Box::new(vm))
    }
}

impl<'a> PlainVm<'a> {
    /// Every field absent (reading `undefined`).
    pub const EMPTY: PlainVm<'static> = PlainVm {
        uuid: None,
        owner_uuid: None,
        alias: None,
        max_physical_memory_mib: SmallNum::ABSENT,
        quota_gib: SmallNum::ABSENT,
        cpu_cap_pct: SmallNum::ABSENT,
        alias_len: 0,
        brand: None,
        state: None,
    };

    /// The plain form of a VM with these fields, when it has one: the fields pass the
    /// schema's VM checks and fit the compact form. Both readers build plain VMs here, so
    /// that they agree on which VMs are plain.
    pub fn new(f: PlainFields<'a>) -> Option<PlainVm<'a>> {
        let brand = match f.brand {
            Some(s) => Some(Brand::of(s)?),
            None => None,
        };
        let (alias, alias_len) = match f.alias {
            Some(alias) => {
                let (start, len) = ThinStr::split(alias)?;
                (Some(start), len)
            }
            None => (None, 0),
        };
        let vm = PlainVm {
            uuid: f.uuid,
            owner_uuid: Some(f.owner_uuid),
            alias,
            max_physical_memory_mib: f.max_physical_memory_mib,
            quota_gib: f.quota_gib,
            cpu_cap_pct: f.cpu_cap_pct,
            alias_len,
            brand,
            state: Some(VmState::of(f.state)?),
        };
        vm.numbers_valid().then_some(vm)
    }

    /// The schema's number checks for a VM ([`super::schema::plain_numbers_valid`]) on the
    /// compact numbers, which are whole and ≥ 0 already: `max_physical_memory` ≥ 1,
    /// `cpu_cap` absent or ≥ 1 (`quota`, absent or ≥ 0, always passes). Integer compares
    /// rather than the doubles' (this runs for every VM read).
    fn numbers_valid(&self) -> bool {
        let from_one = |n: SmallNum| n != SmallNum::ABSENT && n.0 >= 1;
        from_one(self.max_physical_memory_mib) && (self.cpu_cap_pct == SmallNum::ABSENT || from_one(self.cpu_cap_pct))
    }

    /// The VM's `uuid`, when it has one.
    pub fn uuid(&self) -> Option<&'a str> {
        self.uuid.map(UuidRef::as_str)
    }

    /// The VM's `alias`, when it has one.
    fn alias(&self) -> Option<&'a str> {
        self.alias.map(|start| start.with_len(self.alias_len))
    }

    /// What the capacity sums read from the VM ([`ServerVm::load`]).
    #[inline]
    fn load(&self) -> VmLoad {
        let cap = self.cpu_cap_pct.get();
        VmLoad {
            failed: self.state == Some(VmState::Failed),
            cpu_cap: (cap != 0.0 && !cap.is_nan()).then_some(cap),
            ram_mib: self.max_physical_memory_mib.get(),
            hvm: matches!(self.brand, Some(Brand::Kvm | Brand::Bhyve)),
            kvm: self.brand == Some(Brand::Kvm),
        }
    }
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
        uuid: |p| JsRef::opt_str(p.uuid());
        owner_uuid: |p| JsRef::opt_str(p.owner_uuid.map(UuidRef::as_str));
        brand: |p| JsRef::opt_str(p.brand.map(Brand::as_str));
        state: |p| JsRef::opt_str(p.state.map(VmState::as_str));
        alias: |p| JsRef::opt_str(p.alias());
        /// Promised RAM (`max_physical_memory`), MiB.
        max_physical_memory_mib: |p| JsRef::nan_absent(p.max_physical_memory_mib.get());
        /// Promised disk (`quota`), GiB.
        quota_gib: |p| JsRef::nan_absent(p.quota_gib.get());
        /// CPU cap, percent of one core.
        cpu_cap_pct: |p| JsRef::nan_absent(p.cpu_cap_pct.get());
        tags: |_| JsRef::Undefined;
        internal_metadata: |_| JsRef::Undefined;
        docker: |_| JsRef::Undefined;
    }

    /// What the capacity sums read from the VM (as the accessors would give it).
    pub fn load(&self) -> VmLoad {
        match self {
            ServerVm::Plain(p) => p.load(),
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
            ServerVm::Plain(p) => p.owner_uuid.is_some_and(|o| same_str(o.as_str(), owner)),
            ServerVm::Full(f) => f.owner_uuid.as_str() == Some(owner),
        }
    }

    /// The VM with every field as a [`Js`] (allocates for a plain VM): the tests' oracle
    /// for the compact form.
    #[cfg(test)]
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
                placed: false,
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

/// `server.vms`: VM uuid → VM (or whatever non-object value was sent), in the order sent;
/// a repeated key keeps its first position and its last value, as `JSON.parse` does.
#[derive(Debug, Clone)]
pub struct VmMap<'a> {
    entries: Vec<VmEntry<'a>>,
    /// Every entry is a plain VM (so every VM passes the schema's VM checks). May be false
    /// when they all are, never true when one is not.
    all_plain: bool,
    summary: VmSummary,
}

/// An entry of `server.vms`: 40 bytes for a VM kept as CNAPI sends it (keyed by its own
/// uuid, the key then being no more than the VM's `uuid`); any other entry holds its key
/// and value behind one pointer. 150,000 VMs in a 5,000-server request: each byte here is
/// 150 KB of the request's peak.
/// Built only by [`VmEntry::new`], which picks the form.
#[derive(Debug, Clone)]
pub struct VmEntry<'a>(Entry<'a>);

#[derive(Debug, Clone)]
enum Entry<'a> {
    /// The value's own `uuid` (a plain VM's) is the key.
    OwnUuid(Shape<ServerVm<'a>>),
    Keyed(Box<(Cow<'a, str>, Shape<ServerVm<'a>>)>),
}

impl<'a> VmEntry<'a> {
    pub fn new(key: Cow<'a, str>, value: Shape<ServerVm<'a>>) -> VmEntry<'a> {
        let own_uuid = match &value {
            // The same text, often the very same bytes (`UuidRef::from_bytes_like`).
            Shape::Obj(ServerVm::Plain(p)) => p.uuid().is_some_and(|u| std::ptr::eq(u, &*key) || *u == *key),
            _ => false,
        };
        VmEntry(if own_uuid { Entry::OwnUuid(value) } else { Entry::Keyed(Box::new((key, value))) })
    }

    pub fn key(&self) -> &str {
        match &self.0 {
            Entry::OwnUuid(value) => own_uuid(value),
            Entry::Keyed(pair) => &pair.0,
        }
    }

    /// The key, borrowed from the body where it was.
    pub fn key_cow(&self) -> Cow<'a, str> {
        match &self.0 {
            Entry::OwnUuid(value) => Cow::Borrowed(own_uuid(value)),
            Entry::Keyed(pair) => pair.0.clone(),
        }
    }

    /// Keyed by the plain VM's own uuid (so by a lower-case uuid).
    pub fn keyed_by_own_uuid(&self) -> bool {
        matches!(self.0, Entry::OwnUuid(_))
    }

    pub fn value(&self) -> &Shape<ServerVm<'a>> {
        match &self.0 {
            Entry::OwnUuid(value) => value,
            Entry::Keyed(pair) => &pair.1,
        }
    }

    /// The VM (a non-object entry reads as a VM without fields).
    pub fn vm(&self) -> &ServerVm<'a> {
        self.value().as_obj().unwrap_or(&EMPTY_VM)
    }

    /// The entry with a new value under the same key (a repeated key: `JSON.parse` keeps
    /// the last value).
    pub fn set_value(&mut self, value: Shape<ServerVm<'a>>) {
        *self = VmEntry::new(self.key_cow(), value);
    }

    fn into_value(self) -> Shape<ServerVm<'a>> {
        match self.0 {
            Entry::OwnUuid(value) => value,
            Entry::Keyed(pair) => pair.1,
        }
    }
}

/// The uuid of an `Entry::OwnUuid` value (which `VmEntry::new` only builds from a plain VM
/// with one).
fn own_uuid<'a>(value: &Shape<ServerVm<'a>>) -> &'a str {
    match value {
        Shape::Obj(ServerVm::Plain(p)) => p.uuid().unwrap_or_default(),
        _ => "",
    }
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
    /// when one of those caps is not a whole number ≥ 0 below 2^53 or the sum passes
    /// `u64` (then the VMs are taken one by one, as without a summary).
    pub reset: bool,
    pub cap_sum: Option<u64>,
    /// Promised RAM of the VMs that are not `failed`: HVM ones, the others; `None` as for
    /// `cap_sum`.
    pub ram_sums: Option<(u64, u64)>,
    /// A 256-bit filter of the VMs' string `owner_uuid`s ([`owner_bits`]): a VM of owner
    /// `o` can only be here if both of `o`'s bits are set.
    pub owners: [u64; 4],
}

/// The two filter bits of an owner string (any fixed function would do; the first four
/// characters of a uuid are spread enough).
#[inline]
pub fn owner_bits(owner: &str) -> (u8, u8) {
    let mut b = [0u8; 4];
    match owner.as_bytes().first_chunk::<4>() {
        // A fixed-size copy, inline (a copy of a variable length calls `memcpy`, and this
        // runs for every VM read).
        Some(first) => b = *first,
        None => b[..owner.len()].copy_from_slice(owner.as_bytes()),
    }
    let nib = |i: usize| (b[i] & 0x0f) + 9 * (b[i] >> 6);
    (nib(0) << 4 | (nib(1) & 0x0f), nib(2) << 4 | (nib(3) & 0x0f))
}

/// A whole number ≥ 0 below 2^53, as an integer (without SSE4.1, `fract` is a library
/// call, and this runs for every VM read).
fn whole(n: f64) -> Option<u64> {
    let int = n as u64;
    ((0.0..9_007_199_254_740_992.0).contains(&n) && int as f64 == n).then_some(int)
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
        // The cap: `None` when falsy (no cap), else whether it is whole and its value.
        let (load, cap, ram, owner) = match vm {
            // Read straight from the compact form: this runs for every VM of a request.
            ServerVm::Plain(p) => {
                let cap = p.cpu_cap_pct.whole().filter(|&c| c != 0).map(Some);
                (p.load(), cap, p.max_physical_memory_mib.whole(), p.owner_uuid.map(UuidRef::as_str))
            }
            ServerVm::Full(_) => {
                let load = vm.load();
                let cap = load.cpu_cap.map(whole);
                (load, cap, whole(load.ram_mib), vm.owner_uuid().as_str())
            }
        };
        s.kvm_count += u32::from(load.kvm);
        match cap {
            Some(cap) => {
                s.first_capped.get_or_insert(i);
                if !load.failed {
                    s.cap_sum = s.cap_sum.zip(cap).and_then(|(sum, c)| sum.checked_add(c));
                }
            }
            None => {
                s.first_uncapped.get_or_insert(i);
                s.reset = true;
                s.cap_sum = Some(0);
            }
        }
        if !load.failed {
            s.ram_sums = s.ram_sums.zip(ram).and_then(|((hvm, other), ram)| match load.hvm {
                true => Some((hvm.checked_add(ram)?, other)),
                false => Some((hvm, other.checked_add(ram)?)),
            });
        }
        if let Some(owner) = owner {
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
        self.entries.get(i).map_or(&EMPTY_VM, VmEntry::vm)
    }

    /// The map of these entries (keys already unique); `all_plain` as [`VmMap::all_plain`]
    /// says. The summary is gathered here, once.
    pub fn from_entries(mut entries: Vec<VmEntry<'a>>, all_plain: bool) -> VmMap<'a> {
        // Held for the whole request: give back what the growth left unused.
        entries.shrink_to_fit();
        let summary = VmSummary::of(entries.iter().map(VmEntry::vm));
        VmMap { entries, all_plain, summary }
    }

    /// Adds a VM after the others, as a server that has just provisioned it lists it. A
    /// key already present keeps its position and takes the new value (as `JSON.parse`
    /// reads a repeated key).
    pub fn push(&mut self, key: Cow<'a, str>, vm: ServerVm<'a>) {
        if let Some(at) = self.entries.iter().position(|e| e.key() == key) {
            self.all_plain &= matches!(vm, ServerVm::Plain(_));
            self.entries[at].set_value(Shape::Obj(vm));
            self.summary = VmSummary::of(self.entries.iter().map(VmEntry::vm));
            return;
        }
        self.push_new(key, vm);
    }

    /// [`VmMap::push`] of a key not in the map.
    pub fn push_new(&mut self, key: Cow<'a, str>, vm: ServerVm<'a>) {
        debug_assert!(self.get(&key).is_none(), "{key} is listed already");
        self.all_plain &= matches!(vm, ServerVm::Plain(_));
        self.summary.add(self.entries.len() as u32, &vm);
        self.entries.push(VmEntry::new(key, Shape::Obj(vm)));
    }

    /// Takes out the VM under `key` (the others keep their order).
    pub fn remove(&mut self, key: &str) -> Option<Shape<ServerVm<'a>>> {
        let at = self.entries.iter().position(|e| e.key() == key)?;
        let vm = self.entries.remove(at).into_value();
        self.summary = VmSummary::of(self.entries.iter().map(VmEntry::vm));
        Some(vm)
    }

    /// The entries, in order.
    pub fn as_slice(&self) -> &[VmEntry<'a>] {
        &self.entries
    }

    pub fn get(&self, key: &str) -> Option<&Shape<ServerVm<'a>>> {
        self.entries.iter().find(|e| e.key() == key).map(VmEntry::value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Shape<ServerVm<'a>>)> + Clone {
        self.entries.iter().map(|e| (e.key(), e.value()))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(VmEntry::key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(alias: Option<&'a str>) -> PlainFields<'a> {
        PlainFields {
            uuid: UuidRef::new("00000000-0000-4000-8000-000000000001"),
            owner_uuid: UuidRef::new("00000000-0000-4000-8000-000000000002").expect("uuid-shaped"),
            brand: Some("joyent"),
            state: "running",
            alias,
            max_physical_memory_mib: SmallNum(512),
            quota_gib: SmallNum(10),
            cpu_cap_pct: SmallNum::ABSENT,
        }
    }

    /// Sums past `u64` leave the summary without them (the VMs are then taken one by one):
    /// 2,049 VMs of 2^53 − 1 MiB each.
    #[test]
    fn sums_past_u64_are_left_to_the_vms() {
        let map_of = |count: usize| {
            let vm = |i: usize| {
                format!(
                    r#""{i}": {{"owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "state": "running", "max_physical_memory": 9007199254740991, "cpu_cap": 9007199254740991}}"#
                )
            };
            let text = format!("{{{}}}", (0..count).map(vm).collect::<Vec<_>>().join(","));
            serde_json::from_str::<VmMap>(&text).map(|m| m.summary().clone()).expect("VM map")
        };
        let two = map_of(2);
        assert_eq!(two.ram_sums, Some((0, 2 * 9_007_199_254_740_991)));
        assert_eq!(two.cap_sum, Some(2 * 9_007_199_254_740_991));
        let many = map_of(2_049);
        assert_eq!((many.ram_sums, many.cap_sum), (None, None));
        assert_eq!(std::mem::size_of::<VmSummary>(), 96);
    }

    /// A VM whose numbers fit the compact form is plain with them exactly when the three
    /// pass the schema's checks, as doubles; a whole number read as an integer fits as its
    /// double does.
    #[test]
    fn the_compact_number_checks_are_the_schemas() {
        let values =
            [f64::NAN, 0.0, -0.0, 0.5, 1.0, 1.5, 2.0, -1.0, 4096.0, 0.999, 4_294_967_294.0, 4_294_967_295.0, 1e300];
        for ram in values {
            for quota in values {
                for cap in values {
                    let expected = crate::model::schema::plain_numbers_valid(ram, quota, cap);
                    let (Some(r), Some(q), Some(c)) = (SmallNum::of(ram), SmallNum::of(quota), SmallNum::of(cap))
                    else {
                        continue;
                    };
                    let f = PlainFields { max_physical_memory_mib: r, quota_gib: q, cpu_cap_pct: c, ..fields(None) };
                    assert_eq!(PlainVm::new(f).is_some(), expected, "{ram} {quota} {cap}");
                }
            }
        }
        for n in [0, 1, 4096, 4_294_967_294, 4_294_967_295, 4_294_967_296, 999_999_999_999_999] {
            assert_eq!(SmallNum::of_whole(n), SmallNum::of(n as f64), "{n}");
        }
    }

    /// The usual words are told from any other text, a prefix or a longer one included.
    #[test]
    fn the_usual_words_and_no_others() {
        for word in ["running", "stopped", "shutting_down", "uninitialized", "unknown", "down"] {
            assert_eq!(VmState::of(word).map(VmState::as_str), Some(word));
        }
        for word in ["joyent", "joyent-minimal", "lx", "kvm", "bhyve", "builder"] {
            assert_eq!(Brand::of(word).map(Brand::as_str), Some(word));
        }
        for other in ["", "run", "runnin", "runningg", "Running", "running\0", "joyent-", "l", "lxx", "kvm "] {
            assert_eq!(VmState::of(other), None, "{other:?}");
            assert_eq!(Brand::of(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_plain_vm_and_its_entry_take_forty_bytes() {
        assert_eq!(std::mem::size_of::<PlainVm>(), 40);
        assert_eq!(std::mem::size_of::<ServerVm>(), 40);
        assert_eq!(std::mem::size_of::<VmEntry>(), 40);
    }

    #[test]
    fn the_alias_reads_back_whole_and_a_very_long_one_keeps_the_vm_full() {
        for alias in [None, Some(""), Some("web-01"), Some("é".repeat(30_000).as_str())] {
            let vm = ServerVm::Plain(PlainVm::new(fields(alias)).expect("plain"));
            assert_eq!(vm.alias().as_str(), alias, "{alias:?}");
        }
        let vm = PlainVm::new(fields(Some("web-01"))).expect("plain");
        assert!(format!("{vm:?}").contains("alias: Some(\"web-01\")"), "{vm:?}");
        let long = "x".repeat(usize::from(u16::MAX) + 1);
        assert!(PlainVm::new(fields(Some(&long))).is_none());
    }
}
