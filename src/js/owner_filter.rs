//! `filter_owner_server` snippets: per-owner JavaScript over `server`, run by
//! `hard-filter-owners-servers` in the embedded QuickJS sandbox ([`crate::js::sandbox`]).
//!
//! The original builds each snippet as `new Function(['server', <Node's enumerable globals>],
//! 'return ' + snippet)` (the globals listed become parameters, masking them) and runs it
//! with `servers.filter(fn)`: `server` is the server object, the next two parameters get
//! the index and the array (as `filter` passes them), `this` is the global object, and the
//! value's truthiness keeps the server. dapi does the same with the parameter list of Node 20
//! (the runtime the recorded cases come from), in a sandbox holding only the ECMAScript
//! globals: Node's `require`, `process`, `Buffer`, `console` are not there, so a snippet
//! that touches them throws (the original would have reached them). An empty snippet, or one
//! starting on a new line (`return` + newline is `return;`), yields `undefined`.
//!
//! Each snippet is compiled when the configuration is loaded: one that is not valid
//! JavaScript stops start-up (or reload) naming the owner; the original would instead
//! answer `Error running filter ...` for every allocation it touches. Each thread keeps a
//! sandbox with the configuration's snippets compiled (rebuilt when the configuration
//! changes, or after a snippet ran out of its budget); every snippet's pass over the servers
//! runs under the time and memory budget (`limits.plugin_timeout_ms`,
//! `limits.plugin_memory_bytes`).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use rquickjs::{Ctx, FromJs, Function, Object, Persistent};

use crate::js::present::{Presented, PRESENT_JS};
use crate::js::sandbox::{Budget, Failure, Sandbox};
use crate::js::Js;

/// Compiled per-owner server filters, in the configuration's key order.
#[derive(Debug, Default)]
pub struct OwnerFilters {
    filters: Vec<OwnerFilter>,
    /// Distinct per compilation and budget: threads rebuild their sandbox when it changes.
    generation: u64,
    budget: Budget,
}

/// One owner's filter.
#[derive(Debug)]
pub struct OwnerFilter {
    pub owner: Box<str>,
    /// `String(snippet)`: the text that was compiled and that reasons quote.
    pub source: String,
    /// Truthiness of the configured value itself (`filters[owner]` is tested before use).
    pub truthy: bool,
}

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// What one snippet's pass over the servers gave: the indexes of the servers it kept, or
/// why it failed (a throw, or its budget).
pub type Outcome = Result<Vec<usize>, Failure>;

impl OwnerFilters {
    /// Compiles `defaults.filter_owner_server` (unset or falsy: no filters); an error names
    /// the owner whose snippet is not valid JavaScript.
    pub fn compile(config: &Js) -> Result<OwnerFilters, String> {
        if !config.truthy() {
            return Ok(OwnerFilters::default());
        }
        let Some(map) = config.as_obj() else {
            return Err("Defaults filter_owner_server is an invalid type".into());
        };
        let filters: Vec<OwnerFilter> = map
            .iter()
            .map(|(owner, snippet)| OwnerFilter {
                owner: owner.clone(),
                source: snippet.to_js_string(),
                truthy: snippet.truthy(),
            })
            .collect();
        let compiled =
            OwnerFilters { filters, generation: GENERATION.fetch_add(1, Ordering::Relaxed), budget: Budget::default() };
        load(&compiled).map_err(|(owner, e)| match owner {
            Some(f) => format!(
                "Defaults filter_owner_server: the filter for owner {} is not valid JavaScript: {e} (in: {})",
                f.owner, f.source
            ),
            None => format!("Defaults filter_owner_server: the filters cannot be compiled: {e}"),
        })?;
        Ok(compiled)
    }

    /// Sets the budget each snippet's pass over the servers runs under.
    pub fn set_budget(&mut self, budget: Budget) {
        if budget != self.budget {
            self.budget = budget;
            self.generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn budget(&self) -> Budget {
        self.budget
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

    /// Runs the given filters, in turn, over one presentation of `servers` (so that what a
    /// snippet changes on a server object, the next one sees, as in the original). The
    /// outcomes stop after the first that failed. `Err`: the servers could not be presented
    /// (the engine or the memory budget, not a snippet).
    pub fn run(&self, servers: &Presented<'_>, which: &[&OwnerFilter]) -> Result<Vec<Outcome>, Failure> {
        let indexes: Vec<usize> = which
            .iter()
            .map(|f| self.filters.iter().position(|g| std::ptr::eq(g, *f)))
            .collect::<Option<_>>()
            .ok_or_else(|| Failure::Engine("a filter of another configuration".into()))?;
        LOADED.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_none_or(|l| l.generation != self.generation) {
                *slot = None;
                *slot = Some(load(self).map_err(|(_, e)| e)?);
            }
            let Some(loaded) = slot.as_ref() else { return Err(Failure::Engine("no sandbox".into())) };
            let result = run_in(loaded, servers, &indexes);
            let spent = match &result {
                Err(_) => true,
                Ok(outcomes) => outcomes
                    .iter()
                    .any(|o| matches!(o, Err(Failure::Timeout(_) | Failure::OutOfMemory(_) | Failure::Engine(_)))),
            };
            if spent {
                // Whatever an interrupted pass left half-done goes with the sandbox.
                *slot = None;
            }
            result
        })
    }
}

/// This thread's sandbox with the snippets of one configuration compiled.
struct Loaded {
    generation: u64,
    // Dropped before the sandbox: a value outliving its runtime aborts the process.
    driver: Persistent<Object<'static>>,
    sandbox: Sandbox,
}

thread_local! {
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
}

/// A new sandbox with every snippet compiled; an error names the filter at fault (if one is).
fn load(filters: &OwnerFilters) -> Result<Loaded, (Option<&OwnerFilter>, Failure)> {
    let sandbox = Sandbox::new(filters.budget).map_err(|e| (None, e))?;
    let driver = sandbox
        .call(|ctx| {
            let present = Sandbox::eval_script(ctx, "dapi-present.js", PRESENT_JS)?;
            let factory: Function =
                Function::from_js(ctx, Sandbox::eval_script(ctx, "dapi-owner-filters.js", DRIVER)?)?;
            let driver: Object = factory.call((present,))?;
            Ok(Persistent::save(ctx, driver))
        })
        .map_err(|e| (None, e))?;
    for filter in &filters.filters {
        sandbox
            .call(|ctx| {
                let d = driver.clone().restore(ctx)?;
                let compile: Function = d.get("compile")?;
                compile.call::<_, Option<String>>((filter.source.as_str(),))
            })
            .map_err(|e| (None, e))
            .and_then(|error| match error {
                // What JavaScript says of the snippet, without the driver's place.
                Some(e) => Err((Some(filter), Failure::Threw(e))),
                None => Ok(()),
            })?;
    }
    Ok(Loaded { generation: filters.generation, driver, sandbox })
}

fn run_in(loaded: &Loaded, servers: &Presented<'_>, indexes: &[usize]) -> Result<Vec<Outcome>, Failure> {
    let sandbox = &loaded.sandbox;
    sandbox.call(|ctx| {
        let (json, lazy, patches) = servers.arguments(ctx)?;
        method(loaded, ctx, "start")?.call::<_, ()>((json, lazy, patches))
    })?;
    let mut outcomes = Vec::with_capacity(indexes.len());
    for &k in indexes {
        let kept = sandbox.call(|ctx| method(loaded, ctx, "run")?.call::<_, Vec<usize>>((k,)));
        let failed = kept.is_err();
        outcomes.push(kept);
        if failed {
            break;
        }
    }
    if !outcomes.iter().any(|o| matches!(o, Err(Failure::Timeout(_) | Failure::OutOfMemory(_)))) {
        sandbox.call(|ctx| method(loaded, ctx, "end")?.call::<_, ()>(()))?;
    }
    Ok(outcomes)
}

/// The driver's function `name`.
fn method<'js>(loaded: &Loaded, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Function<'js>> {
    let d = loaded.driver.clone().restore(ctx)?;
    d.get(name)
}

/// The JavaScript side: compiles snippets as the original did, runs them over the servers.
const DRIVER: &str = r#"(function (present) {
'use strict';
// The parameters the original gave each snippet: `server`, then the names Node 20 lists
// (`for (attr in this)`) as the global object's enumerable properties, in its order.
var PARAMS = ['server', 'global', 'clearImmediate', 'setImmediate', 'clearInterval', 'clearTimeout',
    'setInterval', 'setTimeout', 'queueMicrotask', 'structuredClone', 'atob', 'btoa', 'performance',
    'fetch', 'crypto'];
var filters = [];
var servers = null, ids = null;
function compile(code) {
    try {
        filters.push(new Function(PARAMS, 'return ' + code));
        return null;
    } catch (e) {
        return e instanceof Error ? e.name + ': ' + e.message : String(e);
    }
}
function start(serversJson, lazy, patchesJson) {
    servers = present(serversJson, lazy, patchesJson);
    ids = new Map();
    for (var i = 0; i < servers.length; i++) ids.set(servers[i], i);
}
function run(k) {
    var kept = servers.filter(filters[k]);
    var out = [];
    for (var j = 0; j < kept.length; j++) {
        var i = ids.get(kept[j]);
        if (i !== undefined) out.push(i);
    }
    return out;
}
function end() {
    servers = null;
    ids = null;
}
return { compile: compile, start: start, run: run, end: end };
})"#;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    const OWNER: &str = "2316e149-1562-47ff-abea-00bda80d0e7f";
    const S0: &str = "33ce31d0-f376-4efd-ad41-f17c430b9782";
    const S1: &str = "b8ab34e9-2914-48c4-af75-5c6440240ce1";
    const S2: &str = "ff962080-5e04-463c-87b7-1f83d5b8c949";

    fn servers() -> Vec<String> {
        [
            json!({"uuid": S0, "hostname": "CN0001", "rack_identifier": "R01", "ram": 262144, "unreserved_ram": 1024,
                   "traits": {"ssd": true, "customer": "acme"},
                   "sysinfo": {"Live Image": "20210826T002459Z", "CPU Total Cores": 48}}),
            json!({"uuid": S1, "hostname": "cn0002", "rack_identifier": "R02", "ram": 524288, "unreserved_ram": 768,
                   "traits": {}, "sysinfo": {"Live Image": "20200813T030805Z", "CPU Total Cores": 64}}),
            json!({"uuid": S2, "hostname": "db0003", "rack_identifier": "R13", "ram": 393216, "unreserved_ram": 2048,
                   "traits": {"customer": "initech", "internal": true},
                   "sysinfo": {"Live Image": "20220407T001427Z", "CPU Total Cores": 32}}),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn compile(snippet: &str) -> OwnerFilters {
        OwnerFilters::compile(&Js::from_json(&json!({ OWNER: snippet }))).unwrap_or_else(|e| panic!("{snippet}: {e}"))
    }

    /// The snippet over the three servers: the uuids it keeps, or its failure.
    fn run_with(filters: &OwnerFilters, texts: &[String]) -> Result<Vec<&'static str>, Failure> {
        let mut presented = Presented::with_capacity(texts.len(), 0);
        for text in texts {
            presented.push(Some(text), String::new);
        }
        let patches = format!("[{}]", vec!["0"; texts.len()].join(","));
        let presented = presented.finish(patches);
        let which: Vec<&OwnerFilter> = filters.iter().collect();
        let outcome = filters.run(&presented, &which)?.into_iter().next().expect("one outcome")?;
        Ok(outcome.into_iter().map(|i| [S0, S1, S2][i]).collect())
    }

    fn kept(snippet: &str) -> Result<Vec<&'static str>, Failure> {
        run_with(&compile(snippet), &servers())
    }

    /// Expected answers: the original's (its `filterWithCode` run on these servers under
    /// Node 20).
    #[test]
    fn javascript_features_give_the_originals_answers() {
        let cases: [(&str, &[&str]); 23] = [
            ("server.hostname.startsWith('cn')", &[S1]),
            ("server.hostname.toLowerCase().startsWith('cn')", &[S0, S1]),
            ("server.rack_identifier.slice(1) === '02'", &[S1]),
            ("server.sysinfo['Live Image'].slice(0, 4) >= '2021'", &[S0, S2]),
            ("server.hostname.includes('000')", &[S0, S1, S2]),
            ("['R01', 'R13'].includes(server.rack_identifier)", &[S0, S2]),
            ("server.hostname.match(/^cn\\d+$/i)", &[S0, S1]),
            ("server.hostname.match(/db/)", &[S2]),
            ("/^R0[12]$/.test(server.rack_identifier)", &[S0, S1]),
            ("server.ram / 1024 * 2 - 100 > 700", &[S1]),
            ("server.unreserved_ram % 1000 === 24", &[S0]),
            ("typeof server.traits.customer === 'string'", &[S0, S2]),
            ("server.traits.ssd ? server.ram > 300000 : server.unreserved_ram > 1000", &[S2]),
            ("'internal' in server.traits", &[S2]),
            ("Object.keys(server.traits).length === 0", &[S1]),
            ("server.hostname.match(/^cn/) !== null && server.ram >= 524288", &[S1]),
            ("Math.max(server.ram, 400000) === server.ram", &[S1]),
            ("JSON.stringify(server.traits) === '{}'", &[S1]),
            ("[1,2,3].indexOf(server.sysinfo['CPU Total Cores'] / 16) > -1", &[S0, S2]),
            ("server.sysinfo['Live Image'] > '2021' ? 1 : 0", &[S0, S2]),
            // The masked globals: `global` gets the index, `clearImmediate` the array.
            ("global === 1", &[S1]),
            ("clearImmediate.length === 3 && server.ram > 400000", &[S1]),
            ("this === undefined", &[]),
        ];
        for (snippet, expected) in cases {
            assert_eq!(kept(snippet).as_deref(), Ok(expected), "{snippet}");
        }
    }

    #[test]
    fn empty_and_new_line_snippets_yield_undefined_and_assignments_are_values() {
        assert_eq!(kept("").as_deref(), Ok(&[][..]));
        assert_eq!(kept("  ").as_deref(), Ok(&[][..]));
        assert_eq!(kept("\nserver.uuid").as_deref(), Ok(&[][..]));
        assert_eq!(kept("0").as_deref(), Ok(&[][..]));
        assert_eq!(kept("server.x = 1").as_deref(), Ok(&[S0, S1, S2][..]));
        assert_eq!(kept("server.rack_identifier\n=== 'R02'").as_deref(), Ok(&[S1][..]));
    }

    #[test]
    fn a_throw_is_a_failure_and_node_globals_are_not_there() {
        let err = kept("server.nope.deeper").expect_err("TypeError");
        assert!(matches!(&err, Failure::Threw(t) if t.starts_with("TypeError")), "{err:?}");
        for snippet in ["require('fs')", "process.env.HOME", "process.exit(1)", "Buffer.from('x')", "console.log(1)"] {
            assert!(matches!(kept(snippet), Err(Failure::Threw(_))), "{snippet}");
        }
        // The sandbox stays usable after a throw.
        let filters = compile("server.traits.ssd === true");
        assert!(run_with(&filters, &servers()).is_ok());
        assert!(run_with(&filters, &[r#"{"uuid": "x"}"#.to_string()]).is_err());
        assert_eq!(run_with(&filters, &servers()).as_deref(), Ok(&[S0][..]));
    }

    #[test]
    fn an_endless_snippet_stops_at_its_budget() {
        let mut filters = compile("(function () { for (;;) {} })()");
        filters.set_budget(Budget { time: Duration::from_millis(50), memory_bytes: 64 * 1024 * 1024 });
        let started = std::time::Instant::now();
        assert_eq!(kept_with(&filters), Err(Failure::Timeout(Duration::from_millis(50))));
        assert!(started.elapsed() < Duration::from_secs(5));
        let mut filters = compile("(function () { var a = []; for (;;) a.push(new Array(1000).fill('x')); })()");
        filters.set_budget(Budget { time: Duration::from_secs(10), memory_bytes: 16 * 1024 * 1024 });
        assert_eq!(kept_with(&filters), Err(Failure::OutOfMemory(16 * 1024 * 1024)));
        // A working configuration on the same thread still runs.
        assert_eq!(kept("server.ram > 400000").as_deref(), Ok(&[S1][..]));
    }

    /// The least budget the configuration takes (1 MiB) runs a snippet over the servers;
    /// a smaller one fails the pass as out of memory, never the process.
    #[test]
    fn the_least_budget_runs_a_snippet() {
        let mut filters = compile("server.ram > 400000");
        filters.set_budget(Budget { time: Duration::from_secs(10), memory_bytes: 1 << 20 });
        assert_eq!(kept_with(&filters).as_deref(), Ok(&[S1][..]));
        filters.set_budget(Budget { time: Duration::from_secs(10), memory_bytes: 60_000 });
        assert_eq!(kept_with(&filters), Err(Failure::OutOfMemory(60_000)));
    }

    fn kept_with(filters: &OwnerFilters) -> Result<Vec<&'static str>, Failure> {
        run_with(filters, &servers())
    }

    #[test]
    fn snippets_that_are_not_javascript_are_configuration_errors() {
        for bad in ["sdasd +", "server.x ===", "(server.x", "server.x server.y", "'unterminated", "1 }; (function () {"]
        {
            let config = Js::from_json(&json!({ OWNER: bad }));
            let err = OwnerFilters::compile(&config).expect_err(bad);
            assert!(err.contains(OWNER), "{err}");
            assert!(err.contains(bad), "{err}");
            assert!(err.contains("SyntaxError"), "{err}");
        }
        assert!(OwnerFilters::compile(&Js::str("x")).is_err());
    }

    #[test]
    fn non_string_snippets_are_read_as_their_text() {
        let config = Js::from_json(&json!({ "a": true, "b": 0, "c": null, "d": "" }));
        let filters = OwnerFilters::compile(&config).expect("valid");
        let got: Vec<(bool, &str)> = filters.iter().map(|f| (f.truthy, f.source.as_str())).collect();
        assert_eq!(got, [(true, "true"), (false, "0"), (false, "null"), (false, "")]);
        assert!(filters.get("b").is_some() && filters.get("z").is_none());
        assert!(OwnerFilters::compile(&Js::Null).expect("unset").is_empty());
    }

    #[test]
    fn every_snippet_of_a_run_reads_the_same_objects() {
        let config = Js::from_json(&json!({ "a": "(server.seen = 1, false)", "b": "server.seen === 1" }));
        let filters = OwnerFilters::compile(&config).expect("valid");
        let texts = servers();
        let mut presented = Presented::with_capacity(3, 0);
        for text in &texts {
            presented.push(Some(text), String::new);
        }
        let presented = presented.finish("[0,0,0]".into());
        let which: Vec<&OwnerFilter> = filters.iter().collect();
        let outcomes = filters.run(&presented, &which).expect("runs");
        assert_eq!(outcomes, [Ok(vec![]), Ok(vec![0, 1, 2])]);
    }
}
