//! The rules of `[pipelines.routing]`, each refusal naming its field.

use super::{Piece, Template, key_may_change};
use crate::config::{Config, PipelineConfig};
use crate::error::BridgeError;

fn load(body: &str) -> Result<Config, BridgeError> {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\n{body}"
    );
    Config::from_toml(&text, std::iter::empty())
}

fn refused(body: &str) -> (String, String) {
    match load(body) {
        Err(BridgeError::Config { field, reason }) => (field, reason),
        other => panic!("expected a config error for {body:?}, got {other:?}"),
    }
}

#[test]
fn templates_parse_into_literals_and_placeholders() {
    let t = Template::parse("orders.${db}-${coll}.${1}.${fullDocument.region}").unwrap();
    assert_eq!(
        t.pieces,
        vec![
            Piece::Literal("orders.".into()),
            Piece::Db,
            Piece::Literal("-".into()),
            Piece::Coll,
            Piece::Literal(".".into()),
            Piece::Capture(1),
            Piece::Literal(".".into()),
            Piece::Field(vec!["fullDocument".into(), "region".into()]),
        ]
    );
    assert!(t.has_fields());
    assert_eq!(t.max_capture(), 1);
    assert_eq!(Template::parse("plain").unwrap().literal(), Some("plain"));
    for bad in [
        "a b",
        "__${db}",
        "${x}",
        "${0}",
        "${db",
        "",
        "${fullDocument..a}",
        "t/${db}",
    ] {
        assert!(Template::parse(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn a_valid_routing_table_loads() {
    let config = load(
        "tombstones = false\n[pipelines.routing]\ntopic = \"orders.${fullDocument.region}\"\n\
         default_topic = \"orders.unrouted\"\nkey_field = \"fullDocument.customerId\"\n\
         [[pipelines.routing.namespaces]]\nglob = \"shop.orders_*\"\ntopic = \"orders.${coll}\"\n\
         [[pipelines.routing.namespaces]]\nregex = 'shop\\.archive_(\\d{4})'\n\
         topic = \"archive.${1}\"\n",
    )
    .unwrap();
    let routing = config.pipelines[0].routing.as_ref().unwrap();
    assert_eq!(routing.namespaces.len(), 2);
    assert_eq!(
        routing.key_field.as_deref(),
        Some("fullDocument.customerId")
    );
}

#[test]
fn each_rule_names_its_field() {
    let cases = [
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\ntopic = \"t\"\n",
            "pipelines[0].routing.namespaces[0]",
            "exactly one of glob",
        ),
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\nglob = \"a\"\nregex = \"a\"\n\
             topic = \"t\"\n",
            "pipelines[0].routing.namespaces[0]",
            "exactly one of glob",
        ),
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\nregex = \"(\"\ntopic = \"t\"\n",
            "pipelines[0].routing.namespaces[0]",
            "regex",
        ),
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\nglob = \"shop.*\"\n\
             topic = \"t.${1}\"\n",
            "pipelines[0].routing.namespaces[0].topic",
            "a glob has none",
        ),
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\nregex = \"shop\\\\.(a)\"\n\
             topic = \"t.${2}\"\n",
            "pipelines[0].routing.namespaces[0].topic",
            "group the pattern does not have (1)",
        ),
        (
            "[pipelines.routing]\n[[pipelines.routing.namespaces]]\nglob = \"*\"\ntopic = \"t t\"\n",
            "pipelines[0].routing.namespaces[0].topic",
            "topic name",
        ),
        (
            "[pipelines.routing]\ntopic = \"o.${fullDocument.region}\"\n",
            "pipelines[0].routing.default_topic",
            "required",
        ),
        (
            "[pipelines.routing]\ntopic = \"o.${coll}\"\ndefault_topic = \"x\"\n",
            "pipelines[0].routing.default_topic",
            "remove it",
        ),
        (
            "[pipelines.routing]\ntopic = \"o.${region}\"\n",
            "pipelines[0].routing.topic",
            "fullDocument.region",
        ),
        (
            "[pipelines.routing]\ntopic = \"o.${1}\"\n",
            "pipelines[0].routing.topic",
            "regex",
        ),
        (
            "topic = \"fixed\"\n[pipelines.routing]\ntopic = \"o.${coll}\"\n",
            "pipelines[0].topic",
            "remove one",
        ),
        (
            "[pipelines.routing]\ntopic = \"o.${fullDocument.r}\"\ndefault_topic = \"__x\"\n",
            "pipelines[0].routing.default_topic",
            "__",
        ),
        (
            "full_document = \"update_lookup\"\nsnapshot = \"initial\"\n[pipelines.routing]\n\
             topic = \"o.${fullDocument.r}\"\ndefault_topic = \"o\"\n",
            "pipelines[0].routing.topic",
            "snapshot",
        ),
        (
            "[pipelines.routing]\nkey_field = \"fullDocument.customerId\"\n",
            "pipelines[0].routing.key_field",
            "tombstones = false",
        ),
        (
            "tombstones = false\n[pipelines.routing]\nkey_field = \"customerId\"\n",
            "pipelines[0].routing.key_field",
            "fullDocument.",
        ),
        (
            "tombstones = false\nvalue = \"document\"\nfull_document = \"update_lookup\"\n\
             [pipelines.routing]\nkey_field = \"fullDocument.c\"\n",
            "pipelines[0].routing.key_field",
            "value = \\\"change_event\\\"",
        ),
        (
            "tombstones = false\non_history_lost = \"snapshot\"\nfull_document = \
             \"update_lookup\"\n[pipelines.routing]\nkey_field = \"fullDocument.c\"\n",
            "pipelines[0].routing.key_field",
            "snapshot",
        ),
    ];
    for (body, field, needle) in cases {
        let (got, reason) = refused(body);
        assert_eq!(got, field, "{body}: {reason}");
        assert!(
            reason.contains(needle.replace("\\\"", "\"").as_str()),
            "{body}: {reason}"
        );
    }
}

#[test]
fn only_document_key_and_id_paths_are_immutable() {
    assert!(!key_may_change("documentKey.region"));
    assert!(!key_may_change("fullDocument._id"));
    assert!(!key_may_change("fullDocument._id.k"));
    assert!(key_may_change("fullDocument._idx"));
    assert!(key_may_change("fullDocument.customerId"));
}

#[test]
fn a_key_field_outside_document_key_warns_of_the_order_it_costs() {
    let config =
        load("tombstones = false\n[pipelines.routing]\nkey_field = \"fullDocument.customerId\"\n")
            .unwrap();
    let warnings = config.warnings();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[0].contains("out of order"), "{}", warnings[0]);
    assert!(
        warnings[1].contains("full_document_before_change"),
        "{}",
        warnings[1]
    );
    let config =
        load("tombstones = false\n[pipelines.routing]\nkey_field = \"documentKey.region\"\n")
            .unwrap();
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
}

#[test]
fn routing_is_absent_by_default() {
    assert_eq!(PipelineConfig::for_test("").routing, None);
}

#[test]
fn the_example_configurations_routing_block_is_valid_once_uncommented() {
    let block =
        crate::config::tests::example_block("# [pipelines.routing]", "# [pipelines.debezium]");
    let config = load(&format!("tombstones = false\n{block}")).expect("the block loads");
    let routing = config.pipelines[0].routing.as_ref().expect("routing");
    assert_eq!(routing.namespaces.len(), 2, "{block}");
    assert!(
        routing.key_field.is_some() && routing.default_topic.is_some(),
        "{block}"
    );
}
