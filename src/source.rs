//! The source: opens a pipeline's change stream at its scope and reads it into the relay.
//!
//! Invariants:
//! - Items reach the relay in the order the server returned them.
//! - An event is read with `next_if_any` (at most one `getMore` per call): when a batch is empty,
//!   the stream's post-batch resume token is sent as a [`SourceItem::Watermark`], so idle and
//!   heavily filtered streams keep their committed position fresh (cases C02, C27). The same
//!   token is never sent twice in a row.
//! - The stream lives in this task alone (`next_if_any` is not cancel-safe); cancelling drops it,
//!   which closes the server cursor (`killCursors`).
//! - Resuming uses `startAfter` (survives an invalidate), a first start `startAtOperationTime`
//!   or the current time (<https://www.mongodb.com/docs/manual/changeStreams/#resume-a-change-stream>).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::{RawDocumentBuf, Timestamp};
use mongodb::Client;
use mongodb::change_stream::ChangeStream;
use mongodb::change_stream::event::ResumeToken;
use mongodb::options::{ChangeStreamOptions, FullDocumentBeforeChangeType, FullDocumentType};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::{FullDocument, FullDocumentBeforeChange, PipelineConfig};
use crate::error::BridgeError;
use crate::event::{SourceItem, timestamp_now};
use crate::health::PipelineHealth;

/// Where a change stream starts.
#[derive(Debug, Clone)]
pub enum Start {
    /// `startAfter` this token (the committed position).
    After(RawDocumentBuf),
    /// `startAtOperationTime`.
    AtOperationTime(Timestamp),
    /// The current time.
    Now,
}

/// A raw change stream: events are kept as the server's BSON bytes.
pub type RawStream = ChangeStream<RawDocumentBuf>;

/// Converts a stored token document into the driver's token type.
pub fn to_resume_token(token: &RawDocumentBuf) -> Result<ResumeToken, bson::de::Error> {
    let mut wrapper = RawDocumentBuf::new();
    wrapper.append("t", token.clone());
    bson::from_slice(wrapper.as_bytes()).map(|w: TokenWrapper| w.t)
}

#[derive(serde::Deserialize)]
struct TokenWrapper {
    t: ResumeToken,
}

/// The driver's current resume token as a raw document, if any.
pub fn current_token(stream: &RawStream) -> Option<RawDocumentBuf> {
    let token = stream.resume_token()?;
    let bytes = bson::to_vec(&bson::doc! { "t": bson::to_bson(&token).ok()? }).ok()?;
    let doc = bson::RawDocument::from_bytes(&bytes).ok()?;
    doc.get_document("t").ok().map(|d| d.to_raw_document_buf())
}

fn options(p: &PipelineConfig, start: &Start, max_await: Duration) -> ChangeStreamOptions {
    let full_document = match p.full_document {
        FullDocument::Default => None,
        FullDocument::UpdateLookup => Some(FullDocumentType::UpdateLookup),
        FullDocument::WhenAvailable => Some(FullDocumentType::WhenAvailable),
        FullDocument::Required => Some(FullDocumentType::Required),
    };
    let before = match p.full_document_before_change {
        FullDocumentBeforeChange::Off => None,
        FullDocumentBeforeChange::WhenAvailable => {
            Some(FullDocumentBeforeChangeType::WhenAvailable)
        }
        FullDocumentBeforeChange::Required => Some(FullDocumentBeforeChangeType::Required),
    };
    let mut options = ChangeStreamOptions::default();
    options.full_document = full_document;
    options.full_document_before_change = before;
    options.max_await_time = Some(max_await);
    match start {
        Start::After(token) => options.start_after = to_resume_token(token).ok(),
        Start::AtOperationTime(ts) => options.start_at_operation_time = Some(*ts),
        Start::Now => {}
    }
    options
}

/// Opens the change stream of `p` at its scope (collection, database or deployment).
///
/// Errors: the driver's error (auth, invalid stage, history lost, network), unclassified.
pub async fn open(
    client: &Client,
    p: &PipelineConfig,
    start: &Start,
    max_await: Duration,
) -> Result<RawStream, mongodb::error::Error> {
    let options = options(p, start, max_await);
    let stages = p.stages();
    let stream = match (&p.database, &p.collection) {
        (Some(db), Some(coll)) => {
            let coll = client.database(db).collection::<bson::Document>(coll);
            coll.watch().pipeline(stages).with_options(options).await?
        }
        (Some(db), None) => {
            client
                .database(db)
                .watch()
                .pipeline(stages)
                .with_options(options)
                .await?
        }
        _ => {
            client
                .watch()
                .pipeline(stages)
                .with_options(options)
                .await?
        }
    };
    Ok(stream.with_type::<RawDocumentBuf>())
}

/// Reads `stream` into `tx` until `cancel` fires (returns `Ok`) or the stream fails.
pub async fn run(
    pipeline: &str,
    mut stream: RawStream,
    tx: mpsc::Sender<SourceItem>,
    cancel: CancellationToken,
    health: Arc<PipelineHealth>,
) -> Result<(), BridgeError> {
    let mut last_watermark: Option<RawDocumentBuf> = None;
    health.stream_open.store(true, Ordering::Relaxed);
    let result = loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => break Ok(()),
            next = stream.next_if_any() => next,
        };
        let item = match next {
            Ok(Some(raw)) => SourceItem::Event {
                raw,
                received_at: Instant::now(),
            },
            Ok(None) if !stream.is_alive() => {
                break Err(BridgeError::StreamClosed {
                    pipeline: pipeline.to_owned(),
                });
            }
            Ok(None) => match current_token(&stream) {
                Some(token) if last_watermark.as_ref() != Some(&token) => {
                    last_watermark = Some(token.clone());
                    SourceItem::Watermark {
                        token,
                        position_time: timestamp_now(),
                    }
                }
                _ => continue,
            },
            Err(source) => {
                break Err(BridgeError::Source {
                    pipeline: pipeline.to_owned(),
                    source: Box::new(source),
                });
            }
        };
        if !matches!(item, SourceItem::Watermark { .. }) {
            last_watermark = None;
        }
        tokio::select! {
            biased;
            () = cancel.cancelled() => break Ok(()),
            sent = tx.send(item) => if sent.is_err() { break Ok(()) },
        }
    };
    health.stream_open.store(false, Ordering::Relaxed);
    result
}
