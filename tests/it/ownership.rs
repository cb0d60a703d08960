//! Ownership of a pipeline against the live servers: a fenced instance stands by, live and
//! ready, and never takes the pipeline back; of two standbys exactly one takes a lapsed
//! pipeline; a fatal exit releases every lease it holds; after `offsets reset --delete` an old
//! owner is still fenced. (A dead owner taken over by a standby is in the fault binary:
//! `tests/faults/killed.rs`.)

use std::time::{Duration, Instant};

use bson::{DateTime, Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::offsets::{OffsetsDoc, OffsetsStore, StreamIdentity};

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::{collect_from, per_id};
use crate::common::config::{config, config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::observe::get;
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);
/// After the expected records, how long no further record may arrive (duplicates show up).
const QUIET: Duration = Duration::from_secs(2);

fn pipeline_owned(
    metrics: &mongo_kafka_bridge::observe::metrics::Metrics,
    pipeline: &str,
) -> String {
    let line = format!("mongo_kafka_bridge_pipeline_owned{{pipeline=\"{pipeline}\"}} ");
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(&line).map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_instance_stands_by_live_and_ready_and_never_takes_the_pipeline_back() {
    // GIVEN instance A owning pipeline "ha", with a liveness threshold of 3 s
    let db = unique("ha");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("ha", &db, Some("t"), "")
        .replace("[bridge]\n", "[bridge]\nliveness_timeout_ms = 3000\n");
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("t");
    let a = start_bridge(&text).await;
    wait_offsets(&client, &db, "ha", WAIT, |d| {
        d.get_i64("epoch") == Ok(1) && d.contains_key("resumeToken")
    })
    .await;
    // WHEN instance B starts on the same configuration and takes the pipeline
    let b = start_bridge(&text).await;
    let taken = wait_offsets(&client, &db, "ha", WAIT, |d| d.get_i64("epoch") == Ok(2)).await;
    let b_owner = taken.get_str("owner").unwrap().to_owned();
    let body = crate::common::eventually(WAIT, "A stands by", || async {
        let (code, body) = get(a.metrics_addr(), "/readyz").await;
        (code == 200 && body.contains("pipeline ha: standby")).then_some(body)
    })
    .await;
    assert!(body.contains(&format!("owner {b_owner} until")), "{body}");
    // AND writes go on for over three liveness thresholds
    let started = Instant::now();
    let mut id = 0_i64;
    while started.elapsed() < Duration::from_secs(10) {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
        id += 1;
        let offsets = offsets_doc(&client, &db, "ha").await.unwrap();
        // THEN the epoch keeps B's value all along
        assert_eq!(
            offsets.get_i64("epoch"),
            Ok(2),
            "after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // AND A is live and ready (a standby), B owns the pipeline, and no record came twice
    assert_eq!(
        get(a.metrics_addr(), "/healthz").await,
        (200, "ok\n".to_owned())
    );
    let (code, body) = get(a.metrics_addr(), "/readyz").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ready\npipeline ha: standby, owner "),
        "{body}"
    );
    assert_eq!(pipeline_owned(a.metrics(), "ha"), "0");
    assert_eq!(pipeline_owned(b.metrics(), "ha"), "1");
    let records = collect_from(&kafka_bootstrap(), &topic, id as usize, QUIET, WAIT).await;
    let counts = per_id(&records);
    for i in 0..id {
        assert_eq!(counts.get(&i).copied(), Some(1), "document {i}");
    }
    b.shutdown();
    b.wait().await.unwrap();
    a.shutdown();
    a.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_standbys_exactly_one_takes_a_lapsed_pipeline() {
    let client = mongo().await;
    let db = unique("cas");
    let offsets_db = format!("{db}_offsets");
    let store = |owner: &str| {
        let identity = StreamIdentity::of(&mongo_kafka_bridge::config::PipelineConfig {
            ..config(&config_toml("p", &db, Some("t"), ""))
                .pipelines
                .remove(0)
        });
        OffsetsStore::new(
            &client,
            (&offsets_db, "offsets"),
            "p",
            identity,
            owner,
            // Long: the last step checks that a live lease is never taken, however slowly a
            // loaded server answers (the lapsed leases above are written by the test).
            Duration::from_secs(120),
        )
    };
    let (one, two) = (store("one"), store("two"));
    let offsets = client
        .database(&offsets_db)
        .collection::<Document>("offsets");
    for round in 0..20_i64 {
        // GIVEN a pipeline whose owner's lease lapsed, read by two standbys
        let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 1000);
        offsets
            .replace_one(
                doc! { "_id": "p" },
                doc! { "_id": "p", "epoch": round * 10, "leaseUntil": past, "owner": "dead" },
            )
            .upsert(true)
            .await
            .unwrap();
        let seen = OffsetsDoc::parse(&offsets.find_one(doc! {}).await.unwrap().unwrap()).unwrap();
        // WHEN both take it at once
        let (a, b) = tokio::join!(one.take_lapsed(Some(&seen)), two.take_lapsed(Some(&seen)));
        // THEN exactly one wins, and the epoch moved by one
        let won: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(won.len(), 1, "round {round}");
        assert_eq!(won[0].epoch, Some(round * 10 + 1));
        let now = offsets.find_one(doc! {}).await.unwrap().unwrap();
        assert_eq!(now.get_i64("epoch"), Ok(round * 10 + 1));
    }
    // AND a live lease is never taken
    let seen = OffsetsDoc::parse(&offsets.find_one(doc! {}).await.unwrap().unwrap()).unwrap();
    assert_eq!(one.take_lapsed(Some(&seen)).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fatal_exit_releases_every_lease_it_holds() {
    // GIVEN two pipelines, one of which meets a record too large for Kafka (on_oversize = fail),
    // in a process that exits on a pipeline's failure
    let db = unique("rel");
    create_topic(&format!("{db}.good"), 1).await;
    create_topic(&format!("{db}.bad"), 1).await;
    let mut text = config_toml("good", &db, Some("good"), "")
        .replace(
            "[kafka.properties]\n",
            "[kafka.properties]\n\"message.max.bytes\" = 10000\n",
        )
        .replace("[bridge]\n", "[bridge]\non_pipeline_failure = \"exit\"\n");
    text.push_str(&format!(
        "\n[[pipelines]]\nname = \"bad\"\ndatabase = \"{db}\"\ncollection = \"bad\"\n"
    ));
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    for name in ["good", "bad"] {
        wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    }
    // WHEN the large document is written
    client
        .database(&db)
        .collection::<Document>("bad")
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(20_000) })
        .await
        .unwrap();
    // THEN the bridge stops with the oversize error, and neither pipeline keeps a live lease
    let result = tokio::time::timeout(WAIT, bridge.wait()).await.unwrap();
    assert!(
        matches!(result, Err(BridgeError::Oversize { .. })),
        "{result:?}"
    );
    let now = DateTime::now();
    for name in ["good", "bad"] {
        let d = offsets_doc(&client, &db, name).await.unwrap();
        let until = *d.get_datetime("leaseUntil").unwrap();
        assert!(until <= now, "{name}: lease until {until} after the exit");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_offsets_reset_delete_an_old_owner_is_still_fenced() {
    // GIVEN an owner holding the pipeline, and a reset --delete while it is paused
    let db = unique("forget");
    let client = mongo().await;
    let text = config_toml("forget", &db, Some("t"), "");
    let identity = StreamIdentity::of(&config(&text).pipelines[0]);
    let store = |owner: &str| {
        OffsetsStore::new(
            &client,
            (&format!("{db}_offsets"), "offsets"),
            "forget",
            identity.clone(),
            owner,
            Duration::from_secs(5),
        )
    };
    let (old, new) = (store("old"), store("new"));
    let held = old.take().await.unwrap().epoch.unwrap();
    let file = config_file(&text);
    let (code, _, stderr) = bridge_cli(
        &["offsets", "reset", "forget", "--delete", "--force"],
        file.path(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    // WHEN another instance takes the pipeline anew
    let taken = new.take().await.unwrap().epoch.unwrap();
    // THEN the epoch never went back, and the old owner's next write is refused
    assert_eq!(taken, held + 2);
    let renewed = old.renew(held).await;
    assert!(
        matches!(renewed, Err(BridgeError::Fenced { .. })),
        "{renewed:?}"
    );
}
