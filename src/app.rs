//! The supervisor: builds the shared clients, serves HTTP, runs every pipeline concurrently and
//! turns their outcomes into one result.
//!
//! Invariants:
//! - A fatal error in one pipeline cancels the others, which drain, flush and commit their safe
//!   positions before the process exits non-zero.
//! - Shutdown (the `shutdown` future, or [`Bridge::shutdown`]) marks the process not ready first,
//!   then cancels every pipeline; each drains within `shutdown_timeout_ms`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use mongodb::Client;
use mongodb::options::ClientOptions;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::config::Config;
use crate::error::BridgeError;
use crate::health::Health;
use crate::metrics::Metrics;
use crate::pipeline::{self, PipelineContext};

/// A running bridge.
pub struct Bridge {
    metrics_addr: SocketAddr,
    cancel: CancellationToken,
    health: Arc<Health>,
    metrics: Metrics,
    task: tokio::task::JoinHandle<Result<(), BridgeError>>,
}

/// Connects a MongoDB client for `config` (no I/O beyond SRV lookups; servers are contacted
/// lazily). Errors: [`BridgeError::Config`] on `mongodb.uri` for a URI the driver rejects.
pub async fn mongo_client(config: &Config) -> Result<Client, BridgeError> {
    mongo_client_with(config, |_| ()).await
}

/// Like [`mongo_client`], letting `adjust` change the parsed options (e.g. shorter timeouts).
pub async fn mongo_client_with(
    config: &Config,
    adjust: impl FnOnce(&mut ClientOptions),
) -> Result<Client, BridgeError> {
    let uri = &config.mongodb.uri;
    let mut options =
        ClientOptions::parse(uri.expose())
            .await
            .map_err(|e| BridgeError::Config {
                field: "mongodb.uri".into(),
                reason: config.redact(&e.to_string()),
            })?;
    if options.app_name.is_none() {
        options.app_name = Some("mongo-kafka-bridge".to_owned());
    }
    adjust(&mut options);
    Client::with_options(options).map_err(|e| BridgeError::Config {
        field: "mongodb.uri".into(),
        reason: e.kind.to_string(),
    })
}

impl Bridge {
    /// Starts the HTTP endpoint and every pipeline. Errors: [`BridgeError::Config`] for a URI the
    /// driver rejects or a `metrics.listen` that cannot be bound.
    pub async fn start(config: Config) -> Result<Self, BridgeError> {
        let config = Arc::new(config);
        let client = mongo_client(&config).await?;
        let metrics = Metrics::new();
        let health = Arc::new(Health::new(config.pipelines.iter().map(|p| p.name.clone())));
        let cancel = CancellationToken::new();
        let listen = config
            .metrics
            .listen
            .parse()
            .map_err(|_| BridgeError::Config {
                field: "metrics.listen".into(),
                reason: "must be host:port".into(),
            })?;
        let max_age = config.bridge.ready_max_delivery_age_ms as i64;
        let metrics_addr = crate::http::serve(
            listen,
            metrics.clone(),
            Arc::clone(&health),
            max_age,
            cancel.clone(),
        )
        .await
        .map_err(|e| BridgeError::Config {
            field: "metrics.listen".into(),
            reason: format!("cannot listen on {listen}: {e}"),
        })?;
        info!(%metrics_addr, pipelines = config.pipelines.len(), "bridge started");
        let owner = format!(
            "{}:{}:{}",
            hostname(),
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let mut set = JoinSet::new();
        for p in &config.pipelines {
            let ctx = PipelineContext {
                config: Arc::clone(&config),
                pipeline: p.clone(),
                client: client.clone(),
                owner: owner.clone(),
                metrics: metrics.pipeline(&p.name),
                health: health.pipeline(&p.name),
            };
            set.spawn(pipeline::run(ctx, cancel.child_token()));
        }
        tokio::spawn(crate::history::run(
            client.clone(),
            metrics.clone(),
            Duration::from_millis(config.metrics.history_interval_ms),
            cancel.child_token(),
        ));
        let task = tokio::spawn(supervise(set, cancel.clone(), client));
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
        self.task.await.unwrap_or(Ok(()))
    }
}

async fn supervise(
    mut set: JoinSet<Result<(), BridgeError>>,
    cancel: CancellationToken,
    client: Client,
) -> Result<(), BridgeError> {
    let mut first_error = None;
    while let Some(joined) = set.join_next().await {
        if let Ok(Err(error)) = joined {
            cancel.cancel();
            first_error.get_or_insert(error);
        }
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
