//! What a store shared by several engine nodes adds to [`Store`]: leases
//! on sessions, with fencing tokens, and notices from one node to the
//! others.
//!
//! One node at a time acts for a session: the one holding its **lease**.
//! A node [`claim`](Shared::claim)s a session's lease when work for it
//! arrives (an input, a wake, a session found orphaned); every grant
//! carries a new **fencing token**, higher than any granted before. Every
//! batch the node then commits for that session names the token in its
//! [`Batch::fence`](crate::Batch::fence), and the store applies it only
//! while the token is still the lease's: a node that lost the lease
//! (paused, partitioned, slow) gets [`StoreError::Fenced`] and writes
//! nothing for that session again.
//!
//! Liveness is per node, not per session: the store keeps a heartbeat for
//! each node (renewed by the store itself every
//! [`SharedSettings::renew`]) and a lease counts as held while its node's
//! heartbeat is younger than [`SharedSettings::lease`]. A node that stops
//! renewing loses every lease it holds at once, and the others take its
//! unfinished sessions over ([`Shared::orphans`]). A store may also know
//! sooner that a node died (PostgreSQL: the node's own connection to the
//! database ended, see `subs-store-postgres`): its leases are then free at
//! once, and [`Shared::live_nodes`] tells the others. A node whose actor for
//! a session goes quiet [`release`](Shared::release)s the lease, so the
//! next input to any node claims it at once.
//!
//! Nodes hear of each other's commits through [`Notice`]s: the store
//! sends them itself, from the ops of each committed batch, so nothing
//! the engine writes can forget one.
//!
//! [`StoreError::Fenced`]: crate::StoreError::Fenced

use std::time::Duration;

use tokio::sync::broadcast;

use crate::{BoxFuture, SessionKey, StoreResult};

/// A session's lease as granted to this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// The fencing token: higher than any granted before it, for any
    /// session.
    pub token: u64,
}

/// The answer to a [`Shared::claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The lease is this node's, with a new token.
    Granted(Lease),
    /// Another live node holds it.
    HeldBy {
        /// The node holding it.
        node: String,
    },
}

/// A session found with work left and nobody live acting for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// The session.
    pub key: SessionKey,
    /// Whether its last holder died holding it (a crash: its next
    /// delivery may have been cut short and counts as an attempt), rather
    /// than releasing it cleanly with items left in its inbox.
    pub crashed: bool,
}

/// What one node tells the others, sent by the store as a batch commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Events `first..=last` of a session were committed.
    Events {
        /// The session.
        key: SessionKey,
        /// The first event's sequence number.
        first: u64,
        /// The last event's sequence number.
        last: u64,
    },
    /// An item was pushed to a session's inbox.
    Inbox {
        /// The receiving session.
        key: SessionKey,
    },
    /// The answer to a forwarded request was stored
    /// ([`Op::PutReply`](crate::Op::PutReply)).
    Reply {
        /// The request's id.
        id: String,
    },
    /// Agents, keys or tenants changed.
    Records,
    /// Notices from other nodes may have been lost: this node could not
    /// hear them for a while (the store's connection for them was cut and
    /// is back). Sent by the store itself, never by a commit. A receiver
    /// treats every session it follows, every session it holds and every
    /// record it keeps as changed.
    Missed,
}

/// A [`Notice`] and the node it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Noticed {
    /// The node whose commit sent it.
    pub from: String,
    /// What it says.
    pub notice: Notice,
}

/// Lease timing, in the settings of a shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedSettings {
    /// How long a node's leases outlive its last heartbeat: how long the
    /// sessions of a node that stopped renewing wait before another node
    /// takes them, unless the store sees sooner that it died.
    pub lease: Duration,
    /// How often a node renews its heartbeat; well under `lease`, so a
    /// slow renewal does not lose the leases.
    pub renew: Duration,
}

impl Default for SharedSettings {
    fn default() -> Self {
        Self { lease: Duration::from_secs(10), renew: Duration::from_secs(2) }
    }
}

impl SharedSettings {
    /// Why these settings cannot work, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.lease.is_zero() || self.renew.is_zero() {
            return Err("`lease_secs` and `renew_secs` must be above zero".to_owned());
        }
        if self.renew * 2 > self.lease {
            return Err(format!(
                "`renew_secs` ({:?}) must be at most half of `lease_secs` ({:?}), so one late renewal does not lose \
                 every lease",
                self.renew, self.lease
            ));
        }
        Ok(())
    }
}

/// A store shared by several engine nodes; see the [module docs](self).
pub trait Shared: Send + Sync {
    /// This node's name, unique among the nodes (and across restarts: a
    /// restarted process is a new node).
    fn node(&self) -> &str;

    /// Claims the session's lease for this node: granted, with a new
    /// token, when nobody holds it, when its holder released it or died
    /// (its heartbeat is older than the lease), or when this node holds it
    /// already; otherwise the live node holding it.
    fn claim<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Claim>>;

    /// Gives the lease up, if `token` is still its token; the next claim
    /// from any node is granted at once.
    fn release<'a>(&'a self, key: &'a SessionKey, token: u64) -> BoxFuture<'a, StoreResult<()>>;

    /// At most `limit` sessions with work left (not idle, or items in
    /// their inbox) that no live node holds: their holder died, or
    /// released them with items left in the inbox, or they never had a
    /// holder; and the sessions this node holds with items in their inbox
    /// (not `crashed`), which an actor of this node may not have seen
    /// arrive (a notice lost while the store was unreachable): the caller
    /// wakes them, which costs an actor that has them in hand already
    /// one read of its inbox.
    fn orphans(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<Orphan>>>;

    /// The names of the nodes live now, this one included if it is (it
    /// may not be, while its heartbeat cannot reach the store): what a
    /// node watches to take a dead node's sessions over as soon as it is
    /// seen dead, rather than at its next scan.
    fn live_nodes(&self) -> BoxFuture<'_, StoreResult<Vec<String>>>;

    /// The lease timing this node runs with.
    fn settings(&self) -> SharedSettings;

    /// Keeps a component's bytes under their digest (`sha256:<hex>`), so
    /// every node can load an agent uploaded to any of them. Storing the
    /// same digest again keeps the bytes first stored and only notes the
    /// time (see [`delete_blob`](Self::delete_blob)).
    fn put_blob<'a>(&'a self, digest: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, StoreResult<()>>;

    /// A component's bytes by digest.
    fn blob<'a>(&'a self, digest: &'a str) -> BoxFuture<'a, StoreResult<Option<Vec<u8>>>>;

    /// The digests of the component blobs (those named `sha256:…`) last
    /// stored more than `age` ago: what [`delete_blob`](Self::delete_blob)
    /// with the same `age` may delete.
    fn stale_blobs(&self, age: Duration) -> BoxFuture<'_, StoreResult<Vec<String>>>;

    /// Deletes the blob `digest` unless it was stored (or stored again)
    /// less than `age` ago; whether it deleted it. The caller has made
    /// sure no agent refers to the digest; `age` covers an upload on
    /// another node, which stores the blob just before the record naming
    /// it: a blob stored that recently may be about to be referred to.
    fn delete_blob<'a>(&'a self, digest: &'a str, age: Duration) -> BoxFuture<'a, StoreResult<bool>>;

    /// Notices from the other nodes' commits, from now on (this node's own
    /// are not sent to it), and [`Notice::Missed`] when some may have been
    /// lost. A receiver that lags loses the oldest; it should then do as
    /// for [`Notice::Missed`].
    fn listen(&self) -> broadcast::Receiver<Noticed>;
}
