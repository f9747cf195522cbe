//! Host bindings of the `subs:agent/agent` and `subs:agent/agent-json`
//! worlds, the protocol ↔ WIT mapping instantiated against them, and
//! [`Pre`], an agent of either world ready to instantiate.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `bindgen!` for a world of `wit/` whose exports are called async, with
/// WASI's interfaces taken from wasmtime-wasi and the `with` entries given
/// (interfaces bound before).
macro_rules! bind_world {
    ($world:tt, { $($with:tt)* }) => {
        wasmtime::component::bindgen!({
            path: "../../wit",
            world: $world,
            exports: { default: async },
            with: {
                $($with)*
                "wasi:io": wasmtime_wasi::p2::bindings::io,
                "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
                "wasi:random": wasmtime_wasi::p2::bindings::random,
                "wasi:cli": wasmtime_wasi::p2::bindings::cli,
                "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            },
            require_store_data_send: true,
        });
    };
}

bind_world!("subs:agent/agent", {});

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

/// The `subs:agent/agent-json` world: `decide` takes and gives JSON text.
/// Its imports are the `agent` world's, bound above.
pub mod json {
    bind_world!("subs:agent/agent-json", {
        "subs:agent/types": super::subs::agent::types,
        "subs:agent/host": super::subs::agent::host,
    });
}

/// A linked agent of either world, ready to instantiate. Cheap to clone.
pub enum Pre<T: 'static> {
    /// `decide` takes and gives the typed records (`subs:agent/agent`).
    Typed(AgentPre<T>),
    /// `decide` takes and gives JSON text (`subs:agent/agent-json`).
    Json(json::AgentJsonPre<T>),
}

impl<T: 'static> Clone for Pre<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Typed(pre) => Self::Typed(pre.clone()),
            Self::Json(pre) => Self::Json(pre.clone()),
        }
    }
}

impl<T: Send + 'static> Pre<T> {
    /// The agent `pre` links, of the world the type of its `decide` says:
    /// one string in, `agent-json`; anything else is held to `agent`'s
    /// signature. The error names both signatures.
    pub fn new(pre: wasmtime::component::InstancePre<T>) -> Result<Self, String> {
        use wasmtime::component::types::{ComponentItem, Type};
        let takes_text = match pre.component().get_export(None, "decide") {
            Some((ComponentItem::ComponentFunc(f), _)) => {
                let mut params = f.params();
                params.len() == 1 && matches!(params.next(), Some((_, Type::String)))
            }
            _ => false,
        };
        let refused = |e: wasmtime::Error| {
            format!(
                "{e:#}; `decide` must be `func(request: decision-request) -> result<decision-response, \
                 decide-error>` (world subs:agent/agent) or `func(request: string) -> result<string, \
                 decide-error>` (world subs:agent/agent-json)"
            )
        };
        if takes_text {
            json::AgentJsonPre::new(pre).map(Self::Json).map_err(refused)
        } else {
            AgentPre::new(pre).map(Self::Typed).map_err(refused)
        }
    }

    /// The linked component.
    pub fn instance_pre(&self) -> &wasmtime::component::InstancePre<T> {
        match self {
            Self::Typed(pre) => pre.instance_pre(),
            Self::Json(pre) => pre.instance_pre(),
        }
    }
}
