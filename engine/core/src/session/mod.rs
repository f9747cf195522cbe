//! One session's state machine: what it holds in memory, and how triggers,
//! decisions, inputs and settled calls change it.
//!
//! Every change goes through a [`Change`]: the session is mutated in memory
//! while the same writes are collected as store ops; the actor commits the
//! batch and only then performs the change's effects (publishing events,
//! starting calls, waking other sessions). If a commit fails the actor
//! drops the in-memory session, which is then reloaded from the store.
//!
//! - [`tree`]: the message tree and reconciliation of client views.
//! - [`proposal`]: `proposed` for every trigger (see docs/loop.md, "Proposals").
//! - [`validate`]: the rules a decision must keep to be applied.
//! - [`apply`]: applying decisions, inputs and call outcomes.
//! - [`actor`]: the task that drives one session.
//! - [`env`]: what every actor works with (store, hub, agents, models,
//!   tenants' limits, settings).
//! - [`history`]: the bound on the bytes of messages a session stores,
//!   and on a tenant's whole-session reads.
//! - [`directory`]: the running actors, by session.
//! - [`forward`]: requests forwarded to the node acting for a session,
//!   when several nodes share a store.

pub(crate) mod actor;
pub(crate) mod apply;
pub(crate) mod directory;
pub(crate) mod env;
pub(crate) mod forward;
pub(crate) mod history;
pub(crate) mod proposal;
pub(crate) mod tree;
pub(crate) mod validate;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use subs_protocol::event::MessageRecorded;
use subs_protocol::trigger::{ClientMessages, LlmExecute};
use subs_protocol::{
    AgentConfig, AgentTool, Call, CallKind, CallStatus, ClientView, DecisionRequest, DraftMessage, Handler,
    LlmMessages, LlmRequest, LlmTool, Message, Messages, RetryPolicy, SessionEvent, Trigger,
};

use crate::clock;
use crate::model::Money;
use crate::retry::RetryCap;
use crate::store::Store;
use crate::store::{
    Batch, CallRecord, CallSpec, EventRecord, MessageRecord, Op, RequestBasis, SessionKey, SessionRecord,
    SessionStatus, StepRecord, StepStatus, StoreError, StoredTrigger,
};

pub(crate) use self::tree::Tree;

/// The arguments of a sub-agent offered to the model as a tool: one schema
/// every such tool shares.
static PROMPT_SCHEMA: std::sync::LazyLock<subs_protocol::ToolSchema> = std::sync::LazyLock::new(|| {
    subs_protocol::ToolSchema::new(serde_json::json!({
        "type": "object",
        "properties": {"prompt": {"type": "string", "description": "What the agent should do"}},
        "required": ["prompt"]
    }))
});

/// A session loaded in memory.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The stored record, kept current.
    pub record: SessionRecord,
    /// Every message.
    pub tree: Tree,
    /// The open turn's calls, by id: queued, in flight, and settled ones
    /// (kept, as `completed` or `failed`, until the turn ends).
    pub calls: BTreeMap<String, CallRecord>,
    /// Steps not yet finished, in order.
    pub steps: VecDeque<(u64, StepRecord)>,
    /// The ids of the session's turns, where all of them are known.
    pub turns: KnownTurns,
    /// The state and config the last request basis this process stored
    /// for the session carried; `None` until it stores one, so that the
    /// first carries both (see [`RequestBasis`]).
    pub based_on: Option<Box<(Value, Option<Arc<AgentConfig>>)>>,
    /// The agent version whose decision is being applied: the messages it
    /// records carry it in their events. `None` outside a decision.
    pub deciding: Option<String>,
    /// The tools of the sources the agent's config names (its MCP
    /// servers'), as last listed before a delivery: offered to the model
    /// and in proposals like client tools, never stored with the config.
    /// Kept in memory only; listed again after a reload.
    pub source_tools: Vec<AgentTool>,
}

/// How many turn ids a session keeps in memory at most; past them the
/// store answers whether a turn exists.
pub(crate) const KNOWN_TURNS: usize = 1024;

/// Every turn id of a session, when all of them are known in memory: a
/// session created by this process's actor keeps each id it gives a turn
/// (up to [`KNOWN_TURNS`]), so a client's turn id (an idempotency key) is
/// checked without a read of the store, which on a database server costs
/// a round trip and the server's CPU for every input. A session loaded
/// from the store knows nothing, and asks the store.
#[derive(Debug, Clone, Default)]
pub(crate) struct KnownTurns(Option<HashSet<String>>);

impl KnownTurns {
    /// The turns of a session that has none yet.
    pub fn none_yet() -> Self {
        Self(Some(HashSet::new()))
    }

    /// Whether the session has a turn `id`; `None` when not known here.
    pub fn has(&self, id: &str) -> Option<bool> {
        self.0.as_ref().map(|ids| ids.contains(id))
    }

    /// Notes a new turn; past the bound, forgets them all.
    pub fn add(&mut self, id: &str) {
        let Some(ids) = &mut self.0 else { return };
        if ids.len() >= KNOWN_TURNS {
            self.0 = None;
        } else {
            ids.insert(id.to_owned());
        }
    }
}

/// Writes collected while changing a session, and what to do once they are
/// durable.
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// The writes.
    pub batch: Batch,
    /// Events to publish after the commit.
    pub events: Vec<(SessionKey, u64, EventRecord)>,
    /// Other sessions to wake after the commit (their inbox has an item, or
    /// they were created).
    pub wake: Vec<SessionKey>,
    /// Sessions to cancel after the commit (children of a cancelled turn).
    pub cancel: Vec<SessionKey>,
    /// What the change's LLM calls cost, added to the tenant's spend after
    /// the commit.
    pub spent: Money,
    /// Sessions the change creates (a client's first input, a spawned
    /// child; all of the session's tenant), reserved in the tenant's
    /// counts: confirmed after the commit, released if the change is
    /// dropped uncommitted.
    pub created: crate::tenants::Reservation,
    /// Spans that end with the change, sent after the commit.
    pub spans: Vec<crate::telemetry::Span>,
}

impl Change {
    /// This change followed by `later`, as one: the writes in order, and
    /// everything to do after the commit of both.
    pub fn then(mut self, later: Change) -> Change {
        self.batch.ops.extend(later.batch.ops);
        self.events.extend(later.events);
        self.wake.extend(later.wake);
        self.cancel.extend(later.cancel);
        self.spent = self.spent + later.spent;
        self.created.merge(later.created);
        self.spans.extend(later.spans);
        self
    }

    /// Whether the commit of this change must come before anything else
    /// happens: it tells other sessions or the tenant's accounts
    /// something (a child created, woken or cancelled, money spent), or it
    /// ends a turn, which someone may be waiting on.
    pub fn must_commit(&self) -> bool {
        self.tells_others() || !self.created.is_empty() || !self.spent.is_zero()
    }

    /// Whether the change tells other sessions something (wakes or
    /// cancels one), or ends a turn, which someone may be waiting on.
    pub fn tells_others(&self) -> bool {
        !self.wake.is_empty()
            || !self.cancel.is_empty()
            || self.batch.ops.iter().any(|op| matches!(op, Op::PutTurn { record, .. } if record.status.ended()))
    }
}

impl Session {
    /// Loads a session from the store; `None` if it does not exist.
    pub async fn load(store: &dyn Store, key: &SessionKey) -> Result<Option<Self>, StoreError> {
        let Some(mut loaded) = store.load(key).await? else { return Ok(None) };
        let tree = Tree::from_records(loaded.messages.into_iter().map(|(_, r)| r));
        // A session stored before its record kept the count is counted
        // once here; the next commit stores the count.
        if loaded.record.message_bytes == 0 && tree.len() > 0 {
            loaded.record.message_bytes = tree.messages().map(history::message_bytes).sum();
        }
        let calls = loaded.calls.into_iter().map(|c| (c.call.id.clone(), c)).collect();
        let steps = loaded.steps.into_iter().filter(|(_, s)| s.status == StepStatus::Pending).collect();
        Ok(Some(Self {
            record: loaded.record,
            tree,
            calls,
            steps,
            turns: KnownTurns::default(),
            based_on: None,
            deciding: None,
            source_tools: Vec::new(),
        }))
    }

    /// A new, empty session.
    pub fn new(record: SessionRecord) -> Self {
        Self {
            record,
            tree: Tree::default(),
            calls: BTreeMap::new(),
            steps: VecDeque::new(),
            turns: KnownTurns::none_yet(),
            based_on: None,
            deciding: None,
            source_tools: Vec::new(),
        }
    }

    /// The session's key.
    pub fn key(&self) -> &SessionKey {
        &self.record.key
    }

    /// The active path.
    pub fn path(&self) -> Vec<&Message> {
        self.tree.path(self.record.head_id.as_deref())
    }

    /// Mints an id: `prefix` and the session's next number.
    pub fn mint(&mut self, prefix: &str) -> String {
        self.record.next.id += 1;
        format!("{prefix}_{}", self.record.next.id)
    }

    /// A declared tool: the config's, one the open turn's client added, or
    /// one of the agent's tool sources.
    pub fn tool(&self, name: &str) -> Option<&AgentTool> {
        let config = self.record.agent.as_ref().and_then(|a| a.tool(name));
        config.or_else(|| self.client_tools().iter().find(|t| t.name == name)).or_else(|| self.source_tool(name))
    }

    /// A tool of the agent's tool sources (its MCP servers) named `name`,
    /// unless the config or the turn's client declares a tool of that name
    /// (theirs comes first).
    pub fn source_tool(&self, name: &str) -> Option<&AgentTool> {
        self.source_tools.iter().find(|t| t.name == name)
    }

    /// Whether `name` is a tool sources' tool that neither the config nor
    /// the turn's client declares.
    pub fn is_source_tool(&self, name: &str) -> bool {
        self.source_tool(name).is_some()
            && self.record.agent.as_ref().and_then(|a| a.tool(name)).is_none()
            && !self.client_tools().iter().any(|t| t.name == name)
            && !self.is_sub_agent(name)
    }

    /// The tools layered onto the config for this delivery: the open
    /// turn's client tools, then the tool sources'.
    pub fn added_tools(&self) -> Vec<AgentTool> {
        self.client_tools().iter().chain(&self.source_tools).cloned().collect()
    }

    /// The open turn's client tools: none without an open turn.
    pub fn client_tools(&self) -> &[AgentTool] {
        self.record.turn.as_ref().map_or(&[], |t| t.client_tools.as_slice())
    }

    /// Whether `name` is a sub-agent of the current config.
    pub fn is_sub_agent(&self, name: &str) -> bool {
        self.record.agent.as_ref().is_some_and(|a| a.sub_agent(name).is_some())
    }

    /// The retry policy of deliveries, as `cap` lets it apply: the agent
    /// config's, else `default`.
    pub fn retry_policy(&self, default: &RetryPolicy, cap: &RetryCap) -> RetryPolicy {
        cap.apply(self.agent_retry().unwrap_or(default))
    }

    /// The retry policy the agent's config sets, if it sets one.
    pub fn agent_retry(&self) -> Option<&RetryPolicy> {
        self.record.agent.as_ref().and_then(|a| a.retry.as_ref())
    }

    /// The tools the model sees: the config's and the turn's client tools,
    /// then every sub-agent as a tool taking a `prompt`.
    pub fn llm_tools(&self) -> Vec<LlmTool> {
        let agent = self.record.agent.as_ref();
        let declared = agent.and_then(|a| a.tools.as_deref()).unwrap_or_default();
        let client = self.client_tools();
        let sources = self
            .source_tools
            .iter()
            .filter(|t| !declared.iter().chain(client).any(|d| d.name == t.name) && !self.is_sub_agent(&t.name));
        let mut tools: Vec<LlmTool> = declared
            .iter()
            .chain(client)
            .chain(sources)
            .map(|t| LlmTool {
                name: t.name.clone(),
                description: t.description.clone().unwrap_or_default(),
                input: t.input.clone(),
                output: t.output.clone(),
            })
            .collect();
        for sub in agent.and_then(|a| a.sub_agents.as_deref()).unwrap_or_default() {
            tools.push(LlmTool {
                name: sub.id.clone(),
                description: sub
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("Delegate a task to the {} agent.", sub.id)),
                input: Some(PROMPT_SCHEMA.clone()),
                output: None,
            });
        }
        tools
    }

    /// Tool and sub-agent calls not settled yet (queued or in flight).
    pub fn pending_calls(&self) -> usize {
        self.open_calls().filter(|c| c.call.kind != CallKind::LlmCall).count()
    }

    /// The calls not settled yet: queued, in flight, or waiting for a
    /// retry.
    pub fn open_calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.values().filter(|c| !is_settled(c))
    }

    /// The call `id`, if it is not settled yet.
    pub fn open_call(&self, id: &str) -> Option<&CallRecord> {
        self.calls.get(id).filter(|c| !is_settled(c))
    }

    /// Whether an interrupt is open: the branch is paused, and only
    /// `interrupt.resumed` and the execution of calls already in flight
    /// are delivered (see docs/loop.md, "Interrupts").
    pub fn paused(&self) -> bool {
        !self.record.interrupts.is_empty()
    }

    /// The step to deliver next: an `interrupt.resumed` first (a resume is
    /// answered at once), else, while paused, the first step that runs a
    /// call already in flight (`tool.execute`, `llm.execute`), else the
    /// first step.
    pub fn next_step(&self) -> Option<&(u64, StepRecord)> {
        let resumed = |t: &StoredTrigger| matches!(t, StoredTrigger::Plain { trigger: Trigger::InterruptResumed(_) });
        let executes = |t: &StoredTrigger| {
            matches!(t, StoredTrigger::LlmExecute { .. } | StoredTrigger::Plain { trigger: Trigger::ToolExecute(_) })
        };
        self.steps.iter().find(|(_, s)| resumed(&s.trigger)).or_else(|| {
            if self.paused() { self.steps.iter().find(|(_, s)| executes(&s.trigger)) } else { self.steps.front() }
        })
    }

    /// Whether steps after `seq` will settle tool or sub-agent calls: those
    /// calls are still pending from the point of view of step `seq`.
    pub fn settlements_after(&self, seq: u64) -> usize {
        self.steps
            .iter()
            .filter(|(s, step)| {
                *s > seq
                    && matches!(
                        &step.trigger,
                        StoredTrigger::Plain { trigger: Trigger::ToolFinished(_) | Trigger::SubAgentFinished(_) }
                    )
            })
            .count()
    }

    /// Adds an LLM call's usage and cost to the session's totals. Usage is
    /// summed field by field (nested objects too), whatever the provider
    /// reports; a cost that is not a decimal amount is left out (and
    /// logged) rather than poisoning the sum.
    pub fn account(&mut self, usage: Option<&Value>, cost: Option<&str>, change: &mut Change) {
        if let Some(usage) = usage {
            add_usage(&mut self.record.usage, usage);
        }
        let Some(cost) = cost else { return };
        match cost.parse::<Money>() {
            Ok(cost) => {
                let total =
                    self.record.cost.as_deref().and_then(|c| c.parse::<Money>().ok()).unwrap_or_default() + cost;
                self.record.cost = Some(total.to_string());
                change.spent = change.spent + cost;
            }
            Err(e) => tracing::warn!(%e, "an LLM call's cost is not a decimal amount; not counted"),
        }
    }

    /// What counts against the session's budget: what its tree spent
    /// ([`tree_spent`](Self::tree_spent)), and the budgets handed to its
    /// children whose calls are still in flight, less what those reported
    /// spending. Sub-agents spend out of their parent's budget: what one is
    /// given is held back until its call settles, so children running side
    /// by side cannot together spend more than the parent had left.
    pub fn spent(&self) -> Money {
        let held: Money = self
            .open_calls()
            .filter(|c| c.call.kind == CallKind::SubAgent && !is_settled(c))
            .filter_map(|c| match &c.spec {
                CallSpec::SubAgent { budget: Some(budget), reported, .. } => {
                    let budget = budget.parse::<Money>().ok()?;
                    let reported = reported.as_deref().and_then(|r| r.parse::<Money>().ok()).unwrap_or_default();
                    (budget > reported)
                        .then(|| Money::from_atto_dollars(budget.atto_dollars() - reported.atto_dollars()))
                }
                _ => None,
            })
            .sum();
        self.tree_spent() + held
    }

    /// What the session's LLM calls cost, with what its sub-agent
    /// sessions (and theirs) reported spending.
    pub fn tree_spent(&self) -> Money {
        let amount = |a: Option<&str>| a.and_then(|c| c.parse::<Money>().ok()).unwrap_or_default();
        amount(self.record.cost.as_deref()) + amount(self.record.tree_cost.as_deref())
    }

    /// What is left of the session's budget (zero when spent or over);
    /// `None` without a budget.
    pub fn budget_left(&self) -> Option<Money> {
        let budget = self.budget()?;
        let spent = self.spent();
        Some(if budget > spent {
            Money::from_atto_dollars(budget.atto_dollars() - spent.atto_dollars())
        } else {
            Money::default()
        })
    }

    /// The session's budget, when it has one.
    pub fn budget(&self) -> Option<Money> {
        self.record.budget.as_deref().and_then(|b| b.parse().ok())
    }

    /// Recomputes the status from what is open and in flight: `waiting`
    /// while an interrupt is open, or while only clients and sub-agents
    /// can move the turn.
    pub fn refresh_status(&mut self) {
        self.record.status = if self.record.turn.is_none() {
            SessionStatus::Idle
        } else if self.paused()
            || (self.steps.is_empty()
                && self.open_calls().next().is_some()
                && self
                    .open_calls()
                    .all(|c| c.call.handler == Some(Handler::Client) || c.call.kind == CallKind::SubAgent))
        {
            SessionStatus::Waiting
        } else {
            SessionStatus::Running
        };
    }

    /// Whether the open turn has nothing left: no step to decide, no call
    /// queued or in flight, no interrupt open. Such a turn ends as if by
    /// `done`.
    pub fn turn_is_exhausted(&self) -> bool {
        self.record.turn.is_some() && self.steps.is_empty() && self.open_calls().next().is_none() && !self.paused()
    }

    // ---- writes ------------------------------------------------------------

    /// Records a message at the head of the active path, and counts its
    /// bytes in the session's record.
    pub fn record_message(&mut self, draft: DraftMessage, change: &mut Change) -> String {
        let id = match draft.id {
            Some(id) => id,
            None => {
                self.record.next.id += 1;
                format!("msg_{}", self.record.next.id)
            }
        };
        let message = Message {
            id: id.clone(),
            role: draft.role,
            content: draft.content,
            tool_calls: draft.tool_calls,
            tool_call_id: draft.tool_call_id,
            name: draft.name,
        };
        self.record.message_bytes = self.record.message_bytes.saturating_add(history::message_bytes(&message));
        let parent_id = self.record.head_id.take();
        // One allocation for the tree and the write; the event is JSON of
        // its own.
        let record = MessageRecord { message: Arc::new(message), parent_id: parent_id.clone() };
        let message = Message::clone(&record.message);
        let seq = self.record.next.message;
        self.record.next.message += 1;
        change.batch.push(Op::PutMessage { session: self.key().clone(), seq, record: record.clone() });
        self.tree.insert(record);
        self.record.head_id = Some(id.clone());
        let agent_version = self.deciding.clone();
        self.emit(SessionEvent::Message(MessageRecorded { message, parent_id, agent_version }), change);
        id
    }

    /// Stores an event for clients, published after the commit.
    pub fn emit(&mut self, event: SessionEvent, change: &mut Change) {
        let seq = self.record.next.event;
        self.record.next.event += 1;
        let (name, data) = event.into_parts();
        let record = EventRecord { name: name.to_owned(), data };
        change.batch.push(Op::PutEvent { session: self.key().clone(), seq, record: record.clone() });
        change.events.push((self.key().clone(), seq, record));
    }

    /// Adds a step for `trigger` to the open turn.
    pub fn push_step(&mut self, trigger: StoredTrigger, change: &mut Change) -> u64 {
        let seq = self.record.next.step;
        self.record.next.step += 1;
        let step = StepRecord::pending(
            self.record.turn.as_ref().map(|t| t.turn_id.clone()),
            format!("{}:{seq}", self.record.key.session),
            trigger,
        );
        change.batch.push(Op::PutStep { session: self.key().clone(), seq, record: Box::new(step.clone()) });
        self.steps.push_back((seq, step));
        seq
    }

    /// Finishes the front step with `status`, storing it.
    pub fn finish_step(&mut self, mut step: StepRecord, seq: u64, status: StepStatus, change: &mut Change) {
        step.status = status;
        change.batch.push(Op::PutStep { session: self.key().clone(), seq, record: Box::new(step) });
        self.steps.retain(|(s, _)| *s != seq);
        self.record.first_open_step = self.steps.front().map_or(self.record.next.step, |(s, _)| *s);
    }

    /// Stores the front step as it is now (after a failed delivery).
    pub fn store_step(&self, seq: u64, change: &mut Change) {
        if let Some((_, step)) = self.steps.iter().find(|(s, _)| *s == seq) {
            change.batch.push(Op::PutStep { session: self.key().clone(), seq, record: Box::new(step.clone()) });
        }
    }

    /// Stores a call as it is now.
    pub fn put_call(&mut self, record: CallRecord, change: &mut Change) {
        change.batch.push(Op::PutCall { session: self.key().clone(), record: Box::new(record.clone()) });
        self.calls.insert(record.call.id.clone(), record);
    }

    /// Stores a call as it is now, when it was stored before (in `change`
    /// or an earlier commit) and its spec has not changed since: the store
    /// may keep the spec it holds (see [`Op::UpdateCall`]).
    pub fn update_call(&mut self, record: CallRecord, change: &mut Change) {
        change.batch.push(Op::UpdateCall { session: self.key().clone(), record: Box::new(record.clone()) });
        self.calls.insert(record.call.id.clone(), record);
    }

    /// Forgets a settled call.
    pub fn remove_call(&mut self, call_id: &str, change: &mut Change) -> Option<CallRecord> {
        let record = self.calls.remove(call_id)?;
        change.batch.push(Op::DeleteCall { session: self.key().clone(), call_id: call_id.to_owned() });
        Some(record)
    }

    /// Stamps the steps `change` pushed with the time they are requested,
    /// in memory and in the batch alike.
    pub fn stamp(&mut self, change: &mut Change, now_ms: u64) {
        for (_, step) in &mut self.steps {
            step.requested_ms.get_or_insert(now_ms);
        }
        for op in &mut change.batch.ops {
            if let Op::PutStep { record, .. } = op {
                record.requested_ms.get_or_insert(now_ms);
            }
        }
    }

    /// Ends the collection of a change: stamps it and stores the session
    /// record.
    pub fn seal(&mut self, change: &mut Change, now_ms: u64) {
        self.stamp(change, now_ms);
        self.refresh_status();
        self.record.updated_ms = now_ms;
        change.batch.push(Op::PutSession(Box::new(self.record.clone())));
    }

    // ---- requests ----------------------------------------------------------

    /// The trigger of a stored step, rebuilt in full.
    pub fn trigger(&self, stored: &StoredTrigger) -> Trigger {
        match stored {
            StoredTrigger::Plain { trigger } => trigger.clone(),
            StoredTrigger::ClientMessages { fork_id, new, client } => {
                let (messages, new_from) = self.client_view(fork_id.as_deref(), new);
                let new_from = u32::try_from(new_from).unwrap_or(u32::MAX);
                Trigger::ClientMessages(ClientMessages { messages, new_from, client: client.clone() })
            }
            StoredTrigger::LlmExecute { call_id, attempt } => {
                let call = self.calls.get(call_id);
                let request = call.and_then(|c| self.llm_request(c));
                let format = match call.map(|c| &c.spec) {
                    Some(CallSpec::Llm { format, .. }) => *format,
                    _ => None,
                };
                let (request, format) = match (request, format) {
                    (Some(request), Some(format)) => native_request(request, format),
                    (request, _) => (request.map(|r| subs_protocol::to_value(&r)).unwrap_or(Value::Null), None),
                };
                Trigger::LlmExecute(LlmExecute {
                    id: call_id.clone(),
                    request,
                    format,
                    stream: call.and_then(|c| c.call.stream).unwrap_or(false),
                    attempt: *attempt,
                    deadline: call.and_then(|c| c.call.deadline.clone()),
                })
            }
        }
    }

    /// A client's view: the path to `fork_id`, then `new`; and where `new`
    /// begins in it.
    ///
    /// A turn moves the head to its view's fork, and what is recorded
    /// after that extends the path from there, so the path to the fork is
    /// the first part of the branch a decision is handed. The view then
    /// shares those messages with that branch (the one
    /// [`request`](Self::request) hands out) rather than copying them: the
    /// fork is looked for from the head back, a step per message recorded
    /// since it. A fork off the branch (which the engine's own steps never
    /// make) gets a view of its own.
    fn client_view(&self, fork_id: Option<&str>, new: &[DraftMessage]) -> (ClientView, usize) {
        let Some(fork_id) = fork_id else { return (ClientView::new(new.to_vec()), 0) };
        let (path, tree) = self.tree.shared_branch(self.record.head_id.as_deref());
        match path.iter().rposition(|m| m.id == fork_id) {
            Some(at) => (ClientView::sharing(Messages::shared(path, tree), at + 1, new.to_vec()), at + 1),
            None => {
                let mut messages: Vec<DraftMessage> =
                    self.tree.path(Some(fork_id)).into_iter().map(|m| m.clone().into()).collect();
                let new_from = messages.len();
                messages.extend(new.iter().cloned());
                (ClientView::new(messages), new_from)
            }
        }
    }

    /// Reads a worker's answer to `llm.execute` for call `id`: an
    /// `LlmResponse`, or, when the call carried a provider format, that
    /// provider's own response body, whose id of the reply is kept beside
    /// it. The error says why neither reads.
    pub fn read_llm_response(&self, id: &str, response: &Value) -> Result<crate::model::Completion, String> {
        let format = match self.calls.get(id).map(|c| &c.spec) {
            Some(CallSpec::Llm { format, .. }) => *format,
            _ => None,
        };
        // The native reading goes first: a provider's response, having
        // only optional fields in common with an `LlmResponse`, could
        // otherwise read as an empty one.
        let native = format.map(|f| (f, crate::model::completion_from_native(f, response)));
        if let Some((_, Ok(read))) = native {
            return Ok(read);
        }
        match (subs_protocol::from_value::<subs_protocol::LlmResponse>(response.clone()), native) {
            (Ok(read), _) => Ok(read.into()),
            (Err(e), None) => Err(format!("is not an LlmResponse: {}", e.in_field("response"))),
            (Err(e), Some((format, Err(native)))) => Err(format!(
                "is neither an {} response ({}) nor an LlmResponse ({})",
                format_name(format),
                native.message,
                e.in_field("response")
            )),
            (Err(_), Some((_, Ok(_)))) => unreachable!("returned above"),
        }
    }

    /// The LLM request of an `llm_call`: its resolved action, the system
    /// prompt and the path to its anchor (or the action's explicit
    /// messages).
    pub fn llm_request(&self, call: &CallRecord) -> Option<LlmRequest> {
        let CallSpec::Llm { action, system, .. } = &call.spec else { return None };
        let messages = match &action.messages {
            Some(explicit) => explicit.clone().into(),
            None => {
                let system: Vec<DraftMessage> = system.iter().map(|s| DraftMessage::system(s.clone())).collect();
                let anchor = call.call.anchor.as_deref();
                if anchor == self.record.head_id.as_deref() {
                    // The branch decisions are handed, shared: the call
                    // copies none of its messages.
                    LlmMessages::shared(system, self.tree.shared_branch(anchor).0)
                } else {
                    let path = self.tree.path(anchor).into_iter().map(|m| m.clone().into());
                    system.into_iter().chain(path).collect()
                }
            }
        };
        Some(LlmRequest {
            model: action.model.clone().unwrap_or_default(),
            messages,
            tools: action.tools.clone().filter(|t| !t.is_empty()),
            temperature: action.temperature,
            max_completion_tokens: action.max_completion_tokens,
            reasoning: action.reasoning.clone(),
        })
    }

    /// The decision request for the front step.
    pub fn request(
        &self,
        step: &StepRecord,
        trigger: Trigger,
        proposed: subs_protocol::DecisionResponse,
        deadline_ms: u64,
    ) -> DecisionRequest {
        // The same branch a `client.messages` trigger's view shares.
        let (path, tree) = self.tree.shared_branch(self.record.head_id.as_deref());
        DecisionRequest {
            session_id: self.record.key.session.clone(),
            decision_id: step.decision_id.clone(),
            agent_id: self.record.agent_id.clone(),
            identity: self.record.identity.clone(),
            trigger,
            proposed,
            state: self.record.state.clone(),
            agent: self.record.agent.clone(),
            calls: self.calls_in_order().into_iter().map(|c| c.call.clone()).collect(),
            pending_calls: u32::try_from(self.pending_calls()).unwrap_or(u32::MAX),
            messages: Messages::shared(path, tree),
            ancestry: self.record.ancestry.clone(),
            attempts: step.attempts + step.interrupted + 1,
            deadline: Some(clock::rfc3339(deadline_ms)),
            turn_id: step.turn_id.clone(),
        }
    }
}

impl Session {
    /// What of `request` (built from this session as it is) the step it
    /// is for keeps, should the delivery decide: the state and config only
    /// where they differ from those of the last basis stored
    /// ([`based_on`](Self::based_on)). The config is the session's own,
    /// shared: the request holds a copy of it.
    pub fn basis(&self, request: &DecisionRequest) -> RequestBasis {
        let agent = &self.record.agent;
        let (state, agent) = match self.based_on.as_deref() {
            Some((state, based)) => (
                (*state != request.state).then(|| request.state.clone()),
                (!same_config(based, agent)).then(|| agent.clone()),
            ),
            None => (Some(request.state.clone()), Some(agent.clone())),
        };
        RequestBasis {
            head_id: self.record.head_id.clone(),
            messages: self.record.next.message,
            state,
            agent,
            calls: request.calls.clone(),
            pending_calls: request.pending_calls,
            proposed: request.proposed.clone(),
            trigger: matches!(request.trigger, Trigger::LlmExecute(_)).then(|| request.trigger.clone()),
            attempts: request.attempts,
            deadline: request.deadline.clone(),
        }
    }

    /// Notes that `basis` goes to the store with its step.
    pub fn based(&mut self, basis: &RequestBasis) {
        match (self.based_on.as_deref_mut(), &basis.state, &basis.agent) {
            (_, Some(state), Some(agent)) => self.based_on = Some(Box::new((state.clone(), agent.clone()))),
            (Some((kept_state, kept_agent)), state, agent) => {
                if let Some(state) = state {
                    kept_state.clone_from(state);
                }
                if let Some(agent) = agent {
                    kept_agent.clone_from(agent);
                }
            }
            // Unreachable while bases come from `basis`, which carries both
            // until one is stored; were it not, the next carries both.
            (None, _, _) => {}
        }
    }

    /// The open turn's calls in the order they were created.
    pub fn calls_in_order(&self) -> Vec<&CallRecord> {
        let mut calls: Vec<&CallRecord> = self.calls.values().collect();
        calls.sort_by_key(|c| c.order);
        calls
    }

    /// A new call, pending on its first try (or `queued`, when `held`),
    /// anchored at the head of the active path and belonging to the open
    /// turn.
    pub fn new_call(
        &mut self,
        id: String,
        kind: CallKind,
        handler: Option<Handler>,
        retry: Option<RetryPolicy>,
        spec: CallSpec,
        held: bool,
    ) -> CallRecord {
        let order = self.record.next.call;
        self.record.next.call += 1;
        CallRecord {
            order,
            deadline_ms: None,
            call: Call {
                id,
                kind,
                status: if held { CallStatus::Queued } else { CallStatus::Pending },
                attempt: 1,
                deadline: None,
                anchor: self.record.head_id.clone(),
                name: None,
                arguments: None,
                handler,
                stream: None,
                agent_id: None,
                session_id: None,
            },
            turn_id: self.record.turn.as_ref().map(|t| t.turn_id.clone()),
            retry,
            retry_at_ms: None,
            spec,
            started_ms: None,
            span: None,
        }
    }
}

/// Whether a call is settled (`completed` or `failed`): kept in the open
/// turn's `calls` for workers to see, but no longer in flight.
pub(crate) fn is_settled(call: &CallRecord) -> bool {
    matches!(call.call.status, CallStatus::Completed | CallStatus::Failed)
}

/// Adds the numbers of `add` into `total`, field by field.
fn add_usage(total: &mut Value, add: &Value) {
    match (total, add) {
        (Value::Object(total), Value::Object(add)) => {
            for (key, value) in add {
                match total.get_mut(key) {
                    Some(existing) => add_usage(existing, value),
                    None => {
                        total.insert(key.clone(), value.clone());
                    }
                }
            }
        }
        (total @ Value::Number(_), Value::Number(add)) => {
            let sum = match (total.as_u64(), add.as_u64()) {
                (Some(a), Some(b)) => Value::from(a.saturating_add(b)),
                _ => serde_json::Number::from_f64(total.as_f64().unwrap_or(0.0) + add.as_f64().unwrap_or(0.0))
                    .map_or(Value::Null, Value::Number),
            };
            *total = sum;
        }
        // Text and other values are not summed: the latest wins.
        (total, add) => *total = add.clone(),
    }
}

/// The provider's name for a wire format, for messages.
fn format_name(format: subs_protocol::LlmFormat) -> &'static str {
    match format {
        subs_protocol::LlmFormat::Openai => "OpenAI Chat Completions",
        subs_protocol::LlmFormat::Anthropic => "Anthropic Messages",
    }
}

/// An `llm.execute` request in the provider's own format, with the model
/// named as that provider knows it (without the `provider/` prefix). A
/// request the format cannot carry (audio for Anthropic, say) goes as the
/// `LlmRequest` with no `format`, so the worker can tell.
fn native_request(
    mut request: LlmRequest,
    format: subs_protocol::LlmFormat,
) -> (Value, Option<subs_protocol::LlmFormat>) {
    let as_given = subs_protocol::to_value(&request);
    if let Some((_, model)) = request.model.split_once('/') {
        request.model = model.to_owned();
    }
    match crate::model::to_native(format, &request) {
        Ok(native) => (native, Some(format)),
        Err(e) => {
            tracing::warn!(error = %e, "the LLM request cannot be expressed in the provider format; sending it as an LlmRequest");
            (as_given, None)
        }
    }
}

/// Whether two shared configs are equal: at once when they are the same
/// allocation, which they are while the session's config is unchanged.
fn same_config(a: &Option<Arc<AgentConfig>>, b: &Option<Arc<AgentConfig>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        (a, b) => a.is_none() && b.is_none(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{add_usage, same_config};

    #[test]
    fn configs_are_the_same_by_value_not_only_by_allocation() {
        use std::sync::Arc;

        use subs_protocol::AgentConfig;
        let shared = Some(Arc::new(AgentConfig::new("subs/offline")));
        let copy = Some(Arc::new(AgentConfig::new("subs/offline")));
        let other = Some(Arc::new(AgentConfig::new("subs/other")));
        assert!(same_config(&shared, &shared.clone()));
        assert!(same_config(&shared, &copy));
        assert!(!same_config(&shared, &other));
        assert!(!same_config(&shared, &None));
        assert!(!same_config(&None, &shared));
        assert!(same_config(&None, &None));
    }

    #[test]
    fn usage_adds_up_field_by_field() {
        let mut total = json!({});
        add_usage(&mut total, &json!({"prompt_tokens": 10, "details": {"cached": 2}}));
        add_usage(&mut total, &json!({"prompt_tokens": 5, "completion_tokens": 3, "details": {"cached": 1}}));
        assert_eq!(total, json!({"prompt_tokens": 15, "details": {"cached": 3}, "completion_tokens": 3}));
    }
}
