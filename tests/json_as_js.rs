//! Bodies read as `JSON.parse` read them, over HTTP and through `dapi allocate`: lone UTF-16
//! surrogates are kept (and written back as `JSON.stringify` writes them, `\ud800`), numbers
//! beyond the double range are ±Infinity with JavaScript's arithmetic after them. Each
//! expected answer is the original's (sdc-designation's plugins on the value `JSON.parse`
//! gives), worked out in the comments.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{example_request, send, start};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_dapi");
/// The server the example request chooses.
const CHOSEN: &str = "5428b803-d510-42f6-a4b8-41e60dbe6bc1";

/// The example request as text, with `edit` applied to it (the edits write what serde_json
/// cannot: lone surrogates, numbers past the double range).
fn example_text(edit: impl Fn(&mut Value), text_edits: &[(&str, &str)]) -> Vec<u8> {
    let mut req = example_request();
    edit(&mut req);
    let mut text = serde_json::to_string(&req).expect("serialise");
    for (from, to) in text_edits {
        assert!(text.contains(from), "{from} is in the request");
        text = text.replacen(from, to, 1);
    }
    text.into_bytes()
}

/// The answer of `POST /allocate` (status, body) and of `dapi allocate` (exit code, stdout).
async fn both(body: &[u8]) -> ((u16, String), (i32, String)) {
    let s = start(&[]).await;
    let r = send(s.addr, "POST", "/allocate", &[("Content-Type", "application/json")], body).await;
    let http = (r.status, String::from_utf8(r.body).expect("answers are UTF-8"));
    let mut command = Command::new(BIN);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("DAPI_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .args(["allocate", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("dapi starts");
    child.stdin.take().expect("stdin").write_all(body).expect("request written");
    let out = child.wait_with_output().expect("dapi ends");
    let cli = (out.status.code().unwrap_or(-1), String::from_utf8(out.stdout).expect("answers are UTF-8"));
    (http, cli)
}

/// An answer read as `JSON.parse` reads it.
fn parsed(text: &str) -> Value {
    dapi::js::json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn chosen(answer: &Value) -> &str {
    answer["server"]["uuid"].as_str().unwrap_or("none")
}

fn reason<'a>(answer: &'a Value, step: &str, server: &str) -> &'a str {
    let steps = answer["steps"].as_array().map(Vec::as_slice).unwrap_or_default();
    steps.iter().find(|s| s["step"] == step).and_then(|s| s["reasons"][server].as_str()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_surrogate_in_a_hostname_and_a_key_is_echoed_as_json_stringify_writes_it() {
    // Nothing reads `hostname` or an unknown key: the original chose the same server and
    // sent back JSON.stringify(server), which writes a lone surrogate as a lower-case escape.
    let body = example_text(|_| {}, &[(r#""hostname":"CN0002""#, r#""hostname":"CN\uD8000002","x\udc00":[1]"#)]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    for answer in [&http, &cli] {
        assert_eq!(chosen(&parsed(answer)), CHOSEN);
        assert!(answer.contains(r#""hostname":"CN\ud8000002","x\udc00":[1]"#), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_surrogate_in_a_vm_alias_changes_nothing() {
    // The alias is only listed with the VM once placed; the allocation is the example's.
    let body = example_text(|_| {}, &[(r#""alias":"search-12""#, r#""alias":"search-\ud800\udbff""#)]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    assert_eq!(chosen(&parsed(&http)), CHOSEN);
    assert_eq!(chosen(&parsed(&cli)), CHOSEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vms_key_with_a_lone_surrogate_is_named_in_the_servers_reason() {
    // dapi's check (the original kept such a server): its reason quotes the key, escaped.
    let req = example_request();
    let key = req["servers"][0]["vms"].as_object().and_then(|m| m.keys().next().cloned()).expect("a VM");
    let server = req["servers"][0]["uuid"].as_str().unwrap_or_default().to_string();
    let from = format!(r#""{key}":{{"#);
    let to = format!(r#""\udc00{key}":{{"#);
    let body = example_text(|r| *r = req.clone(), &[(&from, &to)]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    for answer in [&http, &cli] {
        let expected = format!(r#""{server}":"property \"vms.\udc00{key}\": key is not a UUID""#);
        assert!(answer.contains(&expected), "{answer}");
        assert_ne!(chosen(&parsed(answer)), server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_memory_available_bytes_fails_the_server_schema() {
    // `1e999` is Infinity; the schema's integer check is `value % 1 === 0`, and Infinity % 1
    // is NaN: hard-filter-invalid-servers drops the server, another wins.
    let mut req = example_request();
    req["servers"][2]["memory_available_bytes"] = Value::from(123_456_789_u64);
    assert_eq!(req["servers"][2]["uuid"], CHOSEN);
    let body = example_text(|r| *r = req.clone(), &[(":123456789,", ":1e999,")]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    for answer in [&http, &cli] {
        let answer = parsed(answer);
        assert!(![CHOSEN, "none"].contains(&chosen(&answer)), "another server is chosen");
        assert_eq!(
            reason(&answer, "Servers objects which are valid", CHOSEN),
            r#"property "memory_available_bytes": infinity - number value found, but a integer is required"#
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_number_is_echoed_as_null() {
    // JSON.stringify(Infinity) is "null", wherever the number sits in the chosen server.
    let body = example_text(|_| {}, &[(r#""hostname":"CN0002""#, r#""hostname":"CN0002","x":{"y":[1e999,-1e400,1]}"#)]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    for answer in [&http, &cli] {
        assert_eq!(chosen(&parsed(answer)), CHOSEN);
        assert!(answer.contains(r#""x":{"y":[null,null,1]}"#), "{answer}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_package_memory_changes_nothing() {
    // The allocation chain reads the VM's `ram`, not the package's `max_physical_memory`.
    let body = example_text(
        |_| {},
        &[(
            r#""max_physical_memory":512,"max_swap":1024,"max_lwps":4000,"quota":12288"#,
            r#""max_physical_memory":1e999,"max_swap":1024,"max_lwps":4000,"quota":12288"#,
        )],
    );
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    assert_eq!(chosen(&parsed(&http)), CHOSEN);
    assert_eq!(chosen(&parsed(&cli)), CHOSEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_of_infinite_memory_leaves_its_server_no_room() {
    // calculate-ticketed-vms lists the ticket's VM on its server; unreserved RAM is then
    // spare - Infinity = -Infinity, and hard-filter-min-ram's `>=` fails.
    let ticket = serde_json::json!([{
        "uuid": "11111111-1111-4111-8111-111111111111", "id": "22222222-2222-4222-8222-222222222222",
        "server_uuid": CHOSEN, "scope": "vm", "action": "provision", "status": "active",
        "extra": {"owner_uuid": "8f138999-8869-410d-b4a0-2517e1ff83ab", "max_physical_memory": 123456789,
                  "cpu_cap": 50, "quota": 10, "brand": "joyent-minimal"}
    }]);
    let body = example_text(|r| r["tickets"] = ticket.clone(), &[(":123456789,", ":1e999,")]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (200, 0), "{http}");
    for answer in [&http, &cli] {
        let answer = parsed(answer);
        assert!(![CHOSEN, "none"].contains(&chosen(&answer)), "another server is chosen");
        assert_eq!(
            reason(&answer, "Servers with enough unreserved RAM", CHOSEN),
            "VM's calculated 512 RAM is less than server's spare -Infinity"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_of_infinite_ram_fits_nowhere() {
    // Infinity passes the VM checks (a number, not negative) and no spare RAM reaches it.
    let body = example_text(|r| r["vm"]["ram"] = Value::from(123_456_789_u64), &[(":123456789,", ":1e400,")]);
    let ((status, http), (code, cli)) = both(&body).await;
    assert_eq!((status, code), (409, 0), "{http}");
    let http = parsed(&http);
    assert_eq!(http["message"], "No compute resources available: no servers with enough unreserved RAM");
    let cli = parsed(&cli);
    assert_eq!(cli["server"], Value::Null);
    for answer in [&http, &cli] {
        assert_eq!(
            reason(answer, "Servers with enough unreserved RAM", CHOSEN),
            "VM's calculated Infinity RAM is less than server's spare 186368"
        );
    }
}
