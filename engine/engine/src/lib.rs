//! The subs agent engine, wired: the core loop with the component host,
//! the HTTP worker, the LLM providers and the agent registry.
//!
//! The engine runs the agent loop: whenever a session needs to know what
//! happens next, it asks the agent's worker for a decision and acts on it.
//! Agents are WebAssembly components called in-process; HTTP workers are the
//! fallback. The loop itself is in `subs-core`, which knows workers and
//! models only by their traits; this crate puts the implementations
//! beside it and re-exports the core, so that `subs_engine::…` is the one
//! path the server, the CLI and the tests use.
//!
//! # Layout
//!
//! - [`Engine`], [`EngineConfig`], [`engine`], [`events`], [`follow`],
//!   [`tools`], [`retry`], [`clock`], [`metrics`], [`telemetry`],
//!   [`replay`]: re-exported from `subs-core` (sessions, their state
//!   machine and actor, events, tenants' bounds, replays of recorded
//!   decisions against another version of an agent).
//! - [`agents`]: the agent registry: every tenant's uploaded components
//!   and HTTP workers, kept in the store and registered with the engine;
//!   [`agents::uploads`]: what uploads may cost.
//! - [`worker`]: the core's [`Worker`](worker::Worker) trait and shared
//!   types; [`worker::component`] (the `subs-host` crate) hosts agent
//!   components with wasmtime; [`worker::http`] asks agents over HTTP.
//! - [`model`]: the core's provider trait, registry, prices, formats and
//!   offline model, with the HTTP providers and their config from
//!   `subs-models`.
//! - [`mcp`]: tenants' MCP servers as tool sources (the core's
//!   `ToolSources`), over `subs-mcp`'s client.
//! - [`store`]: the durable store behind a trait; redb is the default.

pub mod agents;
pub mod mcp;
pub mod model;
pub mod worker;

/// The core's tool sources, which [`mcp`] implements.
pub use subs_core::tool_sources;

pub use subs_core::{
    Accepted, Admin, Engine, EngineConfig, InputError, ReadPermit, Reads, Sender, Sessions, SharedSnapshot, Snapshot,
    Store, StreamLimits, clock, engine, events, follow, metrics, replay, retry, store, telemetry, tools,
};
