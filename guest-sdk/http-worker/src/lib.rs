//! Serve subs agents over HTTP: the fallback to WebAssembly components.
//!
//! An agent is the same [`subs_sdk::Agent`] impl either way: exported as a
//! component with `subs_sdk::export!`, or served by this crate on
//! [axum](https://docs.rs/axum). The engine POSTs each `DecisionRequest` as
//! JSON; the worker answers with the decision.
//!
//! ```no_run
//! use subs_sdk::prelude::*;
//!
//! struct Passthrough;
//! impl Agent for Passthrough {}
//!
//! #[tokio::main]
//! async fn main() -> std::io::Result<()> {
//!     let listener = tokio::net::TcpListener::bind("127.0.0.1:8787").await?;
//!     println!("listening on http://{}", listener.local_addr()?);
//!     subs_http_worker::serve(listener, Passthrough).await
//! }
//! ```
//!
//! Register it with the engine as an HTTP worker at `http://127.0.0.1:8787/`.
//!
//! # What the endpoint does
//!
//! `POST /` (see [`WorkerOptions::path`]) takes a `DecisionRequest` and
//! runs [`Agent::decide`](subs_sdk::Agent::decide) on a blocking thread
//! (agents are synchronous and may block).
//!
//! - **Reply.** `200` with the `DecisionResponse` as `application/json`;
//!   or a `text/event-stream` of `llm.token.delta` events (one per
//!   [`Context::emit_delta`](subs_sdk::Context::emit_delta)) and a final
//!   `decision.result`. The stream is chosen when the trigger is an
//!   `llm.execute` with `stream: true` and the request's `Accept` allows
//!   `text/event-stream` (the engine's does), or for any trigger when
//!   `Accept` allows event streams but not JSON. Deltas are refused
//!   (`emit_delta` fails, as it does in the engine) unless the trigger is a
//!   streaming `llm.execute`; when it is, but the reply is JSON, they are
//!   dropped.
//! - **Errors** are JSON `{"error": "…"}`: a [`DecideError`] is `503` when
//!   retryable and `422` when not (the engine retries the first, not the
//!   second); a body that is not a `DecisionRequest` is `400`, with
//!   `field` naming the culprit; a refused signature is `401`; an agent
//!   that panics is `500`. An agent that fails after its stream began ends
//!   it with an `error` event, `{"error": "…", "retryable": bool}`.
//! - **Signatures.** With [`WorkerOptions::require_signature`], a request
//!   without a valid `Subs-Signature` is refused before it is parsed; see
//!   [`verify_signature`].
//!
//! # Layout
//!
//! - [`router`], [`router_with`], [`serve`], [`serve_router`]: the entry
//!   points (this file).
//! - [`WorkerOptions`] (`options.rs`): route, signatures, limits.
//! - [`verify_signature`], [`sign`], [`SignatureError`]: re-exported from
//!   [`subs_protocol::signature`], the one definition of the signature,
//!   which the engine signs with.
//! - `handler.rs`: the endpoint: verification, parsing, JSON or SSE reply.
//! - `host.rs`: the [`subs_sdk::Host`] that turns deltas into events and
//!   logs into `tracing` events.
//!
//! [`DecideError`]: subs_sdk::DecideError

#![deny(missing_docs)]

mod handler;
mod host;
mod options;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use subs_sdk::Agent;

pub use options::WorkerOptions;
pub use subs_protocol::signature::{DEFAULT_TOLERANCE, SIGNATURE_HEADER, SignatureError, sign, verify_signature};

/// The axum this crate is built on, so a worker can add routes or layers
/// without matching its version by hand.
pub use axum;

/// The routes of a worker serving `agent` at `POST /`.
///
/// ```
/// use axum::body::Body;
/// use axum::http::Request;
/// use subs_sdk::prelude::*;
/// use tower::ServiceExt;
///
/// struct Greeter;
/// impl Agent for Greeter {
///     fn decide(&self, _: DecisionRequest, _: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
///         Ok(DecisionResponse::new().with_message(DraftMessage::assistant("hi")).with_action(Action::done()))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let request = DecisionRequest::for_trigger(Trigger::SessionStart);
/// let reply = subs_http_worker::router(Greeter)
///     .oneshot(Request::post("/").body(Body::from(subs_sdk::to_json(&request))).unwrap())
///     .await
///     .unwrap();
/// assert_eq!(reply.status(), 200);
/// let body = axum::body::to_bytes(reply.into_body(), usize::MAX).await.unwrap();
/// let decision: DecisionResponse = subs_sdk::from_json_slice(&body).unwrap();
/// assert_eq!(decision.actions(), [Action::done()]);
/// # }
/// ```
pub fn router<A: Agent + Send + Sync + 'static>(agent: A) -> Router {
    router_with(agent, WorkerOptions::new())
}

/// The routes of a worker serving `agent` as `options` say.
///
/// ```
/// use axum::body::Body;
/// use axum::http::Request;
/// use subs_http_worker::WorkerOptions;
/// use subs_sdk::prelude::*;
/// use tower::ServiceExt;
///
/// struct Passthrough;
/// impl Agent for Passthrough {}
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let app = subs_http_worker::router_with(Passthrough, WorkerOptions::new().require_signature("s3cret"));
/// let body = subs_sdk::to_json(&DecisionRequest::for_trigger(Trigger::SessionStart));
///
/// // Unsigned: refused.
/// let reply = app.clone().oneshot(Request::post("/").body(Body::from(body.clone())).unwrap()).await.unwrap();
/// assert_eq!(reply.status(), 401);
///
/// // Signed as the engine signs.
/// let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
/// let signature = subs_http_worker::sign(b"s3cret", now, body.as_bytes());
/// let request = Request::post("/").header("Subs-Signature", signature).body(Body::from(body)).unwrap();
/// assert_eq!(app.oneshot(request).await.unwrap().status(), 200);
/// # }
/// ```
pub fn router_with<A: Agent + Send + Sync + 'static>(agent: A, options: WorkerOptions) -> Router {
    let limit = options.max_request();
    let path = options.route().to_owned();
    let shared = Arc::new(handler::Shared { agent: Arc::new(agent), options });
    Router::new().route(&path, post(handler::decide::<A>)).layer(DefaultBodyLimit::max(limit)).with_state(shared)
}

/// Serves `agent` at `POST /` on `listener` until the server fails.
///
/// For options or a graceful shutdown, use [`serve_router`] with
/// [`router_with`].
///
/// # Errors
/// When accepting connections fails for good.
pub async fn serve<A: Agent + Send + Sync + 'static>(
    listener: tokio::net::TcpListener,
    agent: A,
) -> std::io::Result<()> {
    serve_router(listener, router(agent), std::future::pending()).await
}

/// Serves `app` (from [`router`] or [`router_with`]) on `listener` until
/// `shutdown` resolves, then lets requests in progress finish.
///
/// Every accepted connection gets `TCP_NODELAY`. The engine keeps its
/// connections to a worker alive, and on a kept-alive connection Nagle's
/// algorithm holds a reply's last segment until the engine's delayed ACK
/// (about 40 ms on Linux) whenever an earlier one is unacknowledged, as a
/// streamed reply's always is. Serving the router with [`axum::serve`]
/// directly leaves it on.
///
/// # Errors
/// When accepting connections fails for good.
pub async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt as _;
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY on an accepted connection");
        }
    });
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

#[cfg(test)]
mod tests;
