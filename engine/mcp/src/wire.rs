//! The Model Context Protocol on the wire: JSON-RPC 2.0 envelopes and the
//! MCP payloads subs reads or writes, as client (tools of a tenant's MCP
//! servers) and as server (an agent offered as an MCP tool).
//!
//! Field names follow the specification's camelCase. Fields the
//! specification may add later are ignored when read (serde's default),
//! so a newer peer is not refused for an extra key; what subs needs is
//! typed, and the rest of a payload it passes on stays a
//! [`serde_json::Value`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// The revision subs offers in `initialize`, the newest of the handshake
/// era it speaks.
pub const LATEST_PROTOCOL_VERSION: &str = "2025-11-25";

/// The revisions subs accepts from a peer's `initialize`, newest first:
/// those with the Streamable HTTP transport and the `initialize`
/// handshake (the legacy era).
pub const SUPPORTED_PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];

/// The stateless revision subs speaks (the modern era): no handshake and
/// no session; every request carries its revision, the client's identity
/// and capabilities in `_meta`, and the revision in
/// [`PROTOCOL_VERSION_HEADER`].
pub const MODERN_PROTOCOL_VERSION: &str = "2026-07-28";

/// The modern revisions subs speaks, newest first.
pub const MODERN_PROTOCOL_VERSIONS: &[&str] = &[MODERN_PROTOCOL_VERSION];

/// The `_meta` keys of the modern era.
pub mod meta {
    /// The request's revision.
    pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
    /// Who the client is.
    pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
    /// What the client answers (elicitation, sampling, roots).
    pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
    /// Who the server is, in a result's `_meta`.
    pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
}

/// The HTTP header mirroring a modern request's method.
pub const METHOD_HEADER: &str = "mcp-method";

/// The HTTP header mirroring a modern `tools/call`'s tool name (or a
/// resource's URI, a prompt's name).
pub const NAME_HEADER: &str = "mcp-name";

/// The prefix of the headers a modern client mirrors a tool's
/// `x-mcp-header` arguments into.
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// The result of a modern request that needs more input from the client
/// (`resultType: "input_required"`); [`RESULT_COMPLETE`] for any other.
pub const RESULT_INPUT_REQUIRED: &str = "input_required";

/// The `resultType` of a result that is final.
pub const RESULT_COMPLETE: &str = "complete";

/// The HTTP header carrying the session the server assigned in its
/// answer to `initialize`.
pub const SESSION_ID_HEADER: &str = "mcp-session-id";

/// The HTTP header carrying the negotiated revision on every request
/// after `initialize`.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// Method names.
pub mod method {
    /// The handshake's request.
    pub const INITIALIZE: &str = "initialize";
    /// The client's notification that ends the handshake.
    pub const INITIALIZED: &str = "notifications/initialized";
    /// A liveness check either side may send.
    pub const PING: &str = "ping";
    /// A page of the server's tools.
    pub const TOOLS_LIST: &str = "tools/list";
    /// One tool call.
    pub const TOOLS_CALL: &str = "tools/call";
    /// The server's notice that its tool list changed.
    pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
    /// Progress of a request that carried a progress token.
    pub const PROGRESS: &str = "notifications/progress";
    /// A request's sender gave up on it.
    pub const CANCELLED: &str = "notifications/cancelled";
    /// The server asks the client's user for structured input.
    pub const ELICITATION_CREATE: &str = "elicitation/create";
    /// The server asks the client to sample its model.
    pub const SAMPLING_CREATE_MESSAGE: &str = "sampling/createMessage";
    /// The server asks for the client's roots.
    pub const ROOTS_LIST: &str = "roots/list";
    /// A log line from the server.
    pub const LOGGING_MESSAGE: &str = "notifications/message";
    /// The server's revisions, capabilities and identity (modern era).
    pub const SERVER_DISCOVER: &str = "server/discover";
}

/// JSON-RPC and MCP error codes.
pub mod code {
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a valid request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The method's parameters are not valid.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The receiver failed while handling the request.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// The request was cancelled (used by subs when a cancelled request
    /// must still be answered).
    pub const REQUEST_CANCELLED: i64 = -32800;
    /// A modern request's headers do not match its body, or one it must
    /// have is missing.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// A modern request needs a client capability the request did not
    /// declare.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// The request's revision is not one the server speaks; `data` has
    /// `supported` and `requested`.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

    /// Whether `code` is one the specification reserves for itself
    /// (`-32020` to `-32099`): a peer answering one speaks the modern era.
    pub fn is_modern(code: i64) -> bool {
        (-32099..=-32020).contains(&code)
    }
}

/// The `"jsonrpc": "2.0"` member: written as `"2.0"`, and any other
/// value refused when read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Version;

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("2.0")
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let version = String::deserialize(deserializer)?;
        if version == "2.0" {
            Ok(Version)
        } else {
            Err(serde::de::Error::custom(format!("jsonrpc must be \"2.0\", not {version:?}")))
        }
    }
}

/// A request id, or a progress token: a string or an integer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Number(n) => write!(f, "{n}"),
            RequestId::String(s) => write!(f, "{s:?}"),
        }
    }
}

/// A progress token: the same shape as a request id.
pub type ProgressToken = RequestId;

/// A request: expects a response with the same id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: Version,
    /// Echoed by the response.
    pub id: RequestId,
    /// What is asked.
    pub method: String,
    /// The method's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Request {
    /// A request of `method` with `params`.
    pub fn new(id: RequestId, method: &str, params: impl Serialize) -> Self {
        Request {
            jsonrpc: Version,
            id,
            method: method.to_owned(),
            params: Some(serde_json::to_value(params).unwrap_or(Value::Null)).filter(|p| !p.is_null()),
        }
    }
}

/// A notification: no id, no response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Always `"2.0"`.
    pub jsonrpc: Version,
    /// What is notified.
    pub method: String,
    /// The notification's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Notification {
    /// A notification of `method` with `params`.
    pub fn new(method: &str, params: impl Serialize) -> Self {
        Notification {
            jsonrpc: Version,
            method: method.to_owned(),
            params: Some(serde_json::to_value(params).unwrap_or(Value::Null)).filter(|p| !p.is_null()),
        }
    }
}

/// A successful response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: Version,
    /// The request's id.
    pub id: RequestId,
    /// The method's result.
    pub result: Value,
}

impl Response {
    /// The response to request `id`.
    pub fn new(id: RequestId, result: impl Serialize) -> Self {
        Response { jsonrpc: Version, id, result: serde_json::to_value(result).unwrap_or(Value::Null) }
    }
}

/// A failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// Always `"2.0"`.
    pub jsonrpc: Version,
    /// The request's id; `null` when it could not be read.
    pub id: Option<RequestId>,
    /// What went wrong.
    pub error: ErrorObject,
}

impl ErrorResponse {
    /// The error answer to request `id`.
    pub fn new(id: Option<RequestId>, code: i64, message: impl Into<String>) -> Self {
        ErrorResponse { jsonrpc: Version, id, error: ErrorObject { code, message: message.into(), data: None } }
    }
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of [`code`] or the sender's own.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// More about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Any one JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Message {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A successful response.
    Response(Response),
    /// A failed response.
    Error(ErrorResponse),
}

/// Why a JSON value is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a JSON-RPC 2.0 message: {0}")]
pub struct InvalidMessage(pub String);

impl Message {
    /// Reads one message, naming what makes it invalid when it is not one
    /// (an untagged serde enum would only say that no variant matched).
    pub fn from_value(value: Value) -> Result<Message, InvalidMessage> {
        let Value::Object(object) = &value else {
            return Err(InvalidMessage(format!("expected an object, got {}", kind(&value))));
        };
        let invalid = |e: serde_json::Error| InvalidMessage(e.to_string());
        match object.get("jsonrpc") {
            Some(Value::String(v)) if v == "2.0" => {}
            Some(other) => return Err(InvalidMessage(format!("jsonrpc must be \"2.0\", not {other}"))),
            None => return Err(InvalidMessage("no \"jsonrpc\" member".into())),
        }
        if object.contains_key("method") {
            if object.contains_key("id") {
                serde_json::from_value(value).map(Message::Request).map_err(invalid)
            } else {
                serde_json::from_value(value).map(Message::Notification).map_err(invalid)
            }
        } else if object.contains_key("error") {
            serde_json::from_value(value).map(Message::Error).map_err(invalid)
        } else if object.contains_key("result") {
            serde_json::from_value(value).map(Message::Response).map_err(invalid)
        } else {
            Err(InvalidMessage("neither \"method\", \"result\" nor \"error\"".into()))
        }
    }

    /// Reads one message from bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Message, InvalidMessage> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| InvalidMessage(format!("not JSON: {e}")))?;
        Message::from_value(value)
    }

    /// The id of a request or response.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            Message::Request(r) => Some(&r.id),
            Message::Response(r) => Some(&r.id),
            Message::Error(e) => e.id.as_ref(),
            Message::Notification(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Message::from_value(Value::deserialize(deserializer)?).map_err(serde::de::Error::custom)
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array (batches are not part of MCP)",
        Value::Object(_) => "an object",
    }
}

/// A program's name and version, as each side introduces itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Implementation {
    /// Machine name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `initialize`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// The revision the client offers (its newest).
    pub protocol_version: String,
    /// What the client can do.
    #[serde(default)]
    pub capabilities: ClientCapabilities,
    /// Who the client is.
    pub client_info: Implementation,
}

/// What a client can do. Each present member declares a capability; its
/// value holds the capability's options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientCapabilities {
    /// The client answers `elicitation/create`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<Value>,
    /// The client answers `roots/list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roots: Option<Value>,
    /// The client answers `sampling/createMessage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Value>,
    /// Non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Value>,
}

/// `initialize`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The revision the server chose: the client's offer when it speaks
    /// it, else its own newest.
    pub protocol_version: String,
    /// What the server offers.
    #[serde(default)]
    pub capabilities: ServerCapabilities,
    /// Who the server is.
    pub server_info: Implementation,
    /// How to use the server, for a model's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// What a server offers. Each present member declares a capability.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerCapabilities {
    /// The server has tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsCapability>,
    /// The server has prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompts: Option<Value>,
    /// The server has resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
    /// The server sends log messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logging: Option<Value>,
    /// The server completes arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<Value>,
    /// Non-standard capabilities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experimental: Option<Value>,
}

/// The tools capability's options.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolsCapability {
    /// The server sends `notifications/tools/list_changed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list_changed: Option<bool>,
}

/// `tools/list`'s parameters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListToolsParams {
    /// The previous page's `nextCursor`; none for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One page of `tools/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// This page's tools.
    pub tools: Vec<Tool>,
    /// Where the next page starts; none on the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A tool a server offers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// Its name on the server.
    pub name: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments (an object schema).
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, when it returns one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Hints (read-only, destructive, idempotent, open-world).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// A request's `_meta`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestMeta {
    /// Asks the receiver for `notifications/progress` with this token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_token: Option<ProgressToken>,
}

/// `tools/call`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallToolParams {
    /// The tool's name on the server.
    pub name: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
    /// The progress token, if progress is wanted.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<RequestMeta>,
}

/// `tools/call`'s result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// What the tool returned, for the model.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// The result as JSON, matching the tool's `outputSchema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// The tool failed; `content` says why.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

/// One piece of a tool's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
        /// Audience and priority hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Value>,
    },
    /// An image, base64.
    Image {
        /// Base64 of the image.
        data: String,
        /// Its media type.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Audience and priority hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Value>,
    },
    /// Audio, base64.
    Audio {
        /// Base64 of the audio.
        data: String,
        /// Its media type.
        #[serde(rename = "mimeType")]
        mime_type: String,
        /// Audience and priority hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Value>,
    },
    /// A link to a resource the server can read.
    ResourceLink {
        /// The resource's URI.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its media type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Audience and priority hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Value>,
    },
    /// A resource embedded whole.
    Resource {
        /// Its contents.
        resource: ResourceContents,
        /// Audience and priority hints.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Value>,
    },
}

/// An embedded resource's contents: text or base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ResourceContents {
    /// Text contents.
    Text {
        /// The resource's URI.
        uri: String,
        /// Its media type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// The text.
        text: String,
    },
    /// Binary contents.
    Blob {
        /// The resource's URI.
        uri: String,
        /// Its media type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Base64 of the bytes.
        blob: String,
    },
}

/// `notifications/progress`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProgressParams {
    /// The token of the request this is about.
    pub progress_token: ProgressToken,
    /// How far it is; grows with each notification.
    pub progress: f64,
    /// The total, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// What is happening.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `notifications/cancelled`'s parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelledParams {
    /// The request given up on.
    pub request_id: RequestId,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `elicitation/create`'s parameters (form mode).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ElicitRequestParams {
    /// `"form"` (the default when absent) or `"url"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// What to ask the user.
    pub message: String,
    /// The answer's schema: a flat object of primitive properties.
    pub requested_schema: Value,
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElicitAction {
    /// Answered; `content` holds the answer.
    Accept,
    /// Refused to answer.
    Decline,
    /// Dismissed without choosing.
    Cancel,
}

/// `elicitation/create`'s result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The answer, when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
}

/// `server/discover`'s result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// The revisions the server speaks.
    #[serde(default)]
    pub supported_versions: Vec<String>,
    /// What it offers.
    #[serde(default)]
    pub capabilities: ServerCapabilities,
    /// How to use the server, for a model's prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// A text as an HTTP header value the way the modern transport mirrors
/// body values: as is when it is visible ASCII without surrounding
/// spaces, else `=?base64?…?=` of its UTF-8 bytes.
pub fn header_value(text: &str) -> String {
    use base64::Engine as _;
    let visible = text.bytes().all(|b| (0x20..0x7f).contains(&b));
    let padded = text.starts_with(' ') || text.ends_with(' ');
    let sentinel = text.starts_with("=?base64?") && text.ends_with("?=");
    let plain = visible && !padded && !sentinel;
    if plain {
        text.to_owned()
    } else {
        format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(text))
    }
}

/// The text a mirrored header value stands for ([`header_value`]
/// reversed); `None` when it is not valid.
pub fn header_text(value: &str) -> Option<String> {
    use base64::Engine as _;
    match value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) {
        Some(encoded) => String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).ok()?).ok(),
        None => Some(value.to_owned()),
    }
}

/// The arguments a tool's schema mirrors into headers: each header's
/// name part and the path of properties to its value.
pub type MirroredParams = Vec<(String, Vec<String>)>;

/// The arguments a tool's input schema asks a modern client to mirror
/// into headers (`x-mcp-header` on a property reached through
/// `properties` alone): each header's name part and the property path.
/// An error names why the annotations are not valid (the client then
/// leaves the tool out).
pub fn mirrored_params(schema: &Value) -> Result<MirroredParams, String> {
    fn reachable(schema: &Value, path: &mut Vec<String>, found: &mut Vec<(String, Vec<String>)>) -> Result<(), String> {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Ok(()) };
        for (name, property) in properties {
            path.push(name.clone());
            if let Some(header) = property.get("x-mcp-header") {
                let header = header.as_str().ok_or_else(|| format!("`x-mcp-header` of `{name}` is not a string"))?;
                let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
                if header.is_empty() || !header.chars().all(token) {
                    return Err(format!("`x-mcp-header` `{}` is not a header name", header.escape_debug()));
                }
                let kind = property.get("type").and_then(Value::as_str);
                if !matches!(kind, Some("string" | "integer" | "boolean")) {
                    return Err(format!("`x-mcp-header` `{header}` is on `{name}`, not a string, integer or boolean"));
                }
                if found.iter().any(|(h, _)| h.eq_ignore_ascii_case(header)) {
                    return Err(format!("`x-mcp-header` `{header}` is given twice"));
                }
                found.push((header.to_owned(), path.clone()));
            }
            reachable(property, path, found)?;
            path.pop();
        }
        Ok(())
    }
    fn count(value: &Value) -> usize {
        match value {
            Value::Object(map) => map.iter().map(|(k, v)| usize::from(k == "x-mcp-header") + count(v)).sum(),
            Value::Array(items) => items.iter().map(count).sum(),
            _ => 0,
        }
    }
    let mut found = Vec::new();
    reachable(schema, &mut Vec::new(), &mut found)?;
    if count(schema) != found.len() {
        return Err("an `x-mcp-header` is on a property not reached through `properties` alone".to_owned());
    }
    Ok(found)
}

/// The `Mcp-Param-*` headers of a call with `arguments` to a tool whose
/// schema mirrors `params` ([`mirrored_params`]): one per value present
/// (`null` and missing values have none).
pub fn param_headers(params: &[(String, Vec<String>)], arguments: &Map<String, Value>) -> Vec<(String, String)> {
    let mut headers = Vec::new();
    for (header, path) in params {
        let mut value = None;
        let mut at = arguments;
        for (i, key) in path.iter().enumerate() {
            match at.get(key) {
                Some(Value::Object(inner)) if i + 1 < path.len() => at = inner,
                Some(found) if i + 1 == path.len() => value = Some(found),
                _ => break,
            }
        }
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => v.to_string(),
            _ => continue,
        };
        headers.push((format!("{PARAM_HEADER_PREFIX}{header}"), header_value(&text)));
    }
    headers
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn messages_are_told_apart_and_invalid_ones_say_why() {
        let request = Message::from_value(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})).unwrap();
        assert!(matches!(request, Message::Request(Request { id: RequestId::Number(1), .. })));
        let note = Message::from_value(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        assert!(matches!(note, Message::Notification(_)));
        let ok = Message::from_value(json!({"jsonrpc": "2.0", "id": "a", "result": {}})).unwrap();
        assert_eq!(ok.id(), Some(&RequestId::String("a".into())));
        let err = Message::from_value(json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}));
        assert!(matches!(err, Ok(Message::Error(ErrorResponse { id: None, .. }))));

        let wrong = Message::from_value(json!({"jsonrpc": "1.0", "id": 1, "result": {}})).unwrap_err();
        assert!(wrong.0.contains("2.0"), "{wrong}");
        let batch = Message::from_value(json!([])).unwrap_err();
        assert!(batch.0.contains("array"), "{batch}");
        let neither = Message::from_value(json!({"jsonrpc": "2.0", "id": 1})).unwrap_err();
        assert!(neither.0.contains("neither"), "{neither}");
        assert!(Message::from_slice(b"<html>").unwrap_err().0.contains("not JSON"));
    }

    #[test]
    fn a_call_result_reads_every_content_kind() {
        let result: CallToolResult = serde_json::from_value(json!({
            "content": [
                {"type": "text", "text": "hi"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
                {"type": "audio", "data": "AA==", "mimeType": "audio/wav"},
                {"type": "resource_link", "uri": "file:///a", "name": "a"},
                {"type": "resource", "resource": {"uri": "file:///b", "text": "b"}},
                {"type": "resource", "resource": {"uri": "file:///c", "blob": "AA==", "mimeType": "x/y"}}
            ],
            "structuredContent": {"n": 1},
            "isError": true,
            "_meta": {"later": true}
        }))
        .unwrap();
        assert_eq!(result.content.len(), 6);
        assert!(result.is_error);
        assert!(matches!(&result.content[4], ContentBlock::Resource { resource: ResourceContents::Text { .. }, .. }));
        assert!(matches!(&result.content[5], ContentBlock::Resource { resource: ResourceContents::Blob { .. }, .. }));
        let back = serde_json::to_value(&result).unwrap();
        assert_eq!(back["structuredContent"], json!({"n": 1}));
        assert_eq!(back["content"][1]["mimeType"], "image/png");
    }

    #[test]
    fn requests_write_the_specifications_names() {
        let call = Request::new(
            RequestId::Number(7),
            method::TOOLS_CALL,
            CallToolParams {
                name: "add".into(),
                arguments: Some(Map::from_iter([("a".to_owned(), json!(1))])),
                meta: Some(RequestMeta { progress_token: Some(RequestId::String("p".into())) }),
            },
        );
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "add", "arguments": {"a": 1}, "_meta": {"progressToken": "p"}}})
        );
        let init: InitializeResult = serde_json::from_value(json!({
            "protocolVersion": "2025-06-18",
            "capabilities": {"tools": {"listChanged": true}},
            "serverInfo": {"name": "s", "version": "1"}
        }))
        .unwrap();
        assert_eq!(init.capabilities.tools.unwrap().list_changed, Some(true));
        let elicit: ElicitResult =
            serde_json::from_value(json!({"action": "accept", "content": {"ok": true}})).unwrap();
        assert_eq!(elicit.action, ElicitAction::Accept);
    }

    #[test]
    fn mirrored_values_are_plain_ascii_or_base64() {
        assert_eq!(header_value("us-west1"), "us-west1");
        assert_eq!(header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
        for text in ["us-west1", "Hello, 世界", " padded ", "=?base64?literal?="] {
            assert_eq!(header_text(&header_value(text)).as_deref(), Some(text));
        }
        assert_eq!(header_text("=?base64?not base64?="), None);
    }

    #[test]
    fn x_mcp_header_annotations_are_checked_and_mirrored() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "opts": {"type": "object", "properties": {"n": {"type": "integer", "x-mcp-header": "N"}}},
            "query": {"type": "string"}}});
        let params = mirrored_params(&schema).unwrap();
        let arguments = json!({"region": "Hello, 世界", "opts": {"n": 42}, "query": "q"});
        let mut headers = param_headers(&params, arguments.as_object().unwrap());
        headers.sort();
        assert_eq!(
            headers,
            vec![
                ("mcp-param-N".to_owned(), "42".to_owned()),
                ("mcp-param-Region".to_owned(), "=?base64?SGVsbG8sIOS4lueVjA==?=".to_owned())
            ]
        );
        assert!(param_headers(&params, json!({"region": null}).as_object().unwrap()).is_empty());
        for bad in [
            json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "bad name"}}}),
            json!({"properties": {"a": {"type": "string", "x-mcp-header": "A"},
                                  "b": {"type": "string", "x-mcp-header": "a"}}}),
            json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
            json!({"oneOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}),
        ] {
            assert!(mirrored_params(&bad).is_err(), "{bad}");
        }
    }
}
