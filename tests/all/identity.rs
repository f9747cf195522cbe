//! Session owners and end-user tokens, over the real API: the identity a
//! session is created with reaches its workers (HTTP and component), is
//! fixed, filters the listing; an end-user token minted by the tenant
//! reaches only its identity's sessions and no tenant-only route.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_sdk::prelude::{Context, DecideError};
use subs_sdk::{Agent, DecisionRequest, DecisionResponse};
use subs_tests::guests;
use subs_tests::server::{TestServer, read_sse};

const ACME: (&str, &str) = ("acme", "subs_acme_key_000000000000000000000");
const KEY: Option<&str> = Some(ACME.1);
const ADMIN: &str = "subs_admin_identity_tests_0000000000";

/// An agent that answers with its proposal and keeps, as its state, the
/// identity the decision request carried: what the worker saw.
struct WhoAmI;

impl Agent for WhoAmI {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let seen = subs_sdk::to_value(&request.identity);
        let mut decision = request.proposed;
        decision.state = Some(json!({"identity": seen}));
        Ok(decision)
    }
}

async fn server() -> TestServer {
    TestServer::builder().keys(&[ACME]).admin_key(ADMIN).start().await
}

/// Mints a token for `identity` with the tenant's key; the token.
async fn mint(s: &TestServer, body: Value) -> String {
    let (status, token) = s.call(Method::POST, "/v1/tokens", KEY, Some(body)).await;
    assert_eq!(status, StatusCode::OK, "{token}");
    token["token"].as_str().expect("a token").to_owned()
}

fn say(agent: &str, text: &str) -> Value {
    json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": text}})
}

/// Posts `body` to `session` as `auth`; the status and answer.
async fn post(s: &TestServer, session: &str, auth: &str, body: Value) -> (StatusCode, Value) {
    s.call(Method::POST, &format!("/v1/sessions/{session}/input"), Some(auth), Some(body)).await
}

/// Reads the session's events with `?token=` until `turn` ends; its end.
async fn turn_end(s: &TestServer, session: &str, token: &str, turn: &str) -> String {
    let url = s.url(&format!("/v1/sessions/{session}/events?token={token}"));
    let response = s.http.get(url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK, "the token opens the event stream");
    let mut done = |e: &subs_tests::server::SseEvent| {
        matches!(e.event.as_str(), "turn.done" | "turn.failed") && e.data["turn_id"] == turn
    };
    let events =
        tokio::time::timeout(Duration::from_secs(30), read_sse(response, &mut done)).await.expect("the turn ends");
    events.last().expect("events").event.clone()
}

/// Starts a turn in `session` as `auth` and waits for it with `token`.
async fn run_turn(s: &TestServer, session: &str, auth: &str, token: &str, body: Value) {
    let (status, accepted) = post(s, session, auth, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn = accepted["turn_id"].as_str().unwrap();
    assert_eq!(turn_end(s, session, token, turn).await, "turn.done");
}

#[tokio::test]
async fn a_tokens_identity_reaches_http_and_component_workers_whatever_the_body_says() {
    let s = server().await;
    let url = format!("http://{}/", subs_tests::serve_loopback(subs_http_worker::router(WhoAmI)).await);
    let (status, agent) = s.call(Method::PUT, "/v1/agents/who", KEY, Some(json!({"url": url}))).await;
    assert_eq!(status, StatusCode::CREATED, "{agent}");
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);

    let alice = json!({"id": "alice", "metadata": {"plan": "pro"}});
    let token = mint(&s, json!({"identity": alice})).await;
    // The body names another owner: the token's wins.
    let mut body = say("who", "hello");
    body["identity"] = json!({"id": "mallory"});
    run_turn(&s, "via-http", &token, &token, body).await;
    let (status, snapshot) = s.call(Method::GET, "/v1/sessions/via-http", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK, "{snapshot}");
    assert_eq!(snapshot["identity"], alice, "stored with the session");
    assert_eq!(snapshot["state"]["identity"], alice, "what the HTTP worker saw");

    // The WIT path: the echo component keeps the whole request it got.
    run_turn(&s, "via-wit", &token, &token, say("echo", "hello")).await;
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/via-wit", Some(&token), None).await;
    assert_eq!(snapshot["identity"], alice);
    assert_eq!(snapshot["state"]["identity"], alice, "what the component saw: {}", snapshot["state"]);

    // A second turn of the session still carries it.
    run_turn(&s, "via-http", &token, &token, say("who", "again")).await;
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/via-http", KEY, None).await;
    assert_eq!(snapshot["state"]["identity"], alice, "every decision request carries it");
}

#[tokio::test]
async fn a_tenant_names_the_owner_once_and_the_listing_filters_by_it() {
    let s = server().await;
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);
    let owned = |text: &str, id: Option<&str>| {
        let mut body = say("echo", text);
        if let Some(id) = id {
            body["identity"] = json!({"id": id});
        }
        body
    };
    for (session, owner) in [("a1", Some("alice")), ("b1", Some("bob")), ("a2", Some("alice")), ("n1", None)] {
        let (status, answer) = post(&s, session, ACME.1, owned("hi", owner)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{session}: {answer}");
    }
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/n1", KEY, None).await;
    assert_eq!(snapshot["identity"], json!({}), "no identity given, none stored");

    // Fixed once the session exists: the same identity (or none) is
    // accepted, another is refused.
    let (status, refused) = post(&s, "a1", ACME.1, owned("again", Some("bob"))).await;
    assert_eq!((status, refused["field"].as_str()), (StatusCode::CONFLICT, Some("identity")), "{refused}");
    assert_eq!(post(&s, "a1", ACME.1, owned("again", Some("alice"))).await.0, StatusCode::ACCEPTED);
    assert_eq!(post(&s, "a1", ACME.1, owned("again", None)).await.0, StatusCode::ACCEPTED);
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/a1", KEY, None).await;
    assert_eq!(snapshot["identity"], json!({"id": "alice"}));

    let ids = |list: &Value| -> Vec<String> {
        list.as_array().unwrap().iter().map(|s| s["session_id"].as_str().unwrap().to_owned()).collect()
    };
    let (status, list) = s.call(Method::GET, "/v1/sessions?identity=alice", KEY, None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(ids(&list), ["a1", "a2"]);
    assert_eq!(list[0]["identity"], json!({"id": "alice"}), "the summary shows the owner");
    let (_, list) = s.call(Method::GET, "/v1/sessions", KEY, None).await;
    assert_eq!(ids(&list), ["a1", "a2", "b1", "n1"], "unfiltered, every session");
    let (_, list) = s.call(Method::GET, "/v1/sessions?identity=carol", KEY, None).await;
    assert_eq!(ids(&list), Vec::<String>::new());

    // Pages of a filtered listing name the filter in their next link.
    let response = s.request(Method::GET, "/v1/sessions?identity=alice&limit=1", KEY).send().await.unwrap();
    let link = response.headers()["link"].to_str().unwrap().to_owned();
    assert_eq!(link, "</v1/sessions?limit=1&after=a1&identity=alice>; rel=\"next\"");
    let (_, list) = s.call(Method::GET, "/v1/sessions?identity=alice&limit=1&after=a1", KEY, None).await;
    assert_eq!(ids(&list), ["a2"]);
    let (status, refused) = s.call(Method::GET, "/v1/sessions?identity=", KEY, None).await;
    assert_eq!((status, refused["field"].as_str()), (StatusCode::BAD_REQUEST, Some("identity")));
}

#[tokio::test]
async fn an_end_user_token_reaches_only_its_identitys_sessions_and_no_tenant_route() {
    let s = server().await;
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);
    let mut bobs = say("echo", "hi");
    bobs["identity"] = json!({"id": "bob"});
    assert_eq!(post(&s, "bobs", ACME.1, bobs).await.0, StatusCode::ACCEPTED);
    assert_eq!(post(&s, "tenants", ACME.1, say("echo", "hi")).await.0, StatusCode::ACCEPTED);
    let alice = mint(&s, json!({"identity": {"id": "alice"}})).await;
    assert_eq!(post(&s, "mine", &alice, say("echo", "hi")).await.0, StatusCode::ACCEPTED);

    // Another owner's session, or one without an owner, does not exist for
    // the token, on every session route.
    for session in ["bobs", "tenants", "nowhere"] {
        for (method, path) in [
            (Method::GET, format!("/v1/sessions/{session}")),
            (Method::GET, format!("/v1/sessions/{session}/events")),
            (Method::POST, format!("/v1/sessions/{session}/cancel")),
        ] {
            let (status, answer) = s.call(method.clone(), &path, Some(&alice), None).await;
            assert_eq!((status, answer["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{path}");
        }
        let url = s.url(&format!("/v1/sessions/{session}/events?token={alice}"));
        assert_eq!(s.http.get(url).send().await.unwrap().status(), StatusCode::NOT_FOUND, "{session} by ?token=");
    }
    let (status, _) = post(&s, "bobs", &alice, say("echo", "let me in")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "no input to another owner's session");
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/bobs", KEY, None).await;
    assert!(!snapshot["message_tree"].to_string().contains("let me in"), "bob's session is untouched: {snapshot}");
    assert_eq!(s.call(Method::GET, "/v1/sessions/mine", Some(&alice), None).await.0, StatusCode::OK);

    // The listing holds only its own, whatever it asks for.
    let ids = |list: &Value| -> Vec<String> {
        list.as_array().unwrap().iter().map(|s| s["session_id"].as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(ids(&s.call(Method::GET, "/v1/sessions", Some(&alice), None).await.1), ["mine"]);
    assert_eq!(
        ids(&s.call(Method::GET, "/v1/sessions?identity=bob", Some(&alice), None).await.1),
        Vec::<String>::new()
    );

    // No agents, budgets, usage, tokens or admin.
    let upload = s
        .request(Method::PUT, "/v1/agents/x", Some(&alice))
        .header("content-type", "application/wasm")
        .body(std::fs::read(guests::TEST_ECHO).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), StatusCode::FORBIDDEN, "PUT /v1/agents/x");
    for (method, path, body) in [
        (Method::PUT, "/v1/agents/x", Some(json!({"url": "http://127.0.0.1:9/"}))),
        (Method::GET, "/v1/agents", None),
        (Method::GET, "/v1/agents/echo", None),
        (Method::DELETE, "/v1/agents/echo", None),
        (Method::PUT, "/v1/sessions/mine/budget", Some(json!({"budget": "1"}))),
        (Method::GET, "/v1/usage", None),
        (Method::POST, "/v1/tokens", Some(json!({"identity": {"id": "alice"}, "ttl_secs": 86400}))),
        (Method::POST, "/v1/tokens", None),
        (Method::GET, "/v1/admin/tenants", None),
        (Method::POST, "/v1/admin/keys", Some(json!({"tenant": "acme"}))),
    ] {
        let (status, answer) = s.call(method.clone(), path, Some(&alice), body).await;
        assert_eq!((status, answer["code"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")), "{method} {path}");
    }
    let url = s.url(&format!("/v1/agents?token={alice}"));
    assert_eq!(s.http.get(url).send().await.unwrap().status(), StatusCode::FORBIDDEN, "nor by ?token=");
    assert_eq!(s.call(Method::GET, "/v1/agents/echo", KEY, None).await.0, StatusCode::OK, "the agent is still there");
}

#[tokio::test]
async fn a_token_for_one_session_reaches_that_session_only() {
    let s = server().await;
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);
    let whole = mint(&s, json!({"identity": {"id": "alice"}})).await;
    assert_eq!(post(&s, "other", &whole, say("echo", "hi")).await.0, StatusCode::ACCEPTED);
    let (status, minted) =
        s.call(Method::POST, "/v1/tokens", KEY, Some(json!({"identity": {"id": "alice"}, "session_id": "chat"}))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((minted["session_id"].as_str(), &minted["identity"]), (Some("chat"), &json!({"id": "alice"})));
    let one = minted["token"].as_str().unwrap().to_owned();

    assert_eq!(post(&s, "chat", &one, say("echo", "hi")).await.0, StatusCode::ACCEPTED, "creates its session");
    assert_eq!(s.call(Method::GET, "/v1/sessions/chat", Some(&one), None).await.0, StatusCode::OK);
    assert_eq!(post(&s, "elsewhere", &one, say("echo", "hi")).await.0, StatusCode::NOT_FOUND, "creates no other");
    assert_eq!(s.call(Method::GET, "/v1/sessions/other", Some(&one), None).await.0, StatusCode::NOT_FOUND);
    let (_, list) = s.call(Method::GET, "/v1/sessions", Some(&one), None).await;
    // Compared by id and owner: the turn may end between the two reads.
    let (_, all) = s.call(Method::GET, "/v1/sessions", KEY, None).await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!((&list[0]["session_id"], &list[0]["identity"]), (&all[0]["session_id"], &all[0]["identity"]));
    assert_eq!(list[0]["session_id"], "chat");
    assert!(!s.engine.reads().session_exists("acme", "elsewhere").await.unwrap());
}

#[tokio::test]
async fn sub_agent_sessions_belong_to_their_parents_owner() {
    let s = server().await;
    assert_eq!(s.upload("scenario", guests::TEST_SCENARIO, KEY).await.0, StatusCode::CREATED);
    assert_eq!(s.upload("helper", guests::PASSTHROUGH, KEY).await.0, StatusCode::CREATED);
    let alice = mint(&s, json!({"identity": {"id": "alice", "metadata": {"team": "blue"}}})).await;
    run_turn(&s, "parent", &alice, &alice, say("scenario", r#"use tool helper with {"prompt": "say hi"}"#)).await;

    let (_, list) = s.call(Method::GET, "/v1/sessions", Some(&alice), None).await;
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 2, "the parent and its child: {list:?}");
    let child = list.iter().find(|s| s["ancestry"] == json!(["parent"])).expect("the child is listed");
    assert_eq!(child["identity"], json!({"id": "alice", "metadata": {"team": "blue"}}));
    let child = child["session_id"].as_str().unwrap();
    assert_eq!(s.call(Method::GET, &format!("/v1/sessions/{child}"), Some(&alice), None).await.0, StatusCode::OK);
    let (_, by_owner) = s.call(Method::GET, "/v1/sessions?identity=alice", KEY, None).await;
    assert_eq!(by_owner.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn expired_and_forged_tokens_are_refused() {
    let s = server().await;
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);
    let short = mint(&s, json!({"identity": {"id": "alice"}, "ttl_secs": 1})).await;
    assert_eq!(post(&s, "mine", &short, say("echo", "hi")).await.0, StatusCode::ACCEPTED);
    let (payload, mac) = short.split_once('.').unwrap();
    let forged = format!("{payload}.{}", "0".repeat(mac.len()));
    let (status, answer) = s.call(Method::GET, "/v1/sessions/mine", Some(&forged), None).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    // Another identity in a token signed for alice.
    let bob = hex_claims_with(payload, "alice", "bob");
    assert_eq!(
        s.call(Method::GET, "/v1/sessions", Some(&format!("{bob}.{mac}")), None).await.0,
        StatusCode::UNAUTHORIZED
    );

    // Lifetimes are whole seconds: the short one ends within two.
    subs_tests::wait::eventually(Duration::from_secs(10), "the short token expires", || async {
        let (status, answer) = s.call(Method::GET, "/v1/sessions/mine", Some(&short), None).await;
        let expired = (status, answer["code"].as_str()) == (StatusCode::UNAUTHORIZED, Some("unauthorized"));
        if expired { Ok(()) } else { Err(format!("{status} {answer}")) }
    })
    .await;
    let url = s.url(&format!("/v1/sessions/mine/events?token={short}"));
    assert_eq!(s.http.get(url).send().await.unwrap().status(), StatusCode::UNAUTHORIZED, "nor its events");
    assert_eq!(post(&s, "new", &short, say("echo", "hi")).await.0, StatusCode::UNAUTHORIZED, "nor a new session");
}

/// The token payload `prefixed_hex` (`subs_user_` and hex of JSON) with
/// `from` replaced by `to` in its JSON.
fn hex_claims_with(prefixed_hex: &str, from: &str, to: &str) -> String {
    let hex = prefixed_hex.strip_prefix("subs_user_").expect("an end-user token");
    let bytes: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    let text = String::from_utf8(bytes).unwrap().replace(from, to);
    let encoded: String = text.bytes().map(|b| format!("{b:02x}")).collect();
    format!("subs_user_{encoded}")
}

#[tokio::test]
async fn bad_token_bodies_and_identities_are_clear_400s() {
    let s = server().await;
    assert_eq!(s.upload("echo", guests::TEST_ECHO, KEY).await.0, StatusCode::CREATED);
    let long = "x".repeat(257);
    let many: serde_json::Map<String, Value> = (0..33).map(|n| (format!("k{n}"), json!("v"))).collect();
    for (body, field) in [
        (json!({}), "identity"),
        (json!({"identity": {}}), "identity.id"),
        (json!({"identity": {"id": ""}}), "identity.id"),
        (json!({"identity": {"id": long}}), "identity.id"),
        (json!({"identity": {"id": 7}}), "identity.id"),
        (json!({"identity": {"id": "a", "metadata": many}}), "identity.metadata"),
        (json!({"identity": {"id": "a", "metadata": {"k": long}}}), "identity.metadata.k"),
        (json!({"identity": {"id": "a"}, "ttl_secs": 0}), "ttl_secs"),
        (json!({"identity": {"id": "a"}, "ttl_secs": 86401}), "ttl_secs"),
        (json!({"identity": {"id": "a"}, "ttl_secs": -1}), "ttl_secs"),
        (json!({"identity": {"id": "a"}, "session_id": "a\u{1}b"}), "session_id"),
        (json!({"identity": {"id": "a"}, "scope": "all"}), "scope"),
    ] {
        let (status, answer) = s.call(Method::POST, "/v1/tokens", KEY, Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["field"].as_str(), Some(field), "{body}: {answer}");
        assert!(!answer["error"].as_str().unwrap().is_empty());
    }
    let response = s.request(Method::POST, "/v1/tokens", KEY).body("{not json").send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    // Without a body: the event-stream token, as before.
    let (status, token) = s.call(Method::POST, "/v1/tokens", KEY, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(token.get("identity").is_none(), "{token}");
    let stream_token = token["token"].as_str().unwrap();
    assert_eq!(
        s.call(Method::GET, "/v1/sessions", Some(stream_token), None).await.0,
        StatusCode::UNAUTHORIZED,
        "an event-stream token is no bearer key"
    );

    // Inputs: a bad identity names its field, and one on an input that
    // creates no session is refused.
    for (identity, field) in [
        (json!({"id": long}), "identity.id"),
        (json!({"metadata": {"k": long}}), "identity.metadata.k"),
        (json!("alice"), "identity"),
    ] {
        let mut body = say("echo", "hi");
        body["identity"] = identity;
        let (status, answer) = post(&s, "s1", ACME.1, body).await;
        assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{answer}");
    }
    let settle = json!({"type": "tool.error", "id": "c", "error": "no", "retryable": false, "identity": {"id": "a"}});
    let (status, answer) = post(&s, "s1", ACME.1, settle).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some("identity")), "{answer}");
    assert!(!s.engine.reads().session_exists("acme", "s1").await.unwrap(), "nothing refused was stored");
}
