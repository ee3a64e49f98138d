//! The byte scans that run over nearly every byte of a datacenter-sized body: its UTF-8
//! check, the end of a string without escapes, the shape of a uuid (most of a CNAPI body's
//! bytes are the uuids of VMs and their owners), and which bytes of the text between two
//! VM fields differ from the last VM's.
//!
//! The UTF-8 check is `simdutf8`'s (several times std's speed), a whole big body's in two
//! halves at once (`utf8_in_halves`). The others read 16 bytes at a time with SSE2 on
//! x86_64, which every x86_64 CPU has (no detection at run time), and eight at a time in a
//! `u64` (or one by one) elsewhere; both forms are tested against each other or the
//! byte-by-byte definitions below.

/// `std::str::from_utf8`, with the fast check first (a body is checked whole before it is
/// read); std's check only words an error.
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    checked(bytes, simdutf8::basic::from_utf8(bytes).is_ok())
}

/// `bytes` as text when the fast check found them `valid`, else std's worded error.
fn checked(bytes: &[u8], valid: bool) -> Result<&str, std::str::Utf8Error> {
    if valid {
        // SAFETY: the caller's fast check found the whole of `bytes` UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
    }
    std::str::from_utf8(bytes)
}

/// [`utf8`] for a whole body about to be read while nothing else runs (the command line's
/// files, a `/capacity` body): a big one is checked in two halves at once. A body still
/// arriving is not, as its receiving keeps the other core busy.
pub fn utf8_in_halves(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    checked(bytes, valid_utf8(bytes))
}

/// Appends `src` to `dst`, telling whether `src` was all ASCII: the test rides on the loads
/// the copy makes anyway, and a body whose every piece was ASCII is spared the UTF-8 check
/// that would read it all again (3% of a 50-server request's CPU).
pub fn extend_noting_ascii(dst: &mut Vec<u8>, src: &[u8]) -> bool {
    dst.reserve(src.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `reserve` made room for `src.len()` bytes past `dst.len()`, all of which are
    // written (the 64-byte blocks, then the rest) before the length takes them in; `src`
    // cannot overlap the spare room of `dst`.
    unsafe {
        let out = dst.as_mut_ptr().add(dst.len());
        let (i, ascii) = copy_blocks_noting_ascii::<false>(src, out);
        std::ptr::copy_nonoverlapping(src.as_ptr().add(i), out.add(i), src.len() - i);
        dst.set_len(dst.len() + src.len());
        ascii && src[i..].is_ascii()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        dst.extend_from_slice(src);
        src.is_ascii()
    }
}

/// Copies the whole 64-byte blocks at the start of `src` to `dst` (with non-temporal stores
/// when `STREAM`), ORing the loads as it goes: how many bytes it copied, and whether they
/// were all ASCII. The rest (under 64 bytes) is the caller's.
///
/// # Safety
/// `dst` must be valid for `src.len()` bytes and not overlap `src`; with `STREAM`, it must
/// be 16-byte aligned.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub unsafe fn copy_blocks_noting_ascii<const STREAM: bool>(src: &[u8], dst: *mut u8) -> (usize, bool) {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_setzero_si128, _mm_storeu_si128,
        _mm_stream_si128,
    };
    // SAFETY: as the caller promises; every load and store lies inside the first
    // `src.len()` bytes of `src` and `dst`.
    unsafe {
        let mut high = _mm_setzero_si128();
        let mut i = 0;
        while i + 64 <= src.len() {
            let s = src.as_ptr().add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let loaded =
                [_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3))];
            for (k, block) in loaded.into_iter().enumerate() {
                if STREAM {
                    _mm_stream_si128(d.add(k), block);
                } else {
                    _mm_storeu_si128(d.add(k), block);
                }
                high = _mm_or_si128(high, block);
            }
            i += 64;
        }
        (i, _mm_movemask_epi8(high) == 0)
    }
}

/// Texts from this many bytes are checked in two halves at once, where there are two cores:
/// the check of a 50 MB body otherwise holds up its reading by 2–3 ms. (The unit tests
/// split from 64 bytes.)
const UTF8_SPLIT_FROM: usize = if cfg!(test) { 64 } else { 4 << 20 };

/// Whether `bytes` is UTF-8. A big text is split just before a byte that starts a
/// character: in valid UTF-8 no character runs across such a place, so the whole is valid
/// exactly when both halves are (a character cut short at the end of the first half is
/// invalid there, as it is in the whole).
fn valid_utf8(bytes: &[u8]) -> bool {
    let check = |part: &[u8]| simdutf8::basic::from_utf8(part).is_ok();
    if bytes.len() < UTF8_SPLIT_FROM || crate::cores().unwrap_or(1) < 2 {
        return check(bytes);
    }
    let half = bytes.len() / 2;
    let starts_a_character = |b: &u8| !(0x80..0xc0).contains(b);
    // A character has at most three continuation bytes: four in a row is not UTF-8.
    let Some(split) = bytes[half..half + 4].iter().position(starts_a_character).map(|at| half + at) else {
        return false;
    };
    let (first, second) = bytes.split_at(split);
    std::thread::scope(|scope| {
        let other = std::thread::Builder::new().spawn_scoped(scope, || check(second));
        let mine = check(first);
        match other {
            Ok(handle) => mine && handle.join().unwrap_or(false),
            // No thread to be had: this one checks both.
            Err(_) => mine && check(second),
        }
    })
}

/// Bytes that end the fast read of a string: the quote, a backslash, and control characters
/// (which JSON does not allow raw, so serde_json reports them).
pub fn string_stop(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The position of the first [`string_stop`] byte at or after `from`.
#[inline]
pub fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    // SAFETY: SSE2 is part of every x86_64 target (the cfg holds).
    return unsafe { sse2::string_end(bytes, from) };
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    return words::string_end(bytes, from);
}

/// The end of the JSON value at `at` in text already read as JSON (a server's as it came):
/// strings are stepped over by their escapes and containers by their depth, and nothing
/// else is checked again. `None` where the text is not even shaped like a value there.
pub fn json_value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => quoted_end(bytes, at + 1),
        b'{' | b'[' => {
            let (mut depth, mut i) = (0usize, at);
            loop {
                match *bytes.get(i)? {
                    b'"' => {
                        i = quoted_end(bytes, i + 1)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = bytes[at..].iter().position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'));
            let end = len.map_or(bytes.len(), |len| at + len);
            (end > at).then_some(end)
        }
    }
}

/// Past the closing quote of the string whose text starts at `from`.
fn quoted_end(bytes: &[u8], mut from: usize) -> Option<usize> {
    loop {
        let stop = string_end(bytes, from)?;
        match bytes[stop] {
            b'"' => return Some(stop + 1),
            b'\\' => from = stop + 2,
            _ => return None,
        }
    }
}

/// One bit per byte where `a` and `b` differ (bit `i` for byte `i`): the VM reader's test
/// of the text between two values against the last VM's.
#[inline(always)]
pub fn differing_bytes(a: &[u8; 32], b: &[u8; 32]) -> u32 {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    // SAFETY: as above.
    return unsafe { sse2::differing_bytes(a, b) };
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    return words::differing_bytes(a, b);
}

/// `^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$` on bytes.
#[inline]
pub fn uuid_shaped(b: &[u8]) -> bool {
    let Ok(b) = <&[u8; 36]>::try_from(b) else { return false };
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    // SAFETY: as above.
    return unsafe { sse2::uuid_shaped(b) };
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    return words::uuid_shaped(b);
}

/// Appends JSON `text` to `out` without the whitespace between its tokens (strings are
/// copied as they are): inventory feeds are stored so, since a `json` column keeps a text
/// as given, pretty-printing and all, and every replica holds every server's text.
pub fn push_compact_json(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    let (mut at, mut run) = (0, 0);
    while let Some(&b) = bytes.get(at) {
        match b {
            b' ' | b'\n' | b'\r' | b'\t' => {
                out.push_str(&text[run..at]);
                at += 1;
                run = at;
            }
            b'"' => {
                at += 1;
                // To the closing quote, over escapes (a backslash and the byte after it).
                loop {
                    let Some(stop) = string_end(bytes, at) else {
                        at = bytes.len();
                        break;
                    };
                    at = stop + 1;
                    match bytes[stop] {
                        b'"' => break,
                        b'\\' => at = (stop + 2).min(bytes.len()),
                        _ => {} // a raw control character: not JSON, copied as it is
                    }
                }
            }
            _ => at += 1,
        }
    }
    out.push_str(&text[run..]);
}

/// Where a uuid has its dashes.
const DASHES: [usize; 4] = [8, 13, 18, 23];

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
mod sse2 {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
        _mm_sub_epi8,
    };

    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(b: &[u8; 16]) -> __m128i {
        // SAFETY: reads the 16 bytes of a 16-byte array; the load need not be aligned.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn splat(b: u8) -> __m128i {
        _mm_set1_epi8(b as i8)
    }

    /// One bit per byte of `v` that is at most `max` (unsigned).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn at_most(v: __m128i, max: u8) -> __m128i {
        _mm_cmpeq_epi8(_mm_min_epu8(v, splat(max)), v)
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    fn mask(v: __m128i) -> u32 {
        _mm_movemask_epi8(v) as u32
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
        let mut i = from;
        while let Some(chunk) = bytes.get(i..i + 16).and_then(|c| <&[u8; 16]>::try_from(c).ok()) {
            let v = load(chunk);
            let stops = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, splat(b'"')), _mm_cmpeq_epi8(v, splat(b'\\'))),
                at_most(v, 0x1f),
            );
            let found = mask(stops);
            if found != 0 {
                return Some(i + found.trailing_zeros() as usize);
            }
            i += 16;
        }
        super::words::string_end(bytes, i)
    }

    #[inline]
    #[target_feature(enable = "sse2")]
    pub fn differing_bytes(a: &[u8; 32], b: &[u8; 32]) -> u32 {
        let half = |x: &[u8; 32], at: usize| {
            let mut h = [0u8; 16];
            h.copy_from_slice(&x[at..at + 16]);
            load(&h)
        };
        let equal = mask(_mm_cmpeq_epi8(half(a, 0), half(b, 0))) | mask(_mm_cmpeq_epi8(half(a, 16), half(b, 16))) << 16;
        !equal
    }

    /// Which of the 16 bytes of `v` are lower-case hex digits, and which are dashes.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn hex_and_dashes(v: __m128i) -> (u32, u32) {
        let digit = at_most(_mm_sub_epi8(v, splat(b'0')), 9);
        let letter = at_most(_mm_sub_epi8(v, splat(b'a')), 5);
        (mask(_mm_or_si128(digit, letter)), mask(_mm_cmpeq_epi8(v, splat(b'-'))))
    }

    /// Bytes 0–15, 16–31 and 20–35 (overlapping): each part must be hex but for the dashes
    /// that fall in it (bits 8 and 13 of the first, 2 and 7 of the second, 3 of the third).
    #[inline]
    #[target_feature(enable = "sse2")]
    pub fn uuid_shaped(b: &[u8; 36]) -> bool {
        let part = |at: usize, dashes: u32| {
            let mut chunk = [0u8; 16];
            chunk.copy_from_slice(&b[at..at + 16]);
            let (hex, dash) = hex_and_dashes(load(&chunk));
            dash == dashes && hex | dash == 0xffff
        };
        part(0, 1 << 8 | 1 << 13) && part(16, 1 << 2 | 1 << 7) && part(20, 1 << 3)
    }
}

/// Eight bytes at a time in a `u64`: where SSE2 is not there, and for the last bytes of a
/// body (fewer than 16 left).
mod words {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;

    fn word(b: &[u8]) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        u64::from_le_bytes(w)
    }

    pub fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
        // Bytes below `n` have their high bit set in the result; the lowest such byte is exact.
        let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGH;
        let mut i = from;
        while let Some(chunk) = bytes.get(i..i + 8) {
            let w = word(chunk);
            let hits =
                below(w ^ (ONES * u64::from(b'"')), 1) | below(w ^ (ONES * u64::from(b'\\')), 1) | below(w, 0x20);
            if hits != 0 {
                return Some(i + (hits.trailing_zeros() / 8) as usize);
            }
            i += 8;
        }
        bytes.get(i..)?.iter().position(|&b| super::string_stop(b)).map(|p| i + p)
    }

    #[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
    pub fn differing_bytes(a: &[u8; 32], b: &[u8; 32]) -> u32 {
        (0..32).filter(|&i| a[i] != b[i]).fold(0, |bits, i| bits | 1 << i)
    }

    /// Whether all eight bytes of `w` are lower-case hex digits: with each byte's high bit
    /// set first, subtracting `k` from a byte leaves its high bit set exactly when the byte
    /// was at least `k` (no borrow crosses bytes).
    fn all_hex(w: u64) -> bool {
        let h = w | HIGH;
        let at_least = |k: u8| h.wrapping_sub(ONES * u64::from(k));
        let digit = at_least(b'0') & !at_least(b'9' + 1);
        let letter = at_least(b'a') & !at_least(b'f' + 1);
        w & HIGH == 0 && (digit | letter) & HIGH == HIGH
    }

    /// The dashes checked and turned into `0`s, then five (overlapping) words of hex.
    #[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
    pub fn uuid_shaped(b: &[u8; 36]) -> bool {
        let mut b = *b;
        for d in super::DASHES {
            if b[d] != b'-' {
                return false;
            }
            b[d] = b'0';
        }
        [0, 8, 16, 24, 28].iter().all(|&at| all_hex(word(&b[at..])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces of every length around the 64-byte blocks, a byte past 127 at each place in
    /// them or none, appended after text already there.
    #[test]
    fn extending_notes_exactly_whether_the_piece_was_ascii() {
        for len in [0usize, 1, 15, 63, 64, 65, 127, 128, 200] {
            for high_at in (0..len).map(Some).chain([None]) {
                let mut piece: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
                if let Some(at) = high_at {
                    piece[at] = 0x80 | (at as u8);
                }
                let mut dst = b"before".to_vec();
                let ascii = extend_noting_ascii(&mut dst, &piece);
                assert_eq!(ascii, high_at.is_none(), "{len} {high_at:?}");
                assert_eq!(dst, [&b"before"[..], &piece].concat());
            }
        }
    }

    fn uuid_by_bytes(b: &[u8]) -> bool {
        b.len() == 36
            && b.iter().enumerate().all(|(i, &c)| {
                if DASHES.contains(&i) {
                    c == b'-'
                } else {
                    matches!(c, b'0'..=b'9' | b'a'..=b'f')
                }
            })
    }

    #[test]
    fn compact_json_drops_only_the_whitespace_between_tokens() {
        let pretty = "{\"a b\": [1, 2,\n\t{\"c\\\" d\": \" x \\\\\"}], \"e\" : null }";
        let mut out = String::from("[");
        push_compact_json(&mut out, pretty);
        assert_eq!(out, r#"[{"a b":[1,2,{"c\" d":" x \\"}],"e":null}"#);
        let value: serde_json::Value = serde_json::from_str(pretty).expect("json");
        assert_eq!(out[1..], serde_json::to_string(&value).expect("json"));
        let mut cut = String::new();
        push_compact_json(&mut cut, "[\"open string ");
        assert_eq!(cut, "[\"open string ");
    }

    #[test]
    fn differing_bytes_are_marked_one_by_one() {
        let a: [u8; 32] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(differing_bytes(&a, &a), 0);
        for i in 0..32 {
            for flip in [1u8, 0x80, 0xff] {
                let mut b = a;
                b[i] ^= flip;
                assert_eq!(differing_bytes(&a, &b), 1 << i);
                assert_eq!(words::differing_bytes(&a, &b), 1 << i);
            }
        }
        let b: [u8; 32] = std::array::from_fn(|i| if i % 3 == 0 { a[i] } else { !a[i] });
        let expected = (0..32).filter(|i| i % 3 != 0).fold(0u32, |m, i| m | 1 << i);
        assert_eq!(differing_bytes(&a, &b), expected);
        assert_eq!(words::differing_bytes(&a, &b), expected);
    }

    /// Every byte value at every position of a valid uuid, in both forms.
    #[test]
    fn uuid_checks_agree_with_bytes() {
        let valid = *b"0123abcd-ef45-6789-a0b1-c2d3e4f5a6b7";
        for at in 0..36 {
            for byte in 0..=255u8 {
                let mut u = valid;
                u[at] = byte;
                let expected = uuid_by_bytes(&u);
                assert_eq!(uuid_shaped(&u), expected, "byte {byte:#x} at {at}");
                assert_eq!(words::uuid_shaped(&u), expected, "words: byte {byte:#x} at {at}");
            }
        }
        for len in [0, 35, 37] {
            assert!(!uuid_shaped(&[b'0'; 37][..len]));
        }
    }

    /// A stop byte at every distance from the start, in both forms, near and far from the
    /// end of the buffer.
    #[test]
    fn utf8_checks_as_std_does() {
        for text in [&b"plain"[..], "é ü 🎉".as_bytes(), b"\xff", b"ab\xe2\x82", b"\xe2\x82\xac", b"a\xc3(b"] {
            let std = std::str::from_utf8(text);
            match utf8(text) {
                Ok(s) => assert_eq!(Ok(s), std),
                Err(e) => assert_eq!(Err(e), std),
            }
        }
    }

    /// Texts long enough to be checked in halves, with every kind of character, and a bad
    /// byte or a cut character at each place around the middle: as std says.
    #[test]
    fn utf8_checked_in_halves_as_std_does() {
        let chars = ["a", "é", "€", "🎉"];
        for len in UTF8_SPLIT_FROM..UTF8_SPLIT_FROM + 40 {
            let text: Vec<u8> = chars.iter().cycle().flat_map(|c| c.bytes()).take(len).collect();
            let agree = |t: &[u8]| {
                assert_eq!(utf8_in_halves(t), std::str::from_utf8(t), "{t:?}");
            };
            agree(&text);
            let middle = text.len() / 2;
            for at in middle.saturating_sub(5)..(middle + 5).min(text.len()) {
                for bad in [0x80u8, 0xbf, 0xc3, 0xe2, 0xf0, 0xff, b'x'] {
                    let mut t = text.clone();
                    t[at] = bad;
                    agree(&t);
                }
                agree(&text[..at]);
            }
        }
        let continuations = vec![0x80u8; UTF8_SPLIT_FROM * 2];
        assert!(utf8_in_halves(&continuations).is_err());
    }

    #[test]
    fn finds_the_first_stop_byte() {
        let text: Vec<u8> = (0u8..=255).filter(|&b| !string_stop(b)).cycle().take(300).collect();
        for start in 0..100 {
            for stop in [b'"', b'\\', 0x00, 0x1f] {
                for at in
                    [start, start + 1, start + 7, start + 8, start + 15, start + 16, start + 17, start + 40, 290, 299]
                {
                    if at < start {
                        continue;
                    }
                    let mut t = text.clone();
                    t[at] = stop;
                    assert_eq!(string_end(&t, start), Some(at), "{stop} at {at} from {start}");
                    assert_eq!(words::string_end(&t, start), Some(at), "words: {stop} at {at} from {start}");
                }
                assert_eq!(string_end(&text, start), None);
                assert_eq!(words::string_end(&text, start), None);
            }
        }
        assert_eq!(string_end(b"ab", 5), None);
    }
}
