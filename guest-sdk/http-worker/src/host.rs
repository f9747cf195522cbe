//! The [`Host`] of an agent served over HTTP: deltas become events of the
//! SSE reply, log lines become `tracing` events.

use subs_sdk::{Host, Level, StreamDelta};
use tokio::sync::mpsc;

use crate::handler::Item;

/// What happens to the deltas an agent emits.
pub(crate) enum Deltas {
    /// The trigger is not a streaming `llm.execute`: emitting is an error,
    /// as it is inside the engine, so an agent behaves the same both ways.
    Refused(&'static str),
    /// The trigger streams but the engine asked for a JSON reply: the
    /// final decision carries the whole reply, so the pieces are dropped.
    Dropped,
    /// Sent to the SSE reply as they come.
    Streamed(mpsc::Sender<Item>),
}

/// The host of one decision. It lives on a blocking thread (agents are
/// synchronous), hence `blocking_send`.
pub(crate) struct HttpHost {
    pub(crate) deltas: Deltas,
}

impl Host for HttpHost {
    fn emit_delta(&mut self, delta: &StreamDelta) -> Result<(), String> {
        match &self.deltas {
            Deltas::Refused(why) => Err((*why).to_owned()),
            Deltas::Dropped => Ok(()),
            Deltas::Streamed(tx) => tx
                .blocking_send(Item::Delta(delta.clone()))
                .map_err(|_| "the engine stopped reading the reply".to_owned()),
        }
    }

    fn log(&mut self, level: Level, message: &str) {
        // The handler's span (session, agent, trigger) is entered on this
        // thread, so these lines carry it.
        match level {
            Level::Trace => tracing::trace!(target: "subs::agent", "{message}"),
            Level::Debug => tracing::debug!(target: "subs::agent", "{message}"),
            Level::Info => tracing::info!(target: "subs::agent", "{message}"),
            Level::Warn => tracing::warn!(target: "subs::agent", "{message}"),
            Level::Error => tracing::error!(target: "subs::agent", "{message}"),
        }
    }
}
