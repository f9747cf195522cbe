//! Each tenant's limits and what it has used of them: the budget for
//! engine-run LLM calls and what its sessions have spent, the most
//! sessions it may have and how many it has.
//!
//! Spend and session counts are summed from the store on a tenant's first
//! use and kept current in memory as calls settle and sessions are
//! created, so checking a limit on every call or new session costs
//! nothing. The session loop checks the session limit while it applies a
//! decision, which does not wait on the store: [`Tenants::count_sessions`]
//! makes sure the count is in memory before.
//!
//! When several nodes share the store, each node adds only what its own
//! sessions spend and create; the sums are then read from the store again
//! once they are [`SHARED_STALE_AFTER`] old, so a tenant's limits hold
//! across nodes within that much.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use crate::model::Money;
use crate::session::apply::SessionQuota;
use crate::store::{Store, StoreError};

/// How old a tenant's sums may grow, on a store several nodes share,
/// before they are read from the store again.
pub(crate) const SHARED_STALE_AFTER: Duration = Duration::from_secs(5);

/// A sum read from the store, and when.
type Summed<T> = Mutex<HashMap<String, (T, Instant)>>;

/// Every tenant's limits and use; see the [module docs](self).
pub(crate) struct Tenants {
    store: Arc<dyn Store>,
    /// What each tenant's engine-run LLM calls may cost in all.
    budgets: PerTenant<Money>,
    /// How many sessions each tenant may have.
    session_limits: PerTenant<u64>,
    /// What each tenant's sessions have cost, once summed.
    spend: Summed<Money>,
    /// How many sessions each tenant has, once counted.
    session_counts: Summed<u64>,
    /// How old a sum may grow before it is read again: never, unless
    /// other nodes share the store.
    stale_after: Option<Duration>,
}

impl Tenants {
    /// No limits yet; use is read from `store` when first asked for.
    pub fn new(store: Arc<dyn Store>) -> Self {
        let stale_after = store.shared().map(|_| SHARED_STALE_AFTER);
        Self {
            store,
            budgets: PerTenant::default(),
            session_limits: PerTenant::default(),
            spend: Mutex::default(),
            session_counts: Mutex::default(),
            stale_after,
        }
    }

    /// The tenant's sum in `map`, unless it is too old to trust.
    fn fresh<T: Copy>(&self, map: &Summed<T>, tenant: &str) -> Option<T> {
        let (value, at) = *lock(map).get(tenant)?;
        self.stale_after.is_none_or(|limit| at.elapsed() < limit).then_some(value)
    }

    /// Keeps `sum`, just read: the first kept wins while it is fresh, so
    /// two readers agree; a stale one is replaced.
    fn keep<T: Copy>(&self, map: &Summed<T>, tenant: &str, sum: T) -> T {
        let mut map = lock(map);
        let entry = map.entry(tenant.to_owned()).or_insert((sum, Instant::now()));
        if self.stale_after.is_some_and(|limit| entry.1.elapsed() >= limit) {
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

    /// Forgets the tenant's own budget and session limit: the defaults
    /// apply to it again.
    pub fn clear(&self, tenant: &str) {
        self.budgets.clear(tenant);
        self.session_limits.clear(tenant);
    }

    /// The tenant's budget: its own, else the default.
    pub fn budget(&self, tenant: &str) -> Option<Money> {
        self.budgets.get(tenant)
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
        if let Some(count) = self.fresh(&self.session_counts, tenant) {
            return Ok(count);
        }
        let count = self.store.session_count(tenant).await?;
        Ok(self.keep(&self.session_counts, tenant, count))
    }

    /// Makes sure the tenant's sessions are counted in memory when it has
    /// a session limit, so that [`SessionQuota::refuse`] can answer. A
    /// store error leaves them uncounted: the check then refuses, naming
    /// it.
    pub async fn count_sessions(&self, tenant: &str) {
        if self.session_limits.get(tenant).is_some()
            && let Err(error) = self.sessions(tenant).await
        {
            tracing::warn!(tenant, %error, "the tenant's sessions could not be counted");
        }
    }

    /// Counts sessions just created (and committed) for their tenant.
    pub fn add_sessions(&self, tenant: &str, created: u64) {
        if let Some((count, _)) = lock(&self.session_counts).get_mut(tenant) {
            *count += created;
        }
    }

    /// Counts a settled (and committed) call's cost for its tenant.
    pub fn add_spend(&self, tenant: &str, cost: Money) {
        if let Some((spent, _)) = lock(&self.spend).get_mut(tenant) {
            *spent = *spent + cost;
        }
    }
}

impl SessionQuota for Tenants {
    /// Answers from the count in memory, which [`Tenants::count_sessions`]
    /// makes sure of before a session applies anything.
    fn refuse(&self, tenant: &str, creating: u64) -> Option<String> {
        let max = self.session_limits.get(tenant)?;
        match lock(&self.session_counts).get(tenant).map(|(count, _)| *count) {
            Some(count) if count.saturating_add(creating) <= max => None,
            Some(_) => Some(format!("the tenant has its maximum of {max} sessions")),
            None => Some("the tenant's sessions could not be counted".to_owned()),
        }
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
            batch.push(Op::PutSession(record));
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
        assert_eq!(tenants.refuse("acme", 1), None, "no limit, nothing to count");
        tenants.set_session_limit("acme", Some(3));
        let refused = tenants.refuse("acme", 1).expect("not counted yet: refused");
        assert!(refused.contains("could not be counted"), "{refused}");

        tenants.count_sessions("acme").await;
        assert_eq!(tenants.refuse("acme", 1), None, "2 + 1 <= 3");
        let refused = tenants.refuse("acme", 2).expect("2 + 2 > 3");
        assert!(refused.contains("maximum of 3 sessions"), "{refused}");
        tenants.add_sessions("acme", 1);
        assert!(tenants.refuse("acme", 1).is_some(), "3 + 1 > 3");
        assert_eq!(tenants.sessions("acme").await.unwrap(), 3);
    }
}
