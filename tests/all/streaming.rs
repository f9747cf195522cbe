//! The host import that streams deltas while a guest answers `llm.execute`.

use std::sync::{Arc, Mutex};

use serde_json::json;
use subs_engine::worker::{Delivery, Worker, WorkerError};
use subs_protocol::trigger::LlmExecute;
use subs_protocol::{Action, DecisionRequest, StreamDelta, Trigger};
use subs_tests::{agent, guests};

fn llm_execute() -> DecisionRequest {
    DecisionRequest::for_trigger(Trigger::LlmExecute(LlmExecute {
        id: "llm_1".to_owned(),
        request: json!({"model": "test/stream", "messages": [{"role": "user", "content": "hi"}]}),
        format: None,
        stream: true,
        attempt: 1,
        deadline: None,
    }))
}

#[tokio::test]
async fn deltas_reach_the_sink_in_order_before_the_decision() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let seen = seen.clone();
        Arc::new(move |delta: StreamDelta| seen.lock().unwrap().push(delta))
    };
    let delivery = Delivery { request: llm_execute(), deltas: Some(sink) };
    let decision = agent(guests::TEST_STREAM).decide(delivery).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![StreamDelta::text("hel"), StreamDelta::text("lo")]);
    match decision.actions() {
        [Action::LlmResult(result)] => assert_eq!(result.response["content"], "hello"),
        other => panic!("expected one llm.result, got {other:?}"),
    }
}

#[tokio::test]
async fn deltas_are_refused_when_nothing_streams() {
    let err = agent(guests::TEST_STREAM).decide(Delivery::new(llm_execute())).await.unwrap_err();
    match err {
        WorkerError::Declined { message, retryable } => {
            assert!(message.contains("stream: true"), "{message}");
            assert!(!retryable);
        }
        other => panic!("expected a declined decision, got {other}"),
    }
}
