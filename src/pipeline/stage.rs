//! The spawned tasks of a run (source, relay, checkpointer) in one shape: a stage's error *or
//! panic* cancels the whole run, and joining it gives a typed error, never a clean stop.
//!
//! Invariant: a [`Stage`] whose task panicked or was cancelled joins as
//! [`BridgeError::TaskPanicked`] naming the pipeline and the task, so the restart policy handles
//! it like any other failure (`JoinError` is never mapped to `Ok`).

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

/// Spawns `work` as the `task` of `pipeline`'s run; its error or panic cancels `run`.
pub(super) fn spawn<T, F>(
    pipeline: &str,
    task: &'static str,
    run: &CancellationToken,
    work: F,
) -> Stage<T>
where
    T: Send + 'static,
    F: Future<Output = Result<T, BridgeError>> + Send + 'static,
{
    // Dropped without being disarmed (an error, or the unwinding of a panic): cancels the run.
    let guard = run.clone().drop_guard();
    let handle = tokio::spawn(async move {
        let result = work.await;
        if result.is_ok() {
            guard.disarm();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_stage_is_an_error_that_cancels_the_run() {
        // GIVEN a run with one stage that panics
        let run = CancellationToken::new();
        let stage = spawn::<(), _>("orders", "source", &run, async {
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
        let ok = spawn("p", "checkpointer", &run, async { Ok(7) });
        assert_eq!(ok.join().await.expect("clean"), 7);
        assert!(!run.is_cancelled());
        let failing = spawn::<(), _>("p", "relay", &run, async {
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
}
