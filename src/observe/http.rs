//! The HTTP endpoint: `/metrics` (Prometheus text format), `/healthz`, `/readyz`, and the status
//! page `/status` (`/` redirects there; `status_page.rs`).
//!
//! Invariants: handlers only read shared state; `/healthz` is 200 unless a pipeline loop is
//! wedged; `/readyz` is 200 only when every pipeline's stream is open (or it stands by for
//! another owner), deliveries are not stalled and the process is not draining (see
//! [`crate::observe::health`]). Bodies are plain text: `ready` or the reasons, then one line per note
//! (`pipeline X: standby, owner O until T`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::observe::health::Health;
use crate::observe::metrics::Metrics;
use crate::observe::status_page::{self, History};

/// Shared state of the handlers.
#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Arc<Health>,
    max_delivery_age_ms: i64,
    history: History,
}

/// Binds `listen` and serves until `cancel` fires. Returns the bound address (useful with port 0).
///
/// Errors: the bind error (address in use, permission).
pub(crate) async fn serve(
    listen: SocketAddr,
    metrics: Metrics,
    health: Arc<Health>,
    max_delivery_age_ms: i64,
    cancel: CancellationToken,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    let history = History::default();
    history.spawn_sampler(metrics.clone(), Arc::clone(&health), cancel.clone());
    let state = AppState {
        metrics,
        health,
        max_delivery_age_ms,
        history,
    };
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status))
        .route(
            "/",
            get(|| async { axum::response::Redirect::to("/status") }),
        )
        .with_state(state);
    tokio::spawn(async move {
        let shutdown = async move { cancel.cancelled().await };
        if let Err(error) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(%error, "metrics endpoint stopped");
        }
    });
    Ok(addr)
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    match state.health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(reasons) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reasons}\n")),
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let readiness = state.health.readiness(state.max_delivery_age_ms);
    let mut body = if readiness.ready {
        "ready\n".to_owned()
    } else {
        String::new()
    };
    for line in &readiness.lines {
        body.push_str(line);
        body.push('\n');
    }
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body)
}

async fn status(State(state): State<AppState>) -> impl IntoResponse {
    let page = status_page::render(
        &state.metrics,
        &state.health,
        &state.history,
        state.max_delivery_age_ms,
    );
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], page)
}
