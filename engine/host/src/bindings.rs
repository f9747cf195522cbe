//! Host bindings of the `agent` and `agent-json` worlds of `subs:agent`
//! `0.1.0` and `0.2.0`, the protocol ↔ WIT mapping instantiated against
//! them, and [`Pre`], an agent of any of the four ready to instantiate.

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

/// `instantiate_checked_once` for the typed world's pre-linked agent of
/// each version.
macro_rules! checked_once {
    ($pre:ty, $agent:ident) => {
        impl<T: Send + 'static> $pre {
            /// Instantiates the component into `store`, like
            /// `instantiate_async`, and type-checks the `decide` export only
            /// while `checked` is false (then sets it).
            ///
            /// The generated `instantiate_async` type-checks `decide`'s whole
            /// signature against the instance on every call, a few
            /// microseconds for the protocol's nested records. The signature
            /// belongs to the component, not to an instance: every instance
            /// of this pre-linked component has the same one, so once one
            /// instance passed the check, later ones are looked up by index
            /// alone. `call_decide` then calls the function as the typed
            /// signature it was checked against.
            pub async fn instantiate_checked_once(
                &self,
                mut store: impl wasmtime::AsContextMut<Data = T>,
                checked: &std::sync::atomic::AtomicBool,
            ) -> wasmtime::Result<$agent> {
                use std::sync::atomic::Ordering;
                let mut store = store.as_context_mut();
                let instance = self.instance_pre.instantiate_async(&mut store).await?;
                if checked.load(Ordering::Acquire) {
                    let decide = instance
                        .get_func(&mut store, &self.indices.decide)
                        .ok_or_else(|| wasmtime::format_err!("the component has no `decide` export"))?;
                    return Ok($agent { decide });
                }
                let agent = self.indices.load(&mut store, &instance)?;
                checked.store(true, Ordering::Release);
                Ok(agent)
            }
        }
    };
}

bind_world!("subs:agent/agent@0.1.0", {});

pub use subs::agent0_1_0::host;
pub use subs::agent0_1_0::types as wit;

subs_protocol::wit_conversions!(wit, branch);

pub use v2::subs::agent0_2_0::branch;

/// The worlds of `subs:agent@0.2.0`: the branch is a `messages` resource
/// (the engine's [`Branch`](crate::branch::Branch)) the agent reads on
/// demand. Types and the `host` interface are `0.1.0`'s, bound above.
pub mod v2 {
    bind_world!("subs:agent/agent@0.2.0", {
        "subs:agent/types@0.1.0": super::subs::agent0_1_0::types,
        "subs:agent/host@0.1.0": super::subs::agent0_1_0::host,
        "subs:agent/branch.messages": crate::branch::Branch,
    });

    checked_once!(AgentPre<T>, Agent);

    /// `agent-json` of `0.2.0`.
    pub mod json {
        bind_world!("subs:agent/agent-json@0.2.0", {
            "subs:agent/types@0.1.0": super::super::subs::agent0_1_0::types,
            "subs:agent/host@0.1.0": super::super::subs::agent0_1_0::host,
            "subs:agent/branch@0.2.0": super::subs::agent0_2_0::branch,
        });
    }
}

checked_once!(AgentPre<T>, Agent);

/// The `subs:agent/agent-json` world: `decide` takes and gives JSON text.
/// Its imports are the `agent` world's, bound above.
pub mod json {
    bind_world!("subs:agent/agent-json@0.1.0", {
        "subs:agent/types@0.1.0": super::subs::agent0_1_0::types,
        "subs:agent/host@0.1.0": super::subs::agent0_1_0::host,
    });
}

/// A linked agent of any of the four worlds, ready to instantiate.
pub enum Pre<T: 'static> {
    /// `decide` takes and gives the typed records (`subs:agent/agent@0.1.0`).
    Typed(AgentPre<T>),
    /// `decide` takes and gives JSON text (`subs:agent/agent-json@0.1.0`).
    Json(json::AgentJsonPre<T>),
    /// The typed records, the branch read on demand
    /// (`subs:agent/agent@0.2.0`).
    Lazy(v2::AgentPre<T>),
    /// JSON text, the branch read on demand
    /// (`subs:agent/agent-json@0.2.0`).
    LazyJson(v2::json::AgentJsonPre<T>),
}

impl<T: 'static> Clone for Pre<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Typed(pre) => Self::Typed(pre.clone()),
            Self::Json(pre) => Self::Json(pre.clone()),
            Self::Lazy(pre) => Self::Lazy(pre.clone()),
            Self::LazyJson(pre) => Self::LazyJson(pre.clone()),
        }
    }
}

impl<T: Send + 'static> Pre<T> {
    /// The agent `pre` links, of the world the type of its `decide` says:
    /// a second parameter (the `messages` resource) means `0.2.0`, a first
    /// parameter that is a string the `agent-json` world; anything else is
    /// held to `0.1.0`'s `agent` signature. The error names every
    /// signature.
    pub fn new(pre: wasmtime::component::InstancePre<T>) -> Result<Self, String> {
        use wasmtime::component::types::{ComponentItem, Type};
        let (takes_text, lazy) = match pre.component().get_export(None, "decide") {
            Some((ComponentItem::ComponentFunc(f), _)) => {
                let mut params = f.params();
                let count = params.len();
                (matches!(params.next(), Some((_, Type::String))), count == 2)
            }
            _ => (false, false),
        };
        let refused = |e: wasmtime::Error| {
            format!(
                "{e:#}; `decide` must be `func(request: decision-request, messages: messages) -> \
                 result<decision-response, decide-error>` (world subs:agent/agent@0.2.0), `func(request: \
                 string, messages: messages) -> result<string, decide-error>` (world \
                 subs:agent/agent-json@0.2.0), `func(request: decision-request) -> result<decision-response, \
                 decide-error>` (world subs:agent/agent@0.1.0) or `func(request: string) -> result<string, \
                 decide-error>` (world subs:agent/agent-json@0.1.0)"
            )
        };
        match (lazy, takes_text) {
            (true, true) => v2::json::AgentJsonPre::new(pre).map(Self::LazyJson).map_err(refused),
            (true, false) => v2::AgentPre::new(pre).map(Self::Lazy).map_err(refused),
            (false, true) => json::AgentJsonPre::new(pre).map(Self::Json).map_err(refused),
            (false, false) => AgentPre::new(pre).map(Self::Typed).map_err(refused),
        }
    }

    /// The linked component.
    pub fn instance_pre(&self) -> &wasmtime::component::InstancePre<T> {
        match self {
            Self::Typed(pre) => pre.instance_pre(),
            Self::Json(pre) => pre.instance_pre(),
            Self::Lazy(pre) => pre.instance_pre(),
            Self::LazyJson(pre) => pre.instance_pre(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use subs_protocol::wit::FromWit;
    use subs_protocol::{AgentConfig, DecisionRequest};

    use super::wit;

    fn fixture() -> DecisionRequest {
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/protocol/decision_request/tool.execute.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("the fixture")).expect("a decision request")
    }

    fn config(model: &str, schema: serde_json::Value) -> Arc<AgentConfig> {
        Arc::new(
            serde_json::from_value(json!({"model": model, "tools": [{"name": "t", "input": schema}]}))
                .expect("an agent config"),
        )
    }

    /// What crosses for `agent`, read back.
    fn crossed(agent: &Arc<AgentConfig>) -> AgentConfig {
        let request = DecisionRequest { agent: Some(agent.clone()), ..fixture() };
        let wit = wit::DecisionRequest::from(request).agent.expect("the request's config");
        AgentConfig::from_wit(wit).expect("the config reads back")
    }

    /// The converted configs kept per thread are found by their shared
    /// allocation: a request crosses with its own config whichever were
    /// converted before it, however many, and whether or not its own was
    /// converted before.
    #[test]
    fn a_request_crosses_with_its_own_agent_config() {
        let a = config("a", json!({"type": "object"}));
        let b = config("b", json!({"type": "string"}));
        for agent in [&a, &b, &a, &a, &b] {
            assert_eq!(crossed(agent), **agent);
        }
        // An equal config in another allocation is its own entry.
        let a_again = config("a", json!({"type": "object"}));
        assert_eq!(crossed(&a_again), *a);
        // More configs than are kept, each dropped after it crossed: the
        // first ones are converted again, and a new config at a freed
        // address is never taken for the one that was there.
        for n in 0..300 {
            let other = config(&format!("m{n}"), json!({"maxLength": n}));
            assert_eq!(crossed(&other), *other);
        }
        assert_eq!(crossed(&a), *a);
        assert_eq!(crossed(&b), *b);
        // A config too large to keep crosses as itself every time.
        let large = config("large", json!({"description": "x".repeat(64 << 10)}));
        for _ in 0..3 {
            assert_eq!(crossed(&large), *large);
        }
    }
}
