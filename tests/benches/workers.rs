//! One decision, three languages and two transports: the `tools` agent
//! in Rust, Python and JavaScript as components (`ComponentAgent::decide`,
//! in-process, a fresh instance per decision) and the Rust one served over
//! loopback HTTP by `subs-http-worker` (`HttpWorker::decide`), on the same
//! request; and what loading (uploading) the Python and JavaScript agents
//! costs.
//!
//! ```text
//! cargo bench -p subs-tests --bench workers            # 2000 decisions per case
//! BENCH_DECISIONS=10000 cargo bench -p subs-tests --bench workers
//! ```
//!
//! The request is a `tool.execute` of `add` carrying a 20-message
//! conversation (and its tree) and the agent's config, so every worker
//! parses a realistic request and runs the same tool. Each case runs
//! sequentially (one caller) and with 16 concurrent callers; the output is
//! per-decision latency (p50, p99) and throughput, and the HTTP/component
//! ratio, on stdout and as JSON in `target/bench-workers.json`. The HTTP
//! server runs in the same process and runtime as the client, so on a
//! small machine the two compete for cores, as an engine and a co-located
//! worker would. The Python and JavaScript agents are the examples as
//! their toolchains build them by default (componentize-py and
//! componentize-js snapshots, WASI included); the JavaScript one twice,
//! as its build script makes it (world `agent-json`, JSON text) and built
//! against the typed world `agent`.
//!
//! Loading is what an upload costs the server before it answers: reading
//! the component's shape, compiling it, and one trial instantiation. Each
//! load starts from an empty compile cache, so it compiles: once as the
//! first agent of its toolchain, then, in the same cache, a copy with a
//! custom section appended (another upload, whose code is the same
//! runtime's, as every agent of that toolchain's is), which finds the
//! runtime's functions compiled. Then, from another empty cache, as
//! `subs serve` loads an upload (`baseline_first`): when it is accepted on
//! baseline code, what a decision costs on that code while the optimized
//! compile runs beside it, and when the optimized code is in place.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use subs_engine::worker::component::{ComponentHost, HostConfig};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{DecisionRequest, DecisionResponse};
use subs_tests::bench::{measure, ratio, time_each, write_json};

const CONCURRENCY: usize = 16;

#[allow(unsafe_code)]
fn main() {
    // See tests/benches/component.rs: a backtrace per decision otherwise.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet; the runtime starts below.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let decisions: usize = std::env::var("BENCH_DECISIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(decisions));
}

async fn run(decisions: usize) {
    let request = request();
    let agents = [
        ("component", subs_tests::agent(subs_tests::guests::TOOLS)),
        ("component (python)", subs_tests::agent(subs_tests::guests::TOOLS_PY)),
        ("component (javascript)", subs_tests::agent(subs_tests::guests::TOOLS_JS)),
        ("component (javascript, typed world)", subs_tests::agent(subs_tests::guests::TOOLS_JS_TYPED)),
    ];
    let [component, python, javascript, javascript_typed] =
        agents.clone().map(|(_, agent)| Arc::new(agent) as Arc<dyn Worker>);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { subs_http_worker::serve(listener, tools::Tools::new()).await });
    let http: Arc<dyn Worker> = Arc::new(HttpWorker::new(&url, HttpWorkerOptions::new()).expect("a worker URL"));

    // The same decision every way, or the comparison means nothing.
    let workers = [
        ("component", &component),
        ("component (python)", &python),
        ("component (javascript)", &javascript),
        ("component (javascript, typed world)", &javascript_typed),
        ("http", &http),
    ];
    for (name, worker) in workers {
        let decision = worker.decide(Delivery::new(request.clone())).await.expect("the worker decides");
        assert_eq!(decision, expected(), "{name}: unexpected decision");
    }

    println!("one tool.execute decision, {} messages, {decisions} decisions per case", request.messages.len());
    println!();
    println!("| worker | callers | p50 | p99 | decisions/s |");
    println!("| --- | --- | --- | --- | --- |");
    let mut results = Vec::new();
    for callers in [1, CONCURRENCY] {
        for (name, worker) in workers {
            measure(worker, &request, decisions.min(500), callers).await; // warm-up
            let stats = measure(worker, &request, decisions, callers).await;
            println!(
                "| {name} | {callers} | {} | {} | {:.0} |",
                micros(stats.p50),
                micros(stats.p99),
                stats.throughput
            );
            results.push((name, callers, stats));
        }
    }
    println!();
    // What a decision pays before and after the call: a fresh instance
    // made and torn down, without calling `decide`.
    println!("| worker | instantiate and tear down, p50 | p99 |");
    println!("| --- | --- | --- |");
    let mut parts = Vec::new();
    for (name, agent) in &agents {
        let stats = time_each(decisions, || async { agent.instantiate_only().await.expect("it instantiates") }).await;
        println!("| {name} | {} | {} |", micros(stats.p50), micros(stats.p99));
        parts.push(stats.row(name, 1));
    }
    println!();
    let mut ratios = Vec::new();
    for callers in [1, CONCURRENCY] {
        let find = |name| &results.iter().find(|(n, c, _)| *n == name && *c == callers).unwrap().2;
        let (c, h) = (find("component"), find("http"));
        let (p50, p99, throughput) = (ratio(h.p50, c.p50), ratio(h.p99, c.p99), h.throughput / c.throughput);
        println!("{callers} caller(s): http/component p50 {p50:.2}x, p99 {p99:.2}x, throughput {throughput:.2}x");
        ratios.push(json!({
            "callers": callers,
            "http_over_component_p50": p50,
            "http_over_component_p99": p99,
            "http_over_component_throughput": throughput,
        }));
    }
    println!();
    println!("| load (upload): inspect, compile, trial | seconds |");
    println!("| --- | --- |");
    let mut loads = Vec::new();
    for (language, path) in [("python", subs_tests::guests::TOOLS_PY), ("javascript", subs_tests::guests::TOOLS_JS)] {
        let bytes = std::fs::read(path).expect("the component");
        let cache = tempfile::tempdir().expect("a temporary directory");
        let config = HostConfig { compile_cache: Some(cache.path().to_owned()), ..HostConfig::default() };
        let host = ComponentHost::with_config(config).expect("the component host starts");
        for (case, bytes) in
            [("first of its toolchain", bytes.clone()), ("another upload, same runtime", variant(&bytes))]
        {
            let started = Instant::now();
            host.load(&bytes).expect("the component loads");
            let seconds = started.elapsed().as_secs_f64();
            println!("| {language}, {case} | {seconds:.1} |");
            loads.push(json!({"language": language, "case": case, "seconds": seconds, "bytes": bytes.len()}));
        }
        // As `subs serve` loads it: accepted on baseline code, optimized in
        // the background.
        let cache = tempfile::tempdir().expect("a temporary directory");
        let config =
            HostConfig { compile_cache: Some(cache.path().to_owned()), baseline_first: true, ..HostConfig::default() };
        let host = ComponentHost::with_config(config).expect("the component host starts");
        let started = Instant::now();
        let agent = host.load(&bytes).expect("the component loads");
        let accepted = started.elapsed().as_secs_f64();
        let baseline = measure(&(Arc::new(agent.clone()) as Arc<dyn Worker>), &request, 50, 1).await;
        subs_tests::wait::eventually(Duration::from_secs(600), "the optimized code in place", || async {
            agent.optimized()
        })
        .await;
        let optimized = started.elapsed().as_secs_f64();
        println!("| {language}, first of its toolchain, baseline first: accepted | {accepted:.1} |");
        println!("| {language}, first of its toolchain, baseline first: optimized code in place | {optimized:.1} |");
        println!(
            "| {language}, decision p50 on baseline code (ms, 50 decisions while optimizing) | {:.2} |",
            baseline.p50.as_secs_f64() * 1e3
        );
        loads.push(json!({
            "language": language,
            "case": "baseline first",
            "accepted_seconds": accepted,
            "optimized_seconds": optimized,
            "baseline_decision_p50_ms": baseline.p50.as_secs_f64() * 1e3,
        }));
    }
    let out = json!({
        "bench": "workers",
        "request_messages": request.messages.len(),
        "decisions_per_case": decisions,
        "cases": results.iter().map(|(name, callers, stats)| stats.row(name, *callers)).collect::<Vec<_>>(),
        "instantiate_only": parts,
        "ratios": ratios,
        "loads": loads,
    });
    write_json("workers", &out);
}

/// `bytes` with a custom section appended: a different upload (another
/// digest, so the compile cache does not have it) with the same code.
fn variant(bytes: &[u8]) -> Vec<u8> {
    let (name, payload) = (b"subs-bench", b"variant");
    let mut section = vec![u8::try_from(name.len()).expect("a short name")];
    section.extend_from_slice(name);
    section.extend_from_slice(payload);
    let mut out = bytes.to_vec();
    out.push(0); // a custom section
    out.push(u8::try_from(section.len()).expect("a short section"));
    out.extend_from_slice(&section);
    out
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// A `tool.execute` of `add` after a 20-message conversation.
fn request() -> DecisionRequest {
    let (messages, message_tree) = subs_tests::bench::conversation();
    let mut request = subs_tests::tool_execute("add", json!({"a": 1.5, "b": 2.25}));
    request.agent = Some(tools::Tools::new().config("subs/offline").into());
    request.messages = subs_protocol::Messages::new(messages, message_tree);
    request.state = json!({"turns": 10});
    request
}

fn expected() -> DecisionResponse {
    DecisionResponse::new().with_action(subs_protocol::Action::tool_result(json!({"sum": 3.75})))
}
