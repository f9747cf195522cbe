//! Test component for the loop's scenarios. It declares the tool `add`, the
//! sub-agent `helper`, a fast retry policy, and reacts to the last user
//! message of a turn:
//!
//! - `interrupt …`: records the message and raises an interrupt instead of
//!   calling the model; `interrupt.resumed` then answers with the payload
//!   and ends the turn;
//! - `hold …`: raises the interrupt `hold` and calls `add` with 2 and 3 in
//!   the same decision (the call waits for the resume); once resumed the
//!   ordinary loop goes on;
//! - `invalid …`: answers with a decision that settles a call that is not
//!   in flight, which the engine must reject every time;
//! - `count …`: counts the turn in its state (`{"turns": n}`);
//! - `note …`: writes an assistant message into its own session with
//!   `message.send` and ends the turn;
//! - `peek …`: answers whether any of its config's tool schemas had been
//!   read before it looked (they arrive unread, as JSON text) and whether
//!   `add`'s input schema, once read, is the one it declared; ends the
//!   turn;
//!
//! answers the `client.action` `ping` with a `pong` message, and declares
//! a second tool, `bad_output`, whose results break its output schema;
//! and otherwise passes `proposed` through (so `use tool add with {…}` and
//! `use tool helper with {…}` run the ordinary loop).

use serde::{Deserialize, Serialize};
use subs_sdk::prelude::*;
use subs_sdk::{RetryPolicy, SubAgent};

struct Scenario {
    router: ToolRouter,
}

#[derive(Deserialize)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    turns: u64,
}

impl Scenario {
    fn new() -> Self {
        let router = ToolRouter::new()
            .tool(
                AgentTool::new("add").description("Adds two numbers.").input(json!({
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"]
                })),
                |args: AddArgs| Ok::<_, String>(json!({"sum": args.a + args.b})),
            )
            .tool(
                AgentTool::new("bad_output")
                    .description("Returns something its output schema forbids.")
                    .output(json!({"type": "object", "required": ["ok"]})),
                |_: Value| Ok::<_, String>(json!({"nope": 1})),
            );
        Self { router }
    }
}

impl Agent for Scenario {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let model = request.proposed.agent.as_ref().map_or("subs/offline", |a| a.model.as_str()).to_owned();
                let mut config = AgentConfig::new(model)
                    .with_system("You are the scenario agent.")
                    .with_tools(self.router.tools())
                    .with_sub_agent(SubAgent {
                        id: "helper".to_owned(),
                        description: Some("Answers anything.".to_owned()),
                    });
                config.retry = Some(RetryPolicy {
                    timeout_secs: Some(10.0),
                    max_retries: 2,
                    backoff_base_secs: 0.01,
                    backoff_max_secs: 0.05,
                });
                Ok(request.proposed.with_agent(config))
            }
            Trigger::ToolExecute(call) => Ok(DecisionResponse::new().with_action(self.router.execute(call))),
            Trigger::ClientMessages(t) => {
                let text = t.messages.last().map(DraftMessage::text).unwrap_or_default();
                if text.starts_with("interrupt") {
                    let mut decision = request.proposed;
                    decision.actions = None;
                    // "interrupt with schema": the resume must be an
                    // approval, `{"approved": bool, "reason"?: string}`.
                    let resume_schema = text.contains("with schema").then(|| {
                        json!({
                            "type": "object",
                            "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
                            "required": ["approved"],
                            "additionalProperties": false
                        })
                    });
                    let interrupt = subs_sdk::action::Interrupt {
                        interrupt_id: Some("approval".to_owned()),
                        reason: "needs approval".to_owned(),
                        payload: Some(json!({"question": text})),
                        resume_schema,
                    };
                    Ok(decision.with_action(interrupt))
                } else if text.starts_with("hold") {
                    // A call made by the decision that opens an interrupt
                    // waits, queued, for the resume.
                    let interrupt = subs_sdk::action::Interrupt {
                        interrupt_id: Some("hold".to_owned()),
                        reason: "hold the call".to_owned(),
                        payload: None,
                        resume_schema: None,
                    };
                    let add = subs_sdk::action::ToolCall {
                        id: None,
                        name: "add".to_owned(),
                        arguments: json!({"a": 2, "b": 3}),
                        handler: None,
                        retry: None,
                    };
                    let mut decision = request.proposed;
                    decision.actions = None;
                    Ok(decision.with_action(interrupt).with_action(add))
                } else if text.starts_with("invalid") {
                    Ok(DecisionResponse::new().with_action(subs_sdk::action::ToolResult {
                        id: Some("nope".to_owned()),
                        attempt: None,
                        result: json!(1),
                    }))
                } else if text.starts_with("note") {
                    let mut decision = request.proposed;
                    decision.actions = None;
                    let send = subs_sdk::action::MessageSend {
                        session_id: request.session_id.clone(),
                        message: DraftMessage::assistant("noted"),
                    };
                    Ok(decision.with_action(send).with_action(Action::done()))
                } else if text.starts_with("peek") {
                    let tools = request.agent.as_ref().and_then(|a| a.tools.as_ref()).into_iter().flatten();
                    let read = tools.flat_map(|t| [&t.input, &t.output]).flatten().any(subs_sdk::ToolSchema::is_read);
                    let seen = request.agent.as_ref().and_then(|a| a.tool("add")).and_then(|t| t.input.clone());
                    let declared = self.router.tools().into_iter().find(|t| t.name == "add").and_then(|t| t.input);
                    let same = seen.is_some() && seen == declared;
                    let mut decision = request.proposed;
                    decision.actions = None;
                    let answer = format!("read before: {read}; add's input as declared: {same}");
                    Ok(decision.with_message(DraftMessage::assistant(answer)).with_action(Action::done()))
                } else if text.starts_with("count") {
                    let counter: Counter = request.state_as()?.unwrap_or_default();
                    let next = Counter { turns: counter.turns + 1 };
                    Ok(request.proposed.with_typed_state(&next)?)
                } else {
                    Ok(request.proposed)
                }
            }
            Trigger::ClientAction(action) if action.name == "ping" => {
                Ok(DecisionResponse::new().with_message(DraftMessage::assistant("pong")).with_action(Action::done()))
            }
            // The held call runs now: the ordinary loop takes it from here.
            Trigger::InterruptResumed(resumed) if resumed.interrupt_id == "hold" => Ok(request.proposed),
            Trigger::InterruptResumed(resumed) => {
                let payload = resumed.payload.clone().unwrap_or(Value::Null);
                Ok(DecisionResponse::new()
                    .with_message(DraftMessage::assistant(format!("resumed with {payload}")))
                    .with_action(Action::done()))
            }
            _ => Ok(request.proposed),
        }
    }
}

subs_sdk::export!(Scenario::new());
