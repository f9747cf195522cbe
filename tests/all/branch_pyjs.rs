//! Python and JavaScript agents built against `subs:agent@0.2.0` (their
//! SDKs' default), whose `request.messages` reads the branch on demand
//! through the `messages` resource: what they read is what the engine
//! stored, in a long branch without reading it whole, after an edit forked
//! it, and never through a resource kept past its decision; and a build
//! against `0.1.0` records the same session as one against `0.2.0`.
//!
//! The agents are `tests/python/branch_agent.py` and
//! `tests/js/branch_agent.js`, twins of `tests/components/branch`: each
//! reports in its state what it read.

use std::sync::Arc;

use serde_json::{Value, json};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::client::{ClientAction, ClientMessages};
use subs_protocol::{ClientInput, DecisionRequest, DraftMessage, Message, Trigger};
use subs_tests::guests::{
    TEST_JS_BRANCH, TEST_JS_BRANCH_TYPED, TEST_PY_BRANCH, TOOLS_JS, TOOLS_JS_WIT_0_1_0, TOOLS_PY, TOOLS_PY_WIT_0_1_0,
};
use subs_tests::{TENANT, TestEngine};

use crate::http_worker::{recorded, scenario, unix_ms};

/// The branch agents: Python (typed world `agent`), JavaScript in
/// `agent-json` and in the typed `agent`.
const READERS: [(&str, &str); 3] =
    [("branch-py", TEST_PY_BRANCH), ("branch-js", TEST_JS_BRANCH), ("branch-js-typed", TEST_JS_BRANCH_TYPED)];

fn message(i: usize) -> Message {
    let role = if i.is_multiple_of(2) { "user" } else { "assistant" };
    subs_protocol::from_value(json!({ "id": format!("m{i}"), "role": role, "content": format!("message {i}") }))
        .unwrap()
}

fn request(messages: usize, trigger: Trigger) -> DecisionRequest {
    let mut request = DecisionRequest::for_trigger(trigger);
    request.messages = (0..messages).map(message).collect::<Vec<_>>().into();
    request
}

fn summary(m: &Message) -> Value {
    json!({ "id": m.id, "role": m.role, "text": m.text() })
}

/// In a branch of 4,000 messages, each agent's answers (the newest message,
/// the first, how many follow it, the last two, positions) are the
/// messages of the branch, and none of them read the branch whole; asked
/// for the whole path, it gets exactly the branch, in order.
#[tokio::test]
async fn in_a_long_branch_python_and_js_agents_read_the_newest_message_without_reading_the_rest() {
    const N: usize = 4000;
    let expected = json!({
        "len": N,
        "last": summary(&message(N - 1)),
        "first": summary(&message(0)),
        "after_first": N - 1,
        "position_last": N - 1,
        "last_2": [format!("m{}", N - 2), format!("m{}", N - 1)],
        "whole": false,
        "tree": [],
    });
    let ids: Vec<String> = (0..N).map(|i| format!("m{i}")).collect();
    for (name, wasm) in READERS {
        let agent = subs_tests::agent(wasm);
        let decision = agent.decide(Delivery::new(request(N, Trigger::SessionStart))).await.unwrap();
        let state = decision.state.unwrap_or_default();
        assert_eq!(state["read"], expected, "{name}: {state:#}");
        assert!(state.get("path").is_none(), "{name}: {state:#}");

        let whole =
            Trigger::ClientAction(subs_protocol::trigger::ClientAction { name: "whole".to_owned(), args: None });
        let decision = agent.decide(Delivery::new(request(N, whole))).await.unwrap();
        let state = decision.state.unwrap_or_default();
        assert_eq!(state["path"], json!(ids), "{name}: the whole path, in order");
        assert_eq!(state["read"]["last"], summary(&message(N - 1)), "{name}");
    }
}

/// What each agent read on demand is what the engine stored, after an edit
/// forked the branch: the length, the last and first messages, the
/// messages after the first, positions by id, the last two, the tree with
/// the old branch in it (none of it reading the path whole), and the path
/// read whole.
#[tokio::test]
async fn python_and_js_agents_read_the_messages_stored_after_an_edit_forked_the_branch() {
    let t = TestEngine::start().await;
    for (name, wasm) in READERS {
        t.engine.register_agent(TENANT, name, Arc::new(subs_tests::agent(wasm)));
        let session = format!("{name}-fork");
        t.chat(&session, name, "first").await;
        t.chat(&session, name, "second").await;
        let before = t.snapshot(&session).await.messages;
        assert_eq!(before.len(), 4, "{name}");

        // The client edits its second message, forking the branch.
        let mut view: Vec<DraftMessage> = before[..2].iter().cloned().map(DraftMessage::from).collect();
        view.push(DraftMessage::user("second, edited"));
        let edit = ClientInput::ClientMessages(ClientMessages {
            agent_id: name.to_owned(),
            turn_id: None,
            messages: view,
            stream: None,
            client: None,
        });
        let accepted = t.engine.sessions().input(TENANT, &session, edit, Default::default()).await.unwrap();
        t.wait(&session, accepted.turn_id.as_deref().unwrap()).await;
        // A decision about the branch as it now stands.
        let ask = ClientInput::ClientAction(ClientAction {
            agent_id: name.to_owned(),
            turn_id: None,
            name: "whole".to_owned(),
            args: None,
        });
        let accepted = t.engine.sessions().input(TENANT, &session, ask, Default::default()).await.unwrap();
        t.wait(&session, accepted.turn_id.as_deref().unwrap()).await;

        let stored = t.snapshot(&session).await;
        let path = &stored.messages;
        assert_eq!(path.len(), 4, "{name}");
        assert_eq!(path[2].text(), "second, edited", "{name}: the branch forked");
        assert_eq!(stored.message_tree.nodes.len(), 6, "{name}: the old branch is in the tree");
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
        assert_eq!(state["read"], expected, "{name}: read on demand:\n{state:#}");
        let ids: Vec<&str> = path.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(state["path"], json!(ids), "{name}: read whole");
    }
}

/// A Python or JavaScript agent that keeps its decision's `messages` (in a
/// global) and reads it in the next decision of the same instance fails
/// that decision with the engine's refusal; the first decision read its
/// own branch. (The host's test hook runs the typed world only.)
#[tokio::test]
async fn a_python_or_js_agent_reading_a_kept_branch_fails_with_the_engines_refusal() {
    for (name, wasm) in [("branch-py", TEST_PY_BRANCH), ("branch-js-typed", TEST_JS_BRANCH_TYPED)] {
        let agent = subs_tests::agent(wasm);
        let requests = [request(3, Trigger::SessionStart), request(5, Trigger::SessionStart)];
        let answers = agent.decide_twice_in_one_instance(requests).await.expect("the instance starts");
        let first = answers[0].as_ref().expect("the first decision reads its own branch");
        let read = &first.state.as_ref().unwrap()["read"];
        assert_eq!((read["len"].clone(), read["last"]["id"].clone()), (json!(3), json!("m2")), "{name}");
        let second = answers[1].as_ref().expect_err("reading the kept branch fails the decision");
        let message = second.to_string();
        assert!(message.contains("BranchError"), "{name}: {message}");
        assert!(message.contains("belongs to a decision that is over"), "{name}: {message}");
    }
}

/// The Python and JavaScript `tools` examples built against `0.1.0` (the
/// branch in the request) and against `0.2.0` (read on demand) record the
/// same session for the same inputs, in one engine.
#[tokio::test]
async fn python_and_js_builds_for_0_1_0_and_0_2_0_record_the_same_session() {
    let t = TestEngine::start().await;
    for (name, old, new) in [("py", TOOLS_PY_WIT_0_1_0, TOOLS_PY), ("js", TOOLS_JS_WIT_0_1_0, TOOLS_JS)] {
        let (v1, v2) = (format!("tools-{name}-0-1-0"), format!("tools-{name}-0-2-0"));
        t.engine.register_agent(TENANT, &v1, Arc::new(subs_tests::agent(old)));
        t.engine.register_agent(TENANT, &v2, Arc::new(subs_tests::agent(new)));
        let start = unix_ms();
        scenario(&t, &format!("{v1}-s"), &v1).await;
        scenario(&t, &format!("{v2}-s"), &v2).await;
        let window = (start, unix_ms());
        let (a, b) = (recorded(&t, &format!("{v1}-s"), window).await, recorded(&t, &format!("{v2}-s"), window).await);
        assert!(b["messages"].as_array().is_some_and(|m| m.len() >= 8), "{name}: the scenario ran: {b:#}");
        assert_eq!(subs_tests::canonical(&b), subs_tests::canonical(&a), "{name} 0.2.0:\n{b:#}\n0.1.0:\n{a:#}");
    }
}
