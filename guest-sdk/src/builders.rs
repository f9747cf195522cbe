//! Builders for the actions and decisions agents write by hand: an
//! interrupt with its id and payload, a spawn, an approval request, a
//! delegation, and a proposal whose actions are replaced.
//!
//! They are extension traits on the protocol types, in the
//! [`prelude`](crate::prelude), so that they read as the types' own:
//! `Action::interrupt_with(…)`, `request.proposed.replace_actions([])`.

use serde_json::{Value, json};
use subs_protocol::action::SubAgentSpawn;
use subs_protocol::message::ToolCall as ModelToolCall;
use subs_protocol::{Action, DecisionRequest, DecisionResponse, DraftMessage, Role, valid_id};

/// The payload key naming the tool of an approval request.
pub const APPROVAL_TOOL: &str = "tool";
/// The payload key holding the call id of an approval request.
pub const APPROVAL_CALL_ID: &str = "call_id";
/// The payload key holding the arguments of an approval request.
pub const APPROVAL_ARGUMENTS: &str = "arguments";

/// The JSON Schema of the answer to an approval,
/// `{"approved": bool, "reason"?: string}`: the `resume_schema` of
/// [`ActionBuilders::approval`]'s interrupt, so that the engine refuses any
/// other answer (a typo, a missing `approved`) with a 400 and keeps the
/// approval open.
pub fn approval_answer_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "approved": { "type": "boolean" }, "reason": { "type": "string" } },
        "required": ["approved"],
        "additionalProperties": false,
    })
}

/// More ways to build an [`Action`].
pub trait ActionBuilders {
    /// `interrupt` under the id `interrupt_id`, carrying `payload` for
    /// whoever resumes it.
    ///
    /// ```
    /// use subs_sdk::prelude::*;
    ///
    /// let action = Action::interrupt_with("pick", "choose a colour", json!({"options": ["red", "blue"]}));
    /// let Action::Interrupt(i) = action else { unreachable!() };
    /// assert_eq!(i.interrupt_id.as_deref(), Some("pick"));
    /// assert_eq!(i.payload, Some(json!({"options": ["red", "blue"]})));
    /// ```
    fn interrupt_with(interrupt_id: impl Into<String>, reason: impl Into<String>, payload: Value) -> Action;

    /// `sub_agent.spawn` of `agent_id` as the child session `session_id`,
    /// answering the assistant tool call `tool_call_id`, whose arguments
    /// become the child's first message.
    fn spawn(session_id: impl Into<String>, agent_id: impl Into<String>, tool_call_id: impl Into<String>) -> Action;

    /// The `interrupt` asking a person to approve the tool call `call_id` of
    /// `tool` with `arguments`: its id is the call id, its payload
    /// `{"tool", "call_id", "arguments"}`, its `resume_schema`
    /// [`approval_answer_schema`]: the resume payload is
    /// `{"approved": bool, "reason"?: string}`. A
    /// [`ToolRouter`](crate::ToolRouter) opens and answers these for the
    /// tools it gates.
    fn approval(call_id: impl Into<String>, tool: impl Into<String>, arguments: Value) -> Action;
}

impl ActionBuilders for Action {
    fn interrupt_with(interrupt_id: impl Into<String>, reason: impl Into<String>, payload: Value) -> Action {
        // Built from the protocol's own constructor so that fields the
        // protocol adds later keep their defaults.
        let mut action = Action::interrupt(reason);
        if let Action::Interrupt(interrupt) = &mut action {
            interrupt.interrupt_id = Some(interrupt_id.into());
            interrupt.payload = Some(payload);
        }
        action
    }

    fn spawn(session_id: impl Into<String>, agent_id: impl Into<String>, tool_call_id: impl Into<String>) -> Action {
        Action::SubAgentSpawn(SubAgentSpawn {
            session_id: session_id.into(),
            agent_id: agent_id.into(),
            tool_call_id: tool_call_id.into(),
            retry: None,
        })
    }

    fn approval(call_id: impl Into<String>, tool: impl Into<String>, arguments: Value) -> Action {
        let (call_id, tool) = (call_id.into(), tool.into());
        let reason = format!("approve {tool}");
        let payload = json!({ APPROVAL_TOOL: tool, APPROVAL_CALL_ID: call_id.clone(), APPROVAL_ARGUMENTS: arguments });
        let mut action = Action::interrupt_with(call_id, reason, payload);
        if let Action::Interrupt(interrupt) = &mut action {
            interrupt.resume_schema = Some(approval_answer_schema());
        }
        action
    }
}

/// More ways to build a [`DecisionResponse`].
pub trait DecisionBuilders: Sized {
    /// The same decision with `actions` instead of its own: keep what a
    /// proposal records (messages, state, config) and decide something
    /// else.
    ///
    /// ```
    /// use subs_sdk::prelude::*;
    ///
    /// let proposed = DecisionResponse::new()
    ///     .with_message(DraftMessage::user("hi"))
    ///     .with_action(Action::llm_call());
    /// let decision = proposed.replace_actions([Action::done()]);
    /// assert_eq!(decision.messages().len(), 1);
    /// assert_eq!(decision.actions(), [Action::done()]);
    /// ```
    #[must_use]
    fn replace_actions(self, actions: impl IntoIterator<Item = Action>) -> Self;

    /// Adds a delegation to the sub-agent `agent_id` with `input` as the
    /// child's first message: an assistant message calling `agent_id`
    /// (the call's arguments are `input`, verbatim) and the
    /// `sub_agent.spawn` answering it, recorded together. The child's reply
    /// comes back as that call's `tool` message (`sub_agent.finished`).
    ///
    /// `agent_id` must be a sub-agent of the config the decision runs
    /// under; the engine refuses the decision otherwise. The call and child
    /// ids derive from the request's decision, so a redelivered request
    /// delegates under the same ids.
    ///
    /// ```
    /// use subs_sdk::prelude::*;
    ///
    /// let request = DecisionRequest::for_trigger(Trigger::SessionStart);
    /// let decision = DecisionResponse::new().delegate(&request, "summarizer", "Summarize: the order shipped.");
    /// let call = &decision.messages()[0].tool_calls.as_ref().unwrap()[0];
    /// assert_eq!(call.function.name, "summarizer");
    /// assert_eq!(call.function.arguments, "Summarize: the order shipped.");
    /// let Action::SubAgentSpawn(spawn) = &decision.actions()[0] else { unreachable!() };
    /// assert_eq!((spawn.agent_id.as_str(), &spawn.tool_call_id), ("summarizer", &call.id));
    /// ```
    #[must_use]
    fn delegate(self, request: &DecisionRequest, agent_id: impl Into<String>, input: impl Into<String>) -> Self;
}

impl DecisionBuilders for DecisionResponse {
    fn replace_actions(mut self, actions: impl IntoIterator<Item = Action>) -> Self {
        let actions: Vec<Action> = actions.into_iter().collect();
        self.actions = (!actions.is_empty()).then_some(actions);
        self
    }

    fn delegate(self, request: &DecisionRequest, agent_id: impl Into<String>, input: impl Into<String>) -> Self {
        let agent_id = agent_id.into();
        let n = self.actions().iter().filter(|a| matches!(a, Action::SubAgentSpawn(_))).count() + 1;
        let call_id = bounded_id(format!("delegate.{}.{n}", request.decision_id));
        let session_id = bounded_id(format!("{}.{call_id}", request.session_id));
        let message = DraftMessage {
            tool_calls: Some(vec![ModelToolCall::function(call_id.clone(), agent_id.clone(), input)]),
            content: None,
            ..DraftMessage::new(Role::Assistant, "")
        };
        self.with_message(message).with_action(Action::spawn(session_id, agent_id, call_id))
    }
}

/// `id` when it is a valid id, else a short one derived from it: ids the
/// SDK composes from the engine's own may outgrow the 256 bytes an id may
/// hold.
fn bounded_id(id: String) -> String {
    if valid_id(&id) {
        return id;
    }
    // FNV-1a: stable across builds and platforms, which `std`'s hashers
    // do not promise, and the same ids must come back on a redelivery.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("delegate.{hash:016x}")
}

#[cfg(test)]
mod tests {
    use subs_protocol::Trigger;

    use super::*;

    #[test]
    fn approvals_name_tool_call_and_arguments() {
        let Action::Interrupt(i) = Action::approval("c1", "refund", json!({"amount": 5})) else { unreachable!() };
        assert_eq!(i.interrupt_id.as_deref(), Some("c1"));
        assert_eq!(i.reason, "approve refund");
        assert_eq!(i.payload, Some(json!({"tool": "refund", "call_id": "c1", "arguments": {"amount": 5}})));
        assert_eq!(i.resume_schema, Some(approval_answer_schema()));
    }

    #[test]
    fn spawns_answer_their_call() {
        let Action::SubAgentSpawn(s) = Action::spawn("child", "kid", "c1") else { unreachable!() };
        assert_eq!((s.session_id.as_str(), s.agent_id.as_str(), s.tool_call_id.as_str()), ("child", "kid", "c1"));
    }

    #[test]
    fn delegations_get_ids_of_their_own_and_stay_valid() {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        let decision = DecisionResponse::new().delegate(&request, "a", "one").delegate(&request, "b", "two");
        let ids: Vec<&str> = decision
            .actions()
            .iter()
            .map(|a| match a {
                Action::SubAgentSpawn(s) => s.tool_call_id.as_str(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(ids, ["delegate.decision.1", "delegate.decision.2"]);
        assert_eq!(decision.messages().len(), 2);
        assert_eq!(decision.messages()[1].content, None);

        request.session_id = "s".repeat(256);
        let again = DecisionResponse::new().delegate(&request, "a", "one");
        let Action::SubAgentSpawn(s) = &again.actions()[0] else { unreachable!() };
        assert!(valid_id(&s.session_id) && s.session_id.starts_with("delegate."), "{}", s.session_id);
        let same = DecisionResponse::new().delegate(&request, "a", "one");
        assert_eq!(again, same, "the same ids on a redelivery");
    }

    #[test]
    fn replacing_no_actions_leaves_none() {
        let decision = DecisionResponse::new().with_action(Action::llm_call()).replace_actions([]);
        assert_eq!(decision.actions, None);
    }
}
