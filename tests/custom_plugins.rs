//! Custom plugins (`plugins_dir`): loading and refusing files, what a plugin sees and what
//! flows back into the steps, failures that become a 500 naming the plugin, the time
//! budget, reloads that add and remove plugins, `dapi plugins` and `/ping`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{example_request, post_json, send};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_dapi");

/// A fresh directory under the system temp dir, holding `files` (name, text).
fn plugin_dir(tag: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-custom-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write plugin");
    }
    dir
}

fn write_config(dir: &Path, config: &Value) -> PathBuf {
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).expect("write config");
    path
}

/// `dapi args...` with only the given `DAPI_*` settings.
fn dapi(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("DAPI_") {
            command.env_remove(key);
        }
    }
    command.args(args).envs(env.iter().copied());
    let Output { status, stdout, stderr } = command.output().expect("dapi runs");
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into())
}

const AVOID_R01: &str = r#"
// Removes servers in rack R01, with a reason; counts what it sees in a skip-less way.
module.exports = {
    name: 'Servers outside rack R01',
    run: function (servers, opts, cb) {
        var reasons = {};
        var kept = servers.filter(function (s) {
            if (s.rack_identifier === 'R01') {
                reasons[s.uuid] = 'rack R01 (vm ' + opts.vm.alias + ', ' + opts.img.name + ')';
                return false;
            }
            return true;
        });
        cb(null, kept, reasons);
    }
};
"#;

/// Adds 10 to the score of the server with the least unreserved RAM, later (setImmediate
/// then a promise job), so that it wins.
const SCORE_LEAST_RAM: &str = r#"
module.exports = {
    name: 'Favour the fullest server',
    run: function (servers, opts, cb) {
        setImmediate(function () {
            Promise.resolve().then(function () {
                var least = servers.reduce(function (a, b) {
                    return b.unreserved_ram < a.unreserved_ram ? b : a;
                });
                least.score += 10;
                var reasons = {};
                reasons[least.uuid] = 'fullest: ' + least.unreserved_ram + ' MiB, score ' + least.score +
                    ', weight ' + opts.defaults.weight_unreserved_ram + ', pkg ram ' + opts.pkg.overprovision_ram;
                cb(null, servers, reasons);
            });
        });
    }
};
"#;

fn chain(custom: &[&str]) -> Value {
    let mut chain = vec![json!("pipe"), json!("hard-filter-setup")];
    chain.extend(custom.iter().map(|c| json!(c)));
    json!({
        "allocationDescription": chain,
        "defaults": {"weight_uniform_random": 0}
    })
}

/// [`chain`] for a service: the plugins directory and budget in the file (a reload reads
/// the file and the process environment, not a test's settings).
fn service_chain(dir: &Path, custom: &[&str]) -> Value {
    let mut config = chain(custom);
    config["plugins_dir"] = json!(dir);
    config["limits"] = json!({"plugin_timeout_ms": 200});
    config
}

fn chain_with_unreserved(custom: &[&str]) -> Value {
    let mut chain = vec![json!("pipe"), json!("hard-filter-setup"), json!("calculate-server-unreserved")];
    chain.extend(custom.iter().map(|c| json!(c)));
    chain.push(json!("score-unreserved-ram"));
    json!({"allocationDescription": chain, "defaults": {"weight_uniform_random": 0}})
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/allocate.json")
}

#[test]
fn a_custom_filter_and_scorer_run_in_the_chain_with_their_steps_and_reasons() {
    let dir = plugin_dir(
        "chain",
        &[
            ("hard-filter-avoid-r01.js", AVOID_R01),
            ("score-fullest.js", SCORE_LEAST_RAM),
            ("README.md", "not a plugin"),
        ],
    );
    let config = write_config(&dir, &chain_with_unreserved(&["hard-filter-avoid-r01", "score-fullest"]));
    let env = [("DAPI_PLUGINS_DIR", dir.to_str().expect("utf-8 path"))];
    let request = example_path();
    let (code, out, err) =
        dapi(&["allocate", "--config", config.to_str().unwrap_or(""), request.to_str().unwrap_or("")], &env);
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).expect("JSON answer");
    let steps = answer["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap_or("")).collect();
    assert_eq!(
        names,
        [
            "Received by DAPI",
            "Servers which have been setup",
            "Calculate unreserved resources on each server",
            "Servers outside rack R01",
            "Favour the fullest server",
            "Score servers based on unreserved RAM"
        ]
    );
    // The two R01 servers of the example leave with the plugin's reason.
    let removed = &steps[3]["reasons"];
    assert_eq!(removed.as_object().map(|o| o.len()), Some(2), "{removed}");
    assert_eq!(removed["48ea8e24-dd78-4ba7-bb17-d748a05e1edf"], "rack R01 (vm search-12, base-64-lts)");
    assert_eq!(
        steps[3]["remaining"],
        json!(["be55cce0-2645-41ce-b6c5-c0fc26062691", "5428b803-d510-42f6-a4b8-41e60dbe6bc1"])
    );
    // The scorer saw unreserved RAM, the defaults and the massaged package; its +10 decides.
    let scored = steps[4]["reasons"].as_object().expect("scorer reasons");
    let (uuid, why) = scored.iter().next().expect("one reason");
    assert!(why.as_str().unwrap_or("").starts_with("fullest: "), "{why}");
    assert!(why.as_str().unwrap_or("").ends_with(", score 10, weight 2, pkg ram 1"), "{why}");
    assert_eq!(&answer["server"]["uuid"], uuid);
}

#[test]
fn files_that_do_not_load_stop_start_up_naming_the_file() {
    let cases: &[(&str, &str, &str)] = &[
        ("syntax.js", "module.exports = {name: 'x', run: function (", "syntax.js: does not load: SyntaxError"),
        ("throws.js", "throw new Error('boom at load');", "throws.js: does not load: Error: boom at load"),
        (
            "needs.js",
            "var fs = require('fs');",
            "needs.js: does not load: Error: require(\"fs\"): modules are not available",
        ),
        (
            "hard-filter-setup.js",
            "module.exports = {name: 'x', run: function () {}};",
            "\"hard-filter-setup\" is the name of a built-in plugin",
        ),
    ];
    for (file, text, expected) in cases {
        let dir = plugin_dir("bad", &[(file, text)]);
        let (code, _, err) = dapi(&["plugins"], &[("DAPI_PLUGINS_DIR", dir.to_str().unwrap_or(""))]);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(err.starts_with("dapi: DAPI_PLUGINS_DIR: plugin file "), "{file}: {err}");
        assert!(err.contains(expected), "{file}: {err}");
        // `serve` refuses to start the same way (before binding anything).
        let (code, _, err) =
            dapi(&["serve"], &[("DAPI_PLUGINS_DIR", dir.to_str().unwrap_or("")), ("DAPI_LISTEN", "127.0.0.1:0")]);
        assert_eq!(code, 2, "{file}: {err}");
        assert!(err.contains(expected), "{file}: {err}");
    }
    let (code, _, err) = dapi(&["plugins"], &[("DAPI_PLUGINS_DIR", "/nonexistent/dapi-plugins")]);
    assert_eq!(code, 2);
    assert!(err.contains("plugins_dir /nonexistent/dapi-plugins: cannot be read"), "{err}");
}

#[test]
fn files_that_are_no_plugins_are_skipped_with_a_warning() {
    let dir = plugin_dir(
        "helpers",
        &[
            ("hard-filter-avoid-r01.js", AVOID_R01),
            ("util.js", "module.exports = {rackOf: function (s) { return s.rack_identifier; }};"),
            ("no-name.js", "module.exports = {run: function () {}};"),
        ],
    );
    let env = [("DAPI_PLUGINS_DIR", dir.to_str().unwrap_or(""))];
    let (code, out, err) = dapi(&["plugins"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hard-filter-avoid-r01"), "{out}");
    assert!(!out.contains("util") && !out.contains("no-name"), "{out}");
    assert!(err.contains("util.js: skipped: it does not export a run function"), "{err}");
    assert!(err.contains("no-name.js: skipped: it does not export a name string"), "{err}");
    // The plugin beside them runs (the CLI warns on standard error); a chain naming a
    // skipped file names no plugin, and says why.
    let request = example_path();
    let config = write_config(&dir, &chain(&["hard-filter-avoid-r01"]));
    let (code, _, err) =
        dapi(&["allocate", "--config", config.to_str().unwrap_or(""), request.to_str().unwrap_or("")], &env);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("dapi: warning: plugin file ") && err.contains("util.js: skipped"), "{err}");
    let config = write_config(&dir, &chain(&["util"]));
    let (code, _, err) =
        dapi(&["allocate", "--config", config.to_str().unwrap_or(""), request.to_str().unwrap_or("")], &env);
    assert_eq!(code, 2);
    assert!(err.contains("Unrecognized algorithm: util (plugin file "), "{err}");
    assert!(err.contains("util.js: skipped: it does not export a run function"), "{err}");
}

#[test]
fn a_chain_naming_a_plugin_that_is_not_loaded_is_a_start_up_error() {
    let dir = plugin_dir("unloaded", &[("hard-filter-avoid-r01.js", AVOID_R01)]);
    let config = write_config(&dir, &chain(&["hard-filter-avoid-r02"]));
    let env = [("DAPI_PLUGINS_DIR", dir.to_str().unwrap_or(""))];
    let request = example_path();
    let (code, _, err) =
        dapi(&["allocate", "--config", config.to_str().unwrap_or(""), request.to_str().unwrap_or("")], &env);
    assert_eq!(code, 2);
    assert!(err.contains("Bad expression given: Unrecognized algorithm: hard-filter-avoid-r02"), "{err}");
    // Without plugins_dir, a custom name is unknown just the same.
    let config = write_config(&dir, &chain(&["hard-filter-avoid-r01"]));
    let (code, _, err) =
        dapi(&["allocate", "--config", config.to_str().unwrap_or(""), request.to_str().unwrap_or("")], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("Unrecognized algorithm: hard-filter-avoid-r01"), "{err}");
}

#[test]
fn dapi_plugins_lists_built_in_and_custom_plugins() {
    let dir = plugin_dir("list", &[("hard-filter-avoid-r01.js", AVOID_R01), ("score-fullest.js", SCORE_LEAST_RAM)]);
    let env = [("DAPI_PLUGINS_DIR", dir.to_str().unwrap_or(""))];
    let (code, out, err) = dapi(&["plugins", "--json"], &env);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Value> = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rows.len(), 41);
    let min_ram = rows.iter().find(|r| r["name"] == "hard-filter-min-ram").expect("built-in listed");
    assert_eq!(min_ram["source"], "built-in");
    assert_eq!(min_ram["kind"], "hard filter");
    let custom = rows.iter().find(|r| r["name"] == "score-fullest").expect("custom listed");
    assert_eq!(custom["kind"], "scorer");
    assert_eq!(custom["step"], "Favour the fullest server");
    assert_eq!(custom["file"], "score-fullest.js");
    assert_eq!(custom["digest"].as_str().map(str::len), Some(16));
    let (code, out, _) = dapi(&["plugins"], &env);
    assert_eq!(code, 0);
    assert!(
        out.lines().any(|l| l.starts_with("hard-filter-avoid-r01") && l.contains("custom hard-filter-avoid-r01.js")),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throwing_or_endless_plugin_fails_the_allocation_with_a_500_naming_it() {
    let dir = plugin_dir(
        "fail",
        &[
            ("hard-filter-throws.js", "module.exports = {name: 'T', run: function (s) { return s[0].nope.deeper; }};"),
            ("hard-filter-forever.js", "module.exports = {name: 'F', run: function () { for (;;) {} }};"),
            (
                "hard-filter-errback.js",
                "module.exports = {name: 'E', run: function (s, o, cb) { cb(new Error('no capacity data')); }};",
            ),
            ("hard-filter-silent.js", "module.exports = {name: 'S', run: function () {}};"),
            (
                "hard-filter-stranger.js",
                "module.exports = {name: 'X', run: function (s, o, cb) { cb(null, [{uuid: s[0].uuid}]); }};",
            ),
            ("score-filters.js", "module.exports = {name: 'Y', run: function (s, o, cb) { cb(null, s.slice(1)); }};"),
            ("hard-filter-avoid-r01.js", AVOID_R01),
        ],
    );
    let config = write_config(&dir, &service_chain(&dir, &["hard-filter-avoid-r01"]));
    let s = common::start_with(Some(&config), &[]).await;
    let expectations = [
        ("hard-filter-throws", "custom plugin hard-filter-throws (hard-filter-throws.js) threw TypeError: "),
        ("hard-filter-forever", "custom plugin hard-filter-forever (hard-filter-forever.js) ran out of its time budget (200 ms)"),
        ("hard-filter-errback", "custom plugin hard-filter-errback (hard-filter-errback.js) called back with an error: Error: no capacity data"),
        ("hard-filter-silent", "custom plugin hard-filter-silent (hard-filter-silent.js) did not call back (cb)"),
        ("hard-filter-stranger", "called back with a server it was not given (at index 0)"),
    ];
    for (plugin, expected) in expectations {
        write_config(&dir, &service_chain(&dir, &[plugin]));
        assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
        let started = std::time::Instant::now();
        let r = post_json(s.addr, "/allocate", &example_request()).await;
        assert_eq!(r.status, 500, "{plugin}");
        let message = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(message.contains(expected), "{plugin}: {message}");
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{plugin} took {:?}", started.elapsed());
        // Nothing else is affected: a working plugin answers right after.
        write_config(&dir, &service_chain(&dir, &["hard-filter-avoid-r01"]));
        assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
        let r = post_json(s.addr, "/allocate", &example_request()).await;
        assert_eq!(r.status, 200, "after {plugin}");
        assert_eq!(r.json()["steps"][2]["step"], "Servers outside rack R01");
    }
    // A scorer that drops a server: the original passed its list on, and so does dapi.
    write_config(&dir, &service_chain(&dir, &["score-filters"]));
    assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let steps = r.json()["steps"].as_array().cloned().unwrap_or_default();
    let at = steps.iter().position(|step| step["step"] == "Y").expect("the scorer's step");
    let left = |i: usize| steps[i]["remaining"].as_array().map_or(0, |l| l.len());
    assert_eq!(left(at), left(at - 1) - 1, "the scorer's list went on: {}", steps[at]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_adds_and_removes_plugins_and_ping_shows_the_files() {
    let dir = plugin_dir("reload", &[]);
    let config = write_config(&dir, &service_chain(&dir, &[]));
    let s = common::start_with(Some(&config), &[]).await;
    assert_eq!(send(s.addr, "GET", "/ping", &[], b"").await.json()["plugins"], json!([]));

    // Added: the file is loaded on reload and the chain may name it.
    std::fs::write(dir.join("hard-filter-avoid-r01.js"), AVOID_R01).expect("write");
    write_config(&dir, &service_chain(&dir, &["hard-filter-avoid-r01"]));
    assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
    let ping = send(s.addr, "GET", "/ping", &[], b"").await.json();
    assert_eq!(ping["plugins"][0]["name"], "hard-filter-avoid-r01");
    assert_eq!(ping["plugins"][0]["file"], "hard-filter-avoid-r01.js");
    assert_eq!(ping["plugins"][0]["step"], "Servers outside rack R01");
    let digest = ping["plugins"][0]["digest"].clone();
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["steps"][2]["step"], "Servers outside rack R01");

    // Changed: a new digest, the new code runs.
    std::fs::write(dir.join("hard-filter-avoid-r01.js"), AVOID_R01.replace("outside rack R01", "not in R01"))
        .expect("write");
    assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
    let ping = send(s.addr, "GET", "/ping", &[], b"").await.json();
    assert_ne!(ping["plugins"][0]["digest"], digest);
    assert_eq!(
        post_json(s.addr, "/allocate", &example_request()).await.json()["steps"][2]["step"],
        "Servers not in R01"
    );

    // Removed while the chain still names it: refused, the running plugins stay.
    std::fs::remove_file(dir.join("hard-filter-avoid-r01.js")).expect("remove");
    let r = send(s.addr, "POST", "/admin/reload", &[], b"").await;
    assert_eq!(r.status, 409);
    assert!(r.json()["message"].as_str().unwrap_or("").contains("Unrecognized algorithm: hard-filter-avoid-r01"));
    assert_eq!(post_json(s.addr, "/allocate", &example_request()).await.status, 200);

    // Removed from the chain too: accepted, and gone from /ping.
    write_config(&dir, &service_chain(&dir, &[]));
    assert_eq!(send(s.addr, "POST", "/admin/reload", &[], b"").await.status, 200);
    assert_eq!(send(s.addr, "GET", "/ping", &[], b"").await.json()["plugins"], json!([]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Removes the first server with a reason saying what the plugin was given; keeps the rest
/// only when `opts` holds the VM being placed and its package.
const SEES_ITS_VM: &str = r#"
module.exports = {
    name: 'Sees its VM',
    run: function (servers, opts, cb) {
        var pkg = opts.pkg ? opts.pkg.max_physical_memory : 'none';
        var whole = typeof opts.vm.vm_uuid === 'string' && opts.vm.ram === pkg && Array.isArray(opts.tickets);
        var reasons = {};
        reasons[servers[0].uuid] = 'vm ' + opts.vm.vm_uuid + ' uuid ' + opts.vm.uuid + ' ram ' + opts.vm.ram +
            ' pkg ' + pkg + ' image ' + ('image' in opts.vm) + ' tickets ' + opts.tickets.length;
        cb(null, whole ? servers.slice(1) : [], reasons);
    }
};
"#;

/// Each VM of a batch, and each placement of a simulation, shows custom plugins the VM
/// being placed and its package, as a single request does (they saw `{}` and no package).
#[test]
fn plugins_see_each_placed_vm_in_batches_and_simulations() {
    let dir = plugin_dir("placed-vm", &[("sees-its-vm.js", SEES_ITS_VM)]);
    let config = write_config(&dir, &chain(&["sees-its-vm"]));
    let env = [("DAPI_PLUGINS_DIR", dir.to_str().expect("utf-8 path"))];
    let config = config.to_str().expect("utf-8 path");

    // A batch of copies of the request's VM: each with its own uuid, the request's package.
    let request = example_path();
    let (code, out, err) = dapi(
        &["allocate", "--config", config, "--count", "3", "--steps", "full", request.to_str().unwrap_or("")],
        &env,
    );
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).expect("JSON answer");
    let vms = answer["vms"].as_array().expect("vms");
    assert_eq!(vms.len(), 3, "{answer}");
    for vm in vms {
        let uuid = vm["uuid"].as_str().expect("uuid");
        assert_ne!(uuid, "191fba73-7923-48ba-82f8-09307e20150c", "a copy has a uuid of its own");
        assert!(vm["server_uuid"].is_string(), "{vm}");
        let step = vm["steps"].as_array().and_then(|s| s.iter().find(|s| s["step"] == "Sees its VM")).expect("step");
        let why = step["reasons"].as_object().and_then(|r| r.values().next()).expect("a reason");
        assert_eq!(why, &json!(format!("vm {uuid} uuid undefined ram 512 pkg 512 image false tickets 0")));
    }

    // A batch of VMs given one by one, one with a package of its own.
    let mut body: Value = serde_json::from_str(&std::fs::read_to_string(&request).expect("example")).expect("json");
    let own = "0e000000-0000-4000-8000-000000000002";
    body["vms"] = json!([
        {"vm_uuid": "0e000000-0000-4000-8000-000000000001", "owner_uuid": "8f138999-8869-410d-b4a0-2517e1ff83ab",
         "brand": "joyent-minimal", "ram": 512, "quota": 12, "cpu_cap": 50},
        {"vm_uuid": own, "owner_uuid": "8f138999-8869-410d-b4a0-2517e1ff83ab", "brand": "joyent-minimal",
         "ram": 1024, "quota": 12, "cpu_cap": 50,
         "package": {"max_physical_memory": 1024, "quota": 12288, "cpu_cap": 50}}
    ]);
    let batch = dir.join("batch.json");
    std::fs::write(&batch, body.to_string()).expect("written");
    let (code, out, err) =
        dapi(&["allocate", "--config", config, "--steps", "full", batch.to_str().unwrap_or("")], &env);
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).expect("JSON answer");
    assert_eq!(answer["placed"], 2, "{answer}");
    let second = &answer["vms"][1];
    let step = second["steps"].as_array().and_then(|s| s.iter().find(|s| s["step"] == "Sees its VM")).expect("step");
    let why = step["reasons"].as_object().and_then(|r| r.values().next()).expect("a reason");
    assert_eq!(why, &json!(format!("vm {own} uuid undefined ram 1024 pkg 1024 image false tickets 0")));

    // A simulation: from a package mix, and from a VMAPI dump (a package made of the VM).
    let mix = dir.join("mix.json");
    let mix_json = json!({"packages": [{"max_physical_memory": 1024, "cpu_cap": 100, "quota": 10240}], "count": 3});
    std::fs::write(&mix, mix_json.to_string()).expect("written");
    let dump = dir.join("dump.json");
    let dump_json = json!([{"uuid": "0e000000-0000-4000-8000-00000000000a", "owner_uuid": "8f138999-8869-410d-b4a0-2517e1ff83ab",
        "ram": 2048, "cpu_cap": 100, "quota": 10, "brand": "joyent", "create_timestamp": "2020-01-01T00:00:00Z"}]);
    std::fs::write(&dump, dump_json.to_string()).expect("written");
    for (workload, placed) in [(&mix, 3), (&dump, 1)] {
        let args = ["simulate", "--json", "--no-timing", "--racks", "1", "--servers-per-rack", "3", "--config", config];
        let mut args = args.to_vec();
        args.push(workload.to_str().unwrap_or(""));
        let (code, out, err) = dapi(&args, &env);
        assert_eq!(code, 0, "{err}");
        let doc: Value = serde_json::from_str(&out).expect("JSON figures");
        let run = &doc["runs"][0];
        assert_eq!((run["placed"].clone(), run["failed"].clone()), (json!(placed), json!(0)), "{workload:?}: {run}");
    }
}
