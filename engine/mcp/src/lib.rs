//! The Model Context Protocol (MCP) for the subs engine.
//!
//! # Layout
//!
//! - [`wire`]: the protocol's JSON-RPC messages and the MCP payloads the
//!   engine reads or writes (initialize, `tools/list`, `tools/call`,
//!   progress, cancellation, elicitation), shared by the client here and
//!   the server side in `subs-server`.

pub mod wire;
