//! Triggers: why the engine asks the worker for a decision.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::tagged_union;
use crate::{AgentTool, ClientView, DraftMessage, ErrorCode, LlmFormat, LlmRequest, ProtocolError};

tagged_union! {
    /// Why the engine is asking for a decision. Tagged by `"type"` on the wire.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Trigger in "type" {
        /// A new session. Usually answered with the agent config.
        #[cfg_attr(feature = "schema", schemars(title = "SessionStart"))]
        "session.start" => SessionStart,
        /// The client sent or edited messages.
        "client.messages" => ClientMessages(ClientMessages),
        /// The client invoked a named action the agent defines.
        "client.action" => ClientAction(ClientAction),
        /// The model called one of the worker's tools: run it.
        "tool.execute" => ToolExecute(ToolExecute),
        /// A tool call settled.
        "tool.finished" => ToolFinished(ToolFinished),
        /// The worker makes this LLM call (the agent config says
        /// `handler: worker`).
        "llm.execute" => LlmExecute(LlmExecute),
        /// An LLM call settled.
        "llm.finished" => LlmFinished(LlmFinished),
        /// A child session's turn ended.
        "sub_agent.finished" => SubAgentFinished(SubAgentFinished),
        /// A paused branch was resumed.
        "interrupt.resumed" => InterruptResumed(InterruptResumed),
    }
}

/// `client.messages`: the client's full view of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClientMessages {
    /// The client's whole conversation.
    // In memory a `ClientView`, whose leading messages the engine shares
    // with the decision's branch; the wire has the list.
    #[cfg_attr(feature = "schema", schemars(with = "Vec<DraftMessage>"))]
    pub messages: ClientView,
    /// Index of the first new message.
    pub new_from: u32,
    /// What the client adds: its own tools, context, state.
    pub client: ClientContext,
}

/// `client.action`: a named action the agent defines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClientAction {
    /// The action's name.
    pub name: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// `tool.execute`: run one of the worker's tools and settle the call with
/// `tool.result` or `tool.error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolExecute {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The raw argument string, as the model wrote it.
    pub arguments: String,
    /// The engine's validation of `arguments` against the tool's input
    /// schema.
    pub input: ToolInput,
    /// Which try this is (1 on the first).
    pub attempt: u32,
    /// When the engine stops waiting for the result (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// `tool.finished`: a tool call settled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolFinished {
    /// The call id.
    pub id: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// The tool.
    pub name: String,
    /// The result as JSON text (a string result as is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `llm.execute`: make this LLM call and answer with `llm.result` or
/// `llm.error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmExecute {
    /// The call id.
    pub id: String,
    /// An [`LlmRequest`], or the provider-native request when `format` is
    /// set.
    pub request: Value,
    /// The provider format of `request`, when the config asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<LlmFormat>,
    /// Whether the engine wants token deltas while the call runs.
    pub stream: bool,
    /// Which try this is (1 on the first).
    pub attempt: u32,
    /// When the engine stops waiting (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

impl LlmExecute {
    /// The request as an [`LlmRequest`]; an error when `format` is set (the
    /// request is then provider-native) or the request does not parse.
    pub fn llm_request(&self) -> Result<LlmRequest, ProtocolError> {
        if let Some(format) = self.format {
            return Err(ProtocolError::new(format!("the request is in the provider-native {format:?} format"))
                .in_field("request"));
        }
        crate::from_value(self.request.clone()).map_err(|e| e.in_field("request"))
    }
}

/// `llm.finished`: an LLM call settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LlmFinished {
    /// The call id.
    pub id: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// The assistant's reply, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<DraftMessage>,
    /// Whether the reply was cut short (token limit).
    pub truncated: bool,
    /// Token usage as the provider reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// Cost in dollars, decimal string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<String>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The error's kind, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    /// More about the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// `sub_agent.finished`: a child session's turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SubAgentFinished {
    /// The call id (the model tool call the delegation answers).
    pub id: String,
    /// Whether the child's turn succeeded.
    pub ok: bool,
    /// The child session.
    pub session_id: String,
    /// The child's agent.
    pub agent_id: String,
    /// The child's result: its `done` data, else its last assistant text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `interrupt.resumed`: someone resumed a paused branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InterruptResumed {
    /// The interrupt that was resumed.
    pub interrupt_id: String,
    /// What the resumer sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

tagged_union! {
    /// The engine's validation of a tool call's arguments against the tool's
    /// input schema. Tagged by `"status"` on the wire.
    #[derive(Debug, Clone, PartialEq)]
    pub enum ToolInput in "status" {
        /// Parsed, and conforms to the schema.
        "valid" => Valid {
            /// The parsed arguments.
            value: Value,
        },
        /// Parsed, but does not conform.
        "invalid" => Invalid {
            /// The parsed arguments.
            value: Value,
            /// What the schema check said.
            error: String,
        },
        /// Not a JSON object.
        "malformed" => Malformed {
            /// What the parser said.
            error: String,
        },
    }
}

/// What a client adds to a `client.messages` input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClientContext {
    /// Client-executed tools, layered onto the proposed config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<AgentTool>>,
    /// Extra context items for the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Vec<Value>>,
    /// The client's own state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// Properties the client forwards as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_props: Option<Value>,
}
