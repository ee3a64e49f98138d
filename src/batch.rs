//! Batch allocation: many VMs placed in one request, each seeing the ones before it.
//!
//! A body with `vms: [vm, ...]` (each VM payload may carry its own `image` and `package`;
//! otherwise the top-level ones apply) or `count: N` (N copies of `vm`, each with a new
//! uuid) is a batch. The servers are read once into an engine
//! [`Datacenter`](crate::engine::Datacenter); each VM is allocated in turn and listed on
//! its server before the next one is, so a batch never double-books a server and
//! anti-affinity among its VMs holds. VM `i` uses seed `seed + i` when a seed is given or
//! configured.
//!
//! The answer lists, per VM, its uuid and the chosen server's uuid, or the 409 reason,
//! with the steps (the compact form unless full ones are asked for). With
//! `all_or_nothing: true` a VM that does not fit ends the batch: the answer is 409 naming
//! it, and no VM is placed.

use serde_json::value::RawValue;

use crate::config::Limits;
use crate::engine::{write_json_str, Datacenter, Engine, StepsFormat, VmRequest};
use crate::js::Js;
use crate::model::{AllocateBody, FieldError, Image, Package, ParamType, RawParams, VmPayload};
use crate::outcome::{check_limits, failure_reason, AnswerError, Verdict};
use crate::validate::{validate_allocate, vm_field};

/// The most VMs one batch may place.
pub const MAX_BATCH: usize = 1000;

/// The most VMs × servers a batch answers with full steps (about 40 bytes per server per
/// step each): beyond it the answer would take gigabytes.
pub const MAX_FULL_LISTING: usize = 1_000_000;

/// How a batch is asked for beyond its body.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchOptions {
    /// The steps' form; the compact one (`removed`) when not given.
    pub steps: Option<StepsFormat>,
    /// `dapi allocate --count N`: N copies of the body's `vm` (as `count: N` in the body).
    pub count: Option<usize>,
}

/// One VM of the batch, read and checked.
struct Item {
    uuid: String,
    vm: VmPayload,
    image: Option<Image>,
    package: Option<Package>,
    /// While validating: the request holds the item's package.
    own_package: bool,
    /// What the VM payload check takes as the VM's own `nic_tags` where the top-level ones
    /// replaced them (`AllocateBody::vm_own_nic_tags`): a `vms` VM without tags of its own
    /// got the top-level ones; a `count` VM is the request's.
    own_nic_tags: Option<Js>,
    /// What custom plugins see as `opts`: the VM's JSON with its own uuid, its own image's
    /// and package's (else the request's).
    raw: OwnedRaw,
}

#[derive(Default)]
struct OwnedRaw {
    vm: Option<String>,
    image: Option<String>,
    package: Option<String>,
}

/// The JSON text of a batch VM: `text` (the request's `vm` or one of `vms`) without the
/// VM's own image and package, and with the uuids the VM was given.
fn vm_text(text: Option<&str>, vm: &VmPayload) -> Option<String> {
    let mut value: serde_json::Value = crate::js::json::from_str(text?).ok()?;
    let object = value.as_object_mut()?;
    object.shift_remove("image");
    object.shift_remove("package");
    if let Some(uuid) = vm.vm_uuid.as_str() {
        object.insert("vm_uuid".into(), uuid.into());
    }
    if vm.uuid.is_undefined() {
        object.shift_remove("uuid");
    }
    Some(crate::js::json::stringify(&value))
}

/// A batch's answer: its HTTP status, the body, and what it decided.
#[derive(Debug)]
pub struct BatchAnswer {
    pub status: u16,
    pub body: Vec<u8>,
    pub placed: usize,
    pub failed: usize,
    /// Each VM decided, in order (with `all_or_nothing`, up to the one that did not fit).
    pub vms: Vec<VmOutcome>,
}

/// What was decided for one VM of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmOutcome {
    pub uuid: String,
    /// Its server, or why none fits.
    pub verdict: Verdict,
}

impl BatchAnswer {
    pub fn verdict(&self) -> Verdict {
        Verdict::Batch { placed: self.placed, failed: self.failed, status: self.status }
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> AnswerError {
    AnswerError::Invalid(vec![FieldError::invalid(field, message)])
}

fn read_object<T: serde::de::DeserializeOwned>(field: &str, raw: &RawValue) -> Result<T, AnswerError> {
    let t = ParamType::of(Some(raw));
    if t != ParamType::Object {
        return Err(invalid(field, format!("value is not an object. (was: {})", t.tag())));
    }
    crate::js::json::from_str(raw.get()).map_err(|e| AnswerError::Invalid(vec![FieldError::unreadable(field, &e)]))
}

/// A VM's uuid: its `vm_uuid`, else its `uuid`, else a new one (written into `vm_uuid`).
fn uuid_of(vm: &mut VmPayload) -> String {
    if let Some(s) = vm.vm_uuid.as_str() {
        return s.to_string();
    }
    // Given as `uuid` alone, it is the VM's `vm_uuid` too (which validation checks).
    let uuid = vm.uuid.as_str().map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
    vm.vm_uuid = Js::str(&uuid);
    uuid
}

/// The batch's VMs as given (not yet validated).
fn read_items(request: &AllocateBody<'_>, count: Option<usize>) -> Result<Vec<Item>, AnswerError> {
    let fields = request.batch;
    let count = match (count, fields.count) {
        (Some(n), _) => Some(n as f64),
        (None, Some(raw)) => match crate::js::json::from_str::<f64>(raw.get()) {
            Ok(n) => Some(n),
            Err(_) => return Err(invalid("count", "must be a whole number from 1 to 1000")),
        },
        (None, None) => None,
    };
    // Top-level NIC tags apply to every VM, as they do to `vm`; the VM's own tags as they
    // were, for the checks.
    let copy_top = |vm: &mut VmPayload| {
        let own_nic_tags = (vm.nic_tags.is_undefined() && request.vm_own_nic_tags.is_some()).then_some(Js::Undefined);
        if vm.nic_tags.is_undefined() {
            vm.nic_tags = request.vm.nic_tags.clone();
        }
        if vm.nic_tag_requirements.is_undefined() {
            vm.nic_tag_requirements = request.vm.nic_tag_requirements.clone();
        }
        own_nic_tags
    };
    match (fields.vms, count) {
        (Some(_), Some(_)) => Err(invalid("count", "give either vms or count (with vm), not both")),
        (None, None) => Err(invalid("vms", "a batch needs vms or count")),
        (None, Some(n)) => {
            if n.fract() != 0.0 || !(1.0..=MAX_BATCH as f64).contains(&n) {
                return Err(invalid("count", format!("must be a whole number from 1 to {MAX_BATCH}")));
            }
            Ok((0..n as usize)
                .map(|_| {
                    let mut vm = request.vm.clone();
                    vm.vm_uuid = Js::Undefined;
                    vm.uuid = Js::Undefined;
                    let uuid = uuid_of(&mut vm);
                    let raw = OwnedRaw { vm: vm_text(request.raw.vm, &vm), ..OwnedRaw::default() };
                    let own_nic_tags = request.vm_own_nic_tags.clone();
                    Item { uuid, vm, image: None, package: None, own_package: false, own_nic_tags, raw }
                })
                .collect())
        }
        (Some(raw), None) => {
            let elements: Vec<&RawValue> = match ParamType::of(Some(raw)) {
                ParamType::Array => serde_json::from_str(raw.get()).map_err(|e| invalid("vms", e.to_string()))?,
                _ => return Err(invalid("vms", "value was not an array")),
            };
            if elements.is_empty() || elements.len() > MAX_BATCH {
                return Err(invalid("vms", format!("must hold 1 to {MAX_BATCH} VMs, not {}", elements.len())));
            }
            let mut items = Vec::with_capacity(elements.len());
            let mut seen = std::collections::HashMap::new();
            for (i, element) in elements.into_iter().enumerate() {
                let field = format!("vms[{i}]");
                let mut vm: VmPayload = read_object(&field, element)?;
                #[derive(serde::Deserialize)]
                struct Own<'a> {
                    #[serde(borrow)]
                    image: Option<&'a RawValue>,
                    #[serde(borrow)]
                    package: Option<&'a RawValue>,
                }
                let own: Own = serde_json::from_str(element.get()).map_err(|e| invalid(&field, e.to_string()))?;
                let image = own.image.map(|r| read_object::<Image>(&format!("{field}.image"), r)).transpose()?;
                let package =
                    own.package.map(|r| read_object::<Package>(&format!("{field}.package"), r)).transpose()?;
                let own_nic_tags = copy_top(&mut vm);
                let uuid = uuid_of(&mut vm);
                if let Some(first) = seen.insert(uuid.clone(), i) {
                    return Err(invalid(format!("{field}.vm_uuid"), format!("{uuid} is also vms[{first}]'s")));
                }
                let raw = OwnedRaw {
                    vm: vm_text(Some(element.get()), &vm),
                    image: own.image.map(|r| r.get().to_string()),
                    package: own.package.map(|r| r.get().to_string()),
                };
                items.push(Item { uuid, vm, image, package, own_package: false, own_nic_tags, raw });
            }
            Ok(items)
        }
    }
}

/// Validates each VM with CNAPI's checks (its own image and package, or the shared ones),
/// naming the failing field `vms[i].<attribute>`.
fn validate_items(request: &mut AllocateBody<'_>, items: &mut [Item]) -> Result<(), AnswerError> {
    // The top-level tags are a parameter of their own (CNAPI checked them), even where every
    // VM has tags of its own.
    if request.vm_own_nic_tags.is_some() {
        if let Some(message) = crate::validate::validate_nic_tags_param(&request.vm.nic_tags) {
            return Err(invalid("nic_tags", message));
        }
    }
    for (i, item) in items.iter_mut().enumerate() {
        // The item's VM, image and package take the request's places for the checks (which
        // may rewrite them), then go back.
        let swap = |request: &mut AllocateBody<'_>, item: &mut Item| {
            std::mem::swap(&mut request.vm, &mut item.vm);
            std::mem::swap(&mut request.vm_own_nic_tags, &mut item.own_nic_tags);
            if let Some(image) = item.image.as_mut() {
                std::mem::swap(&mut request.image, image);
            }
            if item.package.is_some() || item.own_package {
                std::mem::swap(&mut request.package, &mut item.package);
                item.own_package = !item.own_package;
            }
        };
        item.own_package = false;
        swap(request, item);
        let result = validate_allocate(request);
        swap(request, item);
        if let Err(e) = result {
            let prefix = format!("vms[{i}]");
            let field = match e.field.as_str() {
                "vm" => vm_field(&prefix, &e.message),
                "image" if item.image.is_some() => format!("{prefix}.image"),
                "package" if item.package.is_some() => format!("{prefix}.package"),
                // The top-level tags, where the VM had none of its own.
                "nic_tags" if item.own_nic_tags.is_some() => e.field.clone(),
                "nic_tags" | "nic_tag_requirements" => format!("{prefix}.{}", e.field),
                other => other.to_string(),
            };
            return Err(AnswerError::Invalid(vec![FieldError { field, ..e }]));
        }
    }
    Ok(())
}

/// Places a batch (a parsed body whose `vms` or `count` make it one, or any body with
/// `options.count`) and writes its answer.
pub fn allocate_batch(
    engine: &Engine,
    limits: &Limits,
    request: AllocateBody<'_>,
    options: BatchOptions,
) -> Result<BatchAnswer, AnswerError> {
    allocate_batch_as(engine, limits, request, options, &[])
}

/// [`allocate_batch`] with the VMs that had no uuid (and were given a new one) given
/// `uuids[i]` instead, for VM `i` (when there is one): a batch decided again (the shadow
/// config) then places the same VMs as the first time.
pub fn allocate_batch_as(
    engine: &Engine,
    limits: &Limits,
    mut request: AllocateBody<'_>,
    options: BatchOptions,
    uuids: &[String],
) -> Result<BatchAnswer, AnswerError> {
    check_limits(limits, &request.servers)?;
    let all_or_nothing = match request.batch.all_or_nothing {
        None => false,
        Some(raw) => {
            serde_json::from_str::<bool>(raw.get()).map_err(|_| invalid("all_or_nothing", "must be true or false"))?
        }
    };
    let copies = request.batch.vms.is_none();
    if copies {
        // The copies differ only in their uuids: the VM is checked once, as `vm`.
        validate_allocate(&mut request)?;
    }
    let mut items = read_items(&request, options.count)?;
    if !copies {
        validate_items(&mut request, &mut items)?;
    }
    for (item, uuid) in items.iter_mut().zip(uuids) {
        // A uuid from the body is the same both times: only a generated one differs.
        if item.uuid != *uuid {
            item.uuid = uuid.clone();
            item.vm.vm_uuid = Js::str(uuid);
        }
    }
    let format = options.steps.unwrap_or(StepsFormat::Removed);
    // Full steps repeat every remaining server at every step, for every VM.
    let listed = items.len().saturating_mul(request.servers.len());
    if format == StepsFormat::Full && listed > MAX_FULL_LISTING {
        return Err(invalid(
            "steps",
            format!(
                "full steps for {} VMs on {} servers would be too big; ask for steps=removed",
                items.len(),
                request.servers.len()
            ),
        ));
    }
    let base_seed = request.seed.or(engine.defaults().seed);
    let servers = std::mem::take(&mut request.servers);
    let raw = std::mem::take(&mut request.raw_servers);
    let mut dc = Datacenter::new(servers, raw);

    let mut out = Vec::with_capacity(4096 + items.len() * 512);
    out.extend_from_slice(b"{\"vms\":[");
    let (mut placed, mut failed) = (0, 0);
    let mut vms = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let vm_request = VmRequest {
            vm: &item.vm,
            image: item.image.as_ref().unwrap_or(&request.image),
            package: item.package.as_ref().or(request.package.as_ref()),
            tickets: &request.tickets,
            seed: base_seed.map(|s| s.wrapping_add(i as u64)),
            raw: RawParams {
                vm: item.raw.vm.as_deref(),
                image: item.raw.image.as_deref().or(request.raw.image),
                package: item.raw.package.as_deref().or(request.raw.package),
                tickets: request.raw.tickets,
            },
        };
        let allocation =
            engine.place(&mut dc, &vm_request, &item.uuid).map_err(|e| AnswerError::Internal(e.to_string()))?;
        let mut steps = Vec::new();
        allocation.steps_view(dc.servers(), format).write_json(&mut steps);
        if allocation.chosen.is_none() && all_or_nothing {
            let reason = failure_reason(&allocation.steps);
            vms.push(VmOutcome { uuid: item.uuid.clone(), verdict: Verdict::NoFit { reason: reason.clone() } });
            let mut body = Vec::with_capacity(steps.len() + 256);
            body.extend_from_slice(br#"{"code":"NoAllocatableServersError","message":"#);
            write_json_str(&mut body, &format!("No compute resources available: vms[{i}] ({}): {reason}", item.uuid));
            body.extend_from_slice(br#","placed":0,"failed":{"index":"#);
            body.extend_from_slice(i.to_string().as_bytes());
            body.extend_from_slice(br#","uuid":"#);
            write_json_str(&mut body, &item.uuid);
            body.extend_from_slice(br#","steps":"#);
            body.extend_from_slice(&steps);
            body.extend_from_slice(b"}}");
            return Ok(BatchAnswer { status: 409, body, placed: 0, failed: 1, vms });
        }
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"uuid":"#);
        write_json_str(&mut out, &item.uuid);
        match allocation.chosen {
            Some(id) => {
                placed += 1;
                out.extend_from_slice(br#","server_uuid":"#);
                let server = dc.servers()[id].reason_key();
                write_json_str(&mut out, &server);
                vms.push(VmOutcome { uuid: item.uuid.clone(), verdict: Verdict::Chosen { uuid: server } });
            }
            None => {
                failed += 1;
                out.extend_from_slice(br#","server_uuid":null,"code":"NoAllocatableServersError","message":"#);
                let reason = failure_reason(&allocation.steps);
                write_json_str(&mut out, &format!("No compute resources available: {reason}"));
                vms.push(VmOutcome { uuid: item.uuid.clone(), verdict: Verdict::NoFit { reason } });
            }
        }
        out.extend_from_slice(br#","steps":"#);
        out.extend_from_slice(&steps);
        out.push(b'}');
    }
    out.extend_from_slice(format!("],\"placed\":{placed},\"failed\":{failed}}}").as_bytes());
    Ok(BatchAnswer { status: 200, body: out, placed, failed, vms })
}
