//! Reading request bodies into the typed models.
//!
//! Bodies are read once: servers are kept as borrowed raw JSON (for echoing the chosen
//! server back as received) and parsed into [`Server`]s. Type problems of the top-level
//! parameters are collected and reported together, the way CNAPI's parameter check does.

use std::sync::Mutex;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::arriving::{Arriving, Progress};
use super::cursor::Cursor;
use super::sysinfo::read_sysinfo;
use super::vms::read_vms;
use crate::js::{json, Js};
use crate::model::{
    AllocateBody, BatchFields, BodyError, FieldError, Image, Package, ParamType, RawParams, Server, Shape, Ticket,
    VmPayload,
};

type TopLevel<'a> = IndexMap<String, &'a RawValue>;

fn top_level(body: &[u8]) -> Result<TopLevel<'_>, BodyError> {
    match crate::scan::utf8(body) {
        Ok(text) => json::from_str::<TopLevel>(text),
        Err(_) => serde_json::from_slice::<TopLevel>(body),
    }
    .map_err(|e| BodyError::Malformed(format!("body is not a JSON object: {e}")))
}

fn not_object(field: &str, t: ParamType) -> FieldError {
    FieldError::invalid(field, format!("value is not an object. (was: {})", t.tag()))
}

fn not_array(field: &str) -> FieldError {
    FieldError::invalid(field, "value was not an array")
}

fn parse_typed<'a, T: Deserialize<'a>>(field: &str, raw: &'a RawValue, errors: &mut Vec<FieldError>) -> Option<T> {
    match json::from_str::<T>(raw.get()) {
        Ok(v) => Some(v),
        Err(e) => {
            errors.push(FieldError::unreadable(field, &e));
            None
        }
    }
}

/// Reads the servers array: every element must be an object.
fn parse_servers<'a>(
    field: &str,
    raw: &'a RawValue,
    errors: &mut Vec<FieldError>,
) -> Option<(Vec<&'a str>, Vec<Server<'a>>)> {
    let raws: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        Err(_) => {
            errors.push(not_array(field));
            return None;
        }
    };
    let mut servers = Vec::with_capacity(raws.len());
    let before = errors.len();
    for (i, r) in raws.iter().enumerate() {
        let t = ParamType::of(Some(r));
        if t != ParamType::Object {
            errors.push(not_object(&format!("{field}[{i}]"), t));
            continue;
        }
        if let Some(s) = parse_typed::<Server>(&format!("{field}[{i}]"), r, errors) {
            servers.push(s);
        }
    }
    (errors.len() == before).then_some((raws.iter().map(|r| r.get()).collect(), servers))
}

/// The top-level members but `servers`, and `servers`.
type Walked<'a> = (TopLevel<'a>, Option<ServersMember<'a>>);

/// Servers arrays from this many bytes are read by two threads (where there are two
/// cores): below, starting a thread costs more than half the reading saves. The unit
/// tests split from 4 KiB, so that every reader test with a bigger body reads it in pieces.
const SPLIT_FROM: usize = if cfg!(test) { 4 << 10 } else { 4 << 20 };

/// Room for as many more servers as `rest` bytes of the body hold at the size of those read
/// (and a few): a servers array grown by doubling holds up to twice the servers, and the
/// old array with the new one while it moves (at 5,000 servers, 10 MB for 6). Room left by
/// an earlier guess is kept when it holds the servers expected: guessed again from more
/// servers, the few added for slack would otherwise move the whole array once more (3 MB
/// into fresh pages at 5,000 servers, on every big arriving body).
fn reserve_for_rest(raws: &mut Vec<&str>, servers: &mut Vec<Server<'_>>, rest: usize) {
    let read: usize = raws.iter().map(|r| r.len()).sum();
    let Some(average) = read.checked_div(raws.len()).filter(|&a| a > 0) else { return };
    let expected = rest / average;
    if servers.capacity() - servers.len() >= expected && raws.capacity() - raws.len() >= expected {
        return;
    }
    let more = expected.saturating_add(expected / 16).saturating_add(4);
    servers.reserve_exact(more);
    raws.reserve_exact(more);
}

/// A big servers array is cut into pieces of about this many bytes (each starting at a
/// server, as far as a look at the bytes near each mark can tell). The first thread
/// reads from the array's start in its own place, taking each piece as it arrives at it;
/// the other thread takes pieces from the array's end backwards, each into a list of its
/// own; they meet where they meet. Cut in fixed halves, the array kept the faster thread
/// waiting whenever the host slowed one core (here one often ran 50% slower than the other
/// for seconds at a time, and a 5,000-server request then waited ~10 ms for its second
/// half). Pieces this size end the reading within about a millisecond of each other.
const PIECE: usize = if cfg!(test) { 1 << 10 } else { 2 << 20 };

/// The servers of one piece, and where its reading stopped (after its last server).
#[derive(Default)]
struct PieceServers<'a> {
    raws: Vec<&'a str>,
    servers: Vec<Server<'a>>,
    end: usize,
}

/// The pieces of a big servers array after the first: where each starts (only a guess: a
/// `{` just after `},`), the ones neither thread has taken yet, and what the other thread
/// read of those it took.
struct Pieces<'a> {
    starts: Vec<usize>,
    untaken: Mutex<std::ops::Range<usize>>,
    read: Vec<Mutex<Option<PieceServers<'a>>>>,
}

impl<'a> Pieces<'a> {
    fn new(starts: Vec<usize>) -> Pieces<'a> {
        let read = starts.iter().map(|_| Mutex::new(None)).collect();
        Pieces { untaken: Mutex::new(0..starts.len()), starts, read }
    }

    /// The first thread takes the first untaken piece: `false` when the other thread has
    /// taken it (and every piece after it) already.
    fn take_front(&self) -> bool {
        let Ok(mut untaken) = self.untaken.lock() else { return false };
        untaken.next().is_some()
    }

    /// The other thread's work: the last untaken piece, again and again, until none is left.
    fn read_from_back(&self, c: &mut Cursor<'a>) {
        while let Some(i) = self.untaken.lock().ok().and_then(|mut untaken| untaken.next_back()) {
            let until = self.starts.get(i + 1).copied().unwrap_or(c.text.len());
            let read = read_piece(c, self.starts[i], until);
            if let Ok(mut slot) = self.read[i].lock() {
                *slot = Some(read);
            }
        }
    }

    /// Leaves the pieces nobody has taken unread.
    fn close(&self) {
        if let Ok(mut untaken) = self.untaken.lock() {
            untaken.end = untaken.start;
        }
    }
}

/// One piece's servers: server after server from `from` while they start before `until`,
/// up to the array's end or a server it cannot read (the first thread reads that one and
/// words the error). What it reads is used only if the first thread's reading arrives at
/// `from` exactly: then `from` starts an element, and these are the servers it would have
/// read there itself.
fn read_piece<'a>(c: &mut Cursor<'a>, from: usize, until: usize) -> PieceServers<'a> {
    c.pos = from;
    let mut read = PieceServers { end: from, ..PieceServers::default() };
    while c.peek() == Some(b'{') && c.pos < until {
        let Ok(raw) = c.server_onto(&mut read.servers) else { break };
        read.raws.push(raw);
        read.end = c.pos;
        if read.servers.len() == 1 {
            reserve_for_rest(&mut read.raws, &mut read.servers, until.saturating_sub(c.pos));
        }
        if !c.eat(b',') {
            break;
        }
    }
    read
}

/// Where the first `{` that follows `},` (and nothing but whitespace, as in pretty-printed
/// JSON) is in `text`: where an element of an array of objects would start.
fn object_after_comma(text: &[u8]) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(text.get(from..)?, b"},") {
        let after = from + at + 2;
        let next = after + text.get(after..)?.iter().position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))?;
        if text[next] == b'{' {
            return Some(next);
        }
        from = after;
    }
    None
}

/// The first thread's hold on the pieces: the other thread while it may still be reading,
/// and the first piece the first thread has neither taken nor passed.
struct Ahead<'s, 'a> {
    pieces: &'s Pieces<'a>,
    other: Option<std::thread::ScopedJoinHandle<'s, ()>>,
    next: usize,
}

/// The `servers` member as read in the one pass over the body.
enum ServersMember<'a> {
    /// An array: each server's text and typed form, or the problems of its elements.
    Array(Result<(Vec<&'a str>, Vec<Server<'a>>), Vec<FieldError>>),
    /// Something else.
    NotArray,
}

/// The top-level object and the servers array are walked with a [`Cursor`] so that each
/// server is read once, straight into its typed form, while its text is remembered.
impl<'a> Cursor<'a> {
    /// The server object at the cursor, added to `servers`, and its text: read field by
    /// field with the fast readers where they apply; a server they give up on is read
    /// again by serde_json (which also words any error; nothing is added then). Built in
    /// its place in the list: a `Server` is over a kilobyte, and returning it up through
    /// the readers copied it four times.
    fn server_onto(&mut self, servers: &mut Vec<Server<'a>>) -> serde_json::Result<&'a str> {
        self.peek();
        let start = self.pos;
        let at = servers.len();
        servers.push(Server::default());
        let server = &mut servers[at];
        if self.server_fast(server).is_none() {
            self.pos = start;
            match self.value::<Server>() {
                Ok((read, _)) => *server = read,
                Err(e) => {
                    servers.truncate(at);
                    return Err(e);
                }
            }
        }
        // While the server's data is at hand.
        server.schema_violation();
        Ok(&self.text[start..self.pos])
    }

    /// Reads the server at the cursor into `s` (a default server), or gives up (`None`,
    /// `s` then partly filled).
    fn server_fast(&mut self, s: &mut Server<'a>) -> Option<()> {
        if !self.eat(b'{') {
            return None;
        }
        if self.eat(b'}') {
            return Some(());
        }
        loop {
            let key = self.key()?;
            // A field given twice is an error serde_json reports: read values are never
            // `undefined` nor `Absent`, so a slot that is not is one read before.
            if let Some(slot) = s.js_field_mut(key) {
                if !slot.is_undefined() {
                    return None;
                }
                *slot = self.js().ok()?;
            } else {
                match key {
                    "sysinfo" if matches!(s.sysinfo, Shape::Absent) => s.sysinfo = read_sysinfo(self).ok()?,
                    "vms" if matches!(s.vms, Shape::Absent) => s.vms = read_vms(self).ok()?,
                    "sysinfo" | "vms" => return None,
                    _ => self.skip().ok()?,
                }
            }
            if self.eat(b'}') {
                return Some(());
            }
            if !self.eat(b',') {
                return None;
            }
        }
    }

    /// The servers array, the cursor being at its `[`. A big one is read by two threads
    /// where there are two cores: see [`PIECE`].
    fn servers(&mut self) -> serde_json::Result<ServersMember<'a>> {
        self.expect(b'[')?;
        self.servers_after(Vec::new(), Vec::new())
    }

    /// The rest of the servers array, after the servers read already (the cursor after the
    /// last of them).
    fn servers_after(&mut self, raws: Vec<&'a str>, servers: Vec<Server<'a>>) -> serde_json::Result<ServersMember<'a>> {
        let Some(starts) = self.piece_starts() else { return self.servers_read(raws, servers, None) };
        let pieces = Pieces::new(starts);
        let text = self.text;
        // A thread started here may be put on this one's CPU and wait for it there: it moves
        // off first, and this one waits until it has (`crate::placement`).
        let apart = crate::placement::Apart::new();
        std::thread::scope(|scope| {
            let other = scope.spawn(|| {
                apart.move_off();
                pieces.read_from_back(&mut Cursor::new(text))
            });
            apart.wait();
            let read = self.servers_read(raws, servers, Some(Ahead { pieces: &pieces, other: Some(other), next: 0 }));
            pieces.close();
            read
        })
    }

    /// Where the pieces of the servers array after the first would start (see [`PIECE`]):
    /// at a server (after `},{` or `}, {`) every [`PIECE`] bytes or so through the rest of
    /// the body.
    fn piece_starts(&self) -> Option<Vec<usize>> {
        if !self.big_enough_for_pieces() {
            return None;
        }
        let rest = self.text.len() - self.pos;
        let count = (rest / PIECE).max(2);
        let bytes = self.text.as_bytes();
        let mut starts: Vec<usize> = Vec::with_capacity(count);
        for k in 1..count {
            let nominal = (self.pos + k * (rest / count)).max(starts.last().map_or(0, |&s| s + 1));
            // Looked for within a piece of the mark only: a search to the end of a 50 MB
            // body from each mark would cost more than the pieces save.
            let near = bytes.get(nominal..bytes.len().min(nominal + PIECE)).unwrap_or_default();
            if let Some(found) = object_after_comma(near) {
                starts.push(nominal + found);
            }
        }
        (!starts.is_empty()).then_some(starts)
    }

    /// Whether the rest of the body is big enough to be read in pieces by two threads, and
    /// the machine has a second core.
    fn big_enough_for_pieces(&self) -> bool {
        crate::cores().unwrap_or(1) >= 2 && self.text.len() - self.pos >= SPLIT_FROM
    }

    /// The piece the other thread read at the cursor, if one starts exactly there and it
    /// read any server. Until the other thread takes a piece this thread arrives at, every
    /// piece it arrives at (or passes) is its own to read in place; from then on, the rest
    /// are the other thread's, once it is done.
    fn piece_at(&mut self, ahead: &mut Ahead<'_, 'a>) -> Option<PieceServers<'a>> {
        let starts = &ahead.pieces.starts;
        if ahead.other.is_some() {
            while starts.get(ahead.next).is_some_and(|&start| start <= self.pos) {
                if !ahead.pieces.take_front() {
                    // A panic there left its pieces unread: this thread reads them instead.
                    let _ = ahead.other.take().map(|other| other.join());
                    break;
                }
                ahead.next += 1;
            }
            if ahead.other.is_some() {
                return None;
            }
        }
        // Pieces that did not start at an element: this reading went past them.
        while starts.get(ahead.next).is_some_and(|&start| start < self.pos) {
            ahead.next += 1;
        }
        if starts.get(ahead.next) != Some(&self.pos) {
            return None;
        }
        let read = ahead.pieces.read.get(ahead.next)?.lock().ok()?.take();
        ahead.next += 1;
        read.filter(|read| !read.servers.is_empty())
    }

    /// The servers array's elements from the cursor on; `ahead`, the pieces the other thread
    /// reads, each taken when this reading arrives at its start exactly (then it starts an
    /// element, so its servers are what this thread would have read).
    fn servers_read(
        &mut self,
        mut raws: Vec<&'a str>,
        mut servers: Vec<Server<'a>>,
        mut ahead: Option<Ahead<'_, 'a>>,
    ) -> serde_json::Result<ServersMember<'a>> {
        let mut errors = Vec::new();
        let mut i = servers.len();
        if i > 0 {
            reserve_for_rest(&mut raws, &mut servers, self.text.len() - self.pos);
        }
        while !self.eat(b']') {
            if i > 0 {
                self.expect(b',')?;
            }
            let next = self.peek();
            if let Some(mut read) = ahead.as_mut().and_then(|ahead| self.piece_at(ahead)) {
                i += read.servers.len();
                raws.extend(read.raws);
                servers.append(&mut read.servers);
                // The emptied array may be in the other thread's heap, which nothing fills.
                super::pages::free_now(read.servers);
                self.pos = read.end;
                continue;
            }
            let field = || format!("servers[{i}]");
            if next == Some(b'{') {
                match self.server_onto(&mut servers) {
                    Ok(raw) => {
                        raws.push(raw);
                        if servers.len() == 1 {
                            reserve_for_rest(&mut raws, &mut servers, self.text.len() - self.pos);
                        }
                    }
                    // Well-formed JSON the model cannot take (a repeated field).
                    Err(e) if e.classify() == serde_json::error::Category::Data => {
                        errors.push(FieldError::unreadable(field(), &e));
                        self.value::<serde::de::IgnoredAny>()?;
                    }
                    Err(e) => return Err(e),
                }
            } else {
                let (raw, _) = self.value::<&RawValue>()?;
                errors.push(not_object(&field(), ParamType::of(Some(raw))));
            }
            i += 1;
        }
        servers.shrink_to_fit();
        Ok(ServersMember::Array(if errors.is_empty() { Ok((raws, servers)) } else { Err(errors) }))
    }

    /// The top-level object: every member but `servers` as raw JSON (a repeated key keeps
    /// its first position and its last value, as `JSON.parse` does).
    fn allocate_body(&mut self) -> serde_json::Result<Walked<'a>> {
        self.expect(b'{')?;
        self.allocate_body_members(TopLevel::new(), None, true)
    }

    /// The top-level members from the cursor on, after `first` (whether none came yet).
    fn allocate_body_members(
        &mut self,
        mut top: TopLevel<'a>,
        mut servers: Option<ServersMember<'a>>,
        mut first: bool,
    ) -> serde_json::Result<Walked<'a>> {
        while !self.eat(b'}') {
            if !first {
                self.expect(b',')?;
            }
            first = false;
            if self.peek() != Some(b'"') {
                return Err(serde::de::Error::custom("expected a key"));
            }
            let (key, _) = self.value::<String>()?;
            self.expect(b':')?;
            if key == "servers" {
                servers = Some(if self.peek() == Some(b'[') {
                    self.servers()?
                } else {
                    self.value::<&RawValue>()?;
                    ServersMember::NotArray
                });
            } else {
                let (raw, _) = self.value::<&RawValue>()?;
                top.insert(key, raw);
            }
        }
        if self.peek().is_some() {
            return Err(serde::de::Error::custom("trailing characters"));
        }
        Ok((top, servers))
    }
}

/// Why a body that could not be walked is malformed, worded as serde_json words it.
fn malformed(body: &[u8], walk_error: serde_json::Error) -> BodyError {
    match top_level(body) {
        Err(e) => e,
        Ok(_) => BodyError::Malformed(format!("body is not a JSON object: {walk_error}")),
    }
}

/// A number without a fraction, in `u64`'s range, written as a float (`7.0`, `7e2`).
fn integral(text: &str) -> Option<u64> {
    let f = json::from_str::<f64>(text).ok()?;
    (f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64)
}

/// Reads the tickets; a ticket that is not an object gets `validateTickets`' message.
fn parse_tickets(raw: &RawValue, errors: &mut Vec<FieldError>) -> Option<Vec<Ticket>> {
    let raws: Vec<&RawValue> = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        Err(e) => {
            errors.push(FieldError::unreadable("tickets", &e));
            return None;
        }
    };
    let mut tickets = Vec::with_capacity(raws.len());
    for r in raws {
        if ParamType::of(Some(r)) != ParamType::Object {
            errors.push(FieldError::invalid("tickets", r#"ticket uuid "undefined" - "ticket" has invalid type"#));
            return None;
        }
        tickets.push(parse_typed::<Ticket>("tickets", r, errors)?);
    }
    Some(tickets)
}

/// Reads a `POST /allocate` body: `{servers, vm, image|img, package|pkg?, tickets?,
/// nic_tags?, nic_tag_requirements?, seed?}`. Top-level `nic_tags` and
/// `nic_tag_requirements` are copied into the VM, as CNAPI did.
pub fn parse_allocate_body(body: &[u8]) -> Result<AllocateBody<'_>, BodyError> {
    let text = crate::scan::utf8_in_halves(body).map_err(|e| malformed(body, serde::de::Error::custom(e)))?;
    parse_allocate_text(text)
}

/// [`parse_allocate_body`] of a body already known to be text.
pub fn parse_allocate_text(text: &str) -> Result<AllocateBody<'_>, BodyError> {
    let walked = Cursor::new(text).allocate_body().map_err(|e| malformed(text.as_bytes(), e))?;
    read_allocate_body(walked)
}

/// [`parse_allocate_body`] of a body still arriving: its servers are read as they come, so
/// that little is left to do when the last byte is in. The answer is the same: anything
/// unusual (`servers` not first, an invalid server, bad JSON) waits for the whole body and
/// reads it as [`parse_allocate_body`] does.
pub fn parse_arriving_allocate_body(body: &Arriving) -> Result<AllocateBody<'_>, BodyError> {
    if let Some(walked) = walk_arriving(body) {
        return read_allocate_body(walked);
    }
    match body.complete() {
        Some(bytes) => parse_allocate_body(bytes),
        None => Err(BodyError::Malformed("the body did not arrive whole".into())),
    }
}

/// The typed request from the walked top level.
fn read_allocate_body(walked: Walked<'_>) -> Result<AllocateBody<'_>, BodyError> {
    let (top, servers_member) = walked;
    let get = |names: &[&str]| names.iter().find_map(|n| top.get(*n).copied());
    let mut errors = Vec::new();

    let servers = match servers_member {
        Some(ServersMember::Array(Ok(servers))) => Some(servers),
        Some(ServersMember::Array(Err(problems))) => {
            errors.extend(problems);
            None
        }
        Some(ServersMember::NotArray) | None => {
            errors.push(not_array("servers"));
            None
        }
    };
    let mut object = |field: &str, names: &[&str], required: bool| -> Option<&RawValue> {
        let raw = get(names);
        match ParamType::of(raw) {
            ParamType::Object => raw,
            ParamType::Undefined if !required => None,
            t => {
                errors.push(not_object(field, t));
                None
            }
        }
    };
    let package_raw = object("package", &["package", "pkg"], false);
    let image_raw = object("image", &["image", "img"], true);
    let batch = BatchFields { vms: get(&["vms"]), count: get(&["count"]), all_or_nothing: get(&["all_or_nothing"]) };
    // A batch of `vms` needs no `vm` (crate::batch checks which members it has).
    let vm_raw = object("vm", &["vm"], !batch.is_batch());
    let mut array = |field: &str| -> Option<&RawValue> {
        let raw = get(&[field]);
        match ParamType::of(raw) {
            ParamType::Array => raw,
            ParamType::Undefined => None,
            _ => {
                errors.push(not_array(field));
                None
            }
        }
    };
    let nic_tag_requirements = array("nic_tag_requirements");
    let nic_tags = array("nic_tags");
    let tickets_raw = array("tickets");

    let seed = match get(&["seed"]) {
        None => None,
        // JSON has one number type: `7.0` and `7e2` are integers too.
        Some(raw) => match serde_json::from_str::<u64>(raw.get()).ok().or_else(|| integral(raw.get())) {
            Some(s) => Some(s),
            None => {
                errors.push(FieldError::invalid("seed", "must be a non-negative integer"));
                None
            }
        },
    };

    let package = package_raw.and_then(|r| parse_typed::<Package>("package", r, &mut errors));
    let image = image_raw.and_then(|r| parse_typed::<Image>("image", r, &mut errors));
    let mut vm = vm_raw.and_then(|r| parse_typed::<VmPayload>("vm", r, &mut errors));
    let tickets = match tickets_raw {
        Some(r) => parse_tickets(r, &mut errors),
        None => Some(Vec::new()),
    };

    if !errors.is_empty() {
        return Err(BodyError::Invalid(errors));
    }
    // A batch of `vms` takes nothing from `vm` (the top-level `nic_tags` still apply).
    if batch.vms.is_some() || (batch.is_batch() && vm.is_none()) {
        vm = Some(VmPayload::default());
    }
    let (Some((raw_servers, servers)), Some(image), Some(vm_payload), Some(tickets)) =
        (servers, image, vm.as_mut(), tickets)
    else {
        return Err(BodyError::Malformed("body could not be read".into()));
    };
    if let Some(r) = nic_tag_requirements {
        vm_payload.nic_tag_requirements = json::from_str::<Js>(r.get()).unwrap_or_default();
    }
    let vm_own_nic_tags = nic_tags
        .map(|r| std::mem::replace(&mut vm_payload.nic_tags, json::from_str::<Js>(r.get()).unwrap_or_default()));
    let vm = vm.unwrap_or_default();
    let raw = RawParams {
        vm: vm_raw.map(RawValue::get),
        image: image_raw.map(RawValue::get),
        package: package_raw.map(RawValue::get),
        tickets: tickets_raw.map(RawValue::get),
    };
    Ok(AllocateBody { raw_servers, servers, vm, image, package, tickets, seed, raw, batch, vm_own_nic_tags })
}

/// A `POST /capacity` body: the servers (each one's text and typed form) and, when the body
/// is an object, its other members as given (`packages`, `vm`, `image`, `exact`).
#[derive(Debug)]
pub struct CapacityBody<'a> {
    pub raw_servers: Vec<&'a str>,
    pub servers: Vec<Server<'a>>,
    pub members: IndexMap<String, &'a RawValue>,
}

/// Reads a `POST /capacity` body: `{servers: [...]}` or a bare array of servers.
pub fn parse_capacity_body(body: &[u8]) -> Result<(Vec<&str>, Vec<Server<'_>>), BodyError> {
    parse_capacity_request(body).map(|b| (b.raw_servers, b.servers))
}

/// [`parse_capacity_body`] with the body's other members: one walk with the fast readers, as
/// `/allocate` reads its body; anything they do not take (bad JSON, a bad server, `servers`
/// not an array) is read again by [`parse_capacity_plain`], which words the error.
pub fn parse_capacity_request(body: &[u8]) -> Result<CapacityBody<'_>, BodyError> {
    match crate::scan::utf8_in_halves(body).ok().and_then(capacity_fast) {
        Some(read) => Ok(read),
        None => parse_capacity_plain(body),
    }
}

/// [`parse_capacity_request`] of a body already known to be text.
pub fn parse_capacity_text(text: &str) -> Result<CapacityBody<'_>, BodyError> {
    match capacity_fast(text) {
        Some(read) => Ok(read),
        None => parse_capacity_plain(text.as_bytes()),
    }
}

/// [`parse_capacity_request`] of a body still arriving: `{"servers": [...], ...}` has its
/// servers read as they come, as `/allocate`'s body does ([`parse_arriving_allocate_body`]);
/// anything else (a bare array, `servers` not first, anything unusual) waits for the whole
/// body and is read as [`parse_capacity_request`] reads it.
pub fn parse_arriving_capacity_body(body: &Arriving) -> Result<CapacityBody<'_>, BodyError> {
    if let Some((members, Some(ServersMember::Array(Ok((raw_servers, servers)))))) = walk_arriving(body) {
        return Ok(CapacityBody { raw_servers, servers, members });
    }
    match body.complete() {
        Some(bytes) => parse_capacity_request(bytes),
        None => Err(BodyError::Malformed("the body did not arrive whole".into())),
    }
}

fn capacity_fast(text: &str) -> Option<CapacityBody<'_>> {
    let mut cursor = Cursor::new(text);
    let (servers, members) = match cursor.peek()? {
        b'[' => {
            let servers = cursor.servers().ok()?;
            if cursor.peek().is_some() {
                return None;
            }
            (servers, TopLevel::new())
        }
        b'{' => {
            let (top, servers) = cursor.allocate_body().ok()?;
            (servers?, top)
        }
        _ => return None,
    };
    match servers {
        ServersMember::Array(Ok((raw_servers, servers))) => Some(CapacityBody { raw_servers, servers, members }),
        _ => None,
    }
}

/// The plain reader of a `/capacity` body (serde_json throughout): the fast walk's oracle,
/// and the wording of every error.
pub fn parse_capacity_plain(body: &[u8]) -> Result<CapacityBody<'_>, BodyError> {
    let root: &RawValue =
        serde_json::from_slice(body).map_err(|e| BodyError::Malformed(format!("body is not JSON: {e}")))?;
    let mut errors = Vec::new();
    let mut members = TopLevel::new();
    let parsed = match ParamType::of(Some(root)) {
        ParamType::Array => parse_servers("servers", root, &mut errors),
        ParamType::Object => {
            members = top_level(body)?;
            match members.shift_remove("servers") {
                Some(r) if ParamType::of(Some(r)) == ParamType::Array => parse_servers("servers", r, &mut errors),
                _ => {
                    errors.push(not_array("servers"));
                    None
                }
            }
        }
        _ => return Err(BodyError::Malformed("body must be an array of servers or {\"servers\": [...]}".into())),
    };
    match parsed {
        Some((raw_servers, servers)) if errors.is_empty() => Ok(CapacityBody { raw_servers, servers, members }),
        _ => Err(BodyError::Invalid(errors)),
    }
}

/// The validated text of an arriving body, growing as bytes come.
struct ArrivingText<'a> {
    body: &'a Arriving,
    valid: usize,
    /// Whether some text was given already (a call that adds nothing to it gives `None`).
    given: bool,
    /// Whether the text given last is the whole body.
    complete: bool,
}

impl<'a> ArrivingText<'a> {
    /// The text once at least `target` bytes are in, or all of it once the body is
    /// complete; `None` when it cannot grow (all of it was given already, or the body is
    /// broken or not UTF-8).
    fn grow(&mut self, target: usize) -> Option<&'a str> {
        let mut have = self.body.received().len();
        while have < target {
            match self.body.wait_beyond(have) {
                Progress::More(n) => have = n,
                Progress::Complete(_) => break,
                Progress::Broken => return None,
            }
        }
        let before = self.valid;
        // Asked before the bytes are taken: if it was complete then, they are all of it.
        let complete = self.body.is_complete();
        let (bytes, ascii) = self.body.received_ascii();
        // Text the writer saw to be ASCII needs no check; it ends on a character boundary.
        self.valid = self.valid.max(ascii);
        match crate::scan::utf8(&bytes[self.valid..]) {
            Ok(_) => self.valid = bytes.len(),
            // A character cut by the end of what came: up to it.
            Err(e) if e.error_len().is_none() => self.valid += e.valid_up_to(),
            Err(_) => return None,
        }
        // Nothing new, unless the body was finished after its last bytes were taken: the
        // same text again, now known to be all of it.
        let now_complete = complete && self.valid == bytes.len();
        if self.valid == before && self.given && (self.complete || !now_complete) {
            return None;
        }
        self.given = true;
        self.complete = now_complete;
        // SAFETY: `bytes[..valid]` was checked as UTF-8 piece by piece, each piece ending on
        // a character boundary, or seen to be ASCII as it was copied in; those bytes never
        // change.
        Some(unsafe { std::str::from_utf8_unchecked(&bytes[..self.valid]) })
    }
}

/// The next element of the servers array, added to `servers`: its text, `Some(None)` at the
/// array's end, `None` when it cannot be read (cut short, or not an ordinary server).
fn next_server<'a>(c: &mut Cursor<'a>, servers: &mut Vec<Server<'a>>) -> Option<Option<&'a str>> {
    if c.eat(b']') {
        return Some(None);
    }
    if !servers.is_empty() && !c.eat(b',') {
        return None;
    }
    if c.peek() != Some(b'{') {
        return None;
    }
    c.server_onto(servers).ok().map(Some)
}

/// Walks an arriving body whose first member is `servers`, reading each server as soon as
/// its bytes are in; `None` for anything else (the caller then reads the whole body).
fn walk_arriving(body: &Arriving) -> Option<Walked<'_>> {
    let mut text = ArrivingText { body, valid: 0, given: false, complete: false };
    let mut c = Cursor::new(text.grow(1)?);
    // `{"servers": [`, usually in the first frame.
    loop {
        c.pos = 0;
        let head = c.eat(b'{') && c.key() == Some("servers") && c.peek() == Some(b'[');
        if head {
            break;
        }
        if c.text.len() > 64 {
            return None;
        }
        c.text = text.grow(c.text.len() + 1)?;
    }
    c.pos += 1;
    let (mut raws, mut servers) = (Vec::new(), Vec::new());
    loop {
        let start = c.pos;
        let mut attempt = Cursor {
            text: c.text,
            pos: start,
            vm_shape: std::mem::take(&mut c.vm_shape),
            strings: std::mem::take(&mut c.strings),
        };
        let next = next_server(&mut attempt, &mut servers);
        (c.vm_shape, c.strings) = (attempt.vm_shape, attempt.strings);
        match next {
            Some(Some(raw)) => {
                raws.push(raw);
                c.pos = attempt.pos;
                if servers.len() == 1 {
                    reserve_for_rest(&mut raws, &mut servers, body.declared_len().saturating_sub(c.pos));
                }
                // All of it is here: the rest is read as a whole body's servers are (by two
                // threads, when it is big).
                if !text.complete && body.is_complete() {
                    c.text = text.grow(usize::MAX)?;
                }
                if text.complete && c.big_enough_for_pieces() {
                    return match c.servers_after(raws, servers) {
                        Ok(servers @ ServersMember::Array(Ok(_))) => {
                            c.allocate_body_members(TopLevel::new(), Some(servers), false).ok()
                        }
                        _ => None,
                    };
                }
            }
            Some(None) => {
                c.pos = attempt.pos;
                break;
            }
            // Cut short, most likely: wait for as much again as this element has so far, so
            // that even a huge server is retried only a few times.
            None => c.text = text.grow(c.text.len() + (c.text.len() - start).max(4096))?,
        }
    }
    servers.shrink_to_fit();
    // The rest (vm, image, package, tickets) is small: read it once the body is whole. Its
    // bytes up to `text.valid` were checked as they came; only the rest is checked here.
    let whole = body.complete()?;
    let checked = text.valid.max(body.received_ascii().1);
    crate::scan::utf8(whole.get(checked..)?).ok()?;
    // SAFETY: `whole[..checked]` was checked as UTF-8 piece by piece, ending on a character
    // boundary (`ArrivingText::grow`), or seen to be ASCII as it was copied in; the rest
    // just now.
    let whole = unsafe { std::str::from_utf8_unchecked(whole) };
    let mut c = Cursor::at(whole, c.pos);
    c.allocate_body_members(TopLevel::new(), Some(ServersMember::Array(Ok((raws, servers)))), false).ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `read` of `body` as another thread writes it in pieces of `piece` bytes (or
    /// abandons it after `cut` bytes).
    fn while_arriving<R>(body: &[u8], piece: usize, cut: Option<usize>, read: impl FnOnce(&Arriving) -> R) -> R {
        let (arriving, mut writer) = Arriving::new(body.len());
        std::thread::scope(|scope| {
            scope.spawn(move || {
                let end = cut.unwrap_or(body.len());
                for chunk in body[..end].chunks(piece) {
                    writer.push(chunk);
                    std::thread::yield_now();
                }
                if cut.is_none() {
                    writer.finish();
                }
            });
            read(&arriving)
        })
    }

    /// `parse_arriving_allocate_body` of `body` written in pieces of `piece` bytes by
    /// another thread (or abandoned after `cut` bytes), as its Debug text.
    fn arriving(body: &[u8], piece: usize, cut: Option<usize>) -> String {
        while_arriving(body, piece, cut, |arriving| format!("{:?}", parse_arriving_allocate_body(arriving)))
    }

    /// Whether the servers of `body`, written in pieces, were read while it arrived.
    fn streamed(body: &[u8], piece: usize) -> bool {
        while_arriving(body, piece, None, |arriving| walk_arriving(arriving).is_some())
    }

    fn whole(body: &[u8]) -> String {
        format!("{:?}", parse_allocate_body(body))
    }

    fn case_bodies() -> Vec<Vec<u8>> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/cases");
        let mut bodies = Vec::new();
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let case: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            bodies.push(serde_json::to_vec(&case["request"]).unwrap_or_default());
        }
        assert!(bodies.len() > 10, "the vendored cases are there");
        bodies
    }

    #[test]
    fn an_arriving_body_reads_as_the_whole_one() {
        let mut streamed_bodies = 0;
        for body in case_bodies() {
            for piece in [1usize, 7, 100, 4096, 1 << 20] {
                assert_eq!(arriving(&body, piece, None), whole(&body), "pieces of {piece}");
            }
            let servers_first = body.starts_with(br#"{"servers":"#);
            if servers_first && parse_allocate_body(&body).is_ok() {
                assert!(streamed(&body, 100), "{}", String::from_utf8_lossy(&body[..200.min(body.len())]));
                streamed_bodies += 1;
            }
        }
        assert!(streamed_bodies > 10, "only {streamed_bodies} bodies were read while arriving");
    }

    #[test]
    fn a_body_finished_after_its_last_bytes_were_taken_is_then_whole() {
        let body = br#"{"servers":[{"uuid":"a"}],"vm":{},"image":{}}"#;
        let (arriving, mut writer) = Arriving::new(body.len());
        writer.push(body);
        let mut text = ArrivingText { body: &arriving, valid: 0, given: false, complete: false };
        assert_eq!(text.grow(body.len()).map(str::len), Some(body.len()));
        assert!(!text.complete, "not finished yet");
        writer.finish();
        assert_eq!(text.grow(usize::MAX).map(str::len), Some(body.len()), "the same bytes, now all of it");
        assert!(text.complete);
        assert_eq!(text.grow(usize::MAX), None, "nothing more to come");
    }

    #[test]
    fn unusual_arriving_bodies_read_as_whole_ones() {
        let ok =
            br#"{"servers": [{"uuid": "a"}, {"uuid": "b", "vms": {"v": {"owner_uuid": 1}}}], "vm": {}, "image": {}}"#;
        let bodies: Vec<&[u8]> = vec![
            ok,
            br#"{"vm": {}, "servers": [{"uuid": "a"}], "image": {}}"#,
            br#"{"servers": [{"uuid": "a"}, 7], "vm": {}, "image": {}}"#,
            br#"{"servers": [{"uuid": "a"} {"uuid": "b"}], "vm": {}, "image": {}}"#,
            br#"{"servers": [], "vm": {}, "image": {}, "servers": [{"uuid": "c"}]}"#,
            b"{\"servers\": [{\"uuid\": \"\\u00e9t\\u00e9\", \"hostname\": \"\xc3\xa9t\xc3\xa9\"}], \"vm\": {}, \"image\": {}}",
            br#"{"servers": [{"uuid": "a"}], "vm": {}, "image": {}"#,
            b"",
            b"   ",
            b"{\"servers\": [{\"uuid\": \"\xff\"}], \"vm\": {}, \"image\": {}}",
        ];
        for body in bodies {
            for piece in [1usize, 3, 16, 1 << 20] {
                assert_eq!(
                    arriving(body, piece, None),
                    whole(body),
                    "{} in pieces of {piece}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        // Text past 127 (valid UTF-8 or not) after a long ASCII prefix, at offsets that put
        // it in the head, a 64-byte block or the tail of what one piece copies.
        let name = "h".repeat(300);
        for pad in [0usize, 1, 15, 33, 64, 127] {
            for odd in [&b"\xc3\xa9"[..], b"\xff", b"\xe2\x82"] {
                let mut body = format!(
                    r#"{{"servers": [{{"uuid": "a", "hostname": "{name}"}}, {{"uuid": "b", "hostname": "{}"#,
                    "p".repeat(pad)
                )
                .into_bytes();
                body.extend_from_slice(odd);
                body.extend_from_slice(format!(r#"{name}"}}], "vm": {{}}, "image": {{}}}}"#).as_bytes());
                for piece in [1usize, 64, 100, 4096] {
                    assert_eq!(arriving(&body, piece, None), whole(&body), "{pad} {odd:?} in pieces of {piece}");
                }
            }
        }
        // A body that stops arriving is an error, whatever was read of it.
        for cut in [0, 5, 30, ok.len() - 1] {
            let read = arriving(ok, 4, Some(cut));
            assert!(read.starts_with("Err(Malformed"), "{read}");
        }
    }

    /// The field list a derived reader passes to `deserialize_struct`.
    pub(crate) fn serde_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
        struct Probe;
        #[derive(Debug)]
        struct Fields(&'static [&'static str]);
        impl std::fmt::Display for Fields {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }
        impl std::error::Error for Fields {}
        impl serde::de::Error for Fields {
            fn custom<M: std::fmt::Display>(_: M) -> Self {
                Fields(&[])
            }
        }
        impl<'de> serde::Deserializer<'de> for Probe {
            type Error = Fields;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Fields> {
                Err(Fields(&[]))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Fields> {
                Err(Fields(fields))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
                unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
            }
        }
        match T::deserialize(Probe) {
            Err(Fields(fields)) => fields,
            Ok(_) => &[],
        }
    }

    #[test]
    fn the_fast_reader_knows_every_server_field() {
        assert_eq!(serde_fields::<Server>(), Server::FIELDS);
    }

    /// Servers of every odd shape: read field by field (with fallbacks), they come out as
    /// serde_json reads them, or the fast reader gives up and serde_json reads them.
    #[test]
    fn fast_and_serde_readers_agree() {
        let owner = "930896af-bf8c-48d4-885c-6573a94b1853";
        let vm = |extra: &str| {
            format!(r#"{{"uuid":"{owner}","owner_uuid":"{owner}","state":"running","max_physical_memory":512{extra}}}"#)
        };
        let other = format!(
            r#"{{"uuid":"0{}","owner_uuid":"{owner}","state":"stopped","max_physical_memory":1}}"#,
            &owner[1..]
        );
        let vms = [
            format!(r#"{{"a":{}}}"#, vm("")),
            format!(
                r#"{{"a":{}, "b": {}}}"#,
                vm(r#","quota":10,"cpu_cap":100,"brand":"lx","alias":"x""#),
                vm(r#","last_modified":"2022""#)
            ),
            format!(r#"{{"a":{},"a":{}}}"#, vm(r#","alias":"one""#), vm(r#","alias":"two""#)),
            format!(r#"{{"a":{}}}"#, vm(r#","tags":{"k":1}"#)),
            format!(r#"{{"a":{}}}"#, vm(r#","quota":1.5,"cpu_cap":-1"#)),
            format!(r#"{{"a":{}}}"#, vm(r#","alias":"esc\"aped","brand":null"#)),
            format!(r#"{{"a":{}}}"#, vm(r#","uuid":"dup""#)),
            format!(r#"{{"a\"b":{},"c":5,"d":null,"e":[1]}}"#, vm("")),
            format!(r#"{{ "a" : {} , "b":{{}} }}"#, vm(r#" , "quota" : 10 "#)),
            r#"[1,2]"#.to_string(),
            r#"null"#.to_string(),
            format!(r#"{{"a":{}}}"#, vm(r#","max_physical_memory":0012"#)),
            // Keyed by its own uuid, or not; a repeated key whose values differ in uuid.
            format!(r#"{{"{owner}":{},"{owner}":{other},"b":{}}}"#, vm(""), vm("")),
            format!(r#"{{"{owner}":{other},"{owner}":{},"{owner}":7}}"#, vm("")),
            // Past the compact form: other words, −0, numbers from 2^32 − 1.
            format!(r#"{{"a":{}}}"#, vm(r#","brand":"solaris","state":"hibernating""#)),
            format!(r#"{{"a":{}}}"#, vm(r#","quota":-0,"cpu_cap":4294967295"#)),
            format!(r#"{{"a":{}}}"#, vm(r#","quota":4294967294,"cpu_cap":4294967294,"brand":"kvm""#)),
        ];
        let mut bodies: Vec<String> = vms
            .iter()
            .map(|v| format!(r#"{{"uuid":"s","status":"running","memory_total_bytes":1e3,"traits":{{}},"vms":{v}}}"#))
            .collect();
        bodies.push(r#"{"uuid":"s","uuid":"t"}"#.into());
        bodies.push(r#"{"uuid":"s","unknown":{"x":[1,"a"]},"sysinfo":{"CPU Total Cores":8},"vms":{}}"#.into());
        bodies.push(r#"{}"#.into());
        bodies.push(r#"{"uuid":"s\u0041","status":12345678901234567,"setup":true,"reserved":0}"#.into());
        // What JSON.parse reads and serde_json does not: lone surrogates, ±Infinity.
        bodies
            .push(r#"{"uuid":"s\ud800","hostname":"h\uDC00\u0041","k\udbff":1,"memory_available_bytes":1e999}"#.into());
        bodies.push(format!(
            r#"{{"uuid":"s","ram":-1e400,"vms":{{"\udfff":{}}}}}"#,
            vm(r#","alias":"a\ud800","quota":1e999"#)
        ));
        bodies.push(r#"{"uuid":"s","sysinfo":{"Network Interfaces":{"e\ud800":{"NIC Names":["\udc00"]}}},"traits":{"\ud800\ud800":true}}"#.into());
        bodies.push(r#"{"uuid":"s\ud800","uuid":"t"}"#.into());
        bodies.push(r#"{"uuid":"s","memory_total_bytes":1e999,"status":"\x"}"#.into());
        for body in &bodies {
            let serde = json::from_str::<Server>(body);
            let mut c = Cursor::new(body);
            let mut read = Vec::new();
            let fast = c.server_onto(&mut read);
            assert!(read.len() == usize::from(fast.is_ok()), "{body}: a server added only when read");
            match (serde, fast) {
                (Ok(a), Ok(raw)) => {
                    let b = &read[0];
                    assert_eq!(a.schema_violation(), b.schema_violation());
                    assert_eq!(format!("{a:?}"), format!("{b:?}"), "{body}");
                    assert_eq!(raw, body.trim());
                }
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{body}"),
                (a, b) => panic!("{body}: serde {a:?}, fast {b:?}"),
            }
        }
    }

    /// Tokens that byte-level mutations splice into recorded bodies: JSON syntax, escapes
    /// (lone surrogates among them), numbers past the double range, bytes that are not UTF-8.
    const SPLICED: &[&[u8]] = &[
        b"\\ud800",
        b"\\udc00x",
        b"\\uDBFF\\uDBFF",
        b"\\udfff\\ud800",
        b"\"\\ud83d\\ude00\"",
        b"\"\\ud800\":",
        b"1e999",
        b"-1e999",
        b"1E400",
        b"-2e308",
        b"1e-999",
        b"0012",
        b"\"",
        b"\\",
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"null",
        b"\\u00e9",
        "\u{e9}".as_bytes(),
        b"\xff",
        b"\x00",
        b" ",
        b"",
    ];

    /// `body` with `edits` (position, bytes removed, token) applied in turn.
    fn mutated(body: &[u8], edits: &[(usize, usize, usize)]) -> Vec<u8> {
        let mut out = body.to_vec();
        for &(at, cut, token) in edits {
            let at = at % (out.len() + 1);
            let end = (at + cut).min(out.len());
            out.splice(at..end, SPLICED[token % SPLICED.len()].iter().copied());
        }
        out
    }

    /// Where the strings and the numbers of a JSON text start: (after each opening quote,
    /// each number's span).
    fn strings_and_numbers(body: &[u8]) -> (Vec<usize>, Vec<(usize, usize)>) {
        let (mut strings, mut numbers) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < body.len() {
            match body[i] {
                b'"' => {
                    strings.push(i + 1);
                    i += 1;
                    while i < body.len() && body[i] != b'"' {
                        i += if body[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
                b'-' | b'0'..=b'9' => {
                    let start = i;
                    while i < body.len() && matches!(body[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') {
                        i += 1;
                    }
                    numbers.push((start, i));
                }
                _ => i += 1,
            }
        }
        (strings, numbers)
    }

    /// What `JSON.parse` reads and serde_json does not, put where a body stays JSON: a lone
    /// surrogate at the start of a string (or key), a number beyond the double range.
    const JS_ONLY_STRINGS: &[&str] = &["\\ud800", "\\uDC00", "\\udbff\\udbff", "\\udfffx\\ud83d\\ude00"];
    const JS_ONLY_NUMBERS: &[&str] = &["1e999", "-1e400", "17976931348623159e292"];

    fn js_only(body: &[u8], edits: &[(usize, bool, usize)]) -> Vec<u8> {
        let mut out = body.to_vec();
        for &(pick, string, token) in edits {
            let (strings, numbers) = strings_and_numbers(&out);
            if string && !strings.is_empty() {
                let at = strings[pick % strings.len()];
                let token = JS_ONLY_STRINGS[token % JS_ONLY_STRINGS.len()];
                out.splice(at..at, token.bytes());
            } else if !numbers.is_empty() {
                let (start, end) = numbers[pick % numbers.len()];
                let token = JS_ONLY_NUMBERS[token % JS_ONLY_NUMBERS.len()];
                out.splice(start..end, token.bytes());
            }
        }
        out
    }

    #[test]
    fn bodies_json_parse_reads_are_read_by_every_reader() {
        let bodies = case_bodies();
        let mut read = 0;
        for (i, body) in bodies.iter().enumerate() {
            if whole(body).starts_with("Err(Malformed") {
                continue;
            }
            let edits: Vec<_> = (0..6).map(|k| (i * 7 + k * 13, k % 2 == 0, i + k)).collect();
            let body = js_only(body, &edits);
            let whole = parse_allocate_body(&body);
            assert!(!matches!(whole, Err(BodyError::Malformed(_))), "{whole:?}");
            read += usize::from(whole.is_ok());
            assert_eq!(arriving(&body, 100, None), format!("{whole:?}"));
        }
        assert!(read > bodies.len() / 2, "only {read} bodies were read");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// A lone surrogate or a number beyond the double range in a body every reader reads
        /// (it is never refused as not JSON), and every reader reads it alike.
        #[test]
        fn every_reader_agrees_on_what_only_json_parse_reads(
            pick in 0usize..1000,
            edits in proptest::collection::vec((0usize..1 << 20, proptest::bool::ANY, 0usize..16), 1..6),
        ) {
            let bodies = case_bodies();
            let original = &bodies[pick % bodies.len()];
            let body = js_only(original, &edits);
            let read = whole(&body);
            if !whole(original).starts_with("Err(Malformed") {
                proptest::prop_assert!(!read.starts_with("Err(Malformed"), "{}", read);
            }
            for piece in [64usize, 4096] {
                proptest::prop_assert_eq!(&arriving(&body, piece, None), &read, "pieces of {}", piece);
            }
            if let Ok(parsed) = parse_allocate_body(&body) {
                for (raw, fast) in parsed.raw_servers.iter().zip(&parsed.servers) {
                    let plain = json::from_str::<Server>(raw);
                    proptest::prop_assert!(plain.is_ok(), "plain reader refused {}: {:?}", raw, plain.err());
                    let plain = plain.map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
                    proptest::prop_assert_eq!(plain.schema_violation(), fast.schema_violation());
                    proptest::prop_assert_eq!(format!("{plain:?}"), format!("{fast:?}"));
                }
            }
        }

        /// Every reader gives the same answer on the same bytes: the whole-body reader, the
        /// reader of a body still arriving (in two piece sizes), and, for every server the
        /// fast reader read, the plain serde reader on that server's bytes.
        #[test]
        fn every_reader_agrees_on_mutated_bodies(
            pick in 0usize..1000,
            edits in proptest::collection::vec((0usize..1 << 20, 0usize..4, 0usize..64), 1..4),
        ) {
            let bodies = case_bodies();
            let body = mutated(&bodies[pick % bodies.len()], &edits);
            let read = whole(&body);
            for piece in [64usize, 4096] {
                proptest::prop_assert_eq!(&arriving(&body, piece, None), &read, "pieces of {}", piece);
            }
            if let Ok(parsed) = parse_allocate_body(&body) {
                for (raw, fast) in parsed.raw_servers.iter().zip(&parsed.servers) {
                    let plain = json::from_str::<Server>(raw);
                    proptest::prop_assert!(plain.is_ok(), "plain reader refused {}: {:?}", raw, plain.err());
                    let plain = plain.map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
                    // (The schema verdict first: it is worked out lazily, and shows in Debug.)
                    proptest::prop_assert_eq!(plain.schema_violation(), fast.schema_violation());
                    proptest::prop_assert_eq!(format!("{plain:?}"), format!("{fast:?}"));
                }
            }
        }
    }

    #[test]
    fn reports_every_type_problem_together() {
        let Err(BodyError::Invalid(errs)) = parse_allocate_body(br#"{"servers": 5, "vm": null, "nic_tags": {}}"#)
        else {
            panic!("expected invalid parameters");
        };
        let fields: Vec<_> = errs.iter().map(|e| (e.field.as_str(), e.message.as_str())).collect();
        assert_eq!(
            fields,
            vec![
                ("servers", "value was not an array"),
                ("image", "value is not an object. (was: [object Undefined])"),
                ("vm", "value is not an object. (was: [object Null])"),
                ("nic_tags", "value was not an array"),
            ]
        );
    }

    #[test]
    fn accepts_aliases_and_copies_nic_tags_into_the_vm() {
        let body = br#"{"servers": [{"uuid": "x"}], "vm": {"ram": 1}, "img": {}, "pkg": {"cpu_cap": 5},
                        "nic_tags": ["admin"]}"#;
        let parsed = parse_allocate_body(body).expect("valid body");
        assert_eq!(parsed.servers.len(), 1);
        assert_eq!(parsed.raw_servers[0], r#"{"uuid": "x"}"#);
        assert!(parsed.package.is_some());
        assert_eq!(parsed.vm.nic_tags.stringify(), r#"["admin"]"#);
    }

    #[test]
    fn a_server_that_is_not_an_object_is_named() {
        let Err(BodyError::Invalid(errs)) = parse_allocate_body(br#"{"servers": [{}, 3], "vm": {}, "image": {}}"#)
        else {
            panic!("expected invalid parameters");
        };
        assert_eq!(errs[0].field, "servers[1]");
    }

    /// The servers array read in pieces by two threads (see [`PIECE`]) and by one thread
    /// alone, as Debug text: its servers and their texts, or its errors.
    fn in_pieces_and_alone(array: &str) -> (String, String) {
        let read = |pieces: bool| {
            let mut c = Cursor::new(array);
            let member = if pieces {
                c.servers()
            } else {
                c.expect(b'[').and_then(|()| c.servers_read(Vec::new(), Vec::new(), None))
            };
            match member {
                Ok(ServersMember::Array(Ok((raws, servers)))) => format!("{raws:?} {servers:?} at {}", c.pos),
                Ok(ServersMember::Array(Err(errors))) => format!("{errors:?}"),
                Ok(ServersMember::NotArray) => "not an array".into(),
                Err(e) => e.to_string(),
            }
        };
        (read(true), read(false))
    }

    /// Pieces start after any `},{`, also inside a server, and end wherever a server cannot
    /// be read: whatever the guesses, the array reads as one thread reads it alone.
    #[test]
    fn an_array_read_in_pieces_reads_as_one_thread_reads_it() {
        let owner = "930896af-bf8c-48d4-885c-6573a94b1853";
        let server = |i: usize| {
            format!(
                r#"{{"uuid":"s{i}","nics":[{{"a":1}},{{"b":2}},{{"c":[{{}},{{}}]}}],"vms":{{"{owner}":{{"uuid":"{owner}","owner_uuid":"{owner}","state":"running","max_physical_memory":{i}}}}}}}"#
            )
        };
        let servers: Vec<String> = (0..150).map(server).collect();
        let whole = format!("[{}]", servers.join(","));
        assert!(whole.len() > 4 * SPLIT_FROM, "read in pieces");
        let (pieces, alone) = in_pieces_and_alone(&whole);
        assert!(pieces.contains(r#""s149""#), "{pieces}");
        assert_eq!(pieces, alone);
        // One element spoilt at a time, in each way: a repeated field (the server named in
        // an error), not an object, not JSON at all.
        for spoilt in [0, 1, 7, 20, 31, 45, 58, 77, 100, 120, 148, 149] {
            for bad in [r#"{"uuid":"x","uuid":"y"}"#, "7", "{]"] {
                let mut list = servers.clone();
                list[spoilt] = bad.to_string();
                let text = format!("[{}]", list.join(","));
                let (pieces, alone) = in_pieces_and_alone(&text);
                assert_eq!(pieces, alone, "server {spoilt} as {bad}");
            }
        }
        // Elements written with spaces or lines between them, as pretty-printed JSON is.
        for between in [", ", ",\n  ", " ,"] {
            let spaced = format!("[{}]", servers.join(between));
            let (pieces, alone) = in_pieces_and_alone(&spaced);
            assert_eq!(pieces, alone);
        }
    }

    #[test]
    fn a_seed_is_any_json_integer() {
        let seed = |s: &str| {
            let body = format!(r#"{{"servers":[{{}}],"vm":{{}},"image":{{}},"seed":{s}}}"#);
            parse_allocate_body(body.as_bytes()).ok().and_then(|b| b.seed)
        };
        assert_eq!(seed("7"), Some(7));
        assert_eq!(seed("7.0"), Some(7));
        assert_eq!(seed("7e2"), Some(700));
        assert_eq!(seed("7.5"), None);
        assert_eq!(seed("-1"), None);
        assert_eq!(seed("1e30"), None);
    }

    /// A `/capacity` reader's result as Debug text, the lazy schema verdicts worked out.
    fn capacity_read(read: Result<CapacityBody<'_>, BodyError>) -> String {
        if let Ok(body) = &read {
            for server in &body.servers {
                server.schema_violation();
            }
        }
        format!("{read:?}")
    }

    /// The `/capacity` body the allocation body would be, as a bare array of its servers or
    /// as the object itself.
    fn capacity_bodies(body: &[u8]) -> [Vec<u8>; 2] {
        let bare = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| serde_json::to_vec(&v["servers"]).ok())
            .unwrap_or_default();
        [bare, body.to_vec()]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

        /// The fast `/capacity` reader gives what the plain one gives, on mutated bodies and
        /// on bodies only `JSON.parse` reads.
        #[test]
        fn capacity_readers_agree(
            pick in 0usize..1000,
            edits in proptest::collection::vec((0usize..1 << 20, 0usize..4, 0usize..64), 1..4),
            js_edits in proptest::collection::vec((0usize..1 << 20, proptest::bool::ANY, 0usize..16), 1..4),
        ) {
            let bodies = case_bodies();
            let original = &bodies[pick % bodies.len()];
            for body in capacity_bodies(original).iter().flat_map(|b| [mutated(b, &edits), js_only(b, &js_edits), b.clone()]) {
                let fast = capacity_read(parse_capacity_request(&body));
                let plain = capacity_read(parse_capacity_plain(&body));
                proptest::prop_assert_eq!(capacity_arriving(&body, 4096), plain.clone());
                if let Ok(text) = std::str::from_utf8(&body) {
                    proptest::prop_assert_eq!(capacity_read(parse_capacity_text(text)), plain.clone());
                }
                proptest::prop_assert_eq!(fast, plain);
            }
        }
    }

    /// `parse_arriving_capacity_body` of `body` written in pieces of `piece` bytes by
    /// another thread, as [`capacity_read`] gives it.
    fn capacity_arriving(body: &[u8], piece: usize) -> String {
        while_arriving(body, piece, None, |arriving| capacity_read(parse_arriving_capacity_body(arriving)))
    }

    #[test]
    fn a_capacity_body_read_while_it_arrives_reads_as_a_whole_one() {
        let mut streamed = 0;
        for body in case_bodies() {
            for body in capacity_bodies(&body) {
                let plain = capacity_read(parse_capacity_plain(&body));
                for piece in [64, 4096] {
                    assert_eq!(capacity_arriving(&body, piece), plain, "pieces of {piece}");
                }
                streamed += usize::from(streamed_capacity(&body));
            }
        }
        // The object form of every case has its servers read as they come.
        assert!(streamed >= case_bodies().len(), "only {streamed} bodies were read while they arrived");
    }

    /// Whether a `/capacity` body's servers were read while it arrived.
    fn streamed_capacity(body: &[u8]) -> bool {
        body.starts_with(br#"{"servers":["#) && streamed(body, 4096)
    }

    #[test]
    fn the_fast_capacity_reader_takes_ordinary_bodies() {
        let mut fast = 0;
        for body in case_bodies() {
            for body in capacity_bodies(&body) {
                let text = std::str::from_utf8(&body).expect("the cases are text");
                fast += usize::from(capacity_fast(text).is_some());
                let plain = capacity_read(parse_capacity_plain(&body));
                assert_eq!(capacity_read(parse_capacity_request(&body)), plain);
                assert_eq!(capacity_read(parse_capacity_text(text)), plain);
            }
        }
        assert!(fast > case_bodies().len(), "the fast reader read only {fast} bodies");
    }

    #[test]
    fn capacity_takes_an_array_or_an_object() {
        assert_eq!(parse_capacity_body(br#"[{"uuid":"a"}]"#).map(|p| p.1.len()).ok(), Some(1));
        assert_eq!(parse_capacity_body(br#"{"servers":[{"uuid":"a"},{}]}"#).map(|p| p.1.len()).ok(), Some(2));
        assert!(matches!(parse_capacity_body(b"nope"), Err(BodyError::Malformed(_))));
    }
}
