//! The component host: a fresh instance per decision of the passthrough
//! agent, with limits on and off, against the same agent served as an HTTP
//! worker on loopback, in one run on the same request.
//!
//! ```text
//! cargo bench -p subs-tests --bench component            # 5000 decisions per case
//! BENCH_DECISIONS=20000 cargo bench -p subs-tests --bench component
//! BENCH_QUICK=1 cargo bench -p subs-tests --bench component   # components only, 25 short rounds
//! ```
//!
//! `BENCH_QUICK` runs only the sequential component cases (limits on, off,
//! empty request, the wasm32-wasip2 build), in 25 short interleaved
//! rounds, for A/B comparisons of host or guest changes on a noisy
//! machine: compare the lowest p50s.
//!
//! The request is a `session.start` carrying a 20-message conversation
//! (and its tree) and a proposed decision, which the passthrough agent
//! returns; each decision instantiates the component afresh and calls
//! `decide`. The agent is built as agents are best built when they need
//! no WASI: for wasm32-unknown-unknown, made a component by the engine at
//! load; the same agent built for wasm32-wasip2 (Rust's standard library
//! then imports WASI) runs as a case of its own. Each case runs with one caller and with 16 concurrent
//! callers; the output is per-decision latency (p50, p99) and throughput.
//! The HTTP worker runs in the same process and runtime as its client, so
//! on a small machine the two compete for cores, as an engine and a
//! co-located worker would.
//!
//! Then the parts of a decision, each alone, sequentially: a decision of
//! an empty request; the floor (a component of the `subs:agent/floor`
//! world, no imports, whose `noop` export does nothing: instantiate, call,
//! tear down); instantiating the passthrough and tearing it down without
//! a call; and the host's conversions of the request and the decision to
//! their WIT form and back, without a guest. The table goes to stdout and,
//! as JSON, to `target/bench-component.json`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use subs_engine::worker::component::{ComponentAgent, ComponentHost, HostConfig, probe};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{AgentConfig, DecisionRequest, DecisionResponse, DraftMessage, Trigger};
use subs_tests::bench::{measure, ratio, time_each, write_json};

const CONCURRENCY: usize = 16;

/// The passthrough example agent, natively, for the HTTP worker.
struct Passthrough;

impl subs_sdk::Agent for Passthrough {}

#[allow(unsafe_code)]
fn main() {
    // wasmtime captures a backtrace while tearing a store down when
    // RUST_BACKTRACE asks for them, adding 15–20 µs to every decision;
    // the engine should run with RUST_LIB_BACKTRACE=0 (docs/sandbox.md).
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet; the runtime starts below.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let decisions: usize = std::env::var("BENCH_DECISIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(5000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(decisions));
}

fn host(enforce_limits: bool) -> ComponentHost {
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compiled-components");
    let config = HostConfig { enforce_limits, compile_cache: Some(cache), ..HostConfig::default() };
    ComponentHost::with_config(config).expect("the component host starts")
}

fn load(host: &ComponentHost, path: &str) -> ComponentAgent {
    let bytes = std::fs::read(path).expect("the passthrough component");
    let agent = host.load(&bytes).expect("the passthrough component loads");
    agent.for_agent("bench", "passthrough", &Default::default()).expect("the default policy")
}

async fn run(decisions: usize) {
    let request = request();
    let (limited_host, unlimited_host) = (host(true), host(false));
    let lean = load(&limited_host, subs_tests::guests::PASSTHROUGH_LEAN);
    let limited: Arc<dyn Worker> = Arc::new(lean.clone());
    let unlimited: Arc<dyn Worker> = Arc::new(load(&unlimited_host, subs_tests::guests::PASSTHROUGH_LEAN));
    let wasip2: Arc<dyn Worker> = Arc::new(load(&limited_host, subs_tests::guests::PASSTHROUGH));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { subs_http_worker::serve(listener, Passthrough).await });
    let http: Arc<dyn Worker> = Arc::new(HttpWorker::new(&url, HttpWorkerOptions::new()).expect("a worker URL"));

    // The same decision every way, or the comparison means nothing.
    for worker in [&limited, &unlimited, &wasip2, &http] {
        let decision = worker.decide(Delivery::new(request.clone())).await.expect("a decision");
        assert_eq!(decision, request.proposed, "passthrough returns the proposal");
    }

    println!(
        "passthrough, fresh instance per decision; session.start with {} messages ({} bytes as JSON); {decisions} decisions per case",
        request.messages.len(),
        serde_json::to_vec(&request).unwrap().len()
    );
    println!();
    if std::env::var_os("BENCH_QUICK").is_some() {
        quick(&request, &limited, &unlimited, &wasip2).await;
        return;
    }
    println!("| worker | callers | p50 | p99 | decisions/s |");
    println!("| --- | --- | --- | --- | --- |");
    let cases = [
        ("component, limits on", &limited),
        ("component, limits off", &unlimited),
        ("component (wasip2 build), limits on", &wasip2),
        ("http (loopback)", &http),
    ];
    let mut results = Vec::new();
    for callers in [1, CONCURRENCY] {
        for (name, worker) in cases {
            measure(worker, &request, decisions.min(1000), callers).await; // warm-up
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
    // The parts of a decision, each alone: what a call costs with nothing
    // to carry across (an empty request; the floor world's `noop`, which
    // has no imports and does nothing), instantiating and tearing down
    // without a call, and the conversions to WIT and back without a guest.
    let empty = DecisionRequest::for_trigger(Trigger::SessionStart);
    measure(&limited, &empty, decisions.min(1000), 1).await;
    let stats = measure(&limited, &empty, decisions, 1).await;
    let mut parts = vec![("component, limits on, empty request", stats)];
    let floor_bytes = std::fs::read(subs_tests::guests::TEST_FLOOR_LEAN).expect("the floor component");
    let floor = limited_host.load_floor(&floor_bytes).expect("the floor component loads");
    let call_floor = || async { floor.call().await.expect("noop returns") };
    time_each(decisions.min(1000), call_floor).await;
    parts.push(("floor: instantiate, call `noop`, tear down; limits on", time_each(decisions, call_floor).await));
    let instantiate = || async { lean.instantiate_only().await.expect("the agent instantiates") };
    time_each(decisions.min(1000), instantiate).await;
    parts.push(("instantiate and tear down, no call; limits on", time_each(decisions, instantiate).await));
    // The clones are made before the clock starts: a decision owns its
    // request and moves it into the conversion. (At most 2,000 of them: a
    // copy of the request is tens of KB.)
    let rounds = decisions.min(2000);
    let mut copies: Vec<_> = (0..rounds).map(|_| (request.clone(), request.proposed.clone())).collect();
    let marshal = || {
        let (request, decision) = copies.pop().expect("a copy per round");
        async move {
            let request = probe::request_round_trip(request).expect("the request converts");
            let decision = probe::decision_round_trip(decision).expect("the decision converts");
            std::hint::black_box((request, decision));
        }
    };
    parts.push(("marshalling alone: request and decision to WIT and back", time_each(rounds, marshal).await));
    for (name, stats) in &parts {
        println!("| {name} | 1 | {} | {} | {:.0} |", micros(stats.p50), micros(stats.p99), stats.throughput);
    }
    println!();
    let mut ratios = Vec::new();
    for callers in [1, CONCURRENCY] {
        let find = |name| &results.iter().find(|(n, c, _)| *n == name && *c == callers).unwrap().2;
        let (on, off, h) = (find(cases[0].0), find(cases[1].0), find(cases[3].0));
        let (latency, throughput) = (ratio(h.p50, on.p50), on.throughput / h.throughput);
        let limits_us = (on.p50.as_secs_f64() - off.p50.as_secs_f64()) * 1e6;
        println!(
            "{callers} caller(s): http/component p50 {latency:.2}x, component/http throughput {throughput:.2}x; limits cost {limits_us:+.1} µs at p50",
        );
        ratios.push(json!({
            "callers": callers,
            "http_over_component_p50": latency,
            "component_over_http_throughput": throughput,
            "limits_cost_us_p50": limits_us,
        }));
    }
    let rows: Vec<_> = results
        .iter()
        .map(|(name, callers, stats)| stats.row(name, *callers))
        .chain(parts.iter().map(|(name, stats)| stats.row(name, 1)))
        .collect();
    let out = json!({
        "bench": "component",
        "request_messages": request.messages.len(),
        "request_bytes": serde_json::to_vec(&request).unwrap().len(),
        "decisions_per_case": decisions,
        "cases": rows,
        "ratios": ratios,
    });
    write_json("component", &out);
}

/// Many short rounds of the sequential component cases, interleaved, and
/// the lowest and median p50 of each: on a shared machine whole rounds run
/// slow when a neighbour is busy, and the lowest round is the one to
/// compare between two builds.
async fn quick(
    request: &DecisionRequest,
    limited: &Arc<dyn Worker>,
    unlimited: &Arc<dyn Worker>,
    wasip2: &Arc<dyn Worker>,
) {
    const ROUNDS: usize = 25;
    let empty = DecisionRequest::for_trigger(Trigger::SessionStart);
    let cases = [
        ("component, limits on", limited, request),
        ("component, limits off", unlimited, request),
        ("empty request", limited, &empty),
        ("wasip2 build, limits on", wasip2, request),
    ];
    let mut p50s = vec![Vec::new(); cases.len()];
    for (_, worker, request) in &cases {
        measure(worker, request, 1000, 1).await;
    }
    for _ in 0..ROUNDS {
        for (i, (_, worker, request)) in cases.iter().enumerate() {
            p50s[i].push(measure(worker, request, 1000, 1).await.p50);
        }
    }
    println!("| case | lowest p50 | median p50 |");
    println!("| --- | --- | --- |");
    for ((name, _, _), mut p50) in cases.iter().zip(p50s) {
        p50.sort();
        println!("| {name} | {} | {} |", micros(p50[0]), micros(p50[ROUNDS / 2]));
    }
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// A `session.start` after a 20-message conversation, proposing a reply.
fn request() -> DecisionRequest {
    let (messages, message_tree) = subs_tests::bench::conversation();
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.proposed = DecisionResponse::new()
        .with_agent(AgentConfig::new("subs/offline"))
        .with_message(DraftMessage::assistant("hello again"));
    request.messages = subs_protocol::Messages::new(messages, message_tree);
    request.state = json!({"turns": 10});
    request
}
