//! Server-sent events: a session's events, replayed from the store and
//! then live, and the events of one turn.
//!
//! Stored events carry `id:` = their per-session sequence number, so a
//! client that reconnects with `Last-Event-ID` (or `?after=`) gets exactly
//! what it missed. Token deltas (`llm.token.delta`) are live only and carry
//! no id. The live subscription is taken before the replay, so nothing
//! falls between the two; events seen twice are told apart by sequence
//! number, and a gap (a slow client that fell behind the live channel) is
//! filled from the store.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use subs_engine::Engine;
use subs_engine::events::Event;
use subs_engine::store::SessionKey;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::AppState;
use crate::auth::StreamTenant;
use crate::error::{ApiError, ErrorBody};

/// Stored events read from the store at a time.
const PAGE: usize = 256;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

type EventStream = Sse<axum::response::sse::KeepAliveStream<ReceiverStream<Result<SseEvent, Infallible>>>>;

/// The session's events: those stored after `Last-Event-ID` (or
/// `?after=N`; all when neither is given), then live ones as they happen.
/// Browsers may authenticate with `?token=` from `POST /v1/tokens`.
#[utoipa::path(
    get,
    path = "/v1/sessions/{session_id}/events",
    params(
        ("session_id" = String, Path),
        ("after" = Option<u64>, Query, description = "Replay events after this sequence number"),
        ("token" = Option<String>, Query, description = "A token from POST /v1/tokens, for clients that cannot set headers"),
        ("Last-Event-ID" = Option<u64>, Header, description = "As `after`; set by EventSource on reconnect"),
    ),
    responses(
        (status = 200, description = "Server-sent events", content_type = "text/event-stream"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    ),
    tag = "sessions"
)]
pub async fn events(
    State(state): State<Arc<AppState>>,
    StreamTenant(tenant): StreamTenant,
    Path(session_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<EventStream, ApiError> {
    if state.store.session(&SessionKey::new(&tenant, &session_id))?.is_none() {
        return Err(ApiError::no_session(&session_id));
    }
    let header = headers.get("last-event-id").map(|v| v.to_str().unwrap_or("not text"));
    let after = match header.or(query.get("after").map(String::as_str)) {
        None => None,
        Some(text) => Some(text.trim().parse::<u64>().map_err(|_| ApiError {
            field: Some("after".to_owned()),
            ..ApiError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("`{text}` is not an event id (a non-negative integer)"),
            )
        })?),
    };
    Ok(spawn(state.engine.clone(), tenant, session_id, after, None))
}

/// The events of one turn, from its `turn.started` to its `turn.done` or
/// `turn.failed`, looking at stored events after `after`.
pub fn turn(state: Arc<AppState>, tenant: String, session: String, turn_id: String, after: Option<u64>) -> EventStream {
    spawn(state.engine.clone(), tenant, session, after, Some(turn_id))
}

fn spawn(engine: Engine, tenant: String, session: String, after: Option<u64>, turn: Option<String>) -> EventStream {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut pump = Pump { engine, tenant, session, last: after, tx, turn, in_turn: false };
        // The stream ends when the client goes away (the channel closes)
        // or, for a turn, when it ends.
        let _ = pump.run().await;
    });
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// Why a pump stops.
enum Stop {
    /// The client went away, the turn ended, or the store failed.
    Done,
}

struct Pump {
    engine: Engine,
    tenant: String,
    session: String,
    /// The last stored event sent.
    last: Option<u64>,
    tx: mpsc::Sender<Result<SseEvent, Infallible>>,
    /// Only this turn's events, when set.
    turn: Option<String>,
    /// Whether the turn's `turn.started` has passed.
    in_turn: bool,
}

impl Pump {
    async fn run(&mut self) -> Result<(), Stop> {
        let mut live = self.engine.subscribe(&self.tenant, &self.session);
        self.replay().await?;
        loop {
            match live.recv().await {
                Ok(event) => match event.seq {
                    None => self.send(&event).await?,
                    Some(seq) if self.last.is_some_and(|last| seq <= last) => {}
                    Some(seq) if seq == self.last.map_or(0, |last| last + 1) => self.send(&event).await?,
                    Some(_) => self.replay().await?,
                },
                Err(broadcast::error::RecvError::Lagged(_)) => self.replay().await?,
                Err(broadcast::error::RecvError::Closed) => return Err(Stop::Done),
            }
        }
    }

    /// Sends every stored event after the last one sent.
    async fn replay(&mut self) -> Result<(), Stop> {
        loop {
            let page = self.engine.events(&self.tenant, &self.session, self.last, PAGE).map_err(|e| {
                tracing::error!(error = %e, "event replay failed");
                Stop::Done
            })?;
            let full = page.len() == PAGE;
            for event in &page {
                self.send(event).await?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    async fn send(&mut self, event: &Event) -> Result<(), Stop> {
        if let Some(seq) = event.seq {
            self.last = Some(seq);
        }
        let turn_id = event.data.get("turn_id").and_then(|t| t.as_str());
        let ends = match &self.turn {
            None => false,
            Some(turn) => {
                if event.name == "turn.started" && turn_id == Some(turn.as_str()) {
                    self.in_turn = true;
                }
                if !self.in_turn {
                    return Ok(());
                }
                matches!(event.name.as_str(), "turn.done" | "turn.failed") && turn_id == Some(turn.as_str())
            }
        };
        let mut sse = SseEvent::default().event(&event.name).data(subs_protocol::to_json(&event.data));
        if let Some(seq) = event.seq {
            sse = sse.id(seq.to_string());
        }
        if self.tx.send(Ok(sse)).await.is_err() || ends {
            return Err(Stop::Done);
        }
        Ok(())
    }
}
