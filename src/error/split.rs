//! Why the fragments of a split change event (`$changeStreamSplitLargeEvent`) do not form one
//! event: the reassembler's error, defined here so that [`BridgeError`](super::BridgeError) can
//! carry it.

/// Fragments received out of sequence, or a fragment marker that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SplitError {
    /// A fragment other than the one expected next.
    #[error("split change event out of sequence: expected fragment {expected}, got {got} of {of}")]
    OutOfSequence {
        /// The fragment number expected next.
        expected: i64,
        /// The fragment number received (0 when the event was not a fragment).
        got: i64,
        /// The number of fragments announced.
        of: i64,
    },
    /// An event with a `splitEvent` field that is not `{fragment: <integer>, of: <integer>}`:
    /// it may be a fragment, so it is never taken for a whole event.
    #[error(
        "split change event marker unreadable: splitEvent must be {{fragment, of}} integers \
         (expected fragment {expected})"
    )]
    Marker {
        /// The fragment number expected next.
        expected: i64,
    },
}
