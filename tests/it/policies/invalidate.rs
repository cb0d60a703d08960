//! C07, invalidation (`docs/RELIABILITY.md`): a rename and a dropped database are published,
//! and the re-created collection is followed (`startAfter`), never treated as fatal.

use std::time::Duration;

use bson::{Document, doc};
use mongo_kafka_bridge::Bridge;
use mongo_kafka_bridge::observe::metrics::{ERRORS, Metrics};
use mongodb::Client;

use crate::common::bridge::start_opened;
use crate::common::collect::{Received, key_of, records};
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{events_committed, mongo, wait_offsets};
use crate::common::observe::{counter, restarts};
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

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

/// `events` (operation type, key), then pipeline `name`'s invalidate and the insert of `_id: 2`
/// that followed it.
fn reopened<const N: usize>(name: &str, events: [(&str, String); N]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = events
        .into_iter()
        .map(|(op, key)| (op.to_owned(), key))
        .collect();
    out.push((
        "invalidate".to_owned(),
        format!(r#"{{"pipeline":"{name}"}}"#),
    ));
    out.push(("insert".to_owned(), key_of(2)));
    out
}

/// The write after the invalidate (`_id: 2`) arrived exactly once, and pipeline `name`'s
/// stream was reopened after the invalidate.
fn assert_followed(records: &[Received], metrics: &Metrics, name: &str) {
    let after = records
        .iter()
        .filter(|r| r.key.as_deref() == Some(key_of(2).as_str()));
    assert_eq!(after.count(), 1);
    let reopened = restarts(metrics, name);
    assert!(reopened >= 1.0, "{reopened}");
}

/// A pipeline of its own on a fresh database, its records on a topic of one partition.
struct Watched {
    db: String,
    name: &'static str,
    topic: String,
    client: Client,
    bridge: Bridge,
}

impl Watched {
    /// Pipeline `name` on `<db>.<coll>` (topic `<db>.<coll>`), or on the whole database with
    /// topic `<db>.all` for `coll: None`, started and its stream open.
    async fn start(name: &'static str, coll: Option<&str>) -> Self {
        let db = unique(name);
        let topic = format!("{db}.{}", coll.unwrap_or("all"));
        create_topic(&topic, 1).await;
        let client = mongo().await;
        let extra = match coll {
            Some(_) => String::new(),
            None => format!("topic = \"{topic}\"\n"),
        };
        let bridge = start_opened(&config_toml(name, &db, coll, &extra), &db, name).await;
        Self {
            db,
            name,
            topic,
            client,
            bridge,
        }
    }

    /// Waits until `invalidated` events (the invalidate included) are committed, then makes
    /// `write` (one event) and waits until it is committed too; reads `count` records at least
    /// and stops the bridge. The records and the bridge's metrics.
    async fn after_invalidate(
        self,
        invalidated: i64,
        write: impl Future<Output = ()>,
        count: usize,
    ) -> (Vec<Received>, Metrics) {
        let (client, db, name) = (&self.client, &self.db, self.name);
        let at = wait_offsets(client, db, name, WAIT, |d| {
            events_committed(d) >= invalidated
        })
        .await;
        write.await;
        let events = events_committed(&at) + 1;
        wait_offsets(client, db, name, WAIT, |d| events_committed(d) == events).await;
        let records = records(&self.topic, count, WAIT).await;
        let metrics = self.bridge.metrics().clone();
        self.bridge.shutdown();
        self.bridge.wait().await.unwrap();
        (records, metrics)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c07_rename_is_published_and_a_recreated_collection_is_followed() {
    // GIVEN a collection-scope pipeline on db.orders
    let watched = Watched::start("c07", Some("orders")).await;
    let (db, name) = (watched.db.clone(), watched.name);
    let client = watched.client.clone();
    let orders = client.database(&db).collection::<Document>("orders");
    // WHEN a document is inserted, the collection renamed, then re-created by an insert
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    client
        .database("admin")
        .run_command(doc! {
            "renameCollection": format!("{db}.orders"), "to": format!("{db}.orders_old"),
        })
        .await
        .unwrap();
    let write = async {
        orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    };
    let (records, metrics) = watched.after_invalidate(3, write, 4).await;
    // THEN insert, rename (keyed by ns), invalidate, then the new collection's insert
    let ns_key = format!(r#"{{"db":"{db}","coll":"orders"}}"#);
    let expected = reopened(name, [("insert", key_of(1)), ("rename", ns_key)]);
    assert_eq!(first_occurrences(&records), expected);
    let rename = records
        .iter()
        .find(|r| r.header("mongo.operation_type") == Some("rename"));
    assert_eq!(
        rename.unwrap().json()["to"],
        serde_json::json!({"db": db, "coll": "orders_old"})
    );
    // AND the write after the invalidate arrives exactly once (startAfter, not a replay)
    // AND the stream was reopened after the invalidate, never treated as fatal
    assert_followed(&records, &metrics, name);
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
    let watched = Watched::start("c07d", None).await;
    let (db, name) = (watched.db.clone(), watched.name);
    // WHEN a document is written, the database dropped, then written to again
    let database = watched.client.database(&db);
    database
        .collection::<Document>("a")
        .insert_one(doc! { "_id": 1 })
        .await
        .unwrap();
    database.drop().await.unwrap();
    // The offsets database is another one, so the pipeline's position survives the drop.
    let write = async {
        database
            .collection::<Document>("b")
            .insert_one(doc! { "_id": 2 })
            .await
            .unwrap();
    };
    let (records, metrics) = watched.after_invalidate(4, write, 5).await;
    // THEN insert, drop, dropDatabase, invalidate, then the new insert (exactly once)
    let expected = reopened(
        name,
        [
            ("insert", key_of(1)),
            ("drop", format!(r#"{{"db":"{db}","coll":"a"}}"#)),
            ("dropDatabase", format!(r#"{{"db":"{db}"}}"#)),
        ],
    );
    assert_eq!(first_occurrences(&records), expected);
    assert_followed(&records, &metrics, name);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_filter_follows_a_dropped_and_recreated_collection() {
    // GIVEN a collection-scope pipeline with the example configuration's filter: document
    // changes and `invalidate` (the drop itself is filtered out)
    let name = "c07f";
    let db = unique(name);
    let topic = format!("{db}.orders");
    create_topic(&topic, 1).await;
    let client = mongo().await;
    let example =
        std::fs::read_to_string(crate::common::root().join("deploy/config.example.toml")).unwrap();
    let filter = example
        .lines()
        .find(|l| l.starts_with("pipeline = "))
        .expect("the example's filter")
        .split(" # ")
        .next()
        .unwrap();
    assert!(filter.contains("\"invalidate\""), "{filter}");
    let toml = config_toml(name, &db, Some("orders"), &format!("{filter}\n"));
    let bridge = start_opened(&toml, &db, name).await;
    let orders = client.database(&db).collection::<Document>("orders");
    // WHEN a document is inserted, the collection dropped, then re-created by an insert
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    orders.drop().await.unwrap();
    orders.insert_one(doc! { "_id": 2 }).await.unwrap();
    // THEN the invalidate is published, and the insert after the drop too: the stream was
    // reopened after the invalidate
    let records = records(&topic, 3, WAIT).await;
    let expected = reopened(name, [("insert", key_of(1))]);
    assert_eq!(first_occurrences(&records), expected);
    wait_offsets(&client, &db, name, WAIT, |d| events_committed(d) >= 3).await;
    let metrics = bridge.metrics().clone();
    assert_followed(&records, &metrics, name);
    bridge.shutdown();
    bridge.wait().await.unwrap();
}
