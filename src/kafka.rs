//! Kafka: the one home of everything that talks to librdkafka.
//!
//! - [`sink`]: the pipeline's idempotent producer; enqueueing and flushing.
//! - [`delivery`]: what an enqueued record became (delivered, refused, cancelled), and the future
//!   that stands for one change event in the relay's ordered window.
//! - [`admin`]: metadata, topic configurations and topic creation (`check`, `[kafka.topic_creation]`).
//! - [`context`]: the clients' librdkafka context: statistics as metrics, logs made actionable.
//! - [`limits`]: what each topic accepts per record batch, against what the producer batches.
//! - [`group`]: the group membership's consumer (`[bridge] group_id`) and its thread.
//! - [`exactly_once`]: the transactional producer's calls, the progress topic's startup read.
//! - `debezium`: reading a Kafka Connect offsets topic (`offsets import debezium`); it runs on
//!   the blocking pool, where its consumer is also destroyed.
//!
//! Every client takes its librdkafka configuration from `config/` (`config/kafka.rs`,
//! `config/group.rs`, `config/exactly_once.rs`), the one place that names librdkafka's
//! properties: the protected producer settings (idempotence, `acks=all`, at most 5 requests in
//! flight, `murmur2_random`) are set there, last.
//!
//! Invariants:
//! - Every librdkafka client (producer, admin, consumer) is held in a [`Detached`], so its destroy
//!   (which blocks: purge, a flush of up to 500 ms, joining librdkafka's threads) runs on the
//!   blocking pool, never on a runtime thread that other pipelines and `/healthz` share.

use std::ops::Deref;

pub(crate) mod admin;
pub(crate) mod context;
pub(crate) mod debezium;
pub(crate) mod delivery;
pub(crate) mod exactly_once;
pub(crate) mod group;
pub(crate) mod limits;
pub(crate) mod sink;

/// A value whose drop blocks (a librdkafka client), dropped on the blocking pool when the last
/// owner lets go inside a Tokio runtime, inline otherwise. Dereferences to the value.
pub(crate) struct Detached<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Detached<T> {
    /// Wraps `value`.
    pub(crate) fn new(value: T) -> Self {
        Self(Some(value))
    }
}

impl<T: Send + 'static> Deref for Detached<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("a Detached holds its value until it is dropped")
    }
}

impl<T: Send + 'static> Drop for Detached<T> {
    fn drop(&mut self) {
        let Some(value) = self.0.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || drop(value));
            }
            Err(_) => drop(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// Records the name of the thread that drops it.
    struct Probe(mpsc::Sender<Option<String>>);

    impl Drop for Probe {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = self.0.send(name);
        }
    }

    #[test]
    fn a_detached_value_is_destroyed_on_the_blocking_pool() {
        // GIVEN a runtime whose only other threads are its blocking pool's, named so
        let runtime = tokio::runtime::Builder::new_current_thread()
            .thread_name("blocking-pool")
            .build()
            .expect("runtime");
        let (tx, rx) = mpsc::channel();
        // WHEN a Detached value is dropped on the runtime thread
        runtime.block_on(async {
            drop(Detached::new(Probe(tx.clone())));
        });
        // THEN its destructor ran on a blocking-pool thread
        let name = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("dropped");
        assert_eq!(name.as_deref(), Some("blocking-pool"));
        // AND outside a runtime it is dropped inline
        drop(Detached::new(Probe(tx)));
        let here = std::thread::current().name().map(str::to_owned);
        assert_eq!(rx.recv().expect("dropped"), here);
        drop(runtime);
    }
}
