//! Reload without restart: SIGHUP to a real `run` process re-reads its configuration file and
//! applies only `[[pipelines]]` changes, while the pipelines that did not change keep running.

use std::time::{Duration, Instant};

use bson::{DateTime, Document, doc};

use crate::common::bridge::{Killed, bridge_cli, signal, spawn_binary};
use crate::common::collect::{collect_from, per_id};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);
const QUIET: Duration = Duration::from_secs(2);

/// Waits until the log at `log` contains `text` `times` times.
async fn logged(log: &std::path::Path, text: &str, times: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = std::fs::read_to_string(log).unwrap_or_default();
        if body.matches(text).count() >= times {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no {times}× {text:?} in the log:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn insert(coll: &mongodb::Collection<Document>, ids: std::ops::Range<i64>) {
    for id in ids {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_adds_and_removes_pipelines_keeps_the_others_and_rejects_bad_files() {
    // GIVEN a running bridge with pipeline a
    let db = unique("hup");
    for coll in ["a", "b"] {
        create_topic(&format!("{db}.{coll}"), 1).await;
    }
    let only_a = config_toml("a", &db, Some("a"), "");
    let b = format!("\n[[pipelines]]\nname = \"b\"\ndatabase = \"{db}\"\ncollection = \"b\"\n");
    let file = config_file(&only_a);
    let log = file.path().with_extension("log");
    let mut bridge = Killed(spawn_binary(file.path()));
    let pid = bridge.0.id();
    let client = mongo().await;
    let (a, bc) = (
        client.database(&db).collection::<Document>("a"),
        client.database(&db).collection::<Document>("b"),
    );
    wait_offsets(&client, &db, "a", WAIT, |d| d.contains_key("resumeToken")).await;
    // (a writer keeps a busy through every reload below)
    let writer = {
        let a = a.clone();
        tokio::spawn(async move {
            for id in 0..150_i64 {
                a.insert_one(doc! { "_id": id }).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // WHEN b is added and SIGHUP sent
    std::fs::write(file.path(), format!("{only_a}{b}")).unwrap();
    signal(pid, "HUP");
    // THEN b starts, and what is written to it from then on is published
    wait_offsets(&client, &db, "b", WAIT, |d| d.contains_key("resumeToken")).await;
    insert(&bc, 0..10).await;
    // WHEN the file is broken, or changes more than pipelines
    std::fs::write(file.path(), "[[pipelines").unwrap();
    signal(pid, "HUP");
    logged(&log, "configuration reload rejected", 1).await;
    let other =
        format!("{only_a}{b}").replace("commit_interval_ms = 200", "commit_interval_ms = 300");
    std::fs::write(file.path(), other).unwrap();
    signal(pid, "HUP");
    logged(&log, "configuration reload rejected", 2).await;
    // THEN nothing changed: b still publishes
    insert(&bc, 10..20).await;
    writer.await.unwrap();
    let a_records = collect_from(&kafka_bootstrap(), &format!("{db}.a"), 150, QUIET, WAIT).await;
    // WHEN a is removed
    std::fs::write(
        file.path(),
        format!("{only_a}{b}").replace(&only_a_pipeline(&db), ""),
    )
    .unwrap();
    signal(pid, "HUP");
    // THEN a drains and releases its lease, and what is written to it afterwards is not read
    wait_offsets(&client, &db, "a", WAIT, |d| {
        d.get_datetime("leaseUntil")
            .is_ok_and(|t| *t <= DateTime::now())
    })
    .await;
    insert(&a, 1000..1010).await;
    insert(&bc, 20..30).await;
    let b_records = collect_from(&kafka_bootstrap(), &format!("{db}.b"), 30, QUIET, WAIT).await;
    let a_after = collect_from(&kafka_bootstrap(), &format!("{db}.a"), 150, QUIET, WAIT).await;
    // AND every record arrived once: a's 150 (it kept running through b's reloads), b's 30
    let counts = per_id(&a_records);
    assert_eq!((0..150).filter(|i| counts.get(i) == Some(&1)).count(), 150);
    assert_eq!(per_id(&a_after).len(), 150, "a published after its removal");
    let counts = per_id(&b_records);
    assert_eq!((0..30).filter(|i| counts.get(i) == Some(&1)).count(), 30);
    assert_eq!(counts.len(), 30);
    // AND a ran with one epoch throughout (never restarted by b's reloads)
    let a_doc = offsets_doc(&client, &db, "a").await.unwrap();
    assert_eq!(a_doc.get_i64("epoch"), Ok(1));
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.matches("\"took the pipeline\",\"pipeline\":\"a\"")
            .count(),
        1,
        "{text}"
    );
    assert!(text.contains("needs a restart"), "{text}");
    bridge.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_refuses_the_only_pipeline_keeps_the_process_for_accept_config() {
    // GIVEN a running bridge with one pipeline, its position committed
    let db = unique("hupf");
    let topic = format!("{db}.f");
    create_topic(&topic, 1).await;
    let plain = config_toml("f", &db, Some("f"), "");
    let file = config_file(&plain);
    let log = file.path().with_extension("log");
    let mut bridge = Killed(spawn_binary(file.path()));
    let pid = bridge.0.id();
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("f");
    wait_offsets(&client, &db, "f", WAIT, |d| d.contains_key("resumeToken")).await;
    insert(&coll, 0..5).await;
    // WHEN its filter changes and SIGHUP is sent
    let filter = "pipeline = '[{\"$match\": {\"operationType\": \"insert\"}}]'\n";
    let filtered = config_toml("f", &db, Some("f"), filter);
    std::fs::write(file.path(), &filtered).unwrap();
    signal(pid, "HUP");
    // THEN the pipeline is refused, and the process says so and keeps running
    logged(&log, "every pipeline is refused after the reload", 1).await;
    insert(&coll, 5..10).await;
    assert!(bridge.0.try_wait().unwrap().is_none(), "the process exited");
    // WHEN the new stream is accepted and SIGHUP sent again
    let (code, stdout, stderr) = bridge_cli(&["offsets", "accept-config", "f"], file.path());
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    signal(pid, "HUP");
    // THEN it runs again from its position: every document arrives, the ones written while
    // it was refused included
    insert(&coll, 10..15).await;
    let records = collect_from(&kafka_bootstrap(), &topic, 15, QUIET, WAIT).await;
    let counts = per_id(&records);
    assert_eq!(
        (0..15).filter(|i| counts.contains_key(i)).count(),
        15,
        "{counts:?}"
    );
    bridge.kill();
}

/// The `[[pipelines]]` entry of `config_toml("a", db, Some("a"), "")`.
fn only_a_pipeline(db: &str) -> String {
    format!("[[pipelines]]\nname = \"a\"\ndatabase = \"{db}\"\ncollection = \"a\"\n")
}
