//! Step reasons: server key (`String(uuid)`), `skip` or `*` → message, with the semantics of
//! the JS object the original built (insertion order; a repeated key keeps its first position
//! and takes the last message).
//!
//! Reasons are set for most servers at most steps, so they are kept cheap: a server's key is
//! its index into the request's [`KeyTable`] (each key string is stored once per request, and
//! servers whose keys are equal share one index), and a score change is kept as two numbers
//! and written out only when the answer is ([`Msg::Score`]).

use std::cell::OnceCell;
use std::collections::HashMap;
use std::sync::Arc;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use super::context::ServerId;
use crate::fxhash::{hash_str, FxBuild};
use crate::js::push_fixed2;
use crate::model::Server;

/// Every server's reason key, once per request.
pub struct KeyTable {
    text: String,
    spans: Vec<(u32, u32)>,
    /// The first server with the same key.
    canonical: Vec<u32>,
    /// Key hash → the first server with a key of that hash.
    by_hash: HashMap<u64, u32, FxBuild>,
}

impl std::fmt::Debug for KeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyTable({} keys)", self.spans.len())
    }
}

impl KeyTable {
    pub fn new(servers: &[Server<'_>]) -> KeyTable {
        // Reading 5000 uuids scattered over memory is most of the cost: each core copies
        // and hashes its part, then the parts are joined.
        let ids: Vec<ServerId> = (0..servers.len()).collect();
        let parts = super::parallel::map_parts(&ids, |part| {
            let mut text = String::with_capacity(part.len() * 37);
            let mut spans = Vec::with_capacity(part.len());
            let mut hashes = Vec::with_capacity(part.len());
            for &id in part {
                let start = text.len();
                match servers[id].uuid.as_str() {
                    Some(s) => text.push_str(s),
                    None => text.push_str(&servers[id].reason_key()),
                }
                hashes.push(hash_str(&text[start..]));
                spans.push((start as u32, (text.len() - start) as u32));
            }
            (text, spans, hashes)
        });
        let mut text = String::with_capacity(parts.iter().map(|p| p.0.len()).sum());
        let mut spans = Vec::with_capacity(servers.len());
        let mut hashes = Vec::with_capacity(servers.len());
        for (part_text, part_spans, part_hashes) in parts {
            let offset = text.len() as u32;
            text.push_str(&part_text);
            spans.extend(part_spans.into_iter().map(|(start, len)| (start + offset, len)));
            hashes.extend(part_hashes);
        }
        let mut table = KeyTable { text, spans, canonical: Vec::new(), by_hash: HashMap::default() };
        table.by_hash.reserve(servers.len());
        let mut canonical = Vec::with_capacity(servers.len());
        for (id, hash) in hashes.into_iter().enumerate() {
            let key = table.key(id);
            let first = match table.by_hash.get(&hash) {
                Some(&first) if table.key(first as usize) == key => first,
                // Another key with the same hash (practically never): compare them all.
                Some(_) => (0..id).find(|&i| table.key(i) == key).unwrap_or(id) as u32,
                None => {
                    table.by_hash.insert(hash, id as u32);
                    id as u32
                }
            };
            canonical.push(first);
        }
        table.canonical = canonical;
        table
    }

    /// `String(uuid)` of server `id`.
    pub fn key(&self, id: ServerId) -> &str {
        let (start, len) = self.spans[id];
        &self.text[start as usize..(start + len) as usize]
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    fn canonical(&self, id: ServerId) -> u32 {
        self.canonical[id]
    }

    /// The (first) server whose key is `text`.
    fn find(&self, text: &str) -> Option<u32> {
        match self.by_hash.get(&hash_str(text)) {
            Some(&first) if self.key(first as usize) == text => Some(first),
            Some(_) => (0..self.len()).find(|&i| self.key(i) == text).map(|i| self.canonical[i]),
            None => None,
        }
    }
}

/// A server's reason key, as `req.key(id)` gives it; reads as the key string.
#[derive(Clone, Copy)]
pub struct ServerKey<'k> {
    keys: &'k Arc<KeyTable>,
    id: ServerId,
}

impl<'k> ServerKey<'k> {
    pub fn new(keys: &'k Arc<KeyTable>, id: ServerId) -> ServerKey<'k> {
        ServerKey { keys, id }
    }

    pub fn as_str(&self) -> &'k str {
        self.keys.key(self.id)
    }
}

impl std::ops::Deref for ServerKey<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for ServerKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for ServerKey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

/// Where a reason goes: a server's key, or any other text (`skip`, `*`).
pub enum ReasonKey<'k> {
    Server(ServerKey<'k>),
    Text(String),
}

impl<'k> From<ServerKey<'k>> for ReasonKey<'k> {
    fn from(k: ServerKey<'k>) -> Self {
        ReasonKey::Server(k)
    }
}

impl From<String> for ReasonKey<'_> {
    fn from(s: String) -> Self {
        ReasonKey::Text(s)
    }
}

impl From<&str> for ReasonKey<'_> {
    fn from(s: &str) -> Self {
        ReasonKey::Text(s.to_string())
    }
}

/// A reason's message.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Text(String),
    Static(&'static str),
    /// `increased score by <delta> to <total>`, both with two decimals.
    Score {
        delta: f64,
        total: f64,
    },
}

impl From<String> for Msg {
    fn from(s: String) -> Msg {
        Msg::Text(s)
    }
}

impl From<&'static str> for Msg {
    fn from(s: &'static str) -> Msg {
        Msg::Static(s)
    }
}

impl Msg {
    pub fn render(&self) -> String {
        match self {
            Msg::Text(s) => s.clone(),
            Msg::Static(s) => (*s).to_string(),
            Msg::Score { delta, total } => {
                let mut out = String::with_capacity(48);
                out.push_str("increased score by ");
                push_fixed2(&mut out, *delta);
                out.push_str(" to ");
                push_fixed2(&mut out, *total);
                out
            }
        }
    }

    /// The message as a JSON string, appended to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_json_using(out, &mut String::new());
    }

    /// [`Msg::write_json`], rendering a score in `buf` (an answer writes thousands of
    /// them: one buffer for all rather than a string each).
    fn write_json_using(&self, out: &mut Vec<u8>, buf: &mut String) {
        match self {
            Msg::Text(s) => write_json_str(out, s),
            Msg::Static(s) => write_json_str(out, s),
            // Digits, signs and dots only: nothing to escape.
            Msg::Score { delta, total } => {
                buf.clear();
                buf.push_str("increased score by ");
                push_fixed2(buf, *delta);
                buf.push_str(" to ");
                push_fixed2(buf, *total);
                out.push(b'"');
                out.extend_from_slice(buf.as_bytes());
                out.push(b'"');
            }
        }
    }
}

/// Whether `s` has a byte JSON escapes (a control character, `"` or `\\`) or 0xF4, which
/// starts the stand-ins of lone surrogates (`js::json`). Eight bytes at a time: answers
/// write every server's uuid many times over.
fn needs_escaping(s: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([1; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether some byte of `w` is zero / below `n` (n <= 0x80): exact as a yes or no.
    let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH != 0;
    let has_below = |w: u64, n: u8| w.wrapping_sub(ONES * u64::from(n)) & !w & HIGH != 0;
    let mut words = s.chunks_exact(8);
    for word in &mut words {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let w = u64::from_ne_bytes(bytes);
        if has_below(w, 0x20)
            || has_zero(w ^ (ONES * u64::from(b'"')))
            || has_zero(w ^ (ONES * u64::from(b'\\')))
            || has_zero(w ^ (ONES * 0xF4))
        {
            return true;
        }
    }
    words.remainder().iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\' || b == 0xF4)
}

/// A JSON string literal for `s`, appended to `out` (serde_json's escaping).
pub fn write_json_str(out: &mut Vec<u8>, s: &str) {
    let plain = !needs_escaping(s.as_bytes());
    if plain {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Only reached for odd strings; serde_json's writer (as JSON.stringify) is the reference.
        let _ = crate::js::json::to_writer(&mut *out, s);
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Key {
    /// A server's canonical index in the key table.
    Server(u32),
    Text(Box<str>),
}

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    msg: Msg,
    /// The message as text, made when first read as a `&str`.
    text: OnceCell<Box<str>>,
}

const NO_SLOT: u32 = u32::MAX;

/// A step's reasons.
#[derive(Clone, Default)]
pub struct Reasons {
    keys: Option<Arc<KeyTable>>,
    entries: Vec<Entry>,
    /// Entry index per canonical server (`NO_SLOT` for none), sized on the first server key.
    slots: Vec<u32>,
    /// Reasons that nobody will read are not kept (see [`Reasons::discarding`]).
    discard: bool,
}

impl Reasons {
    /// Reasons that keep nothing set on them: for a run whose steps nobody reads (placing
    /// VMs one after another), where storing one reason per server and plugin is most of
    /// the cost of the cheap plugins.
    pub fn discarding() -> Reasons {
        Reasons { discard: true, ..Reasons::default() }
    }

    /// Whether reasons set are kept (a caller may then skip making them).
    pub fn keeps(&self) -> bool {
        !self.discard
    }

    /// Sets a reason; a repeated key keeps its first position, as in a JS object.
    pub fn set<'k>(&mut self, key: impl Into<ReasonKey<'k>>, message: impl Into<Msg>) {
        if self.discard {
            return;
        }
        let msg = message.into();
        match key.into() {
            ReasonKey::Server(k) => {
                self.attach(k.keys);
                self.set_server(k.keys.canonical(k.id), msg);
            }
            ReasonKey::Text(text) => {
                if let Some(c) = self.keys.as_ref().and_then(|t| t.find(&text)) {
                    return self.set_server(c, msg);
                }
                match self.entries.iter_mut().find(|e| matches!(&e.key, Key::Text(t) if **t == *text)) {
                    Some(e) => {
                        e.msg = msg;
                        e.text = OnceCell::new();
                    }
                    None => self.entries.push(Entry { key: Key::Text(text.into()), msg, text: OnceCell::new() }),
                }
            }
        }
    }

    fn attach(&mut self, keys: &Arc<KeyTable>) {
        if let Some(own) = &self.keys {
            if Arc::ptr_eq(own, keys) {
                return;
            }
            // Reasons of another request: keep ours as text.
            self.detach();
        }
        self.slots = vec![NO_SLOT; keys.len()];
        // Text keys set before now may be server keys.
        let mut merged: Vec<Entry> = Vec::with_capacity(self.entries.len());
        for e in std::mem::take(&mut self.entries) {
            let c = match &e.key {
                Key::Text(t) => keys.find(t),
                Key::Server(_) => None,
            };
            match c {
                Some(c) if self.slots[c as usize] != NO_SLOT => {
                    merged[self.slots[c as usize] as usize] =
                        Entry { key: Key::Server(c), msg: e.msg, text: OnceCell::new() };
                }
                Some(c) => {
                    self.slots[c as usize] = merged.len() as u32;
                    merged.push(Entry { key: Key::Server(c), msg: e.msg, text: OnceCell::new() });
                }
                None => merged.push(e),
            }
        }
        self.entries = merged;
        self.keys = Some(keys.clone());
    }

    /// Turns server keys into text keys (when mixing reasons of different tables).
    fn detach(&mut self) {
        if let Some(keys) = self.keys.take() {
            for e in &mut self.entries {
                if let Key::Server(c) = e.key {
                    e.key = Key::Text(keys.key(c as usize).into());
                }
            }
        }
        self.slots.clear();
    }

    fn set_server(&mut self, c: u32, msg: Msg) {
        match self.slots[c as usize] {
            NO_SLOT => {
                self.slots[c as usize] = self.entries.len() as u32;
                self.entries.push(Entry { key: Key::Server(c), msg, text: OnceCell::new() });
            }
            i => {
                let e = &mut self.entries[i as usize];
                e.msg = msg;
                e.text = OnceCell::new();
            }
        }
    }

    /// `{"skip": message}`: the plugin did nothing, and says why.
    pub fn skip(&mut self, message: impl Into<Msg>) {
        self.set("skip", message);
    }

    /// `{"*": message}`: a message about the whole step.
    pub fn all(&mut self, message: impl Into<Msg>) {
        self.set("*", message);
    }

    fn find(&self, key: &str) -> Option<&Entry> {
        if let Some(c) = self.keys.as_ref().and_then(|t| t.find(key)) {
            return match self.slots[c as usize] {
                NO_SLOT => None,
                i => Some(&self.entries[i as usize]),
            };
        }
        self.entries.iter().find(|e| matches!(&e.key, Key::Text(t) if &**t == key))
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.find(key).map(Entry::text)
    }

    /// The message under `key`, unrendered.
    pub fn msg(&self, key: &str) -> Option<&Msg> {
        self.find(key).map(|e| &e.msg)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn key_of<'s>(&'s self, e: &'s Entry) -> &'s str {
        match (&e.key, &self.keys) {
            (Key::Server(c), Some(keys)) => keys.key(*c as usize),
            (Key::Text(t), _) => t,
            (Key::Server(_), None) => "",
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|e| (self.key_of(e), e.text()))
    }

    /// The entries with their messages unrendered.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &Msg)> {
        self.entries.iter().map(|e| (self.key_of(e), &e.msg))
    }

    /// Appends `suffix` to every message.
    pub fn append_to_all(&mut self, suffix: &str) {
        for e in &mut self.entries {
            let mut text = e.msg.render();
            text.push_str(suffix);
            e.msg = Msg::Text(text);
            e.text = OnceCell::new();
        }
    }

    /// Merges `other` in, later keys overwriting earlier ones.
    pub fn extend(&mut self, other: &Reasons) {
        if let Some(keys) = &other.keys {
            self.attach(keys);
        }
        for e in &other.entries {
            match e.key {
                Key::Server(c) => self.set_server(c, e.msg.clone()),
                Key::Text(ref t) => self.set(&**t, e.msg.clone()),
            }
        }
    }

    /// The reasons as a JSON object, appended to `out`.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_json_in_parts(out, &mut |_| {});
    }

    /// [`Reasons::write_json`], calling `part_done` every few hundred entries (it may take
    /// what `out` holds so far; see `StepsView::write_json_in_parts`).
    pub fn write_json_in_parts(&self, out: &mut Vec<u8>, part_done: &mut dyn FnMut(&mut Vec<u8>)) {
        let mut buf = String::with_capacity(48);
        out.push(b'{');
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            super::summary::offer_part_before(i, out, part_done);
            write_json_str(out, self.key_of(e));
            out.push(b':');
            e.msg.write_json_using(out, &mut buf);
        }
        out.push(b'}');
    }
}

impl Entry {
    fn text(&self) -> &str {
        self.text.get_or_init(|| self.msg.render().into())
    }
}

impl PartialEq for Reasons {
    fn eq(&self, other: &Reasons) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl std::fmt::Debug for Reasons {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Reasons {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::from_test_json;
    use serde_json::json;

    /// A reason per server and plugin: at 5,000 servers a step's entries take 0.3 MB.
    #[test]
    fn an_entry_takes_fifty_six_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 56);
    }

    fn table(uuids: &[&str]) -> Arc<KeyTable> {
        let servers: Vec<Server> =
            from_test_json(&serde_json::Value::Array(uuids.iter().map(|u| json!({ "uuid": u })).collect()));
        Arc::new(KeyTable::new(&servers))
    }

    #[test]
    fn strings_are_escaped_wherever_the_odd_byte_is() {
        let odd = ['"', '\\', '\n', '\u{1f}', '\u{0}', '\u{7f}', '\u{ff}', 'é', '\u{10ffff}', ' ', '!', '~'];
        for len in 0..20 {
            for at in 0..len.max(1) {
                for &c in &odd {
                    let mut s: String = "0123456789abcdefghij"[..len].to_string();
                    if len > 0 {
                        s.replace_range(at..at + 1, &c.to_string());
                    }
                    let mut out = Vec::new();
                    write_json_str(&mut out, &s);
                    // As one byte at a time decides.
                    let plain = s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\' && b != 0xF4);
                    assert_eq!(!needs_escaping(s.as_bytes()), plain, "{s:?}");
                    let mut expected = Vec::new();
                    crate::js::json::to_writer(&mut expected, &s).expect("json");
                    assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn behaves_like_a_js_object() {
        let keys = table(&["a", "b", "a", "skip"]);
        let mut r = Reasons::default();
        r.skip("first");
        r.set(ServerKey::new(&keys, 1), "b1");
        r.set(ServerKey::new(&keys, 0), "a1");
        // Server 2 has server 0's key: one entry, first position, last message.
        r.set(ServerKey::new(&keys, 2), Msg::Score { delta: 1.5, total: 2.125 });
        r.set(ServerKey::new(&keys, 1), "b2".to_string());
        // A server whose key is "skip" shares the skip entry.
        r.set(ServerKey::new(&keys, 3), "s3");
        r.set("*", "all");
        let got: Vec<(&str, &str)> = r.iter().collect();
        assert_eq!(got, [("skip", "s3"), ("b", "b2"), ("a", "increased score by 1.50 to 2.13"), ("*", "all")]);
        assert_eq!(r.get("a"), Some("increased score by 1.50 to 2.13"));
        assert_eq!(r.get("zzz"), None);
        let mut out = Vec::new();
        r.write_json(&mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            r#"{"skip":"s3","b":"b2","a":"increased score by 1.50 to 2.13","*":"all"}"#
        );
        assert_eq!(serde_json::to_string(&r).ok(), Some(String::from_utf8_lossy(&out).into_owned()));
    }

    #[test]
    fn text_keys_set_before_server_keys_merge_with_them() {
        let keys = table(&["x", "y"]);
        let mut r = Reasons::default();
        r.set("y", "text first");
        r.set(ServerKey::new(&keys, 0), "x");
        r.set(ServerKey::new(&keys, 1), "server later");
        assert_eq!(r.iter().collect::<Vec<_>>(), [("y", "server later"), ("x", "x")]);
        let mut all = Reasons::default();
        all.extend(&r);
        all.append_to_all("!");
        assert_eq!(all.iter().collect::<Vec<_>>(), [("y", "server later!"), ("x", "x!")]);
    }
}
