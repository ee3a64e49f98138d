//! The compact step format (`POST /allocate?steps=removed`) end to end.

mod common;

use common::{example_request, send, start};
use serde_json::{json, Value};

async fn allocate(addr: std::net::SocketAddr, query: &str, req: &Value) -> common::Reply {
    let body = serde_json::to_vec(req).expect("body");
    send(addr, "POST", &format!("/allocate{query}"), &[("Content-Type", "application/json")], &body).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removed_steps_describe_the_same_allocation() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["seed"] = json!(3);
    let full = allocate(s.addr, "", &req).await.json();
    let compact = allocate(s.addr, "?steps=removed", &req).await;
    assert_eq!(compact.status, 200);
    let compact = compact.json();
    assert_eq!(compact["server"], full["server"]);
    let (full_steps, compact_steps) =
        (full["steps"].as_array().expect("steps"), compact["steps"].as_array().expect("steps"));
    assert_eq!(full_steps.len(), compact_steps.len());
    let mut left: Vec<Value> = full_steps[0]["remaining"].as_array().expect("received").clone();
    for (f, c) in full_steps.iter().zip(compact_steps).skip(1) {
        assert_eq!(f["step"], c["step"]);
        assert!(c.get("remaining").is_none(), "no remaining list in the compact form");
        assert_eq!(f.get("reasons"), c.get("reasons"));
        let removed = c["removed"].as_array().expect("removed");
        let kept = f["remaining"].as_array().expect("remaining");
        // What was given minus what was kept is what was removed.
        let expected: Vec<&Value> = left.iter().filter(|u| !kept.contains(u)).collect();
        assert_eq!(removed.iter().collect::<Vec<_>>(), expected, "step {}", f["step"]);
        assert_eq!(c["remaining_count"].as_u64(), Some(kept.len() as u64));
        left = kept.clone();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_409s_and_a_bad_format() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["vm"]["internal_metadata"] = json!({"force_designation_failure": true});
    let r = allocate(s.addr, "?steps=removed", &req).await;
    assert_eq!(r.status, 409);
    let body = r.json();
    let last = body["steps"].as_array().and_then(|s| s.last().cloned()).expect("a step");
    assert_eq!(last["step"], "Forced failure");
    assert_eq!(last["remaining_count"], 0);
    assert_eq!(last["removed"].as_array().map(Vec::len), req["servers"].as_array().map(Vec::len));

    let r = allocate(s.addr, "?steps=everything", &example_request()).await;
    assert_eq!(r.status, 422);
    assert_eq!(r.json()["errors"][0]["field"], "steps");
}

/// `steps=counts`: the same decision, each step only with how many servers it left; a 409
/// keeps its message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counted_steps_describe_the_same_allocation() {
    let s = start(&[]).await;
    let mut req = example_request();
    req["seed"] = json!(5);
    let full = allocate(s.addr, "", &req).await.json();
    let counted = allocate(s.addr, "?steps=counts", &req).await;
    assert_eq!(counted.status, 200);
    let counted = counted.json();
    assert_eq!(counted["server"], full["server"]);
    let (full_steps, counted_steps) =
        (full["steps"].as_array().expect("steps"), counted["steps"].as_array().expect("steps"));
    assert_eq!(full_steps.len(), counted_steps.len());
    for (f, c) in full_steps.iter().zip(counted_steps) {
        let kept = f["remaining"].as_array().expect("remaining").len() as u64;
        assert_eq!(c, &json!({"step": f["step"], "remaining_count": kept}));
    }

    req["vm"]["internal_metadata"] = json!({"force_designation_failure": true});
    let full = allocate(s.addr, "", &req).await;
    let counted = allocate(s.addr, "?steps=counts", &req).await;
    assert_eq!((full.status, counted.status), (409, 409));
    let (full, counted) = (full.json(), counted.json());
    assert_eq!(counted["message"], full["message"]);
    assert_eq!(counted["steps"].as_array().and_then(|s| s.last()).map(|l| &l["remaining_count"]), Some(&json!(0)));
}
