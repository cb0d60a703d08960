//! Exactly once (`delivery = "exactly_once"`): the design, and the relay's Kafka transactions.
//!
//! ```text
//!  source ─▶ relay ── begin ─▶ records ─▶ (drain) ─▶ progress record ─▶ commit_transaction ─┐
//!                                                         (one Kafka transaction)          │
//!            checkpointer ◀── publish the state (commit sequence, progress offset) ◀───────┘
//!            offsets document ◀── the same position and commit sequence
//! ```
//!
//! The relay's safe position means "transaction committed", not "record delivered". It opens
//! a Kafka transaction before the first records after a commit and counts events in it; it
//! ends it only at a boundary (below), once `commit_interval_ms` passed or
//! `max_transaction_events` were taken. The commit drains the window (every record of the
//! transaction delivered), enqueues the progress record of the delivered prefix's state with
//! the next commit sequence, calls `commit_transaction`, and only then publishes the state
//! (with that sequence and the progress record's offset) for the checkpointer. At the start of
//! a run (`pipeline/exactly_once.rs`), after `init_transactions` fenced the old producer and
//! aborted its transaction, the newest committed progress record is the latest position Kafka
//! made visible; if it is newer than the offsets document (by `(resetSequence,
//! commitSequence)`), Kafka committed a transaction whose offsets write never happened, and the
//! document is brought forward before the stream opens.
//!
//! The pieces, one file name in every layer: `config/exactly_once.rs` (the rules, the
//! `transactional.id`, the progress topic's and reader's librdkafka configuration),
//! `offsets/exactly_once.rs` (the progress record's shape, which position is newer, bringing
//! the document forward), `kafka/exactly_once.rs` (the transactional producer's calls, the
//! progress topic's startup read), this file (the transactions), `pipeline/exactly_once.rs`
//! (the start of a run), `observe/metrics/exactly_once.rs` (the series) and
//! `cli/check/exactly_once.rs` (the preflight).
//!
//! WARNING: this code decides what becomes visible to `read_committed` consumers together.
//!
//! Invariants:
//! - **MongoDB transactions stay whole.** The change stream has no end-of-transaction event, so
//!   a Kafka transaction ends only at a boundary: before an event outside the MongoDB
//!   transaction (`lsid`, `txnNumber`) of the last event, or where the stream was caught up (an
//!   empty batch: a watermark or [`SourceItem::Idle`](crate::event::SourceItem::Idle); a
//!   transaction's events are applied at once, so none of it is then left unread).
//! - **Position and records together.** The progress record of a transaction carries the
//!   delivered prefix's position, which at commit time is everything the transaction holds (the
//!   window is drained first), so a `read_committed` consumer sees the records and the position
//!   that covers them together or not at all. The checkpointer then writes the same position
//!   and commit sequence to MongoDB: the offsets document is never ahead of Kafka, except by
//!   positions with no record behind them (watermarks, snapshot states), which need no
//!   transaction and take a new commit sequence.
//! - **Bounds.** A transaction ends after `max_transaction_events` events or
//!   `commit_interval_ms`, at the next boundary; so it holds at most that many events plus the
//!   rest of one MongoDB transaction, and lasts at most `commit_interval_ms` plus the rest of
//!   one MongoDB transaction. A MongoDB transaction still open at `transaction.timeout.ms` −
//!   [`MARGIN`] aborts it and fails the run ([`BridgeError::TransactionTooLong`]), never a split.
//! - A failed step leaves the transaction to abort: this relay aborts it when it can, else the
//!   next producer's `init_transactions` does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Relay;
use crate::encode::record::Record;
use crate::error::BridgeError;
use crate::event::TxnId;
use crate::kafka::exactly_once::PARTITION;
use crate::observe::metrics::TransactionMetrics;
use crate::offsets::exactly_once::{ProgressKey, Sequences, position_fields};

/// How long before `transaction.timeout.ms` a Kafka transaction waiting for the end of a
/// MongoDB transaction is aborted: room for the drain and the commit itself.
pub(crate) const MARGIN: Duration = Duration::from_secs(5);

/// An exactly-once relay's transaction state.
pub(crate) struct Transactions {
    progress_topic: Arc<str>,
    key: Vec<u8>,
    owner: ProgressKey,
    epoch: i64,
    /// Of the last commit (a transaction's, or a position's without records).
    sequences: Sequences,
    last_offset: Option<i64>,
    /// `eventsCommitted` of the document the run started from.
    events_before: i64,
    max_events: usize,
    interval: Duration,
    /// `transaction.timeout.ms` − [`MARGIN`].
    limit: Duration,
    /// Bound of each blocking call (commit, abort).
    call_timeout: Duration,
    open: Option<Open>,
    /// A delivered position with no record behind it that no transaction carried yet
    /// (`exactly_once/positions.rs`).
    unsent: bool,
    /// When the last transaction committed.
    last_commit: Instant,
    metrics: TransactionMetrics,
}

/// The open transaction.
struct Open {
    since: Instant,
    events: usize,
    records: usize,
    /// The MongoDB transaction of the last event, while no boundary came after it.
    txn: Option<TxnId>,
}

/// What [`Transactions::new`] takes.
pub(crate) struct TransactionSettings {
    /// `__mongo_kafka_bridge.<offsets_database>.progress`.
    pub progress_topic: String,
    /// Whose progress records the transactions write.
    pub owner: ProgressKey,
    /// Our epoch.
    pub epoch: i64,
    /// The sequences of the position the run starts from.
    pub sequences: Sequences,
    /// The offset of the progress record that position is from, if any.
    pub progress_offset: Option<i64>,
    /// `eventsCommitted` of the document the run starts from (progress records count on).
    pub events_before: i64,
    /// `max_transaction_events`.
    pub max_events: usize,
    /// `commit_interval_ms`.
    pub interval: Duration,
    /// `transaction.timeout.ms`.
    pub transaction_timeout: Duration,
}

impl Transactions {
    /// The state of a run that starts with no transaction open.
    pub(crate) fn new(s: TransactionSettings, metrics: TransactionMetrics) -> Self {
        Self {
            progress_topic: Arc::from(s.progress_topic.as_str()),
            key: s.owner.bytes(),
            owner: s.owner,
            epoch: s.epoch,
            sequences: s.sequences,
            last_offset: s.progress_offset,
            events_before: s.events_before,
            max_events: s.max_events,
            interval: s.interval,
            limit: s.transaction_timeout.saturating_sub(MARGIN),
            call_timeout: s.transaction_timeout,
            open: None,
            unsent: false,
            last_commit: Instant::now(),
            metrics,
        }
    }

    /// Whether a transaction is open.
    pub(crate) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    fn due(&self) -> bool {
        self.open
            .as_ref()
            .is_some_and(|o| o.events >= self.max_events || o.since.elapsed() >= self.interval)
    }

    /// Whether a transaction is open and may end here, with no next item known: its last
    /// event belongs to no MongoDB transaction, or the stream was caught up since.
    fn at_boundary(&self) -> bool {
        self.open.as_ref().is_some_and(|o| o.txn.is_none())
    }

    /// Whether the open transaction may end before an item of MongoDB transaction `next`.
    fn may_end_before(&self, next: Option<&TxnId>) -> bool {
        self.open
            .as_ref()
            .is_some_and(|o| o.txn.is_none() || o.txn.as_ref() != next)
    }

    /// The error of a MongoDB transaction that kept the open Kafka one past its bound.
    fn too_long(&self, pipeline: &str) -> Option<BridgeError> {
        let open = self.open.as_ref()?;
        let txn = open.txn.as_ref()?;
        let elapsed = open.since.elapsed();
        (elapsed >= self.limit).then(|| BridgeError::TransactionTooLong {
            pipeline: pipeline.to_owned(),
            lsid: txn.lsid_text(),
            txn_number: txn.txn_number,
            events: open.events,
            elapsed_ms: elapsed.as_millis() as u64,
            limit_ms: self.limit.as_millis() as u64,
        })
    }
}

impl Relay {
    /// Whether `record` is larger than its topic accepts (exactly-once only): such a record is
    /// refused at enqueue, so the oversize policy stubs it inside the transaction. A broker's
    /// refusal would instead leave the transaction abortable, where no stub can be added.
    pub(super) fn over_topic_limit(&self, record: &Record) -> bool {
        self.transactions.is_some()
            && self
                .topic_limits
                .as_ref()
                .and_then(|l| l.get(&record.topic))
                .is_some_and(|limit| {
                    crate::kafka::limits::single_record_batch(record.size(), record.headers.len())
                        > limit
                })
    }

    /// Before an item whose records belong to MongoDB transaction `next` (`None`: none, or a
    /// snapshot's records): commits the open transaction when it is due and may end here,
    /// then makes sure one is open and counts the item in it.
    ///
    /// Errors: [`BridgeError::TransactionTooLong`], or a failed commit or begin.
    pub(super) async fn before_records(
        &mut self,
        next: Option<&TxnId>,
        is_event: bool,
        records: &[Record],
    ) -> Result<(), BridgeError> {
        let Some(t) = &mut self.transactions else {
            return Ok(());
        };
        let records = records.len();
        if let Some(error) = t.too_long(&self.pipeline) {
            self.abort_transaction().await;
            return Err(error);
        }
        if t.due() && t.may_end_before(next) {
            self.commit_transaction().await?;
        }
        if !self
            .transactions
            .as_ref()
            .is_some_and(Transactions::is_open)
        {
            self.sink
                .begin_transaction()
                .map_err(|e| self.transaction_error("begin", e))?;
        }
        let t = self
            .transactions
            .as_mut()
            .expect("checked above: exactly-once");
        let open = t.open.get_or_insert_with(|| Open {
            since: Instant::now(),
            events: 0,
            records: 0,
            txn: None,
        });
        open.events += usize::from(is_event);
        open.records += records;
        open.txn = next.cloned();
        Ok(())
    }

    /// At an empty batch (or the 500 ms tick): nothing is partly read, the open transaction
    /// may end; commits it when due. `caught_up`: an empty batch (a boundary); the tick only
    /// checks the bounds.
    ///
    /// Errors: [`BridgeError::TransactionTooLong`], or a failed commit.
    pub(super) async fn at_rest(&mut self, caught_up: bool) -> Result<(), BridgeError> {
        let Some(t) = &mut self.transactions else {
            return Ok(());
        };
        if caught_up && let Some(open) = &mut t.open {
            open.txn = None;
        }
        if let Some(error) = t.too_long(&self.pipeline) {
            self.abort_transaction().await;
            return Err(error);
        }
        if t.due() && t.at_boundary() {
            self.commit_transaction().await?;
        }
        self.commit_unsent(false).await
    }

    /// Ends the open transaction at a drain: commits it when it may end here, else aborts it
    /// (a MongoDB transaction is partly read: all of it is read again after the restart).
    pub(super) async fn end_transaction(&mut self) -> Result<(), BridgeError> {
        match &self.transactions {
            Some(t) if t.at_boundary() => self.commit_transaction().await,
            Some(t) if t.is_open() => {
                self.abort_transaction().await;
                Ok(())
            }
            Some(_) => self.commit_unsent_at_drain().await,
            None => Ok(()),
        }
    }

    /// Commits the open transaction: waits until every record of it is delivered, adds the
    /// progress record, commits, then publishes the state with its sequence.
    async fn commit_transaction(&mut self) -> Result<(), BridgeError> {
        while let Some(done) = self.window.next().await {
            self.fold(done?);
        }
        let beat = self.heartbeat_in_transaction().await?;
        let t = self
            .transactions
            .as_ref()
            .expect("only exactly-once relays commit");
        let Some(open) = &t.open else { return Ok(()) };
        let sequences = Sequences {
            reset: t.sequences.reset,
            commit: t.sequences.commit + 1,
        };
        let (mut fields, _) = position_fields(
            self.delivered.stream.as_ref(),
            self.delivered.snapshot.as_deref(),
        )
        .map_err(|reason| BridgeError::OffsetsDocument {
            pipeline: self.pipeline.to_string(),
            reason,
        })?;
        if let Some(position) = &self.delivered.stream {
            let events = t.events_before + position.event_count as i64;
            fields.insert(crate::offsets::fields::EVENTS_COMMITTED, events);
        }
        let record = Record {
            topic: Arc::clone(&t.progress_topic),
            key: t.key.clone(),
            value: Some(t.owner.value(t.epoch, sequences, &fields)),
            headers: Vec::new(),
            partition: Some(PARTITION),
        };
        let (since, records) = (open.since, open.records + 1 + usize::from(beat.is_some()));
        let delivery = self
            .sink
            .enqueue_waiting(&record, Some(PARTITION))
            .await
            .map_err(|e| self.transaction_error("progress", e))?;
        // Delivered before the commit: with a record still in flight, rdkafka's
        // commit_transaction first flushes with a poll that runs its whole 100 ms
        // (rdkafka 0.39 `BaseProducer::flush`), on every commit.
        let offset = match delivery.await {
            Ok(Ok(delivered)) => delivered.offset,
            Ok(Err((e, _))) => return Err(self.transaction_error("progress", e)),
            Err(_) => {
                let cancelled = rdkafka::error::KafkaError::Canceled;
                return Err(self.transaction_error("progress", cancelled));
            }
        };
        crate::failpoint::reach("transaction_committing");
        let started = Instant::now();
        self.sink
            .commit_transaction(t.call_timeout)
            .await
            .map_err(|e| self.transaction_error("commit", e))?;
        let offset = Some(offset);
        let t = self
            .transactions
            .as_mut()
            .expect("only exactly-once relays commit");
        t.metrics.commit.observe(started.elapsed().as_secs_f64());
        t.metrics.duration.observe(since.elapsed().as_secs_f64());
        t.metrics.records.observe(records as f64);
        t.metrics.committed.inc();
        t.open = None;
        t.unsent = false;
        t.last_commit = Instant::now();
        t.sequences = sequences;
        t.last_offset = offset.or(t.last_offset);
        self.delivered.committed = Some((sequences.commit, t.last_offset));
        self.safe.send_replace(self.delivered.clone());
        self.heartbeat_committed(beat);
        Ok(())
    }

    /// Aborts the open transaction, if any; a failure is logged (the next producer's
    /// `init_transactions` aborts it then).
    pub(super) async fn abort_transaction(&mut self) {
        let Some(t) = &mut self.transactions else {
            return;
        };
        let Some(open) = t.open.take() else { return };
        t.metrics.aborted.inc();
        t.metrics
            .duration
            .observe(open.since.elapsed().as_secs_f64());
        let timeout = t.call_timeout.min(Duration::from_secs(10));
        if let Err(e) = self.sink.abort_transaction(timeout).await {
            tracing::warn!(pipeline = %self.pipeline, error = %e,
                "aborting the Kafka transaction failed; the next producer's init_transactions \
                 aborts it");
        }
    }

    pub(super) fn transaction_error(
        &self,
        operation: &'static str,
        source: rdkafka::error::KafkaError,
    ) -> BridgeError {
        BridgeError::Transaction {
            pipeline: self.pipeline.to_string(),
            operation,
            source: Box::new(source),
        }
    }
}

mod positions;
#[cfg(test)]
mod tests;
