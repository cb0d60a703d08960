//! Debezium's stored position as Kafka Connect gives it (`offsets import debezium`; the
//! feature's pieces are listed in `encode/debezium.rs`): the entries of KIP-875 JSON or of an
//! offsets topic's records, and the position the entry chosen (`partitions.rs`) holds, refused
//! with the reason and the way forward when importing it would leave a gap.
//!
//! Debezium's offset (`MongoDbOffsetContext`, 3.x): partition `{"server_id": <topic.prefix>}`,
//! offset `{"sec", "ord", "resume_token": <base64 of the BSON {_data: …}>, "lsid"?,
//! "txnNumber"?}`, plus `"initsync": true` while its initial snapshot runs and
//! `incremental_snapshot_*` while an incremental one runs.

use base64::Engine as _;
use bson::{Document, Timestamp, doc};
use serde_json::{Map, Value};

use crate::offsets::debezium::Imported;

/// A JSON object (a partition or an offset).
type JsonObject = Map<String, Value>;

/// One source partition's offset: the connector (when known), partition and offset.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Entry {
    pub(super) connector: Option<String>,
    pub(super) partition: Map<String, Value>,
    pub(super) offset: Map<String, Value>,
}

fn object(value: Value, what: &str) -> Result<Map<String, Value>, String> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(format!("{what} must be a JSON object, not {other}")),
    }
}

/// The entries of KIP-875 JSON: `{"offsets":[{"partition":{…},"offset":{…}}]}`.
pub(super) fn entries_from_rest(text: &str) -> Result<Vec<Entry>, String> {
    let json: Value = serde_json::from_str(text).map_err(|e| {
        format!("the offsets are not JSON ({e}): give the body of GET /connectors/NAME/offsets")
    })?;
    let mut top = object(json, "the offsets")?;
    let Some(Value::Array(items)) = top.remove("offsets") else {
        return Err("the offsets have no \"offsets\" array: give the body of \
                    GET /connectors/NAME/offsets (Kafka Connect 3.5 or later, KIP-875)"
            .to_owned());
    };
    items
        .into_iter()
        .map(|item| {
            let mut item = object(item, "an entry of \"offsets\"")?;
            let partition = object(item.remove("partition").unwrap_or(Value::Null), "partition")?;
            let offset = object(item.remove("offset").unwrap_or(Value::Null), "offset")?;
            Ok(Entry {
                connector: None,
                partition,
                offset,
            })
        })
        .collect()
}

/// The newest offset of each partition of `connector` among an offsets topic's records
/// (`["<connector>",{partition}]` → offset JSON, null deletes).
pub(super) fn entries_from_topic(
    records: &[(Vec<u8>, Option<Vec<u8>>)],
    connector: &str,
) -> Result<Vec<Entry>, String> {
    let mut found: Vec<(JsonObject, Option<JsonObject>)> = Vec::new();
    let mut others = std::collections::BTreeSet::new();
    for (key, value) in records {
        let Ok(Value::Array(key)) = serde_json::from_slice::<Value>(key) else {
            continue; // not a source offset (Connect's own records have other keys)
        };
        let (Some(Value::String(name)), Some(Value::Object(partition))) = (key.first(), key.get(1))
        else {
            continue;
        };
        if name != connector {
            others.insert(name.clone());
            continue;
        }
        let offset = match value {
            None => None,
            Some(bytes) => Some(object(
                serde_json::from_slice(bytes).map_err(|e| format!("an offset of {name}: {e}"))?,
                "an offset",
            )?),
        };
        found.retain(|(p, _)| p != partition);
        found.push((partition.clone(), offset));
    }
    let entries: Vec<Entry> = found
        .into_iter()
        .filter_map(|(partition, offset)| {
            Some(Entry {
                connector: Some(connector.to_owned()),
                partition,
                offset: offset?,
            })
        })
        .collect();
    if entries.is_empty() {
        let others: Vec<String> = others.into_iter().collect();
        return Err(format!(
            "the offsets topic holds no offset of connector {connector:?} (connectors with \
             offsets there: {}): name the Debezium connector as Connect knows it",
            if others.is_empty() {
                "none".to_owned()
            } else {
                others.join(", ")
            }
        ));
    }
    Ok(entries)
}

/// The position `entry` (of `server_id`, the one chosen: `partitions.rs`) holds, refused when
/// importing it would not continue exactly where Debezium stopped. Where it came from
/// (`importedFrom`) names the partition.
pub(super) fn imported(entry: &Entry, server_id: &str) -> Result<Imported, String> {
    refuse_incomplete(&entry.offset)?;
    let token = token(&entry.offset)?;
    let offset = bson::Bson::try_from(Value::Object(entry.offset.clone()))
        .map_err(|e| format!("the offset cannot be recorded: {e}"))?;
    let partition = bson::Bson::try_from(Value::Object(entry.partition.clone()))
        .map_err(|e| format!("the partition cannot be recorded: {e}"))?;
    let mut from = doc! { "system": "debezium", "serverId": server_id };
    if let Some(connector) = &entry.connector {
        from.insert("connector", connector);
    }
    from.insert("partition", partition);
    from.insert("offset", offset);
    from.insert("at", bson::DateTime::now());
    Ok(Imported {
        token,
        cluster_time: cluster_time(&entry.offset),
        from,
    })
}

/// The cluster time of the event an offset follows (`sec`, `ord`), when it names one: both
/// integers from 0 to 2^32 - 1 (Debezium writes `-1` for both before its first streamed event).
pub(super) fn cluster_time(offset: &Map<String, Value>) -> Option<Timestamp> {
    let int = |name: &str| {
        offset
            .get(name)
            .and_then(Value::as_i64)
            .and_then(|n| u32::try_from(n).ok())
    };
    Some(Timestamp {
        time: int("sec")?,
        increment: int("ord")?,
    })
}

/// Refuses an offset written while a snapshot of Debezium's was running.
pub(super) fn refuse_incomplete(offset: &Map<String, Value>) -> Result<(), String> {
    if offset.get("initsync") == Some(&Value::Bool(true)) {
        return Err(
            "the offset was written while Debezium's initial snapshot was running \
                    (\"initsync\": true): the documents it had not copied yet are in no topic, \
                    and the position is from before the copy, so importing it would leave a \
                    silent gap. Let the connector finish its snapshot and take its offsets \
                    again, or start the pipeline with snapshot = \"initial\" and no import (it \
                    copies the collection itself)"
                .to_owned(),
        );
    }
    if let Some(key) = offset
        .keys()
        .find(|k| k.starts_with("incremental_snapshot"))
    {
        return Err(format!(
            "the offset was written while an incremental snapshot of Debezium's was running \
             ({key}): the documents it had not copied yet would be missing. Let it finish \
             (or stop it with Debezium's stop-snapshot signal) and take the offsets again"
        ));
    }
    Ok(())
}

/// The resume token of an offset: `resume_token`, base64 of the BSON `{_data: …}`.
pub(super) fn token(offset: &Map<String, Value>) -> Result<Document, String> {
    let Some(Value::String(text)) = offset.get("resume_token") else {
        let at = match (offset.get("sec"), offset.get("ord")) {
            (Some(sec), Some(ord)) if sec.as_i64().is_some_and(|s| s > 0) => {
                format!(
                    ": offsets reset NAME --to-timestamp {sec}.{ord} starts at that event (it is published again)"
                )
            }
            _ => ", or start the pipeline with snapshot = \"initial\"".to_owned(),
        };
        return Err(format!(
            "the offset has no resume_token (only a time), so the bridge cannot resume exactly \
             after Debezium's last event. Instead{at}"
        ));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("resume_token is not base64 ({e})"))?;
    let token = Document::from_reader(bytes.as_slice())
        .map_err(|e| format!("resume_token is not a BSON document ({e})"))?;
    if token.get_str("_data").is_err() {
        return Err(format!(
            "resume_token {token} is not a change stream resume token ({{_data: \"…\"}})"
        ));
    }
    Ok(token)
}
