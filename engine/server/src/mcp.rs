//! Every agent an MCP server: `POST|GET|DELETE /v1/agents/{agent_id}/mcp`
//! is a Model Context Protocol endpoint over the Streamable HTTP
//! transport, so MCP clients (desktop assistants, IDEs, other agents) call
//! a subs agent as a tool, with the engine's durability behind each call.
//!
//! # The endpoint
//!
//! Both eras of the protocol are served on the one endpoint; the first
//! message of a client picks its era.
//!
//! - Modern ([`MODERN_PROTOCOL_VERSIONS`]): a request whose `_meta` names
//!   its revision (or whose `MCP-Protocol-Version` is a modern one) is
//!   served statelessly: nothing is kept between requests, so any node
//!   takes any request. Its headers must match its body (revision, method,
//!   tool name), else `400` with `HeaderMismatch`; an unknown revision is
//!   `400` with `UnsupportedProtocolVersion` and the revisions served.
//!   `server/discover`, `tools/list` and `tools/call` are answered; a call
//!   is answered over server-sent events when the client takes them, and
//!   closing that stream cancels its turn. An interrupt becomes an
//!   `input_required` result asking for an elicitation, when the request
//!   declared the capability; the client's retry carries the answer.
//! - Legacy ([`SERVED_VERSIONS`]): `POST` takes one JSON-RPC message
//!   (batches are refused: the revisions served have none). `initialize`
//!   opens an MCP session, whose id comes back in `Mcp-Session-Id`; every
//!   later message carries it. Requests are answered with one JSON object,
//!   except `tools/call`, answered over server-sent events (progress,
//!   elicitation, then the result) when the client accepts them.
//! - `GET` (a stream for messages unrelated to any request) is answered
//!   405: the endpoint sends nothing outside a call.
//! - `DELETE` ends the legacy session named by `Mcp-Session-Id`.
//!
//! Auth is the session routes': a tenant key, or an end-user token, which
//! reaches only its own sessions. An MCP session is its caller's: another
//! caller naming it is answered 404, as an unknown one.
//!
//! # The tool
//!
//! One tool, named after the agent, with input `{message, session_id?}`.
//! A call runs one turn: a `client.message` input to the session
//! `session_id` (a new one when omitted), followed through the same
//! machinery as the chat frontends ([`frontends::follow`]). While the
//! turn runs, each of its steps is a `notifications/progress` (when the
//! call asked for progress). Its end is the result: the last assistant
//! reply as text, the agent's `done` data as `structuredContent`, the
//! session and turn in `_meta`.
//!
//! An interrupt asks the client (`elicitation/create` with the
//! interrupt's `resume_schema`, when the client declared the capability
//! and the schema is a flat object of primitives, as elicitation forms
//! are): an accepted answer resumes the turn, a declined one cancels it, a
//! dismissed one ends the call with the interrupt open. Otherwise the call
//! ends with the open interrupts and the session id in
//! `structuredContent`; a call naming that `session_id` answers the oldest
//! one with its `message` (JSON text is the payload as JSON) and follows
//! the rest of the turn. `notifications/cancelled` for a running call
//! cancels its turn.
//!
//! Every bound of what a client fills is in [`Bounds`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, BoxStream, StreamExt as _};
use serde_json::{Map, Value, json};
use subs_mcp::wire::{
    self, CallToolParams, CallToolResult, CancelledParams, ContentBlock, ElicitAction, ElicitRequestParams,
    ElicitResult, ErrorResponse, Implementation, InitializeParams, InitializeResult, ListToolsResult,
    MODERN_PROTOCOL_VERSION, MODERN_PROTOCOL_VERSIONS, Notification, ProgressParams, RESULT_COMPLETE,
    RESULT_INPUT_REQUIRED, RequestId, ServerCapabilities, Tool, ToolsCapability, code, method,
};
use subs_protocol::client::{ClientMessage, InterruptResume};
use subs_protocol::event::{ClientToolCall, InterruptRaised, MessageRecorded, TurnDone, TurnFailed};
use subs_protocol::{ClientInput, DraftMessage, ProtocolError, Role, SessionEvent};
use tokio::sync::{oneshot, watch};

use crate::auth::{Caller, EndUser};
use crate::body::Incoming;
use crate::error::ApiError;
use crate::frontends::{self, Answer, Found, Plan, Waits};
use crate::stream::{Dropped, TurnFrames};
use crate::{AppState, body, sessions};

/// The revisions the endpoint speaks, newest first: those of the
/// Streamable HTTP transport without JSON-RPC batches.
pub const SERVED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

/// The key of the one input request an `input_required` result of the
/// modern era holds: the elicitation of an interrupt.
const INPUT_KEY: &str = "interrupt";

/// How long a client may cache the modern era's tool list and discovery
/// (`ttlMs`): the one tool changes only when the agent is removed.
const LIST_TTL_MS: u64 = 60_000;

/// How often an idle call stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The longest request id a client may give a running call, in bytes of
/// its JSON: the endpoint keeps it while the call runs.
pub const MAX_REQUEST_ID_BYTES: usize = 256;

/// The most bytes of an interrupt's payload an elicitation's message
/// shows.
const MAX_SHOWN_PAYLOAD: usize = 2048;

/// The bounds of what MCP clients hold on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// MCP sessions one tenant may have open at once; an `initialize` past
    /// it is answered 429 (sessions ended by `DELETE` or expired do not
    /// count).
    pub max_sessions_per_tenant: usize,
    /// How long an MCP session lives unused; a request naming it after
    /// that is answered 404, and the client initializes again.
    pub session_idle: Duration,
    /// `tools/call` requests one MCP session may have running at once (and
    /// so elicitations waiting for its client: at most one per call).
    pub max_calls_per_session: usize,
    /// How long a call waits for the client's answer to an elicitation;
    /// then it ends with the interrupt open, as without elicitation.
    pub elicitation_timeout: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_sessions_per_tenant: 64,
            session_idle: Duration::from_secs(30 * 60),
            max_calls_per_session: 8,
            elicitation_timeout: Duration::from_secs(10 * 60),
        }
    }
}

/// The open MCP sessions of every tenant, each held to the [`Bounds`] it
/// was opened under.
#[derive(Debug, Default)]
pub struct McpSessions {
    sessions: Mutex<HashMap<String, Arc<McpSession>>>,
}

/// One MCP session: its caller, what `initialize` settled, and what its
/// calls wait for.
#[derive(Debug)]
struct McpSession {
    id: String,
    /// The endpoint's bounds.
    bounds: Bounds,
    tenant: String,
    /// The end user whose token opened it; `None` for a tenant key.
    user: Option<EndUser>,
    agent_id: String,
    version: &'static str,
    /// The client answers form-mode `elicitation/create`.
    elicitation: bool,
    last_used: Mutex<Instant>,
    /// The running calls by request id, each with its cancel switch.
    calls: Mutex<HashMap<RequestId, watch::Sender<bool>>>,
    /// The elicitations sent and not yet answered, by their request id.
    pending: Mutex<HashMap<i64, oneshot::Sender<Reply>>>,
    next_request: AtomicI64,
}

/// A client's answer to a request the endpoint sent it.
#[derive(Debug)]
enum Reply {
    Result(Value),
    Error(String),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl McpSessions {
    /// A new session for `caller`, held to `bounds`; `Err(max)` when its
    /// tenant has the most it may.
    fn open(
        &self,
        bounds: &Bounds,
        caller: &Caller,
        agent_id: &str,
        version: &'static str,
        elicitation: bool,
    ) -> Result<Arc<McpSession>, usize> {
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        sessions.retain(|_, s| !s.expired(now));
        let max = bounds.max_sessions_per_tenant;
        if sessions.values().filter(|s| s.tenant == caller.tenant).count() >= max {
            return Err(max);
        }
        let session = Arc::new(McpSession {
            id: new_session_id(),
            bounds: *bounds,
            tenant: caller.tenant.clone(),
            user: caller.user.clone(),
            agent_id: agent_id.to_owned(),
            version,
            elicitation,
            last_used: Mutex::new(now),
            calls: Mutex::default(),
            pending: Mutex::default(),
            next_request: AtomicI64::new(1),
        });
        sessions.insert(session.id.clone(), session.clone());
        Ok(session)
    }

    /// The session `id` of `caller` on `agent_id`, used now; `None` when
    /// there is none, it expired, or it is another caller's.
    fn get(&self, id: &str, caller: &Caller, agent_id: &str) -> Option<Arc<McpSession>> {
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        let session = sessions.get(id)?.clone();
        if session.expired(now) {
            sessions.remove(id);
            return None;
        }
        if !session.belongs_to(caller, agent_id) {
            return None;
        }
        *lock(&session.last_used) = now;
        Some(session)
    }

    /// Ends the session `id` of `caller`; whether there was one.
    fn close(&self, id: &str, caller: &Caller, agent_id: &str) -> bool {
        let mut sessions = lock(&self.sessions);
        let now = Instant::now();
        match sessions.get(id) {
            Some(s) if !s.expired(now) && s.belongs_to(caller, agent_id) => {
                sessions.remove(id);
                true
            }
            _ => false,
        }
    }

    /// The open sessions of `tenant`.
    pub fn count(&self, tenant: &str) -> usize {
        let now = Instant::now();
        lock(&self.sessions).values().filter(|s| s.tenant == tenant && !s.expired(now)).count()
    }
}

impl McpSession {
    fn expired(&self, now: Instant) -> bool {
        // A session with a call running is in use, however long the call.
        lock(&self.calls).is_empty() && now.duration_since(*lock(&self.last_used)) > self.bounds.session_idle
    }

    fn belongs_to(&self, caller: &Caller, agent_id: &str) -> bool {
        self.tenant == caller.tenant && self.user == caller.user && self.agent_id == agent_id
    }
}

/// 32 random bytes as hex: visible ASCII, as session ids must be.
fn new_session_id() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS provides random bytes");
    hex::encode(bytes)
}

/// A JSON-RPC error as an HTTP answer: `status`, and a body with the error
/// (`id` null when the request's could not be read).
fn rpc_error(status: StatusCode, id: Option<RequestId>, code: i64, message: impl Into<String>) -> Response {
    (status, axum::Json(ErrorResponse::new(id, code, message))).into_response()
}

/// An API error (auth, body bounds) as a JSON-RPC error with its status;
/// `data` keeps the API's code and field.
fn api_error(error: ApiError, rpc_code: i64) -> Response {
    let mut response = ErrorResponse::new(None, rpc_code, error.message.clone());
    response.error.data = Some(json!({"code": error.code, "field": error.field}));
    let mut answer = (error.status, axum::Json(response)).into_response();
    if error.status == StatusCode::TOO_MANY_REQUESTS {
        answer.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(crate::error::RETRY_AFTER_SECS));
    }
    answer
}

/// A JSON-RPC result as a `200` JSON answer.
fn rpc_result(id: RequestId, result: impl serde::Serialize) -> Response {
    axum::Json(wire::Response::new(id, result)).into_response()
}

/// 403 unless the request's `Origin`, when it has one, is among the
/// server's CORS origins: a page of another site must not drive a tenant's
/// agents through a browser that holds a token (DNS rebinding).
fn check_origin(state: &AppState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
    let allowed = origin.to_str().is_ok_and(|o| state.config.cors_origins().iter().any(|a| a == o));
    if allowed {
        return Ok(());
    }
    Err(Box::new(rpc_error(
        StatusCode::FORBIDDEN,
        None,
        code::INVALID_REQUEST,
        "this Origin may not call the MCP endpoint (the server's `cors_origins` setting lists those that may)",
    )))
}

/// The caller, the agent and the origin checked: what every method of
/// the endpoint does first. A caller without credentials, or naming an
/// agent it does not have, reaches no MCP endpoint: it is answered in the
/// API's own error shape (401, 403, 400, 404 `not_found`), as on every
/// route; from here on, errors are JSON-RPC's.
async fn admit(
    state: &AppState,
    caller: Result<Caller, ApiError>,
    agent_id: &str,
    headers: &HeaderMap,
) -> Result<Caller, Box<Response>> {
    let caller = caller.map_err(|e| Box::new(e.into_response()))?;
    frontends::check_agent_id(agent_id).map_err(|e| Box::new(e.into_response()))?;
    match state.agents.exists(&caller.tenant, agent_id).await {
        Ok(true) => {}
        Ok(false) => return Err(Box::new(ApiError::no_agent(agent_id).into_response())),
        Err(error) => return Err(Box::new(ApiError::from(error).into_response())),
    }
    check_origin(state, headers)?;
    Ok(caller)
}

/// The session `Mcp-Session-Id` names: 400 without the header, 404 when
/// the caller has no such session.
fn session_of(
    sessions: &McpSessions,
    caller: &Caller,
    agent_id: &str,
    headers: &HeaderMap,
) -> Result<Arc<McpSession>, Box<Response>> {
    let Some(id) = headers.get(wire::SESSION_ID_HEADER) else {
        return Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            "no Mcp-Session-Id header: send `initialize` first, then its session id with every message",
        )));
    };
    let id = id.to_str().unwrap_or_default();
    sessions.get(id, caller, agent_id).ok_or_else(|| {
        Box::new(rpc_error(
            StatusCode::NOT_FOUND,
            None,
            code::INVALID_REQUEST,
            "no such MCP session (it ended, expired, or was never opened by this caller): send `initialize` again",
        ))
    })
}

/// 400 naming the revisions served when `MCP-Protocol-Version` names
/// another.
fn check_version(headers: &HeaderMap) -> Result<(), Box<Response>> {
    let Some(version) = headers.get(wire::PROTOCOL_VERSION_HEADER) else { return Ok(()) };
    let version = version.to_str().unwrap_or("not text");
    if SERVED_VERSIONS.contains(&version) {
        return Ok(());
    }
    let mut response = ErrorResponse::new(
        None,
        code::INVALID_REQUEST,
        format!("unsupported MCP-Protocol-Version `{version}`: this server speaks {}", SERVED_VERSIONS.join(", ")),
    );
    response.error.data = Some(json!({"supported": SERVED_VERSIONS, "requested": version}));
    Err(Box::new((StatusCode::BAD_REQUEST, axum::Json(response)).into_response()))
}

/// Whether a message is of the modern era: a request whose `_meta` names
/// its revision, or any message under a modern `MCP-Protocol-Version`.
fn is_modern(headers: &HeaderMap, message: &wire::Message) -> bool {
    let header = headers.get(wire::PROTOCOL_VERSION_HEADER).and_then(|v| v.to_str().ok());
    if header.is_some_and(|v| MODERN_PROTOCOL_VERSIONS.contains(&v)) {
        return true;
    }
    matches!(message, wire::Message::Request(r)
        if r.params.as_ref().and_then(|p| p.get("_meta")).and_then(|m| m.get(wire::meta::PROTOCOL_VERSION)).is_some())
}

/// Every revision the endpoint speaks, modern first.
fn all_versions() -> Vec<&'static str> {
    MODERN_PROTOCOL_VERSIONS.iter().chain(SERVED_VERSIONS).copied().collect()
}

/// A modern result: `result` marked complete, with who the server is.
fn stamped(mut result: Value) -> Value {
    if let Some(object) = result.as_object_mut() {
        object.entry("resultType").or_insert_with(|| json!(RESULT_COMPLETE));
        let meta = object.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(wire::meta::SERVER_INFO.to_owned(), json!(server_info_plain()));
        }
    }
    result
}

/// Who the server is, in a modern result's `_meta`.
fn server_info_plain() -> Implementation {
    Implementation { name: "subs".to_owned(), version: env!("CARGO_PKG_VERSION").to_owned(), title: None }
}

/// What the agent's endpoint tells a client about using it.
fn instructions(agent_id: &str) -> String {
    format!(
        "The tool `{agent_id}` sends a message to the subs agent `{agent_id}` and answers with its reply. Pass the \
         `session_id` of an earlier answer to continue that conversation."
    )
}

/// Serves one modern request (see the [module docs](self)): its headers
/// checked against its body, then `server/discover`, `tools/list` or
/// `tools/call`, with nothing kept once it is answered.
async fn modern(
    state: Arc<AppState>,
    caller: Caller,
    agent_id: String,
    headers: &HeaderMap,
    message: wire::Message,
) -> Response {
    // The era defines no messages from clients but requests.
    let wire::Message::Request(request) = message else { return StatusCode::ACCEPTED.into_response() };
    let id = request.id.clone();
    let meta = request.params.as_ref().and_then(|p| p.get("_meta")).and_then(Value::as_object);
    let version = meta.and_then(|m| m.get(wire::meta::PROTOCOL_VERSION)).and_then(Value::as_str);
    let header = |name: &str| headers.get(name).map(|v| v.to_str().unwrap_or("(not text)"));
    let mismatch = |why: String| rpc_error(StatusCode::BAD_REQUEST, Some(id.clone()), code::HEADER_MISMATCH, why);
    let Some(version) = version else {
        return mismatch(format!(
            "no `_meta.{}` in the request: every request of a stateless revision names its revision",
            wire::meta::PROTOCOL_VERSION
        ));
    };
    match header(wire::PROTOCOL_VERSION_HEADER) {
        None => return mismatch("no MCP-Protocol-Version header".to_owned()),
        Some(h) if h != version => {
            return mismatch(format!(
                "the MCP-Protocol-Version header `{}` is not the request's revision `{}`",
                h.escape_debug(),
                version.escape_debug()
            ));
        }
        Some(_) => {}
    }
    if !MODERN_PROTOCOL_VERSIONS.contains(&version) {
        let supported = all_versions();
        let mut response = ErrorResponse::new(
            Some(id),
            code::UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "unsupported protocol version `{}`: this server speaks {} per request, and {} after `initialize`",
                version.escape_debug(),
                MODERN_PROTOCOL_VERSIONS.join(", "),
                SERVED_VERSIONS.join(", ")
            ),
        );
        response.error.data = Some(json!({"supported": supported, "requested": version}));
        return (StatusCode::BAD_REQUEST, axum::Json(response)).into_response();
    }
    match header(wire::METHOD_HEADER) {
        Some(m) if m == request.method => {}
        Some(m) => {
            return mismatch(format!(
                "the Mcp-Method header `{}` is not the request's method `{}`",
                m.escape_debug(),
                request.method.escape_debug()
            ));
        }
        None => return mismatch("no Mcp-Method header".to_owned()),
    }
    let elicitation = meta
        .and_then(|m| m.get(wire::meta::CLIENT_CAPABILITIES))
        .and_then(|c| c.get("elicitation"))
        .is_some_and(form_elicitation);
    match request.method.as_str() {
        method::SERVER_DISCOVER => rpc_result(
            id,
            stamped(json!({
                "supportedVersions": MODERN_PROTOCOL_VERSIONS,
                "capabilities": {"tools": {}},
                "instructions": instructions(&agent_id),
                "ttlMs": LIST_TTL_MS,
                "cacheScope": "private",
            })),
        ),
        method::TOOLS_LIST => {
            rpc_result(id, stamped(json!({"tools": [tool(&agent_id)], "ttlMs": LIST_TTL_MS, "cacheScope": "private"})))
        }
        method::TOOLS_CALL => {
            let name = request.params.as_ref().and_then(|p| p.get("name")).and_then(Value::as_str);
            match (header(wire::NAME_HEADER).map(wire::header_text), name) {
                (Some(Some(h)), Some(name)) if h == name => {}
                (None, _) => return mismatch("no Mcp-Name header".to_owned()),
                (Some(h), name) => {
                    return mismatch(format!(
                        "the Mcp-Name header ({}) is not the tool the request calls ({})",
                        h.map_or("not valid".to_owned(), |h| format!("`{}`", h.escape_debug())),
                        name.map_or("none".to_owned(), |n| format!("`{}`", n.escape_debug()))
                    ));
                }
            }
            let bounds = state.config.file().mcp_endpoint;
            // A session of this request alone: the calls of the era share
            // nothing between requests.
            let session = Arc::new(McpSession {
                id: String::new(),
                bounds,
                tenant: caller.tenant.clone(),
                user: caller.user.clone(),
                agent_id: agent_id.clone(),
                version: MODERN_PROTOCOL_VERSION,
                elicitation,
                last_used: Mutex::new(Instant::now()),
                calls: Mutex::default(),
                pending: Mutex::default(),
                next_request: AtomicI64::new(1),
            });
            call(state, caller, session, agent_id, id, request.params, accepts_events(headers)).await
        }
        other => rpc_error(
            StatusCode::NOT_FOUND,
            Some(id),
            code::METHOD_NOT_FOUND,
            format!(
                "unknown method `{}`: this server answers server/discover, tools/list and tools/call",
                other.escape_debug()
            ),
        ),
    }
}

/// Whether the `Accept` header takes server-sent events (a client that
/// sends none takes what it gets).
fn accepts_events(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else { return true };
    accept.split(',').any(|t| {
        let t = t.split(';').next().unwrap_or_default().trim();
        t == "text/event-stream" || t == "*/*" || t == "text/*"
    })
}

/// A client's message to the agent's MCP endpoint: one JSON-RPC request,
/// notification, or response (to an elicitation). `initialize` opens a
/// session (`Mcp-Session-Id` in the answer); `tools/call` of the agent's
/// tool runs a turn and answers over server-sent events (progress
/// notifications, elicitation requests, then the result). JSON-RPC errors
/// come as JSON-RPC error objects, with the HTTP status the transport
/// gives them.
#[utoipa::path(
    post,
    path = "/v1/agents/{agent_id}/mcp",
    params(
        ("agent_id" = String, Path, description = "The agent offered as the MCP server's one tool"),
        ("Mcp-Session-Id" = Option<String>, Header, description = "The session `initialize` opened; required on every other message"),
        ("MCP-Protocol-Version" = Option<String>, Header, description = "The request's revision: 2026-07-28 (stateless, on every request, matching `_meta`), or the one `initialize` negotiated (2025-11-25 or 2025-06-18)"),
        ("Mcp-Method" = Option<String>, Header, description = "2026-07-28: the request's method"),
        ("Mcp-Name" = Option<String>, Header, description = "2026-07-28: the tool a `tools/call` calls"),
    ),
    request_body(content = Object, description = "One JSON-RPC 2.0 message (no batches)", content_type = "application/json"),
    responses(
        (status = 200, description = "A JSON-RPC response; for `tools/call`, server-sent events ending with it", content_type = "application/json"),
        (status = 202, description = "A notification or response, accepted"),
        (status = 400, description = "Not JSON, not one JSON-RPC message, no session id (legacy), headers not matching the body (2026-07-28), or an unsupported protocol version", body = Object),
        (status = 401, body = Object),
        (status = 403, description = "An Origin the server does not allow", body = Object),
        (status = 404, description = "Unknown agent, no such MCP session (ended or expired), or an unknown method (2026-07-28)", body = Object),
        (status = 413, body = Object),
        (status = 429, description = "The tenant has its most MCP sessions open", body = Object),
    ),
    tag = "mcp"
)]
pub async fn post(
    State(state): State<Arc<AppState>>,
    Extension(sessions): Extension<Arc<McpSessions>>,
    caller: Result<Caller, ApiError>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
    body: Incoming,
) -> Response {
    let caller = match admit(&state, caller, &agent_id, &headers).await {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    let limits = state.config.limits(&caller.tenant);
    let message: Value = match body::json_with(body, limits.max_body_bytes, parse_refusal).await {
        Ok(value) => value,
        Err(error) => {
            let rpc_code = if error.code == "parse_error" { code::PARSE_ERROR } else { code::INVALID_REQUEST };
            return api_error(error, rpc_code);
        }
    };
    if message.is_array() {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            format!(
                "JSON-RPC batches are not supported (the revisions served, {}, have none)",
                SERVED_VERSIONS.join(", ")
            ),
        );
    }
    let id = message.get("id").cloned().and_then(|id| serde_json::from_value::<RequestId>(id).ok());
    let message = match wire::Message::from_value(message) {
        Ok(message) => message,
        Err(invalid) => return rpc_error(StatusCode::BAD_REQUEST, id, code::INVALID_REQUEST, invalid.0),
    };
    if is_modern(&headers, &message) {
        return modern(state, caller, agent_id, &headers, message).await;
    }
    if let wire::Message::Request(request) = &message
        && request.method == method::INITIALIZE
    {
        return initialize(&state, &sessions, &caller, &agent_id, request.id.clone(), request.params.clone()).await;
    }
    if let Err(response) = check_version(&headers) {
        return *response;
    }
    let session = match session_of(&sessions, &caller, &agent_id, &headers) {
        Ok(session) => session,
        Err(response) => return *response,
    };
    match message {
        wire::Message::Request(request) => {
            let id = request.id;
            match request.method.as_str() {
                method::PING => rpc_result(id, json!({})),
                method::TOOLS_LIST => {
                    rpc_result(id, ListToolsResult { tools: vec![tool(&agent_id)], next_cursor: None })
                }
                method::TOOLS_CALL => {
                    call(state, caller, session, agent_id, id, request.params, accepts_events(&headers)).await
                }
                other => rpc_error(
                    StatusCode::OK,
                    Some(id),
                    code::METHOD_NOT_FOUND,
                    format!(
                        "unknown method `{}`: this server answers initialize, ping, tools/list and tools/call",
                        other.escape_debug()
                    ),
                ),
            }
        }
        wire::Message::Notification(notification) => {
            if notification.method == method::CANCELLED {
                cancelled(&session, notification.params);
            }
            StatusCode::ACCEPTED.into_response()
        }
        wire::Message::Response(response) => answered(&session, response.id, Reply::Result(response.result)),
        wire::Message::Error(error) => match error.id {
            Some(id) => answered(&session, id, Reply::Error(error.error.message)),
            None => StatusCode::ACCEPTED.into_response(),
        },
    }
}

/// `GET` opens no stream: the endpoint sends messages only within the
/// call they belong to. Answered 405 for a session the caller has (404
/// for another).
#[utoipa::path(
    get,
    path = "/v1/agents/{agent_id}/mcp",
    params(("agent_id" = String, Path), ("Mcp-Session-Id" = Option<String>, Header)),
    responses(
        (status = 405, description = "No stream outside calls", body = Object),
        (status = 400, body = Object),
        (status = 401, body = Object),
        (status = 404, description = "No such MCP session", body = Object),
    ),
    tag = "mcp"
)]
pub async fn get(
    State(state): State<Arc<AppState>>,
    Extension(sessions): Extension<Arc<McpSessions>>,
    caller: Result<Caller, ApiError>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = match admit(&state, caller, &agent_id, &headers).await {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    if let Err(response) = session_of(&sessions, &caller, &agent_id, &headers) {
        return *response;
    }
    let mut response = rpc_error(
        StatusCode::METHOD_NOT_ALLOWED,
        None,
        code::INVALID_REQUEST,
        "this endpoint sends messages only within the call they belong to: it opens no stream on GET",
    );
    response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    response
}

/// Ends the MCP session `Mcp-Session-Id` names. Turns its calls started
/// go on (they are the sessions' own); its id is answered 404 from now on.
#[utoipa::path(
    delete,
    path = "/v1/agents/{agent_id}/mcp",
    params(("agent_id" = String, Path), ("Mcp-Session-Id" = String, Header)),
    responses(
        (status = 204, description = "Ended"),
        (status = 400, body = Object),
        (status = 401, body = Object),
        (status = 404, description = "No such MCP session", body = Object),
    ),
    tag = "mcp"
)]
pub async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(sessions): Extension<Arc<McpSessions>>,
    caller: Result<Caller, ApiError>,
    Path(agent_id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let caller = match admit(&state, caller, &agent_id, &headers).await {
        Ok(caller) => caller,
        Err(response) => return *response,
    };
    let session = match session_of(&sessions, &caller, &agent_id, &headers) {
        Ok(session) => session,
        Err(response) => return *response,
    };
    if sessions.close(&session.id, &caller, &agent_id) {
        tracing::info!(tenant = %caller.tenant, agent = %agent_id, "an MCP session was ended by its client");
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The body is not JSON: a JSON-RPC parse error.
fn parse_refusal(error: &ProtocolError) -> ApiError {
    ApiError { code: "parse_error", ..body::refusal(error) }
}

/// Answers `initialize`: a new session, the revision, the capabilities.
async fn initialize(
    state: &AppState,
    sessions: &McpSessions,
    caller: &Caller,
    agent_id: &str,
    id: RequestId,
    params: Option<Value>,
) -> Response {
    let params: InitializeParams = match serde_json::from_value(params.unwrap_or(Value::Null)) {
        Ok(params) => params,
        Err(error) => {
            return rpc_error(StatusCode::OK, Some(id), code::INVALID_PARAMS, format!("initialize params: {error}"));
        }
    };
    // The client's revision when served, else the newest: the client then
    // decides whether it speaks that one.
    let version = SERVED_VERSIONS.iter().copied().find(|v| *v == params.protocol_version).unwrap_or(SERVED_VERSIONS[0]);
    let elicitation = params.capabilities.elicitation.as_ref().is_some_and(form_elicitation);
    let session = match sessions.open(&state.config.file().mcp_endpoint, caller, agent_id, version, elicitation) {
        Ok(session) => session,
        Err(max) => {
            tracing::warn!(tenant = %caller.tenant, agent = %agent_id, max, "an MCP initialize was refused: the tenant has its most MCP sessions open");
            let mut response = rpc_error(
                StatusCode::TOO_MANY_REQUESTS,
                Some(id),
                code::INVALID_REQUEST,
                format!(
                    "the tenant has its most MCP sessions open ({max}): end one (DELETE with its Mcp-Session-Id) \
                     or wait for one to expire"
                ),
            );
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(crate::error::RETRY_AFTER_SECS));
            return response;
        }
    };
    tracing::info!(tenant = %caller.tenant, agent = %agent_id, version, elicitation, client = %params.client_info.name, "an MCP session opened");
    let result = InitializeResult {
        protocol_version: version.to_owned(),
        capabilities: ServerCapabilities {
            tools: Some(ToolsCapability { list_changed: Some(false) }),
            ..ServerCapabilities::default()
        },
        server_info: Implementation {
            name: "subs".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            title: Some(format!("subs agent {agent_id}")),
        },
        instructions: Some(instructions(agent_id)),
    };
    let mut response = rpc_result(id, result);
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(wire::SESSION_ID_HEADER, value);
    }
    response
}

/// Whether an `elicitation` capability takes form mode: `{}` (the
/// revisions before modes) or one with `form`.
fn form_elicitation(capability: &Value) -> bool {
    capability.as_object().is_some_and(|c| c.is_empty() || c.contains_key("form"))
}

/// The agent's one tool.
fn tool(agent_id: &str) -> Tool {
    Tool {
        name: agent_id.to_owned(),
        title: None,
        description: Some(format!(
            "Sends a message to the agent `{agent_id}` and answers with its reply. Without `session_id` it starts a \
             new conversation; with the `session_id` of an earlier answer it continues that one (and answers what \
             the agent asked, when it waits for an answer)."
        )),
        input_schema: json!({
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "What to say to the agent, or the answer it waits for"},
                "session_id": {"type": "string", "description": "The conversation to continue (from an earlier answer's session_id)"},
            },
            "required": ["message"],
        }),
        output_schema: None,
        annotations: None,
    }
}

/// The tool's arguments.
struct Arguments {
    message: String,
    session_id: Option<String>,
}

/// The tool's arguments, or what is wrong with them (a tool error, which
/// the calling model can correct).
fn arguments(arguments: Option<Map<String, Value>>) -> Result<Arguments, String> {
    let arguments = arguments.unwrap_or_default();
    if let Some(unknown) = arguments.keys().find(|k| *k != "message" && *k != "session_id") {
        return Err(format!(
            "unknown argument `{}`: the tool takes `message` and `session_id`",
            unknown.escape_debug()
        ));
    }
    let message = match arguments.get("message") {
        Some(Value::String(message)) if !message.is_empty() => message.clone(),
        Some(Value::String(_)) => return Err("`message` is empty".to_owned()),
        Some(_) => return Err("`message` must be a string".to_owned()),
        None => return Err("missing argument `message`".to_owned()),
    };
    let session_id = match arguments.get("session_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => {
            frontends::check_id("session_id", "session id", id).map_err(|e| e.message)?;
            Some(id.clone())
        }
        Some(_) => return Err("`session_id` must be a string".to_owned()),
    };
    Ok(Arguments { message, session_id })
}

/// A tool result that says what went wrong (`isError`).
fn tool_error(text: impl Into<String>) -> Value {
    let result = CallToolResult {
        content: vec![ContentBlock::Text { text: text.into(), annotations: None }],
        structured_content: None,
        is_error: true,
    };
    serde_json::to_value(result).unwrap_or(Value::Null)
}

/// Runs `tools/call`: checks the call, sends the turn's input, and answers
/// with the turn followed to its end (or to what it waits for).
async fn call(
    state: Arc<AppState>,
    caller: Caller,
    session: Arc<McpSession>,
    agent_id: String,
    id: RequestId,
    params: Option<Value>,
    events: bool,
) -> Response {
    let modern = session.version == MODERN_PROTOCOL_VERSION;
    let reply = |id: RequestId, result: Value| rpc_result(id, if modern { stamped(result) } else { result });
    // A modern retry carries the answer to the elicitation its first try
    // asked for, and where that was.
    let retry = if modern { params.as_ref().and_then(|p| p.get("requestState")).cloned() } else { None };
    let retry = match retry.map(|state| retry_of(state, params.as_ref())) {
        Some(Ok(retry)) => Some(retry),
        Some(Err(why)) => return rpc_error(StatusCode::OK, Some(id), code::INVALID_PARAMS, why),
        None => None,
    };
    let params: CallToolParams = match serde_json::from_value(params.unwrap_or(Value::Null)) {
        Ok(params) => params,
        Err(error) => {
            return rpc_error(StatusCode::OK, Some(id), code::INVALID_PARAMS, format!("tools/call params: {error}"));
        }
    };
    if params.name != agent_id {
        return rpc_error(
            StatusCode::OK,
            Some(id),
            code::INVALID_PARAMS,
            format!("unknown tool `{}`: this server offers one tool, `{agent_id}`", params.name.escape_debug()),
        );
    }
    if serde_json::to_string(&id).map_or(0, |s| s.len()) > MAX_REQUEST_ID_BYTES {
        return rpc_error(
            StatusCode::OK,
            None,
            code::INVALID_REQUEST,
            format!("a tools/call request id is at most {MAX_REQUEST_ID_BYTES} bytes of JSON"),
        );
    }
    let Arguments { message, session_id: named } = match arguments(params.arguments) {
        Ok(arguments) => arguments,
        Err(why) => return reply(id, tool_error(why)),
    };
    let progress = params.meta.and_then(|m| m.progress_token);

    // Registered before the turn starts, so a cancel sent at once finds it.
    let (cancel, cancelled) = watch::channel(false);
    {
        let mut calls = lock(&session.calls);
        let max = session.bounds.max_calls_per_session;
        if calls.contains_key(&id) {
            return rpc_error(
                StatusCode::OK,
                Some(id),
                code::INVALID_REQUEST,
                "a call with this request id is running",
            );
        }
        if calls.len() >= max {
            return rpc_error(
                StatusCode::OK,
                Some(id),
                code::INVALID_REQUEST,
                format!("this MCP session has its most calls running ({max}): wait for one to end"),
            );
        }
        calls.insert(id.clone(), cancel);
    }
    let registration = Registration { session: session.clone(), id: id.clone(), pending: None };

    // An end-user token naming one session reaches only that one.
    let session_id = retry
        .as_ref()
        .map(|r| r.session_id.clone())
        .or(named)
        .or_else(|| caller.user.as_ref().and_then(|u| u.session_id.clone()))
        .unwrap_or_else(|| format!("mcp-{}", &new_session_id()[..32]));
    let found = match frontends::find(&state, &caller, &session_id, &agent_id, "session_id", "session").await {
        Ok(Found::Unreachable) => return reply(id, tool_error(ApiError::no_session(&session_id).message)),
        Ok(found) => found,
        Err(error) => return reply(id, tool_error(error.message)),
    };
    let waits = Waits::of(found.snapshot());
    if !waits.client_calls.is_empty() {
        return reply(
            id,
            tool_error(format!(
                "session `{session_id}` waits for the results of client tool calls, which an MCP client cannot \
                 send: answer them over the session's API (POST /v1/sessions/{{id}}/input)"
            )),
        );
    }
    let plan = match (retry, waits.turn, waits.interrupts.first()) {
        (Some(retry), turn, _) => {
            let open = waits.interrupts.iter().any(|i| **i == retry.interrupt_id);
            match (retry.answer, turn) {
                (Some(ElicitResult { action: ElicitAction::Accept, content }), Some(turn_id)) if open => Plan::Settle {
                    turn_id: turn_id.to_owned(),
                    answers: vec![Answer::resume(
                        None,
                        retry.interrupt_id,
                        Some(Value::Object(content.unwrap_or_default())),
                    )],
                },
                _ if !open => {
                    return reply(
                        id,
                        tool_error(format!(
                            "the interrupt `{}` of session `{session_id}` is no longer open",
                            retry.interrupt_id
                        )),
                    );
                }
                (Some(ElicitResult { action: ElicitAction::Decline, .. }), _) => {
                    if let Err(error) = state.engine.sessions().cancel(&caller.tenant, &session_id).await {
                        tracing::warn!(%error, tenant = %caller.tenant, session = %session_id, "a declined MCP elicitation could not cancel its turn");
                    }
                    let result = CallToolResult {
                        content: vec![ContentBlock::Text {
                            text: "the question was declined: the turn is cancelled".to_owned(),
                            annotations: None,
                        }],
                        structured_content: Some(json!({"session_id": session_id, "cancelled": true})),
                        is_error: false,
                    };
                    return reply(id, serde_json::to_value(result).unwrap_or(Value::Null));
                }
                _ => return reply(id, open_interrupts(&state, &caller.tenant, &session_id, None).await),
            }
        }
        // The message answers the oldest open interrupt.
        (None, Some(turn_id), Some(interrupt)) => Plan::Settle {
            turn_id: turn_id.to_owned(),
            answers: vec![Answer::resume(None, (*interrupt).to_owned(), Some(payload_of(&message)))],
        },
        _ => Plan::Start(Box::new(ClientInput::ClientMessage(ClientMessage {
            agent_id: agent_id.clone(),
            turn_id: None,
            message: DraftMessage::user(message),
            stream: None,
        }))),
    };
    let resuming = matches!(plan, Plan::Settle { .. });
    tracing::debug!(tenant = %caller.tenant, agent = %agent_id, session = %session_id, version = session.version, resuming, "an MCP call runs a turn");
    let followed = match frontends::follow(&state, &caller, &session_id, plan, None, "mcp").await {
        Ok(followed) => followed,
        Err(error) if resuming => {
            // A refused answer leaves the interrupt open: say so, with it.
            let mut result = open_interrupts(&state, &caller.tenant, &session_id, None).await;
            result["content"][0]["text"] =
                json!(format!("the answer was refused: {} (the agent still waits for it)", error.message));
            result["isError"] = json!(true);
            return reply(id, result);
        }
        Err(error) => return reply(id, tool_error(error.message)),
    };
    let run = CallRun {
        state,
        caller,
        mcp: session.clone(),
        request: id.clone(),
        progress,
        progressed: 0,
        session_id,
        turn_id: followed.turn_id,
        frames: followed.frames,
        cancelled,
        elicit: (events || modern) && session.elicitation,
        reply: String::new(),
        phase: Phase::Following,
        registration,
    };
    if events {
        let events = stream::unfold(run, |mut run| async move { run.next().await.map(|batch| (batch, run)) }).flat_map(
            |batch| {
                stream::iter(batch.into_iter().map(|m| Ok::<_, Infallible>(SseEvent::default().data(m.to_string()))))
            },
        );
        let events: BoxStream<'static, Result<SseEvent, Infallible>> = Box::pin(events);
        return Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)).into_response();
    }
    // A client that takes no events gets the result alone, once the turn
    // gives it.
    let mut run = run;
    let mut last = None;
    while let Some(batch) = run.next().await {
        last = batch.into_iter().last().or(last);
    }
    match last {
        Some(answer) => axum::Json(answer).into_response(),
        // Cancelled while it ran: the cancel asked for no answer.
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// Where a modern retry's elicitation was, and the client's answer.
struct Retry {
    session_id: String,
    interrupt_id: String,
    answer: Option<ElicitResult>,
}

/// The retry a modern `tools/call` with `requestState` is. The state is
/// not signed: it names a session (reached only when the caller may, as
/// with `session_id`) and an interrupt of it, which the caller could
/// answer through `message` as well, so a forged one gains nothing.
fn retry_of(state: Value, params: Option<&Value>) -> Result<Retry, String> {
    let parsed: Option<(String, String)> = state
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| Some((v.get("session_id")?.as_str()?.to_owned(), v.get("interrupt_id")?.as_str()?.to_owned())));
    let Some((session_id, interrupt_id)) = parsed else {
        return Err("`requestState` is not one this server gave".to_owned());
    };
    frontends::check_id("session_id", "session id", &session_id).map_err(|e| e.message)?;
    let answer = params
        .and_then(|p| p.get("inputResponses"))
        .and_then(|r| r.get(INPUT_KEY))
        .map(|a| serde_json::from_value::<ElicitResult>(a.clone()))
        .transpose()
        .map_err(|e| format!("`inputResponses.{INPUT_KEY}` is not an elicitation result: {e}"))?;
    Ok(Retry { session_id, interrupt_id, answer })
}

/// A resume payload from the tool's `message`: JSON text as the JSON it
/// is, any other text as a string.
fn payload_of(message: &str) -> Value {
    serde_json::from_str(message).unwrap_or_else(|_| Value::String(message.to_owned()))
}

/// A call's place in its session: removed (with its elicitation, if one
/// waits) when the call ends or its client goes away.
struct Registration {
    session: Arc<McpSession>,
    id: RequestId,
    pending: Option<i64>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.session.calls).remove(&self.id);
        if let Some(pending) = self.pending {
            lock(&self.session.pending).remove(&pending);
        }
    }
}

/// `notifications/cancelled`: flips the cancel switch of the call it
/// names (unknown ids are ignored, as the specification asks: the call
/// may have just ended).
fn cancelled(session: &McpSession, params: Option<Value>) {
    let Ok(params) = serde_json::from_value::<CancelledParams>(params.unwrap_or(Value::Null)) else { return };
    if let Some(cancel) = lock(&session.calls).get(&params.request_id) {
        let _ = cancel.send(true);
    }
}

/// A client's response to an elicitation: handed to the call waiting
/// for it; 400 when none waits for that id.
fn answered(session: &McpSession, id: RequestId, reply: Reply) -> Response {
    let waiting = match id {
        RequestId::Number(n) => lock(&session.pending).remove(&n),
        RequestId::String(_) => None,
    };
    match waiting {
        Some(waiting) => {
            let _ = waiting.send(reply);
            StatusCode::ACCEPTED.into_response()
        }
        None => rpc_error(
            StatusCode::BAD_REQUEST,
            None,
            code::INVALID_REQUEST,
            format!("no request with id {id} waits for an answer in this session"),
        ),
    }
}

/// Resolves once the cancel switch is flipped (never, when its sender is
/// gone without flipping it).
async fn flipped(mut switch: watch::Receiver<bool>) {
    if switch.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Where a call is.
enum Phase {
    /// Following the turn's events.
    Following,
    /// Waiting for the client's answer to an elicitation of the interrupt
    /// `interrupt_id`.
    Eliciting { interrupt_id: String, answer: oneshot::Receiver<Reply>, until: tokio::time::Instant },
    /// The result was sent (or the call was cancelled).
    Done,
}

/// One `tools/call`: the turn it follows, turned into MCP messages.
struct CallRun {
    state: Arc<AppState>,
    caller: Caller,
    mcp: Arc<McpSession>,
    request: RequestId,
    progress: Option<RequestId>,
    progressed: u64,
    session_id: String,
    turn_id: String,
    frames: TurnFrames,
    cancelled: watch::Receiver<bool>,
    elicit: bool,
    /// The last assistant reply with text.
    reply: String,
    phase: Phase,
    registration: Registration,
}

impl Drop for CallRun {
    /// A modern call's stream closed before its end is its cancel: the
    /// turn it runs is cancelled (a legacy client cancels with
    /// `notifications/cancelled`, and may come back to a dropped stream).
    fn drop(&mut self) {
        if self.mcp.version != MODERN_PROTOCOL_VERSION || matches!(self.phase, Phase::Done) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let (state, tenant) = (self.state.clone(), self.caller.tenant.clone());
        let (session, turn) = (self.session_id.clone(), self.turn_id.clone());
        runtime.spawn(async move {
            let open = match state.engine.reads().session_record(&tenant, &session).await {
                Ok(record) => record.and_then(|r| r.turn).is_some_and(|t| t.turn_id == turn),
                Err(_) => true,
            };
            if open && let Err(error) = state.engine.sessions().cancel(&tenant, &session).await {
                tracing::warn!(%error, %tenant, %session, "a closed MCP call stream could not cancel its turn");
            }
            tracing::info!(%tenant, %session, %turn, "an MCP client closed its call's stream: the turn is cancelled");
        });
    }
}

/// What handling one event or answer did.
enum Step {
    /// Go on; these messages first.
    More(Vec<Value>),
    /// The call is over: its last messages (the result last).
    End(Vec<Value>),
}

impl CallRun {
    /// The next messages to send; `None` once the call is over.
    async fn next(&mut self) -> Option<Vec<Value>> {
        loop {
            let step = match &mut self.phase {
                Phase::Done => return None,
                Phase::Following => {
                    let cancelled = flipped(self.cancelled.clone());
                    tokio::select! {
                        biased;
                        () = cancelled => self.cancel().await,
                        frame = self.frames.next() => self.frame(frame).await,
                    }
                }
                Phase::Eliciting { until, .. } => {
                    let until = *until;
                    let cancelled = flipped(self.cancelled.clone());
                    let Phase::Eliciting { answer, .. } = &mut self.phase else { unreachable!() };
                    tokio::select! {
                        biased;
                        () = cancelled => self.cancel().await,
                        reply = answer => self.elicited(reply.ok()).await,
                        () = tokio::time::sleep_until(until) => {
                            tracing::info!(tenant = %self.caller.tenant, session = %self.session_id, "an MCP elicitation was not answered in time");
                            self.elicited(None).await
                        }
                    }
                }
            };
            match step {
                Step::More(messages) if messages.is_empty() => {}
                Step::More(messages) => return Some(messages),
                Step::End(messages) => {
                    self.phase = Phase::Done;
                    return Some(messages);
                }
            }
        }
    }

    /// The client cancelled the call: its turn is cancelled, and the call
    /// ends without a response (the specification asks for none).
    async fn cancel(&mut self) -> Step {
        let (tenant, session) = (&self.caller.tenant, &self.session_id);
        let open = match self.state.engine.reads().session_record(tenant, session).await {
            Ok(record) => record.and_then(|r| r.turn).is_some_and(|t| t.turn_id == self.turn_id),
            Err(_) => true,
        };
        if open && let Err(error) = self.state.engine.sessions().cancel(tenant, session).await {
            tracing::warn!(%error, %tenant, %session, "an MCP client's cancel could not cancel its turn");
        }
        tracing::info!(%tenant, %session, turn = %self.turn_id, "an MCP client cancelled its call: the turn is cancelled");
        Step::End(Vec::new())
    }

    /// One event of the turn.
    async fn frame(&mut self, frame: Option<Result<Arc<subs_engine::events::Frame>, Dropped>>) -> Step {
        let event = match frame {
            Some(Ok(frame)) => match frame.parse() {
                Ok(event) => event,
                Err(_) => return Step::More(Vec::new()),
            },
            Some(Err(Dropped { budget })) => {
                return self.end_error(format!(
                    "this call fell behind its turn by more than {budget} bytes and stopped following it; the turn \
                     goes on in session `{}`",
                    self.session_id
                ));
            }
            None => {
                return self.end_error(format!(
                    "the server stopped following the turn (it is shutting down, or its store failed); the turn is \
                     stored in session `{}`",
                    self.session_id
                ));
            }
        };
        match event {
            SessionEvent::TurnStarted(_) => self.progress_step("the turn started"),
            SessionEvent::Message(MessageRecorded { message, .. }) => match message.role {
                Role::Assistant => {
                    let text = message.text();
                    if !text.is_empty() {
                        self.reply = text;
                    }
                    let tools: Vec<&str> =
                        message.tool_calls.iter().flatten().map(|c| c.function.name.as_str()).collect();
                    if tools.is_empty() {
                        self.progress_step("the agent replied")
                    } else {
                        self.progress_step(&format!("the agent calls {}", tools.join(", ")))
                    }
                }
                Role::Tool => self.progress_step("a tool answered"),
                Role::User | Role::System => Step::More(Vec::new()),
            },
            SessionEvent::ToolCall(ClientToolCall { name, .. }) => self.end_error(format!(
                "the agent asked its client to run the tool `{name}`, which an MCP client cannot; the turn waits in \
                 session `{}`",
                self.session_id
            )),
            SessionEvent::Interrupt(raised) => self.interrupt(raised).await,
            SessionEvent::InterruptResumed(_) => self.progress_step("the agent was answered and goes on"),
            SessionEvent::TurnDone(TurnDone { data, .. }) => Step::End(vec![self.done(data.filter(|d| !d.is_null()))]),
            SessionEvent::TurnFailed(TurnFailed { error, code, .. }) => {
                self.end_error(format!("the turn failed ({code}): {error}"))
            }
            SessionEvent::TokenDelta(_) | SessionEvent::State(_) => Step::More(Vec::new()),
        }
    }

    /// A progress notification, when the call asked for them.
    fn progress_step(&mut self, what: &str) -> Step {
        let Some(token) = self.progress.clone() else { return Step::More(Vec::new()) };
        self.progressed += 1;
        let params = ProgressParams {
            progress_token: token,
            progress: self.progressed as f64,
            total: None,
            message: Some(what.to_owned()),
        };
        Step::More(vec![json!(Notification::new(method::PROGRESS, params))])
    }

    /// The call's result for a finished turn.
    fn done(&self, data: Option<Value>) -> Value {
        let mut content = vec![ContentBlock::Text { text: self.reply.clone(), annotations: None }];
        // `structuredContent` is an object: other data is wrapped.
        let structured = data.map(|data| match data {
            Value::Object(_) => data,
            other => json!({"value": other}),
        });
        if let Some(structured) = &structured {
            // The text form of the structured result, for clients that
            // read only text.
            content.push(ContentBlock::Text { text: structured.to_string(), annotations: None });
        }
        let result = CallToolResult { content, structured_content: structured, is_error: false };
        self.response(serde_json::to_value(result).unwrap_or(Value::Null))
    }

    /// The call ends with a tool error saying `why`.
    fn end_error(&self, why: String) -> Step {
        Step::End(vec![self.response(tool_error(why))])
    }

    /// The response to the call, `result` with the session and turn in its
    /// `_meta`.
    fn response(&self, mut result: Value) -> Value {
        result["_meta"] = json!({"subs/session_id": self.session_id, "subs/turn_id": self.turn_id});
        if self.mcp.version == MODERN_PROTOCOL_VERSION {
            result = stamped(result);
        }
        json!(wire::Response::new(self.request.clone(), result))
    }

    /// An interrupt: an elicitation when the client takes one for it, else
    /// the end of the call with the interrupts open.
    async fn interrupt(&mut self, raised: InterruptRaised) -> Step {
        let schema = if self.elicit { requested_schema(raised.resume_schema.as_ref()) } else { None };
        let Some(schema) = schema else {
            let result = open_interrupts(&self.state, &self.caller.tenant, &self.session_id, Some(&raised)).await;
            return Step::End(vec![self.response(result)]);
        };
        if self.mcp.version == MODERN_PROTOCOL_VERSION {
            // The modern era asks within the result: the client retries
            // the call with the answer and the state naming the interrupt.
            let params = ElicitRequestParams {
                mode: Some("form".to_owned()),
                message: elicitation_message(&raised),
                requested_schema: schema,
            };
            let state = json!({"session_id": self.session_id, "interrupt_id": raised.interrupt_id}).to_string();
            let result = json!({
                "resultType": RESULT_INPUT_REQUIRED,
                "inputRequests": {INPUT_KEY: {"method": method::ELICITATION_CREATE, "params": params}},
                "requestState": state,
            });
            return Step::End(vec![self.response(result)]);
        }
        let id = self.mcp.next_request.fetch_add(1, Ordering::Relaxed);
        let (answer, waiting) = oneshot::channel();
        lock(&self.mcp.pending).insert(id, answer);
        self.registration.pending = Some(id);
        let params =
            ElicitRequestParams { mode: None, message: elicitation_message(&raised), requested_schema: schema };
        let request = wire::Request::new(RequestId::Number(id), method::ELICITATION_CREATE, params);
        let until = tokio::time::Instant::now() + self.mcp.bounds.elicitation_timeout;
        self.phase = Phase::Eliciting { interrupt_id: raised.interrupt_id, answer: waiting, until };
        let mut messages = match self.progress_step(&format!("the agent asks: {}", raised.reason)) {
            Step::More(m) | Step::End(m) => m,
        };
        messages.push(json!(request));
        Step::More(messages)
    }

    /// The client's answer to the elicitation (`None`: none came).
    async fn elicited(&mut self, reply: Option<Reply>) -> Step {
        let Phase::Eliciting { interrupt_id, .. } = std::mem::replace(&mut self.phase, Phase::Following) else {
            return Step::More(Vec::new());
        };
        if let Some(id) = self.registration.pending.take() {
            lock(&self.mcp.pending).remove(&id);
        }
        let answer = match reply {
            Some(Reply::Result(result)) => serde_json::from_value::<ElicitResult>(result).map_err(|e| e.to_string()),
            Some(Reply::Error(error)) => Err(error),
            None => Err("no answer came in time".to_owned()),
        };
        let (tenant, session) = (&self.caller.tenant, &self.session_id);
        match answer {
            Ok(ElicitResult { action: ElicitAction::Accept, content }) => {
                let payload = Value::Object(content.unwrap_or_default());
                let input = ClientInput::InterruptResume(InterruptResume { interrupt_id, payload: Some(payload) });
                match sessions::send(&self.state, &self.caller, session, input, None, false).await {
                    Ok(_) => self.progress_step("the answer was sent"),
                    Err(error) => {
                        let mut result = open_interrupts(&self.state, tenant, session, None).await;
                        result["content"][0]["text"] =
                            json!(format!("the answer was refused: {} (the agent still waits for it)", error.message));
                        result["isError"] = json!(true);
                        Step::End(vec![self.response(result)])
                    }
                }
            }
            Ok(ElicitResult { action: ElicitAction::Decline, .. }) => {
                // Declined: the turn is cancelled, and the call follows it
                // to its end.
                if let Err(error) = self.state.engine.sessions().cancel(tenant, session).await {
                    tracing::warn!(%error, %tenant, %session, "a declined MCP elicitation could not cancel its turn");
                }
                self.progress_step("the question was declined: the turn is cancelled")
            }
            Ok(ElicitResult { action: ElicitAction::Cancel, .. }) | Err(_) => {
                let result = open_interrupts(&self.state, tenant, session, None).await;
                Step::End(vec![self.response(result)])
            }
        }
    }
}

/// The elicitation form for an interrupt's `resume_schema`: the schema
/// when it is a flat object of primitive properties (what elicitation
/// forms are), an empty form when the interrupt has none; `None` when it
/// cannot be a form.
fn requested_schema(schema: Option<&Value>) -> Option<Value> {
    let Some(schema) = schema else { return Some(json!({"type": "object", "properties": {}})) };
    let object = schema.as_object()?;
    if object.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let mut properties = Map::new();
    for (name, property) in object.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let kind = property.get("type").and_then(Value::as_str)?;
        let primitive = match kind {
            "string" | "number" | "integer" | "boolean" => true,
            // Multi-select: an array of strings from a list.
            "array" => property.get("items").is_some_and(|i| i.get("enum").is_some() || i.get("anyOf").is_some()),
            _ => false,
        };
        if !primitive {
            return None;
        }
        properties.insert(name.clone(), property.clone());
    }
    let mut form = json!({"type": "object", "properties": properties});
    if let Some(required) = object.get("required").filter(|r| r.is_array()) {
        form["required"] = required.clone();
    }
    Some(form)
}

/// What an elicitation says: the interrupt's reason and its payload.
fn elicitation_message(raised: &InterruptRaised) -> String {
    match raised.payload.as_ref().filter(|p| !p.is_null()) {
        Some(payload) => {
            let mut shown = payload.to_string();
            if shown.len() > MAX_SHOWN_PAYLOAD {
                let mut end = MAX_SHOWN_PAYLOAD;
                while !shown.is_char_boundary(end) {
                    end -= 1;
                }
                shown.truncate(end);
                shown.push('…');
            }
            format!("{}\n\n{shown}", raised.reason)
        }
        None => raised.reason.clone(),
    }
}

/// The result of a call that ends with the turn waiting on interrupts:
/// each open one (with `raised`, which the read may not show yet), and the
/// session to answer them in.
async fn open_interrupts(state: &AppState, tenant: &str, session: &str, raised: Option<&InterruptRaised>) -> Value {
    let snapshot = match state.engine.reads().snapshot(tenant, session).await {
        Ok(snapshot) => snapshot,
        Err(error) => {
            tracing::warn!(%error, %tenant, %session, "an MCP call cannot read its session");
            None
        }
    };
    let mut open: Vec<Value> = snapshot
        .iter()
        .flat_map(|s| s.record.interrupts.iter())
        .map(|i| {
            json!({"interrupt_id": i.interrupt_id, "reason": i.reason, "payload": i.payload,
                   "resume_schema": i.resume_schema})
        })
        .collect();
    if let Some(raised) = raised
        && !open.iter().any(|i| i["interrupt_id"] == raised.interrupt_id.as_str())
    {
        open.push(json!({"interrupt_id": raised.interrupt_id, "reason": raised.reason, "payload": raised.payload,
                         "resume_schema": raised.resume_schema}));
    }
    let reasons: Vec<String> = open.iter().map(|i| i["reason"].as_str().unwrap_or_default().to_owned()).collect();
    let text = format!(
        "The agent waits for an answer: {}. Call this tool again with session_id \"{session}\" and the answer as \
         `message` (JSON when the agent asks for an object).",
        reasons.join("; ")
    );
    let result = CallToolResult {
        content: vec![ContentBlock::Text { text, annotations: None }],
        structured_content: Some(json!({"session_id": session, "interrupts": open})),
        is_error: false,
    };
    serde_json::to_value(result).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    //! The endpoint's refusals, through the router in-process (no socket):
    //! what a turn does over it is tested with the official TypeScript SDK
    //! over a real server (`engine/cli/tests/all/mcp_endpoint.rs`).

    use axum::body::Body;
    use axum::http::{Method, Request};
    use http_body_util::BodyExt as _;
    use subs_engine::agents::AgentRegistry;
    use subs_engine::store::{KeyRecord, MemStore};
    use subs_engine::worker::component::ComponentHost;
    use tower::ServiceExt as _;

    use super::*;
    use crate::auth::hash_key;
    use crate::{Keys, Limits, ServerConfig, app};

    const KEY: &str = "subs_acme_key_0000000000000000";
    const OTHER: &str = "subs_other_key_000000000000000";

    /// A server of two tenants, `acme` with the agent `echo` (an HTTP
    /// worker nobody serves: no turn runs here).
    async fn state(dir: &tempfile::TempDir) -> Arc<AppState> {
        let store: Arc<dyn subs_engine::Store> = Arc::new(MemStore::new());
        let engine = subs_engine::Engine::open(
            store,
            subs_engine::model::Models::with_offline(),
            subs_engine::EngineConfig::default(),
        );
        let agents = AgentRegistry::new(engine.clone(), ComponentHost::new().unwrap(), dir.path().to_path_buf());
        let key = |tenant: &str, key: &str| KeyRecord {
            tenant: tenant.to_owned(),
            hash: hash_key(key),
            prefix: key[..12].to_owned(),
            name: None,
            created_ms: 0,
        };
        let keys = Keys::new([key("acme", KEY), key("other", OTHER)]);
        let limits = Limits { max_body_bytes: 4096, ..Limits::default() };
        agents.put_http("acme", "echo", "http://127.0.0.1:9/".to_owned(), None, &limits.agents(), true).await.unwrap();
        agents.put_http("other", "echo", "http://127.0.0.1:9/".to_owned(), None, &limits.agents(), true).await.unwrap();
        let config = ServerConfig { default_limits: limits, ..ServerConfig::default() };
        Arc::new(AppState {
            engine,
            agents,
            keys,
            config: config.into(),
            metrics: Default::default(),
            scans: Default::default(),
        })
    }

    /// One request to `/v1/agents/echo/mcp`: the status, the session id
    /// header, the body as JSON.
    async fn send(
        router: &axum::Router,
        method: Method,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (StatusCode, Option<String>, Value) {
        let mut request = Request::builder()
            .method(method)
            .uri("/v1/agents/echo/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream");
        if let Some(key) = key {
            request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = router.clone().oneshot(request.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = response.status();
        let session = response.headers().get(wire::SESSION_ID_HEADER).map(|v| v.to_str().unwrap().to_owned());
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, session, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    fn initialize(version: &str) -> String {
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string()
    }

    #[tokio::test]
    async fn bad_messages_get_json_rpc_errors_naming_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let router = app(state(&dir).await);

        // No key; an Origin the server does not allow.
        let (status, _, body) = send(&router, Method::POST, None, &[], &initialize("2025-11-25")).await;
        assert_eq!((status, body["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")), "{body}");
        // Another tenant's agent is no endpoint of this one's.
        let mut nobody = Request::builder()
            .method(Method::POST)
            .uri("/v1/agents/nobody/mcp")
            .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
            .body(Body::from(initialize("2025-11-25")))
            .unwrap();
        nobody.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let response = router.clone().oneshot(nobody).await.unwrap();
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let origin = [("origin", "https://evil.example")];
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &origin, &initialize("2025-11-25")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

        // Not JSON; a batch; not a JSON-RPC message.
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &[], "{not json").await;
        assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(code::PARSE_ERROR)));
        let batch = format!("[{}]", initialize("2025-11-25"));
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &[], &batch).await;
        assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(code::INVALID_REQUEST)));
        assert!(body["error"]["message"].as_str().unwrap().contains("batches are not supported"), "{body}");
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &[], r#"{"jsonrpc": "1.0", "id": 3}"#).await;
        assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::BAD_REQUEST, Some(code::INVALID_REQUEST)));
        assert_eq!(body["id"], 3, "{body}");
        // A body over the tenant's `max_body_bytes`.
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &[], &" ".repeat(8192)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");

        // Initialize: an unknown revision is answered with the newest.
        let (status, session, body) = send(&router, Method::POST, Some(KEY), &[], &initialize("2024-11-05")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["protocolVersion"], "2025-11-25");
        assert_eq!(body["result"]["capabilities"]["tools"], json!({"listChanged": false}));
        let session = session.expect("a session id");
        assert!(session.len() == 64 && session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{session}");
        let (_, _, body) = send(&router, Method::POST, Some(KEY), &[], &initialize("2025-06-18")).await;
        assert_eq!(body["result"]["protocolVersion"], "2025-06-18");

        let with = |extra: &'static [(&'static str, &'static str)]| {
            let mut headers = vec![("mcp-session-id", session.as_str())];
            headers.extend_from_slice(extra);
            headers
        };
        let list = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &with(&[]), list).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["tools"][0]["name"], "echo");

        // An unknown method.
        let unknown = r#"{"jsonrpc": "2.0", "id": 2, "method": "resources/list"}"#;
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &with(&[]), unknown).await;
        assert_eq!((status, body["error"]["code"].as_i64()), (StatusCode::OK, Some(code::METHOD_NOT_FOUND)));
        assert!(body["error"]["message"].as_str().unwrap().contains("resources/list"), "{body}");
        assert_eq!(body["id"], 2);

        // An unsupported protocol version names the supported ones.
        let old = with(&[("mcp-protocol-version", "2024-11-05")]);
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &old, list).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"]["data"]["supported"], json!(SERVED_VERSIONS));
        assert!(body["error"]["message"].as_str().unwrap().contains("2025-11-25, 2025-06-18"), "{body}");

        // No session id: 400; a wrong one, or another tenant's: 404.
        let (status, _, _) = send(&router, Method::POST, Some(KEY), &[], list).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _, body) = send(&router, Method::POST, Some(KEY), &[("mcp-session-id", "nope")], list).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        let (status, _, _) = send(&router, Method::POST, Some(OTHER), &with(&[]), list).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant's session");

        // An unknown tool is a protocol error; bad arguments a tool error.
        let call = |arguments: Value, name: &str| {
            json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
                .to_string()
        };
        let (_, _, body) = send(&router, Method::POST, Some(KEY), &with(&[]), &call(json!({}), "other")).await;
        assert_eq!(body["error"]["code"].as_i64(), Some(code::INVALID_PARAMS), "{body}");
        for (arguments, says) in [
            (json!({}), "missing argument `message`"),
            (json!({"message": 5}), "`message` must be a string"),
            (json!({"message": "hi", "session_id": ""}), "not a valid session id"),
            (json!({"message": "hi", "colour": "red"}), "unknown argument `colour`"),
        ] {
            let (status, _, body) = send(&router, Method::POST, Some(KEY), &with(&[]), &call(arguments, "echo")).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(body["result"]["isError"], true, "{body}");
            assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains(says), "{body}");
        }

        // A response nobody waits for.
        let stray = r#"{"jsonrpc": "2.0", "id": 99, "result": {"action": "accept"}}"#;
        let (status, _, _) = send(&router, Method::POST, Some(KEY), &with(&[]), stray).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        // Notifications are accepted.
        let note = r#"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#;
        let (status, _, _) = send(&router, Method::POST, Some(KEY), &with(&[]), note).await;
        assert_eq!(status, StatusCode::ACCEPTED);

        // GET opens no stream; DELETE ends the session.
        let (status, _, _) = send(&router, Method::GET, Some(KEY), &with(&[]), "").await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        let (status, _, _) = send(&router, Method::DELETE, Some(OTHER), &with(&[]), "").await;
        assert_eq!(status, StatusCode::NOT_FOUND, "another tenant cannot end it");
        let (status, _, _) = send(&router, Method::DELETE, Some(KEY), &with(&[]), "").await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _, _) = send(&router, Method::POST, Some(KEY), &with(&[]), list).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "an ended session");
    }

    #[tokio::test]
    async fn end_user_tokens_open_sessions_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(&dir).await;
        let router = app(state.clone());
        let minted = Request::builder()
            .method(Method::POST)
            .uri("/v1/tokens")
            .header(header::AUTHORIZATION, format!("Bearer {KEY}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"identity": {"id": "alice"}}"#))
            .unwrap();
        let minted = router.clone().oneshot(minted).await.unwrap().into_body().collect().await.unwrap().to_bytes();
        let minted: Value = serde_json::from_slice(&minted).unwrap();
        let token = minted["token"].as_str().expect("a token");

        let (status, alice, body) = send(&router, Method::POST, Some(token), &[], &initialize("2025-11-25")).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let alice = alice.unwrap();
        let (_, tenant, _) = send(&router, Method::POST, Some(KEY), &[], &initialize("2025-11-25")).await;
        let tenant = tenant.unwrap();
        let list = r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}"#;
        let (status, _, _) = send(&router, Method::POST, Some(token), &[("mcp-session-id", &alice)], list).await;
        assert_eq!(status, StatusCode::OK);
        // Neither reaches the other's MCP session.
        let (status, _, _) = send(&router, Method::POST, Some(token), &[("mcp-session-id", &tenant)], list).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "the tenant's session is not the end user's");
        let (status, _, _) = send(&router, Method::POST, Some(KEY), &[("mcp-session-id", &alice)], list).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "the end user's session is not the tenant key's");
        // Nor the other's conversations: a call naming another owner's
        // session is a tool error, and nothing is sent to it.
        state
            .engine
            .sessions()
            .input(
                "acme",
                "theirs",
                ClientInput::ClientMessage(ClientMessage {
                    agent_id: "echo".into(),
                    turn_id: None,
                    message: DraftMessage::user("hi"),
                    stream: None,
                }),
                subs_protocol::WorkerIdentity::default(),
            )
            .await
            .unwrap();
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"message": "hi", "session_id": "theirs"}}});
        let (status, _, body) =
            send(&router, Method::POST, Some(token), &[("mcp-session-id", &alice)], &call.to_string()).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"]["isError"], true, "{body}");
        assert!(body["result"]["content"][0]["text"].as_str().unwrap().contains("theirs"), "{body}");
    }

    #[tokio::test]
    async fn calls_are_bounded_per_session() {
        let dir = tempfile::tempdir().unwrap();
        let state = state(&dir).await;
        let caller = Caller { tenant: "acme".to_owned(), user: None, key: None, trace: None };
        let one = Bounds { max_calls_per_session: 1, ..Bounds::default() };
        let session = McpSessions::default().open(&one, &caller, "echo", "2025-11-25", false).unwrap();
        // A call running under request id 1.
        let (running, _switch) = watch::channel(false);
        lock(&session.calls).insert(RequestId::Number(1), running);
        let params = json!({"name": "echo", "arguments": {"message": "hi"}});
        let answer = |response: Response| async move {
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            serde_json::from_slice::<Value>(&bytes).unwrap()
        };
        let again = call(
            state.clone(),
            caller.clone(),
            session.clone(),
            "echo".into(),
            RequestId::Number(1),
            Some(params.clone()),
            true,
        );
        let body = answer(again.await).await;
        assert!(body["error"]["message"].as_str().unwrap().contains("request id is running"), "{body}");
        let more = call(state, caller, session.clone(), "echo".into(), RequestId::Number(2), Some(params), true);
        let body = answer(more.await).await;
        assert_eq!(body["error"]["code"].as_i64(), Some(code::INVALID_REQUEST), "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("most calls running (1)"), "{body}");
        assert_eq!(lock(&session.calls).len(), 1, "the refused calls left nothing behind");
    }

    #[test]
    fn sessions_are_bounded_per_tenant_and_expire() {
        let caller = |tenant: &str| Caller { tenant: tenant.to_owned(), user: None, key: None, trace: None };
        let two = Bounds { max_sessions_per_tenant: 2, ..Bounds::default() };
        let sessions = McpSessions::default();
        let a = sessions.open(&two, &caller("a"), "echo", "2025-11-25", false).unwrap();
        sessions.open(&two, &caller("a"), "echo", "2025-11-25", false).unwrap();
        assert_eq!(sessions.open(&two, &caller("a"), "echo", "2025-11-25", false).unwrap_err(), 2);
        sessions.open(&two, &caller("b"), "echo", "2025-11-25", false).expect("another tenant's own bound");
        assert!(sessions.get(&a.id, &caller("a"), "other").is_none(), "another agent's endpoint");
        assert!(sessions.close(&a.id, &caller("a"), "echo"));
        sessions.open(&two, &caller("a"), "echo", "2025-11-25", false).expect("an ended session frees its place");

        let expiring = McpSessions::default();
        let idle = Bounds { session_idle: Duration::ZERO, ..Bounds::default() };
        let s = expiring.open(&idle, &caller("a"), "echo", "2025-11-25", false).unwrap();
        // Past the zero idle time, on the clock sessions expire by.
        std::thread::sleep(Duration::from_millis(2));
        assert!(expiring.get(&s.id, &caller("a"), "echo").is_none(), "an expired session is gone");
        assert_eq!(expiring.count("a"), 0);
    }

    #[test]
    fn only_flat_schemas_of_primitives_become_forms() {
        let approval = json!({"type": "object", "additionalProperties": false,
            "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}}, "required": ["approved"]});
        assert_eq!(
            requested_schema(Some(&approval)),
            Some(json!({"type": "object", "properties": approval["properties"], "required": ["approved"]}))
        );
        assert_eq!(requested_schema(None), Some(json!({"type": "object", "properties": {}})));
        let nested = json!({"type": "object", "properties": {"address": {"type": "object"}}});
        assert_eq!(requested_schema(Some(&nested)), None);
        assert_eq!(requested_schema(Some(&json!({"type": "string"}))), None);
        assert!(form_elicitation(&json!({})) && form_elicitation(&json!({"form": {}})));
        assert!(!form_elicitation(&json!({"url": {}})));
        assert_eq!(payload_of(r#"{"approved": true}"#), json!({"approved": true}));
        assert_eq!(payload_of("yes please"), json!("yes please"));
    }
}
