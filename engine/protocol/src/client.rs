//! Client inputs: what clients post to a session.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::tagged_union;
use crate::{ClientContext, DraftMessage};

/// What a client sends a session. Tagged by `"type"` on the wire.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type")]
pub enum ClientInput {
    /// One new message; creates the session on first use.
    #[serde(rename = "client.message")]
    ClientMessage(ClientMessage),
    /// The client's whole conversation view; creates the session on first
    /// use.
    #[serde(rename = "client.messages")]
    ClientMessages(ClientMessages),
    /// A named action the agent defines.
    #[serde(rename = "client.action")]
    ClientAction(ClientAction),
    /// Resume a paused branch.
    #[serde(rename = "interrupt.resume")]
    InterruptResume(InterruptResume),
    /// Settle a client-side tool call with its result.
    #[serde(rename = "tool.result")]
    ToolResult(ToolResult),
    /// Settle a client-side tool call with an error.
    #[serde(rename = "tool.error")]
    ToolError(ToolError),
}

tagged_union!(ClientInput, "type", {
    "client.message" => ClientMessage(ClientMessage),
    "client.messages" => ClientMessages(ClientMessages),
    "client.action" => ClientAction(ClientAction),
    "interrupt.resume" => InterruptResume(InterruptResume),
    "tool.result" => ToolResult(ToolResult),
    "tool.error" => ToolError(ToolError),
});

impl ClientInput {
    /// The input's `type` tag (`client.message`).
    pub fn kind(&self) -> &'static str {
        match self {
            ClientInput::ClientMessage(_) => "client.message",
            ClientInput::ClientMessages(_) => "client.messages",
            ClientInput::ClientAction(_) => "client.action",
            ClientInput::InterruptResume(_) => "interrupt.resume",
            ClientInput::ToolResult(_) => "tool.result",
            ClientInput::ToolError(_) => "tool.error",
        }
    }
}

/// `client.message`: one new message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientMessage {
    /// The agent the session runs.
    pub agent_id: String,
    /// The turn's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The message.
    pub message: DraftMessage,
    /// Answer with the turn's event stream instead of `202`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

/// `client.messages`: the client's whole conversation view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientMessages {
    /// The agent the session runs.
    pub agent_id: String,
    /// The turn's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The whole conversation as the client sees it.
    pub messages: Vec<DraftMessage>,
    /// Answer with the turn's event stream instead of `202`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Client tools, context and state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientContext>,
}

/// `client.action`: a named action the agent defines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientAction {
    /// The agent the session runs.
    pub agent_id: String,
    /// The turn's idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The action.
    pub name: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// `interrupt.resume`: resume the interrupt `interrupt_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterruptResume {
    /// The interrupt to resume.
    pub interrupt_id: String,
    /// What the agent gets in `interrupt.resumed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `tool.result`: the result of a client-side tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call.
    pub id: String,
    /// The try it answers; omitted: the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// The result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
}

/// `tool.error`: a client-side tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolError {
    /// The call.
    pub id: String,
    /// What went wrong.
    pub error: String,
    /// Whether the call may be tried again.
    pub retryable: bool,
    /// The try it answers; omitted: the current one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
}
