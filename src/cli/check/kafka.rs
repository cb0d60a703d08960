//! The Kafka half of `check`: the producer librdkafka builds from the configuration,
//! reachability, each target topic (`topics.rs`), and the topics' `max.message.bytes` against
//! the largest documents of the watched collections.

use rdkafka::admin::ResourceSpecifier;

use super::topics::AutoCreate;
use super::{CHECK_TIMEOUT, CheckLine, Largest, line, warning};
use crate::config::Config;
use crate::error::BridgeError;
use crate::kafka::admin::KafkaAdmin;
use crate::kafka::context::KafkaContext;
use crate::kafka::sink::KafkaSink;

/// Bytes a record adds to its document copies: key, headers, the change event's other fields.
const RECORD_OVERHEAD: u64 = 1024;
/// librdkafka's default `message.max.bytes`.
const PRODUCER_DEFAULT_MAX: u64 = 1_000_000;

pub(super) async fn check(config: &Config, largest: &[Largest]) -> Vec<CheckLine> {
    let mut lines = vec![producer_line()];
    let admin = match KafkaAdmin::new(&config.kafka) {
        Ok(admin) => admin,
        Err(e) => {
            let text = format!(
                "Kafka client cannot be created: {}",
                config.redact(&e.to_string())
            );
            lines.push(line(false, text));
            return lines;
        }
    };
    let probed = probe(config).await;
    let metadata = match probed {
        Probe::Reached => admin.metadata(CHECK_TIMEOUT).await.ok(),
        Probe::Refused(_) | Probe::Unreachable => None,
    };
    let Some(cluster) = metadata else {
        if let Probe::Refused(reason) = probed {
            let text = format!(
                "Kafka authentication failed at {}: {}. Remedy: check \
                 sasl.mechanism, sasl.username and the password (sasl.password, or \
                 MONGO_KAFKA_BRIDGE__KAFKA__PROPERTIES__SASL_PASSWORD), security.protocol and \
                 ssl.* in [kafka.properties]",
                config.kafka.bootstrap_servers,
                config.redact(&reason)
            );
            lines.push(line(false, text));
            return lines;
        }
        let text = format!(
            "Kafka at {} unreachable. Remedy: check kafka.bootstrap_servers and the security \
             properties in [kafka.properties]",
            config.kafka.bootstrap_servers
        );
        lines.push(line(false, text));
        return lines;
    };
    lines.push(line(
        true,
        format!("Kafka reachable ({} broker(s))", cluster.brokers),
    ));
    let broker = match cluster.broker_id {
        Some(id) => {
            let keys = ["auto.create.topics.enable", "message.max.bytes"];
            admin.describe(ResourceSpecifier::Broker(id), &keys).await
        }
        None => vec![None, None],
    };
    let auto = match broker[0].as_deref() {
        Some("true") => AutoCreate::On,
        Some(_) => AutoCreate::Off,
        None => AutoCreate::Unknown,
    };
    let broker_max = broker[1].as_deref().and_then(|v| v.parse::<u64>().ok());
    for p in &config.pipelines {
        if p.routing.is_some() {
            lines.extend(super::routing::lines(config, p, &cluster, &admin, auto).await);
        } else {
            lines.push(super::topics::topic_line(config, p, &cluster, &admin, auto).await);
        }
        lines.extend(super::heartbeat::line(config, p, &cluster, &admin, auto).await);
        lines.extend(super::topics::namespace_topics_line(
            config, p, &cluster, largest, auto,
        ));
    }
    if let Some(group) = &config.bridge.group_id {
        lines.extend(super::group::check(config, group, &cluster).await);
    }
    lines.extend(super::exactly_once::check(config, &cluster, &admin).await);
    let producer_max = config
        .kafka
        .properties
        .get("message.max.bytes")
        .and_then(|v| v.to_string().parse::<u64>().ok())
        .unwrap_or(PRODUCER_DEFAULT_MAX);
    for l in largest {
        let topic_max = if cluster.topics.iter().any(|t| t.name == l.topic) {
            let keys = ["max.message.bytes"];
            admin
                .describe(ResourceSpecifier::Topic(&l.topic), &keys)
                .await[0]
                .as_deref()
                .and_then(|v| v.parse::<u64>().ok())
        } else {
            broker_max
        };
        let queue = config.in_flight_bounds().queue_bytes as u64;
        let batch = crate::config::kafka::batch_bytes(&config.kafka, None) as u64;
        if let Some(line) = topic_max.and_then(|t| batch_line(&l.topic, t, batch)) {
            lines.push(line);
        }
        lines.push(size_line(l, topic_max, producer_max, queue));
    }
    lines
}

/// A warning when `topic` accepts smaller record batches (`topic_max`) than the producer
/// builds (`batch`): the run rebuilds its producer at the topic's first record
/// ([`crate::kafka::limits`]).
fn batch_line(topic: &str, topic_max: u64, batch: u64) -> Option<CheckLine> {
    (topic_max < batch).then(|| {
        warning(format!(
            "topic {topic:?} accepts record batches of at most {topic_max} B (max.message.bytes), \
             below the producer's {batch} B (batch.size, message.max.bytes): the bridge rebuilds \
             its producer with batch.size = {topic_max} at the topic's first record (one \
             restart). Remedy: set [kafka.properties] \"batch.size\" = {topic_max} or less"
        ))
    })
}

/// What the pipelines' producer found when it asked Kafka for metadata.
enum Probe {
    /// Metadata answered.
    Reached,
    /// The login was refused (librdkafka's reason).
    Refused(String),
    /// No answer within the check's timeout (or the producer cannot be built).
    Unreachable,
}

/// Asks for metadata through the pipelines' producer, whose thread polls librdkafka's events (an
/// admin client's are not polled while it waits): the answer is known as soon as the login is
/// refused or the metadata arrives.
async fn probe(config: &Config) -> Probe {
    let timeout = config.message_timeout_ms();
    let Ok(sink) = KafkaSink::new(&config.kafka, timeout, None, None, KafkaContext::default())
    else {
        return Probe::Unreachable;
    };
    let metadata = sink.metadata_brokers(CHECK_TIMEOUT);
    tokio::pin!(metadata);
    loop {
        tokio::select! {
            answer = &mut metadata => return match (sink.authentication_failure(), answer) {
                (Some(reason), _) => Probe::Refused(reason),
                (None, Ok(_)) => Probe::Reached,
                (None, Err(_)) => Probe::Unreachable,
            },
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {
                if let Some(reason) = sink.authentication_failure() {
                    return Probe::Refused(reason);
                }
            }
        }
    }
}

/// Builds the pipelines' producer as `run` does (then drops it, off the runtime).
///
/// Errors: the [`BridgeError::Config`] that `run` gives for it.
pub(super) fn producer_builds(config: &Config) -> Result<(), BridgeError> {
    let timeout = config.message_timeout_ms();
    KafkaSink::new(&config.kafka, timeout, None, None, KafkaContext::default())
        .map(drop)
        .map_err(|e| crate::config::kafka::refusal(config, "producer configuration", &e))
}

fn producer_line() -> CheckLine {
    line(
        true,
        "Kafka producer configuration accepted by librdkafka (idempotent, acks=all)",
    )
}

fn size_line(l: &Largest, topic_max: Option<u64>, producer_max: u64, queue: u64) -> CheckLine {
    let estimate = l.bytes * l.copies + RECORD_OVERHEAD;
    let limits = [
        topic_max.map(|t| (t, "topic max.message.bytes")),
        Some((producer_max, "producer message.max.bytes")),
        Some((queue, "producer queue.buffering.max.kbytes")),
    ];
    let (limit, which) = limits
        .into_iter()
        .flatten()
        .min_by_key(|(limit, _)| *limit)
        .expect("invariant: the producer's limits are always known");
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
        assert!(
            size_line(
                &largest(1000, 2),
                Some(1_048_588),
                PRODUCER_DEFAULT_MAX,
                1 << 30
            )
            .ok()
        );
        let too_big = size_line(
            &largest(600_000, 2),
            Some(1_048_588),
            PRODUCER_DEFAULT_MAX,
            1 << 30,
        );
        assert!(!too_big.ok());
        assert!(
            too_big.text.contains("producer message.max.bytes 1000000"),
            "{}",
            too_big.text
        );
        assert!(too_big.text.contains("Remedy"), "{}", too_big.text);
        let small_topic = size_line(
            &largest(60_000, 1),
            Some(50_000),
            PRODUCER_DEFAULT_MAX,
            1 << 30,
        );
        assert!(!small_topic.ok() && small_topic.text.contains("topic max.message.bytes 50000"));
        assert!(batch_line("t", 1_048_588, 1_000_000).is_none());
        let batch = batch_line("t", 50_000, 1_000_000).expect("a warning");
        assert_eq!(batch.level, super::super::Level::Warn, "{}", batch.text);
        assert!(
            batch.text.contains("\"batch.size\" = 50000"),
            "{}",
            batch.text
        );
        let small_queue = size_line(&largest(70_000, 1), None, PRODUCER_DEFAULT_MAX, 65_536);
        assert!(
            !small_queue.ok()
                && small_queue
                    .text
                    .contains("producer queue.buffering.max.kbytes 65536"),
            "{}",
            small_queue.text
        );
    }
}
