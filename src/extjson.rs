//! Raw BSON → compact [MongoDB Extended JSON v2] transcoder.
//!
//! This is the hot path that turns every change event into the bytes published to Kafka, so
//! it walks the BSON bytes of a [`bson::RawDocument`] directly and appends JSON to a caller
//! supplied `Vec<u8>`: no intermediate `bson::Document`, no `serde_json::Value`, no per-field
//! `String`.
//!
//! Two output formats are supported ([`JsonMode`]), both as the Extended JSON v2
//! specification's conversion table defines them:
//!
//! * [`JsonMode::Canonical`]: every BSON type keeps its type wrapper (`{"$numberInt":"1"}`,
//!   `{"$date":{"$numberLong":"…"}}`, …), so the output parses back to identical BSON.
//! * [`JsonMode::Relaxed`]: Int32/Int64 become plain JSON integers, finite doubles plain JSON
//!   numbers, and datetimes in years 1970..=9999 an ISO-8601 string; everything else is as in
//!   canonical mode.
//!
//! # Invariants
//!
//! * The output is always valid UTF-8 and valid JSON (RFC 8259), compact (no whitespace).
//! * Keys are emitted in the server's field order; array index keys stored in the BSON are
//!   ignored (degenerate array keys do not change the output).
//! * Integers, decimals and dates never go through `f64`: Int64 values print digit-exact and
//!   Decimal128 values print with the Decimal128 specification's to-string algorithm.
//! * Finite doubles print with the shortest representation that round-trips and always read
//!   as a non-integer: `1.0`, `-0.0`, `0.0001`, `1.2345678921232E+18` (plain notation for
//!   decimal exponents in `-4..16`, otherwise `d.dddE±x`).
//! * Invalid UTF-8 inside BSON strings, keys, code, symbols, regexes and DBPointer namespaces
//!   is **replaced** by U+FFFD (one per maximal invalid sequence, like
//!   [`String::from_utf8_lossy`]) by [`write_document`]; [`write_document_strict`] refuses it
//!   ([`ExtJsonError::InvalidUtf8`]) unless told to replace: two strings that differ only in
//!   invalid bytes would otherwise read the same.
//! * [`write_document_strict`] refuses a document that a spec-compliant Extended JSON parser
//!   would not read back as the same document ([`ExtJsonError::Ambiguous`]; the rule is in
//!   `extjson/ambiguity.rs`), detected while transcoding, with no second pass. Errors of both
//!   kinds name the field's path (`fullDocument.a.0.b`).
//! * Structurally malformed BSON (bad lengths, truncated values, unknown element types,
//!   booleans other than 0/1, missing terminators) is an error, never a panic.
//! * Nesting (documents, arrays, code-with-scope scopes) deeper than [`MAX_DEPTH`] is an
//!   error, which bounds recursion and stack use.
//! * On error, `out` is truncated back to the length it had on entry.
//!
//! [`debezium`] is another writer of the same raw BSON: the JSON strings of Debezium's MongoDB
//! connector (the Java driver's legacy strict and relaxed modes, Java's number and escaping
//! rules), byte for byte, for the Debezium form (`encode/debezium.rs`). It shares nothing with
//! the Extended JSON v2 writer above but [`MAX_DEPTH`] and the RFC 3339 date helper.
//!
//! [MongoDB Extended JSON v2]: https://github.com/mongodb/specifications/blob/master/source/extended-json/extended-json.md

use bson::{RawArray, RawBsonRef, RawDocument};

use scalars::write_iso8601_millis;
use writer::JsonWriter;

mod ambiguity;
pub mod debezium;
mod parse;
mod scalars;
#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod tests;
mod values;
mod writer;

/// Deepest nesting of documents, arrays and code-with-scope scopes that the transcoder
/// accepts; the outermost document is level 1.
///
/// The Extended JSON spec asks generators to support at least 100 levels (MongoDB's own
/// limit); 200 leaves headroom for the change-event envelope.
pub const MAX_DEPTH: usize = 200;

/// 9999-12-31T23:59:59.999Z in ms since the Unix epoch, the last instant of a four-digit year.
const MAX_ISO_MILLIS: i64 = 253_402_300_799_999;

/// Appends `millis` (ms since the Unix epoch) to `out` as RFC 3339 UTC with exactly three
/// fraction digits, `YYYY-MM-DDTHH:MM:SS.mmmZ`, and returns `true`; returns `false` and leaves
/// `out` alone when the instant is before 1970 or after year 9999.
///
/// ```
/// let mut out = Vec::new();
/// assert!(mongo_kafka_bridge::extjson::write_rfc3339_millis(&mut out, 1_700_000_000_000));
/// assert_eq!(out, b"2023-11-14T22:13:20.000Z");
/// assert!(!mongo_kafka_bridge::extjson::write_rfc3339_millis(&mut out, -1));
/// ```
pub fn write_rfc3339_millis(out: &mut Vec<u8>, millis: i64) -> bool {
    if !(0..=MAX_ISO_MILLIS).contains(&millis) {
        return false;
    }
    write_iso8601_millis(out, millis);
    true
}

/// Which Extended JSON v2 format to produce (spec section "Conversion table").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonMode {
    /// Relaxed Extended JSON: plain JSON numbers for Int32, Int64 and finite doubles,
    /// ISO-8601 strings for datetimes in years 1970 through 9999.
    Relaxed,
    /// Canonical Extended JSON: every numeric and date value keeps its type wrapper.
    Canonical,
}

/// Why a BSON value could not be transcoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtJsonError {
    /// The bytes do not follow the BSON specification (a length or terminator is wrong, a
    /// value is truncated, an element type is unknown, a boolean is neither 0 nor 1, …).
    ///
    /// `offset` is the byte position, counted from the start of the outermost document (or
    /// array, or scope) handed to this module, where the problem was detected.
    #[error("malformed BSON at byte {offset}: {reason}")]
    Malformed {
        /// Byte position of the problem.
        offset: usize,
        /// What is wrong there.
        reason: &'static str,
    },
    /// Documents, arrays or scopes are nested deeper than [`MAX_DEPTH`] levels.
    #[error("BSON nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
    /// A document whose JSON an Extended JSON parser would not read back as the same document
    /// (strict mode only). `path` is the field's dotted path from the outermost document
    /// (array elements by index); empty for the outermost document itself.
    #[error("field {path:?}: {reason}")]
    Ambiguous {
        /// Where.
        path: String,
        /// Which rule (`extjson/ambiguity.rs`).
        reason: &'static str,
    },
    /// A string or a key that is not valid UTF-8 (strict mode only, unless replacing).
    #[error("field {path:?}: not valid UTF-8, which JSON cannot carry exactly")]
    InvalidUtf8 {
        /// Where, as for [`ExtJsonError::Ambiguous`].
        path: String,
    },
}

impl ExtJsonError {
    /// The same error, seen from the document that holds `segment` (a key or array index).
    fn inside(self, segment: &[u8]) -> Self {
        let join = |path: String| {
            let segment = String::from_utf8_lossy(segment);
            if path.is_empty() {
                segment.into_owned()
            } else {
                format!("{segment}.{path}")
            }
        };
        match self {
            Self::Ambiguous { path, reason } => Self::Ambiguous {
                path: join(path),
                reason,
            },
            Self::InvalidUtf8 { path } => Self::InvalidUtf8 { path: join(path) },
            other => other,
        }
    }
}

/// What strict transcoding does with invalid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Utf8 {
    /// [`ExtJsonError::InvalidUtf8`].
    Refuse,
    /// U+FFFD, as [`write_document`] does.
    Replace,
}

type Res<T = ()> = Result<T, ExtJsonError>;

/// Appends `doc` as one compact Extended JSON object (`{"k":v,…}`, keys in BSON order) to
/// `out`, in the given `mode`.
///
/// # Errors
///
/// [`ExtJsonError::Malformed`] if the document or any nested value is malformed BSON;
/// [`ExtJsonError::TooDeep`] if nesting exceeds [`MAX_DEPTH`]. On error `out` is left as it
/// was on entry.
pub fn write_document(out: &mut Vec<u8>, doc: &RawDocument, mode: JsonMode) -> Res {
    let bytes = doc.as_bytes();
    guarded::<false>(out, mode, Utf8::Replace, bytes.len(), |enc| {
        enc.document(bytes, 0, 1, false)
    })
}

/// Like [`write_document`], refusing what Extended JSON cannot carry exactly: an ambiguous
/// document anywhere inside `doc` (see [`ExtJsonError::Ambiguous`]), and invalid UTF-8 unless
/// `utf8` is [`Utf8::Replace`].
///
/// ```
/// use mongo_kafka_bridge::extjson::{ExtJsonError, JsonMode, Utf8, write_document_strict};
///
/// let doc = bson::rawdoc! { "f": { "$date": "not a date" }, "$price": 1 };
/// let mut out = Vec::new();
/// let error = write_document_strict(&mut out, &doc, JsonMode::Relaxed, Utf8::Refuse);
/// assert!(matches!(error, Err(ExtJsonError::Ambiguous { path, .. }) if path == "f.$date"));
/// assert!(out.is_empty());
/// ```
///
/// # Errors
///
/// As [`write_document`], plus [`ExtJsonError::Ambiguous`] and [`ExtJsonError::InvalidUtf8`].
pub fn write_document_strict(
    out: &mut Vec<u8>,
    doc: &RawDocument,
    mode: JsonMode,
    utf8: Utf8,
) -> Res {
    let bytes = doc.as_bytes();
    guarded::<true>(out, mode, utf8, bytes.len(), |enc| {
        enc.document(bytes, 0, 1, false)
    })
}

/// Appends `arr` as one compact JSON array (`[v,…]`, values in stored order; the stored index
/// keys are ignored) to `out`, in the given `mode`.
///
/// # Errors
///
/// As [`write_document`].
pub fn write_array(out: &mut Vec<u8>, arr: &RawArray, mode: JsonMode) -> Res {
    let bytes = arr.as_bytes();
    guarded::<false>(out, mode, Utf8::Replace, bytes.len(), |enc| {
        enc.document(bytes, 0, 1, true)
    })
}

/// Appends one BSON value as Extended JSON to `out`: a JSON string, number, `true`/`false`,
/// `null`, object, array, or a type-wrapper object such as `{"$oid":"…"}`, per the Extended
/// JSON v2 conversion table for `mode`.
///
/// A DBPointer value takes a slower path (it is re-encoded once, since `bson` 2.x exposes no
/// accessors for its parts); every other type is written directly.
///
/// # Errors
///
/// As [`write_document`], for documents, arrays and code-with-scope scopes inside `value`
/// (nesting is counted from 1 for a document or array `value`).
pub fn write_value(out: &mut Vec<u8>, value: RawBsonRef<'_>, mode: JsonMode) -> Res {
    guarded::<false>(out, mode, Utf8::Replace, 16, |enc| enc.value_ref(value))
}

/// Transcodes `doc` to a `String` of compact Extended JSON (see [`write_document`]).
///
/// ```
/// use mongo_kafka_bridge::extjson::{JsonMode, to_string};
///
/// let doc = bson::rawdoc! { "_id": 1, "n": 9007199254740993_i64, "d": 1.5 };
/// assert_eq!(
///     to_string(&doc, JsonMode::Canonical).unwrap(),
///     r#"{"_id":{"$numberInt":"1"},"n":{"$numberLong":"9007199254740993"},"d":{"$numberDouble":"1.5"}}"#
/// );
/// assert_eq!(to_string(&doc, JsonMode::Relaxed).unwrap(), r#"{"_id":1,"n":9007199254740993,"d":1.5}"#);
/// ```
///
/// # Errors
///
/// As [`write_document`].
pub fn to_string(doc: &RawDocument, mode: JsonMode) -> Result<String, ExtJsonError> {
    let mut out = Vec::new();
    write_document(&mut out, doc, mode)?;
    Ok(String::from_utf8(out).expect("invariant: the encoder only emits valid UTF-8"))
}

/// Runs `f` on an encoder over `out`; on error truncates `out` to its length on entry. `CHECK`
/// turns the ambiguity rule on (off, it is compiled out).
fn guarded<const CHECK: bool>(
    out: &mut Vec<u8>,
    mode: JsonMode,
    utf8: Utf8,
    input_len: usize,
    f: impl FnOnce(&mut JsonWriter<'_, CHECK>) -> Res,
) -> Res {
    let start = out.len();
    // JSON is usually somewhat longer than the BSON it comes from (quotes, wrappers, digits);
    // one reservation up front avoids most regrowth on the hot path.
    out.reserve(input_len + input_len / 2 + 16);
    let mut enc = JsonWriter { out, mode, utf8 };
    let result = f(&mut enc);
    if result.is_err() {
        out.truncate(start);
    }
    result
}
