//! Which of Debezium's partitions `offsets import debezium` takes (README "Moving from
//! Debezium"; `src/cli/offsets/debezium/partitions.rs`), through the command against the real
//! servers. The offsets are KIP-875 JSON in the shapes Debezium's MongoDB connector writes —
//! the current `{"server_id"}`, an older version's per replica set or per shard
//! `{"server_id", "rs"}` — whose positions are real events': the resume token and clusterTime
//! of inserts read from a change stream on the collection (as Debezium stores them: the token's
//! BSON in base64, `sec` and `ord`).
//!
//! SecantusDB has one replica set and no shards: the per-shard partitions are written by hand,
//! each naming a position of the one stream, which is what the import reads of them (their
//! tokens and times); that a sharded cluster's per-shard token opens on `mongos` is checked by
//! the import itself (the pipeline's change stream must open after it), not here.

use std::time::{Duration, Instant};

use base64::Engine as _;
use bson::{Document, RawDocumentBuf, Timestamp, doc};
use mongodb::Collection;
use serde_json::{Value, json};

use super::WAIT;
use super::moving::{import, read_through};
use crate::common::bridge::start_bridge;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc};
use crate::common::unique;

/// One event's position: its resume token and clusterTime.
type Position = (Document, Timestamp);

/// A collection, `count` inserts `{_id: i}` into it and their positions, and a pipeline `dbz` in
/// the Debezium form on it (its configuration file, and its topic, created).
struct Given {
    client: mongodb::Client,
    db: String,
    prefix: String,
    coll: Collection<Document>,
    events: Vec<Position>,
    text: String,
    config: tempfile::NamedTempFile,
    topic: String,
}

async fn given(count: i32) -> Given {
    let (db, prefix) = (unique("dbzp"), unique("dbzp"));
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("c");
    let mut stream = coll
        .watch()
        .max_await_time(Duration::from_millis(200))
        .await
        .unwrap()
        .with_type::<Document>();
    for i in 0..count {
        coll.insert_one(doc! { "_id": i }).await.unwrap();
    }
    let mut events = Vec::new();
    let deadline = Instant::now() + WAIT;
    while events.len() < count as usize {
        if let Some(e) = stream.next_if_any().await.unwrap() {
            let token = e.get_document("_id").unwrap().clone();
            events.push((token, e.get_timestamp("clusterTime").unwrap()));
        }
        assert!(
            Instant::now() < deadline,
            "the inserts' change events in time"
        );
    }
    let extra =
        format!("value = \"debezium\"\n[pipelines.debezium]\ntopic_prefix = \"{prefix}\"\n");
    let text = config_toml("dbz", &db, Some("c"), &extra);
    let topic = format!("{prefix}.{db}.c");
    create_topic(&topic, 1).await;
    Given {
        client,
        config: config_file(&text),
        db,
        prefix,
        coll,
        events,
        text,
        topic,
    }
}

impl Given {
    /// A partition of this connector with `extra` keys (`{"rs": …}`), or the current one.
    fn partition(&self, extra: &[(&str, &str)]) -> Value {
        let mut p = json!({ "server_id": self.prefix });
        for (k, v) in extra {
            p[*k] = json!(v);
        }
        p
    }

    /// Debezium's offset at event `i`: `sec`, `ord`, `resume_token`.
    fn offset(&self, i: usize) -> Value {
        let (token, at) = &self.events[i];
        let mut bytes = Vec::new();
        token.to_writer(&mut bytes).unwrap();
        json!({
            "sec": at.time,
            "ord": at.increment,
            "resume_token": base64::engine::general_purpose::STANDARD.encode(bytes),
        })
    }

    /// `offsets import debezium dbz --offsets FILE ARGS` on KIP-875 JSON of `items`; its exit
    /// code and output.
    fn import(&self, items: &[(Value, Value)], args: &[&str]) -> (Option<i32>, String) {
        let offsets: Vec<Value> = items
            .iter()
            .map(|(partition, offset)| json!({ "partition": partition, "offset": offset }))
            .collect();
        let file = self
            .config
            .path()
            .with_extension(format!("{}.json", unique("o")));
        std::fs::write(&file, json!({ "offsets": offsets }).to_string()).unwrap();
        let mut all = vec!["--offsets", file.to_str().unwrap()];
        all.extend_from_slice(args);
        let result = import(self.config.path(), &all);
        let _ = std::fs::remove_file(file);
        eprintln!("import {args:?}: {result:?}");
        result
    }

    /// `sec S, ord O` of event `i`, as the import prints a position.
    fn printed(&self, i: usize) -> String {
        let at = self.events[i].1;
        format!("sec {}, ord {}", at.time, at.increment)
    }

    /// The offsets document as stored, byte for byte.
    async fn raw_offsets(&self) -> Option<RawDocumentBuf> {
        self.client
            .database(&format!("{}_offsets", self.db))
            .collection::<RawDocumentBuf>("offsets")
            .find_one(doc! { "_id": "dbz" })
            .await
            .unwrap()
    }

    async fn imported_token(&self) -> Document {
        let doc = offsets_doc(&self.client, &self.db, "dbz")
            .await
            .expect("imported");
        doc.get_document("resumeToken").unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_current_partition_is_taken_and_every_ignored_one_printed() {
    // GIVEN events, and Debezium's offsets with a current partition beside an older version's
    // per replica set one and a task generation's
    let g = given(15).await;
    let generation = [
        ("task_id", "0"),
        ("multi_task_gen", "1"),
        ("task_count", "2"),
    ];
    let items = [
        (g.partition(&[("rs", "rs0")]), g.offset(5)),
        (g.partition(&[]), g.offset(12)),
        (g.partition(&generation), g.offset(3)),
    ];
    // WHEN the position is imported
    let (code, out) = g.import(&items, &[]);
    // THEN the current partition's is taken, and the others are printed with their positions
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(g.imported_token().await, g.events[12].0);
    assert!(out.contains("ignored 2 other partition(s)"), "{out}");
    let rs0 = format!("(replica set or shard \"rs0\"): {}", g.printed(5));
    assert!(out.contains(&rs0), "{out}");
    let task = format!("(task generation 1, task 0 of 2): {}", g.printed(3));
    assert!(out.contains(&task), "{out}");
    assert!(out.contains("\"rs\":\"rs0\""), "{out}");
    let doc = offsets_doc(&g.client, &g.db, "dbz").await.unwrap();
    let partition = doc
        .get_document("importedFrom")
        .unwrap()
        .get_document("partition");
    assert_eq!(partition, Ok(&doc! { "server_id": &g.prefix }));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_names_every_partition_and_leaves_the_offsets_document_as_it_was() {
    // GIVEN events, and Debezium's per-shard offsets of an older version
    let g = given(15).await;
    let shards = [
        (g.partition(&[("rs", "shard1")]), g.offset(12)),
        (g.partition(&[("rs", "shard0")]), g.offset(5)),
    ];
    // WHEN they are imported without --use-oldest, the pipeline having no document yet
    let (code, out) = g.import(&shards, &[]);
    // THEN it is refused naming each partition and its position, and offering --use-oldest
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("refused: 2 partitions for server_id"), "{out}");
    for (rs, i) in [("shard1", 12), ("shard0", 5)] {
        let named = format!("(replica set or shard \"{rs}\"): {}", g.printed(i));
        assert!(out.contains(&named), "{out}");
    }
    assert!(
        out.contains("Pass --use-oldest to resume after the oldest"),
        "{out}"
    );
    assert!(g.raw_offsets().await.is_none(), "no document written");
    // AND with a document (a current partition's import), every refusal leaves it byte for byte
    let (code, out) = g.import(&[(g.partition(&[]), g.offset(2))], &[]);
    assert_eq!(code, Some(0), "{out}");
    let before = g.raw_offsets().await.expect("imported");
    let (code, out) = g.import(&shards, &[]);
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        g.raw_offsets().await.as_ref(),
        Some(&before),
        "unchanged: {out}"
    );
    let mut untimed = g.offset(3);
    untimed["sec"] = json!(-1);
    untimed["ord"] = json!(-1);
    let no_time = [
        shards[0].clone(),
        (g.partition(&[("rs", "shard2")]), untimed),
    ];
    let (code, out) = g.import(&no_time, &["--use-oldest"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("1 without a cluster time"), "{out}");
    assert!(out.contains("\"rs\":\"shard2\""), "{out}");
    assert_eq!(
        g.raw_offsets().await.as_ref(),
        Some(&before),
        "unchanged: {out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn use_oldest_delivers_every_event_after_the_oldest_position() {
    // GIVEN events, and Debezium's per-shard offsets of an older version, newest first
    let g = given(30).await;
    let shards = [
        (g.partition(&[("rs", "shard2")]), g.offset(24)),
        (g.partition(&[("rs", "shard1")]), g.offset(19)),
        (g.partition(&[("rs", "shard0")]), g.offset(9)),
    ];
    // WHEN they are imported with --use-oldest
    let (code, out) = g.import(&shards, &["--use-oldest"]);
    // THEN the oldest is taken, and the output says so and that duplicates follow
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("--use-oldest takes the oldest of 3 partitions"),
        "{out}"
    );
    let oldest = format!("(replica set or shard \"shard0\"): {}", g.printed(9));
    assert!(out.contains(&oldest), "{out}");
    assert!(out.contains("published again (duplicates)"), "{out}");
    assert_eq!(g.imported_token().await, g.events[9].0);
    // AND the bridge, started on it, publishes every event after the oldest position
    let bridge = start_bridge(&g.text).await;
    g.coll.insert_one(doc! { "_id": "end" }).await.unwrap();
    let records = read_through(&g.topic, "{\"id\":\"\\\"end\\\"\"}").await;
    bridge.shutdown();
    bridge.wait().await.unwrap();
    let keys: Vec<String> = records
        .iter()
        .filter_map(|r| String::from_utf8(r.key.clone()?).ok())
        .collect();
    let expected: Vec<String> = (10..30)
        .map(|i| format!("{{\"id\":\"{i}\"}}"))
        .chain(["{\"id\":\"\\\"end\\\"\"}".to_owned()])
        .collect();
    assert_eq!(
        keys, expected,
        "every event after the oldest position, once, in order"
    );
}
