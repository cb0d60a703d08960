//! Integration tests against real servers (`MONGODB_URI`, `KAFKA_BOOTSTRAP`; `scripts/test`
//! starts local ones): the bridge's behaviour while the servers are healthy. Every test uses its
//! own database, collection, topic and pipeline names, so tests run in parallel. What stops,
//! freezes or kills a server or the bridge, or makes a server fail commands, is in the fault
//! binary (`tests/faults`).

#![allow(clippy::unwrap_used)]
// A binary exports nothing: the library's lints on public items (Cargo.toml) do not apply.
#![allow(unreachable_pub, missing_docs)]

// Shared with `tests/faults`; each binary uses a part of it.
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;

mod ambiguity;
mod cases;
mod check;
mod cluster;
mod debezium;
mod deploy;
mod exactly_once;
mod fields;
mod heartbeat;
mod lifecycle;
mod ops;
mod ownership;
mod policies;
mod prometheus;
mod reload;
mod replication;
mod routing;
mod snapshot;
mod solid;
mod unwrap;
mod values;
