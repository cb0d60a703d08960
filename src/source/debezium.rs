//! The Debezium form's snapshot (`encode/debezium.rs` lists the feature's pieces): which copied
//! document is the snapshot's last, so that its record says `source.snapshot = "last"` as
//! Debezium's last snapshot record does.
//!
//! A namespace's copy is known to be over only when the request after its last batch finds
//! nothing more. So in this form each namespace's latest batch is **held** in its slot until
//! the next reply of that namespace arrives: another batch (the held one leaves as it is, the new
//! one is held), or the end (the held batch's last document is the namespace's last).
//!
//! Invariants:
//! - A held batch keeps the slot it was given before its request went out, so the order in
//!   which items leave is the one `snapshot/sequence.rs` proves (premise P1); items behind it
//!   wait for one more reply of its namespace. Memory: one more batch per namespace being copied.
//! - `"last"` marks the last document of the namespace whose copy ends when no other namespace
//!   is waiting or being copied: the snapshot's last, as Debezium marks only the last record of
//!   its last collection. A namespace without documents, or a snapshot resumed after its last
//!   batch was delivered, ends without a `"last"` record.
//! - Other forms hold nothing: their batches fill their slots as they arrive.

use crate::config::{PipelineConfig, ValueMode};
use crate::snapshot::sequence::{Sequencer, Slot};

/// Each namespace's held batch (by index in the snapshot's namespaces), in the Debezium form.
pub(super) struct Held<T> {
    /// Whether batches are held (the Debezium form).
    holds: bool,
    /// The held batch of each namespace: its slot and its items.
    batches: Vec<Option<(Slot, Vec<T>)>>,
}

impl<T> Held<T> {
    /// Nothing held yet, for `namespaces` namespaces of pipeline `p`.
    pub(super) fn new(p: &PipelineConfig, namespaces: usize) -> Self {
        Self {
            holds: p.value == ValueMode::Debezium,
            batches: (0..namespaces).map(|_| None).collect(),
        }
    }

    /// Room for a namespace added to the running snapshot.
    pub(super) fn add(&mut self) {
        self.batches.push(None);
    }

    /// A batch of namespace `ns` arrived for `slot`: it fills its slot in `seq`, or (Debezium
    /// form) it is held and the batch held before it fills its own.
    pub(super) fn batch(&mut self, seq: &mut Sequencer<T>, ns: usize, slot: Slot, items: Vec<T>) {
        if !self.holds {
            seq.fill(slot, items);
        } else if let Some((before, items)) = self.batches[ns].replace((slot, items)) {
            seq.fill(before, items);
        }
    }

    /// Namespace `ns` has nothing more: its held batch fills its slot in `seq`, its last item
    /// given to `last` first (which marks it as the snapshot's last when no other namespace is
    /// left); then `end` fills `slot`.
    pub(super) fn exhausted(
        &mut self,
        seq: &mut Sequencer<T>,
        (ns, slot): (usize, Slot),
        last: impl FnOnce(&mut T),
        end: T,
    ) {
        if let Some((before, mut items)) = self.batches[ns].take() {
            if let Some(item) = items.last_mut() {
                last(item);
            }
            seq.fill(before, items);
        }
        seq.fill(slot, vec![end]);
    }
}
