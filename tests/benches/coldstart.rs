//! Cold start: from nothing in memory to the first finished turn, with 50
//! distinct components in the compile cache (issue 9, item 5).
//!
//! ```text
//! cargo bench -p subs-tests --bench coldstart
//! BENCH_COMPONENTS=50 BENCH_RUNS=5 cargo bench -p subs-tests --bench coldstart
//! ```
//!
//! The 50 components are the `passthrough` example, each with a different
//! custom section appended (a valid component, a different content digest,
//! so 50 cache entries). A first host compiles them into a cache directory.
//! Each measured run then does what `subs serve` does on start: a new
//! wasmtime engine and component host on that cache, every component
//! loaded (deserialized, validated, pre-linked) and registered, the store
//! opened, the engine opened and resumed; then one turn of one agent with
//! the offline model. The run fails if anything was compiled. Printed: the
//! median and worst of the runs, and the same as JSON in
//! `target/bench-coldstart.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use subs_engine::store::TurnStatus;
use subs_engine::worker::component::{AgentPolicy, ComponentHost, HostConfig};
use subs_engine::{Engine, EngineConfig};
use subs_store_redb::RedbStore;

const TENANT: &str = "bench";

fn main() {
    // SAFETY: nothing else runs yet; see tests/benches/turns.rs.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let count: usize = std::env::var("BENCH_COMPONENTS").ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(5);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(count, runs));
}

/// `bytes` with a custom section named `subs-bench` holding `n` appended.
fn variant(bytes: &[u8], n: usize) -> Vec<u8> {
    fn leb(mut value: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"subs-bench";
    let payload = n.to_string();
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(payload.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0); // a custom section
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

fn host(cache: &std::path::Path) -> ComponentHost {
    let config = HostConfig { compile_cache: Some(cache.to_path_buf()), ..HostConfig::default() };
    ComponentHost::with_config(config).expect("the component host starts")
}

struct Run {
    ready: Duration,
    first_turn: Duration,
    compilations: u64,
}

async fn cold_start(components: &[Vec<u8>], cache: &std::path::Path) -> Run {
    let data = tempfile::tempdir().expect("a data directory");
    let start = Instant::now();
    let host = host(cache);
    let store = Arc::new(RedbStore::open(data.path().join("subs.redb")).expect("the store opens"));
    let engine = Engine::open(store, subs_engine::model::Models::with_offline(), EngineConfig::default());
    for (n, bytes) in components.iter().enumerate() {
        let agent_id = format!("agent{n}");
        let agent = host
            .load(bytes)
            .and_then(|a| a.for_agent(TENANT, &agent_id, &AgentPolicy::default()))
            .expect("a cached component loads");
        engine.register_agent(TENANT, &agent_id, Arc::new(agent));
    }
    engine.resume().await.expect("the engine resumes");
    let ready = start.elapsed();

    let input = subs_tests::user_input("agent0", Some("first"), "hello");
    engine.sessions().input(TENANT, "s", input, Default::default()).await.expect("input accepted");
    let turn = engine.reads().wait_turn(TENANT, "s", "first").await.expect("the store answers");
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    Run { ready, first_turn: start.elapsed(), compilations: host.compilations() }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn run(count: usize, runs: usize) {
    let passthrough = std::fs::read(subs_tests::guests::PASSTHROUGH).expect("the passthrough component is built");
    let components: Vec<Vec<u8>> = (0..count).map(|n| variant(&passthrough, n)).collect();
    let cache = tempfile::tempdir().expect("a cache directory");

    let warm = host(cache.path());
    let compile = Instant::now();
    for bytes in &components {
        warm.load(bytes).expect("the variant is a valid component");
    }
    println!(
        "compiled {count} components ({} KiB each) into the cache in {:.0} ms ({} compilations)",
        passthrough.len() / 1024,
        ms(compile.elapsed()),
        warm.compilations()
    );
    drop(warm);

    let mut results = Vec::new();
    for _ in 0..runs {
        let run = cold_start(&components, cache.path()).await;
        assert_eq!(run.compilations, 0, "a cold start compiled nothing");
        results.push(run);
    }
    let mut ready: Vec<Duration> = results.iter().map(|r| r.ready).collect();
    let mut first: Vec<Duration> = results.iter().map(|r| r.first_turn).collect();
    ready.sort();
    first.sort();
    let (ready_median, first_median) = (ready[ready.len() / 2], first[first.len() / 2]);
    let (ready_worst, first_worst) = (*ready.last().unwrap(), *first.last().unwrap());
    println!("\ncold start with {count} cached components, {runs} runs (0 compilations each):");
    println!(
        "  engine ready (host, {count} components loaded, store, engine): median {:.1} ms, worst {:.1} ms",
        ms(ready_median),
        ms(ready_worst)
    );
    println!(
        "  first turn done (offline model):                              median {:.1} ms, worst {:.1} ms",
        ms(first_median),
        ms(first_worst)
    );
    let out = json!({
        "bench": "coldstart",
        "components": count,
        "runs": runs,
        "ready_ms_median": ms(ready_median),
        "ready_ms_worst": ms(ready_worst),
        "first_turn_ms_median": ms(first_median),
        "first_turn_ms_worst": ms(first_worst),
    });
    subs_tests::bench::write_json("coldstart", &out);
}
