//! `hard-filter-zpool-encryption`: a VM asking for encryption
//! (`internal_metadata.encrypted`) needs an encrypted zpool; every other VM needs an
//! unencrypted one.

use crate::engine::{Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};

pub struct HardFilterZpoolEncryption;

static DECLARATION: Declaration =
    Declaration::new("hard-filter-zpool-encryption", Kind::HardFilter, "Servers which are zpool encrypted");

impl Plugin for HardFilterZpoolEncryption {
    fn declaration(&self) -> &'static Declaration {
        &DECLARATION
    }
    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let wanted = req.vm.internal_metadata.get("encrypted").truthy();
        let mut kept = Vec::with_capacity(servers.len());
        for &id in servers {
            // JS Boolean(): the string "false" counts as encrypted.
            let encrypted = req.server(id).sysinfo().zpool_encrypted.truthy();
            match (wanted, encrypted) {
                (true, false) => reasons.set(req.key(id), "Server is not Zpool Encrypted"),
                (false, true) => reasons.set(req.key(id), "Server is Zpool Encrypted"),
                _ => kept.push(id),
            }
        }
        Ok(kept)
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
