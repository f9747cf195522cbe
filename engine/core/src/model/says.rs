//! What a provider's error object says, read the same for both wire
//! formats: by the formats (an error event in a stream) and by the HTTP
//! providers (an error body).

use serde_json::Value;

use super::ModelError;

/// Longest piece of a provider's text quoted in a message.
const MAX_QUOTE: usize = 300;

/// What a provider's error object says: OpenAI's `{"error": {"message",
/// "type", "code"}}` and Anthropic's `{"type": "error", "error": {"type",
/// "message"}}` both read.
#[derive(Debug, Default)]
pub struct ProviderSays {
    /// The error's message.
    pub message: Option<String>,
    /// The error's type.
    pub kind: Option<String>,
    /// The error's code.
    pub code: Option<String>,
}

impl ProviderSays {
    /// Reads the error object in `body` (the whole body, or a stream's
    /// error event).
    pub fn read(body: &Value) -> ProviderSays {
        let error = match body.get("error") {
            Some(Value::String(message)) => {
                return ProviderSays { message: Some(message.clone()), ..ProviderSays::default() };
            }
            Some(error) => error,
            None => body,
        };
        let text = |key: &str| match error.get(key) {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        ProviderSays { message: text("message"), kind: text("type"), code: text("code") }
    }

    /// The error for a failure the provider described but whose HTTP status
    /// says nothing more (a 4xx, or an error event in a 200 stream):
    /// classified by the error's type and code. `otherwise_retryable` is
    /// what an unknown kind gets.
    pub fn classify(&self, message: String, otherwise_retryable: bool) -> ModelError {
        let is = |names: &[&str]| [&self.kind, &self.code].into_iter().flatten().any(|k| names.contains(&k.as_str()));
        if is(&["rate_limit_error", "rate_limit_exceeded", "rate_limited"]) {
            ModelError::rate_limited(message, None)
        } else if is(&["content_filter", "content_policy_violation"]) {
            ModelError::refused(message)
        } else if is(&["overloaded_error", "api_error", "server_error", "internal_server_error"]) {
            ModelError::provider_error(message)
        } else if is(&["timeout_error", "request_timeout"]) {
            ModelError::deadline_exceeded(message)
        } else if is(&["invalid_request_error", "authentication_error", "permission_error", "not_found_error"]) {
            ModelError::invalid_request(message)
        } else {
            ModelError::provider_error(message).with_retryable(otherwise_retryable)
        }
    }
}

/// `text`, cut to a quotable length on a character boundary.
pub fn quote(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTE) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
