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
//!   event in a single fragment (`of: 1`) that already has that shape is the server's document
//!   less its `splitEvent`, in place (any other goes through the merge).
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
    /// Whether the fragment is plain: `_id` first, each top-level field once, every element
    /// readable (then a single fragment only loses its marker; else it is merged).
    plain: bool,
}

/// The marker of a fragment; `Ok(None)` for an event without `splitEvent`. One pass over the
/// top-level elements.
///
/// Errors: `Err(())` when `splitEvent` is there but not `{fragment, of}` integers, or when an
/// element before it cannot be read (it may hide the marker).
fn marker(raw: &RawDocument) -> Result<Option<Marker>, ()> {
    let bytes = raw.as_bytes();
    let mut walk = Elements::new(bytes);
    let mut keys = Keys::default();
    while let Some(element) = walk.next() {
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
                plain: plain_after(walk, keys),
                at: element.range,
            }));
        }
        keys.push(element.key);
    }
    Ok(None)
}

/// The top-level keys of a fragment, on the stack: a change event has about ten fields; one
/// with more than [`Keys::MAX`] is never taken for plain (it is merged, which is correct too).
/// Pushing only stores: the checks run in [`plain_after`], on the marker's path alone.
#[derive(Default)]
struct Keys<'a> {
    keys: [&'a [u8]; Keys::MAX],
    len: usize,
    /// More than `MAX` came.
    overflow: bool,
}

impl<'a> Keys<'a> {
    const MAX: usize = 24;

    fn push(&mut self, key: &'a [u8]) {
        match self.keys.get_mut(self.len) {
            Some(slot) => {
                *slot = key;
                self.len += 1;
            }
            None => self.overflow = true,
        }
    }
}

/// Whether the rest of `walk` is readable and the fields (`keys` before the marker, the marker,
/// then the rest) start with `_id` and hold no key twice (a second marker included).
fn plain_after<'a>(walk: Elements<'a>, mut keys: Keys<'a>) -> bool {
    keys.push(b"splitEvent");
    for element in walk {
        match element {
            Ok(element) => keys.push(element.key),
            Err(()) => return false,
        }
    }
    let keys = &keys.keys[..keys.len * usize::from(!keys.overflow)];
    // Slices compare their lengths first: cheap for field names.
    keys.first().is_some_and(|k| *k == b"_id")
        && (1..keys.len()).all(|i| !keys[..i].contains(&keys[i]))
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
        let Some(Marker {
            fragment,
            of,
            at,
            plain,
        }) = info
        else {
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
        if of == 1 && plain {
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
mod tests;
