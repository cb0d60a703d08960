//! A running snapshot's checks that no copy finishes short (`snapshot/order.rs`,
//! `snapshot/count.rs`): the error for `_id`s read out of order, and the count check of each
//! namespace, fed with the stream's items while the copy runs and until the stream passed the
//! count.
//!
//! Invariants: a namespace's `snapshot_end` enters the sequence only once its count agreed
//! (within the changes the stream returned meanwhile), was skipped (the collection was dropped
//! or renamed) or, under `snapshot_count_check = "warn"` or for a resumed copy, was warned
//! about (log line and `…_snapshot_count_mismatch_total`); a failed check ends the run before
//! it, so the namespace is never committed as copied. Waiting for the stream holds no slot:
//! the stream is read on meanwhile.

use bson::Bson;
use tracing::{info, warn};

use super::{Copy, Out};
use crate::config::CountCheck;
use crate::error::BridgeError;
use crate::error::snapshot::CopyCheckError;
use crate::event::SourceItem;
use crate::snapshot::count::{Change, Counted, Tally, Verdict, after, change_of, verdict};

/// One namespace's count check, from its copy's first request to its verdict.
pub(super) struct Counting {
    ns: usize,
    tally: Tally,
    /// Documents the copy read in this run, plus those committed before it.
    read: u64,
    /// The count at its end, once read, and the stream reads issued by then.
    counted: Option<(Counted, u64)>,
}

impl Copy<'_> {
    /// The copy of `ns` begins: the stream's changes of it count from now on.
    pub(super) fn counting(&mut self, ns: usize) {
        let n = &self.state.namespaces[ns];
        let tally = Tally {
            changes: n.changes.unwrap_or(0),
            resumed: n.changes.is_none() && n.last_id.is_some(),
            void: false,
        };
        let (read, counted) = (n.copied, None);
        self.counting.push(Counting {
            ns,
            tally,
            read,
            counted,
        });
    }

    /// A stream item leaves into the channel: its change of a namespace being copied is
    /// counted in the state it delivers with (kept across restarts, `count.rs`).
    pub(super) fn delivered(&mut self, item: &SourceItem) {
        let SourceItem::Event { raw, .. } = item else {
            return;
        };
        for c in &self.counting {
            let n = &mut self.state.namespaces[c.ns];
            n.changes = match change_of(raw, (&n.db, &n.coll)) {
                Some(Change::Document) => n.changes.map(|x| x.saturating_add(1)),
                Some(Change::Void) => n.changes.map(|_| u64::MAX),
                None => continue,
            };
        }
    }

    /// A batch of `ns` with `documents` was read.
    pub(super) fn read(&mut self, ns: usize, documents: usize) {
        if let Some(c) = self.counting.iter_mut().find(|c| c.ns == ns) {
            c.read += documents as u64;
        }
    }

    /// A stream item before it enters the sequence: an event of a namespace being copied is
    /// counted; checks whose count the stream passed are settled.
    ///
    /// Errors: a count mismatch under `snapshot_count_check = "fail"`.
    pub(in crate::source) fn streamed(&mut self, item: &SourceItem) -> Result<(), BridgeError> {
        let reads = self.stream_reads;
        let passed_time = match item {
            SourceItem::Event { raw, .. } => {
                for c in &mut self.counting {
                    let n = &self.state.namespaces[c.ns];
                    c.tally.saw(raw, (&n.db, &n.coll));
                }
                raw.get_timestamp("clusterTime").ok()
            }
            _ => None,
        };
        let empty_batch = matches!(item, SourceItem::Watermark { .. } | SourceItem::Idle);
        let mut i = 0;
        while i < self.counting.len() {
            let passed = self.counting[i].counted.is_some_and(|(counted, asked)| {
                (empty_batch && reads > asked) || passed_time.is_some_and(|t| after(t, counted.at))
            });
            if passed {
                let c = self.counting.remove(i);
                self.settle(c, true)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// The copy of `ns` is read to its end and `counted`: its `snapshot_end` enters the
    /// sequence now, or once the stream passed the count.
    ///
    /// Errors: none yet (the stream has not passed the count); kept for symmetry with
    /// [`Copy::streamed`].
    pub(super) fn counted(&mut self, ns: usize, counted: Counted) -> Result<(), BridgeError> {
        let Some(at) = self.counting.iter().position(|c| c.ns == ns) else {
            self.seq.push(Out::End(ns));
            return Ok(());
        };
        let mut c = self.counting.remove(at);
        c.counted = Some((counted, self.stream_reads));
        let p = &self.copier.pipeline;
        let v = verdict(
            c.read,
            counted.documents,
            &c.tally,
            false,
            p.snapshot_count_check,
        );
        if v == Verdict::Wait {
            info!(pipeline = %p.name, namespace = %self.state.namespaces[ns].namespace(),
                  read = c.read, counted = counted.documents, changes = c.tally.changes,
                  "the copy's count differs so far: waiting for the stream to pass the count");
            self.counting.push(c);
            return Ok(());
        }
        self.settle(c, false)
    }

    /// The verdict on `c` (its count read); its `snapshot_end` enters the sequence unless the
    /// copy fails.
    fn settle(&mut self, c: Counting, passed: bool) -> Result<(), BridgeError> {
        let Some((counted, _)) = c.counted else {
            return Ok(());
        };
        let p = &self.copier.pipeline;
        let namespace = self.state.namespaces[c.ns].namespace();
        let (read, changes) = (c.read, c.tally.changes);
        let policy = p.snapshot_count_check;
        match verdict(read, counted.documents, &c.tally, passed, policy) {
            Verdict::Agrees | Verdict::Wait => {}
            Verdict::Skipped => {
                info!(pipeline = %p.name, namespace = %namespace,
                      "the collection was dropped or renamed during its copy: count not checked")
            }
            Verdict::Mismatch { fail, difference } => {
                self.metrics[c.ns].count_mismatch.inc();
                let error = CopyCheckError::CountMismatch {
                    pipeline: p.name.clone(),
                    namespace,
                    copied: read,
                    counted: counted.documents,
                    difference,
                    changes,
                };
                if fail {
                    return Err(BridgeError::CopyCheck(Box::new(error)));
                }
                let why = match policy {
                    CountCheck::Warn => "snapshot_count_check = \"warn\"",
                    CountCheck::Fail => "resumed from a state without its changes: unknown",
                };
                warn!(pipeline = %p.name, error = %error, why, "snapshot count mismatch");
            }
        }
        self.seq.push(Out::End(c.ns));
        Ok(())
    }

    /// Whether a namespace's count check still waits for the stream.
    pub(in crate::source) fn checks_waiting(&self) -> bool {
        self.counting.iter().any(|c| c.counted.is_some())
    }

    /// The error for `next` read right after `previous` in the copy of `ns`.
    pub(super) fn out_of_order(&self, ns: usize, previous: Bson, next: Bson) -> BridgeError {
        let text = |id: Bson| id.into_relaxed_extjson().to_string();
        BridgeError::CopyCheck(Box::new(CopyCheckError::OutOfOrder {
            pipeline: self.copier.pipeline.name.clone(),
            namespace: self.state.namespaces[ns].namespace(),
            previous: text(previous),
            next: text(next),
        }))
    }
}
