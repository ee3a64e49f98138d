//! Custom plugins: operators' JavaScript files from `plugins_dir`, with the original
//! allocator's contract. Each `*.js` file is a CommonJS module exporting
//! `{name, run(servers, opts, cb)}`, usable in the allocation description under its file
//! name (the text before `.js`).
//!
//! `run` gets the servers as the original presents them at that point of the chain: each
//! server object as sent, plus what earlier plugins wrote on it (`score`, VMs from open
//! tickets and the quota they add, replaced `overprovision_ratios`, `unreserved_cpu`,
//! `_ram`, `_disk`), and `opts` with `vm` (with the `cpu_cap` and `locality` earlier
//! plugins set), `img`, `pkg` (massaged), `tickets`, `defaults` and a `log` that discards.
//! It answers `cb(err, servers, reasons)`, at once or from a promise job or a
//! `setImmediate`/`setTimeout` callback. The servers it returns (which must be objects it
//! was given) go on; the `score` of each is read back; its reasons become the step's, under
//! the module's `name` as step name.
//!
//! Other changes a plugin makes to the objects are not seen by later plugins (built-in
//! plugins read dapi's typed working set, not the objects).
//!
//! Each call runs in this thread's QuickJS sandbox ([`crate::js::sandbox`]) under the
//! configured time and memory budget; a throw, an error passed to `cb`, a budget overrun,
//! or a malformed answer fails the allocation (500) naming the plugin.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rquickjs::{Ctx, FromJs, Function, Object, Persistent};
use serde_json::Value;

use crate::engine::{Data, Declaration, Kind, Plugin, PluginError, Reasons, Request, ServerId};
use crate::js::present::{Presented, PRESENT_JS};
use crate::js::sandbox::{Budget, Failure, Sandbox};
use crate::plugins::shared::js_servers;

/// One loaded file.
#[derive(Debug)]
pub struct CustomFile {
    /// The lookup name (file name before `.js`).
    pub lookup: String,
    /// The file name.
    pub file: String,
    /// The module's `name`: the step name.
    pub step: String,
    /// XXH3 of the file's bytes.
    pub digest: String,
    source: String,
}

/// The custom plugins of one configuration load.
#[derive(Debug)]
pub struct CustomSet {
    /// Distinct per load: threads rebuild their sandbox when it changes.
    generation: u64,
    pub files: Vec<CustomFile>,
    pub budget: Budget,
    /// Each `.js` file that is no plugin: the name a chain would give it, and why it was
    /// skipped (a warning at load).
    pub skipped: Vec<(String, String)>,
}

static GENERATION: AtomicU64 = AtomicU64::new(1);

impl CustomSet {
    /// Loads every `*.js` file of `dir` (in name order), compiling and running each once to
    /// check that it exports a `name` string and a `run` function. Errors name the file.
    pub fn load(dir: &Path, budget: Budget) -> Result<CustomSet, String> {
        let shown = dir.display();
        let entries = std::fs::read_dir(dir).map_err(|e| format!("plugins_dir {shown}: cannot be read: {e}"))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("plugins_dir {shown}: cannot be read: {e}"))?;
            let name = entry.file_name();
            // Files the original would load: names ending in `.js`.
            if let Some(name) = name.to_str().filter(|n| n.ends_with(".js")) {
                names.push(name.to_string());
            }
        }
        names.sort();
        let mut files = Vec::new();
        for file in names {
            let path = dir.join(&file);
            let bytes =
                std::fs::read(&path).map_err(|e| format!("plugin file {}: cannot be read: {e}", path.display()))?;
            let source =
                String::from_utf8(bytes).map_err(|_| format!("plugin file {}: is not UTF-8 text", path.display()))?;
            // As the original: the lookup name is what comes before the first `.js`.
            let lookup = file.split(".js").next().unwrap_or_default().to_string();
            if lookup.is_empty() {
                return Err(format!("plugin file {}: the file name gives no plugin name", path.display()));
            }
            let digest = crate::digest::digest(source.as_bytes());
            files.push(CustomFile { lookup, file, step: String::new(), digest, source });
        }
        let mut set =
            CustomSet { generation: GENERATION.fetch_add(1, Ordering::Relaxed), files, budget, skipped: Vec::new() };
        let steps = load_set(&set)
            .map_err(|(file, e)| match file {
                Some(file) => format!("plugin file {}: {e}", dir.join(file).display()),
                None => format!("plugins_dir {shown}: {e}"),
            })?
            .1;
        // As the original: a module without a `run` function or a `name` (a helper file,
        // say) is no plugin, and is skipped with a warning rather than refused.
        let files = std::mem::take(&mut set.files);
        for (mut file, step) in files.into_iter().zip(steps) {
            match step {
                Ok(step) => {
                    file.step = step;
                    set.files.push(file);
                }
                Err(why) => set
                    .skipped
                    .push((file.lookup, format!("plugin file {}: skipped: {why}", dir.join(&file.file).display()))),
            }
        }
        Ok(set)
    }

    /// One plugin per file.
    pub fn plugins(self: &Arc<CustomSet>) -> Vec<Arc<dyn Plugin>> {
        (0..self.files.len())
            .map(|index| {
                let file = &self.files[index];
                let plugin = CustomJs { set: self.clone(), index, declaration: declaration(&file.lookup, &file.step) };
                Arc::new(plugin) as Arc<dyn Plugin>
            })
            .collect()
    }
}

/// What a custom plugin is, from its file name: `hard-filter-*` and `soft-filter-*` are
/// filters, `score-*` scorers, anything else a transform. Whatever the kind, the list it
/// returns goes on (its declaration says it reorders), as the original passed it on.
fn kind_of(lookup: &str) -> Kind {
    if lookup.starts_with("hard-filter-") {
        Kind::HardFilter
    } else if lookup.starts_with("soft-filter-") {
        Kind::SoftFilter
    } else if lookup.starts_with("score-") {
        Kind::Scorer
    } else {
        Kind::Transform
    }
}

/// The declaration of a custom plugin. Declarations are `'static` (built-in ones are
/// statics): each distinct (name, step) is made once per process and kept, so reloading
/// the same files costs nothing more.
fn declaration(lookup: &str, step: &str) -> &'static Declaration {
    static MADE: OnceLock<Mutex<Vec<&'static Declaration>>> = OnceLock::new();
    let mut made = MADE.get_or_init(|| Mutex::new(Vec::new())).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(d) = made.iter().find(|d| d.name == lookup && d.step == step) {
        return d;
    }
    let name: &'static str = Box::leak(lookup.to_string().into_boxed_str());
    let step: &'static str = Box::leak(step.to_string().into_boxed_str());
    let d: &'static Declaration = Box::leak(Box::new(
        Declaration::new(name, kind_of(lookup), step)
            .reads(&[Data::CpuCap, Data::Locality, Data::Scores, Data::Ratios, Data::TicketVms, Data::Unreserved])
            .writes(&[Data::Scores])
            .reorders()
            .reads_as_written(),
    ));
    made.push(d);
    d
}

/// A custom plugin: one file of a [`CustomSet`].
pub struct CustomJs {
    set: Arc<CustomSet>,
    index: usize,
    declaration: &'static Declaration,
}

impl CustomJs {
    fn file(&self) -> &CustomFile {
        &self.set.files[self.index]
    }

    fn fail(&self, what: impl std::fmt::Display) -> PluginError {
        let f = self.file();
        PluginError(format!("custom plugin {} ({}) {what}", f.lookup, f.file))
    }
}

/// This thread's sandbox with the plugins of one set loaded.
struct Loaded {
    generation: u64,
    // Dropped before the sandbox: a value outliving its runtime aborts the process.
    driver: Persistent<Object<'static>>,
    sandbox: Sandbox,
}

thread_local! {
    static LOADED: RefCell<Option<Loaded>> = const { RefCell::new(None) };
}

/// What the driver's `finish` reports.
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    pending: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    ids: Vec<usize>,
    #[serde(default)]
    scores: Vec<Option<f64>>,
    #[serde(default)]
    reasons: Vec<(String, String)>,
}

impl Plugin for CustomJs {
    fn declaration(&self) -> &'static Declaration {
        self.declaration
    }

    fn run(
        &self,
        req: &mut Request<'_>,
        servers: &[ServerId],
        reasons: &mut Reasons,
    ) -> Result<Vec<ServerId>, PluginError> {
        let presented = js_servers::present(req, servers);
        let opts = opts_json(req);
        let answer = LOADED.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_none_or(|l| l.generation != self.set.generation) {
                *slot = None;
                let (loaded, _) =
                    load_set(&self.set).map_err(|(_, e)| self.fail(format!("could not be loaded: {e}")))?;
                *slot = Some(loaded);
            }
            let Some(loaded) = slot.as_ref() else { return Err(self.fail("could not be loaded")) };
            let result = call(loaded, &self.file().lookup, &presented, &opts);
            if result.is_err() {
                // Whatever the failed call left half-done goes with the sandbox.
                *slot = None;
            }
            result.map_err(|e| self.fail(e))
        })?;
        if let Some(error) = answer.error {
            return Err(self.fail(error));
        }
        let mut out = Vec::with_capacity(answer.ids.len());
        for (&i, score) in answer.ids.iter().zip(&answer.scores) {
            let Some(&id) = servers.get(i) else { return Err(self.fail("called back with a server it was not given")) };
            let score = score.unwrap_or(f64::NAN);
            if req.state(id).score.to_bits() != score.to_bits() {
                req.set_score(id, score);
            }
            out.push(id);
        }
        for (key, message) in answer.reasons {
            reasons.set(key, message);
        }
        Ok(out)
    }
}

/// A file's step name, or why it is no plugin.
type StepOrSkip = Result<String, &'static str>;

/// Why a set did not load: the file at fault (when one is) and what is wrong.
type LoadError<'a> = (Option<&'a str>, String);

/// A new sandbox with every plugin of `set` loaded, and each one's step name or why the
/// file is no plugin; an error names the file at fault (if one is).
fn load_set(set: &CustomSet) -> Result<(Loaded, Vec<StepOrSkip>), LoadError<'_>> {
    let sandbox = Sandbox::new(set.budget).map_err(|e| (None, e.to_string()))?;
    let driver =
        sandbox.call(|ctx| driver(ctx).map(|d| Persistent::save(ctx, d))).map_err(|e| (None, e.to_string()))?;
    let mut steps = Vec::with_capacity(set.files.len());
    for file in &set.files {
        let at = |e: String| (Some(file.file.as_str()), e);
        let (name, has_run) = sandbox
            .call(|ctx| {
                let d = driver.clone().restore(ctx)?;
                load_in(ctx, &d, file)
            })
            .map_err(|e| match e {
                Failure::Threw(thrown) => at(format!("does not load: {thrown}")),
                other => at(format!("does not load: it {other}")),
            })?;
        steps.push(match name {
            _ if !has_run => Err("it does not export a run function (module.exports = {name, run})"),
            Some(n) if !n.is_empty() => Ok(n),
            _ => Err("it does not export a name string (module.exports = {name, run}; the name is the step name)"),
        });
    }
    Ok((Loaded { generation: set.generation, sandbox, driver }, steps))
}

/// Evaluates the file as a CommonJS module and registers its exports with the driver:
/// `(name if a non-empty string, whether run is a function)`.
fn load_in<'js>(ctx: &Ctx<'js>, driver: &Object<'js>, file: &CustomFile) -> rquickjs::Result<(Option<String>, bool)> {
    // On the first line, so that line numbers in messages are the file's.
    let wrapped = format!("(function (module, exports, require) {{{}\n}})", file.source);
    let factory = Sandbox::eval_script(ctx, &file.file, &wrapped)?;
    let load: Function = driver.get("load")?;
    let described: rquickjs::Value = load.call((file.lookup.as_str(), factory))?;
    let described = Object::from_js(ctx, described)?;
    Ok((described.get("name")?, described.get("run")?))
}

/// The driver: loads modules, presents the servers, collects the answer.
fn driver<'js>(ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
    let present = Sandbox::eval_script(ctx, "dapi-present.js", PRESENT_JS)?;
    let factory = Function::from_js(ctx, Sandbox::eval_script(ctx, "dapi-driver.js", DRIVER)?)?;
    factory.call((present,))
}

/// A call: `start`, then promise jobs and timers until the plugin has called back.
fn call(loaded: &Loaded, lookup: &str, servers: &Presented<'_>, opts: &str) -> Result<Answer, Failure> {
    let sandbox = &loaded.sandbox;
    let state = sandbox.call(|ctx| {
        let d = loaded.driver.clone().restore(ctx)?;
        let start: Function = d.get("start")?;
        let (json, lazy, patches) = servers.arguments(ctx)?;
        let state: Object = start.call((lookup, json, lazy, patches, opts))?;
        Ok(Persistent::save(ctx, state))
    })?;
    sandbox.start_clock();
    let settled = (|| loop {
        sandbox.run_jobs()?;
        let more = sandbox.call(|ctx| {
            let d = loaded.driver.clone().restore(ctx)?;
            let s = state.clone().restore(ctx)?;
            if s.get::<_, bool>("done")? {
                return Ok(false);
            }
            let tick: Function = d.get("tick")?;
            tick.call(())
        })?;
        if !more {
            return Ok::<(), Failure>(());
        }
    })();
    sandbox.stop_clock();
    settled?;
    let text = sandbox.call(|ctx| {
        let d = loaded.driver.clone().restore(ctx)?;
        let finish: Function = d.get("finish")?;
        let s = state.clone().restore(ctx)?;
        finish.call::<_, String>((s,))
    })?;
    let answer: Answer = serde_json::from_str(&text).map_err(|e| Failure::Engine(format!("bad answer: {e}")))?;
    if answer.pending {
        let error = "did not call back (cb) before running out of work".to_string();
        return Ok(Answer {
            pending: false,
            error: Some(error),
            ids: Vec::new(),
            scores: Vec::new(),
            reasons: Vec::new(),
        });
    }
    Ok(answer)
}

/// `{vm, img, pkg, tickets, defaults}` as the original's `opts`.
fn opts_json(req: &Request<'_>) -> String {
    let parse = |raw: Option<&str>| raw.and_then(|r| crate::js::json::from_str::<Value>(r).ok());
    let mut vm = parse(req.raw_params.vm).unwrap_or_else(|| Value::Object(Default::default()));
    if let Value::Object(o) = &mut vm {
        // What the typed VM took from the request's top level, and what plugins changed.
        for (key, typed) in [("nic_tags", &req.vm.nic_tags), ("nic_tag_requirements", &req.vm.nic_tag_requirements)] {
            if !typed.is_undefined() && !o.contains_key(key) {
                o.insert(key.into(), typed.to_json());
            }
        }
        if !crate::js::strict_eq(req.vm_cpu_cap(), &req.vm.cpu_cap_pct) {
            o.insert("cpu_cap".into(), req.vm_cpu_cap().to_json());
        }
        if req.vm_locality() != &req.vm.locality {
            o.insert("locality".into(), req.vm_locality().to_json());
        }
    }
    let img = parse(req.raw_params.image).unwrap_or_else(|| Value::Object(Default::default()));
    let pkg = match (req.package(), parse(req.raw_params.package)) {
        (Some(state), Some(Value::Object(mut o))) => {
            // The massaged package: ratios under their internal names, PAPI's names gone.
            for (key, value) in [
                ("overprovision_cpu", &state.overprovision_cpu),
                ("overprovision_ram", &state.overprovision_ram),
                ("overprovision_disk", &state.overprovision_disk),
                ("overprovision_io", &state.overprovision_io),
                ("overprovision_net", &state.overprovision_net),
            ] {
                if !value.is_undefined() {
                    o.insert(key.into(), value.to_json());
                }
            }
            for key in ["overprovision_memory", "overprovision_storage", "overprovision_network"] {
                o.shift_remove(key);
            }
            Value::Object(o)
        }
        _ => Value::Null,
    };
    let tickets = parse(req.raw_params.tickets).unwrap_or_else(|| Value::Array(Vec::new()));
    let mut opts = serde_json::Map::new();
    opts.insert("vm".into(), vm);
    opts.insert("img".into(), img);
    if !pkg.is_null() {
        opts.insert("pkg".into(), pkg);
    }
    opts.insert("tickets".into(), tickets);
    opts.insert("defaults".into(), req.defaults.json.clone());
    crate::js::json::stringify(&Value::Object(opts))
}

/// The JavaScript side: module loading, the servers as objects, the callback, the answer.
const DRIVER: &str = r#"(function (present) {
'use strict';
var ID = Symbol('dapi server');
var plugins = Object.create(null);
var timers = [];
var noop = function () {};
var log = { trace: noop, debug: noop, info: noop, warn: noop, error: noop, fatal: noop };
log.child = function () { return log; };
function later(fn, args) {
    if (typeof fn !== 'function') throw new TypeError('callback is not a function');
    timers.push(function () { fn.apply(null, args); });
}
globalThis.setImmediate = function (fn) { later(fn, Array.prototype.slice.call(arguments, 1)); };
globalThis.setTimeout = function (fn) { later(fn, Array.prototype.slice.call(arguments, 2)); };
globalThis.process = { nextTick: function (fn) { later(fn, Array.prototype.slice.call(arguments, 1)); } };
function noRequire(what) {
    throw new Error('require(' + JSON.stringify(what) + '): modules are not available to dapi plugins');
}
function load(lookup, factory) {
    var module = { exports: {} };
    factory.call(module.exports, module, module.exports, noRequire);
    var e = module.exports;
    plugins[lookup] = e;
    var ok = e !== null && (typeof e === 'object' || typeof e === 'function');
    return {
        name: ok && typeof e.name === 'string' ? e.name : undefined,
        run: ok && typeof e.run === 'function'
    };
}
function start(lookup, serversJson, lazy, patchesJson, optsJson) {
    var servers = present(serversJson, lazy, patchesJson);
    for (var i = 0; i < servers.length; i++) Object.defineProperty(servers[i], ID, { value: i });
    var opts = JSON.parse(optsJson);
    opts.log = log;
    var state = { done: false, twice: false, err: null, out: null, reasons: null };
    plugins[lookup].run(servers, opts, function (err, out, reasons) {
        if (state.done) { state.twice = true; return; }
        state.done = true;
        state.err = err;
        state.out = out;
        state.reasons = reasons;
    });
    return state;
}
function tick() {
    if (timers.length === 0) return false;
    timers.shift()();
    return true;
}
function text(err) {
    if (err instanceof Error) return (err.name || 'Error') + ': ' + err.message;
    return String(err);
}
function finish(state) {
    timers.length = 0;
    if (!state.done) return JSON.stringify({ pending: true });
    if (state.twice) return JSON.stringify({ error: 'called back (cb) more than once' });
    if (state.err) return JSON.stringify({ error: 'called back with an error: ' + text(state.err) });
    var out = state.out;
    if (!Array.isArray(out)) return JSON.stringify({ error: 'called back without a list of servers' });
    var ids = [], scores = [];
    for (var k = 0; k < out.length; k++) {
        var s = out[k];
        var id = (s !== null && typeof s === 'object') ? s[ID] : undefined;
        if (typeof id !== 'number') {
            return JSON.stringify({ error: 'called back with a server it was not given (at index ' + k + ')' });
        }
        ids.push(id);
        scores.push(+s.score);
    }
    var reasons = [], r = state.reasons;
    if (r !== null && typeof r === 'object') {
        Object.keys(r).forEach(function (key) { reasons.push([key, String(r[key])]); });
    }
    return JSON.stringify({ ids: ids, scores: scores, reasons: reasons });
}
return { load: load, start: start, tick: tick, finish: finish };
})"#;
