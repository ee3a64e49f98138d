//! `filter_owner_server` expressions: TODO.

use crate::js::Js;

/// Compiled per-owner server filters.
#[derive(Debug, Default)]
pub struct OwnerFilters;

impl OwnerFilters {
    pub fn compile(config: &Js) -> Result<OwnerFilters, String> {
        let _ = config;
        Ok(OwnerFilters)
    }
}
