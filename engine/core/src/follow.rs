//! Following a session: its stored events after a point, then the live
//! ones as they happen, in order, none missing and none twice. The API's
//! event streams and the CLI read sessions this way.
//!
//! The live subscription is taken before the store is read, so an event
//! committed in between is in one or the other; stored events arriving
//! live that were already read are skipped by sequence number. A live
//! stored event that is not the next one (the subscriber was behind when
//! it subscribed, or events were published while a page was read) sends
//! the follower back to the store until it has caught up. Token deltas
//! are live only: they pass as they come and are never replayed.
//!
//! Events can also be stored without ever being published here: a commit
//! whose outcome was in doubt turns out written, or this node could not
//! hear other nodes' notices for a while. The engine then asks every
//! follower concerned to read the store again ([`Hub::resync`](crate::events)),
//! and it does so from the last event it passed on, so it still misses
//! none and sees none twice. A read of the store that fails while the
//! database cannot be reached is tried again, for up to
//! [`STORE_PATIENCE`], before the follower gives up with the error.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::Reads;
use crate::events::{Frame, RecvError, Subscription, TooManyStreams};
use crate::store::{SessionKey, StoreError};

/// The most stored events read from the store at a time.
const PAGE: usize = 256;

/// The stored events read first, before their size is known.
const FIRST_PAGE: usize = 32;

/// About how many bytes of stored events are read at a time: a run of
/// large events is read a few at a time.
const PAGE_BYTES: usize = 256 << 10;

/// How long a follower keeps trying to read the store while the database
/// cannot be reached (restarting, or a connection cut) before it gives up
/// with the error: longer than a restart of PostgreSQL takes.
pub const STORE_PATIENCE: Duration = Duration::from_secs(30);

/// The first wait before a failed read is tried again; twice as long each
/// time after, up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a failed read.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Why a [`Follow`] stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The follower fell behind the live events by more than its buffer
    /// and was dropped. [`Follow::resubscribe`] goes on from the last
    /// event passed on; a remote client reconnects instead.
    #[error("the follower fell behind by more than its buffer of {budget} bytes and was dropped")]
    Dropped {
        /// The buffer, in bytes.
        budget: usize,
    },
    /// Stored events could not be read.
    #[error("stored events could not be read: {0}")]
    Store(#[from] StoreError),
    /// The engine stopped.
    #[error("the engine stopped")]
    Closed,
}

/// Following, on the engine's reads: kept here so that the engine's module
/// does not depend on this one, which holds a [`Reads`].
impl Reads {
    /// The session's stored events after `after` (from the first when
    /// `None`), then its live ones: see [`Follow`](Follow).
    /// Counts as one of the tenant's subscriptions while it lives.
    pub fn follow(&self, tenant: &str, session: &str, after: Option<u64>) -> Result<Follow, TooManyStreams> {
        let live = self.subscribe(tenant, session)?;
        Ok(Follow::new(self.clone(), tenant, session, after, live))
    }
}

/// A session's events, stored then live; see the [module docs](self).
pub struct Follow {
    reads: Reads,
    key: SessionKey,
    live: Subscription,
    /// The last stored event passed on.
    last: Option<u64>,
    /// Stored events read and not passed on yet: at most a page.
    backlog: VecDeque<Arc<Frame>>,
    /// Whether stored events after `last` may be in the store and not in
    /// `backlog` yet.
    replaying: bool,
    /// How many stored events to read next.
    page: usize,
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow").field("session", &self.key).field("last", &self.last).finish_non_exhaustive()
    }
}

impl Follow {
    /// Follows `session` of `tenant` from after the stored event `after`
    /// (from the first when `None`), on `live`, a subscription to that
    /// session taken before anything the follower must not miss (such as
    /// an input whose turn it waits for).
    pub fn new(reads: Reads, tenant: &str, session: &str, after: Option<u64>, live: Subscription) -> Self {
        Self {
            reads,
            key: SessionKey::new(tenant, session),
            live,
            last: after,
            backlog: VecDeque::new(),
            replaying: true,
            page: FIRST_PAGE,
        }
    }

    /// The next event: stored ones by sequence number, then live ones
    /// (token deltas included) as they are published.
    pub async fn next(&mut self) -> Result<Arc<Frame>, FollowError> {
        loop {
            if let Some(frame) = self.backlog.pop_front() {
                return Ok(self.passed(frame));
            }
            if self.replaying {
                self.read_page_patiently().await?;
                continue;
            }
            match self.live.recv_or_resync().await {
                // Events may have been stored unseen: read from the store.
                Ok(None) => self.replaying = true,
                Ok(Some(frame)) => match frame.seq {
                    Some(seq) if self.last.is_some_and(|last| seq <= last) => {}
                    Some(seq) if seq != self.last.map_or(0, |last| last + 1) => self.replaying = true,
                    _ => return Ok(self.passed(frame)),
                },
                Err(RecvError::Dropped { budget }) => return Err(FollowError::Dropped { budget }),
                Err(_) => return Err(FollowError::Closed),
            }
        }
    }

    /// Skips the first read of the store, for a follower whose caller
    /// knows that every event it wants is published after `live` was
    /// taken (those of a turn its input starts): the store is read only
    /// should a live event not be the next one.
    pub fn live_first(mut self) -> Self {
        self.replaying = false;
        self
    }

    /// The sequence number of the last stored event passed on: where a
    /// reconnecting client resumes.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// After [`FollowError::Dropped`]: subscribes again and goes on from
    /// the last event passed on (the token deltas dropped meanwhile are
    /// lost; they are never stored).
    pub fn resubscribe(&mut self) -> Result<(), TooManyStreams> {
        self.live = self.reads.subscribe(&self.key.tenant, &self.key.session)?;
        self.replaying = true;
        Ok(())
    }

    fn passed(&mut self, frame: Arc<Frame>) -> Arc<Frame> {
        if let Some(seq) = frame.seq {
            self.last = Some(seq);
        }
        frame
    }

    /// [`read_page`](Self::read_page), tried again while the store fails
    /// as an unreachable database does, for up to [`STORE_PATIENCE`].
    async fn read_page_patiently(&mut self) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        let mut wait = RETRY_FIRST;
        loop {
            match self.read_page().await {
                Err(error) if error.is_transient() && started.elapsed() < STORE_PATIENCE => {
                    tracing::debug!(session = %self.key, %error, "stored events could not be read; trying again");
                    // A store failing for a moment: reading again at once
                    // would only fail again, and load it while it recovers.
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
                read => return read,
            }
        }
    }

    /// Reads the next page of stored events after the last one passed on,
    /// serialized as live ones are (which also makes their size known).
    async fn read_page(&mut self) -> Result<(), StoreError> {
        let page = self.reads.events(&self.key.tenant, &self.key.session, self.last, self.page).await?;
        self.replaying = page.len() == self.page;
        let frames: VecDeque<Arc<Frame>> = page.iter().map(|event| Arc::new(Frame::new(event))).collect();
        let bytes: usize = frames.iter().map(|frame| frame.bytes()).sum();
        self.page = (PAGE_BYTES / (bytes / frames.len().max(1)).max(1)).clamp(1, PAGE);
        self.backlog = frames;
        Ok(())
    }
}
