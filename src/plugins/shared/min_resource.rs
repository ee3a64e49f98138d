//! The two branches shared by `hard-filter-min-cpu`, `-min-ram` and `-min-disk`: with a
//! package ratio for the resource, compare the request with each server's unreserved amount;
//! without one, refuse servers that overprovision the resource (unless there is no package).

use crate::engine::{Reasons, Request, ServerId};
use crate::js::{js_ge, Js};

/// One of the three resources `calculate-server-unreserved` accounts for.
#[derive(Debug, Clone, Copy)]
pub enum Resource {
    Cpu,
    Ram,
    Disk,
}

impl Resource {
    /// Key in `overprovision_ratios`.
    fn ratio_key(self) -> &'static str {
        match self {
            Resource::Cpu => "cpu",
            Resource::Ram => "ram",
            Resource::Disk => "disk",
        }
    }

    /// Name in messages.
    fn label(self) -> &'static str {
        match self {
            Resource::Cpu => "CPU",
            Resource::Ram => "RAM",
            Resource::Disk => "disk",
        }
    }

    /// The server's unreserved amount (`undefined` before it is calculated).
    fn spare(self, req: &Request<'_>, id: ServerId) -> Js {
        let [cpu, ram, disk] = req.unreserved_js(id);
        match self {
            Resource::Cpu => cpu,
            Resource::Ram => ram,
            Resource::Disk => disk,
        }
    }
}

/// Keeps the servers whose unreserved amount is at least `requested` (a JS comparison);
/// the others get `message(requested, spare)`, both as JS prints them.
pub fn keep_with_spare(
    req: &Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    resource: Resource,
    requested: &Js,
    message: impl Fn(&str, &str) -> String,
) -> Vec<ServerId> {
    let mut kept = Vec::with_capacity(servers.len());
    for &id in servers {
        let spare = resource.spare(req, id);
        if js_ge(&spare, requested) {
            kept.push(id);
        } else {
            reasons.set(req.key(id), message(&requested.to_js_string(), &spare.to_js_string()));
        }
    }
    kept
}

/// The package gave no ratio for the resource: servers with a (truthy) ratio of their own are
/// refused, unless there is no package at all.
pub fn keep_without_ratio(
    req: &Request<'_>,
    servers: &[ServerId],
    reasons: &mut Reasons,
    resource: Resource,
) -> Vec<ServerId> {
    if req.package.is_none() {
        return servers.to_vec();
    }
    let mut kept = Vec::with_capacity(servers.len());
    for &id in servers {
        let ratio = req.ratios(id).get(resource.ratio_key());
        if ratio.truthy() {
            let msg = format!(
                "Package gave no {} overprovision ratio, but server has ratio {}",
                resource.label(),
                ratio.to_js_string()
            );
            reasons.set(req.key(id), msg);
        } else {
            kept.push(id);
        }
    }
    kept
}
