//! HTTP workers: agents reached at a URL, the fallback to components.
//!
//! For every delivery an [`HttpWorker`] POSTs the [`DecisionRequest`] as
//! JSON to its URL and reads the decision from the reply:
//!
//! - `application/json`: the body is a [`DecisionResponse`];
//! - `text/event-stream`: `llm.token.delta` events (each a
//!   [`StreamDelta`](subs_protocol::StreamDelta), handed to the delivery's
//!   [`DeltaSink`] as it arrives), then one `decision.result` event whose
//!   data is the [`DecisionResponse`]. The engine stops reading there.
//!
//! With a secret, each request carries `Subs-Signature: t=<unix
//! seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`, made by
//! [`subs_protocol::signature`], the module HTTP workers verify it with.
//!
//! Every way the exchange can go wrong is a failed delivery whose
//! [`WorkerError`] names the cause and, once a reply came, its HTTP status:
//! [`WorkerError::Transport`] (no reply), [`WorkerError::Timeout`],
//! [`WorkerError::Http`] (an error status), [`WorkerError::BadReply`] (a
//! 2xx reply that is not a decision: see [`ReplyProblem`]). The loop
//! retries what [`WorkerError::is_retryable`] allows, per the agent's retry
//! policy.
//!
//! Beyond the protocol reference, a stream may end with an `error` event,
//! `{"error": "…", "retryable": bool}`: an agent that failed after it began
//! streaming says so ([`WorkerError::Declined`]) instead of cutting the
//! stream. The `subs-http-worker` SDK sends it; other workers need not.
//!
//! # Layout
//!
//! - this file: [`HttpWorker`], its options, and reading replies;
//! - [`subs_protocol::sse`]: the `text/event-stream` parser;
//! - [`subs_protocol::signature`]: the `Subs-Signature` header.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, USER_AGENT};
use reqwest::{StatusCode, Url};
use subs_protocol::{DecisionResponse, StreamDelta};
use tracing::Instrument;

pub use super::ReplyProblem;
use super::{BoxFuture, Delivery, DeltaSink, Worker, WorkerError};
use subs_protocol::signature;
use subs_protocol::sse::{SseError, SseEvent, SseParser};

/// What the engine tells workers it accepts.
const ACCEPTED: &str = "application/json, text/event-stream";

/// How much of an error reply's body is read for its message: enough for
/// any `{error}` a worker writes, little enough that an HTML error page
/// does not fill the logs.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// How many characters of an error reply's text end up in the error.
const ERROR_MESSAGE_CHARS: usize = 300;

/// How an [`HttpWorker`] talks to its URL. Built with its methods from
/// [`HttpWorkerOptions::new`].
///
/// ```
/// use std::time::Duration;
/// use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
///
/// let options = HttpWorkerOptions::new()
///     .secret("s3cret")
///     .connect_timeout(Duration::from_secs(2));
/// let worker = HttpWorker::new("https://agents.example.com/decide", options).unwrap();
/// assert_eq!(worker.host(), "agents.example.com:443");
/// ```
#[derive(Clone)]
pub struct HttpWorkerOptions {
    /// The signing secret; `None` sends requests unsigned.
    secret: Option<Secret>,
    /// How long a connection may take to open; a worker that is down
    /// should fail a delivery quickly, not when the decision's whole
    /// deadline has passed.
    connect_timeout: Duration,
    /// A bound on one request, reply included, on top of the loop's
    /// deadline; for callers outside the loop (the loop's deadline already
    /// bounds every delivery).
    timeout: Option<Duration>,
    /// The largest JSON reply, or stream event, the engine reads; a worker
    /// gone wrong must not exhaust the engine's memory.
    max_reply_bytes: usize,
}

impl HttpWorkerOptions {
    /// No secret, a 10 s connect timeout, no request timeout of its own,
    /// replies up to 16 MiB.
    pub fn new() -> Self {
        Self { secret: None, connect_timeout: Duration::from_secs(10), timeout: None, max_reply_bytes: 16 << 20 }
    }

    /// Signs every request with `secret` (its bytes are the HMAC key).
    #[must_use]
    pub fn secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(Secret(secret.as_ref().into()));
        self
    }

    /// How long opening a connection may take.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// A bound on each request, from sending it to the end of the reply.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The largest JSON reply, or single stream event, that is read.
    #[must_use]
    pub fn max_reply_bytes(mut self, bytes: usize) -> Self {
        self.max_reply_bytes = bytes;
        self
    }
}

impl Default for HttpWorkerOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for HttpWorkerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpWorkerOptions")
            .field("secret", &self.secret)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout", &self.timeout)
            .field("max_reply_bytes", &self.max_reply_bytes)
            .finish()
    }
}

/// A signing key, kept out of `Debug` output and logs.
#[derive(Clone)]
struct Secret(Arc<[u8]>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Why an [`HttpWorker`] could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpWorkerError {
    /// The URL does not parse.
    #[error("`{url}` is not a valid URL: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The URL's scheme is not `http` or `https`.
    #[error("HTTP workers are reached over http or https, not `{0}`")]
    UnsupportedScheme(String),
    /// The secret is empty, which would sign with a key anyone knows.
    #[error("the signing secret is empty")]
    EmptySecret,
    /// The HTTP client could not be built (its TLS setup failed).
    #[error("the HTTP client could not be set up: {0}")]
    Client(String),
}

/// An agent reached over HTTP. Cheap to clone; clones share one pooled,
/// keep-alive connection pool.
#[derive(Clone)]
pub struct HttpWorker {
    /// Where decisions are requested.
    url: Url,
    /// `host:port` of the URL: what spans and errors name, since the path
    /// or query may carry a token.
    host: Arc<str>,
    /// One client per worker: its pool keeps connections to the worker
    /// open between deliveries.
    client: reqwest::Client,
    /// Signs requests when set.
    secret: Option<Secret>,
    /// See [`HttpWorkerOptions::timeout`].
    timeout: Option<Duration>,
    /// See [`HttpWorkerOptions::max_reply_bytes`].
    max_reply_bytes: usize,
}

impl fmt::Debug for HttpWorker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpWorker")
            .field("host", &self.host)
            .field("signed", &self.secret.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpWorker {
    /// A worker at `url` (`http` or `https`).
    ///
    /// # Errors
    /// When the URL does not parse or is not http(s), the secret is empty,
    /// or the HTTP client cannot be built.
    pub fn new(url: &str, options: HttpWorkerOptions) -> Result<Self, HttpWorkerError> {
        let parsed =
            Url::parse(url).map_err(|e| HttpWorkerError::InvalidUrl { url: url.to_owned(), reason: e.to_string() })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(HttpWorkerError::UnsupportedScheme(parsed.scheme().to_owned()));
        }
        let Some(host) = parsed.host_str() else {
            return Err(HttpWorkerError::InvalidUrl { url: url.to_owned(), reason: "it has no host".to_owned() });
        };
        let port = parsed.port_or_known_default().unwrap_or_default();
        let host: Arc<str> = format!("{host}:{port}").into();
        if options.secret.as_ref().is_some_and(|s| s.0.is_empty()) {
            return Err(HttpWorkerError::EmptySecret);
        }
        let client = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            // A redirected POST turns into a GET (301/302) or is resent
            // to a host the operator did not name: a misconfiguration to
            // report, not to follow.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| HttpWorkerError::Client(error_chain(&e)))?;
        Ok(Self {
            url: parsed,
            host,
            client,
            secret: options.secret,
            timeout: options.timeout,
            max_reply_bytes: options.max_reply_bytes,
        })
    }

    /// `host:port` of the worker's URL.
    pub fn host(&self) -> &str {
        &self.host
    }

    async fn deliver(&self, delivery: Delivery) -> Result<DecisionResponse, WorkerError> {
        let body = subs_protocol::to_json(&delivery.request).into_bytes();
        let mut request = self
            .client
            .post(self.url.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, ACCEPTED)
            .header(USER_AGENT, concat!("subs/", env!("CARGO_PKG_VERSION")));
        if let Some(traceparent) = crate::telemetry::current_traceparent() {
            request = request.header("traceparent", traceparent);
        }
        if let Some(secret) = &self.secret {
            request = request.header(signature::SIGNATURE_HEADER, signature::sign(&secret.0, unix_now(), &body));
        }
        if let Some(timeout) = self.timeout {
            request = request.timeout(timeout);
        }
        let response = request.body(body).send().await.map_err(|e| self.send_error(e))?;
        let status = response.status();
        tracing::Span::current().record("status", status.as_u16());
        if !status.is_success() {
            return Err(error_status(response).await);
        }
        match ReplyKind::of(response.headers()) {
            ReplyKind::Json => self.read_json(response).await,
            ReplyKind::EventStream => self.read_events(response, delivery.deltas).await,
            ReplyKind::Other(content_type) => Err(bad_reply(status, ReplyProblem::ContentType(content_type))),
        }
    }

    /// The whole body, parsed as a decision.
    async fn read_json(&self, mut response: reqwest::Response) -> Result<DecisionResponse, WorkerError> {
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.read_error(status, e))? {
            if body.len() + chunk.len() > self.max_reply_bytes {
                return Err(bad_reply(status, ReplyProblem::TooLarge(self.max_reply_bytes)));
            }
            body.extend_from_slice(&chunk);
        }
        subs_protocol::from_json_slice(&body).map_err(|e| {
            // Parsing twice only on the error path tells "not JSON at all"
            // (an HTML page, a proxy's error) from a JSON value that is not
            // a decision, whose error names the field.
            let problem = match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
                Ok(_) => ReplyProblem::NotADecision(e),
                Err(json) => ReplyProblem::NotJson(json.to_string()),
            };
            bad_reply(status, problem)
        })
    }

    /// Deltas to the sink until `decision.result`.
    async fn read_events(
        &self,
        mut response: reqwest::Response,
        sink: Option<DeltaSink>,
    ) -> Result<DecisionResponse, WorkerError> {
        let status = response.status();
        let mut parser = SseParser::with_limit(self.max_reply_bytes);
        let mut deltas = 0usize;
        loop {
            let chunk = match response.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => return Err(self.read_error(status, e)),
            };
            // The parser's one error is an event over its bound.
            let events = parser
                .push(&chunk)
                .map_err(|_: SseError| bad_reply(status, ReplyProblem::TooLarge(self.max_reply_bytes)))?;
            for SseEvent { event, data, .. } in events {
                match event.as_str() {
                    "llm.token.delta" => {
                        let delta: StreamDelta = subs_protocol::from_json(&data)
                            .map_err(|error| bad_reply(status, ReplyProblem::BadEvent { event, error }))?;
                        deltas += 1;
                        // A worker may stream where the engine did not ask
                        // for it; the final decision carries the reply
                        // anyway, so the pieces are dropped. So are deltas
                        // over the engine's limits (the sink logs that):
                        // the worker has no way to hear of it mid-reply.
                        if let Some(sink) = &sink {
                            let _ = sink(delta);
                        }
                    }
                    "decision.result" => {
                        return subs_protocol::from_json(&data)
                            .map_err(|e| bad_reply(status, ReplyProblem::NotADecision(e.in_field("decision.result"))));
                    }
                    "error" => {
                        let declined: StreamError = subs_protocol::from_json(&data)
                            .map_err(|error| bad_reply(status, ReplyProblem::BadEvent { event, error }))?;
                        return Err(WorkerError::Declined {
                            message: declined.error,
                            retryable: declined.retryable.unwrap_or(false),
                        });
                    }
                    // Events this engine does not know are ignored, so
                    // workers can add some without breaking older engines.
                    _ => {}
                }
            }
        }
        let mut why = format!("the event stream ended before `decision.result` (after {deltas} deltas)");
        if parser.has_partial_event() {
            why.push_str("; its last event was not ended by a blank line");
        }
        Err(bad_reply(status, ReplyProblem::Cut(why)))
    }

    /// An error before any reply arrived.
    fn send_error(&self, e: reqwest::Error) -> WorkerError {
        if e.is_connect() {
            return WorkerError::Transport(format!("could not connect to {}: {}", self.host, error_chain(&e)));
        }
        if e.is_timeout()
            && let Some(timeout) = self.timeout
        {
            return WorkerError::Timeout(timeout);
        }
        WorkerError::Transport(format!("the request to {} failed: {}", self.host, error_chain(&e)))
    }

    /// An error while the body was read.
    fn read_error(&self, status: StatusCode, e: reqwest::Error) -> WorkerError {
        if e.is_timeout()
            && let Some(timeout) = self.timeout
        {
            return WorkerError::Timeout(timeout);
        }
        bad_reply(status, ReplyProblem::Cut(format!("reading the reply failed: {}", error_chain(&e))))
    }
}

impl Worker for HttpWorker {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        let span = tracing::info_span!(
            "http_delivery",
            agent = %delivery.request.agent_id,
            host = %self.host,
            trigger = delivery.request.trigger.kind(),
            attempt = delivery.request.attempts,
            status = tracing::field::Empty,
        );
        Box::pin(self.deliver(delivery).instrument(span))
    }

    fn kind(&self) -> &'static str {
        "http"
    }
}

/// The `error` event of a stream: the agent failed after it began
/// streaming.
#[derive(serde::Deserialize)]
struct StreamError {
    error: String,
    retryable: Option<bool>,
}

/// How a 2xx reply is to be read, by its `Content-Type`.
enum ReplyKind {
    Json,
    EventStream,
    Other(String),
}

impl ReplyKind {
    fn of(headers: &HeaderMap) -> Self {
        // A reply without a content type is read as JSON: the protocol's
        // default reply, and what a minimal worker forgets to label.
        let Some(value) = headers.get(CONTENT_TYPE) else { return ReplyKind::Json };
        let text = String::from_utf8_lossy(value.as_bytes());
        let essence = text.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match essence.as_str() {
            "application/json" => ReplyKind::Json,
            "text/event-stream" => ReplyKind::EventStream,
            other if other.starts_with("application/") && other.ends_with("+json") => ReplyKind::Json,
            _ => ReplyKind::Other(text.into_owned()),
        }
    }
}

fn bad_reply(status: StatusCode, problem: ReplyProblem) -> WorkerError {
    WorkerError::BadReply { status: status.as_u16(), problem }
}

/// An error status, with the worker's own message: the `error` of a JSON
/// body (what the SDK and most frameworks send), else the start of the
/// body's text, else the status's reason.
async fn error_status(mut response: reqwest::Response) -> WorkerError {
    let status = response.status();
    let mut body = Vec::new();
    // A broken or huge error body must not hide the status: read what
    // comes, up to the limit.
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    let from_json = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("error").and_then(serde_json::Value::as_str).map(str::to_owned));
    let message = from_json.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        if text.is_empty() {
            status.canonical_reason().unwrap_or("no reason given").to_owned()
        } else {
            let mut short: String = text.chars().take(ERROR_MESSAGE_CHARS).collect();
            if short.len() < text.len() {
                short.push('…');
            }
            short
        }
    });
    WorkerError::Http { status: status.as_u16(), message }
}

/// An error and its causes in one line, without the URL (which may carry a
/// token): `client error (Connect): tcp connect error: Connection refused`.
fn error_chain(e: &reqwest::Error) -> String {
    use std::error::Error as _;
    let mut causes = Vec::new();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        // hyper and reqwest repeat a cause's text in their own.
        if !causes.iter().any(|c: &String| c.contains(&text)) {
            causes.push(text);
        }
        source = cause.source();
    }
    if causes.is_empty() {
        // reqwest's own text names the URL; this one does not.
        let kind = if e.is_timeout() {
            "timed out"
        } else if e.is_body() {
            "the body failed"
        } else {
            "failed"
        };
        return kind.to_owned();
    }
    causes.join(": ")
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_are_workers() {
        let err = HttpWorker::new("ftp://example.com/", HttpWorkerOptions::new()).unwrap_err();
        assert!(matches!(err, HttpWorkerError::UnsupportedScheme(ref s) if s == "ftp"), "{err}");
        let err = HttpWorker::new("not a url", HttpWorkerOptions::new()).unwrap_err();
        assert!(err.to_string().starts_with("`not a url` is not a valid URL: "), "{err}");
        let err = HttpWorker::new("unix:/tmp/x", HttpWorkerOptions::new()).unwrap_err();
        assert!(matches!(err, HttpWorkerError::UnsupportedScheme(_)), "{err}");
        let worker = HttpWorker::new("http://127.0.0.1:8080/agents/x?token=t", HttpWorkerOptions::new()).unwrap();
        assert_eq!(worker.host(), "127.0.0.1:8080");
        assert!(!format!("{worker:?}").contains("token"));
        assert_eq!(HttpWorker::new("https://a.example", HttpWorkerOptions::new()).unwrap().host(), "a.example:443");
    }

    #[test]
    fn secrets_stay_out_of_debug_output_and_must_not_be_empty() {
        let options = HttpWorkerOptions::new().secret("hunter2");
        assert!(!format!("{options:?}").contains("hunter2"));
        let err = HttpWorker::new("http://localhost/", HttpWorkerOptions::new().secret("")).unwrap_err();
        assert!(matches!(err, HttpWorkerError::EmptySecret));
    }

    #[test]
    fn replies_are_read_by_content_type() {
        let kind = |value: Option<&str>| {
            let mut headers = HeaderMap::new();
            if let Some(value) = value {
                headers.insert(CONTENT_TYPE, value.parse().unwrap());
            }
            ReplyKind::of(&headers)
        };
        assert!(matches!(kind(None), ReplyKind::Json));
        assert!(matches!(kind(Some("application/json; charset=utf-8")), ReplyKind::Json));
        assert!(matches!(kind(Some("Application/JSON")), ReplyKind::Json));
        assert!(matches!(kind(Some("application/vnd.subs+json")), ReplyKind::Json));
        assert!(matches!(kind(Some("text/event-stream;charset=utf-8")), ReplyKind::EventStream));
        assert!(matches!(kind(Some("text/html")), ReplyKind::Other(ref t) if t == "text/html"));
    }

    #[test]
    fn errors_say_whether_to_retry() {
        let http = |status| WorkerError::Http { status, message: String::new() };
        for status in [500, 502, 503, 504, 408, 429] {
            assert!(http(status).is_retryable(), "{status}");
        }
        for status in [400, 401, 403, 404, 405, 413, 422, 301] {
            assert!(!http(status).is_retryable(), "{status}");
        }
        assert!(WorkerError::Transport("refused".into()).is_retryable());
        assert!(WorkerError::Timeout(std::time::Duration::from_secs(1)).is_retryable());
        // Deterministic: the same request meets them again.
        assert!(!WorkerError::MalformedDecision(subs_protocol::ProtocolError::new("invalid type")).is_retryable());
        assert!(!WorkerError::NoAgent("ghost".into()).is_retryable());
        let not_a_decision = ReplyProblem::NotADecision(subs_protocol::ProtocolError::new("invalid type"));
        assert!(!bad_reply(StatusCode::OK, not_a_decision).is_retryable());
        let cut = bad_reply(StatusCode::OK, ReplyProblem::Cut("ended".into()));
        assert!(cut.is_retryable());
        assert_eq!(cut.to_string(), "the worker's reply (HTTP 200) broke off: ended");
        assert_eq!(http(503).to_string(), "the worker answered HTTP 503: ");
    }
}
