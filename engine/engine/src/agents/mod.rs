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
//! What an agent keeps is bounded ([`AgentLimits`]): at most
//! `max_agent_versions` versions (the current one and those before it),
//! at most `max_agent_bytes` of them, and all the tenant's agents at most
//! `max_stored_agent_bytes`. A version stored past a bound drops the
//! agent's oldest inactive versions to make room, never the current one
//! and, while another can go, never the version current before it (the
//! one a rollback goes back to); when dropping all of them is not room
//! enough, the version is refused ([`AgentError::StoredQuota`]).
//!
//! A component's files (its bytes under `components/`, its compiled code
//! under `compiled/`) and its blob in a shared store are kept while any
//! agent of any tenant, on any node, has a version of that digest, and
//! removed once none has: when an agent or a version is deleted or
//! dropped ([`AgentRegistry::collect`]), and at start for whatever a
//! crash left. The record goes first and the files after, so a crash
//! in between leaves files nobody refers to, which the next collection
//! removes, and never a record whose files are gone.
//!
//! Changes to one tenant's agents are made one at a time, under that
//! tenant's lock; tenants do not wait for each other.
//!
//! The registry lives beside the loop rather than in the HTTP server so
//! that the server reaches the store only through the engine: it asks the
//! registry, which keeps the records and registers the workers.

pub mod uploads;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use self::uploads::{UploadPolicy, Uploads};
use crate::Engine;
use crate::replay::{Progress, ReplayError, ReplayReport, Selection};
use crate::store::{AgentRecord, AgentVersion, AgentWorker, Batch, OciSource, Op, StoreError};
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
    /// The tenant used its hourly allowance of uploads (components and
    /// HTTP workers alike).
    #[error(
        "the tenant has used its {per_hour} agent uploads per hour (components and HTTP workers; limit \
         `max_uploads_per_hour`); the next is allowed in {next_in_secs} s"
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
    /// The version would make the agent's stored versions, or all the
    /// tenant's, pass their bound of bytes even with every other inactive
    /// version of the agent dropped.
    #[error(
        "{whose} would store {} with this version ({}), more than {} (limit `{setting}`), even with every other \
         inactive version of the agent dropped; delete agents or versions no longer needed",
        size(*total),
        size(*bytes),
        size(*limit)
    )]
    StoredQuota {
        /// Whose bound: "agent `a`'s versions", "the tenant's agents".
        whose: String,
        /// The setting: `max_agent_bytes` or `max_stored_agent_bytes`.
        setting: &'static str,
        /// What would be stored with this version, in bytes.
        total: u64,
        /// What this version holds, in bytes.
        bytes: u64,
        /// The bound, in bytes.
        limit: u64,
    },
    /// The version to delete is the agent's current one: its sessions
    /// need a version to run.
    #[error(
        "`{version}` is the current version of agent `{agent_id}`: activate another version first, or delete the \
         agent"
    )]
    CurrentVersion {
        /// The agent.
        agent_id: String,
        /// The version.
        version: String,
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

/// Writes `n` bytes for people: in MiB from 1 MiB up, else in bytes.
fn size(n: u64) -> String {
    if n >= 1 << 20 { format!("{} MiB", n >> 20) } else { format!("{n} bytes") }
}

/// What a tenant's agents may hold: its limits that bear on agents, named
/// as the server's settings name them (see docs/configuration.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentLimits {
    /// Compiled code its current agents may hold, in bytes.
    pub max_compiled_bytes: u64,
    /// Versions one agent keeps, the current one included; at least 2
    /// (less counts as 2): the current version and one to roll back to.
    pub max_agent_versions: usize,
    /// Bytes one agent's stored versions may hold (see
    /// [`AgentVersion::stored_bytes`]).
    pub max_agent_bytes: u64,
    /// Bytes all the tenant's agents' stored versions may hold, each
    /// digest counted once.
    pub max_stored_agent_bytes: u64,
    /// The longest HTTP worker URL, in bytes.
    pub max_worker_url_bytes: usize,
    /// The longest HTTP worker signing secret, in bytes.
    pub max_worker_secret_bytes: usize,
}

impl Default for AgentLimits {
    fn default() -> Self {
        Self {
            max_compiled_bytes: 1 << 30,
            max_agent_versions: 16,
            max_agent_bytes: 512 << 20,
            max_stored_agent_bytes: 2 << 30,
            max_worker_url_bytes: 2048,
            max_worker_secret_bytes: 256,
        }
    }
}

/// How recently a blob of a shared store must have been stored for a
/// collection to keep it though no agent refers to it: an upload on
/// another node stores the blob just before the record naming it.
const FRESH_BLOB: Duration = Duration::from_secs(10 * 60);

/// Async locks by name, made when first wanted and forgotten once nobody
/// holds or waits for them: the registry's lock per tenant, and per
/// component digest.
#[derive(Default)]
struct Locks(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// A lock of [`Locks`], held until dropped.
struct Held<'a> {
    locks: &'a Locks,
    name: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Locks {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn entry(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.map();
        // A waiter that gave up leaves an entry nobody holds; such entries
        // are cleared now and then, so the map stays as small as the
        // locks in use.
        if map.len() >= 1024 {
            map.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        map.entry(name.to_owned()).or_default().clone()
    }

    /// Waits for the lock `name`.
    async fn lock(&self, name: &str) -> Held<'_> {
        let guard = self.entry(name).lock_owned().await;
        Held { locks: self, name: name.to_owned(), guard: Some(guard) }
    }

    /// The lock `name`, unless someone holds it.
    fn try_lock(&self, name: &str) -> Option<Held<'_>> {
        let guard = self.entry(name).try_lock_owned().ok()?;
        Some(Held { locks: self, name: name.to_owned(), guard: Some(guard) })
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut map = self.locks.map();
        drop(self.guard.take());
        // Nobody else has it (a waiter holds a clone): forget it.
        if map.get(&self.name).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            map.remove(&self.name);
        }
    }
}

/// The agents of every tenant, kept in the store and registered with the
/// engine.
pub struct AgentRegistry {
    engine: Engine,
    host: ComponentHost,
    /// Where component bytes are kept, by digest.
    dir: PathBuf,
    /// Where their compiled code is kept (the compile cache).
    compiled: PathBuf,
    /// One change of a tenant's agents at a time: a change reads, then
    /// replaces, their records.
    tenants: Locks,
    /// One user of a component digest's files at a time: an upload
    /// writing them and committing the record that names them, or a
    /// collection removing them.
    files: Locks,
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
            compiled: dir.join("compiled"),
            dir: dir.join("components"),
            tenants: Locks::default(),
            files: Locks::default(),
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
    /// tenant's lock and have stored the version as current.
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
    /// its sessions' deliveries fail until it is uploaded again. Then
    /// removes the files (and stale shared blobs) no agent refers to,
    /// which a crash between a record's removal and its files' may have
    /// left (see [`collect`](Self::collect)).
    pub async fn load_all(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let failures = self.sync().await?;
        self.collect_blobs(&self.referenced().await?).await;
        Ok(failures)
    }

    /// Brings the agents registered with the engine in line with the
    /// store: loads those whose current version changed (or that are new)
    /// and unregisters those removed, each under its tenant's lock; then
    /// removes this node's files of components no agent refers to any
    /// more. What another node sharing the store uploaded is served here
    /// after this, and what it deleted is gone from here too; see
    /// [`Engine::records_changed`]. Failures are reported as by
    /// [`load_all`](Self::load_all).
    pub async fn sync(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut failures = Vec::new();
        let mut stored = std::collections::HashSet::new();
        for record in self.engine.store().agents(None).await? {
            let key = (record.tenant.clone(), record.agent_id.clone());
            stored.insert(key.clone());
            if self.digests().get(&key) == Some(&record.current.digest) {
                continue;
            }
            let _writing = self.tenants.lock(&record.tenant).await;
            // Read again under the lock: a change made here since the list
            // was read is newer than the list.
            let Some(record) = self.engine.store().agent(&record.tenant, &record.agent_id).await? else { continue };
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
            let _writing = self.tenants.lock(&tenant).await;
            if self.engine.store().agent(&tenant, &agent_id).await?.is_some() {
                continue; // uploaded here since the list was read
            }
            self.engine.unregister_agent(&tenant, &agent_id);
            self.registered(&tenant, &agent_id, None);
            self.digests().remove(&(tenant, agent_id));
        }
        self.collect_files().await?;
        Ok(failures)
    }

    /// Whether `tenant` has an agent `agent_id`: one this node serves is
    /// known without reading the store (its sessions are delivered to what
    /// this node serves, too); any other is looked up there, as another
    /// node may have registered it a moment ago.
    pub async fn exists(&self, tenant: &str, agent_id: &str) -> Result<bool, StoreError> {
        if self.digests().contains_key(&(tenant.to_owned(), agent_id.to_owned())) {
            return Ok(true);
        }
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

    /// The bytes of the stored component version `digest` of `tenant`'s
    /// agent `agent_id` (to push it to a registry, say).
    /// [`AgentError::UnknownVersion`] when the agent has no such version,
    /// or it is an HTTP worker.
    pub async fn version_bytes(&self, tenant: &str, agent_id: &str, digest: &str) -> Result<Vec<u8>, AgentError> {
        let record = self.engine.store().agent(tenant, agent_id).await?;
        match record.as_ref().and_then(|r| r.version(digest)).map(|v| &v.worker) {
            Some(AgentWorker::Component { .. }) => self.component_bytes(digest).await,
            Some(AgentWorker::Http { .. }) => Err(AgentError::Invalid {
                field: "version",
                message: format!("{digest} is an HTTP worker, which has no component bytes"),
            }),
            None => Err(AgentError::UnknownVersion { agent_id: agent_id.to_owned(), version: digest.to_owned() }),
        }
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

    /// Stores the agent's record as `planned` (see [`plan`]) and, when
    /// `serve` gives the worker of its new current version (and its
    /// compiled code, for a component), registers it: the engine's next
    /// decisions for the agent run it. Returns what was planned: the
    /// versions it dropped are for the caller to collect once it holds no
    /// lock. The caller holds the tenant's lock, `_writing`, and planned
    /// under it.
    async fn store_planned(
        &self,
        _writing: &Held<'_>,
        (tenant, agent_id): (&str, &str),
        planned: Planned,
        serve: Option<(Arc<dyn Worker>, Option<ComponentAgent>)>,
    ) -> Result<Planned, AgentError> {
        if !planned.changed {
            return Ok(planned);
        }
        let mut batch = Batch::new();
        batch.push(Op::PutAgent(planned.record.clone()));
        self.engine.store().commit(batch).await?;
        for dropped in &planned.dropped {
            tracing::info!(
                %tenant,
                agent = %agent_id,
                version = %dropped.digest,
                "a stored agent version was dropped to make room (`max_agent_versions`, `max_agent_bytes`, \
                 `max_stored_agent_bytes`)"
            );
        }
        if let Some((worker, component)) = serve {
            self.serve(tenant, agent_id, planned.record.current.digest.clone(), worker, component);
        }
        Ok(planned)
    }

    /// What storing `version` would make of the agent's record, as the
    /// store holds it and the tenant's other agents now (see [`plan`]);
    /// a refusal is logged.
    async fn plan(
        &self,
        tenant: &str,
        agent_id: &str,
        version: AgentVersion,
        activate: bool,
        limits: &AgentLimits,
    ) -> Result<Planned, AgentError> {
        let store = self.engine.store();
        let existing = store.agent(tenant, agent_id).await?;
        let others = stored_by_digest(store.agents(Some(tenant)).await?.iter().filter(|r| r.agent_id != agent_id));
        plan(existing, &others, version, activate, (tenant, agent_id), limits).inspect_err(|error| {
            if let AgentError::StoredQuota { .. } = error {
                tracing::info!(%tenant, agent = %agent_id, %error, "an agent version was refused");
            }
        })
    }

    /// Takes one upload from the tenant's allowance of `per_hour`, before
    /// its body is read: a refused upload costs no memory and no compile.
    /// Components and HTTP workers alike are uploads.
    pub fn meter_upload(&self, tenant: &str, per_hour: u32) -> Result<(), AgentError> {
        self.uploads.meter(tenant, per_hour)
    }

    /// Uploads a component as a version of the agent: checked, compiled
    /// (one compile per tenant at a time) and held to the tenant's
    /// `limits` (its compiled-code quota, and what its agents may store)
    /// before anything of it is kept. With `activate` it becomes the
    /// current version; without, it is only stored, beside the current
    /// one, which new decisions go on running; an agent's first version
    /// must be activated ([`AgentError::NoActiveVersion`]). Returns the
    /// agent and whether anything changed (not when the version was
    /// already current, or already stored for an inactive upload).
    pub async fn put_component(
        &self,
        tenant: &str,
        agent_id: &str,
        bytes: Vec<u8>,
        limits: &AgentLimits,
        activate: bool,
    ) -> Result<(AgentRecord, bool), AgentError> {
        self.put_pulled(tenant, agent_id, bytes, limits, activate, None).await
    }

    /// [`AgentRegistry::put_component`] for a component pulled from an
    /// OCI registry: the same checks, compile and quotas, with the
    /// reference and manifest digest it came from kept on the version
    /// ([`AgentVersion::oci`]). A version already stored with the same
    /// bytes keeps what it recorded.
    pub async fn put_pulled(
        &self,
        tenant: &str,
        agent_id: &str,
        bytes: Vec<u8>,
        limits: &AgentLimits,
        activate: bool,
        oci: Option<OciSource>,
    ) -> Result<(AgentRecord, bool), AgentError> {
        let now = crate::clock::now_ms();
        let version = AgentVersion {
            digest: component_digest(&bytes),
            worker: AgentWorker::Component { bytes: bytes.len() as u64 },
            created_ms: now,
            activated_ms: activate.then_some(now),
            oci,
        };
        // Refused before the compile, which would be wasted.
        self.plan(tenant, agent_id, version.clone(), activate, limits).await?;
        let turn = self.uploads.turn(tenant).await?;
        // Held until the record naming the digest is stored, so that no
        // collection removes the files meanwhile.
        let files = self.files.lock(&version.digest).await;
        let agent = self.compile(tenant, agent_id, bytes.clone()).await?;
        drop(turn);
        let stored = self.keep_component(tenant, agent_id, version, bytes, agent, limits, activate).await;
        drop(files);
        // What was dropped goes, and so does the compiled code of an
        // upload refused after its compile (unless another agent has it).
        if stored.as_ref().map_or(true, |planned| !planned.dropped.is_empty()) {
            self.collect().await;
        }
        stored.map(|planned| (planned.record, planned.changed))
    }

    /// Keeps a compiled upload: held to the tenant's quotas under its
    /// lock, so two uploads of the tenant that finish together are held
    /// to them together, and the one refused leaves nothing behind; its
    /// bytes kept (in the shared store first, then here) before the record
    /// naming them, so that no node reads a version whose bytes it cannot
    /// fetch. The caller holds the digest's files lock.
    #[allow(clippy::too_many_arguments)]
    async fn keep_component(
        &self,
        tenant: &str,
        agent_id: &str,
        version: AgentVersion,
        bytes: Vec<u8>,
        agent: ComponentAgent,
        limits: &AgentLimits,
        activate: bool,
    ) -> Result<Planned, AgentError> {
        let writing = self.tenants.lock(tenant).await;
        self.check_quota(tenant, agent_id, agent.compiled_bytes(), limits.max_compiled_bytes)?;
        // Planned before anything is written: a version refused here
        // leaves no bytes to remove.
        let planned = self.plan(tenant, agent_id, version.clone(), activate, limits).await?;
        if let Some(shared) = self.engine.store().shared() {
            shared.put_blob(&version.digest, &bytes).await?;
        }
        let path = self.component_path(&version.digest);
        if !path.exists() {
            self.keep_bytes(&path, bytes).await?;
        }
        let worker: Arc<dyn Worker> = Arc::new(agent.clone());
        self.store_planned(&writing, (tenant, agent_id), planned, activate.then_some((worker, Some(agent)))).await
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
    /// requests are signed with `secret` when there is one. The URL and
    /// secret are bounded by `limits` (`max_worker_url_bytes`,
    /// `max_worker_secret_bytes`), and the version is stored as a
    /// component's is (see [`put_component`](Self::put_component)).
    pub async fn put_http(
        &self,
        tenant: &str,
        agent_id: &str,
        url: String,
        secret: Option<String>,
        limits: &AgentLimits,
        activate: bool,
    ) -> Result<(AgentRecord, bool), AgentError> {
        checked_worker(&url, secret.as_deref(), limits).inspect_err(|error| {
            tracing::info!(%tenant, agent = %agent_id, %error, "an HTTP worker was refused");
        })?;
        let now = crate::clock::now_ms();
        let version = AgentVersion {
            digest: http_digest(&url, secret.as_deref()),
            worker: AgentWorker::Http { url, secret },
            created_ms: now,
            activated_ms: activate.then_some(now),
            oci: None,
        };
        let (worker, _) = self.worker(tenant, agent_id, &version).await?;
        let writing = self.tenants.lock(tenant).await;
        let stored = match self.plan(tenant, agent_id, version, activate, limits).await {
            Ok(planned) => {
                self.store_planned(&writing, (tenant, agent_id), planned, activate.then_some((worker, None))).await
            }
            Err(error) => Err(error),
        };
        drop(writing);
        if stored.as_ref().is_ok_and(|planned| !planned.dropped.is_empty()) {
            self.collect().await;
        }
        stored.map(|planned| (planned.record, planned.changed))
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
        let _writing = self.tenants.lock(tenant).await;
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
        let mut version = record.history.remove(at);
        version.activated_ms = Some(crate::clock::now_ms());
        demote(&mut record, version);
        let mut batch = Batch::new();
        batch.push(Op::PutAgent(record.clone()));
        self.engine.store().commit(batch).await?;
        self.serve(tenant, agent_id, record.current.digest.clone(), worker, component);
        Ok(Some((record, true)))
    }

    /// How many decisions each version of `tenant`'s agent `agent_id` made,
    /// by digest: the counts the store keeps as decisions are committed
    /// ([`Store::decision_counts`](crate::store::Store::decision_counts)),
    /// one entry per version that decided, however many sessions the
    /// tenant has.
    pub async fn decisions(&self, tenant: &str, agent_id: &str) -> Result<HashMap<String, u64>, StoreError> {
        Ok(self.engine.store().decision_counts(tenant, agent_id).await?.into_iter().collect())
    }

    /// Removes an agent, then the files of its versions that no other
    /// agent has (see [`collect`](Self::collect)). Its sessions stay;
    /// their deliveries fail (at once, not retried) until an agent of that
    /// id is uploaded again. `false` when the tenant had no such
    /// agent.
    pub async fn delete(&self, tenant: &str, agent_id: &str) -> Result<bool, StoreError> {
        {
            let _writing = self.tenants.lock(tenant).await;
            if self.engine.store().agent(tenant, agent_id).await?.is_none() {
                return Ok(false);
            }
            let mut batch = Batch::new();
            batch.push(Op::DeleteAgent { tenant: tenant.to_owned(), agent_id: agent_id.to_owned() });
            self.engine.store().commit(batch).await?;
            self.engine.unregister_agent(tenant, agent_id);
            self.registered(tenant, agent_id, None);
            self.digests().remove(&(tenant.to_owned(), agent_id.to_owned()));
        }
        self.collect().await;
        Ok(true)
    }

    /// Removes the stored version `digest` of an agent, then its files
    /// unless another agent has that version (see
    /// [`collect`](Self::collect)); returns the agent as it is then.
    /// `None` when the tenant has no such agent;
    /// [`AgentError::UnknownVersion`] when the agent has no such version;
    /// [`AgentError::CurrentVersion`] for its current version, which its
    /// sessions run.
    pub async fn delete_version(
        &self,
        tenant: &str,
        agent_id: &str,
        digest: &str,
    ) -> Result<Option<AgentRecord>, AgentError> {
        let record = {
            let _writing = self.tenants.lock(tenant).await;
            let Some(mut record) = self.engine.store().agent(tenant, agent_id).await? else { return Ok(None) };
            if record.current.digest == digest {
                return Err(AgentError::CurrentVersion { agent_id: agent_id.to_owned(), version: digest.to_owned() });
            }
            let Some(at) = record.history.iter().position(|v| v.digest == digest) else {
                return Err(AgentError::UnknownVersion { agent_id: agent_id.to_owned(), version: digest.to_owned() });
            };
            record.history.remove(at);
            let mut batch = Batch::new();
            batch.push(Op::PutAgent(record.clone()));
            self.engine.store().commit(batch).await?;
            record
        };
        self.collect().await;
        Ok(Some(record))
    }

    /// Removes the files of components no agent of any tenant has a
    /// version of any more (their bytes under `components/`, their
    /// compiled code under `compiled/`), and, in a shared store, their
    /// blobs once stored more than [`FRESH_BLOB`] ago (younger ones at a
    /// later collection). The files of a digest being uploaded are left
    /// for a later collection. Called after every removal of a version
    /// (an agent deleted, a version deleted or dropped), at start, and on
    /// each [`sync`](Self::sync) (this node's files only). Failures are
    /// logged, not returned: what is left stays for the next collection.
    pub async fn collect(&self) {
        match self.collect_files().await {
            Ok(referenced) => self.collect_blobs(&referenced).await,
            Err(error) => tracing::warn!(%error, "the files of removed agent versions were not collected"),
        }
    }

    /// Every digest some version of some agent has, of any tenant.
    async fn referenced(&self) -> Result<HashSet<String>, StoreError> {
        let records = self.engine.store().agents(None).await?;
        Ok(records.iter().flat_map(|r| r.versions().map(|v| v.digest.clone())).collect())
    }

    /// Removes this node's files of components no agent has a version of;
    /// returns the digests agents have, as last read.
    async fn collect_files(&self) -> Result<HashSet<String>, StoreError> {
        let dirs = [self.dir.clone(), self.compiled.clone()];
        let files = tokio::task::spawn_blocking(move || component_files(&dirs)).await.unwrap_or_default();
        let referenced = self.referenced().await?;
        if files.keys().all(|digest| referenced.contains(digest)) {
            return Ok(referenced);
        }
        // With their locks held, no upload can name these digests in a
        // record, so the records read now decide; those an upload holds
        // are left for the next collection.
        let held: Vec<(&String, Held<'_>)> = files
            .keys()
            .filter(|digest| !referenced.contains(*digest))
            .filter_map(|digest| Some((digest, self.files.try_lock(digest)?)))
            .collect();
        let referenced = self.referenced().await?;
        let doomed: Vec<PathBuf> = held
            .iter()
            .filter(|(digest, _)| !referenced.contains(*digest))
            .flat_map(|(digest, _)| files[*digest].iter().cloned())
            .collect();
        let count = doomed.len();
        let freed = tokio::task::spawn_blocking(move || remove_files(&doomed)).await.unwrap_or_default();
        drop(held);
        if count > 0 {
            tracing::info!(files = count, bytes = freed, "removed the files of component versions no agent has");
        }
        Ok(referenced)
    }

    /// Deletes the shared store's blobs no agent has a version of, of
    /// those stored more than [`FRESH_BLOB`] ago. `referenced` was read
    /// before: a record naming a digest after that is newer than its blob,
    /// which its upload stored just before, so the blob is fresh and kept.
    async fn collect_blobs(&self, referenced: &HashSet<String>) {
        let Some(shared) = self.engine.store().shared() else { return };
        let stale = match shared.stale_blobs(FRESH_BLOB).await {
            Ok(stale) => stale,
            Err(error) => return tracing::warn!(%error, "the store's component blobs were not collected"),
        };
        let mut deleted = 0;
        for digest in stale.iter().filter(|digest| !referenced.contains(*digest)) {
            match shared.delete_blob(digest, FRESH_BLOB).await {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(error) => tracing::warn!(%digest, %error, "a component blob nobody has was not deleted"),
            }
        }
        if deleted > 0 {
            tracing::info!(blobs = deleted, "deleted the store's blobs of component versions no agent has");
        }
    }
}

/// What storing a version makes of an agent's record.
#[derive(Debug)]
struct Planned {
    /// The record to store.
    record: AgentRecord,
    /// Whether it differs from the stored one.
    changed: bool,
    /// The versions dropped to make room.
    dropped: Vec<AgentVersion>,
}

/// The record of `tenant`'s agent `agent_id` once `version` is stored
/// (current with `activate`), `existing` being its record now and
/// `others` what the tenant's other agents store by digest. Versions past `limits` are
/// dropped ([`make_room`]); refused when the agent does not exist and
/// `activate` is false, or when dropping every other inactive version is
/// not room enough for the bytes.
fn plan(
    existing: Option<AgentRecord>,
    others: &HashMap<String, u64>,
    version: AgentVersion,
    activate: bool,
    (tenant, agent_id): (&str, &str),
    limits: &AgentLimits,
) -> Result<Planned, AgentError> {
    let digest = version.digest.clone();
    let bytes = version.stored_bytes();
    let mut record = match existing {
        None if !activate => return Err(AgentError::NoActiveVersion { agent_id: agent_id.to_owned() }),
        Some(record) if record.current.digest == digest || (!activate && record.version(&digest).is_some()) => {
            return Ok(Planned { record, changed: false, dropped: Vec::new() });
        }
        Some(mut record) if activate => {
            record.history.retain(|v| v.digest != digest);
            demote(&mut record, version);
            record
        }
        Some(mut record) => {
            keep_in_history(&mut record.history, version);
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
    let dropped = make_room(&mut record, &digest, others, limits);
    let agent_bytes = record.stored_bytes();
    if agent_bytes > limits.max_agent_bytes {
        return Err(AgentError::StoredQuota {
            whose: format!("agent `{agent_id}`'s versions"),
            setting: "max_agent_bytes",
            total: agent_bytes,
            bytes,
            limit: limits.max_agent_bytes,
        });
    }
    let tenant_bytes = tenant_bytes(others, &record);
    if tenant_bytes > limits.max_stored_agent_bytes {
        return Err(AgentError::StoredQuota {
            whose: "the tenant's agents".to_owned(),
            setting: "max_stored_agent_bytes",
            total: tenant_bytes,
            bytes,
            limit: limits.max_stored_agent_bytes,
        });
    }
    Ok(Planned { record, changed: true, dropped })
}

/// Drops the agent's inactive versions, oldest upload first, until it
/// keeps at most `max_agent_versions` (at least 2) and its bytes and the
/// tenant's fit `limits`; returns those dropped. Never drops the current
/// version nor `keep` (the one being stored), and drops the inactive
/// version current most recently, the one a rollback goes back to, only
/// when no other is left.
fn make_room(
    record: &mut AgentRecord,
    keep: &str,
    others: &HashMap<String, u64>,
    limits: &AgentLimits,
) -> Vec<AgentVersion> {
    let most = limits.max_agent_versions.max(2);
    let fits = |r: &AgentRecord| {
        r.history.len() < most
            && r.stored_bytes() <= limits.max_agent_bytes
            && tenant_bytes(others, r) <= limits.max_stored_agent_bytes
    };
    let rollback = record
        .history
        .iter()
        .filter(|v| v.activated_ms.is_some() && v.digest != keep)
        .max_by_key(|v| v.activated_ms)
        .map(|v| v.digest.clone());
    let mut dropped = Vec::new();
    while !fits(record) {
        let droppable = |v: &AgentVersion| v.digest != keep;
        let next = record
            .history
            .iter()
            .position(|v| droppable(v) && Some(&v.digest) != rollback.as_ref())
            .or_else(|| record.history.iter().position(droppable));
        let Some(at) = next else { break };
        dropped.push(record.history.remove(at));
    }
    dropped
}

/// What the tenant's agents store, in bytes, with `record` beside the
/// `others` (by digest): each digest counted once, as its files are kept
/// once.
fn tenant_bytes(others: &HashMap<String, u64>, record: &AgentRecord) -> u64 {
    let own = record.versions().filter(|v| !others.contains_key(&v.digest)).map(AgentVersion::stored_bytes);
    others.values().copied().chain(own).fold(0, u64::saturating_add)
}

/// What `records` store, by digest.
fn stored_by_digest<'a>(records: impl IntoIterator<Item = &'a AgentRecord>) -> HashMap<String, u64> {
    records.into_iter().flat_map(AgentRecord::versions).map(|v| (v.digest.clone(), v.stored_bytes())).collect()
}

/// Makes `version` the agent's current version; the one current until
/// now joins the others (noting when it became current, if the record
/// did not say).
fn demote(record: &mut AgentRecord, version: AgentVersion) {
    let mut previous = std::mem::replace(&mut record.current, version);
    previous.activated_ms.get_or_insert(previous.created_ms);
    keep_in_history(&mut record.history, previous);
}

/// Refuses an HTTP worker's URL or secret longer than `limits` allow,
/// naming the setting.
fn checked_worker(url: &str, secret: Option<&str>, limits: &AgentLimits) -> Result<(), AgentError> {
    if url.len() > limits.max_worker_url_bytes {
        return Err(AgentError::Invalid {
            field: "url",
            message: format!(
                "the URL is {} bytes, more than {} (limit `max_worker_url_bytes`)",
                url.len(),
                limits.max_worker_url_bytes
            ),
        });
    }
    if let Some(secret) = secret.filter(|s| s.len() > limits.max_worker_secret_bytes) {
        return Err(AgentError::Invalid {
            field: "secret",
            message: format!(
                "the secret is {} bytes, more than {} (limit `max_worker_secret_bytes`)",
                secret.len(),
                limits.max_worker_secret_bytes
            ),
        });
    }
    Ok(())
}

/// The files of components in `dirs`, by digest (`sha256:<hex>`): those
/// named `<hex>.…` (a component's bytes) or `<hex>-….` (its compiled
/// code), partly written ones included. Other files and directories are
/// not the registry's and are left out.
fn component_files(dirs: &[PathBuf]) -> HashMap<String, Vec<PathBuf>> {
    let mut files: HashMap<String, Vec<PathBuf>> = HashMap::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "a directory of components could not be read");
                continue;
            }
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_file()) {
                continue;
            }
            if let Some(digest) = entry.file_name().to_str().and_then(file_digest) {
                files.entry(digest).or_default().push(entry.path());
            }
        }
    }
    files
}

/// The digest a component file's name says: 64 lowercase hex digits,
/// then `.` or `-`.
fn file_digest(name: &str) -> Option<String> {
    let (hex, rest) = (name.get(..64)?, &name[64..]);
    let lower_hex = hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (lower_hex && (rest.starts_with('.') || rest.starts_with('-'))).then(|| format!("sha256:{hex}"))
}

/// Removes `files`; the bytes they held. One that cannot be removed is
/// logged and left for the next collection.
fn remove_files(files: &[PathBuf]) -> u64 {
    let mut freed = 0;
    for path in files {
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        match std::fs::remove_file(path) {
            Ok(()) => freed += bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(path = %path.display(), %error, "a component file could not be removed"),
        }
    }
    freed
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
