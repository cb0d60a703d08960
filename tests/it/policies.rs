//! The failure policies of `docs/RELIABILITY.md` that healthy servers can show: invalidation
//! (C07), large events (C10, C11), oversized records (C12), missing required images and
//! unwatchable namespaces (C15, C23), required pre-images at a database or deployment scope
//! (C15, `images.rs`).
//!
//! The policies that need a fault (history lost, C01; resumable server errors; Kafka faults from
//! librdkafka's mock cluster, C05 and C28) are in the fault binary (`tests/faults`).

mod images;
mod invalidate;
mod oversize;
mod refusals;
mod split;
