//! `check`: connects to MongoDB and Kafka with the configuration and prints one ✔/✘ line per
//! check with the remedy. Exit code 0 when all pass, 1 when one fails (2 is a config error,
//! decided before this runs).
//!
//! Invariants: every check is bounded in time ([`CHECK_TIMEOUT`]); nothing is written anywhere;
//! no line contains a secret.

use std::time::Duration;

use bson::doc;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::app::mongo_client_with;
use crate::config::{Config, PipelineConfig};
use crate::error::{BridgeError, report};
use crate::source::{self, Start};

/// Bound of each network check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    /// Passed?
    pub ok: bool,
    /// What was checked and what was found, or the remedy.
    pub text: String,
}

impl std::fmt::Display for CheckLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", if self.ok { "✔" } else { "✘" }, self.text)
    }
}

fn line(ok: bool, text: impl Into<String>) -> CheckLine {
    CheckLine {
        ok,
        text: text.into(),
    }
}

/// Runs every check; the lines in order. Errors only for a URI the driver rejects.
pub async fn run(config: &Config) -> Result<Vec<CheckLine>, BridgeError> {
    let mut lines = vec![line(
        true,
        format!("configuration valid ({} pipelines)", config.pipelines.len()),
    )];
    lines.extend(check_mongo(config).await?);
    lines.extend(check_kafka(config).await);
    Ok(lines)
}

async fn check_mongo(config: &Config) -> Result<Vec<CheckLine>, BridgeError> {
    let secrets = config.secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let client = mongo_client_with(config, |o| {
        o.server_selection_timeout = Some(CHECK_TIMEOUT);
        o.connect_timeout = Some(CHECK_TIMEOUT);
    })
    .await?;
    let hello = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await;
    let hello = match hello {
        Ok(h) => h,
        Err(e) => {
            return Ok(vec![line(
                false,
                format!(
                    "MongoDB at {} unreachable: {}. Remedy: check mongodb.uri, that the server \
                     runs and that this host may reach it",
                    config
                        .mongodb
                        .uri
                        .redacted()
                        .split('?')
                        .next()
                        .unwrap_or(""),
                    report(&e, &secrets)
                ),
            )]);
        }
    };
    let mut lines = Vec::new();
    if let Ok(set) = hello.get_str("setName") {
        lines.push(line(true, format!("MongoDB is a replica set ({set:?})")));
    } else if hello.get_str("msg") == Ok("isdbgrid") {
        lines.push(line(true, "MongoDB is a sharded cluster (mongos)"));
    } else {
        lines.push(line(
            false,
            "MongoDB is a standalone server: change streams need a replica set \
            or a sharded cluster. Remedy: start mongod with --replSet and run rs.initiate()",
        ));
        return Ok(lines);
    }
    for p in &config.pipelines {
        lines.push(check_stream(&client, p, &secrets).await);
    }
    client.shutdown().immediate(true).await;
    Ok(lines)
}

async fn check_stream(client: &mongodb::Client, p: &PipelineConfig, secrets: &[&str]) -> CheckLine {
    let opened = tokio::time::timeout(
        CHECK_TIMEOUT,
        source::open(client, p, &Start::Now, Duration::from_millis(100)),
    )
    .await;
    match opened {
        Ok(Ok(_stream)) => line(
            true,
            format!("pipeline {}: change stream opens on {}", p.name, p.scope()),
        ),
        Ok(Err(e)) => line(
            false,
            format!(
                "pipeline {}: change stream on {} fails: {}. Remedy: check the namespace, the \
                 `pipeline` stages and the user's changeStream and find privileges",
                p.name,
                p.scope(),
                report(&e, secrets)
            ),
        ),
        Err(_) => line(
            false,
            format!(
                "pipeline {}: change stream on {} timed out",
                p.name,
                p.scope()
            ),
        ),
    }
}

/// The topic a pipeline writes, when it is known before any event (a fixed `topic` or a
/// collection scope).
pub fn known_topic(p: &PipelineConfig, prefix: &str) -> Option<String> {
    match (&p.topic, &p.database, &p.collection) {
        (Some(topic), _, _) => Some(topic.clone()),
        (None, Some(db), Some(coll)) => Some(format!("{prefix}{db}.{coll}")),
        _ => None,
    }
}

async fn check_kafka(config: &Config) -> Vec<CheckLine> {
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
    let auto_create = match broker_id {
        Some(id) => broker_auto_create(config, id).await,
        None => None,
    };
    for p in &config.pipelines {
        lines.push(topic_line(
            p,
            &config.kafka.topic_prefix,
            &topics,
            auto_create,
        ));
    }
    lines
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

async fn broker_auto_create(config: &Config, broker_id: i32) -> Option<bool> {
    let admin: AdminClient<DefaultClientContext> = admin_config(config).create().ok()?;
    let options = AdminOptions::new().request_timeout(Some(CHECK_TIMEOUT));
    let results = admin
        .describe_configs([&ResourceSpecifier::Broker(broker_id)], &options)
        .await
        .ok()?;
    let resource = results.into_iter().next()?.ok()?;
    let entry = resource.get("auto.create.topics.enable")?;
    entry.value.as_deref().map(|v| v == "true")
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
