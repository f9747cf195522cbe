//! A session's decisions: every trigger the agent was asked about and
//! what it decided, for inspecting a session after the fact (the web
//! inspector's timeline reads this).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use subs_engine::store::{CallRecord, StepRecord, StepStatus, StoredTrigger};
use subs_protocol::{Action, DecisionResponse, Trigger};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::reads::{self, Stop};
use crate::sessions::{SessionPath, encode_id, page_limit};

/// One decision of a session: the trigger the agent was asked about, what
/// became of it, and the calls its decision started.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionView {
    /// The step's number in its session (0, 1, 2…): pages go by it.
    pub seq: u64,
    /// The decision's id, as the agent saw it (stable across
    /// redeliveries).
    pub decision_id: String,
    /// The turn it belongs to.
    pub turn_id: Option<String>,
    /// The trigger, tagged by `type` as the agent received it, except
    /// `client.messages`, shown as stored: the messages `new` to the tree
    /// after the one `fork_id` names (the agent received the whole path),
    /// and `llm.execute`, shown as the call's `id` and `attempt`.
    #[schema(value_type = Object)]
    pub trigger: Value,
    /// `pending` (waiting to be decided, or delivered again), `applied`,
    /// `failed` (every delivery failed) or `dropped` (its turn ended
    /// first).
    #[schema(value_type = String)]
    pub status: StepStatus,
    /// Deliveries so far.
    pub attempts: u32,
    /// The last failed delivery's error.
    pub error: Option<String>,
    /// The decision (`DecisionResponse`), once applied.
    #[schema(value_type = Option<Object>)]
    pub decision: Option<DecisionResponse>,
    /// Ids of the messages the decision recorded.
    pub recorded: Vec<String>,
    /// The agent version that decided (`sha256:…`), when known.
    pub agent_version: Option<String>,
    /// When the step was created (Unix ms); `null` for steps stored
    /// before the engine recorded it.
    pub requested_ms: Option<u64>,
    /// When its decision was applied (Unix ms).
    pub decided_ms: Option<u64>,
    /// How long the delivery that decided took, in milliseconds (with a
    /// fraction: a component decides in microseconds).
    pub latency_ms: Option<f64>,
    /// The calls the decision started, in order.
    pub calls: Vec<CallView>,
}

/// A call a decision started, as far as the page shows it: open calls
/// from the session's calls, settled ones from the trigger that told the
/// agent they settled (when that trigger is on the same page).
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct CallView {
    /// The call id.
    pub id: String,
    /// `llm_call`, `tool_call` or `sub_agent`.
    pub kind: Option<String>,
    /// The tool (tool calls).
    pub name: Option<String>,
    /// The arguments (tool calls).
    #[schema(value_type = Option<Object>)]
    pub arguments: Option<Value>,
    /// `pending`, `queued`, `retry_scheduled`, `completed` or `failed`;
    /// `null` when neither open nor settled on this page.
    pub status: Option<String>,
    /// The current try (open calls).
    pub attempt: Option<u32>,
    /// When the current try times out (Unix ms; open calls).
    pub deadline_ms: Option<u64>,
    /// The result (a settled tool call or sub-agent).
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Token usage (a settled LLM call).
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
    /// What it cost, in dollars (a settled LLM call with a known price).
    pub cost: Option<String>,
    /// The child session (sub-agents).
    pub session_id: Option<String>,
}

/// The session's decisions in order, a page at a time: `limit` of them
/// (default 100, at most 1000) after the step numbered `after` (from the
/// first when absent), fewer when their stored size passes the tenant's
/// `max_page_bytes` (a page holds one decision whatever its size). When
/// more may follow, the `Link` header names the next page (`rel="next"`).
/// A page costs in proportion to what it holds: it counts as one of the
/// tenant's whole-session reads (`max_session_reads`) while it is built
/// and written, off the threads that serve other requests, and stops
/// when its client goes away.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/decisions",
    params(
        ("session_id" = String, Path),
        ("limit" = Option<usize>, Query, description = "decisions per page, 1 to 1000 (default 100)"),
        ("after" = Option<u64>, Query, description = "the step number after which the page starts"),
    ),
    responses(
        (status = 200, body = Vec<DecisionView>, headers(("link" = String, description = "the next page, when there is one"))),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody)
    ),
    tag = "sessions"
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    SessionPath(session_id): SessionPath,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let limit = page_limit(&query)?;
    let from = match query.get("after") {
        None => 0,
        Some(text) => match text.parse::<u64>() {
            Ok(after) => after.saturating_add(1),
            Err(_) => return Err(ApiError::invalid("after", format!("`{text}` is not a step number"))),
        },
    };
    let max_bytes = state.config.limits(&caller.tenant).max_page_bytes;
    // Waits, holding nothing, while the tenant has its bound of
    // whole-session reads running.
    let read = state.engine.reads().session_read(&caller.tenant).await;
    reads::blocking(move |runtime, stop| {
        let _read = read;
        let (tenant, engine) = (&caller.tenant, &state.engine);
        let record = runtime.block_on(engine.reads().session_record(tenant, &session_id))?;
        let Some(record) = record.filter(|record| caller.may_reach(record)) else {
            return Err(ApiError::no_session(&session_id));
        };
        stop.check()?;
        // One more than the page, to know whether another follows.
        let mut steps = runtime.block_on(engine.reads().steps(tenant, &session_id, from, limit + 1, max_bytes))?;
        // Past the page: a step beyond `limit`, or, when the page ended at
        // its bytes, steps the session has after it.
        let more = steps.len() > limit || steps.last().is_some_and(|(seq, _)| seq.saturating_add(1) < record.next.step);
        steps.truncate(limit);
        let next = steps.last().filter(|_| more).map(|(seq, _)| {
            format!(
                "</v1/sessions/{}/decisions?limit={limit}&after={seq}>; rel=\"next\"",
                encode_id(&record.key.session)
            )
        });
        // The calls the page's decisions started that are still open, read
        // a batch of ids at a time.
        let mut ids: Vec<String> = steps.iter().flat_map(|(_, step)| started(step)).map(str::to_owned).collect();
        ids.sort_unstable();
        ids.dedup();
        let mut open = Vec::new();
        for batch in ids.chunks(CALLS_PER_READ) {
            stop.check()?;
            open.extend(runtime.block_on(engine.reads().calls_named(tenant, &session_id, batch))?);
        }
        drop(ids);
        stop.check()?;
        let page = views(steps, &open, stop)?;
        drop(open);
        let body = reads::to_json(&page, stop)?;
        Ok(paged_json(body, next))
    })
    .await
}

/// The ids of the calls a step's decision started: those it recorded, or,
/// for steps stored before the engine recorded them, those its actions
/// named.
fn started(step: &StepRecord) -> Vec<&str> {
    if step.started.is_empty() {
        let actions = step.decision.as_deref().map(DecisionResponse::actions).unwrap_or_default();
        actions.iter().filter_map(action_call_id).collect()
    } else {
        step.started.iter().map(String::as_str).collect()
    }
}

/// How many open calls a page reads from the store at a time, looking
/// between reads at whether its client is still there. Each read walks the
/// session's history once, so fewer, larger reads cost less in all.
const CALLS_PER_READ: usize = 32 * 1024;

/// How many calls [`views`] makes between looks at whether its client
/// is still there.
const CALLS_BETWEEN_CHECKS: usize = 4096;

/// The page's views: each step with the calls its decision started,
/// filled in from the open calls and from the triggers of the page that
/// settled them. Linear in the page: each step's actions are indexed by
/// the call ids they name, once.
fn views(steps: Vec<(u64, StepRecord)>, open: &[CallRecord], stop: &Stop) -> Result<Vec<DecisionView>, ApiError> {
    let open: HashMap<&str, &CallRecord> = open.iter().map(|c| (c.call.id.as_str(), c)).collect();
    let mut settled: HashMap<&str, &Trigger> = HashMap::new();
    for (_, step) in &steps {
        if let StoredTrigger::Plain { trigger } = &step.trigger
            && let Some(id) = settled_call(trigger)
        {
            settled.insert(id, trigger);
        }
    }
    let mut made = 0usize;
    let mut all_calls = Vec::with_capacity(steps.len());
    for (_, step) in &steps {
        let actions = step.decision.as_deref().map(DecisionResponse::actions).unwrap_or_default();
        // The action naming each call id (the last, if several do).
        let by_id: HashMap<&str, &Action> = actions.iter().filter_map(|a| Some((action_call_id(a)?, a))).collect();
        let ids = started(step);
        let mut calls = Vec::with_capacity(ids.len());
        for id in ids {
            made += 1;
            if made.is_multiple_of(CALLS_BETWEEN_CHECKS) {
                stop.check()?;
            }
            calls.push(call_view(id, by_id.get(id).copied(), open.get(id).copied(), settled.get(id).copied()));
        }
        all_calls.push(calls);
    }
    drop(settled);
    Ok(steps
        .into_iter()
        .zip(all_calls)
        .map(|((seq, step), calls)| DecisionView {
            seq,
            decision_id: step.decision_id,
            turn_id: step.turn_id,
            trigger: trigger_view(&step.trigger),
            status: step.status,
            attempts: step.attempts,
            error: step.error,
            decision: step.decision.map(|decision| *decision),
            recorded: step.recorded,
            agent_version: step.agent_version,
            requested_ms: step.requested_ms,
            decided_ms: step.decided_ms,
            // Microseconds to milliseconds: exact for any delivery
            // shorter than 2^53 µs.
            #[allow(clippy::cast_precision_loss)]
            latency_ms: step.latency_us.map(|us| us as f64 / 1000.0),
            calls,
        })
        .collect())
}

/// A page of JSON already encoded, with a `Link` header to the `next`
/// one if any.
fn paged_json(body: Vec<u8>, next: Option<String>) -> Response {
    let mut response = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(link) = next.and_then(|link| HeaderValue::from_str(&link).ok()) {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

/// An enum's wire name (`"tool_call"`, `"completed"`…).
fn text(value: &impl Serialize) -> Option<String> {
    serde_json::to_value(value).ok()?.as_str().map(str::to_owned)
}

/// The trigger as the view shows it (see [`DecisionView::trigger`]).
fn trigger_view(trigger: &StoredTrigger) -> Value {
    match trigger {
        StoredTrigger::Plain { trigger } => serde_json::to_value(trigger).unwrap_or(Value::Null),
        StoredTrigger::ClientMessages { fork_id, new, client } => {
            json!({"type": "client.messages", "fork_id": fork_id, "new": new, "client": client})
        }
        StoredTrigger::LlmExecute { call_id, attempt } => {
            json!({"type": "llm.execute", "id": call_id, "attempt": attempt})
        }
    }
}

/// The call a trigger tells the agent settled.
fn settled_call(trigger: &Trigger) -> Option<&str> {
    match trigger {
        Trigger::ToolFinished(t) => Some(&t.id),
        Trigger::LlmFinished(t) => Some(&t.id),
        Trigger::SubAgentFinished(t) => Some(&t.id),
        _ => None,
    }
}

/// The call an action starts, when it names its id.
fn action_call_id(action: &Action) -> Option<&str> {
    match action {
        Action::ToolCall(call) => call.id.as_deref(),
        Action::LlmCall(call) => call.id.as_deref(),
        Action::SubAgentSpawn(spawn) => Some(&spawn.tool_call_id),
        _ => None,
    }
}

/// Everything the page knows of call `id`: the action that started it,
/// its open record, the trigger that settled it.
fn call_view(id: &str, action: Option<&Action>, open: Option<&CallRecord>, settled: Option<&Trigger>) -> CallView {
    let mut view = CallView { id: id.to_owned(), ..CallView::default() };
    match action {
        Some(Action::ToolCall(call)) => {
            view.kind = Some("tool_call".to_owned());
            view.name = Some(call.name.clone());
            // The open record's copy, when there is one, is shown instead.
            if open.is_none_or(|record| record.call.arguments.is_none()) {
                view.arguments = Some(call.arguments.clone());
            }
        }
        Some(Action::LlmCall(_)) => view.kind = Some("llm_call".to_owned()),
        Some(Action::SubAgentSpawn(spawn)) => {
            view.kind = Some("sub_agent".to_owned());
            view.session_id = Some(spawn.session_id.clone());
        }
        _ => {}
    }
    if let Some(record) = open {
        let call = &record.call;
        view.kind = text(&call.kind);
        view.status = text(&call.status);
        view.attempt = Some(call.attempt);
        view.deadline_ms = record.deadline_ms;
        if let Some(name) = &call.name {
            view.name = Some(name.clone());
        }
        if let Some(arguments) = &call.arguments {
            view.arguments = Some(serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.clone())));
        }
        if call.session_id.is_some() {
            view.session_id.clone_from(&call.session_id);
        }
    }
    let status = |ok: bool| Some(if ok { "completed" } else { "failed" }.to_owned());
    match settled {
        Some(Trigger::ToolFinished(t)) => {
            view.kind.get_or_insert_with(|| "tool_call".to_owned());
            view.name.get_or_insert_with(|| t.name.clone());
            view.status = status(t.ok);
            view.result.clone_from(&t.result);
            view.error.clone_from(&t.error);
        }
        Some(Trigger::LlmFinished(t)) => {
            view.kind.get_or_insert_with(|| "llm_call".to_owned());
            view.status = status(t.ok);
            view.usage.clone_from(&t.usage);
            view.cost.clone_from(&t.cost);
            view.error.clone_from(&t.error);
        }
        Some(Trigger::SubAgentFinished(t)) => {
            view.kind.get_or_insert_with(|| "sub_agent".to_owned());
            view.session_id.get_or_insert_with(|| t.session_id.clone());
            view.status = status(t.ok);
            view.result.clone_from(&t.result);
            view.error.clone_from(&t.error);
        }
        _ => {}
    }
    view
}
