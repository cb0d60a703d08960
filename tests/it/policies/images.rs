//! C15 at a database or deployment scope (`docs/RELIABILITY.md`, README "Pre- and post-images"):
//! `full_document_before_change = "required"` holds for the collections a pipeline captures, and
//! only for them. Writes to an uncaptured collection without images (and the bridge's own
//! offsets writes, which a deployment scope covers) pass unseen; captured updates, replaces and
//! deletes carry their pre-images; a captured collection that loses its images stops the
//! pipeline, naming it, and `check` names it too.
//!
//! SecantusDB applies `required` to every event of the scope before the pipeline's `$match`
//! runs (so before the bridge's fix such a pipeline stopped on the first uncaptured update);
//! mongod moves a `$match` it can ahead of the pre-image lookup. The bridge asks for
//! `whenAvailable` at these scopes and checks itself, so the test holds on both.

use std::time::Duration;

use bson::{Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::error::ErrorClass;

use crate::common::bridge::{bridge_cli, start_bridge, stops_within};
use crate::common::collect::{Received, operation_types, records};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{events_committed, mongo, offsets_doc, wait_offsets};
use crate::common::observe::restarts;
use crate::common::unique;

const WAIT: Duration = Duration::from_secs(30);

/// The pipeline `p` of scope `db` (or the deployment, `deployment`), capturing `db.orders` and
/// `db.payments` with required pre-images.
fn wide_config(db: &str, deployment: bool) -> String {
    let stages = format!(
        "pipeline = '[{{\"$match\": {{\"ns\": {{\"$in\": [{{\"db\": \"{db}\", \"coll\": \
         \"orders\"}}, {{\"db\": \"{db}\", \"coll\": \"payments\"}}]}}}}}}]'\n\
         full_document_before_change = \"required\"\n"
    );
    let text = config_toml("p", db, None, &stages);
    if deployment {
        text.replacen(&format!("database = \"{db}\"\n"), "", 1)
    } else {
        text
    }
}

/// The `fullDocumentBeforeChange` of each record, as relaxed Extended JSON (`null` for none).
fn pre_images(records: &[Received]) -> Vec<String> {
    records
        .iter()
        .filter(|r| r.value.is_some())
        .map(|r| r.json()["fullDocumentBeforeChange"].to_string())
        .collect()
}

/// The lines of `check`'s output about images that name `namespace` (the topic and size lines
/// cover every namespace of the scope, captured or not).
fn images_lines_naming(out: &str, namespace: &str) -> usize {
    out.lines()
        .filter(|l| l.contains("images") && l.contains(namespace))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn c15_a_wide_scope_requires_the_pre_images_of_what_it_captures_only() {
    for deployment in [false, true] {
        let scope = if deployment { "deployment" } else { "database" };
        // GIVEN orders and payments with pre-/post-images, audit without, in one database, and
        // a pipeline of that scope capturing orders and payments with required pre-images
        let db = unique("c15wide");
        let client = mongo().await;
        let database = client.database(&db);
        for coll in ["orders", "payments"] {
            database
                .run_command(
                    doc! { "create": coll, "changeStreamPreAndPostImages": { "enabled": true } },
                )
                .await
                .unwrap();
            create_topic(&format!("{db}.{coll}"), 1).await;
        }
        database.create_collection("audit").await.unwrap();
        let text = wide_config(&db, deployment);
        let file = config_file(&text);
        let (code, out, err) = bridge_cli(&["check"], file.path());
        let captured = "pre-/post-images enabled on the 2 collections it captures";
        assert!(out.contains(captured), "{scope}: {code:?}\n{out}{err}");
        assert_eq!(
            images_lines_naming(&out, &format!("{db}.audit")),
            0,
            "{scope}: {out}"
        );
        let bridge = start_bridge(&text).await;
        let metrics = bridge.metrics().clone();
        wait_offsets(&client, &db, "p", WAIT, |d| d.contains_key("resumeToken")).await;
        // WHEN the uncaptured collection is written first, then the captured ones
        let [orders, payments, audit] =
            ["orders", "payments", "audit"].map(|c| database.collection::<Document>(c));
        audit.insert_one(doc! { "_id": 1, "v": 1 }).await.unwrap();
        audit
            .update_one(doc! { "_id": 1 }, doc! { "$set": { "v": 2 } })
            .await
            .unwrap();
        audit.delete_one(doc! { "_id": 1 }).await.unwrap();
        orders.insert_one(doc! { "_id": 1, "v": 1 }).await.unwrap();
        orders
            .update_one(doc! { "_id": 1 }, doc! { "$set": { "v": 2 } })
            .await
            .unwrap();
        orders
            .replace_one(doc! { "_id": 1 }, doc! { "v": 3 })
            .await
            .unwrap();
        payments
            .insert_one(doc! { "_id": 1, "v": 1 })
            .await
            .unwrap();
        payments.delete_one(doc! { "_id": 1 }).await.unwrap();
        // THEN the captured events are delivered with their pre-images, the audit writes and
        // the bridge's own offsets writes passed unseen, and the pipeline never restarted
        wait_offsets(&client, &db, "p", WAIT, |d| events_committed(d) == 5).await;
        let orders_records = records(&format!("{db}.orders"), 3, WAIT).await;
        assert_eq!(
            operation_types(&orders_records),
            ["insert", "update", "replace"]
        );
        assert_eq!(
            pre_images(&orders_records)[1..],
            [r#"{"_id":1,"v":1}"#, r#"{"_id":1,"v":2}"#],
            "{scope}"
        );
        let payments_records = records(&format!("{db}.payments"), 3, WAIT).await;
        assert_eq!(
            operation_types(&payments_records),
            ["insert", "delete", "delete"]
        );
        assert_eq!(
            pre_images(&payments_records)[1],
            r#"{"_id":1,"v":1}"#,
            "{scope}"
        );
        assert_eq!(restarts(&metrics, "p"), 0.0, "{scope}");
        // WHEN a captured collection loses its images and one of its documents is updated
        let disable = doc! {
            "collMod": "payments", "changeStreamPreAndPostImages": { "enabled": false }
        };
        database.run_command(disable).await.unwrap();
        payments
            .insert_one(doc! { "_id": 2, "v": 1 })
            .await
            .unwrap();
        payments
            .update_one(doc! { "_id": 2 }, doc! { "$set": { "v": 2 } })
            .await
            .unwrap();
        // THEN the pipeline stops on that update, loudly (fatal, kind source, no restart),
        // naming the collection; nothing of the update was published or committed
        let error = stops_within(bridge, Duration::from_secs(20))
            .await
            .expect_err("a captured update without its required pre-image must stop the bridge");
        assert!(
            matches!(error, BridgeError::MissingPreImage(_)),
            "{scope}: {error:?}"
        );
        assert_eq!(error.class(), ErrorClass::Fatal, "{scope}");
        assert_eq!(error.kind(), "source", "{scope}");
        let text = mongo_kafka_bridge::error::report(&error, &[]);
        assert!(
            text.contains(&format!("the update event of {db}.payments")),
            "{scope}: {text}"
        );
        assert_eq!(restarts(&metrics, "p"), 0.0, "{scope}");
        let offsets = offsets_doc(&client, &db, "p").await.unwrap();
        assert_eq!(events_committed(&offsets), 6, "{scope}: {offsets}");
        let payments_records = records(&format!("{db}.payments"), 4, WAIT).await;
        assert_eq!(
            operation_types(&payments_records),
            ["insert", "delete", "delete", "insert"],
            "{scope}"
        );
        // AND check names the collection (✘, exit 1), not the uncaptured one
        let (code, out, err) = bridge_cli(&["check"], file.path());
        assert_eq!(code, Some(1), "{scope}: {out}{err}");
        let named = format!(
            "✘ pipeline p: images are `required` (full_document_before_change) but not enabled \
             on {db}.payments, which it captures"
        );
        assert!(out.lines().any(|l| l.starts_with(&named)), "{scope}: {out}");
        assert_eq!(
            images_lines_naming(&out, &format!("{db}.audit")),
            0,
            "{scope}: {out}"
        );
        eprintln!("c15 {scope}: {text}");
    }
}

#[test]
fn check_says_when_it_cannot_tell_which_collections_a_filter_captures() {
    // GIVEN a database-scope pipeline with required pre-images and a filter on ns that cannot
    // be mapped to collections (a regular expression)
    let db = unique("c15regex");
    let stages = "pipeline = '[{\"$match\": {\"ns.coll\": {\"$regex\": \"^pay\"}}}]'\n\
                  full_document_before_change = \"required\"\n";
    let file = config_file(&config_toml("p", &db, None, stages));
    // WHEN check runs THEN it says plainly that it cannot tell, naming the condition
    let (_, out, err) = bridge_cli(&["check"], file.path());
    let line = out
        .lines()
        .find(|l| l.contains("cannot tell which collections it captures"))
        .unwrap_or_else(|| panic!("{out}{err}"));
    assert!(line.starts_with('⚠'), "{line}");
    assert!(line.contains("ns.coll"), "{line}");
    assert!(!out.contains("images enabled on"), "{out}");
}
