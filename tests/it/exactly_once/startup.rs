//! Exactly-once start-up beside other pipelines' open transactions: each pipeline reads its
//! own progress topic, so one pipeline's open transaction holds back no other's start.
//!
//! Before (one progress topic shared by a deployment's pipelines), a start-up read waited for
//! the partition's last stable offset to pass every other pipeline's open transaction, up to
//! `transaction.timeout.ms`: with a transaction held open on the shared topic, no pipeline of
//! the deployment could start.

use std::time::{Duration, Instant};

use bson::doc;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::common::bridge::start_bridge;
use crate::common::config::config_toml;
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::observe::get;
use crate::common::servers::kafka_bootstrap;
use crate::common::{eventually, unique};

const PIPELINES: usize = 10;
const WAIT: Duration = Duration::from_secs(120);

/// Ten exactly-once pipelines `p0`…`p9` on collections `c0`…`c9` of `db`.
fn ten(db: &str) -> String {
    let extra = format!("delivery = \"exactly_once\"\ntopic = \"{db}.c0\"\n");
    let mut text = config_toml("p0", db, Some("c0"), &extra);
    for i in 1..PIPELINES {
        text.push_str(&format!(
            "\n[[pipelines]]\nname = \"p{i}\"\ndatabase = \"{db}\"\ncollection = \"c{i}\"\n\
             topic = \"{db}.c{i}\"\ndelivery = \"exactly_once\"\n"
        ));
    }
    text
}

/// Seconds until every pipeline's change stream is open (`…_stream_open` 1 for each).
async fn all_open(addr: std::net::SocketAddr, since: Instant) -> f64 {
    eventually(WAIT, "every pipeline's stream open", || async move {
        let (_, metrics) = get(addr, "/metrics").await;
        let open = metrics
            .lines()
            .filter(|l| l.starts_with("mongo_kafka_bridge_stream_open{") && l.ends_with(" 1"))
            .count();
        (open == PIPELINES).then_some(())
    })
    .await;
    since.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_exactly_once_pipelines_start_beside_an_open_transaction_of_one_of_them() {
    // GIVEN ten exactly-once pipelines that ran once (each has its progress topic and record)
    let db = unique("eosstart");
    let text = ten(&db);
    let client = mongo().await;
    for i in 0..PIPELINES {
        create_topic(&format!("{db}.c{i}"), 1).await;
    }
    let first = Instant::now();
    let bridge = start_bridge(&text).await;
    let fresh = all_open(bridge.metrics_addr(), first).await;
    for i in 0..PIPELINES {
        let coll = client
            .database(&db)
            .collection::<bson::Document>(&format!("c{i}"));
        coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    }
    let p1 = wait_offsets(&client, &db, "p1", WAIT, |d| {
        d.get_i64("eventsCommitted") == Ok(1)
    })
    .await;
    bridge.shutdown();
    bridge.wait().await.unwrap();

    // WHEN a transaction stays open on p1's progress topic (as a stalled owner's would)
    let uid = p1.get_str("streamUid").unwrap();
    let topic = format!("__mongo_kafka_bridge.{db}_offsets.progress.{uid}");
    let holder: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("transactional.id", format!("{db}-holder"))
        .set("transaction.timeout.ms", "600000")
        .create()
        .unwrap();
    holder.init_transactions(Duration::from_secs(30)).unwrap();
    holder.begin_transaction().unwrap();
    holder
        .send(BaseRecord::to(&topic).key("held").payload("{}"))
        .map_err(|(e, _)| e)
        .unwrap();
    holder.flush(Duration::from_secs(30)).unwrap();

    // THEN the nine other pipelines start while it is open, and p1 once it ends
    let again = Instant::now();
    let bridge = start_bridge(&text).await;
    let addr = bridge.metrics_addr();
    let nine = eventually(
        WAIT,
        "the nine other pipelines' streams open",
        || async move {
            let (_, metrics) = get(addr, "/metrics").await;
            let open: Vec<String> = (0..PIPELINES)
                .filter(|i| *i != 1)
                .map(|i| format!("mongo_kafka_bridge_stream_open{{pipeline=\"p{i}\"}} 1"))
                .filter(|series| metrics.lines().any(|l| l == series))
                .collect();
            (open.len() == PIPELINES - 1).then_some(again.elapsed().as_secs_f64())
        },
    )
    .await;
    // (p1 itself cannot start yet: its read waits for the open transaction, as every
    // pipeline's did for any other's on the shared topic)
    let (_, metrics) = get(addr, "/metrics").await;
    let p1_open = "mongo_kafka_bridge_stream_open{pipeline=\"p1\"} 1";
    assert!(!metrics.lines().any(|l| l == p1_open), "{metrics}");
    holder.abort_transaction(Duration::from_secs(30)).unwrap();
    let restart = all_open(addr, again).await;
    eprintln!(
        "ten exactly-once pipelines: every stream open {fresh:.1} s after a first start; after \
         a restart beside an open transaction on p1's progress topic, the other nine {nine:.1} s, \
         all ten {restart:.1} s (p1 once it was aborted)"
    );
    bridge.shutdown();
    bridge.wait().await.unwrap();
}
