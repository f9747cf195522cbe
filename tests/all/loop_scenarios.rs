//! The durable loop, end to end: real components deciding, the offline
//! model answering, a real store underneath: each scenario runs on a redb
//! file (`loop_scenarios::redb::…`) and on a PostgreSQL database
//! (`loop_scenarios::postgres::…`, skipped, saying so, where PostgreSQL is
//! not installed).

use serde_json::json;
use subs_engine::store::{SessionStatus, TurnStatus};
use subs_engine::{Engine, InputError};
use subs_protocol::client::{ClientMessages, InterruptResume, ToolResult};
use subs_protocol::{AgentTool, ClientContext, ClientInput, DraftMessage, Role, ToolHandler};
use subs_tests::{TENANT, TestEngine};

/// Collects the names of the stored events of a session.
async fn event_names(engine: &Engine, session: &str) -> Vec<String> {
    engine.reads().events(TENANT, session, None, 1000).await.unwrap().into_iter().map(|e| e.name).collect()
}

async fn a_chat_turn(t: TestEngine) {
    let turn = t.chat("chat", "helper", "hello there").await;
    assert_eq!(turn.status, TurnStatus::Done);
    assert_eq!(t.transcript("chat").await, ["user: hello there", "assistant: You said: hello there"]);
    assert_eq!(event_names(&t.engine, "chat").await, ["turn.started", "message", "message", "turn.done"]);
    let snapshot = t.snapshot("chat").await;
    assert_eq!(snapshot.record.status, SessionStatus::Idle);
    assert_eq!(snapshot.record.agent.unwrap().model, "subs/offline", "passthrough keeps the proposed config");
}

async fn a_tool_loop_with_two_parallel_calls(t: TestEngine) {
    let turn =
        t.chat("tools", "tools", r#"use tool add with {"a": 1, "b": 2} and use tool add with {"a": 3, "b": 4}"#).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    let messages = t.snapshot("tools").await.messages;
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant]);
    let calls = messages[1].tool_calls.clone().expect("the model called tools");
    assert_eq!(calls.len(), 2);
    assert_eq!(messages[2].tool_call_id.as_deref(), Some(calls[0].id.as_str()));
    assert_eq!(messages[3].tool_call_id.as_deref(), Some(calls[1].id.as_str()));
    let sums: Vec<f64> = messages[2..4]
        .iter()
        .map(|m| serde_json::from_str::<serde_json::Value>(&m.text()).unwrap()["sum"].as_f64().unwrap())
        .collect();
    assert_eq!(sums, [3.0, 7.0]);
    let answer = messages[4].text();
    assert!(answer.contains("3") && answer.contains("7"), "{answer}");
}

async fn a_client_tool(t: TestEngine) {
    let mut events = t.engine.reads().subscribe(TENANT, "client").unwrap();
    let confirm = AgentTool::new("confirm")
        .description("Asks the user to confirm.")
        .input(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}))
        .handler(ToolHandler::Client);
    let input = ClientInput::ClientMessages(ClientMessages {
        agent_id: "helper".to_owned(),
        turn_id: Some("turn-1".to_owned()),
        messages: vec![DraftMessage::user(r#"use tool confirm with {"ok": true}"#)],
        stream: None,
        client: Some(ClientContext { tools: Some(vec![confirm]), ..ClientContext::default() }),
    });
    t.engine.sessions().input(TENANT, "client", input, Default::default()).await.unwrap();

    // The call goes to clients as an event, and the session waits.
    let call = loop {
        let event = events.recv().await.unwrap();
        if event.name == "tool.call" {
            break event.data;
        }
    };
    assert_eq!(call["name"], "confirm");
    assert_eq!(call["arguments"], r#"{"ok":true}"#);
    let id = call["id"].as_str().unwrap().to_owned();
    let snapshot = t.snapshot("client").await;
    assert_eq!(snapshot.record.status, SessionStatus::Waiting);

    // A result for another id is refused; the real one settles the call.
    let wrong = ClientInput::ToolResult(ToolResult { id: "nobody".to_owned(), attempt: None, result: None });
    let err = t.engine.sessions().input(TENANT, "client", wrong, Default::default()).await.unwrap_err();
    assert!(matches!(err, InputError::Conflict(_)), "{err}");
    let result = ClientInput::ToolResult(ToolResult { id, attempt: None, result: Some(json!({"confirmed": true})) });
    t.engine.sessions().input(TENANT, "client", result, Default::default()).await.unwrap();
    let turn = t.wait("client", "turn-1").await;
    assert_eq!(turn.status, TurnStatus::Done);
    let transcript = t.transcript("client").await;
    assert_eq!(transcript.len(), 4, "{transcript:?}");
    assert!(transcript[2].starts_with(r#"tool: {"confirmed":true}"#), "{transcript:?}");
    assert_eq!(transcript[3], r#"assistant: confirm returned {"confirmed":true}."#);
}

async fn an_interrupt_and_its_resume(t: TestEngine) {
    let turn = t.send("approve", "scenario", "interrupt before you go on").await;
    // Wait for the interrupt to be stored.
    let mut events = t.engine.reads().subscribe(TENANT, "approve").unwrap();
    while !event_names(&t.engine, "approve").await.contains(&"interrupt".to_owned()) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv()).await;
    }
    let snapshot = t.snapshot("approve").await;
    assert_eq!(snapshot.record.status, SessionStatus::Waiting);
    assert_eq!(snapshot.record.interrupts[0].interrupt_id, "approval");

    let resume = |id: &str| {
        ClientInput::InterruptResume(InterruptResume {
            interrupt_id: id.to_owned(),
            payload: Some(json!({"approved": true})),
        })
    };
    let err = t.engine.sessions().input(TENANT, "approve", resume("other"), Default::default()).await.unwrap_err();
    assert!(matches!(err, InputError::Conflict(_)), "{err}");
    t.engine.sessions().input(TENANT, "approve", resume("approval"), Default::default()).await.unwrap();
    assert_eq!(t.wait("approve", &turn).await.status, TurnStatus::Done);
    assert_eq!(
        t.transcript("approve").await,
        ["user: interrupt before you go on", r#"assistant: resumed with {"approved":true}"#]
    );
}

async fn a_sub_agent(t: TestEngine) {
    // Counted once in the store (none yet), then kept as sessions are made.
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 0);
    let turn = t.chat("parent", "scenario", r#"use tool helper with {"prompt": "say hi"}"#).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    let parent = t.snapshot("parent").await;
    let call_id = parent.messages[1].tool_calls.as_ref().unwrap()[0].id.clone();
    // `<parent>.<step>.<tool call>`: the reply came in step 2 (after
    // `session.start` and `client.messages`).
    let child_id = format!("parent.2.{call_id}");

    let child = t.snapshot(&child_id).await;
    assert_eq!(child.record.ancestry, ["parent"]);
    assert_eq!(child.record.agent_id, "helper");
    assert_eq!(child.record.status, SessionStatus::Idle);
    assert_eq!(
        t.transcript(&child_id).await,
        [r#"user: {"prompt":"say hi"}"#, r#"assistant: You said: {"prompt":"say hi"}"#]
    );
    let transcript = t.transcript("parent").await;
    assert_eq!(transcript[2], format!(r#"tool: You said: {{"prompt":"say hi"}} (answers {call_id})"#));
    assert_eq!(transcript.len(), 4, "{transcript:?}");

    // The spawned child counts as one of the tenant's sessions, in memory
    // and, after a restart, in the store.
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 2);
    let t = t.restart().await;
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 2);
    t.chat("another", "helper", "hello").await;
    t.chat("another", "helper", "again").await;
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 3, "a second turn creates nothing");
    assert_eq!(t.engine.reads().session_count("elsewhere").await.unwrap(), 0);
}

async fn a_sub_agent_beyond_the_session_limit_fails_its_call(t: TestEngine) {
    t.engine.admin().set_tenant_session_limit(TENANT, Some(1));
    let turn = t.chat("parent", "scenario", r#"use tool helper with {"prompt": "say hi"}"#).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    let transcript = t.transcript("parent").await;
    assert!(transcript[2].contains("the tenant has its maximum of 1 sessions"), "{transcript:?}");
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 1, "no child was created");
    let call_id = t.snapshot("parent").await.messages[1].tool_calls.as_ref().unwrap()[0].id.clone();
    assert!(t.engine.reads().snapshot(TENANT, &format!("parent.2.{call_id}")).await.unwrap().is_none());

    // A client's new session is refused the same way; the limit lifted,
    // both work.
    let refused =
        t.engine.sessions().input(TENANT, "second", subs_tests::user_input("helper", None, "hi"), Default::default());
    let err = refused.await.unwrap_err();
    assert!(matches!(err, InputError::LimitExceeded(_)), "{err}");
    assert!(t.engine.reads().snapshot(TENANT, "second").await.unwrap().is_none(), "nothing stored");
    t.engine.admin().set_tenant_session_limit(TENANT, None);
    t.chat("second", "helper", "hi").await;
    assert_eq!(t.engine.reads().session_count(TENANT).await.unwrap(), 2);
}

async fn an_edit_forks_a_branch(t: TestEngine) {
    t.chat("edit", "helper", "first").await;
    t.chat("edit", "helper", "second").await;
    let before = t.snapshot("edit").await.messages;
    assert_eq!(before.len(), 4);

    // The client edits its second message: it sends the first exchange with
    // ids and a new message in place of the second.
    let mut view: Vec<DraftMessage> = before[..2].iter().cloned().map(DraftMessage::from).collect();
    view.push(DraftMessage::user("second, edited"));
    let input = ClientInput::ClientMessages(ClientMessages {
        agent_id: "helper".to_owned(),
        turn_id: None,
        messages: view,
        stream: None,
        client: None,
    });
    let accepted = t.engine.sessions().input(TENANT, "edit", input, Default::default()).await.unwrap();
    t.wait("edit", accepted.turn_id.as_deref().unwrap()).await;

    let after = t.snapshot("edit").await;
    assert_eq!(
        after.messages.iter().map(subs_tests::describe).collect::<Vec<_>>(),
        ["user: first", "assistant: You said: first", "user: second, edited", "assistant: You said: second, edited"]
    );
    assert_eq!(after.messages[..2], before[..2], "the shared prefix is the same messages");
    // The old branch is still there, readable through the tree.
    let tree = &after.message_tree;
    assert_eq!(tree.nodes.len(), 6);
    let parent_of = |id: &str| tree.nodes.iter().find(|n| n.message.id == id).unwrap().parent_id.clone();
    assert_eq!(parent_of(&before[3].id).as_deref(), Some(before[2].id.as_str()));
    assert_eq!(parent_of(&before[2].id).as_deref(), Some(before[1].id.as_str()));
    assert_eq!(tree.head_id.as_deref(), Some(after.messages[3].id.as_str()));

    // A truncated view moves the head back and answers from there.
    let input = ClientInput::ClientMessages(ClientMessages {
        agent_id: "helper".to_owned(),
        turn_id: None,
        messages: vec![DraftMessage::from(before[0].clone())],
        stream: None,
        client: None,
    });
    let accepted = t.engine.sessions().input(TENANT, "edit", input, Default::default()).await.unwrap();
    t.wait("edit", accepted.turn_id.as_deref().unwrap()).await;
    assert_eq!(t.transcript("edit").await, ["user: first", "assistant: You said: first"]);
    assert_eq!(t.snapshot("edit").await.message_tree.nodes.len(), 7);
}

async fn the_same_turn_id_twice_is_one_turn(t: TestEngine) {
    let input = || subs_tests::user_input("helper", Some("once"), "only once");
    let first = t.engine.sessions().input(TENANT, "idem", input(), Default::default()).await.unwrap();
    assert!(!first.existing);
    t.wait("idem", "once").await;
    let second = t.engine.sessions().input(TENANT, "idem", input(), Default::default()).await.unwrap();
    assert!(second.existing);
    assert_eq!(second.turn_id.as_deref(), Some("once"));
    assert_eq!(t.transcript("idem").await.len(), 2);
    let started = event_names(&t.engine, "idem").await.iter().filter(|n| *n == "turn.started").count();
    assert_eq!(started, 1);
}

/// `wait_turn` answers with the turn it was asked for, as stored, even
/// when a turn queued before it ends first (its end wakes the waiter too):
/// the first turn here fails (its decision broke a rule), the second is
/// done.
async fn waiting_for_a_queued_turn_returns_that_turn(t: TestEngine) {
    let first = t.send("queue", "scenario", "invalid please").await;
    let second = t.send("queue", "scenario", "count once").await;
    let waited =
        tokio::time::timeout(std::time::Duration::from_secs(30), t.engine.reads().wait_turn(TENANT, "queue", &second))
            .await
            .expect("the second turn ends")
            .unwrap();
    assert_eq!(waited.status, TurnStatus::Done, "{waited:?}");
    assert_eq!(
        Some(&waited),
        t.engine.reads().turn(TENANT, "queue", &second).await.unwrap().as_ref(),
        "the stored record"
    );
    let failed = t.engine.reads().wait_turn(TENANT, "queue", &first).await.unwrap();
    assert_eq!(failed.status, TurnStatus::Failed, "an ended turn, from the store: {failed:?}");
}

async fn an_invalid_decision_is_rejected_and_fails_the_turn_at_once(t: TestEngine) {
    t.chat("bad", "scenario", "count once").await;
    let before = t.snapshot("bad").await;

    let turn = t.chat("bad", "scenario", "invalid please").await;
    assert_eq!(turn.status, TurnStatus::Failed);
    let data = turn.data.unwrap();
    let error = data["error"].as_str().unwrap();
    assert!(error.contains("call `nope` is not in flight"), "the rule is named: {error}");
    assert!(error.contains("after 1 deliveries"), "a broken rule is not retried: {error}");
    let failed = t.engine.reads().events(TENANT, "bad", None, 100).await.unwrap().pop().unwrap();
    assert_eq!(failed.name, "turn.failed");
    assert_eq!(failed.data["code"], "decision_failed");

    // The session keeps everything it had and stays usable.
    let after = t.snapshot("bad").await;
    assert_eq!(after.record.status, SessionStatus::Idle);
    assert_eq!(after.record.state, before.record.state);
    assert_eq!(after.messages, before.messages, "the rejected decision recorded nothing");
    assert_eq!(t.chat("bad", "scenario", "count again").await.status, TurnStatus::Done);
    assert_eq!(t.snapshot("bad").await.record.state, json!({"turns": 2}));
}

async fn cancel_stops_a_turn_and_keeps_the_session(t: TestEngine) {
    let turn = t.send("stop", "scenario", "interrupt and wait").await;
    let mut events = t.engine.reads().subscribe(TENANT, "stop").unwrap();
    while t.snapshot("stop").await.record.status != SessionStatus::Waiting {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv()).await;
    }
    assert!(t.engine.sessions().cancel(TENANT, "stop").await.unwrap(), "a turn was open");
    let ended = t.wait("stop", &turn).await;
    assert_eq!(ended.status, TurnStatus::Failed);
    assert_eq!(ended.data.unwrap()["code"], "cancelled");
    let snapshot = t.snapshot("stop").await;
    assert_eq!(snapshot.record.status, SessionStatus::Idle);
    assert!(snapshot.record.interrupts.is_empty());
    assert_eq!(t.transcript("stop").await, ["user: interrupt and wait"], "nothing recorded is lost");
    assert!(!t.engine.sessions().cancel(TENANT, "stop").await.unwrap(), "no turn is open any more");
    assert_eq!(t.chat("stop", "scenario", "count after cancel").await.status, TurnStatus::Done);
}

async fn inputs_for_unknown_sessions_and_bad_ids_are_refused(t: TestEngine) {
    let resume = ClientInput::InterruptResume(InterruptResume { interrupt_id: "x".to_owned(), payload: None });
    let err = t.engine.sessions().input(TENANT, "nobody", resume, Default::default()).await.unwrap_err();
    assert!(matches!(err, InputError::NoSession(_)), "{err}");
    // `../etc` is an id like any other (ids never become paths): unknown.
    let resume = ClientInput::InterruptResume(InterruptResume { interrupt_id: "x".to_owned(), payload: None });
    let err = t.engine.sessions().input(TENANT, "../etc", resume, Default::default()).await.unwrap_err();
    assert!(matches!(err, InputError::NoSession(_)), "{err}");
    let err = t
        .engine
        .sessions()
        .input(
            TENANT,
            "line\nbreak",
            ClientInput::InterruptResume(InterruptResume { interrupt_id: "x".to_owned(), payload: None }),
            Default::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, InputError::Invalid { .. }), "{err}");
}

async fn a_client_action_and_a_decision_that_leaves_nothing_to_wait_for(t: TestEngine) {
    let action = |name: &str| {
        ClientInput::ClientAction(subs_protocol::client::ClientAction {
            agent_id: "scenario".to_owned(),
            turn_id: None,
            name: name.to_owned(),
            args: Some(json!({"x": 1})),
        })
    };
    let accepted = t.engine.sessions().input(TENANT, "act", action("ping"), Default::default()).await.unwrap();
    let turn = t.wait("act", accepted.turn_id.as_deref().unwrap()).await;
    assert_eq!(turn.status, TurnStatus::Done);
    assert_eq!(t.transcript("act").await, ["assistant: pong"]);

    // An action the agent ignores (`proposed` is `{}`) leaves the turn with
    // nothing in flight: it ends as if by `done`.
    let accepted = t.engine.sessions().input(TENANT, "act", action("unknown"), Default::default()).await.unwrap();
    let turn = t.wait("act", accepted.turn_id.as_deref().unwrap()).await;
    assert_eq!(turn.status, TurnStatus::Done);
    assert_eq!(turn.data, None);
}

async fn message_send_writes_into_the_session(t: TestEngine) {
    assert_eq!(t.chat("note", "scenario", "note this").await.status, TurnStatus::Done);
    assert_eq!(t.transcript("note").await, ["user: note this", "assistant: noted"]);
}

/// A component gets its config's tool schemas as JSON text it reads only
/// when it looks at one: the schemas arrive unread, and the one read is
/// the one the agent declared.
async fn a_component_reads_its_tool_schemas_only_when_it_looks(t: TestEngine) {
    assert_eq!(t.chat("peek", "scenario", "peek").await.status, TurnStatus::Done);
    assert_eq!(
        t.transcript("peek").await,
        ["user: peek", "assistant: read before: false; add's input as declared: true"]
    );
}

async fn tool_arguments_and_results_are_checked_against_their_schemas(t: TestEngine) {
    // Arguments that break the input schema reach the tool as `invalid`;
    // the agent's router answers with an error naming the problem.
    t.chat("schemas", "scenario", r#"use tool add with {"a": "one", "b": 2}"#).await;
    let transcript = t.transcript("schemas").await;
    assert!(transcript[2].starts_with("tool: ") && transcript[2].contains("/a"), "{transcript:?}");

    // A result that breaks the output schema settles as an error.
    t.chat("schemas", "scenario", "use tool bad_output").await;
    let transcript = t.transcript("schemas").await;
    let tool = &transcript[transcript.len() - 2];
    assert!(tool.contains("does not match the tool's output schema"), "{transcript:?}");
}

/// Each scenario, as a test on each store.
macro_rules! on_every_store {
    ($($scenario:ident),* $(,)?) => {
        mod redb {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(subs_tests::TestEngine::start().await).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $scenario() {
                    let Some(t) = subs_tests::TestEngine::start_on_postgres().await else { return };
                    super::$scenario(t).await;
                }
            )*
        }
    };
}

on_every_store!(
    a_chat_turn,
    a_tool_loop_with_two_parallel_calls,
    a_client_tool,
    an_interrupt_and_its_resume,
    a_sub_agent,
    a_sub_agent_beyond_the_session_limit_fails_its_call,
    an_edit_forks_a_branch,
    the_same_turn_id_twice_is_one_turn,
    waiting_for_a_queued_turn_returns_that_turn,
    an_invalid_decision_is_rejected_and_fails_the_turn_at_once,
    cancel_stops_a_turn_and_keeps_the_session,
    inputs_for_unknown_sessions_and_bad_ids_are_refused,
    a_client_action_and_a_decision_that_leaves_nothing_to_wait_for,
    message_send_writes_into_the_session,
    a_component_reads_its_tool_schemas_only_when_it_looks,
    tool_arguments_and_results_are_checked_against_their_schemas,
);
