//! What an allocation comes to, whichever path asked for it: the [`Verdict`] (a server, no
//! fit with CNAPI's reason, a batch's tally), and the [`AnswerError`]s a request can end in
//! instead, with the limits check that refuses too big a request. A leaf for the paths that
//! answer (`answer`, `batch`, `capacity`, `check`), so that none imports another for them.

use std::fmt;

use crate::config::Limits;
use crate::engine::{Allocation, Step};
use crate::model::{AllocateBody, BodyError, Server};
use crate::validate::FieldError;

/// Why a request was not answered with an allocation (or a capacity report).
#[derive(Debug)]
pub enum AnswerError {
    /// The body is not JSON, or not of the expected shape (HTTP 400, CLI exit 2).
    Malformed(String),
    /// Parameters that fail validation or exceed the limits, each named (HTTP 422, CLI
    /// exit 2).
    Invalid(Vec<FieldError>),
    /// A bug of ours (HTTP 500, CLI exit 1).
    Internal(String),
}

impl AnswerError {
    /// Whether the caller can fix it (a bad request), as opposed to our own failure.
    pub fn is_caller_error(&self) -> bool {
        !matches!(self, AnswerError::Internal(_))
    }
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerError::Malformed(message) => f.write_str(message),
            AnswerError::Invalid(errors) => {
                for (i, e) in errors.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{}: {}", e.field, e.message)?;
                }
                Ok(())
            }
            AnswerError::Internal(message) => write!(f, "internal error: {message}"),
        }
    }
}

impl std::error::Error for AnswerError {}

impl From<BodyError> for AnswerError {
    fn from(e: BodyError) -> AnswerError {
        match e {
            BodyError::Malformed(message) => AnswerError::Malformed(message),
            BodyError::Invalid(errors) => AnswerError::Invalid(errors),
        }
    }
}

impl From<FieldError> for AnswerError {
    fn from(e: FieldError) -> AnswerError {
        AnswerError::Invalid(vec![e])
    }
}

/// Refuses requests that ask for more work than the limits allow.
pub fn check_limits(limits: &Limits, servers: &[Server]) -> Result<(), AnswerError> {
    if servers.len() > limits.max_servers {
        return Err(FieldError::invalid(
            "servers",
            format!("{} servers given; the limit is {}", servers.len(), limits.max_servers),
        )
        .into());
    }
    for (i, s) in servers.iter().enumerate() {
        let n = s.vms.as_obj().map_or(0, |m| m.len());
        if n > limits.max_vms_per_server {
            return Err(FieldError::invalid(
                format!("servers[{i}].vms"),
                format!("{n} VMs given; the limit is {}", limits.max_vms_per_server),
            )
            .into());
        }
    }
    Ok(())
}

/// What an allocation decided: HTTP 200 or 409.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A server was chosen; its uuid (or what stands for it in reasons).
    Chosen { uuid: String },
    /// No server fits; CNAPI's reason, as in the 409 message.
    NoFit { reason: String },
    /// A batch (`crate::batch`): VMs placed and not, and the answer's status.
    Batch { placed: usize, failed: usize, status: u16 },
}

impl Verdict {
    pub fn of(request: &AllocateBody<'_>, allocation: &Allocation) -> Verdict {
        match allocation.chosen {
            Some(id) => Verdict::Chosen { uuid: request.servers[id].reason_key() },
            None => Verdict::NoFit { reason: failure_reason(&allocation.steps) },
        }
    }

    /// The HTTP status the service answers with.
    pub fn status(&self) -> u16 {
        match self {
            Verdict::Chosen { .. } => 200,
            Verdict::NoFit { .. } => 409,
            Verdict::Batch { status, .. } => *status,
        }
    }
}

/// CNAPI's 409 reason: the last step's `*` reason, else its name with the first letter
/// lower-cased and `no ` before a leading `servers `.
pub fn failure_reason(steps: &[Step]) -> String {
    let (name, star) = match steps.last() {
        Some(step) => (step.name, step.reasons.get("*").filter(|r| !r.is_empty())),
        None => ("Received by DAPI", None),
    };
    if let Some(star) = star {
        return star.to_string();
    }
    let mut chars = name.chars();
    let lowered: String = chars.next().map(|c| c.to_lowercase().chain(chars).collect()).unwrap_or_default();
    if lowered.starts_with("servers ") {
        format!("no {lowered}")
    } else {
        lowered
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::Reasons;

    fn step(name: &'static str, star: Option<&str>) -> Step {
        let mut reasons = Reasons::default();
        if let Some(s) = star {
            reasons.all(s.to_string());
        }
        Step { plugin: "x", name, remaining: vec![], reasons, received: 1, input: None, elapsed: Duration::ZERO }
    }

    #[test]
    fn the_409_reason_follows_cnapi() {
        assert_eq!(
            failure_reason(&[step("Servers with enough unreserved RAM", None)]),
            "no servers with enough unreserved RAM"
        );
        assert_eq!(failure_reason(&[step("Forced failure", None)]), "forced failure");
        assert_eq!(
            failure_reason(&[step("Servers with requested hard locality considered", Some("exclude: inst==x"))]),
            "exclude: inst==x"
        );
        assert_eq!(failure_reason(&[]), "received by DAPI");
        assert_eq!(
            failure_reason(&[step("Add VMs which have open provisioning tickets", None)]),
            "add VMs which have open provisioning tickets"
        );
    }
}
