//! Load: many sessions at once, each running a three-step tool turn (the
//! model calls a tool, the tool runs in the `tools` component, the model
//! answers) against the fake provider answering every call after 50 ms,
//! on a real redb file. Every turn must finish, with the answer its own
//! tool produced; the memory high-water mark of the process is printed.
//!
//! `LOAD_SESSIONS` sets how many sessions (100 by default, so CI stays
//! fast); the full run is `LOAD_SESSIONS=1000 cargo test -p subs-tests
//! --test all load -- --nocapture`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use subs_engine::model::config::{ProviderConfig, ProvidersConfig, models_from_config};
use subs_engine::store::TurnStatus;
use subs_fake_provider::{FakeProvider, Format, Reply, ScriptedCall};
use subs_protocol::LlmFormat;
use subs_tests::{agent, guests};

const LATENCY: Duration = Duration::from_millis(50);

/// Answers by the request: a call of `add` on the two numbers of the
/// user's message when it is the last, else a sentence quoting the tool's
/// result. The call id is derived from the message, so every session's
/// call is its own.
fn respond(body: &Value, _format: Format) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    let text = |m: &Value| match &m["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if last["role"] == "user" {
        let words = text(&last);
        let numbers: Vec<&str> = words.split(' ').filter(|w| w.parse::<u64>().is_ok()).collect();
        let arguments = format!("{{\"a\":{},\"b\":{}}}", numbers[0], numbers[1]);
        let id = format!("call_{}_{}", numbers[0], numbers[1]);
        return Reply::tool_calls(vec![ScriptedCall::new(&id, "add", &[&arguments])]).with_latency(LATENCY);
    }
    Reply::text(&format!("The sum is {}.", text(&last))).with_latency(LATENCY)
}

/// A field of `/proc/self/status` in KiB (`VmHWM`, `VmRSS`); `None` off
/// Linux.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_run_tool_turns_at_once_and_none_is_lost() {
    let sessions: usize = std::env::var("LOAD_SESSIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(100);
    let fake = FakeProvider::start().await;
    fake.respond_with(respond);
    let providers = ProvidersConfig {
        providers: vec![ProviderConfig {
            name: "fake".into(),
            format: Some(LlmFormat::Openai),
            base_url: Some(fake.openai_base_url()),
            api_key_env: None,
            base_url_env: None,
            max_tokens: None,
        }],
        ..ProvidersConfig::default()
    };
    let models = models_from_config(&providers, &|_| None).expect("the config is valid");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let config = subs_engine::EngineConfig { default_model: "fake/load-model".to_owned(), ..Default::default() };
    let engine = subs_engine::Engine::start(store, models, config).await.unwrap();
    engine.register_agent("load", "tools", Arc::new(agent(guests::TOOLS)));
    let rss_before = status_kib("VmRSS:");

    let started = Instant::now();
    let runs: Vec<_> = (0..sessions)
        .map(|i| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let session = format!("load-{i}");
                let input = subs_tests::user_input("tools", None, format!("add {i} and {}", i * 7 + 1));
                let accepted =
                    engine.sessions().input("load", &session, input, Default::default()).await.expect("accepted");
                let turn = accepted.turn_id.expect("a turn");
                let record = engine.reads().wait_turn("load", &session, &turn).await.expect("the store answers");
                (i, session, record)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for run in runs {
        let (i, session, record) = tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("every turn ends within two minutes")
            .expect("the session task does not panic");
        if record.status != TurnStatus::Done {
            failures.push(format!("{session}: {record:?}"));
            continue;
        }
        let snapshot = engine.reads().snapshot("load", &session).await.unwrap().expect("the session exists");
        let texts: Vec<String> = snapshot.messages.iter().map(|m| m.text()).collect();
        let expected = format!("The sum is {{\"sum\":{}}}.", i + i * 7 + 1);
        if snapshot.messages.len() != 4 || texts[3] != expected {
            failures.push(format!("{session}: expected user, call, result, `{expected}`: {texts:?}"));
        }
    }
    let elapsed = started.elapsed();
    let hwm = status_kib("VmHWM:");
    println!(
        "load: {sessions} sessions × 3-step tool turn, {} ms provider latency: {:.2?}, {} failed, \
         {} provider calls; VmRSS before {} MiB, VmHWM {} MiB",
        LATENCY.as_millis(),
        elapsed,
        failures.len(),
        fake.requests().len(),
        rss_before.map_or("?".to_owned(), |k| (k >> 10).to_string()),
        hwm.map_or("?".to_owned(), |k| (k >> 10).to_string()),
    );
    assert!(failures.is_empty(), "{} of {sessions} turns went wrong: {failures:#?}", failures.len());
    assert_eq!(fake.requests().len(), 2 * sessions, "two model calls per turn, none repeated");
}
