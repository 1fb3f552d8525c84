//! The builder's HTTP endpoints: `/results` and `/nodes` (JSON) and `/metrics` (Prometheus
//! text). Read-only views of [`Status`]; nothing here changes the job.

use super::status::Status;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// Serves the endpoints on `listener` until the runtime stops.
pub async fn serve(listener: TcpListener, status: Arc<Status>) {
    let app = Router::new()
        .route("/results", get(results))
        .route("/nodes", get(nodes))
        .route("/metrics", get(metrics))
        .with_state(status);
    if let Err(e) = axum::serve(listener, app).await {
        eprintln!("lbf-gag serve: the HTTP server stopped: {e}");
    }
}

async fn results(State(status): State<Arc<Status>>) -> impl IntoResponse {
    Json(status.results())
}

async fn nodes(State(status): State<Arc<Status>>) -> impl IntoResponse {
    Json(status.nodes())
}

async fn metrics(State(status): State<Arc<Status>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        status.metrics(),
    )
}

/// Updates the events-per-second gauge once a second.
pub async fn measure_rate(status: Arc<Status>) {
    let mut last = (
        Instant::now(),
        status.events_applied.load(Ordering::Relaxed),
    );
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let now = (
            Instant::now(),
            status.events_applied.load(Ordering::Relaxed),
        );
        let seconds = now.0.duration_since(last.0).as_secs_f64();
        if seconds > 0.0 {
            status.set_rate((now.1 - last.1) as f64 / seconds);
        }
        last = now;
    }
}
