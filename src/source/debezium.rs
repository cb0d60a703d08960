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
    /// left); `slot` (the request that found the end) is freed, empty: the namespace's end
    /// marker follows when its count check allows (`copying/check.rs`).
    pub(super) fn exhausted(
        &mut self,
        seq: &mut Sequencer<T>,
        (ns, slot): (usize, Slot),
        last: impl FnOnce(&mut T),
    ) {
        if let Some((before, mut items)) = self.batches[ns].take() {
            if let Some(item) = items.last_mut() {
                last(item);
            }
            seq.fill(before, items);
        }
        seq.fill(slot, Vec::new());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn pipeline(value: &str) -> PipelineConfig {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\ncollection = \"c\"\nvalue = \"{value}\"\n\
             full_document = \"update_lookup\"\n[pipelines.debezium]\ntopic_prefix = \"x\"\n"
        );
        let text = if value == "debezium" {
            text
        } else {
            text.replace("[pipelines.debezium]\ntopic_prefix = \"x\"\n", "")
        };
        let config = Config::from_toml(&text, std::iter::empty()).expect("valid");
        config.pipelines[0].clone()
    }

    fn drain(seq: &mut Sequencer<(u32, bool)>) -> Vec<(u32, bool)> {
        std::iter::from_fn(|| seq.pop()).collect()
    }

    #[test]
    fn a_batch_waits_for_its_namespaces_next_reply_and_the_last_one_is_marked() {
        // GIVEN the Debezium form copying one namespace, items (document, snapshot's last)
        let mut held = Held::new(&pipeline("debezium"), 1);
        let mut seq = Sequencer::default();
        let (first, second, end) = (seq.open(), seq.open(), seq.open());
        // WHEN the first batch arrives, it is held: nothing leaves
        held.batch(&mut seq, 0, first, vec![(1, false), (2, false)]);
        assert!(drain(&mut seq).is_empty());
        // AND the second arrives: the first leaves, the second is held
        held.batch(&mut seq, 0, second, vec![(3, false)]);
        assert_eq!(drain(&mut seq), [(1, false), (2, false)]);
        // THEN the end releases the second with its last document marked
        held.exhausted(&mut seq, (0, end), |item| item.1 = true);
        assert_eq!(drain(&mut seq), [(3, true)]);
    }

    #[test]
    fn other_forms_hold_nothing() {
        let mut held = Held::new(&pipeline("change_event"), 1);
        let mut seq = Sequencer::default();
        let (first, end) = (seq.open(), seq.open());
        held.batch(&mut seq, 0, first, vec![(1, false)]);
        assert_eq!(drain(&mut seq), [(1, false)]);
        held.exhausted(&mut seq, (0, end), |item| item.1 = true);
        seq.push((0, false));
        assert_eq!(drain(&mut seq), [(0, false)], "no held batch to mark");
    }
}
