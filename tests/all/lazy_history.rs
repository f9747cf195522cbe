//! Components of `subs:agent@0.2.0`, which read their branch on demand
//! through a `messages` resource: they record what agents of `0.1.0`
//! record, read the messages the engine stored, and cannot read a branch
//! once its decision is over.
//!
//! Each check is a function of the agent it runs, so the Python and
//! JavaScript twins of these agents (`branch_pyjs`) are held to the same.

use std::sync::Arc;

use serde_json::{Value, json};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::client::{ClientAction, ClientMessages};
use subs_protocol::{ClientInput, ClientView, DecisionRequest, DraftMessage, Message, Trigger};
use subs_tests::guests::{TEST_BRANCH, TOOLS, TOOLS_WIT_0_1_0};
use subs_tests::{TENANT, TestEngine};

use crate::http_worker::{recorded, scenario, unix_ms};

/// Message `i` of a made-up branch: `m{i}`, user and assistant in turn.
pub(crate) fn message(i: usize) -> Message {
    let role = if i.is_multiple_of(2) { "user" } else { "assistant" };
    subs_protocol::from_value(json!({ "id": format!("m{i}"), "role": role, "content": format!("message {i}") }))
        .unwrap()
}

/// A request for `trigger` whose branch is `messages` made-up messages.
pub(crate) fn request(messages: usize, trigger: Trigger) -> DecisionRequest {
    let mut request = DecisionRequest::for_trigger(trigger);
    request.messages = (0..messages).map(message).collect::<Vec<_>>().into();
    request
}

/// How the branch agents report a message they read.
pub(crate) fn summary(m: &Message) -> Value {
    json!({ "id": m.id, "role": m.role, "text": m.text() })
}

/// Runs the same scenario on `old` (built for `0.1.0`) and `new` (for
/// `0.2.0`) in one engine, and checks they record the same session.
pub(crate) async fn both_builds_record_the_same_session(t: &TestEngine, name: &str, old: &str, new: &str) {
    let (v1, v2) = (format!("{name}-0-1-0"), format!("{name}-0-2-0"));
    t.engine.register_agent(TENANT, &v1, Arc::new(subs_tests::agent(old)));
    t.engine.register_agent(TENANT, &v2, Arc::new(subs_tests::agent(new)));
    let start = unix_ms();
    scenario(t, &v1, &v1).await;
    scenario(t, &v2, &v2).await;
    let window = (start, unix_ms());
    let (a, b) = (recorded(t, &v1, window).await, recorded(t, &v2, window).await);
    assert!(b["messages"].as_array().is_some_and(|m| m.len() >= 8), "{name}: the scenario ran: {b:#}");
    assert_eq!(subs_tests::canonical(&b), subs_tests::canonical(&a), "{name} 0.2.0:\n{b:#}\n0.1.0:\n{a:#}");
}

/// Sends `input` to `session` and waits for its turn to end.
async fn run(t: &TestEngine, session: &str, input: ClientInput) {
    let accepted = t.engine.sessions().input(TENANT, session, input, Default::default()).await.unwrap();
    t.wait(session, accepted.turn_id.as_deref().unwrap()).await;
}

/// Registers the branch agent `wasm` as `name`, chats twice, edits the
/// second message (forking the branch), asks for a decision about the
/// branch as it now stands, and checks what the agent read on demand is
/// what the engine stored, and that none of it read the path whole.
pub(crate) async fn reads_the_stored_branch_after_a_fork(t: &TestEngine, name: &str, wasm: &str) {
    t.engine.register_agent(TENANT, name, Arc::new(subs_tests::agent(wasm)));
    let session = format!("{name}-fork");
    t.chat(&session, name, "first").await;
    t.chat(&session, name, "second").await;
    let before = t.snapshot(&session).await.messages;
    assert_eq!(before.len(), 4, "{name}");

    let mut view: Vec<DraftMessage> = before[..2].iter().cloned().map(DraftMessage::from).collect();
    view.push(DraftMessage::user("second, edited"));
    let edit = ClientMessages { agent_id: name.to_owned(), turn_id: None, messages: view, stream: None, client: None };
    run(t, &session, ClientInput::ClientMessages(edit)).await;
    let ask = ClientAction { agent_id: name.to_owned(), turn_id: None, name: "whole".to_owned(), args: None };
    run(t, &session, ClientInput::ClientAction(ask)).await;

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

    // The edit's view: the two messages before the fork, read from the
    // branch, then the edited one, the client's own (no id yet).
    let edited = json!({ "id": null, "role": "user", "text": "second, edited" });
    let view = json!({
        "len": 3,
        "new_from": 2,
        "first": summary(&path[0]),
        "last": edited,
        "new": [edited],
        "whole": false,
        "ids": [path[0].id, path[1].id, null],
    });
    assert_eq!(state["view"], view, "{name}: the edit's view, read on demand:\n{state:#}");
}

/// Asks agent `wasm` about a `client.messages` trigger whose view is a
/// branch of 4,000 messages plus a new one, sharing the branch: what it
/// reads of the view (its length, first and last messages, the new one)
/// is the view's, without reading it whole; read whole, it is every
/// message of the view, in order.
pub(crate) async fn reads_a_long_view_on_demand(name: &str, wasm: &str) {
    const N: usize = 4000;
    let mut request = request(N, Trigger::SessionStart);
    let new = DraftMessage::user("the newest");
    let view = ClientView::sharing(request.messages.clone(), N, vec![new.clone()]);
    let new_from = u32::try_from(N).unwrap();
    let trigger = subs_protocol::trigger::ClientMessages { messages: view, new_from, client: Default::default() };
    request.trigger = Trigger::ClientMessages(trigger);
    let decision = subs_tests::agent(wasm).decide(Delivery::new(request)).await.unwrap();
    let state = decision.state.unwrap_or_default();
    let newest = json!({ "id": null, "role": "user", "text": "the newest" });
    let mut ids: Vec<Value> = (0..N).map(|i| json!(format!("m{i}"))).collect();
    ids.push(Value::Null);
    let expected = json!({
        "len": N + 1,
        "new_from": N,
        "first": summary(&message(0)),
        "last": newest,
        "new": [newest],
        "whole": false,
        "ids": ids,
    });
    assert_eq!(state["view"], expected, "{name}");
}

/// Asks one instance of the branch agent `wasm` for two decisions (the
/// host's test hook: the engine gives every decision a fresh instance);
/// checks the first read its own branch and returns the second's error,
/// which must refuse the branch kept from the first.
pub(crate) async fn reading_a_kept_branch_fails(name: &str, wasm: &str) -> String {
    let agent = subs_tests::agent(wasm);
    let requests = [request(3, Trigger::SessionStart), request(5, Trigger::SessionStart)];
    let answers = agent.decide_twice_in_one_instance(requests).await.expect("the instance starts");
    let first = answers[0].as_ref().expect("the first decision reads its own branch");
    let read = &first.state.as_ref().unwrap()["read"];
    assert_eq!((read["len"].clone(), read["last"]["id"].clone()), (json!(3), json!("m2")), "{name}");
    let message = answers[1].as_ref().expect_err("reading the kept branch fails the decision").to_string();
    assert!(message.contains("belongs to a decision that is over"), "{name}: {message}");
    message
}

/// The `tools` agent built against `0.1.0` (its request carries the whole
/// branch) and against `0.2.0` (it reads the branch on demand) records the
/// same session for the same inputs, in one engine: decisions, config,
/// tool calls and results, messages, tree, events.
#[tokio::test]
async fn a_0_1_0_and_a_0_2_0_build_of_one_agent_record_the_same_session() {
    both_builds_record_the_same_session(&TestEngine::start().await, "tools", TOOLS_WIT_0_1_0, TOOLS).await;
}

/// What the agent read on demand (its state's `read`) is what the engine
/// stored, after an edit forked the branch: the length, the last and first
/// messages, the messages after the first, positions by id, the last two,
/// and the tree with the old branch in it; none of it read the path whole.
#[tokio::test]
async fn a_message_read_on_demand_is_the_one_stored_after_an_edit_forked_the_branch() {
    reads_the_stored_branch_after_a_fork(&TestEngine::start().await, "branch", TEST_BRANCH).await;
}

/// In a branch of 4,000 messages, a `client.messages` trigger's view
/// shares the branch's messages, and the agent reads of them only what it
/// asks for.
#[tokio::test]
async fn a_client_view_sharing_a_long_branch_is_read_on_demand() {
    reads_a_long_view_on_demand("branch", TEST_BRANCH).await;
}

/// A guest that keeps its decision's `messages` (in a global) and reads it
/// in the next decision of the same instance gets an error, not the new
/// branch nor the old: the engine answers reads only through the handle
/// of the decision being made.
#[tokio::test]
async fn a_messages_resource_kept_past_its_decision_reads_nothing() {
    reading_a_kept_branch_fails("branch", TEST_BRANCH).await;
}
