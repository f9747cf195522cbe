//! Sessions: posting input, reading snapshots, listing, cancelling.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::Serialize;
use serde_json::Value;
use subs_engine::events::Subscription;
use subs_engine::store::{ID_RULE, OpenInterrupt, SessionRecord, SessionStatus, valid_id};
use subs_engine::{Accepted, Sender};
use subs_protocol::{
    AgentConfig, Call, ClientInput, FullTree, PostedInput, RequestTree, SharedMessage, WorkerIdentity,
};
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::body::{self, Incoming};
use crate::error::{ApiError, ErrorBody};
use crate::{AppState, reads, stream};

/// What URLs escape in an id: everything but RFC 3986's unreserved
/// characters (`A-Z a-z 0-9 - . _ ~`), so an encoded id is one path
/// segment and one query value (`/`, `%`, `+`, `&`, `=`, `#`, `?` and
/// spaces all escaped).
const ID_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `id` percent-encoded (UTF-8), to be put in a URL as one path segment or
/// query value: the API decodes it back to the same string. Session,
/// message and call ids may hold `/`, spaces or any other character.
///
/// ```
/// assert_eq!(subs_server::sessions::encode_id("chat/ü 1:x").to_string(), "chat%2F%C3%BC%201%3Ax");
/// assert_eq!(subs_server::sessions::encode_id("s-1.a_b~").to_string(), "s-1.a_b~");
/// ```
pub fn encode_id(id: &str) -> impl std::fmt::Display + '_ {
    utf8_percent_encode(id, ID_ESCAPED)
}

/// The session id of a `/v1/sessions/{session_id}…` path, percent-decoded
/// (`%2F` is a `/` of the id, not a path separator) and checked against the
/// id rule. A path whose id does not decode to UTF-8, or breaks the rule,
/// is answered 400 `invalid_input` naming `session_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPath(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, state: &S) -> Result<Self, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state).await.map_err(|_| {
            ApiError::invalid(
                "session_id",
                "the session id in the path is not percent-encoded UTF-8 (encode every byte outside A-Z a-z 0-9 - . _ ~)",
            )
        })?;
        if !valid_id(&id) {
            return Err(ApiError::invalid(
                "session_id",
                format!("`{}` is not a valid session id ({ID_RULE})", id.escape_debug()),
            ));
        }
        Ok(Self(id))
    }
}

/// What `POST …/input` answers when it does not stream.
#[derive(Debug, Serialize, ToSchema)]
pub struct InputAccepted {
    /// The session.
    pub session_id: String,
    /// The turn the input started, joined or queued (absent for inputs that
    /// settle something: `interrupt.resume`, `tool.result`, `tool.error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// True when the `turn_id` was already known: nothing new was done.
    pub existing: bool,
}

/// A session as clients see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionView {
    /// The session.
    pub session_id: String,
    /// The agent it runs.
    pub agent_id: String,
    /// `idle`, `running` or `waiting`.
    #[schema(value_type = String)]
    pub status: SessionStatus,
    /// The open turn.
    pub turn_id: Option<String>,
    /// The agent's config (`AgentConfig`), `null` until set.
    #[schema(value_type = Option<Object>)]
    pub agent: Option<AgentConfig>,
    /// The agent's state.
    #[schema(value_type = Object)]
    pub state: Value,
    /// The active path (`Message[]`).
    #[schema(value_type = Vec<Object>)]
    pub messages: Vec<SharedMessage>,
    /// Every message (`MessageTree`).
    #[schema(value_type = Object)]
    pub message_tree: SharedTree,
    /// The open turn's calls (`Call[]`): queued, in flight, and settled
    /// ones (`completed` / `failed`) until the turn ends.
    #[schema(value_type = Vec<Object>)]
    pub calls: Vec<Call>,
    /// Interrupts waiting for `interrupt.resume`.
    #[schema(value_type = Vec<Object>)]
    pub interrupts: Vec<OpenInterrupt>,
    /// Token usage of the session's LLM calls, summed field by field.
    #[schema(value_type = Object)]
    pub usage: Value,
    /// What the session's LLM calls cost, in dollars (decimal string);
    /// `null` when no call had a known price.
    pub cost: Option<String>,
    /// The most the session's LLM calls may cost, in dollars; `null`: no
    /// limit of its own (the tenant's budget still applies).
    pub budget: Option<String>,
    /// Ancestor session ids, nearest last.
    pub ancestry: Vec<String>,
    /// The session's owner as workers see it.
    #[schema(value_type = Object)]
    pub identity: WorkerIdentity,
    /// The agent version (`sha256:<hex>`) that made the latest applied
    /// decision; omitted before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// The sequence number of the session's latest stored event (what
    /// `GET …/events` replays up to); omitted before the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_id: Option<u64>,
}

/// A session's tree whose path nodes refer to the path's messages, written
/// out as the whole `MessageTree`: a snapshot holds each message once.
#[derive(Debug)]
pub struct SharedTree {
    tree: RequestTree,
    path: Vec<SharedMessage>,
}

impl Serialize for SharedTree {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        FullTree::new(&self.tree, &self.path).serialize(serializer)
    }
}

/// A session in a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// The agent it runs.
    pub agent_id: String,
    /// `idle`, `running` or `waiting`.
    #[schema(value_type = String)]
    pub status: SessionStatus,
    /// Ancestor session ids (non-empty for sub-agent sessions).
    pub ancestry: Vec<String>,
    /// The session's owner (`WorkerIdentity`; `{}` when none was given).
    #[schema(value_type = Object)]
    pub identity: WorkerIdentity,
    /// Creation time (Unix ms).
    pub created_ms: u64,
    /// Last change (Unix ms).
    pub updated_ms: u64,
    /// Turns started or queued (counted since the engine kept the count:
    /// sessions stored before count from 0).
    pub turns: u64,
    /// Token usage of the session's LLM calls, summed field by field.
    #[schema(value_type = Object)]
    pub usage: Value,
    /// What the session's LLM calls cost, in dollars; `null` when no call
    /// had a known price.
    pub cost: Option<String>,
}

impl From<&SessionRecord> for SessionSummary {
    fn from(r: &SessionRecord) -> Self {
        Self {
            session_id: r.key.session.clone(),
            agent_id: r.agent_id.clone(),
            status: r.status,
            ancestry: r.ancestry.clone(),
            identity: r.identity.clone(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            turns: r.next.turn,
            usage: r.usage.clone(),
            cost: r.cost.clone(),
        }
    }
}

/// The answer to a cancel.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cancelled {
    /// Whether a turn was open (and is now ended).
    pub cancelled: bool,
}

/// Sends input to a session: a `ClientInput` (see docs/protocol.md).
/// `client.message`, `client.messages` and `client.action` create the
/// session on first use, owned by their `identity` if they carry one (or
/// by an end-user token's identity, whatever the body says); with
/// `"stream": true` the answer is the turn's event stream instead of
/// `202`. A session's identity never changes: an input naming another one
/// for an existing session is refused with 409.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/input",
    params(("session_id" = String, Path, description = "The session: 1 to 256 bytes of UTF-8 without control characters, percent-encoded")),
    request_body(content = Object, description = "A ClientInput", content_type = "application/json"),
    responses(
        (status = 202, description = "Stored; the turn runs", body = InputAccepted),
        (status = 200, description = "The turn's events (with \"stream\": true), each a StreamEvent", content_type = "text/event-stream"),
        (status = 400, description = "Malformed input", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "Unknown session or agent", body = ErrorBody),
        (status = 409, description = "Nothing waits with that id; another agent's session; another identity than the session's", body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 429, description = "The tenant's session limit; with \"stream\": true, its limit of open event streams", body = ErrorBody),
    ),
    tag = "sessions"
)]
pub async fn input(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    SessionPath(session_id): SessionPath,
    body: Incoming,
) -> Result<Response, ApiError> {
    let limits = state.config.limits(&caller.tenant);
    let PostedInput { input, identity } = body::json(body, limits.max_body_bytes).await?;
    let wants_stream = match &input {
        ClientInput::ClientMessage(m) => m.stream == Some(true),
        ClientInput::ClientMessages(m) => m.stream == Some(true),
        _ => false,
    };
    let sent = send(&state, &caller, &session_id, input, identity, wants_stream).await?;
    match (sent.accepted.turn_id, sent.live) {
        (Some(turn_id), Some(live)) => {
            Ok(stream::turn(&state, caller.tenant, session_id, turn_id, sent.after, sent.caught_up, live)
                .into_response())
        }
        (turn_id, _) => {
            Ok((StatusCode::ACCEPTED, Json(InputAccepted { session_id, turn_id, existing: sent.accepted.existing }))
                .into_response())
        }
    }
}

/// What [`send`] did with an input.
pub struct Sent {
    /// What the session's actor answered.
    pub accepted: Accepted,
    /// A subscription to the session's events, taken before the input was
    /// stored, when one was asked for.
    pub live: Option<Subscription>,
    /// The last event stored before the input, if the session existed: the
    /// turn the input started is among the events after it. `None` when
    /// every stored event may belong to it (a new session, or a turn id
    /// already known).
    pub after: Option<u64>,
    /// Whether every event of what the input started is published after
    /// `live` was taken (the input was not one already taken): a stream of
    /// them need not read the store first.
    pub caught_up: bool,
}

/// Sends `input` to a session as `POST …/input` does, with every check it
/// makes: the caller reaches the session, an end user's sessions are its
/// token's identity's (whatever `identity` says), a new session's agent
/// exists. With `subscribe`, the session's events are subscribed to before
/// the input is stored (a tenant with all its streams open is refused
/// without its input being accepted, so retrying cannot send it twice).
/// The protocol adapters (AG-UI, AI SDK) send their inputs through here.
pub async fn send(
    state: &AppState,
    caller: &Caller,
    session_id: &str,
    input: ClientInput,
    identity: Option<WorkerIdentity>,
    subscribe: bool,
) -> Result<Sent, ApiError> {
    let tenant = &caller.tenant;
    if caller.user.as_ref().is_some_and(|user| !user.may_name(session_id)) {
        return Err(ApiError::no_session(session_id));
    }
    let existing = state.engine.reads().session_head(tenant, session_id).await?;
    if let Some(existing) = existing.as_ref().filter(|r| !caller.may_reach(*r)) {
        return Err(ApiError::no_session(&existing.key.session));
    }
    // An end user's sessions are its token's identity's, whatever the body
    // says; a tenant's, what its input names (checked, and fixed once
    // the session exists).
    let sender = match (&caller.user, identity) {
        (Some(user), _) => Sender::Owner(user.identity.clone()),
        (None, Some(identity)) => {
            crate::identity::check(&identity, "identity")?;
            Sender::Tenant { key: caller.key.clone(), identity: Some(identity) }
        }
        (None, None) => Sender::Tenant { key: caller.key.clone(), identity: None },
    };
    // The engine's own rule, answered here with the field it concerns;
    // the session's actor applies it again as it accepts the input.
    if let Some(existing) = &existing
        && let Some(refused) = sender.refuse(&existing.key.session, &existing.identity)
    {
        return Err(ApiError { field: Some("identity".to_owned()), ..ApiError::from(refused) });
    }

    let agent_id = match &input {
        ClientInput::ClientMessage(m) => Some(&m.agent_id),
        ClientInput::ClientMessages(m) => Some(&m.agent_id),
        ClientInput::ClientAction(a) => Some(&a.agent_id),
        _ => None,
    };
    // A new session's agent must exist; its tenant's session limit is the
    // engine's to check (spawned sessions are held to it too).
    if let (Some(agent_id), None) = (agent_id, &existing)
        && !state.agents.exists(tenant, agent_id).await?
    {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            code: "unknown_agent",
            message: format!("no agent `{agent_id}` is registered"),
            field: Some("agent_id".to_owned()),
        });
    }

    // Events after this one belong to what the input starts.
    let after = existing.as_ref().and_then(|r| r.next.event.checked_sub(1));
    let live = if subscribe { Some(stream::subscribe(&state.engine, tenant, session_id)?) } else { None };
    // The session's actor checks the owner again as it accepts the input:
    // the checks above read the session before a concurrent input may
    // have created it.
    let accepted =
        state.engine.sessions().input_traced(tenant, session_id, input, sender, caller.trace.clone()).await?;
    let (after, caught_up) = if accepted.existing { (None, false) } else { (after, true) };
    Ok(Sent { accepted, live, after, caught_up })
}

/// A session's snapshot.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}",
    params(("session_id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    tag = "sessions"
)]
pub async fn snapshot(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    SessionPath(session_id): SessionPath,
) -> Result<Response, ApiError> {
    let snapshot = state
        .engine
        .reads()
        .shared_snapshot(&caller.tenant, &session_id)
        .await?
        .filter(|snapshot| caller.may_reach(&snapshot.record))
        .ok_or_else(|| ApiError::no_session(&session_id))?;
    let subs_engine::SharedSnapshot { record: r, messages, message_tree, calls, read } = snapshot;
    let view = SessionView {
        session_id: r.key.session,
        agent_id: r.agent_id,
        status: r.status,
        turn_id: r.turn.map(|t| t.turn_id),
        agent: r.agent.map(std::sync::Arc::unwrap_or_clone),
        state: r.state,
        message_tree: SharedTree { tree: message_tree, path: messages.clone() },
        messages,
        calls: calls.into_iter().map(|c| c.call).collect(),
        interrupts: r.interrupts,
        usage: r.usage,
        cost: r.cost,
        budget: r.budget,
        ancestry: r.ancestry,
        identity: r.identity,
        agent_version: r.agent_version,
        last_event_id: r.next.event.checked_sub(1),
    };
    // The session's JSON (each message twice: the path and the tree) is
    // never held whole: it goes out as it is written, and the tenant's
    // read lasts until it has.
    Ok(json_streamed(view, read))
}

/// Bytes of JSON a streamed answer hands the connection at a time.
const JSON_CHUNK: usize = 64 << 10;

/// How long a streamed answer waits for the client to take a chunk before
/// it gives up: a client that stops reading gives back what its answer
/// holds (and the tenant's read it counts as) after this long.
const JSON_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// `value` as a `200` JSON answer, serialized on a blocking thread as the
/// client takes it, a chunk at a time: the answer holds `value` and a few
/// chunks, however long its JSON. `hold` lives until the last chunk is
/// taken, or the client goes away or takes nothing for [`JSON_STALL`]
/// (which stops the writing; the client sees the answer cut short).
fn json_streamed<T: Serialize + Send + 'static>(value: T, hold: impl Send + 'static) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<axum::body::Bytes, std::io::Error>>(2);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _hold = hold;
        let mut out = std::io::BufWriter::with_capacity(JSON_CHUNK, Chunks { tx, runtime });
        let written = serde_json::to_writer(&mut out, &value).map_err(std::io::Error::from);
        if let Err(error) = written.and_then(|()| std::io::Write::flush(&mut out)) {
            tracing::debug!(%error, "a streamed answer stopped");
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|chunk| (chunk, rx)) });
    let body = axum::body::Body::from_stream(chunks);
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// Where a streamed answer's JSON goes: chunks of at most
/// [`JSON_CHUNK`] bytes to the connection, waiting while it has two.
struct Chunks {
    tx: tokio::sync::mpsc::Sender<Result<axum::body::Bytes, std::io::Error>>,
    runtime: tokio::runtime::Handle,
}

impl std::io::Write for Chunks {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        use tokio::sync::mpsc::error::SendTimeoutError;
        let n = buf.len().min(JSON_CHUNK);
        let chunk = axum::body::Bytes::copy_from_slice(&buf[..n]);
        match self.runtime.block_on(self.tx.send_timeout(Ok(chunk), JSON_STALL)) {
            Ok(()) => Ok(n),
            Err(SendTimeoutError::Closed(_)) => {
                Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away"))
            }
            Err(SendTimeoutError::Timeout(_)) => {
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client stopped reading"))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The most sessions one page of `GET /v1/sessions` holds.
pub const MAX_PAGE: usize = 1000;
/// How many sessions a page holds unless its `limit` says otherwise.
pub const DEFAULT_PAGE: usize = 100;

/// How many sessions one page of a listing filtered by `status` or
/// `agent` looks at, at most: a page of a filter few sessions match may
/// hold fewer than `limit`, even none, and still name a next one.
pub const MAX_SCAN: usize = 10 * MAX_PAGE;

/// How many session records a listing reads at a time: it keeps only
/// their summaries, so the records it holds at once are this many.
const CHUNK: usize = 100;

/// The tenant's sessions, ordered by id, a page at a time: `limit` of them
/// (default 100, at most 1000) after the id `after`; with `identity`, only
/// those of that owner (an end-user token lists only its own); with
/// `status` or `agent`, only those with that status or running that
/// agent. When more may follow, the `Link` header names the next page
/// (`rel="next"`).
///
/// A page costs in proportion to what it holds, owners' pages included
/// (the store keeps an index of owners), except with `status` or `agent`:
/// a filtered page looks at up to 10,000 sessions, so it may hold fewer
/// than `limit`, even none, and still name a next one; and the sessions
/// the tenant's filtered listings look at are held to
/// `max_listing_scan_per_sec` (429 past it).
#[utoipa::path(
    get,
    path = "/v1/sessions",
    params(
        ("limit" = Option<usize>, Query, description = "sessions per page, 1 to 1000 (default 100)"),
        ("after" = Option<String>, Query, description = "the id after which the page starts"),
        ("identity" = Option<String>, Query, description = "only the sessions whose identity has this id"),
        ("status" = Option<String>, Query, description = "only the sessions with this status: idle, running or waiting"),
        ("agent" = Option<String>, Query, description = "only the sessions running this agent"),
    ),
    responses(
        (status = 200, body = Vec<SessionSummary>, headers(("link" = String, description = "the next page, when there is one"))),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 429, description = "The tenant's filtered listings looked at their share of sessions", body = ErrorBody)
    ),
    tag = "sessions"
)]
pub async fn list(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let tenant = caller.tenant.clone();
    let bad = |field: &str, message: String| ApiError {
        field: Some(field.to_owned()),
        ..ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    };
    let limit = page_limit(&query)?;
    let after = query.get("after").cloned();
    if let Some(after) = after.as_deref().filter(|after| !valid_id(after)) {
        return Err(bad("after", format!("`{}` is not a session id ({ID_RULE})", after.escape_debug())));
    }
    let identity = match query.get("identity") {
        Some(id) if id.is_empty() || id.len() > crate::identity::MAX_ID_BYTES => {
            return Err(bad("identity", format!("an identity id is 1 to {} bytes", crate::identity::MAX_ID_BYTES)));
        }
        other => other.cloned(),
    };
    let status: Option<SessionStatus> = match query.get("status") {
        None => None,
        Some(text) => match serde_json::from_value(Value::String(text.clone())) {
            Ok(status) => Some(status),
            Err(_) => return Err(bad("status", format!("`{}` is not idle, running or waiting", text.escape_debug()))),
        },
    };
    let agent = query.get("agent").cloned();
    if let Some(agent) = agent.as_deref().filter(|agent| !valid_id(agent)) {
        return Err(bad("agent", format!("`{}` is not an agent id ({ID_RULE})", agent.escape_debug())));
    }
    let filtered = status.is_some() || agent.is_some();
    let wanted = move |r: &SessionRecord| {
        status.is_none_or(|s| r.status == s) && agent.as_deref().is_none_or(|a| r.agent_id == a)
    };
    // Whose sessions the page lists: the tenant's, or one owner's.
    let owner = match (&caller.user, identity.as_deref()) {
        // An end user lists its own sessions; naming another owner lists
        // nothing, as that owner's sessions do not exist for it.
        (Some(user), Some(id)) if id != user.id() => return Ok(paged(Vec::<SessionSummary>::new(), None)),
        (Some(user), _) => match &user.session_id {
            // A token for one session lists that one, if it is its own.
            Some(own) => {
                let record = state.engine.reads().session_record(&tenant, own).await?;
                let past = |r: &SessionRecord| after.as_deref().is_none_or(|after| r.key.session.as_str() > after);
                let page: Vec<SessionSummary> = record
                    .filter(|r| user.may_reach(r) && past(r) && wanted(r))
                    .iter()
                    .map(SessionSummary::from)
                    .collect();
                return Ok(paged(page, None));
            }
            None => Some(user.id().to_owned()),
        },
        (None, identity) => identity.map(str::to_owned),
    };
    if filtered {
        state.scans.admit(&tenant, state.config.limits(&tenant).max_listing_scan_per_sec)?;
    }
    let link_filter = {
        let mut filter = identity.as_deref().map(|id| format!("&identity={}", encode_id(id))).unwrap_or_default();
        if let Some(status) = query.get("status") {
            filter.push_str(&format!("&status={}", encode_id(status)));
        }
        if let Some(agent) = query.get("agent") {
            filter.push_str(&format!("&agent={}", encode_id(agent)));
        }
        filter
    };
    let scans_of = state.clone();
    let (page, next_after, looked_at) = reads::blocking(move |runtime, stop| {
        let read = |from: Option<&str>, n: usize| {
            runtime.block_on(async {
                match &owner {
                    Some(owner) => state.engine.reads().sessions_of_identity(&tenant, owner, from, n).await,
                    None => state.engine.reads().sessions_page(&tenant, from, n).await,
                }
            })
        };
        let scan = if filtered { MAX_SCAN } else { usize::MAX };
        page_of(read, after, limit, scan, &wanted, stop)
    })
    .await?;
    if filtered {
        scans_of.scans.spent(&caller.tenant, looked_at);
    }
    let next = next_after
        .map(|after| format!("</v1/sessions?limit={limit}&after={}{link_filter}>; rel=\"next\"", encode_id(&after)));
    Ok(paged(page, next))
}

/// A page of at most `limit` summaries of the sessions that are `wanted`,
/// read through `read` (at most `n` records in id order after an id) from
/// after `after`, looking at no more than `scan` sessions; where the next
/// page starts, unless nothing follows; and how many sessions it looked at.
/// Records are read [`CHUNK`] at a time and only their summaries kept.
fn page_of(
    read: impl Fn(Option<&str>, usize) -> Result<Vec<SessionRecord>, subs_engine::store::StoreError>,
    after: Option<String>,
    limit: usize,
    scan: usize,
    wanted: &dyn Fn(&SessionRecord) -> bool,
    stop: &reads::Stop,
) -> Result<(Vec<SessionSummary>, Option<String>, usize), ApiError> {
    let mut page = Vec::new();
    let mut cursor = after;
    let mut looked_at = 0;
    loop {
        stop.check()?;
        let batch = read(cursor.as_deref(), CHUNK)?;
        let more = batch.len() == CHUNK;
        for record in batch {
            if page.len() == limit {
                // Something follows the full page.
                return Ok((page, cursor, looked_at));
            }
            looked_at += 1;
            cursor = Some(record.key.session.clone());
            if wanted(&record) {
                page.push(SessionSummary::from(&record));
            }
            if looked_at == scan && page.len() < limit {
                return Ok((page, cursor, looked_at));
            }
        }
        if !more {
            return Ok((page, None, looked_at));
        }
    }
}

/// A listing's `limit` query parameter: 1 to [`MAX_PAGE`], by default
/// [`DEFAULT_PAGE`].
pub(crate) fn page_limit(query: &HashMap<String, String>) -> Result<usize, ApiError> {
    match query.get("limit") {
        None => Ok(DEFAULT_PAGE),
        Some(text) => match text.parse::<usize>() {
            Ok(limit) if (1..=MAX_PAGE).contains(&limit) => Ok(limit),
            _ => Err(ApiError::invalid("limit", format!("`{text}` is not a page size from 1 to {MAX_PAGE}"))),
        },
    }
}

/// A page of a listing, with a `Link` header to the `next` one if any.
pub(crate) fn paged<T: Serialize>(page: Vec<T>, next: Option<String>) -> Response {
    let mut response = Json(page).into_response();
    if let Some(link) = next.and_then(|link| HeaderValue::from_str(&link).ok()) {
        response.headers_mut().insert(header::LINK, link);
    }
    response
}

/// Stops the session's open turn: calls in flight are cancelled and the
/// turn ends with `turn.failed` (code `cancelled`). Nothing recorded is
/// lost.
#[utoipa::path(
    post,
    path = "/v1/sessions/{session_id}/cancel",
    params(("session_id" = String, Path)),
    responses((status = 200, body = Cancelled), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)),
    tag = "sessions"
)]
pub async fn cancel(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    SessionPath(session_id): SessionPath,
) -> Result<Json<Cancelled>, ApiError> {
    let head = state.engine.reads().session_head(&caller.tenant, &session_id).await?;
    if !head.is_some_and(|r| caller.may_reach(&r)) {
        return Err(ApiError::no_session(&session_id));
    }
    let cancelled = state.engine.sessions().cancel(&caller.tenant, &session_id).await?;
    Ok(Json(Cancelled { cancelled }))
}
