//! Why an LLM call failed, in the terms the loop acts on.

use std::fmt;
use std::time::Duration;

use serde_json::Value;
use subs_protocol::ErrorCode;

/// A failed LLM call: what went wrong, its [`ErrorCode`], and whether trying
/// again may help. Providers map their failures onto it (429 →
/// [`rate_limited`](Self::rate_limited), refusals →
/// [`refused`](Self::refused), timeouts →
/// [`deadline_exceeded`](Self::deadline_exceeded), the rest →
/// [`provider_error`](Self::provider_error)); the loop retries the retryable
/// ones per the call's retry policy and reports the others as the
/// `error`/`code`/`detail` of `llm.finished`.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelError {
    /// What went wrong, for people and for the worker's `llm.finished`.
    pub message: String,
    /// The failure's kind, for callers that handle failures by kind.
    pub code: ErrorCode,
    /// Whether the same call may succeed if tried again.
    pub retryable: bool,
    /// How long the provider asked us to wait before trying again
    /// (`retry-after`); it overrides the policy's backoff when longer.
    pub retry_after: Option<Duration>,
    /// The provider's own error body, passed on verbatim as `detail`.
    pub detail: Option<Value>,
}

impl ModelError {
    /// An error of kind `code`, retryable when that kind usually passes on a
    /// later try (`provider_error`, `rate_limited`, `deadline_exceeded`).
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let retryable = matches!(code, ErrorCode::ProviderError | ErrorCode::RateLimited | ErrorCode::DeadlineExceeded);
        Self { message: message.into(), code, retryable, retry_after: None, detail: None }
    }

    /// The provider failed (5xx, overloaded, a broken stream); retryable.
    pub fn provider_error(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::ProviderError, message)
    }

    /// The provider said to slow down (429); retryable, after `retry_after`
    /// when the provider said how long.
    pub fn rate_limited(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Self { retry_after, ..Self::new(ErrorCode::RateLimited, message) }
    }

    /// The model refused to answer; not retryable.
    pub fn refused(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Refused, message)
    }

    /// The call ran past its deadline; retryable.
    pub fn deadline_exceeded(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::DeadlineExceeded, message)
    }

    /// The session's or tenant's budget is spent; not retryable.
    pub fn budget_exceeded(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BudgetExceeded, message)
    }

    /// A request no try can fix (an unknown model, a request the provider
    /// rejects as invalid): `provider_error`, not retryable.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::provider_error(message).with_retryable(false)
    }

    /// Overrides whether the call may be tried again.
    #[must_use]
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Sets how long to wait before trying again.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// Attaches the provider's own error body.
    #[must_use]
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ModelError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryability_follows_the_code_unless_overridden() {
        assert!(ModelError::provider_error("x").retryable);
        assert!(ModelError::deadline_exceeded("x").retryable);
        assert!(!ModelError::refused("x").retryable);
        assert!(!ModelError::budget_exceeded("x").retryable);
        let e = ModelError::invalid_request("bad");
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false));
        let e = ModelError::rate_limited("slow down", Some(Duration::from_secs(3)));
        assert_eq!((e.code, e.retryable, e.retry_after), (ErrorCode::RateLimited, true, Some(Duration::from_secs(3))));
        assert_eq!(e.to_string(), "slow down");
    }
}
