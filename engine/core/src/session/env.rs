//! What a session actor works with: the store it loads from and commits
//! to, the hub its events go out through, its agent, the model runner,
//! its tenant's limits, and the engine's settings.
//!
//! The running actors themselves (which session has one, starting and
//! retiring them, the sessions to recover) are not here: an actor reaches
//! other sessions only through [`Mailboxes`](super::actor::Mailboxes).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use subs_protocol::{ErrorCode, LlmRequest};

use super::apply::{Ctx, Outcome};
use crate::EngineConfig;
use crate::events::Hub;
use crate::model::{ModelError, Models, OFFLINE_MODEL, OFFLINE_PROVIDER};
use crate::store::{SessionKey, Store, StoreError, TurnRecord};
use crate::tenants::Tenants;
use crate::worker::{DeltaSink, Worker};

/// How long a waiter trusts that a turn open in a session whose actor
/// runs here will end through that actor, before it reads the store.
const TRUST_OPEN_TURN: Duration = Duration::from_secs(2);

/// What every session actor of an engine shares; see the
/// [module docs](self).
pub(crate) struct Env {
    /// Where sessions are loaded from and committed to.
    pub store: Arc<dyn Store>,
    /// Where committed events and token deltas go out to subscribers.
    pub hub: Hub,
    /// The engine's settings.
    pub config: EngineConfig,
    /// The agent deciding for each session, by tenant and agent id.
    pub agents: Agents,
    /// The providers engine-run LLM calls go to.
    pub models: Models,
    /// Each tenant's budgets and session limits, and its use of them.
    pub tenants: Tenants,
    /// Each tenant's bound on the bytes of messages a session stores and
    /// on its whole-session reads.
    pub history: super::history::HistoryLimits,
    /// Callers waiting for answers to requests forwarded to other nodes.
    pub replies: super::forward::Replies,
    /// The engine's metrics.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Where the engine's spans go.
    pub tracer: crate::telemetry::Tracer,
    /// Contained agents that decided too slowly lately for an input to
    /// wait for their decision.
    pub slow_deciders: SlowDeciders,
}

/// How many agents [`SlowDeciders`] keeps at most; past that, more are not
/// marked, and their sessions' inputs wait for their decisions as any
/// contained agent's do.
const SLOW_DECIDERS_MAX: usize = 1024;

/// Contained agents (by tenant and agent id) whose decision, the last time
/// one was awaited, took longer than an input may be held for it. An
/// input to one of their sessions is committed and answered at once
/// instead of waiting for a decision that will not come in time; the
/// agent is forgotten once a decision of it comes quickly again.
#[derive(Default)]
pub(crate) struct SlowDeciders {
    agents: std::sync::Mutex<HashMap<String, std::collections::HashSet<String>>>,
    /// How many agents are marked, read without the lock: none, the
    /// common case, costs a decision nothing.
    marked: std::sync::atomic::AtomicUsize,
}

impl SlowDeciders {
    /// Whether `agent` of `tenant` is marked slow.
    pub fn contains(&self, tenant: &str, agent: &str) -> bool {
        self.marked.load(std::sync::atomic::Ordering::Relaxed) > 0
            && self.lock().get(tenant).is_some_and(|agents| agents.contains(agent))
    }

    /// Marks `agent` of `tenant` slow, or forgets it.
    pub fn set(&self, tenant: &str, agent: &str, slow: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        if !slow && self.marked.load(Relaxed) == 0 {
            return;
        }
        let mut agents = self.lock();
        if slow {
            if self.marked.load(Relaxed) < SLOW_DECIDERS_MAX
                && agents.entry(tenant.to_owned()).or_default().insert(agent.to_owned())
            {
                self.marked.fetch_add(1, Relaxed);
            }
        } else if let Some(of_tenant) = agents.get_mut(tenant)
            && of_tenant.remove(agent)
        {
            self.marked.fetch_sub(1, Relaxed);
            if of_tenant.is_empty() {
                agents.remove(tenant);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, std::collections::HashSet<String>>> {
        self.agents.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Env {
    /// The environment of an engine on `store`, with no agents yet.
    pub fn new(store: Arc<dyn Store>, models: Models, config: EngineConfig) -> Self {
        let limits = config.telemetry;
        let tracer =
            crate::telemetry::Tracer::new(config.spans.clone()).with_max_attribute_bytes(limits.max_attribute_bytes);
        // Models the price table lists are configured: their names label
        // metrics before any call of them is answered.
        let metrics = crate::metrics::Metrics::new(limits.labels, models.prices().clone());
        Self {
            hub: Hub::new(config.streams.clone()),
            tenants: Tenants::new(store.clone()),
            history: Default::default(),
            store,
            config,
            agents: Agents::default(),
            models,
            replies: Default::default(),
            metrics: Arc::new(metrics),
            tracer,
            slow_deciders: SlowDeciders::default(),
        }
    }

    /// What applying a change needs, read at this moment.
    pub fn ctx(&self) -> Ctx<'_> {
        let config = &self.config;
        Ctx {
            store: self.store.as_ref(),
            default_model: &config.default_model,
            default_retry: &config.default_retry,
            retry_cap: &config.retry_cap,
            default_stream: config.default_stream,
            now_ms: config.clock.now_ms(),
            call_timeout_ms: u64::try_from(config.call_timeout.as_millis()).unwrap_or(u64::MAX),
            quota: &self.tenants,
            history: &self.history,
            prices: self.models.prices(),
            providers: Some(&self.models),
            metrics: &self.metrics,
            tracer: &self.tracer,
            incoming: None,
            decision: None,
            resumer: subs_protocol::event::Resumer::Tenant { key: None, identity: None },
        }
    }

    /// Waits until the session's turn `turn_id` has ended and returns it.
    pub async fn wait_turn(&self, key: &SessionKey, turn_id: &str) -> Result<TurnRecord, StoreError> {
        let mut read = false;
        loop {
            // Listening starts before the store is read, so an end
            // committed in between is not missed.
            let (ended, open_here) = self.hub.turn_end_of(key, turn_id);
            if read || !open_here {
                if let Some(turn) = self.store.turn(key, turn_id).await?
                    && turn.status.ended()
                {
                    return Ok(turn);
                }
                read = true;
            }
            let ended = if read {
                ended.await
            } else {
                // A turn open here ends through this process's actor. Should
                // the actor have lost the session to another node unnoticed
                // (paused past its lease), the store is read after a while.
                match tokio::time::timeout(TRUST_OPEN_TURN, ended).await {
                    Ok(ended) => ended,
                    Err(_) => {
                        read = true;
                        continue;
                    }
                }
            };
            // The end of another of the session's turns (one queued before
            // this) sends us back to listening (and reading, unless the
            // turn is open here).
            let (ended_id, record) = ended.map_err(|_| StoreError::Closed)?;
            if ended_id == turn_id {
                return Ok(record);
            }
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
        // Metrics name the model as agents do (`provider/model`), and only
        // once the name resolved to a configured provider: see
        // `Metrics::llm_call` for when it becomes a label of its own.
        let named = std::mem::replace(&mut request.model, model);
        // A provider's answer shows the model exists, except the offline
        // provider's, which answers any name: its one model is its own.
        let answer_shows_model = !named.starts_with(&format!("{OFFLINE_PROVIDER}/")) || named == OFFLINE_MODEL;
        let began = std::time::Instant::now();
        // The first delta of a streamed call is its time to first token.
        let deltas = deltas.map(|sink| {
            let (metrics, model) = (self.metrics.clone(), named.clone());
            let first = std::sync::atomic::AtomicBool::new(true);
            let timed: DeltaSink = Arc::new(move |delta| {
                if first.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    metrics.first_token(&model, began.elapsed(), answer_shows_model);
                }
                sink(delta)
            });
            timed
        });
        let outcome = within(timeout, provider.complete(request, deltas)).await;
        let ok = matches!(outcome, Outcome::LlmOk(_));
        self.metrics.llm_call(&named, began.elapsed(), ok, ok && answer_shows_model);
        outcome
    }
}

/// Waits for an LLM call's reply, at most `timeout`.
async fn within(
    timeout: Option<Duration>,
    call: impl std::future::Future<Output = Result<crate::model::Completion, ModelError>>,
) -> Outcome {
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

fn failed(e: ModelError) -> Outcome {
    Outcome::Failed {
        error: e.message.clone(),
        retryable: e.retryable,
        code: Some(e.code),
        detail: e.detail.clone(),
        retry_after_ms: e.retry_after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    }
}

/// The worker of each agent, by tenant and agent id.
#[derive(Default)]
pub(crate) struct Agents(RwLock<HashMap<(String, String), Arc<dyn Worker>>>);

impl Agents {
    /// Makes `worker` the agent `agent_id` of `tenant`.
    pub fn register(&self, tenant: &str, agent_id: &str, worker: Arc<dyn Worker>) {
        self.0.write().unwrap_or_else(PoisonError::into_inner).insert((tenant.to_owned(), agent_id.to_owned()), worker);
    }

    /// Removes the agent `agent_id` of `tenant`.
    pub fn unregister(&self, tenant: &str, agent_id: &str) {
        self.0.write().unwrap_or_else(PoisonError::into_inner).remove(&(tenant.to_owned(), agent_id.to_owned()));
    }

    /// The worker of `agent_id` for `tenant`.
    pub fn get(&self, tenant: &str, agent_id: &str) -> Option<Arc<dyn Worker>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).get(&(tenant.to_owned(), agent_id.to_owned())).cloned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::Models;
    use crate::store::TurnStatus;
    use crate::store::{Batch, MemStore, Op};

    /// An engine's shared parts on a store where turn `t` of session `s`
    /// has ended.
    async fn env_with_ended_turn() -> (Env, SessionKey, TurnRecord) {
        let store = MemStore::new();
        let key = SessionKey::new("acme", "s");
        let record = TurnRecord { status: TurnStatus::Done, data: None, started_ms: 1, ended_ms: Some(2) };
        let put = Op::PutTurn { session: key.clone(), turn_id: "t".to_owned(), record: record.clone() };
        store.commit(Batch::of(vec![put])).await.unwrap();
        (Env::new(Arc::new(store), Models::with_offline(), crate::EngineConfig::default()), key, record)
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_open_here_is_awaited_without_reading_the_store_for_a_while() {
        let (env, key, record) = env_with_ended_turn().await;
        let env = Arc::new(env);
        // This process's actor says the turn is open (as an actor that
        // lost the session unnoticed would: the store holds its end).
        env.hub.turn_opened(&key, "t");
        let started = tokio::time::Instant::now();
        assert_eq!(env.wait_turn(&key, "t").await.unwrap(), record);
        assert_eq!(started.elapsed(), TRUST_OPEN_TURN, "the store is read once the trust runs out");

        // Forgotten (the actor left): the store answers at once.
        env.hub.turn_opened(&key, "t");
        env.hub.forget_turns(&key);
        let started = tokio::time::Instant::now();
        assert_eq!(env.wait_turn(&key, "t").await.unwrap(), record);
        assert_eq!(started.elapsed(), Duration::ZERO);

        // A turn open here ends through its actor's commit.
        env.hub.turn_opened(&key, "u");
        let waiter = tokio::spawn({
            let (env, key) = (Arc::clone(&env), key.clone());
            async move { env.wait_turn(&key, "u").await }
        });
        // One thread: the waiter runs until it waits for the turn's end.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "the store has no turn `u`: the waiter waits");
        let told = TurnRecord { ended_ms: Some(3), ..record };
        env.hub.turn_ended(&key, ("u".to_owned(), told.clone()));
        assert_eq!(waiter.await.unwrap().unwrap(), told);
        assert!(!env.hub.turn_end_of(&key, "u").1, "an ended turn is no longer open here");
    }
}
