//! A guest that misbehaves fails its own delivery with an error that says
//! what is wrong (naming the field for malformed decisions), never a panic
//! of the host, and the host goes on serving other guests.

use subs_engine::worker::{Delivery, Worker, WorkerError};
use subs_protocol::trigger::ClientAction;
use subs_protocol::{DecisionRequest, DecisionResponse, Trigger};
use subs_tests::{agent, guests};

async fn ask_garbage(name: &str) -> Result<DecisionResponse, WorkerError> {
    let request =
        DecisionRequest::for_trigger(Trigger::ClientAction(ClientAction { name: name.to_owned(), args: None }));
    agent(guests::TEST_GARBAGE).decide(Delivery::new(request)).await
}

async fn malformed_field(name: &str) -> (String, String) {
    match ask_garbage(name).await {
        Err(WorkerError::MalformedDecision(e)) => (e.field().unwrap_or_default().to_owned(), e.to_string()),
        other => panic!("{name}: expected a malformed decision, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_fields_are_named() {
    let (field, message) = malformed_field("bad-state").await;
    assert_eq!(field, "state", "{message}");
    assert!(message.contains("invalid JSON"), "{message}");

    let (field, message) = malformed_field("bad-arguments").await;
    assert_eq!(field, "actions[1].arguments", "{message}");

    let (field, message) = malformed_field("bad-response").await;
    assert_eq!(field, "actions[0].response", "{message}");

    let (field, message) = malformed_field("bad-schema").await;
    assert_eq!(field, "agent.tools[1].input", "{message}");
}

#[tokio::test]
async fn a_declined_decision_keeps_the_agents_words() {
    match ask_garbage("decline").await {
        Err(e @ WorkerError::Declined { .. }) => {
            assert!(e.to_string().contains("not today"), "{e}");
            assert!(e.is_retryable());
        }
        other => panic!("expected a declined decision, got {other:?}"),
    }
}

#[tokio::test]
async fn a_panicking_guest_traps_and_the_host_goes_on() {
    match ask_garbage("panic").await {
        Err(e @ WorkerError::Trapped(_)) => assert!(e.to_string().contains("unreachable"), "{e}"),
        other => panic!("expected a trap, got {other:?}"),
    }
    // The same component, a fresh instance, decides normally afterwards.
    assert_eq!(ask_garbage("anything").await.unwrap(), DecisionResponse::new());
    // And other components are unaffected.
    let echo = agent(guests::TEST_ECHO);
    let request = DecisionRequest::for_trigger(Trigger::SessionStart);
    let decision = echo.decide(Delivery::new(request.clone())).await.unwrap();
    assert_eq!(decision.state, Some(subs_protocol::to_value(&request)));
}

#[test]
fn bytes_that_are_not_a_component_are_refused_with_a_reason() {
    let err = subs_tests::host().load(b"definitely not wasm").unwrap_err();
    assert!(err.to_string().contains("not a valid WebAssembly component"), "{err}");
}

#[test]
fn a_core_module_built_without_the_sdk_is_refused_with_a_reason() {
    // A valid core module, but with no subs:agent world in it: made a
    // component, it has no `decide`.
    let err = subs_tests::host().load(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(err.to_string().contains("does not export `decide`"), "{err}");
    // Bytes that only start like a core module are not one.
    let err = subs_tests::host().load(b"\0asm\x01\0\0\0\x01\xff").unwrap_err();
    assert!(err.to_string().contains("cannot make a component of"), "{err}");
}

#[tokio::test]
async fn a_guest_built_without_wasi_decides_like_its_component() {
    let request =
        DecisionRequest::for_trigger(Trigger::ClientAction(ClientAction { name: "x".to_owned(), args: None }));
    let lean = agent(guests::TEST_GARBAGE_LEAN).decide(Delivery::new(request.clone())).await.unwrap();
    assert_eq!(lean, agent(guests::TEST_GARBAGE).decide(Delivery::new(request)).await.unwrap());
}
