//! Recording of `/allocate` requests (`record.dir`), for `dapi replay` ([`crate::replay`]).
//!
//! After an allocation's answer has left, the service offers a [`Record`] (the body, the
//! decision, a digest of the answer) to the [`Recorder`]: it goes on a bounded queue to one
//! writer thread or, when the queue is full, is dropped and counted. Recording therefore
//! never delays, fails or slows down a request; under a burst it loses records instead.
//! The writer keeps the directory within `record.max_count` records and `record.max_bytes`
//! bytes, removing the oldest first.
//!
//! The directory holds `NNNNNNNNNNNN.json`, one record per request numbered in the order
//! written (a partial file is never seen under that name: it is written aside and renamed),
//! and `configs/<digest>.json`, the chain and defaults each record was decided with, so
//! that a replay can decide it again with the old config and say where the new one departs.
//!
//! An inventory-mode allocation's body has no `servers`: its record is made whole, as a
//! stateless request deciding the same, by the writer (off the request's path): `servers`
//! holds the inventory's servers as the decision read them (shared with the inventory, not
//! copied, while queued), and `tickets` the body's own followed by the claims the decision
//! counted. Such a record is as big as a stateless request on that datacenter.

use std::collections::VecDeque;
use std::io::Write as _;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::config::{ConfigError, RecordConfig, ServiceConfig};
use crate::outcome::Verdict;

/// Records waiting for the writer, at most (a burst past it is dropped).
const QUEUE_RECORDS: usize = 256;
/// Bytes of bodies waiting for the writer, at most: big bodies would otherwise hold
/// `QUEUE_RECORDS` times the body limit in memory.
const QUEUE_BYTES: usize = 64 << 20;

/// What a record says was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The chosen server's uuid.
    Server(String),
    /// No server fits: CNAPI's reason (the 409 message's).
    NoFit(String),
    /// A batch: how many VMs were placed and not, and the answer's status.
    Batch { placed: usize, failed: usize, status: u16 },
}

impl From<&Verdict> for Decision {
    fn from(verdict: &Verdict) -> Decision {
        match verdict {
            Verdict::Chosen { uuid } => Decision::Server(uuid.clone()),
            Verdict::NoFit { reason } => Decision::NoFit(reason.clone()),
            Verdict::Batch { placed, failed, status } => {
                Decision::Batch { placed: *placed, failed: *failed, status: *status }
            }
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Server(uuid) => write!(f, "server {uuid}"),
            Decision::NoFit(reason) => write!(f, "no fit: {reason}"),
            Decision::Batch { placed, failed, status } => write!(f, "batch: {placed} placed, {failed} not ({status})"),
        }
    }
}

/// How the answer was asked for, so that a replay writes the same answer (and digest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerAsked {
    /// `full` or `removed`; absent for a batch that did not say (its default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<String>,
    /// The servers an explanation was asked about (`[]`: all); absent: not explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Vec<String>>,
}

/// One server's JSON, `text[range]`, in a text shared with its holder.
#[derive(Debug, Clone)]
pub struct SharedText {
    pub text: Arc<String>,
    pub range: Range<usize>,
}

impl SharedText {
    pub fn get(&self) -> &str {
        self.text.get(self.range.clone()).unwrap_or("null")
    }
}

/// What an allocation was decided on beyond its body (inventory mode): put into the body
/// when the record is written.
#[derive(Debug, Clone, Default)]
pub struct DecidedOn {
    pub servers: Vec<SharedText>,
    /// The claims counted, as CNAPI tickets, after the body's own.
    pub tickets: Vec<serde_json::Value>,
}

impl DecidedOn {
    fn bytes(&self) -> usize {
        self.servers.iter().map(|s| s.range.len() + 1).sum::<usize>() + self.tickets.len() * 512
    }
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Record {
    pub request_id: String,
    /// The digest of the config that decided (see `configs/`).
    pub config: String,
    /// The seed `score-uniform-random` drew from, so that a replay draws the same.
    pub seed: Option<u64>,
    pub asked: AnswerAsked,
    pub decision: Decision,
    pub status: u16,
    pub answer_digest: String,
    /// The request body (decompressed), JSON.
    pub body: Vec<u8>,
    /// Inventory mode: the servers and claims, which the body does not hold.
    pub decided_on: Option<DecidedOn>,
}

impl Record {
    /// Bytes it holds while queued, about.
    fn size(&self) -> usize {
        self.body.len() + self.decided_on.as_ref().map_or(0, DecidedOn::bytes)
    }
}

/// A record file's members but the body (read back with [`read_record`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordHead {
    pub request_id: String,
    pub recorded_at: String,
    pub config: String,
    #[serde(default)]
    pub seed: Option<u64>,
    #[serde(default)]
    pub asked: AnswerAsked,
    pub decision: Decision,
    pub status: u16,
    pub answer_digest: String,
}

/// A record file read back.
#[derive(Debug, Deserialize)]
pub struct RecordFile {
    #[serde(flatten)]
    pub head: RecordHead,
    pub body: Box<RawValue>,
}

/// Reads one record file.
pub fn read_record(path: &Path) -> Result<RecordFile, String> {
    let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_slice(&text).map_err(|e| format!("{} is not a dapi record: {e}", path.display()))
}

/// The record files of `dir`, oldest first, with their numbers and sizes.
pub fn record_files(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf, u64)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(record_number) else { continue };
        let size = entry.metadata().map_or(0, |m| m.len());
        files.push((number, entry.path(), size));
    }
    files.sort_by_key(|(n, _, _)| *n);
    Ok(files)
}

/// `000000000042.json` → 42.
fn record_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 12 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// Where the config of digest `digest` is kept in a record directory.
pub fn config_path(dir: &Path, digest: &str) -> PathBuf {
    dir.join("configs").join(format!("{digest}.json"))
}

/// What the writer was asked to do, counted for `/metrics`.
#[derive(Debug, Default)]
pub struct RecordStats {
    written: AtomicU64,
    dropped_full: AtomicU64,
    failed: AtomicU64,
    removed: AtomicU64,
    queued_bytes: AtomicUsize,
}

impl RecordStats {
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    pub fn dropped(&self) -> u64 {
        self.dropped_full.load(Ordering::Relaxed)
    }

    /// The counters in Prometheus's text format.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        let _ = write!(
            out,
            "# HELP dapi_records_written_total Requests recorded (record.dir).\n# TYPE dapi_records_written_total counter\n\
             dapi_records_written_total {}\n\
             # HELP dapi_records_dropped_total Records not written: the writer's queue was full, or writing failed.\n\
             # TYPE dapi_records_dropped_total counter\n\
             dapi_records_dropped_total{{reason=\"queue_full\"}} {}\ndapi_records_dropped_total{{reason=\"write_error\"}} {}\n\
             # HELP dapi_records_removed_total Oldest records removed to keep record.max_count and record.max_bytes.\n\
             # TYPE dapi_records_removed_total counter\ndapi_records_removed_total {}\n",
            get(&self.written),
            get(&self.dropped_full),
            get(&self.failed),
            get(&self.removed),
        );
    }
}

/// The service's side of recording: offers records to the writer thread.
pub struct Recorder {
    dir: PathBuf,
    tx: SyncSender<Record>,
    stats: Arc<RecordStats>,
}

impl Recorder {
    /// Starts recording into `record.dir`, when set: the directory is created and must be
    /// writable (else the config is refused, naming the setting), and `config` is saved in
    /// it.
    pub fn start(settings: &RecordConfig, config: &ServiceConfig) -> Result<Option<Recorder>, ConfigError> {
        let Some((dir, source)) = &settings.dir else { return Ok(None) };
        let refuse = |message: String| ConfigError::Invalid {
            source: source.clone(),
            key: "record.dir".into(),
            message: format!("{}: {message}", dir.display()),
        };
        std::fs::create_dir_all(dir.join("configs")).map_err(|e| refuse(format!("cannot be created: {e}")))?;
        let probe = dir.join(".dapi-probe");
        std::fs::write(&probe, b"")
            .and_then(|()| std::fs::remove_file(&probe))
            .map_err(|e| refuse(format!("is not writable: {e}")))?;
        let existing = record_files(dir).map_err(|e| refuse(format!("cannot be listed: {e}")))?;
        let (tx, rx) = sync_channel::<Record>(QUEUE_RECORDS);
        let stats = Arc::new(RecordStats::default());
        let mut writer = Writer {
            dir: dir.clone(),
            kept: existing.into_iter().map(|(n, _, size)| (n, size)).collect(),
            max_count: settings.max_count,
            max_bytes: settings.max_bytes,
            stats: stats.clone(),
        };
        writer.keep_within_bounds();
        let recorder = Recorder { dir: dir.clone(), tx, stats };
        recorder.save_config(config).map_err(|e| refuse(format!("cannot save the config: {e}")))?;
        std::thread::Builder::new()
            .name("dapi-recorder".into())
            .spawn(move || {
                for record in rx {
                    writer.write(record);
                }
            })
            .map_err(|e| refuse(format!("cannot start the writer: {e}")))?;
        tracing::info!(dir = %dir.display(), max_count = settings.max_count, max_bytes = settings.max_bytes, "recording /allocate requests");
        Ok(Some(recorder))
    }

    /// Saves the chain and defaults of `config` under its digest (once per digest); called
    /// at start-up and on reload, before any record names it.
    pub fn save_config(&self, config: &ServiceConfig) -> std::io::Result<()> {
        let path = config_path(&self.dir, &config.digest());
        if path.exists() {
            return Ok(());
        }
        let mut saved = serde_json::json!({
            "allocationDescription": config.allocation_description,
            "defaults": config.defaults,
        });
        if let Some((dir, _)) = &config.plugins_dir {
            saved["plugins_dir"] = dir.display().to_string().into();
        }
        write_atomically(&path, saved.to_string().as_bytes())
    }

    /// Hands a record to the writer; drops it (counted) when the queue is full.
    pub fn offer(&self, record: Record) {
        let size = record.size();
        let queued = self.stats.queued_bytes.fetch_add(size, Ordering::Relaxed);
        if queued + size > QUEUE_BYTES && queued > 0 {
            self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
            self.stats.dropped_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match self.tx.try_send(record) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.queued_bytes.fetch_sub(size, Ordering::Relaxed);
                self.stats.dropped_full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn stats(&self) -> &RecordStats {
        &self.stats
    }
}

/// The writer thread's state: the records kept, oldest first, as (number, bytes).
struct Writer {
    dir: PathBuf,
    kept: VecDeque<(u64, u64)>,
    max_count: u64,
    max_bytes: u64,
    stats: Arc<RecordStats>,
}

impl Writer {
    fn write(&mut self, record: Record) {
        self.stats.queued_bytes.fetch_sub(record.size(), Ordering::Relaxed);
        let number = self.kept.back().map_or(1, |(n, _)| n + 1);
        let bytes = file_bytes(&record);
        let path = self.dir.join(format!("{number:012}.json"));
        match write_atomically(&path, &bytes) {
            Ok(()) => {
                self.stats.written.fetch_add(1, Ordering::Relaxed);
                self.kept.push_back((number, bytes.len() as u64));
                self.keep_within_bounds();
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(error = %e, path = %path.display(), "a request could not be recorded");
            }
        }
    }

    /// Removes the oldest records until both bounds hold.
    fn keep_within_bounds(&mut self) {
        let mut total: u64 = self.kept.iter().map(|(_, size)| size).sum();
        while self.kept.len() as u64 > self.max_count || (total > self.max_bytes && !self.kept.is_empty()) {
            let Some((number, size)) = self.kept.pop_front() else { break };
            total -= size;
            let path = self.dir.join(format!("{number:012}.json"));
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    self.stats.removed.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(error = %e, path = %path.display(), "an old record could not be removed"),
            }
        }
    }
}

/// A record file: its head's members, then `"body"` with the body as received.
fn file_bytes(record: &Record) -> Vec<u8> {
    let head = RecordHead {
        request_id: record.request_id.clone(),
        recorded_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        config: record.config.clone(),
        seed: record.seed,
        asked: record.asked.clone(),
        decision: record.decision.clone(),
        status: record.status,
        answer_digest: record.answer_digest.clone(),
    };
    // A head of plain values always serialises.
    let mut out = serde_json::to_vec(&head).unwrap_or_else(|_| b"{}".to_vec());
    out.pop();
    out.extend_from_slice(b",\"body\":");
    let body = trim_json(&record.body);
    match &record.decided_on {
        None => out.extend_from_slice(body),
        Some(on) => {
            out.reserve(body.len() + on.bytes());
            write_whole_body(body, on, &mut out);
        }
    }
    out.extend_from_slice(b"}\n");
    out
}

/// `body` with `servers` (replaced) and `tickets` (the body's own, then the claims) of
/// `on`: the stateless request that decides as the inventory allocation did.
fn write_whole_body(body: &[u8], on: &DecidedOn, out: &mut Vec<u8>) {
    // The body was parsed as an object before it was decided on.
    let members: indexmap::IndexMap<String, &RawValue> = serde_json::from_slice(body).unwrap_or_default();
    out.extend_from_slice(b"{\"servers\":[");
    for (i, server) in on.servers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(server.get().as_bytes());
    }
    out.push(b']');
    let key = |out: &mut Vec<u8>, name: &str| {
        out.push(b',');
        crate::engine::write_json_str(out, name);
        out.push(b':');
    };
    for (name, value) in &members {
        if name == "servers" || (name == "tickets" && !on.tickets.is_empty()) {
            continue;
        }
        key(out, name);
        out.extend_from_slice(value.get().as_bytes());
    }
    if !on.tickets.is_empty() {
        let own: Vec<&RawValue> =
            members.get("tickets").and_then(|t| serde_json::from_str(t.get()).ok()).unwrap_or_default();
        key(out, "tickets");
        out.push(b'[');
        for (i, ticket) in
            own.iter().map(|t| t.get().to_string()).chain(on.tickets.iter().map(|t| t.to_string())).enumerate()
        {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(ticket.as_bytes());
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// The body without surrounding white space (it was parsed, so it is one JSON value).
fn trim_json(body: &[u8]) -> &[u8] {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let start = body.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(body.len());
    let end = body.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &body[start..end]
}

/// Writes `path` through a temporary file renamed into place, so that readers never see
/// half a file.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    drop(file);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u8) -> Record {
        Record {
            request_id: format!("req-{n}"),
            config: "c0ffee".into(),
            seed: Some(n.into()),
            asked: AnswerAsked::default(),
            decision: Decision::Server(format!("server-{n}")),
            status: 200,
            answer_digest: "00".into(),
            body: format!(" {{\"n\": {n}}}\n").into_bytes(),
            decided_on: None,
        }
    }

    #[test]
    fn an_inventory_record_holds_the_servers_and_claims_it_was_decided_on() {
        let text = Arc::new(r#"[{"uuid":"s1"},{"uuid":"s2"}]"#.to_string());
        let on = DecidedOn {
            servers: vec![
                SharedText { text: text.clone(), range: 1..14 },
                SharedText { text: text.clone(), range: 15..28 },
            ],
            tickets: vec![serde_json::json!({"id": "claimed"})],
        };
        let mut out = Vec::new();
        write_whole_body(br#"{"servers":[],"vm":{"ram":1},"tickets":[{"id":"own"}]}"#, &on, &mut out);
        let body: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({
                "servers": [{"uuid": "s1"}, {"uuid": "s2"}],
                "vm": {"ram": 1},
                "tickets": [{"id": "own"}, {"id": "claimed"}],
            })
        );
        // Without claims, the body's members stay as they are.
        let mut out = Vec::new();
        let on = DecidedOn { tickets: Vec::new(), ..on };
        write_whole_body(br#"{"servers":[],"tickets":[]}"#, &on, &mut out);
        assert_eq!(String::from_utf8_lossy(&out), r#"{"servers":[{"uuid":"s1"},{"uuid":"s2"}],"tickets":[]}"#);
    }

    fn writer(dir: &Path, max_count: u64, max_bytes: u64) -> Writer {
        std::fs::create_dir_all(dir).expect("tmp dir");
        let kept = record_files(dir).expect("list").into_iter().map(|(n, _, s)| (n, s)).collect();
        Writer { dir: dir.to_path_buf(), kept, max_count, max_bytes, stats: Arc::default() }
    }

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("dapi-record-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_record_reads_back_as_written() {
        let dir = tmp("roundtrip");
        let mut w = writer(&dir, 10, 1 << 20);
        w.write(record(3));
        let files = record_files(&dir).expect("list");
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, 1);
        let read = read_record(&files[0].1).expect("reads");
        assert_eq!(read.head.request_id, "req-3");
        assert_eq!(read.head.seed, Some(3));
        assert_eq!(read.head.decision, Decision::Server("server-3".into()));
        assert_eq!(read.body.get(), "{\"n\": 3}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_oldest_records_go_first_by_count_and_by_bytes() {
        let dir = tmp("bounds");
        let mut w = writer(&dir, 3, 1 << 20);
        for n in 1..=5 {
            w.write(record(n));
        }
        let numbers: Vec<u64> = record_files(&dir).expect("list").iter().map(|f| f.0).collect();
        assert_eq!(numbers, [3, 4, 5]);
        assert_eq!(w.stats.removed.load(Ordering::Relaxed), 2);
        // A writer started again on the directory numbers on, and a byte bound keeps two.
        let size = record_files(&dir).expect("list")[0].2;
        let mut w = writer(&dir, 100, 2 * size + size / 2);
        w.write(record(6));
        let numbers: Vec<u64> = record_files(&dir).expect("list").iter().map(|f| f.0).collect();
        assert_eq!(numbers, [5, 6]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_numbered_json_files_are_records() {
        assert_eq!(record_number("000000000042.json"), Some(42));
        assert_eq!(record_number("42.json"), None);
        assert_eq!(record_number("000000000042.tmp"), None);
        assert_eq!(record_number("configs"), None);
    }
}
