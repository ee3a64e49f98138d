//! Logs as bunyan JSON lines (`name`, `hostname`, `pid`, `level` as a number, `msg`, `time`,
//! `v`, then the event's fields), the format Triton operators read with the `bunyan` CLI.

use std::io::Write;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::prelude::*;

struct Bunyan {
    hostname: String,
    pid: u32,
}

fn bunyan_level(level: &Level) -> u8 {
    match *level {
        Level::TRACE => 10,
        Level::DEBUG => 20,
        Level::INFO => 30,
        Level::WARN => 40,
        Level::ERROR => 50,
    }
}

struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), Value::String(value.to_string()));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), Value::from(value));
    }
}

impl<S: Subscriber> Layer<S> for Bunyan {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields(Map::new());
        event.record(&mut fields);
        let msg = fields.0.shift_remove("message").unwrap_or(Value::String(String::new()));
        let mut line = Map::new();
        line.insert("name".into(), "dapi".into());
        line.insert("hostname".into(), self.hostname.clone().into());
        line.insert("pid".into(), self.pid.into());
        line.insert("level".into(), bunyan_level(event.metadata().level()).into());
        line.insert("msg".into(), msg);
        line.insert("time".into(), chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true).into());
        line.insert("v".into(), 0.into());
        line.extend(fields.0);
        let mut text = Value::Object(line).to_string();
        text.push('\n');
        // Logging must never take the service down: a failed write is dropped.
        let _ = std::io::stdout().lock().write_all(text.as_bytes());
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "localhost".into())
}

/// Installs the bunyan logger at `level` (`error` ... `trace`). Safe to call more than once.
pub fn init(level: &str) {
    let filter = match level {
        "error" => tracing_subscriber::filter::LevelFilter::ERROR,
        "warn" => tracing_subscriber::filter::LevelFilter::WARN,
        "debug" => tracing_subscriber::filter::LevelFilter::DEBUG,
        "trace" => tracing_subscriber::filter::LevelFilter::TRACE,
        _ => tracing_subscriber::filter::LevelFilter::INFO,
    };
    let layer = Bunyan { hostname: hostname(), pid: std::process::id() }.with_filter(filter);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}
