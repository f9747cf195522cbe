//! The decision exchange: the request the engine sends a worker and the
//! decision the worker returns.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::FullTree;
use crate::{
    Action, AgentConfig, DraftMessage, Handler, Message, MessageTree, Messages, ProtocolError, RequestTree,
    SharedMessage, Trigger,
};

/// What the engine sends a worker whenever it needs to know what happens
/// next.
///
/// In JSON its `message_tree` is the full [`MessageTree`]; in memory it is
/// a [`RequestTree`] whose active-path nodes refer to `messages` instead of
/// holding a second copy of them. The engine builds a request from the
/// messages it holds, copying none ([`SharedMessage`]); a message reads
/// through it as it would itself (`request.messages.last().map(|m| m.text())`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(transform = with_message_tree))]
#[serde(from = "WireRequest")]
pub struct DecisionRequest {
    /// The session.
    pub session_id: String,
    /// This decision; the same across redeliveries.
    pub decision_id: String,
    /// The agent deciding.
    pub agent_id: String,
    /// The session's owner, without the tenant.
    pub identity: WorkerIdentity,
    /// Why the engine asks.
    pub trigger: Trigger,
    /// What an ordinary agent loop would do next; empty when the engine has
    /// no default.
    pub proposed: DecisionResponse,
    /// The agent's state, stored verbatim.
    pub state: Value,
    /// The current agent config; `null` until the agent sets one.
    // Shared: the engine hands the session's own config to every decision.
    pub agent: Option<Arc<AgentConfig>>,
    /// The in-flight calls.
    pub calls: Vec<Call>,
    /// In-flight tool and sub-agent calls.
    pub pending_calls: u32,
    /// The active conversation path, oldest first, and the session's
    /// message tree (JSON's `message_tree`: [`Messages::tree`], read with
    /// [`DecisionRequest::tree_nodes`]). In a component built against
    /// `subs:agent@0.2.0` it is read on demand.
    #[cfg_attr(feature = "schema", schemars(with = "Vec<Message>"))]
    pub messages: Messages,
    /// Ancestor session ids, nearest last, for sub-agents.
    pub ancestry: Vec<String>,
    /// Delivery attempts of this decision (1 on the first).
    pub attempts: u32,
    /// When the engine stops waiting for the decision (RFC 3339).
    pub deadline: Option<String>,
    /// The turn's idempotency id.
    pub turn_id: Option<String>,
}

/// Adds the `message_tree` that [`DecisionRequest`] writes from its
/// `messages` to the derived schema, after `messages`. (`MessageTree` is
/// put under `$defs` by [`crate::schema::document`].)
#[cfg(feature = "schema")]
fn with_message_tree(schema: &mut schemars::Schema) {
    let tree = serde_json::json!({
        "$ref": "#/$defs/MessageTree",
        "description": "Every message of the session; nodes on the active path refer to `messages` by index.",
    });
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        let old = std::mem::take(properties);
        for (name, property) in old {
            let after_messages = name == "messages";
            properties.insert(name, property);
            if after_messages {
                properties.insert("message_tree".into(), tree.clone());
            }
        }
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        let at = required.iter().position(|name| name == "messages").map_or(required.len(), |i| i + 1);
        required.insert(at, "message_tree".into());
    }
}

/// A [`DecisionRequest`] as JSON has it: the tree in full. (Its schema is
/// only what serde's `from` makes the derive ask for: the committed schema
/// describes what [`DecisionRequest`] writes, which has the same fields.)
#[derive(Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
struct WireRequest {
    session_id: String,
    decision_id: String,
    agent_id: String,
    identity: WorkerIdentity,
    trigger: Trigger,
    proposed: DecisionResponse,
    state: Value,
    agent: Option<Arc<AgentConfig>>,
    calls: Vec<Call>,
    pending_calls: u32,
    messages: Vec<SharedMessage>,
    message_tree: MessageTree,
    ancestry: Vec<String>,
    attempts: u32,
    deadline: Option<String>,
    turn_id: Option<String>,
}

impl From<WireRequest> for DecisionRequest {
    fn from(w: WireRequest) -> Self {
        let tree = RequestTree::new(w.message_tree, &w.messages);
        Self {
            session_id: w.session_id,
            decision_id: w.decision_id,
            agent_id: w.agent_id,
            identity: w.identity,
            trigger: w.trigger,
            proposed: w.proposed,
            state: w.state,
            agent: w.agent,
            calls: w.calls,
            pending_calls: w.pending_calls,
            messages: Messages::new(w.messages, tree),
            ancestry: w.ancestry,
            attempts: w.attempts,
            deadline: w.deadline,
            turn_id: w.turn_id,
        }
    }
}

impl Serialize for DecisionRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.serialize_with_branch(serializer, true)
    }
}

/// A [`DecisionRequest`] written without `messages` and `message_tree`:
/// what a component of `subs:agent@0.2.0`'s `agent-json` world receives
/// (it reads the branch through its `messages` resource). A
/// `client.messages` trigger in it has `shared` beside `messages`: the
/// view is the branch's first `shared` messages, then `messages`.
#[derive(Debug, Clone, Copy)]
pub struct WithoutBranch<'a>(pub &'a DecisionRequest);

impl Serialize for WithoutBranch<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_with_branch(serializer, false)
    }
}

/// A `client.messages` trigger written for a request without its branch:
/// `shared` is how many of the view's leading messages are the branch's,
/// and `messages` only the view's other messages (all of them, with
/// `shared` 0, when the view does not share with `branch`).
struct SharedView<'a> {
    trigger: &'a crate::trigger::ClientMessages,
    branch: &'a crate::Messages,
}

impl Serialize for SharedView<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let t = self.trigger;
        let mut s = serializer.serialize_struct("ClientMessages", 5)?;
        s.serialize_field("type", "client.messages")?;
        match t.messages.shared_with(self.branch) {
            Some((shared, rest)) => {
                s.serialize_field("shared", &shared)?;
                s.serialize_field("messages", rest)?;
            }
            None => {
                s.serialize_field("shared", &0)?;
                s.serialize_field("messages", &t.messages)?;
            }
        }
        s.serialize_field("new_from", &t.new_from)?;
        s.serialize_field("client", &t.client)?;
        s.end()
    }
}

impl DecisionRequest {
    /// Writes the request, its branch only when `branch` is true.
    fn serialize_with_branch<S: serde::Serializer>(&self, serializer: S, branch: bool) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("DecisionRequest", if branch { 16 } else { 14 })?;
        s.serialize_field("session_id", &self.session_id)?;
        s.serialize_field("decision_id", &self.decision_id)?;
        s.serialize_field("agent_id", &self.agent_id)?;
        s.serialize_field("identity", &self.identity)?;
        match (&self.trigger, branch) {
            (Trigger::ClientMessages(m), false) => {
                s.serialize_field("trigger", &SharedView { trigger: m, branch: &self.messages })?;
            }
            (trigger, _) => s.serialize_field("trigger", trigger)?,
        }
        s.serialize_field("proposed", &self.proposed)?;
        s.serialize_field("state", &self.state)?;
        s.serialize_field("agent", &self.agent)?;
        s.serialize_field("calls", &self.calls)?;
        s.serialize_field("pending_calls", &self.pending_calls)?;
        if branch {
            s.serialize_field("messages", &self.messages)?;
            s.serialize_field("message_tree", &FullTree::new(self.messages.tree(), &self.messages))?;
        }
        s.serialize_field("ancestry", &self.ancestry)?;
        s.serialize_field("attempts", &self.attempts)?;
        s.serialize_field("deadline", &self.deadline)?;
        s.serialize_field("turn_id", &self.turn_id)?;
        s.end()
    }
}

impl DecisionRequest {
    /// A minimal request for `trigger`: a fresh session `session` of agent
    /// `agent`, no config, no messages, `null` state, first delivery.
    /// Meant for agent authors' unit tests, which can then set the fields
    /// they care about.
    pub fn for_trigger(trigger: Trigger) -> Self {
        Self {
            session_id: "session".to_owned(),
            decision_id: "decision".to_owned(),
            agent_id: "agent".to_owned(),
            identity: WorkerIdentity::default(),
            trigger,
            proposed: DecisionResponse::default(),
            state: Value::Null,
            agent: None,
            calls: Vec::new(),
            pending_calls: 0,
            messages: Messages::default(),
            ancestry: Vec::new(),
            attempts: 1,
            deadline: None,
            turn_id: None,
        }
    }

    /// The agent state as a `T`; `None` while the state is `null` (a new
    /// session).
    ///
    /// ```
    /// # use subs_protocol::*;
    /// #[derive(serde::Deserialize)]
    /// struct Counter { turns: u32 }
    ///
    /// let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    /// request.state = serde_json::json!({"turns": 3});
    /// let state: Option<Counter> = request.state_as().unwrap();
    /// assert_eq!(state.unwrap().turns, 3);
    /// ```
    pub fn state_as<T: DeserializeOwned>(&self) -> Result<Option<T>, ProtocolError> {
        if self.state.is_null() {
            return Ok(None);
        }
        crate::from_value(self.state.clone()).map(Some).map_err(|e| e.in_field("state"))
    }

    /// Every message of the session's tree, each with its parent's id, in
    /// recording order: `message_tree` read against `messages`.
    ///
    /// ```
    /// # use subs_protocol::*;
    /// let hi: Message = from_value(serde_json::json!({"id": "m1", "role": "user", "content": "hi"})).unwrap();
    /// let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    /// let path = vec![SharedMessage::from(hi.clone())];
    /// let tree = RequestTree::new(
    ///     MessageTree { nodes: vec![TreeNode { message: hi, parent_id: None }], head_id: Some("m1".into()) },
    ///     &path,
    /// );
    /// request.messages = Messages::new(path, tree);
    /// let (message, parent) = request.tree_nodes().next().unwrap().unwrap();
    /// assert_eq!((message.id.as_str(), parent), ("m1", None));
    /// ```
    pub fn tree_nodes(&self) -> impl Iterator<Item = Result<(&Message, Option<&str>), ProtocolError>> + '_ {
        self.messages.tree().nodes_with(&self.messages).map(|node| node.map_err(|e| e.in_field("message_tree")))
    }

    /// The session's whole tree, every message copied.
    ///
    /// # Errors
    /// A `message_tree` index that points nowhere.
    pub fn full_tree(&self) -> Result<MessageTree, ProtocolError> {
        self.messages.tree().to_tree(&self.messages).map_err(|e| e.in_field("message_tree"))
    }

    /// The in-flight call with this id.
    pub fn call(&self, id: &str) -> Option<&Call> {
        self.calls.iter().find(|c| c.id == id)
    }
}

/// The session's owner as the worker sees it (the tenant is withheld).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkerIdentity {
    /// The owner's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Free-form labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// What kind of work a [`Call`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A tool call.
    ToolCall,
    /// An LLM call.
    LlmCall,
    /// A child session.
    SubAgent,
}

/// Where a [`Call`] is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    /// Dispatched, not settled.
    Pending,
    /// Settled with a result.
    Completed,
    /// Settled with an error.
    Failed,
    /// Failed a try; waiting for its backoff to retry.
    RetryScheduled,
    /// Waiting for capacity before it is dispatched.
    Queued,
}

/// A call the engine is tracking: a tool call, an LLM call or a child
/// session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Call {
    /// The call id.
    pub id: String,
    /// What kind of work it is.
    pub kind: CallKind,
    /// Where it is in its lifecycle.
    pub status: CallStatus,
    /// The current try (1 on the first).
    pub attempt: u32,
    /// When the current try times out (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// The tree node the call was requested at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<String>,
    /// The tool (tool calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The raw arguments (tool calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<Handler>,
    /// Whether it streams (LLM calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// The child's agent (sub-agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The child session (sub-agents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// A worker's decision: messages to record, actions to take, the new state
/// and config. Every field is optional; `{}` decides nothing.
///
/// ```
/// use subs_protocol::{Action, DecisionResponse, DraftMessage};
///
/// let decision = DecisionResponse::new()
///     .with_message(DraftMessage::assistant("hello"))
///     .with_action(Action::done());
/// assert_eq!(
///     subs_protocol::to_json(&decision),
///     r#"{"messages":[{"role":"assistant","content":"hello"}],"actions":[{"type":"done"}]}"#
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DecisionResponse {
    /// Messages to record, in order, on the active path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<DraftMessage>>,
    /// What the engine should do next, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<Action>>,
    /// The new agent state; omitted or `null` keeps the current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The new agent config; omitted keeps the current config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentConfig>,
}

impl DecisionResponse {
    /// The empty decision: record nothing, do nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether this decision records and does nothing.
    pub fn is_empty(&self) -> bool {
        self.messages.as_ref().is_none_or(Vec::is_empty)
            && self.actions.as_ref().is_none_or(Vec::is_empty)
            && self.state.as_ref().is_none_or(Value::is_null)
            && self.agent.is_none()
    }

    /// Adds a message to record.
    #[must_use]
    pub fn with_message(mut self, message: DraftMessage) -> Self {
        self.messages.get_or_insert_with(Vec::new).push(message);
        self
    }

    /// Adds an action.
    #[must_use]
    pub fn with_action(mut self, action: impl Into<Action>) -> Self {
        self.actions.get_or_insert_with(Vec::new).push(action.into());
        self
    }

    /// Sets the new agent state.
    #[must_use]
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// Sets the new agent state from a typed value.
    ///
    /// # Errors
    /// When `state` cannot be represented as JSON (a map with non-string
    /// keys, a non-finite float).
    pub fn with_typed_state<T: Serialize>(self, state: &T) -> Result<Self, ProtocolError> {
        let value = serde_json::to_value(state).map_err(|e| ProtocolError::new(e.to_string()).in_field("state"))?;
        Ok(self.with_state(value))
    }

    /// Sets the new agent config.
    #[must_use]
    pub fn with_agent(mut self, agent: AgentConfig) -> Self {
        self.agent = Some(agent);
        self
    }

    /// The actions, or an empty slice.
    pub fn actions(&self) -> &[Action] {
        self.actions.as_deref().unwrap_or_default()
    }

    /// The messages, or an empty slice.
    pub fn messages(&self) -> &[DraftMessage] {
        self.messages.as_deref().unwrap_or_default()
    }
}
