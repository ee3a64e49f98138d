//! The step summary and the answer bodies.
//!
//! Steps keep server ids; uuids are written only when the answer is serialised, and the
//! chosen server is echoed as the caller sent it, without `vms`, plus what the allocation
//! computed for it (`score`, `overprovision_ratios`, `unreserved_*`).

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::Value;

use super::context::{ServerId, ServerState};
use super::reasons::{write_json_str, Reasons};
use crate::js::json::is_written_as_read;
use crate::js::{num_to_json, Js};
use crate::model::Server;

/// One plugin run.
#[derive(Debug, Clone)]
pub struct Step {
    /// The plugin's lookup name (for metrics).
    pub plugin: &'static str,
    /// The step name reported to callers.
    pub name: &'static str,
    pub remaining: Vec<ServerId>,
    pub reasons: Reasons,
    /// How many servers the plugin was given.
    pub received: usize,
    /// Which list the plugin was given: the `remaining` of that earlier step, or (`None`)
    /// every server received.
    pub input: Option<usize>,
    pub elapsed: std::time::Duration,
}

/// How the steps of an answer are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepsFormat {
    /// `{step, remaining: [uuid...], reasons?}`: every step lists the servers left after it
    /// (the original's format, what CNAPI reads).
    #[default]
    Full,
    /// `{step, removed: [uuid...], remaining_count, reasons?}`: every step lists only the
    /// servers it was given and did not pass on, so the summary grows with what was
    /// removed rather than with servers × steps.
    Removed,
    /// `{step, remaining_count}`: how many servers each step left, nothing per server: the
    /// smallest answer, for callers that want the decision (`explain` says why).
    Counts,
}

impl StepsFormat {
    /// `full` or `removed`, as the `steps` query parameter and CLI flag name them.
    pub fn parse(name: &str) -> Option<StepsFormat> {
        match name {
            "full" => Some(StepsFormat::Full),
            "removed" => Some(StepsFormat::Removed),
            "counts" => Some(StepsFormat::Counts),
            _ => None,
        }
    }

    /// The name [`StepsFormat::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            StepsFormat::Full => "full",
            StepsFormat::Removed => "removed",
            StepsFormat::Counts => "counts",
        }
    }
}

/// The step summary as `POST /allocate` answers it: `Received by DAPI` first, then one
/// entry per plugin run.
pub struct StepsView<'a> {
    pub servers: &'a [Server<'a>],
    pub received: usize,
    pub steps: &'a [Step],
    pub format: StepsFormat,
}

impl StepsView<'_> {
    /// The steps as a JSON array, appended to `out` (what serde_json would write).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        self.write_json_in_parts(out, &mut |_| {});
    }

    /// [`StepsView::write_json`], calling `part_done` after each step: it may take what
    /// `out` holds so far (to send it on), so a big answer need not be held whole.
    pub fn write_json_in_parts(&self, out: &mut Vec<u8>, part_done: &mut dyn FnMut(&mut Vec<u8>)) {
        out.push(b'[');
        match self.format {
            StepsFormat::Counts => {
                write_count(out, "Received by DAPI", self.received);
                for step in self.steps {
                    out.push(b',');
                    write_count(out, step.name, step.remaining.len());
                }
            }
            StepsFormat::Full => {
                let uuids = UuidJson::new(self.servers);
                write_step_head(out, "Received by DAPI", "remaining");
                uuids.write_list(out, 0..self.received, part_done);
                out.push(b'}');
                for step in self.steps {
                    out.push(b',');
                    write_step_head(out, step.name, "remaining");
                    uuids.write_list(out, step.remaining.iter().copied(), part_done);
                    write_reasons(out, &step.reasons, part_done);
                    part_done(out);
                }
            }
            StepsFormat::Removed => {
                let uuids = UuidJson::new(self.servers);
                write_step_head(out, "Received by DAPI", "removed");
                out.extend_from_slice(b"[],\"remaining_count\":");
                out.extend_from_slice(self.received.to_string().as_bytes());
                out.push(b'}');
                // `seen[id] == mark` when `id` is in the current step's remaining list.
                let mut seen = vec![0u32; self.servers.len()];
                for (i, step) in self.steps.iter().enumerate() {
                    let mark = i as u32 + 1;
                    for &id in &step.remaining {
                        seen[id] = mark;
                    }
                    let removed =
                        |ids: &[ServerId]| ids.iter().copied().filter(|&id| seen[id] != mark).collect::<Vec<_>>();
                    let removed = match step.input {
                        Some(k) => removed(&self.steps[k].remaining),
                        None => (0..self.received).filter(|&id| seen[id] != mark).collect(),
                    };
                    out.push(b',');
                    write_step_head(out, step.name, "removed");
                    uuids.write_list(out, removed.into_iter(), part_done);
                    out.extend_from_slice(b",\"remaining_count\":");
                    out.extend_from_slice(step.remaining.len().to_string().as_bytes());
                    write_reasons(out, &step.reasons, part_done);
                    part_done(out);
                }
            }
        }
        out.push(b']');
    }
}

/// `{"step":<name>,"remaining_count":<n>}`
fn write_count(out: &mut Vec<u8>, name: &str, count: usize) {
    out.extend_from_slice(b"{\"step\":");
    write_json_str(out, name);
    out.extend_from_slice(b",\"remaining_count\":");
    crate::js::write_uint_json(out, count as u64);
    out.push(b'}');
}

/// `{"step":<name>,"<list>":`
fn write_step_head(out: &mut Vec<u8>, name: &str, list: &str) {
    out.extend_from_slice(b"{\"step\":");
    write_json_str(out, name);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(list.as_bytes());
    out.extend_from_slice(b"\":");
}

/// `,"reasons":{...}}` when there are any, then the closing brace.
fn write_reasons(out: &mut Vec<u8>, reasons: &Reasons, part_done: &mut dyn FnMut(&mut Vec<u8>)) {
    if !reasons.is_empty() {
        out.extend_from_slice(b",\"reasons\":");
        reasons.write_json_in_parts(out, part_done);
    }
    out.push(b'}');
}

/// How many list entries or reasons are written between two calls of `part_done` within a
/// step (a few tens of KB): a step at datacenter scale runs to hundreds of KB, and parts
/// that stay near their intended size keep a streamed answer's memory at a few parts.
const ENTRIES_PER_PART_CHECK: usize = 512;

/// Offers what `out` holds to `part_done` before the `i`th entry of a list, every
/// [`ENTRIES_PER_PART_CHECK`] entries.
pub(super) fn offer_part_before(i: usize, out: &mut Vec<u8>, part_done: &mut dyn FnMut(&mut Vec<u8>)) {
    if part_due_before(i) {
        part_done(out);
    }
}

/// Whether a part is offered before the `i`th entry of a list.
fn part_due_before(i: usize) -> bool {
    i > 0 && i.is_multiple_of(ENTRIES_PER_PART_CHECK)
}

/// Every server's uuid as JSON (`null` for a server without one), each followed by a
/// comma, written once per answer and copied into each list. Lists mostly keep the servers
/// in the order received (a step removes a few), so consecutive servers are copied as one
/// run: a 5,000-server answer holds about forty lists of up to 5,000 uuids (8 MB), and
/// copying them one uuid at a time was 7% of the CPU of a `POST /allocate`.
struct UuidJson {
    bytes: Vec<u8>,
    /// Where each server's uuid starts, and (last) where the bytes end.
    starts: Vec<usize>,
}

impl UuidJson {
    fn new(servers: &[Server<'_>]) -> UuidJson {
        let mut bytes = Vec::with_capacity(servers.len() * 40);
        let mut starts = Vec::with_capacity(servers.len() + 1);
        for server in servers {
            starts.push(bytes.len());
            match &server.uuid {
                Js::Str(s) => write_json_str(&mut bytes, s),
                Js::Undefined => bytes.extend_from_slice(b"null"),
                other => {
                    let _ = crate::js::json::to_writer(&mut bytes, other);
                }
            }
            bytes.push(b',');
        }
        starts.push(bytes.len());
        UuidJson { bytes, starts }
    }

    /// The uuids of servers `first..end`, each followed by a comma.
    fn run(&self, first: ServerId, end: ServerId) -> &[u8] {
        &self.bytes[self.starts[first]..self.starts[end]]
    }

    fn write_list(
        &self,
        out: &mut Vec<u8>,
        ids: impl Iterator<Item = ServerId>,
        part_done: &mut dyn FnMut(&mut Vec<u8>),
    ) {
        out.push(b'[');
        // The run of consecutive servers not yet written: `first..end`.
        let (mut first, mut end) = (0, 0);
        for (i, id) in ids.enumerate() {
            let part_due = part_due_before(i);
            if id != end || part_due {
                out.extend_from_slice(self.run(first, end));
                offer_part_before(i, out, part_done);
                first = id;
            }
            end = id + 1;
        }
        out.extend_from_slice(self.run(first, end));
        // The last uuid's comma: the last run is empty only when the list is.
        if end > first {
            out.pop();
        }
        out.push(b']');
    }
}

/// [`chosen_server_json`] written into `out`. The caller's text of a field is copied where
/// writing its value back would give the same bytes (nearly all of a server, checked by
/// [`is_written_as_read`]); only the other fields are read and written again. Reading the
/// whole server into a value took some 160 allocations per answer, a tenth of those of a
/// 50-server request.
pub fn write_chosen_server(
    out: &mut Vec<u8>,
    raw: &str,
    server: &Server,
    state: &ServerState,
) -> serde_json::Result<()> {
    let start = out.len();
    if write_chosen_server_copying(out, raw, server, state).is_none() {
        out.truncate(start);
        crate::js::json::to_writer(&mut *out, &chosen_server_json(raw, server, state))?;
    }
    Ok(())
}

/// What the allocation adds to the chosen server, in the order the original set the fields
/// (a field the server has keeps its place; the others are appended in this order).
fn additions(server: &Server, state: &ServerState) -> [(&'static str, Option<Value>); 7] {
    let sum = |base: &Js, added: f64| (added != 0.0).then(|| num_to_json(base.num() + added));
    [
        ("score", Some(num_to_json(state.score))),
        ("overprovision_ratios", state.ratios.as_ref().map(|r| r.to_json())),
        ("disk_zone_quota_bytes", sum(&server.disk_zone_quota_bytes, state.zone_quota_added_bytes)),
        ("disk_kvm_zvol_volsize_bytes", sum(&server.disk_kvm_zvol_volsize_bytes, state.kvm_zvol_added_bytes)),
        ("unreserved_cpu", state.unreserved.map(|u| num_to_json(u.cpu_pct))),
        ("unreserved_ram", state.unreserved.map(|u| num_to_json(u.ram_mib))),
        ("unreserved_disk", state.unreserved.map(|u| num_to_json(u.disk_mib))),
    ]
}

/// The fields of a JSON object in order, a repeated key in its first place with its last
/// value (as the value's map keeps them); `None` for anything else, or a key with escapes.
/// The text is a server's, or a part of one, as the body's reader read it: only its
/// structure is followed here (serde_json's reading of it again, its `vms` and all, was
/// 2% of the service's CPU under a 50-server load).
fn object_fields(raw: &str) -> Option<IndexMap<&str, &str>> {
    let b = raw.as_bytes();
    if b.first() != Some(&b'{') {
        return None;
    }
    let space = |mut at: usize| {
        while matches!(b.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            at += 1;
        }
        at
    };
    let mut fields = IndexMap::new();
    let mut at = space(1);
    if b.get(at) == Some(&b'}') {
        return (space(at + 1) == b.len()).then_some(fields);
    }
    loop {
        if b.get(at) != Some(&b'"') {
            return None;
        }
        // A key with an escape (or a control character) is not taken as it is written.
        let key_end = crate::scan::string_end(b, at + 1)?;
        let key = raw.get(at + 1..key_end).filter(|_| b[key_end] == b'"')?;
        at = space(key_end + 1);
        if b.get(at) != Some(&b':') {
            return None;
        }
        let start = space(at + 1);
        let end = crate::scan::json_value_end(b, start)?;
        fields.insert(key, raw.get(start..end)?);
        at = space(end);
        match b.get(at) {
            Some(b',') => at = space(at + 1),
            Some(b'}') => return (space(at + 1) == b.len()).then_some(fields),
            _ => return None,
        }
    }
}

/// [`write_chosen_server`] without reading the server into a value; `None` (part written)
/// where the server's text is not plain enough, which the value then writes.
fn write_chosen_server_copying(out: &mut Vec<u8>, raw: &str, server: &Server, state: &ServerState) -> Option<()> {
    let fields = object_fields(raw)?;
    let mut additions = additions(server, state);
    out.push(b'{');
    let mut first = true;
    for (&key, value) in &fields {
        if key == "vms" {
            continue;
        }
        write_key(out, &mut first, key)?;
        match additions.iter_mut().find(|(name, added)| *name == key && added.is_some()) {
            Some((_, added)) => write_value(out, &added.take()?),
            None if key == "sysinfo" && state.nics_named => write_named_sysinfo(out, value)?,
            None => write_raw(out, value),
        }
    }
    for (key, added) in additions {
        if let Some(added) = added {
            write_key(out, &mut first, key)?;
            write_value(out, &added);
        }
    }
    out.push(b'}');
    Some(())
}

/// `sysinfo` with each NIC named (as [`name_nics`] names them).
fn write_named_sysinfo(out: &mut Vec<u8>, raw: &str) -> Option<()> {
    if !raw.starts_with('{') {
        write_raw(out, raw);
        return Some(());
    }
    let fields = object_fields(raw)?;
    out.push(b'{');
    let mut first = true;
    for (&key, value) in &fields {
        write_key(out, &mut first, key)?;
        match key {
            "Network Interfaces" | "Virtual Network Interfaces" if value.starts_with('{') => {
                write_named_nics(out, value)?
            }
            _ => write_raw(out, value),
        }
    }
    out.push(b'}');
    Some(())
}

/// A map of NICs, each that is an object with its name as `interface` (in its place if it
/// has one, last otherwise).
fn write_named_nics(out: &mut Vec<u8>, raw: &str) -> Option<()> {
    let nics = object_fields(raw)?;
    out.push(b'{');
    let mut first = true;
    for (&name, nic) in &nics {
        write_key(out, &mut first, name)?;
        if !nic.starts_with('{') {
            write_raw(out, nic);
            continue;
        }
        let fields = object_fields(nic)?;
        out.push(b'{');
        let mut first_field = true;
        for (&key, value) in &fields {
            write_key(out, &mut first_field, key)?;
            if key == "interface" {
                write_json_str(out, name);
            } else {
                write_raw(out, value);
            }
        }
        if !fields.contains_key("interface") {
            write_key(out, &mut first_field, "interface")?;
            write_json_str(out, name);
        }
        out.push(b'}');
    }
    out.push(b'}');
    Some(())
}

/// A field's key (after a comma unless it is the first); `None` for a key the value would
/// write otherwise (see [`is_written_as_read`]).
fn write_key(out: &mut Vec<u8>, first: &mut bool, key: &str) -> Option<()> {
    if key.bytes().any(|b| b < 0x20 || b == 0xF4) {
        return None;
    }
    if !std::mem::take(first) {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
    Some(())
}

/// A field's value as the caller wrote it, or as read and written again where that differs.
fn write_raw(out: &mut Vec<u8>, raw: &str) {
    if is_written_as_read(raw) {
        out.extend_from_slice(raw.as_bytes());
    } else {
        write_value(out, &crate::js::json::from_str(raw).unwrap_or(Value::Null));
    }
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    // Writing a value into memory cannot fail.
    let _ = crate::js::json::to_writer(&mut *out, value);
}

/// The chosen server as the caller sent it, without `vms`, with the allocation's
/// additions written over or appended in the order the original set them.
pub fn chosen_server_json(raw: &str, server: &Server, state: &ServerState) -> Value {
    // Fields are read one by one so that the VMs, dropped anyway, are only skipped over.
    let mut value = match crate::js::json::from_str::<IndexMap<String, &RawValue>>(raw) {
        Ok(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| {
                    let v = if k == "vms" {
                        Value::Null
                    } else {
                        crate::js::json::from_str(v.get()).unwrap_or(Value::Null)
                    };
                    (k, v)
                })
                .collect(),
        ),
        Err(_) => crate::js::json::from_str(raw).unwrap_or(Value::Null),
    };
    let Some(obj) = value.as_object_mut() else { return value };
    if state.nics_named {
        name_nics(obj);
    }
    obj.shift_remove("vms");
    for (key, added) in additions(server, state) {
        if let Some(added) = added {
            obj.insert(key.into(), added);
        }
    }
    value
}

/// Writes each sysinfo NIC's name into it as `interface` (physical, then virtual NICs), as
/// the original's NIC tag filter did to the servers it indexed: an existing `interface` is
/// overwritten in place, NICs that are not objects are left alone.
fn name_nics(server: &mut serde_json::Map<String, Value>) {
    let Some(Value::Object(sysinfo)) = server.get_mut("sysinfo") else { return };
    for map in ["Network Interfaces", "Virtual Network Interfaces"] {
        let Some(Value::Object(nics)) = sysinfo.get_mut(map) else { continue };
        for (name, nic) in nics.iter_mut() {
            if let Value::Object(nic) = nic {
                nic.insert("interface".into(), Value::String(name.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::context::Unreserved;
    use std::sync::Arc;

    /// A step over `n` servers, each with a reason of its own.
    fn big_step(n: usize) -> Step {
        let mut reasons = Reasons::default();
        for i in 0..n {
            reasons.set(format!("server-{i}").as_str(), format!("server {i} was kept for a reason long enough"));
        }
        Step {
            plugin: "test",
            name: "a step over every server",
            remaining: (0..n).collect(),
            reasons,
            received: n,
            input: None,
            elapsed: std::time::Duration::ZERO,
        }
    }

    /// serde_json's reading of an object's fields, which [`object_fields`] stands for.
    fn serde_fields(raw: &str) -> Option<Vec<(&str, &str)>> {
        let fields = serde_json::from_str::<IndexMap<&str, &RawValue>>(raw).ok().filter(|_| raw.starts_with('{'))?;
        Some(fields.into_iter().map(|(key, value)| (key, value.get())).collect())
    }

    /// `raw`'s fields found as serde_json finds them, and those of every object inside it;
    /// how many objects were compared.
    fn fields_as_serde_reads_them(raw: &str) -> usize {
        let ours = object_fields(raw).map(|fields| fields.into_iter().collect::<Vec<_>>());
        assert_eq!(ours, serde_fields(raw), "{raw}");
        let inner: Vec<&str> = match serde_json::from_str::<Vec<&RawValue>>(raw) {
            Ok(items) => items.into_iter().map(RawValue::get).collect(),
            Err(_) => ours.into_iter().flatten().map(|(_, value)| value).collect(),
        };
        1 + inner.into_iter().filter(|v| v.starts_with(['{', '['])).map(fields_as_serde_reads_them).sum::<usize>()
    }

    #[test]
    fn object_fields_are_found_where_serde_json_finds_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
        let mut compared = 0;
        for entry in std::fs::read_dir(dir).expect("the vendored cases").flatten() {
            let text = std::fs::read_to_string(entry.path()).expect("a case");
            let case: IndexMap<&str, &RawValue> = serde_json::from_str(&text).expect("a case");
            let request: IndexMap<&str, &RawValue> = serde_json::from_str(case["request"].get()).expect("a request");
            let Some(servers) = request.get("servers") else { continue };
            for server in serde_json::from_str::<Vec<&RawValue>>(servers.get()).unwrap_or_default() {
                compared += fields_as_serde_reads_them(server.get());
                // The same server spread over lines, as a pretty-printing caller sends it.
                let value: Value = serde_json::from_str(server.get()).expect("a server");
                compared += fields_as_serde_reads_them(&serde_json::to_string_pretty(&value).expect("JSON"));
            }
        }
        assert!(compared > 1000, "{compared} objects compared");
        let odd = [
            r#"{}"#,
            r#"{ }"#,
            "{\n\t\"a\" :\r 1 ,\"b\":[ 1 , {\"c\":\"}\"} ] }\n",
            r#"{"a":1,"a":2,"b":3,"a":4}"#,
            r#"{"a":"x\"}","b":"\\","c":"\u0041\\\"","d":-1.5e-3,"e":true,"f":null,"g":false}"#,
            r#"{"a\u0041":1}"#,
            r#"{"a\"b":1}"#,
            "{\"a\u{1}\":1}",
            r#"{"é":{"ü":[[],{},"]"]}}"#,
            r#"{"a":1}x"#,
            r#"{"a":1} "#,
            r#"[{"a":1}]"#,
            r#"{"a":{"b":{"c":{"d":[1,[2,[3,{"e":"{["}]]]}}}}"#,
            r#" {"a":1}"#,
            r#""{}""#,
        ];
        for raw in odd {
            fields_as_serde_reads_them(raw);
        }
    }

    /// The chosen server written by copying its plain fields is the value's writing, byte
    /// for byte, whatever the server's text and whatever the allocation added.
    #[test]
    fn the_chosen_server_copied_is_the_chosen_server_written() {
        let sysinfo = r#"{"Live Image":"20220407T001427Z","CPU Total Cores":48,"Network Interfaces":{"ixgbe0":{"MAC Address":"69:56","Link Status":"up","NIC Names":["admin"]},"ixgbe1":{"interface":"old","NIC Names":["external","internal"]},"odd":5},"Virtual Network Interfaces":{"v0":{"Overlay Nic Tags":["sdc_overlay"]}}}"#;
        let plain = format!(
            r#"{{"uuid":"1d20762f-b907-4af7-a5f3-957e484b1a15","reservation_ratio":0.15,"traits":{{}},"ram":262144,"disk_zone_quota_bytes":2040109465600,"vms":{{"a":{{"uuid":"a"}}}},"sysinfo":{sysinfo},"next_reboot":null,"headnode":true}}"#
        );
        let servers = [
            plain.clone(),
            // Spaces, escapes, numbers serde_json writes its own way, repeated keys (at the
            // top, in sysinfo, in a NIC and deeper), keys an addition replaces in place.
            plain.replace(r#""ram":262144"#, r#""ram" : 262144.0 , "score":7"#),
            plain.replace(r#""traits":{}"#, r#""traits":{"a":1,"a":2},"traits":{"b":"\u0041\/"}"#),
            plain
                .replace(r#""headnode":true"#, r#""headnode":-0,"x":1e3,"y":-12,"z":123456789012345678901,"w":[1, 2]"#),
            plain.replace(r#""CPU Total Cores":48"#, r#""CPU Total Cores":48,"CPU Total Cores":[1,{"k":"\ud800"}]"#),
            plain.replace(
                r#""Link Status":"up""#,
                r#""Link Status":"up","Link Status":"down","interface":"x","interface":"y""#,
            ),
            plain.replace(r#""NIC Names":["admin"]"#, r#""NIC Names":{"q":1,"q":2}"#),
            plain.replace(r#""ixgbe0""#, r#""ixgbe\u0030""#),
            plain.replace(
                r#""Virtual Network Interfaces":{"#,
                r#""Virtual Network Interfaces":[],"Virtual Network Interfaces":{"#,
            ),
            plain.replace(sysinfo, r#"[1,2]"#),
            plain.replace(sysinfo, r#"{"Network Interfaces":"none"}"#),
            plain.replace(r#""uuid""#, r#""\u0075uid""#),
            plain.replace("Live Image", "Live\u{10F800}Image"),
            plain.replace("20220407T001427Z", "\u{10F801}"),
            plain.replace(r#""ram":262144,"#, ""),
            r#"{"vms":{}}"#.to_string(),
            r#"{}"#.to_string(),
        ];
        let ratios =
            Some(Arc::new(Js::obj([("cpu".into(), Js::Num(4.0)), ("ram".into(), Js::Num(1.5))].into_iter().collect())));
        let unreserved = Some(Unreserved { cpu_pct: 2400.5, ram_mib: 1e21, disk_mib: -0.0 });
        let states = [
            ServerState::default(),
            ServerState { score: 1.25, ratios: ratios.clone(), unreserved, nics_named: true, ..Default::default() },
            ServerState {
                score: f64::NAN,
                ratios,
                unreserved,
                zone_quota_added_bytes: 1024.0,
                kvm_zvol_added_bytes: 0.5,
                nics_named: true,
                ..Default::default()
            },
        ];
        let mut server = Server::default();
        server.disk_zone_quota_bytes = Js::Num(100.0);
        let mut copied = 0;
        for raw in &servers {
            for state in &states {
                let expected = crate::js::json::to_vec(&chosen_server_json(raw, &server, state)).expect("JSON");
                let mut out = b"[".to_vec();
                write_chosen_server(&mut out, raw, &server, state).expect("JSON");
                assert_eq!(String::from_utf8_lossy(&out[1..]), String::from_utf8_lossy(&expected), "{raw}");
                copied += usize::from(write_chosen_server_copying(&mut Vec::new(), raw, &server, state).is_some());
            }
        }
        // The plain server and most of the odd ones are copied, not read into a value.
        assert!(write_chosen_server_copying(&mut Vec::new(), &plain, &server, &states[1]).is_some());
        assert!(copied >= 30, "{copied} copied");
    }

    /// Random JSON text: keys and values from small sets (so that keys repeat), with and
    /// without spaces, escapes and numbers serde_json writes its own way.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop::sample::select(vec![
            "1",
            "-7",
            "0",
            "-0",
            "1.5",
            "1e2",
            "12345678901234567890",
            "true",
            "null",
            r#""a""#,
            r#""b c""#,
            r#""\u0041""#,
            r#""\/""#,
            r#""\ud800""#,
            "\"\u{10F800}\"",
            r#""é""#,
            "[]",
            "{}",
            "[1, 2]",
        ])
        .prop_map(String::from);
        leaf.prop_recursive(3, 24, 4, |inner| {
            let key = prop::sample::select(vec![
                "a",
                "b",
                "interface",
                "vms",
                "score",
                "sysinfo",
                "Network Interfaces",
                "ixgbe0",
                "e\\u0031",
            ]);
            let space = prop::sample::select(vec!["", " "]);
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec((key, space, inner), 0..5).prop_map(|members| {
                    let members: Vec<String> = members.iter().map(|(k, s, v)| format!(r#""{k}"{s}:{v}"#)).collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// Whatever the server's text, the copied chosen server is the value's writing.
        #[test]
        fn any_chosen_server_copied_is_the_chosen_server_written(
            top in json_text(),
            sysinfo in json_text(),
            nics in json_text(),
            named in proptest::bool::ANY,
        ) {
            let raw = match top.strip_prefix('{').and_then(|rest| rest.strip_suffix('}')) {
                Some(members) => {
                    let sysinfo = format!(r#"{{"Network Interfaces":{nics},"x":{sysinfo}}}"#);
                    let comma = if members.is_empty() { "" } else { "," };
                    format!(r#"{{"sysinfo":{sysinfo},"disk_zone_quota_bytes":5{comma}{members}}}"#)
                }
                None => top,
            };
            proptest::prop_assert!(crate::js::json::from_str::<Value>(&raw).is_ok(), "{}", raw);
            let state = ServerState { score: 2.5, nics_named: named, zone_quota_added_bytes: 3.0, ..Default::default() };
            let server = Server::default();
            let expected = crate::js::json::to_vec(&chosen_server_json(&raw, &server, &state)).expect("JSON");
            let mut out = Vec::new();
            write_chosen_server(&mut out, &raw, &server, &state).expect("JSON");
            proptest::prop_assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected), "{}", raw);
        }
    }

    #[test]
    fn a_list_copied_in_runs_is_the_list_written_one_uuid_at_a_time() {
        let servers: Vec<Server> = (0..1500)
            .map(|i| {
                let mut server = Server::default();
                server.uuid = match i % 7 {
                    3 => Js::Undefined,
                    5 => Js::Num(f64::from(i)),
                    _ => Js::Str(format!("{i:08}-0000-4000-8000-000000000000").into()),
                };
                server
            })
            .collect();
        let uuids = UuidJson::new(&servers);
        let one = |id: usize| match &servers[id].uuid {
            Js::Undefined => "null".to_string(),
            other => {
                let mut text = Vec::new();
                crate::js::json::to_writer(&mut text, other).expect("JSON");
                String::from_utf8(text).expect("UTF-8")
            }
        };
        let lists: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1499],
            (0..1500).collect(),
            (3..1200).filter(|i| i % 97 != 0).collect(),
            (0..1500).rev().collect(),
            vec![5, 6, 7, 2, 3, 9, 9, 10],
        ];
        for ids in lists {
            let expected = format!("[{}]", ids.iter().map(|&id| one(id)).collect::<Vec<_>>().join(","));
            let (mut out, mut sent) = (Vec::new(), Vec::new());
            uuids.write_list(&mut out, ids.iter().copied(), &mut |out: &mut Vec<u8>| sent.append(out));
            sent.append(&mut out);
            assert_eq!(String::from_utf8_lossy(&sent), expected, "{ids:?}");
        }
    }

    #[test]
    fn parts_are_offered_within_a_step_so_none_outgrows_its_size() {
        let servers: Vec<Server> = (0..5000)
            .map(|i| {
                let mut server = Server::default();
                server.uuid = Js::Str(format!("{i:08}-0000-4000-8000-000000000000").into());
                server
            })
            .collect();
        let steps = [big_step(servers.len()), big_step(servers.len())];
        for format in [StepsFormat::Full, StepsFormat::Removed] {
            let view = StepsView { servers: &servers, received: servers.len(), steps: &steps, format };
            let mut whole = Vec::new();
            view.write_json(&mut whole);
            let (part_bytes, mut largest, mut sent) = (64 * 1024, 0, Vec::new());
            let mut out = Vec::new();
            view.write_json_in_parts(&mut out, &mut |out| {
                largest = largest.max(out.len());
                if out.len() >= part_bytes {
                    sent.append(out);
                }
            });
            sent.append(&mut out);
            assert!(sent == whole, "{format:?}: the parts differ from the whole");
            // Each step alone is hundreds of KB; an offer comes every 512 entries.
            assert!(whole.len() > 8 * part_bytes, "{}", whole.len());
            assert!(largest < part_bytes + 48 * 1024, "{format:?}: a part grew to {largest} bytes");
        }
    }
}
