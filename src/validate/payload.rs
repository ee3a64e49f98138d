//! The request-object validators CNAPI ran on `/allocate` (`VALIDATION.md` §2–8, §11):
//! VM payload (with affinity, locality, traits), image, package, NIC tag requirements and
//! tickets. Each returns the first failure's message, or `None`.
//!
//! The request objects arrive typed, so "is not a hash" of the VM, image and package cannot
//! happen here (the body reader already refused non-objects).

use crate::js::regex::{self, RegexError};
use crate::js::{string_to_number, Js};
use crate::model::affinity::Affinity;
use crate::model::{Image, Package, Ticket, VmPayload};

use crate::model::schema::patterns::{self, is_array_index, is_platform, is_sdc_version, is_uuid};
use crate::model::schema::{self, property, Leaf, Ty};

/// `isHash`: a plain object (not `null`, not an array).
fn is_hash(v: &Js) -> bool {
    matches!(v, Js::Obj(_))
}

/// `validateTraits`: the traits schema only applies its type, so anything whose `typeof` is
/// `object` passes (arrays and `null` included).
pub fn validate_traits(traits: &Js) -> Option<String> {
    schema::object(traits, false).err().map(|reason| property("", &reason))
}

/// `validateAffinity` on a truthy `vm.affinity`.
pub fn validate_affinity(affinity: &Js) -> Option<String> {
    let Some(rules) = affinity.as_arr() else {
        return Some(r#""affinity" is not an array"#.into());
    };
    for rule in rules {
        // A non-object rule reads every attribute as undefined (`null` made the original
        // throw; it gets the same message).
        for attr in ["key", "operator", "value", "valueType"] {
            if rule.get(attr).as_str().is_none() {
                return Some(format!(r#""affinity.{attr}" is not a string"#));
            }
        }
        if !matches!(rule.get("isSoft"), Js::Bool(_)) {
            return Some(r#""affinity.isSoft" is not a boolean"#.into());
        }
        if !matches!(rule.get("operator").as_str(), Some("==" | "!=")) {
            return Some(r#""affinity.operator" has invalid operator"#.into());
        }
        if !matches!(rule.get("valueType").as_str(), Some("exact" | "glob" | "re")) {
            return Some(r#""affinity.valueType" has invalid value"#.into());
        }
    }
    // dapi: a pattern that cannot compile (or is too large) is refused here, instead of
    // failing the allocation step that would reach it.
    for rule in rules {
        let Ok(affinity) = Affinity::from_js(rule) else { continue };
        for (source, dialect) in affinity.patterns() {
            if let Err(e) = regex::compile(&source, dialect) {
                let why = match e {
                    RegexError::TooBig => "is too large".to_string(),
                    RegexError::Invalid(_) => "is not a valid regular expression".to_string(),
                };
                return Some(format!(r#""affinity.value" {} {why}"#, Js::str(&affinity.value).stringify()));
            }
        }
    }
    None
}

/// `validateLocality` on a truthy `vm.locality`.
pub fn validate_locality(locality: &Js) -> Option<String> {
    if !is_hash(locality) {
        return Some(r#""locality" is has wrong type"#.into());
    }
    for name in ["near", "far"] {
        let hint = locality.get(name);
        if !hint.truthy() {
            continue;
        }
        match hint {
            Js::Str(s) if !is_uuid(s) => return Some(format!(r#""locality.{name}" is not a UUID"#)),
            Js::Str(_) => {}
            Js::Arr(items) => {
                if !items.iter().all(|u| patterns::test(u, is_uuid)) {
                    return Some(format!(r#""locality.{name}" contains an malformed UUID"#));
                }
            }
            _ => return Some(format!(r#""locality.{name}" is neither string nor array"#)),
        }
    }
    match locality.get("strict") {
        Js::Undefined | Js::Bool(_) => None,
        _ => Some(r#""locality.strict" is given, but not boolean"#.into()),
    }
}

/// `validatePlatformLimits`: `value` is `container[name]`, `path` is prefix + name.
pub fn validate_platform_limits(value: &Js, path: &str) -> Option<String> {
    let platforms = match value {
        Js::Undefined => return None,
        Js::Obj(o) => o,
        _ => return Some(format!(r#""{path}" is not a hash"#)),
    };
    // JS visits array-index keys first, and those are never SDC versions.
    if platforms.keys().any(|k| is_array_index(k)) {
        return Some(format!(r#""{path}" contains an invalid SDC version"#));
    }
    for (version, stamp) in platforms.iter() {
        if !is_sdc_version(version) {
            return Some(format!(r#""{path}" contains an invalid SDC version"#));
        }
        if !stamp.as_str().is_some_and(is_platform) {
            return Some(format!(r#""{path}" contains an invalid platform date"#));
        }
    }
    None
}

/// `validateImage`.
pub fn validate_image(image: &Image) -> Option<String> {
    let size = &image.image_size_mib;
    if size.truthy() && size.as_num().is_none() {
        return Some(r#""image.image_size" has invalid type"#.into());
    }
    if image.traits.truthy() {
        if let Some(msg) = validate_traits(&image.traits) {
            return Some(msg);
        }
    }
    let requirements = &image.requirements;
    if requirements.truthy() {
        if !is_hash(requirements) {
            return Some(r#""image.requirements" has invalid type"#.into());
        }
        for name in ["min_platform", "max_platform"] {
            if let Some(msg) = validate_platform_limits(requirements.get(name), &format!("requirements.{name}")) {
                return Some(msg);
            }
        }
        // The original's min_ram/max_ram type checks read camel-case keys and never fire.
    }
    None
}

/// dapi's own image checks, after [`validate_image`]: the sizes the original meant to
/// type-check (its `min_ram`/`max_ram` checks read camel-case keys and never fired, and
/// `image_size` was checked only when truthy) must be non-negative numbers when present
/// (`null` counts as absent).
pub fn validate_image_extensions(image: &Image) -> Option<String> {
    let requirements = match &image.requirements {
        r @ Js::Obj(_) => r,
        _ => &Js::Undefined,
    };
    let sizes = [
        ("image_size", &image.image_size_mib),
        ("requirements.min_ram", requirements.get("min_ram")),
        ("requirements.max_ram", requirements.get("max_ram")),
    ];
    for (name, value) in sizes {
        match value {
            Js::Undefined | Js::Null => {}
            Js::Num(n) if *n < 0.0 => return Some(format!(r#""image.{name}" must not be negative"#)),
            Js::Num(_) => {}
            _ => return Some(format!(r#""image.{name}" is not a number"#)),
        }
    }
    None
}

/// Replaces JSON text by the value it encodes, as the original did to package fields.
fn parse_in_place(value: &mut Js) -> Result<(), ()> {
    if let Js::Str(text) = value {
        *value = crate::js::json::from_str::<Js>(text).map_err(|_| ())?;
    }
    Ok(())
}

/// `validatePackage`. Side effect: `min_platform`, `max_platform` and `traits` given as JSON
/// text are replaced by the parsed value.
pub fn validate_package(pkg: &mut Package) -> Option<String> {
    let ratios = [
        ("overprovision_cpu", &pkg.overprovision_cpu),
        ("overprovision_memory", &pkg.overprovision_memory),
        ("overprovision_storage", &pkg.overprovision_storage),
        ("overprovision_network", &pkg.overprovision_network),
        ("overprovision_io", &pkg.overprovision_io),
    ];
    for (name, ratio) in ratios {
        if ratio.truthy() && ratio.num().is_nan() {
            return Some(format!(r#""package.{name}" has invalid type"#));
        }
    }
    let spread = &pkg.alloc_server_spread;
    if spread.truthy() && !matches!(spread.as_str(), Some("min-ram" | "max-ram" | "random" | "min-owner")) {
        return Some(r#""alloc_server_spread" has invalid value"#.into());
    }
    for (name, value) in [("min_platform", &mut pkg.min_platform), ("max_platform", &mut pkg.max_platform)] {
        if value.truthy() {
            if parse_in_place(value).is_err() {
                return Some(format!(r#""package.{name}" has invalid type"#));
            }
            if let Some(msg) = validate_platform_limits(value, &format!("package.{name}")) {
                return Some(msg);
            }
        }
    }
    if pkg.traits.truthy() {
        let inner = match parse_in_place(&mut pkg.traits) {
            Err(()) => Some(r#""package.traits" has invalid type"#.to_string()),
            Ok(()) => validate_traits(&pkg.traits),
        };
        if let Some(msg) = inner {
            return Some(format!(r#""package.traits": {msg}"#));
        }
    }
    None
}

/// A validator of one nested VM attribute.
type Check = fn(&Js) -> Option<String>;

/// Rules 1–9 of `validateVmPayload` (`validateVm`).
fn validate_vm(vm: &VmPayload) -> Option<String> {
    if !patterns::test(&vm.owner_uuid, is_uuid) {
        return Some(r#"VM "owner_uuid" is not a valid UUID"#.into());
    }
    if vm.ram_mib.as_num().is_none() {
        return Some(r#"VM "ram" is not a number"#.into());
    }
    if vm.quota_gib.truthy() && vm.quota_gib.as_num().is_none() {
        return Some(r#"VM "quota" is not a number"#.into());
    }
    if vm.cpu_cap_pct.truthy() && vm.cpu_cap_pct.as_num().is_none() {
        return Some(r#"VM "cpu_cap" is not a number"#.into());
    }
    let nested: [(&Js, Check); 3] =
        [(&vm.traits, validate_traits), (&vm.affinity, validate_affinity), (&vm.locality, validate_locality)];
    for (value, check) in nested {
        if value.truthy() {
            if let Some(msg) = check(value) {
                return Some(format!("VM {msg}"));
            }
        }
    }
    if vm.nic_tags.truthy() {
        let Some(tags) = vm.nic_tags.as_arr() else {
            return Some(r#"VM "nic_tags" is not an array"#.into());
        };
        if tags.iter().any(|t| t.as_str().is_none()) {
            return Some(r#"VM "nic_tags" contains invalid type in array"#.into());
        }
    }
    None
}

const VOLUMES_FROM: &str = "docker:volumesfrom";

/// `validateVmPayload(vm, image.requirements)`. Side effect: a valid
/// `internal_metadata["docker:volumesfrom"]` is parsed into `vm.volumes_from`.
pub fn validate_vm_payload(vm: &mut VmPayload, requirements: &Js) -> Option<String> {
    if let Some(msg) = validate_vm(vm) {
        return Some(msg);
    }
    if !patterns::test(&vm.vm_uuid, is_uuid) {
        return Some(r#""vm.vm_uuid" is an invalid UUID"#.into());
    }
    let metadata = &vm.internal_metadata;
    if metadata.truthy() {
        if metadata.type_of() != "object" {
            return Some(r#""vm.internal_metadata" is not a hash"#.into());
        }
        let volumes_from = metadata.get(VOLUMES_FROM);
        if volumes_from.truthy() {
            // JSON.parse reads the value's string form (an array `["a"]` reads as `a`).
            let parsed = match volumes_from {
                Js::Str(text) => crate::js::json::from_str::<Js>(text),
                other => crate::js::json::from_str::<Js>(&other.to_js_string()),
            };
            match parsed {
                Err(_) => return Some(r#""vm.internal_metadata['docker:volumesfrom']" is not valid JSON"#.into()),
                Ok(Js::Arr(items)) => vm.volumes_from = Some(items),
                Ok(_) => {
                    return Some(r#""vm.internal_metadata['docker:volumesfrom']" does not contain an array"#.into())
                }
            }
        }
    }
    if requirements.truthy() {
        // Rule 3 made `ram` a number.
        let ram = vm.ram_mib.num();
        let min_ram = requirements.get("min_ram");
        if min_ram.truthy() && ram < min_ram.num() - 0.01 {
            return Some(r#""vm.ram" is smaller than "image.requirements.min_ram""#.into());
        }
        let max_ram = requirements.get("max_ram");
        if max_ram.truthy() && ram > plus_delta(max_ram) {
            return Some(r#""vm.ram" is larger than "image.requirements.max_ram""#.into());
        }
    }
    None
}

/// `max_ram + 0.01` as the comparison then reads it: JS `+` concatenates when `max_ram` is
/// a string or an object (`"1024" + 0.01` is `"10240.01"`).
fn plus_delta(max_ram: &Js) -> f64 {
    match max_ram {
        Js::Str(_) | Js::Arr(_) | Js::Obj(_) => string_to_number(&format!("{}0.01", max_ram.to_js_string())),
        other => other.num() + 0.01,
    }
}

/// dapi's own VM checks: `hard-filter-os` and `hard-filter-hvm` of the production chain
/// assert a string `brand` and an optional number `vcpus` (`null` counts as absent), and
/// the original crashed on anything else. These are refused here instead.
pub fn validate_vm_extensions(vm: &VmPayload) -> Option<String> {
    if vm.brand.as_str().is_none() {
        return Some(r#"VM "brand" is not a string"#.into());
    }
    if !matches!(vm.vcpus, Js::Undefined | Js::Null | Js::Num(_)) {
        return Some(r#"VM "vcpus" is not a number"#.into());
    }
    // CNAPI checks these only when truthy; the plugins then assert what CNAPI let through
    // (and the original crashed): a present `affinity` must be an array, a present non-null
    // `locality` an object, the owner a uuid *string* (an array passes CNAPI's regex test),
    // and `near`/`far` entries strings.
    if !vm.affinity.is_undefined() && !vm.affinity.truthy() {
        return Some(r#"VM "affinity" is not an array"#.into());
    }
    if !matches!(vm.locality, Js::Undefined | Js::Null) && !vm.locality.truthy() {
        return Some(r#"VM "locality" is has wrong type"#.into());
    }
    if vm.owner_uuid.as_str().is_none() {
        return Some(r#"VM "owner_uuid" is not a valid UUID"#.into());
    }
    for name in ["near", "far"] {
        match vm.locality.get(name) {
            Js::Arr(items) if items.iter().any(|u| u.as_str().is_none()) => {
                return Some(format!(r#"VM "locality.{name}" contains an malformed UUID"#));
            }
            // `""` is falsy, so CNAPI let it through; the plugins then read it as a uuid.
            Js::Str(s) if !is_uuid(s) => return Some(format!(r#"VM "locality.{name}" is not a UUID"#)),
            _ => {}
        }
    }
    // Negative sizes are nonsense the original let through (they fit anywhere).
    for (name, value) in
        [("ram", &vm.ram_mib), ("quota", &vm.quota_gib), ("cpu_cap", &vm.cpu_cap_pct), ("vcpus", &vm.vcpus)]
    {
        if value.as_num().is_some_and(|n| n < 0.0) {
            return Some(format!(r#"VM "{name}" must not be negative"#));
        }
    }
    None
}

const NIC_TAG: Leaf = Leaf::of(Ty::String).min_len(1);

/// `validateNicTagRequirements`: an array of arrays of non-empty strings (schema messages).
pub fn validate_nic_tag_requirements(reqs: &Js) -> Option<String> {
    let groups = match schema::array(reqs, false) {
        Err(reason) => return Some(property("", &reason)),
        Ok(groups) => groups.unwrap_or_default(),
    };
    for (i, group) in groups.iter().enumerate() {
        match schema::array(group, false) {
            Err(reason) => return Some(property(&i.to_string(), &reason)),
            Ok(tags) => {
                for (j, tag) in tags.unwrap_or_default().iter().enumerate() {
                    if let Some(reason) = NIC_TAG.check(tag) {
                        return Some(property(&format!("{i}[{j}]"), &reason));
                    }
                }
            }
        }
    }
    None
}

/// `validateTicket`.
pub fn validate_ticket(ticket: &Ticket) -> Option<String> {
    if !patterns::test(&ticket.id, is_uuid) {
        return Some(r#""id" is not a valid UUID"#.into());
    }
    if !patterns::test(&ticket.server_uuid, is_uuid) {
        return Some(r#""server_uuid" is not a valid UUID"#.into());
    }
    for (name, value) in [("scope", &ticket.scope), ("action", &ticket.action), ("status", &ticket.status)] {
        if value.as_str().is_none() {
            return Some(format!(r#""{name}" is not a string"#));
        }
    }
    None
}

/// `validateTickets`: the first bad ticket, as `ticket uuid "<id>" - <message>`.
pub fn validate_tickets(tickets: &[Ticket]) -> Option<String> {
    tickets
        .iter()
        .find_map(|t| validate_ticket(t).map(|msg| format!(r#"ticket uuid "{}" - {msg}"#, t.id.to_js_string())))
}
