//! The unwrapped form on the real servers (`value = "unwrapped"`, README "The unwrapped form"):
//! a copied document, an insert, an update without its document (the changed fields, marked
//! partial), an update with it (the whole document), and a delete as a deleted record then a
//! tombstone, each keyed by its `documentKey` and in write order on its partition; `check` says
//! what the form writes.

use std::time::Duration;

use bson::{Document, doc};
use serde_json::json;

use crate::common::bridge::bridge_cli;
use crate::common::collect::records;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn each_event_is_the_flat_document_and_a_delete_a_deleted_record_then_a_tombstone() {
    // GIVEN a document before the bridge starts (copied), and the form with every added field
    let db = unique("unwrap");
    let topic = format!("{db}.orders");
    create_topic(&topic, 3).await;
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("orders");
    coll.insert_one(doc! { "_id": 1, "qty": 1 }).await.unwrap();
    let extra = "value = \"unwrapped\"\nsnapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
                 [pipelines.unwrap]\ndeletes = \"rewrite_with_tombstone\"\n\
                 add_fields = [\"op\", \"ns\", \"ts_ms\"]\n";
    let text = config_toml("unwrap", &db, Some("orders"), extra);
    let file = config_file(&text);
    let (code, stdout, stderr) = bridge_cli(&["check"], file.path());
    let said = stdout
        .lines()
        .find(|l| l.contains("unwrapped form"))
        .unwrap_or_else(|| panic!("no line on the form ({code:?}): {stdout}{stderr}"));
    assert!(
        said.contains("a record with __deleted: true, then a tombstone")
            && said.contains("added __op, __ns, __ts_ms"),
        "{said}"
    );
    let bridge = crate::common::bridge::start_bridge(&text).await;
    let opened = |d: &Document| d.contains_key("resumeToken");
    wait_offsets(&client, &db, "unwrap", WAIT, opened).await;
    // WHEN a document is inserted, updated twice and deleted
    coll.insert_one(doc! { "_id": 2, "qty": 2, "note": "n" })
        .await
        .unwrap();
    coll.update_one(doc! { "_id": 2 }, doc! { "$set": { "qty": 3 } })
        .await
        .unwrap();
    coll.delete_one(doc! { "_id": 2 }).await.unwrap();
    // THEN document 2's records, in order on its partition: the insert, the update (its lookup
    // may find the document already deleted: then the changed fields, marked partial), the
    // deleted record and the tombstone
    let deadline = std::time::Instant::now() + WAIT;
    let recs = loop {
        let recs = records(&topic, 1, Duration::from_secs(5)).await;
        let of_two: Vec<_> = recs
            .into_iter()
            .filter(|r| r.key.as_deref() == Some(r#"{"_id":{"$numberInt":"2"}}"#))
            .collect();
        if of_two.len() >= 4 || std::time::Instant::now() > deadline {
            break of_two;
        }
    };
    let values: Vec<Option<serde_json::Value>> = recs
        .iter()
        .map(|r| r.value.as_deref().map(|v| serde_json::from_str(v).unwrap()))
        .collect();
    assert_eq!(values.len(), 4, "{values:?}");
    let strip = |v: &serde_json::Value| {
        let mut v = v.clone();
        let ts = v.as_object_mut().and_then(|o| o.remove("__ts_ms"));
        assert!(ts.is_some_and(|t| t.as_i64().is_some_and(|ms| ms > 1_700_000_000_000)));
        v
    };
    let ns = format!("{db}.orders");
    assert_eq!(
        strip(values[0].as_ref().unwrap()),
        json!({"_id": 2, "qty": 2, "note": "n", "__op": "c", "__ns": ns})
    );
    let update = strip(values[1].as_ref().unwrap());
    let whole = json!({"_id": 2, "qty": 3, "note": "n", "__op": "u", "__ns": ns});
    let partial = json!({"_id": 2, "qty": 3, "__partial": true, "__op": "u", "__ns": ns});
    assert!(update == whole || update == partial, "{update}");
    assert_eq!(
        strip(values[2].as_ref().unwrap()),
        json!({"_id": 2, "__deleted": true, "__op": "d", "__ns": ns})
    );
    assert_eq!(values[3], None, "the tombstone");
    assert!(recs.windows(2).all(|w| w[0].partition == w[1].partition));
    // AND the copied document is flat too, marked "r"
    let all = records(&topic, 1, Duration::from_secs(2)).await;
    let copied = all
        .iter()
        .filter(|r| r.key.as_deref() == Some(r#"{"_id":{"$numberInt":"1"}}"#))
        .filter_map(|r| r.value.as_deref())
        .map(|v| strip(&serde_json::from_str(v).unwrap()))
        .find(|v| v["__op"] == "r");
    assert_eq!(
        copied,
        Some(json!({"_id": 1, "qty": 1, "__op": "r", "__ns": ns}))
    );
    bridge.shutdown();
    bridge.wait().await.expect("clean stop");
}
