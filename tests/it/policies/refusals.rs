//! C15 and C23 (`docs/RELIABILITY.md`): a required pre- or post-image the server cannot give
//! stops the pipeline once, fatal; a time-series collection or a view is refused at start,
//! taking nothing.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::ErrorClass;

use crate::common::bridge::{start_bridge, stops_within};
use crate::common::collect::{operation_types, records};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{events_committed, first_event_after, mongo, offsets_doc, wait_offsets};
use crate::common::observe::restarts;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

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
        let ops = operation_types(&records);
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
