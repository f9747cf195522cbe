//! The PostgreSQL store on a real server: the conformance suite, and what
//! only a store several nodes share has (migrations, group commit,
//! leases, fencing, orphans, notices, blobs, replies).
//!
//! Every test makes a database of its own in the process's throwaway
//! cluster (`subs_store_postgres::testing`), so they run in parallel; each
//! is skipped, saying so once, where PostgreSQL is not installed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor as _, Row as _};
use subs_store::conformance::sample::*;
use subs_store::conformance::{self, Backend};
use subs_store::shared::{Claim, Notice, Noticed, Orphan, Shared, SharedSettings};
use subs_store::{Batch, Fence, Op, SessionKey, SessionRecord, SessionStatus, Store, StoreAdmin, StoreError};
use subs_store_postgres::testing::TestCluster;
use subs_store_postgres::{NOTICE_CHANNEL, PgOptions, PgStore, schema_version};
use tokio::sync::broadcast;

/// Checks `check` until it gives a value, and returns it; panics with
/// `what` and the last state seen if none comes within `within`. What
/// these tests wait for (a row, a lock, a lease lapsing by the database's
/// clock) sends no event.
async fn eventually<T, E: std::fmt::Debug, F: std::future::Future<Output = Result<T, E>>>(
    within: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let started = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) => assert!(started.elapsed() < within, "{what}: not within {within:?}; last seen: {seen:?}"),
        }
        pause().await;
    }
}

/// Checks that `check` holds through `window` (first at once, last once
/// it has passed): for what must not happen, which no event shows.
async fn steadily<E: std::fmt::Debug, F: std::future::Future<Output = Result<(), E>>>(
    window: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let started = Instant::now();
    loop {
        if let Err(seen) = check().await {
            panic!("{what}: broken after {:?}: {seen:?}", started.elapsed());
        }
        if started.elapsed() >= window {
            return;
        }
        pause().await;
    }
}

/// The wait between two checks.
async fn pause() {
    // Checking again at once would only load the database.
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// The cluster, or the end of the test (skipped) where there is none.
macro_rules! cluster {
    () => {
        match TestCluster::shared() {
            Some(cluster) => cluster,
            None => return,
        }
    };
}

fn options() -> PgOptions {
    PgOptions { pool: 4, ..PgOptions::default() }
}

/// Leases of a second, renewed every 200 ms: lapses are quick to wait for.
fn short_leases() -> PgOptions {
    PgOptions {
        shared: SharedSettings { lease: Duration::from_secs(1), renew: Duration::from_millis(200) },
        ..options()
    }
}

async fn open(url: &str, options: PgOptions) -> PgStore {
    PgStore::open(url, options).await.expect("the store opens")
}

/// A pool on `url` for looking under the store.
async fn raw(url: &str) -> sqlx::PgPool {
    PgPoolOptions::new().max_connections(2).connect(url).await.expect("a raw connection")
}

fn shared(store: &PgStore) -> &dyn Shared {
    store.shared().expect("a PostgreSQL store is shared")
}

async fn claim(store: &PgStore, key: &SessionKey) -> Claim {
    shared(store).claim(key).await.expect("the claim is answered")
}

async fn granted(store: &PgStore, key: &SessionKey) -> u64 {
    match claim(store, key).await {
        Claim::Granted(lease) => lease.token,
        other => panic!("{} could not claim {key}: {other:?}", shared(store).node()),
    }
}

fn fenced(ops: impl IntoIterator<Item = Op>, key: &SessionKey, token: u64) -> Batch {
    Batch { ops: ops.into_iter().collect(), fence: Some(Fence { key: key.clone(), token }) }
}

/// Fresh databases; a reopen closes the store and opens its database
/// again, as a restarted node would (with a new node name).
struct Pg(&'static TestCluster);

impl Backend for Pg {
    type Store = PgStore;

    async fn open(&mut self) -> PgStore {
        open(&self.0.fresh_database(), options()).await
    }

    async fn reopen(&mut self, store: PgStore) -> PgStore {
        // No password in the test cluster's URLs: the shown URL is the URL.
        let url = store.url().to_owned();
        store.close().await.expect("close");
        drop(store);
        open(&url, options()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_store_conforms() {
    let cluster = cluster!();
    conformance::run(&mut Pg(cluster)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_database_is_migrated_and_opening_again_changes_nothing() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let store = open(&url, options()).await;
    store.commit(full_batch(&key("s1"))).await.unwrap();
    // A second node opens the same database at once: nothing to migrate.
    let second = open(&url, options()).await;
    assert_eq!(second.session(&key("s1")).await.unwrap(), Some(session(&key("s1"), SessionStatus::Running)));
    second.close().await.unwrap();
    store.close().await.unwrap();
    let store = open(&url, options()).await;
    let db = raw(&url).await;
    let versions: Vec<i64> = sqlx::query("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
        .fetch_all(&db)
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(versions, (1..=schema_version()).collect::<Vec<_>>());
    assert_eq!(store.session(&key("s1")).await.unwrap(), Some(session(&key("s1"), SessionStatus::Running)));
    store.close().await.unwrap();
}

/// A database written at schema 1 (the status an indexed column of
/// `sessions`) keeps every session's status and open steps through the
/// migrations to this binary's schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_at_schema_1_is_migrated_with_its_sessions() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let db = raw(&url).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("schema-1-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let first = include_str!("../migrations/0001_store.sql");
    std::fs::write(dir.join("0001_store.sql"), first).unwrap();
    sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap().run(&db).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    // What schema 1's writer stored: the running session's steps from 1
    // on are open, the idle one has none.
    for (name, status, open_step) in [("running", SessionStatus::Running, 1), ("idle", SessionStatus::Idle, 3)] {
        let key = key(name);
        let sid: i64 = sqlx::query("INSERT INTO session_ids (tenant, session) VALUES ($1, $2) RETURNING sid")
            .bind(&key.tenant)
            .bind(&key.session)
            .fetch_one(&db)
            .await
            .unwrap()
            .get(0);
        let record = SessionRecord { first_open_step: open_step, ..session(&key, status) };
        sqlx::query(
            "INSERT INTO sessions (sid, tenant, id, active, identity, record) VALUES ($1, $2, $3, $4, NULL, $5)",
        )
        .bind(sid)
        .bind(&key.tenant)
        .bind(&key.session)
        .bind(status != SessionStatus::Idle)
        .bind(serde_json::to_vec(&record).unwrap())
        .execute(&db)
        .await
        .unwrap();
        for seq in 0..3_i64 {
            sqlx::query("INSERT INTO steps (sid, seq, record) VALUES ($1, $2, $3)")
                .bind(sid)
                .bind(seq)
                .bind(serde_json::to_vec(&step(&format!("d{seq}"))).unwrap())
                .execute(&db)
                .await
                .unwrap();
        }
    }

    let store = open(&url, options()).await;
    assert_eq!(store.unfinished().await.unwrap(), [key("running")]);
    let loaded = store.load(&key("running")).await.unwrap().expect("the running session loads");
    assert_eq!(loaded.steps.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(loaded.record.status, SessionStatus::Running);
    let loaded = store.load(&key("idle")).await.unwrap().expect("the idle session loads");
    assert!(loaded.steps.is_empty(), "{:?}", loaded.steps);
    // The status moves as before: the running session goes idle.
    let idle = session(&key("running"), SessionStatus::Idle);
    store.commit(batch([Op::PutSession(Box::new(idle))])).await.unwrap();
    assert!(store.unfinished().await.unwrap().is_empty());
    store.close().await.unwrap();
}

/// A database written before the owner index and the decision counts
/// gains both through the migration: owners list their sessions, and each
/// agent's versions count what its sessions' records count (a record
/// holding a NUL escape in its state included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_at_schema_3_gains_owners_and_decision_counts() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let db = raw(&url).await;
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("schema-3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in [
        ("0001_store.sql", include_str!("../migrations/0001_store.sql")),
        ("0002_active_sessions.sql", include_str!("../migrations/0002_active_sessions.sql")),
        ("0003_blob_stored.sql", include_str!("../migrations/0003_blob_stored.sql")),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    sqlx::migrate::Migrator::new(dir.as_path()).await.unwrap().run(&db).await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    /// A session: its id, owner, agent and decisions by version.
    type Seeded<'a> = (&'a str, Option<&'a str>, &'a str, &'a [(&'a str, u64)]);
    let sessions: [Seeded; 4] = [
        ("s1", Some("alice"), "a", &[("sha256:1", 2), ("sha256:2", 1)]),
        ("s2", None, "a", &[("sha256:1", 3)]),
        ("s3", Some("alice"), "b", &[("sha256:1", 4)]),
        ("s4", Some("bob"), "a", &[]),
    ];
    for (name, owner, agent, versions) in sessions {
        let key = key(name);
        let sid: i64 = sqlx::query("INSERT INTO session_ids (tenant, session) VALUES ($1, $2) RETURNING sid")
            .bind(&key.tenant)
            .bind(&key.session)
            .fetch_one(&db)
            .await
            .unwrap()
            .get(0);
        let mut record = session(&key, SessionStatus::Idle);
        record.identity.id = owner.map(str::to_owned);
        record.agent_id = agent.to_owned();
        record.state = serde_json::json!({"text": "a\u{0}b"});
        record.versions = versions.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect();
        sqlx::query(
            "INSERT INTO sessions (sid, tenant, id, open_step, identity, record) VALUES ($1, $2, $3, 0, $4, $5)",
        )
        .bind(sid)
        .bind(&key.tenant)
        .bind(&key.session)
        .bind(owner)
        .bind(serde_json::to_vec(&record).unwrap())
        .execute(&db)
        .await
        .unwrap();
    }

    let store = open(&url, options()).await;
    let owned = async |owner: &str| -> Vec<String> {
        let sessions = store.sessions_of_identity("t1", owner, None, 10).await.unwrap();
        sessions.into_iter().map(|r| r.key.session).collect()
    };
    assert_eq!(owned("alice").await, ["s1", "s3"]);
    assert_eq!(owned("bob").await, ["s4"]);
    let counts = async |agent: &str| store.decision_counts("t1", agent).await.unwrap().into_iter().collect::<Vec<_>>();
    assert_eq!(counts("a").await, [("sha256:1".to_owned(), 5), ("sha256:2".to_owned(), 1)]);
    assert_eq!(counts("b").await, [("sha256:1".to_owned(), 4)]);
    store.close().await.unwrap();
}

/// Counts of one agent forgotten and counted again in one group of
/// batches end as the batches say, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_counts_forgotten_and_counted_in_one_group_follow_the_batches() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let store = open(&url, options()).await;
    let count = |version: &str, decisions: u64| Op::CountDecisions {
        tenant: "t1".to_owned(),
        agent_id: "a".to_owned(),
        version: version.to_owned(),
        decisions,
    };
    let forget = || Op::DeleteAgent { tenant: "t1".to_owned(), agent_id: "a".to_owned() };
    store.commit(batch([count("sha256:1", 5), count("sha256:2", 5)])).await.unwrap();
    // Queued while the writer is held, these are written as one group.
    let held = hold_tenants(&url).await;
    let first = store.commit(blocker());
    held.until_the_writer_waits().await;
    let commits = [
        store.commit(batch([count("sha256:1", 1)])),
        store.commit(batch([forget()])),
        store.commit(batch([count("sha256:2", 2), count("sha256:3", 1)])),
        store.commit(batch([count("sha256:2", 1)])),
    ];
    let before = store.stats().unwrap();
    held.release().await;
    first.await.unwrap();
    for commit in commits {
        commit.await.unwrap();
    }
    let after = store.stats().unwrap();
    assert_eq!((after.batches - before.batches, after.commits - before.commits), (5, 2), "one group of four");
    let counts: Vec<(String, u64)> = store.decision_counts("t1", "a").await.unwrap().into_iter().collect();
    assert_eq!(counts, [("sha256:2".to_owned(), 3), ("sha256:3".to_owned(), 1)]);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_migrated_by_a_newer_binary_is_refused_naming_both_versions() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    open(&url, options()).await.close().await.unwrap();
    let db = raw(&url).await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', true, '\\x00', 0)",
    )
    .execute(&db)
    .await
    .unwrap();
    let err = PgStore::open(&url, options()).await.expect_err("a newer schema is refused").to_string();
    assert!(err.contains("9999") && err.contains("from the future"), "{err}");
    assert!(err.contains(&format!("version {}", schema_version())), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_named_without_its_password() {
    let options = PgOptions { connect_timeout: Duration::from_secs(3), ..options() };
    let err = PgStore::open("postgres://subs:hunter2@127.0.0.1:1/subs", options).await.unwrap_err().to_string();
    assert!(err.contains("postgres://subs:***@127.0.0.1:1/subs"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    let err = PgStore::open("mysql://nope", PgOptions::default()).await.unwrap_err().to_string();
    assert!(err.contains("mysql://nope"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_share_transactions() {
    let cluster = cluster!();
    let store = Arc::new(open(&cluster.fresh_database(), options()).await);
    let tasks: Vec<_> = (0..300)
        .map(|n| {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let key = key(&format!("s{n}"));
                let mut ops = vec![
                    Op::PutSession(Box::new(session(&key, SessionStatus::Running))),
                    Op::PutMessage { session: key.clone(), seq: 0, record: message(&format!("m{n}")) },
                    Op::PutEvent { session: key.clone(), seq: 0, record: event(n) },
                    Op::PushInbox { session: key.clone(), item: Box::new(item("x")) },
                ];
                if n % 3 == 0 {
                    ops.push(Op::PutCall { session: key.clone(), record: Box::new(call("c")) });
                }
                store.commit(batch(ops)).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let stats = store.stats().unwrap();
    assert_eq!(stats.batches, 300);
    assert!(stats.commits * 2 < stats.batches, "no group commit: {stats:?}");
    for n in 0..300 {
        let key = key(&format!("s{n}"));
        assert_eq!(store.messages(&key).await.unwrap(), [(0, message(&format!("m{n}")))]);
        assert_eq!(store.inbox(&key).await.unwrap().len(), 1);
    }
    assert_eq!(store.unfinished().await.unwrap().len(), 300);
    store.close().await.unwrap();
}

/// Within one group, a later write of a key replaces an earlier one, a
/// delete after a put deletes, a put after a delete puts, whichever
/// batches they are in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_means_its_batches_applied_in_order() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let store = open(&url, options()).await;
    let s = key("s");
    store.commit(batch([Op::PutCall { session: s.clone(), record: Box::new(call("old")) }])).await.unwrap();
    let with_state = |n: u64| {
        let mut record = session(&s, SessionStatus::Running);
        record.state = json!({"n": n});
        Op::PutSession(Box::new(record))
    };
    let held = hold_tenants(&url).await;
    let first = store.commit(blocker());
    held.until_the_writer_waits().await;
    let commits = [
        store.commit(batch([with_state(1), Op::PutCall { session: s.clone(), record: Box::new(call("a")) }])),
        store.commit(batch([
            with_state(2),
            Op::DeleteCall { session: s.clone(), call_id: "a".to_owned() },
            Op::DeleteCall { session: s.clone(), call_id: "old".to_owned() },
        ])),
        store.commit(batch([Op::PutCall { session: s.clone(), record: Box::new(call("old")) }, with_state(3)])),
    ];
    let before = store.stats().unwrap();
    held.release().await;
    first.await.unwrap();
    for commit in commits {
        commit.await.unwrap();
    }
    let after = store.stats().unwrap();
    assert_eq!(
        (after.batches - before.batches, after.commits - before.commits),
        (4, 2),
        "the blocker, then one group of three"
    );
    let mut expected = session(&s, SessionStatus::Running);
    expected.state = json!({"n": 3});
    assert_eq!(store.session(&s).await.unwrap(), Some(expected));
    assert_eq!(store.calls(&s).await.unwrap(), [call("old")]);
    store.close().await.unwrap();
}

/// Messages and events are appended with plain inserts; one written again
/// under the same number (never in the engine's normal course, but a
/// store must take it) replaces the first, alone or beside new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_or_event_written_again_replaces_the_first() {
    let cluster = cluster!();
    let store = open(&cluster.fresh_database(), options()).await;
    let s = key("s");
    store
        .commit(batch([
            Op::PutMessage { session: s.clone(), seq: 0, record: message("first") },
            Op::PutEvent { session: s.clone(), seq: 0, record: event(0) },
        ]))
        .await
        .unwrap();
    store
        .commit(batch([
            Op::PutMessage { session: s.clone(), seq: 0, record: message("again") },
            Op::PutMessage { session: s.clone(), seq: 1, record: message("new") },
            Op::PutEvent { session: s.clone(), seq: 0, record: event(100) },
        ]))
        .await
        .unwrap();
    assert_eq!(store.messages(&s).await.unwrap(), [(0, message("again")), (1, message("new"))]);
    assert_eq!(store.events(&s, None, 10).await.unwrap(), [(0, event(100))]);
    let stats = store.stats().unwrap();
    assert_eq!((stats.batches, stats.commits), (2, 2));
    store.close().await.unwrap();
}

/// A lock on `tenants` held by another connection: the writer's next
/// transaction that writes a tenant waits for it, and batches committed
/// meanwhile queue up and form one group when it is let go.
struct WriterHeld {
    db: sqlx::PgPool,
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
}

async fn hold_tenants(url: &str) -> WriterHeld {
    let db = raw(url).await;
    let mut conn = db.acquire().await.unwrap();
    conn.execute("BEGIN").await.unwrap();
    conn.execute("LOCK TABLE tenants IN EXCLUSIVE MODE").await.unwrap();
    WriterHeld { db, conn }
}

impl WriterHeld {
    /// Waits until some transaction of this database waits for a lock:
    /// the writer, on the one held.
    async fn until_the_writer_waits(&self) {
        eventually(Duration::from_secs(10), "the writer waits for the lock", || async {
            let waiting: i64 = sqlx::query(
                "SELECT count(*) FROM pg_locks WHERE NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(&self.db)
            .await
            .unwrap()
            .get(0);
            if waiting > 0 { Ok(()) } else { Err(waiting) }
        })
        .await;
    }

    async fn release(mut self) {
        self.conn.execute("COMMIT").await.unwrap();
    }
}

/// A batch that makes the writer wait while `tenants` is held.
fn blocker() -> Batch {
    batch([Op::PutTenant(tenant("blocker", json!({}), 1))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_lost_its_lease_is_fenced_and_its_neighbours_commit() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, short_leases()).await, open(&url, short_leases()).await);
    let (s, other) = (key("s"), key("other"));
    let token_a = granted(&a, &s).await;
    assert_eq!(claim(&b, &s).await, Claim::HeldBy { node: shared(&a).node().to_owned() }, "held while A lives");
    a.commit(fenced([Op::PutSession(Box::new(session(&s, SessionStatus::Running)))], &s, token_a)).await.unwrap();
    let other_token = granted(&a, &other).await;

    // A hangs: its heartbeat stops, and B takes the session over once the
    // lease has lapsed (by the database's clock).
    a.pause_heartbeat(true);
    let started = Instant::now();
    let token_b = eventually(Duration::from_secs(10), "A's lease lapses", || async {
        match claim(&b, &s).await {
            Claim::Granted(lease) => Ok(lease.token),
            held => Err(held),
        }
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(500), "the lease lapsed too early: {:?}", started.elapsed());
    assert!(token_b > token_a, "tokens increase: {token_a} then {token_b}");

    // A, unaware, commits three batches that form one group: the stale
    // one fails and writes nothing; the unfenced one and the one under a
    // token still current land.
    let stale = fenced(
        [
            Op::PutSession(Box::new(session(&s, SessionStatus::Idle))),
            Op::PutEvent { session: s.clone(), seq: 0, record: event(0) },
            Op::PushInbox { session: other.clone(), item: Box::new(item("from a stale node")) },
        ],
        &s,
        token_a,
    );
    let held = hold_tenants(&url).await;
    let first = a.commit(blocker());
    held.until_the_writer_waits().await;
    let before = a.stats().unwrap();
    let commits = [
        a.commit(stale),
        a.commit(batch([Op::PutSession(Box::new(session(&key("free"), SessionStatus::Idle)))])),
        a.commit(fenced([Op::PutSession(Box::new(session(&other, SessionStatus::Running)))], &other, other_token)),
    ];
    held.release().await;
    first.await.unwrap();
    let [stale, free, current] = commits;
    match stale.await {
        Err(StoreError::Fenced { session, token }) => assert_eq!((session, token), (s.clone(), token_a)),
        other => panic!("a stale token must be fenced: {other:?}"),
    }
    free.await.unwrap();
    current.await.unwrap();
    let after = a.stats().unwrap();
    assert_eq!((after.batches - before.batches, after.commits - before.commits), (3, 2), "one group of three");
    assert_eq!(a.session(&s).await.unwrap(), Some(session(&s, SessionStatus::Running)), "nothing of it was written");
    assert!(a.events(&s, None, 10).await.unwrap().is_empty());
    assert!(a.inbox(&other).await.unwrap().is_empty());
    assert_eq!(a.session(&key("free")).await.unwrap(), Some(session(&key("free"), SessionStatus::Idle)));
    assert_eq!(a.session(&other).await.unwrap(), Some(session(&other, SessionStatus::Running)));
    // B, the new holder, writes.
    b.commit(fenced([Op::PutSession(Box::new(session(&s, SessionStatus::Idle)))], &s, token_b)).await.unwrap();
    assert_eq!(b.session(&s).await.unwrap(), Some(session(&s, SessionStatus::Idle)));
    // A's heartbeat resumes: the session stays B's, through a few beats.
    a.pause_heartbeat(false);
    let b_holds = Claim::HeldBy { node: shared(&b).node().to_owned() };
    steadily(Duration::from_millis(400), "the session stays B's", || async {
        let claim = claim(&a, &s).await;
        if claim == b_holds { Ok(()) } else { Err(claim) }
    })
    .await;
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_claimed_at_once_and_fences_its_old_holder() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    let s = key("s");
    let first = granted(&a, &s).await;
    let again = granted(&a, &s).await;
    assert!(again > first, "a claim by the holder is granted with a new token");
    // A stale token releases nothing.
    shared(&a).release(&s, first).await.unwrap();
    assert!(matches!(claim(&b, &s).await, Claim::HeldBy { .. }));
    shared(&a).release(&s, again).await.unwrap();
    let token_b = granted(&b, &s).await;
    assert!(token_b > again);
    let err =
        a.commit(fenced([Op::PutSession(Box::new(session(&s, SessionStatus::Idle)))], &s, again)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    // Released and never claimed again: fenced too.
    shared(&b).release(&s, token_b).await.unwrap();
    let err =
        b.commit(fenced([Op::PutSession(Box::new(session(&s, SessionStatus::Idle)))], &s, token_b)).await.unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    // A session never claimed has no lease to write under.
    let err = a
        .commit(fenced([Op::PutSession(Box::new(session(&key("n"), SessionStatus::Idle)))], &key("n"), 1))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Fenced { .. }), "{err:?}");
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_node_frees_its_leases_at_once() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    let s = key("s");
    granted(&a, &s).await;
    assert!(matches!(claim(&b, &s).await, Claim::HeldBy { .. }));
    a.close().await.unwrap();
    granted(&b, &s).await;
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_names_are_unique_among_live_nodes_and_a_restart_takes_over() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let named = || PgOptions { node: Some("node-x".to_owned()), ..options() };
    let first = open(&url, named()).await;
    assert_eq!(shared(&first).node(), "node-x");
    let err = PgStore::open(&url, named()).await.unwrap_err().to_string();
    assert!(err.contains("node-x") && err.contains("unique"), "{err}");
    let s = key("s");
    first.commit(batch([Op::PutSession(Box::new(session(&s, SessionStatus::Running)))])).await.unwrap();
    granted(&first, &s).await;
    // Killed: its row stays, as a crash leaves it, until its heartbeat
    // expires; made expired here rather than waited for.
    first.pause_heartbeat(true);
    let db = raw(&url).await;
    sqlx::query("UPDATE nodes SET expires = now() - interval '1 second' WHERE name = 'node-x'")
        .execute(&db)
        .await
        .unwrap();
    std::mem::forget(first);
    // Restarted under the same name, it does not hold what its previous
    // process held: that session crashed.
    let second = open(&url, named()).await;
    let orphans = shared(&second).orphans(10).await.unwrap();
    assert_eq!(orphans, [Orphan { key: s.clone(), crashed: true }]);
    granted(&second, &s).await;
    assert!(shared(&second).orphans(10).await.unwrap().is_empty());
    second.close().await.unwrap();
    for bad in ["", "a\u{7}b"] {
        let err = PgStore::open(&url, PgOptions { node: Some(bad.to_owned()), ..options() }).await.unwrap_err();
        assert!(err.to_string().contains("node name"), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_are_crashed_or_released_with_mail() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (live, dying) = (open(&url, options()).await, open(&url, short_leases()).await);
    let running = |name: &str| Op::PutSession(Box::new(session(&key(name), SessionStatus::Running)));
    let idle = |name: &str| Op::PutSession(Box::new(session(&key(name), SessionStatus::Idle)));
    live.commit(batch([
        running("held-by-live"),
        running("held-by-dead"),
        running("never-held"),
        idle("idle"),
        idle("held-with-mail"),
        Op::PushInbox { session: key("held-with-mail"), item: Box::new(item("x")) },
        idle("released-with-mail"),
        Op::PushInbox { session: key("released-with-mail"), item: Box::new(item("x")) },
        Op::PutSession(Box::new(session(&key("released-waiting"), SessionStatus::Waiting))),
        Op::PushInbox { session: key("unborn"), item: Box::new(item("x")) },
    ]))
    .await
    .unwrap();
    granted(&live, &key("held-by-live")).await;
    granted(&live, &key("held-with-mail")).await;
    granted(&dying, &key("held-by-dead")).await;
    for name in ["released-with-mail", "released-waiting"] {
        let token = granted(&live, &key(name)).await;
        shared(&live).release(&key(name), token).await.unwrap();
    }
    dying.pause_heartbeat(true);
    let expected = [
        Orphan { key: key("held-by-dead"), crashed: true },
        // Its own, with mail an actor may not have seen: woken, not taken.
        Orphan { key: key("held-with-mail"), crashed: false },
        Orphan { key: key("never-held"), crashed: true },
        Orphan { key: key("released-with-mail"), crashed: false },
        Orphan { key: key("unborn"), crashed: true },
    ];
    eventually(Duration::from_secs(10), "the orphans are found", || async {
        let orphans = shared(&live).orphans(100).await.unwrap();
        if orphans == expected { Ok(()) } else { Err(orphans) }
    })
    .await;
    assert_eq!(shared(&live).orphans(2).await.unwrap(), expected[..2]);
    assert!(shared(&live).orphans(0).await.unwrap().is_empty());
    // Another node does not see the mail of a session `live` holds.
    let other = open(&url, options()).await;
    assert!(!shared(&other).orphans(100).await.unwrap().iter().any(|o| o.key == key("held-with-mail")));
    other.close().await.unwrap();
    live.close().await.unwrap();
    dying.close().await.unwrap();
}

/// The backend holding node `name`'s lock (its heartbeat's connection).
async fn lock_holder(db: &sqlx::PgPool, name: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT l.pid FROM pg_locks l JOIN nodes n ON l.objid::int8 = n.lock_key \
         WHERE l.locktype = 'advisory' AND l.classid = 1937072755::oid AND l.objsubid = 2 AND l.granted \
         AND l.mode = 'ExclusiveLock' AND n.name = $1 \
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .bind(name)
    .fetch_optional(db)
    .await
    .expect("pg_locks reads")
}

async fn terminate(db: &sqlx::PgPool, pid: i32) {
    let done: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)").bind(pid).fetch_one(db).await.unwrap();
    assert!(done, "backend {pid} terminated");
}

async fn live_nodes(store: &PgStore) -> Vec<String> {
    shared(store).live_nodes().await.expect("the live nodes are listed")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_connection_ends_is_dead_at_once_and_one_paused_at_its_lease() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let db = raw(&url).await;
    // Leases of a minute: anything sooner is the lock's doing.
    let long = || PgOptions {
        shared: SharedSettings { lease: Duration::from_secs(60), renew: Duration::from_millis(200) },
        ..options()
    };
    let (a, b) = (open(&url, long()).await, open(&url, long()).await);
    let (name_a, name_b) = (shared(&a).node().to_owned(), shared(&b).node().to_owned());
    let mut both = vec![name_a.clone(), name_b.clone()];
    both.sort();
    assert_eq!(live_nodes(&b).await, both);
    let s = key("s");
    granted(&a, &s).await;
    assert!(matches!(claim(&b, &s).await, Claim::HeldBy { .. }));

    // A's heartbeat connection is cut while A lives: A is dead until it
    // reconnects, which it does at once, with a new lock.
    let first = lock_holder(&db, &name_a).await.expect("A holds its lock");
    terminate(&db, first).await;
    let started = Instant::now();
    eventually(Duration::from_secs(5), "A takes its lock again", || async {
        let holder = lock_holder(&db, &name_a).await;
        if holder.is_some_and(|pid| pid != first) { Ok(()) } else { Err(holder) }
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(2), "reconnected in {:?}", started.elapsed());
    assert_eq!(live_nodes(&b).await, both, "live again");

    // A dies as a killed process does: its heartbeat stops and its
    // connection ends. B claims A's session at once, not after a minute.
    a.pause_heartbeat(true);
    let holder = lock_holder(&db, &name_a).await.expect("A holds its lock");
    terminate(&db, holder).await;
    eventually(Duration::from_secs(5), "B takes A's session", || async {
        match claim(&b, &s).await {
            Claim::Granted(_) => Ok(()),
            held => Err(held),
        }
    })
    .await;
    assert_eq!(live_nodes(&b).await, [name_b]);
    assert_eq!(shared(&b).orphans(10).await.unwrap(), [], "nothing left behind");
    std::mem::forget(a);

    // A paused node keeps its connection and its lock: its lease decides.
    let c = open(&url, short_leases()).await;
    let t = key("t");
    granted(&c, &t).await;
    c.pause_heartbeat(true);
    assert!(matches!(claim(&b, &t).await, Claim::HeldBy { .. }), "held while its heartbeat is young");
    let started = Instant::now();
    eventually(Duration::from_secs(10), "C's lease lapses", || async {
        match claim(&b, &t).await {
            Claim::Granted(_) => Ok(()),
            held => Err(held),
        }
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(500), "lapsed too early: {:?}", started.elapsed());
    assert!(lock_holder(&db, shared(&c).node()).await.is_some(), "C's connection still holds its lock");
    c.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_cut_in_flight_is_in_doubt_and_one_that_cannot_be_sent_is_not() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let db = raw(&url).await;
    let store = open(&url, options()).await;
    // A trigger that stalls every write: the commit in flight to cut.
    db.execute(
        "CREATE FUNCTION slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$ LANGUAGE plpgsql; \
         CREATE TRIGGER slow BEFORE INSERT ON tenants FOR EACH ROW EXECUTE FUNCTION slow()",
    )
    .await
    .unwrap();
    let commit = store.commit(batch([Op::PutTenant(tenant("slow", json!({}), 1))]));
    let pid = eventually(Duration::from_secs(10), "the writer stalls in the trigger", || async {
        let pid: Option<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()",
        )
        .fetch_optional(&db)
        .await
        .unwrap();
        pid.ok_or("no stalled backend")
    })
    .await;
    terminate(&db, pid).await;
    let err = commit.await.expect_err("the connection was cut");
    assert!(err.may_have_written() && err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("whether it was written is unknown"), "{err}");
    db.execute("DROP TRIGGER slow ON tenants").await.unwrap();
    // The writer connects again for the next group.
    store.commit(batch([Op::PutTenant(tenant("next", json!({}), 1))])).await.expect("written");
    assert!(store.tenants().await.unwrap().iter().all(|t| t.tenant != "slow"), "the cut statement wrote nothing");

    // The database takes no connections, and the writer's is gone: the
    // group is never sent, and the error says nothing was written.
    let name: String = sqlx::query_scalar("SELECT current_database()").fetch_one(&db).await.unwrap();
    let pids: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() \
         AND application_name = 'subs'",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    let admin = raw(&cluster.url()).await;
    admin.execute(format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS false").as_str()).await.unwrap();
    for pid in pids {
        terminate(&db, pid).await;
    }
    // Idle past the writer's check, so it finds its connection dead: the
    // idle time is what the writer looks at.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let err = store.commit(batch([Op::PutTenant(tenant("unsent", json!({}), 1))])).await.expect_err("unreachable");
    assert!(err.is_transient() && !err.may_have_written(), "{err:?}");
    admin.execute(format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS true").as_str()).await.unwrap();
    store.commit(batch([Op::PutTenant(tenant("back", json!({}), 1))])).await.expect("the database is back");
    let tenants: Vec<String> = store.tenants().await.unwrap().into_iter().map(|t| t.tenant).collect();
    assert_eq!(tenants, ["back", "next"]);
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_that_lost_its_connection_says_notices_were_missed() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let db = raw(&url).await;
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    let mut to_b = shared(&b).listen();
    let listeners: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN%' AND datname = current_database()",
    )
    .fetch_all(&db)
    .await
    .unwrap();
    assert_eq!(listeners.len(), 2, "one listener per node");
    for pid in listeners {
        terminate(&db, pid).await;
    }
    // What A commits before B listens again is lost to B, which is told.
    let missed = loop {
        let noticed = next(&mut to_b).await;
        if noticed.notice == Notice::Missed {
            break noticed;
        }
    };
    assert_eq!(missed.from, "", "from no node");
    a.commit(batch([Op::PushInbox { session: key("s"), item: Box::new(item("after")) }])).await.unwrap();
    assert_eq!(next(&mut to_b).await.notice, Notice::Inbox { key: key("s") }, "listening again");
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_of_the_server_does_not_make_live_nodes_look_dead() {
    // A cluster of its own: the others' tests must not see it restart.
    let Some(cluster) = TestCluster::start() else { return };
    let url = cluster.fresh_database();
    let long = || PgOptions {
        shared: SharedSettings { lease: Duration::from_secs(60), renew: Duration::from_secs(20) },
        ..options()
    };
    let (a, b) = (open(&url, long()).await, open(&url, long()).await);
    let s = key("s");
    a.commit(batch([Op::PutSession(Box::new(session(&s, SessionStatus::Running)))])).await.unwrap();
    granted(&a, &s).await;
    cluster.restart(subs_store_postgres::testing::StopMode::Fast);
    // A's lock went with the restart and its next renewal is 20 s away:
    // until then its heartbeat alone says it lives, and it does.
    let live =
        eventually(Duration::from_secs(10), "the server is back", || async { shared(&b).live_nodes().await }).await;
    assert_eq!(live.len(), 2, "{live:?}");
    assert!(matches!(claim(&b, &s).await, Claim::HeldBy { .. }));
    assert_eq!(shared(&b).orphans(10).await.unwrap(), []);
    // Commits fail while the server is down and work once it is back. The
    // writer's connection died with the restart: its first use may report
    // that (in doubt, as the store cannot tell how far a group got) before
    // it reconnects.
    eventually(Duration::from_secs(10), "the writer reconnects", || async {
        let error = a.commit(batch([Op::PutSession(Box::new(session(&s, SessionStatus::Idle)))])).await.err();
        match error {
            None => Ok(()),
            Some(error) => {
                assert!(error.may_have_written() || matches!(error, StoreError::Io { .. }), "{error:?}");
                Err(error)
            }
        }
    })
    .await;
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// Waits (at most 10 s) for the next notice.
async fn next(receiver: &mut broadcast::Receiver<Noticed>) -> Noticed {
    tokio::time::timeout(Duration::from_secs(10), receiver.recv()).await.expect("a notice in time").expect("a notice")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_reach_the_other_nodes_in_one_notify_per_commit() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    let (mut to_a, mut to_b) = (shared(&a).listen(), shared(&b).listen());
    let mut raw = sqlx::postgres::PgListener::connect(&url).await.unwrap();
    raw.listen(NOTICE_CHANNEL).await.unwrap();
    let (s1, s2) = (key("s1"), key("s2"));
    a.commit(batch([
        Op::PutEvent { session: s1.clone(), seq: 4, record: event(4) },
        Op::PutEvent { session: s1.clone(), seq: 5, record: event(5) },
        Op::PutEvent { session: s2.clone(), seq: 0, record: event(0) },
        Op::PushInbox { session: s2.clone(), item: Box::new(item("x")) },
        Op::PutReply { id: "req-1".to_owned(), reply: json!({"ok": true}) },
        Op::PutAgent(agent("t1", "x")),
        Op::PutSession(Box::new(session(&s1, SessionStatus::Running))),
    ]))
    .await
    .unwrap();
    let from = shared(&a).node().to_owned();
    let expected = [
        Notice::Events { key: s1.clone(), first: 4, last: 5 },
        Notice::Events { key: s2.clone(), first: 0, last: 0 },
        Notice::Inbox { key: s2.clone() },
        Notice::Reply { id: "req-1".to_owned() },
        Notice::Records,
    ];
    for notice in &expected {
        assert_eq!(next(&mut to_b).await, Noticed { from: from.clone(), notice: notice.clone() });
    }
    // One NOTIFY carried them all.
    let notification = tokio::time::timeout(Duration::from_secs(10), raw.recv()).await.unwrap().unwrap();
    let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
    assert_eq!(payload["f"], json!(from));
    assert_eq!(payload["n"].as_array().map(Vec::len), Some(5), "{payload}");
    // A batch writing nothing of note sends nothing.
    a.commit(batch([Op::PutSession(Box::new(session(&s1, SessionStatus::Idle)))])).await.unwrap();

    // Many notices: several NOTIFYs, each under the limit, all delivered.
    let long = |n: usize| key(&format!("{n}-{}", "x".repeat(200)));
    let ops: Vec<Op> = (0..100).map(|n| Op::PutEvent { session: long(n), seq: 1, record: event(1) }).collect();
    a.commit(batch(ops)).await.unwrap();
    let mut heard = Vec::new();
    for _ in 0..100 {
        heard.push(next(&mut to_b).await.notice);
    }
    let mut sent: Vec<Notice> = (0..100).map(|n| Notice::Events { key: long(n), first: 1, last: 1 }).collect();
    sent.sort_by_key(|notice| format!("{notice:?}"));
    heard.sort_by_key(|notice| format!("{notice:?}"));
    assert_eq!(heard, sent);
    let mut payloads = 0;
    let mut notices = 0;
    while notices < 100 {
        let notification = tokio::time::timeout(Duration::from_secs(10), raw.recv()).await.unwrap().unwrap();
        assert!(notification.payload().len() < 8000);
        let payload: serde_json::Value = serde_json::from_str(notification.payload()).unwrap();
        notices += payload["n"].as_array().map_or(0, Vec::len);
        payloads += 1;
    }
    assert!((2..10).contains(&payloads), "{payloads} payloads for 100 notices");

    // B's commit reaches A; neither hears itself.
    b.commit(batch([Op::PushInbox { session: s1.clone(), item: Box::new(item("y")) }])).await.unwrap();
    assert_eq!(
        next(&mut to_a).await,
        Noticed { from: shared(&b).node().to_owned(), notice: Notice::Inbox { key: s1 } }
    );
    let heard = tokio::time::timeout(Duration::from_millis(200), async {
        tokio::select! {
            notice = to_a.recv() => ("A", notice),
            notice = to_b.recv() => ("B", notice),
        }
    })
    .await;
    assert!(heard.is_err(), "each node hears only the other: {heard:?}");
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_and_replies_round_trip() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    let bytes: Vec<u8> = (0..300_000u32).map(|n| (n % 251) as u8).collect();
    shared(&a).put_blob("sha256:abc", &bytes).await.unwrap();
    shared(&a).put_blob("sha256:abc", b"ignored: the digest is stored").await.unwrap();
    assert_eq!(shared(&b).blob("sha256:abc").await.unwrap(), Some(bytes));
    assert_eq!(shared(&b).blob("sha256:nope").await.unwrap(), None);

    let reply = json!({"status": 202, "turn_id": "t-1"});
    a.commit(batch([Op::PutReply { id: "r1".to_owned(), reply: reply.clone() }])).await.unwrap();
    assert_eq!(b.reply("r1").await.unwrap(), Some(reply));
    assert_eq!(b.reply("r2").await.unwrap(), None);
    b.commit(batch([Op::DeleteReply { id: "r1".to_owned() }])).await.unwrap();
    assert_eq!(a.reply("r1").await.unwrap(), None);
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// A blob is deleted only once it is older than the age asked for, and
/// storing it again makes it young: an upload on another node stores the
/// blob just before the record naming it. Blobs that are no component
/// (a shared secret) are never listed as stale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_are_deleted_once_stale() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let (a, b) = (open(&url, options()).await, open(&url, options()).await);
    shared(&a).put_blob("sha256:old", b"old").await.unwrap();
    shared(&a).put_blob("sha256:new", b"new").await.unwrap();
    shared(&a).put_blob("secret:tokens", b"s").await.unwrap();
    let pool = raw(&url).await;
    pool.execute(
        "UPDATE blobs SET stored = now() - interval '2 hours' WHERE digest IN ('sha256:old', 'secret:tokens')",
    )
    .await
    .unwrap();
    let hour = Duration::from_secs(3600);
    assert_eq!(shared(&b).stale_blobs(hour).await.unwrap(), ["sha256:old"]);
    assert!(!shared(&b).delete_blob("sha256:new", hour).await.unwrap(), "stored within the hour");
    assert!(shared(&b).delete_blob("sha256:old", hour).await.unwrap());
    assert_eq!(shared(&a).blob("sha256:old").await.unwrap(), None);
    assert!(!shared(&b).delete_blob("sha256:old", hour).await.unwrap(), "gone already");

    // Stored again: young again, with the bytes first stored.
    pool.execute("UPDATE blobs SET stored = now() - interval '2 hours' WHERE digest = 'sha256:new'").await.unwrap();
    shared(&a).put_blob("sha256:new", b"other bytes").await.unwrap();
    assert!(shared(&b).stale_blobs(hour).await.unwrap().is_empty());
    assert!(!shared(&b).delete_blob("sha256:new", hour).await.unwrap());
    assert_eq!(shared(&b).blob("sha256:new").await.unwrap().as_deref(), Some(&b"new"[..]));
    assert!(shared(&b).delete_blob("sha256:new", Duration::ZERO).await.unwrap());
    assert_eq!(shared(&a).blob("secret:tokens").await.unwrap().as_deref(), Some(&b"s"[..]));
    a.close().await.unwrap();
    b.close().await.unwrap();
}

/// An answer nobody came for is deleted after an hour, by whichever
/// node's heartbeat gets to it (each does soon after it starts, then once
/// a minute).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_nobody_read_are_deleted_after_an_hour() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let store = open(&url, options()).await;
    store
        .commit(batch([
            Op::PutReply { id: "old".to_owned(), reply: json!(1) },
            Op::PutReply { id: "new".to_owned(), reply: json!(2) },
        ]))
        .await
        .unwrap();
    let db = raw(&url).await;
    db.execute("UPDATE replies SET stored = now() - interval '61 minutes' WHERE id = 'old'").await.unwrap();
    store.close().await.unwrap();
    let store = open(&url, short_leases()).await;
    eventually(Duration::from_secs(10), "the old reply goes", || async {
        match store.reply("old").await.unwrap() {
            None => Ok(()),
            Some(old) => Err(old),
        }
    })
    .await;
    assert_eq!(store.reply("new").await.unwrap(), Some(json!(2)));
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_is_corrupt_not_a_panic() {
    let cluster = cluster!();
    let url = cluster.fresh_database();
    let store = open(&url, options()).await;
    let db = raw(&url).await;
    db.execute(
        "INSERT INTO session_ids (tenant, session) VALUES ('t1', 's1'); \
         INSERT INTO sessions (sid, tenant, id, open_step, identity, record) SELECT sid, 't1', 's1', 0, NULL, '\\x7b6e6f74206a736f6e' FROM session_ids; \
         INSERT INTO events SELECT sid, 0, '\\x7b6e6f74' FROM session_ids; \
         INSERT INTO messages SELECT sid, -1, '\\x7b7d' FROM session_ids; \
         INSERT INTO steps SELECT sid, 0, '\\x7b22737461747573223a227765697264227d' FROM session_ids",
    )
    .await
    .unwrap();
    let corrupt = |result: Result<_, StoreError>, table: &str| match result {
        Err(StoreError::Corrupt { table: found, .. }) => assert_eq!(found, table),
        other => panic!("{table}: {other:?}"),
    };
    corrupt(store.session(&key("s1")).await.map(|_| ()), "sessions");
    corrupt(store.sessions(None).await.map(|_| ()), "sessions");
    corrupt(store.load(&key("s1")).await.map(|_| ()), "sessions");
    corrupt(store.events(&key("s1"), None, 10).await.map(|_| ()), "events");
    corrupt(store.steps(&key("s1"), 0, 10).await.map(|_| ()), "steps");
    corrupt(store.messages(&key("s1")).await.map(|_| ()), "messages");
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_store_takes_nothing_more() {
    let cluster = cluster!();
    let store = open(&cluster.fresh_database(), options()).await;
    store.commit(full_batch(&key("s1"))).await.unwrap();
    store.close().await.unwrap();
    assert!(matches!(store.commit(full_batch(&key("s2"))).await, Err(StoreError::Closed)));
    assert!(matches!(store.session(&key("s1")).await, Err(StoreError::Closed)));
    assert!(matches!(store.stats(), Err(StoreError::Closed)));
    assert!(matches!(shared(&store).claim(&key("s1")).await, Err(StoreError::Closed)));
    store.close().await.unwrap();
}
