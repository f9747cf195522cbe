//! A neighbour's turns beside a tenant that holds the instance pool: 400
//! sessions of an agent that sleeps in `decide` (a WASI clock wait, no CPU)
//! until its wall-clock limit, redelivered per its retry policy. The
//! neighbour runs tool turns (the `tools` component and the offline model)
//! one after another, first with the server idle, then beside the sleepers;
//! the target is a p50 within 2× the idle one. The same run with the fair
//! share turned off (`tenant_slots` = all the slots) shows what it
//! prevents.
//!
//! A second phase goes through the HTTP server (the API served in-process
//! on `127.0.0.1:0`, with the default `[http]` bounds): the neighbour's
//! streamed tool turns from `127.0.0.1`, first idle, then beside attackers
//! from other loopback addresses: strangers without a key holding
//! connections with heads that never end (a byte a second, or past the
//! head bound) and the hostile tenant's JSON bodies stalled one byte
//! short of their `Content-Length`, each started again as soon as the
//! server cuts it off. Same target: a p50 within 2× the idle one.
//!
//! ```text
//! cargo bench -p subs-tests --bench neighbours
//! BENCH_SLEEPERS=400 BENCH_TURNS=200 BENCH_SLOW_HEADS=1000 BENCH_STALLED=64 \
//!     BENCH_ATTACK_SECS=25 cargo bench -p subs-tests --bench neighbours
//! ```
//!
//! Output: tables on stdout and the same as JSON in
//! `target/bench-neighbours.json`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use subs_engine::store::TurnStatus;
use subs_engine::worker::component::{AgentPolicy, ComponentHost, HostConfig};
use subs_engine::{Engine, EngineConfig};
use subs_store_redb::RedbStore;
use subs_tests::bench::{percentile, write_json};
use subs_tests::server::TestServer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

const NEIGHBOUR: &str = "neighbour";
const HOSTILE: &str = "hostile";
const NEIGHBOUR_KEY: &str = "subs_neighbour_bench_key_0123456789";
const HOSTILE_KEY: &str = "subs_hostile_bench_key_0123456789ab";

fn main() {
    // SAFETY: nothing else runs yet; see tests/benches/turns.rs.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let sleepers: usize = std::env::var("BENCH_SLEEPERS").ok().and_then(|n| n.parse().ok()).unwrap_or(400);
    let turns: usize = std::env::var("BENCH_TURNS").ok().and_then(|n| n.parse().ok()).unwrap_or(200);
    let attack = Attack {
        slow_heads: std::env::var("BENCH_SLOW_HEADS").ok().and_then(|n| n.parse().ok()).unwrap_or(1000),
        stalled: std::env::var("BENCH_STALLED").ok().and_then(|n| n.parse().ok()).unwrap_or(64),
        seconds: Duration::from_secs(
            std::env::var("BENCH_ATTACK_SECS").ok().and_then(|n| n.parse().ok()).unwrap_or(25),
        ),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    let engine_rows = runtime.block_on(run(sleepers, turns));
    let edge_rows = runtime.block_on(edge(turns, attack));
    let slots = HostConfig::default().max_concurrent;
    write_json("neighbours", &json!({ "slots": slots, "turns": turns, "rows": engine_rows, "edge": edge_rows }));
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
        let accepted =
            engine.sessions().input(NEIGHBOUR, &session, input, Default::default()).await.expect("input accepted");
        let turn = accepted.turn_id.expect("a turn");
        let record = engine.reads().wait_turn(NEIGHBOUR, &session, &turn).await.expect("the store answers");
        assert_eq!(record.status, TurnStatus::Done, "{record:?}");
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// Starts `count` sessions of the sleeper; returns once each is running
/// its turn (its delivery is out, to take a slot).
async fn sleepers(engine: &Engine, count: usize) {
    for s in 0..count {
        let input = subs_tests::user_input("sleeper", None, "sleep");
        engine
            .sessions()
            .input(HOSTILE, &format!("sleeper-{s}"), input, Default::default())
            .await
            .expect("input accepted");
    }
    for s in 0..count {
        let session = format!("sleeper-{s}");
        subs_tests::wait::eventually(Duration::from_secs(30), format!("{session} runs"), || async {
            let snapshot = engine.reads().snapshot(HOSTILE, &session).await.expect("the store answers");
            snapshot.is_some_and(|s| s.record.status == subs_engine::store::SessionStatus::Running)
        })
        .await;
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn run(count: usize, turns: usize) -> Vec<serde_json::Value> {
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
    rows
}

/// The attackers of the HTTP phase: `slow_heads` connections without a
/// key, `stalled` bodies of the hostile tenant, for at least `seconds`
/// of the neighbour's turns.
#[derive(Debug, Clone, Copy)]
struct Attack {
    slow_heads: usize,
    stalled: usize,
    seconds: Duration,
}

/// How the attackers' connections ended, counted.
#[derive(Debug, Default)]
struct Counts {
    /// Connections made.
    connections: AtomicU64,
    /// Answered 431 (a head past the bound).
    too_large: AtomicU64,
    /// Answered 503 (past a connection cap).
    unavailable: AtomicU64,
    /// Answered 429 (past the tenant's bytes in flight).
    limited: AtomicU64,
    /// Answered 408 (a stalled body).
    timed_out: AtomicU64,
    /// Closed without an answer (a head that took too long).
    closed: AtomicU64,
}

impl Counts {
    fn count(&self, status: Option<u16>) {
        let counter = match status {
            Some(431) => &self.too_large,
            Some(503) => &self.unavailable,
            Some(429) => &self.limited,
            Some(408) => &self.timed_out,
            _ => &self.closed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn json(&self) -> serde_json::Value {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "connections": n(&self.connections),
            "431": n(&self.too_large),
            "503": n(&self.unavailable),
            "429": n(&self.limited),
            "408": n(&self.timed_out),
            "closed": n(&self.closed),
        })
    }
}

/// The neighbour's turns and `/healthz` through the HTTP API, idle, then
/// beside the attackers.
async fn edge(turns: usize, attack: Attack) -> Vec<serde_json::Value> {
    if let Some(files) = subs_server::edge::raise_fd_limit() {
        let needed = 2 * (attack.slow_heads + attack.stalled) as u64 + 512;
        assert!(files >= needed, "{needed} open files are needed (both ends of each connection), the limit is {files}");
    }
    let server = TestServer::builder()
        .keys(&[(NEIGHBOUR, NEIGHBOUR_KEY), (HOSTILE, HOSTILE_KEY)])
        .server_config(subs_server::ServerConfig::default())
        .start()
        .await;
    let (status, body) = server.upload("tools", subs_tests::guests::TOOLS, Some(NEIGHBOUR_KEY)).await;
    assert_eq!(status, 201, "the neighbour's agent: {body}");
    let addr: SocketAddr = server.url("").trim_start_matches("http://").parse().expect("the server's address");
    let client = reqwest::Client::new();
    println!();
    println!(
        "Over HTTP: {} connections with unfinished heads (no key), {} stalled bodies of one tenant; {turns} turns per case",
        attack.slow_heads, attack.stalled
    );
    println!();
    println!("| case | turns | neighbour p50 | p99 | p50 / idle p50 | /healthz p50 | max | attackers' connections |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    http_turns(&client, &server, 10, Duration::ZERO, "warm").await;
    let mut rows = Vec::new();
    let mut idle_p50 = None;
    for (case, attacking) in [("over HTTP, idle", false), ("over HTTP, beside slow heads and stalled bodies", true)] {
        let counts = Arc::new(Counts::default());
        let mut attackers = tokio::task::JoinSet::new();
        if attacking {
            for n in 0..attack.slow_heads {
                // 200 an address: under the 256 each may hold.
                let from = Ipv4Addr::new(127, 0, 1, 2 + (n / 200) as u8);
                attackers.spawn(slow_head(addr, from, n % 4 == 0, counts.clone()));
            }
            for n in 0..attack.stalled {
                let from = Ipv4Addr::new(127, 0, 2, 2 + (n / 200) as u8);
                attackers.spawn(stalled_body(addr, from, n, counts.clone()));
            }
            // Every attacker connected and sending.
            let attackers = (attack.slow_heads + attack.stalled) as u64;
            subs_tests::wait::eventually(Duration::from_secs(30), "every attacker connects", || async {
                counts.connections.load(Ordering::Relaxed) >= attackers
            })
            .await;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let probes = tokio::spawn(healthz(server.url("/healthz"), stop.clone()));
        // Long enough for the attackers' connections to be cut off (10 s
        // for a head or a stalled body) and started again; idle as long,
        // so that both medians are over as warm a server.
        let least = attack.seconds;
        let latencies = http_turns(&client, &server, turns, least, case).await;
        stop.store(true, Ordering::SeqCst);
        let mut health = probes.await.expect("the /healthz probes");
        health.sort();
        attackers.abort_all();
        while attackers.join_next().await.is_some() {}
        let (p50, p99) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99));
        let idle = *idle_p50.get_or_insert(p50);
        let ratio = p50.as_secs_f64() / idle.as_secs_f64();
        let healthz = percentile(&health, 0.5);
        let ended = counts.json();
        let healthz_max = ms(health.last().copied().unwrap_or_default());
        println!(
            "| {case} | {} | {:.2} ms | {:.2} ms | {ratio:.2} | {:.2} ms | {healthz_max:.2} ms | {ended} |",
            latencies.len(),
            ms(p50),
            ms(p99),
            ms(healthz)
        );
        rows.push(json!({
            "case": case,
            "slow_heads": if attacking { attack.slow_heads } else { 0 },
            "stalled": if attacking { attack.stalled } else { 0 },
            "turns": latencies.len(),
            "p50_ms": ms(p50),
            "p99_ms": ms(p99),
            "p50_over_idle": ratio,
            "healthz_p50_ms": ms(healthz),
            "healthz_max_ms": healthz_max,
            "attackers": ended,
        }));
    }
    server.stop().await;
    rows
}

/// At least `turns` streamed tool turns of the neighbour through the API,
/// for at least `least`, on one kept-alive client; their latencies,
/// sorted.
async fn http_turns(
    client: &reqwest::Client,
    server: &TestServer,
    turns: usize,
    least: Duration,
    label: &str,
) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(turns);
    let began = Instant::now();
    for n in 0.. {
        if n >= turns && began.elapsed() >= least {
            break;
        }
        let body = json!({"type": "client.message", "agent_id": "tools", "stream": true,
            "message": {"role": "user", "content": r#"use tool add with {"a": 1, "b": 2}"#}});
        let started = Instant::now();
        let session = format!("http-{}-{}", label.replace(' ', "-"), n / 10);
        let response = client
            .post(server.url(&format!("/v1/sessions/{session}/input")))
            .bearer_auth(NEIGHBOUR_KEY)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("the turn's request");
        assert_eq!(response.status(), 200, "the neighbour's turn");
        let text = response.text().await.expect("the turn's stream");
        assert!(text.contains("event: turn.done"), "the turn ends: {text:.300}");
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// `/healthz` on a new connection every 100 ms, as a load balancer checks;
/// each one's time, until `stop`.
async fn healthz(url: String, stop: Arc<std::sync::atomic::AtomicBool>) -> Vec<Duration> {
    let mut took = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    while !stop.load(Ordering::SeqCst) {
        every.tick().await;
        let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().expect("a client");
        let started = Instant::now();
        let response = client.get(&url).send().await.expect("/healthz answers");
        assert_eq!(response.status(), 200, "/healthz");
        took.push(started.elapsed());
    }
    took
}

/// A connection from `from` (another loopback address: another host to
/// the server's per-address cap).
async fn connect_from(server: SocketAddr, from: Ipv4Addr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::V4(SocketAddrV4::new(from, 0)))?;
    socket.connect(server).await
}

/// Writes `chunks` (each after `pause`, then holds the connection) until
/// the server answers or closes; its status, if it answered.
async fn hold(stream: TcpStream, chunks: Vec<Vec<u8>>, pause: Duration) -> Option<u16> {
    let (mut read, mut write) = stream.into_split();
    let writing = tokio::spawn(async move {
        for chunk in chunks {
            if write.write_all(&chunk).await.is_err() {
                return;
            }
            // A slow sender: the attack.
            subs_tests::wait::pace(pause).await;
        }
        std::future::pending::<()>().await;
    });
    let mut head = [0u8; 12];
    let status = match read.read_exact(&mut head).await {
        Ok(_) => std::str::from_utf8(&head[9..12]).ok().and_then(|s| s.parse().ok()),
        Err(_) => None,
    };
    writing.abort();
    status
}

/// A stranger without a key: a `GET /healthz` whose head never ends,
/// either a byte a second (`big` false) or 100 KiB at once, past the
/// head bound; started again once the server cuts it off.
async fn slow_head(server: SocketAddr, from: Ipv4Addr, big: bool, counts: Arc<Counts>) {
    loop {
        let Ok(stream) = connect_from(server, from).await else {
            // Refused: an attacker tries again, not in a busy loop.
            subs_tests::wait::pace(Duration::from_millis(100)).await;
            continue;
        };
        counts.connections.fetch_add(1, Ordering::Relaxed);
        let mut chunks = vec![b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".to_vec()];
        if big {
            chunks.push(vec![b'a'; 100 << 10]);
        } else {
            chunks.extend((0..600).map(|_| b"a".to_vec()));
        }
        let status = hold(stream, chunks, Duration::from_secs(1)).await;
        counts.count(status);
        // Cut off: it starts again a second later, not in a busy loop.
        subs_tests::wait::pace(Duration::from_secs(1)).await;
    }
}

/// The hostile tenant: a 4 MiB JSON input one byte short of its
/// `Content-Length`, stalled; started again once answered (408 after the
/// stall, or 429 at once past the tenant's bytes in flight).
async fn stalled_body(server: SocketAddr, from: Ipv4Addr, n: usize, counts: Arc<Counts>) {
    let length = 4 << 20;
    loop {
        let Ok(stream) = connect_from(server, from).await else {
            // Refused: an attacker tries again, not in a busy loop.
            subs_tests::wait::pace(Duration::from_millis(100)).await;
            continue;
        };
        counts.connections.fetch_add(1, Ordering::Relaxed);
        let head = format!(
            "POST /v1/sessions/stalled-{n}/input HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {HOSTILE_KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        );
        // The head first: a body refused at once (429, past the tenant's
        // bytes in flight) is not sent, as a client reading its answer
        // would not; one the server reads is sent one byte short.
        let mut stream = stream;
        let mut answer = [0u8; 12];
        let status = if stream.write_all(head.as_bytes()).await.is_err() {
            None
        } else if let Ok(read) = tokio::time::timeout(Duration::from_millis(100), stream.read_exact(&mut answer)).await
        {
            read.ok().and_then(|_| std::str::from_utf8(&answer[9..12]).ok()?.parse().ok())
        } else {
            let mut body = vec![b' '; length - 1];
            body[0] = b'{';
            hold(stream, vec![body], Duration::ZERO).await
        };
        counts.count(status);
        // A refused body tries again a second later, not in a busy loop.
        subs_tests::wait::pace(Duration::from_secs(1)).await;
    }
}
