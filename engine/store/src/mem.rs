//! [`MemStore`]: a [`Store`] kept in memory, for unit tests and tools.
//!
//! It keeps every promise of the trait except surviving the process: a
//! batch is applied whole under one lock, reads see every batch whose
//! commit returned, and orders match the redb store's (sessions by tenant
//! and id, everything of a session by its sequence number or id).
//! Clones share one state, so a test can "reopen" a store by dropping an
//! engine and starting another on a clone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{
    AgentRecord, Batch, BoxFuture, CallRecord, EventRecord, InboxItem, KeyRecord, McpServerRecord, MessageRecord, Op,
    SessionKey, SessionRecord, SessionStatus, StepRecord, Store, StoreAdmin, StoreError, StoreResult, StoreStats,
    TenantRecord, TurnRecord, ready,
};

/// Records of one session, keyed by its storage key and then by number
/// or id, so a session's records are one range.
type PerSession<K, V> = BTreeMap<(String, K), V>;

/// Everything stored.
#[derive(Debug, Default)]
struct State {
    /// Sessions by tenant, then id.
    sessions: BTreeMap<SessionKey, SessionRecord>,
    messages: PerSession<u64, MessageRecord>,
    steps: PerSession<u64, StepRecord>,
    calls: PerSession<String, CallRecord>,
    events: PerSession<u64, EventRecord>,
    turns: PerSession<String, TurnRecord>,
    inbox: PerSession<u64, InboxItem>,
    /// The next inbox number, increasing across the whole store.
    next_inbox: u64,
    /// By (tenant, agent id).
    agents: BTreeMap<(String, String), AgentRecord>,
    /// Decisions by (tenant, agent id, version).
    decisions: BTreeMap<(String, String, String), u64>,
    /// By (tenant, hash).
    keys: BTreeMap<(String, String), KeyRecord>,
    tenants: BTreeMap<String, TenantRecord>,
    mcp_servers: BTreeMap<(String, String), McpServerRecord>,
    /// Answers to forwarded requests, by request id.
    replies: BTreeMap<String, serde_json::Value>,
    stats: StoreStats,
    closed: bool,
}

/// A store in memory; see the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct MemStore {
    state: Arc<Mutex<State>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops taking commits, as a closed database would; reads go on.
    pub fn close(&self) {
        self.state().closed = true;
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a batch half
        // applied in a way later readers could see wrongly: ops are applied
        // by infallible map writes.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read<'a, T: Send + 'a>(&self, read: impl FnOnce(&State) -> T) -> BoxFuture<'a, StoreResult<T>> {
        ready(Ok(read(&self.state())))
    }
}

/// The entries of one session in a per-session map.
fn of_session<'m, K: Ord + Clone, V>(
    map: &'m PerSession<K, V>,
    key: &str,
    from: K,
) -> impl Iterator<Item = (&'m K, &'m V)> + 'm {
    let key = key.to_owned();
    map.range((key.clone(), from)..).take_while(move |((session, _), _)| *session == key).map(|((_, k), v)| (k, v))
}

impl State {
    fn apply(&mut self, op: Op) {
        match op {
            Op::PutSession(record) => {
                self.sessions.insert(record.key.clone(), *record);
            }
            Op::PutMessage { session, seq, record } => {
                self.messages.insert((session.storage_key(), seq), record);
            }
            Op::PutStep { session, seq, record } => {
                self.steps.insert((session.storage_key(), seq), *record);
            }
            Op::PutCall { session, record } | Op::UpdateCall { session, record } => {
                self.calls.insert((session.storage_key(), record.call.id.clone()), *record);
            }
            Op::DeleteCall { session, call_id } => {
                self.calls.remove(&(session.storage_key(), call_id));
            }
            Op::PutEvent { session, seq, record } => {
                self.events.insert((session.storage_key(), seq), record);
            }
            Op::PutTurn { session, turn_id, record } => {
                self.turns.insert((session.storage_key(), turn_id), record);
            }
            Op::PushInbox { session, item } => {
                let seq = self.next_inbox;
                self.next_inbox += 1;
                self.inbox.insert((session.storage_key(), seq), *item);
            }
            Op::DeleteInbox { session, seq } => {
                self.inbox.remove(&(session.storage_key(), seq));
            }
            Op::PutAgent(record) => {
                self.agents.insert((record.tenant.clone(), record.agent_id.clone()), record);
            }
            Op::DeleteAgent { tenant, agent_id } => {
                self.decisions.retain(|(t, a, _), _| !(*t == tenant && *a == agent_id));
                self.agents.remove(&(tenant, agent_id));
            }
            Op::CountDecisions { tenant, agent_id, version, decisions } => {
                let count = self.decisions.entry((tenant, agent_id, version)).or_default();
                *count = count.saturating_add(decisions);
            }
            Op::PutKey(record) => {
                self.keys.insert((record.tenant.clone(), record.hash.clone()), record);
            }
            Op::DeleteKey { tenant, hash } => {
                self.keys.remove(&(tenant, hash));
            }
            Op::PutTenant(record) => {
                self.tenants.insert(record.tenant.clone(), record);
            }
            Op::PutMcpServer(record) => {
                self.mcp_servers.insert((record.tenant.clone(), record.name.clone()), record);
            }
            Op::DeleteMcpServer { tenant, name } => {
                self.mcp_servers.remove(&(tenant, name));
            }
            Op::DeleteTenant { tenant } => {
                self.tenants.remove(&tenant);
            }
            Op::PutReply { id, reply } => {
                self.replies.insert(id, reply);
            }
            Op::DeleteReply { id } => {
                self.replies.remove(&id);
            }
        }
    }
}

impl Store for MemStore {
    fn commit(&self, batch: Batch) -> BoxFuture<'_, StoreResult<()>> {
        let mut state = self.state();
        if state.closed {
            return ready(Err(StoreError::Closed));
        }
        if batch.is_empty() {
            return ready(Ok(()));
        }
        for op in batch.ops {
            state.apply(op);
        }
        state.stats.batches += 1;
        state.stats.commits += 1;
        ready(Ok(()))
    }

    fn session<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionRecord>>> {
        self.read(|s| s.sessions.get(key).cloned())
    }

    fn sessions<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        self.read(|s| s.sessions.values().filter(|r| tenant.is_none_or(|t| r.key.tenant == t)).cloned().collect())
    }

    fn sessions_of_identity<'a>(
        &'a self,
        tenant: &'a str,
        identity: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        use std::ops::Bound;
        self.read(|s| {
            let from = SessionKey::new(tenant, after.unwrap_or_default());
            let from = if after.is_some() { Bound::Excluded(from) } else { Bound::Included(from) };
            s.sessions
                .range((from, Bound::Unbounded))
                .take_while(|(key, _)| key.tenant == tenant)
                .filter(|(_, record)| record.identity.id.as_deref() == Some(identity))
                .take(limit)
                .map(|(_, record)| record.clone())
                .collect()
        })
    }

    fn unfinished(&self) -> BoxFuture<'_, StoreResult<Vec<SessionKey>>> {
        self.read(|s| {
            let active = s.sessions.values().filter(|r| r.status != SessionStatus::Idle).map(|r| r.key.clone());
            let waiting = s.inbox.keys().filter_map(|(session, _)| SessionKey::from_storage_key(session));
            active.chain(waiting).collect::<BTreeSet<_>>().into_iter().collect()
        })
    }

    fn messages<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, MessageRecord)>>> {
        self.read(|s| of_session(&s.messages, &key.storage_key(), 0).map(|(k, v)| (*k, v.clone())).collect())
    }

    fn steps<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        self.read(|s| {
            of_session(&s.steps, &key.storage_key(), from).take(limit).map(|(k, v)| (*k, v.clone())).collect()
        })
    }

    fn calls<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        self.read(|s| of_session(&s.calls, &key.storage_key(), String::new()).map(|(_, v)| v.clone()).collect())
    }

    fn agents<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<AgentRecord>>> {
        self.read(|s| s.agents.values().filter(|a| tenant.is_none_or(|t| a.tenant == t)).cloned().collect())
    }

    fn agent<'a>(&'a self, tenant: &'a str, agent_id: &'a str) -> BoxFuture<'a, StoreResult<Option<AgentRecord>>> {
        self.read(|s| s.agents.get(&(tenant.to_owned(), agent_id.to_owned())).cloned())
    }

    fn decision_counts<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, StoreResult<BTreeMap<String, u64>>> {
        self.read(|s| {
            s.decisions
                .iter()
                .filter(|((t, a, _), _)| t == tenant && a == agent_id)
                .map(|((_, _, version), n)| (version.clone(), *n))
                .collect()
        })
    }

    fn keys(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>> {
        self.read(|s| s.keys.values().cloned().collect())
    }

    fn tenants(&self) -> BoxFuture<'_, StoreResult<Vec<TenantRecord>>> {
        self.read(|s| s.tenants.values().cloned().collect())
    }

    fn mcp_servers(&self) -> BoxFuture<'_, StoreResult<Vec<McpServerRecord>>> {
        self.read(|s| s.mcp_servers.values().cloned().collect())
    }

    fn events<'a>(
        &'a self,
        key: &'a SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, EventRecord)>>> {
        let from = after.map_or(0, |after| after.saturating_add(1));
        self.read(|s| {
            let events = of_session(&s.events, &key.storage_key(), from);
            // `after == u64::MAX` has nothing after it; saturating would
            // otherwise return the last event again.
            events
                .filter(|(seq, _)| after.is_none_or(|a| **seq > a))
                .take(limit)
                .map(|(k, v)| (*k, v.clone()))
                .collect()
        })
    }

    fn turn<'a>(&'a self, key: &'a SessionKey, turn_id: &'a str) -> BoxFuture<'a, StoreResult<Option<TurnRecord>>> {
        self.read(|s| s.turns.get(&(key.storage_key(), turn_id.to_owned())).cloned())
    }

    fn inbox<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, InboxItem)>>> {
        self.read(|s| of_session(&s.inbox, &key.storage_key(), 0).map(|(k, v)| (*k, v.clone())).collect())
    }

    fn reply<'a>(&'a self, id: &'a str) -> BoxFuture<'a, StoreResult<Option<serde_json::Value>>> {
        self.read(|s| s.replies.get(id).cloned())
    }
}

impl StoreAdmin for MemStore {
    fn stats(&self) -> StoreResult<StoreStats> {
        let state = self.state();
        if state.closed {
            return Err(StoreError::Closed);
        }
        Ok(state.stats)
    }

    fn stored_bytes(&self) -> BoxFuture<'_, StoreResult<u64>> {
        self.read(|s| {
            let size = |v: &dyn erased::Json| v.json_len();
            let mut bytes = 0;
            bytes += s.sessions.values().map(|v| size(v)).sum::<u64>();
            bytes += s.messages.values().map(|v| size(v)).sum::<u64>();
            bytes += s.steps.values().map(|v| size(v)).sum::<u64>();
            bytes += s.calls.values().map(|v| size(v)).sum::<u64>();
            bytes += s.events.values().map(|v| size(v)).sum::<u64>();
            bytes += s.turns.values().map(|v| size(v)).sum::<u64>();
            bytes += s.inbox.values().map(|v| size(v)).sum::<u64>();
            bytes += s.agents.values().map(|v| size(v)).sum::<u64>();
            bytes += s.keys.values().map(|v| size(v)).sum::<u64>();
            bytes += s.tenants.values().map(|v| size(v)).sum::<u64>();
            bytes += s.replies.values().map(|v| size(v)).sum::<u64>();
            bytes
        })
    }
}

/// Sizes records of any type as their JSON, the encoding a backend stores.
mod erased {
    /// A record whose JSON length can be asked for behind `dyn`.
    pub(super) trait Json {
        fn json_len(&self) -> u64;
    }

    impl<T: serde::Serialize> Json for T {
        fn json_len(&self) -> u64 {
            serde_json::to_vec(self).map_or(0, |v| v.len() as u64)
        }
    }
}
