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
//! - Every scan period, sessions with work left whose holder died (or that
//!   never had one) are taken over, as a restart recovers them.

use std::sync::Arc;
use std::time::Duration;

use subs_protocol::SessionEvent;
use subs_protocol::event::{TurnDone, TurnFailed};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
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
    let listener = tokio::spawn(listen(env.clone(), directory.clone(), records, notices).instrument(span.clone()));
    let scanner = tokio::spawn(take_over(env, directory, scan).instrument(span));
    vec![listener, scanner]
}

async fn listen(
    env: Arc<Env>,
    directory: Arc<Directory>,
    records: watch::Sender<u64>,
    mut notices: tokio::sync::broadcast::Receiver<Noticed>,
) {
    loop {
        let noticed = match notices.recv().await {
            Ok(noticed) => noticed,
            Err(RecvError::Lagged(missed)) => {
                // What was missed is found again: followers by their next
                // event, callers of forwarded requests by polling, the
                // scanner by its next scan. Records are reloaded to be sure.
                tracing::warn!(missed, "notices from other nodes were missed");
                records.send_modify(|n| *n += 1);
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        match noticed.notice {
            Notice::Events { key, first, last } => {
                if let Err(error) = publish(&env, &key, first, last).await {
                    tracing::warn!(session = %key, %error, "events of another node could not be read");
                }
            }
            Notice::Inbox { key } => directory.wake(&key),
            Notice::Reply { id } => env.replies.signal(&id),
            Notice::Records => records.send_modify(|n| *n += 1),
        }
    }
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

/// Every `scan`, takes over the sessions no live node acts for.
async fn take_over(env: Arc<Env>, directory: Arc<Directory>, scan: Duration) {
    // The first scan comes one period after start: `Engine::resume` has
    // just taken over what was orphaned then.
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + scan, scan);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(shared) = env.store.shared() else { return };
        match shared.orphans(ORPHANS_PER_SCAN).await {
            Ok(orphans) => {
                for orphan in orphans {
                    tracing::info!(session = %orphan.key, crashed = orphan.crashed, "taking the session over");
                    // As many at once as a restart resumes: the next scan
                    // waits for these.
                    directory.resume(&orphan.key, orphan.crashed).await;
                }
            }
            Err(error) => tracing::warn!(%error, "sessions to take over could not be listed"),
        }
    }
}
