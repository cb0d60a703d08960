//! One running snapshot's copies: its plan and targets, the copy requests it issues (at most
//! `snapshot_parallelism` namespaces at once), their replies, and each item as it leaves into
//! the channel with the snapshot's state as of that point.
//!
//! Invariants: a copy batch's slot is opened before its request is issued
//! (`snapshot/sequence.rs`, premise P1); a namespace's `snapshot_start` precedes its first
//! document and its `snapshot_end` follows its last; the state an item carries counts only what
//! left before it (the last document of each batch carries its namespace's `lastId`).
//!
//! Pieces: `check.rs` (a copy that would finish short stops or warns: `_id`s out of order,
//! the count at its end), `rename.rs` (a collection renamed into the scope joins the snapshot).

use std::sync::Arc;
use std::time::Instant;

use bson::{Bson, RawDocumentBuf, Timestamp};
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tracing::info;

use mongodb::Client;

use super::debezium::Held;
use crate::config::PipelineConfig;
use crate::config::names::OffsetsLocation;
use crate::error::BridgeError;
use crate::event::SourceItem;
use crate::observe::metrics::{PipelineMetrics, SnapshotMetrics};
use crate::snapshot::copy::{CopyCursor, Read};
use crate::snapshot::sequence::{Sequencer, Slot};
use crate::snapshot::{CopyTarget, Marker, NamespaceCopy, Request, SnapshotState, plan};
use check::Counting;

/// What a copy needs besides the stream.
pub(crate) struct Copier {
    /// The MongoDB client.
    pub client: Client,
    /// The pipeline's settings.
    pub pipeline: PipelineConfig,
    /// Where the offsets live.
    pub offsets: OffsetsLocation,
    /// The pipeline's metric handles.
    pub metrics: PipelineMetrics,
}

/// A snapshot to run.
#[derive(Debug, Clone)]
pub(crate) enum Job {
    /// Continue the committed one.
    Resume(SnapshotState),
    /// Start one for this request.
    New(Request),
}

/// An item in the sequence, turned into a [`SourceItem`] when it leaves ([`Copy::leave`]).
pub(super) enum Out {
    Stream(SourceItem),
    Doc {
        ns: usize,
        raw: RawDocumentBuf,
        read_time: Option<Timestamp>,
        last: bool,
        /// The snapshot's last document (the Debezium form, `source/debezium.rs`).
        snapshot_last: bool,
    },
    Start(usize),
    End(usize),
    State,
}

mod check;
mod rename;

pub(super) type CopyRead = (usize, Slot, CopyCursor, Result<Read, mongodb::error::Error>);

/// One running snapshot.
pub(super) struct Copy<'a> {
    copier: &'a Copier,
    state: SnapshotState,
    targets: Vec<Arc<CopyTarget>>,
    metrics: Vec<SnapshotMetrics>,
    /// When each namespace's copy began in this run, and how many it had copied before.
    started: Vec<Option<(Instant, u64)>>,
    /// The order in which items leave (`snapshot/sequence.rs`).
    pub(super) seq: Sequencer<Out>,
    /// Namespaces whose copy has not started yet.
    pub(super) pending: std::collections::VecDeque<usize>,
    /// The copy requests in flight.
    pub(super) copies: FuturesUnordered<BoxFuture<'static, CopyRead>>,
    /// The batches held back until their namespace's next reply (the Debezium form).
    pub(super) held: Held<Out>,
    /// The count checks of the namespaces being copied or waiting for the stream.
    counting: Vec<Counting>,
    /// Stream reads issued so far (`check.rs`: an empty batch asked for after a count).
    pub(super) stream_reads: u64,
}

impl<'a> Copy<'a> {
    /// The snapshot's state (planned for a new one), its targets, and the items that open it:
    /// the state itself (so a new snapshot is committed before its first marker), and the
    /// `snapshot_start` of every namespace not started yet.
    pub(super) async fn prepare(copier: &'a Copier, job: Job) -> Result<Self, BridgeError> {
        let p = &copier.pipeline;
        let filter = crate::snapshot::canonical_filter(p);
        let mut seq = Sequencer::default();
        let state = match job {
            Job::Resume(state) => {
                if state.filter != filter {
                    let changed = crate::error::snapshot::FilterChanged {
                        pipeline: p.name.clone(),
                        stored: state.filter.unwrap_or_else(|| "(none)".to_owned()),
                        configured: filter.unwrap_or_else(|| "(none)".to_owned()),
                    };
                    return Err(BridgeError::SnapshotFilterChanged(Box::new(changed)));
                }
                info!(pipeline = %p.name, snapshot = %state.id, copied = state.copied(),
                      "resuming the snapshot after its committed progress");
                state
            }
            Job::New(request) => {
                let planned = plan::namespaces(
                    &copier.client,
                    p,
                    &copier.offsets,
                    request.namespaces.as_deref(),
                )
                .await
                .map_err(|source| BridgeError::Copy {
                    pipeline: p.name.clone(),
                    namespace: p.scope(),
                    source: Box::new(source),
                })?;
                let namespaces = planned
                    .iter()
                    .map(|(db, coll)| NamespaceCopy::new(db, coll))
                    .collect();
                let state = SnapshotState::new(&request, namespaces, filter);
                info!(pipeline = %p.name, snapshot = %state.id, reason = state.reason.as_str(),
                      namespaces = state.namespaces.len(), "snapshot starts");
                seq.push(Out::State);
                state
            }
        };
        let mut targets = Vec::with_capacity(state.namespaces.len());
        for n in &state.namespaces {
            let shard_key = plan::shard_key(&copier.client, &n.db, &n.coll).await;
            targets.push(Arc::new(CopyTarget {
                db: n.db.clone(),
                coll: n.coll.clone(),
                snapshot_id: state.id.clone(),
                reason: state.reason,
                shard_key,
            }));
        }
        let metrics = state
            .namespaces
            .iter()
            .map(|n| copier.metrics.snapshot(&n.namespace()))
            .collect();
        let mut pending = std::collections::VecDeque::new();
        for (i, n) in state.namespaces.iter().enumerate() {
            if !n.started {
                seq.push(Out::Start(i));
            }
            if !n.done {
                pending.push_back(i);
            }
        }
        if pending.is_empty() {
            // Nothing (left) to copy: the state still has to be committed as finished.
            seq.push(Out::State);
        }
        Ok(Self {
            copier,
            held: Held::new(p, state.namespaces.len()),
            started: vec![None; state.namespaces.len()],
            state,
            targets,
            metrics,
            seq,
            pending,
            copies: FuturesUnordered::new(),
            counting: Vec::new(),
            stream_reads: 0,
        })
    }

    /// Starts the copy of the next namespaces while fewer than `snapshot_parallelism` run.
    pub(super) async fn issue(&mut self) {
        let p = &self.copier.pipeline;
        while self.copies.len() < p.snapshot_parallelism {
            let Some(ns) = self.pending.pop_front() else {
                return;
            };
            let n = &self.state.namespaces[ns];
            let collection = self
                .copier
                .client
                .database(&n.db)
                .collection::<bson::Document>(&n.coll);
            let estimate = collection.estimated_document_count().await.unwrap_or(0);
            let left = estimate.saturating_sub(n.copied);
            self.metrics[ns].remaining.set(left as i64);
            self.metrics[ns].running.set(1);
            self.started[ns] = Some((Instant::now(), n.copied));
            info!(pipeline = %p.name, namespace = %n.namespace(), estimated = estimate,
                  copied_before = n.copied, "copying namespace");
            let filter = p.snapshot_filter();
            let cursor = CopyCursor::new(
                &self.copier.client,
                (&n.db, &n.coll),
                filter,
                p.snapshot_batch_size,
                n.last_id.as_ref(),
            );
            self.counting(ns);
            self.request(ns, cursor);
        }
    }

    /// Opens the slot of `cursor`'s next batch, then issues its request (sequence.rs, P1).
    fn request(&mut self, ns: usize, cursor: CopyCursor) {
        let slot = self.seq.open();
        self.copies.push(
            async move {
                let (cursor, read) = cursor.next().await;
                (ns, slot, cursor, read)
            }
            .boxed(),
        );
    }

    /// A copy request's reply: its documents take the slot, and the next request goes out; an
    /// exhausted cursor puts the namespace's end marker there instead.
    pub(super) fn answered(
        &mut self,
        (ns, slot, cursor, read): CopyRead,
    ) -> Result<(), BridgeError> {
        match read {
            Ok(Read::Batch(batch)) => {
                let count = batch.docs.len();
                let items = batch
                    .docs
                    .into_iter()
                    .enumerate()
                    .map(|(i, raw)| Out::Doc {
                        ns,
                        raw,
                        read_time: batch.read_time,
                        last: i + 1 == count,
                        snapshot_last: false,
                    })
                    .collect();
                self.read(ns, count);
                self.held.batch(&mut self.seq, ns, slot, items);
                self.request(ns, cursor);
                Ok(())
            }
            Ok(Read::OutOfOrder { previous, next }) => Err(self.out_of_order(ns, previous, next)),
            Ok(Read::Exhausted(counted)) => {
                let others_left = !self.pending.is_empty() || !self.copies.is_empty();
                let last = |item: &mut Out| {
                    if let Out::Doc { snapshot_last, .. } = item {
                        *snapshot_last = !others_left;
                    }
                };
                self.held.exhausted(&mut self.seq, (ns, slot), last);
                // The end marker follows once the count agrees (`check.rs`).
                self.counted(ns, counted)
            }
            Err(source) => Err(BridgeError::Copy {
                pipeline: self.copier.pipeline.name.clone(),
                namespace: self.state.namespaces[ns].namespace(),
                source: Box::new(source),
            }),
        }
    }

    /// `out` as it enters the channel, with the snapshot's state as of that point.
    pub(super) fn leave(&mut self, out: Out) -> SourceItem {
        let shared = |state: &SnapshotState| Arc::new(state.clone());
        match out {
            Out::Stream(item) => {
                self.delivered(&item);
                item
            }
            Out::Doc {
                ns,
                raw,
                read_time,
                last,
                snapshot_last,
            } => {
                let n = &mut self.state.namespaces[ns];
                n.copied += 1;
                let m = &self.metrics[ns];
                m.documents.inc();
                if m.remaining.get() > 0 {
                    m.remaining.dec();
                }
                let state = if last {
                    n.last_id = raw
                        .get("_id")
                        .ok()
                        .flatten()
                        .and_then(|id| Bson::try_from(id.to_raw_bson()).ok());
                    Some(shared(&self.state))
                } else {
                    None
                };
                SourceItem::Copy {
                    target: Arc::clone(&self.targets[ns]),
                    raw,
                    read_time,
                    state,
                    snapshot_last,
                    permit: None,
                }
            }
            Out::Start(ns) | Out::End(ns) => {
                let marker = if matches!(out, Out::Start(_)) {
                    self.state.namespaces[ns].started = true;
                    Marker::Start
                } else {
                    self.ended(ns);
                    Marker::End
                };
                SourceItem::Marker {
                    target: Arc::clone(&self.targets[ns]),
                    marker,
                    copied: self.state.namespaces[ns].copied,
                    state: shared(&self.state),
                }
            }
            Out::State => SourceItem::SnapshotState(shared(&self.state)),
        }
    }

    /// The namespace's copy is read to its end: logged, its gauges reset.
    fn ended(&mut self, ns: usize) {
        let n = &mut self.state.namespaces[ns];
        n.done = true;
        let (at, before) = self.started[ns].unwrap_or((Instant::now(), n.copied));
        let seconds = at.elapsed().as_secs_f64();
        let this_run = n.copied.saturating_sub(before);
        let rate = if seconds > 0.0 {
            this_run as f64 / seconds
        } else {
            0.0
        };
        info!(pipeline = %self.copier.pipeline.name, namespace = %n.namespace(),
              copied = n.copied, copied_in_this_run = this_run, seconds = format!("{seconds:.1}"),
              docs_per_second = rate.round() as u64, "namespace copied");
        self.metrics[ns].running.set(0);
        self.metrics[ns].remaining.set(0);
    }

    pub(super) fn finished(&self) {
        info!(pipeline = %self.copier.pipeline.name, snapshot = %self.state.id,
              copied = self.state.copied(),
              "snapshot read to its end; streaming on (it is committed as finished once \
               every record is delivered)");
    }
}
