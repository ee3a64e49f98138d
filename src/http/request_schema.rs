//! The JSON schemas of the request bodies in the OpenAPI document, written out by hand so
//! that they say what dapi checks (`validate::payload`, the body reader in `wire`) and no
//! more: a client or an API fuzzer that follows them builds requests dapi accepts, and
//! what they call invalid dapi refuses.
//!
//! The original checks many fields only when they are truthy (`if (vm.quota && ...)`), so
//! `null`, `false`, `0` and `""` pass wherever a field is checked that way: those fields
//! are `anyOf` their type and [`falsy`].

use serde_json::{json, Map, Value};

/// Placeholder types naming the request schemas in the handlers' annotations; their
/// schemas are replaced by [`schemas`].
#[derive(utoipa::ToSchema)]
pub struct AllocateRequest {}

#[derive(utoipa::ToSchema)]
pub struct CapacityRequest {}

/// A CNAPI server object (inventory mode's `PUT /inventory/servers/{uuid}`).
#[derive(utoipa::ToSchema)]
pub struct Server {}

#[derive(utoipa::ToSchema)]
pub struct InventoryDump {}

#[derive(utoipa::ToSchema)]
pub struct InventoryVm {}

fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// Values JavaScript reads as false, which the truthy-guarded checks let through.
fn falsy() -> Value {
    json!({ "enum": [null, false, 0, ""] })
}

/// `schema`, or a falsy value.
fn or_falsy(schema: Value) -> Value {
    json!({ "anyOf": [schema, falsy()] })
}

/// A number that must not be negative, checked only when truthy.
fn size(description: &str) -> Value {
    let mut schema = or_falsy(json!({ "type": "number", "minimum": 0 }));
    schema["description"] = json!(description);
    schema
}

const UUID: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

/// `typeof x === "object"`: objects, arrays and `null`.
fn js_object(description: &str) -> Value {
    json!({ "type": ["object", "array", "null"], "description": description })
}

/// Platform limits: SDC version (`7.0`) → platform stamp (`20140710T010203Z`).
fn platform_limits(description: &str) -> Value {
    json!({
        "type": "object",
        "description": description,
        "propertyNames": { "pattern": "^[0-9]\\.[0-9]$" },
        "additionalProperties": { "$ref": "#/components/schemas/PlatformStamp" }
    })
}

/// The request schemas, by name, for `components.schemas`.
pub fn schemas() -> Map<String, Value> {
    let mut map = Map::new();
    let mut put = |name: &str, schema: Value| {
        map.insert(name.to_string(), schema);
    };
    put("Uuid", json!({ "type": "string", "pattern": UUID, "description": "A UUID, lower-case hex." }));
    put(
        "PlatformStamp",
        json!({
            "type": "string",
            "pattern": "^20[0-9]{2}[01][0-9][0-3][0-9]T[0-2][0-9][0-5][0-9]{3}Z$",
            "description": "A platform image stamp, e.g. `20140710T010203Z`."
        }),
    );
    put(
        "AllocateRequest",
        json!({
            "type": "object",
            "description": "`POST /allocate` body. `img` is accepted for `image`, `pkg` for `package`. A batch gives `vms` or `count`, not both.",
            "required": ["servers", "vm", "image"],
            "not": { "required": ["vms", "count"] },
            "properties": {
                "servers": {
                    "type": "array",
                    "description": "Candidate servers (CNAPI server objects, each with its VMs in `vms`). None is answered 409 `received by DAPI`, as CNAPI answered it. Each uuid at most once (422 otherwise). Servers that do not match CNAPI's server schema are not refused: `hard-filter-invalid-servers` removes them, with the reason, and the answer is a 409 when none is left.",
                    "items": reference("Server")
                },
                "vm": reference("VmPayload"),
                "vms": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 1000,
                    "items": reference("VmPayload"),
                    "description": "A batch: VM payloads placed in order, each seeing the ones before it (no server is booked beyond its room; anti-affinity among them holds). A VM's uuid is its `vm_uuid` (else a new one). Answered with a `BatchResponse`. With `vms`, `vm` may be left out."
                },
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1000,
                    "description": "A batch of this many copies of `vm`, each with a new uuid."
                },
                "all_or_nothing": {
                    "type": "boolean",
                    "description": "In a batch: if any VM does not fit, answer 409 and place none."
                },
                "image": reference("Image"),
                "package": reference("Package"),
                "tickets": {
                    "type": "array",
                    "description": "Open provisioning tickets (CNAPI waitlist tickets).",
                    "items": reference("Ticket")
                },
                "nic_tags": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "NIC tags the VM needs; copied into `vm.nic_tags`."
                },
                "nic_tag_requirements": reference("NicTagRequirements"),
                "seed": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": u64::MAX,
                    "description": "Seed for `score-uniform-random`, making the decision reproducible."
                },
                "why_not": {
                    "type": "array",
                    "items": { "type": "string" },
                    "description": "With `explain=true`: restrict the per-server part of `explain` to these server uuids (a uuid not in `servers` is answered too)."
                }
            }
        }),
    );
    put(
        "CapacityRequest",
        json!({
            "description": "`POST /capacity` body: `{\"servers\": [...]}` (a bare array of servers is accepted too).",
            "anyOf": [
                {
                    "type": "object",
                    "required": ["servers"],
                    "properties": {
                        "servers": reference("CapacityServers"),
                        "packages": {
                            "type": "array",
                            "minItems": 1,
                            "items": reference("CapacityPackage"),
                            "description": "Packages (as in `/allocate`; `max_physical_memory` required): adds `packages` and `totals` to the answer, how many more VMs of each fit."
                        },
                        "vm": { "type": "object", "description": "The VM template for `packages` (brand, owner_uuid, traits, nic_tags, ...)." },
                        "image": reference("Image"),
                        "exact": { "type": "boolean", "description": "Also count by placing VMs one after another with the whole chain." }
                    }
                },
                reference("CapacityServers")
            ]
        }),
    );
    put(
        "CapacityPackage",
        json!({
            "type": "object",
            "description": "A package to count slots of: `max_physical_memory` (MiB) is required; `quota` (MiB) and `cpu_cap` when given are not negative; the `overprovision_*` ratios when given are above 0. The three figures are also read from numeric text (`\"1024\"`), as JavaScript's `Number` reads it.",
            "required": ["max_physical_memory"],
            "properties": {
                "max_physical_memory": { "type": "number", "exclusiveMinimum": 0 },
                "quota": { "type": ["number", "null"], "minimum": 0 },
                "cpu_cap": { "type": ["number", "null"], "minimum": 0 }
            },
            "patternProperties": {
                "^overprovision_": { "anyOf": [{ "type": "null" }, { "type": "number", "exclusiveMinimum": 0 }] }
            }
        }),
    );
    put(
        "CapacityServers",
        json!({ "type": "array", "items": reference("Server"), "description": "The servers (none: no capacities)." }),
    );
    put(
        "Server",
        json!({
            "type": "object",
            "description": "A CNAPI server object, with the VMs on it in `vms` (keyed by VM uuid). Any object is read: one that breaks CNAPI's server schema (a `uuid` that is not a UUID, a non-boolean `setup`, ...) is not refused but removed by `hard-filter-invalid-servers`, with the reason. The allocator reads `uuid`, `hostname`, `status`, `setup`, `reserved`, `reservoir`, `headnode`, `current_platform`, `memory_total_bytes`, `memory_available_bytes`, `reservation_ratio`, `traits`, `overprovision_ratios`, `sysinfo`, `vms`, the `disk_*` figures and `next_reboot`."
        }),
    );
    put(
        "VmPayload",
        json!({
            "type": "object",
            "description": "The VM to place (vmapi's payload). Checked as CNAPI checked it; the first failure is a 422 naming `vm`.",
            "required": ["vm_uuid", "owner_uuid", "ram", "brand"],
            "properties": {
                "vm_uuid": reference("Uuid"),
                "owner_uuid": reference("Uuid"),
                "brand": { "type": "string", "description": "`joyent`, `joyent-minimal`, `lx`, `kvm`, `bhyve`, ... (plugins assert a string)." },
                "ram": {
                    "type": "number",
                    "minimum": 0,
                    "description": "MiB. At least `image.requirements.min_ram` and at most `image.requirements.max_ram` when those are set."
                },
                "quota": size("GiB."),
                "cpu_cap": size("Percent of one core."),
                "vcpus": { "anyOf": [{ "type": "number", "minimum": 0 }, { "type": "null" }] },
                "traits": or_falsy(js_object("Traits the server must have.")),
                "nic_tags": or_falsy(json!({ "type": "array", "items": { "type": "string" } })),
                "nic_tag_requirements": reference("NicTagRequirements"),
                "locality": {
                    "type": ["object", "null"],
                    "description": "Near/far hints: VM uuids (`\"\"`, `0` or `false` are refused).",
                    "properties": {
                        "near": reference("UuidOrUuids"),
                        "far": reference("UuidOrUuids"),
                        "strict": { "type": "boolean" }
                    }
                },
                "affinity": { "type": "array", "items": reference("AffinityRule"), "description": "Affinity rules (a falsy value is refused)." },
                "internal_metadata": or_falsy(json!({
                    "type": ["object", "array"],
                    "properties": {
                        "docker:volumesfrom": or_falsy(json!({
                            "type": "string",
                            "pattern": "^\\[(\"[0-9a-f-]{36}\"(,\"[0-9a-f-]{36}\")*)?\\]$",
                            "description": "JSON text of an array of the VM uuids whose volumes the VM mounts."
                        }))
                    }
                }))
            }
        }),
    );
    put(
        "UuidOrUuids",
        // Falsy values are read as none, but `""` is refused: the plugins would read it as a uuid.
        json!({ "anyOf": [reference("Uuid"), { "type": "array", "items": reference("Uuid") }, { "enum": [null, false, 0] }] }),
    );
    put(
        "AffinityRule",
        json!({
            "type": "object",
            "description": "A parsed affinity rule (`key==value`, `key!=~value`, ...). `re` values are JavaScript regular expressions; one that does not compile is a 422.",
            "required": ["key", "operator", "value", "valueType", "isSoft"],
            "properties": {
                "key": { "type": "string" },
                "operator": { "enum": ["==", "!="] },
                "value": { "type": "string" },
                "valueType": { "enum": ["exact", "glob", "re"] },
                "isSoft": { "type": "boolean" }
            }
        }),
    );
    put(
        "NicTagRequirements",
        json!({
            "type": "array",
            "description": "Groups of alternative NIC tags: the server needs one tag of each group.",
            "items": { "type": "array", "items": { "type": "string", "minLength": 1 } }
        }),
    );
    put(
        "Image",
        json!({
            "type": "object",
            "description": "The IMGAPI image manifest.",
            "properties": {
                "type": { "description": "`zone-dataset`, `lx-dataset`, `zvol`, ... (read, not checked)." },
                "image_size": { "type": ["number", "null"], "minimum": 0, "description": "MiB (zvol images); not negative." },
                "traits": or_falsy(js_object("Traits the server must have.")),
                "requirements": or_falsy(json!({
                    "type": "object",
                    "properties": {
                        "min_platform": platform_limits("The oldest platform per SDC version."),
                        "max_platform": platform_limits("The newest platform per SDC version."),
                        "min_ram": { "type": ["number", "null"], "minimum": 0, "description": "MiB, not negative; `vm.ram` must be at least this." },
                        "max_ram": { "type": ["number", "null"], "minimum": 0, "description": "MiB, not negative; `vm.ram` must be at most this." }
                    }
                })),
                "files": { "description": "The image's files (`size` in bytes), read for the disk it needs; anything but an array is read as no files." }
            }
        }),
    );
    // Coerced with JavaScript's `Number()`: refused only when that gives NaN.
    let numeric_text =
        json!({ "type": "string", "pattern": "^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*$" });
    let ratio = || {
        json!({
            "description": "A number, or anything JavaScript's `Number()` reads as one (numeric text, a boolean, `null`, a one-element array of those).",
            "anyOf": [
                { "type": ["number", "boolean", "null"] },
                numeric_text,
                { "type": "array", "maxItems": 1, "items": { "anyOf": [{ "type": ["number", "null"] }, numeric_text, { "const": "" }] } },
                falsy()
            ]
        })
    };
    put(
        "Package",
        json!({
            "type": "object",
            "description": "The PAPI package.",
            "properties": {
                "overprovision_cpu": ratio(),
                "overprovision_memory": ratio(),
                "overprovision_storage": ratio(),
                "overprovision_network": ratio(),
                "overprovision_io": ratio(),
                "alloc_server_spread": or_falsy(json!({ "enum": ["min-ram", "max-ram", "random", "min-owner"] })),
                "min_platform": or_falsy(platform_limits("The oldest platform per SDC version (or JSON text of it).")),
                "max_platform": or_falsy(platform_limits("The newest platform per SDC version (or JSON text of it).")),
                "traits": or_falsy(js_object("Traits the server must have (or JSON text of them).")),
                "cpu_cap": { "description": "Percent of one core (read, not checked)." },
                "quota": { "description": "MiB (read, not checked)." },
                "max_physical_memory": { "description": "MiB (read, not checked)." }
            }
        }),
    );
    put(
        "Ticket",
        json!({
            "type": "object",
            "description": "A CNAPI waitlist ticket; those for a VM's provision reserve its resources on the server.",
            "required": ["id", "server_uuid", "scope", "action", "status"],
            "properties": {
                "uuid": { "description": "Not read; `id` is the ticket's uuid." },
                "id": reference("Uuid"),
                "server_uuid": reference("Uuid"),
                "scope": { "type": "string", "description": "`vm` for VM tickets." },
                "action": { "type": "string", "description": "`provision`, ..." },
                "status": { "type": "string", "description": "`queued`, `active`, ..." },
                "extra": { "description": "The ticket's VM: `ram`, `quota`, `cpu_cap`, `brand`, ... (anything else is read as no VM)." }
            }
        }),
    );
    put(
        "InventoryDump",
        json!({
            "description": "`POST /inventory/load`: the whole inventory, `{servers: [...]}` or a bare array; each server checked as `/allocate` reads it (an invalid one is refused, 422 naming it).",
            "oneOf": [
                { "type": "array", "items": reference("Server") },
                {
                    "type": "object",
                    "required": ["servers"],
                    "properties": { "servers": { "type": "array", "items": reference("Server") } }
                }
            ]
        }),
    );
    put(
        "InventoryVm",
        json!({
            "type": "object",
            "description": "A VM as VMAPI or CNAPI lists it; its server is `server_uuid` (here or in `?server_uuid=`).",
            "properties": { "server_uuid": reference("Uuid") }
        }),
    );
    // Whole requests dapi answers (the README's examples): a client sees one that works, and
    // Schemathesis sends them first.
    for (name, text) in [
        ("AllocateRequest", include_str!("../../examples/allocate.json")),
        ("CapacityRequest", include_str!("../../examples/capacity.json")),
    ] {
        if let (Some(schema), Ok(example)) = (map.get_mut(name), serde_json::from_str::<Value>(text)) {
            schema["examples"] = json!([example]);
        }
    }

    map
}
