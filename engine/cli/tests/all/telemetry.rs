//! What `subs serve` tells operators: OpenTelemetry spans sent over
//! OTLP/HTTP to a real receiver (decoding the protobuf as a collector
//! does), and `/metrics` read with a Prometheus text parser.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;
use subs_fake_provider::{FakeProvider, Reply, ScriptedCall};

use crate::{ADD, Server, TOOLS, http, subs};

/// The trace the client's request is part of.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
/// The client's span: the turn's parent.
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP trace receiver on `127.0.0.1:0`: every span it is sent,
/// with its service's name.
struct Receiver {
    url: String,
    spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Receiver {
    async fn start() -> Self {
        let spans: Arc<Mutex<Vec<(String, Span)>>> = Arc::default();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
                let kept = kept.clone();
                async move {
                    assert_eq!(headers["content-type"], "application/x-protobuf");
                    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                    for resource in request.resource_spans {
                        let service = resource
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|a| a.key == "service.name")
                            .and_then(|a| text(a.value.as_ref()?.value.as_ref()?))
                            .unwrap_or_default();
                        for scope in resource.scope_spans {
                            kept.lock().unwrap().extend(scope.spans.into_iter().map(|s| (service.clone(), s)));
                        }
                    }
                    ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { url, spans }
    }

    /// The spans received once one named `name` has been (at most 20 s).
    async fn until(&self, name: &str) -> Vec<Span> {
        let spans = subs_tests::wait::eventually(Duration::from_secs(20), format!("a `{name}` span comes"), || async {
            let spans = self.spans.lock().unwrap().clone();
            if spans.iter().any(|(_, s)| s.name == name) { Ok(spans) } else { Err(format!("{spans:#?}")) }
        })
        .await;
        assert!(spans.iter().all(|(service, _)| service == "subs"), "the service is named subs");
        spans.into_iter().map(|(_, s)| s).collect()
    }
}

fn text(value: &Any) -> Option<String> {
    match value {
        Any::StringValue(s) => Some(s.clone()),
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A span's attributes, as text.
fn attributes(span: &Span) -> HashMap<String, String> {
    span.attributes
        .iter()
        .filter_map(|a| {
            let value = match a.value.as_ref()?.value.as_ref()? {
                Any::StringValue(s) => s.clone(),
                Any::IntValue(n) => n.to_string(),
                Any::DoubleValue(n) => n.to_string(),
                Any::BoolValue(b) => b.to_string(),
                Any::ArrayValue(a) => {
                    a.values.iter().filter_map(|v| text(v.value.as_ref()?)).collect::<Vec<_>>().join(",")
                }
                _ => return None,
            };
            Some((a.key.clone(), value))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_is_traced_under_the_clients_span_and_measured() {
    let receiver = Receiver::start().await;
    let fake = FakeProvider::start().await;
    fake.push(
        Reply::tool_calls(vec![ScriptedCall::new("call_add", "add", &[r#"{"a":1,"#, r#""b":2}"#])]).with_usage(11, 5),
    );
    fake.push(Reply::text("The sum is 3.").with_usage(20, 6));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(
        &config,
        format!("[[providers]]\nname = \"fake\"\nformat = \"openai\"\nbase_url = \"{}\"\n", fake.openai_base_url()),
    )
    .unwrap();
    let data = dir.path().join("data");
    let child = subs()
        .args(["serve", "--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--default-model", "fake/gpt-test"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.url)
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server::attach(child);
    let url = &server.url;
    let put = http()
        .put(format!("{url}/v1/agents/tools"))
        .header("content-type", "application/wasm")
        .body(std::fs::read(TOOLS).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 201);

    // A streamed tool turn, from a client whose request is part of a trace.
    let input = json!({"type": "client.message", "agent_id": "tools", "message": {"role": "user", "content": ADD}, "stream": true});
    let response = http()
        .post(format!("{url}/v1/sessions/traced/input"))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{TRACE_ID}-{CLIENT_SPAN}-01"))
        .body(input.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("event: turn.done"), "{body}");

    let spans = receiver.until("invoke_agent tools").await;
    let by_id: HashMap<String, &Span> = spans.iter().map(|s| (hex(&s.span_id), s)).collect();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();
    let parent = |span: &Span| by_id.get(&hex(&span.parent_span_id)).map(|p| p.name.clone());
    for span in &spans {
        assert_eq!(hex(&span.trace_id), TRACE_ID, "{} joins the client's trace", span.name);
        assert!(span.end_time_unix_nano >= span.start_time_unix_nano, "{}", span.name);
    }

    // The turn, under the client's span.
    let [turn] = named("invoke_agent tools")[..] else { panic!("one turn span: {spans:#?}") };
    assert_eq!(hex(&turn.parent_span_id), CLIENT_SPAN);
    let turn_attributes = attributes(turn);
    assert_eq!(turn_attributes["gen_ai.operation.name"], "invoke_agent");
    assert_eq!(turn_attributes["gen_ai.agent.name"], "tools");
    assert_eq!(turn_attributes["gen_ai.conversation.id"], "traced");
    assert_eq!(turn_attributes["subs.turn.status"], "done");

    // Its decisions, each with its trigger, agent, version, worker kind
    // and attempt; the first under the turn.
    let decisions: Vec<&Span> = spans.iter().filter(|s| s.name.starts_with("decision ")).collect();
    for d in &decisions {
        let a = attributes(d);
        assert_eq!(a["subs.agent.id"], "tools");
        assert_eq!(a["subs.worker.kind"], "component");
        assert!(a["subs.agent.version"].starts_with("sha256:"), "{a:?}");
        assert_eq!(a["subs.attempt"], "1");
    }
    let first = named("decision client.messages");
    assert_eq!(first.len(), 1, "{decisions:#?}");
    assert_eq!(parent(first[0]).as_deref(), Some("invoke_agent tools"));

    // The two LLM calls, each under the decision that made it, with the
    // GenAI attributes and the usage the provider reported.
    let chats = named("chat gpt-test");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut usage = Vec::new();
    for chat in &chats {
        assert!(parent(chat).is_some_and(|p| p.starts_with("decision ")), "{chat:#?}");
        let a = attributes(chat);
        assert_eq!(a["gen_ai.operation.name"], "chat");
        assert_eq!(a["gen_ai.request.model"], "gpt-test");
        // The wire format's well-known name, not the configured `fake`.
        assert_eq!(a["gen_ai.provider.name"], "openai");
        // The provider's id of the reply, as its body said.
        assert_eq!(a["gen_ai.response.id"], "chatcmpl-fake");
        usage.push((a["gen_ai.usage.input_tokens"].clone(), a["gen_ai.usage.output_tokens"].clone()));
    }
    usage.sort();
    assert_eq!(usage, [("11".to_owned(), "5".to_owned()), ("20".to_owned(), "6".to_owned())]);

    // The tool call, under the decision that asked for it; the agent runs
    // it in a decision of its own, under the tool's span.
    let [tool] = named("execute_tool add")[..] else { panic!("one tool span: {spans:#?}") };
    assert_eq!(parent(tool).as_deref(), Some("decision llm.finished"));
    let a = attributes(tool);
    assert_eq!(a["gen_ai.operation.name"], "execute_tool");
    assert_eq!(a["gen_ai.tool.name"], "add");
    assert_eq!(a["gen_ai.tool.call.id"], "call_add");
    let executing = named("decision tool.execute");
    assert_eq!(executing.len(), 1);
    assert_eq!(parent(executing[0]).as_deref(), Some("execute_tool add"));

    // The provider was sent each call's span as its parent.
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let traceparent = request.header("traceparent").expect("the provider gets a traceparent");
        let span_id = traceparent.split('-').nth(2).unwrap();
        assert!(traceparent.starts_with(&format!("00-{TRACE_ID}-")), "{traceparent}");
        assert_eq!(by_id[span_id].name, "chat gpt-test");
    }

    // The metrics, read as Prometheus reads them.
    let text = http().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("Prometheus text");
    let histogram_count = |name: &str, label: Option<(&str, &str)>| -> u64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match &s.value {
                prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count) as u64,
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .sum()
    };
    assert_eq!(histogram_count("subs_decision_duration_seconds", Some(("worker", "component"))), 6, "{text}");
    assert!(histogram_count("subs_store_commit_duration_seconds", None) >= 3, "{text}");
    assert!(histogram_count("subs_store_commit_operations", None) >= 3, "{text}");
    assert_eq!(histogram_count("subs_llm_call_duration_seconds", Some(("model", "fake/gpt-test"))), 2, "{text}");
    // Both calls streamed: `stream_by_default` is on.
    assert_eq!(histogram_count("subs_llm_time_to_first_token_seconds", None), 2, "{text}");
    assert_eq!(histogram_count("subs_tool_call_duration_seconds", Some(("handler", "worker"))), 1, "{text}");
    assert_eq!(histogram_count("subs_http_request_duration_seconds", Some(("route", "/v1/agents/:agent_id"))), 1);
    let counter = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(n) | prometheus_parse::Value::Gauge(n) => n,
                ref other => panic!("{name}: {other:?}"),
            })
            .sum()
    };
    assert_eq!(counter("subs_llm_tokens_total", &[("model", "fake/gpt-test"), ("kind", "input")]), 31.0, "{text}");
    assert_eq!(counter("subs_llm_tokens_total", &[("model", "fake/gpt-test"), ("kind", "output")]), 11.0, "{text}");
    assert_eq!(counter("subs_deliveries_total", &[("worker", "component"), ("outcome", "ok")]), 6.0, "{text}");
    assert_eq!(counter("subs_inputs_waiting", &[]), 0.0, "{text}");
    assert!(counter("subs_sessions_active", &[]) <= 1.0, "{text}");
    assert_eq!(
        counter("subs_http_requests_total", &[("route", "/v1/sessions/:session_id/input"), ("status", "200")]),
        1.0
    );

    // A refused upload is counted by why.
    let refused = http()
        .put(format!("{url}/v1/agents/junk"))
        .header("content-type", "application/wasm")
        .body(&b"not wasm"[..])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 422);
    let text = http().get(format!("{url}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(text.contains("subs_agent_uploads_refused_total{reason=\"invalid_component\"} 1"), "{text}");
    drop(server);
}
