//! The HTTP side shared by both wire formats: the client, and how a failed
//! exchange (transport error, error status, error body, `retry-after`)
//! becomes a [`ModelError`].
//!
//! | what happened | code | retryable |
//! | --- | --- | --- |
//! | 429 with code `insufficient_quota` | `rate_limited` | no |
//! | other 429 | `rate_limited`, with `retry-after-ms` / `retry-after` (seconds or HTTP date) | yes |
//! | 529, or an error of type `overloaded_error` | `provider_error` | yes |
//! | 408, 504, a connect/read timeout | `deadline_exceeded` | yes |
//! | other 5xx, a connection that failed or broke | `provider_error` | yes |
//! | an error of code `content_filter` / `content_policy_violation` | `refused` | no |
//! | other 4xx | `provider_error`, with the provider's message | no |

use std::time::{Duration, SystemTime};

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use subs_core::model::ModelError;
use subs_core::model::says::{ProviderSays, quote};

/// Longest error body kept for messages and `detail`.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Reads `response` to its end, keeping at most `limit` bytes.
pub(crate) async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = limit.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    Ok(body)
}

/// The error for a response with a non-success status. `provider` names
/// the provider in the message; `key_hint` is added to 401/403 messages
/// (it says which variable holds the missing key).
pub(crate) async fn status_error(provider: &str, response: reqwest::Response, key_hint: Option<&str>) -> ModelError {
    let status = response.status();
    let retry_after = retry_after(response.headers(), SystemTime::now());
    let body = match read_body(response, MAX_ERROR_BODY).await {
        Ok(body) => body,
        Err(e) => format!("(the error body could not be read: {e})").into_bytes(),
    };
    error_for_status(provider, status, retry_after, &body, key_hint)
}

/// [`status_error`] without the I/O, for tests.
pub(crate) fn error_for_status(
    provider: &str,
    status: StatusCode,
    retry_after: Option<Duration>,
    body: &[u8],
    key_hint: Option<&str>,
) -> ModelError {
    let detail: Value =
        serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
    let said = ProviderSays::read(&detail);
    let mut message = format!("{provider} answered {status}");
    if let Some(text) = said.message.as_deref().or(detail.as_str()).filter(|t| !t.trim().is_empty()) {
        message.push_str(": ");
        message.push_str(&quote(text.trim()));
    }
    if let (Some(hint), 401 | 403) = (key_hint, status.as_u16()) {
        message.push_str(&format!(" ({hint})"));
    }
    let error = match status.as_u16() {
        // OpenAI answers 429 when the account's credit is gone, too;
        // waiting does not fix that.
        429 if said.code.as_deref() == Some("insufficient_quota") => {
            ModelError::rate_limited(message, None).with_retryable(false)
        }
        429 => ModelError::rate_limited(message, None),
        408 | 504 => ModelError::deadline_exceeded(message),
        529 => ModelError::provider_error(message),
        500..=599 => ModelError::provider_error(message),
        _ => said.classify(message, false),
    };
    let error = match retry_after {
        Some(wait) if error.retryable => error.with_retry_after(wait),
        _ => error,
    };
    error.with_detail(detail)
}

/// How long the provider asked to wait: `retry-after-ms` (milliseconds,
/// OpenAI), else `retry-after` as seconds or an HTTP date (a date in the
/// past means now).
pub(crate) fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return seconds(secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// `secs` as a duration, when it is a sane one (not negative, not NaN, not
/// more than a day: anything longer is a misreading, not advice).
fn seconds(secs: f64) -> Option<Duration> {
    (secs.is_finite() && (0.0..=86_400.0).contains(&secs)).then(|| Duration::from_secs_f64(secs))
}

/// The error for a request that got no (complete) answer: a timeout is
/// `deadline_exceeded`, anything else a retryable `provider_error`.
pub(crate) fn transport_error(provider: &str, what: &str, error: &reqwest::Error) -> ModelError {
    let cause = error_chain(error);
    if error.is_timeout() {
        ModelError::deadline_exceeded(format!("{provider} timed out while {what}: {cause}"))
    } else if error.is_connect() {
        ModelError::provider_error(format!("could not connect to {provider}: {cause}"))
    } else {
        ModelError::provider_error(format!("{provider} failed while {what}: {cause}"))
    }
}

/// An error and its causes, joined: reqwest's own message alone ("error
/// sending request") rarely says what happened.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;
    use serde_json::json;
    use subs_protocol::ErrorCode;

    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after(&headers(&[("retry-after", "7")]), now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&headers(&[("retry-after", "1.5")]), now), Some(Duration::from_millis(1500)));
        let both = headers(&[("retry-after", "7"), ("retry-after-ms", "250")]);
        assert_eq!(retry_after(&both, now), Some(Duration::from_millis(250)));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&[("retry-after", &date)]), now), Some(Duration::from_secs(30)));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(&headers(&[("retry-after", &past)]), now), Some(Duration::ZERO));
        for bad in ["soon", "-1", "NaN", "1e9"] {
            assert_eq!(retry_after(&headers(&[("retry-after", bad)]), now), None, "{bad}");
        }
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    fn error(status: u16, body: &str) -> ModelError {
        error_for_status(
            "p",
            StatusCode::from_u16(status).unwrap(),
            Some(Duration::from_secs(2)),
            body.as_bytes(),
            None,
        )
    }

    #[test]
    fn statuses_map_to_codes() {
        let e = error(429, r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#);
        assert_eq!((e.code, e.retryable, e.retry_after), (ErrorCode::RateLimited, true, Some(Duration::from_secs(2))));
        assert_eq!(e.message, "p answered 429 Too Many Requests: Rate limit reached");
        assert_eq!(e.detail.unwrap()["error"]["type"], "requests");

        let e = error(429, r#"{"error":{"message":"You exceeded your current quota","code":"insufficient_quota"}}"#);
        assert_eq!((e.code, e.retryable, e.retry_after), (ErrorCode::RateLimited, false, None));

        let e = error(529, r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true));
        assert!(e.message.ends_with(": Overloaded"), "{e}");

        for status in [500, 502, 503] {
            let e = error(status, "upstream exploded");
            assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, true), "{status}");
            assert!(e.message.ends_with(": upstream exploded"), "{e}");
            assert_eq!(e.retry_after, Some(Duration::from_secs(2)));
        }
        for status in [408, 504] {
            let e = error(status, "");
            assert_eq!((e.code, e.retryable), (ErrorCode::DeadlineExceeded, true), "{status}");
        }

        let e = error(400, r#"{"error":{"message":"max_tokens: must be positive","type":"invalid_request_error"}}"#);
        assert_eq!((e.code, e.retryable, e.retry_after), (ErrorCode::ProviderError, false, None));
        assert!(e.message.contains("max_tokens: must be positive"), "{e}");

        let e = error(400, r#"{"error":{"message":"flagged","code":"content_policy_violation"}}"#);
        assert_eq!((e.code, e.retryable), (ErrorCode::Refused, false));

        let e = error(404, r#"{"error":"model 'x' not found"}"#);
        assert_eq!((e.code, e.retryable), (ErrorCode::ProviderError, false));
        assert!(e.message.ends_with("model 'x' not found"), "{e}");
    }

    #[test]
    fn auth_failures_say_which_key_is_missing() {
        let e = error_for_status("openai", StatusCode::UNAUTHORIZED, None, b"{}", Some("OPENAI_API_KEY is not set"));
        assert_eq!(e.message, "openai answered 401 Unauthorized (OPENAI_API_KEY is not set)");
        assert!(!e.retryable);
    }

    #[test]
    fn long_or_binary_bodies_are_quoted_safely() {
        let e = error(400, &"é".repeat(5000));
        assert!(e.message.chars().count() < 400, "{}", e.message.len());
        let e = error_for_status("p", StatusCode::BAD_REQUEST, None, b"\xff\xfe", None);
        assert!(!e.retryable);
        assert_eq!(ProviderSays::read(&json!([1])).message, None);
    }
}
