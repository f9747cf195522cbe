//! `POST /v1/agents/{agent_id}/replay`: the agent's recorded decisions
//! asked again of one of its stored versions, and the answers compared
//! (see docs/upgrades.md). The engine's [`subs_engine::replay`] does the
//! work; this handler reads the request and answers the report.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use subs_engine::replay::{MAX_DECISIONS, MAX_SESSIONS, ReplayReport, Selection};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Tenant;
use crate::body;
use crate::error::{ApiError, ErrorBody};

/// The largest replay request body: room for [`MAX_SESSIONS`] session ids.
const BODY_LIMIT: usize = 512 << 10;

/// How long a replay may run, at most and by default.
const MAX_SECS: u64 = 300;
const DEFAULT_SECS: u64 = 60;

/// What to replay.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// The version to ask (`sha256:…`): any stored version of the agent,
    /// such as one uploaded with `?activate=false`.
    pub version: String,
    /// The sessions whose decisions to replay (at most 1,000); omitted:
    /// the agent's most recently changed sessions, at most `max_sessions`.
    pub sessions: Option<Vec<String>>,
    /// How many sessions to read when none are named (default 100, at most
    /// 1,000).
    pub max_sessions: Option<usize>,
    /// Only decisions applied at or after this instant (Unix ms).
    pub since: Option<u64>,
    /// The most decisions to compare (default 1,000, at most 10,000).
    pub limit: Option<usize>,
    /// The most seconds to spend (default 60, at most 300): past them no
    /// further decision starts and the report says it stopped.
    pub timeout_secs: Option<u64>,
}

/// The report, with what was replayed.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplayView {
    /// The agent.
    pub agent_id: String,
    /// The version asked.
    pub version: String,
    /// Counts, differences and failures (see docs/upgrades.md).
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub report: ReplayReport,
}

/// Replays the agent's recorded decisions against one of its stored
/// versions and reports which it decides differently. Nothing is stored
/// and no call runs; the version's outgoing HTTP is refused.
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/replay",
    params(("agent_id" = String, Path)),
    request_body = ReplayRequest,
    responses(
        (status = 200, description = "The report", body = ReplayView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "No such agent, or no such version of it", body = ErrorBody),
        (status = 429, description = "Another replay of the tenant is running", body = ErrorBody)
    ),
    tag = "agents"
)]
pub async fn replay(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(agent_id): Path<String>,
    body: Body,
) -> Result<Json<ReplayView>, ApiError> {
    let request: ReplayRequest = body::json(body, BODY_LIMIT).await?;
    let selection = selection(&request)?;
    if !state.agents.exists(&tenant, &agent_id).await? {
        return Err(ApiError::no_agent(&agent_id));
    }
    let span = tracing::info_span!("replay", tenant = %tenant, agent = %agent_id, version = %request.version);
    let report = tracing::Instrument::instrument(
        state.agents.replay(&tenant, &agent_id, &request.version, &selection, None),
        span,
    )
    .await?
    .ok_or_else(|| ApiError::not_found(format!("agent `{agent_id}` has no stored version `{}`", request.version)))?;
    Ok(Json(ReplayView { agent_id, version: request.version, report }))
}

/// The request's selection, its numbers checked against the bounds.
fn selection(request: &ReplayRequest) -> Result<Selection, ApiError> {
    let within = |field: &'static str, value: Option<usize>, default: usize, max: usize| match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(field, format!("`{field}` is {n}; it must be 1 to {max}"))),
    };
    let defaults = Selection::default();
    if let Some(sessions) = &request.sessions
        && sessions.len() > MAX_SESSIONS
    {
        let message = format!("{} sessions named; a replay reads at most {MAX_SESSIONS}", sessions.len());
        return Err(ApiError::invalid("sessions", message));
    }
    let secs = request.timeout_secs.map(|s| usize::try_from(s).unwrap_or(usize::MAX));
    let max_secs = usize::try_from(MAX_SECS).unwrap_or(usize::MAX);
    let secs = within("timeout_secs", secs, usize::try_from(DEFAULT_SECS).unwrap_or(60), max_secs)?;
    Ok(Selection {
        sessions: request.sessions.clone(),
        sessions_limit: within("max_sessions", request.max_sessions, defaults.sessions_limit, MAX_SESSIONS)?,
        since_ms: request.since,
        limit: within("limit", request.limit, defaults.limit, MAX_DECISIONS)?,
        time: Duration::from_secs(secs as u64),
    })
}
