//! Host bindings of the `subs:agent/agent` world, and the protocol ↔ WIT
//! mapping instantiated against them.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "subs:agent/agent",
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:cli": wasmtime_wasi::p2::bindings::cli,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
    require_store_data_send: true,
});

pub use subs::agent::host;
pub use subs::agent::types as wit;

subs_protocol::wit_conversions!(wit);

impl<T: Send + 'static> AgentPre<T> {
    /// Instantiates the component into `store`, like
    /// [`AgentPre::instantiate_async`], and type-checks the `decide` export
    /// only while `checked` is false (then sets it).
    ///
    /// The generated `instantiate_async` type-checks `decide`'s whole
    /// signature against the instance on every call, a few microseconds for
    /// the protocol's nested records. The signature belongs to the
    /// component, not to an instance: every instance of this pre-linked
    /// component has the same one, so once one instance passed the check,
    /// later ones are looked up by index alone. `call_decide` then calls the
    /// function as the typed signature it was checked against.
    pub async fn instantiate_checked_once(
        &self,
        mut store: impl wasmtime::AsContextMut<Data = T>,
        checked: &std::sync::atomic::AtomicBool,
    ) -> wasmtime::Result<Agent> {
        use std::sync::atomic::Ordering;
        let mut store = store.as_context_mut();
        let instance = self.instance_pre.instantiate_async(&mut store).await?;
        if checked.load(Ordering::Acquire) {
            let decide = instance
                .get_func(&mut store, &self.indices.decide)
                .ok_or_else(|| wasmtime::format_err!("the component has no `decide` export"))?;
            return Ok(Agent { decide });
        }
        let agent = self.indices.load(&mut store, &instance)?;
        checked.store(true, Ordering::Release);
        Ok(agent)
    }
}
