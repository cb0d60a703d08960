//! An offsets document belongs to one MongoDB cluster: the pipeline runs on server A and
//! commits; its document is copied into server B (a restored backup, an offsets database kept
//! elsewhere); on B the pipeline is refused, naming both clusters, while B's other pipeline
//! runs on: nothing of B's is published, the document is unchanged. Then A, reached by another
//! URI (`localhost` for `127.0.0.1`, another option), resumes with no record twice.
//!
//! Each server is named as the bridge names it (`crate::mongo::cluster`): `replicaSetId` on
//! MongoDB; SecantusDB has no `replSetGetConfig` (it answers CommandNotFound), and is named by
//! the UUID of its `local.oplog.rs`.

use std::path::Path;
use std::time::Duration;

use bson::{Document, doc};
use mongodb::Client;

use super::WAIT;
use crate::common::bridge::{BridgeProc, bridge_cli};
use crate::common::collect::{collect_from, per_id};
use crate::common::config::config_file;
use crate::common::observe::get;
use crate::common::servers::{Instance, kafka_bootstrap};
use crate::common::{eventually, unique};
use crate::suite::turn;

const WRITES: i64 = 20;
/// After the expected records, how long no further record may arrive.
const QUIET: Duration = Duration::from_secs(3);

/// Pipeline `orders` (`shop.orders` → `topic`) and `other` (`shop.other` → `topic`.other) on
/// `uri`, with the default offsets location.
fn toml(uri: &str, topic: &str) -> String {
    format!(
        r#"
[mongodb]
uri = "{uri}"
[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
[bridge]
commit_interval_ms = 200
max_await_time_ms = 200
shutdown_timeout_ms = 5000
[metrics]
listen = "127.0.0.1:0"
history_interval_ms = 0
[[pipelines]]
name = "orders"
database = "shop"
collection = "orders"
topic = "{topic}"
[[pipelines]]
name = "other"
database = "shop"
collection = "other"
topic = "{topic}.other"
"#,
        kafka = kafka_bootstrap(),
    )
}

/// The identity the server names itself by: `replSetGetConfig`'s replicaSetId, else (a server
/// without it, SecantusDB) the UUID `listCollections` reports for `local.oplog.rs`.
async fn cluster_id(client: &Client) -> String {
    let admin = client.database("admin");
    if let Ok(reply) = admin.run_command(doc! { "replSetGetConfig": 1 }).await {
        let settings = reply
            .get_document("config")
            .unwrap()
            .get_document("settings");
        return settings
            .unwrap()
            .get_object_id("replicaSetId")
            .unwrap()
            .to_hex();
    }
    let local = client.database("local");
    let reply = local
        .run_command(doc! { "listCollections": 1, "filter": { "name": "oplog.rs" } })
        .await
        .unwrap();
    let batch = reply
        .get_document("cursor")
        .unwrap()
        .get_array("firstBatch");
    let oplog = batch.unwrap()[0].as_document().unwrap().clone();
    let Some(bson::Bson::Binary(uuid)) = oplog.get_document("info").unwrap().get("uuid") else {
        panic!("listCollections gives no UUID for local.oplog.rs: {oplog}");
    };
    bson::Uuid::from_bytes(uuid.bytes.as_slice().try_into().unwrap()).to_string()
}

async fn insert(client: &Client, coll: &str, ids: std::ops::Range<i64>) {
    let coll = client.database("shop").collection::<Document>(coll);
    for id in ids {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
    }
}

async fn offsets(client: &Client) -> Option<Document> {
    client
        .database("mongo_kafka_bridge")
        .collection::<Document>("offsets")
        .find_one(doc! { "_id": "orders" })
        .await
        .unwrap()
}

/// Runs the bridge on `config` (its log `log`): once its stream is open, writes `ids` to
/// `shop.orders` of `client`; stops it once the offsets count `events` committed events.
async fn run(config: &Path, log: &Path, client: &Client, ids: std::ops::Range<i64>, events: i64) {
    let mut bridge = BridgeProc::spawn(config, log.to_owned());
    eventually(WAIT, "the stream is open", || async {
        offsets(client)
            .await?
            .get_document("resumeToken")
            .ok()
            .map(|_| ())
    })
    .await;
    insert(client, "orders", ids).await;
    eventually(WAIT, "the events are committed", || async {
        let committed = offsets(client).await?.get_i64("eventsCommitted").ok()?;
        (committed >= events).then_some(())
    })
    .await;
    assert!(bridge.stop(Duration::from_secs(30)).success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copied_offsets_document_is_refused_on_another_cluster_and_resumed_on_its_own() {
    let Some(_turn) = turn("deployments").await else {
        return;
    };
    let (Some(a), Some(b)) = (
        Instance::mongo("cluster-a", &[]),
        Instance::mongo("cluster-b", &[]),
    ) else {
        return;
    };
    let (client_a, client_b) = (a.client().await, b.client().await);
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("clusters");
    // GIVEN the pipeline ran on A and committed its events
    let on_a = config_file(&toml(&a.mongo_uri, &topic));
    let log = dir.path().join("a.log");
    run(on_a.path(), &log, &client_a, 100..100 + WRITES, WRITES).await;
    let published = collect_from(&kafka_bootstrap(), &topic, WRITES as usize, QUIET, WAIT).await;
    assert_eq!(published.len(), WRITES as usize);

    // WHEN its document is copied into B, which has writes of its own, and the same
    // configuration starts on B
    let copied = offsets(&client_a).await.unwrap();
    client_b
        .database("mongo_kafka_bridge")
        .collection::<Document>("offsets")
        .insert_one(copied.clone())
        .await
        .unwrap();
    insert(&client_b, "orders", 1000..1000 + WRITES).await;
    let on_b = config_file(&toml(&b.mongo_uri, &topic));
    let mut bridge_b = BridgeProc::spawn(on_b.path(), dir.path().join("b.log"));
    let addr = bridge_b.metrics_addr(WAIT).parse().unwrap();
    refused_on_b(&mut bridge_b, addr, &client_b, &topic).await;
    let ids = (cluster_id(&client_a).await, cluster_id(&client_b).await);
    let log = bridge_b.log_text();
    let refusal = log
        .lines()
        .find(|l| l.contains("pipeline refused"))
        .unwrap_or_else(|| panic!("no refusal in the log:\n{log}"));
    for id in [&ids.0, &ids.1] {
        assert!(refusal.contains(id.as_str()), "{id} not named: {refusal}");
    }
    assert!(
        refusal.contains("offsets accept-cluster orders"),
        "{refusal}"
    );
    assert!(bridge_b.stop(Duration::from_secs(30)).success());
    let (code, out, _) = bridge_cli(&["check"], on_b.path());
    assert_eq!(code, Some(1), "check fails on B:\n{out}");
    assert!(out.contains(&ids.0) && out.contains(&ids.1), "{out}");
    // THEN nothing of B's was published, and B's copy is as it was written
    let topic_now = collect_from(&kafka_bootstrap(), &topic, WRITES as usize, QUIET, WAIT).await;
    assert_eq!(
        topic_now.len(),
        WRITES as usize,
        "B published into the topic"
    );
    assert_eq!(offsets(&client_b).await.as_ref(), Some(&copied));

    resumed_by_another_uri(&a, &client_a, &topic, dir.path()).await;
}

/// B's `orders` is refused: not ready, counted, nothing of it published, while `other` runs.
async fn refused_on_b(
    bridge: &mut BridgeProc,
    addr: std::net::SocketAddr,
    client_b: &Client,
    topic: &str,
) {
    eventually(WAIT, "orders is refused, not ready", || async move {
        let (code, body) = get(addr, "/readyz").await;
        (code == 503
            && body.contains(
                "pipeline orders: refused: its position was committed on another MongoDB cluster",
            ))
        .then_some(())
    })
    .await;
    let (_, metrics) = get(addr, "/metrics").await;
    assert!(
        metrics.contains("mongo_kafka_bridge_pipeline_refused{pipeline=\"orders\"} 1"),
        "{metrics}"
    );
    // the other pipeline streams B meanwhile: the process runs on
    eventually(WAIT, "other's stream is open", || async move {
        let (_, metrics) = get(addr, "/metrics").await;
        metrics
            .contains("mongo_kafka_bridge_stream_open{pipeline=\"other\"} 1")
            .then_some(())
    })
    .await;
    insert(client_b, "other", 0..1).await;
    insert(client_b, "orders", 2000..2000 + WRITES).await;
    let other = collect_from(
        &kafka_bootstrap(),
        &format!("{topic}.other"),
        1,
        QUIET,
        WAIT,
    )
    .await;
    assert_eq!(other.len(), 1, "B's other pipeline runs");
    assert!(bridge.running());
}

/// A's configuration with another URI of the same server (`localhost`, another option)
/// resumes where it stopped: the writes made while it was stopped and after, each once, and
/// none of the ones published before again.
async fn resumed_by_another_uri(a: &Instance, client_a: &Client, topic: &str, dir: &Path) {
    let moved = a.mongo_uri.replace("127.0.0.1", "localhost") + "&appName=moved-uri";
    assert_ne!(moved, a.mongo_uri);
    let before = offsets(client_a).await.unwrap();
    insert(client_a, "orders", 200..200 + WRITES).await;
    let on_a = config_file(&toml(&moved, topic));
    let log = dir.join("a-moved.log");
    run(on_a.path(), &log, client_a, 300..300 + WRITES, 3 * WRITES).await;
    let records = collect_from(&kafka_bootstrap(), topic, 3 * WRITES as usize, QUIET, WAIT).await;
    let counts = per_id(&records);
    for id in (100..100 + WRITES)
        .chain(200..200 + WRITES)
        .chain(300..300 + WRITES)
    {
        assert_eq!(
            counts.get(&id).copied(),
            Some(1),
            "document {id}: {counts:?}"
        );
    }
    assert_eq!(records.len(), 3 * WRITES as usize, "{counts:?}");
    let after = offsets(client_a).await.unwrap();
    assert_eq!(
        after.get("cluster"),
        before.get("cluster"),
        "the same cluster"
    );
}
