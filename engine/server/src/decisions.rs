//! A session's decisions: every trigger the agent was asked about and
//! what it decided, for inspecting a session after the fact (the web
//! inspector's timeline reads this).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::response::Response;
use serde::Serialize;
use serde_json::{Value, json};
use subs_engine::store::{CallRecord, StepRecord, StepStatus, StoredTrigger};
use subs_protocol::{Action, DecisionResponse, Trigger};
use utoipa::ToSchema;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::sessions::{SessionPath, encode_id, page_limit, paged};

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
/// first when absent). When more may follow, the `Link` header names the
/// next page (`rel="next"`).
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
    // One more than the page, to know whether another follows.
    let found = state.engine.steps(&caller.tenant, &session_id, from, limit + 1).await?;
    let Some((record, mut steps, open)) = found.filter(|(record, ..)| caller.may_reach(record)) else {
        return Err(ApiError::no_session(&session_id));
    };
    let more = steps.len() > limit;
    steps.truncate(limit);
    let next = steps.last().filter(|_| more).map(|(seq, _)| {
        format!("</v1/sessions/{}/decisions?limit={limit}&after={seq}>; rel=\"next\"", encode_id(&record.key.session))
    });
    Ok(paged(views(&steps, &open), next))
}

/// The page's views: each step with the calls its decision started,
/// filled in from the open calls and from the triggers of the page that
/// settled them.
fn views(steps: &[(u64, StepRecord)], open: &[CallRecord]) -> Vec<DecisionView> {
    let open: HashMap<&str, &CallRecord> = open.iter().map(|c| (c.call.id.as_str(), c)).collect();
    let mut settled: HashMap<&str, &Trigger> = HashMap::new();
    for (_, step) in steps {
        if let StoredTrigger::Plain { trigger } = &step.trigger
            && let Some(id) = settled_call(trigger)
        {
            settled.insert(id, trigger);
        }
    }
    steps
        .iter()
        .map(|(seq, step)| {
            let actions = step.decision.as_ref().map(DecisionResponse::actions).unwrap_or_default();
            let ids: Vec<&str> = if step.started.is_empty() {
                // Steps stored before the engine recorded which calls a
                // decision started: the ids its actions named.
                actions.iter().filter_map(action_call_id).collect()
            } else {
                step.started.iter().map(String::as_str).collect()
            };
            let calls = ids
                .into_iter()
                .map(|id| call_view(id, actions, open.get(id).copied(), settled.get(id).copied()))
                .collect();
            DecisionView {
                seq: *seq,
                decision_id: step.decision_id.clone(),
                turn_id: step.turn_id.clone(),
                trigger: trigger_view(&step.trigger),
                status: step.status,
                attempts: step.attempts,
                error: step.error.clone(),
                decision: step.decision.clone(),
                recorded: step.recorded.clone(),
                agent_version: step.agent_version.clone(),
                requested_ms: step.requested_ms,
                decided_ms: step.decided_ms,
                // Microseconds to milliseconds: exact for any delivery
                // shorter than 2^53 µs.
                #[allow(clippy::cast_precision_loss)]
                latency_ms: step.latency_us.map(|us| us as f64 / 1000.0),
                calls,
            }
        })
        .collect()
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

/// Everything the page knows of call `id`.
fn call_view(id: &str, actions: &[Action], open: Option<&CallRecord>, settled: Option<&Trigger>) -> CallView {
    let mut view = CallView { id: id.to_owned(), ..CallView::default() };
    for action in actions {
        match action {
            Action::ToolCall(call) if call.id.as_deref() == Some(id) => {
                view.kind = Some("tool_call".to_owned());
                view.name = Some(call.name.clone());
                view.arguments = Some(call.arguments.clone());
            }
            Action::LlmCall(call) if call.id.as_deref() == Some(id) => view.kind = Some("llm_call".to_owned()),
            Action::SubAgentSpawn(spawn) if spawn.tool_call_id == id => {
                view.kind = Some("sub_agent".to_owned());
                view.session_id = Some(spawn.session_id.clone());
            }
            _ => {}
        }
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
