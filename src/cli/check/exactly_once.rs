//! The exactly-once half of `check` (pipelines with `delivery = "exactly_once"`): whether the
//! broker supports transactions, and whether the pipelines' progress topics exist compacted
//! and another can be created so.
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

/// The pipelines' progress topics (`…progress.<streamUid>`, one per exactly-once pipeline):
/// each that exists must be compacted, and one more must be creatable (validated with a
/// placeholder `streamUid`, as the names differ only there).
async fn progress_line(config: &Config, cluster: &ClusterInfo, admin: &KafkaAdmin) -> CheckLine {
    let db = &config.mongodb.offsets_database;
    let prefix = crate::config::names::progress_topic(db, "");
    let pattern = format!("{prefix}<streamUid>");
    for t in cluster
        .topics
        .iter()
        .filter(|t| t.name.starts_with(&prefix))
    {
        let policy = admin
            .describe(ResourceSpecifier::Topic(&t.name), &["cleanup.policy"])
            .await
            .remove(0)
            .unwrap_or_else(|| "unknown".to_owned());
        if !policy.contains("compact") {
            return warning(format!(
                "progress topic {:?} has cleanup.policy={policy}: it keeps every progress \
                 record; set cleanup.policy=compact to keep only the newest",
                t.name
            ));
        }
    }
    let sample = crate::config::names::progress_topic(db, &"0".repeat(24));
    match admin
        .validate_create(
            &sample,
            &crate::config::exactly_once::progress_topic_creation(config),
        )
        .await
    {
        Ok(()) => line(
            true,
            format!(
                "progress topics {pattern:?} (one per exactly-once pipeline) can be created \
                 (compacted, 1 partition)"
            ),
        ),
        Err(e) => line(
            false,
            format!(
                "progress topic {sample:?} cannot be created ({e}). Remedy: grant CREATE, \
                 WRITE, READ and DESCRIBE on the topic prefix {prefix:?} (a prefixed ACL)"
            ),
        ),
    }
}
