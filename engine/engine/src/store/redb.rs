//! [`RedbStore`]: the [`Store`] kept in one redb file, with group commit.
//!
//! # What is in the file
//!
//! Every record is a JSON value (`serde_json`). Format 3:
//!
//! | table | key | value |
//! | --- | --- | --- |
//! | `sessions` | storage key (`tenant/session`) | [`SessionRecord`] |
//! | `active` | storage key | nothing: the session's status is not idle |
//! | `log` | (storage key, the session's log number) | one commit's [`MessageRecord`]s, [`StepRecord`]s, [`EventRecord`]s and [`CallRecord`] changes for the session, framed ([`history`]) |
//! | `inbox` | (storage key, seq) | [`InboxItem`] |
//! | `turns` | (storage key, turn id) | [`TurnRecord`] |
//! | `agents` | (tenant, agent id) | [`AgentRecord`] |
//! | `keys` | (tenant, key hash) | [`KeyRecord`] |
//! | `tenants` | (tenant, `""`) | [`TenantRecord`] |
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
//! operator made with `subs keys create` are listed as such.
//!
//! # Writes: group commit
//!
//! [`Store::commit`] encodes the batch on the caller's task, queues it to a
//! single writer thread and awaits a oneshot answer, so no tokio worker ever
//! blocks on the disk. The writer takes every batch already queued (at most
//! [`MAX_GROUP`]), applies them in arrival order in one redb write
//! transaction, makes it durable with one sync and then answers every
//! waiter. Under load many batches share one sync; alone, a batch costs
//! one. The sync is usually the [`journal`]'s: the group is appended there
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

mod history;
mod journal;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, mpsc};
use std::thread::JoinHandle;

use ::redb::{
    Database, DatabaseError, Durability, ReadOnlyTable, ReadTransaction, ReadableDatabase, ReadableTable, Table,
    TableDefinition, WriteTransaction,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use super::{
    AgentRecord, Batch, BoxFuture, CallRecord, EventRecord, InboxItem, KeyRecord, LoadedSession, MessageRecord, Op,
    SessionKey, SessionRecord, SessionStatus, StepRecord, Store, StoreError, StoreStats, TenantRecord, TurnRecord,
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

/// Table names, also used in [`StoreError::Corrupt`].
mod name {
    pub const SESSIONS: &str = "sessions";
    pub const ACTIVE: &str = "active";
    pub const LOG: &str = "log";
    pub const INBOX: &str = "inbox";
    pub const TURNS: &str = "turns";
    pub const AGENTS: &str = "agents";
    pub const KEYS: &str = "keys";
    pub const TENANTS: &str = "tenants";
    pub const META: &str = "meta";
    /// Not tables since format 2: the kinds of record the log holds, named
    /// in errors about them.
    pub const MESSAGES: &str = "messages";
    pub const STEPS: &str = "steps";
    pub const EVENTS: &str = "events";
    pub const CALLS: &str = "calls";
    /// Not a table: errors of the database as a whole.
    pub const DATABASE: &str = "database";
}

const ACTIVE: TableDefinition<&str, ()> = TableDefinition::new(name::ACTIVE);
/// Sessions and their histories, keyed by (session, log number); see
/// [`history`]. The session's record is at [`SESSION_SLOT`].
const LOG: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new(name::LOG);
/// Where in its range of `log` a session's record is: after every log
/// number, so the record and the newest history share a leaf page and one
/// commit of a session dirties one page, not two.
const SESSION_SLOT: u64 = u64::MAX;
/// How many of a session's newest log entries an event read walks back
/// through before it reads from the oldest instead.
const BACKWARD_ENTRIES: usize = 64;
const INBOX: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new(name::INBOX);
const TURNS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::TURNS);
/// Agents, keyed by (tenant, agent id).
const AGENTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::AGENTS);
/// API keys, keyed by (tenant, key hash).
const KEYS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::KEYS);
/// Tenants, keyed by (tenant, [`TENANT_SLOT`]): the shape of the other
/// per-tenant tables, so one write path serves them all.
const TENANTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::TENANTS);
/// The second half of a tenant's key in `tenants`.
const TENANT_SLOT: &str = "";
const META: TableDefinition<&str, u64> = TableDefinition::new(name::META);

/// `meta` key: the layout version of the file, so a later engine can tell
/// an old file from a corrupt one.
const META_FORMAT: &str = "format";
/// `meta` key: the next inbox sequence number. Kept in the file (not
/// derived from the inbox, which empties) so numbers never repeat, across
/// sessions and restarts.
const META_NEXT_INBOX: &str = "next_inbox_seq";
/// `meta` key: the last [journal](journal) record this state of the file
/// holds. Written by every journaled transaction, so recovery knows where
/// to resume whichever commit redb opens at.
const META_JOURNAL_SEQ: &str = "journal_seq";
/// `meta` key: a random number given to the file when it is first opened,
/// written into every journal record, so a journal left beside a deleted
/// or replaced database file is never applied to the new one.
const META_STORE_ID: &str = "store_id";
/// The layout this code writes.
const FORMAT_VERSION: u64 = 3;
/// The oldest layout this code migrates on open.
const FORMAT_TABLE_PER_KIND: u64 = 1;
/// The layout before `tenants`.
const FORMAT_WITHOUT_TENANTS: u64 = 2;

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

/// A message to the writer thread.
enum Request {
    /// Commit these writes and answer.
    Commit {
        /// The batch, encoded.
        writes: Vec<Write>,
        /// Where the outcome goes.
        answer: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Finish what is queued before this, close the database and stop.
    Close {
        /// Where the outcome of closing goes.
        answer: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// One op of a batch, encoded and ready to write. Encoding happens on the
/// committing task so the writer thread only touches the disk.
#[derive(Debug)]
enum Write {
    Session {
        key: String,
        active: bool,
        value: Vec<u8>,
    },
    /// A session's history writes of one batch, framed ([`history`]).
    Log {
        key: String,
        value: Vec<u8>,
    },
    PutNamed {
        table: NamedTable,
        key: String,
        id: String,
        value: Vec<u8>,
    },
    DeleteNamed {
        table: NamedTable,
        key: String,
        id: String,
    },
    PushInbox {
        key: String,
        value: Vec<u8>,
    },
    DeleteInbox {
        key: String,
        seq: u64,
    },
}

impl Write {
    /// The storage key of the session the write touches.
    #[cfg(test)]
    fn key(&self) -> &str {
        match self {
            Write::Session { key, .. }
            | Write::Log { key, .. }
            | Write::PutNamed { key, .. }
            | Write::DeleteNamed { key, .. }
            | Write::PushInbox { key, .. }
            | Write::DeleteInbox { key, .. } => key,
        }
    }
}

/// Tables keyed by (session or tenant, id).
#[derive(Debug, Clone, Copy)]
enum NamedTable {
    Turns,
    Agents,
    Keys,
    Tenants,
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
                .map_err(|err| StoreError::Io(format!("cannot start the store's writer thread: {err}")))?
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
            _ => Err(StoreError::Io("the store's writer thread panicked".to_owned())),
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
    fn read_sessions(
        &self,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let mut sessions = Vec::new();
            each_session(&table, tenant, after, |session| {
                if sessions.len() >= limit {
                    return Ok(ControlFlow::Break(()));
                }
                let record = table.get((session, SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
                if let Some(record) = record {
                    sessions.push(decode::<SessionRecord>(name::SESSIONS, record.value())?);
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
    fn commit(&self, batch: Batch) -> BoxFuture<'_, Result<(), StoreError>> {
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

    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let value =
                table.get((key.storage_key().as_str(), SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
            value.map(|value| decode(name::SESSIONS, value.value())).transpose()
        })
    }

    fn sessions(&self, tenant: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        let mut sessions = self.read_sessions(tenant, None, usize::MAX)?;
        // Storage keys order `a-b/x` before `a/x`; callers expect the order
        // of `SessionKey` (tenant, then session).
        sessions.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(sessions)
    }

    fn sessions_page(&self, tenant: &str, after: Option<&str>, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        // Within one tenant's prefix, storage keys are in session id order.
        self.read_sessions(Some(tenant), after, limit)
    }

    fn session_count(&self, tenant: &str) -> Result<u64, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let mut count = 0;
            // As `sessions` does, only keys with a record count (a log
            // without one is what only a damaged file holds); the record is
            // looked up, not decoded.
            each_session(&table, Some(tenant), None, |session| {
                if table.get((session, SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?.is_some() {
                    count += 1;
                }
                Ok(ControlFlow::Continue(()))
            })?;
            Ok(count)
        })
    }

    fn unfinished(&self) -> Result<Vec<SessionKey>, StoreError> {
        self.read(|txn| {
            let mut keys = BTreeSet::new();
            let active = open_read(txn, ACTIVE, name::ACTIVE)?;
            for entry in active.iter().map_err(|err| redb_error(name::ACTIVE, err))? {
                let (key, _) = entry.map_err(|err| redb_error(name::ACTIVE, err))?;
                keys.insert(parse_key(name::ACTIVE, key.value())?);
            }
            // The inbox only holds items not yet taken in, so scanning it
            // whole stays cheap.
            let inbox = open_read(txn, INBOX, name::INBOX)?;
            for entry in inbox.iter().map_err(|err| redb_error(name::INBOX, err))? {
                let (key, _) = entry.map_err(|err| redb_error(name::INBOX, err))?;
                keys.insert(parse_key(name::INBOX, key.value().0)?);
            }
            Ok(keys.into_iter().collect())
        })
    }

    fn messages(&self, key: &SessionKey) -> Result<Vec<(u64, MessageRecord)>, StoreError> {
        self.read(|txn| Ok(read_history(txn, key, Wanted { messages: true, ..Wanted::default() })?.messages))
    }

    fn steps(&self, key: &SessionKey, from: u64) -> Result<Vec<(u64, StepRecord)>, StoreError> {
        self.read(|txn| Ok(read_history(txn, key, Wanted { steps_from: Some(from), ..Wanted::default() })?.steps))
    }

    fn calls(&self, key: &SessionKey) -> Result<Vec<CallRecord>, StoreError> {
        self.read(|txn| Ok(read_history(txn, key, Wanted { calls: true, ..Wanted::default() })?.calls))
    }

    /// One read transaction and one pass over the session's log.
    fn load(&self, key: &SessionKey) -> Result<Option<LoadedSession>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let record =
                table.get((key.storage_key().as_str(), SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
            let Some(record) = record else { return Ok(None) };
            let record: SessionRecord = decode(name::SESSIONS, record.value())?;
            let wanted = Wanted { messages: true, steps_from: Some(record.first_open_step), calls: true };
            let History { messages, steps, calls } = read_history(txn, key, wanted)?;
            Ok(Some(LoadedSession { record, messages, steps, calls }))
        })
    }

    fn agents(&self, tenant: Option<&str>) -> Result<Vec<AgentRecord>, StoreError> {
        self.read(|txn| scan_named(txn, AGENTS, name::AGENTS, tenant))
    }

    fn agent(&self, tenant: &str, agent_id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, AGENTS, name::AGENTS)?;
            let value = table.get((tenant, agent_id)).map_err(|err| redb_error(name::AGENTS, err))?;
            value.map(|value| decode(name::AGENTS, value.value())).transpose()
        })
    }

    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.read(|txn| scan_named(txn, KEYS, name::KEYS, None))
    }

    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        self.read(|txn| scan_named(txn, TENANTS, name::TENANTS, None))
    }

    fn events(
        &self,
        key: &SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        let from = match after {
            None => 0,
            Some(after) => match after.checked_add(1) {
                Some(from) => from,
                None => return Ok(Vec::new()),
            },
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let storage = key.storage_key();
            let range = (storage.as_str(), 0)..(storage.as_str(), SESSION_SLOT);
            // Events are appended in sequence order. A client resuming near
            // the end of the stream (a reconnect, nearly always) is served
            // walking back from the newest entry; if that does not reach
            // `from` within a few entries, the page is read forward from
            // the oldest, stopping at `limit`.
            let mut found = Vec::new();
            // Every entry with events from `from` on has been read.
            let mut complete = false;
            let mut newest = table.range(range).map_err(|err| redb_error(name::LOG, err))?.rev();
            for _ in 0..BACKWARD_ENTRIES {
                let Some(entry) = newest.next() else {
                    complete = true;
                    break;
                };
                let (_, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
                let mut reached = false;
                let first_of_entry = found.len();
                for frame in history::frames(value.value()) {
                    let frame = frame?;
                    if frame.kind == history::Kind::Event {
                        if frame.seq >= from {
                            found.push((frame.seq, frame.payload.to_vec()));
                        } else {
                            reached = true;
                        }
                    }
                }
                // `found` runs newest first: this entry's events go in
                // reversed.
                found[first_of_entry..].reverse();
                if reached {
                    complete = true;
                    break;
                }
            }
            if complete {
                found.reverse();
                found.truncate(limit);
            } else {
                found.clear();
                scan_log(txn, key, |frame| {
                    if frame.kind == history::Kind::Event && frame.seq >= from {
                        found.push((frame.seq, frame.payload.to_vec()));
                        if found.len() == limit {
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            found.into_iter().map(|(seq, value)| Ok((seq, decode(name::EVENTS, &value)?))).collect()
        })
    }

    fn turn(&self, key: &SessionKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, TURNS, name::TURNS)?;
            let value = table.get((key.storage_key().as_str(), turn_id)).map_err(|err| redb_error(name::TURNS, err))?;
            value.map(|value| decode(name::TURNS, value.value())).transpose()
        })
    }

    fn inbox(&self, key: &SessionKey) -> Result<Vec<(u64, InboxItem)>, StoreError> {
        self.read(|txn| scan_inbox(txn, key))
    }

    /// The writer's counters; touches neither the file nor the writer.
    fn stats(&self) -> Result<StoreStats, StoreError> {
        if self.db.read().unwrap_or_else(PoisonError::into_inner).is_none() {
            return Err(StoreError::Closed);
        }
        Ok(StoreStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            commits: self.counters.commits.load(Ordering::Relaxed),
        })
    }

    /// redb's `DatabaseStats::stored_bytes`: the bytes of the keys and
    /// values in our tables, without B-tree overhead, free or fragmented
    /// pages. redb computes it only inside a write transaction, by walking
    /// every table, so this waits for a commit in progress and holds the
    /// writer up while it walks.
    fn stored_bytes(&self) -> Result<u64, StoreError> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_ref().ok_or(StoreError::Closed)?;
        let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
        let stats = txn.stats().map_err(|err| redb_error(name::DATABASE, err));
        // Nothing was written: aborting just gives the lock back.
        let _ = txn.abort();
        Ok(stats?.stored_bytes())
    }
}

/// Calls `f` with the storage key of every session in `log` (of `tenant`
/// only, when given; after the session id `after` of that tenant, when
/// given too) in key order, until `f` breaks. Ids hold no `/`, so
/// `tenant/` prefixes exactly this tenant's keys. From each session's
/// first entry the next session is one seek past it: no history is read.
fn each_session(
    table: &ReadOnlyTable<(&'static str, u64), &'static [u8]>,
    tenant: Option<&str>,
    after: Option<&str>,
    mut f: impl FnMut(&str) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let prefix = tenant.map(|tenant| format!("{tenant}/"));
    let mut from = match (&prefix, after) {
        // The smallest key after every key of session `after`.
        (Some(prefix), Some(after)) => format!("{prefix}{after}\0"),
        (prefix, _) => prefix.clone().unwrap_or_default(),
    };
    loop {
        let next = table.range((from.as_str(), 0)..).map_err(|err| redb_error(name::LOG, err))?.next();
        let Some(entry) = next else { return Ok(()) };
        let (key, _) = entry.map_err(|err| redb_error(name::LOG, err))?;
        let session = key.value().0.to_owned();
        if prefix.as_ref().is_some_and(|prefix| !session.starts_with(prefix.as_str())) {
            return Ok(());
        }
        if f(&session)?.is_break() {
            return Ok(());
        }
        from = session + "\0";
    }
}

/// Opens the journal of the store and applies, in one durable
/// transaction, the records the file does not hold yet (commits that were
/// acknowledged after the last checkpoint before a crash).
fn recover(db: &Database, path: PathBuf) -> Result<journal::Journal, StoreError> {
    let (store, applied) = journal_position(db)?;
    let (mut journal, records) = journal::Journal::open(path, store, applied)?;
    tracing::debug!(path = %journal.path().display(), mode = ?journal.mode(), "the store's journal is open");
    let Some(&(last, _)) = records.last() else { return Ok(journal) };
    let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
    write_all(&txn, records.iter().map(|(_, writes)| writes.as_slice()), &mut NextLsns::default()).map_err(|err| {
        StoreError::Corrupt {
            table: "journal",
            message: format!(
                "records {} to {last} of {} cannot be applied: {err}",
                applied + 1,
                journal.path().display()
            ),
        }
    })?;
    set_journal_seq(&txn, last)?;
    txn.commit().map_err(|err| redb_error(name::DATABASE, err))?;
    journal.checkpointed();
    tracing::info!(records = records.len(), last, "applied the store's journal after an unclean shutdown");
    Ok(journal)
}

/// The file's id and the last journal record it holds (0 for none).
fn journal_position(db: &Database) -> Result<(u64, u64), StoreError> {
    let txn = db.begin_read().map_err(|err| redb_error(name::DATABASE, err))?;
    let meta = open_read(&txn, META, name::META)?;
    let get = |key| meta.get(key).map_err(|err| redb_error(name::META, err)).map(|v| v.map_or(0, |v| v.value()));
    Ok((get(META_STORE_ID)?, get(META_JOURNAL_SEQ)?))
}

/// Records in `txn` that the file holds every journal record up to `seq`.
fn set_journal_seq(txn: &WriteTransaction, seq: u64) -> Result<(), StoreError> {
    open_write(txn, META, name::META)?.insert(META_JOURNAL_SEQ, seq).map_err(|err| redb_error(name::META, err))?;
    Ok(())
}

/// Creates the tables (so reads never meet a missing one) and checks or
/// records the format version, migrating an older file.
fn prepare(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
    {
        Tables::create_all(&txn)?;
        let mut meta = open_write(&txn, META, name::META)?;
        if meta.get(META_STORE_ID).map_err(|err| redb_error(name::META, err))?.is_none() {
            meta.insert(META_STORE_ID, random_id()).map_err(|err| redb_error(name::META, err))?;
        }
        let format = meta.get(META_FORMAT).map_err(|err| redb_error(name::META, err))?.map(|format| format.value());
        match format {
            Some(FORMAT_VERSION) => {}
            None => {
                meta.insert(META_FORMAT, FORMAT_VERSION).map_err(|err| redb_error(name::META, err))?;
            }
            Some(old @ (FORMAT_TABLE_PER_KIND | FORMAT_WITHOUT_TENANTS)) => {
                let mut log_entries = 0;
                if old == FORMAT_TABLE_PER_KIND {
                    let mut log = open_write(&txn, LOG, name::LOG)?;
                    log_entries = history::migrate_v1(&txn, &mut log)?;
                }
                let tenants = tenants_from_keys(&txn)?;
                meta.insert(META_FORMAT, FORMAT_VERSION).map_err(|err| redb_error(name::META, err))?;
                tracing::info!(log_entries, tenants, "migrated the store from format {old} to {FORMAT_VERSION}");
            }
            Some(other) => {
                return Err(StoreError::Corrupt {
                    table: name::META,
                    message: format!("the file has store format {other}; this engine reads format {FORMAT_VERSION}"),
                });
            }
        }
    }
    txn.commit().map_err(|err| redb_error(name::DATABASE, err))
}

/// Gives every tenant with a stored key and no record a record without
/// limits of its own, created when its first key was; returns how many.
fn tenants_from_keys(txn: &WriteTransaction) -> Result<usize, StoreError> {
    let mut first_key: BTreeMap<String, u64> = BTreeMap::new();
    {
        let keys = open_write(txn, KEYS, name::KEYS)?;
        for entry in keys.iter().map_err(|err| redb_error(name::KEYS, err))? {
            let (_, value) = entry.map_err(|err| redb_error(name::KEYS, err))?;
            let key: KeyRecord = decode(name::KEYS, value.value())?;
            let created = first_key.entry(key.tenant).or_insert(key.created_ms);
            *created = (*created).min(key.created_ms);
        }
    }
    let mut tenants = open_write(txn, TENANTS, name::TENANTS)?;
    let mut added = 0;
    for (tenant, created_ms) in first_key {
        if tenants.get((tenant.as_str(), TENANT_SLOT)).map_err(|err| redb_error(name::TENANTS, err))?.is_some() {
            continue;
        }
        let record = TenantRecord { tenant, limits: serde_json::Map::new(), created_ms, updated_ms: created_ms };
        let value = encode_value(name::TENANTS, &record)?;
        tenants
            .insert((record.tenant.as_str(), TENANT_SLOT), value.as_slice())
            .map_err(|err| redb_error(name::TENANTS, err))?;
        added += 1;
    }
    Ok(added)
}

/// A number that differs between files: std's hasher keys are random per
/// process, the clock and the process id tell processes and instants
/// apart. An identity, not a secret.
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// A batch waiting in the writer's current group.
struct Pending {
    writes: Vec<Write>,
    answer: oneshot::Sender<Result<(), StoreError>>,
}

/// The writer thread: takes groups of queued batches and commits each
/// group in one transaction, until the store is shut; then closes the
/// database (its handle is the last one by then).
fn run_writer(mut writer: Writer, requests: mpsc::Receiver<Request>, counters: &Tally) {
    let mut closing = None;
    while closing.is_none() {
        // Disconnected: the store was dropped and the queue is drained.
        let Ok(first) = requests.recv() else { break };
        let mut group = Vec::new();
        let mut next = Some(first);
        while let Some(request) = next.take() {
            match request {
                Request::Commit { writes, answer } => group.push(Pending { writes, answer }),
                // Everything queued before the close is in the group; nothing
                // can be queued after it.
                Request::Close { answer } => closing = Some(answer),
            }
            if closing.is_none() && group.len() < MAX_GROUP {
                next = requests.try_recv().ok();
            }
        }
        if !group.is_empty() {
            writer.commit_group(group, counters);
        }
    }
    // The file alone then holds everything: nothing to replay at the next
    // open, and a copy of the file taken while the engine is stopped is
    // complete.
    let checkpointed = writer.checkpoint();
    if let Err(error) = &checkpointed {
        tracing::error!(%error, "the store's last checkpoint failed; the journal will be applied at the next open");
    }
    let closed = match Arc::try_unwrap(writer.db) {
        Ok(db) => db.close().map_err(|err| redb_error(name::DATABASE, err)),
        // A reader still holds it (only if the store was leaked half-shut):
        // the last holder closes it.
        Err(db) => {
            drop(db);
            Ok(())
        }
    };
    if let Some(answer) = closing {
        let _ = answer.send(checkpointed.and(closed));
    }
}

/// The writer thread's state.
struct Writer {
    db: Arc<Database>,
    journal: journal::Journal,
    /// Set when the journal may hold a group that redb did not commit and
    /// taking it back failed: committing anything more could make that
    /// group part of the store at the next open, though its waiters were
    /// told it failed. Every later commit fails with this message.
    broken: Option<String>,
    /// Where the logs written lately end.
    lsns: NextLsns,
}

impl Writer {
    /// Commits `group` and answers each of its waiters.
    fn commit_group(&mut self, group: Vec<Pending>, counters: &Tally) {
        let slow = counters.slow_disk_micros.load(Ordering::Relaxed);
        if slow > 0 {
            std::thread::sleep(std::time::Duration::from_micros(slow));
        }
        let outcome = self.transaction(&group.iter().map(|pending| pending.writes.as_slice()).collect::<Vec<_>>());
        match outcome {
            Ok(()) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters.batches.fetch_add(group.len() as u64, Ordering::Relaxed);
                for pending in group {
                    let _ = pending.answer.send(Ok(()));
                }
            }
            // Some batch's writes failed and nothing was committed: find out
            // which by committing each on its own.
            Err(Failure::Write(_)) if group.len() > 1 => {
                for pending in group {
                    let outcome = self.transaction(&[pending.writes.as_slice()]);
                    if outcome.is_ok() {
                        counters.commits.fetch_add(1, Ordering::Relaxed);
                        counters.batches.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = pending.answer.send(outcome.map_err(Failure::into_error));
                }
            }
            Err(failure) => {
                let error = failure.into_error();
                for pending in group {
                    let _ = pending.answer.send(Err(duplicate(&error)));
                }
            }
        }
    }

    /// Writes `batches` in order in one transaction and makes it durable:
    /// through the journal (redb then commits without syncing), or, when a
    /// checkpoint is due, by a durable redb commit.
    fn transaction(&mut self, batches: &[&[Write]]) -> Result<(), Failure> {
        let outcome = self.try_transaction(batches);
        if outcome.is_err() {
            // Its appends are not in the log, but their numbers are known.
            self.lsns.forget();
        }
        outcome
    }

    fn try_transaction(&mut self, batches: &[&[Write]]) -> Result<(), Failure> {
        if let Some(broken) = &self.broken {
            return Err(Failure::Transaction(StoreError::Io(broken.clone())));
        }
        let mut txn = self.db.begin_write().map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
        if let Err(error) = write_all(&txn, batches.iter().copied(), &mut self.lsns) {
            let _ = txn.abort();
            return Err(Failure::Write(error));
        }
        if self.journal.prepare(batches.iter().copied()) {
            // Redb's default, set anyway: the whole store rests on it.
            txn.set_durability(Durability::Immediate)
                .map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
            txn.commit().map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
            self.journal.checkpointed();
            self.lsns.forget();
            return Ok(());
        }
        if let Err(error) = set_journal_seq(&txn, self.journal.next_seq()) {
            let _ = txn.abort();
            return Err(Failure::Transaction(error));
        }
        txn.set_durability(Durability::None).map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
        let appended = match self.journal.append() {
            Ok(appended) => appended,
            Err((appended, err)) => {
                let _ = txn.abort();
                let error =
                    StoreError::Io(format!("cannot write the journal {}: {err}", self.journal.path().display()));
                self.revoke(appended, &error);
                return Err(Failure::Transaction(error));
            }
        };
        txn.commit().map_err(|err| {
            let error = redb_error(name::DATABASE, err);
            self.revoke(appended, &error);
            Failure::Transaction(error)
        })
    }

    /// Takes back a journal record whose group was not committed, or, if
    /// that fails, stops taking commits.
    fn revoke(&mut self, appended: journal::Appended, cause: &StoreError) {
        if let Err(err) = self.journal.revoke(appended) {
            let message = format!(
                "the store stopped taking commits: record {} of its journal {} could not be taken back after \
                 `{cause}`: {err}; restart the engine",
                appended.seq,
                self.journal.path().display()
            );
            tracing::error!("{message}");
            self.broken = Some(message);
        }
    }

    /// A durable redb commit that makes every journaled group durable in
    /// the file itself, so the journal can start over.
    fn checkpoint(&mut self) -> Result<(), StoreError> {
        if !self.journal.pending() || self.broken.is_some() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
        set_journal_seq(&txn, self.journal.last_seq())?;
        txn.commit().map_err(|err| redb_error(name::DATABASE, err))?;
        self.journal.checkpointed();
        self.lsns.forget();
        Ok(())
    }
}

/// Why a write transaction committed nothing.
enum Failure {
    /// Writing a batch's ops failed; the other batches may be fine.
    Write(StoreError),
    /// The transaction could not begin or commit; nothing would succeed.
    Transaction(StoreError),
}

impl Failure {
    fn into_error(self) -> StoreError {
        match self {
            Failure::Write(error) | Failure::Transaction(error) => error,
        }
    }
}

/// The newest log number of each session the writer appended to since its
/// last checkpoint, so an append does not read the log's newest entry
/// back. It holds only what committed transactions wrote: a transaction
/// that fails forgets every number (its appends were rolled back), and a
/// checkpoint forgets them too, which bounds the map by the sessions
/// written between two checkpoints.
#[derive(Default)]
struct NextLsns(HashMap<String, u64>);

impl NextLsns {
    /// Session `key`'s log now ends with entry `lsn`.
    fn wrote(&mut self, key: &str, lsn: u64) {
        match self.0.get_mut(key) {
            Some(last) => *last = lsn,
            None => {
                self.0.insert(key.to_owned(), lsn);
            }
        }
    }

    fn forget(&mut self) {
        self.0 = HashMap::new();
    }
}

fn write_all<'a>(
    txn: &WriteTransaction,
    batches: impl Iterator<Item = &'a [Write]>,
    lsns: &mut NextLsns,
) -> Result<(), StoreError> {
    let mut tables = Tables::new(txn, lsns);
    for writes in batches {
        for write in writes {
            tables.apply(write)?;
            #[cfg(test)]
            tests::inject_failure(write.key())?;
        }
    }
    Ok(())
}

type SeqTableOf<'txn> = Table<'txn, (&'static str, u64), &'static [u8]>;
type NamedTableOf<'txn> = Table<'txn, (&'static str, &'static str), &'static [u8]>;

/// The tables of one write transaction, each opened when first written:
/// a table opened in a transaction is flushed at its commit even if
/// nothing changed in it, and most commits write only `log`.
struct Tables<'txn, 'l> {
    txn: &'txn WriteTransaction,
    lsns: &'l mut NextLsns,
    active: Option<Table<'txn, &'static str, ()>>,
    log: Option<SeqTableOf<'txn>>,
    inbox: Option<SeqTableOf<'txn>>,
    turns: Option<NamedTableOf<'txn>>,
    agents: Option<NamedTableOf<'txn>>,
    keys: Option<NamedTableOf<'txn>>,
    tenants: Option<NamedTableOf<'txn>>,
    meta: Option<Table<'txn, &'static str, u64>>,
}

/// `slot`'s table, opening it in `txn` the first time.
fn opened<'a, 'txn, K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    slot: &'a mut Option<Table<'txn, K, V>>,
    txn: &'txn WriteTransaction,
    definition: TableDefinition<K, V>,
    name: &'static str,
) -> Result<&'a mut Table<'txn, K, V>, StoreError> {
    let table = match slot.take() {
        Some(table) => table,
        None => open_write(txn, definition, name)?,
    };
    Ok(slot.insert(table))
}

impl<'txn, 'l> Tables<'txn, 'l> {
    fn new(txn: &'txn WriteTransaction, lsns: &'l mut NextLsns) -> Self {
        Self {
            txn,
            lsns,
            active: None,
            log: None,
            inbox: None,
            turns: None,
            agents: None,
            keys: None,
            tenants: None,
            meta: None,
        }
    }

    /// Creates every table that does not exist yet, so reads never meet a
    /// missing one.
    fn create_all(txn: &'txn WriteTransaction) -> Result<(), StoreError> {
        let mut lsns = NextLsns::default();
        let mut tables = Tables::new(txn, &mut lsns);
        tables.active()?;
        tables.log()?;
        tables.inbox()?;
        for table in [NamedTable::Turns, NamedTable::Agents, NamedTable::Keys, NamedTable::Tenants] {
            tables.named(table)?;
        }
        tables.meta()?;
        Ok(())
    }

    fn active(&mut self) -> Result<&mut Table<'txn, &'static str, ()>, StoreError> {
        opened(&mut self.active, self.txn, ACTIVE, name::ACTIVE)
    }

    fn log(&mut self) -> Result<&mut SeqTableOf<'txn>, StoreError> {
        opened(&mut self.log, self.txn, LOG, name::LOG)
    }

    fn inbox(&mut self) -> Result<&mut SeqTableOf<'txn>, StoreError> {
        opened(&mut self.inbox, self.txn, INBOX, name::INBOX)
    }

    fn meta(&mut self) -> Result<&mut Table<'txn, &'static str, u64>, StoreError> {
        opened(&mut self.meta, self.txn, META, name::META)
    }

    fn named(&mut self, table: NamedTable) -> Result<(&mut NamedTableOf<'txn>, &'static str), StoreError> {
        let (slot, definition, name) = match table {
            NamedTable::Turns => (&mut self.turns, TURNS, name::TURNS),
            NamedTable::Agents => (&mut self.agents, AGENTS, name::AGENTS),
            NamedTable::Keys => (&mut self.keys, KEYS, name::KEYS),
            NamedTable::Tenants => (&mut self.tenants, TENANTS, name::TENANTS),
        };
        Ok((opened(slot, self.txn, definition, name)?, name))
    }

    /// The next log number of session `key`: one past its newest entry.
    /// Read from the log itself rather than kept in `meta`, so a commit
    /// writes no page outside the log for it, unless the writer still
    /// knows it from an earlier write.
    fn next_lsn(&mut self, key: &str) -> Result<u64, StoreError> {
        let last = match self.lsns.0.get(key) {
            Some(&last) => last,
            None => {
                let log = self.log()?;
                let newest =
                    log.range((key, 0)..(key, SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?.next_back();
                match newest {
                    Some(entry) => entry.map_err(|err| redb_error(name::LOG, err))?.0.value().1,
                    None => 0,
                }
            }
        };
        match last.checked_add(1) {
            Some(next) if next != SESSION_SLOT => Ok(next),
            _ => Err(StoreError::Corrupt {
                table: name::LOG,
                message: format!("the log numbers of {key} are exhausted"),
            }),
        }
    }

    fn apply(&mut self, write: &Write) -> Result<(), StoreError> {
        match write {
            Write::Session { key, active, value } => {
                let key = key.as_str();
                self.log()?.insert((key, SESSION_SLOT), value.as_slice()).map_err(|err| redb_error(name::LOG, err))?;
                // A read costs no page; a write, even of what is there,
                // dirties one. Most commits do not change the status.
                let table = self.active()?;
                let listed = table.get(key).map_err(|err| redb_error(name::ACTIVE, err))?.is_some();
                if *active && !listed {
                    table.insert(key, ()).map_err(|err| redb_error(name::ACTIVE, err))?;
                } else if !*active && listed {
                    table.remove(key).map_err(|err| redb_error(name::ACTIVE, err))?;
                }
            }
            Write::Log { key, value } => {
                let lsn = self.next_lsn(key)?;
                self.log()?.insert((key.as_str(), lsn), value.as_slice()).map_err(|err| redb_error(name::LOG, err))?;
                self.lsns.wrote(key, lsn);
            }
            Write::DeleteInbox { key, seq } => {
                self.inbox()?.remove((key.as_str(), *seq)).map_err(|err| redb_error(name::INBOX, err))?;
            }
            Write::PutNamed { table, key, id, value } => {
                let (table, name) = self.named(*table)?;
                table.insert((key.as_str(), id.as_str()), value.as_slice()).map_err(|err| redb_error(name, err))?;
            }
            Write::DeleteNamed { table, key, id } => {
                let (table, name) = self.named(*table)?;
                table.remove((key.as_str(), id.as_str())).map_err(|err| redb_error(name, err))?;
            }
            Write::PushInbox { key, value } => {
                let meta = self.meta()?;
                let seq = meta
                    .get(META_NEXT_INBOX)
                    .map_err(|err| redb_error(name::META, err))?
                    .map_or(1, |next| next.value());
                let next = seq.checked_add(1).ok_or_else(|| StoreError::Corrupt {
                    table: name::META,
                    message: "the inbox sequence number is exhausted".to_owned(),
                })?;
                meta.insert(META_NEXT_INBOX, next).map_err(|err| redb_error(name::META, err))?;
                self.inbox()?
                    .insert((key.as_str(), seq), value.as_slice())
                    .map_err(|err| redb_error(name::INBOX, err))?;
            }
        }
        Ok(())
    }
}

/// Encodes a batch's ops for the writer. A session's messages, steps,
/// events and call changes are framed into one log value, written after
/// the batch's other writes (they touch other tables, so the order between
/// them does not matter).
fn encode(batch: Batch) -> Result<Vec<Write>, StoreError> {
    let mut writes = Vec::with_capacity(batch.ops.len());
    let mut logs: Vec<(SessionKey, Vec<u8>)> = Vec::new();
    for op in batch.ops {
        let write = match op {
            Op::PutSession(record) => Write::Session {
                key: storage_key(&record.key),
                active: record.status != SessionStatus::Idle,
                value: encode_value(name::SESSIONS, &record)?,
            },
            Op::PutMessage { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Message, seq, "", &record, name::MESSAGES)?;
                continue;
            }
            Op::PutStep { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Step, seq, "", &record, name::STEPS)?;
                continue;
            }
            Op::PutEvent { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Event, seq, "", &record, name::EVENTS)?;
                continue;
            }
            Op::PutCall { session, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Call, 0, &record.call.id, &record, name::CALLS)?;
                continue;
            }
            Op::DeleteCall { session, call_id } => {
                history::push(log_of(&mut logs, session), history::Kind::CallGone, 0, &call_id, &[])?;
                continue;
            }
            Op::PutTurn { session, turn_id, record } => Write::PutNamed {
                table: NamedTable::Turns,
                key: storage_key(&session),
                id: turn_id,
                value: encode_value(name::TURNS, &record)?,
            },
            Op::PushInbox { session, item } => {
                Write::PushInbox { key: storage_key(&session), value: encode_value(name::INBOX, &item)? }
            }
            Op::DeleteInbox { session, seq } => Write::DeleteInbox { key: storage_key(&session), seq },
            Op::PutAgent(record) => Write::PutNamed {
                table: NamedTable::Agents,
                key: record.tenant.clone(),
                id: record.agent_id.clone(),
                value: encode_value(name::AGENTS, &record)?,
            },
            Op::DeleteAgent { tenant, agent_id } => {
                Write::DeleteNamed { table: NamedTable::Agents, key: tenant, id: agent_id }
            }
            Op::PutKey(record) => Write::PutNamed {
                table: NamedTable::Keys,
                key: record.tenant.clone(),
                id: record.hash.clone(),
                value: encode_value(name::KEYS, &record)?,
            },
            Op::DeleteKey { tenant, hash } => Write::DeleteNamed { table: NamedTable::Keys, key: tenant, id: hash },
            Op::PutTenant(record) => Write::PutNamed {
                table: NamedTable::Tenants,
                key: record.tenant.clone(),
                id: TENANT_SLOT.to_owned(),
                value: encode_value(name::TENANTS, &record)?,
            },
            Op::DeleteTenant { tenant } => {
                Write::DeleteNamed { table: NamedTable::Tenants, key: tenant, id: TENANT_SLOT.to_owned() }
            }
        };
        writes.push(write);
    }
    writes.extend(logs.into_iter().map(|(session, value)| Write::Log { key: storage_key(&session), value }));
    Ok(writes)
}

/// The log value being built for `session` (a batch nearly always touches
/// one session, so a list is the cheapest map).
fn log_of(logs: &mut Vec<(SessionKey, Vec<u8>)>, session: SessionKey) -> &mut Vec<u8> {
    let at = match logs.iter().position(|(key, _)| *key == session) {
        Some(at) => at,
        None => {
            // A batch's frames (a step, a message, its event) usually come
            // to 1–2 KiB: growing from nothing would copy them several times.
            logs.push((session, Vec::with_capacity(2048)));
            logs.len() - 1
        }
    };
    &mut logs[at].1
}

/// The session's storage key. Ids are validated where they enter the
/// engine; one with a `/` here would be read back as another session.
fn storage_key(key: &SessionKey) -> String {
    debug_assert!(
        !key.tenant.contains('/') && !key.session.contains('/'),
        "session key {key:?} holds a '/'; ids must pass valid_id"
    );
    key.storage_key()
}

fn encode_value(table: &'static str, value: &impl Serialize) -> Result<Vec<u8>, StoreError> {
    // Room for a session record (about 450 bytes) without regrowing.
    let mut out = Vec::with_capacity(512);
    serde_json::to_writer(&mut out, value)
        .map_err(|err| StoreError::Io(format!("cannot encode a record for {table}: {err}")))?;
    Ok(out)
}

fn decode<T: DeserializeOwned>(table: &'static str, bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt { table, message: err.to_string() })
}

fn parse_key(table: &'static str, key: &str) -> Result<SessionKey, StoreError> {
    SessionKey::from_storage_key(key)
        .ok_or_else(|| StoreError::Corrupt { table, message: format!("{key:?} is not a session key") })
}

fn open_read<K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<K, V>,
    name: &'static str,
) -> Result<ReadOnlyTable<K, V>, StoreError> {
    txn.open_table(table).map_err(|err| redb_error(name, err))
}

fn open_write<'txn, K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    txn: &'txn WriteTransaction,
    table: TableDefinition<K, V>,
    name: &'static str,
) -> Result<Table<'txn, K, V>, StoreError> {
    txn.open_table(table).map_err(|err| redb_error(name, err))
}

/// The session's inbox items, in sequence order.
fn scan_inbox(txn: &ReadTransaction, key: &SessionKey) -> Result<Vec<(u64, InboxItem)>, StoreError> {
    let table = open_read(txn, INBOX, name::INBOX)?;
    let key = key.storage_key();
    let entries =
        table.range((key.as_str(), 0)..=(key.as_str(), u64::MAX)).map_err(|err| redb_error(name::INBOX, err))?;
    let mut records = Vec::new();
    for entry in entries {
        let (k, value) = entry.map_err(|err| redb_error(name::INBOX, err))?;
        records.push((k.value().1, decode(name::INBOX, value.value())?));
    }
    Ok(records)
}

/// Which parts of a session's history [`read_history`] decodes.
#[derive(Default)]
struct Wanted {
    messages: bool,
    /// Steps from this sequence number on.
    steps_from: Option<u64>,
    calls: bool,
}

/// A session's history as its log adds up to.
struct History {
    messages: Vec<(u64, MessageRecord)>,
    steps: Vec<(u64, StepRecord)>,
    calls: Vec<CallRecord>,
}

/// Folds the session's log in one pass: every message, the last version
/// of each step, the calls not yet gone. Only what is `wanted` is decoded,
/// and a step or call only once, in its last version.
fn read_history(txn: &ReadTransaction, key: &SessionKey, wanted: Wanted) -> Result<History, StoreError> {
    let mut messages = Vec::new();
    let mut steps = BTreeMap::new();
    let mut calls = BTreeMap::new();
    scan_log(txn, key, |frame| {
        match frame.kind {
            history::Kind::Message if wanted.messages => {
                messages.push((frame.seq, decode(name::MESSAGES, frame.payload)?));
            }
            history::Kind::Step if wanted.steps_from.is_some_and(|from| frame.seq >= from) => {
                steps.insert(frame.seq, frame.payload.to_vec());
            }
            history::Kind::Call if wanted.calls => {
                calls.insert(frame.id.to_owned(), frame.payload.to_vec());
            }
            history::Kind::CallGone if wanted.calls => {
                calls.remove(frame.id);
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(History {
        messages,
        steps: steps
            .into_iter()
            .map(|(seq, value)| Ok((seq, decode(name::STEPS, &value)?)))
            .collect::<Result<_, _>>()?,
        calls: calls.values().map(|value| decode(name::CALLS, value)).collect::<Result<_, _>>()?,
    })
}

/// Shows `visit` every frame of the session's log, oldest first, until it
/// breaks.
fn scan_log(
    txn: &ReadTransaction,
    key: &SessionKey,
    mut visit: impl FnMut(history::Frame<'_>) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let table = open_read(txn, LOG, name::LOG)?;
    let key = key.storage_key();
    let entries =
        table.range((key.as_str(), 0)..(key.as_str(), SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
    for entry in entries {
        let (_, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
        for frame in history::frames(value.value()) {
            if visit(frame?)?.is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Every record of a (key, id) table whose key is `key` (all keys when
/// `None`), in id order.
fn scan_named<T: DeserializeOwned>(
    txn: &ReadTransaction,
    table: TableDefinition<(&'static str, &'static str), &'static [u8]>,
    name: &'static str,
    key: Option<&str>,
) -> Result<Vec<T>, StoreError> {
    let table = open_read(txn, table, name)?;
    let entries = match key {
        Some(key) => table.range((key, "")..),
        None => table.range::<(&str, &str)>(..),
    }
    .map_err(|err| redb_error(name, err))?;
    let mut records = Vec::new();
    for entry in entries {
        let (k, value) = entry.map_err(|err| redb_error(name, err))?;
        if key.is_some_and(|key| k.value().0 != key) {
            break;
        }
        records.push(decode(name, value.value())?);
    }
    Ok(records)
}

/// Maps a redb error into ours. Damage is [`StoreError::Corrupt`] (so is a
/// table of the wrong type: the file is not one we wrote); the rest is I/O.
fn redb_error(table: &'static str, err: impl Into<::redb::Error>) -> StoreError {
    use ::redb::Error;
    match err.into() {
        Error::Corrupted(message) => StoreError::Corrupt { table, message },
        err @ (Error::TableTypeMismatch { .. }
        | Error::TableIsMultimap(_)
        | Error::TableIsNotMultimap(_)
        | Error::TypeDefinitionChanged { .. }) => StoreError::Corrupt { table, message: err.to_string() },
        Error::DatabaseClosed => StoreError::Closed,
        err => StoreError::Io(err.to_string()),
    }
}

/// A copy of `error` for each waiter of a failed group ([`StoreError`] is
/// not `Clone`).
fn duplicate(error: &StoreError) -> StoreError {
    match error {
        StoreError::Locked { path } => StoreError::Locked { path: path.clone() },
        StoreError::Io(message) => StoreError::Io(message.clone()),
        StoreError::Corrupt { table, message } => StoreError::Corrupt { table, message: message.clone() },
        StoreError::Closed => StoreError::Closed,
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
    use subs_protocol::{ClientContext, DraftMessage};
    use tempfile::TempDir;

    use super::*;
    use crate::store::{CallSpec, StoredTrigger, TurnStatus};

    /// Writes to sessions of this tenant fail once written (test builds
    /// only), so tests can watch a transaction fail after it has written
    /// part of a batch.
    const POISON_TENANT: &str = "poison";

    pub(super) fn inject_failure(key: &str) -> Result<(), StoreError> {
        match key.split_once('/') {
            Some((POISON_TENANT, _)) => Err(StoreError::Io("injected failure".to_owned())),
            _ => Ok(()),
        }
    }

    /// A fresh directory (removed when dropped) and the store file in it.
    fn temp_file() -> (TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("subs.redb");
        (dir, path)
    }

    fn key(session: &str) -> SessionKey {
        SessionKey::new("t1", session)
    }

    fn session(key: &SessionKey, status: SessionStatus) -> SessionRecord {
        SessionRecord {
            key: key.clone(),
            agent_id: "agent".to_owned(),
            identity: Default::default(),
            status,
            state: json!({"n": 1}),
            agent: None,
            head_id: None,
            ancestry: Vec::new(),
            parent: None,
            next: Default::default(),
            first_open_step: 0,
            turn: None,
            queued: Vec::new(),
            interrupts: Vec::new(),
            usage: serde_json::json!({}),
            cost: None,
            budget: None,
            created_ms: 1,
            updated_ms: 2,
        }
    }

    fn message(id: &str) -> MessageRecord {
        MessageRecord {
            message: serde_json::from_value(json!({"id": id, "role": "user", "content": format!("text of {id}")}))
                .expect("message"),
            parent_id: None,
        }
    }

    fn step(decision_id: &str) -> StepRecord {
        let trigger = StoredTrigger::ClientMessages {
            fork_id: None,
            new: vec![DraftMessage::user("hi")],
            client: ClientContext::default(),
        };
        StepRecord::pending(None, decision_id.to_owned(), trigger)
    }

    fn call(id: &str) -> CallRecord {
        CallRecord {
            call: serde_json::from_value(json!({"id": id, "kind": "sub_agent", "status": "pending", "attempt": 1}))
                .expect("call"),
            turn_id: None,
            retry: None,
            retry_at_ms: None,
            spec: CallSpec::SubAgent { tool_call_id: format!("tc-{id}") },
        }
    }

    fn event(n: u64) -> EventRecord {
        EventRecord { name: "message".to_owned(), data: json!({"n": n}) }
    }

    fn turn(status: TurnStatus) -> TurnRecord {
        TurnRecord { status, data: Some(json!({"ok": true})), started_ms: 5, ended_ms: None }
    }

    fn item(text: &str) -> InboxItem {
        InboxItem::Message { message: DraftMessage::user(text), from: "other".to_owned() }
    }

    fn batch(ops: impl IntoIterator<Item = Op>) -> Batch {
        Batch { ops: ops.into_iter().collect() }
    }

    /// One batch holding every kind of op for `key`.
    fn full_batch(key: &SessionKey) -> Batch {
        let session_key = key.clone();
        let s = || session_key.clone();
        batch([
            Op::PutSession(session(key, SessionStatus::Running)),
            Op::PutMessage { session: s(), seq: 0, record: message("m0") },
            Op::PutMessage { session: s(), seq: 1, record: message("m1") },
            Op::PutStep { session: s(), seq: 0, record: step("d0") },
            Op::PutCall { session: s(), record: call("c1") },
            Op::PutEvent { session: s(), seq: 0, record: event(0) },
            Op::PutTurn { session: s(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Running) },
            Op::PushInbox { session: s(), item: item("hello") },
        ])
    }

    fn assert_full_batch(store: &RedbStore, key: &SessionKey) {
        assert_eq!(store.session(key).unwrap(), Some(session(key, SessionStatus::Running)));
        assert_eq!(store.messages(key).unwrap(), vec![(0, message("m0")), (1, message("m1"))]);
        assert_eq!(store.steps(key, 0).unwrap(), vec![(0, step("d0"))]);
        assert_eq!(store.calls(key).unwrap(), vec![call("c1")]);
        assert_eq!(store.events(key, None, 10).unwrap(), vec![(0, event(0))]);
        assert_eq!(store.turn(key, "turn-1").unwrap(), Some(turn(TurnStatus::Running)));
        let inbox = store.inbox(key).unwrap();
        assert_eq!(inbox.len(), 1);
        assert_eq!(inbox[0].1, item("hello"));
    }

    fn assert_nothing_of(store: &RedbStore, key: &SessionKey) {
        assert_eq!(store.session(key).unwrap(), None);
        assert!(store.messages(key).unwrap().is_empty());
        assert!(store.steps(key, 0).unwrap().is_empty());
        assert!(store.calls(key).unwrap().is_empty());
        assert!(store.events(key, None, 10).unwrap().is_empty());
        assert_eq!(store.turn(key, "turn-1").unwrap(), None);
        assert!(store.inbox(key).unwrap().is_empty());
    }

    /// The store's database, for tests that reach under the `Store` API.
    fn database(store: &RedbStore) -> Arc<Database> {
        Arc::clone(store.db.read().unwrap().as_ref().expect("open"))
    }

    /// Everything the store holds, as JSON, for comparing two stores.
    fn dump(store: &RedbStore, turns: &[(&str, &str)]) -> serde_json::Value {
        let sessions = store.sessions(None).unwrap();
        let per_session: Vec<_> = sessions
            .iter()
            .map(|record| {
                let key = &record.key;
                let turns: Vec<_> = turns
                    .iter()
                    .filter(|(s, _)| *s == key.session)
                    .map(|(_, id)| json!([id, store.turn(key, id).unwrap()]))
                    .collect();
                json!({
                    "session": record,
                    "messages": store.messages(key).unwrap(),
                    "steps": store.steps(key, 0).unwrap(),
                    "open_steps": store.steps(key, record.first_open_step).unwrap(),
                    "calls": store.calls(key).unwrap(),
                    "events": store.events(key, None, usize::MAX).unwrap(),
                    "events_after_1": store.events(key, Some(1), 2).unwrap(),
                    "turns": turns,
                    "inbox": store.inbox(key).unwrap(),
                })
            })
            .collect();
        let mut unfinished = store.unfinished().unwrap();
        unfinished.sort();
        json!({
            "sessions": per_session,
            "unfinished": unfinished,
            "agents": store.agents(None).unwrap(),
            "keys": store.keys().unwrap(),
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
        for record in store.sessions(None).unwrap() {
            let key = &record.key;
            let separately = LoadedSession {
                messages: store.messages(key).unwrap(),
                calls: store.calls(key).unwrap(),
                steps: store.steps(key, record.first_open_step).unwrap(),
                record: record.clone(),
            };
            assert_eq!(store.load(key).unwrap(), Some(separately), "{key}");
        }
        assert_eq!(store.load(&key("nobody")).unwrap(), None);
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
        assert_eq!(store.tenants().unwrap(), [tenant("t1", json!({}), 1)]);
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
            store.messages(&s1).unwrap().into_iter().map(|(_, m)| m.message.id).collect()
        };
        assert_eq!(ids(&store), ["m0", "m1", "m2", "m3"]);
        assert_eq!(store.events(&s1, Some(2), 10).unwrap(), [(3, event(3)), (4, event(4))]);
        assert_eq!(store.calls(&s1).unwrap(), [call("c3")]);
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(ids(&store), ["m0", "m1", "m2", "m3"]);
        assert_eq!(store.calls(&s1).unwrap(), [call("c3")]);
        store.close().await.unwrap();
    }

    /// Event pages read the same whichever way the store walks the log
    /// (back from the newest entry for a late resume, forward from the
    /// oldest for an early one: 200 entries, more than the walk back
    /// takes), at every resume point and page size, with entries that hold
    /// several events, none, or other records.
    #[tokio::test]
    async fn event_pages_are_the_same_from_either_end() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let s1 = key("s1");
        let mut next_event = 0;
        for commit in 0..200u64 {
            let mut ops = vec![Op::PutMessage { session: s1.clone(), seq: commit, record: message("m") }];
            // 0, 1, 2 or 3 events per commit.
            for _ in 0..commit % 4 {
                ops.push(Op::PutEvent { session: s1.clone(), seq: next_event, record: event(next_event) });
                next_event += 1;
            }
            ops.push(Op::PutSession(session(&s1, SessionStatus::Running)));
            store.commit(batch(ops)).await.unwrap();
        }
        let all: Vec<_> = (0..next_event).map(|n| (n, event(n))).collect();
        assert_eq!(store.events(&s1, None, usize::MAX).unwrap(), all);
        for after in 0..next_event + 2 {
            for limit in [1, 3, 1000] {
                let expected: Vec<_> = all.iter().filter(|(n, _)| *n > after).take(limit).cloned().collect();
                assert_eq!(store.events(&s1, Some(after), limit).unwrap(), expected, "after {after}, limit {limit}");
            }
        }
        assert!(store.events(&key("nobody"), None, 10).unwrap().is_empty());
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_committed_batch_survives_close_and_reopen() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        store.commit(full_batch(&key("s1"))).await.unwrap();
        assert_full_batch(&store, &key("s1"));
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_full_batch(&store, &key("s1"));
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
            store.commit(batch([Op::PushInbox { session: key("s"), item: item(&format!("i{n}")) }])).await.unwrap();
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
        assert!(store.inbox(&key("s")).unwrap().is_empty());
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
        assert!(matches!(err, StoreError::Io(ref m) if m.contains("injected")), "{err:?}");

        assert_nothing_of(&store, &key("s1"));
        assert!(store.unfinished().unwrap().is_empty());
        let stats = store.stats().unwrap();
        assert_eq!((stats.batches, stats.commits), (0, 0));
        // The inbox counter was rolled back with the rest.
        store.commit(batch([Op::PushInbox { session: key("s2"), item: item("x") }])).await.unwrap();
        assert_eq!(store.inbox(&key("s2")).unwrap()[0].0, 1);
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
        let stats = store.stats().unwrap();
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
            .range((storage.as_str(), 0)..(storage.as_str(), SESSION_SLOT))
            .unwrap()
            .map(|entry| entry.unwrap().0.value().1)
            .collect();
        assert_eq!(numbers, vec![1, 2, 3]);
        drop((log, read, db));
        assert_eq!(store.events(&s1, None, 10).unwrap(), (0..3).map(|seq| (seq, event(seq))).collect::<Vec<_>>());
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn agents_and_keys_are_kept_per_tenant() {
        use crate::store::{AgentRecord, AgentVersion, AgentWorker, KeyRecord};
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let agent = |tenant: &str, id: &str| AgentRecord {
            tenant: tenant.to_owned(),
            agent_id: id.to_owned(),
            current: AgentVersion {
                digest: format!("sha256:{id}"),
                worker: AgentWorker::Http { url: "http://127.0.0.1:1/".to_owned(), secret: None },
                created_ms: 1,
            },
            history: Vec::new(),
            created_ms: 1,
        };
        let key = |tenant: &str, hash: &str| KeyRecord {
            tenant: tenant.to_owned(),
            hash: hash.to_owned(),
            prefix: "subs_ab".to_owned(),
            name: None,
            created_ms: 1,
        };
        store
            .commit(batch([
                Op::PutAgent(agent("a", "x")),
                Op::PutAgent(agent("a", "y")),
                Op::PutAgent(agent("a-b", "x")),
                Op::PutKey(key("a", "h1")),
                Op::PutKey(key("b", "h2")),
            ]))
            .await
            .unwrap();
        let ids = |tenant| store.agents(tenant).unwrap().into_iter().map(|a| a.agent_id).collect::<Vec<_>>();
        assert_eq!(ids(Some("a")), ["x", "y"]);
        assert_eq!(ids(Some("a-b")), ["x"]);
        assert_eq!(ids(None).len(), 3);
        assert_eq!(store.agent("a", "y").unwrap(), Some(agent("a", "y")));
        assert_eq!(store.agent("b", "y").unwrap(), None);
        assert_eq!(store.keys().unwrap().len(), 2);
        store
            .commit(batch([
                Op::DeleteAgent { tenant: "a".to_owned(), agent_id: "x".to_owned() },
                Op::DeleteKey { tenant: "a".to_owned(), hash: "h1".to_owned() },
            ]))
            .await
            .unwrap();
        assert_eq!(ids(Some("a")), ["y"]);
        assert_eq!(store.keys().unwrap(), [key("b", "h2")]);
        store.close().await.unwrap();
    }

    fn tenant(name: &str, limits: serde_json::Value, created_ms: u64) -> TenantRecord {
        let limits = limits.as_object().cloned().unwrap_or_default();
        TenantRecord { tenant: name.to_owned(), limits, created_ms, updated_ms: created_ms }
    }

    /// Tenants are replaced whole and removed by name, and survive a
    /// reopen (through the journal and through the file).
    #[tokio::test]
    async fn tenants_are_kept_replaced_and_removed() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let acme = tenant("acme", json!({"max_sessions": 5, "budget": "2.5"}), 1);
        store
            .commit(batch([
                Op::PutTenant(acme.clone()),
                Op::PutTenant(tenant("acme-b", json!({}), 2)),
                Op::PutTenant(tenant("zed", json!({}), 3)),
            ]))
            .await
            .unwrap();
        let names = |store: &RedbStore| store.tenants().unwrap().into_iter().map(|t| t.tenant).collect::<Vec<_>>();
        assert_eq!(names(&store), ["acme", "acme-b", "zed"]);
        let lowered = tenant("acme", json!({"max_sessions": null}), 1);
        store
            .commit(batch([Op::PutTenant(lowered.clone()), Op::DeleteTenant { tenant: "zed".to_owned() }]))
            .await
            .unwrap();
        assert_eq!(store.tenants().unwrap()[0], lowered);
        assert_eq!(names(&store), ["acme", "acme-b"]);
        drop(store);
        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.tenants().unwrap()[0], lowered);
        assert_eq!(names(&store), ["acme", "acme-b"]);
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
        ops.push(Op::PutSession(session(&self::key("s1"), SessionStatus::Idle)));
        store.commit(batch(ops)).await.unwrap();
        store.close().await.unwrap();
        // What format 2 wrote: the same tables but `tenants`.
        {
            let db = Database::open(&path).unwrap();
            let txn = db.begin_write().unwrap();
            assert!(txn.delete_table(TENANTS).unwrap());
            txn.open_table(META).unwrap().insert(META_FORMAT, FORMAT_WITHOUT_TENANTS).unwrap();
            txn.commit().unwrap();
        }

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.tenants().unwrap(), [tenant("a", json!({}), 3), tenant("b", json!({}), 9)]);
        let mut stored = store.keys().unwrap();
        stored.sort_by(|x, y| x.hash.cmp(&y.hash));
        assert_eq!(stored, keys);
        assert_eq!(store.sessions(None).unwrap().len(), 1);
        {
            let db = database(&store);
            let txn = db.begin_read().unwrap();
            let format = txn.open_table(META).unwrap().get(META_FORMAT).unwrap().map(|f| f.value());
            assert_eq!(format, Some(FORMAT_VERSION));
        }
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn reads_return_what_the_ops_wrote() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let s1 = key("s1");
        // `s10` shares `s1`'s prefix, tenant `t` is a prefix of `t1`, and
        // `t1-x` sorts before `t1/` as a storage key.
        let s10 = key("s10");
        let other = SessionKey::new("t", "s1");
        let dashed = SessionKey::new("t1-x", "s0");
        let mut ops = vec![
            Op::PutSession(session(&s10, SessionStatus::Idle)),
            Op::PutSession(session(&s1, SessionStatus::Idle)),
            Op::PutSession(session(&other, SessionStatus::Idle)),
            Op::PutSession(session(&dashed, SessionStatus::Idle)),
        ];
        for seq in 0..10 {
            ops.push(Op::PutStep { session: s1.clone(), seq, record: step(&format!("d{seq}")) });
            ops.push(Op::PutEvent { session: s1.clone(), seq, record: event(seq) });
            ops.push(Op::PutMessage { session: s1.clone(), seq, record: message(&format!("m{seq}")) });
        }
        ops.push(Op::PutStep { session: s10.clone(), seq: 3, record: step("other") });
        ops.push(Op::PutEvent { session: s10.clone(), seq: 3, record: event(99) });
        for id in ["c1", "c2", "c3"] {
            ops.push(Op::PutCall { session: s1.clone(), record: call(id) });
        }
        ops.push(Op::PutCall { session: s10.clone(), record: call("c9") });
        for text in ["first", "second", "third"] {
            ops.push(Op::PushInbox { session: s1.clone(), item: item(text) });
        }
        ops.push(Op::PushInbox { session: s10.clone(), item: item("elsewhere") });
        ops.push(Op::PutTurn { session: s1.clone(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Running) });
        store.commit(batch(ops)).await.unwrap();

        let tenant_keys = |tenant| -> Vec<SessionKey> {
            store.sessions(tenant).unwrap().into_iter().map(|record| record.key).collect()
        };
        assert_eq!(tenant_keys(Some("t1")), vec![s1.clone(), s10.clone()]);
        assert_eq!(tenant_keys(Some("t")), vec![other.clone()]);
        assert_eq!(tenant_keys(Some("nobody")), Vec::<SessionKey>::new());
        assert_eq!(tenant_keys(None), vec![other.clone(), s1.clone(), s10.clone(), dashed.clone()]);
        // Pages of one tenant, in id order, from after any id (one stored
        // or not).
        let page = |tenant, after, limit| -> Vec<SessionKey> {
            store.sessions_page(tenant, after, limit).unwrap().into_iter().map(|record| record.key).collect()
        };
        assert_eq!(page("t1", None, 1), vec![s1.clone()]);
        assert_eq!(page("t1", Some("s1"), 1), vec![s10.clone()]);
        assert_eq!(page("t1", Some("s1-"), 5), vec![s10.clone()]);
        assert_eq!(page("t1", Some("a"), 5), vec![s1.clone(), s10.clone()]);
        assert_eq!(page("t1", Some("s10"), 5), Vec::<SessionKey>::new());
        assert_eq!(page("t1", None, 0), Vec::<SessionKey>::new());
        assert_eq!(page("t", None, 5), vec![other.clone()]);
        assert_eq!(page("t1-x", None, 5), vec![dashed.clone()]);
        // Counted without decoding, per tenant alike (`t` is a prefix of
        // `t1`'s keys only as a string, not as a tenant).
        for tenant in ["t1", "t", "t1-x", "nobody"] {
            let listed = tenant_keys(Some(tenant)).len() as u64;
            assert_eq!(store.session_count(tenant).unwrap(), listed, "{tenant}");
        }

        let seqs = |records: Vec<(u64, StepRecord)>| records.into_iter().map(|(seq, _)| seq).collect::<Vec<_>>();
        assert_eq!(seqs(store.steps(&s1, 0).unwrap()), (0..10).collect::<Vec<_>>());
        assert_eq!(seqs(store.steps(&s1, 7).unwrap()), vec![7, 8, 9]);
        assert_eq!(store.steps(&s1, 7).unwrap()[0].1, step("d7"));
        assert!(store.steps(&s1, 10).unwrap().is_empty());

        let events = store.events(&s1, Some(4), 3).unwrap();
        assert_eq!(events, vec![(5, event(5)), (6, event(6)), (7, event(7))]);
        assert_eq!(store.events(&s1, None, 2).unwrap(), vec![(0, event(0)), (1, event(1))]);
        assert_eq!(store.events(&s1, Some(9), 10).unwrap(), vec![]);
        assert_eq!(store.events(&s1, Some(u64::MAX), 10).unwrap(), vec![]);
        assert_eq!(store.events(&s1, None, 0).unwrap(), vec![]);
        assert_eq!(store.events(&s10, None, 10).unwrap(), vec![(3, event(99))]);

        assert_eq!(store.messages(&s1).unwrap().len(), 10);
        assert_eq!(store.messages(&s1).unwrap()[9], (9, message("m9")));
        assert_eq!(store.calls(&s1).unwrap(), vec![call("c1"), call("c2"), call("c3")]);
        assert_eq!(store.calls(&s10).unwrap(), vec![call("c9")]);
        assert_eq!(store.turn(&s1, "turn-1").unwrap(), Some(turn(TurnStatus::Running)));
        assert_eq!(store.turn(&s1, "turn-2").unwrap(), None);
        assert_eq!(store.turn(&s10, "turn-1").unwrap(), None);

        let inbox = store.inbox(&s1).unwrap();
        let texts: Vec<_> = inbox.iter().map(|(_, item)| item.clone()).collect();
        assert_eq!(texts, vec![item("first"), item("second"), item("third")]);
        assert!(inbox.windows(2).all(|pair| pair[0].0 < pair[1].0), "{inbox:?}");

        // Replacing and deleting.
        let mut done = session(&s1, SessionStatus::Idle);
        done.state = json!({"n": 2});
        store
            .commit(batch([
                Op::PutSession(done.clone()),
                Op::DeleteCall { session: s1.clone(), call_id: "c2".to_owned() },
                Op::DeleteCall { session: s1.clone(), call_id: "never-existed".to_owned() },
                Op::DeleteInbox { session: s1.clone(), seq: inbox[0].0 },
                Op::PutTurn { session: s1.clone(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Done) },
            ]))
            .await
            .unwrap();
        assert_eq!(store.session(&s1).unwrap(), Some(done));
        assert_eq!(store.calls(&s1).unwrap(), vec![call("c1"), call("c3")]);
        assert_eq!(store.inbox(&s1).unwrap(), inbox[1..].to_vec());
        assert_eq!(store.turn(&s1, "turn-1").unwrap(), Some(turn(TurnStatus::Done)));
        assert_eq!(store.inbox(&s10).unwrap().len(), 1);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn unfinished_follows_status_and_inbox_across_reopen() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        store
            .commit(batch([
                Op::PutSession(session(&key("running"), SessionStatus::Running)),
                Op::PutSession(session(&key("idle"), SessionStatus::Idle)),
                Op::PutSession(session(&key("waiting"), SessionStatus::Waiting)),
                Op::PutSession(session(&key("idle-with-mail"), SessionStatus::Idle)),
                Op::PushInbox { session: key("idle-with-mail"), item: item("wake up") },
                Op::PushInbox { session: key("idle-with-mail"), item: item("again") },
                // Mail for a session not created yet is not forgotten either.
                Op::PushInbox { session: key("unborn"), item: item("start") },
            ]))
            .await
            .unwrap();
        let expected = vec![key("idle-with-mail"), key("running"), key("unborn"), key("waiting")];
        assert_eq!(store.unfinished().unwrap(), expected);
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.unfinished().unwrap(), expected);
        let mail: Vec<_> = store.inbox(&key("idle-with-mail")).unwrap().into_iter().map(|(seq, _)| seq).collect();
        let unborn = store.inbox(&key("unborn")).unwrap()[0].0;
        let mut ops = vec![
            Op::PutSession(session(&key("running"), SessionStatus::Idle)),
            Op::PutSession(session(&key("waiting"), SessionStatus::Running)),
            Op::DeleteInbox { session: key("unborn"), seq: unborn },
        ];
        ops.extend(mail.iter().map(|&seq| Op::DeleteInbox { session: key("idle-with-mail"), seq }));
        store.commit(batch(ops)).await.unwrap();
        assert_eq!(store.unfinished().unwrap(), vec![key("waiting")]);
        store.close().await.unwrap();

        let store = RedbStore::open(&path).unwrap();
        assert_eq!(store.unfinished().unwrap(), vec![key("waiting")]);
        store.close().await.unwrap();
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
                            Op::PutSession(session(&key, SessionStatus::Running)),
                            Op::PutMessage { session: key.clone(), seq: 0, record: message(&format!("m{n}")) },
                        ]))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let stats = store.stats().unwrap();
        assert_eq!(stats.batches, 200);
        assert!(stats.commits * 2 < stats.batches, "no group commit: {stats:?}");
        assert!(store.stored_bytes().unwrap() > 0);
        for n in 0..200 {
            assert_eq!(store.messages(&key(&format!("s{n}"))).unwrap(), vec![(0, message(&format!("m{n}")))]);
        }
        assert_eq!(store.unfinished().unwrap().len(), 200);
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
        assert_eq!(store.session(&key("s1")).unwrap(), Some(session(&key("s1"), SessionStatus::Running)));
        assert_eq!(store.events(&key("s1"), None, 10).unwrap(), vec![(0, event(0)), (1, event(1))]);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn inbox_numbers_keep_increasing_across_reopen() {
        let (_dir, path) = temp_file();
        let mut last = 0;
        for round in 0..3 {
            let store = RedbStore::open(&path).unwrap();
            for session in ["a", "b"] {
                store.commit(batch([Op::PushInbox { session: key(session), item: item("x") }])).await.unwrap();
                let inbox = store.inbox(&key(session)).unwrap();
                assert_eq!(inbox.len(), 1, "round {round}");
                assert!(inbox[0].0 > last, "round {round}: {} after {last}", inbox[0].0);
                last = inbox[0].0;
                // Emptying the inbox must not let numbers be reused.
                store.commit(batch([Op::DeleteInbox { session: key(session), seq: last }])).await.unwrap();
            }
            store.close().await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_closed_store_takes_nothing_more() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        store.close().await.unwrap();
        assert!(matches!(store.commit(full_batch(&key("s1"))).await, Err(StoreError::Closed)));
        assert!(matches!(store.commit(Batch::new()).await, Err(StoreError::Closed)));
        assert!(matches!(store.session(&key("s1")), Err(StoreError::Closed)));
        assert!(matches!(store.unfinished(), Err(StoreError::Closed)));
        assert!(matches!(store.stats(), Err(StoreError::Closed)));
        assert!(matches!(store.stored_bytes(), Err(StoreError::Closed)));
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn an_empty_batch_costs_no_commit_and_stats_count_bytes() {
        let (_dir, path) = temp_file();
        let store = RedbStore::open(&path).unwrap();
        let before = store.stored_bytes().unwrap();
        store.commit(Batch::new()).await.unwrap();
        assert_eq!(store.stats().unwrap(), StoreStats { batches: 0, commits: 0 });
        store.commit(full_batch(&key("s1"))).await.unwrap();
        assert_eq!(store.stats().unwrap(), StoreStats { batches: 1, commits: 1 });
        let stored = store.stored_bytes().unwrap();
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
        }
        txn.commit().unwrap();
        drop(db);
        assert!(matches!(store.session(&key("s1")), Err(StoreError::Corrupt { table: "sessions", .. })));
        assert!(matches!(store.sessions(None), Err(StoreError::Corrupt { table: "sessions", .. })));
        assert!(matches!(store.unfinished(), Err(StoreError::Corrupt { table: "active", .. })));
        assert!(matches!(store.steps(&key("s1"), 0), Err(StoreError::Corrupt { table: "steps", .. })));
        assert!(matches!(store.events(&key("s2"), None, 10), Err(StoreError::Corrupt { table: "log", .. })));
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
        assert!(matches!(RedbStore::open(&path), Err(StoreError::Io(_))));
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
                        let started = Instant::now();
                        // Bounded in case the parent never kills us.
                        for n in 0u64.. {
                            if started.elapsed() > Duration::from_secs(30) {
                                break;
                            }
                            let ops = [
                                Op::PutSession(session(&sk, SessionStatus::Running)),
                                Op::PutMessage { session: sk.clone(), seq: n, record: message(&format!("m{n}")) },
                                Op::PushInbox { session: sk.clone(), item: item(&format!("i{n}")) },
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
                .args(["--exact", "store::redb::tests::crash_child", "--nocapture", "--test-threads=1"])
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
                let messages = store.messages(&session).unwrap();
                assert!(
                    messages.iter().any(|(seq, record)| *seq == n && *record == message(&format!("m{n}"))),
                    "round {round}: acknowledged commit {task}/{n} is lost"
                );
                assert!(store.unfinished().unwrap().contains(&session));
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
}
