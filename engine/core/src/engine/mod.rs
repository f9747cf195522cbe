//! The engine: sessions, their actors, the agents that decide for them,
//! and the models they call.

use std::sync::Arc;

use subs_protocol::{ClientInput, Message, MessageTree, RequestTree, SharedMessage, WorkerIdentity};
use tokio::sync::oneshot;

pub use crate::config::{DecisionBounds, EngineConfig, SpawnBounds};
use crate::events::{Event, Subscription, TooManyStreams};
use crate::model::{Models, Money};
use crate::session::Tree;
use crate::session::actor::Msg;
pub use crate::session::apply::{Accepted, InputError, Sender};
use crate::session::directory::Directory;
use crate::session::env::Env;
pub use crate::session::history::{DEFAULT_MAX_SESSION_BYTES, DEFAULT_MAX_SESSION_READS};
use crate::store::{
    CallRecord, ID_RULE, SessionKey, SessionRecord, StepRecord, Store, StoreError, TurnRecord, valid_id,
};
use crate::worker::Worker;

/// A session as clients see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The stored record (status, agent, state, ancestry, identity, …).
    pub record: SessionRecord,
    /// The active path.
    pub messages: Vec<Message>,
    /// Every message.
    pub message_tree: MessageTree,
    /// The open turn's calls, in the order they were made: queued, in
    /// flight, and settled (until the turn ends).
    pub calls: Vec<CallRecord>,
}

impl Snapshot {
    /// The tool calls the session waits for a client to answer (with
    /// `tool.result` or `tool.error`): pending calls of client tools.
    pub fn waiting_client_calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.calls.iter().filter(|c| {
            c.call.kind == subs_protocol::CallKind::ToolCall
                && c.call.handler == Some(subs_protocol::Handler::Client)
                && c.call.status == subs_protocol::CallStatus::Pending
        })
    }
}

/// A session as clients see it, its messages shared rather than copied:
/// the active path's handles and the tree whose path nodes refer to them
/// (written out in full with [`subs_protocol::FullTree`]). Holds one of
/// the tenant's whole-session reads until dropped.
#[derive(Debug)]
pub struct SharedSnapshot {
    /// The stored record.
    pub record: SessionRecord,
    /// The active path, shared with the session's tree.
    pub messages: Vec<SharedMessage>,
    /// Every message: the path's nodes refer to `messages`.
    pub message_tree: RequestTree,
    /// The open turn's calls, in the order they were made.
    pub calls: Vec<CallRecord>,
    /// The tenant's whole-session read this snapshot is: keep it as long
    /// as the snapshot's messages are held (while it is written out).
    pub read: ReadPermit,
}

/// One of a tenant's whole-session reads, running until dropped.
#[derive(Debug)]
pub struct ReadPermit(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit);

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store could not list the sessions to resume.
    #[error("the sessions to resume could not be listed: {0}")]
    Store(#[from] StoreError),
}

/// The engine. Cheap to clone; all clones drive the same sessions.
#[derive(Clone)]
pub struct Engine {
    /// What the sessions work with.
    env: Arc<Env>,
    /// The sessions' running actors.
    directory: Arc<Directory>,
    /// When the store is shared: the tasks hearing other nodes and taking
    /// sessions over, and the count of record changes heard.
    cluster: Arc<Cluster>,
}

/// The background of a node sharing its store with others.
struct Cluster {
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    records: tokio::sync::watch::Sender<u64>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for task in self.tasks.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            task.abort();
        }
    }
}

impl Engine {
    /// Starts an engine on `store` and resumes every session that was not
    /// idle when the store was last written.
    ///
    /// Resumed sessions deliver at once, so an agent registered after this
    /// can miss their first delivery (a failed try, counted against the
    /// retry policy). Where agents are known at start, [`Engine::open`],
    /// register them, then [`Engine::resume`].
    pub async fn start(store: Arc<dyn Store>, models: Models, config: EngineConfig) -> Result<Self, StartError> {
        let engine = Self::open(store, models, config);
        engine.resume().await?;
        Ok(engine)
    }

    /// An engine on `store` that runs nothing until [`Engine::resume`] (or
    /// an input) wakes a session.
    ///
    /// On a store several nodes share, [`resume`](Self::resume) also
    /// starts hearing the other nodes and taking over the sessions of
    /// nodes that died (see docs/deployment.md).
    pub fn open(store: Arc<dyn Store>, models: Models, config: EngineConfig) -> Self {
        let env = Arc::new(Env::new(store, models, config));
        let directory = Directory::new(env.clone());
        let (records, _) = tokio::sync::watch::channel(0);
        let cluster = Arc::new(Cluster { tasks: std::sync::Mutex::default(), records });
        Engine { directory, env, cluster }
    }

    /// Counts the changes other nodes made to agents, keys and tenants
    /// (on a shared store; it never moves otherwise): whatever keeps them
    /// in memory reloads them when it moves.
    pub fn records_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.cluster.records.subscribe()
    }

    /// This node's name, when several nodes share the store.
    pub fn node(&self) -> Option<&str> {
        self.env.store.shared().map(|s| s.node())
    }

    /// The store the engine runs on: for the engine's own parts (the
    /// agent registry in `subs-engine`, the records of tenants and keys);
    /// nothing outside the engine writes to it.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.env.store
    }

    /// Resumes every session with work left: not idle, or with items in
    /// its inbox. On a shared store, only those no live node acts for
    /// (their node died, or they never had one); the others go on where
    /// they are.
    ///
    /// The sessions are listed here, and resumed in the background a few
    /// at a time ([`EngineConfig::resume_concurrency`] working at once),
    /// so that this returns at once and a store full of unfinished
    /// sessions is not loaded and run all at the same moment. Spawns of
    /// resumed sessions are held to the tenants' bounds as any others.
    pub async fn resume(&self) -> Result<(), StartError> {
        if let Some(shared) = self.store().shared() {
            // Started here, not at `open`: the sessions they wake must find
            // their agents, registered in between.
            {
                let mut tasks = self.cluster.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if tasks.is_empty() {
                    let (env, directory, records) =
                        (self.env.clone(), self.directory.clone(), self.cluster.records.clone());
                    tasks.extend(crate::cluster::start(env, directory, records, self.env.config.takeover_scan));
                }
            }
            let orphans = shared.orphans(usize::MAX).await?;
            self.resume_in_background(orphans.into_iter().map(|o| (o.key, o.crashed)).collect());
            return Ok(());
        }
        let unfinished = self.store().unfinished().await?;
        self.resume_in_background(unfinished.into_iter().map(|key| (key, true)).collect());
        Ok(())
    }

    /// Resumes `sessions` (each with whether its node stopped without
    /// finishing it) through the directory's permits, in a task that
    /// [`kill`](Self::kill) stops.
    fn resume_in_background(&self, sessions: Vec<(SessionKey, bool)>) {
        if sessions.is_empty() {
            return;
        }
        tracing::info!(sessions = sessions.len(), "resuming sessions with work left");
        let directory = self.directory.clone();
        let task = tokio::spawn(async move {
            for (key, crashed) in sessions {
                tracing::debug!(session = %key, crashed, "resuming");
                directory.resume(&key, crashed).await;
            }
        });
        self.cluster.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(task);
    }

    /// Makes `worker` the agent `agent_id` of `tenant`. Sessions waiting for
    /// it are not retried early; their next delivery finds it.
    pub fn register_agent(&self, tenant: &str, agent_id: &str, worker: Arc<dyn Worker>) {
        self.env.agents.register(tenant, agent_id, worker);
    }

    /// Removes the agent `agent_id` of `tenant`; its sessions' deliveries
    /// fail (at once: no agent is not worth a retry) until it is
    /// registered again.
    pub fn unregister_agent(&self, tenant: &str, agent_id: &str) {
        self.env.agents.unregister(tenant, agent_id);
    }

    /// Sets the most `tenant`'s sessions may spend on engine-run LLM calls
    /// in all (`None`: no limit, whatever the default). Once spent,
    /// further calls fail with `budget_exceeded` before they are sent.
    pub fn set_tenant_budget(&self, tenant: &str, budget: Option<Money>) {
        self.env.tenants.set_budget(tenant, budget);
    }

    /// Forgets `tenant`'s own budget, session limit, spawn and decision
    /// bounds and bounds on its sessions' messages and reads: the defaults
    /// apply to it again.
    pub fn clear_tenant_limits(&self, tenant: &str) {
        self.env.tenants.clear(tenant);
        self.env.history.set_max_bytes(tenant, None);
        self.env.history.set_max_reads(tenant, None);
    }

    /// Sets (or removes) the budget of every tenant that has none of its
    /// own (see [`set_tenant_budget`](Self::set_tenant_budget)).
    pub fn set_default_tenant_budget(&self, budget: Option<Money>) {
        self.env.tenants.set_default_budget(budget);
    }

    /// Sets how many sessions `tenant` may have (`None`: no limit,
    /// whatever the default). An input that would create one more is refused
    /// ([`InputError::LimitExceeded`]), and so is an agent's spawn of a
    /// sub-agent session (its call fails, and the agent is told why).
    pub fn set_tenant_session_limit(&self, tenant: &str, max: Option<u64>) {
        self.env.tenants.set_session_limit(tenant, max);
    }

    /// Sets (or removes) the session limit of every tenant that has none of
    /// its own (see [`set_tenant_session_limit`](Self::set_tenant_session_limit)).
    pub fn set_default_session_limit(&self, max: Option<u64>) {
        self.env.tenants.set_default_session_limit(max);
    }

    /// Sets what `tenant`'s agents may spawn: children per turn, depth,
    /// sessions per tree. A spawn past them fails its call, and the agent
    /// is told which bound it met.
    pub fn set_tenant_spawn_bounds(&self, tenant: &str, bounds: SpawnBounds) {
        self.env.tenants.set_spawn_bounds(tenant, bounds);
    }

    /// Sets the spawn bounds of every tenant that has none of its own
    /// (see [`set_tenant_spawn_bounds`](Self::set_tenant_spawn_bounds));
    /// [`SpawnBounds::default`] until set.
    pub fn set_default_spawn_bounds(&self, bounds: SpawnBounds) {
        self.env.tenants.set_default_spawn_bounds(bounds);
    }

    /// The spawn bounds that apply to `tenant`.
    pub fn tenant_spawn_bounds(&self, tenant: &str) -> SpawnBounds {
        self.env.tenants.bounds(tenant)
    }

    /// Sets what one decision of `tenant`'s agents may start and what one
    /// of its turns may hold (see [`DecisionBounds`]).
    pub fn set_tenant_decision_bounds(&self, tenant: &str, bounds: DecisionBounds) {
        self.env.tenants.set_decision_bounds(tenant, bounds);
    }

    /// Sets the decision bounds of every tenant that has none of its own
    /// (see [`set_tenant_decision_bounds`](Self::set_tenant_decision_bounds));
    /// [`DecisionBounds::default`] until set.
    pub fn set_default_decision_bounds(&self, bounds: DecisionBounds) {
        self.env.tenants.set_default_decision_bounds(bounds);
    }

    /// The decision bounds that apply to `tenant`.
    pub fn tenant_decision_bounds(&self, tenant: &str) -> DecisionBounds {
        self.env.tenants.decision_bounds(tenant)
    }

    /// The budget that applies to `tenant`, if any.
    pub fn tenant_budget(&self, tenant: &str) -> Option<Money> {
        self.env.tenants.budget(tenant)
    }

    /// What `tenant`'s sessions have spent on LLM calls.
    pub async fn tenant_spent(&self, tenant: &str) -> Result<Money, StoreError> {
        self.env.tenants.spent(tenant).await
    }

    /// Sets (or removes) a session's budget. Raising a spent budget makes
    /// the session usable again: its next turn's calls are sent.
    pub async fn set_session_budget(
        &self,
        tenant: &str,
        session: &str,
        budget: Option<Money>,
    ) -> Result<(), InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.directory.send(&key, Msg::SetBudget { budget, reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// Sessions with an actor in memory (work in flight, or just touched).
    pub fn active_sessions(&self) -> usize {
        self.directory.active()
    }

    /// Takes a client input for session `session` of `tenant`; the input
    /// is stored when this returns `Ok`.
    pub async fn input(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        identity: WorkerIdentity,
    ) -> Result<Accepted, InputError> {
        // The default identity is no owner at all: it reaches any session.
        let identity = Some(identity).filter(|i| *i != WorkerIdentity::default());
        self.input_from(tenant, session, input, Sender::Tenant { key: None, identity }).await
    }

    /// Sends an input for `sender`, whose right to the session the
    /// session's actor checks against the session's owner in the same
    /// step that accepts the input (so two inputs creating the same
    /// session at once cannot both pass a check made before).
    pub async fn input_from(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        sender: Sender,
    ) -> Result<Accepted, InputError> {
        self.input_traced(tenant, session, input, sender, None).await
    }

    /// [`input_from`](Self::input_from) an input that came with a W3C
    /// `traceparent` (read with [`telemetry::parse_traceparent`](crate::telemetry::parse_traceparent)):
    /// the turn it starts is traced as a child of `trace`, and the
    /// decisions and calls of that turn pass the trace on to HTTP workers
    /// and LLM providers.
    pub async fn input_traced(
        &self,
        tenant: &str,
        session: &str,
        input: ClientInput,
        sender: Sender,
        trace: Option<crate::telemetry::SpanRef>,
    ) -> Result<Accepted, InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        self.env.metrics.input_sent();
        if !self.directory.send(&key, Msg::Input { input: Box::new((input, sender, trace)), reply }) {
            self.env.metrics.input_taken();
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// The engine's metrics in Prometheus' text format, appended to `out`.
    pub fn encode_metrics(&self, out: &mut String) {
        self.env.metrics.encode(self.active_sessions(), out);
    }

    /// Stops the session's open turn: calls in flight are cancelled, the
    /// turn ends with `turn.failed` (code `cancelled`). Returns whether a
    /// turn was open.
    pub async fn cancel(&self, tenant: &str, session: &str) -> Result<bool, InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.directory.send(&key, Msg::Cancel { reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
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

    /// Sets the bytes of messages a session of `tenant` may store
    /// (`None`: the default, [`set_default_max_session_bytes`](Self::set_default_max_session_bytes)).
    /// A decision whose messages would take a session past it is refused
    /// and its turn fails, naming the bound; a client's input likewise is
    /// refused ([`InputError::LimitExceeded`]), with nothing of it stored.
    pub fn set_tenant_max_session_bytes(&self, tenant: &str, max: Option<u64>) {
        self.env.history.set_max_bytes(tenant, max);
    }

    /// Sets the bytes of messages a session may store for tenants without
    /// their own bound; 32 MiB until set.
    pub fn set_default_max_session_bytes(&self, max: u64) {
        self.env.history.set_default_max_bytes(max);
    }

    /// The bytes of messages a session of `tenant` may store.
    pub fn max_session_bytes(&self, tenant: &str) -> u64 {
        self.env.history.max_bytes(tenant)
    }

    /// Sets how many whole-session reads ([`snapshot`](Self::snapshot),
    /// [`shared_snapshot`](Self::shared_snapshot)) `tenant` may have
    /// running at once (`None`: the default); more wait their turn.
    pub fn set_tenant_max_session_reads(&self, tenant: &str, max: Option<usize>) {
        self.env.history.set_max_reads(tenant, max);
    }

    /// Sets the whole-session reads a tenant without its own bound may
    /// have running at once; 2 until set.
    pub fn set_default_max_session_reads(&self, max: usize) {
        self.env.history.set_default_max_reads(max);
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

    /// What the store has done: counters, cheap to read.
    pub fn store_stats(&self) -> Result<crate::store::StoreStats, StoreError> {
        self.env.store.stats()
    }

    /// The bytes of data the store holds. May walk the whole store and
    /// hold commits up meanwhile: see [`Store::stored_bytes`].
    pub async fn stored_bytes(&self) -> Result<u64, StoreError> {
        self.env.store.stored_bytes().await
    }

    /// Stops the engine at once, as a crash would: every session actor is
    /// aborted where it is, nothing more is written. Whatever was committed
    /// stays; a new engine on the same store resumes from there.
    pub async fn kill(self) {
        for task in self.cluster.tasks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
            task.abort();
        }
        self.directory.kill().await;
    }
}

fn checked_key(tenant: &str, session: &str) -> Result<SessionKey, InputError> {
    if !valid_id(session) {
        return Err(InputError::Invalid {
            message: format!("`{session}` is not a valid session id ({ID_RULE})"),
            field: Some("session_id".to_owned()),
        });
    }
    Ok(SessionKey::new(tenant, session))
}

#[cfg(test)]
mod tests {
    use subs_protocol::DraftMessage;
    use subs_protocol::client::ClientMessage;

    use super::*;
    use crate::store::MemStore;

    fn engine() -> Engine {
        Engine::open(Arc::new(MemStore::new()), Models::with_offline(), EngineConfig::default())
    }

    fn hello() -> ClientInput {
        ClientInput::ClientMessage(ClientMessage {
            agent_id: "agent".to_owned(),
            turn_id: None,
            message: DraftMessage::user("hi"),
            stream: None,
        })
    }

    #[tokio::test]
    async fn a_session_id_outside_the_id_rules_is_refused_naming_the_field() {
        let engine = engine();
        for bad in ["not\nvalid", "", &"x".repeat(subs_protocol::MAX_ID_BYTES + 1)] {
            let refused = engine.input("acme", bad, hello(), WorkerIdentity::default()).await;
            let Err(InputError::Invalid { message, field }) = refused else {
                panic!("refused as invalid: {refused:?}")
            };
            assert_eq!(field.as_deref(), Some("session_id"));
            assert!(message.contains(ID_RULE), "{message}");
            assert_eq!(engine.active_sessions(), 0, "no actor for an invalid id");
        }
        // `/`, spaces and unicode are an id like any other.
        let accepted = engine.input("acme", "is/valid ü", hello(), WorkerIdentity::default()).await;
        assert!(accepted.is_ok(), "{accepted:?}");
    }

    #[tokio::test]
    async fn a_session_never_created_has_no_snapshot_turn_or_events() {
        let engine = engine();
        assert!(engine.snapshot("acme", "s").await.unwrap().is_none());
        assert!(engine.turn("acme", "s", "t").await.unwrap().is_none());
        assert!(engine.events("acme", "s", None, 10).await.unwrap().is_empty());
        assert_eq!(engine.last_event("acme", "s").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_killed_engine_takes_no_more_input() {
        let engine = engine();
        let clone = engine.clone();
        engine.kill().await;
        let refused = clone.input("acme", "s", hello(), WorkerIdentity::default()).await;
        assert!(matches!(refused, Err(InputError::ShuttingDown)), "{refused:?}");
        assert!(matches!(clone.cancel("acme", "s").await, Err(InputError::ShuttingDown)));
        assert_eq!(clone.active_sessions(), 0);
    }

    #[tokio::test]
    async fn tenant_limits_set_through_the_engine_apply_and_clear() {
        let engine = engine();
        let five: Money = "5".parse().unwrap();
        engine.set_default_tenant_budget(Some(five));
        engine.set_tenant_budget("exempt", None);
        assert_eq!(engine.tenant_budget("acme"), Some(five));
        assert_eq!(engine.tenant_budget("exempt"), None);
        engine.clear_tenant_limits("exempt");
        assert_eq!(engine.tenant_budget("exempt"), Some(five));

        engine.set_tenant_session_limit("acme", Some(0));
        let refused = engine.input("acme", "s", hello(), WorkerIdentity::default()).await;
        assert!(matches!(refused, Err(InputError::LimitExceeded(_))), "{refused:?}");
        assert_eq!(engine.session_count("acme").await.unwrap(), 0);
    }
}
