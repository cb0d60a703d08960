//! Kafka security as the README documents it, on Apache Kafka with `--kafka-security`: a
//! SASL_SSL listener (SCRAM-SHA-512 over TLS), an SSL listener and the StandardAuthorizer.
//!
//! - `security`: the bridge connects as user `mkb-bridge` holding exactly the README's ACLs for
//!   a pipeline ("Kafka ACLs"), its password in the environment: `check` passes and `run`
//!   delivers every event. Over the SSL listener (TLS only, the broker's certificate trusted
//!   through `ssl.ca.location`) the same. With a wrong password `check` and `run` both fail
//!   with an error that names authentication, and neither prints the password. Without the
//!   `Write` ACL on its topic, `run` fails naming the authorization.
//!
//! Apache Kafka only. ACLs are granted by the test through the PLAINTEXT listener (a super
//! user there) with confluent-kafka's admin client from the services virtualenv.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bson::Document;

use crate::common::bridge::BridgeProc;
use crate::common::config::{COLL, Cfg};
use crate::common::kafka::create_topic_at;
use crate::common::load::{Truth, prepare_update_keys, start_load};
use crate::common::records::Consumer;
use crate::common::servers::Instance;
use crate::common::verdict::Verdict;
use crate::say;
use crate::suite::{Ctx, Row};

const USER: &str = "mkb-bridge";
const PASSWORD: &str = "mkb-bridge-secret";
const WRONG: &str = "Wr0ngPassw0rdXyz";
const PASSWORD_ENV: &str = "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD";

/// Grants `acls` (resource type, name, pattern type, operation) to `User:<USER>` with
/// confluent-kafka's `create_acls`, through `bootstrap` (PLAINTEXT, a super user).
const GRANT_PY: &str = r#"
import json, sys
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
bootstrap, principal, specs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
admin = AdminClient({"bootstrap.servers": bootstrap})
bindings = [AclBinding(ResourceType[r], n, ResourcePatternType[p], principal, "*",
                       AclOperation[o], AclPermissionType.ALLOW) for r, n, p, o in specs]
for f in admin.create_acls(bindings, request_timeout=30).values():
    f.result()
"#;

/// The Python of the services virtualenv (`.cache/venv` beside `scripts/services`).
fn venv_python(script: &Path) -> PathBuf {
    let cache = std::env::var("MKB_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            script
                .parent()
                .and_then(Path::parent)
                .expect("scripts/services sits in <root>/scripts")
                .join(".cache")
        });
    cache.join("venv/bin/python")
}

/// The README's ACLs for one at-least-once pipeline publishing to `topic` (created beforehand
/// by an administrator): write and describe it, and read its configuration (`max.message.bytes`).
fn pipeline_acls(topic: &str) -> Vec<[String; 4]> {
    ["WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"]
        .iter()
        .map(|op| {
            [
                "TOPIC".to_owned(),
                topic.to_owned(),
                "LITERAL".to_owned(),
                (*op).to_owned(),
            ]
        })
        .collect()
}

fn grant(ctx: &Ctx, inst: &Instance, acls: &[[String; 4]]) {
    let out = Command::new(venv_python(&ctx.script))
        .args(["-c", GRANT_PY, &inst.kafka, &format!("User:{USER}")])
        .arg(serde_json::to_string(acls).expect("acls as JSON"))
        .stdin(Stdio::null())
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "granting ACLs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `mongo-kafka-bridge ARGS --config CONFIG` with the password (if any) in the environment:
/// exit code and everything printed.
fn bridge(
    config: &Path,
    args: &[&str],
    password: Option<&str>,
    timeout: Duration,
) -> (i32, String) {
    let log = config.with_extension(format!("{}.log", args.join("-")));
    let env: Vec<(&str, &str)> = password.map(|p| (PASSWORD_ENV, p)).into_iter().collect();
    let mut proc = BridgeProc::spawn_args(args, config, log, &env);
    let code = match proc.wait_exit(timeout) {
        Some(status) => status.code().unwrap_or(-1),
        None => {
            proc.kill9();
            -1
        }
    };
    (code, proc.log_text())
}

fn sasl_properties(ca: &str) -> String {
    format!(
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
         \"sasl.username\" = \"{USER}\"\n\"ssl.ca.location\" = \"{ca}\""
    )
}

/// Runs the bridge with `cfg` under a load of 200 writes and checks every event arrived.
async fn delivers(
    ctx: &Ctx,
    row: &mut Row,
    inst: &Instance,
    cfg: &Cfg,
    password: Option<&str>,
    tag: &str,
) -> Verdict {
    let client = inst.client().await;
    let coll = client.database(&cfg.db).collection::<Document>(COLL);
    prepare_update_keys(&coll, 5).await;
    let consumer = Consumer::start(&inst.kafka, &cfg.topic(), 1);
    let path = cfg.write(&ctx.dir, &format!("security-{tag}.toml"));
    let env: Vec<(&str, &str)> = password.map(|p| (PASSWORD_ENV, p)).into_iter().collect();
    let mut proc = BridgeProc::spawn_with(&path, ctx.dir.join(format!("security-{tag}.log")), &env);
    cfg.wait_started(&client, Duration::from_secs(60)).await;
    let load = start_load(coll.clone(), 100, 5, 0);
    tokio::time::sleep(Duration::from_secs(2)).await;
    load.stop().await;
    let truth = Truth::read(&coll).await;
    let (v, _) = consumer
        .wait_complete(&truth, Duration::from_secs(60))
        .await;
    row.check(v.missing == 0 && v.writes > 0, || {
        format!(
            "{tag}: {} of {} events missing\n{}",
            v.missing,
            v.writes,
            proc.log_tail(8)
        )
    });
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || {
        format!("{tag}: graceful stop: {status}")
    });
    say!(
        "security/{tag}: {} of {} events delivered",
        v.unique,
        v.writes
    );
    v
}

pub async fn security(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let mut row = Row::new("Kafka security: SASL_SSL SCRAM-SHA-512, TLS, ACLs");
    let inst = ctx.up("security", &["--kafka-security"]);
    let (Some(sasl), Some(ssl), Some(ca)) = (
        inst.vars.get("MKB_KAFKA_SASL_SSL_BOOTSTRAP").cloned(),
        inst.vars.get("MKB_KAFKA_SSL_BOOTSTRAP").cloned(),
        inst.vars.get("MKB_KAFKA_CA").cloned(),
    ) else {
        row.check(false, || {
            "scripts/services printed no SASL_SSL/SSL listener".into()
        });
        return vec![row];
    };
    // GIVEN user mkb-bridge with exactly the README's ACLs for a pipeline on topic sasl.t
    let mut cfg = Cfg::new(&inst.mongo_uri, &sasl, "sasl");
    cfg.properties = sasl_properties(&ca);
    create_topic_at(&inst.kafka, &cfg.topic(), 1, &[]).await;
    grant(ctx, &inst, &pipeline_acls(&cfg.topic()));
    let path = cfg.write(&ctx.dir, "security-check.toml");
    // WHEN `check` runs with the password in the environment, THEN it passes
    let (code, out) = bridge(&path, &["check"], Some(PASSWORD), Duration::from_secs(120));
    say!(
        "security/check: exit {code}; {}",
        out.lines()
            .filter(|l| l.contains('✘') || l.contains('⚠'))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    row.check(code == 0, || {
        format!("check as {USER} exited {code}:\n{out}")
    });
    // AND `run` delivers every event over SASL_SSL
    let v = delivers(ctx, &mut row, &inst, &cfg, Some(PASSWORD), "sasl").await;
    // AND over the SSL listener (TLS only) too
    let mut tls = Cfg::new(&inst.mongo_uri, &ssl, "tls");
    tls.properties = format!("\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{ca}\"");
    create_topic_at(&inst.kafka, &tls.topic(), 1, &[]).await;
    delivers(ctx, &mut row, &inst, &tls, None, "tls").await;
    wrong_password(&mut row, &path, &out);
    write_denied(ctx, &inst, (&sasl, &ca), &mut row).await;
    let mut row = row.with_verdict(&v);
    row.runs = "check, run over SASL_SSL and SSL, wrong password, no Write ACL".to_owned();
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

/// WHEN the password is wrong, THEN check and run (on the configuration at `path`) fail
/// naming authentication, silently about the password; `out` (check's output with the right
/// password) does not print it either.
fn wrong_password(row: &mut Row, path: &Path, out: &str) {
    let (code, checked) = bridge(path, &["check"], Some(WRONG), Duration::from_secs(120));
    let names_auth = |t: &str| t.to_ascii_lowercase().contains("authentication");
    row.check(code != 0 && names_auth(&checked), || {
        format!("check with a wrong password exited {code}:\n{checked}")
    });
    let (code, ran) = bridge(
        path,
        &["--log-format", "json", "run", "--no-status"],
        Some(WRONG),
        Duration::from_secs(180),
    );
    let ran_tail: String = ran.lines().rev().take(5).collect::<Vec<_>>().join("\n");
    say!(
        "security/wrong password: check exit {code}, run exit {code}; run's last lines:\n{ran_tail}"
    );
    row.check(code != 0 && code != -1 && names_auth(&ran), || {
        format!(
            "run with a wrong password: exit {code} (-1: still running after 180 s):\n{ran_tail}"
        )
    });
    for (what, text) in [
        ("check", checked.as_str()),
        ("run", ran.as_str()),
        ("check (right password)", out),
    ] {
        for secret in [WRONG, PASSWORD] {
            row.check(!text.contains(secret), || {
                format!("{what} printed the password")
            });
        }
    }
}

/// WHEN the user lacks Write on its topic (over the SASL_SSL listener `sasl`, CA `ca`), THEN
/// run fails naming the authorization.
async fn write_denied(ctx: &Ctx, inst: &Instance, (sasl, ca): (&str, &str), row: &mut Row) {
    let mut denied = Cfg::new(&inst.mongo_uri, sasl, "denied");
    denied.properties = sasl_properties(ca);
    create_topic_at(&inst.kafka, &denied.topic(), 1, &[]).await;
    let acls: Vec<[String; 4]> = pipeline_acls(&denied.topic())
        .into_iter()
        .filter(|a| a[3] != "WRITE")
        .collect();
    grant(ctx, inst, &acls);
    let client = inst.client().await;
    let coll = client.database(&denied.db).collection::<Document>(COLL);
    let denied_path = denied.write(&ctx.dir, "security-denied.toml");
    let mut proc = BridgeProc::spawn_with(
        &denied_path,
        ctx.dir.join("security-denied.log"),
        &[(PASSWORD_ENV, PASSWORD)],
    );
    denied.wait_started(&client, Duration::from_secs(60)).await;
    coll.insert_one(bson::doc! { "_id": 1_i64 })
        .await
        .expect("insert");
    let exit = tokio::task::block_in_place(|| proc.wait_exit(Duration::from_secs(120)));
    let text = proc.log_text();
    say!(
        "security/denied: run exited {exit:?}; {}",
        text.lines().rev().take(2).collect::<Vec<_>>().join(" | ")
    );
    row.check(
        exit.is_some_and(|s| !s.success()) && text.to_ascii_lowercase().contains("authoriz"),
        || format!("run without Write exited {exit:?}:\n{}", proc.log_tail(6)),
    );
}
