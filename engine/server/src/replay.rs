//! `POST /v1/agents/{agent_id}/replay`: the agent's recorded decisions
//! asked again of one of its stored versions, and the answers compared
//! (see docs/upgrades.md). The engine's [`subs_engine::replay`] does the
//! work; this handler reads the request and answers the report.

use std::sync::Arc;
use std::time::Duration;

use std::convert::Infallible;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream};
use serde::{Deserialize, Serialize};
use serde_json::json;
use subs_engine::agents::AgentError;
use subs_engine::replay::{MAX_DECISIONS, MAX_SESSIONS, Progress, ReplayReport, Selection};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Tenant;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};

/// The largest replay request body: room for [`MAX_SESSIONS`] session ids.
const BODY_LIMIT: usize = 512 << 10;

/// How long a replay may run, at most and by default.
const MAX_SECS: usize = 300;
const DEFAULT_SECS: usize = 60;

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
    pub timeout_secs: Option<usize>,
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
/// and no call runs; the version's outgoing HTTP is refused. A client
/// that accepts `text/event-stream` follows its progress; going away
/// stops it.
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/replay",
    params(("agent_id" = String, Path)),
    request_body = ReplayRequest,
    responses(
        (status = 200, description = "The report; with `Accept: text/event-stream`, `progress` events (`{done, total}`) and then a `report` (or an `error`) event", body = ReplayView),
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
    headers: HeaderMap,
    body: Incoming,
) -> Result<Response, ApiError> {
    let request: ReplayRequest = body::json(body, BODY_LIMIT).await?;
    let selection = selection(&request)?;
    // Both checked before anything runs, so that a stream of progress
    // starts only for a replay that can.
    let record = state.agents.agent(&tenant, &agent_id).await?.ok_or_else(|| ApiError::no_agent(&agent_id))?;
    if record.version(&request.version).is_none() {
        let unknown = AgentError::UnknownVersion { agent_id: agent_id.clone(), version: request.version.clone() };
        return Err(unknown.into());
    }
    let span = tracing::info_span!("replay", tenant = %tenant, agent = %agent_id, version = %request.version);
    let ReplayRequest { version, .. } = request;
    if !wants_events(&headers) {
        let report =
            tracing::Instrument::instrument(state.agents.replay(&tenant, &agent_id, &version, &selection, None), span)
                .await?;
        return Ok(Json(ReplayView { agent_id, version, report }).into_response());
    }
    let (tx, progress) = tokio::sync::watch::channel((0, 0));
    let report: Progress = Arc::new(move |done, total| {
        let _ = tx.send((done, total));
    });
    let (agent, candidate) = (agent_id.clone(), version.clone());
    let task = tokio::spawn(tracing::Instrument::instrument(
        async move { state.agents.replay(&tenant, &agent, &candidate, &selection, Some(report)).await },
        span,
    ));
    let stopper = AbortOnDrop(task.abort_handle());
    let running = Running { progress, task, _stopper: stopper, agent_id, version };
    let events = stream::unfold(Some(running), |running| async move {
        let mut running = running?;
        // Progress first: what the replay reported before it ended is
        // sent before its report.
        let event = tokio::select! {
            biased;
            changed = running.progress.changed() => match changed {
                Ok(()) => {
                    let (done, total) = *running.progress.borrow_and_update();
                    SseEvent::default().event("progress").data(json!({"done": done, "total": total}).to_string())
                }
                // The replay let go of its progress: it is ending.
                Err(_) => {
                    let joined = (&mut running.task).await;
                    return Some((Ok(running.end(joined)), None));
                }
            },
            joined = &mut running.task => return Some((Ok(running.end(joined)), None)),
        };
        // At most a few progress events a second, however fast it goes.
        tokio::time::sleep(PROGRESS_EVERY).await;
        Some((Ok::<_, Infallible>(event), Some(running)))
    });
    let events: BoxStream<'static, Result<SseEvent, Infallible>> = Box::pin(events);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

/// How often a streamed replay reports its progress, at most.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);

/// A streamed replay: its task, what it has done, and whose it is.
struct Running {
    progress: tokio::sync::watch::Receiver<(usize, usize)>,
    task: tokio::task::JoinHandle<Result<ReplayReport, AgentError>>,
    /// Stops the replay when the client goes away and the stream with it.
    _stopper: AbortOnDrop,
    agent_id: String,
    version: String,
}

impl Running {
    /// The stream's last event: the report, or the error that ended the
    /// replay (`{error, code, field?, status}`).
    fn end(&mut self, joined: Result<Result<ReplayReport, AgentError>, tokio::task::JoinError>) -> SseEvent {
        let failed = match joined {
            Ok(Ok(report)) => {
                let view = ReplayView { agent_id: self.agent_id.clone(), version: self.version.clone(), report };
                let data = serde_json::to_string(&view).unwrap_or_default();
                return SseEvent::default().event("report").data(data);
            }
            Ok(Err(e)) => ApiError::from(e),
            Err(e) => ApiError::internal(&e),
        };
        let body = json!({
            "error": failed.message,
            "code": failed.code,
            "field": failed.field,
            "status": failed.status.as_u16(),
        });
        SseEvent::default().event("error").data(body.to_string())
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Whether the client asked for a stream of progress events.
fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|t| t.trim().starts_with("text/event-stream")))
}

/// The request's selection, its numbers checked against the bounds.
fn selection(request: &ReplayRequest) -> Result<Selection, ApiError> {
    let within = |field: &'static str, value: Option<usize>, default: usize, max: usize| match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(field, format!("`{field}` is {n}; it must be 1 to {max}"))),
    };
    let defaults = Selection::default();
    let secs = within("timeout_secs", request.timeout_secs, DEFAULT_SECS, MAX_SECS)?;
    let selection = Selection {
        sessions: request.sessions.clone(),
        sessions_limit: within("max_sessions", request.max_sessions, defaults.sessions_limit, MAX_SESSIONS)?,
        since_ms: request.since,
        limit: within("limit", request.limit, defaults.limit, MAX_DECISIONS)?,
        time: Duration::from_secs(secs as u64),
    };
    selection.check().map_err(|e| ApiError::invalid("sessions", e.to_string()))?;
    Ok(selection)
}
