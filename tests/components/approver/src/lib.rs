//! The approver agent as a component: `lookup_order`, and `refund`, which
//! needs a person's approval and counts the refunds it made in the session
//! state — so a state without a count proves a denied refund never ran.
//! `tests/all/approval.rs` drives it through the server.

use serde::{Deserialize, Serialize};
use subs_sdk::prelude::*;

/// The session state: refunds made so far.
#[derive(Default, Serialize, Deserialize)]
struct Refunds {
    refunds: u32,
}

#[derive(Deserialize)]
struct Order {
    order_id: String,
}

#[derive(Deserialize)]
struct Refund {
    order_id: String,
    amount: u32,
}

/// The agent: its router does everything but the config.
struct Approver {
    router: ToolRouter,
}

impl Approver {
    fn new() -> Self {
        let router = ToolRouter::new()
            .tool(AgentTool::new("lookup_order").input(schema(&["order_id"])), |o: Order| {
                Ok::<_, String>(json!({ "order_id": o.order_id, "status": "shipped" }))
            })
            .tool_with_context(
                AgentTool::new("refund").input(schema(&["order_id", "amount"])),
                |r: Refund, cx: &mut ToolContext<Refunds>| {
                    cx.state.refunds += 1;
                    cx.info(format!("refunded {} on {}", r.amount, r.order_id));
                    Ok::<_, String>(json!({ "refunded": r.amount, "refunds": cx.state.refunds }))
                },
            )
            .needs_approval();
        Self { router }
    }
}

impl Agent for Approver {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::SessionStart = request.trigger {
            let model = request.proposed.agent.as_ref().map_or("subs/offline", |a| a.model.as_str());
            let config = self.router.configure(AgentConfig::new(model));
            return Ok(request.proposed.with_agent(config));
        }
        Ok(self.router.handle(&request, cx))
    }
}

/// An object schema: `order_id` a string, `amount` a positive integer;
/// `required` of them required.
fn schema(required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": { "order_id": { "type": "string" }, "amount": { "type": "integer", "minimum": 1 } },
        "required": required,
    })
}

subs_sdk::export!(Approver::new());
