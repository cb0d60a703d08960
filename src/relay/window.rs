//! The ordered acknowledgement window: in-flight entries in read order, yielding the position of
//! each entry only once it *and every entry before it* is fully delivered.
//!
//! ```text
//!  push_back(e0) push_back(e1) push_back(e2)          next().await
//!  ┌────┬────┬────┐  e1 delivered first: held    ┌────┬────┐
//!  │ e0 │ e1 │ e2 │  ───────────────────────────▶ │ e1 │ e2 │ → yields Ok(pos(e0)) once e0 is
//!  └────┴────┴────┘                              └────┴────┘   delivered, then Ok(pos(e1)) at once
//! ```
//!
//! WARNING: this type decides what gets committed. Be very careful when editing it.
//!
//! # Ordering proof
//! Claim: every `Ok(p)` that [`OrderedWindow::next`] yields is the position of an entry `k` such
//! that entries `0..=k` (in push order) have all completed with `Ok`.
//! 1. `FuturesOrdered` yields outputs strictly in push order: output `k` is returned only after
//!    outputs `0..k` were returned (tokio-rs/futures `FuturesOrdered` docs).
//! 2. The caller stops at the first `Err` it receives (the relay returns it and drops the window),
//!    so if output `k` is `Ok` and reached the caller, outputs `0..k` reached it before and were
//!    all `Ok`.
//! 3. An entry's future resolves `Ok` only when every delivery future of every record of the
//!    event resolved `Ok(Ok(_))` ([`crate::relay`] builds it so); a cancelled delivery
//!    (`oneshot::Canceled`) or a delivery error resolves `Err`.
//!
//! Hence a yielded position never passes an undelivered record, and the sequence of yielded
//! positions is the push order, so committed positions are monotonic. Watermarks (post-batch
//! resume tokens) enter as already-completed entries: they are yielded only after everything read
//! before them was delivered (case C03).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};

/// What a completed entry yields: its position and the bytes it held.
#[derive(Debug)]
pub(crate) struct Completed<T> {
    /// The entry's position.
    pub position: T,
    /// Bytes released from the in-flight budget.
    pub bytes: usize,
    /// Whether the entry was an event (not a watermark).
    pub is_event: bool,
    /// An event's topic (moved out of the window's bookkeeping, never cloned per event).
    pub topic: Option<Arc<str>>,
}

/// Ordered in-flight entries with count and byte accounting.
pub(crate) struct OrderedWindow<T, E> {
    entries: FuturesOrdered<BoxFuture<'static, Result<Completed<T>, E>>>,
    /// Each entry's push time, and an event's topic (for the stall error, `relay/stall.rs`).
    pushed_at: VecDeque<(Instant, Option<Arc<str>>)>,
    events: usize,
    bytes: usize,
}

impl<T: Send + 'static, E: Send + 'static> Default for OrderedWindow<T, E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + 'static, E: Send + 'static> OrderedWindow<T, E> {
    /// An empty window.
    pub(crate) fn new() -> Self {
        Self {
            entries: FuturesOrdered::new(),
            pushed_at: VecDeque::new(),
            events: 0,
            bytes: 0,
        }
    }

    /// Appends an event entry holding `bytes`, enqueued `at` for `topic`, whose `future`
    /// resolves when all its records are delivered (`Ok(position)`) or one failed (`Err`).
    pub(crate) fn push_event(
        &mut self,
        bytes: usize,
        (at, topic): (Instant, Arc<str>),
        future: impl Future<Output = Result<T, E>> + Send + 'static,
    ) {
        self.events += 1;
        self.bytes += bytes;
        self.pushed_at.push_back((at, Some(topic)));
        // A combinator, not an `async` block: a block would hold `future` twice (captured,
        // then awaited), doubling what every in-flight entry reserves.
        let entry = future.map(move |out| {
            out.map(|position| Completed {
                position,
                bytes,
                is_event: true,
                topic: None,
            })
        });
        self.entries.push_back(Box::pin(entry));
    }

    /// Appends a position that is complete as soon as everything before it is.
    pub(crate) fn push_watermark(&mut self, position: T) {
        self.pushed_at.push_back((Instant::now(), None));
        self.entries
            .push_back(Box::pin(futures::future::ready(Ok(Completed {
                position,
                bytes: 0,
                is_event: false,
                topic: None,
            }))));
    }

    /// Waits for the head entry; `None` when the window is empty. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Result<Completed<T>, E>> {
        let mut out = self.entries.next().await?;
        let topic = self.pushed_at.pop_front().and_then(|(_, topic)| topic);
        if let Ok(done) = &mut out
            && done.is_event
        {
            self.events -= 1;
            self.bytes -= done.bytes;
            done.topic = topic;
        }
        Some(out)
    }

    /// Number of event entries in flight.
    pub(crate) fn events(&self) -> usize {
        self.events
    }

    /// Bytes of event entries in flight.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// When the oldest entry still in the window was pushed.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.pushed_at.front().map(|(at, _)| *at)
    }

    /// The topic of the oldest entry still in the window, when it is an event's.
    pub(crate) fn oldest_topic(&self) -> Option<&str> {
        self.pushed_at
            .front()
            .and_then(|(_, topic)| topic.as_deref())
    }
}

#[cfg(test)]
mod tests;
