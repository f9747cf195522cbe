//! Client inputs: what clients post to a session.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::tagged_union;
use crate::{ClientContext, DraftMessage, WorkerIdentity};

tagged_union! {
    /// What a client sends a session. Tagged by `"type"` on the wire. Each
    /// input refuses fields it does not know (a typo such as `paylod` must
    /// not pass as an input without its payload).
    #[derive(Debug, Clone, PartialEq)]
    pub enum ClientInput in "type" {
        /// One new message; creates the session on first use.
        "client.message" => ClientMessage(ClientMessage),
        /// The client's whole conversation view; creates the session on first
        /// use.
        "client.messages" => ClientMessages(ClientMessages),
        /// A named action the agent defines.
        "client.action" => ClientAction(ClientAction),
        /// Resume a paused branch.
        "interrupt.resume" => InterruptResume(InterruptResume),
        /// Settle a client-side tool call with its result.
        "tool.result" => ToolResult(ToolResult),
        /// Settle a client-side tool call with an error.
        "tool.error" => ToolError(ToolError),
    }
}

/// `client.message`: one new message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ClientMessageInput"))]
#[serde(deny_unknown_fields)]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ClientMessagesInput"))]
#[serde(deny_unknown_fields)]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ClientActionInput"))]
#[serde(deny_unknown_fields)]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "InterruptResumeInput"))]
#[serde(deny_unknown_fields)]
pub struct InterruptResume {
    /// The interrupt to resume.
    pub interrupt_id: String,
    /// What the agent gets in `interrupt.resumed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
}

/// `tool.result`: the result of a client-side tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ToolResultInput"))]
#[serde(deny_unknown_fields)]
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
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema), schemars(rename = "ToolErrorInput"))]
#[serde(deny_unknown_fields)]
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

/// A [`ClientInput`] as a client posts it to a session: the input, and
/// the `identity` of the session's owner, a field beside the input's own
/// on the wire:
///
/// ```json
/// {"type": "client.message", "agent_id": "a", "message": {…}, "identity": {"id": "user-1"}}
/// ```
///
/// Only the inputs that create a session (`client.message`,
/// `client.messages`, `client.action`) take an `identity`; it is the
/// owner of the session they create, which workers see in every
/// decision request. The input itself never holds it: the engine takes
/// the owner beside the input, when the session is created.
#[derive(Debug, Clone, PartialEq)]
pub struct PostedInput {
    /// The input.
    pub input: ClientInput,
    /// The owner of the session the input creates, if it names one.
    pub identity: Option<WorkerIdentity>,
}

impl PostedInput {
    /// The input without an identity.
    pub fn new(input: ClientInput) -> Self {
        Self { input, identity: None }
    }

    /// Whether this kind of input may carry an identity: one that can
    /// create a session.
    pub fn takes_identity(input: &ClientInput) -> bool {
        matches!(input, ClientInput::ClientMessage(_) | ClientInput::ClientMessages(_) | ClientInput::ClientAction(_))
    }
}

impl From<ClientInput> for PostedInput {
    fn from(input: ClientInput) -> Self {
        Self::new(input)
    }
}

impl Serialize for PostedInput {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeMap as _};
        let Value::Object(fields) = crate::to_value(&self.input) else {
            return Err(S::Error::custom("a client input is a JSON object"));
        };
        let mut map = serializer.serialize_map(Some(fields.len() + usize::from(self.identity.is_some())))?;
        for (key, value) in &fields {
            map.serialize_entry(key, value)?;
        }
        if let Some(identity) = &self.identity {
            map.serialize_entry("identity", identity)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for PostedInput {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut value = Value::deserialize(deserializer)?;
        let identity = match value.as_object_mut().and_then(|fields| fields.remove("identity")) {
            None | Some(Value::Null) => None,
            Some(identity) => Some(
                crate::from_value::<WorkerIdentity>(identity).map_err(|e| D::Error::custom(e.in_field("identity")))?,
            ),
        };
        let input: ClientInput = crate::from_value(value).map_err(D::Error::custom)?;
        if identity.is_some() && !Self::takes_identity(&input) {
            return Err(D::Error::custom(format_args!(
                "identity: `{}` takes no identity: only the inputs that create a session (client.message, \
                 client.messages, client.action) do",
                input.kind()
            )));
        }
        Ok(Self { input, identity })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_unknown_field_in_any_input_is_refused_by_name() {
        let inputs = [
            json!({"type": "client.message", "agent_id": "a", "message": {"role": "user", "content": "hi"}, "strem": true}),
            json!({"type": "client.messages", "agent_id": "a", "messages": [], "clinet": {}}),
            json!({"type": "client.action", "agent_id": "a", "name": "go", "arg": {}}),
            json!({"type": "interrupt.resume", "interrupt_id": "i1", "paylod": {"approved": true}}),
            json!({"type": "tool.result", "id": "c1", "reslt": 1}),
            json!({"type": "tool.error", "id": "c1", "error": "e", "retryable": false, "atempt": 1}),
        ];
        for (input, field) in inputs.into_iter().zip(["strem", "clinet", "arg", "paylod", "reslt", "atempt"]) {
            let error = crate::from_value::<PostedInput>(input).unwrap_err();
            assert!(error.message().starts_with(&format!("unknown field `{field}`")), "{field}: {error}");
        }
        let known = json!({"type": "interrupt.resume", "interrupt_id": "i1", "payload": {"approved": true}});
        assert!(crate::from_value::<PostedInput>(known).is_ok());
    }
}
