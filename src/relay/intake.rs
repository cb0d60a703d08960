//! The relay's intake and its encode pool: change events of at least `min_bytes` are encoded
//! on tokio's blocking threads, up to one per pool encoder at once, while the relay enqueues
//! the events before them; smaller events, and every other item, are handed to the relay as
//! read (it encodes them itself: handing a small event to another thread costs more than its
//! encoding).
//!
//! Invariants:
//! - **Order.** Items leave in the order the source sent them: the queue is FIFO, an item
//!   enters it at its back when received, and only the front ever leaves, once it is encoded
//!   (or needs no encoding). This is the window's first premise ([`super::window`]): every
//!   event and watermark enters the window in the order the source read them, however many
//!   events are being encoded at once.
//! - **Bounded read-ahead.** Items are received ahead of the relay only while it asks for the
//!   next one (the window has room), at most `encoders + 1` of them, and each keeps its
//!   byte-budget permit until its records are enqueued: the source's memory bound holds.
//! - **Nothing read ahead is published on a stop.** Dropping the intake drops what it holds;
//!   the committed position is before it, so the next run reads it again (at-least-once).
//!
//! Cancel safety: [`Intake::next`] keeps every item in the queue across its awaits (a received
//! item is queued before the next await; a join handle stays queued until it finished), so the
//! relay's `select!` may drop it at any await.

use std::collections::VecDeque;

use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::mpsc;
use tokio::task::{JoinError, JoinHandle};

use crate::encode::{EncodedEvent, RecordEncoder};
use crate::error::encode::EncodeError;
use crate::event::SourceItem;

/// What an encoding on the pool gives back: its encoder, and the event encoded.
type Job = (RecordEncoder, Result<EncodedEvent, EncodeError>);

/// An item of the queue, in the source's order.
enum Slot {
    /// Handed to the relay as it is.
    Item(SourceItem),
    /// A change event being encoded on the pool.
    Encoding {
        job: JoinHandle<Job>,
        bytes: usize,
        permit: Option<OwnedSemaphorePermit>,
    },
}

/// The next item for the relay.
pub(super) enum Taken {
    /// As the source sent it.
    Item(SourceItem),
    /// A change event of `bytes` raw bytes, encoded on the pool; `permit` holds its bytes in
    /// the source's budget until its records are enqueued.
    Encoded {
        bytes: usize,
        encoded: Result<EncodedEvent, EncodeError>,
        permit: Option<OwnedSemaphorePermit>,
    },
}

/// What one wait of [`Intake::next`] gave.
#[allow(
    clippy::large_enum_variant,
    reason = "a value of one loop turn on the stack, moved once; boxing would allocate per event"
)]
enum Woke {
    Joined(Result<Job, JoinError>),
    Received(Option<SourceItem>),
}

/// The source's items for the relay, large change events encoded ahead on the pool.
pub(super) struct Intake {
    rx: mpsc::Receiver<SourceItem>,
    queue: VecDeque<Slot>,
    /// Pool encoders not encoding now.
    idle: Vec<RecordEncoder>,
    /// At most this many items in the queue.
    ahead: usize,
    /// Events of at least this many raw bytes go to the pool.
    min_bytes: usize,
    /// The source closed its channel.
    closed: bool,
}

impl Intake {
    /// The intake of `rx`, encoding events of at least `min_bytes` with `encoders` (none:
    /// every item is handed to the relay as read).
    pub(super) fn new(
        rx: mpsc::Receiver<SourceItem>,
        encoders: Vec<RecordEncoder>,
        min_bytes: usize,
    ) -> Self {
        Self {
            rx,
            queue: VecDeque::new(),
            ahead: encoders.len() + 1,
            idle: encoders,
            min_bytes,
            closed: false,
        }
    }

    /// The next item in the source's order; `None` once the source closed its channel and
    /// everything received was taken. A panic of an encoding on the pool resumes here.
    pub(super) async fn next(&mut self) -> Option<Taken> {
        if self.ahead == 1 {
            // No pool: nothing is ever queued.
            return self.rx.recv().await.map(Taken::Item);
        }
        loop {
            if let Some(Slot::Item(_)) = self.queue.front() {
                let Some(Slot::Item(item)) = self.queue.pop_front() else {
                    unreachable!("the front was just seen to be an item");
                };
                return Some(Taken::Item(item));
            }
            let reading = !self.closed && self.queue.len() < self.ahead;
            let woke = match self.queue.front_mut() {
                Some(Slot::Encoding { job, .. }) => tokio::select! {
                    biased;
                    joined = job => Woke::Joined(joined),
                    item = self.rx.recv(), if reading => Woke::Received(item),
                },
                Some(Slot::Item(_)) => unreachable!("an item at the front left above"),
                None if self.closed => return None,
                None => Woke::Received(self.rx.recv().await),
            };
            match woke {
                Woke::Joined(joined) => return self.finished(joined),
                Woke::Received(Some(item)) => self.admit(item),
                Woke::Received(None) => self.closed = true,
            }
        }
    }

    /// Queues `item`, starting its encoding on the pool when it is a large enough change event
    /// and an encoder is idle (else the relay encodes it, in its turn).
    fn admit(&mut self, item: SourceItem) {
        let large = matches!(&item, SourceItem::Event { raw, .. }
            if raw.as_bytes().len() >= self.min_bytes);
        let encoder = if large { self.idle.pop() } else { None };
        match (item, encoder) {
            (SourceItem::Event { raw, permit }, Some(mut encoder)) => {
                let bytes = raw.as_bytes().len();
                let job = tokio::task::spawn_blocking(move || {
                    let encoded = encoder.encode(&raw);
                    (encoder, encoded)
                });
                self.queue.push_back(Slot::Encoding { job, bytes, permit });
            }
            (item, encoder) => {
                self.idle.extend(encoder);
                self.queue.push_back(Slot::Item(item));
            }
        }
    }

    /// The front's encoding finished: takes it off the queue, its encoder back to idle.
    fn finished(&mut self, joined: Result<Job, JoinError>) -> Option<Taken> {
        let Some(Slot::Encoding { bytes, permit, .. }) = self.queue.pop_front() else {
            unreachable!("only the front's encoding is awaited");
        };
        match joined {
            Ok((encoder, encoded)) => {
                self.idle.push(encoder);
                Some(Taken::Encoded {
                    bytes,
                    encoded,
                    permit,
                })
            }
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled: only when the runtime shuts down, when nothing is published anymore.
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use bson::RawDocumentBuf;

    use super::super::tests::{encoder, insert};
    use super::*;

    /// An insert of `id` whose raw event is over 2 KiB.
    fn large(id: &str) -> RawDocumentBuf {
        let mut raw = insert(id);
        raw.append("pad", "x".repeat(2048));
        raw
    }

    fn event(raw: RawDocumentBuf) -> SourceItem {
        SourceItem::Event { raw, permit: None }
    }

    /// What left the intake, in order: `key` of an event, and whether the pool encoded it.
    async fn taken(encoders: usize, items: Vec<SourceItem>) -> Vec<(String, bool)> {
        let (tx, rx) = mpsc::channel(items.len());
        for item in items {
            tx.send(item).await.expect("open");
        }
        drop(tx);
        let mut intake = Intake::new(rx, vec![encoder(); encoders], 1024);
        let mut out = Vec::new();
        let key = |e: EncodedEvent| String::from_utf8(e.records[0].key.clone()).expect("JSON");
        while let Some(next) = intake.next().await {
            out.push(match next {
                Taken::Item(SourceItem::Event { raw, .. }) => {
                    (key(encoder().encode(&raw).expect("encodes")), false)
                }
                Taken::Item(SourceItem::Idle) => ("idle".to_owned(), false),
                Taken::Item(_) => ("other".to_owned(), false),
                Taken::Encoded { encoded, bytes, .. } => {
                    assert!(bytes > 2048, "{bytes}");
                    (key(encoded.expect("encodes")), true)
                }
            });
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn items_leave_in_the_order_read_and_large_events_are_encoded_on_the_pool() {
        let items = || {
            let mut items = vec![event(insert("a"))];
            for i in 0..40 {
                items.push(event(large(&format!("L{i}"))));
                if i % 7 == 0 {
                    items.push(event(insert(&format!("s{i}"))));
                    items.push(SourceItem::Idle);
                }
            }
            items
        };
        let expected: Vec<String> = {
            let mut keys = vec!["a".to_owned()];
            for i in 0..40 {
                keys.push(format!("L{i}"));
                if i % 7 == 0 {
                    keys.extend([format!("s{i}"), "idle".to_owned()]);
                }
            }
            keys
        };
        let with_pool = taken(2, items()).await;
        let keys: Vec<String> = with_pool
            .iter()
            .map(|(k, _)| {
                k.trim_start_matches("{\"_id\":\"")
                    .trim_end_matches("\"}")
                    .to_owned()
            })
            .collect();
        assert_eq!(keys, expected);
        // Small events and other items are never pooled; the first large one always is (two
        // encoders idle); a later one may be encoded by the relay when both are busy.
        for (key, pooled) in &with_pool {
            assert!(!pooled || key.contains("\"L"), "{key}");
        }
        assert_eq!(with_pool[1], ("{\"_id\":\"L0\"}".to_owned(), true));
        let without = taken(0, items()).await;
        assert_eq!(without.len(), expected.len());
        assert!(without.iter().all(|(_, pooled)| !pooled));
    }
}
