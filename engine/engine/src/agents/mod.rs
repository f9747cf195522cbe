//! Agents: uploaded components and registered HTTP workers, by tenant.
//!
//! Each upload is a version, named by its content digest. A component's
//! bytes are kept in the data directory by digest (`components/<hex>.wasm`)
//! and checked before they are accepted: it must compile and fit the
//! `subs:agent` world. The store keeps which version is current; decisions
//! use the current version. An upload may also be stored without being
//! made current (inactive), and any stored version made current later
//! ([`AgentRegistry::activate`]), which is also how a version is rolled
//! back. Compiled components are cached by digest under `compiled/`, so a
//! restart loads them without compiling.
//!
//! The registry lives beside the loop rather than in the HTTP server so
//! that the server reaches the store only through the engine: it asks the
//! registry, which keeps the records and registers the workers.

pub mod uploads;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use self::uploads::{UploadPolicy, Uploads};
use crate::Engine;
use crate::replay::{Progress, ReplayError, ReplayReport, Selection};
use crate::store::{AgentRecord, AgentVersion, AgentWorker, Batch, Op, StoreError};
use crate::worker::component::cache::write_atomically;
use crate::worker::component::{AgentPolicy, ComponentAgent, ComponentHost, LoadError};
use crate::worker::http::{HttpWorker, HttpWorkerOptions};
use crate::worker::{Versioned, Worker};

/// Why the registry refused or failed a change, told apart so that the
/// API can answer each with its own status. The enum is exhaustive on
/// purpose: a new kind of failure must be given a status where it is
/// mapped, not fall into a catch-all.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Something given is not usable: `field` names it (`url`,
    /// `limits.sandbox`).
    #[error("{message}")]
    Invalid {
        /// The offending field, as the request names it.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The bytes are not a component the engine will run: not WebAssembly,
    /// not of the `subs:agent` world, over the compile budget, or unable to
    /// start under their limits.
    #[error(transparent)]
    InvalidComponent(LoadError),
    /// The tenant used its hourly allowance of uploads.
    #[error(
        "the tenant has used its {per_hour} component uploads per hour (limit `max_uploads_per_hour`); the next is \
         allowed in {next_in_secs} s"
    )]
    UploadRate {
        /// The allowance.
        per_hour: u32,
        /// Seconds until the next upload is allowed.
        next_in_secs: u64,
    },
    /// Another upload of the tenant is compiling; this one is refused
    /// rather than held, with its body, until that one is done.
    #[error("another upload of this tenant is being compiled; send this one when it is done")]
    Compiling,
    /// Another replay of the tenant is running; replays are not queued.
    #[error("another replay of this tenant is running; start this one when it is done")]
    Replaying,
    /// The tenant's agents would hold more compiled code than it may.
    #[error(
        "the tenant's agents would hold {} MiB of compiled code with this one ({} MiB), more than its {} MiB (limit \
         `max_compiled_bytes`); remove agents it no longer needs",
        total >> 20,
        bytes >> 20,
        limit >> 20
    )]
    CompiledQuota {
        /// What the tenant's agents would hold with this one, in bytes.
        total: u64,
        /// What this one holds, in bytes.
        bytes: u64,
        /// The tenant's `max_compiled_bytes`.
        limit: u64,
    },
    /// A version was to be stored inactive for an agent that has no
    /// version yet: an agent's first version must be its current one, so
    /// that its sessions always have a version to run.
    #[error(
        "agent `{agent_id}` does not exist yet: its first version must be activated (upload it without \
         `activate=false`)"
    )]
    NoActiveVersion {
        /// The agent.
        agent_id: String,
    },
    /// The agent has no stored version of this digest.
    #[error("agent `{agent_id}` has no stored version `{version}`")]
    UnknownVersion {
        /// The agent.
        agent_id: String,
        /// The version asked for.
        version: String,
    },
    /// The store failed (or is closed).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something of the server's own failed (a file of the data directory,
    /// the compile task): nothing the caller can fix.
    #[error("{0}")]
    Internal(String),
}

/// The agents of every tenant, kept in the store and registered with the
/// engine.
pub struct AgentRegistry {
    engine: Engine,
    host: ComponentHost,
    /// Where component bytes are kept, by digest.
    dir: PathBuf,
    /// One upload at a time: an upload reads, then replaces, the record.
    writing: tokio::sync::Mutex<()>,
    /// Sandbox policies of particular agents.
    policies: HashMap<(String, String), AgentPolicy>,
    /// Compiles in progress and upload meters.
    uploads: Uploads,
    /// The components registered with the engine, by tenant and agent, so
    /// that a tenant's agents can be bound again when its sandbox changes,
    /// and their compiled code counted against the tenant's quota.
    components: std::sync::Mutex<HashMap<(String, String), ComponentAgent>>,
    /// The version registered with the engine, by tenant and agent, so that
    /// [`sync`](Self::sync) loads only what changed.
    digests: std::sync::Mutex<HashMap<(String, String), String>>,
    /// Tenants with a replay running.
    replaying: Arc<std::sync::Mutex<HashSet<String>>>,
}

/// A tenant's place as the one replay it runs; given up when dropped.
struct ReplayGuard {
    running: Arc<std::sync::Mutex<HashSet<String>>>,
    tenant: String,
}

impl ReplayGuard {
    fn take(running: &Arc<std::sync::Mutex<HashSet<String>>>, tenant: &str) -> Result<Self, AgentError> {
        let mut tenants = running.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !tenants.insert(tenant.to_owned()) {
            return Err(AgentError::Replaying);
        }
        Ok(Self { running: running.clone(), tenant: tenant.to_owned() })
    }
}

impl Drop for ReplayGuard {
    fn drop(&mut self) {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.tenant);
    }
}

impl AgentRegistry {
    /// A registry keeping its records in `engine`'s store, component bytes
    /// under `dir/components` and their compiled code under `dir/compiled`.
    pub fn new(engine: Engine, host: ComponentHost, dir: PathBuf) -> Self {
        let host = host.with_compile_cache(dir.join("compiled"));
        Self {
            engine,
            host,
            dir: dir.join("components"),
            writing: tokio::sync::Mutex::new(()),
            policies: HashMap::new(),
            uploads: Uploads::new(&UploadPolicy::default()),
            components: Default::default(),
            digests: Default::default(),
            replaying: Default::default(),
        }
    }

    /// Sets the sandbox policy of `tenant`'s agents in place of the config
    /// file's (`None`: the file's again), and binds its loaded agents to it
    /// at once: their next decisions run under it.
    pub fn set_tenant_sandbox(&self, tenant: &str, policy: Option<AgentPolicy>) -> Result<(), AgentError> {
        self.host
            .set_tenant_policy(tenant, policy)
            .map_err(|e| AgentError::Invalid { field: "limits.sandbox", message: e.to_string() })?;
        let components = self.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ((t, agent_id), agent) in components.iter().filter(|((t, _), _)| t == tenant) {
            let policy = self.policies.get(&(t.clone(), agent_id.clone())).cloned().unwrap_or_default();
            match agent.for_agent(t, agent_id, &policy) {
                Ok(rebound) => {
                    let version = self.digests().get(&(t.clone(), agent_id.clone())).cloned();
                    let worker: Arc<dyn Worker> = match version {
                        Some(version) => Arc::new(Versioned::new(Arc::new(rebound), version)),
                        None => Arc::new(rebound),
                    };
                    self.engine.register_agent(t, agent_id, worker);
                }
                Err(e) => {
                    tracing::error!(tenant = %t, agent = %agent_id, error = %e, "agent not bound to the new sandbox")
                }
            }
        }
        Ok(())
    }

    /// The sandbox policy of `tenant`'s agents in the config file.
    pub fn configured_sandbox(&self, tenant: &str) -> AgentPolicy {
        self.host.configured_tenant_policy(tenant)
    }

    /// The digest each registered agent was loaded from.
    fn digests(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.digests.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps track of what `tenant`'s agent `agent_id` runs as now.
    fn registered(&self, tenant: &str, agent_id: &str, component: Option<ComponentAgent>) {
        let mut components = self.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (tenant.to_owned(), agent_id.to_owned());
        match component {
            Some(agent) => components.insert(key, agent),
            None => components.remove(&key),
        };
    }

    /// Serves `tenant`'s agent `agent_id` with `worker`, its version
    /// `digest` (and `component`, its compiled code, when it is one): the
    /// engine's next decisions for the agent run it. Callers hold the
    /// write lock and have stored the version as current.
    fn serve(
        &self,
        tenant: &str,
        agent_id: &str,
        digest: String,
        worker: Arc<dyn Worker>,
        component: Option<ComponentAgent>,
    ) {
        self.registered(tenant, agent_id, component);
        self.engine.register_agent(tenant, agent_id, Arc::new(Versioned::new(worker, digest.clone())));
        self.digests().insert((tenant.to_owned(), agent_id.to_owned()), digest);
    }

    /// Refuses `bytes` of compiled code for `tenant`'s agent `agent_id`
    /// when, in place of its current version and beside what the tenant's
    /// other agents hold now, it would pass `max_compiled_bytes`.
    fn check_quota(&self, tenant: &str, agent_id: &str, bytes: u64, max_compiled_bytes: u64) -> Result<(), AgentError> {
        let others = self
            .components
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|((t, a), _)| t == tenant && a != agent_id)
            .map(|(_, agent)| agent.compiled_bytes())
            .sum();
        uploads::check_quota(others, bytes, max_compiled_bytes)
    }

    /// How many uploads compile at once on this server.
    pub fn with_upload_policy(mut self, policy: &UploadPolicy) -> Self {
        self.uploads = Uploads::new(policy);
        self
    }

    /// Sandbox policies of particular agents, by `(tenant, agent)`, over
    /// their tenant's (the operator's config; uploads cannot set them).
    pub fn with_policies(mut self, policies: HashMap<(String, String), AgentPolicy>) -> Self {
        self.policies = policies;
        self
    }

    /// Registers every stored agent with the engine. An agent that cannot
    /// be loaded (its component file is gone, or does not compile with
    /// this engine) is reported, as `(tenant, agent, why)`, and left out;
    /// its sessions' deliveries fail until it is uploaded again.
    pub async fn load_all(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        self.sync().await
    }

    /// Brings the agents registered with the engine in line with the
    /// store: loads those whose current version changed (or that are new)
    /// and unregisters those removed. What another node sharing the store
    /// uploaded is served here after this; see
    /// [`Engine::records_changed`]. Failures are reported as by
    /// [`load_all`](Self::load_all).
    pub async fn sync(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let _writing = self.writing.lock().await;
        let mut failures = Vec::new();
        let mut stored = std::collections::HashSet::new();
        for record in self.engine.store().agents(None).await? {
            let key = (record.tenant.clone(), record.agent_id.clone());
            stored.insert(key.clone());
            if self.digests().get(&key) == Some(&record.current.digest) {
                continue;
            }
            match self.worker(&record.tenant, &record.agent_id, &record.current).await {
                Ok((worker, component)) => {
                    self.serve(&record.tenant, &record.agent_id, record.current.digest, worker, component);
                }
                Err(e) => {
                    tracing::error!(tenant = %record.tenant, agent = %record.agent_id, error = %e, "agent not loaded");
                    failures.push((record.tenant, record.agent_id, e.to_string()));
                }
            }
        }
        let gone: Vec<(String, String)> = self.digests().keys().filter(|key| !stored.contains(*key)).cloned().collect();
        for (tenant, agent_id) in gone {
            self.engine.unregister_agent(&tenant, &agent_id);
            self.registered(&tenant, &agent_id, None);
            self.digests().remove(&(tenant, agent_id));
        }
        Ok(failures)
    }

    /// Whether `tenant` has an agent `agent_id`.
    pub async fn exists(&self, tenant: &str, agent_id: &str) -> Result<bool, StoreError> {
        Ok(self.engine.store().agent(tenant, agent_id).await?.is_some())
    }

    /// The record of `tenant`'s agent `agent_id`: its current version and
    /// those before it. `None` when the tenant has no such agent.
    pub async fn agent(&self, tenant: &str, agent_id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.engine.store().agent(tenant, agent_id).await
    }

    /// The records of `tenant`'s agents, by id.
    pub async fn agents(&self, tenant: &str) -> Result<Vec<AgentRecord>, StoreError> {
        self.engine.store().agents(Some(tenant)).await
    }

    fn component_path(&self, digest: &str) -> PathBuf {
        self.dir.join(format!("{}.wasm", digest.trim_start_matches("sha256:")))
    }

    /// The worker of a version of `tenant`'s agent `agent_id`, and the
    /// component when it is one.
    async fn worker(
        &self,
        tenant: &str,
        agent_id: &str,
        version: &AgentVersion,
    ) -> Result<(Arc<dyn Worker>, Option<ComponentAgent>), AgentError> {
        match &version.worker {
            AgentWorker::Component { .. } => {
                let bytes = self.component_bytes(&version.digest).await?;
                let agent = self.compile(tenant, agent_id, bytes).await?;
                Ok((Arc::new(agent.clone()), Some(agent)))
            }
            AgentWorker::Http { url, secret } => {
                let mut options = HttpWorkerOptions::new();
                if let Some(secret) = secret {
                    options = options.secret(secret);
                }
                let worker = HttpWorker::new(url, options)
                    .map_err(|e| AgentError::Invalid { field: "url", message: e.to_string() })?;
                Ok((Arc::new(worker), None))
            }
        }
    }

    /// The bytes of the component `digest`: from the data directory, else
    /// (uploaded to another node sharing the store) from the store, and
    /// kept here from then on.
    async fn component_bytes(&self, digest: &str) -> Result<Vec<u8>, AgentError> {
        let path = self.component_path(digest);
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(bytes),
            Err(e) => match self.engine.store().shared() {
                Some(shared) if e.kind() == std::io::ErrorKind::NotFound => {
                    let bytes = shared
                        .blob(digest)
                        .await?
                        .ok_or_else(|| AgentError::Internal(format!("the store has no component {digest}")))?;
                    self.keep_bytes(&path, bytes.clone()).await?;
                    Ok(bytes)
                }
                _ => Err(AgentError::Internal(format!("reading {}: {e}", path.display()))),
            },
        }
    }

    /// A stored version of `tenant`'s agent `agent_id`, loaded to replay
    /// recorded decisions against (see [`crate::replay`]): under the
    /// agent's limits, with no outgoing HTTP whatever its allow-list. An
    /// HTTP worker's version is refused, as a replay runs only components
    /// in the sandbox.
    async fn replay_candidate(&self, tenant: &str, agent_id: &str, digest: &str) -> Result<ComponentAgent, AgentError> {
        let record = self.engine.store().agent(tenant, agent_id).await?;
        let unknown = || AgentError::UnknownVersion { agent_id: agent_id.to_owned(), version: digest.to_owned() };
        let version = record.as_ref().and_then(|r| r.version(digest)).ok_or_else(unknown)?;
        if let AgentWorker::Http { .. } = version.worker {
            return Err(AgentError::Invalid {
                field: "version",
                message: format!("{digest} is an HTTP worker; a replay runs only uploaded components"),
            });
        }
        let bytes = self.component_bytes(digest).await?;
        let agent = self.compile(tenant, agent_id, bytes).await?;
        let own = self.policies.get(&(tenant.to_owned(), agent_id.to_owned())).cloned().unwrap_or_default();
        let policy = AgentPolicy { http_hosts: Some(Vec::new()), ..own };
        agent.for_agent(tenant, agent_id, &policy).map_err(|e| AgentError::Internal(e.to_string()))
    }

    /// Replays `tenant`'s recorded decisions of agent `agent_id` against
    /// its stored version `digest` (see [`crate::replay`]);
    /// [`AgentError::UnknownVersion`] when the agent has no such version.
    /// One replay per tenant runs at a time.
    pub async fn replay(
        &self,
        tenant: &str,
        agent_id: &str,
        digest: &str,
        selection: &Selection,
        progress: Option<Progress>,
    ) -> Result<ReplayReport, AgentError> {
        let _replaying = ReplayGuard::take(&self.replaying, tenant)?;
        let candidate = self.replay_candidate(tenant, agent_id, digest).await?;
        let store = self.engine.store();
        crate::replay::replay(store.as_ref(), tenant, agent_id, &candidate, selection, progress).await.map_err(|e| {
            match e {
                ReplayError::Store(e) => e.into(),
                e => AgentError::Invalid { field: "sessions", message: e.to_string() },
            }
        })
    }

    /// Checks and compiles a component off the async threads (see
    /// `ComponentHost::load_as`); a component that does not fit the world,
    /// its limits or the compile budget is the uploader's error.
    async fn compile(&self, tenant: &str, agent_id: &str, bytes: Vec<u8>) -> Result<ComponentAgent, AgentError> {
        let host = self.host.clone();
        let policy = self.policies.get(&(tenant.to_owned(), agent_id.to_owned())).cloned().unwrap_or_default();
        let (tenant, agent_id) = (tenant.to_owned(), agent_id.to_owned());
        tokio::task::spawn_blocking(move || host.load_as(&tenant, &agent_id, &policy, &bytes))
            .await
            .map_err(|e| AgentError::Internal(e.to_string()))?
            .map_err(|e| match e {
                LoadError::Engine(_) | LoadError::Cache(_) => AgentError::Internal(e.to_string()),
                e => AgentError::InvalidComponent(e),
            })
    }

    /// Makes `version` the current version of the agent, run by `worker`
    /// (and `component`, its compiled code, when it is one); returns the
    /// agent and whether anything changed. The caller holds the write
    /// lock, `_writing`.
    async fn put(
        &self,
        _writing: &tokio::sync::MutexGuard<'_, ()>,
        tenant: &str,
        agent_id: &str,
        version: AgentVersion,
        worker: Arc<dyn Worker>,
        component: Option<ComponentAgent>,
    ) -> Result<(AgentRecord, bool), AgentError> {
        let record = match self.engine.store().agent(tenant, agent_id).await? {
            Some(current) if current.current.digest == version.digest => return Ok((current, false)),
            Some(mut record) => {
                let previous = std::mem::replace(&mut record.current, version);
                record.history.retain(|v| v.digest != record.current.digest);
                keep_in_history(&mut record.history, previous);
                record
            }
            None => AgentRecord {
                tenant: tenant.to_owned(),
                agent_id: agent_id.to_owned(),
                created_ms: version.created_ms,
                current: version,
                history: Vec::new(),
            },
        };
        let mut batch = Batch::new();
        batch.push(Op::PutAgent(record.clone()));
        self.engine.store().commit(batch).await?;
        self.serve(tenant, agent_id, record.current.digest.clone(), worker, component);
        Ok((record, true))
    }

    /// Takes one upload from the tenant's allowance of `per_hour`, before
    /// its body is read: a refused upload costs no memory and no compile.
    pub fn meter_upload(&self, tenant: &str, per_hour: u32) -> Result<(), AgentError> {
        self.uploads.meter(tenant, per_hour)
    }

    /// Uploads a component as a version of the agent: checked, compiled
    /// (one compile per tenant at a time) and held to the tenant's
    /// compiled-code quota, `max_compiled_bytes`, before anything of it is
    /// kept. With `activate` it becomes the current version; without, it
    /// is only stored (see [`store_inactive`](Self::store_inactive)).
    pub async fn put_component(
        &self,
        tenant: &str,
        agent_id: &str,
        bytes: Vec<u8>,
        max_compiled_bytes: u64,
        activate: bool,
    ) -> Result<(AgentRecord, bool), AgentError> {
        // Refused before the compile, which would be wasted.
        if !activate && !self.exists(tenant, agent_id).await? {
            return Err(AgentError::NoActiveVersion { agent_id: agent_id.to_owned() });
        }
        let digest = component_digest(&bytes);
        let size = bytes.len() as u64;
        let path = self.component_path(&digest);
        let turn = self.uploads.turn(tenant).await?;
        let agent = self.compile(tenant, agent_id, bytes.clone()).await?;
        drop(turn);
        // Checked and kept under the lock every registration takes: two
        // uploads of the tenant that finish together are held to the quota
        // together, and the one refused leaves nothing behind. (An inactive
        // version registers nothing, and holds no room.)
        let writing = if activate { Some(self.writing.lock().await) } else { None };
        self.check_quota(tenant, agent_id, agent.compiled_bytes(), max_compiled_bytes)?;
        let worker: Arc<dyn Worker> = Arc::new(agent.clone());
        // In the shared store before the record naming it, so that no node
        // reads a version whose bytes it cannot fetch.
        if let Some(shared) = self.engine.store().shared() {
            shared.put_blob(&digest, &bytes).await?;
        }
        if !path.exists() {
            self.keep_bytes(&path, bytes).await?;
        }
        let version =
            AgentVersion { digest, worker: AgentWorker::Component { bytes: size }, created_ms: crate::clock::now_ms() };
        match writing {
            Some(writing) => self.put(&writing, tenant, agent_id, version, worker, Some(agent)).await,
            None => self.store_inactive(tenant, agent_id, version).await,
        }
    }

    /// Writes a component's bytes under its digest's name, whole or not at
    /// all (a crash never leaves a torn file there), as the compile caches
    /// write theirs.
    async fn keep_bytes(&self, path: &std::path::Path, bytes: Vec<u8>) -> Result<(), AgentError> {
        let (dir, path) = (self.dir.clone(), path.to_owned());
        tokio::task::spawn_blocking(move || write_atomically(&dir, &path, &bytes))
            .await
            .map_err(|e| AgentError::Internal(e.to_string()))?
            .map_err(|e| AgentError::Internal(e.to_string()))
    }

    /// Registers the HTTP worker at `url` as a version of the agent; its
    /// requests are signed with `secret` when there is one. With
    /// `activate` it becomes the current version; without, it is only
    /// stored (see [`store_inactive`](Self::store_inactive)).
    pub async fn put_http(
        &self,
        tenant: &str,
        agent_id: &str,
        url: String,
        secret: Option<String>,
        activate: bool,
    ) -> Result<(AgentRecord, bool), AgentError> {
        let version = AgentVersion {
            digest: http_digest(&url, secret.as_deref()),
            worker: AgentWorker::Http { url, secret },
            created_ms: crate::clock::now_ms(),
        };
        let (worker, _) = self.worker(tenant, agent_id, &version).await?;
        if !activate {
            return self.store_inactive(tenant, agent_id, version).await;
        }
        let writing = self.writing.lock().await;
        self.put(&writing, tenant, agent_id, version, worker, None).await
    }

    /// Stores `version` among the agent's other versions without making it
    /// current: nothing is registered with the engine, and the agent's
    /// decisions go on running its current version. Returns the agent and
    /// whether anything changed (not when the version is already stored,
    /// current or not). Refused for an agent that does not exist yet: its
    /// first version must be activated.
    async fn store_inactive(
        &self,
        tenant: &str,
        agent_id: &str,
        version: AgentVersion,
    ) -> Result<(AgentRecord, bool), AgentError> {
        let _writing = self.writing.lock().await;
        let Some(mut record) = self.engine.store().agent(tenant, agent_id).await? else {
            return Err(AgentError::NoActiveVersion { agent_id: agent_id.to_owned() });
        };
        if record.version(&version.digest).is_some() {
            return Ok((record, false));
        }
        keep_in_history(&mut record.history, version);
        let mut batch = Batch::new();
        batch.push(Op::PutAgent(record.clone()));
        self.engine.store().commit(batch).await?;
        Ok((record, true))
    }

    /// Makes the stored version `digest` the agent's current version: the
    /// version current until now joins the others, the new one is loaded
    /// (a component from its kept bytes, compiled or from the compile
    /// cache, and held to `max_compiled_bytes`; an HTTP worker from its
    /// stored URL and secret) and registered with the engine, so the
    /// agent's next decisions run it. Deliveries already under way finish
    /// on the worker they started with. Other nodes sharing the store load
    /// it on their next [`sync`](Self::sync). Rolling back is the same
    /// call with an earlier version.
    ///
    /// Returns the agent and whether anything changed (not when `digest`
    /// was already current); `None` when the tenant has no such agent, and
    /// [`AgentError::UnknownVersion`] when the agent has no such version. A
    /// version that cannot be loaded is not made current.
    pub async fn activate(
        &self,
        tenant: &str,
        agent_id: &str,
        digest: &str,
        max_compiled_bytes: u64,
    ) -> Result<Option<(AgentRecord, bool)>, AgentError> {
        let _writing = self.writing.lock().await;
        let Some(mut record) = self.engine.store().agent(tenant, agent_id).await? else { return Ok(None) };
        if record.current.digest == digest {
            return Ok(Some((record, false)));
        }
        let Some(at) = record.history.iter().position(|v| v.digest == digest) else {
            return Err(AgentError::UnknownVersion { agent_id: agent_id.to_owned(), version: digest.to_owned() });
        };
        let (worker, component) = self.worker(tenant, agent_id, &record.history[at]).await?;
        if let Some(component) = &component {
            self.check_quota(tenant, agent_id, component.compiled_bytes(), max_compiled_bytes)?;
        }
        let version = record.history.remove(at);
        let previous = std::mem::replace(&mut record.current, version);
        keep_in_history(&mut record.history, previous);
        let mut batch = Batch::new();
        batch.push(Op::PutAgent(record.clone()));
        self.engine.store().commit(batch).await?;
        self.serve(tenant, agent_id, record.current.digest.clone(), worker, component);
        Ok(Some((record, true)))
    }

    /// How many decisions each version of `tenant`'s agent `agent_id` made,
    /// by digest: the counts kept in the records of the agent's sessions
    /// ([`SessionRecord::versions`](crate::store::SessionRecord::versions)),
    /// summed. This reads every session record of the tenant, a page at a
    /// time, so it costs in proportion to the tenant's sessions.
    pub async fn decisions(&self, tenant: &str, agent_id: &str) -> Result<HashMap<String, u64>, StoreError> {
        const PAGE: usize = 1000;
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.engine.store().sessions_page(tenant, after.as_deref(), PAGE).await?;
            for record in page.iter().filter(|r| r.agent_id == agent_id) {
                for (version, n) in &record.versions {
                    let count = counts.entry(version.clone()).or_default();
                    *count = count.saturating_add(*n);
                }
            }
            if page.len() < PAGE {
                return Ok(counts);
            }
            after = page.last().map(|r| r.key.session.clone());
        }
    }

    /// Removes an agent. Its sessions stay; their deliveries fail (and are
    /// retried per policy) until an agent of that id is uploaded again.
    /// `false` when the tenant had no such agent.
    pub async fn delete(&self, tenant: &str, agent_id: &str) -> Result<bool, StoreError> {
        let _writing = self.writing.lock().await;
        if self.engine.store().agent(tenant, agent_id).await?.is_none() {
            return Ok(false);
        }
        let mut batch = Batch::new();
        batch.push(Op::DeleteAgent { tenant: tenant.to_owned(), agent_id: agent_id.to_owned() });
        self.engine.store().commit(batch).await?;
        self.engine.unregister_agent(tenant, agent_id);
        self.registered(tenant, agent_id, None);
        self.digests().remove(&(tenant.to_owned(), agent_id.to_owned()));
        Ok(true)
    }
}

/// Adds `version` to an agent's other versions, which are kept in upload
/// order: after every version uploaded no later than it.
fn keep_in_history(history: &mut Vec<AgentVersion>, version: AgentVersion) {
    let at = history.partition_point(|v| v.created_ms <= version.created_ms);
    history.insert(at, version);
}

/// The version name of a component: `sha256:<hex>` of its bytes.
pub fn component_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The version name of an HTTP worker: `sha256:<hex>` of its URL and
/// signing secret, so that changing either makes a new version.
pub fn http_digest(url: &str, secret: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(url.as_bytes());
    hasher.update([0]);
    hasher.update(secret.unwrap_or_default().as_bytes());
    format!("sha256:{}", hex::encode(hasher.finalize()))
}
