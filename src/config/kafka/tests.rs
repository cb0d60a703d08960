//! Unit tests of the producer's and admin client's configuration.

use super::*;
use crate::config::PropertyValue;

fn kafka(properties: &[(&str, PropertyValue)]) -> KafkaConfig {
    KafkaConfig {
        bootstrap_servers: "127.0.0.1:9".into(),
        topic_prefix: String::new(),
        properties: properties
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        topic_creation: Default::default(),
        transactional_id_prefix: None,
        group_properties: Default::default(),
    }
}

#[test]
fn protected_properties_win_over_user_properties() {
    let kafka = kafka(&[
        ("acks", PropertyValue::Text("1".into())),
        ("linger.ms", PropertyValue::Integer(50)),
    ]);
    let config = producer_config(&kafka, 13_000);
    assert_eq!(config.get("acks"), Some("all"));
    assert_eq!(config.get("enable.idempotence"), Some("true"));
    assert_eq!(config.get("partitioner"), Some("murmur2_random"));
    assert_eq!(config.get("linger.ms"), Some("50"));
    assert_eq!(config.get("message.timeout.ms"), Some("13000"));
}

#[test]
fn librdkafka_judges_every_property() {
    let typo = kafka(&[("compresion.type", PropertyValue::Text("lz4".into()))]);
    let error = validate_properties(&typo).expect_err("unknown property");
    assert_eq!(
        error,
        "No such configuration property: \"compresion.type\" (property \"compresion.type\"; \
         its value is not shown)"
    );
    let bad_value = kafka(&[("compression.type", PropertyValue::Text("brotli".into()))]);
    let error = validate_properties(&bad_value).expect_err("invalid value");
    assert!(
        error.contains("compression.type") && error.contains("brotli"),
        "{error}"
    );
    // A misspelled secret is an unknown property: its value never reaches the message.
    let leaked = kafka(&[("sasl.passwd", PropertyValue::Text("TopSecret31".into()))]);
    let error = validate_properties(&leaked).expect_err("unknown property");
    assert!(
        error.contains("sasl.passwd") && !error.contains("TopSecret31"),
        "{error}"
    );
    let fine = kafka(&[("compression.type", PropertyValue::Text("zstd".into()))]);
    assert_eq!(validate_properties(&fine), Ok(()));
}

#[test]
fn admin_config_takes_only_connection_and_security_properties() {
    let kafka = kafka(&[
        ("security.protocol", PropertyValue::Text("SSL".into())),
        ("linger.ms", PropertyValue::Integer(50)),
    ]);
    let config = admin_config(&kafka);
    assert_eq!(config.get("security.protocol"), Some("SSL"));
    assert_eq!(config.get("linger.ms"), None);
}

/// The producer's batch bound and compression, from `[kafka.properties]`.
mod batch {
    use super::*;

    fn kafka(properties: &str) -> KafkaConfig {
        KafkaConfig::for_test(properties)
    }

    #[test]
    fn the_batch_bound_is_the_least_of_the_properties_and_the_cap() {
        assert_eq!(batch_bytes(&kafka(""), None), 1_000_000);
        assert_eq!(
            batch_bytes(&kafka("\"batch.size\" = 300000"), None),
            300_000
        );
        assert_eq!(
            batch_bytes(&kafka("\"message.max.bytes\" = 200000"), None),
            200_000
        );
        assert_eq!(
            batch_bytes(&kafka("\"batch.size\" = 300000"), Some(50_000)),
            50_000
        );
    }

    #[test]
    fn compression_is_seen_under_both_names() {
        assert!(!compresses(&kafka("")));
        assert!(!compresses(&kafka("\"compression.type\" = \"none\"")));
        assert!(compresses(&kafka("\"compression.type\" = \"zstd\"")));
        assert!(compresses(&kafka("\"compression.codec\" = \"lz4\"")));
    }
}
