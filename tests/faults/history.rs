//! C01, history lost (`docs/RELIABILITY.md`): a committed position that fell off the oplog (on
//! a server of its own keeping 1 000 entries) or a `ChangeStreamHistoryLost` (286) from a fail
//! point, under each `on_history_lost`: fail (the offset kept), skip (gap markers to every
//! partition), and mid-stream (the last committed position named). Ordinary tests of this
//! binary (see `main.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::ErrorClass;
use mongo_kafka_bridge::observe::metrics::{ERRORS, MESSAGES_ENQUEUED};

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::collect::{key_of, records};
use crate::common::kafka::create_topic;
use crate::common::mongo::{
    events_committed, fail_command, fail_point_off, fill_oplog, offsets_doc, wait_offsets,
};
use crate::common::observe::{counter, restarts};
use crate::common::servers::Instance;
use crate::common::unique;
use crate::suite::turn;

const WAIT: Duration = Duration::from_secs(30);

/// Runs the bridge until the insert of `_id: 1` is committed, stops it, then rolls the oplog
/// past that position (1500 entries > the cap of 1000) and writes `_id: 2`. Returns the offsets
/// document as the stopped bridge left it.
async fn commit_then_lose_history(server: &Instance, text: &str, db: &str, name: &str) -> Document {
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
    let Some(_turn) = turn("history").await else {
        return;
    };
    let Some(server) = Instance::mongo("c01fail", &["--oplog-max-entries", "1000"]) else {
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
    let Some(_turn) = turn("history").await else {
        return;
    };
    let Some(server) = Instance::mongo("c01fp", &[]) else {
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
    let Some(_turn) = turn("history").await else {
        return;
    };
    let Some(server) = Instance::mongo("c01skip", &["--oplog-max-entries", "1000"]) else {
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
    let Some(_turn) = turn("history").await else {
        return;
    };
    let Some(server) = Instance::mongo("c01mid", &[]) else {
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
