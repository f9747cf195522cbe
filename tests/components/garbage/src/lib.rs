//! Test component: a badly behaved agent. It implements the WIT export
//! directly, below the SDK (whose typed API cannot produce malformed
//! values), and misbehaves as a `client.action` trigger's name asks:
//!
//! - `bad-state`: `state` is not JSON text;
//! - `bad-arguments`: the second action, a `tool.call`, has arguments that
//!   are not JSON text;
//! - `bad-response`: an `llm.result` whose native response is cut off;
//! - `bad-schema`: the config's second tool has an input schema that is not
//!   JSON text;
//! - `decline`: `decide` fails with a retryable error;
//! - `panic`: the guest panics (a trap); its message reaches the engine
//!   through stderr, or through the log import when it is built for
//!   wasm32-unknown-unknown (the suite builds it both ways);
//!
//! any other trigger gets `{}`.

use subs_sdk::bindings::{DecisionRequest, Guest, Messages, branch, wit};

struct Garbage;

fn tool(name: &str, input: &str) -> wit::AgentTool {
    wit::AgentTool {
        name: name.to_owned(),
        description: None,
        input: Some(input.to_owned()),
        output: None,
        handler: None,
    }
}

impl Guest for Garbage {
    fn decide(request: DecisionRequest, _messages: Messages) -> Result<wit::DecisionResponse, wit::DecideError> {
        // What the SDK's export glue does first: built without WASI, a
        // panic's message reaches the engine through its log import.
        subs_sdk::__report_panics();
        let mut decision = wit::DecisionResponse { messages: None, actions: None, state: None, agent: None };
        let branch::Trigger::ClientAction(action) = request.trigger else {
            return Ok(decision);
        };
        match action.name.as_str() {
            "bad-state" => decision.state = Some("{not json".to_owned()),
            "bad-arguments" => {
                decision.actions = Some(vec![
                    wit::Action::Done(wit::Done { data: None }),
                    wit::Action::ToolCall(wit::ToolCallAction {
                        id: None,
                        name: "add".to_owned(),
                        arguments: "{\"a\": 1,".to_owned(),
                        handler: None,
                        retry: None,
                    }),
                ]);
            }
            "bad-response" => {
                decision.actions = Some(vec![wit::Action::LlmResult(wit::LlmResult {
                    id: None,
                    attempt: None,
                    response: wit::LlmResponseBody::Native("[1,".to_owned()),
                })]);
            }
            "bad-schema" => {
                decision.agent = Some(wit::AgentConfig {
                    model: "subs/offline".to_owned(),
                    system: None,
                    stream: None,
                    handler: None,
                    format: None,
                    retry: None,
                    tools: Some(vec![tool("good", "{\"type\":\"object\"}"), tool("bad", "object")]),
                    sub_agents: None,
                    mcp: None,
                });
            }
            "decline" => {
                return Err(wit::DecideError { message: "not today".to_owned(), retryable: true });
            }
            "panic" => panic!("the garbage agent panics on purpose"),
            _ => {}
        }
        Ok(decision)
    }
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
const _: () = {
    subs_sdk::bindings::export_agent!(Garbage with_types_in subs_sdk::bindings);
};

// Natively nothing exports `decide`; naming it keeps the crate free of
// dead-code warnings when the workspace is checked for the host.
#[cfg(not(target_arch = "wasm32"))]
const _: fn(DecisionRequest, Messages) -> Result<wit::DecisionResponse, wit::DecideError> = <Garbage as Guest>::decide;
