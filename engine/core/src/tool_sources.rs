//! Tool sources: tools the engine itself calls for an agent, such as the
//! tools of a tenant's MCP servers.
//!
//! An agent's config names the sources it uses (`mcp`); before each
//! delivery the loop asks [`ToolSources::tools`] for their tools, offers
//! them to the model beside the agent's own, and lists them in
//! `proposed.agent.tools`, where the agent may drop or gate them like any
//! tool. A call of one is a call the engine runs (handler `server`), the
//! same durable path as an engine-run LLM call: the call is stored with
//! its deadline before [`ToolSources::call`] sends it, retried per its
//! policy, and started again after a restart if it had not settled.
//!
//! The implementation (the MCP client and the tenant's registered
//! servers) lives in `subs-engine`; the core knows it by this trait only,
//! so that it links no HTTP client.

use std::time::Duration;

use serde_json::Value;
use subs_protocol::{AgentTool, ErrorCode, McpServerUse};

use crate::worker::BoxFuture;

/// One try of a call of a source's tool.
#[derive(Debug, Clone)]
pub struct SourceCall {
    /// The session's tenant, whose sources are called.
    pub tenant: String,
    /// The session.
    pub session: String,
    /// The call's id.
    pub call_id: String,
    /// Which try (1 for the first).
    pub attempt: u32,
    /// The tool's name as offered to the model (`<server>__<tool>`).
    pub name: String,
    /// The arguments the model wrote, as JSON text.
    pub arguments: String,
    /// How long the try may take.
    pub timeout: Option<Duration>,
}

/// How one try of a source's call ended.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceOutcome {
    /// The tool's result: a string (its text) or JSON (structured
    /// content, or the content blocks), the tool message's content.
    Ok(Value),
    /// The try failed; `error` names the server and the tool.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether another try may succeed (transport and JSON-RPC
        /// errors, timeouts); a tool's own error (`isError`) is not.
        retryable: bool,
        /// The error's kind.
        code: Option<ErrorCode>,
    },
}

/// Progress a source reported for a call, on its way to the session's
/// events.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceProgress {
    /// How far it is.
    pub progress: f64,
    /// The total, when known.
    pub total: Option<f64>,
    /// What is happening.
    pub message: Option<String>,
}

/// Where a call's progress goes.
pub type ProgressSink = std::sync::Arc<dyn Fn(SourceProgress) + Send + Sync>;

/// The tools the engine calls itself for agents; see the
/// [module docs](self).
pub trait ToolSources: Send + Sync + std::fmt::Debug {
    /// The tools of the sources `uses` names, for an agent of `tenant`:
    /// named as the model sees them, with their input and output
    /// schemas. A source that cannot be listed contributes no tools (the
    /// implementation logs why).
    fn tools<'a>(&'a self, tenant: &'a str, uses: &'a [McpServerUse]) -> BoxFuture<'a, Vec<AgentTool>>;

    /// Runs one try of a call.
    fn call(&self, call: SourceCall, progress: ProgressSink) -> BoxFuture<'_, SourceOutcome>;
}
