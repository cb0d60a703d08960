//! Per-pipeline state checks of `check`: the offsets document, and the largest document of each
//! watched collection (pre-/post-images are `images.rs`'s).

use bson::{Bson, DateTime, Document, doc};
use mongodb::Client;

use super::{CHECK_TIMEOUT, CheckLine, Largest, human, line, warning};
use crate::config::{Config, FullDocument, FullDocumentBeforeChange, PipelineConfig, ValueMode};
use crate::encode::topics;
use crate::mongo::cluster::ClusterRead;
use crate::observe::history::OplogBounds;
use crate::offsets::cluster::{Check, check};
use crate::offsets::identity::describe;
use crate::offsets::operator::OffsetsAdmin;
use crate::offsets::{OffsetsDoc, StreamIdentity};

/// Collections of a database- or deployment-scoped pipeline whose sizes (and topics) are
/// checked, at most.
const MAX_COLLECTIONS: usize = 20;

/// The pipeline's offsets document: its position (against the oplog), its owner, and whether
/// the configured stream and key format are the ones it was committed with.
pub(super) async fn offsets_lines(
    client: &Client,
    config: &Config,
    p: &PipelineConfig,
    bounds: Option<&OplogBounds>,
    cluster: Option<&ClusterRead>,
) -> Vec<CheckLine> {
    let (line, parsed) = offsets_line(client, config, p, bounds).await;
    let mut lines = vec![line];
    lines.extend(super::snapshot::snapshot_line(p, parsed.as_ref()));
    if let Some(parsed) = parsed {
        lines.extend(cluster.and_then(|found| cluster_line(p, &parsed, found)));
        lines.extend(identity_lines(p, &parsed));
        if let Some((at, error)) = &parsed.failure {
            lines.push(line_failed(p, *at, error));
        }
    }
    lines
}

/// The last owner stopped the pipeline on a failure (recorded until the next take): a warning,
/// since the cause may be fixed by now; `run` (or SIGHUP to the running bridge) tries again.
fn line_failed(p: &PipelineConfig, at: DateTime, error: &str) -> CheckLine {
    warning(format!(
        "pipeline {}: its last owner stopped it on a failure at {}: {error}",
        p.name,
        crate::event::rfc3339_seconds(at.timestamp_millis() / 1000)
    ))
}

/// A failed line when the position was committed on another cluster than the one `found`
/// (`run` refuses the pipeline; `crate::offsets::cluster`'s rules).
fn cluster_line(p: &PipelineConfig, stored: &OffsetsDoc, found: &ClusterRead) -> Option<CheckLine> {
    let (Some(recorded), ClusterRead::Known(reached)) = (&stored.cluster, found) else {
        return None;
    };
    (check(Some(recorded), found) == Check::Differs).then(|| {
        line(
            false,
            format!(
                "pipeline {}: its position was committed on MongoDB cluster {recorded}, but \
                 mongodb.uri reaches {reached}: run refuses the pipeline. Remedy: \
                 mongo-kafka-bridge offsets reset {} --to-now --config FILE (start it on this \
                 cluster), or mongo-kafka-bridge offsets accept-cluster {} --config FILE (the \
                 move is intended: this cluster holds that history)",
                p.name, p.name, p.name
            ),
        )
    })
}

/// Whether the stored stream identity and key format are the configured ones.
fn identity_lines(p: &PipelineConfig, stored: &OffsetsDoc) -> Vec<CheckLine> {
    let configured = StreamIdentity::of(p);
    let mut lines = Vec::new();
    if let Some(fingerprint) = &stored.fingerprint
        && *fingerprint != configured.fingerprint
    {
        let recorded = stored
            .stream
            .as_ref()
            .map_or_else(|| format!("fingerprint {fingerprint}"), describe);
        lines.push(line(
            false,
            format!(
                "pipeline {}: the configured stream {} differs from the one its position was \
                 committed for, {recorded}: run refuses the pipeline. Remedy: mongo-kafka-bridge \
                 offsets reset {} --to-now --config FILE (start the new stream there), or \
                 mongo-kafka-bridge offsets accept-config {} --config FILE (resume the new \
                 filter from the old position)",
                p.name,
                describe(&configured.stream),
                p.name,
                p.name
            ),
        ));
    }
    if let Some(old) = &stored.key_format
        && old != configured.key_format
    {
        lines.push(warning(format!(
            "pipeline {}: key_format changes from {old} to {}: every key moves to new bytes (and \
             possibly another partition), so a compacted topic keeps two records per document",
            p.name, configured.key_format
        )));
    }
    lines
}

async fn offsets_line(
    client: &Client,
    config: &Config,
    p: &PipelineConfig,
    bounds: Option<&OplogBounds>,
) -> (CheckLine, Option<OffsetsDoc>) {
    let found = tokio::time::timeout(
        CHECK_TIMEOUT,
        OffsetsAdmin::new(client, &config.mongodb).find(&p.name),
    )
    .await;
    let d = match found {
        Ok(Ok(Some(d))) => d,
        Ok(Ok(None)) => {
            let text = format!(
                "pipeline {}: no offsets yet; starts at {}",
                p.name, p.start_at
            );
            return (line(true, text), None);
        }
        _ => {
            let text = format!("pipeline {}: offsets document cannot be read", p.name);
            return (line(false, text), None);
        }
    };
    let parsed = match OffsetsDoc::parse(&d) {
        Ok(parsed) => parsed,
        Err(reason) => {
            let text = format!(
                "pipeline {}: offsets document is invalid ({reason}). Remedy: mongo-kafka-bridge \
                 offsets reset {} --delete",
                p.name, p.name
            );
            return (line(false, text), None);
        }
    };
    let position = parsed.position();
    let kind = match position {
        Some(("token", _)) => "resume token",
        _ => "startAtOperationTime",
    };
    let lease = match parsed.live_owner(DateTime::now()) {
        Some((owner, until)) => format!(
            "held by {owner} until {}",
            crate::event::rfc3339_seconds(until.timestamp_millis() / 1000)
        ),
        None => "no live owner".to_owned(),
    };
    let Some((_, at)) = position else {
        let text = format!(
            "pipeline {}: offsets document without a position; starts at {}; {lease}",
            p.name, p.start_at
        );
        return (line(true, text), Some(parsed));
    };
    let age = (chrono::Utc::now().timestamp() - i64::from(at.time)).max(0) as u64;
    let position_line = match bounds {
        Some(b) if at < b.oldest => line(
            false,
            format!(
                "pipeline {}: committed {kind} at {} is older than the oldest oplog entry ({}): the \
             history is lost. Remedy: mongo-kafka-bridge offsets reset {} --to-now --config FILE \
             (the changes in between are skipped)",
                p.name,
                crate::event::rfc3339_seconds(at.time.into()),
                crate::event::rfc3339_seconds(b.oldest.time.into()),
                p.name
            ),
        ),
        _ => line(
            true,
            format!(
                "pipeline {}: committed {kind} at {} ({} ago); {lease}",
                p.name,
                crate::event::rfc3339_seconds(at.time.into()),
                human(age)
            ),
        ),
    };
    (position_line, Some(parsed))
}

/// The largest document of each collection a pipeline watches now (every scope; at most
/// [`MAX_COLLECTIONS`] per pipeline), with the topic its records go to.
pub(super) async fn largest_documents(
    client: &Client,
    config: &Config,
    p: &PipelineConfig,
) -> Vec<Largest> {
    let prefix = &config.kafka.topic_prefix;
    let offsets = config.mongodb.offsets();
    let namespaces = crate::snapshot::plan::namespaces(client, p, &offsets, None)
        .await
        .unwrap_or_default();
    let copies = match p.value {
        ValueMode::Document | ValueMode::Unwrapped => 1,
        ValueMode::ChangeEvent | ValueMode::Debezium => {
            let post = u64::from(p.full_document != FullDocument::Default);
            let pre = u64::from(p.full_document_before_change != FullDocumentBeforeChange::Off);
            // An update's updateDescription can be as large as the document itself.
            1 + post + pre
        }
    };
    let mut out = Vec::new();
    for (db, coll) in namespaces.into_iter().take(MAX_COLLECTIONS) {
        let db = &db;
        let pipeline = vec![
            doc! { "$group": { "_id": Bson::Null, "max": { "$max": { "$bsonSize": "$$ROOT" } } } },
        ];
        let result = client
            .database(db)
            .collection::<Document>(&coll)
            .aggregate(pipeline)
            .max_time(CHECK_TIMEOUT)
            .await;
        let max = match result {
            Ok(mut cursor) => {
                use futures::StreamExt;
                match cursor.next().await {
                    Some(Ok(d)) => match d.get("max") {
                        Some(Bson::Int32(v)) => u64::try_from(*v).unwrap_or(0),
                        Some(Bson::Int64(v)) => u64::try_from(*v).unwrap_or(0),
                        _ => 0,
                    },
                    _ => 0,
                }
            }
            Err(_) => continue,
        };
        let topic = topics::of_namespace(p, prefix, db, &coll);
        out.push(Largest {
            pipeline: p.name.clone(),
            namespace: format!("{db}.{coll}"),
            topic,
            bytes: max,
            copies,
        });
    }
    out
}
