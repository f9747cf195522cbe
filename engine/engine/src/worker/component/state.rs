//! What a component instance may touch: the per-decision store state, and
//! the engine's `subs:agent/host` interface implemented on it.

use subs_protocol::StreamDelta;
use subs_protocol::wit::FromWit;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{host, wit};
use super::http::HttpGate;
use super::limits::Limiter;
use super::output::GuestOutput;
use crate::worker::DeltaSink;

/// The state of one store, which lives exactly as long as one decision: a
/// fresh store and instance per decision keeps sessions and tenants apart.
pub(crate) struct StoreState {
    /// WASI as the engine grants it: no preopened directories, no
    /// environment, no arguments, no network; clocks and randomness work;
    /// stdout and stderr go to the logs. Built on the guest's first WASI
    /// call: most decisions make none, and building it (seeding two random
    /// generators, boxing clocks and streams) cost about 1 µs, a tenth of
    /// an empty decision.
    wasi: Option<WasiCtx>,
    /// The guest's stdout, for the WASI context when it is built.
    stdout: GuestOutput,
    /// WASI's resources (streams, pollables, HTTP requests) for this
    /// instance.
    table: ResourceTable,
    /// `wasi:http`'s settings (header size limits).
    http: WasiHttpCtx,
    /// Where outgoing HTTP is checked against the allow-list and sent.
    pub(crate) gate: HttpGate,
    /// Memory and table limits; remembers the limit the guest hit.
    pub(crate) limiter: Limiter,
    /// The guest's stderr, whose last line a trap's error quotes.
    pub(crate) stderr: GuestOutput,
    /// Where `emit-delta` sends deltas; `None` refuses them.
    deltas: Option<DeltaSink>,
}

impl StoreState {
    pub(crate) fn new(
        deltas: Option<DeltaSink>,
        gate: HttpGate,
        limiter: Limiter,
        stdout: GuestOutput,
        stderr: GuestOutput,
    ) -> Self {
        Self {
            wasi: None,
            stdout,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            gate,
            limiter,
            stderr,
            deltas,
        }
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = self.wasi.get_or_insert_with(|| {
            WasiCtxBuilder::new()
                .allow_tcp(false)
                .allow_udp(false)
                .allow_ip_name_lookup(false)
                .stdout(self.stdout.clone())
                .stderr(self.stderr.clone())
                .build()
        });
        WasiCtxView { ctx: wasi, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.gate }
    }
}

impl wit::Host for StoreState {}

impl host::Host for StoreState {
    fn log(&mut self, level: host::Level, message: String) {
        // The decision's span (tenant, agent, session, trigger) is current
        // while the guest runs, so these lines are tagged with it.
        match level {
            host::Level::Trace => tracing::trace!(target: "subs::guest", "{message}"),
            host::Level::Debug => tracing::debug!(target: "subs::guest", "{message}"),
            host::Level::Info => tracing::info!(target: "subs::guest", "{message}"),
            host::Level::Warn => tracing::warn!(target: "subs::guest", "{message}"),
            host::Level::Error => tracing::error!(target: "subs::guest", "{message}"),
        }
    }

    fn emit_delta(&mut self, delta: wit::StreamDelta) -> Result<(), String> {
        let Some(sink) = &self.deltas else {
            return Err(
                "deltas can only be emitted while answering an llm.execute trigger with stream: true".to_owned()
            );
        };
        let delta = StreamDelta::from_wit(delta).map_err(|e| e.to_string())?;
        sink(delta);
        Ok(())
    }
}
