//! The instance pool's slots, shared fairly between tenants.
//!
//! Every decision runs in a pooled instance, and the pool is finite: a
//! decision waits for a slot rather than failing to allocate one. Handed
//! out first come, first served, the slots go to whoever asks most: one
//! tenant with hundreds of sessions of an agent that sleeps in `decide`
//! holds every slot, and everyone else's turns wait for its sleeps. So:
//!
//! - a decision asks for as many slots as its component's instance needs
//!   of the pool (a component of 60 core instances needs the room of
//!   several small ones; see `Weight`);
//! - no tenant ever holds more than its share of the slots; what it asks
//!   beyond that waits in the tenant's own queue, where it delays only that
//!   tenant;
//! - when slots free up they go to the waiting tenant that holds fewest,
//!   and within a tenant to its oldest waiter.
//!
//! A decision that waits for a slot therefore counts against its own
//! tenant: the others keep at least `capacity - share` slots to
//! themselves.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// Slots shared between tenants; cheap to share behind an `Arc`.
pub(crate) struct SlotPool {
    capacity: u32,
    /// The most one tenant may hold.
    share: u32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: u32,
    tenants: HashMap<Arc<str>, Tenant>,
}

#[derive(Default)]
struct Tenant {
    held: u32,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    weight: u32,
    granted: oneshot::Sender<()>,
}

/// Slots held by one decision; given back when dropped.
pub(crate) struct Permit {
    pool: Arc<SlotPool>,
    tenant: Arc<str>,
    weight: u32,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.pool.release(&self.tenant, self.weight);
    }
}

impl SlotPool {
    /// `capacity` slots, of which one tenant may hold `share` (at least 1,
    /// at most all).
    pub(crate) fn new(capacity: u32, share: u32) -> Arc<Self> {
        let capacity = capacity.max(1);
        Arc::new(Self {
            capacity,
            share: share.clamp(1, capacity),
            state: Mutex::new(State { free: capacity, tenants: HashMap::new() }),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `weight` slots for `tenant` (a weight above the tenant's
    /// share is cut to the share: such a component still runs, one
    /// decision at a time).
    pub(crate) async fn acquire(self: &Arc<Self>, tenant: &Arc<str>, weight: u32) -> Permit {
        let weight = weight.clamp(1, self.share);
        let granted = {
            let mut state = self.state();
            let free = state.free;
            let entry = state.tenants.entry(tenant.clone()).or_default();
            if entry.waiting.is_empty() && entry.held + weight <= self.share && free >= weight {
                entry.held += weight;
                state.free -= weight;
                return Permit { pool: self.clone(), tenant: tenant.clone(), weight };
            }
            let (tx, rx) = oneshot::channel();
            // Waiters whose decision was given up (timed out, cancelled)
            // are dropped here, so a tenant's queue holds only live ones.
            entry.waiting.retain(|w| !w.granted.is_closed());
            entry.waiting.push_back(Waiter { weight, granted: tx });
            rx
        };
        let mut wait = Wait { pool: self, tenant, weight, granted: Some(granted) };
        if let Some(granted) = wait.granted.as_mut() {
            // The sender is dropped unanswered only with the pool itself,
            // which outlives every acquire.
            let _ = granted.await;
        }
        wait.granted = None;
        Permit { pool: self.clone(), tenant: tenant.clone(), weight }
    }

    fn release(&self, tenant: &Arc<str>, weight: u32) {
        let mut state = self.state();
        state.free += weight;
        if let Some(entry) = state.tenants.get_mut(tenant) {
            entry.held -= weight;
        }
        self.grant(&mut state);
        // Tenants that hold nothing and wait for nothing cost nothing.
        if state.tenants.get(tenant).is_some_and(|t| t.held == 0 && t.waiting.is_empty()) {
            state.tenants.remove(tenant);
        }
    }

    /// Hands free slots to waiters: each time to the tenant holding fewest
    /// whose oldest waiter fits.
    fn grant(&self, state: &mut State) {
        loop {
            let free = state.free;
            let next = state
                .tenants
                .iter_mut()
                .filter_map(|(name, t)| {
                    while t.waiting.front().is_some_and(|w| w.granted.is_closed()) {
                        t.waiting.pop_front();
                    }
                    let head = t.waiting.front()?;
                    (t.held + head.weight <= self.share && head.weight <= free).then(|| (t.held, name.clone()))
                })
                .min_by_key(|(held, _)| *held);
            let Some((_, name)) = next else { return };
            let entry = state.tenants.get_mut(&name).expect("found above");
            let waiter = entry.waiting.pop_front().expect("found above");
            if waiter.granted.send(()).is_ok() {
                entry.held += waiter.weight;
                state.free -= waiter.weight;
            }
        }
    }

    /// Slots held by `tenant` now.
    #[cfg(test)]
    fn held(&self, tenant: &str) -> u32 {
        self.state().tenants.get(tenant).map_or(0, |t| t.held)
    }
}

/// A waiter in line; if it is dropped after its slots were granted but
/// before it took them, it gives them back.
struct Wait<'a> {
    pool: &'a Arc<SlotPool>,
    tenant: &'a Arc<str>,
    weight: u32,
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(mut granted) = self.granted.take() {
            granted.close();
            if granted.try_recv().is_ok() {
                self.pool.release(self.tenant, self.weight);
            }
        }
    }
}

impl std::fmt::Debug for SlotPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotPool").field("capacity", &self.capacity).field("share", &self.share).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[tokio::test]
    async fn a_tenant_is_held_to_its_share_while_another_gets_slots_at_once() {
        let pool = SlotPool::new(8, 4);
        let (a, b) = (name("a"), name("b"));
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(pool.acquire(&a, 1).await);
        }
        // A fifth for `a` waits, though slots are free…
        let waiting = tokio::spawn({
            let (pool, a) = (pool.clone(), a.clone());
            async move { pool.acquire(&a, 1).await }
        });
        // One thread: the waiter runs until it waits for a slot.
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // …and `b` gets one at once.
        let _b =
            tokio::time::timeout(Duration::from_secs(1), pool.acquire(&b, 1)).await.expect("b is not kept waiting");
        assert_eq!((pool.held("a"), pool.held("b")), (4, 1));
        held.pop();
        let fifth = tokio::time::timeout(Duration::from_secs(1), waiting).await.unwrap().unwrap();
        assert_eq!(pool.held("a"), 4);
        drop((fifth, held));
        assert_eq!(pool.held("a"), 0);
    }

    #[tokio::test]
    async fn freed_slots_go_to_the_waiting_tenant_holding_fewest() {
        let pool = SlotPool::new(4, 3);
        let (a, b) = (name("a"), name("b"));
        let mut a_held = vec![pool.acquire(&a, 1).await, pool.acquire(&a, 1).await, pool.acquire(&a, 1).await];
        let b_first = pool.acquire(&b, 1).await;
        let a_next = tokio::spawn({
            let (pool, a) = (pool.clone(), a.clone());
            async move { pool.acquire(&a, 1).await }
        });
        let b_next = tokio::spawn({
            let (pool, b) = (pool.clone(), b.clone());
            async move { pool.acquire(&b, 1).await }
        });
        // One thread: both waiters run until they wait for a slot.
        tokio::task::yield_now().await;
        // `a` lets one go: `b` (1 held) goes before `a` (2 held).
        a_held.pop();
        let b_second = tokio::time::timeout(Duration::from_secs(1), b_next).await.unwrap().unwrap();
        assert!(!a_next.is_finished());
        drop((b_first, b_second));
        let _a = tokio::time::timeout(Duration::from_secs(1), a_next).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn weights_count_and_a_cancelled_waiter_keeps_nothing() {
        let pool = SlotPool::new(4, 4);
        let a = name("a");
        let big = pool.acquire(&a, 3).await;
        let blocked = tokio::time::timeout(Duration::from_millis(20), pool.acquire(&a, 2)).await;
        assert!(blocked.is_err(), "3 + 2 slots do not fit in 4");
        drop(big);
        let two = pool.acquire(&a, 2).await;
        let two_more = pool.acquire(&a, 2).await;
        assert_eq!(pool.held("a"), 4);
        drop((two, two_more));
        assert_eq!(pool.held("a"), 0);
        assert_eq!(pool.state().free, 4);
        // More than the share is cut to the share.
        let all = pool.acquire(&a, 100).await;
        assert_eq!(pool.held("a"), 4);
        drop(all);
        assert!(pool.state().tenants.is_empty(), "idle tenants are forgotten");
    }
}
