//! Reads of sessions, as stored and as they run.

use std::sync::Arc;

use super::{ReadPermit, SharedSnapshot, Snapshot};
use crate::events::{Event, Subscription, TooManyStreams};
use crate::model::Money;
use crate::session::Tree;
use crate::session::directory::Directory;
use crate::session::env::Env;
use crate::store::{CallRecord, SessionHead, SessionKey, SessionRecord, StepRecord, StoreError, TurnRecord};
use subs_protocol::SharedMessage;

/// Reads of sessions ([`Engine::reads`](crate::Engine::reads)): what is
/// stored (snapshots, steps, events, turns, pages of sessions) and what
/// is live (subscriptions, streams open). It reaches the store through its
/// read methods only. Cheap to clone.
#[derive(Clone)]
pub struct Reads {
    pub(super) env: Arc<Env>,
    pub(super) directory: Arc<Directory>,
}

impl Reads {
    /// Sessions with an actor in memory (work in flight, or just touched).
    pub fn active_sessions(&self) -> usize {
        self.directory.active()
    }

    /// The session as stored, every message copied out: see
    /// [`shared_snapshot`](Self::shared_snapshot), which copies none.
    /// Counts as one of the tenant's whole-session reads until the copy
    /// is made.
    pub async fn snapshot(&self, tenant: &str, session: &str) -> Result<Option<Snapshot>, StoreError> {
        let Some(shared) = self.shared_snapshot(tenant, session).await? else { return Ok(None) };
        let SharedSnapshot { record, messages, message_tree, calls, read } = shared;
        let full = message_tree
            .to_tree(&messages)
            .map_err(|e| StoreError::Corrupt { table: "messages", message: e.to_string() })?;
        drop(message_tree);
        let messages = messages.into_iter().map(SharedMessage::into_message).collect();
        drop(read);
        Ok(Some(Snapshot { record, messages, message_tree: full, calls }))
    }

    /// The session as stored, its messages read once and shared between
    /// the active path and the tree. Waits while the tenant has its
    /// bound of whole-session reads running (see
    /// [`set_tenant_max_session_reads`](Self::set_tenant_max_session_reads));
    /// the snapshot counts as one until it is dropped, so a snapshot held
    /// while it is written out to a slow client keeps counting.
    pub async fn shared_snapshot(&self, tenant: &str, session: &str) -> Result<Option<SharedSnapshot>, StoreError> {
        let read = ReadPermit(self.env.history.read_permit(tenant).await);
        let key = SessionKey::new(tenant, session);
        let store = self.env.store.as_ref();
        // One read: the record, messages and calls of one state, even
        // while the session's actor commits.
        let Some(loaded) = store.load(&key).await? else { return Ok(None) };
        let tree = Tree::from_records(loaded.messages.into_iter().map(|(_, r)| r));
        let (messages, message_tree) = tree.for_request(loaded.record.head_id.as_deref());
        let mut calls = loaded.calls;
        calls.sort_by_key(|c| c.order);
        Ok(Some(SharedSnapshot { record: loaded.record, messages, message_tree, calls, read }))
    }

    /// Waits until `tenant` may start one more whole-session read (see
    /// [`set_tenant_max_session_reads`](Self::set_tenant_max_session_reads)):
    /// for reads other than snapshots that hold as much (a page of a
    /// session's decisions), to be kept while the read's answer is built
    /// and written out.
    pub async fn session_read(&self, tenant: &str) -> ReadPermit {
        ReadPermit(self.env.history.read_permit(tenant).await)
    }

    /// At most `limit` of the session's steps from number `from` on, fewer
    /// when they pass `max_bytes` of stored JSON (see
    /// [`Store::steps_page`](crate::store::Store::steps_page)): what an
    /// inspector shows of its decisions.
    pub async fn steps(
        &self,
        tenant: &str,
        session: &str,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<(u64, StepRecord)>, StoreError> {
        self.env.store.steps_page(&SessionKey::new(tenant, session), from, limit, max_bytes).await
    }

    /// The session's calls in flight whose ids are among `ids`, in id
    /// order (see [`Store::calls_named`](crate::store::Store::calls_named)).
    pub async fn calls_named(
        &self,
        tenant: &str,
        session: &str,
        ids: &[String],
    ) -> Result<Vec<CallRecord>, StoreError> {
        self.env.store.calls_named(&SessionKey::new(tenant, session), ids).await
    }

    /// At most `limit` sessions of `tenant` with ids after `after` (from
    /// the first when `None`), ordered by id.
    pub async fn sessions_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.env.store.sessions_page(tenant, after, limit).await
    }

    /// At most `limit` sessions of `tenant` owned by `identity` (their
    /// identity's id), with ids after `after`, ordered by id: see
    /// [`Store::sessions_of_identity`](crate::store::Store::sessions_of_identity).
    pub async fn sessions_of_identity(
        &self,
        tenant: &str,
        identity: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.env.store.sessions_of_identity(tenant, identity, after, limit).await
    }

    /// How many sessions `tenant` has, spawned ones included. Counted in
    /// the store once per tenant, then kept in memory as sessions are
    /// created, so checking a quota on every new session costs nothing.
    pub async fn session_count(&self, tenant: &str) -> Result<u64, StoreError> {
        self.env.tenants.sessions(tenant).await
    }

    /// Stored events of the session after sequence number `after`.
    pub async fn events(
        &self,
        tenant: &str,
        session: &str,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let key = SessionKey::new(tenant, session);
        Ok(self.env.store.events(&key, after, limit).await?.into_iter().map(|(seq, r)| Event::stored(seq, r)).collect())
    }

    /// Live events of the session from now on (stored ones and token
    /// deltas). Subscribe before reading stored events to miss nothing;
    /// stored events may then arrive twice, told apart by `seq`.
    ///
    /// A subscriber that falls behind by more than
    /// [`StreamLimits::subscriber_buffer_bytes`](crate::events::StreamLimits::subscriber_buffer_bytes) is dropped (its
    /// subscription ends with [`RecvError::Dropped`](crate::events::RecvError::Dropped));
    /// it catches up by subscribing again and reading the stored events
    /// after the last one it received. Refused when the tenant has
    /// [`StreamLimits::max_streams_per_tenant`](crate::events::StreamLimits::max_streams_per_tenant) subscriptions already.
    pub fn subscribe(&self, tenant: &str, session: &str) -> Result<Subscription, TooManyStreams> {
        self.env.hub.subscribe(&SessionKey::new(tenant, session))
    }

    /// The sequence number of the session's last stored event; `None`
    /// when it has none (or does not exist). What follows it belongs to
    /// what is sent next.
    pub async fn last_event(&self, tenant: &str, session: &str) -> Result<Option<u64>, StoreError> {
        let record = self.env.store.session(&SessionKey::new(tenant, session)).await?;
        Ok(record.and_then(|r| r.next.event.checked_sub(1)))
    }

    /// The event streams (subscriptions) `tenant` has open.
    pub fn open_streams(&self, tenant: &str) -> usize {
        self.env.hub.streams(tenant)
    }

    /// Bytes of events queued for `tenant`'s subscribers, not yet taken by
    /// them: what the tenant's streaming holds in the engine. At most
    /// [`StreamLimits::max_streams_per_tenant`](crate::events::StreamLimits::max_streams_per_tenant) ×
    /// [`StreamLimits::subscriber_buffer_bytes`](crate::events::StreamLimits::subscriber_buffer_bytes), but for single events
    /// larger than a buffer.
    pub fn queued_stream_bytes(&self, tenant: &str) -> usize {
        self.env.hub.queued_bytes(tenant)
    }

    /// A turn as stored.
    pub async fn turn(&self, tenant: &str, session: &str, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.env.store.turn(&SessionKey::new(tenant, session), turn_id).await
    }

    /// Waits until the turn has ended and returns it.
    pub async fn wait_turn(&self, tenant: &str, session: &str, turn_id: &str) -> Result<TurnRecord, StoreError> {
        self.env.wait_turn(&SessionKey::new(tenant, session), turn_id).await
    }

    /// What `tenant`'s sessions have spent on LLM calls.
    pub async fn tenant_spent(&self, tenant: &str) -> Result<Money, StoreError> {
        self.env.tenants.spent(tenant).await
    }

    /// The stored record of `tenant`'s session `session`: what the API
    /// answers about it (budget, cost, where its events are) without
    /// loading it. `None` when the tenant has no such session.
    pub async fn session_record(&self, tenant: &str, session: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.env.store.session(&SessionKey::new(tenant, session)).await
    }

    /// The head of `tenant`'s session `session` (whose it is, where its
    /// events are), read without decoding the rest of its record: what a
    /// route checks before it acts on the session. `None` when the tenant
    /// has no such session.
    pub async fn session_head(&self, tenant: &str, session: &str) -> Result<Option<SessionHead>, StoreError> {
        self.env.store.session_head(&SessionKey::new(tenant, session)).await
    }

    /// Whether `tenant` has a session `session`: routes on a session that
    /// does not exist answer 404 rather than creating or waiting on it.
    pub async fn session_exists(&self, tenant: &str, session: &str) -> Result<bool, StoreError> {
        Ok(self.session_head(tenant, session).await?.is_some())
    }

    /// The ids of `tenant`'s sessions with work left (not idle, or with
    /// items in their inbox): those whose turns deleting the tenant must
    /// cancel.
    pub async fn unfinished_sessions(&self, tenant: &str) -> Result<Vec<String>, StoreError> {
        let unfinished = self.env.store.unfinished().await?;
        Ok(unfinished.into_iter().filter(|key| key.tenant == tenant).map(|key| key.session).collect())
    }
}
