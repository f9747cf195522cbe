//! [`PgStore`]: the [`Store`] in a PostgreSQL database that several engine
//! nodes share, with leases, fencing and notices ([`Shared`]).
//!
//! # What is in the database
//!
//! Every record is the bytes of its JSON (`bytea`; `serde_json`, as the
//! other backends), beside the columns queries need. The schema, as
//! `migrations/` builds it:
//!
//! | table | key | value, and columns for queries |
//! | --- | --- | --- |
//! | `session_ids` | (tenant, session) | the session's number, `sid`, given the first time anything is written for it |
//! | `sessions` | sid; also (tenant, id), and (tenant, identity, id) for listing an owner's sessions | [`SessionRecord`]; `open_step` (its `first_open_step`), `identity` (its owner's id) |
//! | `active_sessions` | sid | nothing: the session's status is not idle (a table of its own, so the record's rewrites stay in place) |
//! | `messages`, `steps`, `events` | (sid, seq) | [`MessageRecord`], [`StepRecord`], [`EventRecord`] |
//! | `calls`, `turns` | (sid, id) | [`CallRecord`], [`TurnRecord`] |
//! | `inbox` | (sid, seq) | [`InboxItem`]; numbers from the sequence `inbox_seq` |
//! | `agents`, `api_keys`, `tenants` | (tenant, id) | [`AgentRecord`], [`KeyRecord`], [`TenantRecord`] |
//! | `mcp_servers` | (tenant, name) | [`McpServerRecord`] |
//! | `decisions` | (tenant, agent id, version) | the decisions the version made: the sum of [`Op::CountDecisions`](subs_store::Op::CountDecisions) |
//! | `replies` | request id | the answer to a forwarded request, and when it was stored |
//! | `blobs` | digest | a component's bytes, and when they were last stored |
//! | `nodes` | name | when the node's heartbeat expires; the key of its lock, and when it was taken |
//! | `leases` | (tenant, session) | the node holding the lease (NULL once released) and its fencing token, from the sequence `lease_tokens` |
//!
//! A session's rows are keyed by its number rather than its two texts: a
//! B-tree search on one integer costs a fraction of one on two strings,
//! and every row written is searched twice. Text keys use the `"C"`
//! collation, so lists come in byte order, as from the other backends. The schema is versioned with sqlx's migrations,
//! embedded in the binary and applied by [`PgStore::open`]; a database
//! migrated by a newer binary is refused (see [`schema_version`]).
//!
//! # Writes: group commit
//!
//! [`Store::commit`] encodes the batch on the caller's task and queues it
//! (a bounded queue: when it is full, commits wait for room). One writer
//! task, on a connection of its own, takes every batch waiting (at most
//! [`MAX_GROUP`]) and writes them with one statement, which is its own
//! transaction: its parts write each table with the rows of the whole
//! group (`INSERT … SELECT * FROM UNNEST(…) ON CONFLICT … DO UPDATE`;
//! plain inserts for messages and events, which the engine appends, and
//! upserts again if one turns out written before; deletes by lists of
//! keys), keeping the last write of each key so the group means what its
//! ops applied in order mean. One round trip writes
//! the group (two when it holds sessions never written before, which get
//! their numbers first). The commit is durable when it returns: the store
//! expects PostgreSQL's `synchronous_commit` and `fsync` on, and warns at
//! open if they are not. Under load many batches share a statement and
//! its WAL flush.
//!
//! If PostgreSQL refuses the statement, the group's batches are tried
//! again one by one, so one bad batch fails alone; one it chose as a
//! deadlock or serialization victim is tried once more as a whole. If the
//! connection fails while the statement is in flight, its outcome is
//! unknown and every batch of the group gets [`StoreError::InDoubt`]; none
//! is written again (a connection idle for more than a second is checked
//! before a group is sent on it, so a connection that died while idle
//! costs nothing). When the database cannot be reached at all, the group
//! fails with [`StoreError::Io`]: nothing of it was written.
//!
//! # Several nodes: leases, fencing, notices
//!
//! See [`subs_store::shared`] for what they mean. Here:
//!
//! - every node has a row in `nodes`, renewed every
//!   [`SharedSettings::renew`] by a task on its own connection, that
//!   expires [`SharedSettings::lease`] after the last renewal, judged by
//!   the database's clock (`now()`), never by the nodes'. Closing or
//!   dropping the store deletes the row, so others take its sessions at
//!   once;
//! - that task's connection also holds the node's advisory lock, which
//!   PostgreSQL releases as soon as the connection ends: a node whose
//!   process died counts as dead at once, without waiting for its
//!   heartbeat to expire ([`Shared::live_nodes`]; see `node.rs` for why a
//!   paused node and a restarted server still go by the heartbeat);
//! - [`Shared::claim`] upserts the session's `leases` row with a new token
//!   unless a live node other than this one holds it;
//! - the group's statement first locks (`FOR SHARE`) the lease rows of the
//!   sessions whose batches are fenced and writes only if every token is
//!   current; otherwise the stale batches fail with [`StoreError::Fenced`]
//!   and write nothing, and the statement runs again for the others (why
//!   this is race-free is told in `writer.rs`);
//! - the writer sends the notices of the group's batches (their events,
//!   inbox items, replies, and changes to agents, keys or tenants) with
//!   `pg_notify` inside the statement, so they are delivered when, and
//!   only if, it commits: one NOTIFY per transaction carrying the group's
//!   notices, more only where the payload would pass 8000 bytes. A task
//!   listening on [`NOTICE_CHANNEL`] passes the other nodes' notices to
//!   [`Shared::listen`]'s receivers (see [`notice`] for what happens when
//!   it reconnects).
//!
//! # Reads
//!
//! Reads go through a pool of connections ([`PgOptions::pool`]).
//! [`Store::load`] reads a session's record, messages, calls and open steps
//! in one `REPEATABLE READ, READ ONLY` transaction, so all four describe
//! one moment, and with one query (three round trips in all).
//!
//! # Not supported
//!
//! TLS to the database (sqlx is built without it): reach PostgreSQL over a
//! private network, a Unix socket (`postgres:///subs?host=/run/postgresql`)
//! or a local TLS proxy.

/// A condition on a row `n` of `nodes`: the node is live (see `node.rs`:
/// its heartbeat has not expired and its connection holds its lock, or
/// held it only before the server's restart). Testing another
/// connection's lock takes a shared lock held to the end of the
/// transaction, which conflicts with nothing but a node taking that key,
/// and no key is taken twice. The number is [`node::LOCK_CLASS`].
macro_rules! live_node {
    () => {
        "(n.expires > now() AND (n.lock_key IS NULL OR n.locked < pg_postmaster_start_time() \
         OR NOT pg_try_advisory_xact_lock_shared(1937072755, n.lock_key)))"
    };
}

mod encode;
mod node;
pub mod notice;
mod schema;
#[cfg(feature = "testing")]
pub mod testing;
mod writer;

use std::str::FromStr as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions as _, Connection as _, Executor as _, Row as _};
use subs_store::shared::{Claim, Lease, Noticed, Orphan, Shared, SharedSettings};
use subs_store::{
    AgentRecord, Batch, BoxFuture, CallRecord, EventRecord, InboxItem, KeyRecord, LoadedSession, McpServerRecord,
    MessageRecord, SessionKey, SessionRecord, StepRecord, Store, StoreAdmin, StoreError, StoreResult, StoreStats,
    TenantRecord, TurnRecord,
};
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::encode::{decode, table};
pub use crate::node::{MAX_NODE_NAME, generated_name};
pub use crate::notice::NOTICE_CHANNEL;
pub use crate::schema::schema_version;
pub use crate::writer::MAX_GROUP;

/// Batches that may wait for the writer; commits beyond wait for room.
pub const QUEUE: usize = 8 * MAX_GROUP;

/// How to open a [`PgStore`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// This node's name in leases and notices: unique among live nodes.
    /// `None`: [`generated_name`] (`host-pid-random`), which is new for
    /// every process, as [`Shared::node`] asks. A name given here and used
    /// again by a restarted process is taken over: the sessions its
    /// previous process held count as crashed.
    pub node: Option<String>,
    /// Lease timing: how long a node's leases outlive its last heartbeat,
    /// and how often it renews it.
    pub shared: SharedSettings,
    /// Connections for reads, claims and blobs (the writer, the heartbeat
    /// and the listener have one each besides).
    pub pool: u32,
    /// How long connecting may take before the store gives up.
    pub connect_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self { node: None, shared: SharedSettings::default(), pool: 8, connect_timeout: Duration::from_secs(10) }
    }
}

/// What the writer has done, for [`StoreAdmin::stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Batches written.
    pub(crate) batches: AtomicU64,
    /// Transactions committed that wrote at least one batch.
    pub(crate) commits: AtomicU64,
}

/// The [`Store`] in PostgreSQL; see the [module docs](self).
///
/// Share it as `Arc<PgStore>` (or `Arc<dyn Store>`). Shut it down with
/// [`close`](Self::close); dropping it does the same in the background
/// (the tasks it started finish on the runtime it was opened on).
pub struct PgStore {
    /// The database, without its password, for errors.
    url: String,
    node: String,
    /// The lease timing.
    settings: SharedSettings,
    pool: PgPool,
    /// Where commits queue for the writer; `None` once closed.
    queue: Mutex<Option<mpsc::Sender<writer::Request>>>,
    tasks: Mutex<Tasks>,
    /// Tells the heartbeat and the listener to stop.
    stop: watch::Sender<bool>,
    notices: broadcast::Sender<Noticed>,
    counters: Arc<Counters>,
    closed: AtomicBool,
    /// Shared with the heartbeat task, which skips renewals while set.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    paused: Arc<AtomicBool>,
}

#[derive(Default)]
struct Tasks {
    writer: Option<JoinHandle<()>>,
    heartbeat: Option<JoinHandle<()>>,
    listener: Option<JoinHandle<()>>,
    /// The listener's pool (one connection), closed last.
    listener_pool: Option<PgPool>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("url", &self.url).field("node", &self.node).finish_non_exhaustive()
    }
}

/// `url` with its password (in the user info or a `password=` parameter)
/// replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest = scheme_end + 3;
        let authority_end = out[rest..].find(['/', '?', '#']).map_or(out.len(), |end| rest + end);
        if let Some(at) = out[rest..authority_end].rfind('@') {
            let userinfo = &out[rest..rest + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest + colon + 1..rest + at, "***");
            }
        }
    }
    if let Some(query) = out.find('?') {
        let (head, params) = out.split_at(query + 1);
        let params: Vec<String> = params
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
                _ => param.to_owned(),
            })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`;
    /// see sqlx's `PgConnectOptions` for the parameters), applies the
    /// migrations this binary has that it lacks, registers this node and
    /// starts its writer, its heartbeat and its notice listener.
    ///
    /// Fails, naming the URL without its password, when the URL is not
    /// one, the database cannot be reached within
    /// [`PgOptions::connect_timeout`], its schema is newer than this
    /// binary's, or a live node has the same name.
    pub async fn open(url: &str, options: PgOptions) -> Result<PgStore, StoreError> {
        let shown = redact(url);
        let PgOptions { node, shared, pool, connect_timeout } = options;
        shared.check().map_err(|why| StoreError::io(format!("cannot open the store in {shown}"), why))?;
        let node = node.unwrap_or_else(generated_name);
        node::check_name(&node).map_err(|why| StoreError::io(format!("cannot open the store in {shown}"), why))?;
        let connect = PgConnectOptions::from_str(url)
            .map_err(|err| StoreError::io(format!("{shown} is not a PostgreSQL URL"), err))?
            .application_name("subs")
            .disable_statement_logging();
        let unreachable = |err: sqlx::Error| StoreError::io(format!("cannot connect to {shown}"), err);
        // No round trip to check a connection each time one is taken: a
        // read that meets a connection that died while idle is tried once
        // more, on another.
        let pool = PgPoolOptions::new()
            .max_connections(pool.max(1))
            .acquire_timeout(connect_timeout)
            .test_before_acquire(false)
            .connect_with(connect.clone())
            .await
            .map_err(unreachable)?;
        schema::migrate(&pool, &shown).await?;

        let dedicated = async || {
            tokio::time::timeout(connect_timeout, PgConnection::connect_with(&connect))
                .await
                .map_err(|_| StoreError::io(format!("cannot connect to {shown}"), "timed out"))?
                .map_err(unreachable)
        };
        let mut heartbeat_conn = dedicated().await?;
        node::warn_if_not_durable(&mut heartbeat_conn, &shown).await;
        let key = node::register(&mut heartbeat_conn, &node, &shared, &shown).await?;
        let mut writer_conn = dedicated().await?;
        writer_conn
            .execute(writer::WRITER_SETTINGS)
            .await
            .map_err(|err| StoreError::io(format!("cannot set up the writer's connection to {shown}"), err))?;
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(connect_timeout)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(connect.clone());
        let listener = notice::connect(&listener_pool).await.map_err(unreachable)?;

        let counters = Arc::new(Counters::default());
        let (stop, stopping) = watch::channel(false);
        let (notices, _) = broadcast::channel(notice::NOTICE_BUFFER);
        let paused = Arc::new(AtomicBool::new(false));
        let (queue, requests) = mpsc::channel(QUEUE);
        let writer = writer::Writer {
            options: connect.clone(),
            connect_timeout,
            conn: Some(writer_conn),
            used: std::time::Instant::now(),
            node: node.clone(),
            counters: Arc::clone(&counters),
            sids: writer::Sids::default(),
            known_sids: writer::KNOWN_SIDS,
        };
        let heartbeat = node::Heartbeat {
            options: connect,
            conn: Some(heartbeat_conn),
            key: Some(key),
            node: node.clone(),
            settings: shared,
            paused: Arc::clone(&paused),
        };
        let tasks = Tasks {
            writer: Some(tokio::spawn(writer::run(writer, requests))),
            heartbeat: Some(tokio::spawn(node::run(heartbeat, stopping.clone()))),
            listener: Some(tokio::spawn(notice::run(
                listener,
                listener_pool.clone(),
                node.clone(),
                notices.clone(),
                stopping,
            ))),
            listener_pool: Some(listener_pool),
        };
        Ok(PgStore {
            url: shown,
            node,
            settings: shared,
            pool,
            queue: Mutex::new(Some(queue)),
            tasks: Mutex::new(tasks),
            stop,
            notices,
            counters,
            closed: AtomicBool::new(false),
            paused,
        })
    }

    /// The database's URL, without its password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Shuts the store down: commits from now on fail with
    /// [`StoreError::Closed`], those already queued are written and
    /// answered, then the heartbeat stops and the node's row is deleted
    /// (its leases are free for other nodes at once), and the connections
    /// are closed. Reads after `close` fail with [`StoreError::Closed`].
    /// Closing twice is harmless.
    pub async fn close(&self) -> StoreResult<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        drop(lock(&self.queue).take());
        let writer = lock(&self.tasks).writer.take();
        if let Some(writer) = writer {
            // It ends once the queue is drained.
            let _ = writer.await;
        }
        self.stop.send_replace(true);
        let (heartbeat, listener, listener_pool) = {
            let mut tasks = lock(&self.tasks);
            (tasks.heartbeat.take(), tasks.listener.take(), tasks.listener_pool.take())
        };
        if let Some(heartbeat) = heartbeat {
            let _ = heartbeat.await;
        }
        if let Some(listener) = listener {
            let _ = listener.await;
        }
        if let Some(pool) = listener_pool {
            pool.close().await;
        }
        self.pool.close().await;
        Ok(())
    }

    /// Stops (or restarts) renewing this node's heartbeat, as a node that
    /// hangs would: its leases lapse after [`SharedSettings::lease`].
    #[cfg(feature = "testing")]
    pub fn pause_heartbeat(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    fn open_check(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Relaxed) { Err(StoreError::Closed) } else { Ok(()) }
    }

    /// Encodes `batch` and queues it: at once when the queue has room (so
    /// commits called one after another are written in that order),
    /// otherwise once the future is polled and room is made.
    fn enqueue(&self, batch: Batch) -> StoreResult<Queued> {
        let encoded = encode::encode(batch)?;
        let queue = lock(&self.queue);
        let queue = queue.as_ref().ok_or(StoreError::Closed)?;
        if encoded.writes.is_empty() {
            return Ok(Queued::Nothing);
        }
        let (answer, outcome) = oneshot::channel();
        match queue.try_send(writer::Request { batch: encoded, answer }) {
            Ok(()) => Ok(Queued::Waiting(outcome)),
            Err(mpsc::error::TrySendError::Full(request)) => Ok(Queued::Full(queue.clone(), request, outcome)),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(StoreError::Closed),
        }
    }

    /// Runs `read` on a pooled connection, unless the store is closed;
    /// `op` names what it does in errors. A connection found dead is
    /// dropped and the read tried on another: after a restart of the
    /// server every pooled connection is dead, so as many tries as the
    /// pool holds, and one more on a connection made anew.
    async fn fetch_all<'q>(
        &self,
        op: impl FnOnce() -> String,
        query: impl Fn() -> Query<'q>,
    ) -> StoreResult<Vec<PgRow>> {
        self.open_check()?;
        let mut tries = self.pool.size() + 1;
        loop {
            match query().fetch_all(&self.pool).await {
                Err(err) if broken(&err) && tries > 0 => tries -= 1,
                result => return result.map_err(|err| StoreError::io(op(), err)),
            }
        }
    }

    async fn fetch_optional<'q>(
        &self,
        op: impl FnOnce() -> String,
        query: impl Fn() -> Query<'q>,
    ) -> StoreResult<Option<PgRow>> {
        self.open_check()?;
        let mut tries = self.pool.size() + 1;
        loop {
            match query().fetch_optional(&self.pool).await {
                Err(err) if broken(&err) && tries > 0 => tries -= 1,
                result => return result.map_err(|err| StoreError::io(op(), err)),
            }
        }
    }
}

type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Whether `err` says the connection was lost, rather than the query
/// refused: a read is then tried once more, on another connection.
fn broken(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) || writer::connection_lost(err)
}

enum Queued {
    Nothing,
    Waiting(oneshot::Receiver<StoreResult<()>>),
    Full(mpsc::Sender<writer::Request>, writer::Request, oneshot::Receiver<StoreResult<()>>),
}

impl Drop for PgStore {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::SeqCst);
        // The writer drains the queue and stops; the heartbeat deletes the
        // node's row and stops; the listener stops.
        drop(lock(&self.queue).take());
        self.stop.send_replace(true);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A column of `row`, or corruption of `table`.
fn column<'r, T>(row: &'r PgRow, at: usize, table: &'static str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(at).map_err(|err| StoreError::Corrupt { table, message: err.to_string() })
}

/// A record stored as JSON in column `at` of `row`.
fn record<T: serde::de::DeserializeOwned>(row: &PgRow, at: usize, table: &'static str) -> StoreResult<T> {
    decode(table, column::<&[u8]>(row, at, table)?)
}

/// A sequence number stored in column `at` of `row`.
fn seq(row: &PgRow, at: usize, table: &'static str) -> StoreResult<u64> {
    let seq: i64 = column(row, at, table)?;
    u64::try_from(seq).map_err(|_| StoreError::Corrupt { table, message: format!("sequence number {seq}") })
}

/// Rows of (seq, record).
fn numbered<T: serde::de::DeserializeOwned>(rows: &[PgRow], table: &'static str) -> StoreResult<Vec<(u64, T)>> {
    rows.iter().map(|row| Ok((seq(row, 0, table)?, record(row, 1, table)?))).collect()
}

fn records<T: serde::de::DeserializeOwned>(rows: &[PgRow], table: &'static str) -> StoreResult<Vec<T>> {
    rows.iter().map(|row| record(row, 0, table)).collect()
}

/// A count or limit for SQL: at most `i64::MAX`.
fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

const SESSION: &str = "SELECT record FROM sessions WHERE tenant = $1 AND id = $2";
/// What `load` reads, in one query (inside its transaction): the
/// session's record (part 0), its messages (1) by number, calls (2) by
/// id and steps (3) from the record's `first_open_step` (copied into
/// `open_step`) by number.
const LOAD: &str = "WITH s AS (SELECT sid, open_step, record FROM sessions WHERE tenant = $1 AND id = $2) \
    SELECT 0 AS part, 0::int8 AS seq, NULL::text AS id, record FROM s \
    UNION ALL SELECT 1, m.seq, NULL, m.record FROM s JOIN messages m ON m.sid = s.sid \
    UNION ALL SELECT 2, 0, c.call_id, c.record FROM s JOIN calls c ON c.sid = s.sid \
    UNION ALL SELECT 3, t.seq, NULL, t.record FROM s JOIN steps t ON t.sid = s.sid AND t.seq >= s.open_step \
    ORDER BY 1, 2, 3";
/// Reads of a session's records find its number first (`$1`, `$2`: its
/// key).
const MESSAGES: &str = "SELECT seq, record FROM messages \
    WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) ORDER BY seq";
const STEPS: &str = "SELECT seq, record FROM steps \
    WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) AND seq >= $3 ORDER BY seq LIMIT $4";
/// A page of steps: the first `$4` from number `$3` on, up to the one
/// that takes their stored bytes past `$5` (the first always).
const STEPS_PAGE: &str = "SELECT seq, record FROM (SELECT seq, record, \
    row_number() OVER (ORDER BY seq) AS n, sum(octet_length(record)) OVER (ORDER BY seq) AS total \
    FROM (SELECT seq, record FROM steps \
    WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) AND seq >= $3 ORDER BY seq LIMIT $4) l) p \
    WHERE n = 1 OR total <= $5 ORDER BY seq";
/// The calls of a session whose ids are in `$3`, by id.
const CALLS_NAMED: &str = "SELECT record FROM calls \
    WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) AND call_id = ANY($3) ORDER BY call_id";
const CALLS: &str = "SELECT record FROM calls \
    WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) ORDER BY call_id";

impl Store for PgStore {
    /// Queues the batch as soon as it is called (when the queue has room;
    /// see [`QUEUE`]), so commits made one after another by one task are
    /// written in that order. Dropping the returned future does not take
    /// the batch back: it may still be committed.
    fn commit(&self, batch: Batch) -> BoxFuture<'_, StoreResult<()>> {
        let queued = self.enqueue(batch);
        Box::pin(async move {
            let outcome = match queued? {
                Queued::Nothing => return Ok(()),
                Queued::Waiting(outcome) => outcome,
                Queued::Full(queue, request, outcome) => {
                    queue.send(request).await.map_err(|_| StoreError::Closed)?;
                    outcome
                }
            };
            // The writer answers every batch it takes, unless it died.
            outcome.await.unwrap_or(Err(StoreError::Closed))
        })
    }

    fn session<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionRecord>>> {
        Box::pin(async move {
            let query = || sqlx::query(SESSION).bind(&key.tenant).bind(&key.session);
            let row = self.fetch_optional(|| format!("cannot read session {key} from {}", self.url), query).await?;
            row.map(|row| record(&row, 0, table::SESSIONS)).transpose()
        })
    }

    fn sessions<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        Box::pin(async move {
            let query = || match tenant {
                Some(tenant) => sqlx::query("SELECT record FROM sessions WHERE tenant = $1 ORDER BY id").bind(tenant),
                None => sqlx::query("SELECT record FROM sessions ORDER BY tenant, id"),
            };
            let rows = self.fetch_all(|| format!("cannot list the sessions in {}", self.url), query).await?;
            records(&rows, table::SESSIONS)
        })
    }

    fn sessions_page<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        Box::pin(async move {
            if limit == 0 {
                self.open_check()?;
                return Ok(Vec::new());
            }
            // Session ids are never empty: after "" is from the first.
            let query = || {
                sqlx::query("SELECT record FROM sessions WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3")
                    .bind(tenant)
                    .bind(after.unwrap_or_default())
                    .bind(self::limit(limit))
            };
            let rows =
                self.fetch_all(|| format!("cannot list the sessions of {tenant} in {}", self.url), query).await?;
            records(&rows, table::SESSIONS)
        })
    }

    /// Reads the owner's rows of the index on (tenant, identity, id), and
    /// the records of those in the page only.
    fn sessions_of_identity<'a>(
        &'a self,
        tenant: &'a str,
        identity: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        Box::pin(async move {
            if limit == 0 {
                self.open_check()?;
                return Ok(Vec::new());
            }
            // Session ids are never empty: after "" is from the first.
            let query = || {
                sqlx::query(
                    "SELECT record FROM sessions WHERE tenant = $1 AND identity = $2 AND id > $3 ORDER BY id LIMIT $4",
                )
                .bind(tenant)
                .bind(identity)
                .bind(after.unwrap_or_default())
                .bind(self::limit(limit))
            };
            let rows =
                self.fetch_all(|| format!("cannot list the sessions of {tenant} in {}", self.url), query).await?;
            records(&rows, table::SESSIONS)
        })
    }

    fn session_count<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT count(*) FROM sessions WHERE tenant = $1").bind(tenant);
            let rows =
                self.fetch_all(|| format!("cannot count the sessions of {tenant} in {}", self.url), query).await?;
            let count: i64 = rows.first().map_or(Ok(0), |row| column(row, 0, table::SESSIONS))?;
            Ok(u64::try_from(count).unwrap_or(0))
        })
    }

    fn unfinished(&self) -> BoxFuture<'_, StoreResult<Vec<SessionKey>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query(
                    "SELECT k.tenant, k.session FROM active_sessions a JOIN session_ids k ON k.sid = a.sid \
                 UNION SELECT k.tenant, k.session FROM (SELECT DISTINCT sid FROM inbox) i JOIN session_ids k ON k.sid = i.sid \
                 ORDER BY 1, 2",
                )
            };
            let rows = self.fetch_all(|| format!("cannot list the unfinished sessions in {}", self.url), query).await?;
            rows.iter()
                .map(|row| {
                    Ok(SessionKey::new(
                        column::<String>(row, 0, table::SESSIONS)?,
                        column::<String>(row, 1, table::SESSIONS)?,
                    ))
                })
                .collect()
        })
    }

    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<LoadedSession>>> {
        Box::pin(async move {
            self.open_check()?;
            let failed = |err: sqlx::Error| StoreError::io(format!("cannot load session {key} from {}", self.url), err);
            let read = async || {
                let mut tx = self.pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY").await?;
                let rows = sqlx::query(LOAD).bind(&key.tenant).bind(&key.session).fetch_all(&mut *tx).await?;
                tx.commit().await?;
                Ok::<_, sqlx::Error>(rows)
            };
            // As `fetch_all`: dead connections are dropped, one by one.
            let mut tries = self.pool.size() + 1;
            let rows = loop {
                match read().await {
                    Err(err) if broken(&err) && tries > 0 => tries -= 1,
                    rows => break rows.map_err(failed)?,
                }
            };
            let mut record = None;
            let (mut messages, mut calls, mut steps) = (Vec::new(), Vec::new(), Vec::new());
            for row in &rows {
                match column::<i32>(row, 0, table::SESSIONS)? {
                    0 => record = Some(self::record::<SessionRecord>(row, 3, table::SESSIONS)?),
                    1 => messages.push((seq(row, 1, table::MESSAGES)?, self::record(row, 3, table::MESSAGES)?)),
                    2 => calls.push(self::record(row, 3, table::CALLS)?),
                    _ => steps.push((seq(row, 1, table::STEPS)?, self::record(row, 3, table::STEPS)?)),
                }
            }
            Ok(record.map(|record| LoadedSession { record, messages, calls, steps }))
        })
    }

    fn messages<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, MessageRecord)>>> {
        Box::pin(async move {
            let query = || sqlx::query(MESSAGES).bind(&key.tenant).bind(&key.session);
            let rows = self.fetch_all(|| format!("cannot read the messages of {key} from {}", self.url), query).await?;
            numbered(&rows, table::MESSAGES)
        })
    }

    fn steps<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        Box::pin(async move {
            let Ok(from) = i64::try_from(from) else {
                self.open_check()?;
                return Ok(Vec::new());
            };
            let query = || sqlx::query(STEPS).bind(&key.tenant).bind(&key.session).bind(from).bind(self::limit(limit));
            let rows = self.fetch_all(|| format!("cannot read the steps of {key} from {}", self.url), query).await?;
            numbered(&rows, table::STEPS)
        })
    }

    /// Sizes come from `octet_length`, which reads a stored value's
    /// length without reading the value: steps past the page are neither
    /// sent nor decoded.
    fn steps_page<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        Box::pin(async move {
            let Ok(from) = i64::try_from(from) else {
                self.open_check()?;
                return Ok(Vec::new());
            };
            let query = || {
                sqlx::query(STEPS_PAGE)
                    .bind(&key.tenant)
                    .bind(&key.session)
                    .bind(from)
                    .bind(self::limit(limit))
                    .bind(self::limit(max_bytes))
            };
            let rows = self.fetch_all(|| format!("cannot read the steps of {key} from {}", self.url), query).await?;
            numbered(&rows, table::STEPS)
        })
    }

    fn calls_named<'a>(
        &'a self,
        key: &'a SessionKey,
        ids: &'a [String],
    ) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        Box::pin(async move {
            if ids.is_empty() {
                self.open_check()?;
                return Ok(Vec::new());
            }
            let query = || sqlx::query(CALLS_NAMED).bind(&key.tenant).bind(&key.session).bind(ids);
            let rows = self.fetch_all(|| format!("cannot read the calls of {key} from {}", self.url), query).await?;
            records(&rows, table::CALLS)
        })
    }

    fn calls<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        Box::pin(async move {
            let query = || sqlx::query(CALLS).bind(&key.tenant).bind(&key.session);
            let rows = self.fetch_all(|| format!("cannot read the calls of {key} from {}", self.url), query).await?;
            records(&rows, table::CALLS)
        })
    }

    fn agents<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<AgentRecord>>> {
        Box::pin(async move {
            let query = || match tenant {
                Some(tenant) => {
                    sqlx::query("SELECT record FROM agents WHERE tenant = $1 ORDER BY agent_id").bind(tenant)
                }
                None => sqlx::query("SELECT record FROM agents ORDER BY tenant, agent_id"),
            };
            let rows = self.fetch_all(|| format!("cannot list the agents in {}", self.url), query).await?;
            records(&rows, table::AGENTS)
        })
    }

    fn agent<'a>(&'a self, tenant: &'a str, agent_id: &'a str) -> BoxFuture<'a, StoreResult<Option<AgentRecord>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query("SELECT record FROM agents WHERE tenant = $1 AND agent_id = $2").bind(tenant).bind(agent_id)
            };
            let row = self
                .fetch_optional(|| format!("cannot read agent {agent_id} of {tenant} from {}", self.url), query)
                .await?;
            row.map(|row| record(&row, 0, table::AGENTS)).transpose()
        })
    }

    fn decision_counts<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, StoreResult<std::collections::BTreeMap<String, u64>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query("SELECT version, decisions FROM decisions WHERE tenant = $1 AND agent_id = $2")
                    .bind(tenant)
                    .bind(agent_id)
            };
            let rows = self
                .fetch_all(|| format!("cannot read the decision counts of {tenant}/{agent_id} in {}", self.url), query)
                .await?;
            rows.iter()
                .map(|row| {
                    let version: String = column(row, 0, table::DECISIONS)?;
                    let decisions: i64 = column(row, 1, table::DECISIONS)?;
                    Ok((version, u64::try_from(decisions).unwrap_or(0)))
                })
                .collect()
        })
    }

    fn keys(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT record FROM api_keys ORDER BY tenant, hash");
            let rows = self.fetch_all(|| format!("cannot list the API keys in {}", self.url), query).await?;
            records(&rows, table::KEYS)
        })
    }

    fn tenants(&self) -> BoxFuture<'_, StoreResult<Vec<TenantRecord>>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT record FROM tenants ORDER BY tenant");
            let rows = self.fetch_all(|| format!("cannot list the tenants in {}", self.url), query).await?;
            records(&rows, table::TENANTS)
        })
    }

    fn mcp_servers(&self) -> BoxFuture<'_, StoreResult<Vec<McpServerRecord>>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT record FROM mcp_servers ORDER BY tenant, name");
            let rows = self.fetch_all(|| format!("cannot list the MCP servers in {}", self.url), query).await?;
            records(&rows, table::MCP_SERVERS)
        })
    }

    fn events<'a>(
        &'a self,
        key: &'a SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, EventRecord)>>> {
        Box::pin(async move {
            // No stored event is numbered above i64::MAX.
            let after = match after.map(i64::try_from) {
                None => -1,
                Some(Ok(after)) => after,
                Some(Err(_)) => {
                    self.open_check()?;
                    return Ok(Vec::new());
                }
            };
            if limit == 0 {
                self.open_check()?;
                return Ok(Vec::new());
            }
            let query = || {
                sqlx::query(
                "SELECT seq, record FROM events WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) \
                 AND seq > $3 ORDER BY seq LIMIT $4",
            )
            .bind(&key.tenant)
            .bind(&key.session)
            .bind(after)
            .bind(self::limit(limit))
            };
            let rows = self.fetch_all(|| format!("cannot read the events of {key} from {}", self.url), query).await?;
            numbered(&rows, table::EVENTS)
        })
    }

    fn turn<'a>(&'a self, key: &'a SessionKey, turn_id: &'a str) -> BoxFuture<'a, StoreResult<Option<TurnRecord>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query(
                    "SELECT record FROM turns \
                 WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) AND turn_id = $3",
                )
                .bind(&key.tenant)
                .bind(&key.session)
                .bind(turn_id)
            };
            let row =
                self.fetch_optional(|| format!("cannot read turn {turn_id} of {key} from {}", self.url), query).await?;
            row.map(|row| record(&row, 0, table::TURNS)).transpose()
        })
    }

    fn inbox<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, InboxItem)>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query(
                "SELECT seq, item FROM inbox WHERE sid = (SELECT sid FROM session_ids WHERE tenant = $1 AND session = $2) \
                 ORDER BY seq",
            )
                .bind(&key.tenant)
                .bind(&key.session)
            };
            let rows = self.fetch_all(|| format!("cannot read the inbox of {key} from {}", self.url), query).await?;
            numbered(&rows, table::INBOX)
        })
    }

    fn reply<'a>(&'a self, id: &'a str) -> BoxFuture<'a, StoreResult<Option<serde_json::Value>>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT reply FROM replies WHERE id = $1").bind(id);
            let row = self.fetch_optional(|| format!("cannot read reply {id} from {}", self.url), query).await?;
            row.map(|row| record(&row, 0, table::REPLIES)).transpose()
        })
    }

    fn shared(&self) -> Option<&dyn Shared> {
        Some(self)
    }
}

impl StoreAdmin for PgStore {
    /// Counted by this process since it opened the store: batches written,
    /// and transactions that wrote them (each one durable commit).
    fn stats(&self) -> StoreResult<StoreStats> {
        self.open_check()?;
        Ok(StoreStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            commits: self.counters.commits.load(Ordering::Relaxed),
        })
    }

    /// The bytes of the keys and values stored, summed with `octet_length`
    /// over every table of records (not component blobs, leases or nodes,
    /// and not PostgreSQL's own overhead: pages, tuple headers, indexes,
    /// dead rows). Reads every row.
    fn stored_bytes(&self) -> BoxFuture<'_, StoreResult<u64>> {
        Box::pin(async move {
            let query = || {
                sqlx::query(
                    "SELECT (\
                 (SELECT coalesce(sum(16 + octet_length(tenant) + octet_length(id) + octet_length(record)), 0) FROM sessions) + \
                 (SELECT coalesce(sum(8), 0) FROM active_sessions) + \
                 (SELECT coalesce(sum(8 + octet_length(tenant) + octet_length(session)), 0) FROM session_ids) + \
                 (SELECT coalesce(sum(16 + octet_length(record)), 0) FROM messages) + \
                 (SELECT coalesce(sum(16 + octet_length(record)), 0) FROM steps) + \
                 (SELECT coalesce(sum(16 + octet_length(record)), 0) FROM events) + \
                 (SELECT coalesce(sum(8 + octet_length(call_id) + octet_length(record)), 0) FROM calls) + \
                 (SELECT coalesce(sum(8 + octet_length(turn_id) + octet_length(record)), 0) FROM turns) + \
                 (SELECT coalesce(sum(16 + octet_length(item)), 0) FROM inbox) + \
                 (SELECT coalesce(sum(octet_length(tenant) + octet_length(agent_id) + octet_length(record)), 0) FROM agents) + \
                 (SELECT coalesce(sum(octet_length(tenant) + octet_length(hash) + octet_length(record)), 0) FROM api_keys) + \
                 (SELECT coalesce(sum(octet_length(tenant) + octet_length(record)), 0) FROM tenants) + \
                 (SELECT coalesce(sum(octet_length(id) + octet_length(reply)), 0) FROM replies))::int8",
                )
            };
            let rows = self.fetch_all(|| format!("cannot measure the store in {}", self.url), query).await?;
            let bytes: i64 = rows.first().map_or(Ok(0), |row| column(row, 0, table::SESSIONS))?;
            Ok(u64::try_from(bytes).unwrap_or(0))
        })
    }
}

impl Shared for PgStore {
    fn node(&self) -> &str {
        &self.node
    }

    /// An upsert of the lease row that takes a new token unless a live
    /// node other than this one holds it; when it does not, a read of who
    /// does (a second statement, which sees what a concurrent claim the
    /// upsert waited for committed).
    fn claim<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Claim>> {
        Box::pin(async move {
            let (tenant, session) = encode::session_key(key)?;
            let op = || format!("cannot claim session {key} in {}", self.url);
            // The holder may die or release between the two statements:
            // then the claim is tried again.
            for _ in 0..3 {
                let query = || {
                    sqlx::query(concat!(
                        "INSERT INTO leases AS l (tenant, session, node, token) VALUES ($1, $2, $3, nextval('lease_tokens')) \
                     ON CONFLICT (tenant, session) DO UPDATE SET node = EXCLUDED.node, token = EXCLUDED.token \
                     WHERE l.node IS NULL OR l.node = EXCLUDED.node \
                        OR NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = l.node AND ",
                        live_node!(),
                        ") RETURNING token"
                    ))
                .bind(&tenant)
                .bind(&session)
                .bind(&self.node)
                };
                if let Some(row) = self.fetch_optional(op, query).await? {
                    let token: i64 = column(&row, 0, table::LEASES)?;
                    let token = u64::try_from(token)
                        .map_err(|_| StoreError::Corrupt { table: table::LEASES, message: format!("token {token}") })?;
                    return Ok(Claim::Granted(Lease { token }));
                }
                let query = || {
                    sqlx::query(concat!(
                        "SELECT l.node FROM leases l JOIN nodes n ON n.name = l.node AND ",
                        live_node!(),
                        " WHERE l.tenant = $1 AND l.session = $2 AND l.node <> $3"
                    ))
                    .bind(&tenant)
                    .bind(&session)
                    .bind(&self.node)
                };
                if let Some(row) = self.fetch_optional(op, query).await? {
                    return Ok(Claim::HeldBy { node: column(&row, 0, table::LEASES)? });
                }
            }
            Err(StoreError::io(op(), "the lease kept changing hands; try again"))
        })
    }

    fn release<'a>(&'a self, key: &'a SessionKey, token: u64) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let Ok(token) = i64::try_from(token) else {
                self.open_check()?;
                return Ok(());
            };
            let query = || {
                sqlx::query("UPDATE leases SET node = NULL WHERE tenant = $1 AND session = $2 AND token = $3")
                    .bind(&key.tenant)
                    .bind(&key.session)
                    .bind(token)
            };
            self.fetch_all(|| format!("cannot release session {key} in {}", self.url), query).await?;
            Ok(())
        })
    }

    /// Sessions with work left (status not idle, or inbox items) whose
    /// lease row is missing or whose holder is not live (`crashed`), and
    /// sessions with inbox items released or held by this node (not
    /// `crashed`); by key.
    fn orphans(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Orphan>>> {
        Box::pin(async move {
            if limit == 0 {
                self.open_check()?;
                return Ok(Vec::new());
            }
            let query = || {
                sqlx::query(concat!(
                    "WITH mail AS (SELECT k.tenant, k.session FROM (SELECT DISTINCT sid FROM inbox) i \
                   JOIN session_ids k ON k.sid = i.sid), \
                 unfinished AS (SELECT k.tenant, k.session FROM active_sessions a JOIN session_ids k ON k.sid = a.sid \
                   UNION SELECT * FROM mail) \
                 SELECT u.tenant, u.session, l.tenant IS NULL OR (l.node IS NOT NULL AND l.node <> $2) AS crashed \
                 FROM unfinished u LEFT JOIN leases l ON l.tenant = u.tenant AND l.session = u.session \
                 WHERE l.tenant IS NULL \
                    OR (l.node IS NOT NULL AND l.node <> $2 AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.name = l.node AND ",
                    live_node!(),
                    ")) OR ((l.node IS NULL OR l.node = $2) \
                        AND EXISTS (SELECT 1 FROM mail m WHERE m.tenant = u.tenant AND m.session = u.session)) \
                 ORDER BY u.tenant, u.session LIMIT $1"
                ))
                .bind(self::limit(limit))
                .bind(&self.node)
            };
            let rows = self.fetch_all(|| format!("cannot look for orphaned sessions in {}", self.url), query).await?;
            rows.iter()
                .map(|row| {
                    let key = SessionKey::new(
                        column::<String>(row, 0, table::LEASES)?,
                        column::<String>(row, 1, table::LEASES)?,
                    );
                    Ok(Orphan { key, crashed: column(row, 2, table::LEASES)? })
                })
                .collect()
        })
    }

    fn put_blob<'a>(&'a self, digest: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            encode::text(digest, "a component digest")?;
            let query = || {
                sqlx::query(
                    "INSERT INTO blobs (digest, bytes) VALUES ($1, $2) \
                     ON CONFLICT (digest) DO UPDATE SET stored = now()",
                )
                .bind(digest)
                .bind(bytes)
            };
            self.fetch_all(|| format!("cannot store component {digest} in {}", self.url), query).await?;
            Ok(())
        })
    }

    fn blob<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, StoreResult<Option<Vec<u8>>>> {
        Box::pin(async move {
            let query = || sqlx::query("SELECT bytes FROM blobs WHERE digest = $1").bind(digest);
            let row =
                self.fetch_optional(|| format!("cannot read component {digest} from {}", self.url), query).await?;
            row.map(|row| column::<Vec<u8>>(&row, 0, table::BLOBS)).transpose()
        })
    }

    fn stale_blobs(&self, age: Duration) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        Box::pin(async move {
            let query = || {
                sqlx::query(
                    "SELECT digest FROM blobs WHERE digest LIKE 'sha256:%' \
                     AND stored < now() - make_interval(secs => $1) ORDER BY digest",
                )
                .bind(age.as_secs_f64())
            };
            let rows = self.fetch_all(|| format!("cannot list the components in {}", self.url), query).await?;
            rows.iter().map(|row| column::<String>(row, 0, table::BLOBS)).collect()
        })
    }

    fn delete_blob<'a>(&'a self, digest: &'a str, age: Duration) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(async move {
            // One statement: a blob stored again meanwhile is newer than
            // `age` by the time the row is deleted, and is kept.
            let query = || {
                sqlx::query(
                    "DELETE FROM blobs WHERE digest = $1 AND stored < now() - make_interval(secs => $2) \
                     RETURNING 1",
                )
                .bind(digest)
                .bind(age.as_secs_f64())
            };
            let rows = self.fetch_all(|| format!("cannot delete component {digest} from {}", self.url), query).await?;
            Ok(!rows.is_empty())
        })
    }

    fn listen(&self) -> broadcast::Receiver<Noticed> {
        self.notices.subscribe()
    }

    fn live_nodes(&self) -> BoxFuture<'_, StoreResult<Vec<String>>> {
        Box::pin(async move {
            let query = || sqlx::query(concat!("SELECT n.name FROM nodes n WHERE ", live_node!(), " ORDER BY n.name"));
            let rows = self.fetch_all(|| format!("cannot list the live nodes in {}", self.url), query).await?;
            rows.iter().map(|row| column::<String>(row, 0, table::NODES)).collect()
        })
    }

    fn settings(&self) -> SharedSettings {
        self.settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgresql://h/db?user=u&password=x&sslmode=disable"),
            "postgresql://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(redact("postgres:///db?host=/run/postgresql"), "postgres:///db?host=/run/postgresql");
        assert_eq!(redact("not a url"), "not a url");
    }
}
