//! The HTTP providers against the fake provider server, in both wire
//! formats: text, streaming, tool calls, reasoning, usage and cost, every
//! injected fault, keys kept out of logs; and whole engine turns on a
//! `fake/…` model.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use subs_engine::model::{
    Completion, ModelError, Models, Money, Price, ProviderConfig, ProvidersConfig, models_from_config,
};
use subs_engine::store::TurnStatus;
use subs_engine::worker::DeltaSink;
use subs_fake_provider::{FakeProvider, Fault, Recorded, Reply, ScriptedCall};
use subs_protocol::{
    DraftMessage, ErrorCode, LlmFormat, LlmRequest, LlmTool, ReasoningConfig, ReasoningEffort, StreamDelta, ToolCall,
};
use subs_tests::TENANT;

/// The key the fake provider is configured with; it must reach the server
/// and nothing else.
const KEY: &str = "sk-fake-secret-0123456789";

fn config(fake: &FakeProvider, format: LlmFormat) -> ProvidersConfig {
    let base_url = match format {
        LlmFormat::Openai => fake.openai_base_url(),
        LlmFormat::Anthropic => fake.base_url(),
    };
    ProvidersConfig {
        providers: vec![ProviderConfig {
            name: "fake".into(),
            format: Some(format),
            base_url: Some(base_url),
            api_key_env: Some("FAKE_API_KEY".into()),
            base_url_env: None,
            max_tokens: Some(512),
        }],
        prices: [("fake/model".to_owned(), Price::per_million("1", "2"))].into_iter().collect(),
        ..ProvidersConfig::default()
    }
}

fn env(key: &str) -> Option<String> {
    (key == "FAKE_API_KEY").then(|| KEY.to_owned())
}

fn models(fake: &FakeProvider, format: LlmFormat) -> Models {
    models_from_config(&config(fake, format), &env).expect("the config is valid")
}

fn request(text: &str) -> LlmRequest {
    LlmRequest {
        model: "fake/model".into(),
        messages: vec![DraftMessage::system("be brief"), DraftMessage::user(text)].into(),
        tools: Some(vec![LlmTool {
            name: "search".into(),
            description: "Searches.".into(),
            input: Some(json!({"type": "object", "properties": {"q": {"type": "string"}}}).into()),
            output: None,
        }]),
        temperature: Some(0.0),
        max_completion_tokens: None,
        reasoning: None,
    }
}

/// Runs one call, streaming when `stream`; returns the outcome and the
/// deltas, each with the instant it arrived.
async fn run(models: &Models, req: LlmRequest, stream: bool) -> (Result<Completion, ModelError>, Vec<StreamDelta>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let into = Arc::clone(&seen);
    let sink: DeltaSink = Arc::new(move |d| {
        into.lock().unwrap().push(d);
        Ok(())
    });
    let result = models.complete(req, stream.then_some(sink)).await;
    let deltas = seen.lock().unwrap().clone();
    (result, deltas)
}

fn the_request(fake: &FakeProvider) -> Recorded {
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    requests.into_iter().next().unwrap()
}

/// The id the fake provider gives its replies in `format`, as the real
/// services do theirs (`chatcmpl-…`, `msg_…`).
fn fake_id(format: LlmFormat) -> &'static str {
    match format {
        LlmFormat::Openai => "chatcmpl-fake",
        LlmFormat::Anthropic => "msg_fake",
    }
}

/// Index of the stream event carrying text piece `n` of a plain text reply
/// (for [`Reply::with_hold_after`]).
fn text_event(format: LlmFormat, n: usize) -> usize {
    match format {
        // role chunk, then one chunk per piece.
        LlmFormat::Openai => 1 + n,
        // message_start, ping, content_block_start, then the pieces.
        LlmFormat::Anthropic => 3 + n,
    }
}

/// Joins streamed tool-call pieces per id, in first-seen order.
fn rebuild_calls(deltas: &[StreamDelta]) -> Vec<ToolCall> {
    let mut order: Vec<String> = Vec::new();
    let mut calls: HashMap<String, (String, String)> = HashMap::new();
    for piece in deltas.iter().flat_map(|d| d.tool_calls.iter().flatten()) {
        let entry = calls.entry(piece.id.clone()).or_insert_with(|| {
            order.push(piece.id.clone());
            (String::new(), String::new())
        });
        if let Some(name) = &piece.name {
            assert!(entry.0.is_empty(), "the name comes once");
            entry.0.clone_from(name);
        }
        entry.1.push_str(piece.arguments.as_deref().unwrap_or_default());
    }
    order.iter().map(|id| ToolCall::function(id, &calls[id].0, &calls[id].1)).collect()
}

async fn text_turn(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello there.").with_usage(1000, 500));
    let (result, _) = run(&models(&fake, format), request("hi"), false).await;
    let Completion { response, id } = result.unwrap();
    assert_eq!(id.as_deref(), Some(fake_id(format)), "the provider's id of the reply");
    assert_eq!(response.content.as_deref(), Some("Hello there."));
    assert_eq!(response.finish_reason.as_deref(), Some("stop"));
    assert_eq!(response.tool_calls, None);
    assert_eq!(response.model, "fake/model");
    // 1000 × $1/M + 500 × $2/M.
    assert_eq!(response.cost.as_deref(), Some("0.002"));

    let sent = the_request(&fake);
    assert!(!sent.stream());
    assert_eq!(sent.body["model"], "model");
    match format {
        LlmFormat::Openai => {
            assert_eq!(sent.path, "/v1/chat/completions");
            assert_eq!(sent.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
            assert_eq!(
                response.usage,
                Some(json!({"prompt_tokens": 1000, "completion_tokens": 500, "total_tokens": 1500}))
            );
            assert_eq!(sent.body["messages"][0], json!({"role": "system", "content": "be brief"}));
            assert_eq!(sent.body["tools"][0]["function"]["name"], "search");
            assert_eq!(sent.body["temperature"], 0.0);
        }
        LlmFormat::Anthropic => {
            assert_eq!(sent.path, "/v1/messages");
            assert_eq!(sent.header("x-api-key"), Some(KEY));
            assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
            assert_eq!(sent.header("authorization"), None);
            assert_eq!(response.usage, Some(json!({"input_tokens": 1000, "output_tokens": 500})));
            assert_eq!(sent.body["system"], "be brief");
            assert_eq!(sent.body["max_tokens"], 512);
            assert_eq!(sent.body["tools"][0]["input_schema"]["properties"]["q"]["type"], "string");
        }
    }
}

async fn streamed_text_arrives_in_order_before_the_call_settles(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("one two three").with_usage(7, 3).with_hold_after(text_event(format, 2)));
    let models = models(&fake, format);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let sink: DeltaSink = Arc::new(move |d| {
        let _ = tx.send((Instant::now(), d));
        Ok(())
    });
    let call = tokio::spawn(async move {
        let result = models.complete(request("count"), Some(sink)).await;
        (Instant::now(), result)
    });
    // The server holds the stream after two pieces: they must be here while
    // the call is still running.
    let (_, first) = rx.recv().await.unwrap();
    let (_, second) = rx.recv().await.unwrap();
    assert_eq!((first.text.as_deref(), second.text.as_deref()), (Some("one "), Some("two ")));
    tokio::task::yield_now().await;
    assert!(!call.is_finished(), "the call settled before its stream ended");
    fake.release();
    let (settled, result) = call.await.unwrap();
    let Completion { response, id } = result.unwrap();
    // OpenAI repeats it in every chunk, Anthropic sends it in `message_start`.
    assert_eq!(id.as_deref(), Some(fake_id(format)), "the provider's id of the streamed reply");
    let mut rest = Vec::new();
    while let Ok(item) = rx.try_recv() {
        rest.push(item);
    }
    assert!(rest.iter().all(|(at, _)| *at <= settled));
    let texts: Vec<&str> = rest.iter().filter_map(|(_, d)| d.text.as_deref()).collect();
    assert_eq!(texts, ["three"]);
    assert_eq!(rest.last().unwrap().1, StreamDelta { finish_reason: Some("stop".into()), ..StreamDelta::default() });
    assert_eq!(response.content.as_deref(), Some("one two three"));
    assert_eq!(response.cost.as_deref(), Some("0.000013"));

    let sent = the_request(&fake);
    assert!(sent.stream());
    if format == LlmFormat::Openai {
        assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
        // Usage came in the last, choice-less chunk.
        assert_eq!(response.usage.unwrap()["prompt_tokens"], 7);
    } else {
        assert_eq!(response.usage, Some(json!({"input_tokens": 7, "output_tokens": 3})));
    }
}

/// Arguments with a quote, a backslash and non-ASCII text, cut inside the
/// string, between a backslash and what it escapes, and inside `ü`'s word.
const AWKWARD: [&str; 6] = [r#"{"q": "say \"#, r#""hi\"#, r#"" \\"#, r#" ü"#, r#"nï", "n""#, ": 1}"];

async fn one_streamed_tool_call(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![ScriptedCall::new("call_a", "search", &AWKWARD)]).with_byte_chunks(3));
    let (result, deltas) = run(&models(&fake, format), request("find"), true).await;
    let response = result.unwrap().response;
    let expected = ToolCall::function("call_a", "search", AWKWARD.concat());
    assert_eq!(response.tool_calls, Some(vec![expected.clone()]));
    assert_eq!(
        serde_json::from_str::<Value>(&expected.function.arguments).unwrap(),
        json!({"q": "say \"hi\" \\ ünï", "n": 1})
    );
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.content, None);
    assert_eq!(rebuild_calls(&deltas), [expected]);
    assert_eq!(deltas.last().unwrap().finish_reason.as_deref(), Some("tool_calls"));
}

async fn two_parallel_tool_calls(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    let calls = vec![
        ScriptedCall::split_every("call_1", "search", r#"{"q":"ünïcödé 😀"}"#, 2),
        ScriptedCall::new("call_2", "search", &[r#"{"q""#, r#":"b"}"#]),
    ];
    // Some OpenAI-compatible servers say `stop` after calling tools.
    let stop = match format {
        LlmFormat::Openai => "stop",
        LlmFormat::Anthropic => "end_turn",
    };
    fake.push(Reply { tool_calls: calls, ..Reply::text("Looking. ") }.with_finish_reason(stop).with_byte_chunks(5));
    let (result, deltas) = run(&models(&fake, format), request("find both"), true).await;
    let response = result.unwrap().response;
    let expected = vec![
        ToolCall::function("call_1", "search", r#"{"q":"ünïcödé 😀"}"#),
        ToolCall::function("call_2", "search", r#"{"q":"b"}"#),
    ];
    assert_eq!(response.tool_calls.as_ref(), Some(&expected));
    assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.content.as_deref(), Some("Looking. "));
    assert_eq!(rebuild_calls(&deltas), expected);
    // Text first, then the calls.
    let first_call = deltas.iter().position(|d| d.tool_calls.is_some()).unwrap();
    assert!(deltas[..first_call].iter().all(|d| d.tool_calls.is_none()));
    assert!(deltas[first_call..].iter().all(|d| d.text.is_none()));
}

async fn tool_calls_without_streaming(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![
        ScriptedCall::new("c1", "search", &[r#"{"q":"a"}"#]),
        ScriptedCall::new("c2", "search", &[r#"{"q":"b"}"#]),
    ]));
    let (result, _) = run(&models(&fake, format), request("find"), false).await;
    let calls = result.unwrap().response.tool_calls.unwrap();
    assert_eq!(
        calls.iter().map(|c| (c.id.as_str(), c.kind.as_str())).collect::<Vec<_>>(),
        [("c1", "function"), ("c2", "function")]
    );
    let args: Vec<Value> = calls.iter().map(|c| serde_json::from_str(&c.function.arguments).unwrap()).collect();
    assert_eq!(args, [json!({"q": "a"}), json!({"q": "b"})]);
}

async fn reasoning_streams_as_reasoning_deltas(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("42").with_reasoning(&["Let me ", "think."]));
    fake.push(Reply::text("42").with_reasoning(&["hidden"]).with_reasoning_key("reasoning"));
    let models = models(&fake, format);
    let mut req = request("meaning?");
    req.reasoning = Some(ReasoningConfig { effort: Some(ReasoningEffort::High), ..ReasoningConfig::default() });
    let (result, deltas) = run(&models, req.clone(), true).await;
    assert_eq!(result.unwrap().response.content.as_deref(), Some("42"));
    let reasoning: Vec<&str> = deltas.iter().filter_map(|d| d.reasoning.as_deref()).collect();
    assert_eq!(reasoning, ["Let me ", "think."]);
    let first_text = deltas.iter().position(|d| d.text.is_some()).unwrap();
    assert!(deltas[..first_text].iter().all(|d| d.reasoning.is_some()), "{deltas:?}");
    let sent = &fake.requests()[0];
    match format {
        LlmFormat::Openai => assert_eq!(sent.body["reasoning_effort"], "high"),
        LlmFormat::Anthropic => {
            assert_eq!(sent.body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
            assert_eq!(sent.body["max_tokens"], 16384 + 512);
        }
    }

    // `exclude` keeps the reasoning out of the stream (and OpenAI's
    // `delta.reasoning` is read like `reasoning_content`).
    req.reasoning = Some(ReasoningConfig { exclude: Some(true), ..ReasoningConfig::default() });
    let (result, deltas) = run(&models, req, true).await;
    assert_eq!(result.unwrap().response.content.as_deref(), Some("42"));
    assert!(deltas.iter().all(|d| d.reasoning.is_none()), "{deltas:?}");
}

async fn unknown_models_have_no_cost(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("hi"));
    let mut req = request("hi");
    req.model = "fake/unpriced".into();
    let response = run(&models(&fake, format), req, true).await.0.unwrap().response;
    assert_eq!(response.cost, None);
    assert!(response.usage.is_some());
    assert_eq!(response.model, "fake/unpriced");
}

/// The error of a call answered by `reply`, streamed or not.
async fn failure(format: LlmFormat, reply: Reply, stream: bool) -> ModelError {
    let fake = FakeProvider::start().await;
    fake.push(reply);
    let (result, _) = run(&models(&fake, format), request("hi"), stream).await;
    result.expect_err("the call fails")
}

async fn error_statuses_map_to_codes(format: LlmFormat) {
    for stream in [false, true] {
        let e = failure(format, Reply::fault(Fault::rate_limited("7")), stream).await;
        assert_eq!((e.code, e.retryable, e.retry_after), (ErrorCode::RateLimited, true, Some(Duration::from_secs(7))));
        assert!(e.message.contains("Rate limit reached"), "{e}");

        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let e = failure(format, Reply::fault(Fault::rate_limited(&date)), stream).await;
        let wait = e.retry_after.unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120), "{wait:?}");

        let e = failure(format, Reply::fault(Fault::rate_limited_ms(250)), stream).await;
        assert_eq!((e.code, e.retry_after), (ErrorCode::RateLimited, Some(Duration::from_millis(250))));

        let e = failure(format, Reply::fault(Fault::overloaded()), stream).await;
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.contains("529") && e.message.contains("Overloaded"), "{e}");

        let e = failure(format, Reply::fault(Fault::status(503, "try later")), stream).await;
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));

        let e = failure(format, Reply::fault(Fault::status(400, "messages: roles must alternate")), stream).await;
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false));
        assert!(e.message.contains("400") && e.message.contains("messages: roles must alternate"), "{e}");
        assert!(e.detail.is_some());
    }
}

async fn stream_faults_fail_the_call_retryably(format: LlmFormat) {
    let reply = || Reply::text("a b c d e f");
    let e = failure(format, reply().with_fault(Fault::ErrorEvent { after: text_event(format, 2) }), true).await;
    assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
    let said = match format {
        LlmFormat::Openai => "The server had an error",
        LlmFormat::Anthropic => "Overloaded",
    };
    assert!(e.message.contains(said), "{e}");

    let e = failure(format, reply().with_fault(Fault::Drop { after: text_event(format, 3) }), true).await;
    assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true), "{e}");

    let e = failure(format, reply().with_fault(Fault::Truncate { after: text_event(format, 3) }), true).await;
    assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
    let end = match format {
        LlmFormat::Openai => "[DONE]",
        LlmFormat::Anthropic => "message_stop",
    };
    assert!(e.message.contains(end), "{e}");

    let e = failure(format, reply().with_fault(Fault::Malformed { after: text_event(format, 1) }), true).await;
    assert_eq!(e.code, ErrorCode::ProviderError);
    assert!(e.message.contains("not JSON"), "{e}");

    // The same faults on a non-streamed call.
    for fault in [Fault::Drop { after: 0 }, Fault::Truncate { after: 0 }, Fault::Malformed { after: 0 }] {
        let e = failure(format, reply().with_fault(fault.clone()), false).await;
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true), "{fault:?}: {e}");
    }
    let e = failure(format, reply().with_fault(Fault::ErrorEvent { after: 0 }), false).await;
    assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
}

async fn refusals_are_refused(format: LlmFormat) {
    for stream in [false, true] {
        let e = failure(format, Reply::refusal("I can't help with that."), stream).await;
        assert_eq!((e.code, e.retryable), (ErrorCode::Refused, false), "{e}");
        if format == LlmFormat::Openai {
            assert!(e.message.contains("I can't help with that."), "{e}");
            let e = failure(format, Reply::text("…").with_finish_reason("content_filter"), stream).await;
            assert_eq!(e.code, ErrorCode::Refused);
        }
    }
}

async fn silence_is_a_deadline_and_no_server_a_provider_error(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("late").with_latency(Duration::from_millis(400)));
    fake.push(Reply::text("a b c").with_chunk_delay(Duration::from_millis(400)));
    let mut config = config(&fake, format);
    config.read_timeout_secs = 0.1;
    let models = models_from_config(&config, &env).unwrap();
    for stream in [false, true] {
        let e = run(&models, request("hi"), stream).await.0.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::DeadlineExceeded, true), "{e}");
    }

    drop(fake);
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = gone.local_addr().unwrap().port();
    drop(gone);
    let mut config = config_for_url(format, &format!("http://127.0.0.1:{port}"));
    config.connect_timeout_secs = 2.0;
    let models = models_from_config(&config, &env).unwrap();
    let e = run(&models, request("hi"), false).await.0.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true), "{e}");
    assert!(e.message.starts_with("could not connect to fake"), "{e}");
}

fn config_for_url(format: LlmFormat, url: &str) -> ProvidersConfig {
    let mut config = ProvidersConfig::default();
    config.providers.push(ProviderConfig {
        name: "fake".into(),
        format: Some(format),
        base_url: Some(url.into()),
        api_key_env: None,
        base_url_env: None,
        max_tokens: None,
    });
    config
}

async fn a_missing_key_is_named_when_the_service_wants_one(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::fault(Fault::Status {
        status: 401,
        headers: vec![],
        body: r#"{"error":{"message":"no key"}}"#.into(),
    }));
    let models = models_from_config(&config(&fake, format), &|_| None).unwrap();
    let e = run(&models, request("hi"), false).await.0.unwrap_err();
    assert!(e.message.contains("FAKE_API_KEY is not set"), "{e}");
    let sent = the_request(&fake);
    assert_eq!((sent.header("authorization"), sent.header("x-api-key")), (None, None));
}

/// A `Write` into a shared buffer, for capturing log output.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

/// Everything the provider layer logs in this test binary.
///
/// A global subscriber rather than a thread-local `set_default`: tracing
/// caches each call site's interest process-wide, and a test on another
/// thread registering a call site under no subscriber could silence it for
/// a thread-local one. The filter keeps the rest of the engine quiet, but
/// for what guests print and the sandbox's refusals (`subs::guest`), which
/// `security.rs` and `pyjs.rs` check are logged.
fn model_logs() -> &'static Captured {
    static LOGS: std::sync::OnceLock<Captured> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "subs_core::model=trace,subs_models=trace,subs::guest=info",
            ))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other test installs a global subscriber");
        captured
    })
}

/// Everything logged so far (see [`model_logs`]); the first call starts
/// capturing.
pub(crate) fn captured_logs() -> String {
    String::from_utf8_lossy(&model_logs().0.lock().unwrap()).into_owned()
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn keys_are_sent_but_never_logged(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("ok"));
    fake.push(Reply::fault(Fault::status(401, "bad key")));
    let captured = model_logs();
    let models = models(&fake, format);
    run(&models, request("hi"), true).await.0.unwrap();
    let e = run(&models, request("hi"), false).await.0.unwrap_err();
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("llm_call") && logs.contains("provider=fake") && logs.contains("model=model"), "{logs}");
    assert!(logs.contains("llm call failed"), "{logs}");
    for text in [logs.as_str(), &format!("{models:?}"), &format!("{e:?}"), &format!("{:?}", config(&fake, format))] {
        assert!(!text.contains(KEY), "the key leaked: {text}");
    }
    // It was sent, though.
    let sent = &fake.requests()[0];
    assert!(sent.headers.iter().any(|(_, v)| v.contains(KEY)));
}

macro_rules! in_both_formats {
    ($($test:ident),* $(,)?) => {
        mod openai {
            $(#[tokio::test] async fn $test() { super::$test(subs_protocol::LlmFormat::Openai).await })*
        }
        mod anthropic {
            $(#[tokio::test] async fn $test() { super::$test(subs_protocol::LlmFormat::Anthropic).await })*
        }
    };
}

in_both_formats!(
    text_turn,
    streamed_text_arrives_in_order_before_the_call_settles,
    one_streamed_tool_call,
    two_parallel_tool_calls,
    tool_calls_without_streaming,
    reasoning_streams_as_reasoning_deltas,
    unknown_models_have_no_cost,
    error_statuses_map_to_codes,
    stream_faults_fail_the_call_retryably,
    refusals_are_refused,
    silence_is_a_deadline_and_no_server_a_provider_error,
    a_missing_key_is_named_when_the_service_wants_one,
    keys_are_sent_but_never_logged,
    engine_turn_with_a_tool,
    engine_turn_retries_after_429,
    generated_images_are_recorded_and_sent_back,
);

/// An engine on a fresh store whose default model is `fake/model`, with
/// the `tools` agent.
async fn engine(models: Models) -> (subs_engine::Engine, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let config = subs_engine::EngineConfig { default_model: "fake/model".to_owned(), ..subs_tests::test_config() };
    (subs_tests::start_engine_with(store, models, config).await, dir)
}

async fn turn(engine: &subs_engine::Engine, text: &str) -> subs_engine::store::TurnRecord {
    numbered_turn(engine, "t1", text).await
}

/// Runs one turn of session `s` to its end.
async fn numbered_turn(engine: &subs_engine::Engine, turn_id: &str, text: &str) -> subs_engine::store::TurnRecord {
    engine
        .sessions()
        .input(TENANT, "s", subs_tests::user_input("tools", Some(turn_id), text), Default::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), engine.reads().wait_turn(TENANT, "s", turn_id))
        .await
        .unwrap()
        .unwrap()
}

fn dollars(text: &str) -> Money {
    Money::parse(text).unwrap()
}

/// A spent budget fails the next LLM call with `budget_exceeded` before it
/// is sent; raising the budget makes the session usable again. The
/// tenant's budget does the same over all its sessions.
#[tokio::test]
async fn a_spent_budget_stops_calls_before_they_are_sent() {
    let fake = FakeProvider::start().await;
    // `fake/model` costs $1 per million input tokens: 1,000 cost $0.001.
    fake.push(Reply::text("first").with_usage(1000, 0));
    fake.push(Reply::text("third").with_usage(10, 0));
    let (engine, _dir) = engine(models(&fake, LlmFormat::Openai)).await;

    assert_eq!(numbered_turn(&engine, "t1", "one").await.status, TurnStatus::Done);
    let snapshot = engine.reads().snapshot(TENANT, "s").await.unwrap().unwrap();
    assert_eq!(snapshot.record.cost.as_deref(), Some("0.001"));
    assert_eq!(snapshot.record.usage["prompt_tokens"], 1000, "{}", snapshot.record.usage);

    engine.sessions().set_budget(TENANT, "s", Some(dollars("0.001"))).await.unwrap();
    let refused = numbered_turn(&engine, "t2", "two").await;
    assert_eq!(refused.status, TurnStatus::Failed);
    let failure = refused.data.unwrap();
    assert_eq!(failure["code"], "budget_exceeded", "{failure}");
    assert!(failure["error"].as_str().unwrap().contains("session's budget of $0.001 is spent"), "{failure}");
    assert_eq!(fake.requests().len(), 1, "the refused call was never sent");

    engine.sessions().set_budget(TENANT, "s", Some(dollars("0.01"))).await.unwrap();
    assert_eq!(numbered_turn(&engine, "t3", "three").await.status, TurnStatus::Done);
    let snapshot = engine.reads().snapshot(TENANT, "s").await.unwrap().unwrap();
    assert_eq!(subs_tests::describe(snapshot.messages.last().unwrap()), "assistant: third");
    assert_eq!(snapshot.record.cost.as_deref(), Some("0.00101"));
    assert_eq!(engine.reads().tenant_spent(TENANT).await.unwrap(), dollars("0.00101"));

    engine.admin().set_tenant_budget(TENANT, Some(dollars("0.001")));
    let refused = numbered_turn(&engine, "t4", "four").await;
    let failure = refused.data.unwrap();
    assert_eq!(failure["code"], "budget_exceeded", "{failure}");
    assert!(failure["error"].as_str().unwrap().contains("tenant's budget"), "{failure}");
    assert_eq!(fake.requests().len(), 2);
}

async fn engine_turn_with_a_tool(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::tool_calls(vec![ScriptedCall::new("call_add", "add", &[r#"{"a": 2, "#, r#""b": 3}"#])]));
    fake.push(Reply::text("The sum is 5."));
    let (engine, _dir) = engine(models(&fake, format)).await;
    let record = turn(&engine, "what is 2 + 3?").await;
    assert_eq!(record.status, TurnStatus::Done, "{record:?}");

    let snapshot = engine.reads().snapshot(TENANT, "s").await.unwrap().unwrap();
    let transcript: Vec<String> = snapshot.messages.iter().map(subs_tests::describe).collect();
    // OpenAI carries arguments as the model's own string, Anthropic as a
    // JSON object: compare them without whitespace.
    assert!(transcript.iter().any(|m| m.replace(' ', "").contains("[add{\"a\":2,\"b\":3}]")), "{transcript:?}");
    assert!(
        transcript.iter().any(|m| m.starts_with("tool: {\"sum\":5") && m.contains("(answers call_add)")),
        "{transcript:?}"
    );
    assert_eq!(transcript.last().unwrap(), "assistant: The sum is 5.");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let tools = &requests[0].body["tools"];
    let follow_up = &requests[1].body["messages"];
    match format {
        LlmFormat::Openai => {
            assert!(tools.as_array().unwrap().iter().any(|t| t["function"]["name"] == "add"), "{tools}");
            let last = follow_up.as_array().unwrap().last().unwrap();
            assert_eq!((last["role"].as_str(), last["tool_call_id"].as_str()), (Some("tool"), Some("call_add")));
        }
        LlmFormat::Anthropic => {
            assert!(tools.as_array().unwrap().iter().any(|t| t["name"] == "add"), "{tools}");
            let last = follow_up.as_array().unwrap().last().unwrap();
            assert_eq!(last["role"], "user");
            assert_eq!(last["content"][0]["type"], "tool_result");
            assert_eq!(last["content"][0]["tool_use_id"], "call_add");
            assert!(requests[1].body["system"].as_str().unwrap().contains("add"));
        }
    }
}

async fn engine_turn_retries_after_429(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    fake.push(Reply::fault(Fault::rate_limited_ms(30)));
    fake.push(Reply::text("Hello after waiting."));
    let (engine, _dir) = engine(models(&fake, format)).await;
    let record = turn(&engine, "hi").await;
    assert_eq!(record.status, TurnStatus::Done, "{record:?}");
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(fake.remaining(), 0);
    let snapshot = engine.reads().snapshot(TENANT, "s").await.unwrap().unwrap();
    assert_eq!(subs_tests::describe(snapshot.messages.last().unwrap()), "assistant: Hello after waiting.");
}

/// A reply's generated images (OpenAI: the message's `images`, as
/// OpenRouter sends them; Anthropic: `image` blocks), streamed or not, are
/// recorded as `image_url` parts of the assistant message after its text;
/// the next request sends them back as the format allows. Streamed here;
/// the HTTP worker tests read the same bodies whole.
async fn generated_images_are_recorded_and_sent_back(format: LlmFormat) {
    let fake = FakeProvider::start().await;
    let (png, url) = ("data:image/png;base64,iVBORw0KGgo=", "https://img.example/cat.png");
    fake.push(Reply::text("Here it is.").with_images(&[png, url]));
    fake.push(Reply::pieces(&[]).with_images(&[url]));
    fake.push(Reply::text("Nice."));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let config = subs_engine::EngineConfig {
        default_model: "fake/model".to_owned(),
        default_stream: true,
        ..subs_tests::test_config()
    };
    let engine = subs_tests::start_engine_with(store, models(&fake, format), config).await;
    for (turn, text) in [("t1", "draw a cat"), ("t2", "again"), ("t3", "thanks")] {
        assert_eq!(numbered_turn(&engine, turn, text).await.status, TurnStatus::Done);
    }

    let snapshot = engine.reads().snapshot(TENANT, "s").await.unwrap().unwrap();
    let content = |i: usize| serde_json::to_value(&snapshot.messages[i].content).unwrap();
    assert_eq!(
        content(1),
        json!([{"type": "text", "text": "Here it is."},
            {"type": "image_url", "image_url": {"url": png}}, {"type": "image_url", "image_url": {"url": url}}]),
        "{format:?}"
    );
    assert_eq!(content(3), json!([{"type": "image_url", "image_url": {"url": url}}]), "{format:?}");
    assert_eq!(content(5), json!("Nice."), "without images the content stays a string");

    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].stream());
    let messages = requests[2].body["messages"].as_array().unwrap().clone();
    let assistants: Vec<&Value> = messages.iter().filter(|m| m["role"] == "assistant").collect();
    match format {
        LlmFormat::Openai => {
            assert_eq!(assistants[0]["content"], "Here it is.");
            assert_eq!(
                assistants[0]["images"],
                json!([{"type": "image_url", "image_url": {"url": png}}, {"type": "image_url", "image_url": {"url": url}}])
            );
            assert_eq!(assistants[1]["images"], json!([{"type": "image_url", "image_url": {"url": url}}]));
        }
        LlmFormat::Anthropic => {
            // Anthropic takes images only from the user.
            assert_eq!(assistants[0]["content"], json!([{"type": "text", "text": "Here it is."}]));
            assert!(!requests[2].body.to_string().contains("img.example"), "{}", requests[2].body);
        }
    }
}
