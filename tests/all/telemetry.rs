//! Spans that outlive the process that started them: a turn waiting for
//! a client tool survives a crash, and the engine that finishes it sends
//! the turn's span and the tool call's with the ids and start times the
//! first engine stored.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanProcessor};
use serde_json::json;
use subs_engine::store::{SessionStatus, TurnStatus};
use subs_protocol::client::{ClientMessages, ToolResult};
use subs_protocol::{AgentTool, ClientContext, ClientInput, DraftMessage, ToolHandler};
use subs_tests::TENANT;

/// A span processor that keeps every span it is given.
#[derive(Debug, Default, Clone)]
struct Kept(Arc<Mutex<Vec<SpanData>>>);

impl SpanProcessor for Kept {
    fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        self.0.lock().unwrap().push(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

impl Kept {
    fn named(&self, name: &str) -> Vec<SpanData> {
        self.0.lock().unwrap().iter().filter(|s| s.name == name).cloned().collect()
    }
}

async fn engine_on(path: &std::path::Path, kept: &Kept) -> (subs_engine::Engine, Arc<subs_store_redb::RedbStore>) {
    let store = Arc::new(subs_store_redb::RedbStore::open(path).expect("the store opens"));
    let config = subs_engine::EngineConfig { spans: Some(Arc::new(kept.clone())), ..subs_tests::test_config() };
    let models = subs_engine::model::Models::with_offline();
    let engine = subs_tests::start_engine_with(store.clone(), models, config).await;
    (engine, store)
}

#[tokio::test]
async fn a_turn_waiting_for_a_client_survives_a_crash_and_its_spans_keep_their_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("subs.redb");
    let before = Kept::default();
    let (engine, store) = engine_on(&path, &before).await;

    let confirm = AgentTool::new("confirm")
        .description("Asks the user to confirm.")
        .input(json!({"type": "object", "properties": {"ok": {"type": "boolean"}}}))
        .handler(ToolHandler::Client);
    let input = ClientInput::ClientMessages(ClientMessages {
        agent_id: "tools".to_owned(),
        turn_id: Some("turn-1".to_owned()),
        messages: vec![DraftMessage::user(r#"use tool confirm with {"ok": true}"#)],
        stream: None,
        client: Some(ClientContext { tools: Some(vec![confirm]), ..ClientContext::default() }),
    });
    let started = SystemTime::now();
    engine.sessions().input(TENANT, "client", input, Default::default()).await.unwrap();
    let call_id = subs_tests::wait::eventually(Duration::from_secs(20), "the session waits for the client", || async {
        let snapshot = engine.reads().snapshot(TENANT, "client").await.unwrap().unwrap();
        // A decision's span is exported once its step is committed, so
        // just after the status that step wrote is readable.
        let ended = before.named("decision llm.finished").len() == 1;
        (snapshot.record.status == SessionStatus::Waiting && ended).then(|| {
            let waiting = snapshot.calls.iter().find(|c| c.call.handler == Some(subs_protocol::Handler::Client));
            waiting.expect("the client tool's call").call.id.clone()
        })
    })
    .await;
    // Until the turn ends, only its decisions have been sent.
    assert!(before.named("invoke_agent tools").is_empty());
    assert!(before.named("execute_tool confirm").is_empty());
    let decided = before.named("decision llm.finished");
    assert_eq!(decided.len(), 1, "{:?}", before.0.lock().unwrap());
    let trace_id = decided[0].span_context.trace_id();

    // The engine dies; another, on the same store, takes the answer.
    let crashed = SystemTime::now();
    engine.kill().await;
    store.close().await.unwrap();
    drop(store);
    let after = Kept::default();
    let (engine, _store) = engine_on(&path, &after).await;
    let result = ClientInput::ToolResult(ToolResult { id: call_id, attempt: None, result: Some(json!({"ok": true})) });
    engine.sessions().input(TENANT, "client", result, Default::default()).await.unwrap();
    let turn = tokio::time::timeout(Duration::from_secs(30), engine.reads().wait_turn(TENANT, "client", "turn-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn.status, TurnStatus::Done);
    // The turn's span is exported after the turn's last step is committed,
    // so it can arrive a little after the turn reads as done.
    subs_tests::wait::eventually(Duration::from_secs(20), "the turn's span", || async {
        !after.named("invoke_agent tools").is_empty()
    })
    .await;

    // The turn's span is the one the first engine started: same trace,
    // and its start is from before the crash.
    let [turn_span] = &after.named("invoke_agent tools")[..] else { panic!("{:?}", after.0.lock().unwrap()) };
    assert_eq!(turn_span.span_context.trace_id(), trace_id);
    assert_eq!(decided[0].parent_span_id, turn_span.span_context.span_id());
    // (Stored in milliseconds: the turn started within one of the input.)
    assert!(turn_span.start_time + Duration::from_millis(1) >= started, "{turn_span:?}");
    assert!(turn_span.start_time <= decided[0].start_time, "{turn_span:?}");
    // The client tool's span: started by the decision before the crash,
    // ended by the answer after it, with the GenAI attributes.
    let [tool] = &after.named("execute_tool confirm")[..] else { panic!("{:?}", after.0.lock().unwrap()) };
    assert_eq!(tool.parent_span_id, decided[0].span_context.span_id());
    assert_eq!(tool.span_context.trace_id(), trace_id);
    // (Its start is stored in milliseconds, and taken as the decision's
    // actions are applied, after the decision's own span has ended.)
    assert!(tool.start_time <= tool.end_time && tool.start_time <= crashed, "{tool:?}");
    assert!(tool.start_time + Duration::from_millis(1) >= decided[0].start_time, "{tool:?}");
    let handler = tool.attributes.iter().find(|kv| kv.key.as_str() == "subs.tool.handler").unwrap();
    assert_eq!(handler.value.as_str(), "client");
    // The decisions after the crash are in the same trace, under the turn.
    let finished = after.named("decision tool.finished");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].parent_span_id, turn_span.span_context.span_id());
}

/// A streamed LLM call's first delta is timed; every call is, by model.
#[tokio::test]
async fn streamed_calls_are_timed_to_their_first_token() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let config = subs_engine::EngineConfig { default_stream: true, ..subs_tests::test_config() };
    let engine = subs_tests::start_engine_with(store, subs_engine::model::Models::with_offline(), config).await;
    let input = subs_tests::user_input("tools", Some("t1"), r#"use tool add with {"a": 1, "b": 2}"#);
    engine.sessions().input(TENANT, "streamed", input, Default::default()).await.unwrap();
    let turn = engine.reads().wait_turn(TENANT, "streamed", "t1").await.unwrap();
    assert_eq!(turn.status, TurnStatus::Done);
    let mut text = String::new();
    engine.admin().encode_metrics(&mut text);
    for line in [
        "subs_llm_time_to_first_token_seconds_count{model=\"subs/offline\"} 2",
        "subs_llm_call_duration_seconds_count{model=\"subs/offline\",outcome=\"ok\"} 2",
        "subs_tool_call_duration_seconds_count{handler=\"worker\",outcome=\"ok\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// The `gen_ai.response.id` of the `chat` spans of a session's calls, once
/// `calls` of them were sent; `None` for a span without one.
async fn reply_ids(kept: &Kept, name: &str, calls: usize) -> Vec<Option<String>> {
    subs_tests::wait::eventually(Duration::from_secs(10), format!("{calls} `{name}` spans"), || async {
        let ids: Vec<Option<String>> = kept
            .named(name)
            .iter()
            .map(|span| {
                let id = span.attributes.iter().find(|kv| kv.key.as_str() == "gen_ai.response.id");
                id.map(|kv| kv.value.to_string())
            })
            .collect();
        if ids.len() == calls { Ok(ids) } else { Err(format!("{ids:?}")) }
    })
    .await
}

/// An engine-run call's `chat` span carries the provider's id of the reply
/// (`gen_ai.response.id`): OpenAI's top-level `id`, Anthropic's message
/// `id`, whether the reply was streamed or not. The offline model has no
/// such id, and its spans carry none.
#[tokio::test]
async fn chat_spans_carry_the_providers_id_of_the_reply() {
    use subs_engine::model::{ProviderConfig, ProvidersConfig, models_from_config};
    use subs_fake_provider::{FakeProvider, Reply};
    use subs_protocol::LlmFormat;

    let cases = [
        (LlmFormat::Openai, false, "chatcmpl-fake"),
        (LlmFormat::Openai, true, "chatcmpl-fake"),
        (LlmFormat::Anthropic, false, "msg_fake"),
        (LlmFormat::Anthropic, true, "msg_fake"),
    ];
    for (format, stream, id) in cases {
        let fake = FakeProvider::start().await;
        fake.push(Reply::text("Hello."));
        let base_url = match format {
            LlmFormat::Openai => fake.openai_base_url(),
            LlmFormat::Anthropic => fake.base_url(),
        };
        let providers = ProvidersConfig {
            providers: vec![ProviderConfig {
                name: "fake".into(),
                format: Some(format),
                base_url: Some(base_url),
                api_key_env: None,
                base_url_env: None,
                max_tokens: None,
            }],
            ..ProvidersConfig::default()
        };
        let models = models_from_config(&providers, &|_| None).expect("the config is valid");
        let kept = Kept::default();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
        let config = subs_engine::EngineConfig {
            spans: Some(Arc::new(kept.clone())),
            default_model: "fake/model".to_owned(),
            default_stream: stream,
            ..subs_tests::test_config()
        };
        let engine = subs_tests::start_engine_with(store, models, config).await;
        let input = subs_tests::user_input("tools", Some("t1"), "hi");
        engine.sessions().input(TENANT, "s", input, Default::default()).await.unwrap();
        let ended = engine.reads().wait_turn(TENANT, "s", "t1").await.unwrap();
        assert_eq!(ended.status, TurnStatus::Done, "{format:?} stream={stream}: {ended:?}");
        let sent: Vec<bool> = fake.requests().iter().map(|r| r.stream()).collect();
        assert_eq!(sent, [stream], "{format:?}");
        assert_eq!(reply_ids(&kept, "chat model", 1).await, [Some(id.to_owned())], "{format:?} stream={stream}");
    }

    let kept = Kept::default();
    let dir = tempfile::tempdir().unwrap();
    let (engine, _store) = engine_on(&dir.path().join("subs.redb"), &kept).await;
    let input = subs_tests::user_input("tools", Some("t1"), "hi");
    engine.sessions().input(TENANT, "offline", input, Default::default()).await.unwrap();
    let ended = engine.reads().wait_turn(TENANT, "offline", "t1").await.unwrap();
    assert_eq!(ended.status, TurnStatus::Done);
    assert_eq!(reply_ids(&kept, "chat offline", 1).await, [None], "the offline model has no reply id");
}
