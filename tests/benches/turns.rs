//! End-to-end turns through the durable loop: the `passthrough` component
//! decides every step in-process (a fresh instance per decision), the
//! built-in offline model answers, and redb commits every step before it is
//! acted on. Measures turns and steps per second, turn latency, and fsyncs
//! per step at several numbers of concurrent sessions, and memory with
//! many idle sessions stored: resident and on the heap in this process,
//! per active session on the heap, and resident in a new process that
//! starts an engine on their store.
//!
//! ```text
//! cargo bench -p subs-tests --bench turns
//! BENCH_LEVELS=1,16,256,1024 BENCH_SECONDS=5 BENCH_IDLE=10000 cargo bench -p subs-tests --bench turns
//! BENCH_PG_LEVELS=1,16,256 BENCH_IDLE=0 cargo bench -p subs-tests --bench turns
//! ```
//!
//! The same levels then run on PostgreSQL (`BENCH_PG_LEVELS`, default
//! 1,16,256; empty: none), on a throwaway local cluster
//! (`subs_store_postgres::testing`, `fsync` and `synchronous_commit` on),
//! and a last table sets the two backends side by side: steps/s at 16 and
//! 256 sessions and the turn p50 of one session. Where PostgreSQL is not
//! installed its runs are skipped, saying so. For PostgreSQL the writer
//! column is the CPU time of the database server's processes per step
//! (the store's writer is a task of this process, counted in its CPU).
//!
//! Each concurrency level runs on a fresh store: N concurrent clients, each
//! sending one user message after another for `BENCH_SECONDS` (default 3),
//! in conversations of 10 turns (then a new session); a turn
//! is `client.message` → decision → the offline model's call → `llm.finished`
//! → decision → done. A *step* is one stored decision point (what the
//! engine's `steps` table holds); steps per turn are counted from the
//! store, not assumed. Output: a table on stdout and the same as JSON in
//! `target/bench-turns.json`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use subs_engine::store::{SessionKey, Store, TurnStatus};
use subs_engine::{Engine, EngineConfig};
use subs_store_postgres::PgStore;
use subs_store_postgres::testing::TestCluster;
use subs_store_redb::RedbStore;

const TENANT: &str = "bench";
/// Turns per conversation before a client moves on to a new session.
const TURNS_PER_SESSION: usize = 10;

fn main() {
    // A backtrace captured at every wasmtime store drop costs more than the
    // decision itself; the engine never needs one.
    // SAFETY: nothing else runs yet; the variable is read by std later.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
    let levels: Vec<usize> = std::env::var("BENCH_LEVELS")
        .ok()
        .map(|l| l.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256, 1024]);
    let seconds: f64 = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let idle: usize = std::env::var("BENCH_IDLE").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    if let Some(path) = std::env::var_os(RESTART_ENV) {
        runtime.block_on(restarted(std::path::PathBuf::from(path)));
        return;
    }
    let pg_levels: Vec<usize> = std::env::var("BENCH_PG_LEVELS")
        .ok()
        .map(|l| l.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 16, 256]);
    runtime.block_on(run(levels, pg_levels, Duration::from_secs_f64(seconds), idle));
}

struct Bench {
    engine: Engine,
    store: BenchStore,
}

/// The store a level runs on.
enum BenchStore {
    Redb { store: Arc<RedbStore>, _dir: tempfile::TempDir },
    Postgres { store: Arc<PgStore>, cluster: &'static TestCluster },
}

/// Which backend a level runs on.
#[derive(Clone, Copy)]
enum Backend {
    Redb,
    Postgres(&'static TestCluster),
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Redb => "redb",
            Backend::Postgres(_) => "postgres",
        }
    }
}

impl BenchStore {
    fn store(&self) -> Arc<dyn Store> {
        match self {
            BenchStore::Redb { store, .. } => store.clone(),
            BenchStore::Postgres { store, .. } => store.clone(),
        }
    }

    fn redb(&self) -> &RedbStore {
        match self {
            BenchStore::Redb { store, .. } => store,
            BenchStore::Postgres { .. } => panic!("this part of the bench runs on redb only"),
        }
    }

    async fn close(&self) {
        match self {
            BenchStore::Redb { store, .. } => store.close().await.expect("the store closes"),
            BenchStore::Postgres { store, .. } => store.close().await.expect("the store closes"),
        }
    }

    /// The database file's size (redb); PostgreSQL's files are the
    /// server's and not counted.
    fn file_bytes(&self) -> u64 {
        match self {
            BenchStore::Redb { store, .. } => std::fs::metadata(store.path()).map_or(0, |m| m.len()),
            BenchStore::Postgres { .. } => 0,
        }
    }

    /// CPU time of the store's own writer: redb's writer threads, or the
    /// PostgreSQL server's processes.
    fn writer_cpu(&self) -> WriterCpu {
        match self {
            BenchStore::Redb { .. } => WriterCpu::Threads(writer_cpu_times()),
            BenchStore::Postgres { cluster, .. } => WriterCpu::Server(server_cpu(cluster)),
        }
    }
}

async fn start() -> Bench {
    start_with(Backend::Redb).await
}

async fn start_with(backend: Backend) -> Bench {
    let store = match backend {
        Backend::Redb => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let store = Arc::new(RedbStore::open(dir.path().join("subs.redb")).expect("the store opens"));
            BenchStore::Redb { store, _dir: dir }
        }
        Backend::Postgres(cluster) => {
            let store = PgStore::open(&cluster.fresh_database(), subs_store_postgres::PgOptions::default())
                .await
                .expect("the PostgreSQL store opens");
            BenchStore::Postgres { store: Arc::new(store), cluster }
        }
    };
    let engine = start_engine(store.store()).await;
    Bench { engine, store }
}

async fn start_on(path: &std::path::Path) -> (Engine, Arc<RedbStore>) {
    let store = Arc::new(RedbStore::open(path).expect("the store opens"));
    (start_engine(store.clone()).await, store)
}

async fn start_engine(store: Arc<dyn Store>) -> Engine {
    let engine = Engine::start(store, subs_engine::model::Models::with_offline(), EngineConfig::default())
        .await
        .expect("the engine starts");
    engine.register_agent(TENANT, "passthrough", Arc::new(subs_tests::agent(subs_tests::guests::PASSTHROUGH_LEAN)));
    engine
}

/// Set in a child process of this bench: the store file it opens, to
/// report its resident memory as an engine restarted on that store.
const RESTART_ENV: &str = "BENCH_RESTART_STORE";

/// The child's part: starts an engine on the store at `path` as `subs
/// serve` would, runs one turn of a new session (so the component, the
/// instance pool and the store have each been used once), waits until the
/// session's actor has left, and prints its resident memory.
async fn restarted(path: std::path::PathBuf) {
    let (engine, store) = start_on(&path).await;
    turn(&engine, "probe", 0).await;
    wait_for_actors(&engine).await;
    let rss = rss_kib();
    println!("rss_kib {rss}");
    engine.kill().await;
    store.close().await.expect("the store closes");
}

/// The resident memory (KiB) of a new process of this bench that starts an
/// engine on the store at `path`: see [`restarted`].
fn restarted_rss(path: &std::path::Path) -> u64 {
    let exe = std::env::current_exe().expect("the bench's own path");
    let out = std::process::Command::new(exe).env(RESTART_ENV, path).output().expect("the bench runs itself");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().find_map(|line| line.strip_prefix("rss_kib ")?.trim().parse().ok()).unwrap_or_else(|| {
        panic!("the restarted engine reported no memory: {stdout} {}", String::from_utf8_lossy(&out.stderr))
    })
}

async fn turn(engine: &Engine, session: &str, n: usize) {
    let input = subs_tests::user_input("passthrough", Some(&format!("turn-{n}")), format!("message {n}"));
    let accepted = engine.sessions().input(TENANT, session, input, Default::default()).await.expect("input accepted");
    let turn_id = accepted.turn_id.expect("a turn");
    let record = engine.reads().wait_turn(TENANT, session, &turn_id).await.expect("the store answers");
    assert_eq!(record.status, TurnStatus::Done, "{record:?}");
}

struct Level {
    sessions: usize,
    turns: usize,
    steps: u64,
    commits: u64,
    batches: u64,
    elapsed: Duration,
    /// CPU time the whole process used meanwhile (engine, component,
    /// store writer and the clients).
    cpu: Duration,
    /// CPU time of the store's writer thread alone: the one resource no
    /// number of cores adds to.
    writer_cpu: Duration,
    latencies: Vec<Duration>,
    /// Size of the database file at the end, and what redb says it holds:
    /// the difference is free pages (redb frees replaced pages only at a
    /// durable commit, so journaled commits between checkpoints grow it).
    file_bytes: u64,
    stored_bytes: u64,
}

async fn level(backend: Backend, sessions: usize, length: Duration) -> Level {
    let bench = start_with(backend).await;
    let store = bench.store.store();
    let engine = bench.engine.clone();
    // One warm-up turn per session, so every session exists (and the
    // component is warm) before the clock starts.
    let warm: Vec<_> = (0..sessions)
        .map(|s| {
            let engine = engine.clone();
            tokio::spawn(async move { turn(&engine, &format!("s{s}-0"), 0).await })
        })
        .collect();
    for task in warm {
        task.await.expect("warm-up");
    }
    let before = store.stats().expect("stats");
    let steps_before = count_steps(&*store, sessions, 1).await;

    let cpu_before = cpu_time();
    let writer_before = bench.store.writer_cpu();
    let start = Instant::now();
    let until = start + length;
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let engine = engine.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut n = 1;
                while Instant::now() < until {
                    // Conversations of TURNS_PER_SESSION turns, then a new
                    // one: every decision carries its whole conversation,
                    // so unbounded sessions would measure history length.
                    let session = format!("s{s}-{}", n / TURNS_PER_SESSION);
                    let t = Instant::now();
                    turn(&engine, &session, n).await;
                    latencies.push(t.elapsed());
                    n += 1;
                }
                (n, latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut conversations = 0;
    for task in tasks {
        let (n, done) = task.await.expect("a session's turns");
        conversations = conversations.max(n / TURNS_PER_SESSION + 1);
        latencies.extend(done);
    }
    let elapsed = start.elapsed();
    let cpu = cpu_time().saturating_sub(cpu_before);
    let writer_cpu = writer_before.since(&bench.store.writer_cpu());
    let after = store.stats().expect("stats");
    let steps = count_steps(&*store, sessions, conversations).await - steps_before;
    latencies.sort();
    let file_bytes = bench.store.file_bytes();
    let stored_bytes = store.stored_bytes().await.expect("the store's size");
    drop(store);
    // Lingering actors would otherwise free this level's engine and store
    // (its page cache) during the next measurement.
    shut(&bench).await;
    Level {
        sessions,
        turns: latencies.len(),
        steps,
        commits: after.commits - before.commits,
        batches: after.batches - before.batches,
        elapsed,
        cpu,
        writer_cpu,
        latencies,
        file_bytes,
        stored_bytes,
    }
}

/// Stops the bench's engine (its actors at once) and closes its store.
async fn shut(bench: &Bench) {
    bench.engine.clone().kill().await;
    bench.store.close().await;
}

/// Steps stored by the first `conversations` conversations of each client.
async fn count_steps(store: &dyn Store, sessions: usize, conversations: usize) -> u64 {
    let mut steps = 0;
    for s in 0..sessions {
        for c in 0..conversations {
            steps +=
                store.steps(&SessionKey::new(TENANT, format!("s{s}-{c}")), 0, usize::MAX).await.expect("steps").len()
                    as u64;
        }
    }
    steps
}

const MIB: f64 = 1024.0 * 1024.0;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// CPU time this process has used (user + system), from
/// `/proc/self/stat` (Linux; clock ticks of 10 ms).
fn cpu_time() -> Duration {
    std::fs::read_to_string("/proc/self/stat").map_or(Duration::ZERO, |stat| stat_cpu(&stat))
}

/// CPU time each of the store's writer threads has used, by thread id
/// (Linux; threads are found by name, `subs-store-writer`, which the
/// kernel cuts to 15 bytes). By thread, because the previous level's
/// store may still be shutting down while the next one starts.
fn writer_cpu_times() -> std::collections::HashMap<std::ffi::OsString, Duration> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Default::default() };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| "subs-store-writer".starts_with(name.trim()))
        })
        .filter_map(|task| Some((task.file_name(), stat_cpu(&std::fs::read_to_string(task.path().join("stat")).ok()?))))
        .collect()
}

/// CPU time a store's writer has used so far.
enum WriterCpu {
    /// redb's writer threads, by thread id.
    Threads(std::collections::HashMap<std::ffi::OsString, Duration>),
    /// The PostgreSQL server's processes.
    Server(Duration),
}

impl WriterCpu {
    /// The CPU time used between `self` and `now`.
    fn since(&self, now: &WriterCpu) -> Duration {
        match (self, now) {
            (WriterCpu::Threads(before), WriterCpu::Threads(now)) => {
                now.iter().map(|(tid, now)| now.saturating_sub(before.get(tid).copied().unwrap_or_default())).sum()
            }
            (WriterCpu::Server(before), WriterCpu::Server(now)) => now.saturating_sub(*before),
            _ => Duration::ZERO,
        }
    }
}

/// CPU time of the cluster's server processes (Linux): the postmaster's
/// own and that of its children, the live ones read one by one and the
/// ended ones counted by the postmaster (its `cutime` and `cstime`).
fn server_cpu(cluster: &TestCluster) -> Duration {
    let Some(postmaster) = cluster.postmaster_pid() else { return Duration::ZERO };
    let stat_of = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    let ticks = |stat: &str, skip: usize, take: usize| -> u64 {
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        rest.split_whitespace().skip(skip).take(take).filter_map(|f| f.parse::<u64>().ok()).sum()
    };
    let mut total = stat_of(&postmaster.to_string()).map_or(0, |stat| ticks(&stat, 11, 4));
    let Ok(processes) = std::fs::read_dir("/proc") else { return Duration::ZERO };
    for process in processes.flatten() {
        let name = process.file_name();
        let Some(pid) = name.to_str().filter(|pid| pid.bytes().all(|b| b.is_ascii_digit())) else { continue };
        let Some(stat) = stat_of(pid) else { continue };
        // The parent pid is the 2nd field after the command name.
        let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if rest.split_whitespace().nth(1).and_then(|ppid| ppid.parse::<u32>().ok()) == Some(postmaster) {
            total += ticks(&stat, 11, 2);
        }
    }
    Duration::from_millis(total * 10)
}

/// User + system time from a `stat` line of procfs.
fn stat_cpu(stat: &str) -> Duration {
    // Fields after the command name (which is in parentheses): state is
    // the 3rd field, utime the 14th, stime the 15th.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|f| f.parse().ok()).collect();
    let ticks = fields.iter().sum::<u64>();
    Duration::from_millis(ticks * 10)
}

/// Resident memory of this process, in KiB (Linux; 0 where it cannot be
/// read).
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss = status.lines().find_map(|l| l.strip_prefix("VmRSS:"));
    rss.and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

/// Sessions started at once to measure what an active session holds.
const ACTIVE_WAVE: usize = 1024;

async fn idle_sessions(count: usize) -> serde_json::Value {
    let before = rss_kib();
    let bench = start().await;
    let started = rss_kib();
    subs_tests::heap::start();
    let half = count / 2;
    let at_half = create_idle(&bench, 0..half).await;
    let heap_at_half = subs_tests::heap::live();
    let stored = create_idle(&bench, half..count).await;
    let heap_stored = subs_tests::heap::live();
    // The total includes what does not grow with sessions: the store's
    // page cache (capped), the instance pool's resident pages and what the
    // allocator kept from running the turns. The second half's growth is
    // what one more idle session costs.
    let per_session = (stored.saturating_sub(started) as f64 * 1024.0) / count as f64;
    let marginal = (stored.saturating_sub(at_half) as f64 * 1024.0) / (count - half).max(1) as f64;
    println!(
        "\nidle sessions: {count} stored; resident {before} KiB before the engine, {started} KiB started, {at_half} KiB with {half}, {stored} KiB with {count}: {per_session:.0} B per idle session in all, {marginal:.0} B for each of the second {} ({} still active)",
        count - half,
        bench.engine.reads().active_sessions()
    );
    // The heap alone, without the allocator's reserves or the instance
    // pool's slots (mapped outside it).
    let heap_per_session = heap_stored as f64 / count as f64;
    let heap_marginal = (heap_stored - heap_at_half) as f64 / (count - half).max(1) as f64;
    println!(
        "idle sessions, heap: {} KiB live after {half}, {} KiB after {count}: {heap_per_session:.0} B per idle session in all, {heap_marginal:.0} B for each of the second {}",
        heap_at_half / 1024,
        heap_stored / 1024,
        count - half
    );

    // Active: a wave of new sessions, counted on the heap as soon as each
    // has run its turn, while their actors (and the sessions they hold in
    // memory) linger, and again once they have left.
    let wave = count..count + ACTIVE_WAVE;
    let heap_before_wave = subs_tests::heap::live();
    run_wave(&bench.engine, &wave.collect::<Vec<_>>()).await;
    let heap_active = subs_tests::heap::live() - heap_before_wave;
    let active = bench.engine.reads().active_sessions();
    wait_for_actors(&bench.engine).await;
    let heap_left = subs_tests::heap::live() - heap_before_wave;
    subs_tests::heap::stop();
    let per_active = (heap_active - heap_left) as f64 / active.max(1) as f64;
    println!(
        "active sessions: {active} of {ACTIVE_WAVE} new ones in memory at once: heap +{} KiB, +{} KiB once they left: {per_active:.0} B per active session",
        heap_active / 1024,
        heap_left / 1024
    );

    // A tenant's session quota is checked before every new session: what
    // listing the tenant's sessions costs, reading the count the store
    // keeps (once per tenant and process), and reading the count the
    // engine keeps after that.
    let t = Instant::now();
    let listed = bench.store.redb().sessions(Some(TENANT)).await.expect("sessions").len() as u64;
    let list_time = t.elapsed();
    let t = Instant::now();
    let counted = bench.store.redb().session_count(TENANT).await.expect("a count");
    let count_time = t.elapsed();
    bench.engine.reads().session_count(TENANT).await.expect("a count");
    let t = Instant::now();
    let kept = bench.engine.reads().session_count(TENANT).await.expect("a count");
    let kept_time = t.elapsed();
    assert!(listed == counted && counted == kept, "{listed} listed, {counted} counted, {kept} kept");
    println!(
        "a tenant's sessions ({listed}): listed in {:.2} ms, the store's count read in {:.3} ms, the engine's kept count in {:.1} µs",
        list_time.as_secs_f64() * 1e3,
        count_time.as_secs_f64() * 1e3,
        kept_time.as_secs_f64() * 1e6
    );
    let quota = json!({"sessions": listed, "list_ms": list_time.as_secs_f64() * 1e3,
        "count_ms": count_time.as_secs_f64() * 1e3, "kept_us": kept_time.as_secs_f64() * 1e6});

    // Restarted: what an engine holds once it has been started on the store
    // of all these sessions, against one started on an empty store, each in
    // a process of its own (so nothing of this process's history counts).
    let total = count + ACTIVE_WAVE;
    let file = bench.store.redb().path().to_path_buf();
    shut(&bench).await;
    let on_stored = restarted_rss(&file);
    let empty_dir = tempfile::tempdir().expect("a temporary directory");
    let on_empty = restarted_rss(&empty_dir.path().join("subs.redb"));
    let per_restarted = (on_stored.saturating_sub(on_empty) as f64 * 1024.0) / total as f64;
    println!(
        "restarted: an engine started on the store of these {total} sessions holds {on_stored} KiB, on an empty store {on_empty} KiB: {per_restarted:.0} B per stored idle session"
    );
    json!({
        "idle_sessions": count,
        "rss_kib_engine_started": started,
        "rss_kib_with_half": at_half,
        "rss_kib_with_sessions": stored,
        "bytes_per_idle_session": per_session,
        "bytes_per_additional_idle_session": marginal,
        "heap_bytes_per_idle_session": heap_per_session,
        "heap_bytes_per_additional_idle_session": heap_marginal,
        "active_sessions": active,
        "heap_bytes_per_active_session": per_active,
        "stored_sessions_at_restart": total,
        "rss_kib_restarted_on_store": on_stored,
        "rss_kib_restarted_on_empty_store": on_empty,
        "bytes_per_stored_idle_session_after_restart": per_restarted,
        "session_quota_check": quota,
    })
}

/// Runs one turn in each of the sessions `ids` (in waves, so the machine is
/// not asked for thousands of decisions at once), waits until every actor
/// has left, and returns the resident memory then.
async fn create_idle(bench: &Bench, ids: std::ops::Range<usize>) -> u64 {
    for wave in ids.collect::<Vec<_>>().chunks(256) {
        run_wave(&bench.engine, wave).await;
    }
    wait_for_actors(&bench.engine).await;
    rss_kib()
}

/// One turn in each of the sessions `ids`, all at once.
async fn run_wave(engine: &Engine, ids: &[usize]) {
    let tasks: Vec<_> = ids
        .iter()
        .map(|&s| {
            let engine = engine.clone();
            tokio::spawn(async move { turn(&engine, &format!("idle{s}"), 0).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("an idle session's turn");
    }
}

/// Waits (at most 10 s) until every session's actor has left: a quiet
/// session's actor lingers a second, then exits on its own.
async fn wait_for_actors(engine: &Engine) {
    subs_tests::wait::eventually(Duration::from_secs(10), "every actor leaves", || async {
        engine.reads().active_sessions() == 0
    })
    .await;
}

async fn run(levels: Vec<usize>, pg_levels: Vec<usize>, length: Duration, idle: usize) {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    let postgres = if pg_levels.is_empty() { None } else { TestCluster::shared() };
    if !pg_levels.is_empty() && postgres.is_none() {
        println!("postgres: skipped (PostgreSQL is not installed; see the line above)\n");
    }
    let runs =
        [(Backend::Redb, levels)].into_iter().chain(postgres.map(|cluster| (Backend::Postgres(cluster), pg_levels)));
    for (backend, levels) in runs {
        let (backend_rows, backend_summary) = run_levels(backend, levels, length).await;
        rows.extend(backend_rows);
        summary.push(backend_summary);
    }
    println!("\nside by side: steps/s at 16 and 256 sessions, and the turn p50 of one session\n");
    println!("{:>10} {:>14} {:>15} {:>17}", "backend", "16: steps/s", "256: steps/s", "1: turn p50");
    for (name, sixteen, many, one) in &summary {
        let cell = |v: Option<f64>, unit: &str| v.map_or("-".to_owned(), |v| format!("{v:.0}{unit}"));
        let p50 = one.map_or("-".to_owned(), |ms| format!("{ms:.2} ms"));
        println!("{:>10} {:>14} {:>15} {:>17}", name, cell(*sixteen, ""), cell(*many, ""), p50);
    }
    let side_by_side: Vec<_> = summary
        .iter()
        .map(|(name, sixteen, many, one)| {
            json!({"backend": name, "steps_per_sec_16": sixteen, "steps_per_sec_256": many, "turn_p50_ms_1": one})
        })
        .collect();
    let idle = if idle > 0 { idle_sessions(idle).await } else { serde_json::Value::Null };
    let out = json!({"bench": "turns", "levels": rows, "side_by_side": side_by_side, "idle": idle});
    subs_tests::bench::write_json("turns", &out);
}

/// What the side-by-side table shows of a backend: its name, steps/s at
/// 16 and at 256 sessions, and the turn p50 (ms) of one session.
type Summary = (&'static str, Option<f64>, Option<f64>, Option<f64>);

async fn run_levels(backend: Backend, levels: Vec<usize>, length: Duration) -> (Vec<serde_json::Value>, Summary) {
    let what = match backend {
        Backend::Redb => "redb",
        Backend::Postgres(_) => "PostgreSQL (local, fsync and synchronous_commit on)",
    };
    println!("turns through the durable loop: passthrough component + offline model + {what}, {length:?} per level\n");
    let writer_column = match backend {
        Backend::Redb => "writer µs/step***",
        Backend::Postgres(_) => "server µs/step***",
    };
    println!(
        "{:>9} {:>8} {:>9} {:>10} {:>10} {:>11} {:>11} {:>12} {:>13} {:>14} {:>17} {:>16}",
        "sessions",
        "turns",
        "turns/s",
        "steps/s",
        "steps/turn",
        "turn p50",
        "turn p99",
        "step p50*",
        "fsyncs/step",
        "CPU µs/step**",
        writer_column,
        "file/stored MiB"
    );
    let mut rows = Vec::new();
    let mut summary: Summary = (backend.name(), None, None, None);
    for sessions in levels {
        let rss_before = rss_kib();
        let l = level(backend, sessions, length).await;
        let rss_after = rss_kib();
        let secs = l.elapsed.as_secs_f64();
        let steps_per_turn = l.steps as f64 / l.turns.max(1) as f64;
        let p50 = subs_tests::bench::percentile(&l.latencies, 0.50);
        let p99 = subs_tests::bench::percentile(&l.latencies, 0.99);
        let step_p50 = p50.div_f64(steps_per_turn.max(1.0));
        let cpu_per_step = l.cpu.as_secs_f64() * 1e6 / l.steps.max(1) as f64;
        let writer_per_step = l.writer_cpu.as_secs_f64() * 1e6 / l.steps.max(1) as f64;
        let steps_per_sec = l.steps as f64 / secs;
        match sessions {
            1 => summary.3 = Some(ms(p50)),
            16 => summary.1 = Some(steps_per_sec),
            256 => summary.2 = Some(steps_per_sec),
            _ => {}
        }
        println!(
            "{:>9} {:>8} {:>9.0} {:>10.0} {:>10.1} {:>9.2}ms {:>9.2}ms {:>10.3}ms {:>13.3} {:>14.0} {:>17.0} {:>7.1} / {:>6.1}",
            l.sessions,
            l.turns,
            l.turns as f64 / secs,
            steps_per_sec,
            steps_per_turn,
            ms(p50),
            ms(p99),
            ms(step_p50),
            l.commits as f64 / l.steps.max(1) as f64,
            cpu_per_step,
            writer_per_step,
            l.file_bytes as f64 / MIB,
            l.stored_bytes as f64 / MIB,
        );
        rows.push(json!({
            "backend": backend.name(),
            "sessions": l.sessions,
            "turns": l.turns,
            "seconds": secs,
            "turns_per_sec": l.turns as f64 / secs,
            "steps_per_sec": steps_per_sec,
            "steps_per_turn": steps_per_turn,
            "turn_p50_ms": ms(p50),
            "turn_p99_ms": ms(p99),
            "step_p50_ms": ms(step_p50),
            "commits": l.commits,
            "batches": l.batches,
            "fsyncs_per_step": l.commits as f64 / l.steps.max(1) as f64,
            "cpu_us_per_step": cpu_per_step,
            "writer_cpu_us_per_step": writer_per_step,
            "file_bytes": l.file_bytes,
            "stored_bytes": l.stored_bytes,
            "rss_kib_before": rss_before,
            "rss_kib_after": rss_after,
        }));
    }
    println!("\n* step p50 = turn p50 / steps per turn: the loop's cost per stored step, model and component included");
    println!(
        "** CPU time of the whole process (engine, component, store writer, clients) per step; unlike the rates, little affected by other load on the machine"
    );
    match backend {
        Backend::Redb => println!(
            "*** CPU time of the store's single writer thread per step: 1 s / this is the most steps per second the writer allows\n"
        ),
        Backend::Postgres(_) => {
            println!("*** CPU time of the PostgreSQL server's processes per step (not in **); file size not counted\n")
        }
    }
    (rows, summary)
}
