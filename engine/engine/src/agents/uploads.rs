//! What uploads may cost the server: how many compile at once, how often
//! a tenant may upload, and how much compiled code its agents may hold.
//!
//! Compiling is the most expensive thing a request can make the server do
//! (seconds of both cores and up to the compile budget's memory, see
//! docs/security.md). So compiles run at most [`UploadPolicy::concurrent`]
//! at a time on the server and one at a time per tenant: a tenant's second
//! upload while its first compiles is refused at once
//! ([`AgentError::Compiling`], 429 on the API) rather than held (with its
//! body) in memory. Each tenant's uploads (components and HTTP workers
//! alike: each is a version kept in the agent's record) are metered by a
//! bucket of `max_uploads_per_hour`, refilled evenly, checked before the
//! body is read; and the compiled code its current agents hold now is
//! counted against `max_compiled_bytes` ([`check_quota`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::AgentError;

/// How uploads are shared on this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPolicy {
    /// Compiles running at once, over all tenants; more wait their turn.
    pub concurrent: usize,
}

impl Default for UploadPolicy {
    fn default() -> Self {
        Self { concurrent: 2 }
    }
}

/// The server's uploads in progress and each tenant's meters.
pub struct Uploads {
    compiles: tokio::sync::Semaphore,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Tenants with a compile in progress.
    compiling: HashSet<String>,
    /// Each tenant's upload bucket: tokens left, and when it was filled.
    buckets: HashMap<String, (f64, Instant)>,
}

/// A tenant's turn to compile; ends when dropped.
pub struct CompileTurn<'a> {
    uploads: &'a Uploads,
    tenant: String,
    _permit: tokio::sync::SemaphorePermit<'a>,
}

impl Drop for CompileTurn<'_> {
    fn drop(&mut self) {
        self.uploads.state().compiling.remove(&self.tenant);
    }
}

impl Uploads {
    /// The meters for `policy`.
    pub fn new(policy: &UploadPolicy) -> Self {
        Self { compiles: tokio::sync::Semaphore::new(policy.concurrent.max(1)), state: Mutex::default() }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes one upload from `tenant`'s bucket of `per_hour`, or says when
    /// the next one is allowed.
    pub fn meter(&self, tenant: &str, per_hour: u32) -> Result<(), AgentError> {
        let capacity = f64::from(per_hour);
        let per_sec = capacity / 3600.0;
        let now = Instant::now();
        let mut state = self.state();
        let (tokens, at) = state.buckets.entry(tenant.to_owned()).or_insert((capacity, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * per_sec).min(capacity);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        let wait = if per_sec > 0.0 { Duration::from_secs_f64((1.0 - *tokens) / per_sec) } else { Duration::MAX };
        Err(AgentError::UploadRate { per_hour, next_in_secs: wait.as_secs().saturating_add(1) })
    }

    /// Waits for a compile slot for `tenant`; refuses at once while one of
    /// its uploads is compiling.
    pub async fn turn(&self, tenant: &str) -> Result<CompileTurn<'_>, AgentError> {
        if !self.state().compiling.insert(tenant.to_owned()) {
            return Err(AgentError::Compiling);
        }
        let unmark = Unmark { uploads: self, tenant };
        let permit = self.compiles.acquire().await.map_err(|e| AgentError::Internal(e.to_string()))?;
        std::mem::forget(unmark);
        Ok(CompileTurn { uploads: self, tenant: tenant.to_owned(), _permit: permit })
    }
}

/// Refuses an agent of `bytes` compiled bytes when, with `others` (what
/// the tenant's other current agents hold), the tenant would pass `limit`.
/// `others` is read from the agents' code when asked, not kept from their
/// uploads: an agent accepted on baseline code holds less once its
/// optimized code replaces it.
pub fn check_quota(others: u64, bytes: u64, limit: u64) -> Result<(), AgentError> {
    let total = others.saturating_add(bytes);
    if total <= limit {
        return Ok(());
    }
    Err(AgentError::CompiledQuota { total, bytes, limit })
}

/// Clears a tenant's "compiling" mark if its turn is given up while it
/// waits for a server-wide slot.
struct Unmark<'a> {
    uploads: &'a Uploads,
    tenant: &'a str,
}

impl Drop for Unmark<'_> {
    fn drop(&mut self) {
        self.uploads.state().compiling.remove(self.tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_its_size_then_refuses_naming_the_limit() {
        let uploads = Uploads::new(&UploadPolicy::default());
        for _ in 0..3 {
            uploads.meter("t", 3).unwrap();
        }
        let err = uploads.meter("t", 3).unwrap_err();
        assert!(matches!(err, AgentError::UploadRate { per_hour: 3, .. }), "{err:?}");
        assert!(err.to_string().contains("max_uploads_per_hour"), "{err}");
        uploads.meter("other", 3).expect("tenants have their own buckets");
    }

    #[tokio::test]
    async fn one_compile_per_tenant_at_a_time() {
        let uploads = Uploads::new(&UploadPolicy { concurrent: 4 });
        let turn = uploads.turn("t").await.unwrap();
        assert!(matches!(uploads.turn("t").await.err(), Some(AgentError::Compiling)));
        let _other = uploads.turn("u").await.unwrap();
        drop(turn);
        let _again = uploads.turn("t").await.expect("the tenant's turn ended");
    }

    #[test]
    fn the_quota_counts_the_other_agents_and_the_new_version() {
        check_quota(30, 70, 100).expect("up to the limit");
        let err = check_quota(90, 20, 100).unwrap_err();
        assert!(matches!(err, AgentError::CompiledQuota { total: 110, bytes: 20, limit: 100 }), "{err:?}");
        assert!(err.to_string().contains("max_compiled_bytes"), "{err}");
    }
}
