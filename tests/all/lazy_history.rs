//! Components of `subs:agent@0.2.0`, which read their branch on demand
//! through a `messages` resource: they record what agents of `0.1.0`
//! record, read the messages the engine stored, and cannot read a branch
//! once its decision is over.

use std::sync::Arc;

use serde_json::{Value, json};
use subs_protocol::client::{ClientAction, ClientMessages};
use subs_protocol::{ClientInput, DecisionRequest, DraftMessage, Message, Trigger};
use subs_tests::guests::{TEST_BRANCH, TOOLS, TOOLS_WIT_0_1_0};
use subs_tests::{TENANT, TestEngine};

use crate::http_worker::{recorded, scenario, unix_ms};

/// The `tools` agent built against `0.1.0` (its request carries the whole
/// branch) and against `0.2.0` (it reads the branch on demand) records the
/// same session for the same inputs, in one engine: decisions, config,
/// tool calls and results, messages, tree, events.
#[tokio::test]
async fn a_0_1_0_and_a_0_2_0_build_of_one_agent_record_the_same_session() {
    let t = TestEngine::start().await;
    t.engine.register_agent(TENANT, "tools-0-1-0", Arc::new(subs_tests::agent(TOOLS_WIT_0_1_0)));
    t.engine.register_agent(TENANT, "tools-0-2-0", Arc::new(subs_tests::agent(TOOLS)));
    let start = unix_ms();
    scenario(&t, "v1", "tools-0-1-0").await;
    scenario(&t, "v2", "tools-0-2-0").await;
    let window = (start, unix_ms());
    let (v1, v2) = (recorded(&t, "v1", window).await, recorded(&t, "v2", window).await);
    assert!(v2["messages"].as_array().is_some_and(|m| m.len() >= 8), "the scenario ran: {v2:#}");
    assert_eq!(subs_tests::canonical(&v2), subs_tests::canonical(&v1), "0.2.0:\n{v2:#}\n0.1.0:\n{v1:#}");
}

/// What the agent read on demand (its state's `read`) is what the engine
/// stored, after an edit forked the branch: the length, the last and first
/// messages, the messages after the first, positions by id, the last two,
/// and the tree with the old branch in it; none of it read the path whole.
#[tokio::test]
async fn a_message_read_on_demand_is_the_one_stored_after_an_edit_forked_the_branch() {
    let t = TestEngine::start().await;
    t.engine.register_agent(TENANT, "branch", Arc::new(subs_tests::agent(TEST_BRANCH)));
    t.chat("b", "branch", "first").await;
    t.chat("b", "branch", "second").await;
    let before = t.snapshot("b").await.messages;
    assert_eq!(before.len(), 4);

    // The client edits its second message, forking the branch.
    let mut view: Vec<DraftMessage> = before[..2].iter().cloned().map(DraftMessage::from).collect();
    view.push(DraftMessage::user("second, edited"));
    let edit = ClientInput::ClientMessages(ClientMessages {
        agent_id: "branch".to_owned(),
        turn_id: None,
        messages: view,
        stream: None,
        client: None,
    });
    let accepted = t.engine.sessions().input(TENANT, "b", edit, Default::default()).await.unwrap();
    t.wait("b", accepted.turn_id.as_deref().unwrap()).await;
    // A decision about the branch as it now stands.
    let ask = ClientInput::ClientAction(ClientAction {
        agent_id: "branch".to_owned(),
        turn_id: None,
        name: "whole".to_owned(),
        args: None,
    });
    let accepted = t.engine.sessions().input(TENANT, "b", ask, Default::default()).await.unwrap();
    t.wait("b", accepted.turn_id.as_deref().unwrap()).await;

    let stored = t.snapshot("b").await;
    let path = &stored.messages;
    assert_eq!(path.len(), 4);
    assert_eq!(path[2].text(), "second, edited", "the branch forked");
    assert_eq!(stored.message_tree.nodes.len(), 6, "the old branch is in the tree");
    let summary = |m: &Message| json!({ "id": m.id, "role": m.role, "text": m.text() });
    let tree: Vec<Value> =
        stored.message_tree.nodes.iter().map(|n| json!({ "id": n.message.id, "parent": n.parent_id })).collect();
    let expected = json!({
        "len": 4,
        "last": summary(&path[3]),
        "first": summary(&path[0]),
        "after_first": 3,
        "position_last": 3,
        "last_2": [path[2].id, path[3].id],
        "whole": false,
        "tree": tree,
    });
    let state = &stored.record.state;
    assert_eq!(state["read"], expected, "read on demand:\n{state:#}");
    let ids: Vec<&str> = path.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(state["path"], json!(ids), "read whole");
}

fn message(i: usize) -> Message {
    subs_protocol::from_value(json!({ "id": format!("m{i}"), "role": "user", "content": format!("message {i}") }))
        .unwrap()
}

fn request(messages: usize) -> DecisionRequest {
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.messages = (0..messages).map(message).collect::<Vec<_>>().into();
    request
}

/// A guest that keeps its decision's `messages` (in a global) and reads it
/// in the next decision of the same instance gets an error, not the new
/// branch nor the old: the engine answers reads only through the handle
/// of the decision being made. (The engine gives every decision a fresh
/// instance, so this takes the host's test hook to arrange.)
#[tokio::test]
async fn a_messages_resource_kept_past_its_decision_reads_nothing() {
    let agent = subs_tests::agent(TEST_BRANCH);
    let answers = agent.decide_twice_in_one_instance([request(3), request(5)]).await.expect("the instance starts");
    let first = answers[0].as_ref().expect("the first decision reads its own branch");
    let read = &first.state.as_ref().unwrap()["read"];
    assert_eq!((read["len"].clone(), read["last"]["id"].clone()), (json!(3), json!("m2")));
    let second = answers[1].as_ref().expect_err("reading the kept branch fails the decision");
    let message = second.to_string();
    assert!(message.contains("belongs to a decision that is over"), "{message}");
}
