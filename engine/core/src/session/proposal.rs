//! `proposed`: what an ordinary agent loop does next, for every trigger
//! (see docs/loop.md, "Proposals"). A worker that returns it unchanged is
//! a complete chat-and-tools agent.

use serde_json::{Value, json};
use subs_protocol::action::{SubAgentSpawn, ToolCall};
use subs_protocol::{
    Action, AgentConfig, AgentTool, DecisionResponse, DraftMessage, Role, ToolCall as ModelToolCall, Trigger,
};

use super::Session;
use crate::store::valid_id;

/// The proposal for `trigger`, the trigger of step `seq`: the ordinary
/// loop's next step, with the open turn's client tools layered on (see
/// [`with_client_tools`]).
pub(crate) fn propose(session: &Session, seq: u64, trigger: &Trigger, default_model: &str) -> DecisionResponse {
    with_client_tools(session, ordinary(session, seq, trigger, default_model), default_model)
}

/// `proposed` as a worker sees it when the open turn has client tools or
/// the agent has tool sources (MCP servers): its
/// `agent` is the config it sets, else the current one, else one with
/// `default_model`, with the client tools, then the sources' tools,
/// appended (those whose names no
/// tool or sub-agent of that config takes, the first of a name), and each
/// `llm.call` that names no tools offers the model's tools
/// ([`Session::llm_tools`]). A worker that copies or edits the proposal
/// keeps them; [`without_client_tools`] keeps them out of the stored
/// config. Without client tools the proposal is left as it is.
fn with_client_tools(session: &Session, mut proposal: DecisionResponse, default_model: &str) -> DecisionResponse {
    let client = session.added_tools();
    if client.is_empty() {
        return proposal;
    }
    let mut agent = proposal
        .agent
        .take()
        .or_else(|| session.record.agent.as_deref().cloned())
        .unwrap_or_else(|| AgentConfig::new(default_model));
    let mut tools = agent.tools.take().unwrap_or_default();
    for tool in &client {
        let taken =
            tools.iter().any(|t| t.name == tool.name) || agent.sub_agents.iter().flatten().any(|s| s.id == tool.name);
        if !taken {
            tools.push(tool.clone());
        }
    }
    agent.tools = Some(tools);
    proposal.agent = Some(agent);
    for action in proposal.actions.iter_mut().flatten() {
        if let Action::LlmCall(call) = action
            && call.tools.is_none()
        {
            call.tools = Some(session.llm_tools());
        }
    }
    proposal
}

/// `agent` as a decision sets it, without the tools that equal one of the
/// open turn's `client_tools` exactly: a worker that returns its proposal
/// (whose config lists the client tools) does not make them part of its
/// config beyond the turn. A config left with no tools after that has
/// `tools` omitted. A tool of the same name that differs in any field is
/// the agent's own, and kept.
pub(crate) fn without_client_tools(agent: &AgentConfig, client_tools: &[AgentTool]) -> AgentConfig {
    let mut agent = agent.clone();
    if let Some(tools) = &mut agent.tools {
        let before = tools.len();
        tools.retain(|t| !client_tools.contains(t));
        if tools.is_empty() && before > 0 {
            agent.tools = None;
        }
    }
    agent
}

/// What an ordinary agent loop does next for `trigger` (the table in
/// docs/loop.md, "Proposals").
fn ordinary(session: &Session, seq: u64, trigger: &Trigger, default_model: &str) -> DecisionResponse {
    match trigger {
        Trigger::SessionStart => DecisionResponse::new().with_agent(AgentConfig::new(default_model)),
        Trigger::ClientMessages(t) => {
            let new_from = usize::try_from(t.new_from).unwrap_or(usize::MAX);
            let mut decision = DecisionResponse::new();
            for message in t.messages.messages_from(new_from) {
                decision = decision.with_message(message);
            }
            decision.with_action(Action::llm_call())
        }
        Trigger::ClientAction(_) | Trigger::ToolExecute(_) | Trigger::LlmExecute(_) | Trigger::InterruptResumed(_) => {
            DecisionResponse::new()
        }
        Trigger::LlmFinished(f) if f.ok => {
            let Some(message) = &f.message else { return DecisionResponse::new().with_action(Action::done()) };
            let mut decision = DecisionResponse::new().with_message(message.clone());
            let calls = message.tool_calls.as_deref().unwrap_or_default();
            for call in calls {
                decision = decision.with_action(tool_call_action(session, seq, call));
            }
            if calls.is_empty() { decision.with_action(Action::done()) } else { decision }
        }
        Trigger::LlmFinished(f) => DecisionResponse::new().with_action(Action::done_with(json!({
            "error": f.error.clone().unwrap_or_else(|| "the LLM call failed".to_owned()),
            "code": f.code.map_or("provider_error", |c| c.as_str()),
        }))),
        Trigger::ToolFinished(f) => {
            settled(session, seq, &f.id, f.result.as_deref().or(f.error.as_deref()).unwrap_or_default())
        }
        Trigger::SubAgentFinished(f) => {
            settled(session, seq, &f.id, f.result.as_deref().or(f.error.as_deref()).unwrap_or_default())
        }
    }
}

/// `tool.finished` / `sub_agent.finished`: record the `tool` message; call
/// the model again once nothing else is pending.
fn settled(session: &Session, seq: u64, call_id: &str, content: &str) -> DecisionResponse {
    let decision = DecisionResponse::new().with_message(DraftMessage::tool(call_id, content));
    if session.pending_calls() == 0 && session.settlements_after(seq) == 0 {
        decision.with_action(Action::llm_call())
    } else {
        decision
    }
}

/// The action answering one tool call of the model: a sub-agent spawn when
/// it names a sub-agent, else a tool call with the tool's handler. `seq`
/// is the step of the `llm.finished` the call came in.
fn tool_call_action(session: &Session, seq: u64, call: &ModelToolCall) -> Action {
    let name = &call.function.name;
    if session.is_sub_agent(name) {
        return Action::SubAgentSpawn(SubAgentSpawn {
            session_id: child_session_id(&session.record.key.session, seq, &call.id),
            agent_id: name.clone(),
            tool_call_id: call.id.clone(),
            retry: None,
        });
    }
    // The model's argument text is passed on as a JSON string when it does
    // not parse, so the tool's worker sees exactly what the model wrote
    // (and `tool.execute` reports it as malformed).
    let arguments = serde_json::from_str(&call.function.arguments)
        .unwrap_or_else(|_| Value::String(call.function.arguments.clone()));
    Action::ToolCall(ToolCall {
        id: Some(call.id.clone()),
        name: name.clone(),
        arguments,
        handler: session.tool(name).and_then(|t| t.handler),
        retry: None,
    })
}

/// The id of the child session answering tool call `tool_call_id` of the
/// model reply that step `step` of `parent` delivered:
/// `<parent>.<step>.<tool call>` when that is a valid id (any characters,
/// at most `MAX_ID_BYTES`), else `sub_` and a digest of the three, which is
/// always valid. A step answers one reply, and a reply's tool call ids
/// differ, so a model that reuses a tool call id in a later reply (some
/// number their calls from 1 in each) gets a new child. Deterministic, so
/// a step redone after a crash spawns the same child.
pub(crate) fn child_session_id(parent: &str, step: u64, tool_call_id: &str) -> String {
    let id = format!("{parent}.{step}.{tool_call_id}");
    if valid_id(&id) {
        return id;
    }
    // The parent's length goes in first, so that `a` + `b.c` and `a.b` +
    // `c` differ; the step is written out, so `1` + `2.x` and `12` + `x`
    // differ too.
    let hash = fnv1a((parent.len() as u64).to_le_bytes().into_iter().chain(id.bytes()));
    format!("sub_{hash:016x}")
}

/// A model's tool-call id as the session records it: as the model wrote
/// it when it is a valid id, else `call_` and a digest of it (an id over
/// the length bound, or with control characters, would make the engine's
/// own proposal break the id rule). The same text always gives the same id,
/// so a redone step records the same.
pub(crate) fn usable_call_id(id: &str) -> String {
    if valid_id(id) { id.to_owned() } else { format!("call_{:016x}", fnv1a(id.bytes())) }
}

/// FNV-1a: stable across processes and versions, unlike `DefaultHasher`.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The text of a child's last assistant message, its result when its
/// `done` has no data.
pub(crate) fn last_assistant_text(session: &Session) -> Option<String> {
    session
        .tree
        .path_back(session.record.head_id.as_deref())
        .find(|m| m.role == Role::Assistant)
        .map(subs_protocol::Message::text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_call_id_the_rule_refuses_is_replaced_by_a_stable_one() {
        assert_eq!(usable_call_id("call/ü 1"), "call/ü 1");
        for bad in ["x".repeat(300), "call\n1".to_owned(), String::new()] {
            let id = usable_call_id(&bad);
            assert!(valid_id(&id) && id.starts_with("call_"), "{id}");
            assert_eq!(id, usable_call_id(&bad));
        }
        assert_ne!(usable_call_id(&"x".repeat(300)), usable_call_id(&"x".repeat(301)));
    }

    #[test]
    fn child_ids_are_valid() {
        assert_eq!(child_session_id("s1", 4, "call_1"), "s1.4.call_1");
        // A reused tool call id in a later reply: another child.
        assert_ne!(child_session_id("s1", 4, "1"), child_session_id("s1", 9, "1"));
        // Any parent and model call id: `/`, spaces, unicode are kept.
        assert_eq!(child_session_id("chat/ü 1", 2, "call/ü 1"), "chat/ü 1.2.call/ü 1");
        assert_eq!(child_session_id("s", 2, "toolu_01A09q90qw90lq917835lq9"), "s.2.toolu_01A09q90qw90lq917835lq9");
        let longest = "ü".repeat(subs_protocol::MAX_ID_BYTES / 2);
        for (parent, call) in [
            (longest.as_str(), "call/1"),
            ("s1", longest.as_str()),
            (longest.as_str(), longest.as_str()),
            ("s1", "call\n1"),
            ("x".repeat(200).as_str(), "y".repeat(56).as_str()),
        ] {
            let id = child_session_id(parent, 7, call);
            assert!(valid_id(&id), "{parent:?} + {call:?}: {id}");
            assert_eq!(id, child_session_id(parent, 7, call), "stable");
            assert_ne!(id, child_session_id(parent, 8, call), "per step");
        }
        // Exactly at the bound the plain form is kept; one byte over, the
        // digest, distinct for distinct parents and calls.
        let (parent, call) = ("x".repeat(200), "y".repeat(53));
        assert_eq!(child_session_id(&parent, 7, &call).len(), subs_protocol::MAX_ID_BYTES);
        let over = child_session_id(&parent, 7, &format!("{call}y"));
        assert!(over.starts_with("sub_"), "{over}");
        assert_ne!(over, child_session_id(&parent, 7, &format!("{call}z")));
        let (a, b) = ("a".repeat(200), "b".repeat(60));
        assert_ne!(child_session_id(&a, 1, &format!("{b}.c")), child_session_id(&format!("{a}.1.{b}"), 1, "c"));
        assert_ne!(child_session_id(&a, 1, &format!("2.{b}")), child_session_id(&a, 12, &b));
    }
}
