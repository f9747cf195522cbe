//! Each tenant's limits and what it has used of them: the budget for
//! engine-run LLM calls and what its sessions have spent, the most
//! sessions it may have and how many it has, the bounds on what its
//! agents may spawn (children per turn, depth, sessions per tree), and
//! on what one of their decisions may start.
//!
//! Spend and session counts are summed from the store on a tenant's first
//! use and kept current in memory as calls settle and sessions are
//! created, so checking a limit on every call or new session costs
//! nothing. The session loop checks the session limit while it applies a
//! decision, which does not wait on the store: [`Tenants::count_sessions`]
//! (and, before a spawn, [`Tenants::count_trees`]) makes sure the counts
//! are in memory before.
//!
//! A new session is [reserved](Tenants::reserve) in its tenant's count
//! (and, for a sub-agent's child, in its tree's) before it exists: the
//! check and the reservation are one step under one lock, so sessions
//! created by many actors at once cannot all pass a count that none of
//! them has raised yet. The [`Reservation`] rides in the change that
//! creates the session; the commit confirms it (the count grows), and a
//! change dropped uncommitted (a refused input, a failed commit) releases
//! it.
//!
//! When several nodes share the store, each node adds only what its own
//! sessions spend and create, and reserves only for its own; the sums are
//! then read from the store again once they are [`SHARED_STALE_AFTER`]
//! old, so a tenant's limits hold across nodes within that much: what the
//! other nodes created in that time may pass them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::config::{DecisionBounds, SpawnBounds};
use crate::model::Money;
use crate::store::{Store, StoreError};

/// Whether a tenant may have more sessions, and what its agents may
/// spawn.
pub(crate) trait SessionQuota {
    /// Reserves room in `tenant`'s counts for `new`, a session about to be
    /// created; or says why it may not have it (its session limit, the
    /// tree's `max_tree_sessions`). See [`Reservation`].
    fn reserve(&self, tenant: &str, new: NewSession<'_>) -> Result<Reservation, String>;

    /// The bounds on what `tenant`'s agents may spawn.
    fn spawn_bounds(&self, tenant: &str) -> SpawnBounds;

    /// The bounds on what one decision of `tenant`'s agents may start.
    fn decision_bounds(&self, tenant: &str) -> DecisionBounds;
}

/// How old a tenant's sums may grow, on a store several nodes share,
/// before they are read from the store again.
pub(crate) const SHARED_STALE_AFTER: Duration = Duration::from_secs(5);

/// Sessions read per page when a tenant's trees are counted: what the
/// count holds of the store at once.
const TREE_SCAN_PAGE: usize = 512;

/// A sum read from the store, and when.
type Summed<T> = Mutex<HashMap<String, (T, Instant)>>;

/// Every tenant's limits and use; see the [module docs](self).
pub(crate) struct Tenants {
    store: Arc<dyn Store>,
    /// What each tenant's engine-run LLM calls may cost in all.
    budgets: PerTenant<Money>,
    /// How many sessions each tenant may have.
    session_limits: PerTenant<u64>,
    /// What each tenant's agents may spawn.
    spawn_bounds: PerTenant<SpawnBounds>,
    /// What one decision of each tenant's agents may start.
    decision_bounds: PerTenant<DecisionBounds>,
    /// What each tenant's sessions have cost, once summed.
    spend: Summed<Money>,
    /// Each tenant's sessions and trees, once counted, and the sessions
    /// reserved and not yet committed.
    counts: Arc<Mutex<Counts>>,
    /// Held while a tenant's trees are counted, so that the actors of a
    /// tenant's first spawns wait for one count instead of each making
    /// its own.
    counting_trees: tokio::sync::Mutex<()>,
    /// How old a sum may grow before it is read again: never, unless
    /// other nodes share the store.
    stale_after: Option<Duration>,
}

/// What the tenants have of their session limits and tree bounds.
#[derive(Default)]
struct Counts {
    /// How many sessions each tenant has, once counted, and when.
    sessions: HashMap<String, (u64, Instant)>,
    /// Each tenant's trees with children, once counted: the children of
    /// each root (a tree is its root and these), and when it was counted.
    /// A root without children has no entry.
    trees: HashMap<String, (HashMap<String, u64>, Instant)>,
    /// Sessions reserved and not yet committed, by tenant.
    reserved: HashMap<String, u64>,
    /// Children reserved and not yet committed, by tenant and root.
    tree_reserved: HashMap<(String, String), u64>,
}

/// A session about to be created, for [`Tenants::reserve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NewSession<'a> {
    /// A session of its own (a client's first input): the root of a tree.
    Root,
    /// A sub-agent's child in the tree of root session `root`.
    Child {
        /// The tree's root session.
        root: &'a str,
    },
}

/// Room reserved for sessions not yet created: confirmed once the change
/// creating them is committed, released if it is dropped uncommitted.
/// See the [module docs](self).
#[derive(Default)]
pub(crate) struct Reservation {
    counts: Option<Arc<Mutex<Counts>>>,
    /// Each session reserved: its tenant and, for a child, its tree's root.
    sessions: Vec<(String, Option<String>)>,
}

impl Reservation {
    /// Whether it holds room for none.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Takes the sessions `other` reserved into this one.
    pub fn merge(&mut self, mut other: Reservation) {
        if other.sessions.is_empty() {
            return;
        }
        if self.counts.is_none() {
            self.counts = other.counts.take();
        }
        self.sessions.append(&mut other.sessions);
    }

    /// The sessions were created (their commit succeeded): they count,
    /// and their room is no longer reserved.
    pub fn confirm(mut self) {
        let Some(counts) = self.counts.take() else { return };
        let mut counts = lock(&counts);
        for (tenant, root) in std::mem::take(&mut self.sessions) {
            counts.unreserve(&tenant, root.as_deref());
            if let Some((count, _)) = counts.sessions.get_mut(&tenant) {
                *count += 1;
            }
            if let Some(root) = root
                && let Some((trees, _)) = counts.trees.get_mut(&tenant)
            {
                *trees.entry(root).or_default() += 1;
            }
        }
    }
}

impl Drop for Reservation {
    /// Releases what was not confirmed.
    fn drop(&mut self) {
        let Some(counts) = self.counts.take() else { return };
        let mut counts = lock(&counts);
        for (tenant, root) in self.sessions.drain(..) {
            counts.unreserve(&tenant, root.as_deref());
        }
    }
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation").field("sessions", &self.sessions).finish()
    }
}

impl Counts {
    fn unreserve(&mut self, tenant: &str, root: Option<&str>) {
        if let Some(n) = self.reserved.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.reserved.remove(tenant);
            }
        }
        if let Some(root) = root {
            let key = (tenant.to_owned(), root.to_owned());
            if let Some(n) = self.tree_reserved.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.tree_reserved.remove(&key);
                }
            }
        }
    }
}

impl Tenants {
    /// No limits yet but the default spawn bounds; use is read from
    /// `store` when first asked for.
    pub fn new(store: Arc<dyn Store>) -> Self {
        let stale_after = store.shared().map(|_| SHARED_STALE_AFTER);
        let spawn_bounds = PerTenant::default();
        spawn_bounds.set_default(Some(SpawnBounds::default()));
        let decision_bounds = PerTenant::default();
        decision_bounds.set_default(Some(DecisionBounds::default()));
        Self {
            store,
            budgets: PerTenant::default(),
            session_limits: PerTenant::default(),
            spawn_bounds,
            decision_bounds,
            spend: Mutex::default(),
            counts: Arc::default(),
            counting_trees: tokio::sync::Mutex::new(()),
            stale_after,
        }
    }

    /// Whether a sum read at `at` may still be trusted.
    fn trusted(&self, at: Instant) -> bool {
        self.stale_after.is_none_or(|limit| at.elapsed() < limit)
    }

    /// The tenant's sum in `map`, unless it is too old to trust.
    fn fresh<T: Copy>(&self, map: &Summed<T>, tenant: &str) -> Option<T> {
        let (value, at) = *lock(map).get(tenant)?;
        self.trusted(at).then_some(value)
    }

    /// Keeps `sum`, just read: the first kept wins while it is fresh, so
    /// two readers agree; a stale one is replaced.
    fn keep<T: Copy>(&self, map: &Summed<T>, tenant: &str, sum: T) -> T {
        let mut map = lock(map);
        let entry = map.entry(tenant.to_owned()).or_insert((sum, Instant::now()));
        if !self.trusted(entry.1) {
            *entry = (sum, Instant::now());
        }
        entry.0
    }

    /// Sets the tenant's own budget (`None`: none, whatever the default).
    pub fn set_budget(&self, tenant: &str, budget: Option<Money>) {
        self.budgets.set(tenant, budget);
    }

    /// Sets the budget of tenants without their own.
    pub fn set_default_budget(&self, budget: Option<Money>) {
        self.budgets.set_default(budget);
    }

    /// Sets the tenant's own session limit (`None`: none, whatever the
    /// default).
    pub fn set_session_limit(&self, tenant: &str, max: Option<u64>) {
        self.session_limits.set(tenant, max);
    }

    /// Sets the session limit of tenants without their own.
    pub fn set_default_session_limit(&self, max: Option<u64>) {
        self.session_limits.set_default(max);
    }

    /// Sets the tenant's own spawn bounds.
    pub fn set_spawn_bounds(&self, tenant: &str, bounds: SpawnBounds) {
        self.spawn_bounds.set(tenant, Some(bounds));
    }

    /// Sets the spawn bounds of tenants without their own.
    pub fn set_default_spawn_bounds(&self, bounds: SpawnBounds) {
        self.spawn_bounds.set_default(Some(bounds));
    }

    /// Sets the tenant's own decision bounds.
    pub fn set_decision_bounds(&self, tenant: &str, bounds: DecisionBounds) {
        self.decision_bounds.set(tenant, Some(bounds));
    }

    /// Sets the decision bounds of tenants without their own.
    pub fn set_default_decision_bounds(&self, bounds: DecisionBounds) {
        self.decision_bounds.set_default(Some(bounds));
    }

    /// Forgets the tenant's own budget, session limit, spawn and decision
    /// bounds: the defaults apply to it again.
    pub fn clear(&self, tenant: &str) {
        self.budgets.clear(tenant);
        self.session_limits.clear(tenant);
        self.spawn_bounds.clear(tenant);
        self.decision_bounds.clear(tenant);
    }

    /// The tenant's budget: its own, else the default.
    pub fn budget(&self, tenant: &str) -> Option<Money> {
        self.budgets.get(tenant)
    }

    /// The tenant's spawn bounds: its own, else the default.
    pub fn bounds(&self, tenant: &str) -> SpawnBounds {
        self.spawn_bounds.get(tenant).unwrap_or_default()
    }

    /// The tenant's decision bounds: its own, else the default.
    pub fn decision_bounds(&self, tenant: &str) -> DecisionBounds {
        self.decision_bounds.get(tenant).unwrap_or_default()
    }

    /// What the tenant's sessions have cost so far.
    pub async fn spent(&self, tenant: &str) -> Result<Money, StoreError> {
        if let Some(spent) = self.fresh(&self.spend, tenant) {
            return Ok(spent);
        }
        let sum: Money = self
            .store
            .sessions(Some(tenant))
            .await?
            .iter()
            .filter_map(|s| s.cost.as_deref().and_then(|c| c.parse::<Money>().ok()))
            .sum();
        // A call that settled while the store was read counted nothing (the
        // tenant had no sum yet) and is in the sum when its commit came
        // first; the first sum stored wins, so two readers agree.
        Ok(self.keep(&self.spend, tenant, sum))
    }

    /// How many sessions the tenant has.
    pub async fn sessions(&self, tenant: &str) -> Result<u64, StoreError> {
        if let Some((count, at)) = lock(&self.counts).sessions.get(tenant).copied()
            && self.trusted(at)
        {
            return Ok(count);
        }
        let count = self.store.session_count(tenant).await?;
        let mut counts = lock(&self.counts);
        let entry = counts.sessions.entry(tenant.to_owned()).or_insert((count, Instant::now()));
        if !self.trusted(entry.1) {
            *entry = (count, Instant::now());
        }
        Ok(entry.0)
    }

    /// Makes sure the tenant's sessions are counted in memory when it has
    /// a session limit, so that [`SessionQuota::reserve`] can answer. A
    /// store error leaves them uncounted: the check then refuses, naming
    /// it.
    pub async fn count_sessions(&self, tenant: &str) {
        if self.session_limits.get(tenant).is_some()
            && let Err(error) = self.sessions(tenant).await
        {
            tracing::warn!(tenant, %error, "the tenant's sessions could not be counted");
        }
    }

    /// Makes sure the tenant's sessions and trees are counted in memory,
    /// so that a spawn can be checked against `max_tree_sessions`: the
    /// first spawn of a tenant (and, on a shared store, one after
    /// [`SHARED_STALE_AFTER`]) pages through its sessions once. A store
    /// error leaves them uncounted: spawns are then refused, naming it.
    pub async fn count_trees(&self, tenant: &str) {
        self.count_sessions(tenant).await;
        let fresh = |this: &Self| lock(&this.counts).trees.get(tenant).is_some_and(|(_, at)| this.trusted(*at));
        if fresh(self) {
            return;
        }
        let _counting = self.counting_trees.lock().await;
        if fresh(self) {
            return;
        }
        match self.scan_trees(tenant).await {
            Ok(trees) => {
                lock(&self.counts).trees.insert(tenant.to_owned(), (trees, Instant::now()));
            }
            Err(error) => tracing::warn!(tenant, %error, "the tenant's session trees could not be counted"),
        }
    }

    /// The children of each root of the tenant's trees, from the store.
    async fn scan_trees(&self, tenant: &str) -> Result<HashMap<String, u64>, StoreError> {
        let mut trees: HashMap<String, u64> = HashMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.store.sessions_page(tenant, after.as_deref(), TREE_SCAN_PAGE).await?;
            for record in &page {
                if let Some(root) = record.ancestry.first() {
                    *trees.entry(root.clone()).or_default() += 1;
                }
            }
            match page.last() {
                Some(last) if page.len() == TREE_SCAN_PAGE => after = Some(last.key.session.clone()),
                _ => return Ok(trees),
            }
        }
    }

    /// Counts a settled (and committed) call's cost for its tenant. A
    /// negative amount (none is read from outside; see [`Money`]) is not
    /// counted: spend never goes down.
    pub fn add_spend(&self, tenant: &str, cost: Money) {
        if cost < Money::ZERO {
            return;
        }
        if let Some((spent, _)) = lock(&self.spend).get_mut(tenant) {
            *spent = *spent + cost;
        }
    }
}

impl SessionQuota for Tenants {
    /// Answers from the counts in memory, which [`Tenants::count_sessions`]
    /// and [`Tenants::count_trees`] make sure of before a session applies
    /// anything.
    fn reserve(&self, tenant: &str, new: NewSession<'_>) -> Result<Reservation, String> {
        let max = self.session_limits.get(tenant);
        let tree_max = match new {
            NewSession::Root => None,
            NewSession::Child { root } => Some((root, u64::from(self.bounds(tenant).max_tree_sessions))),
        };
        let mut counts = lock(&self.counts);
        if let Some(max) = max {
            let reserved = counts.reserved.get(tenant).copied().unwrap_or(0);
            match counts.sessions.get(tenant).map(|(count, _)| *count) {
                Some(count) if count.saturating_add(reserved).saturating_add(1) <= max => {}
                Some(_) => return Err(format!("the tenant has its maximum of {max} sessions (`max_sessions`)")),
                None => return Err("the tenant's sessions could not be counted".to_owned()),
            }
        }
        if let Some((root, tree_max)) = tree_max {
            let Some((trees, _)) = counts.trees.get(tenant) else {
                return Err("the tenant's session trees could not be counted".to_owned());
            };
            // The root and its children, those reserved included.
            let children = trees.get(root).copied().unwrap_or(0);
            let reserved = counts.tree_reserved.get(&(tenant.to_owned(), root.to_owned())).copied().unwrap_or(0);
            if children.saturating_add(reserved).saturating_add(2) > tree_max {
                return Err(format!(
                    "the tree of session `{root}` has its maximum of {tree_max} sessions (`max_tree_sessions`)"
                ));
            }
            *counts.tree_reserved.entry((tenant.to_owned(), root.to_owned())).or_default() += 1;
        }
        *counts.reserved.entry(tenant.to_owned()).or_default() += 1;
        let root = match new {
            NewSession::Root => None,
            NewSession::Child { root } => Some(root.to_owned()),
        };
        Ok(Reservation { counts: Some(self.counts.clone()), sessions: vec![(tenant.to_owned(), root)] })
    }

    fn spawn_bounds(&self, tenant: &str) -> SpawnBounds {
        self.bounds(tenant)
    }

    fn decision_bounds(&self, tenant: &str) -> DecisionBounds {
        Tenants::decision_bounds(self, tenant)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A setting per tenant, with a default for tenants without their own.
/// A tenant's own setting may be "none" (`None` in `own`): a tenant can be
/// exempt from a limit every other tenant has.
struct PerTenant<T> {
    own: RwLock<HashMap<String, Option<T>>>,
    default: RwLock<Option<T>>,
}

impl<T> Default for PerTenant<T> {
    fn default() -> Self {
        Self { own: RwLock::default(), default: RwLock::new(None) }
    }
}

impl<T: Copy> PerTenant<T> {
    /// The tenant's own value, else the default.
    fn get(&self, tenant: &str) -> Option<T> {
        match self.own.read().unwrap_or_else(PoisonError::into_inner).get(tenant) {
            Some(own) => *own,
            None => *self.default.read().unwrap_or_else(PoisonError::into_inner),
        }
    }

    /// Sets the tenant's own value; `None`: none, whatever the default.
    fn set(&self, tenant: &str, value: Option<T>) {
        self.own.write().unwrap_or_else(PoisonError::into_inner).insert(tenant.to_owned(), value);
    }

    /// Forgets the tenant's own value: the default applies again.
    fn clear(&self, tenant: &str) {
        self.own.write().unwrap_or_else(PoisonError::into_inner).remove(tenant);
    }

    fn set_default(&self, value: Option<T>) {
        *self.default.write().unwrap_or_else(PoisonError::into_inner) = value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::conformance::sample;
    use crate::store::{Batch, MemStore, Op, SessionKey, SessionStatus};

    fn money(text: &str) -> Money {
        text.parse().expect("an amount")
    }

    /// A store holding `sessions` sessions of `acme`, each having cost `cost`.
    async fn store_with(sessions: usize, cost: &str) -> Arc<dyn Store> {
        let store = MemStore::new();
        let mut batch = Batch::new();
        for i in 0..sessions {
            let mut record = sample::session(&SessionKey::new("acme", format!("s{i}")), SessionStatus::Idle);
            record.cost = Some(cost.to_owned());
            batch.push(Op::PutSession(Box::new(record)));
        }
        store.commit(batch).await.expect("a commit to memory");
        Arc::new(store)
    }

    #[test]
    fn a_tenants_own_setting_wins_over_the_default_even_when_it_is_none() {
        let tenants = Tenants::new(Arc::new(MemStore::new()));
        tenants.set_default_budget(Some(money("5")));
        tenants.set_budget("exempt", None);
        tenants.set_budget("rich", Some(money("50")));
        assert_eq!(tenants.budget("anyone"), Some(money("5")));
        assert_eq!(tenants.budget("exempt"), None);
        assert_eq!(tenants.budget("rich"), Some(money("50")));
        tenants.clear("rich");
        assert_eq!(tenants.budget("rich"), Some(money("5")), "cleared: the default again");
    }

    #[tokio::test]
    async fn spend_is_summed_from_the_store_once_then_kept_in_memory() {
        let store = store_with(3, "0.25").await;
        let tenants = Tenants::new(store.clone());
        tenants.add_spend("acme", money("100")); // Before the first sum: not counted twice.
        assert_eq!(tenants.spent("acme").await.unwrap(), money("0.75"));
        tenants.add_spend("acme", money("0.5"));
        assert_eq!(tenants.spent("acme").await.unwrap(), money("1.25"));
        assert_eq!(tenants.spent("other").await.unwrap(), money("0"));
    }

    #[tokio::test]
    async fn the_session_limit_counts_what_is_stored_and_what_is_created() {
        let tenants = Tenants::new(store_with(2, "0").await);
        assert!(tenants.reserve("acme", NewSession::Root).is_ok(), "no limit, nothing to count");
        tenants.set_session_limit("acme", Some(3));
        let refused = tenants.reserve("acme", NewSession::Root).expect_err("not counted yet: refused");
        assert!(refused.contains("could not be counted"), "{refused}");

        tenants.count_sessions("acme").await;
        let one = tenants.reserve("acme", NewSession::Root).expect("2 + 1 <= 3");
        let refused = tenants.reserve("acme", NewSession::Root).expect_err("2 + 1 reserved + 1 > 3");
        assert!(refused.contains("maximum of 3 sessions (`max_sessions`)"), "{refused}");
        one.confirm();
        assert_eq!(tenants.sessions("acme").await.unwrap(), 3, "confirmed: counted");
        assert!(tenants.reserve("acme", NewSession::Root).is_err(), "3 + 1 > 3");
    }

    #[tokio::test]
    async fn a_reservation_dropped_uncommitted_is_released() {
        let tenants = Tenants::new(store_with(0, "0").await);
        tenants.set_session_limit("acme", Some(1));
        tenants.count_sessions("acme").await;
        let mut change = tenants.reserve("acme", NewSession::Root).expect("0 + 1 <= 1");
        assert!(tenants.reserve("acme", NewSession::Root).is_err(), "the one room is reserved");
        change.merge(Reservation::default());
        assert!(!change.is_empty());
        drop(change); // A refused input, a failed commit.
        assert_eq!(tenants.sessions("acme").await.unwrap(), 0, "nothing was created");
        tenants.reserve("acme", NewSession::Root).expect("released: room again").confirm();
        assert_eq!(tenants.sessions("acme").await.unwrap(), 1);
    }

    #[tokio::test]
    async fn concurrent_reservations_never_pass_the_limit_together() {
        // Many actors reserving at once, before any of them commits: the
        // count in memory has not grown, but the reservations have.
        let tenants = Arc::new(Tenants::new(store_with(10, "0").await));
        tenants.set_session_limit("acme", Some(50));
        tenants.count_sessions("acme").await;
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let tenants = tenants.clone();
                std::thread::spawn(move || {
                    (0..20).filter_map(|_| tenants.reserve("acme", NewSession::Root).ok()).collect::<Vec<_>>()
                })
            })
            .collect();
        let held: Vec<Reservation> = tasks.into_iter().flat_map(|t| t.join().unwrap()).collect();
        assert_eq!(held.len(), 40, "10 stored + 40 reserved = 50");
        for reservation in held {
            reservation.confirm();
        }
        assert_eq!(tenants.sessions("acme").await.unwrap(), 50);
    }

    #[tokio::test]
    async fn a_tree_holds_at_most_max_tree_sessions_counted_from_the_store_and_reserved() {
        let store = MemStore::new();
        let mut batch = Batch::new();
        // A tree `r` of the root and 2 children; a lone root `q`.
        for (id, ancestry) in [("r", vec![]), ("r.a", vec!["r"]), ("r.a.b", vec!["r", "r.a"]), ("q", vec![])] {
            let mut record = sample::session(&SessionKey::new("acme", id), SessionStatus::Idle);
            record.ancestry = ancestry.into_iter().map(str::to_owned).collect();
            batch.push(Op::PutSession(Box::new(record)));
        }
        store.commit(batch).await.unwrap();
        let tenants = Tenants::new(Arc::new(store));
        tenants.set_spawn_bounds("acme", SpawnBounds { max_tree_sessions: 4, ..SpawnBounds::default() });
        let refused = tenants.reserve("acme", NewSession::Child { root: "r" }).expect_err("not counted yet");
        assert!(refused.contains("trees could not be counted"), "{refused}");

        tenants.count_trees("acme").await;
        let fourth = tenants.reserve("acme", NewSession::Child { root: "r" }).expect("3 + 1 <= 4");
        let refused = tenants.reserve("acme", NewSession::Child { root: "r" }).expect_err("3 + 1 reserved + 1 > 4");
        assert!(
            refused.contains("tree of session `r` has its maximum of 4 sessions (`max_tree_sessions`)"),
            "{refused}"
        );
        drop(fourth);
        tenants.reserve("acme", NewSession::Child { root: "r" }).expect("released").confirm();
        assert!(tenants.reserve("acme", NewSession::Child { root: "r" }).is_err(), "confirmed: 4 of 4");
        // Another tree has room of its own.
        for _ in 0..3 {
            tenants.reserve("acme", NewSession::Child { root: "q" }).expect("a tree of its own").confirm();
        }
        assert!(tenants.reserve("acme", NewSession::Child { root: "q" }).is_err());
        assert!(tenants.reserve("acme", NewSession::Root).is_ok(), "a new root is a tree of one");
    }

    #[test]
    fn spawn_bounds_are_per_tenant_over_a_default() {
        let tenants = Tenants::new(Arc::new(MemStore::new()));
        assert_eq!(tenants.bounds("acme"), SpawnBounds::default());
        let small = SpawnBounds { max_spawns_per_turn: 1, max_sub_agent_depth: 1, max_tree_sessions: 2 };
        tenants.set_spawn_bounds("acme", small);
        assert_eq!(tenants.bounds("acme"), small);
        tenants.set_default_spawn_bounds(SpawnBounds { max_spawns_per_turn: 3, ..small });
        assert_eq!(tenants.bounds("beta").max_spawns_per_turn, 3);
        tenants.clear("acme");
        assert_eq!(tenants.bounds("acme").max_spawns_per_turn, 3, "cleared: the default again");
    }

    #[tokio::test]
    async fn spend_never_goes_down() {
        let tenants = Tenants::new(store_with(1, "-1500").await);
        assert_eq!(tenants.spent("acme").await.unwrap(), money("0"), "a negative stored cost counts nothing");
        tenants.add_spend("acme", Money::from_atto_dollars(-5));
        assert_eq!(tenants.spent("acme").await.unwrap(), money("0"));
    }
}
