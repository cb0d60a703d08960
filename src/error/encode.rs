//! Why a change event could not be encoded into records: the encoder's errors, defined here
//! (below `config` and `encode`) so that [`BridgeError`](super::BridgeError) can carry them.
//!
//! Invariant: an event that cannot be encoded is never dropped: the pipeline stops before it,
//! or `on_ambiguous` diverts it ([`Unrepresentable`]).

/// Why JSON cannot carry a key or a value exactly; the path is from the change event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrepresentable {
    /// The field's dotted path, e.g. `fullDocument.f.$date` or `documentKey._id`.
    pub path: String,
    /// What a parser would do with it.
    pub reason: String,
}

/// Why an event could not be encoded. The bridge never drops such an event: it stops.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    /// The server sent BSON the encoder could not read.
    #[error("malformed change event: {0}")]
    Malformed(String),
    /// The event has no `_id` (resume token): the pipeline removed it, which MongoDB forbids.
    #[error("change event has no _id (resume token); do not $project it away in `pipeline`")]
    MissingToken,
    /// A document event (insert, update, replace, delete) has no `documentKey`: the user's
    /// pipeline removed it. Keying it otherwise would merge distinct documents on one key.
    #[error(
        "{0} event has no documentKey; the `pipeline` stages must keep it (it is the record key)"
    )]
    MissingDocumentKey(String),
    /// `on_ambiguous = "fail"` and JSON cannot carry the event exactly.
    #[error(
        "the event of document {key} cannot be written as Extended JSON exactly: field {path:?}: \
         {reason}. Remedy: set on_ambiguous = \"bson\" (that event is published as BSON) or \
         \"dead_letter\" (a stub goes to dead_letter_topic), or format = \"bson\" for every \
         event{utf8}",
        path = problem.path, reason = problem.reason
    )]
    Unrepresentable {
        /// The document key, as canonical Extended JSON as best it can be written.
        key: String,
        /// Where and why.
        problem: Unrepresentable,
        /// A hint for invalid UTF-8.
        utf8: &'static str,
    },
}
