//! The web inspector (`/ui`) in a real browser: headless Chromium driven
//! over WebDriver (chromedriver, through `fantoccini`) against a real
//! `subs serve`. Each test saves a screenshot under
//! `target/inspector/<test>.png` for people to look at.
//!
//! Without `chromium` and `chromedriver` on the machine the tests skip,
//! saying so on stderr, unless `SUBS_REQUIRE_BROWSER=1` (CI sets it),
//! which makes that a failure. `SUBS_CHROMIUM` and `SUBS_CHROMEDRIVER`
//! name other binaries. The tests take one browser at a time: each starts
//! a chromedriver on a free port, and two cores do not run several
//! Chromiums well.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fantoccini::Locator;
use serde_json::{Value, json};
use subs_sdk::prelude::*;

use crate::browser::Chromium;
use crate::{ADD, PATIENCE, Server, TOOLS, http, stream_turn};

/// One browser at a time (see the module's doc).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long the page may take to show what a test waits for.
const PAGE_PATIENCE: Duration = Duration::from_secs(30);

/// Where the screenshots go: `target/inspector/`.
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target/tmp is in target").join("inspector")
}

/// A headless Chromium under a chromedriver of its own, for one test.
struct Browser {
    chromium: Chromium,
    /// The test's name: its screenshots' name.
    test: &'static str,
    /// Held while the browser runs; a field after `chromium`, so given
    /// back only once the browser is killed.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Browser {
    /// A browser for `test`, or `None` when there is none (see
    /// [`Chromium::start`]).
    async fn start(test: &'static str) -> Option<Browser> {
        let turn = ONE_AT_A_TIME.lock().await;
        let chromium = Chromium::start(test, &["--no-default-browser-check", "--window-size=1280,1100"]).await?;
        Some(Browser { chromium, test, _turn: turn })
    }

    async fn goto(&self, url: &str) {
        self.chromium.client.goto(url).await.unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// Saves a screenshot as `target/inspector/<test><suffix>.png`.
    async fn screenshot(&self, suffix: &str) -> PathBuf {
        let png = self.chromium.client.screenshot().await.expect("a screenshot");
        let dir = screenshots();
        std::fs::create_dir_all(&dir).expect("target/inspector is made");
        let file = dir.join(format!("{}{suffix}.png", self.test));
        std::fs::write(&file, png).expect("the screenshot is written");
        file
    }

    /// Runs `script` (a function body; `arguments` are `args`) until it
    /// returns something truthy, and answers that. On timeout: a
    /// screenshot (`…-failed.png`) and a panic naming `what`, with the
    /// page's text.
    async fn until(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        let found = subs_tests::wait::until(PAGE_PATIENCE, || async {
            let value = self.chromium.client.execute(script, args.clone()).await.expect("the script runs");
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            if truthy { Ok(value) } else { Err(value) }
        })
        .await;
        if let Ok(value) = found {
            return value;
        }
        let shot = self.screenshot("-failed").await;
        let text = self.chromium.client.execute("return document.body.innerText", vec![]).await.unwrap_or_default();
        panic!("waiting for {what}: the page shows\n{}\n(screenshot {})", text.as_str().unwrap_or(""), shot.display());
    }

    /// Waits for an element matching `css` whose text contains `text`.
    async fn text(&self, css: &str, text: &str) {
        let script =
            "return [...document.querySelectorAll(arguments[0])].some(e => e.textContent.includes(arguments[1]))";
        self.until(&format!("`{text}` in {css}"), script, vec![json!(css), json!(text)]).await;
    }

    /// Waits for an element matching `css`.
    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.until(css, "return document.querySelector(arguments[0]) !== null", vec![json!(css)]).await;
        self.chromium.client.find(Locator::Css(css)).await.expect("the element is there")
    }

    /// How many elements match `css`.
    async fn count(&self, css: &str) -> u64 {
        let value =
            self.chromium.client.execute("return document.querySelectorAll(arguments[0]).length", vec![json!(css)]);
        value.await.expect("the script runs").as_u64().unwrap_or(0)
    }

    /// Ends the WebDriver session (Chromium quits) and the driver.
    async fn close(self) {
        self.chromium.close().await;
    }
}

/// Uploads the component at `path` as agent `agent`.
async fn upload(url: &str, agent: &str, path: &str, key: Option<&str>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let mut put = http().put(format!("{url}/v1/agents/{agent}")).header("content-type", "application/wasm");
    if let Some(key) = key {
        put = put.bearer_auth(key);
    }
    let response = put.body(bytes).send().await.expect("the server answers");
    assert!(response.status().is_success(), "uploading {agent}: {}", response.text().await.unwrap_or_default());
}

/// Posts `input` to `session` (not streamed); the answer's JSON.
pub(crate) async fn input(url: &str, session: &str, key: Option<&str>, input: Value) -> Value {
    let mut post = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(input.to_string());
    if let Some(key) = key {
        post = post.bearer_auth(key);
    }
    let response = post.send().await.expect("the server answers");
    assert_eq!(response.status(), 202, "input to {session}");
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}

/// The session's snapshot.
pub(crate) async fn snapshot(url: &str, session: &str, key: Option<&str>) -> Value {
    let mut get = http().get(format!("{url}/v1/sessions/{session}"));
    if let Some(key) = key {
        get = get.bearer_auth(key);
    }
    let response = get.send().await.expect("the server answers");
    serde_json::from_slice(&response.bytes().await.expect("a body")).expect("JSON")
}

/// Waits until the session's status is `status`; its snapshot.
pub(crate) async fn settled(url: &str, session: &str, key: Option<&str>, status: &str) -> Value {
    subs_tests::wait::eventually(PATIENCE, format!("{session} is {status}"), || async {
        let snapshot = snapshot(url, session, key).await;
        if snapshot["status"] == status { Ok(snapshot) } else { Err(snapshot) }
    })
    .await
}

fn message(agent: &str, text: &str) -> Value {
    json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": text}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_turn_shows_its_message_call_result_and_reply() {
    let Some(browser) = Browser::start("tool_turn").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    upload(url, "tools", TOOLS, None).await;
    let events = stream_turn(url, "demo", "tools", ADD).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"));

    // The root leads to the page, which takes no key and may run no
    // inline script.
    let root = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = root.get(format!("{url}/")).send().await.unwrap();
    assert!(answer.status().is_redirection());
    assert_eq!(answer.headers()["location"], "/ui");
    let page = http().get(format!("{url}/ui")).send().await.unwrap();
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("script-src 'self'"));

    browser.goto(&format!("{url}/")).await;
    browser.text(r#"[data-testid="session-row"][data-session-id="demo"]"#, "tools").await;
    browser.element(r#"[data-session-id="demo"] [data-testid="session-link"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="message"][data-role="user"]"#, ADD).await;
    browser.text(r#"[data-testid="tool-call-name"]"#, "add").await;
    browser.text(r#"[data-testid="tool-call-args"]"#, r#"{"a":1,"b":2}"#).await;
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"sum":3}"#).await;
    browser.text(r#"[data-testid="message"][data-role="assistant"]"#, r#"add returned {"sum":3}."#).await;
    browser.text(r#"[data-testid="session-status"]"#, "idle").await;

    // Its decisions, turn by turn: the tool ran in one, and the decision
    // that called it shows the call's arguments and result, and the
    // version of the agent that decided.
    browser.element(r#"[data-testid="decision"][data-trigger="tool.execute"]"#).await;
    let open_all = r#"document.querySelectorAll('[data-testid="decision"]').forEach(d => { d.open = true; })"#;
    browser.chromium.client.execute(open_all, vec![]).await.unwrap();
    browser.text(r#"[data-testid="call-arguments"]"#, r#"{"a":1,"b":2}"#).await;
    browser.text(r#"[data-testid="call-result"]"#, r#"{"sum":3}"#).await;
    browser.text(r#"[data-testid="agent-version"]"#, "sha256:").await;
    let one_open = r#"const all = [...document.querySelectorAll('[data-testid="decision"]')];
        all.forEach(d => { d.open = false; });
        const caller = all.find(d => d.querySelector('[data-testid="call"][data-kind="tool_call"]'));
        if (caller) caller.open = true;"#;
    browser.chromium.client.execute(one_open, vec![]).await.unwrap();

    // An edit forks the conversation: a view that shares nothing with the
    // path starts a second branch at the root, which becomes the active
    // one; the page switches between the two.
    let fork = json!({"type": "client.messages", "agent_id": "tools",
        "messages": [{"role": "user", "content": r#"use tool add with {"a": 2, "b": 3}"#}]});
    input(url, "demo", None, fork).await;
    settled(url, "demo", None, "idle").await;
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"sum":5}"#).await;
    browser.text(r#"[data-testid="fork"]"#, "branch 2 of 2 (active)").await;
    browser.element(r#"[data-testid="fork"] button[aria-label="Previous branch"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="fork"]"#, "branch 1 of 2").await;
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"sum":3}"#).await;
    assert_eq!(browser.count(r#"[data-testid="message"].off-path"#).await, 4, "the first branch is off the path");
    browser.screenshot("").await;

    // The agent, its version; and an upload from the page.
    browser.goto(&format!("{url}/ui#/agents/tools")).await;
    browser.text(r#"[data-testid="version-digest"]"#, "sha256:").await;
    browser.goto(&format!("{url}/ui#/agents")).await;
    browser.element(r#"[data-testid="upload-file"]"#).await.send_keys(TOOLS).await.unwrap();
    let id = browser.element(r#"[data-testid="upload-agent-id"]"#).await;
    id.clear().await.unwrap();
    id.send_keys("tools-copy").await.unwrap();
    browser.element(r#"[data-testid="upload-submit"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="upload-state"]"#, "Uploaded: tools-copy sha256:").await;
    browser.element(r#"[data-testid="agent-row"][data-agent-id="tools-copy"]"#).await;
    let copy = http().get(format!("{url}/v1/agents/tools-copy")).send().await.unwrap();
    assert_eq!(copy.status(), 200);
    browser.close().await;
}

/// An HTTP worker whose LLM calls it answers itself, streaming the reply
/// a word at a time. A reply to a message that names a [`Gate`] stops
/// after its second word until the test opens that gate, so the test
/// looks at the page while the turn is surely running.
struct Slow;

/// The words [`Slow`] streams.
const STORY: [&str; 8] = ["Once ", "upon ", "a ", "time ", "there ", "was ", "a ", "stream."];

/// Where [`Slow`] waits: the gates the test has opened.
struct Gate;

static OPENED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
static OPENING: std::sync::Condvar = std::sync::Condvar::new();

impl Gate {
    /// The gates a message can name.
    const NAMES: [&'static str; 2] = ["story", "another"];

    fn open(name: &'static str) {
        OPENED.lock().unwrap().push(name);
        OPENING.notify_all();
    }

    /// Waits (at most [`PATIENCE`]) until the test opens `name`.
    fn wait(name: &'static str) {
        let opened = OPENED.lock().unwrap();
        let _ = OPENING.wait_timeout_while(opened, PATIENCE, |opened| !opened.contains(&name)).unwrap();
    }
}

impl Agent for Slow {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        match &request.trigger {
            Trigger::SessionStart => {
                let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
                config.handler = Some(subs_sdk::LlmHandler::Worker);
                config.stream = Some(true);
                Ok(request.proposed.with_agent(config))
            }
            Trigger::LlmExecute(call) => {
                let messages = call.request["messages"].as_array();
                let last = messages.and_then(|m| m.last()).and_then(|m| m["content"].as_str()).unwrap_or_default();
                let gate = Gate::NAMES.into_iter().find(|name| last.contains(name));
                for (i, word) in STORY.into_iter().enumerate() {
                    cx.emit_text(word)?;
                    if let Some(gate) = gate.filter(|_| i == 1) {
                        Gate::wait(gate);
                    }
                    // A slow model: the page shows the reply as it streams.
                    subs_tests::wait::pace_blocking(Duration::from_millis(50));
                }
                let reply = json!({"model": "test/slow", "content": STORY.concat(), "finish_reason": "stop"});
                Ok(DecisionResponse::new().with_action(Action::llm_result(reply)))
            }
            _ => Ok(request.proposed),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn streamed_text_shows_before_the_turn_is_done() {
    let Some(browser) = Browser::start("streaming").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let worker = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(subs_http_worker::serve_router(listener, subs_http_worker::router(Slow), std::future::pending()));
    let put = http()
        .put(format!("{url}/v1/agents/slow"))
        .header("content-type", "application/json")
        .body(json!({"url": worker}).to_string())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap_or_default());
    // The session exists before the page opens it.
    stream_turn(url, "story", "slow", "hello").await;

    browser.goto(&format!("{url}/ui#/sessions/story")).await;
    browser.text(r#"[data-testid="message"][data-role="assistant"]"#, "stream.").await;
    browser.text(r#"[data-testid="stream-state"]"#, "live").await;
    let area = browser.element(r#"[data-testid="message-input"]"#).await;
    area.send_keys("tell me a story").await.unwrap();
    browser.element(r#"[data-testid="send-message"]"#).await.click().await.unwrap();

    browser.text(r#"[data-testid="live-text"]"#, "upon").await;
    // The turn is still running: the text came before its `turn.done`.
    let now = snapshot(url, "story", None).await;
    assert_eq!(now["status"], "running", "{now}");
    assert_eq!(browser.count(r#"[data-testid="event"][data-event="turn.done"]"#).await, 1, "only the first turn's");
    browser.screenshot("").await;
    Gate::open("story");

    let done = settled(url, "story", None, "idle").await;
    let messages = done["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{done}");
    browser
        .until(
            "both replies",
            r#"return [...document.querySelectorAll('[data-testid="message"][data-role="assistant"]')].length === 2"#,
            vec![],
        )
        .await;

    // Cancelled from the page while it streams.
    browser.element(r#"[data-testid="message-input"]"#).await.send_keys("another").await.unwrap();
    browser.element(r#"[data-testid="send-message"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="live-text"]"#, "upon").await;
    browser.element(r#"[data-testid="cancel-turn"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="action-result"]"#, "Cancelled the turn.").await;
    browser.element(r#"[data-testid="event"][data-event="turn.failed"]"#).await;
    Gate::open("another");
    settled(url, "story", None, "idle").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn resuming_an_interrupt_from_the_page_completes_the_turn() {
    let Some(browser) = Browser::start("interrupt").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    upload(url, "scenario", subs_tests::guests::TEST_SCENARIO, None).await;
    input(url, "approve", None, message("scenario", "interrupt: may I?")).await;
    let waiting = settled(url, "approve", None, "waiting").await;
    assert_eq!(waiting["interrupts"][0]["interrupt_id"], "approval", "{waiting}");

    // The list filters by status and agent.
    browser.goto(&format!("{url}/ui#/sessions?status=waiting&agent=scenario")).await;
    browser.element(r#"[data-testid="session-row"][data-session-id="approve"]"#).await;
    browser.goto(&format!("{url}/ui#/sessions?status=idle")).await;
    browser.text(r#"[data-testid="sessions"]"#, "No sessions").await;

    browser.goto(&format!("{url}/ui#/sessions/approve")).await;
    let form = r#"[data-testid="interrupt"][data-interrupt-id="approval"]"#;
    browser.text(form, "needs approval").await;
    browser.text(&format!("{form} [data-testid=\"interrupt-payload\"]"), "may I?").await;
    let payload = browser.element(&format!("{form} [data-testid=\"resume-payload\"]")).await;
    payload.send_keys(r#"{"approved": true}"#).await.unwrap();
    browser.element(&format!("{form} [data-testid=\"resume-interrupt\"]")).await.click().await.unwrap();

    browser.text(r#"[data-testid="message"][data-role="assistant"]"#, r#"resumed with {"approved":true}"#).await;
    browser.text(r#"[data-testid="session-status"]"#, "idle").await;
    let done = settled(url, "approve", None, "idle").await;
    assert_eq!(done["interrupts"], json!([]));
    assert_eq!(done["messages"].as_array().unwrap().last().unwrap()["content"], r#"resumed with {"approved":true}"#);
    assert_eq!(browser.count(r#"[data-testid="interrupt"]"#).await, 0, "the form is gone");
    // It is listed as answered: with what, and by whom.
    let answered = r#"[data-testid="answered-interrupt"][data-interrupt-id="approval"]"#;
    browser.text(&format!("{answered} [data-testid=\"answered-payload\"]"), r#"{"approved":true}"#).await;
    browser.text(&format!("{answered} [data-testid=\"answered-by\"]"), "the tenant").await;
    browser.text(answered, "(needs approval)").await;
    browser.screenshot("").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn answering_a_client_tool_from_the_page_completes_the_turn() {
    let Some(browser) = Browser::start("client_tool").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    upload(url, "tools", TOOLS, None).await;
    let confirm = json!({"name": "confirm", "description": "Asks the user.",
        "input": {"type": "object", "properties": {"ok": {"type": "boolean"}}}});
    let ask = json!({"type": "client.messages", "agent_id": "tools", "client": {"tools": [confirm]},
        "messages": [{"role": "user", "content": r#"use tool confirm with {"ok": true}"#}]});
    input(url, "ask", None, ask).await;
    settled(url, "ask", None, "waiting").await;

    browser.goto(&format!("{url}/ui#/sessions/ask")).await;
    let form = r#"[data-testid="client-call"]"#;
    browser.text(form, "confirm").await;
    browser.text(form, r#"{"ok":true}"#).await;
    let result = browser.element(&format!("{form} [data-testid=\"tool-result-input\"]")).await;
    result.send_keys(r#"{"confirmed": "yes"}"#).await.unwrap();
    browser.element(&format!("{form} [data-testid=\"send-tool-result\"]")).await.click().await.unwrap();
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"confirmed":"yes"}"#).await;
    browser.text(r#"[data-testid="message"][data-role="assistant"]"#, "confirm returned").await;
    browser.text(r#"[data-testid="session-status"]"#, "idle").await;
    assert_eq!(browser.count(form).await, 0, "the form is gone");
    settled(url, "ask", None, "idle").await;
    browser.screenshot("").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenants_key_sees_none_of_the_sessions() {
    let Some(browser) = Browser::start("tenants").await else { return };
    let (acme, beta) = ("subs_acce55acce55acce55acce55acce55ac", "subs_be7abe7abe7abe7abe7abe7abe7abe7a");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(
        &config,
        format!("[[keys]]\ntenant = \"acme\"\nkey = \"{acme}\"\n\n[[keys]]\ntenant = \"beta\"\nkey = \"{beta}\"\n"),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server =
        Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let url = &server.url;
    upload(url, "tools", TOOLS, Some(acme)).await;
    for session in ["acme-one", "acme-two"] {
        input(url, session, Some(acme), message("tools", ADD)).await;
        settled(url, session, Some(acme), "idle").await;
    }

    // The page asks for a key; beta's lists nothing and finds nothing.
    browser.goto(&format!("{url}/ui")).await;
    let key = browser.element(r#"[data-testid="auth-key"]"#).await;
    key.send_keys(beta).await.unwrap();
    browser.element(r#"[data-testid="auth-submit"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="sessions"]"#, "No sessions.").await;
    assert_eq!(browser.count(r#"[data-testid="session-row"]"#).await, 0);
    browser.goto(&format!("{url}/ui#/sessions/acme-one")).await;
    browser.element(r#"[data-testid="session"][data-loaded="missing"]"#).await;
    assert_eq!(browser.count(r#"[data-testid="message"]"#).await, 0);
    browser.screenshot("").await;

    // The same page with acme's key shows both.
    browser.element(r#"[data-testid="change-key"]"#).await.click().await.unwrap();
    let key = browser.element(r#"[data-testid="auth-key"]"#).await;
    key.send_keys(acme).await.unwrap();
    browser.element(r#"[data-testid="auth-submit"]"#).await.click().await.unwrap();
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"sum":3}"#).await;
    browser.goto(&format!("{url}/ui#/sessions")).await;
    browser.element(r#"[data-session-id="acme-two"]"#).await;
    assert_eq!(browser.count(r#"[data-testid="session-row"]"#).await, 2);

    // An end-user token sees its identity's session only, and follows its
    // events with itself as `?token=`.
    let mut owned = message("tools", ADD);
    owned["identity"] = json!({"id": "alice"});
    input(url, "alice-chat", Some(acme), owned).await;
    settled(url, "alice-chat", Some(acme), "idle").await;
    let minted = http()
        .post(format!("{url}/v1/tokens"))
        .bearer_auth(acme)
        .header("content-type", "application/json")
        .body(json!({"identity": {"id": "alice"}}).to_string())
        .send()
        .await
        .unwrap();
    let minted: Value = serde_json::from_slice(&minted.bytes().await.unwrap()).unwrap();
    let token = minted["token"].as_str().expect("an end-user token");
    browser.element(r#"[data-testid="change-key"]"#).await.click().await.unwrap();
    browser.element(r#"[data-testid="auth-key"]"#).await.send_keys(token).await.unwrap();
    browser.element(r#"[data-testid="auth-submit"]"#).await.click().await.unwrap();
    browser.element(r#"[data-testid="session-row"][data-session-id="alice-chat"]"#).await;
    assert_eq!(browser.count(r#"[data-testid="session-row"]"#).await, 1, "alice's session only");
    browser.goto(&format!("{url}/ui#/sessions/alice-chat")).await;
    browser.text(r#"[data-testid="tool-result"]"#, r#"{"sum":3}"#).await;
    browser.text(r#"[data-testid="stream-state"]"#, "live").await;
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_session_renders_and_reports_its_time() {
    let Some(browser) = Browser::start("long_session").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    upload(url, "tools", TOOLS, None).await;
    // Each turn: six user messages and a tool call, its result and the
    // reply — ten messages, sent as the client's whole view (the path so
    // far, then the new ones), which appends.
    let turns = 100;
    let mut path: Vec<Value> = Vec::new();
    for turn in 0..turns {
        let mut messages = path.clone();
        messages.extend((0..6).map(|i| json!({"role": "user", "content": format!("turn {turn}, note {i}")})));
        messages.push(json!({"role": "user", "content": ADD}));
        let body = json!({"type": "client.messages", "agent_id": "tools", "messages": messages, "stream": true});
        let response = http()
            .post(format!("{url}/v1/sessions/long/input"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let text = response.text().await.unwrap();
        assert!(text.contains("event: turn.done"), "turn {turn}: {text}");
        path = snapshot(url, "long", None).await["messages"].as_array().unwrap().clone();
    }
    let snapshot = snapshot(url, "long", None).await;
    let messages = snapshot["messages"].as_array().unwrap().len();

    browser.goto(&format!("{url}/ui#/sessions/long")).await;
    let root = r#"[data-testid="session"][data-loaded="true"]"#;
    browser.element(root).await;
    let timing = browser
        .chromium
        .client
        .execute(
            "const e = document.querySelector(arguments[0]); return [e.dataset.renderMs, e.dataset.loadMs, \
             document.querySelectorAll('[data-testid=\"message\"]').length, \
             document.querySelectorAll('[data-testid=\"decision\"]').length]",
            vec![json!(root)],
        )
        .await
        .unwrap();
    let shown = timing[2].as_u64().unwrap();
    assert_eq!(shown as usize, messages, "every message of the active path is shown");
    assert!(timing[3].as_u64().unwrap() >= 400, "the decisions are shown: {timing}");
    eprintln!(
        "inspector: a session of {messages} messages and {} decisions rendered in {} ms ({} ms from opening the \
         page, fetching included)",
        timing[3],
        timing[0].as_str().unwrap_or("?"),
        timing[1].as_str().unwrap_or("?")
    );
    browser.screenshot("").await;
    browser.close().await;
}
