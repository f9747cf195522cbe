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

use serde_json::json;
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::Trigger;
use subs_tests::TestEngine;
use subs_tests::guests::{
    TEST_JS_BRANCH, TEST_JS_BRANCH_TYPED, TEST_PY_BRANCH, TOOLS_JS, TOOLS_JS_WIT_0_1_0, TOOLS_PY, TOOLS_PY_WIT_0_1_0,
};

use crate::lazy_history::{
    both_builds_record_the_same_session, message, reading_a_kept_branch_fails, reads_a_long_view_on_demand,
    reads_the_stored_branch_after_a_fork, request, summary,
};

/// The branch agents: Python (typed world `agent`), JavaScript in
/// `agent-json` and in the typed `agent`.
const READERS: [(&str, &str); 3] =
    [("branch-py", TEST_PY_BRANCH), ("branch-js", TEST_JS_BRANCH), ("branch-js-typed", TEST_JS_BRANCH_TYPED)];

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

/// In a branch of 4,000 messages, each agent reads a `client.messages`
/// trigger's view (sharing the branch) on demand: its length, first and
/// last messages and the new one, without reading it whole.
#[tokio::test]
async fn python_and_js_agents_read_a_long_client_view_on_demand() {
    for (name, wasm) in READERS {
        reads_a_long_view_on_demand(name, wasm).await;
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
        reads_the_stored_branch_after_a_fork(&t, name, wasm).await;
    }
}

/// A Python or JavaScript agent that keeps its decision's `messages` (in a
/// global) and reads it in the next decision of the same instance fails
/// that decision with the engine's refusal; the first decision read its
/// own branch. (The host's test hook runs the typed world only.)
#[tokio::test]
async fn a_python_or_js_agent_reading_a_kept_branch_fails_with_the_engines_refusal() {
    for (name, wasm) in [("branch-py", TEST_PY_BRANCH), ("branch-js-typed", TEST_JS_BRANCH_TYPED)] {
        let message = reading_a_kept_branch_fails(name, wasm).await;
        assert!(message.contains("BranchError"), "{name}: {message}");
    }
}

/// The Python and JavaScript `tools` examples built against `0.1.0` (the
/// branch in the request) and against `0.2.0` (read on demand) record the
/// same session for the same inputs, in one engine.
#[tokio::test]
async fn python_and_js_builds_for_0_1_0_and_0_2_0_record_the_same_session() {
    let t = TestEngine::start().await;
    for (name, old, new) in [("tools-py", TOOLS_PY_WIT_0_1_0, TOOLS_PY), ("tools-js", TOOLS_JS_WIT_0_1_0, TOOLS_JS)] {
        both_builds_record_the_same_session(&t, name, old, new).await;
    }
}
