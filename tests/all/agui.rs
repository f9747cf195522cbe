//! The AG-UI endpoint, `POST /v1/agents/{agent_id}/ag-ui`, driven by the
//! official AG-UI client (`@ag-ui/client`'s `HttpAgent`, from npm, run by
//! node: `tests/clients/ag-ui/run.mjs`), which checks every event the
//! server sends against `@ag-ui/core`'s published schemas and the
//! protocol's sequence rules; and its refusals, read here.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_tests::guests;
use subs_tests::server::{SseEvent, TestServer as Server, read_sse};

const KEY: &str = "subs_agui_tenant_key_000000000000";

/// A server whose LLM calls stream (as an agent's `stream: true` asks),
/// or not.
async fn server(stream: bool) -> Server {
    let config = subs_engine::EngineConfig { default_stream: stream, ..subs_engine::EngineConfig::default() };
    let s = Server::builder().keys(&[("acme", KEY)]).engine_config(config).start().await;
    for (agent, wasm) in [("tools", guests::TOOLS), ("scenario", guests::TEST_SCENARIO)] {
        let (status, body) = s.upload(agent, wasm, Some(KEY)).await;
        assert!(status.is_success(), "{agent}: {status} {body}");
    }
    s
}

fn types(events: &Value) -> Vec<&str> {
    events.as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect()
}

/// The messages of a session's whole tree, and of its active path.
async fn tree(s: &Server, session: &str) -> (usize, usize) {
    let (status, view) = s.call(Method::GET, &format!("/v1/sessions/{session}"), Some(KEY), None).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    (view["message_tree"]["nodes"].as_array().unwrap().len(), view["messages"].as_array().unwrap().len())
}

#[tokio::test]
async fn the_ag_ui_client_runs_text_tools_frontend_tools_interrupts_and_state() {
    let dir = subs_tests::node::client("ag-ui");
    let s = server(true).await;
    let base = s.url("");
    let output = tokio::time::timeout(Duration::from_secs(120), subs_tests::node::run(&dir, "run.mjs", &[&base, KEY]))
        .await
        .expect("the AG-UI client finishes");
    let summary: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));

    // A streamed text turn: word by word, then the whole reply; the run
    // ends with the conversation under the stored ids.
    let text = &summary["text"];
    let deltas: Vec<&str> = text["deltas"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(deltas.len() > 1, "the reply streams in pieces: {text}");
    assert_eq!(deltas.concat(), "You said: hello there");
    assert_eq!(text["final"], "You said: hello there");
    assert_eq!(
        types(&text["types"]),
        [
            vec!["RUN_STARTED", "TEXT_MESSAGE_START"],
            vec!["TEXT_MESSAGE_CONTENT"; deltas.len()],
            vec!["TEXT_MESSAGE_END", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
        ]
        .concat()
    );
    assert_eq!(text["finished"]["outcome"], json!({"type": "success"}));
    assert_eq!(
        (&text["finished"]["threadId"], &text["finished"]["runId"]),
        (&json!("agui-text"), &json!("text-run-1"))
    );
    // The second run on the thread appends to the conversation: the
    // frontend's ids are the session's, so nothing forks.
    assert_eq!(text["second_final"], "You said: and again");
    let (status, view) = s.call(Method::GET, "/v1/sessions/agui-text", Some(KEY), None).await;
    assert_eq!(status, StatusCode::OK);
    let stored: Vec<&Value> = view["messages"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    let client: Vec<&Value> = text["messages"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(client, stored, "the client's messages are the session's, id for id");
    assert_eq!(stored.len(), 4, "{view}");
    assert_eq!(tree(&s, "agui-text").await, (4, 4), "no branch: the second run appended");
    assert_eq!(view["message_tree"]["nodes"][0]["message"]["id"], "u1", "the frontend's own message ids are kept");
    // Each run was a turn named by its runId.
    let (_, decisions) = s.call(Method::GET, "/v1/sessions/agui-text/decisions", Some(KEY), None).await;
    let turns: Vec<&str> = decisions.as_array().unwrap().iter().filter_map(|d| d["turn_id"].as_str()).collect();
    assert!(turns.contains(&"text-run-1") && turns.contains(&"text-run-2"), "{turns:?}");

    // A server-side tool: its call streams, its result follows, the model
    // answers from it.
    let tool = &summary["server_tool"];
    assert_eq!(tool["call"]["name"], "add", "{tool}");
    assert_eq!(serde_json::from_str::<Value>(tool["args"].as_str().unwrap()).unwrap(), json!({"a": 2, "b": 3}));
    let results = tool["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{tool}");
    assert_eq!(results[0]["toolCallId"], tool["call"]["id"]);
    let result: Value = serde_json::from_str(results[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["sum"].as_f64(), Some(5.0), "{tool}");
    let answer = tool["final"].as_str().unwrap();
    assert!(answer.starts_with("add returned {\"sum\":5") && answer.ends_with("}."), "{tool}");
    let order = types(&tool["types"]);
    let at = |t: &str| order.iter().position(|x| *x == t).unwrap_or_else(|| panic!("no {t} in {order:?}"));
    assert!(at("TOOL_CALL_START") < at("TOOL_CALL_ARGS") && at("TOOL_CALL_END") < at("TOOL_CALL_RESULT"), "{order:?}");
    assert_eq!(tool["finished"]["outcome"]["type"], "success");

    // A frontend tool: run 1 ends with the call pending, run 2 carries its
    // result and the turn completes; one turn, no fork.
    let front = &summary["frontend_tool"];
    let call_id = front["call"]["id"].as_str().expect("the frontend saw the call");
    assert_eq!(front["call"]["name"], "confirm");
    assert_eq!(
        serde_json::from_str::<Value>(front["call"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"ok": true})
    );
    assert_eq!(front["first_finished"]["outcome"], json!({"type": "success", "pendingToolCallIds": [call_id]}));
    assert!(!types(&front["first_types"]).contains(&"TOOL_CALL_RESULT"), "{front}");
    assert_eq!(front["second_finished"]["outcome"], json!({"type": "success"}));
    assert_eq!(front["results"][0]["toolCallId"], call_id, "{front}");
    assert_eq!(front["final"], r#"confirm returned {"confirmed":true}."#);
    let (_, view) = s.call(Method::GET, "/v1/sessions/agui-frontend", Some(KEY), None).await;
    assert_eq!(view["status"], "idle");
    let stored: Vec<&Value> = view["messages"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    let client: Vec<&Value> = front["messages"].as_array().unwrap().iter().map(|m| &m["id"]).collect();
    assert_eq!(client, stored, "after run 2 the frontend holds the session's messages");
    assert_eq!(tree(&s, "agui-frontend").await, (4, 4), "user, call, result, answer: no fork");
    // The run's tools, context and forwarded props reached the agent.
    let (_, decisions) = s.call(Method::GET, "/v1/sessions/agui-frontend/decisions", Some(KEY), None).await;
    let trigger = decisions.as_array().unwrap().iter().map(|d| &d["trigger"]).find(|t| t["type"] == "client.messages");
    let client = &trigger.unwrap_or_else(|| panic!("{decisions}"))["client"];
    assert_eq!(client["tools"][0]["name"], "confirm", "{client}");
    assert_eq!(client["tools"][0]["handler"], "client", "{client}");
    assert_eq!(client["context"], json!([{"description": "The user's name", "value": "Ada"}]), "{client}");
    assert_eq!(client["forwarded_props"], json!({"locale": "en"}), "{client}");

    // An interrupt ends run 1 with it (AG-UI's interrupt outcome, and in
    // the result); run 2 resumes it.
    let int = &summary["interrupt"];
    let outcome = &int["first_finished"]["outcome"];
    assert_eq!(outcome["type"], "interrupt", "{int}");
    assert_eq!(outcome["interrupts"][0]["id"], "approval");
    assert_eq!(int["first_finished"]["result"]["interrupts"][0]["interruptId"], "approval");
    assert_eq!(int["pending"], json!(["approval"]));
    assert_eq!(int["second_finished"]["outcome"], json!({"type": "success"}));
    assert!(int["second_final"].as_str().unwrap().contains("approved"), "{int}");
    // The LangGraph / CopilotKit shape resumes too.
    assert_eq!(int["langgraph_first_outcome"], "interrupt");
    assert_eq!(int["langgraph_second_finished"]["outcome"], json!({"type": "success"}));
    assert!(int["langgraph_final"].as_str().unwrap().contains("yes"), "{int}");
    assert_eq!(tree(&s, "agui-interrupt-lg").await.0, tree(&s, "agui-interrupt-lg").await.1, "no fork");

    // State: a snapshot each time a decision changed it.
    let state = &summary["state"];
    assert_eq!(state["snapshots"], json!([{"turns": 1}, {"turns": 2}]), "{state}");
    assert_eq!(state["agent_state"], json!({"turns": 2}));
}

/// One AG-UI run posted by hand: the status, and the events (a stream) or
/// the error (JSON).
async fn post(s: &Server, agent: &str, body: Value) -> (StatusCode, Vec<SseEvent>, Value) {
    let response = s
        .request(Method::POST, &format!("/v1/agents/{agent}/ag-ui"), Some(KEY))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = response.status();
    if status != StatusCode::OK {
        return (
            status,
            Vec::new(),
            serde_json::from_str(&response.text().await.expect("a body")).expect("a JSON error"),
        );
    }
    let events =
        tokio::time::timeout(Duration::from_secs(30), read_sse(response, &mut |_| false)).await.expect("the run ends");
    (status, events, Value::Null)
}

fn run_input(thread: &str, run: &str, text: &str) -> Value {
    json!({"threadId": thread, "runId": run, "messages": [{"id": format!("{run}-u"), "role": "user", "content": text}]})
}

#[tokio::test]
async fn bad_runs_are_refused_with_the_field_and_failures_after_the_start_are_run_errors() {
    // Replies do not stream here: they reach the client whole.
    let s = server(false).await;

    // Before the stream: JSON errors naming what is wrong.
    let response = s.request(Method::POST, "/v1/agents/tools/ag-ui", Some(KEY)).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(serde_json::from_str::<Value>(&response.text().await.unwrap()).unwrap()["code"], "invalid_json");
    let response = s
        .request(Method::POST, "/v1/agents/tools/ag-ui", None)
        .body(run_input("x", "r", "hi").to_string())
        .send()
        .await;
    assert_eq!(response.unwrap().status(), StatusCode::UNAUTHORIZED);
    for (body, field) in [
        (json!({"runId": "r", "messages": []}), "threadId"),
        (json!({"threadId": "t", "messages": []}), "runId"),
        (json!({"threadId": "t", "runId": "r"}), "messages"),
        (json!({"threadId": "", "runId": "r", "messages": []}), "threadId"),
        (json!({"threadId": "t", "runId": "a\u{0}b", "messages": []}), "runId"),
        (
            json!({"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "robot", "content": "x"}]}),
            "messages[0].role",
        ),
        (json!({"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user"}]}), "messages[0].content"),
        (
            json!({"threadId": "t", "runId": "r", "messages": [], "tools": [{"description": "no name"}]}),
            "tools[0].name",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "i", "status": "maybe"}]}),
            "resume[0].status",
        ),
        // What the engine refuses is named as the run's field: the
        // reasoning message left out does not shift the index.
        (
            json!({"threadId": "t", "runId": "r", "messages": [{"id": "x", "role": "reasoning", "content": "hm"},
                   {"id": "a\u{1}b", "role": "user", "content": "hi"}]}),
            "messages[1].id",
        ),
        (
            json!({"threadId": "t", "runId": "r", "messages": [],
                   "tools": [{"name": "x", "description": "d", "parameters": {"type": 5}}]}),
            "tools[0].parameters",
        ),
    ] {
        let (status, _, error) = post(&s, "tools", body.clone()).await;
        assert_eq!((status, error["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{body}: {error}");
    }
    let (status, _, error) = post(&s, "nobody", run_input("t-none", "r", "hi")).await;
    assert_eq!((status, error["code"].as_str()), (StatusCode::NOT_FOUND, Some("unknown_agent")), "{error}");
    let (status, _, error) = post(&s, "bad id!", run_input("t-none", "r", "hi")).await;
    assert_eq!((status, error["field"].as_str()), (StatusCode::BAD_REQUEST, Some("agent_id")), "{error}");
    assert!(s.call(Method::GET, "/v1/sessions/t-none", Some(KEY), None).await.0 == StatusCode::NOT_FOUND);

    // A thread of another agent.
    let (status, events, _) = post(&s, "tools", run_input("t-tools", "r1", "hi")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events.last().unwrap().data["type"], "RUN_FINISHED");
    let (status, _, error) = post(&s, "scenario", run_input("t-tools", "r2", "hi")).await;
    assert_eq!((status, error["field"].as_str()), (StatusCode::CONFLICT, Some("agent_id")), "{error}");

    // Sending a run again follows its turn: the same events, no new turn.
    let (status, again, _) = post(&s, "tools", run_input("t-tools", "r1", "hi")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again.last().unwrap().data["type"], "RUN_FINISHED");
    assert_eq!(tree(&s, "t-tools").await, (2, 2));

    // A thread waiting for a frontend tool refuses a run that does not
    // answer it; one waiting on an interrupt, a run that does not resume
    // it, or resumes another.
    let mut front = run_input("t-front", "f1", r#"use tool confirm with {"ok": true}"#);
    front["tools"] = json!([{"name": "confirm", "description": "Asks."}]);
    let (_, events, _) = post(&s, "tools", front).await;
    let finished = &events.last().unwrap().data;
    assert_eq!(finished["outcome"]["pendingToolCallIds"].as_array().map(Vec::len), Some(1), "{finished}");
    let (status, _, error) = post(&s, "tools", run_input("t-front", "f2", "never mind")).await;
    assert_eq!((status, error["field"].as_str()), (StatusCode::CONFLICT, Some("messages")), "{error}");
    let (_, events, _) = post(&s, "scenario", run_input("t-int", "i1", "interrupt now")).await;
    assert_eq!(events.last().unwrap().data["outcome"]["type"], "interrupt");
    let (status, _, error) = post(&s, "scenario", run_input("t-int", "i2", "hello?")).await;
    assert_eq!((status, error["field"].as_str()), (StatusCode::CONFLICT, Some("resume")), "{error}");
    let mut wrong = run_input("t-int", "i2", "hello?");
    wrong["resume"] = json!([{"interruptId": "nope", "status": "resolved"}]);
    let (status, _, error) = post(&s, "scenario", wrong).await;
    assert_eq!((status, error["field"].as_str()), (StatusCode::CONFLICT, Some("resume[0].interruptId")), "{error}");
    // A cancelled resume cancels the turn: the run is `cancelled`.
    let mut cancel = run_input("t-int", "i3", "hello?");
    cancel["resume"] = json!([{"interruptId": "approval", "status": "cancelled"}]);
    let (status, events, _) = post(&s, "scenario", cancel).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(events.last().unwrap().data["outcome"], json!({"type": "cancelled"}), "{events:?}");

    // Two frontend calls answered one run at a time: the run that answers
    // one ends at once asking for the other; the next finishes the turn.
    let mut two =
        run_input("t-two", "p1", r#"use tool confirm with {"ok": true} and use tool confirm with {"ok": false}"#);
    two["tools"] = json!([{"name": "confirm", "description": "Asks."}]);
    let (_, events, _) = post(&s, "tools", two.clone()).await;
    let pending = events.last().unwrap().data["outcome"]["pendingToolCallIds"].clone();
    assert_eq!(pending.as_array().map(Vec::len), Some(2), "{events:?}");
    let snapshot = events.iter().find(|e| e.data["type"] == "MESSAGES_SNAPSHOT").expect("a snapshot");
    let mut messages = snapshot.data["messages"].as_array().unwrap().clone();
    messages.push(json!({"id": "r1", "role": "tool", "toolCallId": pending[0], "content": "true"}));
    two["runId"] = json!("p2");
    two["messages"] = json!(messages);
    let (_, events, _) = post(&s, "tools", two.clone()).await;
    let names: Vec<&Value> = events.iter().map(|e| &e.data["type"]).collect();
    assert_eq!(names, ["RUN_STARTED", "MESSAGES_SNAPSHOT", "RUN_FINISHED"], "{events:?}");
    assert_eq!(events.last().unwrap().data["outcome"]["pendingToolCallIds"], json!([pending[1]]));
    messages.push(json!({"id": "r2", "role": "tool", "toolCallId": pending[1], "content": "false"}));
    two["runId"] = json!("p3");
    two["messages"] = json!(messages);
    let (_, events, _) = post(&s, "tools", two).await;
    assert_eq!(events.last().unwrap().data["outcome"], json!({"type": "success"}), "{events:?}");
    let (_, view) = s.call(Method::GET, "/v1/sessions/t-two", Some(KEY), None).await;
    assert_eq!(view["status"], "idle", "{view}");

    // An end user's token runs its own threads only.
    let mint = |id: &str| json!({"identity": {"id": id}});
    let (_, ada) = s.call(Method::POST, "/v1/tokens", Some(KEY), Some(mint("ada"))).await;
    let (_, bob) = s.call(Method::POST, "/v1/tokens", Some(KEY), Some(mint("bob"))).await;
    let as_user = |token: &Value, body: Value| {
        s.request(Method::POST, "/v1/agents/tools/ag-ui", token["token"].as_str())
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let response = as_user(&ada, run_input("t-ada", "a1", "hi")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = read_sse(response, &mut |_| false).await;
    assert_eq!(events.last().unwrap().data["type"], "RUN_FINISHED");
    let (_, view) = s.call(Method::GET, "/v1/sessions/t-ada", Some(KEY), None).await;
    assert_eq!(view["identity"]["id"], "ada", "{view}");
    let response = as_user(&bob, run_input("t-ada", "b1", "hi")).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "another user's thread does not exist for bob");

    // After the stream started, a failing turn is RUN_ERROR.
    let (status, events, _) = post(&s, "scenario", run_input("t-fail", "x1", "invalid please")).await;
    assert_eq!(status, StatusCode::OK);
    let last = &events.last().unwrap().data;
    assert_eq!(last["type"], "RUN_ERROR", "{events:?}");
    assert!(last["message"].as_str().is_some_and(|m| !m.is_empty()) && last["code"].is_string(), "{last}");
    assert_eq!(events[0].data["type"], "RUN_STARTED");
}

/// A client that reads nothing while a turn floods deltas falls behind
/// its subscription's buffer: its run ends with `RUN_ERROR` saying where
/// the turn's events are, and the turn itself runs to its end.
#[tokio::test]
async fn a_client_that_falls_behind_gets_a_run_error_saying_how_to_catch_up() {
    let streams =
        subs_engine::StreamLimits { subscriber_buffer_bytes: 64 << 10, ..subs_engine::StreamLimits::default() };
    let config = subs_engine::EngineConfig { streams, ..subs_engine::EngineConfig::default() };
    // The host's work on tens of MiB of deltas counts against the
    // decision's CPU limit; the bound under test is the stream's.
    let mut roomy = subs_engine::worker::component::AgentPolicy::default();
    roomy.limits.cpu = Some(Duration::from_secs(120));
    roomy.limits.wall_clock = Some(Duration::from_secs(120));
    let policies = [(("acme".to_owned(), "flood".to_owned()), roomy)].into_iter().collect();
    let s = Server::builder().keys(&[("acme", KEY)]).policies(policies).engine_config(config).start().await;
    assert!(s.upload("flood", guests::TEST_FLOOD, Some(KEY)).await.0.is_success());

    // 600 deltas of 60 kB: far more than the subscription's 64 KiB and
    // what the connection's buffers hold.
    let response = s
        .request(Method::POST, "/v1/agents/flood/ag-ui", Some(KEY))
        .header("content-type", "application/json")
        .body(run_input("t-flood", "flood-1", "60000 600").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let ended =
        tokio::time::timeout(Duration::from_secs(120), s.engine.reads().wait_turn("acme", "t-flood", "flood-1"))
            .await
            .expect("the flood turn ends")
            .unwrap();
    assert_eq!(ended.status, subs_engine::store::TurnStatus::Done, "the turn goes on without its client");
    let events = tokio::time::timeout(Duration::from_secs(60), read_sse(response, &mut |_| false)).await.unwrap();
    let last = &events.last().unwrap().data;
    assert_eq!((&last["type"], &last["code"]), (&json!("RUN_ERROR"), &json!("dropped")), "{last}");
    let message = last["message"].as_str().unwrap();
    assert!(message.contains("fell behind") && message.contains("GET /v1/sessions/t-flood/events"), "{message}");
    assert_eq!(events[events.len() - 2].data["type"], "MESSAGES_SNAPSHOT", "the conversation so far comes first");
}
