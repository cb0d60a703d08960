//! The failure policies of `docs/RELIABILITY.md`, proved against real servers: history lost
//! (C01), resumable server errors, invalidation (C07), large events (C10, C11), oversized
//! records (C12), missing required images and unwatchable namespaces (C15, C23), and Kafka
//! faults from librdkafka's mock cluster (C05, C28).
//!
//! Tests that need their own server instance (a small oplog, fail points) start one with
//! `scripts/services --name` and skip with a printed reason unless `MKB_SERVICES_MANAGED=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::ErrorClass;
use mongo_kafka_bridge::observe::metrics::{
    DELIVERY_ERRORS, ERRORS, MESSAGES_ENQUEUED, Metrics, RESTARTS,
};
use mongodb::Client;
use rdkafka::types::RDKafkaErrorCode;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(30);
/// The bridge's MongoDB `appName`: fail points match it only, so the test's own commands pass.
/// The bridge's MongoDB `appName` (its default), which fail points name.
pub(crate) const APP_NAME: &str = "mongo-kafka-bridge";

// ------------------------------------------------------------------------------- helpers

/// A MongoDB server of this test alone (`scripts/services up --only mongo --name …`), stopped
/// and wiped on drop, also when the test fails.
pub struct Server {
    script: PathBuf,
    name: String,
    uri: String,
}

impl Server {
    /// Starts the instance, or `None` (reason printed) when the servers are not ours to manage.
    pub fn mongo(test: &str, extra: &[&str]) -> Option<Self> {
        let script = services_managed()?;
        let mut server = Self {
            script,
            name: format!("pol-{test}-{}", std::process::id()),
            uri: String::new(),
        };
        let out = Command::new(&server.script)
            .args([
                "up",
                "--fresh",
                "--plain",
                "--only",
                "mongo",
                "--name",
                &server.name,
            ])
            .args(extra)
            .output()
            .expect("run scripts/services");
        assert!(
            out.status.success(),
            "scripts/services up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        server.uri = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("MONGODB_URI="))
            .map(|v| v.trim_matches(['\'', '"']).to_owned())
            .expect("MONGODB_URI in the output of scripts/services up");
        Some(server)
    }

    pub async fn client(&self) -> Client {
        Client::with_uri_str(&self.uri).await.unwrap()
    }

    /// `config_toml` pointed at this server.
    pub fn config(&self, name: &str, db: &str, coll: Option<&str>, extra: &str) -> String {
        config_toml(name, db, coll, extra).replace(&mongo_uri(), &self.uri)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new(&self.script)
            .args(["down", "--wipe", "--name", &self.name])
            .output();
    }
}

/// Sets (or replaces) librdkafka properties in a `config_toml` text.
fn with_props(text: &str, props: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let key = line
            .split('=')
            .next()
            .unwrap_or("")
            .trim()
            .trim_matches('"');
        if props.iter().any(|(k, _)| *k == key) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
        if line.trim() == "[kafka.properties]" {
            for (k, v) in props {
                out.push_str(&format!("\"{k}\" = \"{v}\"\n"));
            }
        }
    }
    out
}

/// Records of `topic` on `bootstrap`: at least `min`, then until nothing more arrived for
/// 500 ms (so unexpected extra records are seen), or `timeout`. (Callers first wait for the
/// commit, so every record is written.)
async fn collect_at(bootstrap: &str, topic: &str, min: usize, timeout: Duration) -> Vec<Received> {
    collect_from(bootstrap, topic, min, Duration::from_millis(500), timeout).await
}

/// [`collect_at`] on the Kafka under test.
async fn records(topic: &str, min: usize, timeout: Duration) -> Vec<Received> {
    collect_at(&kafka_bootstrap(), topic, min, timeout).await
}

/// Sum of a counter family's series of `pipeline` whose labels contain every `labels` pair.
fn counter(metrics: &Metrics, family: &str, pipeline: &str, labels: &[(&str, &str)]) -> f64 {
    let pipeline_label = format!("pipeline=\"{pipeline}\"");
    metrics
        .render()
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(&pipeline_label))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        + 0.0 // an empty sum is -0.0
}

fn restarts(metrics: &Metrics, pipeline: &str) -> f64 {
    counter(metrics, RESTARTS, pipeline, &[])
}

/// `configureFailPoint failCommand` on the server of `client`, for the bridge's commands only.
async fn fail_command(client: &Client, times: i32, commands: &[&str], code: i32, labels: &[&str]) {
    let mut data = doc! { "failCommands": commands, "errorCode": code, "appName": APP_NAME };
    if !labels.is_empty() {
        data.insert("errorLabels", labels);
    }
    client
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand", "mode": { "times": times }, "data": data,
        })
        .await
        .unwrap();
}

async fn fail_point_off(client: &Client) {
    client
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .unwrap();
}

#[derive(serde::Deserialize)]
struct Token {
    t: mongodb::change_stream::event::ResumeToken,
}

fn resume_token(offsets: &Document) -> mongodb::change_stream::event::ResumeToken {
    let token = offsets.get_document("resumeToken").unwrap().clone();
    bson::from_bson::<Token>(Bson::Document(doc! { "t": token }))
        .unwrap()
        .t
}

/// The first event after `offsets`' committed token on `db.coll` (fragments kept as they are
/// when `split`), as a plain document.
async fn first_event_after(
    client: &Client,
    db: &str,
    coll: &str,
    offsets: &Document,
    split: bool,
) -> Document {
    let stages = if split {
        vec![doc! { "$changeStreamSplitLargeEvent": {} }]
    } else {
        vec![]
    };
    let mut stream = client
        .database(db)
        .collection::<Document>(coll)
        .watch()
        .pipeline(stages)
        .start_after(resume_token(offsets))
        .max_await_time(Duration::from_millis(200))
        .await
        .unwrap()
        .with_type::<Document>();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(event) = stream.next_if_any().await.unwrap() {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no event after the committed token"
        );
    }
}

fn events_committed(offsets: &Document) -> i64 {
    offsets.get_i64("eventsCommitted").unwrap()
}

/// Waits for `bridge` to stop on its own within `timeout`; its result.
async fn stops_within(
    bridge: mongo_kafka_bridge::Bridge,
    timeout: Duration,
) -> Result<(), BridgeError> {
    tokio::time::timeout(timeout, bridge.wait())
        .await
        .unwrap_or_else(|_| panic!("the bridge did not stop within {timeout:?}"))
}

fn key_of(id: i32) -> String {
    format!(r#"{{"_id":{{"$numberInt":"{id}"}}}}"#)
}

/// Writes `count` filler documents (one oplog entry each) into `db.filler`.
pub async fn fill_oplog(client: &Client, db: &str, count: i32) {
    let filler = client.database(db).collection::<Document>("filler");
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        filler
            .insert_many(chunk.iter().map(|i| doc! { "i": *i }))
            .await
            .unwrap();
    }
}

// ------------------------------------------------------------------------------- C01

/// Runs the bridge until the insert of `_id: 1` is committed, stops it, then rolls the oplog
/// past that position (1500 entries > the cap of 1000) and writes `_id: 2`. Returns the offsets
/// document as the stopped bridge left it.
async fn commit_then_lose_history(server: &Server, text: &str, db: &str, name: &str) -> Document {
    let client = server.client().await;
    let bridge = start_bridge(text).await;
    wait_offsets(&client, db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    wait_offsets(&client, db, name, WAIT, |d| events_committed(d) == 1).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let committed = offsets_doc(&client, db, name).await.unwrap();
    fill_oplog(&client, db, 1500).await;
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    committed
}

#[tokio::test(flavor = "multi_thread")]
async fn c01_history_lost_fails_by_default_and_keeps_the_offset() {
    let Some(server) = Server::mongo("c01fail", &["--oplog-max-entries", "1000"]) else {
        return;
    };
    // GIVEN a pipeline (default on_history_lost = "fail") whose committed position fell off
    // the oplog while it was stopped
    let (db, name) = (unique("c01f"), "c01f");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let text = server.config(name, &db, Some("orders"), "");
    let before = commit_then_lose_history(&server, &text, &db, name).await;
    // WHEN it starts again
    let started = Instant::now();
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    let result = stops_within(bridge, Duration::from_secs(10)).await;
    // THEN it stops with HistoryLost naming the pipeline and the committed clusterTime
    let error = result.expect_err("history lost must stop the bridge");
    let committed_time = before.get_timestamp("clusterTime").unwrap();
    match &error {
        BridgeError::HistoryLost {
            pipeline,
            cluster_time,
            ..
        } => {
            assert_eq!(pipeline, name);
            assert_eq!(
                cluster_time,
                &format!("{}.{}", committed_time.time, committed_time.increment)
            );
        }
        other => panic!("expected HistoryLost, got {other:?}"),
    }
    assert_eq!(error.class(), ErrorClass::Fatal);
    let text = error.to_string();
    assert!(text.contains("offsets reset c01f --to-now"), "{text}");
    // AND it was one attempt: no restart, one fatal history_lost error
    assert_eq!(restarts(&metrics, name), 0.0);
    let fatal = [("stage", "history_lost"), ("class", "fatal")];
    assert_eq!(counter(&metrics, ERRORS, name, &fatal), 1.0);
    // AND the offsets document still holds the old position, and nothing new was published
    let after = offsets_doc(&server.client().await, &db, name)
        .await
        .unwrap();
    assert_eq!(after.get("resumeToken"), before.get("resumeToken"));
    assert_eq!(after.get("clusterTime"), before.get("clusterTime"));
    assert_eq!(events_committed(&after), 1);
    let records = records(&topic, 1, WAIT).await;
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(1)]);
    eprintln!(
        "c01 fail: stopped {:?} after the restart",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c01_history_lost_from_a_fail_point_is_fatal_and_resumable_later() {
    let Some(server) = Server::mongo("c01fp", &[]) else {
        return;
    };
    // GIVEN a pipeline with a committed position, stopped, and _id 2 written meanwhile
    let (db, name) = (unique("c01p"), "c01p");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let client = server.client().await;
    let text = server.config(name, &db, Some("orders"), "");
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let before = offsets_doc(&client, &db, name).await.unwrap();
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    // WHEN the resuming aggregate fails once with ChangeStreamHistoryLost (286)
    fail_command(&client, 1, &["aggregate"], 286, &[]).await;
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    let error = stops_within(bridge, Duration::from_secs(10))
        .await
        .expect_err("286 must stop the bridge");
    fail_point_off(&client).await;
    // THEN the pipeline stopped at once with HistoryLost, offsets untouched
    assert!(
        matches!(&error, BridgeError::HistoryLost { pipeline, .. } if pipeline == name),
        "{error:?}"
    );
    assert_eq!(restarts(&metrics, name), 0.0);
    let after = offsets_doc(&client, &db, name).await.unwrap();
    assert_eq!(after.get("resumeToken"), before.get("resumeToken"));
    // AND once the server accepts the token again, nothing was skipped: _id 2 arrives
    let bridge = start_bridge(&text).await;
    let records = records(&topic, 2, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(1), key_of(2)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn c01_history_lost_with_skip_publishes_gap_markers_to_every_partition() {
    let Some(server) = Server::mongo("c01skip", &["--oplog-max-entries", "1000"]) else {
        return;
    };
    // GIVEN a pipeline with on_history_lost = "skip" on a 3-partition topic, whose committed
    // position fell off the oplog while it was stopped (_id 2 written in that time)
    let (db, name) = (unique("c01s"), "c01s");
    let topic = format!("{db}.orders");
    create_topic(&topic, 3).await;
    let text = server.config(name, &db, Some("orders"), "on_history_lost = \"skip\"\n");
    let before = commit_then_lose_history(&server, &text, &db, name).await;
    let from = before.get_timestamp("clusterTime").unwrap();
    // WHEN it starts again
    let bridge = start_bridge(&text).await;
    let client = server.client().await;
    // THEN the offsets move to a new position (a new token, no pending start time)
    let moved = wait_offsets(&client, &db, name, Duration::from_secs(10), |d| {
        d.contains_key("resumeToken")
            && d.get("resumeToken") != before.get("resumeToken")
            && !d.contains_key("startAtOperationTime")
    })
    .await;
    // AND a write after the restart is delivered
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 3 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 2).await;
    let records = records(&topic, 5, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // AND exactly one gap marker went to each of the 3 partitions
    let gap_key = format!(r#"{{"pipeline":"{name}"}}"#);
    let markers: Vec<_> = records
        .iter()
        .filter(|r| r.key.as_deref() == Some(gap_key.as_str()))
        .collect();
    let partitions: BTreeSet<i32> = markers.iter().map(|r| r.partition).collect();
    assert_eq!(markers.len(), 3, "{records:#?}");
    assert_eq!(partitions, BTreeSet::from([0, 1, 2]));
    for marker in &markers {
        assert_eq!(marker.header("mongo.operation_type"), Some("gap"));
        let value = marker.json();
        assert_eq!(value["operationType"], "gap");
        assert_eq!(value["pipeline"], name);
        assert_eq!(
            value["from"],
            serde_json::json!({"$timestamp": {"t": from.time, "i": from.increment}})
        );
        let to = value["to"]["$timestamp"]["t"].as_u64().unwrap();
        assert!(to >= u64::from(from.time), "{value}");
        assert!(
            value["reason"].as_str().unwrap().contains("oplog"),
            "{value}"
        );
    }
    // AND the data records are _id 1 (before) and _id 3 (after); _id 2 was skipped, as chosen
    let data: Vec<_> = records
        .iter()
        .filter(|r| r.key.as_deref() != Some(gap_key.as_str()))
        .map(|r| r.key.clone().unwrap())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(data, vec![key_of(1), key_of(3)]);
    assert_eq!(records.len(), 5, "{records:#?}");
    let to = markers[0].json()["to"]["$timestamp"]["t"].as_u64().unwrap();
    let position = moved.get_timestamp("positionTime").unwrap();
    assert!(u64::from(position.time) >= to, "{moved:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn c01_history_lost_mid_stream_names_the_last_committed_position() {
    let Some(server) = Server::mongo("c01mid", &[]) else {
        return;
    };
    let client = server.client().await;
    for policy in ["fail", "skip"] {
        // GIVEN a running pipeline that committed two events since it started
        let (db, name) = (unique("c01m"), format!("c01m{policy}"));
        let topic = format!("{db}.orders");
        create_topic(&topic, 1).await;
        let extra = format!("on_history_lost = \"{policy}\"\n");
        let text = server.config(&name, &db, Some("orders"), &extra);
        let bridge = start_bridge(&text).await;
        let metrics = bridge.metrics().clone();
        wait_offsets(&client, &db, &name, WAIT, |d| d.contains_key("resumeToken")).await;
        let orders = client.database(&db).collection::<Document>("orders");
        orders.insert_one(doc! { "_id": 1 }).await.unwrap();
        orders.insert_one(doc! { "_id": 2 }).await.unwrap();
        let committed = wait_offsets(&client, &db, &name, WAIT, |d| events_committed(d) == 2).await;
        let last = committed.get_timestamp("clusterTime").unwrap();
        // WHEN the server answers its next getMore with ChangeStreamHistoryLost (286)
        fail_command(&client, 1, &["getMore"], 286, &[]).await;
        if policy == "fail" {
            // THEN it stops naming the last committed clusterTime, not the one it started at
            let error = stops_within(bridge, Duration::from_secs(10))
                .await
                .expect_err("286 must stop the bridge");
            match &error {
                BridgeError::HistoryLost { cluster_time, .. } => {
                    assert_eq!(cluster_time, &format!("{}.{}", last.time, last.increment));
                }
                other => panic!("expected HistoryLost, got {other:?}"),
            }
            assert_eq!(restarts(&metrics, &name), 0.0);
        } else {
            // THEN the gap marker starts at the last committed clusterTime
            let gap_key = format!(r#"{{"pipeline":"{name}"}}"#);
            let records = records(&topic, 3, WAIT).await;
            bridge.shutdown();
            bridge.wait().await.unwrap();
            let markers: Vec<_> = records
                .iter()
                .filter(|r| r.key.as_deref() == Some(gap_key.as_str()))
                .collect();
            assert_eq!(markers.len(), 1, "{records:#?}");
            assert_eq!(
                markers[0].json()["from"],
                serde_json::json!({"$timestamp": {"t": last.time, "i": last.increment}})
            );
            // AND the marker went through the pipeline's own producer: it is counted with the
            // two events' records
            let enqueued = counter(&metrics, MESSAGES_ENQUEUED, &name, &[("topic", &topic)]);
            assert_eq!(enqueued, 3.0);
        }
        fail_point_off(&client).await;
    }
}

// ------------------------------------------------------------------------------- resumable

#[tokio::test(flavor = "multi_thread")]
async fn resumable_errors_on_get_more_and_aggregate_lose_nothing() {
    let Some(server) = Server::mongo("resumable", &[]) else {
        return;
    };
    // GIVEN a running pipeline on a 3-partition topic
    let (db, name) = (unique("resum"), "resum");
    let topic = format!("{db}.orders");
    create_topic(&topic, 3).await;
    let client = server.client().await;
    // A NotWritablePrimary marks the server Unknown in the driver (SDAM); without a real
    // election the driver selects it again only at its next heartbeat (10 s by default).
    let uri = format!("{}&heartbeatFrequencyMS=500", server.uri);
    let text = server
        .config(name, &db, Some("orders"), "")
        .replace(&server.uri, &uri);
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    // WHEN a steady load (insert then update of each document) runs while the bridge's
    // getMore fails once with NotWritablePrimary, then once with
    // InterruptedDueToReplStateChange (the driver resumes by itself: no pipeline restart),
    // then its getMore and the resuming aggregates fail 4 and 8 times in a row (the driver
    // retries the aggregate once, then the pipeline restarts from its committed token)
    const PER_PHASE: i32 = 40;
    let label = ["ResumableChangeStreamError"];
    let phases: [(i32, &[&str], i32, f64); 5] = [
        (1, &["getMore"], 10107, 0.0),
        (1, &["getMore"], 11602, 0.0),
        (4, &["getMore", "aggregate"], 10107, 1.0),
        (8, &["getMore", "aggregate"], 10107, 2.0),
        (0, &[], 0, 2.0),
    ];
    let (mut id, mut probes) = (0, 0);
    for (times, commands, code, expected_restarts) in phases {
        for _ in 0..PER_PHASE {
            orders.insert_one(doc! { "_id": id, "v": 0 }).await.unwrap();
            orders
                .update_one(doc! { "_id": id }, doc! { "$set": { "v": 1 } })
                .await
                .unwrap();
            id += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if times > 0 {
            fail_command(&client, times, commands, code, &label).await;
            // the bridge reads this probe with a getMore issued after the fail point was set
            probes += 1;
            orders.insert_one(doc! { "_id": -probes }).await.unwrap();
            let events = i64::from(2 * id + probes);
            wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) >= events).await;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while restarts(&metrics, name) < expected_restarts && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // exactly none while the driver resumes by itself; then at least one per run of
        // failures (4 and 8 failures make 1 and 3 restarts on an idle machine)
        let restarts = restarts(&metrics, name);
        let what = format!("after {times}x {commands:?} {code}: {restarts} restarts");
        if expected_restarts == 0.0 {
            assert_eq!(restarts, 0.0, "{what}");
        } else {
            assert!(restarts >= expected_restarts, "{what}");
        }
    }
    fail_point_off(&client).await;
    let total = id;
    // THEN every write is delivered, each document's insert before its update
    wait_offsets(&client, &db, name, WAIT, |d| {
        events_committed(d) >= i64::from(2 * total + probes)
    })
    .await;
    let records = records(&topic, (2 * total + probes) as usize, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let groups = by_key(&records);
    let expected: BTreeSet<String> = (-probes..total).map(key_of).collect();
    assert_eq!(groups.keys().cloned().collect::<BTreeSet<_>>(), expected);
    // (the probes, negative _ids, have an insert only)
    for (key, group) in groups.iter().filter(|(k, _)| !k.contains('-')) {
        let mut firsts: Vec<&str> = Vec::new();
        for r in group {
            let op = r.header("mongo.operation_type").unwrap();
            if !firsts.contains(&op) {
                firsts.push(op);
            }
        }
        assert_eq!(firsts, vec!["insert", "update"], "{key}");
    }
    eprintln!(
        "resumable: {} writes, {} records ({} duplicates), {} pipeline restarts",
        2 * total + probes,
        records.len(),
        records.len() - (2 * total + probes) as usize,
        restarts(&metrics, name)
    );
}

// ------------------------------------------------------------------------------- C07

/// Operation types and keys of `records` in order, each (type, key) pair at its first
/// occurrence only: a restart before the commit may repeat events (at-least-once).
fn first_occurrences(records: &[Received]) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    for r in records {
        let op = r.header("mongo.operation_type").unwrap().to_owned();
        let entry = (op, r.key.clone().unwrap());
        if !seen.contains(&entry) {
            seen.push(entry);
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn c07_rename_is_published_and_a_recreated_collection_is_followed() {
    // GIVEN a collection-scope pipeline on db.orders
    let (db, name) = (unique("c07"), "c07");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let client = mongo().await;
    let bridge = start_bridge(&config_toml(name, &db, Some("orders"), "")).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let database = client.database(&db);
    let orders = database.collection::<Document>("orders");
    // WHEN a document is inserted, the collection renamed, then re-created by an insert
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    client
        .database("admin")
        .run_command(doc! {
            "renameCollection": format!("{db}.orders"), "to": format!("{db}.orders_old"),
        })
        .await
        .unwrap();
    let invalidated = wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) >= 3).await;
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    let events = events_committed(&invalidated) + 1;
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == events).await;
    let records = records(&topic, 4, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN insert, rename (keyed by ns), invalidate, then the new collection's insert
    let ns_key = format!(r#"{{"db":"{db}","coll":"orders"}}"#);
    let expected = vec![
        ("insert".to_owned(), key_of(1)),
        ("rename".to_owned(), ns_key),
        (
            "invalidate".to_owned(),
            format!(r#"{{"pipeline":"{name}"}}"#),
        ),
        ("insert".to_owned(), key_of(2)),
    ];
    assert_eq!(first_occurrences(&records), expected);
    let rename = records
        .iter()
        .find(|r| r.header("mongo.operation_type") == Some("rename"));
    assert_eq!(
        rename.unwrap().json()["to"],
        serde_json::json!({"db": db, "coll": "orders_old"})
    );
    // AND the write after the invalidate arrives exactly once (startAfter, not a replay)
    let after = records
        .iter()
        .filter(|r| r.key.as_deref() == Some(key_of(2).as_str()));
    assert_eq!(after.count(), 1);
    // AND the stream was reopened after the invalidate, never treated as fatal
    let reopened = restarts(&metrics, name);
    assert!(reopened >= 1.0, "{reopened}");
    assert_eq!(counter(&metrics, ERRORS, name, &[("class", "fatal")]), 0.0);
    if records.len() > 4 {
        eprintln!(
            "c07 rename: {} records (events before the invalidate repeated)",
            records.len()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c07_drop_database_on_a_database_pipeline_is_published_and_followed() {
    // GIVEN a database-scope pipeline writing to one topic
    let (db, name) = (unique("c07d"), "c07d");
    let topic = format!("{db}.all");
    create_topic(&topic, 1).await;
    let client = mongo().await;
    let extra = format!("topic = \"{topic}\"\n");
    let bridge = start_bridge(&config_toml(name, &db, None, &extra)).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN a document is written, the database dropped, then written to again
    let database = client.database(&db);
    database
        .collection::<Document>("a")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
    database.drop().await.unwrap();
    // The offsets database is another one, so the pipeline's position survives the drop.
    let invalidated = wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) >= 4).await;
    database
        .collection::<Document>("b")
        .insert_one(doc! { "_id": 2 })
        .await
        .unwrap();
    let events = events_committed(&invalidated) + 1;
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == events).await;
    let records = records(&topic, 5, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN insert, drop, dropDatabase, invalidate, then the new insert (exactly once)
    let expected = vec![
        ("insert".to_owned(), key_of(1)),
        ("drop".to_owned(), format!(r#"{{"db":"{db}","coll":"a"}}"#)),
        ("dropDatabase".to_owned(), format!(r#"{{"db":"{db}"}}"#)),
        (
            "invalidate".to_owned(),
            format!(r#"{{"pipeline":"{name}"}}"#),
        ),
        ("insert".to_owned(), key_of(2)),
    ];
    assert_eq!(first_occurrences(&records), expected);
    let after = records
        .iter()
        .filter(|r| r.key.as_deref() == Some(key_of(2).as_str()));
    assert_eq!(after.count(), 1);
    let reopened = restarts(&metrics, name);
    assert!(reopened >= 1.0, "{reopened}");
}

// ------------------------------------------------------------------------------- C10, C11

#[tokio::test(flavor = "multi_thread")]
async fn c10_c11_a_split_update_is_reassembled_into_one_record() {
    // GIVEN a collection with pre- and post-images, a topic and producer allowing 50 MB
    // records, and a pipeline asking for both images as required
    let (db, name) = (unique("c11"), "c11");
    let topic = format!("{db}.docs");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "50000000")],
    )
    .await;
    let client = mongo().await;
    let database = client.database(&db);
    database
        .run_command(doc! { "create": "docs", "changeStreamPreAndPostImages": { "enabled": true } })
        .await
        .unwrap();
    let extra = "full_document = \"required\"\nfull_document_before_change = \"required\"\n";
    let text = with_props(
        &config_toml(name, &db, Some("docs"), extra),
        &[("message.max.bytes", "50000000")],
    );
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // (our own stream, to see the fragments the server makes)
    let docs = database.collection::<Document>("docs");
    let mut witness = docs
        .watch()
        .pipeline([doc! { "$changeStreamSplitLargeEvent": {} }])
        .full_document(mongodb::options::FullDocumentType::Required)
        .full_document_before_change(mongodb::options::FullDocumentBeforeChangeType::Required)
        .max_await_time(Duration::from_millis(200))
        .await
        .unwrap()
        .with_type::<Document>();
    // WHEN a ~6 MB document is inserted and another ~6 MB field is set on it
    const MB6: usize = 6 * 1024 * 1024;
    docs.insert_one(doc! { "_id": 1, "x": "a".repeat(MB6) })
        .await
        .unwrap();
    docs.update_one(doc! { "_id": 1 }, doc! { "$set": { "y": "b".repeat(MB6) } })
        .await
        .unwrap();
    // THEN the server split the update (2 or more fragments: 3 on SecantusDB)
    let mut fragments = Vec::new();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        let Some(event) = witness.next_if_any().await.unwrap() else {
            continue;
        };
        if event.get_str("operationType") == Ok("update") {
            let split = event.get_document("splitEvent").unwrap().clone();
            let (n, of) = (
                split.get_i32("fragment").unwrap(),
                split.get_i32("of").unwrap(),
            );
            fragments.push(event.get_document("_id").unwrap().clone());
            if n == of {
                assert_eq!(fragments.len(), of as usize);
                break;
            }
        }
    }
    drop(witness);
    assert!(
        fragments.len() >= 2,
        "the update was not split: {}",
        fragments.len()
    );
    // AND the bridge delivered exactly one record for it, with every part of the event
    wait_offsets(&client, &db, name, Duration::from_secs(60), |d| {
        events_committed(d) == 2
    })
    .await;
    let records = records(&topic, 2, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let ops: Vec<_> = records
        .iter()
        .map(|r| r.header("mongo.operation_type").unwrap())
        .collect();
    assert_eq!(ops, vec!["insert", "update"]);
    let update = &records[1];
    let value = update.json();
    assert_eq!(value["fullDocument"]["x"].as_str().unwrap().len(), MB6);
    assert_eq!(value["fullDocument"]["y"].as_str().unwrap().len(), MB6);
    assert_eq!(
        value["updateDescription"]["updatedFields"]["y"]
            .as_str()
            .unwrap()
            .len(),
        MB6
    );
    assert_eq!(
        value["fullDocumentBeforeChange"]["x"]
            .as_str()
            .unwrap()
            .len(),
        MB6
    );
    assert!(value["fullDocumentBeforeChange"].get("y").is_none());
    assert!(value.get("splitEvent").is_none(), "fragment marker leaked");
    // AND its position is the last fragment's token
    let last = fragments.last().unwrap().get_str("_data").unwrap();
    assert_eq!(update.header("mongo.resume_token"), Some(last));
    assert_eq!(value["_id"]["_data"], last);
    // AND resuming from the committed token yields the next event, not a fragment
    docs.insert_one(doc! { "_id": 2 }).await.unwrap();
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    let next = first_event_after(&client, &db, "docs", &offsets, true).await;
    assert_eq!(next.get_str("operationType").unwrap(), "insert");
    assert_eq!(
        next.get_document("documentKey").unwrap(),
        &doc! { "_id": 2 }
    );
}

// ------------------------------------------------------------------------------- C12

/// Where the 1 MB limit bites: librdkafka's `message.max.bytes` at enqueue, or the topic's
/// `max.message.bytes` at the broker.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Producer,
    Topic,
}

/// Config text and main topic for one C12 variant.
async fn oversize_setup(db: &str, name: &str, limit: Limit, extra: &str) -> (String, String) {
    let topic = format!("{db}.orders");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "1048576")],
    )
    .await;
    let mut text = config_toml(name, db, Some("orders"), extra);
    if let Limit::Topic = limit {
        text = with_props(&text, &[("message.max.bytes", "50000000")]);
    }
    (text, topic)
}

const BLOB: usize = 2 * 1024 * 1024;

async fn oversize_fails(limit: Limit) {
    // GIVEN a pipeline with the default on_oversize = "fail", one small event committed
    let (db, name) = (unique("c12f"), "c12f");
    let (text, topic) = oversize_setup(&db, name, limit, "").await;
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN a ~2 MB document is inserted
    orders
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(BLOB) })
        .await
        .unwrap();
    // THEN the bridge stops with a fatal size refusal (MessageSizeTooLarge) for the topic
    let error = stops_within(bridge, Duration::from_secs(30))
        .await
        .expect_err("an oversized record must stop the bridge");
    match &error {
        BridgeError::Delivery {
            topic: t, source, ..
        } => {
            assert_eq!(t, &topic);
            assert_eq!(
                source.rdkafka_error_code(),
                Some(RDKafkaErrorCode::MessageSizeTooLarge),
                "{limit:?}"
            );
        }
        // (the dedicated variant naming the record, where the build has it)
        other if other.kind() == "oversize" => {
            let text = other.to_string();
            assert!(text.contains(&topic), "{text}");
            assert!(text.contains(&key_of(1)), "{text}");
        }
        other => panic!("{limit:?}: expected a size refusal, got {other:?}"),
    }
    assert_eq!(error.class(), ErrorClass::Fatal);
    assert_eq!(restarts(&metrics, name), 0.0);
    // AND the committed position is before it: resuming yields the big insert
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    assert_eq!(events_committed(&offsets), 1);
    let next = first_event_after(&client, &db, "orders", &offsets, false).await;
    assert_eq!(
        next.get_document("documentKey").unwrap(),
        &doc! { "_id": 1 }
    );
    let records = records(&topic, 1, WAIT).await;
    let keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(0)], "{limit:?}");
}

async fn oversize_goes_to_the_dead_letter_topic(limit: Limit) {
    // GIVEN a pipeline with on_oversize = "dead_letter"
    let (db, name) = (unique("c12d"), "c12d");
    let dlq = format!("{db}.dlq");
    create_topic(&dlq, 1).await;
    let extra = format!("on_oversize = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let (text, topic) = oversize_setup(&db, name, limit, &extra).await;
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN a small, a ~2 MB and another small document are inserted
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    orders
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(BLOB) })
        .await
        .unwrap();
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN all three events are committed
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 3).await;
    let main = records(&topic, 2, WAIT).await;
    let stubs = records(&dlq, 1, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // AND the main topic has the two small events, the dead-letter topic one stub
    let keys: Vec<_> = main.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec![key_of(0), key_of(2)], "{limit:?}");
    assert_eq!(stubs.len(), 1, "{limit:?}: {stubs:#?}");
    let stub = &stubs[0];
    assert_eq!(stub.key.as_deref(), Some(key_of(1).as_str()));
    let names = |r: &Received| {
        r.headers
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<BTreeSet<_>>()
    };
    let mut expected_names = names(&main[0]);
    expected_names.insert("mongo.error".to_owned());
    assert_eq!(names(stub), expected_names, "{limit:?}");
    assert_eq!(stub.header("mongo.operation_type"), Some("insert"));
    assert!(!stub.header("mongo.error").unwrap().is_empty());
    let value = stub.json();
    assert_eq!(
        value["documentKey"],
        serde_json::json!({"_id": {"$numberInt": "1"}})
    );
    assert_eq!(
        value["clusterTime"].as_str(),
        stub.header("mongo.cluster_time")
    );
    assert_eq!(value["topic"], topic);
    assert!(value["size"].as_u64().unwrap() > BLOB as u64, "{value}");
    assert!(
        value["reason"].as_str().unwrap().contains("too large"),
        "{value}"
    );
    assert!(
        stub.value.as_ref().unwrap().len() < 2000,
        "the stub carries no payload"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c12_oversized_record_fails_the_pipeline_by_default() {
    oversize_fails(Limit::Producer).await;
    oversize_fails(Limit::Topic).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn c12_oversized_record_goes_to_the_dead_letter_topic() {
    oversize_goes_to_the_dead_letter_topic(Limit::Producer).await;
    oversize_goes_to_the_dead_letter_topic(Limit::Topic).await;
}

/// A topic whose `max.message.bytes` (50 000) is below the producer's batch bound (librdkafka's
/// 1 000 000): records that fit one by one would be refused batched together.
#[tokio::test(flavor = "multi_thread")]
async fn records_that_fit_a_small_topic_are_delivered_not_refused_as_a_batch() {
    // GIVEN a topic accepting record batches of at most 50 000 bytes, and a running pipeline
    let (db, name) = (unique("batchcap"), "batchcap");
    let topic = format!("{db}.orders");
    create_topic_at(
        &kafka_bootstrap(),
        &topic,
        1,
        &[("max.message.bytes", "50000")],
    )
    .await;
    let client = mongo().await;
    let bridge = start_bridge(&config_toml(name, &db, Some("orders"), "")).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN 30 documents of ~20 KB each arrive at once (600 KB: many records per batch)
    let orders = client.database(&db).collection::<Document>("orders");
    let docs: Vec<Document> = (0..30)
        .map(|id| doc! { "_id": id, "blob": "x".repeat(20_000) })
        .collect();
    orders.insert_many(docs).await.unwrap();
    // THEN every record arrives exactly once, none refused, the bridge still running
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 30).await;
    let received = records(&topic, 30, WAIT).await;
    let mut keys: Vec<String> = received.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort();
    let mut expected: Vec<String> = (0..30).map(key_of).collect();
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(counter(&metrics, DELIVERY_ERRORS, name, &[]), 0.0);
    // AND the producer was rebuilt once, batching at most the topic's limit
    let rebuilt = counter(
        &metrics,
        RESTARTS,
        name,
        &[("reason", "batch_above_topic_limit")],
    );
    assert_eq!((rebuilt, restarts(&metrics, name)), (1.0, 1.0));
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

/// The topic's `max.message.bytes` lowered while the pipeline runs: the broker refuses whole
/// batches of records that each fit; only the record that does not fit is dead-lettered.
#[tokio::test(flavor = "multi_thread")]
async fn a_limit_lowered_while_running_dead_letters_only_what_does_not_fit() {
    // GIVEN a running at-least-once pipeline with a dead-letter topic, its topic at 1 000 000
    let (db, name) = (unique("lowered"), "lowered");
    let (topic, dlq) = (format!("{db}.orders"), format!("{db}.dlq"));
    let kafka = kafka_bootstrap();
    create_topic_at(&kafka, &topic, 1, &[("max.message.bytes", "1000000")]).await;
    create_topic(&dlq, 1).await;
    let extra = format!("on_oversize = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n");
    let client = mongo().await;
    let bridge = start_bridge(&config_toml(name, &db, Some("orders"), &extra)).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN the limit drops to 50 000 and 100 documents of ~1 KB and one of 60 KB arrive at once
    crate::exactly_once::set_topic_config(&kafka, &topic, "max.message.bytes", "50000").await;
    let mut docs: Vec<Document> = (1..=100)
        .map(|id| doc! { "_id": id, "blob": "x".repeat(1_000) })
        .collect();
    docs.push(doc! { "_id": 101, "blob": "y".repeat(60_000) });
    orders.insert_many(docs).await.unwrap();
    // THEN every small document is in the topic, and only the large one is dead-lettered
    let stubs = records(&dlq, 1, WAIT).await;
    let mut stub_keys: Vec<Option<String>> = stubs.iter().map(|r| r.key.clone()).collect();
    stub_keys.dedup(); // at-least-once: a stub may be published again after the restart
    assert_eq!(stub_keys, vec![Some(key_of(101))]);
    let received = records(&topic, 101, WAIT).await;
    let mut ids: Vec<String> = received.iter().filter_map(|r| r.key.clone()).collect();
    ids.sort();
    ids.dedup();
    let mut expected: Vec<String> = (0..=100).map(key_of).collect();
    expected.sort();
    assert_eq!(ids, expected);
    let rebuilt = counter(
        &metrics,
        RESTARTS,
        name,
        &[("reason", "batch_above_topic_limit")],
    );
    assert!(rebuilt >= 1.0, "{rebuilt}");
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

// ------------------------------------------------------------------------------- C15, C23

#[tokio::test(flavor = "multi_thread")]
async fn c15_a_required_image_that_is_unavailable_stops_the_pipeline_once() {
    for option in ["full_document", "full_document_before_change"] {
        // GIVEN a collection without pre-/post-images and a pipeline requiring one
        let (db, name) = (unique("c15"), "c15");
        let topic = format!("{db}.accounts");
        create_topic(&topic, 1).await;
        let client = mongo().await;
        let database = client.database(&db);
        database.create_collection("accounts").await.unwrap();
        let accounts = database.collection::<Document>("accounts");
        let extra = format!("{option} = \"required\"\n");
        let bridge = start_bridge(&config_toml(name, &db, Some("accounts"), &extra)).await;
        let metrics = bridge.metrics().clone();
        // WHEN a document is inserted, then updated
        wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
        accounts
            .insert_one(doc! { "_id": 1, "bal": 100 })
            .await
            .unwrap();
        wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
        accounts
            .update_one(doc! { "_id": 1 }, doc! { "$inc": { "bal": -10 } })
            .await
            .unwrap();
        let started = Instant::now();
        // THEN the pipeline stops within seconds with the server's error, fatal, no retry
        let error = stops_within(bridge, Duration::from_secs(15))
            .await
            .expect_err("a missing required image must stop the bridge");
        assert_eq!(error.class(), ErrorClass::Fatal, "{option}: {error:?}");
        assert!(
            !matches!(error, BridgeError::HistoryLost { .. }),
            "{option}: reported as a token problem: {error:?}"
        );
        assert_eq!(restarts(&metrics, name), 0.0, "{option}");
        eprintln!(
            "c15 {option}: stopped {:?} after the update: {error}",
            started.elapsed()
        );
        // AND nothing was published for the update; the committed position is before it
        let offsets = offsets_doc(&client, &db, name).await.unwrap();
        assert_eq!(events_committed(&offsets), 1, "{option}");
        let next = first_event_after(&client, &db, "accounts", &offsets, false).await;
        assert_eq!(next.get_str("operationType").unwrap(), "update");
        let records = records(&topic, 1, WAIT).await;
        let ops: Vec<_> = records
            .iter()
            .map(|r| r.header("mongo.operation_type").unwrap())
            .collect();
        assert_eq!(ops, vec!["insert"], "{option}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c23_an_unwatchable_collection_is_a_fatal_error_at_start() {
    let client = mongo().await;
    let db = unique("c23");
    let database = client.database(&db);
    database
        .run_command(doc! { "create": "readings", "timeseries": { "timeField": "ts", "metaField": "sensor" } })
        .await
        .unwrap();
    database.create_collection("base").await.unwrap();
    database
        .run_command(doc! { "create": "view", "viewOn": "base", "pipeline": [] })
        .await
        .unwrap();
    for coll in ["readings", "view"] {
        // GIVEN a collection-scope pipeline on a time-series collection (or a view)
        let name = format!("c23{coll}");
        let bridge = start_bridge(&config_toml(&name, &db, Some(coll), "")).await;
        let metrics = bridge.metrics().clone();
        // WHEN it starts THEN it stops within seconds with a fatal error naming the namespace
        let error = stops_within(bridge, Duration::from_secs(15))
            .await
            .expect_err("an unwatchable namespace must stop the bridge");
        assert!(matches!(error, BridgeError::Config { .. }), "{error:?}");
        assert_eq!(error.class(), ErrorClass::Fatal, "{error:?}");
        let text = mongo_kafka_bridge::error::report(&error, &[]);
        assert!(text.contains(&format!("{db}.{coll}")), "{text}");
        assert_eq!(restarts(&metrics, &name), 0.0, "{coll}");
        // AND nothing was taken: the offsets collection has no document of the pipeline
        assert_eq!(offsets_doc(&client, &db, &name).await, None, "{coll}");
        eprintln!("c23 {coll}: {text}");
    }
}

// ------------------------------------------------------------------------------- C05, C28

/// A librdkafka mock cluster with `topic` (`partitions` partitions).
fn mock_cluster(
    topic: &str,
    partitions: i32,
) -> rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let mock = rdkafka::mocking::MockCluster::new(1).unwrap();
    mock.create_topic(topic, partitions, 1).unwrap();
    mock
}

#[tokio::test(flavor = "multi_thread")]
async fn c05_a_failed_tombstone_keeps_the_delete_uncommitted() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    // GIVEN a pipeline producing to a mock cluster, one request per record
    let (db, name) = (unique("c05"), "c05");
    let topic = format!("{db}.orders");
    let mock = mock_cluster(&topic, 1);
    let bootstrap = mock.bootstrap_servers();
    let text = with_props(
        &config_toml(name, &db, Some("orders"), "").replace(&kafka_bootstrap(), &bootstrap),
        &[("linger.ms", "0"), ("batch.num.messages", "1")],
    );
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    let orders = client.database(&db).collection::<Document>("orders");
    orders.insert_one(doc! { "_id": 7, "v": 1 }).await.unwrap();
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 1).await;
    // WHEN the delete's record is accepted and its tombstone refused
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
        ],
    );
    orders.delete_one(doc! { "_id": 7 }).await.unwrap();
    let error = stops_within(bridge, Duration::from_secs(30))
        .await
        .expect_err("a refused tombstone must stop the pipeline");
    assert!(
        ["delivery", "oversize"].contains(&error.kind()),
        "{error:?}"
    );
    assert_eq!(error.class(), ErrorClass::Fatal);
    // THEN the delete is not committed: resuming from the committed token yields it
    let offsets = offsets_doc(&client, &db, name).await.unwrap();
    assert_eq!(events_committed(&offsets), 1);
    let next = first_event_after(&client, &db, "orders", &offsets, false).await;
    assert_eq!(next.get_str("operationType").unwrap(), "delete");
    // WHEN the broker accepts again and the bridge restarts
    mock.clear_request_errors(RDKafkaApiKey::Produce);
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) == 2).await;
    let records = collect_at(&bootstrap, &topic, 3, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // THEN the key has the insert, the delete (once or twice) and finally a tombstone
    let seen: Vec<&str> = records
        .iter()
        .map(|r| match &r.value {
            None => "tombstone",
            Some(_) => r.header("mongo.operation_type").unwrap(),
        })
        .collect();
    assert!(
        seen == ["insert", "delete", "tombstone"]
            || seen == ["insert", "delete", "delete", "tombstone"],
        "{seen:?}"
    );
    assert!(
        records
            .iter()
            .all(|r| r.key.as_deref() == Some(key_of(7).as_str()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn c28_a_fatal_idempotent_producer_error_rebuilds_the_producer() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    // GIVEN a pipeline producing to a 3-partition topic of a mock cluster
    let (db, name) = (unique("c28"), "c28");
    let topic = format!("{db}.orders");
    let mock = mock_cluster(&topic, 3);
    let bootstrap = mock.bootstrap_servers();
    let text = config_toml(name, &db, Some("orders"), "").replace(&kafka_bootstrap(), &bootstrap);
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    let metrics = bridge.metrics().clone();
    wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN under a write load the broker answers a produce request with
    // OUT_OF_ORDER_SEQUENCE_NUMBER (the producer's fatal state, as after an outage)
    let orders = client.database(&db).collection::<Document>("orders");
    const DOCS: i32 = 150;
    for id in 0..DOCS {
        if id == DOCS / 3 {
            mock.request_errors(
                RDKafkaApiKey::Produce,
                &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER],
            );
        }
        orders.insert_one(doc! { "_id": id, "v": 0 }).await.unwrap();
        orders
            .update_one(doc! { "_id": id }, doc! { "$set": { "v": 1 } })
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // THEN every write is delivered at least once, in order per key
    wait_offsets(&client, &db, name, WAIT, |d| {
        events_committed(d) >= i64::from(2 * DOCS)
    })
    .await;
    let records = collect_at(&bootstrap, &topic, (2 * DOCS) as usize, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let groups = by_key(&records);
    let expected: BTreeSet<String> = (0..DOCS).map(key_of).collect();
    assert_eq!(groups.keys().cloned().collect::<BTreeSet<_>>(), expected);
    for (key, group) in &groups {
        let mut firsts: Vec<&str> = Vec::new();
        for r in group {
            let op = r.header("mongo.operation_type").unwrap();
            if !firsts.contains(&op) {
                firsts.push(op);
            }
        }
        assert_eq!(firsts, vec!["insert", "update"], "{key}");
    }
    // AND the pipeline restarted (with a new producer) after the producer's fatal error
    let transient = [("stage", "delivery"), ("class", "transient")];
    let per_reason: BTreeMap<&str, f64> = ["delivery", "delivery_cancelled"]
        .into_iter()
        .map(|r| (r, counter(&metrics, RESTARTS, name, &[("reason", r)])))
        .collect();
    eprintln!(
        "c28: {} records for {} writes, restarts {per_reason:?}, transient delivery errors {}",
        records.len(),
        2 * DOCS,
        counter(&metrics, ERRORS, name, &transient)
    );
    let oos = [("error_code", "OutOfOrderSequenceNumber")];
    assert!(counter(&metrics, DELIVERY_ERRORS, name, &oos) >= 1.0);
    assert!(per_reason["delivery"] >= 1.0, "{per_reason:?}");
    assert_eq!(counter(&metrics, ERRORS, name, &[("class", "fatal")]), 0.0);
}
