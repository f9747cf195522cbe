//! approver-rs: the approver agent in Rust.
//!
//! The model may call `lookup_order`; `refund`, which runs only once a
//! person approved the call (the SDK asks with an interrupt; a denial
//! reaches the model as the call's error, and the engine never runs the
//! tool) and counts the refunds in the agent state; and `summarizer`,
//! another agent, as a tool (the engine runs it as a child session and its
//! reply is the call's result). Everything else (calling the model,
//! recording replies, ending turns) is the engine's.

use serde::{Deserialize, Serialize};
use subs_sdk::prelude::*;

/// The model used when the engine proposes none.
pub const DEFAULT_MODEL: &str = "subs/offline";

/// The agent's state, kept by the engine with the session.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// How many refunds ran in this session.
    pub refunds: u32,
}

#[derive(Deserialize)]
struct Lookup {
    order_id: String,
}

#[derive(Deserialize)]
struct Refund {
    order_id: String,
    amount: u32,
}

/// The agent: its tools and sub-agent.
struct App {
    router: ToolRouter,
}

impl App {
    /// The agent with its tools.
    fn new() -> Self {
        let order = json!({ "order_id": { "type": "string" } });
        let refund = json!({ "order_id": { "type": "string" }, "amount": { "type": "integer", "minimum": 1 } });
        let router = ToolRouter::new()
            .tool(AgentTool::new("lookup_order").description("Looks an order up.").input(object(order)), |a: Lookup| {
                Ok::<_, String>(json!({ "order_id": a.order_id, "status": "shipped" }))
            })
            .tool_with_context(
                AgentTool::new("refund").description("Refunds an amount of an order.").input(object(refund)),
                |a: Refund, cx: &mut ToolContext<State>| {
                    cx.state.refunds += 1;
                    cx.info(format!("refunded {} on {}", a.amount, a.order_id));
                    Ok::<_, String>(json!({ "refunded": a.amount, "refunds": cx.state.refunds }))
                },
            )
            .needs_approval()
            .sub_agent("summarizer", "Summarizes a text.");
        Self { router }
    }
}

/// An object schema with `properties`, all required.
fn object(properties: Value) -> Value {
    let required: Vec<&String> = properties.as_object().into_iter().flat_map(|p| p.keys()).collect();
    json!({ "type": "object", "properties": properties, "required": required })
}

impl Agent for App {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::SessionStart = request.trigger {
            let model = request.proposed.agent.as_ref().map_or(DEFAULT_MODEL, |agent| agent.model.as_str());
            let config = AgentConfig::new(model).with_system("You help customers with their orders.");
            return Ok(request.proposed.clone().with_agent(self.router.configure(config)));
        }
        Ok(self.router.handle(&request, cx))
    }
}

subs_sdk::export!(App::new());

#[cfg(test)]
mod tests {
    use subs_sdk::testing::{approval_resumed, tool_execute};

    use super::*;

    #[test]
    fn a_lookup_answers() {
        let request =
            DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("lookup_order", r#"{"order_id":"A1"}"#)));
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        assert_eq!(decision.actions(), [Action::tool_result(json!({ "order_id": "A1", "status": "shipped" }))]);
        assert_eq!(decision.state, None);
    }

    #[test]
    fn a_refund_waits_for_an_approval() {
        let arguments = json!({ "order_id": "A1", "amount": 5 });
        let mut call = Action::tool_call("refund", arguments.clone());
        if let Action::ToolCall(c) = &mut call {
            c.id = Some("call_1".into());
        }
        let said = subs_sdk::trigger::ClientMessages {
            messages: vec![DraftMessage::user("refund A1")].into(),
            new_from: 0,
            client: Default::default(),
        };
        let mut request = DecisionRequest::for_trigger(Trigger::ClientMessages(said));
        request.proposed = DecisionResponse::new().with_action(call.clone());
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        assert_eq!(decision.actions(), [call, Action::approval("call_1", "refund", arguments)]);
    }

    #[test]
    fn an_approved_refund_runs_and_is_counted_in_the_state() {
        let mut request = DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute(
            "refund",
            r#"{"order_id":"A1","amount":5}"#,
        )));
        request.state = json!({ "refunds": 1, "subs_approvals": { "call-1": true } });
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        assert_eq!(decision.actions(), [Action::tool_result(json!({ "refunded": 5, "refunds": 2 }))]);
        assert_eq!(decision.state, Some(json!({ "refunds": 2 })));
    }

    #[test]
    fn a_denied_refund_is_the_calls_error_and_never_runs() {
        let request = approval_resumed("call_1", "refund", json!({ "approved": false, "reason": "too large" }));
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        let [Action::ToolError(error)] = decision.actions() else { panic!("{:?}", decision.actions()) };
        assert_eq!(error.error, "denied by the approver: too large");
        assert_eq!(decision.state, None, "nothing was counted");
    }

    #[test]
    fn the_session_start_declares_the_tools_and_the_summarizer() {
        let request = DecisionRequest::for_trigger(Trigger::SessionStart);
        let agent = RecordingHost::new().decide(&App::new(), request).unwrap().agent.unwrap();
        let tools: Vec<String> = agent.tools.into_iter().flatten().map(|t| t.name).collect();
        assert_eq!(tools, ["lookup_order", "refund"]);
        let subs: Vec<String> = agent.sub_agents.into_iter().flatten().map(|s| s.id).collect();
        assert_eq!(subs, ["summarizer"]);
    }
}
