//! Translation between the engine's provider-neutral [`LlmRequest`] /
//! [`LlmResponse`] and a provider's own JSON, without any I/O.
//!
//! Worker-handled LLM calls use it: when an agent's config sets `format`,
//! the `llm.execute` trigger carries the request in that provider's shape
//! ([`to_native`]) and the worker's `llm.result` carries the provider's
//! response as the provider sent it ([`from_native`]). The providers in this
//! module's siblings send and read exactly these shapes.

use serde_json::Value;
use subs_protocol::{LlmFormat, LlmRequest, LlmResponse};

use super::anthropic::{self, DEFAULT_MAX_TOKENS};
use super::reply::ReplyBuilder;
use super::{Completion, ModelError, openai};

/// The body of a non-streamed request in `format` for `request`.
///
/// `request.model` is sent as it is: pass the provider's own model name
/// (`gpt-4o`, not `openai/gpt-4o`; [`Models::resolve`](super::Models::resolve)
/// splits names). Anthropic's required `max_tokens` is the request's
/// `max_completion_tokens`, else [`DEFAULT_MAX_TOKENS`]. The only failure is
/// content the format cannot carry (audio or video for Anthropic), a
/// not-retryable `provider_error` naming the message.
pub fn to_native(format: LlmFormat, request: &LlmRequest) -> Result<Value, ModelError> {
    match format {
        LlmFormat::Openai => Ok(openai::request_body(request, false)),
        LlmFormat::Anthropic => anthropic::request_body(request, DEFAULT_MAX_TOKENS, false),
    }
}

/// The [`LlmResponse`] in a provider's non-streamed response body: content,
/// tool calls (`type: "function"`), the finish reason in the engine's words
/// (`stop`, `tool_calls`, `length`, …; tool calls win over `stop`), usage as
/// the provider sent it, and the model the provider named. `cost` is left
/// empty: [`PriceTable::cost`](super::PriceTable::cost) computes it from the
/// full model name and the usage.
///
/// Errors, with the codes a provider call would get: an error body
/// (classified by its type), a refusal (`refused`), and a body that is not
/// a response of the format (`provider_error`, not retryable, since the
/// same body will not read better next time).
pub fn from_native(format: LlmFormat, response: &Value) -> Result<LlmResponse, ModelError> {
    completion_from_native(format, response).map(|done| done.response)
}

/// [`from_native`], with the provider's id of the reply (its body's `id`)
/// beside the response.
pub fn completion_from_native(format: LlmFormat, response: &Value) -> Result<Completion, ModelError> {
    let reply = ReplyBuilder::new(None, true);
    match format {
        LlmFormat::Openai => openai::read_response(response, reply),
        LlmFormat::Anthropic => anthropic::read_response(response, reply),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use subs_protocol::{DraftMessage, ErrorCode, ToolCall};

    use super::*;

    fn request() -> LlmRequest {
        let mut assistant = DraftMessage::assistant("");
        assistant.tool_calls = Some(vec![ToolCall::function("c1", "add", r#"{"a":1}"#)]);
        LlmRequest {
            model: "m".into(),
            messages: vec![
                DraftMessage::system("sys"),
                DraftMessage::user("hi"),
                assistant,
                DraftMessage::tool("c1", "1"),
            ]
            .into(),
            tools: None,
            temperature: None,
            max_completion_tokens: None,
            reasoning: None,
        }
    }

    #[test]
    fn to_native_speaks_each_format() {
        let openai = to_native(LlmFormat::Openai, &request()).unwrap();
        assert_eq!(openai["messages"][0], json!({"role": "system", "content": "sys"}));
        assert_eq!(openai["messages"][3], json!({"role": "tool", "tool_call_id": "c1", "content": "1"}));
        assert!(openai.get("stream").is_none());

        let anthropic = to_native(LlmFormat::Anthropic, &request()).unwrap();
        assert_eq!(anthropic["system"], "sys");
        assert_eq!(anthropic["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(anthropic["messages"][2]["content"][0]["type"], "tool_result");
    }

    #[test]
    fn from_native_reads_each_format() {
        let openai = json!({"model": "gpt-x", "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1}});
        let response = from_native(LlmFormat::Openai, &openai).unwrap();
        assert_eq!(
            (response.model.as_str(), response.content.as_deref(), response.finish_reason.as_deref()),
            ("gpt-x", Some("hello"), Some("stop"))
        );
        assert_eq!(response.cost, None);

        let anthropic = json!({"id": "msg_7", "model": "claude-x", "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 1, "output_tokens": 1}});
        let response = from_native(LlmFormat::Anthropic, &anthropic).unwrap();
        assert_eq!((response.content.as_deref(), response.finish_reason.as_deref()), (Some("hi"), Some("stop")));
        let done = completion_from_native(LlmFormat::Anthropic, &anthropic).unwrap();
        assert_eq!((done.id.as_deref(), done.response), (Some("msg_7"), response));
        assert_eq!(completion_from_native(LlmFormat::Openai, &openai).unwrap().id, None, "a body without an id");
    }

    #[test]
    fn from_native_rejects_what_is_not_a_response() {
        for format in [LlmFormat::Openai, LlmFormat::Anthropic] {
            for body in [json!({}), json!(null), json!([1]), json!({"choices": 3, "content": "x"})] {
                let e = from_native(format, &body).unwrap_err();
                assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false), "{format:?} {body}");
            }
        }
    }
}
