//! Applying what happens to a session: decisions, client inputs, settled
//! calls, inbox items, turn starts and ends. Each function mutates the
//! session and collects the same writes into a [`Change`].

use serde_json::{Value, json};
use subs_protocol::action::LlmCall;
use subs_protocol::event::{ClientToolCall, InterruptRaised, TurnDone, TurnFailed, TurnStarted};
use subs_protocol::trigger::{
    ClientAction as ActionTrigger, InterruptResumed, LlmFinished, SubAgentFinished, ToolExecute, ToolFinished,
};
use subs_protocol::{
    Action, CallKind, CallStatus, ClientContext, ClientInput, DecisionResponse, DraftMessage, ErrorCode, Handler,
    LlmHandler, LlmResponse, RetryPolicy, Role, SessionEvent, ToolHandler, Trigger,
};

use super::proposal::last_assistant_text;
use super::{Change, Session};
use crate::clock;
use crate::retry::RetryCap;
use crate::store::{
    CallRecord, CallSpec, ID_RULE, InboxItem, Op, OpenInterrupt, ParentLink, QueuedInput, SessionKey, SessionRecord,
    SessionStatus, StepRecord, StepStatus, Store, StoredTrigger, TurnRecord, TurnStart, TurnState, TurnStatus,
    valid_id,
};
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
    /// The tenants' session limits.
    pub quota: &'a (dyn SessionQuota + Sync),
}

/// Whether a tenant may have more sessions.
pub(crate) trait SessionQuota {
    /// Why `tenant` may not have `creating` more sessions than it has, if
    /// it may not.
    fn refuse(&self, tenant: &str, creating: u64) -> Option<String>;
}

/// How a call ended (or failed a try).
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// A tool's result.
    ToolOk(Value),
    /// An LLM reply.
    LlmOk(LlmResponse),
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
            created_ms: now_ms,
            updated_ms: now_ms,
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
                    return Err(InputError::Conflict(format!("no interrupt `{}` is waiting", resume.interrupt_id)));
                };
                self.record.interrupts.remove(i);
                self.push_step(
                    StoredTrigger::Plain {
                        trigger: Trigger::InterruptResumed(InterruptResumed {
                            interrupt_id: resume.interrupt_id,
                            payload: resume.payload,
                        }),
                    },
                    change,
                );
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

    fn check_client_settle(&self, id: &str, attempt: Option<u32>) -> Result<(), InputError> {
        let call = self
            .calls
            .get(id)
            .filter(|c| c.call.kind == CallKind::ToolCall && c.call.status == CallStatus::Pending)
            .ok_or_else(|| InputError::Conflict(format!("no tool call `{id}` is waiting for a result")))?;
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
                if ctx.store.turn(self.key(), id).await.map_err(|e| InputError::Store(e.to_string()))?.is_some() {
                    return Ok(Accepted { turn_id: Some(id.clone()), existing: true });
                }
                id.clone()
            }
            None => self.mint("turn"),
        };
        if self.record.turn.is_some() {
            // One turn at a time: this one starts when the open one ends.
            self.record.queued.push(QueuedInput { turn_id: turn_id.clone(), input });
            let record = TurnRecord { status: TurnStatus::Queued, data: None, started_ms: ctx.now_ms, ended_ms: None };
            change.batch.push(Op::PutTurn { session: self.key().clone(), turn_id: turn_id.clone(), record });
            return Ok(Accepted { turn_id: Some(turn_id), existing: false });
        }
        let start = self.reconcile_input(input)?;
        self.start_turn(turn_id.clone(), start, ctx, change)?;
        Ok(Accepted { turn_id: Some(turn_id), existing: false })
    }

    /// The client's view a `client.message` stands for: the active path,
    /// then `message`.
    fn view_with(&self, message: &DraftMessage) -> Vec<DraftMessage> {
        let mut view: Vec<DraftMessage> = self.path().into_iter().map(|m| m.clone().into()).collect();
        view.push(message.clone());
        view
    }

    /// What a turn-starting input starts, against the tree as it is now.
    fn reconcile_input(&self, input: ClientInput) -> Result<TurnStart, InputError> {
        let head = self.record.head_id.as_deref();
        let (reconciled, new, client) = match input {
            ClientInput::ClientMessage(m) => match self.tree.reconcile_appended(head, &m.message) {
                Some((reconciled, is_new)) => {
                    debug_assert_eq!(reconciled, self.tree.reconcile(&self.view_with(&m.message)));
                    let new = if is_new { vec![m.message] } else { Vec::new() };
                    (reconciled, new, ClientContext::default())
                }
                None => {
                    let mut view = self.view_with(&m.message);
                    let reconciled = self.tree.reconcile(&view);
                    let new = view.split_off(reconciled.new_from);
                    (reconciled, new, ClientContext::default())
                }
            },
            ClientInput::ClientMessages(m) => {
                let mut view = m.messages;
                let reconciled = self.tree.reconcile(&view);
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
                    tools::check_schema(schema).map_err(|e| {
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
        self.record.turn = Some(TurnState { turn_id: turn_id.clone(), client_tools, started_ms: ctx.now_ms });
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
        self.record_turn_end(turn, data.clone(), error.clone(), code, ctx, change);
        self.report_to_parent(data.as_ref(), error, change);
        self.start_queued(ctx, change);
    }

    /// Drops what is left of an ending turn: its calls (children of
    /// sub-agent calls are cancelled after the commit), its steps, its
    /// interrupts.
    fn drop_what_is_left(&mut self, change: &mut Change) {
        let leftover: Vec<String> = self.calls.keys().cloned().collect();
        for call_id in leftover {
            if let Some(call) = self.remove_call(&call_id, change)
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
    fn report_to_parent(&mut self, data: Option<&Value>, error: Option<String>, change: &mut Change) {
        let Some(ParentLink { session: parent, call_id }) = self.record.parent.clone() else { return };
        let result = match data {
            Some(d) if error.is_none() && !d.is_null() => Some(match d {
                Value::String(s) => s.clone(),
                other => subs_protocol::to_json(other),
            }),
            _ if error.is_none() => last_assistant_text(self),
            _ => None,
        };
        let parent = SessionKey::new(&self.record.key.tenant, parent);
        let item = InboxItem::SubAgentFinished { call_id, ok: error.is_none(), result, error };
        change.batch.push(Op::PushInbox { session: parent.clone(), item });
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
                let _ = self.start_turn(next.turn_id, start, ctx, change);
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
        trigger: &Trigger,
        ctx: &Ctx<'_>,
        change: &mut Change,
    ) {
        self.steps.retain(|(s, _)| *s != seq);
        if let Some(agent) = &decision.agent {
            self.record.agent = Some(agent.clone());
        }
        if let Some(state) = decision.state.clone().filter(|s| !s.is_null()) {
            self.record.state = state;
        }
        for message in decision.messages().iter().cloned() {
            let id = self.record_message(message, change);
            step.recorded.push(id);
        }
        for action in decision.actions().iter().cloned() {
            self.apply_action(action, trigger, ctx, change);
        }
        step.status = StepStatus::Applied;
        step.decision = Some(decision);
        change.batch.push(Op::PutStep { session: self.key().clone(), seq, record: step });
        self.record.first_open_step = self.steps.front().map_or(self.record.next.step, |(s, _)| *s);
        if self.turn_is_exhausted() {
            self.end_turn(None, ctx, change);
        }
    }

    fn apply_action(&mut self, action: Action, trigger: &Trigger, ctx: &Ctx<'_>, change: &mut Change) {
        let execute_id = |kind| match (kind, trigger) {
            (CallKind::ToolCall, Trigger::ToolExecute(t)) => Some(t.id.clone()),
            (CallKind::LlmCall, Trigger::LlmExecute(t)) => Some(t.id.clone()),
            _ => None,
        };
        match action {
            Action::LlmCall(call) => self.start_llm_call(call, ctx, change),
            Action::ToolCall(call) => self.start_tool_call(call, change),
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
            Action::SubAgentSpawn(spawn) => self.spawn_sub_agent(spawn, ctx, change),
            Action::MessageSend(send) => {
                if send.session_id == self.record.key.session {
                    self.record_message(send.message, change);
                } else {
                    let target = SessionKey::new(&self.record.key.tenant, &send.session_id);
                    let item = InboxItem::Message { message: send.message, from: self.record.key.session.clone() };
                    change.batch.push(Op::PushInbox { session: target.clone(), item });
                    change.wake.push(target);
                }
            }
            Action::Interrupt(interrupt) => {
                let interrupt_id = interrupt.interrupt_id.unwrap_or_else(|| self.mint("int"));
                self.record.interrupts.push(OpenInterrupt {
                    interrupt_id: interrupt_id.clone(),
                    reason: interrupt.reason.clone(),
                    payload: interrupt.payload.clone(),
                });
                let raised = InterruptRaised { interrupt_id, reason: interrupt.reason, payload: interrupt.payload };
                self.emit(SessionEvent::Interrupt(raised), change);
            }
            Action::Done(done) => self.end_turn(done.data, ctx, change),
        }
    }

    fn start_llm_call(&mut self, call: LlmCall, ctx: &Ctx<'_>, change: &mut Change) {
        let config = self.record.agent.clone();
        let id = call.id.clone().unwrap_or_else(|| self.mint("llm"));
        let handler = call.handler.or(config.as_ref().and_then(|c| c.handler)).unwrap_or(LlmHandler::Server);
        let stream = call.stream.or(config.as_ref().and_then(|c| c.stream)).unwrap_or(ctx.default_stream);
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
            id.clone(),
            CallKind::LlmCall,
            Some(handler.into()),
            Some(retry),
            CallSpec::Llm { action: resolved, system, format: config.as_ref().and_then(|c| c.format) },
        );
        record.call.stream = Some(stream);
        self.put_call(record, change);
        if handler == LlmHandler::Worker {
            self.push_step(StoredTrigger::LlmExecute { call_id: id, attempt: 1 }, change);
        }
    }

    fn start_tool_call(&mut self, call: subs_protocol::action::ToolCall, change: &mut Change) {
        let id = call.id.clone().unwrap_or_else(|| self.mint("call"));
        // A string is the model's raw argument text; anything else is the
        // arguments themselves.
        let raw = match &call.arguments {
            Value::String(text) => text.clone(),
            other => subs_protocol::to_json(other),
        };
        let tool = self.tool(&call.name).cloned();
        let input = tools::check_arguments(tool.as_ref().and_then(|t| t.input.as_ref()), &raw);
        let handler = call.handler.or(tool.as_ref().and_then(|t| t.handler)).unwrap_or(ToolHandler::Worker);
        let mut record = self.new_call(
            id.clone(),
            CallKind::ToolCall,
            Some(handler.into()),
            call.retry.clone(),
            CallSpec::Tool { arguments: raw.clone(), input: input.clone(), output: tool.and_then(|t| t.output) },
        );
        record.call.name = Some(call.name.clone());
        record.call.arguments = Some(raw.clone());
        self.put_call(record, change);
        self.dispatch_tool(&id, change);
    }

    /// Hands a pending tool call to whoever runs it: a `tool.execute` step
    /// for the worker, a `tool.call` event for clients.
    pub fn dispatch_tool(&mut self, call_id: &str, change: &mut Change) {
        let Some(call) = self.calls.get(call_id).cloned() else { return };
        let CallSpec::Tool { arguments, input, .. } = &call.spec else { return };
        let name = call.call.name.clone().unwrap_or_default();
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

    fn spawn_sub_agent(&mut self, spawn: subs_protocol::action::SubAgentSpawn, ctx: &Ctx<'_>, change: &mut Change) {
        // The child's first input is the model's arguments for this call.
        let arguments = self
            .path()
            .into_iter()
            .rev()
            .flat_map(|m| m.tool_calls.iter().flatten())
            .find(|c| c.id == spawn.tool_call_id)
            .map_or_else(|| "{}".to_owned(), |c| c.function.arguments.clone());
        let mut record = self.new_call(
            spawn.tool_call_id.clone(),
            CallKind::SubAgent,
            None,
            spawn.retry.clone(),
            CallSpec::SubAgent { tool_call_id: spawn.tool_call_id.clone() },
        );
        record.call.agent_id = Some(spawn.agent_id.clone());
        record.call.session_id = Some(spawn.session_id.clone());
        self.put_call(record, change);

        // Over the tenant's session limit the child is not created: the
        // call fails at once and the agent learns why from its
        // `sub_agent.finished`.
        if let Some(error) = ctx.quota.refuse(&self.record.key.tenant, change.created + 1) {
            let outcome = Outcome::SubAgent { ok: false, result: None, error: Some(error) };
            self.settle(&spawn.tool_call_id, outcome, ctx, change);
            return;
        }
        let child_key = SessionKey::new(&self.record.key.tenant, &spawn.session_id);
        let mut child = Session::fresh(child_key.clone(), spawn.agent_id, self.record.identity.clone(), ctx.now_ms);
        child.record.ancestry = self.record.ancestry.iter().cloned().chain([self.record.key.session.clone()]).collect();
        child.record.parent =
            Some(ParentLink { session: self.record.key.session.clone(), call_id: spawn.tool_call_id });
        change.batch.push(Op::PutSession(child.record));
        change.created += 1;
        let start = TurnStart::Messages {
            fork_id: None,
            new: vec![DraftMessage::new(Role::User, arguments)],
            client: ClientContext::default(),
        };
        change.batch.push(Op::PushInbox {
            session: child_key.clone(),
            item: InboxItem::Start { turn_id: "spawn".to_owned(), start },
        });
        change.wake.push(child_key);
    }

    // ---- calls ---------------------------------------------------------------

    /// Settles a call (or schedules its retry), producing the trigger that
    /// reports it.
    pub fn settle(&mut self, call_id: &str, outcome: Outcome, ctx: &Ctx<'_>, change: &mut Change) {
        let Some(call) = self.calls.get(call_id).cloned() else { return };
        let outcome = checked_outcome(&call, outcome);
        if self.schedule_retry(&call, &outcome, ctx, change) {
            return;
        }
        self.remove_call(call_id, change);
        if let Outcome::LlmOk(response) = &outcome {
            self.account(response.usage.as_ref(), response.cost.as_deref(), change);
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

    /// Schedules the next try of `call` when `outcome` is a retryable
    /// failure and the call's retry policy has tries left: after its
    /// backoff, or the provider's `retry_after`, whichever is later.
    fn schedule_retry(&mut self, call: &CallRecord, outcome: &Outcome, ctx: &Ctx<'_>, change: &mut Change) -> bool {
        let Outcome::Failed { retryable: true, retry_after_ms, .. } = outcome else { return false };
        let policy = call.retry.as_ref().map(|p| ctx.retry_cap.apply(p)).filter(|p| call.call.attempt <= p.max_retries);
        let Some(policy) = policy else { return false };
        let backoff = clock::secs_to_ms(policy.backoff_secs(call.call.attempt));
        let mut record = call.clone();
        record.call.status = CallStatus::RetryScheduled;
        record.retry_at_ms = Some(ctx.now_ms + backoff.max(retry_after_ms.unwrap_or(0)));
        self.put_call(record, change);
        true
    }

    /// Starts the next try of a call whose backoff has passed.
    pub fn retry_call(&mut self, call_id: &str, change: &mut Change) {
        let Some(mut record) = self.calls.get(call_id).cloned() else { return };
        record.call.attempt += 1;
        record.call.status = CallStatus::Pending;
        record.retry_at_ms = None;
        let is_worker_llm = record.call.kind == CallKind::LlmCall && record.call.handler == Some(Handler::Worker);
        let attempt = record.call.attempt;
        self.put_call(record, change);
        if is_worker_llm {
            self.push_step(StoredTrigger::LlmExecute { call_id: call_id.to_owned(), attempt }, change);
        } else {
            self.dispatch_tool(call_id, change);
        }
    }

    // ---- the inbox -----------------------------------------------------------

    /// Takes in one inbox item.
    pub fn take_inbox(&mut self, seq: u64, item: InboxItem, ctx: &Ctx<'_>, change: &mut Change) {
        change.batch.push(Op::DeleteInbox { session: self.key().clone(), seq });
        match item {
            InboxItem::SubAgentFinished { call_id, ok, result, error } => {
                if self.calls.contains_key(&call_id) {
                    self.settle(&call_id, Outcome::SubAgent { ok, result, error }, ctx, change);
                }
            }
            InboxItem::Message { message, .. } => {
                self.record_message(message, change);
            }
            InboxItem::Start { turn_id, start } => {
                if self.record.turn.is_some() {
                    tracing::warn!(session = %self.key(), "a sub-agent start arrived while a turn is open; ignored");
                } else {
                    let _ = self.start_turn(turn_id, start, ctx, change);
                }
            }
        }
    }
}

/// A tool's result checked against the tool's output schema: one that does
/// not match is a failure (not retried) naming what is wrong.
fn checked_outcome(call: &CallRecord, outcome: Outcome) -> Outcome {
    match (outcome, &call.spec) {
        (Outcome::ToolOk(result), CallSpec::Tool { output, .. }) => match tools::check_result(output.as_ref(), &result)
        {
            Ok(()) => Outcome::ToolOk(result),
            Err(e) => Outcome::Failed {
                error: format!("the result does not match the tool's output schema: {e}"),
                retryable: false,
                code: None,
                detail: Some(json!({"result": result})),
                retry_after_ms: None,
            },
        },
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
        (CallKind::LlmCall, Outcome::LlmOk(response)) => Trigger::LlmFinished(LlmFinished {
            id: call.call.id.clone(),
            ok: true,
            truncated: response.finish_reason.as_deref() == Some("length"),
            message: Some(DraftMessage {
                id: None,
                role: Role::Assistant,
                content: response.content.clone().filter(|c| !c.is_empty()).map(Into::into),
                tool_calls: response.tool_calls.clone().filter(|c| !c.is_empty()),
                tool_call_id: None,
                name: None,
            }),
            usage: response.usage,
            cost: response.cost,
            error: None,
            code: None,
            detail: None,
        }),
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

/// The named steps of ending a turn and settling a call, on sessions in
/// memory with a `MemStore` behind the context.
#[cfg(test)]
mod tests {
    use serde_json::json;
    use subs_protocol::ToolInput;

    use super::*;
    use crate::store::{CallRecord, MemStore};

    struct NoLimit;

    impl SessionQuota for NoLimit {
        fn refuse(&self, _: &str, _: u64) -> Option<String> {
            None
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
            quota: &NoLimit,
        })
    }

    /// A session with turn `t1` open.
    fn session() -> Session {
        let mut session = Session::fresh(SessionKey::new("acme", "s"), "agent".to_owned(), Default::default(), 1);
        session.record.turn = Some(TurnState { turn_id: "t1".to_owned(), client_tools: Vec::new(), started_ms: 5 });
        session
    }

    fn call(id: &str, kind: &str, spec: CallSpec, retry: Option<RetryPolicy>) -> CallRecord {
        let call = json!({"id": id, "kind": kind, "status": "pending", "attempt": 1, "name": "add", "session_id": format!("s.{id}")});
        CallRecord {
            call: serde_json::from_value(call).unwrap(),
            turn_id: Some("t1".to_owned()),
            retry,
            retry_at_ms: None,
            spec,
        }
    }

    fn tool_spec(output: Option<Value>) -> CallSpec {
        CallSpec::Tool { arguments: "{}".to_owned(), input: ToolInput::Valid { value: json!({}) }, output }
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
        let llm = call("c2", "llm_call", CallSpec::SubAgent { tool_call_id: "x".to_owned() }, None);
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
            assert!(session.calls.is_empty(), "settled, not retried");
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
            assert!(session.calls.is_empty());
            assert!(matches!(pushed_trigger(&session), Trigger::ToolFinished(done) if !done.ok));
        });
    }

    #[test]
    fn ending_a_turn_drops_its_calls_steps_and_interrupts_and_cancels_children() {
        with_ctx(|ctx| {
            let mut session = session();
            let mut change = Change::default();
            session.put_call(
                call("c1", "sub_agent", CallSpec::SubAgent { tool_call_id: "x".to_owned() }, None),
                &mut change,
            );
            session.settle("never", Outcome::ToolOk(json!(1)), ctx, &mut change);
            session.push_step(StoredTrigger::Plain { trigger: Trigger::SessionStart }, &mut change);
            session.record.interrupts.push(OpenInterrupt {
                interrupt_id: "i1".to_owned(),
                reason: "ask".to_owned(),
                payload: None,
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
                InboxItem::SubAgentFinished {
                    call_id: "pc".to_owned(),
                    ok: false,
                    result: None,
                    error: Some("it broke".to_owned())
                }
            );
            assert_eq!(change.wake, [SessionKey::new("acme", "p")]);
        });
    }
}
