//! `identity`: passes every server on unchanged. Used as the fallback of an `or`.

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct Identity;

static DECLARATION: Declaration = Declaration::new("identity", Kind::Transform, "Identity function").per_server();

impl Plugin for Identity {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
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
