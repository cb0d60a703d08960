//! Integration tests against real servers (`MONGODB_URI`, `KAFKA_BOOTSTRAP`; `scripts/test`
//! starts local ones). Every test uses its own database, collection, topic and pipeline names,
//! so tests run in parallel; tests that stop or freeze servers use their own named instances.

#![allow(clippy::unwrap_used)]
// A binary exports nothing: the library's lints on public items (Cargo.toml) do not apply.
#![allow(unreachable_pub, missing_docs)]

mod cases;
mod check;
mod debezium;
mod deploy;
mod exactly_once;
mod faults_ops;
mod lifecycle;
mod ops;
mod opsutil;
mod policies;
mod prometheus;
mod reload;
mod replication;
mod snapshot;
mod snapshot_faults;
mod solid;
mod support;
mod values;
