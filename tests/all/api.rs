//! The HTTP API over real HTTP: a server on `127.0.0.1:0`, a real redb file,
//! real components uploaded through the API.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use subs_tests::guests;

pub(crate) use subs_tests::server::{SseEvent, TestServer as Server, read_sse};

const GET: reqwest::Method = reqwest::Method::GET;
const POST: reqwest::Method = reqwest::Method::POST;
const DELETE: reqwest::Method = reqwest::Method::DELETE;
const PUT: reqwest::Method = reqwest::Method::PUT;

#[tokio::test]
async fn every_endpoint_works() {
    let s = Server::start(&[]).await;
    assert_eq!(s.call(GET, "/healthz", None, None).await, (StatusCode::OK, json!({"status": "ok"})));

    // Agents: upload, read, list, re-upload the same version, replace.
    let (status, agent) = s.upload("tools", guests::TOOLS, None).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(agent["kind"], "component");
    let version = agent["version"].as_str().unwrap().to_owned();
    assert!(version.starts_with("sha256:"));
    assert_eq!(s.upload("tools", guests::TOOLS, None).await.0, StatusCode::OK, "the same bytes are the same version");
    let (status, got) = s.call(GET, "/v1/agents/tools", None, None).await;
    assert_eq!((status, got["version"].as_str()), (StatusCode::OK, Some(version.as_str())));
    // An agent built without WASI is uploaded as a core module; the
    // streamed turn below runs it.
    assert_eq!(s.upload("helper", guests::PASSTHROUGH_LEAN, None).await.0, StatusCode::CREATED);
    let (_, list) = s.call(GET, "/v1/agents", None, None).await;
    assert_eq!(list.as_array().unwrap().len(), 2);

    // A turn, then its snapshot and the session list.
    let (status, accepted) = s.say("s1", "tools", r#"use tool add with {"a": 2, "b": 3}"#, None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    let events = s.wait_turn("s1", &turn, None).await;
    assert_eq!(events.last().unwrap().event, "turn.done");
    let (status, snapshot) = s.call(GET, "/v1/sessions/s1", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(snapshot["status"], "idle");
    assert_eq!(snapshot["messages"].as_array().unwrap().len(), 4, "{snapshot}");
    assert_eq!(snapshot["agent"]["tools"].as_array().unwrap().len(), 2);
    for field in ["message_tree", "calls", "usage", "ancestry", "identity", "state", "agent_id", "session_id"] {
        assert!(snapshot.get(field).is_some(), "snapshot has {field}: {snapshot}");
    }
    let (_, sessions) = s.call(GET, "/v1/sessions", None, None).await;
    assert_eq!(sessions[0]["session_id"], "s1");

    // A streamed turn answers with its own events, ending at turn.done.
    let body = json!({"type": "client.message", "agent_id": "helper", "message": {"role": "user", "content": "hi"}, "stream": true});
    let response = s
        .request(POST, "/v1/sessions/s2/input", None)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let streamed = read_sse(response, &mut |_| false).await;
    let names: Vec<&str> = streamed.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names.first(), Some(&"turn.started"));
    assert_eq!(names.last(), Some(&"turn.done"));
    assert!(streamed.iter().any(|e| e.data["message"]["content"] == "You said: hi"));

    // Cancel: nothing open now.
    assert_eq!(s.call(POST, "/v1/sessions/s2/cancel", None, None).await, (StatusCode::OK, json!({"cancelled": false})));

    // Budgets: a spent one (the offline model costs nothing, so a zero
    // budget is spent) fails the next turn before its call is sent; lifting
    // it makes the session usable again.
    let (status, budget) = s.call(PUT, "/v1/sessions/s2/budget", None, Some(json!({"budget": "0"}))).await;
    assert_eq!((status, budget), (StatusCode::OK, json!({"session_id": "s2", "budget": "0", "cost": "0"})));
    assert_eq!(s.call(GET, "/v1/sessions/s2", None, None).await.1["budget"], "0");
    let (_, accepted) = s.say("s2", "helper", "again", None).await;
    let events = s.wait_turn("s2", accepted["turn_id"].as_str().unwrap(), None).await;
    let failed = events.last().unwrap();
    assert_eq!((failed.event.as_str(), &failed.data["code"]), ("turn.failed", &json!("budget_exceeded")), "{failed:?}");
    let (status, budget) = s.call(PUT, "/v1/sessions/s2/budget", None, Some(json!({"budget": null}))).await;
    assert_eq!((status, &budget["budget"]), (StatusCode::OK, &Value::Null));
    let (_, accepted) = s.say("s2", "helper", "once more", None).await;
    let events = s.wait_turn("s2", accepted["turn_id"].as_str().unwrap(), None).await;
    assert_eq!(events.last().unwrap().event, "turn.done");
    assert_eq!(s.call(GET, "/v1/usage", None, None).await, (StatusCode::OK, json!({"cost": "0", "budget": null})));

    // A token for EventSource clients works on the events endpoint.
    let (status, token) = s.call(POST, "/v1/tokens", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(token["token"].as_str().is_some());

    // Metrics count what happened.
    let metrics = s.http.get(s.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("subs_http_requests_total{method=\"PUT\",route=\"/v1/agents/:agent_id\",status=\"201\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("subs_store_commits_total"));

    // Deleting an agent.
    let response = s.request(DELETE, "/v1/agents/helper", None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    assert_eq!(s.call(GET, "/v1/agents/helper", None, None).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_input_gets_a_json_error_naming_what_is_wrong() {
    let s = Server::start(&[]).await;
    s.upload("tools", guests::TOOLS, None).await;
    let input = |body: &str| {
        s.request(POST, "/v1/sessions/s/input", None).header("content-type", "application/json").body(body.to_owned())
    };
    let check = |status: StatusCode, body: Value, want: StatusCode, code: &str| {
        assert_eq!(status, want, "{body}");
        assert_eq!(body["code"], code, "{body}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}");
    };
    let send = |r: reqwest::RequestBuilder| async move {
        let response = r.send().await.unwrap();
        let status = response.status();
        (status, serde_json::from_str::<Value>(&response.text().await.unwrap()).unwrap())
    };

    let (status, body) = send(input("{not json")).await;
    check(status, body, StatusCode::BAD_REQUEST, "invalid_json");
    let (status, body) =
        send(input(r#"{"type": "client.message", "agent_id": "tools", "message": {"role": "robot"}}"#)).await;
    check(status, body.clone(), StatusCode::BAD_REQUEST, "invalid_input");
    assert_eq!(body["field"], "message.role");
    let (status, body) = send(input(r#"{"type": "client.mesage"}"#)).await;
    check(status, body.clone(), StatusCode::BAD_REQUEST, "invalid_input");
    assert_eq!(body["field"], "type");

    let budget = |session: &str, body: &str| {
        s.request(PUT, &format!("/v1/sessions/{session}/budget"), None)
            .header("content-type", "application/json")
            .body(body.to_owned())
    };
    let (status, body) = send(budget("nope", r#"{"budget": "1"}"#)).await;
    check(status, body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = send(budget("nope", r#"{"budget": "a dollar"}"#)).await;
    check(status, body.clone(), StatusCode::BAD_REQUEST, "invalid_input");
    assert_eq!(body["field"], "budget");

    let (status, body) = s.say("s", "nobody", "hi", None).await;
    check(status, body.clone(), StatusCode::NOT_FOUND, "unknown_agent");
    assert_eq!(body["field"], "agent_id");
    let (status, body) = s.call(GET, "/v1/sessions/nope", None, None).await;
    check(status, body, StatusCode::NOT_FOUND, "not_found");
    let resume = json!({"type": "interrupt.resume", "interrupt_id": "x"});
    let (status, body) = s.call(POST, "/v1/sessions/nope/input", None, Some(resume.clone())).await;
    check(status, body, StatusCode::NOT_FOUND, "not_found");
    let (status, body) = s.say("../../etc", "tools", "hi", None).await;
    assert!(status == StatusCode::BAD_REQUEST || status == StatusCode::NOT_FOUND, "{status} {body}");

    let big = format!(
        r#"{{"type": "client.message", "agent_id": "tools", "message": {{"role": "user", "content": "{}"}}}}"#,
        "x".repeat(70 << 10)
    );
    let (status, body) = send(input(&big)).await;
    check(status, body, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");

    let response = s
        .request(reqwest::Method::PUT, "/v1/agents/junk", None)
        .header("content-type", "application/wasm")
        .body(b"\0asm but not really".to_vec())
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    check(status, body, StatusCode::UNPROCESSABLE_ENTITY, "invalid_component");
    let response = s
        .request(reqwest::Method::PUT, "/v1/agents/junk", None)
        .header("content-type", "text/plain")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);

    // Agent ids that try to leave the components directory are refused
    // (or never reach a handler), and nothing is written outside it.
    for id in ["..", ".hidden", "..%2F..%2Fetc%2Fpasswd", "a%2Fb", "%00", &"x".repeat(129)] {
        let response = s
            .request(reqwest::Method::PUT, &format!("/v1/agents/{id}"), None)
            .header("content-type", "application/json")
            .body(r#"{"url": "http://127.0.0.1:9/"}"#)
            .send()
            .await
            .unwrap();
        let status = response.status();
        assert!(matches!(status, StatusCode::BAD_REQUEST | StatusCode::NOT_FOUND), "{id}: {status}");
    }
    assert_eq!(s.call(GET, "/v1/agents", None, None).await.1.as_array().unwrap().len(), 1, "only `tools`");

    // Settling what nothing waits for is a conflict.
    let (status, _) = s.say("s", "tools", "hello", None).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (status, body) = s.call(POST, "/v1/sessions/s/input", None, Some(resume)).await;
    check(status, body, StatusCode::CONFLICT, "conflict");
    let settle = json!({"type": "tool.result", "id": "call_404", "result": 1});
    let (status, body) = s.call(POST, "/v1/sessions/s/input", None, Some(settle)).await;
    check(status, body, StatusCode::CONFLICT, "conflict");

    let (status, body) = s.call(GET, "/v1/nowhere", None, None).await;
    check(status, body, StatusCode::NOT_FOUND, "not_found");
    // The server is still fine.
    assert_eq!(s.call(GET, "/healthz", None, None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn tenants_see_only_their_own_agents_and_sessions() {
    let (a, b) = ("subs_tenant_a_key_0000000000000000", "subs_tenant_b_key_0000000000000000");
    let s = Server::start(&[("acme", a), ("bravo", b)]).await;
    assert_eq!(s.call(GET, "/v1/sessions", None, None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(s.call(GET, "/v1/sessions", Some("subs_wrong"), None).await.0, StatusCode::UNAUTHORIZED);

    assert_eq!(s.upload("tools", guests::TOOLS, Some(a)).await.0, StatusCode::CREATED);
    let (_, accepted) = s.say("shared-name", "tools", "hello", Some(a)).await;
    s.wait_turn("shared-name", accepted["turn_id"].as_str().unwrap(), Some(a)).await;

    // Bravo sees nothing of acme's: 404, never 403.
    assert_eq!(s.call(GET, "/v1/agents/tools", Some(b), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.call(GET, "/v1/agents", Some(b), None).await.1, json!([]));
    assert_eq!(s.call(GET, "/v1/sessions/shared-name", Some(b), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.call(GET, "/v1/sessions", Some(b), None).await.1, json!([]));
    assert_eq!(s.call(POST, "/v1/sessions/shared-name/cancel", Some(b), None).await.0, StatusCode::NOT_FOUND);
    let response = s.request(GET, "/v1/sessions/shared-name/events", Some(b)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(s.request(DELETE, "/v1/agents/tools", Some(b)).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let budget = Some(json!({"budget": "1"}));
    assert_eq!(s.call(PUT, "/v1/sessions/shared-name/budget", Some(b), budget).await.0, StatusCode::NOT_FOUND);
    let settle = json!({"type": "tool.result", "id": "call_1", "result": {}});
    let (status, _) = s.call(POST, "/v1/sessions/shared-name/input", Some(b), Some(settle)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "bravo cannot settle calls of acme's session");
    // Bravo cannot use acme's agent, and its own session of the same name
    // is its own.
    assert_eq!(s.say("shared-name", "tools", "hello", Some(b)).await.1["code"], "unknown_agent");
    s.upload("tools", guests::PASSTHROUGH, Some(b)).await;
    let (_, accepted) = s.say("shared-name", "tools", "mine", Some(b)).await;
    s.wait_turn("shared-name", accepted["turn_id"].as_str().unwrap(), Some(b)).await;
    let (_, theirs) = s.call(GET, "/v1/sessions/shared-name", Some(a), None).await;
    let (_, mine) = s.call(GET, "/v1/sessions/shared-name", Some(b), None).await;
    assert_eq!(theirs["messages"][0]["content"], "hello");
    assert_eq!(mine["messages"][0]["content"], "mine");

    // Tokens for event streams are per tenant too.
    let (_, token) = s.call(POST, "/v1/tokens", Some(b), None).await;
    let token = token["token"].as_str().unwrap();
    let url = format!("/v1/sessions/shared-name/events?token={token}");
    let response = s.request(GET, &url, None).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let events = read_sse(response, &mut |e| e.event == "turn.done").await;
    assert!(events.iter().any(|e| e.data["message"]["content"] == "mine"));
    let bad = s.request(GET, "/v1/sessions/shared-name/events?token=bravo.99999999999.00", None).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_tenant_cannot_create_sessions_beyond_its_limit() {
    let (a, b) = ("subs_tenant_a_key_0000000000000000", "subs_tenant_b_key_0000000000000000");
    let limits = subs_server::Limits { max_sessions: Some(2), ..subs_server::Limits::default() };
    let s = Server::builder()
        .keys(&[("acme", a), ("bravo", b)])
        .tenant_limits([("acme".to_owned(), limits)].into())
        .start()
        .await;
    for key in [a, b] {
        assert_eq!(s.upload("tools", guests::PASSTHROUGH, Some(key)).await.0, StatusCode::CREATED);
    }
    for session in ["one", "two"] {
        let (status, accepted) = s.say(session, "tools", "hello", Some(a)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        s.wait_turn(session, accepted["turn_id"].as_str().unwrap(), Some(a)).await;
    }
    let (status, error) = s.say("three", "tools", "hello", Some(a)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{error}");
    assert_eq!(error["code"], "limit_exceeded");
    assert!(error["error"].as_str().unwrap().contains("maximum of 2 sessions"), "{error}");
    assert_eq!(s.call(GET, "/v1/sessions/three", Some(a), None).await.0, StatusCode::NOT_FOUND, "nothing stored");
    // Its sessions go on; another tenant is not held to acme's limit.
    let (status, accepted) = s.say("one", "tools", "again", Some(a)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    for session in ["one", "two", "three"] {
        assert_eq!(s.say(session, "tools", "hello", Some(b)).await.0, StatusCode::ACCEPTED);
    }
}

#[tokio::test]
async fn sessions_are_listed_a_page_at_a_time() {
    let s = Server::start(&[]).await;
    s.upload("tools", guests::PASSTHROUGH, None).await;
    let ids = ["a", "b", "b-1", "c", "d"];
    for id in ids {
        let (status, accepted) = s.say(id, "tools", "hello", None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    }
    // Follow the `Link` header from the first page to the last.
    let mut listed = Vec::new();
    let mut next = Some("/v1/sessions?limit=2".to_owned());
    while let Some(path) = next.take() {
        let response = s.request(GET, &path, None).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        next = response.headers().get("link").map(|link| {
            let link = link.to_str().unwrap();
            link.strip_prefix('<').and_then(|l| l.strip_suffix(">; rel=\"next\"")).unwrap().to_owned()
        });
        let page: Vec<Value> = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert!(page.len() == 2 || (page.len() == 1 && next.is_none()), "{page:?}, next {next:?}");
        listed.extend(page.into_iter().map(|summary| summary["session_id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(listed, ids);
    // Without a limit, up to 100; after an id that names no session.
    assert_eq!(s.call(GET, "/v1/sessions", None, None).await.1.as_array().unwrap().len(), 5);
    let (_, page) = s.call(GET, "/v1/sessions?after=b-0", None, None).await;
    let page: Vec<&str> = page.as_array().unwrap().iter().map(|s| s["session_id"].as_str().unwrap()).collect();
    assert_eq!(page, ["b-1", "c", "d"]);
    let (status, last) = s.call(GET, "/v1/sessions?after=d", None, None).await;
    assert_eq!((status, last), (StatusCode::OK, json!([])));

    // `after=..` is an id like any other; a control character is not.
    assert_eq!(s.call(GET, "/v1/sessions?after=..", None, None).await.1.as_array().unwrap().len(), 5);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("after=a%0Ab", "after"),
        ("after=", "after"),
    ] {
        let (status, error) = s.call(GET, &format!("/v1/sessions?{query}"), None, None).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {error}");
        assert_eq!(error["code"], "invalid_input", "{query}");
        assert_eq!(error["field"], field, "{query}");
    }
}

/// The page at `path` and the path of the next one, from its `Link`.
async fn page(s: &Server, path: &str, key: Option<&str>) -> (Vec<Value>, Option<String>) {
    let response = s.request(GET, path, key).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "{path}");
    let next = response.headers().get("link").map(|link| {
        let link = link.to_str().unwrap();
        link.strip_prefix('<').and_then(|l| l.strip_suffix(">; rel=\"next\"")).unwrap().to_owned()
    });
    (serde_json::from_str(&response.text().await.unwrap()).unwrap(), next)
}

#[tokio::test]
async fn sessions_are_listed_by_status_and_agent_with_their_turns_and_usage() {
    let s = Server::start(&[]).await;
    s.upload("tools", guests::TOOLS, None).await;
    s.upload("echo", guests::PASSTHROUGH, None).await;
    for (id, agent) in [("a", "tools"), ("b", "echo"), ("c", "tools")] {
        let (_, accepted) = s.say(id, agent, "hello", None).await;
        s.wait_turn(id, accepted["turn_id"].as_str().unwrap(), None).await;
    }
    let (_, accepted) = s.say("a", "tools", "again", None).await;
    s.wait_turn("a", accepted["turn_id"].as_str().unwrap(), None).await;

    let ids = |page: &[Value]| page.iter().map(|p| p["session_id"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    let (all, _) = page(&s, "/v1/sessions", None).await;
    assert_eq!(all[0]["turns"], 2, "{}", all[0]);
    assert_eq!(all[1]["turns"], 1);
    assert!(all[0]["usage"].is_object() && all[0].get("cost").is_some(), "{}", all[0]);
    assert_eq!(ids(&page(&s, "/v1/sessions?agent=tools", None).await.0), ["a", "c"]);
    assert_eq!(ids(&page(&s, "/v1/sessions?status=idle&agent=echo", None).await.0), ["b"]);
    assert!(page(&s, "/v1/sessions?status=running", None).await.0.is_empty());
    // A filtered page names the next with the same filter.
    let (first, next) = page(&s, "/v1/sessions?agent=tools&limit=1", None).await;
    assert_eq!(ids(&first), ["a"]);
    let next = next.expect("a next page");
    assert!(next.contains("agent=tools"), "{next}");
    assert_eq!(ids(&page(&s, &next, None).await.0), ["c"]);
    for (query, field) in [("status=asleep", "status"), ("agent=a%0Ab", "agent")] {
        let (status, error) = s.call(GET, &format!("/v1/sessions?{query}"), None, None).await;
        assert_eq!((status, &error["field"]), (StatusCode::BAD_REQUEST, &json!(field)), "{query}: {error}");
    }
}

#[tokio::test]
async fn a_sessions_decisions_show_each_trigger_decision_and_call() {
    let (a, b) = ("subs_tenant_a_key_0000000000000000", "subs_tenant_b_key_0000000000000000");
    let s = Server::start(&[("acme", a), ("bravo", b)]).await;
    let (_, agent) = s.upload("tools", guests::TOOLS, Some(a)).await;
    let version = agent["version"].as_str().unwrap().to_owned();
    let (_, accepted) = s.say("s1", "tools", r#"use tool add with {"a": 2, "b": 3}"#, Some(a)).await;
    s.wait_turn("s1", accepted["turn_id"].as_str().unwrap(), Some(a)).await;

    // Every decision, a page of two at a time.
    let mut decisions = Vec::new();
    let mut next = Some("/v1/sessions/s1/decisions?limit=2".to_owned());
    while let Some(path) = next.take() {
        let (items, link) = page(&s, &path, Some(a)).await;
        assert!(items.len() == 2 || link.is_none(), "{items:?}");
        decisions.extend(items);
        next = link;
    }
    let seqs: Vec<u64> = decisions.iter().map(|d| d["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (0..decisions.len() as u64).collect::<Vec<_>>(), "in order, none twice");
    let types: Vec<&str> = decisions.iter().map(|d| d["trigger"]["type"].as_str().unwrap()).collect();
    assert_eq!(types.first(), Some(&"session.start"), "{types:?}");
    assert!(types.contains(&"client.messages") && types.contains(&"tool.execute"), "{types:?}");
    for d in &decisions {
        assert_eq!(d["status"], "applied", "{d}");
        assert_eq!(d["agent_version"].as_str(), Some(version.as_str()), "{d}");
        assert!(d["requested_ms"].as_u64().is_some() && d["decided_ms"].as_u64() >= d["requested_ms"].as_u64(), "{d}");
        assert!(d["latency_ms"].as_f64().is_some(), "{d}");
        assert_eq!(d["turn_id"], accepted["turn_id"]);
    }
    // The decision that called the tool shows the call with its arguments
    // and, settled on the same page, its result.
    let (whole, next) = page(&s, "/v1/sessions/s1/decisions", Some(a)).await;
    assert_eq!((whole.len(), next), (decisions.len(), None), "one page holds them all");
    let decisions = whole;
    let call = decisions
        .iter()
        .flat_map(|d| d["calls"].as_array().unwrap())
        .find(|c| c["kind"] == "tool_call")
        .unwrap_or_else(|| panic!("a tool call in {decisions:?}"));
    assert_eq!(call["name"], "add");
    assert_eq!(call["arguments"], json!({"a": 2, "b": 3}));
    assert_eq!(call["status"], "completed", "{call}");
    assert!(call["result"].as_str().unwrap().contains('5'), "{call}");
    // The model's call: usage from the trigger that settled it.
    let llm = decisions.iter().flat_map(|d| d["calls"].as_array().unwrap()).find(|c| c["kind"] == "llm_call");
    assert!(llm.is_some_and(|c| c["status"] == "completed" && c["usage"].is_object()), "{decisions:?}");
    // The client's message as stored: what was new.
    let first = decisions.iter().find(|d| d["trigger"]["type"] == "client.messages").unwrap();
    assert_eq!(first["trigger"]["new"][0]["content"], r#"use tool add with {"a": 2, "b": 3}"#);

    // Past the end, another tenant, bad pages.
    let last = decisions.len() - 1;
    assert!(page(&s, &format!("/v1/sessions/s1/decisions?after={last}"), Some(a)).await.0.is_empty());
    assert_eq!(s.call(GET, "/v1/sessions/s1/decisions", Some(b), None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.call(GET, "/v1/sessions/nobody/decisions", Some(a), None).await.0, StatusCode::NOT_FOUND);
    for (query, field) in [("limit=0", "limit"), ("limit=1001", "limit"), ("after=-1", "after"), ("after=x", "after")] {
        let (status, error) = s.call(GET, &format!("/v1/sessions/s1/decisions?{query}"), Some(a), None).await;
        assert_eq!((status, &error["field"]), (StatusCode::BAD_REQUEST, &json!(field)), "{query}: {error}");
    }
}

#[tokio::test]
async fn replay_from_every_event_id_of_a_finished_turn() {
    let s = Server::start(&[]).await;
    s.upload("tools", guests::TOOLS, None).await;
    let (_, accepted) =
        s.say("r", "tools", r#"use tool add with {"a": 1, "b": 2} and use tool add with {"a": 3, "b": 4}"#, None).await;
    let all = s.wait_turn("r", accepted["turn_id"].as_str().unwrap(), None).await;
    let stored: Vec<&SseEvent> = all.iter().filter(|e| e.id.is_some()).collect();
    let last = stored.last().unwrap().id.unwrap();
    assert!(stored.len() >= 7, "a tool turn has many events: {}", stored.len());
    assert_eq!(stored.iter().map(|e| e.id.unwrap()).collect::<Vec<_>>(), (0..=last).collect::<Vec<_>>());
    for from in 0..=last {
        let expected: Vec<SseEvent> = stored.iter().filter(|e| e.id.unwrap() > from).map(|e| (*e).clone()).collect();
        if expected.is_empty() {
            continue;
        }
        let replayed = s.events("r", None, Some(from), |e| e.id == Some(last)).await;
        assert_eq!(replayed, expected, "replay after {from}");
    }
    // `?after=` does the same as the header.
    let response = s.request(GET, &format!("/v1/sessions/r/events?after={}", last - 1), None).send().await.unwrap();
    let replayed = read_sse(response, &mut |e| e.id == Some(last)).await;
    assert_eq!(replayed.len(), 1);
    let (status, body) = s.call(GET, "/v1/sessions/r/events?after=minus-one", None, None).await;
    assert_eq!((status, body["field"].as_str()), (StatusCode::BAD_REQUEST, Some("after")));
}

#[tokio::test]
async fn a_client_that_reconnects_mid_turn_sees_what_one_that_stayed_saw() {
    let s = Server::start(&[]).await;
    s.upload("scenario", guests::TEST_SCENARIO, None).await;
    // The turn waits on an interrupt in the middle, so the reconnecting
    // client surely drops out while it runs.
    let (_, accepted) = s.say("d", "scenario", "interrupt here", None).await;
    let turn = accepted["turn_id"].as_str().unwrap().to_owned();
    let stayer = {
        let s_url = s.url("/v1/sessions/d/events");
        let http = s.http.clone();
        let turn = turn.clone();
        tokio::spawn(async move {
            let response = http.get(s_url).send().await.unwrap();
            read_sse(response, &mut |e| e.event == "turn.done" && e.data["turn_id"] == turn.as_str()).await
        })
    };
    // The leaver reads up to the interrupt, then disconnects.
    let first = s.events("d", None, None, |e| e.event == "interrupt").await;
    let resume = json!({"type": "interrupt.resume", "interrupt_id": "approval", "payload": "go"});
    assert_eq!(s.call(POST, "/v1/sessions/d/input", None, Some(resume)).await.0, StatusCode::ACCEPTED);
    let rest = s.events("d", None, first.last().unwrap().id, |e| e.event == "turn.done").await;
    let leaver: Vec<SseEvent> = first.into_iter().chain(rest).collect();
    let stayer = tokio::time::timeout(Duration::from_secs(30), stayer).await.unwrap().unwrap();
    assert_eq!(leaver, stayer);
    assert_eq!(stayer.last().unwrap().event, "turn.done");
}

#[tokio::test]
async fn the_openapi_document_matches_the_routes() {
    let s = Server::start(&[]).await;
    let (status, doc) = s.call(GET, "/v1/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc["openapi"]);
    let paths = doc["paths"].as_object().unwrap();
    let mut served = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{session_id}", "nobody")
                .replace("{agent_id}", "nobody")
                .replace("{chat_id}", "nobody")
                .replace("{tenant}", "nobody")
                .replace("{key}", "nobody00")
                .replace("{version}", "sha256:00")
                .replace("{name}", "nobody");
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = s.request(method.clone(), &concrete, None).send().await.unwrap();
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path} is documented but not served");
            assert!(!body.contains("no such route"), "{method} {path} is documented but not served");
            served.push(format!("{method} {path}"));
        }
    }
    served.sort();
    assert_eq!(
        served,
        [
            "DELETE /v1/admin/keys/{key}",
            "DELETE /v1/admin/tenants/{tenant}",
            "DELETE /v1/agents/{agent_id}",
            "DELETE /v1/agents/{agent_id}/mcp",
            "DELETE /v1/agents/{agent_id}/versions/{version}",
            "DELETE /v1/mcp-servers/{name}",
            "GET /healthz",
            "GET /metrics",
            "GET /v1/admin/keys",
            "GET /v1/admin/tenants",
            "GET /v1/admin/tenants/{tenant}",
            "GET /v1/admin/tenants/{tenant}/limits",
            "GET /v1/agents",
            "GET /v1/agents/{agent_id}",
            "GET /v1/agents/{agent_id}/ai-sdk/{chat_id}/stream",
            "GET /v1/agents/{agent_id}/mcp",
            "GET /v1/agents/{agent_id}/versions/{version}",
            "GET /v1/mcp-servers",
            "GET /v1/mcp-servers/{name}",
            "GET /v1/sessions",
            "GET /v1/sessions/{session_id}",
            "GET /v1/sessions/{session_id}/decisions",
            "GET /v1/sessions/{session_id}/events",
            "GET /v1/usage",
            "POST /v1/admin/keys",
            "POST /v1/agents/{agent_id}/ag-ui",
            "POST /v1/agents/{agent_id}/ai-sdk",
            "POST /v1/agents/{agent_id}/mcp",
            "POST /v1/agents/{agent_id}/replay",
            "POST /v1/sessions/{session_id}/cancel",
            "POST /v1/sessions/{session_id}/input",
            "POST /v1/tokens",
            "PUT /v1/admin/tenants/{tenant}",
            "PUT /v1/admin/tenants/{tenant}/limits",
            "PUT /v1/agents/{agent_id}",
            "PUT /v1/agents/{agent_id}/current",
            "PUT /v1/mcp-servers/{name}",
            "PUT /v1/sessions/{session_id}/budget",
        ],
        "every route is documented"
    );
}

#[tokio::test]
async fn an_agents_sandbox_policy_applies_to_its_decisions_only() {
    use subs_engine::worker::component::AgentPolicy;
    // Less linear memory than any Rust guest starts with: refused at
    // upload, with the number and the setting.
    let mut tight = AgentPolicy::default();
    tight.limits.memory_bytes = Some(64 << 10);
    // Decisions smaller than the first one: every turn fails, naming the
    // limit.
    let mut tiny = AgentPolicy::default();
    tiny.limits.decision_bytes = Some(16);
    let policies = [(("local".to_owned(), "tight".to_owned()), tight), (("local".to_owned(), "tiny".to_owned()), tiny)]
        .into_iter()
        .collect();
    let s = Server::builder().policies(policies).start().await;
    let (status, refused) = s.upload("tight", guests::PASSTHROUGH, None).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_component")));
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("of linear memory at start (its limit is 0.1 MiB, setting `memory_bytes`)"), "{error}");
    assert_eq!(s.upload("tiny", guests::PASSTHROUGH, None).await.0, StatusCode::CREATED);
    assert_eq!(s.upload("roomy", guests::PASSTHROUGH, None).await.0, StatusCode::CREATED);

    let (_, accepted) = s.say("a", "tiny", "hi", None).await;
    let events = s.wait_turn("a", accepted["turn_id"].as_str().unwrap(), None).await;
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "turn.failed", "{failed:?}");
    assert!(failed.data["error"].as_str().unwrap().contains("decision size limit"), "{failed:?}");

    let (_, accepted) = s.say("b", "roomy", "hi", None).await;
    let events = s.wait_turn("b", accepted["turn_id"].as_str().unwrap(), None).await;
    assert_eq!(events.last().unwrap().event, "turn.done");
}

// ---- keep-alive ------------------------------------------------------------

/// Streams one `tools` turn on `sender`'s connection and reads it to its
/// end; how long that took.
async fn streamed_turn(
    sender: &mut hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
    host: &str,
    session: &str,
) -> Duration {
    use http_body_util::BodyExt as _;
    let body = json!({"type": "client.message", "agent_id": "tools", "stream": true,
        "message": {"role": "user", "content": r#"use tool add with {"a": 1, "b": 2}"#}});
    let request = hyper::Request::post(format!("/v1/sessions/{session}/input"))
        .header("host", host)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body.to_string())))
        .unwrap();
    let started = std::time::Instant::now();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("event: turn.done") && text.contains(r#"add returned {\"sum\":3}."#), "{text}");
    elapsed
}

/// An HTTP/1.1 connection to `addr` (Nagle off on the client's side, so
/// only the server's setting is measured).
async fn connect(addr: &str) -> hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(connection);
    sender
}

/// Every client library keeps connections alive. On a kept-alive
/// connection Nagle's algorithm would hold the last segment of each
/// streamed response until the client's delayed ACK (40 ms or more on
/// Linux): the server turns it off on every connection it accepts. Turns
/// on one kept-alive connection are compared with turns each on a new
/// connection (which the delayed ACK does not hold up), interleaved so
/// that a busy machine slows both alike.
#[tokio::test]
async fn streamed_turns_on_a_kept_alive_connection_do_not_wait_for_delayed_acks() {
    let s = Server::start(&[]).await;
    assert_eq!(s.upload("tools", guests::TOOLS, None).await.0, StatusCode::CREATED);
    let addr = s.url("").strip_prefix("http://").unwrap().to_owned();
    let mut kept = connect(&addr).await;
    let (mut kept_alive, mut fresh) = (Vec::new(), Vec::new());
    for i in 0..21 {
        // A new session each time on both sides: the same work per turn,
        // so only the connection differs.
        kept_alive.push(streamed_turn(&mut kept, &addr, &format!("kept-{i}")).await);
        fresh.push(streamed_turn(&mut connect(&addr).await, &addr, &format!("fresh-{i}")).await);
    }
    kept_alive.sort();
    fresh.sort();
    let (kept_alive, fresh) = (kept_alive[10], fresh[10]);
    assert!(
        kept_alive < fresh + Duration::from_millis(20),
        "a turn took {kept_alive:?} at the median on a kept-alive connection, {fresh:?} on a new one: \
         the server's responses wait for delayed ACKs (is TCP_NODELAY off?)"
    );
}
