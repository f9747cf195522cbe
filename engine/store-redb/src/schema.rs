//! The file's layout: table names and definitions, the format versions,
//! preparing a new or older file (migration), and mapping redb's errors.

#[allow(unused_imports)]
use super::*;

/// Table names, also used in [`StoreError::Corrupt`].
pub(crate) mod name {
    pub const SESSIONS: &str = "sessions";
    pub const ACTIVE: &str = "active";
    pub const LOG: &str = "log";
    pub const INBOX: &str = "inbox";
    pub const TURNS: &str = "turns";
    pub const AGENTS: &str = "agents";
    pub const KEYS: &str = "keys";
    pub const TENANTS: &str = "tenants";
    pub const MCP_SERVERS: &str = "mcp_servers";
    pub const META: &str = "meta";
    pub const OWNERS: &str = "owners";
    pub const DECISIONS: &str = "decisions";
    pub const SESSION_COUNTS: &str = "session_counts";
    /// Not tables since format 2: the kinds of record the log holds, named
    /// in errors about them.
    pub const MESSAGES: &str = "messages";
    pub const STEPS: &str = "steps";
    pub const EVENTS: &str = "events";
    pub const CALLS: &str = "calls";
    /// Not a table: errors of the database as a whole.
    pub const DATABASE: &str = "database";
}

pub(crate) const ACTIVE: TableDefinition<&str, ()> = TableDefinition::new(name::ACTIVE);
/// Sessions and their histories, keyed by (session, log number); see
/// [`history`]. The session's record is at [`SESSION_SLOT`].
pub(crate) const LOG: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new(name::LOG);
/// Where in its range of `log` a session's record is: after every log
/// number, so the record and the newest history share a leaf page and one
/// commit of a session dirties one page, not two.
pub(crate) const SESSION_SLOT: u64 = u64::MAX;
/// Where in its range of `log` a session's agent config is, when it has
/// one: just below the record. The config (system prompt, tool schemas)
/// is usually the largest part of a session's state and changes far more
/// rarely than the record, which every commit of the session rewrites; so
/// the record is stored without it and this slot is written only when the
/// config changes (see [`Write::SessionAgent`]). A record without a slot
/// beside it holds its config itself (written before format 6) or has none.
pub(crate) const AGENT_SLOT: u64 = u64::MAX - 1;
/// Where a session's history entries in `log` end (exclusive): log
/// numbers stay below the slots.
pub(crate) const HISTORY_END: u64 = AGENT_SLOT;
/// How many of a session's newest log entries an event read walks back
/// through before it reads from the oldest instead.
pub(crate) const BACKWARD_ENTRIES: usize = 64;
pub(crate) const INBOX: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new(name::INBOX);
pub(crate) const TURNS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::TURNS);
/// Agents, keyed by (tenant, agent id).
pub(crate) const AGENTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::AGENTS);
/// API keys, keyed by (tenant, key hash).
pub(crate) const KEYS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::KEYS);
/// Tenants, keyed by (tenant, [`TENANT_SLOT`]): the shape of the other
/// per-tenant tables, so one write path serves them all.
pub(crate) const TENANTS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::TENANTS);
/// Tenants' MCP servers, keyed by (tenant, server name).
pub(crate) const MCP_SERVERS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new(name::MCP_SERVERS);
/// The second half of a tenant's key in `tenants`.
pub(crate) const TENANT_SLOT: &str = "";
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new(name::META);
/// Sessions by owner, keyed by (tenant, owner's identity id, session id):
/// an index of `log`'s records, written with a session's first record
/// (an owner never changes), so listing an owner's sessions reads only
/// theirs.
pub(crate) const OWNERS: TableDefinition<(&str, &str, &str), ()> = TableDefinition::new(name::OWNERS);
/// Decisions by (tenant, agent id, version): the sums of
/// [`Op::CountDecisions`](subs_store::Op::CountDecisions).
pub(crate) const DECISIONS: TableDefinition<(&str, &str, &str), u64> = TableDefinition::new(name::DECISIONS);
/// How many sessions each tenant has (records in `log`), raised by the
/// commit that writes a session's first record: a tenant's `max_sessions`
/// check reads one entry instead of walking every session it has.
pub(crate) const SESSION_COUNTS: TableDefinition<&str, u64> = TableDefinition::new(name::SESSION_COUNTS);

/// `meta` key: the layout version of the file, so a later engine can tell
/// an old file from a corrupt one.
pub(crate) const META_FORMAT: &str = "format";
/// `meta` key: the next inbox sequence number. Kept in the file (not
/// derived from the inbox, which empties) so numbers never repeat, across
/// sessions and restarts.
pub(crate) const META_NEXT_INBOX: &str = "next_inbox_seq";
/// `meta` key: the last [journal](journal) record this state of the file
/// holds. Written by every journaled transaction, so recovery knows where
/// to resume whichever commit redb opens at.
pub(crate) const META_JOURNAL_SEQ: &str = "journal_seq";
/// `meta` key: a random number given to the file when it is first opened,
/// written into every journal record, so a journal left beside a deleted
/// or replaced database file is never applied to the new one.
pub(crate) const META_STORE_ID: &str = "store_id";
/// The layout this code writes.
pub(crate) const FORMAT_VERSION: u64 = 6;
/// The oldest layout this code migrates on open.
pub(crate) const FORMAT_TABLE_PER_KIND: u64 = 1;
/// The layout before `tenants`.
pub(crate) const FORMAT_WITHOUT_TENANTS: u64 = 2;
/// The layout before `owners` and `decisions`.
pub(crate) const FORMAT_WITHOUT_INDEXES: u64 = 3;
/// The layout before `session_counts`.
pub(crate) const FORMAT_WITHOUT_COUNTS: u64 = 4;
/// The layout before [`AGENT_SLOT`]: session records hold their agent
/// config. Read as it is, so opening needs no migration.
pub(crate) const FORMAT_INLINE_AGENT: u64 = 5;

/// The file's id and the last journal record it holds (0 for none).
pub(crate) fn journal_position(db: &Database) -> Result<(u64, u64), StoreError> {
    let txn = db.begin_read().map_err(|err| redb_error(name::DATABASE, err))?;
    let meta = open_read(&txn, META, name::META)?;
    let get = |key| meta.get(key).map_err(|err| redb_error(name::META, err)).map(|v| v.map_or(0, |v| v.value()));
    Ok((get(META_STORE_ID)?, get(META_JOURNAL_SEQ)?))
}

/// Records in `txn` that the file holds every journal record up to `seq`.
pub(crate) fn set_journal_seq(txn: &WriteTransaction, seq: u64) -> Result<(), StoreError> {
    open_write(txn, META, name::META)?.insert(META_JOURNAL_SEQ, seq).map_err(|err| redb_error(name::META, err))?;
    Ok(())
}

/// Creates the tables (so reads never meet a missing one) and checks or
/// records the format version, migrating an older file.
pub(crate) fn prepare(db: &Database) -> Result<(), StoreError> {
    let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
    {
        Tables::create_all(&txn)?;
        let mut meta = open_write(&txn, META, name::META)?;
        if meta.get(META_STORE_ID).map_err(|err| redb_error(name::META, err))?.is_none() {
            meta.insert(META_STORE_ID, random_id()).map_err(|err| redb_error(name::META, err))?;
        }
        let format = meta.get(META_FORMAT).map_err(|err| redb_error(name::META, err))?.map(|format| format.value());
        match format {
            Some(FORMAT_VERSION) => {}
            Some(FORMAT_INLINE_AGENT) | None => {
                meta.insert(META_FORMAT, FORMAT_VERSION).map_err(|err| redb_error(name::META, err))?;
            }
            Some(
                old @ (FORMAT_TABLE_PER_KIND | FORMAT_WITHOUT_TENANTS | FORMAT_WITHOUT_INDEXES | FORMAT_WITHOUT_COUNTS),
            ) => {
                let mut log_entries = 0;
                if old == FORMAT_TABLE_PER_KIND {
                    let mut log = open_write(&txn, LOG, name::LOG)?;
                    log_entries = history::migrate_v1(&txn, &mut log)?;
                }
                let tenants = if old >= FORMAT_WITHOUT_INDEXES { 0 } else { tenants_from_keys(&txn)? };
                let sessions = indexes_from_sessions(&txn, old < FORMAT_WITHOUT_COUNTS)?;
                meta.insert(META_FORMAT, FORMAT_VERSION).map_err(|err| redb_error(name::META, err))?;
                tracing::info!(
                    log_entries,
                    tenants,
                    sessions,
                    "migrated the store from format {old} to {FORMAT_VERSION}"
                );
            }
            Some(other) => {
                return Err(StoreError::Corrupt {
                    table: name::META,
                    message: format!("the file has store format {other}; this engine reads format {FORMAT_VERSION}"),
                });
            }
        }
    }
    txn.commit().map_err(|err| redb_error(name::DATABASE, err))
}

/// Gives every tenant with a stored key and no record a record without
/// limits of its own, created when its first key was; returns how many.
pub(crate) fn tenants_from_keys(txn: &WriteTransaction) -> Result<usize, StoreError> {
    let mut first_key: BTreeMap<String, u64> = BTreeMap::new();
    {
        let keys = open_write(txn, KEYS, name::KEYS)?;
        for entry in keys.iter().map_err(|err| redb_error(name::KEYS, err))? {
            let (_, value) = entry.map_err(|err| redb_error(name::KEYS, err))?;
            let key: KeyRecord = decode(name::KEYS, value.value())?;
            let created = first_key.entry(key.tenant).or_insert(key.created_ms);
            *created = (*created).min(key.created_ms);
        }
    }
    let mut tenants = open_write(txn, TENANTS, name::TENANTS)?;
    let mut added = 0;
    for (tenant, created_ms) in first_key {
        if tenants.get((tenant.as_str(), TENANT_SLOT)).map_err(|err| redb_error(name::TENANTS, err))?.is_some() {
            continue;
        }
        let record = TenantRecord { tenant, limits: serde_json::Map::new(), created_ms, updated_ms: created_ms };
        let value = encode_value(name::TENANTS, &record)?;
        tenants
            .insert((record.tenant.as_str(), TENANT_SLOT), value.as_slice())
            .map_err(|err| redb_error(name::TENANTS, err))?;
        added += 1;
    }
    Ok(added)
}

/// Fills `session_counts` from every session record and, when
/// `owners_and_decisions` (a file older than those two tables), `owners`
/// and `decisions` too: each owned session listed under its owner, each
/// session's decisions by version (its record's `versions`) added to its
/// agent's. Returns how many sessions were read.
pub(crate) fn indexes_from_sessions(txn: &WriteTransaction, owners_and_decisions: bool) -> Result<usize, StoreError> {
    let log = open_write(txn, LOG, name::LOG)?;
    let mut owners = open_write(txn, OWNERS, name::OWNERS)?;
    let mut decisions = open_write(txn, DECISIONS, name::DECISIONS)?;
    // Counted apart and then written over what the table holds: the
    // counts are rebuilt from the records, not added to.
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut sessions = 0;
    each_session(&log, None, None, |key, value| {
        let Some(value) = value else {
            return Ok(ControlFlow::Continue(()));
        };
        sessions += 1;
        *counts.entry(parse_key(name::LOG, key)?.tenant).or_default() += 1;
        if !owners_and_decisions {
            return Ok(ControlFlow::Continue(()));
        }
        let record: SessionRecord = decode(name::SESSIONS, value)?;
        if let Some(owner) = &record.identity.id {
            owners
                .insert((record.key.tenant.as_str(), owner.as_str(), record.key.session.as_str()), ())
                .map_err(|err| redb_error(name::OWNERS, err))?;
        }
        for (version, n) in &record.versions {
            let key = (record.key.tenant.as_str(), record.agent_id.as_str(), version.as_str());
            add_to(&mut decisions, key, *n, name::DECISIONS)?;
        }
        Ok(ControlFlow::Continue(()))
    })?;
    let mut table = open_write(txn, SESSION_COUNTS, name::SESSION_COUNTS)?;
    for (tenant, count) in counts {
        table.insert(tenant.as_str(), count).map_err(|err| redb_error(name::SESSION_COUNTS, err))?;
    }
    Ok(sessions)
}

/// A number that differs between files: std's hasher keys are random per
/// process, the clock and the process id tell processes and instants
/// apart. An identity, not a secret.
pub(crate) fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.write_u32(std::process::id());
    hasher.finish()
}

pub(crate) type SeqTableOf<'txn> = Table<'txn, (&'static str, u64), &'static [u8]>;

pub(crate) type NamedTableOf<'txn> = Table<'txn, (&'static str, &'static str), &'static [u8]>;

/// `slot`'s table, opening it in `txn` the first time.
pub(crate) fn opened<'a, 'txn, K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    slot: &'a mut Option<Table<'txn, K, V>>,
    txn: &'txn WriteTransaction,
    definition: TableDefinition<K, V>,
    name: &'static str,
) -> Result<&'a mut Table<'txn, K, V>, StoreError> {
    let table = match slot.take() {
        Some(table) => table,
        None => open_write(txn, definition, name)?,
    };
    Ok(slot.insert(table))
}

/// Adds `n` to the count under `key` in `table` (0 when absent), the
/// sums `decisions` and `session_counts` keep.
pub(crate) fn add_to<'k, K: ::redb::Key + 'static>(
    table: &mut Table<'_, K, u64>,
    key: K::SelfType<'k>,
    n: u64,
    name: &'static str,
) -> Result<(), StoreError> {
    let before = table.get(&key).map_err(|err| redb_error(name, err))?.map_or(0, |count| count.value());
    table.insert(key, before.saturating_add(n)).map_err(|err| redb_error(name, err))?;
    Ok(())
}

pub(crate) fn open_read<K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    txn: &ReadTransaction,
    table: TableDefinition<K, V>,
    name: &'static str,
) -> Result<ReadOnlyTable<K, V>, StoreError> {
    txn.open_table(table).map_err(|err| redb_error(name, err))
}

pub(crate) fn open_write<'txn, K: ::redb::Key + 'static, V: ::redb::Value + 'static>(
    txn: &'txn WriteTransaction,
    table: TableDefinition<K, V>,
    name: &'static str,
) -> Result<Table<'txn, K, V>, StoreError> {
    txn.open_table(table).map_err(|err| redb_error(name, err))
}

/// Maps a redb error into ours. Damage is [`StoreError::Corrupt`] (so is a
/// table of the wrong type: the file is not one we wrote); the rest is I/O.
pub(crate) fn redb_error(table: &'static str, err: impl Into<::redb::Error>) -> StoreError {
    use ::redb::Error;
    match err.into() {
        Error::Corrupted(message) => StoreError::Corrupt { table, message },
        err @ (Error::TableTypeMismatch { .. }
        | Error::TableIsMultimap(_)
        | Error::TableIsNotMultimap(_)
        | Error::TypeDefinitionChanged { .. }) => StoreError::Corrupt { table, message: err.to_string() },
        Error::DatabaseClosed => StoreError::Closed,
        err => StoreError::io(format!("cannot use the {table} table"), err),
    }
}
