//! Validation rules and environment overrides for [`Config`](super::Config).
//!
//! Each rule returns a [`BridgeError::Config`] whose `field` is the TOML path and whose `reason`
//! says what to write instead. Rules that protect the delivery guarantees follow librdkafka's
//! `CONFIGURATION.md` (idempotent producer: `acks=all`, `max.in.flight.requests.per.connection`
//! ≤ 5) and the Java clients' key → partition mapping (`murmur2_random`).

use std::collections::HashSet;

use super::{
    Config, ENV_PREFIX, Format, FullDocument, OnAmbiguous, OnHistoryLost, OnOversize,
    PipelineConfig, SnapshotMode, StartAt, ValueMode,
};
use crate::error::BridgeError;

fn err(field: impl Into<String>, reason: impl Into<String>) -> BridgeError {
    BridgeError::Config {
        field: field.into(),
        reason: reason.into(),
    }
}

/// True for librdkafka properties whose value is a secret.
pub(super) fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    k.contains("password") || k.contains("secret") || k.contains("jaas") || k == "ssl.key.pem"
}

/// Applies `MONGO_KAFKA_BRIDGE__SECTION__KEY=value` overrides to the parsed file.
///
/// In `[bridge]` (all integers) and for `*_ms` keys, values that parse as an integer become one;
/// every other value is a string.
pub(super) fn apply_env(
    tree: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Overrides, BridgeError> {
    let mut applied = Overrides::default();
    for (name, raw) in env {
        let Some(path) = name.strip_prefix(ENV_PREFIX) else {
            if name
                .to_ascii_uppercase()
                .starts_with(ENV_PREFIX.trim_end_matches('_'))
            {
                // Meant as an override, but it would be ignored: say so.
                return Err(err(
                    name,
                    "is not an override, which takes the form MONGO_KAFKA_BRIDGE__SECTION__KEY \
                     (upper case, two underscores between parts): rename or unset it",
                ));
            }
            continue;
        };
        let parts: Vec<&str> = path.split("__").collect();
        let (section, key) = match parts.as_slice() {
            [section, key] => (section.to_ascii_lowercase(), key.to_ascii_lowercase()),
            [kafka, props, key]
                if kafka.eq_ignore_ascii_case("kafka")
                    && props.eq_ignore_ascii_case("properties") =>
            {
                let table = section_table(tree, "kafka");
                let props = table
                    .entry("properties")
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                let toml::Value::Table(props) = props else {
                    return Err(err(
                        "kafka.properties",
                        "must be a table of librdkafka properties",
                    ));
                };
                let key = key.to_ascii_lowercase().replace('_', ".");
                applied
                    .0
                    .push((format!("kafka.properties.\"{key}\""), name.clone()));
                props.insert(key, toml::Value::String(raw));
                continue;
            }
            _ => {
                return Err(err(
                    name.clone(),
                    "environment overrides take the form MONGO_KAFKA_BRIDGE__SECTION__KEY \
                     (pipelines are configured in the file only)",
                ));
            }
        };
        if section == "pipelines" {
            return Err(err(name, "pipelines are configured in the file only"));
        }
        // Only `[bridge]` and durations (`*_ms`) hold numbers: elsewhere a value such as a topic
        // prefix `2024` or a database `true` stays a string.
        let value = match raw.parse::<i64>() {
            Ok(i) if (section == "bridge" && key != "group_id") || key.ends_with("_ms") => {
                toml::Value::Integer(i)
            }
            _ => toml::Value::String(raw),
        };
        applied.0.push((format!("{section}.{key}"), name.clone()));
        section_table(tree, &section).insert(key, value);
    }
    Ok(applied)
}

/// The fields environment overrides set: `(field, variable)`, the field as configuration
/// errors name it (`bridge.commit_interval_ms`, `kafka.properties."linger.ms"`).
#[derive(Debug, Default)]
pub(super) struct Overrides(Vec<(String, String)>);

impl Overrides {
    /// `error` naming the environment variable when its field was set by one (the file does
    /// not hold the bad value then).
    pub(super) fn name_variable(&self, error: BridgeError) -> BridgeError {
        match error {
            BridgeError::Config { field, reason } => {
                let var = self.0.iter().rev().find(|(f, _)| {
                    field == *f
                        || field.starts_with(&format!("{f}."))
                        || field.starts_with(&format!("{f}["))
                        // an unknown section: the error names the section alone
                        || f.starts_with(&format!("{field}."))
                        // librdkafka's refusal names the property in its text
                        || (field == "kafka.properties"
                            && f.strip_prefix("kafka.properties.").is_some_and(|key| {
                                reason.contains(&format!("property {key}"))
                            }))
                });
                let reason = match var {
                    Some((_, var)) => format!("{reason} (set by the environment variable {var})"),
                    None => reason,
                };
                BridgeError::Config { field, reason }
            }
            other => other,
        }
    }
}

fn section_table<'a>(tree: &'a mut toml::Table, section: &str) -> &'a mut toml::Table {
    let entry = tree
        .entry(section)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if !entry.is_table() {
        *entry = toml::Value::Table(toml::Table::new());
    }
    entry.as_table_mut().expect("entry was just made a table")
}

/// Parses `start_at`: `now` or an RFC 3339 time, as seconds since the Unix epoch.
pub(super) fn parse_start_at(text: &str) -> Option<StartAt> {
    if text == "now" {
        return Some(StartAt::Now);
    }
    let time = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    u32::try_from(time.timestamp()).ok().map(StartAt::Timestamp)
}

/// Parses the `pipeline` option: an Extended JSON array of stage documents.
pub(super) fn parse_stages(text: &str) -> Result<Vec<bson::Document>, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let serde_json::Value::Array(items) = json else {
        return Err("must be a JSON array of stages, e.g. '[{\"$match\": {…}}]'".into());
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match bson::Bson::try_from(item) {
            Ok(bson::Bson::Document(d)) if d.len() == 1 => Ok(d),
            Ok(_) => Err(format!(
                "stage {i} must be a document with exactly one $stage key"
            )),
            Err(e) => Err(format!("stage {i} is not valid Extended JSON: {e}")),
        })
        .collect()
}

/// Parses a `snapshot_filter`: one Extended JSON document.
pub(super) fn parse_filter(text: &str) -> Result<bson::Document, String> {
    let json: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    match bson::Bson::try_from(json) {
        Ok(bson::Bson::Document(d)) => Ok(d),
        Ok(_) => Err("must be a JSON object, a find filter such as '{\"status\": \"A\"}'".into()),
        Err(e) => Err(format!("not valid Extended JSON: {e}")),
    }
}

/// What a snapshot needs: records that carry whole documents, tombstones for deletes, sane
/// batch sizes. The mirror guarantee (README, "Initial snapshot") holds only then, so other
/// settings are refused rather than warned about.
fn snapshot_rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let snapshots =
        p.snapshot == SnapshotMode::Initial || p.on_history_lost == OnHistoryLost::Snapshot;
    if let Some(text) = &p.snapshot_filter {
        parse_filter(text).map_err(|reason| err(format!("{at}.snapshot_filter"), reason))?;
    }
    if !(1..=100_000).contains(&p.snapshot_batch_size) {
        return Err(err(
            format!("{at}.snapshot_batch_size"),
            "documents per batch: use 1–100000 (default 1000)",
        ));
    }
    if !(1..=64).contains(&p.snapshot_parallelism) {
        return Err(err(
            format!("{at}.snapshot_parallelism"),
            "collections copied at once: use 1–64 (default 2)",
        ));
    }
    if !snapshots {
        return Ok(());
    }
    let key = if p.snapshot == SnapshotMode::Initial {
        "snapshot = \"initial\""
    } else {
        "on_history_lost = \"snapshot\""
    };
    if p.value == ValueMode::ChangeEvent && p.full_document == FullDocument::Default {
        return Err(err(
            format!("{at}.full_document"),
            format!(
                "{key} needs every record to carry the whole document, or an update's record \
                 would leave an older copy as the key's last record: set full_document = \
                 \"update_lookup\" (or \"required\" / \"when_available\" with post-images enabled)"
            ),
        ));
    }
    if p.value == ValueMode::ChangeEvent && !p.tombstones {
        return Err(err(
            format!("{at}.tombstones"),
            format!(
                "{key} needs tombstones, or a deleted document's copy would stay the key's last \
                 record in a compacted topic: remove tombstones = false"
            ),
        ));
    }
    Ok(())
}

fn valid_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Runs every rule.
pub(super) fn validate(config: &Config) -> Result<(), BridgeError> {
    let uri = config.mongodb.uri.expose();
    if !(uri.starts_with("mongodb://") || uri.starts_with("mongodb+srv://")) {
        return Err(err(
            "mongodb.uri",
            "must start with mongodb:// or mongodb+srv://",
        ));
    }
    for (field, value) in [
        ("mongodb.offsets_database", &config.mongodb.offsets_database),
        (
            "mongodb.offsets_collection",
            &config.mongodb.offsets_collection,
        ),
    ] {
        if value.is_empty() {
            return Err(err(field, "must be non-empty"));
        }
    }
    if config.kafka.bootstrap_servers.trim().is_empty() {
        return Err(err(
            "kafka.bootstrap_servers",
            "set it to host:port[,host:port]",
        ));
    }
    validate_bridge(config)?;
    validate_properties(config)?;
    super::group::validate(config)?;
    super::transactions::validate(config)?;
    if config
        .metrics
        .listen
        .parse::<std::net::SocketAddr>()
        .is_err()
    {
        return Err(err(
            "metrics.listen",
            "must be host:port with an IP address, e.g. 0.0.0.0:9464",
        ));
    }
    let history = config.metrics.history_interval_ms;
    if history != 0 && history < 1000 {
        return Err(err(
            "metrics.history_interval_ms",
            format!("{history} is too often: use 0 (off) or at least 1000"),
        ));
    }
    if config.pipelines.is_empty() {
        return Err(err("pipelines", "add at least one [[pipelines]] entry"));
    }
    if crate::kafka::topics::is_internal(&config.kafka.topic_prefix) {
        return Err(err(
            "kafka.topic_prefix",
            "names starting with __ are Kafka's and the bridge's internal topics: choose another \
             prefix",
        ));
    }
    let mut names = HashSet::new();
    for (i, p) in config.pipelines.iter().enumerate() {
        let at = format!("pipelines[{i}]");
        validate_pipeline(&at, p)?;
        let m = &config.mongodb;
        if p.database.as_deref() == Some(m.offsets_database.as_str())
            && p.collection.as_deref() == Some(m.offsets_collection.as_str())
        {
            return Err(err(
                format!("{at}.collection"),
                format!(
                    "{}.{} is the bridge's own offsets collection: watch another collection, or \
                     move the offsets (mongodb.offsets_database / offsets_collection)",
                    m.offsets_database, m.offsets_collection
                ),
            ));
        }
        if !names.insert(p.name.as_str()) {
            return Err(err(
                format!("pipelines[{i}].name"),
                format!("{:?} is used twice", p.name),
            ));
        }
    }
    Ok(())
}

fn validate_bridge(config: &Config) -> Result<(), BridgeError> {
    let b = &config.bridge;
    let positive = [
        ("bridge.commit_interval_ms", b.commit_interval_ms),
        ("bridge.max_in_flight_events", b.max_in_flight_events as u64),
        ("bridge.max_in_flight_bytes", b.max_in_flight_bytes as u64),
        ("bridge.max_await_time_ms", b.max_await_time_ms),
        ("bridge.max_restart_backoff_ms", b.max_restart_backoff_ms),
        (
            "bridge.persistent_error_attempts",
            u64::from(b.persistent_error_attempts),
        ),
        (
            "bridge.ready_max_delivery_age_ms",
            b.ready_max_delivery_age_ms,
        ),
    ];
    for (field, value) in positive {
        if value == 0 {
            return Err(err(field, "must be greater than 0"));
        }
    }
    let min_lease = b.commit_interval_ms.saturating_mul(3).max(1000);
    if b.lease_ms < min_lease {
        return Err(err(
            "bridge.lease_ms",
            format!(
                "{} ms leaves too few renewals: use at least {min_lease} (3 × commit_interval_ms, \
                 1000 at least)",
                b.lease_ms
            ),
        ));
    }
    if b.liveness_timeout_ms < 2000 {
        return Err(err(
            "bridge.liveness_timeout_ms",
            format!(
                "{} ms is shorter than a pipeline loop's tick: use at least 2000",
                b.liveness_timeout_ms
            ),
        ));
    }
    if b.worker_threads > 1024 {
        return Err(err(
            "bridge.worker_threads",
            format!(
                "{} threads is more than any machine needs: use 0 (one per pipeline)",
                b.worker_threads
            ),
        ));
    }
    Ok(())
}

fn property_i64(config: &Config, key: &str) -> Result<Option<i64>, BridgeError> {
    match config.kafka.properties.get(key) {
        None => Ok(None),
        Some(v) => v
            .to_string()
            .parse()
            .map(Some)
            .map_err(|_| err(format!("kafka.properties.\"{key}\""), "must be an integer")),
    }
}

fn validate_properties(config: &Config) -> Result<(), BridgeError> {
    for (key, value) in &config.kafka.properties {
        let field = format!("kafka.properties.\"{key}\"");
        let text = value.to_string();
        let bad = match key.as_str() {
            "enable.idempotence" if text != "true" => {
                Some("the bridge needs the idempotent producer; remove this property")
            }
            "acks" | "request.required.acks" if !matches!(text.as_str(), "all" | "-1") => {
                Some("must be all (the bridge commits only what every in-sync replica has)")
            }
            "max.in.flight" | "max.in.flight.requests.per.connection"
                if text.parse::<i64>().map_or(true, |n| !(1..=5).contains(&n)) =>
            {
                Some("must be between 1 and 5 (idempotence keeps order only up to 5)")
            }
            "partitioner" if text != "murmur2_random" => {
                Some("must be murmur2_random (the Java clients' key → partition mapping)")
            }
            "transactional.id" => Some(
                "derived per pipeline from [kafka] transactional_id_prefix + the pipeline name \
                 (delivery = \"exactly_once\"); remove it",
            ),
            "delivery.report.only.error" if text != "false" => Some(
                "the bridge commits a position only once Kafka acknowledged every record before \
                 it, which needs every delivery report: remove this property",
            ),
            "bootstrap.servers" | "metadata.broker.list" => {
                Some("set kafka.bootstrap_servers instead")
            }
            "enable.gapless.guarantee" if text != "true" && text != "false" => {
                Some("must be true or false")
            }
            _ => None,
        };
        if let Some(reason) = bad {
            return Err(err(field, reason));
        }
    }
    // The in-flight bounds derive from these (Config::in_flight_bounds).
    for key in ["queue.buffering.max.messages", "queue.buffering.max.kbytes"] {
        property_i64(config, key)?;
    }
    // Then librdkafka itself judges every name and value, so `check` and `run` agree.
    crate::kafka::validate_properties(&config.kafka).map_err(|reason| {
        err(
            "kafka.properties",
            format!(
                "{}. Remedy: fix the property's name or value (librdkafka CONFIGURATION.md)",
                config.redact(&reason)
            ),
        )
    })?;
    validate_topic_creation(config)
}

fn validate_topic_creation(config: &Config) -> Result<(), BridgeError> {
    let t = &config.kafka.topic_creation;
    if !t.enabled {
        return Ok(());
    }
    if t.partitions < 1 {
        return Err(err(
            "kafka.topic_creation.partitions",
            "set the partition count of the topics the bridge creates (at least 1)",
        ));
    }
    if t.replication_factor == 0 || t.replication_factor < -1 {
        return Err(err(
            "kafka.topic_creation.replication_factor",
            "use -1 (the broker's default.replication.factor) or at least 1",
        ));
    }
    if !matches!(
        t.cleanup_policy.as_str(),
        "delete" | "compact" | "compact,delete" | "delete,compact"
    ) {
        return Err(err(
            "kafka.topic_creation.cleanup_policy",
            "use \"delete\", \"compact\" or \"compact,delete\"",
        ));
    }
    if t.configs.contains_key("cleanup.policy") {
        return Err(err(
            "kafka.topic_creation.configs.\"cleanup.policy\"",
            "set kafka.topic_creation.cleanup_policy instead",
        ));
    }
    Ok(())
}

fn validate_pipeline(at: &str, p: &PipelineConfig) -> Result<(), BridgeError> {
    if !valid_name(&p.name, 200) {
        return Err(err(
            format!("{at}.name"),
            "use 1–200 characters from [A-Za-z0-9._-]",
        ));
    }
    if p.collection.is_some() && p.database.is_none() {
        return Err(err(
            format!("{at}.database"),
            "a collection needs its database",
        ));
    }
    for (key, value) in [("database", &p.database), ("collection", &p.collection)] {
        if value
            .as_deref()
            .is_some_and(|v| v.is_empty() || v.contains('\0'))
        {
            return Err(err(
                format!("{at}.{key}"),
                "must be a non-empty name; omit it for a wider scope",
            ));
        }
    }
    if let Some(text) = &p.pipeline {
        parse_stages(text).map_err(|reason| err(format!("{at}.pipeline"), reason))?;
    }
    for (key, topic) in [
        ("topic", &p.topic),
        ("dead_letter_topic", &p.dead_letter_topic),
    ] {
        if topic.as_deref().is_some_and(|t| !valid_name(t, 249)) {
            return Err(err(
                format!("{at}.{key}"),
                "Kafka topic names use 1–249 of [A-Za-z0-9._-]",
            ));
        }
        if topic
            .as_deref()
            .is_some_and(crate::kafka::topics::is_internal)
        {
            return Err(err(
                format!("{at}.{key}"),
                "names starting with __ are Kafka's and the bridge's internal topics: choose \
                 another name",
            ));
        }
    }
    if parse_start_at(&p.start_at).is_none() {
        return Err(err(
            format!("{at}.start_at"),
            "use \"now\" or an RFC 3339 time after 1970, e.g. \"2026-11-29T08:00:00Z\"",
        ));
    }
    snapshot_rules(p, at)?;
    let dead_letters = [
        ("on_oversize", p.on_oversize == OnOversize::DeadLetter),
        ("on_ambiguous", p.on_ambiguous == OnAmbiguous::DeadLetter),
    ];
    if let Some((policy, _)) = dead_letters.iter().find(|(_, uses)| *uses)
        && p.dead_letter_topic.is_none()
    {
        return Err(err(
            format!("{at}.dead_letter_topic"),
            format!(
                "required with {policy} = \"dead_letter\": name the topic for the records it \
                 diverts"
            ),
        ));
    }
    if p.value == ValueMode::Document && p.full_document == FullDocument::Default {
        return Err(err(
            format!("{at}.full_document"),
            "value = \"document\" needs a full document on updates: use \"update_lookup\", \
             \"when_available\" or \"required\" (otherwise an update would look like a delete)",
        ));
    }
    if p.dead_letter_topic.is_some() && !dead_letters.iter().any(|(_, uses)| *uses) {
        return Err(err(
            format!("{at}.dead_letter_topic"),
            "only used with on_oversize or on_ambiguous = \"dead_letter\"; remove it",
        ));
    }
    Ok(())
}

/// Settings that are valid but probably not what was meant.
pub(super) fn warnings(config: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let safe = config.message_timeout_ms();
    if let Some(Ok(timeout)) = config
        .kafka
        .properties
        .get("message.timeout.ms")
        .map(|v| v.to_string().parse::<u64>())
        && timeout > safe
    {
        out.push(format!(
            "kafka.properties.\"message.timeout.ms\" = {timeout} is above {safe} (lease_ms − \
             commit_interval_ms − 1000): an owner paused longer than its lease may, when it \
             resumes, deliver records it had queued after the new owner's newer ones of the same \
             documents. Leave it unset to keep per-document order across take-overs"
        ));
    }
    for (i, p) in config.pipelines.iter().enumerate() {
        let snapshots =
            p.snapshot == SnapshotMode::Initial || p.on_history_lost == OnHistoryLost::Snapshot;
        if snapshots && p.pipeline.is_some() {
            out.push(format!(
                "pipelines[{i}].pipeline: a snapshot mirrors the collection in a compacted topic \
                 only if these stages keep every change event of the copied namespaces, with its \
                 documentKey and fullDocument; a stage that drops or reshapes them leaves keys \
                 whose last record is not the document's current state"
            ));
        }
        if p.format == Format::Bson && p.json.is_some() {
            out.push(format!(
                "pipelines[{i}].json is ignored: values are BSON (format = \"bson\"); remove it"
            ));
        }
    }
    out
}
