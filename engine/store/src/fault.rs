//! [`FaultyStore`]: a test tool that wraps a [`Store`] to make it crash,
//! slow down or reorder its commits on cue.
//!
//! Not for production. Crash-recovery tests drive an engine on a
//! `FaultyStore`, let it "crash" after a chosen number of commits (every
//! later commit fails, nothing more is written), drop the engine, and start
//! a new one on the same file to check that it resumes from exactly what
//! was committed. The slow-disk delay makes commits take long enough for
//! races (cancellation, shutdown, concurrent sessions) to show. Reordered
//! commits are the broken store the conformance suite must catch.
//!
//! ```no_run
//! # async fn demo() {
//! use subs_store::MemStore;
//! use subs_store::fault::FaultyStore;
//!
//! let store = FaultyStore::new(MemStore::new());
//! store.crash_after(3);
//! // ... run the engine on `store` until it crashes:
//! store.wait_crashed().await;
//! let survived = store.into_inner();
//! // ... start an engine on what survived and check it.
//! # }
//! ```

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::watch;

use crate::{
    AgentRecord, Batch, BoxFuture, CallRecord, EventRecord, InboxItem, KeyRecord, LoadedSession, MessageRecord,
    SessionHead, SessionKey, SessionRecord, StepRecord, Store, StoreAdmin, StoreError, StoreResult, StoreStats,
    TenantRecord, TurnRecord,
};

/// A [`Store`] that passes everything to `inner` until it is told to
/// crash. A test tool; see the [module docs](self).
///
/// Once crashed, every commit fails with [`StoreError::Closed`] and writes
/// nothing, as if the process had died just before it; reads still reach
/// `inner`, so a test can look at what a crash left behind. The crash is
/// decided when `commit` is called: commits let through before it complete
/// normally, like commits that were durable before the process died.
#[derive(Debug)]
pub struct FaultyStore<S> {
    /// The store that does the work.
    inner: S,
    /// The crash plan and the counts, behind one lock so that concurrent
    /// commits are let through or refused in one order.
    state: Mutex<State>,
    /// Flips to `true` on the crash; watched by [`Self::wait_crashed`], and
    /// unlike a `Notify` it remembers a crash that happened before anyone
    /// waited.
    crashed: watch::Sender<bool>,
}

/// Ops and bytes written (see [`FaultyStore::written`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Ops committed.
    pub ops: u64,
    /// Their bytes: the JSON of each record put, and of each key deleted.
    pub bytes: u64,
    /// Of those ops, the ones a later op of their batch replaced (see
    /// [`Batch::superseded`]).
    pub superseded: u64,
}

impl std::ops::Sub for Written {
    type Output = Written;

    fn sub(self, earlier: Written) -> Written {
        Written {
            ops: self.ops - earlier.ops,
            bytes: self.bytes - earlier.bytes,
            superseded: self.superseded - earlier.superseded,
        }
    }
}

/// About the bytes `op` writes: the JSON of the record it puts, the keys
/// it deletes. The backends' encodings differ from it by framing and keys,
/// which do not grow with a session.
fn op_bytes(op: &crate::Op) -> u64 {
    use crate::Op;
    fn json(value: &impl serde::Serialize) -> u64 {
        serde_json::to_vec(value).map_or(0, |bytes| bytes.len() as u64)
    }
    match op {
        Op::PutSession(record) => json(record),
        Op::PutMessage { session, seq, record } => json(&(session, seq, record)),
        Op::PutStep { session, seq, record } => json(&(session, seq, record)),
        Op::PutCall { session, record } | Op::UpdateCall { session, record } => json(&(session, record)),
        Op::DeleteCall { session, call_id } => json(&(session, call_id)),
        Op::PutEvent { session, seq, record } => json(&(session, seq, record)),
        Op::PutTurn { session, turn_id, record } => json(&(session, turn_id, record)),
        Op::PushInbox { session, item } => json(&(session, item)),
        Op::DeleteInbox { session, seq } => json(&(session, seq)),
        Op::PutAgent(record) => json(record),
        Op::DeleteAgent { tenant, agent_id } => json(&(tenant, agent_id)),
        Op::CountDecisions { tenant, agent_id, version, decisions } => json(&(tenant, agent_id, version, decisions)),
        Op::PutKey(record) => json(record),
        Op::DeleteKey { tenant, hash } => json(&(tenant, hash)),
        Op::PutMcpServer(record) => json(record),
        Op::DeleteMcpServer { tenant, name } => json(&(tenant, name)),
        Op::PutTenant(record) => json(record),
        Op::DeleteTenant { tenant } => json(tenant),
        Op::PutReply { id, reply } => json(&(id, reply)),
        Op::DeleteReply { id } => json(id),
    }
}

#[derive(Debug, Default)]
struct State {
    /// Commits still let through before the crash; `None`: no crash planned.
    budget: Option<u64>,
    /// Whether the store has crashed.
    crashed: bool,
    /// Commits passed to the inner store.
    commits: u64,
    /// What the commits passed on wrote: ops, and bytes (see [`op_bytes`]).
    written: Written,
    /// Commits refused because of the crash.
    refused: u64,
    /// How long each commit waits before it reaches the inner store.
    delay: Duration,
    /// Whether commits are acknowledged first and applied in swapped
    /// pairs (see [`FaultyStore::reorder_commits`]).
    reorder: bool,
    /// The acknowledged batch waiting for the next one, when reordering.
    held: Option<Batch>,
    /// Commits still to fail as a database that went away would (see
    /// [`FaultyStore::fail_commits`]), and whether they are written first.
    failing: u64,
    failing_written: bool,
}

/// What [`FaultyStore::admit`] decided for one commit.
enum Admitted {
    /// Through to the inner store, after the delay.
    Through(Duration),
    /// Refused: the store crashed.
    Crashed,
    /// Failed as by a lost connection; written first when `written`.
    Failed { written: bool },
}

impl<S: Store> FaultyStore<S> {
    /// Wraps `inner`, with no crash planned and no delay.
    pub fn new(inner: S) -> Self {
        Self { inner, state: Mutex::new(State::default()), crashed: watch::Sender::new(false) }
    }

    /// Lets `n` more commits through, then crashes: the next commit and
    /// every one after it fail with [`StoreError::Closed`] without writing.
    /// `crash_after(0)` crashes on the next commit. Calling it again
    /// replaces the plan (unless the store has crashed already).
    pub fn crash_after(&self, n: u64) {
        self.state().budget = Some(n);
    }

    /// Crashes now: every commit from here on fails.
    pub fn crash_now(&self) {
        let mut state = self.state();
        self.crash(&mut state);
    }

    /// Whether the store has crashed.
    pub fn crashed(&self) -> bool {
        self.state().crashed
    }

    /// Resolves once the store has crashed (at once if it has).
    pub async fn wait_crashed(&self) {
        let mut crashed = self.crashed.subscribe();
        // Fails only if the sender is gone, and `self` holds it.
        let _ = crashed.wait_for(|crashed| *crashed).await;
    }

    /// Makes every commit from now on wait `delay` before it reaches the
    /// inner store, like a slow disk. Uses tokio's clock, so tests with a
    /// paused clock control it.
    pub fn set_commit_delay(&self, delay: Duration) {
        self.state().delay = delay;
    }

    /// Breaks the store's promise of order, as a write-back cache that
    /// reorders writes would: from now on each commit is acknowledged at
    /// once, the first of each pair is held back, and it is applied only
    /// after the one that follows it. Nothing that relies on commit order
    /// can pass on such a store; the conformance suite proves it fails.
    pub fn reorder_commits(&self) {
        self.state().reorder = true;
    }

    /// Makes the next `n` commits fail as they do when the connection to a
    /// database is lost: with `written` false, each fails with
    /// [`StoreError::Io`] and writes nothing (the database refused it or
    /// was not reached); with `written` true, each is written and then
    /// fails with [`StoreError::InDoubt`] (the answer was lost on the
    /// way). Commits after them go through. Unlike a crash, the store
    /// stays usable: this is a database restarting under a live engine.
    pub fn fail_commits(&self, n: u64, written: bool) {
        let mut state = self.state();
        state.failing = n;
        state.failing_written = written;
    }

    /// Commits passed through to the inner store so far.
    pub fn commits(&self) -> u64 {
        self.state().commits
    }

    /// The ops and bytes the commits passed to the inner store wrote, so
    /// far: what a test compares between two steps to show that a step's
    /// writes do not grow with what the session already holds.
    pub fn written(&self) -> Written {
        self.state().written
    }

    /// Commits refused because the store had crashed.
    pub fn refused(&self) -> u64 {
        self.state().refused
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the store, e.g. to close it before reopening its file.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if a test did, the state
        // is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn crash(&self, state: &mut State) {
        if !state.crashed {
            state.crashed = true;
            self.crashed.send_replace(true);
        }
    }

    /// Decides whether a commit goes through.
    fn admit(&self) -> Admitted {
        let mut state = self.state();
        if !state.crashed && state.budget == Some(0) {
            self.crash(&mut state);
        }
        if state.crashed {
            state.refused += 1;
            return Admitted::Crashed;
        }
        if state.failing > 0 {
            state.failing -= 1;
            return Admitted::Failed { written: state.failing_written };
        }
        if let Some(budget) = state.budget.as_mut() {
            *budget -= 1;
        }
        state.commits += 1;
        Admitted::Through(state.delay)
    }
}

impl<S: Store> Store for FaultyStore<S> {
    fn commit(&self, batch: Batch) -> BoxFuture<'_, StoreResult<()>> {
        let admitted = self.admit();
        Box::pin(async move {
            let delay = match admitted {
                Admitted::Through(delay) => delay,
                Admitted::Crashed => return Err(StoreError::Closed),
                Admitted::Failed { written: false } => {
                    return Err(StoreError::io("cannot write a batch", "injected: the database went away"));
                }
                Admitted::Failed { written: true } => {
                    self.inner.commit(batch).await?;
                    return Err(StoreError::in_doubt(
                        "the connection failed while writing a batch",
                        "injected: the answer was lost",
                    ));
                }
            };
            if !delay.is_zero() {
                // A slow store is the fault injected.
                tokio::time::sleep(delay).await;
            }
            let written = Written {
                ops: batch.ops.len() as u64,
                bytes: batch.ops.iter().map(op_bytes).sum(),
                superseded: batch.superseded() as u64,
            };
            let earlier = {
                let mut state = self.state();
                state.written.ops += written.ops;
                state.written.bytes += written.bytes;
                state.written.superseded += written.superseded;
                if !state.reorder {
                    None
                } else if let Some(earlier) = state.held.take() {
                    Some(earlier)
                } else {
                    state.held = Some(batch);
                    return Ok(());
                }
            };
            self.inner.commit(batch).await?;
            match earlier {
                Some(earlier) => self.inner.commit(earlier).await,
                None => Ok(()),
            }
        })
    }

    fn session<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionRecord>>> {
        self.inner.session(key)
    }

    fn session_head<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<SessionHead>>> {
        self.inner.session_head(key)
    }

    fn sessions<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        self.inner.sessions(tenant)
    }

    fn session_count<'a>(&'a self, tenant: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        self.inner.session_count(tenant)
    }

    fn sessions_page<'a>(
        &'a self,
        tenant: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        self.inner.sessions_page(tenant, after, limit)
    }

    fn sessions_of_identity<'a>(
        &'a self,
        tenant: &'a str,
        identity: &'a str,
        after: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<SessionRecord>>> {
        self.inner.sessions_of_identity(tenant, identity, after, limit)
    }

    fn unfinished(&self) -> BoxFuture<'_, StoreResult<Vec<SessionKey>>> {
        self.inner.unfinished()
    }

    fn reply<'a>(&'a self, id: &'a str) -> BoxFuture<'a, StoreResult<Option<serde_json::Value>>> {
        self.inner.reply(id)
    }

    fn shared(&self) -> Option<&dyn crate::shared::Shared> {
        self.inner.shared()
    }

    fn load<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Option<LoadedSession>>> {
        self.inner.load(key)
    }

    fn messages<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, MessageRecord)>>> {
        self.inner.messages(key)
    }

    fn steps<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        self.inner.steps(key, from, limit)
    }

    fn steps_page<'a>(
        &'a self,
        key: &'a SessionKey,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, StepRecord)>>> {
        self.inner.steps_page(key, from, limit, max_bytes)
    }

    fn calls<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        self.inner.calls(key)
    }

    fn calls_named<'a>(
        &'a self,
        key: &'a SessionKey,
        ids: &'a [String],
    ) -> BoxFuture<'a, StoreResult<Vec<CallRecord>>> {
        self.inner.calls_named(key, ids)
    }

    fn agents<'a>(&'a self, tenant: Option<&'a str>) -> BoxFuture<'a, StoreResult<Vec<AgentRecord>>> {
        self.inner.agents(tenant)
    }

    fn agent<'a>(&'a self, tenant: &'a str, agent_id: &'a str) -> BoxFuture<'a, StoreResult<Option<AgentRecord>>> {
        self.inner.agent(tenant, agent_id)
    }

    fn decision_counts<'a>(
        &'a self,
        tenant: &'a str,
        agent_id: &'a str,
    ) -> BoxFuture<'a, StoreResult<std::collections::BTreeMap<String, u64>>> {
        self.inner.decision_counts(tenant, agent_id)
    }

    fn keys(&self) -> BoxFuture<'_, StoreResult<Vec<KeyRecord>>> {
        self.inner.keys()
    }

    fn tenants(&self) -> BoxFuture<'_, StoreResult<Vec<TenantRecord>>> {
        self.inner.tenants()
    }

    fn mcp_servers(&self) -> BoxFuture<'_, StoreResult<Vec<crate::McpServerRecord>>> {
        self.inner.mcp_servers()
    }

    fn events<'a>(
        &'a self,
        key: &'a SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<(u64, EventRecord)>>> {
        self.inner.events(key, after, limit)
    }

    fn turn<'a>(&'a self, key: &'a SessionKey, turn_id: &'a str) -> BoxFuture<'a, StoreResult<Option<TurnRecord>>> {
        self.inner.turn(key, turn_id)
    }

    fn inbox<'a>(&'a self, key: &'a SessionKey) -> BoxFuture<'a, StoreResult<Vec<(u64, InboxItem)>>> {
        self.inner.inbox(key)
    }
}

impl<S: Store> StoreAdmin for FaultyStore<S> {
    fn stats(&self) -> StoreResult<StoreStats> {
        self.inner.stats()
    }

    fn stored_bytes(&self) -> BoxFuture<'_, StoreResult<u64>> {
        self.inner.stored_bytes()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::{MemStore, Op};

    fn event_batch(seq: u64) -> Batch {
        let mut batch = Batch::new();
        batch.push(Op::PutEvent {
            session: SessionKey::new("t1", "s1"),
            seq,
            record: EventRecord { name: "message".to_owned(), data: json!({"seq": seq}) },
        });
        batch
    }

    async fn stored_events(store: &impl Store) -> Vec<u64> {
        let events = store.events(&SessionKey::new("t1", "s1"), None, 100).await.unwrap();
        events.into_iter().map(|(seq, _)| seq).collect()
    }

    #[tokio::test]
    async fn crash_after_lets_n_commits_through_and_nothing_after() {
        let store = FaultyStore::new(MemStore::new());
        store.crash_after(3);
        for seq in 0..3 {
            store.commit(event_batch(seq)).await.unwrap();
            assert!(!store.crashed());
        }
        for seq in 3..6 {
            assert!(matches!(store.commit(event_batch(seq)).await, Err(StoreError::Closed)));
        }
        assert!(store.crashed());
        store.wait_crashed().await;
        assert_eq!((store.commits(), store.refused()), (3, 3));
        // Reads still reach the inner store.
        assert_eq!(stored_events(&store).await, vec![0, 1, 2]);
        assert_eq!(stored_events(&store.into_inner()).await, vec![0, 1, 2]);
    }

    #[tokio::test]
    async fn concurrent_commits_cross_the_crash_in_one_order() {
        let store = Arc::new(FaultyStore::new(MemStore::new()));
        store.crash_after(10);
        let tasks: Vec<_> = (0..50)
            .map(|seq| {
                let store = Arc::clone(&store);
                tokio::spawn(async move { store.commit(event_batch(seq)).await.is_ok() })
            })
            .collect();
        let mut passed = 0;
        for task in tasks {
            passed += u64::from(task.await.unwrap());
        }
        assert_eq!(passed, 10);
        assert_eq!(stored_events(store.as_ref()).await.len(), 10);
        assert_eq!((store.commits(), store.refused()), (10, 40));
    }

    #[tokio::test]
    async fn wait_crashed_wakes_when_the_crash_happens() {
        let store = Arc::new(FaultyStore::new(MemStore::new()));
        let waiter = tokio::spawn({
            let store = Arc::clone(&store);
            async move { store.wait_crashed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        store.crash_after(0);
        assert!(!store.crashed(), "the crash comes with the next commit");
        assert!(store.commit(event_batch(0)).await.is_err());
        waiter.await.unwrap();
        assert!(stored_events(store.as_ref()).await.is_empty());
    }

    #[tokio::test]
    async fn failed_commits_write_nothing_or_everything_and_the_store_goes_on() {
        let store = FaultyStore::new(MemStore::new());
        store.fail_commits(1, false);
        let lost = store.commit(event_batch(0)).await.expect_err("the database went away");
        assert!(lost.is_transient() && !lost.may_have_written(), "{lost:?}");
        store.fail_commits(1, true);
        let doubt = store.commit(event_batch(1)).await.expect_err("the answer was lost");
        assert!(doubt.is_transient() && doubt.may_have_written(), "{doubt:?}");
        store.commit(event_batch(2)).await.expect("the store answers again");
        assert!(!store.crashed());
        assert_eq!(stored_events(&store).await, vec![1, 2], "the first was not written, the second was");
    }

    #[tokio::test]
    async fn a_commit_delay_holds_commits_back() {
        let store = FaultyStore::new(MemStore::new());
        store.set_commit_delay(Duration::from_millis(100));
        let started = tokio::time::Instant::now();
        store.commit(event_batch(0)).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(stored_events(&store).await, vec![0]);
        store.crash_now();
        assert!(store.commit(event_batch(1)).await.is_err());
        assert_eq!(stored_events(&store).await, vec![0]);
    }
}
