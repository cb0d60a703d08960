//! Secrets: a password in the MongoDB URI and a SASL password in `[kafka.properties]` (or the
//! environment) never appear in anything the binary prints (`run` logs in both formats, its
//! exit error, `check`, `offsets list`) nor in `/metrics`, `/readyz`, `/healthz`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::bridge::{BridgeProc, binary};
use crate::common::config::Cfg;
use crate::common::observe::fetch;
use crate::say;
use crate::suite::{Ctx, Row};

const MONGO_PASSWORD: &str = "S3cretPw";
const KAFKA_PASSWORD: &str = "K4fkaS3cretPw";
const ENV_PASSWORD: &str = "EnvK4fkaS3cret";
/// Percent-encoded in the URI (`%40` is `@`); neither form may be printed.
const ENCODED_PASSWORD: &str = "M0ngo%40S3cret";
const DECODED_PASSWORD: &str = "M0ngo@S3cret";

/// Every secret, as written and in the encodings a leak could take.
fn needles() -> Vec<String> {
    let mut out = Vec::new();
    for s in [
        MONGO_PASSWORD,
        KAFKA_PASSWORD,
        ENV_PASSWORD,
        ENCODED_PASSWORD,
        DECODED_PASSWORD,
    ] {
        out.push(s.to_owned());
        // Part of one: a redaction that keeps a prefix still leaks.
        out.push(s[..s.len() - 2].to_owned());
    }
    out
}

/// One `run` of the binary for `secs` seconds: everything it printed plus the HTTP answers.
fn run_for(
    ctx: &Ctx,
    tag: &str,
    config: &std::path::Path,
    env: &[(&str, &str)],
    text_logs: bool,
    secs: u64,
) -> (String, String) {
    let log = ctx.dir.join(format!("secrets-{tag}.log"));
    let format = if text_logs { "text" } else { "json" };
    let args = ["--log-format", format, "run", "--no-status"];
    let env = [&[("RUST_LOG", "debug")], env].concat();
    let mut proc = BridgeProc::spawn_args(&args, config, log, &env);
    let mut http = String::new();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut addr = None;
    while Instant::now() < deadline && proc.running() {
        if addr.is_none() {
            addr = proc
                .log_text()
                .lines()
                .find_map(|l| {
                    l.split("metrics_addr").nth(1).and_then(|rest| {
                        rest.trim_start_matches(['"', ':', '='])
                            .split(['"', ' ', ','])
                            .next()
                            .map(str::to_owned)
                    })
                })
                .filter(|a| a.parse::<std::net::SocketAddr>().is_ok());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(addr) = &addr {
        for path in ["/metrics", "/readyz", "/healthz"] {
            if let Some((code, body)) = fetch(addr, path) {
                http.push_str(&format!("GET {path} → {code}\n{body}\n"));
            }
        }
    }
    let status = if proc.running() {
        proc.stop(Duration::from_secs(30))
    } else {
        proc.exit.unwrap()
    };
    let printed = proc.log_text();
    assert_ne!(
        status.code(),
        Some(2),
        "secrets/{tag}: the configuration was rejected, so nothing was exercised:\n{printed}"
    );
    let first_error = printed
        .lines()
        .find(|l| l.contains("ERROR") || l.contains("error"))
        .unwrap_or("(no error line)")
        .chars()
        .take(240)
        .collect::<String>();
    say!(
        "secrets/{tag}: run exited {status} after {} lines, {} bytes of HTTP; first error: {first_error}",
        printed.lines().count(),
        http.len()
    );
    (printed, http)
}

fn command(config: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let started = Instant::now();
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert_ne!(
        out.status.code(),
        Some(2),
        "{args:?}: the configuration was rejected: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    say!(
        "secrets: {} exited {:?} after {:.1} s",
        args.join(" "),
        out.status.code(),
        started.elapsed().as_secs_f64()
    );
    format!(
        "exit {:?}\n{}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// (tag, URI, `[kafka.properties]` lines, environment)
type Case<'a> = (&'a str, String, String, &'a [(&'a str, &'a str)]);

pub fn secrets(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let inst = ctx.up("secrets", &[]);
    let with_password = inst.mongo_uri.replacen(
        "mongodb://",
        &format!("mongodb://mkbuser:{MONGO_PASSWORD}@"),
        1,
    );
    let encoded = inst.mongo_uri.replacen(
        "mongodb://",
        &format!("mongodb://mkbuser:{ENCODED_PASSWORD}@"),
        1,
    );
    let sasl = format!(
        "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"PLAIN\"\n\
         \"sasl.username\" = \"mkbuser\"\n\"sasl.password\" = \"{KAFKA_PASSWORD}\""
    );
    let sasl_no_password = "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \
                            \"PLAIN\"\n\"sasl.username\" = \"mkbuser\""
        .to_owned();
    // (tag, URI, properties, environment)
    let env_password = [(
        "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD",
        ENV_PASSWORD,
    )];
    let cases: Vec<Case<'_>> = vec![
        ("both", with_password.clone(), sasl.clone(), &[]),
        ("mongo-password", with_password.clone(), String::new(), &[]),
        ("mongo-password-encoded", encoded, String::new(), &[]),
        ("sasl-password", inst.mongo_uri.clone(), sasl.clone(), &[]),
        (
            "sasl-env",
            inst.mongo_uri.clone(),
            sasl_no_password,
            &env_password,
        ),
    ];
    let needles = needles();
    let mut leaks = Vec::new();
    let mut runs = 0;
    for (i, (tag, uri, props, env)) in cases.iter().enumerate() {
        let mut cfg = Cfg::new(uri, &inst.kafka, &format!("secrets{i}"));
        cfg.properties = props.clone();
        let path = cfg.write(&ctx.dir, &format!("secrets-{tag}.toml"));
        let outputs = outputs_of(ctx, tag, &path, env, i == 0);
        runs += if i == 0 { 4 } else { 3 };
        say!(
            "secrets/{tag}: check → {}",
            outputs[outputs.len() - 2]
                .1
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join(" | ")
                .chars()
                .take(400)
                .collect::<String>()
        );
        leaks.extend(leaks_in(tag, &outputs, &needles));
    }
    assert!(leaks.is_empty(), "secrets printed:\n{}", leaks.join("\n"));
    say!("secrets: {runs} runs/commands, no secret in any output or HTTP answer");
    let mut row = Row::new("secrets (URI + SASL password)");
    row.runs = format!("{runs} runs/commands");
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

/// What case `tag` (configuration `path`, environment `env`) prints: `run` with JSON logs
/// (and with text logs too, `also_text`), its HTTP answers, `check` and `offsets list`.
fn outputs_of(
    ctx: &Ctx,
    tag: &str,
    path: &Path,
    env: &[(&str, &str)],
    also_text: bool,
) -> Vec<(String, String)> {
    let mut outputs = Vec::new();
    let (printed, http) = run_for(ctx, tag, path, env, false, 5);
    outputs.push(("run (json logs)".to_owned(), printed));
    outputs.push(("HTTP".to_owned(), http));
    if also_text {
        let (printed, _) = run_for(ctx, &format!("{tag}-text"), path, env, true, 3);
        outputs.push(("run (text logs)".to_owned(), printed));
    }
    outputs.push(("check".to_owned(), command(path, &["check"], env)));
    outputs.push((
        "offsets list".to_owned(),
        command(path, &["offsets", "list"], env),
    ));
    outputs
}

/// Every needle found in `outputs`, with the text around it.
fn leaks_in(tag: &str, outputs: &[(String, String)], needles: &[String]) -> Vec<String> {
    let mut leaks = Vec::new();
    for (what, text) in outputs {
        for n in needles {
            if let Some(at) = text.find(n.as_str()) {
                let from = text[..at]
                    .char_indices()
                    .rev()
                    .nth(80)
                    .map_or(0, |(i, _)| i);
                let line: String = text[from..].chars().take(200).collect();
                leaks.push(format!("{tag}/{what}: {n:?} in …{line}…"));
            }
        }
    }
    leaks
}
