//! The Kafka half of `check`: reachability, target topics or auto-creation, and the topics'
//! `max.message.bytes` against the largest documents of the watched collections.

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::{CHECK_TIMEOUT, CheckLine, Largest, known_topic, line};
use crate::config::{Config, PipelineConfig};

/// Bytes a record adds to its document copies: key, headers, the change event's other fields.
const RECORD_OVERHEAD: u64 = 1024;
/// librdkafka's default `message.max.bytes`.
const PRODUCER_DEFAULT_MAX: u64 = 1_000_000;

pub(super) async fn check(config: &Config, largest: &[Largest]) -> Vec<CheckLine> {
    let mut client_config = admin_config(config);
    client_config.set("socket.timeout.ms", "5000");
    let consumer: Result<BaseConsumer, _> = client_config.create();
    let consumer = match consumer {
        Ok(c) => c,
        Err(e) => return vec![line(false, format!("Kafka client cannot be created: {e}"))],
    };
    let metadata = tokio::task::spawn_blocking(move || {
        consumer.fetch_metadata(None, CHECK_TIMEOUT).map(|m| {
            let brokers = m.brokers().len();
            let topics: Vec<String> = m.topics().iter().map(|t| t.name().to_owned()).collect();
            let broker_id = m.brokers().first().map(|b| b.id());
            (brokers, topics, broker_id)
        })
    })
    .await;
    let Ok(Ok((brokers, topics, broker_id))) = metadata else {
        let text = format!(
            "Kafka at {} unreachable. Remedy: check kafka.bootstrap_servers and the security \
             properties in [kafka.properties]",
            config.kafka.bootstrap_servers
        );
        return vec![line(false, text)];
    };
    let mut lines = vec![line(true, format!("Kafka reachable ({brokers} broker(s))"))];
    let broker = match broker_id {
        Some(id) => {
            describe(
                config,
                ResourceSpecifier::Broker(id),
                &["auto.create.topics.enable", "message.max.bytes"],
            )
            .await
        }
        None => vec![None, None],
    };
    let auto_create = broker[0].as_deref().map(|v| v == "true");
    let broker_max = broker[1].as_deref().and_then(|v| v.parse::<u64>().ok());
    for p in &config.pipelines {
        lines.push(topic_line(
            p,
            &config.kafka.topic_prefix,
            &topics,
            auto_create,
        ));
    }
    let producer_max = config
        .kafka
        .properties
        .get("message.max.bytes")
        .and_then(|v| v.to_string().parse::<u64>().ok())
        .unwrap_or(PRODUCER_DEFAULT_MAX);
    for l in largest {
        let topic_max = if topics.contains(&l.topic) {
            describe(
                config,
                ResourceSpecifier::Topic(&l.topic),
                &["max.message.bytes"],
            )
            .await[0]
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        } else {
            broker_max
        };
        lines.push(size_line(l, topic_max, producer_max));
    }
    lines
}

fn size_line(l: &Largest, topic_max: Option<u64>, producer_max: u64) -> CheckLine {
    let estimate = l.bytes * l.copies + RECORD_OVERHEAD;
    let (limit, which) = match topic_max {
        Some(t) if t < producer_max => (t, "topic max.message.bytes"),
        _ => (producer_max, "producer message.max.bytes"),
    };
    let text = format!(
        "pipeline {}: largest document in {} is {} B; a record carries up to {} cop{} of it, about \
         {estimate} B, against {which} {limit} B of topic {:?}",
        l.pipeline,
        l.namespace,
        l.bytes,
        l.copies,
        if l.copies == 1 { "y" } else { "ies" },
        l.topic
    );
    if estimate <= limit {
        line(true, text)
    } else {
        line(
            false,
            format!(
                "{text}. Remedy: raise the topic's max.message.bytes (kafka-configs.sh --alter \
             --entity-type topics --entity-name {} --add-config max.message.bytes=N) and \
             \"message.max.bytes\" in [kafka.properties], or set value = \"document\", or \
             on_oversize = \"dead_letter\"",
                l.topic
            ),
        )
    }
}

fn topic_line(
    p: &PipelineConfig,
    prefix: &str,
    topics: &[String],
    auto: Option<bool>,
) -> CheckLine {
    let auto_text = match auto {
        Some(true) => "broker auto-creates topics",
        Some(false) => "broker auto-creation is off",
        None => "broker auto-creation unknown",
    };
    match known_topic(p, prefix) {
        Some(topic) if topics.contains(&topic) => {
            line(true, format!("pipeline {}: topic {topic:?} exists", p.name))
        }
        Some(topic) if auto == Some(false) => line(
            false,
            format!(
                "pipeline {}: topic {topic:?} does not exist and {auto_text}. Remedy: create it \
             (kafka-topics.sh --create --topic {topic} --partitions N)",
                p.name
            ),
        ),
        Some(topic) => line(
            true,
            format!(
                "pipeline {}: topic {topic:?} does not exist yet; {auto_text}",
                p.name
            ),
        ),
        None if auto == Some(false) => line(
            false,
            format!(
                "pipeline {}: writes one topic per collection ({prefix}<db>.<coll>) and {auto_text}. \
             Remedy: create the topics or set `topic`",
                p.name
            ),
        ),
        None => line(
            true,
            format!(
                "pipeline {}: one topic per collection ({prefix}<db>.<coll>); {auto_text}",
                p.name
            ),
        ),
    }
}

/// The values of `keys` in the configuration of `resource`, `None` each where unknown.
async fn describe(
    config: &Config,
    resource: ResourceSpecifier<'_>,
    keys: &[&str],
) -> Vec<Option<String>> {
    let unknown = vec![None; keys.len()];
    let Ok(admin) = admin_config(config).create::<AdminClient<DefaultClientContext>>() else {
        return unknown;
    };
    let options = AdminOptions::new().request_timeout(Some(CHECK_TIMEOUT));
    let Ok(results) = admin.describe_configs([&resource], &options).await else {
        return unknown;
    };
    let Some(Ok(found)) = results.into_iter().next() else {
        return unknown;
    };
    keys.iter()
        .map(|k| found.get(k).and_then(|e| e.value.clone()))
        .collect()
}

/// A client config for metadata and admin calls: bootstrap servers plus the connection and
/// security properties of `[kafka.properties]` (producer-only ones would only cause warnings).
fn admin_config(config: &Config) -> rdkafka::ClientConfig {
    let mut out = rdkafka::ClientConfig::new();
    out.set("bootstrap.servers", &config.kafka.bootstrap_servers);
    let shared = [
        "security.",
        "sasl.",
        "ssl.",
        "socket.",
        "broker.",
        "client.",
        "api.version",
    ];
    for (key, value) in &config.kafka.properties {
        if shared.iter().any(|prefix| key.starts_with(prefix)) {
            out.set(key, value.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn largest(bytes: u64, copies: u64) -> Largest {
        Largest {
            pipeline: "p".into(),
            namespace: "d.c".into(),
            topic: "d.c".into(),
            bytes,
            copies,
        }
    }

    #[test]
    fn sizes_compare_against_the_smaller_limit_with_a_remedy() {
        assert!(size_line(&largest(1000, 2), Some(1_048_588), PRODUCER_DEFAULT_MAX).ok);
        let too_big = size_line(&largest(600_000, 2), Some(1_048_588), PRODUCER_DEFAULT_MAX);
        assert!(!too_big.ok);
        assert!(
            too_big.text.contains("producer message.max.bytes 1000000"),
            "{}",
            too_big.text
        );
        assert!(too_big.text.contains("Remedy"), "{}", too_big.text);
        let small_topic = size_line(&largest(60_000, 1), Some(50_000), PRODUCER_DEFAULT_MAX);
        assert!(!small_topic.ok && small_topic.text.contains("topic max.message.bytes 50000"));
    }
}
