//! The mapping between protocol types and the WIT types of `subs:agent`.
//!
//! Both sides of the component boundary need it: the guest SDK converts
//! between its wit-bindgen types and these, the engine between its wasmtime
//! types and these. The two generators produce types of the same shape
//! (records as structs with snake_case fields, variants and enums as Rust
//! enums, `option`/`list`/`string` as `Option`/`Vec`/`String`), so the
//! mapping is written once, as [`wit_conversions!`](crate::wit_conversions),
//! and instantiated on each side against its own bindings.
//!
//! The mapping is lossless in both directions; property tests in both
//! crates check that. `unknown` values cross as JSON text ([`json`]);
//! an `llm.execute` request or `llm.result` response crosses in the typed
//! form only when that form holds it exactly, and as JSON text otherwise.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ProtocolError;

/// Converts a WIT value into a protocol value. Fails only where the WIT
/// value carries JSON text that does not parse; the error names the field.
pub trait FromWit<W>: Sized {
    /// Converts `wit`.
    fn from_wit(wit: W) -> Result<Self, ProtocolError>;
}

/// Parses the JSON text of an `unknown` field.
#[doc(hidden)]
pub fn json(text: &str, field: &str) -> Result<Value, ProtocolError> {
    serde_json::from_str(text).map_err(|e| ProtocolError::new(format!("invalid JSON text: {e}")).in_field(field))
}

/// [`json`] for an optional field.
#[doc(hidden)]
pub fn opt_json(text: Option<String>, field: &str) -> Result<Option<Value>, ProtocolError> {
    text.map(|t| json(&t, field)).transpose()
}

/// [`json`] for a list field.
#[doc(hidden)]
pub fn json_list(texts: Vec<String>, field: &str) -> Result<Vec<Value>, ProtocolError> {
    let mut values = Vec::with_capacity(texts.len());
    for (i, t) in texts.iter().enumerate() {
        values.push(json(t, "").map_err(|e| e.in_index(i).in_field(field))?);
    }
    Ok(values)
}

/// Writes an `unknown` value as JSON text.
#[doc(hidden)]
pub fn json_text(value: &Value) -> String {
    crate::to_json(value)
}

/// Converts an optional WIT field.
#[doc(hidden)]
pub fn opt<W, P: FromWit<W>>(wit: Option<W>, field: &str) -> Result<Option<P>, ProtocolError> {
    wit.map(|w| P::from_wit(w).map_err(|e| e.in_field(field))).transpose()
}

/// Converts a WIT list field.
#[doc(hidden)]
pub fn list<W, P: FromWit<W>>(wit: Vec<W>, field: &str) -> Result<Vec<P>, ProtocolError> {
    // Collecting into a `Result` loses the length; allocating it up front
    // spares the growing copies (a guest converts 20-message requests).
    let mut items = Vec::with_capacity(wit.len());
    for (i, w) in wit.into_iter().enumerate() {
        items.push(P::from_wit(w).map_err(|e| e.in_index(i).in_field(field))?);
    }
    Ok(items)
}

/// Converts an optional WIT list field.
#[doc(hidden)]
pub fn opt_list<W, P: FromWit<W>>(wit: Option<Vec<W>>, field: &str) -> Result<Option<Vec<P>>, ProtocolError> {
    wit.map(|w| list(w, field)).transpose()
}

/// Converts a required WIT field.
#[doc(hidden)]
pub fn field<W, P: FromWit<W>>(wit: W, field: &str) -> Result<P, ProtocolError> {
    P::from_wit(wit).map_err(|e| e.in_field(field))
}

/// The typed form of `value`, when that form holds it exactly: parsing
/// drops unknown fields and may change how numbers are written, and either
/// would lose something the worker or provider sent.
#[doc(hidden)]
pub fn exact_typed<T: DeserializeOwned + Serialize>(value: &Value) -> Option<T> {
    let typed: T = serde_json::from_value(value.clone()).ok()?;
    (crate::to_value(&typed) == *value).then_some(typed)
}

/// The error for an index of a request's message tree (WIT or
/// [`RequestTree`](crate::RequestTree)) that points nowhere.
#[doc(hidden)]
pub fn bad_tree_index(node: usize, field: &str, what: &str, index: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::new(format!("refers to {what} {index}, which does not exist"))
        .in_field(field)
        .in_index(node)
        .in_field("nodes")
}

/// Maps a C-like protocol enum to its WIT enum and back; the variant names
/// are the same on both sides.
#[doc(hidden)]
#[macro_export]
macro_rules! __wit_enum {
    ($p:ty, $w:ty, [$($variant:ident),+ $(,)?]) => {
        impl From<$p> for $w {
            fn from(value: $p) -> Self {
                match value { $(<$p>::$variant => <$w>::$variant,)+ }
            }
        }
        impl $crate::wit::FromWit<$w> for $p {
            fn from_wit(wit: $w) -> Result<Self, $crate::ProtocolError> {
                Ok(match wit { $(<$w>::$variant => <$p>::$variant,)+ })
            }
        }
    };
}

/// Implements the protocol ↔ WIT mapping against a module of generated WIT
/// types (the `subs:agent/types` interface): `From<protocol> for wit` and
/// [`FromWit<wit>`](FromWit) for protocol.
///
/// Call it with the name of the module (an identifier in scope):
///
/// ```ignore
/// use crate::bindings::subs::agent::types as wit;
/// subs_protocol::wit_conversions!(wit);
/// ```
#[macro_export]
macro_rules! wit_conversions {
    ($w:ident) => {
        const _: () = {
            use $crate as p;
            use $crate::wit::{FromWit, exact_typed, field, json, json_list, json_text, list, opt, opt_json, opt_list};
            use $w as w;

            type R<T> = Result<T, p::ProtocolError>;

            $crate::__wit_enum!(p::Role, w::Role, [System, User, Assistant, Tool]);
            $crate::__wit_enum!(p::Handler, w::Handler, [Server, Worker, Client]);
            $crate::__wit_enum!(p::LlmHandler, w::LlmHandler, [Server, Worker]);
            $crate::__wit_enum!(p::ToolHandler, w::ToolHandler, [Worker, Client]);
            $crate::__wit_enum!(p::LlmFormat, w::LlmFormat, [Openai, Anthropic]);
            $crate::__wit_enum!(p::ReasoningEffort, w::ReasoningEffort, [Xhigh, High, Medium, Low, Minimal, None]);
            $crate::__wit_enum!(
                p::ErrorCode,
                w::ErrorCode,
                [ProviderError, RateLimited, Refused, BudgetExceeded, DeadlineExceeded]
            );
            $crate::__wit_enum!(p::CallKind, w::CallKind, [ToolCall, LlmCall, SubAgent]);
            $crate::__wit_enum!(p::CallStatus, w::CallStatus, [Pending, Completed, Failed, RetryScheduled, Queued]);

            // ---- messages ----------------------------------------------

            impl From<p::UrlRef> for w::UrlRef {
                fn from(v: p::UrlRef) -> Self {
                    Self { url: v.url }
                }
            }
            impl FromWit<w::UrlRef> for p::UrlRef {
                fn from_wit(v: w::UrlRef) -> R<Self> {
                    Ok(Self { url: v.url })
                }
            }

            impl From<p::FileData> for w::FileData {
                fn from(v: p::FileData) -> Self {
                    Self { filename: v.filename, file_data: v.file_data }
                }
            }
            impl FromWit<w::FileData> for p::FileData {
                fn from_wit(v: w::FileData) -> R<Self> {
                    Ok(Self { filename: v.filename, file_data: v.file_data })
                }
            }

            impl From<p::AudioData> for w::AudioData {
                fn from(v: p::AudioData) -> Self {
                    Self { data: v.data, format: v.format }
                }
            }
            impl FromWit<w::AudioData> for p::AudioData {
                fn from_wit(v: w::AudioData) -> R<Self> {
                    Ok(Self { data: v.data, format: v.format })
                }
            }

            impl From<p::ContentPart> for w::ContentPart {
                fn from(v: p::ContentPart) -> Self {
                    match v {
                        p::ContentPart::Text { text } => Self::Text(text),
                        p::ContentPart::ImageUrl { image_url } => Self::ImageUrl(image_url.into()),
                        p::ContentPart::File { file } => Self::File(file.into()),
                        p::ContentPart::InputAudio { input_audio } => Self::InputAudio(input_audio.into()),
                        p::ContentPart::VideoUrl { video_url } => Self::VideoUrl(video_url.into()),
                    }
                }
            }
            impl FromWit<w::ContentPart> for p::ContentPart {
                fn from_wit(v: w::ContentPart) -> R<Self> {
                    Ok(match v {
                        w::ContentPart::Text(text) => Self::Text { text },
                        w::ContentPart::ImageUrl(u) => Self::ImageUrl { image_url: field(u, "image_url")? },
                        w::ContentPart::File(f) => Self::File { file: field(f, "file")? },
                        w::ContentPart::InputAudio(a) => Self::InputAudio { input_audio: field(a, "input_audio")? },
                        w::ContentPart::VideoUrl(u) => Self::VideoUrl { video_url: field(u, "video_url")? },
                    })
                }
            }

            impl From<p::Content> for w::Content {
                fn from(v: p::Content) -> Self {
                    match v {
                        p::Content::Text(text) => Self::Text(text),
                        p::Content::Parts(parts) => Self::Parts(parts.into_iter().map(Into::into).collect()),
                    }
                }
            }
            impl FromWit<w::Content> for p::Content {
                fn from_wit(v: w::Content) -> R<Self> {
                    Ok(match v {
                        w::Content::Text(text) => Self::Text(text),
                        w::Content::Parts(parts) => Self::Parts(list(parts, "")?),
                    })
                }
            }

            impl From<p::FunctionCall> for w::FunctionCall {
                fn from(v: p::FunctionCall) -> Self {
                    Self { name: v.name, arguments: v.arguments }
                }
            }
            impl FromWit<w::FunctionCall> for p::FunctionCall {
                fn from_wit(v: w::FunctionCall) -> R<Self> {
                    Ok(Self { name: v.name, arguments: v.arguments })
                }
            }

            impl From<p::ToolCall> for w::ToolCall {
                fn from(v: p::ToolCall) -> Self {
                    Self { id: v.id, kind: v.kind, function: v.function.into() }
                }
            }
            impl FromWit<w::ToolCall> for p::ToolCall {
                fn from_wit(v: w::ToolCall) -> R<Self> {
                    Ok(Self { id: v.id, kind: v.kind, function: field(v.function, "function")? })
                }
            }

            impl From<p::Message> for w::Message {
                fn from(v: p::Message) -> Self {
                    Self {
                        id: v.id,
                        role: v.role.into(),
                        content: v.content.map(Into::into),
                        tool_calls: v.tool_calls.map(|c| c.into_iter().map(Into::into).collect()),
                        tool_call_id: v.tool_call_id,
                        name: v.name,
                    }
                }
            }
            impl FromWit<w::Message> for p::Message {
                fn from_wit(v: w::Message) -> R<Self> {
                    Ok(Self {
                        id: v.id,
                        role: field(v.role, "role")?,
                        content: opt(v.content, "content")?,
                        tool_calls: opt_list(v.tool_calls, "tool_calls")?,
                        tool_call_id: v.tool_call_id,
                        name: v.name,
                    })
                }
            }

            // A shared message is copied field by field, its handle then
            // let go: no attempt to take it over, which would only
            // succeed for a message nothing else holds.
            impl From<p::SharedMessage> for w::Message {
                fn from(v: p::SharedMessage) -> Self {
                    match v {
                        p::SharedMessage::Own(m) => m.into(),
                        p::SharedMessage::Shared(m) => p::Message::clone(&m).into(),
                    }
                }
            }
            impl FromWit<w::Message> for p::SharedMessage {
                fn from_wit(v: w::Message) -> R<Self> {
                    p::Message::from_wit(v).map(Self::Own)
                }
            }

            impl From<p::DraftMessage> for w::DraftMessage {
                fn from(v: p::DraftMessage) -> Self {
                    Self {
                        id: v.id,
                        role: v.role.into(),
                        content: v.content.map(Into::into),
                        tool_calls: v.tool_calls.map(|c| c.into_iter().map(Into::into).collect()),
                        tool_call_id: v.tool_call_id,
                        name: v.name,
                    }
                }
            }
            impl FromWit<w::DraftMessage> for p::DraftMessage {
                fn from_wit(v: w::DraftMessage) -> R<Self> {
                    Ok(Self {
                        id: v.id,
                        role: field(v.role, "role")?,
                        content: opt(v.content, "content")?,
                        tool_calls: opt_list(v.tool_calls, "tool_calls")?,
                        tool_call_id: v.tool_call_id,
                        name: v.name,
                    })
                }
            }

            // A tree crosses as the request holds it (`p::RequestTree`):
            // active-path nodes refer to `messages`, parents to earlier
            // nodes, so no message crosses twice. A shared message is
            // copied into the record unless nothing else holds it; one read
            // from the record is the request's own.
            fn tree_to_wit(tree: p::RequestTree) -> w::MessageTree {
                let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
                let nodes = tree
                    .nodes
                    .into_iter()
                    .map(|node| w::TreeNode {
                        message: match node.message {
                            p::NodeMessage::Active(i) => w::TreeMessage::Active(index(i)),
                            p::NodeMessage::Other(m) => w::TreeMessage::Other(m.into()),
                        },
                        parent: match node.parent {
                            p::NodeParent::Root => w::TreeParent::Root,
                            p::NodeParent::Node(j) => w::TreeParent::Node(index(j)),
                            p::NodeParent::Id(id) => w::TreeParent::Id(id),
                        },
                    })
                    .collect();
                w::MessageTree { nodes, head_id: tree.head_id }
            }
            fn tree_from_wit(tree: w::MessageTree, path: &[p::SharedMessage]) -> R<p::RequestTree> {
                use $crate::wit::bad_tree_index;
                let mut nodes = Vec::with_capacity(tree.nodes.len());
                for (k, node) in tree.nodes.into_iter().enumerate() {
                    let message = match node.message {
                        w::TreeMessage::Active(i) if (i as usize) < path.len() => p::NodeMessage::Active(i as usize),
                        w::TreeMessage::Active(i) => return Err(bad_tree_index(k, "message", "message", i)),
                        w::TreeMessage::Other(m) => p::NodeMessage::Other(p::SharedMessage::Own(
                            p::Message::from_wit(m).map_err(|e| e.in_field("message").in_index(k).in_field("nodes"))?,
                        )),
                    };
                    let parent = match node.parent {
                        w::TreeParent::Root => p::NodeParent::Root,
                        w::TreeParent::Id(id) => p::NodeParent::Id(id),
                        w::TreeParent::Node(j) if (j as usize) < k => p::NodeParent::Node(j as usize),
                        w::TreeParent::Node(j) => return Err(bad_tree_index(k, "parent", "an earlier node", j)),
                    };
                    nodes.push(p::RequestNode { message, parent });
                }
                Ok(p::RequestTree { nodes, head_id: tree.head_id })
            }

            // ---- agent config ------------------------------------------

            impl From<p::RetryPolicy> for w::RetryPolicy {
                fn from(v: p::RetryPolicy) -> Self {
                    Self {
                        timeout_secs: v.timeout_secs,
                        max_retries: v.max_retries,
                        backoff_base_secs: v.backoff_base_secs,
                        backoff_max_secs: v.backoff_max_secs,
                    }
                }
            }
            impl FromWit<w::RetryPolicy> for p::RetryPolicy {
                fn from_wit(v: w::RetryPolicy) -> R<Self> {
                    Ok(Self {
                        timeout_secs: v.timeout_secs,
                        max_retries: v.max_retries,
                        backoff_base_secs: v.backoff_base_secs,
                        backoff_max_secs: v.backoff_max_secs,
                    })
                }
            }

            impl From<p::AgentTool> for w::AgentTool {
                fn from(v: p::AgentTool) -> Self {
                    Self {
                        name: v.name,
                        description: v.description,
                        input: v.input.as_ref().map(json_text),
                        output: v.output.as_ref().map(json_text),
                        handler: v.handler.map(Into::into),
                    }
                }
            }
            impl FromWit<w::AgentTool> for p::AgentTool {
                fn from_wit(v: w::AgentTool) -> R<Self> {
                    Ok(Self {
                        name: v.name,
                        description: v.description,
                        input: opt_json(v.input, "input")?,
                        output: opt_json(v.output, "output")?,
                        handler: opt(v.handler, "handler")?,
                    })
                }
            }

            impl From<p::SubAgent> for w::SubAgent {
                fn from(v: p::SubAgent) -> Self {
                    Self { id: v.id, description: v.description }
                }
            }
            impl FromWit<w::SubAgent> for p::SubAgent {
                fn from_wit(v: w::SubAgent) -> R<Self> {
                    Ok(Self { id: v.id, description: v.description })
                }
            }

            impl From<p::McpServerUse> for w::McpServerUse {
                fn from(v: p::McpServerUse) -> Self {
                    Self { server: v.server, tools: v.tools }
                }
            }
            impl FromWit<w::McpServerUse> for p::McpServerUse {
                fn from_wit(v: w::McpServerUse) -> R<Self> {
                    Ok(Self { server: v.server, tools: v.tools })
                }
            }

            impl From<p::AgentConfig> for w::AgentConfig {
                fn from(v: p::AgentConfig) -> Self {
                    Self {
                        model: v.model,
                        system: v.system,
                        stream: v.stream,
                        handler: v.handler.map(Into::into),
                        format: v.format.map(Into::into),
                        retry: v.retry.map(Into::into),
                        tools: v.tools.map(|t| t.into_iter().map(Into::into).collect()),
                        sub_agents: v.sub_agents.map(|s| s.into_iter().map(Into::into).collect()),
                        mcp: v.mcp.map(|m| m.into_iter().map(Into::into).collect()),
                    }
                }
            }
            impl FromWit<w::AgentConfig> for p::AgentConfig {
                fn from_wit(v: w::AgentConfig) -> R<Self> {
                    Ok(Self {
                        model: v.model,
                        system: v.system,
                        stream: v.stream,
                        handler: opt(v.handler, "handler")?,
                        format: opt(v.format, "format")?,
                        retry: opt(v.retry, "retry")?,
                        tools: opt_list(v.tools, "tools")?,
                        sub_agents: opt_list(v.sub_agents, "sub_agents")?,
                        mcp: opt_list(v.mcp, "mcp")?,
                    })
                }
            }

            // ---- LLM -------------------------------------------------------

            impl From<p::LlmTool> for w::LlmTool {
                fn from(v: p::LlmTool) -> Self {
                    Self {
                        name: v.name,
                        description: v.description,
                        input: v.input.as_ref().map(json_text),
                        output: v.output.as_ref().map(json_text),
                    }
                }
            }
            impl FromWit<w::LlmTool> for p::LlmTool {
                fn from_wit(v: w::LlmTool) -> R<Self> {
                    Ok(Self {
                        name: v.name,
                        description: v.description,
                        input: opt_json(v.input, "input")?,
                        output: opt_json(v.output, "output")?,
                    })
                }
            }

            impl From<p::ReasoningConfig> for w::ReasoningConfig {
                fn from(v: p::ReasoningConfig) -> Self {
                    Self {
                        effort: v.effort.map(Into::into),
                        max_tokens: v.max_tokens,
                        exclude: v.exclude,
                        enabled: v.enabled,
                    }
                }
            }
            impl FromWit<w::ReasoningConfig> for p::ReasoningConfig {
                fn from_wit(v: w::ReasoningConfig) -> R<Self> {
                    Ok(Self {
                        effort: opt(v.effort, "effort")?,
                        max_tokens: v.max_tokens,
                        exclude: v.exclude,
                        enabled: v.enabled,
                    })
                }
            }

            impl From<p::LlmRequest> for w::LlmRequest {
                fn from(v: p::LlmRequest) -> Self {
                    Self {
                        model: v.model,
                        messages: v.messages.into_iter().map(Into::into).collect(),
                        tools: v.tools.map(|t| t.into_iter().map(Into::into).collect()),
                        temperature: v.temperature,
                        max_completion_tokens: v.max_completion_tokens,
                        reasoning: v.reasoning.map(Into::into),
                    }
                }
            }
            impl FromWit<w::LlmRequest> for p::LlmRequest {
                fn from_wit(v: w::LlmRequest) -> R<Self> {
                    Ok(Self {
                        model: v.model,
                        messages: list(v.messages, "messages")?,
                        tools: opt_list(v.tools, "tools")?,
                        temperature: v.temperature,
                        max_completion_tokens: v.max_completion_tokens,
                        reasoning: opt(v.reasoning, "reasoning")?,
                    })
                }
            }

            impl From<p::LlmResponse> for w::LlmResponse {
                fn from(v: p::LlmResponse) -> Self {
                    Self {
                        model: v.model,
                        content: v.content,
                        tool_calls: v.tool_calls.map(|c| c.into_iter().map(Into::into).collect()),
                        finish_reason: v.finish_reason,
                        usage: v.usage.as_ref().map(json_text),
                        cost: v.cost,
                        images: v.images.map(|i| i.into_iter().map(Into::into).collect()),
                    }
                }
            }
            impl FromWit<w::LlmResponse> for p::LlmResponse {
                fn from_wit(v: w::LlmResponse) -> R<Self> {
                    Ok(Self {
                        model: v.model,
                        content: v.content,
                        tool_calls: opt_list(v.tool_calls, "tool_calls")?,
                        finish_reason: v.finish_reason,
                        usage: opt_json(v.usage, "usage")?,
                        cost: v.cost,
                        images: opt_list(v.images, "images")?,
                    })
                }
            }

            impl From<p::ToolCallDelta> for w::ToolCallDelta {
                fn from(v: p::ToolCallDelta) -> Self {
                    Self { id: v.id, name: v.name, arguments: v.arguments }
                }
            }
            impl FromWit<w::ToolCallDelta> for p::ToolCallDelta {
                fn from_wit(v: w::ToolCallDelta) -> R<Self> {
                    Ok(Self { id: v.id, name: v.name, arguments: v.arguments })
                }
            }

            impl From<p::StreamDelta> for w::StreamDelta {
                fn from(v: p::StreamDelta) -> Self {
                    Self {
                        text: v.text,
                        reasoning: v.reasoning,
                        tool_calls: v.tool_calls.map(|c| c.into_iter().map(Into::into).collect()),
                        finish_reason: v.finish_reason,
                    }
                }
            }
            impl FromWit<w::StreamDelta> for p::StreamDelta {
                fn from_wit(v: w::StreamDelta) -> R<Self> {
                    Ok(Self {
                        text: v.text,
                        reasoning: v.reasoning,
                        tool_calls: opt_list(v.tool_calls, "tool_calls")?,
                        finish_reason: v.finish_reason,
                    })
                }
            }

            /// An `llm.execute` request: typed when it is a standard
            /// request the typed form holds exactly.
            fn request_to_wit(request: serde_json::Value, format: Option<p::LlmFormat>) -> w::LlmRequestBody {
                if format.is_none() {
                    if let Some(typed) = exact_typed::<p::LlmRequest>(&request) {
                        return w::LlmRequestBody::Standard(typed.into());
                    }
                }
                w::LlmRequestBody::Native(json_text(&request))
            }
            fn request_from_wit(body: w::LlmRequestBody) -> R<serde_json::Value> {
                match body {
                    w::LlmRequestBody::Standard(r) => Ok(p::to_value(&p::LlmRequest::from_wit(r)?)),
                    w::LlmRequestBody::Native(text) => json(&text, ""),
                }
            }
            fn response_to_wit(response: serde_json::Value) -> w::LlmResponseBody {
                match exact_typed::<p::LlmResponse>(&response) {
                    Some(typed) => w::LlmResponseBody::Standard(typed.into()),
                    None => w::LlmResponseBody::Native(json_text(&response)),
                }
            }
            fn response_from_wit(body: w::LlmResponseBody) -> R<serde_json::Value> {
                match body {
                    w::LlmResponseBody::Standard(r) => Ok(p::to_value(&p::LlmResponse::from_wit(r)?)),
                    w::LlmResponseBody::Native(text) => json(&text, ""),
                }
            }

            // ---- triggers ----------------------------------------------

            impl From<p::ToolInput> for w::ToolInput {
                fn from(v: p::ToolInput) -> Self {
                    match v {
                        p::ToolInput::Valid { value } => Self::Valid(json_text(&value)),
                        p::ToolInput::Invalid { value, error } => {
                            Self::Invalid(w::InvalidInput { value: json_text(&value), error })
                        }
                        p::ToolInput::Malformed { error } => Self::Malformed(error),
                    }
                }
            }
            impl FromWit<w::ToolInput> for p::ToolInput {
                fn from_wit(v: w::ToolInput) -> R<Self> {
                    Ok(match v {
                        w::ToolInput::Valid(value) => Self::Valid { value: json(&value, "value")? },
                        w::ToolInput::Invalid(i) => Self::Invalid { value: json(&i.value, "value")?, error: i.error },
                        w::ToolInput::Malformed(error) => Self::Malformed { error },
                    })
                }
            }

            impl From<p::ClientContext> for w::ClientContext {
                fn from(v: p::ClientContext) -> Self {
                    Self {
                        tools: v.tools.map(|t| t.into_iter().map(Into::into).collect()),
                        context: v.context.map(|c| c.iter().map(json_text).collect()),
                        state: v.state.as_ref().map(json_text),
                        forwarded_props: v.forwarded_props.as_ref().map(json_text),
                    }
                }
            }
            impl FromWit<w::ClientContext> for p::ClientContext {
                fn from_wit(v: w::ClientContext) -> R<Self> {
                    Ok(Self {
                        tools: opt_list(v.tools, "tools")?,
                        context: v.context.map(|c| json_list(c, "context")).transpose()?,
                        state: opt_json(v.state, "state")?,
                        forwarded_props: opt_json(v.forwarded_props, "forwarded_props")?,
                    })
                }
            }

            impl From<p::Trigger> for w::Trigger {
                fn from(v: p::Trigger) -> Self {
                    use p::trigger as t;
                    match v {
                        p::Trigger::SessionStart => Self::SessionStart,
                        p::Trigger::ClientMessages(t::ClientMessages { messages, new_from, client }) => {
                            Self::ClientMessages(w::ClientMessagesTrigger {
                                messages: messages.into_iter().map(Into::into).collect(),
                                new_from,
                                client: client.into(),
                            })
                        }
                        p::Trigger::ClientAction(t::ClientAction { name, args }) => {
                            Self::ClientAction(w::ClientActionTrigger { name, args: args.as_ref().map(json_text) })
                        }
                        p::Trigger::ToolExecute(e) => Self::ToolExecute(w::ToolExecute {
                            id: e.id,
                            name: e.name,
                            arguments: e.arguments,
                            input: e.input.into(),
                            attempt: e.attempt,
                            deadline: e.deadline,
                        }),
                        p::Trigger::ToolFinished(f) => Self::ToolFinished(w::ToolFinished {
                            id: f.id,
                            ok: f.ok,
                            name: f.name,
                            result: f.result,
                            error: f.error,
                        }),
                        p::Trigger::LlmExecute(e) => Self::LlmExecute(w::LlmExecute {
                            id: e.id,
                            request: request_to_wit(e.request, e.format),
                            format: e.format.map(Into::into),
                            stream: e.stream,
                            attempt: e.attempt,
                            deadline: e.deadline,
                        }),
                        p::Trigger::LlmFinished(f) => Self::LlmFinished(w::LlmFinished {
                            id: f.id,
                            ok: f.ok,
                            message: f.message.map(Into::into),
                            truncated: f.truncated,
                            usage: f.usage.as_ref().map(json_text),
                            cost: f.cost,
                            error: f.error,
                            code: f.code.map(Into::into),
                            detail: f.detail.as_ref().map(json_text),
                        }),
                        p::Trigger::SubAgentFinished(f) => Self::SubAgentFinished(w::SubAgentFinished {
                            id: f.id,
                            ok: f.ok,
                            session_id: f.session_id,
                            agent_id: f.agent_id,
                            result: f.result,
                            error: f.error,
                        }),
                        p::Trigger::InterruptResumed(r) => Self::InterruptResumed(w::InterruptResumed {
                            interrupt_id: r.interrupt_id,
                            payload: r.payload.as_ref().map(json_text),
                        }),
                    }
                }
            }
            impl FromWit<w::Trigger> for p::Trigger {
                fn from_wit(v: w::Trigger) -> R<Self> {
                    use p::trigger as t;
                    Ok(match v {
                        w::Trigger::SessionStart => Self::SessionStart,
                        w::Trigger::ClientMessages(m) => Self::ClientMessages(t::ClientMessages {
                            messages: list(m.messages, "messages")?,
                            new_from: m.new_from,
                            client: field(m.client, "client")?,
                        }),
                        w::Trigger::ClientAction(a) => {
                            Self::ClientAction(t::ClientAction { name: a.name, args: opt_json(a.args, "args")? })
                        }
                        w::Trigger::ToolExecute(e) => Self::ToolExecute(t::ToolExecute {
                            id: e.id,
                            name: e.name,
                            arguments: e.arguments,
                            input: field(e.input, "input")?,
                            attempt: e.attempt,
                            deadline: e.deadline,
                        }),
                        w::Trigger::ToolFinished(f) => Self::ToolFinished(t::ToolFinished {
                            id: f.id,
                            ok: f.ok,
                            name: f.name,
                            result: f.result,
                            error: f.error,
                        }),
                        w::Trigger::LlmExecute(e) => Self::LlmExecute(t::LlmExecute {
                            id: e.id,
                            request: request_from_wit(e.request).map_err(|e| e.in_field("request"))?,
                            format: opt(e.format, "format")?,
                            stream: e.stream,
                            attempt: e.attempt,
                            deadline: e.deadline,
                        }),
                        w::Trigger::LlmFinished(f) => Self::LlmFinished(t::LlmFinished {
                            id: f.id,
                            ok: f.ok,
                            message: opt(f.message, "message")?,
                            truncated: f.truncated,
                            usage: opt_json(f.usage, "usage")?,
                            cost: f.cost,
                            error: f.error,
                            code: opt(f.code, "code")?,
                            detail: opt_json(f.detail, "detail")?,
                        }),
                        w::Trigger::SubAgentFinished(f) => Self::SubAgentFinished(t::SubAgentFinished {
                            id: f.id,
                            ok: f.ok,
                            session_id: f.session_id,
                            agent_id: f.agent_id,
                            result: f.result,
                            error: f.error,
                        }),
                        w::Trigger::InterruptResumed(r) => Self::InterruptResumed(t::InterruptResumed {
                            interrupt_id: r.interrupt_id,
                            payload: opt_json(r.payload, "payload")?,
                        }),
                    })
                }
            }

            // ---- actions -----------------------------------------------

            impl From<p::action::CallError> for w::CallError {
                fn from(e: p::action::CallError) -> Self {
                    Self {
                        id: e.id,
                        attempt: e.attempt,
                        error: e.error,
                        retryable: e.retryable,
                        code: e.code.map(Into::into),
                        detail: e.detail.as_ref().map(json_text),
                    }
                }
            }
            impl FromWit<w::CallError> for p::action::CallError {
                fn from_wit(e: w::CallError) -> R<Self> {
                    Ok(Self {
                        id: e.id,
                        attempt: e.attempt,
                        error: e.error,
                        retryable: e.retryable,
                        code: opt(e.code, "code")?,
                        detail: opt_json(e.detail, "detail")?,
                    })
                }
            }

            impl From<p::Action> for w::Action {
                fn from(v: p::Action) -> Self {
                    match v {
                        p::Action::LlmCall(c) => Self::LlmCall(w::LlmCall {
                            id: c.id,
                            model: c.model,
                            messages: c.messages.map(|m| m.into_iter().map(Into::into).collect()),
                            tools: c.tools.map(|t| t.into_iter().map(Into::into).collect()),
                            temperature: c.temperature,
                            max_completion_tokens: c.max_completion_tokens,
                            reasoning: c.reasoning.map(Into::into),
                            stream: c.stream,
                            retry: c.retry.map(Into::into),
                            handler: c.handler.map(Into::into),
                        }),
                        p::Action::ToolCall(c) => Self::ToolCall(w::ToolCallAction {
                            id: c.id,
                            name: c.name,
                            arguments: json_text(&c.arguments),
                            handler: c.handler.map(Into::into),
                            retry: c.retry.map(Into::into),
                        }),
                        p::Action::ToolResult(r) => Self::ToolResult(w::ToolResult {
                            id: r.id,
                            attempt: r.attempt,
                            result: json_text(&r.result),
                        }),
                        p::Action::ToolError(e) => Self::ToolError(e.into()),
                        p::Action::LlmResult(r) => Self::LlmResult(w::LlmResult {
                            id: r.id,
                            attempt: r.attempt,
                            response: response_to_wit(r.response),
                        }),
                        p::Action::LlmError(e) => Self::LlmError(e.into()),
                        p::Action::SubAgentSpawn(s) => Self::SubAgentSpawn(w::SubAgentSpawn {
                            session_id: s.session_id,
                            agent_id: s.agent_id,
                            tool_call_id: s.tool_call_id,
                            retry: s.retry.map(Into::into),
                        }),
                        p::Action::MessageSend(m) => {
                            Self::MessageSend(w::MessageSend { session_id: m.session_id, message: m.message.into() })
                        }
                        p::Action::Interrupt(i) => Self::Interrupt(w::Interrupt {
                            interrupt_id: i.interrupt_id,
                            reason: i.reason,
                            payload: i.payload.as_ref().map(json_text),
                            resume_schema: i.resume_schema.as_ref().map(json_text),
                        }),
                        p::Action::Done(d) => Self::Done(w::Done { data: d.data.as_ref().map(json_text) }),
                    }
                }
            }
            impl FromWit<w::Action> for p::Action {
                fn from_wit(v: w::Action) -> R<Self> {
                    use p::action as a;
                    Ok(match v {
                        w::Action::LlmCall(c) => Self::LlmCall(a::LlmCall {
                            id: c.id,
                            model: c.model,
                            messages: opt_list(c.messages, "messages")?,
                            tools: opt_list(c.tools, "tools")?,
                            temperature: c.temperature,
                            max_completion_tokens: c.max_completion_tokens,
                            reasoning: opt(c.reasoning, "reasoning")?,
                            stream: c.stream,
                            retry: opt(c.retry, "retry")?,
                            handler: opt(c.handler, "handler")?,
                        }),
                        w::Action::ToolCall(c) => Self::ToolCall(a::ToolCall {
                            id: c.id,
                            name: c.name,
                            arguments: json(&c.arguments, "arguments")?,
                            handler: opt(c.handler, "handler")?,
                            retry: opt(c.retry, "retry")?,
                        }),
                        w::Action::ToolResult(r) => Self::ToolResult(a::ToolResult {
                            id: r.id,
                            attempt: r.attempt,
                            result: json(&r.result, "result")?,
                        }),
                        w::Action::ToolError(e) => Self::ToolError(p::action::CallError::from_wit(e)?),
                        w::Action::LlmResult(r) => Self::LlmResult(a::LlmResult {
                            id: r.id,
                            attempt: r.attempt,
                            response: response_from_wit(r.response).map_err(|e| e.in_field("response"))?,
                        }),
                        w::Action::LlmError(e) => Self::LlmError(p::action::CallError::from_wit(e)?),
                        w::Action::SubAgentSpawn(s) => Self::SubAgentSpawn(a::SubAgentSpawn {
                            session_id: s.session_id,
                            agent_id: s.agent_id,
                            tool_call_id: s.tool_call_id,
                            retry: opt(s.retry, "retry")?,
                        }),
                        w::Action::MessageSend(m) => Self::MessageSend(a::MessageSend {
                            session_id: m.session_id,
                            message: field(m.message, "message")?,
                        }),
                        w::Action::Interrupt(i) => Self::Interrupt(a::Interrupt {
                            interrupt_id: i.interrupt_id,
                            reason: i.reason,
                            payload: opt_json(i.payload, "payload")?,
                            resume_schema: opt_json(i.resume_schema, "resume_schema")?,
                        }),
                        w::Action::Done(d) => Self::Done(a::Done { data: opt_json(d.data, "data")? }),
                    })
                }
            }

            // ---- the decision exchange ---------------------------------

            impl From<p::WorkerIdentity> for w::WorkerIdentity {
                fn from(v: p::WorkerIdentity) -> Self {
                    Self { id: v.id, metadata: v.metadata.map(|m| m.into_iter().collect()) }
                }
            }
            impl FromWit<w::WorkerIdentity> for p::WorkerIdentity {
                fn from_wit(v: w::WorkerIdentity) -> R<Self> {
                    Ok(Self { id: v.id, metadata: v.metadata.map(|m| m.into_iter().collect()) })
                }
            }

            impl From<p::Call> for w::Call {
                fn from(v: p::Call) -> Self {
                    Self {
                        id: v.id,
                        kind: v.kind.into(),
                        status: v.status.into(),
                        attempt: v.attempt,
                        deadline: v.deadline,
                        anchor: v.anchor,
                        name: v.name,
                        arguments: v.arguments,
                        handler: v.handler.map(Into::into),
                        stream: v.stream,
                        agent_id: v.agent_id,
                        session_id: v.session_id,
                    }
                }
            }
            impl FromWit<w::Call> for p::Call {
                fn from_wit(v: w::Call) -> R<Self> {
                    Ok(Self {
                        id: v.id,
                        kind: field(v.kind, "kind")?,
                        status: field(v.status, "status")?,
                        attempt: v.attempt,
                        deadline: v.deadline,
                        anchor: v.anchor,
                        name: v.name,
                        arguments: v.arguments,
                        handler: opt(v.handler, "handler")?,
                        stream: v.stream,
                        agent_id: v.agent_id,
                        session_id: v.session_id,
                    })
                }
            }

            impl From<p::DecisionResponse> for w::DecisionResponse {
                fn from(v: p::DecisionResponse) -> Self {
                    Self {
                        messages: v.messages.map(|m| m.into_iter().map(Into::into).collect()),
                        actions: v.actions.map(|a| a.into_iter().map(Into::into).collect()),
                        state: v.state.as_ref().map(json_text),
                        agent: v.agent.map(Into::into),
                    }
                }
            }
            impl FromWit<w::DecisionResponse> for p::DecisionResponse {
                fn from_wit(v: w::DecisionResponse) -> R<Self> {
                    Ok(Self {
                        messages: opt_list(v.messages, "messages")?,
                        actions: opt_list(v.actions, "actions")?,
                        state: opt_json(v.state, "state")?,
                        agent: opt(v.agent, "agent")?,
                    })
                }
            }

            impl From<p::DecisionRequest> for w::DecisionRequest {
                fn from(v: p::DecisionRequest) -> Self {
                    let message_tree = tree_to_wit(v.message_tree);
                    Self {
                        session_id: v.session_id,
                        decision_id: v.decision_id,
                        agent_id: v.agent_id,
                        identity: v.identity.into(),
                        trigger: v.trigger.into(),
                        proposed: v.proposed.into(),
                        state: json_text(&v.state),
                        agent: v.agent.map(Into::into),
                        calls: v.calls.into_iter().map(Into::into).collect(),
                        pending_calls: v.pending_calls,
                        messages: v.messages.into_iter().map(Into::into).collect(),
                        message_tree,
                        ancestry: v.ancestry,
                        attempts: v.attempts,
                        deadline: v.deadline,
                        turn_id: v.turn_id,
                    }
                }
            }
            impl FromWit<w::DecisionRequest> for p::DecisionRequest {
                fn from_wit(v: w::DecisionRequest) -> R<Self> {
                    let messages: Vec<p::SharedMessage> = list(v.messages, "messages")?;
                    let message_tree =
                        tree_from_wit(v.message_tree, &messages).map_err(|e| e.in_field("message_tree"))?;
                    Ok(Self {
                        session_id: v.session_id,
                        decision_id: v.decision_id,
                        agent_id: v.agent_id,
                        identity: field(v.identity, "identity")?,
                        trigger: field(v.trigger, "trigger")?,
                        proposed: field(v.proposed, "proposed")?,
                        state: json(&v.state, "state")?,
                        agent: opt(v.agent, "agent")?,
                        calls: list(v.calls, "calls")?,
                        pending_calls: v.pending_calls,
                        messages,
                        message_tree,
                        ancestry: v.ancestry,
                        attempts: v.attempts,
                        deadline: v.deadline,
                        turn_id: v.turn_id,
                    })
                }
            }

            // ---- client inputs -----------------------------------------

            impl From<p::ClientInput> for w::ClientInput {
                fn from(v: p::ClientInput) -> Self {
                    match v {
                        p::ClientInput::ClientMessage(m) => Self::ClientMessage(w::ClientMessageInput {
                            agent_id: m.agent_id,
                            turn_id: m.turn_id,
                            message: m.message.into(),
                            stream: m.stream,
                        }),
                        p::ClientInput::ClientMessages(m) => Self::ClientMessages(w::ClientMessagesInput {
                            agent_id: m.agent_id,
                            turn_id: m.turn_id,
                            messages: m.messages.into_iter().map(Into::into).collect(),
                            stream: m.stream,
                            client: m.client.map(Into::into),
                        }),
                        p::ClientInput::ClientAction(a) => Self::ClientAction(w::ClientActionInput {
                            agent_id: a.agent_id,
                            turn_id: a.turn_id,
                            name: a.name,
                            args: a.args.as_ref().map(json_text),
                        }),
                        p::ClientInput::InterruptResume(r) => Self::InterruptResume(w::InterruptResumeInput {
                            interrupt_id: r.interrupt_id,
                            payload: r.payload.as_ref().map(json_text),
                        }),
                        p::ClientInput::ToolResult(r) => Self::ToolResult(w::ToolResultInput {
                            id: r.id,
                            attempt: r.attempt,
                            result: r.result.as_ref().map(json_text),
                        }),
                        p::ClientInput::ToolError(e) => Self::ToolError(w::ToolErrorInput {
                            id: e.id,
                            error: e.error,
                            retryable: e.retryable,
                            attempt: e.attempt,
                        }),
                    }
                }
            }
            impl FromWit<w::ClientInput> for p::ClientInput {
                fn from_wit(v: w::ClientInput) -> R<Self> {
                    use p::client as c;
                    Ok(match v {
                        w::ClientInput::ClientMessage(m) => Self::ClientMessage(c::ClientMessage {
                            agent_id: m.agent_id,
                            turn_id: m.turn_id,
                            message: field(m.message, "message")?,
                            stream: m.stream,
                        }),
                        w::ClientInput::ClientMessages(m) => Self::ClientMessages(c::ClientMessages {
                            agent_id: m.agent_id,
                            turn_id: m.turn_id,
                            messages: list(m.messages, "messages")?,
                            stream: m.stream,
                            client: opt(m.client, "client")?,
                        }),
                        w::ClientInput::ClientAction(a) => Self::ClientAction(c::ClientAction {
                            agent_id: a.agent_id,
                            turn_id: a.turn_id,
                            name: a.name,
                            args: opt_json(a.args, "args")?,
                        }),
                        w::ClientInput::InterruptResume(r) => Self::InterruptResume(c::InterruptResume {
                            interrupt_id: r.interrupt_id,
                            payload: opt_json(r.payload, "payload")?,
                        }),
                        w::ClientInput::ToolResult(r) => Self::ToolResult(c::ToolResult {
                            id: r.id,
                            attempt: r.attempt,
                            result: opt_json(r.result, "result")?,
                        }),
                        w::ClientInput::ToolError(e) => Self::ToolError(c::ToolError {
                            id: e.id,
                            error: e.error,
                            retryable: e.retryable,
                            attempt: e.attempt,
                        }),
                    })
                }
            }
        };
    };
}
