//! Component workers: agents compiled to WebAssembly components, called
//! in-process.
//!
//! A [`ComponentHost`] owns the wasmtime engine and the linker holding what
//! the engine grants guests. [`ComponentHost::load`] compiles a component
//! once and pre-links it ([`ComponentAgent`]); every decision then gets a
//! fresh store and instance, so nothing a guest keeps in memory survives
//! into another decision, session or tenant. Agent state lives in `state`,
//! which the engine stores.

mod bindings;
mod state;

use std::sync::Arc;

use subs_protocol::DecisionResponse;
use subs_protocol::wit::FromWit;
use tracing::Instrument;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Engine, Store};

use self::bindings::{AgentPre, wit};
use self::state::StoreState;
use super::{BoxFuture, Delivery, Worker, WorkerError};

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The bytes are not a WebAssembly component wasmtime can compile.
    #[error("not a valid WebAssembly component: {0}")]
    Invalid(String),
    /// The component does not fit the `subs:agent` world: it imports
    /// something the engine does not grant, or lacks the `decide` export.
    #[error("the component does not fit the subs:agent world: {0}")]
    World(String),
    /// The engine could not be configured.
    #[error("the WebAssembly engine could not be set up: {0}")]
    Engine(String),
}

/// The wasmtime engine and what guests are granted.
#[derive(Clone)]
pub struct ComponentHost {
    engine: Engine,
    linker: Arc<Linker<StoreState>>,
}

impl ComponentHost {
    /// A host with the engine's default configuration.
    pub fn new() -> Result<Self, LoadError> {
        let engine = Engine::new(&wasmtime::Config::new()).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        let link = |linker: &mut Linker<StoreState>| -> wasmtime::Result<()> {
            wasmtime_wasi::p2::add_to_linker_async(linker)?;
            bindings::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
            Ok(())
        };
        link(&mut linker).map_err(|e| LoadError::Engine(format!("{e:#}")))?;
        Ok(Self { engine, linker: Arc::new(linker) })
    }

    /// Compiles a component and checks that it fits the `subs:agent`
    /// world.
    pub fn load(&self, bytes: &[u8]) -> Result<ComponentAgent, LoadError> {
        let component = Component::new(&self.engine, bytes).map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        let pre = self.linker.instantiate_pre(&component).map_err(|e| LoadError::World(format!("{e:#}")))?;
        let pre = AgentPre::new(pre).map_err(|e| LoadError::World(format!("{e:#}")))?;
        Ok(ComponentAgent { pre })
    }
}

/// A compiled, pre-linked agent component: ready to instantiate once per
/// decision.
#[derive(Clone)]
pub struct ComponentAgent {
    pre: AgentPre<StoreState>,
}

impl std::fmt::Debug for ComponentAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentAgent").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ComponentHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentHost").finish_non_exhaustive()
    }
}

impl ComponentAgent {
    async fn decide_once(&self, delivery: Delivery) -> Result<DecisionResponse, WorkerError> {
        let mut store = Store::new(self.pre.engine(), StoreState::new(delivery.deltas));
        let agent =
            self.pre.instantiate_async(&mut store).await.map_err(|e| WorkerError::Instantiation(format!("{e:#}")))?;
        let request = wit::DecisionRequest::from(delivery.request);
        let answer =
            agent.call_decide(&mut store, &request).await.map_err(|e| WorkerError::Trapped(describe_trap(&e)))?;
        match answer {
            Ok(decision) => DecisionResponse::from_wit(decision).map_err(WorkerError::MalformedDecision),
            Err(e) => Err(WorkerError::Declined { message: e.message, retryable: e.retryable }),
        }
    }
}

/// The cause of a trap in one line (`wasm \`unreachable\` instruction
/// executed`); the wasm backtrace goes to the debug log, where an operator
/// can find it without it flooding the error every client sees.
fn describe_trap(error: &wasmtime::Error) -> String {
    tracing::debug!(error = ?error, "guest trapped");
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(trap) => trap.to_string(),
        None => error.root_cause().to_string(),
    }
}

impl Worker for ComponentAgent {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        let span = tracing::info_span!(
            "decide",
            session = %delivery.request.session_id,
            agent = %delivery.request.agent_id,
            trigger = delivery.request.trigger.kind(),
            attempt = delivery.request.attempts,
        );
        Box::pin(self.decide_once(delivery).instrument(span))
    }
}
