//! Health and Prometheus metrics.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;

/// Counts requests by method, route and status.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
}

/// Counts every request by its route pattern (not its path, which would
/// give one series per session).
pub async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_owned();
    let response = next.run(request).await;
    let status = response.status().as_u16();
    *state
        .metrics
        .requests
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry((method, route, status))
        .or_default() += 1;
    response
}

/// The answer of `/healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` while the store answers.
    pub status: String,
}

/// Whether the server works: `200 {"status":"ok"}` while its store
/// answers, `503` otherwise.
#[utoipa::path(
    get,
    path = "/healthz",
    responses((status = 200, body = Health), (status = 503, body = crate::error::ErrorBody)),
    tag = "operations"
)]
pub async fn healthz(State(state): State<Arc<AppState>>) -> Result<axum::Json<Health>, crate::ApiError> {
    state.engine.check_store().await?;
    Ok(axum::Json(Health { status: "ok".to_owned() }))
}

/// Prometheus metrics, in the text exposition format.
#[utoipa::path(
    get,
    path = "/metrics",
    responses((status = 200, description = "Prometheus text", content_type = "text/plain")),
    tag = "operations"
)]
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let mut out = String::new();
    out.push_str("# HELP subs_http_requests_total HTTP requests answered, by method, route and status.\n");
    out.push_str("# TYPE subs_http_requests_total counter\n");
    for ((method, route, status), count) in
        state.metrics.requests.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter()
    {
        let _ = writeln!(
            out,
            "subs_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
            route.replace('\\', "\\\\").replace('"', "\\\"")
        );
    }
    if let Ok(stats) = state.engine.store_stats() {
        let _ = writeln!(out, "# HELP subs_store_batches_total Batches of writes committed.");
        let _ = writeln!(out, "# TYPE subs_store_batches_total counter");
        let _ = writeln!(out, "subs_store_batches_total {}", stats.batches);
        let _ = writeln!(
            out,
            "# HELP subs_store_commits_total Durable commits (fsyncs); group commit shares them among batches."
        );
        let _ = writeln!(out, "# TYPE subs_store_commits_total counter");
        let _ = writeln!(out, "subs_store_commits_total {}", stats.commits);
    }
    let _ = writeln!(out, "# HELP subs_sessions_active Sessions with work in memory.");
    let _ = writeln!(out, "# TYPE subs_sessions_active gauge");
    let _ = writeln!(out, "subs_sessions_active {}", state.engine.active_sessions());
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
