//! The agent routes: uploading components, registering HTTP workers,
//! storing versions without serving them and activating (or rolling back
//! to) any stored version, reading and removing agents, by tenant.
//!
//! What an agent is and how its versions are kept is the engine's
//! registry ([`subs_engine::agents`]); these handlers check the request,
//! apply the tenant's limits and answer the registry's records as views.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use subs_engine::store::{AgentRecord, AgentWorker, NAME_RULE, valid_name};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Tenant;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};

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
    /// Every stored version, in upload order (oldest first); `active`
    /// marks the current one, which is the last unless an earlier one was
    /// activated or later ones were stored inactive.
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
    /// The component's size in bytes (components only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Whether this is the current version, the one new decisions run.
    pub active: bool,
    /// How many decisions this version made in the tenant's sessions, as
    /// the store counts them when decisions are committed. Only
    /// `GET /v1/agents/{agent_id}` reads the counts; other answers omit
    /// them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<u64>,
    /// The OCI artifact the component was pulled from, for a version
    /// pulled from a registry (`{"oci": …}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oci: Option<OciView>,
}

/// The body of `PUT /v1/agents/{agent_id}/current`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Activation {
    /// The stored version to make current: `sha256:<hex>`.
    pub version: String,
}

/// The JSON body pulling a component from an OCI registry.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OciAgent {
    /// `REGISTRY/REPOSITORY:TAG` or `REGISTRY/REPOSITORY@sha256:…`: a
    /// CNCF Wasm OCI artifact on a registry the operator allows
    /// (`[oci] allow_registries`). A tag is resolved once, here: the
    /// version is pinned to the manifest digest it resolved to.
    pub oci: String,
}

/// Where a version was pulled from.
#[derive(Debug, Serialize, ToSchema)]
pub struct OciView {
    /// The reference as given.
    pub reference: String,
    /// The manifest digest it resolved to (`sha256:<hex>`).
    pub digest: String,
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
            versions: versions(r),
        }
    }
}

/// The agent's versions in upload order, the current one among them,
/// without decision counts.
fn versions(r: &AgentRecord) -> Vec<VersionView> {
    let mut versions: Vec<VersionView> = r
        .history
        .iter()
        .chain([&r.current])
        .map(|v| VersionView {
            version: v.digest.clone(),
            kind: kind(&v.worker).to_owned(),
            created_ms: v.created_ms,
            bytes: match v.worker {
                AgentWorker::Component { bytes } => Some(bytes),
                AgentWorker::Http { .. } => None,
            },
            active: v.digest == r.current.digest,
            decisions: None,
            oci: v.oci.as_ref().map(|o| OciView { reference: o.reference.clone(), digest: o.digest.clone() }),
        })
        .collect();
    // Stable: versions uploaded in the same millisecond keep their order.
    versions.sort_by_key(|v| v.created_ms);
    versions
}

/// Whether `PUT /v1/agents/{agent_id}` makes the upload current: the
/// `activate` query parameter, `true` unless it says `false`.
fn activate_param(query: &HashMap<String, String>) -> Result<bool, ApiError> {
    match query.get("activate").map(String::as_str) {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(ApiError::invalid(
            "activate",
            format!("`activate` is `true` or `false`, not `{}`", other.escape_debug()),
        )),
    }
}

fn checked_agent_id(agent_id: &str) -> Result<(), ApiError> {
    if valid_name(agent_id) {
        Ok(())
    } else {
        Err(ApiError {
            field: Some("agent_id".to_owned()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("`{agent_id}` is not a valid agent id ({NAME_RULE})"),
            )
        })
    }
}

/// Uploads a new version of an agent: a WebAssembly component
/// (`Content-Type: application/wasm`), checked to compile and fit the
/// `subs:agent` world before it is accepted, or an HTTP worker
/// (`application/json`, `{"url", "secret"?}`). With `activate=false` the
/// version is stored but not made current (see
/// `PUT /v1/agents/{agent_id}/current`); an agent's first version must be
/// activated. Every upload counts against `max_uploads_per_hour`; an
/// agent keeps at most `max_agent_versions` versions (the oldest inactive
/// ones are dropped to make room) within `max_agent_bytes`, and the
/// tenant's agents at most `max_stored_agent_bytes`.
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}",
    params(
        ("agent_id" = String, Path),
        ("activate" = Option<bool>, Query, description = "`false`: store the version without making it current (default `true`)"),
    ),
    request_body(
        content(
            (Vec<u8> = "application/wasm"),
            (HttpAgent = "application/json"),
            (OciAgent = "application/json"),
        ),
        description = "A component; an HTTP worker's URL; or a component to pull from an OCI registry"
    ),
    responses(
        (status = 201, description = "A new version", body = AgentView),
        (status = 200, description = "The same version again: nothing changed", body = AgentView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 403, description = "An OCI registry the operator does not allow (`forbidden`)", body = ErrorBody),
        (status = 409, description = "`activate=false` for an agent that does not exist yet (`no_active_version`)", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody),
        (status = 422, description = "Not a component of the subs:agent world (`invalid_component`), or past a quota of compiled or stored bytes (`limit_exceeded`)", body = ErrorBody),
        (status = 429, description = "Past `max_uploads_per_hour`, or another upload of the tenant is compiling or being pulled", body = ErrorBody),
        (status = 502, description = "The OCI registry could not be reached or answered an error (`oci_pull_failed`)", body = ErrorBody),
        (status = 504, description = "The OCI pull passed `[oci] pull_timeout_secs` (`oci_pull_failed`)", body = ErrorBody),
    ),
    tag = "agents"
)]
pub async fn put(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Incoming,
) -> Result<impl IntoResponse, ApiError> {
    checked_agent_id(&agent_id)?;
    let activate = activate_param(&query)?;
    let limits = state.config.limits(&tenant).clone();
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    let component = match media.as_str() {
        "application/wasm" => true,
        "application/json" => false,
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("`{other}` is neither application/wasm (a component) nor application/json (an HTTP worker)"),
            ));
        }
    };
    // Every version is metered, a worker's as a component's: each is kept
    // in the agent's record until it is dropped or deleted.
    state.agents.meter_upload(&tenant, limits.max_uploads_per_hour)?;
    let agent_limits = limits.agents();
    let (record, changed) = if component {
        // Counted in flight until the upload is answered (compiled or
        // refused): the bytes are held that long.
        let bytes = body::bytes(body, limits.max_component_bytes).await?;
        state.agents.put_component(&tenant, &agent_id, Vec::from(bytes), &agent_limits, activate).await?
    } else {
        let json: serde_json::Value = body::json(body, limits.max_body_bytes).await?;
        if json.get("oci").is_some() {
            let OciAgent { oci } = serde_json::from_value(json).map_err(|e| ApiError::invalid("oci", e.to_string()))?;
            let (bytes, source) = pull(&state, &tenant, &agent_id, &oci, limits.max_component_bytes).await?;
            state.agents.put_pulled(&tenant, &agent_id, bytes, &agent_limits, activate, Some(source)).await?
        } else {
            let HttpAgent { url, secret } =
                serde_json::from_value(json).map_err(|e| ApiError::invalid("url", e.to_string()))?;
            state.agents.put_http(&tenant, &agent_id, url, secret, &agent_limits, activate).await?
        }
    };
    let status = if changed { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(AgentView::from(&record))))
}

/// Tenants with a pull from an OCI registry under way: one each at a
/// time, so that what a tenant holds in pulled bytes is one component's
/// worth (`max_component_bytes`), as an upload's body is.
static PULLING: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// Removes the tenant from [`PULLING`] when its pull ends, however it ends.
struct PullSlot(String);

impl Drop for PullSlot {
    fn drop(&mut self) {
        PULLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.0);
    }
}

/// Pulls the component `reference` names under the operator's `[oci]`
/// policy, within `max_bytes`: its bytes, and where they came from.
async fn pull(
    state: &AppState,
    tenant: &str,
    agent_id: &str,
    reference: &str,
    max_bytes: usize,
) -> Result<(Vec<u8>, subs_engine::store::OciSource), ApiError> {
    let _slot = {
        let mut pulling = PULLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !pulling.insert(tenant.to_owned()) {
            return Err(ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "limit_exceeded",
                "another pull of this tenant from an OCI registry is under way; send this one when it is done",
            ));
        }
        PullSlot(tenant.to_owned())
    };
    let policy = state.config.file().oci.clone();
    match policy.pull(reference, max_bytes as u64).await {
        Ok((parsed, pulled)) => {
            tracing::info!(%tenant, agent = %agent_id, reference = %parsed, digest = %pulled.manifest_digest, "pulled an agent from an OCI registry");
            let source =
                subs_engine::store::OciSource { reference: reference.to_owned(), digest: pulled.manifest_digest };
            Ok((pulled.wasm, source))
        }
        Err(error) => {
            tracing::info!(%tenant, agent = %agent_id, %error, "an OCI pull was refused");
            Err(pull_refusal(error))
        }
    }
}

/// The answer to a failed pull: the reference's own mistakes are 4xx, as
/// are the registry's refusals and contents that are not an agent; a
/// registry that cannot be reached or fails is 502, one too slow 504.
fn pull_refusal(error: subs_oci::OciError) -> ApiError {
    use subs_oci::OciError as E;
    let message = error.to_string();
    let (status, code) = match error {
        E::Reference { .. } => (StatusCode::BAD_REQUEST, "invalid_input"),
        E::NotAllowed { .. } => (StatusCode::FORBIDDEN, "forbidden"),
        E::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        E::Unauthorized { .. } | E::NotFound { .. } | E::Invalid { .. } | E::Digest { .. } => {
            (StatusCode::UNPROCESSABLE_ENTITY, "oci_pull_failed")
        }
        E::Registry { .. } | E::Unreachable { .. } => (StatusCode::BAD_GATEWAY, "oci_pull_failed"),
        E::Deadline { .. } => (StatusCode::GATEWAY_TIMEOUT, "oci_pull_failed"),
    };
    ApiError { field: Some("oci".to_owned()), ..ApiError::new(status, code, message) }
}

/// The bytes of a stored component version, as uploaded or pulled (what
/// `subs agents push` sends to a registry).
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/versions/{version}",
    params(("agent_id" = String, Path), ("version" = String, Path, description = "`sha256:<hex>`")),
    responses(
        (status = 200, description = "The component", content_type = "application/wasm", body = Vec<u8>),
        (status = 400, description = "The version is an HTTP worker", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such agent, or no such stored version of it", body = ErrorBody),
    ),
    tag = "agents"
)]
pub async fn component(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path((agent_id, version)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    checked_agent_id(&agent_id)?;
    let bytes = state.agents.version_bytes(&tenant, &agent_id, &version).await?;
    Ok(([(header::CONTENT_TYPE, "application/wasm")], bytes))
}

/// Makes a stored version of an agent its current one: new decisions run
/// it at once, deliveries under way finish on the version they started
/// with. Rolling back is the same call with an earlier version.
#[utoipa::path(
    put,
    path = "/v1/agents/{agent_id}/current",
    params(("agent_id" = String, Path)),
    request_body = Activation,
    responses(
        (status = 200, description = "The version is current (also when it already was)", body = AgentView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such agent, or no such stored version of it", body = ErrorBody),
        (status = 422, description = "The version's component no longer loads, or passes the compiled-code quota", body = ErrorBody),
    ),
    tag = "agents"
)]
pub async fn activate(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
    body: Incoming,
) -> Result<Json<AgentView>, ApiError> {
    checked_agent_id(&agent_id)?;
    let limits = state.config.limits(&tenant).clone();
    let Activation { version } = body::json(body, limits.max_body_bytes).await?;
    let (record, _) = state
        .agents
        .activate(&tenant, &agent_id, &version, limits.max_compiled_bytes)
        .await?
        .ok_or_else(|| ApiError::no_agent(&agent_id))?;
    Ok(Json(AgentView::from(&record)))
}

/// One agent, with how many decisions each of its versions made: one
/// count per version, kept by the store, so the read costs the same
/// however many sessions the tenant has.
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
    let record = state.agents.agent(&tenant, &agent_id).await?.ok_or_else(|| ApiError::no_agent(&agent_id))?;
    let decisions = state.agents.decisions(&tenant, &agent_id).await?;
    let mut view = AgentView::from(&record);
    for version in &mut view.versions {
        version.decisions = Some(decisions.get(&version.version).copied().unwrap_or(0));
    }
    Ok(Json(view))
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
    Ok(Json(state.agents.agents(&tenant).await?.iter().map(AgentView::from).collect()))
}

/// Removes an agent, and the files of its versions that no other agent
/// has (component bytes, compiled code). Its sessions stay, and resume
/// once an agent of that id is uploaded again.
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

/// Removes a stored version of an agent, and its files unless another
/// agent has that version; answers the agent as it is then. The current
/// version cannot be removed (409): activate another first, or delete
/// the agent.
#[utoipa::path(
    delete,
    path = "/v1/agents/{agent_id}/versions/{version}",
    params(("agent_id" = String, Path), ("version" = String, Path, description = "`sha256:<hex>`")),
    responses(
        (status = 200, description = "Removed; the agent without it", body = AgentView),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such agent, or no such stored version of it", body = ErrorBody),
        (status = 409, description = "The version is the agent's current one", body = ErrorBody),
    ),
    tag = "agents"
)]
pub async fn delete_version(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path((agent_id, version)): Path<(String, String)>,
) -> Result<Json<AgentView>, ApiError> {
    checked_agent_id(&agent_id)?;
    let record = state
        .agents
        .delete_version(&tenant, &agent_id, &version)
        .await?
        .ok_or_else(|| ApiError::no_agent(&agent_id))?;
    Ok(Json(AgentView::from(&record)))
}
