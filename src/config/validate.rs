//! Validation rules for [`Config`]: the sections' and each pipeline's; the
//! rules of `[kafka.properties]`, of a group, of exactly-once, of a snapshot, of the
//! Debezium form and of pre-images are in `kafka.rs`, `group.rs`, `exactly_once.rs`,
//! `snapshot.rs`, `debezium.rs` and `images.rs` beside this one, called from here.
//!
//! Each rule returns a [`BridgeError::Config`] whose `field` is the TOML path and whose `reason`
//! says what to write instead. Rules that protect the delivery guarantees follow librdkafka's
//! `CONFIGURATION.md` (idempotent producer: `acks=all`, `max.in.flight.requests.per.connection`
//! ≤ 5) and the Java clients' key → partition mapping (`murmur2_random`).

use std::collections::HashSet;

use super::names::is_internal;
use super::{
    Config, Format, OnAmbiguous, OnHistoryLost, OnOversize, PipelineConfig, SnapshotMode, StartAt,
};
use crate::error::BridgeError;

impl Config {
    /// Checks every rule a well-typed file can still break; see `config/validate.rs`.
    pub fn validate(&self) -> Result<(), BridgeError> {
        validate(self)
    }

    /// Settings that are valid but probably not what was meant, one sentence each naming the
    /// field (`run` logs them at start, `check` prints them as ⚠).
    pub fn warnings(&self) -> Vec<String> {
        warnings(self)
    }
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

/// Why `stages` would remove what the bridge needs from change events: `documentKey` (the
/// record key of every document event) or `_id` (the resume token), by an exclusion or an
/// inclusion `$project`, an `$unset`, or a `$replaceRoot`/`$replaceWith`. `None` when no stage
/// does (stages that only filter or add fields). The run would otherwise fail at the first
/// event (MongoDB answers `ChangeStreamFatalError` for a removed `_id`; a missing
/// `documentKey` fails the encoding).
fn drops_needed_fields(stages: &[bson::Document]) -> Option<String> {
    use bson::Bson;
    let under = |path: &str, field: &str| {
        path == field || path.strip_prefix(field).is_some_and(|r| r.starts_with('.'))
    };
    let needed = |path: &str| under(path, "documentKey") || under(path, "_id");
    for (i, stage) in stages.iter().enumerate() {
        let (name, body) = stage.iter().next()?;
        let dropped = match (name.as_str(), body) {
            ("$replaceRoot" | "$replaceWith", _) => Some("the whole event".to_owned()),
            ("$unset", Bson::String(path)) => needed(path).then(|| path.clone()),
            ("$unset", Bson::Array(paths)) => paths
                .iter()
                .filter_map(Bson::as_str)
                .find(|p| needed(p))
                .map(str::to_owned),
            ("$project", Bson::Document(spec)) => {
                let excluded = |v: &Bson| {
                    matches!(v, Bson::Boolean(false))
                        || v.as_i32() == Some(0)
                        || v.as_i64() == Some(0)
                        || v.as_f64() == Some(0.0)
                };
                let inclusion = spec.iter().any(|(k, v)| k != "_id" && !excluded(v));
                let kept = spec.keys().any(|k| under(k, "documentKey"));
                spec.iter()
                    .find(|(k, v)| excluded(v) && needed(k))
                    .map(|(k, _)| k.clone())
                    .or_else(|| (inclusion && !kept).then(|| "documentKey".to_owned()))
            }
            _ => None,
        };
        if let Some(field) = dropped {
            return Some(format!(
                "stage {i} ({name}) removes {field} from the change events; the bridge keys \
                 every record by documentKey and resumes by _id: keep both (filter with $match, \
                 trim fullDocument with $project: {{\"fullDocument.field\": 0}})"
            ));
        }
    }
    None
}

fn valid_name(name: &str, max: usize) -> bool {
    !name.is_empty()
        && name.len() <= max
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Runs every rule.
fn validate(config: &Config) -> Result<(), BridgeError> {
    let uri = config.mongodb.uri.expose();
    if !(uri.starts_with("mongodb://") || uri.starts_with("mongodb+srv://")) {
        return Err(BridgeError::config(
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
            return Err(BridgeError::config(field, "must be non-empty"));
        }
    }
    if config.kafka.bootstrap_servers.trim().is_empty() {
        return Err(BridgeError::config(
            "kafka.bootstrap_servers",
            "set it to host:port[,host:port]",
        ));
    }
    super::kafka::validate_durations(config)?;
    validate_bridge(config)?;
    super::kafka::check_properties(config)?;
    super::group::validate(config)?;
    super::exactly_once::validate(config)?;
    if config
        .metrics
        .listen
        .parse::<std::net::SocketAddr>()
        .is_err()
    {
        return Err(BridgeError::config(
            "metrics.listen",
            "must be host:port with an IP address, e.g. 0.0.0.0:9464",
        ));
    }
    let history = config.metrics.history_interval_ms;
    if history != 0 && history < 1000 {
        return Err(BridgeError::config(
            "metrics.history_interval_ms",
            format!("{history} is too often: use 0 (off) or at least 1000"),
        ));
    }
    if config.pipelines.is_empty() {
        return Err(BridgeError::config(
            "pipelines",
            "add at least one [[pipelines]] entry",
        ));
    }
    if is_internal(&config.kafka.topic_prefix) {
        return Err(BridgeError::config(
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
            return Err(BridgeError::config(
                format!("{at}.collection"),
                format!(
                    "{}.{} is the bridge's own offsets collection: watch another collection, or \
                     move the offsets (mongodb.offsets_database / offsets_collection)",
                    m.offsets_database, m.offsets_collection
                ),
            ));
        }
        if !names.insert(p.name.as_str()) {
            return Err(BridgeError::config(
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
            return Err(BridgeError::config(field, "must be greater than 0"));
        }
    }
    let min_lease = b.commit_interval_ms.saturating_mul(3).max(1000);
    if b.lease_ms < min_lease {
        return Err(BridgeError::config(
            "bridge.lease_ms",
            format!(
                "{} ms leaves too few renewals: use at least {min_lease} (3 × commit_interval_ms, \
                 1000 at least)",
                b.lease_ms
            ),
        ));
    }
    if b.liveness_timeout_ms < 2000 {
        return Err(BridgeError::config(
            "bridge.liveness_timeout_ms",
            format!(
                "{} ms is shorter than a pipeline loop's tick: use at least 2000",
                b.liveness_timeout_ms
            ),
        ));
    }
    if b.encode_threads > 64 {
        return Err(BridgeError::config(
            "bridge.encode_threads",
            format!(
                "{} is more than a pipeline can use (it reads one stream): use at most 64, \
                 or 0 (the default: none)",
                b.encode_threads
            ),
        ));
    }
    if b.worker_threads > 1024 {
        return Err(BridgeError::config(
            "bridge.worker_threads",
            format!(
                "{} threads is more than any machine needs: use 0 (one per pipeline)",
                b.worker_threads
            ),
        ));
    }
    Ok(())
}

fn validate_pipeline(at: &str, p: &PipelineConfig) -> Result<(), BridgeError> {
    if !valid_name(&p.name, 200) {
        return Err(BridgeError::config(
            format!("{at}.name"),
            "use 1–200 characters from [A-Za-z0-9._-]",
        ));
    }
    if p.collection.is_some() && p.database.is_none() {
        return Err(BridgeError::config(
            format!("{at}.database"),
            "a collection needs its database",
        ));
    }
    for (key, value) in [("database", &p.database), ("collection", &p.collection)] {
        if value
            .as_deref()
            .is_some_and(|v| v.is_empty() || v.contains('\0'))
        {
            return Err(BridgeError::config(
                format!("{at}.{key}"),
                "must be a non-empty name; omit it for a wider scope",
            ));
        }
    }
    if let Some(text) = &p.pipeline {
        let stages = parse_stages(text)
            .map_err(|reason| BridgeError::config(format!("{at}.pipeline"), reason))?;
        if let Some(reason) = drops_needed_fields(&stages) {
            return Err(BridgeError::config(format!("{at}.pipeline"), reason));
        }
    }
    for (key, topic) in [
        ("topic", &p.topic),
        ("dead_letter_topic", &p.dead_letter_topic),
    ] {
        if topic.as_deref().is_some_and(|t| !valid_name(t, 249)) {
            return Err(BridgeError::config(
                format!("{at}.{key}"),
                "Kafka topic names use 1–249 of [A-Za-z0-9._-]",
            ));
        }
        if topic.as_deref().is_some_and(is_internal) {
            return Err(BridgeError::config(
                format!("{at}.{key}"),
                "names starting with __ are Kafka's and the bridge's internal topics: choose \
                 another name",
            ));
        }
    }
    if parse_start_at(&p.start_at).is_none() {
        return Err(BridgeError::config(
            format!("{at}.start_at"),
            "use \"now\" or an RFC 3339 time after 1970, e.g. \"2026-11-29T08:00:00Z\"",
        ));
    }
    super::routing::rules(p, at)?; // first: its refusal of a snapshot names the way out
    super::snapshot::snapshot_rules(p, at)?;
    super::debezium::rules(p, at)?;
    super::images::rules(p, at).and_then(|()| super::heartbeat::rules(p, at))?;
    super::fields::rules(p, &format!("{at}."))?;
    super::unwrap::rules(p, at)?;
    let dead_letters = [
        ("on_oversize", p.on_oversize == OnOversize::DeadLetter),
        ("on_ambiguous", p.on_ambiguous == OnAmbiguous::DeadLetter),
    ];
    if let Some((policy, _)) = dead_letters.iter().find(|(_, uses)| *uses)
        && p.dead_letter_topic.is_none()
    {
        return Err(BridgeError::config(
            format!("{at}.dead_letter_topic"),
            format!(
                "required with {policy} = \"dead_letter\": name the topic for the records it \
                 diverts"
            ),
        ));
    }
    if p.dead_letter_topic.is_some() && !dead_letters.iter().any(|(_, uses)| *uses) {
        return Err(BridgeError::config(
            format!("{at}.dead_letter_topic"),
            "only used with on_oversize or on_ambiguous = \"dead_letter\"; remove it",
        ));
    }
    Ok(())
}

/// Settings that are valid but probably not what was meant.
fn warnings(config: &Config) -> Vec<String> {
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
        out.extend(super::routing::warnings(i, p));
        if p.format == Format::Bson && p.json.is_some() {
            out.push(format!(
                "pipelines[{i}].json is ignored: values are BSON (format = \"bson\"); remove it"
            ));
        }
    }
    out
}
