//! An MCP client over the Streamable HTTP transport: one per (tenant,
//! server).
//!
//! Every message is a `POST` of one JSON-RPC message to the server's URL.
//! The server answers a request with `application/json` (the response) or
//! `text/event-stream` (notifications and requests of its own, then the
//! response); a notification with `202`.
//!
//! Which era the server speaks is learnt once per client, the way the
//! specification has a dual-era client do it: the first request is
//! `server/discover` at the modern revision ([`MODERN_PROTOCOL_VERSION`]).
//! A result naming that revision makes the server modern: every request
//! then carries the revision, the client's identity and capabilities in
//! its `_meta`, and the revision, method and tool name (and the
//! arguments a tool marks `x-mcp-header`) in headers; there is no session
//! to keep. A `4xx` whose body is not one of the modern errors (`-32020`
//! to `-32099`), or a JSON-RPC error that is not one, makes it legacy:
//! `initialize` fixes the revision (one of [`SUPPORTED_PROTOCOL_VERSIONS`])
//! and may assign a session (`Mcp-Session-Id`), sent with every later
//! request together with `MCP-Protocol-Version`. A `404` to a request that
//! carried the session means the server dropped it (a restart), and a
//! modern server refusing the revision or answering `400` like a legacy
//! one means it was replaced: either way the client learns the era again
//! and sends the request once more.
//!
//! Everything a server sends is bounded: one exchange reads at most
//! [`ClientConfig::max_result_bytes`] (a response, or an event stream in
//! all, so an endless stream ends there), and the caller bounds its time.
//! The standing `GET` stream a server may offer for notifications outside
//! a request is not opened: tool lists are refreshed when a
//! `notifications/tools/list_changed` arrives with a response, and after
//! [`ClientConfig::list_ttl`].

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use subs_protocol::sse::SseParser;

use crate::wire::{
    CallToolParams, CallToolResult, ClientCapabilities, DiscoverResult, ErrorObject, Implementation, InitializeParams,
    InitializeResult, LATEST_PROTOCOL_VERSION, ListToolsParams, ListToolsResult, METHOD_HEADER,
    MODERN_PROTOCOL_VERSION, Message, NAME_HEADER, Notification, PROTOCOL_VERSION_HEADER, ProgressParams,
    RESULT_INPUT_REQUIRED, Request, RequestId, RequestMeta, Response, SESSION_ID_HEADER, SUPPORTED_PROTOCOL_VERSIONS,
    Tool, code, meta, method,
};

/// A client's bounds.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The most bytes one exchange reads: a response body, or all of an
    /// event stream.
    pub max_result_bytes: usize,
    /// How long a tool list is used before it is listed again.
    pub list_ttl: Duration,
    /// The most tools a server's list may have (all pages together); the
    /// rest is dropped, and said in the log.
    pub max_tools: usize,
    /// The most pages of one listing.
    pub max_pages: usize,
    /// How long learning the server's era (`server/discover`, then
    /// `initialize` for a legacy server) and one listing may take.
    pub setup_timeout: Duration,
    /// Who the client says it is.
    pub client_info: Implementation,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_result_bytes: 4 << 20,
            list_ttl: Duration::from_secs(300),
            max_tools: 256,
            max_pages: 16,
            setup_timeout: Duration::from_secs(10),
            client_info: Implementation {
                name: "subs".to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                title: None,
            },
        }
    }
}

/// Why an exchange with a server failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The server could not be reached, or the exchange broke off.
    #[error("could not reach the server: {0}")]
    Transport(String),
    /// The server answered an HTTP error status.
    #[error("the server answered HTTP {status}: {body}")]
    Http {
        /// The status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// The server's answer is not valid JSON-RPC (or not the answer to
    /// what was asked).
    #[error("the server's answer is not valid JSON-RPC: {0}")]
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    #[error("the server answered JSON-RPC error {code}: {message}")]
    Rpc {
        /// The error's code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The server's answer is over the size limit.
    #[error("the server's answer is over the limit of {0} bytes")]
    TooLarge(usize),
    /// The server chose a revision this client does not speak.
    #[error("the server speaks protocol revision {0:?}, not one of {SUPPORTED_PROTOCOL_VERSIONS:?}")]
    Version(String),
    /// The exchange took longer than allowed.
    #[error("the server did not answer within {0:?}")]
    Timeout(Duration),
    /// A modern server refused a call's headers (`-32020`) once more after
    /// the tool was listed anew and the call sent with the new listing's
    /// headers: the server's message.
    #[error(
        "the server refused the call's headers (JSON-RPC error -32020) even after its tools were listed again: {0}"
    )]
    HeaderMismatch(String),
    /// A modern server's result asks the client for input
    /// (`input_required`), which subs never gives (it declares no client
    /// capability): the methods it asked for.
    #[error(
        "the server asks for input (`input_required`: {0}), which subs does not give: it declares no client \
         capabilities (elicitation, sampling, roots)"
    )]
    InputRequired(String),
}

impl McpError {
    /// Whether another try may succeed: a server restarting, overloaded
    /// or answering garbage may recover; an answer over the size limit or
    /// a revision it does not speak would come again.
    pub fn is_retryable(&self) -> bool {
        match self {
            McpError::Transport(_) | McpError::Protocol(_) | McpError::Timeout(_) => true,
            McpError::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            // The corrective retry the revision asks for already ran with
            // a fresh listing: the same exchange again would be refused
            // the same way.
            McpError::TooLarge(_) | McpError::Version(_) | McpError::HeaderMismatch(_) => false,
            // Asked again, the server would want the same input or
            // capability, which subs never gives.
            McpError::InputRequired(_) => false,
            McpError::Rpc { code: rpc, .. } => *rpc != code::MISSING_REQUIRED_CLIENT_CAPABILITY,
        }
    }
}

/// What the client learnt of the server: its era, and for a legacy
/// server its MCP session.
#[derive(Debug, Clone)]
struct Session {
    /// The id it assigned, if any (legacy only).
    id: Option<String>,
    /// The revision it chose (legacy) or every request carries (modern).
    version: String,
    /// The server speaks the stateless modern era.
    modern: bool,
}

/// Where a request's progress notifications go.
pub type OnProgress<'a> = &'a (dyn Fn(ProgressParams) + Send + Sync);

/// One server's client; see the [module docs](self).
pub struct Client {
    http: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    config: ClientConfig,
    session: tokio::sync::Mutex<Option<Session>>,
    tools: Mutex<Option<(Instant, Arc<Vec<Tool>>)>>,
    /// The `x-mcp-header` arguments of each listed tool (modern servers).
    mirrored: Mutex<std::collections::HashMap<String, crate::wire::MirroredParams>>,
    stale: AtomicBool,
    next_id: AtomicI64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the headers: they hold the server's credentials.
        f.debug_struct("Client").field("url", &self.url.as_str()).finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the server at `url`, sending `headers` with each
    /// request. Nothing is sent until the first call.
    pub fn new(
        http: reqwest::Client,
        url: reqwest::Url,
        headers: &[(String, String)],
        config: ClientConfig,
    ) -> Result<Self, String> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("`{name}` is not a header name"))?;
            let value =
                HeaderValue::from_str(value).map_err(|_| format!("the value of header `{name}` is not valid"))?;
            map.insert(name, value);
        }
        Ok(Self {
            http,
            url,
            headers: map,
            config,
            session: tokio::sync::Mutex::new(None),
            tools: Mutex::new(None),
            mirrored: Mutex::new(std::collections::HashMap::new()),
            stale: AtomicBool::new(false),
            next_id: AtomicI64::new(1),
        })
    }

    /// The server's URL.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// The server's tools: the cached list while it is fresh (younger than
    /// the TTL, and no `list_changed` heard since), else all pages of
    /// `tools/list` again.
    pub async fn tools(&self) -> Result<Arc<Vec<Tool>>, McpError> {
        if !self.stale.load(Ordering::Acquire) {
            let cached = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((at, tools)) = &*cached
                && at.elapsed() < self.config.list_ttl
            {
                return Ok(tools.clone());
            }
        }
        self.stale.store(false, Ordering::Release);
        let limit = self.config.setup_timeout;
        let listed = tokio::time::timeout(limit, self.list_all()).await.map_err(|_| McpError::Timeout(limit))??;
        let listed = Arc::new(listed);
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = Some((Instant::now(), listed.clone()));
        Ok(listed)
    }

    /// Forgets the cached tool list.
    pub fn forget_tools(&self) {
        self.stale.store(true, Ordering::Release);
    }

    async fn list_all(&self) -> Result<Vec<Tool>, McpError> {
        let mut tools = Vec::new();
        let mut cursor = None;
        let mut mirrored = std::collections::HashMap::new();
        for _ in 0..self.config.max_pages {
            let (result, modern) =
                self.request(method::TOOLS_LIST, &ListToolsParams { cursor: cursor.take() }, &[], None).await?;
            let page: ListToolsResult = serde_json::from_value(result)
                .map_err(|e| McpError::Protocol(format!("a tools/list result that is not a tool list: {e}")))?;
            for tool in page.tools {
                // A modern client mirrors `x-mcp-header` arguments, and
                // leaves out a tool whose annotations it cannot follow.
                if modern {
                    match crate::wire::mirrored_params(&tool.input_schema) {
                        Ok(params) if params.is_empty() => {}
                        Ok(params) => {
                            mirrored.insert(tool.name.clone(), params);
                        }
                        Err(why) => {
                            tracing::warn!(server = %self.url, tool = %tool.name, %why, "an MCP server's tool is left out");
                            continue;
                        }
                    }
                }
                tools.push(tool);
            }
            *self.mirrored.lock().unwrap_or_else(PoisonError::into_inner) = mirrored.clone();
            if tools.len() > self.config.max_tools {
                tracing::warn!(server = %self.url, max = self.config.max_tools, "an MCP server lists more tools than are kept");
                tools.truncate(self.config.max_tools);
                break;
            }
            match page.next_cursor {
                Some(next) if !next.is_empty() => cursor = Some(next),
                _ => return Ok(tools),
            }
        }
        Ok(tools)
    }

    /// Calls tool `name` with `arguments`; progress notifications go to
    /// `on_progress`. A tool's own failure is a result with `is_error`.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        on_progress: OnProgress<'_>,
    ) -> Result<CallToolResult, McpError> {
        let token = RequestId::String(format!("subs-{}", self.next_id.fetch_add(1, Ordering::Relaxed)));
        let headers = self.param_headers(name, &arguments);
        let params = CallToolParams {
            name: name.to_owned(),
            arguments: Some(arguments),
            meta: Some(RequestMeta { progress_token: Some(token.clone()) }),
        };
        let forward = |p: ProgressParams| {
            if p.progress_token == token {
                on_progress(p);
            }
        };
        let result = match self.request(method::TOOLS_CALL, &params, &headers, Some(&forward)).await {
            // The tool's schema changed since it was listed (its mirrored
            // arguments with it): list again and send once more.
            Err(McpError::Rpc { code: code::HEADER_MISMATCH, message }) => {
                tracing::info!(server = %self.url, tool = %name, %message, "an MCP server refused a call's headers; listing its tools again");
                self.forget_tools();
                self.tools().await?;
                let headers = self.param_headers(name, params.arguments.as_ref().unwrap_or(&Map::new()));
                match self.request(method::TOOLS_CALL, &params, &headers, Some(&forward)).await {
                    Err(McpError::Rpc { code: code::HEADER_MISMATCH, message }) => {
                        return Err(McpError::HeaderMismatch(message));
                    }
                    other => other?.0,
                }
            }
            other => other?.0,
        };
        serde_json::from_value(result)
            .map_err(|e| McpError::Protocol(format!("a tools/call result that is not a call result: {e}")))
    }

    /// The `Mcp-Param-*` headers of a call of `name` with `arguments`, by
    /// the tool's listed schema.
    fn param_headers(&self, name: &str, arguments: &Map<String, Value>) -> Vec<(String, String)> {
        match self.mirrored.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
            Some(mirrored) => crate::wire::param_headers(mirrored, arguments),
            None => Vec::new(),
        }
    }

    /// Ends the MCP session, if a legacy server assigned one (`DELETE`);
    /// a modern server keeps none.
    pub async fn close(&self) {
        let session = self.session.lock().await.take();
        if let Some(Session { id: Some(id), version, .. }) = session {
            let request = self
                .http
                .delete(self.url.clone())
                .headers(self.headers.clone())
                .header(SESSION_ID_HEADER, id)
                .header(PROTOCOL_VERSION_HEADER, version);
            let _ = tokio::time::timeout(self.config.setup_timeout, request.send()).await;
        }
    }

    /// Sends request `method` (after learning the server's era, and again
    /// once when the server dropped its session or was replaced) and
    /// returns its result, and whether the server is modern. `headers`
    /// are a modern request's mirrored arguments.
    async fn request(
        &self,
        method: &str,
        params: &impl serde::Serialize,
        headers: &[(String, String)],
        on_progress: Option<&(dyn Fn(ProgressParams) + Send + Sync)>,
    ) -> Result<(Value, bool), McpError> {
        let params = serde_json::to_value(params).unwrap_or(Value::Null);
        for fresh in [false, true] {
            let session = self.session(fresh).await?;
            let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
            let params = if session.modern { self.with_meta(params.clone()) } else { params.clone() };
            let message = Message::Request(Request::new(id.clone(), method, params));
            match self.post(Some(&session), &message, Some(&id), headers, on_progress).await {
                Err(Exchange::Expired) if !fresh => {
                    tracing::info!(server = %self.url, "an MCP server dropped its session; initializing again");
                    continue;
                }
                Err(Exchange::Modern(error)) if !fresh && error.code == code::UNSUPPORTED_PROTOCOL_VERSION => {
                    tracing::info!(server = %self.url, "an MCP server no longer speaks the revision; learning it again");
                    continue;
                }
                Err(Exchange::Failed(McpError::Http { status: 400, .. })) if !fresh && session.modern => {
                    tracing::info!(server = %self.url, "an MCP server answers like a legacy one; learning its era again");
                    continue;
                }
                Err(Exchange::Expired) => {
                    return Err(McpError::Http { status: 404, body: "the session was dropped again".to_owned() });
                }
                Err(e) => return Err(e.into_error()),
                Ok((value, _)) => return Ok((value.unwrap_or(Value::Null), session.modern)),
            }
        }
        unreachable!("the second pass returns")
    }

    /// `params` with the modern `_meta`: the revision, who the client is,
    /// and its capabilities (none: it answers no elicitation, sampling or
    /// roots).
    fn with_meta(&self, params: Value) -> Value {
        let mut params = match params {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let mut meta = match params.remove("_meta") {
            Some(Value::Object(meta)) => meta,
            _ => Map::new(),
        };
        meta.insert(meta::PROTOCOL_VERSION.to_owned(), Value::from(MODERN_PROTOCOL_VERSION));
        meta.insert(meta::CLIENT_INFO.to_owned(), serde_json::to_value(&self.config.client_info).unwrap_or_default());
        meta.insert(meta::CLIENT_CAPABILITIES.to_owned(), Value::Object(Map::new()));
        params.insert("_meta".to_owned(), Value::Object(meta));
        Value::Object(params)
    }

    /// What the client knows of the server, learnt first when there is
    /// nothing yet or `fresh` asks to learn again (the server dropped its
    /// session, or was replaced).
    async fn session(&self, fresh: bool) -> Result<Session, McpError> {
        let mut held = self.session.lock().await;
        if let Some(session) = held.as_ref().filter(|_| !fresh) {
            return Ok(session.clone());
        }
        *held = None;
        let limit = self.config.setup_timeout;
        let session = tokio::time::timeout(limit, self.discover()).await.map_err(|_| McpError::Timeout(limit))??;
        // Another session, or another server, may list other tools.
        self.forget_tools();
        *held = Some(session.clone());
        Ok(session)
    }

    /// Learns the server's era: `server/discover` at the modern revision;
    /// a legacy server's refusal leads to `initialize`.
    async fn discover(&self) -> Result<Session, McpError> {
        let modern = Session { id: None, version: MODERN_PROTOCOL_VERSION.to_owned(), modern: true };
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let params = self.with_meta(Value::Object(Map::new()));
        let message = Message::Request(Request::new(id.clone(), method::SERVER_DISCOVER, params));
        let refusal = match self.post(Some(&modern), &message, Some(&id), &[], None).await {
            Ok((result, _)) => {
                let result: DiscoverResult = serde_json::from_value(result.unwrap_or(Value::Null))
                    .map_err(|e| McpError::Protocol(format!("a server/discover result that is not one: {e}")))?;
                if result.supported_versions.iter().any(|v| v == MODERN_PROTOCOL_VERSION) {
                    tracing::debug!(server = %self.url, "an MCP server speaks the modern revision");
                    return Ok(modern);
                }
                format!("it speaks {:?}", result.supported_versions)
            }
            Err(Exchange::Modern(error)) if error.code == code::UNSUPPORTED_PROTOCOL_VERSION => {
                // A modern server of other revisions: a legacy one among
                // them is reached through `initialize`.
                let supported: Vec<String> = error
                    .data
                    .as_ref()
                    .and_then(|d| d.get("supported"))
                    .and_then(|s| serde_json::from_value(s.clone()).ok())
                    .unwrap_or_default();
                if !supported.iter().any(|v| SUPPORTED_PROTOCOL_VERSIONS.contains(&v.as_str())) {
                    return Err(McpError::Version(supported.join(", ")));
                }
                format!("it speaks {supported:?}")
            }
            Err(Exchange::Modern(error)) => {
                return Err(McpError::Rpc { code: error.code, message: clip(&error.message) });
            }
            // A server that cannot be reached, or is failing, is tried
            // again later rather than taken for a legacy one.
            Err(Exchange::Failed(
                e @ (McpError::Transport(_) | McpError::Timeout(_) | McpError::TooLarge(_) | McpError::Version(_)),
            )) => return Err(e),
            Err(Exchange::Failed(e @ McpError::Http { status: 408 | 429 | 500.., .. })) => return Err(e),
            // Anything else is a legacy server refusing a request outside
            // a session, or a method it does not know, in its own way.
            Err(Exchange::Failed(other)) => other.to_string(),
            Err(Exchange::Expired) => "the session is unknown".to_owned(),
        };
        tracing::debug!(server = %self.url, %refusal, "an MCP server does not speak the modern revision; initializing");
        self.initialize().await
    }

    async fn initialize(&self) -> Result<Session, McpError> {
        let params = InitializeParams {
            protocol_version: LATEST_PROTOCOL_VERSION.to_owned(),
            capabilities: ClientCapabilities::default(),
            client_info: self.config.client_info.clone(),
        };
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let message = Message::Request(Request::new(id.clone(), method::INITIALIZE, params));
        let (result, session_id) =
            self.post(None, &message, Some(&id), &[], None).await.map_err(Exchange::into_error)?;
        let result: InitializeResult = serde_json::from_value(result.unwrap_or(Value::Null))
            .map_err(|e| McpError::Protocol(format!("an initialize result that is not one: {e}")))?;
        if !SUPPORTED_PROTOCOL_VERSIONS.contains(&result.protocol_version.as_str()) {
            return Err(McpError::Version(result.protocol_version));
        }
        let session = Session { id: session_id, version: result.protocol_version, modern: false };
        let initialized = Message::Notification(Notification::new(method::INITIALIZED, Value::Null));
        self.post(Some(&session), &initialized, None, &[], None).await.map_err(Exchange::into_error)?;
        Ok(session)
    }

    /// POSTs `message` (with `extra` headers) and reads the answer to
    /// request `id` (none for a notification): the result, and the session
    /// id the server gave.
    async fn post(
        &self,
        session: Option<&Session>,
        message: &Message,
        id: Option<&RequestId>,
        extra: &[(String, String)],
        on_progress: Option<&(dyn Fn(ProgressParams) + Send + Sync)>,
    ) -> Result<(Option<Value>, Option<String>), Exchange> {
        let mut request = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(message).unwrap_or_default());
        if let Some(session) = session {
            request = request.header(PROTOCOL_VERSION_HEADER, &session.version);
            if let Some(sid) = &session.id {
                request = request.header(SESSION_ID_HEADER, sid);
            }
            if session.modern
                && let Message::Request(sent) = message
            {
                request = request.header(METHOD_HEADER, &sent.method);
                if let Some(name) = sent.params.as_ref().and_then(|p| p.get("name")).and_then(Value::as_str) {
                    request = request.header(NAME_HEADER, crate::wire::header_value(name));
                }
                for (name, value) in extra {
                    request = request.header(name, value);
                }
            }
        }
        let mut response = request.send().await.map_err(|e| Exchange::Failed(transport(&e)))?;
        let status = response.status();
        if status.as_u16() == 404 && session.is_some_and(|s| s.id.is_some()) {
            return Err(Exchange::Expired);
        }
        if !status.is_success() {
            let body = read_capped(&mut response, 4096).await.unwrap_or_default();
            // A modern server's refusal is a JSON-RPC error of its own
            // range; anything else is an HTTP error as it is.
            if let Ok(Message::Error(error)) = Message::from_slice(&body)
                && code::is_modern(error.error.code)
            {
                return Err(Exchange::Modern(error.error));
            }
            let body = String::from_utf8_lossy(&body).trim().chars().take(512).collect();
            return Err(Exchange::Failed(McpError::Http { status: status.as_u16(), body }));
        }
        let session_id = response
            .headers()
            .get(SESSION_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .filter(|s| !s.is_empty() && s.len() <= 256);
        let Some(id) = id else { return Ok((None, session_id)) };
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        let limit = self.config.max_result_bytes;
        let answer = match content_type.as_str() {
            "application/json" => {
                let body = read_capped(&mut response, limit).await.map_err(Exchange::Failed)?;
                let message = Message::from_slice(&body).map_err(|e| Exchange::Failed(McpError::Protocol(e.0)))?;
                self.take(message, id, session, on_progress).await.map_err(Exchange::Failed)?
            }
            "text/event-stream" => {
                let mut parser = SseParser::with_limit(limit);
                let mut read = 0usize;
                let mut answer = None;
                'stream: loop {
                    let chunk = response.chunk().await.map_err(|e| Exchange::Failed(transport(&e)))?;
                    let (events, last) = match chunk {
                        Some(chunk) => {
                            read += chunk.len();
                            if read > limit {
                                return Err(Exchange::Failed(McpError::TooLarge(limit)));
                            }
                            let events =
                                parser.push(&chunk).map_err(|_| Exchange::Failed(McpError::TooLarge(limit)))?;
                            (events, false)
                        }
                        None => (parser.finish().into_iter().collect(), true),
                    };
                    for event in events {
                        if event.data.trim().is_empty() {
                            continue;
                        }
                        let message = Message::from_slice(event.data.as_bytes())
                            .map_err(|e| Exchange::Failed(McpError::Protocol(e.0)))?;
                        if let Some(value) =
                            self.take(message, id, session, on_progress).await.map_err(Exchange::Failed)?
                        {
                            answer = Some(value);
                            break 'stream;
                        }
                    }
                    if last {
                        break;
                    }
                }
                answer
            }
            other => {
                return Err(Exchange::Failed(McpError::Protocol(format!(
                    "the answer has content type `{other}`, neither application/json nor text/event-stream"
                ))));
            }
        };
        match answer {
            Some(value) => Ok((Some(value), session_id)),
            None => Err(Exchange::Failed(McpError::Protocol(format!(
                "the answer ended without a response to request {id}"
            )))),
        }
    }

    /// Handles one message read in answer to request `id`: its response
    /// (the result), or something on the way (progress, a changed tool
    /// list, a request of the server's, answered).
    async fn take(
        &self,
        message: Message,
        id: &RequestId,
        session: Option<&Session>,
        on_progress: Option<&(dyn Fn(ProgressParams) + Send + Sync)>,
    ) -> Result<Option<Value>, McpError> {
        match message {
            Message::Response(response) if &response.id == id => {
                // The client declares no capability, so a modern server
                // has nothing to ask it for; one that does is answered
                // with an error rather than a retry that could not help.
                if response.result.get("resultType").and_then(Value::as_str) == Some(RESULT_INPUT_REQUIRED) {
                    return Err(McpError::InputRequired(asked_for(&response.result)));
                }
                Ok(Some(response.result))
            }
            Message::Error(error) if error.id.as_ref() == Some(id) || error.id.is_none() => {
                Err(McpError::Rpc { code: error.error.code, message: clip(&error.error.message) })
            }
            Message::Response(other) => {
                Err(McpError::Protocol(format!("a response to request {}, not {id}", other.id)))
            }
            Message::Error(other) => Err(McpError::Protocol(format!(
                "an error for request {}, not {id}: {}",
                other.id.map_or("null".to_owned(), |i| i.to_string()),
                clip(&other.error.message)
            ))),
            Message::Notification(note) => {
                match note.method.as_str() {
                    method::PROGRESS => {
                        if let (Some(on_progress), Some(params)) = (on_progress, note.params)
                            && let Ok(progress) = serde_json::from_value::<ProgressParams>(params)
                        {
                            on_progress(progress);
                        }
                    }
                    method::TOOLS_LIST_CHANGED => self.forget_tools(),
                    _ => {}
                }
                Ok(None)
            }
            Message::Request(request) => {
                // A modern server sends no requests; one that does is not
                // answered (the era has no responses from clients).
                if session.is_some_and(|s| s.modern) {
                    return Ok(None);
                }
                // Pings are answered; sampling, roots and elicitation are
                // not offered (the client declares no capability), so a
                // server asking for them is told so, by name, rather than
                // left waiting.
                let answer = if request.method == method::PING {
                    Message::Response(Response::new(request.id, serde_json::json!({})))
                } else {
                    let why = match capability_of(&request.method) {
                        Some(capability) => format!(
                            "subs does not answer `{}`: it declared no `{capability}` capability",
                            request.method
                        ),
                        None => format!("subs does not answer `{}`", request.method),
                    };
                    tracing::info!(server = %self.url, method = %request.method, "an MCP server's request is refused");
                    Message::Error(crate::wire::ErrorResponse::new(Some(request.id), code::METHOD_NOT_FOUND, why))
                };
                self.answer(session, &answer).await;
                Ok(None)
            }
        }
    }
}

impl Client {
    /// POSTs an answer to a server's request; the server's reply (`202`)
    /// is not read further.
    async fn answer(&self, session: Option<&Session>, message: &Message) {
        let mut request = self
            .http
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(message).unwrap_or_default());
        if let Some(session) = session {
            request = request.header(PROTOCOL_VERSION_HEADER, &session.version);
            if let Some(sid) = &session.id {
                request = request.header(SESSION_ID_HEADER, sid);
            }
        }
        let _ = tokio::time::timeout(self.config.setup_timeout, request.send()).await;
    }
}

/// The client capability a server's request `method` needs, if it is one
/// of the client features.
fn capability_of(method: &str) -> Option<&'static str> {
    match method {
        method::ELICITATION_CREATE => Some("elicitation"),
        method::SAMPLING_CREATE_MESSAGE => Some("sampling"),
        method::ROOTS_LIST => Some("roots"),
        _ => None,
    }
}

/// The methods an `input_required` result asks for, for its error: each
/// input request's `method`, at most a few, clipped.
fn asked_for(result: &Value) -> String {
    let methods: Vec<&str> = result
        .get("inputRequests")
        .and_then(Value::as_object)
        .map(|requests| requests.values().filter_map(|r| r.get("method").and_then(Value::as_str)).take(4).collect())
        .unwrap_or_default();
    if methods.is_empty() { "nothing named".to_owned() } else { clip(&methods.join(", ")) }
}

/// How one POST failed.
enum Exchange {
    /// The server no longer knows the session (404).
    Expired,
    /// A modern server refused the request with one of its errors.
    Modern(ErrorObject),
    /// Anything else.
    Failed(McpError),
}

impl Exchange {
    fn into_error(self) -> McpError {
        match self {
            Exchange::Expired => McpError::Http { status: 404, body: "the session is unknown".to_owned() },
            Exchange::Modern(error) => McpError::Rpc { code: error.code, message: clip(&error.message) },
            Exchange::Failed(e) => e,
        }
    }
}

fn transport(error: &reqwest::Error) -> McpError {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    McpError::Transport(clip(&text))
}

fn clip(text: &str) -> String {
    if text.len() <= 1024 {
        return text.to_owned();
    }
    let mut end = 1024;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes cut)", &text[..end], text.len() - end)
}

/// The body, at most `limit` bytes: a longer one is refused.
async fn read_capped(response: &mut reqwest::Response, limit: usize) -> Result<Vec<u8>, McpError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport(&e))? {
        if body.len() + chunk.len() > limit {
            return Err(McpError::TooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn refusals_that_would_come_again_are_not_retried() {
        assert!(!McpError::HeaderMismatch("Mcp-Param-Region".into()).is_retryable());
        assert!(!McpError::InputRequired("elicitation/create".into()).is_retryable());
        let missing = McpError::Rpc { code: code::MISSING_REQUIRED_CLIENT_CAPABILITY, message: "x".into() };
        assert!(!missing.is_retryable());
        // A first mismatch is retried by the client itself; other JSON-RPC
        // errors by the call's policy.
        assert!(McpError::Rpc { code: code::HEADER_MISMATCH, message: "x".into() }.is_retryable());
        assert!(McpError::Rpc { code: code::INTERNAL_ERROR, message: "x".into() }.is_retryable());
    }

    #[test]
    fn an_input_request_names_what_it_asks_for() {
        let result = json!({"resultType": "input_required", "inputRequests": {
            "a": {"method": "elicitation/create", "params": {}},
            "b": {"method": "sampling/createMessage", "params": {}}}});
        assert_eq!(asked_for(&result), "elicitation/create, sampling/createMessage");
        assert_eq!(asked_for(&json!({"resultType": "input_required"})), "nothing named");
        assert_eq!(capability_of("elicitation/create"), Some("elicitation"));
        assert_eq!(capability_of("sampling/createMessage"), Some("sampling"));
        assert_eq!(capability_of("roots/list"), Some("roots"));
        assert_eq!(capability_of("tools/call"), None);
    }
}
