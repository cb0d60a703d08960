//! The top-level elements of a change event as byte ranges, for finding and removing the
//! `splitEvent` marker without decoding anything (the BSON spec, <https://bsonspec.org/spec.html>:
//! an element is a type byte, a NUL-terminated key and a value whose size follows from its
//! type).
//!
//! Invariants:
//! - Every range is inside the document and the ranges tile it from byte 4 on; the walk ends at
//!   the terminating 0. A type, length or key that does not fit ends the walk with an error,
//!   never a guess. Bounds as bson's own iterator's: an element may reach the last byte (the
//!   walk then ends with an error), so both read the same elements of a malformed document.
//! - Keys are compared as bytes; values are never decoded (bson decodes the marker's value).

use std::ops::Range;

/// One top-level element: its key's bytes and the element's range (type, key and value).
pub(super) struct Element<'a> {
    pub key: &'a [u8],
    pub range: Range<usize>,
}

/// Walks the top-level elements of a BSON document (`bytes` already has a valid length
/// prefix and terminator, as a `RawDocument` does).
pub(super) struct Elements<'a> {
    bytes: &'a [u8],
    at: usize,
    /// The walk ended (the terminator reached, or an element that cannot be read).
    done: bool,
}

impl<'a> Elements<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            at: 4,
            done: false,
        }
    }

    /// A little-endian i32 at `at` as a length (negative lengths are unreadable).
    fn len_at(&self, at: usize) -> Option<usize> {
        let b = self.bytes.get(at..at + 4)?;
        usize::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).ok()
    }

    /// The length of a NUL-terminated string at `at`, its NUL included.
    fn cstring_at(&self, at: usize) -> Option<usize> {
        Some(self.bytes.get(at..)?.iter().position(|&b| b == 0)? + 1)
    }

    /// The size of a value of type `kind` at `at`.
    fn value_size(&self, kind: u8, at: usize) -> Option<usize> {
        let string = |extra: usize| Some(4 + self.len_at(at)?.checked_sub(1)? + 1 + extra);
        match kind {
            0x06 | 0x0A | 0x7F | 0xFF => Some(0),
            0x08 => Some(1),
            0x10 => Some(4),
            0x01 | 0x09 | 0x11 | 0x12 => Some(8),
            0x07 => Some(12),
            0x13 => Some(16),
            0x02 | 0x0D | 0x0E => string(0),
            0x0C => string(12),
            0x03 | 0x04 | 0x0F => self.len_at(at).filter(|&n| n >= 5),
            0x05 => Some(4 + 1 + self.len_at(at)?),
            0x0B => {
                let pattern = self.cstring_at(at)?;
                Some(pattern + self.cstring_at(at + pattern)?)
            }
            _ => None,
        }
    }
}

impl<'a> Iterator for Elements<'a> {
    /// An element, or `Err(())` once one cannot be read (then the walk ends).
    type Item = Result<Element<'a>, ()>;

    fn next(&mut self) -> Option<Self::Item> {
        // As bson's iterator: the walk ends at the terminating 0; an element may reach the end
        // of the bytes (then the next step is an error), never past it.
        if self.done {
            return None;
        }
        let end = self.bytes.len().checked_sub(1)?;
        if self.at == end && self.bytes[end] == 0 {
            self.done = true;
            return None;
        }
        if self.at >= end {
            self.done = true;
            return Some(Err(()));
        }
        let start = self.at;
        let element = (|| {
            let key_len = self.cstring_at(start + 1)?;
            let value_at = start + 1 + key_len;
            let size = self.value_size(self.bytes[start], value_at)?;
            let stop = value_at
                .checked_add(size)
                .filter(|&stop| stop <= self.bytes.len())?;
            Some(Element {
                key: &self.bytes[start + 1..value_at - 1],
                range: start..stop,
            })
        })();
        match element {
            Some(element) => {
                self.at = element.range.end;
                Some(Ok(element))
            }
            None => {
                self.done = true;
                Some(Err(()))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::spec::BinarySubtype;
    use bson::{Binary, DateTime, Decimal128, JavaScriptCodeWithScope, Regex, Timestamp, oid};

    /// A document with one element of every BSON type.
    fn every_type() -> bson::Document {
        bson::doc! {
            "double": 1.5, "string": "é", "doc": { "a": 1 }, "array": [1, "x"],
            "binary": Binary { subtype: BinarySubtype::Generic, bytes: vec![1, 2, 3] },
            "undefined": bson::Bson::Undefined, "oid": oid::ObjectId::new(), "bool": true,
            "date": DateTime::from_millis(5), "null": null,
            "regex": Regex { pattern: "a.*".into(), options: "i".into() },
            "dbpointer": bson::Bson::DbPointer(
                bson::from_slice::<bson::Document>(&[
                    26, 0, 0, 0, 12, 112, 0, 2, 0, 0, 0, 99, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10,
                    11, 12, 0,
                ])
                .ok()
                .and_then(|d| match d.get("p") { Some(bson::Bson::DbPointer(p)) => Some(p.clone()), _ => None })
                .expect("a DBPointer document"),
            ),
            "code": bson::Bson::JavaScriptCode("f()".into()),
            "symbol": bson::Bson::Symbol("s".into()),
            "scope": JavaScriptCodeWithScope { code: "g()".into(), scope: bson::doc! { "x": 1 } },
            "int32": 7, "ts": Timestamp { time: 1, increment: 2 }, "int64": 8i64,
            "decimal": Decimal128::from_bytes([1; 16]), "min": bson::Bson::MinKey,
            "max": bson::Bson::MaxKey,
        }
    }

    #[test]
    fn the_walk_agrees_with_bsons_iterator_on_every_type() {
        let raw = bson::RawDocumentBuf::from_document(&every_type()).expect("serialisable");
        let ours: Vec<(Vec<u8>, usize)> = Elements::new(raw.as_bytes())
            .map(|e| e.map(|e| (e.key.to_vec(), e.range.len())))
            .collect::<Result<_, ()>>()
            .expect("readable");
        let theirs: Vec<(Vec<u8>, usize)> = raw
            .iter_elements()
            .map(|e| {
                let e = e.expect("readable");
                (e.key().as_bytes().to_vec(), 1 + e.key().len() + 1 + e.len())
            })
            .collect();
        assert_eq!(ours, theirs);
        assert_eq!(ours.len(), 21);
    }

    #[test]
    fn an_element_over_the_terminator_is_read_as_bsons_iterator_reads_it_then_an_error() {
        // GIVEN a document whose last element, a regex, ends on the terminating byte
        // (its options' NUL is the document's last byte)
        let mut bytes = 11i32.to_le_bytes().to_vec();
        bytes.extend([0x0B, b'r', 0, b'a', 0, b'i', 0]);
        let raw = bson::RawDocument::from_bytes(&bytes).expect("length and terminator");
        let theirs: Vec<bool> = raw.iter_elements().map(|e| e.is_ok()).collect();
        let ours: Vec<bool> = Elements::new(&bytes).map(|e| e.is_ok()).collect();
        assert_eq!(ours, theirs);
        assert_eq!(ours, [true, false]);
    }

    #[test]
    fn a_length_past_the_end_or_an_unknown_type_ends_the_walk_with_an_error() {
        let raw = bson::RawDocumentBuf::from_document(&bson::doc! { "a": "xy", "b": 1 })
            .expect("serialisable");
        let mut long = raw.as_bytes().to_vec();
        long[7..11].copy_from_slice(&100i32.to_le_bytes());
        let mut unknown = raw.as_bytes().to_vec();
        unknown[4] = 0x42;
        for bytes in [long, unknown] {
            let mut walk = Elements::new(&bytes);
            assert!(matches!(walk.next(), Some(Err(()))));
            assert!(walk.next().is_none());
        }
    }
}
