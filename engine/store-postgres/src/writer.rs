//! The writer task and group commit: every batch waiting in the queue is
//! written by one statement, which is its own transaction.
//!
//! # One statement per group
//!
//! A round trip to the server costs more than writing a row, and each
//! statement has a fixed cost on the server; so a group is written by one
//! statement ([`GROUP`]) whose parts (`WITH` queries) write each table
//! with the rows of the whole group (`INSERT … SELECT * FROM UNNEST(…) ON
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

use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow};
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
const KNOWN_SIDS: usize = 1 << 16;

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
    pub(crate) sids: HashMap<(String, String), i64>,
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
}

impl Failure {
    fn error(&self, batches: usize) -> StoreError {
        match self {
            Failure::Refused(err) => {
                StoreError::io(format!("cannot write a group of {batches} batches"), err.to_string())
            }
            Failure::Unknown(err) => StoreError::io(
                format!(
                    "the connection failed while writing a group of {batches} batches; whether it was written is unknown"
                ),
                err.to_string(),
            ),
        }
    }
}

fn failure(err: sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Database(_) => Failure::Refused(err),
        _ => Failure::Unknown(err),
    }
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
        match self.write(batches).await {
            Err(Failure::Refused(err)) if transient(&err) => {
                tracing::debug!(%err, "writing a group again");
                self.write(batches).await
            }
            outcome => outcome,
        }
    }

    /// Writes `batches` as one transaction; each answer is `Ok` or the
    /// batch's [`StoreError::Fenced`] (nothing of it written).
    async fn write(&mut self, batches: &[&Encoded]) -> Result<Vec<StoreResult<()>>, Failure> {
        let outcome = self.try_write(batches).await;
        if let Err(Failure::Unknown(_)) = &outcome {
            self.conn = None;
        }
        outcome
    }

    async fn try_write(&mut self, batches: &[&Encoded]) -> Result<Vec<StoreResult<()>>, Failure> {
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
            let writes = GroupWrites::collect(&group, &self.sids);
            let payloads = notice::payloads(&self.node, group.iter().flat_map(|batch| &batch.notices));
            let conn = self.connection().await.map_err(failure)?;
            let row = writes.query(payloads).fetch_one(&mut *conn).await.map_err(failure)?;
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
        let mut missing: BTreeSet<(&str, &str)> = BTreeSet::new();
        for write in batches.iter().flat_map(|batch| &batch.writes) {
            if let Some(key) = write.session()
                && !self.sids.contains_key(&(key.0.to_owned(), key.1.to_owned()))
            {
                missing.insert(key);
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if self.sids.len() + missing.len() > KNOWN_SIDS {
            self.sids = HashMap::new();
        }
        // A number another node is creating at this moment is not seen by
        // the first try (its insert waits, then does nothing, and the read
        // beside it predates it): the next try reads it.
        for _ in 0..3 {
            let (tenants, sessions): (Vec<&str>, Vec<&str>) = missing.iter().copied().unzip();
            let conn = self.connection().await.map_err(failure)?;
            let rows = sqlx::query(SIDS).bind(tenants).bind(sessions).fetch_all(&mut *conn).await.map_err(failure)?;
            for row in rows {
                let sid: i64 = row.try_get(0).map_err(failure)?;
                let tenant: String = row.try_get(1).map_err(failure)?;
                let session: String = row.try_get(2).map_err(failure)?;
                self.sids.insert((tenant, session), sid);
            }
            missing.retain(|(tenant, session)| !self.sids.contains_key(&((*tenant).to_owned(), (*session).to_owned())));
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

/// The statement that writes a group: see the [module docs](self). Every
/// part writes only if `held` (every fence token is current), and the
/// answer says so, with the fenced sessions' current tokens (three arrays
/// read from one materialized `fences`, so in one order). `fences` finds
/// each (session, token) asked for in the lease table's index: one
/// lookup per fenced batch, not a comparison of every pair.
const GROUP: &str = "\
WITH fences AS (
    SELECT l.tenant, l.session, l.token, w.token AS wanted
    FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS w(tenant, session, token)
    CROSS JOIN LATERAL (
        SELECT tenant, session, token FROM leases
        WHERE tenant = w.tenant AND session = w.session AND node IS NOT NULL LIMIT 1 FOR SHARE
    ) l
), held AS (
    SELECT count(*) FILTER (WHERE token = wanted) = cardinality($3::int8[]) AS ok FROM fences
), s AS (
    INSERT INTO sessions (sid, tenant, id, active, identity, record)
    SELECT * FROM UNNEST($6::int8[], $7::text[], $8::text[], $9::bool[], $10::text[], $11::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid) DO UPDATE SET active = EXCLUDED.active, identity = EXCLUDED.identity, record = EXCLUDED.record
), m AS (
    INSERT INTO messages (sid, seq, record) SELECT * FROM UNNEST($12::int8[], $13::int8[], $14::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid, seq) DO UPDATE SET record = EXCLUDED.record
), st AS (
    INSERT INTO steps (sid, seq, record) SELECT * FROM UNNEST($15::int8[], $16::int8[], $17::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid, seq) DO UPDATE SET record = EXCLUDED.record
), e AS (
    INSERT INTO events (sid, seq, record) SELECT * FROM UNNEST($18::int8[], $19::int8[], $20::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid, seq) DO UPDATE SET record = EXCLUDED.record
), cp AS (
    INSERT INTO calls (sid, call_id, record) SELECT * FROM UNNEST($21::int8[], $22::text[], $23::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid, call_id) DO UPDATE SET record = EXCLUDED.record
), cd AS (
    DELETE FROM calls WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($24::int8[], $25::text[]) AS d(sid, id)
        CROSS JOIN LATERAL (SELECT ctid FROM calls WHERE sid = d.sid AND call_id = d.id LIMIT 1) r))
), tp AS (
    INSERT INTO turns (sid, turn_id, record) SELECT * FROM UNNEST($26::int8[], $27::text[], $28::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (sid, turn_id) DO UPDATE SET record = EXCLUDED.record
), td AS (
    DELETE FROM turns WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($29::int8[], $30::text[]) AS d(sid, id)
        CROSS JOIN LATERAL (SELECT ctid FROM turns WHERE sid = d.sid AND turn_id = d.id LIMIT 1) r))
), ip AS (
    INSERT INTO inbox (sid, seq, item)
    SELECT u.sid, nextval('inbox_seq'), u.item FROM UNNEST($31::int8[], $32::bytea[]) WITH ORDINALITY AS u(sid, item, n)
    WHERE (SELECT ok FROM held) ORDER BY u.n
), idl AS (
    DELETE FROM inbox WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($33::int8[], $34::int8[]) AS d(sid, seq)
        CROSS JOIN LATERAL (SELECT ctid FROM inbox WHERE sid = d.sid AND seq = d.seq LIMIT 1) r))
), ap AS (
    INSERT INTO agents (tenant, agent_id, record) SELECT * FROM UNNEST($35::text[], $36::text[], $37::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (tenant, agent_id) DO UPDATE SET record = EXCLUDED.record
), ad AS (
    DELETE FROM agents WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($38::text[], $39::text[]) AS d(a, b)
        CROSS JOIN LATERAL (SELECT ctid FROM agents WHERE tenant = d.a AND agent_id = d.b LIMIT 1) r))
), kp AS (
    INSERT INTO api_keys (tenant, hash, record) SELECT * FROM UNNEST($40::text[], $41::text[], $42::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (tenant, hash) DO UPDATE SET record = EXCLUDED.record
), kd AS (
    DELETE FROM api_keys WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($43::text[], $44::text[]) AS d(a, b)
        CROSS JOIN LATERAL (SELECT ctid FROM api_keys WHERE tenant = d.a AND hash = d.b LIMIT 1) r))
), tnp AS (
    INSERT INTO tenants (tenant, record) SELECT * FROM UNNEST($45::text[], $46::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (tenant) DO UPDATE SET record = EXCLUDED.record
), tnd AS (
    DELETE FROM tenants WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($47::text[]) AS d(a)
        CROSS JOIN LATERAL (SELECT ctid FROM tenants WHERE tenant = d.a LIMIT 1) r))
), rp AS (
    INSERT INTO replies (id, reply) SELECT * FROM UNNEST($48::text[], $49::bytea[]) WHERE (SELECT ok FROM held)
    ON CONFLICT (id) DO UPDATE SET reply = EXCLUDED.reply, stored = now()
), rd AS (
    DELETE FROM replies WHERE (SELECT ok FROM held) AND ctid = ANY(ARRAY(
        SELECT r.ctid FROM UNNEST($50::text[]) AS d(a)
        CROSS JOIN LATERAL (SELECT ctid FROM replies WHERE id = d.a LIMIT 1) r))
), n AS (
    SELECT pg_notify($4, p) FROM UNNEST($5::text[]) AS p WHERE (SELECT ok FROM held)
)
SELECT (SELECT ok FROM held), (SELECT count(*) FROM n),
    ARRAY(SELECT tenant FROM fences), ARRAY(SELECT session FROM fences), ARRAY(SELECT token FROM fences)";

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

/// A session's row: its number, key, `active`, `identity` and record.
type SessionRow<'a> = (&'a str, &'a str, bool, Option<&'a str>, &'a [u8]);

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
    records: [Rows<(&'a str, &'a str), &'a [u8]>; 4],
}

impl<'a> GroupWrites<'a> {
    /// The rows of `batches`, whose sessions all have numbers in `sids`.
    fn collect(batches: &[&'a Encoded], sids: &HashMap<(String, String), i64>) -> Self {
        let mut writes = GroupWrites {
            fences: BTreeSet::new(),
            sessions: BTreeMap::new(),
            seq: Default::default(),
            by_id: Default::default(),
            pushes: Vec::new(),
            inbox_deletes: BTreeSet::new(),
            records: Default::default(),
        };
        // Resolved before; a number missing would be a bug, and its
        // writes are left out rather than written under another session.
        let sid = |tenant: &str, session: &str| sids.get(&(tenant.to_owned(), session.to_owned())).copied();
        for batch in batches {
            if let Some(fence) = &batch.fence
                && let Ok(token) = i64::try_from(fence.token)
            {
                writes.fences.insert((&fence.key.tenant, &fence.key.session, token));
            }
            for write in &batch.writes {
                match write {
                    Write::Session { tenant, id, active, identity, record } => {
                        if let Some(sid) = sid(tenant, id) {
                            writes.sessions.insert(sid, (tenant, id, *active, identity.as_deref(), record));
                        }
                    }
                    Write::Seq { table, tenant, session, seq, record } => {
                        if let Some(sid) = sid(tenant, session) {
                            writes.seq[*table as usize].insert((sid, *seq), record);
                        }
                    }
                    Write::Named { table: table @ (NamedTable::Calls | NamedTable::Turns), key, value } => {
                        if let Some(sid) = sid(&key.0, &key.1) {
                            writes.by_id[*table as usize].insert((sid, &key.2), value.as_deref());
                        }
                    }
                    Write::Named { table, key, value } => {
                        let at = match table {
                            NamedTable::Agents => 0,
                            NamedTable::Keys => 1,
                            NamedTable::Tenants => 2,
                            _ => 3,
                        };
                        writes.records[at].insert((&key.0, &key.1), value.as_deref());
                    }
                    Write::PushInbox { tenant, session, item } => {
                        if let Some(sid) = sid(tenant, session) {
                            writes.pushes.push((sid, item));
                        }
                    }
                    Write::DeleteInbox { tenant, session, seq } => {
                        if let Some(sid) = sid(tenant, session) {
                            writes.inbox_deletes.insert((sid, *seq));
                        }
                    }
                }
            }
        }
        writes
    }

    /// The group's statement, its parameters bound; `payloads` are its
    /// notices.
    fn query(self, payloads: Vec<String>) -> sqlx::query::Query<'a, sqlx::Postgres, sqlx::postgres::PgArguments> {
        let GroupWrites { fences, sessions, seq, by_id, pushes, inbox_deletes, records } = self;
        let mut tenants = Vec::with_capacity(fences.len());
        let mut ids = Vec::with_capacity(fences.len());
        let mut tokens = Vec::with_capacity(fences.len());
        for (tenant, session, token) in fences {
            tenants.push(tenant);
            ids.push(session);
            tokens.push(token);
        }
        let mut query =
            sqlx::query(GROUP).bind(tenants).bind(ids).bind(tokens).bind(notice::NOTICE_CHANNEL).bind(payloads);

        let n = sessions.len();
        let (mut sids, mut tenants, mut ids) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut active, mut identities, mut values) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for (sid, (tenant, id, is_active, identity, record)) in sessions {
            sids.push(sid);
            tenants.push(tenant);
            ids.push(id);
            active.push(is_active);
            identities.push(identity);
            values.push(record);
        }
        query = query.bind(sids).bind(tenants).bind(ids).bind(active).bind(identities).bind(values);

        // Messages, steps, events: $12 to $20.
        for rows in seq {
            let (mut sids, mut seqs, mut values) =
                (Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()));
            for ((sid, seq), record) in rows {
                sids.push(sid);
                seqs.push(seq);
                values.push(record);
            }
            query = query.bind(sids).bind(seqs).bind(values);
        }
        // Calls, turns: $21 to $30.
        for rows in by_id {
            let (puts, values, deletes) = split(rows);
            let (put_sids, put_ids): (Vec<i64>, Vec<&str>) = puts.into_iter().unzip();
            let (deleted_sids, deleted_ids): (Vec<i64>, Vec<&str>) = deletes.into_iter().unzip();
            query = query.bind(put_sids).bind(put_ids).bind(values).bind(deleted_sids).bind(deleted_ids);
        }
        let (sids, items): (Vec<i64>, Vec<&[u8]>) = pushes.into_iter().unzip();
        let (deleted_sids, deleted_seqs): (Vec<i64>, Vec<i64>) = inbox_deletes.into_iter().unzip();
        query = query.bind(sids).bind(items).bind(deleted_sids).bind(deleted_seqs);
        // Agents and keys (two key parts), tenants and replies (one): $35
        // to $50.
        for (at, rows) in records.into_iter().enumerate() {
            let (puts, values, deletes) = split(rows);
            let (put_a, put_b): (Vec<&str>, Vec<&str>) = puts.into_iter().unzip();
            let (deleted_a, deleted_b): (Vec<&str>, Vec<&str>) = deletes.into_iter().unzip();
            query = if at < 2 {
                query.bind(put_a).bind(put_b).bind(values).bind(deleted_a).bind(deleted_b)
            } else {
                query.bind(put_a).bind(values).bind(deleted_a)
            };
        }
        query
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
            Write::Named { .. } => None,
        }
    }
}
