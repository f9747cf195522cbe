//! What a tool call through an MCP server costs over one through an HTTP
//! worker, on loopback: the engine's side of one call, the way the loop
//! makes it.
//!
//! ```text
//! cargo bench -p subs-tests --bench mcp                 # 500 calls per case
//! BENCH_CALLS=2000 cargo bench -p subs-tests --bench mcp
//! ```
//!
//! - **worker**: `HttpWorker::decide` of a `tool.execute` of `add` (a
//!   small request: the call, no conversation), answered by the `tools`
//!   example served by `subs-http-worker` in this process;
//! - **mcp (rust server)**: `McpServers::call` of `demo__add`
//!   (`ToolSources`, as the session loop calls it) to a minimal MCP server
//!   in this process (axum, JSON responses): the protocol's cost alone,
//!   on an open MCP session with its tool list cached;
//! - **mcp (python server)**: the same call to the Python SDK's server
//!   (`tests/mcp/server.py`, event-stream responses), as a tenant's server
//!   would be; skipped where the SDK cannot be installed.
//!
//! One caller, sequential calls; p50, p99 and calls per second, and the
//! MCP/worker ratio of the Rust server, on stdout and as JSON in
//! `target/bench-mcp.json`.

use std::sync::Arc;

use serde_json::{Value, json};
use subs_engine::mcp::{McpLimits, McpServers};
use subs_engine::tool_sources::{SourceCall, SourceOutcome, ToolSources};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::McpServerUse;
use subs_tests::bench::{Stats, ratio, time_each, write_json};

#[allow(unsafe_code)]
fn main() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet; the runtime starts below.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let calls: usize = std::env::var("BENCH_CALLS").ok().and_then(|n| n.parse().ok()).unwrap_or(500);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(calls));
}

/// A minimal MCP server: `initialize`, `tools/list` with `add`, and
/// `tools/call` of it, each answered with one JSON object.
async fn rust_server() -> String {
    use axum::response::IntoResponse;
    let handler = |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let id = message["id"].clone();
        let result = match message["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench", "version": "1"}
            }),
            Some("tools/list") => json!({"tools": [{
                "name": "add",
                "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}}
            }]}),
            Some("tools/call") => {
                let arguments = &message["params"]["arguments"];
                let sum = arguments["a"].as_f64().unwrap_or(0.0) + arguments["b"].as_f64().unwrap_or(0.0);
                json!({"content": [{"type": "text", "text": format!("{{\"sum\":{sum}}}")}], "structuredContent": {"sum": sum}})
            }
            _ => return axum::http::StatusCode::ACCEPTED.into_response(),
        };
        let session = headers.get("mcp-session-id").cloned().unwrap_or(axum::http::HeaderValue::from_static("s1"));
        ([("mcp-session-id", session)], axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})))
            .into_response()
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/mcp")
}

/// One call of `demo__add`, as the loop makes it.
fn call(n: usize) -> SourceCall {
    SourceCall {
        tenant: "bench".to_owned(),
        session: "s".to_owned(),
        call_id: format!("c{n}"),
        attempt: 1,
        name: "demo__add".to_owned(),
        arguments: r#"{"a": 1.5, "b": 2.25}"#.to_owned(),
        timeout: None,
    }
}

async fn measure_mcp(url: &str, calls: usize) -> Stats {
    let limits = McpLimits { private_hosts: vec!["127.0.0.1".to_owned()], ..McpLimits::default() };
    let servers = Arc::new(McpServers::new(limits).expect("a registry"));
    servers.put("bench", "demo", url, &[]).await.expect("registered");
    // The session opened and the list cached, as for a session's second call.
    let uses = [McpServerUse { server: "demo".to_owned(), tools: None }];
    assert!(!servers.tools("bench", &uses).await.is_empty(), "{url}: its tools");
    let progress: subs_engine::tool_sources::ProgressSink = Arc::new(|_| {});
    let one = |n| {
        let (servers, progress) = (servers.clone(), progress.clone());
        async move {
            let outcome = servers.call(call(n), progress).await;
            assert_eq!(outcome, SourceOutcome::Ok(json!({"sum": 3.75})), "{n}");
        }
    };
    let mut n = 0;
    time_each(calls.min(100), || {
        n += 1;
        one(n)
    })
    .await; // warm-up
    time_each(calls, || {
        n += 1;
        one(n)
    })
    .await
}

async fn run(calls: usize) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { subs_http_worker::serve(listener, tools::Tools::new()).await });
    let worker: Arc<dyn Worker> = Arc::new(HttpWorker::new(&url, HttpWorkerOptions::new()).expect("a worker URL"));
    let mut request = subs_tests::tool_execute("add", json!({"a": 1.5, "b": 2.25}));
    request.agent = Some(tools::Tools::new().config("subs/offline").into());
    let one = || {
        let (worker, request) = (worker.clone(), request.clone());
        async move {
            worker.decide(Delivery::new(request)).await.expect("the worker decides");
        }
    };
    time_each(calls.min(100), one).await; // warm-up
    let http = time_each(calls, one).await;

    let rust = measure_mcp(&rust_server().await, calls).await;
    let python = match subs_tests::mcp::FastMcp::start("normal") {
        Some(server) => {
            let stats = measure_mcp(&server.url(), calls).await;
            Some((server, stats))
        }
        None => None,
    };

    println!("one tool call on loopback, {calls} calls per case, one caller");
    println!();
    println!("| tool call | p50 | p99 | calls/s |");
    println!("| --- | --- | --- | --- |");
    let mut rows = Vec::new();
    let cases = [
        ("worker (http)", Some(&http)),
        ("mcp (rust server)", Some(&rust)),
        ("mcp (python server)", python.as_ref().map(|(_, s)| s)),
    ];
    for (name, stats) in cases {
        let Some(stats) = stats else {
            println!("| {name} | skipped: the Python MCP SDK is not installed | | |");
            continue;
        };
        println!("| {name} | {:.0} µs | {:.0} µs | {:.0} |", micros(stats.p50), micros(stats.p99), stats.throughput);
        rows.push(stats.row(name, 1));
    }
    let (p50, p99) = (ratio(rust.p50, http.p50), ratio(rust.p99, http.p99));
    println!();
    println!("mcp (rust server) / worker: p50 {p50:.2}x, p99 {p99:.2}x");
    write_json("mcp", &json!({"calls": calls, "cases": rows, "mcp_over_worker_p50": p50, "mcp_over_worker_p99": p99}));
}

fn micros(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
