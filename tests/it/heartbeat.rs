//! Heartbeats on the real servers (`heartbeat_interval_ms`, README "Heartbeats"): on an idle
//! stream a record arrives on the heartbeat topic every interval, carrying the committed
//! `clusterTime`, across a restart; exactly once, each rides in a committed transaction with
//! the progress record and a `read_committed` consumer sees it.
//!
//! SecantusDB (../shared/INFRA.md): its post-batch resume token does not advance while the
//! stream is idle, so `positionTime` stands still here between heartbeats; on mongod it moves
//! with the token and every heartbeat commits the newer one. The tests assert only what holds
//! on both: the heartbeats' arrival, spacing and `clusterTime`.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongo_kafka_bridge::Bridge;

use crate::common::bridge::start_opened;
use crate::common::collect::{Received, collect, records};
use crate::common::config::config_toml;
use crate::common::kafka::{Isolation, scan};
use crate::common::mongo::{mongo, offsets_doc};
use crate::common::servers::kafka_bootstrap;
use crate::common::{eventually, unique};

const WAIT: Duration = Duration::from_secs(60);

/// A collection pipeline `name` with heartbeats every second to `<db>.hb` (created by the
/// bridge) and `extra` lines.
fn heartbeat_config(name: &str, db: &str, extra: &str) -> String {
    let lines = format!(
        "heartbeat_interval_ms = 1000\nheartbeat_topic = \"{db}.hb\"\n{extra}\
         [kafka.topic_creation]\nenabled = true\npartitions = 1\n"
    );
    config_toml(name, db, Some("t"), &lines)
}

/// `{"t":…,"i":…}` of a relaxed Extended JSON timestamp, as the header writes it.
fn time_text(value: &serde_json::Value) -> Option<String> {
    let t = &value["$timestamp"];
    Some(format!("{}.{}", t["t"].as_u64()?, t["i"].as_u64()?))
}

/// Inserts one document into `db.t` and returns its record's `mongo.cluster_time`.
async fn one_event(db: &str) -> String {
    let coll = mongo().await.database(db).collection::<Document>("t");
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    let got = collect(&format!("{db}.t"), 1, WAIT).await;
    got[0].header("mongo.cluster_time").unwrap().to_owned()
}

/// The heartbeats of `db.hb` (every one, oldest first) once `min` of them carry `cluster`.
async fn beats_carrying(db: &str, cluster: &str, min: usize) -> Vec<Received> {
    let topic = format!("{db}.hb");
    eventually(
        WAIT,
        "heartbeats carrying the committed clusterTime",
        || async {
            let all = records(&topic, 1, WAIT).await;
            let carrying = all
                .iter()
                .filter(|r| time_text(&r.json()["clusterTime"]).as_deref() == Some(cluster))
                .count();
            (carrying >= min).then_some(all)
        },
    )
    .await
}

fn heartbeats_total(bridge: &Bridge, pipeline: &str) -> u64 {
    let text = bridge.metrics().render();
    let series = format!("mongo_kafka_bridge_heartbeats_total{{pipeline=\"{pipeline}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_stream_writes_a_heartbeat_every_interval_with_the_committed_cluster_time() {
    // GIVEN an at-least-once pipeline with heartbeats every second, and one event read
    let db = unique("hb");
    let text = heartbeat_config("hb", &db, "");
    let bridge = start_opened(&text, &db, "hb").await;
    let cluster = one_event(&db).await;
    // WHEN the stream stays idle
    let beats = beats_carrying(&db, &cluster, 3).await;
    // THEN heartbeats keep coming, keyed by the pipeline, carrying the committed clusterTime,
    // at least an interval apart; the offsets document holds the same clusterTime
    for b in &beats {
        assert_eq!(b.key.as_deref(), Some(r#"{"pipeline":"hb"}"#));
        assert_eq!(b.json()["pipeline"], "hb");
        assert_eq!(b.header("mongo.operation_type"), Some("heartbeat"));
    }
    let wall = |r: &Received| {
        let text = r.json()["wallTime"]["$date"].as_str().unwrap().to_owned();
        chrono::DateTime::parse_from_rfc3339(&text)
            .unwrap()
            .timestamp_millis()
    };
    for pair in beats.windows(2) {
        let gap = wall(&pair[1]) - wall(&pair[0]);
        assert!(gap >= 900, "heartbeats {gap} ms apart, interval 1000 ms");
    }
    let last = beats.last().unwrap();
    assert_eq!(last.header("mongo.cluster_time"), Some(cluster.as_str()));
    let offsets = offsets_doc(&mongo().await, &db, "hb").await.unwrap();
    let committed = offsets.get_timestamp("clusterTime").unwrap();
    assert_eq!(
        format!("{}.{}", committed.time, committed.increment),
        cluster
    );
    assert!(heartbeats_total(&bridge, "hb") >= 3);
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // AND after a restart with no new event, the heartbeats name the committed position
    let restarted = chrono::Utc::now().timestamp_millis();
    let bridge = start_opened(&text, &db, "hb").await;
    let after = eventually(WAIT, "a heartbeat after the restart", || async {
        let all = records(&format!("{db}.hb"), 1, WAIT).await;
        all.into_iter().find(|r| wall(r) > restarted)
    })
    .await;
    assert_eq!(time_text(&after.json()["clusterTime"]), Some(cluster));
    bridge.shutdown();
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_heartbeats_are_committed_in_transactions_for_read_committed_consumers() {
    // GIVEN an exactly-once pipeline with heartbeats every second, and one event read
    let db = unique("hbeos");
    let text = heartbeat_config("hbeos", &db, "delivery = \"exactly_once\"\n");
    let bridge = start_opened(&text, &db, "hbeos").await;
    let cluster = one_event(&db).await;
    let client = mongo().await;
    let sequence = |d: &Document| d.get_i64("commitSequence").unwrap_or(0);
    let before = sequence(&offsets_doc(&client, &db, "hbeos").await.unwrap());
    // WHEN the stream stays idle
    // THEN a read_committed consumer sees heartbeats carrying the committed clusterTime (a
    // transactional producer can write a record only inside a transaction), and each
    // committed one more transaction, whose sequence the offsets document records
    let topic = format!("{db}.hb");
    let started = Instant::now();
    let seen = eventually(WAIT, "3 committed heartbeats", || {
        let topic = topic.clone();
        let cluster = cluster.clone();
        async move {
            let read = tokio::task::spawn_blocking(move || {
                let mut carrying = 0;
                scan(&kafka_bootstrap(), &topic, Isolation::Committed, |m| {
                    use rdkafka::message::Message;
                    let value: serde_json::Value =
                        serde_json::from_slice(m.payload().unwrap()).unwrap();
                    if time_text(&value["clusterTime"]).as_deref() == Some(cluster.as_str()) {
                        carrying += 1;
                    }
                });
                carrying
            });
            let carrying = read.await.unwrap();
            (carrying >= 3).then_some(carrying)
        }
    })
    .await;
    assert!(seen >= 3, "{seen} heartbeats in {:?}", started.elapsed());
    let after = eventually(
        WAIT,
        "the heartbeats' commits in the offsets document",
        || async {
            let doc = offsets_doc(&client, &db, "hbeos").await?;
            (sequence(&doc) >= before + 3).then_some(doc)
        },
    )
    .await;
    let committed = after.get_timestamp("clusterTime").unwrap();
    assert_eq!(
        format!("{}.{}", committed.time, committed.increment),
        cluster
    );
    assert!(heartbeats_total(&bridge, "hbeos") >= 3);
    bridge.shutdown();
}
