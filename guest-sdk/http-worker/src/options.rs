//! [`WorkerOptions`]: where a worker listens and what it demands of
//! requests.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::DEFAULT_TOLERANCE;

/// How [`router_with`](crate::router_with) serves an agent.
///
/// ```
/// use std::time::Duration;
/// use subs_http_worker::WorkerOptions;
///
/// let options = WorkerOptions::new()
///     .path("/agents/tools")
///     .require_signature("s3cret")
///     .signature_tolerance(Duration::from_secs(60));
/// assert_eq!(options.route(), "/agents/tools");
/// ```
#[derive(Clone)]
pub struct WorkerOptions {
    /// The route decisions are POSTed to.
    path: String,
    /// When set, every request must carry a valid `Subs-Signature` made
    /// with this secret.
    secret: Option<Arc<[u8]>>,
    /// The replay window of signatures.
    tolerance: Duration,
    /// The largest request body read: a long session's request carries
    /// its whole message tree, so the default is well above axum's 2 MB.
    max_request_bytes: usize,
}

impl WorkerOptions {
    /// `POST /`, no signatures required, requests up to 32 MiB.
    pub fn new() -> Self {
        Self { path: "/".to_owned(), secret: None, tolerance: DEFAULT_TOLERANCE, max_request_bytes: 32 << 20 }
    }

    /// Serves decisions at `path` instead of `/` (a missing leading `/`
    /// is added).
    #[must_use]
    pub fn path(mut self, path: impl Into<String>) -> Self {
        let path = path.into();
        self.path = if path.starts_with('/') { path } else { format!("/{path}") };
        self
    }

    /// Refuses (401) every request without a valid `Subs-Signature` made
    /// with `secret`, the secret the agent is registered with in the
    /// engine.
    #[must_use]
    pub fn require_signature(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(secret.as_ref().into());
        self
    }

    /// How far a signature's timestamp may be from this clock (default
    /// [`DEFAULT_TOLERANCE`], 5 minutes).
    #[must_use]
    pub fn signature_tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The largest request body accepted (413 above it).
    #[must_use]
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes;
        self
    }

    /// The route decisions are served at.
    pub fn route(&self) -> &str {
        &self.path
    }

    pub(crate) fn secret(&self) -> Option<&[u8]> {
        self.secret.as_deref()
    }

    pub(crate) fn tolerance(&self) -> Duration {
        self.tolerance
    }

    pub(crate) fn max_request(&self) -> usize {
        self.max_request_bytes
    }
}

impl Default for WorkerOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for WorkerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerOptions")
            .field("path", &self.path)
            .field("signatures", &self.secret.as_ref().map(|_| "required"))
            .field("tolerance", &self.tolerance)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}
