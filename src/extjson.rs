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
//! [MongoDB Extended JSON v2]: https://github.com/mongodb/specifications/blob/master/source/extended-json/extended-json.md

use bson::{RawArray, RawBsonRef, RawDocument, RawDocumentBuf};

use ambiguity::DocumentShape;
use format::{
    hex_byte, write_base64, write_decimal128, write_f64_finite, write_i64, write_iso8601,
    write_iso8601_millis, write_json_string,
};

mod ambiguity;
mod format;
#[cfg(test)]
mod strict_tests;
#[cfg(test)]
mod tests;

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

/// Error helper.
fn malformed(offset: usize, reason: &'static str) -> ExtJsonError {
    ExtJsonError::Malformed { offset, reason }
}

/// Reads a little-endian `i32` at the start of `b`, if it has 4 bytes.
fn le_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}

/// The first `N` bytes of `b`, or a "truncated" error at `offset`.
fn fixed<const N: usize>(b: &[u8], offset: usize) -> Res<[u8; N]> {
    b.get(..N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| malformed(offset, "value truncated"))
}

/// A BSON `string` (int32 length incl. NUL, bytes, NUL) at the start of `b`: returns its
/// bytes without the NUL.
fn lstring(b: &[u8], offset: usize) -> Res<&[u8]> {
    let len = le_i32(b).ok_or_else(|| malformed(offset, "string length truncated"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l >= 1)
        .ok_or_else(|| malformed(offset, "string length below 1"))?;
    let total = len
        .checked_add(4)
        .filter(|&t| t <= b.len())
        .ok_or_else(|| malformed(offset, "string longer than its container"))?;
    if b[total - 1] != 0 {
        return Err(malformed(offset + total - 1, "string not NUL-terminated"));
    }
    Ok(&b[4..total - 1])
}

/// A nested document at the start of `b`: returns exactly its bytes (length prefix through
/// terminator).
fn subdocument(b: &[u8], offset: usize) -> Res<&[u8]> {
    let len = le_i32(b).ok_or_else(|| malformed(offset, "document length truncated"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l >= 5)
        .ok_or_else(|| malformed(offset, "document length below 5"))?;
    let doc = b
        .get(..len)
        .ok_or_else(|| malformed(offset, "document longer than its container"))?;
    if doc[len - 1] != 0 {
        return Err(malformed(offset + len - 1, "document not NUL-terminated"));
    }
    Ok(doc)
}

/// A NUL-terminated C string starting at `doc[start]` that must end before `doc[end]`.
fn cstring(doc: &[u8], start: usize, end: usize, base: usize) -> Res<&[u8]> {
    let region = doc
        .get(start..end)
        .ok_or_else(|| malformed(base + start, "value truncated"))?;
    let nul = region
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| malformed(base + start, "C string not NUL-terminated"))?;
    Ok(&region[..nul])
}

/// Appends JSON to `out`. Writes fail only in strict mode (`CHECK`: ambiguous documents;
/// `utf8`: invalid UTF-8); BSON parsing fails on malformed input.
struct JsonWriter<'o, const CHECK: bool> {
    out: &'o mut Vec<u8>,
    mode: JsonMode,
    utf8: Utf8,
}

impl<const CHECK: bool> JsonWriter<'_, CHECK> {
    #[inline]
    fn raw(&mut self, s: &[u8]) {
        self.out.extend_from_slice(s);
    }

    /// A JSON string of `s`; invalid UTF-8 is an error unless replacing.
    #[inline]
    fn string(&mut self, s: &[u8]) -> Res {
        if write_json_string(self.out, s) || self.utf8 == Utf8::Replace {
            Ok(())
        } else {
            Err(ExtJsonError::InvalidUtf8 {
                path: String::new(),
            })
        }
    }

    /// Writes the document or array whose complete bytes are `doc` (length prefix through
    /// terminator). `base` is the offset of `doc[0]` for error messages; `depth` is this
    /// document's nesting level.
    fn document(&mut self, doc: &[u8], base: usize, depth: usize, array: bool) -> Res {
        if depth > MAX_DEPTH {
            return Err(ExtJsonError::TooDeep);
        }
        // Re-checked here (cheap) so that the walk never indexes out of bounds, even though
        // `RawDocument` and `subdocument` already guarantee it.
        if doc.len() < 5
            || le_i32(doc).and_then(|l| usize::try_from(l).ok()) != Some(doc.len())
            || doc[doc.len() - 1] != 0
        {
            return Err(malformed(base, "bad document length or terminator"));
        }
        let end = doc.len() - 1;
        self.out.push(if array { b'[' } else { b'{' });
        let mut pos = 4;
        let mut index = 0;
        let mut shape = DocumentShape::default();
        while pos < end {
            let tag = doc[pos];
            if tag == 0 {
                return Err(malformed(
                    base + pos,
                    "end-of-document marker before the end",
                ));
            }
            let key = cstring(doc, pos + 1, end, base)?;
            pos += 1 + key.len() + 1;
            if index > 0 {
                self.out.push(b',');
            }
            if !array {
                if CHECK && key.first() == Some(&b'$') {
                    shape
                        .key(key, tag, index)
                        .map_err(|reason| ExtJsonError::Ambiguous {
                            path: String::from_utf8_lossy(key).into_owned(),
                            reason,
                        })?;
                }
                self.string(key).map_err(|e| e.inside(key))?;
                self.out.push(b':');
            }
            pos = self
                .element(tag, doc, pos, end, base, depth)
                .map_err(|e| match array {
                    true => e.inside(index.to_string().as_bytes()),
                    false => e.inside(key),
                })?;
            index += 1;
        }
        if CHECK && !array {
            shape.end().map_err(|reason| ExtJsonError::Ambiguous {
                path: String::new(),
                reason,
            })?;
        }
        self.out.push(if array { b']' } else { b'}' });
        Ok(())
    }

    /// Writes the value of type `tag` starting at `doc[pos]`, which must end at or before
    /// `doc[end]`; returns the position just past it.
    fn element(
        &mut self,
        tag: u8,
        doc: &[u8],
        pos: usize,
        end: usize,
        base: usize,
        depth: usize,
    ) -> Res<usize> {
        let at = base + pos;
        let avail = doc
            .get(pos..end)
            .ok_or_else(|| malformed(at, "value truncated"))?;
        let len = match tag {
            0x01 => {
                self.double(f64::from_le_bytes(fixed(avail, at)?));
                8
            }
            0x02 | 0x0D | 0x0E => {
                let s = lstring(avail, at)?;
                match tag {
                    0x02 => self.string(s)?,
                    0x0D => self.wrapped_string(b"{\"$code\":", s)?,
                    _ => self.wrapped_string(b"{\"$symbol\":", s)?,
                }
                4 + s.len() + 1
            }
            0x03 | 0x04 => {
                let sub = subdocument(avail, at)?;
                self.document(sub, at, depth + 1, tag == 0x04)?;
                sub.len()
            }
            0x05 => {
                let n = le_i32(avail).ok_or_else(|| malformed(at, "value truncated"))?;
                let n = usize::try_from(n).map_err(|_| malformed(at, "negative binary length"))?;
                let total = n
                    .checked_add(5)
                    .filter(|&t| t <= avail.len())
                    .ok_or_else(|| malformed(at, "binary longer than its container"))?;
                let subtype = avail[4];
                let mut data = &avail[5..total];
                if subtype == 0x02 {
                    // Old binary subtype: the payload repeats its own length first.
                    let inner = le_i32(data).and_then(|l| usize::try_from(l).ok());
                    if inner != Some(n.wrapping_sub(4)) {
                        return Err(malformed(at, "subtype 2 inner length mismatch"));
                    }
                    data = &data[4..];
                }
                self.binary(subtype, data);
                total
            }
            0x06 => {
                self.raw(b"{\"$undefined\":true}");
                0
            }
            0x07 => {
                self.object_id(&fixed(avail, at)?);
                12
            }
            0x08 => {
                match avail.first() {
                    Some(0) => self.raw(b"false"),
                    Some(1) => self.raw(b"true"),
                    Some(_) => return Err(malformed(at, "boolean neither 0 nor 1")),
                    None => return Err(malformed(at, "value truncated")),
                }
                1
            }
            0x09 => {
                self.datetime(i64::from_le_bytes(fixed(avail, at)?));
                8
            }
            0x0A => {
                self.raw(b"null");
                0
            }
            0x0B => {
                let pattern = cstring(doc, pos, end, base)?;
                let options = cstring(doc, pos + pattern.len() + 1, end, base)?;
                self.regex(pattern, options)?;
                pattern.len() + options.len() + 2
            }
            0x0C => {
                let ns = lstring(avail, at)?;
                let oid_at = 4 + ns.len() + 1;
                let oid: [u8; 12] = fixed(&avail[oid_at..], at + oid_at)?;
                self.db_pointer(ns, &oid)?;
                oid_at + 12
            }
            0x0F => {
                let total = le_i32(avail)
                    .and_then(|l| usize::try_from(l).ok())
                    .filter(|&t| t >= 14)
                    .ok_or_else(|| malformed(at, "code-with-scope length below 14"))?;
                let whole = avail
                    .get(..total)
                    .ok_or_else(|| malformed(at, "code-with-scope longer than its container"))?;
                let code = lstring(&whole[4..], at + 4)?;
                let scope_at = 4 + 4 + code.len() + 1;
                let scope = subdocument(&whole[scope_at..], at + scope_at)?;
                if scope_at + scope.len() != total {
                    return Err(malformed(at, "code-with-scope length mismatch"));
                }
                self.code_with_scope(code, scope, at + scope_at, depth + 1)?;
                total
            }
            0x10 => {
                self.int32(i32::from_le_bytes(fixed(avail, at)?));
                4
            }
            0x11 => {
                let b: [u8; 8] = fixed(avail, at)?;
                let increment = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let time = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
                self.timestamp(time, increment);
                8
            }
            0x12 => {
                self.int64(i64::from_le_bytes(fixed(avail, at)?));
                8
            }
            0x13 => {
                self.decimal128(&fixed(avail, at)?);
                16
            }
            0x7F => {
                self.raw(b"{\"$maxKey\":1}");
                0
            }
            0xFF => {
                self.raw(b"{\"$minKey\":1}");
                0
            }
            _ => return Err(malformed(at, "unknown element type")),
        };
        // Every arm checked that its `len` bytes lie within `avail`.
        Ok(pos + len)
    }

    /// Writes an already-decoded value (the `write_value` entry point).
    fn value_ref(&mut self, value: RawBsonRef<'_>) -> Res {
        match value {
            RawBsonRef::Double(v) => self.double(v),
            RawBsonRef::String(s) => self.string(s.as_bytes())?,
            RawBsonRef::Array(a) => self.document(a.as_bytes(), 0, 1, true)?,
            RawBsonRef::Document(d) => self.document(d.as_bytes(), 0, 1, false)?,
            RawBsonRef::Boolean(b) => self.raw(if b { b"true" } else { b"false" }),
            RawBsonRef::Null => self.raw(b"null"),
            RawBsonRef::RegularExpression(re) => {
                self.regex(re.pattern.as_bytes(), re.options.as_bytes())?;
            }
            RawBsonRef::JavaScriptCode(code) => {
                self.wrapped_string(b"{\"$code\":", code.as_bytes())?;
            }
            RawBsonRef::JavaScriptCodeWithScope(cws) => {
                self.code_with_scope(cws.code.as_bytes(), cws.scope.as_bytes(), 0, 1)?;
            }
            RawBsonRef::Int32(v) => self.int32(v),
            RawBsonRef::Int64(v) => self.int64(v),
            RawBsonRef::Timestamp(ts) => self.timestamp(ts.time, ts.increment),
            RawBsonRef::Binary(bin) => self.binary(u8::from(bin.subtype), bin.bytes),
            RawBsonRef::ObjectId(oid) => self.object_id(&oid.bytes()),
            RawBsonRef::DateTime(dt) => self.datetime(dt.timestamp_millis()),
            RawBsonRef::Symbol(s) => self.wrapped_string(b"{\"$symbol\":", s.as_bytes())?,
            RawBsonRef::Decimal128(d) => self.decimal128(&d.bytes()),
            RawBsonRef::Undefined => self.raw(b"{\"$undefined\":true}"),
            RawBsonRef::MaxKey => self.raw(b"{\"$maxKey\":1}"),
            RawBsonRef::MinKey => self.raw(b"{\"$minKey\":1}"),
            RawBsonRef::DbPointer(_) => {
                // bson 2.x keeps the namespace and id private: encode the value as the only
                // element of a scratch document (key "") and walk that.
                let mut scratch = RawDocumentBuf::new();
                scratch.append_ref("", value);
                let bytes = scratch.as_bytes();
                // Layout: [len:4][tag:1][key "":1][value…][0]
                self.element(bytes[4], bytes, 6, bytes.len() - 1, 0, 0)?;
            }
        }
        Ok(())
    }

    fn wrapped_string(&mut self, prefix: &[u8], s: &[u8]) -> Res {
        self.raw(prefix);
        self.string(s)?;
        self.out.push(b'}');
        Ok(())
    }

    fn int32(&mut self, v: i32) {
        match self.mode {
            JsonMode::Relaxed => write_i64(self.out, i64::from(v)),
            JsonMode::Canonical => {
                self.raw(b"{\"$numberInt\":\"");
                write_i64(self.out, i64::from(v));
                self.raw(b"\"}");
            }
        }
    }

    fn int64(&mut self, v: i64) {
        match self.mode {
            JsonMode::Relaxed => write_i64(self.out, v),
            JsonMode::Canonical => {
                self.raw(b"{\"$numberLong\":\"");
                write_i64(self.out, v);
                self.raw(b"\"}");
            }
        }
    }

    fn double(&mut self, v: f64) {
        if self.mode == JsonMode::Relaxed && v.is_finite() {
            write_f64_finite(self.out, v);
            return;
        }
        self.raw(b"{\"$numberDouble\":\"");
        if v.is_nan() {
            self.raw(b"NaN");
        } else if v == f64::INFINITY {
            self.raw(b"Infinity");
        } else if v == f64::NEG_INFINITY {
            self.raw(b"-Infinity");
        } else {
            write_f64_finite(self.out, v);
        }
        self.raw(b"\"}");
    }

    fn datetime(&mut self, millis: i64) {
        if self.mode == JsonMode::Relaxed && (0..=MAX_ISO_MILLIS).contains(&millis) {
            self.raw(b"{\"$date\":\"");
            write_iso8601(self.out, millis);
            self.raw(b"\"}");
        } else {
            self.raw(b"{\"$date\":{\"$numberLong\":\"");
            write_i64(self.out, millis);
            self.raw(b"\"}}");
        }
    }

    fn binary(&mut self, subtype: u8, data: &[u8]) {
        self.raw(b"{\"$binary\":{\"base64\":\"");
        write_base64(self.out, data);
        self.raw(b"\",\"subType\":\"");
        self.raw(&hex_byte(subtype));
        self.raw(b"\"}}");
    }

    fn object_id(&mut self, oid: &[u8; 12]) {
        self.raw(b"{\"$oid\":\"");
        for &b in oid {
            self.raw(&hex_byte(b));
        }
        self.raw(b"\"}");
    }

    fn regex(&mut self, pattern: &[u8], options: &[u8]) -> Res {
        self.raw(b"{\"$regularExpression\":{\"pattern\":");
        self.string(pattern)?;
        self.raw(b",\"options\":");
        // The spec requires the options in alphabetical order (conversion table, note 2).
        let mut small = [0u8; 16];
        if options.is_ascii() && options.len() <= small.len() {
            let sorted = &mut small[..options.len()];
            sorted.copy_from_slice(options);
            sorted.sort_unstable();
            self.string(sorted)?;
        } else {
            // Unusual (long or non-ASCII options): sort by character, not by byte.
            if std::str::from_utf8(options).is_err() && self.utf8 == Utf8::Refuse {
                return Err(ExtJsonError::InvalidUtf8 {
                    path: String::new(),
                });
            }
            let mut chars: Vec<char> = String::from_utf8_lossy(options).chars().collect();
            chars.sort_unstable();
            let sorted: String = chars.into_iter().collect();
            self.string(sorted.as_bytes())?;
        }
        self.raw(b"}}");
        Ok(())
    }

    fn db_pointer(&mut self, namespace: &[u8], oid: &[u8; 12]) -> Res {
        self.raw(b"{\"$dbPointer\":{\"$ref\":");
        self.string(namespace)?;
        self.raw(b",\"$id\":");
        self.object_id(oid);
        self.raw(b"}}");
        Ok(())
    }

    fn code_with_scope(&mut self, code: &[u8], scope: &[u8], base: usize, depth: usize) -> Res {
        self.raw(b"{\"$code\":");
        self.string(code)?;
        self.raw(b",\"$scope\":");
        self.document(scope, base, depth, false)?;
        self.out.push(b'}');
        Ok(())
    }

    fn timestamp(&mut self, time: u32, increment: u32) {
        self.raw(b"{\"$timestamp\":{\"t\":");
        write_i64(self.out, i64::from(time));
        self.raw(b",\"i\":");
        write_i64(self.out, i64::from(increment));
        self.raw(b"}}");
    }

    fn decimal128(&mut self, bytes: &[u8; 16]) {
        self.raw(b"{\"$numberDecimal\":\"");
        write_decimal128(self.out, bytes);
        self.raw(b"\"}");
    }
}
