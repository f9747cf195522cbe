//! A subs agent with tools of its own: `add` sums two numbers, `get_time`
//! tells the current time.
//!
//! At `session.start` the agent declares itself: the model the engine
//! proposes, a system prompt, and the two tools. When the model calls a
//! tool, the engine sends `tool.execute` and the agent runs it through a
//! [`ToolRouter`]. Every other trigger takes the engine's proposal, so the
//! rest of the loop (calling the model, recording replies, finishing turns)
//! is the engine's.
//!
//! Two features build other versions of it, to try an upgrade on (see
//! docs/upgrades.md): `total` has `add` answer `{"total": …}` instead of
//! `{"sum": …}`, and `trap-on-messages` panics on every `client.messages`.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use subs_sdk::prelude::*;

/// The model to use when the engine proposes none and the session has no
/// config yet. The engine always proposes one at `session.start`, so this
/// only matters in tests and with an engine that proposes no config.
pub const DEFAULT_MODEL: &str = "openai/gpt-4o-mini";

/// What the model is told about its job.
pub const SYSTEM_PROMPT: &str = "You are a helpful assistant. For arithmetic, call the `add` tool \
     instead of computing sums yourself. For the current date or time, call `get_time`, which \
     returns Unix time in milliseconds.";

/// The agent: a router with its two tools, built when a decision first
/// needs it.
///
/// A component makes one decision per instance, and most decisions take
/// the engine's proposal without looking at the tools, so building the
/// router (four JSON Schemas) up front would be work thrown away on most
/// of them. An HTTP worker keeps one `Tools` and builds the router once.
pub struct Tools {
    router: OnceLock<ToolRouter>,
}

impl Tools {
    /// The agent with `add` and `get_time`.
    pub fn new() -> Self {
        Self { router: OnceLock::new() }
    }

    /// The router of `add` and `get_time`.
    pub fn router(&self) -> &ToolRouter {
        self.router.get_or_init(|| {
            ToolRouter::new()
                .tool(
                    AgentTool::new("add")
                        .description("Adds two numbers and returns their sum.")
                        .input(json!({
                            "type": "object",
                            "properties": {
                                "a": { "type": "number", "description": "The first addend" },
                                "b": { "type": "number", "description": "The second addend" }
                            },
                            "required": ["a", "b"],
                            "additionalProperties": false
                        }))
                        .output(json!({
                            "type": "object",
                            "properties": { "sum": { "type": "number" } },
                            "required": ["sum"],
                            "additionalProperties": false
                        })),
                    add,
                )
                .tool(
                    AgentTool::new("get_time")
                        .description("Returns the current time as Unix time in milliseconds.")
                        .input(json!({
                            "type": "object",
                            "properties": {},
                            "additionalProperties": false
                        }))
                        .output(json!({
                            "type": "object",
                            "properties": { "unix_ms": { "type": "integer", "minimum": 0 } },
                            "required": ["unix_ms"],
                            "additionalProperties": false
                        })),
                    get_time,
                )
        })
    }

    /// The config the agent runs with: `model`, the system prompt, and the
    /// tools.
    pub fn config(&self, model: impl Into<String>) -> AgentConfig {
        AgentConfig::new(model).with_system(SYSTEM_PROMPT).with_tools(self.router().tools())
    }
}

impl Default for Tools {
    fn default() -> Self {
        Self::new()
    }
}

impl Agent for Tools {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let model = request
                    .proposed
                    .agent
                    .as_ref()
                    .or(request.agent.as_deref())
                    .map_or(DEFAULT_MODEL, |agent| agent.model.as_str());
                let config = self.config(model);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::ToolExecute(call) => Ok(request.proposed.with_action(self.router().execute(call))),
            #[cfg(feature = "trap-on-messages")]
            Trigger::ClientMessages(_) => panic!("this version cannot read client messages"),
            _ => Ok(request.proposed),
        }
    }
}

subs_sdk::export!(Tools::new());

/// The arguments of `add`.
#[derive(Debug, Deserialize)]
struct AddArgs {
    a: f64,
    b: f64,
}

/// `add`: `{"sum": a + b}`.
fn add(args: AddArgs) -> Result<Value, String> {
    let sum = args.a + args.b;
    if !sum.is_finite() {
        return Err(format!("{} + {} is too large for a JSON number", args.a, args.b));
    }
    // The feature `total` renames the field, and nothing else: a version
    // whose tool results differ from this one's, to replay against.
    let field = if cfg!(feature = "total") { "total" } else { "sum" };
    Ok(json!({ field: js_number(sum) }))
}

/// The arguments of `get_time`: none.
#[derive(Debug, Deserialize)]
struct NoArgs {}

/// `get_time`: `{"unix_ms": …}`.
fn get_time(_: NoArgs) -> Result<Value, String> {
    let since_epoch =
        SystemTime::now().duration_since(UNIX_EPOCH).map_err(|_| "the clock is set before 1970".to_owned())?;
    let unix_ms = u64::try_from(since_epoch.as_millis()).map_err(|_| "the clock is set too far ahead".to_owned())?;
    Ok(json!({ "unix_ms": unix_ms }))
}

/// `x` as JavaScript would write it: `1 + 2` is `3`, not `3.0`, so results
/// read the same as those of a TypeScript or Python worker.
fn js_number(x: f64) -> Value {
    const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
    if x.fract() == 0.0 && x.abs() <= MAX_SAFE_INTEGER {
        // Exact: a whole number within ±2^53.
        #[allow(clippy::cast_possible_truncation)]
        let whole = x as i64;
        json!(whole)
    } else {
        json!(x)
    }
}

#[cfg(test)]
mod tests {
    use subs_sdk::testing::tool_execute;

    use super::*;

    fn decide(request: DecisionRequest) -> DecisionResponse {
        RecordingHost::new().decide(&Tools::new(), request).unwrap()
    }

    fn execute(name: &str, arguments: &str) -> Action {
        execute_call(tool_execute(name, arguments))
    }

    fn execute_call(call: subs_sdk::protocol::trigger::ToolExecute) -> Action {
        let decision = decide(DecisionRequest::for_trigger(Trigger::ToolExecute(call)));
        let [action] = decision.actions() else { panic!("expected one action: {decision:?}") };
        action.clone()
    }

    #[test]
    fn session_start_declares_the_proposed_model_prompt_and_tools() {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.proposed = DecisionResponse::new().with_agent(AgentConfig::new("subs/offline"));
        let agent = decide(request).agent.unwrap();
        assert_eq!(agent.model, "subs/offline");
        assert_eq!(agent.system.as_deref(), Some(SYSTEM_PROMPT));
        let tools = agent.tools.unwrap();
        let names: Vec<_> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["add", "get_time"]);
        for tool in &tools {
            assert!(tool.description.is_some(), "{}", tool.name);
            assert_eq!(tool.input.as_ref().unwrap()["type"], "object", "{}", tool.name);
            assert_eq!(tool.output.as_ref().unwrap()["type"], "object", "{}", tool.name);
        }
        assert_eq!(tools[0].input.as_ref().unwrap()["required"], json!(["a", "b"]));
        assert_eq!(tools[1].input.as_ref().unwrap()["properties"], json!({}));
    }

    #[test]
    fn session_start_falls_back_to_the_config_then_the_default_model() {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.agent = Some(AgentConfig::new("anthropic/claude-sonnet-4-5").into());
        assert_eq!(decide(request).agent.unwrap().model, "anthropic/claude-sonnet-4-5");

        let request = DecisionRequest::for_trigger(Trigger::SessionStart);
        let decision = decide(request);
        assert_eq!(decision.agent.unwrap().model, DEFAULT_MODEL);
        assert!(decision.actions.is_none() && decision.messages.is_none());
    }

    #[test]
    fn add_sums_like_javascript() {
        assert_eq!(execute("add", r#"{"a": 1, "b": 2}"#), Action::tool_result(json!({ "sum": 3 })));
        assert_eq!(execute("add", r#"{"a": 0.5, "b": -0.25}"#), Action::tool_result(json!({ "sum": 0.25 })));
        assert_eq!(
            subs_sdk::to_json(&execute("add", r#"{"a": 1.5, "b": 1.5}"#)),
            r#"{"type":"tool.result","result":{"sum":3}}"#
        );
    }

    #[test]
    fn add_refuses_sums_json_cannot_hold() {
        let action = execute("add", r#"{"a": 1e308, "b": 1e308}"#);
        let Action::ToolError(e) = action else { panic!("{action:?}") };
        assert!(e.error.contains("too large"), "{}", e.error);
    }

    #[test]
    fn invalid_input_is_a_tool_error_saying_why() {
        let mut call = tool_execute("add", r#"{"a": 1}"#);
        call.input = ToolInput::Invalid { value: json!({ "a": 1 }), error: "missing required property `b`".to_owned() };
        assert_eq!(
            execute_call(call),
            Action::tool_error("invalid arguments for `add`: missing required property `b`")
        );
    }

    #[test]
    fn input_that_does_not_fit_the_arguments_names_the_field() {
        // The engine checks the schema; should it let this through anyway,
        // the router still refuses it.
        let action = execute("add", r#"{"a": 1, "b": "two"}"#);
        let Action::ToolError(e) = action else { panic!("{action:?}") };
        assert!(e.error.starts_with("invalid arguments for `add`: b: invalid type: string"), "{}", e.error);
    }

    #[test]
    fn malformed_input_is_a_tool_error_saying_why() {
        let action = execute("add", "{\"a\": 1,");
        let Action::ToolError(e) = action else { panic!("{action:?}") };
        assert!(e.error.starts_with("malformed arguments for `add`: "), "{}", e.error);
    }

    #[test]
    fn get_time_tells_the_current_unix_time() {
        let now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis();
        let before = now();
        let action = execute("get_time", "{}");
        let after = now();
        let Action::ToolResult(r) = action else { panic!("{action:?}") };
        let unix_ms = u128::from(r.result["unix_ms"].as_u64().unwrap());
        assert!((before..=after).contains(&unix_ms), "{before} <= {unix_ms} <= {after}");
        assert_eq!(r.result.as_object().unwrap().len(), 1);
    }

    #[test]
    fn unknown_tools_are_refused_by_name() {
        assert_eq!(execute("mul", "{}"), Action::tool_error("unknown tool `mul`: this agent runs `add`, `get_time`"));
    }

    #[test]
    fn other_triggers_take_the_proposal() {
        let mut request =
            DecisionRequest::for_trigger(Trigger::ToolFinished(subs_sdk::protocol::trigger::ToolFinished {
                id: "call-1".to_owned(),
                ok: true,
                name: "add".to_owned(),
                result: Some(r#"{"sum":3}"#.to_owned()),
                error: None,
            }));
        request.proposed = DecisionResponse::new()
            .with_message(DraftMessage::tool("call-1", r#"{"sum":3}"#))
            .with_action(Action::llm_call());
        assert_eq!(decide(request.clone()), request.proposed);
    }
}
