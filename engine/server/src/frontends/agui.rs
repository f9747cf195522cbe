//! AG-UI: `POST /v1/agents/{agent_id}/ag-ui`, a run of an agent as the
//! AG-UI protocol has it (<https://docs.ag-ui.com>), so a CopilotKit or
//! `@ag-ui/client` frontend talks to a subs agent directly.
//!
//! The body is AG-UI's `RunAgentInput`; the answer is the run's AG-UI
//! events over server-sent events, one JSON object per `data:` line. This
//! is a translation over the engine's typed events
//! ([`SessionEvent`]): everything the run does is stored by the session as
//! any input's turn is, and can be read again from the session's own API.
//!
//! # Mapping
//!
//! - `threadId` is the session, `runId` the id of the turn a new run
//!   starts (so sending the same run again follows the same turn: the
//!   input is idempotent).
//! - A run that starts a turn sends a `client.messages` input: the AG-UI
//!   messages as the conversation view, `tools` as client tools,
//!   `context`, `state` and `forwardedProps` in its `client` context.
//! - A run while the session waits for frontend tool calls, whose messages
//!   carry `tool` messages answering them, settles them (`tool.result`, or
//!   `tool.error` for a tool message with `error`) and streams the rest of
//!   the waiting turn.
//! - A run while the session waits on interrupts resumes them: AG-UI's
//!   `resume` entries, or `forwardedProps.command.resume` (the shape
//!   CopilotKit's LangGraph integration sends).
//! - Events: `RUN_STARTED`; `TEXT_MESSAGE_*` streamed from token deltas
//!   (or whole, for a reply that did not stream); `TOOL_CALL_*` for the
//!   model's tool calls; `TOOL_CALL_RESULT` for recorded tool messages;
//!   `STATE_SNAPSHOT` for `state` events; then `MESSAGES_SNAPSHOT` of the
//!   conversation under the ids the session stored, and `RUN_FINISHED`
//!   (with `outcome`) or `RUN_ERROR`.
//!
//! The full description, with what ends a run and the ids, is in
//! `docs/api.md`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use subs_protocol::event::{
    ClientToolCall, InterruptRaised, MessageRecorded, StateChanged, TokenDelta, TurnDone, TurnFailed,
};
use subs_protocol::{
    AgentTool, ClientContext, Content, ContentPart, DraftMessage, Message, ProtocolError, Role, SessionEvent,
    StreamDelta, ToolCall, ToolHandler,
};

use super::{Answer, Found, Media, Plan, Reader, Translator, Waits};
use crate::auth::Caller;
use crate::body::Incoming;
use crate::error::{ApiError, ErrorBody};
use crate::{AppState, body, frontends, sessions};

/// The most interrupts one run may resume.
const MAX_RESUME: usize = 64;

/// AG-UI's `RunAgentInput`, as the fields subs reads. Fields subs does not
/// know are ignored (AG-UI objects are open: clients add their own).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunAgentInput {
    thread_id: String,
    run_id: String,
    #[serde(default)]
    state: Option<Value>,
    messages: Vec<Value>,
    #[serde(default)]
    tools: Vec<AguiTool>,
    #[serde(default)]
    context: Vec<AguiContext>,
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(default)]
    resume: Option<Vec<ResumeEntry>>,
}

/// AG-UI's `Tool`: a tool the frontend runs.
#[derive(Debug, Deserialize)]
struct AguiTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

/// AG-UI's `Context`: ambient information for the run.
#[derive(Debug, Deserialize)]
struct AguiContext {
    description: String,
    value: String,
}

/// AG-UI's `ResumeEntry`: the answer to one interrupt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResumeEntry {
    interrupt_id: String,
    status: ResumeStatus,
    #[serde(default)]
    payload: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// An AG-UI `user` message.
#[derive(Debug, Deserialize)]
struct UserMessage {
    id: String,
    content: Value,
    #[serde(default)]
    name: Option<String>,
}

/// An AG-UI `assistant` message.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AssistantMessage {
    id: String,
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<AguiToolCall>>,
    #[serde(default)]
    name: Option<String>,
}

/// A tool call on an AG-UI `assistant` message.
#[derive(Debug, Deserialize)]
struct AguiToolCall {
    id: String,
    function: AguiFunction,
}

#[derive(Debug, Deserialize)]
struct AguiFunction {
    name: String,
    arguments: String,
}

/// An AG-UI `tool` message: what a tool returned.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolMessage {
    id: String,
    content: Value,
    tool_call_id: String,
    #[serde(default)]
    error: Option<String>,
}

/// An AG-UI `system` or `developer` message.
#[derive(Debug, Deserialize)]
struct InstructionMessage {
    id: String,
    content: String,
    #[serde(default)]
    name: Option<String>,
}

/// Runs the agent as AG-UI has it: the body is a `RunAgentInput`
/// (`threadId` the session, `runId` the new turn's id, `messages`, `tools`
/// run by the frontend, `context`, `state`, `forwardedProps`, `resume`),
/// the answer the run's AG-UI events over server-sent events, from
/// `RUN_STARTED` to `RUN_FINISHED` or `RUN_ERROR`. A run ends when the
/// turn ends, when it waits for frontend tool calls (`RUN_FINISHED` with
/// `outcome.pendingToolCallIds`; the next run's tool messages settle
/// them) or for interrupts (`outcome.type: "interrupt"`; the next run's
/// `resume` resumes them). Errors before the stream starts are JSON, as on
/// every route; after, `RUN_ERROR`.
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/ag-ui",
    params(("agent_id" = String, Path, description = "The agent the thread's session runs")),
    request_body(content = Object, description = "AG-UI's RunAgentInput", content_type = "application/json"),
    responses(
        (status = 200, description = "The run's AG-UI events", content_type = "text/event-stream"),
        (status = 400, description = "A RunAgentInput that cannot be converted; `field` names what", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "Unknown agent, or a thread the caller does not reach", body = ErrorBody),
        (status = 409, description = "The thread runs another agent, or waits for something the run does not answer", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 429, description = "The tenant's session limit, or its limit of open event streams", body = ErrorBody),
    ),
    tag = "ag-ui"
)]
pub async fn run(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(agent_id): Path<String>,
    body: Incoming,
) -> Result<Response, ApiError> {
    frontends::check_agent_id(&agent_id)?;
    let limits = state.config.limits(&caller.tenant);
    let input: RunAgentInput = body::json_with(body, limits.max_body_bytes, refusal).await?;
    frontends::check_id("threadId", "id", &input.thread_id)?;
    frontends::check_id("runId", "id", &input.run_id)?;
    let session = input.thread_id.clone();
    let found = match frontends::find(&state, &caller, &session, &agent_id, "agent_id", "thread").await? {
        Found::Unreachable => return Err(ApiError::no_session(&session)),
        found => found,
    };
    let Planned { plan, origins, unanswered } =
        plan(&input, &agent_id, found.snapshot(), state.config.file().http.json_bounds())?;
    let starts = matches!(plan, Plan::Start(_));
    let followed =
        frontends::follow(&state, &caller, &session, plan, None, AguiRun::NAME).await.map_err(|mut error| {
            // The engine names fields of the input it was sent: name them as
            // the run's instead.
            if starts {
                error.field = error.field.map(|field| agui_field(&field, &origins));
            }
            error
        })?;
    let mut run = AguiRun::new(&input, state.clone(), caller.tenant.clone(), session);
    // The turn goes on only once every frontend call is answered: until
    // then this run ends asking for the rest.
    if !unanswered.is_empty() {
        run.pending = Some(unanswered);
    }
    Ok(frontends::respond(run, followed.frames))
}

/// What a run does with the session, and what the run needs to know of it.
struct Planned {
    plan: Plan,
    /// For a plan that starts a turn, `origins[i]` is the index in the
    /// run's `messages` of the input's message `i`.
    origins: Vec<usize>,
    /// For a plan that settles frontend calls, those the turn still waits
    /// for after it (the run then ends at once, asking for them).
    unanswered: Vec<String>,
}

/// Decides what the run sends, from the input and the session as it is.
fn plan(
    input: &RunAgentInput,
    agent_id: &str,
    snapshot: Option<&subs_engine::Snapshot>,
    json: body::JsonBounds,
) -> Result<Planned, ApiError> {
    let waits = Waits::of(snapshot);
    let settle = |plan| Ok(Planned { plan, origins: Vec::new(), unanswered: Vec::new() });

    // Resuming interrupts.
    let resumes = resumes(input, &waits.interrupts)?;
    if !resumes.is_empty() {
        let Some(turn_id) = waits.turn.map(str::to_owned) else {
            return Err(ApiError::conflict(format!(
                "thread `{}` has no open turn: nothing waits for a resume",
                input.thread_id
            )));
        };
        if resumes.iter().any(|(_, status, _)| *status == ResumeStatus::Cancelled) {
            return settle(Plan::Cancel { turn_id, after: waits.last_event });
        }
        let answers =
            resumes.into_iter().map(|(interrupt_id, _, payload)| Answer::resume(None, interrupt_id, payload)).collect();
        return settle(Plan::Settle { turn_id, answers });
    }

    // Answering frontend tool calls.
    let answers = tool_answers(input, &waits.client_calls, json)?;
    if let Some(turn_id) = waits.turn.filter(|_| !answers.is_empty()) {
        let answered: HashSet<&str> = answers.iter().filter_map(Answer::call_id).collect();
        let unanswered =
            waits.client_calls.iter().filter(|id| !answered.contains(*id)).map(|id| (*id).to_owned()).collect();
        let plan = Plan::Settle { turn_id: turn_id.to_owned(), answers };
        return Ok(Planned { plan, origins: Vec::new(), unanswered });
    }
    // Sending the run of the open turn again follows it (a reconnect);
    // any other run must first answer what the turn waits for.
    let same_run = waits.turn == Some(input.run_id.as_str());
    if !waits.interrupts.is_empty() && !same_run {
        return Err(ApiError {
            field: Some("resume".to_owned()),
            ..ApiError::conflict(format!(
                "thread `{}` waits on interrupt(s) {}: send `resume` entries for them (or `forwardedProps.command.resume`)",
                input.thread_id,
                quoted(&waits.interrupts)
            ))
        });
    }
    if !waits.client_calls.is_empty() && !same_run {
        return Err(ApiError {
            field: Some("messages".to_owned()),
            ..ApiError::conflict(format!(
                "thread `{}` waits for the result of frontend tool call(s) {}: send `tool` messages with those `toolCallId`s",
                input.thread_id,
                quoted(&waits.client_calls)
            ))
        });
    }
    let (messages, origins) = conversation(&input.messages)?;
    let plan = frontends::start(agent_id, Some(input.run_id.clone()), messages, Some(client_context(input)));
    Ok(Planned { plan, origins, unanswered: Vec::new() })
}

/// A field of the `client.messages` input a run sent, as the run's own:
/// `messages[1].tool_calls[0]` is `messages[3].toolCalls[0]` when the
/// run's messages had two the input left out; `client.tools[0].input` is
/// `tools[0].parameters`.
fn agui_field(field: &str, origins: &[usize]) -> String {
    if let Some(rest) = field.strip_prefix("messages[")
        && let Some((index, rest)) = rest.split_once(']')
        && let Ok(index) = index.parse::<usize>()
    {
        let index = origins.get(index).copied().unwrap_or(index);
        let rest = rest.replace(".tool_calls", ".toolCalls").replace(".tool_call_id", ".toolCallId");
        return format!("messages[{index}]{rest}");
    }
    if let Some(rest) = field.strip_prefix("client.tools") {
        return format!("tools{}", rest.replace(".input", ".parameters"));
    }
    for (theirs, ours) in [("client.forwarded_props", "forwardedProps"), ("client.", ""), ("turn_id", "runId")] {
        if let Some(rest) = field.strip_prefix(theirs) {
            return format!("{ours}{rest}");
        }
    }
    field.to_owned()
}

fn quoted(ids: &[&str]) -> String {
    ids.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
}

/// The interrupts the run resumes, with their status and payload: its
/// `resume` entries, or else `forwardedProps.command.resume` for the one
/// open interrupt (or the one `forwardedProps.command.interruptId` names).
fn resumes(input: &RunAgentInput, open: &[&str]) -> Result<Vec<(String, ResumeStatus, Option<Value>)>, ApiError> {
    if let Some(entries) = input.resume.as_ref().filter(|e| !e.is_empty()) {
        if entries.len() > MAX_RESUME {
            return Err(ApiError::invalid("resume", format!("at most {MAX_RESUME} resume entries")));
        }
        let mut out = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if !open.contains(&entry.interrupt_id.as_str()) {
                return Err(ApiError {
                    field: Some(format!("resume[{i}].interruptId")),
                    ..ApiError::conflict(format!(
                        "thread `{}` has no open interrupt `{}`",
                        input.thread_id, entry.interrupt_id
                    ))
                });
            }
            out.push((entry.interrupt_id.clone(), entry.status, entry.payload.clone().filter(|p| !p.is_null())));
        }
        return Ok(out);
    }
    let Some(command) = input.forwarded_props.as_ref().and_then(|p| p.get("command")).filter(|c| !c.is_null()) else {
        return Ok(Vec::new());
    };
    let Some(command) = command.as_object() else {
        return Err(ApiError::invalid("forwardedProps.command", "an object: {\"resume\": …, \"interruptId\"?: …}"));
    };
    let Some(payload) = command.get("resume") else { return Ok(Vec::new()) };
    let interrupt_id = match command.get("interruptId") {
        Some(Value::String(id)) => id.clone(),
        Some(_) => return Err(ApiError::invalid("forwardedProps.command.interruptId", "a string")),
        None => match open {
            [one] => (*one).to_owned(),
            [] => {
                return Err(ApiError {
                    field: Some("forwardedProps.command.resume".to_owned()),
                    ..ApiError::conflict(format!("thread `{}` has no open interrupt to resume", input.thread_id))
                });
            }
            several => {
                return Err(ApiError::invalid(
                    "forwardedProps.command.interruptId",
                    format!(
                        "thread `{}` has {} open interrupts ({}): name one, or send `resume` entries",
                        input.thread_id,
                        several.len(),
                        quoted(several)
                    ),
                ));
            }
        },
    };
    if !open.contains(&interrupt_id.as_str()) {
        return Err(ApiError {
            field: Some("forwardedProps.command.interruptId".to_owned()),
            ..ApiError::conflict(format!("thread `{}` has no open interrupt `{interrupt_id}`", input.thread_id))
        });
    }
    Ok(vec![(interrupt_id, ResumeStatus::Resolved, Some(payload.clone()).filter(|p| !p.is_null()))])
}

/// The `tool.result` / `tool.error` inputs for the run's `tool` messages
/// that answer frontend tool calls the session waits for.
fn tool_answers(input: &RunAgentInput, waiting: &[&str], json: body::JsonBounds) -> Result<Vec<Answer>, ApiError> {
    let mut answers = Vec::new();
    if waiting.is_empty() {
        return Ok(answers);
    }
    for (i, value) in input.messages.iter().enumerate() {
        if value.get("role").and_then(Value::as_str) != Some("tool") {
            continue;
        }
        let message: ToolMessage = read(value, i)?;
        if !waiting.contains(&message.tool_call_id.as_str()) {
            continue;
        }
        answers.push(match message.error {
            Some(error) => Answer::tool_error(None, message.tool_call_id, error),
            None => {
                let result = tool_result(&content(&message.content, i)?, json);
                Answer::tool_result(None, message.tool_call_id, Some(result))
            }
        });
    }
    Ok(answers)
}

/// A tool message's content as the call's result: AG-UI carries results as
/// text, which frontends usually fill with JSON; JSON text is passed as
/// the value it is (within the bounds of a JSON body), other text as a
/// string.
fn tool_result(content: &Content, json: body::JsonBounds) -> Value {
    let text = content.text();
    body::embedded_json(&text, json).unwrap_or(Value::String(text))
}

/// The `client` context of the run's `client.messages` input.
fn client_context(input: &RunAgentInput) -> ClientContext {
    let tools: Vec<AgentTool> = input
        .tools
        .iter()
        .map(|t| AgentTool {
            name: t.name.clone(),
            description: t.description.clone(),
            input: t.parameters.clone().filter(|p| !p.is_null()).map(subs_protocol::ToolSchema::new),
            output: None,
            handler: Some(ToolHandler::Client),
        })
        .collect();
    let context: Vec<Value> =
        input.context.iter().map(|c| json!({"description": c.description, "value": c.value})).collect();
    ClientContext {
        tools: (!tools.is_empty()).then_some(tools),
        context: (!context.is_empty()).then_some(context),
        state: input.state.clone().filter(|s| !s.is_null()),
        forwarded_props: input.forwarded_props.clone().filter(|p| !p.is_null()),
    }
}

/// Reads message `i` as `T`, errors naming `messages[i].<field>`.
fn read<T: serde::de::DeserializeOwned>(value: &Value, i: usize) -> Result<T, ApiError> {
    subs_protocol::from_value(value.clone()).map_err(|e: ProtocolError| refusal(&e.in_index(i).in_field("messages")))
}

/// 400 for a body that is not a `RunAgentInput`, naming the field: a
/// missing one by its whole path (`messages[0].content`, where serde names
/// only the object it is missing from).
fn refusal(error: &ProtocolError) -> ApiError {
    let mut refusal = body::refusal(error);
    let missing = error.message().strip_prefix("missing field `").and_then(|rest| rest.split('`').next());
    if let (Some(missing), Some(at)) = (missing, error.field()) {
        refusal.field = Some(format!("{at}.{missing}"));
    }
    refusal
}

/// The AG-UI messages as a conversation view for `client.messages`.
/// `activity` and `reasoning` messages are the frontend's (progress shown
/// to its user, reasoning it was sent) and are left out: the engine's
/// conversation holds neither.
/// Returns the drafts with, for each, its index among `messages`.
fn conversation(messages: &[Value]) -> Result<(Vec<DraftMessage>, Vec<usize>), ApiError> {
    let mut drafts = Vec::with_capacity(messages.len());
    let mut origins = Vec::with_capacity(messages.len());
    for (i, value) in messages.iter().enumerate() {
        let role = match value.get("role") {
            Some(Value::String(role)) => role.as_str(),
            Some(_) => return Err(ApiError::invalid(format!("messages[{i}].role"), "a string")),
            None => return Err(ApiError::invalid(format!("messages[{i}].role"), "missing field `role`")),
        };
        let draft = match role {
            "user" => {
                let m: UserMessage = read(value, i)?;
                DraftMessage {
                    id: Some(m.id),
                    role: Role::User,
                    content: Some(content(&m.content, i)?),
                    tool_calls: None,
                    tool_call_id: None,
                    name: m.name,
                }
            }
            "assistant" => {
                let m: AssistantMessage = read(value, i)?;
                let tool_calls = m.tool_calls.map(|calls| {
                    calls.into_iter().map(|c| ToolCall::function(c.id, c.function.name, c.function.arguments)).collect()
                });
                DraftMessage {
                    id: Some(m.id),
                    role: Role::Assistant,
                    content: m.content.map(Content::Text),
                    tool_calls,
                    tool_call_id: None,
                    name: m.name,
                }
            }
            "tool" => {
                let m: ToolMessage = read(value, i)?;
                // A failed tool's message says so to the model.
                let content = match m.error {
                    Some(error) => Content::Text(format!("error: {error}")),
                    None => content(&m.content, i)?,
                };
                DraftMessage {
                    id: Some(m.id),
                    role: Role::Tool,
                    content: Some(content),
                    tool_calls: None,
                    tool_call_id: Some(m.tool_call_id),
                    name: None,
                }
            }
            // subs has one role for instructions: a developer's are the
            // system's.
            "system" | "developer" => {
                let m: InstructionMessage = read(value, i)?;
                DraftMessage {
                    id: Some(m.id),
                    role: Role::System,
                    content: Some(Content::Text(m.content)),
                    tool_calls: None,
                    tool_call_id: None,
                    name: m.name,
                }
            }
            "activity" | "reasoning" => continue,
            other => {
                return Err(ApiError::invalid(
                    format!("messages[{i}].role"),
                    format!(
                        "unknown role `{other}`, expected one of `user`, `assistant`, `tool`, `system`, `developer`, \
                         `activity`, `reasoning`"
                    ),
                ));
            }
        };
        drafts.push(draft);
        origins.push(i);
    }
    Ok((drafts, origins))
}

/// A message's content: a string, or a list of AG-UI content parts.
fn content(value: &Value, i: usize) -> Result<Content, ApiError> {
    let field = |rest: &str| format!("messages[{i}].content{rest}");
    match value {
        Value::String(text) => Ok(Content::Text(text.clone())),
        Value::Array(parts) => {
            let mut out = Vec::with_capacity(parts.len());
            for (p, part) in parts.iter().enumerate() {
                out.push(content_part(part).map_err(|(at, why)| ApiError::invalid(field(&format!("[{p}]{at}")), why))?);
            }
            Ok(Content::Parts(out))
        }
        _ => Err(ApiError::invalid(field(""), "a string or an array of content parts")),
    }
}

/// One AG-UI content part as subs' (OpenAI's) part; the error names the
/// field within the part and says why.
fn content_part(part: &Value) -> Result<ContentPart, (String, String)> {
    let text = |key: &str| -> Result<String, (String, String)> {
        part.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| (format!(".{key}"), "a string".to_owned()))
    };
    let kind = text("type")?;
    if kind == "text" {
        return Ok(ContentPart::Text { text: text("text")? });
    }
    let source = part.get("source").ok_or_else(|| (".source".to_owned(), "missing field `source`".to_owned()))?;
    let source_text = |key: &str| -> Result<String, (String, String)> {
        source
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| (format!(".source.{key}"), "a string".to_owned()))
    };
    let source_kind = source_text("type")?;
    let url = match source_kind.as_str() {
        "url" => source_text("value")?,
        "data" => {
            let mime = source
                .get("mimeType")
                .and_then(Value::as_str)
                .ok_or_else(|| (".source.mimeType".to_owned(), "a string".to_owned()))?;
            frontends::data_url(mime, &source_text("value")?)
        }
        "file" => {
            return Err((
                ".source.type".to_owned(),
                "`file` sources (a provider's file handle) are not supported: send the bytes (`data`) or a `url`"
                    .to_owned(),
            ));
        }
        other => {
            return Err((".source.type".to_owned(), format!("unknown source `{other}`, expected `data` or `url`")));
        }
    };
    let media = match kind.as_str() {
        "image" => Media::Image,
        "video" => Media::Video,
        "audio" => Media::Audio,
        "document" => Media::Document,
        other => {
            return Err((
                ".type".to_owned(),
                format!("unknown part `{other}`, expected `text`, `image`, `audio`, `video` or `document`"),
            ));
        }
    };
    // Audio is taken inline only, whatever URL a `url` source names.
    if media == Media::Audio && source_kind != "data" {
        return Err((".source.type".to_owned(), "audio is taken inline only (`data`)".to_owned()));
    }
    let filename = part.get("metadata").and_then(|m| m.get("filename")).and_then(Value::as_str).unwrap_or("document");
    frontends::media_part(media, url, filename).map_err(|why| (".source.type".to_owned(), why.to_owned()))
}

/// A recorded message as AG-UI's `Message`, under the id the session
/// stored it with.
fn agui_message(m: &Message) -> Value {
    let mut out = Map::new();
    out.insert("id".to_owned(), json!(m.id));
    let text = m.text();
    match m.role {
        Role::User => {
            out.insert("role".to_owned(), json!("user"));
            out.insert(
                "content".to_owned(),
                match &m.content {
                    Some(Content::Parts(parts)) => Value::Array(parts.iter().map(agui_part).collect()),
                    _ => json!(text),
                },
            );
        }
        Role::Assistant => {
            out.insert("role".to_owned(), json!("assistant"));
            if m.content.is_some() {
                out.insert("content".to_owned(), json!(text));
            }
            if let Some(calls) = m.tool_calls.as_ref().filter(|c| !c.is_empty()) {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.function.name, "arguments": c.function.arguments}})
                    })
                    .collect();
                out.insert("toolCalls".to_owned(), Value::Array(calls));
            }
        }
        Role::Tool => {
            out.insert("role".to_owned(), json!("tool"));
            out.insert("content".to_owned(), json!(text));
            out.insert("toolCallId".to_owned(), json!(m.tool_call_id.clone().unwrap_or_default()));
        }
        Role::System => {
            out.insert("role".to_owned(), json!("system"));
            out.insert("content".to_owned(), json!(text));
        }
    }
    if let Some(name) = m.name.as_ref().filter(|_| m.role != Role::Tool) {
        out.insert("name".to_owned(), json!(name));
    }
    Value::Object(out)
}

/// A subs content part as AG-UI's.
fn agui_part(part: &ContentPart) -> Value {
    fn source(url: &str) -> Value {
        // A `data:` URL is inline bytes; anything else is fetched.
        match frontends::split_data_url(url) {
            Some((mime, data)) => json!({"type": "data", "value": data, "mimeType": mime}),
            None => json!({"type": "url", "value": url}),
        }
    }
    match part {
        ContentPart::Text { text } => json!({"type": "text", "text": text}),
        ContentPart::ImageUrl { image_url } => json!({"type": "image", "source": source(&image_url.url)}),
        ContentPart::VideoUrl { video_url } => json!({"type": "video", "source": source(&video_url.url)}),
        ContentPart::File { file } => {
            let mut src = source(&file.file_data);
            if src["type"] == "url" && !file.file_data.contains(':') {
                // Bare base64, as OpenAI's file parts allow.
                src = json!({"type": "data", "value": file.file_data, "mimeType": "application/octet-stream"});
            }
            json!({"type": "document", "source": src, "metadata": {"filename": file.filename}})
        }
        ContentPart::InputAudio { input_audio } => json!({"type": "audio",
            "source": {"type": "data", "value": input_audio.data, "mimeType": format!("audio/{}", input_audio.format)}}),
    }
}

/// One run's translation of the turn's events into AG-UI events.
struct AguiRun {
    /// The thread's session.
    session: Reader,
    thread_id: String,
    run_id: String,
    ended: bool,
    /// Where the streamed messages are.
    messages: Messages,
    /// Frontend tool calls asked for in this run.
    asked: Vec<String>,
    /// Set when the run ends right after it starts, asking for these
    /// frontend tool calls (answered only in part).
    pending: Option<Vec<String>>,
}

impl AguiRun {
    fn new(input: &RunAgentInput, state: Arc<AppState>, tenant: String, session: String) -> Self {
        AguiRun {
            session: Reader { state, tenant, session },
            thread_id: input.thread_id.clone(),
            run_id: input.run_id.clone(),
            ended: false,
            messages: Messages::default(),
            asked: Vec::new(),
            pending: None,
        }
    }

    /// The conversation as the session stored it: the frontend's messages
    /// take the stored ids, so its next run appends rather than forks.
    async fn snapshot(&self, out: &mut Vec<Value>) {
        if let Some(snapshot) = self.session.snapshot().await {
            let messages: Vec<Value> = snapshot.messages.iter().map(agui_message).collect();
            out.push(json!({"type": "MESSAGES_SNAPSHOT", "messages": messages}));
        }
    }

    /// Ends the run: open messages closed, the conversation, `RUN_FINISHED`.
    async fn finish(&mut self, out: &mut Vec<Value>, outcome: Value, result: Option<Value>) {
        self.messages.close(out);
        self.snapshot(out).await;
        let mut finished = json!({"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id,
                                  "outcome": outcome});
        if let Some(result) = result {
            finished["result"] = result;
        }
        out.push(finished);
        self.ended = true;
    }

    /// Ends the run with `RUN_ERROR`.
    async fn finish_error(&mut self, out: &mut Vec<Value>, code: &str, message: String) {
        self.messages.close(out);
        self.snapshot(out).await;
        tracing::info!(tenant = %self.session.tenant, session = %self.session.session, run = %self.run_id, code, "AG-UI run ends with an error");
        out.push(json!({"type": "RUN_ERROR", "message": message, "code": code}));
        self.ended = true;
    }
}

impl Translator for AguiRun {
    const NAME: &'static str = "ag-ui";

    async fn start(&mut self) -> Vec<Value> {
        let mut out = vec![json!({"type": "RUN_STARTED", "threadId": self.thread_id, "runId": self.run_id})];
        if let Some(pending) = self.pending.take() {
            self.finish(&mut out, json!({"type": "success", "pendingToolCallIds": pending}), None).await;
        }
        out
    }

    async fn event(&mut self, event: SessionEvent, out: &mut Vec<Value>) {
        match event {
            SessionEvent::TokenDelta(TokenDelta { delta, call_id }) => self.messages.delta(delta, &call_id, out),
            SessionEvent::Message(MessageRecorded { message, .. }) => self.messages.message(message, out),
            SessionEvent::State(StateChanged { state }) => {
                out.push(json!({"type": "STATE_SNAPSHOT", "snapshot": state}));
            }
            SessionEvent::ToolCall(ClientToolCall { id, .. }) => {
                if !self.asked.contains(&id) {
                    self.asked.push(id);
                }
                // The calls of one decision are stored together: once
                // every frontend call the session now waits for was asked,
                // the run is over and the frontend runs them.
                let snapshot = self.session.snapshot().await;
                let waiting = Waits::of(snapshot.as_ref()).client_calls;
                if waiting.iter().all(|id| self.asked.iter().any(|asked| asked == id)) {
                    let pending = std::mem::take(&mut self.asked);
                    self.finish(out, json!({"type": "success", "pendingToolCallIds": pending}), None).await;
                }
            }
            SessionEvent::Interrupt(InterruptRaised { interrupt_id, reason, payload, .. }) => {
                // Every interrupt open now, this one whatever the read says.
                let mut open: Vec<(String, String, Option<Value>)> = match self.session.snapshot().await {
                    Some(snapshot) => {
                        snapshot.record.interrupts.into_iter().map(|i| (i.interrupt_id, i.reason, i.payload)).collect()
                    }
                    None => Vec::new(),
                };
                if !open.iter().any(|(id, ..)| *id == interrupt_id) {
                    open.push((interrupt_id, reason, payload));
                }
                let interrupts: Vec<Value> = open
                    .iter()
                    .map(|(id, reason, payload)| {
                        let mut i = json!({"id": id, "reason": reason, "message": reason});
                        if let Some(payload) = payload.as_ref().filter(|p| !p.is_null()) {
                            i["metadata"] = json!({"payload": payload});
                        }
                        i
                    })
                    .collect();
                let result: Vec<Value> = open
                    .iter()
                    .map(|(id, reason, payload)| json!({"interruptId": id, "reason": reason, "payload": payload}))
                    .collect();
                self.finish(
                    out,
                    json!({"type": "interrupt", "interrupts": interrupts}),
                    Some(json!({"interrupts": result})),
                )
                .await;
            }
            SessionEvent::TurnDone(TurnDone { data, .. }) => {
                self.finish(out, json!({"type": "success"}), data.filter(|d| !d.is_null())).await;
            }
            SessionEvent::TurnFailed(TurnFailed { error, code, .. }) => {
                if code == "cancelled" {
                    self.finish(out, json!({"type": "cancelled"}), None).await;
                } else {
                    self.finish_error(out, &code, error).await;
                }
            }
            // AG-UI has no event for it: the run a resume starts is the
            // client's own.
            SessionEvent::TurnStarted(_) | SessionEvent::InterruptResumed(_) => {}
        }
    }

    async fn dropped(&mut self, budget: usize, out: &mut Vec<Value>) {
        let session = sessions::encode_id(&self.session.session).to_string();
        let message = format!(
            "this client fell behind the run by more than {budget} bytes and was dropped; the turn goes on: its \
             events are at GET /v1/sessions/{session}/events and its messages at GET /v1/sessions/{session}"
        );
        self.finish_error(out, "dropped", message).await;
    }

    async fn stopped(&mut self, out: &mut Vec<Value>) {
        let message = "the server stopped following the turn (it is shutting down, or its store failed); the turn is \
                       stored: send this run again (same runId) to follow it";
        self.finish_error(out, "unavailable", message.to_owned()).await;
    }

    fn done(&self) -> bool {
        self.ended
    }
}

/// The streamed messages of a run: token deltas and recorded messages
/// turned into AG-UI's text, reasoning and tool-call events, each opened
/// once and closed once.
#[derive(Debug, Default)]
struct Messages {
    /// The text message streaming now, by its provisional id (the LLM
    /// call's).
    text: Option<String>,
    /// The reasoning message streaming now, by its provisional id.
    reasoning: Option<String>,
    /// Whether text streamed since the last assistant message was recorded
    /// (that message's text then needs no sending again).
    streamed_text: bool,
    /// Tool calls started and not yet ended.
    open_tools: Vec<String>,
    /// Tool calls whose start was sent in this run.
    started_tools: HashSet<String>,
    /// Pieces of tool calls whose name has not come yet, by call id.
    unnamed: HashMap<String, String>,
}

impl Messages {
    /// A token delta of the LLM call (or decision) `call_id`.
    fn delta(&mut self, delta: StreamDelta, call_id: &str, out: &mut Vec<Value>) {
        if let Some(reasoning) = delta.reasoning.filter(|t| !t.is_empty()) {
            let id = format!("{call_id}.reasoning");
            if self.reasoning.as_deref() != Some(id.as_str()) {
                self.close(out);
                out.push(json!({"type": "REASONING_START", "messageId": id}));
                out.push(json!({"type": "REASONING_MESSAGE_START", "messageId": id, "role": "reasoning"}));
                self.reasoning = Some(id.clone());
            }
            out.push(json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": id, "delta": reasoning}));
        }
        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
            if self.text.as_deref() != Some(call_id) {
                self.close(out);
                out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": call_id, "role": "assistant"}));
                self.text = Some(call_id.to_owned());
            }
            self.streamed_text = true;
            out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": call_id, "delta": text}));
        }
        for piece in delta.tool_calls.unwrap_or_default() {
            let args = piece.arguments.unwrap_or_default();
            if !self.started_tools.contains(&piece.id) {
                let Some(name) = piece.name else {
                    // AG-UI opens a call with its name: hold the arguments
                    // until it comes.
                    self.unnamed.entry(piece.id).or_default().push_str(&args);
                    continue;
                };
                self.close_reasoning(out);
                out.push(json!({"type": "TOOL_CALL_START", "toolCallId": piece.id, "toolCallName": name,
                                "parentMessageId": call_id}));
                self.started_tools.insert(piece.id.clone());
                self.open_tools.push(piece.id.clone());
                let held = self.unnamed.remove(&piece.id).unwrap_or_default();
                if !held.is_empty() {
                    out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": piece.id, "delta": held}));
                }
            }
            if !args.is_empty() && self.open_tools.contains(&piece.id) {
                out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": piece.id, "delta": args}));
            }
        }
        if delta.finish_reason.is_some() {
            self.close(out);
        }
    }

    /// A recorded message: assistant text and tool calls not streamed are
    /// sent whole; tool messages are tool results. User and system
    /// messages are the client's own (or reach it in the closing
    /// snapshot).
    fn message(&mut self, message: Message, out: &mut Vec<Value>) {
        match message.role {
            Role::Assistant => {
                self.close(out);
                let text = message.text();
                if !self.streamed_text && !text.is_empty() {
                    out.push(json!({"type": "TEXT_MESSAGE_START", "messageId": message.id, "role": "assistant"}));
                    out.push(json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": message.id, "delta": text}));
                    out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": message.id}));
                }
                self.streamed_text = false;
                for call in message.tool_calls.unwrap_or_default() {
                    if self.started_tools.contains(&call.id) {
                        continue;
                    }
                    out.push(json!({"type": "TOOL_CALL_START", "toolCallId": call.id,
                                    "toolCallName": call.function.name, "parentMessageId": message.id}));
                    if !call.function.arguments.is_empty() {
                        out.push(json!({"type": "TOOL_CALL_ARGS", "toolCallId": call.id,
                                        "delta": call.function.arguments}));
                    }
                    out.push(json!({"type": "TOOL_CALL_END", "toolCallId": call.id}));
                    self.started_tools.insert(call.id);
                }
                self.unnamed.clear();
            }
            Role::Tool => {
                if let Some(call) = &message.tool_call_id {
                    out.push(json!({"type": "TOOL_CALL_RESULT", "messageId": message.id, "toolCallId": call,
                                    "content": message.text(), "role": "tool"}));
                }
            }
            Role::User | Role::System => {}
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Value>) {
        if let Some(id) = self.reasoning.take() {
            out.push(json!({"type": "REASONING_MESSAGE_END", "messageId": id}));
            out.push(json!({"type": "REASONING_END", "messageId": id}));
        }
    }

    /// Closes whatever is open: reasoning, text, tool calls.
    fn close(&mut self, out: &mut Vec<Value>) {
        self.close_reasoning(out);
        if let Some(id) = self.text.take() {
            out.push(json!({"type": "TEXT_MESSAGE_END", "messageId": id}));
        }
        for id in self.open_tools.drain(..) {
            out.push(json!({"type": "TOOL_CALL_END", "toolCallId": id}));
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn input(body: Value) -> RunAgentInput {
        subs_protocol::from_value(body).unwrap()
    }

    #[test]
    fn messages_of_every_role_convert_and_bad_ones_name_their_field() {
        let messages = vec![
            json!({"id": "s", "role": "system", "content": "be brief"}),
            json!({"id": "d", "role": "developer", "content": "no emoji"}),
            json!({"id": "u", "role": "user", "content": [{"type": "text", "text": "look"},
                   {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
                   {"type": "image", "source": {"type": "data", "value": "AAA=", "mimeType": "image/png"}}]}),
            json!({"id": "a", "role": "assistant", "toolCalls": [
                   {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}),
            json!({"id": "t", "role": "tool", "toolCallId": "c1", "content": "{\"sum\":3}"}),
            json!({"id": "r", "role": "reasoning", "content": "hm"}),
        ];
        let (drafts, origins) = conversation(&messages).unwrap();
        assert_eq!(drafts.len(), 5, "reasoning is left out");
        assert_eq!(origins, [0, 1, 2, 3, 4]);
        let (_, origins) = conversation(&[messages[5].clone(), messages[2].clone()]).unwrap();
        assert_eq!(agui_field("messages[0].tool_calls[1].id", &origins), "messages[1].toolCalls[1].id");
        assert_eq!(agui_field("client.tools[2].input", &origins), "tools[2].parameters");
        assert_eq!(agui_field("client.forwarded_props", &origins), "forwardedProps");
        assert_eq!(agui_field("client.context[0]", &origins), "context[0]");
        assert_eq!(agui_field("turn_id", &origins), "runId");
        assert_eq!(drafts[1].role, Role::System);
        let Some(Content::Parts(parts)) = &drafts[2].content else { panic!("{:?}", drafts[2]) };
        assert_eq!(
            parts[2],
            ContentPart::ImageUrl { image_url: subs_protocol::UrlRef { url: "data:image/png;base64,AAA=".into() } }
        );
        assert_eq!(drafts[3].tool_calls.as_ref().unwrap()[0].function.name, "add");
        assert_eq!(drafts[4].tool_call_id.as_deref(), Some("c1"));
        // Every stored message converts back under its id.
        let back = agui_message(&Message {
            id: "u".into(),
            role: Role::User,
            content: drafts[2].content.clone(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        });
        assert_eq!(back["content"][2]["source"], json!({"type": "data", "value": "AAA=", "mimeType": "image/png"}));

        for (message, field) in [
            (json!({"id": "x", "role": "robot", "content": "?"}), "messages[0].role"),
            (json!({"id": "x", "content": "?"}), "messages[0].role"),
            (json!({"role": "user", "content": "?"}), "messages[0].id"),
            (json!({"id": "x", "role": "user", "content": 5}), "messages[0].content"),
            (json!({"id": "x", "role": "tool", "content": "?"}), "messages[0].toolCallId"),
            (
                json!({"id": "x", "role": "user", "content": [{"type": "image", "source": {"type": "file", "value": "f"}}]}),
                "messages[0].content[0].source.type",
            ),
            (json!({"id": "x", "role": "user", "content": [{"type": "sticker"}]}), "messages[0].content[0].source"),
            (json!({"id": "x", "role": "assistant", "toolCalls": [{"id": "c"}]}), "messages[0].toolCalls[0].function"),
        ] {
            let error = conversation(std::slice::from_ref(&message)).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{message}");
            assert_eq!(error.field.as_deref(), Some(field), "{message}: {}", error.message);
        }
    }

    #[test]
    fn a_run_maps_tools_context_and_state_into_the_client_context() {
        let run = input(json!({"threadId": "t", "runId": "r", "messages": [], "state": {"n": 1},
            "tools": [{"name": "confirm", "description": "Asks", "parameters": {"type": "object"}}],
            "context": [{"description": "user", "value": "Ada"}], "forwardedProps": {"x": 1}}));
        let client = client_context(&run);
        let tool = &client.tools.unwrap()[0];
        assert_eq!((tool.name.as_str(), tool.handler), ("confirm", Some(ToolHandler::Client)));
        assert_eq!(client.context.unwrap()[0], json!({"description": "user", "value": "Ada"}));
        assert_eq!(client.state, Some(json!({"n": 1})));
        assert_eq!(client.forwarded_props, Some(json!({"x": 1})));
    }

    #[test]
    fn resumes_come_from_resume_entries_or_a_langgraph_command() {
        let entries = input(json!({"threadId": "t", "runId": "r", "messages": [],
            "resume": [{"interruptId": "i1", "status": "resolved", "payload": {"ok": true}}]}));
        assert_eq!(resumes(&entries, &["i1"]).unwrap()[0].2, Some(json!({"ok": true})));
        assert_eq!(resumes(&entries, &["i2"]).unwrap_err().field.as_deref(), Some("resume[0].interruptId"));
        let command = input(json!({"threadId": "t", "runId": "r", "messages": [],
            "forwardedProps": {"command": {"resume": "yes"}}}));
        assert_eq!(resumes(&command, &["i1"]).unwrap()[0].0, "i1");
        assert_eq!(
            resumes(&command, &["i1", "i2"]).unwrap_err().field.as_deref(),
            Some("forwardedProps.command.interruptId")
        );
        assert_eq!(resumes(&command, &[]).unwrap_err().status, StatusCode::CONFLICT);
        let none = input(json!({"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"other": 1}}));
        assert!(resumes(&none, &["i1"]).unwrap().is_empty());
    }

    #[test]
    fn deltas_and_messages_open_and_close_each_ag_ui_message_once() {
        use subs_protocol::ToolCallDelta;
        let mut m = Messages::default();
        let mut out = Vec::new();
        let piece = |id: &str, name: Option<&str>, args: &str| ToolCallDelta {
            id: id.into(),
            name: name.map(str::to_owned),
            arguments: Some(args.into()),
        };
        m.delta(StreamDelta { reasoning: Some("hm".into()), ..StreamDelta::default() }, "llm_1", &mut out);
        m.delta(StreamDelta::text("Hel"), "llm_1", &mut out);
        m.delta(StreamDelta::text("lo"), "llm_1", &mut out);
        // Arguments before the name are held until it comes.
        m.delta(
            StreamDelta { tool_calls: Some(vec![piece("c1", None, "{\"a\":")]), ..StreamDelta::default() },
            "llm_1",
            &mut out,
        );
        m.delta(
            StreamDelta { tool_calls: Some(vec![piece("c1", Some("add"), "1}")]), ..StreamDelta::default() },
            "llm_1",
            &mut out,
        );
        m.delta(StreamDelta { finish_reason: Some("tool_calls".into()), ..StreamDelta::default() }, "llm_1", &mut out);
        // The recorded reply repeats nothing that streamed.
        m.message(
            Message {
                id: "msg_2".into(),
                role: Role::Assistant,
                content: Some(Content::Text("Hello".into())),
                tool_calls: Some(vec![ToolCall::function("c1", "add", "{\"a\":1}")]),
                tool_call_id: None,
                name: None,
            },
            &mut out,
        );
        m.message(
            Message {
                id: "msg_3".into(),
                role: Role::Tool,
                content: Some(Content::Text("{\"sum\":1}".into())),
                tool_calls: None,
                tool_call_id: Some("c1".into()),
                name: None,
            },
            &mut out,
        );
        // A reply that did not stream comes whole, under its stored id.
        m.message(
            Message {
                id: "msg_4".into(),
                role: Role::Assistant,
                content: Some(Content::Text("add returned 1".into())),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            },
            &mut out,
        );
        let seen: Vec<String> = out
            .iter()
            .map(|e| {
                let id = e.get("messageId").or_else(|| e.get("toolCallId")).and_then(Value::as_str).unwrap_or("");
                format!("{} {id}", e["type"].as_str().unwrap())
            })
            .collect();
        assert_eq!(
            seen,
            [
                "REASONING_START llm_1.reasoning",
                "REASONING_MESSAGE_START llm_1.reasoning",
                "REASONING_MESSAGE_CONTENT llm_1.reasoning",
                "REASONING_MESSAGE_END llm_1.reasoning",
                "REASONING_END llm_1.reasoning",
                "TEXT_MESSAGE_START llm_1",
                "TEXT_MESSAGE_CONTENT llm_1",
                "TEXT_MESSAGE_CONTENT llm_1",
                "TOOL_CALL_START c1",
                "TOOL_CALL_ARGS c1",
                "TOOL_CALL_ARGS c1",
                "TEXT_MESSAGE_END llm_1",
                "TOOL_CALL_END c1",
                "TOOL_CALL_RESULT msg_3",
                "TEXT_MESSAGE_START msg_4",
                "TEXT_MESSAGE_CONTENT msg_4",
                "TEXT_MESSAGE_END msg_4",
            ]
        );
        let args: String =
            out.iter().filter(|e| e["type"] == "TOOL_CALL_ARGS").map(|e| e["delta"].as_str().unwrap()).collect();
        assert_eq!(args, "{\"a\":1}");
        assert_eq!(out[8]["parentMessageId"], "llm_1");
        assert_eq!(out[8]["toolCallName"], "add");
    }
}
