//! Records the git commit the binary is built from (for `dapi_build_info` in `/metrics`):
//! `BUILD_GIT_COMMIT` when the build is given one (a container build without `.git`), else
//! `git rev-parse`, else nothing (the metric says `unknown`).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=BUILD_GIT_COMMIT");
    let commit = std::env::var("BUILD_GIT_COMMIT").ok().filter(|c| !c.is_empty()).or_else(|| {
        let out = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().ok()?;
        let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !commit.is_empty()).then_some(commit)
    });
    if let Some(commit) = commit {
        println!("cargo:rustc-env=BUILD_GIT_COMMIT={commit}");
    }
    // Rerun when HEAD or a branch moves (a worktree keeps its HEAD apart from the refs).
    for (arg, file) in [("--git-dir", "HEAD"), ("--git-common-dir", "refs/heads")] {
        let dir = Command::new("git").args(["rev-parse", arg]).output().ok();
        if let Some(dir) = dir.and_then(|o| String::from_utf8(o.stdout).ok()) {
            if !dir.trim().is_empty() {
                println!("cargo:rerun-if-changed={}/{file}", dir.trim());
            }
        }
    }
}
