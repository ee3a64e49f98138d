//! Repeated short strings of a body, shared rather than allocated once per copy.
//!
//! A datacenter's servers repeat most of their strings: `running`, the platform stamp,
//! sysinfo's `SunOS` and `7.0`, the NIC names and link states. Held one allocation per copy,
//! they were about a dozen small allocations per server (5,000 servers: 60,000 of them,
//! each with its allocator overhead). A [`Js`](crate::js::Js) string is reference-counted,
//! so a reader keeps the short strings it made lately and hands the same one out again.

use std::hash::Hasher;
use std::sync::Arc;

/// How many recent strings are kept (one per slot, by hash).
const SLOTS: usize = 256;
/// Longer strings (uuids, free text) are seldom repeated: they are not looked up.
const LONGEST: usize = 32;

/// The short strings a reader made lately.
#[derive(Default)]
pub(super) struct SharedStrings {
    /// Empty until the first lookup: most cursors read a few values and no strings.
    slots: Vec<Option<Arc<str>>>,
}

impl SharedStrings {
    /// `text` as a shared string: the one made last time for the same text when it is
    /// still kept, a new one otherwise.
    #[inline]
    pub fn get(&mut self, text: &str) -> Arc<str> {
        if text.len() > LONGEST {
            return text.into();
        }
        if self.slots.is_empty() {
            self.slots = vec![None; SLOTS];
        }
        let mut hasher = crate::fxhash::FxHasher::default();
        hasher.write(text.as_bytes());
        // The mix's high bits are its best spread.
        let slot = &mut self.slots[(hasher.finish() >> 56) as usize % SLOTS];
        match slot {
            Some(kept) if short_eq(kept.as_bytes(), text.as_bytes()) => kept.clone(),
            _ => {
                let made: Arc<str> = text.into();
                *slot = Some(made.clone());
                made
            }
        }
    }
}

/// `a == b` for strings of at most [`LONGEST`] bytes, inline: two overlapping loads from
/// each end (a slice compare calls `memcmp`, some 13 times a server, for a few bytes each).
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    fn ends<const W: usize>(s: &[u8]) -> Option<([u8; W], [u8; W])> {
        Some((*s.first_chunk::<W>()?, *s.last_chunk::<W>()?))
    }
    match n {
        16..=LONGEST => ends::<16>(a) == ends::<16>(b),
        8..16 => ends::<8>(a) == ends::<8>(b),
        4..8 => ends::<4>(a) == ends::<4>(b),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_short_text_is_one_string_and_a_long_one_is_its_own() {
        let mut strings = SharedStrings::default();
        let (a, b) = (strings.get("running"), strings.get(&String::from("running")));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*strings.get("stopped"), "stopped");
        let long = "x".repeat(LONGEST + 1);
        let (c, d) = (strings.get(&long), strings.get(&long));
        assert!(!Arc::ptr_eq(&c, &d));
        assert_eq!((&*c, &*d), (long.as_str(), long.as_str()));
    }

    #[test]
    fn short_texts_are_equal_exactly_when_their_bytes_are() {
        for n in 0..=LONGEST {
            let text: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            assert!(short_eq(&text, &text.clone()), "{n}");
            for at in 0..n {
                let mut other = text.clone();
                other[at] ^= 1;
                assert!(!short_eq(&text, &other), "{n} bytes, differing at {at}");
            }
            assert!(!short_eq(&text, &text[..n.saturating_sub(1)]) || n == 0, "{n}");
        }
    }

    #[test]
    fn texts_that_share_a_slot_stay_themselves() {
        let mut strings = SharedStrings::default();
        let texts: Vec<String> = (0..4 * SLOTS).map(|i| format!("t{i}")).collect();
        for _ in 0..2 {
            for t in &texts {
                assert_eq!(&*strings.get(t), t.as_str());
            }
        }
    }
}
