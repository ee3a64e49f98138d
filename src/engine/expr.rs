//! The allocation description: a `pipe`/`or` tree of plugin names, validated at start-up
//! and run per request.
//!
//! * `["pipe", e1, e2, ...]` feeds each element's output to the next and stops as soon as
//!   the list is empty (before running the next element).
//! * `["or", e1, e2, ...]` gives every element the same input and returns the first
//!   non-empty output (or the last, empty, one).

use std::sync::Arc;

use serde_json::Value;

use super::context::{Request, ServerId};
use super::plugin::{broken_promise, Data, Plugin, PluginError, Registry};
use super::reasons::Reasons;
use super::summary::Step;
use crate::js::Js;

/// A parsed allocation description.
#[derive(Clone)]
pub enum Expr {
    Plugin(Arc<dyn Plugin>),
    Pipe(Vec<Expr>),
    Or(Vec<Expr>),
}

impl Expr {
    /// The step names of the hard filters at the top level of a `pipe` chain: a chosen
    /// server passed each of them (the properties and fuzz targets check it).
    pub fn top_level_hard_filters(&self) -> Vec<&'static str> {
        match self {
            Expr::Pipe(items) => items
                .iter()
                .filter_map(|e| match e {
                    Expr::Plugin(p) if p.declaration().kind == super::plugin::Kind::HardFilter => {
                        Some(p.declaration().step)
                    }
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expr::Plugin(p) => write!(f, "{}", p.name()),
            Expr::Pipe(items) => f.debug_tuple("pipe").field(items).finish(),
            Expr::Or(items) => f.debug_tuple("or").field(items).finish(),
        }
    }
}

impl Expr {
    /// Parses and checks a description against the plugins of `registry`; errors read
    /// `Bad expression given: ...` (the original's words), and one about the shape of an
    /// expression says what the shape is.
    pub fn parse(desc: &Value, registry: &Registry) -> Result<Expr, String> {
        parse(desc, registry).map_err(|e| match e.starts_with("Invalid command") {
            true => format!("Bad expression given: {e} ({SHAPE})"),
            false => format!("Bad expression given: {e}"),
        })
    }

    /// Runs the expression on `input`, appending one step per plugin run.
    pub fn run(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        steps: &mut Vec<Step>,
    ) -> Result<Vec<ServerId>, PluginError> {
        self.run_from(req, input, None, steps, true).map(|(output, _)| output)
    }

    /// [`Expr::run`] on a list that is the `remaining` of step `source` (`None`: the servers
    /// received), keeping no reasons in the steps (an answer that gives only the counts);
    /// returns the output and the step it is the `remaining` of.
    pub fn run_counting(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        source: Option<usize>,
        steps: &mut Vec<Step>,
    ) -> Result<(Vec<ServerId>, Option<usize>), PluginError> {
        self.run_from(req, input, source, steps, false)
    }

    /// [`Expr::run`] without steps (the plugins' reasons not kept), noting what each plugin
    /// passed on, in the order they ran.
    pub fn run_noting(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        outputs: &mut Vec<Vec<ServerId>>,
    ) -> Result<Vec<ServerId>, PluginError> {
        self.run_quietly(req, input, Some(outputs))
    }

    fn run_quietly(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        mut outputs: Option<&mut Vec<Vec<ServerId>>>,
    ) -> Result<Vec<ServerId>, PluginError> {
        match self {
            Expr::Plugin(plugin) => {
                let output = plugin.run(req, &input, &mut Reasons::discarding())?;
                if cfg!(debug_assertions) {
                    if let Some(broken) = broken_promise(plugin.declaration(), &input, &output) {
                        panic!("plugin contract broken: {broken}");
                    }
                }
                if let Some(outputs) = outputs {
                    outputs.push(copied_into(input, &output));
                }
                Ok(output)
            }
            Expr::Pipe(items) => {
                let mut current = input;
                for item in items {
                    if current.is_empty() {
                        break;
                    }
                    current = item.run_quietly(req, current, outputs.as_deref_mut())?;
                }
                Ok(current)
            }
            Expr::Or(items) => {
                let mut output = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    if i > 0 && !output.is_empty() {
                        break;
                    }
                    output = item.run_quietly(req, input.clone(), outputs.as_deref_mut())?;
                }
                Ok(output)
            }
        }
    }

    /// [`Expr::run`] on a list that is the `remaining` of step `source` (`None`: the servers
    /// received), the steps' reasons kept or not; returns the output and the step it is
    /// the `remaining` of.
    fn run_from(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        source: Option<usize>,
        steps: &mut Vec<Step>,
        keep_reasons: bool,
    ) -> Result<(Vec<ServerId>, Option<usize>), PluginError> {
        match self {
            Expr::Plugin(plugin) => {
                let mut reasons = if keep_reasons { Reasons::default() } else { Reasons::discarding() };
                req.begin_note_step(steps.len());
                let started = std::time::Instant::now();
                let output = plugin.run(req, &input, &mut reasons)?;
                if cfg!(debug_assertions) {
                    if let Some(broken) = broken_promise(plugin.declaration(), &input, &output) {
                        panic!("plugin contract broken: {broken}");
                    }
                }
                let declaration = plugin.declaration();
                let received = input.len();
                steps.push(Step {
                    plugin: declaration.name,
                    name: declaration.step,
                    remaining: copied_into(input, &output),
                    reasons,
                    received,
                    input: source,
                    elapsed: started.elapsed(),
                });
                Ok((output, Some(steps.len() - 1)))
            }
            Expr::Pipe(items) => {
                let mut current = (input, source);
                for item in items {
                    if current.0.is_empty() {
                        break;
                    }
                    current = item.run_from(req, current.0, current.1, steps, keep_reasons)?;
                }
                Ok(current)
            }
            Expr::Or(items) => {
                let mut output = (Vec::new(), source);
                for (i, item) in items.iter().enumerate() {
                    if i > 0 && !output.0.is_empty() {
                        break;
                    }
                    output = item.run_from(req, input.clone(), source, steps, keep_reasons)?;
                }
                Ok(output)
            }
        }
    }

    /// Every plugin the expression can run, in description order.
    pub fn plugins(&self) -> Vec<&Arc<dyn Plugin>> {
        match self {
            Expr::Plugin(p) => vec![p],
            Expr::Pipe(items) | Expr::Or(items) => items.iter().flat_map(Expr::plugins).collect(),
        }
    }

    /// Plugins that read a part of the working set that has no meaning unwritten before
    /// anything writes it: either a plugin later in the chain writes it (the order is
    /// wrong), or nothing does. One message per such read, naming the plugins.
    pub fn data_flow_warnings(&self) -> Vec<String> {
        let plugins = self.plugins();
        let mut warnings = Vec::new();
        for (i, plugin) in plugins.iter().enumerate() {
            let declaration = plugin.declaration();
            if declaration.reads_as_written {
                continue;
            }
            // Data with a meaningful value before it is written (the server's own ratios, a
            // score of 0, the VM's own cpu_cap) may be read early on purpose, as CNAPI's own
            // chain does.
            for &data in declaration.reads.iter().filter(|d| d.needs_writer()) {
                let writes = |p: &Arc<dyn Plugin>| p.declaration().writes.contains(&data);
                if plugins[..i].iter().any(|p| writes(p)) {
                    continue;
                }
                match plugins[i + 1..].iter().find(|p| writes(p)) {
                    Some(writer) => warnings.push(format!(
                        "{} reads {} before {} writes it: move {} earlier in the chain",
                        declaration.name,
                        describe(data),
                        writer.name(),
                        writer.name()
                    )),
                    None => warnings.push(format!(
                        "{} reads {}, which no plugin before it writes",
                        declaration.name,
                        describe(data)
                    )),
                }
            }
        }
        warnings
    }
}

/// `servers` copied into `buffer`, a list no longer needed (a plugin's input once it has
/// run: it holds the plugin's output, a part of it or it reordered, without growing). At
/// thousands of servers each step's list made anew was one more large malloc.
pub(super) fn copied_into(mut buffer: Vec<ServerId>, servers: &[ServerId]) -> Vec<ServerId> {
    buffer.clear();
    buffer.extend_from_slice(servers);
    buffer
}

fn describe(data: Data) -> &'static str {
    match data {
        Data::Unreserved => "the servers' unreserved resources",
        Data::Ratios => "the servers' overprovision ratios",
        Data::TicketVms => "the VMs of open tickets",
        Data::Locality => "the locality derived from affinity",
        Data::CpuCap => "the VM's CPU cap",
        Data::Scores => "the scores",
        Data::NicNames => "the NICs' interface names",
    }
}

/// What an expression is, for errors about its shape.
const SHAPE: &str = r#"an expression is an array: "pipe" or "or", then plugin names or expressions"#;

fn parse(desc: &Value, registry: &Registry) -> Result<Expr, String> {
    let items = desc.as_array().map(Vec::as_slice).unwrap_or(&[]);
    let js_string = |v: &Value| Js::from_json(v).to_js_string();
    let command = match items.first() {
        Some(Value::String(c)) if c == "pipe" || c == "or" => c.as_str(),
        Some(other) => return Err(format!("Invalid command: {}", js_string(other))),
        // JS reads `desc[0]` of a non-array (or of []) as undefined.
        None => return Err("Invalid command: undefined".into()),
    };
    let min_len = if command == "pipe" { 2 } else { 3 };
    if items.len() < min_len {
        return Err(format!("sexp too short for given command: {command}"));
    }
    let mut elements = Vec::with_capacity(items.len() - 1);
    for element in &items[1..] {
        elements.push(match element {
            Value::String(name) => match registry.lookup(name) {
                Some(p) => Expr::Plugin(p.clone()),
                None => return Err(format!("Unrecognized algorithm: {name}")),
            },
            Value::Array(_) => parse(element, registry)?,
            other => return Err(format!("Invalid element: {}", js_string(other))),
        });
    }
    Ok(if command == "pipe" { Expr::Pipe(elements) } else { Expr::Or(elements) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::testing::{registry, stub_request};
    use serde_json::json;

    fn err(desc: Value) -> String {
        Expr::parse(&desc, &registry()).expect_err("invalid description")
    }

    fn parse(desc: Value) -> Expr {
        Expr::parse(&desc, &registry()).expect("valid description")
    }

    #[test]
    fn start_up_errors_name_the_offending_element() {
        let shape = r#"(an expression is an array: "pipe" or "or", then plugin names or expressions)"#;
        assert_eq!(err(json!([])), format!("Bad expression given: Invalid command: undefined {shape}"));
        assert_eq!(err(json!(5)), format!("Bad expression given: Invalid command: undefined {shape}"));
        assert_eq!(
            err(json!([["pipe", "identity"]])),
            format!("Bad expression given: Invalid command: pipe,identity {shape}")
        );
        assert_eq!(err(json!([5])), format!("Bad expression given: Invalid command: 5 {shape}"));
        assert_eq!(err(json!(["or", "identity"])), "Bad expression given: sexp too short for given command: or");
        assert_eq!(err(json!(["pipe"])), "Bad expression given: sexp too short for given command: pipe");
        assert_eq!(err(json!(["pipe", null])), "Bad expression given: Invalid element: null");
        assert_eq!(err(json!(["pipe", {}])), "Bad expression given: Invalid element: [object Object]");
        assert_eq!(err(json!(["pipe", "bogus"])), "Bad expression given: Unrecognized algorithm: bogus");
        assert_eq!(
            err(json!(["pipe", "identity", ["or", "x"], "bogus"])),
            "Bad expression given: sexp too short for given command: or"
        );
    }

    #[test]
    fn nests_to_any_depth() {
        let e = parse(json!(["pipe", ["or", ["pipe", "identity"], "identity"], "drop-first"]));
        let names: Vec<_> = e.plugins().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["identity", "identity", "drop-first"]);
    }

    fn run(desc: Value, servers: usize) -> (Vec<ServerId>, Vec<&'static str>) {
        let servers_json: Vec<Value> = (0..servers).map(|i| json!({"uuid": format!("s{i}")})).collect();
        let mut steps = Vec::new();
        let output =
            stub_request(&servers_json, |req| parse(desc).run(req, (0..servers).collect(), &mut steps).expect("runs"));
        (output, steps.iter().map(|s| s.plugin).collect())
    }

    #[test]
    fn pipe_feeds_each_output_on_and_stops_when_empty() {
        assert_eq!(run(json!(["pipe", "drop-first", "drop-first"]), 3), (vec![2], vec!["drop-first", "drop-first"]));
        assert_eq!(run(json!(["pipe", "drop-all", "drop-first"]), 3), (vec![], vec!["drop-all"]));
    }

    #[test]
    fn or_takes_the_first_non_empty_output() {
        assert_eq!(
            run(json!(["or", "drop-all", "drop-first", "identity"]), 2),
            (vec![1], vec!["drop-all", "drop-first"])
        );
        assert_eq!(run(json!(["or", "drop-all", "drop-all"]), 2), (vec![], vec!["drop-all", "drop-all"]));
    }

    #[test]
    fn reading_what_nothing_wrote_first_is_reported() {
        let warnings = |desc| parse(desc).data_flow_warnings();
        assert_eq!(warnings(json!(["pipe", "writes-unreserved", "reads-unreserved"])), Vec::<String>::new());
        assert_eq!(
            warnings(json!(["pipe", "reads-unreserved", "writes-unreserved"])),
            ["reads-unreserved reads the servers' unreserved resources before writes-unreserved writes it: \
              move writes-unreserved earlier in the chain"]
        );
        assert_eq!(
            warnings(json!(["pipe", "identity", "reads-unreserved"])),
            ["reads-unreserved reads the servers' unreserved resources, which no plugin before it writes"]
        );
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "plugin contract broken")]
    fn a_scorer_that_drops_servers_is_caught_in_debug_builds() {
        use crate::engine::plugin::{Declaration, Kind};
        use crate::engine::testing::Stub;
        static BAD: Declaration = Declaration::new("bad-scorer", Kind::Scorer, "Bad");
        let mut registry = registry();
        registry.register(std::sync::Arc::new(Stub::new(&BAD, |s| s[1..].to_vec()))).expect("new name");
        let expr = Expr::parse(&json!(["pipe", "bad-scorer"]), &registry).expect("valid");
        let _ = stub_request(&[json!({}), json!({})], |req| expr.run(req, vec![0, 1], &mut Vec::new()));
    }
}
