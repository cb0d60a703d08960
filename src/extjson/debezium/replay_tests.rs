//! Replays a capture of the real connector (`bench/peers/capture_debezium.py OUTDIR`), when
//! `MKB_DBZ_VECTORS` names its OUTDIR: every string Debezium 3.6.3 wrote (`vectors.jsonl`),
//! the Java writers' strings for what SecantusDB cannot store (`probe-vectors.jsonl`) and JDK
//! 17's `Double.toString` for ~580 000 doubles (`probe-doubles.txt`). Without the variable
//! each test prints why it skipped: CI has no capture, the inline vectors run there.
#![allow(clippy::unwrap_used)]

use bson::RawDocumentBuf;

use super::*;

/// The capture directory, or `None` (with the reason printed) when it is not given.
fn capture_dir() -> Option<std::path::PathBuf> {
    match std::env::var_os("MKB_DBZ_VECTORS") {
        Some(dir) => Some(dir.into()),
        None => {
            eprintln!(
                "skipped: MKB_DBZ_VECTORS is not set (the output directory of \
                 bench/peers/capture_debezium.py); the inline vectors still ran"
            );
            None
        }
    }
}

pub(super) fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).unwrap() as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

fn json_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn bson_of(vector: &serde_json::Value) -> RawDocumentBuf {
    RawDocumentBuf::from_bytes(base64_decode(vector["bson"].as_str().unwrap())).unwrap()
}

/// Reports the mismatches (at most 10 in full) and fails if there is any.
fn report(what: &str, compared: usize, mismatches: &[String]) {
    for m in mismatches.iter().take(10) {
        eprintln!("{m}");
    }
    eprintln!("{what}: {compared} compared, {} differ", mismatches.len());
    assert!(
        mismatches.is_empty(),
        "{what}: {} of {compared} differ",
        mismatches.len()
    );
}

#[test]
fn replay_connector_vectors() {
    let Some(dir) = capture_dir() else { return };
    let vectors = json_lines(&dir.join("vectors.jsonl"));
    let mut mismatches = Vec::new();
    for v in &vectors {
        let doc = bson_of(v);
        let got = match v["writer"].as_str().unwrap() {
            "strict" => after_json(&doc),
            "relaxed" => updated_fields_json(&doc),
            "key" => key_json(&doc),
            "removed" => removed_fields_json(&doc),
            "truncated" => truncated_arrays_json(&doc),
            other => panic!("unknown writer {other}"),
        };
        let expected = v["expected"].as_str().unwrap();
        match got {
            Ok(got) if got == expected => {}
            got => mismatches.push(format!(
                "{} {}:\n  debezium {:.300}\n  ours     {:.300}",
                v["case"],
                v["writer"],
                expected,
                format!("{got:?}")
            )),
        }
    }
    report("connector vectors", vectors.len(), &mismatches);
}

#[test]
fn replay_probe_vectors() {
    let Some(dir) = capture_dir() else { return };
    let path = dir.join("probe-vectors.jsonl");
    if !path.exists() {
        eprintln!(
            "skipped: no {} (the capture ran with --no-probe)",
            path.display()
        );
        return;
    }
    let vectors = json_lines(&path);
    let mut mismatches = Vec::new();
    for v in &vectors {
        let doc = bson_of(v);
        let mut pairs = vec![
            ("strict", after_json(&doc).ok(), v["strict"].as_str()),
            (
                "relaxed",
                updated_fields_json(&doc).ok(),
                v["relaxed"].as_str(),
            ),
        ];
        if v["id"].as_str() != Some("") {
            pairs.push(("id", key_id(&doc).ok(), v["id"].as_str()));
        }
        for (writer, got, expected) in pairs {
            if got.as_deref() != expected {
                mismatches.push(format!(
                    "{} {writer}:\n  java {expected:?}\n  ours {got:?}",
                    v["case"]
                ));
            }
        }
    }
    report("probe vectors", vectors.len(), &mismatches);
}

#[test]
fn replay_jdk17_double_to_string() {
    let Some(dir) = capture_dir() else { return };
    let path = dir.join("probe-doubles.txt");
    if !path.exists() {
        eprintln!(
            "skipped: no {} (the capture ran with --no-probe)",
            path.display()
        );
        return;
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let mut mismatches = Vec::new();
    let mut compared = 0;
    for line in text.lines() {
        let (bits, expected) = line.split_once(' ').unwrap();
        let v = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
        let got = java_double_to_string(v);
        compared += 1;
        if got != expected {
            mismatches.push(format!("{bits} ({v:e}): java {expected}, ours {got}"));
        }
    }
    report("Double.toString", compared, &mismatches);
}
