//! The bridge killed (SIGKILL) on the shared servers: restarted after each of three kills under
//! load, it delivers every write at least once; when the owner of a pipeline dies, exactly one
//! of two standbys takes it over and every later write arrives once. Ordinary tests of this
//! binary (see `main.rs`); the fault suite's `kill9` and `eos` scenarios are the long versions.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use rand::Rng;

use crate::common::bridge::{Killed, spawn_binary};
use crate::common::collect::{collect, collect_from, key_ids, per_id};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;
use crate::suite::turn;

const WAIT: Duration = Duration::from_secs(60);
/// After the expected records, how long no further record may arrive (duplicates show up).
const QUIET: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_load_then_restart_delivers_every_write_at_least_once() {
    let Some(_turn) = turn("killed").await else {
        return;
    };
    // GIVEN the bridge binary under a steady insert load
    let db = unique("crash");
    let topic = format!("{db}.t");
    create_topic(&topic, 3).await;
    let file = config_file(&config_toml(
        "crash",
        &db,
        Some("t"),
        "json = \"canonical\"\n",
    ));
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("t");
    let total: i64 = 3000;
    // The first start commits its initial position before the load begins (start_at = now).
    let mut child = spawn_binary(file.path());
    wait_offsets(&client, &db, "crash", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let writer = tokio::spawn(async move {
        for i in 0..total {
            coll.insert_one(doc! { "_id": i }).await.unwrap();
        }
    });
    // WHEN it is killed with SIGKILL three times at random moments and restarted each time
    for round in 0..3 {
        if round > 0 {
            child = spawn_binary(file.path());
        }
        let ms = rand::rng().random_range(700..1800);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        child.kill().unwrap();
        child.wait().unwrap();
    }
    writer.await.unwrap();
    let mut child = spawn_binary(file.path());
    // THEN every write is in Kafka at least once
    let records = collect(&topic, total as usize, WAIT).await;
    let mut seen = key_ids(&records);
    if seen.len() < total as usize {
        let more = collect(
            &topic,
            records.len() + total as usize,
            Duration::from_secs(10),
        )
        .await;
        seen = key_ids(&more);
    }
    let _ = child.kill();
    let _ = child.wait();
    let missing: Vec<i64> = (0..total).filter(|i| !seen.contains(i)).collect();
    assert!(
        missing.is_empty(),
        "missing {} writes, first {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    eprintln!("crash test: {total} writes, all delivered at least once");
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_owner_dies_exactly_one_of_two_standbys_takes_over() {
    let Some(_turn) = turn("killed").await else {
        return;
    };
    // GIVEN three instances of one configuration: C owns the pipeline, A and B stand by
    let db = unique("die");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("die", &db, Some("t"), "")
        .replace("[bridge]\n", "[bridge]\nlease_ms = 12000\n");
    let file = config_file(&text);
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("t");
    let mut instances = Vec::new();
    for epoch in 1..=3 {
        instances.push(Killed(spawn_binary(file.path())));
        wait_offsets(&client, &db, "die", WAIT, |d| {
            d.get_i64("epoch") == Ok(epoch) && d.contains_key("resumeToken")
        })
        .await;
    }
    // (once both have noticed they were fenced: before that they still publish, the bounded
    // duplicates of a zombie owner, which is not what this test is about)
    let log = file.path().with_extension("log");
    crate::common::eventually(WAIT, "two standbys", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.matches("fenced; standing by").count() == 2).then_some(())
    })
    .await;
    // (each later instance said that it took the pipeline from a live owner)
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        text.matches("took the pipeline from an owner whose lease was still running")
            .count(),
        2,
        "{text}"
    );
    // WHEN the owner is killed with SIGKILL under a steady load
    let mut owner = instances.pop().unwrap();
    owner.kill();
    let killed = Instant::now();
    let mut id = 0_i64;
    let mut epochs = Vec::new();
    // (The lease is long enough that a loaded machine does not stall the new owner past it.)
    while killed.elapsed() < Duration::from_secs(30) {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
        id += 1;
        let epoch = offsets_doc(&client, &db, "die")
            .await
            .unwrap()
            .get_i64("epoch");
        epochs.push(epoch.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // THEN the epoch went from 3 to 4 once, and every write after the kill arrived exactly once
    assert_eq!(epochs.first(), Some(&3));
    assert_eq!(epochs.last(), Some(&4), "{epochs:?}");
    let records = collect_from(&kafka_bootstrap(), &topic, id as usize, QUIET, WAIT).await;
    let counts = per_id(&records);
    for i in 0..id {
        assert_eq!(
            counts.get(&i).copied(),
            Some(1),
            "document {i} written after the kill"
        );
    }
    drop(instances);
}
