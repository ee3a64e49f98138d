//! Why this server, and why not that one: the `explain` part of an allocation's answer
//! (`POST /allocate?explain=true`, `dapi allocate --explain`, `dapi explain`).
//!
//! Built after the engine has decided, from the steps (where each server left the list and
//! the reason given there) and the notes plugins took while explaining (shortfalls in
//! numbers, the parts of each score). Nothing here changes the decision or the steps.

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::engine::write_json_str;
use crate::engine::{Allocation, NoteKind, ServerId, Shortfall};
use crate::js::{fmt_num, num_to_json, write_num_json, write_uint_json};
use crate::model::Server;
use crate::validate::FieldError;

/// What an explained answer is asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExplainOptions {
    /// Restricts the per-server part to these uuids (a uuid not received is answered too);
    /// `None`: every server received.
    pub why_not: Option<Vec<String>>,
}

impl ExplainOptions {
    /// Adds uuids to `why_not`.
    pub fn ask_about(&mut self, uuids: impl IntoIterator<Item = String>) {
        let list = self.why_not.get_or_insert_with(Vec::new);
        for uuid in uuids {
            if !list.contains(&uuid) {
                list.push(uuid);
            }
        }
    }
}

/// How many of the best candidates are always shown with their score breakdown.
const TOP: usize = 5;

/// The `explain` object. The per-server parts (`top`, `servers`) are made from `facts` when
/// read or written: at thousands of servers, building them all first would cost about as
/// much as writing them.
#[derive(Debug)]
pub struct Explain<'a> {
    pub received: usize,
    pub removed: usize,
    pub remaining: usize,
    /// One line, kube-style: `412 of 500 servers removed: 300 by ..., 100 by ...`.
    pub summary: String,
    /// The removed servers grouped by the step that removed them, most first.
    pub causes: Vec<Cause>,
    pub winner: Option<Winner>,
    facts: Facts<'a>,
    /// The best candidates (up to five), best first.
    top: Vec<ServerId>,
    /// Every server received, in request order (`None`), or those asked about (`why_not`):
    /// a uuid not received stays as asked.
    asked: Option<Vec<Result<ServerId, String>>>,
}

/// What the allocation says of each server, by server position.
#[derive(Debug)]
struct Facts<'a> {
    servers: &'a [Server<'a>],
    allocation: &'a Allocation,
    /// The step each removed server left at.
    left: Vec<Option<usize>>,
    rank: Vec<Option<usize>>,
    /// Shortfalls noted by the step the server left at.
    shortfalls: ByServer<ShortfallOut>,
    /// Score notes: (step, raw, weight, contribution).
    parts: ByServer<(usize, f64, f64, f64)>,
    /// Raw values noted by scorers, by step.
    raws: ByServer<(usize, &'a Value)>,
    winner_margin: Option<f64>,
}

/// Servers that one step removed.
#[derive(Debug, Serialize)]
pub struct Cause {
    pub step: &'static str,
    pub plugin: &'static str,
    pub count: usize,
    /// The removed server that fell shortest, when the step measures a shortfall.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closest: Option<Closest>,
}

#[derive(Debug, Serialize)]
pub struct Closest {
    pub server: String,
    pub resource: &'static str,
    pub unit: &'static str,
    #[serde(serialize_with = "js_num")]
    pub missing: f64,
}

#[derive(Debug, Serialize)]
pub struct Winner {
    pub server: String,
    #[serde(serialize_with = "js_num")]
    pub score: f64,
    /// Its score over the runner-up's (absent when it had no rival).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "js_num_opt")]
    pub margin: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<String>,
}

/// One server's part (borrowing what it can from the servers and the steps: thousands
/// are made per explained answer).
#[derive(Debug, Clone, Serialize)]
pub struct ServerExplain<'a> {
    pub server: Cow<'a, str>,
    /// `chosen`, `candidate` (survived every step, not chosen), `removed`, or
    /// `not_received` (asked about but not in the request).
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left: Option<Left<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "js_num_opt")]
    pub score: Option<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scores: Vec<ScorePart<'a>>,
    /// For the winner: its score over the runner-up's.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "js_num_opt")]
    pub margin: Option<f64>,
}

/// Where a server left the list.
#[derive(Debug, Clone, Serialize)]
pub struct Left<'a> {
    pub step: &'static str,
    pub plugin: &'static str,
    /// The step's reason for this server (some filters give none).
    pub reason: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub shortfalls: &'a [ShortfallOut],
}

#[derive(Debug, Clone, Serialize)]
pub struct ShortfallOut {
    pub resource: &'static str,
    pub unit: &'static str,
    #[serde(serialize_with = "js_num")]
    pub needed: f64,
    #[serde(serialize_with = "js_num")]
    pub available: f64,
    #[serde(serialize_with = "js_num")]
    pub missing: f64,
}

impl From<Shortfall> for ShortfallOut {
    fn from(s: Shortfall) -> ShortfallOut {
        ShortfallOut {
            resource: s.resource,
            unit: s.unit,
            needed: s.needed,
            available: s.available,
            missing: s.needed - s.available,
        }
    }
}

/// One scorer's part of a score.
#[derive(Debug, Clone, Serialize)]
pub struct ScorePart<'a> {
    pub plugin: &'static str,
    /// The value the scorer placed the server by: unreserved MiB, owner zones, a date, a
    /// platform stamp, or the server's position in the scorer's order.
    pub raw: Raw<'a>,
    /// The contribution over the weight, in [0, 1] (−1 or 1 when every server tied).
    #[serde(serialize_with = "js_num")]
    pub normalised: f64,
    #[serde(serialize_with = "js_num")]
    pub weight: f64,
    #[serde(serialize_with = "js_num")]
    pub contribution: f64,
}

/// A scorer's raw value: the one it noted, or the number it scored by.
#[derive(Debug, Clone, Copy)]
pub enum Raw<'a> {
    Noted(&'a Value),
    Number(f64),
}

impl Raw<'_> {
    /// The value as the report shows it: text unquoted.
    pub fn to_text(&self) -> String {
        match self {
            Raw::Noted(Value::String(text)) => text.clone(),
            Raw::Noted(other) => other.to_string(),
            Raw::Number(n) => num_to_json(*n).to_string(),
        }
    }

    fn write_json(&self, out: &mut Vec<u8>) {
        match self {
            Raw::Noted(value) => {
                let _ = crate::js::json::to_writer(&mut *out, value);
            }
            Raw::Number(n) => write_num_json(out, *n),
        }
    }
}

impl Serialize for Raw<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Raw::Noted(value) => value.serialize(s),
            Raw::Number(n) => num_to_json(*n).serialize(s),
        }
    }
}

fn js_num<S: serde::Serializer>(n: &f64, s: S) -> Result<S::Ok, S::Error> {
    num_to_json(*n).serialize(s)
}

fn js_num_opt<S: serde::Serializer>(n: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    n.map(num_to_json).serialize(s)
}

/// `why_not` from a request body: `None` when absent; a 422 naming the field when it is not
/// an array of strings. Reads only that field (the rest is skipped over).
pub fn why_not_in_body(body: &[u8]) -> Result<Option<Vec<String>>, FieldError> {
    #[derive(serde::Deserialize)]
    struct Only {
        why_not: Option<Value>,
    }
    let Ok(only) = serde_json::from_slice::<Only>(body) else { return Ok(None) };
    match only.why_not {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                _ => Err(FieldError::invalid(format!("why_not[{i}]"), "must be a server uuid (a string)")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(FieldError::invalid("why_not", "must be an array of server uuids")),
    }
}

/// The explanation of `allocation`, an allocation of `servers` run with notes.
pub fn explain<'a>(servers: &'a [Server<'a>], allocation: &'a Allocation, options: &ExplainOptions) -> Explain<'a> {
    let n = servers.len();
    let steps = &allocation.steps;
    let uuid = |id: ServerId| servers[id].reason_key();

    // The steps whose output led to the answer: back from the last step through the lists
    // each was given (steps of `or` branches given up on are not on it).
    let mut path = Vec::new();
    let mut at = steps.len().checked_sub(1);
    while let Some(k) = at {
        path.push(k);
        at = steps[k].input;
    }
    path.reverse();

    // Where each server left: the first step on the path that did not pass it on.
    let mut left: Vec<Option<usize>> = vec![None; n];
    let mut alive = vec![true; n];
    let mut mark = vec![usize::MAX; n];
    for &k in &path {
        for &id in &steps[k].remaining {
            mark[id] = k;
        }
        for id in 0..n {
            if alive[id] && mark[id] != k {
                alive[id] = false;
                left[id] = Some(k);
            }
        }
    }
    let survivors: Vec<ServerId> = match path.last() {
        Some(&k) => steps[k].remaining.clone(),
        None => (0..n).collect(),
    };

    // Notes by server (vectors indexed by server position): shortfalls of the step it left
    // at, score parts and raw values of every step. Only servers with notes allocate.
    let notes = || allocation.notes.iter().filter(|note| note.server < n);
    let shortfalls: ByServer<ShortfallOut> = ByServer::new(
        n,
        notes().filter_map(|note| match &note.kind {
            NoteKind::Shortfall(s) if left[note.server] == Some(note.step) => Some((note.server, (*s).into())),
            _ => None,
        }),
    );
    let parts = ByServer::new(
        n,
        notes().filter_map(|note| match &note.kind {
            NoteKind::Score { raw, weight, contribution } => {
                Some((note.server, (note.step, *raw, *weight, *contribution)))
            }
            _ => None,
        }),
    );
    let raws = ByServer::new(
        n,
        notes().filter_map(|note| match &note.kind {
            NoteKind::Raw(value) => Some((note.server, (note.step, value))),
            _ => None,
        }),
    );

    // Ranks: the chosen server first, then by score, ties to the later server in the
    // final list (as selection breaks them).
    let mut ranked: Vec<(usize, ServerId)> = survivors.iter().copied().enumerate().collect();
    ranked.sort_by(|&(pa, a), &(pb, b)| {
        let chosen = |id| Some(id) == allocation.chosen;
        chosen(b)
            .cmp(&chosen(a))
            .then(allocation.state[b].score.total_cmp(&allocation.state[a].score))
            .then(pb.cmp(&pa))
    });
    let mut rank: Vec<Option<usize>> = vec![None; n];
    for (r, &(_, id)) in ranked.iter().enumerate() {
        rank[id] = Some(r + 1);
    }
    let winner = allocation.chosen.map(|id| {
        let runner_up = ranked.get(1).map(|&(_, r)| r);
        let score = allocation.state[id].score;
        Winner {
            server: uuid(id),
            score,
            margin: runner_up.map(|r| score - allocation.state[r].score),
            runner_up: runner_up.map(uuid),
        }
    });

    // Causes: removed servers grouped by the step they left at.
    let mut causes: Vec<Cause> = Vec::new();
    let mut cause_of_step: Vec<Option<usize>> = vec![None; steps.len()];
    for (id, &at) in left.iter().enumerate() {
        let Some(k) = at else { continue };
        let c = *cause_of_step[k].get_or_insert_with(|| {
            causes.push(Cause { step: steps[k].name, plugin: steps[k].plugin, count: 0, closest: None });
            causes.len() - 1
        });
        let cause = &mut causes[c];
        cause.count += 1;
        if let Some(first) = shortfalls.of(id).first() {
            let closer = cause.closest.as_ref().is_none_or(|c| first.missing < c.missing);
            if closer {
                cause.closest = Some(Closest {
                    server: uuid(id),
                    resource: first.resource,
                    unit: first.unit,
                    missing: first.missing,
                });
            }
        }
    }
    causes.sort_by_key(|c| std::cmp::Reverse(c.count));
    let removed = left.iter().filter(|l| l.is_some()).count();
    let summary = summary_line(n, removed, survivors.len(), &causes, winner.as_ref());
    let asked = options.why_not.as_ref().map(|uuids| {
        uuids
            .iter()
            .map(|asked| {
                (0..n).find(|&id| servers[id].uuid.as_str() == Some(asked.as_str())).ok_or_else(|| asked.clone())
            })
            .collect()
    });
    let winner_margin = winner.as_ref().and_then(|w| w.margin);
    Explain {
        received: n,
        removed,
        remaining: survivors.len(),
        summary,
        causes,
        winner,
        facts: Facts { servers, allocation, left, rank, shortfalls, parts, raws, winner_margin },
        top: ranked.iter().take(TOP).map(|&(_, id)| id).collect(),
        asked,
    }
}

/// Items grouped by server position, in the order given, in one allocation (thousands of
/// servers each with a few notes: one vector per server would cost more than the notes).
#[derive(Debug)]
struct ByServer<T> {
    /// `items[ends[id - 1]..ends[id]]` are server `id`'s.
    ends: Vec<usize>,
    items: Vec<T>,
}

impl<T> ByServer<T> {
    fn new(servers: usize, items: impl Iterator<Item = (ServerId, T)>) -> ByServer<T> {
        let mut all: Vec<(ServerId, T)> = items.collect();
        // Stable, so each server's items keep their order; the notes come as one sorted run
        // per step, which the sort merges.
        all.sort_by_key(|&(id, _)| id);
        let mut ends = vec![0usize; servers];
        for &(id, _) in &all {
            ends[id] += 1;
        }
        let mut total = 0;
        for end in &mut ends {
            total += *end;
            *end = total;
        }
        ByServer { ends, items: all.into_iter().map(|(_, item)| item).collect() }
    }

    fn of(&self, id: ServerId) -> &[T] {
        let start = if id == 0 { 0 } else { self.ends[id - 1] };
        &self.items[start..self.ends[id]]
    }
}

impl<'a> Facts<'a> {
    /// `String(server.uuid)`, borrowed when the uuid is a string (as validated ones are).
    fn key(&self, id: ServerId) -> Cow<'a, str> {
        match self.servers[id].uuid.as_str() {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(self.servers[id].reason_key()),
        }
    }

    /// The raw value a scorer's step noted last for the server (as a map keyed by (step,
    /// server) kept it), else the number it scored by.
    fn raw(&self, id: ServerId, step: usize, scored_by: f64) -> Raw<'_> {
        self.raws.of(id).iter().rev().find(|(s, _)| *s == step).map_or(Raw::Number(scored_by), |(_, v)| Raw::Noted(v))
    }

    fn describe(&self, id: ServerId) -> ServerExplain<'_> {
        let steps = &self.allocation.steps;
        let server = self.key(id);
        if let Some(k) = self.left[id] {
            return ServerExplain {
                left: Some(Left {
                    step: steps[k].name,
                    plugin: steps[k].plugin,
                    reason: steps[k].reasons.get(&server),
                    shortfalls: self.shortfalls.of(id),
                }),
                server,
                outcome: "removed",
                rank: None,
                score: None,
                scores: Vec::new(),
                margin: None,
            };
        }
        let chosen = Some(id) == self.allocation.chosen;
        let scores = self
            .parts
            .of(id)
            .iter()
            .map(|&(step, raw, weight, contribution)| ScorePart {
                plugin: steps[step].plugin,
                raw: self.raw(id, step, raw),
                normalised: normalised(weight, contribution),
                weight,
                contribution,
            })
            .collect();
        ServerExplain {
            server,
            outcome: if chosen { "chosen" } else { "candidate" },
            left: None,
            rank: self.rank[id],
            score: Some(self.allocation.state[id].score),
            scores,
            margin: if chosen { self.winner_margin } else { None },
        }
    }

    /// [`Facts::describe`]'s part written straight as JSON, as serde would write it.
    fn write_server(&self, out: &mut Vec<u8>, id: ServerId) {
        let steps = &self.allocation.steps;
        let server = self.key(id);
        out.extend_from_slice(b"{\"server\":");
        write_json_str(out, &server);
        if let Some(k) = self.left[id] {
            out.extend_from_slice(b",\"outcome\":\"removed\",\"left\":{\"step\":");
            write_json_str(out, steps[k].name);
            out.extend_from_slice(b",\"plugin\":");
            write_json_str(out, steps[k].plugin);
            out.extend_from_slice(b",\"reason\":");
            match steps[k].reasons.get(&server) {
                Some(reason) => write_json_str(out, reason),
                None => out.extend_from_slice(b"null"),
            }
            let shortfalls = self.shortfalls.of(id);
            if !shortfalls.is_empty() {
                out.extend_from_slice(b",\"shortfalls\":[");
                for (i, f) in shortfalls.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(b"{\"resource\":");
                    write_json_str(out, f.resource);
                    out.extend_from_slice(b",\"unit\":");
                    write_json_str(out, f.unit);
                    out.extend_from_slice(b",\"needed\":");
                    write_num_json(out, f.needed);
                    out.extend_from_slice(b",\"available\":");
                    write_num_json(out, f.available);
                    out.extend_from_slice(b",\"missing\":");
                    write_num_json(out, f.missing);
                    out.push(b'}');
                }
                out.push(b']');
            }
            out.extend_from_slice(b"}}");
            return;
        }
        let chosen = Some(id) == self.allocation.chosen;
        out.extend_from_slice(if chosen { b",\"outcome\":\"chosen\"" } else { b",\"outcome\":\"candidate\"" });
        if let Some(rank) = self.rank[id] {
            out.extend_from_slice(b",\"rank\":");
            write_uint_json(out, rank as u64);
        }
        out.extend_from_slice(b",\"score\":");
        write_num_json(out, self.allocation.state[id].score);
        let parts = self.parts.of(id);
        if !parts.is_empty() {
            out.extend_from_slice(b",\"scores\":[");
            for (i, &(step, raw, weight, contribution)) in parts.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(b"{\"plugin\":");
                write_json_str(out, steps[step].plugin);
                out.extend_from_slice(b",\"raw\":");
                self.raw(id, step, raw).write_json(out);
                out.extend_from_slice(b",\"normalised\":");
                write_num_json(out, normalised(weight, contribution));
                out.extend_from_slice(b",\"weight\":");
                write_num_json(out, weight);
                out.extend_from_slice(b",\"contribution\":");
                write_num_json(out, contribution);
                out.push(b'}');
            }
            out.push(b']');
        }
        if let Some(margin) = self.winner_margin.filter(|_| chosen) {
            out.extend_from_slice(b",\"margin\":");
            write_num_json(out, margin);
        }
        out.push(b'}');
    }
}

/// A contribution over its weight's magnitude, in [0, 1] (−1 or 1 when every server tied).
fn normalised(weight: f64, contribution: f64) -> f64 {
    if weight == 0.0 {
        0.0
    } else {
        contribution / weight.abs()
    }
}

/// A server asked about but not received.
fn not_received(uuid: &str) -> ServerExplain<'_> {
    ServerExplain {
        server: Cow::Borrowed(uuid),
        outcome: "not_received",
        left: None,
        rank: None,
        score: None,
        scores: Vec::new(),
        margin: None,
    }
}

impl<'a> Explain<'a> {
    /// The best candidates (up to five), best first, with their score breakdown.
    pub fn top(&self) -> impl Iterator<Item = ServerExplain<'_>> + '_ {
        self.top.iter().map(|&id| self.facts.describe(id))
    }

    /// Every server received, in request order, or those asked about (`why_not`).
    pub fn servers(&self) -> Box<dyn Iterator<Item = ServerExplain<'_>> + '_> {
        match &self.asked {
            None => Box::new((0..self.received).map(|id| self.facts.describe(id))),
            Some(asked) => Box::new(asked.iter().map(|a| match a {
                Ok(id) => self.facts.describe(*id),
                Err(uuid) => not_received(uuid),
            })),
        }
    }

    /// The `explain` object as JSON, appended to `out`: what serializing it writes, with
    /// the per-server parts written straight from the facts.
    pub fn write_json(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        out.extend_from_slice(b"{\"received\":");
        write_uint_json(out, self.received as u64);
        out.extend_from_slice(b",\"removed\":");
        write_uint_json(out, self.removed as u64);
        out.extend_from_slice(b",\"remaining\":");
        write_uint_json(out, self.remaining as u64);
        out.extend_from_slice(b",\"summary\":");
        write_json_str(out, &self.summary);
        out.extend_from_slice(b",\"causes\":");
        crate::js::json::to_writer(&mut *out, &self.causes)?;
        if let Some(winner) = &self.winner {
            out.extend_from_slice(b",\"winner\":");
            crate::js::json::to_writer(&mut *out, winner)?;
        }
        let list = |out: &mut Vec<u8>, ids: &mut dyn Iterator<Item = Result<ServerId, &str>>| {
            out.push(b'[');
            for (i, entry) in ids.enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match entry {
                    Ok(id) => self.facts.write_server(out, id),
                    Err(uuid) => {
                        out.extend_from_slice(b"{\"server\":");
                        write_json_str(out, uuid);
                        out.extend_from_slice(b",\"outcome\":\"not_received\"}");
                    }
                }
            }
            out.push(b']');
        };
        out.extend_from_slice(b",\"top\":");
        list(out, &mut self.top.iter().map(|&id| Ok(id)));
        out.extend_from_slice(b",\"servers\":");
        match &self.asked {
            None => list(out, &mut (0..self.received).map(Ok)),
            Some(asked) => list(out, &mut asked.iter().map(|a| a.as_ref().map(|&id| id).map_err(String::as_str))),
        }
        out.push(b'}');
        Ok(())
    }
}

impl Serialize for Explain<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Seq<F>(F);
        impl<'x, F: Fn() -> I, I: Iterator<Item = ServerExplain<'x>>> Serialize for Seq<F> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq((self.0)())
            }
        }
        let mut st = s.serialize_struct("Explain", 8)?;
        st.serialize_field("received", &self.received)?;
        st.serialize_field("removed", &self.removed)?;
        st.serialize_field("remaining", &self.remaining)?;
        st.serialize_field("summary", &self.summary)?;
        st.serialize_field("causes", &self.causes)?;
        if let Some(winner) = &self.winner {
            st.serialize_field("winner", winner)?;
        }
        st.serialize_field("top", &Seq(|| self.top()))?;
        st.serialize_field("servers", &Seq(|| self.servers()))?;
        st.end()
    }
}

/// `412 of 500 servers removed: 300 by hard-filter-min-ram (...; closest: X short by 512 MiB
/// ram), ...; 88 left; chosen: Y (score 3.2, margin 0.4)`.
fn summary_line(received: usize, removed: usize, left: usize, causes: &[Cause], winner: Option<&Winner>) -> String {
    let mut line = format!("{removed} of {received} servers removed");
    for (i, cause) in causes.iter().enumerate() {
        line.push_str(if i == 0 { ": " } else { ", " });
        let _ = write!(line, "{} by {} ({}", cause.count, cause.plugin, cause.step);
        if let Some(c) = &cause.closest {
            let _ = write!(line, "; closest: {} short by {} {} {}", c.server, fmt_num(c.missing), c.unit, c.resource);
        }
        line.push(')');
    }
    let _ = write!(line, "; {left} left");
    match winner {
        Some(w) => {
            let _ = write!(line, "; chosen: {} (score {}", w.server, fmt_num(w.score));
            if let Some(m) = w.margin {
                let _ = write!(line, ", margin {}", fmt_num(m));
            }
            line.push(')');
        }
        None => line.push_str("; none chosen"),
    }
    line
}

/// The explanation appended to an answer body written by `answer::write_allocation_on` (which
/// ends with `}`), as its last member `"explain"`.
pub fn append_to_answer(out: &mut Vec<u8>, explain: &Explain) -> serde_json::Result<()> {
    if out.last() == Some(&b'}') {
        out.pop();
    }
    out.extend_from_slice(b",\"explain\":");
    explain.write_json(out)?;
    out.push(b'}');
    Ok(())
}

/// The explanation as a terminal report (`dapi explain`): the causes as a table, the best
/// candidates with their score breakdown, then the servers asked about (when
/// `asked`). `colour`: ANSI colours, for a terminal.
pub fn report(explain: &Explain, asked: bool, colour: bool) -> String {
    let paint = |code: &str, text: &str| if colour { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() };
    let bold = |t: &str| paint("1", t);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {} servers received, {} removed, {} left",
        bold("Allocation:"),
        explain.received,
        explain.removed,
        explain.remaining
    );
    match &explain.winner {
        Some(w) => {
            let _ = write!(out, "{} {} (score {}", bold("Chosen:"), paint("32", &w.server), short(w.score));
            if let (Some(m), Some(r)) = (w.margin, &w.runner_up) {
                let _ = write!(out, ", {} ahead of {r}", short(m));
            }
            out.push_str(")\n");
        }
        None => {
            let _ = writeln!(out, "{} {}", bold("Chosen:"), paint("31", "none: no server fits"));
        }
    }

    if !explain.causes.is_empty() {
        let _ = writeln!(out, "\n{}", bold("Removed, by cause:"));
        let rows: Vec<[String; 4]> = explain
            .causes
            .iter()
            .map(|c| {
                let closest = c.closest.as_ref().map_or(String::new(), |c| {
                    format!("{} short by {} {} {}", c.server, fmt_num(c.missing), c.unit, c.resource)
                });
                [c.count.to_string(), c.plugin.to_string(), c.step.to_string(), closest]
            })
            .collect();
        table(&mut out, ["SERVERS", "PLUGIN", "STEP", "CLOSEST"], &rows);
    }

    if !explain.top.is_empty() {
        let _ = writeln!(out, "\n{}", bold("Top candidates:"));
        for s in explain.top() {
            server_block(&mut out, &s, &paint);
        }
    }
    if asked {
        let _ = writeln!(out, "\n{}", bold("Asked about:"));
        for s in explain.servers() {
            server_block(&mut out, &s, &paint);
        }
    }
    out
}

/// A number for people: at most four decimals.
fn short(n: f64) -> String {
    if n.fract() == 0.0 || !n.is_finite() {
        return fmt_num(n);
    }
    let text = format!("{n:.4}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn server_block(out: &mut String, s: &ServerExplain, paint: &dyn Fn(&str, &str) -> String) {
    match (s.outcome, &s.left) {
        (_, Some(left)) => {
            let _ = writeln!(out, "  {}  {} by {} ({})", s.server, paint("31", "removed"), left.plugin, left.step);
            if let Some(reason) = &left.reason {
                let _ = writeln!(out, "      reason: {reason}");
            }
            for f in left.shortfalls {
                let _ = writeln!(
                    out,
                    "      short of {}: needed {} {unit}, available {} {unit}, missing {} {unit}",
                    f.resource,
                    fmt_num(f.needed),
                    fmt_num(f.available),
                    fmt_num(f.missing),
                    unit = f.unit
                );
            }
        }
        ("not_received", None) => {
            let _ = writeln!(out, "  {}  {}", s.server, paint("33", "not in the request"));
        }
        (outcome, None) => {
            let rank = s.rank.map_or(String::new(), |r| format!("#{r} "));
            let _ =
                write!(out, "  {rank}{}  {}", s.server, paint(if outcome == "chosen" { "32" } else { "0" }, outcome));
            // As the heading and the table round them (the JSON keeps every digit).
            if let Some(score) = s.score {
                let _ = write!(out, ", score {}", short(score));
            }
            if let Some(m) = s.margin {
                let _ = write!(out, ", margin {}", short(m));
            }
            out.push('\n');
            if !s.scores.is_empty() {
                let rows: Vec<[String; 4]> = s
                    .scores
                    .iter()
                    .map(|p| {
                        let raw = p.raw.to_text();
                        [
                            p.plugin.to_string(),
                            raw,
                            format!("{} × {}", short(p.normalised), short(p.weight)),
                            format!("+{}", short(p.contribution)),
                        ]
                    })
                    .collect();
                let mut block = String::new();
                table(&mut block, ["SCORER", "RAW", "NORMALISED × WEIGHT", "CONTRIBUTION"], &rows);
                for line in block.lines() {
                    let _ = writeln!(out, "    {line}");
                }
            }
        }
    }
}

/// A left-aligned table with a header row, two spaces between columns.
fn table<const N: usize>(out: &mut String, head: [&str; N], rows: &[[String; N]]) {
    let mut widths = head.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::from("  ");
        for (i, cell) in cells.enumerate() {
            text.push_str(cell);
            if i + 1 < N {
                text.extend(std::iter::repeat_n(' ', widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut head.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
}
