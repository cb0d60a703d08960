//! Start, stop and take-over: nothing is lost across a graceful restart, an idle first start
//! commits, a second instance fences the first, SIGTERM drains within its bound. (The bridge
//! killed is in the fault binary: `tests/faults/killed.rs`.)

use std::collections::HashSet;
use std::time::Duration;

use bson::doc;

use mongo_kafka_bridge::observe::metrics::{CHECKPOINT_TIMESTAMP, IN_FLIGHT_EVENTS};

use crate::common::bridge::{BridgeProc, Killed, signal, spawn_binary, start_bridge, start_opened};
use crate::common::collect::{collect, collect_from, key_ids, key_of};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{events_committed, mongo, offsets_doc, wait_offsets};
use crate::common::observe::{counter, fetch, metric_sum};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn graceful_restart_mid_stream_loses_nothing() {
    // GIVEN a running bridge and 400 inserts under way
    let db = unique("restart");
    let topic = format!("{db}.t");
    create_topic(&topic, 3).await;
    let text = config_toml("restart", &db, Some("t"), "json = \"canonical\"\n");
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "restart", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    for i in 0..400 {
        coll.insert_one(doc! { "_id": i }).await.unwrap();
    }
    // WHEN it is stopped, more is written, and it starts again
    bridge.shutdown();
    bridge.wait().await.unwrap();
    for i in 400..800 {
        coll.insert_one(doc! { "_id": i }).await.unwrap();
    }
    let bridge = start_bridge(&text).await;
    // THEN all 800 documents are in Kafka, and a graceful stop produced no duplicates
    let records = collect(&topic, 800, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(key_ids(&records), (0..800).collect::<HashSet<_>>());
    assert_eq!(
        records.len(),
        800,
        "a drained shutdown commits everything it delivered"
    );
    let offsets = offsets_doc(&client, &db, "restart").await.unwrap();
    assert_eq!(offsets.get_i64("eventsCommitted").unwrap(), 800);
    assert_eq!(
        offsets.get_i64("epoch").unwrap(),
        2,
        "each start takes the pipeline once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_instance_fences_the_first_which_stands_by_until_the_lease_lapses() {
    // GIVEN instance A running the pipeline
    let db = unique("fence");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("fence", &db, Some("t"), "");
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    let a = start_bridge(&text).await;
    wait_offsets(&client, &db, "fence", WAIT, |d| {
        d.get_i64("epoch") == Ok(1) && d.contains_key("resumeToken")
    })
    .await;
    // WHEN instance B starts on the same pipeline
    let b = start_bridge(&text).await;
    wait_offsets(&client, &db, "fence", WAIT, |d| d.get_i64("epoch") == Ok(2)).await;
    // THEN A's pipeline stops with the fenced error (counted) and stands by, B delivers
    let fenced =
        r#"mongo_kafka_bridge_errors_total{class="fatal",pipeline="fence",stage="fenced"} 1"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !a.metrics().render().contains(fenced) {
        assert!(std::time::Instant::now() < deadline, "A was not fenced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    coll.insert_one(doc! { "_id": 7 }).await.unwrap();
    let records = collect(&topic, 1, WAIT).await;
    assert_eq!(
        records[0].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"7"}}"#)
    );
    // WHEN B stops cleanly (releasing its lease)
    b.shutdown();
    b.wait().await.unwrap();
    // THEN A takes the pipeline again (epoch 3) and delivers what follows
    wait_offsets(&client, &db, "fence", WAIT, |d| d.get_i64("epoch") == Ok(3)).await;
    coll.insert_one(doc! { "_id": 8 }).await.unwrap();
    let records = collect(&topic, 2, WAIT).await;
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(
        records[1].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"8"}}"#)
    );
    a.shutdown();
    a.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn c27_an_idle_first_start_commits_so_writes_while_down_are_not_lost() {
    // GIVEN an empty offsets collection and a bridge started on an idle collection
    let db = unique("c27");
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let text = config_toml("c27", &db, Some("orders"), "");
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    // THEN a position is committed before any event exists
    let first = wait_offsets(&client, &db, "c27", WAIT, |d| d.contains_key("resumeToken")).await;
    assert_eq!(first.get_i64("eventsCommitted").unwrap(), 0);
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // WHEN a document is written while the bridge is down, and it starts again
    client
        .database(&db)
        .collection::<bson::Document>("orders")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
    let bridge = start_bridge(&text).await;
    // THEN that write is delivered
    let records = collect(&topic, 1, WAIT).await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records[0].key.as_deref(),
        Some(r#"{"_id":{"$numberInt":"1"}}"#)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_within_the_bound_and_a_second_signal_exits_at_once() {
    // GIVEN the binary with undeliverable events in flight (Kafka unreachable)
    let db = unique("sig");
    let text = config_toml("sig", &db, Some("t"), "")
        .replace(&kafka_bootstrap(), "127.0.0.1:1")
        .replace("shutdown_timeout_ms = 10000", "shutdown_timeout_ms = 3000")
        .replace("[bridge]\n", "[bridge]\nlease_ms = 8000\n");
    let file = config_file(&text);
    let client = mongo().await;
    let mut first = spawn_binary(file.path());
    wait_offsets(&client, &db, "sig", WAIT, |d| d.contains_key("resumeToken")).await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    coll.insert_many((0..50).map(|i| doc! { "_id": i }))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    // WHEN it gets one SIGTERM
    let started = std::time::Instant::now();
    signal(first.id(), "TERM");
    let status = wait_exit(&mut first, Duration::from_secs(20));
    // THEN it gives up draining after shutdown_timeout_ms and exits 0, committing nothing new
    assert_eq!(status, Some(0));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(15),
        "{took:?}"
    );
    let offsets = offsets_doc(&client, &db, "sig").await.unwrap();
    assert_eq!(offsets.get_i64("eventsCommitted").unwrap(), 0);
    // WHEN a second instance took over (after the first's lease, which a drain that timed out
    // leaves running: its queued records must expire first) and gets two signals in a row
    let lease_end = offsets
        .get_datetime("leaseUntil")
        .unwrap()
        .timestamp_millis();
    let log = tempfile::tempdir().unwrap();
    let mut second = BridgeProc::spawn(file.path(), log.path().join("second.log"));
    let addr = second.metrics_addr(WAIT);
    wait_offsets(&client, &db, "sig", WAIT, |d| d.get_i64("epoch") == Ok(2)).await;
    while bson::DateTime::now().timestamp_millis() < lease_end + 1000 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    coll.insert_one(doc! { "_id": 100 }).await.unwrap();
    // (its record in flight, undeliverable: else the first signal's drain has nothing to wait
    // for and ends before the second signal)
    let in_flight = || {
        fetch(&addr, "/metrics").map_or(0.0, |(_, body)| {
            metric_sum(&body, IN_FLIGHT_EVENTS, &["pipeline=\"sig\""])
        })
    };
    let deadline = std::time::Instant::now() + WAIT;
    while in_flight() < 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no record in flight within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = std::time::Instant::now();
    signal(second.pid(), "TERM");
    tokio::time::sleep(Duration::from_millis(300)).await;
    signal(second.pid(), "INT");
    // THEN it exits at once with 130
    let status = wait_exit(&mut second.child, Duration::from_secs(10));
    assert_eq!(status, Some(130), "{}", second.log_tail(20));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

fn wait_exit(child: &mut std::process::Child, timeout: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_reports_the_committed_clustertime_before_any_new_event() {
    // GIVEN a pipeline that committed one event, then stopped
    let db = unique("ctsg");
    create_topic(&format!("{db}.t"), 1).await;
    let text = config_toml("ctsg", &db, Some("t"), "");
    let client = mongo().await;
    let bridge = start_opened(&text, &db, "ctsg").await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    let committed = wait_offsets(&client, &db, "ctsg", WAIT, |d| events_committed(d) >= 1).await;
    let stored = committed.get_timestamp("clusterTime").unwrap().time;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    // WHEN it starts again, no event written since
    let bridge = start_opened(&text, &db, "ctsg").await;
    // THEN once its stream is open the checkpoint gauge shows the stored clusterTime, not 0
    // until the next commit (no event is written)
    let gauge = crate::common::eventually(WAIT, "a checkpoint timestamp", || async {
        let value = counter(bridge.metrics(), CHECKPOINT_TIMESTAMP, "ctsg", &[]);
        (value != 0.0).then_some(value)
    })
    .await;
    assert_eq!(gauge, f64::from(stored));
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_from_a_paused_owner_publishes_only_after_its_lease_ends() {
    // GIVEN an owner with a short lease, paused (SIGSTOP) after it committed
    let db = unique("paused");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("paused", &db, Some("t"), "")
        .replace("[bridge]\n", "[bridge]\nlease_ms = 8000\n");
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    let file_a = config_file(&text);
    let mut a = Killed(spawn_binary(file_a.path()));
    wait_offsets(&client, &db, "paused", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    wait_offsets(&client, &db, "paused", WAIT, |d| events_committed(d) >= 1).await;
    signal(a.0.id(), "STOP");
    let lease_end = offsets_doc(&client, &db, "paused")
        .await
        .unwrap()
        .get_datetime("leaseUntil")
        .unwrap()
        .timestamp_millis();
    // WHEN a second instance takes the pipeline over, and a document is written
    let file_b = config_file(&text);
    let mut b = Killed(spawn_binary(file_b.path()));
    wait_offsets(&client, &db, "paused", WAIT, |d| {
        d.get_i64("epoch") == Ok(2)
    })
    .await;
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN the new owner's record was produced only after the paused owner's lease ended
    // (whatever the paused owner still queued expires by then: per-document order)
    let records = collect_from(&kafka_bootstrap(), &topic, 2, QUIET_SHORT, WAIT).await;
    let second = records
        .iter()
        .find(|r| r.key.as_deref() == Some(key_of(2).as_str()))
        .expect("the record of _id 2");
    let produced = second.timestamp_ms.expect("a CreateTime");
    assert!(produced >= lease_end, "{produced} < {lease_end}");
    let log = std::fs::read_to_string(file_b.path().with_extension("log")).unwrap_or_default();
    assert!(
        log.contains("waiting for the previous owner's lease to end"),
        "{log}"
    );
    signal(a.0.id(), "CONT");
    a.kill();
    b.kill();
}

const QUIET_SHORT: Duration = Duration::from_secs(1);
