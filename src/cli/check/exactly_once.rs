//! The exactly-once half of `check` (pipelines with `delivery = "exactly_once"`): whether the
//! broker supports transactions, and whether the pipelines' progress topics exist compacted
//! and another can be created so, and whether each known target topic survives the loss of a
//! broker (a transaction's markers need every partition it wrote to have a leader).
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
    let mut lines = vec![
        transactions_line(config).await,
        progress_line(config, cluster, admin).await,
    ];
    lines.extend(replication_lines(config, cluster));
    lines
}

/// A warning for each known target topic of an exactly-once pipeline with a single replica in
/// a cluster of several brokers: while that broker is down its partitions have no leader, and
/// the transaction coordinator skips the markers of a partition without one ("likely deleted
/// already", Kafka's `TransactionMarkerChannelManager`), so a transaction aborted meanwhile
/// leaves its records there, and the producer's next commit makes them visible (seen in the
/// fault suite's `stallcoord` on a topic of replication factor 1).
fn replication_lines(config: &Config, cluster: &ClusterInfo) -> Vec<CheckLine> {
    if cluster.brokers < 2 {
        return Vec::new();
    }
    let prefix = &config.kafka.topic_prefix;
    config
        .pipelines
        .iter()
        .filter(|p| p.delivery == crate::config::Delivery::ExactlyOnce)
        .filter_map(|p| {
            let topic = crate::encode::topics::known(p, prefix)?;
            let info = cluster.topics.iter().find(|t| t.name == topic)?;
            (info.replicas == 1).then(|| {
                warning(format!(
                    "pipeline {}: topic {topic} has 1 replica in a cluster of {} brokers: a \
                     transaction aborted while its broker is down keeps its records there \
                     (Kafka skips the markers of a partition without a leader) and the next \
                     commit makes them visible. Remedy: replication factor 3 and \
                     min.insync.replicas 2 for exactly-once topics",
                    p.name, cluster.brokers
                ))
            })
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::admin::TopicInfo;

    fn cluster(brokers: usize, replicas: usize) -> ClusterInfo {
        ClusterInfo {
            brokers,
            broker_id: Some(1),
            topics: vec![TopicInfo {
                name: "shop.orders".into(),
                partitions: 3,
                replicas,
            }],
        }
    }

    #[test]
    fn a_single_replica_topic_of_an_exactly_once_pipeline_is_warned_in_a_cluster() {
        let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                    [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"orders\"\n\
                    delivery = \"exactly_once\"\n";
        let config = Config::from_toml(text, std::iter::empty()).expect("valid");
        let warned = replication_lines(&config, &cluster(3, 1));
        assert_eq!(warned.len(), 1);
        assert!(
            warned[0].text.contains("shop.orders has 1 replica"),
            "{}",
            warned[0].text
        );
        assert!(replication_lines(&config, &cluster(3, 3)).is_empty());
        assert!(
            replication_lines(&config, &cluster(1, 1)).is_empty(),
            "one broker: nothing to lose over"
        );
    }
}
