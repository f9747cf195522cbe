//! [`Context`]: what the engine offers an agent while it decides.
//!
//! The services sit behind the [`Host`] trait so that an agent does not
//! depend on where it runs: inside a component they are the engine's
//! `subs:agent/host` imports, in an HTTP worker the SSE response, and in a
//! unit test a [`RecordingHost`](crate::RecordingHost).

use std::fmt;

use subs_protocol::StreamDelta;

/// How much a log line matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Step-by-step detail.
    Trace,
    /// Detail for whoever debugs the agent.
    Debug,
    /// Ordinary progress.
    Info,
    /// Something unexpected that the agent handled.
    Warn,
    /// Something failed.
    Error,
}

impl Level {
    /// The level's name in lowercase (`warn`).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an agent's logs and streamed deltas go. Each way of running an
/// agent implements it once; agents use it through [`Context`].
pub trait Host {
    /// Streams a piece of the reply while the agent answers an
    /// `llm.execute` trigger whose `stream` is true; clients see it at once
    /// as an `llm.token.delta` event. Fails, with the reason, for any other
    /// decision.
    fn emit_delta(&mut self, delta: &StreamDelta) -> Result<(), String>;

    /// Writes a line to the engine's logs, which tag it with the tenant,
    /// agent and session of the decision.
    fn log(&mut self, level: Level, message: &str);
}

/// What the engine offers an agent during one decision: logging, and
/// streaming the reply of a worker-handled LLM call.
///
/// ```
/// use subs_sdk::prelude::*;
///
/// let mut host = RecordingHost::new();
/// let mut cx = Context::new(&mut host);
/// cx.info("thinking");
/// cx.emit_text("hel").unwrap();
/// cx.emit_text("lo").unwrap();
///
/// assert_eq!(host.logs, [(Level::Info, "thinking".to_owned())]);
/// assert_eq!(host.text(), "hello");
/// ```
pub struct Context<'a> {
    /// The services of wherever the agent runs; a trait object so that
    /// [`Agent`](crate::Agent) stays object-safe and free of generics.
    host: &'a mut dyn Host,
}

impl<'a> Context<'a> {
    /// A context whose services are `host`'s.
    pub fn new(host: &'a mut dyn Host) -> Self {
        Self { host }
    }

    /// The services behind this context, for the SDK's own helpers that
    /// hand them on ([`ToolRouter`](crate::ToolRouter)'s tool contexts).
    pub(crate) fn host(&mut self) -> &mut dyn Host {
        &mut *self.host
    }

    /// Streams a piece of the reply of the `llm.execute` being answered;
    /// see [`Host::emit_delta`]. The final `llm.result` must still carry
    /// the whole reply.
    ///
    /// # Errors
    /// When the decision is not for an `llm.execute` with `stream: true`;
    /// `?` turns the reason into a terminal [`DecideError`](crate::DecideError).
    pub fn emit_delta(&mut self, delta: &StreamDelta) -> Result<(), String> {
        self.host.emit_delta(delta)
    }

    /// Streams a piece of reply text; see [`Context::emit_delta`].
    ///
    /// # Errors
    /// As [`Context::emit_delta`].
    pub fn emit_text(&mut self, text: impl Into<String>) -> Result<(), String> {
        self.host.emit_delta(&StreamDelta::text(text))
    }

    /// Writes a line to the engine's logs at `level`.
    pub fn log(&mut self, level: Level, message: impl AsRef<str>) {
        self.host.log(level, message.as_ref());
    }

    /// Logs at [`Level::Debug`].
    pub fn debug(&mut self, message: impl AsRef<str>) {
        self.log(Level::Debug, message);
    }

    /// Logs at [`Level::Info`].
    pub fn info(&mut self, message: impl AsRef<str>) {
        self.log(Level::Info, message);
    }

    /// Logs at [`Level::Warn`].
    pub fn warn(&mut self, message: impl AsRef<str>) {
        self.log(Level::Warn, message);
    }

    /// Logs at [`Level::Error`].
    pub fn error(&mut self, message: impl AsRef<str>) {
        self.log(Level::Error, message);
    }
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RecordingHost;

    #[test]
    fn logs_reach_the_host_in_order() {
        let mut host = RecordingHost::new();
        let mut cx = Context::new(&mut host);
        cx.debug("a");
        cx.info(String::from("b"));
        cx.warn("c");
        cx.error(format!("{}", 'd'));
        cx.log(Level::Trace, "e");
        let levels: Vec<_> = host.logs.iter().map(|(l, _)| *l).collect();
        assert_eq!(levels, [Level::Debug, Level::Info, Level::Warn, Level::Error, Level::Trace]);
        assert_eq!(host.logs[4].1, "e");
    }

    #[test]
    fn emit_errors_come_back_from_the_host() {
        let mut host = RecordingHost::refusing_deltas();
        let mut cx = Context::new(&mut host);
        let err = cx.emit_text("x").unwrap_err();
        assert!(err.contains("llm.execute"), "{err}");
        assert!(host.deltas.is_empty());
    }

    #[test]
    fn levels_print_lowercase() {
        assert_eq!(Level::Warn.to_string(), "warn");
    }
}
