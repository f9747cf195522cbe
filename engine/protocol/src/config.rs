//! What an agent is: its model, prompt, tools, sub-agents and retry policy.

use serde::{Deserialize, Serialize};

use crate::ToolSchema;
use crate::json::{number, opt_number};

/// Where a call runs, as recorded on a [`Call`](crate::Call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum Handler {
    /// The engine runs it: LLM calls, and calls of tools of the agent's
    /// MCP servers.
    Server,
    /// The agent's worker runs it.
    Worker,
    /// A client runs it (client-side tools).
    Client,
}

/// Where an LLM call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum LlmHandler {
    /// The engine calls the provider (the default).
    #[default]
    Server,
    /// The worker gets an `llm.execute` trigger and answers with
    /// `llm.result` / `llm.error`.
    Worker,
}

impl From<LlmHandler> for Handler {
    fn from(h: LlmHandler) -> Self {
        match h {
            LlmHandler::Server => Handler::Server,
            LlmHandler::Worker => Handler::Worker,
        }
    }
}

/// Where a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ToolHandler {
    /// The worker gets a `tool.execute` trigger (the default).
    #[default]
    Worker,
    /// Clients get a `tool.call` event and settle the call themselves.
    Client,
}

impl From<ToolHandler> for Handler {
    fn from(h: ToolHandler) -> Self {
        match h {
            ToolHandler::Worker => Handler::Worker,
            ToolHandler::Client => Handler::Client,
        }
    }
}

/// A provider's native wire format, for worker-handled LLM calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum LlmFormat {
    /// OpenAI Chat Completions.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// How a call or a delivery is retried: exponential backoff from
/// `backoff_base_secs`, doubling, capped at `backoff_max_secs`, at most
/// `max_retries` times; `timeout_secs` bounds one try.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RetryPolicy {
    /// How long one try may take; `null`: no bound.
    #[serde(serialize_with = "opt_number")]
    pub timeout_secs: Option<f64>,
    /// Retries after the first try.
    pub max_retries: u32,
    /// The first backoff.
    #[serde(serialize_with = "number")]
    pub backoff_base_secs: f64,
    /// The longest backoff.
    #[serde(serialize_with = "number")]
    pub backoff_max_secs: f64,
}

impl RetryPolicy {
    /// No retries and no per-try timeout.
    pub fn none() -> Self {
        Self { timeout_secs: None, max_retries: 0, backoff_base_secs: 0.0, backoff_max_secs: 0.0 }
    }

    /// The backoff before retry number `retry` (1 for the first retry):
    /// `backoff_base_secs · 2^(retry-1)`, capped at `backoff_max_secs`.
    pub fn backoff_secs(&self, retry: u32) -> f64 {
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        (self.backoff_base_secs * 2f64.powi(exponent)).min(self.backoff_max_secs).max(0.0)
    }
}

/// What an agent is. `model` is the only required field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentConfig {
    /// The model, as `provider/model`.
    pub model: String,
    /// The system prompt, injected as the first message of engine-built LLM
    /// requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Whether LLM calls stream (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Where LLM calls run (default `server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<LlmHandler>,
    /// Wire format for worker-handled LLM calls; requires handler `worker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<LlmFormat>,
    /// Retry policy for LLM calls and deliveries to the worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<AgentTool>>,
    /// The agents this one may delegate to; each is a tool to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agents: Option<Vec<SubAgent>>,
    /// The tenant's MCP servers whose tools the model may call, each
    /// offered as `<server>__<tool>` (see docs/mcp.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<Vec<McpServerUse>>,
}

impl AgentConfig {
    /// A config with only `model` set.
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            system: None,
            stream: None,
            handler: None,
            format: None,
            retry: None,
            tools: None,
            sub_agents: None,
            mcp: None,
        }
    }

    /// Sets the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Adds a tool.
    #[must_use]
    pub fn with_tool(mut self, tool: AgentTool) -> Self {
        self.tools.get_or_insert_with(Vec::new).push(tool);
        self
    }

    /// Adds tools.
    #[must_use]
    pub fn with_tools(mut self, tools: impl IntoIterator<Item = AgentTool>) -> Self {
        self.tools.get_or_insert_with(Vec::new).extend(tools);
        self
    }

    /// Adds a sub-agent.
    #[must_use]
    pub fn with_sub_agent(mut self, sub_agent: SubAgent) -> Self {
        self.sub_agents.get_or_insert_with(Vec::new).push(sub_agent);
        self
    }

    /// Offers the tools of the tenant's MCP server `server`: all of them,
    /// or those `tools` names.
    #[must_use]
    pub fn with_mcp(mut self, server: impl Into<String>, tools: Option<Vec<String>>) -> Self {
        self.mcp.get_or_insert_with(Vec::new).push(McpServerUse { server: server.into(), tools });
        self
    }

    /// Sets whether LLM calls stream.
    #[must_use]
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = Some(stream);
        self
    }

    /// The declared tool named `name`.
    pub fn tool(&self, name: &str) -> Option<&AgentTool> {
        self.tools.iter().flatten().find(|t| t.name == name)
    }

    /// The declared sub-agent with id `id`.
    pub fn sub_agent(&self, id: &str) -> Option<&SubAgent> {
        self.sub_agents.iter().flatten().find(|s| s.id == id)
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema for the arguments; omitted: the tool takes no arguments
    /// (the engine finds a call with any `invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<ToolSchema>,
    /// JSON Schema results must satisfy; a violating result settles the call
    /// as a terminal error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ToolSchema>,
    /// Who runs it (default `worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<ToolHandler>,
}

impl AgentTool {
    /// A tool with only a name.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), description: None, input: None, output: None, handler: None }
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// Sets the JSON Schema of the arguments.
    #[must_use]
    pub fn input(mut self, schema: impl Into<ToolSchema>) -> Self {
        self.input = Some(schema.into());
        self
    }

    /// Sets the JSON Schema results must satisfy.
    #[must_use]
    pub fn output(mut self, schema: impl Into<ToolSchema>) -> Self {
        self.output = Some(schema.into());
        self
    }

    /// Sets who runs the tool.
    #[must_use]
    pub fn handler(mut self, handler: ToolHandler) -> Self {
        self.handler = Some(handler);
        self
    }
}

/// One of the tenant's registered MCP servers an agent uses, and which of
/// its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct McpServerUse {
    /// The server's registered name.
    pub server: String,
    /// The server's tools to offer, by their names on the server; omitted:
    /// all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
}

/// An agent this one may delegate to. The model sees it as a tool named
/// `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubAgent {
    /// The agent to spawn, and the tool name the model sees.
    pub id: String,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}
