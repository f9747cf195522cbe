//! The data directory: the redb store (`subs.redb`) and the uploaded
//! components (`components/`), and the errors people meet opening them;
//! and the store `subs serve` runs on, redb there or PostgreSQL.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use subs_engine::store::{Store, StoreError};
use subs_store_postgres::PgStore;
use subs_store_redb::RedbStore;

use crate::error::{CliError, CliResult};
use crate::settings::{STORE_FILE, StoreChoice};

/// Creates the data directory (and `components/` in it) and checks that
/// files can be written there, so an unwritable directory is reported as
/// such rather than as a store error.
pub fn prepare(dir: &Path) -> CliResult {
    let unwritable =
        |e: std::io::Error| CliError::unavailable(anyhow!("the data directory {} is not writable: {e}", dir.display()));
    std::fs::create_dir_all(dir.join("components")).map_err(unwritable)?;
    tempfile::NamedTempFile::new_in(dir).map_err(unwritable)?;
    Ok(())
}

/// Opens the store at `path`; `locked_hint` tells the user what to do when
/// another process holds it.
pub fn open_store(path: &Path, locked_hint: &str) -> CliResult<RedbStore> {
    // Opening may repair the file after a crash; it is done once, at
    // startup, before anything else runs.
    RedbStore::open(path).map_err(|e| match e {
        StoreError::Locked { .. } => {
            CliError::unavailable(anyhow!("the store {} is locked by another process: {locked_hint}", path.display()))
        }
        other => CliError::unavailable(anyhow!("cannot open the store {}: {other}", path.display())),
    })
}

/// The store a server runs on, whichever backend it is: the engine gets it
/// as `Arc<dyn Store>`, and it is closed when the server stops.
#[derive(Debug, Clone)]
pub enum ServedStore {
    /// redb in the data directory.
    Redb(Arc<RedbStore>),
    /// A PostgreSQL database, maybe shared with other nodes.
    Postgres(Arc<PgStore>),
}

impl ServedStore {
    /// Opens the store `choice` names: redb in `dir` (`locked_hint` says
    /// what to do when another process holds it), or PostgreSQL, whose
    /// errors name its URL without the password.
    pub async fn open(choice: &StoreChoice, dir: &Path, locked_hint: &str) -> CliResult<Self> {
        match choice {
            StoreChoice::Redb => Ok(Self::Redb(Arc::new(open_store(&dir.join(STORE_FILE), locked_hint)?))),
            StoreChoice::Postgres { url, options } => {
                let store = PgStore::open(url, options.clone())
                    .await
                    .map_err(|e| CliError::unavailable(anyhow!("the PostgreSQL store: {e}")))?;
                Ok(Self::Postgres(Arc::new(store)))
            }
        }
    }

    /// The store, for the engine.
    pub fn store(&self) -> Arc<dyn Store> {
        match self {
            Self::Redb(store) => store.clone(),
            Self::Postgres(store) => store.clone(),
        }
    }

    /// Closes it: what was committed is durable, and the file (redb) or
    /// this node's leases (PostgreSQL) are free for others.
    pub async fn close(&self) -> Result<(), StoreError> {
        match self {
            Self::Redb(store) => store.close().await,
            Self::Postgres(store) => store.close().await,
        }
    }
}
