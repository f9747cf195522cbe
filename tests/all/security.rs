//! The security suite, over the real API: a tenant with a key uploads
//! hostile components and runs turns with them while another tenant's
//! session completes; a tenant tries every endpoint with another tenant's
//! ids; guests try to leave their outgoing-HTTP allow-list by redirects,
//! IP literals and names that resolve to loopback. Each attempt is refused
//! with an error that says what happened, and the refusals are logged.
//!
//! Cross-tenant basics, oversized bodies and path-traversal agent ids are
//! in `api.rs`; the sandbox's limits one by one, below the API, in
//! `sandbox.rs`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_engine::worker::component::{AgentPolicy, HostConfig, LimitOverrides};
use subs_tests::guests;
use subs_tests::server::TestServer;

const ACME: (&str, &str) = ("acme", "subs_acme_key_000000000000000000000");
const BRAVO: (&str, &str) = ("bravo", "subs_bravo_key_00000000000000000000");

/// A real server on `127.0.0.1:0` whose components run on a host with the
/// given tenant policies, and a client for it whose calls carry a key.
struct Api {
    server: TestServer,
}

impl Api {
    async fn start(keys: &[(&str, &str)], tenants: HashMap<String, AgentPolicy>) -> Self {
        Self::start_with(keys, HostConfig { tenants, ..HostConfig::default() }).await
    }

    /// [`Api::start`] with a component host of `host`'s settings.
    async fn start_with(keys: &[(&str, &str)], host: HostConfig) -> Self {
        let config = subs_engine::EngineConfig {
            default_retry: subs_protocol::RetryPolicy {
                timeout_secs: None,
                max_retries: 2,
                backoff_base_secs: 0.01,
                backoff_max_secs: 0.05,
            },
            ..subs_engine::EngineConfig::default()
        };
        let server = TestServer::builder()
            .keys(keys)
            .host_config(host)
            .engine_config(config)
            .server_config(subs_server::ServerConfig::default())
            .start()
            .await;
        Self { server }
    }

    fn request(&self, method: Method, path: &str, key: &str) -> reqwest::RequestBuilder {
        self.server.request(method, path, Some(key))
    }

    async fn call(&self, method: Method, path: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.server.call(method, path, Some(key), body).await
    }

    async fn upload(&self, agent: &str, wasm: &str, key: &str) -> (StatusCode, Value) {
        self.server.upload(agent, wasm, Some(key)).await
    }

    /// Posts `input` to `session`; returns the turn it started.
    async fn start_turn(&self, session: &str, key: &str, input: Value) -> String {
        let (status, accepted) =
            self.call(Method::POST, &format!("/v1/sessions/{session}/input"), key, Some(input)).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{session}: {accepted}");
        accepted["turn_id"].as_str().expect("a turn").to_owned()
    }

    /// Reads the session's events until `turn` ends; returns its last
    /// event (`turn.done` or `turn.failed`).
    async fn turn_end(&self, session: &str, turn: &str, key: &str) -> (String, Value) {
        let response = self.request(Method::GET, &format!("/v1/sessions/{session}/events"), key).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let read = async move {
            let mut response = response;
            let mut parser = subs_protocol::sse::SseParser::new();
            while let Some(chunk) = response.chunk().await.unwrap() {
                for read in parser.push(&chunk).expect("events within the bound") {
                    if matches!(read.event.as_str(), "turn.done" | "turn.failed") {
                        let data: Value = serde_json::from_str(&read.data).unwrap();
                        if data["turn_id"] == turn {
                            return (read.event, data);
                        }
                    }
                }
            }
            panic!("the stream of {session} ended before turn {turn} did");
        };
        tokio::time::timeout(Duration::from_secs(30), read).await.expect("the turn ends")
    }

    async fn say(&self, session: &str, agent: &str, text: &str, key: &str) -> String {
        let input = json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": text}});
        self.start_turn(session, key, input).await
    }

    async fn act(&self, session: &str, agent: &str, name: &str, args: Value, key: &str) -> String {
        let input = json!({"type": "client.action", "agent_id": agent, "name": name, "args": args});
        self.start_turn(session, key, input).await
    }
}

/// Limits small enough that every runaway guest is stopped fast.
fn small() -> LimitOverrides {
    LimitOverrides {
        memory_bytes: Some(32 << 20),
        cpu: Some(Duration::from_millis(150)),
        wall_clock: Some(Duration::from_millis(500)),
        ..LimitOverrides::default()
    }
}

fn policy(hosts: Option<Vec<String>>) -> AgentPolicy {
    AgentPolicy { limits: small(), http_hosts: hosts }
}

/// A loopback server that answers everything with a redirect to `to`.
async fn redirector(to: String) -> std::net::SocketAddr {
    let app = axum::Router::new().fallback(move || {
        let to = to.clone();
        async move { (StatusCode::FOUND, [("location", to)], "") }
    });
    subs_tests::serve_loopback(app).await
}

/// Every hostile component, uploaded by tenant acme through the API: the
/// ones that ask for what agents never get are refused at upload with a
/// 422 naming it; the rest upload, and each turn fails with an error
/// naming what the guest did, while tenant bravo's tool turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_uploads_fail_alone_while_another_tenants_session_completes() {
    let (hello, hits) = subs_tests::hello_server().await;
    let tenants = HashMap::from([(ACME.0.to_owned(), policy(None))]);
    let s = Api::start(&[ACME, BRAVO], tenants).await;
    let acme = ACME.1;

    // Refused at upload: an import the engine does not grant, and bytes
    // that are no component at all.
    let keyvalue = wat::parse_str(r#"(component (import "wasi:keyvalue/store@0.2.0-draft" (instance)))"#).unwrap();
    for (agent, bytes, expected) in [
        ("kv", keyvalue, "`wasi:keyvalue/store@0.2.0-draft` (the engine does not grant it)"),
        ("junk", b"\0asm\x0d\0\x01\0garbage".to_vec(), "not a valid WebAssembly component"),
    ] {
        let response = s
            .request(Method::PUT, &format!("/v1/agents/{agent}"), acme)
            .header("content-type", "application/wasm")
            .body(bytes)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
        let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
        assert_eq!(body["code"], "invalid_component");
        assert!(body["error"].as_str().unwrap().contains(expected), "{body}");
    }
    assert_eq!(s.call(Method::GET, "/v1/agents", acme, None).await.1, json!([]), "nothing refused was kept");

    // Accepted, then each turn fails with what happened.
    let hostile = [
        ("spin", guests::TEST_SPIN, None, "CPU limit of 150ms"),
        ("bomb", guests::TEST_MEMORY_BOMB, None, "memory limit of 32.0 MiB"),
        ("deep", guests::TEST_STACK_OVERFLOW, None, "stack overflow"),
        ("huge", guests::TEST_HUGE_RESPONSE, None, "memory limit of 32.0 MiB"),
        ("sleeper", guests::TEST_SLEEPER, None, "did not decide within 500ms"),
        ("env", guests::TEST_READ_ENV, None, "reading HOME from the environment (0 variables)"),
        // The filesystem is linked, with nothing in it.
        ("files", guests::TEST_OPEN_FILE, None, "No such file or directory"),
        (
            "fetch",
            guests::TEST_FETCH,
            Some(("fetch", json!({"authority": hello.to_string()}))),
            "refused outgoing HTTP",
        ),
        ("garbage", guests::TEST_GARBAGE, Some(("panic", Value::Null)), "the garbage agent panics on purpose"),
    ];
    let mut turns = Vec::new();
    for (agent, wasm, action, expected) in hostile {
        let (status, body) = s.upload(agent, wasm, acme).await;
        assert_eq!(status, StatusCode::CREATED, "{agent}: {body}");
        let session = format!("hostile-{agent}");
        let turn = match action {
            Some((name, args)) => s.act(&session, agent, name, args, acme).await,
            None => s.say(&session, agent, "hello", acme).await,
        };
        turns.push((session, turn, expected));
    }

    // Bravo, meanwhile: a tool turn (model, tool, model) in a session named
    // like one of acme's.
    assert_eq!(s.upload("tools", guests::TOOLS, BRAVO.1).await.0, StatusCode::CREATED);
    let good = s.say("hostile-spin", "tools", r#"use tool add with {"a": 2, "b": 3}"#, BRAVO.1).await;

    for (session, turn, expected) in &turns {
        let (event, data) = s.turn_end(session, turn, acme).await;
        assert_eq!(event, "turn.failed", "{session}: {data}");
        let error = data["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{session}: expected `{expected}` in {error}");
    }
    let (event, data) = s.turn_end("hostile-spin", &good, BRAVO.1).await;
    assert_eq!(event, "turn.done", "{data}");
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/hostile-spin", BRAVO.1, None).await;
    let messages = snapshot["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "user, tool call, tool result, answer: {snapshot}");
    assert!(messages[3]["content"].as_str().unwrap().contains('5'), "{snapshot}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the refused fetch reached nothing");

    // The server is still fine, and so is the hostile tenant's access.
    assert_eq!(s.call(Method::GET, "/healthz", acme, None).await.0, StatusCode::OK);
    assert_eq!(s.call(Method::GET, "/v1/agents", acme, None).await.1.as_array().unwrap().len(), 9);
}

/// Every route of the OpenAPI document that names a session or an agent,
/// called by bravo with acme's ids, answers 404 (never 403, which would
/// confirm the id exists) with every input type; acme's session and agent
/// are untouched afterwards. Uploading under acme's agent id creates
/// bravo's own agent. A route with an id this test does not know fails
/// the test, so new routes are covered when they are added.
#[tokio::test]
async fn another_tenants_ids_are_not_found_on_every_route() {
    let s = Api::start(&[ACME, BRAVO], HashMap::new()).await;
    let (acme, bravo) = (ACME.1, BRAVO.1);
    assert_eq!(s.upload("secret-agent", guests::TOOLS, acme).await.0, StatusCode::CREATED);
    let turn = s.say("secret-session", "secret-agent", r#"use tool add with {"a": 1, "b": 1}"#, acme).await;
    assert_eq!(s.turn_end("secret-session", &turn, acme).await.0, "turn.done");
    let before_session = s.call(Method::GET, "/v1/sessions/secret-session", acme, None).await.1;
    let before_agent = s.call(Method::GET, "/v1/agents/secret-agent", acme, None).await.1;
    // Registering reaches nothing: the server is first called by a turn.
    let mcp = json!({"url": "https://93.184.216.34/mcp", "headers": {"authorization": "Bearer acme"}});
    let (status, registered) = s.call(Method::PUT, "/v1/mcp-servers/secret-mcp", acme, Some(mcp)).await;
    assert!(status.is_success(), "{status}: {registered}");
    let before_mcp = s.call(Method::GET, "/v1/mcp-servers/secret-mcp", acme, None).await.1;

    let inputs = [
        json!({"type": "client.message", "agent_id": "secret-agent", "message": {"role": "user", "content": "hi"}}),
        json!({"type": "client.messages", "agent_id": "secret-agent", "messages": [{"role": "user", "content": "hi"}]}),
        json!({"type": "client.action", "agent_id": "secret-agent", "name": "go"}),
        json!({"type": "interrupt.resume", "interrupt_id": "approval"}),
        json!({"type": "tool.result", "id": "call_1", "result": 1}),
        json!({"type": "tool.error", "id": "call_1", "error": "no", "retryable": false}),
    ];
    let (_, doc) = s.call(Method::GET, "/v1/openapi.json", bravo, None).await;
    let mut tried = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        // The operator's routes take no tenant key at all (admin.rs shows
        // that every one refuses them).
        if !path.contains('{') || path.starts_with("/v1/admin/") {
            continue;
        }
        let concrete = path
            .replace("{session_id}", "secret-session")
            .replace("{chat_id}", "secret-session")
            .replace("{agent_id}", "secret-agent")
            .replace("{name}", "secret-mcp")
            .replace("{version}", before_agent["version"].as_str().expect("acme's version"));
        assert!(!concrete.contains('{'), "{path}: an id this test does not know; add it");
        for method in item.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let bodies: Vec<Option<Value>> = match (method.as_str(), path.as_str()) {
                // Agent ids are per tenant: bravo's upload is bravo's own.
                ("PUT", "/v1/agents/{agent_id}") => continue,
                // So are MCP server names: bravo's PUT registers its own.
                ("PUT", "/v1/mcp-servers/{name}") => continue,
                ("POST", "/v1/sessions/{session_id}/input") => inputs.iter().cloned().map(Some).collect(),
                ("PUT", "/v1/sessions/{session_id}/budget") => vec![Some(json!({"budget": "1"}))],
                ("PUT", "/v1/agents/{agent_id}/current") => vec![Some(json!({"version": "sha256:00"}))],
                ("POST", "/v1/agents/{agent_id}/replay") => vec![Some(json!({"version": "sha256:00"}))],
                ("POST", "/v1/agents/{agent_id}/ag-ui") => vec![Some(json!({"threadId": "secret-session",
                    "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hi"}]}))],
                ("POST", "/v1/agents/{agent_id}/ai-sdk") => {
                    let user = json!({"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]});
                    vec![Some(json!({"id": "secret-session", "messages": [user]}))]
                }
                // The AI SDK's reconnect answers a chat with nothing running
                // 204, as it does one that does not exist.
                ("GET", "/v1/agents/{agent_id}/ai-sdk/{chat_id}/stream") => {
                    let response = s.request(method.clone(), &concrete, bravo).send().await.unwrap();
                    assert_eq!(response.status(), StatusCode::NO_CONTENT, "{method} {concrete}");
                    tried.push(format!("{method} {path}"));
                    continue;
                }
                _ => vec![None],
            };
            for body in bodies {
                let (status, answer) = s.call(method.clone(), &concrete, bravo, body.clone()).await;
                assert_eq!(status, StatusCode::NOT_FOUND, "{method} {concrete} {body:?}: {answer}");
                assert!(answer["code"].as_str().is_some_and(|c| c.ends_with("not_found") || c == "unknown_agent"));
                tried.push(format!("{method} {path}"));
            }
        }
    }
    // With Last-Event-ID and a token of bravo's, too.
    let response = s
        .request(Method::GET, "/v1/sessions/secret-session/events", bravo)
        .header("last-event-id", "0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let token = s.call(Method::POST, "/v1/tokens", bravo, None).await.1["token"].as_str().unwrap().to_owned();
    let url = s.server.url(&format!("/v1/sessions/secret-session/events?token={token}"));
    assert_eq!(s.server.http.get(url).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    tried.dedup();
    assert!(tried.len() >= 7, "the document names the id routes: {tried:?}");

    // Bravo's upload under the same id is its own; acme's is unchanged.
    assert_eq!(s.upload("secret-agent", guests::PASSTHROUGH, bravo).await.0, StatusCode::CREATED);
    assert_eq!(s.call(Method::GET, "/v1/sessions/secret-session", acme, None).await.1, before_session);
    assert_eq!(s.call(Method::GET, "/v1/agents/secret-agent", acme, None).await.1, before_agent);
    assert_eq!(s.call(Method::GET, "/v1/mcp-servers/secret-mcp", acme, None).await.1, before_mcp);
    assert_eq!(s.call(Method::GET, "/v1/sessions", bravo, None).await.1, json!([]));
}

/// Runs the fetch component as tenant `tenant` against `authority`;
/// returns how the turn ended.
async fn fetch(s: &Api, tenant: (&str, &str), session: &str, authority: &str) -> (String, Value) {
    let turn = s.act(session, "fetch", "fetch", json!({"authority": authority}), tenant.1).await;
    s.turn_end(session, &turn, tenant.1).await
}

/// The log lines of refusals (and unfollowed redirects) so far.
fn refusals() -> Vec<String> {
    crate::providers::captured_logs()
        .lines()
        .filter(|l| l.contains("outgoing HTTP refused") || l.contains("redirect not followed"))
        .map(str::to_owned)
        .collect()
}

/// SSRF through the guest's outgoing HTTP: an allow-listed host that
/// redirects elsewhere is not followed; IP literals of loopback are not
/// the name `localhost`; a name that resolves to loopback is not another
/// name or address on the list. Each is refused (the turn fails naming
/// the destination) or, for the redirect, handed back unfollowed, and
/// each is logged with the tenant and agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guests_cannot_leave_the_allow_list_by_redirects_ip_literals_or_names() {
    let (hello, hits) = subs_tests::hello_server().await;
    let port = hello.port();
    let away = redirector(format!("http://{hello}/")).await;
    // Three tenants, three allow-lists.
    let redirect = ("redirect", "subs_redirect_key_000000000000000000");
    let names = ("names", "subs_names_key_000000000000000000000");
    let numbers = ("numbers", "subs_numbers_key_00000000000000000000");
    let tenants = HashMap::from([
        // Only the redirector.
        (redirect.0.to_owned(), policy(Some(vec![away.to_string()]))),
        // Only the name `localhost`, any port.
        (names.0.to_owned(), policy(Some(vec!["localhost".to_owned()]))),
        // Only the address 127.0.0.1 on the target's port, and a name
        // that is not localhost.
        (numbers.0.to_owned(), policy(Some(vec![hello.to_string(), "allowed.example".to_owned()]))),
    ]);
    let s = Api::start(&[redirect, names, numbers], tenants).await;
    for tenant in [redirect, names, numbers] {
        assert_eq!(s.upload("fetch", guests::TEST_FETCH, tenant.1).await.0, StatusCode::CREATED);
    }
    crate::providers::captured_logs();

    // The control: what the lists allow goes through.
    let (event, data) = fetch(&s, names, "names-ok", &format!("localhost:{port}")).await;
    assert_eq!(event, "turn.done", "localhost is on the list: {data}");
    let (event, data) = fetch(&s, numbers, "numbers-ok", &hello.to_string()).await;
    assert_eq!(event, "turn.done", "{hello} is on the list: {data}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // A redirect off the list is handed back, not followed.
    let (event, data) = fetch(&s, redirect, "redirect", &away.to_string()).await;
    assert_eq!(event, "turn.done", "{data}");
    let (_, snapshot) = s.call(Method::GET, "/v1/sessions/redirect", redirect.1, None).await;
    assert_eq!(snapshot["messages"].as_array().unwrap().last().unwrap()["content"], "302 ");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "the redirect's target was not reached");
    let logged = refusals();
    let line = logged.iter().find(|l| l.contains("redirect not followed")).expect("the redirect is logged");
    for field in ["tenant=redirect", "agent=fetch", "status=302", &format!("location=http://{hello}/")] {
        assert!(line.contains(field), "{field} missing: {line}");
    }

    // Loopback by any other spelling than the name on the list.
    let literals = [
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("2130706433:{port}"),
        format!("0x7f000001:{port}"),
        format!("127.1:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        format!("allowed@127.0.0.1:{port}"),
    ];
    // Names resolving to loopback that are not the address on the list.
    let resolving = [format!("localhost:{port}"), format!("localhost.:{port}"), format!("LOCALHOST:{port}")];
    let cases = literals.iter().map(|a| (names, a)).chain(resolving.iter().map(|a| (numbers, a)));
    for (i, (tenant, authority)) in cases.enumerate() {
        let session = format!("ssrf-{i}");
        let (event, data) = fetch(&s, tenant, &session, authority).await;
        assert_eq!(event, "turn.failed", "{} fetching {authority}: {data}", tenant.0);
        let error = data["error"].as_str().unwrap_or_default();
        assert!(error.contains("HttpRequestDenied"), "{authority}: {error}");
        assert!(error.contains("refused outgoing HTTP to"), "{authority}: {error}");
        let logged = refusals();
        let line = logged
            .iter()
            .find(|l| l.contains(&format!("session={session}")) && l.contains("outgoing HTTP refused"))
            .unwrap_or_else(|| panic!("{authority}: no refusal logged in {logged:#?}"));
        assert!(line.contains(&format!("tenant={}", tenant.0)) && line.contains("agent=fetch"), "{line}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 2, "no refused request reached the target");
}

/// DNS rebinding: a name on the allow-list is trusted for its name, not
/// for wherever it resolves. One that resolves to loopback or to the cloud
/// metadata address is refused when the engine connects, with the reason,
/// and logged; the listed address itself still works, and so does a name
/// the operator made a private host (an internal service).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_names_that_resolve_to_private_addresses_are_refused() {
    let (hello, hits) = subs_tests::hello_server().await;
    let port = hello.port();
    let tenant = ("rebind", "subs_rebind_key_00000000000000000000");
    let listed = ["rebind.example", "metadata.example", "internal.example", &hello.to_string()].map(str::to_owned);
    let hosts = HashMap::from([
        ("rebind.example".to_owned(), vec![hello.ip()]),
        ("metadata.example".to_owned(), vec!["169.254.169.254".parse().unwrap()]),
        ("internal.example".to_owned(), vec![hello.ip()]),
    ]);
    let host = HostConfig {
        tenants: HashMap::from([(tenant.0.to_owned(), policy(Some(listed.to_vec())))]),
        hosts,
        private_hosts: vec!["internal.example".to_owned()],
        ..HostConfig::default()
    };
    let s = Api::start_with(&[tenant], host).await;
    assert_eq!(s.upload("fetch", guests::TEST_FETCH, tenant.1).await.0, StatusCode::CREATED);
    crate::providers::captured_logs();

    for (session, name, address) in
        [("loopback", "rebind.example", "127.0.0.1"), ("metadata", "metadata.example", "169.254.169.254")]
    {
        let (event, data) = fetch(&s, tenant, session, &format!("{name}:{port}")).await;
        assert_eq!(event, "turn.failed", "{name}: {data}");
        let error = data["error"].as_str().unwrap_or_default();
        for part in ["HttpRequestDenied", "refused outgoing HTTP to", address, "may only lead to public addresses"] {
            assert!(error.contains(part), "{name}: {part} missing from {error}");
        }
        let logged = refusals();
        let line = logged
            .iter()
            .find(|l| l.contains(&format!("session={session}")))
            .unwrap_or_else(|| panic!("{name}: no refusal logged in {logged:#?}"));
        assert!(line.contains("tenant=rebind") && line.contains("agent=fetch") && line.contains(name), "{line}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "no refused request reached the target");

    // The address itself is on the list, so it is reachable; and so is
    // the name the operator declared a private host.
    let (event, data) = fetch(&s, tenant, "by-address", &hello.to_string()).await;
    assert_eq!(event, "turn.done", "{data}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    let (event, data) = fetch(&s, tenant, "internal", &format!("internal.example:{port}")).await;
    assert_eq!(event, "turn.done", "a private host reaches its private address: {data}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}
