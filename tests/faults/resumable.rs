//! Resumable server errors (`docs/RELIABILITY.md`): `NotWritablePrimary` and
//! `InterruptedDueToReplStateChange` on the bridge's `getMore` and `aggregate`, from fail points
//! on a server of the test's own, under a steady load: the driver resumes by itself or the
//! pipeline restarts from its committed token, and nothing is lost. An ordinary test of this
//! binary (see `main.rs`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use bson::{Document, doc};

use crate::common::bridge::start_bridge;
use crate::common::collect::{by_key, first_operations, key_of, records};
use crate::common::kafka::create_topic;
use crate::common::mongo::{events_committed, fail_command, fail_point_off, wait_offsets};
use crate::common::observe::restarts;
use crate::common::servers::Instance;
use crate::common::unique;
use crate::suite::turn;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn resumable_errors_on_get_more_and_aggregate_lose_nothing() {
    let Some(_turn) = turn("resumable").await else {
        return;
    };
    let Some(server) = Instance::mongo("resumable", &[]) else {
        return;
    };
    // GIVEN a running pipeline on a 3-partition topic
    let (db, name) = (unique("resum"), "resum");
    let topic = format!("{db}.orders");
    create_topic(&topic, 3).await;
    let client = server.client().await;
    // A NotWritablePrimary marks the server Unknown in the driver (SDAM); without a real
    // election the driver selects it again only at its next heartbeat (10 s by default).
    let uri = format!("{}&heartbeatFrequencyMS=500", server.mongo_uri);
    let text = server
        .config(name, &db, Some("orders"), "")
        .replace(&server.mongo_uri, &uri);
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
        assert_eq!(first_operations(group), vec!["insert", "update"], "{key}");
    }
    eprintln!(
        "resumable: {} writes, {} records ({} duplicates), {} pipeline restarts",
        2 * total + probes,
        records.len(),
        records.len() - (2 * total + probes) as usize,
        restarts(&metrics, name)
    );
}
