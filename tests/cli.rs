//! The `dapi` command as a process: help, version, input from a file or standard input,
//! exit codes and messages for bad input and bad config, and `serve` on a host name.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::dapi;
use serde_json::Value;

fn run(command: &mut Command) -> (i32, String, String) {
    let Output { status, stdout, stderr } = command.output().expect("dapi runs");
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into())
}

/// Runs `dapi args...` with `stdin` as its standard input.
fn run_with_stdin(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = dapi()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dapi starts");
    child.stdin.take().expect("stdin").write_all(stdin).expect("request written");
    let Output { status, stdout, stderr } = child.wait_with_output().expect("dapi ends");
    (status.code().unwrap_or(-1), String::from_utf8_lossy(&stdout).into(), String::from_utf8_lossy(&stderr).into())
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples").join(name)
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn tmp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("file.json");
    std::fs::write(&path, text).expect("write");
    path
}

/// The README's simulate example runs on the package mix in examples/.
#[test]
fn the_readme_simulate_example_runs_on_the_example_mix() {
    let mix = example("mix.json");
    let (code, out, err) = run(dapi().args(["simulate", "--racks", "2", "--servers-per-rack", "4"]).arg(&mix));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("workload: mix (2000 VMs"), "{out}");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("README");
    assert!(readme.contains("--disk 3T examples/mix.json"), "the README names the file");
}

#[test]
fn help_lists_the_commands_config_layers_environment_and_exit_codes() {
    let (code, out, _) = run(dapi().arg("--help"));
    assert_eq!(code, 0);
    for needle in [
        "serve",
        "allocate",
        "capacity",
        "openapi",
        "--config FILE",
        "DAPI_CONFIG",
        "DAPI_LISTEN",
        "DAPI_LIMITS__MAX_SERVERS",
        "DAPI_DEFAULTS__<NAME>",
        "__ between nested keys",
        "Exit status",
        "2  invalid request, config or command line",
    ] {
        assert!(out.contains(needle), "--help lacks {needle:?}:\n{out}");
    }
    // Without a command: the help, as a usage error.
    let (code, _, err) = run(&mut dapi());
    assert_eq!(code, 2);
    assert!(err.contains("Usage: dapi <COMMAND>"), "{err}");
}

#[test]
fn version_is_the_crate_version() {
    let (code, out, _) = run(dapi().arg("--version"));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), format!("dapi {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn allocate_help_describes_the_input_and_both_outcomes() {
    let (code, out, _) = run(dapi().args(["allocate", "--help"]));
    assert_eq!(code, 0);
    for needle in [
        "REQUEST is a JSON file, or - for standard input",
        r#"{"servers": [...]"#,
        r#""vm": {...}"#,
        r#"{"server": null, "steps": [...]}"#,
        "409",
        "NoAllocatableServersError",
        "--steps",
        "removed",
        "Exit status",
    ] {
        assert!(out.contains(needle), "allocate --help lacks {needle:?}:\n{out}");
    }
    let (code, out, _) = run(dapi().args(["capacity", "--help"]));
    assert_eq!(code, 0);
    assert!(out.contains(r#"{"servers": [...]} or a bare array"#), "{out}");
}

#[test]
fn allocate_reads_standard_input_for_a_dash() {
    // A seed, so that score-uniform-random gives both runs the same answer.
    let mut request = json(&std::fs::read_to_string(example("allocate.json")).expect("example"));
    request["seed"] = Value::from(7);
    let file = tmp_file("stdin", &request.to_string());
    let (code, from_stdin, err) = run_with_stdin(&["allocate", "-"], request.to_string().as_bytes());
    assert_eq!(code, 0, "{err}");
    let (code, from_file, _) = run(dapi().arg("allocate").arg(&file));
    assert_eq!(code, 0);
    assert!(from_stdin == from_file, "standard input and the file give different answers");
    assert!(json(&from_stdin)["server"]["uuid"].is_string(), "{from_stdin}");
    if let Some(dir) = file.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }

    let (code, out, _) = run_with_stdin(&["capacity", "-"], &std::fs::read(example("capacity.json")).expect("example"));
    assert_eq!(code, 0);
    assert!(json(&out)["capacities"].is_object(), "{out}");
}

#[test]
fn no_fit_prints_a_null_server_and_exits_0() {
    let mut body = json(&std::fs::read_to_string(example("allocate.json")).expect("example"));
    body["vm"]["ram"] = Value::from(100_000_000);
    let (code, out, err) = run_with_stdin(&["allocate", "-"], body.to_string().as_bytes());
    assert_eq!(code, 0, "{err}");
    let answer = json(&out);
    assert_eq!(answer["server"], Value::Null);
    assert!(answer["steps"].as_array().is_some_and(|s| !s.is_empty()), "{out}");
}

#[test]
fn bad_input_exits_2_with_a_message_that_names_it() {
    let (code, out, err) = run(dapi().args(["allocate", "no/such/request.json"]));
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.starts_with("dapi: cannot read no/such/request.json: "), "{err}");

    let (code, _, err) = run_with_stdin(&["allocate", "-"], b"{\"servers\": ");
    assert_eq!(code, 2);
    assert!(err.starts_with("dapi: ") && err.contains("line 1"), "{err}");

    let (code, _, err) = run_with_stdin(&["allocate", "-"], br#"{"servers": {}, "vm": {}, "image": {}}"#);
    assert_eq!(code, 2);
    assert!(err.contains("servers: "), "{err}");

    // The limits apply as in the service.
    let (code, _, err) = run(dapi().arg("allocate").arg(example("allocate.json")).env("DAPI_LIMITS__MAX_SERVERS", "2"));
    assert_eq!(code, 2);
    assert_eq!(err.trim(), "dapi: servers: 4 servers given; the limit is 2");
}

#[test]
fn usage_errors_exit_2() {
    for args in
        [&["frobnicate"][..], &["allocate"], &["allocate", "--steps", "some", "x.json"], &["allocate", "a", "b"]]
    {
        let (code, out, err) = run(dapi().args(args));
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty() && err.starts_with("error: ") && err.contains("--help"), "{args:?}: {err}");
    }
}

#[test]
fn bad_config_exits_2_naming_the_file_or_the_variable() {
    let config = tmp_file("badconfig", r#"{"limits": {"max_server": 10}}"#);
    let (code, _, err) = run(dapi().arg("allocate").arg("--config").arg(&config).arg(example("allocate.json")));
    assert_eq!(code, 2);
    assert_eq!(
        err.trim(),
        format!(
            r#"dapi: config file {}: unknown key "limits.max_server"; did you mean "limits.max_servers"?"#,
            config.display()
        )
    );

    // DAPI_CONFIG names the file when --config does not.
    let (code, _, err) =
        run(dapi().arg("allocate").arg(example("allocate.json")).env("DAPI_CONFIG", "no/such/config.json"));
    assert_eq!(code, 2);
    assert!(err.starts_with("dapi: cannot read config file no/such/config.json: "), "{err}");

    let (code, _, err) =
        run(dapi().arg("allocate").arg(example("allocate.json")).env("DAPI_LIMITS__MAX_SERVERS", "lots"));
    assert_eq!(code, 2);
    assert!(err.starts_with("dapi: DAPI_LIMITS__MAX_SERVERS: invalid digit found in string"), "{err}");

    let (code, _, err) =
        run(dapi().arg("allocate").arg(example("allocate.json")).env("DAPI_DEFAULTS__FILTER_HEADNODE", "yes"));
    assert_eq!(code, 2);
    assert_eq!(err.trim(), "dapi: DAPI_DEFAULTS__FILTER_HEADNODE: Defaults filter_headnode is not boolean");
    if let Some(dir) = config.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A reader that stops early (`dapi ... | head`) is no error of dapi's: it ends quietly,
/// exit 0, rather than reporting an internal error.
#[test]
fn a_reader_that_stops_early_ends_it_quietly() {
    let mut child = dapi().arg("openapi").stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("dapi starts");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 16];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("the answer starts");
    drop(stdout);
    let Output { status, stderr, .. } = child.wait_with_output().expect("dapi ends");
    assert_eq!(status.code(), Some(0), "{}", String::from_utf8_lossy(&stderr));
    assert!(stderr.is_empty(), "{}", String::from_utf8_lossy(&stderr));
}

#[test]
fn openapi_prints_the_document() {
    let (code, out, _) = run(dapi().arg("openapi"));
    assert_eq!(code, 0);
    assert_eq!(json(&out)["openapi"], "3.1.0");
}

#[test]
fn serve_listens_on_a_host_name() {
    let mut child = dapi()
        .arg("serve")
        .env("DAPI_LISTEN", "localhost:0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("dapi serve starts");
    let stdout = child.stdout.take().expect("stdout");
    let first = BufReader::new(stdout).lines().next().and_then(Result::ok).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    let line = json(&first);
    assert_eq!(line["msg"], "dapi listening", "{first}");
    let addr: std::net::SocketAddr = line["addr"].as_str().and_then(|a| a.parse().ok()).expect("an address");
    assert!(addr.ip().is_loopback(), "{addr}");
}

#[test]
fn the_examples_answer_as_the_readme_says() {
    let allocate = |config: Option<&str>, request: &str| {
        let mut command = dapi();
        command.arg("allocate");
        if let Some(c) = config {
            command.arg("--config").arg(example(c));
        }
        let (code, out, err) = run(command.arg(example(request)));
        assert_eq!(code, 0, "{request}: {err}");
        json(&out)
    };
    // With examples/config.json (score-uniform-random weighted 0) the answer repeats.
    let first = allocate(Some("config.json"), "allocate.json");
    assert_eq!(first["server"]["hostname"], "CN0002");
    assert_eq!(first, allocate(Some("config.json"), "allocate.json"));

    // Filters remove three of the four servers, each with its own step.
    let filtered = allocate(None, "allocate-filtered.json");
    assert_eq!(filtered["server"]["hostname"], "node-0001");
    let left = |name: &str| {
        let step = filtered["steps"].as_array().and_then(|s| s.iter().find(|s| s["step"] == name)).expect(name);
        step["remaining"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(left("Servers which are currently running"), 3);
    assert_eq!(left("Servers which are not reserved"), 2);
    assert_eq!(left("Servers with enough unreserved RAM"), 1);

    let none = allocate(None, "allocate-no-fit.json");
    assert_eq!(none["server"], Value::Null);
    let last = none["steps"].as_array().and_then(|s| s.last()).expect("steps");
    assert_eq!(last["step"], "Servers with enough unreserved RAM");
    assert_eq!(last["remaining"], serde_json::json!([]));
}

#[test]
fn allocate_count_places_copies_and_a_batch_file_is_read_as_one() {
    let (code, out, err) = run(dapi().args(["allocate", "--count", "3"]).arg(example("allocate.json")));
    assert_eq!(code, 0, "{err}");
    let answer = json(&out);
    assert_eq!(answer["vms"].as_array().map(Vec::len), Some(3));
    assert_eq!(answer["placed"].as_u64().unwrap_or(0) + answer["failed"].as_u64().unwrap_or(0), 3);
    assert!(answer["vms"][0]["steps"][0].get("removed").is_some(), "compact steps by default");

    let mut body = json(&std::fs::read_to_string(example("allocate.json")).expect("example"));
    body["count"] = serde_json::json!(2);
    let file = tmp_file("batch-count.json", &body.to_string());
    let (code, out, err) = run(dapi().args(["allocate", "--steps", "full"]).arg(&file));
    assert_eq!(code, 0, "{err}");
    let answer = json(&out);
    assert_eq!(answer["vms"].as_array().map(Vec::len), Some(2));
    assert!(answer["vms"][0]["steps"][0].get("remaining").is_some());

    body["count"] = serde_json::json!(0);
    let file = tmp_file("batch-zero.json", &body.to_string());
    let (code, _, err) = run(dapi().arg("allocate").arg(&file));
    assert_eq!(code, 2);
    assert!(err.contains("count"), "{err}");
}
