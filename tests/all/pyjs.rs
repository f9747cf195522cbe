//! Agents in Python and JavaScript, as their toolchains build them by
//! default (componentize-py, componentize-js: WASI included, nothing
//! stubbed): uploaded through the API and run under the default limits,
//! what they print in the logs, the limits they are admitted under, and a
//! Python exception's way into the failed turn.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use subs_engine::agents::{AgentError, AgentRegistry};
use subs_engine::store::{SessionKey, StepStatus, TurnStatus};
use subs_engine::worker::component::{AgentPolicy, ComponentAgent, ComponentHost, HostConfig};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{Action, DecisionResponse};
use subs_tests::{TENANT, TestEngine, guests};

use crate::api::Server;

/// The log lines so far that name `agent` and contain `text`.
fn logged(agent: &str, text: &str) -> Vec<String> {
    crate::providers::captured_logs()
        .lines()
        .filter(|l| l.contains(&format!("agent={agent} ")) && l.contains(text))
        .map(str::to_owned)
        .collect()
}

/// The default builds of both toolchains upload through the API with the
/// default limits and run a tool turn: the offline model calls `add`, the
/// agent runs it in a fresh instance and the answer comes back. What the
/// tool prints (`print`, `console.log`) is in the engine's logs, tagged
/// with the tenant, agent and session. The JavaScript agent runs built
/// against either world (`agent-json`, as its build script makes it, and
/// the typed `agent`).
#[tokio::test]
async fn default_python_and_js_builds_upload_and_run_a_tool_turn_printing_to_the_logs() {
    crate::providers::captured_logs();
    let s = Server::start(&[]).await;
    let agents =
        [("tools-py", guests::TOOLS_PY), ("tools-js", guests::TOOLS_JS), ("tools-js-typed", guests::TOOLS_JS_TYPED)];
    for (agent, wasm) in agents {
        let (status, uploaded) = s.upload(agent, wasm, None).await;
        assert_eq!(status, StatusCode::CREATED, "{agent}: {uploaded}");
        assert_eq!(uploaded["kind"], "component", "{uploaded}");

        let session = format!("{agent}-turn");
        let (status, accepted) = s.say(&session, agent, r#"use tool add with {"a": 1, "b": 2}"#, None).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
        let events = s.wait_turn(&session, accepted["turn_id"].as_str().unwrap(), None).await;
        let last = events.last().unwrap();
        assert_eq!(last.event, "turn.done", "{agent}: {events:#?}");
        let (_, snapshot) = s.call(reqwest::Method::GET, &format!("/v1/sessions/{session}"), None, None).await;
        let texts: Vec<&str> =
            snapshot["messages"].as_array().unwrap().iter().filter_map(|m| m["content"].as_str()).collect();
        assert!(texts.contains(&r#"{"sum":3}"#), "{agent}: the tool's result is recorded: {texts:?}");
        assert!(texts.contains(&r#"add returned {"sum":3}."#), "{agent}: {texts:?}");

        let lines = logged(agent, "add(1, 2)");
        assert_eq!(lines.len(), 1, "{agent} printed once: {lines:#?}");
        for field in ["tenant=local", &format!("session={session}"), "stream=\"stdout\""] {
            assert!(lines[0].contains(field), "{field} missing: {}", lines[0]);
        }
    }
}

/// The Python agent instantiates 14 core modules (the interpreter and the
/// libraries it links at start), the JavaScript one 4. A tenant allowed 8
/// gets the JavaScript agent and is refused the Python one at upload, with
/// the numbers and the setting to raise; nothing is stored.
#[tokio::test]
async fn an_agent_needing_more_instances_than_its_tenant_allows_is_refused_at_upload() {
    let mut tight = AgentPolicy::default();
    tight.limits.instances = Some(8);
    // The tests' compile cache, so that a compile here shares what others
    // compiled (see `subs_tests::host`).
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compiled-components");
    let config = HostConfig {
        tenants: HashMap::from([("acme".to_owned(), tight)]),
        compile_cache: Some(cache),
        ..HostConfig::default()
    };
    let host = ComponentHost::with_config(config).unwrap();
    let key = "subs_acme_key_0000000000000000000000";
    let s = Server::builder().host(host).keys(&[("acme", key)]).start().await;

    let (status, refused) = s.upload("tools-py", guests::TOOLS_PY, Some(key)).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_component")));
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("14 core instances (its limit is 8, setting `instances`)"), "{error}");
    assert!(error.contains("[tenants.<tenant>.sandbox]"), "says where the setting is: {error}");
    let (status, _) = s.call(reqwest::Method::GET, "/v1/agents/tools-py", Some(key), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "nothing was stored");

    let (status, uploaded) = s.upload("tools-js", guests::TOOLS_JS, Some(key)).await;
    assert_eq!(status, StatusCode::CREATED, "4 core instances fit: {uploaded}");
}

/// An exception escaping a Python agent's `decide` fails the delivery
/// once (it is a bug: delivering the same request again would raise
/// again), although the engine's default retry policy allows two more;
/// the turn fails with the traceback's last line, and the whole
/// traceback is in the logs.
#[tokio::test]
async fn a_python_exception_fails_its_delivery_once_with_the_tracebacks_last_line() {
    crate::providers::captured_logs();
    let t = TestEngine::start().await;
    // Bound to its name, so that what it prints is tagged with it.
    let agent = subs_tests::agent(guests::TEST_PY_FAULTY).for_agent(TENANT, "faulty-py", &AgentPolicy::default());
    t.engine.register_agent(TENANT, "faulty-py", std::sync::Arc::new(agent.unwrap()));

    let turn = t.chat("divides", "faulty-py", "please divide by zero").await;
    assert_eq!(turn.status, TurnStatus::Failed, "{turn:?}");
    let data = turn.data.unwrap_or(Value::Null);
    let error = data["error"].as_str().unwrap_or_default();
    assert!(error.contains("ZeroDivisionError: division by zero"), "{data}");

    let steps = t.store.steps(&SessionKey::new(TENANT, "divides"), 0, usize::MAX).await.unwrap();
    let failed: Vec<_> = steps.iter().map(|(_, s)| s).filter(|s| s.status == StepStatus::Failed).collect();
    assert_eq!(failed.len(), 1, "{steps:#?}");
    assert_eq!(failed[0].attempts, 1, "delivered exactly once: {:#?}", failed[0]);
    assert!(failed[0].error.as_deref().unwrap_or_default().contains("ZeroDivisionError: division by zero"));
    let events = t.engine.reads().events(TENANT, "divides", None, 1000).await.unwrap();
    let ended = events.iter().find(|e| e.name == "turn.failed").expect("a turn.failed event");
    assert!(ended.data["error"].as_str().unwrap().contains("ZeroDivisionError: division by zero"), "{ended:?}");

    // Its stdout and its traceback (on stderr) are logged.
    assert_eq!(logged("faulty-py", "faulty agent deciding client.messages").len(), 1);
    assert!(!logged("faulty-py", "Traceback (most recent call last)").is_empty());
    let frames = logged("faulty-py", "faulty_agent.py");
    assert!(frames.iter().any(|l| l.contains("in decide")), "the traceback names the function: {frames:#?}");

    // The session goes on: the next turn is decided as usual.
    let turn = t.chat("divides", "faulty-py", "hello").await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
}

/// With `baseline_first`, as `subs serve` runs: the first upload of a large
/// agent (the JavaScript one carries SpiderMonkey) is accepted on baseline
/// code, decides on it, and moves to optimized code compiled in the
/// background, every binding of the upload with it; only the optimized
/// code is kept, so a restarted host loads it and compiles nothing. A
/// small agent is compiled optimized at once. The tenant's compiled-code
/// quota counts the optimized code once it is in place.
#[tokio::test]
async fn a_large_first_upload_runs_on_baseline_code_until_its_optimized_code_replaces_it() {
    let cache = tempfile::tempdir().unwrap();
    let config =
        HostConfig { compile_cache: Some(cache.path().to_owned()), baseline_first: true, ..HostConfig::default() };
    let host = ComponentHost::with_config(config.clone()).unwrap();
    let load = |host: &ComponentHost, path: &str| {
        let (host, bytes) = (host.clone(), std::fs::read(path).unwrap());
        tokio::task::spawn_blocking(move || host.load(&bytes).unwrap())
    };
    let agent = load(&host, guests::TOOLS_JS).await.unwrap();
    assert!(!agent.optimized(), "accepted on baseline code");
    let baseline_bytes = agent.compiled_bytes();
    // Named apart from the other tests' agents, whose log lines they count.
    let bound = agent.for_agent("acme", "tools-js-tiered", &AgentPolicy::default()).unwrap();
    let sum = DecisionResponse::new().with_action(Action::tool_result(serde_json::json!({"sum": 3})));
    assert_eq!(add(&bound).await, sum, "baseline code decides");

    subs_tests::wait::eventually(Duration::from_secs(300), "the optimized code in place", || async {
        agent.optimized()
    })
    .await;
    assert!(bound.optimized(), "a binding made before moves with its upload");
    assert_eq!(add(&bound).await, sum, "optimized code decides the same");
    assert_eq!(host.compilations(), 1, "one optimizing compile");
    let optimized_bytes = agent.compiled_bytes();
    assert!(optimized_bytes < baseline_bytes, "{optimized_bytes} optimized against {baseline_bytes} baseline bytes");

    let restarted = ComponentHost::with_config(config.clone()).unwrap();
    let again = load(&restarted, guests::TOOLS_JS).await.unwrap();
    assert!(again.optimized(), "the cache holds the optimized code");
    assert_eq!(restarted.compilations(), 0, "and nothing else");

    let small = load(&host, guests::TOOLS).await.unwrap();
    assert!(small.optimized(), "a small agent is compiled optimized at once");

    // The tenant's quota counts what its agents hold now: the baseline
    // code at upload, then the optimized code in its place.
    let dir = tempfile::tempdir().unwrap();
    let fresh = HostConfig { compile_cache: Some(dir.path().join("compiled")), ..config };
    let store = std::sync::Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let engine = subs_engine::Engine::start(store, subs_engine::model::Models::with_offline(), Default::default())
        .await
        .unwrap();
    let agents = AgentRegistry::new(engine, ComponentHost::with_config(fresh).unwrap(), dir.path().join("agents"));
    let limits = |max_compiled_bytes| subs_engine::agents::AgentLimits {
        max_compiled_bytes,
        ..subs_engine::agents::AgentLimits::default()
    };
    let put = |id: &'static str, path: &str, limit: u64| {
        let bytes = std::fs::read(path).unwrap();
        let agents = &agents;
        async move { agents.put_component("quota", id, bytes, &limits(limit), true).await.map(|_| ()) }
    };
    put("js", guests::TOOLS_JS, baseline_bytes).await.expect("the JavaScript agent fits alone");
    // Room for the small agent beside the optimized code only.
    let limit = optimized_bytes + small.compiled_bytes();
    let refused = put("rs", guests::TOOLS, limit).await.unwrap_err();
    assert!(matches!(refused, AgentError::CompiledQuota { .. }), "beside baseline code: {refused}");
    subs_tests::wait::eventually(Duration::from_secs(300), "the small agent fits beside optimized code", || async {
        let put = put("rs", guests::TOOLS, limit).await;
        assert!(!matches!(&put, Err(e) if !matches!(e, AgentError::CompiledQuota { .. })), "{put:?}");
        put
    })
    .await;
}

/// `agent`'s decision on a `tool.execute` of `add` with 1 and 2.
async fn add(agent: &ComponentAgent) -> DecisionResponse {
    let request = subs_tests::tool_execute("add", serde_json::json!({"a": 1, "b": 2}));
    agent.decide(Delivery::new(request)).await.unwrap()
}
