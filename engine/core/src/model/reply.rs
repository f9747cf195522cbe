//! Putting a reply together piece by piece, the same way for both wire
//! formats: text, reasoning and tool-call fragments go to the [`DeltaSink`]
//! as they arrive and into the final [`LlmResponse`]; generated images are
//! kept beside them; the provider's id of the reply goes beside it in the
//! [`Completion`]. [`assistant_message`] is the message a reply is
//! recorded as.

use serde_json::{Value, json};
use subs_protocol::{
    Content, ContentPart, DraftMessage, LlmResponse, Role, StreamDelta, ToolCall, ToolCallDelta, UrlRef,
};

use super::{Completion, ModelError};
use crate::worker::DeltaSink;

/// A tool call being received.
#[derive(Debug)]
struct PartialCall {
    /// The format's handle for it: OpenAI's `index`, Anthropic's content
    /// block index.
    key: u64,
    id: String,
    name: String,
    arguments: String,
}

/// A reply under construction.
pub struct ReplyBuilder {
    sink: Option<DeltaSink>,
    /// Reasoning is streamed unless the request asked to leave it out.
    show_reasoning: bool,
    /// The model the provider says answered.
    pub model: Option<String>,
    /// The provider's id of the reply (`chatcmpl-…`, `msg_…`).
    pub id: Option<String>,
    content: String,
    refusal: String,
    /// In the order they first appeared.
    calls: Vec<PartialCall>,
    /// Generated images, in order (not streamed: a delta has no place for
    /// them).
    images: Vec<UrlRef>,
    /// Why the reply ended, in the engine's words (`stop`, `length`,
    /// `tool_calls`, `content_filter`, `refusal`, …); set by the format.
    pub finish_reason: Option<String>,
    /// The provider's usage object, as sent.
    pub usage: Option<Value>,
}

impl ReplyBuilder {
    /// A builder that streams to `sink`, if any.
    pub fn new(sink: Option<DeltaSink>, show_reasoning: bool) -> ReplyBuilder {
        ReplyBuilder {
            sink,
            show_reasoning,
            model: None,
            id: None,
            content: String::new(),
            refusal: String::new(),
            calls: Vec::new(),
            images: Vec::new(),
            finish_reason: None,
            usage: None,
        }
    }

    /// Streams `delta`. One the sink refuses (over the engine's stream
    /// limits, which the sink logs) is dropped: it is in the reply anyway.
    fn emit(&self, delta: StreamDelta) {
        if let Some(sink) = &self.sink {
            let _ = sink(delta);
        }
    }

    /// More reply text.
    pub fn text(&mut self, text: &str) {
        if !text.is_empty() {
            self.content.push_str(text);
            self.emit(StreamDelta::text(text));
        }
    }

    /// More reasoning text: streamed, not kept (`LlmResponse` has no place
    /// for it).
    pub fn reasoning(&mut self, text: &str) {
        if !text.is_empty() && self.show_reasoning {
            self.emit(StreamDelta { reasoning: Some(text.to_owned()), ..StreamDelta::default() });
        }
    }

    /// A generated image, by URL or `data:` URL; an empty URL is ignored.
    pub fn image(&mut self, url: &str) {
        if !url.is_empty() {
            self.images.push(UrlRef { url: url.to_owned() });
        }
    }

    /// More of the model's refusal message.
    pub fn refusal(&mut self, text: &str) {
        self.refusal.push_str(text);
    }

    /// Whether a call with `key` has started.
    pub fn has_call(&self, key: u64) -> bool {
        self.calls.iter().any(|c| c.key == key)
    }

    /// The key of the last call started, if any.
    pub fn last_call(&self) -> Option<u64> {
        self.calls.last().map(|c| c.key)
    }

    /// The arguments received so far for the call `key`.
    pub fn call_arguments(&self, key: u64) -> Option<&str> {
        self.calls.iter().find(|c| c.key == key).map(|c| c.arguments.as_str())
    }

    /// A fragment of the tool call `key`: the first one starts the call
    /// (an id is minted when the provider sent none), later ones add to its
    /// arguments. Each goes out as a delta carrying the call's id; the name
    /// goes out once, as soon as it is known.
    pub fn call(&mut self, key: u64, id: Option<&str>, name: Option<&str>, arguments: Option<&str>) {
        let name = name.filter(|n| !n.is_empty());
        let arguments = arguments.filter(|a| !a.is_empty());
        let (call, announce_name) = match self.calls.iter().position(|c| c.key == key) {
            Some(i) => {
                let call = &mut self.calls[i];
                let late_name = call.name.is_empty() && name.is_some();
                if late_name {
                    call.name = name.unwrap_or_default().to_owned();
                }
                (call, late_name)
            }
            None => {
                let id = id.filter(|i| !i.is_empty()).map_or_else(|| format!("call_{key}"), str::to_owned);
                let name = name.unwrap_or_default().to_owned();
                let announce = !name.is_empty();
                self.calls.push(PartialCall { key, id, name, arguments: String::new() });
                (self.calls.last_mut().expect("just pushed"), announce)
            }
        };
        if let Some(more) = arguments {
            call.arguments.push_str(more);
        }
        if announce_name || arguments.is_some() {
            let delta = ToolCallDelta {
                id: call.id.clone(),
                name: announce_name.then(|| call.name.clone()),
                arguments: arguments.map(str::to_owned),
            };
            self.emit(StreamDelta { tool_calls: Some(vec![delta]), ..StreamDelta::default() });
        }
    }

    /// The finished reply. Tool calls win over a `stop` (or missing) finish
    /// reason — some OpenAI-compatible servers say `stop` after calling
    /// tools — and a refusal (refusal text, `content_filter`, `refusal`)
    /// is an error. `fallback_model` names the model when the provider did
    /// not. On success the sink gets a last delta with the finish reason.
    pub fn finish(self, fallback_model: &str) -> Result<Completion, ModelError> {
        let refused = matches!(self.finish_reason.as_deref(), Some("content_filter" | "refusal"));
        if refused || !self.refusal.is_empty() {
            let said = if self.refusal.is_empty() { self.content.as_str() } else { self.refusal.as_str() };
            let message = if said.is_empty() {
                "the model refused to answer".to_owned()
            } else {
                format!("the model refused to answer: {}", super::says::quote(said))
            };
            let detail = json!({
                "finish_reason": self.finish_reason,
                "refusal": (!self.refusal.is_empty()).then_some(&self.refusal),
                "content": (!self.content.is_empty()).then_some(&self.content),
            });
            return Err(ModelError::refused(message).with_detail(detail));
        }
        let tool_calls: Vec<ToolCall> =
            self.calls.into_iter().map(|c| ToolCall::function(c.id, c.name, c.arguments)).collect();
        let finish_reason = match self.finish_reason {
            Some(reason) if tool_calls.is_empty() || reason != "stop" => reason,
            _ if !tool_calls.is_empty() => "tool_calls".to_owned(),
            _ => "stop".to_owned(),
        };
        if let Some(sink) = &self.sink {
            let _ = sink(StreamDelta { finish_reason: Some(finish_reason.clone()), ..StreamDelta::default() });
        }
        let response = LlmResponse {
            model: self.model.unwrap_or_else(|| fallback_model.to_owned()),
            content: (!self.content.is_empty()).then_some(self.content),
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            finish_reason: Some(finish_reason),
            usage: self.usage,
            cost: None,
            images: (!self.images.is_empty()).then_some(self.images),
        };
        Ok(Completion { response, id: self.id.filter(|id| !id.is_empty()) })
    }
}

/// The assistant message that records `response`: its text, its generated
/// images as `image_url` parts after the text, and its tool calls. Without
/// images the content is a plain string (none when the text is empty); with
/// images it is a list of parts (a `text` part first when there is text).
/// Images with an empty URL are left out.
pub fn assistant_message(response: &LlmResponse) -> DraftMessage {
    let text = response.content.clone().filter(|c| !c.is_empty());
    let images: Vec<&UrlRef> = response.images.iter().flatten().filter(|i| !i.url.is_empty()).collect();
    let content = if images.is_empty() {
        text.map(Content::Text)
    } else {
        let text = text.map(|text| ContentPart::Text { text });
        let images = images.into_iter().map(|i| ContentPart::ImageUrl { image_url: i.clone() });
        Some(Content::Parts(text.into_iter().chain(images).collect()))
    };
    DraftMessage {
        id: None,
        role: Role::Assistant,
        content,
        tool_calls: response.tool_calls.clone().filter(|c| !c.is_empty()),
        tool_call_id: None,
        name: None,
    }
}

/// An image of a reply given as an OpenAI-style part
/// (`{"type": "image_url", "image_url": {"url": …}}`, as OpenRouter sends
/// them), or as a bare `{"url": …}` or URL string: its URL.
pub fn image_url(image: &Value) -> Option<&str> {
    match image {
        Value::String(url) => Some(url),
        Value::Object(o) => match o.get("image_url") {
            Some(Value::String(url)) => Some(url),
            Some(inner) => inner.get("url").and_then(Value::as_str),
            None => o.get("url").and_then(Value::as_str),
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use subs_protocol::ErrorCode;

    use super::*;

    fn recording() -> (DeltaSink, Arc<Mutex<Vec<StreamDelta>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = Arc::clone(&seen);
        (
            Arc::new(move |d| {
                into.lock().unwrap().push(d);
                Ok(())
            }),
            seen,
        )
    }

    #[test]
    fn fragments_stream_with_ids_and_join_per_call() {
        let (sink, seen) = recording();
        let mut reply = ReplyBuilder::new(Some(sink), true);
        reply.text("Hi ");
        reply.reasoning("hmm");
        reply.call(0, Some("a"), Some("add"), Some(""));
        reply.call(1, None, None, Some("{\"x\""));
        reply.call(1, None, Some("mul"), Some(":1}"));
        reply.call(0, None, None, Some("{}"));
        reply.finish_reason = Some("stop".into());
        let response = reply.finish("m").unwrap().response;
        assert_eq!(
            response.tool_calls.unwrap(),
            [ToolCall::function("a", "add", "{}"), ToolCall::function("call_1", "mul", "{\"x\":1}")]
        );
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.content.as_deref(), Some("Hi "));
        let seen = seen.lock().unwrap();
        let calls: Vec<&ToolCallDelta> = seen.iter().flat_map(|d| d.tool_calls.iter().flatten()).collect();
        let tuple = |d: &ToolCallDelta| (d.id.clone(), d.name.clone(), d.arguments.clone());
        assert_eq!(
            calls.into_iter().map(tuple).collect::<Vec<_>>(),
            [
                ("a".into(), Some("add".into()), None),
                ("call_1".into(), None, Some("{\"x\"".into())),
                ("call_1".into(), Some("mul".into()), Some(":1}".into())),
                ("a".into(), None, Some("{}".into())),
            ]
        );
        assert_eq!(seen.last().unwrap().finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(seen[1].reasoning.as_deref(), Some("hmm"));
    }

    #[test]
    fn excluded_reasoning_is_not_streamed_and_length_is_kept_with_calls() {
        let (sink, seen) = recording();
        let mut reply = ReplyBuilder::new(Some(sink), false);
        reply.reasoning("secret");
        reply.call(0, Some("a"), Some("f"), Some("{"));
        reply.finish_reason = Some("length".into());
        let response = reply.finish("m").unwrap().response;
        assert_eq!(response.finish_reason.as_deref(), Some("length"));
        assert!(seen.lock().unwrap().iter().all(|d| d.reasoning.is_none()));
    }

    #[test]
    fn refusals_are_errors() {
        let mut reply = ReplyBuilder::new(None, true);
        reply.refusal("I can't help with that.");
        let e = reply.finish("m").unwrap_err();
        assert_eq!((e.code, e.retryable), (ErrorCode::Refused, false));
        assert!(e.message.ends_with("I can't help with that."), "{e}");
        let mut reply = ReplyBuilder::new(None, true);
        reply.finish_reason = Some("content_filter".into());
        assert_eq!(reply.finish("m").unwrap_err().code, ErrorCode::Refused);
    }
}
