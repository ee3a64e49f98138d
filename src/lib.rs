//! dapi: chooses the compute node on which a new VM goes (Triton's DAPI allocator, in Rust).
//!
//! * [`model`]: typed request objects; [`validate`]: the original's validations.
//! * [`engine`]: the allocation engine (pipeline, working set, selection, steps).
//! * [`plugins`]: the hard filters, soft filters, scorers and transforms, one per file.
//! * [`js`]: the JavaScript value semantics the original's answers depend on.
//! * [`answer`]: the one path from a request body to an answer, used by the service
//!   ([`http`]) and the command line ([`cli`]); [`outcome`]: what an allocation came to
//!   (verdict, errors), shared by every answering path; [`batch`]: many VMs in one request;
//!   [`simulate`]: a chain run over a datacenter and a workload over time.

pub mod answer;
pub mod batch;
pub mod capacity;
pub mod check;
pub mod cli;
pub mod config;
pub mod digest;
pub mod engine;
pub mod explain;
mod fxhash;
pub mod http;
pub mod inventory;
pub mod js;
pub mod model;
pub mod outcome;
mod placement;
pub mod plugins;
pub mod record;
pub mod registry;
pub mod replay;
mod scan;
pub mod shadow;
pub mod simulate;
pub mod validate;
pub mod wire;

/// How many cores this process may run on, `None` when it cannot be told; asked of the
/// system once. Each `std::thread::available_parallelism` call reads the cgroup's CPU quota
/// from /proc and /sys (about 27 µs), and one `dapi allocate` asked it four times.
pub fn cores() -> Option<usize> {
    static CORES: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().ok().map(|n| n.get()))
}
