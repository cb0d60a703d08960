//! One pipeline: its life (take, run, the policy's next step, release) and its runs (where to
//! start, the three stages).
//!
//! ```text
//!   preflight ──▶ take ──▶ run ──error──▶ policy ─┬─ Restart (backoff) ─▶ load ──▶ run …
//!                  ▲                               ├─ Reopen / SkipHistory ─▶ load ──▶ run …
//!                  └──── standby (lapsed lease) ◀──┼─ StandBy (fenced)
//!                                                  └─ Stop ─▶ release lease, Err
//! ```
//!
//! - `context.rs`: what the pipeline needs for its whole life ([`PipelineContext`]);
//! - `lifecycle.rs`: its life ([`run()`]); `policy.rs`: what a failure means and the next step;
//!   `gap.rs`: the history-loss policies `skip` and `snapshot`; `standby.rs`: a fenced
//!   instance's wait; `missing_topic.rs`: a topic the cluster does not have, made visible;
//!   `recovery.rs`: what a restart rebuilds, and the escalation of a failure that comes back;
//! - `run.rs`: one run, from its plan (`plan.rs`: what to read, where to start, how to
//!   deliver; `start.rs`: where to start) to its stages (`stage.rs`); `hold.rs`: the lease held
//!   while a run starts; `exactly_once.rs`: the start of an exactly-once run; `waiting.rs`: a
//!   start step that waits long on MongoDB, said in the log and `/readyz`.

mod context;
mod exactly_once;
mod gap;
mod hold;
mod lifecycle;
mod missing_topic;
mod plan;
pub(crate) mod policy;
mod recovery;
mod run;
mod stage;
mod standby;
mod start;
mod waiting;

pub(crate) use context::PipelineContext;
pub(crate) use lifecycle::{Ended, run};
pub(crate) use stage::panicked;
