//! [`RedbStore`]: the [`Store`] kept in one redb file, with group commit.
//!
//! # What is in the file
//!
//! Every record is a JSON value (`serde_json`). Format 6:
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `active` | storage key (`tenant/session`) | nothing: the session's status is not idle |
//! | `log` | (storage key, the session's log number) | one commit's [`MessageRecord`]s, [`StepRecord`]s, [`EventRecord`]s and [`CallRecord`] changes for the session, framed ([`history`]) |
//! | `log` | (storage key, [`AGENT_SLOT`]) | the session's agent config, when it has one, written only when it changes |
//! | `log` | (storage key, [`SESSION_SLOT`]) | [`SessionRecord`], without its agent config |
//! | `inbox` | (storage key, seq) | [`InboxItem`] |
//! | `turns` | (storage key, turn id) | [`TurnRecord`] |
//! | `agents` | (tenant, agent id) | [`AgentRecord`] |
//! | `keys` | (tenant, key hash) | [`KeyRecord`] |
//! | `tenants` | (tenant, `""`) | [`TenantRecord`] |
//! | `owners` | (tenant, owner's identity id, session id) | nothing: an index of sessions by owner, written with a session's first record |
//! | `decisions` | (tenant, agent id, version) | `u64`: the decisions the version made, the sum of [`Op::CountDecisions`] |
//! | `session_counts` | tenant | `u64`: how many sessions the tenant has |
//! | `meta` | name | `u64`: the file format, its id, the next inbox number and the last journal record the file holds |
//!
//! Tuple keys sort by session first, so every read of one session is a
//! single range scan. A session's history (messages, steps, events, calls)
//! is a log: each commit appends one value per session it touches, so one
//! step costs the B-trees one insert there instead of one in each of four
//! tables — the pages a commit dirties, not the bytes, are what bound the
//! writer (see [`history`]). Reads fold the log: the last frame of a step
//! or call wins. `active` is kept in step with each `PutSession` (written
//! only when it changes), so [`Store::unfinished`] reads a small index
//! (plus the inbox, which only holds items not yet taken in) instead of
//! every session.
//!
//! Older files are migrated when opened, in one transaction: format 1 (a
//! table per record kind: `messages`, `steps`, `events`, `calls`) has its
//! records moved into `log`; format 2 (no `tenants`) gains the table, with
//! a record for every tenant that has a stored key, so the tenants an
//! operator made with `subs keys create` are listed as such; format 3 (no
//! `owners`, no `decisions`), and the older ones, gain both, filled from
//! every session record (its owner, its decisions by version); format 4
//! gains `session_counts`. Format 5 (each session record holding its agent
//! config) needs no change: a record with no [`AGENT_SLOT`] beside it is
//! read with the config it holds, and its next commit moves the config into
//! the slot.
//!
//! # Writes: group commit
//!
//! [`Store::commit`] encodes the batch on the caller's task, queues it to a
//! single writer thread and awaits a oneshot answer, so no tokio worker ever
//! blocks on the disk. The writer takes every batch already queued (at most
//! [`MAX_GROUP`]), applies them in arrival order in one redb write
//! transaction, makes it durable with one sync and then answers every
//! waiter. Under load many batches share one sync; alone, a batch costs
//! one. A group that already holds several batches when the queue runs dry
//! yields the writer's CPU once before it commits, so that sessions sharing
//! the CPU with it add their next batches to it (see `run_writer`). The sync is usually the [`journal`]'s: the group is appended there
//! and synced, and redb commits without syncing; every so often a group is
//! committed with redb's immediate durability instead (a checkpoint), and
//! opening the store after a crash applies the journal's records that the
//! file lacks.
//!
//! If writing a group's ops fails (nothing is committed then), the writer
//! retries each batch of the group in a transaction of its own, so one bad
//! batch cannot fail the unrelated batches that happened to share its
//! group. If the commit itself fails, every batch of the group gets the
//! error: redb guarantees that a failed commit leaves none of it visible.
//!
//! # Reads
//!
//! Reads open a redb read transaction on the caller's thread: they see the
//! last committed state, never block on the writer and take microseconds.
//!
//! # Shutdown
//!
//! [`RedbStore::close`] stops taking commits, lets the writer finish every
//! batch already queued, closes the database on the writer thread and joins
//! it; when it returns the file is free to be opened again. Dropping the
//! store does the same (and waits for the writer), without reporting
//! errors.
//!
//! # The code
//!
//! This file holds the store's handle: opening, closing, and the [`Store`]
//! methods. Each concern has its module: `schema` (tables, format
//! versions, migration, error mapping), `encode` (ops to writes, records
//! to bytes; the journal records the same writes), `writer` (the writer
//! thread and group commit), `read` (reads and log folding), `recovery`
//! (applying the journal at open), [`journal`] and [`history`] (the log's
//! framing).

mod encode;
mod history;
mod journal;
mod read;
mod recovery;
mod schema;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, mpsc};
use std::thread::JoinHandle;

use ::redb::{
    Database, DatabaseError, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable, Table,
    TableDefinition, WriteTransaction,
};
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

#[allow(unused_imports)]
use self::{encode::*, read::*, recovery::*, schema::*, writer::*};
use subs_store::{
    AgentRecord, Batch, BoxFuture, CallRecord, EventRecord, InboxItem, KeyRecord, LoadedSession, McpServerRecord,
    MessageRecord, Op, SessionHead, SessionKey, SessionRecord, SessionStatus, StepRecord, Store, StoreAdmin,
    StoreError, StoreResult, StoreStats, TenantRecord, TurnRecord, ready,
};

/// The most batches one write transaction takes. Bounds how long the first
/// waiter of a group waits behind the others, and the transaction's size.
pub const MAX_GROUP: usize = 256;

/// The most memory redb may use to cache pages of the file (reads and
/// writes not yet flushed). redb's default is 1 GiB, which a busy store
/// fills with pages of sessions long idle: resident memory would then grow
/// with the number of sessions stored. The sessions being worked on fit in
/// far less.
pub const CACHE_BYTES: usize = 32 * 1024 * 1024;

/// The [`Store`] on a redb file. See the [module docs](self) for the layout
/// and the commit path.
///
/// Share it as `Arc<RedbStore>` (or `Arc<dyn Store>`); all methods take
/// `&self`. Shut it down with [`close`](Self::close). Dropping it without
/// closing also releases the file, but the drop blocks its thread until the
/// writer has committed what was queued.
pub struct RedbStore {
    /// The file, for errors and logs.
    path: PathBuf,
    /// The database, for reads. `None` once closed; the lock lets `close`
    /// wait for reads in progress before it lets the database go.
    db: RwLock<Option<Arc<Database>>>,
    /// Where commits queue for the writer. `None` once closed, which is how
    /// later commits learn that the store is closed.
    queue: Mutex<Option<mpsc::Sender<Request>>>,
    /// The writer thread, joined on close so the file is released when
    /// `close` returns.
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Counts the writer keeps for [`Store::stats`].
    counters: Arc<Tally>,
}

/// What the writer has done.
#[derive(Debug, Default)]
struct Tally {
    /// Batches committed.
    batches: AtomicU64,
    /// Groups committed, each made durable by one sync (the journal's or
    /// redb's).
    commits: AtomicU64,
    /// Fault injection: microseconds every commit takes on top of its own
    /// work, spent on the writer thread as a slow fsync would be.
    slow_disk_micros: AtomicU64,
}

impl RedbStore {
    /// Opens the store at `path`, creating the file if it does not exist,
    /// and starts its writer thread.
    ///
    /// Fails with [`StoreError::Locked`] when another process, or another
    /// open `RedbStore` of this process, holds the file: redb locks the
    /// whole file for as long as it is open.
    ///
    /// Blocking: it commits once (creating missing tables), and after an
    /// unclean shutdown redb first repairs the file, in time proportional
    /// to its size. Call it at startup, or through `spawn_blocking`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let db = match Database::builder().set_cache_size(CACHE_BYTES).create(&path) {
            Ok(db) => db,
            // LockProtocolMismatch: another process holds it with a redb
            // that locks differently; to the user it is just as locked.
            Err(DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch) => {
                return Err(StoreError::Locked { path: path.display().to_string() });
            }
            Err(err) => return Err(redb_error(name::DATABASE, err)),
        };
        prepare(&db)?;
        let journal = recover(&db, journal::Journal::path_for(&path))?;
        let db = Arc::new(db);
        let counters = Arc::new(Tally::default());
        let (queue, requests) = mpsc::channel();
        let writer = {
            let writer = Writer { db: Arc::clone(&db), journal, broken: None, lsns: NextLsns::default() };
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("subs-store-writer".to_owned())
                .spawn(move || run_writer(writer, requests, &counters))
                .map_err(|err| StoreError::io("cannot start the store's writer thread", err))?
        };
        Ok(Self {
            path,
            db: RwLock::new(Some(db)),
            queue: Mutex::new(Some(queue)),
            writer: Mutex::new(Some(writer)),
            counters,
        })
    }

    /// Fault injection for tests: from now on every commit takes `delay`
    /// longer, spent on the writer thread before the transaction commits,
    /// as on a disk whose fsync is slow. Commits queue behind it and group
    /// as they would; zero turns it off.
    pub fn inject_fsync_delay(&self, delay: std::time::Duration) {
        let micros = u64::try_from(delay.as_micros()).unwrap_or(u64::MAX);
        self.counters.slow_disk_micros.store(micros, Ordering::Relaxed);
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Shuts the store down: commits from now on fail with
    /// [`StoreError::Closed`], batches already queued are still committed
    /// and answered, then the database is closed and the writer joined.
    /// When this returns the file can be opened again.
    ///
    /// Reads after `close` fail with [`StoreError::Closed`]. Closing twice
    /// is harmless; the second call returns at once. The error, if any, is
    /// redb's from closing the file (the data committed so far is durable
    /// regardless).
    pub async fn close(&self) -> Result<(), StoreError> {
        let (answer, closed) = oneshot::channel();
        if !self.shut(Some(answer)) {
            return Ok(());
        }
        // The writer answers only after it has let the database go.
        let result = closed.await;
        // It has nothing left to do, so this join is immediate.
        let joined = lock(&self.writer).take().map_or(Ok(()), JoinHandle::join);
        match (result, joined) {
            (Ok(result), Ok(())) => result,
            // Only a bug in the writer gets here.
            _ => Err(StoreError::io("cannot close the store", "its writer thread panicked")),
        }
    }

    /// Stops taking commits and lets go of the read handle, so the writer's
    /// handle is the last one and the database closes when the writer
    /// drops it. `answer`, when given, learns how closing went. Returns
    /// whether this call did it (false: already shut).
    fn shut(&self, answer: Option<oneshot::Sender<Result<(), StoreError>>>) -> bool {
        let Some(queue) = lock(&self.queue).take() else {
            return false;
        };
        // Waits for reads in progress: none may outlive the database.
        self.db.write().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(answer) = answer {
            // Fails only if the writer is gone already; then there is
            // nothing left to close and the dropped answer says so.
            let _ = queue.send(Request::Close { answer });
        }
        // Dropping the sender ends the writer's loop once the queue is
        // drained, with or without a Close request.
        true
    }

    /// Runs `read` in a read transaction.
    fn read<T>(&self, read: impl FnOnce(&ReadTransaction) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_ref().ok_or(StoreError::Closed)?;
        let txn = db.begin_read().map_err(|err| redb_error(name::DATABASE, err))?;
        read(&txn)
    }

    /// At most `limit` session records, as [`each_session`] finds them.
    fn scan_sessions(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let mut sessions = Vec::new();
            each_session(&table, tenant, after, |storage, record| {
                if sessions.len() >= limit {
                    return Ok(ControlFlow::Break(()));
                }
                if let Some(record) = record {
                    sessions.push(session_record(&table, storage, record)?);
                }
                Ok(ControlFlow::Continue(()))
            })?;
            Ok(sessions)
        })
    }

    /// Encodes `batch` and queues it for the writer; `None` when there is
    /// nothing to write.
    fn enqueue(&self, batch: Batch) -> Result<Option<oneshot::Receiver<Result<(), StoreError>>>, StoreError> {
        let writes = encode(batch)?;
        let queue = lock(&self.queue);
        let queue = queue.as_ref().ok_or(StoreError::Closed)?;
        if writes.is_empty() {
            return Ok(None);
        }
        let (answer, outcome) = oneshot::channel();
        queue.send(Request::Commit { writes, answer }).map_err(|_| StoreError::Closed)?;
        Ok(Some(outcome))
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        self.shut(None);
        // Waits for the queued batches to be written, so that the file is
        // released (and reopenable) once the store is gone.
        if let Some(writer) = self.writer.get_mut().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = writer.join();
        }
    }
}

impl fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedbStore").field("path", &self.path).field("counters", &self.counters).finish()
    }
}

impl Store for RedbStore {
    /// Queues the batch for the writer as soon as it is called (not when
    /// first polled), so commits made one after another by one task are
    /// applied in that order. Dropping the returned future does not take
    /// the batch back: it may still be committed.
    fn commit(&self, batch: Batch) -> BoxFuture<'_, StoreResult<()>> {
        let queued = self.enqueue(batch);
        Box::pin(async move {
            match queued? {
                // The writer never drops an answer unanswered unless it
                // died; the store takes no more writes then.
                Some(outcome) => outcome.await.unwrap_or(Err(StoreError::Closed)),
                None => Ok(()),
            }
        })
    }

    fn session<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionRecord>>> {
        ready(self.read_session(key))
    }

    fn session_head<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionHead>>> {
        ready(self.read_session_as(key))
    }

    fn sessions<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        ready(self.read_all_sessions(tenant))
    }

    fn sessions_page<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        ready(self.read_page_of_sessions(tenant, after, limit))
    }

    fn sessions_of_identity<'a>(
        &'a self,
        tenant: &'a str,
        identity: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        ready(self.read_sessions_of_identity(tenant, identity, after, limit))
    }

    fn session_count<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        ready(self.read_session_count(tenant))
    }

    fn unfinished(&self) -> BoxFuture<'_, StoreResult<Vec<SessionKey>>> {
        ready(self.read_unfinished())
    }

    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<LoadedSession>>> {
        ready(self.read_load(key))
    }

    fn messages<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, MessageRecord)>>> {
        ready(self.read_messages(key))
    }

    fn steps<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        ready(self.read_steps(key, from, limit))
    }

    fn steps_page<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        ready(self.read_steps_page(key, from, limit, max_bytes))
    }

    fn calls_named<'a>(
        &'a self,
        key: &'a SessionKey,
        ids: &'a [String],
    ) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        ready(self.read_calls_named(key, ids))
    }

    fn calls<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        ready(self.read_calls(key))
    }

    fn agents<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<AgentRecord>>> {
        ready(self.read_agents(tenant))
    }

    fn agent<'a>(&'a self, tenant: &'a str, agent_id: &'a str) -> BoxFuture<'a, StoreResult<Option<AgentRecord>>> {
        ready(self.read_agent(tenant, agent_id))
    }

    fn decision_counts<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, StoreResult<BTreeMap<String, u64>>> {
        ready(self.read_decision_counts(tenant, agent_id))
    }

    fn keys(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>> {
        ready(self.read_keys())
    }

    fn tenants(&self) -> BoxFuture<'_, StoreResult<Vec<TenantRecord>>> {
        ready(self.read_tenants())
    }

    fn mcp_servers(&self) -> BoxFuture<'_, StoreResult<Vec<McpServerRecord>>> {
        ready(self.read_mcp_servers())
    }

    fn events<'a>(
        &'a self,
        key: &'a SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, EventRecord)>>> {
        ready(self.read_events(key, after, limit))
    }

    fn turn<'a>(&'a self, key: &'a SessionKey, turn_id: &'a str) -> BoxFuture<'a, StoreResult<Option<TurnRecord>>> {
        ready(self.read_turn(key, turn_id))
    }

    fn inbox<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, InboxItem)>>> {
        ready(self.read_inbox(key))
    }

    fn reply<'a>(&'a self, _id: &'a str) -> BoxFuture<'a, StoreResult<Option<serde_json::Value>>> {
        // Nothing is forwarded to a store one node owns (see `encode`).
        ready(Ok(None))
    }
}

impl StoreAdmin for RedbStore {
    fn stats(&self) -> StoreResult<StoreStats> {
        self.read_stats()
    }

    fn stored_bytes(&self) -> BoxFuture<'_, StoreResult<u64>> {
        ready(self.read_stored_bytes())
    }
}

/// Locks `mutex`, ignoring poisoning: every critical section here leaves
/// its data consistent, so a panic elsewhere is no reason to stop.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write as _};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use serde_json::json;
    use tempfile::TempDir;

    use super::*;
    use subs_store::TurnStatus;
    use subs_store::conformance::sample::*;
    use subs_store::conformance::{self, Backend};

    /// Writes to sessions of this tenant fail once written (test builds
    /// only), so tests can watch a transaction fail after it has written
    /// part of a batch.
    const POISON_TENANT: &str = "poison";

    pub(super) fn inject_failure(key: &str) -> Result<(), StoreError> {
        match key.split_once('/') {
            Some((POISON_TENANT, _)) => Err(StoreError::io("cannot write", "injected failure")),
            _ => Ok(()),
        }
    }

    /// A fresh directory (removed when dropped) and the store file in it.
    fn temp_file() -> (TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("subs.redb");
        (dir, path)
    }

    fn assert_full_batch(store: &RedbStore, key: &SessionKey) {
        assert_eq!(store.read_session(key).unwrap(), Some(session(key, SessionStatus::Running)));
        assert_eq!(store.read_messages(key).unwrap(), vec![(0, message("m0")), (1, message("m1"))]);
        assert_eq!(store.read_steps(key, 0, usize::MAX).unwrap(), vec![(0, step("d0"))]);
        assert_eq!(store.read_calls(key).unwrap(), vec![call("c1")]);
        assert_eq!(store.read_events(key, None, 10).unwrap(), vec![(0, event(0))]);
        assert_eq!(store.read_turn(key, "turn-1").unwrap(), Some(turn(TurnStatus::Running)));
        let inbox = store.read_inbox(key).unwrap();
        assert_eq!(inbox.len(), 1);
        assert_eq!(inbox[0].1, item("hello"));
    }

    fn assert_nothing_of(store: &RedbStore, key: &SessionKey) {
        assert_eq!(store.read_session(key).unwrap(), None);
        assert!(store.read_messages(key).unwrap().is_empty());
        assert!(store.read_steps(key, 0, usize::MAX).unwrap().is_empty());
        assert!(store.read_calls(key).unwrap().is_empty());
        assert!(store.read_events(key, None, 10).unwrap().is_empty());
        assert_eq!(store.read_turn(key, "turn-1").unwrap(), None);
        assert!(store.read_inbox(key).unwrap().is_empty());
    }

    /// Rewrites the file at `path` as an older engine left it: `undo`
    /// removes what format `format` did not have, and the file says
    /// `format`.
    fn as_older_format(path: &Path, format: u64, undo: impl FnOnce(&::redb::WriteTransaction)) {
        let db = Database::open(path).unwrap();
        let txn = db.begin_write().unwrap();
        undo(&txn);
        txn.open_table(META).unwrap().insert(META_FORMAT, format).unwrap();
        txn.commit().unwrap();
    }

    /// The store's database, for tests that reach under the `Store` API.
    fn database(store: &RedbStore) -> Arc<Database> {
        Arc::clone(store.db.read().unwrap().as_ref().expect("open"))
    }

    /// Everything the store holds, as JSON, for comparing two stores.
    fn dump(store: &RedbStore, turns: &[(&str, &str)]) -> serde_json::Value {
        let sessions = store.read_all_sessions(None).unwrap();
        let per_session: Vec<_> = sessions
            .iter()
            .map(|record| {
                let key = &record.key;
                let turns: Vec<_> = turns
                    .iter()
                    .filter(|(s, _)| *s == key.session)
                    .map(|(_, id)| json!([id, store.read_turn(key, id).unwrap()]))
                    .collect();
                json!({
                    "session": record,
                    "messages": store.read_messages(key).unwrap(),
                    "steps": store.read_steps(key, 0, usize::MAX).unwrap(),
                    "open_steps": store.read_steps(key, record.first_open_step, usize::MAX).unwrap(),
                    "calls": store.read_calls(key).unwrap(),
                    "events": store.read_events(key, None, usize::MAX).unwrap(),
                    "events_after_1": store.read_events(key, Some(1), 2).unwrap(),
                    "turns": turns,
                    "inbox": store.read_inbox(key).unwrap(),
                })
            })
            .collect();
        let mut unfinished = store.read_unfinished().unwrap();
        unfinished.sort();
        json!({
            "sessions": per_session,
            "unfinished": unfinished,
            "agents": store.read_agents(None).unwrap(),
            "keys": store.read_keys().unwrap(),
        })
    }

    /// The turns the format-1 fixture holds, by session.
    const FIXTURE_TURNS: &[(&str, &str)] = &[("s1", "turn-1"), ("s1", "turn-2"), ("s2", "turn-1"), ("s3", "turn-9")];

    /// A file written by the format-1 layout (a table per record kind),
    /// with what its reads returned then: open it with this code, and every
    /// read still returns the same; then it takes new commits and reopens.
    ///
    /// The fixture was written by the store at 91a0f80 (the last format-1
    /// code) from batches built with this module's helpers: session `s1`
    /// with two turns, a step decided and one pending, a call settled and
    /// two in flight, events, an inbox item taken in; `s2` idle with an
    /// inbox item waiting; `s3` of another tenant; an agent and a key. The
    /// JSON beside it is [`dump`] of that store before it closed.
    #[tokio::test]
    async fn a_format_1_file_is_migrated_and_reads_the_same() {
        let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixtures.join("store-format-1.json")).unwrap()).unwrap();
        let (_dir, path) = temp_file();
        std::fs::copy(fixtures.join("store-format-1.redb"), &path).unwrap();
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_read().unwrap();
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_TABLE_PER_KIND), "the fixture is a format-1 file");
        }

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(dump(&store, FIXTURE_TURNS), expected);
        // `load` reads in one pass what the separate reads return.
        for record in store.read_all_sessions(None).unwrap() {
            let key = &record.key;
            let separately = LoadedSession {
                messages: store.read_messages(key).unwrap(),
                calls: store.read_calls(key).unwrap(),
                steps: store.read_steps(key, record.first_open_step, usize::MAX).unwrap(),
                record: record.clone(),
            };
            assert_eq!(store.read_load(key).unwrap(), Some(separately), "{key}");
        }
        assert_eq!(store.read_load(&key("nobody")).unwrap(), None);
        // The old tables are gone, the file says the current format, and
        // the tenant of the stored key has a record.
        {
            let db = database(&store);
            let txn = db.begin_read().unwrap();
            let tables: Vec<String> =
                txn.list_tables().unwrap().map(|t| ::redb::TableHandle::name(&t).to_owned()).collect();
            for old in ["sessions", "messages", "steps", "events", "calls"] {
                assert!(!tables.iter().any(|t| t == old), "{old} is still a table: {tables:?}");
            }
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_VERSION));
        }
        assert_eq!(store.read_tenants().unwrap(), [tenant("t1", json!({}), 1)]);
        let stored = store.read_all_sessions(Some("t1")).unwrap().len() as u64;
        assert!(stored > 0, "the fixture has sessions");
        assert_eq!(store.read_session_count("t1").unwrap(), stored);
        // Migrated sessions take new history after the old.
        let s1 = key("s1");
        store
            .commit(batch([
                Op::PutMessage { session: s1.clone(), seq: 3, record: message("m3") },
                Op::PutEvent { session: s1.clone(), seq: 4, record: event(4) },
                Op::DeleteCall { session: s1.clone(), call_id: "c2".to_owned() },
            ]))
            .await
            .unwrap();
        let ids = |store: &RedbStore| -> Vec<String> {
            store.read_messages(&s1).unwrap().into_iter().map(|(_, m)| m.message.id.clone()).collect()
        };
        assert_eq!(ids(&store), ["m0", "m1", "m2", "m3"]);
        assert_eq!(store.read_events(&s1, Some(2), 10).unwrap(), [(3, event(3)), (4, event(4))]);
        assert_eq!(store.read_calls(&s1).unwrap(), [call("c3")]);
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(ids(&store), ["m0", "m1", "m2", "m3"]);
        assert_eq!(store.read_calls(&s1).unwrap(), [call("c3")]);
        store.close().await.unwrap();
    }

    /// Commits are made durable by the journal, and closing checkpoints
    /// them into the file: the file alone then holds them, and the
    /// journal has nothing left to apply at the next open.
    #[tokio::test]
    async fn closing_checkpoints_the_journal_into_the_file() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        for n in 0..3 {
            store
                .commit(batch([Op::PushInbox { session: key("s"), item: Box::new(item(&format!("i{n}"))) }]))
                .await
                .unwrap();
        }
        store.close().await.unwrap();
        let (id, applied) = journal_position(&path);
        assert_eq!(applied, 3, "each commit went through the journal");
        let journal = journal::Journal::path_for(&path);
        assert!(journal::Journal::open(journal.clone(), id, applied).unwrap().1.is_empty());
        assert_eq!(journal::Journal::open(journal, id, 0).unwrap().1.len(), 3);

        // The database file deleted, its journal left: a new file takes
        // nothing from it.
        std::fs::remove_file(&path).unwrap();
        let store = RedbStore::open(&path).unwrap();
        assert!(store.read_inbox(&key("s")).unwrap().is_empty());
        store.close().await.unwrap();
        assert_ne!(journal_position(&path).0, id, "a new file has a new id");
    }

    #[tokio::test]
    async fn a_failed_batch_leaves_nothing_behind() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        // Everything of s1 is written in the transaction before the poisoned
        // op fails it.
        let mut failing = full_batch(&key("s1"));
        failing.push(Op::PutEvent { session: SessionKey::new(POISON_TENANT, "p"), seq: 0, record: event(0) });
        let err = store.commit(failing).await.unwrap_err();
        assert!(matches!(err, StoreError::Io { .. }) && err.to_string().contains("injected"), "{err:?}");

        assert_nothing_of(&store, &key("s1"));
        assert!(store.read_unfinished().unwrap().is_empty());
        let stats = store.read_stats().unwrap();
        assert_eq!((stats.batches, stats.commits), (0, 0));
        // The inbox counter was rolled back with the rest.
        store.commit(batch([Op::PushInbox { session: key("s2"), item: Box::new(item("x")) }])).await.unwrap();
        assert_eq!(store.read_inbox(&key("s2")).unwrap()[0].0, 1);
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_nothing_of(&store, &key("s1"));
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_failing_batch_does_not_fail_the_rest_of_its_group() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let db = database(&store);
        // Holding the write lock stalls the writer in `begin_write` with the
        // first batch, so the next three queue up and form one group.
        let blocker = db.begin_write().unwrap();
        let first = store.commit(full_batch(&key("a")));
        // Time for the writer thread to take `first` alone: nothing tells
        // when it has, and it must before the next three are queued.
        std::thread::sleep(Duration::from_millis(50));
        let good = store.commit(full_batch(&key("b")));
        let poisoned = store.commit(full_batch(&SessionKey::new(POISON_TENANT, "p")));
        let also_good = store.commit(full_batch(&key("c")));
        blocker.abort().unwrap();
        drop(db);

        first.await.unwrap();
        good.await.unwrap();
        assert!(poisoned.await.is_err());
        also_good.await.unwrap();
        for session in ["a", "b", "c"] {
            assert_full_batch(&store, &key(session));
        }
        assert_nothing_of(&store, &SessionKey::new(POISON_TENANT, "p"));
        let stats = store.read_stats().unwrap();
        assert_eq!(stats.batches, 3);
        store.close().await.unwrap();

        // The batches committed one by one after the group failed are in
        // the journal in order, numbered without a gap, and nothing of the
        // failed one is.
        let (id, _) = journal_position(&path);
        let (_, records) = journal::Journal::open(journal::Journal::path_for(&path), id, 0).unwrap();
        let sessions: Vec<(u64, BTreeSet<&str>)> =
            records.iter().map(|(seq, writes)| (*seq, writes.iter().map(Write::key).collect())).collect();
        let only = |session: &'static str| BTreeSet::from([session]);
        assert_eq!(sessions, vec![(1, only("t1/a")), (2, only("t1/b")), (3, only("t1/c"))]);
    }

    #[tokio::test]
    async fn a_log_continues_without_a_gap_after_a_failed_transaction() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let s1 = key("s1");
        let put_event = |seq| Op::PutEvent { session: s1.clone(), seq, record: event(seq) };
        store.commit(batch([put_event(0)])).await.unwrap();
        // The writer numbers s1's second append, then the transaction fails
        // and the append is rolled back: its number must be free again.
        let mut failing = batch([put_event(1)]);
        failing.push(Op::PutEvent { session: SessionKey::new(POISON_TENANT, "p"), seq: 0, record: event(0) });
        store.commit(failing).await.unwrap_err();
        store.commit(batch([put_event(1)])).await.unwrap();
        store.commit(batch([put_event(2)])).await.unwrap();

        let db = database(&store);
        let read = db.begin_read().unwrap();
        let log = read.open_table(LOG).unwrap();
        let storage = s1.storage_key();
        let numbers: Vec<u64> = log
            .range((storage.as_str(), 0)..(storage.as_str(), HISTORY_END))
            .unwrap()
            .map(|entry| entry.unwrap().0.value().1)
            .collect();
        assert_eq!(numbers, vec![1, 2, 3]);
        drop((log, read, db));
        assert_eq!(store.read_events(&s1, None, 10).unwrap(), (0..3).map(|seq| (seq, event(seq))).collect::<Vec<_>>());
        store.close().await.unwrap();
    }

    /// A format-2 file (no `tenants`) opens as the current format: every
    /// tenant with a stored key gets a record, created with its first key,
    /// and nothing else changes.
    #[tokio::test]
    async fn a_format_2_file_gains_a_tenant_for_each_keyed_tenant() {
        let (_dir, path) = temp_file();
        let key = |tenant: &str, hash: &str, created_ms: u64| KeyRecord {
            tenant: tenant.to_owned(),
            hash: hash.to_owned(),
            prefix: "subs_ab".to_owned(),
            name: None,
            created_ms,
        };
        let keys = [key("a", "h1", 5), key("a", "h2", 3), key("b", "h3", 9)];
        let store = RedbStore::open(&path).unwrap();
        let mut ops: Vec<Op> = keys.iter().cloned().map(Op::PutKey).collect();
        ops.push(Op::PutSession(Box::new(session(&self::key("s1"), SessionStatus::Idle))));
        store.commit(batch(ops)).await.unwrap();
        store.close().await.unwrap();
        // What format 2 wrote: the same tables but `tenants`.
        as_older_format(&path, FORMAT_WITHOUT_TENANTS, |txn| {
            assert!(txn.delete_table(TENANTS).unwrap());
        });

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_tenants().unwrap(), [tenant("a", json!({}), 3), tenant("b", json!({}), 9)]);
        let mut stored = store.read_keys().unwrap();
        stored.sort_by(|x, y| x.hash.cmp(&y.hash));
        assert_eq!(stored, keys);
        assert_eq!(store.read_all_sessions(None).unwrap().len(), 1);
        {
            let db = database(&store);
            let txn = db.begin_read().unwrap();
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_VERSION));
        }
        store.close().await.unwrap();
    }

    /// A format-3 file (no `owners`, no `decisions`) gains both, filled
    /// from its session records: owners list their sessions, and each
    /// agent's versions count the decisions its sessions' records count.
    #[tokio::test]
    async fn a_format_3_file_gains_owners_and_decision_counts() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let record = |id: &str, owner: Option<&str>, agent: &str, versions: &[(&str, u64)]| {
            let mut record = session(&self::key(id), SessionStatus::Idle);
            record.identity.id = owner.map(str::to_owned);
            record.agent_id = agent.to_owned();
            record.versions = versions.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect();
            Op::PutSession(Box::new(record))
        };
        store
            .commit(batch([
                record("s1", Some("alice"), "a", &[("sha256:1", 2), ("sha256:2", 1)]),
                record("s2", None, "a", &[("sha256:1", 3)]),
                record("s3", Some("alice"), "b", &[("sha256:1", 4)]),
                record("s4", Some("bob"), "a", &[]),
            ]))
            .await
            .unwrap();
        store.close().await.unwrap();
        // What format 3 wrote: the same tables but these two.
        as_older_format(&path, FORMAT_WITHOUT_INDEXES, |txn| {
            assert!(txn.delete_table(OWNERS).unwrap());
            assert!(txn.delete_table(DECISIONS).unwrap());
        });

        let store = RedbStore::open(&path).unwrap();
        let owned = |owner: &str| -> Vec<String> {
            store.read_sessions_of_identity("t1", owner, None, 10).unwrap().into_iter().map(|r| r.key.session).collect()
        };
        assert_eq!(owned("alice"), ["s1", "s3"]);
        assert_eq!(owned("bob"), ["s4"]);
        let counts = |agent: &str| store.read_decision_counts("t1", agent).unwrap().into_iter().collect::<Vec<_>>();
        assert_eq!(counts("a"), [("sha256:1".to_owned(), 5), ("sha256:2".to_owned(), 1)]);
        assert_eq!(counts("b"), [("sha256:1".to_owned(), 4)]);
        assert_eq!(store.read_session_count("t1").unwrap(), 4);
        // Kept from then on: a new session of alice's is listed too.
        store.commit(batch([record("s0", Some("alice"), "a", &[])])).await.unwrap();
        assert_eq!(owned("alice"), ["s0", "s1", "s3"]);
        assert_eq!(store.read_session_count("t1").unwrap(), 5);
        store.close().await.unwrap();
    }

    /// A format-4 file (no `session_counts`) gains the count of each
    /// tenant's sessions, and keeps it from then on: a session's first
    /// record raises it, a later record of the same session does not.
    #[tokio::test]
    async fn a_format_4_file_gains_session_counts() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let in_tenant = |tenant: &str, id: &str| SessionKey::new(tenant, id);
        let put = |key: &SessionKey| Op::PutSession(Box::new(session(key, SessionStatus::Idle)));
        store
            .commit(batch([put(&in_tenant("a", "s1")), put(&in_tenant("a", "s2")), put(&in_tenant("b", "s1"))]))
            .await
            .unwrap();
        store.close().await.unwrap();
        // What format 4 wrote: the same tables but `session_counts`.
        as_older_format(&path, FORMAT_WITHOUT_COUNTS, |txn| {
            assert!(txn.delete_table(SESSION_COUNTS).unwrap());
        });

        let store = RedbStore::open(&path).unwrap();
        let counts = |store: &RedbStore| ["a", "b", "c"].map(|t| store.read_session_count(t).unwrap());
        assert_eq!(counts(&store), [2, 1, 0]);
        store.commit(batch([put(&in_tenant("a", "s1")), put(&in_tenant("c", "s1"))])).await.unwrap();
        assert_eq!(counts(&store), [2, 1, 1]);
        store.commit(batch([put(&in_tenant("a", "s3")), put(&in_tenant("a", "s3"))])).await.unwrap();
        assert_eq!(counts(&store), [3, 1, 1]);
        store.close().await.unwrap();
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(counts(&store), [3, 1, 1]);
        {
            let db = database(&store);
            let txn = db.begin_read().unwrap();
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_VERSION));
        }
        store.close().await.unwrap();
    }

    /// An agent config whose system prompt is `system`.
    fn agent_config(system: &str) -> Arc<subs_protocol::AgentConfig> {
        let config = json!({
            "model": "offline",
            "system": system,
            "tools": [{"name": "add", "description": "adds two numbers", "input": {"type": "object"}}],
        });
        Arc::new(serde_json::from_value(config).unwrap())
    }

    /// A running session of `key` with `agent` for its config and `n` in
    /// its state.
    fn configured(key: &SessionKey, agent: Option<Arc<subs_protocol::AgentConfig>>, n: u64) -> SessionRecord {
        let mut record = session(key, SessionStatus::Running);
        record.agent = agent;
        record.state = json!({"n": n});
        record
    }

    /// What session `key`'s two slots of `log` hold: its record's JSON and
    /// its agent config's, if any.
    fn slots(store: &RedbStore, key: &SessionKey) -> (serde_json::Value, Option<serde_json::Value>) {
        let db = database(store);
        let txn = db.begin_read().unwrap();
        let log = txn.open_table(LOG).unwrap();
        let storage = key.storage_key();
        let get = |slot| log.get((storage.as_str(), slot)).unwrap().map(|v| serde_json::from_slice(v.value()).unwrap());
        (get(SESSION_SLOT).expect("a record"), get(AGENT_SLOT))
    }

    /// A session's record is stored without its agent config, which has a
    /// slot of its own: written, and journaled, only by the commits that
    /// change it, however many commits rewrite the record.
    #[tokio::test]
    async fn an_agent_config_is_written_only_when_it_changes() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let s = key("s");
        let first = agent_config("first");
        let commits = [
            (Some(Arc::clone(&first)), true),
            (Some(Arc::clone(&first)), false),
            // Equal, though another allocation: still not written.
            (Some(agent_config("first")), false),
            (Some(agent_config("second")), true),
            (None, true),
            (None, false),
            (Some(agent_config("third")), true),
        ];
        for (n, (agent, _)) in commits.iter().enumerate() {
            let record = configured(&s, agent.clone(), n as u64);
            store.commit(batch([Op::PutSession(Box::new(record.clone()))])).await.unwrap();
            assert_eq!(store.read_session(&s).unwrap(), Some(record), "commit {n}");
            let (stored, slot) = slots(&store, &s);
            assert_eq!(stored["agent"], serde_json::Value::Null, "commit {n}: the record holds no config");
            assert_eq!(slot, agent.as_ref().map(|agent| serde_json::to_value(agent).unwrap()), "commit {n}");
        }
        store.close().await.unwrap();

        // The journal still holds every commit's record: those that kept
        // the config have no write for it.
        let (id, _) = journal_position(&path);
        let records = journal::Journal::open(journal::Journal::path_for(&path), id, 0).unwrap().1;
        let journaled: Vec<bool> = records
            .iter()
            .map(|(_, writes)| writes.iter().any(|write| matches!(write, Write::SessionAgent { .. })))
            .collect();
        assert_eq!(journaled, commits.iter().map(|(_, changed)| *changed).collect::<Vec<_>>());
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_session(&s).unwrap(), Some(configured(&s, Some(agent_config("third")), 6)));
        store.close().await.unwrap();
    }

    /// A config's JSON is kept for its allocation, so a config made after
    /// another was dropped (an allocator would give it the same address
    /// were the first freed) is written as itself.
    #[tokio::test]
    async fn a_config_kept_by_address_is_never_another_configs() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let s = key("s");
        for n in 0..200 {
            let agent = agent_config(&format!("prompt {n}"));
            store.commit(batch([Op::PutSession(Box::new(configured(&s, Some(agent.clone()), n)))])).await.unwrap();
            let (_, slot) = slots(&store, &s);
            assert_eq!(slot, Some(serde_json::to_value(&agent).unwrap()), "commit {n}");
        }
        store.close().await.unwrap();
    }

    /// A format-5 file (each session record holding its agent config) is
    /// read as it is; a session's next commit moves its config into the
    /// slot.
    #[tokio::test]
    async fn a_format_5_record_keeps_its_agent_config() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let (s1, s2) = (key("s1"), key("s2"));
        let old = |key: &SessionKey| configured(key, Some(agent_config("inline")), 0);
        store.commit(batch([Op::PutSession(Box::new(session(&s1, SessionStatus::Idle)))])).await.unwrap();
        store.commit(batch([Op::PutSession(Box::new(session(&s2, SessionStatus::Idle)))])).await.unwrap();
        store.close().await.unwrap();
        // What format 5 wrote: the config inside the record, no slot.
        as_older_format(&path, FORMAT_INLINE_AGENT, |txn| {
            let mut log = txn.open_table(LOG).unwrap();
            for key in [&s1, &s2] {
                let storage = key.storage_key();
                let value = serde_json::to_vec(&old(key)).unwrap();
                log.insert((storage.as_str(), SESSION_SLOT), value.as_slice()).unwrap();
                assert!(log.get((storage.as_str(), AGENT_SLOT)).unwrap().is_none());
            }
        });

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_session(&s1).unwrap(), Some(old(&s1)));
        assert_eq!(store.read_load(&s2).unwrap().map(|loaded| loaded.record), Some(old(&s2)));
        assert_eq!(store.read_all_sessions(None).unwrap(), [old(&s1), old(&s2)]);
        // The same config again, and a new one: each goes to the slot.
        let kept = configured(&s1, Some(agent_config("inline")), 1);
        let replaced = configured(&s2, Some(agent_config("new")), 1);
        store.commit(batch([Op::PutSession(Box::new(kept.clone()))])).await.unwrap();
        store.commit(batch([Op::PutSession(Box::new(replaced.clone()))])).await.unwrap();
        for (key, record) in [(&s1, &kept), (&s2, &replaced)] {
            assert_eq!(store.read_session(key).unwrap().as_ref(), Some(record));
            let (stored, slot) = slots(&store, key);
            assert_eq!(stored["agent"], serde_json::Value::Null);
            assert_eq!(slot, Some(serde_json::to_value(record.agent.as_ref().unwrap()).unwrap()));
        }
        store.close().await.unwrap();
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_all_sessions(None).unwrap(), [kept, replaced]);
        {
            let db = database(&store);
            let txn = db.begin_read().unwrap();
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_VERSION));
        }
        store.close().await.unwrap();
    }

    /// Stores in files of one directory; a reopen closes the file and
    /// opens it again.
    struct Redb {
        dir: TempDir,
        opened: u32,
    }

    impl Backend for Redb {
        type Store = RedbStore;

        async fn open(&mut self) -> RedbStore {
            self.opened += 1;
            RedbStore::open(self.dir.path().join(format!("{}.redb", self.opened))).expect("a new store")
        }

        async fn reopen(&mut self, store: RedbStore) -> RedbStore {
            let path = store.path().to_owned();
            store.close().await.expect("close");
            drop(store);
            RedbStore::open(path).expect("the store reopens")
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_redb_store_conforms() {
        conformance::run(&mut Redb { dir: tempfile::tempdir().expect("temp dir"), opened: 0 }).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_share_fsyncs() {
        let (_dir, path) = temp_file();
        let store = Arc::new(RedbStore::open(&path).unwrap());
        let tasks: Vec<_> = (0..200)
            .map(|n| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    let key = key(&format!("s{n}"));
                    store
                        .commit(batch([
                            Op::PutSession(Box::new(session(&key, SessionStatus::Running))),
                            Op::PutMessage { session: key.clone(), seq: 0, record: message(&format!("m{n}")) },
                        ]))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let stats = store.read_stats().unwrap();
        assert_eq!(stats.batches, 200);
        assert!(stats.commits * 2 < stats.batches, "no group commit: {stats:?}");
        assert!(store.read_stored_bytes().unwrap() > 0);
        for n in 0..200 {
            assert_eq!(store.read_messages(&key(&format!("s{n}"))).unwrap(), vec![(0, message(&format!("m{n}")))]);
        }
        assert_eq!(store.read_unfinished().unwrap().len(), 200);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_second_open_of_the_same_file_is_locked() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        match RedbStore::open(&path) {
            Err(StoreError::Locked { path: locked }) => assert_eq!(locked, path.display().to_string()),
            other => panic!("expected Locked, got {other:?}"),
        }
        store.close().await.unwrap();
        RedbStore::open(&path).unwrap().close().await.unwrap();
    }

    #[tokio::test]
    async fn dropping_the_store_releases_the_file() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let commit = store.commit(full_batch(&key("s1")));
        commit.await.unwrap();
        // Queued but never awaited: still written before the file is let go.
        drop(store.commit(batch([Op::PutEvent { session: key("s1"), seq: 1, record: event(1) }])));
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.read_session(&key("s1")).unwrap(), Some(session(&key("s1"), SessionStatus::Running)));
        assert_eq!(store.read_events(&key("s1"), None, 10).unwrap(), vec![(0, event(0)), (1, event(1))]);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_store_takes_nothing_more() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        store.close().await.unwrap();
        assert!(matches!(store.commit(full_batch(&key("s1"))).await, Err(StoreError::Closed)));
        assert!(matches!(store.commit(Batch::new()).await, Err(StoreError::Closed)));
        assert!(matches!(store.read_session(&key("s1")), Err(StoreError::Closed)));
        assert!(matches!(store.read_unfinished(), Err(StoreError::Closed)));
        assert!(matches!(store.read_stats(), Err(StoreError::Closed)));
        assert!(matches!(store.read_stored_bytes(), Err(StoreError::Closed)));
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_empty_batch_costs_no_commit_and_stats_count_bytes() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let before = store.read_stored_bytes().unwrap();
        store.commit(Batch::new()).await.unwrap();
        assert_eq!(store.read_stats().unwrap(), StoreStats { batches: 0, commits: 0 });
        store.commit(full_batch(&key("s1"))).await.unwrap();
        assert_eq!(store.read_stats().unwrap(), StoreStats { batches: 1, commits: 1 });
        let stored = store.read_stored_bytes().unwrap();
        assert!(stored > before + 500, "{before} then {stored} bytes");
        store.close().await.unwrap();
    }

    /// Metrics read the counters on every scrape: reading them must not
    /// wait for the writer (nor walk the file, as `stored_bytes` does).
    #[tokio::test]
    async fn the_counters_do_not_wait_for_a_write_in_progress() {
        let (_dir, path) = temp_file();
        let store = Arc::new(RedbStore::open(&path).unwrap());
        store.commit(full_batch(&key("s1"))).await.unwrap();
        // A write transaction held open, as the writer holds one while it
        // applies a group.
        let db = database(&store);
        let held = db.begin_write().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = Arc::clone(&store);
        std::thread::spawn(move || {
            let _ = tx.send(reader.stats());
        });
        let stats = rx.recv_timeout(Duration::from_secs(10)).expect("stats answered while a write was open");
        assert_eq!(stats.unwrap(), StoreStats { batches: 1, commits: 1 });
        held.abort().unwrap();
        drop(db);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_unreadable_record_is_corrupt_not_a_panic() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let db = database(&store);
        let txn = db.begin_write().unwrap();
        {
            let storage_key = key("s1").storage_key();
            txn.open_table(LOG).unwrap().insert((storage_key.as_str(), SESSION_SLOT), b"{not json".as_slice()).unwrap();
            txn.open_table(ACTIVE).unwrap().insert("no-slash", ()).unwrap();
            let mut log = txn.open_table(LOG).unwrap();
            let mut value = Vec::new();
            history::push(&mut value, history::Kind::Step, 0, "", br#"{"status":"weird"}"#).unwrap();
            log.insert((storage_key.as_str(), 1), value.as_slice()).unwrap();
            // A value cut inside its second frame's header.
            history::push(&mut value, history::Kind::Event, 0, "", b"{}").unwrap();
            log.insert((key("s2").storage_key().as_str(), 1), &value[..value.len() - 5]).unwrap();
            // A call's change with no record of the call before it; and an
            // agent config that is not one.
            let mut value = Vec::new();
            history::push(&mut value, history::Kind::CallUpdate, 0, "c9", b"{}").unwrap();
            log.insert((key("s3").storage_key().as_str(), 1), value.as_slice()).unwrap();
            let s4 = key("s4").storage_key();
            let record = serde_json::to_vec(&session(&key("s4"), SessionStatus::Idle)).unwrap();
            log.insert((s4.as_str(), SESSION_SLOT), record.as_slice()).unwrap();
            log.insert((s4.as_str(), AGENT_SLOT), b"[1]".as_slice()).unwrap();
        }
        txn.commit().unwrap();
        drop(db);
        assert!(matches!(store.read_session(&key("s1")), Err(StoreError::Corrupt { table: "sessions", .. })));
        assert!(matches!(store.read_all_sessions(None), Err(StoreError::Corrupt { table: "sessions", .. })));
        assert!(matches!(store.read_unfinished(), Err(StoreError::Corrupt { table: "active", .. })));
        assert!(matches!(store.read_steps(&key("s1"), 0, 10), Err(StoreError::Corrupt { table: "steps", .. })));
        assert!(matches!(store.read_events(&key("s2"), None, 10), Err(StoreError::Corrupt { table: "log", .. })));
        match store.read_calls(&key("s3")) {
            Err(StoreError::Corrupt { table: "calls", message }) => assert!(message.contains("\"c9\""), "{message}"),
            other => panic!("expected a corrupt call, got {other:?}"),
        }
        assert!(matches!(store.read_session(&key("s4")), Err(StoreError::Corrupt { table: "sessions", .. })));
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_log_without_a_record_is_passed_over_by_lists_and_counts() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        // Sessions with records around logs without one: at the tenant's
        // first and last key and between two records, with history
        // entries (numbers below the record's slot) or none.
        for id in ["b", "d", "d/x"] {
            store.commit(full_batch(&key(id))).await.unwrap();
        }
        store.commit(batch([Op::PutSession(Box::new(session(&key("f"), SessionStatus::Idle)))])).await.unwrap();
        // Tenants whose names sort right before and after `t1/`.
        for tenant in ["t1-x", "t1.y", "t10", "t1~"] {
            store.commit(full_batch(&SessionKey::new(tenant, "z"))).await.unwrap();
        }
        let db = database(&store);
        let txn = db.begin_write().unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            let mut value = Vec::new();
            history::push(&mut value, history::Kind::Event, 0, "", b"{}").unwrap();
            for id in ["a", "c", "e", "g"] {
                log.insert((key(id).storage_key().as_str(), 7), value.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        drop(db);
        let listed: Vec<String> =
            store.sessions(Some("t1")).await.unwrap().into_iter().map(|record| record.key.session).collect();
        assert_eq!(listed, ["b", "d", "d/x", "f"]);
        assert_eq!(store.session_count("t1").await.unwrap(), 4);
        let page: Vec<String> = store
            .sessions_page("t1", Some("b"), 2)
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.key.session)
            .collect();
        assert_eq!(page, ["d", "d/x"]);
        assert_eq!(store.sessions(Some("t2")).await.unwrap(), []);
        assert_eq!(store.sessions(None).await.unwrap().len(), 8);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_file_of_another_format_is_refused() {
        let (_dir, path) = temp_file();
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert(META_FORMAT, FORMAT_VERSION + 1).unwrap();
            txn.commit().unwrap();
        }
        assert!(matches!(RedbStore::open(&path), Err(StoreError::Corrupt { table: "meta", .. })));
        std::fs::write(&path, b"this is not a database, just some text that is long enough").unwrap();
        assert!(matches!(RedbStore::open(&path), Err(StoreError::Io { .. })));
    }

    /// Set in the child process of [`kill_9_loses_no_acknowledged_commit`]:
    /// the store file it writes to.
    const CRASH_CHILD_ENV: &str = "SUBS_STORE_CRASH_CHILD";

    /// Not a test on its own: the process that
    /// [`kill_9_loses_no_acknowledged_commit`] starts and kills. It commits
    /// from several tasks and prints `acked <round> <task> <n>` after each
    /// commit returns.
    #[test]
    fn crash_child() {
        let Ok(path) = std::env::var(CRASH_CHILD_ENV) else { return };
        let round: u64 = std::env::var("SUBS_STORE_CRASH_ROUND").unwrap().parse().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        runtime.block_on(async move {
            let store = Arc::new(RedbStore::open(&path).unwrap());
            let tasks: Vec<_> = (0..4u64)
                .map(|task| {
                    let store = Arc::clone(&store);
                    tokio::spawn(async move {
                        let sk = key(&format!("r{round}-t{task}"));
                        let mut config = agent_config("c0");
                        let started = Instant::now();
                        // Bounded in case the parent never kills us.
                        for n in 0u64.. {
                            if started.elapsed() > Duration::from_secs(30) {
                                break;
                            }
                            // The config changes every few commits, and
                            // is shared between them as the engine does.
                            if n % CONFIG_EVERY == 0 {
                                config = agent_config(&format!("c{}", n / CONFIG_EVERY));
                            }
                            let ops = [
                                Op::PutSession(Box::new(configured(&sk, Some(Arc::clone(&config)), n))),
                                Op::PutMessage { session: sk.clone(), seq: n, record: message(&format!("m{n}")) },
                                Op::PushInbox { session: sk.clone(), item: Box::new(item(&format!("i{n}"))) },
                            ];
                            store.commit(batch(ops)).await.unwrap();
                            let mut out = std::io::stdout().lock();
                            writeln!(out, "acked {round} {task} {n}").unwrap();
                            out.flush().unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
        });
    }

    /// How many commits of a crash child's session share one agent config.
    const CONFIG_EVERY: u64 = 7;

    /// `kill -9` at an arbitrary instant loses no commit that returned,
    /// and the file opens cleanly afterwards. Three rounds on one file, so
    /// recovery is also tested on a file that was recovered before.
    #[tokio::test]
    async fn kill_9_loses_no_acknowledged_commit() {
        let (_dir, path) = temp_file();
        let exe = std::env::current_exe().unwrap();
        let mut from_journal = 0;
        for round in 0..3u64 {
            let mut child = Command::new(&exe)
                .args(["--exact", "tests::crash_child", "--nocapture", "--test-threads=1"])
                .env(CRASH_CHILD_ENV, &path)
                .env("SUBS_STORE_CRASH_ROUND", round.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
            let mut acked = Vec::new();
            // Kill at a different point each round.
            let kill_at = 40 + 70 * round as usize;
            while acked.len() < kill_at {
                let Some(line) = lines.next() else { break };
                if let Some(ack) = parse_ack(&line.unwrap()) {
                    acked.push(ack);
                }
            }
            child.kill().unwrap();
            child.wait().unwrap();
            // Acks printed before the kill are still in the pipe.
            for line in lines {
                if let Some(ack) = parse_ack(&line.unwrap()) {
                    acked.push(ack);
                }
            }
            assert!(acked.len() >= kill_at, "the child stopped early after {} commits", acked.len());

            // How many acknowledged groups the file itself lacks: the
            // journal must bring them back.
            let (id, applied) = journal_position(&path);
            from_journal += journal::Journal::open(journal::Journal::path_for(&path), id, applied).unwrap().1.len();

            let store = RedbStore::open(&path).unwrap();
            for &(ack_round, task, n) in &acked {
                assert_eq!(ack_round, round);
                let session = key(&format!("r{round}-t{task}"));
                let messages = store.read_messages(&session).unwrap();
                assert!(
                    messages.iter().any(|(seq, record)| *seq == n && *record == message(&format!("m{n}"))),
                    "round {round}: acknowledged commit {task}/{n} is lost"
                );
                assert!(store.read_unfinished().unwrap().contains(&session));
                // The record and its config are of the same commit, at or
                // after the last acknowledged one.
                let record = store.read_session(&session).unwrap().unwrap();
                let last = record.state["n"].as_u64().unwrap();
                assert!(last >= n, "round {round}: the record of {task} is older than acknowledged commit {n}");
                let config = agent_config(&format!("c{}", last / CONFIG_EVERY));
                assert_eq!(record.agent, Some(config), "round {round}: the config of {task}'s commit {last}");
            }
            store.close().await.unwrap();
        }
        // Otherwise this test would not be testing the journal at all.
        assert!(from_journal > 0, "redb reopened with every acknowledged commit: the journal was never needed");
    }

    /// The store id and the last journal record the database file at
    /// `path` holds, read with redb alone.
    fn journal_position(path: &Path) -> (u64, u64) {
        super::journal_position(&Database::create(path).unwrap()).unwrap()
    }

    fn parse_ack(line: &str) -> Option<(u64, u64, u64)> {
        let mut parts = line.strip_prefix("acked ")?.split(' ').map(|part| part.parse().ok());
        Some((parts.next()??, parts.next()??, parts.next()??))
    }

    /// A group's decision counts are summed before they are written, and a
    /// deletion of the agent between two counts still forgets the one
    /// before it and keeps the one after, whichever batch of the group
    /// either is in.
    #[test]
    fn a_groups_decision_counts_add_up_in_order() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let count = |agent: &str, version: &str, decisions: u64| Op::CountDecisions {
            tenant: "t".to_owned(),
            agent_id: agent.to_owned(),
            version: version.to_owned(),
            decisions,
        };
        let delete = Op::DeleteAgent { tenant: "t".to_owned(), agent_id: "a".to_owned() };
        let batches = [
            vec![count("a", "v1", 2), count("a", "v1", 3), count("b", "v1", 1)],
            vec![count("a", "v2", 1), delete, count("a", "v1", 4)],
            vec![count("a", "v1", 5), count("b", "v1", 6)],
        ]
        .map(|ops| encode(batch(ops)).unwrap());
        let txn = database(&store).begin_write().unwrap();
        write_all(&txn, batches.iter().map(Vec::as_slice), &mut NextLsns::default()).unwrap();
        txn.commit().unwrap();
        let counts =
            |pairs: &[(&str, u64)]| pairs.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect::<BTreeMap<_, _>>();
        assert_eq!(store.read_decision_counts("t", "a").unwrap(), counts(&[("v1", 9)]));
        assert_eq!(store.read_decision_counts("t", "b").unwrap(), counts(&[("v1", 7)]));
    }
}
