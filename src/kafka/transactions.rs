//! Kafka transactions of an exactly-once pipeline's producer (`delivery = "exactly_once"`,
//! KIP-98; librdkafka `INTRODUCTION.md` "Transactional Producer").
//!
//! Invariants:
//! - The producer's `transactional.id` is stable per pipeline ([`crate::Config::transactional_id`]):
//!   `init_transactions` on a new producer fences every earlier one of the same id and aborts
//!   its open transaction, so a crashed or paused owner's records never become visible.
//! - `init_transactions`, commit and abort block (they wait for the coordinator): they run on
//!   the blocking pool, never on a runtime thread. `begin_transaction` is local.
//! - A producer whose transaction failed is never reused: the pipeline builds a new one
//!   ([`crate::pipeline`]), whose `init_transactions` aborts what the old one left open.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;

use super::sink::KafkaSink;

impl KafkaSink {
    /// Whether the producer is transactional.
    pub fn is_transactional(&self) -> bool {
        self.transactional_id.is_some()
    }

    /// `transactional.id` of a transactional producer.
    pub fn transactional_id(&self) -> Option<&str> {
        self.transactional_id.as_deref()
    }

    /// Registers the `transactional.id` with its coordinator (fencing earlier producers of the
    /// id, aborting their open transaction), once per producer: later calls return at once.
    /// Waits up to `timeout`.
    ///
    /// Errors: librdkafka's, e.g. a timeout when no coordinator answers (retriable), or
    /// `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`.
    pub async fn init_transactions(&self, timeout: Duration) -> Result<(), KafkaError> {
        if self.initialized.load(Ordering::Acquire) {
            return Ok(());
        }
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.init_transactions(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))?;
        self.initialized.store(true, Ordering::Release);
        Ok(())
    }

    /// Begins a transaction (local: no request is made until a record is produced).
    ///
    /// Errors: librdkafka's state errors (a transaction already open, a fatal error).
    pub fn begin_transaction(&self) -> Result<(), KafkaError> {
        self.producer.begin_transaction()
    }

    /// Flushes and commits the open transaction, waiting up to `timeout`.
    ///
    /// Errors: librdkafka's; a failed commit leaves the transaction to abort.
    pub async fn commit_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.commit_transaction(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))
    }

    /// Aborts the open transaction (its records stay invisible to `read_committed` consumers),
    /// waiting up to `timeout`.
    ///
    /// Errors: librdkafka's (e.g. a fenced producer cannot abort; the next producer's
    /// `init_transactions` does it then).
    pub async fn abort_transaction(&self, timeout: Duration) -> Result<(), KafkaError> {
        let producer = Arc::clone(&self.producer);
        tokio::task::spawn_blocking(move || producer.abort_transaction(timeout))
            .await
            .unwrap_or_else(|_| Err(KafkaError::Canceled))
    }
}
