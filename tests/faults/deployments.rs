//! Deployments side by side, each an ordinary test of this binary (see `main.rs`) that skips
//! when the servers are external:
//!
//! - Two deployments on one Kafka cluster, each with its own MongoDB, both with the default
//!   offsets settings and the same `[bridge] group_id`: each runs its own pipeline. Before: both
//!   joined one consumer group on one control topic, so the pipeline's one slot was assigned to
//!   a member of only one deployment; the other delivered nothing (reproduced from outside:
//!   50/50 and 0/50) and logged only `assigned slots=[]`.
//! - An offsets document belongs to one MongoDB cluster (issue 37, item 2): a copy of it on a
//!   second server is refused there, naming both clusters, with nothing published and nothing
//!   written; the first cluster reached by another URI resumes with no record twice. Before:
//!   the second server accepted the foreign resume token, `/readyz` said ready, and the
//!   pipeline published the second server's changes after it.

use std::time::Duration;

use bson::doc;

use crate::common::collect::collect_from;
use crate::common::config::config;
use crate::common::observe::get;
use crate::common::servers::Instance;
use crate::common::{eventually, unique};
use crate::suite::turn;

mod cluster;

const WAIT: Duration = Duration::from_secs(120);
const WRITES: i32 = 50;

/// A deployment's configuration: default offsets settings, group `shared`, one pipeline.
fn toml(mongo_uri: &str, kafka: &str, topic: &str) -> String {
    format!(
        r#"
[mongodb]
uri = "{mongo_uri}"
[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
[bridge]
group_id = "shared"
commit_interval_ms = 200
max_await_time_ms = 200
shutdown_timeout_ms = 5000
[metrics]
listen = "127.0.0.1:0"
[[pipelines]]
name = "orders"
database = "shop"
collection = "orders"
topic = "{topic}"
"#
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn two_deployments_with_one_group_id_on_one_kafka_each_run_their_pipeline() {
    let Some(_turn) = turn("deployments").await else {
        return;
    };
    let Some(a) = Instance::managed("deploy-a", &[]) else {
        return;
    };
    let Some(b) = Instance::mongo("deploy-b", &[]) else {
        return;
    };
    // GIVEN two deployments (two MongoDB servers) on instance a's Kafka, same group_id
    let topics = [unique("deploya"), unique("deployb")];
    let uris = [&a.mongo_uri, &b.mongo_uri];
    let mut bridges = Vec::new();
    for (uri, topic) in uris.iter().zip(&topics) {
        let text = toml(uri, &a.kafka, topic);
        bridges.push(
            mongo_kafka_bridge::Bridge::start(config(&text))
                .await
                .unwrap(),
        );
    }
    for bridge in &bridges {
        let addr = bridge.metrics_addr();
        eventually(WAIT, "the member runs its pipeline", || async move {
            let (code, body) = get(addr, "/readyz").await;
            (code == 200 && body.contains("runs 1 pipeline")).then_some(())
        })
        .await;
    }
    // WHEN each deployment's collection gets 50 writes
    for uri in uris {
        let client = mongodb::Client::with_uri_str(uri).await.unwrap();
        let orders = client
            .database("shop")
            .collection::<bson::Document>("orders");
        for id in 0..WRITES {
            orders.insert_one(doc! { "_id": id }).await.unwrap();
        }
    }
    // THEN each deployment delivered its 50 to its topic
    for topic in &topics {
        let got = collect_from(&a.kafka, topic, WRITES as usize, Duration::ZERO, WAIT).await;
        assert_eq!(got.len(), WRITES as usize, "records on {topic}");
    }
    for bridge in bridges {
        bridge.shutdown();
        let _ = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await;
    }
}
