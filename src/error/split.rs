//! Why the fragments of a split change event (`$changeStreamSplitLargeEvent`) do not form one
//! event: the reassembler's error, defined here so that [`BridgeError`](super::BridgeError) can
//! carry it.

/// Fragments received out of sequence.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("split change event out of sequence: expected fragment {expected}, got {got} of {of}")]
pub struct SplitError {
    /// The fragment number expected next.
    pub expected: i64,
    /// The fragment number received (0 when the event was not a fragment).
    pub got: i64,
    /// The number of fragments announced.
    pub of: i64,
}
