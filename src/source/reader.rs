//! Reading a change stream into the relay: the source → relay channel with its byte budget,
//! and the reader that turns `getMore` replies into items.
//!
//! Invariants:
//! - Items reach the relay in the order the server returned them.
//! - An event is read with `next_if_any` (at most one `getMore` per call): when a batch is empty,
//!   the stream's post-batch resume token is sent as a [`SourceItem::Watermark`], so idle and
//!   heavily filtered streams keep their committed position fresh (cases C02, C27). The same
//!   token is never sent twice in a row: an empty batch that did not move it is
//!   [`SourceItem::Idle`] (an exactly-once pipeline's transaction boundary).
//! - The stream lives in this task alone (`next_if_any` is not cancel-safe); cancelling drops it,
//!   which closes the server cursor (`killCursors`).
//! - A token the driver reports that cannot be read back is an error, never a silent start
//!   elsewhere; no watermark is sent while a split event is partly read.
//! - A closed stream (after an `invalidate`, read or filtered out) first sends its last token
//!   as a watermark when it moved, then ends with `StreamClosed`.
//! - A pipeline that enforces `required` pre-images fails on a whole event without its
//!   pre-image before sending it (`images.rs`): nothing at or after it is committed.

use std::sync::Arc;

use bson::RawDocumentBuf;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{TryAcquireError, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::split::Reassembler;
use super::stream::{RawStream, current_token};
use crate::config::{PipelineConfig, PreImages};
use crate::error::BridgeError;
use crate::event::{SourceItem, timestamp_now};
use crate::observe::health::PipelineHealth;
use crate::snapshot::Request;

/// The source → relay channel: items in read order, and a byte budget (a semaphore whose permits
/// are bytes) so raw events waiting for the relay stay bounded in bytes, not only in count.
pub(crate) struct Channel {
    /// Items in read order.
    pub tx: mpsc::Sender<SourceItem>,
    /// Permits = bytes of raw events sent and not yet enqueued by the relay.
    pub budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size (bytes); a larger event takes all of it.
    pub budget_bytes: u32,
}

impl Channel {
    /// Sends `item`, after taking its bytes from the budget for an event or a copied document.
    /// `false` when `cancel` fired or the relay is gone (the item is dropped: it was not
    /// delivered, so it is read again after a restart).
    pub(crate) async fn send(&self, mut item: SourceItem, cancel: &CancellationToken) -> bool {
        // (An item sent after `cancel` fired is harmless: the relay stops taking items then,
        // and what it did not enqueue is neither delivered nor committed.)
        let raw_len = match &item {
            SourceItem::Event { raw, .. } | SourceItem::Copy { raw, .. } => {
                Some(raw.as_bytes().len())
            }
            _ => None,
        };
        if let Some(len) = raw_len {
            let bytes = u32::try_from(len)
                .unwrap_or(u32::MAX)
                .min(self.budget_bytes);
            // Without waiting when the budget has room (the common case); else until it has
            // or `cancel` fires.
            let permit = match Arc::clone(&self.budget).try_acquire_many_owned(bytes) {
                Ok(permit) => Some(permit),
                Err(TryAcquireError::Closed) => None,
                Err(TryAcquireError::NoPermits) => tokio::select! {
                    biased;
                    () = cancel.cancelled() => return false,
                    permit = Arc::clone(&self.budget).acquire_many_owned(bytes) => permit.ok(),
                },
            };
            if let SourceItem::Event { permit: slot, .. } | SourceItem::Copy { permit: slot, .. } =
                &mut item
            {
                *slot = permit;
            }
        }
        match self.tx.try_send(item) {
            Ok(()) => true,
            Err(TrySendError::Closed(_)) => false,
            Err(TrySendError::Full(item)) => tokio::select! {
                biased;
                () = cancel.cancelled() => false,
                sent = self.tx.send(item) => sent.is_ok(),
            },
        }
    }
}

/// Reads a change stream one `next_if_any` at a time: reassembles split events, and turns an
/// empty batch's post-batch resume token into a [`SourceItem::Watermark`] (never the same token
/// twice in a row, never while a split event is partly read).
pub(crate) struct StreamReader {
    pipeline: String,
    stream: RawStream,
    split: Reassembler,
    last_watermark: Option<RawDocumentBuf>,
    /// Whether each event's pre-image is checked ([`PreImages::Enforced`]).
    check_pre_images: bool,
}

impl StreamReader {
    /// A reader of `stream` for `p`.
    pub(crate) fn new(p: &PipelineConfig, stream: RawStream) -> Self {
        Self {
            pipeline: p.name.clone(),
            stream,
            split: Reassembler::default(),
            last_watermark: None,
            check_pre_images: p.pre_images() == PreImages::Enforced,
        }
    }

    /// One read: `Ok(Some(item))` to forward (events without their permit), `Ok(None)` when
    /// there is nothing to forward this time. Not cancel-safe (the driver's `next_if_any` is
    /// not): keep the future until it completes, or drop the reader.
    ///
    /// Errors: the stream's, a split event that cannot be reassembled, a closed stream.
    pub(crate) async fn next(&mut self) -> Result<Option<SourceItem>, BridgeError> {
        let pipeline = || self.pipeline.clone();
        let next = self.stream.next_if_any().await;
        let item = match next {
            Ok(Some(raw)) => match self.split.push(raw) {
                Ok(Some(raw)) => {
                    if self.check_pre_images {
                        super::images::check(&self.pipeline, &raw)?;
                    }
                    SourceItem::Event { raw, permit: None }
                }
                Ok(None) => return Ok(None),
                Err(source) => {
                    return Err(BridgeError::SplitEvent {
                        pipeline: pipeline(),
                        source,
                    });
                }
            },
            Ok(None) if !self.stream.is_alive() => {
                // The server closed the cursor: after an `invalidate` (its token is then the
                // last position read). A filter that drops `invalidate` hides that event, but
                // the closing reply's post-batch resume token still stands at or past it: sent
                // once as a watermark, it lets the reopen start after the invalidate instead of
                // reading the same drop again, forever. (The same token as an event just read
                // is the same position again: harmless.)
                if !self.split.is_pending()
                    && let Ok(Some(token)) = current_token(&self.stream)
                    && let Some(watermark) = watermark(&mut self.last_watermark, token)
                {
                    return Ok(Some(watermark));
                }
                return Err(BridgeError::StreamClosed {
                    pipeline: pipeline(),
                });
            }
            // WARNING: no watermark while a split event is partly read: its token would commit
            // a position past fragments not yet delivered.
            Ok(None) if self.split.is_pending() => return Ok(None),
            Ok(None) => match current_token(&self.stream) {
                Ok(Some(token)) => {
                    let item = watermark(&mut self.last_watermark, token);
                    return Ok(Some(item.unwrap_or(SourceItem::Idle)));
                }
                Ok(None) => return Ok(Some(SourceItem::Idle)),
                Err(source) => {
                    return Err(BridgeError::Encode {
                        pipeline: pipeline(),
                        source,
                    });
                }
            },
            Err(source) => {
                return Err(BridgeError::Source {
                    pipeline: pipeline(),
                    source: Box::new(source),
                });
            }
        };
        self.last_watermark = None;
        Ok(Some(item))
    }

    /// [`StreamReader::next`] in a future that owns the reader and gives it back.
    pub(crate) async fn next_owned(mut self) -> (Self, Result<Option<SourceItem>, BridgeError>) {
        let next = self.next().await;
        (self, next)
    }
}

/// `token` as a watermark, unless it is `last`, the last one sent (never the same token twice
/// in a row).
fn watermark(last: &mut Option<RawDocumentBuf>, token: RawDocumentBuf) -> Option<SourceItem> {
    if last.as_ref() == Some(&token) {
        return None;
    }
    *last = Some(token.clone());
    Some(SourceItem::Watermark {
        token,
        position_time: timestamp_now(),
    })
}

/// Reads the stream into `channel` until `cancel` fires or the relay is gone (`Ok(None)`), a
/// snapshot request arrives on `requests` (`Ok(Some(request))`, checked between reads), or the
/// stream fails.
pub(crate) async fn run(
    reader: &mut StreamReader,
    channel: &Channel,
    cancel: &CancellationToken,
    health: &PipelineHealth,
    requests: &mut watch::Receiver<Option<Request>>,
) -> Result<Option<Request>, BridgeError> {
    // One cancellation future for the whole loop (not one registration per read).
    let cancelled = cancel.cancelled();
    tokio::pin!(cancelled);
    loop {
        if requests.has_changed().unwrap_or(false)
            && let Some(request) = requests.borrow_and_update().clone()
        {
            return Ok(Some(request));
        }
        health.awaiting_server(crate::observe::health::now_ms());
        let next = tokio::select! {
            biased;
            () = &mut cancelled => return Ok(None),
            next = reader.next() => next,
        };
        health.awaiting_server(0);
        if let Some(item) = next?
            && !channel.send(item, cancel).await
        {
            return Ok(None);
        }
    }
}
