//! `make bench` (`cargo bench --bench allocate`): how long dapi takes at datacenter scale.
//!
//! Inputs are the shared benchmark bodies (`<shared>/bench/bench-{50,500}.json`, and the
//! 5000- and 10000-server bodies generated under `target/bench/` by `genbench.py`, which are
//! too big to commit) with the production chain of `<shared>/bench/bench-config.json`.
//! `<shared>` is `$BENCH_SHARED`, else `../shared` beside the repository (or beside the main
//! checkout when this is a git worktree); without it the benchmark says so and skips.
//!
//! Per size it prints: body bytes; the median time to parse and validate the body into the
//! typed model (taken between the end-to-end runs, so that the POST/parse ratio compares
//! runs made in the same conditions on a shared host); the median engine time after parsing (`Engine::allocate`); the median time
//! to serialise the answer; the median end-to-end `POST /allocate` over loopback against a
//! child `dapi serve` (one keep-alive connection, timed from the first byte sent to the last
//! byte of the answer read); that child's peak RSS (`VmHWM`) after serving one request of
//! the size, and its idle RSS before; the answer's bytes. Then the whole-process time of
//! `dapi allocate` on the 500-server body.
//!
//! Options (environment): `BENCH_SIZES=50,500` (default `50,500,5000,10000`),
//! `BENCH_SECONDS=2` (time budget per measurement; more runs when cheap),
//! `BENCH_STEPS=removed` (ask for the compact step format end to end).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dapi::config::ServiceConfig;
use dapi::engine::StepsFormat;
use dapi::validate::validate_allocate;
use dapi::wire::parse_allocate_body;

const DAPI: &str = env!("CARGO_BIN_EXE_dapi");

fn main() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Some(shared) = find_shared(&repo) else {
        println!("bench: skipped: no shared benchmark inputs (set BENCH_SHARED, or put them at ../shared/bench)");
        return;
    };
    let bench_dir = shared.join("bench");
    let config = bench_dir.join("bench-config.json");
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "50,500,5000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let budget =
        Duration::from_secs_f64(std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(2.0));
    let steps_format = match std::env::var("BENCH_STEPS").as_deref() {
        Ok("removed") => StepsFormat::Removed,
        _ => StepsFormat::Full,
    };
    let generated = repo.join("target/bench");
    let profile = std::env::var("BENCH_PROFILE").ok();

    let engine = match ServiceConfig::load(Some(&config), Vec::new()).and_then(|c| c.engine()) {
        Ok(e) => e,
        Err(e) => {
            println!("bench: skipped: {}: {e}", config.display());
            return;
        }
    };
    println!("bench: inputs from {}, generated ones in {}", bench_dir.display(), generated.display());
    println!("bench: {} ({} cores), dapi at {DAPI}", cpu_model(), nproc());

    let mut rows = Vec::new();
    for &n in &sizes {
        let Some(path) = input(n, &bench_dir, &generated) else {
            println!("bench: skipping {n} servers: no input (genbench.py failed or is missing)");
            continue;
        };
        let body = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                println!("bench: skipping {n} servers: cannot read {}: {e}", path.display());
                continue;
            }
        };
        if let Some(phase) = &profile {
            profile_loop(phase, &body, &engine, budget, steps_format);
            continue;
        }
        eprintln!("bench: {n} servers ({} bytes)...", body.len());
        let row = measure(n, &body, &engine, &config, budget, steps_format);
        eprintln!("{}", row.line());
        rows.push(row);
    }

    if profile.is_some() {
        return;
    }
    println!();
    println!("| servers | body bytes | parse ms | engine ms | answer ms | POST ms | POST/parse | peak RSS MiB (idle) | RSS/body | answer bytes |");
    println!("|--------:|-----------:|---------:|----------:|----------:|--------:|-----------:|--------------------:|---------:|-------------:|");
    for row in &rows {
        println!("{}", row.line());
    }
    println!();
    println!("parse = parse_allocate_body + validate_allocate (taken between the POSTs); engine = Engine::allocate after parsing;");
    println!("answer = serialising the answer (not in engine); POST = end to end over loopback; medians.");

    if let Some(path) = input(500, &bench_dir, &generated) {
        let runs = whole_process(&path, &config, budget.max(Duration::from_secs(3)));
        if let Some(m) = median(runs.clone()) {
            println!();
            println!(
                "dapi allocate, whole process, 500 servers: median {:.1} ms over {} runs ({:.0}x faster than the original's 550 ms)",
                m * 1e3,
                runs.len(),
                0.55 / m
            );
        }
    }
}

/// `$BENCH_SHARED`, `../shared` beside the repo, or beside the main checkout of a worktree.
fn find_shared(repo: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("BENCH_SHARED").map(PathBuf::from).into_iter().collect();
    candidates.push(repo.join("../shared"));
    // In a worktree `.git` is a file: `gitdir: <main>/.git/worktrees/<name>`.
    if let Ok(text) = std::fs::read_to_string(repo.join(".git")) {
        if let Some(gitdir) = text.strip_prefix("gitdir:").map(str::trim) {
            if let Some(main) = Path::new(gitdir).ancestors().find(|p| p.ends_with(".git")).and_then(Path::parent) {
                candidates.push(main.join("../shared"));
            }
        }
    }
    candidates.into_iter().find(|c| c.join("bench/bench-config.json").is_file())
}

/// The body for `n` servers: shared for the small sizes, generated (once) for the others.
fn input(n: usize, bench_dir: &Path, generated: &Path) -> Option<PathBuf> {
    let name = format!("bench-{n}.json");
    if bench_dir.join(&name).is_file() {
        return Some(bench_dir.join(name));
    }
    let path = generated.join(&name);
    if !path.is_file() {
        eprintln!("bench: generating {} with genbench.py...", path.display());
        let status = Command::new("python3")
            .arg(bench_dir.join("genbench.py"))
            .args(["--out"])
            .arg(generated)
            .args(["--sizes", &n.to_string(), "--force"])
            .stdout(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            return None;
        }
    }
    path.is_file().then_some(path)
}

struct Row {
    servers: usize,
    body_bytes: usize,
    parse: f64,
    engine: f64,
    answer: f64,
    post: Option<f64>,
    peak_rss: Option<(u64, u64)>,
    answer_bytes: usize,
}

impl Row {
    fn line(&self) -> String {
        let ms = |s: f64| format!("{:.3}", s * 1e3);
        let post = self.post.map_or("n/a".into(), ms);
        let ratio = self.post.map_or("n/a".into(), |p| format!("{:.2}", p / self.parse));
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let (rss, rss_ratio) = match self.peak_rss {
            Some((peak, idle)) => {
                (format!("{:.1} ({:.1})", mib(peak), mib(idle)), format!("{:.2}", peak as f64 / self.body_bytes as f64))
            }
            None => ("n/a".into(), "n/a".into()),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.servers,
            self.body_bytes,
            ms(self.parse),
            ms(self.engine),
            ms(self.answer),
            post,
            ratio,
            rss,
            rss_ratio,
            self.answer_bytes
        )
    }
}

/// Runs `f` until the budget is spent (at least 5 runs, at most 2000) after one warm-up run;
/// returns the seconds each run took, as `f` reports them.
fn repeat(budget: Duration, mut f: impl FnMut() -> f64) -> Vec<f64> {
    f();
    let started = Instant::now();
    let mut runs = Vec::new();
    while runs.len() < 5 || (started.elapsed() < budget && runs.len() < 2000) {
        runs.push(f());
    }
    runs
}

fn median(mut runs: Vec<f64>) -> Option<f64> {
    if runs.is_empty() {
        return None;
    }
    runs.sort_by(f64::total_cmp);
    Some(runs[runs.len() / 2])
}

fn measure(
    n: usize,
    body: &[u8],
    engine: &dapi::engine::Engine,
    config: &Path,
    budget: Duration,
    steps_format: StepsFormat,
) -> Row {
    let mut parse_once = || {
        let started = Instant::now();
        let parsed = parse_allocate_body(body).and_then(|mut r| {
            validate_allocate(&mut r).map_err(|e| dapi::model::BodyError::Invalid(vec![e]))?;
            Ok(r)
        });
        let elapsed = started.elapsed().as_secs_f64();
        assert!(parsed.is_ok(), "the benchmark body is valid");
        drop(parsed);
        elapsed
    };
    let parse = repeat(budget, &mut parse_once);
    let mut request = parse_allocate_body(body).unwrap_or_else(|_| panic!("bench-{n}.json parses"));
    validate_allocate(&mut request).unwrap_or_else(|e| panic!("bench-{n}.json is valid: {e:?}"));
    let engine_runs = repeat(budget, || {
        let started = Instant::now();
        let allocation = engine.allocate(&request).expect("allocation runs");
        let elapsed = started.elapsed().as_secs_f64();
        drop(allocation);
        elapsed
    });
    let allocation = engine.allocate(&request).expect("allocation runs");
    let mut answer_bytes = 0;
    let answer_runs = repeat(budget, || {
        let started = Instant::now();
        let bytes = allocation.answer_json(&request, steps_format).expect("answer serialises");
        let elapsed = started.elapsed().as_secs_f64();
        answer_bytes = bytes.len();
        elapsed
    });
    let (post, paired_parse, peak_rss) = match served(n, body, config, budget, steps_format, &mut parse_once) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench: end-to-end for {n} servers failed: {e}");
            (None, None, None)
        }
    };
    Row {
        servers: n,
        body_bytes: body.len(),
        parse: paired_parse.or(median(parse)).unwrap_or(f64::NAN),
        engine: median(engine_runs).unwrap_or(f64::NAN),
        answer: median(answer_runs).unwrap_or(f64::NAN),
        post,
        peak_rss,
        answer_bytes,
    }
}

/// Runs one phase (`parse`, `engine` or `answer`) over and over for the budget, for
/// profiling it alone: `BENCH_PROFILE=engine BENCH_SIZES=5000 perf record -g target/release/deps/allocate-*`.
/// `request` runs all three on a fresh copy of the body and drops everything, as the service
/// does. `steps` prints each plugin's median time instead.
fn profile_loop(phase: &str, body: &[u8], engine: &dapi::engine::Engine, budget: Duration, format: StepsFormat) {
    let mut request = parse_allocate_body(body).unwrap_or_else(|_| panic!("the body parses"));
    validate_allocate(&mut request).unwrap_or_else(|e| panic!("the body is valid: {e:?}"));
    let allocation = engine.allocate(&request).expect("allocation runs");
    if phase == "steps" {
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); allocation.steps.len()];
        let started = Instant::now();
        while started.elapsed() < budget {
            let a = engine.allocate(&request).expect("allocation runs");
            for (t, step) in times.iter_mut().zip(&a.steps) {
                t.push(step.elapsed.as_secs_f64());
            }
        }
        let mut total = 0.0;
        for (step, t) in allocation.steps.iter().zip(times) {
            let m = median(t).unwrap_or(f64::NAN);
            total += m;
            println!("{:>10.1} us  {:<34} {}", m * 1e6, step.plugin, step.remaining.len());
        }
        println!("{:>10.1} us  total of the medians", total * 1e6);
        return;
    }
    let started = Instant::now();
    let mut runs = 0;
    while started.elapsed() < budget {
        match phase {
            "parse" => {
                let mut r = parse_allocate_body(body).unwrap_or_else(|_| panic!("the body parses"));
                validate_allocate(&mut r).unwrap_or_else(|e| panic!("the body is valid: {e:?}"));
            }
            "engine" => drop(engine.allocate(&request).expect("allocation runs")),
            // What the service does per request, drops included, on a fresh copy of the body.
            "request" => {
                let copy = body.to_vec();
                let mut r = parse_allocate_body(&copy).unwrap_or_else(|_| panic!("the body parses"));
                validate_allocate(&mut r).unwrap_or_else(|e| panic!("the body is valid: {e:?}"));
                let a = engine.allocate(&r).expect("allocation runs");
                drop(a.answer_json(&r, format).expect("answer serialises"));
            }
            _ => drop(allocation.answer_json(&request, format).expect("answer serialises")),
        }
        runs += 1;
    }
    eprintln!("bench: {phase}: {runs} runs in {:.1} s", started.elapsed().as_secs_f64());
}

/// A child `dapi serve` on a free loopback port, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(config: &Path) -> std::io::Result<Server> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let child = dapi_command()
            .args(["serve", "--config"])
            .arg(config)
            .env("DAPI_LISTEN", addr.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let server = Server { child, addr };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut c) = Client::connect(addr) {
                if matches!(c.request("GET", "/ping", b""), Ok((200, _))) {
                    return Ok(server);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(std::io::Error::other("dapi serve did not answer /ping within 10 s"))
    }

    /// Peak resident set (`VmHWM`), bytes.
    fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    }
}

/// A minimal HTTP/1.1 keep-alive client (answers must carry Content-Length, as dapi's do).
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    addr: SocketAddr,
}

impl Client {
    fn connect(addr: SocketAddr) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Client { reader: BufReader::with_capacity(1 << 16, stream.try_clone()?), writer: stream, addr })
    }

    fn request(&mut self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.addr,
            body.len()
        );
        self.writer.write_all(head.as_bytes())?;
        self.writer.write_all(body)?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let (mut length, mut chunked) = (None, false);
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Err(std::io::Error::other("connection closed mid-answer"));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse::<usize>().ok();
                }
                chunked |= k.eq_ignore_ascii_case("transfer-encoding") && v.trim() == "chunked";
            }
        }
        if chunked {
            return Ok((status, self.read_chunks()?));
        }
        let length = length.ok_or_else(|| std::io::Error::other("answer without Content-Length"))?;
        let mut answer = vec![0; length];
        self.reader.read_exact(&mut answer)?;
        Ok((status, answer))
    }

    /// A chunked answer (big ones are sent while they are written).
    fn read_chunks(&mut self) -> std::io::Result<Vec<u8>> {
        let mut answer = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(std::io::Error::other)?;
            let start = answer.len();
            answer.resize(start + size, 0);
            self.reader.read_exact(&mut answer[start..])?;
            line.clear();
            self.reader.read_line(&mut line)?;
            if size == 0 {
                return Ok(answer);
            }
        }
    }
}

/// Median POST, median parse taken between the POSTs, peak and idle RSS.
type Served = (Option<f64>, Option<f64>, Option<(u64, u64)>);

/// Peak RSS after the first request of this size on a fresh server, then the median POST.
fn served(
    n: usize,
    body: &[u8],
    config: &Path,
    budget: Duration,
    format: StepsFormat,
    parse_once: &mut dyn FnMut() -> f64,
) -> std::io::Result<Served> {
    let server = Server::start(config)?;
    let idle = server.peak_rss();
    let mut client = Client::connect(server.addr)?;
    let path = match format {
        StepsFormat::Full => "/allocate",
        StepsFormat::Removed => "/allocate?steps=removed",
    };
    let (status, _) = client.request("POST", path, body)?;
    if status != 200 {
        return Err(std::io::Error::other(format!("POST /allocate with {n} servers answered {status}")));
    }
    let peak = server.peak_rss().zip(idle);
    // Each POST is paired with a parse of the same body, so that both see the host in the
    // same mood (a shared host's speed drifts by a third between minutes).
    let mut parses = Vec::new();
    let runs = repeat(budget, || {
        let started = Instant::now();
        let ok = matches!(client.request("POST", path, body), Ok((200, _)));
        let elapsed = started.elapsed().as_secs_f64();
        assert!(ok, "POST /allocate answered 200");
        parses.push(parse_once());
        elapsed
    });
    Ok((median(runs), median(parses), peak))
}

/// Wall time of `dapi allocate --config CONFIG BODY`, start to exit, per run.
fn whole_process(body: &Path, config: &Path, budget: Duration) -> Vec<f64> {
    repeat(budget, || {
        let started = Instant::now();
        let status = dapi_command().args(["allocate", "--config"]).arg(config).arg(body).stdout(Stdio::null()).status();
        let elapsed = started.elapsed().as_secs_f64();
        assert!(matches!(status, Ok(s) if s.success()), "dapi allocate succeeds");
        elapsed
    })
}

/// `dapi`, with none of the caller's `DAPI_*` settings (they would change its config).
fn dapi_command() -> Command {
    let mut command = Command::new(DAPI);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("DAPI_") {
            command.env_remove(key);
        }
    }
    command
}

fn nproc() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
