//! The rules a decision must keep. A decision that breaks one is rejected
//! whole, nothing of it applied, and counts as a failed delivery; the error
//! says which rule and where.
//!
//! Checking costs time linear in the decision: its size is bounded first
//! (the tenant's [`DecisionBounds`]), and every "already used" check looks
//! the id up in a set rather than scanning what the session holds.

use std::collections::{HashMap, HashSet};

use subs_protocol::{Action, AgentConfig, CallKind, DecisionResponse, Handler, Trigger};

use super::Session;
use crate::config::DecisionBounds;
use crate::store::StoredTrigger;
use crate::store::{ID_RULE, NAME_RULE, SessionKey, Store, valid_id, valid_name};
use crate::tools;

/// What checking and applying a decision read of the trigger it answers:
/// its kind, and the call an execute trigger hands the worker. Read from
/// the stored trigger, it costs nothing however long the branch is: the
/// delivered trigger of a `client.messages` step carries the client's whole
/// view, and that of an `llm.execute` step the whole LLM request, which
/// neither reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answering<'a> {
    /// The trigger's `type`.
    pub kind: &'static str,
    /// For `tool.execute` and `llm.execute`: the kind, id and attempt of
    /// the call it runs.
    executes: Option<(CallKind, &'a str, u32)>,
}

impl<'a> Answering<'a> {
    /// What a decision answering `trigger` is checked against.
    pub fn of(trigger: &'a Trigger) -> Self {
        let executes = match trigger {
            Trigger::ToolExecute(t) => Some((CallKind::ToolCall, t.id.as_str(), t.attempt)),
            Trigger::LlmExecute(t) => Some((CallKind::LlmCall, t.id.as_str(), t.attempt)),
            _ => None,
        };
        Self { kind: trigger.kind(), executes }
    }

    /// The same as [`of`](Self::of) the trigger
    /// [`Session::trigger`] delivers for `stored`, without building it.
    pub fn stored(stored: &'a StoredTrigger) -> Self {
        match stored {
            StoredTrigger::Plain { trigger } => Self::of(trigger),
            StoredTrigger::ClientMessages { .. } => Self { kind: "client.messages", executes: None },
            StoredTrigger::LlmExecute { call_id, attempt } => {
                Self { kind: "llm.execute", executes: Some((CallKind::LlmCall, call_id.as_str(), *attempt)) }
            }
        }
    }

    /// The id and attempt of the call of `kind` the trigger runs, if any.
    pub fn executes(&self, kind: CallKind) -> Option<(&'a str, u32)> {
        self.executes.filter(|(k, _, _)| *k == kind).map(|(_, id, attempt)| (id, attempt))
    }
}

/// Checks `decision`, the answer to `trigger`, against the session and
/// the tenant's `bounds`.
pub(crate) async fn validate(
    session: &Session,
    trigger: &Answering<'_>,
    decision: &DecisionResponse,
    store: &dyn Store,
    bounds: &DecisionBounds,
) -> Result<(), String> {
    check_bounds(session, decision, bounds)?;
    if let Some(agent) = &decision.agent {
        check_config(agent).map_err(|e| format!("agent: {e}"))?;
    }
    let mut new_ids = HashSet::new();
    for (i, message) in decision.messages().iter().enumerate() {
        if let Some(id) = &message.id {
            if !valid_id(id) {
                return Err(format!("messages[{i}].id `{id}` is not a valid id ({ID_RULE})"));
            }
            if session.tree.contains(id) || !new_ids.insert(id.clone()) {
                return Err(format!("messages[{i}].id `{id}` is already recorded in this session"));
            }
        }
    }

    let mut settled = HashSet::new();
    let mut new_calls = HashSet::new();
    // Child sessions spawned: by the calls in flight (made once, at the
    // first spawn), and by this decision.
    let mut children: Option<HashSet<&str>> = None;
    let mut spawned = HashSet::new();
    // Interrupts open, and those this decision opens.
    let mut interrupts: Option<HashSet<&str>> = None;
    // Each session sent to, and whether it is of the family: one read
    // of the store for each, however many messages go to it.
    let mut family: HashMap<&str, bool> = HashMap::new();
    let mut done_at = None;
    let mut interrupt_at = None;
    for (i, action) in decision.actions().iter().enumerate() {
        let at = |rule: String| format!("actions[{i}] ({}): {rule}", action.kind());
        if let Some(done) = done_at {
            return Err(at(format!("no action may follow `done` (actions[{done}])")));
        }
        match action {
            Action::LlmCall(call) => {
                if let Some(id) = &call.id {
                    check_new_call_id(session, id, &mut new_calls).map_err(at)?;
                }
            }
            Action::ToolCall(call) => {
                if call.name.is_empty() {
                    return Err(at("the tool name is empty".to_owned()));
                }
                if let Some(id) = &call.id {
                    check_new_call_id(session, id, &mut new_calls).map_err(at)?;
                }
            }
            Action::ToolResult(r) => {
                check_settle(session, trigger, r.id.as_deref(), r.attempt, CallKind::ToolCall, &mut settled)
                    .map_err(at)?;
            }
            Action::ToolError(e) => {
                let id = check_settle(session, trigger, e.id.as_deref(), e.attempt, CallKind::ToolCall, &mut settled)
                    .map_err(at)?;
                check_queued_error(session, &id, e.retryable).map_err(at)?;
            }
            Action::LlmResult(r) => {
                let id = check_settle(session, trigger, r.id.as_deref(), r.attempt, CallKind::LlmCall, &mut settled)
                    .map_err(at)?;
                match session.read_llm_response(&id, &r.response) {
                    Ok(done) => check_stated_cost(&done.response).map_err(at)?,
                    Err(e) => return Err(at(format!("the response of call `{id}` {e}"))),
                }
            }
            Action::LlmError(e) => {
                let id = check_settle(session, trigger, e.id.as_deref(), e.attempt, CallKind::LlmCall, &mut settled)
                    .map_err(at)?;
                check_queued_error(session, &id, e.retryable).map_err(at)?;
            }
            Action::SubAgentSpawn(spawn) => {
                // The config the decision sets, when it sets one: its
                // actions run under it.
                let config = decision.agent.as_ref().or(session.record.agent.as_deref());
                let declared = config.and_then(|a| a.sub_agents.as_deref()).unwrap_or_default();
                if !declared.iter().any(|s| s.id == spawn.agent_id) {
                    let names: Vec<&str> = declared.iter().map(|s| s.id.as_str()).collect();
                    return Err(at(format!(
                        "`{}` is not a sub-agent of this agent (its config declares: {})",
                        spawn.agent_id,
                        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                    )));
                }
                if !valid_id(&spawn.session_id) {
                    return Err(at(format!("session_id `{}` is not a valid id ({ID_RULE})", spawn.session_id)));
                }
                let child = SessionKey::new(&session.record.key.tenant, &spawn.session_id);
                let children = children.get_or_insert_with(|| {
                    session
                        .open_calls()
                        .filter(|c| c.call.kind == CallKind::SubAgent)
                        .filter_map(|c| c.call.session_id.as_deref())
                        .collect()
                });
                if !spawned.insert(spawn.session_id.as_str()) {
                    return Err(at(format!("session `{}` is spawned twice", spawn.session_id)));
                }
                if children.contains(spawn.session_id.as_str())
                    || store.session(&child).await.map_err(|e| at(e.to_string()))?.is_some()
                {
                    return Err(at(format!("session `{}` already exists", spawn.session_id)));
                }
                check_new_call_id(session, &spawn.tool_call_id, &mut new_calls).map_err(at)?;
            }
            Action::MessageSend(send) => {
                if send.session_id != session.record.key.session {
                    let target = send.session_id.as_str();
                    let known = match family.get(target) {
                        Some(known) => *known,
                        None => {
                            let known = in_family(session, target, store).await.map_err(at)?;
                            family.insert(target, known);
                            known
                        }
                    };
                    if !known {
                        return Err(at(format!(
                            "session `{target}` does not exist or is not in this session's family"
                        )));
                    }
                }
            }
            Action::Interrupt(interrupt) => {
                interrupt_at.get_or_insert(i);
                if let Some(id) = &interrupt.interrupt_id {
                    if !valid_id(id) {
                        return Err(at(format!("interrupt_id `{id}` is not a valid id ({ID_RULE})")));
                    }
                    let open = interrupts.get_or_insert_with(|| {
                        session.record.interrupts.iter().map(|i| i.interrupt_id.as_str()).collect::<HashSet<_>>()
                    });
                    if !open.insert(id.as_str()) {
                        return Err(at(format!("interrupt `{id}` is already open")));
                    }
                }
                // Refused here, not at resume: an unusable schema would
                // refuse every payload and leave the turn paused for good.
                if let Some(schema) = &interrupt.resume_schema
                    && let Err(e) = tools::check_schema(schema)
                {
                    return Err(at(format!("resume_schema is not a usable JSON Schema: {e}")));
                }
            }
            Action::Done(_) => {
                if let Some(interrupt) = interrupt_at {
                    return Err(at(format!(
                        "a decision that opens an interrupt (actions[{interrupt}]) cannot end the turn: the \
                         interrupt pauses the turn until it is resumed"
                    )));
                }
                done_at = Some(i);
            }
        }
    }

    // The call an execute trigger hands the worker must be settled by the
    // decision that answers it: nothing else would ever settle it.
    match trigger.executes {
        Some((CallKind::ToolCall, id, _)) if !settled.contains(id) => {
            Err(format!("a tool.execute decision must settle its call `{id}` with tool.result or tool.error"))
        }
        Some((CallKind::LlmCall, id, _)) if !settled.contains(id) => {
            Err(format!("an llm.execute decision must settle its call `{id}` with llm.result or llm.error"))
        }
        _ => Ok(()),
    }
}

/// A settling action's call: in flight, of the right kind, on the attempt
/// it names, settled once. Returns the call id.
fn check_settle(
    session: &Session,
    trigger: &Answering<'_>,
    id: Option<&str>,
    attempt: Option<u32>,
    kind: CallKind,
    settled: &mut HashSet<String>,
) -> Result<String, String> {
    let execute_kind = if kind == CallKind::ToolCall { "tool.execute" } else { "llm.execute" };
    let execute = trigger.executes(kind);
    let (id, default_attempt) = match (id, execute) {
        (Some(id), Some((exec_id, exec_attempt))) if id == exec_id => (id, Some(exec_attempt)),
        (Some(id), _) => (id, None),
        (None, Some((exec_id, exec_attempt))) => (exec_id, Some(exec_attempt)),
        (None, None) => {
            return Err(format!(
                "without an id it settles the call of a {execute_kind} trigger, but this decision answers {}",
                trigger.kind
            ));
        }
    };
    let Some(call) = session.open_call(id) else {
        return Err(format!("call `{id}` is not in flight"));
    };
    if call.call.kind != kind {
        return Err(format!("call `{id}` is a {:?} call, not a {kind:?} call", call.call.kind));
    }
    if kind == CallKind::LlmCall && call.call.handler != Some(Handler::Worker) {
        return Err(format!(
            "call `{id}` is run by the engine; only worker-handled LLM calls are settled by decisions"
        ));
    }
    let attempt = attempt.or(default_attempt).unwrap_or(call.call.attempt);
    if attempt != call.call.attempt {
        return Err(format!("call `{id}` is on attempt {}, not {attempt}", call.call.attempt));
    }
    if !settled.insert(id.to_owned()) {
        return Err(format!("call `{id}` is settled twice"));
    }
    Ok(id.to_owned())
}

/// A call queued behind an open interrupt may be settled before it
/// starts (a denied approval: the call never runs), but only for good: a
/// retryable error would start a new try while the branch is paused.
fn check_queued_error(session: &Session, id: &str, retryable: Option<bool>) -> Result<(), String> {
    let queued = session.open_call(id).is_some_and(|c| c.call.status == subs_protocol::CallStatus::Queued);
    if queued && retryable == Some(true) {
        return Err(format!(
            "call `{id}` is queued behind an open interrupt and has not started: it may be settled, but not with a \
             retryable error"
        ));
    }
    Ok(())
}

/// What a worker says an LLM call cost and used is added to the session's
/// and the tenant's totals, which budgets are held to: a `cost` is a
/// finite decimal amount of dollars, zero or more, and every number in
/// `usage` is zero or more, so that no reply takes spend or usage back.
fn check_stated_cost(response: &subs_protocol::LlmResponse) -> Result<(), String> {
    if let Some(cost) = &response.cost
        && let Err(e) = cost.parse::<crate::model::Money>()
    {
        return Err(format!("response.cost: {e}"));
    }
    match &response.usage {
        Some(usage) => check_usage(usage, &mut "response.usage".to_owned()),
        None => Ok(()),
    }
}

/// Every number in `usage` (nested objects and arrays too) is zero or
/// more; `path` names where, for the error.
fn check_usage(usage: &serde_json::Value, path: &mut String) -> Result<(), String> {
    use serde_json::Value;
    match usage {
        Value::Number(n) if n.as_f64().is_some_and(|n| n < 0.0) => {
            Err(format!("{path}: {n} is negative; usage counts are zero or more"))
        }
        Value::Object(fields) => fields.iter().try_for_each(|(key, value)| {
            let len = path.len();
            path.push('.');
            path.push_str(key);
            let checked = check_usage(value, path);
            path.truncate(len);
            checked
        }),
        Value::Array(items) => items.iter().enumerate().try_for_each(|(i, value)| {
            let len = path.len();
            path.push_str(&format!("[{i}]"));
            let checked = check_usage(value, path);
            path.truncate(len);
            checked
        }),
        _ => Ok(()),
    }
}

fn check_new_call_id(session: &Session, id: &str, new_calls: &mut HashSet<String>) -> Result<(), String> {
    if !valid_id(id) {
        return Err(format!("call id `{id}` is not a valid id ({ID_RULE})"));
    }
    if session.open_call(id).is_some() || !new_calls.insert(id.to_owned()) {
        return Err(format!("a call with id `{id}` is already in flight"));
    }
    Ok(())
}

/// Whether `message.send` may reach `target`: a session of the family of
/// this one (sessions with the same root ancestor, of the same tenant).
async fn in_family(session: &Session, target: &str, store: &dyn Store) -> Result<bool, String> {
    if !valid_id(target) {
        return Ok(false);
    }
    let key = SessionKey::new(&session.record.key.tenant, target);
    let Some(other) = store.session(&key).await.map_err(|e| e.to_string())? else { return Ok(false) };
    let root = |ancestry: &[String], own: &str| ancestry.first().cloned().unwrap_or_else(|| own.to_owned());
    Ok(root(&other.ancestry, target) == root(&session.record.ancestry, &session.record.key.session))
}

/// The tenant's bounds on one decision: its actions, and the calls the
/// open turn would hold with those the decision starts. Checked before
/// anything else, so that a decision past them costs no more than it took
/// to read.
fn check_bounds(session: &Session, decision: &DecisionResponse, bounds: &DecisionBounds) -> Result<(), String> {
    let actions = decision.actions();
    let max = bounds.max_actions_per_decision;
    if actions.len() > max as usize {
        return Err(format!(
            "the decision has {} actions, more than the {max} one decision may have (`max_actions_per_decision`)",
            actions.len()
        ));
    }
    let starts = actions
        .iter()
        .filter(|a| matches!(a, Action::LlmCall(_) | Action::ToolCall(_) | Action::SubAgentSpawn(_)))
        .count();
    let (held, max) = (session.calls.len(), bounds.max_calls_per_turn);
    if starts > 0 && held.saturating_add(starts) > max as usize {
        return Err(format!(
            "the decision starts {starts} calls, and the turn holds {held}: more than the {max} calls one turn may \
             hold (`max_calls_per_turn`)"
        ));
    }
    Ok(())
}

/// A config the engine can run: consistent handler and format, valid and
/// unique tool and sub-agent names, usable JSON Schemas.
pub(crate) fn check_config(agent: &AgentConfig) -> Result<(), String> {
    if agent.model.is_empty() {
        return Err("model is empty".to_owned());
    }
    if agent.format.is_some() && agent.handler != Some(subs_protocol::LlmHandler::Worker) {
        return Err("format requires handler `worker` (the engine runs LLM calls in its own format)".to_owned());
    }
    let mut names = HashSet::new();
    for (i, tool) in agent.tools.iter().flatten().enumerate() {
        if tool.name.is_empty() || tool.name.len() > 128 {
            return Err(format!("tools[{i}].name must be 1 to 128 characters"));
        }
        if !names.insert(tool.name.as_str()) {
            return Err(format!("tools[{i}].name `{}` is declared twice", tool.name));
        }
        for (field, schema) in [("input", &tool.input), ("output", &tool.output)] {
            if let Some(schema) = schema {
                tools::check_tool_schema(schema)
                    .map_err(|e| format!("tools[{i}].{field} is not a usable JSON Schema: {e}"))?;
            }
        }
    }
    for (i, sub) in agent.sub_agents.iter().flatten().enumerate() {
        if !valid_name(&sub.id) {
            return Err(format!("sub_agents[{i}].id `{}` is not a valid agent id ({NAME_RULE})", sub.id));
        }
        if !names.insert(sub.id.as_str()) {
            return Err(format!("sub_agents[{i}].id `{}` is also the name of a tool", sub.id));
        }
    }
    Ok(())
}

/// What a worker states an LLM call cost and used.
#[cfg(test)]
mod money {
    use serde_json::{Value, json};
    use subs_protocol::action::{LlmCall, LlmResult};
    use subs_protocol::{Action, DecisionResponse, Trigger};

    use super::*;
    use crate::store::{CallRecord, CallSpec, MemStore};

    /// A session with a worker-handled LLM call `l1` in flight.
    fn session() -> Session {
        let mut session = Session::fresh(SessionKey::new("t", "s"), "agent".to_owned(), Default::default(), 1);
        let call = json!({"id": "l1", "kind": "llm_call", "status": "pending", "attempt": 1, "handler": "worker"});
        let spec = CallSpec::Llm { action: LlmCall::default().into(), system: None, format: None };
        let record = CallRecord {
            call: serde_json::from_value(call).unwrap(),
            order: 0,
            deadline_ms: None,
            turn_id: None,
            retry: None,
            retry_at_ms: None,
            spec,
            started_ms: None,
            span: None,
        };
        session.calls.insert("l1".to_owned(), record);
        session
    }

    fn stating(cost: Value, usage: Value) -> Result<(), String> {
        let response = json!({"model": "m", "content": "hi", "cost": cost, "usage": usage});
        let decision = DecisionResponse::new().with_action(Action::LlmResult(LlmResult {
            id: Some("l1".to_owned()),
            attempt: None,
            response,
        }));
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(validate(
            &session(),
            &Answering::of(&Trigger::SessionStart),
            &decision,
            &MemStore::new(),
            &Default::default(),
        ))
    }

    #[test]
    fn a_stated_cost_is_a_decimal_amount_of_zero_or_more() {
        let usage = json!({"prompt_tokens": 3, "completion_tokens": 1, "cost": 0.0012});
        for cost in ["0", "0.0042", "12"] {
            stating(json!(cost), usage.clone()).unwrap_or_else(|e| panic!("{cost}: {e}"));
        }
        for (cost, why) in [
            ("-1500", "negative"),
            ("-0.000001", "negative"),
            ("NaN", "not a decimal"),
            ("Infinity", "not a decimal"),
            ("1e3", "not a decimal"),
            ("", "not a decimal"),
        ] {
            let refused = stating(json!(cost), usage.clone()).expect_err(cost);
            assert!(refused.starts_with("actions[0] (llm.result): response.cost:"), "{cost}: {refused}");
            assert!(refused.contains(why), "{cost}: {refused}");
        }
    }

    #[test]
    fn stated_usage_is_never_below_zero_and_the_field_is_named() {
        let refused = stating(json!("0"), json!({"prompt_tokens": -5})).unwrap_err();
        assert!(refused.contains("response.usage.prompt_tokens: -5 is negative"), "{refused}");
        let nested = json!({"prompt_tokens_details": {"cached_tokens": -1}});
        let refused = stating(json!("0"), nested).unwrap_err();
        assert!(refused.contains("response.usage.prompt_tokens_details.cached_tokens"), "{refused}");
        let refused = stating(json!("0"), json!({"parts": [1, -0.5]})).unwrap_err();
        assert!(refused.contains("response.usage.parts[1]"), "{refused}");
        stating(json!("0"), json!({"prompt_tokens": 0, "model": "x", "parts": [1, 2.5]})).expect("zero or more");
    }

    #[test]
    fn a_stored_trigger_is_answered_as_the_trigger_it_delivers() {
        use subs_protocol::trigger::{ToolExecute, ToolInput};
        use subs_protocol::{DraftMessage, Message, Role};

        use crate::store::{MessageRecord, StoredTrigger};

        let mut session = session();
        for (i, parent) in [(1, None), (2, Some("m1"))] {
            let message = Message {
                id: format!("m{i}"),
                role: Role::User,
                content: Some(format!("text {i}").into()),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            };
            session.tree.insert(MessageRecord { message: message.into(), parent_id: parent.map(str::to_owned) });
        }
        let execute = Trigger::ToolExecute(ToolExecute {
            id: "t1".to_owned(),
            name: "add".to_owned(),
            arguments: "{}".to_owned(),
            input: ToolInput::Valid { value: json!({}) },
            attempt: 2,
            deadline: None,
        });
        let stored = [
            StoredTrigger::Plain { trigger: Trigger::SessionStart },
            StoredTrigger::Plain { trigger: execute },
            StoredTrigger::ClientMessages {
                fork_id: Some("m2".to_owned()),
                new: vec![DraftMessage::user("new")],
                client: Default::default(),
            },
            StoredTrigger::LlmExecute { call_id: "l1".to_owned(), attempt: 3 },
            StoredTrigger::LlmExecute { call_id: "gone".to_owned(), attempt: 1 },
        ];
        for stored in &stored {
            let delivered = session.trigger(stored);
            assert_eq!(Answering::stored(stored), Answering::of(&delivered), "{stored:?}");
        }
        assert_eq!(Answering::stored(&stored[1]).executes(CallKind::ToolCall), Some(("t1", 2)));
        assert_eq!(Answering::stored(&stored[1]).executes(CallKind::LlmCall), None);
        assert_eq!(Answering::stored(&stored[3]).executes(CallKind::LlmCall), Some(("l1", 3)));
    }
}

/// The tenant's bounds on a decision, and the checks that look ids up
/// instead of scanning what the session holds.
#[cfg(test)]
mod bounds {
    use serde_json::{Value, json};
    use subs_protocol::{AgentConfig, SubAgent};

    use super::*;
    use crate::store::{CallRecord, CallSpec, MemStore};

    /// A session of an agent with sub-agent `helper`, holding `open`
    /// client tool calls in flight (`o0`, `o1`, …).
    fn session(open: usize) -> Session {
        let mut session = Session::fresh(SessionKey::new("t", "s"), "agent".to_owned(), Default::default(), 1);
        let mut agent = AgentConfig::new("subs/offline");
        agent.sub_agents = Some(vec![SubAgent { id: "helper".to_owned(), description: None }]);
        session.record.agent = Some(agent.into());
        for n in 0..open {
            let id = format!("o{n}");
            let call = json!({"id": id, "kind": "tool_call", "status": "pending", "attempt": 1, "handler": "client"});
            let spec = CallSpec::Tool {
                arguments: "{}".to_owned(),
                input: subs_protocol::ToolInput::Valid { value: json!({}) },
                output: None,
            };
            let record = CallRecord {
                call: serde_json::from_value(call).unwrap(),
                order: n as u64,
                deadline_ms: None,
                turn_id: None,
                retry: None,
                retry_at_ms: None,
                spec,
                started_ms: None,
                span: None,
            };
            session.calls.insert(id, record);
        }
        session
    }

    fn tool_call(id: &str) -> Value {
        json!({"type": "tool.call", "id": id, "name": "t", "arguments": {}, "handler": "client"})
    }

    fn checked(session: &Session, actions: Vec<Value>, bounds: DecisionBounds) -> Result<(), String> {
        let decision: DecisionResponse = serde_json::from_value(json!({"actions": actions})).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(validate(
            session,
            &Answering::of(&Trigger::SessionStart),
            &decision,
            &MemStore::new(),
            &bounds,
        ))
    }

    const ACTIONS: DecisionBounds =
        DecisionBounds { max_actions_per_decision: 3, max_calls_per_turn: 100, stream_by_default: None };

    #[test]
    fn a_decision_past_max_actions_per_decision_is_refused_naming_the_bound() {
        let calls = |n: usize| (0..n).map(|n| tool_call(&format!("c{n}"))).collect::<Vec<_>>();
        checked(&session(0), calls(3), ACTIONS).expect("three actions, the bound");
        let refused = checked(&session(0), calls(4), ACTIONS).unwrap_err();
        assert_eq!(
            refused,
            "the decision has 4 actions, more than the 3 one decision may have (`max_actions_per_decision`)"
        );
        // Every kind of action counts, not only the calls.
        let sends: Vec<Value> =
            (0..4).map(|_| json!({"type": "message.send", "session_id": "s", "message": {"role": "user"}})).collect();
        let refused = checked(&session(0), sends, ACTIONS).unwrap_err();
        assert!(refused.contains("`max_actions_per_decision`"), "{refused}");
    }

    #[test]
    fn the_bound_is_checked_before_any_action_is() {
        // Past the bound, the decision is refused for its size, though
        // its first action breaks a rule too.
        let mut actions = vec![json!({"type": "tool.result", "id": "nope", "result": 1})];
        actions.extend((0..3).map(|n| tool_call(&format!("c{n}"))));
        let refused = checked(&session(0), actions, ACTIONS).unwrap_err();
        assert!(refused.starts_with("the decision has 4 actions"), "{refused}");
    }

    #[test]
    fn calls_past_max_calls_per_turn_are_refused_and_settling_is_not() {
        let bounds =
            DecisionBounds { max_actions_per_decision: 100, max_calls_per_turn: 5, ..DecisionBounds::default() };
        let full = session(4);
        checked(&full, vec![tool_call("c0")], bounds).expect("the fifth call of the turn");
        let spawn =
            json!({"type": "sub_agent.spawn", "session_id": "child", "agent_id": "helper", "tool_call_id": "x"});
        let refused = checked(&full, vec![tool_call("c0"), spawn], bounds).unwrap_err();
        assert_eq!(
            refused,
            "the decision starts 2 calls, and the turn holds 4: more than the 5 calls one turn may hold \
             (`max_calls_per_turn`)"
        );
        // A turn at its bound still settles what it holds, and still ends.
        let full = session(5);
        let settle = json!({"type": "tool.result", "id": "o0", "result": 1});
        let messages = json!({"type": "message.send", "session_id": "s", "message": {"role": "user"}});
        checked(&full, vec![settle, messages, json!({"type": "done"})], bounds).expect("nothing started");
        let refused = checked(&full, vec![json!({"type": "llm.call"})], bounds).unwrap_err();
        assert!(refused.contains("`max_calls_per_turn`"), "{refused}");
    }

    #[test]
    fn ids_used_twice_are_found_among_many_by_lookup() {
        let bounds = DecisionBounds {
            max_actions_per_decision: 50_000,
            max_calls_per_turn: 100_000,
            ..DecisionBounds::default()
        };
        // 20,000 calls in flight and 20,000 new ones: a scan per action
        // would make 400 million comparisons of this; sets make 40,000
        // lookups.
        let many = session(20_000);
        let mut actions: Vec<Value> = (0..20_000).map(|n| tool_call(&format!("c{n}"))).collect();
        checked(&many, actions.clone(), bounds).expect("20,000 new calls");
        actions.push(tool_call("o19999"));
        let refused = checked(&many, actions.clone(), bounds).unwrap_err();
        assert_eq!(refused, "actions[20000] (tool.call): a call with id `o19999` is already in flight");
        *actions.last_mut().unwrap() = tool_call("c7");
        let refused = checked(&many, actions, bounds).unwrap_err();
        assert_eq!(refused, "actions[20000] (tool.call): a call with id `c7` is already in flight");
    }

    #[test]
    fn a_child_session_or_an_interrupt_is_not_opened_twice_by_one_decision() {
        let spawn = |tool: &str| json!({"type": "sub_agent.spawn", "session_id": "child", "agent_id": "helper", "tool_call_id": tool});
        let refused = checked(&session(0), vec![spawn("x"), spawn("y")], ACTIONS).unwrap_err();
        assert_eq!(refused, "actions[1] (sub_agent.spawn): session `child` is spawned twice");
        let interrupt = json!({"type": "interrupt", "interrupt_id": "i1", "reason": "ok?"});
        let refused = checked(&session(0), vec![interrupt.clone(), interrupt.clone()], ACTIONS).unwrap_err();
        assert_eq!(refused, "actions[1] (interrupt): interrupt `i1` is already open");
        let mut open = session(0);
        open.record.interrupts.push(crate::store::OpenInterrupt {
            interrupt_id: "i1".to_owned(),
            reason: "earlier".to_owned(),
            payload: None,
            resume_schema: None,
        });
        let refused = checked(&open, vec![interrupt], ACTIONS).unwrap_err();
        assert_eq!(refused, "actions[0] (interrupt): interrupt `i1` is already open");
    }

    #[test]
    fn messages_to_a_session_outside_the_family_are_refused_each_time() {
        let send = |to: &str| json!({"type": "message.send", "session_id": to, "message": {"role": "user"}});
        let refused = checked(&session(0), vec![send("s"), send("elsewhere"), send("elsewhere")], ACTIONS).unwrap_err();
        assert_eq!(
            refused,
            "actions[1] (message.send): session `elsewhere` does not exist or is not in this session's family"
        );
    }
}

/// Fuzzing of the rules: whatever a worker decides, answering whatever
/// trigger, validation accepts it or refuses it with a reason, and never
/// panics. Random decisions and triggers (the protocol's proptest
/// strategies: every action and field shape, ids valid and not, JSON of
/// any kind) against a session that has a conversation, an agent config
/// with tools and a sub-agent, and a store to look sub-agents up in.
#[cfg(test)]
mod fuzz {
    use proptest::test_runner::{Config, TestRunner};
    use subs_protocol::{AgentConfig, AgentTool, Message, Role, SubAgent, arbitrary};

    use super::*;
    use crate::store::{MemStore, MessageRecord};

    fn session() -> Session {
        let key = SessionKey::new("t", "s");
        let mut session = Session::fresh(key, "agent".to_owned(), Default::default(), 1);
        let mut agent = AgentConfig::new("subs/offline");
        agent.tools = Some(vec![AgentTool::new("add")]);
        agent.sub_agents = Some(vec![SubAgent { id: "helper".to_owned(), description: None }]);
        session.record.agent = Some(agent.into());
        let mut parent = None;
        for (id, role) in [("m1", Role::User), ("m2", Role::Assistant)] {
            let message = Message {
                id: id.to_owned(),
                role,
                content: Some(subs_protocol::Content::Text(format!("{id} text"))),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            };
            session.tree.insert(MessageRecord { message: message.into(), parent_id: parent.replace(id.to_owned()) });
        }
        session.record.head_id = parent;
        session
    }

    #[test]
    fn any_decision_to_any_trigger_is_accepted_or_refused_with_a_reason() {
        let store = MemStore::new();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let session = session();
        let cases = std::env::var("FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(3000);
        let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
        let (accepted, refused) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
        runner
            .run(&(arbitrary::trigger(), arbitrary::decision_response()), |(trigger, decision)| {
                match runtime.block_on(validate(
                    &session,
                    &Answering::of(&trigger),
                    &decision,
                    &store,
                    &Default::default(),
                )) {
                    Ok(()) => accepted.set(accepted.get() + 1),
                    Err(reason) => {
                        assert!(!reason.trim().is_empty(), "a refusal without a reason for {decision:?}");
                        refused.set(refused.get() + 1);
                    }
                }
                Ok(())
            })
            .unwrap();
        // Both outcomes are reached, or the generator is not exercising
        // the rules.
        let (accepted, refused) = (accepted.get(), refused.get());
        eprintln!("{cases} decisions: {accepted} accepted, {refused} refused");
        assert!(accepted > 0 && refused > 0, "accepted {accepted}, refused {refused}");
    }
}
