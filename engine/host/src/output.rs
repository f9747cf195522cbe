//! Guest stdout and stderr: captured line by line into the engine's
//! `tracing` logs, tagged with the tenant, agent and session of the
//! decision, and bounded so a chatty guest cannot flood the logs.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A line longer than this is logged in pieces, so one enormous write does
/// not become one enormous log record.
pub(crate) const MAX_LINE: usize = 4096;

/// Lines of stderr a trap's error quotes.
const TAIL_LINES: usize = 3;

/// Who is writing: the fields every captured line is tagged with.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    pub tenant: Arc<str>,
    pub agent: Arc<str>,
    pub session: String,
}

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// The shared state of one stream of one decision.
struct Capture {
    stream: Stream,
    labels: Labels,
    /// The line being written, until its newline arrives.
    partial: Vec<u8>,
    /// Bytes the guest may still have logged; past it output is dropped.
    budget: usize,
    /// Whether output was dropped (warned about once).
    dropped: bool,
    /// The last few meaningful lines, kept for stderr: a panicking Rust
    /// guest says why there (`panicked at …` then the message), and a
    /// trap's error quotes them.
    tail: VecDeque<String>,
}

impl Capture {
    fn write(&mut self, mut bytes: &[u8]) {
        if bytes.len() > self.budget {
            bytes = &bytes[..self.budget];
            if !self.dropped {
                self.dropped = true;
                let l = &self.labels;
                tracing::warn!(
                    target: "subs::guest", tenant = %l.tenant, agent = %l.agent, session = %l.session,
                    "the guest's output passed its log limit; the rest of this decision's output is dropped"
                );
            }
        }
        self.budget -= bytes.len();
        for &b in bytes {
            if b == b'\n' {
                self.emit();
            } else {
                self.partial.push(b);
                if self.partial.len() >= MAX_LINE {
                    self.emit();
                }
            }
        }
    }

    fn emit(&mut self) {
        let line = String::from_utf8_lossy(&self.partial).trim_end_matches('\r').to_owned();
        self.partial.clear();
        let l = &self.labels;
        match self.stream {
            Stream::Stdout => tracing::info!(
                target: "subs::guest", tenant = %l.tenant, agent = %l.agent, session = %l.session,
                stream = "stdout", "{line}"
            ),
            Stream::Stderr => tracing::warn!(
                target: "subs::guest", tenant = %l.tenant, agent = %l.agent, session = %l.session,
                stream = "stderr", "{line}"
            ),
        }
        // Rust's hint about RUST_BACKTRACE says nothing about the guest.
        if self.stream == Stream::Stderr
            && !line.trim().is_empty()
            && !line.starts_with("note: run with `RUST_BACKTRACE")
        {
            if self.tail.len() == TAIL_LINES {
                self.tail.pop_front();
            }
            self.tail.push_back(line);
        }
    }
}

impl Drop for Capture {
    /// A last line without its newline still reaches the logs.
    fn drop(&mut self) {
        if !self.partial.is_empty() {
            self.emit();
        }
    }
}

/// One captured stream of one decision; cheap to clone, all clones write
/// to the same lines.
#[derive(Clone)]
pub(crate) struct GuestOutput(Arc<Mutex<Capture>>);

impl GuestOutput {
    pub(crate) fn new(stream: Stream, labels: Labels, budget: usize) -> Self {
        Self(Arc::new(Mutex::new(Capture {
            stream,
            labels,
            partial: Vec::new(),
            budget,
            dropped: false,
            tail: VecDeque::new(),
        })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Capture> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The last few lines written (one still missing its newline
    /// included), joined with ` / `; `None` when nothing was written.
    pub(crate) fn tail(&self) -> Option<String> {
        let capture = self.lock();
        let mut lines: Vec<String> = capture.tail.iter().cloned().collect();
        if capture.partial.iter().any(|b| !b.is_ascii_whitespace()) {
            lines.push(String::from_utf8_lossy(&capture.partial).into_owned());
        }
        (!lines.is_empty()).then(|| lines.join(" / "))
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.lock().write(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        // Lines are logged as their newline arrives; a partial line waits
        // for its end rather than being split at every flush.
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always ready: writing only appends to memory (bounded by the log
        // limit), so the guest never waits on its own output.
        Ok(1 << 20)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.lock().write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
