//! The start of an exactly-once run (`delivery = "exactly_once"`): fence every earlier
//! producer of the pipeline's `transactional.id`, then resume from the newest committed
//! position, which the progress topic holds when a crash came between Kafka's commit and the
//! offsets write.
//!
//! Invariants:
//! - `init_transactions` runs before the progress topic is read: the previous owner's open
//!   transaction is aborted by then, so everything of ours up to the high watermark is decided.
//! - Each pipeline has its own progress topic (named by its `streamUid`), so its read waits on
//!   no other pipeline's open transaction. A pipeline with no record there yet reads the
//!   topic older versions shared (if it exists) once, so an upgrade keeps a position
//!   committed only there.
//! - The progress record is the truth, the offsets document its copy ([`standing`], whose
//!   module has the rule and its proof): a document behind the record is brought forward, one
//!   ahead of it is rewound to it (warned with both positions, counted in
//!   `mongo_kafka_bridge_offsets_ahead_of_kafka_total`), before the stream opens, so
//!   everything after it reads one position.

use std::time::Duration;

use tracing::{info, warn};

use super::context::PipelineContext;
use crate::config::exactly_once::{progress_topic_creation, transaction_timeout_ms};
use crate::config::names::{progress_topic, shared_progress_topic};
use crate::error::BridgeError;
use crate::kafka::admin::ADMIN_TIMEOUT;
use crate::kafka::exactly_once::read_latest;
use crate::offsets::exactly_once::{ProgressKey, ProgressRecord, Sequences, Standing, standing};
use crate::offsets::{OffsetsDoc, OffsetsStore};
use crate::relay::exactly_once::{TransactionSettings, Transactions};

/// The sequences of `doc`.
fn sequences(doc: &OffsetsDoc) -> Sequences {
    Sequences {
        reset: doc.reset_sequence,
        commit: doc.commit_sequence,
    }
}

/// Whose progress records this pipeline reads and writes: its name, the topic prefix and
/// the document's `streamUid` (which every take records).
///
/// Errors: [`BridgeError::OffsetsDocument`] for a taken document without a `streamUid`.
fn progress_key(ctx: &PipelineContext, doc: &OffsetsDoc) -> Result<ProgressKey, BridgeError> {
    let stream_uid = doc
        .stream_uid
        .clone()
        .ok_or_else(|| BridgeError::OffsetsDocument {
            pipeline: ctx.pipeline.name.clone(),
            reason: "it has no streamUid although the pipeline was taken (it was edited by \
                     hand?); remedy: `offsets reset` the pipeline"
                .to_owned(),
        })?;
    Ok(ProgressKey {
        pipeline: ctx.pipeline.name.clone(),
        topic_prefix: ctx.config.kafka.topic_prefix.clone(),
        stream_uid,
    })
}

/// Fences earlier producers and returns the offsets to start from (`offsets`, or the
/// document brought forward to a newer progress record).
///
/// Errors: [`BridgeError::Transaction`] when `init_transactions` or the progress topic's
/// creation fails, [`BridgeError::Progress`] when it cannot be read, the offsets store's.
pub(super) async fn reconcile(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
    offsets: OffsetsDoc,
) -> Result<OffsetsDoc, BridgeError> {
    let p = &ctx.pipeline;
    let timeout = Duration::from_millis(transaction_timeout_ms(&ctx.config));
    let failed = |operation, source| BridgeError::Transaction {
        pipeline: p.name.clone(),
        operation,
        source: Box::new(source),
    };
    ctx.sink
        .init_transactions(timeout)
        .await
        .map_err(|e| failed("init", e))?;
    let owner = progress_key(ctx, &offsets)?;
    let db = &ctx.config.mongodb.offsets_database;
    let name = progress_topic(db, &owner.stream_uid);
    // The cluster's list first: a topic it lists is never created again (a CreateTopics on
    // every run would make each restart depend on the controller's path too).
    let listed = ctx.admin.metadata(ADMIN_TIMEOUT).await.ok();
    let lists = |topic: &str| {
        listed
            .as_ref()
            .is_some_and(|c| c.topics.iter().any(|t| t.name == topic))
    };
    if !lists(&name) {
        ctx.admin
            .create(&name, &progress_topic_creation(&ctx.config))
            .await
            .map_err(|e| failed("progress_topic", e))?;
    }
    let mut read = read_progress(ctx, name, &owner, timeout).await?;
    let shared = shared_progress_topic(db);
    if read.is_none() && lists(&shared) {
        // Upgraded from the shared topic: its newest record of ours may be the position.
        read = read_progress(ctx, shared, &owner, timeout).await?;
    }
    let Some((record, offset)) = read else {
        return Ok(offsets);
    };
    match standing(&offsets, &record) {
        Standing::Consistent => return Ok(offsets),
        Standing::KafkaAhead => {
            info!(pipeline = %p.name, commit_sequence = record.sequences.commit, offset,
                  "the progress topic is ahead of the offsets document (a stop between Kafka's \
                   commit and the offsets write): bringing the document forward");
            store.bring_forward(epoch, &record, offset).await?;
        }
        Standing::DocumentAhead => {
            ahead_of_kafka(ctx, &offsets, &record, offset);
            store.rewind(epoch, &record, offset).await?;
        }
    }
    store.load(epoch).await
}

/// The document claims a transaction Kafka does not show: said with both positions, counted.
fn ahead_of_kafka(ctx: &PipelineContext, doc: &OffsetsDoc, record: &ProgressRecord, offset: i64) {
    let kafka = record.offsets().ok();
    let time = |t: Option<bson::Timestamp>| t.map(crate::event::format_timestamp);
    warn!(pipeline = %ctx.pipeline.name,
          document_commit_sequence = doc.commit_sequence,
          document_cluster_time = ?time(doc.cluster_time.or(doc.position_time)),
          kafka_commit_sequence = record.sequences.commit,
          kafka_cluster_time = ?time(kafka.and_then(|k| k.cluster_time.or(k.position_time))),
          progress_offset = offset,
          "the offsets document is ahead of the newest transaction Kafka committed (a commit \
           that never became visible, or an edit): resuming from Kafka's progress record and \
           rewriting the document; the events after it are published again, once");
    ctx.metrics.transactions().document_ahead.inc();
}

/// The newest committed progress record of `owner` in `topic`, read on the blocking pool.
///
/// Errors: [`BridgeError::Progress`] when it cannot be read within `timeout`.
async fn read_progress(
    ctx: &PipelineContext,
    topic: String,
    owner: &ProgressKey,
    timeout: Duration,
) -> Result<Option<(ProgressRecord, i64)>, BridgeError> {
    let p = &ctx.pipeline;
    let (kafka, owner) = (ctx.config.kafka.clone(), owner.clone());
    tokio::task::spawn_blocking(move || read_latest(&kafka, &topic, &owner, timeout))
        .await
        .map_err(|e| super::stage::panicked(&p.name, "pipeline", e))?
        .map_err(|reason| BridgeError::Progress {
            pipeline: p.name.clone(),
            reason,
        })
}

/// The transaction state of an exactly-once run, from the offsets as they are now (after the
/// initial commit, if there was one).
pub(super) async fn transactions(
    ctx: &PipelineContext,
    store: &OffsetsStore,
    epoch: i64,
) -> Result<Transactions, BridgeError> {
    let now = store.load(epoch).await?;
    let config = &ctx.config;
    let owner = progress_key(ctx, &now)?;
    let settings = TransactionSettings {
        progress_topic: progress_topic(&config.mongodb.offsets_database, &owner.stream_uid),
        owner,
        epoch,
        sequences: sequences(&now),
        progress_offset: now.progress_offset,
        events_before: now.events_committed,
        max_events: ctx.pipeline.max_transaction_events,
        interval: Duration::from_millis(config.bridge.commit_interval_ms),
        transaction_timeout: Duration::from_millis(transaction_timeout_ms(config)),
    };
    Ok(Transactions::new(settings, ctx.metrics.transactions()))
}
