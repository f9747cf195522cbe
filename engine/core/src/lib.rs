//! The core of the subs agent engine: sessions and the loop that drives
//! them, and the traits the parts around it implement.
//!
//! Whenever a session needs to know what happens next, the loop asks the
//! agent's [`Worker`](worker::Worker) for a decision and acts on it, every
//! step persisted before it is acted on. This crate knows workers and
//! model providers only by their traits: the component host
//! (`subs-host`, over wasmtime), the HTTP worker and the LLM providers
//! over HTTP (`subs-models`) implement them, and `subs-engine` wires them
//! together. Nothing here links wasmtime, an HTTP client or server, or a
//! database driver.
//!
//! # Layout
//!
//! - [`config`]: [`EngineConfig`] and the bounds on what a tenant's
//!   agents may spawn and decide.
//! - [`engine`]: [`Engine`], which wires the parts, registers agents and
//!   resumes unfinished sessions on start, and hands out three narrow
//!   handles: [`Sessions`] (inputs, cancel, budgets), [`Reads`]
//!   (snapshots, events, turns, pages, through the store's read methods
//!   only) and [`Admin`] (tenants' limits and records, keys, metrics), so
//!   that the server reaches the store only through the engine.
//! - `session`: one session's state machine (tree, proposals, decision
//!   rules, applying decisions) and the actor that drives it.
//! - [`replay`]: recorded decisions asked again of another version of an
//!   agent (a [`Candidate`](replay::Candidate), which the component host
//!   implements), and the answers compared.
//! - [`worker`]: the [`Worker`](worker::Worker) trait and the types every
//!   side of a delivery shares ([`BoxFuture`](worker::BoxFuture),
//!   [`DeltaSink`](worker::DeltaSink), [`WorkerError`](worker::WorkerError)).
//! - [`model`]: the [`Provider`](model::Provider) trait, the
//!   [`Models`](model::Models) registry, [`Money`](model::Money) and
//!   prices, the two wire formats as pure translations, and the built-in
//!   offline model.
//! - [`tools`]: JSON Schema checks of tool arguments and results.
//! - [`tool_sources`]: the [`ToolSources`](tool_sources::ToolSources)
//!   trait, tools the engine calls itself (a tenant's MCP servers').
//! - [`events`]: events for clients and their fan-out; [`follow`]: a
//!   session's stored events, then its live ones.
//! - `tenants`: each tenant's budget and session limit, and its use of
//!   them.
//! - [`retry`]: the operator's cap on retry policies.
//! - [`clock`]: time as the loop records it; `json`: the size of a
//!   value's JSON, counted without writing it.
//! - [`metrics`], [`telemetry`]: Prometheus metrics and OpenTelemetry
//!   spans.
//! - `cluster`: when several nodes share the store, the notices between
//!   them and the takeover of sessions whose node died.
//!
//! The modules depend on each other without a cycle (the architecture
//! test checks it): `clock`, `json`, `retry`, `tools`, `tool_sources`, `worker`, `model`,
//! `metrics`, `telemetry`, `events` and `config` at the bottom; then
//! `tenants`, then `session`; `engine`, `cluster`, `replay` and `follow`
//! on top.

pub mod clock;
mod cluster;
pub mod config;
pub mod engine;
pub mod events;
pub mod follow;
mod json;
pub mod metrics;
pub mod model;
pub mod replay;
pub mod retry;
mod session;
pub mod telemetry;
mod tenants;
pub mod tool_sources;
pub mod tools;
pub mod worker;

/// The durable store, re-exported: the engine works on any [`Store`].
pub use subs_store as store;

pub use config::EngineConfig;
pub use engine::{Accepted, Admin, Engine, InputError, ReadPermit, Reads, Sender, Sessions, SharedSnapshot, Snapshot};
pub use events::StreamLimits;
pub use store::Store;
