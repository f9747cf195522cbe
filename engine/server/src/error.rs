//! The API's one error shape, `{error, code, field?}`, and how every
//! failure maps to a status. All handlers return [`ApiError`]; nothing else
//! decides a status code.
//!
//! A store that cannot be reached, or that failed mid-commit, is the
//! server's passing state, not a bug: it answers 503 `unavailable` with
//! `Retry-After`, and the message says whether what was sent was stored
//! (nothing, perhaps, or yes and not yet acted on); the store's own words,
//! which name the database, stay in the log. Only what the server cannot
//! get past by waiting (a corrupt record, a panic) is a 500 `internal`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use subs_engine::InputError;
use subs_engine::agents::AgentError;
use subs_engine::store::StoreError;
use subs_protocol::ProtocolError;

/// An error answered to a client.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`invalid_json`, `not_found`, …).
    pub code: &'static str,
    /// What is wrong, for people.
    pub message: String,
    /// The offending field of the request body, when there is one.
    pub field: Option<String>,
}

/// The body of an error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What is wrong.
    pub error: String,
    /// A stable code: `invalid_json`, `invalid_input`, `unauthorized`,
    /// `forbidden`, `admin_disabled`, `not_found`, `unknown_agent`,
    /// `conflict`, `no_active_version`, `request_timeout`, `payload_too_large`,
    /// `invalid_component`, `limit_exceeded`, `oci_pull_failed`,
    /// `unavailable`, `internal`.
    pub code: String,
    /// The offending field, as a path (`messages[0].role`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    /// An error with `status` and `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }

    /// 400: a body that is not the JSON it should be.
    pub fn body(error: &ProtocolError) -> Self {
        let code = if error.field().is_none() { "invalid_json" } else { "invalid_input" };
        Self {
            status: StatusCode::BAD_REQUEST,
            code,
            message: error.message().to_owned(),
            field: error.field().map(str::to_owned),
        }
    }

    /// 404 for a session, agent or route that does not exist (or belongs
    /// to another tenant: the two are indistinguishable on purpose).
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 404 for a session the tenant does not have.
    pub fn no_session(session_id: &str) -> Self {
        Self::not_found(format!("session `{session_id}` does not exist"))
    }

    /// 404 for an agent the tenant does not have.
    pub fn no_agent(agent_id: &str) -> Self {
        Self::not_found(format!("agent `{agent_id}` does not exist"))
    }

    /// 400 `invalid_input` naming the offending `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: Some(field.into()), ..Self::new(StatusCode::BAD_REQUEST, "invalid_input", message) }
    }

    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: a valid key of the wrong kind (a tenant's on the admin API,
    /// the operator's on a tenant's route).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 403 from every admin route of a server without an operator key.
    pub fn admin_disabled() -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "admin_disabled",
            "the admin API is disabled: start the server with an operator key (`[admin] key_sha256` in the config \
             file, or SUBS_ADMIN_KEY; `subs admin-key` makes one)",
        )
    }

    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 413.
    pub fn too_large(limit: usize) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", format!("the body is larger than {limit} bytes"))
    }

    /// 500, logged: the details stay in the server's logs.
    pub fn internal(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "request failed");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the server failed; see its logs")
    }

    /// 503 `unavailable` (answered with `Retry-After`), for what passes
    /// with time.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }
}

/// The `Retry-After` of every 503, in seconds: a store restarting, or a
/// session moving to another node, is back within about this long; a
/// client that waits longer between tries loses nothing.
pub const RETRY_AFTER_SECS: u64 = 1;

impl From<InputError> for ApiError {
    fn from(error: InputError) -> Self {
        let message = error.to_string();
        match error {
            InputError::Invalid { field, .. } => {
                Self { status: StatusCode::BAD_REQUEST, code: "invalid_input", message, field }
            }
            InputError::NoSession(_) => Self::new(StatusCode::NOT_FOUND, "not_found", message),
            InputError::Conflict(_) => Self::new(StatusCode::CONFLICT, "conflict", message),
            InputError::Store(_) | InputError::Unavailable(_) | InputError::ShuttingDown => Self::unavailable(message),
            InputError::LimitExceeded(_) => Self::new(StatusCode::TOO_MANY_REQUESTS, "limit_exceeded", message),
            _ => Self::unavailable(message),
        }
    }
}

impl From<StoreError> for ApiError {
    /// A store that cannot be reached (or whose answer to a write was
    /// lost) is 503 with what the client may assume; a corrupt record or
    /// an unsupported request is the server's fault, a 500.
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Closed => Self::unavailable("the server is shutting down"),
            StoreError::Io { .. } | StoreError::Locked { .. } => {
                tracing::warn!(%error, "a request failed: the store is unavailable");
                Self::unavailable("the store is unavailable; nothing was changed. Try again in a moment")
            }
            StoreError::InDoubt { .. } => {
                tracing::warn!(%error, "a request failed: the store's answer to a write was lost");
                Self::unavailable(
                    "the store failed while the change was being written, and whether it was is unknown: read it \
                     back before trying again",
                )
            }
            StoreError::Fenced { .. } => {
                Self::unavailable("the session moved to another node meanwhile; nothing was changed. Try again")
            }
            other => Self::internal(&other),
        }
    }
}

impl From<AgentError> for ApiError {
    /// Every kind of refusal is matched by name: a new kind must be given
    /// its status here rather than fall into a catch-all.
    fn from(error: AgentError) -> Self {
        let message = error.to_string();
        match error {
            AgentError::Invalid { field, .. } => Self::invalid(field, message),
            AgentError::InvalidComponent(_) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_component", message)
            }
            AgentError::UploadRate { .. } | AgentError::Compiling | AgentError::Replaying => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "limit_exceeded", message)
            }
            AgentError::CompiledQuota { .. } | AgentError::StoredQuota { .. } => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "limit_exceeded", message)
            }
            AgentError::CurrentVersion { .. } => {
                Self { field: Some("version".to_owned()), ..Self::new(StatusCode::CONFLICT, "conflict", message) }
            }
            AgentError::NoActiveVersion { .. } => Self::new(StatusCode::CONFLICT, "no_active_version", message),
            AgentError::UnknownVersion { .. } => {
                Self { field: Some("version".to_owned()), ..Self::new(StatusCode::NOT_FOUND, "not_found", message) }
            }
            AgentError::Store(error) => error.into(),
            AgentError::Internal(_) => Self::internal(&message),
        }
    }
}

/// The `code` of an error response, kept in its extensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorCode(pub &'static str);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let body = ErrorBody { error: self.message, code: self.code.to_owned(), field: self.field };
        // The code rides along for the metrics, which count refusals by it.
        let mut response = (status, axum::Extension(ErrorCode(self.code)), Json(body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, RETRY_AFTER_SECS.into());
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_are_503_with_retry_after_and_corruption_is_500() {
        let cases = [
            (
                StoreError::io("cannot read session t/s from postgres://db", "connection refused"),
                503,
                "nothing was changed",
            ),
            (StoreError::in_doubt("the connection failed while writing a group", "reset"), 503, "is unknown"),
            (StoreError::Fenced { session: subs_engine::store::SessionKey::new("t", "s"), token: 3 }, 503, "moved"),
            (StoreError::Closed, 503, "shutting down"),
            (StoreError::Corrupt { table: "sessions", message: "bad".to_owned() }, 500, "see its logs"),
        ];
        for (error, status, said) in cases {
            let answer = ApiError::from(error.clone());
            assert_eq!(answer.status.as_u16(), status, "{error:?}");
            assert!(answer.message.contains(said), "{error:?}: {}", answer.message);
            assert!(!answer.message.contains("postgres://"), "the store's words stay in the log: {}", answer.message);
            let response = answer.into_response();
            let retry = response.headers().get(axum::http::header::RETRY_AFTER);
            assert_eq!(retry.is_some(), status == 503, "{error:?}: Retry-After {retry:?}");
        }
        for (error, said) in [
            (
                InputError::Store("the store is unavailable; nothing of it was kept".to_owned()),
                "nothing of it was kept",
            ),
            (InputError::Unavailable("whether it was is unknown".to_owned()), "unknown"),
            (InputError::ShuttingDown, "shutting down"),
        ] {
            let answer = ApiError::from(error);
            assert_eq!((answer.status, answer.code), (StatusCode::SERVICE_UNAVAILABLE, "unavailable"));
            assert!(answer.message.contains(said), "{}", answer.message);
            assert_eq!(answer.into_response().headers()[axum::http::header::RETRY_AFTER], "1");
        }
        let refused = ApiError::conflict("busy").into_response();
        assert!(refused.headers().get(axum::http::header::RETRY_AFTER).is_none());
    }
}
