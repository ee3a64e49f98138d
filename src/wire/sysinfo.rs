//! Reading `server.sysinfo` off the wire: the fast reader for an ordinary sysinfo object
//! (keys without escapes, each field once), which gives up on anything else so that serde
//! reads it, with the same result.
//!
//! Sysinfo is a tenth of a server's bytes but was a fifth of its reading time through
//! serde (its NIC maps most of it): in a 50-server request, 9% of the service's CPU.

use super::cursor::{Cursor, ExactList};
use crate::model::{Nic, NicMap, Shape, Sysinfo, VirtualNic};

/// The sysinfo fields read, as named on the wire (the model's serde names, in its order):
/// what the index functions below must agree with.
#[cfg(test)]
const SYSINFO_FIELDS: [&str; 16] = [
    "Bhyve Capable",
    "Bhyve Max Vcpus",
    "CPU Total Cores",
    "CPU Socket Count",
    "CPU Core Count",
    "CPU Online Count",
    "CPU Count",
    "Admin NIC Tag",
    "Admin IP",
    "HVM API",
    "Network Interfaces",
    "Virtual Network Interfaces",
    "Live Image",
    "SDC Version",
    "System Type",
    "Zpool Encrypted",
];
#[cfg(test)]
const NIC_FIELDS: [&str; 2] = ["Link Status", "NIC Names"];
#[cfg(test)]
const VIRTUAL_NIC_FIELDS: [&str; 2] = ["Link Status", "Overlay Nic Tags"];

/// A sysinfo key's place in `SYSINFO_FIELDS` (a match rather than a scan of the names:
/// every key of every server's sysinfo is looked up).
fn sysinfo_index(key: &str) -> Option<usize> {
    Some(match key {
        "Bhyve Capable" => 0,
        "Bhyve Max Vcpus" => 1,
        "CPU Total Cores" => 2,
        "CPU Socket Count" => 3,
        "CPU Core Count" => 4,
        "CPU Online Count" => 5,
        "CPU Count" => 6,
        "Admin NIC Tag" => 7,
        "Admin IP" => 8,
        "HVM API" => 9,
        "Network Interfaces" => 10,
        "Virtual Network Interfaces" => 11,
        "Live Image" => 12,
        "SDC Version" => 13,
        "System Type" => 14,
        "Zpool Encrypted" => 15,
        _ => return None,
    })
}

fn nic_index(key: &str) -> Option<usize> {
    Some(match key {
        "Link Status" => 0,
        "NIC Names" => 1,
        _ => return None,
    })
}

fn virtual_nic_index(key: &str) -> Option<usize> {
    Some(match key {
        "Link Status" => 0,
        "Overlay Nic Tags" => 1,
        _ => return None,
    })
}

/// `server.sysinfo` at the cursor.
pub(super) fn read_sysinfo(c: &mut Cursor<'_>) -> serde_json::Result<Shape<Sysinfo>> {
    let start = c.pos;
    if c.peek() == Some(b'{') {
        if let Some(sysinfo) = read_object(c, sysinfo_index, sysinfo_field) {
            return Ok(Shape::Obj(sysinfo));
        }
        c.pos = start;
    }
    c.value::<Shape<Sysinfo>>().map(|(v, _)| v)
}

fn sysinfo_field(s: &mut Sysinfo, field: usize, c: &mut Cursor<'_>) -> Option<()> {
    let slot = match field {
        0 => &mut s.bhyve_capable,
        1 => &mut s.bhyve_max_vcpus,
        2 => &mut s.cpu_total_cores,
        3 => &mut s.cpu_socket_count,
        4 => &mut s.cpu_core_count,
        5 => &mut s.cpu_online_count,
        6 => &mut s.cpu_count,
        7 => &mut s.admin_nic_tag,
        8 => &mut s.admin_ip,
        9 => &mut s.hvm_api,
        10 => {
            s.network_interfaces = nic_map(c, nic_index, nic_field)?;
            return Some(());
        }
        11 => {
            s.virtual_network_interfaces = nic_map(c, virtual_nic_index, virtual_nic_field)?;
            return Some(());
        }
        12 => &mut s.live_image,
        13 => &mut s.sdc_version,
        14 => &mut s.system_type,
        _ => &mut s.zpool_encrypted,
    };
    *slot = c.js().ok()?;
    Some(())
}

fn nic_field(nic: &mut Nic, field: usize, c: &mut Cursor<'_>) -> Option<()> {
    let slot = if field == 0 { &mut nic.link_status } else { &mut nic.nic_names };
    *slot = c.js().ok()?;
    Some(())
}

fn virtual_nic_field(nic: &mut VirtualNic, field: usize, c: &mut Cursor<'_>) -> Option<()> {
    let slot = if field == 0 { &mut nic.link_status } else { &mut nic.overlay_nic_tags };
    *slot = c.js().ok()?;
    Some(())
}

/// A map of NIC name → NIC: an object read entry by entry (a repeated name keeps its first
/// place and takes the last value, as `IndexMap` does under serde); anything else by serde.
fn nic_map<T: Default + for<'de> serde::Deserialize<'de>>(
    c: &mut Cursor<'_>,
    index: fn(&str) -> Option<usize>,
    field: fn(&mut T, usize, &mut Cursor<'_>) -> Option<()>,
) -> Option<Shape<NicMap<T>>> {
    if c.peek() != Some(b'{') {
        return c.value::<Shape<NicMap<T>>>().ok().map(|(v, _)| v);
    }
    c.eat(b'{');
    if c.eat(b'}') {
        return Some(Shape::Obj(NicMap::from_pairs(Vec::new())));
    }
    let mut pairs = ExactList::default();
    loop {
        let name = c.key()?;
        let start = c.pos;
        let nic = match (c.peek() == Some(b'{')).then(|| read_object(c, index, field)).flatten() {
            Some(nic) => Shape::Obj(nic),
            None => {
                c.pos = start;
                c.value::<Shape<T>>().ok()?.0
            }
        };
        pairs.push((c.strings.get(name), nic));
        if c.eat(b'}') {
            return Some(Shape::Obj(NicMap::from_pairs(pairs.finish())));
        }
        if !c.eat(b',') {
            return None;
        }
    }
}

/// An object of known fields (their place given by `index`, read by `field`) and others
/// (stepped over); `None` for a key with escapes, a field given twice (serde's error), or
/// anything unusual.
fn read_object<'a, T: Default>(
    c: &mut Cursor<'a>,
    index: fn(&str) -> Option<usize>,
    field: impl Fn(&mut T, usize, &mut Cursor<'a>) -> Option<()>,
) -> Option<T> {
    if !c.eat(b'{') {
        return None;
    }
    let mut object = T::default();
    let mut seen = 0u32;
    if c.eat(b'}') {
        return Some(object);
    }
    loop {
        let key = c.key()?;
        match index(key) {
            Some(i) => {
                if seen & (1 << i) != 0 {
                    return None;
                }
                seen |= 1 << i;
                field(&mut object, i, c)?;
            }
            None => c.skip().ok()?,
        }
        if c.eat(b'}') {
            return Some(object);
        }
        if !c.eat(b',') {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::serde_fields;

    #[test]
    fn the_fast_reader_knows_every_sysinfo_field() {
        assert_eq!(serde_fields::<Sysinfo>(), SYSINFO_FIELDS);
        assert_eq!(serde_fields::<Nic>(), NIC_FIELDS);
        assert_eq!(serde_fields::<VirtualNic>(), VIRTUAL_NIC_FIELDS);
        for (fields, index) in [
            (&SYSINFO_FIELDS[..], sysinfo_index as fn(&str) -> Option<usize>),
            (&NIC_FIELDS, nic_index),
            (&VIRTUAL_NIC_FIELDS, virtual_nic_index),
        ] {
            for (i, field) in fields.iter().enumerate() {
                assert_eq!(index(field), Some(i));
                assert_eq!(index(&field[1..]), None);
                assert_eq!(index(&format!("{field} ")), None);
            }
        }
    }

    /// Each field lands where serde puts it, and whatever the fast reader gives up on reads
    /// as serde reads it.
    #[test]
    fn fast_and_serde_read_sysinfo_alike() {
        let mut bodies: Vec<String> = SYSINFO_FIELDS
            .iter()
            .enumerate()
            .map(|(i, f)| format!(r#"{{"{f}": "v{i}", "Other": [1, {{}}]}}"#))
            .collect();
        bodies.extend(
            [
                r#"{"Network Interfaces": {"e0": {"Link Status": "up", "NIC Names": ["admin"], "MAC": "x"}, "e1": null}}"#,
                r#"{"Network Interfaces": {"e0": {"NIC Names": ["a"]}, "e1": {}, "e0": {"Link Status": "down"}}}"#,
                r#"{"Network Interfaces": {"e0": {}, "e1": {}, "e2": {}, "e3": {}, "e4": {"NIC Names": ["x"]}, "e1": null}}"#,
                r#"{"Network Interfaces": {"e0": {}, "e1": {}, "e2": {}, "e3": {}, "e4": 1, "e5": {}, "e4": 2}}"#,
                r#"{"Virtual Network Interfaces": {"v0": {"Link Status": "up", "Overlay Nic Tags": ["sdc"]}}}"#,
                r#"{"Network Interfaces": [1], "Virtual Network Interfaces": 5}"#,
                r#"{"Network Interfaces": {"e0": {"Link Status": "up", "Link Status": "down"}}}"#,
                r#"{"Network Interfaces": {"e\u0030": {"NIC Names": []}}}"#,
                r#"{"CPU Total Cores": 8, "CPU Total Cores": 9}"#,
                r#"{"CPU\u0020Total Cores": 8, "Bhyve Capable": true, "HVM API": false}"#,
                r#"{"Zpool Encrypted": 1.5, "Admin IP": "10.0.0.1", "Live Image": "\ud800"}"#,
                r#"{ "Bhyve Max Vcpus" : 32 , "Network Interfaces" : { } }"#,
                r#"{}"#,
                r#"null"#,
                r#"[]"#,
                r#""text""#,
            ]
            .map(String::from),
        );
        for body in &bodies {
            let serde = crate::js::json::from_str::<Shape<Sysinfo>>(body);
            let fast = read_sysinfo(&mut Cursor::new(body));
            match (serde, fast) {
                (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{body}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{body}"),
                (a, b) => panic!("{body}: serde {a:?}, fast {b:?}"),
            }
        }
    }
}
