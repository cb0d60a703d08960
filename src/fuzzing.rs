//! Entry points for the coverage-guided fuzz targets in `fuzz/` (docs/RELIABILITY.md,
//! "Fuzzing"), for the pieces the fuzzers need that are crate-private.
//!
//! Compiled only when `cargo fuzz` builds the library (it passes `--cfg fuzzing`), so every
//! other build's public API is the one `lib.rs` lists. Each entry point wraps one crate-private
//! piece whole and adds no logic of its own: what is fuzzed is what the bridge runs.

use bson::{Document, RawDocumentBuf};

use crate::error::split::SplitError;
use crate::offsets::exactly_once::ProgressKey;

/// The split-event reassembler (`source/split.rs`), driven as the source's reader drives it.
#[derive(Debug, Default)]
pub struct Reassembler(crate::source::split::Reassembler);

impl Reassembler {
    /// Takes one event or fragment; a whole event when one is complete.
    ///
    /// # Errors
    ///
    /// Fragments out of sequence, or a `splitEvent` marker that cannot be read.
    pub fn push(&mut self, raw: RawDocumentBuf) -> Result<Option<RawDocumentBuf>, SplitError> {
        self.0.push(raw)
    }

    /// Whether fragments are waiting for the rest of their event.
    pub fn is_pending(&self) -> bool {
        self.0.is_pending()
    }
}

/// Decodes a progress record's value (`offsets/exactly_once.rs`) for the key `(pipeline,
/// topic_prefix, stream_uid)`; for a record of that key, the `$set` and `$unset` that bring an
/// offsets document forward to it.
///
/// # Errors
///
/// A value that is not a progress record (named why).
pub fn decode_progress(
    pipeline: &str,
    topic_prefix: &str,
    stream_uid: &str,
    value: &[u8],
) -> Result<Option<(Document, Document)>, String> {
    let key = ProgressKey {
        pipeline: pipeline.to_owned(),
        topic_prefix: topic_prefix.to_owned(),
        stream_uid: stream_uid.to_owned(),
    };
    Ok(key.decode(value)?.map(|record| record.forward_fields()))
}
