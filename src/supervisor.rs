//! The process and its replicas: the supervisor of every pipeline this process runs.
//!
//! - [`app`]: the process ([`Bridge`](app::Bridge)): builds every client the configuration
//!   implies, serves HTTP, runs the pipelines (every one, or the group member's), turns their
//!   outcomes into one result;
//! - `roster`: the pipelines running now as tasks (start, stop, join by name), for both
//!   supervisors;
//! - [`reload`]: SIGHUP, what a new file changes and the contexts of added and changed
//!   pipelines;
//! - `group`: many replicas (`[bridge] group_id`): the member's supervisor, and
//!   `group/setup.rs`, the slots and control topic before joining.
//!
//! Invariant: a supervisor starts and stops pipelines (`crate::pipeline::run`); it never
//! decides what a pipeline does after a failure (`pipeline/policy.rs` does).

pub mod app;
pub(crate) mod group;
pub mod reload;
pub(crate) mod roster;
