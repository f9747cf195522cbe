//! What a component instance may touch: the per-decision store state, and
//! the engine's `subs:agent/host` interface implemented on it.

use std::sync::Arc;

use subs_protocol::StreamDelta;
use subs_protocol::wit::FromWit;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{host, wit};
use super::http::{AllowedHost, HttpGate, Refusals};
use super::limits::Limiter;
use super::output::{GuestOutput, Labels, MAX_LINE, Stream};
use subs_core::worker::DeltaSink;
use subs_core::worker::clip;

/// The state of one store, which lives exactly as long as one decision: a
/// fresh store and instance per decision keeps sessions and tenants apart.
pub(crate) struct StoreState {
    /// Whose decision this is and what it may reach: what the WASI context
    /// and the HTTP gate are built from.
    grant: Grant,
    /// WASI as the engine grants it: no preopened directories, no
    /// environment, no arguments, no network; clocks and randomness work;
    /// stdout and stderr go to the logs. Built on the guest's first WASI
    /// call: most decisions make none, and building it (seeding two random
    /// generators, boxing clocks and streams, the two captured outputs) cost
    /// about 1 µs, a tenth of an empty decision.
    wasi: Option<Wasi>,
    /// WASI's resources (streams, pollables, HTTP requests) and the
    /// decision's branch, for this instance.
    pub(crate) table: ResourceTable,
    /// The table entry of the branch of the decision being made (agents of
    /// `subs:agent@0.2.0`); reads through any other are refused.
    pub(crate) live_branch: Option<u32>,
    /// `wasi:http`'s settings and the allow-list gate; built on the guest's
    /// first outgoing request.
    http: Option<(WasiHttpCtx, HttpGate)>,
    /// Memory and table limits; remembers the limit the guest hit.
    pub(crate) limiter: Limiter,
    /// Where `emit-delta` sends deltas; `None` refuses them.
    deltas: Option<DeltaSink>,
    /// The guest's last line logged at error level (its start): how a
    /// guest without WASI, which has no stderr, reports a panic.
    last_error: Option<String>,
    /// What the guest may still send through `log`: bytes, then lines.
    log_left: (usize, usize),
    /// Whether a `log` line was dropped (warned about once).
    log_dropped: bool,
}

/// How much of a guest's stderr or error line a failed delivery's message
/// quotes.
pub(crate) const QUOTED_CHARS: usize = 500;

/// What a decision's WASI context and HTTP gate are made from.
pub(crate) struct Grant {
    /// Whose decision it is, for every line logged.
    pub labels: Labels,
    /// Bytes of stdout and stderr captured into the logs, and of `log`
    /// lines.
    pub log_bytes: usize,
    /// Lines of `log`.
    pub log_lines: usize,
    /// The hosts the agent may reach.
    pub allowed: Arc<[AllowedHost]>,
    /// The engine's HTTP client.
    pub client: reqwest::Client,
}

/// A built WASI context and the stderr it writes to.
struct Wasi {
    ctx: WasiCtx,
    stderr: GuestOutput,
}

impl StoreState {
    pub(crate) fn new(deltas: Option<DeltaSink>, grant: Grant, limiter: Limiter) -> Self {
        let log_left = (grant.log_bytes, grant.log_lines);
        Self {
            grant,
            wasi: None,
            table: ResourceTable::new(),
            live_branch: None,
            http: None,
            limiter,
            deltas,
            last_error: None,
            log_left,
            log_dropped: false,
        }
    }

    /// The last line the guest logged at error level, if it logged one.
    pub(crate) fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// The last lines the guest wrote to stderr, if it wrote any.
    pub(crate) fn stderr_tail(&self) -> Option<String> {
        self.wasi.as_ref()?.stderr.tail()
    }

    /// The outgoing requests the engine refused, if the guest made any.
    pub(crate) fn refused(&self) -> Option<String> {
        self.http.as_ref()?.1.denied.describe()
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let grant = &self.grant;
        let wasi = self.wasi.get_or_insert_with(|| {
            let output = |stream| GuestOutput::new(stream, grant.labels.clone(), grant.log_bytes);
            let stderr = output(Stream::Stderr);
            let ctx = WasiCtxBuilder::new()
                .allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .stdout(output(Stream::Stdout))
                .stderr(stderr.clone())
                .build();
            Wasi { ctx, stderr }
        });
        WasiCtxView { ctx: &mut wasi.ctx, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        let grant = &self.grant;
        let (ctx, gate) = self.http.get_or_insert_with(|| {
            let gate = HttpGate {
                allowed: grant.allowed.clone(),
                client: grant.client.clone(),
                labels: grant.labels.clone(),
                denied: Refusals::default(),
            };
            (WasiHttpCtx::new(), gate)
        });
        WasiHttpCtxView { ctx, table: &mut self.table, hooks: gate }
    }
}

impl wit::Host for StoreState {}

impl host::Host for StoreState {
    fn log(&mut self, level: host::Level, mut message: String) {
        // One line is cut to what stdout's lines are cut to; a decision's
        // lines and bytes are held to its log limits.
        if message.len() > MAX_LINE {
            message = clip(message, MAX_LINE);
        }
        let (bytes, lines) = &mut self.log_left;
        if *lines == 0 || *bytes < message.len() {
            if !self.log_dropped {
                self.log_dropped = true;
                tracing::warn!(
                    target: "subs::guest",
                    "the guest's log lines passed their limit; the rest of this decision's are dropped"
                );
            }
            return;
        }
        *lines -= 1;
        *bytes -= message.len();
        // The decision's span (tenant, agent, session, trigger) is current
        // while the guest runs, so these lines are tagged with it.
        match level {
            host::Level::Trace => tracing::trace!(target: "subs::guest", "{message}"),
            host::Level::Debug => tracing::debug!(target: "subs::guest", "{message}"),
            host::Level::Info => tracing::info!(target: "subs::guest", "{message}"),
            host::Level::Warn => tracing::warn!(target: "subs::guest", "{message}"),
            host::Level::Error => {
                tracing::error!(target: "subs::guest", "{message}");
                self.last_error = Some(message.chars().take(QUOTED_CHARS).collect());
            }
        }
    }

    fn emit_delta(&mut self, delta: wit::StreamDelta) -> Result<(), String> {
        let Some(sink) = &self.deltas else {
            return Err(
                "deltas can only be emitted while answering an llm.execute trigger with stream: true".to_owned()
            );
        };
        let delta = StreamDelta::from_wit(delta).map_err(|e| e.to_string())?;
        sink(delta).map_err(|refused| refused.to_string())
    }
}
