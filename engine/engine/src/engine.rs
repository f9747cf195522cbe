//! The engine: sessions, their actors, the agents that decide for them,
//! and the models they call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use subs_protocol::{ClientInput, ErrorCode, LlmRequest, Message, MessageTree, RetryPolicy, WorkerIdentity};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::events::{Event, StreamLimits, Subscription, TooManyStreams};
use crate::model::{Models, Money, OFFLINE_MODEL};
use crate::retry::RetryCap;
use crate::session::Tree;
use crate::session::actor::{Actor, Msg};
use crate::session::apply::Outcome;
pub use crate::session::apply::{Accepted, InputError};
use crate::store::{CallRecord, SessionKey, SessionRecord, Store, StoreError, TurnRecord, TurnStatus, valid_id};
use crate::worker::{DeltaSink, Worker};

/// How the engine behaves where agents say nothing.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The model proposed at `session.start` and used by `llm.call`s when
    /// neither the call nor the config names one.
    pub default_model: String,
    /// Retries of deliveries and LLM calls when the agent's config sets no
    /// `retry`.
    pub default_retry: RetryPolicy,
    /// The most any retry policy (the agent's, a call's, the default) may
    /// ask for.
    pub retry_cap: RetryCap,
    /// How long one delivery may take when the retry policy sets no
    /// `timeout_secs`.
    pub decision_timeout: Duration,
    /// Whether LLM calls stream token deltas when neither the call nor the
    /// agent's config says (`subs run` turns it on to show tokens as they
    /// come).
    pub default_stream: bool,
    /// What streaming may hold: the size and rate of deltas, subscribers'
    /// buffers, and how many event streams a tenant may have open.
    pub streams: StreamLimits,
    /// Where the loop reads the time: the system's clock, or in tests one
    /// that follows tokio's paused time (see [`crate::clock`]).
    pub clock: Arc<dyn crate::clock::Clock>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            default_model: OFFLINE_MODEL.to_owned(),
            default_retry: RetryPolicy {
                timeout_secs: None,
                max_retries: 2,
                backoff_base_secs: 0.5,
                backoff_max_secs: 10.0,
            },
            retry_cap: RetryCap::default(),
            decision_timeout: Duration::from_secs(60),
            default_stream: false,
            streams: StreamLimits::default(),
            clock: Arc::new(crate::clock::SystemClock),
        }
    }
}

/// A session as clients see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// The stored record (status, agent, state, ancestry, identity, …).
    pub record: SessionRecord,
    /// The active path.
    pub messages: Vec<Message>,
    /// Every message.
    pub message_tree: MessageTree,
    /// Calls in flight.
    pub calls: Vec<CallRecord>,
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store could not list the sessions to resume.
    #[error("the sessions to resume could not be listed: {0}")]
    Store(#[from] StoreError),
}

/// The running session actors: where to send, and the task to abort.
type ActorMap = HashMap<SessionKey, (mpsc::UnboundedSender<Msg>, JoinHandle<()>)>;

pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub models: Models,
    pub config: EngineConfig,
    pub hub: crate::events::Hub,
    agents: RwLock<HashMap<(String, String), Arc<dyn Worker>>>,
    actors: Mutex<ActorMap>,
    closed: std::sync::atomic::AtomicBool,
    /// What each tenant's engine-run LLM calls may cost in all.
    budgets: PerTenant<Money>,
    /// How many sessions each tenant may have.
    session_limits: PerTenant<u64>,
    /// Sessions found unfinished at start and not loaded since: the first
    /// load counts a possibly cut-short delivery of their front step.
    recovering: Mutex<std::collections::HashSet<SessionKey>>,
    /// What each tenant's sessions have cost, summed from the store on
    /// first use and kept current as calls settle.
    spend: Mutex<HashMap<String, Money>>,
    /// How many sessions each tenant has, counted in the store on first
    /// use and kept current as sessions are created.
    session_counts: Mutex<HashMap<String, u64>>,
}

impl crate::session::apply::SessionQuota for Shared {
    /// Answers from the count in memory, which [`Shared::count_sessions`]
    /// makes sure of before a session applies anything.
    fn refuse(&self, tenant: &str, creating: u64) -> Option<String> {
        let max = self.session_limits.get(tenant)?;
        let counted =
            self.session_counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(tenant).copied();
        match counted {
            Some(count) if count.saturating_add(creating) <= max => None,
            Some(_) => Some(format!("the tenant has its maximum of {max} sessions")),
            None => Some("the tenant's sessions could not be counted".to_owned()),
        }
    }
}

/// A setting per tenant, with a default for tenants without their own.
/// A tenant's own setting may be "none" (`None` in `own`): a tenant can be
/// exempt from a limit every other tenant has.
struct PerTenant<T> {
    own: RwLock<HashMap<String, Option<T>>>,
    default: RwLock<Option<T>>,
}

impl<T> Default for PerTenant<T> {
    fn default() -> Self {
        Self { own: RwLock::default(), default: RwLock::new(None) }
    }
}

impl<T: Copy> PerTenant<T> {
    /// The tenant's own value, else the default.
    fn get(&self, tenant: &str) -> Option<T> {
        match self.own.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(tenant) {
            Some(own) => *own,
            None => *self.default.read().unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }

    /// Sets the tenant's own value; `None`: none, whatever the default.
    fn set(&self, tenant: &str, value: Option<T>) {
        self.own.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(tenant.to_owned(), value);
    }

    /// Forgets the tenant's own value: the default applies again.
    fn clear(&self, tenant: &str) {
        self.own.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(tenant);
    }

    fn set_default(&self, value: Option<T>) {
        *self.default.write().unwrap_or_else(std::sync::PoisonError::into_inner) = value;
    }
}

impl Shared {
    fn actors(&self) -> std::sync::MutexGuard<'_, ActorMap> {
        self.actors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `msg` to the session's actor, starting one if none runs.
    /// Sending under the lock pairs with [`retire`](Self::retire): an actor
    /// leaves only when nothing was sent to it.
    fn send(self: &Arc<Self>, key: &SessionKey, msg: Msg) -> bool {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let mut actors = self.actors();
        if let Some((tx, _)) = actors.get(key) {
            if tx.send(msg).is_ok() {
                return true;
            }
            actors.remove(key);
            return false;
        }
        let (tx, task) = Actor::spawn(self.clone(), key.clone());
        let sent = tx.send(msg).is_ok();
        actors.insert(key.clone(), (tx, task));
        sent
    }

    /// Lets an idle actor leave, unless a message reached it meanwhile.
    pub fn retire(&self, key: &SessionKey, rx: &mpsc::UnboundedReceiver<Msg>) -> bool {
        let mut actors = self.actors();
        if rx.is_empty() {
            actors.remove(key);
            true
        } else {
            false
        }
    }

    /// Forgets a stopped actor.
    pub fn forget(&self, key: &SessionKey) {
        self.actors().remove(key);
    }

    fn recovering(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<SessionKey>> {
        self.recovering.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether the session was unfinished when the engine started and is
    /// loaded for the first time since (true once).
    pub fn take_recovering(&self, key: &SessionKey) -> bool {
        self.recovering().remove(key)
    }

    /// Wakes a session (its inbox has an item, or it was created).
    pub fn wake(self: &Arc<Self>, key: &SessionKey) {
        self.send(key, Msg::Wake);
    }

    /// Cancels a session's turn without waiting for the answer.
    pub fn cancel_detached(self: &Arc<Self>, key: &SessionKey) {
        let (reply, _) = oneshot::channel();
        self.send(key, Msg::Cancel { reply });
    }

    /// The worker of `agent_id` for `tenant`.
    pub fn worker(&self, tenant: &str, agent_id: &str) -> Option<Arc<dyn Worker>> {
        let agents = self.agents.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        agents.get(&(tenant.to_owned(), agent_id.to_owned())).cloned()
    }

    /// The tenant's budget: its own, else the default.
    pub fn tenant_budget(&self, tenant: &str) -> Option<Money> {
        self.budgets.get(tenant)
    }

    /// What the tenant's sessions have cost so far.
    pub async fn tenant_spent(&self, tenant: &str) -> Result<Money, StoreError> {
        if let Some(spent) = self.spend.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(tenant) {
            return Ok(*spent);
        }
        let sum: Money = self
            .store
            .sessions(Some(tenant))
            .await?
            .iter()
            .filter_map(|s| s.cost.as_deref().and_then(|c| c.parse::<Money>().ok()))
            .sum();
        let mut spend = self.spend.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(*spend.entry(tenant.to_owned()).or_insert(sum))
    }

    /// How many sessions `tenant` has. The first call for a tenant counts
    /// them in the store; later ones are answered from memory.
    pub async fn tenant_sessions(&self, tenant: &str) -> Result<u64, StoreError> {
        let lock = || self.session_counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = lock().get(tenant) {
            return Ok(*count);
        }
        let count = self.store.session_count(tenant).await?;
        Ok(*lock().entry(tenant.to_owned()).or_insert(count))
    }

    /// Makes sure the tenant's sessions are counted in memory when it has
    /// a session limit, so that applying (which does not wait on the
    /// store) can check the limit. A store error leaves them uncounted:
    /// the check then refuses, naming it.
    pub async fn count_sessions(&self, tenant: &str) {
        if self.session_limits.get(tenant).is_some()
            && let Err(error) = self.tenant_sessions(tenant).await
        {
            tracing::warn!(tenant, %error, "the tenant's sessions could not be counted");
        }
    }

    /// Counts sessions just created for their tenant.
    pub fn add_sessions(&self, tenant: &str, created: u64) {
        let mut counts = self.session_counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = counts.get_mut(tenant) {
            *count += created;
        }
    }

    /// Counts a settled call's cost for its tenant.
    pub fn add_spend(&self, tenant: &str, cost: Money) {
        let mut spend = self.spend.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(spent) = spend.get_mut(tenant) {
            *spent = *spent + cost;
        }
    }

    /// Runs one try of an engine-run LLM call.
    pub async fn run_llm(
        &self,
        mut request: LlmRequest,
        deltas: Option<DeltaSink>,
        timeout: Option<Duration>,
    ) -> Outcome {
        let (provider, model) = match self.models.resolve(&request.model) {
            Ok(resolved) => resolved,
            Err(e) => return failed(e),
        };
        request.model = model;
        let call = provider.complete(request, deltas);
        let result = match timeout {
            Some(limit) => match tokio::time::timeout(limit, call).await {
                Ok(result) => result,
                Err(_) => {
                    return Outcome::Failed {
                        error: format!("the LLM call did not finish within {limit:?}"),
                        retryable: true,
                        code: Some(ErrorCode::DeadlineExceeded),
                        detail: None,
                        retry_after_ms: None,
                    };
                }
            },
            None => call.await,
        };
        match result {
            Ok(response) => Outcome::LlmOk(response),
            Err(e) => failed(e),
        }
    }
}

fn failed(e: crate::model::ModelError) -> Outcome {
    Outcome::Failed {
        error: e.message.clone(),
        retryable: e.retryable,
        code: Some(e.code),
        detail: e.detail.clone(),
        retry_after_ms: e.retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The engine. Cheap to clone; all clones drive the same sessions.
#[derive(Clone)]
pub struct Engine {
    shared: Arc<Shared>,
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
    pub fn open(store: Arc<dyn Store>, models: Models, config: EngineConfig) -> Self {
        let shared = Arc::new(Shared {
            store,
            models,
            hub: crate::events::Hub::new(config.streams.clone()),
            config,
            agents: RwLock::default(),
            actors: Mutex::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            budgets: PerTenant::default(),
            session_limits: PerTenant::default(),
            recovering: Mutex::default(),
            spend: Mutex::default(),
            session_counts: Mutex::default(),
        });
        Engine { shared }
    }

    /// The store the engine runs on: for the engine's own modules (the
    /// agent registry, the records of tenants and keys); nothing outside
    /// the engine writes to it.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    /// Resumes every session with work left: not idle, or with items in
    /// its inbox.
    pub async fn resume(&self) -> Result<(), StartError> {
        for key in self.shared.store.unfinished().await? {
            tracing::info!(session = %key, "resuming");
            self.shared.recovering().insert(key.clone());
            self.shared.wake(&key);
        }
        Ok(())
    }

    /// Makes `worker` the agent `agent_id` of `tenant`. Sessions waiting for
    /// it are not retried early; their next delivery finds it.
    pub fn register_agent(&self, tenant: &str, agent_id: &str, worker: Arc<dyn Worker>) {
        let mut agents = self.shared.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        agents.insert((tenant.to_owned(), agent_id.to_owned()), worker);
    }

    /// Removes the agent `agent_id` of `tenant`; its sessions' deliveries
    /// fail (and are retried per policy) until it is registered again.
    pub fn unregister_agent(&self, tenant: &str, agent_id: &str) {
        let mut agents = self.shared.agents.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        agents.remove(&(tenant.to_owned(), agent_id.to_owned()));
    }

    /// Sets the most `tenant`'s sessions may spend on engine-run LLM calls
    /// in all (`None`: no limit, whatever the default). Once spent,
    /// further calls fail with `budget_exceeded` before they are sent.
    pub fn set_tenant_budget(&self, tenant: &str, budget: Option<Money>) {
        self.shared.budgets.set(tenant, budget);
    }

    /// Forgets `tenant`'s own budget and session limit: the defaults apply
    /// to it again.
    pub fn clear_tenant_limits(&self, tenant: &str) {
        self.shared.budgets.clear(tenant);
        self.shared.session_limits.clear(tenant);
    }

    /// Sets (or removes) the budget of every tenant that has none of its
    /// own (see [`set_tenant_budget`](Self::set_tenant_budget)).
    pub fn set_default_tenant_budget(&self, budget: Option<Money>) {
        self.shared.budgets.set_default(budget);
    }

    /// Sets how many sessions `tenant` may have (`None`: no limit,
    /// whatever the default). An input that would create one more is refused
    /// ([`InputError::LimitExceeded`]), and so is an agent's spawn of a
    /// sub-agent session (its call fails, and the agent is told why).
    pub fn set_tenant_session_limit(&self, tenant: &str, max: Option<u64>) {
        self.shared.session_limits.set(tenant, max);
    }

    /// Sets (or removes) the session limit of every tenant that has none of
    /// its own (see [`set_tenant_session_limit`](Self::set_tenant_session_limit)).
    pub fn set_default_session_limit(&self, max: Option<u64>) {
        self.shared.session_limits.set_default(max);
    }

    /// The budget that applies to `tenant`, if any.
    pub fn tenant_budget(&self, tenant: &str) -> Option<Money> {
        self.shared.tenant_budget(tenant)
    }

    /// What `tenant`'s sessions have spent on LLM calls.
    pub async fn tenant_spent(&self, tenant: &str) -> Result<Money, StoreError> {
        self.shared.tenant_spent(tenant).await
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
        if !self.shared.send(&key, Msg::SetBudget { budget, reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// Sessions with an actor in memory (work in flight, or just touched).
    pub fn active_sessions(&self) -> usize {
        self.shared.actors().len()
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
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.shared.send(&key, Msg::Input { input: Box::new((input, identity)), reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// Stops the session's open turn: calls in flight are cancelled, the
    /// turn ends with `turn.failed` (code `cancelled`). Returns whether a
    /// turn was open.
    pub async fn cancel(&self, tenant: &str, session: &str) -> Result<bool, InputError> {
        let key = checked_key(tenant, session)?;
        let (reply, answer) = oneshot::channel();
        if !self.shared.send(&key, Msg::Cancel { reply }) {
            return Err(InputError::ShuttingDown);
        }
        answer.await.unwrap_or(Err(InputError::ShuttingDown))
    }

    /// The session as stored.
    pub async fn snapshot(&self, tenant: &str, session: &str) -> Result<Option<Snapshot>, StoreError> {
        let key = SessionKey::new(tenant, session);
        let store = self.shared.store.as_ref();
        // One read: the record, messages and calls of one state, even
        // while the session's actor commits.
        let Some(loaded) = store.load(&key).await? else { return Ok(None) };
        let tree = Tree::from_records(loaded.messages.into_iter().map(|(_, r)| r));
        let head = loaded.record.head_id.as_deref();
        Ok(Some(Snapshot {
            messages: tree.path(head).into_iter().cloned().collect(),
            message_tree: tree.to_protocol(head),
            calls: loaded.calls,
            record: loaded.record,
        }))
    }

    /// At most `limit` sessions of `tenant` with ids after `after` (from
    /// the first when `None`), ordered by id.
    pub async fn sessions_page(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        self.shared.store.sessions_page(tenant, after, limit).await
    }

    /// How many sessions `tenant` has, spawned ones included. Counted in
    /// the store once per tenant, then kept in memory as sessions are
    /// created, so checking a quota on every new session costs nothing.
    pub async fn session_count(&self, tenant: &str) -> Result<u64, StoreError> {
        self.shared.tenant_sessions(tenant).await
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
        Ok(self
            .shared
            .store
            .events(&key, after, limit)
            .await?
            .into_iter()
            .map(|(seq, r)| Event::stored(seq, r))
            .collect())
    }

    /// Live events of the session from now on (stored ones and token
    /// deltas). Subscribe before reading stored events to miss nothing;
    /// stored events may then arrive twice, told apart by `seq`.
    ///
    /// A subscriber that falls behind by more than
    /// [`StreamLimits::subscriber_buffer_bytes`] is dropped (its
    /// subscription ends with [`RecvError::Dropped`](crate::events::RecvError::Dropped));
    /// it catches up by subscribing again and reading the stored events
    /// after the last one it received. Refused when the tenant has
    /// [`StreamLimits::max_streams_per_tenant`] subscriptions already.
    pub fn subscribe(&self, tenant: &str, session: &str) -> Result<Subscription, TooManyStreams> {
        self.shared.hub.subscribe(&SessionKey::new(tenant, session))
    }

    /// The sequence number of the session's last stored event; `None`
    /// when it has none (or does not exist). What follows it belongs to
    /// what is sent next.
    pub async fn last_event(&self, tenant: &str, session: &str) -> Result<Option<u64>, StoreError> {
        let record = self.shared.store.session(&SessionKey::new(tenant, session)).await?;
        Ok(record.and_then(|r| r.next.event.checked_sub(1)))
    }

    /// The session's stored events after `after` (from the first when
    /// `None`), then its live ones: see [`Follow`](crate::follow::Follow).
    /// Counts as one of the tenant's subscriptions while it lives.
    pub fn follow(
        &self,
        tenant: &str,
        session: &str,
        after: Option<u64>,
    ) -> Result<crate::follow::Follow, TooManyStreams> {
        let live = self.subscribe(tenant, session)?;
        Ok(crate::follow::Follow::new(self.clone(), tenant, session, after, live))
    }

    /// The event streams (subscriptions) `tenant` has open.
    pub fn open_streams(&self, tenant: &str) -> usize {
        self.shared.hub.streams(tenant)
    }

    /// Bytes of events queued for `tenant`'s subscribers, not yet taken by
    /// them: what the tenant's streaming holds in the engine. At most
    /// [`StreamLimits::max_streams_per_tenant`] ×
    /// [`StreamLimits::subscriber_buffer_bytes`], but for single events
    /// larger than a buffer.
    pub fn queued_stream_bytes(&self, tenant: &str) -> usize {
        self.shared.hub.queued_bytes(tenant)
    }

    /// A turn as stored.
    pub async fn turn(&self, tenant: &str, session: &str, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.shared.store.turn(&SessionKey::new(tenant, session), turn_id).await
    }

    /// Waits until the turn has ended and returns it.
    pub async fn wait_turn(&self, tenant: &str, session: &str, turn_id: &str) -> Result<TurnRecord, StoreError> {
        let key = SessionKey::new(tenant, session);
        loop {
            // Listening starts before the store is read, so an end
            // committed in between is not missed.
            let ended = self.shared.hub.turn_end(&key);
            if let Some(turn) = self.shared.store.turn(&key, turn_id).await?
                && matches!(turn.status, TurnStatus::Done | TurnStatus::Failed)
            {
                return Ok(turn);
            }
            // The end of another of the session's turns (one queued before
            // this) sends us back to listening and reading.
            let (ended_id, record) = ended.await.map_err(|_| StoreError::Closed)?;
            if ended_id == turn_id {
                return Ok(record);
            }
        }
    }

    /// What the store has done: counters, cheap to read.
    pub fn store_stats(&self) -> Result<crate::store::StoreStats, StoreError> {
        self.shared.store.stats()
    }

    /// The bytes of data the store holds. May walk the whole store and
    /// hold commits up meanwhile: see [`Store::stored_bytes`].
    pub async fn stored_bytes(&self) -> Result<u64, StoreError> {
        self.shared.store.stored_bytes().await
    }

    /// Stops the engine at once, as a crash would: every session actor is
    /// aborted where it is, nothing more is written. Whatever was committed
    /// stays; a new engine on the same store resumes from there.
    pub async fn kill(self) {
        self.shared.closed.store(true, std::sync::atomic::Ordering::Release);
        let actors: Vec<_> = self.shared.actors().drain().map(|(_, (_, task))| task).collect();
        for task in &actors {
            task.abort();
        }
        for task in actors {
            let _ = task.await;
        }
    }
}

fn checked_key(tenant: &str, session: &str) -> Result<SessionKey, InputError> {
    if !valid_id(session) {
        return Err(InputError::Invalid {
            message: format!("`{session}` is not a valid session id (1-128 of A-Z a-z 0-9 _ - . :)"),
            field: Some("session_id".to_owned()),
        });
    }
    Ok(SessionKey::new(tenant, session))
}
