//! The engine: sessions, their actors, the agents that decide for them,
//! and the models they call.
//!
//! [`Engine`] wires the parts and hands out three narrow handles: its
//! sessions' commands ([`Sessions`]: inputs, cancel, budgets), reads of
//! what is stored and live ([`Reads`]: snapshots, events, turns, pages),
//! and the operator's administration ([`Admin`]: tenants' limits, keys,
//! metrics, the store's statistics). Only the first writes to sessions,
//! and it does so through their actors; the reads reach the store through
//! its read methods alone, so a caller holding a [`Reads`] cannot commit.

use std::sync::Arc;

use subs_protocol::{Message, MessageTree, RequestTree, SharedMessage};

mod admin;
mod reads;
mod sessions;

pub use self::admin::Admin;
pub use self::reads::Reads;
pub use self::sessions::Sessions;
pub use crate::config::{DecisionBounds, EngineConfig, SpawnBounds};
use crate::model::Models;
pub use crate::session::apply::{Accepted, InputError, Sender};
use crate::session::directory::Directory;
use crate::session::env::Env;
pub use crate::session::history::{DEFAULT_MAX_SESSION_BYTES, DEFAULT_MAX_SESSION_READS};
use crate::store::{CallRecord, ID_RULE, SessionKey, SessionRecord, Store, StoreError, valid_id};
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
pub struct ReadPermit(#[allow(dead_code)] pub(crate) tokio::sync::OwnedSemaphorePermit);

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
    /// The handles this engine hands out.
    sessions: Sessions,
    reads: Reads,
    admin: Admin,
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
        let sessions = Sessions { env: env.clone(), directory: directory.clone() };
        let reads = Reads { env: env.clone(), directory: directory.clone() };
        let admin = Admin { env: env.clone(), directory: directory.clone() };
        Engine { directory, env, cluster, sessions, reads, admin }
    }

    /// The sessions' commands: inputs, cancel, a session's budget.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// Reads of sessions as stored and as they run: snapshots, events,
    /// turns, pages of sessions and steps.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// The operator's side: tenants' limits and records, keys, metrics
    /// and the store's statistics.
    pub fn admin(&self) -> &Admin {
        &self.admin
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
    use subs_protocol::client::ClientMessage;
    use subs_protocol::{ClientInput, DraftMessage, WorkerIdentity};

    use super::*;
    use crate::model::Money;
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
            let refused = engine.sessions().input("acme", bad, hello(), WorkerIdentity::default()).await;
            let Err(InputError::Invalid { message, field }) = refused else {
                panic!("refused as invalid: {refused:?}")
            };
            assert_eq!(field.as_deref(), Some("session_id"));
            assert!(message.contains(ID_RULE), "{message}");
            assert_eq!(engine.reads().active_sessions(), 0, "no actor for an invalid id");
        }
        // `/`, spaces and unicode are an id like any other.
        let accepted = engine.sessions().input("acme", "is/valid ü", hello(), WorkerIdentity::default()).await;
        assert!(accepted.is_ok(), "{accepted:?}");
    }

    #[tokio::test]
    async fn a_session_never_created_has_no_snapshot_turn_or_events() {
        let engine = engine();
        assert!(engine.reads().snapshot("acme", "s").await.unwrap().is_none());
        assert!(engine.reads().turn("acme", "s", "t").await.unwrap().is_none());
        assert!(engine.reads().events("acme", "s", None, 10).await.unwrap().is_empty());
        assert_eq!(engine.reads().last_event("acme", "s").await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_killed_engine_takes_no_more_input() {
        let engine = engine();
        let clone = engine.clone();
        engine.kill().await;
        let refused = clone.sessions().input("acme", "s", hello(), WorkerIdentity::default()).await;
        assert!(matches!(refused, Err(InputError::ShuttingDown)), "{refused:?}");
        assert!(matches!(clone.sessions().cancel("acme", "s").await, Err(InputError::ShuttingDown)));
        assert_eq!(clone.reads().active_sessions(), 0);
    }

    #[tokio::test]
    async fn tenant_limits_set_through_the_engine_apply_and_clear() {
        let engine = engine();
        let five: Money = "5".parse().unwrap();
        engine.admin().set_default_tenant_budget(Some(five));
        engine.admin().set_tenant_budget("exempt", None);
        assert_eq!(engine.admin().tenant_budget("acme"), Some(five));
        assert_eq!(engine.admin().tenant_budget("exempt"), None);
        engine.admin().clear_tenant_limits("exempt");
        assert_eq!(engine.admin().tenant_budget("exempt"), Some(five));

        engine.admin().set_tenant_session_limit("acme", Some(0));
        let refused = engine.sessions().input("acme", "s", hello(), WorkerIdentity::default()).await;
        assert!(matches!(refused, Err(InputError::LimitExceeded(_))), "{refused:?}");
        assert_eq!(engine.reads().session_count("acme").await.unwrap(), 0);
    }
}
