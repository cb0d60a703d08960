//! The order in which a snapshot's copy batches and the change stream's items enter the relay:
//! a copy batch takes its place when its request is issued, not when its reply arrives.
//!
//! ```text
//!  push(e1)  open() → slot A  push(e2)  push(e3)  fill(A, [d1 d2])   pop order:
//!  [e1]      [e1 A?]          [e1 A? e2 e3]       [e1 d1 d2 e2 e3]   e1 d1 d2 e2 e3
//! ```
//!
//! WARNING: this type decides which record of a key comes last. Be very careful when editing
//! it, and read the proof.
//!
//! # Ordering proof
//! Claim: once a snapshot's copy has finished and the stream has been read past the moment it
//! finished, the last record of every key (a document of a copied namespace) in the topic is
//! the document's current state, or a tombstone if it was deleted.
//!
//! Premises (upheld by the source task, `source/snapshot.rs` and `source/copying.rs`, and the
//! settings `config/snapshot.rs` requires):
//! - P1. One task reads the stream and issues every copy request. A copy batch's slot is
//!   opened ([`Sequencer::open`]) before its request (one `find`, `copy.rs`) is issued, and every
//!   stream item is [`Sequencer::push`]ed when the stream returns it. Items leave by
//!   [`Sequencer::pop`] in queue order, into one channel, one relay, one ordered window: the
//!   order of a key's records in its partition is the queue order (same key, same partition,
//!   one producer, idempotent, see `window.rs`).
//! - P2. Every event record carries the whole document as of the event or later: a post-image
//!   (`fullDocument` after the change) or a lookup made when the server returned the event
//!   (`update_lookup`), or it is a tombstone (a delete).
//! - P3. The stream returns a change only once it is majority-committed, and the copy reads
//!   with read concern `majority` on the same replica set, so a copy request issued after the
//!   stream returned change `e` reads a state that includes `e`.
//! - P4. The stream returns every change of the namespaces after its start position, which was
//!   committed before the first copy request (`pipeline/run.rs`), in oplog order.
//!
//! Proof, for a document key `k` (its state now is `S`, its last change `e_last`, if any):
//! 1. If `k` has a change after the stream's start, the record of `e_last` is in the topic
//!    (P4) and carries `S` or is a tombstone when `S` is "deleted" (P2: nothing changed `k`
//!    after `e_last`, so a post-image or a later lookup both read `S`).
//! 2. A copy record `c` of `k` that comes *after* `e_last`'s record in the queue was in a slot
//!    opened after `e_last` was pushed, so its request was issued after the stream returned
//!    `e_last` (P1); by P3 it read a state that includes `e_last`, which is `S` (and `k` exists,
//!    so `S` is not "deleted"). A copy record *before* `e_last`'s is followed by it. Event
//!    records of `k` after `e_last`'s do not exist (P4: oplog order). So whichever record is
//!    last, it carries `S` or is `e_last`'s tombstone.
//! 3. If `k` has no change after the stream's start, its state has been `S` since before the
//!    copy started, so every copy record of `k` carries `S`; it is copied at least once if it
//!    exists (`_id` order over every type bracket, `copy.rs`), and has no record otherwise.
//!
//! Only the order *within* a key matters, and only relative to the moment a request is issued:
//! replies may arrive in any order and slots may be filled in any order.
//! Restarts: the committed resume token and the committed copy progress come from one
//! delivered prefix of this queue (`window.rs`), so a restart reads the stream after the first
//! and copies after the second, and the argument applies again to what follows; records
//! delivered after the last commit come earlier in the topic than their repetitions.

use std::collections::VecDeque;

/// Stream items that may wait behind unanswered copy requests before the stream is no longer
/// read (it resumes when a reply arrives): the bound of what a slow copy request holds back.
pub(crate) const HOLD_ITEMS: usize = 1024;

/// A slot's handle, returned by [`Sequencer::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u64);

enum Entry<T> {
    /// A stream item.
    Item(T),
    /// A copy batch: `None` until its reply arrives.
    Batch(u64, Option<VecDeque<T>>),
}

/// Stream items and copy batches in the order they enter the relay.
pub(crate) struct Sequencer<T> {
    queue: VecDeque<Entry<T>>,
    next_slot: u64,
    items: usize,
}

impl<T> Default for Sequencer<T> {
    fn default() -> Self {
        Self {
            queue: VecDeque::new(),
            next_slot: 0,
            items: 0,
        }
    }
}

impl<T> Sequencer<T> {
    /// Takes the place of a copy batch whose request is about to be issued.
    pub(crate) fn open(&mut self) -> Slot {
        let slot = self.next_slot;
        self.next_slot += 1;
        self.queue.push_back(Entry::Batch(slot, None));
        Slot(slot)
    }

    /// Appends an item the stream just returned (or a marker, which is ordered like one).
    pub(crate) fn push(&mut self, item: T) {
        self.items += 1;
        self.queue.push_back(Entry::Item(item));
    }

    /// The reply of `slot`'s request: its items take the slot's place.
    pub(crate) fn fill(&mut self, slot: Slot, items: Vec<T>) {
        let found = self
            .queue
            .iter_mut()
            .find(|e| matches!(e, Entry::Batch(s, None) if *s == slot.0));
        if let Some(Entry::Batch(_, batch)) = found {
            *batch = Some(VecDeque::from(items));
        }
    }

    /// The next item to enter the relay, if it does not wait for a reply.
    pub(crate) fn pop(&mut self) -> Option<T> {
        loop {
            match self.queue.front_mut()? {
                Entry::Item(_) => {
                    self.items -= 1;
                    let Some(Entry::Item(item)) = self.queue.pop_front() else {
                        unreachable!("invariant: the front was just seen to be an item");
                    };
                    return Some(item);
                }
                Entry::Batch(_, None) => return None,
                Entry::Batch(_, Some(batch)) => match batch.pop_front() {
                    Some(item) => return Some(item),
                    None => {
                        self.queue.pop_front();
                    }
                },
            }
        }
    }

    /// Stream items (and markers) waiting in the queue.
    pub(crate) fn held(&self) -> usize {
        self.items
    }

    /// Whether nothing waits: no item, no open slot.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut Sequencer<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| s.pop()).collect()
    }

    #[test]
    fn a_batch_enters_where_its_request_was_issued_whenever_its_reply_arrives() {
        let mut s = Sequencer::default();
        s.push("e1");
        let a = s.open();
        s.push("e2");
        let b = s.open();
        s.push("e3");
        // Only what is before the first open slot may enter.
        assert_eq!(drain(&mut s), ["e1"]);
        assert_eq!(s.held(), 2);
        // B's reply first: it still waits behind A.
        s.fill(b, vec!["b1", "b2"]);
        assert_eq!(drain(&mut s), Vec::<&str>::new());
        s.fill(a, vec!["a1"]);
        assert_eq!(drain(&mut s), ["a1", "e2", "b1", "b2", "e3"]);
        assert!(s.is_empty());
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn an_empty_reply_frees_its_place() {
        let mut s = Sequencer::default();
        let a = s.open();
        s.push("e1");
        s.fill(a, vec![]);
        assert_eq!(drain(&mut s), ["e1"]);
        assert!(s.is_empty());
    }
}
