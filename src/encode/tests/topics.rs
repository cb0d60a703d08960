//! Which topic each event goes to.

use super::*;

fn insert_into(db: &str, coll: &str) -> RawDocumentBuf {
    event(
        "insert",
        rawdoc! {
            "fullDocument": { "_id": 1 },
            "ns": { "db": db, "coll": coll },
            "documentKey": { "_id": 1 },
        },
    )
}

fn topic_of(encoder: &mut RecordEncoder, raw: &RawDocument) -> String {
    let records = encoder.encode(raw).expect("encodes").records;
    records[0].topic.to_string()
}

#[test]
fn a_pipeline_topic_takes_every_event() {
    let mut encoder = encoder("topic = \"all-changes\"");
    for raw in [
        insert_into("shop", "orders"),
        insert_into("crm", "customers"),
        event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        event("invalidate", rawdoc! {}),
    ] {
        assert_eq!(topic_of(&mut encoder, &raw), "all-changes");
    }
}

#[test]
fn a_deployment_wide_pipeline_routes_by_each_event_namespace() {
    // GIVEN a pipeline on the whole deployment
    let mut encoder = encoder_for("topic_prefix = \"cdc.\"", "name = \"everything\"");

    // WHEN events of several namespaces are encoded, switching back and forth
    let topics: Vec<String> = [
        insert_into("shop", "orders"),
        insert_into("crm", "customers"),
        insert_into("shop", "orders"),
        insert_into("shop", "orders_2023"),
        event("dropDatabase", rawdoc! { "ns": { "db": "shop" } }),
        insert_into("shop", "orders"),
        event("invalidate", rawdoc! {}),
    ]
    .iter()
    .map(|raw| topic_of(&mut encoder, raw))
    .collect();

    // THEN each goes to <prefix><db>.<coll>, <prefix><db>, or <prefix><pipeline name>
    assert_eq!(
        topics,
        [
            "cdc.shop.orders",
            "cdc.crm.customers",
            "cdc.shop.orders",
            "cdc.shop.orders_2023",
            "cdc.shop",
            "cdc.shop.orders",
            "cdc.everything",
        ]
    );
}

#[test]
fn a_database_pipeline_routes_an_invalidate_to_the_database_topic() {
    let mut encoder = encoder_for("", "name = \"shop-feed\"\ndatabase = \"shop\"");
    assert_eq!(
        topic_of(&mut encoder, &insert_into("shop", "orders")),
        "shop.orders"
    );
    let invalidate = event("invalidate", rawdoc! {});
    assert_eq!(topic_of(&mut encoder, &invalidate), "shop");
    let records = encoder.encode(&invalidate).expect("encodes").records;
    assert_eq!(text(&records[0].key), r#"{"pipeline":"shop-feed"}"#);
}
