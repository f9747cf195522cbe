//! Workers: the agent code the engine asks for decisions.
//!
//! The [`Worker`] trait and its shared types are the core's; this module
//! adds the two implementations: [`component`] (a WebAssembly component
//! called in-process, the default; the `subs-host` crate) and [`http`] (a
//! URL the engine POSTs the request to, the fallback).

pub mod http;

pub use subs_core::worker::*;
/// Agent components hosted with wasmtime: the `subs-host` crate.
pub use subs_host as component;
