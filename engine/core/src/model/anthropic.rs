//! The Anthropic Messages wire format (`POST {base}/v1/messages`, headers
//! `x-api-key` and `anthropic-version`).
//!
//! - System messages (wherever they are) join, in order, into the top-level
//!   `system`. Assistant tool calls become `tool_use` blocks (arguments
//!   parsed; arguments that are not a JSON object are sent as `{}`, since
//!   Anthropic takes only objects), `tool` messages `tool_result` blocks in
//!   a user turn; consecutive turns of one role merge into one (so parallel
//!   tool results share one user turn, as Anthropic requires).
//! - Images by URL or `data:` URL and PDF files pass as `image` and
//!   `document` blocks; audio and video parts are refused (Anthropic cannot
//!   take them) with a non-retryable error. An assistant message's images
//!   are left out (Anthropic takes images only in user turns).
//! - Claude does not generate images, so its replies hold no `image` blocks
//!   today; should one come, it is read as an image of the reply (a
//!   `base64` source as a `data:` URL).
//! - `max_tokens` is required: the request's `max_completion_tokens`, else
//!   the provider's default. Reasoning becomes `thinking: {type: enabled,
//!   budget_tokens}`: the budget is `reasoning.max_tokens`, else by effort
//!   (minimal 1024, low 2048, medium 8192, high 16384, xhigh 32768); without
//!   an explicit `max_completion_tokens` the default `max_tokens` grows to
//!   leave the answer room beyond the budget.
//! - Stop reasons map to the engine's: `end_turn`/`stop_sequence` → `stop`,
//!   `max_tokens`/`model_context_window_exceeded` → `length`, `tool_use` →
//!   `tool_calls`, `refusal` → a `refused` error; others pass as they are.
//! - The stream's end is `message_stop`; an `error` event (even after a
//!   200) fails the call, classified by its error type.

use serde_json::{Map, Value, json};
use subs_protocol::{Content, ContentPart, LlmMessage, LlmRequest, ReasoningEffort, Role};

use super::openai::empty_schema;
use super::reply::ReplyBuilder;
use super::says::{ProviderSays, quote};
use super::sse::SseEvent;
use super::{Completion, ModelError};

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the request sets no
/// `max_completion_tokens` and the provider's config sets no other.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Anthropic's smallest thinking budget.
const MIN_THINKING_BUDGET: u32 = 1024;

/// The request body for `request` (whose `model` is sent as is);
/// `max_tokens` is the default when the request sets none.
pub fn request_body(request: &LlmRequest, max_tokens: u32, stream: bool) -> Result<Value, ModelError> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for (i, m) in request.messages.iter().enumerate() {
        let (role, blocks) = match m.role() {
            Role::System => {
                let text = m.content().map(|c| system_text(c, i)).transpose()?.unwrap_or_default();
                if !text.is_empty() {
                    system.push(text);
                }
                continue;
            }
            Role::User => ("user", content_blocks(m.content(), i)?),
            Role::Assistant => ("assistant", assistant_blocks(m, i)?),
            Role::Tool => ("user", vec![tool_result(m, i)?]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> =
        turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let thinking = thinking_budget(request);
    let max_tokens = match (request.max_completion_tokens, thinking) {
        (Some(max), _) => max,
        (None, Some(budget)) if budget >= max_tokens => budget.saturating_add(max_tokens),
        (None, _) => max_tokens,
    };
    body.insert("max_tokens".into(), json!(max_tokens));
    if !system.is_empty() {
        body.insert("system".into(), json!(system.join("\n\n")));
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = request.tools.as_ref().filter(|t| !t.is_empty()) {
        let tools = tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    tool.insert("description".into(), json!(t.description));
                }
                tool.insert("input_schema".into(), t.input.as_deref().cloned().unwrap_or_else(empty_schema));
                Value::Object(tool)
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(budget) = thinking {
        body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
    }
    if stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// The thinking budget, when the request asks for reasoning.
fn thinking_budget(request: &LlmRequest) -> Option<u32> {
    let r = request.reasoning.as_ref()?;
    if r.enabled == Some(false) || r.effort == Some(ReasoningEffort::None) {
        return None;
    }
    if r.enabled != Some(true) && r.effort.is_none() && r.max_tokens.is_none() {
        return None;
    }
    let by_effort = match r.effort {
        Some(ReasoningEffort::Minimal) => 1024,
        Some(ReasoningEffort::Low) => 2048,
        Some(ReasoningEffort::High) => 16_384,
        Some(ReasoningEffort::Xhigh) => 32_768,
        Some(ReasoningEffort::Medium | ReasoningEffort::None) | None => 8192,
    };
    Some(r.max_tokens.unwrap_or(by_effort).max(MIN_THINKING_BUDGET))
}

fn unsupported(index: usize, what: &str) -> ModelError {
    ModelError::invalid_request(format!("messages[{index}]: Anthropic Messages cannot take {what}"))
}

fn system_text(content: &Content, index: usize) -> Result<String, ModelError> {
    if let Content::Parts(parts) = content
        && parts.iter().any(|p| !matches!(p, ContentPart::Text { .. }))
    {
        return Err(unsupported(index, "non-text parts in a system message"));
    }
    Ok(content.text())
}

fn content_blocks(content: Option<&Content>, index: usize) -> Result<Vec<Value>, ModelError> {
    match content {
        None => Ok(Vec::new()),
        Some(Content::Text(text)) => Ok(text_block(text).into_iter().collect()),
        Some(Content::Parts(parts)) => {
            let mut blocks = Vec::new();
            for part in parts {
                match part {
                    ContentPart::Text { text } => blocks.extend(text_block(text)),
                    ContentPart::ImageUrl { image_url } => {
                        blocks.push(json!({"type": "image", "source": source(&image_url.url)}));
                    }
                    ContentPart::File { file } => {
                        let is_pdf = file.filename.to_ascii_lowercase().ends_with(".pdf")
                            || file.file_data.starts_with("data:application/pdf");
                        if !is_pdf {
                            return Err(unsupported(index, &format!("the file `{}` (only PDF files)", file.filename)));
                        }
                        let data = match file.file_data.split_once(";base64,") {
                            Some((_, data)) => data,
                            None => file.file_data.as_str(),
                        };
                        blocks.push(json!({"type": "document",
                            "source": {"type": "base64", "media_type": "application/pdf", "data": data}}));
                    }
                    ContentPart::InputAudio { .. } => return Err(unsupported(index, "audio (input_audio parts)")),
                    ContentPart::VideoUrl { .. } => return Err(unsupported(index, "video (video_url parts)")),
                }
            }
            Ok(blocks)
        }
    }
}

/// A text block; none for empty text, which Anthropic rejects.
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// An image source: `data:<type>;base64,<data>` inline, anything else by
/// URL.
fn source(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((media_type, data)) = rest.split_once(";base64,")
    {
        return json!({"type": "base64", "media_type": media_type, "data": data});
    }
    json!({"type": "url", "url": url})
}

/// The URL of an `image` block of a reply: its `url` source as is, a
/// `base64` source as a `data:` URL.
fn image_block_url(block: &Value) -> Option<String> {
    let source = block.get("source")?;
    match str_at(source, "type") {
        Some("base64") => {
            let media_type = str_at(source, "media_type").unwrap_or("application/octet-stream");
            Some(format!("data:{media_type};base64,{}", str_at(source, "data")?))
        }
        _ => str_at(source, "url").map(str::to_owned),
    }
}

fn assistant_blocks(m: LlmMessage<'_>, index: usize) -> Result<Vec<Value>, ModelError> {
    // Anthropic takes images only from the user: images a model generated
    // (through another provider) stay out of the assistant's turn.
    let content = match m.content() {
        Some(Content::Parts(parts)) => {
            Some(Content::Parts(parts.iter().filter(|p| !matches!(p, ContentPart::ImageUrl { .. })).cloned().collect()))
        }
        other => other.cloned(),
    };
    let mut blocks = content_blocks(content.as_ref(), index)?;
    for call in m.tool_calls().into_iter().flatten() {
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}));
    }
    Ok(blocks)
}

fn tool_result(m: LlmMessage<'_>, index: usize) -> Result<Value, ModelError> {
    let content = match m.content() {
        Some(Content::Parts(_)) => Value::Array(content_blocks(m.content(), index)?),
        other => json!(other.map(Content::text).unwrap_or_default()),
    };
    Ok(json!({
        "type": "tool_result",
        "tool_use_id": m.tool_call_id().unwrap_or_default(),
        "content": content,
    }))
}

/// Anthropic's stop reasons in the engine's words.
fn finish_reason(reason: &str) -> String {
    match reason {
        "end_turn" | "stop_sequence" => "stop",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        other => other,
    }
    .to_owned()
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn block_index(v: &Value) -> u64 {
    v.get("index").and_then(Value::as_u64).unwrap_or(0)
}

fn error_event(body: &Value) -> ModelError {
    let said = ProviderSays::read(body);
    let message = said.message.clone().unwrap_or_else(|| body.to_string());
    said.classify(format!("the provider reported an error: {}", quote(&message)), true).with_detail(body.clone())
}

/// The reply in a non-streamed response body.
pub fn read_response(body: &Value, mut reply: ReplyBuilder) -> Result<Completion, ModelError> {
    if str_at(body, "type") == Some("error") || body.get("error").is_some_and(Value::is_object) {
        return Err(error_event(body));
    }
    let Some(content) = body.get("content").and_then(Value::as_array) else {
        // The same body will not read better next time.
        let message = format!("the response has no content: {}", quote(&body.to_string()));
        return Err(ModelError::provider_error(message).with_retryable(false).with_detail(body.clone()));
    };
    reply.model = str_at(body, "model").map(str::to_owned);
    reply.id = str_at(body, "id").map(str::to_owned);
    for (i, block) in content.iter().enumerate() {
        match str_at(block, "type") {
            Some("text") => reply.text(str_at(block, "text").unwrap_or_default()),
            Some("thinking") => reply.reasoning(str_at(block, "thinking").unwrap_or_default()),
            Some("image") => reply.image(&image_block_url(block).unwrap_or_default()),
            Some("tool_use") => {
                let input =
                    block.get("input").filter(|i| !i.is_null()).map_or_else(|| "{}".to_owned(), Value::to_string);
                let key = u64::try_from(i).unwrap_or(u64::MAX);
                reply.call(key, str_at(block, "id"), str_at(block, "name"), Some(&input));
            }
            _ => {}
        }
    }
    reply.finish_reason = str_at(body, "stop_reason").map(finish_reason);
    reply.usage = body.get("usage").filter(|u| u.is_object()).cloned();
    reply.finish("")
}

/// Reads a Messages event stream into a reply.
pub struct StreamReader {
    reply: ReplyBuilder,
    /// Blocks that are tool calls, so `content_block_stop` can give an
    /// argument-less call its `{}`.
    tool_blocks: Vec<u64>,
    done: bool,
}

impl StreamReader {
    /// A reader feeding `reply`.
    pub fn new(reply: ReplyBuilder) -> StreamReader {
        StreamReader { reply, tool_blocks: Vec::new(), done: false }
    }

    /// Takes one event; `Ok(true)` once `message_stop` came.
    pub fn event(&mut self, event: &SseEvent) -> Result<bool, ModelError> {
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::provider_error(format!(
                "the stream sent a `{}` event that is not JSON ({e}): {}",
                event.event,
                quote(&event.data)
            ))
        })?;
        let kind = str_at(&data, "type").unwrap_or(&event.event);
        match kind {
            "message_start" => {
                let message = data.get("message").unwrap_or(&Value::Null);
                self.reply.model = str_at(message, "model").map(str::to_owned);
                self.reply.id = str_at(message, "id").map(str::to_owned);
                self.reply.usage = message.get("usage").filter(|u| u.is_object()).cloned();
            }
            "content_block_start" => {
                let index = block_index(&data);
                let block = data.get("content_block").unwrap_or(&Value::Null);
                match str_at(block, "type") {
                    Some("text") => self.reply.text(str_at(block, "text").unwrap_or_default()),
                    Some("thinking") => self.reply.reasoning(str_at(block, "thinking").unwrap_or_default()),
                    Some("image") => self.reply.image(&image_block_url(block).unwrap_or_default()),
                    Some("tool_use") => {
                        self.tool_blocks.push(index);
                        // The input streams as `input_json_delta`s; a
                        // non-empty input here (not seen in practice) is
                        // kept rather than lost.
                        let input = block.get("input").filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
                        let input = input.map(Value::to_string);
                        self.reply.call(index, str_at(block, "id"), str_at(block, "name"), input.as_deref());
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let index = block_index(&data);
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match str_at(delta, "type") {
                    Some("text_delta") => self.reply.text(str_at(delta, "text").unwrap_or_default()),
                    Some("thinking_delta") => self.reply.reasoning(str_at(delta, "thinking").unwrap_or_default()),
                    Some("input_json_delta") => {
                        self.reply.call(index, None, None, str_at(delta, "partial_json"));
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = block_index(&data);
                if self.tool_blocks.contains(&index) && self.reply.call_arguments(index) == Some("") {
                    self.reply.call(index, None, None, Some("{}"));
                }
            }
            "message_delta" => {
                if let Some(reason) = data.get("delta").and_then(|d| str_at(d, "stop_reason")) {
                    self.reply.finish_reason = Some(finish_reason(reason));
                }
                if let Some(Value::Object(more)) = data.get("usage") {
                    // The final counts: they update what message_start said.
                    match &mut self.reply.usage {
                        Some(Value::Object(usage)) => {
                            usage
                                .extend(more.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())));
                        }
                        _ => self.reply.usage = Some(Value::Object(more.clone())),
                    }
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(true);
            }
            "error" => return Err(error_event(&data)),
            // `ping`, and event types added after this was written.
            _ => {}
        }
        Ok(false)
    }

    /// The reply, once the stream ended; an error when it ended before
    /// `message_stop`.
    pub fn finish(self, provider: &str) -> Result<Completion, ModelError> {
        if !self.done {
            return Err(ModelError::provider_error(format!(
                "the stream from {provider} ended before `message_stop`: the reply is incomplete"
            )));
        }
        self.reply.finish("")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use subs_protocol::{DraftMessage, ErrorCode, FileData, LlmTool, ReasoningConfig, StreamDelta, ToolCall, UrlRef};

    use super::*;
    use crate::worker::DeltaSink;

    fn request(messages: Vec<DraftMessage>) -> LlmRequest {
        LlmRequest {
            model: "claude-sonnet-4-5".into(),
            messages: messages.into(),
            tools: None,
            temperature: None,
            max_completion_tokens: None,
            reasoning: None,
        }
    }

    #[test]
    fn requests_lift_system_and_merge_tool_results_into_one_user_turn() {
        let mut assistant = DraftMessage::assistant("let me see");
        assistant.tool_calls =
            Some(vec![ToolCall::function("t1", "add", r#"{"a":1}"#), ToolCall::function("t2", "now", "oops")]);
        let mut req = request(vec![
            DraftMessage::system("be brief"),
            DraftMessage::user("hi"),
            assistant,
            DraftMessage::tool("t1", "2"),
            DraftMessage::tool("t2", "noon"),
            DraftMessage::system("and kind"),
            DraftMessage::user("thanks"),
        ]);
        req.tools = Some(vec![LlmTool { name: "now".into(), description: "time".into(), input: None, output: None }]);
        req.temperature = Some(0.2);
        let body = request_body(&req, 1000, true).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 1000,
                "system": "be brief\n\nand kind",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "let me see"},
                        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1}},
                        {"type": "tool_use", "id": "t2", "name": "now", "input": {}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "2"},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "noon"},
                        {"type": "text", "text": "thanks"}
                    ]}
                ],
                "tools": [{"name": "now", "description": "time", "input_schema": {"type": "object", "properties": {}}}],
                "temperature": 0.2,
                "stream": true
            })
        );
    }

    #[test]
    fn reasoning_becomes_a_thinking_budget_with_room_to_answer() {
        let mut req = request(vec![DraftMessage::user("hi")]);
        req.reasoning = Some(ReasoningConfig { effort: Some(ReasoningEffort::High), ..ReasoningConfig::default() });
        let body = request_body(&req, 4096, false).unwrap();
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
        assert_eq!(body["max_tokens"], 16384 + 4096);
        req.max_completion_tokens = Some(20_000);
        req.reasoning = Some(ReasoningConfig { max_tokens: Some(500), ..ReasoningConfig::default() });
        let body = request_body(&req, 4096, false).unwrap();
        assert_eq!(body["thinking"]["budget_tokens"], 1024);
        assert_eq!(body["max_tokens"], 20_000);
        for off in [
            ReasoningConfig { enabled: Some(false), max_tokens: Some(2000), ..ReasoningConfig::default() },
            ReasoningConfig { effort: Some(ReasoningEffort::None), ..ReasoningConfig::default() },
            ReasoningConfig { exclude: Some(true), ..ReasoningConfig::default() },
        ] {
            req.reasoning = Some(off);
            assert!(request_body(&req, 4096, false).unwrap().get("thinking").is_none());
        }
    }

    #[test]
    fn media_parts_map_or_are_refused() {
        let mut user = DraftMessage::user("");
        user.content = Some(Content::Parts(vec![
            ContentPart::ImageUrl { image_url: UrlRef { url: "data:image/png;base64,AAAA".into() } },
            ContentPart::ImageUrl { image_url: UrlRef { url: "https://x/y.jpg".into() } },
            ContentPart::File { file: FileData { filename: "a.PDF".into(), file_data: "JVBE".into() } },
        ]));
        let body = request_body(&request(vec![user]), 10, false).unwrap();
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.jpg"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}
            ])
        );
        let mut audio = DraftMessage::user("");
        audio.content = Some(Content::Parts(vec![ContentPart::InputAudio {
            input_audio: subs_protocol::AudioData { data: "x".into(), format: "wav".into() },
        }]));
        let e = request_body(&request(vec![DraftMessage::user("a"), audio]), 10, false).unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false));
        assert!(e.message.starts_with("messages[1]: "), "{e}");
    }

    fn ev(data: Value) -> SseEvent {
        SseEvent { event: data["type"].as_str().unwrap_or_default().to_owned(), data: data.to_string(), id: None }
    }

    fn read_stream(events: &[SseEvent]) -> (Result<Completion, ModelError>, Vec<StreamDelta>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        let sink: DeltaSink = Arc::new(move |d| {
            into.lock().unwrap().push(d);
            Ok(())
        });
        let mut reader = StreamReader::new(ReplyBuilder::new(Some(sink), true));
        for e in events {
            match reader.event(e) {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => return (Err(e), seen.lock().unwrap().clone()),
            }
        }
        (reader.finish("p"), seen.lock().unwrap().clone())
    }

    fn start() -> SseEvent {
        ev(json!({"type": "message_start", "message": {"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message",
                "model": "claude-x", "usage": {"input_tokens": 9, "output_tokens": 1}}}))
    }

    #[test]
    fn a_stream_of_thinking_text_and_tools_becomes_one_reply() {
        let events = [
            start(),
            ev(json!({"type": "ping"})),
            ev(
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
            ev(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "On it."}})),
            ev(json!({"type": "content_block_stop", "index": 1})),
            ev(json!({"type": "content_block_start", "index": 2,
                "content_block": {"type": "tool_use", "id": "tu1", "name": "add", "input": {}}})),
            ev(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\""}}),
            ),
            ev(
                json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": ": 1}"}}),
            ),
            ev(json!({"type": "content_block_stop", "index": 2})),
            ev(json!({"type": "content_block_start", "index": 3,
                "content_block": {"type": "tool_use", "id": "tu2", "name": "now", "input": {}}})),
            ev(json!({"type": "content_block_stop", "index": 3})),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}})),
            ev(json!({"type": "message_stop"})),
        ];
        let (response, deltas) = read_stream(&events);
        let Completion { response, id } = response.unwrap();
        assert_eq!(id.as_deref(), Some("msg_01XFDUDYJgAACzvnptvVoYEL"), "message_start's id");
        assert_eq!(response.content.as_deref(), Some("On it."));
        assert_eq!(
            response.tool_calls.unwrap(),
            [ToolCall::function("tu1", "add", r#"{"a": 1}"#), ToolCall::function("tu2", "now", "{}")]
        );
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.usage, Some(json!({"input_tokens": 9, "output_tokens": 30})));
        assert_eq!(response.model, "claude-x");
        assert_eq!(deltas[0].reasoning.as_deref(), Some("hm"));
        assert_eq!(deltas.last().unwrap().finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn error_events_truncation_and_refusals_fail_the_call() {
        let overloaded = ev(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
        let e = read_stream(&[start(), overloaded]).0.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.ends_with("Overloaded"), "{e}");

        let limited = ev(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}));
        assert_eq!(read_stream(&[limited]).0.unwrap_err().code, ErrorCode::RateLimited);

        let e = read_stream(&[start(), ev(json!({"type": "ping"}))]).0.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.contains("message_stop"), "{e}");

        let refusal = [
            start(),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "refusal"}})),
            ev(json!({"type": "message_stop"})),
        ];
        assert_eq!(read_stream(&refusal).0.unwrap_err().code, ErrorCode::Refused);

        let garbage =
            SseEvent { event: "content_block_delta".into(), data: "{\"type\": \"content_bl".into(), id: None };
        let e = read_stream(&[start(), garbage]).0.unwrap_err();
        assert!(e.message.contains("`content_block_delta` event that is not JSON"), "{e}");
    }

    #[test]
    fn non_streamed_messages_read_blocks_and_stop_reasons() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [
                {"type": "thinking", "thinking": "…", "signature": "x"},
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "tu", "name": "add", "input": {"a": 1, "b": 2}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 5, "output_tokens": 6}
        });
        let Completion { response, id } = read_response(&body, ReplyBuilder::new(None, true)).unwrap();
        assert_eq!(id.as_deref(), Some("msg_1"));
        assert_eq!(response.content.as_deref(), Some("Sure."));
        assert_eq!(response.tool_calls.unwrap(), [ToolCall::function("tu", "add", r#"{"a":1,"b":2}"#)]);
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        let length = json!({"content": [{"type": "text", "text": "…"}], "stop_reason": "max_tokens"});
        assert_eq!(
            read_response(&length, ReplyBuilder::new(None, true)).unwrap().response.finish_reason.as_deref(),
            Some("length")
        );
        let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}});
        let e = read_response(&error, ReplyBuilder::new(None, true)).unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false));
    }
}
