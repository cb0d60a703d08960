//! A stop between Kafka's commit and the offsets write repeats nothing: every offsets write of
//! an exactly-once bridge fails (a fail point, on servers of the test's own: a fail point is
//! server-wide, so it must not meet other tests' bridges) while it commits 5 events to Kafka;
//! once the writes succeed again, the document is brought forward and a `read_committed`
//! consumer reads every event once, and the document counts them all. An ordinary test of this binary (see `main.rs`).

use std::time::{Duration, Instant};

use bson::doc;

use crate::common::bridge::{Killed, spawn_binary};
use crate::common::collect::{collect_from, per_id};
use crate::common::config::{config_file, eos_config};
use crate::common::kafka::create_topic_at;
use crate::common::mongo::{fail_point, fail_point_off, offsets_doc, wait_offsets};
use crate::common::servers::Instance;
use crate::common::unique;
use crate::suite::turn;

const WAIT: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_between_the_kafka_commit_and_the_offsets_write_repeats_nothing() {
    let Some(_turn) = turn("eosgap").await else {
        return;
    };
    let Some(servers) = Instance::managed("eos-gap", &[]) else {
        return;
    };
    let kafka = servers.kafka.clone();
    // GIVEN a running exactly-once pipeline that committed its first position and 3 events
    let db = unique("eosgap");
    let app = format!("mkb-{db}");
    let file = config_file(&eos_config(&db, &app, Some((&servers.mongo_uri, &kafka))));
    let client = mongodb::Client::with_uri_str(&servers.mongo_uri)
        .await
        .unwrap();
    let coll = client.database(&db).collection::<bson::Document>("t");
    let topic = format!("{db}.t");
    create_topic_at(&kafka, &topic, 1, &[]).await;
    let mut bridge = Killed(spawn_binary(file.path()));
    wait_offsets(&client, &db, "p", WAIT, |d| d.contains_key("resumeToken")).await;
    for id in 0..3_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(3)
    })
    .await;
    // WHEN every offsets write of this bridge fails while it commits 5 more events to Kafka
    fail_updates(&client, &app, true).await;
    for id in 3..8_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    let log = file.path().with_extension("log");
    let deadline = Instant::now() + WAIT;
    let records = loop {
        let records = collect_from(&kafka, &topic, 8, Duration::ZERO, WAIT).await;
        let ahead = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("the progress topic is ahead of the offsets document");
        if records.len() >= 8 && ahead {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "no Kafka commit without its offsets write"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // (the offsets document still stands before those events: Kafka is ahead)
    let doc = offsets_doc(&client, &db, "p").await.unwrap();
    assert_eq!(doc.get_i64("eventsCommitted"), Ok(3));
    // AND the writes succeed again, and 2 events follow
    fail_updates(&client, &app, false).await;
    for id in 8..10_i64 {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
    // THEN the document is brought forward and a read_committed consumer reads every event once
    let records = {
        let _ = records;
        let deadline = Instant::now() + WAIT;
        loop {
            let records = collect_from(&kafka, &topic, 10, Duration::from_secs(2), WAIT).await;
            if records.len() >= 10 || Instant::now() > deadline {
                break records;
            }
        }
    };
    let counts = per_id(&records);
    let expected: std::collections::HashMap<i64, usize> = (0..10).map(|i| (i, 1)).collect();
    assert_eq!(counts, expected, "every event exactly once");
    assert_eq!(records.len(), 10);
    let doc = wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_str("delivery") == Ok("exactly_once") && d.contains_key("progressOffset")
    })
    .await;
    assert!(doc.get_i64("commitSequence").unwrap() > 3, "{doc}");
    // AND the document counts the events Kafka committed while its writes failed
    wait_offsets(&client, &db, "p", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(10)
    })
    .await;
    bridge.kill();
}

/// Makes every `update` of the bridge whose MongoDB client is named `app` fail, or stops doing
/// so. The error is MaxTimeMSExpired (50): transient (retried), and not a "not writable
/// primary" state change. That one (10107, used before) makes the driver mark the server
/// unknown and select it anew, 10 s per failure here (measured: 10-40 s per restart), which ran
/// this test past its deadline under the suite's load.
async fn fail_updates(client: &mongodb::Client, app: &str, on: bool) {
    if on {
        let data = doc! { "failCommands": ["update"], "errorCode": 50, "appName": app };
        fail_point(client, "alwaysOn", data).await;
    } else {
        fail_point_off(client).await;
    }
}
