//! The allocation description: a `pipe`/`or` tree of plugin names, validated at start-up
//! and run per request.
//!
//! * `["pipe", e1, e2, ...]` feeds each element's output to the next and stops as soon as
//!   the list is empty (before running the next element).
//! * `["or", e1, e2, ...]` gives every element the same input and returns the first
//!   non-empty output (or the last, empty, one).

use serde_json::Value;

use super::context::{Request, ServerId};
use super::reasons::Reasons;
use super::summary::Step;
use crate::js::Js;
use crate::plugins::{self, Plugin, PluginError};

/// A parsed allocation description.
#[derive(Clone)]
pub enum Expr {
    Plugin(&'static dyn Plugin),
    Pipe(Vec<Expr>),
    Or(Vec<Expr>),
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
    /// Parses and checks a description; errors read `Bad expression given: ...`.
    pub fn parse(desc: &Value) -> Result<Expr, String> {
        parse(desc).map_err(|e| format!("Bad expression given: {e}"))
    }

    /// Runs the expression on `input`, appending one step per plugin run.
    pub fn run(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        steps: &mut Vec<Step>,
    ) -> Result<Vec<ServerId>, PluginError> {
        self.run_from(req, input, None, steps).map(|(output, _)| output)
    }

    /// [`Expr::run`] on a list that is the `remaining` of step `source` (`None`: the servers
    /// received); returns the output and the step it is the `remaining` of.
    fn run_from(
        &self,
        req: &mut Request<'_>,
        input: Vec<ServerId>,
        source: Option<usize>,
        steps: &mut Vec<Step>,
    ) -> Result<(Vec<ServerId>, Option<usize>), PluginError> {
        match self {
            Expr::Plugin(plugin) => {
                let mut reasons = Reasons::default();
                let started = std::time::Instant::now();
                let output = plugin.run(req, &input, &mut reasons)?;
                steps.push(Step {
                    plugin: plugin.name(),
                    name: plugin.step(),
                    remaining: output.clone(),
                    reasons,
                    received: input.len(),
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
                    current = item.run_from(req, current.0, current.1, steps)?;
                }
                Ok(current)
            }
            Expr::Or(items) => {
                let mut output = (Vec::new(), source);
                for (i, item) in items.iter().enumerate() {
                    if i > 0 && !output.0.is_empty() {
                        break;
                    }
                    output = item.run_from(req, input.clone(), source, steps)?;
                }
                Ok(output)
            }
        }
    }

    /// Every plugin the expression can run, in description order.
    pub fn plugins(&self) -> Vec<&'static dyn Plugin> {
        match self {
            Expr::Plugin(p) => vec![*p],
            Expr::Pipe(items) | Expr::Or(items) => items.iter().flat_map(Expr::plugins).collect(),
        }
    }
}

fn parse(desc: &Value) -> Result<Expr, String> {
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
            Value::String(name) => match plugins::lookup(name) {
                Some(p) => Expr::Plugin(p),
                None => return Err(format!("Unrecognized algorithm: {name}")),
            },
            Value::Array(_) => parse(element)?,
            other => return Err(format!("Invalid element: {}", js_string(other))),
        });
    }
    Ok(if command == "pipe" { Expr::Pipe(elements) } else { Expr::Or(elements) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(desc: Value) -> String {
        Expr::parse(&desc).expect_err("invalid description")
    }

    #[test]
    fn start_up_errors_name_the_offending_element() {
        assert_eq!(err(json!([])), "Bad expression given: Invalid command: undefined");
        assert_eq!(err(json!([["pipe", "identity"]])), "Bad expression given: Invalid command: pipe,identity");
        assert_eq!(err(json!([5])), "Bad expression given: Invalid command: 5");
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
        let e = Expr::parse(&json!(["pipe", ["or", ["pipe", "identity"], "identity"], "hard-filter-setup"]))
            .expect("valid");
        let names: Vec<_> = e.plugins().iter().map(|p| p.name()).collect();
        assert_eq!(names, ["identity", "identity", "hard-filter-setup"]);
    }
}
