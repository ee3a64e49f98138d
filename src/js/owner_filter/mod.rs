//! `filter_owner_server` snippets: per-owner JavaScript expressions over `server`, compiled
//! once at start-up and evaluated by `hard-filter-owners-servers` against each server's JSON.
//!
//! The original runs each snippet as the body `return <snippet>` of a JavaScript function.
//! Running JavaScript is neither needed nor safe, so this is a small parser and evaluator for
//! the expressions operators actually write:
//!
//! * `server`, property reads `.x`, `['x']`, `["x"]`, `[expr]`, `.length` of strings and
//!   arrays, and `.indexOf(x[, from])` on strings and arrays;
//! * string, number, `true`/`false`/`null`/`undefined`/`NaN`/`Infinity` literals;
//! * `===`, `!==`, `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||` (returning an operand, as in
//!   JavaScript), `!`, unary `-`/`+`, parentheses; comments and a trailing `;`.
//!
//! Values follow JavaScript: reading a missing property gives `undefined`; reading a property
//! *of* `undefined`/`null`, or calling `indexOf` on something without it, is a runtime error
//! (the plugin's "Error running filter" path). Objects compare by identity, so
//! `server.traits === server.traits` holds while two distinct objects never are equal.
//!
//! A snippet outside this subset is refused when the configuration is loaded, naming the
//! owner and the problem (the original would fail at allocation time instead, reporting
//! `Error running filter ...` for every request of that owner). An empty snippet, or one
//! starting on a new line (automatic semicolon insertion turns `return` + newline into
//! `return;`), yields `undefined`, as in the original.

mod eval;
mod syntax;

use std::fmt;

use crate::js::Js;
use syntax::Program;

/// Compiled per-owner server filters, in the configuration's key order.
#[derive(Debug, Default)]
pub struct OwnerFilters {
    filters: Vec<OwnerFilter>,
}

/// One owner's filter.
#[derive(Debug)]
pub struct OwnerFilter {
    pub owner: Box<str>,
    /// `String(snippet)`: the text that was compiled and that reasons quote.
    pub source: String,
    /// Truthiness of the configured value itself (`filters[owner]` is tested before use).
    pub truthy: bool,
    program: Program,
}

impl OwnerFilters {
    /// Compiles `defaults.filter_owner_server` (unset or falsy: no filters).
    pub fn compile(config: &Js) -> Result<OwnerFilters, String> {
        if !config.truthy() {
            return Ok(OwnerFilters::default());
        }
        let Some(map) = config.as_obj() else {
            return Err("Defaults filter_owner_server is an invalid type".into());
        };
        let mut filters = Vec::with_capacity(map.len());
        for (owner, snippet) in map {
            let source = snippet.to_js_string();
            let program = Program::parse(&source).map_err(|e| {
                format!("Defaults filter_owner_server: the filter for owner {owner} cannot be used: {e} (in: {source})")
            })?;
            filters.push(OwnerFilter { owner: owner.clone(), source, truthy: snippet.truthy(), program });
        }
        Ok(OwnerFilters { filters })
    }

    /// The filter configured for this owner uuid (as `filters[String(owner)]` finds it).
    pub fn get(&self, owner: &str) -> Option<&OwnerFilter> {
        self.filters.iter().find(|f| &*f.owner == owner)
    }

    /// Every filter, in the configuration's key order.
    pub fn iter(&self) -> impl Iterator<Item = &OwnerFilter> {
        self.filters.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

impl OwnerFilter {
    /// The snippet's value for this server (`Err`: what JavaScript would have thrown).
    pub fn eval(&self, server: &Js) -> Result<Js, EvalError> {
        self.program.run(server)
    }

    /// Whether the snippet's value for this server is truthy.
    pub fn matches(&self, server: &Js) -> Result<bool, EvalError> {
        self.eval(server).map(|v| v.truthy())
    }
}

/// A runtime error of a snippet (a JavaScript `TypeError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalError(pub String);

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(src: &str) -> OwnerFilter {
        let config = Js::from_json(&json!({ "o": src }));
        match OwnerFilters::compile(&config) {
            Ok(f) => f.filters.into_iter().next().expect("one filter"),
            Err(e) => panic!("{src}: {e}"),
        }
    }

    fn eval_on(src: &str, server: &serde_json::Value) -> Result<Js, EvalError> {
        filter(src).eval(&Js::from_json(server))
    }

    fn value(src: &str, server: &serde_json::Value) -> Js {
        eval_on(src, server).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    fn srv() -> serde_json::Value {
        json!({
            "uuid": "b8ab34e9-2914-48c4-af75-5c6440240ce1",
            "hostname": "cn0042",
            "rack_identifier": "R01",
            "reservation_ratio": 0.1,
            "memory_total_bytes": 274877906944_u64,
            "unreserved_ram": 768,
            "traits": {"customer": "acme", "rack": ["r1", "r2"], "internal": false},
            "sysinfo": {"CPU Total Cores": 48, "Live Image": "20200101T000000Z"},
            "list": [1, "1", null, {"a": 1}],
            "empty": ""
        })
    }

    #[test]
    fn the_recorded_snippets() {
        let s = srv();
        let t = |src: &str| value(src, &s).truthy();
        assert!(t("server.uuid === \"b8ab34e9-2914-48c4-af75-5c6440240ce1\""));
        assert!(!t("server.unreserved_ram > 1024"));
        assert!(t("!server.traits.internal && server.rack_identifier !== 'R02'"));
        assert!(t("server.hostname.indexOf('cn00') === 0"));
        assert!(t("server.memory_total_bytes > 200000000000"));
        assert!(t("server.rack_identifier === 'R01'"));
        assert!(t("server.reservation_ratio < 0.15 || server.rack_identifier === 'R03'"));
        assert!(t("server.sysinfo['CPU Total Cores'] >= 48"));
        assert!(t("server.traits.customer === 'acme'"));
        assert!(t("server.traits.rack.length > 0"));
    }

    #[test]
    fn missing_properties_are_undefined_and_their_properties_throw() {
        let s = srv();
        assert_eq!(value("server.nope", &s), Js::Undefined);
        assert_eq!(value("server.traits.nope === undefined", &s), Js::Bool(true));
        let err = eval_on("server.nope.deeper", &s).expect_err("TypeError");
        assert_eq!(err.0, "Cannot read properties of undefined (reading 'deeper')");
        assert!(eval_on("server.nope.indexOf('x')", &s).is_err());
        assert!(eval_on("server.unreserved_ram.indexOf(1)", &s).is_err());
        assert!(eval_on("server.traits.indexOf('x')", &s).is_err());
        // Short-circuits skip the failing side.
        assert_eq!(value("server.nope && server.nope.deeper", &s), Js::Undefined);
        assert_eq!(value("server.uuid || server.nope.deeper", &s), Js::str("b8ab34e9-2914-48c4-af75-5c6440240ce1"));
        // `.length` of a number is undefined, not an error.
        assert_eq!(value("server.unreserved_ram.length", &s), Js::Undefined);
    }

    #[test]
    fn logical_operators_return_operands() {
        let s = srv();
        assert_eq!(value("server.empty || 'fallback'", &s), Js::str("fallback"));
        assert_eq!(value("server.empty && 'x'", &s), Js::str(""));
        assert_eq!(value("server.unreserved_ram && server.rack_identifier", &s), Js::str("R01"));
        assert_eq!(value("!server.empty", &s), Js::Bool(true));
        assert_eq!(value("!!server.traits", &s), Js::Bool(true));
        assert_eq!(value("1 || 0 && 0", &s), Js::Num(1.0));
        assert_eq!(value("(1 || 0) && 0", &s), Js::Num(0.0));
    }

    #[test]
    fn equality_and_comparison_follow_javascript() {
        let s = srv();
        let v = |src: &str| value(src, &s);
        assert_eq!(v("server.unreserved_ram == '768'"), Js::Bool(true));
        assert_eq!(v("server.unreserved_ram === '768'"), Js::Bool(false));
        assert_eq!(v("server.nope == null"), Js::Bool(true));
        assert_eq!(v("server.nope === null"), Js::Bool(false));
        assert_eq!(v("server.nope != null"), Js::Bool(false));
        assert_eq!(v("true == 1"), Js::Bool(true));
        assert_eq!(v("NaN == NaN"), Js::Bool(false));
        assert_eq!(v("server.traits === server.traits"), Js::Bool(true));
        assert_eq!(v("server.traits == server.sysinfo"), Js::Bool(false));
        assert_eq!(v("server.traits.rack == 'r1,r2'"), Js::Bool(true));
        assert_eq!(v("'10.0' < '7.0'"), Js::Bool(true));
        assert_eq!(v("10 < 7"), Js::Bool(false));
        assert_eq!(v("'10' < 7"), Js::Bool(false));
        assert_eq!(v("server.nope < 1 || server.nope >= 1"), Js::Bool(false));
        assert_eq!(v("null >= 0"), Js::Bool(true));
        assert_eq!(v("-1 < -0.5"), Js::Bool(true));
        assert_eq!(v("server.traits.rack.indexOf('r3') > -1"), Js::Bool(false));
    }

    #[test]
    fn index_of_on_strings_and_arrays() {
        let s = srv();
        let v = |src: &str| value(src, &s);
        assert_eq!(v("server.hostname.indexOf('00')"), Js::Num(2.0));
        assert_eq!(v("server.hostname.indexOf('00', 3)"), Js::Num(-1.0));
        assert_eq!(v("server.hostname.indexOf('')"), Js::Num(0.0));
        assert_eq!(v("server.traits.rack.indexOf('r2')"), Js::Num(1.0));
        assert_eq!(v("server.list.indexOf('1')"), Js::Num(1.0));
        assert_eq!(v("server.list.indexOf(null)"), Js::Num(2.0));
        assert_eq!(v("server.list.indexOf(1, -3)"), Js::Num(-1.0));
        assert_eq!(v("server.list.indexOf(server.list[3])"), Js::Num(3.0));
        assert_eq!(v("server.list.length"), Js::Num(4.0));
        assert_eq!(v("server['hostname'].length"), Js::Num(6.0));
        assert_eq!(v("server.hostname[0]"), Js::str("c"));
        assert_eq!(v("server.list[0]"), Js::Num(1.0));
        assert_eq!(v("server[\"sysinfo\"]['Live Image']"), Js::str("20200101T000000Z"));
    }

    #[test]
    fn literals() {
        let s = json!({});
        let v = |src: &str| value(src, &s);
        assert_eq!(v("'a\\'b'"), Js::str("a'b"));
        assert_eq!(v(r#""\x41\u0042\u{43}\n""#), Js::str("ABC\n"));
        assert_eq!(v("0x10"), Js::Num(16.0));
        assert_eq!(v("1.5e3"), Js::Num(1500.0));
        assert_eq!(v(".5"), Js::Num(0.5));
        assert_eq!(v("017"), Js::Num(15.0));
        assert_eq!(v("019"), Js::Num(19.0));
        assert_eq!(v("null"), Js::Null);
        assert_eq!(v("undefined"), Js::Undefined);
        assert_eq!(v("-'3'"), Js::Num(-3.0));
        assert_eq!(v("true /* comment */ ; // trailing"), Js::Bool(true));
    }

    #[test]
    fn return_on_its_own_line_yields_undefined() {
        let s = srv();
        assert_eq!(value("", &s), Js::Undefined);
        assert_eq!(value("  ", &s), Js::Undefined);
        assert_eq!(value("\nserver.uuid", &s), Js::Undefined);
        assert_eq!(value("/*\n*/ true", &s), Js::Undefined);
        // A newline later on is fine; a second statement is unreachable.
        assert_eq!(value("server.rack_identifier\n=== 'R01'", &s), Js::Bool(true));
        assert_eq!(value("server.rack_identifier\nserver.nope.deeper", &s), Js::str("R01"));
    }

    #[test]
    fn snippets_outside_the_subset_are_configuration_errors() {
        for bad in [
            "sdasd ++",
            "server.x = 1",
            "server.x ===",
            "server.uuid.toUpperCase()",
            "process.exit()",
            "(server.x",
            "server.x server.y",
            "`tpl`",
            "'unterminated",
            "server.x ? 1 : 2",
            "server.a.indexOf()",
            "3in",
        ] {
            let config = Js::from_json(&json!({ "2316e149-1562-47ff-abea-00bda80d0e7f": bad }));
            let err = OwnerFilters::compile(&config).expect_err(bad);
            assert!(err.contains("2316e149-1562-47ff-abea-00bda80d0e7f"), "{err}");
            assert!(err.contains(bad), "{err}");
        }
        assert!(OwnerFilters::compile(&Js::str("x")).is_err());
    }

    #[test]
    fn non_string_snippets_are_read_as_their_text() {
        let config = Js::from_json(&json!({ "a": true, "b": 0, "c": null, "d": "" }));
        let filters = OwnerFilters::compile(&config).expect("valid");
        let got: Vec<(bool, String, Js)> =
            filters.iter().map(|f| (f.truthy, f.source.clone(), f.eval(&Js::Null).expect("evaluates"))).collect();
        assert_eq!(
            got,
            [
                (true, "true".into(), Js::Bool(true)),
                (false, "0".into(), Js::Num(0.0)),
                (false, "null".into(), Js::Null),
                (false, String::new(), Js::Undefined),
            ]
        );
        assert!(filters.get("b").is_some() && filters.get("z").is_none());
        assert!(OwnerFilters::compile(&Js::Null).expect("unset").is_empty());
    }
}
