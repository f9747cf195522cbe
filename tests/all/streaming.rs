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

/// A follower that starts from the live events, as the stream of a turn an
/// input starts does, still passes every stored event once and in order:
/// the first live event that is not the next one sends it to the store for
/// those it did not see live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_first_follower_reads_the_store_for_what_it_did_not_see() {
    let t = subs_tests::TestEngine::start().await;
    t.chat("s", "passthrough", "one").await;
    let stored = t.engine.reads().events(subs_tests::TENANT, "s", None, 1000).await.unwrap();
    assert!(stored.len() > 3, "a turn stores several events: {stored:?}");
    // Subscribed after the first turn, starting after its third event: the
    // rest of the first turn is only in the store.
    let follow = t.engine.reads().follow(subs_tests::TENANT, "s", Some(2)).unwrap();
    let mut follow = follow.live_first();
    t.chat("s", "passthrough", "two").await;
    let events = t.engine.reads().events(subs_tests::TENANT, "s", None, 1000).await.unwrap();
    let last = events.last().and_then(|e| e.seq).expect("stored events");
    let mut seen = Vec::new();
    while seen.last() != Some(&last) {
        let frame = tokio::time::timeout(std::time::Duration::from_secs(10), follow.next()).await.expect("an event");
        if let Some(seq) = frame.unwrap().seq {
            seen.push(seq);
        }
    }
    assert_eq!(seen, (3..=last).collect::<Vec<_>>(), "every event after the third once, in order");
}
