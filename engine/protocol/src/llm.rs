//! LLM requests and responses in the engine's own provider-neutral shape,
//! the deltas of a streamed reply, and the error codes of failed calls.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::opt_number;
use crate::{DraftMessage, ToolCall, UrlRef};

/// A provider-neutral LLM request: what the engine sends a provider, or a
/// worker in `llm.execute` when no `format` is set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmRequest {
    /// The model, as `provider/model`.
    pub model: String,
    /// The conversation, system prompt included.
    pub messages: Vec<DraftMessage>,
    /// The tools the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<LlmTool>>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "opt_number")]
    pub temperature: Option<f64>,
    /// The most tokens the reply may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    /// How much the model should reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningConfig>,
}

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmTool {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema for the arguments; omitted: no arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// JSON Schema of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
}

/// How much effort a reasoning model spends thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// The most.
    Xhigh,
    /// A lot.
    High,
    /// Some.
    Medium,
    /// A little.
    Low,
    /// Barely.
    Minimal,
    /// None at all.
    None,
}

/// Reasoning settings for models that think before answering.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReasoningConfig {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// A token budget for thinking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Think, but leave the reasoning out of the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<bool>,
    /// Turn reasoning on or off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// A provider-neutral LLM reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmResponse {
    /// The model that answered.
    pub model: String,
    /// The reply text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The tools the model calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Why the reply ended (`stop`, `tool_calls`, `length`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token usage as the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// Cost in dollars, as a decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// Generated images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<UrlRef>>,
}

/// A piece of a streamed LLM reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StreamDelta {
    /// More reply text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// More reasoning text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// Pieces of tool calls, joined by `id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
    /// Why the reply ended, on the last delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

impl StreamDelta {
    /// A delta carrying only text.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), ..Self::default() }
    }
}

/// A piece of a streamed tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolCallDelta {
    /// The tool call this piece belongs to.
    pub id: String,
    /// The tool's name, on the first piece.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// More argument text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

/// Why an LLM or tool call failed, for callers that handle failures by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The provider failed (5xx, overloaded, a broken stream).
    ProviderError,
    /// The provider said to slow down (429).
    RateLimited,
    /// The model refused to answer.
    Refused,
    /// The session's or tenant's budget is spent.
    BudgetExceeded,
    /// The call ran past its deadline.
    DeadlineExceeded,
}

impl ErrorCode {
    /// The code as it appears on the wire (`rate_limited`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::ProviderError => "provider_error",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::Refused => "refused",
            ErrorCode::BudgetExceeded => "budget_exceeded",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
        }
    }
}
