//! The JSON strings of Debezium's MongoDB connector, byte for byte (issue 21): the `after` and
//! `before` documents, `updatedFields`, `removedFields`, `truncatedArrays` and the record key.
//!
//! Pinned to **Debezium 3.6.3.Final** (MongoDB Java driver 5.9.2) on **OpenJDK 17**, Kafka
//! Connect's `JsonConverter`, and checked against that connector's records
//! (`bench/peers/capture_debezium.py`, replayed by `debezium/replay_tests.rs`). Another JDK
//! prints some doubles differently (JDK 19 changed `Double.toString`) and escapes by another
//! Unicode version; another driver may change the writers.
//!
//! Pure functions over raw BSON; no I/O, no configuration. The record envelope (`source`,
//! `op`, tombstones, schemas) is the encoder's business.
//!
//! # The three writers
//!
//! | string | function | mode | after a key | between members |
//! |---|---|---|---|---|
//! | `after`, `before` | [`after_json`] | legacy strict | `": "` | `,` |
//! | `updatedFields` | [`updated_fields_json`] | relaxed | `": "` | `, ` |
//! | the key's `id` | [`key_id`] | relaxed | `": "` | `,` |
//!
//! The separator holds for documents, arrays and type wrappers alike. Values by BSON type
//! (strict; relaxed where it differs):
//!
//! | type | strict | relaxed |
//! |---|---|---|
//! | double | `7.0` `1.0E+20` `-0.0`; bare `NaN` `Infinity` | `{"$numberDouble": "NaN"}` |
//! | int32 | `42` | |
//! | int64 | `{"$numberLong": "42"}` | `42` |
//! | decimal128 | `{"$numberDecimal": "1.50"}` (every NaN is `NaN`) | |
//! | date | `{"$date": 1714979289123}` | `{"$date": "2024-05-06T07:08:09.12Z"}` (1) |
//! | string | Java-escaped (`java.rs`) | |
//! | ObjectId | `{"$oid": "65a0…01"}` | |
//! | binary | `{"$binary": "AQI=","$type": "8F"}` (2) | `{"$binary": {"base64": …,"subType": "8F"}}` |
//! | regex | `{"$regex": "a","$options": "imx"}` (3) | `{"$regularExpression": {"pattern": …,"options": …}}` |
//! | timestamp | `{"$timestamp": {"t": 5,"i": 6}}` | |
//! | boolean, null | `true`, `null` | |
//! | min/max key | `{"$minKey": 1}`, `{"$maxKey": 1}` | |
//! | undefined | `{"$undefined": true}` | |
//! | symbol | `{"$symbol": "s"}` | |
//! | code | `{"$code": "c"}`, with scope `{"$code": "c","$scope": {…}}` | |
//! | DBPointer | `{"$ref": "db.c","$id": {"$oid": "…"}}` | |
//! | document, array | `{"k": v,…}` `{}`, `[v,…]` `[]` | |
//!
//! (1) ISO-8601 from 1970 through 9999, the fraction without trailing zeros and no point
//! when it is zero; other instants `{"$date": {"$numberLong": "-1"}}`. (2) Subtype in upper-case
//! hex; subtype 2 without its inner length. (3) Options sorted by UTF-16 unit.
//!
//! # Invariants
//!
//! * Every function is pure and deterministic; output depends only on the BSON bytes.
//! * Malformed BSON, invalid UTF-8 and nesting deeper than [`crate::extjson::MAX_DEPTH`] are
//!   errors ([`DebeziumJsonError`]), never a panic. (The Java driver would write U+FFFD for
//!   invalid UTF-8; MongoDB does not store it from a conforming driver.)
//! * The strict writer's output is JSON except for non-finite doubles, which Debezium writes
//!   as the bare words `NaN`, `Infinity` and `-Infinity`.

use bson::{RawBsonRef, RawDocument};

mod big;
mod java;
mod java_chars;
mod java_double;
#[cfg(test)]
mod key_tests;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors_tests;
mod writer;

pub use java::{java_double_to_string, write_jackson_string};

/// The Debezium release whose bytes this module reproduces (`source.version` in its records).
pub const DEBEZIUM_VERSION: &str = "3.6.3.Final";

/// The Java feature release it was checked on: `Double.toString` and the escaping classes
/// depend on it.
pub const JAVA_FEATURE_VERSION: u32 = 17;

/// Why a Debezium JSON string could not be written.
#[derive(Debug, thiserror::Error)]
pub enum DebeziumJsonError {
    /// The BSON is malformed (lengths, terminators, element types, UTF-8).
    #[error("malformed BSON")]
    Bson(#[source] bson::raw::Error),
    /// A value's internal layout is inconsistent.
    #[error("malformed BSON: {0}")]
    Malformed(&'static str),
    /// Documents and arrays nest deeper than the bridge accepts.
    #[error("BSON nesting deeper than {} levels", crate::extjson::MAX_DEPTH)]
    TooDeep,
    /// The document key has no `_id`.
    #[error("the document key has no _id")]
    MissingId,
    /// An `updateDescription` field does not have the change stream's shape.
    #[error("updateDescription.{field}: {reason}")]
    UpdateDescription {
        /// `removedFields` or `truncatedArrays`.
        field: &'static str,
        /// What was expected.
        reason: &'static str,
    },
}

type Res<T = ()> = Result<T, DebeziumJsonError>;

/// Appends the `after` (or `before`) string of a document, as Debezium's legacy strict writer
/// prints it.
///
/// # Errors
///
/// See [`DebeziumJsonError`]; on error `out` may hold a partial string.
pub fn write_after_json(out: &mut String, doc: &RawDocument) -> Res {
    writer::write_document(out, doc, writer::STRICT, 1)
}

/// The `after` (or `before`) string of a document.
///
/// ```
/// let doc = bson::rawdoc! { "_id": 1, "n": 7_i64, "x": 1e20, "s": "é😀" };
/// assert_eq!(
///     mongo_kafka_bridge::extjson::debezium::after_json(&doc).unwrap(),
///     r#"{"_id": 1,"n": {"$numberLong": "7"},"x": 1.0E+20,"s": "é\ud83d\ude00"}"#
/// );
/// ```
///
/// # Errors
///
/// See [`DebeziumJsonError`].
pub fn after_json(doc: &RawDocument) -> Res<String> {
    let mut out = String::with_capacity(doc.as_bytes().len() * 3 / 2);
    write_after_json(&mut out, doc)?;
    Ok(out)
}

/// Appends the `updatedFields` string of an `updateDescription.updatedFields` document.
///
/// # Errors
///
/// See [`DebeziumJsonError`]; on error `out` may hold a partial string.
pub fn write_updated_fields_json(out: &mut String, updated_fields: &RawDocument) -> Res {
    writer::write_document(out, updated_fields, writer::RELAXED_SPACED, 1)
}

/// The `updatedFields` string (relaxed writer, `", "` between members).
///
/// ```
/// let updated = bson::rawdoc! { "n": 7_i64, "when": bson::DateTime::from_millis(-1) };
/// assert_eq!(
///     mongo_kafka_bridge::extjson::debezium::updated_fields_json(&updated).unwrap(),
///     r#"{"n": 7, "when": {"$date": {"$numberLong": "-1"}}}"#
/// );
/// ```
///
/// # Errors
///
/// See [`DebeziumJsonError`].
pub fn updated_fields_json(updated_fields: &RawDocument) -> Res<String> {
    let mut out = String::with_capacity(updated_fields.as_bytes().len() * 3 / 2);
    write_updated_fields_json(&mut out, updated_fields)?;
    Ok(out)
}

/// The value's `removedFields` as JSON text: `null` when the change event's
/// `updateDescription` has none (absent or empty), else the names as a JSON array of strings
/// in the event's order (`["a.b","x"]`, Jackson's escaping).
///
/// # Errors
///
/// [`DebeziumJsonError::UpdateDescription`] when `removedFields` is not an array of strings.
pub fn removed_fields_json(update_description: &RawDocument) -> Res<String> {
    const FIELD: &str = "removedFields";
    let Some(array) = optional_array(update_description, FIELD)? else {
        return Ok("null".to_owned());
    };
    let mut out = String::from("[");
    for (index, name) in array.into_iter().enumerate() {
        let name = name.map_err(DebeziumJsonError::Bson)?;
        let Some(name) = name.as_str() else {
            return Err(shape(FIELD, "an array of strings"));
        };
        if index > 0 {
            out.push(',');
        }
        write_jackson_string(&mut out, name);
    }
    out.push(']');
    Ok(out)
}

/// The value's `truncatedArrays` as JSON text: `null` when there are none (absent or empty),
/// else `[{"field":"arr","size":2}]` from the event's `{field, newSize}` entries (the struct of
/// Debezium's schema `…changestream.truncatedarray`).
///
/// # Errors
///
/// [`DebeziumJsonError::UpdateDescription`] when an entry lacks a string `field` or an int32
/// `newSize`.
pub fn truncated_arrays_json(update_description: &RawDocument) -> Res<String> {
    const FIELD: &str = "truncatedArrays";
    let Some(array) = optional_array(update_description, FIELD)? else {
        return Ok("null".to_owned());
    };
    let mut out = String::from("[");
    for (index, entry) in array.into_iter().enumerate() {
        let entry = entry.map_err(DebeziumJsonError::Bson)?;
        let entry = entry
            .as_document()
            .ok_or_else(|| shape(FIELD, "an array of documents"))?;
        let name = entry
            .get_str("field")
            .map_err(|_| shape(FIELD, "a string `field`"))?;
        let size = entry
            .get_i32("newSize")
            .map_err(|_| shape(FIELD, "an int32 `newSize`"))?;
        if index > 0 {
            out.push(',');
        }
        out.push_str("{\"field\":");
        write_jackson_string(&mut out, name);
        out.push_str(",\"size\":");
        out.push_str(&size.to_string());
        out.push('}');
    }
    out.push(']');
    Ok(out)
}

/// The key's `id` string: the `_id` of `document_key` (a change event's `documentKey`, or the
/// document itself) in the relaxed writer: `1`, `"alpha"` (with its quotes),
/// `{"$oid": "…"}`, `{"region": "eu","n": 1}`.
///
/// # Errors
///
/// [`DebeziumJsonError::MissingId`] without an `_id`; otherwise as [`after_json`].
pub fn key_id(document_key: &RawDocument) -> Res<String> {
    let id = document_key
        .get("_id")
        .map_err(DebeziumJsonError::Bson)?
        .ok_or(DebeziumJsonError::MissingId)?;
    let mut out = String::new();
    write_id(&mut out, id)?;
    Ok(out)
}

/// The whole key record as Kafka's `JsonConverter` writes it with schemas off:
/// `{"id":"…"}`, the [`key_id`] string quoted by [`write_jackson_string`].
///
/// ```
/// let key = bson::rawdoc! { "_id": "alpha" };
/// assert_eq!(
///     mongo_kafka_bridge::extjson::debezium::key_json(&key).unwrap(),
///     r#"{"id":"\"alpha\""}"#
/// );
/// ```
///
/// # Errors
///
/// As [`key_id`].
pub fn key_json(document_key: &RawDocument) -> Res<String> {
    let id = key_id(document_key)?;
    let mut out = String::with_capacity(id.len() + 16);
    out.push_str("{\"id\":");
    write_jackson_string(&mut out, &id);
    out.push('}');
    Ok(out)
}

fn write_id(out: &mut String, id: RawBsonRef<'_>) -> Res {
    writer::write_value(out, id, writer::RELAXED_KEY, 0)
}

/// The array at `field`, or `None` when it is absent, null or empty.
fn optional_array<'a>(
    update_description: &'a RawDocument,
    field: &'static str,
) -> Res<Option<&'a bson::RawArray>> {
    match update_description
        .get(field)
        .map_err(DebeziumJsonError::Bson)?
    {
        None | Some(RawBsonRef::Null) => Ok(None),
        Some(RawBsonRef::Array(array)) if array.into_iter().next().is_none() => Ok(None),
        Some(RawBsonRef::Array(array)) => Ok(Some(array)),
        Some(_) => Err(shape(field, "an array")),
    }
}

fn shape(field: &'static str, reason: &'static str) -> DebeziumJsonError {
    DebeziumJsonError::UpdateDescription { field, reason }
}
