//! Logic shared by several plugins, written once.

pub mod affinity;
pub mod js_sort;
pub mod locality;
pub mod min_resource;
pub mod owner_filter;
pub mod platform;
pub mod scoring;
pub mod unreserved;
pub mod vm_index;
