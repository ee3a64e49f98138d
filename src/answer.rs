//! One answer path for the service and the command line.
//!
//! A request goes: parse (the caller's part: `POST /allocate` may parse a big body while it
//! arrives) → limits → validation → the engine → the answer's bytes. `POST /allocate` and
//! `dapi allocate` both call [`decide_noting`] and [`write_explained_allocation_on`] (the
//! CLI through [`allocate_in_parts`]); `POST /capacity` and `dapi capacity` both call
//! [`capacity`]. The two
//! front ends differ only where they say so:
//!
//! * no fit: the service answers 409 with CNAPI's error body ([`NoFitBody::Error`]); the
//!   CLI prints `{"server": null, "steps": [...]}` ([`NoFitBody::NullServer`]), the form the
//!   recorded-case checkers read;
//! * the service may send a big answer in parts while it is written (`part_done`).

use crate::batch::BatchOptions;
use crate::config::Limits;
use crate::engine::{write_json_str, Allocation, Engine, StepsFormat};
use crate::explain::{self, ExplainOptions};
use crate::model::{AllocateBody, Server};
use crate::outcome::{check_limits, failure_reason, AnswerError, Verdict};
use crate::validate::{validate_allocate, validate_server_list, FieldError};
use crate::wire::{parse_allocate_body, parse_capacity_body, parse_capacity_request, CapacityBody};

/// Checks a parsed request (limits, then CNAPI's validations, which may rewrite a few of
/// its fields) and runs the engine on it, with the plugins' notes taken when the answer is
/// to be explained.
pub fn decide_noting(
    engine: &Engine,
    limits: &Limits,
    request: &mut AllocateBody<'_>,
    explain: bool,
) -> Result<Allocation, AnswerError> {
    check_limits(limits, &request.servers)?;
    validate_allocate(request)?;
    engine.allocate_noting(request, explain).map_err(|e| AnswerError::Internal(e.to_string()))
}

/// How a no-fit answer is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoFitBody {
    /// `{"code": "NoAllocatableServersError", "message": ..., "steps": [...]}`, the body of
    /// the service's 409 (CNAPI's error).
    #[default]
    Error,
    /// `{"server": null, "steps": [...]}`, the shape of a 200 answer with no server: what
    /// the CLI prints, so that one reader handles both outcomes.
    NullServer,
}

/// How to write an allocation's answer.
#[derive(Debug, Clone, Copy, Default)]
pub struct AnswerOptions {
    pub steps: StepsFormat,
    pub no_fit: NoFitBody,
    /// The process ends once the answer is written (the CLI): the parsed request is left
    /// to the end of the process rather than freed, which at 5,000 servers costs more than
    /// the whole engine.
    pub exiting: bool,
}

/// Roughly how many bytes [`write_allocation_on`] writes (to size buffers, and to decide
/// whether the service sends the answer in parts).
pub fn answer_size_hint(request: &AllocateBody<'_>, allocation: &Allocation, format: StepsFormat) -> usize {
    allocation.answer_size_hint(request.servers.len(), format)
}

/// The answer's body appended to `out`, with `part_done` called after each step (the
/// service sends what is written so far when it is big enough); the servers are the
/// request's, or held apart from it (inventory mode).
pub fn write_allocation_on(
    raw_servers: &[&str],
    servers: &[Server<'_>],
    allocation: &Allocation,
    options: AnswerOptions,
    out: &mut Vec<u8>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<(), AnswerError> {
    if allocation.chosen.is_some() || options.no_fit == NoFitBody::NullServer {
        return allocation
            .write_answer(raw_servers, servers, options.steps, out, part_done)
            .map_err(|e| AnswerError::Internal(e.to_string()));
    }
    // {"code", "message", "steps"}, written the way the 200 answer is.
    let reason = failure_reason(&allocation.steps);
    out.extend_from_slice(br#"{"code":"NoAllocatableServersError","message":"#);
    write_json_str(out, &format!("No compute resources available: {reason}"));
    out.extend_from_slice(br#","steps":"#);
    allocation.steps_view(servers, options.steps).write_json_in_parts(out, part_done);
    out.push(b'}');
    Ok(())
}

/// [`write_allocation_on`], then (when asked) the `explain` member at the end of the body;
/// everything before it is byte for byte the plain answer.
pub fn write_explained_allocation(
    request: &AllocateBody<'_>,
    allocation: &Allocation,
    options: AnswerOptions,
    explain: Option<&ExplainOptions>,
    out: &mut Vec<u8>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<(), AnswerError> {
    write_explained_allocation_on(&request.raw_servers, &request.servers, allocation, options, explain, out, part_done)
}

/// [`write_explained_allocation`] for servers held apart from the request (inventory mode).
pub fn write_explained_allocation_on(
    raw_servers: &[&str],
    servers: &[Server<'_>],
    allocation: &Allocation,
    options: AnswerOptions,
    explain: Option<&ExplainOptions>,
    out: &mut Vec<u8>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<(), AnswerError> {
    write_allocation_on(raw_servers, servers, allocation, options, out, part_done)?;
    if let Some(asked) = explain {
        let explained = explain::explain(servers, allocation, asked);
        explain::append_to_answer(out, &explained).map_err(|e| AnswerError::Internal(e.to_string()))?;
    }
    Ok(())
}

/// Roughly how many bytes the `explain` member adds (about 440 a server listed, at 5000
/// servers with the production chain's six scorers).
pub fn explain_size_hint(request: &AllocateBody<'_>, explain: Option<&ExplainOptions>) -> usize {
    explain_size_hint_on(request.servers.len(), explain)
}

/// [`explain_size_hint`] for `servers` servers.
pub fn explain_size_hint_on(servers: usize, explain: Option<&ExplainOptions>) -> usize {
    match explain {
        None => 0,
        Some(o) => 4096 + 480 * o.why_not.as_ref().map_or(servers, Vec::len),
    }
}

/// A whole answer: what was decided and the body.
#[derive(Debug)]
pub struct Answer {
    pub verdict: Verdict,
    pub body: Vec<u8>,
}

/// Parses, checks, allocates and writes the answer of one whole body (the CLI's path; the
/// service runs the same steps, parsing its own way and writing big answers in parts).
pub fn allocate(engine: &Engine, limits: &Limits, body: &[u8], options: AnswerOptions) -> Result<Answer, AnswerError> {
    allocate_with(engine, limits, body, options, BatchOptions::default(), None)
}

/// [`allocate`], placing a batch (`crate::batch`) when the body is one or `batch.count`
/// makes it one, and explained when `explain` is given (its `why_not` joined by the body's).
pub fn allocate_with(
    engine: &Engine,
    limits: &Limits,
    body: &[u8],
    options: AnswerOptions,
    batch: BatchOptions,
    explain: Option<ExplainOptions>,
) -> Result<Answer, AnswerError> {
    allocate_in_parts(engine, limits, body, options, batch, explain, None, &mut |_| {})
}

/// [`allocate_with`], handing the answer's body to `part_done` while it is written (it may
/// take what `out` holds; the answer's body is then what it left), so that a big answer is
/// not held whole next to its request. `part_bytes`: the size of the parts it takes (the
/// buffer is sized for two), or `None` for a whole answer.
#[allow(clippy::too_many_arguments)]
pub fn allocate_in_parts(
    engine: &Engine,
    limits: &Limits,
    body: &[u8],
    options: AnswerOptions,
    batch: BatchOptions,
    explain: Option<ExplainOptions>,
    part_bytes: Option<usize>,
    part_done: &mut dyn FnMut(&mut Vec<u8>),
) -> Result<Answer, AnswerError> {
    let mut request = parse_allocate_body(body)?;
    if request.batch.is_batch() || batch.count.is_some() {
        batch_not_explained(explain.as_ref())?;
        let answer = crate::batch::allocate_batch(engine, limits, request, batch)?;
        return Ok(Answer { verdict: answer.verdict(), body: answer.body });
    }
    let explain = explain.map(|o| with_body_why_not(o, body)).transpose()?;
    let allocation = decide_noting(engine, limits, &mut request, explain.is_some())?;
    let size = answer_size_hint(&request, &allocation, options.steps) + explain_size_hint(&request, explain.as_ref());
    let mut out = Vec::with_capacity(part_bytes.map_or(size, |part| size.min(2 * part)));
    write_explained_allocation(&request, &allocation, options, explain.as_ref(), &mut out, part_done)?;
    let verdict = Verdict::of(&request, &allocation);
    if options.exiting {
        std::mem::forget((request, allocation));
    }
    Ok(Answer { verdict, body: out })
}

/// A batch asked to be explained is refused (422 naming `explain`): answered, it would lack
/// the member asked for.
pub fn batch_not_explained(explain: Option<&ExplainOptions>) -> Result<(), AnswerError> {
    match explain {
        None => Ok(()),
        Some(_) => Err(AnswerError::Invalid(vec![FieldError::invalid(
            "explain",
            "explains one allocation, not a batch (vms or count): ask for each VM on its own",
        )])),
    }
}

/// `dapi explain`: the explanation of one request as a terminal report.
pub fn explain_report(
    engine: &Engine,
    limits: &Limits,
    body: &[u8],
    options: ExplainOptions,
    colour: bool,
) -> Result<String, AnswerError> {
    let mut request = parse_allocate_body(body)?;
    if request.batch.is_batch() {
        batch_not_explained(Some(&options))?;
    }
    let options = with_body_why_not(options, body)?;
    let allocation = decide_noting(engine, limits, &mut request, true)?;
    let explained = explain::explain(&request.servers, &allocation, &options);
    Ok(explain::report(&explained, options.why_not.is_some(), colour))
}

/// The explain options with the body's `why_not` uuids added (422 when it is malformed).
pub fn with_body_why_not(mut options: ExplainOptions, body: &[u8]) -> Result<ExplainOptions, AnswerError> {
    if let Some(uuids) = explain::why_not_in_body(body)? {
        options.ask_about(uuids);
    }
    Ok(options)
}

/// A capacity report: the answer's body and how many servers were asked about.
#[derive(Debug)]
pub struct CapacityAnswer {
    pub servers: usize,
    pub body: Vec<u8>,
}

/// Parses, checks and answers one `POST /capacity` body (`{servers: [...]}` or a bare
/// array of servers).
/// `exiting`: as [`AnswerOptions::exiting`], what was read and built is left to the end of
/// the process.
pub fn capacity(engine: &Engine, limits: &Limits, body: &[u8], exiting: bool) -> Result<CapacityAnswer, AnswerError> {
    let request = parse_capacity_request(body)?;
    let answer = capacity_of(engine, limits, &request, exiting);
    if exiting {
        std::mem::forget(request);
    }
    answer
}

/// [`capacity`] of a body already read; the request is the caller's to free (the service
/// frees it once the answer has left: at 5,000 servers that takes milliseconds).
pub fn capacity_of(
    engine: &Engine,
    limits: &Limits,
    request: &CapacityBody<'_>,
    exiting: bool,
) -> Result<CapacityAnswer, AnswerError> {
    let CapacityBody { raw_servers, servers, members } = request;
    check_limits(limits, servers)?;
    validate_server_list(servers)?;
    // With `packages`: the totals and how many more VMs of each fit (crate::capacity).
    let packages = crate::capacity::package_query_in(members).map_err(AnswerError::Invalid)?;
    let capacity = engine.capacity(servers).map_err(|e| AnswerError::Internal(e.to_string()))?;
    let internal = |e: serde_json::Error| AnswerError::Internal(e.to_string());
    let mut body = Vec::new();
    // Built only where the answer is not written straight (a package query adds totals).
    let mut answer = serde_json::Value::Null;
    let straight =
        packages.is_none() && capacity.write_answer(servers, &mut body).transpose().map_err(internal)?.is_some();
    if !straight {
        answer = capacity.answer(servers);
        let packages = match packages {
            Some(query) => {
                answer["totals"] = crate::capacity::totals(engine, servers);
                Some(crate::capacity::packages_answer(engine, servers, raw_servers, &query)?)
            }
            None => None,
        };
        body = crate::js::json::to_vec(&answer).map_err(internal)?;
        if let Some(packages) = packages {
            // The last member, written straight from the counts.
            body.pop();
            body.extend_from_slice(b",\"packages\":");
            crate::capacity::write_packages(&mut body, &packages).map_err(internal)?;
            body.push(b'}');
        }
    }
    let servers_read = servers.len();
    if exiting {
        std::mem::forget((capacity, answer));
    }
    Ok(CapacityAnswer { servers: servers_read, body })
}

/// `dapi check`: the servers read and checked as `/capacity` reads them, then which could
/// take a VM of the asked size (crate::check). `exiting`: as [`AnswerOptions::exiting`].
pub fn check(
    engine: &Engine,
    limits: &Limits,
    body: &[u8],
    query: &crate::check::CheckQuery,
    exiting: bool,
) -> Result<serde_json::Value, AnswerError> {
    let (raw_servers, servers) = parse_capacity_body(body)?;
    check_limits(limits, &servers)?;
    validate_server_list(&servers)?;
    let answer = crate::check::check(engine, &servers, query);
    if exiting {
        std::mem::forget((raw_servers, servers));
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine_and_limits() -> (Engine, Limits) {
        let config = crate::config::ServiceConfig::load(None, Vec::new()).expect("built-in config");
        (config.engine().expect("engine"), config.limits)
    }

    fn example() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/allocate.json")).expect("example")
    }

    #[test]
    fn no_fit_is_written_as_the_409_body_or_with_a_null_server() {
        let (engine, limits) = engine_and_limits();
        let mut body: serde_json::Value = serde_json::from_slice(&example()).expect("json");
        body["vm"]["ram"] = serde_json::json!(100_000_000);
        let bytes = serde_json::to_vec(&body).expect("json");
        let as_409 = allocate(&engine, &limits, &bytes, AnswerOptions::default()).expect("answered");
        assert!(matches!(as_409.verdict, Verdict::NoFit { .. }), "{:?}", as_409.verdict);
        assert_eq!(as_409.verdict.status(), 409);
        let options = AnswerOptions { no_fit: NoFitBody::NullServer, ..AnswerOptions::default() };
        let as_cli = allocate(&engine, &limits, &bytes, options).expect("answered");
        let (e, c): (serde_json::Value, serde_json::Value) =
            (serde_json::from_slice(&as_409.body).expect("json"), serde_json::from_slice(&as_cli.body).expect("json"));
        assert_eq!(e["code"], "NoAllocatableServersError");
        let Verdict::NoFit { reason } = &as_409.verdict else { unreachable!() };
        assert_eq!(e["message"], format!("No compute resources available: {reason}"));
        assert_eq!(c["server"], serde_json::Value::Null);
        assert_eq!(e["steps"], c["steps"]);
    }

    #[test]
    fn limits_apply_before_validation() {
        let (engine, mut limits) = engine_and_limits();
        limits.max_servers = 1;
        let err = allocate(&engine, &limits, &example(), AnswerOptions::default()).expect_err("over the limit");
        assert!(err.is_caller_error());
        assert!(err.to_string().starts_with("servers: 4 servers given; the limit is 1"), "{err}");
        let err = capacity(&engine, &limits, &example(), false).expect_err("over the limit");
        assert!(err.to_string().starts_with("servers: "), "{err}");
        let err = allocate(&engine, &limits, b"{", AnswerOptions::default()).expect_err("not JSON");
        assert!(matches!(err, AnswerError::Malformed(_)), "{err:?}");
    }
}
