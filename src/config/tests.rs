//! Tests of [`Config`]: serde rules, every validation rule of `validate.rs`, environment overrides
//! and secret redaction. Each error test pins the exact `field` and a key phrase of `reason`.

use super::*;
use crate::error::BridgeError;
use crate::extjson::JsonMode;

/// `[mongodb]` and `[kafka]` with their required keys only.
const SERVERS: &str = r#"
[mongodb]
uri = "mongodb://127.0.0.1:27017/"

[kafka]
bootstrap_servers = "127.0.0.1:9092"
"#;

/// One valid pipeline; keys appended after it belong to it.
const PIPELINE: &str = r#"
[[pipelines]]
name = "orders"
database = "shop"
collection = "orders"
"#;

fn parse(text: &str) -> Result<Config, BridgeError> {
    Config::from_toml(text, std::iter::empty())
}

fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<Config, BridgeError> {
    let env = env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
    Config::from_toml(text, env)
}

/// A valid file with `tail` appended after the pipeline (pipeline keys, or later tables).
fn valid_with(tail: &str) -> String {
    format!("{SERVERS}{PIPELINE}{tail}")
}

/// A valid file with `kafka` lines inside `[kafka]` and `tail` after the pipeline.
fn with_kafka(kafka: &str, tail: &str) -> String {
    format!("{SERVERS}{kafka}\n{PIPELINE}{tail}")
}

/// The `(field, reason)` of the configuration error `result` must be.
fn config_error(result: Result<Config, BridgeError>) -> (String, String) {
    match result {
        Err(BridgeError::Config { field, reason }) => (field, reason),
        other => panic!("expected BridgeError::Config, got {other:?}"),
    }
}

/// Asserts that `text` fails with exactly `field` and a reason containing `phrase`.
#[track_caller]
fn assert_rejected(text: &str, field: &str, phrase: &str) {
    let (actual_field, reason) = config_error(parse(text));
    assert_eq!(actual_field, field, "reason: {reason}");
    assert!(
        reason.contains(phrase),
        "reason {reason:?} lacks {phrase:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Defaults
// ---------------------------------------------------------------------------------------------

#[test]
fn a_minimal_file_gets_the_documented_defaults() {
    // GIVEN the required keys and one pipeline only
    // WHEN it is loaded
    let config = parse(&valid_with("")).expect("valid");

    // THEN every optional key has its documented default
    assert_eq!(config.mongodb.uri.expose(), "mongodb://127.0.0.1:27017/");
    assert_eq!(config.mongodb.offsets_database, "mongo_kafka_bridge");
    assert_eq!(config.mongodb.offsets_collection, "offsets");
    assert_eq!(config.kafka.bootstrap_servers, "127.0.0.1:9092");
    assert_eq!(config.kafka.topic_prefix, "");
    assert!(config.kafka.properties.is_empty());
    assert_eq!(config.metrics.listen, "127.0.0.1:9464");
    let b = &config.bridge;
    assert_eq!(b.commit_interval_ms, 1000);
    assert_eq!(b.shutdown_timeout_ms, 30_000);
    assert_eq!(b.max_in_flight_events, 10_000);
    assert_eq!(b.max_in_flight_bytes, 16 * 1024 * 1024);
    assert_eq!(b.max_await_time_ms, 1000);
    assert_eq!(b.max_restart_backoff_ms, 30_000);
    assert_eq!(b.ready_max_delivery_age_ms, 60_000);
    assert_eq!(b.worker_threads, 0);
    assert_eq!((b.encode_threads, b.encode_offload_min_bytes), (0, 8192));
    assert_eq!(config.metrics.history_interval_ms, 15_000);
    assert_eq!(config.pipelines.len(), 1);
    let p = &config.pipelines[0];
    assert_eq!(p.name, "orders");
    assert_eq!(p.database.as_deref(), Some("shop"));
    assert_eq!(p.collection.as_deref(), Some("orders"));
    assert_eq!(p.pipeline, None);
    assert_eq!(p.full_document, FullDocument::Default);
    assert_eq!(p.full_document_before_change, FullDocumentBeforeChange::Off);
    assert_eq!(p.topic, None);
    assert_eq!(p.value, ValueMode::ChangeEvent);
    assert_eq!(p.json_mode(), JsonMode::Relaxed);
    assert!(p.tombstones);
    assert_eq!(p.start_at, "now");
    assert_eq!(p.start_at(), StartAt::Now);
    assert_eq!(p.on_history_lost, OnHistoryLost::Fail);
    assert_eq!(p.on_oversize, OnOversize::Fail);
    assert_eq!(p.dead_letter_topic, None);
    assert!(p.stages().is_empty());
    assert_eq!(p.scope(), "shop.orders");
}

#[test]
fn every_option_is_read_from_the_file() {
    // GIVEN a file setting every pipeline option to a non-default value
    let text = with_kafka(
        "topic_prefix = \"cdc.\"\n[kafka.properties]\n\"compression.type\" = \"lz4\"\n\
         \"linger.ms\" = 5\n\"enable.idempotence\" = true\n\"acks\" = \"all\"",
        "full_document = \"update_lookup\"\n\
         full_document_before_change = \"when_available\"\n\
         topic = \"all-orders\"\n\
         value = \"document\"\n\
         json = \"canonical\"\n\
         tombstones = false\n\
         start_at = \"2024-01-02T03:04:05Z\"\n\
         [[pipelines]]\nname = \"everything\"\n",
    );

    // WHEN it is loaded
    let config = parse(&text).expect("valid");

    // THEN each value is the one written
    assert_eq!(config.kafka.topic_prefix, "cdc.");
    let props: Vec<(String, String)> = config
        .kafka
        .properties
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect();
    assert_eq!(
        props,
        [
            ("acks", "all"),
            ("compression.type", "lz4"),
            ("enable.idempotence", "true"),
            ("linger.ms", "5"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
    );
    let p = &config.pipelines[0];
    assert_eq!(p.full_document, FullDocument::UpdateLookup);
    assert_eq!(
        p.full_document_before_change,
        FullDocumentBeforeChange::WhenAvailable
    );
    assert_eq!(p.topic.as_deref(), Some("all-orders"));
    assert_eq!(p.value, ValueMode::Document);
    assert_eq!(p.json_mode(), JsonMode::Canonical);
    assert!(!p.tombstones);
    assert_eq!(p.start_at(), StartAt::Timestamp(1_704_164_645));
    let whole = &config.pipelines[1];
    assert_eq!(whole.scope(), "*");
}

// ---------------------------------------------------------------------------------------------
// Serde rules: TOML syntax, unknown keys, types, required keys, enum values
// ---------------------------------------------------------------------------------------------

#[test]
fn text_that_is_not_toml_names_the_config_flag() {
    assert_rejected(&valid_with("["), "--config", "not valid TOML");
}

#[test]
fn unknown_key_in_mongodb_is_named() {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1/\"\nurl = \"x\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    assert_rejected(&text, "mongodb.url", "unknown field `url`");
}

#[test]
fn unknown_key_in_kafka_is_named() {
    assert_rejected(
        &with_kafka("topic_prefx = \"cdc.\"", ""),
        "kafka.topic_prefx",
        "unknown field `topic_prefx`, expected one of `bootstrap_servers`, `topic_prefix`",
    );
}

#[test]
fn unknown_key_in_a_pipeline_is_named_with_its_index() {
    let text = valid_with("[[pipelines]]\nname = \"b\"\ncolection = \"x\"\n");
    assert_rejected(&text, "pipelines[1].colection", "unknown field `colection`");
}

#[test]
fn unknown_key_in_bridge_is_named() {
    assert_rejected(
        &valid_with("[bridge]\ncommit_interval = 5\n"),
        "bridge.commit_interval",
        "unknown field `commit_interval`",
    );
}

#[test]
fn unknown_key_in_metrics_is_named() {
    assert_rejected(
        &valid_with("[metrics]\nlisten_addr = \"0.0.0.0:9464\"\n"),
        "metrics.listen_addr",
        "unknown field `listen_addr`, expected `listen`",
    );
}

#[test]
fn unknown_top_level_table_is_named() {
    assert_rejected(
        &valid_with("[kafka_properties]\nacks = \"all\"\n"),
        "kafka_properties",
        "unknown field `kafka_properties`",
    );
}

#[test]
fn wrong_type_names_the_field_and_the_expected_type() {
    assert_rejected(
        &valid_with("[bridge]\ncommit_interval_ms = \"fast\"\n"),
        "bridge.commit_interval_ms",
        "invalid type: string \"fast\", expected a whole number of 0 or more (a number, not \
         text: in the file, without quotes) — durations are whole milliseconds",
    );
    assert_rejected(
        &valid_with("tombstones = \"yes\"\n"),
        "pipelines[0].tombstones",
        "expected a boolean",
    );
    assert_rejected(
        &valid_with("[bridge]\nmax_in_flight_events = -1\n"),
        "bridge.max_in_flight_events",
        "expected a whole number of 0 or more",
    );
}

#[test]
fn a_property_value_must_be_a_scalar() {
    assert_rejected(
        &with_kafka("[kafka.properties]\n\"linger.ms\" = [5]", ""),
        "kafka.properties.linger.ms",
        "did not match any variant",
    );
}

#[test]
fn missing_mongodb_uri_is_named() {
    let text = format!("[mongodb]\n[kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}");
    assert_rejected(&text, "mongodb.uri", "missing field `uri`");
}

#[test]
fn missing_kafka_bootstrap_servers_is_named() {
    let text = format!("[mongodb]\nuri = \"mongodb://h:1/\"\n[kafka]\n{PIPELINE}");
    assert_rejected(
        &text,
        "kafka.bootstrap_servers",
        "missing field `bootstrap_servers`",
    );
}

#[test]
fn missing_pipeline_name_is_named() {
    let text = format!("{SERVERS}[[pipelines]]\ndatabase = \"shop\"\n");
    assert_rejected(&text, "pipelines[0].name", "missing field `name`");
}

#[test]
fn bad_full_document_lists_the_allowed_values() {
    assert_rejected(
        &valid_with("full_document = \"sometimes\"\n"),
        "pipelines[0].full_document",
        "unknown variant `sometimes`, expected one of `default`, `update_lookup`, \
         `when_available`, `required`",
    );
}

#[test]
fn bad_enum_values_of_other_options_list_the_allowed_values() {
    for (line, field, phrase) in [
        (
            "full_document_before_change = \"on\"",
            "pipelines[0].full_document_before_change",
            "expected one of `off`, `when_available`, `required`",
        ),
        (
            "value = \"doc\"",
            "pipelines[0].value",
            "expected one of `change_event`, `document`, `unwrapped`, `debezium`",
        ),
        (
            "json = \"strict\"",
            "pipelines[0].json",
            "expected `relaxed` or `canonical`",
        ),
        (
            "on_history_lost = \"retry\"",
            "pipelines[0].on_history_lost",
            "expected one of `fail`, `skip`, `snapshot`",
        ),
        (
            "on_oversize = \"truncate\"",
            "pipelines[0].on_oversize",
            "expected `fail` or `dead_letter`",
        ),
    ] {
        assert_rejected(&valid_with(&format!("{line}\n")), field, phrase);
    }
}

// ---------------------------------------------------------------------------------------------
// Validation rules: [mongodb], [kafka], [metrics], [bridge]
// ---------------------------------------------------------------------------------------------

#[test]
fn uri_must_use_a_mongodb_scheme() {
    let text = format!(
        "[mongodb]\nuri = \"http://127.0.0.1:27017/\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    assert_rejected(&text, "mongodb.uri", "mongodb:// or mongodb+srv://");
}

#[test]
fn srv_uri_is_accepted() {
    let text = format!(
        "[mongodb]\nuri = \"mongodb+srv://cluster0.example.net/\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    let config = parse(&text).expect("valid");
    assert_eq!(
        config.mongodb.uri.expose(),
        "mongodb+srv://cluster0.example.net/"
    );
}

#[test]
fn offsets_database_must_not_be_empty() {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1/\"\noffsets_database = \"\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    assert_rejected(&text, "mongodb.offsets_database", "non-empty");
}

#[test]
fn offsets_collection_must_not_be_empty() {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1/\"\noffsets_collection = \"\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    assert_rejected(&text, "mongodb.offsets_collection", "non-empty");
}

#[test]
fn bootstrap_servers_must_not_be_blank() {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1/\"\n[kafka]\nbootstrap_servers = \"  \"\n{PIPELINE}"
    );
    assert_rejected(&text, "kafka.bootstrap_servers", "host:port");
}

#[test]
fn metrics_listen_must_be_an_ip_socket_address() {
    for bad in ["localhost:9464", "9464", "0.0.0.0", ""] {
        assert_rejected(
            &valid_with(&format!("[metrics]\nlisten = \"{bad}\"\n")),
            "metrics.listen",
            "host:port with an IP address",
        );
    }
    let config = parse(&valid_with("[metrics]\nlisten = \"0.0.0.0:0\"\n")).expect("valid");
    assert_eq!(config.metrics.listen, "0.0.0.0:0");
    let config = parse(&valid_with("[metrics]\nlisten = \"[::1]:9464\"\n")).expect("valid");
    assert_eq!(config.metrics.listen, "[::1]:9464");
}

#[test]
fn every_bridge_duration_and_bound_must_be_positive() {
    for key in [
        "commit_interval_ms",
        "max_in_flight_events",
        "max_in_flight_bytes",
        "max_await_time_ms",
        "max_restart_backoff_ms",
        "ready_max_delivery_age_ms",
    ] {
        assert_rejected(
            &valid_with(&format!("[bridge]\n{key} = 0\n")),
            &format!("bridge.{key}"),
            "must be greater than 0",
        );
    }
    // shutdown_timeout_ms = 0 means "do not wait": allowed.
    let config = parse(&valid_with("[bridge]\nshutdown_timeout_ms = 0\n")).expect("valid");
    assert_eq!(config.bridge.shutdown_timeout_ms, 0);
}

// ---------------------------------------------------------------------------------------------
// Validation rules: protected librdkafka properties and the in-flight bounds
// ---------------------------------------------------------------------------------------------

/// A valid file with one line in `[kafka.properties]`.
fn with_property(line: &str) -> String {
    with_kafka(&format!("[kafka.properties]\n{line}"), "")
}

#[test]
fn idempotence_cannot_be_disabled() {
    assert_rejected(
        &with_property("\"enable.idempotence\" = false"),
        "kafka.properties.\"enable.idempotence\"",
        "idempotent producer",
    );
    assert_rejected(
        &with_property("\"enable.idempotence\" = \"false\""),
        "kafka.properties.\"enable.idempotence\"",
        "idempotent producer",
    );
    parse(&with_property("\"enable.idempotence\" = true")).expect("true is the default");
}

#[test]
fn acks_must_be_all() {
    for bad in [
        "acks = 1",
        "acks = 0",
        "acks = \"1\"",
        "\"request.required.acks\" = 1",
    ] {
        let key = if bad.starts_with("acks") {
            "acks"
        } else {
            "request.required.acks"
        };
        assert_rejected(
            &with_property(bad),
            &format!("kafka.properties.\"{key}\""),
            "must be all",
        );
    }
    for good in [
        "acks = \"all\"",
        "acks = -1",
        "\"request.required.acks\" = \"all\"",
    ] {
        parse(&with_property(good)).unwrap_or_else(|e| panic!("{good}: {e}"));
    }
}

#[test]
fn max_in_flight_requests_must_be_between_1_and_5() {
    for key in ["max.in.flight.requests.per.connection", "max.in.flight"] {
        for bad in ["6", "0", "\"many\""] {
            assert_rejected(
                &with_property(&format!("\"{key}\" = {bad}")),
                &format!("kafka.properties.\"{key}\""),
                "between 1 and 5",
            );
        }
        for good in ["1", "5", "\"5\""] {
            parse(&with_property(&format!("\"{key}\" = {good}")))
                .unwrap_or_else(|e| panic!("{key} = {good}: {e}"));
        }
    }
}

#[test]
fn partitioner_must_be_murmur2_random() {
    assert_rejected(
        &with_property("partitioner = \"consistent_random\""),
        "kafka.properties.\"partitioner\"",
        "murmur2_random",
    );
    parse(&with_property("partitioner = \"murmur2_random\"")).expect("valid");
}

#[test]
fn transactional_id_is_rejected() {
    assert_rejected(
        &with_property("\"transactional.id\" = \"bridge-1\""),
        "kafka.properties.\"transactional.id\"",
        "derived per pipeline from [kafka] transactional_id_prefix",
    );
}

#[test]
fn bootstrap_servers_cannot_be_a_property() {
    for key in ["bootstrap.servers", "metadata.broker.list"] {
        assert_rejected(
            &with_property(&format!("\"{key}\" = \"h:9092\"")),
            &format!("kafka.properties.\"{key}\""),
            "set kafka.bootstrap_servers instead",
        );
    }
}

#[test]
fn every_delivery_report_is_needed() {
    assert_rejected(
        &with_property("\"delivery.report.only.error\" = true"),
        "kafka.properties.\"delivery.report.only.error\"",
        "needs every delivery report",
    );
    parse(&with_property("\"delivery.report.only.error\" = false")).expect("the default");
}

#[test]
fn gapless_guarantee_must_be_a_boolean() {
    assert_rejected(
        &with_property("\"enable.gapless.guarantee\" = \"yes\""),
        "kafka.properties.\"enable.gapless.guarantee\"",
        "true or false",
    );
    parse(&with_property("\"enable.gapless.guarantee\" = true")).expect("valid");
}

#[test]
fn in_flight_events_are_bounded_by_half_the_producer_queue() {
    // GIVEN a queue of 15000 messages and the default 10000 events in flight (2 records each)
    let config = parse(&with_property("\"queue.buffering.max.messages\" = 15000")).expect("valid");
    // THEN the pipeline keeps at most 7500 events in flight
    assert_eq!(config.in_flight_bounds().events, 7500);
    // exactly half: the configured bound holds
    let text = with_kafka(
        "[kafka.properties]\n\"queue.buffering.max.messages\" = 20000",
        "[bridge]\nmax_in_flight_events = 10000\n",
    );
    assert_eq!(
        parse(&text).expect("valid").in_flight_bounds().events,
        10000
    );
    // one more is lowered to half the queue
    let text = with_kafka(
        "[kafka.properties]\n\"queue.buffering.max.messages\" = 20000",
        "[bridge]\nmax_in_flight_events = 10001\n",
    );
    assert_eq!(
        parse(&text).expect("valid").in_flight_bounds().events,
        10000
    );
    // against librdkafka's default of 100000
    let config = parse(&valid_with("[bridge]\nmax_in_flight_events = 50001\n")).expect("valid");
    assert_eq!(config.in_flight_bounds().events, 50000);
    // a tiny queue the user chose is respected
    let config = parse(&with_property("\"queue.buffering.max.messages\" = 100")).expect("valid");
    assert_eq!(config.in_flight_bounds().events, 50);
}

#[test]
fn in_flight_bytes_are_bounded_by_the_producer_queue() {
    // GIVEN a 1 MiB queue and the default 16 MiB in flight
    let config = parse(&with_property("\"queue.buffering.max.kbytes\" = 1024")).expect("valid");
    assert_eq!(config.in_flight_bounds().bytes, 1_048_576);
    let text = with_kafka(
        "[kafka.properties]\n\"queue.buffering.max.kbytes\" = 1024",
        "[bridge]\nmax_in_flight_bytes = 1048576\n",
    );
    assert_eq!(
        parse(&text).expect("valid").in_flight_bounds().bytes,
        1_048_576
    );
    let text = with_kafka(
        "[kafka.properties]\n\"queue.buffering.max.kbytes\" = 1024",
        "[bridge]\nmax_in_flight_bytes = 1048577\n",
    );
    assert_eq!(
        parse(&text).expect("valid").in_flight_bounds().bytes,
        1_048_576
    );
    // the defaults: 16 MiB under librdkafka's 1 GiB queue
    let config = parse(&valid_with("")).expect("valid");
    assert_eq!(config.in_flight_bounds().bytes, 16 * 1024 * 1024);
}

#[test]
fn queue_bounds_must_be_integers() {
    for key in ["queue.buffering.max.messages", "queue.buffering.max.kbytes"] {
        assert_rejected(
            &with_property(&format!("\"{key}\" = \"lots\"")),
            &format!("kafka.properties.\"{key}\""),
            "must be an integer",
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Validation rules: pipelines
// ---------------------------------------------------------------------------------------------

#[test]
fn at_least_one_pipeline_is_required() {
    assert_rejected(SERVERS, "pipelines", "add at least one [[pipelines]] entry");
}

#[test]
fn pipeline_names_are_unique() {
    let text = valid_with("[[pipelines]]\nname = \"orders\"\ndatabase = \"other\"\n");
    assert_rejected(&text, "pipelines[1].name", "\"orders\" is used twice");
}

#[test]
fn pipeline_names_use_safe_characters() {
    for bad in ["", "orders feed", "orders/feed", "ördérs"] {
        let text = format!("{SERVERS}[[pipelines]]\nname = \"{bad}\"\n");
        assert_rejected(&text, "pipelines[0].name", "[A-Za-z0-9._-]");
    }
    let long = "n".repeat(201);
    let text = format!("{SERVERS}[[pipelines]]\nname = \"{long}\"\n");
    assert_rejected(&text, "pipelines[0].name", "1–200 characters");
    let ok = "n".repeat(200);
    parse(&format!("{SERVERS}[[pipelines]]\nname = \"{ok}\"\n")).expect("200 is allowed");
}

#[test]
fn collection_needs_a_database() {
    let text = format!("{SERVERS}[[pipelines]]\nname = \"p\"\ncollection = \"orders\"\n");
    assert_rejected(
        &text,
        "pipelines[0].database",
        "a collection needs its database",
    );
}

#[test]
fn database_and_collection_must_be_non_empty_names() {
    let text = format!("{SERVERS}[[pipelines]]\nname = \"p\"\ndatabase = \"\"\n");
    assert_rejected(&text, "pipelines[0].database", "non-empty name");
    let text =
        format!("{SERVERS}[[pipelines]]\nname = \"p\"\ndatabase = \"d\"\ncollection = \"\"\n");
    assert_rejected(&text, "pipelines[0].collection", "non-empty name");
    let text = format!(
        "{SERVERS}[[pipelines]]\nname = \"p\"\ndatabase = \"d\"\ncollection = \"a\\u0000b\"\n"
    );
    assert_rejected(&text, "pipelines[0].collection", "non-empty name");
}

#[test]
fn pipeline_stages_must_be_json() {
    assert_rejected(
        &valid_with("pipeline = '[{\"$match\": '\n"),
        "pipelines[0].pipeline",
        "not valid JSON",
    );
}

#[test]
fn pipeline_stages_must_be_an_array() {
    assert_rejected(
        &valid_with("pipeline = '{\"$match\": {\"operationType\": \"insert\"}}'\n"),
        "pipelines[0].pipeline",
        "must be a JSON array of stages",
    );
}

#[test]
fn each_stage_is_a_document_with_one_key() {
    assert_rejected(
        &valid_with("pipeline = '[{\"$match\": {}}, {\"$match\": {}, \"$project\": {}}]'\n"),
        "pipelines[0].pipeline",
        "stage 1 must be a document with exactly one $stage key",
    );
    assert_rejected(
        &valid_with("pipeline = '[1]'\n"),
        "pipelines[0].pipeline",
        "stage 0 must be a document",
    );
}

#[test]
fn stages_that_remove_the_key_or_the_token_are_refused() {
    for (stages, stage, field) in [
        (
            r#"[{"$project": {"documentKey": 0}}]"#,
            "stage 0 ($project)",
            "documentKey",
        ),
        (
            r#"[{"$match": {}}, {"$project": {"_id": false}}]"#,
            "stage 1 ($project)",
            "_id",
        ),
        (
            r#"[{"$project": {"fullDocument": 1}}]"#,
            "stage 0 ($project)",
            "documentKey",
        ),
        (
            r#"[{"$unset": "documentKey._id"}]"#,
            "stage 0 ($unset)",
            "documentKey._id",
        ),
        (
            r#"[{"$unset": ["a", "documentKey"]}]"#,
            "stage 0 ($unset)",
            "documentKey",
        ),
        (
            r#"[{"$replaceRoot": {"newRoot": "$fullDocument"}}]"#,
            "stage 0 ($replaceRoot)",
            "the whole event",
        ),
    ] {
        assert_rejected(
            &valid_with(&format!("pipeline = '{stages}'\n")),
            "pipelines[0].pipeline",
            &format!("{stage} removes {field} from the change events"),
        );
    }
    for fine in [
        r#"[{"$project": {"fullDocument.secret": 0}}]"#,
        r#"[{"$project": {"fullDocument": 1, "documentKey": 1, "operationType": 1, "ns": 1}}]"#,
        r#"[{"$unset": "fullDocument.secret"}]"#,
        r#"[{"$match": {"operationType": {"$in": ["insert", "invalidate"]}}}]"#,
    ] {
        parse(&valid_with(&format!("pipeline = '{fine}'\n"))).expect(fine);
    }
}

#[test]
fn stages_are_read_as_extended_json() {
    // GIVEN a $match on a date written in Extended JSON
    let text = valid_with(
        "pipeline = '[{\"$match\": {\"wallTime\": {\"$gte\": {\"$date\": \
         {\"$numberLong\": \"1704164645000\"}}}}}]'\n",
    );

    // WHEN it is loaded
    let stages = parse(&text).expect("valid").pipelines[0].stages();

    // THEN the stage holds a BSON date, not a nested document
    let expected = bson::doc! {
        "$match": { "wallTime": { "$gte": bson::DateTime::from_millis(1_704_164_645_000) } }
    };
    assert_eq!(stages, vec![expected]);
}

#[test]
fn durations_and_topic_creation_stay_within_librdkafkas_ranges() {
    assert_rejected(
        &valid_with("[bridge]\ncommit_interval_ms = 9223372036854775807\n"),
        "bridge.commit_interval_ms",
        "is too long: use at most 715827882",
    );
    assert_rejected(
        &valid_with("[bridge]\nlease_ms = 3000000000\n"),
        "bridge.lease_ms",
        "is too long: use at most 2147483647",
    );
    let creation = |rf: i64| {
        valid_with(&format!(
            "[kafka.topic_creation]\nenabled = true\npartitions = 3\nreplication_factor = {rf}\n"
        ))
    };
    assert_rejected(
        &creation(40_000),
        "kafka.topic_creation.replication_factor",
        "1 to 10000",
    );
    parse(&creation(3)).expect("3 replicas are fine");
}

#[test]
fn a_match_on_operation_type_without_invalidate_is_flagged_for_check() {
    let flagged = |stages: &str| {
        parse(&valid_with(&format!("pipeline = '{stages}'\n")))
            .expect("valid")
            .pipelines[0]
            .may_drop_invalidate()
    };
    assert!(flagged(r#"[{"$match": {"operationType": "insert"}}]"#));
    assert!(flagged(
        r#"[{"$match": {"$or": [{"operationType": "insert"}, {"fullDocument.a": 1}]}}]"#
    ));
    assert!(!flagged(
        r#"[{"$match": {"operationType": {"$in": ["insert", "invalidate"]}}}]"#
    ));
    assert!(!flagged(r#"[{"$match": {"fullDocument.status": "paid"}}]"#));
    let unfiltered = parse(&valid_with("")).expect("valid");
    assert!(!unfiltered.pipelines[0].may_drop_invalidate());
}

#[test]
fn start_at_accepts_now_and_rfc3339_times() {
    let at = |value: &str| {
        parse(&valid_with(&format!("start_at = \"{value}\"\n")))
            .expect("valid")
            .pipelines[0]
            .start_at()
    };
    assert_eq!(at("now"), StartAt::Now);
    assert_eq!(
        at("2024-01-02T03:04:05Z"),
        StartAt::Timestamp(1_704_164_645)
    );
    assert_eq!(
        at("2024-01-02T04:04:05.999+01:00"),
        StartAt::Timestamp(1_704_164_645)
    );
    assert_eq!(at("1970-01-01T00:00:00Z"), StartAt::Timestamp(0));
}

#[test]
fn start_at_rejects_other_text() {
    for bad in [
        "yesterday",
        "NOW",
        "2024-01-02",
        "2024-01-02 03:04:05",
        "1969-12-31T23:59:59Z",
        "2107-01-01T00:00:00Z",
    ] {
        assert_rejected(
            &valid_with(&format!("start_at = \"{bad}\"\n")),
            "pipelines[0].start_at",
            "use \"now\" or an RFC 3339 time",
        );
    }
}

#[test]
fn topic_must_be_a_valid_kafka_topic_name() {
    let long = "t".repeat(250);
    for bad in [
        "",
        "orders topic",
        "orders/topic",
        "orders:v1",
        long.as_str(),
    ] {
        assert_rejected(
            &valid_with(&format!("topic = \"{bad}\"\n")),
            "pipelines[0].topic",
            "Kafka topic names use 1–249 of [A-Za-z0-9._-]",
        );
    }
    let ok = "t".repeat(249);
    let config = parse(&valid_with(&format!("topic = \"{ok}\"\n"))).expect("249 is allowed");
    assert_eq!(config.pipelines[0].topic.as_deref(), Some(ok.as_str()));
    parse(&valid_with("topic = \"cdc.shop_orders-v1\"\n")).expect("valid");
}

#[test]
fn dead_letter_topic_must_be_a_valid_kafka_topic_name() {
    assert_rejected(
        &valid_with("dead_letter_topic = \"dead letters\"\n"),
        "pipelines[0].dead_letter_topic",
        "Kafka topic names",
    );
}

#[test]
fn a_snapshot_needs_records_that_carry_whole_documents_and_tombstones() {
    // The defaults (change events without fullDocument on updates) cannot mirror a collection.
    for snapshot in [
        "snapshot = \"initial\"\n",
        "on_history_lost = \"snapshot\"\n",
    ] {
        assert_rejected(
            &valid_with(snapshot),
            "pipelines[0].full_document",
            "needs every record to carry the whole document",
        );
    }
    assert_rejected(
        &valid_with(
            "snapshot = \"initial\"\nfull_document = \"update_lookup\"\ntombstones = false\n",
        ),
        "pipelines[0].tombstones",
        "needs tombstones",
    );
    let config = parse(&valid_with(
        "snapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
         on_history_lost = \"snapshot\"\nsnapshot_filter = '{\"status\": \"A\"}'\n",
    ))
    .expect("valid");
    let p = &config.pipelines[0];
    assert_eq!(p.snapshot, SnapshotMode::Initial);
    assert_eq!(p.on_history_lost, OnHistoryLost::Snapshot);
    assert_eq!(p.snapshot_filter(), bson::doc! { "status": "A" });
    assert_eq!((p.snapshot_batch_size, p.snapshot_parallelism), (1000, 2));
    // value = "document": the delete record is the tombstone, tombstones do not matter.
    parse(&valid_with(
        "snapshot = \"initial\"\nvalue = \"document\"\nfull_document = \"required\"\ntombstones = false\n",
    ))
    .expect("valid");
}

#[test]
fn snapshot_settings_name_their_bounds() {
    assert_rejected(
        &valid_with("snapshot_batch_size = 0\n"),
        "pipelines[0].snapshot_batch_size",
        "use 1–100000",
    );
    assert_rejected(
        &valid_with("snapshot_parallelism = 0\n"),
        "pipelines[0].snapshot_parallelism",
        "use 1–64",
    );
    assert_rejected(
        &valid_with("snapshot_filter = '[1]'\n"),
        "pipelines[0].snapshot_filter",
        "must be a JSON object",
    );
    assert_rejected(
        &valid_with("snapshot = \"sometimes\"\n"),
        "pipelines[0].snapshot",
        "expected `never` or `initial`",
    );
    assert_rejected(
        &valid_with("snapshot_count_check = \"ignore\"\n"),
        "pipelines[0].snapshot_count_check",
        "expected `fail` or `warn`",
    );
}

#[test]
fn a_count_mismatch_fails_the_copy_unless_set_to_warn() {
    let config = parse(&valid_with("")).expect("valid");
    assert_eq!(config.pipelines[0].snapshot_count_check, CountCheck::Fail);
    let config = parse(&valid_with("snapshot_count_check = \"warn\"\n")).expect("valid");
    assert_eq!(config.pipelines[0].snapshot_count_check, CountCheck::Warn);
}

#[test]
fn on_oversize_dead_letter_needs_a_dead_letter_topic() {
    assert_rejected(
        &valid_with("on_oversize = \"dead_letter\"\n"),
        "pipelines[0].dead_letter_topic",
        "required with on_oversize = \"dead_letter\"",
    );
    let config = parse(&valid_with(
        "on_oversize = \"dead_letter\"\ndead_letter_topic = \"orders.dlq\"\n",
    ))
    .expect("valid");
    assert_eq!(config.pipelines[0].on_oversize, OnOversize::DeadLetter);
    assert_eq!(
        config.pipelines[0].dead_letter_topic.as_deref(),
        Some("orders.dlq")
    );
}

#[test]
fn document_values_need_a_full_document_on_updates() {
    // Without one, an update's value would be null: a tombstone for the document.
    assert_rejected(
        &valid_with("value = \"document\"\n"),
        "pipelines[0].full_document",
        "value = \"document\" needs a full document on updates",
    );
    assert_rejected(
        &valid_with("value = \"document\"\nfull_document = \"default\"\n"),
        "pipelines[0].full_document",
        "update_lookup",
    );
    for full_document in ["update_lookup", "when_available", "required"] {
        parse(&valid_with(&format!(
            "value = \"document\"\nfull_document = \"{full_document}\"\n"
        )))
        .unwrap_or_else(|e| panic!("{full_document}: {e}"));
    }
}

#[test]
fn dead_letter_topic_needs_a_dead_letter_policy() {
    assert_rejected(
        &valid_with("dead_letter_topic = \"dlq\"\n"),
        "pipelines[0].dead_letter_topic",
        "only used with on_oversize or on_ambiguous = \"dead_letter\"",
    );
    assert_rejected(
        &valid_with("on_ambiguous = \"dead_letter\"\n"),
        "pipelines[0].dead_letter_topic",
        "required with on_ambiguous = \"dead_letter\"",
    );
    parse(&valid_with(
        "on_ambiguous = \"dead_letter\"\ndead_letter_topic = \"dlq\"\n",
    ))
    .expect("either policy may use it");
}

#[test]
fn errors_name_the_pipeline_that_breaks_the_rule() {
    let text = valid_with("[[pipelines]]\nname = \"second\"\ntopic = \"bad topic\"\n");
    assert_rejected(&text, "pipelines[1].topic", "Kafka topic names");
}

// ---------------------------------------------------------------------------------------------
// Environment overrides
// ---------------------------------------------------------------------------------------------

#[test]
fn env_overrides_the_mongodb_uri() {
    let config = parse_env(
        &valid_with(""),
        &[(
            "MONGO_KAFKA_BRIDGE__MONGODB__URI",
            "mongodb://db.internal:27017/?replicaSet=rs0",
        )],
    )
    .expect("valid");
    assert_eq!(
        config.mongodb.uri.expose(),
        "mongodb://db.internal:27017/?replicaSet=rs0"
    );
}

#[test]
fn env_supplies_a_key_the_file_lacks() {
    // GIVEN a file without mongodb.uri
    let text = format!("[mongodb]\n[kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}");
    // WHEN the environment sets it
    let config = parse_env(
        &text,
        &[("MONGO_KAFKA_BRIDGE__MONGODB__URI", "mongodb://h:1/")],
    )
    .expect("valid");
    // THEN it is used
    assert_eq!(config.mongodb.uri.expose(), "mongodb://h:1/");
}

#[test]
fn env_overrides_an_integer() {
    let config = parse_env(
        &valid_with("[bridge]\ncommit_interval_ms = 5000\n"),
        &[("MONGO_KAFKA_BRIDGE__BRIDGE__COMMIT_INTERVAL_MS", "250")],
    )
    .expect("valid");
    assert_eq!(config.bridge.commit_interval_ms, 250);
}

#[test]
fn env_overrides_a_duration_outside_bridge() {
    let config = parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__METRICS__HISTORY_INTERVAL_MS", "0")],
    )
    .expect("valid");
    assert_eq!(config.metrics.history_interval_ms, 0);
    assert_eq!(
        parse_env(&valid_with(""), &[])
            .expect("valid")
            .metrics
            .history_interval_ms,
        15_000
    );
}

#[test]
fn runtime_threads_default_to_one_per_pipeline_at_most_one_per_cpu() {
    let mut bridge = crate::config::BridgeConfig::default();
    assert_eq!(bridge.runtime_threads(1, 8), 1);
    assert_eq!(bridge.runtime_threads(3, 8), 3);
    assert_eq!(bridge.runtime_threads(3, 2), 2);
    assert_eq!(bridge.runtime_threads(0, 2), 1);
    bridge.worker_threads = 4;
    assert_eq!(bridge.runtime_threads(1, 2), 4);
}

#[test]
fn worker_threads_beyond_reason_are_refused() {
    let (field, reason) = config_error(parse_env(
        &valid_with("[bridge]\nworker_threads = 5000\n"),
        &[],
    ));
    assert_eq!(field, "bridge.worker_threads");
    assert_eq!(
        reason,
        "5000 threads is more than any machine needs: use 0 (one per pipeline)"
    );
}

#[test]
fn encode_threads_beyond_reason_are_refused() {
    let (field, reason) = config_error(parse_env(
        &valid_with("[bridge]\nencode_threads = 65\n"),
        &[],
    ));
    assert_eq!(field, "bridge.encode_threads");
    assert!(
        reason.starts_with("65 is more than a pipeline can use"),
        "{reason}"
    );
    let config = parse(&valid_with("[bridge]\nencode_threads = 4\n")).expect("valid");
    assert_eq!(config.bridge.encode_threads, 4);
}

#[test]
fn history_interval_below_a_second_is_refused() {
    let (field, reason) = config_error(parse_env(
        &valid_with("[metrics]\nhistory_interval_ms = 50\n"),
        &[],
    ));
    assert_eq!(field, "metrics.history_interval_ms");
    assert_eq!(reason, "50 is too often: use 0 (off) or at least 1000");
}

#[test]
fn env_integer_that_does_not_parse_names_the_field() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__BRIDGE__COMMIT_INTERVAL_MS", "soon")],
    ));
    assert_eq!(field, "bridge.commit_interval_ms");
    assert!(reason.contains("expected a whole number"), "{reason}");
    assert!(
        reason.ends_with(
            " (set by the environment variable MONGO_KAFKA_BRIDGE__BRIDGE__COMMIT_INTERVAL_MS)"
        ),
        "{reason}"
    );
}

#[test]
fn a_rule_broken_by_an_env_override_names_the_variable_and_one_of_the_file_does_not() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__METRICS__HISTORY_INTERVAL_MS", "50")],
    ));
    assert_eq!(field, "metrics.history_interval_ms");
    assert_eq!(
        reason,
        "50 is too often: use 0 (off) or at least 1000 (set by the environment variable \
         MONGO_KAFKA_BRIDGE__METRICS__HISTORY_INTERVAL_MS)"
    );
    let (_, reason) = config_error(parse_env(
        &valid_with("[metrics]\nhistory_interval_ms = 50\n"),
        &[("MONGO_KAFKA_BRIDGE__BRIDGE__COMMIT_INTERVAL_MS", "250")],
    ));
    assert_eq!(reason, "50 is too often: use 0 (off) or at least 1000");
}

#[test]
fn env_digits_for_a_string_key_stay_a_string() {
    // GIVEN string keys overridden with digits and a boolean word
    let config = parse_env(
        &valid_with(""),
        &[
            ("MONGO_KAFKA_BRIDGE__KAFKA__TOPIC_PREFIX", "2024"),
            ("MONGO_KAFKA_BRIDGE__MONGODB__OFFSETS_DATABASE", "true"),
            (
                "MONGO_KAFKA_BRIDGE__KAFKA__BOOTSTRAP_SERVERS",
                "kafka-1:9092,kafka-2:9092",
            ),
            ("MONGO_KAFKA_BRIDGE__METRICS__LISTEN", "0.0.0.0:9100"),
        ],
    )
    .expect("valid");
    // THEN they are taken as text
    assert_eq!(config.kafka.topic_prefix, "2024");
    assert_eq!(config.mongodb.offsets_database, "true");
    assert_eq!(config.kafka.bootstrap_servers, "kafka-1:9092,kafka-2:9092");
    assert_eq!(config.metrics.listen, "0.0.0.0:9100");
}

#[test]
fn env_sets_a_librdkafka_property_with_dots() {
    let config = parse_env(
        &valid_with(""),
        &[(
            "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD",
            "s3cret",
        )],
    )
    .expect("valid");
    assert_eq!(
        config.kafka.properties.get("sasl.password"),
        Some(&PropertyValue::Text("s3cret".to_owned()))
    );
}

#[test]
fn env_property_is_checked_like_a_file_property() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[(
            "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__ENABLE_IDEMPOTENCE",
            "false",
        )],
    ));
    assert_eq!(field, "kafka.properties.\"enable.idempotence\"");
    assert!(reason.contains("idempotent producer"), "{reason}");
}

#[test]
fn env_section_and_key_are_case_insensitive() {
    let config = parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__kafka__Topic_Prefix", "cdc.")],
    )
    .expect("valid");
    assert_eq!(config.kafka.topic_prefix, "cdc.");
}

#[test]
fn env_without_the_prefix_is_ignored_and_a_near_miss_is_refused() {
    let config =
        parse_env(&valid_with(""), &[("PATH", "/usr/bin"), ("MONGO_URI", "x")]).expect("valid");
    assert_eq!(config.mongodb.uri.expose(), "mongodb://127.0.0.1:27017/");
    for name in [
        "MONGO_KAFKA_BRIDGE_MONGODB__URI",
        "mongo_kafka_bridge__mongodb__uri",
    ] {
        let (field, reason) = config_error(parse_env(&valid_with(""), &[(name, "http://wrong/")]));
        assert_eq!(field, name);
        assert!(reason.starts_with("is not an override"), "{reason}");
    }
}

#[test]
fn a_numeric_group_id_from_the_env_stays_a_string() {
    let config = parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__BRIDGE__GROUP_ID", "2024")],
    )
    .expect("valid");
    assert_eq!(config.bridge.group_id.as_deref(), Some("2024"));
}

#[test]
fn an_unknown_section_or_a_refused_property_from_the_env_names_the_variable() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__BRIDG__COMMIT_INTERVAL_MS", "5")],
    ));
    assert_eq!(field, "bridg");
    assert!(
        reason.ends_with(
            "(set by the environment variable MONGO_KAFKA_BRIDGE__BRIDG__COMMIT_INTERVAL_MS)"
        ),
        "{reason}"
    );
    let (_, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__LINGER_MS", "abc")],
    ));
    assert!(
        reason.ends_with(
            "(set by the environment variable MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__LINGER_MS)"
        ),
        "{reason}"
    );
}

#[test]
fn malformed_env_names_are_rejected() {
    for name in [
        "MONGO_KAFKA_BRIDGE__URI",
        "MONGO_KAFKA_BRIDGE__MONGODB__URI__EXTRA",
        "MONGO_KAFKA_BRIDGE__PIPELINES__0__NAME",
    ] {
        let (field, reason) = config_error(parse_env(&valid_with(""), &[(name, "x")]));
        assert_eq!(field, name);
        assert!(
            reason.contains("MONGO_KAFKA_BRIDGE__SECTION__KEY"),
            "{name}: {reason}"
        );
    }
}

#[test]
fn env_cannot_configure_pipelines() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__PIPELINES__X", "y")],
    ));
    assert_eq!(field, "MONGO_KAFKA_BRIDGE__PIPELINES__X");
    assert!(
        reason.contains("pipelines are configured in the file only"),
        "{reason}"
    );
}

#[test]
fn env_unknown_section_is_named() {
    let (field, reason) = config_error(parse_env(
        &valid_with(""),
        &[("MONGO_KAFKA_BRIDGE__MONGO__URI", "mongodb://h:1/")],
    ));
    assert_eq!(field, "mongo");
    assert!(reason.contains("unknown field `mongo`"), "{reason}");
}

// ---------------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------------

#[test]
fn debug_output_hides_the_uri_password() {
    // GIVEN a URI with a password
    let text = format!(
        "[mongodb]\nuri = \"mongodb://user:hunter2@h:1/\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    let config = parse(&text).expect("valid");

    // WHEN the whole configuration is debug-printed
    let printed = format!("{config:?}");

    // THEN the password is masked
    assert!(!printed.contains("hunter2"), "{printed}");
    assert!(printed.contains("mongodb://user:***@h:1/"), "{printed}");
    assert_eq!(
        format!("{:?}", config.mongodb.uri),
        "\"mongodb://user:***@h:1/\""
    );
}

#[test]
fn secrets_lists_the_uri_password_and_secret_properties() {
    // GIVEN a URI password, a SASL password from the environment and two non-secret properties
    let text = format!(
        "[mongodb]\nuri = \"mongodb://user:hunter2@h:1/\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n\
         [kafka.properties]\n\"linger.ms\" = 5\n\"sasl.username\" = \"bridge\"\n\
         \"ssl.key.pem\" = \"PEMDATA\"\n\"ssl.key.password\" = \"keypass-s\"\n\
         {PIPELINE}"
    );
    let config = parse_env(
        &text,
        &[(
            "MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD",
            "s3cret",
        )],
    )
    .expect("valid");

    // WHEN the secrets are listed
    let secrets = config.secrets();

    // THEN they are the password and the secret properties (in key order), nothing else
    assert_eq!(secrets, ["hunter2", "s3cret", "keypass-s", "PEMDATA"]);
}

#[test]
fn secrets_is_empty_without_passwords() {
    let config = parse(&valid_with("")).expect("valid");
    assert!(config.secrets().is_empty());
}

#[test]
fn secret_uri_password_and_redaction() {
    for (uri, password, redacted) in [
        ("mongodb://h:1/", None, "mongodb://h:1/"),
        ("mongodb://user@h:1/", None, "mongodb://user@h:1/"),
        ("mongodb://user:@h:1/", None, "mongodb://user:@h:1/"),
        (
            "mongodb://user:hunter2@h:1/",
            Some("hunter2"),
            "mongodb://user:***@h:1/",
        ),
        (
            "mongodb://user:hunter2@h1:1,h2:2/db?replicaSet=rs0",
            Some("hunter2"),
            "mongodb://user:***@h1:1,h2:2/db?replicaSet=rs0",
        ),
        (
            "mongodb://user:p%40ss%3Aw@h:1/?authSource=admin",
            Some("p%40ss%3Aw"),
            "mongodb://user:***@h:1/?authSource=admin",
        ),
        // An unencoded '@' is invalid, but the last '@' still ends the userinfo.
        (
            "mongodb://user:p@ss@h:1/",
            Some("p@ss"),
            "mongodb://user:***@h:1/",
        ),
        // Unencoded '/' and '?' in a password (base64-like): invalid too, and still hidden.
        (
            "mongodb://bridge:Zm9v/YmFy+cXV4@h:1/?directConnection=true",
            Some("Zm9v/YmFy+cXV4"),
            "mongodb://bridge:***@h:1/?directConnection=true",
        ),
        (
            "mongodb://bridge:pa?ss99word@h:1/?directConnection=true",
            Some("pa?ss99word"),
            "mongodb://bridge:***@h:1/?directConnection=true",
        ),
        (
            "mongodb://u:pa?ss@h:1",
            Some("pa?ss"),
            "mongodb://u:***@h:1",
        ),
        // An '@' in the query is not the userinfo's.
        (
            "mongodb://h:1/?tlsCAFile=/etc/a@b.pem",
            None,
            "mongodb://h:1/?tlsCAFile=/etc/a@b.pem",
        ),
        (
            "mongodb+srv://user:hunter2@cluster0.example.net",
            Some("hunter2"),
            "mongodb+srv://user:***@cluster0.example.net",
        ),
        // An '@' after the host (in the query) is not userinfo.
        (
            "mongodb://h:1/?appName=a:b@c",
            None,
            "mongodb://h:1/?appName=a:b@c",
        ),
        (
            "mongodb://h:1?appName=a:b@c",
            None,
            "mongodb://h:1?appName=a:b@c",
        ),
        // The password repeated elsewhere: only the userinfo one is masked.
        (
            "mongodb://user:x@h:1/?appName=:x@",
            Some("x"),
            "mongodb://user:***@h:1/?appName=:x@",
        ),
        ("not a uri", None, "not a uri"),
    ] {
        let secret = SecretUri::new(uri);
        assert_eq!(secret.password(), password, "{uri}");
        assert_eq!(secret.redacted(), redacted, "{uri}");
        assert_eq!(secret.expose(), uri);
    }
}

#[test]
fn config_errors_do_not_echo_the_uri() {
    // GIVEN a URI with a password and a wrong scheme
    let text = format!(
        "[mongodb]\nuri = \"mongo://user:hunter2@h:1/\"\n\
         [kafka]\nbootstrap_servers = \"h:1\"\n{PIPELINE}"
    );
    // WHEN it is rejected
    let error = parse(&text).expect_err("bad scheme");
    // THEN neither the error nor its message holds the password
    let message = error.to_string();
    assert_eq!(
        message,
        "invalid configuration: mongodb.uri: must start with mongodb:// or mongodb+srv://"
    );
}

#[test]
fn debug_output_masks_secret_kafka_properties() {
    // GIVEN a SASL password and an ordinary property
    let text = with_kafka(
        "[kafka.properties]\n\"sasl.password\" = \"s3cretvalue\"\n\"linger.ms\" = 7",
        "",
    );
    // WHEN the config is printed with Debug
    let shown = format!("{:?}", parse(&text).expect("valid"));
    // THEN the password is masked and the ordinary property is shown
    assert!(!shown.contains("s3cretvalue"), "{shown}");
    assert!(shown.contains("\"sasl.password\": \"***\""), "{shown}");
    assert!(shown.contains("\"linger.ms\": \"7\""), "{shown}");
}

#[test]
fn secret_uri_options_are_redacted_and_listed_as_secrets() {
    let uri = SecretUri::new(
        "mongodb://u:pw1@h:1/?tls=true&tlsCertificateKeyFilePassword=TlsKeyPw99\
         &proxyHost=p&proxyPassword=ProxyPw55&authMechanismProperties=AWS_SESSION_TOKEN:tok",
    );
    assert_eq!(
        uri.redacted(),
        "mongodb://u:***@h:1/?tls=true&tlsCertificateKeyFilePassword=***&proxyHost=p\
         &proxyPassword=***&authMechanismProperties=***"
    );
    assert_eq!(
        uri.option_secrets(),
        ["TlsKeyPw99", "ProxyPw55", "AWS_SESSION_TOKEN:tok"]
    );
    let shown = format!("{uri:?}");
    assert!(
        !shown.contains("TlsKeyPw99") && !shown.contains("ProxyPw55"),
        "{shown}"
    );
}

#[test]
fn a_stop_keeps_a_share_of_the_shutdown_bound_for_the_final_commit() {
    let mut config = parse(&valid_with("")).expect("valid").bridge;
    config.shutdown_timeout_ms = 1000;
    assert_eq!(config.drain_bound(), std::time::Duration::from_millis(750));
    config.shutdown_timeout_ms = 30_000;
    assert_eq!(
        config.drain_bound(),
        std::time::Duration::from_millis(28_000)
    );
}

/// The commented-out block of `deploy/config.example.toml` from the line starting `from` to the
/// one starting `to`, uncommented, its trailing comments dropped.
pub(crate) fn example_block(from: &str, to: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/config.example.toml");
    let text = std::fs::read_to_string(path).expect("the example configuration");
    let start = text.find(from).expect("the block's start");
    let end = text[start..].find(to).expect("the block's end") + start;
    text[start..end]
        .lines()
        .map(|l| l.split_once("  #").map_or(l, |(code, _)| code).trim_end())
        .map(|l| l.strip_prefix("# ").unwrap_or(""))
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect()
}
