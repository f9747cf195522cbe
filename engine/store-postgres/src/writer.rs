//! The writer task and group commit: every batch waiting in the queue
//! goes into one transaction, with one statement per table.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection as _, Row as _};
use subs_store::{StoreError, StoreResult};
use tokio::sync::{mpsc, oneshot};

use crate::encode::{Encoded, NamedTable, SeqTable, Write};
use crate::{Counters, notice};

/// The most batches one transaction takes. Bounds how long the first
/// batch of a group waits for the others, and the statements' size.
pub const MAX_GROUP: usize = 512;

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
    pub(crate) node: String,
    pub(crate) counters: Arc<Counters>,
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

/// Why a transaction committed nothing.
enum Failure {
    /// A statement failed before COMMIT was sent: nothing was written, and
    /// trying again is safe.
    Before(sqlx::Error),
    /// COMMIT failed: whether the transaction committed is unknown, so
    /// its batches must not be written again.
    Commit(sqlx::Error),
}

impl Failure {
    fn error(&self, batches: usize) -> StoreError {
        match self {
            Failure::Before(err) => StoreError::io(format!("cannot write a group of {batches} batches"), clone(err)),
            Failure::Commit(err) => StoreError::io(
                format!("the commit of a group of {batches} batches failed; whether it was written is unknown"),
                clone(err),
            ),
        }
    }
}

/// sqlx's errors are not `Clone`; one error answers many waiters.
fn clone(err: &sqlx::Error) -> String {
    err.to_string()
}

/// Whether `err` says the connection is gone (rather than one statement
/// failing on a sound connection).
fn broke_connection(err: &sqlx::Error) -> bool {
    !matches!(err, sqlx::Error::Database(_))
}

/// Whether a transaction that failed with `err` before its commit is worth
/// running again as it was: the connection broke, or PostgreSQL chose it
/// as a deadlock or serialization victim.
fn worth_retrying(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => db.code().is_some_and(|code| code.starts_with("40")),
        _ => true,
    }
}

impl Writer {
    async fn connection(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        if self.conn.is_none() {
            let connect = PgConnection::connect_with(&self.options);
            let conn =
                tokio::time::timeout(self.connect_timeout, connect).await.map_err(|_| sqlx::Error::PoolTimedOut)??;
            self.conn = Some(conn);
        }
        // Set just above.
        self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    /// Commits `group` (emptied) and answers each of its waiters.
    async fn commit_group(&mut self, group: &mut Vec<Request>) {
        let batches: Vec<&Encoded> = group.iter().map(|request| &request.batch).collect();
        let outcome = self.transaction_retried(&batches).await;
        let outcomes: Vec<StoreResult<()>> = match outcome {
            Ok(fenced) => fenced.into_iter().map(|fenced| fenced.map_or(Ok(()), Err)).collect(),
            // A statement failed: maybe one batch's, so the others are
            // tried on their own rather than failed by a neighbour.
            Err(Failure::Before(_)) if batches.len() > 1 => {
                let mut outcomes = Vec::with_capacity(batches.len());
                for batch in &batches {
                    outcomes.push(match self.transaction_retried(&[batch]).await {
                        Ok(mut fenced) => fenced.pop().flatten().map_or(Ok(()), Err),
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

    /// [`transaction`](Self::transaction), run once more if it failed
    /// before its commit in a way worth retrying.
    async fn transaction_retried(&mut self, batches: &[&Encoded]) -> Result<Vec<Option<StoreError>>, Failure> {
        match self.transaction(batches).await {
            Err(Failure::Before(err)) if worth_retrying(&err) => {
                tracing::debug!(%err, "retrying a group commit");
                self.transaction(batches).await
            }
            outcome => outcome,
        }
    }

    /// Writes `batches` in one transaction. Each answer is the batch's
    /// fencing error, if its lease token was stale (nothing of it is
    /// written then), or `None` when it was written.
    async fn transaction(&mut self, batches: &[&Encoded]) -> Result<Vec<Option<StoreError>>, Failure> {
        let node = self.node.clone();
        let outcome = async {
            let conn = self.connection().await.map_err(Failure::Before)?;
            let mut tx = conn.begin().await.map_err(Failure::Before)?;
            let fenced = check_fences(&mut tx, batches).await.map_err(Failure::Before)?;
            let live: Vec<&Encoded> =
                batches.iter().zip(&fenced).filter(|(_, fenced)| fenced.is_none()).map(|(batch, _)| *batch).collect();
            if !live.is_empty() {
                GroupWrites::collect(&live).execute(&mut tx).await.map_err(Failure::Before)?;
                let payloads = notice::payloads(&node, live.iter().flat_map(|batch| &batch.notices));
                if !payloads.is_empty() {
                    sqlx::query(NOTIFY)
                        .bind(notice::NOTICE_CHANNEL)
                        .bind(payloads)
                        .execute(&mut *tx)
                        .await
                        .map_err(Failure::Before)?;
                }
            }
            tx.commit().await.map_err(Failure::Commit)?;
            if !live.is_empty() {
                self.counters.commits.fetch_add(1, Ordering::Relaxed);
                self.counters.batches.fetch_add(live.len() as u64, Ordering::Relaxed);
            }
            Ok(fenced)
        }
        .await;
        if let Err(Failure::Before(err) | Failure::Commit(err)) = &outcome
            && broke_connection(err)
        {
            self.conn = None;
        }
        outcome
    }
}

/// Sends every payload of a group in one statement; PostgreSQL delivers
/// them when (and only if) the transaction commits.
const NOTIFY: &str = "SELECT pg_notify($1, p) FROM UNNEST($2::text[]) AS p";

/// Locks the lease rows of the fenced sessions for the rest of the
/// transaction and reads their tokens.
///
/// Why this is race-free against a concurrent `claim`: a claim changes a
/// lease row with `INSERT … ON CONFLICT DO UPDATE`, which takes the row's
/// exclusive lock, and `FOR SHARE` conflicts with it. If the claim
/// committed first, this statement sees its new token (in READ COMMITTED a
/// locking read that finds a row changed by a concurrent transaction waits
/// for it, then reads the newest version) and the batch is fenced. If the
/// claim comes while this transaction holds the share lock, the claim
/// waits until this transaction has committed: the batch was written
/// under the old token, before the new one was granted. Either way no
/// batch lands after a newer token was granted. Lease rows are never
/// deleted, so there is no gap a claim could insert into unseen.
const FENCES: &str = "SELECT l.tenant, l.session, l.token FROM leases l \
    JOIN UNNEST($1::text[], $2::text[]) AS f(tenant, session) ON l.tenant = f.tenant AND l.session = f.session \
    WHERE l.node IS NOT NULL FOR SHARE OF l";

async fn check_fences(tx: &mut PgConnection, batches: &[&Encoded]) -> Result<Vec<Option<StoreError>>, sqlx::Error> {
    let fenced: BTreeSet<(&str, &str)> = batches
        .iter()
        .filter_map(|batch| batch.fence.as_ref())
        .map(|fence| (fence.key.tenant.as_str(), fence.key.session.as_str()))
        .collect();
    if fenced.is_empty() {
        return Ok(batches.iter().map(|_| None).collect());
    }
    let (tenants, sessions): (Vec<&str>, Vec<&str>) = fenced.into_iter().unzip();
    let rows = sqlx::query(FENCES).bind(tenants).bind(sessions).fetch_all(&mut *tx).await?;
    let mut tokens = HashMap::with_capacity(rows.len());
    for row in rows {
        let tenant: String = row.try_get(0)?;
        let session: String = row.try_get(1)?;
        let token: i64 = row.try_get(2)?;
        tokens.insert((tenant, session), token);
    }
    Ok(batches
        .iter()
        .map(|batch| {
            let fence = batch.fence.as_ref()?;
            let current = tokens.get(&(fence.key.tenant.clone(), fence.key.session.clone()));
            let holds = current.is_some_and(|&token| u64::try_from(token).is_ok_and(|token| token == fence.token));
            (!holds).then(|| StoreError::Fenced { session: fence.key.clone(), token: fence.token })
        })
        .collect())
}

/// The rows a group writes, one per key: ops applied in order, so a later
/// write of a key replaces an earlier one and a delete after a put
/// deletes. Keys are sorted, so two nodes writing the same rows (an agent,
/// a tenant) lock them in the same order and cannot deadlock.
#[derive(Default)]
struct GroupWrites<'a> {
    sessions: BTreeMap<(&'a str, &'a str), SessionRow<'a>>,
    seq: [BTreeMap<SeqKey<'a>, &'a [u8]>; 3],
    named: [NamedRows<'a>; 6],
    /// In op order: their numbers are handed out in this order.
    pushes: Vec<(&'a str, &'a str, &'a [u8])>,
    inbox_deletes: BTreeSet<(&'a str, &'a str, i64)>,
}

/// A session's `active`, `identity` and record.
type SessionRow<'a> = (bool, Option<&'a str>, &'a [u8]);

/// (tenant, session, seq).
type SeqKey<'a> = (&'a str, &'a str, i64);

/// Puts (`Some`) and deletes of one named table, by key.
type NamedRows<'a> = BTreeMap<(&'a str, &'a str, &'a str), Option<&'a [u8]>>;

const SESSIONS_PUT: &str = "INSERT INTO sessions (tenant, id, active, identity, record) \
    SELECT * FROM UNNEST($1::text[], $2::text[], $3::bool[], $4::text[], $5::bytea[]) \
    ON CONFLICT (tenant, id) DO UPDATE SET active = EXCLUDED.active, identity = EXCLUDED.identity, record = EXCLUDED.record";

/// By [`SeqTable`].
const SEQ_PUT: [&str; 3] = [
    "INSERT INTO messages (tenant, session, seq, record) SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::bytea[]) \
     ON CONFLICT (tenant, session, seq) DO UPDATE SET record = EXCLUDED.record",
    "INSERT INTO steps (tenant, session, seq, record) SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::bytea[]) \
     ON CONFLICT (tenant, session, seq) DO UPDATE SET record = EXCLUDED.record",
    "INSERT INTO events (tenant, session, seq, record) SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::bytea[]) \
     ON CONFLICT (tenant, session, seq) DO UPDATE SET record = EXCLUDED.record",
];

/// By [`NamedTable`]: the put, the delete, and how many key parts the
/// table has.
const NAMED: [(&str, &str, usize); 6] = [
    (
        "INSERT INTO calls (tenant, session, call_id, record) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[]) \
         ON CONFLICT (tenant, session, call_id) DO UPDATE SET record = EXCLUDED.record",
        "DELETE FROM calls t USING UNNEST($1::text[], $2::text[], $3::text[]) AS d(a, b, c) \
         WHERE t.tenant = d.a AND t.session = d.b AND t.call_id = d.c",
        3,
    ),
    (
        "INSERT INTO turns (tenant, session, turn_id, record) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bytea[]) \
         ON CONFLICT (tenant, session, turn_id) DO UPDATE SET record = EXCLUDED.record",
        "DELETE FROM turns t USING UNNEST($1::text[], $2::text[], $3::text[]) AS d(a, b, c) \
         WHERE t.tenant = d.a AND t.session = d.b AND t.turn_id = d.c",
        3,
    ),
    (
        "INSERT INTO agents (tenant, agent_id, record) SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[]) \
         ON CONFLICT (tenant, agent_id) DO UPDATE SET record = EXCLUDED.record",
        "DELETE FROM agents t USING UNNEST($1::text[], $2::text[]) AS d(a, b) WHERE t.tenant = d.a AND t.agent_id = d.b",
        2,
    ),
    (
        "INSERT INTO api_keys (tenant, hash, record) SELECT * FROM UNNEST($1::text[], $2::text[], $3::bytea[]) \
         ON CONFLICT (tenant, hash) DO UPDATE SET record = EXCLUDED.record",
        "DELETE FROM api_keys t USING UNNEST($1::text[], $2::text[]) AS d(a, b) WHERE t.tenant = d.a AND t.hash = d.b",
        2,
    ),
    (
        "INSERT INTO tenants (tenant, record) SELECT * FROM UNNEST($1::text[], $2::bytea[]) \
         ON CONFLICT (tenant) DO UPDATE SET record = EXCLUDED.record",
        "DELETE FROM tenants t USING UNNEST($1::text[]) AS d(a) WHERE t.tenant = d.a",
        1,
    ),
    (
        "INSERT INTO replies (id, reply) SELECT * FROM UNNEST($1::text[], $2::bytea[]) \
         ON CONFLICT (id) DO UPDATE SET reply = EXCLUDED.reply, stored = now()",
        "DELETE FROM replies t USING UNNEST($1::text[]) AS d(a) WHERE t.id = d.a",
        1,
    ),
];

/// Numbers come from `inbox_seq` in the order of the items (PostgreSQL
/// evaluates a volatile function of the select list after its ORDER BY).
const INBOX_PUSH: &str = "INSERT INTO inbox (tenant, session, seq, item) \
    SELECT a, b, nextval('inbox_seq'), c FROM UNNEST($1::text[], $2::text[], $3::bytea[]) WITH ORDINALITY AS u(a, b, c, n) \
    ORDER BY n";

const INBOX_DELETE: &str = "DELETE FROM inbox t USING UNNEST($1::text[], $2::text[], $3::int8[]) AS d(a, b, c) \
    WHERE t.tenant = d.a AND t.session = d.b AND t.seq = d.c";

/// The order the named tables are written in: the session's tables, then
/// the inbox, then the tenant's records.
const SESSION_NAMED: [NamedTable; 2] = [NamedTable::Calls, NamedTable::Turns];
const TENANT_NAMED: [NamedTable; 4] = [NamedTable::Agents, NamedTable::Keys, NamedTable::Tenants, NamedTable::Replies];

impl<'a> GroupWrites<'a> {
    fn collect(batches: &[&'a Encoded]) -> Self {
        let mut writes = GroupWrites::default();
        for write in batches.iter().flat_map(|batch| &batch.writes) {
            match write {
                Write::Session { tenant, id, active, identity, record } => {
                    writes.sessions.insert((tenant, id), (*active, identity.as_deref(), record));
                }
                Write::Seq { table, tenant, session, seq, record } => {
                    writes.seq[*table as usize].insert((tenant, session, *seq), record);
                }
                Write::Named { table, key, value } => {
                    writes.named[*table as usize].insert((&key.0, &key.1, &key.2), value.as_deref());
                }
                Write::PushInbox { tenant, session, item } => writes.pushes.push((tenant, session, item)),
                Write::DeleteInbox { tenant, session, seq } => {
                    writes.inbox_deletes.insert((tenant, session, *seq));
                }
            }
        }
        writes
    }

    async fn execute(self, tx: &mut PgConnection) -> Result<(), sqlx::Error> {
        if !self.sessions.is_empty() {
            let n = self.sessions.len();
            let (mut tenants, mut ids, mut active, mut identities, mut records) = (
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
                Vec::with_capacity(n),
            );
            for ((tenant, id), (is_active, identity, record)) in self.sessions {
                tenants.push(tenant);
                ids.push(id);
                active.push(is_active);
                identities.push(identity);
                records.push(record);
            }
            sqlx::query(SESSIONS_PUT)
                .bind(tenants)
                .bind(ids)
                .bind(active)
                .bind(identities)
                .bind(records)
                .execute(&mut *tx)
                .await?;
        }
        for (table, rows) in [SeqTable::Messages, SeqTable::Steps, SeqTable::Events].into_iter().zip(self.seq) {
            if rows.is_empty() {
                continue;
            }
            let n = rows.len();
            let (mut tenants, mut sessions, mut seqs, mut records) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for ((tenant, session, seq), record) in rows {
                tenants.push(tenant);
                sessions.push(session);
                seqs.push(seq);
                records.push(record);
            }
            sqlx::query(SEQ_PUT[table as usize])
                .bind(tenants)
                .bind(sessions)
                .bind(seqs)
                .bind(records)
                .execute(&mut *tx)
                .await?;
        }
        let mut named = self.named.map(Some);
        for table in SESSION_NAMED {
            write_named(tx, table, named[table as usize].take().unwrap_or_default()).await?;
        }
        if !self.pushes.is_empty() {
            let n = self.pushes.len();
            let (mut tenants, mut sessions, mut items) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for (tenant, session, item) in self.pushes {
                tenants.push(tenant);
                sessions.push(session);
                items.push(item);
            }
            sqlx::query(INBOX_PUSH).bind(tenants).bind(sessions).bind(items).execute(&mut *tx).await?;
        }
        if !self.inbox_deletes.is_empty() {
            let n = self.inbox_deletes.len();
            let (mut tenants, mut sessions, mut seqs) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for (tenant, session, seq) in self.inbox_deletes {
                tenants.push(tenant);
                sessions.push(session);
                seqs.push(seq);
            }
            sqlx::query(INBOX_DELETE).bind(tenants).bind(sessions).bind(seqs).execute(&mut *tx).await?;
        }
        for table in TENANT_NAMED {
            write_named(tx, table, named[table as usize].take().unwrap_or_default()).await?;
        }
        Ok(())
    }
}

/// The puts and deletes of one named table: a statement for each.
async fn write_named(tx: &mut PgConnection, table: NamedTable, rows: NamedRows<'_>) -> Result<(), sqlx::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let (put, delete, parts) = NAMED[table as usize];
    let mut puts: [Vec<&str>; 3] = Default::default();
    let mut values = Vec::new();
    let mut deletes: [Vec<&str>; 3] = Default::default();
    for ((a, b, c), value) in rows {
        let keys = match value {
            Some(value) => {
                values.push(value);
                &mut puts
            }
            None => &mut deletes,
        };
        for (column, part) in keys.iter_mut().zip([a, b, c]).take(parts) {
            column.push(part);
        }
    }
    if !values.is_empty() {
        let mut query = sqlx::query(put);
        for column in puts.into_iter().take(parts) {
            query = query.bind(column);
        }
        query.bind(values).execute(&mut *tx).await?;
    }
    if !deletes[0].is_empty() {
        let mut query = sqlx::query(delete);
        for column in deletes.into_iter().take(parts) {
            query = query.bind(column);
        }
        query.execute(&mut *tx).await?;
    }
    Ok(())
}
