//! Health and Prometheus metrics: the engine's (see `subs_engine::metrics`)
//! and the API's own, requests by route and refused agent uploads.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use serde::Serialize;
use utoipa::ToSchema;

use crate::AppState;
use crate::error::ErrorCode;

/// A request's method, route pattern and status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

/// A request's method and route pattern.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

/// Why an upload was refused: the error's code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// Buckets (seconds) of request durations, to the response's headers: a
/// streamed turn's request is timed to its stream's start.
const REQUEST_SECONDS: [f64; 14] =
    [0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

fn request_histogram() -> Histogram {
    Histogram::new(REQUEST_SECONDS.iter().copied())
}

/// The API's metrics: requests by route and status, their durations, and
/// refused agent uploads.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram, fn() -> Histogram>,
    refused_uploads: Family<ReasonLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("subs");
        let requests = Family::default();
        registry.register("http_requests", "HTTP requests answered, by method, route and status", requests.clone());
        let durations: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(request_histogram);
        registry.register_with_unit(
            "http_request_duration",
            "Time to answer an HTTP request, to its response headers (a stream's start), by method and route",
            Unit::Seconds,
            durations.clone(),
        );
        let refused_uploads = Family::default();
        registry.register(
            "agent_uploads_refused",
            "Agent uploads refused, by the error's code (invalid_component, too_large, limit_exceeded, ...)",
            refused_uploads.clone(),
        );
        Self { registry, requests, durations, refused_uploads }
    }
}

/// Counts every request by its route pattern (not its path, which would
/// give one series per session), and times it to its headers; a refused
/// upload is counted by its error code.
pub async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let method = method_label(request.method()).to_owned();
    // `/v1/agents/:agent_id` rather than axum's `{agent_id}`: braces in a
    // label value are valid, but trip common exposition parsers.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().replace('{', ":").replace('}', ""));
    let began = std::time::Instant::now();
    let response = next.run(request).await;
    let metrics = &state.metrics;
    let status = response.status().as_u16();
    if method == "PUT"
        && route == "/v1/agents/:agent_id"
        && let Some(ErrorCode(reason)) = response.extensions().get::<ErrorCode>()
    {
        metrics.refused_uploads.get_or_create(&ReasonLabel { reason }).inc();
    }
    let route_labels = RouteLabels { method: method.clone(), route: route.clone() };
    metrics.durations.get_or_create(&route_labels).observe(began.elapsed().as_secs_f64());
    metrics.requests.get_or_create(&RequestLabels { method, route, status }).inc();
    response
}

/// A request's method as a label: one of the methods HTTP defines, or
/// `other` for any extension method a client made up, so that strangers
/// cannot add series (nor long label values) by inventing methods.
fn method_label(method: &axum::http::Method) -> &'static str {
    match method.as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        "PATCH" => "PATCH",
        "CONNECT" => "CONNECT",
        "TRACE" => "TRACE",
        _ => "other",
    }
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
    health(&state).await.map(axum::Json)
}

/// What `/healthz` answers; also the HTTP edge's, for a connection past
/// its caps (see [`crate::edge`]).
pub async fn health(state: &AppState) -> Result<Health, crate::ApiError> {
    state.engine.admin().check_store().await?;
    Ok(Health { status: "ok".to_owned() })
}

/// The build's version, as `subs_build_info{version} 1`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

/// `subs_build_info`, and the process's own series under the names
/// Prometheus' client libraries give them (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, …), read afresh for each scrape. The
/// crate the metrics are written with has no process collector; on Linux
/// they are read from `/proc/self`, elsewhere only the build's is written.
fn build_and_process() -> Registry {
    let mut registry = Registry::default();
    let build: Family<BuildLabels, Gauge> = Family::default();
    build.get_or_create(&BuildLabels { version: env!("CARGO_PKG_VERSION") }).set(1);
    registry.register("subs_build_info", "The subs build serving this node (always 1), by version", build);
    #[cfg(target_os = "linux")]
    if let Some(process) = process::read() {
        let cpu: Counter<f64, std::sync::atomic::AtomicU64> = Counter::default();
        cpu.inc_by(process.cpu_seconds);
        registry.register_with_unit(
            "process_cpu",
            "Total user and system CPU time spent by the process",
            Unit::Seconds,
            cpu,
        );
        let gauge = |value: f64| {
            let gauge: Gauge<f64, std::sync::atomic::AtomicU64> = Gauge::default();
            gauge.set(value);
            gauge
        };
        registry.register_with_unit(
            "process_resident_memory",
            "Resident memory size",
            Unit::Bytes,
            gauge(process.resident_bytes),
        );
        registry.register_with_unit(
            "process_virtual_memory",
            "Virtual memory size",
            Unit::Bytes,
            gauge(process.virtual_bytes),
        );
        registry.register_with_unit(
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Unit::Seconds,
            gauge(process.start_time_seconds),
        );
        registry.register("process_open_fds", "Open file descriptors", gauge(process.open_fds));
        if let Some(max) = process.max_fds {
            registry.register("process_max_fds", "The most file descriptors the process may open", gauge(max));
        }
    }
    registry
}

/// The process's figures, from `/proc` (Linux).
#[cfg(target_os = "linux")]
mod process {
    /// What one scrape reads.
    pub(super) struct Process {
        pub cpu_seconds: f64,
        pub resident_bytes: f64,
        pub virtual_bytes: f64,
        pub start_time_seconds: f64,
        pub open_fds: f64,
        pub max_fds: Option<f64>,
    }

    /// Reads `/proc/self/stat`, `/proc/stat`, `/proc/self/fd` and
    /// `/proc/self/limits`; `None` when `/proc` is not there to read.
    pub(super) fn read() -> Option<Process> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // The fields after the command, which is in parentheses and may
        // hold spaces: field 3 (state) is the first.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        let page = rustix::param::page_size() as f64;
        let boot_time = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())?;
        let max_fds = std::fs::read_to_string("/proc/self/limits").ok().and_then(|limits| {
            let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
            line.trim_start_matches("Max open files").split_whitespace().next()?.parse::<f64>().ok()
        });
        Some(Process {
            cpu_seconds: (field(14)? + field(15)?) / ticks,
            virtual_bytes: field(23)?,
            resident_bytes: field(24)? * page,
            start_time_seconds: boot_time + field(22)? / ticks,
            open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
            max_fds,
        })
    }
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
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &state.metrics.registry);
    state.engine.admin().encode_metrics(&mut out);
    if let Ok(stats) = state.engine.admin().store_stats() {
        let mut store = Registry::with_prefix("subs");
        let counter = |n: u64| {
            let c: Counter = Counter::default();
            c.inc_by(n);
            c
        };
        store.register("store_batches", "Batches of writes committed", counter(stats.batches));
        store.register(
            "store_commits",
            "Durable commits (fsyncs); group commit shares them among batches",
            counter(stats.commits),
        );
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &store);
    }
    let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &build_and_process());
    ([(axum::http::header::CONTENT_TYPE, prometheus_client::encoding::prometheus_text::CONTENT_TYPE)], out)
        .into_response()
}
