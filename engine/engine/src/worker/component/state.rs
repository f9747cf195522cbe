//! What a component instance may touch: the per-decision store state, and
//! the engine's `subs:agent/host` interface implemented on it.

use subs_protocol::StreamDelta;
use subs_protocol::wit::FromWit;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{host, wit};
use crate::worker::DeltaSink;

/// The state of one store, which lives exactly as long as one decision: a
/// fresh store and instance per decision keeps sessions and tenants apart.
pub(crate) struct StoreState {
    /// WASI as the engine grants it: no preopened directories, no
    /// environment, no arguments, no network; clocks and randomness work.
    wasi: WasiCtx,
    /// WASI's resources (streams, pollables) for this instance.
    table: ResourceTable,
    /// Where `emit-delta` sends deltas; `None` refuses them.
    deltas: Option<DeltaSink>,
}

impl StoreState {
    pub(crate) fn new(deltas: Option<DeltaSink>) -> Self {
        let wasi = WasiCtxBuilder::new().allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false).build();
        Self { wasi, table: ResourceTable::new(), deltas }
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
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
