//! The source task of a pipeline with a snapshot: the change stream and the copy cursors read
//! by one task, their items ordered by [`Sequencer`](crate::snapshot::sequence::Sequencer) into the one channel to the relay.
//!
//! Interleaving policy (which source gets capacity when both have work): both are always in
//! flight. Each namespace being copied (at most `snapshot_parallelism`) has one request
//! outstanding, and the stream has one `getMore` outstanding for as long as fewer than
//! [`HOLD_ITEMS`] of its items wait behind an unanswered copy request. Items enter the channel
//! in [`Sequencer`](crate::snapshot::sequence::Sequencer) order as soon as nothing before them waits, so neither starves the other:
//! the stream's position keeps advancing during a copy that lasts longer than the oplog
//! window, and a busy stream delays a copy batch by at most [`HOLD_ITEMS`] items.
//!
//! Invariants: every item leaves in sequence order, with the snapshot's state as of that
//! point attached (progress of the last document of each batch, markers' delivery), so the
//! relay's delivered prefix carries a consistent (resume token, copy progress) pair; a
//! namespace's `snapshot_start` precedes its first document and its `snapshot_end` follows its
//! last; a cancelled source drops the cursors (the driver kills them); a wait for the server
//! (not for room in the channel) is timed for readiness, as the stream's alone is
//! (`reader.rs`), so a server that answers nothing during a copy makes the pipeline not ready.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::copying::{Copier, Copy, CopyRead, Job, Out};
use super::reader::{self, Channel, StreamReader};
use crate::error::BridgeError;
use crate::event::SourceItem;
use crate::observe::health::{PipelineHealth, now_ms};
use crate::snapshot::Request;
use crate::snapshot::sequence::HOLD_ITEMS;

type StreamRead = (StreamReader, Result<Option<SourceItem>, BridgeError>);

/// The source stage: streams, and copies whenever a snapshot is to run (`first`, or a request
/// arriving on `requests`), until `cancel` fires or the relay is gone.
///
/// Errors: the stream's and the copy's (see [`BridgeError::Copy`]).
pub(crate) async fn stage(
    reader: StreamReader,
    channel: Channel,
    cancel: CancellationToken,
    health: Arc<PipelineHealth>,
    copier: Copier,
    mut requests: watch::Receiver<Option<Request>>,
    first: Option<Job>,
) -> Result<(), BridgeError> {
    health.stream_open.store(true, Ordering::Relaxed);
    let mut reader = reader;
    let mut job = first;
    let result = loop {
        if let Some(next) = job.take() {
            match run(reader, &channel, &cancel, &health, &copier, next).await {
                Ok(Some(back)) => reader = back,
                Ok(None) => break Ok(()),
                Err(e) => break Err(e),
            }
        }
        match reader::run(&mut reader, &channel, &cancel, &health, &mut requests).await {
            Ok(Some(request)) => job = Some(Job::New(request)),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    health.stream_open.store(false, Ordering::Relaxed);
    health.awaiting_server(0);
    result
}

/// Copies while streaming until every namespace's end marker entered the channel; returns the
/// reader to stream on (`None`: cancelled or the relay is gone).
///
/// Readiness: the wait for the server is timed (`awaiting_server_since_ms`) from the copy's
/// next requests until a reply (a copy batch, or the stream's `getMore`, which answers within
/// `max_await_time_ms` even when idle) wakes the loop; a server that answers nothing, frozen or
/// unreachable while the driver retries, makes the pipeline not ready after the bound. Time
/// spent handing items to a full channel is not counted: a reply waiting unpolled then is
/// backpressure, not a silent server.
async fn run(
    reader: StreamReader,
    channel: &Channel,
    cancel: &CancellationToken,
    health: &PipelineHealth,
    copier: &Copier,
    job: Job,
) -> Result<Option<StreamReader>, BridgeError> {
    let awaiting = |on: bool| health.awaiting_server(if on { now_ms() } else { 0 });
    awaiting(true);
    let mut copy = Copy::prepare(copier, job).await?;
    awaiting(false);
    let mut reader = Some(reader);
    let mut stream: Option<BoxFuture<'static, StreamRead>> = None;
    loop {
        while let Some(out) = copy.seq.pop() {
            let item = copy.leave(out);
            if !channel.send(item, cancel).await {
                return Ok(None);
            }
        }
        let waiting = copy.checks_waiting();
        if copy.pending.is_empty() && copy.copies.is_empty() && copy.seq.is_empty() && !waiting {
            break;
        }
        awaiting(true);
        copy.issue().await;
        if stream.is_none() && copy.seq.held() < HOLD_ITEMS {
            let owned = reader
                .take()
                .expect("invariant: the reader is back when no read runs");
            copy.stream_reads += 1;
            stream = Some(owned.next_owned().boxed());
        }
        let woke = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            Some(read) = copy.copies.next(), if !copy.copies.is_empty() => Woke::Copy(read),
            read = async { stream.as_mut().expect("guarded by the condition").await },
                if stream.is_some() => Woke::Stream(read),
        };
        awaiting(false);
        match woke {
            Woke::Copy(read) => copy.answered(read)?,
            Woke::Stream((back, next)) => {
                stream = None;
                reader = Some(back);
                if let Some(item) = next? {
                    copy.streamed(&item)?;
                    let renamed = copy.renamed_into_scope(&item);
                    copy.seq.push(Out::Stream(item));
                    if let Some(ns) = renamed {
                        copy.add(ns);
                    }
                }
            }
        }
    }
    copy.finished();
    if let Some(read) = stream {
        awaiting(true);
        let (back, next) = read.await;
        awaiting(false);
        reader = Some(back);
        if let Some(item) = next?
            && !channel.send(item, cancel).await
        {
            return Ok(None);
        }
    }
    Ok(reader)
}

// One value per wake-up, moved once: its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Woke {
    Copy(CopyRead),
    Stream(StreamRead),
}
