//! What a pipeline does after a run failed: what the error means for the operator
//! ([`explain`]), the one function that turns an error into the next step ([`decide`]), and how
//! long a restart waits ([`backoff`]).
//!
//! Invariants:
//! - An outage ([`ErrorClass::Transient`]) is retried for as long as it lasts: an outage must
//!   never stop the bridge.
//! - An error that needs an operator ([`ErrorClass::Persistent`]) is retried at most
//!   `[bridge] persistent_error_attempts` consecutive times, then the pipeline stops with the
//!   fix named ([`BridgeError::remedy`]). A run that failed otherwise, or that lasted, resets the
//!   count.
//! - Fenced means another instance owns the pipeline now: this one stands by, it never takes
//!   the pipeline back by restarting (two replicas would steal it from each other forever).

use std::time::Duration;

use rand::Rng;

use tracing::warn;

use super::context::PipelineContext;
use crate::config::OnHistoryLost;
use crate::error::cluster::ClusterError;
use crate::error::{BridgeError, ErrorClass};
use crate::offsets::OffsetsStore;

/// The next step of a pipeline whose run ended with an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Restart from the committed position after a capped, jittered backoff.
    Restart,
    /// Reopen the stream at once, after the `invalidate` (`startAfter` its token).
    Reopen,
    /// `on_history_lost = "skip"` or `"snapshot"`: publish gap markers, move the position to
    /// the current cluster time (with `snapshot`, requesting a re-sync), restart there at once.
    SkipHistory,
    /// Another instance owns the pipeline: stand by until its lease lapses.
    StandBy,
    /// The configured stream, or the MongoDB cluster, differs from the one the position
    /// belongs to: this pipeline stops, not ready, and the others run on.
    Refuse,
    /// Stop the pipeline; the process exits non-zero once the other pipelines drained.
    Stop,
}

/// Consecutive failed runs of a pipeline whose errors need an operator.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempts {
    persistent: u32,
    limit: u32,
}

impl Attempts {
    /// No failure yet; `limit` is `[bridge] persistent_error_attempts`.
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            persistent: 0,
            limit: limit.max(1),
        }
    }

    /// A run lasted long enough to count as healthy: the count starts again.
    pub(crate) fn healthy_run(&mut self) {
        self.persistent = 0;
    }

    /// Consecutive persistent failures so far.
    pub(crate) fn persistent(&self) -> u32 {
        self.persistent
    }
}

/// The next step after `error`, for a pipeline whose history-loss policy is `on_history_lost`.
pub(crate) fn decide(
    error: &BridgeError,
    on_history_lost: OnHistoryLost,
    attempts: &mut Attempts,
) -> Action {
    match error {
        BridgeError::Fenced { .. } => return Action::StandBy,
        refused if is_refusal(refused) => return Action::Refuse,
        BridgeError::StreamClosed { .. } => return Action::Reopen,
        BridgeError::HistoryLost { .. } if on_history_lost != OnHistoryLost::Fail => {
            return Action::SkipHistory;
        }
        _ => {}
    }
    match error.class() {
        ErrorClass::Transient => {
            attempts.persistent = 0;
            Action::Restart
        }
        ErrorClass::Persistent => {
            attempts.persistent += 1;
            if attempts.persistent >= attempts.limit {
                Action::Stop
            } else {
                Action::Restart
            }
        }
        ErrorClass::Fatal => Action::Stop,
    }
}

/// Whether `error` says the pipeline's position belongs to something else than what it runs
/// on: another stream identity, or another MongoDB cluster. Such a pipeline is refused; it
/// never runs until an operator decides (`offsets reset`, `accept-config`, `accept-cluster`).
pub(super) fn is_refusal(error: &BridgeError) -> bool {
    match error {
        BridgeError::ConfigChanged { .. } => true,
        BridgeError::Cluster(e) => matches!(**e, ClusterError::Changed { .. }),
        _ => false,
    }
}

/// `error` with what the operator needs to know: a lost history names the position committed
/// last (history can be lost mid-run, after the run committed more than it started from); a
/// server-selection failure (also of the cluster's identity read, or its timeout) becomes the
/// replica-set name mismatch behind it, if that is the cause.
pub(super) async fn explain(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: Option<i64>,
    error: BridgeError,
) -> BridgeError {
    match error {
        BridgeError::HistoryLost {
            pipeline,
            cluster_time,
            source,
        } => {
            let committed = match epoch {
                Some(epoch) => store.load(epoch).await.ok(),
                None => None,
            };
            let cluster_time = committed
                .and_then(|o| o.cluster_time.or(o.position_time))
                .map_or(cluster_time, crate::event::format_timestamp);
            BridgeError::HistoryLost {
                pipeline,
                cluster_time,
                source,
            }
        }
        BridgeError::Source { ref source, .. } | BridgeError::Checkpoint { ref source, .. }
            if crate::error::is_server_selection(source) =>
        {
            crate::mongo::replica_set_mismatch(&ctx.config)
                .await
                .unwrap_or(error)
        }
        BridgeError::Cluster(ref e) if e.is_unanswered() => {
            crate::mongo::replica_set_mismatch(&ctx.config)
                .await
                .unwrap_or(error)
        }
        error if error.is_producer_fenced() => coordinator_or_owner(store, epoch, error).await,
        // A delivery that may have met a missing topic: `missing_topic` decides which.
        other => super::missing_topic::explain(ctx, other).await,
    }
}

/// A fenced transactional producer: another instance took the pipeline (a newer epoch in the
/// offsets document: [`BridgeError::Fenced`]), or the transaction coordinator timed our
/// transaction out and bumped the producer epoch (KAFKA-6119, librdkafka#3297), which is
/// transient: the restart builds a new producer. Stays `error` when the document cannot be
/// read (transient either way).
async fn coordinator_or_owner(
    store: &OffsetsStore,
    epoch: Option<i64>,
    error: BridgeError,
) -> BridgeError {
    let Some(held) = epoch else { return error };
    match store.read().await {
        Ok(Some(doc)) if doc.epoch != Some(held) => BridgeError::Fenced {
            pipeline: store.pipeline().to_owned(),
            epoch: held,
        },
        Ok(_) => {
            warn!(pipeline = %store.pipeline(), epoch = held,
                  "the Kafka transaction coordinator fenced our producer while the offsets \
                   document still names us the owner: a transaction timed out \
                   (transaction.timeout.ms); restarting with a new producer");
            error
        }
        Err(_) => error,
    }
}

/// Full-jitter exponential backoff: uniform in `[50 ms, min(cap, 100 ms × 2^attempt)]`.
pub(crate) fn backoff(attempt: u32, cap_ms: u64) -> Duration {
    let ceiling = 100u64
        .saturating_mul(1u64 << attempt.min(20))
        .clamp(50, cap_ms.max(50));
    Duration::from_millis(rand::rng().random_range(50..=ceiling))
}

#[cfg(test)]
mod tests {
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    use super::*;

    fn delivery(code: RDKafkaErrorCode) -> BridgeError {
        BridgeError::Delivery {
            pipeline: "p".into(),
            topic: "t".into(),
            source: Box::new(KafkaError::MessageProduction(code)),
        }
    }

    #[test]
    fn outages_retry_forever() {
        let mut attempts = Attempts::new(3);
        for _ in 0..100 {
            assert_eq!(
                decide(
                    &delivery(RDKafkaErrorCode::MessageTimedOut),
                    OnHistoryLost::Fail,
                    &mut attempts
                ),
                Action::Restart
            );
        }
    }

    /// The actions `decide` takes for `errors` in turn, under `OnHistoryLost::Fail`.
    fn steps(errors: &[&BridgeError], attempts: &mut Attempts) -> Vec<Action> {
        errors
            .iter()
            .map(|error| decide(error, OnHistoryLost::Fail, attempts))
            .collect()
    }

    #[test]
    fn a_persistent_error_stops_after_the_configured_attempts() {
        // GIVEN a limit of 3 consecutive attempts
        let mut attempts = Attempts::new(3);
        let unknown = delivery(RDKafkaErrorCode::UnknownTopicOrPartition);
        // THEN the first two failures restart, the third stops
        assert_eq!(
            steps(&[&unknown, &unknown, &unknown], &mut attempts),
            [Action::Restart, Action::Restart, Action::Stop]
        );
        assert_eq!(attempts.persistent(), 3);
    }

    #[test]
    fn an_outage_or_a_healthy_run_resets_the_count() {
        let mut attempts = Attempts::new(2);
        let unknown = delivery(RDKafkaErrorCode::UnknownTopicOrPartition);
        let timeout = delivery(RDKafkaErrorCode::MessageTimedOut);
        assert_eq!(
            steps(&[&unknown, &timeout, &unknown], &mut attempts),
            [Action::Restart; 3]
        );
        attempts.healthy_run();
        assert_eq!(
            steps(&[&unknown, &unknown], &mut attempts),
            [Action::Restart, Action::Stop]
        );
    }

    #[test]
    fn fencing_invalidation_and_history_loss_have_their_own_steps() {
        let mut attempts = Attempts::new(10);
        let fenced = BridgeError::Fenced {
            pipeline: "p".into(),
            epoch: 1,
        };
        assert_eq!(
            decide(&fenced, OnHistoryLost::Fail, &mut attempts),
            Action::StandBy
        );
        let closed = BridgeError::StreamClosed {
            pipeline: "p".into(),
        };
        assert_eq!(
            decide(&closed, OnHistoryLost::Fail, &mut attempts),
            Action::Reopen
        );
        let lost = BridgeError::HistoryLost {
            pipeline: "p".into(),
            cluster_time: "1.1".into(),
            source: Box::new(crate::error::tests::command_error(286)),
        };
        assert_eq!(
            decide(&lost, OnHistoryLost::Skip, &mut attempts),
            Action::SkipHistory
        );
        assert_eq!(
            decide(&lost, OnHistoryLost::Fail, &mut attempts),
            Action::Stop
        );
        let config = BridgeError::Config {
            field: "f".into(),
            reason: "r".into(),
        };
        assert_eq!(
            decide(&config, OnHistoryLost::Fail, &mut attempts),
            Action::Stop
        );
    }

    #[test]
    fn another_cluster_is_refused_and_an_unread_one_is_retried() {
        let mut attempts = Attempts::new(10);
        let cluster = |e| BridgeError::Cluster(Box::new(e));
        let moved = cluster(ClusterError::Changed {
            pipeline: "p".into(),
            stored: "replica set \"a\" (replicaSetId 1)".into(),
            found: "replica set \"b\" (replicaSetId 2)".into(),
        });
        assert_eq!(
            decide(&moved, OnHistoryLost::Fail, &mut attempts),
            Action::Refuse
        );
        // No answer in time: an outage, retried for as long as it lasts.
        let unanswered = cluster(ClusterError::Unread {
            pipeline: "p".into(),
            what: "no answer within 45 s".into(),
            source: None,
        });
        for _ in 0..20 {
            assert_eq!(
                decide(&unanswered, OnHistoryLost::Fail, &mut attempts),
                Action::Restart
            );
        }
        // A failed login stops, as it would at any other step.
        let login = cluster(ClusterError::Unread {
            pipeline: "p".into(),
            what: "the server could not be asked".into(),
            source: Some(Box::new(crate::error::tests::command_error(18))),
        });
        assert_eq!(
            decide(&login, OnHistoryLost::Fail, &mut attempts),
            Action::Stop
        );
    }

    #[test]
    fn backoff_stays_within_its_bounds() {
        for attempt in 0..40 {
            let d = backoff(attempt, 30_000).as_millis() as u64;
            assert!((50..=30_000).contains(&d), "{attempt}: {d}");
            let ceiling = 100u64
                .saturating_mul(1 << attempt.min(20))
                .clamp(50, 30_000);
            assert!(d <= ceiling, "{attempt}: {d} > {ceiling}");
        }
    }
}
