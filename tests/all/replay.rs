//! Replay, in the engine: the requests a replay rebuilds from the store
//! are the requests the agent was sent, byte for byte, and replaying
//! recorded sessions against the same build, a changed build and a broken
//! build reports what each does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::json;
use subs_engine::replay::{self, ChangeKind, ReplayReport, Selection};
use subs_engine::store::{SessionKey, StepStatus, StoredTrigger, TurnStatus};
use subs_engine::worker::component::ComponentAgent;
use subs_engine::worker::{BoxFuture, Delivery, Worker, WorkerError};
use subs_protocol::client::{ClientMessages, InterruptResume};
use subs_protocol::{ClientInput, DecisionRequest, DecisionResponse, DraftMessage, Trigger};
use subs_tests::{TENANT, TestEngine, agent, canonical, guests};

/// A component that keeps the last request of every decision it is sent.
struct Recording {
    inner: ComponentAgent,
    seen: Arc<Mutex<HashMap<String, DecisionRequest>>>,
}

impl Worker for Recording {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        let request = delivery.request.clone();
        self.seen.lock().unwrap().insert(request.decision_id.clone(), request);
        self.inner.decide(delivery)
    }
}

/// Registers `scenario` as a [`Recording`] of the scenario component.
fn record_scenario(t: &TestEngine, seen: &Arc<Mutex<HashMap<String, DecisionRequest>>>) {
    let worker = Recording { inner: agent(guests::TEST_SCENARIO), seen: seen.clone() };
    t.engine.register_agent(TENANT, "scenario", Arc::new(worker));
}

/// Waits until `session` has an open interrupt.
async fn interrupted(t: &TestEngine, session: &str) {
    let what = format!("{session} raises an interrupt");
    subs_tests::wait::eventually(std::time::Duration::from_secs(10), what, || async {
        !t.snapshot(session).await.record.interrupts.is_empty()
    })
    .await;
}

/// Sessions of `scenario` with tool turns, state, a sub-agent, an
/// interrupt and an edit that forks, across a restart of the engine.
async fn scenario_sessions(t: TestEngine, seen: &Arc<Mutex<HashMap<String, DecisionRequest>>>) -> TestEngine {
    record_scenario(&t, seen);
    for i in 0..5 {
        let session = format!("tools-{i}");
        let turn = t.chat(&session, "scenario", &format!(r#"use tool add with {{"a": {i}, "b": 2}}"#)).await;
        assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
        t.chat(&session, "scenario", "count this turn").await;
        t.chat(&session, "scenario", "count this one too").await;
    }
    let turn = t.chat("parent", "scenario", r#"use tool helper with {"prompt": "say hi"}"#).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    let turn = t.send("approve", "scenario", "interrupt before you go on").await;
    interrupted(&t, "approve").await;
    let resume = InterruptResume { interrupt_id: "approval".to_owned(), payload: Some(json!({"approved": true})) };
    t.engine
        .sessions()
        .input(TENANT, "approve", ClientInput::InterruptResume(resume), Default::default())
        .await
        .unwrap();
    assert_eq!(t.wait("approve", &turn).await.status, TurnStatus::Done);

    // A restart: the sessions' next steps are stored by a process that has
    // stored nothing for them yet.
    let t = t.restart().await;
    record_scenario(&t, seen);
    for i in 0..5 {
        let session = format!("tools-{i}");
        t.chat(&session, "scenario", r#"use tool add with {"a": 10, "b": 20} and use tool add with {"a": 1, "b": 1}"#)
            .await;
        t.chat(&session, "scenario", "count again").await;
    }
    t.chat("edit", "scenario", "first").await;
    t.chat("edit", "scenario", "count second").await;
    let before = t.snapshot("edit").await.messages;
    let mut view: Vec<DraftMessage> = before[..2].iter().cloned().map(DraftMessage::from).collect();
    view.push(DraftMessage::user("count second, edited"));
    let edit = ClientInput::ClientMessages(ClientMessages {
        agent_id: "scenario".to_owned(),
        turn_id: None,
        messages: view,
        stream: None,
        client: None,
    });
    let accepted = t.engine.sessions().input(TENANT, "edit", edit, Default::default()).await.unwrap();
    assert_eq!(t.wait("edit", accepted.turn_id.as_deref().unwrap()).await.status, TurnStatus::Done);
    assert!(t.snapshot("edit").await.message_tree.nodes.len() > t.snapshot("edit").await.messages.len(), "forked");
    t
}

const SESSIONS: &[&str] = &["tools-0", "tools-1", "tools-2", "tools-3", "tools-4", "parent", "approve", "edit"];

#[tokio::test]
async fn replay_rebuilds_every_request_exactly_and_the_same_build_decides_the_same() {
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let t = scenario_sessions(TestEngine::start().await, &seen).await;

    let (mut rebuilt, mut triggers) = (0, std::collections::BTreeSet::new());
    for session in SESSIONS {
        let key = SessionKey::new(TENANT, *session);
        let applied = t.store.steps(&key, 0, usize::MAX).await.unwrap();
        let applied = applied.iter().filter(|(_, s)| s.status == StepStatus::Applied).count();
        let requests = replay::requests(t.store.as_ref(), &key).await.unwrap();
        assert_eq!(requests.len(), applied, "{session}: every decided step is rebuilt");
        for (seq, request) in requests {
            let sent = seen.lock().unwrap().get(&request.decision_id).cloned().expect("the agent was sent it");
            assert_eq!(
                canonical(&serde_json::to_value(&request).unwrap()),
                canonical(&serde_json::to_value(&sent).unwrap()),
                "{session} step {seq}: the rebuilt request is the one sent"
            );
            triggers.insert(request.trigger.kind().to_owned());
            rebuilt += 1;
        }
    }
    assert!(rebuilt >= 100, "{rebuilt} decisions");
    for kind in [
        "session.start",
        "client.messages",
        "tool.execute",
        "tool.finished",
        "llm.finished",
        "sub_agent.finished",
        "interrupt.resumed",
    ] {
        assert!(triggers.contains(kind), "no {kind} among {triggers:?}");
    }

    let selection = Selection { limit: 10_000, ..Selection::default() };
    let report = replay::replay(t.store.as_ref(), TENANT, "scenario", &agent(guests::TEST_SCENARIO), &selection, None)
        .await
        .unwrap();
    assert_eq!(
        (report.decisions, report.same, report.different, report.failed, report.skipped),
        (rebuilt, rebuilt, 0, 0, 0),
        "{report:#?}"
    );
    assert_eq!(report.sessions, SESSIONS.len());
}

/// Tool turns of the `tools` agent: one call of `add`, two in parallel,
/// and a plain chat, in three sessions.
async fn tools_sessions(t: &TestEngine) {
    for i in 0..3 {
        let session = format!("s{i}");
        t.chat(&session, "tools", &format!(r#"use tool add with {{"a": {i}, "b": 2}}"#)).await;
        t.chat(&session, "tools", r#"use tool add with {"a": 1, "b": 2} and use tool add with {"a": 3, "b": 4}"#).await;
        t.chat(&session, "tools", "hello").await;
    }
}

/// `(session, step)` of the recorded decisions matching `pick`, in order.
async fn steps_where(t: &TestEngine, pick: impl Fn(&StoredTrigger) -> bool) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    for i in 0..3 {
        let session = format!("s{i}");
        for (seq, step) in t.store.steps(&SessionKey::new(TENANT, session.clone()), 0, usize::MAX).await.unwrap() {
            if step.status == StepStatus::Applied && pick(&step.trigger) {
                found.push((session.clone(), seq));
            }
        }
    }
    found
}

async fn replay_tools(t: &TestEngine, candidate: &str) -> ReplayReport {
    let progress: replay::Progress = Arc::new(|done, total| assert!(done <= total));
    replay::replay(t.store.as_ref(), TENANT, "tools", &agent(candidate), &Selection::default(), Some(progress))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_changed_tool_result_differs_exactly_where_add_runs_and_a_trap_fails_its_decisions() {
    let t = TestEngine::start().await;
    tools_sessions(&t).await;
    let adds = steps_where(
        &t,
        |trigger| matches!(trigger, StoredTrigger::Plain { trigger: Trigger::ToolExecute(call) } if call.name == "add"),
    )
    .await;
    assert_eq!(adds.len(), 9);

    let same = replay_tools(&t, guests::TOOLS).await;
    assert!(same.decisions > 30 && same.same == same.decisions, "{same:#?}");

    let total = replay_tools(&t, guests::TOOLS_TOTAL).await;
    assert_eq!(total.decisions, same.decisions);
    assert_eq!(total.failed, 0, "{total:#?}");
    let differing: Vec<(String, u64)> = total.differences.iter().map(|d| (d.session_id.clone(), d.step)).collect();
    assert_eq!(differing, adds, "exactly the tool.execute decisions of add differ");
    for difference in &total.differences {
        assert_eq!(difference.trigger, "tool.execute");
        let changes: Vec<(&str, ChangeKind)> = difference.changes.iter().map(|c| (c.path.as_str(), c.change)).collect();
        assert_eq!(
            changes,
            [("/actions/0/result/sum", ChangeKind::Removed), ("/actions/0/result/total", ChangeKind::Added)],
            "{difference:#?}"
        );
        assert_eq!(difference.changes[0].recorded, difference.changes[1].candidate, "the same number, renamed");
        assert!(difference.recorded_version.is_none(), "registered without a version in this test");
    }

    let messages = steps_where(&t, |trigger| matches!(trigger, StoredTrigger::ClientMessages { .. })).await;
    assert_eq!(messages.len(), 9);
    let trapped = replay_tools(&t, guests::TOOLS_TRAP_ON_MESSAGES).await;
    assert_eq!((trapped.failed, trapped.different), (messages.len(), 0), "{trapped:#?}");
    assert_eq!(trapped.same, trapped.decisions - messages.len());
    let failing: Vec<(String, u64)> = trapped.failures.iter().map(|f| (f.session_id.clone(), f.step)).collect();
    assert_eq!(failing, messages);
    for failure in &trapped.failures {
        assert_eq!(failure.trigger, "client.messages");
        let error = failure.error.as_deref().unwrap();
        assert!(error.contains("this version cannot read client messages"), "the guest's panic is quoted: {error}");
    }
}

#[tokio::test]
async fn a_replay_reads_only_the_named_sessions_of_its_agent_and_stays_within_its_bounds() {
    let t = TestEngine::start().await;
    tools_sessions(&t).await;
    t.chat("other-agent", "scenario", "count me").await;

    let named = Selection { sessions: Some(vec!["s1".to_owned()]), ..Selection::default() };
    let report = replay::replay(t.store.as_ref(), TENANT, "tools", &agent(guests::TOOLS), &named, None).await.unwrap();
    let in_s1 = t.store.steps(&SessionKey::new(TENANT, "s1"), 0, usize::MAX).await.unwrap().len();
    assert_eq!((report.sessions, report.decisions), (1, in_s1));

    for wrong in ["other-agent", "nobody"] {
        let named = Selection { sessions: Some(vec![wrong.to_owned()]), ..Selection::default() };
        let refused = replay::replay(t.store.as_ref(), TENANT, "tools", &agent(guests::TOOLS), &named, None).await;
        let error = refused.unwrap_err().to_string();
        assert!(error.contains(wrong) && error.contains("tools"), "{error}");
    }
    // Another tenant's sessions are not the tenant's.
    let report =
        replay::replay(t.store.as_ref(), "another", "tools", &agent(guests::TOOLS), &Selection::default(), None)
            .await
            .unwrap();
    assert_eq!((report.sessions, report.decisions), (0, 0));

    let few = Selection { limit: 5, ..Selection::default() };
    let report = replay::replay(t.store.as_ref(), TENANT, "tools", &agent(guests::TOOLS), &few, None).await.unwrap();
    assert_eq!(report.decisions, 5);
    let future = Selection { since_ms: Some(u64::MAX), ..Selection::default() };
    let report = replay::replay(t.store.as_ref(), TENANT, "tools", &agent(guests::TOOLS), &future, None).await.unwrap();
    assert_eq!(report.decisions, 0);
    let no_time = Selection { time: std::time::Duration::ZERO, ..Selection::default() };
    let report =
        replay::replay(t.store.as_ref(), TENANT, "tools", &agent(guests::TOOLS), &no_time, None).await.unwrap();
    assert_eq!((report.decisions, report.stopped.as_deref()), (0, Some("time")));
}

/// The upgrade, over HTTP: sessions recorded by `tools`, a changed build
/// uploaded without serving it and replayed, then activated (new turns
/// run it) and rolled back.
#[tokio::test]
async fn upload_inactive_replay_activate_and_roll_back_over_http() {
    use reqwest::{Method, StatusCode};
    use subs_tests::server::TestServer;

    use super::versions::upload;

    let s = TestServer::start(&[]).await;
    let (status, agent) = upload(&s, "calc", guests::TOOLS, true).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    let v1 = agent["version"].as_str().unwrap().to_owned();
    for i in 0..3 {
        let session = format!("c{i}");
        let (status, accepted) = s.say(&session, "calc", r#"use tool add with {"a": 1, "b": 2}"#, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        s.wait_turn(&session, accepted["turn_id"].as_str().unwrap(), None).await;
    }
    let (status, agent) = upload(&s, "calc", guests::TOOLS_TOTAL, false).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(agent["version"], v1.as_str(), "stored, not served");
    let v2 = subs_engine::agents::component_digest(&std::fs::read(guests::TOOLS_TOTAL).unwrap());

    let replay = |body: serde_json::Value| s.call(Method::POST, "/v1/agents/calc/replay", None, Some(body));
    let (status, report) = replay(json!({"version": v2})).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!((report["agent_id"].as_str(), report["version"].as_str()), (Some("calc"), Some(v2.as_str())));
    assert_eq!(
        (report["different"].as_u64(), report["failed"].as_u64(), report["sessions"].as_u64()),
        (Some(3), Some(0), Some(3))
    );
    for difference in report["differences"].as_array().unwrap() {
        assert_eq!(difference["trigger"], "tool.execute");
        assert_eq!(difference["recorded_version"], v1.as_str(), "each decision names the version that made it");
        let paths: Vec<&str> =
            difference["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["/actions/0/result/sum", "/actions/0/result/total"]);
    }
    // Followed as a stream: progress, then the same report.
    let response = s
        .request(Method::POST, "/v1/agents/calc/replay", None)
        .header("accept", "text/event-stream")
        .header("content-type", "application/json")
        .body(json!({"version": v2}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = subs_protocol::sse::SseParser::with_limit(1 << 20).push(&response.bytes().await.unwrap()).unwrap();
    let (last, progress) = events.split_last().unwrap();
    assert!(!progress.is_empty() && progress.iter().all(|e| e.event == "progress"), "{events:?}");
    let done: Vec<u64> = progress
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(&e.data).unwrap()["done"].as_u64().unwrap())
        .collect();
    assert!(done.windows(2).all(|w| w[0] <= w[1]), "{done:?}");
    assert_eq!(last.event, "report");
    let streamed: serde_json::Value = serde_json::from_str(&last.data).unwrap();
    assert_eq!(streamed["different"].as_u64(), Some(3));
    assert_eq!(streamed["differences"], report["differences"]);
    let (status, report) = replay(json!({"version": v1, "sessions": ["c1"], "limit": 3})).await;
    assert_eq!((status, report["decisions"].as_u64(), report["same"].as_u64()), (StatusCode::OK, Some(3), Some(3)));

    // Refusals name what is wrong.
    let unknown = format!("sha256:{}", "0".repeat(64));
    for (body, want, names) in [
        (json!({"version": unknown}), StatusCode::NOT_FOUND, unknown.as_str()),
        (json!({"version": v2, "limit": 0}), StatusCode::BAD_REQUEST, "limit"),
        (json!({"version": v2, "limit": 10_001}), StatusCode::BAD_REQUEST, "limit"),
        (json!({"version": v2, "timeout_secs": 301}), StatusCode::BAD_REQUEST, "timeout_secs"),
        (json!({"version": v2, "sessions": ["nope"]}), StatusCode::BAD_REQUEST, "nope"),
        (json!({"version": v2, "since": "yesterday"}), StatusCode::BAD_REQUEST, "since"),
        (json!({"versions": v2}), StatusCode::BAD_REQUEST, "versions"),
    ] {
        let (status, error) = replay(body.clone()).await;
        assert_eq!(status, want, "{body}: {error}");
        assert!(error.to_string().contains(names), "{body}: {error}");
    }
    let (status, error) = s.call(Method::POST, "/v1/agents/nobody/replay", None, Some(json!({"version": v2}))).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{error}");

    // Activated: the next turn runs the new version; rolled back: the old.
    for (version, key) in [(&v2, "total"), (&v1, "sum")] {
        let (status, agent) =
            s.call(Method::PUT, "/v1/agents/calc/current", None, Some(json!({"version": version}))).await;
        assert_eq!(status, StatusCode::OK, "{agent}");
        let (_, accepted) = s.say("after", "calc", r#"use tool add with {"a": 2, "b": 2}"#, None).await;
        let events = s.wait_turn("after", accepted["turn_id"].as_str().unwrap(), None).await;
        let tool = events.iter().rev().find(|e| e.event == "message" && e.data["message"]["role"] == "tool").unwrap();
        assert_eq!(tool.data["agent_version"], version.as_str(), "{tool:?}");
        assert!(tool.data["message"]["content"].to_string().contains(key), "{tool:?}");
        let (_, snapshot) = s.call(Method::GET, "/v1/sessions/after", None, None).await;
        assert_eq!(snapshot["agent_version"], version.as_str());
    }
}

/// A candidate that reaches out is refused, and the report says so.
#[tokio::test]
async fn a_candidate_trying_outgoing_http_is_refused_and_reported() {
    use reqwest::{Method, StatusCode};
    use subs_tests::server::TestServer;

    use super::versions::upload;

    let s = TestServer::start(&[]).await;
    assert_eq!(upload(&s, "calc", guests::TOOLS, true).await.0, StatusCode::CREATED);
    let action = json!({"type": "client.action", "agent_id": "calc", "name": "fetch",
        "args": {"authority": "127.0.0.1:9"}});
    let (status, accepted) = s.call(Method::POST, "/v1/sessions/f/input", None, Some(action)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    s.wait_turn("f", accepted["turn_id"].as_str().unwrap(), None).await;
    assert_eq!(upload(&s, "calc", guests::TEST_FETCH, false).await.0, StatusCode::CREATED);
    let fetch = subs_engine::agents::component_digest(&std::fs::read(guests::TEST_FETCH).unwrap());

    let (status, report) = s.call(Method::POST, "/v1/agents/calc/replay", None, Some(json!({"version": fetch}))).await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["http_refused"], 1, "{report}");
    let failure = &report["failures"][0];
    assert_eq!(failure["trigger"], "client.action", "{report}");
    assert!(failure["http_refused"].as_str().unwrap().contains("127.0.0.1:9"), "{report}");
    assert!(failure["error"].as_str().unwrap().contains("refused outgoing HTTP"), "{report}");
}
