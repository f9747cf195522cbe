//! This node in the database: its name, its heartbeat, and the
//! housekeeping the heartbeat task does on the side.

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

/// Registers `node` with a heartbeat good for `settings.lease`.
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
) -> Result<(), StoreError> {
    let failed = |err: sqlx::Error| StoreError::io(format!("cannot register node {node:?} in {url}"), err);
    let mut tx = conn.begin().await.map_err(failed)?;
    let registered = sqlx::query(
        "INSERT INTO nodes (name, expires) VALUES ($1, now() + make_interval(secs => $2)) \
         ON CONFLICT (name) DO UPDATE SET expires = EXCLUDED.expires WHERE nodes.expires <= now() RETURNING name",
    )
    .bind(node)
    .bind(seconds(settings.lease))
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
    Ok(())
}

/// What the heartbeat task needs.
pub(crate) struct Heartbeat {
    pub(crate) options: PgConnectOptions,
    pub(crate) conn: Option<PgConnection>,
    pub(crate) node: String,
    pub(crate) settings: SharedSettings,
    /// Tests stop the heartbeat with this, to watch leases lapse.
    pub(crate) paused: Arc<AtomicBool>,
}

/// Renews the node's heartbeat every `renew` until `stop`, on a
/// connection of its own (a busy pool never delays it); deletes replies
/// nobody read within an hour, and nodes dead for a day. When stopped,
/// deletes the node's row: its leases then count as held by a dead node,
/// and other nodes take its sessions at once instead of after the lease.
pub(crate) async fn run(mut heartbeat: Heartbeat, mut stop: watch::Receiver<bool>) {
    let mut ticks = tokio::time::interval(heartbeat.settings.renew);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is now: the node was registered a moment ago.
    ticks.tick().await;
    // The first renewal also does the housekeeping, then once a period.
    let mut housekept: Option<Instant> = None;
    loop {
        tokio::select! {
            () = stopped(&mut stop) => break,
            _ = ticks.tick() => {}
        }
        if heartbeat.paused.load(Ordering::Relaxed) {
            continue;
        }
        // A renewal that takes longer than a period is given up: the next
        // starts on a new connection.
        let renewed = tokio::time::timeout(heartbeat.settings.renew, heartbeat.renew()).await;
        match renewed {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, node = heartbeat.node, "the node's heartbeat failed; retrying");
                heartbeat.conn = None;
            }
            Err(_) => {
                tracing::warn!(node = heartbeat.node, "the node's heartbeat timed out; retrying");
                heartbeat.conn = None;
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
            self.conn = Some(PgConnection::connect_with(&self.options).await?);
        }
        self.conn.as_mut().ok_or(sqlx::Error::PoolClosed)
    }

    async fn renew(&mut self) -> Result<(), sqlx::Error> {
        let (node, lease) = (self.node.clone(), seconds(self.settings.lease));
        // An upsert: should the row have been deleted as dead meanwhile,
        // the node is back (its old tokens still fence it where it lost
        // its leases).
        sqlx::query(
            "INSERT INTO nodes (name, expires) VALUES ($1, now() + make_interval(secs => $2)) \
             ON CONFLICT (name) DO UPDATE SET expires = EXCLUDED.expires",
        )
        .bind(node)
        .bind(lease)
        .execute(self.connection().await?)
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
