//! Reassembly of change events split by `$changeStreamSplitLargeEvent` (MongoDB 7.0+).
//!
//! An event larger than 16 MB arrives as fragments `1..=of`, each with its own `_id` (resume
//! token) and a `splitEvent: {fragment, of}` field; top-level fields are spread over the fragments
//! and the envelope fields (`operationType`, `ns`, `documentKey`, `clusterTime`, …) repeat
//! (<https://www.mongodb.com/docs/manual/reference/operator/aggregation/changeStreamSplitLargeEvent/>).
//!
//! Invariants:
//! - A reassembled event is handed on only when its last fragment arrived; its `_id` is the
//!   **last** fragment's token, so the committed position never falls between fragments (C11).
//! - Fragments out of sequence (a missing or repeated fragment) are an error, never a partial event.
//! - An event whose `splitEvent` marker cannot be read (not a document, `fragment` or `of`
//!   missing or not an integer) is an error too: it may be a fragment, so passing it on whole
//!   could publish part of an event and commit a position between fragments.
//! - The reassembled event has each top-level field once, `_id` first, no `splitEvent`; an
//!   event in a single fragment (`of: 1`) is the server's document less its `splitEvent`.
//! - Cost: one pass over the top-level elements of each event (bson's iterator), values
//!   copied as bytes, never decoded (`scripts/bench --callgrind` counts it).

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

use crate::error::split::SplitError;
use elements::Elements;

mod elements;

/// The stage appended to every pipeline when the server supports it.
pub const SPLIT_STAGE: &str = "$changeStreamSplitLargeEvent";

/// Collects the fragments of one split event at a time.
#[derive(Debug, Default)]
pub(crate) struct Reassembler {
    parts: Vec<RawDocumentBuf>,
    of: i64,
}

/// A fragment's marker: `(fragment, of)` and where `splitEvent` lies in the fragment's bytes.
struct Marker {
    fragment: i64,
    of: i64,
    at: std::ops::Range<usize>,
}

/// The marker of a fragment; `Ok(None)` for an event without `splitEvent`. One pass over the
/// top-level elements.
///
/// Errors: `Err(())` when `splitEvent` is there but not `{fragment, of}` integers, or when an
/// element before it cannot be read (it may hide the marker).
fn marker(raw: &RawDocument) -> Result<Option<Marker>, ()> {
    let bytes = raw.as_bytes();
    for element in Elements::new(bytes) {
        let element = element?;
        if element.key == b"splitEvent" {
            let value = &bytes[element.range.start + 1 + element.key.len() + 1..element.range.end];
            let info = (bytes[element.range.start] == 0x03)
                .then(|| RawDocument::from_bytes(value).ok())
                .flatten()
                .ok_or(())?;
            let number = |key: &str| match info.get(key) {
                Ok(Some(RawBsonRef::Int32(n))) => Ok(i64::from(n)),
                Ok(Some(RawBsonRef::Int64(n))) => Ok(n),
                _ => Err(()),
            };
            return Ok(Some(Marker {
                fragment: number("fragment")?,
                of: number("of")?,
                at: element.range,
            }));
        }
    }
    Ok(None)
}

/// `raw` without the element at `at` (a single fragment's marker), in place: only the bytes
/// after the marker move.
fn without(raw: RawDocumentBuf, at: std::ops::Range<usize>) -> RawDocumentBuf {
    let mut bytes = raw.into_bytes();
    bytes.drain(at);
    let len = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
    bytes[..4].copy_from_slice(&len.to_le_bytes());
    RawDocumentBuf::from_bytes(bytes)
        .expect("a BSON document less one whole element is a BSON document")
}

impl Reassembler {
    /// Whether fragments are waiting for the rest of their event.
    pub(crate) fn is_pending(&self) -> bool {
        !self.parts.is_empty()
    }

    /// Takes one event or fragment; returns a whole event when one is complete.
    pub(crate) fn push(
        &mut self,
        raw: RawDocumentBuf,
    ) -> Result<Option<RawDocumentBuf>, SplitError> {
        let expected = self.parts.len() as i64 + 1;
        let info = marker(&raw).map_err(|()| SplitError::Marker { expected })?;
        let Some(Marker { fragment, of, at }) = info else {
            if self.is_pending() {
                return Err(SplitError::OutOfSequence {
                    expected,
                    got: 0,
                    of: self.of,
                });
            }
            return Ok(Some(raw));
        };
        if fragment != expected || (self.is_pending() && of != self.of) || of < 1 {
            return Err(SplitError::OutOfSequence {
                expected,
                got: fragment,
                of,
            });
        }
        if of == 1 {
            // A whole event in one fragment (`fragment` is 1 and nothing is pending): only the
            // marker goes.
            return Ok(Some(without(raw, at)));
        }
        self.of = of;
        self.parts.push(raw);
        if fragment < of {
            return Ok(None);
        }
        let parts = std::mem::take(&mut self.parts);
        Ok(Some(merge(&parts)))
    }
}

/// One document with the last fragment's `_id` first, then every other top-level field once.
/// The elements are copied as bytes (type, key and value as the server sent them): one buffer,
/// sized up front, and no value decoded.
fn merge(parts: &[RawDocumentBuf]) -> RawDocumentBuf {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.as_bytes().len()).sum());
    out.extend_from_slice(&[0; 4]);
    let mut seen: Vec<&[u8]> = vec![b"_id", b"splitEvent"];
    if let Some((_, token)) = parts
        .last()
        .and_then(|p| elements(p).find(|(key, _)| *key == b"_id"))
    {
        out.extend_from_slice(token);
    }
    for part in parts {
        for (key, element) in elements(part) {
            if !seen.contains(&key) {
                seen.push(key);
                out.extend_from_slice(element);
            }
        }
    }
    out.push(0);
    let len = i32::try_from(out.len()).unwrap_or(i32::MAX);
    out[..4].copy_from_slice(&len.to_le_bytes());
    RawDocumentBuf::from_bytes(out)
        .expect("a length prefix, whole elements and the terminating 0 form a BSON document")
}

/// The top-level elements of `doc`, in order, as (key, the element's bytes); ends at the first
/// unreadable element.
fn elements(doc: &RawDocument) -> impl Iterator<Item = (&[u8], &[u8])> {
    let bytes = doc.as_bytes();
    Elements::new(bytes)
        .map_while(Result::ok)
        .map(move |element| (element.key, &bytes[element.range]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn fragment(n: i32, of: i32, field: &str) -> RawDocumentBuf {
        let mut doc = rawdoc! {
            "_id": { "_data": format!("T{n}") },
            "operationType": "update",
            "documentKey": { "_id": 1 },
            "splitEvent": { "fragment": n, "of": of },
        };
        doc.append(field, format!("value-{n}"));
        doc
    }

    #[test]
    fn three_fragments_become_one_event_with_the_last_token() {
        let mut r = Reassembler::default();
        assert_eq!(r.push(fragment(1, 3, "fullDocument")), Ok(None));
        assert_eq!(r.push(fragment(2, 3, "updateDescription")), Ok(None));
        let whole = r
            .push(fragment(3, 3, "fullDocumentBeforeChange"))
            .unwrap()
            .unwrap();
        assert_eq!(
            whole,
            rawdoc! {
                "_id": { "_data": "T3" },
                "operationType": "update",
                "documentKey": { "_id": 1 },
                "fullDocument": "value-1",
                "updateDescription": "value-2",
                "fullDocumentBeforeChange": "value-3",
            }
        );
        assert!(!r.is_pending());
    }

    #[test]
    fn unsplit_events_pass_through_and_single_fragments_lose_the_marker() {
        let mut r = Reassembler::default();
        let plain = rawdoc! { "_id": { "_data": "A" }, "operationType": "insert" };
        assert_eq!(r.push(plain.clone()), Ok(Some(plain)));
        let whole = r.push(fragment(1, 1, "fullDocument")).unwrap().unwrap();
        assert!(whole.get("splitEvent").unwrap().is_none());
        let mut expected = fragment(1, 1, "fullDocument");
        expected = expected
            .iter()
            .map(Result::unwrap)
            .filter(|(key, _)| *key != "splitEvent")
            .fold(RawDocumentBuf::new(), |mut doc, (key, value)| {
                doc.append(key, value.to_raw_bson());
                doc
            });
        assert_eq!(whole.as_bytes(), expected.as_bytes());
    }

    #[test]
    fn a_marker_after_an_unreadable_element_is_an_error() {
        // GIVEN a fragment whose element before `splitEvent` has a length past the end
        let mut bytes = fragment(1, 2, "x").into_bytes();
        let key = b"operationType\0";
        let at = bytes
            .windows(key.len())
            .position(|w| w == key)
            .expect("the key")
            + key.len();
        bytes[at..at + 4].copy_from_slice(&1000i32.to_le_bytes());
        let raw = RawDocumentBuf::from_bytes(bytes).expect("outer length and terminator");
        // THEN it is an error, not an event passed on whole
        assert_eq!(
            Reassembler::default().push(raw),
            Err(SplitError::Marker { expected: 1 })
        );
    }

    #[test]
    fn out_of_sequence_fragments_are_errors() {
        let mut r = Reassembler::default();
        assert_eq!(
            r.push(fragment(2, 3, "x")),
            Err(SplitError::OutOfSequence {
                expected: 1,
                got: 2,
                of: 3
            })
        );
        let mut r = Reassembler::default();
        r.push(fragment(1, 2, "x")).unwrap();
        let plain = rawdoc! { "_id": { "_data": "A" } };
        assert_eq!(
            r.push(plain),
            Err(SplitError::OutOfSequence {
                expected: 2,
                got: 0,
                of: 2
            })
        );
    }

    #[test]
    fn an_unreadable_marker_is_an_error_never_a_whole_event() {
        let markers = [
            rawdoc! { "fra)ment": 1, "of": 1 },
            rawdoc! { "fragment": 1.0, "of": 1 },
            rawdoc! { "fragment": 1 },
        ];
        for marker in markers {
            let mut r = Reassembler::default();
            let raw = rawdoc! { "_id": { "_data": "A" }, "splitEvent": marker.clone() };
            assert_eq!(
                r.push(raw),
                Err(SplitError::Marker { expected: 1 }),
                "{marker:?}"
            );
        }
        let mut r = Reassembler::default();
        let raw = rawdoc! { "_id": { "_data": "A" }, "splitEvent": "1 of 2" };
        assert_eq!(r.push(raw), Err(SplitError::Marker { expected: 1 }));
    }

    /// The `split` fuzz target's crash (tests/fuzz/README.md): BSON documents one after the
    /// other, the second a fragment whose marker has no readable `fragment`.
    #[test]
    fn the_fuzzers_unreadable_marker_is_an_error() {
        let input = include_bytes!("../../tests/fuzz/split_marker_unreadable.bin");
        let mut rest = &input[..];
        let mut results = Vec::new();
        let mut r = Reassembler::default();
        while rest.len() >= 5 {
            let len = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let (one, tail) = rest.split_at(len);
            rest = tail;
            let raw = RawDocument::from_bytes(one).expect("a BSON document");
            results.push(
                r.push(raw.to_raw_document_buf())
                    .map(|whole| whole.is_some()),
            );
        }
        assert_eq!(
            results,
            [Ok(true), Err(SplitError::Marker { expected: 1 }), Ok(true)]
        );
    }
}
