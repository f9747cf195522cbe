//! The records the store keeps. All are plain data, serialized as JSON.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use subs_protocol::action::LlmCall;
use subs_protocol::{
    AgentConfig, AgentTool, Call, ClientContext, ClientInput, DecisionResponse, DraftMessage, Message, RetryPolicy,
    ToolInput, Trigger, WorkerIdentity,
};

/// Identifies a session: its tenant and its id. Ids are unique per tenant,
/// so two tenants may use the same session id without meeting.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SessionKey {
    /// The tenant owning the session.
    pub tenant: String,
    /// The session's id within the tenant.
    pub session: String,
}

impl SessionKey {
    /// The key of session `session` of `tenant`.
    pub fn new(tenant: impl Into<String>, session: impl Into<String>) -> Self {
        Self { tenant: tenant.into(), session: session.into() }
    }

    /// The key as one string, `tenant/session`, for stores that key by
    /// strings. Unambiguous because tenant names may not contain `/` (see
    /// [`valid_name`]): the first `/` ends the tenant, and the session id
    /// after it may hold any character, `/` included. A store that scans
    /// by prefix must still stop at the exact key: `t/a` is a prefix of
    /// `t/a/b` and `t/a.b`, which are other sessions.
    pub fn storage_key(&self) -> String {
        format!("{}/{}", self.tenant, self.session)
    }

    /// Parses a [`storage_key`](Self::storage_key).
    pub fn from_storage_key(key: &str) -> Option<Self> {
        let (tenant, session) = key.split_once('/')?;
        Some(Self::new(tenant, session))
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant, self.session)
    }
}

pub use subs_protocol::{ID_RULE, NAME_RULE, valid_id, valid_name};

/// Where a session is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// No turn is open; the session waits for input.
    #[default]
    Idle,
    /// A turn is being worked on.
    Running,
    /// A turn is open but only someone outside can move it: an interrupt
    /// to resume or a client tool call to settle.
    Waiting,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// What routes check of a session before acting on it: whose it is and
/// where its events are. A store reads it without decoding the rest of
/// the record (the agent's config, the state, the usage), which is most
/// of a record's size; its fields are the record's, under the same names.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SessionHead {
    /// Which session.
    pub key: SessionKey,
    /// Who it belongs to.
    pub identity: WorkerIdentity,
    /// The sequence numbers it hands out next.
    pub next: Counters,
}

impl From<SessionRecord> for SessionHead {
    fn from(record: SessionRecord) -> Self {
        SessionHead { key: record.key, identity: record.identity, next: record.next }
    }
}

/// A session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session.
    pub key: SessionKey,
    /// The agent it runs.
    pub agent_id: String,
    /// Its owner, as workers see it.
    pub identity: WorkerIdentity,
    /// Where it is.
    pub status: SessionStatus,
    /// The agent's state, verbatim.
    pub state: Value,
    /// The agent's config; `None` until the agent sets one. Shared: it is
    /// copied into every commit's record, request basis and snapshot, and
    /// changes far more rarely than it is copied.
    pub agent: Option<Arc<AgentConfig>>,
    /// The end of the active path.
    pub head_id: Option<String>,
    /// Ancestor session ids, nearest last.
    pub ancestry: Vec<String>,
    /// The parent session and call, for sub-agent sessions.
    pub parent: Option<ParentLink>,
    /// Sequence numbers to hand out next.
    pub next: Counters,
    /// Steps before this one are finished; loading starts here.
    pub first_open_step: u64,
    /// The open turn.
    pub turn: Option<TurnState>,
    /// Inputs that arrived while a turn was open, started in order when it
    /// ends.
    pub queued: Vec<QueuedInput>,
    /// Interrupts waiting for `interrupt.resume`.
    pub interrupts: Vec<OpenInterrupt>,
    /// Token usage of the session's LLM calls, summed field by field (an
    /// object; `{}` before the first call).
    #[serde(default = "empty_object")]
    pub usage: Value,
    /// What the session's LLM calls cost, in dollars (decimal string);
    /// `None` while no call had a known price.
    #[serde(default)]
    pub cost: Option<String>,
    /// The most the session's engine-run LLM calls may cost, in dollars
    /// (decimal string); once spent, further calls fail with
    /// `budget_exceeded` before they are sent. `None`: no limit.
    #[serde(default)]
    pub budget: Option<String>,
    /// What the session's sub-agent sessions (and theirs, down the tree)
    /// spent, as they reported it when their turns ended (decimal
    /// dollars); counted against the session's budget with its own `cost`.
    /// `None` before the first report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_cost: Option<String>,
    /// For a sub-agent session: how much of its `cost` and `tree_cost` it
    /// has reported to its parent so far (decimal dollars).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_cost: Option<String>,
    /// Creation time (Unix ms).
    pub created_ms: u64,
    /// Last change (Unix ms).
    pub updated_ms: u64,
    /// How many decisions each agent version (a content digest) made in
    /// this session. Bounded: at most [`MAX_VERSIONS`] digests are kept by
    /// name, decisions of any further version count under
    /// [`OTHER_VERSIONS`]. Decisions made before the engine kept this count
    /// are not in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, u64>,
    /// The agent version (content digest) of the latest applied decision;
    /// `None` before the first one, or when the worker gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Bytes of the messages the session has recorded, each counted as
    /// the length of its JSON: what a tenant's bound on a session's stored
    /// bytes holds. A session stored before the engine kept this count
    /// reads 0 with messages recorded, and is counted when it is loaded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub message_bytes: u64,
}

/// How many agent versions a session counts decisions of by name.
pub const MAX_VERSIONS: usize = 16;

/// The key of [`SessionRecord::versions`] counting the decisions of
/// versions past the first [`MAX_VERSIONS`].
pub const OTHER_VERSIONS: &str = "other";

impl SessionRecord {
    /// Counts one applied decision of `version` (`None`: a worker that
    /// named no version, which is counted nowhere) and makes it the
    /// session's [`agent_version`](Self::agent_version).
    pub fn count_decision(&mut self, version: Option<&str>) {
        self.agent_version = version.map(str::to_owned);
        let Some(version) = version else { return };
        let key = if self.versions.contains_key(version) || self.versions.len() < MAX_VERSIONS {
            version
        } else {
            OTHER_VERSIONS
        };
        let count = self.versions.entry(key.to_owned()).or_default();
        *count = count.saturating_add(1);
    }
}

#[cfg(test)]
mod decision_counts {
    use super::*;
    use crate::conformance::sample;

    #[test]
    fn past_the_bound_new_versions_count_as_other_and_none_counts_nowhere() {
        let mut record = sample::session(&sample::key("s"), SessionStatus::Idle);
        for n in 0..MAX_VERSIONS + 3 {
            record.count_decision(Some(&format!("sha256:{n}")));
        }
        record.count_decision(Some("sha256:0"));
        assert_eq!(record.versions.len(), MAX_VERSIONS + 1);
        assert_eq!(record.versions["sha256:0"], 2, "a version already counted keeps its own count");
        assert_eq!(record.versions[OTHER_VERSIONS], 3);
        assert_eq!(record.agent_version.as_deref(), Some("sha256:0"));
        record.count_decision(None);
        assert_eq!((record.agent_version, record.versions.values().sum::<u64>()), (None, MAX_VERSIONS as u64 + 4));
        // Left out of the JSON while empty, so records written before
        // the fields existed read and compare the same.
        let plain = sample::session(&sample::key("s"), SessionStatus::Idle);
        let text = serde_json::to_string(&plain).unwrap();
        assert!(!text.contains("versions") && !text.contains("agent_version"), "{text}");
    }
}

/// Numbers left out of stored records when zero (their default), so
/// records written before the field existed read and compare the same.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Sequence numbers a session hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counters {
    /// The next step.
    pub step: u64,
    /// The next event.
    pub event: u64,
    /// The next message.
    pub message: u64,
    /// The next engine-minted id (calls, interrupts, turns).
    pub id: u64,
    /// The next call: calls are numbered in the order they were created,
    /// so calls held by an interrupt start in that order.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub call: u64,
    /// Turns started or queued so far (counted since the engine kept
    /// this count: sessions stored before start from 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub turn: u64,
}

/// The session and call a sub-agent session reports to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentLink {
    /// The parent session (same tenant).
    pub session: String,
    /// The parent's `sub_agent` call this session answers.
    pub call_id: String,
}

/// The try of a parent's sub-agent call that a child's turn runs. The
/// child's turn reports to its parent with it, and the parent takes the
/// report only while that call is on that attempt in that turn: a report of
/// an expired or cancelled try cannot settle the try that replaced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnTry {
    /// The call's attempt (1 for the first try).
    pub attempt: u32,
    /// The parent's turn the call belongs to.
    pub parent_turn: String,
}

/// The open turn of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnState {
    /// The turn's id.
    pub turn_id: String,
    /// Client-side tools the turn's input declared, layered onto the
    /// config for this turn.
    pub client_tools: Vec<AgentTool>,
    /// When the turn started (Unix ms).
    pub started_ms: u64,
    /// The turn's span, when the turn is traced (the engine exports
    /// traces, or its input carried a W3C `traceparent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<SpanRef>,
    /// For a sub-agent session, the parent's try this turn runs; only such
    /// a turn reports to the parent when it ends. `None` for a turn a
    /// client started (and for turns stored without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<SpawnTry>,
}

/// Where a span sits in a trace: W3C trace-context ids as lowercase hex.
/// Kept with what the span covers (a turn, a call's try), which may
/// outlive the process that started it; the span is sent when it ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpanRef {
    /// The trace (32 hex digits).
    pub trace_id: String,
    /// The span (16 hex digits).
    pub span_id: String,
    /// The span it is a child of; `None` for a trace's root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

/// An input that starts a turn, waiting for the open turn to end. It is
/// reconciled against the tree only when its turn starts, since the tree
/// may change until then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedInput {
    /// The turn it will start.
    pub turn_id: String,
    /// The input, as the client sent it.
    pub input: ClientInput,
    /// The trace the input came in (its `traceparent`): the turn's span
    /// is a child of `span_id` in that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<SpanRef>,
    /// The parent's try, for a sub-agent's try that arrived while another
    /// turn of the child was open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawn: Option<SpawnTry>,
}

/// What a turn starts with, after reconciliation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TurnStart {
    /// New messages from the client, reconciled against the tree: the
    /// active path moves to `fork_id` (the last message the client's view
    /// shares with the tree) and `new` are the client's new messages.
    Messages {
        /// The last common message; `None`: the conversation starts over.
        fork_id: Option<String>,
        /// The new messages.
        new: Vec<DraftMessage>,
        /// Client tools, context and state.
        client: ClientContext,
    },
    /// A `client.action`.
    Action {
        /// The action.
        name: String,
        /// Its arguments.
        args: Option<Value>,
    },
}

/// An interrupt waiting for `interrupt.resume`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenInterrupt {
    /// Its id.
    pub interrupt_id: String,
    /// Why it was raised.
    pub reason: String,
    /// What the resumer needs.
    pub payload: Option<Value>,
    /// The JSON Schema a resume payload must satisfy; `None`: any payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_schema: Option<Value>,
}

/// A recorded message and its parent in the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageRecord {
    /// The message, shared: the session's tree in memory, the batch that
    /// stores it and the requests that carry it hold one allocation.
    pub message: Arc<Message>,
    /// Its parent; `None` for a root.
    pub parent_id: Option<String>,
}

/// A trigger as stored. `client.messages` triggers carry the client's
/// whole conversation; storing that verbatim would copy the conversation
/// into every turn, so only what is new is stored and the rest is rebuilt
/// from the tree when the trigger is delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoredTrigger {
    /// Any trigger but `client.messages`, as is.
    Plain {
        /// The trigger.
        trigger: Trigger,
    },
    /// `client.messages`: the messages are the active path up to `fork_id`
    /// followed by `new`.
    ClientMessages {
        /// The last message the client's view shares with the tree.
        fork_id: Option<String>,
        /// The client's new messages.
        new: Vec<DraftMessage>,
        /// Client tools, context and state.
        client: ClientContext,
    },
    /// `llm.execute`: the request is rebuilt from the call (its action and
    /// the path to its anchor).
    LlmExecute {
        /// The call.
        call_id: String,
        /// The try this delivery is for.
        attempt: u32,
    },
}

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Its trigger waits to be decided (or to be delivered again).
    Pending,
    /// Its decision was stored and applied.
    Applied,
    /// Every delivery failed; the turn failed with it.
    Failed,
    /// Its turn ended (cancelled or failed) before it was decided.
    Dropped,
}

/// One trigger and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The turn it belongs to.
    pub turn_id: Option<String>,
    /// The decision's id (stable across redeliveries).
    pub decision_id: String,
    /// Why the engine asks.
    pub trigger: StoredTrigger,
    /// Where it is.
    pub status: StepStatus,
    /// Deliveries so far.
    pub attempts: u32,
    /// Deliveries an engine crash may have cut short: the step was still
    /// pending when the engine restarted. Workers see them in `attempts`
    /// (a redelivery after a crash carries a higher number than the
    /// delivery it repeats); the retry policy does not count them, since
    /// the agent did not fail.
    #[serde(default)]
    pub interrupted: u32,
    /// Not to be delivered again before this instant (Unix ms), after a
    /// failed delivery.
    pub retry_at_ms: Option<u64>,
    /// The last delivery's error.
    pub error: Option<String>,
    /// The decision, once applied. Boxed, as is [`request`](Self::request):
    /// a pending step (one per worker-run call in flight) holds neither,
    /// and carries a pointer for each instead of their room.
    pub decision: Option<Box<DecisionResponse>>,
    /// Ids of the messages the decision recorded.
    pub recorded: Vec<String>,
    /// The agent version that decided (a content digest), when known.
    pub agent_version: Option<String>,
    /// When the step was created (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_ms: Option<u64>,
    /// When its decision was applied (Unix ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_ms: Option<u64>,
    /// How long the delivery that decided took, from the request sent to
    /// the decision back (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    /// Ids of the calls the decision started, in the order it started
    /// them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<String>,
    /// What the request the decision answered held beyond the session's
    /// constants and the stored trigger, so that it can be rebuilt
    /// exactly to replay the decision against another agent version (see
    /// docs/upgrades.md). Set once the decision is applied; `None` for
    /// steps stored before the engine kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Box<RequestBasis>>,
}

/// What a decision request held that neither the session's constants
/// (id, agent, identity, ancestry) nor its stored trigger tell, as it was
/// when the deciding delivery was sent. Messages are append-only, so the
/// tree is the session's first `messages` messages; the state and config,
/// which most steps share with the step before, are kept only when they
/// changed since the last basis the session stored (see
/// [`state`](Self::state)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestBasis {
    /// The end of the active path.
    pub head_id: Option<String>,
    /// How many messages the session had: the request's tree is made of
    /// the messages numbered below this.
    pub messages: u64,
    /// The agent's state, when it differs from the one the session's
    /// previous stored basis carried (or no basis before it carried one:
    /// the first a process stores for a session carries both state and
    /// config); absent: the same as there. Present and `null` is a `null`
    /// state.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// The agent config, kept as [`state`](Self::state) is; present and
    /// `null`: no config.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub agent: Option<Option<Arc<AgentConfig>>>,
    /// The open turn's calls, in the order they were made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub calls: Vec<Call>,
    /// In-flight tool and sub-agent calls.
    #[serde(default)]
    pub pending_calls: u32,
    /// The proposal the request carried.
    pub proposed: DecisionResponse,
    /// The `llm.execute` trigger as delivered: it is built from a call,
    /// which is gone once its turn ends. Other triggers are rebuilt from
    /// the stored one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Trigger>,
    /// The delivery's attempt number, as the request had it.
    pub attempts: u32,
    /// The delivery's deadline (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
}

/// Reads a field that is present as `Some`, `null` included, so that an
/// absent field (`None`, by `serde(default)`) and a `null` one differ.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

impl StepRecord {
    /// A step whose trigger waits to be delivered for the first time.
    pub fn pending(turn_id: Option<String>, decision_id: String, trigger: StoredTrigger) -> Self {
        Self {
            turn_id,
            decision_id,
            trigger,
            status: StepStatus::Pending,
            attempts: 0,
            interrupted: 0,
            retry_at_ms: None,
            error: None,
            decision: None,
            recorded: Vec::new(),
            agent_version: None,
            requested_ms: None,
            decided_ms: None,
            latency_us: None,
            started: Vec::new(),
            request: None,
        }
    }
}

/// A call of the open turn: queued, in flight, or settled (`completed` /
/// `failed`, kept until the turn ends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The call as workers see it (`calls` of a request).
    pub call: Call,
    /// The call's number in its session: the order calls were created.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub order: u64,
    /// When the current try must be settled by (Unix ms); `call.deadline`
    /// is the same instant as text. `None`: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// The turn it belongs to.
    pub turn_id: Option<String>,
    /// How it is retried.
    pub retry: Option<RetryPolicy>,
    /// Not to be tried again before this instant (Unix ms), while
    /// `retry_scheduled`.
    pub retry_at_ms: Option<u64>,
    /// What to run.
    pub spec: CallSpec,
    /// When the current try started (Unix ms); `None` until it starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// The current try's span, when its turn is traced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<SpanRef>,
}

/// A [`CallRecord`] but its spec: what [`Op::UpdateCall`](crate::Op::UpdateCall)
/// changes. Its fields are the record's, encoded the same way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallChange {
    /// See [`CallRecord::call`].
    pub call: Call,
    /// See [`CallRecord::order`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub order: u64,
    /// See [`CallRecord::deadline_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// See [`CallRecord::turn_id`].
    pub turn_id: Option<String>,
    /// See [`CallRecord::retry`].
    pub retry: Option<RetryPolicy>,
    /// See [`CallRecord::retry_at_ms`].
    pub retry_at_ms: Option<u64>,
    /// See [`CallRecord::started_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// See [`CallRecord::span`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<SpanRef>,
}

impl CallRecord {
    /// The record as its change and its spec. Every field is named, so a
    /// field added to the record cannot be left out of [`CallChange`].
    pub fn split(self) -> (CallChange, CallSpec) {
        let CallRecord { call, order, deadline_ms, turn_id, retry, retry_at_ms, spec, started_ms, span } = self;
        (CallChange { call, order, deadline_ms, turn_id, retry, retry_at_ms, started_ms, span }, spec)
    }

    /// The record that `change` makes of a call whose spec is `spec`.
    pub fn join(change: CallChange, spec: CallSpec) -> CallRecord {
        let CallChange { call, order, deadline_ms, turn_id, retry, retry_at_ms, started_ms, span } = change;
        CallRecord { call, order, deadline_ms, turn_id, retry, retry_at_ms, spec, started_ms, span }
    }
}

/// What a call runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CallSpec {
    /// An LLM call. The conversation is not stored: it is the path to the
    /// call's anchor, rebuilt when the call runs (unless the action gave
    /// explicit messages).
    Llm {
        /// The `llm.call` action with every field resolved from the config
        /// but `messages`. Shared: the call's record is copied into every
        /// commit that changes the call, and the action, which holds the
        /// tools' schemas, never changes.
        action: Arc<LlmCall>,
        /// The system prompt to put first, unless the action has explicit
        /// messages.
        system: Option<String>,
        /// The provider format for worker-handled calls.
        format: Option<subs_protocol::LlmFormat>,
    },
    /// A tool call.
    Tool {
        /// The arguments as text.
        arguments: String,
        /// Their validation against the tool's input schema.
        input: ToolInput,
        /// The schema results must satisfy.
        output: Option<Arc<Value>>,
    },
    /// A child session.
    SubAgent {
        /// The model tool call the delegation answers.
        tool_call_id: String,
        /// The child's first user message: the arguments of the tool call
        /// named `tool_call_id` on the active path when the spawn was
        /// applied, else `{}`. Every try starts from it. `None` in calls
        /// stored without it, whose tries read the path.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        arguments: Option<String>,
        /// The budget the child was created with (decimal dollars): what
        /// the parent had left then. Held back from the parent's budget
        /// while the call is in flight, less what the child reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<String>,
        /// What the child reported spending while the call was in flight
        /// (decimal dollars).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reported: Option<String>,
    },
}

/// An event for clients.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The event name (`message`, `turn.done`, …).
    pub name: String,
    /// Its data.
    pub data: Value,
}

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Waiting for the open turn to end.
    Queued,
    /// Open.
    Running,
    /// Ended with `done`.
    Done,
    /// Ended in failure (or cancelled).
    Failed,
}

impl TurnStatus {
    /// Whether the turn is over: done or failed.
    pub fn ended(self) -> bool {
        matches!(self, TurnStatus::Done | TurnStatus::Failed)
    }
}

/// A turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    /// Where it is.
    pub status: TurnStatus,
    /// `done` data, or the failure's `{error, code}`.
    pub data: Option<Value>,
    /// When it started (Unix ms).
    pub started_ms: u64,
    /// When it ended (Unix ms).
    pub ended_ms: Option<u64>,
}

/// Something another session (or the engine on its behalf) hands a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
// Boxed where it is kept (`Op::PushInbox`), and read one at a time.
#[allow(clippy::large_enum_variant)]
pub enum InboxItem {
    /// A child session's turn ended; settles the `sub_agent` call.
    SubAgentFinished {
        /// The call.
        call_id: String,
        /// Whether the child's turn succeeded.
        ok: bool,
        /// The child's result.
        result: Option<String>,
        /// The child's error.
        error: Option<String>,
        /// The try the child's turn ran; `None` in reports stored without
        /// it, which settle the call whatever its attempt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spawn: Option<SpawnTry>,
        /// The child session that reports; `None` in reports stored
        /// without it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        /// What the child's tree spent since its last report (decimal
        /// dollars), whatever try the report is of; the parent counts it
        /// against its budget.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spent: Option<String>,
    },
    /// A message to append to the active path (`message.send`).
    Message {
        /// The message.
        message: DraftMessage,
        /// The session that sent it.
        from: String,
    },
    /// A turn to start (a sub-agent's first input).
    Start {
        /// The turn's id.
        turn_id: String,
        /// What starts it.
        start: TurnStart,
        /// The span of the parent's call that starts it: the child's turn
        /// is traced under it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        span: Option<crate::SpanRef>,
        /// The parent's try the turn runs; `None` in items stored without
        /// it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        spawn: Option<SpawnTry>,
    },
    /// A request for the session's actor (an input, a cancel) that a node
    /// not holding the session's lease received and forwarded to the
    /// node that does; the answer goes back as [`Op::PutReply`](crate::Op::PutReply)
    /// under `id`. The engine gives `request` and the answer their shape.
    Request {
        /// Names the request and its answer, unique across the store.
        id: String,
        /// What is asked.
        request: Value,
    },
}

/// An agent: the worker that decides for its sessions, and its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// The tenant owning it.
    pub tenant: String,
    /// Its id, as sessions name it.
    pub agent_id: String,
    /// The version decisions use now.
    pub current: AgentVersion,
    /// The other stored versions, in upload order (oldest first): those
    /// current before, and those stored without being activated. Any of
    /// them can be made current again.
    pub history: Vec<AgentVersion>,
    /// When it was first uploaded (Unix ms).
    pub created_ms: u64,
}

impl AgentRecord {
    /// The stored version `digest`, current or not.
    pub fn version(&self, digest: &str) -> Option<&AgentVersion> {
        self.versions().find(|v| v.digest == digest)
    }

    /// Every stored version: the current one, then the others in upload
    /// order.
    pub fn versions(&self) -> impl Iterator<Item = &AgentVersion> {
        std::iter::once(&self.current).chain(&self.history)
    }

    /// What the agent's stored versions hold, in bytes (see
    /// [`AgentVersion::stored_bytes`]).
    pub fn stored_bytes(&self) -> u64 {
        self.versions().map(AgentVersion::stored_bytes).fold(0, u64::saturating_add)
    }
}

#[cfg(test)]
mod agent_bytes {
    use super::*;

    #[test]
    fn an_agent_stores_its_components_sizes_and_its_workers_urls_and_secrets() {
        let version = |digest: &str, worker| AgentVersion {
            digest: digest.to_owned(),
            worker,
            created_ms: 1,
            activated_ms: None,
            oci: None,
        };
        let record = AgentRecord {
            tenant: "t".to_owned(),
            agent_id: "a".to_owned(),
            current: version("sha256:1", AgentWorker::Component { bytes: 1000 }),
            history: vec![
                version("sha256:2", AgentWorker::Http { url: "http://h/".to_owned(), secret: None }),
                version("sha256:3", AgentWorker::Http { url: "http://h/".to_owned(), secret: Some("s3".to_owned()) }),
            ],
            created_ms: 1,
        };
        assert_eq!(record.stored_bytes(), 1000 + 9 + 11);
        assert_eq!(
            record.versions().map(|v| v.digest.as_str()).collect::<Vec<_>>(),
            ["sha256:1", "sha256:2", "sha256:3"]
        );
        // Records stored before `activated_ms` existed read as never activated.
        let text = r#"{"digest":"sha256:1","worker":{"kind":"component","bytes":4},"created_ms":1}"#;
        let old: AgentVersion = serde_json::from_str(text).unwrap();
        assert_eq!(old.activated_ms, None);
        assert_eq!(old.oci, None, "nor pulled from a registry");
        assert_eq!(serde_json::to_string(&old).unwrap(), text, "and write as they read");
        let pulled = AgentVersion {
            oci: Some(OciSource { reference: "ghcr.io/a:1".to_owned(), digest: "sha256:9".to_owned() }),
            ..old
        };
        let text = serde_json::to_string(&pulled).unwrap();
        assert!(text.ends_with(r#""oci":{"reference":"ghcr.io/a:1","digest":"sha256:9"}}"#), "{text}");
        assert_eq!(serde_json::from_str::<AgentVersion>(&text).unwrap(), pulled);
    }
}

/// One version of an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentVersion {
    /// Content digest (`sha256:<hex>`): of the component bytes, or of the
    /// HTTP worker's URL and secret.
    pub digest: String,
    /// What runs it.
    pub worker: AgentWorker,
    /// When it was uploaded (Unix ms).
    pub created_ms: u64,
    /// When it was last made current (Unix ms): uploaded active or
    /// activated. `None` for a version never current (stored inactive and
    /// not activated since), and for versions stored before the engine
    /// kept this. The inactive version made current most recently is the
    /// one a rollback goes back to, which pruning keeps longest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activated_ms: Option<u64>,
    /// Where the component was pulled from, when it came from an OCI
    /// registry rather than as uploaded bytes. `None` for uploads, HTTP
    /// workers, and records written without the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciSource>,
}

/// The OCI artifact a version was pulled from: the reference as given and
/// the manifest it resolved to, which pins the version (a tag moved later
/// does not change it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OciSource {
    /// The reference as given (`ghcr.io/org/agent:1.0`, or pinned
    /// `…@sha256:…`).
    pub reference: String,
    /// The digest of the manifest the component's layer came from
    /// (`sha256:<hex>`).
    pub digest: String,
}

impl AgentVersion {
    /// What the version holds in the store and the data directory, in
    /// bytes: a component's size, or an HTTP worker's URL and secret.
    /// What an agent's versions may hold is bounded by these.
    pub fn stored_bytes(&self) -> u64 {
        match &self.worker {
            AgentWorker::Component { bytes } => *bytes,
            AgentWorker::Http { url, secret } => (url.len() + secret.as_ref().map_or(0, String::len)) as u64,
        }
    }
}

/// What runs an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentWorker {
    /// A component; its bytes are kept by digest beside the store.
    Component {
        /// Its size in bytes.
        bytes: u64,
    },
    /// An HTTP worker.
    Http {
        /// Where decisions are posted.
        url: String,
        /// The signing secret, when requests are signed. Kept because
        /// every request is signed with it.
        secret: Option<String>,
    },
}

/// An API key, as stored: its SHA-256 and whose it is. The key itself is
/// shown once, when created, and never stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    /// The tenant the key acts for.
    pub tenant: String,
    /// Hex SHA-256 of the key.
    pub hash: String,
    /// The key's first characters, to tell keys apart in listings.
    pub prefix: String,
    /// A label for people.
    pub name: Option<String>,
    /// When it was created (Unix ms).
    pub created_ms: u64,
}

/// An MCP server a tenant registered: its tools are its agents' to call
/// (docs/mcp.md). The headers hold its credentials: stored, sent to the
/// server, never returned by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerRecord {
    /// The tenant.
    pub tenant: String,
    /// The server's name within the tenant.
    pub name: String,
    /// Its Streamable HTTP endpoint.
    pub url: String,
    /// Headers sent with each request to it, in order.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    /// When it was registered, or last replaced (Unix ms).
    pub updated_ms: u64,
}

/// A tenant created by the operator (through the admin API, or by
/// `subs keys create` on a stopped server), and what the operator set for
/// it over the config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TenantRecord {
    /// The tenant's name.
    pub tenant: String,
    /// Limits set for this tenant, as a JSON object of the server's limit
    /// fields: a field present here wins over the config file's; one
    /// absent inherits it. Kept as JSON, not as the server's type, so the
    /// store need not change when the server gains a limit.
    #[serde(default)]
    pub limits: serde_json::Map<String, Value>,
    /// When it was created (Unix ms).
    pub created_ms: u64,
    /// When its limits last changed (Unix ms).
    pub updated_ms: u64,
}
