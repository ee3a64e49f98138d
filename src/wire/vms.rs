//! Reading `server.vms` off the wire: the serde readers (any JSON) and the fast reader for
//! ordinary VMs (strings without escapes, small whole numbers), which gives up on anything
//! else so that serde reads it. Either way a VM that qualifies becomes a compact
//! [`PlainVm`] borrowing from the body, and anything else a [`FullVm`] (`model::vms`).

use std::borrow::Cow;
use std::collections::HashMap;

use serde::de::{value::MapAccessDeserializer, value::SeqAccessDeserializer, Deserialize, Deserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};

use super::cursor::Cursor;
use crate::fxhash::FxBuild;
use crate::js::Js;
use crate::model::{FullVm, PlainFields, PlainVm, ServerVm, Shape, VmEntry, VmMap};

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
        PlainVm::new(PlainFields {
            uuid: self.uuid.opt_str()?,
            owner_uuid: self.owner_uuid.str()?,
            brand: self.brand.opt_str()?,
            state: self.state.str()?,
            alias: self.alias.opt_str()?,
            max_physical_memory_mib: self.max_physical_memory.opt_num()?,
            quota_gib: self.quota.opt_num()?,
            cpu_cap_pct: self.cpu_cap.opt_num()?,
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
            if let Some(entry) = entries.iter_mut().find(|e| e.key() == key) {
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

fn read_vms_fast<'a>(c: &mut Cursor<'a>) -> Option<VmMap<'a>> {
    c.eat(b'{');
    let mut vms = Builder::new(32);
    if !c.eat(b'}') {
        loop {
            let key = c.key()?;
            let start = c.pos;
            let value = match (c.peek() == Some(b'{')).then(|| read_plain_vm(c)).flatten() {
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

/// A plain VM: strings without escapes, small whole numbers, values that pass the
/// checks a [`PlainVm`] stands for. Anything else (including a repeated field, which
/// serde_json reports) gives up, and serde_json reads the VM.
fn read_plain_vm<'a>(c: &mut Cursor<'a>) -> Option<ServerVm<'a>> {
    c.eat(b'{');
    let mut vm = PlainFields {
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
    if seen & 0b1_1010 != 0b1_1010 {
        return None;
    }
    PlainVm::new(vm).map(ServerVm::Plain)
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
        assert_eq!(crate::wire::serde_fields::<Received>(), VM_FIELDS);
    }

    #[test]
    fn keys_with_escapes_are_owned() {
        let m = vms(r#"{"a\"b": {}}"#);
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a\"b"]);
    }
}
