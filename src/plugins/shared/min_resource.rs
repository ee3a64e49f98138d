//! The two branches shared by `hard-filter-min-cpu`, `-min-ram` and `-min-disk`: with a
//! package ratio for the resource, compare the request with each server's unreserved amount;
//! without one, refuse servers that overprovision the resource (unless there is no package).

use crate::engine::{Request, ServerId, Shortfall, Verdict};
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
    /// The resource's name and unit in explained answers.
    fn explained(self) -> (&'static str, &'static str) {
        match self {
            Resource::Cpu => ("cpu", "CPU units"),
            Resource::Ram => ("ram", "MiB"),
            Resource::Disk => ("disk", "MiB"),
        }
    }

    fn spare(self, req: &Request<'_>, id: ServerId) -> Js {
        let [cpu, ram, disk] = req.unreserved_js(id);
        match self {
            Resource::Cpu => cpu,
            Resource::Ram => ram,
            Resource::Disk => disk,
        }
    }
}

/// What a minimum-resource filter checks, worked out once per run.
#[derive(Debug, Default)]
pub enum Requirement {
    /// The package gave no ratio for the resource: servers with a (truthy) ratio of their
    /// own are refused.
    #[default]
    NoRatio,
    /// At least this much unreserved (a JS comparison).
    Spare(Js),
}

impl Resource {
    /// Whether server `id` meets `requirement`; a shortfall is worded by
    /// `message(requested, spare)`, both as JS prints them.
    pub fn verdict(
        self,
        req: &Request<'_>,
        id: ServerId,
        requirement: &Requirement,
        message: fn(&str, &str) -> String,
    ) -> Verdict {
        match requirement {
            Requirement::NoRatio => {
                let ratio = req.ratios(id).get(self.ratio_key());
                if !ratio.truthy() {
                    return Verdict::Keep;
                }
                Verdict::fail(format!(
                    "Package gave no {} overprovision ratio, but server has ratio {}",
                    self.label(),
                    ratio.to_js_string()
                ))
            }
            Requirement::Spare(requested) => {
                let spare = self.spare(req, id);
                if js_ge(&spare, requested) {
                    return Verdict::Keep;
                }
                let why = message(&requested.to_js_string(), &spare.to_js_string());
                if req.explaining() {
                    let (resource, unit) = self.explained();
                    let (needed, available) = (requested.num(), spare.num());
                    if needed.is_finite() && available.is_finite() {
                        return Verdict::short(why, Shortfall { resource, unit, needed, available });
                    }
                }
                Verdict::fail(why)
            }
        }
    }
}
