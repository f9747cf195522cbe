//! [`DecideError`]: a decision the agent could not make.

use std::fmt;

use subs_protocol::ProtocolError;

/// A decision the agent could not make. Returning it fails this delivery of
/// the decision: when `retryable`, the engine delivers the same request
/// again per the agent's retry policy; otherwise the turn fails.
///
/// An agent is deterministic for a given request more often than not, so
/// the conversions (`?` on a [`ProtocolError`], a `String`, a
/// [`serde_json::Error`]) make terminal errors; use
/// [`DecideError::retryable`] for what may go away by itself (a service the
/// agent calls being down).
///
/// ```
/// use subs_sdk::prelude::*;
///
/// struct Strict;
/// impl Agent for Strict {
///     fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
///         #[derive(serde::Deserialize)]
///         struct State { turns: u32 }
///         // A state that does not parse fails the delivery, terminally.
///         let state: Option<State> = request.state_as()?;
///         let turns = state.map_or(0, |s| s.turns);
///         Ok(request.proposed.with_state(json!({ "turns": turns + 1 })))
///     }
/// }
///
/// let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
/// request.state = json!({ "turns": "many" });
/// let err = RecordingHost::new().decide(&Strict, request).unwrap_err();
/// assert!(!err.retryable);
/// assert!(err.message.starts_with("state.turns:"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecideError {
    /// What went wrong, for the engine's logs and the failed turn.
    pub message: String,
    /// Whether delivering the same request again may succeed.
    pub retryable: bool,
}

impl DecideError {
    /// An error that delivering the request again would not fix.
    pub fn terminal(message: impl Into<String>) -> Self {
        Self { message: message.into(), retryable: false }
    }

    /// An error that may go away on another delivery, per the agent's retry
    /// policy.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self { message: message.into(), retryable: true }
    }
}

impl fmt::Display for DecideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DecideError {}

impl From<ProtocolError> for DecideError {
    fn from(e: ProtocolError) -> Self {
        Self::terminal(e.to_string())
    }
}

impl From<serde_json::Error> for DecideError {
    fn from(e: serde_json::Error) -> Self {
        Self::terminal(e.to_string())
    }
}

impl From<String> for DecideError {
    fn from(message: String) -> Self {
        Self::terminal(message)
    }
}

impl From<&str> for DecideError {
    fn from(message: &str) -> Self {
        Self::terminal(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_terminal() {
        let e: DecideError = ProtocolError::new("bad").in_field("state").into();
        assert_eq!(e, DecideError::terminal("state: bad"));
        let e: DecideError = "nope".into();
        assert!(!e.retryable);
        let e: DecideError = String::from("nope").into();
        assert_eq!(e.message, "nope");
        let e: DecideError = serde_json::from_str::<u32>("x").unwrap_err().into();
        assert!(!e.retryable);
    }
}
