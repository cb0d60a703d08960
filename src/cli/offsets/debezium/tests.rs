//! Reading Debezium's offsets: the shapes Kafka Connect gives them in (KIP-875 JSON of a
//! standalone and a distributed worker, the offsets topic's records), as Debezium 3.6.3 wrote
//! them here (`bench/peers/connect.py offsets`), and every refusal; which partition is taken
//! (`partitions.rs`): the current one beside older ones, the oldest with `--use-oldest`, and
//! every refusal naming each partition.

use super::offset::*;
use super::partitions::choose;
use crate::offsets::debezium::Imported;
use bson::Timestamp;

mod partitions;

/// The position `text` holds for `server`, without `--use-oldest`.
fn position(entries: &[Entry], server: &str) -> Result<Imported, String> {
    choose(entries, server, false).map(|c| c.imported)
}

/// After streaming, the last event in a transaction (Debezium 3.6.3, standalone).
const STREAMED: &str = r#"{"offsets": [{"partition": {"server_id": "dbz092117"},
  "offset": {"sec": 1796289717, "ord": 8,
    "lsid": "{\"id\": {\"$binary\": \"g6U0nUr2TWSgrPepGgsGNA==\",\"$type\": \"04\"}}",
    "resume_token": "mwAAAAJfZGF0YQCLAAAANDUwMDAwMDAxMDczMDAyMTAwMDAwMDExNzQwMDA4MDAwMDAwYjUzNDExNmIwMjZlMDAwZTAwMDAwMDczNmQ2ZjZiNjUyZTYzMzAzOTMyMzEzMTM3MDAwMzZiMDAxNjAwMDAwMDA3NWY2OTY0MDA2NWYwMDAwMDAwMDAwMDAwMDAwMDAwMDIwMDAwAAA=",
    "txnNumber": 9}}]}"#;

/// After the snapshot only: no event streamed yet, the token taken before the copy.
const SNAPSHOT_DONE: &str = r#"{"offsets":[{"partition":{"server_id":"dbz092117"},"offset":{"sec":-1,"ord":-1,"resume_token":"eQAAAAJfZGF0YQBpAAAAMzQwMDAwMDAxMDczMDAxNjAwMDAwMDExNzQwMDAzMDAwMDAwOWYzNDExNmIwMjZlMDAwZTAwMDAwMDczNmQ2ZjZiNjUyZTYzMzAzOTMyMzEzMTM3MDAwMzZiMDAwNTAwMDAwMDAwMDAAAA=="}}]}"#;

fn refused(text: &str, server: &str) -> String {
    let entries = entries_from_rest(text).expect("parses");
    position(&entries, server).expect_err("refused")
}

#[test]
fn a_streamed_offset_imports_its_token_and_cluster_time() {
    let entries = entries_from_rest(STREAMED).expect("parses");
    let imported = position(&entries, "dbz092117").expect("importable");
    let data = imported.token.get_str("_data").expect("_data");
    assert!(data.starts_with("4500000010730021"), "{data}");
    assert_eq!(imported.token.len(), 1);
    assert_eq!(
        imported.cluster_time,
        Some(Timestamp {
            time: 1_796_289_717,
            increment: 8
        })
    );
    assert_eq!(imported.from.get_str("system"), Ok("debezium"));
    assert_eq!(imported.from.get_str("serverId"), Ok("dbz092117"));
    let offset = imported.from.get_document("offset").expect("offset");
    assert_eq!(
        offset.get_i32("txnNumber"),
        Ok(9),
        "JSON integers become Int32 when they fit"
    );
}

#[test]
fn an_offset_right_after_the_snapshot_imports_its_token_without_a_time() {
    let entries = entries_from_rest(SNAPSHOT_DONE).expect("parses");
    let imported = position(&entries, "dbz092117").expect("importable");
    assert_eq!(imported.cluster_time, None);
    assert!(imported.token.get_str("_data").is_ok());
}

#[test]
fn offsets_that_would_leave_a_gap_or_are_anothers_are_refused_with_the_way_forward() {
    let during = SNAPSHOT_DONE.replace("\"sec\":-1", "\"initsync\":true,\"sec\":-1");
    let reason = refused(&during, "dbz092117");
    assert!(reason.contains("initial snapshot was running"), "{reason}");
    assert!(reason.contains("silent gap"), "{reason}");
    let incremental = STREAMED.replace(
        "\"txnNumber\": 9",
        "\"txnNumber\": 9, \"incremental_snapshot_collections\": \"[]\"",
    );
    let reason = refused(&incremental, "dbz092117");
    assert!(reason.contains("incremental snapshot"), "{reason}");
    let reason = refused(STREAMED, "dbserver1");
    assert!(
        reason.contains("no offset for server_id \"dbserver1\""),
        "{reason}"
    );
    assert!(reason.contains("dbz092117"), "{reason}");
    let no_token = r#"{"offsets":[{"partition":{"server_id":"a"},"offset":{"sec":17,"ord":3}}]}"#;
    let reason = refused(no_token, "a");
    assert!(reason.contains("no resume_token"), "{reason}");
    assert!(reason.contains("--to-timestamp 17.3"), "{reason}");
    let reason = refused(r#"{"offsets":[]}"#, "a");
    assert!(reason.contains("no offset yet"), "{reason}");
    let mongo_kafka =
        r#"{"offsets":[{"partition":{"ns":"mongodb://h/db.c"},"offset":{"_id":"{}"}}]}"#;
    let reason = refused(mongo_kafka, "a");
    assert!(reason.contains("no offset for server_id"), "{reason}");
    let per_rs = r#"{"offsets":[{"partition":{"server_id":"a","rs":"rs0"},"offset":{"sec":1,"ord":1,"resume_token":"x"}}]}"#;
    let reason = refused(per_rs, "a");
    assert!(
        reason.contains("none of them in the current form"),
        "{reason}"
    );
    assert!(reason.contains("--use-oldest"), "{reason}");
    let bad_token =
        r#"{"offsets":[{"partition":{"server_id":"a"},"offset":{"resume_token":"!!"}}]}"#;
    assert!(refused(bad_token, "a").contains("not base64"));
    assert!(
        entries_from_rest("not json")
            .expect_err("refused")
            .contains("not JSON")
    );
    assert!(
        entries_from_rest("{\"connectors\":1}")
            .expect_err("refused")
            .contains("KIP-875")
    );
}

#[test]
fn the_offsets_topic_gives_the_newest_offset_of_the_named_connector() {
    let key = |connector: &str| format!(r#"["{connector}",{{"server_id":"dbz"}}]"#).into_bytes();
    let offset = |sec: i64| {
        Some(
            format!(r#"{{"sec":{sec},"ord":1,"resume_token":"FQAAAAJfZGF0YQAFAAAAODIwMAAA"}}"#)
                .into_bytes(),
        )
    };
    let records = vec![
        (key("dbz"), offset(10)),
        (
            b"{\"not\":\"a source offset\"}".to_vec(),
            Some(b"{}".to_vec()),
        ),
        (key("other"), offset(99)),
        (key("dbz"), offset(12)),
    ];
    let entries = entries_from_topic(&records, "dbz").expect("found");
    assert_eq!(entries.len(), 1);
    let imported = position(&entries, "dbz").expect("importable");
    assert_eq!(imported.cluster_time.map(|t| t.time), Some(12));
    assert_eq!(imported.from.get_str("connector"), Ok("dbz"));
    assert_eq!(imported.token.get_str("_data"), Ok("8200"));
    let reason = entries_from_topic(&records, "gone").expect_err("none");
    assert!(
        reason.contains("connectors with offsets there: dbz, other"),
        "{reason}"
    );
    // A tombstone deletes the connector's offset (Connect's `DELETE …/offsets`).
    let mut deleted = records.clone();
    deleted.push((key("dbz"), None));
    assert!(entries_from_topic(&deleted, "dbz").is_err());
}
