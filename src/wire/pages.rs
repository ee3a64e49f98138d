//! Buffers for whole request bodies, backed by huge pages where the kernel gives them; and
//! the command line's input files, mapped rather than read when they are big.
//!
//! A body of 50 MB lands in memory the process has never touched: with 4 KiB pages that is
//! some 12,000 page faults, each zeroing its page, and on this kind of virtual machine they
//! cost more than reading the body (22 ms to read a 50 MB file into fresh pages, 6 ms into
//! huge ones). Asking for transparent huge pages (`MADV_HUGEPAGE`; the usual
//! `transparent_hugepage=madvise` setting gives them only to those who ask) makes it a few
//! dozen faults. A big buffer given back ([`recycle`]) is kept for the next big body for a
//! short while ([`KEEP`]; two of them, for a client that sends its bodies one after
//! another: [`BIG_KEPT`]): its pages are then in place already, and none of that is done
//! again. After that it is freed, so the memory goes back soon after a burst; the heap its
//! request's structures took is handed back as soon as the buffer is. A big body that finds
//! no buffer kept but one on its way back (its request answered, being freed) waits for that
//! one a moment ([`body_buffer_soon`]) rather than take fresh pages.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Bodies smaller than this stay on ordinary pages: a huge page would be mostly empty.
const HUGE_FROM: usize = 2 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// How long a buffer given back waits for the next body (or answer) before it is freed.
pub const KEEP: Duration = Duration::from_secs(2);

/// How many big buffers are kept. One request's buffer is given back only once its
/// structures are freed, a few ms after its answer has left: a client that sends the next
/// body at once (one after another, as a burst of provisions does) has that body arrive
/// before it. With one kept, the two buffers then in turn displaced each other whenever a
/// give-back came early instead, and every few requests one took fresh pages (5,000
/// servers: ~100 ms of CPU more for that request, 46 MB of huge pages zeroed on this kind
/// of machine). Two serve such a client for good; more are not needed by one at a time.
const BIG_KEPT: usize = 2;

/// How long a big body waits for a buffer on its way back before it takes fresh pages. A
/// client sending its bodies one after another has the next one arrive while the last
/// request is still being freed (~4 ms at 5,000 servers), before its buffer is back: with
/// no wait, one request in the middle of every burst took fresh pages (until two buffers
/// were kept), and faulting 46 MB of them in made it ~130 ms slower on this kind of
/// virtual machine.
const RETURN_WAIT: Duration = Duration::from_millis(25);

/// Buffers of 64 KiB to 1 MiB (a small body, a whole answer) are kept by size for the next
/// request rather than freed. glibc merges every small free block of an arena whenever a
/// block of 64 KiB or more is freed in it (`malloc_consolidate`): with a body and an answer
/// freed per request, that merging alone took 2-3% of the service's CPU under a 50-server
/// load, and the small blocks were then split again for the next request.
const POOL_FROM: usize = 64 << 10;
const POOL_TO: usize = 1 << 20;
const POOL_CLASSES: usize = (POOL_TO.trailing_zeros() - POOL_FROM.trailing_zeros() + 1) as usize;

/// The pooled size class of a buffer of exactly `capacity` bytes, if it has one.
fn pool_class(capacity: usize) -> Option<usize> {
    let pooled = capacity.is_power_of_two() && (POOL_FROM..=POOL_TO).contains(&capacity);
    pooled.then(|| (capacity.trailing_zeros() - POOL_FROM.trailing_zeros()) as usize)
}

/// Buffers given back and not yet taken again. A thread of its own frees them once they
/// have waited [`KEEP`]: each big buffer on its own clock, the pooled ones together once none
/// has been given back for that long.
struct Held {
    /// The big buffers given back (at most [`BIG_KEPT`], the latest last), and when.
    big: Vec<(Vec<u8>, Instant)>,
    /// By size class: 64 KiB, 128 KiB, ... 1 MiB.
    pooled: [Vec<Vec<u8>>; POOL_CLASSES],
    /// When a buffer was last pooled (`None`: the pool is empty).
    pooled_since: Option<Instant>,
}

impl Held {
    /// When the next buffer held is due to be freed.
    fn next_due(&self) -> Option<Instant> {
        let big = self.big.first().map(|(_, since)| *since + KEEP);
        let pooled = self.pooled_since.map(|since| since + KEEP);
        big.into_iter().chain(pooled).min()
    }

    /// The buffers that have waited long enough, taken out (to be freed outside the lock).
    fn take_expired(&mut self, now: Instant) -> (Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>) {
        let expired = self.big.partition_point(|(_, since)| now >= *since + KEEP);
        let big: Vec<Vec<u8>> = self.big.drain(..expired).map(|(b, _)| b).collect();
        let mut pooled = Vec::new();
        if self.pooled_since.is_some_and(|since| now >= since + KEEP) {
            self.pooled_since = None;
            pooled = self.pooled.iter_mut().map(std::mem::take).collect();
        }
        (big, pooled)
    }
}

struct Spare {
    held: Mutex<Held>,
    /// A big body's request has just been freed: its heap is to be handed back.
    trim: AtomicBool,
    /// Big buffers whose requests are answered and not yet freed ([`ComingBack`]).
    coming_back: AtomicUsize,
    given_back: Condvar,
    /// Whether the freeing thread runs (if it could not start, nothing is kept).
    keeps: OnceLock<bool>,
}

/// How many buffers of one size class are kept: as many as requests can be held at once by
/// default (two per core), each with its body and its answer.
fn per_class() -> usize {
    2 * crate::cores().unwrap_or(2)
}

impl Spare {
    const fn new() -> Spare {
        Spare {
            held: Mutex::new(Held {
                big: Vec::new(),
                pooled: [const { Vec::new() }; POOL_CLASSES],
                pooled_since: None,
            }),
            trim: AtomicBool::new(false),
            coming_back: AtomicUsize::new(0),
            given_back: Condvar::new(),
            keeps: OnceLock::new(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn give_back(&'static self, mut buffer: Vec<u8>) {
        let class = pool_class(buffer.capacity());
        let kept_kind = class.is_some() || is_big(buffer.capacity());
        if !kept_kind || !*self.keeps.get_or_init(|| self.start()) {
            return;
        }
        buffer.clear();
        let Some(class) = class else {
            self.trim.store(true, Ordering::Relaxed);
            let mut held = self.held();
            let oldest = (held.big.len() >= BIG_KEPT).then(|| held.big.remove(0));
            held.big.push((buffer, Instant::now()));
            drop(held);
            self.given_back.notify_one();
            drop(oldest);
            return;
        };
        let per_class = per_class();
        let mut held = self.held();
        if held.pooled[class].len() >= per_class {
            // Freed, outside the lock.
            drop(held);
            drop(buffer);
            return;
        }
        held.pooled[class].push(buffer);
        let was_empty = held.pooled_since.replace(Instant::now()).is_none();
        drop(held);
        if was_empty {
            self.given_back.notify_one();
        }
    }

    /// The latest big buffer that can hold `capacity` bytes without holding much more.
    fn take(&self, capacity: usize) -> Option<Vec<u8>> {
        let mut held = self.held();
        let fits = held.big.iter().rposition(|(b, _)| b.capacity() >= capacity && b.capacity() <= 2 * capacity)?;
        Some(held.big.remove(fits).0)
    }

    /// A pooled buffer of size class `class`, if one is kept.
    fn take_pooled(&self, class: usize) -> Option<Vec<u8>> {
        self.held().pooled[class].pop()
    }

    fn start(&'static self) -> bool {
        let free_when_old = move || {
            let mut held = self.held();
            loop {
                if self.trim.swap(false, Ordering::Relaxed) {
                    drop(held);
                    release_freed_heap();
                    held = self.held();
                }
                let now = Instant::now();
                let (big, pooled) = held.take_expired(now);
                if !big.is_empty() || !pooled.is_empty() {
                    drop(held);
                    drop(big);
                    if !pooled.is_empty() {
                        drop(pooled);
                        // What the pool held goes back to the kernel after a burst.
                        release_freed_heap();
                    }
                    held = self.held();
                    continue;
                }
                held = match held.next_due() {
                    None => self.given_back.wait(held).unwrap_or_else(|e| e.into_inner()),
                    Some(due) => {
                        self.given_back
                            .wait_timeout(held, due.saturating_duration_since(now))
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                };
            }
        };
        std::thread::Builder::new().name("dapi-spare-buffer".into()).spawn(free_when_old).is_ok()
    }
}

static SPARE: Spare = Spare::new();

/// Woken whenever a big buffer is given back or stops being on its way back.
static BIG_RETURNED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Whether a buffer is one [`Spare`] keeps for the next big body.
fn is_big(capacity: usize) -> bool {
    capacity >= HUGE_FROM && pool_class(capacity).is_none()
}

/// Whether a body's big buffer is on its way back: set once its request is answered, and
/// cleared when the buffer is given back (or kept by someone else).
#[derive(Default)]
pub struct ComingBack(AtomicBool);

impl ComingBack {
    /// The request holding a buffer of `capacity` bytes is answered: the buffer comes back
    /// as soon as the request is freed.
    pub fn answered(&self, capacity: usize) {
        if is_big(capacity) && !self.0.swap(true, Ordering::AcqRel) {
            SPARE.coming_back.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The buffer is back (or will not come back after all).
    pub fn settle(&self) {
        if self.0.swap(false, Ordering::AcqRel) {
            let _ = SPARE.coming_back.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
            BIG_RETURNED.notify_waiters();
        }
    }
}

/// Hands the allocator's free pages back to the kernel: after a big request (here, on the
/// spare-buffer thread, off the request's) and every few seconds (the stateless service).
/// glibc keeps freed memory in the arena of the thread that allocated it; the next big
/// request, parsed on other threads, would otherwise take fresh pages beside them (the peak
/// of a burst grew by a request's worth) and some stay after it.
pub fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Sets the allocator up for the service, once per process (the first call wins: the
/// command line calls it before any thread starts, so the catch-up that loads a replica is
/// already under it).
///
/// Arenas: four per core for the stateless path bound how much freed memory per-thread
/// arenas can strand, while threads rarely wait for one another's arena (with two in all, a
/// 50-server load test lost 10-20% of its throughput to that wait). A replica holds its
/// inventory for good, built and updated from whichever thread ran: one arena keeps it
/// together (5,000 servers: 88.5-89.3 -> 83.9-84.0 MiB after start-up), and its allocations,
/// a few KB each, did not wait measurably for it (wrk, 4 clients: 1,780-1,844/s either way).
///
/// The two thresholds fixed (glibc otherwise raises them after each big free): blocks under
/// 32 MiB come from the arenas, whose free tops go back to the kernel from 1 MiB
/// (`malloc_trim` reaches only the main arena's top; the others kept up to twice the largest
/// block freed, ~13 MiB after a 10,000-server request).
pub fn tune_allocator(holds_inventory: bool) {
    static TUNED: std::sync::Once = std::sync::Once::new();
    TUNED.call_once(|| {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only tunes the allocator.
        unsafe {
            let cores = crate::cores().unwrap_or(2);
            let arenas = if holds_inventory { 1 } else { (4 * cores).clamp(2, 64) };
            libc::mallopt(libc::M_ARENA_MAX, arenas as libc::c_int);
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
        }
        let _ = holds_inventory;
    });
}

/// Frees an array whose elements have been moved out, handing its whole pages back to the
/// kernel first. Freed in the middle of a heap, a big block stays resident as a hole until
/// the heap is trimmed; the second reading thread's pieces of the servers array (together
/// 3 MB at 5,000 servers, ~200 KB each) sit in a heap of that thread's own, which the rest
/// of the request never fills.
pub fn free_now<T>(mut emptied: Vec<T>) {
    emptied.clear();
    let bytes = emptied.capacity() * std::mem::size_of::<T>();
    if bytes >= RELEASE_FROM {
        // SAFETY: the range is the array's own buffer, still allocated, holding nothing.
        unsafe { release_pages(emptied.as_mut_ptr().cast(), bytes) };
    }
}

/// Arrays freed with [`free_now`] from this size have their pages handed back.
const RELEASE_FROM: usize = 64 << 10;

/// Hands the whole pages of `len` bytes from `start` back to the kernel (they read as zeros
/// afterwards); the partial pages at either end are left as they are.
///
/// # Safety
/// The range must lie inside one allocation the caller owns, whose contents it no longer
/// needs and nobody else reads.
#[cfg(target_os = "linux")]
unsafe fn release_pages(start: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    let start = start as usize;
    let first = start.next_multiple_of(PAGE);
    let end = (start + len) & !(PAGE - 1);
    if end > first {
        // SAFETY: as the caller promises; the pages read as zeros if touched again.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_DONTNEED) };
    }
}

#[cfg(not(target_os = "linux"))]
unsafe fn release_pages(_start: *mut u8, _len: usize) {}

/// Gives a buffer back once its request is done: a big one is kept for the next big body,
/// one of a pooled size for the next [`buffer`] of that size (each for [`KEEP`]), anything
/// else freed.
pub fn recycle(buffer: Vec<u8>) {
    let big = is_big(buffer.capacity());
    SPARE.give_back(buffer);
    if big {
        BIG_RETURNED.notify_waiters();
    }
}

/// Whether a buffer of `capacity` bytes is of a size [`recycle`] keeps for [`buffer`].
pub fn is_pooled(capacity: usize) -> bool {
    pool_class(capacity).is_some()
}

/// An empty buffer with room for at least `capacity` bytes: from 64 KiB to 1 MiB, one given
/// back ([`recycle`]) earlier when one of that size is kept (sizes are rounded up to a power
/// of two), else a new one.
pub fn buffer(capacity: usize) -> Vec<u8> {
    let rounded = capacity.checked_next_power_of_two().unwrap_or(capacity);
    match pool_class(rounded) {
        Some(class) => SPARE.take_pooled(class).unwrap_or_else(|| Vec::with_capacity(rounded)),
        None => Vec::with_capacity(capacity),
    }
}

/// A whole body's bytes in a [`body_buffer`] (or an answer's in a [`buffer`]), given back
/// ([`recycle`]) when dropped.
#[derive(Default)]
pub struct Body {
    bytes: Vec<u8>,
    /// Seen to be all ASCII as it was copied in (so it is UTF-8 without a check).
    ascii: bool,
    coming_back: ComingBack,
}

impl Body {
    pub fn new(bytes: Vec<u8>) -> Body {
        Body { bytes, ascii: false, coming_back: ComingBack::default() }
    }

    /// A body whose bytes were seen to be all ASCII ([`crate::scan::extend_noting_ascii`]).
    pub fn known_ascii(bytes: Vec<u8>) -> Body {
        debug_assert!(bytes.is_ascii());
        Body { bytes, ascii: true, coming_back: ComingBack::default() }
    }

    /// The text, when it is known to be ASCII.
    pub fn ascii_text(&self) -> Option<&str> {
        // SAFETY: ASCII is UTF-8; `ascii` is set only by `known_ascii`, whose caller saw it.
        self.ascii.then(|| unsafe { std::str::from_utf8_unchecked(&self.bytes) })
    }

    /// Its request is answered: its buffer comes back once the request is freed.
    pub fn answered(&self) {
        self.coming_back.answered(self.bytes.capacity());
    }

    /// The bytes, not to be given back.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.coming_back.settle();
        std::mem::take(&mut self.bytes)
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.bytes));
        self.coming_back.settle();
    }
}

/// An empty buffer with room for `capacity` bytes, its whole 2 MiB pages advised as huge
/// pages before anything is written to them (or the spare one, whose pages are in place);
/// from 64 KiB to 1 MiB, a pooled one ([`buffer`]).
pub fn body_buffer(capacity: usize) -> Vec<u8> {
    if capacity < HUGE_FROM {
        return buffer(capacity);
    }
    if let Some(buffer) = SPARE.take(capacity) {
        return buffer;
    }
    fresh_body_buffer(capacity)
}

/// A [`body_buffer`], waiting up to [`RETURN_WAIT`] for a big one on its way back when none
/// is kept.
pub async fn body_buffer_soon(capacity: usize) -> Vec<u8> {
    if capacity < HUGE_FROM {
        return body_buffer(capacity);
    }
    let deadline = tokio::time::Instant::now() + RETURN_WAIT;
    loop {
        // Listening before looking, so a buffer given back in between is not missed.
        let returned = BIG_RETURNED.notified();
        let mut returned = std::pin::pin!(returned);
        returned.as_mut().enable();
        if let Some(buffer) = SPARE.take(capacity) {
            return buffer;
        }
        let waiting_for_one = SPARE.coming_back.load(Ordering::Acquire) > 0;
        if !waiting_for_one || tokio::time::timeout_at(deadline, returned).await.is_err() {
            return fresh_body_buffer(capacity);
        }
    }
}

fn fresh_body_buffer(capacity: usize) -> Vec<u8> {
    let buf = Vec::with_capacity(capacity);
    advise_huge(buf.as_ptr() as usize, capacity);
    buf
}

#[cfg(target_os = "linux")]
fn advise_huge(start: usize, len: usize) {
    // Only whole huge pages inside the allocation: the advice covers a range of the
    // mapping, and the allocation need not start on a huge page.
    let first = start.next_multiple_of(HUGE_PAGE);
    let end = (start + len) & !(HUGE_PAGE - 1);
    if end > first {
        // SAFETY: the range lies inside an allocation this process owns; the advice only
        // changes how its pages are backed, never their contents (none are written yet).
        // A refusal (THP off, an old kernel) leaves ordinary pages, so it is ignored.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge(_start: usize, _len: usize) {}

/// Reads all of `reader` into a [`body_buffer`] sized from `size_hint` (a file's length);
/// it grows as a `Vec` does if more comes.
pub fn read_body(mut reader: impl Read, size_hint: usize) -> std::io::Result<Vec<u8>> {
    // One more byte, so that reaching the end needs no growth.
    let mut buf = body_buffer(size_hint.saturating_add(1));
    reader.read_to_end(&mut buf)?;
    Ok(buf)
}

/// Files from this size are mapped rather than read.
const MAP_FROM: u64 = 1 << 20;

/// A whole input file: read into a [`body_buffer`], or, from 1 MiB, mapped from the page
/// cache. A 50 MB request read costs a copy and 50 MB of fresh memory the kernel must zero
/// first (together ~15% of `dapi allocate` at 5,000 servers); mapped, neither.
pub enum Input {
    Read(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Input {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Input::Read(bytes) => bytes,
            Input::Mapped(map) => map,
        }
    }
}

impl Input {
    /// The bytes as a vector of their own (a mapped file is copied).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Input::Read(bytes) => bytes,
            Input::Mapped(map) => map.to_vec(),
        }
    }
}

/// The bytes of the file at `path`.
pub fn read_file(path: &std::path::Path) -> std::io::Result<Input> {
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() >= MAP_FROM {
        // SAFETY: the mapping is only read. As with any program reading a file, one that
        // another process rewrites meanwhile gives a wrong answer; one cut short meanwhile
        // stops the process (SIGBUS). The README says to hand dapi files that stay put.
        if let Ok(map) = unsafe { memmap2::MmapOptions::new().populate().map(&file) } {
            return Ok(Input::Mapped(map));
        }
    }
    read_body(file, usize::try_from(meta.len()).unwrap_or(0)).map(Input::Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_buffer_reads_everything_whatever_the_hint() {
        let text: Vec<u8> = (0..(5u32 << 20)).map(|i| (i % 253) as u8).collect();
        for hint in [0, 10, text.len() - 1, text.len(), text.len() + 4096] {
            let read = read_body(&text[..], hint).expect("reads");
            assert_eq!(read.len(), text.len(), "hint {hint}");
            assert!(read == text, "hint {hint}");
        }
        assert!(body_buffer(3 << 20).capacity() >= 3 << 20);
        assert!(body_buffer(0).is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn released_pages_read_as_zeros_and_the_partial_ends_are_kept() {
        let mut bytes = vec![1u8; 3 << 20];
        // An odd start, so that the range has partial pages at both ends.
        let (start, len) = (1000, (2 << 20) + 5000);
        // SAFETY: inside `bytes`, which the test owns; it reads them only afterwards.
        unsafe { release_pages(bytes[start..].as_mut_ptr(), len) };
        let first = (bytes.as_ptr() as usize + start).next_multiple_of(4096) - bytes.as_ptr() as usize;
        let end = ((bytes.as_ptr() as usize + start + len) & !4095) - bytes.as_ptr() as usize;
        assert!(end - first >= 2 << 20);
        assert!(bytes[..first].iter().all(|&b| b == 1), "before the first whole page");
        assert!(bytes[first..end].iter().all(|&b| b == 0), "the whole pages");
        assert!(bytes[end..].iter().all(|&b| b == 1), "after the last whole page");
        free_now(vec![Some(String::from("moved out")); 100_000]);
    }

    #[test]
    fn a_big_buffer_given_back_serves_the_next_big_body_then_is_freed() {
        // A spare of the test's own (the process's one serves the other tests meanwhile).
        let spare: &'static Spare = Box::leak(Box::new(Spare::new()));
        let mut first = body_buffer(8 << 20);
        first.extend_from_slice(&[7; 100]);
        let at = first.as_ptr();
        spare.give_back(first);
        // Not for a body that would leave most of it empty, nor one it cannot hold.
        assert!(spare.take(3 << 20).is_none());
        assert!(spare.take(9 << 20).is_none());
        let again = spare.take(6 << 20).expect("the spare buffer");
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty() && again.capacity() >= 8 << 20);
        spare.give_back(again);
        // A second one given back (the next request's, before the first was taken again)
        // is kept beside it; a third displaces the oldest.
        let second = body_buffer(8 << 20);
        let second_at = second.as_ptr();
        spare.give_back(second);
        assert_eq!(spare.held().big.len(), 2);
        let third = body_buffer(4 << 20);
        let third_at = third.as_ptr();
        spare.give_back(third);
        let kept: Vec<_> = spare.held().big.iter().map(|(b, _)| b.as_ptr()).collect();
        assert_eq!(kept, [second_at, third_at]);
        // The latest that fits.
        assert_eq!(spare.take(6 << 20).map(|b| b.as_ptr()), Some(second_at));
        spare.give_back(body_buffer(8 << 20));
        std::thread::sleep(KEEP + Duration::from_millis(500));
        assert!(spare.held().big.is_empty(), "freed after KEEP");
        // Buffers of no pooled size are not kept.
        spare.give_back(Vec::with_capacity((1 << 20) + 1));
        spare.give_back(Vec::with_capacity(1000));
        assert!(spare.held().big.is_empty());
        assert!(spare.held().pooled_since.is_none());
    }

    #[tokio::test]
    async fn a_big_body_waits_for_the_buffer_of_a_request_being_freed() {
        // A size no other test's body would take from the process's spare (nor touch: the
        // buffers are never written).
        let size = (150 << 20) + 1;
        let answered = Body::new(body_buffer(size));
        let at = answered.as_ptr();
        answered.answered();
        let freeing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            drop(answered);
        });
        let next = body_buffer_soon(size).await;
        assert_eq!(next.as_ptr(), at, "the buffer given back, not fresh pages");
        freeing.join().expect("freed");

        // A body whose request is not answered yet is not waited for.
        let in_use = Body::new(next);
        let other = body_buffer_soon(size).await;
        assert_ne!(other.as_ptr(), in_use.as_ptr());
    }

    #[test]
    fn pooled_sizes_are_the_powers_of_two_from_64_kib_to_1_mib() {
        assert_eq!(pool_class(64 << 10), Some(0));
        assert_eq!(pool_class(1 << 20), Some(POOL_CLASSES - 1));
        for capacity in [0, 1000, (64 << 10) - 1, (64 << 10) + 1, 96 << 10, 2 << 20] {
            assert_eq!(pool_class(capacity), None, "{capacity}");
        }
        // A request is rounded up to its class; past the pooled sizes it is taken as is.
        assert_eq!(buffer(506_032).capacity(), 512 << 10);
        assert_eq!(buffer(65_537).capacity(), 128 << 10);
        assert_eq!(buffer(1000).capacity(), 1000);
        assert!(buffer((1 << 20) + 1).capacity() > 1 << 20);
    }

    #[test]
    fn a_pooled_buffer_serves_the_next_request_of_its_size_then_is_freed() {
        let spare: &'static Spare = Box::leak(Box::new(Spare::new()));
        let per_class = per_class();
        let mut first = Vec::with_capacity(256 << 10);
        first.extend_from_slice(b"a body");
        let at = first.as_ptr();
        spare.give_back(first);
        // Another size class has nothing to give.
        assert!(spare.take_pooled(pool_class(128 << 10).expect("a class")).is_none());
        let class = pool_class(256 << 10).expect("a class");
        let again = spare.take_pooled(class).expect("the buffer given back");
        assert_eq!(again.as_ptr(), at);
        assert!(again.is_empty(), "given back empty");
        // At most `per_class` of one size are kept; the rest are freed at once.
        for _ in 0..per_class + 3 {
            spare.give_back(Vec::with_capacity(256 << 10));
        }
        assert_eq!(spare.held().pooled[class].len(), per_class);
        std::thread::sleep(KEEP + Duration::from_millis(500));
        assert!(spare.held().pooled.iter().all(Vec::is_empty), "freed after KEEP");
        assert!(spare.held().pooled_since.is_none());
    }

    #[test]
    fn small_files_are_read_and_big_ones_mapped_with_the_same_bytes() {
        let dir = std::env::temp_dir().join(format!("dapi-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for len in [0usize, 10, (1 << 20) - 1, 1 << 20, (3 << 20) + 7] {
            let text: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let path = dir.join(format!("input-{len}"));
            std::fs::write(&path, &text).expect("write");
            let input = read_file(&path).expect("read");
            assert_eq!(matches!(input, Input::Mapped(_)), len as u64 >= MAP_FROM, "{len}");
            assert!(*input == text[..], "{len}");
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
