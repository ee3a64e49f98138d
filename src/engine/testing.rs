//! Stub plugins and requests for the engine's own tests: the engine is tested without any
//! real plugin, as a framework should be.

use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::Value;

use super::context::{Request, ServerId};
use super::defaults::Defaults;
use super::plugin::{Data, Declaration, Kind, Plugin, PluginError, Registry};
use super::reasons::Reasons;
use crate::model::{from_test_json, Image, Server, VmPayload};

/// A plugin whose output is `keep(input)`.
pub struct Stub {
    declaration: &'static Declaration,
    keep: fn(&[ServerId]) -> Vec<ServerId>,
}

impl Stub {
    pub fn new(declaration: &'static Declaration, keep: fn(&[ServerId]) -> Vec<ServerId>) -> Stub {
        Stub { declaration, keep }
    }
}

impl Plugin for Stub {
    fn declaration(&self) -> &'static Declaration {
        self.declaration
    }

    fn run(&self, _: &mut Request<'_>, servers: &[ServerId], _: &mut Reasons) -> Result<Vec<ServerId>, PluginError> {
        Ok((self.keep)(servers))
    }
}

static IDENTITY: Declaration = Declaration::new("identity", Kind::Transform, "Identity");
static DROP_FIRST: Declaration = Declaration::new("drop-first", Kind::HardFilter, "Drop the first");
static DROP_ALL: Declaration = Declaration::new("drop-all", Kind::HardFilter, "Drop all");
static READS: Declaration = Declaration::new("reads-unreserved", Kind::HardFilter, "Reads").reads(&[Data::Unreserved]);
static WRITES: Declaration =
    Declaration::new("writes-unreserved", Kind::Transform, "Writes").writes(&[Data::Unreserved]);

/// `identity`, `drop-first`, `drop-all`, `reads-unreserved`, `writes-unreserved`.
pub fn registry() -> Registry {
    let mut registry = Registry::default();
    let stubs = [
        Stub::new(&IDENTITY, <[ServerId]>::to_vec),
        Stub::new(&DROP_FIRST, |s| s.iter().skip(1).copied().collect()),
        Stub::new(&DROP_ALL, |_| Vec::new()),
        Stub::new(&READS, <[ServerId]>::to_vec),
        Stub::new(&WRITES, <[ServerId]>::to_vec),
    ];
    for stub in stubs {
        registry.register(std::sync::Arc::new(stub)).expect("distinct names");
    }
    registry
}

/// Runs `f` on a request over `servers` (server JSON), an empty VM and CNAPI's defaults.
pub fn stub_request<R>(servers: &[Value], f: impl FnOnce(&mut Request<'_>) -> R) -> R {
    let servers: Vec<Server> = servers.iter().map(from_test_json).collect();
    let (vm, image, defaults) = (VmPayload::default(), Image::default(), Defaults::cnapi());
    let mut req = Request::new(&servers, &vm, &image, None, &[], &defaults, StdRng::seed_from_u64(0));
    f(&mut req)
}
