//! `hard-filter-zpool-encryption`: a VM asking for encryption
//! (`internal_metadata.encrypted`) needs an encrypted zpool; every other VM needs an
//! unencrypted one.

use crate::engine::{Declaration, Kind, PluginError, PreFilter, Request, ServerFilter, ServerId, Verdict};
use crate::model::METADATA_ENCRYPTED;

pub struct HardFilterZpoolEncryption;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-zpool-encryption", Kind::HardFilter, "Servers which are zpool encrypted");

impl ServerFilter for HardFilterZpoolEncryption {
    /// Whether the VM wants an encrypted pool.
    type Prepared = bool;
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn pre_filter(&self, req: &Request<'_>) -> Result<PreFilter<bool>, PluginError> {
        Ok(PreFilter::Run(req.vm.internal_metadata.get(METADATA_ENCRYPTED).truthy()))
    }
    fn filter(&self, req: &Request<'_>, &wanted: &bool, id: ServerId) -> Verdict {
        // JS Boolean(): the string "false" counts as encrypted.
        let encrypted = req.server(id).sysinfo().zpool_encrypted.truthy();
        match (wanted, encrypted) {
            (true, false) => Verdict::fail("Server is not Zpool Encrypted"),
            (false, true) => Verdict::fail("Server is Zpool Encrypted"),
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
        let mut enc = server("enc");
        enc["sysinfo"]["Zpool Encrypted"] = json!(true);
        let mut text = server("text");
        text["sysinfo"]["Zpool Encrypted"] = json!("false");
        vec![enc, text, server("plain")]
    }

    #[test]
    fn encryption_requested() {
        let out = Fixture::new(servers())
            .vm(json!({"internal_metadata": {"encrypted": true}}))
            .run(&HardFilterZpoolEncryption);
        assert_eq!(out.remaining, ["enc", "text"]);
        assert_eq!(out.reason("plain"), Some("Server is not Zpool Encrypted"));
    }

    #[test]
    fn encryption_not_requested() {
        let out = Fixture::new(servers()).run(&HardFilterZpoolEncryption);
        assert_eq!(out.remaining, ["plain"]);
        assert_eq!(out.reason("enc"), Some("Server is Zpool Encrypted"));
        assert_eq!(out.reason("text"), Some("Server is Zpool Encrypted"));
    }
}
