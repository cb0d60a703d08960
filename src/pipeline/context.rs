//! What one pipeline needs for its whole life, across its runs: its settings, the shared
//! clients, its metric and health handles, its producer and what its runs learned.
//!
//! Invariant: everything the pipeline writes to Kafka goes through its one producer, `sink`;
//! a run that failed in the producer gets a new one ([`PipelineContext::new_sink`]).

use std::sync::Arc;
use std::time::Duration;

use mongodb::Client;

use crate::config::{Config, Delivery, PipelineConfig};
use crate::error::{BridgeError, report};
use crate::kafka::admin::KafkaAdmin;
use crate::kafka::context::KafkaContext;
use crate::kafka::limits::Learned;
use crate::kafka::sink::KafkaSink;
use crate::observe::health::PipelineHealth;
use crate::observe::metrics::PipelineMetrics;
use crate::offsets::{OffsetsStore, StreamIdentity};

/// Everything one pipeline needs.
#[derive(Clone)]
pub(crate) struct PipelineContext {
    /// The whole config (for `[kafka]` and `[bridge]`).
    pub config: Arc<Config>,
    /// This pipeline's entry.
    pub pipeline: PipelineConfig,
    /// Shared MongoDB client.
    pub client: Client,
    /// Instance id written as `owner`.
    pub owner: String,
    /// This pipeline's metric handles.
    pub metrics: PipelineMetrics,
    /// This pipeline's health state.
    pub health: Arc<PipelineHealth>,
    /// Shared Kafka admin client (topic metadata and creation).
    pub admin: KafkaAdmin,
    /// The pipeline's producer: records, dead-letter stubs and gap markers.
    pub sink: KafkaSink,
    /// What its runs learned about the topics (kept across restarts,
    /// [`crate::kafka::limits::Learned`]).
    pub learned: Learned,
}

impl PipelineContext {
    /// The pipeline's offsets store (its document, owned as `owner` with `[bridge] lease_ms`).
    pub(super) fn store(&self) -> OffsetsStore {
        let b = &self.config.bridge;
        let lease = Duration::from_millis(b.lease_ms);
        OffsetsStore::new(
            &self.client,
            self.config.mongodb.offsets(),
            &self.pipeline.name,
            StreamIdentity::of(&self.pipeline),
            &self.owner,
            lease,
        )
    }

    fn secrets(&self) -> Vec<String> {
        self.config.secrets()
    }

    /// `error` as one line with this configuration's secrets redacted.
    pub(super) fn report(&self, error: &BridgeError) -> String {
        let secrets = self.secrets();
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        self.config.with_config_path(&report(error, &secrets))
    }

    /// A new producer for pipeline `p`, its statistics into the pipeline's series. With
    /// `delivery = "exactly_once"` it is transactional ([`Config::transactional_id`] of
    /// `stream_uid`, the offsets document's; `None` before the pipeline is taken: such a
    /// producer only proves the configuration and is replaced after the take), with
    /// `batch.size` = `batch_cap` when given ([`Learned::batch_cap`]), and its
    /// `message.timeout.ms` default is at most `transaction.timeout.ms`.
    pub(crate) fn new_sink(
        config: &Config,
        p: &PipelineConfig,
        metrics: &PipelineMetrics,
        stream_uid: Option<&str>,
        batch_cap: Option<usize>,
    ) -> Result<KafkaSink, BridgeError> {
        let context = KafkaContext::new(metrics.rdkafka_gauges());
        let exactly_once = p.delivery == Delivery::ExactlyOnce;
        let mut message_timeout = config.message_timeout_ms();
        if exactly_once {
            message_timeout =
                message_timeout.min(crate::config::exactly_once::transaction_timeout_ms(config));
        }
        let id = exactly_once.then(|| config.transactional_id(&p.name, stream_uid));
        KafkaSink::new(
            &config.kafka,
            message_timeout,
            id.as_deref(),
            batch_cap,
            context,
        )
        .map_err(|e| BridgeError::Producer(Box::new(e)))
    }
}
