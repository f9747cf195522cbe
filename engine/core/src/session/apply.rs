//! Applying what happens to a session: decisions, client inputs, settled
//! calls, inbox items, turn starts and ends. Each function mutates the
//! session and collects the same writes into a [`Change`].

use serde_json::{Value, json};
use subs_protocol::action::LlmCall;
use subs_protocol::event::{
    ClientToolCall, InterruptAnswered, InterruptRaised, Resumer, StateChanged, TurnDone, TurnFailed, TurnStarted,
};
use subs_protocol::trigger::{
    ClientAction as ActionTrigger, InterruptResumed, LlmFinished, SubAgentFinished, ToolExecute, ToolFinished,
};
use subs_protocol::{
    Action, CallKind, CallStatus, ClientContext, ClientInput, DecisionResponse, DraftMessage, ErrorCode, Handler,
    LlmHandler, RetryPolicy, Role, SessionEvent, ToolHandler, Trigger,
};

use super::proposal::last_assistant_text;
use super::validate::Answering;
use super::{Change, Session};
use crate::clock;
use crate::model::{Money, TokenUsage};
use crate::retry::RetryCap;
use crate::store::{
    CallRecord, CallSpec, ID_RULE, InboxItem, Op, OpenInterrupt, ParentLink, QueuedInput, SessionKey, SessionRecord,
    SessionStatus, SpanRef, SpawnTry, StepRecord, StepStatus, Store, StoredTrigger, TurnRecord, TurnStart, TurnState,
    TurnStatus, valid_id,
};
use crate::tenants::{NewSession, Reservation, SessionQuota};
use crate::tools;

/// What the loop needs from the engine while applying.
pub(crate) struct Ctx<'a> {
    /// The store, for checks that look at other sessions.
    pub store: &'a dyn Store,
    /// The model of `llm.call`s that name none, with no config model.
    pub default_model: &'a str,
    /// The retry policy of LLM calls when neither call nor config sets one.
    pub default_retry: &'a RetryPolicy,
    /// The most any retry policy may ask for.
    pub retry_cap: &'a RetryCap,
    /// Whether LLM calls stream when neither call nor config says.
    pub default_stream: bool,
    /// Now (Unix ms).
    pub now_ms: u64,
    /// How long a try of a call may take when no retry policy sets
    /// `timeout_secs` (ms).
    pub call_timeout_ms: u64,
    /// The tenants' session limits.
    pub quota: &'a (dyn SessionQuota + Sync),
    /// The tenants' bounds on what a session's messages may take.
    pub history: &'a super::history::HistoryLimits,
    /// What LLM calls cost: prices replies that come without a cost.
    pub prices: &'a crate::model::PriceTable,
    /// The providers of engine-run LLM calls, for what their spans say of
    /// them (`gen_ai.provider.name`, `server.address`); `None`: nothing.
    pub providers: Option<&'a crate::model::Models>,
    /// The engine's metrics.
    pub metrics: &'a crate::metrics::Metrics,
    /// Where spans go, and whether turns are traced.
    pub tracer: &'a crate::telemetry::Tracer,
    /// The span the input being taken came with (its `traceparent`).
    pub incoming: Option<SpanRef>,
    /// The span of the decision being applied: the parent of the calls it
    /// starts.
    pub decision: Option<SpanRef>,
    /// Who sends the input being taken, as an `interrupt.resumed` event
    /// records it.
    pub resumer: Resumer,
}

/// How a call ended (or failed a try).
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// A tool's result.
    ToolOk(Value),
    /// An LLM reply, with the provider's id of it when the provider's
    /// answer gave one (for the call's span).
    LlmOk(crate::model::Completion),
    /// A child session's turn ended.
    SubAgent {
        /// Whether it succeeded.
        ok: bool,
        /// Its result.
        result: Option<String>,
        /// Its error.
        error: Option<String>,
    },
    /// A failed try of a tool or LLM call.
    Failed {
        /// What went wrong.
        error: String,
        /// Whether another try may succeed.
        retryable: bool,
        /// The error's kind.
        code: Option<ErrorCode>,
        /// More about it.
        detail: Option<Value>,
        /// Do not retry sooner than this (ms), e.g. from `retry-after`.
        retry_after_ms: Option<u64>,
    },
}

/// Why an input was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The input is malformed or names something invalid; `field` says
    /// where.
    #[error("{message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// The offending field, when there is one.
        field: Option<String>,
    },
    /// The session does not exist.
    #[error("session `{0}` does not exist")]
    NoSession(String),
    /// The input conflicts with the session's state (nothing waits with
    /// that id, a session of another agent, …).
    #[error("{0}")]
    Conflict(String),
    /// The engine could not store the input; nothing of it was kept.
    #[error("the input could not be stored: {0}")]
    Store(String),
    /// The input may have been stored, or was stored and not yet acted
    /// on, but the engine cannot say it was accepted: the store failed
    /// mid-commit, or the node acting for the session did not answer in
    /// time. The message says which, and how to find out.
    #[error("{0}")]
    Unavailable(String),
    /// The input would create a session beyond the tenant's limit.
    #[error("{0}")]
    LimitExceeded(String),
    /// The engine is shutting down.
    #[error("the engine is shutting down")]
    ShuttingDown,
}

impl InputError {
    fn invalid(message: impl Into<String>, field: &str) -> Self {
        InputError::Invalid { message: message.into(), field: Some(field.to_owned()) }
    }
}

/// Why a sub-agent's child was not created, and whether to tell the
/// operator (once a turn for the per-turn bound, which an agent in a loop
/// meets again and again).
struct Refused {
    error: String,
    log: bool,
}

/// Who sends an input, as far as the session's owner goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    /// The tenant: a new session gets `identity` (or none); an existing
    /// session whose owner is not `identity` refuses the input as a
    /// conflict; `None` reaches any session.
    Tenant {
        /// The prefix of the API key it sent with, which names the key in
        /// `interrupt.resumed` events; `None` for a process embedding the
        /// engine or a server without keys.
        key: Option<String>,
        /// The identity the input names, if any.
        identity: Option<subs_protocol::WorkerIdentity>,
    },
    /// An end user: a new session is theirs; a session owned by another
    /// id does not exist for them.
    Owner(subs_protocol::WorkerIdentity),
}

impl Sender {
    /// The owner a session this input creates gets.
    pub fn identity(&self) -> subs_protocol::WorkerIdentity {
        match self {
            Sender::Tenant { identity, .. } => identity.clone().unwrap_or_default(),
            Sender::Owner(identity) => identity.clone(),
        }
    }

    /// Why the sender may not send to a session owned by `owner`, if it
    /// may not.
    pub fn refuse(&self, session: &str, owner: &subs_protocol::WorkerIdentity) -> Option<InputError> {
        match self {
            Sender::Tenant { identity: Some(identity), .. } if identity != owner => Some(InputError::Conflict(
                format!("session `{session}` belongs to another identity; a session's identity never changes"),
            )),
            // An end user is known by the id alone.
            Sender::Owner(identity) if identity.id != owner.id => Some(InputError::NoSession(session.to_owned())),
            _ => None,
        }
    }
}

/// What accepting an input produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    /// The turn the input started, joined or queued; `None` for settling
    /// inputs.
    pub turn_id: Option<String>,
    /// Whether the turn already existed (a repeated `turn_id`): nothing
    /// new was done.
    pub existing: bool,
}

impl Session {
    /// A fresh session record for `agent_id`.
    pub fn fresh(key: SessionKey, agent_id: String, identity: subs_protocol::WorkerIdentity, now_ms: u64) -> Self {
        Session::new(SessionRecord {
            key,
            agent_id,
            identity,
            status: SessionStatus::Idle,
            state: Value::Null,
            agent: None,
            head_id: None,
            ancestry: Vec::new(),
            parent: None,
            next: crate::store::Counters::default(),
            first_open_step: 0,
            turn: None,
            queued: Vec::new(),
            interrupts: Vec::new(),
            usage: Value::Object(serde_json::Map::new()),
            cost: None,
            budget: None,
            tree_cost: None,
            reported_cost: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            versions: Default::default(),
            agent_version: None,
            message_bytes: 0,
        })
    }

    // ---- inputs ------------------------------------------------------------

    /// Accepts a client input.
    pub async fn accept_input(
        &mut self,
        input: ClientInput,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) -> Result<Accepted, InputError> {
        match input {
            ClientInput::ClientMessage(_) | ClientInput::ClientMessages(_) | ClientInput::ClientAction(_) => {
                self.accept_turn_input(input, ctx, change).await
            }
            ClientInput::InterruptResume(resume) => {
                let Some(i) = self.record.interrupts.iter().position(|i| i.interrupt_id == resume.interrupt_id) else {
                    return Err(InputError::Conflict(format!(
                        "no interrupt `{}` is waiting: it was resumed already, its turn ended, or it never existed",
                        resume.interrupt_id
                    )));
                };
                // Checked before anything changes: a refused payload leaves
                // the interrupt open for a corrected one.
                if let Some(schema) = &self.record.interrupts[i].resume_schema {
                    let payload = resume.payload.clone().unwrap_or(Value::Null);
                    if let Err((field, message)) = crate::tools::check_resume_payload(schema, &payload) {
                        return Err(InputError::Invalid { message, field: Some(field) });
                    }
                }
                self.record.interrupts.remove(i);
                let answered = InterruptAnswered {
                    interrupt_id: resume.interrupt_id.clone(),
                    payload: resume.payload.clone(),
                    resumed_by: ctx.resumer.clone(),
                };
                self.emit(SessionEvent::InterruptResumed(answered), change);
                self.push_step(
                    StoredTrigger::Plain {
                        trigger: Trigger::InterruptResumed(InterruptResumed {
                            interrupt_id: resume.interrupt_id,
                            payload: resume.payload,
                        }),
                    },
                    change,
                );
                if !self.paused() {
                    self.release_queued(ctx, change);
                }
                Ok(Accepted { turn_id: self.record.turn.as_ref().map(|t| t.turn_id.clone()), existing: false })
            }
            ClientInput::ToolResult(r) => {
                self.check_client_settle(&r.id, r.attempt)?;
                self.settle(&r.id, Outcome::ToolOk(r.result.unwrap_or(Value::Null)), ctx, change);
                Ok(Accepted { turn_id: None, existing: false })
            }
            ClientInput::ToolError(e) => {
                self.check_client_settle(&e.id, e.attempt)?;
                let outcome = Outcome::Failed {
                    error: e.error,
                    retryable: e.retryable,
                    code: None,
                    detail: None,
                    retry_after_ms: None,
                };
                self.settle(&e.id, outcome, ctx, change);
                Ok(Accepted { turn_id: None, existing: false })
            }
        }
    }

    /// A client settles only client tool calls that wait for it: a call
    /// the agent's worker runs is the worker's to settle.
    fn check_client_settle(&self, id: &str, attempt: Option<u32>) -> Result<(), InputError> {
        let call = self
            .open_call(id)
            .filter(|c| c.call.kind == CallKind::ToolCall && c.call.status == CallStatus::Pending)
            .ok_or_else(|| InputError::Conflict(format!("no tool call `{id}` is waiting for a result")))?;
        if call.call.handler != Some(Handler::Client) {
            return Err(InputError::Conflict(format!(
                "tool call `{id}` is run by the agent's worker; a client settles only client tool calls"
            )));
        }
        match attempt {
            Some(a) if a != call.call.attempt => {
                Err(InputError::Conflict(format!("tool call `{id}` is on attempt {}, not {a}", call.call.attempt)))
            }
            _ => Ok(()),
        }
    }

    async fn accept_turn_input(
        &mut self,
        input: ClientInput,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) -> Result<Accepted, InputError> {
        let (agent_id, turn_id) = match &input {
            ClientInput::ClientMessage(m) => (&m.agent_id, &m.turn_id),
            ClientInput::ClientMessages(m) => (&m.agent_id, &m.turn_id),
            ClientInput::ClientAction(a) => (&a.agent_id, &a.turn_id),
            _ => unreachable!("only turn-starting inputs reach here"),
        };
        if *agent_id != self.record.agent_id {
            return Err(InputError::Conflict(format!(
                "session `{}` runs agent `{}`, not `{agent_id}`",
                self.record.key.session, self.record.agent_id
            )));
        }
        let turn_id = match turn_id {
            Some(id) if !valid_id(id) => {
                return Err(InputError::invalid(format!("turn_id `{id}` is not a valid id ({ID_RULE})"), "turn_id"));
            }
            Some(id) => {
                let exists = match self.turns.has(id) {
                    Some(known) => known,
                    None => {
                        ctx.store.turn(self.key(), id).await.map_err(|e| InputError::Store(e.to_string()))?.is_some()
                    }
                };
                if exists {
                    return Ok(Accepted { turn_id: Some(id.clone()), existing: true });
                }
                id.clone()
            }
            None => self.mint("turn"),
        };
        self.record.next.turn += 1;
        self.turns.add(&turn_id);
        if self.record.turn.is_some() {
            // One turn at a time: this one starts when the open one ends.
            self.record.queued.push(QueuedInput {
                turn_id: turn_id.clone(),
                input,
                trace: ctx.incoming.clone(),
                spawn: None,
            });
            let record = TurnRecord { status: TurnStatus::Queued, data: None, started_ms: ctx.now_ms, ended_ms: None };
            change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id: turn_id.clone(), record });
            return Ok(Accepted { turn_id: Some(turn_id), existing: false });
        }
        let start = self.reconcile_input(input)?;
        self.start_turn(turn_id.clone(), start, ctx.incoming.as_ref(), ctx, change)?;
        Ok(Accepted { turn_id: Some(turn_id), existing: false })
    }

    /// The client's view a `client.message` stands for: the active path,
    /// then `message`.
    fn view_with(&self, message: &DraftMessage) -> Vec<DraftMessage> {
        let mut view: Vec<DraftMessage> = self.path().into_iter().map(|m| m.clone().into()).collect();
        view.push(message.clone());
        view
    }

    /// The messages of a client's view that the tree has (matched by id)
    /// are what it recorded under those ids: an edited message re-sent
    /// under its old id is refused, naming the id, rather than taken for
    /// the recorded one (see [`Message::sent_unchanged`]).
    ///
    /// [`Message::sent_unchanged`]: subs_protocol::Message::sent_unchanged
    fn check_unchanged(&self, shared: &[DraftMessage]) -> Result<(), InputError> {
        for sent in shared {
            let Some(id) = sent.id.as_deref() else { continue };
            if let Some(record) = self.tree.get(id)
                && !record.message.sent_unchanged(sent)
            {
                return Err(InputError::Conflict(format!(
                    "message `{id}` is stored with other content; send it under a new id to fork"
                )));
            }
        }
        Ok(())
    }

    /// What a turn-starting input starts, against the tree as it is now.
    fn reconcile_input(&self, input: ClientInput) -> Result<TurnStart, InputError> {
        let head = self.record.head_id.as_deref();
        let (reconciled, new, client) = match input {
            ClientInput::ClientMessage(m) => match self.tree.reconcile_appended(head, &m.message) {
                Some((reconciled, is_new)) => {
                    debug_assert_eq!(reconciled, self.tree.reconcile(&self.view_with(&m.message)));
                    if !is_new {
                        self.check_unchanged(std::slice::from_ref(&m.message))?;
                    }
                    let new = if is_new { vec![m.message] } else { Vec::new() };
                    (reconciled, new, ClientContext::default())
                }
                None => {
                    let mut view = self.view_with(&m.message);
                    let reconciled = self.tree.reconcile(&view);
                    self.check_unchanged(&view[..reconciled.new_from])?;
                    let new = view.split_off(reconciled.new_from);
                    (reconciled, new, ClientContext::default())
                }
            },
            ClientInput::ClientMessages(m) => {
                let mut view = m.messages;
                let reconciled = self.tree.reconcile(&view);
                self.check_unchanged(&view[..reconciled.new_from])?;
                let new = view.split_off(reconciled.new_from);
                (reconciled, new, m.client.unwrap_or_default())
            }
            ClientInput::ClientAction(a) => return Ok(TurnStart::Action { name: a.name, args: a.args }),
            _ => unreachable!("only turn-starting inputs are reconciled"),
        };
        let mut seen = std::collections::HashSet::new();
        for (i, message) in new.iter().enumerate() {
            if let Some(id) = &message.id {
                let field = format!("messages[{}].id", reconciled.new_from + i);
                if !valid_id(id) {
                    return Err(InputError::invalid(
                        format!("message id `{id}` is not a valid id ({ID_RULE})"),
                        &field,
                    ));
                }
                if self.tree.contains(id) || !seen.insert(id) {
                    return Err(InputError::Invalid {
                        message: format!(
                            "message `{id}` is already recorded elsewhere in the conversation; a new or edited message needs a new id"
                        ),
                        field: Some(field),
                    });
                }
            }
        }
        for (i, tool) in client.tools.iter().flatten().enumerate() {
            for (name, schema) in [("input", &tool.input), ("output", &tool.output)] {
                if let Some(schema) = schema {
                    tools::check_tool_schema(schema).map_err(|e| {
                        InputError::invalid(
                            format!("not a usable JSON Schema: {e}"),
                            &format!("client.tools[{i}].{name}"),
                        )
                    })?;
                }
            }
        }
        Ok(TurnStart::Messages { fork_id: reconciled.fork_id, new, client })
    }

    /// Opens a turn.
    pub fn start_turn(
        &mut self,
        turn_id: String,
        start: TurnStart,
        incoming: Option<&SpanRef>,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) -> Result<(), InputError> {
        let client_tools = match &start {
            TurnStart::Messages { client, .. } => client
                .tools
                .iter()
                .flatten()
                .map(|t| {
                    let mut t = t.clone();
                    t.handler = Some(t.handler.unwrap_or(ToolHandler::Client));
                    t
                })
                .collect(),
            TurnStart::Action { .. } => Vec::new(),
        };
        self.record.turn = Some(TurnState {
            turn_id: turn_id.clone(),
            client_tools,
            started_ms: ctx.now_ms,
            span: ctx.tracer.turn(incoming),
            spawn: None,
        });
        let record = TurnRecord { status: TurnStatus::Running, data: None, started_ms: ctx.now_ms, ended_ms: None };
        change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id: turn_id.clone(), record });
        self.emit(SessionEvent::TurnStarted(TurnStarted { turn_id }), change);
        if self.record.next.step == 0 {
            self.push_step(StoredTrigger::Plain { trigger: Trigger::SessionStart }, change);
        }
        let trigger = match start {
            TurnStart::Messages { fork_id, new, client } => {
                self.record.head_id.clone_from(&fork_id);
                StoredTrigger::ClientMessages { fork_id, new, client }
            }
            TurnStart::Action { name, args } => {
                StoredTrigger::Plain { trigger: Trigger::ClientAction(ActionTrigger { name, args }) }
            }
        };
        self.push_step(trigger, change);
        Ok(())
    }

    /// Ends the open turn: `done` with `data`. Data with an `error` field
    /// reports the turn as failed. Whatever the turn still had in flight is
    /// dropped, the parent (for a sub-agent) is told, and the next queued
    /// input starts.
    pub fn end_turn(&mut self, data: Option<Value>, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(turn) = self.record.turn.take() else { return };
        let error = data.as_ref().and_then(|d| d.get("error")).map(|e| match e {
            Value::String(s) => s.clone(),
            other => subs_protocol::to_json(other),
        });
        let code = data.as_ref().and_then(|d| d.get("code")).and_then(Value::as_str).map(str::to_owned);
        self.drop_what_is_left(change);
        self.report_to_parent(&turn, data.as_ref(), error.clone(), change);
        self.record_turn_end(turn, data, error, code, ctx, change);
        self.start_queued(ctx, change);
    }

    /// Drops what is left of an ending turn: its calls (children of
    /// sub-agent calls are cancelled after the commit), its steps, its
    /// interrupts.
    fn drop_what_is_left(&mut self, change: &mut Change) {
        let leftover: Vec<String> = self.calls.keys().cloned().collect();
        for call_id in leftover {
            // A child exists for a sub-agent call that started and is not
            // settled; a queued one never had one.
            if let Some(call) = self.remove_call(&call_id, change)
                && !super::is_settled(&call)
                && call.call.status != CallStatus::Queued
                && let Some(child) = call.call.session_id
            {
                change.cancel.push(SessionKey::new(&self.record.key.tenant, child));
            }
        }
        while let Some((seq, step)) = self.steps.front().cloned() {
            self.finish_step(step, seq, StepStatus::Dropped, change);
        }
        self.record.interrupts.clear();
    }

    /// Stores the turn's end and emits `turn.done`, or `turn.failed` when
    /// `error` is set (with `code`, `agent_error` by default).
    fn record_turn_end(
        &mut self,
        turn: TurnState,
        data: Option<Value>,
        error: Option<String>,
        code: Option<String>,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        let status = if error.is_some() { TurnStatus::Failed } else { TurnStatus::Done };
        if let Some(at) = turn.span.clone() {
            use opentelemetry::KeyValue;
            let agent = self.record.agent_id.clone();
            change.spans.push(crate::telemetry::Span {
                at,
                name: format!("invoke_agent {agent}"),
                kind: opentelemetry::trace::SpanKind::Internal,
                start: crate::telemetry::at_ms(turn.started_ms),
                end: crate::telemetry::at_ms(ctx.now_ms),
                attributes: vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", agent),
                    KeyValue::new("gen_ai.conversation.id", self.record.key.session.clone()),
                    KeyValue::new("subs.tenant", self.record.key.tenant.clone()),
                    KeyValue::new("subs.turn.id", turn.turn_id.clone()),
                    KeyValue::new("subs.turn.status", if error.is_some() { "failed" } else { "done" }),
                ]
                .into_iter()
                .chain(error.is_some().then(|| {
                    // `error.type`: the turn's failure code.
                    KeyValue::new("error.type", code.clone().unwrap_or_else(|| "agent_error".to_owned()))
                }))
                .collect(),
                error: error.clone(),
            });
        }
        let record = TurnRecord { status, data: data.clone(), started_ms: turn.started_ms, ended_ms: Some(ctx.now_ms) };
        change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id: turn.turn_id.clone(), record });
        let ended = match error {
            Some(error) => SessionEvent::TurnFailed(TurnFailed {
                turn_id: turn.turn_id,
                error,
                code: code.unwrap_or_else(|| "agent_error".to_owned()),
            }),
            None => SessionEvent::TurnDone(TurnDone { turn_id: turn.turn_id, data }),
        };
        self.emit(ended, change);
    }

    /// A sub-agent session tells its parent how its turn ended: the `done`
    /// data (or its last assistant text) or the error, through the
    /// parent's inbox, in the same commit.
    /// Only a turn the parent's call started reports (see
    /// [`reports_to_parent`]).
    fn report_to_parent(&mut self, turn: &TurnState, data: Option<&Value>, error: Option<String>, change: &mut Change) {
        let Some(ParentLink { session: parent, call_id }) = self.record.parent.clone() else { return };
        if !reports_to_parent(turn) {
            return;
        }
        let result = match data {
            Some(d) if error.is_none() && !d.is_null() => Some(match d {
                Value::String(s) => s.clone(),
                other => subs_protocol::to_json(other),
            }),
            _ if error.is_none() => last_assistant_text(self),
            _ => None,
        };
        let parent = SessionKey::new(&self.record.key.tenant, parent);
        // What the tree spent since the last report, whatever this turn
        // is: the parent's budget counts it.
        let total = self.tree_spent();
        let reported = money(self.record.reported_cost.as_deref());
        let spent =
            (total > reported).then(|| Money::from_atto_dollars(total.atto_dollars() - reported.atto_dollars()));
        if spent.is_some() {
            self.record.reported_cost = Some(total.to_string());
        }
        let item = InboxItem::SubAgentFinished {
            call_id,
            ok: error.is_none(),
            result,
            error,
            spawn: turn.spawn.clone(),
            from: Some(self.record.key.session.clone()),
            spent: spent.map(|s| s.to_string()),
        };
        change.batch.push(Op::PushInbox { session: parent.clone(), item: Box::new(item) });
        change.wake.push(parent);
    }

    /// Starts the first input that waited for the turn to end; one that no
    /// longer fits the session fails as its own turn.
    fn start_queued(&mut self, ctx: &Ctx<'_>, change: &mut Change) {
        if self.record.queued.is_empty() {
            return;
        }
        let next = self.record.queued.remove(0);
        match self.reconcile_input(next.input) {
            Ok(start) => {
                // Starting cannot fail after reconciliation succeeded.
                let _ = self.start_turn(next.turn_id, start, next.trace.as_ref(), ctx, change);
                if let Some(turn) = &mut self.record.turn {
                    turn.spawn = next.spawn;
                }
            }
            Err(e) => {
                let record = TurnRecord {
                    status: TurnStatus::Failed,
                    data: Some(json!({"error": e.to_string(), "code": "invalid_input"})),
                    started_ms: ctx.now_ms,
                    ended_ms: Some(ctx.now_ms),
                };
                change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id: next.turn_id.clone(), record });
                let failed =
                    TurnFailed { turn_id: next.turn_id, error: e.to_string(), code: "invalid_input".to_owned() };
                self.emit(SessionEvent::TurnFailed(failed), change);
            }
        }
    }

    /// Ends the open turn as failed.
    pub fn fail_turn(&mut self, error: &str, code: &str, ctx: &Ctx<'_>, change: &mut Change) {
        self.end_turn(Some(json!({"error": error, "code": code})), ctx, change);
    }

    // ---- decisions ---------------------------------------------------------

    /// Applies an accepted decision for step `seq` (the front step).
    pub fn apply_decision(
        &mut self,
        seq: u64,
        mut step: StepRecord,
        decision: DecisionResponse,
        trigger: &Answering<'_>,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        self.steps.retain(|(s, _)| *s != seq);
        // The messages and state below are this version's doing.
        self.record.count_decision(step.agent_version.as_deref());
        if let Some(version) = &step.agent_version {
            // What `GET /v1/agents/{id}` reads, kept with the decision.
            change.batch.push(Op::CountDecisions {
                tenant: self.key().tenant.clone(),
                agent_id: self.record.agent_id.clone(),
                version: version.clone(),
                decisions: 1,
            });
        }
        self.deciding = step.agent_version.clone();
        if let Some(agent) = &decision.agent {
            let agent = super::proposal::without_client_tools(agent, &self.added_tools());
            // A config set again unchanged stays the one shared allocation.
            if self.record.agent.as_deref() != Some(&agent) {
                self.record.agent = Some(std::sync::Arc::new(agent));
            }
        }
        // Clients hear of the state only when it changed: a decision that
        // hands back the state it was given is the common case.
        if let Some(state) = decision.state.clone().filter(|s| !s.is_null() && *s != self.record.state) {
            self.record.state = state.clone();
            self.emit(SessionEvent::State(StateChanged { state }), change);
        }
        for message in decision.messages().iter().cloned() {
            let id = self.record_message(message, change);
            step.recorded.push(id);
        }
        // Calls made while an interrupt is open, or by the decision that
        // opens one (before or after its `interrupt` action), wait queued
        // for the branch to resume.
        let hold = self.paused() || decision.actions().iter().any(|a| matches!(a, Action::Interrupt(_)));
        // Calls are numbered as they are created: those from here on are
        // this decision's.
        let first_call = self.record.next.call;
        for action in decision.actions().iter().cloned() {
            self.apply_action(action, trigger, hold, ctx, change);
        }
        let mut started: Vec<(u64, String)> =
            self.calls.values().filter(|c| c.order >= first_call).map(|c| (c.order, c.call.id.clone())).collect();
        started.sort_unstable();
        step.started = started.into_iter().map(|(_, id)| id).collect();
        step.decided_ms = Some(ctx.now_ms);
        step.status = StepStatus::Applied;
        step.decision = Some(Box::new(decision));
        self.deciding = None;
        change.batch.push(Op::PutStep { session: self.key().clone(), seq, record: Box::new(step) });
        self.record.first_open_step = self.steps.front().map_or(self.record.next.step, |(s, _)| *s);
        if self.turn_is_exhausted() {
            self.end_turn(None, ctx, change);
        }
    }

    fn apply_action(
        &mut self,
        action: Action,
        trigger: &Answering<'_>,
        hold: bool,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        let execute_id = |kind| trigger.executes(kind).map(|(id, _)| id.to_owned());
        match action {
            Action::LlmCall(call) => self.start_llm_call(call, hold, ctx, change),
            Action::ToolCall(call) => self.start_tool_call(call, hold, ctx, change),
            Action::ToolResult(r) => {
                if let Some(id) = r.id.or_else(|| execute_id(CallKind::ToolCall)) {
                    self.settle(&id, Outcome::ToolOk(r.result), ctx, change);
                }
            }
            Action::ToolError(e) => {
                if let Some(id) = e.id.clone().or_else(|| execute_id(CallKind::ToolCall)) {
                    self.settle(&id, failed(e), ctx, change);
                }
            }
            Action::LlmError(e) => {
                if let Some(id) = e.id.clone().or_else(|| execute_id(CallKind::LlmCall)) {
                    self.settle(&id, failed(e), ctx, change);
                }
            }
            Action::LlmResult(r) => {
                if let Some(id) = r.id.or_else(|| execute_id(CallKind::LlmCall)) {
                    // Validation checked that the response reads.
                    if let Ok(response) = self.read_llm_response(&id, &r.response) {
                        self.settle(&id, Outcome::LlmOk(response), ctx, change);
                    }
                }
            }
            Action::SubAgentSpawn(spawn) => self.spawn_sub_agent(spawn, hold, ctx, change),
            Action::MessageSend(send) => {
                if send.session_id == self.record.key.session {
                    self.record_message(send.message, change);
                } else {
                    let target = SessionKey::new(&self.record.key.tenant, &send.session_id);
                    let item = InboxItem::Message { message: send.message, from: self.record.key.session.clone() };
                    change.batch.push(Op::PushInbox { session: target.clone(), item: Box::new(item) });
                    change.wake.push(target);
                }
            }
            Action::Interrupt(interrupt) => {
                let interrupt_id = interrupt.interrupt_id.unwrap_or_else(|| self.mint("int"));
                self.record.interrupts.push(OpenInterrupt {
                    interrupt_id: interrupt_id.clone(),
                    reason: interrupt.reason.clone(),
                    payload: interrupt.payload.clone(),
                    resume_schema: interrupt.resume_schema.clone(),
                });
                let raised = InterruptRaised {
                    interrupt_id,
                    reason: interrupt.reason,
                    payload: interrupt.payload,
                    resume_schema: interrupt.resume_schema,
                };
                self.emit(SessionEvent::Interrupt(raised), change);
            }
            Action::Done(done) => self.end_turn(done.data, ctx, change),
        }
    }

    fn start_llm_call(&mut self, call: LlmCall, hold: bool, ctx: &Ctx<'_>, change: &mut Change) {
        let config = self.record.agent.clone();
        let id = call.id.clone().unwrap_or_else(|| self.mint("llm"));
        let handler = call.handler.or(config.as_ref().and_then(|c| c.handler)).unwrap_or(LlmHandler::Server);
        // The call's own `stream`, else the agent's, else its tenant's
        // `stream_by_default`, else the engine's.
        let stream = call.stream.or(config.as_ref().and_then(|c| c.stream)).unwrap_or_else(|| {
            ctx.quota.decision_bounds(&self.record.key.tenant).stream_by_default.unwrap_or(ctx.default_stream)
        });
        let retry = call
            .retry
            .clone()
            .or_else(|| config.as_ref().and_then(|c| c.retry.clone()))
            .unwrap_or_else(|| ctx.default_retry.clone());
        let model = call
            .model
            .clone()
            .or_else(|| config.as_ref().map(|c| c.model.clone()))
            .unwrap_or_else(|| ctx.default_model.to_owned());
        let system = if call.messages.is_none() { config.as_ref().and_then(|c| c.system.clone()) } else { None };
        let tools = call.tools.clone().unwrap_or_else(|| self.llm_tools());
        let resolved = LlmCall {
            id: Some(id.clone()),
            model: Some(model),
            tools: Some(tools),
            stream: Some(stream),
            retry: Some(retry.clone()),
            handler: Some(handler),
            ..call
        };
        let mut record = self.new_call(
            id,
            CallKind::LlmCall,
            Some(handler.into()),
            Some(retry),
            CallSpec::Llm { action: resolved.into(), system, format: config.as_ref().and_then(|c| c.format) },
            hold,
        );
        record.call.stream = Some(stream);
        self.add_call(record, hold, ctx, change);
    }

    fn start_tool_call(
        &mut self,
        call: subs_protocol::action::ToolCall,
        hold: bool,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        let id = call.id.clone().unwrap_or_else(|| self.mint("call"));
        // A string is the model's raw argument text; anything else is the
        // arguments themselves.
        let raw = match &call.arguments {
            Value::String(text) => text.clone(),
            other => subs_protocol::to_json(other),
        };
        let tool = self.tool(&call.name).cloned();
        let input = tools::check_arguments(tool.as_ref(), &raw);
        let handler = call.handler.or(tool.as_ref().and_then(|t| t.handler)).unwrap_or(ToolHandler::Worker);
        // A tool of the agent's sources (its MCP servers) is run by the
        // engine, unless the call names who runs it.
        let from_source = call.handler.is_none() && self.is_source_tool(&call.name);
        let handler = if from_source { Handler::Server } else { handler.into() };
        let mut record = self.new_call(
            id,
            CallKind::ToolCall,
            Some(handler),
            call.retry.clone(),
            CallSpec::Tool {
                arguments: raw.clone(),
                input: input.clone(),
                output: tool.and_then(|t| t.output).map(|s| s.shared().clone()),
            },
            hold,
        );
        record.call.name = Some(call.name.clone());
        record.call.arguments = Some(raw.clone());
        self.add_call(record, hold, ctx, change);
    }

    /// Adds a new call to the turn: held (`queued`) as it is, else started.
    fn add_call(&mut self, record: CallRecord, hold: bool, ctx: &Ctx<'_>, change: &mut Change) {
        if hold {
            self.put_call(record, change);
        } else {
            // `begin_try` stores it, with its deadline.
            let id = record.call.id.clone();
            self.calls.insert(id.clone(), record);
            self.begin_try(&id, ctx, change);
        }
    }

    /// Starts a try of a pending call: sets its deadline, then hands it
    /// to whoever runs it (an `llm.execute` or `tool.execute` step, a
    /// `tool.call` event, a child session's turn; the actor starts
    /// engine-run LLM calls).
    pub fn begin_try(&mut self, call_id: &str, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(record) = self.calls.get(call_id) else { return };
        let timeout_ms = self.call_timeout_ms(record, ctx);
        // A try's span is a child of what started the call: the decision
        // for a first try (a retry keeps its first try's parent), else the
        // turn.
        let turn = self.record.turn.as_ref().and_then(|t| t.span.as_ref());
        let parent = match (&record.span, &ctx.decision, turn) {
            (Some(SpanRef { parent_id: Some(parent), trace_id, .. }), ..) => {
                Some(SpanRef { trace_id: trace_id.clone(), span_id: parent.clone(), parent_id: None })
            }
            (_, Some(decision), _) if turn.is_some() => Some(decision.clone()),
            (_, _, turn) => turn.cloned(),
        };
        // Changed where it is kept: the write is the one copy made.
        let Some(record) = self.calls.get_mut(call_id) else { return };
        record.deadline_ms = timeout_ms.map(|t| ctx.now_ms.saturating_add(t));
        record.call.deadline = record.deadline_ms.map(clock::rfc3339);
        record.started_ms = Some(ctx.now_ms);
        record.span = parent.as_ref().map(crate::telemetry::child_of);
        let (kind, handler, attempt) = (record.call.kind, record.call.handler, record.call.attempt);
        change.batch.push(Op::PutCall { session: self.record.key.clone(), record: Box::new(record.clone()) });
        match kind {
            CallKind::LlmCall if handler == Some(Handler::Worker) => {
                self.push_step(StoredTrigger::LlmExecute { call_id: call_id.to_owned(), attempt }, change);
            }
            CallKind::LlmCall => {}
            CallKind::ToolCall => self.dispatch_tool(call_id, change),
            CallKind::SubAgent => self.start_child(call_id, ctx, change),
        }
    }

    /// How long a try of `call` may take (ms): its own retry policy's
    /// `timeout_secs`, else the agent's, else the engine's default; a
    /// client tool call and a sub-agent call only by their own policy.
    fn call_timeout_ms(&self, call: &CallRecord, ctx: &Ctx<'_>) -> Option<u64> {
        let own = match &call.spec {
            CallSpec::Llm { action, .. } => action.retry.as_ref(),
            _ => call.retry.as_ref(),
        };
        let own = own.map(|p| ctx.retry_cap.apply(p)).and_then(|p| p.timeout_secs);
        if call.call.kind == CallKind::SubAgent || call.call.handler == Some(Handler::Client) {
            return own.map(clock::secs_to_ms);
        }
        let agent = self.agent_retry().map(|p| ctx.retry_cap.apply(p)).and_then(|p| p.timeout_secs);
        Some(own.or(agent).map_or(ctx.call_timeout_ms, clock::secs_to_ms))
    }

    /// Starts the calls an interrupt held, in the order they were made,
    /// once no interrupt is open.
    fn release_queued(&mut self, ctx: &Ctx<'_>, change: &mut Change) {
        let queued: Vec<String> = self
            .calls_in_order()
            .into_iter()
            .filter(|c| c.call.status == CallStatus::Queued)
            .map(|c| c.call.id.clone())
            .collect();
        for id in queued {
            if let Some(record) = self.calls.get_mut(&id) {
                record.call.status = CallStatus::Pending;
            }
            self.begin_try(&id, ctx, change);
        }
    }

    /// Fails the current try of an in-flight call whose deadline has
    /// passed (`deadline_exceeded`, retried per the call's policy). The
    /// step that was to run it is dropped with the settling (see
    /// [`settle`](Self::settle)). A sub-agent's child has its turn
    /// cancelled, and the call fails as a child's failed turn does.
    pub fn expire(&mut self, call_id: &str, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(call) = self.open_call(call_id).filter(|c| c.call.status == CallStatus::Pending).cloned() else {
            return;
        };
        let what = match call.call.kind {
            CallKind::LlmCall => "LLM call",
            CallKind::ToolCall => "tool call",
            CallKind::SubAgent => "sub-agent call",
        };
        let error = format!(
            "{what} `{call_id}` was not settled by its deadline ({})",
            call.call.deadline.as_deref().unwrap_or("unknown")
        );
        let outcome = match &call.call.session_id {
            Some(child) if call.call.kind == CallKind::SubAgent => {
                change.cancel.push(SessionKey::new(&self.record.key.tenant, child));
                Outcome::SubAgent { ok: false, result: None, error: Some(error) }
            }
            _ => Outcome::Failed {
                error,
                retryable: true,
                code: Some(ErrorCode::DeadlineExceeded),
                detail: None,
                retry_after_ms: None,
            },
        };
        self.settle(call_id, outcome, ctx, change);
    }

    /// Hands a pending tool call to whoever runs it: a `tool.execute` step
    /// for the worker, a `tool.call` event for clients.
    pub fn dispatch_tool(&mut self, call_id: &str, change: &mut Change) {
        let Some(call) = self.calls.get(call_id) else { return };
        let CallSpec::Tool { arguments, input, .. } = &call.spec else { return };
        let name = call.call.name.clone().unwrap_or_default();
        // The actor runs it (a tool source's tool).
        if call.call.handler == Some(Handler::Server) {
            return;
        }
        if call.call.handler == Some(Handler::Client) {
            let call = ClientToolCall {
                id: call.call.id.clone(),
                name,
                arguments: arguments.clone(),
                attempt: call.call.attempt,
            };
            self.emit(SessionEvent::ToolCall(call), change);
        } else {
            let trigger = Trigger::ToolExecute(ToolExecute {
                id: call.call.id.clone(),
                name,
                arguments: arguments.clone(),
                input: input.clone(),
                attempt: call.call.attempt,
                deadline: call.call.deadline.clone(),
            });
            self.push_step(StoredTrigger::Plain { trigger }, change);
        }
    }

    fn spawn_sub_agent(
        &mut self,
        spawn: subs_protocol::action::SubAgentSpawn,
        hold: bool,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        // Taken once, when the decision's messages are recorded: every try
        // starts from the same message, whatever the path holds later.
        let arguments = self.tool_call_arguments(&spawn.tool_call_id).unwrap_or_else(|| "{}".to_owned());
        let mut record = self.new_call(
            spawn.tool_call_id.clone(),
            CallKind::SubAgent,
            None,
            spawn.retry.clone(),
            CallSpec::SubAgent {
                tool_call_id: spawn.tool_call_id,
                arguments: Some(arguments),
                budget: None,
                reported: None,
            },
            hold,
        );
        record.call.agent_id = Some(spawn.agent_id);
        record.call.session_id = Some(spawn.session_id);
        self.add_call(record, hold, ctx, change);
    }

    /// Starts a try of a sub-agent call: the first creates the child
    /// session, whose turn is a user message holding the model's
    /// arguments for the call; a retry starts a new turn of the same
    /// child from that message, on a branch of its own.
    fn start_child(&mut self, call_id: &str, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(call) = self.calls.get(call_id).cloned() else { return };
        let (Some(agent_id), Some(child_id)) = (call.call.agent_id.clone(), call.call.session_id.clone()) else {
            return;
        };
        let arguments = match &call.spec {
            CallSpec::SubAgent { arguments: Some(arguments), .. } => arguments.clone(),
            _ => self.tool_call_arguments(call_id).unwrap_or_else(|| "{}".to_owned()),
        };
        let spawn = SpawnTry { attempt: call.call.attempt, parent_turn: call.turn_id.clone().unwrap_or_default() };
        let child_key = SessionKey::new(&self.record.key.tenant, &child_id);
        let turn_id = if call.call.attempt == 1 {
            // Past the tenant's spawn bounds or session limit the child is
            // not created: the call fails at once, without a retry, and
            // the agent learns why from its `sub_agent.finished`.
            match self.admit_child(ctx) {
                Ok(reserved) => change.created.merge(reserved),
                Err(Refused { error, log }) => {
                    if log {
                        tracing::warn!(
                            tenant = %self.record.key.tenant,
                            session = %self.record.key.session,
                            agent = %self.record.agent_id,
                            call = call_id,
                            %error,
                            "a sub-agent spawn was refused"
                        );
                    }
                    if let Some(record) = self.calls.get_mut(call_id) {
                        record.retry = None;
                    }
                    let outcome = Outcome::SubAgent { ok: false, result: None, error: Some(error) };
                    self.settle(call_id, outcome, ctx, change);
                    return;
                }
            }
            let mut child = Session::fresh(child_key.clone(), agent_id, self.record.identity.clone(), ctx.now_ms);
            // A child may spend what its parent has left, and no more: that
            // much is held back from the parent's budget while the call is
            // in flight (see `Session::spent`).
            if let Some(left) = self.budget_left() {
                child.record.budget = Some(left.to_string());
                if let Some(record) = self.calls.get_mut(call_id)
                    && let CallSpec::SubAgent { budget, .. } = &mut record.spec
                {
                    *budget = Some(left.to_string());
                    change
                        .batch
                        .push(Op::PutCall { session: self.record.key.clone(), record: Box::new(record.clone()) });
                }
            }
            child.record.ancestry =
                self.record.ancestry.iter().cloned().chain([self.record.key.session.clone()]).collect();
            child.record.parent =
                Some(ParentLink { session: self.record.key.session.clone(), call_id: call_id.to_owned() });
            change.batch.push(Op::PutSession(Box::new(child.record)));
            "spawn".to_owned()
        } else {
            format!("spawn_{}", call.call.attempt)
        };
        let start = TurnStart::Messages {
            fork_id: None,
            new: vec![DraftMessage::new(Role::User, arguments)],
            client: ClientContext::default(),
        };
        change.batch.push(Op::PushInbox {
            session: child_key.clone(),
            item: Box::new(InboxItem::Start { turn_id, start, span: call.span.clone(), spawn: Some(spawn) }),
        });
        change.wake.push(child_key);
    }

    /// The argument text of the latest tool call `id` of an assistant
    /// message on the active path.
    fn tool_call_arguments(&self, id: &str) -> Option<String> {
        self.tree
            .path_back(self.record.head_id.as_deref())
            .flat_map(|m| m.tool_calls.iter().flatten())
            .find(|c| c.id == id)
            .map(|c| c.function.arguments.clone())
    }

    /// Whether the turn may create the child of the sub-agent call whose
    /// first try is starting (it is among the turn's calls already): the
    /// tenant's spawn bounds, checked here, then its session limit and
    /// the tree's bound, whose room is reserved.
    fn admit_child(&self, ctx: &Ctx<'_>) -> Result<Reservation, Refused> {
        let tenant = &self.record.key.tenant;
        let bounds = ctx.quota.spawn_bounds(tenant);
        // Every spawn the turn started counts, those refused included: past
        // the bound an agent that spawns again in answer to each refusal
        // is refused at once, without reaching the counts.
        let spawned = self
            .calls
            .values()
            .filter(|c| c.call.kind == CallKind::SubAgent && c.call.status != CallStatus::Queued)
            .count();
        let per_turn = usize::try_from(bounds.max_spawns_per_turn).unwrap_or(usize::MAX);
        if spawned > per_turn {
            return Err(Refused {
                error: format!(
                    "a turn may spawn at most {per_turn} sub-agent sessions (`max_spawns_per_turn`); this is its \
                     spawn number {spawned}"
                ),
                // Logged once a turn.
                log: spawned == per_turn + 1,
            });
        }
        let depth = self.record.ancestry.len() + 1;
        let max_depth = usize::try_from(bounds.max_sub_agent_depth).unwrap_or(usize::MAX);
        if depth > max_depth {
            return Err(Refused {
                error: format!(
                    "the child would be {depth} levels below its root session; sub-agent sessions may be at \
                     most {max_depth} deep (`max_sub_agent_depth`)"
                ),
                log: true,
            });
        }
        let root = self.record.ancestry.first().unwrap_or(&self.record.key.session);
        ctx.quota.reserve(tenant, NewSession::Child { root }).map_err(|error| Refused { error, log: true })
    }

    /// Starts a try of the parent's sub-agent call in this child. An
    /// earlier try still open (its cancel has not arrived) is ended; a
    /// turn a client started is not: the try waits for it, queued.
    fn start_spawned(
        &mut self,
        turn_id: String,
        start: TurnStart,
        span: Option<SpanRef>,
        spawn: Option<SpawnTry>,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        let superseded = match (self.record.turn.as_ref().and_then(|t| t.spawn.as_ref()), &spawn) {
            (Some(open), Some(new)) => open.attempt < new.attempt || open.parent_turn != new.parent_turn,
            _ => false,
        };
        if superseded {
            self.fail_turn("a later try of the parent's sub-agent call replaced this one", "cancelled", ctx, change);
        }
        if self.record.turn.is_none() {
            let _ = self.start_turn(turn_id, start, span.as_ref(), ctx, change);
            if let Some(turn) = &mut self.record.turn {
                turn.spawn = spawn;
            }
            return;
        }
        let TurnStart::Messages { new, client, .. } = start else {
            tracing::warn!(session = %self.key(), "a sub-agent start that is not a message arrived while a turn is open; ignored");
            return;
        };
        // Without ids the messages share nothing with the tree: queued, the
        // try still starts on a branch of its own from the root.
        let input = subs_protocol::ClientInput::ClientMessages(subs_protocol::client::ClientMessages {
            agent_id: self.record.agent_id.clone(),
            turn_id: Some(turn_id.clone()),
            messages: new,
            stream: None,
            client: Some(client),
        });
        self.record.queued.push(QueuedInput { turn_id: turn_id.clone(), input, trace: span, spawn });
        let record = TurnRecord { status: TurnStatus::Queued, data: None, started_ms: ctx.now_ms, ended_ms: None };
        change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id, record });
    }

    /// Adds what child `from` reported spending to the session's tree
    /// spend, and to its call's `reported` while the call is in flight (its
    /// hold on the budget shrinks by as much). Counted from any report of
    /// the child, of the try the call waits on or not.
    fn count_child_spend(&mut self, call_id: &str, from: &str, spent: &str, change: &mut Change) {
        let Ok(spent) = spent.parse::<Money>() else {
            tracing::warn!(session = %self.key(), %from, spent, "a child's reported spend is not an amount; not counted");
            return;
        };
        let tree = money(self.record.tree_cost.as_deref()) + spent;
        self.record.tree_cost = Some(tree.to_string());
        let open = self.calls.get_mut(call_id).filter(|c| {
            c.call.kind == CallKind::SubAgent && c.call.session_id.as_deref() == Some(from) && !super::is_settled(c)
        });
        if let Some(record) = open
            && let CallSpec::SubAgent { reported, .. } = &mut record.spec
        {
            *reported = Some((money(reported.as_deref()) + spent).to_string());
            change.batch.push(Op::PutCall { session: self.record.key.clone(), record: Box::new(record.clone()) });
        }
    }

    /// Whether a child's report settles sub-agent call `call_id`: the call
    /// is waiting for its child, and the report is of the try it waits on
    /// (its attempt, its turn, its child). A report stored without the try
    /// or the child is taken while the call waits.
    fn answers_call(&self, call_id: &str, spawn: Option<&SpawnTry>, from: Option<&str>) -> bool {
        let Some(call) = self.open_call(call_id).filter(|c| c.call.status == CallStatus::Pending) else {
            return false;
        };
        let same_try =
            spawn.is_none_or(|s| s.attempt == call.call.attempt && Some(&s.parent_turn) == call.turn_id.as_ref());
        let same_child = from.is_none_or(|f| call.call.session_id.as_deref() == Some(f));
        call.call.kind == CallKind::SubAgent && same_try && same_child
    }

    // ---- calls ---------------------------------------------------------------

    /// Settles a call (or schedules its retry), producing the trigger that
    /// reports it. The call stays in the turn's `calls`, `completed` or `failed`,
    /// until the turn ends.
    ///
    /// The step that was to run the settled try (its `tool.execute` or
    /// `llm.execute`, not yet delivered) is dropped: whatever settled the
    /// call (another decision, such as one denying a call an interrupt
    /// held; its deadline; a retryable failure) ended that try, and a
    /// decision answering the step could settle nothing.
    pub fn settle(&mut self, call_id: &str, outcome: Outcome, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(call) = self.open_call(call_id).cloned() else { return };
        self.drop_steps_running(|_, id, _| id == call_id, change);
        let mut outcome = checked_outcome(&call, outcome);
        if let (Outcome::LlmOk(done), CallSpec::Llm { action, .. }) = (&mut outcome, &call.spec) {
            ctx.prices.price_reply(action.model.as_deref().unwrap_or_default(), &mut done.response);
        }
        self.end_try(&call, &outcome, ctx, change);
        if self.schedule_retry(&call, &outcome, ctx, change) {
            return;
        }
        let mut settled = call.clone();
        settled.call.status = match &outcome {
            Outcome::ToolOk(_) | Outcome::LlmOk(_) | Outcome::SubAgent { ok: true, .. } => CallStatus::Completed,
            Outcome::SubAgent { ok: false, .. } | Outcome::Failed { .. } => CallStatus::Failed,
        };
        settled.retry_at_ms = None;
        settled.deadline_ms = None;
        // An open call was stored when it was made, and a spec that
        // changes later (a sub-agent's budget) is stored when it does.
        self.update_call(settled, change);
        if let Outcome::LlmOk(done) = &outcome {
            self.account(done.response.usage.as_ref(), done.response.cost.as_deref(), change);
        }
        match finished_trigger(&call, outcome) {
            Some(trigger) => {
                self.push_step(StoredTrigger::Plain { trigger }, change);
            }
            None => {
                tracing::error!(call = %call.call.id, kind = ?call.call.kind, "an outcome that does not fit its call was dropped")
            }
        }
    }

    /// What a call's try ending tells operators: its metrics (a tool
    /// call's time, an LLM call's tokens and cost) and, when its turn is
    /// traced, its span.
    fn end_try(&self, call: &CallRecord, outcome: &Outcome, ctx: &Ctx<'_>, change: &mut Change) {
        let started = call.started_ms.unwrap_or(ctx.now_ms);
        let ok = !matches!(outcome, Outcome::Failed { .. } | Outcome::SubAgent { ok: false, .. });
        let tokens = match outcome {
            Outcome::LlmOk(done) => done.response.usage.as_ref().and_then(TokenUsage::from_usage).unwrap_or_default(),
            _ => TokenUsage::default(),
        };
        match (&call.spec, outcome) {
            (CallSpec::Llm { action, .. }, Outcome::LlmOk(done)) => {
                let cost = done.response.cost.as_deref().and_then(|c| c.parse::<crate::model::Money>().ok());
                let model = action.model.as_deref().unwrap_or_default();
                ctx.metrics.llm_usage(model, tokens.input_total(), tokens.output, cost);
            }
            (CallSpec::Tool { .. }, _) => {
                let took = std::time::Duration::from_millis(ctx.now_ms.saturating_sub(started));
                ctx.metrics.tool_call(tool_handler(call), took, ok);
            }
            _ => {}
        }
        if let Some(at) = call.span.clone() {
            let provider = match &call.spec {
                CallSpec::Llm { action, .. } => {
                    ctx.providers.and_then(|models| models.telemetry(action.model.as_deref().unwrap_or_default()))
                }
                _ => None,
            };
            change.spans.push(call_span(call, at, outcome, tokens, provider, (started, ctx.now_ms)));
        }
    }

    /// Schedules the next try of `call` when `outcome` is a retryable
    /// failure and the call's retry policy has tries left: after its
    /// backoff, or the provider's `retry_after`, whichever is later.
    /// A sub-agent whose turn failed is re-run the same way.
    fn schedule_retry(&mut self, call: &CallRecord, outcome: &Outcome, ctx: &Ctx<'_>, change: &mut Change) -> bool {
        let retry_after_ms = match outcome {
            Outcome::Failed { retryable: true, retry_after_ms, .. } => retry_after_ms,
            Outcome::SubAgent { ok: false, .. } => &None,
            _ => return false,
        };
        let policy = call.retry.as_ref().map(|p| ctx.retry_cap.apply(p)).filter(|p| call.call.attempt <= p.max_retries);
        let Some(policy) = policy else { return false };
        let backoff = clock::secs_to_ms(policy.backoff_secs(call.call.attempt));
        let mut record = call.clone();
        record.call.status = CallStatus::RetryScheduled;
        record.retry_at_ms = Some(ctx.now_ms + backoff.max(retry_after_ms.unwrap_or(0)));
        record.deadline_ms = None;
        record.call.deadline = None;
        self.update_call(record, change);
        true
    }

    /// Drops the steps not yet finished that run a call (`tool.execute`,
    /// `llm.execute`) for which `stale(session, call_id, attempt)` holds;
    /// whether any was dropped.
    fn drop_steps_running(&mut self, stale: impl Fn(&Self, &str, u32) -> bool, change: &mut Change) -> bool {
        let dropped: Vec<(u64, StepRecord)> = self
            .steps
            .iter()
            .filter(|(_, s)| runs_call(&s.trigger).is_some_and(|(id, attempt)| stale(self, id, attempt)))
            .cloned()
            .collect();
        let any = !dropped.is_empty();
        for (seq, step) in dropped {
            self.finish_step(step, seq, StepStatus::Dropped, change);
        }
        any
    }

    /// The deadline (Unix ms) of the try `step` runs, when it runs one (a
    /// worker's `tool.execute` or `llm.execute` of a call in flight on
    /// that attempt) and the try has one.
    pub fn call_deadline(&self, step: &StepRecord) -> Option<u64> {
        let (id, attempt) = runs_call(&step.trigger)?;
        let call = self.calls.get(id).filter(|c| c.call.status == CallStatus::Pending && c.call.attempt == attempt)?;
        call.deadline_ms
    }

    /// Drops the steps that would run a try no longer in flight: the
    /// call is settled, gone with its turn, or on another attempt. Such a
    /// step can have no valid decision (it must settle its call, which is
    /// not in flight), so delivering it could only fail the turn.
    /// [`settle`](Self::settle) drops the step of the try it ends; this
    /// covers steps stored before the session was last loaded. Whether
    /// any was dropped.
    pub fn drop_stale_steps(&mut self, change: &mut Change) -> bool {
        self.drop_steps_running(
            |session, id, attempt| {
                !session
                    .calls
                    .get(id)
                    .is_some_and(|c| c.call.status == CallStatus::Pending && c.call.attempt == attempt)
            },
            change,
        )
    }

    /// Starts the next try of a call whose backoff has passed.
    pub fn retry_call(&mut self, call_id: &str, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(record) = self.calls.get_mut(call_id).filter(|c| c.call.status == CallStatus::RetryScheduled) else {
            return;
        };
        record.call.attempt += 1;
        record.call.status = CallStatus::Pending;
        record.retry_at_ms = None;
        self.begin_try(call_id, ctx, change);
    }

    // ---- the inbox -----------------------------------------------------------

    /// Takes in one inbox item.
    pub fn take_inbox(&mut self, seq: u64, item: InboxItem, ctx: &Ctx<'_>, change: &mut Change) {
        change.batch.push(Op::DeleteInbox { session: self.key().clone(), seq });
        match item {
            InboxItem::SubAgentFinished { call_id, ok, result, error, spawn, from, spent } => {
                if let (Some(from), Some(spent)) = (from.as_deref(), spent.as_deref()) {
                    self.count_child_spend(&call_id, from, spent, change);
                }
                if self.answers_call(&call_id, spawn.as_ref(), from.as_deref()) {
                    self.settle(&call_id, Outcome::SubAgent { ok, result, error }, ctx, change);
                } else {
                    tracing::debug!(session = %self.key(), call = %call_id, ?spawn, ?from, "a report of a try that is over; ignored");
                }
            }
            InboxItem::Message { message, from } => {
                let max = ctx.history.max_bytes(&self.record.key.tenant);
                match self.refuse_message_bytes(&message, max) {
                    // The sender's decision is applied already: the
                    // message is dropped, and the operator told.
                    Some(refused) => tracing::warn!(session = %self.key(), %from, %refused, "a sent message dropped"),
                    None => {
                        self.record_message(message, change);
                    }
                }
            }
            InboxItem::Start { turn_id, start, span, spawn } => {
                self.start_spawned(turn_id, start, span, spawn, ctx, change)
            }
            // The actor answers forwarded requests before it takes in the
            // rest of the inbox (they need the actor, not just the
            // session); one reaching here has nobody to answer.
            InboxItem::Request { id, .. } => {
                tracing::warn!(session = %self.key(), request = %id, "a forwarded request reached the session itself; dropped");
            }
        }
    }
}

/// The call a step runs, and on which attempt: a worker's `tool.execute`
/// or `llm.execute`; `None` for any other step.
pub(crate) fn runs_call(trigger: &StoredTrigger) -> Option<(&str, u32)> {
    match trigger {
        StoredTrigger::LlmExecute { call_id, attempt } => Some((call_id, *attempt)),
        StoredTrigger::Plain { trigger: Trigger::ToolExecute(t) } => Some((&t.id, t.attempt)),
        _ => None,
    }
}

/// A stored amount of dollars; none (or one that does not read) is zero.
fn money(amount: Option<&str>) -> Money {
    amount.and_then(|a| a.parse().ok()).unwrap_or_default()
}

/// Whether a child's turn reports to its parent when it ends: a turn a
/// try of the parent's call started. A turn stored without its try is
/// taken for one when it has a spawn turn's id (`spawn`, `spawn_<n>`).
fn reports_to_parent(turn: &TurnState) -> bool {
    turn.spawn.is_some()
        || turn.turn_id == "spawn"
        || turn.turn_id.strip_prefix("spawn_").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A tool's result checked against the tool's output schema: one that does
/// not match is a failure (not retried) naming what is wrong.
fn checked_outcome(call: &CallRecord, outcome: Outcome) -> Outcome {
    match (outcome, &call.spec) {
        (Outcome::ToolOk(result), CallSpec::Tool { output, .. }) => {
            match tools::check_result(output.as_ref(), &result) {
                Ok(()) => Outcome::ToolOk(result),
                Err(e) => Outcome::Failed {
                    error: format!("the result does not match the tool's output schema: {e}"),
                    retryable: false,
                    code: None,
                    detail: Some(json!({"result": result})),
                    retry_after_ms: None,
                },
            }
        }
        (outcome, _) => outcome,
    }
}

/// The trigger that tells the agent how `call` ended; `None` for an
/// outcome of another kind of call.
fn finished_trigger(call: &CallRecord, outcome: Outcome) -> Option<Trigger> {
    let name = call.call.name.clone().unwrap_or_default();
    let trigger = match (call.call.kind, outcome) {
        (CallKind::SubAgent, Outcome::SubAgent { ok, result, error }) => Trigger::SubAgentFinished(SubAgentFinished {
            id: call.call.id.clone(),
            ok,
            session_id: call.call.session_id.clone().unwrap_or_default(),
            agent_id: call.call.agent_id.clone().unwrap_or_default(),
            result,
            error,
        }),
        (CallKind::LlmCall, Outcome::LlmOk(crate::model::Completion { response, .. })) => {
            Trigger::LlmFinished(LlmFinished {
                id: call.call.id.clone(),
                ok: true,
                truncated: response.finish_reason.as_deref() == Some("length"),
                message: Some({
                    let mut message = crate::model::assistant_message(&response);
                    for call in message.tool_calls.iter_mut().flatten() {
                        call.id = super::proposal::usable_call_id(&call.id);
                    }
                    message
                }),
                usage: response.usage,
                cost: response.cost,
                error: None,
                code: None,
                detail: None,
            })
        }
        (CallKind::LlmCall, Outcome::Failed { error, code, detail, .. }) => Trigger::LlmFinished(LlmFinished {
            id: call.call.id.clone(),
            ok: false,
            message: None,
            truncated: false,
            usage: None,
            cost: None,
            error: Some(error),
            code: Some(code.unwrap_or(ErrorCode::ProviderError)),
            detail,
        }),
        (_, Outcome::ToolOk(result)) => Trigger::ToolFinished(ToolFinished {
            id: call.call.id.clone(),
            ok: true,
            name,
            result: Some(match result {
                Value::String(s) => s,
                other => subs_protocol::to_json(&other),
            }),
            error: None,
        }),
        (_, Outcome::Failed { error, .. }) => Trigger::ToolFinished(ToolFinished {
            id: call.call.id.clone(),
            ok: false,
            name,
            result: None,
            error: Some(error),
        }),
        _ => return None,
    };
    Some(trigger)
}

/// The outcome a `tool.error` / `llm.error` action reports.
fn failed(e: subs_protocol::action::CallError) -> Outcome {
    Outcome::Failed {
        error: e.error,
        retryable: e.retryable.unwrap_or(false),
        code: e.code,
        detail: e.detail,
        retry_after_ms: None,
    }
}

/// Who ran a tool call, as metrics and spans name it.
fn tool_handler(call: &CallRecord) -> &'static str {
    match call.call.handler {
        Some(Handler::Server) => "server",
        Some(Handler::Client) => "client",
        _ => "worker",
    }
}

/// The span of a call's try that ran over `(start_ms, end_ms)` and ended
/// with `outcome` (having used `tokens`), with the OpenTelemetry GenAI
/// attributes; `provider`: what the engine's provider of an LLM call says
/// of itself.
fn call_span(
    call: &CallRecord,
    at: SpanRef,
    outcome: &Outcome,
    tokens: TokenUsage,
    provider: Option<crate::model::ProviderTelemetry>,
    (start_ms, end_ms): (u64, u64),
) -> crate::telemetry::Span {
    use opentelemetry::KeyValue;
    use opentelemetry::trace::SpanKind;

    let error = match outcome {
        Outcome::Failed { error, .. } => Some(error.clone()),
        Outcome::SubAgent { ok: false, error, .. } => Some(error.clone().unwrap_or_else(|| "failed".to_owned())),
        _ => None,
    };
    let mut attributes = vec![
        KeyValue::new("subs.call.id", call.call.id.clone()),
        KeyValue::new("subs.call.attempt", i64::from(call.call.attempt)),
    ];
    // `error.type`: the failure's code where it has one, else `_OTHER`, as
    // the semantic conventions ask of a failed operation.
    match outcome {
        Outcome::Failed { code, .. } => {
            attributes.push(KeyValue::new("error.type", code.map_or("_OTHER", |c| c.as_str())));
        }
        Outcome::SubAgent { ok: false, .. } => attributes.push(KeyValue::new("error.type", "_OTHER")),
        _ => {}
    }
    let (name, kind) = match &call.spec {
        CallSpec::Llm { action, format, .. } => {
            let model = action.model.as_deref().unwrap_or_default();
            // `provider/model`, as agents name models.
            let (configured, bare) = model.split_once('/').unwrap_or(("", model));
            attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
            let provider = provider.unwrap_or_default();
            // The well-known name of the wire format the call went out in
            // (the engine's provider's, or the one a worker was asked to
            // use), else the configured provider's name.
            let known = provider.name.or_else(|| {
                format.map(|f| match f {
                    subs_protocol::LlmFormat::Openai => "openai",
                    subs_protocol::LlmFormat::Anthropic => "anthropic",
                })
            });
            match known {
                Some(name) => attributes.push(KeyValue::new("gen_ai.provider.name", name)),
                None if !configured.is_empty() => {
                    attributes.push(KeyValue::new("gen_ai.provider.name", configured.to_owned()));
                }
                None => {}
            }
            if let Some(address) = provider.address {
                attributes.push(KeyValue::new("server.address", address));
            }
            if let Some(port) = provider.port {
                attributes.push(KeyValue::new("server.port", i64::from(port)));
            }
            attributes.push(KeyValue::new("gen_ai.request.model", bare.to_owned()));
            if let Some(t) = action.temperature {
                attributes.push(KeyValue::new("gen_ai.request.temperature", t));
            }
            if let Some(n) = action.max_completion_tokens {
                attributes.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(n)));
            }
            if let Outcome::LlmOk(crate::model::Completion { response, id }) = outcome {
                let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                attributes.push(KeyValue::new("gen_ai.usage.input_tokens", count(tokens.input_total())));
                attributes.push(KeyValue::new("gen_ai.usage.output_tokens", count(tokens.output)));
                if !response.model.is_empty() {
                    attributes.push(KeyValue::new("gen_ai.response.model", response.model.clone()));
                }
                if let Some(id) = id {
                    attributes.push(KeyValue::new("gen_ai.response.id", id.clone()));
                }
                if let Some(reason) = &response.finish_reason {
                    let reasons = vec![opentelemetry::StringValue::from(reason.clone())];
                    attributes.push(KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        opentelemetry::Value::Array(reasons.into()),
                    ));
                }
            }
            (format!("chat {bare}"), SpanKind::Client)
        }
        CallSpec::Tool { .. } => {
            let name = call.call.name.clone().unwrap_or_default();
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            attributes.push(KeyValue::new("gen_ai.tool.name", name.clone()));
            attributes.push(KeyValue::new("gen_ai.tool.call.id", call.call.id.clone()));
            attributes.push(KeyValue::new("gen_ai.tool.type", "function"));
            attributes.push(KeyValue::new("subs.tool.handler", tool_handler(call)));
            (format!("execute_tool {name}"), SpanKind::Internal)
        }
        CallSpec::SubAgent { .. } => {
            let agent = call.call.agent_id.clone().unwrap_or_default();
            attributes.push(KeyValue::new("gen_ai.operation.name", "invoke_agent"));
            attributes.push(KeyValue::new("gen_ai.agent.name", agent.clone()));
            if let Some(session) = &call.call.session_id {
                attributes.push(KeyValue::new("gen_ai.conversation.id", session.clone()));
            }
            (format!("invoke_agent {agent}"), SpanKind::Internal)
        }
    };
    let (start, end) = (crate::telemetry::at_ms(start_ms), crate::telemetry::at_ms(end_ms));
    crate::telemetry::Span { at, name, kind, start, end, attributes, error }
}

/// The named steps of ending a turn and settling a call, on sessions in
/// memory with a `MemStore` behind the context.
#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde_json::json;
    use subs_protocol::ToolInput;

    use super::*;
    use crate::config::{DecisionBounds, SpawnBounds};
    use crate::session::{KNOWN_TURNS, KnownTurns};
    use crate::store::{CallRecord, MemStore};

    struct NoLimit;

    impl SessionQuota for NoLimit {
        fn reserve(&self, _: &str, _: NewSession<'_>) -> Result<Reservation, String> {
            Ok(Reservation::default())
        }

        fn spawn_bounds(&self, _: &str) -> SpawnBounds {
            SpawnBounds::default()
        }

        fn decision_bounds(&self, _: &str) -> DecisionBounds {
            DecisionBounds::default()
        }
    }

    const NOW: u64 = 1_000_000;

    fn with_ctx<T>(f: impl FnOnce(&Ctx<'_>) -> T) -> T {
        let store = MemStore::new();
        let retry = RetryPolicy { timeout_secs: None, max_retries: 2, backoff_base_secs: 1.0, backoff_max_secs: 10.0 };
        let cap = RetryCap::default();
        f(&Ctx {
            store: &store,
            default_model: "subs/offline",
            default_retry: &retry,
            retry_cap: &cap,
            default_stream: false,
            now_ms: NOW,
            call_timeout_ms: 300_000,
            quota: &NoLimit,
            history: &super::super::history::HistoryLimits::default(),
            prices: &crate::model::PriceTable::builtin(),
            providers: None,
            metrics: &crate::metrics::Metrics::default(),
            tracer: &crate::telemetry::Tracer::default(),
            incoming: None,
            decision: None,
            resumer: Resumer::Tenant { key: None, identity: None },
        })
    }

    /// A session with turn `t1` open.
    fn session() -> Session {
        let mut session = Session::fresh(SessionKey::new("acme", "s"), "agent".to_owned(), Default::default(), 1);
        session.record.turn = Some(TurnState {
            turn_id: "t1".to_owned(),
            client_tools: Vec::new(),
            started_ms: 5,
            span: None,
            spawn: None,
        });
        session
    }

    fn call(id: &str, kind: &str, spec: CallSpec, retry: Option<RetryPolicy>) -> CallRecord {
        let call = json!({"id": id, "kind": kind, "status": "pending", "attempt": 1, "name": "add", "session_id": format!("s.{id}")});
        CallRecord {
            call: serde_json::from_value(call).unwrap(),
            order: 0,
            deadline_ms: None,
            turn_id: Some("t1".to_owned()),
            retry,
            retry_at_ms: None,
            spec,
            started_ms: None,
            span: None,
        }
    }

    #[test]
    fn chat_spans_say_the_error_type_the_well_known_provider_and_the_reply_id() {
        let attributes = |spec: CallSpec, outcome: Outcome, provider: Option<crate::model::ProviderTelemetry>| {
            let at = SpanRef { trace_id: "1".repeat(32), span_id: "2".repeat(16), parent_id: None };
            let span =
                call_span(&call("l1", "llm_call", spec, None), at, &outcome, TokenUsage::default(), provider, (1, 2));
            span.attributes.into_iter().map(|kv| (kv.key.to_string(), kv.value.to_string())).collect::<HashMap<_, _>>()
        };
        let llm = |format: Option<subs_protocol::LlmFormat>| CallSpec::Llm {
            action: std::sync::Arc::new(LlmCall { model: Some("gateway/m".to_owned()), ..LlmCall::default() }),
            system: None,
            format,
        };
        let limited = Outcome::Failed {
            error: "slow down".to_owned(),
            retryable: true,
            code: Some(subs_protocol::ErrorCode::RateLimited),
            detail: None,
            retry_after_ms: None,
        };
        // The engine's provider says what it is and where.
        let provider = crate::model::ProviderTelemetry {
            name: Some("openai"),
            address: Some("llm.example".to_owned()),
            port: Some(8443),
        };
        let a = attributes(llm(None), limited, Some(provider));
        assert_eq!(a["error.type"], "rate_limited");
        assert_eq!(a["gen_ai.provider.name"], "openai");
        assert_eq!((a["server.address"].as_str(), a["server.port"].as_str()), ("llm.example", "8443"));
        // A worker asked for a format: its name; neither: the configured one.
        let a = attributes(llm(Some(subs_protocol::LlmFormat::Anthropic)), failed(false, None), None);
        assert_eq!((a["gen_ai.provider.name"].as_str(), a["error.type"].as_str()), ("anthropic", "_OTHER"));
        let reply: subs_protocol::LlmResponse = serde_json::from_value(json!({"model": "m-2025"})).unwrap();
        let a = attributes(llm(None), Outcome::LlmOk(reply.clone().into()), None);
        assert_eq!((a["gen_ai.provider.name"].as_str(), a["gen_ai.response.model"].as_str()), ("gateway", "m-2025"));
        assert!(!a.contains_key("error.type"));
        assert!(!a.contains_key("gen_ai.response.id"), "a reply without a provider id has none");
        // The provider's id of the reply, kept beside it.
        let done = crate::model::Completion { response: reply, id: Some("chatcmpl-9".to_owned()) };
        let a = attributes(llm(None), Outcome::LlmOk(done), None);
        assert_eq!(a["gen_ai.response.id"], "chatcmpl-9");
    }

    /// A worker answering in the provider's own format: the body's id of
    /// the reply is read with it and reaches the call's span.
    #[test]
    fn a_workers_native_reply_gives_the_chat_span_the_providers_id() {
        with_ctx(|ctx| {
            let mut session = session();
            let spec = CallSpec::Llm {
                action: std::sync::Arc::new(LlmCall { model: Some("gateway/m".to_owned()), ..LlmCall::default() }),
                system: None,
                format: Some(subs_protocol::LlmFormat::Openai),
            };
            let mut record = call("l1", "llm_call", spec, None);
            record.span = Some(SpanRef { trace_id: "1".repeat(32), span_id: "2".repeat(16), parent_id: None });
            let mut change = Change::default();
            session.put_call(record, &mut change);
            let body = json!({"id": "chatcmpl-w", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}]});
            let done = session.read_llm_response("l1", &body).unwrap();
            session.settle("l1", Outcome::LlmOk(done), ctx, &mut change);
            let span = change.spans.last().expect("the call's span");
            let id = span.attributes.iter().find(|kv| kv.key.as_str() == "gen_ai.response.id");
            assert_eq!(id.map(|kv| kv.value.to_string()).as_deref(), Some("chatcmpl-w"), "{span:?}");
        });
    }

    fn tool_spec(output: Option<Value>) -> CallSpec {
        CallSpec::Tool {
            arguments: "{}".to_owned(),
            input: ToolInput::Valid { value: json!({}) },
            output: output.map(std::sync::Arc::new),
        }
    }

    fn failed(retryable: bool, retry_after_ms: Option<u64>) -> Outcome {
        Outcome::Failed { error: "busy".to_owned(), retryable, code: None, detail: None, retry_after_ms }
    }

    fn events(change: &Change) -> Vec<(String, Value)> {
        change.events.iter().map(|(_, _, e)| (e.name.clone(), e.data.clone())).collect()
    }

    fn pushed_trigger(session: &Session) -> Trigger {
        let (_, step) = session.steps.back().expect("a step was pushed");
        session.trigger(&step.trigger)
    }

    #[test]
    fn each_outcome_becomes_its_kind_of_finished_trigger() {
        let tool = call("c1", "tool_call", tool_spec(None), None);
        let Some(Trigger::ToolFinished(done)) = finished_trigger(&tool, Outcome::ToolOk(json!({"sum": 3}))) else {
            panic!("a tool result finishes the tool")
        };
        assert_eq!((done.ok, done.result.as_deref(), done.name.as_str()), (true, Some(r#"{"sum":3}"#), "add"));
        let Some(Trigger::ToolFinished(done)) = finished_trigger(&tool, failed(false, None)) else { panic!() };
        assert_eq!((done.ok, done.error.as_deref()), (false, Some("busy")));
        let llm = call(
            "c2",
            "llm_call",
            CallSpec::SubAgent { tool_call_id: "x".to_owned(), arguments: None, budget: None, reported: None },
            None,
        );
        let Some(Trigger::LlmFinished(done)) = finished_trigger(&llm, failed(true, None)) else { panic!() };
        assert_eq!((done.ok, done.code), (false, Some(ErrorCode::ProviderError)));
        let sub = Outcome::SubAgent { ok: true, result: Some("hi".to_owned()), error: None };
        assert!(finished_trigger(&tool, sub).is_none(), "a child's end does not settle a tool call");
    }

    #[test]
    fn a_result_outside_the_output_schema_fails_the_call_without_a_retry() {
        with_ctx(|ctx| {
            let mut session = session();
            let schema = json!({"type": "object", "required": ["sum"]});
            let retry =
                RetryPolicy { timeout_secs: None, max_retries: 5, backoff_base_secs: 1.0, backoff_max_secs: 1.0 };
            let mut change = Change::default();
            session.put_call(call("c1", "tool_call", tool_spec(Some(schema)), Some(retry)), &mut change);
            session.settle("c1", Outcome::ToolOk(json!({"total": 3})), ctx, &mut change);
            assert_eq!(session.calls["c1"].call.status, CallStatus::Failed, "settled, not retried");
            let Trigger::ToolFinished(done) = pushed_trigger(&session) else { panic!("a tool.finished step") };
            assert!(!done.ok);
            assert!(done.error.unwrap().contains("does not match the tool's output schema"));
        });
    }

    #[test]
    fn a_retryable_failure_waits_for_the_later_of_backoff_and_retry_after() {
        with_ctx(|ctx| {
            let retry =
                RetryPolicy { timeout_secs: None, max_retries: 2, backoff_base_secs: 2.0, backoff_max_secs: 10.0 };
            for (retry_after, due) in [(None, NOW + 2_000), (Some(5_000), NOW + 5_000), (Some(500), NOW + 2_000)] {
                let mut session = session();
                let mut change = Change::default();
                session.put_call(call("c1", "tool_call", tool_spec(None), Some(retry.clone())), &mut change);
                session.settle("c1", failed(true, retry_after), ctx, &mut change);
                let record = &session.calls["c1"];
                assert_eq!((record.call.status, record.retry_at_ms), (CallStatus::RetryScheduled, Some(due)));
                assert!(session.steps.is_empty(), "the agent hears nothing yet");
            }
            // Without a policy, or past its tries, the failure is final.
            let mut session = session();
            let mut change = Change::default();
            session.put_call(call("c1", "tool_call", tool_spec(None), None), &mut change);
            session.settle("c1", failed(true, None), ctx, &mut change);
            assert_eq!(session.calls["c1"].call.status, CallStatus::Failed, "kept, settled, until the turn ends");
            assert_eq!(session.open_calls().count(), 0);
            assert!(matches!(pushed_trigger(&session), Trigger::ToolFinished(done) if !done.ok));
        });
    }

    /// A tenant whose `stream_by_default` is its one field.
    struct Streaming(Option<bool>);

    impl SessionQuota for Streaming {
        fn reserve(&self, _: &str, _: NewSession<'_>) -> Result<Reservation, String> {
            Ok(Reservation::default())
        }

        fn spawn_bounds(&self, _: &str) -> SpawnBounds {
            SpawnBounds::default()
        }

        fn decision_bounds(&self, _: &str) -> DecisionBounds {
            DecisionBounds { stream_by_default: self.0, ..DecisionBounds::default() }
        }
    }

    #[test]
    fn an_llm_call_streams_as_the_call_then_the_agent_then_the_tenant_then_the_engine_say() {
        let streams = |call: Option<bool>, agent: Option<bool>, tenant: Option<bool>, engine: bool| {
            with_ctx(|ctx| {
                let quota = Streaming(tenant);
                let ctx = Ctx {
                    store: ctx.store,
                    default_model: ctx.default_model,
                    default_retry: ctx.default_retry,
                    retry_cap: ctx.retry_cap,
                    default_stream: engine,
                    now_ms: ctx.now_ms,
                    call_timeout_ms: ctx.call_timeout_ms,
                    quota: &quota,
                    history: ctx.history,
                    prices: ctx.prices,
                    providers: ctx.providers,
                    metrics: ctx.metrics,
                    tracer: ctx.tracer,
                    incoming: None,
                    decision: None,
                    resumer: Resumer::Tenant { key: None, identity: None },
                };
                let mut session = session();
                session.record.agent = Some(std::sync::Arc::new(subs_protocol::AgentConfig {
                    stream: agent,
                    ..subs_protocol::AgentConfig::new("subs/offline")
                }));
                let call = LlmCall { id: Some("l1".to_owned()), stream: call, ..LlmCall::default() };
                session.start_llm_call(call, false, &ctx, &mut Change::default());
                session.calls["l1"].call.stream
            })
        };
        assert_eq!(streams(None, None, None, false), Some(false), "the engine's default");
        assert_eq!(streams(None, None, Some(true), false), Some(true), "the tenant's over the engine's");
        assert_eq!(streams(None, Some(false), Some(true), true), Some(false), "the agent's over the tenant's");
        assert_eq!(streams(Some(true), Some(false), Some(false), false), Some(true), "the call's over all");
    }

    /// A client's message naming its turn `turn_id`.
    fn message(turn_id: &str) -> ClientInput {
        ClientInput::ClientMessage(subs_protocol::client::ClientMessage {
            agent_id: "agent".to_owned(),
            turn_id: Some(turn_id.to_owned()),
            message: DraftMessage::user("hi"),
            stream: None,
        })
    }

    #[test]
    fn a_session_created_here_knows_its_turn_ids_and_a_loaded_one_asks_the_store() {
        // Nothing these inputs write is committed: only the store's answer
        // or the session's memory can say a turn exists.
        with_ctx(|ctx| {
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let accept = |session: &mut Session, turn_id: &str| {
                runtime.block_on(session.accept_input(message(turn_id), ctx, &mut Change::default())).unwrap()
            };
            let mut fresh = Session::fresh(SessionKey::new("acme", "s"), "agent".to_owned(), Default::default(), 1);
            assert!(!accept(&mut fresh, "t1").existing, "started");
            assert!(!accept(&mut fresh, "t2").existing, "queued behind t1");
            assert!(accept(&mut fresh, "t1").existing, "the open turn, known without the store");
            assert!(accept(&mut fresh, "t2").existing, "the queued turn, known without the store");

            let mut loaded = fresh.clone();
            loaded.turns = KnownTurns::default();
            assert!(!accept(&mut loaded, "t1").existing, "a loaded session asks the store, which has no t1");
        });
    }

    #[test]
    fn known_turn_ids_are_bounded_and_then_forgotten() {
        let mut known = KnownTurns::none_yet();
        assert_eq!(known.has("t"), Some(false));
        for n in 0..KNOWN_TURNS {
            known.add(&format!("t{n}"));
        }
        assert_eq!(known.has("t0"), Some(true));
        known.add("one-more");
        assert_eq!(known.has("t0"), None, "past the bound the store answers");
        assert_eq!(known.has("one-more"), None);
    }

    fn resume(session: &mut Session, id: &str, ctx: &Ctx<'_>, change: &mut Change) {
        let input = ClientInput::InterruptResume(subs_protocol::client::InterruptResume {
            interrupt_id: id.to_owned(),
            payload: None,
        });
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(session.accept_input(input, ctx, change)).expect("the interrupt is open");
    }

    #[test]
    fn a_state_event_is_stored_only_when_a_decision_changes_the_state() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut states = Vec::new();
            // A new state, the same again, none, null, another: two events.
            for state in [Some(json!({"n": 1})), Some(json!({"n": 1})), None, Some(Value::Null), Some(json!({"n": 2}))]
            {
                let mut change = Change::default();
                let seq = session.push_step(StoredTrigger::Plain { trigger: Trigger::SessionStart }, &mut change);
                let step = session.steps.back().unwrap().1.clone();
                let mut decision =
                    DecisionResponse::new().with_action(Action::ToolCall(subs_protocol::action::ToolCall {
                        id: Some(format!("c{seq}")),
                        name: "add".to_owned(),
                        arguments: json!({}),
                        handler: None,
                        retry: None,
                    }));
                decision.state = state;
                session.apply_decision(seq, step, decision, &Answering::of(&Trigger::SessionStart), ctx, &mut change);
                states.extend(events(&change).into_iter().filter(|(name, _)| name == "state").map(|(_, data)| data));
            }
            assert_eq!(states, [json!({"state": {"n": 1}}), json!({"state": {"n": 2}})]);
            assert_eq!(session.record.state, json!({"n": 2}));
        });
    }

    #[test]
    fn a_resume_failing_the_schema_changes_nothing_and_an_accepted_one_is_an_event_naming_its_sender() {
        with_ctx(|ctx| {
            let mut session = session();
            session.record.interrupts.push(OpenInterrupt {
                interrupt_id: "i1".to_owned(),
                reason: "approve?".to_owned(),
                payload: None,
                resume_schema: Some(json!({"type": "object", "required": ["approved"]})),
            });
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let input = |payload: Value| {
                ClientInput::InterruptResume(subs_protocol::client::InterruptResume {
                    interrupt_id: "i1".to_owned(),
                    payload: Some(payload),
                })
            };
            let mut change = Change::default();
            let refused = runtime.block_on(session.accept_input(input(json!({"ok": 1})), ctx, &mut change));
            let Err(InputError::Invalid { field, message }) = refused else { panic!("{refused:?}") };
            assert_eq!(field.as_deref(), Some("payload"));
            assert!(message.contains("\"approved\" is a required property"), "{message}");
            assert_eq!(session.record.interrupts.len(), 1, "still open");
            assert!(change.batch.is_empty() && change.events.is_empty() && session.steps.is_empty());

            let alice = subs_protocol::WorkerIdentity { id: Some("alice".to_owned()), metadata: None };
            let ctx = Ctx { resumer: Resumer::EndUser { identity: alice }, incoming: None, decision: None, ..*ctx };
            let accepted = runtime.block_on(session.accept_input(input(json!({"approved": true})), &ctx, &mut change));
            assert!(accepted.is_ok(), "{accepted:?}");
            assert!(session.record.interrupts.is_empty());
            assert_eq!(
                events(&change),
                [(
                    "interrupt.resumed".to_owned(),
                    json!({
                        "interrupt_id": "i1",
                        "payload": {"approved": true},
                        "resumed_by": {"kind": "end_user", "identity": {"id": "alice"}}
                    })
                )]
            );
            assert!(
                matches!(pushed_trigger(&session), Trigger::InterruptResumed(r) if r.payload == Some(json!({"approved": true})))
            );
        });
    }

    #[test]
    fn calls_made_with_an_interrupt_wait_queued_until_the_last_resume_then_start_in_order() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            let seq = session.push_step(StoredTrigger::Plain { trigger: Trigger::SessionStart }, &mut change);
            let step = session.steps[0].1.clone();
            let tool = |id: &str| {
                Action::ToolCall(subs_protocol::action::ToolCall {
                    id: Some(id.to_owned()),
                    name: "add".to_owned(),
                    arguments: json!({}),
                    handler: None,
                    retry: None,
                })
            };
            let interrupt = |id: &str| {
                Action::Interrupt(subs_protocol::action::Interrupt {
                    interrupt_id: Some(id.to_owned()),
                    reason: "wait".to_owned(),
                    payload: None,
                    resume_schema: None,
                })
            };
            let decision = DecisionResponse::new()
                .with_action(tool("b"))
                .with_action(interrupt("i1"))
                .with_action(interrupt("i2"))
                .with_action(tool("a"));
            session.apply_decision(seq, step, decision, &Answering::of(&Trigger::SessionStart), ctx, &mut change);
            for id in ["a", "b"] {
                let call = &session.calls[id].call;
                assert_eq!((call.status, call.deadline.as_deref()), (CallStatus::Queued, None), "{id}");
            }
            assert!(session.steps.is_empty(), "nothing runs a queued call");
            session.refresh_status();
            assert_eq!(session.record.status, SessionStatus::Waiting);

            // The first resume is delivered; the calls stay held.
            resume(&mut session, "i1", ctx, &mut change);
            assert!(
                matches!(session.next_step().map(|(_, s)| &s.trigger), Some(StoredTrigger::Plain { trigger: Trigger::InterruptResumed(r) }) if r.interrupt_id == "i1")
            );
            assert_eq!(session.calls["a"].call.status, CallStatus::Queued);

            // The last one starts them in the order they were made, each
            // with its deadline; its own trigger goes first.
            resume(&mut session, "i2", ctx, &mut change);
            let executes: Vec<String> = session
                .steps
                .iter()
                .filter_map(|(_, s)| match &s.trigger {
                    StoredTrigger::Plain { trigger: Trigger::ToolExecute(t) } => Some(t.id.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(executes, ["b", "a"]);
            let deadline = clock::rfc3339(NOW + 300_000);
            assert_eq!(session.calls["a"].call.deadline.as_deref(), Some(deadline.as_str()));
            assert!(
                matches!(session.next_step().map(|(_, s)| &s.trigger), Some(StoredTrigger::Plain { trigger: Trigger::InterruptResumed(r) }) if r.interrupt_id == "i1")
            );
        });
    }

    #[test]
    fn an_expired_try_drops_its_execute_step_and_is_retried_with_a_new_deadline() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            let retry =
                RetryPolicy { timeout_secs: Some(2.0), max_retries: 1, backoff_base_secs: 1.0, backoff_max_secs: 1.0 };
            session.add_call(call("c1", "tool_call", tool_spec(None), Some(retry)), false, ctx, &mut change);
            assert_eq!(session.calls["c1"].deadline_ms, Some(NOW + 2_000));
            assert_eq!(session.steps.len(), 1, "its tool.execute");
            session.expire("c1", ctx, &mut change);
            assert!(session.steps.is_empty(), "the expired try's tool.execute is dropped");
            let record = &session.calls["c1"];
            assert_eq!((record.call.status, record.call.deadline.as_deref()), (CallStatus::RetryScheduled, None));
            session.retry_call("c1", ctx, &mut change);
            let Trigger::ToolExecute(execute) = pushed_trigger(&session) else { panic!("a new tool.execute") };
            assert_eq!((execute.attempt, execute.deadline), (2, Some(clock::rfc3339(NOW + 2_000))));
            // Past its retries, the expiry settles the call as failed.
            session.expire("c1", ctx, &mut change);
            assert_eq!(session.calls["c1"].call.status, CallStatus::Failed);
            let Trigger::ToolFinished(done) = pushed_trigger(&session) else { panic!("a tool.finished") };
            assert!(done.error.unwrap().contains("not settled by its deadline"));
        });
    }

    #[test]
    fn settling_a_call_drops_its_undelivered_execute_step_and_stale_steps_are_dropped() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            session.add_call(call("c1", "tool_call", tool_spec(None), None), false, ctx, &mut change);
            let (execute, step) = session.steps[0].clone();
            assert_eq!(session.call_deadline(&step), Some(NOW + 300_000), "a worker's call runs to its deadline");

            // Settled by another decision (a denial): the execute step goes.
            let mut change = Change::default();
            session.settle("c1", failed(false, None), ctx, &mut change);
            let Trigger::ToolFinished(done) = pushed_trigger(&session) else { panic!("a tool.finished") };
            assert_eq!(session.steps.len(), 1, "only the tool.finished is left");
            assert_eq!(done.error.as_deref(), Some("busy"));
            let dropped = change.batch.ops.iter().any(
                |op| matches!(op, Op::PutStep { seq, record, .. } if *seq == execute && record.status == StepStatus::Dropped),
            );
            assert!(dropped, "the drop is stored");
            assert_eq!(session.call_deadline(&step), None, "the try is over");

            // A step for a try no longer in flight (stored before a reload)
            // is dropped before it is delivered; the others stay.
            session.push_step(step.trigger.clone(), &mut change);
            assert!(session.drop_stale_steps(&mut change));
            assert_eq!(session.steps.len(), 1);
            assert!(matches!(pushed_trigger(&session), Trigger::ToolFinished(_)));
            assert!(!session.drop_stale_steps(&mut change), "nothing else is stale");
        });
    }

    /// Spawn bounds, and a tenant whose counts refuse (or not) any more.
    struct Bounded {
        bounds: SpawnBounds,
        full: Option<&'static str>,
    }

    impl SessionQuota for Bounded {
        fn reserve(&self, _: &str, _: NewSession<'_>) -> Result<Reservation, String> {
            self.full.map_or_else(|| Ok(Reservation::default()), |why| Err(why.to_owned()))
        }

        fn spawn_bounds(&self, _: &str) -> SpawnBounds {
            self.bounds
        }

        fn decision_bounds(&self, _: &str) -> DecisionBounds {
            DecisionBounds::default()
        }
    }

    /// Spawns `n` children from `session` in `change`; the ids of the
    /// children created, and the errors of the spawns refused.
    fn spawn(session: &mut Session, n: usize, quota: &Bounded, change: &mut Change) -> (Vec<String>, Vec<String>) {
        with_ctx(|ctx| {
            let ctx = Ctx { quota, incoming: None, decision: None, resumer: ctx.resumer.clone(), ..*ctx };
            for i in 0..n {
                let spawn = subs_protocol::action::SubAgentSpawn {
                    session_id: format!("{}.{i}", session.record.key.session),
                    agent_id: "agent".to_owned(),
                    tool_call_id: format!("c{i}"),
                    retry: Some(RetryPolicy {
                        timeout_secs: None,
                        max_retries: 5,
                        backoff_base_secs: 1.0,
                        backoff_max_secs: 1.0,
                    }),
                };
                session.spawn_sub_agent(spawn, false, &ctx, change);
            }
        });
        let created = change
            .batch
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::PutSession(record) if record.key != session.record.key => Some(record.key.session.clone()),
                _ => None,
            })
            .collect();
        let refused = session
            .steps
            .iter()
            .filter_map(|(_, step)| match session.trigger(&step.trigger) {
                Trigger::SubAgentFinished(done) if !done.ok => done.error,
                _ => None,
            })
            .collect();
        (created, refused)
    }

    #[test]
    fn spawns_past_the_turns_bound_or_the_depth_fail_their_calls_and_create_nothing() {
        let bounds = SpawnBounds { max_spawns_per_turn: 3, max_sub_agent_depth: 2, max_tree_sessions: 100 };
        let quota = Bounded { bounds, full: None };
        let mut root = session();
        let mut change = Change::default();
        let (created, refused) = spawn(&mut root, 5, &quota, &mut change);
        assert_eq!(created, ["s.0", "s.1", "s.2"], "the turn's first three");
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(
            refused.iter().all(|e| e.contains("at most 3 sub-agent sessions (`max_spawns_per_turn`)")),
            "{refused:?}"
        );
        for id in ["c3", "c4"] {
            let call = &root.calls[id];
            assert_eq!((call.call.status, call.retry_at_ms), (CallStatus::Failed, None), "{id}: no retry");
        }
        // A new turn may spawn again.
        with_ctx(|ctx| root.end_turn(None, ctx, &mut Change::default()));
        root.record.turn = Some(TurnState {
            turn_id: "t2".to_owned(),
            client_tools: Vec::new(),
            started_ms: 5,
            span: None,
            spawn: None,
        });
        root.steps.clear();
        let (created, _) = spawn(&mut root, 1, &quota, &mut Change::default());
        assert_eq!(created.len(), 1, "the bound is per turn");

        // At depth 2 a child would be at depth 3.
        let mut deep = session();
        deep.record.ancestry = vec!["r".to_owned(), "r.a".to_owned()];
        let (created, refused) = spawn(&mut deep, 1, &quota, &mut Change::default());
        assert!(created.is_empty());
        assert!(refused[0].contains("at most 2 deep (`max_sub_agent_depth`)"), "{refused:?}");
        // Depth 0 allows no sub-agent at all.
        let none = Bounded { bounds: SpawnBounds { max_sub_agent_depth: 0, ..bounds }, full: None };
        let (created, refused) = spawn(&mut session(), 1, &none, &mut Change::default());
        assert!(created.is_empty() && refused[0].contains("`max_sub_agent_depth`"), "{refused:?}");
    }

    #[test]
    fn a_spawn_the_counts_refuse_fails_its_call_with_their_reason() {
        let full = Bounded { bounds: SpawnBounds::default(), full: Some("the tree of session `s` is full") };
        let mut session = session();
        let (created, refused) = spawn(&mut session, 2, &full, &mut Change::default());
        assert!(created.is_empty());
        assert_eq!(refused, ["the tree of session `s` is full", "the tree of session `s` is full"]);
    }

    #[test]
    fn an_expired_sub_agent_call_cancels_its_child_and_reports_the_failure() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            let retry =
                RetryPolicy { timeout_secs: Some(2.0), max_retries: 0, backoff_base_secs: 1.0, backoff_max_secs: 1.0 };
            let spec =
                CallSpec::SubAgent { tool_call_id: "c1".to_owned(), arguments: None, budget: None, reported: None };
            let mut record = call("c1", "sub_agent", spec, Some(retry));
            record.call.agent_id = Some("helper".to_owned());
            session.add_call(record, false, ctx, &mut change);
            assert_eq!(session.calls["c1"].deadline_ms, Some(NOW + 2_000), "the spawn's policy sets a deadline");
            let mut change = Change::default();
            session.expire("c1", ctx, &mut change);
            assert_eq!(change.cancel, [SessionKey::new("acme", "s.c1")], "the child's turn is stopped");
            assert_eq!(session.calls["c1"].call.status, CallStatus::Failed);
            let Trigger::SubAgentFinished(done) = pushed_trigger(&session) else { panic!("a sub_agent.finished") };
            assert!(!done.ok && done.error.unwrap().contains("not settled by its deadline"));
        });
    }

    #[test]
    fn ending_a_turn_drops_its_calls_steps_and_interrupts_and_cancels_children() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            session.put_call(
                call(
                    "c1",
                    "sub_agent",
                    CallSpec::SubAgent { tool_call_id: "x".to_owned(), arguments: None, budget: None, reported: None },
                    None,
                ),
                &mut change,
            );
            session.settle("never", Outcome::ToolOk(json!(1)), ctx, &mut change);
            session.push_step(StoredTrigger::Plain { trigger: Trigger::SessionStart }, &mut change);
            session.record.interrupts.push(OpenInterrupt {
                interrupt_id: "i1".to_owned(),
                reason: "ask".to_owned(),
                payload: None,
                resume_schema: None,
            });
            let mut change = Change::default();
            session.end_turn(Some(json!({"answer": 42})), ctx, &mut change);
            assert!(session.calls.is_empty() && session.steps.is_empty() && session.record.interrupts.is_empty());
            assert!(session.record.turn.is_none());
            assert_eq!(change.cancel, [SessionKey::new("acme", "s.c1")], "the child of the dropped call");
            let turn = change.batch.ops.iter().find_map(|op| match op {
                Op::PutTurn { turn_id, record, .. } if turn_id == "t1" => Some(record.clone()),
                _ => None,
            });
            let turn = turn.expect("the turn's end is stored");
            assert_eq!(
                (turn.status, turn.data, turn.ended_ms),
                (TurnStatus::Done, Some(json!({"answer": 42})), Some(NOW))
            );
            assert_eq!(events(&change), [("turn.done".to_owned(), json!({"turn_id": "t1", "data": {"answer": 42}}))]);
        });
    }

    #[test]
    fn a_child_reports_its_end_to_its_parent_and_a_failure_names_its_code() {
        with_ctx(|ctx| {
            let mut session = session();
            session.record.parent = Some(ParentLink { session: "p".to_owned(), call_id: "pc".to_owned() });
            let spawn = SpawnTry { attempt: 2, parent_turn: "pt".to_owned() };
            session.record.turn.as_mut().expect("a turn").spawn = Some(spawn.clone());
            let mut change = Change::default();
            session.fail_turn("it broke", "tool_error", ctx, &mut change);
            let expected = json!({"turn_id": "t1", "error": "it broke", "code": "tool_error"});
            assert_eq!(events(&change), [("turn.failed".to_owned(), expected)]);
            let report = change.batch.ops.iter().find_map(|op| match op {
                Op::PushInbox { session, item } => Some((session.clone(), item.clone())),
                _ => None,
            });
            let (parent, item) = report.expect("the parent hears of it");
            assert_eq!(parent, SessionKey::new("acme", "p"));
            assert_eq!(
                item,
                Box::new(InboxItem::SubAgentFinished {
                    call_id: "pc".to_owned(),
                    ok: false,
                    result: None,
                    error: Some("it broke".to_owned()),
                    spawn: Some(spawn),
                    from: Some("s".to_owned()),
                    spent: None,
                })
            );
            assert_eq!(change.wake, [SessionKey::new("acme", "p")]);
        });
    }

    #[test]
    fn children_spend_out_of_what_their_parent_has_left() {
        let quota = Bounded { bounds: SpawnBounds::default(), full: None };
        let mut parent = session();
        parent.record.budget = Some("1".to_owned());
        parent.record.cost = Some("0.25".to_owned());
        let mut change = Change::default();
        let (created, _) = spawn(&mut parent, 2, &quota, &mut change);
        assert_eq!(created.len(), 2);
        let budgets: Vec<Option<String>> = change
            .batch
            .ops
            .iter()
            .filter_map(|op| match op {
                Op::PutSession(record) if record.key != parent.record.key => Some(record.budget.clone()),
                _ => None,
            })
            .collect();
        // The first takes what is left; side by side, the second gets nothing.
        assert_eq!(budgets, [Some("0.75".to_owned()), Some("0".to_owned())]);
        assert_eq!(parent.spent().to_string(), "1", "what the first child holds counts");
        // The child reports $0.5: held back less that, counted as the tree's.
        with_ctx(|ctx| {
            let report = InboxItem::SubAgentFinished {
                call_id: "c0".to_owned(),
                ok: true,
                result: None,
                error: None,
                spawn: None,
                from: Some("s.0".to_owned()),
                spent: Some("0.5".to_owned()),
            };
            parent.take_inbox(1, report, ctx, &mut Change::default());
        });
        assert_eq!(parent.record.tree_cost.as_deref(), Some("0.5"));
        assert_eq!(parent.tree_spent().to_string(), "0.75");
        assert_eq!(parent.spent().to_string(), "0.75", "settled: nothing held");
        assert_eq!(parent.budget_left().map(|m| m.to_string()).as_deref(), Some("0.25"));
        // Without a budget, children get none.
        let (mut free, mut change) = (session(), Change::default());
        spawn(&mut free, 1, &quota, &mut change);
        assert!(change.batch.ops.iter().all(|op| !matches!(op, Op::PutSession(r) if r.budget.is_some())));
        // A child reports what its tree spent since its last report.
        let mut child = session();
        child.record.parent = Some(ParentLink { session: "p".to_owned(), call_id: "pc".to_owned() });
        child.record.turn.as_mut().expect("a turn").spawn = Some(SpawnTry { attempt: 1, parent_turn: "pt".to_owned() });
        child.record.cost = Some("0.3".to_owned());
        child.record.tree_cost = Some("0.2".to_owned());
        child.record.reported_cost = Some("0.1".to_owned());
        let mut change = Change::default();
        with_ctx(|ctx| child.end_turn(None, ctx, &mut change));
        let spent = change.batch.ops.iter().find_map(|op| match op {
            Op::PushInbox { item, .. } => match item.as_ref() {
                InboxItem::SubAgentFinished { spent, .. } => spent.clone(),
                _ => None,
            },
            _ => None,
        });
        assert_eq!(spent.as_deref(), Some("0.4"));
        assert_eq!(child.record.reported_cost.as_deref(), Some("0.5"));
    }

    #[test]
    fn a_turn_a_client_started_in_a_child_does_not_report() {
        with_ctx(|ctx| {
            let mut session = session();
            session.record.parent = Some(ParentLink { session: "p".to_owned(), call_id: "pc".to_owned() });
            let mut change = Change::default();
            session.end_turn(Some(json!({"answer": 1})), ctx, &mut change);
            assert!(!change.batch.ops.iter().any(|op| matches!(op, Op::PushInbox { .. })), "nothing for the parent");
            assert!(change.wake.is_empty());
            // A spawn turn stored without its try still reports.
            let legacy = |id: &str| TurnState {
                turn_id: id.to_owned(),
                client_tools: Vec::new(),
                started_ms: 0,
                span: None,
                spawn: None,
            };
            assert!(reports_to_parent(&legacy("spawn")) && reports_to_parent(&legacy("spawn_3")));
            assert!(!reports_to_parent(&legacy("spawn_")) && !reports_to_parent(&legacy("spawn_x")));
        });
    }

    #[test]
    fn a_report_settles_only_the_try_its_call_is_on() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            let spec =
                CallSpec::SubAgent { tool_call_id: "c1".to_owned(), arguments: None, budget: None, reported: None };
            let mut record = call("c1", "sub_agent", spec, None);
            record.call.attempt = 2;
            record.call.session_id = Some("s.kid".to_owned());
            record.turn_id = Some("t1".to_owned());
            session.put_call(record, &mut change);
            let report = |attempt: u32, turn: &str, from: &str| InboxItem::SubAgentFinished {
                call_id: "c1".to_owned(),
                ok: true,
                result: Some(format!("{attempt} {turn} {from}")),
                error: None,
                spawn: Some(SpawnTry { attempt, parent_turn: turn.to_owned() }),
                from: Some(from.to_owned()),
                spent: None,
            };
            for (seq, stale) in
                [report(1, "t1", "s.kid"), report(2, "t0", "s.kid"), report(2, "t1", "s.other")].into_iter().enumerate()
            {
                session.take_inbox(seq as u64, stale, ctx, &mut change);
                assert_eq!(session.calls["c1"].call.status, CallStatus::Pending, "report {seq} is of another try");
            }
            session.take_inbox(9, report(2, "t1", "s.kid"), ctx, &mut change);
            assert_eq!(session.calls["c1"].call.status, CallStatus::Completed);
        });
    }
}
