//! What the fuzz targets share: the production engine, and the properties every request
//! must keep on its way through dapi (see README.md here for the targets).

use std::sync::OnceLock;

use dapi::answer::{self, AnswerOptions, NoFitBody};
use dapi::outcome::AnswerError;
use dapi::config::Limits;
use dapi::engine::Engine;
use serde_json::Value;

/// The engine on the built-in (production) config.
pub fn production() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let config: Value = serde_json::from_str(dapi::config::DEFAULT_CONFIG).expect("built-in config");
        Engine::from_config(&config, &dapi::registry::built_in()).expect("built-in engine")
    })
}

/// Small limits so that one input cannot ask for minutes of work.
pub fn limits() -> Limits {
    Limits { max_servers: 64, max_vms_per_server: 64, ..Limits::default() }
}

/// Runs a body through the whole request path (parse, limits, validation, engine, answer)
/// and checks what must hold for any input: no panic (the fuzzer sees those), no internal
/// error on a request that passed validation, an answer that is JSON, and a chosen server
/// that survived every top-level hard filter.
pub fn check_request_path(engine: &Engine, body: &[u8]) {
    let options = AnswerOptions { no_fit: NoFitBody::NullServer, ..AnswerOptions::default() };
    let answer = match answer::allocate(engine, &limits(), body, options) {
        Ok(answer) => answer,
        Err(AnswerError::Internal(message)) => panic!("internal error on a caller's input: {message}"),
        Err(_) => return,
    };
    // Read as JSON.parse reads it: a lone surrogate the request carried is echoed as
    // JSON.stringify writes it (`\ud800`), which serde_json alone refuses.
    let text = std::str::from_utf8(&answer.body).expect("the answer is UTF-8");
    let answer: Value = dapi::js::json::from_str(text).expect("the answer is JSON");
    let Some(uuid) = answer["server"].get("uuid") else { return };
    let steps = answer["steps"].as_array().expect("steps");
    for name in engine.chain().top_level_hard_filters() {
        for step in steps.iter().filter(|s| s["step"] == name) {
            let remaining = step["remaining"].as_array().expect("remaining");
            assert!(remaining.contains(uuid), "chosen {uuid} was removed by {name}");
        }
    }
}
