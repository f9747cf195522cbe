//! The subs HTTP API (see docs/api.md) on axum.
//!
//! [`app`] builds the router over an [`AppState`]; [`serve`] runs it on a
//! listener until a shutdown future resolves. Tests drive the real server
//! on `127.0.0.1:0`.
//!
//! # Layout
//!
//! - [`error`]: the one error shape and the status of every failure.
//! - [`auth`]: API keys, tenants, the operator, event-stream and end-user
//!   tokens.
//! - [`identity`]: session owners and their bounds.
//! - [`tenants`]: limits as they are now: the config file's, with the
//!   operator's changes over them.
//! - [`admin`]: the operator's API: tenants, their limits, their keys.
//! - [`sessions`]: input, snapshot, list, cancel.
//! - [`stream`]: server-sent events: a session's events (replay, then
//!   live) and a single turn's.
//! - [`agents`]: uploading components and registering HTTP workers, over
//!   the engine's agent registry ([`subs_engine::agents`], which also
//!   meters uploads).
//! - [`frontends`]: the chat frontends: AG-UI runs
//!   ([`frontends::agui`], `POST /v1/agents/{agent_id}/ag-ui`) and the
//!   Vercel AI SDK's chat endpoint ([`frontends::aisdk`]), each a
//!   translation of its requests into session inputs and of a turn's
//!   events into its stream.
//! - [`mcp`]: every agent an MCP server
//!   (`/v1/agents/{agent_id}/mcp`, Streamable HTTP): one tool that runs a
//!   turn, interrupts asked through elicitation.
//! - [`budgets`]: what sessions and tenants spent, and their budgets.
//! - [`metrics`]: `/healthz` and Prometheus `/metrics`.
//! - [`edge`]: the accept loop and the bounds of connections and request
//!   heads; [`body`]: the bounds of request bodies and their JSON.
//! - [`router`]: every route, in one table; [`openapi`]: the OpenAPI
//!   document, generated from the handlers the table registers.
//! - [`ui`]: the web inspector, embedded and served at `/ui`.

pub mod admin;
pub mod agents;
pub mod auth;
pub mod body;
pub mod budgets;
pub mod decisions;
pub mod edge;
pub mod error;
pub mod frontends;
pub mod identity;
pub mod mcp;
pub mod mcp_servers;
pub mod metrics;
pub mod openapi;
pub mod reads;
pub mod replay;
pub mod router;
pub mod sessions;
pub mod stream;
pub mod tenants;
pub mod ui;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, Method, header};
use serde::{Deserialize, Serialize};
use subs_engine::Engine;
use subs_engine::agents::AgentRegistry;
use subs_engine::model::Money;
use tokio::net::TcpListener;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use self::auth::{Keys, LOCAL_TENANT};
pub use self::error::ApiError;
pub use self::tenants::LiveConfig;

/// Limits a tenant's use of the server. The admin API reads and writes
/// them as JSON (serde), field by field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Sessions the tenant may have; `None`: no limit.
    pub max_sessions: Option<usize>,
    /// Sub-agent sessions one turn may spawn; spawns past it fail.
    pub max_spawns_per_turn: u32,
    /// How deep below its root a sub-agent session may be (0: none).
    pub max_sub_agent_depth: u32,
    /// Sessions one tree (a root and its sub-agents') may hold.
    pub max_tree_sessions: u32,
    /// Actions one decision may hold; a decision with more is rejected,
    /// naming the bound.
    pub max_actions_per_decision: u32,
    /// Calls one turn may hold (settled ones included); a decision that
    /// would start calls past it is rejected, naming the bound.
    pub max_calls_per_turn: u32,
    /// Bytes of messages one session may store, each message counted as
    /// its JSON: a decision whose messages would pass it is refused (its
    /// turn fails naming the bound), an input likewise (answered 429).
    pub max_session_bytes: u64,
    /// Whole-session reads (`GET /v1/sessions/{id}` and other snapshots)
    /// the tenant may have running at once; more wait their turn.
    pub max_session_reads: usize,
    /// Stored bytes of decisions one page of `GET …/decisions` holds; a
    /// page holds one decision whatever its size.
    pub max_page_bytes: usize,
    /// Sessions the tenant's listings filtered by `status` or `agent` may
    /// look at per second (a bucket holding one second's worth); a
    /// listing while it is empty is answered 429.
    pub max_listing_scan_per_sec: u32,
    /// Largest JSON request body, in bytes.
    pub max_body_bytes: usize,
    /// Bytes of the tenant's request bodies in flight at once, uploads
    /// included (a JSON body also counts its parsed values, see
    /// [`body`]); a body past it is answered 429.
    pub max_body_bytes_in_flight: usize,
    /// Largest component upload, in bytes.
    pub max_component_bytes: usize,
    /// Agent uploads (components and HTTP workers) the tenant may make
    /// per hour (a bucket of this many, refilled evenly over the hour);
    /// more are answered 429.
    pub max_uploads_per_hour: u32,
    /// Compiled code the tenant's current agents may hold, in bytes: what
    /// they keep in memory and on disk. An upload past it is refused.
    pub max_compiled_bytes: u64,
    /// Versions one agent keeps, the current one included (at least 2);
    /// storing more drops the oldest inactive ones.
    pub max_agent_versions: usize,
    /// Bytes one agent's stored versions may hold (components' sizes,
    /// HTTP workers' URLs and secrets).
    pub max_agent_bytes: u64,
    /// Bytes all the tenant's agents' stored versions may hold.
    pub max_stored_agent_bytes: u64,
    /// The longest HTTP worker URL, in bytes.
    pub max_worker_url_bytes: usize,
    /// The longest HTTP worker signing secret, in bytes.
    pub max_worker_secret_bytes: usize,
    /// The most the tenant's sessions may spend on LLM calls, in all;
    /// `None`: no limit. Calls past it fail with `budget_exceeded`.
    pub budget: Option<Money>,
    /// Whether the tenant's agents' LLM calls stream token deltas when
    /// neither the call nor the agent's config sets `stream`: frontends
    /// then show a reply as it is written.
    pub stream_by_default: bool,
}

impl Limits {
    /// What the agent registry holds the tenant's agents to.
    pub fn agents(&self) -> subs_engine::agents::AgentLimits {
        subs_engine::agents::AgentLimits {
            max_compiled_bytes: self.max_compiled_bytes,
            max_agent_versions: self.max_agent_versions,
            max_agent_bytes: self.max_agent_bytes,
            max_stored_agent_bytes: self.max_stored_agent_bytes,
            max_worker_url_bytes: self.max_worker_url_bytes,
            max_worker_secret_bytes: self.max_worker_secret_bytes,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        // The registry's defaults are the agent limits'.
        let agents = subs_engine::agents::AgentLimits::default();
        // And the engine's, the spawn and decision bounds.
        let spawns = subs_engine::engine::SpawnBounds::default();
        let decisions = subs_engine::engine::DecisionBounds::default();
        Self {
            max_sessions: None,
            max_spawns_per_turn: spawns.max_spawns_per_turn,
            max_sub_agent_depth: spawns.max_sub_agent_depth,
            max_tree_sessions: spawns.max_tree_sessions,
            max_actions_per_decision: decisions.max_actions_per_decision,
            max_calls_per_turn: decisions.max_calls_per_turn,
            max_session_bytes: subs_engine::engine::DEFAULT_MAX_SESSION_BYTES,
            max_session_reads: subs_engine::engine::DEFAULT_MAX_SESSION_READS,
            // The largest decision a worker may make, or a thousand of
            // several KiB.
            max_page_bytes: 16 << 20,
            // Two pages of the widest scan a second.
            max_listing_scan_per_sec: 20_000,
            max_body_bytes: 4 << 20,
            // One largest upload and a few dozen JSON bodies.
            max_body_bytes_in_flight: 96 << 20,
            max_component_bytes: 64 << 20,
            max_uploads_per_hour: 60,
            max_compiled_bytes: agents.max_compiled_bytes,
            max_agent_versions: agents.max_agent_versions,
            max_agent_bytes: agents.max_agent_bytes,
            max_stored_agent_bytes: agents.max_stored_agent_bytes,
            max_worker_url_bytes: agents.max_worker_url_bytes,
            max_worker_secret_bytes: agents.max_worker_secret_bytes,
            budget: None,
            stream_by_default: true,
        }
    }
}

/// How the server behaves, as the config file says.
#[derive(Debug, Clone, Default)]
pub struct ServerConfig {
    /// Limits of tenants without their own.
    pub default_limits: Limits,
    /// Limits by tenant.
    pub tenant_limits: HashMap<String, Limits>,
    /// Origins browsers may call from (CORS); none by default.
    pub cors_origins: Vec<String>,
    /// The server-wide bounds of connections, request heads and bodies:
    /// the `[http]` table.
    pub http: edge::HttpConfig,
    /// The bounds of the agents' MCP endpoints: the `[mcp_endpoint]`
    /// table.
    pub mcp_endpoint: mcp::Bounds,
    /// Which OCI registries agents may be pulled from, how, and for how
    /// long: the `[oci]` table (docs/registries.md).
    pub oci: subs_oci::PullPolicy,
}

impl ServerConfig {
    /// The limits of `tenant`.
    pub fn limits(&self, tenant: &str) -> &Limits {
        self.tenant_limits.get(tenant).unwrap_or(&self.default_limits)
    }
}

/// What every handler shares. There is no store here: the server reaches
/// it only through the engine and its agent registry.
pub struct AppState {
    /// The engine.
    pub engine: Engine,
    /// The agents of every tenant.
    pub agents: AgentRegistry,
    /// The accepted API keys, the operator's among them.
    pub keys: Keys,
    /// Limits and CORS: the config file's, with the operator's changes
    /// over them.
    pub config: LiveConfig,
    /// Request counters.
    pub metrics: metrics::Metrics,
    /// What each tenant's filtered listings have looked at lately.
    pub scans: reads::Scans,
}

impl AppState {
    /// Reads agents, keys and tenants from the store again and applies
    /// them: what a node sharing its store does when another node changed
    /// them ([`Engine::records_changed`]). Tenants the store no longer has
    /// get the config file's limits back.
    pub async fn reload_records(&self) -> Result<(), subs_engine::store::StoreError> {
        let before: Vec<String> = self.config.records().into_iter().map(|r| r.tenant).collect();
        self.config.replace_stored(self.engine.admin().tenant_records().await?).await;
        self.keys.replace_stored(self.engine.admin().key_records().await?);
        self.config.apply_to(&self.engine);
        for tenant in before {
            self.config.apply_tenant(&self.engine, &tenant);
        }
        if let Err(error) = self.config.apply_sandboxes(&self.agents) {
            tracing::warn!(%error, "a stored tenant sandbox");
        }
        for (tenant, agent, error) in self.agents.sync().await? {
            tracing::warn!(%tenant, %agent, %error, "an agent changed by another node was not loaded");
        }
        Ok(())
    }
}

/// The API's router. Building it changes nothing: [`serve`] applies the
/// configured limits to the engine.
pub fn app(state: Arc<AppState>) -> Router {
    let cors = cors(state.config.cors_origins());
    router::router()
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(axum::middleware::from_fn_with_state(Arc::new(body::InFlight::default()), body::hold))
        .layer(axum::middleware::from_fn_with_state(state.clone(), metrics::track))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::internal(&"a handler panicked").into_response_()
        }))
        .layer(cors)
        .with_state(state)
}

fn cors(origins: &[String]) -> CorsLayer {
    let origins: Vec<HeaderValue> = origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
        .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE, header::HeaderName::from_static("last-event-id")])
}

impl ApiError {
    fn into_response_(self) -> axum::response::Response {
        axum::response::IntoResponse::into_response(self)
    }
}

/// Serves the API on `listener` until `shutdown` resolves, within the
/// bounds of the config's `[http]` table ([`edge`]), with `mcp`, the
/// registry of tenants' MCP servers the engine's tool sources are, behind
/// `/v1/mcp-servers`.
pub async fn serve_with_mcp(
    listener: TcpListener,
    state: Arc<AppState>,
    mcp: Arc<subs_engine::mcp::McpServers>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    state.config.apply_to(&state.engine);
    let app = app(state.clone()).layer(axum::Extension(mcp));
    edge::serve_on(listener, app, state, shutdown).await
}

/// Serves the API on `listener` until `shutdown`, without tenants' MCP
/// servers (their routes answer 503): see [`serve_with_mcp`].
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // Budgets and session limits are enforced by the engine (before a call
    // is sent, before a session is created, by an input or a spawn); the
    // configured ones take effect with the server that serves them.
    state.config.apply_to(&state.engine);
    edge::serve_on(listener, app(state.clone()), state, shutdown).await
}
