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
        Arc::new(move |delta: StreamDelta| {
            seen.lock().unwrap().push(delta);
            Ok(())
        })
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

#[tokio::test]
async fn a_worker_run_llm_call_streams_to_clients_through_the_loop() {
    let t = subs_tests::TestEngine::start().await;
    let mut events = t.engine.reads().subscribe(subs_tests::TENANT, "stream").unwrap();
    let turn = t.send("stream", "streamer", "hi").await;
    let mut seen = Vec::new();
    loop {
        let event = events.recv().await.unwrap();
        let last = event.name == "turn.done";
        seen.push(event);
        if last {
            break;
        }
    }
    assert_eq!(t.wait("stream", &turn).await.status, subs_engine::store::TurnStatus::Done);
    let deltas: Vec<_> = seen.iter().filter(|e| e.name == "llm.token.delta").collect();
    assert_eq!(deltas.len(), 2, "{seen:?}");
    assert!(deltas.iter().all(|d| d.seq.is_none()), "token deltas are live only");
    assert_eq!(deltas[0].data["text"], "hel");
    assert_eq!(deltas[1].data["text"], "lo");
    let call_id = deltas[0].data["call_id"].as_str().unwrap();
    assert!(call_id.starts_with("llm_"), "{call_id}");
    // The deltas came before the reply was recorded.
    let first_delta = seen.iter().position(|e| e.name == "llm.token.delta").unwrap();
    let reply = seen.iter().rposition(|e| e.name == "message").unwrap();
    assert!(first_delta < reply);
    assert_eq!(t.transcript("stream").await, ["user: hi", "assistant: hello"]);
    // None of them was stored.
    let stored = t.engine.reads().events(subs_tests::TENANT, "stream", None, 100).await.unwrap();
    assert!(stored.iter().all(|e| e.name != "llm.token.delta"));
}
