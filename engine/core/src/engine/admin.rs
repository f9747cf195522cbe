//! The operator's side of the engine: tenants' limits and the records
//! kept beside sessions (tenants, keys, shared secrets), metrics, and the
//! store's statistics.
//!
//! The server keeps its records through here, never holding the store:
//! the engine alone decides what is written and in which batch.

use std::sync::Arc;

use crate::config::{DecisionBounds, SpawnBounds};
use crate::model::Money;
use crate::session::directory::Directory;
use crate::session::env::Env;
use crate::store::{Batch, KeyRecord, Op, StoreError, TenantRecord};

/// The operator's handle on the engine ([`Engine::admin`](crate::Engine::admin)).
/// Cheap to clone.
#[derive(Clone)]
pub struct Admin {
    pub(super) env: Arc<Env>,
    pub(super) directory: Arc<Directory>,
}

impl Admin {
    /// Sets the most `tenant`'s sessions may spend on engine-run LLM calls
    /// in all (`None`: no limit, whatever the default). Once spent,
    /// further calls fail with `budget_exceeded` before they are sent.
    pub fn set_tenant_budget(&self, tenant: &str, budget: Option<Money>) {
        self.env.tenants.set_budget(tenant, budget);
    }

    /// Forgets `tenant`'s own budget, session limit, spawn and decision
    /// bounds and bounds on its sessions' messages and reads: the defaults
    /// apply to it again.
    pub fn clear_tenant_limits(&self, tenant: &str) {
        self.env.tenants.clear(tenant);
        self.env.history.set_max_bytes(tenant, None);
        self.env.history.set_max_reads(tenant, None);
    }

    /// Sets (or removes) the budget of every tenant that has none of its
    /// own (see [`set_tenant_budget`](Self::set_tenant_budget)).
    pub fn set_default_tenant_budget(&self, budget: Option<Money>) {
        self.env.tenants.set_default_budget(budget);
    }

    /// Sets how many sessions `tenant` may have (`None`: no limit,
    /// whatever the default). An input that would create one more is refused
    /// ([`InputError::LimitExceeded`]), and so is an agent's spawn of a
    /// sub-agent session (its call fails, and the agent is told why).
    pub fn set_tenant_session_limit(&self, tenant: &str, max: Option<u64>) {
        self.env.tenants.set_session_limit(tenant, max);
    }

    /// Sets (or removes) the session limit of every tenant that has none of
    /// its own (see [`set_tenant_session_limit`](Self::set_tenant_session_limit)).
    pub fn set_default_session_limit(&self, max: Option<u64>) {
        self.env.tenants.set_default_session_limit(max);
    }

    /// Sets what `tenant`'s agents may spawn: children per turn, depth,
    /// sessions per tree. A spawn past them fails its call, and the agent
    /// is told which bound it met.
    pub fn set_tenant_spawn_bounds(&self, tenant: &str, bounds: SpawnBounds) {
        self.env.tenants.set_spawn_bounds(tenant, bounds);
    }

    /// Sets the spawn bounds of every tenant that has none of its own
    /// (see [`set_tenant_spawn_bounds`](Self::set_tenant_spawn_bounds));
    /// [`SpawnBounds::default`] until set.
    pub fn set_default_spawn_bounds(&self, bounds: SpawnBounds) {
        self.env.tenants.set_default_spawn_bounds(bounds);
    }

    /// The spawn bounds that apply to `tenant`.
    pub fn tenant_spawn_bounds(&self, tenant: &str) -> SpawnBounds {
        self.env.tenants.bounds(tenant)
    }

    /// Sets what one decision of `tenant`'s agents may start and what one
    /// of its turns may hold (see [`DecisionBounds`]).
    pub fn set_tenant_decision_bounds(&self, tenant: &str, bounds: DecisionBounds) {
        self.env.tenants.set_decision_bounds(tenant, bounds);
    }

    /// Sets the decision bounds of every tenant that has none of its own
    /// (see [`set_tenant_decision_bounds`](Self::set_tenant_decision_bounds));
    /// [`DecisionBounds::default`] until set.
    pub fn set_default_decision_bounds(&self, bounds: DecisionBounds) {
        self.env.tenants.set_default_decision_bounds(bounds);
    }

    /// The decision bounds that apply to `tenant`.
    pub fn tenant_decision_bounds(&self, tenant: &str) -> DecisionBounds {
        self.env.tenants.decision_bounds(tenant)
    }

    /// The budget that applies to `tenant`, if any.
    pub fn tenant_budget(&self, tenant: &str) -> Option<Money> {
        self.env.tenants.budget(tenant)
    }

    /// Sets the bytes of messages a session of `tenant` may store
    /// (`None`: the default, [`set_default_max_session_bytes`](Self::set_default_max_session_bytes)).
    /// A decision whose messages would take a session past it is refused
    /// and its turn fails, naming the bound; a client's input likewise is
    /// refused ([`InputError::LimitExceeded`]), with nothing of it stored.
    pub fn set_tenant_max_session_bytes(&self, tenant: &str, max: Option<u64>) {
        self.env.history.set_max_bytes(tenant, max);
    }

    /// Sets the bytes of messages a session may store for tenants without
    /// their own bound; 32 MiB until set.
    pub fn set_default_max_session_bytes(&self, max: u64) {
        self.env.history.set_default_max_bytes(max);
    }

    /// The bytes of messages a session of `tenant` may store.
    pub fn max_session_bytes(&self, tenant: &str) -> u64 {
        self.env.history.max_bytes(tenant)
    }

    /// Sets how many whole-session reads ([`snapshot`](Self::snapshot),
    /// [`shared_snapshot`](Self::shared_snapshot)) `tenant` may have
    /// running at once (`None`: the default); more wait their turn.
    pub fn set_tenant_max_session_reads(&self, tenant: &str, max: Option<usize>) {
        self.env.history.set_max_reads(tenant, max);
    }

    /// Sets the whole-session reads a tenant without its own bound may
    /// have running at once; 2 until set.
    pub fn set_default_max_session_reads(&self, max: usize) {
        self.env.history.set_default_max_reads(max);
    }

    /// The engine's metrics in Prometheus' text format, appended to `out`.
    pub fn encode_metrics(&self, out: &mut String) {
        self.env.metrics.encode(self.directory.active(), out);
    }

    /// What the store has done: counters, cheap to read.
    pub fn store_stats(&self) -> Result<crate::store::StoreStats, StoreError> {
        self.env.store.stats()
    }

    /// The bytes of data the store holds. May walk the whole store and
    /// hold commits up meanwhile: see [`Store::stored_bytes`].
    pub async fn stored_bytes(&self) -> Result<u64, StoreError> {
        self.env.store.stored_bytes().await
    }

    /// Every stored tenant: the operator's changes to limits, read once at
    /// start to lay them over the config file's.
    pub async fn tenant_records(&self) -> Result<Vec<TenantRecord>, StoreError> {
        self.env.store.tenants().await
    }

    /// Stores `record` in place of its tenant's: durably first, so that a
    /// limit the server applies is one a restart applies too.
    pub async fn put_tenant_record(&self, record: TenantRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::PutTenant(record));
        self.env.store.commit(batch).await
    }

    /// Deletes `tenant`'s record and its keys (by hash) in one batch: a
    /// crash never leaves keys of a tenant that is gone, nor a tenant
    /// deleted with its keys still accepted.
    pub async fn delete_tenant(&self, tenant: &str, key_hashes: &[String]) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        for hash in key_hashes {
            batch.push(Op::DeleteKey { tenant: tenant.to_owned(), hash: hash.clone() });
        }
        batch.push(Op::DeleteTenant { tenant: tenant.to_owned() });
        self.env.store.commit(batch).await
    }

    /// Stores a tenant key (only its hash): durably before it is accepted,
    /// so that a key handed out keeps working after a restart.
    pub async fn put_key_record(&self, record: KeyRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::PutKey(record));
        self.env.store.commit(batch).await
    }

    /// Deletes `tenant`'s key with hash `hash`: durably before it is
    /// refused, so that a revoked key stays revoked after a restart.
    pub async fn delete_key_record(&self, tenant: &str, hash: &str) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::DeleteKey { tenant: tenant.to_owned(), hash: hash.to_owned() });
        self.env.store.commit(batch).await
    }

    /// Every stored tenant key (hashes): what a node sharing the store
    /// reloads when another node changed them.
    pub async fn key_records(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.env.store.keys().await
    }

    /// A secret every node sharing the store agrees on, by name: made by
    /// the first node that asks and kept in the store (readable by anyone
    /// who can read the database, like everything else in it). `None` on a
    /// store one node owns, whose secrets may be its own.
    pub async fn shared_secret(&self, name: &str) -> Result<Option<[u8; 32]>, StoreError> {
        let Some(shared) = self.env.store.shared() else { return Ok(None) };
        let slot = format!("secret:{name}");
        if shared.blob(&slot).await?.is_none() {
            let mut secret = [0u8; 32];
            // Two nodes making it at once: the first stored wins (storing
            // a name again changes nothing), and both read that one below.
            getrandom::fill(&mut secret).map_err(|e| StoreError::io("making a secret", e.to_string()))?;
            shared.put_blob(&slot, &secret).await?;
        }
        let stored = shared.blob(&slot).await?.unwrap_or_default();
        let secret: [u8; 32] = stored.as_slice().try_into().map_err(|_| StoreError::Corrupt {
            table: "blobs",
            message: format!("the shared secret `{name}` is {} bytes, not 32", stored.len()),
        })?;
        Ok(Some(secret))
    }

    /// Whether the store answers a read: the health check's question. It
    /// reads the keys, a table small on every server.
    pub async fn check_store(&self) -> Result<(), StoreError> {
        self.env.store.keys().await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::Models;
    use crate::store::{InboxItem, MemStore, SessionKey, StoreAdmin as _};
    use crate::{Engine, EngineConfig, Store as _};

    fn key(tenant: &str, hash: &str) -> KeyRecord {
        KeyRecord { tenant: tenant.to_owned(), hash: hash.to_owned(), prefix: String::new(), name: None, created_ms: 1 }
    }

    fn tenant(name: &str) -> TenantRecord {
        TenantRecord { tenant: name.to_owned(), limits: Default::default(), created_ms: 1, updated_ms: 1 }
    }

    #[tokio::test]
    async fn deleting_a_tenant_takes_its_keys_in_the_same_batch() {
        let store = Arc::new(MemStore::new());
        let engine = Engine::open(store.clone(), Models::with_offline(), EngineConfig::default());
        engine.admin().put_tenant_record(tenant("acme")).await.unwrap();
        engine.admin().put_tenant_record(tenant("other")).await.unwrap();
        for record in [key("acme", "a1"), key("acme", "a2"), key("other", "o1")] {
            engine.admin().put_key_record(record).await.unwrap();
        }
        let before = store.stats().unwrap().batches;
        engine.admin().delete_tenant("acme", &["a1".to_owned(), "a2".to_owned()]).await.unwrap();
        assert_eq!(store.stats().unwrap().batches, before + 1, "one batch");
        let tenants: Vec<String> =
            engine.admin().tenant_records().await.unwrap().into_iter().map(|t| t.tenant).collect();
        assert_eq!(tenants, ["other"]);
        assert_eq!(store.keys().await.unwrap(), [key("other", "o1")]);
        engine.admin().delete_key_record("other", "o1").await.unwrap();
        assert!(store.keys().await.unwrap().is_empty());
        engine.admin().check_store().await.expect("the store answers");
    }

    #[tokio::test]
    async fn a_tenants_unfinished_sessions_are_its_own() {
        let store = Arc::new(MemStore::new());
        let engine = Engine::open(store.clone(), Models::with_offline(), EngineConfig::default());
        let mut batch = Batch::new();
        for (tenant, session) in [("acme", "s1"), ("other", "s2"), ("acme", "s3")] {
            let item = InboxItem::SubAgentFinished {
                call_id: "c".to_owned(),
                ok: true,
                result: None,
                error: None,
                spawn: None,
                from: None,
                spent: None,
            };
            batch.push(Op::PushInbox { session: SessionKey::new(tenant, session), item: Box::new(item) });
        }
        store.commit(batch).await.unwrap();
        assert_eq!(engine.reads().unfinished_sessions("acme").await.unwrap(), ["s1", "s3"]);
        assert_eq!(engine.reads().unfinished_sessions("nobody").await.unwrap(), Vec::<String>::new());
        assert!(!engine.reads().session_exists("other", "s1").await.unwrap(), "an inbox item is no session");
        assert!(engine.reads().session_record("acme", "s1").await.unwrap().is_none());
    }
}
