//! `identity`: passes every server on unchanged. Used as the fallback of an `or`.

use super::{Kind, Plugin, PluginError};
use crate::engine::{Reasons, Request, ServerId};

pub struct Identity;

impl Plugin for Identity {
    fn name(&self) -> &'static str {
        "identity"
    }
    fn step(&self) -> &'static str {
        "Identity function"
    }
    fn kind(&self) -> Kind {
        Kind::Transform
    }
    fn run(
        &self,
        _req: &mut Request<'_>,
        servers: &[ServerId],
        _reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        Ok(servers.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, Fixture};

    #[test]
    fn passes_everything_in_order() {
        let out = Fixture::new(vec![server("b"), server("a")]).run(&Identity);
        assert_eq!(out.remaining, ["b", "a"]);
        assert!(out.reasons.is_empty());
    }
}
