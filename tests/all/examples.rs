//! The example agents, run as real components.

use serde_json::json;
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{Action, AgentConfig, DecisionRequest, DecisionResponse, ToolInput, Trigger};
use subs_tests::{agent, fixture_requests, guests, tool_execute};

#[tokio::test]
async fn passthrough_returns_proposed_for_every_trigger() {
    let passthrough = agent(guests::PASSTHROUGH);
    for (name, request) in fixture_requests() {
        let decision = passthrough.decide(Delivery::new(request.clone())).await.unwrap();
        assert_eq!(decision, request.proposed, "{name}");
    }
}

fn session_start() -> DecisionRequest {
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.proposed = DecisionResponse::new().with_agent(AgentConfig::new("subs/offline"));
    request
}

#[tokio::test]
async fn tools_sets_its_config_at_session_start() {
    let decision = agent(guests::TOOLS).decide(Delivery::new(session_start())).await.unwrap();
    let config = decision.agent.expect("tools sets its config");
    assert_eq!(config.model, "subs/offline", "keeps the proposed model");
    assert!(config.system.as_deref().is_some_and(|s| !s.is_empty()), "has a system prompt");
    let add = config.tool("add").expect("declares add");
    assert_eq!(add.input.as_ref().unwrap()["required"], json!(["a", "b"]));
    assert!(add.output.is_some());
    let get_time = config.tool("get_time").expect("declares get_time");
    assert_eq!(get_time.input.as_ref().unwrap()["type"], "object");
}

#[tokio::test]
async fn tools_runs_add() {
    let decision =
        agent(guests::TOOLS).decide(Delivery::new(tool_execute("add", json!({"a": 1, "b": 2.5})))).await.unwrap();
    match decision.actions() {
        [Action::ToolResult(result)] => assert_eq!(result.result, json!({"sum": 3.5})),
        other => panic!("expected one tool.result, got {other:?}"),
    }
}

#[tokio::test]
async fn tools_runs_get_time_with_the_host_clock() {
    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let decision = agent(guests::TOOLS).decide(Delivery::new(tool_execute("get_time", json!({})))).await.unwrap();
    let after = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    match decision.actions() {
        [Action::ToolResult(result)] => {
            let unix_ms = u128::from(result.result["unix_ms"].as_u64().expect("unix_ms is a number"));
            assert!((before..=after).contains(&unix_ms), "{before} <= {unix_ms} <= {after}");
        }
        other => panic!("expected one tool.result, got {other:?}"),
    }
}

#[tokio::test]
async fn tools_reports_bad_arguments_as_tool_errors() {
    let mut request = tool_execute("add", json!({"a": "one"}));
    if let Trigger::ToolExecute(execute) = &mut request.trigger {
        execute.input =
            ToolInput::Invalid { value: json!({"a": "one"}), error: "\"one\" is not of type \"number\"".to_owned() };
    }
    let decision = agent(guests::TOOLS).decide(Delivery::new(request)).await.unwrap();
    match decision.actions() {
        [Action::ToolError(error)] => assert!(error.error.contains("number"), "{}", error.error),
        other => panic!("expected one tool.error, got {other:?}"),
    }
}
