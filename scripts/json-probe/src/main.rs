//! Issue 15's "measure a SIMD parser first": how fast JSON parsers read a body held in
//! memory (UTF-8 check, one `memchr` pass, serde_json, sonic-rs, simd-json), to compare
//! with dapi's own reader (`make bench`, its parse column) in the same phase of the host.
//! Not part of dapi's build; see BENCHMARKS.md.
//!
//!   cargo run --release --manifest-path scripts/json-probe/Cargo.toml -- BODY:RUNS... [--rss]
//!
//! `--rss` adds the peak RSS of one parse of the first body per parser, each in a fresh
//! process (`json-probe rss OP BODY`).
use std::hint::black_box;
use std::time::{Duration, Instant};

fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    let min = v[0].as_secs_f64();
    let n = v.len();
    let med =
        if n % 2 == 1 { v[n / 2].as_secs_f64() } else { (v[n / 2 - 1].as_secs_f64() + v[n / 2].as_secs_f64()) / 2.0 };
    (min, med)
}

fn report(name: &str, len: usize, times: Vec<Duration>, extra: &str) {
    let (min, med) = stats(times);
    let gbs = len as f64 / med / 1e9;
    println!("  {:<44} min {:>10.4} ms  median {:>10.4} ms  {:>6.3} GB/s  {}", name, min * 1e3, med * 1e3, gbs, extra);
}

/// Time `n` reps of `f` (timer around f only).
fn bench<R>(n: usize, mut f: impl FnMut() -> R) -> (Vec<Duration>, R) {
    let mut t = Vec::with_capacity(n);
    let mut last = None;
    for _ in 0..n {
        let s = Instant::now();
        let r = black_box(f());
        t.push(s.elapsed());
        last = Some(r); // previous result dropped here, outside the timer
    }
    (t, last.unwrap())
}

fn lazy_walk_get(bytes: &[u8]) -> (usize, usize) {
    let servers = sonic_rs::get(bytes, &["servers"]).expect("servers");
    let mut nserv = 0;
    let mut nvm = 0;
    for s in sonic_rs::to_array_iter(servers.as_raw_str()) {
        let s = s.expect("server");
        nserv += 1;
        let vms = sonic_rs::get(s.as_raw_str(), &["vms"]).expect("vms");
        for e in sonic_rs::to_object_iter(vms.as_raw_str()) {
            let _ = black_box(e.expect("vm entry"));
            nvm += 1;
        }
    }
    (nserv, nvm)
}

/// Variant: walk each server's fields once with to_object_iter instead of a second get().
fn lazy_walk_iter(bytes: &[u8]) -> (usize, usize) {
    let servers = sonic_rs::get(bytes, &["servers"]).expect("servers");
    let mut nserv = 0;
    let mut nvm = 0;
    for s in sonic_rs::to_array_iter(servers.as_raw_str()) {
        let s = s.expect("server");
        nserv += 1;
        for kv in sonic_rs::to_object_iter(s.as_raw_str()) {
            let (k, v) = kv.expect("server field");
            if k == "vms" {
                for e in sonic_rs::to_object_iter(v.as_raw_str()) {
                    let _ = black_box(e.expect("vm entry"));
                    nvm += 1;
                }
            }
        }
    }
    (nserv, nvm)
}

/// Variant: same walk as 7a with sonic-rs's *_unchecked APIs (non-validating skip; UB on
/// invalid JSON, so only valid when the input was validated elsewhere).
fn lazy_walk_unchecked(bytes: &[u8]) -> (usize, usize) {
    let mut nserv = 0;
    let mut nvm = 0;
    unsafe {
        let servers = sonic_rs::get_unchecked(bytes, &["servers"]).expect("servers");
        for s in sonic_rs::to_array_iter_unchecked(servers.as_raw_str()) {
            let s = s.expect("server");
            nserv += 1;
            let vms = sonic_rs::get_unchecked(s.as_raw_str(), &["vms"]).expect("vms");
            for e in sonic_rs::to_object_iter_unchecked(vms.as_raw_str()) {
                let _ = black_box(e.expect("vm entry"));
                nvm += 1;
            }
        }
    }
    (nserv, nvm)
}

fn run_file(path: &str, n: usize) {
    let bytes: Vec<u8> = std::fs::read(path).expect("read");
    let len = bytes.len();
    let b = bytes.as_slice();
    println!("== {} ({} bytes, N={})", path, len, n);

    let (t, _) = bench(n, || std::str::from_utf8(black_box(b)).is_ok());
    report("1a std::str::from_utf8", len, t, "");
    let (t, _) = bench(n, || simdutf8::basic::from_utf8(black_box(b)).is_ok());
    report("1b simdutf8::basic::from_utf8", len, t, "");

    let (t, c) = bench(n, || memchr::memchr_iter(b'"', black_box(b)).count());
    report("2  memchr_iter count '\"'", len, t, &format!("quotes={c}"));

    let (t, _) = bench(n, || serde_json::from_slice::<serde::de::IgnoredAny>(black_box(b)).unwrap());
    report("3  serde_json -> IgnoredAny", len, t, "");

    let (t, _) = bench(n, || serde_json::from_slice::<serde_json::Value>(black_box(b)).unwrap());
    report("4  serde_json -> serde_json::Value", len, t, "");

    let (t, _) = bench(n, || sonic_rs::from_slice::<sonic_rs::Value>(black_box(b)).unwrap());
    report("5  sonic_rs -> sonic_rs::Value", len, t, "");

    let (t, _) = bench(n, || sonic_rs::from_slice::<serde::de::IgnoredAny>(black_box(b)).unwrap());
    report("6  sonic_rs -> IgnoredAny", len, t, "");

    let (t, (ns, nv)) = bench(n, || lazy_walk_get(black_box(b)));
    report("7a sonic lazy: array_iter + get(vms) + obj_iter", len, t, &format!("servers={ns} vms={nv}"));
    let (t, (ns, nv)) = bench(n, || lazy_walk_iter(black_box(b)));
    report("7b sonic lazy: array_iter + obj_iter(server)", len, t, &format!("servers={ns} vms={nv}"));
    let (t, (ns, nv)) = bench(n, || lazy_walk_unchecked(black_box(b)));
    report("7c sonic lazy 7a with *_unchecked APIs", len, t, &format!("servers={ns} vms={nv}"));

    // simd-json mutates its input and the result borrows it, so time inline:
    // fresh copy made before the timer, result + copy dropped after the timer.
    macro_rules! simd_bench {
        ($name:expr, |$buf:ident| $e:expr) => {{
            let mut t = Vec::with_capacity(n);
            for _ in 0..n {
                let mut $buf = b.to_vec();
                let s = Instant::now();
                let r = black_box($e);
                t.push(s.elapsed());
                drop(r);
            }
            report($name, len, t, "");
        }};
    }
    simd_bench!("8a simd_json::to_borrowed_value (copy excl.)", |buf| simd_json::to_borrowed_value(&mut buf).unwrap());
    simd_bench!("8b simd_json::to_tape (copy excl.)", |buf| simd_json::to_tape(&mut buf).unwrap());
    // extra: scratch buffers reused across reps (avoids per-call scratch allocation)
    let mut buffers = simd_json::Buffers::new(len);
    simd_bench!("8c simd_json::to_tape_with_buffers (reused)", |buf| simd_json::to_tape_with_buffers(
        &mut buf,
        &mut buffers
    )
    .unwrap());
}

fn vm_hwm_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    for l in s.lines() {
        if let Some(r) = l.strip_prefix("VmHWM:") {
            return r.trim().trim_end_matches("kB").trim().parse().unwrap();
        }
    }
    0
}

fn rss_child(op: &str, path: &str) {
    let bytes = std::fs::read(path).expect("read");
    let b = bytes.as_slice();
    let before = vm_hwm_kib();
    match op {
        "none" => {}
        "serde_value" => return hold(op, before, serde_json::from_slice::<serde_json::Value>(b).unwrap()),
        "sonic_value" => return hold(op, before, sonic_rs::from_slice::<sonic_rs::Value>(b).unwrap()),
        "simd_borrowed" | "simd_tape" => {
            // simd-json parses in place: its copy of the body counts before the parse.
            let mut buf = bytes.clone();
            let before = vm_hwm_kib();
            match op {
                "simd_tape" => hold(op, before, simd_json::to_tape(&mut buf).unwrap()),
                _ => hold(op, before, simd_json::to_borrowed_value(&mut buf).unwrap()),
            }
            return;
        }
        "sonic_lazy" => {
            let r = lazy_walk_get(b);
            black_box(r);
        }
        _ => panic!("unknown op {op}"),
    }
    println!("{op} hwm_after_read={before} hwm_after_op={}", vm_hwm_kib());
}

/// Prints the peak RSS before and after the parse that made `value`, which is kept (never
/// freed) so that nothing is given back before the peak is read.
fn hold<T>(op: &str, before: u64, value: T) {
    black_box(&value);
    println!("{op} hwm_before={before} hwm_after_parse={}", vm_hwm_kib());
    std::mem::forget(value);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 3 && args[0] == "rss" {
        rss_child(&args[1], &args[2]);
        return;
    }
    let rss = args.iter().any(|a| a == "--rss");
    let bodies: Vec<(&str, usize)> = args
        .iter()
        .filter(|a| *a != "--rss")
        .map(|a| match a.rsplit_once(':') {
            Some((path, runs)) => (path, runs.parse().expect("BODY:RUNS, RUNS a number")),
            None => (a.as_str(), 10),
        })
        .collect();
    if bodies.is_empty() {
        eprintln!("usage: json-probe BODY:RUNS... [--rss]");
        std::process::exit(2);
    }
    let la = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at start: {}", la.trim());
    for &(path, runs) in &bodies {
        run_file(path, runs);
    }
    let la = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("loadavg at end:   {}", la.trim());
    if !rss {
        return;
    }
    let first = bodies[0].0;
    println!("== peak RSS (VmHWM, KiB), fresh process per op, {first}");
    let exe = std::env::current_exe().expect("the probe's own path");
    for op in ["none", "serde_value", "sonic_value", "simd_borrowed", "simd_tape", "sonic_lazy"] {
        let out = std::process::Command::new(&exe).args(["rss", op, first]).output().expect("the probe runs");
        print!("  {}", String::from_utf8_lossy(&out.stdout));
    }
}
