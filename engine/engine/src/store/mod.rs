//! The durable store: everything the engine knows about sessions, behind
//! one trait.
//!
//! The loop never mutates durable state in place: it builds a [`Batch`] of
//! [`Op`]s describing one step (a trigger accepted, a decision applied, a
//! call settled) and [`Store::commit`]s it; the batch is durable, all or
//! nothing, when `commit` returns. Only then does the loop act on it (send
//! a request, start a call, publish events). See `docs/durability.md` for
//! the promises this makes and the tests that prove them.
//!
//! What is stored, per session (keyed by [`SessionKey`]):
//!
//! - one [`SessionRecord`]: status, agent state and config, head of the
//!   message tree, counters, the open turn and interrupts;
//! - each message once ([`MessageRecord`], by sequence number);
//! - each step ([`StepRecord`]): its trigger in compact form, its delivery
//!   attempts, the decision, and the ids of the messages it recorded —
//!   never a copy of the conversation, so storage grows linearly with it;
//! - the calls in flight ([`CallRecord`]; settled calls are deleted, their
//!   outcome lives on in the steps and messages);
//! - the events clients see ([`EventRecord`], by sequence number);
//! - turns by id ([`TurnRecord`]), for idempotency;
//! - an inbox ([`InboxItem`]) through which other sessions reach this one
//!   (a child's result, a `message.send`), written in the sender's commit.
//!
//! Per tenant, the store also keeps the agents ([`AgentRecord`]: which
//! worker, which version), the API keys ([`KeyRecord`], hashed) and the
//! operator's record of the tenant ([`TenantRecord`]: its limits).
//!
//! A session is driven by one owner at a time (the engine's session actor),
//! so ops are unconditional writes; a store shared by several engine nodes
//! would add leases on top of this trait, not change it.

pub mod fault;
pub mod records;
pub mod redb;

use std::future::Future;
use std::pin::Pin;

pub use self::records::*;

/// A boxed, sendable future (keeps [`Store`] object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One write of a [`Batch`].
// Ops live for one commit and are moved, not copied; boxing the large
// records would cost an allocation per write for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Op {
    /// Creates or replaces a session's record.
    PutSession(SessionRecord),
    /// Records a message under its sequence number.
    PutMessage {
        /// The session.
        session: SessionKey,
        /// The message's sequence number within the session.
        seq: u64,
        /// The message and its parent.
        record: MessageRecord,
    },
    /// Creates or replaces a step.
    PutStep {
        /// The session.
        session: SessionKey,
        /// The step's sequence number within the session.
        seq: u64,
        /// The step.
        record: StepRecord,
    },
    /// Creates or replaces an in-flight call.
    PutCall {
        /// The session.
        session: SessionKey,
        /// The call.
        record: CallRecord,
    },
    /// Forgets a settled call.
    DeleteCall {
        /// The session.
        session: SessionKey,
        /// The call's id.
        call_id: String,
    },
    /// Appends an event for clients.
    PutEvent {
        /// The session.
        session: SessionKey,
        /// The event's sequence number (the SSE `id`).
        seq: u64,
        /// The event.
        record: EventRecord,
    },
    /// Creates or replaces a turn.
    PutTurn {
        /// The session.
        session: SessionKey,
        /// The turn's id.
        turn_id: String,
        /// The turn.
        record: TurnRecord,
    },
    /// Delivers an item to a session's inbox; the store assigns its
    /// sequence number (increasing across the whole store).
    PushInbox {
        /// The receiving session.
        session: SessionKey,
        /// What it receives.
        item: InboxItem,
    },
    /// Removes an inbox item the session has taken in.
    DeleteInbox {
        /// The session.
        session: SessionKey,
        /// The item's sequence number.
        seq: u64,
    },
    /// Creates or replaces an agent.
    PutAgent(AgentRecord),
    /// Removes an agent (its sessions stay).
    DeleteAgent {
        /// The tenant.
        tenant: String,
        /// The agent.
        agent_id: String,
    },
    /// Stores an API key (its hash).
    PutKey(KeyRecord),
    /// Revokes an API key.
    DeleteKey {
        /// The tenant it belongs to.
        tenant: String,
        /// The key's hash.
        hash: String,
    },
    /// Creates or replaces a tenant.
    PutTenant(TenantRecord),
    /// Removes a tenant's record (its keys, sessions and agents are other
    /// records).
    DeleteTenant {
        /// The tenant.
        tenant: String,
    },
}

/// Writes that become durable together or not at all.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The writes, applied in order.
    pub ops: Vec<Op>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a write.
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A session as [`Store::load`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedSession {
    /// The session's record.
    pub record: SessionRecord,
    /// Every message, in sequence order.
    pub messages: Vec<(u64, MessageRecord)>,
    /// The calls in flight.
    pub calls: Vec<CallRecord>,
    /// The steps from `record.first_open_step` on, in order.
    pub steps: Vec<(u64, StepRecord)>,
}

/// Counters of what the store has done, for metrics and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Batches committed.
    pub batches: u64,
    /// Durable commits (one sync each: the journal's or a checkpoint's);
    /// group commit makes this smaller than `batches` under concurrency.
    pub commits: u64,
}

/// Why the store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another process holds the database.
    #[error("the store at {path} is locked by another process")]
    Locked {
        /// The database file.
        path: String,
    },
    /// The database could not be opened, read or written.
    #[error("store I/O failed: {0}")]
    Io(String),
    /// A stored record could not be decoded (a bug or a corrupted file).
    #[error("a stored record is unreadable ({table}): {message}")]
    Corrupt {
        /// The table holding it.
        table: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The store was shut down (or crashed, in fault-injection tests) and
    /// takes no more writes.
    #[error("the store is closed")]
    Closed,
}

/// Durable storage of sessions.
///
/// Reads see every batch whose `commit` has returned. Implementations must
/// make each batch atomic and durable before `commit` resolves.
pub trait Store: Send + Sync + 'static {
    /// Makes `batch` durable, all or nothing.
    fn commit(&self, batch: Batch) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The session's record.
    fn session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError>;

    /// Every session of `tenant` (all tenants when `None`), ordered by key.
    fn sessions(&self, tenant: Option<&str>) -> Result<Vec<SessionRecord>, StoreError>;

    /// At most `limit` sessions of `tenant` whose ids come after `after`
    /// (from the first when `None`), ordered by id: a page of `sessions`.
    fn sessions_page(&self, tenant: &str, after: Option<&str>, limit: usize) -> Result<Vec<SessionRecord>, StoreError> {
        let sessions = self.sessions(Some(tenant))?.into_iter();
        Ok(sessions.filter(|s| after.is_none_or(|after| s.key.session.as_str() > after)).take(limit).collect())
    }

    /// How many sessions `tenant` has: `sessions(Some(tenant)).len()`,
    /// which implementations should answer without decoding the records.
    fn session_count(&self, tenant: &str) -> Result<u64, StoreError> {
        Ok(self.sessions(Some(tenant))?.len() as u64)
    }

    /// Sessions that may have work to resume: status not idle, or an item
    /// in the inbox.
    fn unfinished(&self) -> Result<Vec<SessionKey>, StoreError>;

    /// What loading a session into memory needs, read as one consistent
    /// snapshot: its record, its messages, its calls in flight and its
    /// steps from the record's `first_open_step` on. `None` if there is no
    /// such session.
    ///
    /// The default reads each part on its own; a store that can read them
    /// together (and see one state for all four) should.
    fn load(&self, key: &SessionKey) -> Result<Option<LoadedSession>, StoreError> {
        let Some(record) = self.session(key)? else { return Ok(None) };
        Ok(Some(LoadedSession {
            messages: self.messages(key)?,
            calls: self.calls(key)?,
            steps: self.steps(key, record.first_open_step)?,
            record,
        }))
    }

    /// The session's messages in sequence order.
    fn messages(&self, key: &SessionKey) -> Result<Vec<(u64, MessageRecord)>, StoreError>;

    /// The session's steps with sequence number `from` or later, in order.
    fn steps(&self, key: &SessionKey, from: u64) -> Result<Vec<(u64, StepRecord)>, StoreError>;

    /// The session's in-flight calls.
    fn calls(&self, key: &SessionKey) -> Result<Vec<CallRecord>, StoreError>;

    /// The agents of `tenant` (all tenants when `None`), by id.
    fn agents(&self, tenant: Option<&str>) -> Result<Vec<AgentRecord>, StoreError>;

    /// One agent.
    fn agent(&self, tenant: &str, agent_id: &str) -> Result<Option<AgentRecord>, StoreError>;

    /// Every stored API key (hashes, never the keys).
    fn keys(&self) -> Result<Vec<KeyRecord>, StoreError>;

    /// Every stored tenant, by name.
    fn tenants(&self) -> Result<Vec<TenantRecord>, StoreError>;

    /// The session's events with sequence number greater than `after` (all
    /// when `None`), in order, at most `limit`.
    fn events(&self, key: &SessionKey, after: Option<u64>, limit: usize)
    -> Result<Vec<(u64, EventRecord)>, StoreError>;

    /// A turn by id.
    fn turn(&self, key: &SessionKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError>;

    /// The session's inbox, oldest first.
    fn inbox(&self, key: &SessionKey) -> Result<Vec<(u64, InboxItem)>, StoreError>;

    /// What the store has done so far: counters kept in memory, cheap
    /// enough for every metrics scrape.
    fn stats(&self) -> Result<StoreStats, StoreError>;

    /// Bytes of user data stored (keys and values), as the database reports
    /// them; excludes free and fragmented pages. May walk the whole store
    /// and hold commits up meanwhile: for tests, benchmarks and tools,
    /// never for a hot path or a scrape.
    fn stored_bytes(&self) -> Result<u64, StoreError>;
}
