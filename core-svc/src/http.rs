//! The HTTP endpoints of `core-svc run`: Prometheus metrics (`:8080/metrics`) and the probes
//! (`:8081/healthz`, `:8081/readyz`), on two ports as upstream serves them, so a
//! NetworkPolicy or a Service can expose one without the other.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::Metrics;

/// What readiness waits for, each with why it is not there yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// Ready: the plugin answered its handshake ready and every cache has synced.
    Ready,
    /// Not ready, and why (`plugin not ready: ...`, `caches not synced`).
    NotReady(String),
}

/// Serves the metrics on `metrics` and the probes on `probes` until the process ends.
/// Liveness is the process answering; readiness follows `ready`.
pub async fn serve(
    metrics_address: SocketAddr,
    probes_address: SocketAddr,
    metrics: Arc<Metrics>,
    ready: watch::Receiver<Readiness>,
) -> std::io::Result<()> {
    let metrics_listener = TcpListener::bind(metrics_address).await?;
    let probes_listener = TcpListener::bind(probes_address).await?;
    tracing::info!(metrics = %metrics_address, probes = %probes_address, "serving metrics and probes");
    let metrics_app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(metrics);
    let probes_app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(ready);
    tokio::try_join!(
        async { axum::serve(metrics_listener, metrics_app).await },
        async { axum::serve(probes_listener, probes_app).await },
    )?;
    Ok(())
}

async fn scrape(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

async fn readyz(State(ready): State<watch::Receiver<Readiness>>) -> Response {
    match &*ready.borrow() {
        Readiness::Ready => (StatusCode::OK, "ok").into_response(),
        Readiness::NotReady(why) => {
            (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}")).into_response()
        }
    }
}
