//! The data directory: the redb store (`subs.redb`) and the uploaded
//! components (`components/`), and the errors people meet opening them.

use std::path::Path;

use anyhow::anyhow;
use subs_engine::store::StoreError;
use subs_store_redb::RedbStore;

use crate::error::{CliError, CliResult};

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
