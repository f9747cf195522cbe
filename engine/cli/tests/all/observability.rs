//! What `subs serve` tells operators, checked with the ecosystem's own
//! tools: a real scrape of `/metrics` passes `promtool check metrics`
//! (Debian's `prometheus` package) with every documented series, the
//! process's and the build's; a gzip-compressed OTLP export is decoded
//! by the `opentelemetry-proto` package (scripts/api-tools), with the
//! GenAI attributes the semantic conventions ask for.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use serde_json::Value;
use subs_fake_provider::{FakeProvider, Fault, Reply};

use crate::openapi::api_tools_python;
use crate::{ADD, Server, TOOLS, http, output, stream_turn, subs};

/// `promtool`, or `None` when it is not installed and
/// `SUBS_REQUIRE_PROMTOOL` does not ask for it.
fn promtool() -> Option<Command> {
    let found = Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if found {
        return Some(Command::new("promtool"));
    }
    assert!(
        std::env::var_os("SUBS_REQUIRE_PROMTOOL").is_none_or(|v| v != "1"),
        "promtool is not installed (Debian: apt-get install prometheus)"
    );
    eprintln!("skipped: promtool is not installed (set SUBS_REQUIRE_PROMTOOL=1 to fail instead)");
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_passes_promtool_with_every_documented_series() {
    let Some(mut promtool) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let scrape = || async {
        let response = http().get(format!("{}/metrics", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    };
    // Before anything happened: the series are there, at zero.
    let fresh = scrape().await;
    for line in [
        "subs_deliveries_total{worker=\"component\",outcome=\"ok\"} 0",
        "subs_guest_traps_total{kind=\"trap\"} 0",
        "subs_llm_tokens_total{model=\"other\",kind=\"input\"} 0",
        "subs_llm_cost_dollars_total{model=\"other\"} 0.0",
        &format!("subs_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
    ] {
        assert!(fresh.lines().any(|l| l == line), "`{line}` in\n{fresh}");
    }

    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let events = stream_turn(&server.url, "s", "tools", ADD).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"));
    let text = scrape().await;
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
        "subs_http_requests_total",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "`{name}` in\n{text}");
    }
    let delivered = "subs_deliveries_total{worker=\"component\",outcome=\"ok\"} ";
    let delivered: u64 = text.lines().find_map(|l| l.strip_prefix(delivered)?.parse().ok()).expect("deliveries");
    assert!(delivered > 0, "the turn's decisions were delivered");
    let resident: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.parse().ok())
        .expect("a resident size");
    assert!(resident > 1e6, "{resident} bytes resident");

    let mut check = promtool
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}

/// One OTLP/HTTP export as it came: its `Content-Encoding` and body.
type Export = (Option<String>, Bytes);

/// An OTLP/HTTP trace receiver on `127.0.0.1:0` that keeps every export
/// undecoded.
async fn receiver() -> (String, Arc<Mutex<Vec<Export>>>) {
    let exports: Arc<Mutex<Vec<Export>>> = Arc::default();
    let kept = exports.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let kept = kept.clone();
            async move {
                let encoding = headers.get("content-encoding").and_then(|v| v.to_str().ok()).map(str::to_owned);
                kept.lock().unwrap().push((encoding, body));
                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, exports)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gzip_otlp_export_decodes_with_the_genai_attributes() {
    let Some(python) = api_tools_python() else { return };
    let (collector, exports) = receiver().await;
    let fake = FakeProvider::start().await;
    fake.push(Reply::text("Hello.").with_usage(7, 2));
    fake.push(Reply::fault(Fault::status(400, "no such thing")));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    let provider =
        format!("[[providers]]\nname = \"gateway\"\nformat = \"openai\"\nbase_url = \"{}\"\n", fake.openai_base_url());
    std::fs::write(&config, provider).unwrap();
    let data = dir.path().join("data");
    let child = subs()
        .args(["serve", "--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--default-model", "gateway/gpt-test"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &collector)
        .env("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server::attach(child);
    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    // A turn that succeeds, then one whose LLM call the provider refuses.
    for (session, done) in [("fine", "turn.done"), ("refused", "turn.failed")] {
        let events = stream_turn(&server.url, session, "tools", "hi").await;
        assert_eq!(events.last().map(|e| e.1.as_str()), Some(done), "{events:?}");
    }

    // Every export is gzip; the package decodes them.
    let spans: Vec<Value> = subs_tests::wait::eventually(Duration::from_secs(20), "two turn spans", || async {
        let exported = exports.lock().unwrap().clone();
        assert!(exported.iter().all(|(encoding, _)| encoding.as_deref() == Some("gzip")), "not all gzip");
        let work = tempfile::tempdir().unwrap();
        let files: Vec<_> = exported
            .iter()
            .enumerate()
            .map(|(n, (_, body))| {
                let path = work.path().join(format!("export-{n}.pb.gz"));
                std::fs::write(&path, body).unwrap();
                path
            })
            .collect();
        let decoded = Command::new(&python)
            .arg(crate::openapi::root().join("scripts/api-tools/decode_otlp.py"))
            .args(&files)
            .output()
            .expect("the decoder runs");
        assert!(decoded.status.success(), "{}", String::from_utf8_lossy(&decoded.stderr));
        let spans: Vec<Value> =
            String::from_utf8_lossy(&decoded.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let turns = spans.iter().filter(|s| s["name"] == "invoke_agent tools").count();
        if turns == 2 { Ok(spans) } else { Err(format!("{spans:#?}")) }
    })
    .await;
    let attributes =
        |span: &Value| -> HashMap<String, String> { serde_json::from_value(span["attributes"].clone()).unwrap() };
    let chats: Vec<HashMap<String, String>> =
        spans.iter().filter(|s| s["name"] == "chat gpt-test").map(attributes).collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let port = fake.addr().port().to_string();
    for chat in &chats {
        assert_eq!(chat["gen_ai.provider.name"], "openai", "the wire format's well-known name, not `gateway`");
        assert_eq!(chat["server.address"], "127.0.0.1");
        assert_eq!(chat["server.port"], port);
    }
    let ok = chats.iter().find(|c| !c.contains_key("error.type")).expect("the answered call");
    assert!(!ok["gen_ai.response.model"].is_empty(), "{ok:?}");
    assert_eq!(ok["gen_ai.response.id"], "chatcmpl-fake", "{ok:?}");
    let failed = chats.iter().find(|c| c.contains_key("error.type")).expect("the refused call");
    assert_ne!(failed["error.type"], "", "{failed:?}");
    let turns: Vec<HashMap<String, String>> =
        spans.iter().filter(|s| s["name"] == "invoke_agent tools").map(attributes).collect();
    let failed_turn = turns.iter().find(|t| t["subs.turn.status"] == "failed").expect("the failed turn");
    assert!(!failed_turn["error.type"].is_empty(), "{failed_turn:?}");
    assert!(turns.iter().any(|t| t["subs.turn.status"] == "done" && !t.contains_key("error.type")));
}
