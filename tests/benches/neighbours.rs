//! A neighbour's turns beside a tenant that holds the instance pool: 400
//! sessions of an agent that sleeps in `decide` (a WASI clock wait, no CPU)
//! until its wall-clock limit, redelivered per its retry policy. The
//! neighbour runs tool turns (the `tools` component and the offline model)
//! one after another, first with the server idle, then beside the sleepers;
//! the target is a p50 within 2× the idle one. The same run with the fair
//! share turned off (`tenant_slots` = all the slots) shows what it
//! prevents.
//!
//! ```text
//! cargo bench -p subs-tests --bench neighbours
//! BENCH_SLEEPERS=400 BENCH_TURNS=200 cargo bench -p subs-tests --bench neighbours
//! ```
//!
//! Output: a table on stdout and the same as JSON in
//! `target/bench-neighbours.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use subs_engine::store::TurnStatus;
use subs_engine::worker::component::{AgentPolicy, ComponentHost, HostConfig};
use subs_engine::{Engine, EngineConfig};
use subs_store_redb::RedbStore;
use subs_tests::bench::{percentile, write_json};

const NEIGHBOUR: &str = "neighbour";
const HOSTILE: &str = "hostile";

fn main() {
    // SAFETY: nothing else runs yet; see tests/benches/turns.rs.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let sleepers: usize = std::env::var("BENCH_SLEEPERS").ok().and_then(|n| n.parse().ok()).unwrap_or(400);
    let turns: usize = std::env::var("BENCH_TURNS").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(sleepers, turns));
}

struct Bench {
    engine: Engine,
    _dir: tempfile::TempDir,
}

/// An engine whose host has `tenant_slots` per tenant, with the neighbour's
/// `tools` agent and the hostile tenant's `sleeper`.
async fn start(tenant_slots: u32) -> Bench {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = Arc::new(RedbStore::open(dir.path().join("subs.redb")).expect("the store opens"));
    let engine = Engine::start(store, subs_engine::model::Models::with_offline(), EngineConfig::default())
        .await
        .expect("the engine starts");
    let cache = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compiled-components");
    let config = HostConfig { tenant_slots, compile_cache: Some(cache), ..HostConfig::default() };
    let host = ComponentHost::with_config(config).expect("the component host starts");
    for (tenant, agent, path) in
        [(NEIGHBOUR, "tools", subs_tests::guests::TOOLS), (HOSTILE, "sleeper", subs_tests::guests::TEST_SLEEPER)]
    {
        let bytes = std::fs::read(path).expect("the component is built");
        let loaded = host.load_as(tenant, agent, &AgentPolicy::default(), &bytes).expect("the component loads");
        engine.register_agent(tenant, agent, Arc::new(loaded));
    }
    Bench { engine, _dir: dir }
}

/// `turns` tool turns of the neighbour, one after another; their latencies,
/// sorted.
async fn neighbour(engine: &Engine, turns: usize, label: &str) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(turns);
    for n in 0..turns {
        let input = subs_tests::user_input("tools", None, r#"use tool add with {"a": 1, "b": 2}"#);
        let started = Instant::now();
        let session = format!("{label}-{}", n / 10);
        let accepted = engine.input(NEIGHBOUR, &session, input, Default::default()).await.expect("input accepted");
        let turn = accepted.turn_id.expect("a turn");
        let record = engine.wait_turn(NEIGHBOUR, &session, &turn).await.expect("the store answers");
        assert_eq!(record.status, TurnStatus::Done, "{record:?}");
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// Starts `count` sessions of the sleeper; returns once their first
/// deliveries have had time to take their slots.
async fn sleepers(engine: &Engine, count: usize) {
    for s in 0..count {
        let input = subs_tests::user_input("sleeper", None, "sleep");
        engine.input(HOSTILE, &format!("sleeper-{s}"), input, Default::default()).await.expect("input accepted");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(count: usize, turns: usize) {
    let slots = HostConfig::default().max_concurrent;
    println!("{count} sleeping sessions of one tenant beside a neighbour's tool turns; {turns} turns per case");
    println!();
    println!("| case | tenant slots | neighbour p50 | p99 | p50 / idle p50 |");
    println!("| --- | --- | --- | --- | --- |");
    let mut rows = Vec::new();
    let mut idle_p50 = None;
    for (case, tenant_slots, with_sleepers) in [
        ("idle", HostConfig::default().tenant_slots, false),
        ("beside the sleepers, fair share", HostConfig::default().tenant_slots, true),
        ("beside the sleepers, no share (first come)", slots, true),
    ] {
        let bench = start(tenant_slots).await;
        neighbour(&bench.engine, 10, "warm").await;
        if with_sleepers {
            sleepers(&bench.engine, count).await;
        }
        // Without a share, each neighbour turn waits for a sleeper's slot
        // (up to its 30 s wall clock): a few turns say enough.
        let turns = if tenant_slots == slots && with_sleepers { turns.min(5) } else { turns };
        let latencies = neighbour(&bench.engine, turns, "n").await;
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        let idle = *idle_p50.get_or_insert(p50);
        let ratio = p50.as_secs_f64() / idle.as_secs_f64();
        println!("| {case} | {tenant_slots} | {:.2} ms | {:.2} ms | {ratio:.2} |", ms(p50), ms(p99));
        rows.push(json!({
            "case": case,
            "tenant_slots": tenant_slots,
            "sleepers": if with_sleepers { count } else { 0 },
            "p50_ms": ms(p50),
            "p99_ms": ms(p99),
            "p50_over_idle": ratio,
        }));
        bench.engine.kill().await;
    }
    write_json("neighbours", &json!({ "slots": slots, "turns": turns, "rows": rows }));
}
