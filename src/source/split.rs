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

fn split_info(raw: &RawDocument) -> Option<(i64, i64)> {
    let info = raw.get_document("splitEvent").ok()?;
    let number = |key: &str| match info.get(key).ok().flatten()? {
        RawBsonRef::Int32(n) => Some(i64::from(n)),
        RawBsonRef::Int64(n) => Some(n),
        _ => None,
    };
    Some((number("fragment")?, number("of")?))
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
        let Some((fragment, of)) = split_info(&raw) else {
            if self.is_pending() {
                return Err(SplitError {
                    expected,
                    got: 0,
                    of: self.of,
                });
            }
            return Ok(Some(raw));
        };
        if fragment != expected || (self.is_pending() && of != self.of) || of < 1 {
            return Err(SplitError {
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
            Err(SplitError {
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
            Err(SplitError {
                expected: 2,
                got: 0,
                of: 2
            })
        );
    }
}
