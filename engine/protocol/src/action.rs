//! Actions: what a decision tells the engine to do next.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::{opt_number, tagged_union};
use crate::{DraftMessage, ErrorCode, LlmHandler, LlmTool, ReasoningConfig, RetryPolicy, ToolHandler};

tagged_union! {
    /// What the engine should do. Tagged by `"type"` on the wire; applied in
    /// order after the decision is stored.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Action in "type" {
        /// Run an LLM call.
        "llm.call" => LlmCall(LlmCall),
        /// Dispatch a tool call.
        "tool.call" => ToolCall(ToolCall),
        /// Settle a tool call with its result.
        "tool.result" => ToolResult(ToolResult),
        /// Settle a tool call with an error.
        "tool.error" => ToolError(ToolError),
        /// Settle a worker-executed LLM call with its response.
        "llm.result" => LlmResult(LlmResult),
        /// Settle a worker-executed LLM call with an error.
        "llm.error" => LlmError(LlmError),
        /// Start a child session.
        "sub_agent.spawn" => SubAgentSpawn(SubAgentSpawn),
        /// Write a message into a session.
        "message.send" => MessageSend(MessageSend),
        /// Pause the active branch until someone resumes it.
        "interrupt" => Interrupt(Interrupt),
        /// End the turn.
        "done" => Done(Done),
    }
}

impl Action {
    /// `llm.call` with every field left to the agent config and engine
    /// defaults.
    pub fn llm_call() -> Self {
        Action::LlmCall(LlmCall::default())
    }

    /// `tool.call` of `name` with `arguments`, run by the worker.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Action::ToolCall(ToolCall { id: None, name: name.into(), arguments, handler: None, retry: None })
    }

    /// `tool.result` settling the call of the answering `tool.execute`.
    pub fn tool_result(result: Value) -> Self {
        Action::ToolResult(ToolResult { id: None, attempt: None, result })
    }

    /// Terminal `tool.error` settling the call of the answering
    /// `tool.execute`.
    pub fn tool_error(error: impl Into<String>) -> Self {
        Action::ToolError(CallError::new(error))
    }

    /// `llm.result` settling the call of the answering `llm.execute`.
    pub fn llm_result(response: Value) -> Self {
        Action::LlmResult(LlmResult { id: None, attempt: None, response })
    }

    /// Terminal `llm.error` settling the call of the answering
    /// `llm.execute`.
    pub fn llm_error(error: impl Into<String>) -> Self {
        Action::LlmError(CallError::new(error))
    }

    /// `interrupt` with an engine-minted id.
    pub fn interrupt(reason: impl Into<String>) -> Self {
        Action::Interrupt(Interrupt { interrupt_id: None, reason: reason.into(), payload: None, resume_schema: None })
    }

    /// `done` without data.
    pub fn done() -> Self {
        Action::Done(Done { data: None })
    }

    /// `done` carrying `data` for clients (and a parent session's
    /// `sub_agent.finished`).
    pub fn done_with(data: Value) -> Self {
        Action::Done(Done { data: Some(data) })
    }
}

macro_rules! into_action {
    ($($variant:ident),+) => {
        $(impl From<$variant> for Action {
            fn from(a: $variant) -> Self {
                Action::$variant(a)
            }
        })+
    };
}
into_action!(LlmCall, ToolCall, ToolResult, LlmResult, SubAgentSpawn, MessageSend, Interrupt, Done);

/// `llm.call`: every field is optional; omitted fields come from the agent
/// config, then engine defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmCall {
    /// The call id; omitted: the engine mints one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The model, as `provider/model`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Explicit messages; they suppress system-prompt injection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<DraftMessage>>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<LlmTool>>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "opt_number")]
    pub temperature: Option<f64>,
    /// The most tokens the reply may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// Reasoning settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningConfig>,
    /// Whether to stream token deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Retry policy for this call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Who runs the call (default `server`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<LlmHandler>,
}

/// `tool.call`: dispatch a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ToolCallAction"))]
pub struct ToolCall {
    /// The call id; omitted: the engine mints one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
    /// Who runs it (default `worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<ToolHandler>,
    /// Retry policy (default: no retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
}

/// `tool.result`: settle a tool call with its result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolResult {
    /// The call; omitted: the answering `tool.execute`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The attempt; omitted: the answering `tool.execute`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The result, any JSON.
    pub result: Value,
}

/// `tool.error` and `llm.error`: settle a tool call or a worker-executed
/// LLM call with an error. The two actions have one shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CallError {
    /// The call; omitted: the answering `tool.execute`'s / `llm.execute`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The attempt; omitted: the answering trigger's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What went wrong.
    pub error: String,
    /// Whether the engine may try again (default false: terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    /// The error's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// More about the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

impl CallError {
    /// A terminal error with only a message.
    pub fn new(error: impl Into<String>) -> Self {
        Self { id: None, attempt: None, error: error.into(), retryable: None, code: None, detail: None }
    }
}

/// The payload of `tool.error`.
pub type ToolError = CallError;

/// The payload of `llm.error`.
pub type LlmError = CallError;

/// `llm.result`: settle a worker-executed LLM call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmResult {
    /// The call; omitted: the answering `llm.execute`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The attempt; omitted: the answering `llm.execute`'s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// An [`LlmResponse`](crate::LlmResponse), or the provider-native
    /// response when the answered `llm.execute` carried a format.
    pub response: Value,
}

/// `sub_agent.spawn`: start a child session answering a model tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubAgentSpawn {
    /// The child session's id.
    pub session_id: String,
    /// The child's agent: a sub-agent of this agent.
    pub agent_id: String,
    /// The model tool call this delegation answers.
    pub tool_call_id: String,
    /// Retry policy for the delegation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
}

/// `message.send`: append a message to a session's active path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MessageSend {
    /// The session: this one or one in its family.
    pub session_id: String,
    /// The message.
    pub message: DraftMessage,
}

/// `interrupt`: pause until someone resumes this interrupt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Interrupt {
    /// The interrupt's id; omitted: the engine mints one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt_id: Option<String>,
    /// Why, for the person who resumes it.
    pub reason: String,
    /// Anything the resumer needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// A JSON Schema the resume payload must satisfy; the engine refuses a
    /// resume whose payload fails it, and the interrupt stays open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Value>,
}

/// `done`: end the turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Done {
    /// Data for clients; `{error, code}` reports the turn as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}
