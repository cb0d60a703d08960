//! One BSON → JSON walker for the three Java writer configurations Debezium 3.6.3 uses, told
//! apart by [`Style`]:
//!
//! | style | used for | mode | after `:` | between members |
//! |---|---|---|---|---|
//! | [`STRICT`] | `after`, `before` | legacy strict | `": "` | `,` |
//! | [`RELAXED_KEY`] | the key's `id` | relaxed | `": "` | `,` |
//! | [`RELAXED_SPACED`] | `updatedFields` | relaxed | `": "` | `, ` |
//!
//! The separator applies alike to documents, arrays and the type wrappers
//! (`{"$binary": {"base64": "…", "subType": "00"}}` in the spaced style). Mode decides the
//! values (the module doc of [`super`] has the table). Keys keep the document's order; array
//! index keys are not read.
//!
//! # Invariants
//!
//! * Walks the raw bytes through `bson`'s raw API: no intermediate `Document`.
//! * Malformed BSON (and, through `bson`'s checks, invalid UTF-8) is an error, never a panic.
//! * Nesting deeper than [`MAX_DEPTH`] is an error, which bounds recursion.

use bson::{RawArray, RawBsonRef, RawDocument, RawDocumentBuf};

use super::DebeziumJsonError;
use super::java::{write_double, write_java_string, write_java_units};
use crate::extjson::{MAX_DEPTH, write_rfc3339_millis};

/// Which values a writer prints (the Java driver's `JsonMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// Legacy strict mode (`JsonMode.STRICT`).
    Strict,
    /// Relaxed Extended JSON (`JsonMode.RELAXED`).
    Relaxed,
}

/// A writer configuration: the mode and the text between two members.
#[derive(Debug, Clone, Copy)]
pub(super) struct Style {
    mode: Mode,
    comma: &'static str,
}

/// `after` and `before`: strict mode, indented with empty indent and newline strings.
pub(super) const STRICT: Style = Style {
    mode: Mode::Strict,
    comma: ",",
};
/// The key's `id`: relaxed mode, indented with empty strings.
pub(super) const RELAXED_KEY: Style = Style {
    mode: Mode::Relaxed,
    comma: ",",
};
/// `updatedFields`: `BsonDocument.toJson()`'s default, relaxed and not indented.
pub(super) const RELAXED_SPACED: Style = Style {
    mode: Mode::Relaxed,
    comma: ", ",
};

type Res = Result<(), DebeziumJsonError>;

/// 9999-12-31T23:59:59.999Z: the relaxed writer prints ISO-8601 from 0 up to this instant.
const LAST_ISO_MILLIS: i64 = 253_402_300_799_999;

/// Appends `doc` as a JSON object in `style`; `depth` is the nesting level of `doc` (1 for
/// the outermost document).
pub(super) fn write_document(
    out: &mut String,
    doc: &RawDocument,
    style: Style,
    depth: usize,
) -> Res {
    if depth > MAX_DEPTH {
        return Err(DebeziumJsonError::TooDeep);
    }
    out.push('{');
    for (index, element) in doc.into_iter().enumerate() {
        let (key, value) = element.map_err(DebeziumJsonError::Bson)?;
        if index > 0 {
            out.push_str(style.comma);
        }
        write_java_string(out, key);
        out.push_str(": ");
        write_value(out, value, style, depth)?;
    }
    out.push('}');
    Ok(())
}

fn write_array(out: &mut String, array: &RawArray, style: Style, depth: usize) -> Res {
    if depth > MAX_DEPTH {
        return Err(DebeziumJsonError::TooDeep);
    }
    out.push('[');
    for (index, value) in array.into_iter().enumerate() {
        if index > 0 {
            out.push_str(style.comma);
        }
        write_value(out, value.map_err(DebeziumJsonError::Bson)?, style, depth)?;
    }
    out.push(']');
    Ok(())
}

/// Appends one value in `style`; `depth` is the level of the document holding it.
pub(super) fn write_value(
    out: &mut String,
    value: RawBsonRef<'_>,
    style: Style,
    depth: usize,
) -> Res {
    let strict = style.mode == Mode::Strict;
    let comma = style.comma;
    match value {
        RawBsonRef::Double(v) if v.is_finite() || strict => write_double(out, v),
        RawBsonRef::Double(v) => {
            out.push_str("{\"$numberDouble\": \"");
            write_double(out, v);
            out.push_str("\"}");
        }
        RawBsonRef::String(s) => write_java_string(out, s),
        RawBsonRef::Document(d) => write_document(out, d, style, depth + 1)?,
        RawBsonRef::Array(a) => write_array(out, a, style, depth + 1)?,
        RawBsonRef::Boolean(b) => out.push_str(if b { "true" } else { "false" }),
        RawBsonRef::Null => out.push_str("null"),
        RawBsonRef::Int32(v) => out.push_str(&v.to_string()),
        RawBsonRef::Int64(v) if strict => {
            out.push_str("{\"$numberLong\": \"");
            out.push_str(&v.to_string());
            out.push_str("\"}");
        }
        RawBsonRef::Int64(v) => out.push_str(&v.to_string()),
        RawBsonRef::Decimal128(d) => {
            out.push_str("{\"$numberDecimal\": \"");
            out.push_str(&d.to_string());
            out.push_str("\"}");
        }
        RawBsonRef::ObjectId(oid) => write_object_id(out, &oid.bytes()),
        RawBsonRef::DateTime(dt) => write_date(out, dt.timestamp_millis(), strict),
        RawBsonRef::Binary(bin) => write_binary(out, bin.bytes, u8::from(bin.subtype), style),
        RawBsonRef::RegularExpression(re) => write_regex(out, re.pattern, re.options, style),
        RawBsonRef::Timestamp(ts) => {
            out.push_str("{\"$timestamp\": {\"t\": ");
            out.push_str(&ts.time.to_string());
            out.push_str(comma);
            out.push_str("\"i\": ");
            out.push_str(&ts.increment.to_string());
            out.push_str("}}");
        }
        RawBsonRef::JavaScriptCode(code) => {
            out.push_str("{\"$code\": ");
            write_java_string(out, code);
            out.push('}');
        }
        RawBsonRef::JavaScriptCodeWithScope(cws) => {
            out.push_str("{\"$code\": ");
            write_java_string(out, cws.code);
            out.push_str(comma);
            out.push_str("\"$scope\": ");
            write_document(out, cws.scope, style, depth + 1)?;
            out.push('}');
        }
        RawBsonRef::Symbol(s) => {
            out.push_str("{\"$symbol\": ");
            write_java_string(out, s);
            out.push('}');
        }
        RawBsonRef::DbPointer(_) => write_db_pointer(out, value, comma)?,
        RawBsonRef::Undefined => out.push_str("{\"$undefined\": true}"),
        RawBsonRef::MinKey => out.push_str("{\"$minKey\": 1}"),
        RawBsonRef::MaxKey => out.push_str("{\"$maxKey\": 1}"),
    }
    Ok(())
}

/// `{"$binary": "…", "$type": "…"}` (strict) or `{"$binary": {"base64": "…", "subType": "…"}}`.
fn write_binary(out: &mut String, bytes: &[u8], subtype: u8, style: Style) {
    let strict = style.mode == Mode::Strict;
    out.push_str(if strict {
        "{\"$binary\": \""
    } else {
        "{\"$binary\": {\"base64\": \""
    });
    write_base64(out, bytes);
    out.push('"');
    out.push_str(style.comma);
    out.push_str(if strict {
        "\"$type\": \""
    } else {
        "\"subType\": \""
    });
    out.push_str(&format!("{subtype:02X}"));
    out.push_str(if strict { "\"}" } else { "\"}}" });
}

/// `{"$regex": …, "$options": …}` (strict) or `{"$regularExpression": {"pattern": …,
/// "options": …}}`; the driver's BsonRegularExpression sorts the options by UTF-16 unit.
fn write_regex(out: &mut String, pattern: &str, options: &str, style: Style) {
    let strict = style.mode == Mode::Strict;
    let mut options: Vec<u16> = options.encode_utf16().collect();
    options.sort_unstable();
    out.push_str(if strict {
        "{\"$regex\": "
    } else {
        "{\"$regularExpression\": {\"pattern\": "
    });
    write_java_string(out, pattern);
    out.push_str(style.comma);
    out.push_str(if strict {
        "\"$options\": "
    } else {
        "\"options\": "
    });
    write_java_units(out, &options);
    out.push_str(if strict { "}" } else { "}}" });
}

fn write_date(out: &mut String, millis: i64, strict: bool) {
    if strict {
        out.push_str("{\"$date\": ");
        out.push_str(&millis.to_string());
        out.push('}');
        return;
    }
    let mut iso = Vec::with_capacity(24);
    if (0..=LAST_ISO_MILLIS).contains(&millis) && write_rfc3339_millis(&mut iso, millis) {
        // `YYYY-MM-DDTHH:MM:SS.mmmZ` → Java's ISO_OFFSET_DATE_TIME: the fraction without
        // trailing zeros, and no point when it is zero.
        let fraction = &iso[20..23];
        let kept = 3 - fraction.iter().rev().take_while(|&&d| d == b'0').count();
        out.push_str("{\"$date\": \"");
        out.extend(iso[..19].iter().map(|&b| char::from(b)));
        if kept > 0 {
            out.push('.');
            out.extend(fraction[..kept].iter().map(|&b| char::from(b)));
        }
        out.push_str("Z\"}");
    } else {
        out.push_str("{\"$date\": {\"$numberLong\": \"");
        out.push_str(&millis.to_string());
        out.push_str("\"}}");
    }
}

fn write_object_id(out: &mut String, bytes: &[u8; 12]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("{\"$oid\": \"");
    for &b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xF)]));
    }
    out.push_str("\"}");
}

/// Both modes write a DBPointer in the legacy `$ref`/`$id` form.
fn write_db_pointer(out: &mut String, value: RawBsonRef<'_>, comma: &str) -> Res {
    // bson 2.x keeps a DBPointer's parts private: encode it as the only element of a scratch
    // document (key "") and read them back.
    // Layout: [len:4][0x0C][""\0][ns len:4][ns\0][oid:12][\0].
    let mut scratch = RawDocumentBuf::new();
    scratch.append_ref("", value);
    let bytes = scratch.as_bytes();
    let malformed = || DebeziumJsonError::Malformed("DBPointer layout");
    let ns_len = bytes
        .get(6..10)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .and_then(|b| usize::try_from(i32::from_le_bytes(b)).ok())
        .filter(|&n| n >= 1)
        .ok_or_else(malformed)?;
    let namespace = bytes
        .get(10..10 + ns_len - 1)
        .and_then(|b| std::str::from_utf8(b).ok())
        .ok_or_else(malformed)?;
    let oid: [u8; 12] = bytes
        .get(10 + ns_len..10 + ns_len + 12)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(malformed)?;
    out.push_str("{\"$ref\": ");
    write_java_string(out, namespace);
    out.push_str(comma);
    out.push_str("\"$id\": ");
    write_object_id(out, &oid);
    out.push('}');
    Ok(())
}

/// Standard base64 with `=` padding (`java.util.Base64`'s basic encoder).
fn write_base64(out: &mut String, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |n: u32| char::from(ALPHABET[(n & 63) as usize]);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        out.push(sym(n >> 18));
        out.push(sym(n >> 12));
        out.push(if chunk.len() > 1 { sym(n >> 6) } else { '=' });
        out.push(if chunk.len() > 2 { sym(n) } else { '=' });
    }
}
