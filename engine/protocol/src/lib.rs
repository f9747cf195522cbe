//! The wire types of the subs decision protocol.
//!
//! One set of types, shared by the engine, the guest SDK that agent
//! components are written with, and Rust HTTP workers. JSON on the wire
//! follows the protocol reference exactly: unions tagged by `"type"`,
//! optional fields omitted (never `null` unless the type says so), `unknown`
//! values carried verbatim as [`serde_json::Value`], unknown fields ignored,
//! and errors that name the offending field ([`from_json`]).
//!
//! # Layout
//!
//! - [`decision`]: [`DecisionRequest`], [`DecisionResponse`], [`Call`].
//! - [`trigger`]: [`Trigger`] and its variants; [`ToolInput`],
//!   [`ClientContext`].
//! - [`action`]: [`Action`] and its variants, with builders.
//! - [`message`]: [`Message`], [`DraftMessage`], [`Content`],
//!   [`MessageTree`].
//! - [`config`]: [`AgentConfig`], [`AgentTool`], [`SubAgent`],
//!   [`RetryPolicy`]; [`ToolSchema`], a tool's shared JSON Schema.
//! - [`llm`]: [`LlmRequest`], [`LlmResponse`], [`StreamDelta`],
//!   [`ErrorCode`].
//! - [`client`]: [`ClientInput`] and its variants.
//! - [`event`]: [`SessionEvent`], the events a session sends its clients.
//! - [`sse`]: the one reader of server-sent event streams, for every
//!   side that reads one (providers, workers, the command line).
//! - [`signature`]: the `Subs-Signature` of requests to HTTP workers,
//!   made by the engine and checked by workers (feature `signature`, on
//!   by default).
//! - `schema` (feature `schema`): the JSON Schema of every wire type,
//!   derived from the types' serde attributes; committed as
//!   `schema/protocol.schema.json`, which the SDKs' protocol types are
//!   generated from (`cargo xtask codegen`).
//! - [`wit`]: the one mapping between these types and the WIT types of
//!   `subs:agent`, instantiated by each side of the component boundary.
//!
//! Variant payloads live in their module (`action::ToolCall`,
//! `trigger::ToolExecute`) because several share a protocol name.

pub mod action;
pub mod branch;
pub mod client;
pub mod config;
pub mod decision;
mod error;
pub mod event;
mod id;
mod json;
pub mod llm;
pub mod message;
#[cfg(feature = "signature")]
pub mod signature;
pub mod sse;
mod tool_schema;
pub mod trigger;
pub mod wit;

#[cfg(feature = "proptest")]
pub mod arbitrary;
#[cfg(feature = "schema")]
pub mod schema;

pub use action::Action;
pub use branch::{ClientView, MessageSource, Messages};
pub use client::{ClientInput, PostedInput};
pub use config::{
    AgentConfig, AgentTool, Handler, LlmFormat, LlmHandler, McpServerUse, RetryPolicy, SubAgent, ToolHandler,
};
pub use decision::{Call, CallKind, CallStatus, DecisionRequest, DecisionResponse, WorkerIdentity};
pub use error::ProtocolError;
pub use event::{EventError, EventKind, LiveEvent, SessionEvent, StreamEvent};
pub use id::{ID_RULE, MAX_ID_BYTES, MAX_NAME_BYTES, NAME_RULE, valid_id, valid_name};
pub use json::{from_json, from_json_slice, from_value, to_json, to_value, value_kind};
pub use llm::{
    ErrorCode, LlmMessage, LlmMessages, LlmRequest, LlmResponse, LlmTool, ReasoningConfig, ReasoningEffort,
    StreamDelta, ToolCallDelta,
};
pub use message::{
    AudioData, Content, ContentPart, DraftMessage, FileData, FullTree, FunctionCall, Message, MessageTree, NodeMessage,
    NodeParent, RequestNode, RequestTree, Role, SharedMessage, ToolCall, TreeNode, UrlRef,
};
pub use tool_schema::ToolSchema;
pub use trigger::{ClientContext, ToolInput, Trigger};

/// The version of the WIT package (`subs:agent@0.1.0`) these types map to.
pub const WIT_VERSION: &str = "0.1.0";
