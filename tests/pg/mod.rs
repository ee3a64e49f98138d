//! A throwaway PostgreSQL for tests: `initdb` and `pg_ctl` (Debian's `postgresql`
//! package) in a temporary directory, on a free loopback port; stopped and removed when
//! dropped. Tests that need it are skipped, saying so, only when `initdb` is not installed.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    bin: PathBuf,
    /// As root, PostgreSQL runs as the `postgres` user.
    run_as: Option<String>,
}

/// The directory holding `initdb` and `pg_ctl`, if PostgreSQL is installed.
pub fn bindir() -> Option<PathBuf> {
    let from_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    let mut candidates: Vec<PathBuf> = from_config.into_iter().collect();
    if let Ok(entries) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut versions: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path().join("bin"))).collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    candidates.into_iter().find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
}

/// Starts one, or prints why the test is skipped and returns `None` (only when PostgreSQL
/// is not installed: any other failure panics).
pub fn start(test: &str) -> Option<Postgres> {
    let Some(bin) = bindir() else {
        // CI sets this (not a DAPI_ variable: dapi refuses unknown ones): there a missing
        // PostgreSQL is a failure, not a skip.
        if std::env::var_os("REQUIRE_POSTGRES_TESTS").is_some() {
            panic!("{test}: PostgreSQL is required (REQUIRE_POSTGRES_TESTS) but initdb was not found");
        }
        println!("SKIPPED {test}: PostgreSQL is not installed (no initdb; apt-get install -y postgresql)");
        eprintln!("SKIPPED {test}: PostgreSQL is not installed (no initdb; apt-get install -y postgresql)");
        return None;
    };
    Some(Postgres::start_in(bin))
}

/// How many fresh ports a cluster tries before its start is a failure.
const START_ATTEMPTS: usize = 5;

impl Postgres {
    fn start_in(bin: PathBuf) -> Postgres {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("dapi-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let root = unsafe { libc::geteuid() } == 0;
        let run_as = root.then(|| "postgres".to_string());
        if root {
            let ok = Command::new("chown").arg("-R").arg("postgres").arg(&dir).status().map(|s| s.success());
            assert!(matches!(ok, Ok(true)), "chown {} to postgres", dir.display());
        }
        let mut pg = Postgres { port: crate::common::unclaimed_port(), dir, bin, run_as };
        pg.run("initdb", &["-D", &pg.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]);
        pg.start_on(|pg| pg.port = crate::common::unclaimed_port());
        pg
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn run(&self, tool: &str, args: &[&str]) {
        if let Err(why) = self.try_run(tool, args) {
            panic!("{why}");
        }
    }

    fn try_run(&self, tool: &str, args: &[&str]) -> Result<(), String> {
        let exe = self.bin.join(tool);
        let mut cmd = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(user).arg("--").arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        let out = cmd.args(args).current_dir(&self.dir).output().map_err(|e| format!("{tool}: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// Starts the server again on its port (after `stop_server`); a few tries, since the
    /// port is free again only once the old postmaster has let it go.
    pub fn start_server(&mut self) {
        self.start_on(|_| std::thread::sleep(std::time::Duration::from_millis(500)));
    }

    /// Starts the server, calling `before_retry` after each failed try (up to
    /// [`START_ATTEMPTS`]); panics with every try's failure.
    fn start_on(&mut self, before_retry: impl Fn(&mut Postgres)) {
        let mut failures = Vec::new();
        while let Err(why) = self.try_start_server() {
            failures.push(why);
            assert!(failures.len() < START_ATTEMPTS, "PostgreSQL did not start:\n{}", failures.join("\n"));
            before_retry(self);
        }
    }

    /// One start; on failure, what pg_ctl said and the end of the server's log.
    fn try_start_server(&self) -> Result<(), String> {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log");
        let started = self.try_run(
            "pg_ctl",
            &["-D", &self.data(), "-o", &opts, "-l", &log.display().to_string(), "-w", "-t", "60", "start"],
        );
        started.map_err(|why| {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(10).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("port {}: {why}\nserver log:\n{}", self.port, tail.join("\n"))
        })
    }

    pub fn stop_server(&self) {
        if let Err(why) = self.try_stop_server() {
            panic!("{why}");
        }
    }

    fn try_stop_server(&self) -> Result<(), String> {
        self.try_run("pg_ctl", &["-D", &self.data(), "-m", "fast", "-w", "stop"])
    }

    /// A URL to a fresh database of its own.
    pub fn database(&self, name: &str) -> String {
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(name)
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs SQL with psql; its output (unaligned, tuples only).
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .output()
            .expect("psql runs");
        assert!(out.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Quietly: a cluster that never started has nothing to stop.
        let _ = self.try_stop_server();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
