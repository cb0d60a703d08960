//! The headers of a record: the change event's facts a consumer can read without decoding the
//! value (README, "Record format").
//!
//! Invariant: every record carries `mongo.format`, naming how its value is encoded
//! (`json-relaxed`, `json-canonical` or `bson`), so a consumer never has to guess, also when one
//! event of a JSON pipeline was diverted to BSON (`on_ambiguous = "bson"`).

use std::borrow::Cow;
use std::io::Write as _;

use bson::{RawBsonRef, RawDocument};

use crate::config::Format;
use crate::event::ChangeEventView;
use crate::extjson::{self, JsonMode};

/// Debezium's own header names (3.x: the task's context on every record), written first in
/// the Debezium form (`debezium.rs`).
pub(crate) const CONTEXT_HEADERS: [&str; 4] = [
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

/// Every header name the bridge writes.
pub(crate) const HEADER_NAMES: [&str; 12] = [
    "mongo.operation_type",
    "mongo.namespace",
    "mongo.resume_token",
    "mongo.cluster_time",
    "mongo.wall_time",
    "mongo.txn_number",
    "mongo.lsid",
    "mongo.pipeline",
    "mongo.format",
    "mongo.error",
    "mongo.snapshot_id",
    "mongo.read_time",
];

/// `operationType` values MongoDB documents for change events
/// (<https://www.mongodb.com/docs/manual/reference/change-events/>); the common ones first.
const OPERATION_TYPES: [&str; 15] = [
    "insert",
    "update",
    "replace",
    "delete",
    "drop",
    "rename",
    "dropDatabase",
    "invalidate",
    "create",
    "createIndexes",
    "dropIndexes",
    "modify",
    "shardCollection",
    "refineCollectionShardKey",
    "reshardCollection",
];

/// `operation_type` without an allocation when it is one MongoDB documents.
pub(crate) fn operation_type(operation_type: &str) -> Cow<'static, str> {
    match OPERATION_TYPES
        .iter()
        .find(|known| **known == operation_type)
    {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(operation_type.to_owned()),
    }
}

/// The `'static` spelling of a header name the bridge writes, if `name` is one (Debezium's
/// context headers of the Debezium form included).
pub(crate) fn header_name(name: &str) -> Option<&'static str> {
    HEADER_NAMES
        .iter()
        .chain(&CONTEXT_HEADERS)
        .copied()
        .find(|n| *n == name)
}

/// The `mongo.format` value of a value encoded as `format` (in `json` mode for JSON).
pub(crate) fn format_header(format: Format, json: JsonMode) -> &'static [u8] {
    match (format, json) {
        (Format::Bson, _) => b"bson",
        (Format::Json, JsonMode::Relaxed) => b"json-relaxed",
        (Format::Json, JsonMode::Canonical) => b"json-canonical",
    }
}

/// The headers of one event of `pipeline`, `mongo.format` last. Each value is built in one
/// right-sized allocation (this runs for every event; see BENCHMARKS.md).
pub(super) fn headers_for(
    pipeline: &str,
    view: &ChangeEventView<'_>,
    token: &RawDocument,
    format: &'static [u8],
) -> Result<Vec<(&'static str, Vec<u8>)>, extjson::ExtJsonError> {
    let mut headers = Vec::with_capacity(9);
    headers.push((
        "mongo.operation_type",
        view.operation_type.as_bytes().to_vec(),
    ));
    if let Some(db) = view.db {
        let coll = view.coll.unwrap_or("");
        let mut ns = Vec::with_capacity(db.len() + 1 + coll.len());
        ns.extend_from_slice(db.as_bytes());
        if view.coll.is_some() {
            ns.push(b'.');
            ns.extend_from_slice(coll.as_bytes());
        }
        headers.push(("mongo.namespace", ns));
    }
    let token_text = match token.get("_data") {
        Ok(Some(RawBsonRef::String(data))) => data.as_bytes().to_vec(),
        _ => extjson::to_string(token, JsonMode::Canonical)?.into_bytes(),
    };
    headers.push(("mongo.resume_token", token_text));
    if let Some(ts) = view.cluster_time {
        let mut text = Vec::with_capacity(21);
        write!(text, "{}.{}", ts.time, ts.increment).expect("writing to a Vec cannot fail");
        headers.push(("mongo.cluster_time", text));
    }
    if let Some(millis) = view.wall_time_ms {
        let mut text = Vec::with_capacity(24);
        if extjson::write_rfc3339_millis(&mut text, millis) {
            headers.push(("mongo.wall_time", text));
        } else if let Some(time) = chrono::DateTime::from_timestamp_millis(millis) {
            // Before 1970 or after year 9999: chrono spells the year with a sign.
            let text = time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            headers.push(("mongo.wall_time", text.into_bytes()));
        }
    }
    if let Some(txn) = view.txn_number {
        headers.push(("mongo.txn_number", txn.to_string().into_bytes()));
    }
    if let Some(lsid) = view.lsid {
        headers.push((
            "mongo.lsid",
            extjson::to_string(lsid, JsonMode::Canonical)?.into_bytes(),
        ));
    }
    headers.push(("mongo.pipeline", pipeline.as_bytes().to_vec()));
    headers.push(("mongo.format", format.to_vec()));
    Ok(headers)
}

/// Sets the `mongo.format` header of `headers` (pushed last by [`headers_for`]) to `format`.
pub(crate) fn set_format(headers: &mut [(&'static str, Vec<u8>)], format: &'static [u8]) {
    if let Some((_, value)) = headers.iter_mut().rev().find(|(n, _)| *n == "mongo.format") {
        *value = format.to_vec();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_compatibility_policy_lists_every_header_name() {
        let policy = include_str!("../../docs/COMPATIBILITY.md");
        for name in super::HEADER_NAMES {
            assert!(
                policy.contains(&format!("`{name}`")),
                "docs/COMPATIBILITY.md does not list the header {name}"
            );
        }
    }
}
