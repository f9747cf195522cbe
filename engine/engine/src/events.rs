//! Events for clients: stored ones (with a per-session sequence number, in
//! the same commit as the step that made them) and live-only token deltas,
//! fanned out to subscribers by a hub.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Value, json};
use subs_protocol::StreamDelta;
use tokio::sync::broadcast;

use crate::store::{EventRecord, SessionKey};

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
#[derive(Default)]
pub(crate) struct Hub {
    channels: Mutex<HashMap<SessionKey, broadcast::Sender<Event>>>,
}

/// How many events a slow subscriber may fall behind before it misses
/// some (it then replays stored events from the store).
const CAPACITY: usize = 1024;

impl Hub {
    /// Sends `event` to the session's current subscribers.
    pub fn publish(&self, key: &SessionKey, event: Event) {
        let mut channels = self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(sender) = channels.get(key)
            && sender.send(event).is_err()
        {
            // Everyone unsubscribed.
            channels.remove(key);
        }
    }

    /// Subscribes to the session's events from now on.
    pub fn subscribe(&self, key: &SessionKey) -> broadcast::Receiver<Event> {
        let mut channels = self.channels.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        channels.entry(key.clone()).or_insert_with(|| broadcast::channel(CAPACITY).0).subscribe()
    }
}
