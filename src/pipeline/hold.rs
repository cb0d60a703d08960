//! Holding the lease while a run starts: between the take (or reload) of the offsets and the
//! checkpointer's first renewal, a run opens its change stream, may commit its initial position
//! and checks its topics. On real MongoDB a resume far back in the oplog can take many seconds
//! to answer; a loaded server takes longer still. Without renewals in that window a standby
//! would find the lease lapsed and take the pipeline from an owner that is only starting, which
//! then starts again after it: the two swap forever.
//!
//! Invariants:
//! - While the start's work is pending, `leaseUntil` is renewed every renewal interval (the
//!   commit interval, as the checkpointer does) with the run's epoch.
//! - A renewal that finds another epoch ends the start with [`BridgeError::Fenced`] (the policy
//!   stands by); a renewal that fails otherwise is retried at the next tick, and the relay's
//!   self-fencing still bounds what an instance that could not renew publishes.

use std::time::Duration;

use tracing::debug;

use crate::error::{BridgeError, report};
use crate::offsets::OffsetsStore;

/// Runs `work` and renews the lease of `epoch` every `every` until it completes.
///
/// Errors: [`BridgeError::Fenced`] when a renewal finds that another instance took the
/// pipeline (the work is dropped); otherwise the work's own result.
pub(super) async fn holding<T>(
    store: &OffsetsStore,
    epoch: i64,
    every: Duration,
    work: impl Future<Output = Result<T, BridgeError>>,
) -> Result<T, BridgeError> {
    renewing(|| store.renew(epoch), every, work).await
}

/// [`holding`] with the renewal as a function (one `leaseUntil` write per call).
async fn renewing<T, R>(
    mut renew: impl FnMut() -> R,
    every: Duration,
    work: impl Future<Output = Result<T, BridgeError>>,
) -> Result<T, BridgeError>
where
    R: Future<Output = Result<(), BridgeError>>,
{
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick completes at once: the take (or reload) has just written the lease.
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => match renew().await {
                Ok(()) => {}
                Err(fenced @ BridgeError::Fenced { .. }) => return Err(fenced),
                Err(e) => debug!(error = %report(&e, &[]),
                                 "lease renewal during the start failed; retrying"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    //! On tokio's paused clock: the renewal counts do not depend on the machine's load.
    use std::cell::Cell;

    use super::*;

    fn fenced() -> BridgeError {
        BridgeError::Fenced {
            pipeline: "p".into(),
            epoch: 4,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_start_renews_every_interval_and_returns_its_result() {
        let renewals = Cell::new(0);
        let slow = async {
            tokio::time::sleep(Duration::from_millis(350)).await;
            Ok::<_, BridgeError>(7)
        };
        let renew = || {
            renewals.set(renewals.get() + 1);
            async { Ok(()) }
        };
        let out = renewing(renew, Duration::from_millis(100), slow).await;
        assert_eq!(out.ok(), Some(7));
        assert_eq!(renewals.get(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_finds_another_epoch_ends_the_start_fenced() {
        let never = std::future::pending::<Result<(), BridgeError>>();
        let renew = || async { Err(fenced()) };
        let out = renewing(renew, Duration::from_millis(10), never).await;
        assert!(
            matches!(out, Err(BridgeError::Fenced { epoch: 4, .. })),
            "{out:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_at_the_next_tick() {
        let calls = Cell::new(0);
        let slow = async {
            tokio::time::sleep(Duration::from_millis(250)).await;
            Ok::<_, BridgeError>(())
        };
        let renew = || {
            calls.set(calls.get() + 1);
            async {
                Err(BridgeError::OffsetsDocument {
                    pipeline: "p".into(),
                    reason: "unreachable".into(),
                })
            }
        };
        let out = renewing(renew, Duration::from_millis(100), slow).await;
        assert!(out.is_ok(), "{out:?}");
        assert_eq!(calls.get(), 2);
    }
}
