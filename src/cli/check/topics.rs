//! The topics of `check`: each pipeline's target topic (its partitions and `cleanup.policy`
//! when it exists, else who would create it), and for a database or deployment scope the
//! topics of the namespaces that exist now which the cluster lacks, each named with its
//! namespace: with auto-creation off and no topic creation, the pipeline would stop at their
//! first event.

use rdkafka::admin::ResourceSpecifier;

use super::{CheckLine, Largest, line, warning};
use crate::config::{Config, PipelineConfig};
use crate::encode::topics;
use crate::kafka::admin::{ClusterInfo, KafkaAdmin};

/// What the broker says about topic creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AutoCreate {
    On,
    Off,
    Unknown,
}

/// The pipeline's target topic: its partitions and `cleanup.policy` when it exists, else who
/// would create it (the bridge, the broker's auto-creation, nobody).
pub(super) async fn topic_line(
    config: &Config,
    p: &PipelineConfig,
    cluster: &ClusterInfo,
    admin: &KafkaAdmin,
    auto: AutoCreate,
) -> CheckLine {
    let prefix = &config.kafka.topic_prefix;
    let known = topics::known(p, prefix);
    let what = known.as_ref().map_or_else(
        || format!("one topic per collection ({prefix}<db>.<coll>)"),
        |t| format!("topic {t:?}"),
    );
    state_line(config, p, (known, what), cluster, admin, auto).await
}

/// The state of `known`, the topic `what` names (`None`: one created on first use): its
/// partitions and `cleanup.policy` when it exists, else who would create it.
pub(super) async fn state_line(
    config: &Config,
    p: &PipelineConfig,
    (known, what): (Option<String>, String),
    cluster: &ClusterInfo,
    admin: &KafkaAdmin,
    auto: AutoCreate,
) -> CheckLine {
    let creation = &config.kafka.topic_creation;
    if let Some(info) = known
        .as_ref()
        .and_then(|t| cluster.topics.iter().find(|i| &i.name == t))
    {
        let policy = admin
            .describe(ResourceSpecifier::Topic(&info.name), &["cleanup.policy"])
            .await
            .remove(0)
            .unwrap_or_else(|| "unknown".to_owned());
        if p.snapshots() && !policy.contains("compact") {
            return warning(format!(
                "pipeline {}: {what} exists with cleanup.policy={policy}: a snapshot mirrors the \
                 collection only in a compacted topic (retention deletes copied records of \
                 documents that never change again). Remedy: kafka-configs.sh --alter --topic T \
                 --add-config cleanup.policy=compact",
                p.name
            ));
        }
        return line(
            true,
            format!(
                "pipeline {}: {what} exists ({} partition{}, cleanup.policy={policy})",
                p.name,
                info.partitions,
                if info.partitions == 1 { "" } else { "s" }
            ),
        );
    }
    let missing = if known.is_some() {
        "does not exist yet"
    } else {
        "is created on first use"
    };
    let create = "create the topics yourself (kafka-topics.sh --create --topic T --partitions N, \
                  --config cleanup.policy=compact for a latest-state topic) or set \
                  [kafka.topic_creation] enabled = true";
    match (creation.enabled, auto) {
        (true, _) if p.snapshots() && !creation.cleanup_policy.contains("compact") => {
            warning(format!(
                "pipeline {}: {what} {missing}; the bridge creates it with cleanup.policy={}: a \
                 snapshot mirrors the collection only in a compacted topic. Remedy: \
                 [kafka.topic_creation] cleanup_policy = \"compact\"",
                p.name, creation.cleanup_policy
            ))
        }
        (true, _) => line(
            true,
            format!(
                "pipeline {}: {what} {missing}; the bridge creates it ({} partitions, replication \
                 factor {}, cleanup.policy={})",
                p.name, creation.partitions, creation.replication_factor, creation.cleanup_policy
            ),
        ),
        (false, AutoCreate::Off) => line(
            false,
            format!(
                "pipeline {}: {what} {missing} and the broker's auto-creation is off. Remedy: \
                 {create}",
                p.name
            ),
        ),
        (false, auto) => warning(format!(
            "pipeline {}: {what} {missing}: relying on the broker's auto-creation ({}), with its \
             default partition count and cleanup.policy=delete. Remedy: {create}",
            p.name,
            if auto == AutoCreate::On {
                "auto.create.topics.enable=true"
            } else {
                "auto.create.topics.enable unknown"
            }
        )),
    }
}

/// A database or deployment scope without a fixed topic: the topics of the namespaces that
/// exist now which the cluster does not have, each with its namespace (`None` when there are
/// none, or the scope writes one known topic, which [`topic_line`] covers).
pub(super) fn namespace_topics_line(
    config: &Config,
    p: &PipelineConfig,
    cluster: &ClusterInfo,
    largest: &[Largest],
    auto: AutoCreate,
) -> Option<CheckLine> {
    if topics::known(p, &config.kafka.topic_prefix).is_some() {
        return None;
    }
    let missing: Vec<String> = largest
        .iter()
        .filter(|l| l.pipeline == p.name && !cluster.topics.iter().any(|t| t.name == l.topic))
        .map(|l| format!("{} (namespace {})", l.topic, l.namespace))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let list = missing.join(", ");
    let text = format!(
        "pipeline {}: topics of the namespaces that exist now, not on the cluster: {list}",
        p.name
    );
    let create = "create them (kafka-topics.sh --create --topic T --partitions N) or set \
                  [kafka.topic_creation] enabled = true";
    Some(match (config.kafka.topic_creation.enabled, auto) {
        (true, _) => line(true, format!("{text}; the bridge creates them")),
        (false, AutoCreate::Off) => line(
            false,
            format!(
                "{text}; the broker's auto-creation is off, so the pipeline would stop at \
                 their first event. Remedy: {create}"
            ),
        ),
        (false, _) => warning(format!(
            "{text}; relying on the broker's auto-creation. Remedy: {create}"
        )),
    })
}
