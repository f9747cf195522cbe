//! The records the HTTP server reads and keeps beside the sessions: a
//! session's record, tenants, keys, and whether the store answers.
//!
//! They are methods of [`Engine`] so that the server never holds the
//! store: everything it keeps goes through the engine, which alone decides
//! what is written and in which batch.

use crate::Engine;
use crate::store::{Batch, KeyRecord, Op, SessionKey, SessionRecord, StoreError, TenantRecord};

impl Engine {
    /// The stored record of `tenant`'s session `session`: what the API
    /// answers about it (budget, cost, where its events are) without
    /// loading it. `None` when the tenant has no such session.
    pub async fn session_record(&self, tenant: &str, session: &str) -> Result<Option<SessionRecord>, StoreError> {
        self.store().session(&SessionKey::new(tenant, session)).await
    }

    /// Whether `tenant` has a session `session`: routes on a session that
    /// does not exist answer 404 rather than creating or waiting on it.
    pub async fn session_exists(&self, tenant: &str, session: &str) -> Result<bool, StoreError> {
        Ok(self.session_record(tenant, session).await?.is_some())
    }

    /// The ids of `tenant`'s sessions with work left (not idle, or with
    /// items in their inbox): those whose turns deleting the tenant must
    /// cancel.
    pub async fn unfinished_sessions(&self, tenant: &str) -> Result<Vec<String>, StoreError> {
        let unfinished = self.store().unfinished().await?;
        Ok(unfinished.into_iter().filter(|key| key.tenant == tenant).map(|key| key.session).collect())
    }

    /// Every stored tenant: the operator's changes to limits, read once at
    /// start to lay them over the config file's.
    pub async fn tenant_records(&self) -> Result<Vec<TenantRecord>, StoreError> {
        self.store().tenants().await
    }

    /// Stores `record` in place of its tenant's: durably first, so that a
    /// limit the server applies is one a restart applies too.
    pub async fn put_tenant_record(&self, record: TenantRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::PutTenant(record));
        self.store().commit(batch).await
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
        self.store().commit(batch).await
    }

    /// Stores a tenant key (only its hash): durably before it is accepted,
    /// so that a key handed out keeps working after a restart.
    pub async fn put_key_record(&self, record: KeyRecord) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::PutKey(record));
        self.store().commit(batch).await
    }

    /// Deletes `tenant`'s key with hash `hash`: durably before it is
    /// refused, so that a revoked key stays revoked after a restart.
    pub async fn delete_key_record(&self, tenant: &str, hash: &str) -> Result<(), StoreError> {
        let mut batch = Batch::new();
        batch.push(Op::DeleteKey { tenant: tenant.to_owned(), hash: hash.to_owned() });
        self.store().commit(batch).await
    }

    /// Every stored tenant key (hashes): what a node sharing the store
    /// reloads when another node changed them.
    pub async fn key_records(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.store().keys().await
    }

    /// A secret every node sharing the store agrees on, by name: made by
    /// the first node that asks and kept in the store (readable by anyone
    /// who can read the database, like everything else in it). `None` on a
    /// store one node owns, whose secrets may be its own.
    pub async fn shared_secret(&self, name: &str) -> Result<Option<[u8; 32]>, StoreError> {
        let Some(shared) = self.store().shared() else { return Ok(None) };
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
        self.store().keys().await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::Models;
    use crate::store::{InboxItem, MemStore, StoreAdmin as _};
    use crate::{EngineConfig, Store as _};

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
        engine.put_tenant_record(tenant("acme")).await.unwrap();
        engine.put_tenant_record(tenant("other")).await.unwrap();
        for record in [key("acme", "a1"), key("acme", "a2"), key("other", "o1")] {
            engine.put_key_record(record).await.unwrap();
        }
        let before = store.stats().unwrap().batches;
        engine.delete_tenant("acme", &["a1".to_owned(), "a2".to_owned()]).await.unwrap();
        assert_eq!(store.stats().unwrap().batches, before + 1, "one batch");
        let tenants: Vec<String> = engine.tenant_records().await.unwrap().into_iter().map(|t| t.tenant).collect();
        assert_eq!(tenants, ["other"]);
        assert_eq!(store.keys().await.unwrap(), [key("other", "o1")]);
        engine.delete_key_record("other", "o1").await.unwrap();
        assert!(store.keys().await.unwrap().is_empty());
        engine.check_store().await.expect("the store answers");
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
        assert_eq!(engine.unfinished_sessions("acme").await.unwrap(), ["s1", "s3"]);
        assert_eq!(engine.unfinished_sessions("nobody").await.unwrap(), Vec::<String>::new());
        assert!(!engine.session_exists("other", "s1").await.unwrap(), "an inbox item is no session");
        assert!(engine.session_record("acme", "s1").await.unwrap().is_none());
    }
}
