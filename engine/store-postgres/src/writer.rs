//! The writer task and group commit: every batch waiting in the queue is
//! written by one statement, which is its own transaction.
//!
//! # One statement per group
//!
//! A round trip to the server costs more than writing a row, and each
//! statement has a fixed cost on the server; so a group is written by one
//! statement (built by `GroupWrites::statement`) whose parts (`WITH`
//! queries) write each table the group touches with the rows of the whole
//! group (`INSERT … SELECT * FROM UNNEST(…) ON
//! CONFLICT … DO UPDATE`, `DELETE … USING UNNEST(…)`) and send the
//! group's notices (`pg_notify`, delivered at commit). A statement outside
//! an explicit transaction is one: it commits, durably, before its answer
//! comes back, or writes nothing.
//!
//! # Fencing
//!
//! The statement first locks the lease rows of the sessions whose batches
//! are fenced (`SELECT … FOR SHARE`) and writes nothing unless every token
//! is still its lease's; it returns the current tokens. When one is stale,
//! its batch is answered [`StoreError::Fenced`] and the statement runs
//! again without it: the other batches of the group commit normally.
//!
//! Why this is race-free against a concurrent `claim`: a claim changes a
//! lease row with `INSERT … ON CONFLICT DO UPDATE`, which takes the row's
//! exclusive lock, and `FOR SHARE` conflicts with it. If the claim
//! committed first, the locking read sees its new token (in READ
//! COMMITTED a locking read that finds a row changed by a concurrent
//! transaction waits for it, then reads the newest version) and the batch
//! is fenced. If the claim comes while the statement holds the share
//! lock, the claim waits until the statement has committed: the batch was
//! written under the old token, before the new one was granted. Either
//! way no batch lands after a newer token was granted. Lease rows are
//! never deleted, so there is no gap a claim could insert into unseen.
//!
//! # Session numbers
//!
//! A session's rows are keyed by its number in `session_ids` (see the
//! schema). The writer keeps the numbers it knows (they never change) and
//! asks for the others, creating them, in a statement of its own before
//! the group's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection, PgRow};
use sqlx::{Connection as _, Executor as _, Row as _};
use subs_store::{StoreError, StoreResult};
use tokio::sync::{mpsc, oneshot};

use crate::encode::{Encoded, NamedTable, Write};
use crate::{Counters, notice};

/// The most batches one transaction takes. Bounds how long the first
/// batch of a group waits for the others, and the statement's size.
pub const MAX_GROUP: usize = 512;

/// Session numbers the writer remembers; beyond, it forgets them all and
/// asks again (a session being worked on is asked for once more).
pub(crate) const KNOWN_SIDS: usize = 1 << 16;

/// A connection idle longer than this is checked before a group is sent
/// on it: a group sent on a connection that turns out dead has an unknown
/// outcome and fails, while a failed check costs nothing.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// A batch waiting for the writer, and who waits for its outcome.
pub(crate) struct Request {
    pub(crate) batch: Encoded,
    pub(crate) answer: oneshot::Sender<StoreResult<()>>,
}

/// The writer's state: its own connection (reads never hold it up, nor it
/// them), made again after a failure.
pub(crate) struct Writer {
    pub(crate) options: PgConnectOptions,
    pub(crate) connect_timeout: Duration,
    pub(crate) conn: Option<PgConnection>,
    pub(crate) used: Instant,
    pub(crate) node: String,
    pub(crate) counters: Arc<Counters>,
    pub(crate) sids: Sids,
    /// [`KNOWN_SIDS`], but in tests.
    pub(crate) known_sids: usize,
}

/// The session numbers the writer knows, by tenant then session id (so a
/// lookup by `&str` allocates nothing). Numbers never change, so what is
/// here stays true; it is forgotten whole past [`KNOWN_SIDS`].
#[derive(Default)]
pub(crate) struct Sids {
    tenants: HashMap<String, HashMap<String, i64>>,
    len: usize,
}

impl Sids {
    fn get(&self, tenant: &str, session: &str) -> Option<i64> {
        self.tenants.get(tenant)?.get(session).copied()
    }

    fn insert(&mut self, tenant: String, session: String, sid: i64) {
        if self.tenants.entry(tenant).or_default().insert(session, sid).is_none() {
            self.len += 1;
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// Commits groups of queued batches until every sender is gone and the
/// queue is drained.
pub(crate) async fn run(mut writer: Writer, mut requests: mpsc::Receiver<Request>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    while requests.recv_many(&mut group, MAX_GROUP).await > 0 {
        writer.commit_group(&mut group).await;
    }
    if let Some(conn) = writer.conn.take() {
        let _ = conn.close().await;
    }
}

/// Settings of the writer's connection. Its statements always apply a list
/// of keys to tables through their primary keys: plans are made once and
/// kept (no planning per group), and made of index lookups whatever the
/// statistics said when they were made (a plan made on a near-empty table
/// would otherwise scan it whole at every group until it is analyzed).
/// For the same reason every lookup by a list of keys is written as a
/// `LATERAL` subquery with `LIMIT 1`, which the planner cannot turn
/// inside out: one index lookup per key, the list outside.
pub(crate) const WRITER_SETTINGS: &str = "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; \
    SET enable_hashjoin = off; SET enable_mergejoin = off";

/// Why a group wrote nothing.
enum Failure {
    /// PostgreSQL refused a statement: nothing was written.
    Refused(sqlx::Error),
    /// The connection failed: whether the group's statement committed is
    /// unknown, so its batches must not be written again.
    Unknown(sqlx::Error),
    /// The group's statement was never sent (no connection, or the
    /// statement numbering new sessions failed): nothing was written.
    NotSent(sqlx::Error),
}

impl Failure {
    fn error(&self, batches: usize) -> StoreError {
        match self {
            Failure::Refused(err) => {
                StoreError::io(format!("cannot write a group of {batches} batches"), err.to_string())
            }
            Failure::Unknown(err) => StoreError::in_doubt(
                format!("the connection failed while writing a group of {batches} batches"),
                err.to_string(),
            ),
            Failure::NotSent(err) => StoreError::io(
                format!("cannot reach the database to write a group of {batches} batches"),
                err.to_string(),
            ),
        }
    }
}

/// Whether PostgreSQL ended the connection rather than refusing the
/// statement: an operator's or a shutdown's termination (class `57`), or
/// a connection exception (class `08`). The server says so in place of
/// the statement's answer, and the connection is gone with it.
pub(crate) fn connection_lost(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.code().is_some_and(|code| code.starts_with("57") || code.starts_with("08")))
}

fn failure(err: sqlx::Error) -> Failure {
    match err {
        // A statement cut short by the connection's end may have committed
        // just before: its outcome is unknown.
        sqlx::Error::Database(_) if connection_lost(&err) => Failure::Unknown(err),
        sqlx::Error::Database(_) => Failure::Refused(err),
        _ => Failure::Unknown(err),
    }
}

/// A failure before the group's statement was sent.
fn not_sent(err: sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Database(_) if !connection_lost(&err) => Failure::Refused(err),
        _ => Failure::NotSent(err),
    }
}

/// How a group writes messages and events, which the engine appends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Appends {
    /// A plain insert, half the work of an upsert (which first searches
    /// the index for the key, then inserts into it); a key written before
    /// fails the statement, which then runs with [`Appends::Upsert`].
    Insert,
    /// An upsert, as every other table's rows.
    Upsert,
}

/// Whether the statement failed on a key written before
/// (`unique_violation`): nothing was written.
fn rewrites(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// Whether PostgreSQL chose the statement as a deadlock or serialization
/// victim: running it again is likely to work.
fn transient(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().is_some_and(|code| code.starts_with("40")))
}

impl Writer {
    /// The connection, made or checked as needed.
    async fn connection(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        if let Some(conn) = &mut self.conn
            && self.used.elapsed() > IDLE_CHECK
            && conn.ping().await.is_err()
        {
            self.conn = None;
        }
        if self.conn.is_none() {
            let connect = PgConnection::connect_with(&self.options);
            let mut conn =
                tokio::time::timeout(self.connect_timeout, connect).await.map_err(|_| sqlx::Error::PoolTimedOut)??;
            conn.execute(WRITER_SETTINGS).await?;
            self.conn = Some(conn);
        }
        self.used = Instant::now();
        // Set just above.
        self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    /// Commits `group` (emptied) and answers each of its waiters.
    async fn commit_group(&mut self, group: &mut Vec<Request>) {
        let batches: Vec<&Encoded> = group.iter().map(|request| &request.batch).collect();
        let outcomes: Vec<StoreResult<()>> = match self.write_retried(&batches).await {
            Ok(outcomes) => outcomes,
            // Maybe one batch's fault: the others are written on their own
            // rather than failed by a neighbour.
            Err(Failure::Refused(_)) if batches.len() > 1 => {
                let mut outcomes = Vec::with_capacity(batches.len());
                for batch in &batches {
                    outcomes.push(match self.write_retried(&[batch]).await {
                        Ok(mut outcome) => outcome.pop().unwrap_or(Ok(())),
                        Err(failure) => Err(failure.error(1)),
                    });
                }
                outcomes
            }
            Err(failure) => {
                let error = failure.error(batches.len());
                batches.iter().map(|_| Err(error.clone())).collect()
            }
        };
        drop(batches);
        for (request, outcome) in group.drain(..).zip(outcomes) {
            // The waiter may have stopped waiting; the batch counts anyway.
            let _ = request.answer.send(outcome);
        }
    }

    /// [`write`](Self::write), once more if PostgreSQL made it a deadlock
    /// or serialization victim.
    async fn write_retried(&mut self, batches: &[&Encoded]) -> Result<Vec<StoreResult<()>>, Failure> {
        match self.write(batches, Appends::Insert).await {
            Err(Failure::Refused(err)) if transient(&err) => {
                tracing::debug!(%err, "writing a group again");
                self.write(batches, Appends::Insert).await
            }
            // A message or event written again (rare: the engine appends
            // them): the group wrote nothing, and is written with upserts.
            Err(Failure::Refused(err)) if rewrites(&err) => self.write(batches, Appends::Upsert).await,
            outcome => outcome,
        }
    }

    /// Writes `batches` as one transaction; each answer is `Ok` or the
    /// batch's [`StoreError::Fenced`] (nothing of it written).
    async fn write(&mut self, batches: &[&Encoded], appends: Appends) -> Result<Vec<StoreResult<()>>, Failure> {
        let outcome = self.try_write(batches, appends).await;
        if let Err(Failure::Unknown(_) | Failure::NotSent(_)) = &outcome {
            self.conn = None;
        }
        outcome
    }

    async fn try_write(&mut self, batches: &[&Encoded], appends: Appends) -> Result<Vec<StoreResult<()>>, Failure> {
        // Batches whose tokens cannot be current are fenced at once.
        let mut fenced: Vec<Option<StoreError>> = batches
            .iter()
            .map(|batch| {
                let fence = batch.fence.as_ref()?;
                i64::try_from(fence.token)
                    .is_err()
                    .then(|| StoreError::Fenced { session: fence.key.clone(), token: fence.token })
            })
            .collect();
        let live = |fenced: &[Option<StoreError>]| -> Vec<&Encoded> {
            batches.iter().zip(fenced).filter(|(_, fenced)| fenced.is_none()).map(|(batch, _)| *batch).collect()
        };
        self.resolve_sids(&live(&fenced)).await?;
        // Each run either writes or fences at least one more batch.
        for _ in 0..=batches.len() {
            let group = live(&fenced);
            if group.is_empty() {
                break;
            }
            let payloads = notice::payloads(&self.node, group.iter().flat_map(|batch| &batch.notices));
            let (sql, arguments) = GroupWrites::collect(&group, &self.sids)?
                .statement(payloads, appends)
                .map_err(|err| Failure::Refused(sqlx::Error::Encode(err)))?;
            let conn = self.connection().await.map_err(not_sent)?;
            let row = sqlx::query_with(&sql, arguments).fetch_one(&mut *conn).await.map_err(failure)?;
            let answer = Answer::read(&row).map_err(failure)?;
            if answer.ok {
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                self.counters.batches.fetch_add(group.len() as u64, Ordering::Relaxed);
                break;
            }
            let mut progress = false;
            for (batch, fenced) in batches.iter().zip(fenced.iter_mut()) {
                let Some(fence) = batch.fence.as_ref().filter(|_| fenced.is_none()) else { continue };
                let current = answer.tokens.get(&(fence.key.tenant.clone(), fence.key.session.clone()));
                if current.is_none_or(|&token| u64::try_from(token).ok() != Some(fence.token)) {
                    *fenced = Some(StoreError::Fenced { session: fence.key.clone(), token: fence.token });
                    progress = true;
                }
            }
            if !progress {
                return Err(Failure::Refused(sqlx::Error::Protocol(
                    "the store refused a group as fenced, but every token it named was current".to_owned(),
                )));
            }
        }
        Ok(fenced.into_iter().map(|fenced| fenced.map_or(Ok(()), Err)).collect())
    }

    /// Learns the numbers of the sessions `batches` write, creating those
    /// that have none.
    async fn resolve_sids(&mut self, batches: &[&Encoded]) -> Result<(), Failure> {
        let needed: BTreeSet<(&str, &str)> =
            batches.iter().flat_map(|batch| &batch.writes).filter_map(Write::session).collect();
        let mut missing: BTreeSet<(&str, &str)> =
            needed.iter().copied().filter(|(tenant, session)| self.sids.get(tenant, session).is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if self.sids.len() + missing.len() > self.known_sids {
            // Forgotten, then asked for again: every number this group
            // needs.
            self.sids = Sids::default();
            missing = needed;
        }
        // A number another node is creating at this moment is not seen by
        // the first try (its insert waits, then does nothing, and the read
        // beside it predates it): the next try reads it.
        for _ in 0..3 {
            let (tenants, sessions): (Vec<&str>, Vec<&str>) = missing.iter().copied().unzip();
            let conn = self.connection().await.map_err(not_sent)?;
            let rows = sqlx::query(SIDS).bind(tenants).bind(sessions).fetch_all(&mut *conn).await.map_err(not_sent)?;
            for row in rows {
                let sid: i64 = row.try_get(0).map_err(not_sent)?;
                let tenant: String = row.try_get(1).map_err(not_sent)?;
                let session: String = row.try_get(2).map_err(not_sent)?;
                self.sids.insert(tenant, session, sid);
            }
            missing.retain(|(tenant, session)| self.sids.get(tenant, session).is_none());
            if missing.is_empty() {
                return Ok(());
            }
        }
        Err(Failure::Refused(sqlx::Error::Protocol(format!("{} sessions were given no number", missing.len()))))
    }
}

/// Gives numbers to the sessions that have none and returns every one
/// asked for (but those another transaction is numbering at this moment).
const SIDS: &str = "WITH k AS (SELECT * FROM UNNEST($1::text[], $2::text[]) AS k(tenant, session)), \
    new AS (INSERT INTO session_ids (tenant, session) SELECT tenant, session FROM k WHERE true \
            ON CONFLICT (tenant, session) DO NOTHING RETURNING sid, tenant, session) \
    SELECT sid, tenant, session FROM new \
    UNION ALL SELECT s.sid, k.tenant, k.session FROM k \
    CROSS JOIN LATERAL (SELECT sid FROM session_ids WHERE tenant = k.tenant AND session = k.session LIMIT 1) s";

/// What the group's statement answered.
struct Answer {
    /// Whether it wrote (every fence held).
    ok: bool,
    /// The current token of each fenced session whose lease is held.
    tokens: HashMap<(String, String), i64>,
}

impl Answer {
    fn read(row: &PgRow) -> Result<Answer, sqlx::Error> {
        let ok: bool = row.try_get(0)?;
        let tenants: Vec<String> = row.try_get(2)?;
        let sessions: Vec<String> = row.try_get(3)?;
        let tokens: Vec<i64> = row.try_get(4)?;
        let tokens = tenants.into_iter().zip(sessions).zip(tokens).collect();
        Ok(Answer { ok, tokens })
    }
}

/// A session's row: its key, `active`, `open_step`, `identity` and record.
type SessionRow<'a> = (&'a str, &'a str, bool, i64, Option<&'a str>, &'a [u8]);

/// Puts (`Some`) and deletes (`None`) by key.
type Rows<K, V> = BTreeMap<K, Option<V>>;

/// The rows a group writes, one per key: ops applied in order, so a later
/// write of a key replaces an earlier one and a delete after a put
/// deletes. Keys are sorted, so two nodes writing the same rows (an agent,
/// a tenant) lock them in the same order and cannot deadlock.
struct GroupWrites<'a> {
    fences: BTreeSet<(&'a str, &'a str, i64)>,
    sessions: BTreeMap<i64, SessionRow<'a>>,
    seq: [BTreeMap<(i64, i64), &'a [u8]>; 3],
    /// Calls and turns, by session number and id.
    by_id: [Rows<(i64, &'a str), &'a [u8]>; 2],
    /// In op order: their numbers are handed out in this order.
    pushes: Vec<(i64, &'a [u8])>,
    inbox_deletes: BTreeSet<(i64, i64)>,
    /// Agents, keys, tenants and replies, by their (one or two) key parts.
    records: [Rows<(&'a str, &'a str), &'a [u8]>; 5],
    /// Decisions to add, by (tenant, agent, version), summed over the
    /// group; `true` when the agent's counts were forgotten earlier in the
    /// group, so the sum replaces the stored count instead of adding to
    /// it.
    counts: BTreeMap<(&'a str, &'a str, &'a str), (i64, bool)>,
    /// Agents whose counts the group forgets.
    forgotten: BTreeSet<(&'a str, &'a str)>,
}

impl<'a> GroupWrites<'a> {
    /// The rows of `batches`, whose sessions all have numbers in `sids`
    /// (a session without one, which `resolve_sids` rules out, is an
    /// error rather than writes lost).
    fn collect(batches: &[&'a Encoded], sids: &Sids) -> Result<Self, Failure> {
        let mut writes = GroupWrites {
            fences: BTreeSet::new(),
            sessions: BTreeMap::new(),
            seq: Default::default(),
            by_id: Default::default(),
            pushes: Vec::new(),
            inbox_deletes: BTreeSet::new(),
            records: Default::default(),
            counts: BTreeMap::new(),
            forgotten: BTreeSet::new(),
        };
        let sid = |tenant: &str, session: &str| {
            sids.get(tenant, session).ok_or_else(|| {
                Failure::Refused(sqlx::Error::Protocol(format!("session {tenant}/{session} has no number")))
            })
        };
        for batch in batches {
            if let Some(fence) = &batch.fence
                && let Ok(token) = i64::try_from(fence.token)
            {
                writes.fences.insert((&fence.key.tenant, &fence.key.session, token));
            }
            for write in &batch.writes {
                match write {
                    Write::Session { tenant, id, active, open_step, identity, record } => {
                        let sid = sid(tenant, id)?;
                        writes.sessions.insert(sid, (tenant, id, *active, *open_step, identity.as_deref(), record));
                    }
                    Write::Seq { table, tenant, session, seq, record } => {
                        writes.seq[*table as usize].insert((sid(tenant, session)?, *seq), record);
                    }
                    Write::Named { table: table @ (NamedTable::Calls | NamedTable::Turns), key, value } => {
                        writes.by_id[*table as usize].insert((sid(&key.0, &key.1)?, &key.2), value.as_deref());
                    }
                    Write::Named { table, key, value } => {
                        let at = match table {
                            NamedTable::Agents => 0,
                            NamedTable::Keys => 1,
                            NamedTable::Tenants => 2,
                            NamedTable::McpServers => 4,
                            _ => 3,
                        };
                        writes.records[at].insert((&key.0, &key.1), value.as_deref());
                    }
                    Write::PushInbox { tenant, session, item } => writes.pushes.push((sid(tenant, session)?, item)),
                    Write::DeleteInbox { tenant, session, seq } => {
                        writes.inbox_deletes.insert((sid(tenant, session)?, *seq));
                    }
                    Write::CountDecisions { tenant, agent, version, decisions } => {
                        let replace = writes.forgotten.contains(&(tenant.as_str(), agent.as_str()));
                        let count = writes.counts.entry((tenant, agent, version)).or_insert((0, replace));
                        count.0 = count.0.saturating_add(*decisions);
                    }
                    Write::ForgetDecisions { tenant, agent } => {
                        // What the group counted before is forgotten too.
                        writes.counts.retain(|(t, a, _), _| !(t == tenant && a == agent));
                        writes.forgotten.insert((tenant, agent));
                    }
                }
            }
        }
        Ok(writes)
    }

    /// The group's statement and its parameters; `payloads` are its
    /// notices. See the [module docs](self): the parts of the statement
    /// are those of the tables the group writes (a statement's fixed cost
    /// grows with its parts, and most groups write a few tables), every
    /// part writing only if `held` (every fence token is current; without
    /// fences there is nothing to hold). Its answer: whether it wrote, how
    /// many payloads it sent, and the current tokens of the fenced
    /// sessions (three arrays read from one materialized `fences`, so in
    /// one order).
    fn statement(self, payloads: Vec<String>, appends: Appends) -> Result<(String, PgArguments), BoxDynError> {
        let GroupWrites { fences, sessions, seq, by_id, pushes, inbox_deletes, records, counts, forgotten } = self;
        let mut sql = Statement::<'a>::default();
        let fenced = !fences.is_empty();
        if fenced {
            let mut tenants = Vec::with_capacity(fences.len());
            let mut ids = Vec::with_capacity(fences.len());
            let mut tokens = Vec::with_capacity(fences.len());
            for (tenant, session, token) in fences {
                tenants.push(tenant);
                ids.push(session);
                tokens.push(token);
            }
            let [t, s, k] = [sql.param(tenants)?, sql.param(ids)?, sql.param(tokens)?];
            // One index lookup per (session, token) asked for, not a
            // comparison of every pair.
            sql.part(format!(
                "fences AS (SELECT l.tenant, l.session, l.token, w.token AS wanted \
                 FROM UNNEST({t}::text[], {s}::text[], {k}::int8[]) AS w(tenant, session, token) \
                 CROSS JOIN LATERAL (SELECT tenant, session, token FROM leases \
                   WHERE tenant = w.tenant AND session = w.session AND node IS NOT NULL LIMIT 1 FOR SHARE) l)"
            ));
            sql.part(format!(
                "held AS (SELECT count(*) FILTER (WHERE token = wanted) = cardinality({k}::int8[]) AS ok FROM fences)"
            ));
        }
        let gate = if fenced { "(SELECT ok FROM held)" } else { "true" };

        if !sessions.is_empty() {
            let n = sessions.len();
            let (mut sids, mut tenants, mut ids) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut active, mut open_steps, mut identities, mut values) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for (sid, (tenant, id, is_active, open_step, identity, record)) in sessions {
                sids.push(sid);
                tenants.push(tenant);
                ids.push(id);
                active.push(is_active);
                open_steps.push(open_step);
                identities.push(identity);
                values.push(record);
            }
            let [a, b, c, d, e, f, g] = [
                sql.param(sids)?,
                sql.param(tenants)?,
                sql.param(ids)?,
                sql.param(open_steps)?,
                sql.param(identities)?,
                sql.param(values)?,
                sql.param(active)?,
            ];
            sql.part(format!(
                "s AS (INSERT INTO sessions (sid, tenant, id, open_step, identity, record) \
                 SELECT * FROM UNNEST({a}::int8[], {b}::text[], {c}::text[], {d}::int8[], {e}::text[], {f}::bytea[]) \
                 WHERE {gate} ON CONFLICT (sid) DO UPDATE \
                 SET open_step = EXCLUDED.open_step, identity = EXCLUDED.identity, record = EXCLUDED.record)"
            ));
            // Whatever the status was, these make `active_sessions` say
            // what it is now.
            sql.part(format!(
                "active_put AS (INSERT INTO active_sessions (sid) \
                 SELECT u.sid FROM UNNEST({a}::int8[], {g}::bool[]) AS u(sid, active) WHERE {gate} AND u.active \
                 ON CONFLICT (sid) DO NOTHING)"
            ));
            sql.part(format!(
                "active_delete AS (DELETE FROM active_sessions WHERE {gate} AND sid = ANY(ARRAY(\
                 SELECT u.sid FROM UNNEST({a}::int8[], {g}::bool[]) AS u(sid, active) WHERE NOT u.active)))"
            ));
        }
        for (table, rows) in ["messages", "steps", "events"].into_iter().zip(seq) {
            if rows.is_empty() {
                continue;
            }
            let (mut sids, mut seqs, mut values) =
                (Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()));
            for ((sid, seq), record) in rows {
                sids.push(sid);
                seqs.push(seq);
                values.push(record);
            }
            let [a, b, c] = [sql.param(sids)?, sql.param(seqs)?, sql.param(values)?];
            let conflict = match (table, appends) {
                ("messages" | "events", Appends::Insert) => "",
                _ => "ON CONFLICT (sid, seq) DO UPDATE SET record = EXCLUDED.record",
            };
            sql.part(format!(
                "{table} AS (INSERT INTO {table} (sid, seq, record) \
                 SELECT * FROM UNNEST({a}::int8[], {b}::int8[], {c}::bytea[]) WHERE {gate} {conflict})"
            ));
        }
        for ((table, id), rows) in [("calls", "call_id"), ("turns", "turn_id")].into_iter().zip(by_id) {
            let (puts, values, deletes) = split(rows);
            if !puts.is_empty() {
                let (sids, ids): (Vec<i64>, Vec<&str>) = puts.into_iter().unzip();
                let [a, b, c] = [sql.param(sids)?, sql.param(ids)?, sql.param(values)?];
                sql.part(format!(
                    "{table}_put AS (INSERT INTO {table} (sid, {id}, record) \
                     SELECT * FROM UNNEST({a}::int8[], {b}::text[], {c}::bytea[]) WHERE {gate} \
                     ON CONFLICT (sid, {id}) DO UPDATE SET record = EXCLUDED.record)"
                ));
            }
            if !deletes.is_empty() {
                let (sids, ids): (Vec<i64>, Vec<&str>) = deletes.into_iter().unzip();
                let [a, b] = [sql.param(sids)?, sql.param(ids)?];
                sql.delete(
                    table,
                    &format!("UNNEST({a}::int8[], {b}::text[]) AS d(sid, id)"),
                    &format!("sid = d.sid AND {id} = d.id"),
                    gate,
                );
            }
        }
        if !pushes.is_empty() {
            let (sids, items): (Vec<i64>, Vec<&[u8]>) = pushes.into_iter().unzip();
            let [a, b] = [sql.param(sids)?, sql.param(items)?];
            // Numbers are handed out in the items' order: PostgreSQL
            // evaluates a volatile function of the select list after its
            // ORDER BY.
            sql.part(format!(
                "inbox_put AS (INSERT INTO inbox (sid, seq, item) \
                 SELECT u.sid, nextval('inbox_seq'), u.item FROM UNNEST({a}::int8[], {b}::bytea[]) \
                 WITH ORDINALITY AS u(sid, item, n) WHERE {gate} ORDER BY u.n)"
            ));
        }
        if !inbox_deletes.is_empty() {
            let (sids, seqs): (Vec<i64>, Vec<i64>) = inbox_deletes.into_iter().unzip();
            let [a, b] = [sql.param(sids)?, sql.param(seqs)?];
            sql.delete(
                "inbox",
                &format!("UNNEST({a}::int8[], {b}::int8[]) AS d(sid, seq)"),
                "sid = d.sid AND seq = d.seq",
                gate,
            );
        }
        let tables = [
            ("agents", Some("agent_id"), "record"),
            ("api_keys", Some("hash"), "record"),
            ("tenants", None, "record"),
            ("replies", None, "reply"),
            ("mcp_servers", Some("name"), "record"),
        ];
        for ((table, second, value), rows) in tables.into_iter().zip(records) {
            let first = if table == "replies" { "id" } else { "tenant" };
            let (puts, values, deletes) = split(rows);
            if !puts.is_empty() {
                let (a_keys, b_keys): (Vec<&str>, Vec<&str>) = puts.into_iter().unzip();
                let a = sql.param(a_keys)?;
                let (columns, unnest, conflict) = match second {
                    Some(second) => {
                        let b = sql.param(b_keys)?;
                        (
                            format!("{first}, {second}"),
                            format!("{a}::text[], {b}::text[]"),
                            format!("{first}, {second}"),
                        )
                    }
                    None => (first.to_owned(), format!("{a}::text[]"), first.to_owned()),
                };
                let v = sql.param(values)?;
                let stored = if table == "replies" { ", stored = now()" } else { "" };
                sql.part(format!(
                    "{table}_put AS (INSERT INTO {table} ({columns}, {value}) \
                     SELECT * FROM UNNEST({unnest}, {v}::bytea[]) WHERE {gate} \
                     ON CONFLICT ({conflict}) DO UPDATE SET {value} = EXCLUDED.{value}{stored})"
                ));
            }
            if !deletes.is_empty() {
                let (a_keys, b_keys): (Vec<&str>, Vec<&str>) = deletes.into_iter().unzip();
                let a = sql.param(a_keys)?;
                match second {
                    Some(second) => {
                        let b = sql.param(b_keys)?;
                        let from = format!("UNNEST({a}::text[], {b}::text[]) AS d(a, b)");
                        sql.delete(table, &from, &format!("{first} = d.a AND {second} = d.b"), gate);
                    }
                    None => sql.delete(table, &format!("UNNEST({a}::text[]) AS d(a)"), &format!("{first} = d.a"), gate),
                }
            }
        }
        if !forgotten.is_empty() {
            // Every count of the agents forgotten, but those the group
            // counts again (which the upsert below replaces): a row is
            // written by one part of the statement only.
            let (tenants, agents): (Vec<&str>, Vec<&str>) = forgotten.iter().copied().unzip();
            let mut kept = (Vec::new(), Vec::new(), Vec::new());
            for ((tenant, agent, version), _) in counts.iter().filter(|(_, (_, replace))| *replace) {
                kept.0.push(*tenant);
                kept.1.push(*agent);
                kept.2.push(*version);
            }
            let [a, b] = [sql.param(tenants)?, sql.param(agents)?];
            let [c, d, e] = [sql.param(kept.0)?, sql.param(kept.1)?, sql.param(kept.2)?];
            sql.part(format!(
                "decisions_forget AS (DELETE FROM decisions d USING UNNEST({a}::text[], {b}::text[]) AS f(tenant, agent) \
                 WHERE {gate} AND d.tenant = f.tenant AND d.agent_id = f.agent AND NOT EXISTS (\
                 SELECT 1 FROM UNNEST({c}::text[], {d}::text[], {e}::text[]) AS k(tenant, agent, version) \
                 WHERE k.tenant = d.tenant AND k.agent = d.agent_id AND k.version = d.version))"
            ));
        }
        // Counts added to the stored ones, and counts of agents forgotten
        // earlier in the group, which replace them: two parts, each
        // writing its own rows.
        for (name, replace, set) in [
            ("decisions_add", false, "LEAST(d.decisions::numeric + EXCLUDED.decisions, 9223372036854775807)::int8"),
            ("decisions_set", true, "EXCLUDED.decisions"),
        ] {
            let rows: Vec<_> = counts.iter().filter(|(_, (_, r))| *r == replace).collect();
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let (mut tenants, mut agents, mut versions, mut added) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for ((tenant, agent, version), (decisions, _)) in rows {
                tenants.push(*tenant);
                agents.push(*agent);
                versions.push(*version);
                added.push(*decisions);
            }
            let [a, b, c, d] = [sql.param(tenants)?, sql.param(agents)?, sql.param(versions)?, sql.param(added)?];
            sql.part(format!(
                "{name} AS (INSERT INTO decisions AS d (tenant, agent_id, version, decisions) \
                 SELECT * FROM UNNEST({a}::text[], {b}::text[], {c}::text[], {d}::int8[]) WHERE {gate} \
                 ON CONFLICT (tenant, agent_id, version) DO UPDATE SET decisions = {set})"
            ));
        }
        let notified = if payloads.is_empty() {
            "0".to_owned()
        } else {
            let [channel, payloads] = [sql.param(notice::NOTICE_CHANNEL)?, sql.param(payloads)?];
            sql.part(format!(
                "n AS (SELECT pg_notify({channel}, p) FROM UNNEST({payloads}::text[]) AS p WHERE {gate})"
            ));
            "(SELECT count(*) FROM n)".to_owned()
        };
        let answer = if fenced {
            format!(
                "SELECT (SELECT ok FROM held), {notified}, ARRAY(SELECT tenant FROM fences), \
                 ARRAY(SELECT session FROM fences), ARRAY(SELECT token FROM fences)"
            )
        } else {
            format!("SELECT true, {notified}, '{{}}'::text[], '{{}}'::text[], '{{}}'::int8[]")
        };
        Ok(sql.finish(&answer))
    }
}

/// A statement being built: its `WITH` parts and their parameters
/// (encoded as they are bound, so they borrow the group's rows only
/// meanwhile).
#[derive(Default)]
struct Statement<'a> {
    parts: Vec<String>,
    arguments: PgArguments,
    count: usize,
    rows: std::marker::PhantomData<&'a ()>,
}

impl<'a> Statement<'a> {
    /// Binds `value` as the next parameter; its placeholder (`$n`).
    fn param<T>(&mut self, value: T) -> Result<String, BoxDynError>
    where
        T: 'a + sqlx::Encode<'a, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
    {
        <PgArguments as sqlx::Arguments<'a>>::add(&mut self.arguments, value)?;
        self.count += 1;
        Ok(format!("${}", self.count))
    }

    fn part(&mut self, part: String) {
        self.parts.push(part);
    }

    /// Deletes the rows of `table` whose keys `from` lists (`d`), where
    /// `matches` (a condition on `table` and `d`): one index lookup per
    /// key, in a `LATERAL` subquery with `LIMIT 1`, which the planner
    /// cannot turn inside out (scanning the table for each key) whatever
    /// the statistics said when it planned.
    fn delete(&mut self, table: &str, from: &str, matches: &str, gate: &str) {
        let name = format!("{table}_delete");
        self.part(format!(
            "{name} AS (DELETE FROM {table} WHERE {gate} AND ctid = ANY(ARRAY(\
             SELECT r.ctid FROM {from} CROSS JOIN LATERAL (SELECT ctid FROM {table} WHERE {matches} LIMIT 1) r)))"
        ));
    }

    fn finish(self, answer: &str) -> (String, PgArguments) {
        let sql =
            if self.parts.is_empty() { answer.to_owned() } else { format!("WITH {} {answer}", self.parts.join(", ")) };
        (sql, self.arguments)
    }
}

/// The keys put (with their values) and the keys deleted.
fn split<K, V>(rows: Rows<K, V>) -> (Vec<K>, Vec<V>, Vec<K>) {
    let (mut puts, mut values, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
    for (key, value) in rows {
        match value {
            Some(value) => {
                puts.push(key);
                values.push(value);
            }
            None => deletes.push(key),
        }
    }
    (puts, values, deletes)
}

impl Write {
    /// The session whose number this write needs, if any.
    pub(crate) fn session(&self) -> Option<(&str, &str)> {
        match self {
            Write::Session { tenant, id, .. } => Some((tenant, id)),
            Write::Seq { tenant, session, .. }
            | Write::PushInbox { tenant, session, .. }
            | Write::DeleteInbox { tenant, session, .. } => Some((tenant, session)),
            Write::Named { table: NamedTable::Calls | NamedTable::Turns, key, .. } => Some((&key.0, &key.1)),
            Write::Named { .. } | Write::CountDecisions { .. } | Write::ForgetDecisions { .. } => None,
        }
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use subs_store::conformance::sample::*;
    use subs_store::{Batch, Op, SessionStatus, Store as _};

    use super::*;
    use crate::testing::TestCluster;
    use crate::{PgOptions, PgStore};

    /// Past its bound the writer forgets every session number and asks
    /// again for all a group needs, known before or not: nothing of a
    /// group is lost to a number forgotten in between.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forgotten_session_numbers_are_asked_for_again() {
        let Some(cluster) = TestCluster::shared() else { return };
        let url = cluster.fresh_database();
        // The store makes the schema; the writer below writes beside it.
        let store = PgStore::open(&url, PgOptions::default()).await.unwrap();
        let options: PgConnectOptions = url.parse().unwrap();
        let (counters, node) = (Arc::new(Counters::default()), "test".to_owned());
        let mut writer = Writer {
            options,
            connect_timeout: Duration::from_secs(10),
            conn: None,
            used: Instant::now(),
            node,
            counters,
            sids: Sids::default(),
            known_sids: 3,
        };
        let encoded = |names: &[&str]| {
            let ops = names.iter().flat_map(|name| {
                [
                    Op::PutSession(Box::new(session(&key(name), SessionStatus::Running))),
                    Op::PutEvent { session: key(name), seq: 0, record: event(0) },
                ]
            });
            crate::encode::encode(Batch::of(ops)).unwrap()
        };
        for names in [&["a", "b"][..], &["a", "c"], &["d", "e", "a"], &["b"]] {
            let batch = encoded(names);
            let outcome = writer.write_retried(&[&batch]).await.unwrap_or_else(|f| panic!("{names:?}: {}", f.error(1)));
            assert!(outcome.iter().all(Result::is_ok), "{names:?}");
            assert!(writer.sids.len() <= 3, "{names:?}: {} numbers kept", writer.sids.len());
        }
        for name in ["a", "b", "c", "d", "e"] {
            assert_eq!(store.events(&key(name), None, 10).await.unwrap(), [(0, event(0))], "{name}");
        }
        store.close().await.unwrap();
    }
}
