//! Recovery: the engine stopped between every pair of steps of a tool-loop
//! turn (aborted without shutdown, as a crash would; the store refusing
//! every write after the k-th commit), then restarted on the same store
//! (a redb file; a PostgreSQL database), finishes the turn with the same
//! history as a run that never stopped, and never runs a tool again whose
//! result was committed; for an agent that may reach out, and whose every
//! decision is therefore committed before the next step goes out, each
//! tool runs once per committed result.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use subs_engine::store::TurnStatus;
use subs_engine::store::fault::FaultyStore;
use subs_engine::worker::{BoxFuture, Delivery, Worker, WorkerError};
use subs_protocol::{DecisionResponse, Message, Trigger};
use subs_store_redb::RedbStore;
use subs_tests::{TENANT, TestEngine, agent, guests, user_input};

const PROMPT: &str = r#"use tool add with {"a": 1, "b": 2} and use tool add with {"a": 3, "b": 4}"#;

/// The `tools` component, counting the tool executions it answers; taken
/// for one that may reach out unless `contained`.
struct Counting {
    inner: subs_engine::worker::component::ComponentAgent,
    executions: Arc<Mutex<HashMap<String, u32>>>,
    contained: bool,
}

impl Worker for Counting {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        let call = match &delivery.request.trigger {
            Trigger::ToolExecute(t) => Some(t.id.clone()),
            _ => None,
        };
        Box::pin(async move {
            let decision = self.inner.decide(delivery).await;
            if let (Some(call), Ok(_)) = (call, &decision) {
                *self.executions.lock().unwrap().entry(call).or_default() += 1;
            }
            decision
        })
    }

    fn contained(&self) -> bool {
        self.contained
    }
}

async fn counting_engine(
    store: Arc<dyn subs_engine::Store>,
    executions: &Arc<Mutex<HashMap<String, u32>>>,
    contained: bool,
) -> subs_engine::Engine {
    let worker = Counting { inner: agent(guests::TOOLS), executions: executions.clone(), contained };
    // The commits counted are the design's whatever the host's load: no
    // decision outlasts this hold.
    let config =
        subs_engine::EngineConfig { contained_hold: std::time::Duration::from_secs(30), ..subs_tests::test_config() };
    let models = subs_engine::model::Models::with_offline();
    subs_tests::start_engine_and(store, models, config, |engine| {
        engine.register_agent(TENANT, "tools", Arc::new(worker));
    })
    .await
}

/// Starts the tool turn `the-turn` in `session`.
async fn run_turn(engine: &subs_engine::Engine, session: &str) -> String {
    let input = user_input("tools", Some("the-turn"), PROMPT);
    engine.sessions().input(TENANT, session, input, Default::default()).await.expect("input accepted").turn_id.unwrap()
}

/// Waits (at most `within`) for `the-turn` of `session` to end.
async fn wait_done(engine: &subs_engine::Engine, session: &str, within: u64) -> subs_engine::store::TurnRecord {
    tokio::time::timeout(std::time::Duration::from_secs(within), engine.reads().wait_turn(TENANT, session, "the-turn"))
        .await
        .expect("the turn ends")
        .unwrap()
}

async fn history(engine: &subs_engine::Engine, session: &str) -> Vec<Message> {
    engine.reads().snapshot(TENANT, session).await.unwrap().unwrap().messages
}

/// A store the crash test opens, crashes and opens again: a redb file, or
/// a database of the test PostgreSQL cluster.
trait Place {
    type Store: subs_engine::Store;
    /// Opens the store (again).
    async fn open(&self) -> Self::Store;
    /// Closes it, as the end of a process does.
    async fn close(store: &Self::Store);
}

struct RedbFile(tempfile::TempDir);

impl Place for RedbFile {
    type Store = RedbStore;

    async fn open(&self) -> RedbStore {
        RedbStore::open(self.0.path().join("subs.redb")).unwrap()
    }

    async fn close(store: &RedbStore) {
        store.close().await.unwrap();
    }
}

struct Database(String);

impl Place for Database {
    type Store = subs_store_postgres::PgStore;

    async fn open(&self) -> subs_store_postgres::PgStore {
        subs_store_postgres::PgStore::open(&self.0, Default::default()).await.unwrap()
    }

    async fn close(store: &subs_store_postgres::PgStore) {
        store.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_turn_survives_a_crash_between_any_two_steps() {
    survives_a_crash_between_any_two_steps(|| RedbFile(tempfile::tempdir().unwrap()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contained_agents_tool_turn_survives_a_crash_between_any_two_steps() {
    survives_a_crash_between_any_two_steps(|| RedbFile(tempfile::tempdir().unwrap()), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_tool_turn_survives_a_crash_between_any_two_steps() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    survives_a_crash_between_any_two_steps(|| Database(cluster.fresh_database()), false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_contained_agents_tool_turn_survives_a_crash_between_any_two_steps() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    survives_a_crash_between_any_two_steps(|| Database(cluster.fresh_database()), true).await;
}

/// The commits of one tool turn, for an agent `contained` or not.
async fn commits_of_a_turn(contained: bool) -> u64 {
    let store = Arc::new(FaultyStore::new(subs_engine::store::MemStore::new()));
    let executions = Arc::new(Mutex::new(HashMap::new()));
    let engine = counting_engine(store.clone(), &executions, contained).await;
    run_turn(&engine, "s").await;
    assert_eq!(wait_done(&engine, "s", 30).await.status, TurnStatus::Done);
    engine.kill().await;
    store.commits()
}

/// A contained agent's decisions are committed together, and with the
/// input or the model's reply they follow: the input and the two
/// decisions before the first model call in one commit, the model's reply
/// and the three decisions that run both tools and ask the model again in
/// another, the second reply and the turn's end in a third. An agent that
/// may reach out gets a commit per step, before its next step goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contained_agents_decisions_are_committed_together() {
    let (plain, contained) = (commits_of_a_turn(false).await, commits_of_a_turn(true).await);
    assert_eq!((plain, contained), (PLAIN_COMMITS, CONTAINED_COMMITS), "commits of one tool turn");
}

/// The commits of the tool turn of `PROMPT` (the model calls both tools
/// at once) for an agent that may reach out: one per step (the input, each
/// decision, each of the model's two replies).
const PLAIN_COMMITS: u64 = 11;
/// The same turn for a contained agent: one commit before each model call
/// and one at the turn's end, each with what came in before it (the input,
/// the model's first reply, its second).
const CONTAINED_COMMITS: u64 = 3;

async fn survives_a_crash_between_any_two_steps<P: Place>(fresh: impl Fn() -> P, contained: bool) {
    // The reference: one run that never stops, counting its commits.
    let place = fresh();
    let store = Arc::new(FaultyStore::new(place.open().await));
    let executions = Arc::new(Mutex::new(HashMap::new()));
    let engine = counting_engine(store.clone(), &executions, contained).await;
    run_turn(&engine, "s").await;
    assert_eq!(wait_done(&engine, "s", 30).await.status, TurnStatus::Done);
    let reference = history(&engine, "s").await;
    let steps = store.commits();
    engine.kill().await;
    P::close(store.inner()).await;
    assert_eq!(reference.len(), 5, "user, tool calls, two results, answer");
    assert!(executions.lock().unwrap().values().all(|n| *n == 1));
    let least = if contained { CONTAINED_COMMITS } else { PLAIN_COMMITS };
    assert!(steps >= least, "a tool turn takes several steps, got {steps}");
    eprintln!("the reference turn took {steps} commits");

    // Crash after each commit k (the input's own commit is the first).
    let mut crashed_after = Vec::new();
    for k in 1..steps {
        let place = fresh();
        let store = Arc::new(FaultyStore::new(place.open().await));
        store.crash_after(k);
        let executions = Arc::new(Mutex::new(HashMap::new()));
        let engine = counting_engine(store.clone(), &executions, contained).await;
        let mut live = engine.reads().subscribe(TENANT, "s").unwrap();
        run_turn(&engine, "s").await;
        // What came from outside is committed on its own when the agent
        // takes longer than the bound on holding it (5 ms), as a loaded
        // machine may: a run can then take fewer commits than the
        // reference, and one that ends before commit k has no crash
        // after k to test.
        let mut seen = Vec::new();
        let crashed = tokio::time::timeout(std::time::Duration::from_secs(30), async {
            let crash = store.wait_crashed();
            tokio::pin!(crash);
            loop {
                tokio::select! {
                    () = &mut crash => return true,
                    event = live.recv() => match event {
                        Ok(event) => {
                            let ended = event.name == "turn.done";
                            seen.push(event);
                            if ended {
                                return false;
                            }
                        }
                        Err(_) => {
                            crash.as_mut().await;
                            return true;
                        }
                    },
                }
            }
        })
        .await
        .expect("the crash comes, or the turn ends before it");
        engine.kill().await;
        if !crashed {
            let made = store.commits();
            assert!(made <= k, "crash after commit {k}: the turn ended uncrashed after {made} commits");
            eprintln!("crash after commit {k}: this run ended in {made} commits");
            continue;
        }
        crashed_after.push(k);
        while let Ok(Ok(event)) = tokio::time::timeout(std::time::Duration::ZERO, live.recv()).await {
            seen.push(event);
        }
        P::close(store.inner()).await;
        drop(store);

        // Restart on the same store: the turn resumes and finishes.
        let store = Arc::new(place.open().await);
        let key = subs_engine::store::SessionKey::new(TENANT, "s");
        use subs_engine::Store as _;
        let stored = store.turn(&key, "the-turn").await.unwrap().expect("the input was committed");
        assert_eq!(stored.status, TurnStatus::Running, "crash after commit {k}: the turn was still open");
        let loaded = store.load(&key).await.unwrap().expect("the session was committed");
        // What a client saw, the crash did not take back.
        let kept = store.events(&key, None, 1000).await.unwrap();
        for event in seen.iter().filter(|e| e.seq.is_some()) {
            let stored = kept.iter().find(|(seq, _)| Some(*seq) == event.seq);
            assert!(
                stored.is_some_and(|(_, r)| r.name == event.name && r.data == event.data),
                "crash after commit {k}: event {event:?} was seen and then lost"
            );
        }
        let results: Vec<String> = loaded.messages.iter().filter_map(|(_, m)| m.message.tool_call_id.clone()).collect();
        let again = Arc::new(Mutex::new(HashMap::new()));
        let engine = counting_engine(store.clone(), &again, contained).await;
        let turn = wait_done(&engine, "s", 30).await;
        assert_eq!(turn.status, TurnStatus::Done, "crash after commit {k}: {turn:?}");
        assert_eq!(history(&engine, "s").await, reference, "crash after commit {k}: the history differs");

        // No tool ran again whose result was committed.
        let again = again.lock().unwrap().clone();
        assert!(
            results.iter().all(|id| !again.contains_key(id)),
            "crash after commit {k}: a tool ran again after its result was stored: {results:?}, {again:?}"
        );
        // And, for an agent that may reach out, each tool ran once per
        // committed result: twice at most for the one call whose result
        // commit was the one refused, once otherwise.
        let mut executions = executions.lock().unwrap().clone();
        for (id, n) in again {
            *executions.entry(id).or_default() += n;
        }
        assert_eq!(executions.len(), 2, "crash after commit {k}: {executions:?}");
        let extra: u32 = executions.values().map(|n| n - 1).sum();
        if !contained {
            assert!(extra <= 1, "crash after commit {k}: a tool ran again: {executions:?}");
        }
        engine.kill().await;
        P::close(&store).await;
    }
    // Every run makes the input's commit and at least one more, so a crash
    // after the first always comes.
    assert!(crashed_after.contains(&1), "no crash point was tested: {crashed_after:?} of 1..{steps}");
}

#[tokio::test]
async fn a_restarted_engine_resumes_a_waiting_session() {
    // A session waiting on an interrupt survives a restart and can be
    // resumed by the new engine.
    let t = TestEngine::start().await;
    let turn = t.send("wait", "scenario", "interrupt me").await;
    let mut events = t.engine.reads().subscribe(TENANT, "wait").unwrap();
    while t.snapshot("wait").await.record.status != subs_engine::store::SessionStatus::Waiting {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv()).await;
    }
    let dir = t.crash().await;
    let t = TestEngine::start_in(dir).await;
    let resume = subs_protocol::ClientInput::InterruptResume(subs_protocol::client::InterruptResume {
        interrupt_id: "approval".to_owned(),
        payload: Some(serde_json::json!("ok")),
    });
    t.engine.sessions().input(TENANT, "wait", resume, Default::default()).await.unwrap();
    assert_eq!(t.wait("wait", &turn).await.status, TurnStatus::Done);
    assert_eq!(t.transcript("wait").await, ["user: interrupt me", r#"assistant: resumed with "ok""#]);
}

#[tokio::test]
async fn a_call_held_by_an_interrupt_stays_queued_across_a_restart() {
    let t = TestEngine::start().await;
    let turn = t.send("held", "scenario", "hold it").await;
    let mut events = t.engine.reads().subscribe(TENANT, "held").unwrap();
    while t.snapshot("held").await.record.status != subs_engine::store::SessionStatus::Waiting {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), events.recv()).await;
    }
    let dir = t.crash().await;
    let t = TestEngine::start_in(dir).await;
    let calls = t.snapshot("held").await.calls;
    let statuses: Vec<_> = calls.iter().map(|c| c.call.status).collect();
    assert_eq!(statuses, [subs_protocol::CallStatus::Queued], "still held after the restart");
    let resume = subs_protocol::ClientInput::InterruptResume(subs_protocol::client::InterruptResume {
        interrupt_id: "hold".to_owned(),
        payload: None,
    });
    t.engine.sessions().input(TENANT, "held", resume, Default::default()).await.unwrap();
    assert_eq!(t.wait("held", &turn).await.status, TurnStatus::Done);
    let transcript = t.transcript("held").await;
    assert_eq!(
        transcript[..2],
        ["user: hold it".to_owned(), format!("tool: {{\"sum\":5.0}} (answers {})", calls[0].call.id)]
    );
}

/// Records each delivery's `attempts`; answers `proposed`, or never (a
/// delivery the coming crash cuts short) when `hang` is set.
struct Attempts {
    seen: Arc<Mutex<Vec<u32>>>,
    delivered: Arc<tokio::sync::Notify>,
    hang: bool,
}

impl Worker for Attempts {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(delivery.request.attempts);
            self.delivered.notify_one();
            if self.hang {
                std::future::pending::<()>().await;
            }
            Ok(delivery.request.proposed)
        })
    }
}

/// Opens an engine on the store in `dir` with the `attempts` agent, and
/// only then resumes what the store holds.
async fn reopen(dir: &tempfile::TempDir, worker: Attempts) -> (subs_engine::Engine, Arc<RedbStore>) {
    let store = Arc::new(RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let engine = subs_engine::Engine::open(
        store.clone(),
        subs_engine::model::Models::with_offline(),
        subs_engine::EngineConfig::default(),
    );
    engine.register_agent(TENANT, "attempts", Arc::new(worker));
    engine.resume().await.unwrap();
    (engine, store)
}

async fn crash(engine: subs_engine::Engine, store: Arc<RedbStore>) {
    engine.kill().await;
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_redelivery_after_a_crash_carries_a_higher_attempts() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let delivered = Arc::new(tokio::sync::Notify::new());
    let worker = |hang| Attempts { seen: seen.clone(), delivered: delivered.clone(), hang };
    let dir = tempfile::tempdir().unwrap();

    // Two crashes, each in the middle of a delivery of the same step.
    let (engine, store) = reopen(&dir, worker(true)).await;
    engine.sessions().input(TENANT, "s", user_input("attempts", Some("t"), "hello"), Default::default()).await.unwrap();
    delivered.notified().await;
    crash(engine, store).await;
    let (engine, store) = reopen(&dir, worker(true)).await;
    delivered.notified().await;
    crash(engine, store).await;

    let (engine, _store) = reopen(&dir, worker(false)).await;
    let turn = tokio::time::timeout(std::time::Duration::from_secs(30), engine.reads().wait_turn(TENANT, "s", "t"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(turn.status, TurnStatus::Done, "crashes are not the agent's failures: {turn:?}");
    // The first step three times (each redelivery one higher), then each
    // of the turn's later steps once.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[..3], [1, 2, 3], "{seen:?}");
    assert!(seen.len() > 3 && seen[3..].iter().all(|&a| a == 1), "{seen:?}");
}

/// A slow disk: every commit's fsync takes 40 ms more. Eight tool turns
/// run at once; each finishes as it does on a fast disk (same transcript,
/// each tool run once), nothing is lost, and the commits group: fewer
/// commits than batches, which is what keeps a slow disk from multiplying
/// into every session's latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_disk_delays_turns_but_changes_nothing() {
    // The reference, on a normal disk.
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let executions = Arc::new(Mutex::new(HashMap::new()));
    let engine = counting_engine(store.clone(), &executions, false).await;
    run_turn(&engine, "s").await;
    assert_eq!(wait_done(&engine, "s", 30).await.status, TurnStatus::Done);
    let reference: Vec<String> = history(&engine, "s").await.iter().map(subs_tests::describe).collect();
    engine.kill().await;
    store.close().await.unwrap();

    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(RedbStore::open(dir.path().join("subs.redb")).unwrap());
    store.inject_fsync_delay(std::time::Duration::from_millis(40));
    let executions = Arc::new(Mutex::new(HashMap::new()));
    let engine = counting_engine(store.clone(), &executions, false).await;
    let sessions: Vec<String> = (0..8).map(|i| format!("slow-{i}")).collect();
    let started = std::time::Instant::now();
    for session in &sessions {
        run_turn(&engine, session).await;
    }
    for session in &sessions {
        let turn = wait_done(&engine, session, 60).await;
        assert_eq!(turn.status, TurnStatus::Done, "{session}: {turn:?}");
        let transcript: Vec<String> = history(&engine, session).await.iter().map(subs_tests::describe).collect();
        assert_eq!(transcript, reference, "{session} differs from the fast disk's");
    }
    let executions = executions.lock().unwrap().clone();
    // Call ids are derived per session, so the eight sessions share two.
    assert_eq!(executions.len(), 2, "two tool calls per session: {executions:?}");
    assert!(executions.values().all(|n| *n == 8), "each tool ran once per session: {executions:?}");
    use subs_engine::store::StoreAdmin as _;
    let stats = store.stats().unwrap();
    assert!(stats.commits < stats.batches, "commits grouped on a slow disk: {stats:?}");
    // The delay was real: the writer spent it on every commit, one after
    // another (a lower bound, so no flakiness on a busy machine).
    let spent = std::time::Duration::from_millis(40) * u32::try_from(stats.commits).unwrap();
    assert!(started.elapsed() >= spent, "{} commits took {:?}", stats.commits, started.elapsed());
    engine.kill().await;
    store.close().await.unwrap();
}
