//! Agents of the `agent-json` world, whose `decide` takes and gives the
//! protocol's JSON text (what the JavaScript SDK builds by default): the
//! request is the JSON an HTTP worker would be sent, and the decision is
//! read as an HTTP worker's is, under the same rules as a typed one: a
//! field that is not protocol is named, the size limit holds, and the
//! agent's own error keeps its words.

use serde_json::{Value, json};
use subs_engine::worker::component::{AgentPolicy, LimitOverrides};
use subs_engine::worker::{Delivery, Worker, WorkerError};
use subs_protocol::{Action, DecisionRequest, DecisionResponse, Trigger, to_value};
use subs_tests::{agent, canonical, fixture_requests, guests};

/// What the `json-text` guest answers to a request whose state is `state`
/// (a string: that text as its decision).
async fn answer(state: Value, limits: LimitOverrides) -> Result<DecisionResponse, WorkerError> {
    let worker = agent(guests::TEST_JSON_TEXT)
        .for_agent("t", "json-text", &AgentPolicy { limits, http_hosts: None })
        .expect("a valid policy");
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.state = state;
    worker.decide(Delivery::new(request)).await
}

#[tokio::test]
async fn every_fixture_request_arrives_as_the_protocols_json() {
    let worker = agent(guests::TEST_JSON_TEXT);
    for (name, mut request) in fixture_requests() {
        request.state = json!({"n": 1});
        let decision = worker.decide(Delivery::new(request.clone())).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let seen = decision.state.expect("the guest sends the request back in state");
        assert_eq!(canonical(&seen), canonical(&to_value(&request)), "{name}");
    }
}

#[tokio::test]
async fn a_json_decision_is_read_as_any_workers() {
    let decision =
        answer(json!(r#"{"actions":[{"type":"done","data":{"ok":true}}]}"#), LimitOverrides::default()).await.unwrap();
    assert!(matches!(decision.actions.as_deref(), Some([Action::Done(_)])), "{decision:?}");
}

#[tokio::test]
async fn a_decision_that_is_not_protocol_is_malformed_naming_the_field() {
    let cases = [
        ("{not json", None, "key must be a string"),
        (r#"{"actions":[{"type":"tool.call","name":5}]}"#, Some("actions[0].name"), "invalid type"),
        (r#"{"actions":[{"type":"done"}]} trailing"#, None, "trailing characters"),
    ];
    for (text, field, words) in cases {
        match answer(json!(text), LimitOverrides::default()).await {
            Err(WorkerError::MalformedDecision(e)) => {
                assert_eq!(e.field(), field, "{text}: {e}");
                assert!(e.to_string().contains(words), "{text}: {e}");
            }
            other => panic!("{text}: expected a malformed decision, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_json_decision_over_the_size_limit_is_refused_unread() {
    let limits = LimitOverrides { decision_bytes: Some(1024), ..LimitOverrides::default() };
    let big = json!({"state": "x".repeat(2000)}).to_string();
    match answer(json!(big), limits.clone()).await {
        Err(WorkerError::LimitExceeded(hit)) => assert!(hit.contains("decision size limit"), "{hit}"),
        other => panic!("expected the size limit, got {other:?}"),
    }
    // Under it, the same shape passes.
    let small = json!({"state": "x".repeat(500)}).to_string();
    answer(json!(small), limits).await.unwrap();
}

#[tokio::test]
async fn a_json_agents_error_keeps_its_words() {
    match answer(json!({"decline": "not today"}), LimitOverrides::default()).await {
        Err(WorkerError::Declined { message, retryable }) => {
            assert_eq!((message.as_str(), retryable), ("not today", true))
        }
        other => panic!("expected the agent's error, got {other:?}"),
    }
}

/// A `decide` of no world's type is refused when the agent is loaded,
/// naming every signature an agent may export.
#[test]
fn a_decide_of_no_worlds_type_is_refused_naming_every_world() {
    let component = wat::parse_str(
        r#"(component
            (core module $m (func (export "d") (param i32) (result i32) local.get 0))
            (core instance $i (instantiate $m))
            (func (export "decide") (param "request" u32) (result u32) (canon lift (core func $i "d"))))"#,
    )
    .unwrap();
    let error = match subs_tests::host().load(&component) {
        Ok(_) => panic!("a decide taking a number was accepted"),
        Err(e) => e.to_string(),
    };
    for expected in [
        "`func(request: decision-request, messages: messages) -> result<decision-response, decide-error>` (world \
         subs:agent/agent@0.2.0)",
        "`func(request: string, messages: messages) -> result<string, decide-error>` (world \
         subs:agent/agent-json@0.2.0)",
        "`func(request: decision-request) -> result<decision-response, decide-error>` (world subs:agent/agent@0.1.0)",
        "`func(request: string) -> result<string, decide-error>` (world subs:agent/agent-json@0.1.0)",
    ] {
        assert!(error.contains(expected), "{error}");
    }
}
