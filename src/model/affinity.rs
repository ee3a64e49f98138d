//! An affinity rule of the VM payload (`instance==web1`, `role!=~db`, `container==~/^lb/`)
//! as CNAPI sends it parsed: `{key, operator, value, valueType, isSoft}`. Resolving rules to
//! VMs is domain logic (`plugins::shared::affinity`).

use crate::js::regex::Dialect;
use crate::js::Js;

/// One affinity rule, as validation guarantees it (strings and a boolean).
#[derive(Debug, Clone, PartialEq)]
pub struct Affinity {
    pub key: String,
    /// `==` or `!=`.
    pub operator: String,
    pub value: String,
    /// `exact`, `glob` or `re`.
    pub value_type: String,
    pub is_soft: bool,
}

impl Affinity {
    /// Reads one element of `vm.affinity`; `Err` names the malformed field.
    pub fn from_js(v: &Js) -> Result<Affinity, String> {
        let text = |name: &str| {
            v.get(name).as_str().map(str::to_owned).ok_or_else(|| format!("affinity.{name} (string) is required"))
        };
        Ok(Affinity {
            key: text("key")?,
            operator: text("operator")?,
            value: text("value")?,
            value_type: text("valueType")?,
            is_soft: v.get("isSoft").truthy(),
        })
    }

    /// The rule as written: `key` `operator` (`~` when soft) `value`.
    pub fn expr(&self) -> String {
        format!("{}{}{}{}", self.key, self.operator, if self.is_soft { "~" } else { "" }, self.value)
    }

    pub fn is_instance(&self) -> bool {
        self.key == "instance" || self.key == "container"
    }

    /// The regex source of an `re` value: the value without its first and last characters.
    pub fn regex_source(&self) -> String {
        let mut chars = self.value.chars();
        chars.next();
        chars.next_back();
        chars.collect()
    }

    /// The alias regex of an instance `glob` (full-search fallback): `*` becomes `.*`, and
    /// nothing else is escaped, as in the original.
    pub fn glob_source(&self) -> String {
        format!("^{}$", self.value.replace('*', ".*"))
    }

    /// Every regex this rule may compile when it is resolved, with its dialect: `re` values
    /// (XRegExp), and instance globs (a native RegExp; tag globs use the look-up's own `*`
    /// matching).
    pub fn patterns(&self) -> Vec<(String, Dialect)> {
        match self.value_type.as_str() {
            "re" => vec![(self.regex_source(), Dialect::XRegExp)],
            "glob" if self.is_instance() => vec![(self.glob_source(), Dialect::Native)],
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn affinity_from_js_requires_strings() {
        let a: Js = serde_json::from_value(
            json!({"key": "instance", "operator": "==", "value": "w", "valueType": "glob", "isSoft": true}),
        )
        .expect("js");
        let a = Affinity::from_js(&a).expect("valid");
        assert_eq!(a.expr(), "instance==~w");
        assert!(Affinity::from_js(&Js::Null).is_err());
    }
}
