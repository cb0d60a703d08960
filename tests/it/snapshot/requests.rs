//! Snapshot requests that meet: two `snapshot` commands at once (issue "Proof at length"). A
//! request waiting in the offsets document is merged with the next one, never replaced, so
//! each command's namespaces are copied by the one snapshot that answers both.

use std::time::Duration;

use bson::{Bson, doc};

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::collect::collect_raw_quiet;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mirror::{assert_bracketed, operation_types, wait_finished};
use crate::common::mongo::{mongo, offsets_doc};
use crate::common::unique;

/// The `mongo.operation_type` header of every record of `topic`.
async fn operations(topic: &str) -> Vec<String> {
    let records = collect_raw_quiet(topic, Duration::from_secs(3), Duration::from_secs(60)).await;
    operation_types(&records)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_snapshot_commands_at_once_for_two_collections_copy_both() {
    // GIVEN a database scope over a, b and c, whose pipeline has not run yet
    let client = mongo().await;
    let db = unique("snapreq");
    for coll in ["a", "b", "c"] {
        create_topic(&format!("{db}.{coll}"), 1).await;
        let docs = (0..20_i64).map(|i| doc! { "_id": i });
        let target = client.database(&db).collection(coll);
        target.insert_many(docs).await.expect("seed");
    }
    let name = unique("snapreq");
    let lines = "full_document = \"update_lookup\"\nformat = \"bson\"\n";
    let text = config_toml(&name, &db, None, lines);
    let file = config_file(&text);
    // WHEN two operators ask, at once, for a snapshot of a and one of b
    let asks: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|coll| {
            let (path, ns, name) = (file.path().to_owned(), format!("{db}.{coll}"), name.clone());
            std::thread::spawn(move || bridge_cli(&["snapshot", &name, "--namespace", &ns], &path))
        })
        .collect();
    for ask in asks {
        let (code, stdout, stderr) = ask.join().expect("the command ran");
        assert_eq!(code, Some(0), "{stdout}{stderr}");
    }
    // THEN the waiting request names both collections
    let stored = offsets_doc(&client, &db, &name)
        .await
        .expect("the request's document");
    let request = stored
        .get_document("snapshotRequest")
        .expect("a request waits");
    let both = vec![
        Bson::String(format!("{db}.a")),
        Bson::String(format!("{db}.b")),
    ];
    assert_eq!(request.get_array("namespace"), Ok(&both), "{request}");
    // and the owner, once started, copies a and b, and not c
    let bridge = start_bridge(&text).await;
    let done = wait_finished(&client, &db, &name, Duration::from_secs(120)).await;
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
    let last = done.get_document("lastSnapshot").expect("finished");
    // (40: c's 20 documents were not copied)
    assert_eq!(last.get_i64("copied"), Ok(40), "{last}");
    for coll in ["a", "b"] {
        assert_bracketed(&operations(&format!("{db}.{coll}")).await, 20, coll);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_snapshot_of_a_collection_mongodb_does_not_have_is_refused() {
    // GIVEN a database scope with one collection
    let client = mongo().await;
    let db = unique("snapnone");
    let target = client.database(&db).collection("a");
    target.insert_one(doc! { "_id": 1 }).await.expect("seed");
    let name = unique("snapnone");
    let text = config_toml(&name, &db, None, "full_document = \"update_lookup\"\n");
    let file = config_file(&text);
    // WHEN an operator mistypes the collection's name
    let ns = format!("{db}.A");
    let (code, stdout, stderr) = bridge_cli(&["snapshot", &name, "--namespace", &ns], file.path());
    // THEN nothing is requested (a typo would publish markers to a topic of its own), and
    // the output says why
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stdout.contains("no such collection"), "{stdout}");
    assert!(offsets_doc(&client, &db, &name).await.is_none());
}
