//! The group half of `check` (`[bridge] group_id`): the group's slots in MongoDB and its
//! control topic in Kafka, read only. A missing topic or slot is not a failure: the first
//! member that starts with this configuration allocates and creates them.

use super::{CHECK_TIMEOUT, CheckLine, line, warning};
use crate::config::Config;
use crate::config::names::{consumer_group, control};
use crate::kafka::admin::ClusterInfo;
use crate::offsets::group::Slots;

/// The lines of group `group`: its settings, the slots of this configuration's pipelines,
/// and the control topic's partitions against them.
pub(super) async fn check(config: &Config, group: &str, cluster: &ClusterInfo) -> Vec<CheckLine> {
    let m = &config.mongodb;
    let session = crate::config::group::session_timeout_ms(&config.kafka);
    let mut highest = None;
    let client = crate::mongo::client_with(config, |o| {
        o.server_selection_timeout = Some(CHECK_TIMEOUT);
        o.connect_timeout = Some(CHECK_TIMEOUT);
    })
    .await;
    let deployment = match &client {
        Ok(client) => stored_identity(client, config).await,
        Err(_) => None,
    };
    let Some(deployment) = deployment else {
        return vec![line(
            true,
            format!(
                "group {group}: members share the pipelines through Kafka's consumer group \
                 (session.timeout.ms {session}, lease_ms {}); the deployment's identity, which \
                 names the consumer group {group}.<id> and its control topic, is created by the \
                 first member (needs Create and Alter on the topic, Describe and Read on the \
                 group: prefixed ACLs, README \"Running several replicas\")",
                config.bridge.lease_ms
            ),
        )];
    };
    let topic = control(&m.offsets_database, group, &deployment);
    let kafka_group = consumer_group(group, &deployment);
    let mut lines = vec![line(
        true,
        format!(
            "group {group}: members share the pipelines through Kafka's consumer group \
             {kafka_group} (session.timeout.ms {session}, lease_ms {}; control topic {topic})",
            config.bridge.lease_ms
        ),
    )];
    if let Ok(client) = &client {
        let slots = Slots::new(client, &m.offsets(), group);
        match tokio::time::timeout(CHECK_TIMEOUT, slots.read()).await {
            Ok(Ok(slots)) => {
                let missing: Vec<&str> = config
                    .pipelines
                    .iter()
                    .map(|p| p.name.as_str())
                    .filter(|name| !slots.values().any(|n| n == name))
                    .collect();
                highest = slots.keys().next_back().copied();
                let text = if missing.is_empty() {
                    format!(
                        "group {group}: every pipeline has its slot ({} slots)",
                        slots.len()
                    )
                } else {
                    format!(
                        "group {group}: {} pipeline(s) without a slot yet ({}); the first member \
                         that starts allocates them",
                        missing.len(),
                        missing.join(", ")
                    )
                };
                lines.push(line(true, text));
            }
            _ => lines.push(warning(format!(
                "group {group}: the slots in {}.{} could not be read",
                m.offsets_database,
                m.offsets().slots_collection()
            ))),
        }
    }
    if let Ok(client) = client {
        client.shutdown().immediate(true).await;
    }
    let listed = cluster.topics.iter().find(|t| t.name == topic);
    lines.push(match (listed, highest) {
        (None, _) => line(
            true,
            format!(
                "group {group}: control topic {topic} does not exist yet; the first member \
                 creates it (needs Create and Alter on it, Describe and Read on the group)"
            ),
        ),
        (Some(t), Some(max)) if t.partitions < (max as usize) + 1 => warning(format!(
            "group {group}: control topic {topic} has {} partitions for {} slots; a member \
             extends it when it starts, if the broker supports CreatePartitions and grants Alter \
             (otherwise create the topic again with spare partitions)",
            t.partitions,
            max + 1
        )),
        (Some(t), _) => line(
            true,
            format!(
                "group {group}: control topic {topic} has {} partitions",
                t.partitions
            ),
        ),
    });
    lines
}

/// The deployment's identity, if a member stored it (read within [`CHECK_TIMEOUT`]).
async fn stored_identity(client: &mongodb::Client, config: &Config) -> Option<String> {
    let offsets = config.mongodb.offsets();
    let read = crate::offsets::deployment::stored(client, &offsets);
    tokio::time::timeout(CHECK_TIMEOUT, read)
        .await
        .ok()
        .and_then(Result::ok)
        .flatten()
}
