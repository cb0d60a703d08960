//! A pipeline's failure kept to itself, and a missing topic made visible, on a Kafka cluster
//! of its own with `auto.create.topics.enable=false` (`scripts/services up --auto-create off`).
//! Ordinary tests of this binary (see `main.rs`); they skip when the servers are external.
//!
//! Before: a write to a namespace whose topic did not exist failed its deliveries with
//! `MessageTimedOut` (our `message.timeout.ms` runs out before librdkafka's
//! `topic.metadata.propagation.max.ms`), which was retried as an outage forever while
//! `/readyz` said 200; and a pipeline that stopped on a failure stopped every other pipeline of
//! the process.

use std::time::Duration;

use bson::doc;

use crate::common::bridge::bridge_cli;
use crate::common::collect::collect_from;
use crate::common::config::{config, config_file};
use crate::common::kafka::create_topic_at;
use crate::common::observe::get;
use crate::common::servers::Instance;
use crate::common::{eventually, unique};
use crate::suite::turn;

const WAIT: Duration = Duration::from_secs(120);

/// Two pipelines: `events`, a database scope on `db` (one topic per collection, none of which
/// exists), and `orders`, a collection on `other` whose topic exists.
fn toml(instance: &Instance, db: &str, other: &str, on_failure: &str) -> String {
    format!(
        r#"
[mongodb]
uri = "{uri}"
offsets_database = "{db}_offsets"
[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
"message.timeout.ms" = 3000
[bridge]
commit_interval_ms = 200
shutdown_timeout_ms = 5000
max_await_time_ms = 200
max_restart_backoff_ms = 500
persistent_error_attempts = 2
on_pipeline_failure = "{on_failure}"
[metrics]
listen = "127.0.0.1:0"
[[pipelines]]
name = "events"
database = "{db}"
[[pipelines]]
name = "orders"
database = "{other}"
collection = "orders"
"#,
        uri = instance.mongo_uri,
        kafka = instance.kafka,
    )
}

/// `/readyz` once it answers `code` with `has` in its body; on timeout the panic shows the last
/// answer and the pipelines' restart counters (what kept it from getting there).
async fn readyz_until(addr: std::net::SocketAddr, code: u16, has: &str) -> String {
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = std::sync::Arc::clone(&last);
    let probe = eventually(WAIT, has, move || {
        let seen = std::sync::Arc::clone(&seen);
        async move {
            let (c, body) = get(addr, "/readyz").await;
            *seen.lock().unwrap() = format!("{c} {body}");
            (c == code && body.contains(has)).then_some(body)
        }
    });
    match futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(probe)).await {
        Ok(body) => body,
        Err(_) => {
            let (_, metrics) = get(addr, "/metrics").await;
            let restarts: Vec<&str> = metrics
                .lines()
                .filter(|l| l.starts_with("mongo_kafka_bridge_pipeline_restarts_total"))
                .collect();
            panic!(
                "timed out waiting for /readyz {code} {has:?}; last answer: {}; {restarts:?}",
                last.lock().unwrap()
            );
        }
    }
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_topic_is_named_and_its_pipeline_fails_alone_until_a_reload() {
    let Some(_turn) = turn("isolation").await else {
        return;
    };
    let Some(instance) = Instance::managed("isolation", &["--auto-create", "off"]) else {
        return;
    };
    // GIVEN a database-scope pipeline whose topics do not exist, beside a healthy pipeline
    let (db, other) = (unique("iso"), unique("isook"));
    let (missing, healthy) = (format!("{db}.items"), format!("{other}.orders"));
    create_topic_at(&instance.kafka, &healthy, 1, &[]).await;
    let client = mongodb::Client::with_uri_str(&instance.mongo_uri)
        .await
        .unwrap();
    let items = client.database(&db).collection::<bson::Document>("items");
    items.insert_one(doc! { "_id": 0 }).await.unwrap(); // the namespace exists now
    let text = toml(&instance, &db, &other, "isolate");
    let file = config_file(&text);

    // THEN check lists the topic to create, with its namespace, and fails
    let (code, stdout, _) = bridge_cli(&["check"], file.path());
    assert_eq!(code, Some(1), "{stdout}");
    let listed = stdout
        .lines()
        .find(|l| l.contains("not on the cluster"))
        .unwrap_or_else(|| panic!("no line lists the missing topics: {stdout}"));
    assert!(
        listed.starts_with('✘') && listed.contains(&format!("{missing} (namespace {db}.items)")),
        "{listed}"
    );

    // WHEN the bridge runs and a document is written to that namespace
    let bridge = mongo_kafka_bridge::Bridge::start(config(&text))
        .await
        .unwrap();
    let addr = bridge.metrics_addr();
    readyz_until(addr, 200, "ready").await;
    items.insert_one(doc! { "_id": 1 }).await.unwrap();

    // THEN it is not ready, naming the topic and the namespace, and the episode is counted
    let body = readyz_until(addr, 503, "does not exist").await;
    assert!(
        body.contains(&format!(
            "topic {missing:?} does not exist (for namespace {db}.items)"
        )),
        "{body}"
    );
    // AND once the persistent attempts are spent, the pipeline fails alone: named in /readyz
    let body = readyz_until(addr, 503, "pipeline events: failed:").await;
    assert!(body.contains("SIGHUP"), "{body}");
    let (_, metrics) = get(addr, "/metrics").await;
    let failed = "mongo_kafka_bridge_pipeline_failed{pipeline=\"events\"}";
    let counted = "mongo_kafka_bridge_topic_missing_total{pipeline=\"events\"}";
    assert_eq!(metric(&metrics, failed), Some(1.0), "{metrics}");
    assert_eq!(
        metric(&metrics, counted),
        Some(1.0),
        "once per episode: {metrics}"
    );
    let orders_failed = "mongo_kafka_bridge_pipeline_failed{pipeline=\"orders\"}";
    assert_eq!(metric(&metrics, orders_failed), Some(0.0), "{metrics}");
    // AND `offsets list` and `check` show the failure, from the offsets document
    let (_, listed, _) = bridge_cli(&["offsets", "list"], file.path());
    let row = listed
        .lines()
        .find(|l| l.starts_with("events "))
        .unwrap_or_default();
    assert!(row.contains("failed at"), "{listed}");
    let (_, checked, _) = bridge_cli(&["check"], file.path());
    assert!(
        checked.contains("pipeline events: its last owner stopped it on a failure"),
        "{checked}"
    );
    // AND the other pipeline still delivers
    let orders = client
        .database(&other)
        .collection::<bson::Document>("orders");
    orders.insert_one(doc! { "_id": 7 }).await.unwrap();
    let got = collect_from(&instance.kafka, &healthy, 1, Duration::ZERO, WAIT).await;
    assert_eq!(got.len(), 1, "the healthy pipeline's record");

    // WHEN the topic is created and the configuration is reloaded (SIGHUP)
    create_topic_at(&instance.kafka, &missing, 1, &[]).await;
    let plan = bridge.reloader().reload(file.path()).expect("reload");
    assert_eq!(plan.retried, vec!["events".to_owned()]);
    // THEN the pipeline runs again from its committed position: the event is not lost
    readyz_until(addr, 200, "ready").await;
    let got = collect_from(&instance.kafka, &missing, 1, Duration::ZERO, WAIT).await;
    assert!(
        got.iter()
            .any(|r| r.key.as_deref().is_some_and(|k| k.contains('1'))),
        "the event written while the topic was missing: {got:?}"
    );
    let (_, metrics) = get(addr, "/metrics").await;
    assert_eq!(metric(&metrics, failed), Some(0.0), "{metrics}");
    bridge.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_on_pipeline_failure_exit_one_failed_pipeline_stops_the_process() {
    let Some(_turn) = turn("isolation").await else {
        return;
    };
    let Some(instance) = Instance::managed("isolation-exit", &["--auto-create", "off"]) else {
        return;
    };
    // GIVEN the same two pipelines, with on_pipeline_failure = "exit"
    let (db, other) = (unique("isox"), unique("isoxok"));
    create_topic_at(&instance.kafka, &format!("{other}.orders"), 1, &[]).await;
    let bridge = mongo_kafka_bridge::Bridge::start(config(&toml(&instance, &db, &other, "exit")))
        .await
        .unwrap();
    readyz_until(bridge.metrics_addr(), 200, "ready").await;
    // WHEN a document goes to a namespace whose topic does not exist
    let client = mongodb::Client::with_uri_str(&instance.mongo_uri)
        .await
        .unwrap();
    let items = client.database(&db).collection::<bson::Document>("items");
    items.insert_one(doc! { "_id": 1 }).await.unwrap();
    // THEN the whole process stops with the unknown-topic error
    let ended = tokio::time::timeout(WAIT, bridge.wait())
        .await
        .expect("the process stops once the pipeline fails");
    let error = ended.expect_err("a failed pipeline is an error");
    assert!(
        format!("{error:?}").contains("UnknownTopicOrPartition"),
        "{error:?}"
    );
}
