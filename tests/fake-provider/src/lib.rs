//! A fake LLM provider for tests: a real HTTP server on `127.0.0.1:0` that
//! speaks OpenAI Chat Completions (`POST …/chat/completions`) and Anthropic
//! Messages (`POST …/v1/messages`), streamed (real SSE framing) or not,
//! answering from a queue of scripted [`Reply`]s and injecting [`Fault`]s:
//! error statuses with `retry-after`, error events after a 200, dropped
//! connections, truncated streams, malformed chunks, latency, and streams
//! cut into byte pieces that split lines and multi-byte characters.
//!
//! It records every request (path, headers, JSON body) so tests can check
//! what a provider sent — keys included; the fake itself logs nothing.
//!
//! Scripted replies are used in arrival order, which suits one
//! conversation at a time. For many concurrent conversations,
//! [`FakeProvider::respond_with`] sets a responder that answers each
//! request by looking at it (say, a tool call when the last message is the
//! user's, text after tool results); it is used whenever the queue is
//! empty.
//!
//! ```no_run
//! # async fn demo() {
//! use subs_fake_provider::{FakeProvider, Reply, ScriptedCall};
//! let fake = FakeProvider::start().await;
//! fake.push(Reply::tool_calls(vec![ScriptedCall::new("c1", "add", &["{\"a\":", "1}"])]));
//! fake.push(Reply::text("The sum is 1."));
//! // Point a provider at fake.openai_base_url() or fake.base_url() …
//! assert_eq!(fake.requests().len(), 0);
//! # }
//! ```

mod render;
mod script;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

pub use crate::render::Format;
pub use crate::script::{Fault, Reply, ScriptedCall, Usage};

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The HTTP method.
    pub method: String,
    /// The path (`/v1/chat/completions`).
    pub path: String,
    /// The headers, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`null` when it was not JSON).
    pub body: Value,
}

impl Recorded {
    /// The value of header `name` (any case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// Whether the request asked for a stream.
    pub fn stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool).unwrap_or(false)
    }
}

/// Answers a request from its JSON body and format, when no scripted reply
/// is queued; see [`FakeProvider::respond_with`].
pub type Responder = dyn Fn(&Value, Format) -> Reply + Send + Sync;

/// What the server and the test share.
#[derive(Default)]
struct Shared {
    replies: Mutex<VecDeque<Reply>>,
    responder: Mutex<Option<Arc<Responder>>>,
    requests: Mutex<Vec<Recorded>>,
    /// Opened by [`FakeProvider::release`] for streams held by
    /// [`Reply::hold_after`].
    gate: Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running fake. Dropping it stops the server.
pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeProvider {
    /// Starts a fake on a free port of `127.0.0.1`.
    pub async fn start() -> FakeProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port on 127.0.0.1");
        let addr = listener.local_addr().expect("a bound address");
        let shared = Arc::new(Shared::default());
        let app = Router::new().fallback(handle).with_state(Arc::clone(&shared));
        // Real providers answer with Nagle's algorithm off; a stream from
        // the fake must not stall on the engine's delayed ACKs either.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeProvider { addr, shared, server }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL for the Anthropic format (`/v1/messages` follows it).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The base URL for the OpenAI format (`/chat/completions` follows it).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues `reply` as the answer to a later request (first in, first
    /// out).
    pub fn push(&self, reply: Reply) {
        lock(&self.shared.replies).push_back(reply);
    }

    /// Answers every request that finds the queue empty with
    /// `responder(body, format)`, instead of a 400. The responder must be
    /// deterministic if tests compare runs.
    pub fn respond_with(&self, responder: impl Fn(&Value, Format) -> Reply + Send + Sync + 'static) {
        *lock(&self.shared.responder) = Some(Arc::new(responder));
    }

    /// Replies not yet used.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.replies).len()
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.requests).clone()
    }

    /// Lets one held stream ([`Reply::with_hold_after`]) go on.
    pub fn release(&self) {
        self.shared.gate.notify_one();
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&shared.requests).push(Recorded {
        method: method.to_string(),
        path: path.clone(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.clone(),
    });
    let format = if path.ends_with("/chat/completions") {
        Format::Openai
    } else if path.ends_with("/v1/messages") {
        Format::Anthropic
    } else {
        return json_response(404, &json!({"error": {"message": format!("no route {path}"), "type": "not_found"}}));
    };
    let scripted = lock(&shared.replies).pop_front();
    let responder = lock(&shared.responder).clone();
    let Some(reply) = scripted.or_else(|| responder.map(|respond| respond(&body, format))) else {
        let error = json!({"error": {"message": "the fake provider has no scripted reply left", "type": "invalid_request_error"}});
        return json_response(400, &error);
    };
    take(reply.latency).await;
    if let Some(Fault::Status { status, headers, body }) = &reply.fault {
        let mut response = Response::new(Body::from(body.clone()));
        *response.status_mut() = StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let h = response.headers_mut();
        h.insert("content-type", HeaderValue::from_static("application/json"));
        for (k, v) in headers {
            if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
                h.insert(k, v);
            }
        }
        return response;
    }
    let model = reply.model.clone().unwrap_or_else(|| body["model"].as_str().unwrap_or("fake").to_owned());
    if body["stream"] == json!(true) {
        let include_usage = body["stream_options"]["include_usage"] == json!(true);
        stream_response(shared, format, reply, &model, include_usage)
    } else {
        whole_response(format, &reply, &model)
    }
}

fn json_response(status: u16, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

type Chunk = Result<Bytes, std::io::Error>;

/// A body fed from a channel: the sender decides when each piece goes, and
/// sending an error breaks the connection.
fn channel_body(content_type: &'static str) -> (mpsc::Sender<Chunk>, Response) {
    let (tx, rx) = mpsc::channel::<Chunk>(64);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    response.headers_mut().insert("cache-control", HeaderValue::from_static("no-cache"));
    (tx, response)
}

fn broken() -> Chunk {
    Err(std::io::Error::new(std::io::ErrorKind::ConnectionReset, "fake provider: connection dropped"))
}

fn whole_response(format: Format, reply: &Reply, model: &str) -> Response {
    let text = render::body(format, reply, model).to_string();
    let half = || Bytes::from(text.as_bytes()[..text.len() / 2].to_vec());
    match &reply.fault {
        Some(Fault::ErrorEvent { .. }) => {
            let error = match format {
                Format::Openai => json!({"error": {"message": "The server had an error", "type": "server_error"}}),
                Format::Anthropic => {
                    json!({"type": "error", "error": {"type": "api_error", "message": "Internal server error"}})
                }
            };
            json_response(500, &error)
        }
        Some(Fault::Drop { .. }) => {
            let (tx, response) = channel_body("application/json");
            let first = half();
            tokio::spawn(async move {
                let _ = tx.send(Ok(first)).await;
                let _ = tx.send(broken()).await;
            });
            response
        }
        Some(Fault::Truncate { .. }) => {
            let mut response = json_response(200, &Value::Null);
            *response.body_mut() = Body::from(half());
            response
        }
        Some(Fault::Malformed { .. }) => {
            let mut response = json_response(200, &Value::Null);
            *response.body_mut() = Body::from("{this is not json");
            response
        }
        Some(Fault::Status { .. }) | None => {
            let mut response = json_response(200, &Value::Null);
            *response.body_mut() = Body::from(text);
            response
        }
    }
}

fn stream_response(shared: Arc<Shared>, format: Format, reply: Reply, model: &str, include_usage: bool) -> Response {
    let events = render::stream_events(format, &reply, model, include_usage);
    let (tx, response) = channel_body("text/event-stream");
    tokio::spawn(async move {
        for (i, event) in events.iter().enumerate() {
            if reply.hold_after == Some(i) {
                shared.gate.notified().await;
            }
            match reply.fault {
                Some(Fault::ErrorEvent { after }) if after == i => {
                    let _ = send(&tx, render::error_event(format), reply.byte_chunks).await;
                    return;
                }
                Some(Fault::Drop { after }) if after == i => {
                    let _ = tx.send(broken()).await;
                    return;
                }
                Some(Fault::Truncate { after }) if after == i => return,
                Some(Fault::Malformed { after }) if after == i => {
                    let _ = send(&tx, render::malformed_event(format), reply.byte_chunks).await;
                    return;
                }
                _ => {}
            }
            if i > 0 {
                take(reply.chunk_delay).await;
            }
            if send(&tx, event.clone(), reply.byte_chunks).await.is_err() {
                return;
            }
        }
    });
    response
}

/// Sends `text`, whole or in pieces of `pieces` bytes (splitting wherever
/// that falls, characters included), yielding between pieces so they go out
/// as separate chunks.
async fn send(tx: &mpsc::Sender<Chunk>, text: String, pieces: Option<usize>) -> Result<(), ()> {
    let bytes = Bytes::from(text);
    match pieces {
        None => tx.send(Ok(bytes)).await.map_err(drop),
        Some(n) => {
            for start in (0..bytes.len()).step_by(n) {
                tx.send(Ok(bytes.slice(start..(start + n).min(bytes.len())))).await.map_err(drop)?;
                tokio::task::yield_now().await;
            }
            Ok(())
        }
    }
}

/// Takes `time` (none if zero): a provider's latency or the gap between
/// its chunks, as a reply scripts it.
async fn take(time: std::time::Duration) {
    if !time.is_zero() {
        subs_test_wait::pace(time).await;
    }
}
