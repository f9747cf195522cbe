//! Agents: uploaded components and registered HTTP workers, by tenant.
//!
//! Each upload is a version, named by its content digest. A component's
//! bytes are kept in the data directory by digest (`components/<hex>.wasm`)
//! and checked before they are accepted: it must compile and fit the
//! `subs:agent` world. The store keeps which version is current; decisions
//! use the current version. Compiled components are cached by digest under
//! `compiled/`, so a restart loads them without compiling.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subs_engine::Engine;
use subs_engine::store::{AgentRecord, AgentVersion, AgentWorker, Batch, Op, Store, StoreError, valid_id};
use subs_engine::worker::Worker;
use subs_engine::worker::component::{AgentPolicy, ComponentAgent, ComponentHost, LoadError};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::body;
use crate::error::{ApiError, ErrorBody};
use crate::uploads::{UploadPolicy, Uploads};
use crate::{AppState, Limits};

/// The agents of every tenant, kept in the store and registered with the
/// engine.
pub struct AgentRegistry {
    engine: Engine,
    store: Arc<dyn Store>,
    host: ComponentHost,
    /// Where component bytes are kept, by digest.
    dir: PathBuf,
    /// One upload at a time: an upload reads, then replaces, the record.
    writing: tokio::sync::Mutex<()>,
    /// Sandbox policies of particular agents.
    policies: HashMap<(String, String), AgentPolicy>,
    /// Compiles in progress, upload meters, compiled-code quotas.
    uploads: Uploads,
    /// The components registered with the engine, by tenant and agent, so
    /// that a tenant's agents can be bound again when its sandbox changes.
    components: std::sync::Mutex<HashMap<(String, String), ComponentAgent>>,
}

/// An agent as clients see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct AgentView {
    /// The agent's id.
    pub agent_id: String,
    /// The current version: `sha256:<hex>`.
    pub version: String,
    /// `component` or `http`.
    pub kind: String,
    /// The HTTP worker's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether requests to the HTTP worker are signed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed: Option<bool>,
    /// The component's size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Every version, oldest first; the last is current.
    pub versions: Vec<VersionView>,
}

/// One version of an agent.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionView {
    /// `sha256:<hex>`.
    pub version: String,
    /// `component` or `http`.
    pub kind: String,
    /// When it was uploaded (Unix ms).
    pub created_ms: u64,
}

/// The JSON body registering an HTTP worker.
#[derive(Debug, Deserialize, ToSchema)]
pub struct HttpAgent {
    /// Where the engine posts decision requests.
    pub url: String,
    /// Signs requests (`Subs-Signature`) when set.
    pub secret: Option<String>,
}

fn kind(worker: &AgentWorker) -> &'static str {
    match worker {
        AgentWorker::Component { .. } => "component",
        AgentWorker::Http { .. } => "http",
    }
}

impl From<&AgentRecord> for AgentView {
    fn from(r: &AgentRecord) -> Self {
        let (url, signed, bytes) = match &r.current.worker {
            AgentWorker::Component { bytes } => (None, None, Some(*bytes)),
            AgentWorker::Http { url, secret } => (Some(url.clone()), Some(secret.is_some()), None),
        };
        Self {
            agent_id: r.agent_id.clone(),
            version: r.current.digest.clone(),
            kind: kind(&r.current.worker).to_owned(),
            url,
            signed,
            bytes,
            versions: r
                .history
                .iter()
                .chain([&r.current])
                .map(|v| VersionView {
                    version: v.digest.clone(),
                    kind: kind(&v.worker).to_owned(),
                    created_ms: v.created_ms,
                })
                .collect(),
        }
    }
}

impl AgentRegistry {
    /// A registry keeping component bytes under `dir/components` and
    /// their compiled code under `dir/compiled`.
    pub fn new(engine: Engine, store: Arc<dyn Store>, host: ComponentHost, dir: PathBuf) -> Self {
        let host = host.with_compile_cache(dir.join("compiled"));
        Self {
            engine,
            store,
            host,
            dir: dir.join("components"),
            writing: tokio::sync::Mutex::new(()),
            policies: HashMap::new(),
            uploads: Uploads::new(&UploadPolicy::default()),
            components: Default::default(),
        }
    }

    /// Sets the sandbox policy of `tenant`'s agents in place of the config
    /// file's (`None`: the file's again), and binds its loaded agents to it
    /// at once: their next decisions run under it.
    pub fn set_tenant_sandbox(&self, tenant: &str, policy: Option<AgentPolicy>) -> Result<(), ApiError> {
        self.host.set_tenant_policy(tenant, policy).map_err(|e| ApiError::invalid("limits.sandbox", e.to_string()))?;
        let components = self.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ((t, agent_id), agent) in components.iter().filter(|((t, _), _)| t == tenant) {
            let policy = self.policies.get(&(t.clone(), agent_id.clone())).cloned().unwrap_or_default();
            match agent.for_agent(t, agent_id, &policy) {
                Ok(rebound) => self.engine.register_agent(t, agent_id, Arc::new(rebound)),
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

    /// Keeps track of what `tenant`'s agent `agent_id` runs as now.
    fn registered(&self, tenant: &str, agent_id: &str, component: Option<ComponentAgent>) {
        let mut components = self.components.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let key = (tenant.to_owned(), agent_id.to_owned());
        match component {
            Some(agent) => {
                self.uploads.set_compiled(tenant, agent_id, Some(agent.compiled_bytes()));
                components.insert(key, agent);
            }
            None => {
                self.uploads.set_compiled(tenant, agent_id, None);
                components.remove(&key);
            }
        }
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
    /// this engine) is reported and left out; its sessions' deliveries fail
    /// until it is uploaded again.
    pub async fn load_all(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let mut failures = Vec::new();
        for record in self.store.agents(None).await? {
            match self.worker(&record.tenant, &record.agent_id, &record.current).await {
                Ok((worker, component)) => {
                    self.registered(&record.tenant, &record.agent_id, component);
                    self.engine.register_agent(&record.tenant, &record.agent_id, worker);
                }
                Err(e) => {
                    tracing::error!(tenant = %record.tenant, agent = %record.agent_id, error = %e.message, "agent not loaded");
                    failures.push((record.tenant, record.agent_id, e.message));
                }
            }
        }
        Ok(failures)
    }

    /// Whether `tenant` has an agent `agent_id`.
    pub async fn exists(&self, tenant: &str, agent_id: &str) -> Result<bool, StoreError> {
        Ok(self.store.agent(tenant, agent_id).await?.is_some())
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
    ) -> Result<(Arc<dyn Worker>, Option<ComponentAgent>), ApiError> {
        match &version.worker {
            AgentWorker::Component { .. } => {
                let path = self.component_path(&version.digest);
                let bytes = tokio::fs::read(&path)
                    .await
                    .map_err(|e| ApiError::internal(&format!("reading {}: {e}", path.display())))?;
                let agent = self.compile(tenant, agent_id, bytes).await?;
                Ok((Arc::new(agent.clone()), Some(agent)))
            }
            AgentWorker::Http { url, secret } => {
                let mut options = HttpWorkerOptions::new();
                if let Some(secret) = secret {
                    options = options.secret(secret);
                }
                let worker = HttpWorker::new(url, options).map_err(|e| ApiError {
                    field: Some("url".to_owned()),
                    ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", e.to_string())
                })?;
                Ok((Arc::new(worker), None))
            }
        }
    }

    /// Checks and compiles a component off the async threads (see
    /// `ComponentHost::load_as`); a component that does not fit the world,
    /// its limits or the compile budget is the uploader's error.
    async fn compile(&self, tenant: &str, agent_id: &str, bytes: Vec<u8>) -> Result<ComponentAgent, ApiError> {
        let host = self.host.clone();
        let policy = self.policies.get(&(tenant.to_owned(), agent_id.to_owned())).cloned().unwrap_or_default();
        let (tenant, agent_id) = (tenant.to_owned(), agent_id.to_owned());
        tokio::task::spawn_blocking(move || host.load_as(&tenant, &agent_id, &policy, &bytes))
            .await
            .map_err(|e| ApiError::internal(&e))?
            .map_err(|e| match e {
                LoadError::Engine(_) | LoadError::Cache(_) => ApiError::internal(&e),
                e => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_component", e.to_string()),
            })
    }

    /// Makes `version` the current version of the agent; returns the agent
    /// and whether anything changed.
    async fn put(
        &self,
        tenant: &str,
        agent_id: &str,
        version: AgentVersion,
        worker: Arc<dyn Worker>,
    ) -> Result<(AgentRecord, bool), ApiError> {
        let _writing = self.writing.lock().await;
        let record = match self.store.agent(tenant, agent_id).await? {
            Some(current) if current.current.digest == version.digest => return Ok((current, false)),
            Some(mut record) => {
                let previous = std::mem::replace(&mut record.current, version);
                record.history.retain(|v| v.digest != record.current.digest);
                record.history.push(previous);
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
        self.store.commit(batch).await?;
        self.engine.register_agent(tenant, agent_id, worker);
        Ok((record, true))
    }

    /// Takes one upload from the tenant's hourly allowance, before its
    /// body is read.
    pub fn meter_upload(&self, tenant: &str, limits: &Limits) -> Result<(), ApiError> {
        self.uploads.meter(tenant, limits.max_uploads_per_hour)
    }

    /// Uploads a component as the agent's new version: checked, compiled
    /// (one compile per tenant at a time) and held to the tenant's
    /// compiled-code quota before anything of it is kept.
    pub async fn put_component(
        &self,
        tenant: &str,
        agent_id: &str,
        bytes: Vec<u8>,
        limits: &Limits,
    ) -> Result<(AgentRecord, bool), ApiError> {
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let size = bytes.len() as u64;
        let path = self.component_path(&digest);
        let turn = self.uploads.turn(tenant).await?;
        let agent = self.compile(tenant, agent_id, bytes.clone()).await?;
        drop(turn);
        self.uploads.check_quota(tenant, agent_id, agent.compiled_bytes(), limits.max_compiled_bytes)?;
        let worker: Arc<dyn Worker> = Arc::new(agent.clone());
        if !path.exists() {
            tokio::fs::create_dir_all(&self.dir).await.map_err(|e| ApiError::internal(&e))?;
            // Write then rename, so a crash never leaves a torn file under
            // a digest's name.
            let partial = path.with_extension("partial");
            tokio::fs::write(&partial, &bytes).await.map_err(|e| ApiError::internal(&e))?;
            tokio::fs::rename(&partial, &path).await.map_err(|e| ApiError::internal(&e))?;
        }
        let version = AgentVersion {
            digest,
            worker: AgentWorker::Component { bytes: size },
            created_ms: subs_engine::clock::now_ms(),
        };
        let put = self.put(tenant, agent_id, version, worker).await?;
        self.registered(tenant, agent_id, Some(agent));
        Ok(put)
    }

    /// Registers an HTTP worker as the agent's new version.
    pub async fn put_http(
        &self,
        tenant: &str,
        agent_id: &str,
        agent: HttpAgent,
    ) -> Result<(AgentRecord, bool), ApiError> {
        let mut hasher = Sha256::new();
        hasher.update(agent.url.as_bytes());
        hasher.update([0]);
        hasher.update(agent.secret.as_deref().unwrap_or_default().as_bytes());
        let version = AgentVersion {
            digest: format!("sha256:{}", hex::encode(hasher.finalize())),
            worker: AgentWorker::Http { url: agent.url, secret: agent.secret },
            created_ms: subs_engine::clock::now_ms(),
        };
        let (worker, _) = self.worker(tenant, agent_id, &version).await?;
        let put = self.put(tenant, agent_id, version, worker).await?;
        self.registered(tenant, agent_id, None);
        Ok(put)
    }

    /// Removes an agent. Its sessions stay; their deliveries fail (and are
    /// retried per policy) until an agent of that id is uploaded again.
    pub async fn delete(&self, tenant: &str, agent_id: &str) -> Result<bool, ApiError> {
        let _writing = self.writing.lock().await;
        if self.store.agent(tenant, agent_id).await?.is_none() {
            return Ok(false);
        }
        let mut batch = Batch::new();
        batch.push(Op::DeleteAgent { tenant: tenant.to_owned(), agent_id: agent_id.to_owned() });
        self.store.commit(batch).await?;
        self.engine.unregister_agent(tenant, agent_id);
        self.registered(tenant, agent_id, None);
        Ok(true)
    }
}

fn checked_agent_id(agent_id: &str) -> Result<(), ApiError> {
    if valid_id(agent_id) {
        Ok(())
    } else {
        Err(ApiError {
            field: Some("agent_id".to_owned()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("`{agent_id}` is not a valid agent id (1-128 of A-Z a-z 0-9 _ - . :, not starting with .)"),
            )
        })
    }
}

/// Uploads a new version of an agent: a WebAssembly component
/// (`Content-Type: application/wasm`), checked to compile and fit the
/// `subs:agent` world before it is accepted, or an HTTP worker
/// (`application/json`, `{"url", "secret"?}`).
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}",
    params(("agent_id" = String, Path)),
    request_body(
        content(
            (Vec<u8> = "application/wasm"),
            (HttpAgent = "application/json"),
        ),
        description = "A component, or an HTTP worker's URL"
    ),
    responses(
        (status = 201, description = "A new version", body = AgentView),
        (status = 200, description = "The same version again: nothing changed", body = AgentView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
        (status = 422, description = "Not a component of the subs:agent world", body = ErrorBody),
    ),
    tag = "agents"
)]
pub async fn put(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<impl IntoResponse, ApiError> {
    checked_agent_id(&agent_id)?;
    let limits = state.config.limits(&tenant).clone();
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let (record, changed) = match media.as_str() {
        "application/wasm" => {
            state.agents.meter_upload(&tenant, &limits)?;
            let bytes = body::bytes(body, limits.max_component_bytes).await?;
            state.agents.put_component(&tenant, &agent_id, bytes.to_vec(), &limits).await?
        }
        "application/json" => {
            let agent: HttpAgent = body::json(body, limits.max_body_bytes).await?;
            state.agents.put_http(&tenant, &agent_id, agent).await?
        }
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("`{other}` is neither application/wasm (a component) nor application/json (an HTTP worker)"),
            ));
        }
    };
    let status = if changed { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(AgentView::from(&record))))
}

/// One agent.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}",
    params(("agent_id" = String, Path)),
    responses((status = 200, body = AgentView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    tag = "agents"
)]
pub async fn get(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
) -> Result<Json<AgentView>, ApiError> {
    let record = state.store.agent(&tenant, &agent_id).await?.ok_or_else(|| ApiError::no_agent(&agent_id))?;
    Ok(Json(AgentView::from(&record)))
}

/// The tenant's agents, by id.
#[utoipa::path(
    get,
    path = "/v1/agents",
    responses((status = 200, body = Vec<AgentView>), (status = 401, body = ErrorBody)),
    tag = "agents"
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
) -> Result<Json<Vec<AgentView>>, ApiError> {
    Ok(Json(state.store.agents(Some(&tenant)).await?.iter().map(AgentView::from).collect()))
}

/// Removes an agent. Its sessions stay, and resume once an agent of that
/// id is uploaded again.
#[utoipa::path(
    delete,
    path = "/v1/agents/{agent_id}",
    params(("agent_id" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    tag = "agents"
)]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if state.agents.delete(&tenant, &agent_id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::no_agent(&agent_id))
    }
}
