//! Server-sent events: a session's events, replayed from the store and
//! then live, and the events of one turn.
//!
//! Stored events carry `id:` = their per-session sequence number, so a
//! client that reconnects with `Last-Event-ID` (or `?after=`) gets exactly
//! what it missed. Token deltas (`llm.token.delta`) are live only and carry
//! no id. The live subscription is taken before the replay, so nothing
//! falls between the two; events seen twice are told apart by sequence
//! number.
//!
//! A stream holds little whatever the client does: events are pulled from
//! the engine's bounded subscription only as the connection takes them
//! (nothing is queued in between), and a client that falls behind by more
//! than the subscriber's buffer is dropped: its stream ends after what it
//! was already sent, and it reconnects with `Last-Event-ID`. A tenant may
//! have a limited number of streams open; more are refused with 429.
//!
//! A session's event stream lasts only as long as what opened it: when
//! its key (or the key that minted its event-stream token) is revoked, or
//! its tenant deleted, the stream ends at once, on every node that learns
//! of it (see [`Credential`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::stream::{self, BoxStream};
use subs_engine::events::{Frame, Subscription, TooManyStreams};
use subs_engine::follow::{Follow, FollowError};
use subs_engine::{Engine, Reads};
use subs_protocol::{EventKind, SessionEvent};

use crate::AppState;
use crate::auth::{Credential, StreamCaller};
use crate::error::{ApiError, ErrorBody};
use crate::sessions::SessionPath;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An event stream response.
pub type EventStream = Sse<axum::response::sse::KeepAliveStream<BoxStream<'static, Result<SseEvent, Infallible>>>>;

/// The session's events: those stored after `Last-Event-ID` (or
/// `?after=N`; all when neither is given), then live ones as they happen.
/// Browsers may authenticate with `?token=` from `POST /v1/tokens` (an
/// event-stream token, or an end-user token for its own sessions).
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
        (status = 200, description = "Server-sent events, each event's name and data a StreamEvent (see its schema)", content_type = "text/event-stream"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 429, description = "The tenant has its maximum of open event streams", body = ErrorBody),
    ),
    tag = "sessions"
)]
pub async fn events(
    State(state): State<Arc<AppState>>,
    StreamCaller(caller, credential): StreamCaller,
    SessionPath(session_id): SessionPath,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<EventStream, ApiError> {
    let head = state.engine.reads().session_head(&caller.tenant, &session_id).await?;
    if !head.is_some_and(|r| caller.may_reach(&r)) {
        return Err(ApiError::no_session(&session_id));
    }
    let tenant = caller.tenant;
    let header = headers.get("last-event-id").map(|v| v.to_str().unwrap_or("not text"));
    let after = match header.or(query.get("after").map(String::as_str)) {
        None => None,
        Some(text) => Some(text.trim().parse::<u64>().map_err(|_| ApiError {
            field: Some("after".to_owned()),
            ..ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!("`{text}` is not an event id (a non-negative integer)"),
            )
        })?),
    };
    let live = subscribe(&state.engine, &tenant, &session_id)?;
    let guard = Guard { removals: state.keys.removals(), state: state.clone(), credential };
    Ok(respond(Pump::new(state.engine.reads().clone(), tenant, session_id, after, None, live), Some(guard)))
}

/// What keeps a session's event stream open: the credential it was
/// opened with, checked again whenever keys are removed.
struct Guard {
    state: Arc<AppState>,
    credential: Credential,
    removals: tokio::sync::watch::Receiver<u64>,
}

impl Guard {
    /// Resolves once the credential no longer authenticates (at once if
    /// it already does not).
    async fn revoked(&mut self) {
        loop {
            if !self.state.keys.still_valid(&self.credential) {
                return;
            }
            if self.removals.changed().await.is_err() {
                // The keys are gone with the server: nothing is revoked.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Subscribes to the session's live events for a stream, or answers 429
/// when the tenant has all the streams it may.
pub fn subscribe(engine: &Engine, tenant: &str, session: &str) -> Result<Subscription, ApiError> {
    engine.reads().subscribe(tenant, session).map_err(|TooManyStreams { max }| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "limit_exceeded",
            format!(
                "the tenant has its maximum of {max} open event streams; close one and retry (the server's \
                 `[streams] max_streams_per_tenant` setting)"
            ),
        )
    })
}

/// The events of one turn, from its `turn.started` to its `turn.done` or
/// `turn.failed`, looking at events after `after`; `live` is a
/// subscription to the session taken before the turn's input was sent.
/// With `caught_up` (see [`Sent`](crate::sessions::Sent)), the store is
/// read only should a live event be missing.
pub fn turn(
    state: &AppState,
    tenant: String,
    session: String,
    turn_id: String,
    after: Option<u64>,
    caught_up: bool,
    live: Subscription,
) -> EventStream {
    let pump = Pump::new(state.engine.reads().clone(), tenant, session, after, Some(turn_id), live);
    respond(pump.caught_up(caught_up), None)
}

/// The events of one turn, typed, for the protocol adapters that
/// translate them (AG-UI, the AI SDK's stream). As [`turn`] sends them
/// over SSE: from the turn's `turn.started` to its end, pulled only as
/// the caller asks.
pub struct TurnFrames(Pump);

/// The client fell behind by more than its subscription's budget: the
/// stream ends here, and the client may follow the session's events from
/// where it is with `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// The subscription's budget, in bytes.
    pub budget: usize,
}

impl TurnFrames {
    /// The events of the turn `turn_id` that an input started, among
    /// those stored after `after` and then live (see [`turn`]).
    pub fn starting(
        state: &AppState,
        tenant: String,
        session: String,
        turn_id: String,
        after: Option<u64>,
        caught_up: bool,
        live: Subscription,
    ) -> Self {
        let pump = Pump::new(state.engine.reads().clone(), tenant, session, after, Some(turn_id), live);
        TurnFrames(pump.caught_up(caught_up))
    }

    /// The rest of the turn `turn_id`, already started: every event
    /// stored after `after`, then live ones, to the turn's end. For an
    /// input that settles something the open turn waits for
    /// (`tool.result`, `interrupt.resume`).
    pub fn continuing(
        state: &AppState,
        tenant: String,
        session: String,
        turn_id: String,
        after: Option<u64>,
        live: Subscription,
    ) -> Self {
        TurnFrames(Pump::continuing(state.engine.reads().clone(), tenant, session, after, turn_id, live))
    }

    /// The turn's next event; `None` after its last (or when the engine
    /// stops or the store fails), `Err` once when the client fell behind.
    pub async fn next(&mut self) -> Option<Result<Arc<Frame>, Dropped>> {
        self.0.next_frame().await
    }
}

fn respond(pump: Pump, guard: Option<Guard>) -> EventStream {
    // The pump runs only when the connection asks for the next event, so
    // a client that does not read holds nothing here: what waits for it
    // waits in its subscription, which is bounded.
    let events = stream::unfold((pump, guard), |(mut pump, guard)| async move {
        let Some(mut guard) = guard else {
            return pump.next().await.map(|event| (Ok(event), (pump, None)));
        };
        tokio::select! {
            event = pump.next() => event.map(|event| (Ok(event), (pump, Some(guard)))),
            () = guard.revoked() => {
                tracing::info!(
                    tenant = %pump.tenant,
                    session = %pump.session,
                    "event stream ended: its key was revoked or its tenant deleted"
                );
                // Ignored by SSE parsers; says why to whoever looks. The
                // stream ends after it (no guard: the next poll ends it).
                let why = SseEvent::default().comment("ended: the key of this stream was revoked or its tenant deleted");
                pump.done = true;
                Some((Ok(why), (pump, None)))
            }
        }
    });
    let events: BoxStream<'static, Result<SseEvent, Infallible>> = Box::pin(events);
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

struct Pump {
    tenant: String,
    session: String,
    follow: Follow,
    /// Only this turn's events, when set.
    turn: Option<String>,
    /// Whether the turn's `turn.started` has passed.
    in_turn: bool,
    /// Set when the stream ends after the event now returned.
    done: bool,
}

impl Pump {
    fn new(
        reads: Reads,
        tenant: String,
        session: String,
        after: Option<u64>,
        turn: Option<String>,
        live: Subscription,
    ) -> Self {
        let follow = Follow::new(reads, &tenant, &session, after, live);
        Pump { tenant, session, follow, turn, in_turn: false, done: false }
    }

    /// With `caught_up`, follows from the live events (see
    /// [`Follow::live_first`]).
    fn caught_up(mut self, caught_up: bool) -> Self {
        if caught_up {
            self.follow = self.follow.live_first();
        }
        self
    }

    /// A pump for a turn that started before the events after `after`
    /// (one that an input answered, such as a `tool.result`, continues).
    fn continuing(
        reads: Reads,
        tenant: String,
        session: String,
        after: Option<u64>,
        turn: String,
        live: Subscription,
    ) -> Self {
        Pump { in_turn: true, ..Pump::new(reads, tenant, session, after, Some(turn), live) }
    }

    /// The next event to send; `None` ends the stream (the turn ended, the
    /// subscriber was dropped, the store failed, the engine stopped).
    async fn next(&mut self) -> Option<SseEvent> {
        match self.next_frame().await? {
            Ok(frame) => {
                let mut sse = SseEvent::default().event(&*frame.name).data(&*frame.data);
                if let Some(seq) = frame.seq {
                    sse = sse.id(seq.to_string());
                }
                Some(sse)
            }
            // Ignored by SSE parsers; says why to whoever looks.
            Err(Dropped { budget }) => Some(SseEvent::default().comment(format!(
                "dropped: this client fell behind by more than {budget} bytes; reconnect with Last-Event-ID"
            ))),
        }
    }

    /// The next event that passes the turn's filter; `None` when there is
    /// none to come, `Err` (once, then `None`) when the client fell behind.
    async fn next_frame(&mut self) -> Option<Result<Arc<Frame>, Dropped>> {
        loop {
            if self.done {
                return None;
            }
            match self.follow.next().await {
                Ok(frame) => {
                    if self.pass(&frame) {
                        return Some(Ok(frame));
                    }
                }
                Err(FollowError::Dropped { budget }) => {
                    tracing::info!(
                        tenant = %self.tenant,
                        session = %self.session,
                        budget,
                        "event stream dropped: the client fell behind"
                    );
                    self.done = true;
                    return Some(Err(Dropped { budget }));
                }
                Err(FollowError::Store(e)) => {
                    tracing::error!(error = %e, "event replay failed");
                    return None;
                }
                Err(_) => return None,
            }
        }
    }

    /// Whether a turn's filter lets the event through; ends the stream
    /// after the turn's last event.
    fn pass(&mut self, frame: &Frame) -> bool {
        if let Some(turn) = &self.turn {
            // Only the events that start and end turns are parsed back.
            let boundary = EventKind::from_name(&frame.name)
                .filter(|kind| kind.is_turn_boundary())
                .and_then(|_| frame.parse().ok())
                .filter(|event| event.turn_id() == Some(turn.as_str()));
            match boundary {
                Some(SessionEvent::TurnStarted(_)) => self.in_turn = true,
                Some(SessionEvent::TurnDone(_) | SessionEvent::TurnFailed(_)) if self.in_turn => self.done = true,
                _ => {}
            }
            return self.in_turn;
        }
        true
    }
}
