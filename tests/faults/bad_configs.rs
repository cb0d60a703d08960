//! `config`: a corpus of broken configuration files (`bad_configs/*.toml`, each naming the
//! field its error must name in a first-line `# expect: <field path>` comment, and optionally
//! secrets that must not be printed in `# secret: <s> [<s>…]`), each refused by `check` with
//! exit 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::common::bridge::binary;
use crate::say;
use crate::suite::Row;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/faults/bad_configs")
}

/// One corpus file's outcome that is not a plain pass.
struct Finding {
    file: String,
    problem: String,
}

/// `mongo-kafka-bridge check --config F` on every corpus file: exit 2, the expected field on
/// stderr, no panic, no secret.
pub fn bad_configs() -> Row {
    let started = Instant::now();
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/faults/bad_configs")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "the corpus has {} files", files.len());
    let mut failures = Vec::new();
    let mut weak = Vec::new();
    for path in &files {
        let (failure, note) = check_file(path);
        failures.extend(failure);
        weak.extend(note);
    }
    for w in &weak {
        say!("bad configs: note: {}: {}", w.file, w.problem);
    }
    let mut row = Row::new("bad configs (`check`, exit 2)");
    row.runs = format!("{} files", files.len());
    row.seconds = started.elapsed().as_secs_f64();
    assert!(
        failures.is_empty(),
        "bad configs:\n{}",
        failures
            .iter()
            .map(|f| format!("  {}: {}", f.file, f.problem))
            .collect::<Vec<_>>()
            .join("\n")
    );
    say!(
        "bad configs: {} files, all exit 2 naming their field, no panic ({:.1} s)",
        files.len(),
        row.seconds
    );
    row
}

/// Runs `check` on one bad configuration: it must exit 2, not panic, print none of the
/// file's `# secret:` values, and name the field of its `# expect:` line in stderr. Its
/// failure, and a note where it names the field only at its parent.
fn check_file(path: &Path) -> (Option<Finding>, Option<Finding>) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let text = std::fs::read_to_string(path).unwrap();
    let expect = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{name}: first line must be `# expect: <field path>`"))
        .trim()
        .to_owned();
    let secrets: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# secret: "))
        .flat_map(|l| l.split_whitespace().map(str::to_owned))
        .collect();
    let mut cmd = Command::new(binary());
    cmd.args(["check", "--config"])
        .arg(path)
        .stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with(mongo_kafka_bridge::config::ENV_PREFIX) {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let all = format!("{stdout}{stderr}");
    let mut problems = Vec::new();
    let mut note = None;
    if out.status.code() != Some(2) {
        problems.push(format!("exit {:?}, expected 2", out.status.code()));
    }
    if all.contains("panicked") {
        problems.push("panicked".to_owned());
    }
    for s in &secrets {
        if all.contains(s.as_str()) {
            problems.push(format!("printed the secret {s:?}"));
        }
    }
    if !stderr.contains(&expect) {
        // A missing field is reported at its parent: `mongodb: missing field `uri``.
        let (parent, leaf) = expect.rsplit_once('.').unwrap_or((".", &expect));
        let leaf = leaf.split('[').next().unwrap_or(leaf);
        let parent_form = format!("{parent}: missing field `{leaf}`");
        if stderr.contains(&parent_form) {
            note = Some(Finding {
                file: name.clone(),
                problem: format!("names {parent_form:?}, not the path {expect:?}"),
            });
        } else {
            problems.push(format!("stderr does not name {expect:?}"));
        }
    }
    let failure = (!problems.is_empty()).then(|| Finding {
        file: name,
        problem: format!("{}; stderr: {}", problems.join(", "), stderr.trim()),
    });
    (failure, note)
}
