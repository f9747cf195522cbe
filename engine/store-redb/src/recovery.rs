//! Recovery at open: the journal's groups the file lacks are applied.

#[allow(unused_imports)]
use super::*;

/// Opens the journal of the store and applies, in one durable
/// transaction, the records the file does not hold yet (commits that were
/// acknowledged after the last checkpoint before a crash).
pub(crate) fn recover(db: &Database, path: PathBuf) -> Result<journal::Journal, StoreError> {
    let (store, applied) = journal_position(db)?;
    let (mut journal, records) = journal::Journal::open(path, store, applied)?;
    tracing::debug!(path = %journal.path().display(), mode = ?journal.mode(), "the store's journal is open");
    let Some(&(last, _)) = records.last() else { return Ok(journal) };
    let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
    write_all(&txn, records.iter().map(|(_, writes)| writes.as_slice()), &mut NextLsns::default()).map_err(|err| {
        StoreError::Corrupt {
            table: "journal",
            message: format!(
                "records {} to {last} of {} cannot be applied: {err}",
                applied + 1,
                journal.path().display()
            ),
        }
    })?;
    set_journal_seq(&txn, last)?;
    txn.commit().map_err(|err| redb_error(name::DATABASE, err))?;
    journal.checkpointed();
    tracing::info!(records = records.len(), last, "applied the store's journal after an unclean shutdown");
    Ok(journal)
}
