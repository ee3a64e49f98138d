//! Logic shared by several plugins, written once.

pub mod affinity;
pub mod js_servers;
pub mod locality;
pub mod min_resource;
pub mod platform;
pub mod scoring;
pub mod unreserved;
