//! The supervisor of the process: builds every client the configuration implies, serves HTTP,
//! runs every pipeline concurrently and turns their outcomes into one result.
//!
//! Invariants:
//! - Every client is built before any pipeline is taken: the MongoDB client, the Kafka admin
//!   client and one idempotent producer per pipeline. A refusal is a configuration error (exit 2)
//!   and takes nothing.
//! - A fatal error in one pipeline cancels the others, which drain, flush, commit their safe
//!   positions and release their leases before the process exits non-zero.
//! - A pipeline task that panics is an error ([`BridgeError::TaskPanicked`]), never a clean stop.
//! - Shutdown (the `shutdown` future, or [`Bridge::shutdown`]) marks the process not ready first,
//!   then cancels every pipeline; each drains within `shutdown_timeout_ms`. The HTTP endpoint
//!   answers until every pipeline stopped (`/readyz` 503 "draining", `/healthz` 200).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mongodb::Client;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::error::BridgeError;
use crate::health::Health;
use crate::kafka::admin::KafkaAdmin;
use crate::metrics::Metrics;
use crate::pipeline::{self, Ended, PipelineContext};

/// A running bridge.
pub struct Bridge {
    metrics_addr: SocketAddr,
    cancel: CancellationToken,
    health: Arc<Health>,
    metrics: Metrics,
    task: tokio::task::JoinHandle<Result<(), BridgeError>>,
}

/// A configuration error about `[kafka]`, from a librdkafka refusal.
pub(crate) fn kafka_refused(
    config: &Config,
    what: &str,
    e: &rdkafka::error::KafkaError,
) -> BridgeError {
    BridgeError::Config {
        field: "kafka.properties".into(),
        reason: format!(
            "librdkafka refuses the {what}: {}",
            config.redact(&e.to_string())
        ),
    }
}

impl Bridge {
    /// Builds the clients, starts the HTTP endpoint and every pipeline.
    ///
    /// Errors: [`BridgeError::Config`] for a URI the driver rejects, Kafka properties
    /// librdkafka refuses when it builds a client, or a `metrics.listen` that cannot be bound.
    pub async fn start(config: Config) -> Result<Self, BridgeError> {
        let config = Arc::new(config);
        log_settings(&config);
        let client = crate::mongo::client(&config).await?;
        let metrics = Metrics::new();
        let admin = KafkaAdmin::new(&config.kafka)
            .map_err(|e| kafka_refused(&config, "admin client configuration", &e))?;
        let mut sinks = Vec::with_capacity(config.pipelines.len());
        for p in &config.pipelines {
            let sink = PipelineContext::new_sink(&config, &metrics.pipeline(&p.name));
            sinks.push(sink.map_err(|e| match e {
                BridgeError::Producer(e) => kafka_refused(&config, "producer configuration", &e),
                other => other,
            })?);
        }
        let names = config.pipelines.iter().map(|p| p.name.clone());
        let health = Arc::new(Health::new(names, config.bridge.liveness_timeout_ms));
        let cancel = CancellationToken::new();
        // The endpoint outlives the pipelines' drain: /readyz says "draining" (503) and
        // /healthz stays up until every pipeline stopped.
        let http_stop = CancellationToken::new();
        let metrics_addr = serve(&config, &metrics, &health, &http_stop).await?;
        info!(%metrics_addr, pipelines = config.pipelines.len(), "bridge started");
        let owner = format!(
            "{}:{}:{}",
            hostname(),
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let mut set = JoinSet::new();
        let mut names = HashMap::new();
        for (p, sink) in config.pipelines.iter().zip(sinks) {
            let ctx = PipelineContext {
                config: Arc::clone(&config),
                pipeline: p.clone(),
                client: client.clone(),
                owner: owner.clone(),
                metrics: metrics.pipeline(&p.name),
                health: health.pipeline(&p.name),
                admin: admin.clone(),
                sink,
            };
            let handle = set.spawn(pipeline::run(ctx, cancel.child_token()));
            names.insert(handle.id(), p.name.clone());
        }
        let (metrics_for_task, cancel_for_task) = (metrics.clone(), cancel.clone());
        tokio::spawn(crate::history::run(
            client.clone(),
            metrics.clone(),
            Duration::from_millis(config.metrics.history_interval_ms),
            cancel.child_token(),
        ));
        let task = tokio::spawn(async move {
            let result = supervise(set, names, metrics_for_task, cancel_for_task, client).await;
            http_stop.cancel();
            result
        });
        Ok(Self {
            metrics_addr,
            cancel,
            health,
            metrics,
            task,
        })
    }

    /// The bound address of the HTTP endpoint.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// The shared health state.
    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// The metric families.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Begins a graceful shutdown: not ready, stop reading, drain, flush, commit.
    pub fn shutdown(&self) {
        self.health.draining.store(true, Ordering::Relaxed);
        self.cancel.cancel();
    }

    /// Waits for every pipeline to stop; the first fatal error, if any.
    pub async fn wait(self) -> Result<(), BridgeError> {
        match self.task.await {
            Ok(result) => result,
            Err(e) => Err(pipeline::panicked("*", "bridge", e)),
        }
    }
}

/// Starts `/metrics`, `/healthz`, `/readyz` on `[metrics] listen`.
async fn serve(
    config: &Config,
    metrics: &Metrics,
    health: &Arc<Health>,
    cancel: &CancellationToken,
) -> Result<SocketAddr, BridgeError> {
    let listen = config
        .metrics
        .listen
        .parse()
        .map_err(|_| BridgeError::Config {
            field: "metrics.listen".into(),
            reason: "must be host:port".into(),
        })?;
    let max_age = config.bridge.ready_max_delivery_age_ms as i64;
    crate::http::serve(
        listen,
        metrics.clone(),
        Arc::clone(health),
        max_age,
        cancel.clone(),
    )
    .await
    .map_err(|e| BridgeError::Config {
        field: "metrics.listen".into(),
        reason: format!("cannot listen on {listen}: {e}"),
    })
}

/// The settings that matter, as structured fields (secrets redacted), once at start.
fn log_settings(config: &Config) {
    let m = &config.mongodb;
    let bounds = config.in_flight_bounds();
    let b = &config.bridge;
    info!(
        version = env!("CARGO_PKG_VERSION"),
        git_sha = crate::metrics::GIT_SHA,
        mongodb_uri = %m.uri.redacted(),
        offsets = %format!("{}.{}", m.offsets_database, m.offsets_collection),
        kafka_bootstrap_servers = %config.kafka.bootstrap_servers,
        topic_prefix = %config.kafka.topic_prefix,
        topic_creation = config.kafka.topic_creation.enabled,
        max_in_flight_events = bounds.events,
        max_in_flight_bytes = bounds.bytes,
        commit_interval_ms = b.commit_interval_ms,
        shutdown_timeout_ms = b.shutdown_timeout_ms,
        "starting"
    );
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    for p in &config.pipelines {
        info!(
            pipeline = %p.name,
            scope = %p.scope(),
            topic = %p.topic.clone().unwrap_or_else(|| crate::kafka::topics::fallback(p, &config.kafka.topic_prefix)),
            full_document = ?p.full_document,
            value = ?p.value,
            json = ?p.json_mode(),
            format = ?p.format,
            key_format = ?p.key_format,
            tombstones = p.tombstones,
            on_history_lost = ?p.on_history_lost,
            on_oversize = ?p.on_oversize,
            "pipeline configured"
        );
    }
}

/// Waits for every pipeline task; the first error (a panicked task counts as one) cancels the
/// others. `names` maps task ids to pipeline names.
async fn supervise(
    mut set: JoinSet<Result<Ended, BridgeError>>,
    names: HashMap<tokio::task::Id, String>,
    metrics: Metrics,
    cancel: CancellationToken,
    client: Client,
) -> Result<(), BridgeError> {
    let mut first_error = None;
    let mut refused = 0;
    while let Some(joined) = set.join_next_with_id().await {
        let error = match joined {
            Ok((_, Ok(Ended::Stopped))) => continue,
            Ok((_, Ok(Ended::Refused))) => {
                refused += 1;
                if refused < names.len() {
                    continue;
                }
                BridgeError::Config {
                    field: "pipelines".into(),
                    reason: "every pipeline was refused: its configured stream differs from the \
                             one its position was committed for (see the log above for each)"
                        .into(),
                }
            }
            Ok((_, Err(error))) => error,
            Err(e) => {
                let name = names.get(&e.id()).map_or("*", String::as_str);
                let error = pipeline::panicked(name, "pipeline", e);
                tracing::error!(pipeline = name, error = %error, "pipeline task panicked");
                metrics
                    .pipeline(name)
                    .error(error.kind(), error.class().label());
                error
            }
        };
        cancel.cancel();
        first_error.get_or_insert(error);
    }
    cancel.cancel();
    client.shutdown().immediate(true).await;
    first_error.map_or(Ok(()), Err)
}

/// This host's name (`$HOSTNAME`, else `/etc/hostname`), for owner strings in the offsets.
pub(crate) fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// Runs the bridge until `shutdown` resolves or a pipeline fails fatally, calling `observe` once
/// the bridge started (e.g. to show a live status).
pub async fn run_observed(
    config: Config,
    shutdown: impl Future<Output = ()>,
    observe: impl FnOnce(&Bridge),
) -> Result<(), BridgeError> {
    let bridge = Bridge::start(config).await?;
    observe(&bridge);
    let cancel = bridge.cancel.clone();
    let health = bridge.health();
    tokio::select! {
        () = shutdown => {
            info!("shutdown requested: draining");
            health.draining.store(true, Ordering::Relaxed);
            cancel.cancel();
        }
        () = cancel.cancelled() => {}
    }
    let result = bridge.wait().await;
    match &result {
        Ok(()) => info!("bridge stopped; committed positions cover delivered events only"),
        Err(_) => info!("bridge stopped after a fatal error"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_pipeline_task_is_an_error_naming_it() {
        // GIVEN two pipeline tasks, one of which panics
        let mut set = JoinSet::new();
        let mut names = HashMap::new();
        let cancel = CancellationToken::new();
        let panicking = set.spawn(async { panic!("bug") });
        names.insert(panicking.id(), "orders".to_owned());
        let waiting = cancel.clone();
        let clean = set.spawn(async move {
            waiting.cancelled().await;
            Ok(Ended::Stopped)
        });
        names.insert(clean.id(), "users".to_owned());
        let client = Client::with_uri_str("mongodb://127.0.0.1:1/?directConnection=true")
            .await
            .expect("client");
        let metrics = Metrics::new();
        // WHEN the supervisor joins them
        let result = supervise(set, names, metrics.clone(), cancel.clone(), client).await;
        // THEN the panic is the process's error, the other pipeline was cancelled, and it counts
        assert!(
            matches!(&result, Err(BridgeError::TaskPanicked { pipeline, task: "pipeline", message })
                if pipeline == "orders" && message == "bug"),
            "{result:?}"
        );
        assert!(cancel.is_cancelled());
        assert!(
            metrics
                .render()
                .contains(r#"mongo_kafka_bridge_errors_total{class="persistent",pipeline="orders",stage="panic"} 1"#)
        );
    }
}
