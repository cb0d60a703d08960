//! Kafka administration: cluster metadata, topic and broker configurations, and topic creation
//! (`[kafka.topic_creation]`, Debezium's `topic.creation.*` idea).
//!
//! Invariants:
//! - Every call is bounded in time and runs blocking librdkafka calls on the blocking pool; the
//!   client itself is destroyed there too ([`super::Detached`]).
//! - The client can be rebuilt ([`KafkaAdmin::renew`]): every clone sees the new one from its
//!   next call, while a call in progress finishes on the client it started on. A librdkafka
//!   client can be left with no broker to talk to: since librdkafka 2.10 it forgets every
//!   broker a metadata reply does not list, and a KRaft broker that its controller fenced
//!   (frozen longer than `broker.session.timeout.ms`, 9 s by default) lists no broker at all
//!   in the milliseconds before it is unfenced. Such a client schedules no re-bootstrap (it
//!   has no broker to send the metadata request that would start that timer), so each of its
//!   calls times out until it is rebuilt; pipelines rebuild it after a Kafka failure
//!   (`pipeline/recovery.rs`).
//! - Creation tolerates `TOPIC_ALREADY_EXISTS` (another instance, or the broker's auto-creation,
//!   was first); a topic the cluster lists is never created again.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::Detached;
use super::context::KafkaContext;
use crate::config::kafka::admin_client_config;
use crate::config::{KafkaConfig, TopicCreation};
use crate::error::BridgeError;

/// Bound of one administrative request.
pub(crate) const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One topic as the cluster's metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TopicInfo {
    /// Topic name.
    pub name: String,
    /// Partition count.
    pub partitions: usize,
    /// The fewest replicas any of its partitions has.
    pub replicas: usize,
}

/// What the cluster's metadata says.
#[derive(Debug, Clone)]
pub(crate) struct ClusterInfo {
    /// Brokers listed.
    pub brokers: usize,
    /// The id of the first broker listed, for broker configurations.
    pub broker_id: Option<i32>,
    /// Every topic.
    pub topics: Vec<TopicInfo>,
}

type Client = Arc<Detached<AdminClient<KafkaContext>>>;

/// An admin client for `[kafka]` (clones share it, and share its renewals).
#[derive(Clone)]
pub(crate) struct KafkaAdmin {
    shared: Arc<Shared>,
}

struct Shared {
    config: rdkafka::ClientConfig,
    /// The client calls start on, and how many times it was rebuilt.
    current: RwLock<(Client, u64)>,
}

impl KafkaAdmin {
    /// Creates the client (nothing is contacted yet).
    ///
    /// Errors: librdkafka's refusal of the connection or security properties.
    pub(crate) fn new(kafka: &KafkaConfig) -> Result<Self, KafkaError> {
        let config = admin_client_config(kafka);
        let client = Self::build(&config)?;
        Ok(Self {
            shared: Arc::new(Shared {
                config,
                current: RwLock::new((client, 0)),
            }),
        })
    }

    fn build(config: &rdkafka::ClientConfig) -> Result<Client, KafkaError> {
        let admin = config.create_with_context(KafkaContext::default())?;
        Ok(Arc::new(Detached::new(admin)))
    }

    /// The client the next call starts on.
    fn admin(&self) -> Client {
        let current = self
            .shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(&current.0)
    }

    /// How many times the client was rebuilt (a generation for [`KafkaAdmin::renew`]).
    pub(crate) fn generation(&self) -> u64 {
        self.shared
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
    }

    /// Rebuilds the client unless it was rebuilt since `generation` (several pipelines that
    /// failed together rebuild it once). Returns whether this call rebuilt it.
    ///
    /// Errors: librdkafka's refusal of the configuration (it was accepted once: not expected).
    pub(crate) fn renew(&self, generation: u64) -> Result<bool, KafkaError> {
        let mut current = self
            .shared
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if current.1 != generation {
            return Ok(false);
        }
        *current = (Self::build(&self.shared.config)?, generation + 1);
        Ok(true)
    }

    /// The cluster's brokers and topics. Errors: the metadata request's (e.g. a timeout when no
    /// broker answers within `timeout`).
    pub(crate) async fn metadata(&self, timeout: Duration) -> Result<ClusterInfo, KafkaError> {
        let admin = self.admin();
        let read = tokio::task::spawn_blocking(move || {
            let m = admin.inner().fetch_metadata(None, timeout)?;
            Ok(ClusterInfo {
                brokers: m.brokers().len(),
                broker_id: m.brokers().first().map(|b| b.id()),
                topics: m
                    .topics()
                    .iter()
                    .map(|t| TopicInfo {
                        name: t.name().to_owned(),
                        partitions: t.partitions().len(),
                        replicas: t
                            .partitions()
                            .iter()
                            .map(|p| p.replicas().len())
                            .min()
                            .unwrap_or(0),
                    })
                    .collect(),
            })
        });
        read.await
            .unwrap_or(Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail)))
    }

    /// The values of `keys` in the configuration of `resource`, `None` each where unknown.
    pub(crate) async fn describe(
        &self,
        resource: ResourceSpecifier<'_>,
        keys: &[&str],
    ) -> Vec<Option<String>> {
        let unknown = vec![None; keys.len()];
        let options = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        let Ok(results) = self.admin().describe_configs([&resource], &options).await else {
            return unknown;
        };
        let Some(Ok(found)) = results.into_iter().next() else {
            return unknown;
        };
        keys.iter()
            .map(|k| found.get(k).and_then(|e| e.value.clone()))
            .collect()
    }

    /// Asks whether `topic` could be created with `settings` (CreateTopics with
    /// `validate_only`: nothing is created).
    ///
    /// Errors: the broker's refusal, or the request's failure.
    pub(crate) async fn validate_create(
        &self,
        topic: &str,
        settings: &TopicCreation,
    ) -> Result<(), KafkaError> {
        self.create_with(topic, settings, true).await.map(|_| ())
    }

    /// Creates `topic` with `settings`; a topic that already exists is fine. Returns whether
    /// this call created it (`false`: it existed, e.g. another instance created it, or the
    /// metadata listed before did not show it yet).
    ///
    /// Errors: the broker's refusal (authorization, an invalid replication factor or config), or
    /// the request's failure.
    pub(crate) async fn create(
        &self,
        topic: &str,
        settings: &TopicCreation,
    ) -> Result<bool, KafkaError> {
        self.create_with(topic, settings, false).await
    }

    async fn create_with(
        &self,
        topic: &str,
        settings: &TopicCreation,
        validate_only: bool,
    ) -> Result<bool, KafkaError> {
        let configs: Vec<(String, String)> = settings.topic_configs();
        let mut new = NewTopic::new(
            topic,
            settings.partitions,
            TopicReplication::Fixed(settings.replication_factor),
        );
        for (key, value) in &configs {
            new = new.set(key, value);
        }
        let options = AdminOptions::new()
            .operation_timeout(Some(ADMIN_TIMEOUT))
            .validate_only(validate_only);
        let results = self.admin().create_topics([&new], &options).await?;
        let mut created = false;
        for result in results {
            match result {
                Ok(_) => created = true,
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => return Err(KafkaError::AdminOp(code)),
            }
        }
        Ok(created)
    }
}

/// What [`KafkaAdmin::ensure_partitions`] found.
#[derive(Debug)]
pub(crate) struct Partitions {
    /// The partition count the cluster lists.
    pub count: usize,
    /// Why there are fewer than wanted: the broker refused to add them (e.g.
    /// `UnsupportedFeature` on a broker without CreatePartitions, or an authorization error).
    pub refused: Option<KafkaError>,
}

impl KafkaAdmin {
    /// Makes `topic` (a group's control topic) have at least `partitions` partitions: creates
    /// it with `replication_factor` (-1: the broker's default) when missing, extends it when it
    /// has fewer. Members that race are fine: `TOPIC_ALREADY_EXISTS` and `INVALID_PARTITIONS`
    /// (another member extended it first) are read again, not errors. An existing topic that
    /// cannot be extended is reported in [`Partitions::refused`], with the count it has.
    ///
    /// Errors: the topic is missing and cannot be created (e.g. `TOPIC_AUTHORIZATION_FAILED`:
    /// the ACLs the README's "Running several replicas" lists), or metadata cannot be read.
    pub(crate) async fn ensure_partitions(
        &self,
        topic: &str,
        partitions: i32,
        replication_factor: i32,
    ) -> Result<Partitions, KafkaError> {
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let wanted = usize::try_from(partitions).unwrap_or(1);
        let mut refused = None;
        for _ in 0..3 {
            let listed = self.metadata(ADMIN_TIMEOUT).await?;
            let outcome = match listed.topics.iter().find(|t| t.name == topic) {
                Some(t) if t.partitions >= wanted => {
                    let count = t.partitions;
                    return Ok(Partitions {
                        count,
                        refused: None,
                    });
                }
                Some(_) => {
                    let more = NewPartitions::new(topic, wanted);
                    match self.admin().create_partitions([&more], &options).await {
                        Ok(results) => results.into_iter().map(|r| r.map(drop)).collect(),
                        Err(e) => {
                            refused = Some(e);
                            break;
                        }
                    }
                }
                None => {
                    let replication = TopicReplication::Fixed(replication_factor);
                    let new = NewTopic::new(topic, partitions, replication);
                    let results = self.admin().create_topics([&new], &options).await?;
                    results.into_iter().map(|r| r.map(drop)).collect::<Vec<_>>()
                }
            };
            for result in outcome {
                match result {
                    Ok(())
                    | Err((_, RDKafkaErrorCode::TopicAlreadyExists))
                    | Err((_, RDKafkaErrorCode::InvalidPartitions)) => {}
                    Err((_, code)) => refused = Some(KafkaError::AdminOp(code)),
                }
            }
            if refused.is_some() {
                break;
            }
        }
        let listed = self.metadata(ADMIN_TIMEOUT).await?;
        match listed.topics.iter().find(|t| t.name == topic) {
            Some(t) => Ok(Partitions {
                count: t.partitions,
                refused: refused.filter(|_| t.partitions < wanted),
            }),
            None => Err(refused.unwrap_or(KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopic))),
        }
    }
}

/// Creates a pipeline's topics on first use (`[kafka.topic_creation] enabled = true`), and
/// remembers the ones known to exist so the per-event check is one set lookup.
pub(crate) struct TopicCreator {
    admin: KafkaAdmin,
    settings: TopicCreation,
    pipeline: String,
    known: HashSet<Arc<str>>,
    last: Option<Arc<str>>,
}

impl TopicCreator {
    /// A creator for `pipeline`'s topics; `existing` are topics the cluster already lists.
    pub(crate) fn new(
        admin: KafkaAdmin,
        settings: TopicCreation,
        pipeline: &str,
        existing: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            admin,
            settings,
            pipeline: pipeline.to_owned(),
            known: existing.into_iter().map(Arc::from).collect(),
            last: None,
        }
    }

    /// Whether `topic` is known to exist (no admin call before its next record).
    pub(crate) fn knows(&self, topic: &Arc<str>) -> bool {
        self.last.as_ref().is_some_and(|t| Arc::ptr_eq(t, topic)) || self.known.contains(topic)
    }

    /// Makes sure `topic` exists, creating it with the configured partitions, replication factor
    /// and `cleanup.policy` when it does not.
    ///
    /// Errors: [`BridgeError::TopicCreation`] when the cluster refuses.
    pub(crate) async fn ensure(&mut self, topic: &Arc<str>) -> Result<(), BridgeError> {
        if self.last.as_ref().is_some_and(|t| Arc::ptr_eq(t, topic)) || self.known.contains(topic) {
            self.last = Some(Arc::clone(topic));
            return Ok(());
        }
        let created = self
            .admin
            .create(topic, &self.settings)
            .await
            .map_err(|source| BridgeError::TopicCreation {
                pipeline: self.pipeline.clone(),
                topic: topic.to_string(),
                source: Box::new(source),
            })?;
        if created {
            tracing::info!(pipeline = %self.pipeline, topic = %topic,
                partitions = self.settings.partitions,
                replication_factor = self.settings.replication_factor,
                cleanup_policy = %self.settings.cleanup_policy, "created topic");
        } else {
            tracing::debug!(pipeline = %self.pipeline, topic = %topic,
                "topic exists (CreateTopics answered TopicAlreadyExists)");
        }
        self.known.insert(Arc::clone(topic));
        self.last = Some(Arc::clone(topic));
        Ok(())
    }
}
