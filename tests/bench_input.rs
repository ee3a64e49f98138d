//! The benchmark's own inputs (`benches/input.rs`) are what `make bench` needs: the same
//! bytes every time, valid, every server passing the schema, filters removing some servers
//! and one server chosen.

#[path = "../benches/input.rs"]
mod input;

use dapi::answer::{self, AnswerOptions};
use dapi::config::ServiceConfig;
use dapi::wire::parse_allocate_body;
use serde_json::Value;

#[test]
fn generated_bodies_are_deterministic_valid_and_allocatable() {
    let body = input::body(50, 30);
    assert_eq!(body, input::body(50, 30), "the same bytes every time");
    assert_ne!(body, input::body(51, 30));
    // About 10 kB per server at 30 VMs each, like a CNAPI datacenter.
    assert!((400_000..800_000).contains(&body.len()), "{} bytes", body.len());

    let request = parse_allocate_body(&body).expect("parses");
    assert_eq!(request.servers.len(), 50);
    assert_eq!(request.tickets.len(), 5);

    let dir = std::env::temp_dir().join(format!("dapi-bench-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let path = dir.join("config.json");
    std::fs::write(&path, input::config().to_string()).expect("write");
    let config = ServiceConfig::load(Some(&path), Vec::new()).expect("config");
    let _ = std::fs::remove_dir_all(&dir);
    let engine = config.engine().expect("engine");

    let answer = answer::allocate(&engine, &config.limits, &body, AnswerOptions::default()).expect("valid");
    let answer: Value = serde_json::from_slice(&answer.body).expect("JSON");
    assert!(answer["server"]["uuid"].is_string(), "a server fits");
    let steps = answer["steps"].as_array().expect("steps");
    let valid = steps.iter().find(|s| s["step"] == "Servers objects which are valid").expect("the schema step");
    assert!(valid.get("reasons").is_none(), "every server is valid: {}", valid["reasons"]);
    let last = steps.last().and_then(|s| s["remaining"].as_array()).map_or(0, Vec::len);
    assert!((1..45).contains(&last), "the filters removed some servers: {last} left");
}
