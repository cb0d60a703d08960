//! `offsets import debezium NAME (--offsets FILE | --connect-offsets-topic TOPIC --connector C)
//! [--server-id ID] [--use-oldest] [--force]`: the move from Debezium without a gap (README, "Moving from
//! Debezium"; the feature's pieces are listed in `encode/debezium.rs`). It takes the position
//! Debezium's MongoDB connector stored in Kafka Connect and writes it as the pipeline's, so the
//! pipeline starts right after the last event Debezium's offsets cover.
//!
//! Debezium's offset (`MongoDbOffsetContext`, 3.x): partition `{"server_id": <topic.prefix>}`,
//! offset `{"sec", "ord", "resume_token": <base64 of the BSON {_data: …}>, "lsid"?,
//! "txnNumber"?}`, plus `"initsync": true` while its initial snapshot runs and
//! `incremental_snapshot_*` while an incremental one runs. Connect gives it as KIP-875 JSON
//! (`GET /connectors/NAME/offsets`, standalone and distributed) or keeps it in the worker's
//! offsets topic (distributed) keyed `["<connector>", {partition}]`.
//!
//! Invariants: nothing is written unless one offset of the expected server (and connector) is
//! chosen — its one partition of the current form, or with `--use-oldest` the oldest of the
//! others (`debezium/partitions.rs`, which prints every partition it did not take) — it holds a
//! resume token, it was written after Debezium's snapshot completed, and the pipeline's change
//! stream opens after that token; every refusal names the reason and the way forward, and comes
//! before any write (the offsets document stays as it was, byte for byte). The write fences a
//! running owner like `offsets reset` (`offsets/debezium.rs`).

use std::io::Write;
use std::time::Duration;

use bson::Document;

use super::print::print_doc;
use super::{Command, failed};
use crate::error::BridgeError;
use crate::offsets::OffsetsDoc;

mod offset;
mod partitions;

use offset::{entries_from_rest, entries_from_topic};
use partitions::{Choice, choose};

/// Where Debezium's offsets come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DebeziumOffsets {
    /// The JSON of Connect's `GET /connectors/NAME/offsets` (KIP-875), as read from a file or
    /// stdin.
    Rest(String),
    /// Connect's offsets topic, read directly: its name and the connector's.
    Topic {
        /// `offset.storage.topic` of the distributed worker.
        topic: String,
        /// The connector's name.
        connector: String,
    },
}

impl DebeziumOffsets {
    /// The KIP-875 JSON in file `path` (`-`: stdin).
    ///
    /// Errors: the file cannot be read.
    pub fn read(path: &std::path::Path) -> std::io::Result<Self> {
        let text = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())?
        } else {
            std::fs::read_to_string(path)?
        };
        Ok(Self::Rest(text))
    }
}

/// `offsets import debezium`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportDebezium {
    /// Pipeline name (`_id`); it must be configured.
    pub name: String,
    /// The offsets.
    pub from: DebeziumOffsets,
    /// The connector's `topic.prefix` (the offsets' `server_id`); default: the pipeline's
    /// `[pipelines.debezium] topic_prefix`.
    pub server_id: Option<String>,
    /// Without a single partition of the current form, resume after the oldest of the others
    /// (duplicates, nothing lost) instead of refusing.
    pub use_oldest: bool,
    /// Proceed although a live instance holds the pipeline (it is fenced).
    pub force: bool,
}

/// How long the offsets topic may take to be read, and the stream to open.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl Command<'_> {
    /// Runs `offsets import debezium`.
    pub(super) async fn import_debezium(
        &self,
        import: &ImportDebezium,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        let name = &import.name;
        let Some(p) = self.config.pipelines.iter().find(|p| &p.name == name) else {
            let _ = writeln!(
                out,
                "refused: pipeline {name:?} is not in the configuration"
            );
            return Ok(false);
        };
        let server_id = import
            .server_id
            .clone()
            .or_else(|| p.debezium.as_ref().map(|d| d.topic_prefix.clone()));
        let Some(server_id) = server_id else {
            let _ = writeln!(
                out,
                "refused: pipeline {name:?} is not in the Debezium form: pass --server-id (the \
                 connector's topic.prefix) to import Debezium's position anyway"
            );
            return Ok(false);
        };
        let Choice { imported, notes } = match self
            .read_position(&import.from, &server_id, import.use_oldest)
            .await
        {
            Ok(choice) => choice,
            Err(reason) => {
                let _ = writeln!(out, "refused: {reason}");
                return Ok(false);
            }
        };
        for note in &notes {
            let _ = writeln!(out, "{note}");
        }
        if let Err(reason) = self.resumes(p, &imported.token).await {
            let _ = writeln!(out, "refused: {reason}");
            return Ok(false);
        }
        let Some((before, parsed)) = self.before_change(name, import.force, false, out).await?
        else {
            return Ok(false);
        };
        let _ = writeln!(out, "importing Debezium's position:");
        print_doc(out, &imported.from);
        let epoch = parsed.as_ref().and_then(|p: &OffsetsDoc| p.epoch);
        let done = self
            .offsets
            .import(
                name,
                epoch,
                before.as_ref(),
                &imported,
                &Self::operator("offsets import debezium"),
            )
            .await
            .map_err(|e| failed(name, e))?;
        self.after_change(name, done, out).await
    }

    /// The position `from` holds for `server_id` (`use_oldest`: see `partitions.rs`), or why
    /// it cannot be imported.
    async fn read_position(
        &self,
        from: &DebeziumOffsets,
        server_id: &str,
        use_oldest: bool,
    ) -> Result<Choice, String> {
        let entries = match from {
            DebeziumOffsets::Rest(text) => entries_from_rest(text)?,
            DebeziumOffsets::Topic { topic, connector } => {
                let kafka = self.config.kafka.clone();
                let topic = topic.clone();
                let read = move || {
                    crate::kafka::debezium::read_offsets_topic(&kafka, &topic, READ_TIMEOUT)
                };
                let records = tokio::task::spawn_blocking(read)
                    .await
                    .map_err(|e| format!("reading the offsets topic: {e}"))??;
                entries_from_topic(&records, connector)?
            }
        };
        choose(&entries, server_id, use_oldest)
    }

    /// Whether the pipeline's change stream opens after `token` (the server refuses a token of
    /// another scope or one no longer in the oplog).
    async fn resumes(
        &self,
        p: &crate::config::PipelineConfig,
        token: &Document,
    ) -> Result<(), String> {
        use crate::source::stream::{self, Start, StreamSpec, to_resume_token};
        let raw = bson::RawDocumentBuf::from_document(token).map_err(|e| e.to_string())?;
        let start = Start::After(to_resume_token(&raw).map_err(|e| e.to_string())?);
        let offsets = self.config.mongodb.offsets();
        let spec = StreamSpec {
            pipeline: p,
            offsets: &offsets,
            max_await: Duration::from_millis(100),
        };
        let cannot = |reason: String| {
            format!(
                "the pipeline's change stream on {} does not start after this token: {reason}. \
                 The pipeline must watch what the connector captured (its capture.scope and \
                 include lists), and the token must still be in the oplog",
                p.scope()
            )
        };
        let opened = tokio::time::timeout(READ_TIMEOUT, async {
            let mut stream = stream::open(&self.client, &spec, &start).await?;
            stream.next_if_any().await.map(|_| ())
        })
        .await;
        let secrets = self.config.secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        match opened {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(cannot(crate::error::report(&e, &secrets))),
            Err(_) => Err(cannot("no answer within 30 s".to_owned())),
        }
    }
}

#[cfg(test)]
mod tests;
