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
//! operator's record of the tenant ([`TenantRecord`]: its limits), and how
//! many decisions each version of each agent made ([`Op::CountDecisions`],
//! read by [`Store::decision_counts`]).
//!
//! A session is driven by one owner at a time (the engine's session actor),
//! so ops are unconditional writes; a store shared by several engine nodes
//! would add leases on top of this trait, not change it.

pub mod conformance;
pub mod fault;
pub mod mem;
pub mod records;
pub mod shared;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use self::mem::MemStore;
pub use self::records::*;

/// A boxed, sendable future (keeps [`Store`] object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One write of a [`Batch`].
// The large records (a session's, a step's, a call's, an inbox item) are
// boxed so that an op takes a few words: a decision that starts a thousand
// calls makes thousands of small writes (a call and its event each), and a
// batch of ops the size of the largest record would hold and copy ten
// times what those writes are.
#[derive(Debug, Clone)]
pub enum Op {
    /// Creates or replaces a session's record.
    PutSession(Box<SessionRecord>),
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
        record: Box<StepRecord>,
    },
    /// Creates or replaces an in-flight call.
    PutCall {
        /// The session.
        session: SessionKey,
        /// The call.
        record: Box<CallRecord>,
    },
    /// Replaces a call stored before, by an earlier op of the same batch
    /// or an earlier commit, whose spec has not changed since: a backend
    /// may keep the spec it holds and store only the rest (a call's spec,
    /// which for an LLM call holds the tools' schemas, is its largest
    /// part, and a call is stored again at each try and when it settles).
    /// [`Batch::coalesce`] turns it into a [`PutCall`](Op::PutCall) when it
    /// drops the earlier op it relied on.
    UpdateCall {
        /// The session.
        session: SessionKey,
        /// The call, spec included.
        record: Box<CallRecord>,
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
        item: Box<InboxItem>,
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
    /// Removes an agent and its decision counts (its sessions stay).
    DeleteAgent {
        /// The tenant.
        tenant: String,
        /// The agent.
        agent_id: String,
    },
    /// Adds `decisions` to how many decisions version `version` of the
    /// agent `agent_id` made in `tenant`'s sessions: the count
    /// [`Store::decision_counts`] reads. Written in the batch that applies
    /// the decisions, so the count is exactly the decisions committed.
    CountDecisions {
        /// The tenant.
        tenant: String,
        /// The agent the deciding session runs.
        agent_id: String,
        /// The version that decided (`sha256:…`).
        version: String,
        /// How many decisions to add.
        decisions: u64,
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
    /// Creates or replaces a tenant's MCP server.
    PutMcpServer(McpServerRecord),
    /// Removes a tenant's MCP server.
    DeleteMcpServer {
        /// The tenant.
        tenant: String,
        /// The server's name.
        name: String,
    },
    /// Creates or replaces a tenant.
    PutTenant(TenantRecord),
    /// Removes a tenant's record (its keys, sessions and agents are other
    /// records).
    DeleteTenant {
        /// The tenant.
        tenant: String,
    },
    /// Stores the answer to a request another node forwarded through a
    /// session's inbox ([`InboxItem::Request`]), in the commit that acts on
    /// it.
    PutReply {
        /// The request's id.
        id: String,
        /// The answer.
        reply: serde_json::Value,
    },
    /// Forgets an answer its requester has read.
    DeleteReply {
        /// The request's id.
        id: String,
    },
}

/// Writes that become durable together or not at all.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The writes, applied in order.
    pub ops: Vec<Op>,
    /// On a [`Shared`](shared::Shared) store: the session whose lease the
    /// batch is written under, and the lease's token. The batch is
    /// applied only while that token is still the session's lease;
    /// otherwise its commit fails with [`StoreError::Fenced`] and nothing
    /// of it is written. Stores used by one node ignore it.
    pub fence: Option<Fence>,
}

/// A session's lease token a batch is written under: see [`Batch::fence`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// The session.
    pub key: SessionKey,
    /// Its lease's token, as granted to this node.
    pub token: u64,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// A batch of `ops`, unfenced.
    pub fn of(ops: impl IntoIterator<Item = Op>) -> Self {
        Self { ops: ops.into_iter().collect(), fence: None }
    }

    /// Adds a write.
    pub fn push(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Whether the batch writes nothing.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Drops every step, call or turn written that a later write of the
    /// same batch replaces (or, for a call, deletes).
    ///
    /// The batch is applied whole or not at all, so what it leaves stored
    /// is the same; but a session's change often holds a step twice, once
    /// pending and once applied, when the decision came before the commit:
    /// without this both would be encoded, journaled and stored. An
    /// [`Op::UpdateCall`] whose call's earlier write is dropped becomes an
    /// [`Op::PutCall`], as that write may not have reached the store.
    pub fn coalesce(&mut self) {
        let fates = self.fates();
        if !fates.contains(&Fate::Replaced) {
            return;
        }
        let mut fates = fates.into_iter();
        self.ops = std::mem::take(&mut self.ops)
            .into_iter()
            .filter_map(|op| match (fates.next(), op) {
                (Some(Fate::Replaced), _) => None,
                (Some(Fate::KeptAsPut), Op::UpdateCall { session, record }) => Some(Op::PutCall { session, record }),
                (_, op) => Some(op),
            })
            .collect();
    }

    /// How many writes a later write of the same batch replaces: none
    /// once [`coalesce`](Self::coalesce)d.
    pub fn superseded(&self) -> usize {
        self.fates().into_iter().filter(|fate| *fate == Fate::Replaced).count()
    }

    /// What coalescing does with each op.
    fn fates(&self) -> Vec<Fate> {
        use std::collections::hash_map::Entry;
        #[derive(PartialEq, Eq, Hash)]
        enum Slot<'a> {
            Step(&'a SessionKey, u64),
            Call(&'a SessionKey, &'a str),
            Turn(&'a SessionKey, &'a str),
        }
        // Each slot's last op, by index.
        let mut last = std::collections::HashMap::new();
        let mut fates = vec![Fate::Kept; self.ops.len()];
        for (i, op) in self.ops.iter().enumerate().rev() {
            let (slot, put) = match op {
                Op::PutStep { session, seq, .. } => (Slot::Step(session, *seq), true),
                Op::PutCall { session, record } | Op::UpdateCall { session, record } => {
                    (Slot::Call(session, &record.call.id), true)
                }
                Op::DeleteCall { session, call_id } => (Slot::Call(session, call_id), false),
                Op::PutTurn { session, turn_id, .. } => (Slot::Turn(session, turn_id), true),
                _ => continue,
            };
            match last.entry(slot) {
                Entry::Vacant(entry) => {
                    entry.insert(i);
                }
                Entry::Occupied(entry) if put => {
                    fates[i] = Fate::Replaced;
                    // An update of a call whose earlier write is dropped
                    // may be the call's first write to reach the store.
                    let kept = *entry.get();
                    if matches!(self.ops[kept], Op::UpdateCall { .. }) {
                        fates[kept] = Fate::KeptAsPut;
                    }
                }
                Entry::Occupied(_) => {}
            }
        }
        fates
    }
}

/// What [`Batch::coalesce`] does with an op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Kept,
    /// A later op of the batch writes the same slot: dropped.
    Replaced,
    /// An [`Op::UpdateCall`] whose call's earlier write is dropped: kept
    /// as an [`Op::PutCall`].
    KeptAsPut,
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
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another process holds the database.
    #[error("the store at {path} is locked by another process")]
    Locked {
        /// The database file.
        path: String,
    },
    /// The database could not be opened, read or written.
    #[error("{op}: {source}")]
    Io {
        /// What the store was doing, e.g. "cannot write the journal
        /// /data/subs.journal".
        op: String,
        /// The cause, kept whole for callers that walk the chain.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The connection to the database failed while a commit was in
    /// flight: the batch was written whole or not at all, and which is
    /// unknown. Whoever committed it reads the store again to learn which
    /// (and must not count on either).
    #[error("{op}: {source}; whether it was written is unknown")]
    InDoubt {
        /// What the store was doing.
        op: String,
        /// The cause, kept whole for callers that walk the chain.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
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
    /// The store does not do what was asked (e.g. keep answers to
    /// forwarded requests, which only a shared store does).
    #[error("this store does not support that: {0}")]
    Unsupported(&'static str),
    /// The batch was written under a lease this node no longer holds
    /// (see [`Batch::fence`]): another node acts for the session now.
    /// Nothing of the batch was written.
    #[error("session {session} is leased to another node now (fencing token {token} is stale); nothing was written")]
    Fenced {
        /// The session.
        session: SessionKey,
        /// The stale token.
        token: u64,
    },
}

impl StoreError {
    /// An I/O failure while doing `op`, caused by `source`.
    pub fn io(op: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::Io { op: op.into(), source: Arc::from(source.into()) }
    }

    /// A commit whose outcome is unknown: see [`StoreError::InDoubt`].
    pub fn in_doubt(op: impl Into<String>, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Self::InDoubt { op: op.into(), source: Arc::from(source.into()) }
    }

    /// Whether the batch of a failed commit may have been written
    /// ([`StoreError::InDoubt`]); every other error of a commit means
    /// nothing of the batch was.
    pub fn may_have_written(&self) -> bool {
        matches!(self, Self::InDoubt { .. })
    }

    /// Whether the error is one that passes: the database could not be
    /// reached or failed mid-way ([`Io`](Self::Io),
    /// [`InDoubt`](Self::InDoubt)), and the same read or commit may
    /// succeed once it answers again. Not a closed store, a corrupt
    /// record, or a lease lost to another node.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Io { .. } | Self::InDoubt { .. })
    }
}

/// A store's result.
pub type StoreResult<T> = Result<T, StoreError>;

/// Durable storage of sessions.
///
/// Reads see every batch whose `commit` has returned. Implementations must
/// make each batch atomic and durable before `commit` resolves, and apply
/// batches in the order their commits were called when one caller awaits
/// each before the next. Every read is async, so a backend may answer over
/// the network; an embedded one answers at once. [`conformance::run`]
/// checks all of this for any implementation.
pub trait Store: StoreAdmin + Send + Sync + 'static {
    /// Makes `batch` durable, all or nothing.
    fn commit(&self, batch: Batch) -> BoxFuture<'_, StoreResult<()>>;

    /// The session's record.
    fn session<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionRecord>>>;

    /// The head of the session's record: what [`session`](Self::session)
    /// answers, cut to a [`SessionHead`], which implementations should
    /// read without decoding the rest.
    fn session_head<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionHead>>> {
        Box::pin(async move { Ok(self.session(key).await?.map(SessionHead::from)) })
    }

    /// Every session of `tenant` (all tenants when `None`), ordered by key.
    fn sessions<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>>;

    /// At most `limit` sessions of `tenant` whose ids come after `after`
    /// (from the first when `None`), ordered by id: a page of `sessions`.
    fn sessions_page<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        Box::pin(async move {
            let sessions = self.sessions(Some(tenant)).await?.into_iter();
            Ok(sessions.filter(|s| after.is_none_or(|after| s.key.session.as_str() > after)).take(limit).collect())
        })
    }

    /// At most `limit` sessions of `tenant` whose owner is `identity` (the
    /// id of their [`WorkerIdentity`](subs_protocol::WorkerIdentity)), with
    /// ids after `after` (from the first when `None`), ordered by id. A
    /// backend keeps an index of owners, so that this costs in proportion
    /// to the page, however many other sessions the tenant has; the
    /// default, for stores without one, filters every session of the
    /// tenant.
    fn sessions_of_identity<'a>(
        &'a self,
        tenant: &'a str,
        identity: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        Box::pin(async move {
            let sessions = self.sessions(Some(tenant)).await?.into_iter();
            Ok(sessions
                .filter(|s| after.is_none_or(|after| s.key.session.as_str() > after))
                .filter(|s| s.identity.id.as_deref() == Some(identity))
                .take(limit)
                .collect())
        })
    }

    /// How many sessions `tenant` has: `sessions(Some(tenant)).len()`,
    /// which implementations should answer without decoding the records
    /// (the redb store keeps the count, PostgreSQL counts an index).
    fn session_count<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move { Ok(self.sessions(Some(tenant)).await?.len() as u64) })
    }

    /// Sessions that may have work to resume: status not idle, or an item
    /// in the inbox.
    fn unfinished(&self) -> BoxFuture<'_, StoreResult<Vec<SessionKey>>>;

    /// What loading a session into memory needs, read as one consistent
    /// snapshot: its record, its messages, its calls in flight and its
    /// steps from the record's `first_open_step` on. `None` if there is no
    /// such session.
    ///
    /// The default reads each part on its own; a store that can read them
    /// together (and see one state for all four) should.
    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<LoadedSession>>> {
        Box::pin(async move {
            let Some(record) = self.session(key).await? else { return Ok(None) };
            Ok(Some(LoadedSession {
                messages: self.messages(key).await?,
                calls: self.calls(key).await?,
                steps: self.steps(key, record.first_open_step, usize::MAX).await?,
                record,
            }))
        })
    }

    /// The session's messages in sequence order.
    fn messages<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, MessageRecord)>>>;

    /// The session's steps with sequence number `from` or later, in
    /// order, at most `limit` of them.
    fn steps<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>>;

    /// At most `limit` of the session's steps from number `from` on, as
    /// [`steps`](Self::steps) reads them, but no more than fit in
    /// `max_bytes` of their stored JSON: the page ends before the step
    /// that would take it past `max_bytes`, and holds the first step
    /// whatever its size. What a page of a session's history costs is
    /// then bounded by `max_bytes` (and the first step), not by the
    /// session. The default reads the steps, then measures them; a
    /// backend that knows a record's size before decoding it should not
    /// decode those it leaves out.
    fn steps_page<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        Box::pin(async move {
            let mut steps = self.steps(key, from, limit).await?;
            let mut total = 0usize;
            let mut keep = 0;
            for (_, step) in &steps {
                total = total.saturating_add(encode_record("steps", step)?.len());
                if keep > 0 && total > max_bytes {
                    break;
                }
                keep += 1;
            }
            steps.truncate(keep);
            Ok(steps)
        })
    }

    /// The session's in-flight calls.
    fn calls<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>>;

    /// The session's in-flight calls whose ids are among `ids`, in id
    /// order: what a reader showing some of a session's calls needs,
    /// costing the calls it returns rather than every call in flight. The
    /// default reads them all, then keeps those; a backend that can pick
    /// calls by id before decoding them should.
    fn calls_named<'a>(
        &'a self,
        key: &'a SessionKey,
        ids: &'a [String],
    ) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        Box::pin(async move {
            let wanted: std::collections::BTreeSet<&str> = ids.iter().map(String::as_str).collect();
            let mut calls = self.calls(key).await?;
            calls.retain(|c| wanted.contains(c.call.id.as_str()));
            calls.sort_by(|a, b| a.call.id.cmp(&b.call.id));
            Ok(calls)
        })
    }

    /// The agents of `tenant` (all tenants when `None`), by tenant and id.
    fn agents<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<AgentRecord>>>;

    /// One agent.
    fn agent<'a>(&'a self, tenant: &'a str, agent_id: &'a str) -> BoxFuture<'a, StoreResult<Option<AgentRecord>>>;

    /// How many decisions each version of `tenant`'s agent `agent_id`
    /// made, by version: the sums of the [`Op::CountDecisions`] committed
    /// since the agent was last deleted. One read of as many entries as
    /// versions decided, whatever the number of sessions.
    fn decision_counts<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, StoreResult<BTreeMap<String, u64>>>;

    /// Every stored API key (hashes, never the keys), by tenant and hash.
    fn keys(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>>;

    /// Every stored tenant, by name.
    fn tenants(&self) -> BoxFuture<'_, StoreResult<Vec<TenantRecord>>>;

    /// Every tenant's MCP servers, by tenant and name.
    fn mcp_servers(&self) -> BoxFuture<'_, StoreResult<Vec<McpServerRecord>>>;

    /// The session's events with sequence number greater than `after` (all
    /// when `None`), in order, at most `limit`.
    fn events<'a>(
        &'a self,
        key: &'a SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, EventRecord)>>>;

    /// A turn by id.
    fn turn<'a>(&'a self, key: &'a SessionKey, turn_id: &'a str) -> BoxFuture<'a, StoreResult<Option<TurnRecord>>>;

    /// The session's inbox, oldest first.
    fn inbox<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, InboxItem)>>>;

    /// The answer stored for a forwarded request ([`Op::PutReply`]).
    /// Requests are forwarded only between nodes sharing a store: a store
    /// one node owns may refuse `PutReply` and answer `None` here.
    fn reply<'a>(&'a self, id: &'a str) -> BoxFuture<'a, StoreResult<Option<serde_json::Value>>>;

    /// Leases and notices, when several engine nodes share the store;
    /// `None` for a store one node owns.
    fn shared(&self) -> Option<&dyn shared::Shared> {
        None
    }
}

/// What operators and benchmarks ask of a store, apart from sessions.
pub trait StoreAdmin: Send + Sync {
    /// What the store has done so far: counters kept in memory, cheap
    /// enough for every metrics scrape.
    fn stats(&self) -> StoreResult<StoreStats>;

    /// Bytes of user data stored (keys and values), as the database reports
    /// them; excludes free and fragmented pages. May walk the whole store
    /// and hold commits up meanwhile: for tests, benchmarks and tools,
    /// never for a hot path or a scrape.
    fn stored_bytes(&self) -> BoxFuture<'_, StoreResult<u64>>;
}

/// A record's JSON, as the backends store it.
pub fn encode_record(table: &'static str, value: &impl serde::Serialize) -> StoreResult<Vec<u8>> {
    // Room for a session record (about 450 bytes) without regrowing.
    let mut out = Vec::with_capacity(512);
    serde_json::to_writer(&mut out, value)
        .map_err(|err| StoreError::io(format!("cannot encode a record for {table}"), err))?;
    Ok(out)
}

/// A record from the JSON a backend stored; what does not read is
/// [`StoreError::Corrupt`], naming the table.
pub fn decode_record<T: serde::de::DeserializeOwned>(table: &'static str, bytes: &[u8]) -> StoreResult<T> {
    serde_json::from_slice(bytes).map_err(|err| StoreError::Corrupt { table, message: err.to_string() })
}

/// A future that is already resolved, boxed: how an embedded store, whose
/// reads never wait, answers the async reads of [`Store`].
pub fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

#[cfg(test)]
mod tests {
    use super::conformance::sample::{call, event, key, step, turn};
    use super::*;
    use subs_protocol::CallStatus;

    /// What each op writes where, to compare batches.
    fn slots(batch: &Batch) -> Vec<String> {
        batch
            .ops
            .iter()
            .map(|op| match op {
                Op::PutStep { session, seq, record } => format!("step {} {seq} {:?}", session.session, record.status),
                Op::PutCall { session, record } => {
                    format!("call {} {} {:?}", session.session, record.call.id, record.call.status)
                }
                Op::UpdateCall { session, record } => {
                    format!("update call {} {} {:?}", session.session, record.call.id, record.call.status)
                }
                Op::DeleteCall { session, call_id } => format!("delete call {} {call_id}", session.session),
                Op::PutTurn { session, turn_id, record } => {
                    format!("turn {} {turn_id} {:?}", session.session, record.status)
                }
                Op::PutEvent { session, seq, .. } => format!("event {} {seq}", session.session),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn coalescing_keeps_only_the_last_write_of_each_step_call_and_turn() {
        let (a, b) = (key("a"), key("b"));
        let put_step = |session: &SessionKey, seq: u64, status: StepStatus| {
            let mut record = step("d");
            record.status = status;
            Op::PutStep { session: session.clone(), seq, record: Box::new(record) }
        };
        let put_call = |session: &SessionKey, id: &str, status: CallStatus| {
            let mut record = call(id);
            record.call.status = status;
            Op::PutCall { session: session.clone(), record: Box::new(record) }
        };
        let put_turn =
            |status: TurnStatus| Op::PutTurn { session: a.clone(), turn_id: "t1".into(), record: turn(status) };
        let mut batch = Batch::of([
            put_step(&a, 0, StepStatus::Pending),
            put_step(&a, 1, StepStatus::Pending),
            put_step(&b, 0, StepStatus::Pending),
            Op::PutEvent { session: a.clone(), seq: 0, record: event(0) },
            Op::PutEvent { session: a.clone(), seq: 0, record: event(0) },
            put_call(&a, "c1", CallStatus::Pending),
            put_call(&a, "c2", CallStatus::Pending),
            put_turn(TurnStatus::Running),
            put_step(&a, 0, StepStatus::Applied),
            put_call(&a, "c1", CallStatus::Completed),
            Op::DeleteCall { session: a.clone(), call_id: "c2".into() },
            put_turn(TurnStatus::Done),
        ]);
        assert_eq!(batch.superseded(), 4);
        batch.coalesce();
        assert_eq!(batch.superseded(), 0);
        assert_eq!(
            slots(&batch),
            [
                "step a 1 Pending",
                "step b 0 Pending",
                "event a 0",
                "event a 0",
                "step a 0 Applied",
                "call a c1 Completed",
                "delete call a c2",
                "turn a t1 Done",
            ]
        );
    }

    /// An update keeps relying on the spec stored before it unless
    /// coalescing drops the write that stored it: then it is a put.
    #[test]
    fn coalescing_turns_an_update_whose_put_it_drops_into_a_put() {
        let a = key("a");
        let call_op = |id: &str, status: CallStatus, update: bool| {
            let mut record = call(id);
            record.call.status = status;
            let (session, record) = (a.clone(), Box::new(record));
            if update { Op::UpdateCall { session, record } } else { Op::PutCall { session, record } }
        };
        let mut batch = Batch::of([
            call_op("new", CallStatus::Pending, false),
            call_op("stored", CallStatus::Completed, true),
            call_op("new", CallStatus::Completed, true),
            call_op("twice", CallStatus::Pending, true),
            call_op("twice", CallStatus::Completed, true),
        ]);
        batch.coalesce();
        assert_eq!(slots(&batch), ["update call a stored Completed", "call a new Completed", "call a twice Completed"]);
    }
}
