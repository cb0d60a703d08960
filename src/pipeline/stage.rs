//! The spawned tasks of a run (source, relay, checkpointer) in one shape: a stage's error *or
//! panic* ends the run, and joining it gives a typed error, never a clean stop.
//!
//! Invariants:
//! - A [`Stage`] whose task panicked or was cancelled joins as [`BridgeError::TaskPanicked`]
//!   naming the pipeline and the task, so the restart policy handles it like any other failure
//!   (`JoinError` is never mapped to `Ok`).
//! - How a failure ends the run is the stage's [`Ends`]: the source's end closes the channel to
//!   the relay, which then delivers what was already read before it stops (an `invalidate` read
//!   last must be committed, or the reopen would read it again forever); the relay's and the
//!   checkpointer's cancel the run.

use std::any::Any;

use tokio::task::{JoinError, JoinHandle};
use tokio_util::sync::CancellationToken;

use crate::error::BridgeError;

/// One spawned task of a run.
pub(super) struct Stage<T> {
    pipeline: String,
    task: &'static str,
    handle: JoinHandle<Result<T, BridgeError>>,
}

/// How a stage's failure ends the run.
pub(super) enum Ends<'a> {
    /// Its error or panic cancels this token (the run).
    Cancelling(&'a CancellationToken),
    /// Its end drops the sender of the next stage's channel, which ends that stage once it has
    /// handled what was sent.
    ClosingItsOutput,
}

/// Spawns `work` as the `task` of `pipeline`'s run; its error or panic ends the run as `ends`.
pub(super) fn spawn<T, F>(pipeline: &str, task: &'static str, ends: Ends<'_>, work: F) -> Stage<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T, BridgeError>> + Send + 'static,
{
    // Dropped without being disarmed (an error, or the unwinding of a panic): cancels the run.
    let guard = match ends {
        Ends::Cancelling(run) => Some(run.clone().drop_guard()),
        Ends::ClosingItsOutput => None,
    };
    let handle = tokio::spawn(async move {
        let result = work.await;
        if result.is_ok() {
            guard.map(tokio_util::sync::DropGuard::disarm);
        }
        result
    });
    Stage {
        pipeline: pipeline.to_owned(),
        task,
        handle,
    }
}

impl<T> Stage<T> {
    /// Waits for the task: its result, or [`BridgeError::TaskPanicked`].
    pub(super) async fn join(self) -> Result<T, BridgeError> {
        match self.handle.await {
            Ok(result) => result,
            Err(e) => Err(panicked(&self.pipeline, self.task, e)),
        }
    }
}

/// The error of a task of `pipeline` that panicked (or was cancelled by the runtime's shutdown).
pub(crate) fn panicked(pipeline: &str, task: &'static str, error: JoinError) -> BridgeError {
    let message = if error.is_panic() {
        panic_message(error.into_panic())
    } else {
        "the task was cancelled (the runtime is shutting down)".to_owned()
    };
    BridgeError::TaskPanicked {
        pipeline: pipeline.to_owned(),
        task,
        message,
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => payload.downcast::<&'static str>().map_or_else(
            |_| "(a panic without a message)".to_owned(),
            |t| (*t).to_owned(),
        ),
    }
}

/// Runs `work` unless `cancel` fires first (`None`): startup steps that may wait for a server
/// (taking the offsets, opening the stream) must not delay a shutdown.
pub(super) async fn cancellable<T>(
    cancel: &CancellationToken,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => None,
        out = work => Some(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_stage_is_an_error_that_cancels_the_run() {
        // GIVEN a run with one stage that panics
        let run = CancellationToken::new();
        let stage = spawn::<(), _>("orders", "source", Ends::Cancelling(&run), async {
            panic!("boom");
        });
        // THEN joining it names the pipeline and the task, and the run was cancelled
        let error = stage.join().await.expect_err("a panic is not a clean stop");
        assert!(
            matches!(&error, BridgeError::TaskPanicked { pipeline, task: "source", message }
                if pipeline == "orders" && message == "boom"),
            "{error:?}"
        );
        assert!(run.is_cancelled());
    }

    #[tokio::test]
    async fn a_failing_stage_cancels_the_run_and_a_clean_one_does_not() {
        let run = CancellationToken::new();
        let ok = spawn("p", "checkpointer", Ends::Cancelling(&run), async { Ok(7) });
        assert_eq!(ok.join().await.expect("clean"), 7);
        assert!(!run.is_cancelled());
        let failing = spawn::<(), _>("p", "relay", Ends::Cancelling(&run), async {
            Err(BridgeError::DeliveryCancelled {
                pipeline: "p".into(),
            })
        });
        assert!(matches!(
            failing.join().await,
            Err(BridgeError::DeliveryCancelled { .. })
        ));
        assert!(run.is_cancelled());
    }

    #[tokio::test]
    async fn a_stage_that_closes_its_output_leaves_the_run_to_its_consumer() {
        // GIVEN a source-like stage that fails after sending one item
        let run = CancellationToken::new();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let stage = spawn::<(), _>("p", "source", Ends::ClosingItsOutput, async move {
            tx.send(1).await.expect("receiver alive");
            Err(BridgeError::StreamClosed {
                pipeline: "p".into(),
            })
        });
        // THEN the consumer still gets the item, then the end of the channel; the run goes on
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.recv().await, None);
        assert!(matches!(
            stage.join().await,
            Err(BridgeError::StreamClosed { .. })
        ));
        assert!(!run.is_cancelled());
    }
}
