//! Tombstones after deletes.

use super::*;

#[test]
fn delete_with_tombstones_gives_two_records_in_order() {
    // GIVEN the default tombstones = true, change-event values, relaxed JSON
    let mut encoder = encoder("");

    // WHEN a delete is encoded
    let records = encoder.encode(&delete_event()).expect("encodes").records;

    // THEN the delete comes first, then a null value with the same topic, key and headers
    let delete = Shown {
        topic: "cdc.shop.orders".to_owned(),
        key: r#"{"_id":"abc"}"#.to_owned(),
        value: Some(format!(
            r#"{},"ns":{{"db":"shop","coll":"orders"}},"documentKey":{{"_id":"abc"}}}}"#,
            head("delete", JsonMode::Relaxed)
        )),
        headers: headers("delete", Some("shop.orders")),
    };
    let tombstone = Shown {
        value: None,
        ..delete.clone()
    };
    assert_eq!(shown(&records), vec![delete, tombstone]);
}

#[test]
fn delete_without_tombstones_gives_one_record() {
    for value in ["change_event", "document"] {
        // GIVEN tombstones = false
        let mut encoder = encoder(&format!("tombstones = false\nvalue = \"{value}\""));

        // WHEN a delete is encoded
        let records = encoder.encode(&delete_event()).expect("encodes").records;

        // THEN there is one record: the event, or in document mode a null value
        let expected_value = match value {
            "change_event" => Some(format!(
                r#"{},"ns":{{"db":"shop","coll":"orders"}},"documentKey":{{"_id":"abc"}}}}"#,
                head("delete", JsonMode::Relaxed)
            )),
            _ => None,
        };
        assert_eq!(
            shown(&records),
            vec![Shown {
                topic: "cdc.shop.orders".to_owned(),
                key: r#"{"_id":"abc"}"#.to_owned(),
                value: expected_value,
                headers: headers("delete", Some("shop.orders")),
            }],
            "value = {value}"
        );
    }
}

#[test]
fn only_deletes_get_tombstones() {
    let mut encoder = encoder("");
    for operation in ["insert", "update", "replace"] {
        let raw = event(
            operation,
            rawdoc! {
                "fullDocument": { "_id": 1 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        );
        let records = encoder.encode(&raw).expect("encodes").records;
        assert_eq!(records.len(), 1, "{operation}");
        assert!(records[0].value.is_some(), "{operation}");
    }
}
