//! The subs agent engine.
//!
//! The engine runs the agent loop: whenever a session needs to know what
//! happens next, it asks the agent's worker for a decision and acts on it.
//! Agents are WebAssembly components called in-process; HTTP workers are the
//! fallback.
//!
//! # Layout
//!
//! - [`engine`]: [`Engine`], the public face: inputs, cancel, snapshots,
//!   events, agents; resumes unfinished sessions on start. `records`
//!   adds the records the server keeps beside sessions (tenants, keys),
//!   so that it reaches the store only through the engine.
//! - [`agents`]: the agent registry: every tenant's uploaded components
//!   and HTTP workers, kept in the store and registered with the engine;
//!   [`agents::uploads`]: what uploads may cost.
//! - `session`: one session's state machine (tree, proposals, decision
//!   rules, applying decisions) and the actor that drives it.
//! - [`store`]: the durable store behind a trait; redb is the default.
//! - [`worker`]: the [`Worker`](worker::Worker) trait and its
//!   implementations; [`worker::component`] hosts agent components with
//!   wasmtime.
//! - [`model`]: LLM providers, among them the built-in offline model.
//! - [`tools`]: JSON Schema checks of tool arguments and results.
//! - [`events`]: events for clients and their fan-out.
//! - `tenants`: each tenant's budget and session limit, and its use of
//!   them.
//! - [`retry`]: the operator's cap on retry policies.
//! - [`clock`]: time as the loop records it.
//! - `cluster`: when several nodes share the store, the notices between
//!   them and the takeover of sessions whose node died.

pub mod agents;
pub mod clock;
mod cluster;
pub mod engine;
pub mod events;
pub mod follow;
pub mod metrics;
pub mod model;
mod records;
pub mod replay;
pub mod retry;
mod session;
pub mod telemetry;
mod tenants;
pub mod tools;
pub mod worker;

/// The durable store, re-exported: the engine works on any [`Store`].
pub use subs_store as store;

pub use engine::{Accepted, Engine, EngineConfig, InputError, ReadPermit, Sender, SharedSnapshot, Snapshot};
pub use events::StreamLimits;
pub use store::Store;
