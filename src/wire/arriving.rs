//! A request body that is still arriving, readable while it is written.
//!
//! A big body takes milliseconds to come over the network; reading its servers while the
//! rest arrives hides most of that. One writer appends the received bytes into a buffer
//! sized once from `Content-Length` (it never moves), and readers see the prefix written
//! so far, which never changes again: strings borrowed from it stay valid for the whole
//! request.

use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The body's bytes so far, and how it ended.
pub struct Arriving {
    start: NonNull<u8>,
    /// The declared length: how many bytes may be written.
    capacity: usize,
    /// The allocation's own capacity (at least `capacity`), for giving it back.
    allocated: usize,
    state: Mutex<State>,
    changed: Condvar,
    coming_back: super::pages::ComingBack,
}

#[derive(Clone, Copy)]
struct State {
    filled: usize,
    /// How many of the first bytes are known to be ASCII (seen so while they were copied in),
    /// and so need no UTF-8 check.
    ascii: usize,
    /// `Some(true)`: all bytes are in; `Some(false)`: they never will be.
    ended: Option<bool>,
}

// SAFETY: the buffer is only written by the one `Writer`, beyond `filled`, and only read
// below `filled`; `filled` moves under the mutex, after the bytes are written, so a reader
// that sees a length also sees the bytes below it.
unsafe impl Send for Arriving {}
unsafe impl Sync for Arriving {}

/// The one writing end; dropping it unfinished tells readers the body will not complete.
pub struct Writer {
    body: Arc<Arriving>,
    done: bool,
}

/// What a reader is told when it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// More bytes (this many in all) are in.
    More(usize),
    /// The body is complete (this many bytes).
    Complete(usize),
    /// The body will never complete (the read failed or was abandoned).
    Broken,
}

impl Arriving {
    /// A body of `len` bytes to come, and its writer.
    pub fn new(len: usize) -> (Arc<Arriving>, Writer) {
        Arriving::in_buffer(super::pages::body_buffer(len), len)
    }

    /// The same, written into `buffer` (a [`super::pages::body_buffer`] of at least `len`).
    pub fn in_buffer(buffer: Vec<u8>, len: usize) -> (Arc<Arriving>, Writer) {
        assert!(buffer.is_empty() && buffer.capacity() >= len, "a body buffer with room for the body");
        // Not zeroed first: only bytes already written are ever read.
        let mut buffer = std::mem::ManuallyDrop::new(buffer);
        let allocated = buffer.capacity();
        let start = NonNull::new(buffer.as_mut_ptr()).unwrap_or(NonNull::dangling());
        let body = Arc::new(Arriving {
            start,
            capacity: len,
            allocated,
            state: Mutex::new(State { filled: 0, ascii: 0, ended: None }),
            changed: Condvar::new(),
            coming_back: Default::default(),
        });
        (body.clone(), Writer { body, done: false })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The bytes received so far.
    pub fn received(&self) -> &[u8] {
        self.received_ascii().0
    }

    /// The bytes received so far, and how many of the first of them are known to be ASCII.
    pub fn received_ascii(&self) -> (&[u8], usize) {
        let State { filled, ascii, .. } = *self.lock();
        // SAFETY: the first `filled` bytes are written and never written again.
        (unsafe { std::slice::from_raw_parts(self.start.as_ptr(), filled) }, ascii)
    }

    /// Waits until more than `have` bytes are in, or the body has ended.
    pub fn wait_beyond(&self, have: usize) -> Progress {
        let mut state = self.lock();
        loop {
            match state.ended {
                Some(true) => return Progress::Complete(state.filled),
                Some(false) => return Progress::Broken,
                None if state.filled > have => return Progress::More(state.filled),
                None => state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// The body's declared length.
    pub fn declared_len(&self) -> usize {
        self.capacity
    }

    /// Its request is answered: its buffer comes back once the request is freed.
    pub fn answered(&self) {
        self.coming_back.answered(self.allocated);
    }

    /// Whether all of the body is in (without waiting).
    pub fn is_complete(&self) -> bool {
        self.lock().ended == Some(true)
    }

    /// Waits for the whole body; `None` if it will never complete.
    pub fn complete(&self) -> Option<&[u8]> {
        match self.wait_beyond(usize::MAX) {
            Progress::Complete(_) => Some(self.received()),
            _ => None,
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        // SAFETY: the buffer is the `Vec` taken apart in `new`, with its pointer and
        // capacity (its length, 0, only tells the `Vec` there is nothing to drop); nobody
        // borrows it any more (borrows are tied to `&self`).
        super::pages::recycle(unsafe { Vec::from_raw_parts(self.start.as_ptr(), 0, self.allocated) });
        self.coming_back.settle();
    }
}

impl Writer {
    /// Appends received bytes; false (nothing written) if they would exceed the declared
    /// length.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        let filled = self.body.lock().filled;
        if bytes.len() > self.body.capacity - filled {
            return false;
        }
        // SAFETY: only this writer writes, and only beyond `filled`, which readers never
        // look past; the destination lies inside the buffer (checked above).
        let ascii = unsafe { copy_streaming(bytes, self.body.start.as_ptr().add(filled)) };
        let mut state = self.body.lock();
        if ascii && state.ascii == filled {
            state.ascii = filled + bytes.len();
        }
        state.filled = filled + bytes.len();
        drop(state);
        self.body.changed.notify_all();
        true
    }

    /// Marks the body complete: true if every declared byte came.
    pub fn finish(mut self) -> bool {
        let mut state = self.body.lock();
        let whole = state.filled == self.body.capacity;
        state.ended = Some(whole);
        drop(state);
        self.done = true;
        self.body.changed.notify_all();
        whole
    }
}

/// Copies `src` to `dst` with stores that go to memory without first reading the lines they
/// fill (non-temporal, x86-64), and tells whether the bytes copied were all ASCII. The copies
/// of a body's pieces into its buffer, 50 MB at 5,000 servers, were 9% of a POST's CPU: with
/// ordinary stores each line of the buffer is read in before it is written over, twice the
/// memory traffic for a buffer far larger than the cache. Measured (BENCHMARKS.md): 1–5 ms
/// less of a 5,000-server POST, and less CPU. The ASCII test rides on the loads the copy
/// makes anyway; a body's text known to be ASCII is spared its UTF-8 check (2% of a POST's
/// CPU), which would read the buffer back from memory.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes and not overlap `src`.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(src: &[u8], dst: *mut u8) -> bool {
    let len = src.len();
    let head = ((dst as usize).wrapping_neg() & 15).min(len);
    // SAFETY: as the caller promises; the streamed stores start at `dst + head`, 16-byte
    // aligned, and the fence orders them before the lock that publishes them.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, head);
        let (copied, blocks_ascii) = crate::scan::copy_blocks_noting_ascii::<true>(&src[head..], dst.add(head));
        let i = head + copied;
        std::ptr::copy_nonoverlapping(src.as_ptr().add(i), dst.add(i), len - i);
        std::arch::x86_64::_mm_sfence();
        blocks_ascii && src[..head].is_ascii() && src[i..].is_ascii()
    }
}

/// [`copy_streaming`] where there are no such stores: an ordinary copy, the bytes left to
/// the UTF-8 check.
///
/// # Safety
/// As there.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_streaming(src: &[u8], dst: *mut u8) -> bool {
    // SAFETY: as the caller promises.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    false
}

impl Drop for Writer {
    fn drop(&mut self) {
        if !self.done {
            self.body.lock().ended = Some(false);
            self.body.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_a_growing_prefix_then_the_end() {
        let text: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (body, mut writer) = Arriving::new(text.len());
        let reader = {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut seen = 0;
                loop {
                    match body.wait_beyond(seen) {
                        Progress::More(n) => {
                            assert!(n > seen);
                            seen = n;
                        }
                        Progress::Complete(n) => return Some(n),
                        Progress::Broken => return None,
                    }
                }
            })
        };
        for chunk in text.chunks(4096) {
            assert!(writer.push(chunk));
        }
        assert!(writer.finish());
        assert_eq!(reader.join().ok().flatten(), Some(text.len()));
        assert_eq!(body.complete(), Some(&text[..]));
    }

    /// Pieces of every length around the 16-byte alignment and the 64-byte blocks of the
    /// streamed copy, landing at every offset, arrive as sent.
    #[test]
    fn pieces_of_any_length_at_any_offset_arrive_whole() {
        let lengths = [1usize, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4096, 65_537, 3];
        let text: Vec<u8> = (0..3 * lengths.iter().sum::<usize>()).map(|i| (i * 7 % 251) as u8).collect();
        let (body, mut writer) = Arriving::new(text.len());
        let mut at = 0;
        for &len in lengths.iter().cycle().take(3 * lengths.len()) {
            assert!(writer.push(&text[at..at + len]));
            at += len;
            assert_eq!(body.received(), &text[..at]);
        }
        assert!(writer.finish());
        assert_eq!(body.complete(), Some(&text[..]));
    }

    /// The ASCII prefix grows with each piece copied that is all ASCII, and stops for good at
    /// the first piece with a byte past 127, wherever in the piece it lies: in the unaligned
    /// head, in a 64-byte block, or in the tail.
    #[test]
    fn the_ascii_prefix_stops_at_the_first_piece_with_a_high_byte() {
        for high_at in [0usize, 3, 17, 40, 64, 90, 150, 199] {
            let mut piece = vec![b'a'; 200];
            piece[high_at] = 0xc3;
            let (body, mut writer) = Arriving::new(1000);
            assert!(writer.push(&[b'x'; 5]));
            assert!(writer.push(&[b'y'; 195]));
            assert_eq!(body.received_ascii().1, 200);
            assert!(writer.push(&piece));
            assert_eq!(body.received_ascii(), (&[&[b'x'; 5][..], &[b'y'; 195], &piece].concat()[..], 200), "{high_at}");
            assert!(writer.push(&[b'z'; 300]));
            assert_eq!(body.received_ascii().1, 200, "not after a piece that was not ASCII");
        }
    }

    #[test]
    fn a_writer_dropped_early_breaks_the_body() {
        let (body, mut writer) = Arriving::new(10);
        assert!(writer.push(b"12345"));
        assert!(!writer.push(b"123456"), "more than declared");
        assert_eq!(body.received(), b"12345");
        drop(writer);
        assert_eq!(body.wait_beyond(5), Progress::Broken);
        assert_eq!(body.complete(), None);
    }

    #[test]
    fn a_short_body_is_not_complete() {
        let (body, mut writer) = Arriving::new(10);
        assert!(writer.push(b"123"));
        assert!(!writer.finish());
        assert_eq!(body.complete(), None);
    }
}
