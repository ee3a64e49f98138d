//! `hard-filter-os`: LX VMs from `lxd` images need a Linux compute node; every other VM
//! needs a SmartOS one (`sysinfo["System Type"]` other than `Linux`).

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};

pub struct HardFilterOs;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-os", Kind::HardFilter, "Servers which have the required OS");

impl ServerFilter for HardFilterOs {
    /// Whether the VM needs a Linux server.
    type Prepared = bool;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<bool>, PluginError> {
        Ok(PreFilter::Run(req.vm.brand.as_str() == Some("lx") && req.image.image_type.as_str() == Some("lxd")))
    }
    fn filter(&self, req: &Request<'_>, &linux_required: &bool, id: ServerId) -> Verdict {
        let linux = req.server(id).sysinfo().system_type.as_str() == Some("Linux");
        match (linux_required, linux) {
            (true, false) => Verdict::fail("Server does not have \"linux\" OS"),
            (false, true) => Verdict::fail("Server does not have \"SunOS\" OS"),
            _ => Verdict::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testing::{server, Fixture};
    use serde_json::json;

    fn servers() -> Vec<serde_json::Value> {
        let mut linux = server("linux");
        linux["sysinfo"]["System Type"] = json!("Linux");
        vec![linux, server("smartos")]
    }

    #[test]
    fn lxd_images_need_linux() {
        let f = Fixture::new(servers()).vm(json!({"brand": "lx"})).image(json!({"type": "lxd"}));
        let out = f.run(&HardFilterOs);
        assert_eq!(out.remaining, ["linux"]);
        assert_eq!(out.reason("smartos"), Some("Server does not have \"linux\" OS"));
    }

    #[test]
    fn everything_else_needs_smartos() {
        let f = Fixture::new(servers()).vm(json!({"brand": "lx"})).image(json!({"type": "lx-dataset"}));
        let out = f.run(&HardFilterOs);
        assert_eq!(out.remaining, ["smartos"]);
        assert_eq!(out.reason("linux"), Some("Server does not have \"SunOS\" OS"));
    }
}
