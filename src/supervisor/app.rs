//! The supervisor of the process: builds every client the configuration implies, serves HTTP,
//! runs every pipeline concurrently and turns their outcomes into one result.
//!
//! Invariants:
//! - Every client is built before any pipeline is taken: the MongoDB client, the Kafka admin
//!   client and one idempotent producer per pipeline. A refusal is a configuration error (exit 2)
//!   and takes nothing.
//! - A pipeline that fails (a fatal error, or a persistent one after
//!   `persistent_error_attempts`) stops alone by default (`[bridge] on_pipeline_failure =
//!   "isolate"`): failed in `/readyz` and `…_pipeline_failed`, until a reload (SIGHUP) or a
//!   restart runs it again. With `"exit"`, or once no pipeline is left running, the others
//!   are cancelled, drain, flush, commit their safe positions and release their leases before
//!   the process exits non-zero. A group member never exits for an isolated failure: the
//!   pipeline stays with it, failed.
//! - With `[bridge] group_id`, the pipelines run where the group assigns them
//!   (`crate::supervisor::group`); without, every pipeline runs here (standing by while another instance
//!   owns it).
//! - A pipeline task that panics is an error ([`BridgeError::TaskPanicked`]), never a clean stop.
//! - Shutdown (the `shutdown` future, or [`Bridge::shutdown`]) marks the process not ready first,
//!   then cancels every pipeline; each drains within `shutdown_timeout_ms`. The HTTP endpoint
//!   answers until every pipeline stopped (`/readyz` 503 "draining", `/healthz` 200).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::error::BridgeError;
use crate::kafka::admin::KafkaAdmin;
use crate::observe::health::Health;
use crate::observe::metrics::Metrics;
use crate::pipeline::{self, Ended, PipelineContext};
use crate::supervisor::reload::{Reload, Reloader};
use crate::supervisor::roster::Roster;

/// A running bridge.
pub struct Bridge {
    metrics_addr: SocketAddr,
    cancel: CancellationToken,
    health: Arc<Health>,
    metrics: Metrics,
    reloader: Arc<Reloader>,
    task: tokio::task::JoinHandle<Result<(), BridgeError>>,
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
        let admin = KafkaAdmin::new(&config.kafka).map_err(|e| {
            crate::config::kafka::refusal(&config, "admin client configuration", &e)
        })?;
        let mut sinks = Vec::with_capacity(config.pipelines.len());
        for p in &config.pipelines {
            let sink =
                PipelineContext::new_sink(&config, p, &metrics.pipeline(&p.name), None, None);
            sinks.push(sink.map_err(|e| match e {
                BridgeError::Producer(e) => {
                    crate::config::kafka::refusal(&config, "producer configuration", &e)
                }
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
        info!(
            %metrics_addr,
            pipelines = config.pipelines.len(),
            encode_threads = config.bridge.encode_threads,
            "bridge started"
        );
        let owner = format!(
            "{}:{}:{}",
            crate::offsets::hostname(),
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let contexts: Vec<PipelineContext> = config
            .pipelines
            .iter()
            .zip(sinks)
            .map(|(p, sink)| PipelineContext {
                config: Arc::clone(&config),
                pipeline: p.clone(),
                client: client.clone(),
                owner: owner.clone(),
                metrics: metrics.pipeline(&p.name),
                health: health.pipeline(&p.name),
                admin: admin.clone(),
                sink,
                learned: Default::default(),
            })
            .collect();
        tokio::spawn(crate::observe::history::run(
            client.clone(),
            metrics.clone(),
            Duration::from_millis(config.metrics.history_interval_ms),
            cancel.child_token(),
        ));
        let (reloads_tx, reloads) = tokio::sync::mpsc::unbounded_channel();
        let reloader = Arc::new(Reloader {
            current: std::sync::Mutex::new(Arc::clone(&config)),
            client: client.clone(),
            admin: admin.clone(),
            metrics: metrics.clone(),
            health: Arc::clone(&health),
            owner: owner.clone(),
            supervisor: reloads_tx,
        });
        let task = {
            let (health, metrics, cancel) = (Arc::clone(&health), metrics.clone(), cancel.clone());
            let grouped = config.bridge.group_id.is_some();
            tokio::spawn(async move {
                let result = if grouped {
                    let group_metrics = metrics.group.clone();
                    crate::supervisor::group::run(contexts, health, group_metrics, cancel, reloads)
                        .await
                } else {
                    supervise(contexts, &metrics, &health, cancel, reloads).await
                };
                client.shutdown().immediate(true).await;
                http_stop.cancel();
                result
            })
        };
        Ok(Self {
            metrics_addr,
            cancel,
            health,
            metrics,
            reloader,
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

    /// What applies a configuration reload (SIGHUP) to this bridge.
    pub fn reloader(&self) -> Arc<Reloader> {
        Arc::clone(&self.reloader)
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
    crate::observe::http::serve(
        listen,
        metrics.clone(),
        Arc::clone(health),
        max_age,
        cancel.clone(),
    )
    .await
    .map_err(|e| BridgeError::Config {
        field: "metrics.listen".into(),
        reason: match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "cannot listen on {listen}: another process holds the port (a second bridge on \
                 this host?); stop it or give this bridge a free port"
            ),
            _ => format!("cannot listen on {listen}: {e}"),
        },
    })
}

/// The settings that matter, as structured fields (secrets redacted), once at start.
fn log_settings(config: &Config) {
    let m = &config.mongodb;
    let bounds = config.in_flight_bounds();
    let b = &config.bridge;
    info!(
        version = env!("CARGO_PKG_VERSION"),
        git_sha = crate::observe::metrics::GIT_SHA,
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
            topic = %p.topic.clone().unwrap_or_else(|| crate::encode::topics::fallback(p, &config.kafka.topic_prefix)),
            full_document = ?p.full_document,
            value = ?p.value,
            json = ?p.json_mode(),
            format = ?p.format,
            key_format = ?p.key_format,
            tombstones = p.tombstones,
            on_history_lost = ?p.on_history_lost,
            on_oversize = ?p.on_oversize,
            delivery = ?p.delivery,
            "pipeline configured"
        );
    }
}

/// Runs every pipeline (and what reloads add) until `cancel` or the first error (a panicked
/// task counts as one), which cancels the others. Also an error: every pipeline refused at
/// start. After a reload the process keeps running with every pipeline refused (health names
/// each), so a reload that changed a stream never takes the service down: `offsets
/// accept-config` and the next SIGHUP run it.
async fn supervise(
    contexts: Vec<PipelineContext>,
    metrics: &Metrics,
    health: &Health,
    cancel: CancellationToken,
    mut reloads: tokio::sync::mpsc::UnboundedReceiver<Reload>,
) -> Result<(), BridgeError> {
    let shutdown_ms = contexts
        .first()
        .map_or(0, |c| c.config.bridge.shutdown_timeout_ms);
    let isolate = contexts.first().is_none_or(|c| {
        c.config.bridge.on_pipeline_failure == crate::config::OnPipelineFailure::Isolate
    });
    let mut roster = Roster::new(cancel.clone(), shutdown_ms);
    for ctx in contexts {
        roster.start(ctx, None).await;
    }
    let mut refused = std::collections::HashSet::new();
    let mut reloaded = false;
    let result = loop {
        tokio::select! {
            () = cancel.cancelled() => break Ok(()),
            Some(reload) = reloads.recv() => {
                reloaded = true;
                let mut stopping = reload.removed.clone();
                stopping.extend(reload.contexts.iter().map(|c| c.pipeline.name.clone()));
                roster.stop(&stopping).await;
                for name in &reload.removed {
                    health.remove_pipeline(name);
                    refused.remove(name);
                }
                for ctx in reload.contexts {
                    refused.remove(&ctx.pipeline.name);
                    roster.start(ctx, None).await;
                }
            }
            end = roster.next_end() => {
                let error = match end.result {
                    Ok(Ended::Stopped | Ended::Fenced) => continue,
                    Ok(Ended::Refused) => {
                        refused.insert(end.name.clone());
                        if !roster.is_empty() {
                            continue;
                        }
                        if reloaded {
                            tracing::error!(
                                "every pipeline is refused after the reload (see the log above \
                                 for each); the process keeps running: run `offsets \
                                 accept-config` (or `accept-cluster`) or restore the file, then \
                                 send SIGHUP again");
                            continue;
                        }
                        BridgeError::Config {
                            field: "pipelines".into(),
                            reason: "every pipeline was refused: its configured stream, or \
                                     the MongoDB cluster, differs from the one its position was \
                                     committed for (see the log above for each)"
                                .into(),
                        }
                    }
                    Err(error) if !end.by_itself => {
                        tracing::warn!(pipeline = %end.name, error = %error,
                                       "pipeline ended with an error while stopping");
                        continue;
                    }
                    Err(error) => {
                        if matches!(error, BridgeError::TaskPanicked { .. }) {
                            let m = metrics.pipeline(&end.name);
                            m.error(error.kind(), error.class().label());
                            m.failed.set(1);
                            health
                                .pipeline(&end.name)
                                .set_failed(&error.stopped_text(&error.to_string()));
                        }
                        if isolate && !roster.is_empty() {
                            tracing::warn!(pipeline = %end.name,
                                           "pipeline failed; the other pipelines run on \
                                            ([bridge] on_pipeline_failure = \"isolate\")");
                            continue;
                        }
                        error
                    }
                };
                break Err(error);
            }
        }
    };
    roster.stop_all().await;
    result
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
