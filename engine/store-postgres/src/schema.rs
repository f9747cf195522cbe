//! The schema: versioned migrations embedded in the binary
//! (`migrations/`), applied when a store opens.

use std::collections::BTreeMap;

use sqlx::PgPool;
use sqlx::Row as _;
use sqlx::migrate::Migrator;
use subs_store::StoreError;

/// The migrations this binary knows, from `migrations/`.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The newest schema version this binary knows.
pub fn schema_version() -> i64 {
    MIGRATOR.iter().map(|migration| migration.version).max().unwrap_or(0)
}

/// Brings the database's schema to this binary's version. A database
/// holding a migration this binary does not know (a newer subs migrated
/// it) is refused, naming both versions: this binary would not know what
/// the newer schema means.
///
/// Nodes starting at once do not race: sqlx takes an advisory lock
/// while it migrates, and each migration is one transaction.
pub(crate) async fn migrate(pool: &PgPool, url: &str) -> Result<(), StoreError> {
    let failed = |err: sqlx::Error| StoreError::io(format!("cannot read the schema version of {url}"), err);
    let exists: bool = sqlx::query("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(failed)?;
    if exists {
        let rows = sqlx::query("SELECT version, description FROM _sqlx_migrations ORDER BY version")
            .fetch_all(pool)
            .await
            .map_err(failed)?;
        let mut applied = BTreeMap::new();
        for row in rows {
            let version: i64 = row.try_get(0).map_err(failed)?;
            let description: String = row.try_get(1).map_err(failed)?;
            applied.insert(version, description);
        }
        let unknown = applied.iter().rev().find(|(version, _)| MIGRATOR.iter().all(|known| known.version != **version));
        if let Some((version, description)) = unknown {
            let newest = applied.keys().next_back().copied().unwrap_or(*version);
            return Err(StoreError::io(
                format!("cannot open the store in {url}"),
                format!(
                    "its schema is at version {newest} (it holds migration {version}, \"{description}\", which this \
                     subs does not know), newer than this subs's schema version {}: run a newer subs on it",
                    schema_version()
                ),
            ));
        }
    }
    MIGRATOR.run(pool).await.map_err(|err| {
        StoreError::io(format!("cannot migrate the schema of {url} to version {}", schema_version()), err)
    })
}
