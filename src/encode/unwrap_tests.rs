//! The unwrapped form (`encode/unwrap.rs`): each kind of event's records in JSON and BSON, the
//! added fields, the delete modes, a copied document, a collision, the refusals at load
//! (`config/unwrap.rs`), and every document of the BSON corpus (`../shared/data`, skipped with
//! the reason when absent) unwrapped to its own bytes.

use bson::{Bson, DateTime, Document, RawDocumentBuf, Timestamp, doc};

use super::RecordEncoder;
use crate::config::Config;

const WALL_MS: i64 = 1_704_164_645_123;

fn config(extra: &str) -> Result<Config, crate::error::BridgeError> {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n{extra}"
    );
    Config::from_toml(&text, std::iter::empty())
}

fn encoder(extra: &str) -> RecordEncoder {
    let config = config(&format!("value = \"unwrapped\"\n{extra}")).expect("valid config");
    RecordEncoder::new(&config.pipelines[0], "")
}

fn refused(extra: &str) -> (String, String) {
    match config(extra) {
        Err(crate::error::BridgeError::Config { field, reason }) => (field, reason),
        other => panic!("expected a config error for {extra:?}, got {other:?}"),
    }
}

/// A change event as the server sends it, with `rest` after `documentKey`.
fn event(op: &str, rest: Document) -> RawDocumentBuf {
    let mut d = doc! {
        "_id": { "_data": "82" }, "operationType": op,
        "clusterTime": Timestamp { time: 1_704_164_645, increment: 1 },
        "wallTime": DateTime::from_millis(WALL_MS),
        "ns": { "db": "shop", "coll": "orders" }, "documentKey": { "_id": 7 },
    };
    d.extend(rest);
    RawDocumentBuf::from_document(&d).expect("a document")
}

/// The values of `raw`'s records, read back as JSON (`None`: a tombstone).
fn values(encoder: &mut RecordEncoder, raw: &RawDocumentBuf) -> Vec<Option<serde_json::Value>> {
    let encoded = encoder.encode(raw).expect("encodes");
    encoded
        .records
        .iter()
        .map(|r| {
            r.value
                .as_ref()
                .map(|v| serde_json::from_slice(v).expect("JSON"))
        })
        .collect()
}

#[test]
fn an_insert_is_its_document_and_the_added_fields_follow_in_order() {
    let raw = event("insert", doc! { "fullDocument": { "_id": 7, "qty": 2 } });
    assert_eq!(
        values(&mut encoder(""), &raw),
        vec![Some(serde_json::json!({"_id": 7, "qty": 2}))]
    );
    let mut with = encoder("[pipelines.unwrap]\nadd_fields = [\"ts_ms\", \"op\", \"ns\"]");
    let got = values(&mut with, &raw);
    assert_eq!(
        got,
        vec![Some(serde_json::json!({
            "_id": 7, "qty": 2, "__op": "c", "__ns": "shop.orders", "__ts_ms": WALL_MS
        }))]
    );
    let text = serde_json::to_string(&got[0]).unwrap_or_default();
    assert!(text.find("__op") < text.find("__ns") && text.find("__ns") < text.find("__ts_ms"));
}

#[test]
fn an_update_without_its_document_is_the_key_and_the_changes_marked_partial() {
    let raw = event(
        "update",
        doc! { "updateDescription": {
            "updatedFields": { "qty": 3, "addr.city": "Lyon" },
            "removedFields": ["note"], "truncatedArrays": [],
        } },
    );
    let mut e = encoder("[pipelines.unwrap]\nadd_fields = [\"op\"]");
    assert_eq!(
        values(&mut e, &raw),
        vec![Some(serde_json::json!({
            "_id": 7, "qty": 3, "addr.city": "Lyon", "__removed": ["note"],
            "__partial": true, "__op": "u"
        }))]
    );
    // With a full document (update_lookup, post-images), the document itself.
    let full = event(
        "update",
        doc! { "updateDescription": { "updatedFields": { "qty": 3 }, "removedFields": [] },
        "fullDocument": { "_id": 7, "qty": 3 } },
    );
    assert_eq!(
        values(&mut encoder(""), &full),
        vec![Some(serde_json::json!({"_id": 7, "qty": 3}))]
    );
}

#[test]
fn a_delete_is_a_tombstone_or_a_deleted_record_with_or_without_one() {
    let raw = event("delete", doc! {});
    assert_eq!(values(&mut encoder(""), &raw), vec![None]);
    let rewrite = "[pipelines.unwrap]\ndeletes = \"rewrite\"";
    assert_eq!(
        values(&mut encoder(rewrite), &raw),
        vec![Some(serde_json::json!({"_id": 7, "__deleted": true}))]
    );
    let both = "[pipelines.unwrap]\ndeletes = \"rewrite_with_tombstone\"\nadd_fields = [\"op\"]";
    assert_eq!(
        values(&mut encoder(both), &raw),
        vec![
            Some(serde_json::json!({"_id": 7, "__deleted": true, "__op": "d"})),
            None
        ]
    );
    // The pre-image's fields when the event carries one.
    let before = event(
        "delete",
        doc! { "fullDocumentBeforeChange": { "_id": 7, "qty": 1 } },
    );
    assert_eq!(
        values(&mut encoder(rewrite), &before),
        vec![Some(
            serde_json::json!({"_id": 7, "qty": 1, "__deleted": true})
        )]
    );
}

#[test]
fn an_event_without_a_document_keeps_the_whole_event() {
    let raw = RawDocumentBuf::from_document(&doc! {
        "_id": { "_data": "82" }, "operationType": "drop",
        "ns": { "db": "shop", "coll": "orders" },
    })
    .expect("a document");
    let got = values(&mut encoder(""), &raw);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].as_ref().map(|v| v["operationType"].clone()),
        Some("drop".into())
    );
}

#[test]
fn bson_values_are_the_built_documents_bytes() {
    let raw = event(
        "insert",
        doc! { "fullDocument": { "_id": 7, "big": 1_i64 << 40 } },
    );
    let mut e = encoder("format = \"bson\"\n[pipelines.unwrap]\nadd_fields = [\"op\"]");
    let encoded = e.encode(&raw).expect("encodes");
    let value = encoded.records[0].value.as_deref().expect("a value");
    let back = bson::Document::from_reader(value).expect("BSON");
    assert_eq!(back, doc! { "_id": 7, "big": 1_i64 << 40, "__op": "c" });
    assert_eq!(
        back.get("big"),
        Some(&Bson::Int64(1 << 40)),
        "the type is kept"
    );
}

#[test]
fn a_field_named_like_an_added_field_goes_to_the_policy_never_overwritten() {
    let raw = event(
        "insert",
        doc! { "fullDocument": { "_id": 7, "__op": "mine" } },
    );
    let mut failing = encoder("[pipelines.unwrap]\nadd_fields = [\"op\"]");
    let error = failing
        .encode(&raw)
        .expect_err("a collision fails by default");
    assert!(error.to_string().contains("fullDocument.__op"), "{error}");
    let mut as_bson = encoder("on_ambiguous = \"bson\"\n[pipelines.unwrap]\nadd_fields = [\"op\"]");
    let encoded = as_bson.encode(&raw).expect("diverted");
    let value = encoded.records[0].value.as_deref().expect("a value");
    let back = bson::Document::from_reader(value).expect("BSON");
    assert_eq!(
        back,
        doc! { "_id": 7, "__op": "mine" },
        "the server's document"
    );
}

#[test]
fn the_table_needs_its_mode_and_a_snapshot_needs_tombstones() {
    let (field, reason) = refused("[pipelines.unwrap]\ndeletes = \"rewrite\"");
    assert_eq!(field, "pipelines[0].unwrap");
    assert!(reason.contains("value = \"unwrapped\""), "{reason}");
    let (field, reason) = refused(
        "value = \"unwrapped\"\nsnapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
         [pipelines.unwrap]\ndeletes = \"rewrite\"",
    );
    assert_eq!(field, "pipelines[0].unwrap.deletes");
    assert!(reason.contains("rewrite_with_tombstone"), "{reason}");
    let (field, _) = refused("value = \"unwrapped\"\nsnapshot = \"initial\"");
    assert_eq!(field, "pipelines[0].full_document");
    assert!(
        config("value = \"unwrapped\"").is_ok(),
        "updates without documents are allowed"
    );
}

#[test]
fn the_example_configurations_unwrap_block_is_valid_once_uncommented() {
    let block =
        crate::config::tests::example_block("# [pipelines.unwrap]", "# [pipelines.routing]");
    let config = config(&format!("value = \"unwrapped\"\n{block}")).expect("the block loads");
    let settings = config.pipelines[0].unwrap.clone().expect("the table");
    assert_eq!(settings.add_fields.len(), 3, "{block}");
}

#[test]
fn every_corpus_document_unwraps_to_its_own_bytes_and_its_update_to_its_fields() {
    let Some(docs) = super::fields_corpus_tests::corpus() else {
        return;
    };
    let mut e = encoder("format = \"bson\"\n[pipelines.unwrap]\nadd_fields = [\"op\"]");
    for (i, source) in docs.iter().enumerate() {
        // An insert whose document is the corpus document under an `_id` of its own.
        let mut full = RawDocumentBuf::new();
        full.append("_id", i as i64);
        for (k, v) in source
            .iter()
            .flatten()
            .filter(|(k, _)| *k != "_id" && !k.starts_with("__"))
        {
            full.append_ref(k, v);
        }
        let mut raw = event("insert", doc! {}).to_document().expect("a document");
        raw.insert("fullDocument", full.to_document().expect("valid"));
        let raw = RawDocumentBuf::from_document(&raw).expect("a document");
        let encoded = e.encode(&raw).expect("encodes");
        let value = encoded.records[0].value.as_deref().expect("a value");
        let mut expected = full.clone();
        expected.append("__op", "c");
        assert_eq!(value, expected.as_bytes(), "corpus document {i}");
        // An update without its document: the corpus fields as updatedFields, kept as they are.
        let mut fields = full.to_document().expect("valid");
        fields.remove("_id");
        let update = event(
            "update",
            doc! { "updateDescription": { "updatedFields": fields, "removedFields": [] } },
        );
        let encoded = e.encode(&update).expect("encodes");
        let value = encoded.records[0].value.as_deref().expect("a value");
        let back = RawDocumentBuf::from_bytes(value.to_vec()).expect("BSON");
        // Compared as bytes: NaN is not equal to itself.
        let one = |k: &str, v: bson::RawBsonRef<'_>| {
            let mut d = RawDocumentBuf::new();
            d.append_ref(k, v);
            d
        };
        for (k, v) in full.iter().flatten().filter(|(k, _)| *k != "_id") {
            let got = back.get(k).ok().flatten().map(|g| one(k, g));
            assert_eq!(got, Some(one(k, v)), "corpus document {i}, {k}");
        }
        assert_eq!(back.get_bool("__partial"), Ok(true));
    }
}

#[test]
fn a_dead_lettered_delete_is_still_followed_by_its_tombstone() {
    let raw = event(
        "delete",
        doc! { "fullDocumentBeforeChange": { "_id": 7, "__deleted": false } },
    );
    let mut e = encoder(
        "on_ambiguous = \"dead_letter\"\ndead_letter_topic = \"dlq\"\n\
         [pipelines.unwrap]\ndeletes = \"rewrite_with_tombstone\"",
    );
    let encoded = e.encode(&raw).expect("diverted");
    let topics: Vec<(&str, bool)> = encoded
        .records
        .iter()
        .map(|r| (&*r.topic, r.value.is_some()))
        .collect();
    assert_eq!(topics, [("dlq", true), ("shop.orders", false)]);
}

#[test]
fn contradicting_settings_of_the_form_are_refused() {
    for (extra, field) in [
        (
            "value = \"unwrapped\"\ntombstones = false",
            "pipelines[0].tombstones",
        ),
        (
            "value = \"unwrapped\"\n[pipelines.unwrap]\nadd_fields = [\"op\", \"op\"]",
            "pipelines[0].unwrap.add_fields[1]",
        ),
        (
            "value = \"unwrapped\"\n[pipelines.unwrap]\nadd_fields = [\"op\"]\n\
             [pipelines.fields]\nrename = { \"k\" = \"__op\" }",
            "pipelines[0].fields.rename.\"k\"",
        ),
    ] {
        assert_eq!(refused(extra).0, field, "{extra}");
    }
}
