//! The events a session sends its clients: the one definition of the
//! server-sent events of `GET /v1/sessions/{id}/events` (see the API
//! reference, `docs/api.md`).
//!
//! An event is a name and a JSON payload on the wire and in the store
//! (`event:` and `data:` of server-sent events). [`SessionEvent`] is the
//! typed form: the engine builds events only as `SessionEvent`s and turns
//! them into a name and data with [`SessionEvent::name`] and
//! [`SessionEvent::data`]; readers parse a name and data back with
//! [`SessionEvent::from_parts`].
//!
//! A stream also carries frames that are no session event: a running
//! tool's progress (`tool.progress`), which a tool source reports while
//! the session's state machine waits for the call's result. They are
//! [`LiveEvent`]s, live only like token deltas (never stored, no sequence
//! number). [`StreamEvent`] is any frame of an event stream: a session
//! event or a live one, read with [`StreamEvent::from_parts`].
//!
//! ```
//! use serde_json::json;
//! use subs_protocol::SessionEvent;
//! use subs_protocol::event::TurnStarted;
//!
//! let event = SessionEvent::TurnStarted(TurnStarted { turn_id: "turn_1".into() });
//! assert_eq!(event.name(), "turn.started");
//! assert_eq!(event.data(), json!({"turn_id": "turn_1"}));
//! assert_eq!(SessionEvent::from_parts("turn.started", json!({"turn_id": "turn_1"})).unwrap(), event);
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Message, ProtocolError, StreamDelta, WorkerIdentity};

/// An event of a session, for its clients. Each variant is one event name;
/// its payload is the event's data.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// `turn.started`: a turn opened.
    TurnStarted(TurnStarted),
    /// `message`: a message was recorded.
    Message(MessageRecorded),
    /// `llm.token.delta`: a piece of a streamed LLM reply. Live only: never
    /// stored, so it has no sequence number and is not replayed.
    TokenDelta(TokenDelta),
    /// `tool.call`: a client tool to run; answered with a `tool.result`
    /// input.
    ToolCall(ClientToolCall),
    /// `interrupt`: the agent waits for an `interrupt.resume` input.
    Interrupt(InterruptRaised),
    /// `interrupt.resumed`: someone resumed an interrupt.
    InterruptResumed(InterruptAnswered),
    /// `turn.done`: a turn ended.
    TurnDone(TurnDone),
    /// `turn.failed`: a turn ended with an error.
    TurnFailed(TurnFailed),
    /// `state`: a decision changed the agent's state.
    State(StateChanged),
}

/// The kind of a [`SessionEvent`]: its name, without its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// `turn.started`.
    TurnStarted,
    /// `message`.
    Message,
    /// `llm.token.delta`.
    TokenDelta,
    /// `tool.call`.
    ToolCall,
    /// `interrupt`.
    Interrupt,
    /// `interrupt.resumed`.
    InterruptResumed,
    /// `turn.done`.
    TurnDone,
    /// `turn.failed`.
    TurnFailed,
    /// `state`.
    State,
}

impl EventKind {
    /// Every kind of event.
    pub const ALL: [EventKind; 9] = [
        EventKind::TurnStarted,
        EventKind::Message,
        EventKind::TokenDelta,
        EventKind::ToolCall,
        EventKind::Interrupt,
        EventKind::InterruptResumed,
        EventKind::TurnDone,
        EventKind::TurnFailed,
        EventKind::State,
    ];

    /// The event name on the wire (`turn.started`).
    pub fn name(self) -> &'static str {
        match self {
            EventKind::TurnStarted => "turn.started",
            EventKind::Message => "message",
            EventKind::TokenDelta => "llm.token.delta",
            EventKind::ToolCall => "tool.call",
            EventKind::Interrupt => "interrupt",
            EventKind::InterruptResumed => "interrupt.resumed",
            EventKind::TurnDone => "turn.done",
            EventKind::TurnFailed => "turn.failed",
            EventKind::State => "state",
        }
    }

    /// The kind an event name stands for; `None` for a name that is no
    /// event's.
    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether events of this kind start or end a turn (`turn.started`,
    /// `turn.done`, `turn.failed`), and so carry a `turn_id`.
    pub fn is_turn_boundary(self) -> bool {
        matches!(self, EventKind::TurnStarted | EventKind::TurnDone | EventKind::TurnFailed)
    }

    /// Whether events of this kind are stored (and numbered, and replayed);
    /// only token deltas are not.
    pub fn is_stored(self) -> bool {
        self != EventKind::TokenDelta
    }
}

impl std::fmt::Display for EventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `turn.started` data: `{turn_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TurnStarted {
    /// The turn that opened.
    pub turn_id: String,
}

/// `message` data: `{message, parent_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MessageRecorded {
    /// The recorded message.
    pub message: Message,
    /// The message it follows in the session's tree; `null` for the first
    /// one (always written, as `null` when there is none).
    pub parent_id: Option<String>,
    /// The agent version (content digest) whose decision recorded the
    /// message; omitted when none did (a message another session sent) or
    /// the worker named no version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
}

/// `llm.token.delta` data: `{…StreamDelta, call_id}`, the delta's fields
/// followed by the call's id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenDelta {
    /// The piece of the reply.
    #[serde(flatten)]
    pub delta: StreamDelta,
    /// The LLM call (or decision) streaming it.
    pub call_id: String,
}

/// `tool.call` data: `{id, name, arguments, attempt}`, a tool that the
/// client runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ClientToolCall {
    /// The call's id, for the `tool.result` input that answers it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the model wrote them: JSON text, not always valid.
    pub arguments: String,
    /// Which attempt of the call this is (1 on the first).
    pub attempt: u32,
}

/// `interrupt` data: `{interrupt_id, reason, payload}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InterruptRaised {
    /// The id an `interrupt.resume` input names.
    pub interrupt_id: String,
    /// Why, for the person who resumes it.
    pub reason: String,
    /// Anything the resumer needs; `null` when the agent gave nothing
    /// (always written).
    pub payload: Option<Value>,
    /// The JSON Schema a resume payload must satisfy; omitted when the
    /// agent set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Value>,
}

/// `interrupt.resumed` data: `{interrupt_id, payload, resumed_by}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct InterruptAnswered {
    /// The interrupt that was resumed.
    pub interrupt_id: String,
    /// The payload it was resumed with; `null` when none (always written).
    pub payload: Option<Value>,
    /// Who resumed it.
    pub resumed_by: Resumer,
}

/// Who resumed an interrupt: `{"kind": "tenant", "key": …, "identity": …}`
/// for the tenant (`key` the prefix of its API key, as key listings show
/// it, omitted for the process embedding the engine, as `subs run`, or a
/// server without keys; `identity` when the input named one), `{"kind":
/// "end_user", "identity": …}` for an end-user token. The operator key
/// posts no inputs, so never resumes one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resumer {
    /// The tenant's API key.
    Tenant {
        /// The prefix of the key the input came with, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The identity the request named, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<WorkerIdentity>,
    },
    /// An end user, by the identity of its token.
    EndUser {
        /// The token's identity.
        identity: WorkerIdentity,
    },
}

/// `turn.done` data: `{turn_id, data}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TurnDone {
    /// The turn that ended.
    pub turn_id: String,
    /// What the agent ended it with (its `done` action's data); `null` when
    /// nothing (always written).
    pub data: Option<Value>,
}

/// `turn.failed` data: `{turn_id, error, code}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TurnFailed {
    /// The turn that failed.
    pub turn_id: String,
    /// What went wrong.
    pub error: String,
    /// The error code (`agent_error`, `cancelled`, `invalid_input`, an
    /// agent's own code, …).
    pub code: String,
}

/// `state` data: `{state}`, the agent's whole state after a decision
/// changed it. Sent only when it changed (a decision that leaves the state
/// as it was, or gives none, sends nothing).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateChanged {
    /// The new state, whole.
    pub state: Value,
}

/// `tool.progress` data: `{id, progress, total, message}`, how far a
/// running tool call is, as its tool source (an MCP server's
/// `notifications/progress`) reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolProgress {
    /// The tool call the progress is of.
    pub id: String,
    /// How far the call is, in the tool's own unit; it grows with each
    /// report.
    pub progress: f64,
    /// The `progress` at which the call is done; `null` when the tool does
    /// not know (always written).
    pub total: Option<f64>,
    /// What the call is doing, in the tool's words; `null` when it said
    /// nothing (always written).
    pub message: Option<String>,
}

/// A frame of a session's event stream that is no [`SessionEvent`]: live
/// only (never stored, so without a sequence number, and not replayed),
/// sent to the clients following the session while it happens.
#[derive(Debug, Clone, PartialEq)]
pub enum LiveEvent {
    /// `tool.progress`: how far a running tool call is.
    ToolProgress(ToolProgress),
}

impl LiveEvent {
    /// The names of live events, in declaration order.
    pub const NAMES: [&'static str; 1] = ["tool.progress"];

    /// The event name on the wire (`tool.progress`).
    pub fn name(&self) -> &'static str {
        match self {
            LiveEvent::ToolProgress(_) => "tool.progress",
        }
    }

    /// The event's data as a JSON value.
    pub fn data(&self) -> Value {
        match self {
            LiveEvent::ToolProgress(p) => crate::to_value(p),
        }
    }

    /// The event's data as compact JSON text, as [`data`](Self::data) would
    /// be written.
    pub fn data_json(&self) -> String {
        match self {
            LiveEvent::ToolProgress(p) => crate::to_json(p),
        }
    }

    /// Reads a live event from its name and data. Fails for a name that is
    /// no live event's, or data that is not its payload (naming the field).
    pub fn from_parts(name: &str, data: Value) -> Result<LiveEvent, EventError> {
        match name {
            "tool.progress" => Ok(LiveEvent::ToolProgress(
                crate::from_value(data).map_err(|error| EventError::BadData { name: "tool.progress", error })?,
            )),
            _ => Err(EventError::UnknownName { name: name.to_owned() }),
        }
    }
}

impl From<ToolProgress> for LiveEvent {
    fn from(payload: ToolProgress) -> Self {
        LiveEvent::ToolProgress(payload)
    }
}

/// Any frame a session's event stream carries: a [`SessionEvent`] (stored
/// ones with their sequence number as `id:`, token deltas live) or a
/// [`LiveEvent`].
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A session event.
    Session(SessionEvent),
    /// A live-only frame that is no session event.
    Live(LiveEvent),
}

impl StreamEvent {
    /// The event name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Session(event) => event.name(),
            StreamEvent::Live(event) => event.name(),
        }
    }

    /// The event's data as a JSON value.
    pub fn data(&self) -> Value {
        match self {
            StreamEvent::Session(event) => event.data(),
            StreamEvent::Live(event) => event.data(),
        }
    }

    /// The event's data as compact JSON text.
    pub fn data_json(&self) -> String {
        match self {
            StreamEvent::Session(event) => event.data_json(),
            StreamEvent::Live(event) => event.data_json(),
        }
    }

    /// Whether frames of this event are stored (and so numbered, and
    /// replayed to a client that resumes): session events but token deltas.
    pub fn is_stored(&self) -> bool {
        match self {
            StreamEvent::Session(event) => event.kind().is_stored(),
            StreamEvent::Live(_) => false,
        }
    }

    /// Reads a frame of an event stream from its name and data: a session
    /// event's name reads as a [`SessionEvent`], a live one's as a
    /// [`LiveEvent`]. Fails for a name that is neither, or data that is not
    /// its payload (the error names the field).
    pub fn from_parts(name: &str, data: Value) -> Result<StreamEvent, EventError> {
        if LiveEvent::NAMES.contains(&name) {
            return LiveEvent::from_parts(name, data).map(StreamEvent::Live);
        }
        SessionEvent::from_parts(name, data).map(StreamEvent::Session)
    }
}

impl From<SessionEvent> for StreamEvent {
    fn from(event: SessionEvent) -> Self {
        StreamEvent::Session(event)
    }
}

impl From<LiveEvent> for StreamEvent {
    fn from(event: LiveEvent) -> Self {
        StreamEvent::Live(event)
    }
}

/// An event name and data that are not a [`SessionEvent`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// No event has this name.
    #[error("unknown event `{name}`, expected one of {}", expected_names())]
    UnknownName {
        /// The name given.
        name: String,
    },
    /// The name is a [`LiveEvent`]'s, read as a [`SessionEvent`]
    /// ([`StreamEvent::from_parts`] reads both).
    #[error("`{name}` is a live frame of an event stream, not a session event")]
    LiveOnly {
        /// The live event's name.
        name: &'static str,
    },
    /// The data does not read as the event's payload.
    #[error("`{name}` event data: {error}")]
    BadData {
        /// The event's name.
        name: &'static str,
        /// What is wrong with the data, naming the field.
        error: ProtocolError,
    },
}

/// Every name an event stream carries: the session events', then the live
/// ones'.
fn expected_names() -> String {
    EventKind::ALL
        .iter()
        .map(|kind| kind.name())
        .chain(LiveEvent::NAMES)
        .map(|name| format!("`{name}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl SessionEvent {
    /// The event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            SessionEvent::TurnStarted(_) => EventKind::TurnStarted,
            SessionEvent::Message(_) => EventKind::Message,
            SessionEvent::TokenDelta(_) => EventKind::TokenDelta,
            SessionEvent::ToolCall(_) => EventKind::ToolCall,
            SessionEvent::Interrupt(_) => EventKind::Interrupt,
            SessionEvent::InterruptResumed(_) => EventKind::InterruptResumed,
            SessionEvent::TurnDone(_) => EventKind::TurnDone,
            SessionEvent::TurnFailed(_) => EventKind::TurnFailed,
            SessionEvent::State(_) => EventKind::State,
        }
    }

    /// The event name on the wire (`turn.started`).
    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The event's data as a JSON value: its payload, fields in the order
    /// clients receive them.
    pub fn data(&self) -> Value {
        match self {
            SessionEvent::TurnStarted(p) => crate::to_value(p),
            SessionEvent::Message(p) => crate::to_value(p),
            SessionEvent::TokenDelta(p) => crate::to_value(p),
            SessionEvent::ToolCall(p) => crate::to_value(p),
            SessionEvent::Interrupt(p) => crate::to_value(p),
            SessionEvent::InterruptResumed(p) => crate::to_value(p),
            SessionEvent::TurnDone(p) => crate::to_value(p),
            SessionEvent::TurnFailed(p) => crate::to_value(p),
            SessionEvent::State(p) => crate::to_value(p),
        }
    }

    /// The event's data as compact JSON text, as [`data`](Self::data)
    /// would be written, without building the value first.
    pub fn data_json(&self) -> String {
        match self {
            SessionEvent::TurnStarted(p) => crate::to_json(p),
            SessionEvent::Message(p) => crate::to_json(p),
            SessionEvent::TokenDelta(p) => crate::to_json(p),
            SessionEvent::ToolCall(p) => crate::to_json(p),
            SessionEvent::Interrupt(p) => crate::to_json(p),
            SessionEvent::InterruptResumed(p) => crate::to_json(p),
            SessionEvent::TurnDone(p) => crate::to_json(p),
            SessionEvent::TurnFailed(p) => crate::to_json(p),
            SessionEvent::State(p) => crate::to_json(p),
        }
    }

    /// The event's name and data.
    pub fn into_parts(self) -> (&'static str, Value) {
        (self.name(), self.data())
    }

    /// Reads an event from its name and data, as stored or sent. Fails for
    /// a name that is no session event's (a [`LiveEvent`]'s too), or data that is not its payload (the
    /// error names the field).
    pub fn from_parts(name: &str, data: Value) -> Result<SessionEvent, EventError> {
        if let Some(live) = LiveEvent::NAMES.iter().find(|live| **live == name) {
            return Err(EventError::LiveOnly { name: live });
        }
        let kind = EventKind::from_name(name).ok_or_else(|| EventError::UnknownName { name: name.to_owned() })?;
        Ok(match kind {
            EventKind::TurnStarted => SessionEvent::TurnStarted(payload(kind, data)?),
            EventKind::Message => SessionEvent::Message(payload(kind, data)?),
            EventKind::TokenDelta => SessionEvent::TokenDelta(payload(kind, data)?),
            EventKind::ToolCall => SessionEvent::ToolCall(payload(kind, data)?),
            EventKind::Interrupt => SessionEvent::Interrupt(payload(kind, data)?),
            EventKind::InterruptResumed => SessionEvent::InterruptResumed(payload(kind, data)?),
            EventKind::TurnDone => SessionEvent::TurnDone(payload(kind, data)?),
            EventKind::TurnFailed => SessionEvent::TurnFailed(payload(kind, data)?),
            EventKind::State => SessionEvent::State(payload(kind, data)?),
        })
    }

    /// The turn a `turn.started`, `turn.done` or `turn.failed` event is
    /// about; `None` for other events.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            SessionEvent::TurnStarted(TurnStarted { turn_id })
            | SessionEvent::TurnDone(TurnDone { turn_id, .. })
            | SessionEvent::TurnFailed(TurnFailed { turn_id, .. }) => Some(turn_id),
            _ => None,
        }
    }
}

/// One variant of an event union: `{event, data}`, `event` the constant
/// name and `data` the payload `T`, titled `<Name>Event`.
#[cfg(feature = "schema")]
fn schema_variant<T: schemars::JsonSchema>(generator: &mut schemars::SchemaGenerator, name: &str, doc: &str) -> Value {
    serde_json::json!({
        "type": "object",
        "title": format!("{}Event", crate::schema::pascal(name)),
        "description": doc,
        "properties": {
            "event": { "type": "string", "const": name },
            "data": generator.subschema_for::<T>(),
        },
        "required": ["event", "data"],
    })
}

#[cfg(feature = "schema")]
fn schema_union(description: &str, variants: Vec<Value>) -> schemars::Schema {
    serde_json::from_value(serde_json::json!({ "description": description, "oneOf": variants }))
        .expect("a schema is a JSON object")
}

/// A session event as the pair a server-sent event carries: `{event, data}`,
/// the `event:` name and the `data:` payload, one variant per name.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for SessionEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SessionEvent".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        fn variant<T: schemars::JsonSchema>(g: &mut schemars::SchemaGenerator, kind: EventKind, doc: &str) -> Value {
            schema_variant::<T>(g, kind.name(), doc)
        }
        let g = generator;
        let variants = vec![
            variant::<TurnStarted>(g, EventKind::TurnStarted, "A turn opened."),
            variant::<MessageRecorded>(g, EventKind::Message, "A message was recorded."),
            variant::<TokenDelta>(
                g,
                EventKind::TokenDelta,
                "A piece of a streamed LLM reply (live only, never stored).",
            ),
            variant::<ClientToolCall>(g, EventKind::ToolCall, "A client tool to run."),
            variant::<InterruptRaised>(g, EventKind::Interrupt, "The agent waits for an `interrupt.resume` input."),
            variant::<InterruptAnswered>(g, EventKind::InterruptResumed, "Someone resumed an interrupt."),
            variant::<TurnDone>(g, EventKind::TurnDone, "A turn ended."),
            variant::<TurnFailed>(g, EventKind::TurnFailed, "A turn ended with an error."),
            variant::<StateChanged>(g, EventKind::State, "A decision changed the agent's state."),
        ];
        schema_union(
            "An event of a session, as server-sent events carry it: the `event:` name and the `data:` payload.",
            variants,
        )
    }
}

/// A live event as the pair a server-sent event carries, as
/// [`SessionEvent`]'s schema.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for LiveEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LiveEvent".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let variants = vec![schema_variant::<ToolProgress>(
            generator,
            "tool.progress",
            "How far a running tool call is (live only, never stored).",
        )];
        schema_union(
            "A frame of an event stream that is no session event: live only, never stored, without an `id:`.",
            variants,
        )
    }
}

/// Any frame of an event stream: a `SessionEvent` or a `LiveEvent`.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for StreamEvent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "StreamEvent".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        serde_json::from_value(serde_json::json!({
            "description": "Any frame of a session's event stream, as server-sent events carry it: a session event or a live one.",
            "anyOf": [generator.subschema_for::<SessionEvent>(), generator.subschema_for::<LiveEvent>()],
        }))
        .expect("a schema is a JSON object")
    }
}

fn payload<T: DeserializeOwned>(kind: EventKind, data: Value) -> Result<T, EventError> {
    crate::from_value(data).map_err(|error| EventError::BadData { name: kind.name(), error })
}

impl From<TurnStarted> for SessionEvent {
    fn from(payload: TurnStarted) -> Self {
        SessionEvent::TurnStarted(payload)
    }
}

impl From<MessageRecorded> for SessionEvent {
    fn from(payload: MessageRecorded) -> Self {
        SessionEvent::Message(payload)
    }
}

impl From<TokenDelta> for SessionEvent {
    fn from(payload: TokenDelta) -> Self {
        SessionEvent::TokenDelta(payload)
    }
}

impl From<ClientToolCall> for SessionEvent {
    fn from(payload: ClientToolCall) -> Self {
        SessionEvent::ToolCall(payload)
    }
}

impl From<InterruptRaised> for SessionEvent {
    fn from(payload: InterruptRaised) -> Self {
        SessionEvent::Interrupt(payload)
    }
}

impl From<InterruptAnswered> for SessionEvent {
    fn from(payload: InterruptAnswered) -> Self {
        SessionEvent::InterruptResumed(payload)
    }
}

impl From<TurnDone> for SessionEvent {
    fn from(payload: TurnDone) -> Self {
        SessionEvent::TurnDone(payload)
    }
}

impl From<TurnFailed> for SessionEvent {
    fn from(payload: TurnFailed) -> Self {
        SessionEvent::TurnFailed(payload)
    }
}

impl From<StateChanged> for SessionEvent {
    fn from(payload: StateChanged) -> Self {
        SessionEvent::State(payload)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Content, Role, ToolCall, ToolCallDelta};

    /// One event of each kind, as the engine writes them, with every
    /// optional field both ways.
    fn samples() -> Vec<(&'static str, Value)> {
        vec![
            ("turn.started", json!({"turn_id": "turn_1"})),
            ("message", json!({"message": {"id": "msg_1", "role": "user", "content": "hi"}, "parent_id": null})),
            (
                "message",
                json!({"message": {"id": "msg_2", "role": "assistant", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}
                ]}, "parent_id": "msg_1"}),
            ),
            ("llm.token.delta", json!({"text": "hi", "call_id": "llm_1"})),
            (
                "llm.token.delta",
                json!({"reasoning": "hm", "tool_calls": [{"id": "c", "name": "add", "arguments": "{"}],
                       "finish_reason": "stop", "call_id": "llm_1"}),
            ),
            ("llm.token.delta", json!({"call_id": "llm_1"})),
            ("tool.call", json!({"id": "call_1", "name": "add", "arguments": "{\"a\":1}", "attempt": 1})),
            ("interrupt", json!({"interrupt_id": "int_1", "reason": "approve?", "payload": {"amount": 5}})),
            ("interrupt", json!({"interrupt_id": "int_1", "reason": "approve?", "payload": null})),
            (
                "interrupt",
                json!({"interrupt_id": "int_1", "reason": "ok?", "payload": null, "resume_schema": {"type": "object"}}),
            ),
            (
                "interrupt.resumed",
                json!({"interrupt_id": "int_1", "payload": {"approved": true}, "resumed_by": {"kind": "tenant"}}),
            ),
            (
                "interrupt.resumed",
                json!({"interrupt_id": "int_1", "payload": null, "resumed_by": {"kind": "tenant", "identity": {"id": "u1"}}}),
            ),
            (
                "interrupt.resumed",
                json!({"interrupt_id": "int_1", "payload": 3, "resumed_by": {"kind": "end_user", "identity": {"id": "u1"}}}),
            ),
            (
                "interrupt.resumed",
                json!({"interrupt_id": "int_1", "payload": null, "resumed_by": {"kind": "tenant", "key": "subs_ab12cd3"}}),
            ),
            ("turn.done", json!({"turn_id": "turn_1", "data": {"ok": true, "n": 1.5}})),
            ("turn.done", json!({"turn_id": "turn_1", "data": null})),
            ("turn.failed", json!({"turn_id": "turn_1", "error": "boom", "code": "agent_error"})),
            ("state", json!({"state": {"turns": 2, "notes": ["a"], "nested": {"x": null}}})),
            ("state", json!({"state": "any JSON"})),
        ]
    }

    #[test]
    fn every_event_reads_back_to_the_same_name_and_data() {
        let mut kinds = Vec::new();
        for (name, data) in samples() {
            let event = SessionEvent::from_parts(name, data.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(event.name(), name);
            assert_eq!(event.data(), data, "{name}");
            // Byte for byte, key order included.
            assert_eq!(event.data_json(), crate::to_json(&data), "{name}");
            assert_eq!(event.clone().into_parts(), (name, data));
            kinds.push(event.kind());
        }
        for kind in EventKind::ALL {
            assert!(kinds.contains(&kind), "no sample of {kind}");
            assert_eq!(EventKind::from_name(kind.name()), Some(kind));
        }
    }

    #[test]
    fn payloads_are_written_as_the_engine_always_wrote_them() {
        let delta = SessionEvent::TokenDelta(TokenDelta { delta: StreamDelta::text("hi"), call_id: "llm_1".into() });
        assert_eq!(delta.data_json(), r#"{"text":"hi","call_id":"llm_1"}"#);
        let delta = SessionEvent::TokenDelta(TokenDelta {
            delta: StreamDelta {
                tool_calls: Some(vec![ToolCallDelta { id: "c".into(), name: None, arguments: Some("{".into()) }]),
                ..StreamDelta::default()
            },
            call_id: "llm_1".into(),
        });
        assert_eq!(delta.data_json(), r#"{"tool_calls":[{"id":"c","arguments":"{"}],"call_id":"llm_1"}"#);
        let message = SessionEvent::Message(MessageRecorded {
            message: Message {
                id: "msg_1".into(),
                role: Role::Assistant,
                content: Some(Content::Text("hi".into())),
                tool_calls: Some(vec![ToolCall::function("call_1", "add", "{}")]),
                tool_call_id: None,
                name: None,
            },
            parent_id: None,
            agent_version: None,
        });
        assert_eq!(
            message.data_json(),
            r#"{"message":{"id":"msg_1","role":"assistant","content":"hi","tool_calls":[{"id":"call_1","type":"function","function":{"name":"add","arguments":"{}"}}]},"parent_id":null}"#
        );
        let interrupt = SessionEvent::Interrupt(InterruptRaised {
            interrupt_id: "int_1".into(),
            reason: "r".into(),
            payload: None,
            resume_schema: None,
        });
        assert_eq!(interrupt.data_json(), r#"{"interrupt_id":"int_1","reason":"r","payload":null}"#);
        let done = SessionEvent::TurnDone(TurnDone { turn_id: "t".into(), data: None });
        assert_eq!(done.data_json(), r#"{"turn_id":"t","data":null}"#);
        let failed = SessionEvent::TurnFailed(TurnFailed { turn_id: "t".into(), error: "e".into(), code: "c".into() });
        assert_eq!(failed.data_json(), r#"{"turn_id":"t","error":"e","code":"c"}"#);
        let call = SessionEvent::ToolCall(ClientToolCall {
            id: "call_1".into(),
            name: "add".into(),
            arguments: "{}".into(),
            attempt: 2,
        });
        assert_eq!(call.data_json(), r#"{"id":"call_1","name":"add","arguments":"{}","attempt":2}"#);
        assert_eq!(call.turn_id(), None);
        let state = SessionEvent::State(StateChanged { state: json!({"turns": 1}) });
        assert_eq!(state.data_json(), r#"{"state":{"turns":1}}"#);
        assert_eq!(state.turn_id(), None);
        assert!(EventKind::State.is_stored() && !EventKind::State.is_turn_boundary());
        assert_eq!(done.turn_id(), Some("t"));
    }

    #[test]
    fn omitted_optional_fields_read_as_none() {
        let event = SessionEvent::from_parts("message", json!({"message": {"id": "m", "role": "user"}})).unwrap();
        let SessionEvent::Message(MessageRecorded { parent_id, .. }) = event else { panic!("{event:?}") };
        assert_eq!(parent_id, None);
        let event = SessionEvent::from_parts("turn.done", json!({"turn_id": "t"})).unwrap();
        assert_eq!(event, SessionEvent::TurnDone(TurnDone { turn_id: "t".into(), data: None }));
    }

    #[test]
    fn tool_progress_is_a_live_frame_of_the_stream_and_no_session_event() {
        // As the engine sends it (nulls written).
        let data = json!({"id": "call_1", "progress": 2.0, "total": 5.0, "message": "step 2"});
        let event = StreamEvent::from_parts("tool.progress", data.clone()).unwrap();
        let progress =
            ToolProgress { id: "call_1".into(), progress: 2.0, total: Some(5.0), message: Some("step 2".into()) };
        assert_eq!(event, StreamEvent::Live(LiveEvent::ToolProgress(progress)));
        assert_eq!((event.name(), event.data()), ("tool.progress", data));
        assert!(!event.is_stored());
        assert_eq!(event.data_json(), r#"{"id":"call_1","progress":2.0,"total":5.0,"message":"step 2"}"#);
        let bare = LiveEvent::from(ToolProgress { id: "c".into(), progress: 1.0, total: None, message: None });
        assert_eq!(bare.data_json(), r#"{"id":"c","progress":1.0,"total":null,"message":null}"#);
        assert_eq!(LiveEvent::from_parts("tool.progress", json!({"id": "c", "progress": 1})).unwrap(), bare);

        // Session events read through the stream as well.
        for (name, data) in samples() {
            let event = StreamEvent::from_parts(name, data.clone()).unwrap();
            assert_eq!((event.name(), event.data()), (name, data), "{name}");
            assert_eq!(event.is_stored(), name != "llm.token.delta", "{name}");
            assert!(matches!(event, StreamEvent::Session(_)), "{name}");
        }

        let e = SessionEvent::from_parts("tool.progress", json!({})).unwrap_err();
        assert_eq!(e, EventError::LiveOnly { name: "tool.progress" });
        let e = StreamEvent::from_parts("tool.progress", json!({"id": "c", "progress": "half"})).unwrap_err();
        let EventError::BadData { name, error } = &e else { panic!("{e:?}") };
        assert_eq!((*name, error.field()), ("tool.progress", Some("progress")), "{e}");
        let e = StreamEvent::from_parts("tool.paused", json!({})).unwrap_err();
        assert!(e.to_string().ends_with("`state`, `tool.progress`"), "every name a stream carries: {e}");
    }

    #[test]
    fn unknown_names_and_bad_data_are_errors_that_say_which() {
        let e = SessionEvent::from_parts("turn.paused", json!({})).unwrap_err();
        assert_eq!(e, EventError::UnknownName { name: "turn.paused".into() });
        assert!(e.to_string().starts_with("unknown event `turn.paused`, expected one of `turn.started`"), "{e}");

        let e = SessionEvent::from_parts("turn.failed", json!({"turn_id": "t", "error": 5, "code": "c"})).unwrap_err();
        let EventError::BadData { name, error } = &e else { panic!("{e:?}") };
        assert_eq!(*name, "turn.failed");
        assert_eq!(error.field(), Some("error"));
        assert!(e.to_string().starts_with("`turn.failed` event data: error: invalid type"), "{e}");

        let e = SessionEvent::from_parts("message", json!({"message": {"id": "m", "role": "robot"}})).unwrap_err();
        let EventError::BadData { error, .. } = &e else { panic!("{e:?}") };
        assert_eq!(error.field(), Some("message.role"), "{e}");

        assert!(SessionEvent::from_parts("turn.started", json!(["turn_1"])).is_err(), "an array is no payload");
        assert!(SessionEvent::from_parts("llm.token.delta", json!({"text": "x"})).is_err(), "call_id is needed");
        let e = SessionEvent::from_parts("state", json!({})).unwrap_err();
        assert!(e.to_string().contains("state"), "the missing state is named: {e}");
    }
}
