//! Write subs agents in Rust, as WebAssembly components.
//!
//! An agent is a type that implements [`Agent`], exported with one macro:
//!
//! ```
//! use subs_sdk::prelude::*;
//!
//! struct Passthrough;
//! impl Agent for Passthrough {}
//!
//! subs_sdk::export!(Passthrough);
//!
//! // Natively, the same agent runs in unit tests:
//! let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
//! request.proposed = DecisionResponse::new().with_agent(AgentConfig::new("openai/gpt-4o-mini"));
//! let decision = RecordingHost::new().decide(&Passthrough, request.clone()).unwrap();
//! assert_eq!(decision, request.proposed);
//! ```
//!
//! The engine calls the component's `decide` export whenever it needs to
//! know what happens next in a session. [`Agent::decide`] gets the
//! [`DecisionRequest`] and a [`Context`] for what the engine offers while
//! deciding (logs, streamed token deltas), and returns the
//! [`DecisionResponse`]. Its default returns `proposed`, the engine's own
//! next step, which already makes a complete chat agent; an agent overrides
//! `decide` to answer the triggers it cares about and passes the rest on.
//!
//! Build the agent crate (`crate-type = ["cdylib"]`, plus `"rlib"` to unit
//! test it natively) with `cargo build --target wasm32-wasip2 --release`;
//! the `.wasm` file in `target/wasm32-wasip2/release/` is the component to
//! upload. An agent that needs no WASI (no clock, randomness, stdio or
//! outgoing HTTP) can be built for `wasm32-unknown-unknown` instead: the
//! result is a core module, which the engine makes a component at upload,
//! and every decision is a few microseconds cheaper; there the export glue
//! sends a panic's message to the engine's logs, having no stderr.
//! Agent crates depend on this crate, plus `serde` (with its `derive`
//! feature) when they derive `Serialize`/`Deserialize`: this crate
//! re-exports the protocol types, `serde`, `serde_json`, and the generated
//! WIT bindings the export glue needs.
//!
//! Nothing here except the export glue knows about WebAssembly: the same
//! [`Agent`], [`Context`] and [`ToolRouter`] serve an HTTP worker, and agents
//! are unit tested natively with a [`RecordingHost`].
//!
//! # Layout
//!
//! - [`agent`]: the [`Agent`] trait.
//! - [`error`]: [`DecideError`], a decision the agent could not make.
//! - [`context`]: [`Context`], the engine's services during a decision, over
//!   the [`Host`] trait; [`Level`] of a log line.
//! - [`testing`]: native unit tests of agents: [`RecordingHost`], a
//!   [`Host`] that keeps what the agent logged and streamed, and request
//!   builders.
//! - [`tools`]: [`ToolRouter`], which runs an agent's own tools for
//!   `tool.execute` (each with a [`ToolContext`]: typed state, call,
//!   identity, logs), declares them and its sub-agents in its config, and
//!   asks a person's approval before the calls of the tools that need it.
//! - [`builders`]: [`ActionBuilders`] and [`DecisionBuilders`], the
//!   actions and decisions agents write by hand (an interrupt with id and
//!   payload, a spawn, an approval, a delegation, a proposal with other
//!   actions).
//! - `component`: the [`export!`] macro and the [`Host`] that calls the
//!   engine's imports.
//! - `arena`: the component's allocator, a bump arena that lives as long
//!   as the instance (one decision).
//! - `bindings` / `convert`: the wit-bindgen bindings of the `subs:agent`
//!   world and their one mapping to the protocol types (hidden: agent
//!   authors never touch WIT types).
//! - [`prelude`]: what most agents import.
//!
//! The protocol types ([`DecisionRequest`], [`Trigger`], [`Action`], …) are
//! re-exported at the crate root from [`protocol`], with their builders.

#![deny(missing_docs)]

// The export glue names this crate `subs_sdk` (wit-bindgen's
// `runtime_path` and `default_bindings_module`); this makes that path
// resolve inside the crate as well as in agent crates.
extern crate self as subs_sdk;

pub mod agent;
#[cfg_attr(not(all(target_arch = "wasm32", feature = "arena")), allow(dead_code))]
mod arena;
#[doc(hidden)]
pub mod bindings;
pub mod builders;
mod component;
pub mod context;
mod convert;
pub mod error;
pub mod testing;
pub mod tools;

/// The component's allocator (see `arena`): a bump arena for the one
/// decision an instance lives for. Off with `default-features = false`,
/// for agents that set their own `#[global_allocator]`.
#[cfg(all(target_arch = "wasm32", feature = "arena"))]
#[global_allocator]
static ALLOCATOR: arena::Arena = arena::Arena::new();

pub use agent::Agent;
pub use builders::{ActionBuilders, DecisionBuilders};
pub use context::{Context, Host, Level};
pub use error::DecideError;
pub use testing::RecordingHost;
pub use tools::{ToolContext, ToolRouter};

pub use subs_protocol as protocol;
pub use subs_protocol::*;

pub use serde_json::{Value, json};

/// Re-exported for JSON work without a serde dependency of the agent
/// crate's own. Serde's derives name the `serde` crate itself: an agent
/// crate that derives `Serialize`/`Deserialize` lists `serde` (with its
/// `derive` feature) among its dependencies, as every example does, and
/// needs no `#[serde(crate = …)]`.
pub use serde;
/// Re-exported for [`json!`] and JSON helpers in agent crates.
pub use serde_json;

/// The wit-bindgen runtime, for the glue the [`export!`] macro generates in
/// an agent crate: agent crates depend on this crate, not on wit-bindgen.
#[doc(hidden)]
pub use wit_bindgen;

#[doc(hidden)]
pub use component::ComponentHost as __ComponentHost;
#[cfg(not(feature = "wit-0-1-0"))]
#[doc(hidden)]
pub use component::decide_wit as __decide_wit;
#[doc(hidden)]
pub use component::decide_wit_0_1_0 as __decide_wit_0_1_0;
#[doc(hidden)]
pub use component::report_panics as __report_panics;

/// What most agents need: `use subs_sdk::prelude::*;`.
pub mod prelude {
    pub use crate::{
        ActionBuilders, Agent, Context, DecideError, DecisionBuilders, Host, Level, RecordingHost, ToolContext,
        ToolRouter,
    };
    pub use serde_json::{Value, json};
    pub use subs_protocol::trigger::ToolExecute;
    pub use subs_protocol::{
        Action, AgentConfig, AgentTool, DecisionRequest, DecisionResponse, DraftMessage, Message, ProtocolError, Role,
        StreamDelta, SubAgent, ToolInput, Trigger, WorkerIdentity,
    };
}
