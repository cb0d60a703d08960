//! The routing series (`[pipelines.routing]`, README "Routing"; `config/routing.rs` lists the
//! feature's pieces): events routing could not place as configured.
//!
//! Invariant: `kind` is `topic` (a template could not be filled: the event went to
//! `default_topic`, or to the usual topic) or `key` (`key_field` was missing: the event kept its
//! `documentKey` key, and may sit on another partition than its document's other events).

use prometheus::{IntCounter, IntCounterVec, Registry};

use super::families::counter;
use super::names::ROUTING_FALLBACKS;

/// The routing family of a registry.
#[derive(Clone)]
pub(super) struct Families {
    fallbacks: IntCounterVec,
}

impl Families {
    pub(super) fn register(r: &Registry) -> Self {
        Self {
            fallbacks: counter(
                r,
                ROUTING_FALLBACKS,
                "Events routed to the default topic (kind=topic) or keyed by documentKey for \
                 want of key_field (kind=key).",
                &["pipeline", "kind"],
            ),
        }
    }

    /// The `topic` and `key` counters of pipeline `name`.
    pub(super) fn pipeline(&self, name: &str) -> (IntCounter, IntCounter) {
        (
            self.fallbacks.with_label_values(&[name, "topic"]),
            self.fallbacks.with_label_values(&[name, "key"]),
        )
    }
}
