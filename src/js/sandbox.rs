//! The embedded JavaScript engine (QuickJS, through `rquickjs`) that runs operators' code:
//! custom allocation plugins (`plugins_dir`).
//!
//! Sandboxed: a context holds the ECMAScript globals only (no `require`, no file, network,
//! process or timer access beyond the shims the plugin contract needs), and every call runs
//! under a [`Budget`]: a deadline enforced through QuickJS's interrupt handler (checked every
//! few thousand operations, so an endless loop stops) and a memory limit on the runtime.
//!
//! Runtimes are not `Send`: each thread that runs operator code keeps its own [`Sandbox`]
//! (see `plugins::custom_js`), built once per loaded configuration and rebuilt after a call
//! that failed, so that a half-run plugin leaves nothing behind.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rquickjs::allocator::{Allocator, RustAllocator};
use rquickjs::context::EvalOptions;
use rquickjs::{CatchResultExt, CaughtError, Context, Ctx, FromJs, Runtime};

/// What one call may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub time: Duration,
    /// Bytes the runtime may hold (code, module state, the call's data).
    pub memory_bytes: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget { time: Duration::from_millis(1000), memory_bytes: 512 * 1024 * 1024 }
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The code threw (message and, when known, where).
    Threw(String),
    /// The deadline passed.
    Timeout(Duration),
    /// The memory limit was reached.
    OutOfMemory(usize),
    /// The engine itself failed (not the operator's code).
    Engine(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Threw(m) => write!(f, "threw {m}"),
            Failure::Timeout(t) => write!(f, "ran out of its time budget ({} ms)", t.as_millis()),
            Failure::OutOfMemory(b) if b % (1024 * 1024) == 0 => {
                write!(f, "ran out of its memory budget ({} MiB)", b / (1024 * 1024))
            }
            Failure::OutOfMemory(b) => write!(f, "ran out of its memory budget ({b} bytes)"),
            Failure::Engine(m) => write!(f, "could not be run: {m}"),
        }
    }
}

/// One QuickJS runtime and context, with the budget machinery installed.
pub struct Sandbox {
    // The context must go before the runtime.
    context: Context,
    runtime: Runtime,
    deadline: Rc<Cell<Option<Instant>>>,
    /// Set by the allocator when it refused memory over the budget.
    out_of_memory: Arc<AtomicBool>,
    budget: Budget,
}

/// The Rust allocator, refusing to hold more than the budget. QuickJS's own limit turns an
/// exhausted heap into `throw null` at times (it cannot allocate the error); counting here
/// tells a budget overrun from a plugin that throws `null`.
struct Metered {
    used: usize,
    /// No limit while the runtime and its context are made: QuickJS does not survive a
    /// refusal there (a tiny budget crashed the process). The budget applies from then on,
    /// counting what they hold.
    limit: Arc<AtomicUsize>,
    hit: Arc<AtomicBool>,
}

impl Metered {
    fn refuse(&self, more: usize) -> bool {
        let over = self.used.saturating_add(more) > self.limit.load(Ordering::Relaxed);
        if over {
            self.hit.store(true, Ordering::Relaxed);
        }
        over
    }
}

// SAFETY: every call is passed to `RustAllocator` unchanged (or refused with null before it),
// and `usable_size` is `RustAllocator`'s.
unsafe impl Allocator for Metered {
    fn alloc(&mut self, size: usize) -> *mut u8 {
        if self.refuse(size) {
            return std::ptr::null_mut();
        }
        let p = RustAllocator.alloc(size);
        if !p.is_null() {
            // SAFETY: just allocated by RustAllocator.
            self.used += unsafe { RustAllocator::usable_size(p) };
        }
        p
    }

    fn calloc(&mut self, count: usize, size: usize) -> *mut u8 {
        let Some(total) = count.checked_mul(size) else { return std::ptr::null_mut() };
        if self.refuse(total) {
            return std::ptr::null_mut();
        }
        let p = RustAllocator.calloc(count, size);
        if !p.is_null() {
            // SAFETY: just allocated by RustAllocator.
            self.used += unsafe { RustAllocator::usable_size(p) };
        }
        p
    }

    unsafe fn dealloc(&mut self, ptr: *mut u8) {
        self.used = self.used.saturating_sub(RustAllocator::usable_size(ptr));
        RustAllocator.dealloc(ptr)
    }

    unsafe fn realloc(&mut self, ptr: *mut u8, new_size: usize) -> *mut u8 {
        if ptr.is_null() {
            return self.alloc(new_size);
        }
        if new_size == 0 {
            self.dealloc(ptr);
            return std::ptr::null_mut();
        }
        let old = RustAllocator::usable_size(ptr);
        if new_size > old && self.refuse(new_size - old) {
            return std::ptr::null_mut();
        }
        let p = RustAllocator.realloc(ptr, new_size);
        if !p.is_null() {
            self.used = self.used.saturating_sub(old) + RustAllocator::usable_size(p);
        }
        p
    }

    unsafe fn usable_size(ptr: *mut u8) -> usize {
        RustAllocator::usable_size(ptr)
    }
}

impl Sandbox {
    pub fn new(budget: Budget) -> Result<Sandbox, Failure> {
        let out_of_memory = Arc::new(AtomicBool::new(false));
        let limit = Arc::new(AtomicUsize::new(usize::MAX));
        let metered = Metered { used: 0, limit: limit.clone(), hit: out_of_memory.clone() };
        let runtime = Runtime::new_with_alloc(metered).map_err(|e| Failure::Engine(e.to_string()))?;
        // Deep recursion fails as a RangeError well before the thread's own stack does.
        runtime.set_max_stack_size(512 * 1024);
        let deadline: Rc<Cell<Option<Instant>>> = Rc::new(Cell::new(None));
        let seen = deadline.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || seen.get().is_some_and(|d| Instant::now() >= d))));
        let context = Context::full(&runtime).map_err(|e| Failure::Engine(e.to_string()))?;
        limit.store(budget.memory_bytes, Ordering::Relaxed);
        Ok(Sandbox { context, runtime, deadline, out_of_memory, budget })
    }

    pub fn budget(&self) -> Budget {
        self.budget
    }

    /// Runs `f` in the context under the budget (the deadline starts now); a JavaScript
    /// exception becomes a [`Failure`].
    pub fn call<R>(&self, f: impl for<'js> FnOnce(&Ctx<'js>) -> rquickjs::Result<R>) -> Result<R, Failure> {
        let started = Instant::now();
        self.deadline.set(Some(started + self.budget.time));
        self.out_of_memory.store(false, Ordering::Relaxed);
        let result = self.context.with(|ctx| {
            // The runtime measures its stack from where it was last entered: this thread's
            // stack may sit elsewhere than when the runtime was made.
            // SAFETY: the pointer is this context's live runtime, used on its own thread.
            unsafe { rquickjs::qjs::JS_UpdateStackTop(self.context.get_runtime_ptr()) };
            f(&ctx).catch(&ctx).map_err(|e| self.failure(e, started))
        });
        self.deadline.set(None);
        result
    }

    /// Runs queued promise jobs until none is left (or one throws).
    pub fn run_jobs(&self) -> Result<(), Failure> {
        let started = Instant::now();
        loop {
            match self.runtime.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(job) => {
                    return job.0.with(|ctx| {
                        let caught = CaughtError::from_error(&ctx, rquickjs::Error::Exception);
                        Err(self.failure(caught, started))
                    })
                }
            }
        }
    }

    /// Starts the deadline for work done through [`Sandbox::run_jobs`] and plain context
    /// use between calls (the driver of a callback-style plugin).
    pub fn start_clock(&self) {
        self.out_of_memory.store(false, Ordering::Relaxed);
        self.deadline.set(Some(Instant::now() + self.budget.time));
    }

    pub fn stop_clock(&self) {
        self.deadline.set(None);
    }

    fn failure(&self, error: CaughtError<'_>, started: Instant) -> Failure {
        let text = match &error {
            CaughtError::Exception(e) => {
                let message = e.message().unwrap_or_default();
                let name: Option<String> = e.get("name").ok();
                let head = match name {
                    Some(n) if !n.is_empty() => format!("{n}: {message}"),
                    _ => message,
                };
                match e.stack().map(|s| first_frame(&s)) {
                    Some(Some(at)) => format!("{head} ({at})"),
                    _ => head,
                }
            }
            CaughtError::Value(v) => js_string(v),
            CaughtError::Error(e) => return Failure::Engine(e.to_string()),
        };
        if self.out_of_memory.load(Ordering::Relaxed) {
            return Failure::OutOfMemory(self.budget.memory_bytes);
        }
        let deadline_passed = self.deadline.get().is_some_and(|d| Instant::now() >= d);
        if text.contains("interrupted") && (deadline_passed || started.elapsed() >= self.budget.time) {
            return Failure::Timeout(self.budget.time);
        }
        Failure::Threw(text)
    }

    /// Evaluates a script (sloppy mode, as Node runs CommonJS files) in the global scope.
    pub fn eval_script<'js>(ctx: &Ctx<'js>, file_name: &str, source: &str) -> rquickjs::Result<rquickjs::Value<'js>> {
        let mut options = EvalOptions::default();
        options.global = true;
        options.strict = false;
        options.filename = Some(file_name.to_string());
        ctx.eval_with_options(source, options)
    }
}

/// `file:line` of the innermost frame of a QuickJS stack text (`    at f (file.js:12:5)`).
fn first_frame(stack: &str) -> Option<String> {
    let line = stack.lines().map(str::trim).find(|l| l.starts_with("at "))?;
    let inner = line.rsplit_once('(').map_or(&line[3..], |(_, rest)| rest.trim_end_matches(')'));
    Some(inner.to_string())
}

/// `String(v)` of a thrown non-Error value.
fn js_string(v: &rquickjs::Value<'_>) -> String {
    let ctx = v.ctx().clone();
    let s: rquickjs::Result<rquickjs::String> =
        rquickjs::Coerced::<rquickjs::String>::from_js(&ctx, v.clone()).map(|c| c.0);
    s.and_then(|s| s.to_string()).unwrap_or_else(|_| "a value that cannot be shown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(ms: u64) -> Budget {
        Budget { time: Duration::from_millis(ms), memory_bytes: 16 * 1024 * 1024 }
    }

    #[test]
    fn an_endless_loop_stops_at_the_deadline() {
        let sandbox = Sandbox::new(small(50)).expect("sandbox");
        let started = Instant::now();
        let r = sandbox.call(|ctx| Sandbox::eval_script(ctx, "loop.js", "for (;;) {}").map(|_| ()));
        assert_eq!(r, Err(Failure::Timeout(Duration::from_millis(50))));
        assert!(started.elapsed() < Duration::from_secs(5));
        // The sandbox is usable afterwards.
        let n = sandbox.call(|ctx| Sandbox::eval_script(ctx, "ok.js", "1 + 1").and_then(|v| i32::from_js(ctx, v)));
        assert_eq!(n, Ok(2));
    }

    #[test]
    fn memory_is_bounded() {
        let sandbox = Sandbox::new(small(5000)).expect("sandbox");
        let r = sandbox.call(|ctx| {
            Sandbox::eval_script(ctx, "hog.js", "var a = []; for (;;) a.push(new Array(1000).fill('x'));").map(|_| ())
        });
        assert_eq!(r, Err(Failure::OutOfMemory(16 * 1024 * 1024)));
    }

    /// A budget smaller than the engine itself fails each call as out of memory; it does
    /// not take the process down (QuickJS crashed when refused while it was being made).
    #[test]
    fn a_budget_below_the_engine_fails_calls_not_the_process() {
        for bytes in [1, 1000, 60_000] {
            let sandbox = Sandbox::new(Budget { time: Duration::from_secs(5), memory_bytes: bytes }).expect("made");
            let r = sandbox.call(|ctx| Sandbox::eval_script(ctx, "tiny.js", "[1, 2, 3].join()").map(|_| ()));
            assert_eq!(r, Err(Failure::OutOfMemory(bytes)), "{bytes}");
            assert_eq!(
                Failure::OutOfMemory(bytes).to_string(),
                format!("ran out of its memory budget ({bytes} bytes)")
            );
        }
        // The least budget the configuration takes leaves room for ordinary code.
        let sandbox = Sandbox::new(Budget { time: Duration::from_secs(5), memory_bytes: 1 << 20 }).expect("made");
        let r = sandbox.call(|ctx| {
            let v = Sandbox::eval_script(
                ctx,
                "ok.js",
                "var o = {}; for (var i = 0; i < 1000; i++) o['k' + i] = i; Object.keys(o).length",
            )?;
            i32::from_js(ctx, v)
        });
        assert_eq!(r, Ok(1000));
    }

    #[test]
    fn no_io_globals() {
        let sandbox = Sandbox::new(small(1000)).expect("sandbox");
        let kinds = sandbox.call(|ctx| {
            let v = Sandbox::eval_script(
                ctx,
                "probe.js",
                "[typeof require, typeof process, typeof std, typeof os, typeof fetch, typeof XMLHttpRequest].join()",
            )?;
            String::from_js(ctx, v)
        });
        assert_eq!(kinds.as_deref(), Ok("undefined,undefined,undefined,undefined,undefined,undefined"));
    }

    #[test]
    fn a_throw_is_reported_with_where() {
        let sandbox = Sandbox::new(small(1000)).expect("sandbox");
        let r = sandbox.call(|ctx| Sandbox::eval_script(ctx, "bad.js", "\n\nnull.x").map(|_| ()));
        let Err(Failure::Threw(text)) = r else { panic!("{r:?}") };
        assert!(text.starts_with("TypeError: "), "{text}");
        assert!(text.contains("bad.js:3"), "{text}");
        let r = sandbox.call(|ctx| Sandbox::eval_script(ctx, "bad.js", "throw 'plain'").map(|_| ()));
        assert_eq!(r, Err(Failure::Threw("plain".into())));
    }
}
