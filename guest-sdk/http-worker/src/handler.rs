//! The decision endpoint: verify, parse, decide on a blocking thread, and
//! answer with JSON or an event stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::{ACCEPT, HeaderMap};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use subs_sdk::{Agent, Context, DecideError, DecisionRequest, DecisionResponse, StreamDelta, Trigger};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::host::{Deltas, HttpHost};
use crate::{SIGNATURE_HEADER, SignatureError, WorkerOptions, verify_signature};

/// What the decision's thread sends the reply.
pub(crate) enum Item {
    /// A piece of a streamed reply.
    Delta(StreamDelta),
    /// The decision, or why there is none.
    Done(Result<DecisionResponse, DecideError>),
}

/// What every request shares.
pub(crate) struct Shared<A> {
    pub(crate) agent: Arc<A>,
    pub(crate) options: WorkerOptions,
}

/// Deltas buffered between the agent's thread and the connection: enough
/// to ride out a slow write, few enough that a stalled engine slows the
/// agent down instead of piling up memory.
const DELTA_BUFFER: usize = 64;

pub(crate) async fn decide<A: Agent + Send + Sync + 'static>(
    State(shared): State<Arc<Shared<A>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(secret) = shared.options.secret() {
        let verdict = match headers.get(SIGNATURE_HEADER) {
            None => Err(SignatureError::Missing),
            Some(value) => match value.to_str() {
                Ok(header) => verify_signature(secret, header, &body, SystemTime::now(), shared.options.tolerance()),
                Err(_) => Err(SignatureError::Malformed("the header is not ASCII".to_owned())),
            },
        };
        if let Err(e) = verdict {
            tracing::warn!(error = %e, "refused a request: bad signature");
            return error(StatusCode::UNAUTHORIZED, format!("signature refused: {e}"), None);
        }
    }
    let request: DecisionRequest = match subs_sdk::from_json_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            let field = e.field().map(str::to_owned);
            return error(StatusCode::BAD_REQUEST, format!("the body is not a DecisionRequest: {e}"), field);
        }
    };
    let streams = matches!(&request.trigger, Trigger::LlmExecute(call) if call.stream);
    let sse = reply_as_stream(&headers, streams);
    let span = tracing::info_span!(
        "decide",
        session = %request.session_id,
        agent = %request.agent_id,
        trigger = request.trigger.kind(),
        attempt = request.attempts,
    );
    let (tx, rx) = mpsc::channel(DELTA_BUFFER);
    let deltas = match (streams, sse) {
        (true, true) => Deltas::Streamed(tx.clone()),
        (true, false) => Deltas::Dropped,
        (false, _) => {
            Deltas::Refused("deltas can only be emitted while answering an llm.execute trigger with stream: true")
        }
    };
    let agent = shared.agent.clone();
    let thread_span = span.clone();
    // Agents are synchronous and may block (a database, another service);
    // a blocking thread keeps the server's async workers free, and lets
    // deltas reach the connection while the agent is still deciding.
    tokio::task::spawn_blocking(move || {
        let _entered = thread_span.enter();
        let mut host = HttpHost { deltas };
        let outcome = agent.decide(request, &mut Context::new(&mut host));
        drop(host);
        let _ = tx.blocking_send(Item::Done(outcome));
    });
    if sse { stream_reply(rx).instrument(span).await } else { json_reply(rx).instrument(span).await }
}

/// The decision as JSON, or its error as a status.
async fn json_reply(mut rx: mpsc::Receiver<Item>) -> Response {
    loop {
        match rx.recv().await {
            Some(Item::Delta(_)) => {}
            Some(Item::Done(Ok(decision))) => return json(StatusCode::OK, subs_sdk::to_json(&decision)),
            Some(Item::Done(Err(e))) => return declined(&e),
            None => return panicked(),
        }
    }
}

/// `llm.token.delta` events, then `decision.result`. The status is only
/// committed once the agent has emitted something: an agent that fails
/// before its first delta still answers with an error status.
async fn stream_reply(mut rx: mpsc::Receiver<Item>) -> Response {
    let first = match rx.recv().await {
        Some(Item::Done(Err(e))) => return declined(&e),
        None => return panicked(),
        Some(item) => item,
    };
    let events = futures_util::stream::unfold((Some(first), rx, false), |(mut next, mut rx, finished)| async move {
        if finished {
            return None;
        }
        let item = match next.take() {
            Some(item) => Some(item),
            None => rx.recv().await,
        };
        let (event, last) = match item {
            Some(Item::Delta(delta)) => {
                (Event::default().event("llm.token.delta").data(subs_sdk::to_json(&delta)), false)
            }
            Some(Item::Done(Ok(decision))) => {
                (Event::default().event("decision.result").data(subs_sdk::to_json(&decision)), true)
            }
            // The status is sent; the `error` event tells the engine the
            // agent's verdict instead of leaving it a cut stream.
            Some(Item::Done(Err(e))) => (error_event(&e.message, e.retryable), true),
            None => (error_event(PANICKED, true), true),
        };
        Some((Ok::<_, Infallible>(event), (None, rx, last)))
    });
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

const PANICKED: &str = "the agent panicked while deciding";

fn error_event(message: &str, retryable: bool) -> Event {
    Event::default().event("error").data(serde_json::json!({ "error": message, "retryable": retryable }).to_string())
}

/// Whether to answer with an event stream: for a streaming `llm.execute`
/// when the engine accepts one, and for any trigger when the client
/// accepts nothing but event streams.
fn reply_as_stream(headers: &HeaderMap, streams: bool) -> bool {
    let mut any = false;
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let refused = parts
                .any(|p| p.trim().strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0)));
            if media.is_empty() || refused {
                continue;
            }
            any = true;
            match media.as_str() {
                "*/*" => (json, events) = (true, true),
                "application/json" | "application/*" => json = true,
                "text/event-stream" | "text/*" => events = true,
                _ => {}
            }
        }
    }
    if !any {
        return streams;
    }
    events && (streams || !json)
}

fn declined(e: &DecideError) -> Response {
    let status = if e.retryable { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::UNPROCESSABLE_ENTITY };
    error(status, e.message.clone(), None)
}

fn panicked() -> Response {
    error(StatusCode::INTERNAL_SERVER_ERROR, PANICKED.to_owned(), None)
}

/// `{error}` (and `field`, when one is to blame) with `status`.
pub(crate) fn error(status: StatusCode, message: String, field: Option<String>) -> Response {
    let mut body = serde_json::json!({ "error": message });
    if let Some(field) = field {
        body["field"] = field.into();
    }
    json(status, body.to_string())
}

fn json(status: StatusCode, body: String) -> Response {
    (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert(ACCEPT, value.parse().unwrap());
        }
        headers
    }

    #[test]
    fn streams_when_the_trigger_streams_and_the_client_accepts_it() {
        for value in [None, Some("application/json, text/event-stream"), Some("*/*"), Some("text/event-stream")] {
            assert!(reply_as_stream(&accept(value), true), "{value:?}");
            assert!(!reply_as_stream(&accept(value), false) || value == Some("text/event-stream"), "{value:?}");
        }
        assert!(!reply_as_stream(&accept(Some("application/json")), true));
        assert!(!reply_as_stream(&accept(Some("application/json, text/event-stream;q=0")), true));
    }

    #[test]
    fn a_client_that_accepts_only_event_streams_gets_one() {
        assert!(reply_as_stream(&accept(Some("text/event-stream")), false));
        assert!(reply_as_stream(&accept(Some("text/*; q=0.5")), false));
        assert!(!reply_as_stream(&accept(Some("text/event-stream, application/*")), false));
        assert!(!reply_as_stream(&accept(Some("text/html")), false));
    }
}
