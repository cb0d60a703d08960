//! The exactly-once half of `check` (pipelines with `delivery = "exactly_once"`): whether the
//! broker supports transactions, and whether the progress topic exists compacted or can be
//! created so.
//!
//! Invariant: `check`'s one write is here: `init_transactions` for the transactional id
//! `<transactional_id_prefix>check` (librdkafka has no public ApiVersions call to ask the
//! broker otherwise). It registers that id with the coordinator and writes no record.

use rdkafka::admin::ResourceSpecifier;

use super::{CHECK_TIMEOUT, CheckLine, line, warning};
use crate::config::Config;
use crate::kafka::admin::{ClusterInfo, KafkaAdmin};
use crate::kafka::context::KafkaContext;
use crate::kafka::sink::KafkaSink;

/// The lines of the exactly-once checks; none without an exactly-once pipeline.
pub(super) async fn check(
    config: &Config,
    cluster: &ClusterInfo,
    admin: &KafkaAdmin,
) -> Vec<CheckLine> {
    if !config.any_exactly_once() {
        return Vec::new();
    }
    vec![
        transactions_line(config).await,
        progress_line(config, cluster, admin).await,
    ]
}

async fn transactions_line(config: &Config) -> CheckLine {
    let id = format!("{}check", config.transactional_id_prefix());
    let timeout = config
        .message_timeout_ms()
        .min(CHECK_TIMEOUT.as_millis() as u64);
    let sink = match KafkaSink::new(
        &config.kafka,
        timeout,
        Some(&id),
        None,
        KafkaContext::default(),
    ) {
        Ok(sink) => sink,
        Err(e) => {
            let text = format!(
                "transactional producer cannot be created: {}",
                config.redact(&e.to_string())
            );
            return line(false, text);
        }
    };
    match sink.init_transactions(CHECK_TIMEOUT * 2).await {
        Ok(()) => line(
            true,
            format!(
                "Kafka transactions supported (init_transactions for {id:?}, check's one write)"
            ),
        ),
        Err(e) => line(
            false,
            format!(
                "Kafka transactions unavailable (init_transactions for {id:?}: {}). Remedy: a \
                 broker with transactions (Kafka ≥ 0.11; transaction.state.log.replication.factor \
                 ≤ the brokers), and the ACLs WRITE and DESCRIBE on TransactionalId {}*",
                config.redact(&e.to_string()),
                config.transactional_id_prefix()
            ),
        ),
    }
}

async fn progress_line(config: &Config, cluster: &ClusterInfo, admin: &KafkaAdmin) -> CheckLine {
    let topic = crate::config::names::progress_topic(&config.mongodb.offsets_database);
    if cluster.topics.iter().any(|t| t.name == topic) {
        let policy = admin
            .describe(ResourceSpecifier::Topic(&topic), &["cleanup.policy"])
            .await
            .remove(0)
            .unwrap_or_else(|| "unknown".to_owned());
        return if policy.contains("compact") {
            line(
                true,
                format!("progress topic {topic:?} exists (cleanup.policy={policy})"),
            )
        } else {
            warning(format!(
                "progress topic {topic:?} has cleanup.policy={policy}: it keeps every progress \
                 record; set cleanup.policy=compact to keep the newest of each pipeline"
            ))
        };
    }
    match admin
        .validate_create(
            &topic,
            &crate::config::exactly_once::progress_topic_creation(config),
        )
        .await
    {
        Ok(()) => line(
            true,
            format!("progress topic {topic:?} can be created (compacted, 1 partition)"),
        ),
        Err(e) => line(
            false,
            format!(
                "progress topic {topic:?} cannot be created ({e}). Remedy: create it (1 \
                 partition, cleanup.policy=compact) or grant CREATE on it"
            ),
        ),
    }
}
