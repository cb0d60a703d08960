//! How an exactly-once pipeline's offsets document stands against Kafka: the newest committed
//! progress record (read `read_committed`) is the truth, the document a copy of it.
//!
//! The rule ([`standing`]), for a document and the newest committed record of the same
//! pipeline (`offsets/exactly_once.rs` has their shapes):
//! 1. the record is newer by `(resetSequence, commitSequence)`: Kafka committed a transaction
//!    whose offsets write never happened (a stop between the two) — the document is brought
//!    forward ([`Standing::KafkaAhead`]);
//! 2. the document's last commit was an exactly-once one (`delivery = "exactly_once"`) of the
//!    record's reset, and it is ahead of the record (a higher `commitSequence`, or the same
//!    one with another resume token): it claims a transaction Kafka does not show — a commit
//!    reported OK that never became visible (librdkafka once let `commit_transaction` succeed
//!    for timed-out messages, confluentinc/librdkafka 1.5.2 and 1.6.1 changelogs), a
//!    coordinator that aborted a timed-out transaction, or an edit by hand. It is never
//!    trusted: the pipeline resumes from the record, and the document is rewound to it
//!    ([`Standing::DocumentAhead`]);
//! 3. otherwise the document stands ([`Standing::Consistent`]): the same position, or one the
//!    record cannot speak for (a later `offsets reset` or import raised `resetSequence`; the
//!    pipeline ran at least once since its last transaction, `delivery = "at_least_once"`).
//!
//! Why 2 holds: the relay publishes an exactly-once position only after the transaction that
//! carries it committed (`relay/exactly_once.rs`), positions with no record behind them
//! (watermarks, snapshot states) included, which commit a transaction of the progress record
//! alone (`relay/exactly_once/positions.rs`). So every document the bridge wrote with
//! `delivery = "exactly_once"` has a committed record of its sequence, holding its token.

use super::{ProgressRecord, Sequences, newer};
use crate::error::BridgeError;
use crate::offsets::store::OffsetsStore;
use crate::offsets::{OffsetsDoc, fields};

/// How a document stands against the newest committed progress record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The same position, or one the record cannot speak for: start from the document.
    Consistent,
    /// Kafka committed more than the document says: bring it forward.
    KafkaAhead,
    /// The document claims a transaction Kafka does not show: start from the record.
    DocumentAhead,
}

/// The module's rule for `doc` against `record`.
pub(crate) fn standing(doc: &OffsetsDoc, record: &ProgressRecord) -> Standing {
    let ours = Sequences {
        reset: doc.reset_sequence,
        commit: doc.commit_sequence,
    };
    if newer(record.sequences, ours) {
        return Standing::KafkaAhead;
    }
    let exactly_once = doc.delivery.as_deref() == Some("exactly_once");
    if !exactly_once || ours.reset != record.sequences.reset {
        return Standing::Consistent;
    }
    let same_token = match (
        &doc.resume_token,
        record.doc.get_document(fields::RESUME_TOKEN),
    ) {
        (Some(ours), Ok(theirs)) => ours.to_document().ok().as_ref() == Some(theirs),
        (None, Err(_)) => true,
        _ => false,
    };
    if ours.commit > record.sequences.commit || !same_token {
        Standing::DocumentAhead
    } else {
        Standing::Consistent
    }
}

impl OffsetsStore {
    /// Rewinds the document to `record`'s position, found at `offset` of the progress topic
    /// ([`Standing::DocumentAhead`]): its position, `commitSequence` and `eventsCommitted`
    /// become the record's (the sequence the document claimed was never committed in Kafka,
    /// so the next transaction takes it again), keeping our epoch and lease.
    ///
    /// Errors: [`BridgeError::Fenced`] when our epoch is no longer current.
    pub(crate) async fn rewind(
        &self,
        epoch: i64,
        record: &ProgressRecord,
        offset: i64,
    ) -> Result<(), BridgeError> {
        self.update(epoch, record.update(offset, "$set")).await
    }
}

#[cfg(test)]
mod tests {
    use bson::{Document, doc};

    use super::*;

    fn record(reset: i64, commit: i64, token: &str) -> ProgressRecord {
        ProgressRecord {
            doc: doc! { fields::RESUME_TOKEN: { "_data": token } },
            sequences: Sequences { reset, commit },
            epoch: 1,
        }
    }

    fn document(reset: i64, commit: i64, token: &str, delivery: &str) -> OffsetsDoc {
        let d: Document = doc! {
            "_id": "p",
            fields::RESET_SEQUENCE: reset,
            fields::COMMIT_SEQUENCE: commit,
            fields::DELIVERY: delivery,
            fields::RESUME_TOKEN: { "_data": token },
        };
        OffsetsDoc::parse(&d).expect("a valid document")
    }

    #[test]
    fn kafka_ahead_brings_the_document_forward() {
        let d = document(0, 300, "A", "exactly_once");
        assert_eq!(standing(&d, &record(0, 301, "B")), Standing::KafkaAhead);
        assert_eq!(standing(&d, &record(1, 0, "B")), Standing::KafkaAhead);
    }

    #[test]
    fn a_document_ahead_of_kafka_is_never_trusted() {
        // A commit that never became visible: a higher sequence and a later token.
        let d = document(0, 301, "B", "exactly_once");
        assert_eq!(standing(&d, &record(0, 300, "A")), Standing::DocumentAhead);
        // The same sequence with another token: not the position Kafka committed.
        let d = document(0, 300, "B", "exactly_once");
        assert_eq!(standing(&d, &record(0, 300, "A")), Standing::DocumentAhead);
        // Only the sequence raised.
        let d = document(0, 301, "A", "exactly_once");
        assert_eq!(standing(&d, &record(0, 300, "A")), Standing::DocumentAhead);
    }

    #[test]
    fn a_rewind_lowers_the_sequence_a_bring_forward_only_raises() {
        let mut r = record(0, 300, "A");
        r.doc.insert(fields::EVENTS_COMMITTED, 300_i64);
        let rewind = r.update(7, "$set");
        let set = rewind.get_document("$set").expect("$set");
        assert_eq!(set.get_i64(fields::COMMIT_SEQUENCE), Ok(300));
        assert_eq!(set.get_i64(fields::EVENTS_COMMITTED), Ok(300));
        assert_eq!(set.get_i64(fields::PROGRESS_OFFSET), Ok(7));
        assert!(!rewind.contains_key("$max"));
        let forward = r.update(7, "$max");
        let max = forward.get_document("$max").expect("$max");
        assert_eq!(max.get_i64(fields::COMMIT_SEQUENCE), Ok(300));
        let set = forward.get_document("$set").expect("$set");
        assert!(!set.contains_key(fields::COMMIT_SEQUENCE));
    }

    #[test]
    fn what_the_record_cannot_speak_for_stands() {
        let same = document(0, 300, "A", "exactly_once");
        assert_eq!(standing(&same, &record(0, 300, "A")), Standing::Consistent);
        // An operator's reset since the record.
        let reset = document(1, 2, "C", "exactly_once");
        assert_eq!(standing(&reset, &record(0, 300, "A")), Standing::Consistent);
        // At least once since the last transaction.
        let alo = document(0, 900, "D", "at_least_once");
        assert_eq!(standing(&alo, &record(0, 300, "A")), Standing::Consistent);
    }
}
