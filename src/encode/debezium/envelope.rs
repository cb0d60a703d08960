//! The value of a Debezium record as Kafka Connect's JSON converter writes it (schemas off):
//! `{"before","after","updateDescription","source","op","ts_ms","transaction"}`, each field
//! always present, in that order, compact; the document strings embedded as JSON strings
//! (Jackson's escaping).
//!
//! `source` (Debezium's `io.debezium.connector.mongo.Source`, in its field order):
//! `{"version","connector":"mongodb","name","ts_ms","snapshot","db","sequence":null,"ts_us",
//! "ts_ns","collection","ord","lsid","txnNumber","wallTime"}`. Its time is the event's
//! `wallTime` (else its `clusterTime` seconds) for a change event, the read time for a copy;
//! `ts_us` and `ts_ns` are that instant in micro- and nanoseconds (Java's `Instant`: whole
//! seconds, then the fraction).

use std::fmt::{Display, Write};

use bson::RawDocument;

use crate::extjson::debezium::{
    DEBEZIUM_VERSION, DebeziumJsonError, removed_fields_json, truncated_arrays_json,
    write_after_json, write_jackson_string, write_updated_fields_json,
};

/// What a record's value says of its document.
pub(super) struct Parts<'a> {
    /// `fullDocumentBeforeChange` (pre-images), written as `before`.
    pub before: Option<&'a RawDocument>,
    /// `fullDocument` (or the copied document), written as `after`.
    pub after: Option<&'a RawDocument>,
    /// `updateDescription` of an update (not of a replace).
    pub update: Option<&'a RawDocument>,
    /// `c`, `u`, `d` or `r`.
    pub op: &'static str,
}

/// A record's `source` block.
pub(super) struct Source<'a> {
    /// `topic.prefix`.
    pub server: &'a str,
    /// Database.
    pub db: &'a str,
    /// Collection.
    pub coll: &'a str,
    /// The instant `ts_ms`, `ts_us` and `ts_ns` stand for: (seconds, nanoseconds).
    pub time: (i64, u32),
    /// `"false"`, `"true"` or `"last"`.
    pub snapshot: &'static str,
    /// The `clusterTime` increment, -1 for a copy (Java's `int`).
    pub ord: i32,
    /// The event's `lsid` (in a transaction).
    pub lsid: Option<&'a RawDocument>,
    /// The event's `txnNumber` (in a transaction).
    pub txn_number: Option<i64>,
    /// The event's `wallTime` in ms, when it has one (not 0).
    pub wall_time: Option<i64>,
}

impl Source<'_> {
    /// A change event's instant: its `wallTime` in ms, else its `clusterTime` seconds (Java's
    /// `int`, as Debezium reads them).
    pub(super) fn event_time(wall_time_ms: Option<i64>, cluster_seconds: u32) -> (i64, u32) {
        match wall_time_ms.filter(|ms| *ms != 0) {
            Some(ms) => {
                let nanos = u32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0);
                (ms.div_euclid(1000), nanos)
            }
            None => (i64::from(cluster_seconds as i32), 0),
        }
    }
}

/// The value's JSON text; `now` is the top-level `ts_ms` (processing time).
///
/// Errors: a document the writers refuse ([`DebeziumJsonError`]).
pub(super) fn value(
    parts: &Parts<'_>,
    source: &Source<'_>,
    now: (i64, u32),
) -> Result<String, DebeziumJsonError> {
    let size = parts.after.map_or(0, |d| d.as_bytes().len() * 2)
        + parts.before.map_or(0, |d| d.as_bytes().len() * 2)
        + 512;
    let mut out = String::with_capacity(size);
    let mut scratch = String::new();
    out.push_str("{\"before\":");
    document(&mut out, &mut scratch, parts.before)?;
    out.push_str(",\"after\":");
    document(&mut out, &mut scratch, parts.after)?;
    out.push_str(",\"updateDescription\":");
    match parts.update {
        Some(update) => update_description(&mut out, &mut scratch, update)?,
        None => out.push_str("null"),
    }
    out.push_str(",\"source\":");
    write_source(&mut out, &mut scratch, source)?;
    out.push_str(",\"op\":\"");
    out.push_str(parts.op);
    out.push_str("\",\"ts_ms\":");
    push_int(&mut out, millis(now));
    out.push_str(",\"transaction\":null}");
    Ok(out)
}

/// `doc` as the strict writer's string, quoted; `null` without one.
fn document(
    out: &mut String,
    scratch: &mut String,
    doc: Option<&RawDocument>,
) -> Result<(), DebeziumJsonError> {
    let Some(doc) = doc else {
        out.push_str("null");
        return Ok(());
    };
    scratch.clear();
    write_after_json(scratch, doc)?;
    write_jackson_string(out, scratch);
    Ok(())
}

/// `{"removedFields":…,"updatedFields":"…","truncatedArrays":…}`.
fn update_description(
    out: &mut String,
    scratch: &mut String,
    update: &RawDocument,
) -> Result<(), DebeziumJsonError> {
    out.push_str("{\"removedFields\":");
    out.push_str(&removed_fields_json(update)?);
    out.push_str(",\"updatedFields\":");
    match update
        .get("updatedFields")
        .map_err(DebeziumJsonError::Bson)?
    {
        Some(bson::RawBsonRef::Document(fields)) => {
            scratch.clear();
            write_updated_fields_json(scratch, fields)?;
            write_jackson_string(out, scratch);
        }
        _ => out.push_str("null"),
    }
    out.push_str(",\"truncatedArrays\":");
    out.push_str(&truncated_arrays_json(update)?);
    out.push('}');
    Ok(())
}

fn millis((secs, nanos): (i64, u32)) -> i64 {
    secs.saturating_mul(1000)
        .saturating_add(i64::from(nanos / 1_000_000))
}

/// The `source` block.
fn write_source(
    out: &mut String,
    scratch: &mut String,
    s: &Source<'_>,
) -> Result<(), DebeziumJsonError> {
    let (secs, nanos) = s.time;
    out.push_str("{\"version\":\"");
    out.push_str(DEBEZIUM_VERSION);
    out.push_str("\",\"connector\":\"mongodb\",\"name\":");
    write_jackson_string(out, s.server);
    out.push_str(",\"ts_ms\":");
    push_int(out, millis(s.time));
    out.push_str(",\"snapshot\":\"");
    out.push_str(s.snapshot);
    out.push_str("\",\"db\":");
    write_jackson_string(out, s.db);
    out.push_str(",\"sequence\":null,\"ts_us\":");
    let micros = secs
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(nanos / 1000));
    push_int(out, micros);
    out.push_str(",\"ts_ns\":");
    let nanos = secs
        .saturating_mul(1_000_000_000)
        .saturating_add(i64::from(nanos));
    push_int(out, nanos);
    out.push_str(",\"collection\":");
    write_jackson_string(out, s.coll);
    out.push_str(",\"ord\":");
    push_int(out, s.ord);
    out.push_str(",\"lsid\":");
    document(out, scratch, s.lsid)?;
    out.push_str(",\"txnNumber\":");
    match s.txn_number {
        Some(n) => push_int(out, n),
        None => out.push_str("null"),
    }
    out.push_str(",\"wallTime\":");
    match s.wall_time {
        Some(ms) => push_int(out, ms),
        None => out.push_str("null"),
    }
    out.push('}');
    Ok(())
}

/// Appends an integer's decimal digits to `out` without an intermediate `String` (per record).
fn push_int(out: &mut String, n: impl Display) {
    // Writing to a String cannot fail.
    let _ = write!(out, "{n}");
}
