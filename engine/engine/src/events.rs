//! Events for clients: stored ones (with a per-session sequence number, in
//! the same commit as the step that made them) and live-only token deltas,
//! fanned out to subscribers by a hub.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};
use subs_protocol::StreamDelta;
use tokio::sync::{broadcast, oneshot};

use crate::store::{EventRecord, SessionKey, TurnRecord};

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
}

/// An `llm.token.delta` event's data: the call id and the delta's fields.
pub fn token_delta(call_id: &str, delta: &StreamDelta) -> Value {
    let mut data = subs_protocol::to_value(delta);
    if let Value::Object(map) = &mut data {
        map.insert("call_id".to_owned(), json!(call_id));
    }
    data
}

/// Fans events out to the subscribers of each session. Publishing to a
/// session nobody watches costs a map lookup.
///
/// A session's channel exists only while someone subscribes to it: a
/// channel whose receivers are all gone is dropped when an event finds it
/// so, and the map is swept of such channels whenever it has doubled since
/// the last sweep. So sessions nobody watches any more (an idle session
/// whose last client left) cost nothing here; a channel holds room for
/// [`CAPACITY`] events, about 100 KB, which idle sessions would otherwise
/// keep forever.
#[derive(Default)]
pub(crate) struct Hub {
    channels: Mutex<Channels>,
}

#[derive(Default)]
struct Channels {
    by_session: HashMap<SessionKey, broadcast::Sender<Event>>,
    /// Channels in the map after the last sweep.
    swept: usize,
    /// Who waits for the end of one of the session's turns: told (once),
    /// with the turn's id and stored record, when a commit ends one. Far
    /// cheaper than a broadcast channel for a caller that needs nothing
    /// else, and the record spares it reading the store again.
    turn_waiters: HashMap<SessionKey, Vec<oneshot::Sender<EndedTurn>>>,
    /// Waiter lists in the map after their last sweep.
    waiters_swept: usize,
}

/// A turn that a commit ended: its id and its record as stored.
pub(crate) type EndedTurn = (String, TurnRecord);

/// How many events a slow subscriber may fall behind before it misses
/// some (it then replays stored events from the store).
const CAPACITY: usize = 1024;

impl Hub {
    fn channels(&self) -> std::sync::MutexGuard<'_, Channels> {
        self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends `event` to the session's current subscribers.
    pub fn publish(&self, key: &SessionKey, event: Event) {
        let mut channels = self.channels();
        if let Some(sender) = channels.by_session.get(key)
            && sender.send(event).is_err()
        {
            // Everyone unsubscribed.
            channels.by_session.remove(key);
        }
    }

    /// Sends the events of one commit, in order, taking the lock once.
    pub fn publish_all(&self, events: impl IntoIterator<Item = (SessionKey, Event)>) {
        let mut events = events.into_iter().peekable();
        if events.peek().is_none() {
            return;
        }
        let mut channels = self.channels();
        if channels.by_session.is_empty() {
            return;
        }
        for (key, event) in events {
            if let Some(sender) = channels.by_session.get(&key)
                && sender.send(event).is_err()
            {
                channels.by_session.remove(&key);
            }
        }
    }

    /// Subscribes to the session's events from now on.
    pub fn subscribe(&self, key: &SessionKey) -> broadcast::Receiver<Event> {
        let mut channels = self.channels();
        if let Some(sender) = channels.by_session.get(key) {
            return sender.subscribe();
        }
        // A new channel: first drop those nobody listens to any more, once
        // the map has doubled since the last sweep (amortized O(1)).
        if channels.by_session.len() >= 2 * channels.swept.max(32) {
            channels.by_session.retain(|_, sender| sender.receiver_count() > 0);
            channels.swept = channels.by_session.len();
        }
        let (sender, receiver) = broadcast::channel(CAPACITY);
        channels.by_session.insert(key.clone(), sender);
        receiver
    }

    /// Tells those waiting for the end of one of the session's turns that
    /// `ended` (committed) ended.
    pub fn turn_ended(&self, key: &SessionKey, ended: EndedTurn) {
        let mut channels = self.channels();
        let Some(waiters) = channels.turn_waiters.remove(key) else { return };
        drop(channels);
        for waiter in waiters {
            let _ = waiter.send(ended.clone());
        }
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

    /// Channels held (some may have no receiver left until the next sweep).
    #[cfg(test)]
    pub fn channels_held(&self) -> usize {
        self.channels().by_session.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: u64) -> Event {
        Event { seq: Some(n), name: "x".to_owned(), data: Value::Null }
    }

    #[test]
    fn channels_nobody_listens_to_are_dropped() {
        let hub = Hub::default();
        for i in 0..1000 {
            let key = SessionKey::new("t", format!("s{i}"));
            let mut rx = hub.subscribe(&key);
            hub.publish(&key, event(1));
            assert_eq!(rx.try_recv().unwrap(), event(1));
        }
        // Every receiver is gone; the sweeps keep the map from growing with
        // the sessions ever watched.
        assert!(hub.channels_held() <= 64, "{} channels held", hub.channels_held());
    }

    #[test]
    fn turn_waiters_hear_the_end_of_a_turn_only() {
        let hub = Hub::default();
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
    fn live_channels_survive_sweeps() {
        let hub = Hub::default();
        let kept = SessionKey::new("t", "kept");
        let mut rx = hub.subscribe(&kept);
        for i in 0..1000 {
            drop(hub.subscribe(&SessionKey::new("t", format!("s{i}"))));
        }
        hub.publish_all([(kept.clone(), event(1)), (kept.clone(), event(2))]);
        assert_eq!(rx.try_recv().unwrap(), event(1));
        assert_eq!(rx.try_recv().unwrap(), event(2));
    }
}
