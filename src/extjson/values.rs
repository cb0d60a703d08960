//! Writing each typed BSON value as Extended JSON v2 (the spec's conversion table): numbers,
//! dates, binaries, ids, regular expressions, code, timestamps, decimals, and the values
//! `bson` already decoded ([`JsonWriter::value_ref`]).
//!
//! Invariants: integers, decimals and dates never go through `f64`; relaxed mode differs from
//! canonical only where the spec says (plain integers, finite doubles, dates in 1970..=9999).

use bson::{RawBsonRef, RawDocumentBuf};

use super::scalars::{
    hex_byte, write_base64, write_decimal128, write_f64_finite, write_i64, write_iso8601,
};
use super::writer::JsonWriter;
use super::{ExtJsonError, JsonMode, MAX_ISO_MILLIS, Res, Utf8};

impl<const CHECK: bool> JsonWriter<'_, CHECK> {
    /// Writes an already-decoded value (the `write_value` entry point).
    ///
    /// One `match` over the BSON types, kept whole like [`JsonWriter::element`], which it
    /// mirrors for values the `bson` crate already decoded.
    pub(super) fn value_ref(&mut self, value: RawBsonRef<'_>) -> Res {
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

    pub(super) fn wrapped_string(&mut self, prefix: &[u8], s: &[u8]) -> Res {
        self.raw(prefix);
        self.string(s)?;
        self.out.push(b'}');
        Ok(())
    }

    pub(super) fn int32(&mut self, v: i32) {
        match self.mode {
            JsonMode::Relaxed => write_i64(self.out, i64::from(v)),
            JsonMode::Canonical => {
                self.raw(b"{\"$numberInt\":\"");
                write_i64(self.out, i64::from(v));
                self.raw(b"\"}");
            }
        }
    }

    pub(super) fn int64(&mut self, v: i64) {
        match self.mode {
            JsonMode::Relaxed => write_i64(self.out, v),
            JsonMode::Canonical => {
                self.raw(b"{\"$numberLong\":\"");
                write_i64(self.out, v);
                self.raw(b"\"}");
            }
        }
    }

    pub(super) fn double(&mut self, v: f64) {
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

    pub(super) fn datetime(&mut self, millis: i64) {
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

    pub(super) fn binary(&mut self, subtype: u8, data: &[u8]) {
        self.raw(b"{\"$binary\":{\"base64\":\"");
        write_base64(self.out, data);
        self.raw(b"\",\"subType\":\"");
        self.raw(&hex_byte(subtype));
        self.raw(b"\"}}");
    }

    pub(super) fn object_id(&mut self, oid: &[u8; 12]) {
        self.raw(b"{\"$oid\":\"");
        for &b in oid {
            self.raw(&hex_byte(b));
        }
        self.raw(b"\"}");
    }

    pub(super) fn regex(&mut self, pattern: &[u8], options: &[u8]) -> Res {
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

    pub(super) fn db_pointer(&mut self, namespace: &[u8], oid: &[u8; 12]) -> Res {
        self.raw(b"{\"$dbPointer\":{\"$ref\":");
        self.string(namespace)?;
        self.raw(b",\"$id\":");
        self.object_id(oid);
        self.raw(b"}}");
        Ok(())
    }

    pub(super) fn code_with_scope(
        &mut self,
        code: &[u8],
        scope: &[u8],
        base: usize,
        depth: usize,
    ) -> Res {
        self.raw(b"{\"$code\":");
        self.string(code)?;
        self.raw(b",\"$scope\":");
        self.document(scope, base, depth, false)?;
        self.out.push(b'}');
        Ok(())
    }

    pub(super) fn timestamp(&mut self, time: u32, increment: u32) {
        self.raw(b"{\"$timestamp\":{\"t\":");
        write_i64(self.out, i64::from(time));
        self.raw(b",\"i\":");
        write_i64(self.out, i64::from(increment));
        self.raw(b"}}");
    }

    pub(super) fn decimal128(&mut self, bytes: &[u8; 16]) {
        self.raw(b"{\"$numberDecimal\":\"");
        write_decimal128(self.out, bytes);
        self.raw(b"\"}");
    }
}
