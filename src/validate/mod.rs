//! Validation of requests and configuration, with the original's exact messages
//! (see `VALIDATION.md` of the spec).
//!
//! * [`validate_allocate`]: the checks CNAPI ran on `/allocate` parameters before calling
//!   the allocator (image, package, VM payload, NIC tag requirements), first failure wins,
//!   plus dapi's own checks of what the production chain's plugins assert (VM `brand`,
//!   `vcpus`) and of the tickets.
//! * The server JSON schema lives with the model (`model::schema`): it runs while servers
//!   are read. The allocator defaults are checked by the engine (`engine::defaults`).

mod payload;

use crate::js::Js;
use crate::model::{AllocateBody, Server};

pub use crate::model::schema::{is_platform, is_uuid, validate_server};
pub use crate::model::FieldError;
pub use payload::{
    validate_affinity, validate_image, validate_image_extensions, validate_locality, validate_nic_tag_requirements,
    validate_package, validate_platform_limits, validate_ticket, validate_tickets, validate_traits,
    validate_vm_extensions, validate_vm_payload,
};

/// Runs CNAPI's `/allocate` validations in order; the first failure is returned.
/// Side effects as in the original: `internal_metadata["docker:volumesfrom"]` is parsed into
/// `vm.volumes_from`, and a package's `min_platform`/`max_platform`/`traits` given as JSON
/// text are replaced by the parsed value. Run it once per request.
///
/// Order: image (then dapi's image sizes), package, VM payload, then dapi's VM checks
/// (`brand`, `vcpus`, what the plugins assert), the NIC tag requirements, the NIC tags and
/// the tickets.
pub fn validate_allocate(body: &mut AllocateBody<'_>) -> Result<(), FieldError> {
    validate_server_list(&body.servers)?;
    validate_payload(body)
}

/// [`validate_allocate`] without the server list: inventory mode takes its servers from
/// the inventory, which were checked when they were stored.
pub fn validate_payload(body: &mut AllocateBody<'_>) -> Result<(), FieldError> {
    match first_failure(body) {
        Some((field, message)) => Err(FieldError::invalid(field, message)),
        None => Ok(()),
    }
}

/// The field a VM validation message is about, under `prefix` (a batch's `vms[i]`, a
/// capacity query's `vm`): `vms[i].ram` for `VM "ram" is not a number`, `vms[i].vm_uuid`
/// for `"vm.vm_uuid" is an invalid UUID`, else `prefix` itself.
pub fn vm_field(prefix: &str, message: &str) -> String {
    let quoted = message.split('"').nth(1).unwrap_or("");
    let name = quoted.strip_prefix("vm.").unwrap_or(quoted);
    let name: String = name.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    if name.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// dapi: the candidate list itself. A uuid given twice would make the answer ambiguous. An
/// empty list is no mistake: CNAPI ran the allocator on it too (every server reserved, say),
/// and answered 409 `received by DAPI`. Individual servers are not checked here: invalid ones
/// are filtered, with their reasons, by `hard-filter-invalid-servers`.
pub fn validate_server_list(servers: &[Server]) -> Result<(), FieldError> {
    let mut seen =
        std::collections::HashMap::with_capacity_and_hasher(servers.len(), crate::fxhash::FxBuild::default());
    for (i, server) in servers.iter().enumerate() {
        let Some(uuid) = server.uuid.as_str() else { continue };
        if let Some(first) = seen.insert(uuid, i) {
            return Err(FieldError::invalid(
                format!("servers[{i}].uuid"),
                format!("duplicate server uuid {uuid} (also servers[{first}])"),
            ));
        }
    }
    Ok(())
}

fn first_failure(body: &mut AllocateBody<'_>) -> Option<(&'static str, String)> {
    if let Some(msg) = validate_image(&body.image).or_else(|| validate_image_extensions(&body.image)) {
        return Some(("image", msg));
    }
    if let Some(msg) = body.package.as_mut().and_then(validate_package) {
        return Some(("package", msg));
    }
    // The VM as sent (its own `nic_tags` swapped in, then back): CNAPI copied the top-level
    // `nic_tags` in after checking it.
    let swap_own_nic_tags = |body: &mut AllocateBody<'_>| {
        if let Some(own) = body.vm_own_nic_tags.as_mut() {
            std::mem::swap(own, &mut body.vm.nic_tags);
        }
    };
    swap_own_nic_tags(body);
    let payload = validate_vm_payload(&mut body.vm, &body.image.requirements);
    swap_own_nic_tags(body);
    if let Some(msg) = payload {
        return Some(("vm", msg));
    }
    if let Some(msg) = validate_vm_extensions(&body.vm) {
        return Some(("vm", msg));
    }
    let requirements = &body.vm.nic_tag_requirements;
    if let Some(msg) = (!requirements.is_undefined()).then(|| validate_nic_tag_requirements(requirements)).flatten() {
        return Some(("nic_tag_requirements", msg));
    }
    if let Some(msg) = validate_nic_tags_param(&body.vm.nic_tags) {
        return Some(("nic_tags", msg));
    }
    validate_tickets(&body.tickets).map(|msg| ("tickets", msg))
}

/// CNAPI's own check of the `nic_tags` parameter: every element a string. (The VM payload
/// check, which runs first, already refuses what this refuses when the tags are the VM's own.)
pub fn validate_nic_tags_param(tags: &Js) -> Option<String> {
    let bad = tags.as_arr().is_some_and(|t| t.iter().any(|tag| tag.as_str().is_none()));
    bad.then(|| "invalid nic_tag".to_string())
}

#[cfg(test)]
mod tests;
