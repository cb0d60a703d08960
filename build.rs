//! Build script: records the git commit of a build from a git clone as `MKB_GIT_SHA` (the
//! `git_sha` label of `mongo_kafka_bridge_build_info`). An `MKB_GIT_SHA` set in the environment
//! wins (a Docker build, which has no `.git`, passes it as a build argument).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=MKB_GIT_SHA");
    let watched: Vec<&str> = [".git/HEAD", ".git/refs/heads", ".git/packed-refs"]
        .into_iter()
        .filter(|p| Path::new(p).exists())
        .collect();
    if watched.is_empty() {
        println!("cargo:rerun-if-changed=build.rs");
    }
    for path in watched {
        println!("cargo:rerun-if-changed={path}");
    }
    if std::env::var_os("MKB_GIT_SHA").is_some() {
        return;
    }
    let sha = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|sha| sha.trim().to_owned())
        .filter(|sha| !sha.is_empty());
    if let Some(sha) = sha {
        println!("cargo:rustc-env=MKB_GIT_SHA={sha}");
    }
}
