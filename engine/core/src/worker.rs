//! Workers: the agent code the engine asks for decisions.
//!
//! One trait, [`Worker`], with one implementation per way of running agent
//! code: a WebAssembly component called in-process (the default, in the
//! `subs-host` crate) and a URL the engine POSTs the request to (the
//! fallback, in `subs-engine`). The loop does not know which it talks to;
//! both receive the same [`DecisionRequest`] and must yield the same
//! decision. The types every side shares live here: [`BoxFuture`],
//! [`DeltaSink`], [`Delivery`], [`WorkerError`].

use std::sync::Arc;

use subs_protocol::{DecisionRequest, DecisionResponse, ProtocolError, StreamDelta};

/// A boxed, sendable future, so [`Worker`] stays object-safe (the engine
/// keeps workers of different kinds behind one `Arc<dyn Worker>`): the
/// store's, so that the workspace has one.
pub use subs_store::BoxFuture;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_keeps_short_texts_and_cuts_long_ones_at_a_character() {
        assert_eq!(clip("short".to_owned(), 10), "short");
        assert_eq!(clip("ééé".to_owned(), 3), "é… (4 more bytes cut)");
        let long = clip("x".repeat(20 << 20), ERROR_TEXT_BYTES);
        assert!(long.len() < ERROR_TEXT_BYTES + 40 && long.ends_with("more bytes cut)"), "{}", long.len());
    }
}

/// Receives the [`StreamDelta`]s a worker emits while it answers a
/// streaming `llm.execute` (or a provider streams for an engine-run call);
/// the engine forwards them to clients as `llm.token.delta` events. It
/// refuses deltas over the engine's limits
/// ([`StreamLimits`](crate::events::StreamLimits)): a component is told
/// why; other sources drop them (the engine logs the first refusal).
pub type DeltaSink = Arc<dyn Fn(StreamDelta) -> Result<(), DeltaRefused> + Send + Sync>;

/// Why a [`DeltaSink`] refused a delta; the message names the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DeltaRefused(String);

impl DeltaRefused {
    /// A refusal saying `why`.
    pub fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

/// One delivery of a decision request to a worker.
pub struct Delivery {
    /// The request.
    pub request: DecisionRequest,
    /// Where streamed deltas go; `None` when the trigger does not stream
    /// (the worker's emits are then refused).
    pub deltas: Option<DeltaSink>,
}

impl Delivery {
    /// A delivery that accepts no streamed deltas.
    pub fn new(request: DecisionRequest) -> Self {
        Self { request, deltas: None }
    }
}

/// Agent code that decides.
pub trait Worker: Send + Sync {
    /// Asks for the decision. An error fails this delivery only; the loop
    /// decides whether to retry it.
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>>;

    /// The agent version this worker runs (`sha256:…`), recorded with
    /// each decision it makes; `None` when unknown.
    fn version(&self) -> Option<&str> {
        None
    }

    /// What kind of worker this is, for metrics and traces: `component`,
    /// `http`, or `other` (in-process workers of embedders and tests).
    fn kind(&self) -> &'static str {
        "other"
    }

    /// Whether a decision reaches nothing outside the engine: no network,
    /// no file, no process but the engine's own. The loop then delivers a
    /// step that a decision of this worker made before that decision is
    /// durable, and stores the run of such decisions together, ahead of
    /// whatever it does next that someone else can see (see
    /// `docs/durability.md`). Only an in-process component whose
    /// outgoing-HTTP allow-list is empty says yes; any worker that may
    /// reach out keeps the default.
    fn contained(&self) -> bool {
        false
    }
}

/// A worker known as one version of an agent: the registry's workers, so
/// that each decision records the version that made it.
pub struct Versioned {
    inner: Arc<dyn Worker>,
    version: String,
}

impl Versioned {
    /// `inner`, known as `version`.
    pub fn new(inner: Arc<dyn Worker>, version: String) -> Self {
        Self { inner, version }
    }
}

impl Worker for Versioned {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        self.inner.decide(delivery)
    }

    fn version(&self) -> Option<&str> {
        Some(&self.version)
    }

    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn contained(&self) -> bool {
        self.inner.contained()
    }
}

/// Why a delivery failed. Each variant says whose fault it was, so the loop
/// can retry what may pass next time and report the rest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The agent answered with an error of its own.
    #[error("the agent declined to decide: {message}")]
    Declined {
        /// The agent's message.
        message: String,
        /// Whether the agent says a retry may succeed.
        retryable: bool,
    },
    /// The agent's decision could not be read (bad JSON in a field, a
    /// missing field, a wrong type); the error names the field.
    #[error("the agent's decision is malformed: {0}")]
    MalformedDecision(ProtocolError),
    /// The agent's code crashed (a trap: panic, unreachable, stack overflow,
    /// out-of-bounds access) or was stopped by a limit.
    #[error("the agent crashed: {0}")]
    Trapped(String),
    /// The agent could not be started (instantiation failed: a missing
    /// import, a start function that trapped).
    #[error("the agent could not be started: {0}")]
    Instantiation(String),
    /// The agent ran into one of its per-decision limits (memory, CPU,
    /// tables, decision size); the message names the limit.
    #[error("the agent exceeded {0}")]
    LimitExceeded(String),
    /// The agent did not decide before the delivery's deadline.
    #[error("the agent did not decide within {0:?}")]
    Timeout(std::time::Duration),
    /// No worker is registered for the session's agent.
    #[error("no agent `{0}` is registered")]
    NoAgent(String),
    /// The session's agent is stored (another node registered it, or
    /// changed it) but this node has not loaded it yet, or the store
    /// could not be asked; the message says which.
    #[error("{0}")]
    AgentNotLoaded(String),
    /// An HTTP worker answered with an error status; `message` is its
    /// `{error}`, or the start of its body.
    #[error("the worker answered HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// What the worker said.
        message: String,
    },
    /// An HTTP worker could not be reached, or the exchange failed before
    /// a reply came (refused, reset, DNS, TLS).
    #[error("the worker could not be reached: {0}")]
    Transport(String),
    /// An HTTP worker answered 2xx without a usable decision: not JSON, not
    /// a decision (the field is named), or a stream that broke off before
    /// its `decision.result`.
    #[error("the worker's reply (HTTP {status}) {problem}")]
    BadReply {
        /// The HTTP status.
        status: u16,
        /// What was wrong with the reply.
        problem: ReplyProblem,
    },
}

/// The most of an error text the engine keeps, logs or sends, in bytes:
/// a guest's error message, a trap's, an HTTP worker's error body. The
/// rest is cut (and the cut said), so that an agent cannot turn a failed
/// delivery into megabytes of stored events and log lines.
pub const ERROR_TEXT_BYTES: usize = 4096;

/// `text` cut to at most `max` bytes, at a character boundary, ending with
/// how much was cut.
pub fn clip(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} more bytes cut)"));
    text
}

impl WorkerError {
    /// Whether the agent's own code crashed (a trap). The engine does not
    /// redeliver a trap unless the agent's retry policy asks it to: a
    /// fresh instance given the same request traps the same way.
    pub fn is_trap(&self) -> bool {
        matches!(self, WorkerError::Trapped(_))
    }

    /// Whether redelivering the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::Declined { retryable, .. } => *retryable,
            // A reply that is not a decision breaks the protocol's schema,
            // and would again: the turn fails at once, saying why.
            WorkerError::MalformedDecision(_) => false,
            // A timeout may depend on load or outside services; the retry
            // policy bounds it.
            WorkerError::Timeout(_) => true,
            // A trap recurs for the same request (see `is_trap`).
            WorkerError::Trapped(_) => false,
            // Deterministic: waiting on the chance that someone uploads
            // the agent meanwhile would only delay the error.
            WorkerError::NoAgent(_) => false,
            // The node hears of the agent within moments, or the store
            // comes back: worth the retry policy's wait.
            WorkerError::AgentNotLoaded(_) => true,
            WorkerError::Instantiation(_) => false,
            // The same request would run into the same limit.
            WorkerError::LimitExceeded(_) => false,
            // Overload, rate limits and request timeouts pass; any other
            // refusal (a bad signature, a missing route, a request the
            // worker cannot read) would be refused again.
            WorkerError::Http { status, .. } => *status >= 500 || *status == 408 || *status == 429,
            // A worker restarting, a dropped connection: worth another try.
            WorkerError::Transport(_) => true,
            // JSON that breaks the protocol's schema would come again, as
            // a malformed decision from a component would.
            WorkerError::BadReply {
                problem: ReplyProblem::NotADecision(_) | ReplyProblem::BadEvent { .. }, ..
            } => false,
            // A proxy's error page or a stream cut mid-way may not recur.
            WorkerError::BadReply { .. } => true,
        }
    }
}

/// What was wrong with a successful (2xx) reply that carried no usable
/// decision.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyProblem {
    /// The reply is neither JSON nor an event stream.
    #[error("has content type `{0}`, neither application/json nor text/event-stream")]
    ContentType(String),
    /// The body, or one stream event, is larger than the engine reads.
    #[error("is larger than {0} bytes")]
    TooLarge(usize),
    /// The body is not JSON at all.
    #[error("is not JSON: {0}")]
    NotJson(String),
    /// The body (or the `decision.result` event) is JSON, but not a
    /// `DecisionResponse`; the error names the field.
    #[error("is not a decision: {0}")]
    NotADecision(ProtocolError),
    /// A stream event's data is not what its name says (an
    /// `llm.token.delta` that is not a `StreamDelta`).
    #[error("has an unreadable `{event}` event: {error}")]
    BadEvent {
        /// The event's name.
        event: String,
        /// What is wrong with its data.
        error: ProtocolError,
    },
    /// The body broke off: the connection failed mid-reply, or an event
    /// stream ended before `decision.result`.
    #[error("broke off: {0}")]
    Cut(String),
}
