//! Sending the engine's spans to an OpenTelemetry collector over OTLP/HTTP
//! (protobuf), when `subs serve` is told where: `[telemetry]
//! otlp_endpoint` in the config file, or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
//! The exporter, its batching and the rest of the standard `OTEL_*`
//! settings (headers, timeout, `OTEL_BSP_*`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SDK_DISABLED`) are OpenTelemetry's
//! own crates'; what is ours is the HTTP client they send with (the
//! reqwest the rest of the engine uses) and the choice to send nothing at
//! all unless an endpoint is given.

use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanProcessor};
use serde::Deserialize;
use subs_engine::metrics::LabelLimits;
use subs_engine::telemetry::{Spans, TelemetryLimits};

use crate::error::{CliError, CliResult};

/// The most of a collector's reply read: it says only whether the export
/// was taken.
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// `[telemetry]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryEntry {
    /// The collector's OTLP/HTTP base URL (`http://collector:4318`);
    /// spans go to its `/v1/traces`. Over `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    /// How many distinct model names label the engine's metrics.
    pub max_label_values: Option<usize>,
    /// The longest model name that labels the engine's metrics, in bytes.
    pub max_label_bytes: Option<usize>,
    /// The longest span name, text attribute or status message sent, in
    /// bytes.
    pub max_attribute_bytes: Option<usize>,
}

impl TelemetryEntry {
    /// The bounds this table sets over the defaults.
    ///
    /// # Errors
    /// `max_label_bytes` or `max_attribute_bytes` of 0, which would leave
    /// nothing of any name. (`max_label_values` may be 0: every model is
    /// then `other`.)
    pub fn limits(&self) -> CliResult<TelemetryLimits> {
        let defaults = TelemetryLimits::default();
        for (key, value) in
            [("max_label_bytes", self.max_label_bytes), ("max_attribute_bytes", self.max_attribute_bytes)]
        {
            if value == Some(0) {
                return Err(CliError::usage(anyhow!("`[telemetry] {key}` must be at least 1")));
            }
        }
        Ok(TelemetryLimits {
            labels: LabelLimits {
                max_values: self.max_label_values.unwrap_or(defaults.labels.max_values),
                max_bytes: self.max_label_bytes.unwrap_or(defaults.labels.max_bytes),
            },
            max_attribute_bytes: self.max_attribute_bytes.unwrap_or(defaults.max_attribute_bytes),
        })
    }
}

/// Where spans go while the server runs, and how to flush them at its end.
pub struct Exporting {
    processor: Arc<BatchSpanProcessor>,
    /// Where they are sent, for the startup line.
    pub endpoint: String,
}

impl Exporting {
    /// The processor, for the engine.
    pub fn spans(&self) -> Spans {
        self.processor.clone()
    }

    /// Sends what is still batched, waiting at most a few seconds.
    pub fn shutdown(&self) {
        if let Err(e) = self.processor.shutdown_with_timeout(Duration::from_secs(5)) {
            tracing::warn!(error = %e, "the last spans could not be sent");
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The span exporting `entry` and the environment ask for; `None` when
/// neither names an endpoint (or `OTEL_SDK_DISABLED=true`). Must be called
/// inside the server's runtime: exports are sent on it.
pub fn exporting(entry: &TelemetryEntry) -> CliResult<Option<Exporting>> {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    // The client enforces the export's timeout (the exporter leaves that
    // to it): OpenTelemetry's variables, in milliseconds, 10 s by default.
    let timeout = ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|name| env(name)?.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(10), Duration::from_millis);
    let http = reqwest::Client::builder()
        .timeout(timeout)
        .build()
        .map_err(|e| CliError::failed(anyhow!("the OpenTelemetry exporter's HTTP client: {e}")))?;
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(Client { http, runtime: tokio::runtime::Handle::current() });
    let endpoint =
        match (&entry.otlp_endpoint, env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), env("OTEL_EXPORTER_OTLP_ENDPOINT")) {
            // As the standard variable: a base URL, the signal's path added.
            (Some(base), ..) => {
                let url = format!("{}/v1/traces", base.trim_end_matches('/'));
                builder = builder.with_endpoint(url.clone());
                url
            }
            (None, Some(url), _) => url,
            (None, None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None, None) => return Ok(None),
        };
    let exporter =
        builder.build().map_err(|e| CliError::usage(anyhow!("the OpenTelemetry exporter for {endpoint}: {e}")))?;
    let mut resource = Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("subs");
    }
    let resource = resource.with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    let mut processor = BatchSpanProcessor::builder(exporter).build();
    processor.set_resource(&resource.build());
    Ok(Some(Exporting { processor: Arc::new(processor), endpoint }))
}

/// The exporter's HTTP client: reqwest, on the server's runtime. The
/// batch processor exports from a thread of its own, outside any runtime,
/// so the request is spawned onto the runtime and awaited from there.
#[derive(Debug)]
struct Client {
    http: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let request = http.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body);
            let mut reply = request.send().await?;
            let mut response = Response::builder().status(reply.status());
            if let Some(headers) = response.headers_mut() {
                *headers = reply.headers().clone();
            }
            let mut body = Vec::new();
            while let Some(chunk) = reply.chunk().await? {
                if body.len() + chunk.len() > MAX_REPLY_BYTES {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, HttpError>(response.body(Bytes::from(body))?)
        });
        sent.await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_and_attribute_bounds_take_what_the_file_sets() {
        let entry: TelemetryEntry =
            toml::from_str("max_label_values = 5\nmax_label_bytes = 64\nmax_attribute_bytes = 256\n").unwrap();
        let limits = entry.limits().unwrap();
        assert_eq!((limits.labels.max_values, limits.labels.max_bytes, limits.max_attribute_bytes), (5, 64, 256));
        assert_eq!(TelemetryEntry::default().limits().unwrap(), TelemetryLimits::default());
        for zero in ["max_label_bytes = 0", "max_attribute_bytes = 0"] {
            let entry: TelemetryEntry = toml::from_str(zero).unwrap();
            let refused = entry.limits().unwrap_err().to_string();
            assert!(refused.contains(zero.split(' ').next().unwrap()), "{refused}");
        }
        // Every model `other`: allowed.
        let entry: TelemetryEntry = toml::from_str("max_label_values = 0").unwrap();
        assert_eq!(entry.limits().unwrap().labels.max_values, 0);
    }
}
