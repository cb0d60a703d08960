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
//! - The reassembled event has each top-level field once, `_id` first, no `splitEvent`.

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

use crate::error::split::SplitError;

/// The stage appended to every pipeline when the server supports it.
pub const SPLIT_STAGE: &str = "$changeStreamSplitLargeEvent";

/// Collects the fragments of one split event at a time.
#[derive(Debug, Default)]
pub(crate) struct Reassembler {
    parts: Vec<RawDocumentBuf>,
    of: i64,
}

/// The `(fragment, of)` of a fragment; `Ok(None)` for an event without `splitEvent`.
///
/// Errors: `Err(())` when `splitEvent` is there but not `{fragment, of}` integers.
fn split_info(raw: &RawDocument) -> Result<Option<(i64, i64)>, ()> {
    let info = match raw.get("splitEvent") {
        Ok(None) => return Ok(None),
        Ok(Some(RawBsonRef::Document(info))) => info,
        Ok(Some(_)) | Err(_) => return Err(()),
    };
    let number = |key: &str| match info.get(key) {
        Ok(Some(RawBsonRef::Int32(n))) => Ok(i64::from(n)),
        Ok(Some(RawBsonRef::Int64(n))) => Ok(n),
        _ => Err(()),
    };
    Ok(Some((number("fragment")?, number("of")?)))
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
        let info = split_info(&raw).map_err(|()| SplitError::Marker { expected })?;
        let Some((fragment, of)) = info else {
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
fn merge(parts: &[RawDocumentBuf]) -> RawDocumentBuf {
    let mut out = RawDocumentBuf::new();
    let mut seen: Vec<&str> = vec!["_id", "splitEvent"];
    if let Some(Ok(Some(token))) = parts.last().map(|p| p.get("_id")) {
        out.append("_id", token.to_raw_bson());
    }
    for part in parts {
        for (key, value) in part.iter().flatten() {
            if !seen.contains(&key) {
                seen.push(key);
                out.append(key, value.to_raw_bson());
            }
        }
    }
    out
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
