//! This node in the database: its name, its heartbeat, the lock that
//! says it is alive, and the housekeeping the heartbeat task does on the
//! side.
//!
//! # Liveness
//!
//! A node is live while both hold:
//!
//! - its heartbeat (`nodes.expires`, renewed every
//!   [`SharedSettings::renew`]) has not expired, by the database's clock;
//! - its heartbeat's connection holds its advisory lock (`(LOCK_CLASS,
//!   nodes.lock_key)`, session-level, taken when the node registers and
//!   whenever that connection is made anew, with a new key each time).
//!
//! The lock is what makes a dead node's sessions free at once: when a
//! node's process dies, the kernel closes its connections and PostgreSQL
//! ends their backends at once, releasing the lock; others test it with
//! `pg_try_advisory_xact_lock_shared`, which succeeds only when no
//! connection holds it. A node paused (SIGSTOP) or cut off by the network
//! keeps its connection, and its lock, until PostgreSQL notices the
//! connection is gone (TCP keepalive): for those the heartbeat's expiry
//! decides, and fencing keeps the node from writing once others have
//! claimed its sessions.
//!
//! A lock taken before the database server last started (`nodes.locked <
//! pg_postmaster_start_time()`) was lost to the restart, not to the node's
//! death: until the node takes a new one, its heartbeat alone decides, so
//! a restart of PostgreSQL does not make every node look dead at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection as _, Row as _};
use subs_store::StoreError;
use subs_store::shared::SharedSettings;
use tokio::sync::watch;

use crate::notice::stopped;

/// The longest node name taken.
pub const MAX_NODE_NAME: usize = 128;

/// How often the heartbeat task deletes what nobody will read again.
const HOUSEKEEPING: Duration = Duration::from_secs(60);

/// The first of the two keys of every node's advisory lock (`subs` in
/// ASCII): the second is the node's `lock_key`. Two-key advisory locks
/// never meet the one-key locks others take (sqlx's migration lock).
pub(crate) const LOCK_CLASS: i32 = 0x7375_6273;

/// How soon a failed renewal is tried again, at first: a node whose
/// heartbeat's connection was cut counts as dead (its lock is gone) until
/// it has a new one, so it reconnects at once rather than a period later.
const RETRY: Duration = Duration::from_millis(100);

/// A name for this process's node, unique per process and per store:
/// `host-pid-random`.
pub fn generated_name() -> String {
    use std::hash::{BuildHasher as _, RandomState};
    static OPENED: AtomicU64 = AtomicU64::new(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| {
            host.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.')).take(64).collect()
        })
        .filter(|host: &String| !host.is_empty())
        .unwrap_or_else(|| "node".to_owned());
    // RandomState's keys are random per process (and differ per call).
    let random = RandomState::new().hash_one((OPENED.fetch_add(1, Ordering::Relaxed), std::time::SystemTime::now()));
    format!("{host}-{}-{:08x}", std::process::id(), random as u32)
}

/// Why `name` cannot name a node, if it cannot.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NODE_NAME || name.chars().any(char::is_control) {
        return Err(format!("the node name {name:?} must be 1 to {MAX_NODE_NAME} bytes without control characters"));
    }
    Ok(())
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

/// Takes a new key for this node's lock and the lock itself, on `conn`
/// (the heartbeat's connection), which holds it until it ends.
async fn lock(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    let key: i32 = sqlx::query_scalar("SELECT nextval('node_locks')::int4").fetch_one(&mut *conn).await?;
    // Nobody else takes a key handed out by the sequence: this never waits.
    sqlx::query("SELECT pg_advisory_lock($1, $2)").bind(LOCK_CLASS).bind(key).execute(&mut *conn).await?;
    Ok(key)
}

/// Registers `node` with a heartbeat good for `settings.lease`, and its
/// lock on `conn`, the heartbeat's connection.
///
/// A live node of the same name is an error: two processes would share
/// leases. A dead one is this node's previous process: the leases it still
/// holds are marked as held by a dead node (an empty name), so they count
/// as crashed and other nodes may take them, rather than as held by this
/// new process, which knows nothing of them.
pub(crate) async fn register(
    conn: &mut PgConnection,
    node: &str,
    settings: &SharedSettings,
    url: &str,
) -> Result<i32, StoreError> {
    let failed = |err: sqlx::Error| StoreError::io(format!("cannot register node {node:?} in {url}"), err);
    // Outside the transaction: a session-level lock outlives it either way.
    let key = lock(conn).await.map_err(failed)?;
    let mut tx = conn.begin().await.map_err(failed)?;
    let registered = sqlx::query(concat!(
        "INSERT INTO nodes (name, expires, lock_key, locked) VALUES ($1, now() + make_interval(secs => $2), $3, now()) \
         ON CONFLICT (name) DO UPDATE SET expires = EXCLUDED.expires, lock_key = EXCLUDED.lock_key, \
         locked = EXCLUDED.locked WHERE NOT (SELECT ",
        live_node!(),
        " FROM nodes n WHERE n.name = $1) RETURNING name"
    ))
    .bind(node)
    .bind(seconds(settings.lease))
    .bind(key)
    .fetch_optional(&mut *tx)
    .await
    .map_err(failed)?;
    if registered.is_none() {
        return Err(StoreError::io(
            format!("cannot register node {node:?} in {url}"),
            "a live node has that name (its heartbeat has not expired): node names must be unique",
        ));
    }
    sqlx::query("UPDATE leases SET node = '' WHERE node = $1").bind(node).execute(&mut *tx).await.map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    Ok(key)
}

/// What the heartbeat task needs.
pub(crate) struct Heartbeat {
    pub(crate) options: PgConnectOptions,
    pub(crate) conn: Option<PgConnection>,
    /// The key of the node's lock, while `conn` holds it (made anew, it
    /// does not yet).
    pub(crate) key: Option<i32>,
    pub(crate) node: String,
    pub(crate) settings: SharedSettings,
    /// Tests stop the heartbeat with this, to watch leases lapse.
    pub(crate) paused: Arc<AtomicBool>,
}

/// Renews the node's heartbeat every `renew` until `stop`, on a
/// connection of its own (a busy pool never delays it), which holds the
/// node's lock; deletes replies nobody read within an hour, and nodes dead
/// for a day. A failed renewal is tried again on a new connection (with a
/// new lock) after [`RETRY`], then twice as long each time, up to a period.
/// When stopped, deletes the node's row: its leases then count as held by
/// a dead node, and other nodes take its sessions at once instead of after
/// the lease.
pub(crate) async fn run(mut heartbeat: Heartbeat, mut stop: watch::Receiver<bool>) {
    let period = heartbeat.settings.renew;
    // The node was registered a moment ago.
    let mut wait = period;
    // The first renewal also does the housekeeping, then once a period.
    let mut housekept: Option<Instant> = None;
    // Failures in a row: the first is told at `warn`, the rest at `debug`
    // (the store's outage is told by whoever needs the store).
    let mut failures = 0u32;
    loop {
        // The heartbeat's period (shorter after a failure): the time
        // between beats is what other nodes read this node's life from.
        tokio::select! {
            () = stopped(&mut stop) => break,
            () = tokio::time::sleep(wait) => {}
        }
        if heartbeat.paused.load(Ordering::Relaxed) {
            wait = period;
            continue;
        }
        // A renewal that takes longer than a period is given up: the next
        // starts on a new connection.
        let renewed = match tokio::time::timeout(period, heartbeat.renew()).await {
            Ok(renewed) => renewed.map_err(|error| error.to_string()),
            Err(_) => Err("timed out".to_owned()),
        };
        match renewed {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(node = heartbeat.node, failures, "the node's heartbeat is renewed again");
                }
                failures = 0;
                wait = period;
            }
            Err(error) => {
                if failures == 0 {
                    tracing::warn!(%error, node = heartbeat.node, "the node's heartbeat failed; retrying");
                } else {
                    tracing::debug!(%error, node = heartbeat.node, failures, "the node's heartbeat failed again");
                }
                failures = failures.saturating_add(1);
                heartbeat.conn = None;
                wait = if failures == 1 { RETRY } else { (wait * 2).min(period) };
                continue;
            }
        }
        if housekept.is_none_or(|at| at.elapsed() >= HOUSEKEEPING) {
            housekept = Some(Instant::now());
            match tokio::time::timeout(heartbeat.settings.renew, heartbeat.housekeeping()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%error, "the store's housekeeping failed"),
                Err(_) => tracing::debug!("the store's housekeeping timed out"),
            }
        }
    }
    let left = tokio::time::timeout(Duration::from_secs(2), heartbeat.leave()).await;
    if !matches!(left, Ok(Ok(()))) {
        tracing::debug!(node = heartbeat.node, "the node could not say it left; its heartbeat will expire");
    }
}

impl Heartbeat {
    async fn connection(&mut self) -> Result<&mut PgConnection, sqlx::Error> {
        if self.conn.is_none() {
            self.key = None;
            self.conn = Some(PgConnection::connect_with(&self.options).await?);
        }
        self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    async fn renew(&mut self) -> Result<(), sqlx::Error> {
        let (node, lease) = (self.node.clone(), seconds(self.settings.lease));
        self.connection().await?;
        let conn = self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)?;
        let Some(key) = self.key else {
            // A new connection: the lock went with the old one.
            let key = lock(conn).await?;
            sqlx::query(
                "INSERT INTO nodes (name, expires, lock_key, locked) VALUES ($1, now() + make_interval(secs => $2), $3, now()) \
                 ON CONFLICT (name) DO UPDATE SET expires = EXCLUDED.expires, lock_key = EXCLUDED.lock_key, \
                 locked = EXCLUDED.locked",
            )
            .bind(node)
            .bind(lease)
            .bind(key)
            .execute(&mut *conn)
            .await?;
            self.key = Some(key);
            return Ok(());
        };
        // An upsert: should the row have been deleted as dead meanwhile,
        // the node is back (its old tokens still fence it where it lost
        // its leases).
        sqlx::query(
            "INSERT INTO nodes (name, expires, lock_key, locked) VALUES ($1, now() + make_interval(secs => $2), $3, now()) \
             ON CONFLICT (name) DO UPDATE SET expires = EXCLUDED.expires",
        )
        .bind(node)
        .bind(lease)
        .bind(key)
        .execute(conn)
        .await?;
        Ok(())
    }

    async fn housekeeping(&mut self) -> Result<(), sqlx::Error> {
        let node = self.node.clone();
        let conn = self.connection().await?;
        let replies =
            sqlx::query("DELETE FROM replies WHERE stored < now() - interval '1 hour'").execute(&mut *conn).await?;
        let nodes = sqlx::query("DELETE FROM nodes WHERE expires < now() - interval '1 day' AND name <> $1")
            .bind(node)
            .execute(&mut *conn)
            .await?;
        tracing::debug!(replies = replies.rows_affected(), nodes = nodes.rows_affected(), "store housekeeping");
        Ok(())
    }

    async fn leave(&mut self) -> Result<(), sqlx::Error> {
        let node = self.node.clone();
        sqlx::query("DELETE FROM nodes WHERE name = $1").bind(node).execute(self.connection().await?).await?;
        if let Some(conn) = self.conn.take() {
            conn.close().await?;
        }
        Ok(())
    }
}

/// Whether PostgreSQL is set to make commits durable; warns if not.
pub(crate) async fn warn_if_not_durable(conn: &mut PgConnection, url: &str) {
    for (setting, durable) in
        [("synchronous_commit", &["on", "remote_write", "remote_apply", "local"][..]), ("fsync", &["on"][..])]
    {
        let value = sqlx::query(&format!("SHOW {setting}")).fetch_one(&mut *conn).await;
        let Ok(value) = value.and_then(|row| row.try_get::<String, _>(0)) else { continue };
        if !durable.contains(&value.as_str()) {
            tracing::warn!(
                setting,
                value,
                url,
                "PostgreSQL is set so that a commit may return before it is durable: a crash may lose commits the \
                 engine acted on"
            );
        }
    }
}
