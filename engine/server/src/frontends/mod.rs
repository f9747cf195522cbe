//! The chat frontends: AG-UI ([`agui`]) and the Vercel AI SDK
//! ([`aisdk`]), and the pipeline they share.
//!
//! A frontend's request goes the same way whatever its protocol:
//!
//! 1. **Parse** (the adapter): the body as the protocol has it, with the
//!    protocol's own leniency, errors naming the protocol's fields.
//! 2. **Find** the session the request names (`find`: the thread, the
//!    chat), as the caller reaches it and running the route's agent.
//! 3. **Plan** (the adapter, over `Waits`, what the session waits for):
//!    start a turn (`Plan::Start`), settle what the open turn waits for
//!    (`Plan::Settle`: client tool results and errors, interrupt
//!    resumes), or cancel it (`Plan::Cancel`).
//! 4. **Follow** (`follow`): the plan's inputs go through
//!    [`sessions::send`], with every check `POST …/input` makes, and the
//!    answer is the turn's typed events ([`TurnFrames`]).
//! 5. **Respond** (`respond`): the adapter's `Translator` turns each
//!    event into its protocol's messages, sent as server-sent events, one
//!    JSON object per `data:` line, pulled from the turn only as the
//!    connection takes them.
//!
//! Everything a request does is stored by the session as any input's turn
//! is, so a turn can be read again, replayed and followed elsewhere.

pub mod agui;
pub mod aisdk;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt as _};
use serde_json::Value;
use subs_engine::Snapshot;
use subs_engine::store::{ID_RULE, NAME_RULE, valid_id, valid_name};
use subs_protocol::client::{ClientMessages, InterruptResume, ToolError, ToolResult};
use subs_protocol::{
    AudioData, ClientContext, ClientInput, ContentPart, DraftMessage, FileData, SessionEvent, UrlRef, WorkerIdentity,
};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::stream::{Dropped, TurnFrames};
use crate::{AppState, sessions};

/// How often an idle stream sends a comment, so proxies keep it open
/// (frontends read only `data:` lines and skip comments).
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// 400 naming `agent_id` unless it is a valid agent id.
pub(crate) fn check_agent_id(agent_id: &str) -> Result<(), ApiError> {
    if valid_name(agent_id) {
        return Ok(());
    }
    Err(ApiError::invalid("agent_id", format!("`{}` is not a valid agent id ({NAME_RULE})", agent_id.escape_debug())))
}

/// 400 naming `field` unless `id` is a valid id; `what` is what the
/// protocol calls it (`chat id`, `message id`).
pub(crate) fn check_id(field: impl Into<String>, what: &str, id: &str) -> Result<(), ApiError> {
    if valid_id(id) {
        return Ok(());
    }
    Err(ApiError::invalid(field, format!("`{}` is not a valid {what} ({ID_RULE})", id.escape_debug())))
}

/// The session a request names, read before its plan is made.
pub(crate) enum Found {
    /// No session has that id: the request may start one.
    New,
    /// A session the caller does not reach (another end user's). AG-UI
    /// answers 404; the AI SDK plans as for a new one, and sending to it
    /// is answered 404.
    Unreachable,
    /// The caller's session, running the route's agent.
    Session(Box<Snapshot>),
}

impl Found {
    /// The session, if the caller reaches it.
    pub(crate) fn snapshot(&self) -> Option<&Snapshot> {
        match self {
            Found::Session(snapshot) => Some(snapshot),
            Found::New | Found::Unreachable => None,
        }
    }
}

/// Reads the session `id`. A session of another agent than `agent_id` is
/// 409 naming `field`, the request's word for it (`thread`, `chat`).
pub(crate) async fn find(
    state: &AppState,
    caller: &Caller,
    id: &str,
    agent_id: &str,
    field: &str,
    noun: &str,
) -> Result<Found, ApiError> {
    let Some(snapshot) = state.engine.reads().snapshot(&caller.tenant, id).await? else { return Ok(Found::New) };
    if !caller.may_reach(&snapshot.record) {
        return Ok(Found::Unreachable);
    }
    if snapshot.record.agent_id != agent_id {
        return Err(ApiError {
            field: Some(field.to_owned()),
            ..ApiError::conflict(format!(
                "{noun} `{id}` is a session of agent `{}`, not `{agent_id}`",
                snapshot.record.agent_id
            ))
        });
    }
    Ok(Found::Session(Box::new(snapshot)))
}

/// What a session waits for from its client, which a request may answer.
pub(crate) struct Waits<'a> {
    /// The open turn's id.
    pub turn: Option<&'a str>,
    /// The open interrupts' ids.
    pub interrupts: Vec<&'a str>,
    /// The client tool calls whose results the turn waits for.
    pub client_calls: Vec<&'a str>,
    /// The last event stored: what the turn does next comes after it.
    pub last_event: Option<u64>,
}

impl<'a> Waits<'a> {
    /// What `snapshot` waits for; nothing without a session.
    pub(crate) fn of(snapshot: Option<&'a Snapshot>) -> Self {
        let Some(snapshot) = snapshot else {
            return Waits { turn: None, interrupts: Vec::new(), client_calls: Vec::new(), last_event: None };
        };
        Waits {
            turn: snapshot.record.turn.as_ref().map(|t| t.turn_id.as_str()),
            interrupts: snapshot.record.interrupts.iter().map(|i| i.interrupt_id.as_str()).collect(),
            client_calls: snapshot.waiting_client_calls().map(|c| c.call.id.as_str()).collect(),
            last_event: snapshot.record.next.event.checked_sub(1),
        }
    }
}

/// What a request does with its session.
pub(crate) enum Plan {
    /// Start a turn with a `client.messages` input (or follow the one
    /// its `turn_id` already started).
    Start(Box<ClientInput>),
    /// Settle what the open turn `turn_id` waits for, and follow the rest
    /// of it.
    Settle { turn_id: String, answers: Vec<Answer> },
    /// Cancel the open turn `turn_id` (an interrupt the client declined),
    /// and follow it to its end: what follows the event `after`.
    Cancel { turn_id: String, after: Option<u64> },
}

impl Plan {
    /// What the plan does, for logs.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Plan::Start(_) => "start",
            Plan::Settle { .. } => "settle",
            Plan::Cancel { .. } => "cancel",
        }
    }
}

/// One settling input, and the request's field it came from: an error the
/// engine answers without naming a field of its own names that one.
pub(crate) struct Answer {
    /// The request's field the input came from.
    pub field: Option<String>,
    /// The `tool.result`, `tool.error` or `interrupt.resume` input.
    pub input: ClientInput,
}

impl Answer {
    /// The result of the client tool call `id`.
    pub(crate) fn tool_result(field: Option<String>, id: String, result: Option<Value>) -> Self {
        Answer { field, input: ClientInput::ToolResult(ToolResult { id, attempt: None, result }) }
    }

    /// The failure of the client tool call `id` (not retried: the client
    /// ran it and it failed).
    pub(crate) fn tool_error(field: Option<String>, id: String, error: String) -> Self {
        Answer { field, input: ClientInput::ToolError(ToolError { id, error, retryable: false, attempt: None }) }
    }

    /// The client's answer to the interrupt `interrupt_id`.
    pub(crate) fn resume(field: Option<String>, interrupt_id: String, payload: Option<Value>) -> Self {
        Answer { field, input: ClientInput::InterruptResume(InterruptResume { interrupt_id, payload }) }
    }

    /// The client tool call this answers, if it answers one.
    pub(crate) fn call_id(&self) -> Option<&str> {
        match &self.input {
            ClientInput::ToolResult(r) => Some(&r.id),
            ClientInput::ToolError(e) => Some(&e.id),
            _ => None,
        }
    }
}

/// The `client.messages` input that starts a turn of `agent_id` on
/// `messages`, the conversation as the client has it.
pub(crate) fn start(
    agent_id: &str,
    turn_id: Option<String>,
    messages: Vec<DraftMessage>,
    client: Option<ClientContext>,
) -> Plan {
    Plan::Start(Box::new(ClientInput::ClientMessages(ClientMessages {
        agent_id: agent_id.to_owned(),
        turn_id,
        messages,
        stream: None,
        client,
    })))
}

/// A plan carried out: the turn the request follows, and its events.
pub(crate) struct Followed {
    /// The turn's id.
    pub turn_id: String,
    /// The turn's events: from its start for a plan that starts it, else
    /// those after the plan's first input.
    pub frames: TurnFrames,
}

/// Sends what `plan` says to the session `session` as `caller`, and
/// returns the turn to follow. The session's events are subscribed to
/// before the first input is stored, so nothing the input causes is
/// missed. `identity` is the owner of a session a `Start` creates.
pub(crate) async fn follow(
    state: &AppState,
    caller: &Caller,
    session: &str,
    plan: Plan,
    identity: Option<WorkerIdentity>,
    frontend: &'static str,
) -> Result<Followed, ApiError> {
    let tenant = &caller.tenant;
    let followed = match plan {
        Plan::Start(input) => {
            let sent = sessions::send(state, caller, session, *input, identity, true).await?;
            let (Some(turn_id), Some(live)) = (sent.accepted.turn_id, sent.live) else {
                return Err(ApiError::internal(&"a client.messages input was accepted without a turn"));
            };
            tracing::info!(%tenant, %session, turn = %turn_id, existing = sent.accepted.existing, frontend, "a frontend request starts a turn");
            let frames = TurnFrames::starting(
                state,
                tenant.clone(),
                session.to_owned(),
                turn_id.clone(),
                sent.after,
                sent.caught_up,
                live,
            );
            Followed { turn_id, frames }
        }
        Plan::Settle { turn_id, answers } => {
            let mut first = None;
            for Answer { field, input } in answers {
                let sent = sessions::send(state, caller, session, input, None, first.is_none())
                    .await
                    .map_err(|e| ApiError { field: e.field.clone().or(field), ..e })?;
                // The rest settle the same turn; the subscription taken
                // before the first already sees what they cause.
                if first.is_none() {
                    let live = sent.live.ok_or_else(|| ApiError::internal(&"a subscription was asked for"))?;
                    first = Some((live, sent.after));
                }
            }
            let (live, after) = first.ok_or_else(|| ApiError::internal(&"a settling request with nothing to send"))?;
            tracing::info!(%tenant, %session, turn = %turn_id, frontend, "a frontend request continues a waiting turn");
            let frames =
                TurnFrames::continuing(state, tenant.clone(), session.to_owned(), turn_id.clone(), after, live);
            Followed { turn_id, frames }
        }
        Plan::Cancel { turn_id, after } => {
            let live = crate::stream::subscribe(&state.engine, tenant, session)?;
            state.engine.sessions().cancel(tenant, session).await?;
            tracing::info!(%tenant, %session, turn = %turn_id, frontend, "a frontend request cancels an interrupted turn");
            let frames =
                TurnFrames::continuing(state, tenant.clone(), session.to_owned(), turn_id.clone(), after, live);
            Followed { turn_id, frames }
        }
    };
    Ok(followed)
}

/// The session a stream follows, as its translator reads it again.
pub(crate) struct Reader {
    /// The server, whose engine reads the session.
    pub state: Arc<AppState>,
    /// The session's tenant.
    pub tenant: String,
    /// The session's id.
    pub session: String,
}

impl Reader {
    /// The session as it is now; `None` when it is gone or could not be
    /// read (logged: the stream goes on with what it has).
    pub(crate) async fn snapshot(&self) -> Option<Snapshot> {
        match self.state.engine.reads().snapshot(&self.tenant, &self.session).await {
            Ok(snapshot) => snapshot,
            Err(error) => {
                tracing::warn!(%error, tenant = %self.tenant, session = %self.session, "a frontend stream cannot read its session");
                None
            }
        }
    }
}

/// A protocol's translation of a turn's events into its messages.
pub(crate) trait Translator: Send + 'static {
    /// The protocol's name, for logs.
    const NAME: &'static str;

    /// What the stream opens with, sent at once: the client sees the
    /// response begin before the turn's first event.
    fn start(&mut self) -> impl Future<Output = Vec<Value>> + Send;

    /// The messages for one event of the turn, added to `out`.
    fn event(&mut self, event: SessionEvent, out: &mut Vec<Value>) -> impl Future<Output = ()> + Send;

    /// The client fell behind the turn by more than `budget` bytes and
    /// was dropped: the last messages, which say so.
    fn dropped(&mut self, budget: usize, out: &mut Vec<Value>) -> impl Future<Output = ()> + Send;

    /// The turn's events ended before the turn did (the server stops, or
    /// its store failed): the last messages, which say so.
    fn stopped(&mut self, out: &mut Vec<Value>) -> impl Future<Output = ()> + Send;

    /// Whether the last message was sent.
    fn done(&self) -> bool;

    /// What the stream sends after its last message, if anything;
    /// `last` is the last batch of messages.
    fn end(&mut self, last: &[Value]) -> Option<String> {
        let _ = last;
        None
    }
}

/// A translator over its turn's events.
struct Pipeline<T> {
    translator: T,
    frames: TurnFrames,
    started: bool,
    ended: bool,
}

impl<T: Translator> Pipeline<T> {
    /// The next `data:` lines; `None` after the last.
    async fn next_batch(&mut self) -> Option<Vec<String>> {
        if self.ended {
            return None;
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out = self.translator.start().await;
        }
        while out.is_empty() && !self.translator.done() {
            match self.frames.next().await {
                Some(Ok(frame)) => match frame.parse() {
                    Ok(event) => self.translator.event(event, &mut out).await,
                    // A stored event of a newer engine: nothing this
                    // stream can say about it.
                    Err(error) => {
                        tracing::debug!(%error, event = %frame.name, frontend = T::NAME, "a frontend stream skips an event it does not know");
                    }
                },
                Some(Err(Dropped { budget })) => {
                    self.translator.dropped(budget, &mut out).await;
                    self.ended = true;
                    break;
                }
                None => {
                    self.translator.stopped(&mut out).await;
                    self.ended = true;
                    break;
                }
            }
        }
        let mut batch: Vec<String> = out.iter().map(Value::to_string).collect();
        if self.ended || self.translator.done() {
            self.ended = true;
            batch.extend(self.translator.end(&out));
        }
        Some(batch)
    }
}

/// The translated turn as server-sent events, one message per `data:`
/// line, pulled from the turn only as the connection takes them.
pub(crate) fn respond(translator: impl Translator, frames: TurnFrames) -> Response {
    let pipeline = Pipeline { translator, frames, started: false, ended: false };
    let events = stream::unfold(pipeline, |mut p| async move { p.next_batch().await.map(|batch| (batch, p)) })
        .flat_map(|batch| {
            stream::iter(batch.into_iter().map(|data| Ok::<_, Infallible>(SseEvent::default().data(data))))
        });
    let events: BoxStream<'static, Result<SseEvent, Infallible>> = Box::pin(events);
    (StatusCode::OK, Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))).into_response()
}

/// What kind of media a content part holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Media {
    Image,
    Video,
    Audio,
    /// Any other file.
    Document,
}

/// A media part as subs' (OpenAI's) content part: `url` is where the bytes
/// are, or the bytes themselves as a `data:` URL (see [`data_url`]).
/// Audio is taken inline only: the error says so.
pub(crate) fn media_part(media: Media, url: String, filename: &str) -> Result<ContentPart, &'static str> {
    Ok(match media {
        Media::Image => ContentPart::ImageUrl { image_url: UrlRef { url } },
        Media::Video => ContentPart::VideoUrl { video_url: UrlRef { url } },
        Media::Document => ContentPart::File { file: FileData { filename: filename.to_owned(), file_data: url } },
        Media::Audio => {
            let (mime, data) = split_data_url(&url).ok_or("audio is taken inline only (`data`)")?;
            let format = mime.strip_prefix("audio/").unwrap_or("wav");
            let format = if format == "mpeg" { "mp3" } else { format };
            ContentPart::InputAudio { input_audio: AudioData { data: data.to_owned(), format: format.to_owned() } }
        }
    })
}

/// Inline bytes as a `data:` URL, which every content part but audio
/// takes.
pub(crate) fn data_url(mime: &str, base64: &str) -> String {
    format!("data:{mime};base64,{base64}")
}

/// A `data:` URL's media type and base64 bytes; `None` for any other URL.
pub(crate) fn split_data_url(url: &str) -> Option<(&str, &str)> {
    url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_parts_keep_urls_and_take_audio_inline_only() {
        let url = data_url("audio/mpeg", "AAA=");
        assert_eq!(split_data_url(&url), Some(("audio/mpeg", "AAA=")));
        assert_eq!(split_data_url("https://x/y.png"), None);
        assert_eq!(
            media_part(Media::Audio, url, "f"),
            Ok(ContentPart::InputAudio { input_audio: AudioData { data: "AAA=".into(), format: "mp3".into() } })
        );
        assert!(media_part(Media::Audio, "https://x/a.wav".into(), "f").is_err());
        assert_eq!(
            media_part(Media::Document, "https://x/a.pdf".into(), "a.pdf"),
            Ok(ContentPart::File { file: FileData { filename: "a.pdf".into(), file_data: "https://x/a.pdf".into() } })
        );
    }
}
