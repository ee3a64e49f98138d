//! The fixed regular expressions of the validators, as hand-written matchers (they run on
//! every server of every request, so they must not allocate), plus JS `RegExp.test`
//! coercion and JS object key order.

use indexmap::IndexMap;

use crate::js::Js;

/// `^[a-f0-9]{8}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{4}-[a-f0-9]{12}$` (lower-case only).
pub fn is_uuid(s: &str) -> bool {
    uuid_shaped(s.as_bytes())
}

/// [`is_uuid`] on bytes (the request reader checks the 36 bytes after a quote).
#[inline]
pub fn uuid_shaped(b: &[u8]) -> bool {
    crate::scan::uuid_shaped(b)
}

/// `^20\d\d[01]\d[0123]\dT[012]\d[012345]\d\d\dZ$`, e.g. `20140710T010203Z`.
pub fn is_platform(s: &str) -> bool {
    let b = s.as_bytes();
    let digit = |c: u8| c.is_ascii_digit();
    b.len() == 16
        && b[0] == b'2'
        && b[1] == b'0'
        && digit(b[2])
        && digit(b[3])
        && matches!(b[4], b'0' | b'1')
        && digit(b[5])
        && matches!(b[6], b'0'..=b'3')
        && digit(b[7])
        && b[8] == b'T'
        && matches!(b[9], b'0'..=b'2')
        && digit(b[10])
        && matches!(b[11], b'0'..=b'5')
        && digit(b[12])
        && digit(b[13])
        && digit(b[14])
        && b[15] == b'Z'
}

/// `^\d\.\d$`: one-digit major and minor (`7.0`).
pub fn is_sdc_version(s: &str) -> bool {
    matches!(s.as_bytes(), [a, b'.', b] if a.is_ascii_digit() && b.is_ascii_digit())
}

/// The dotted-quad pattern of `sysinfo["Admin IP"]`: four decimal octets 0–255 without
/// leading zeros (`01` is refused).
pub fn is_ipv4(s: &str) -> bool {
    let mut parts = 0;
    for part in s.split('.') {
        parts += 1;
        let b = part.as_bytes();
        let ok = match b.len() {
            1 => b[0].is_ascii_digit(),
            2 => matches!(b[0], b'1'..=b'9') && b[1].is_ascii_digit(),
            3 => b.iter().all(u8::is_ascii_digit) && b[0] != b'0' && part <= "255",
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    parts == 4
}

/// `RE.test(value)`: the value is tested as its string form. Only strings and arrays (whose
/// string form joins their elements) can produce a matching text; `undefined`, `null`,
/// numbers, booleans and objects never do for the patterns used here.
pub fn test(value: &Js, matcher: fn(&str) -> bool) -> bool {
    match value {
        Js::Str(s) => matcher(s),
        Js::Arr(_) => matcher(&value.to_js_string()),
        _ => false,
    }
}

/// A canonical array index (`0`, `7`, `4294967294`): JS enumerates such keys first, in
/// ascending numeric order, before the other keys in insertion order.
pub fn is_array_index(key: &str) -> bool {
    let b = key.as_bytes();
    if b.is_empty() || b.len() > 10 || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return false;
    }
    key.parse::<u64>().is_ok_and(|n| n < u64::from(u32::MAX))
}

/// Calls `f` on the entries of `map` in JS enumeration order (`Object.keys`, `for…in`) and
/// returns the first `Some`. Allocates only when the map has array-index keys.
pub fn first_in_js_order<V, R>(map: &IndexMap<Box<str>, V>, f: impl FnMut(&str, &V) -> Option<R>) -> Option<R> {
    first_of_entries_in_js_order(map.iter().map(|(k, v)| (&**k, v)), f)
}

/// [`first_in_js_order`] over any map's entries, given in insertion order.
pub fn first_of_entries_in_js_order<'m, V: 'm, R>(
    entries: impl Iterator<Item = (&'m str, &'m V)> + Clone,
    mut f: impl FnMut(&str, &V) -> Option<R>,
) -> Option<R> {
    if !entries.clone().any(|(k, _)| is_array_index(k)) {
        return entries.into_iter().find_map(|(k, v)| f(k, v));
    }
    let mut indexed: Vec<(u64, &str, &V)> = entries
        .clone()
        .filter(|(k, _)| is_array_index(k))
        .map(|(k, v)| (k.parse::<u64>().unwrap_or(0), k, v))
        .collect();
    indexed.sort_by_key(|e| e.0);
    indexed
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .chain(entries.filter(|(k, _)| !is_array_index(k)))
        .find_map(|(k, v)| f(k, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_is_lower_case_hex_in_8_4_4_4_12() {
        assert!(is_uuid("62559b33-4f3a-4505-a942-87cc557fdf4e"));
        assert!(!is_uuid("62559B33-4f3a-4505-a942-87cc557fdf4e"));
        assert!(!is_uuid("62559b33-4f3a-4505-a942-87cc557fdf4"));
        assert!(!is_uuid("62559b33-4f3a-4505-a942-87cc557fdf4e\n"));
        assert!(!is_uuid("62559b334-f3a-4505-a942-87cc557fdf4e"));
        assert!(!is_uuid("g2559b33-4f3a-4505-a942-87cc557fdf4e"));
    }

    #[test]
    fn platform_stamps() {
        assert!(is_platform("20140710T010203Z"));
        assert!(is_platform("20991939T295959Z"));
        assert!(!is_platform("21140710T010203Z"));
        assert!(!is_platform("20142710T010203Z"));
        assert!(!is_platform("20140740T010203Z"));
        assert!(!is_platform("20140710T310203Z"));
        assert!(!is_platform("20140710T016203Z"));
        assert!(!is_platform("20140710T010203"));
        assert!(!is_platform("20140710t010203Z"));
        assert!(!is_platform("2014-07-10T01:02:03Z"));
    }

    #[test]
    fn sdc_versions() {
        assert!(is_sdc_version("7.0"));
        assert!(is_sdc_version("6.5"));
        assert!(!is_sdc_version("10.0"));
        assert!(!is_sdc_version("7"));
        assert!(!is_sdc_version("7.00"));
        assert!(!is_sdc_version("7x0"));
    }

    #[test]
    fn dotted_quads() {
        for ok in ["0.0.0.0", "10.99.99.7", "255.255.255.255", "199.249.100.1"] {
            assert!(is_ipv4(ok), "{ok}");
        }
        for bad in ["1.2.3", "1.2.3.4.5", "256.1.1.1", "01.1.1.1", "1.2.3.", "a.b.c.d", "1..2.3", "", "300.1.1.1"] {
            assert!(!is_ipv4(bad), "{bad}");
        }
    }

    #[test]
    fn test_coerces_like_regexp_test() {
        let u = "62559b33-4f3a-4505-a942-87cc557fdf4e";
        assert!(test(&Js::str(u), is_uuid));
        assert!(test(&Js::Arr(vec![Js::str(u)]), is_uuid));
        assert!(!test(&Js::Undefined, is_uuid));
        assert!(!test(&Js::Null, is_uuid));
        assert!(test(&Js::Arr(vec![Js::str("20140710T010203Z")]), is_platform));
    }

    #[test]
    fn js_order_puts_array_indexes_first() {
        let mut m: IndexMap<Box<str>, u8> = IndexMap::new();
        for k in ["b", "10", "a", "2", "02", "4294967295"] {
            m.insert(k.into(), 0);
        }
        let mut seen = Vec::new();
        let none: Option<()> = first_in_js_order(&m, |k, _| {
            seen.push(k.to_string());
            None
        });
        assert!(none.is_none());
        assert_eq!(seen, ["2", "10", "b", "a", "02", "4294967295"]);
        assert!(is_array_index("0"));
        assert!(!is_array_index("-1"));
    }
}
