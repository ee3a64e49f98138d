//! Buffers for whole request bodies, backed by huge pages where the kernel gives them; and
//! the command line's input files, mapped rather than read when they are big.
//!
//! A body of 50 MB lands in memory the process has never touched: with 4 KiB pages that is
//! some 12,000 page faults, each zeroing its page, and on this kind of virtual machine they
//! cost more than reading the body (22 ms to read a 50 MB file into fresh pages, 6 ms into
//! huge ones). Asking for transparent huge pages (`MADV_HUGEPAGE`; the usual
//! `transparent_hugepage=madvise` setting gives them only to those who ask) makes it a few
//! dozen faults. The buffer is freed as any other, so the memory goes back after the request.

use std::io::Read;

/// Bodies smaller than this stay on ordinary pages: a huge page would be mostly empty.
const HUGE_FROM: usize = 2 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// An empty buffer with room for `capacity` bytes, its whole 2 MiB pages advised as huge
/// pages before anything is written to them.
pub fn body_buffer(capacity: usize) -> Vec<u8> {
    let buf = Vec::with_capacity(capacity);
    if capacity >= HUGE_FROM {
        advise_huge(buf.as_ptr() as usize, capacity);
    }
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
