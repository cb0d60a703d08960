//! Every operation type, in every `json` × `value` mode.

use super::*;

#[test]
fn insert() {
    assert_golden(&Golden {
        event: event(
            "insert",
            rawdoc! {
                "fullDocument": {
                    "_id": 1, "sku": "A-1", "qty": 2,
                    "price": "9.99".parse::<Decimal128>().expect("decimal"),
                },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        ),
        operation: "insert",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("insert", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-1","qty":2,"price":{"$numberDecimal":"9.99"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"2"},"price":{"$numberDecimal":"9.99"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-1","qty":2,"price":{"$numberDecimal":"9.99"}}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"2"},"price":{"$numberDecimal":"9.99"}}"#,
        )),
    });
}

#[test]
fn update_with_looked_up_document() {
    assert_golden(&Golden {
        event: event(
            "update",
            rawdoc! {
                "fullDocument": { "_id": 1, "sku": "A-1", "qty": 3 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
                "updateDescription": {
                    "updatedFields": { "qty": 3 },
                    "removedFields": ["note"],
                    "truncatedArrays": [],
                },
            },
        ),
        operation: "update",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("update", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-1","qty":3},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1},"updateDescription":{"updatedFields":{"qty":3},"removedFields":["note"],"truncatedArrays":[]}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"3"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}},"updateDescription":{"updatedFields":{"qty":{"$numberInt":"3"}},"removedFields":["note"],"truncatedArrays":[]}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-1","qty":3}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-1","qty":{"$numberInt":"3"}}"#,
        )),
    });
}

#[test]
fn update_whose_lookup_found_nothing_has_a_null_document() {
    // updateLookup on a document deleted since: the server sends `fullDocument: null`.
    assert_golden(&Golden {
        event: event(
            "update",
            rawdoc! {
                "fullDocument": RawBson::Null,
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
                "updateDescription": {
                    "updatedFields": { "qty": 3 },
                    "removedFields": [],
                    "truncatedArrays": [],
                },
            },
        ),
        operation: "update",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("update", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":null,"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1},"updateDescription":{"updatedFields":{"qty":3},"removedFields":[],"truncatedArrays":[]}}"#,
            r#","fullDocument":null,"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}},"updateDescription":{"updatedFields":{"qty":{"$numberInt":"3"}},"removedFields":[],"truncatedArrays":[]}}"#,
        ),
        document: None,
    });
}

#[test]
fn replace() {
    assert_golden(&Golden {
        event: event(
            "replace",
            rawdoc! {
                "fullDocument": { "_id": 1, "sku": "A-2", "qty": 5_i64 },
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": 1 },
            },
        ),
        operation: "replace",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$numberInt":"1"}}"#,
        headers: headers("replace", Some("shop.orders")),
        change_event_tail: (
            r#","fullDocument":{"_id":1,"sku":"A-2","qty":5},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":1}}"#,
            r#","fullDocument":{"_id":{"$numberInt":"1"},"sku":"A-2","qty":{"$numberLong":"5"}},"ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$numberInt":"1"}}}"#,
        ),
        document: Some((
            r#"{"_id":1,"sku":"A-2","qty":5}"#,
            r#"{"_id":{"$numberInt":"1"},"sku":"A-2","qty":{"$numberLong":"5"}}"#,
        )),
    });
}

#[test]
fn delete_gives_the_event_then_a_tombstone_or_a_tombstone_alone() {
    // Change-event mode: the delete, then a tombstone (same key, same headers, null value);
    // document mode: one null-value record (see `assert_golden`).
    assert_golden(&Golden {
        event: event(
            "delete",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "documentKey": { "_id": ObjectId::parse_str("65a1b2c3d4e5f60718293a4b").expect("oid") },
            },
        ),
        operation: "delete",
        topic: "cdc.shop.orders",
        key: r#"{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#,
        headers: headers("delete", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"documentKey":{"_id":{"$oid":"65a1b2c3d4e5f60718293a4b"}}}"#,
        ),
        document: None,
    });
}

#[test]
fn drop_is_keyed_by_its_namespace() {
    assert_golden(&Golden {
        event: event("drop", rawdoc! { "ns": { "db": "shop", "coll": "orders" } }),
        operation: "drop",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("drop", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"}}"#,
            r#","ns":{"db":"shop","coll":"orders"}}"#,
        ),
        document: None,
    });
}

#[test]
fn rename_is_keyed_and_routed_by_its_source_namespace() {
    assert_golden(&Golden {
        event: event(
            "rename",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "to": { "db": "shop", "coll": "orders_2023" },
            },
        ),
        operation: "rename",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("rename", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"to":{"db":"shop","coll":"orders_2023"}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"to":{"db":"shop","coll":"orders_2023"}}"#,
        ),
        document: None,
    });
}

#[test]
fn drop_database_is_keyed_and_routed_by_its_database() {
    assert_golden(&Golden {
        event: event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        operation: "dropDatabase",
        topic: "cdc.shop",
        key: r#"{"db":"shop"}"#,
        headers: headers("dropDatabase", Some("shop")),
        change_event_tail: (r#","ns":{"db":"shop"}}"#, r#","ns":{"db":"shop"}}"#),
        document: None,
    });
}

#[test]
fn invalidate_is_keyed_by_the_pipeline_and_routed_to_its_namespace_topic() {
    assert_golden(&Golden {
        event: event("invalidate", rawdoc! {}),
        operation: "invalidate",
        topic: "cdc.shop.orders",
        key: r#"{"pipeline":"orders-feed"}"#,
        headers: headers("invalidate", None),
        change_event_tail: ("}", "}"),
        document: None,
    });
}

#[test]
fn unknown_future_operation_type_is_passed_through_keyed_by_namespace() {
    // An expanded event (showExpandedEvents) the encoder has no special case for.
    assert_golden(&Golden {
        event: event(
            "shardCollection",
            rawdoc! {
                "ns": { "db": "shop", "coll": "orders" },
                "operationDescription": {
                    "shardKey": { "tenant": 1 },
                    "unique": false,
                    "numInitialChunks": 2_i64,
                },
            },
        ),
        operation: "shardCollection",
        topic: "cdc.shop.orders",
        key: r#"{"db":"shop","coll":"orders"}"#,
        headers: headers("shardCollection", Some("shop.orders")),
        change_event_tail: (
            r#","ns":{"db":"shop","coll":"orders"},"operationDescription":{"shardKey":{"tenant":1},"unique":false,"numInitialChunks":2}}"#,
            r#","ns":{"db":"shop","coll":"orders"},"operationDescription":{"shardKey":{"tenant":{"$numberInt":"1"}},"unique":false,"numInitialChunks":{"$numberLong":"2"}}}"#,
        ),
        document: None,
    });
}
