//! The rules a decision must keep. A decision that breaks one is rejected
//! whole, nothing of it applied, and counts as a failed delivery; the error
//! says which rule and where.

use std::collections::HashSet;

use subs_protocol::{Action, AgentConfig, CallKind, DecisionResponse, Handler, Trigger};

use super::Session;
use crate::store::{ID_RULE, NAME_RULE, SessionKey, Store, valid_id, valid_name};
use crate::tools;

/// Checks `decision`, the answer to `trigger`, against the session.
pub(crate) async fn validate(
    session: &Session,
    trigger: &Trigger,
    decision: &DecisionResponse,
    store: &dyn Store,
) -> Result<(), String> {
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
                check_settle(session, trigger, e.id.as_deref(), e.attempt, CallKind::ToolCall, &mut settled)
                    .map_err(at)?;
            }
            Action::LlmResult(r) => {
                let id = check_settle(session, trigger, r.id.as_deref(), r.attempt, CallKind::LlmCall, &mut settled)
                    .map_err(at)?;
                match session.read_llm_response(&id, &r.response) {
                    Ok(response) => check_stated_cost(&response).map_err(at)?,
                    Err(e) => return Err(at(format!("the response of call `{id}` {e}"))),
                }
            }
            Action::LlmError(e) => {
                check_settle(session, trigger, e.id.as_deref(), e.attempt, CallKind::LlmCall, &mut settled)
                    .map_err(at)?;
            }
            Action::SubAgentSpawn(spawn) => {
                let declared = session.record.agent.as_ref().and_then(|a| a.sub_agents.as_deref()).unwrap_or_default();
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
                let queued = session.open_calls().any(|c| c.call.session_id.as_deref() == Some(&spawn.session_id));
                if queued || store.session(&child).await.map_err(|e| at(e.to_string()))?.is_some() {
                    return Err(at(format!("session `{}` already exists", spawn.session_id)));
                }
                check_new_call_id(session, &spawn.tool_call_id, &mut new_calls).map_err(at)?;
            }
            Action::MessageSend(send) => {
                if send.session_id != session.record.key.session {
                    check_family(session, &send.session_id, store).await.map_err(at)?;
                }
            }
            Action::Interrupt(interrupt) => {
                interrupt_at.get_or_insert(i);
                if let Some(id) = &interrupt.interrupt_id {
                    if !valid_id(id) {
                        return Err(at(format!("interrupt_id `{id}` is not a valid id ({ID_RULE})")));
                    }
                    if session.record.interrupts.iter().any(|i| &i.interrupt_id == id) {
                        return Err(at(format!("interrupt `{id}` is already open")));
                    }
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
    match trigger {
        Trigger::ToolExecute(t) if !settled.contains(&t.id) => {
            Err(format!("a tool.execute decision must settle its call `{}` with tool.result or tool.error", t.id))
        }
        Trigger::LlmExecute(t) if !settled.contains(&t.id) => {
            Err(format!("an llm.execute decision must settle its call `{}` with llm.result or llm.error", t.id))
        }
        _ => Ok(()),
    }
}

/// A settling action's call: in flight, of the right kind, on the attempt
/// it names, settled once. Returns the call id.
fn check_settle(
    session: &Session,
    trigger: &Trigger,
    id: Option<&str>,
    attempt: Option<u32>,
    kind: CallKind,
    settled: &mut HashSet<String>,
) -> Result<String, String> {
    let (execute_kind, execute) = match (kind, trigger) {
        (CallKind::ToolCall, Trigger::ToolExecute(t)) => ("tool.execute", Some((t.id.as_str(), t.attempt))),
        (CallKind::LlmCall, Trigger::LlmExecute(t)) => ("llm.execute", Some((t.id.as_str(), t.attempt))),
        (CallKind::ToolCall, _) => ("tool.execute", None),
        _ => ("llm.execute", None),
    };
    let (id, default_attempt) = match (id, execute) {
        (Some(id), Some((exec_id, exec_attempt))) if id == exec_id => (id, Some(exec_attempt)),
        (Some(id), _) => (id, None),
        (None, Some((exec_id, exec_attempt))) => (exec_id, Some(exec_attempt)),
        (None, None) => {
            return Err(format!(
                "without an id it settles the call of a {execute_kind} trigger, but this decision answers {}",
                trigger.kind()
            ));
        }
    };
    let Some(call) = session.open_call(id) else {
        return Err(format!("call `{id}` is not in flight"));
    };
    if call.call.status == subs_protocol::CallStatus::Queued {
        return Err(format!("call `{id}` is queued behind an open interrupt and has not started"));
    }
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

/// `message.send` reaches this session or one of its family: sessions with
/// the same root ancestor, of the same tenant.
async fn check_family(session: &Session, target: &str, store: &dyn Store) -> Result<(), String> {
    let missing = || format!("session `{target}` does not exist or is not in this session's family");
    if !valid_id(target) {
        return Err(missing());
    }
    let key = SessionKey::new(&session.record.key.tenant, target);
    let Some(other) = store.session(&key).await.map_err(|e| e.to_string())? else { return Err(missing()) };
    let root = |ancestry: &[String], own: &str| ancestry.first().cloned().unwrap_or_else(|| own.to_owned());
    if root(&other.ancestry, target) == root(&session.record.ancestry, &session.record.key.session) {
        Ok(())
    } else {
        Err(missing())
    }
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
                tools::check_schema(schema)
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
        runtime.block_on(validate(&session(), &Trigger::SessionStart, &decision, &MemStore::new()))
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
                match runtime.block_on(validate(&session, &trigger, &decision, &store)) {
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
