//! The OpenAI Chat Completions wire format (`POST {base}/chat/completions`),
//! spoken by OpenAI and by most local servers (Ollama, llama.cpp, vLLM, …).
//!
//! - Messages map one to one; content parts keep OpenAI's shapes (the
//!   protocol's are OpenAI's); tools become `{"type": "function",
//!   "function": {name, description, parameters}}` (a tool without an input
//!   schema gets an empty object schema).
//! - `max_completion_tokens` and `temperature` pass through; reasoning
//!   passes as `reasoning_effort` (OpenAI has no thinking budget, so
//!   `reasoning.max_tokens` is not sent).
//! - Images a model generates come as the message's (or the delta's)
//!   `images`, `[{"type": "image_url", "image_url": {"url": …}}]` (as
//!   OpenRouter sends them), or as `image_url` parts of an array content;
//!   an assistant message's `image_url` parts go back as its `images`, its
//!   text as its content (Chat Completions takes only text there).
//! - Streaming asks for `stream_options.include_usage`, so usage arrives in
//!   a last chunk with no choices. `delta.tool_calls` fragments join per
//!   `index`; the id and name come on a call's first fragment, arguments
//!   split anywhere. `delta.reasoning_content` (DeepSeek, vLLM, llama.cpp)
//!   and `delta.reasoning` (Ollama, OpenRouter) stream as reasoning. The
//!   stream ends with `data: [DONE]`; without it the reply is incomplete.

use serde_json::{Map, Value, json};
use subs_protocol::{Content, ContentPart, LlmMessage, LlmRequest, Role};

use super::reply::{ReplyBuilder, image_url};
use super::says::{ProviderSays, quote};
use super::sse::SseEvent;
use super::{Completion, ModelError};

/// The request body for `request` (whose `model` is sent as is).
pub fn request_body(request: &LlmRequest, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(request.messages.iter().map(message).collect()));
    if let Some(tools) = request.tools.as_ref().filter(|t| !t.is_empty()) {
        let tools = tools
            .iter()
            .map(|t| {
                let mut function = Map::new();
                function.insert("name".into(), json!(t.name));
                if !t.description.is_empty() {
                    function.insert("description".into(), json!(t.description));
                }
                function.insert("parameters".into(), t.input.as_deref().cloned().unwrap_or_else(empty_schema));
                json!({"type": "function", "function": function})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(max) = request.max_completion_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    if let Some(effort) = request.reasoning.as_ref().and_then(|r| r.effort) {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Value::Object(body)
}

/// The schema of a tool that takes no arguments.
pub fn empty_schema() -> Value {
    json!({"type": "object", "properties": {}})
}

fn message(m: LlmMessage<'_>) -> Value {
    let mut out = Map::new();
    let role = match m.role() {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    out.insert("role".into(), json!(role));
    let content = m.content().map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
    match m.role() {
        Role::Assistant => {
            let calls = m.tool_calls().filter(|c| !c.is_empty());
            // Chat Completions takes only text in an assistant's content:
            // images the model made go back the way they came, as the
            // message's `images`.
            let (content, images) = assistant_images(m.content(), content);
            if !images.is_empty() {
                out.insert("images".into(), Value::Array(images));
            }
            let content = match (content, calls) {
                (Some(Value::String(s)), Some(_)) if s.is_empty() => Value::Null,
                (Some(c), _) => c,
                (None, Some(_)) => Value::Null,
                (None, None) => json!(""),
            };
            out.insert("content".into(), content);
            if let Some(calls) = calls {
                out.insert("tool_calls".into(), serde_json::to_value(calls).unwrap_or(Value::Null));
            }
        }
        Role::Tool => {
            out.insert("tool_call_id".into(), json!(m.tool_call_id().unwrap_or_default()));
            out.insert("content".into(), content.unwrap_or_else(|| json!("")));
        }
        Role::System | Role::User => {
            out.insert("content".into(), content.unwrap_or_else(|| json!("")));
        }
    }
    if let Some(name) = m.name() {
        out.insert("name".into(), json!(name));
    }
    Value::Object(out)
}

/// An assistant message's content without its images, and the images as
/// `{"type": "image_url", "image_url": {url}}` parts. Content without
/// images is left as it is.
fn assistant_images(content: Option<&Content>, as_json: Option<Value>) -> (Option<Value>, Vec<Value>) {
    let Some(Content::Parts(parts)) = content else { return (as_json, Vec::new()) };
    let (images, rest): (Vec<&ContentPart>, Vec<&ContentPart>) =
        parts.iter().partition(|p| matches!(p, ContentPart::ImageUrl { .. }));
    if images.is_empty() {
        return (as_json, Vec::new());
    }
    let images = images.into_iter().map(|p| serde_json::to_value(p).unwrap_or(Value::Null)).collect();
    let text = Content::Parts(rest.into_iter().cloned().collect()).text();
    (Some(json!(text)), images)
}

/// The reply in a non-streamed response body; the builder's sink, if any,
/// gets it as deltas (for a server that ignored `stream: true`).
pub fn read_response(body: &Value, mut reply: ReplyBuilder) -> Result<Completion, ModelError> {
    if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
        return Err(error_in_body(error, body));
    }
    let Some(choice) = body.get("choices").and_then(|c| c.get(0)) else {
        // The same body will not read better next time.
        let message = format!("the response has no choices: {}", quote(&body.to_string()));
        return Err(ModelError::provider_error(message).with_retryable(false).with_detail(body.clone()));
    };
    reply.model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    reply.id = str_at(body, "id").map(str::to_owned);
    let message = choice.get("message").unwrap_or(&Value::Null);
    for key in ["reasoning_content", "reasoning"] {
        if let Some(text) = message.get(key).and_then(Value::as_str) {
            reply.reasoning(text);
        }
    }
    match message.get("content") {
        Some(Value::String(text)) => reply.text(text),
        Some(content @ Value::Array(_)) => {
            if let Ok(content) = serde_json::from_value::<Content>(content.clone()) {
                reply.text(&content.text());
                if let Content::Parts(parts) = &content {
                    for part in parts {
                        if let ContentPart::ImageUrl { image_url } = part {
                            reply.image(&image_url.url);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    for image in message.get("images").and_then(Value::as_array).into_iter().flatten() {
        reply.image(image_url(image).unwrap_or_default());
    }
    if let Some(refusal) = message.get("refusal").and_then(Value::as_str) {
        reply.refusal(refusal);
    }
    for (i, call) in message.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let function = call.get("function").unwrap_or(&Value::Null);
        let arguments = arguments_text(function.get("arguments"));
        let key = u64::try_from(i).unwrap_or(u64::MAX);
        reply.call(key, str_at(call, "id"), str_at(function, "name"), Some(&arguments));
    }
    reply.finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(finish_reason);
    reply.usage = body.get("usage").filter(|u| u.is_object()).cloned();
    reply.finish("")
}

/// Arguments as text: a string as is; an object (some servers send one) as
/// compact JSON.
fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// OpenAI's finish reasons in the engine's words (the legacy
/// `function_call` is a tool call).
fn finish_reason(reason: &str) -> String {
    match reason {
        "function_call" => "tool_calls".to_owned(),
        other => other.to_owned(),
    }
}

fn error_in_body(error: &Value, body: &Value) -> ModelError {
    let wrapped = json!({"error": error});
    let said = ProviderSays::read(&wrapped);
    let message = said.message.clone().unwrap_or_else(|| error.to_string());
    said.classify(format!("the provider reported an error: {}", quote(&message)), true).with_detail(body.clone())
}

/// Reads a Chat Completions event stream into a reply.
pub struct StreamReader {
    reply: ReplyBuilder,
    done: bool,
}

impl StreamReader {
    /// A reader feeding `reply`.
    pub fn new(reply: ReplyBuilder) -> StreamReader {
        StreamReader { reply, done: false }
    }

    /// Takes one event; `Ok(true)` once the stream's end (`[DONE]`) came.
    pub fn event(&mut self, event: &SseEvent) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            ModelError::provider_error(format!("the stream sent a chunk that is not JSON ({e}): {}", quote(data)))
        })?;
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(error_in_body(error, &chunk));
        }
        if !chunk.is_object() {
            return Err(ModelError::provider_error(format!(
                "the stream sent a chunk that is not an object: {}",
                quote(data)
            )));
        }
        if self.reply.model.is_none() {
            self.reply.model = str_at(&chunk, "model").filter(|m| !m.is_empty()).map(str::to_owned);
        }
        // Every chunk repeats the completion's id; the first one names it.
        if self.reply.id.is_none() {
            self.reply.id = str_at(&chunk, "id").filter(|id| !id.is_empty()).map(str::to_owned);
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.reply.usage = Some(usage.clone());
        }
        // One choice is asked for; others (if a server sends them) are not
        // part of this reply.
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0))
        else {
            return Ok(false);
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = str_at(delta, key) {
                self.reply.reasoning(text);
            }
        }
        if let Some(text) = str_at(delta, "content") {
            self.reply.text(text);
        }
        if let Some(text) = str_at(delta, "refusal") {
            self.reply.refusal(text);
        }
        for image in delta.get("images").and_then(Value::as_array).into_iter().flatten() {
            self.reply.image(image_url(image).unwrap_or_default());
        }
        for fragment in delta.get("tool_calls").and_then(Value::as_array).into_iter().flatten() {
            let id = str_at(fragment, "id");
            let function = fragment.get("function").unwrap_or(&Value::Null);
            let key = match fragment.get("index").and_then(Value::as_u64) {
                Some(index) => index,
                // Without an index: a fragment with a new id starts a call,
                // one without continues the last.
                None => match (id, self.reply.last_call()) {
                    (None, Some(last)) => last,
                    _ => (0..).find(|k| !self.reply.has_call(*k)).unwrap_or(0),
                },
            };
            let arguments = arguments_text(function.get("arguments"));
            self.reply.call(key, id, str_at(function, "name"), Some(&arguments));
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.reply.finish_reason = Some(finish_reason(reason));
        }
        Ok(false)
    }

    /// The reply, once the stream ended; an error when it ended before
    /// `[DONE]`.
    pub fn finish(self, provider: &str) -> Result<Completion, ModelError> {
        if !self.done {
            return Err(ModelError::provider_error(format!(
                "the stream from {provider} ended before `data: [DONE]`: the reply is incomplete"
            )));
        }
        self.reply.finish("")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use subs_protocol::{
        ContentPart, DraftMessage, ErrorCode, LlmTool, ReasoningConfig, ReasoningEffort, StreamDelta, ToolCall, UrlRef,
    };

    use super::*;
    use crate::worker::DeltaSink;

    fn full_request() -> LlmRequest {
        let mut assistant = DraftMessage::assistant("");
        assistant.tool_calls = Some(vec![ToolCall::function("c1", "add", r#"{"a":1}"#)]);
        let mut user = DraftMessage::user("");
        user.content = Some(Content::Parts(vec![
            ContentPart::Text { text: "look".into() },
            ContentPart::ImageUrl { image_url: UrlRef { url: "https://x/y.png".into() } },
        ]));
        user.name = Some("ann".into());
        LlmRequest {
            model: "gpt-4o".into(),
            messages: vec![DraftMessage::system("be brief"), user, assistant, DraftMessage::tool("c1", "2")].into(),
            tools: Some(vec![
                LlmTool {
                    name: "add".into(),
                    description: "adds".into(),
                    input: Some(json!({"type": "object", "properties": {"a": {"type": "number"}}}).into()),
                    output: None,
                },
                LlmTool { name: "now".into(), description: String::new(), input: None, output: None },
            ]),
            temperature: Some(0.5),
            max_completion_tokens: Some(100),
            reasoning: Some(ReasoningConfig { effort: Some(ReasoningEffort::Low), ..ReasoningConfig::default() }),
        }
    }

    #[test]
    fn requests_carry_every_field_in_openai_shape() {
        let body = request_body(&full_request(), true);
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
                    ], "name": "ann"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\":1}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "2"}
                ],
                "tools": [
                    {"type": "function", "function": {"name": "add", "description": "adds",
                        "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}},
                    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}
                ],
                "temperature": 0.5,
                "max_completion_tokens": 100,
                "reasoning_effort": "low",
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
        let plain = request_body(&LlmRequest { tools: Some(vec![]), ..full_request() }, false);
        assert!(plain.get("stream").is_none() && plain.get("tools").is_none());
    }

    fn events(chunks: &[Value]) -> Vec<SseEvent> {
        chunks
            .iter()
            .map(|c| SseEvent { event: "message".into(), data: c.to_string(), id: None })
            .chain([SseEvent { event: "message".into(), data: "[DONE]".into(), id: None }])
            .collect()
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
        let response = reader.finish("p");
        (response, seen.lock().unwrap().clone())
    }

    #[test]
    fn a_stream_with_stop_and_tool_calls_is_a_tool_call_reply() {
        let chunks = [
            json!({"id": "chatcmpl-1", "model": "m-1",
                "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "think"}}]}),
            json!({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"q\":\"x\\"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 1, "id": "b", "function": {"name": "g", "arguments": ""}},
                {"index": 0, "function": {"arguments": "\"y\"}"}}
            ]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}),
        ];
        let (response, deltas) = read_stream(&events(&chunks));
        let Completion { response, id } = response.unwrap();
        assert_eq!(response.model, "m-1");
        assert_eq!(id.as_deref(), Some("chatcmpl-1"), "the id every chunk repeats");
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            response.tool_calls.unwrap(),
            [ToolCall::function("a", "f", r#"{"q":"x\"y"}"#), ToolCall::function("b", "g", "")]
        );
        assert_eq!(response.usage, Some(json!({"prompt_tokens": 3, "completion_tokens": 4})));
        assert_eq!(deltas[0].reasoning.as_deref(), Some("think"));
        assert_eq!(deltas.last().unwrap().finish_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn stream_faults_are_errors_with_codes() {
        let bad = [SseEvent { event: "message".into(), data: "{\"choices\": [".into(), id: None }];
        let (response, _) = read_stream(&bad);
        let e = response.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.contains("not JSON"), "{e}");

        let error = [SseEvent {
            event: "message".into(),
            data: json!({"error": {"message": "boom", "type": "server_error"}}).to_string(),
            id: None,
        }];
        let e = read_stream(&error).0.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.contains("boom"), "{e}");

        let refusal =
            events(&[json!({"choices": [{"index": 0, "delta": {"refusal": "No."}, "finish_reason": "stop"}]})]);
        assert_eq!(read_stream(&refusal).0.unwrap_err().code, ErrorCode::Refused);
        let filtered = events(&[json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]})]);
        assert_eq!(read_stream(&filtered).0.unwrap_err().code, ErrorCode::Refused);

        let mut truncated = events(&[json!({"choices": [{"index": 0, "delta": {"content": "hi"}}]})]);
        truncated.pop();
        let e = read_stream(&truncated).0.unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.contains("[DONE]"), "{e}");

        for odd in [json!([1, 2]), json!("x")] {
            let e = read_stream(&events(std::slice::from_ref(&odd))).0.unwrap_err();
            assert!(e.message.contains("not an object"), "{e}");
        }
        // Odd shapes inside a chunk are skipped, not fatal.
        for odd in [json!({"choices": "no"}), json!({"choices": [{"delta": 3, "finish_reason": 4}]})] {
            let Completion { response, id } = read_stream(&events(std::slice::from_ref(&odd))).0.unwrap();
            assert_eq!((response.content, response.tool_calls, id), (None, None, None));
        }
    }

    #[test]
    fn non_streamed_responses_read_content_calls_and_refusals() {
        let body = json!({
            "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
            "object": "chat.completion",
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
            }}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
        });
        let Completion { response, id } = read_response(&body, ReplyBuilder::new(None, true)).unwrap();
        assert_eq!(id.as_deref(), Some("chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT"));
        assert_eq!(response.tool_calls.unwrap(), [ToolCall::function("c", "f", r#"{"a":1}"#)]);
        assert_eq!(response.content, None);
        assert_eq!(response.model, "gpt-4o-2024-08-06");

        let refused =
            json!({"choices": [{"message": {"content": null, "refusal": "I can't."}, "finish_reason": "stop"}]});
        assert_eq!(read_response(&refused, ReplyBuilder::new(None, true)).unwrap_err().code, ErrorCode::Refused);
        let empty = json!({"choices": []});
        let e = read_response(&empty, ReplyBuilder::new(None, true)).unwrap_err();
        assert!(e.message.contains("no choices"), "{e}");
        let error = json!({"error": {"message": "quota", "code": "rate_limit_exceeded"}});
        assert_eq!(read_response(&error, ReplyBuilder::new(None, true)).unwrap_err().code, ErrorCode::RateLimited);
    }
}
