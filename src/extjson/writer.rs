//! The transcoder's walk over raw BSON: a document's elements in stored order, each element's
//! bytes read and its Extended JSON written (`values.rs` writes the typed values).
//!
//! Invariants: the walk never indexes out of bounds (every length is checked against its
//! container, `parse.rs`); nesting deeper than [`MAX_DEPTH`] is an error; in strict mode
//! (`CHECK`) a document's `$` keys go through the ambiguity rule as they are written.

use super::ambiguity::DocumentShape;
use super::parse::{cstring, fixed, le_i32, lstring, malformed, subdocument};
use super::scalars::write_json_string;
use super::{ExtJsonError, JsonMode, MAX_DEPTH, Res, Utf8};

/// Appends JSON to `out`. Writes fail only in strict mode (`CHECK`: ambiguous documents;
/// `utf8`: invalid UTF-8); BSON parsing fails on malformed input.
pub(super) struct JsonWriter<'o, const CHECK: bool> {
    pub(super) out: &'o mut Vec<u8>,
    pub(super) mode: JsonMode,
    pub(super) utf8: Utf8,
}

impl<const CHECK: bool> JsonWriter<'_, CHECK> {
    #[inline]
    pub(super) fn raw(&mut self, s: &[u8]) {
        self.out.extend_from_slice(s);
    }

    /// A JSON string of `s`; invalid UTF-8 is an error unless replacing.
    #[inline]
    pub(super) fn string(&mut self, s: &[u8]) -> Res {
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
    pub(super) fn document(&mut self, doc: &[u8], base: usize, depth: usize, array: bool) -> Res {
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
    ///
    /// One `match` over the BSON element types, kept whole on purpose: each arm reads its
    /// value's bytes and writes its Extended JSON in one place, so the spec's conversion table
    /// reads top to bottom here, and the hot path makes no further call per element than the
    /// type's own writer.
    pub(super) fn element(
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
}
