//! The parts of a decision, each alone, for the benchmarks
//! (`tests/benches/component.rs`): instantiating an agent without calling
//! it; the conversions of a request and a decision to their WIT form and
//! back, without a guest; and the floor, a component of the
//! `subs:agent/floor` world whose one export does nothing. Each runs on the
//! host's own configuration (the instance pool, the limits, the epoch
//! callback), so what they cost is what a decision pays for that part.

use std::sync::Arc;

use subs_protocol::wit::FromWit;
use subs_protocol::{DecisionRequest, DecisionResponse, ProtocolError};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{ComponentExportIndex, InstancePre};

use super::bindings::{Pre, wit};
use super::cpu::CpuMeter;
use super::state::StoreState;
use super::{Bound, ComponentAgent, ComponentHost, Failure, Inner, LoadError, bind, validate};
use subs_core::worker::WorkerError;

impl ComponentAgent {
    /// Instantiates the agent in a fresh store, as every decision does,
    /// and tears it down without calling `decide`.
    pub async fn instantiate_only(&self) -> Result<(), WorkerError> {
        let wall = self.bound.limits.wall_clock;
        let _slot = self.host.slots.acquire(&self.bound.tenant, self.weight).await;
        let meter = CpuMeter::new();
        let pre = self.code.current();
        let mut store = self.host.store(pre.instance_pre().engine(), &self.bound, String::new(), None, wall, &meter);
        let started = meter.meter(async {
            match &pre {
                Pre::Typed(pre) => pre.instantiate_checked_once(&mut store, &self.checked).await.map(drop),
                Pre::Json(pre) => pre.instantiate_async(&mut store).await.map(drop),
                Pre::Lazy(pre) => pre.instantiate_checked_once(&mut store, &self.checked).await.map(drop),
                Pre::LazyJson(pre) => pre.instantiate_async(&mut store).await.map(drop),
            }
        });
        match started.await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.explain(Failure::Start(e), store.data(), wall)),
        }
    }
}

impl ComponentAgent {
    /// Asks one instance of an agent of `subs:agent/agent@0.2.0` for two
    /// decisions in turn, each with its own branch: what the engine never
    /// does (every decision gets a fresh instance), so that a test can show
    /// a `messages` handle kept from the first decision reads nothing in
    /// the second.
    ///
    /// # Errors
    /// The agent is of another world, or its instance did not start.
    pub async fn decide_twice_in_one_instance(
        &self,
        requests: [DecisionRequest; 2],
    ) -> Result<Vec<Result<DecisionResponse, WorkerError>>, WorkerError> {
        use subs_protocol::wit::BranchRequest;
        let wall = self.bound.limits.wall_clock;
        let _slot = self.host.slots.acquire(&self.bound.tenant, self.weight).await;
        let meter = CpuMeter::new();
        let pre = self.code.current();
        let Pre::Lazy(lazy) = &pre else {
            return Err(WorkerError::Instantiation("the agent is not of subs:agent/agent@0.2.0".to_owned()));
        };
        let mut store = self.host.store(pre.instance_pre().engine(), &self.bound, String::new(), None, wall, &meter);
        let agent = match lazy.instantiate_checked_once(&mut store, &self.checked).await {
            Ok(agent) => agent,
            Err(e) => return Err(self.explain(Failure::Start(e), store.data(), wall)),
        };
        let mut answers = Vec::with_capacity(2);
        for request in requests {
            let (request, messages) = super::bindings::branch::DecisionRequest::split(request);
            let branch = store.data_mut().open_branch(messages).map_err(|e| WorkerError::Trapped(format!("{e:#}")))?;
            let answer = agent.call_decide(&mut store, &request, branch).await;
            store.data_mut().close_branch();
            answers.push(match answer {
                Ok(Ok(decision)) => super::Answer::Typed(Box::new(decision)).decision(None),
                Ok(Err(e)) => Err(WorkerError::Declined { message: e.message, retryable: e.retryable }),
                Err(e) => Err(self.explain(Failure::Call(e), store.data(), wall)),
            });
        }
        Ok(answers)
    }
}

/// `request` converted to its WIT form, as the host does before a call,
/// and back, as the guest SDK does inside the guest: the marshalling of a
/// decision's request without the copy into guest memory.
pub fn request_round_trip(request: DecisionRequest) -> Result<DecisionRequest, ProtocolError> {
    DecisionRequest::from_wit(wit::DecisionRequest::from(request))
}

/// `decision` converted to its WIT form, as the guest SDK returns it, and
/// back, as the host reads it.
pub fn decision_round_trip(decision: DecisionResponse) -> Result<DecisionResponse, ProtocolError> {
    DecisionResponse::from_wit(wit::DecisionResponse::from(decision))
}

/// A component of the `subs:agent/floor` world on a host: instantiating it
/// and calling its `noop` costs what any call into a component costs
/// there, with nothing to carry across and no work inside. Cheap to clone.
#[derive(Clone)]
pub struct Floor {
    pre: InstancePre<StoreState>,
    noop: ComponentExportIndex,
    host: Arc<Inner>,
    bound: Arc<Bound>,
}

impl std::fmt::Debug for Floor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Floor").finish_non_exhaustive()
    }
}

impl ComponentHost {
    /// Loads a component of the `subs:agent/floor` world (a component, or
    /// a core module carrying that world) under the default limits, as
    /// [`load`](Self::load) loads an agent.
    pub fn load_floor(&self, bytes: &[u8]) -> Result<Floor, LoadError> {
        let compiled =
            self.compile(bytes, |shape| validate::check_import_names(shape.imports.iter().map(String::as_str)))?;
        let component = compiled.component;
        let noop = match component.get_export(None, "noop") {
            Some((ComponentItem::ComponentFunc(ty), index)) if ty.params().len() == 0 && ty.results().len() == 0 => {
                index
            }
            _ => return Err(LoadError::World("it does not export `noop: func()` (subs:agent/floor)".to_owned())),
        };
        let pre = self.inner.linker.instantiate_pre(&component).map_err(|e| LoadError::World(format!("{e:#}")))?;
        let bound = bind(&self.inner, "", "", &Default::default())?;
        Ok(Floor { pre, noop, host: self.inner.clone(), bound: Arc::new(bound) })
    }
}

impl Floor {
    /// Instantiates the component in a fresh store, calls `noop` and tears
    /// the store down.
    pub async fn call(&self) -> Result<(), WorkerError> {
        let wall = self.bound.limits.wall_clock;
        let _slot = self.host.slots.acquire(&self.bound.tenant, 1).await;
        let meter = CpuMeter::new();
        let mut store = self.host.store(self.pre.engine(), &self.bound, String::new(), None, wall, &meter);
        meter
            .meter(async {
                let instance = self
                    .pre
                    .instantiate_async(&mut store)
                    .await
                    .map_err(|e| WorkerError::Instantiation(format!("{e:#}")))?;
                let noop = instance
                    .get_typed_func::<(), ()>(&mut store, &self.noop)
                    .map_err(|e| WorkerError::Instantiation(format!("{e:#}")))?;
                noop.call_async(&mut store, ()).await.map_err(|e| WorkerError::Trapped(format!("{e:#}")))
            })
            .await
    }
}
