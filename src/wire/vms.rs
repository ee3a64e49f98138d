//! Reading `server.vms` off the wire: the serde readers (any JSON) and the fast reader for
//! ordinary VMs (strings without escapes, small whole numbers), which gives up on anything
//! else so that serde reads it. Either way a VM that qualifies becomes a compact
//! [`PlainVm`] borrowing from the body, and anything else a [`FullVm`] (`model::vms`).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{value::MapAccessDeserializer, value::SeqAccessDeserializer, Deserialize, Deserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};

use super::cursor::{small_whole_at, text_between, Cursor};
use crate::fxhash::FxBuild;
use crate::js::Js;
use crate::model::{FullVm, PlainFields, PlainVm, ServerVm, Shape, SmallNum, UuidRef, VmEntry, VmMap};

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
        let uuid = match self.uuid.opt_str()? {
            Some(s) => Some(UuidRef::new(s)?),
            None => None,
        };
        PlainVm::new(PlainFields {
            uuid,
            owner_uuid: UuidRef::new(self.owner_uuid.str()?)?,
            brand: self.brand.opt_str()?,
            state: self.state.str()?,
            alias: self.alias.opt_str()?,
            max_physical_memory_mib: SmallNum::of(self.max_physical_memory.opt_num()?)?,
            quota_gib: SmallNum::of(self.quota.opt_num()?)?,
            cpu_cap_pct: SmallNum::of(self.cpu_cap.opt_num()?)?,
        })
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
            placed: false,
        })
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ServerVm<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Received::deserialize(d).map(Received::into_vm)
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
    entries: Vec<VmEntry<'a>>,
    all_plain: bool,
    bits: [u64; 16],
    index: Option<HashMap<Cow<'a, str>, usize, FxBuild>>,
}

/// Past this many entries repeated keys are looked up in a hash map.
const INDEXED: usize = 256;

impl<'a> Builder<'a> {
    fn new(capacity: usize) -> Builder<'a> {
        Builder { entries: Vec::with_capacity(capacity), all_plain: true, bits: [0; 16], index: None }
    }

    fn push(&mut self, key: Cow<'a, str>, value: Shape<ServerVm<'a>>) {
        self.all_plain &= is_plain(&value);
        let entries = &mut self.entries;
        if let Some(index) = &mut self.index {
            match index.get(&key) {
                Some(&i) => entries[i].set_value(value),
                None => {
                    index.insert(key.clone(), entries.len());
                    entries.push(VmEntry::new(key, value));
                }
            }
            return;
        }
        let f = fingerprint(&key);
        let (word, bit) = (f >> 6, 1u64 << (f & 63));
        if self.bits[word] & bit != 0 {
            // Another key with the same bit, most likely: only keys of the same fingerprint
            // are compared whole.
            if let Some(entry) = entries.iter_mut().find(|e| fingerprint(e.key()) == f && e.key() == key) {
                entry.set_value(value);
                return;
            }
        }
        self.bits[word] |= bit;
        entries.push(VmEntry::new(key, value));
        if entries.len() == INDEXED {
            self.index = Some(entries.iter().enumerate().map(|(i, e)| (e.key_cow(), i)).collect());
        }
    }

    fn finish(self) -> VmMap<'a> {
        VmMap::from_entries(self.entries, self.all_plain)
    }
}

/// 10 bits from a key's length and first 8 bytes (VM uuids differ there).
fn fingerprint(key: &str) -> usize {
    let b = key.as_bytes();
    let mut word = [0u8; 8];
    match b.first_chunk::<8>() {
        // Inline, where a copy of a variable length calls `memcpy` (for every VM read).
        Some(first) => word = *first,
        None => word[..b.len()].copy_from_slice(b),
    }
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

/// `server.vms` at the cursor: objects of ordinary VMs are read by [`Cursor`]'s fast
/// readers, everything else (a VM that is not plain, a key with escapes, a value that is
/// not an object) by serde_json, with the same result.
pub(super) fn read_vms<'a>(c: &mut Cursor<'a>) -> serde_json::Result<Shape<VmMap<'a>>> {
    let start = c.pos;
    if c.peek() == Some(b'{') {
        if let Some(map) = read_vms_fast(c) {
            return Ok(Shape::Obj(map));
        }
        c.pos = start;
    }
    c.value::<Shape<VmMap>>().map(|(v, _)| v)
}

#[inline(never)]
fn read_vms_fast<'a>(c: &mut Cursor<'a>) -> Option<VmMap<'a>> {
    c.eat(b'{');
    let mut vms = Builder::new(32);
    if !c.eat(b'}') {
        loop {
            // CNAPI keys VMs by their uuids: such a key needs no search for its end.
            c.skip_ws();
            let key_start = c.pos;
            let (key, key_uuid) = match c.uuid() {
                Some(uuid) if c.eat(b':') => (uuid.as_str(), Some(uuid)),
                _ => {
                    c.pos = key_start;
                    (c.key()?, None)
                }
            };
            c.skip_ws();
            let start = c.pos;
            let value = match (c.byte_at(start) == b'{').then(|| read_plain_vm(c, key_uuid)).flatten() {
                Some(vm) => Shape::Obj(vm),
                None => {
                    c.pos = start;
                    c.value::<Shape<ServerVm>>().ok()?.0
                }
            };
            vms.push(Cow::Borrowed(key), value);
            c.skip_ws();
            match c.byte_at(c.pos) {
                b',' => c.pos += 1,
                b'}' => {
                    c.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    Some(vms.finish())
}

/// The VM fields the fast reader looks for: their place in the derived reader's list
/// (`VM_FIELDS` in the tests), which is also their bit in the record of fields seen.
fn vm_field(key: &[u8]) -> Option<u32> {
    Some(match key {
        b"uuid" => 0,
        b"owner_uuid" => 1,
        b"brand" => 2,
        b"state" => 3,
        b"max_physical_memory" => 4,
        b"quota" => 5,
        b"cpu_cap" => 6,
        b"alias" => 7,
        b"tags" => 8,
        b"internal_metadata" => 9,
        b"docker" => 10,
        _ => return None,
    })
}

/// How a VM value is read: a uuid (36 bytes, then the closing quote), a string without
/// escapes (to its closing quote), or a small whole number.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Uuid,
    Str,
    Num,
}

/// The kind of a known field's value in a plain VM (`None`: the field has no place in one).
fn field_kind(field: u32) -> Option<Kind> {
    match field {
        0 | 1 => Some(Kind::Uuid),
        2 | 3 | 7 => Some(Kind::Str),
        4..=6 => Some(Kind::Num),
        _ => None,
    }
}

/// The shape of the last VM read: the text between one value and the next (`","brand":"`:
/// the end of a value, the key, the start of the next value), field by field.
///
/// The VMs of a body nearly always have the same fields in the same order, written the
/// same way, so the reader first compares the bytes after each value with the separator in
/// that place in the last VM (two 16-byte compares) and then reads the value it leads
/// to; only where they differ does it look for the key's end, match the key, and learn the
/// rest of the shape from this VM. It is only ever a guess: a separator is taken only when
/// the bytes are exactly the same, so what is read does not depend on it.
#[derive(Default)]
pub(super) struct VmShape {
    separators: Vec<Separator>,
}

/// One separator's text (at most [`Separator::MAX`] bytes, padded) with a mask of one bit
/// per byte of it, the field whose value it leads to ([`vm_field`]; `None`: a field the
/// reader steps over), how that value is read, and the known fields read once the shape is
/// read up to and including it. A shape is learned only from fields read once each, so a
/// VM that follows it needs no check for a repeated field until it leaves the shape.
#[derive(Clone, Copy)]
struct Separator {
    text: [u8; Separator::MAX],
    mask: u32,
    len: usize,
    field: Option<u32>,
    kind: Kind,
    seen_through: u16,
}

impl Separator {
    const MAX: usize = 32;

    fn new(text: &[u8], field: Option<u32>, kind: Kind, seen_through: u16) -> Option<Separator> {
        if text.len() > Separator::MAX {
            return None;
        }
        let mut padded = [0u8; Separator::MAX];
        padded[..text.len()].copy_from_slice(text);
        let mask = u32::MAX.checked_shr(32 - text.len() as u32).unwrap_or(0);
        Some(Separator { text: padded, mask, len: text.len(), field, kind, seen_through })
    }

    /// Whether this separator's text is at `at`.
    #[inline(always)]
    fn is_at(&self, bytes: &[u8], at: usize) -> bool {
        match bytes.get(at..at + Separator::MAX).and_then(|w| <&[u8; Separator::MAX]>::try_from(w).ok()) {
            Some(window) => crate::scan::differing_bytes(window, &self.text) & self.mask == 0,
            // The last bytes of the body: read the ordinary way.
            None => false,
        }
    }
}

/// A VM's fields as read so far.
struct Fields<'a> {
    uuid: Option<UuidRef<'a>>,
    owner_uuid: Option<UuidRef<'a>>,
    brand: Option<&'a str>,
    state: Option<&'a str>,
    alias: Option<&'a str>,
    ram: SmallNum,
    quota: SmallNum,
    cap: SmallNum,
    /// The known fields read, by their bit.
    seen: u16,
    /// The VM's key in `server.vms`, when it is a uuid (checked already).
    key: Option<UuidRef<'a>>,
}

impl<'a> Fields<'a> {
    fn new(key: Option<UuidRef<'a>>) -> Fields<'a> {
        Fields {
            key,
            uuid: None,
            owner_uuid: None,
            brand: None,
            state: None,
            alias: None,
            ram: SmallNum::ABSENT,
            quota: SmallNum::ABSENT,
            cap: SmallNum::ABSENT,
            seen: 0,
        }
    }

    /// Reads the value of `field` (or steps over an unknown field's) as `kind`, its text
    /// starting at `at` (a string's after its opening quote): the position after it, or
    /// `None` when it is not a value of that kind. Whether the field was read before is
    /// the caller's to ask ([`Fields::first_time`]).
    #[inline(always)]
    fn read(&mut self, text: &'a str, at: usize, field: Option<u32>, kind: Kind) -> Option<usize> {
        let bytes = text.as_bytes();
        let end = match kind {
            Kind::Uuid => {
                if bytes.get(at + 36) != Some(&b'"') {
                    return None;
                }
                let text = bytes.get(at..at + 36)?;
                match field {
                    Some(0) => self.uuid = Some(UuidRef::from_bytes_like(self.key, text)?),
                    _ => self.owner_uuid = Some(UuidRef::from_bytes(text)?),
                }
                at + 37
            }
            Kind::Str => {
                let end = crate::scan::string_end(bytes, at)?;
                if bytes.get(end) != Some(&b'"') {
                    return None;
                }
                let value = Some(text_between(text, at, end)?);
                match field {
                    Some(2) => self.brand = value,
                    Some(3) => self.state = value,
                    Some(7) => self.alias = value,
                    _ => {}
                }
                end + 1
            }
            Kind::Num => {
                let (n, end) = small_whole_at(bytes, at)?;
                // A known field's number must fit the compact form; another field's
                // is only stepped over.
                match field {
                    Some(4) => self.ram = SmallNum::of_whole(n)?,
                    Some(5) => self.quota = SmallNum::of_whole(n)?,
                    Some(6) => self.cap = SmallNum::of_whole(n)?,
                    _ => {}
                }
                end
            }
        };
        Some(end)
    }

    /// Notes `field` read: `None` when it was read before (serde's error for a repeated
    /// field).
    #[inline(always)]
    fn first_time(&mut self, field: Option<u32>) -> Option<()> {
        if let Some(i) = field {
            if self.seen & (1 << i) != 0 {
                return None;
            }
            self.seen |= 1 << i;
        }
        Some(())
    }
}

/// A plain VM: strings without escapes, small whole numbers, values that pass the
/// checks a [`PlainVm`] stands for. Anything else (including a repeated field, which
/// serde_json reports) gives up, and serde_json reads the VM.
#[inline(never)]
fn read_plain_vm<'a>(c: &mut Cursor<'a>, key: Option<UuidRef<'a>>) -> Option<ServerVm<'a>> {
    let (text, bytes) = (c.text, c.text.as_bytes());
    let mut vm = Fields::new(key);
    // Past the `{` the caller saw; `{}` gives up below (a plain VM has an owner).
    let mut pos = c.pos + 1;
    // The last VM's separators as long as they are there.
    let mut place = 0;
    while let Some(separator) = c.vm_shape.separators.get(place) {
        if !separator.is_at(bytes, pos) {
            break;
        }
        match vm.read(text, pos + separator.len, separator.field, separator.kind) {
            Some(end) => pos = end,
            // A field the reader steps over, holding another kind of value: read below.
            None if separator.field.is_none() => break,
            None => return None,
        }
        place += 1;
    }
    // The fields the shape held, each once.
    vm.seen = place.checked_sub(1).and_then(|last| c.vm_shape.separators.get(last)).map_or(0, |s| s.seen_through);
    // The rest field by field, its shape learned.
    c.vm_shape.separators.truncate(place);
    let mut learning = true;
    c.pos = pos;
    loop {
        let value_end = c.pos;
        c.skip_ws();
        match c.byte_at(c.pos) {
            b'}' => break,
            b',' if place > 0 => c.pos += 1,
            b'"' if place == 0 => {}
            _ => return None,
        }
        c.skip_ws();
        let (key_start, key_end) = c.plain_span()?;
        c.skip_ws();
        if c.byte_at(c.pos) != b':' {
            return None;
        }
        c.pos += 1;
        c.skip_ws();
        let field = vm_field(bytes.get(key_start..key_end)?);
        let value_start = c.pos;
        let kind = match field {
            Some(i) => {
                let kind = field_kind(i)?;
                let quoted = usize::from(kind != Kind::Num);
                if quoted == 1 && c.byte_at(value_start) != b'"' {
                    return None;
                }
                c.pos = vm.read(text, value_start + quoted, field, kind)?;
                vm.first_time(field)?;
                Some(kind)
            }
            None if c.plain_span().is_some() => Some(Kind::Str),
            None if c.small_uint().is_some() => Some(Kind::Num),
            None => {
                c.skip().ok()?;
                None
            }
        };
        if learning {
            learning = match kind {
                Some(kind) => {
                    let quoted = usize::from(kind != Kind::Num);
                    let separator = bytes.get(value_end..value_start + quoted)?;
                    Separator::new(separator, field, kind, vm.seen).map(|s| c.vm_shape.separators.push(s)).is_some()
                }
                None => false,
            };
        }
        place += 1;
    }
    c.pos += 1;
    // Required: owner_uuid, state, max_physical_memory (a missing one is absent, which
    // `PlainVm::new` refuses with the schema).
    PlainVm::new(PlainFields {
        uuid: vm.uuid,
        owner_uuid: vm.owner_uuid?,
        brand: vm.brand,
        state: vm.state?,
        alias: vm.alias,
        max_physical_memory_mib: vm.ram,
        quota_gib: vm.quota,
        cpu_cap_pct: vm.cap,
    })
    .map(ServerVm::Plain)
}

/// The fields [`read_plain_vm`] reads, as the derived reader names them.
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
                        "state": "running", "max_physical_memory": 512, "quota": 10, "alias": "x", "other": [1]},
                        "930896af-bf8c-48d4-885c-6573a94b1853": {"uuid": "930896af-bf8c-48d4-885c-6573a94b1853",
                        "owner_uuid": "930896af-bf8c-48d4-885c-6573a94b1853", "brand": "lx", "state": "running",
                        "max_physical_memory": 512, "quota": 10, "alias": "x", "other": [1]}}"#;
        let m = vms(text);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", OWNER]);
        // A uuid that is not uuid-shaped has no compact form; the VM reads the same.
        assert!(matches!(vm(&m, "a"), ServerVm::Full(_)));
        let v = vm(&m, OWNER);
        assert!(matches!(v, ServerVm::Plain(_)));
        assert_eq!(v.uuid().as_str(), Some(OWNER));
        assert_eq!(v.owner_uuid().as_str(), Some(OWNER));
        assert_eq!(v.brand().as_str(), Some("lx"));
        assert_eq!(v.max_physical_memory_mib().num(), 512.0);
        assert!(v.cpu_cap_pct().is_undefined() && !v.cpu_cap_pct().truthy());
        assert!(v.tags().is_undefined());
        assert_eq!(v.quota_gib().stringify(), "10");
    }

    /// Values a plain VM cannot hold in its compact form (other brands and states, numbers
    /// past 2^32 − 2, −0) keep the whole VM, which reads them exactly.
    #[test]
    fn values_past_the_compact_form_keep_the_whole_vm() {
        let vm_with = |extra: &str| {
            let state = if extra.contains("state") { "" } else { r#", "state": "running""# };
            format!(r#"{{"a": {{"owner_uuid": "{OWNER}", "max_physical_memory": {extra}{state}}}}}"#)
        };
        for (extra, plain) in [
            (r#"5, "brand": "bhyve", "quota": 0, "cpu_cap": 4294967294"#, true),
            (r#"4294967294"#, true),
            (r#"4294967295"#, false),
            (r#"5, "brand": "solaris""#, false),
            (r#"5, "state": "hibernating""#, false),
            (r#"5, "quota": -0"#, false),
            (r#"5, "quota": 4294967295"#, false),
            (r#"5, "cpu_cap": 99999999999"#, false),
            (r#"5, "quota": 0.5"#, false),
        ] {
            let text: &'static str = Box::leak(vm_with(extra).into_boxed_str());
            let m = vms(text);
            let v = vm(&m, "a");
            assert_eq!(matches!(v, ServerVm::Plain(_)), plain, "{text}");
            let full = v.to_full();
            let js: serde_json::Value = serde_json::from_str(text).expect("JSON");
            let a = &js["a"];
            for (field, read) in [
                ("brand", &full.brand),
                ("state", &full.state),
                ("quota", &full.quota_gib),
                ("cpu_cap", &full.cpu_cap_pct),
                ("max_physical_memory", &full.max_physical_memory_mib),
            ] {
                if let Some(sent) = a.get(field) {
                    assert_eq!(read.stringify(), crate::js::Js::from_json(sent).stringify(), "{field} of {text}");
                }
            }
            if let Some(q) = a.get("quota").and_then(serde_json::Value::as_f64) {
                assert_eq!(full.quota_gib.num().to_bits(), q.to_bits(), "{text}");
            }
        }
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
        // Past `INDEXED` entries too, where repeats are looked up in a map.
        for n in [3, 20, 300] {
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
        assert_eq!(crate::wire::serde_fields::<Received>(), VM_FIELDS);
        for (i, field) in VM_FIELDS.iter().enumerate() {
            assert_eq!(vm_field(field.as_bytes()), Some(i as u32));
            assert_eq!(vm_field(&field.as_bytes()[1..]), None);
            assert_eq!(vm_field(format!("{field}_").as_bytes()), None);
        }
    }

    /// The keys of one VM are the guess for the next: VMs whose keys differ from the last
    /// one's in order, in one byte, in length (a prefix, a longer key), with whitespace or
    /// an escape are read as serde_json reads them, whichever VM comes before.
    #[test]
    fn the_last_vms_keys_are_only_a_guess() {
        let vm = |keys: &[&str]| {
            let fields: Vec<String> = keys
                .iter()
                .map(|k| {
                    // Values that fit the field the key is most like, so that a key taken for
                    // another would be read without a complaint.
                    let value = match k.trim().trim_matches('"') {
                        "owner_uuid" | "uuid" => format!("\"{OWNER}\""),
                        n if n.starts_with("max_phys") || n == "quota" || n == "cpu_cap" => "64".into(),
                        n if n.starts_with("stat") => "\"running\"".into(),
                        "brand" => "\"lx\"".into(),
                        _ => "\"x\"".into(),
                    };
                    format!("{k}:{value}")
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        };
        let shapes: Vec<Vec<&str>> = vec![
            vec![r#""uuid""#, r#""owner_uuid""#, r#""state""#, r#""max_physical_memory""#, r#""last_modified""#],
            vec![r#""owner_uuid""#, r#""uuid""#, r#""state""#, r#""max_physical_memory""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""state""#, r#""max_physical_memorz""#, r#""max_physical_memory""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""state""#, r#""max_physical_memorz""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""state""#, r#""max_phys""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""stat""#, r#""state""#, r#""max_physical_memory""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""states""#, r#""state""#, r#""max_physical_memory""#],
            vec![r#" "uuid" "#, r#""owner_uuid" "#, r#""state""#, r#""max_physical_memory""#],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""st\u0061te""#, r#""max_physical_memory""#],
            vec![
                r#""uuid""#,
                r#""owner_uuid""#,
                r#""state""#,
                r#""max_physical_memory""#,
                r#""a_key_longer_than_the_guess_holds""#,
            ],
            vec![r#""uuid""#, r#""owner_uuid""#, r#""state""#, r#""max_physical_memory""#, r#""state""#],
            vec![
                r#""uuid""#,
                r#""owner_uuid""#,
                r#""state""#,
                r#""max_physical_memory""#,
                r#""quota""#,
                r#""cpu_cap""#,
            ],
        ];
        for first in &shapes {
            for second in &shapes {
                for third in &shapes {
                    let text =
                        format!(r#"{{"a":{},"b":{},"c":{},"d":{}}}"#, vm(first), vm(second), vm(third), vm(first));
                    let text: &'static str = Box::leak(text.into_boxed_str());
                    let serde = serde_json::from_str::<Shape<VmMap>>(text);
                    let mut c = Cursor::new(text);
                    match (serde, read_vms(&mut c)) {
                        (Ok(serde), Ok(fast)) => {
                            assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{text}");
                            assert_eq!(c.pos, text.len());
                        }
                        // A repeated field.
                        (Err(serde), Err(fast)) => assert_eq!(fast.to_string(), serde.to_string(), "{text}"),
                        (serde, fast) => panic!("{text}: serde {serde:?}, fast {fast:?}"),
                    }
                }
            }
        }
    }

    /// A VM keyed by a uuid: its `uuid` the same text (taken as checked), another uuid, or
    /// the key's text in another form (not a lower-case uuid) reads as serde reads it.
    #[test]
    fn a_uuid_key_vouches_only_for_the_same_text() {
        const KEY: &str = "6b7a9c3e-8f2d-4e1a-9b5c-0d3e2f1a4b5c";
        let upper = KEY.to_uppercase();
        for uuid in [KEY, OWNER, upper.as_str(), "6b7a9c3e-8f2d-4e1a-9b5c-0d3e2f1a4b5", "x"] {
            let text = format!(
                r#"{{"{KEY}":{{"uuid":"{uuid}","owner_uuid":"{OWNER}","state":"running","max_physical_memory":5}}}}"#
            );
            let text: &'static str = Box::leak(text.into_boxed_str());
            let serde = serde_json::from_str::<Shape<VmMap>>(text).expect("serde reads it");
            let fast = read_vms(&mut Cursor::new(text)).expect("the fast reader reads it");
            assert_eq!(format!("{fast:?}"), format!("{serde:?}"), "{text}");
            let Shape::Obj(map) = fast else { panic!("{text}: not a map") };
            let entry = map.get(KEY).and_then(Shape::as_obj).expect("the VM");
            assert_eq!(matches!(entry, ServerVm::Plain(_)), uuid == KEY || uuid == OWNER, "{text}");
            assert_eq!(entry.uuid().as_str(), Some(uuid));
        }
    }

    #[test]
    fn keys_with_escapes_are_owned() {
        let m = vms(r#"{"a\"b": {}}"#);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a\"b"]);
    }
}
