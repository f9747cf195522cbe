//! {{name}}: a subs agent.
//!
//! The model may call two tools: `lookup_order`, which counts the lookups
//! in the agent state, and `refund`, which runs only once a person approved
//! the call (the SDK asks with an interrupt; a denial reaches the model as
//! the call's error, and the engine never runs the tool). Everything else
//! (calling the model, recording replies, ending turns) is the engine's.

use serde::{Deserialize, Serialize};
use subs_sdk::prelude::*;

/// The model used when the engine proposes none.
pub const DEFAULT_MODEL: &str = "subs/offline";

/// The agent's state, kept by the engine with the session.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct State {
    /// How many orders were looked up in this session.
    pub lookups: u32,
}

#[derive(Deserialize)]
struct Lookup {
    order_id: String,
}

#[derive(Deserialize)]
struct Refund {
    order_id: String,
    amount: f64,
}

/// The agent: its tools, and its config at the session's start.
pub struct App {
    router: ToolRouter,
}

impl App {
    /// The agent with its tools.
    pub fn new() -> Self {
        let order = json!({
            "type": "object",
            "properties": { "order_id": { "type": "string" } },
            "required": ["order_id"]
        });
        let refund = json!({
            "type": "object",
            "properties": { "order_id": { "type": "string" }, "amount": { "type": "number" } },
            "required": ["order_id", "amount"]
        });
        let router = ToolRouter::new()
            .tool_with_context(
                AgentTool::new("lookup_order").description("Looks an order up by its id.").input(order),
                |args: Lookup, cx: &mut ToolContext<State>| {
                    cx.state.lookups += 1;
                    Ok::<_, String>(json!({ "order_id": args.order_id, "status": "shipped" }))
                },
            )
            .tool(
                AgentTool::new("refund").description("Refunds an amount of an order.").input(refund),
                |args: Refund| Ok::<_, String>(json!({ "refunded": args.amount, "order_id": args.order_id })),
            )
            .needs_approval();
        Self { router }
    }
}

impl Default for App {
    fn default() -> Self {
        Self::new()
    }
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
    use subs_sdk::testing::tool_execute;

    use super::*;

    #[test]
    fn a_lookup_answers_and_is_counted_in_the_state() {
        let mut request =
            DecisionRequest::for_trigger(Trigger::ToolExecute(tool_execute("lookup_order", r#"{"order_id":"A1"}"#)));
        request.state = json!({ "lookups": 1 });
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        assert_eq!(decision.actions(), [Action::tool_result(json!({ "order_id": "A1", "status": "shipped" }))]);
        assert_eq!(decision.state, Some(json!({ "lookups": 2 })));
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
    fn the_session_start_declares_the_tools() {
        let request = DecisionRequest::for_trigger(Trigger::SessionStart);
        let decision = RecordingHost::new().decide(&App::new(), request).unwrap();
        let tools: Vec<String> = decision.agent.unwrap().tools.into_iter().flatten().map(|t| t.name).collect();
        assert_eq!(tools, ["lookup_order", "refund"]);
    }
}
