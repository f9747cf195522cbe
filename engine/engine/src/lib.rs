//! The subs agent engine.
//!
//! The engine runs the agent loop: whenever a session needs to know what
//! happens next, it asks the agent's worker for a decision and acts on it.
//! Agents are WebAssembly components called in-process; HTTP workers are the
//! fallback.
//!
//! # Layout
//!
//! - [`worker`]: the [`Worker`](worker::Worker) trait and its
//!   implementations; [`worker::component`] hosts agent components with
//!   wasmtime.

pub mod worker;
