//! The Vercel AI SDK's chat endpoint: `POST /v1/agents/{agent_id}/ai-sdk`
//! takes the request the SDK's `DefaultChatTransport` sends (`id`,
//! `messages` of UI parts, `trigger`, `messageId`, and the transport's
//! extra `body` fields) and answers with its UI message stream (SSE of
//! JSON chunks, header `x-vercel-ai-ui-message-stream: v1`, ending with
//! `data: [DONE]`); `GET /v1/agents/{agent_id}/ai-sdk/{chat_id}/stream`
//! is the transport's reconnect to a running turn. See docs/api.md, "The
//! AI SDK's chat endpoint".
//!
//! This is a translation, nothing more: the chat id is the session id, an
//! input goes through [`crate::sessions::send`] (every check `POST …/input`
//! makes), and the answer is the turn's typed events ([`TurnFrames`]) as
//! chunks. Everything is stored by the engine as for any other client, so
//! a turn can be replayed and followed elsewhere.
//!
//! # Which input a request becomes
//!
//! The stored conversation is the engine's; the request's `messages` only
//! say where the new part goes. The SDK keeps one UI message for a whole
//! assistant response, which is several engine messages (assistant
//! messages with tool calls, tool messages, the final answer), so the
//! history is never sent back to the engine: it is matched to the stored
//! tree and the input is the stored path to the matched place plus the new
//! user messages (`client.messages`), which appends (or forks where the
//! client forked) and never forks spuriously:
//!
//! - a user message is matched by its id (the UI id is the id it is
//!   recorded under);
//! - an assistant message by the `metadata.subs.message_id` this endpoint
//!   streamed to it (the id of the last engine message of that response),
//!   else by position: the engine messages after the user message before
//!   it on the active path.
//!
//! The last message decides what is done: a new user message is a new
//! turn; a recorded one (the SDK's `regenerate`, or the same request sent
//! again) asks for a new answer to it, a branch beside the old one; a
//! recorded id with other content (the SDK edits a message in place) is
//! recorded anew under an id the engine mints, forked where the edited
//! one was. An assistant message last carries the outputs of client tools
//! (`tool.result` / `tool.error` inputs); a body field `resume` answers an
//! interrupt (`interrupt.resume`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use subs_engine::Snapshot;
use subs_engine::store::{ID_RULE, valid_id};
use subs_protocol::{
    AgentTool, CallKind, CallStatus, ClientContext, Content, ContentPart, DraftMessage, Message, Role, SessionEvent,
    WorkerIdentity,
};

use super::{Answer, Found, Media, Plan, Reader, Translator, Waits};
use crate::AppState;
use crate::auth::Caller;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};
use crate::frontends;
use crate::stream::TurnFrames;

/// The header that tells the SDK the body is its UI message stream.
pub const STREAM_HEADER: &str = "x-vercel-ai-ui-message-stream";

/// The most client tools one request may declare (`tools`).
pub const MAX_TOOLS: usize = 128;

/// What the SDK's `DefaultChatTransport` posts, with the extra `body`
/// fields this endpoint reads. Unknown fields are ignored: the transport
/// merges whatever the application puts in its `body`.
#[derive(Debug, Deserialize)]
struct ChatRequest {
    /// The chat's id: the session.
    id: String,
    /// The chat's UI messages, oldest first.
    messages: Vec<UiMessage>,
    /// `submit-message` (default) or `regenerate-message`.
    #[serde(default)]
    trigger: Option<ChatTrigger>,
    /// The message the trigger concerns (the SDK sets it on regenerate
    /// and edits); only checked: the messages themselves say what is
    /// needed.
    #[serde(default, rename = "messageId")]
    message_id: Option<String>,
    /// Client tools for the turn (`AgentTool`s, handler `client` unless
    /// they say otherwise).
    #[serde(default)]
    tools: Option<Vec<AgentTool>>,
    /// Extra context items for the agent (`ClientContext.context`).
    #[serde(default)]
    context: Option<Vec<Value>>,
    /// Answers an interrupt instead of sending messages.
    #[serde(default)]
    resume: Option<Resume>,
    /// The owner of a session this request creates, as on `…/input`.
    #[serde(default)]
    identity: Option<WorkerIdentity>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
enum ChatTrigger {
    #[serde(rename = "submit-message")]
    Submit,
    #[serde(rename = "regenerate-message")]
    Regenerate,
}

/// `resume`: `{interrupt_id, payload?}`, sent as `interrupt.resume`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Resume {
    interrupt_id: String,
    #[serde(default)]
    payload: Option<Value>,
}

/// A `UIMessage`: its parts are read where they matter (a new user
/// message, the client tool outputs of a last assistant message).
#[derive(Debug, Deserialize)]
struct UiMessage {
    id: String,
    role: UiRole,
    #[serde(default)]
    parts: Vec<Value>,
    #[serde(default)]
    metadata: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum UiRole {
    System,
    User,
    Assistant,
}

/// Sends the chat's new messages, client tool outputs or interrupt
/// resume to the agent, and answers with the turn as the AI SDK's UI
/// message stream: `start`, `start-step`, `text-start`/`-delta`/`-end`,
/// `reasoning-…`, `tool-input-start`/`-delta`/`-available`,
/// `tool-output-available`/`-error`, `finish-step`, `data-interrupt`,
/// `message-metadata`, `error`, `finish`, then `[DONE]`. The chat `id` is
/// the session id. The stream ends with the turn, or where it waits for
/// the client: a client tool (`finish` reason `tool-calls`) or an
/// interrupt (a `data-interrupt` part, `finish` reason `other`).
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/ai-sdk",
    params(("agent_id" = String, Path, description = "The agent the chat's session runs")),
    request_body(
        content = Object,
        description = "The AI SDK's chat request: {id, messages, trigger?, messageId?}, and optionally tools (client AgentTools), context, resume ({interrupt_id, payload?}), identity",
        content_type = "application/json"
    ),
    responses(
        (status = 200, description = "The AI SDK's UI message stream (x-vercel-ai-ui-message-stream: v1)", content_type = "text/event-stream"),
        (status = 400, description = "A request that is not the SDK's chat request; the field is named", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "Unknown agent, or a session the caller does not reach", body = ErrorBody),
        (status = 409, description = "History the session does not have; nothing waits for these tool outputs or that interrupt; a session of another agent", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 429, description = "The tenant's limit of sessions or open event streams", body = ErrorBody),
    ),
    tag = "ai-sdk"
)]
pub async fn chat(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Path(agent_id): Path<String>,
    request: Incoming,
) -> Result<Response, ApiError> {
    frontends::check_agent_id(&agent_id)?;
    let limits = state.config.limits(&caller.tenant);
    let mut request: ChatRequest = body::json(request, limits.max_body_bytes).await?;
    check_request(&request)?;
    let session = request.id.clone();
    // A session the caller does not reach is planned for as a new one:
    // sending to it is answered 404.
    let found = frontends::find(&state, &caller, &session, &agent_id, "id", "chat").await?;
    let Planned { plan, message_id, known } = plan(&request, found.snapshot(), &agent_id)?;
    tracing::debug!(tenant = %caller.tenant, session = %session, input = plan.kind(), "ai-sdk chat request");
    let identity = request.identity.take();
    let followed = frontends::follow(&state, &caller, &session, plan, identity, ChatStream::NAME).await?;
    let message_id = message_id.unwrap_or_else(|| followed.turn_id.clone());
    let chat = ChatStream::new(state, caller.tenant, session, followed.turn_id, message_id, known);
    Ok(respond(chat, followed.frames))
}

/// The SDK's reconnect (`DefaultChatTransport.reconnectToStream`, which
/// `useChat({resume: true})` calls on mount): the chat's running turn as
/// a UI message stream replayed from its start, or **204** when the chat
/// has no running turn (or no session the caller reaches). The stream
/// ends as a `POST`'s does, also where the turn waits for the client.
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/ai-sdk/{chat_id}/stream",
    params(
        ("agent_id" = String, Path, description = "The agent the chat's session runs"),
        ("chat_id" = String, Path, description = "The chat's id (the session id), percent-encoded"),
    ),
    responses(
        (status = 200, description = "The running turn from its start, as the AI SDK's UI message stream", content_type = "text/event-stream"),
        (status = 204, description = "No turn is running in the chat"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "The chat is a session of another agent", body = ErrorBody),
        (status = 429, description = "The tenant's limit of open event streams", body = ErrorBody),
    ),
    tag = "ai-sdk"
)]
pub async fn reconnect(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let Path((agent_id, chat_id)) =
        path.map_err(|_| ApiError::invalid("chat_id", "the chat id in the path is not percent-encoded UTF-8"))?;
    frontends::check_agent_id(&agent_id)?;
    frontends::check_id("chat_id", "chat id", &chat_id)?;
    let tenant = caller.tenant.clone();
    // Subscribed before the record is read, so a turn that ends in between
    // is seen ending rather than waited for.
    let live = crate::stream::subscribe(&state.engine, &tenant, &chat_id)?;
    let Found::Session(snapshot) = frontends::find(&state, &caller, &chat_id, &agent_id, "chat_id", "chat").await?
    else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    let Some(turn_id) = snapshot.record.turn.as_ref().map(|t| t.turn_id.clone()) else {
        return Ok(StatusCode::NO_CONTENT.into_response());
    };
    // Model calls already streaming: their deltas would start mid-reply,
    // so their replies come whole, from the recorded message.
    let streaming: HashSet<String> = snapshot
        .calls
        .iter()
        .filter(|c| c.call.kind == CallKind::LlmCall && c.call.status == CallStatus::Pending)
        .map(|c| c.call.id.clone())
        .collect();
    tracing::debug!(tenant = %tenant, session = %chat_id, turn = %turn_id, "ai-sdk reconnect to a running turn");
    let frames = TurnFrames::starting(&state, tenant.clone(), chat_id.clone(), turn_id.clone(), None, false, live);
    let mut chat = ChatStream::new(state, tenant, chat_id, turn_id.clone(), turn_id, HashSet::new());
    chat.joined_mid_call = streaming;
    Ok(respond(chat, frames))
}

/// The checks serde does not make: ids, bounds.
fn check_request(request: &ChatRequest) -> Result<(), ApiError> {
    frontends::check_id("id", "chat id", &request.id)?;
    if let Some(id) = request.message_id.as_deref() {
        frontends::check_id("messageId", "message id", id)?;
    }
    if request.messages.is_empty() && request.resume.is_none() {
        return Err(ApiError::invalid("messages", "a chat request needs at least one message"));
    }
    for (i, message) in request.messages.iter().enumerate() {
        frontends::check_id(format!("messages[{i}].id"), "message id", &message.id)?;
    }
    if let Some(tools) = &request.tools
        && tools.len() > MAX_TOOLS
    {
        return Err(ApiError::invalid("tools", format!("at most {MAX_TOOLS} client tools per request")));
    }
    if let Some(resume) = &request.resume
        && !valid_id(&resume.interrupt_id)
    {
        return Err(ApiError::invalid("resume.interrupt_id", format!("not a valid interrupt id ({ID_RULE})")));
    }
    Ok(())
}

/// What a request does, and the UI message its stream builds.
struct Planned {
    plan: Plan,
    /// The UI message the stream continues (the last assistant message
    /// of a settling request); `None`: a new one, named by the turn's id.
    message_id: Option<String>,
    /// Tool calls the client already has a part for in that message.
    known: HashSet<String>,
}

fn plan(request: &ChatRequest, snapshot: Option<&Snapshot>, agent_id: &str) -> Result<Planned, ApiError> {
    let tree = Tree::new(snapshot);
    let last = request.messages.len().checked_sub(1);
    let last_assistant = last.filter(|&i| request.messages[i].role == UiRole::Assistant);
    if let Some(resume) = &request.resume {
        let snapshot = snapshot.ok_or_else(|| ApiError {
            field: Some("resume".to_owned()),
            ..ApiError::conflict("the chat has no session to resume")
        })?;
        let turn_id = open_turn(snapshot, "resume")?;
        if !snapshot.record.interrupts.iter().any(|i| i.interrupt_id == resume.interrupt_id) {
            return Err(ApiError {
                field: Some("resume.interrupt_id".to_owned()),
                ..ApiError::conflict(format!("no interrupt `{}` waits in this chat", resume.interrupt_id))
            });
        }
        let answer = Answer::resume(Some("resume".to_owned()), resume.interrupt_id.clone(), resume.payload.clone());
        let (message_id, known) = match last_assistant {
            Some(i) => (request.messages[i].id.clone(), tool_parts(&request.messages[i]).map(|p| p.id).collect()),
            None => (turn_id.clone(), HashSet::new()),
        };
        let plan = Plan::Settle { turn_id, answers: vec![answer] };
        return Ok(Planned { plan, message_id: Some(message_id), known });
    }
    if let Some(i) = last_assistant {
        if request.trigger == Some(ChatTrigger::Regenerate) {
            return Err(ApiError::invalid(
                format!("messages[{i}]"),
                "regenerate-message sends the messages up to the user message to answer again",
            ));
        }
        return settle_tools(request, i, snapshot);
    }
    let Some(last) = last else {
        return Err(ApiError::invalid("messages", "a chat request needs at least one message"));
    };
    if request.messages[last].role == UiRole::System {
        return Err(ApiError::invalid(
            format!("messages[{last}].role"),
            "the last message must be the user's (or an assistant message with tool outputs)",
        ));
    }
    // The trailing user messages the session does not have are new; the
    // last one may be recorded already (a regenerate, or the request sent
    // again) or recorded with other content (an edit).
    let mut new = Vec::new();
    let mut start = last + 1;
    while start > 0 && request.messages[start - 1].role != UiRole::Assistant {
        let i = start - 1;
        let message = &request.messages[i];
        if message.role == UiRole::System {
            start = i;
            continue;
        }
        let sent = DraftMessage { content: Some(user_content(message, i)?), ..DraftMessage::user("") };
        match tree.get(&message.id) {
            None => new.push(sent.with_id(&message.id)),
            // The comparison `client.messages` makes of a re-sent message.
            Some(stored) if stored.sent_unchanged(&sent) => {
                if i == last {
                    // A new answer to a recorded message: the view ends
                    // there, which moves the head back to it.
                    return turn(request, agent_id, tree.path(&message.id), Vec::new());
                }
                break;
            }
            // Edited in place (the SDK keeps the id): recorded anew under an
            // id the engine mints, where the edited message was.
            Some(_) if i == last => new.push(sent),
            Some(_) => {
                return Err(ApiError {
                    field: Some(format!("messages[{i}]")),
                    ..ApiError::conflict(format!(
                        "message `{}` is recorded with other content; only the last message may be edited",
                        message.id
                    ))
                });
            }
        }
        start = i;
    }
    new.reverse();
    // `start` is where the new messages begin; what precedes them must be
    // what the session has.
    let anchor = match start.checked_sub(1) {
        None => None,
        Some(i) => Some(tree.resolve(&request.messages, i)?),
    };
    if new.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "the last message must be the user's (or an assistant message with tool outputs)",
        ));
    }
    let path = anchor.map(|id| tree.path(&id)).unwrap_or_default();
    turn(request, agent_id, path, new)
}

fn turn(
    request: &ChatRequest,
    agent_id: &str,
    path: Vec<Message>,
    new: Vec<DraftMessage>,
) -> Result<Planned, ApiError> {
    let mut messages: Vec<DraftMessage> = path.into_iter().map(DraftMessage::from).collect();
    messages.extend(new);
    let client = (request.tools.is_some() || request.context.is_some()).then(|| ClientContext {
        tools: request.tools.clone(),
        context: request.context.clone(),
        ..ClientContext::default()
    });
    Ok(Planned { plan: frontends::start(agent_id, None, messages, client), message_id: None, known: HashSet::new() })
}

/// The open turn's id, or 409 naming `field`.
fn open_turn(snapshot: &Snapshot, field: &str) -> Result<String, ApiError> {
    snapshot.record.turn.as_ref().map(|t| t.turn_id.clone()).ok_or_else(|| ApiError {
        field: Some(field.to_owned()),
        ..ApiError::conflict("no turn of this chat is waiting for the client")
    })
}

/// A last assistant message: the outputs of the client tools the open
/// turn waits for, as `tool.result` / `tool.error` inputs.
fn settle_tools(request: &ChatRequest, i: usize, snapshot: Option<&Snapshot>) -> Result<Planned, ApiError> {
    let conflict = |message: String| ApiError { field: Some(format!("messages[{i}]")), ..ApiError::conflict(message) };
    let snapshot =
        snapshot.ok_or_else(|| conflict("an assistant message is last, and the chat has no session".into()))?;
    let turn_id = open_turn(snapshot, &format!("messages[{i}]"))?;
    let waiting = Waits::of(Some(snapshot)).client_calls;
    let message = &request.messages[i];
    let mut answers = Vec::new();
    let mut known = HashSet::new();
    for part in tool_parts(message) {
        let part = part.check(i)?;
        known.insert(part.id.clone());
        if !waiting.contains(&part.id.as_str()) {
            continue;
        }
        let field = Some(format!("messages[{i}].parts[{}]", part.index));
        answers.push(match part.state {
            "output-available" => Answer::tool_result(field, part.id.clone(), part.output.cloned()),
            "output-error" => Answer::tool_error(
                field,
                part.id.clone(),
                part.error_text.unwrap_or("the client tool failed").to_owned(),
            ),
            // Not answered yet: nothing to send for it.
            _ => continue,
        });
    }
    if answers.is_empty() {
        return Err(conflict(
            "the last message is the assistant's, but none of its tool parts answers a client tool call this chat waits for"
                .to_owned(),
        ));
    }
    Ok(Planned { plan: Plan::Settle { turn_id, answers }, message_id: Some(message.id.clone()), known })
}

/// A tool part of a UI message (`tool-<name>` or `dynamic-tool`).
struct ToolPart<'a> {
    index: usize,
    id: String,
    state: &'a str,
    output: Option<&'a Value>,
    error_text: Option<&'a str>,
    raw: &'a Value,
}

impl<'a> ToolPart<'a> {
    /// The part, with a `toolCallId` and `state` that are strings (400
    /// naming the field otherwise).
    fn check(self, message: usize) -> Result<Self, ApiError> {
        let field = |name: &str| format!("messages[{message}].parts[{}].{name}", self.index);
        if !valid_id(&self.id) {
            return Err(ApiError::invalid(field("toolCallId"), format!("a tool part needs a toolCallId ({ID_RULE})")));
        }
        if self.raw.get("state").and_then(Value::as_str).is_none() {
            return Err(ApiError::invalid(field("state"), "a tool part needs a state"));
        }
        if self.state == "output-error" && self.raw.get("errorText").is_some_and(|e| !e.is_string()) {
            return Err(ApiError::invalid(field("errorText"), "errorText is a string"));
        }
        Ok(self)
    }
}

fn tool_parts(message: &UiMessage) -> impl Iterator<Item = ToolPart<'_>> {
    message.parts.iter().enumerate().filter_map(|(index, part)| {
        let kind = part.get("type")?.as_str()?;
        if !(kind.starts_with("tool-") || kind == "dynamic-tool") {
            return None;
        }
        Some(ToolPart {
            index,
            id: part.get("toolCallId").and_then(Value::as_str).unwrap_or_default().to_owned(),
            state: part.get("state").and_then(Value::as_str).unwrap_or_default(),
            output: part.get("output"),
            error_text: part.get("errorText").and_then(Value::as_str),
            raw: part,
        })
    })
}

/// The content of the user message `messages[i]`: its text parts, and
/// its file parts (images by URL, other files inline as their `data:`
/// URL). Parts without content for the model (`step-start`, `data-…`,
/// sources, reasoning) are left out.
fn user_content(message: &UiMessage, i: usize) -> Result<Content, ApiError> {
    let mut parts = Vec::new();
    for (j, part) in message.parts.iter().enumerate() {
        let field = |name: &str| format!("messages[{i}].parts[{j}]{name}");
        let text_field = |name: &str| {
            part.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid(field(&format!(".{name}")), format!("`{name}` is a string")))
        };
        let kind = part
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| ApiError::invalid(field(".type"), "a part needs a type"))?;
        match kind {
            "text" => parts.push(ContentPart::Text { text: text_field("text")?.to_owned() }),
            "file" => {
                let url = text_field("url")?.to_owned();
                // Images by URL, every other file as a file part (inline
                // as its `data:` URL, as the SDK sends it).
                let media = if text_field("mediaType")?.starts_with("image/") { Media::Image } else { Media::Document };
                let filename = part.get("filename").and_then(Value::as_str).unwrap_or("file");
                let file = frontends::media_part(media, url, filename)
                    .map_err(|why| ApiError::invalid(field(".mediaType"), why))?;
                parts.push(file);
            }
            "step-start" | "reasoning" | "source-url" | "source-document" => {}
            other if other.starts_with("data-") => {}
            other => {
                return Err(ApiError::invalid(
                    field(".type"),
                    format!("a user message's part is text or file, not `{}`", other.escape_debug()),
                ));
            }
        }
    }
    match parts.as_slice() {
        [] => Err(ApiError::invalid(format!("messages[{i}].parts"), "a user message needs a text or file part")),
        [ContentPart::Text { text }] => Ok(Content::Text(text.clone())),
        _ => Ok(Content::Parts(parts)),
    }
}

/// The session's message tree, by id, to match a request's history.
struct Tree<'a> {
    /// Each message and its parent; a repeated id names its later
    /// message, as the engine's tree does.
    by_id: HashMap<&'a str, (&'a Message, Option<&'a str>)>,
    /// The active path.
    active: &'a [Message],
}

impl<'a> Tree<'a> {
    fn new(snapshot: Option<&'a Snapshot>) -> Self {
        let Some(snapshot) = snapshot else { return Tree { by_id: HashMap::new(), active: &[] } };
        let by_id = snapshot
            .message_tree
            .nodes
            .iter()
            .map(|n| (n.message.id.as_str(), (&n.message, n.parent_id.as_deref())))
            .collect();
        Tree { by_id, active: &snapshot.messages }
    }

    fn get(&self, id: &str) -> Option<&'a Message> {
        self.by_id.get(id).map(|(m, _)| *m)
    }

    /// The path from the root to `id`, oldest first.
    fn path(&self, id: &str) -> Vec<Message> {
        let mut path = Vec::new();
        let mut next = Some(id);
        // Bounded by the tree's size, whatever the parents say.
        while let Some(id) = next
            && path.len() <= self.by_id.len()
        {
            let Some((message, parent)) = self.by_id.get(id) else { break };
            path.push((*message).clone());
            next = *parent;
        }
        path.reverse();
        path
    }

    /// The id of the engine message that ends the UI message
    /// `messages[i]`, which the session must have recorded.
    fn resolve(&self, messages: &[UiMessage], i: usize) -> Result<String, ApiError> {
        let message = &messages[i];
        let unknown = |what: String| ApiError {
            field: Some(format!("messages[{i}]")),
            ..ApiError::conflict(format!(
                "{what}: the chat's history must be the one this endpoint streamed (the session has not got it)"
            ))
        };
        match message.role {
            UiRole::User | UiRole::System => match self.get(&message.id) {
                Some(_) => Ok(message.id.clone()),
                None => Err(unknown(format!("message `{}` is not recorded in the chat", message.id))),
            },
            UiRole::Assistant => {
                let named = message
                    .metadata
                    .as_ref()
                    .and_then(|m| m.get("subs"))
                    .and_then(|s| s.get("message_id"))
                    .and_then(Value::as_str);
                if let Some(id) = named.filter(|id| self.get(id).is_some()) {
                    return Ok(id.to_owned());
                }
                // Without the id this endpoint gave it: the engine messages
                // after the user message before it, on the active path.
                let user = messages[..i].iter().rposition(|m| m.role == UiRole::User);
                let at = user.and_then(|u| self.active.iter().position(|m| m.id == messages[u].id));
                let end = at.and_then(|at| {
                    let after = &self.active[at + 1..];
                    let run = after.iter().position(|m| m.role == Role::User).unwrap_or(after.len());
                    run.checked_sub(1).map(|k| after[k].id.clone())
                });
                end.ok_or_else(|| unknown(format!("assistant message `{}` matches nothing recorded", message.id)))
            }
        }
    }
}

/// The stream as SSE, with the SDK's header.
fn respond(chat: ChatStream, frames: TurnFrames) -> Response {
    let mut response = frontends::respond(chat, frames);
    let headers = response.headers_mut();
    headers.insert(HeaderName::from_static(STREAM_HEADER), HeaderValue::from_static("v1"));
    // Proxies that buffer (nginx) would hold the deltas back.
    headers.insert(HeaderName::from_static("x-accel-buffering"), HeaderValue::from_static("no"));
    response
}

/// A text or reasoning part opened by deltas.
struct OpenPart {
    id: String,
    streamed: String,
}

/// A tool call seen in deltas.
#[derive(Default)]
struct PartialCall {
    name: Option<String>,
    arguments: String,
    /// `tool-input-start` was sent.
    started: bool,
}

/// Turns a turn's events into the SDK's chunks.
struct ChatStream {
    /// The chat's session.
    session: Reader,
    turn_id: String,
    /// The UI message the chunks build.
    message_id: String,
    done: bool,
    step_open: bool,
    text: Option<OpenPart>,
    reasoning: Option<OpenPart>,
    partial: HashMap<String, PartialCall>,
    /// Tool calls the client has a part for.
    known: HashSet<String>,
    /// Tool calls of this response not answered by a tool message yet.
    outstanding: HashSet<String>,
    /// Client tool calls (`tool.call` events) seen.
    client_calls: HashSet<String>,
    /// Model calls whose deltas are not sent (a reconnect joined them
    /// mid-reply).
    joined_mid_call: HashSet<String>,
    parts: u64,
}

impl Translator for ChatStream {
    const NAME: &'static str = "ai-sdk";

    async fn start(&mut self) -> Vec<Value> {
        vec![json!({
            "type": "start",
            "messageId": self.message_id,
            "messageMetadata": {"subs": {"session_id": self.session.session, "turn_id": self.turn_id}},
        })]
    }

    async fn event(&mut self, event: SessionEvent, out: &mut Vec<Value>) {
        self.translate(event, out).await;
    }

    async fn dropped(&mut self, budget: usize, out: &mut Vec<Value>) {
        self.close(out);
        out.push(json!({"type": "error", "errorText": format!(
            "this client fell behind the turn by more than {budget} bytes and was dropped; \
             reconnect (GET …/ai-sdk/{{chat_id}}/stream) to read the turn again"
        )}));
        self.done = true;
    }

    async fn stopped(&mut self, out: &mut Vec<Value>) {
        self.close(out);
        out.push(json!({"type": "error", "errorText": "the turn's events ended before the turn did (the server is stopping)"}));
        self.done = true;
    }

    fn done(&self) -> bool {
        self.done
    }

    /// `[DONE]`, after the last chunk.
    fn end(&mut self, last: &[Value]) -> Option<String> {
        let end = last.last().map_or("", |chunk| chunk["type"].as_str().unwrap_or_default());
        let reason = last.last().and_then(|chunk| chunk["finishReason"].as_str()).unwrap_or(end);
        tracing::debug!(session = %self.session.session, turn = %self.turn_id, reason, "ai-sdk stream ends");
        Some("[DONE]".to_owned())
    }
}

impl ChatStream {
    fn new(
        state: Arc<AppState>,
        tenant: String,
        session: String,
        turn_id: String,
        message_id: String,
        known: HashSet<String>,
    ) -> Self {
        ChatStream {
            session: Reader { state, tenant, session },
            turn_id,
            message_id,
            done: false,
            step_open: false,
            text: None,
            reasoning: None,
            partial: HashMap::new(),
            known,
            outstanding: HashSet::new(),
            client_calls: HashSet::new(),
            joined_mid_call: HashSet::new(),
            parts: 0,
        }
    }

    async fn translate(&mut self, event: SessionEvent, out: &mut Vec<Value>) {
        match event {
            // The chat protocol has no part for a resume: the request
            // that resumes is the client's own.
            SessionEvent::TurnStarted(_) | SessionEvent::InterruptResumed(_) => {}
            // The agent's state, as a data part the SDK keeps one of (the
            // latest replaces the one before: same id).
            SessionEvent::State(changed) => {
                self.open_step(out);
                out.push(json!({"type": "data-state", "id": "state", "data": changed.state}));
            }
            SessionEvent::TokenDelta(delta) if self.joined_mid_call.contains(&delta.call_id) => {}
            SessionEvent::TokenDelta(delta) => {
                let delta = delta.delta;
                if let Some(reasoning) = delta.reasoning.filter(|r| !r.is_empty()) {
                    self.open_step(out);
                    let id = match &mut self.reasoning {
                        Some(open) => open.id.clone(),
                        None => {
                            let id = self.part_id("reasoning");
                            out.push(json!({"type": "reasoning-start", "id": id}));
                            self.reasoning = Some(OpenPart { id: id.clone(), streamed: String::new() });
                            id
                        }
                    };
                    out.push(json!({"type": "reasoning-delta", "id": id, "delta": reasoning}));
                }
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    self.open_step(out);
                    self.close_reasoning(out);
                    let id = match &self.text {
                        Some(open) => open.id.clone(),
                        None => {
                            let id = self.part_id("text");
                            out.push(json!({"type": "text-start", "id": id}));
                            self.text = Some(OpenPart { id: id.clone(), streamed: String::new() });
                            id
                        }
                    };
                    if let Some(open) = &mut self.text {
                        open.streamed.push_str(&text);
                    }
                    out.push(json!({"type": "text-delta", "id": id, "delta": text}));
                }
                for piece in delta.tool_calls.unwrap_or_default() {
                    self.open_step(out);
                    let call = self.partial.entry(piece.id.clone()).or_default();
                    if call.name.is_none() {
                        call.name = piece.name;
                    }
                    let arguments = piece.arguments.unwrap_or_default();
                    if call.started {
                        if !arguments.is_empty() {
                            out.push(json!({"type": "tool-input-delta", "toolCallId": piece.id, "inputTextDelta": arguments}));
                        }
                    } else {
                        call.arguments.push_str(&arguments);
                        // The SDK needs the name to start a part: pieces
                        // before it wait.
                        if let Some(name) = &call.name {
                            call.started = true;
                            out.push(json!({"type": "tool-input-start", "toolCallId": piece.id, "toolName": name}));
                            if !call.arguments.is_empty() {
                                out.push(json!({"type": "tool-input-delta", "toolCallId": piece.id, "inputTextDelta": call.arguments}));
                            }
                            self.known.insert(piece.id.clone());
                        }
                    }
                }
            }
            SessionEvent::Message(recorded) => {
                let message = recorded.message;
                match message.role {
                    Role::Assistant => self.assistant(message, out).await,
                    Role::Tool => self.tool(message, out).await,
                    // The turn's own user messages: the client has them.
                    Role::User | Role::System => {}
                }
            }
            SessionEvent::ToolCall(call) => {
                self.client_calls.insert(call.id.clone());
                if !self.known.contains(&call.id) {
                    // A client tool call no model message announced (an
                    // agent's own `tool.call` action): the part starts here.
                    self.open_step(out);
                    out.push(json!({"type": "tool-input-start", "toolCallId": call.id, "toolName": call.name}));
                    out.push(json!({
                        "type": "tool-input-available",
                        "toolCallId": call.id,
                        "toolName": call.name,
                        "input": parse_json(&call.arguments),
                    }));
                    self.known.insert(call.id.clone());
                    self.outstanding.insert(call.id);
                }
                self.end_if_waiting(out).await;
            }
            SessionEvent::Interrupt(interrupt) => {
                self.close(out);
                out.push(json!({
                    "type": "data-interrupt",
                    "id": interrupt.interrupt_id,
                    "data": {"interrupt_id": interrupt.interrupt_id, "reason": interrupt.reason, "payload": interrupt.payload},
                }));
                // A replayed interrupt may have been resumed since: the
                // stream then goes on.
                let waiting = self
                    .snapshot()
                    .await
                    .is_some_and(|s| s.record.interrupts.iter().any(|i| i.interrupt_id == interrupt.interrupt_id));
                if waiting {
                    out.push(json!({"type": "finish", "finishReason": "other"}));
                    self.done = true;
                }
            }
            SessionEvent::TurnDone(done) => {
                self.close(out);
                // The proposed decision for a failed model call ends the
                // turn with `{error, code}` data.
                let error = done.data.as_ref().and_then(|d| d.get("error")).and_then(Value::as_str);
                if let Some(error) = error {
                    out.push(json!({"type": "error", "errorText": error}));
                    out.push(json!({"type": "finish", "finishReason": "error"}));
                } else {
                    out.push(json!({"type": "finish", "finishReason": "stop"}));
                }
                self.done = true;
            }
            SessionEvent::TurnFailed(failed) => {
                self.close(out);
                out.push(json!({"type": "error", "errorText": format!("{} ({})", failed.error, failed.code)}));
                out.push(json!({"type": "finish", "finishReason": "error"}));
                self.done = true;
            }
        }
    }

    /// A recorded assistant message: the end of its text (streamed or
    /// not), its tool calls' inputs, the end of the step.
    async fn assistant(&mut self, message: Message, out: &mut Vec<Value>) {
        self.open_step(out);
        self.close_reasoning(out);
        let text = message.content.as_ref().map(Content::text).unwrap_or_default();
        match self.text.take() {
            Some(open) => {
                // Deltas the engine did not send (over a stream limit) are
                // in the recorded text: what the client lacks is added.
                if let Some(rest) = text.strip_prefix(open.streamed.as_str()).filter(|r| !r.is_empty()) {
                    out.push(json!({"type": "text-delta", "id": open.id, "delta": rest}));
                }
                out.push(json!({"type": "text-end", "id": open.id}));
            }
            None if !text.is_empty() => {
                let id = self.part_id("text");
                out.push(json!({"type": "text-start", "id": id}));
                out.push(json!({"type": "text-delta", "id": id, "delta": text}));
                out.push(json!({"type": "text-end", "id": id}));
            }
            None => {}
        }
        for call in message.tool_calls.iter().flatten() {
            let started = self.partial.remove(&call.id).is_some_and(|p| p.started);
            if !started {
                out.push(json!({"type": "tool-input-start", "toolCallId": call.id, "toolName": call.function.name}));
            }
            out.push(json!({
                "type": "tool-input-available",
                "toolCallId": call.id,
                "toolName": call.function.name,
                "input": parse_json(&call.function.arguments),
            }));
            self.known.insert(call.id.clone());
            self.outstanding.insert(call.id.clone());
        }
        self.close_step(out);
        out.push(self.metadata(&message.id));
        self.end_if_waiting(out).await;
    }

    /// A recorded tool message: its call's output.
    async fn tool(&mut self, message: Message, out: &mut Vec<Value>) {
        let Some(call_id) = message.tool_call_id else { return };
        self.outstanding.remove(&call_id);
        if self.known.contains(&call_id) {
            let text = message.content.as_ref().map(Content::text).unwrap_or_default();
            // The tool message holds the result or the error alike; the
            // call's status (kept until the turn ends) tells them apart.
            let failed = self
                .snapshot()
                .await
                .is_some_and(|s| s.calls.iter().any(|c| c.call.id == call_id && c.call.status == CallStatus::Failed));
            if failed {
                out.push(json!({"type": "tool-output-error", "toolCallId": call_id, "errorText": text}));
            } else {
                out.push(json!({"type": "tool-output-available", "toolCallId": call_id, "output": parse_json(&text)}));
            }
        }
        out.push(self.metadata(&message.id));
        self.end_if_waiting(out).await;
    }

    /// Ends the stream when every tool call still to be answered is the
    /// client's and still waits (a replay may have passed the wait).
    async fn end_if_waiting(&mut self, out: &mut Vec<Value>) {
        if self.done || self.outstanding.is_empty() || !self.outstanding.iter().all(|id| self.client_calls.contains(id))
        {
            return;
        }
        let Some(snapshot) = self.snapshot().await else { return };
        let waiting = self
            .outstanding
            .iter()
            .all(|id| snapshot.calls.iter().any(|c| c.call.id == *id && c.call.status == CallStatus::Pending));
        if waiting {
            self.close(out);
            out.push(json!({"type": "finish", "finishReason": "tool-calls"}));
            self.done = true;
        }
    }

    async fn snapshot(&self) -> Option<Snapshot> {
        self.session.snapshot().await
    }

    /// `message-metadata` naming the last engine message of the response,
    /// which a later request's history is matched by.
    fn metadata(&self, message_id: &str) -> Value {
        json!({
            "type": "message-metadata",
            "messageMetadata": {"subs": {"session_id": self.session.session, "turn_id": self.turn_id, "message_id": message_id}},
        })
    }

    fn part_id(&mut self, kind: &str) -> String {
        self.parts += 1;
        format!("{kind}-{}", self.parts)
    }

    fn open_step(&mut self, out: &mut Vec<Value>) {
        if !self.step_open {
            self.step_open = true;
            out.push(json!({"type": "start-step"}));
        }
    }

    fn close_reasoning(&mut self, out: &mut Vec<Value>) {
        if let Some(open) = self.reasoning.take() {
            out.push(json!({"type": "reasoning-end", "id": open.id}));
        }
    }

    fn close_step(&mut self, out: &mut Vec<Value>) {
        if self.step_open {
            self.step_open = false;
            out.push(json!({"type": "finish-step"}));
        }
    }

    /// Closes whatever is open, before the stream ends or pauses.
    fn close(&mut self, out: &mut Vec<Value>) {
        self.close_reasoning(out);
        if let Some(open) = self.text.take() {
            out.push(json!({"type": "text-end", "id": open.id}));
        }
        self.close_step(out);
    }
}

/// JSON text as JSON, or as the string itself when it is not JSON (a
/// tool's plain-text result, a model's malformed arguments).
fn parse_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}
