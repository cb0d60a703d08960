//! The MongoDB cluster a position belongs to, against the live server: a take records the
//! cluster the server names (also into a document an older version wrote), refuses a document
//! that records another cluster before its epoch moves (a take and a standby's take alike),
//! and `offsets accept-cluster` records the cluster reached, keeping the position, for the next
//! take; `offsets show` and `list` print it. The copy of a document to a second server, end to
//! end, is in the fault binary (`tests/faults/deployments.rs`).

use std::time::Duration;

use bson::{DateTime, Document, Timestamp, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::cluster::ClusterError;
use mongo_kafka_bridge::offsets::{OffsetsDoc, OffsetsStore, StreamIdentity};

use crate::common::bridge::bridge_cli;
use crate::common::config::{config, config_file, config_toml};
use crate::common::mongo::mongo;
use crate::common::unique;

/// An ObjectId no server made: the identity of "another cluster".
const FOREIGN: &str = "0123456789abcdef01234567";

#[tokio::test(flavor = "multi_thread")]
async fn a_take_records_the_cluster_and_refuses_another_before_the_epoch_moves() {
    let client = mongo().await;
    let db = unique("cluster");
    let offsets_db = format!("{db}_offsets");
    let text = config_toml("p", &db, Some("t"), "");
    let identity = StreamIdentity::of(&config(&text).pipelines[0]);
    // Each store reads the cluster once, like a pipeline's start.
    let store = |owner: &str| {
        let lease = Duration::from_secs(30);
        let location = (&offsets_db, "offsets");
        OffsetsStore::new(&client, location, "p", identity.clone(), owner, lease)
    };
    let offsets = client
        .database(&offsets_db)
        .collection::<Document>("offsets");
    // GIVEN a document an older version wrote: a position, no cluster
    let position = Timestamp {
        time: 1_700_000_000,
        increment: 3,
    };
    offsets
        .insert_one(doc! { "_id": "p", "epoch": 4_i64, "eventsCommitted": 3_i64,
        "resumeToken": { "_data": "8200" }, "clusterTime": position,
        "schemaVersion": 3_i64 })
        .await
        .unwrap();
    // WHEN taken, THEN the take records the cluster the server names
    let taken = store("one").take().await.unwrap();
    assert_eq!(taken.epoch, Some(5));
    let recorded = taken.cluster.clone().expect("the take records the cluster");
    assert_ne!(recorded.id, FOREIGN);
    // A later take of the same cluster keeps it.
    let again = store("two").take().await.unwrap();
    assert_eq!(again.cluster.as_ref(), Some(&recorded));

    // WHEN the document records another cluster instead (a copy of one made elsewhere) and
    // its owner's lease has ended
    let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 1000);
    let foreign = doc! { "setName": "elsewhere", "kind": recorded.kind.as_str(), "id": FOREIGN };
    offsets
        .update_one(
            doc! { "_id": "p" },
            doc! { "$set": { "cluster": foreign, "leaseUntil": past } },
        )
        .await
        .unwrap();
    let before = offsets
        .find_one(doc! { "_id": "p" })
        .await
        .unwrap()
        .unwrap();
    // THEN a take and a standby's take are refused, naming both clusters, and nothing moved
    let three = store("three");
    match three.take().await {
        Err(BridgeError::Cluster(e)) if matches!(*e, ClusterError::Changed { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains(FOREIGN) && text.contains(&recorded.id),
                "{text}"
            );
            assert!(text.contains("offsets accept-cluster p"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let seen = OffsetsDoc::parse(&before).unwrap();
    assert!(matches!(
        three.take_lapsed(Some(&seen)).await,
        Err(BridgeError::Cluster(_))
    ));
    let after = offsets
        .find_one(doc! { "_id": "p" })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, before, "a refused take writes nothing");

    accept_then_take(&text, &recorded, &offsets, || store("four")).await;
}

/// `offsets accept-cluster` records the cluster reached (`recorded`), keeping the position;
/// the next take (of `next()`) runs; `show` and `list` print the cluster.
async fn accept_then_take(
    text: &str,
    recorded: &mongo_kafka_bridge::offsets::ClusterIdentity,
    offsets: &mongodb::Collection<Document>,
    next: impl Fn() -> OffsetsStore,
) {
    let file = config_file(text);
    let (code, out, stderr) = bridge_cli(&["offsets", "accept-cluster", "p"], file.path());
    assert_eq!(code, Some(0), "{out}{stderr}");
    assert!(
        out.contains(&format!(
            "recording cluster {recorded} (was: replica set \"elsewhere\""
        )),
        "{out}"
    );
    let accepted = offsets
        .find_one(doc! { "_id": "p" })
        .await
        .unwrap()
        .unwrap();
    let parsed = OffsetsDoc::parse(&accepted).unwrap();
    assert_eq!(parsed.cluster.as_ref(), Some(recorded));
    assert_eq!(parsed.epoch, Some(7), "the accept fences any owner");
    assert_eq!(
        accepted.get_document("resumeToken").unwrap(),
        &doc! { "_data": "8200" },
        "the position is kept"
    );
    // Once more: nothing to accept.
    let (code, out, _) = bridge_cli(&["offsets", "accept-cluster", "p"], file.path());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("nothing to accept"), "{out}");
    // The next take runs.
    assert_eq!(next().take().await.unwrap().epoch, Some(8));
    let (code, out, _) = bridge_cli(&["offsets", "show", "p"], file.path());
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("  cluster: {recorded}")), "{out}");
    let (code, out, _) = bridge_cli(&["offsets", "list"], file.path());
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("CLUSTER") && out.contains(&recorded.id),
        "{out}"
    );
}
