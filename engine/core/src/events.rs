//! Events for clients: stored ones (with a per-session sequence number, in
//! the same commit as the step that made them) and live-only token deltas,
//! fanned out to subscribers by a hub.
//!
//! Everything a tenant can make the hub hold is bounded (see
//! [`StreamLimits`]): a delta's size, the deltas of one decision or LLM
//! call in bytes and per second, what one subscriber may have queued, and
//! how many subscribers a tenant may have. A subscriber that falls behind
//! by more than its buffer is dropped rather than waited for: its
//! [`Subscription`] ends with [`RecvError::Dropped`], and it catches up by
//! reading the stored events after the last one it saw (deltas are lost;
//! they are never stored).

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Instant;

use serde_json::Value;
use subs_protocol::event::TokenDelta;
use subs_protocol::{EventError, SessionEvent, StreamDelta};
use tokio::sync::{Notify, oneshot};

use crate::store::{EventRecord, SessionKey, TurnRecord, TurnStatus};
use crate::worker::DeltaRefused;

/// An event as subscribers receive it.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The sequence number of a stored event; `None` for live-only events
    /// (token deltas), which are not replayed.
    pub seq: Option<u64>,
    /// The event name.
    pub name: String,
    /// Its data.
    pub data: Value,
}

impl Event {
    /// A stored event.
    pub fn stored(seq: u64, record: EventRecord) -> Self {
        Self { seq: Some(seq), name: record.name, data: record.data }
    }

    /// `event` as subscribers receive it, with the sequence number of a
    /// stored event (`None` for a live-only one).
    pub fn new(seq: Option<u64>, event: &SessionEvent) -> Self {
        Self { seq, name: event.name().to_owned(), data: event.data() }
    }

    /// The event, typed.
    pub fn parse(&self) -> Result<SessionEvent, EventError> {
        SessionEvent::from_parts(&self.name, self.data.clone())
    }
}

/// What streaming may hold, per decision or call, per subscriber and per
/// tenant. The defaults are far above what a real LLM stream does (a
/// delta is a token or a few, a few hundred bytes of JSON at most; the
/// fastest providers stream a few thousand tokens a second) and low
/// enough that a tenant cannot hold more than a few tens of MiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamLimits {
    /// The largest delta, in bytes of the `llm.token.delta` event's JSON
    /// data as clients receive it (the delta's fields and its `call_id`).
    /// Larger ones are refused.
    pub max_delta_bytes: usize,
    /// The bytes (counted as for `max_delta_bytes`) all deltas of one
    /// decision, or of one try of an engine-run LLM call, may add up to;
    /// deltas past it are refused.
    pub max_call_delta_bytes: u64,
    /// Deltas one decision or call may stream per second, with bursts of
    /// as many; deltas over the rate are refused.
    pub max_deltas_per_sec: u32,
    /// Bytes of events one subscriber may have waiting to be sent (each
    /// event counted as its JSON data and name plus
    /// [`EVENT_OVERHEAD_BYTES`]). A subscriber whose queue would grow past
    /// it is dropped. An event larger than this on its own is still
    /// queued when nothing else waits, so a subscriber can always make
    /// progress.
    pub subscriber_buffer_bytes: usize,
    /// Subscribers (open event streams) one tenant may have at once.
    pub max_streams_per_tenant: usize,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_delta_bytes: 64 << 10,
            max_call_delta_bytes: 64 << 20,
            max_deltas_per_sec: 5_000,
            subscriber_buffer_bytes: 1 << 20,
            max_streams_per_tenant: 256,
        }
    }
}

/// What a queued event is counted as beyond its text: its share of the
/// queue, the shared event's header and its name. Without it a flood of
/// tiny deltas would hold several times what the budget says.
pub const EVENT_OVERHEAD_BYTES: usize = 128;

/// An event serialized once, when it is published, and shared by every
/// subscriber it is sent to: a fan-out to many subscribers neither copies
/// nor serializes it again, and a queue's bytes are its events' real size.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// As [`Event::seq`].
    pub seq: Option<u64>,
    /// The event name.
    pub name: Cow<'static, str>,
    /// The event's data as JSON text, on one line.
    pub data: Box<str>,
}

impl Frame {
    /// `event`, serialized.
    pub fn new(event: &Event) -> Self {
        Self {
            seq: event.seq,
            name: Cow::Owned(event.name.clone()),
            data: subs_protocol::to_json(&event.data).into_boxed_str(),
        }
    }

    /// What a subscriber's queue counts this event as.
    pub fn bytes(&self) -> usize {
        self.data.len() + self.name.len() + EVENT_OVERHEAD_BYTES
    }

    /// The event, parsed back.
    pub fn event(&self) -> Event {
        let data = serde_json::from_str(&self.data).unwrap_or_else(|_| Value::String(self.data.to_string()));
        Event { seq: self.seq, name: self.name.to_string(), data }
    }

    /// The event, parsed back and typed.
    pub fn parse(&self) -> Result<SessionEvent, EventError> {
        let Event { name, data, .. } = self.event();
        SessionEvent::from_parts(&name, data)
    }
}

/// Why a [`Subscription`] ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The subscriber fell behind by more than its buffer and was dropped;
    /// what it had not received yet is gone. Stored events after the last
    /// one it received can be read from the store.
    #[error(
        "the subscriber fell behind by more than its buffer of {budget} bytes (`subscriber_buffer_bytes`) and was \
         dropped; stored events can be read again from the last one received"
    )]
    Dropped {
        /// The subscriber's buffer, in bytes.
        budget: usize,
    },
    /// The engine stopped.
    #[error("the engine stopped")]
    Closed,
}

/// Why a subscription was refused: the tenant has as many open as it may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the tenant has its maximum of {max} open event streams (`max_streams_per_tenant`)")]
pub struct TooManyStreams {
    /// The limit.
    pub max: usize,
}

/// One subscriber's queue: bounded in bytes, filled by publishers under
/// the hub's lock, drained by the subscriber alone.
struct Queue {
    state: Mutex<QueueState>,
    ready: Notify,
}

#[derive(Default)]
struct QueueState {
    frames: VecDeque<Arc<Frame>>,
    /// What `frames` counts as ([`Frame::bytes`]).
    bytes: usize,
    /// Set when the queue takes no more; the subscriber ends once it has
    /// drained what is left (nothing, when it was dropped).
    end: Option<RecvError>,
    /// Set by [`Hub::resync`]: events may have been stored that were not
    /// published here.
    resync: bool,
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `frame`, or drops the subscriber if that would take its
    /// queue past `budget`. Returns whether the subscriber still listens.
    fn offer(&self, frame: &Arc<Frame>, budget: usize) -> bool {
        let mut state = self.state();
        if state.end.is_some() {
            return false;
        }
        let size = frame.bytes();
        if !state.frames.is_empty() && state.bytes.saturating_add(size) > budget {
            // Its memory goes back now, not when the client gets round to
            // reading (a stalled client may never do so).
            state.frames = VecDeque::new();
            state.bytes = 0;
            state.end = Some(RecvError::Dropped { budget });
            drop(state);
            self.ready.notify_one();
            return false;
        }
        state.frames.push_back(frame.clone());
        state.bytes += size;
        drop(state);
        self.ready.notify_one();
        true
    }

    fn resync(&self) {
        self.state().resync = true;
        self.ready.notify_one();
    }

    fn close(&self) {
        let mut state = self.state();
        if state.end.is_none() {
            state.end = Some(RecvError::Closed);
        }
        drop(state);
        self.ready.notify_one();
    }
}

/// A subscriber's end of a session's events: stored ones and deltas, in
/// the order they were published, from the moment it subscribed. Dropping
/// it unsubscribes (and frees the tenant's slot).
pub struct Subscription {
    queue: Arc<Queue>,
    hub: Weak<Mutex<Channels>>,
    key: SessionKey,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription").field("session", &self.key).finish_non_exhaustive()
    }
}

impl Subscription {
    /// The next event, parsed: for in-process readers. Servers relaying
    /// events should use [`recv_frame`](Self::recv_frame), which hands out
    /// the shared serialized text.
    pub async fn recv(&mut self) -> Result<Event, RecvError> {
        self.recv_frame().await.map(|frame| frame.event())
    }

    /// The next event, as published.
    pub async fn recv_frame(&mut self) -> Result<Arc<Frame>, RecvError> {
        loop {
            if let Some(next) = self.try_recv_frame() {
                return next;
            }
            // The one waiter of this queue: a notification sent since the
            // check above is kept as a permit, so none is lost.
            self.queue.ready.notified().await;
        }
    }

    /// The next event, or `None` when the hub says events may have been
    /// stored that were never published to it ([`Hub::resync`]): the
    /// subscriber reads the store again from the last event it saw.
    pub(crate) async fn recv_or_resync(&mut self) -> Result<Option<Arc<Frame>>, RecvError> {
        loop {
            if std::mem::take(&mut self.queue.state().resync) {
                return Ok(None);
            }
            if let Some(next) = self.try_recv_frame() {
                return next.map(Some);
            }
            self.queue.ready.notified().await;
        }
    }

    /// The next event if one is queued; `None` when none is yet.
    pub fn try_recv_frame(&mut self) -> Option<Result<Arc<Frame>, RecvError>> {
        let mut state = self.queue.state();
        if let Some(frame) = state.frames.pop_front() {
            state.bytes -= frame.bytes();
            return Some(Ok(frame));
        }
        state.end.clone().map(Err)
    }

    /// Bytes queued for this subscriber.
    pub fn queued_bytes(&self) -> usize {
        self.queue.state().bytes
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let Some(hub) = self.hub.upgrade() else { return };
        let mut channels = hub.lock().unwrap_or_else(PoisonError::into_inner);
        channels.unsubscribe(&self.key, &self.queue);
    }
}

/// Fans events out to the subscribers of each session. Publishing to a
/// session nobody watches costs a map lookup; so does a commit's batch of
/// events when nobody watches any session.
///
/// A session's entry exists only while someone subscribes to it: a
/// subscriber leaves the map when its [`Subscription`] is dropped or when
/// it is dropped for falling behind, so sessions nobody watches any more
/// cost nothing here.
pub(crate) struct Hub {
    channels: Arc<Mutex<Channels>>,
    limits: StreamLimits,
}

#[derive(Default)]
struct Channels {
    by_session: HashMap<SessionKey, Vec<Arc<Queue>>>,
    /// Subscriptions alive per tenant (only tenants with some).
    per_tenant: HashMap<String, usize>,
    /// Who waits for the end of one of the session's turns: told (once),
    /// with the turn's id and stored record, when a commit ends one. Far
    /// cheaper than a subscription for a caller that needs nothing else,
    /// and the record spares it reading the store again.
    turn_waiters: HashMap<SessionKey, Vec<oneshot::Sender<EndedTurn>>>,
    /// Waiter lists in the map after their last sweep.
    waiters_swept: usize,
    /// The turns open or queued in sessions whose actor runs in this
    /// process: stored, and not ended, as of their actor's last commit.
    /// A waiter for one of them needs no read of the store: its end will
    /// come through `turn_waiters`. An actor forgets its session's turns
    /// as it leaves, so this holds at most the live actors' turns.
    open_turns: HashMap<SessionKey, Vec<String>>,
}

impl Channels {
    /// Sends `frame` to the session's subscribers, dropping those it would
    /// take past `budget`.
    fn deliver(&mut self, key: &SessionKey, frame: &Arc<Frame>, budget: usize) {
        let Some(queues) = self.by_session.get_mut(key) else { return };
        queues.retain(|queue| queue.offer(frame, budget));
        if queues.is_empty() {
            self.by_session.remove(key);
        }
    }

    fn unsubscribe(&mut self, key: &SessionKey, queue: &Arc<Queue>) {
        if let Some(queues) = self.by_session.get_mut(key) {
            queues.retain(|q| !Arc::ptr_eq(q, queue));
            if queues.is_empty() {
                self.by_session.remove(key);
            }
        }
        if let Some(count) = self.per_tenant.get_mut(&key.tenant) {
            *count -= 1;
            if *count == 0 {
                self.per_tenant.remove(&key.tenant);
            }
        }
    }
}

/// A turn that a commit ended: its id and its record as stored.
pub(crate) type EndedTurn = (String, TurnRecord);

/// What [`Hub::resync`] tells those waiting for a session's turns: an end
/// under an empty turn id, which no turn has (ids are never empty). As
/// for the end of another of the session's turns, a waiter reads the
/// store again and goes on waiting if its turn has not ended.
fn unseen_end() -> EndedTurn {
    (String::new(), TurnRecord { status: TurnStatus::Running, data: None, started_ms: 0, ended_ms: None })
}

impl Hub {
    /// A hub that holds its subscribers to `limits`.
    pub fn new(limits: StreamLimits) -> Self {
        Self { channels: Arc::default(), limits }
    }

    fn channels(&self) -> MutexGuard<'_, Channels> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `frame` to the session's current subscribers.
    pub fn publish(&self, key: &SessionKey, frame: Frame) {
        let mut channels = self.channels();
        if !channels.by_session.contains_key(key) {
            return;
        }
        channels.deliver(key, &Arc::new(frame), self.limits.subscriber_buffer_bytes);
    }

    /// Sends the events of one commit, in order. Only the events of
    /// watched sessions are serialized, outside the lock; a subscriber
    /// that arrives meanwhile misses none of them that are stored, as it
    /// reads the store after subscribing.
    pub fn publish_all(&self, events: impl IntoIterator<Item = (SessionKey, Event)>) {
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            return;
        }
        let watched: Vec<(SessionKey, Event)> = {
            let channels = self.channels();
            if channels.by_session.is_empty() {
                return;
            }
            events.filter(|(key, _)| channels.by_session.contains_key(key)).collect()
        };
        if watched.is_empty() {
            return;
        }
        let frames: Vec<(SessionKey, Arc<Frame>)> =
            watched.into_iter().map(|(key, event)| (key, Arc::new(Frame::new(&event)))).collect();
        let mut channels = self.channels();
        for (key, frame) in &frames {
            channels.deliver(key, frame, self.limits.subscriber_buffer_bytes);
        }
    }

    /// Subscribes to the session's events from now on, unless its tenant
    /// has as many subscriptions as it may.
    pub fn subscribe(&self, key: &SessionKey) -> Result<Subscription, TooManyStreams> {
        let mut channels = self.channels();
        let max = self.limits.max_streams_per_tenant;
        let count = channels.per_tenant.get(&key.tenant).copied().unwrap_or(0);
        if count >= max {
            return Err(TooManyStreams { max });
        }
        *channels.per_tenant.entry(key.tenant.clone()).or_default() += 1;
        let queue = Arc::new(Queue { state: Mutex::default(), ready: Notify::new() });
        channels.by_session.entry(key.clone()).or_default().push(queue.clone());
        Ok(Subscription { queue, hub: Arc::downgrade(&self.channels), key: key.clone() })
    }

    /// Tells those waiting for the end of one of the session's turns that
    /// `ended` (committed) ended.
    pub fn turn_ended(&self, key: &SessionKey, ended: EndedTurn) {
        let mut channels = self.channels();
        if let Some(open) = channels.open_turns.get_mut(key) {
            open.retain(|id| *id != ended.0);
            if open.is_empty() {
                channels.open_turns.remove(key);
            }
        }
        let Some(waiters) = channels.turn_waiters.remove(key) else { return };
        drop(channels);
        for waiter in waiters {
            let _ = waiter.send(ended.clone());
        }
    }

    /// Notes that the session's actor, in this process, committed
    /// `turn_id` open or queued.
    pub fn turn_opened(&self, key: &SessionKey, turn_id: &str) {
        let mut channels = self.channels();
        let open = channels.open_turns.entry(key.clone()).or_default();
        if !open.iter().any(|id| id == turn_id) {
            open.push(turn_id.to_owned());
        }
    }

    /// Forgets the session's open turns: its actor leaves, or gave the
    /// session up, and will not tell their ends.
    pub fn forget_turns(&self, key: &SessionKey) {
        self.channels().open_turns.remove(key);
    }

    /// [`turn_end`](Self::turn_end), and whether `turn_id` is open in a
    /// session whose actor runs here (so its end will resolve the
    /// receiver, and the store need not be read). The receiver is
    /// registered before the check, so an end noted after the check
    /// resolves it.
    pub fn turn_end_of(&self, key: &SessionKey, turn_id: &str) -> (oneshot::Receiver<EndedTurn>, bool) {
        let ended = self.turn_end(key);
        let open = self.channels().open_turns.get(key).is_some_and(|open| open.iter().any(|id| id == turn_id));
        (ended, open)
    }

    /// Resolves at the next end of one of the session's turns committed
    /// after this call, with that turn (an error only if the hub is
    /// dropped).
    pub fn turn_end(&self, key: &SessionKey) -> oneshot::Receiver<EndedTurn> {
        let mut channels = self.channels();
        // Waiters given up on (their receiver dropped) are swept once the
        // map has doubled since the last sweep.
        if channels.turn_waiters.len() >= 2 * channels.waiters_swept.max(32) {
            channels.turn_waiters.retain(|_, waiters| {
                waiters.retain(|w| !w.is_closed());
                !waiters.is_empty()
            });
            channels.waiters_swept = channels.turn_waiters.len();
        }
        let (tx, rx) = oneshot::channel();
        channels.turn_waiters.entry(key.clone()).or_default().push(tx);
        rx
    }

    /// Tells the session's followers and those waiting for its turns that
    /// events may have been stored that were never published here (a
    /// commit whose outcome was in doubt; notices from other nodes lost
    /// while this node could not hear them): followers read the stored
    /// events again from the last one they passed on, and waiters the
    /// turns they wait for.
    pub fn resync(&self, key: &SessionKey) {
        let mut channels = self.channels();
        for queue in channels.by_session.get(key).into_iter().flatten() {
            queue.resync();
        }
        let waiters = channels.turn_waiters.remove(key);
        drop(channels);
        for waiter in waiters.into_iter().flatten() {
            let _ = waiter.send(unseen_end());
        }
    }

    /// [`resync`](Self::resync) for every session followed or waited for
    /// here.
    pub fn resync_all(&self) {
        let mut channels = self.channels();
        for queue in channels.by_session.values().flatten() {
            queue.resync();
        }
        let waiters = std::mem::take(&mut channels.turn_waiters);
        channels.waiters_swept = 0;
        drop(channels);
        for waiter in waiters.into_values().flatten() {
            let _ = waiter.send(unseen_end());
        }
    }

    /// Whether anyone follows the session or waits for one of its turns.
    pub fn watched(&self, key: &SessionKey) -> bool {
        let channels = self.channels();
        channels.by_session.contains_key(key) || channels.turn_waiters.contains_key(key)
    }

    /// Sessions with subscribers.
    #[cfg(test)]
    pub fn channels_held(&self) -> usize {
        self.channels().by_session.len()
    }

    /// Subscriptions `tenant` holds.
    pub fn streams(&self, tenant: &str) -> usize {
        self.channels().per_tenant.get(tenant).copied().unwrap_or(0)
    }

    /// Bytes queued for `tenant`'s subscribers, in all.
    pub fn queued_bytes(&self, tenant: &str) -> usize {
        let channels = self.channels();
        let queues = channels.by_session.iter().filter(|(key, _)| key.tenant == tenant).flat_map(|(_, q)| q);
        queues.map(|queue| queue.state().bytes).sum()
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        // Subscribers outliving the engine end rather than wait forever.
        for queue in self.channels().by_session.values().flatten() {
            queue.close();
        }
    }
}

/// Holds the deltas of one decision, or one try of an engine-run LLM call,
/// to [`StreamLimits`]: each delta's size, their bytes in all, their rate.
pub(crate) struct DeltaGate {
    limits: StreamLimits,
    call_id: String,
    /// Bytes of the deltas let through.
    sent: u64,
    /// Deltas that may go out now (a token bucket holding up to one
    /// second's worth).
    tokens: f64,
    refilled: Instant,
}

impl DeltaGate {
    pub fn new(limits: StreamLimits, call_id: &str) -> Self {
        let tokens = f64::from(limits.max_deltas_per_sec);
        Self { limits, call_id: call_id.to_owned(), sent: 0, tokens, refilled: Instant::now() }
    }

    /// The delta as an `llm.token.delta` event, if the limits let it out.
    pub fn admit(&mut self, delta: &StreamDelta) -> Result<Frame, DeltaRefused> {
        let max = self.limits.max_delta_bytes;
        // JSON is never shorter than the text it carries: an oversized
        // delta is refused before it is serialized.
        if raw_bytes(delta) > max {
            return Err(too_large(raw_bytes(delta), max));
        }
        let event = SessionEvent::TokenDelta(TokenDelta { delta: delta.clone(), call_id: self.call_id.clone() });
        let frame = Frame { seq: None, name: Cow::Borrowed(event.name()), data: event.data_json().into_boxed_str() };
        let size = frame.data.len();
        if size > max {
            return Err(too_large(size, max));
        }
        let total = self.limits.max_call_delta_bytes;
        if self.sent.saturating_add(size as u64) > total {
            return Err(DeltaRefused::new(format!(
                "the deltas of this call would exceed {total} bytes in all (`max_call_delta_bytes`); \
                 no more are taken"
            )));
        }
        let rate = f64::from(self.limits.max_deltas_per_sec);
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.refilled).as_secs_f64() * rate).min(rate);
        self.refilled = now;
        if self.tokens < 1.0 {
            return Err(DeltaRefused::new(format!(
                "more than {} deltas per second (`max_deltas_per_sec`); this one was dropped",
                self.limits.max_deltas_per_sec
            )));
        }
        self.tokens -= 1.0;
        self.sent += size as u64;
        Ok(frame)
    }
}

fn too_large(size: usize, max: usize) -> DeltaRefused {
    DeltaRefused::new(format!(
        "the delta is {size} bytes of JSON, over the limit of {max} per delta (`max_delta_bytes`)"
    ))
}

/// The bytes of the delta's text fields.
fn raw_bytes(delta: &StreamDelta) -> usize {
    let len = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let calls = delta.tool_calls.iter().flatten().map(|c| c.id.len() + len(&c.name) + len(&c.arguments)).sum::<usize>();
    len(&delta.text) + len(&delta.reasoning) + len(&delta.finish_reason) + calls
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(n: u64) -> Event {
        Event { seq: Some(n), name: "x".to_owned(), data: Value::Null }
    }

    fn hub() -> Hub {
        Hub::new(StreamLimits::default())
    }

    fn next(rx: &mut Subscription) -> Option<Result<Event, RecvError>> {
        rx.try_recv_frame().map(|r| r.map(|f| f.event()))
    }

    #[test]
    fn channels_nobody_listens_to_are_dropped() {
        let hub = hub();
        for i in 0..1000 {
            let key = SessionKey::new("t", format!("s{i}"));
            let mut rx = hub.subscribe(&key).unwrap();
            hub.publish_all([(key.clone(), event(1))]);
            assert_eq!(next(&mut rx), Some(Ok(event(1))));
        }
        // Every subscription is gone, and with it its session's entry.
        assert_eq!(hub.channels_held(), 0);
        assert_eq!(hub.streams("t"), 0);
    }

    #[test]
    fn publishing_to_nobody_keeps_nothing() {
        let hub = hub();
        let key = SessionKey::new("t", "s");
        hub.publish_all([(key.clone(), event(1))]);
        hub.publish(&key, Frame::new(&event(2)));
        assert_eq!(hub.channels_held(), 0, "no channel for a session nobody watches");
        let _other = hub.subscribe(&SessionKey::new("t", "other")).unwrap();
        hub.publish_all([(key.clone(), event(3))]);
        assert_eq!(hub.channels_held(), 1, "only the watched session");
    }

    #[test]
    fn turn_waiters_hear_the_end_of_a_turn_only() {
        let hub = hub();
        let key = SessionKey::new("t", "s");
        let mut ended = hub.turn_end(&key);
        let mut other = hub.turn_end(&SessionKey::new("t", "other"));
        hub.publish_all([(key.clone(), Event { seq: Some(1), name: "message".to_owned(), data: Value::Null })]);
        assert!(ended.try_recv().is_err());
        let record = TurnRecord {
            status: crate::store::TurnStatus::Done,
            data: Some(json!({"ok": true})),
            started_ms: 1,
            ended_ms: Some(2),
        };
        hub.turn_ended(&key, ("turn_1".to_owned(), record.clone()));
        assert_eq!(ended.try_recv(), Ok(("turn_1".to_owned(), record)));
        assert!(other.try_recv().is_err(), "another session's waiter is not told");
        // Abandoned waiters do not pile up.
        for i in 0..1000 {
            drop(hub.turn_end(&SessionKey::new("t", format!("s{i}"))));
        }
        assert!(hub.channels().turn_waiters.len() <= 64);
    }

    #[test]
    fn live_channels_survive_others_leaving() {
        let hub = hub();
        let kept = SessionKey::new("t", "kept");
        let mut rx = hub.subscribe(&kept).unwrap();
        for i in 0..1000 {
            drop(hub.subscribe(&SessionKey::new("t", format!("s{i}"))).unwrap());
        }
        hub.publish_all([(kept.clone(), event(1)), (kept.clone(), event(2))]);
        assert_eq!(next(&mut rx), Some(Ok(event(1))));
        assert_eq!(next(&mut rx), Some(Ok(event(2))));
        assert_eq!(next(&mut rx), None);
    }

    /// A delta of `len` bytes of text.
    fn delta(len: usize) -> Frame {
        let delta = TokenDelta { delta: StreamDelta::text("x".repeat(len)), call_id: "llm_1".to_owned() };
        Frame::new(&Event::new(None, &SessionEvent::TokenDelta(delta)))
    }

    #[test]
    fn a_slow_subscriber_is_dropped_at_its_budget_and_others_keep_receiving() {
        let limits = StreamLimits { subscriber_buffer_bytes: 64 << 10, ..StreamLimits::default() };
        let hub = Hub::new(limits);
        let key = SessionKey::new("t", "s");
        let mut slow = hub.subscribe(&key).unwrap();
        let mut fast = hub.subscribe(&key).unwrap();
        let one = delta(1000);
        let fits = (64 << 10) / one.bytes();
        for _ in 0..fits {
            hub.publish(&key, one.clone());
            assert_eq!(fast.try_recv_frame().unwrap().unwrap().data, one.data);
        }
        assert!(slow.queued_bytes() <= 64 << 10);
        assert_eq!(slow.queued_bytes(), fits * one.bytes(), "everything so far is queued");
        // One more would pass the budget: the slow one is dropped, and what
        // it held is freed at once.
        hub.publish(&key, one.clone());
        assert_eq!(slow.queued_bytes(), 0);
        assert_eq!(slow.try_recv_frame().unwrap().unwrap_err(), RecvError::Dropped { budget: 64 << 10 });
        assert_eq!(fast.try_recv_frame().unwrap().unwrap().data, one.data, "the fast one is untouched");
        // The slow one is out of the hub; the fast one goes on.
        for _ in 0..1000 {
            hub.publish(&key, one.clone());
            assert!(fast.try_recv_frame().unwrap().is_ok());
        }
        assert_eq!(slow.queued_bytes(), 0, "a dropped subscriber is sent nothing more");
        assert_eq!(hub.channels().by_session[&key].len(), 1);
    }

    #[test]
    fn an_event_larger_than_the_budget_still_reaches_an_idle_subscriber() {
        let limits = StreamLimits { subscriber_buffer_bytes: 1000, ..StreamLimits::default() };
        let hub = Hub::new(limits);
        let key = SessionKey::new("t", "s");
        let mut rx = hub.subscribe(&key).unwrap();
        let big = Event { seq: Some(1), name: "message".to_owned(), data: json!("y".repeat(5000)) };
        hub.publish_all([(key.clone(), big.clone())]);
        assert_eq!(next(&mut rx), Some(Ok(big)));
    }

    #[test]
    fn a_dropped_subscriber_catches_up_from_the_store_exactly_once() {
        // Stored events are published after their commit, so a store that
        // holds what was published stands in for the real one.
        let limits = StreamLimits { subscriber_buffer_bytes: 4096, ..StreamLimits::default() };
        let hub = Hub::new(limits);
        let key = SessionKey::new("t", "s");
        let mut reader = Reader { rx: hub.subscribe(&key).unwrap(), seen: Vec::new(), last: None, drops: 0 };
        let mut stored: Vec<Event> = Vec::new();
        for seq in 1..=500u64 {
            let event = Event { seq: Some(seq), name: "message".to_owned(), data: json!({"n": seq}) };
            stored.push(event.clone());
            hub.publish_all([(key.clone(), event)]);
            hub.publish(&key, delta(200));
            // The subscriber reads a little, now and then: it falls behind.
            if seq % 7 == 0 {
                for _ in 0..3 {
                    reader.take(&hub, &key, &stored);
                }
            }
        }
        while reader.take(&hub, &key, &stored) {}
        assert!(reader.drops > 0, "the slow subscriber was dropped");
        assert_eq!(reader.seen, (1..=500).collect::<Vec<_>>(), "every stored event exactly once, in order");
    }

    /// A client of the hub that keeps the stored events it has seen.
    struct Reader {
        rx: Subscription,
        seen: Vec<u64>,
        last: Option<u64>,
        drops: usize,
    }

    impl Reader {
        /// Takes one event, if one waits; reconnects if it was dropped.
        fn take(&mut self, hub: &Hub, key: &SessionKey, stored: &[Event]) -> bool {
            match self.rx.try_recv_frame() {
                Some(Ok(frame)) => {
                    // Events the store already gave are skipped by seq.
                    if let Some(seq) = frame.seq
                        && Some(seq) > self.last
                    {
                        assert_eq!(seq, self.last.map_or(1, |l| l + 1), "no gap live");
                        self.seen.push(seq);
                        self.last = Some(seq);
                    }
                }
                Some(Err(RecvError::Dropped { .. })) => {
                    self.drops += 1;
                    // Subscribes again, then reads the store after the last
                    // event it saw, as a client reconnecting does.
                    self.rx = hub.subscribe(key).unwrap();
                    let after = self.last;
                    for event in stored.iter().filter(|e| e.seq > after) {
                        self.seen.push(event.seq.unwrap());
                        self.last = event.seq;
                    }
                }
                Some(Err(e)) => panic!("{e}"),
                None => return false,
            }
            true
        }
    }

    #[test]
    fn a_tenant_has_at_most_its_streams() {
        let limits = StreamLimits { max_streams_per_tenant: 2, ..StreamLimits::default() };
        let hub = Hub::new(limits);
        let a = hub.subscribe(&SessionKey::new("t", "s1")).unwrap();
        let _b = hub.subscribe(&SessionKey::new("t", "s2")).unwrap();
        let refused = hub.subscribe(&SessionKey::new("t", "s1")).unwrap_err();
        assert_eq!(refused, TooManyStreams { max: 2 });
        assert!(refused.to_string().contains("max_streams_per_tenant"), "{refused}");
        let _other = hub.subscribe(&SessionKey::new("u", "s1")).expect("another tenant has its own");
        drop(a);
        let _c = hub.subscribe(&SessionKey::new("t", "s1")).expect("a slot was freed");
    }

    #[tokio::test]
    async fn subscribers_end_when_the_hub_goes() {
        let hub = hub();
        let mut rx = hub.subscribe(&SessionKey::new("t", "s")).unwrap();
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        drop(hub);
        assert_eq!(waiting.await.unwrap(), Err(RecvError::Closed));
    }

    #[test]
    fn deltas_are_held_to_their_size_total_and_rate() {
        let limits = StreamLimits { max_delta_bytes: 1000, max_call_delta_bytes: 10_000, ..StreamLimits::default() };
        let mut gate = DeltaGate::new(limits.clone(), "llm_1");
        let frame = gate.admit(&StreamDelta::text("hi")).unwrap();
        assert_eq!(&*frame.data, r#"{"text":"hi","call_id":"llm_1"}"#);
        assert_eq!(
            frame.parse(),
            Ok(SessionEvent::TokenDelta(TokenDelta { delta: StreamDelta::text("hi"), call_id: "llm_1".to_owned() }))
        );
        let e = gate.admit(&StreamDelta::text("x".repeat(12 << 20))).unwrap_err();
        assert!(e.to_string().contains("max_delta_bytes"), "{e}");
        // Escaping counts: 600 quotes are 1200 bytes of JSON.
        let e = gate.admit(&StreamDelta::text("\"".repeat(600))).unwrap_err();
        assert!(e.to_string().contains("1000"), "{e}");
        let mut refused = None;
        for _ in 0..20 {
            if let Err(e) = gate.admit(&StreamDelta::text("x".repeat(900))) {
                refused = Some(e);
                break;
            }
        }
        let e = refused.expect("the total is bounded");
        assert!(e.to_string().contains("max_call_delta_bytes"), "{e}");

        let mut gate = DeltaGate::new(StreamLimits { max_deltas_per_sec: 100, ..limits }, "llm_1");
        let passed = (0..1000).filter(|_| gate.admit(&StreamDelta::text("t")).is_ok()).count();
        assert!((100..110).contains(&passed), "a burst of one second's worth, then the rate: {passed}");
        let e = gate.admit(&StreamDelta::text("t")).unwrap_err();
        assert!(e.to_string().contains("max_deltas_per_sec"), "{e}");
    }

    #[tokio::test]
    async fn a_resync_sends_followers_to_the_store_and_waiters_to_read_their_turns() {
        let hub = hub();
        let (a, b) = (SessionKey::new("t", "a"), SessionKey::new("t", "b"));
        let (mut on_a, mut on_b) = (hub.subscribe(&a).unwrap(), hub.subscribe(&b).unwrap());
        let waiter_a = hub.turn_end(&a);
        let mut waiter_b = hub.turn_end(&b);
        hub.publish_all([(a.clone(), event(0))]);
        hub.resync(&a);
        // The resync comes first: the follower reads the store from where
        // it is, then the queued event, which it then skips by number.
        assert_eq!(on_a.recv_or_resync().await, Ok(None));
        assert_eq!(on_a.recv_or_resync().await.unwrap().map(|f| f.event()), Some(event(0)));
        let (id, _) = waiter_a.await.expect("told");
        assert!(id.is_empty(), "an end no turn has: the waiter reads the store");
        assert!(on_b.try_recv_frame().is_none() && waiter_b.try_recv().is_err(), "other sessions untouched");

        hub.resync_all();
        assert_eq!(on_b.recv_or_resync().await, Ok(None));
        assert!(waiter_b.await.expect("told").0.is_empty());
        assert_eq!(on_a.recv_or_resync().await, Ok(None));
    }
}
