//! What an engine does when several nodes share its store (see
//! docs/deployment.md): it hears the other nodes' notices, and takes over
//! the sessions no live node acts for.
//!
//! - **Events** committed by another node reach this node's followers of
//!   that session: the notice names the events, which are read from the
//!   store and published here as if committed here (followers skip what
//!   they have seen by sequence number, and go back to the store for
//!   what they missed, so a lost notice delays but never loses an event).
//!   Token deltas stay on the node that runs the call.
//! - **Inbox** items pushed by another node wake the session here: if this
//!   node holds its lease (or nobody does) the session's actor takes them
//!   in; otherwise the actor finds the lease held and leaves.
//! - **Replies** to forwarded requests wake their callers.
//! - **Records** (agents, keys, tenants) changed: whoever keeps them in
//!   memory on this node reloads them ([`crate::Engine::records_changed`]).
//! - **Missed**: notices may have been lost while this node could not hear
//!   them (its listening connection was cut). Every follower here reads
//!   the store again, waiters for turns too, records are reloaded, and a
//!   scan runs at once (it finds the sessions this node holds whose inbox
//!   filled unseen).
//! - Every scan period, sessions with work left whose holder died (or that
//!   never had one) are taken over, as a restart recovers them; so are
//!   the sessions this node holds with items in their inbox and no actor
//!   here to take them in. Between scans, the nodes live are looked at
//!   every [`WATCH`]: when one is gone (its process died, its connection
//!   to the store ended with it), a scan runs at once, so its sessions
//!   move within a fraction of a second rather than at the next scan.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use subs_protocol::SessionEvent;
use subs_protocol::event::{TurnDone, TurnFailed};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::events::Event;
use crate::session::actor::Mailboxes;
use crate::session::directory::Directory;
use crate::session::env::Env;
use crate::store::shared::{Notice, Noticed};
use crate::store::{SessionKey, StoreError};

/// The most orphaned sessions taken over per scan: a node that comes up
/// beside a crashed one takes its sessions over in steps, not all at once.
const ORPHANS_PER_SCAN: usize = 256;

/// How often the nodes live are looked at between scans: how long a node
/// seen dead (see [`Shared::live_nodes`](crate::store::shared::Shared::live_nodes))
/// keeps its sessions at most, before the scan that takes them over.
pub(crate) const WATCH: Duration = Duration::from_millis(250);

/// Starts the listener and the scanner; both end when aborted.
pub(crate) fn start(
    env: Arc<Env>,
    directory: Arc<Directory>,
    records: watch::Sender<u64>,
    scan: Duration,
) -> Vec<JoinHandle<()>> {
    let Some(shared) = env.store.shared() else { return Vec::new() };
    let span = tracing::info_span!("node", node = %shared.node());
    let notices = shared.listen();
    let rescan = Arc::new(Notify::new());
    let listener =
        tokio::spawn(listen(env.clone(), directory.clone(), records, notices, rescan.clone()).instrument(span.clone()));
    let scanner = tokio::spawn(take_over(env, directory, scan, rescan).instrument(span));
    vec![listener, scanner]
}

async fn listen(
    env: Arc<Env>,
    directory: Arc<Directory>,
    records: watch::Sender<u64>,
    mut notices: tokio::sync::broadcast::Receiver<Noticed>,
    rescan: Arc<Notify>,
) {
    loop {
        let noticed = match notices.recv().await {
            Ok(noticed) => noticed,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "notices from other nodes were missed");
                missing(&env, &records, &rescan);
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        match noticed.notice {
            Notice::Events { key, first, last } => {
                if let Err(error) = publish(&env, &key, first, last).await {
                    // The followers read the store instead: they may have
                    // missed these.
                    tracing::warn!(session = %key, %error, "events of another node could not be read");
                    env.hub.resync(&key);
                }
            }
            Notice::Inbox { key } => directory.wake(&key),
            Notice::Reply { id } => env.replies.signal(&id),
            Notice::Records => records.send_modify(|n| *n += 1),
            Notice::Missed => missing(&env, &records, &rescan),
        }
    }
}

/// After notices were lost: followers and waiters here read the store
/// again, records are reloaded, and the scanner looks at once for the
/// sessions this node holds whose inbox filled unseen. Callers of
/// forwarded requests find their answers by polling.
fn missing(env: &Env, records: &watch::Sender<u64>, rescan: &Notify) {
    env.hub.resync_all();
    records.send_modify(|n| *n += 1);
    rescan.notify_one();
}

/// Publishes events `first..=last` of a session, committed by another
/// node, to this node's followers of it, and tells those waiting for a
/// turn that it ended.
async fn publish(env: &Env, key: &SessionKey, first: u64, last: u64) -> Result<(), StoreError> {
    if !env.hub.watched(key) || last < first {
        return Ok(());
    }
    let count = usize::try_from(last - first + 1).unwrap_or(usize::MAX);
    let events = env.store.events(key, first.checked_sub(1), count).await?;
    let events: Vec<Event> = events.into_iter().map(|(seq, record)| Event::stored(seq, record)).collect();
    let ended: Vec<String> = events
        .iter()
        .filter_map(|event| match event.parse() {
            Ok(
                SessionEvent::TurnDone(TurnDone { turn_id, .. }) | SessionEvent::TurnFailed(TurnFailed { turn_id, .. }),
            ) => Some(turn_id),
            _ => None,
        })
        .collect();
    env.hub.publish_all(events.into_iter().map(|event| (key.clone(), event)));
    for turn_id in ended {
        if let Some(turn) = env.store.turn(key, &turn_id).await?
            && turn.status.ended()
        {
            env.hub.turn_ended(key, (turn_id, turn));
        }
    }
    Ok(())
}

/// Every `scan`, takes over the sessions no live node acts for, and wakes
/// those this node holds with mail it has no actor for; at once when
/// `rescan` is notified or a node is seen dead (looked at every
/// [`WATCH`]).
async fn take_over(env: Arc<Env>, directory: Arc<Directory>, scan: Duration, rescan: Arc<Notify>) {
    let Some(shared) = env.store.shared() else { return };
    // The first scan comes one period after start: `Engine::resume` has
    // just taken over what was orphaned then.
    let mut due = tokio::time::Instant::now() + scan;
    let mut watch = tokio::time::interval(WATCH.min(scan));
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut live: Option<BTreeSet<String>> = None;
    // Failures in a row, told once at `warn`.
    let mut failures = 0u32;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(due) => {}
            () = rescan.notified() => {}
            _ = watch.tick() => {
                // A failing store is told by the scans.
                let Ok(now) = shared.live_nodes().await else { continue };
                let now: BTreeSet<String> = now.into_iter().collect();
                let gone: Vec<&String> =
                    live.iter().flatten().filter(|node| !now.contains(*node) && *node != shared.node()).collect();
                let died = !gone.is_empty();
                if died {
                    tracing::info!(nodes = ?gone, "nodes are no longer live; taking their sessions over");
                }
                live = Some(now);
                if !died {
                    continue;
                }
            }
        }
        due = tokio::time::Instant::now() + scan;
        match shared.orphans(ORPHANS_PER_SCAN).await {
            Ok(orphans) => {
                if failures > 0 {
                    tracing::info!(failures, "sessions to take over are listed again");
                }
                failures = 0;
                for orphan in orphans {
                    if orphan.crashed {
                        tracing::info!(session = %orphan.key, "taking the session over");
                    } else {
                        tracing::debug!(session = %orphan.key, "waking a session with mail");
                    }
                    // As many at once as a restart resumes: the next scan
                    // waits for these.
                    directory.resume(&orphan.key, orphan.crashed).await;
                }
            }
            Err(error) => {
                if failures == 0 {
                    tracing::warn!(%error, "sessions to take over could not be listed");
                } else {
                    tracing::debug!(%error, failures, "sessions to take over could not be listed");
                }
                failures = failures.saturating_add(1);
            }
        }
    }
}
