//! `filter_owner_server` snippets end to end: JavaScript run over HTTP, a reload that
//! changes a snippet, a snippet that never ends or reaches for Node's globals (the step's
//! `Error running filter ...` reason, not a 500), and snippets that are not JavaScript
//! (start-up and reload refused, naming the owner).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{example_request, post_json, send};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_dapi");
/// The owner of `examples/allocate.json`'s VM.
const OWNER: &str = "8f138999-8869-410d-b4a0-2517e1ff83ab";
const OTHER: &str = "2316e149-1562-47ff-abea-00bda80d0e7f";
/// `examples/allocate.json`'s servers: node-0004, node-0003, CN0002, node-0001.
const NODE4: &str = "be55cce0-2645-41ce-b6c5-c0fc26062691";
const NODE3: &str = "48ea8e24-dd78-4ba7-bb17-d748a05e1edf";
const CN2: &str = "5428b803-d510-42f6-a4b8-41e60dbe6bc1";
const NODE1: &str = "c95613ef-1071-46da-8467-3e230ee06e0b";
const STEP: &str = "Filter CNs based on owner filters";

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dapi-owner-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir
}

/// A config file with these snippets (and a 200 ms budget for JavaScript).
fn write_config(dir: &Path, filters: Value) -> PathBuf {
    let path = dir.join("config.json");
    let config = json!({"defaults": {"filter_owner_server": filters}, "limits": {"plugin_timeout_ms": 200}});
    std::fs::write(&path, config.to_string()).expect("write config");
    path
}

/// The owner filter's step of an answer.
fn step(answer: &Value) -> Value {
    let steps = answer["steps"].as_array().cloned().unwrap_or_default();
    steps.into_iter().find(|s| s["step"] == STEP).unwrap_or_else(|| panic!("no owner-filter step: {answer}"))
}

async fn reload(addr: std::net::SocketAddr) -> common::Reply {
    send(addr, "POST", "/admin/reload", &[], b"").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snippets_run_as_javascript_and_a_reload_changes_them() {
    let dir = temp_dir("http");
    let own = "server.hostname.toLowerCase().startsWith('cn') && typeof server.sysinfo === 'object'";
    let config = write_config(&dir, json!({ OWNER: own }));
    let s = common::start_with(Some(&config), &[]).await;

    // The owner's own snippet: only CN0002 passes.
    let r = post_json(s.addr, "/allocate", &example_request()).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let answer = r.json();
    assert_eq!(answer["server"]["uuid"], CN2);
    assert_eq!(step(&answer)["remaining"], json!([CN2]));
    assert_eq!(step(&answer)["reasons"], json!({"*": format!("Servers pass filter for owner {OWNER}: {own}")}));

    // Changed: another owner reserves the node-000[34] servers (a regex literal), so this
    // owner loses them.
    write_config(&dir, json!({ OTHER: "/^node-000[34]$/.test(server.hostname)" }));
    assert_eq!(reload(s.addr).await.status, 200);
    let answer = post_json(s.addr, "/allocate", &example_request()).await.json();
    assert_eq!(step(&answer)["remaining"], json!([CN2, NODE1]));
    let removed = format!("Removed by filter for owner {OTHER}");
    assert_eq!(step(&answer)["reasons"], json!({ NODE4: removed, NODE3: removed }));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_or_node_reaching_snippets_fail_the_step_not_the_service() {
    let dir = temp_dir("fail");
    let config = write_config(&dir, json!({ OWNER: "server.ram > 0" }));
    let s = common::start_with(Some(&config), &[]).await;
    for snippet in ["(function () { for (;;) {} })()", "require('fs').readFileSync('/etc/passwd')", "process.exit(1)"] {
        for (owner, filters) in [(OWNER, json!({ OWNER: snippet })), (OTHER, json!({ OTHER: snippet }))] {
            write_config(&dir, filters);
            assert_eq!(reload(s.addr).await.status, 200, "{snippet}");
            let started = Instant::now();
            let r = post_json(s.addr, "/allocate", &example_request()).await;
            assert!(started.elapsed() < Duration::from_secs(10), "{snippet} took {:?}", started.elapsed());
            assert_eq!(r.status, 409, "{snippet}: {}", r.json());
            let answer = r.json();
            assert_eq!(step(&answer)["remaining"], json!([]), "{snippet}");
            assert_eq!(
                step(&answer)["reasons"],
                json!({"*": format!("Error running filter for owner {owner}: {snippet}")}),
                "{snippet}"
            );
        }
    }
    // The service goes on: a good snippet answers right after.
    write_config(&dir, json!({ OWNER: "server.ram > 0" }));
    assert_eq!(reload(s.addr).await.status, 200);
    assert_eq!(post_json(s.addr, "/allocate", &example_request()).await.status, 200);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snippet_that_is_not_javascript_is_refused_naming_the_owner() {
    let dir = temp_dir("bad");
    let good = "server.rack_identifier.slice(1) === '01'";
    let config = write_config(&dir, json!({ OWNER: good }));
    let s = common::start_with(Some(&config), &[]).await;
    write_config(&dir, json!({ OWNER: good, OTHER: "server.ram >" }));
    let r = reload(s.addr).await;
    assert_eq!(r.status, 409, "{}", r.json());
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    assert!(
        message.contains(OTHER) && message.contains("SyntaxError") && message.contains("server.ram >"),
        "{message}"
    );
    // The running snippets stay.
    let answer = post_json(s.addr, "/allocate", &example_request()).await.json();
    assert_eq!(step(&answer)["remaining"], json!([NODE3, NODE1]));

    // At start-up: the process stops, saying which owner's snippet to fix.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/allocate.json");
    let out = std::process::Command::new(BIN)
        .args(["allocate", "--config"])
        .arg(&config)
        .arg(&example)
        .env_remove("DAPI_PLUGINS_DIR")
        .output()
        .expect("dapi runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(OTHER) && stderr.contains("not valid JavaScript"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
