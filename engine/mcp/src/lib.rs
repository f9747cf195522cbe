//! The Model Context Protocol (MCP) for the subs engine.
//!
//! # Layout
//!
//! - [`wire`]: the protocol's JSON-RPC messages and the MCP payloads the
//!   engine reads or writes (initialize, `tools/list`, `tools/call`,
//!   progress, cancellation, elicitation), shared by the client here and
//!   the server side in `subs-server`.
//! - [`client`]: [`Client`], one server's client over Streamable HTTP
//!   (sessions, paged and cached tool lists, calls with progress, bounds).
//! - [`guard`]: where a server may be (public addresses, unless the
//!   operator allows a private one), checked before any connection.

pub mod client;
pub mod guard;
pub mod wire;

pub use client::{Client, ClientConfig, McpError};
