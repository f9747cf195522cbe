//! Reads, each in one read transaction on the caller's thread.

#[allow(unused_imports)]
use super::*;

/// Reads, each in one redb read transaction on the caller's thread; the
/// [`Store`] methods answer with them at once.
impl RedbStore {
    pub(crate) fn read_session(&self, key: &SessionKey) -> Result<Option<SessionRecord>, StoreError> {
        self.read(|txn| stored_session(&open_read(txn, LOG, name::LOG)?, &key.storage_key()))
    }

    /// The session's record decoded as `T`, without its agent config (see
    /// [`AGENT_SLOT`]): a [`SessionHead`] skips what it does not hold
    /// rather than building it.
    pub(crate) fn read_session_as<T: serde::de::DeserializeOwned>(
        &self,
        key: &SessionKey,
    ) -> Result<Option<T>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let value =
                table.get((key.storage_key().as_str(), SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
            value.map(|value| decode(name::SESSIONS, value.value())).transpose()
        })
    }

    pub(crate) fn read_all_sessions(&self, tenant: Option<&str>) -> Result<Vec<SessionRecord>, StoreError> {
        let mut sessions = self.scan_sessions(tenant, None, usize::MAX)?;
        // Storage keys order `a-b/x` before `a/x`; callers expect the order
        // of `SessionKey` (tenant, then session).
        sessions.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(sessions)
    }

    pub(crate) fn read_page_of_sessions(
        &self,
        tenant: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        // Within one tenant's prefix, storage keys are in session id order.
        self.scan_sessions(Some(tenant), after, limit)
    }

    pub(crate) fn read_sessions_of_identity(
        &self,
        tenant: &str,
        identity: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        if limit == 0 {
            return self.read(|_| Ok(Vec::new()));
        }
        self.read(|txn| {
            let owners = open_read(txn, OWNERS, name::OWNERS)?;
            let log = open_read(txn, LOG, name::LOG)?;
            // After `after` itself: the least id following it is `after`
            // with a NUL appended.
            let from = after.map(|after| format!("{after}\0")).unwrap_or_default();
            let entries =
                owners.range((tenant, identity, from.as_str())..).map_err(|err| redb_error(name::OWNERS, err))?;
            let mut sessions = Vec::new();
            for entry in entries {
                let (key, _) = entry.map_err(|err| redb_error(name::OWNERS, err))?;
                let (owner_tenant, owner, session) = key.value();
                if owner_tenant != tenant || owner != identity || sessions.len() == limit {
                    break;
                }
                let storage = SessionKey::new(tenant, session).storage_key();
                sessions.extend(stored_session(&log, &storage)?);
            }
            Ok(sessions)
        })
    }

    pub(crate) fn read_decision_counts(&self, tenant: &str, agent: &str) -> Result<BTreeMap<String, u64>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, DECISIONS, name::DECISIONS)?;
            let entries = table.range((tenant, agent, "")..).map_err(|err| redb_error(name::DECISIONS, err))?;
            let mut counts = BTreeMap::new();
            for entry in entries {
                let (key, n) = entry.map_err(|err| redb_error(name::DECISIONS, err))?;
                let (t, a, version) = key.value();
                if t != tenant || a != agent {
                    break;
                }
                counts.insert(version.to_owned(), n.value());
            }
            Ok(counts)
        })
    }

    pub(crate) fn read_session_count(&self, tenant: &str) -> Result<u64, StoreError> {
        self.read(|txn| {
            let counts = open_read(txn, SESSION_COUNTS, name::SESSION_COUNTS)?;
            let count = counts.get(tenant).map_err(|err| redb_error(name::SESSION_COUNTS, err))?;
            Ok(count.map_or(0, |n| n.value()))
        })
    }

    pub(crate) fn read_unfinished(&self) -> Result<Vec<SessionKey>, StoreError> {
        self.read(|txn| {
            let mut keys = BTreeSet::new();
            let active = open_read(txn, ACTIVE, name::ACTIVE)?;
            for entry in active.iter().map_err(|err| redb_error(name::ACTIVE, err))? {
                let (key, _) = entry.map_err(|err| redb_error(name::ACTIVE, err))?;
                keys.insert(parse_key(name::ACTIVE, key.value())?);
            }
            // The inbox only holds items not yet taken in, so scanning it
            // whole stays cheap.
            let inbox = open_read(txn, INBOX, name::INBOX)?;
            for entry in inbox.iter().map_err(|err| redb_error(name::INBOX, err))? {
                let (key, _) = entry.map_err(|err| redb_error(name::INBOX, err))?;
                keys.insert(parse_key(name::INBOX, key.value().0)?);
            }
            Ok(keys.into_iter().collect())
        })
    }

    pub(crate) fn read_messages(&self, key: &SessionKey) -> Result<Vec<(u64, MessageRecord)>, StoreError> {
        self.read(|txn| Ok(read_history(txn, key, Wanted { messages: true, ..Wanted::default() })?.messages))
    }

    pub(crate) fn read_steps(
        &self,
        key: &SessionKey,
        from: u64,
        limit: usize,
    ) -> Result<Vec<(u64, StepRecord)>, StoreError> {
        let wanted = Wanted { steps_from: Some(from), steps_limit: limit, ..Wanted::default() };
        self.read(|txn| Ok(read_history(txn, key, wanted)?.steps))
    }

    /// One pass over the session's log finds where the last frame of each
    /// of the first `limit` steps from `from` is and how long it is; only
    /// the steps that fit `max_bytes` (and the first) are then read again
    /// and decoded, so memory holds no more than the page.
    pub(crate) fn read_steps_page(
        &self,
        key: &SessionKey,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<Vec<(u64, StepRecord)>, StoreError> {
        if limit == 0 {
            return self.read(|_| Ok(Vec::new()));
        }
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let storage = key.storage_key();
            let entries = table
                .range((storage.as_str(), 0)..(storage.as_str(), HISTORY_END))
                .map_err(|err| redb_error(name::LOG, err))?;
            // The `limit` least step numbers seen so far, each with where
            // its last frame is: (log number, frame index, payload length).
            // A number past the `limit` least can never come back in: the
            // set only ever takes smaller ones.
            let mut found: BTreeMap<u64, (u64, usize, usize)> = BTreeMap::new();
            for entry in entries {
                let (log_key, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
                let lsn = log_key.value().1;
                for (index, frame) in history::frames(value.value()).enumerate() {
                    let frame = frame?;
                    if frame.kind != history::Kind::Step || frame.seq < from {
                        continue;
                    }
                    let at = (lsn, index, frame.payload.len());
                    if let Some(known) = found.get_mut(&frame.seq) {
                        *known = at;
                    } else if found.len() < limit {
                        found.insert(frame.seq, at);
                    } else if found.last_key_value().is_some_and(|(last, _)| frame.seq < *last) {
                        found.pop_last();
                        found.insert(frame.seq, at);
                    }
                }
            }
            let mut total = 0usize;
            let mut steps = Vec::new();
            for (seq, (lsn, index, len)) in found {
                total = total.saturating_add(len);
                if !steps.is_empty() && total > max_bytes {
                    break;
                }
                let value =
                    table.get((storage.as_str(), lsn)).map_err(|err| redb_error(name::LOG, err))?.ok_or_else(|| {
                        StoreError::Corrupt {
                            table: name::LOG,
                            message: format!("entry {lsn} of {key} went missing within one read"),
                        }
                    })?;
                let frame = history::frames(value.value()).nth(index).transpose()?.ok_or_else(|| {
                    StoreError::Corrupt { table: name::LOG, message: format!("frame {index} of entry {lsn} of {key}") }
                })?;
                steps.push((seq, decode(name::STEPS, frame.payload)?));
            }
            Ok(steps)
        })
    }

    /// One pass over the session's log, keeping the last frame of the
    /// calls asked for only: what is decoded is what is returned.
    pub(crate) fn read_calls_named(&self, key: &SessionKey, ids: &[String]) -> Result<Vec<CallRecord>, StoreError> {
        let wanted: std::collections::HashSet<&str> = ids.iter().map(String::as_str).collect();
        if wanted.is_empty() {
            return self.read(|_| Ok(Vec::new()));
        }
        self.read(|txn| {
            let mut calls = BTreeMap::new();
            scan_log(txn, key, |frame| {
                if wanted.contains(frame.id) {
                    fold_call(&mut calls, &frame)?;
                }
                Ok(ControlFlow::Continue(()))
            })?;
            calls.values().map(CallFrames::decode).collect()
        })
    }

    pub(crate) fn read_calls(&self, key: &SessionKey) -> Result<Vec<CallRecord>, StoreError> {
        self.read(|txn| Ok(read_history(txn, key, Wanted { calls: true, ..Wanted::default() })?.calls))
    }

    /// One read transaction and one pass over the session's log.
    pub(crate) fn read_load(&self, key: &SessionKey) -> Result<Option<LoadedSession>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let Some(record) = stored_session(&table, &key.storage_key())? else { return Ok(None) };
            let wanted = Wanted {
                messages: true,
                steps_from: Some(record.first_open_step),
                steps_limit: usize::MAX,
                calls: true,
            };
            let History { messages, steps, calls } = read_history(txn, key, wanted)?;
            Ok(Some(LoadedSession { record, messages, steps, calls }))
        })
    }

    pub(crate) fn read_agents(&self, tenant: Option<&str>) -> Result<Vec<AgentRecord>, StoreError> {
        self.read(|txn| scan_named(txn, AGENTS, name::AGENTS, tenant))
    }

    pub(crate) fn read_agent(&self, tenant: &str, agent_id: &str) -> Result<Option<AgentRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, AGENTS, name::AGENTS)?;
            let value = table.get((tenant, agent_id)).map_err(|err| redb_error(name::AGENTS, err))?;
            value.map(|value| decode(name::AGENTS, value.value())).transpose()
        })
    }

    pub(crate) fn read_keys(&self) -> Result<Vec<KeyRecord>, StoreError> {
        self.read(|txn| scan_named(txn, KEYS, name::KEYS, None))
    }

    pub(crate) fn read_tenants(&self) -> Result<Vec<TenantRecord>, StoreError> {
        self.read(|txn| scan_named(txn, TENANTS, name::TENANTS, None))
    }

    pub(crate) fn read_mcp_servers(&self) -> Result<Vec<McpServerRecord>, StoreError> {
        self.read(|txn| scan_named(txn, MCP_SERVERS, name::MCP_SERVERS, None))
    }

    pub(crate) fn read_events(
        &self,
        key: &SessionKey,
        after: Option<u64>,
        limit: usize,
    ) -> Result<Vec<(u64, EventRecord)>, StoreError> {
        let from = match after {
            None => 0,
            Some(after) => match after.checked_add(1) {
                Some(from) => from,
                None => return Ok(Vec::new()),
            },
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.read(|txn| {
            let table = open_read(txn, LOG, name::LOG)?;
            let storage = key.storage_key();
            let range = (storage.as_str(), 0)..(storage.as_str(), HISTORY_END);
            // Events are appended in sequence order. A client resuming near
            // the end of the stream (a reconnect, nearly always) is served
            // walking back from the newest entry; if that does not reach
            // `from` within a few entries, the page is read forward from
            // the oldest, stopping at `limit`.
            let mut found = Vec::new();
            // Every entry with events from `from` on has been read.
            let mut complete = false;
            let mut newest = table.range(range).map_err(|err| redb_error(name::LOG, err))?.rev();
            for _ in 0..BACKWARD_ENTRIES {
                let Some(entry) = newest.next() else {
                    complete = true;
                    break;
                };
                let (_, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
                let mut reached = false;
                let first_of_entry = found.len();
                for frame in history::frames(value.value()) {
                    let frame = frame?;
                    if frame.kind == history::Kind::Event {
                        if frame.seq >= from {
                            found.push((frame.seq, frame.payload.to_vec()));
                        } else {
                            reached = true;
                        }
                    }
                }
                // `found` runs newest first: this entry's events go in
                // reversed.
                found[first_of_entry..].reverse();
                if reached {
                    complete = true;
                    break;
                }
            }
            if complete {
                found.reverse();
                found.truncate(limit);
            } else {
                found.clear();
                scan_log(txn, key, |frame| {
                    if frame.kind == history::Kind::Event && frame.seq >= from {
                        found.push((frame.seq, frame.payload.to_vec()));
                        if found.len() == limit {
                            return Ok(ControlFlow::Break(()));
                        }
                    }
                    Ok(ControlFlow::Continue(()))
                })?;
            }
            found.into_iter().map(|(seq, value)| Ok((seq, decode(name::EVENTS, &value)?))).collect()
        })
    }

    pub(crate) fn read_turn(&self, key: &SessionKey, turn_id: &str) -> Result<Option<TurnRecord>, StoreError> {
        self.read(|txn| {
            let table = open_read(txn, TURNS, name::TURNS)?;
            let value = table.get((key.storage_key().as_str(), turn_id)).map_err(|err| redb_error(name::TURNS, err))?;
            value.map(|value| decode(name::TURNS, value.value())).transpose()
        })
    }

    pub(crate) fn read_inbox(&self, key: &SessionKey) -> Result<Vec<(u64, InboxItem)>, StoreError> {
        self.read(|txn| scan_inbox(txn, key))
    }

    /// The writer's counters; touches neither the file nor the writer.
    pub(crate) fn read_stats(&self) -> Result<StoreStats, StoreError> {
        if self.db.read().unwrap_or_else(PoisonError::into_inner).is_none() {
            return Err(StoreError::Closed);
        }
        Ok(StoreStats {
            batches: self.counters.batches.load(Ordering::Relaxed),
            commits: self.counters.commits.load(Ordering::Relaxed),
        })
    }

    /// redb's `DatabaseStats::stored_bytes`: the bytes of the keys and
    /// values in our tables, without B-tree overhead, free or fragmented
    /// pages. redb computes it only inside a write transaction, by walking
    /// every table, so this waits for a commit in progress and holds the
    /// writer up while it walks.
    pub(crate) fn read_stored_bytes(&self) -> Result<u64, StoreError> {
        let db = self.db.read().unwrap_or_else(PoisonError::into_inner);
        let db = db.as_ref().ok_or(StoreError::Closed)?;
        let txn = db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
        let stats = txn.stats().map_err(|err| redb_error(name::DATABASE, err));
        // Nothing was written: aborting just gives the lock back.
        let _ = txn.abort();
        Ok(stats?.stored_bytes())
    }
}

/// Calls `f` with the storage key of every session in `log` and its
/// record's bytes (`None` for a log without a record, which only a
/// damaged file holds), of `tenant` only when given (after the session id
/// `after` of that tenant, when given too), in key order, until `f`
/// breaks. Tenant names hold no `/`, so `tenant/` prefixes exactly this
/// tenant's keys (session ids may hold `/`: `t/a/b` is tenant `t`'s
/// session `a/b`). Keys are ordered by their string first, so the entries
/// of one session are contiguous and each session is visited once, `t/a`
/// before `t/a/b`. The record is the last entry of its session's range
/// ([`SESSION_SLOT`]), so one seek per session reads it and, as the entry
/// after it, the next session's key: no history is decoded. That entry is
/// the next session's oldest, though, and once sessions' histories outgrow
/// a leaf, it sits in another leaf than the next record: a listing then
/// reads two leaves a session. (Walking backward from each range's start
/// reads two as well, the same two.)
pub(crate) fn each_session(
    table: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    tenant: Option<&str>,
    after: Option<&str>,
    mut f: impl FnMut(&str, Option<&[u8]>) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let prefix = tenant.map(|tenant| format!("{tenant}/"));
    let from = match (&prefix, after) {
        // The smallest key after every key of session `after`.
        (Some(prefix), Some(after)) => format!("{prefix}{after}\0"),
        (prefix, _) => prefix.clone().unwrap_or_default(),
    };
    let first = table.range((from.as_str(), 0)..).map_err(|err| redb_error(name::LOG, err))?.next();
    let mut next = match first {
        Some(entry) => Some(entry.map_err(|err| redb_error(name::LOG, err))?.0.value().0.to_owned()),
        None => None,
    };
    while let Some(session) = next.take() {
        if prefix.as_ref().is_some_and(|prefix| !session.starts_with(prefix.as_str())) {
            return Ok(());
        }
        let mut entries = table.range((session.as_str(), SESSION_SLOT)..).map_err(|err| redb_error(name::LOG, err))?;
        let mut record = None;
        for entry in entries.by_ref() {
            let (key, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
            let (key, seq) = key.value();
            if key == session && seq == SESSION_SLOT {
                record = Some(value);
                continue;
            }
            next = Some(key.to_owned());
            break;
        }
        if f(&session, record.as_ref().map(|value| value.value()))?.is_break() {
            return Ok(());
        }
    }
    Ok(())
}

/// Session `storage`'s record, with its agent config, if it has one.
pub(crate) fn stored_session(
    log: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    storage: &str,
) -> Result<Option<SessionRecord>, StoreError> {
    let value = log.get((storage, SESSION_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
    value.map(|value| session_record(log, storage, value.value())).transpose()
}

/// Session `storage`'s record from its stored JSON `value`, with the
/// agent config its [`AGENT_SLOT`] holds, if any (a record without one
/// holds its own config, or has none).
pub(crate) fn session_record(
    log: &impl ReadableTable<(&'static str, u64), &'static [u8]>,
    storage: &str,
    value: &[u8],
) -> Result<SessionRecord, StoreError> {
    let mut record: SessionRecord = decode(name::SESSIONS, value)?;
    let agent = log.get((storage, AGENT_SLOT)).map_err(|err| redb_error(name::LOG, err))?;
    if let Some(agent) = agent {
        record.agent = Some(Arc::new(decode(name::SESSIONS, agent.value())?));
    }
    Ok(record)
}

/// The session's inbox items, in sequence order.
pub(crate) fn scan_inbox(txn: &ReadTransaction, key: &SessionKey) -> Result<Vec<(u64, InboxItem)>, StoreError> {
    let table = open_read(txn, INBOX, name::INBOX)?;
    let key = key.storage_key();
    let entries =
        table.range((key.as_str(), 0)..=(key.as_str(), u64::MAX)).map_err(|err| redb_error(name::INBOX, err))?;
    let mut records = Vec::new();
    for entry in entries {
        let (k, value) = entry.map_err(|err| redb_error(name::INBOX, err))?;
        records.push((k.value().1, decode(name::INBOX, value.value())?));
    }
    Ok(records)
}

/// Which parts of a session's history [`read_history`] decodes.
#[derive(Default)]
pub(crate) struct Wanted {
    pub(crate) messages: bool,
    /// Steps from this sequence number on,
    pub(crate) steps_from: Option<u64>,
    /// the first this many of them (only these are decoded).
    pub(crate) steps_limit: usize,
    pub(crate) calls: bool,
}

/// A session's history as its log adds up to.
pub(crate) struct History {
    pub(crate) messages: Vec<(u64, MessageRecord)>,
    pub(crate) steps: Vec<(u64, StepRecord)>,
    pub(crate) calls: Vec<CallRecord>,
}

/// Folds the session's log in one pass: every message, the last version
/// of each step, the calls not yet gone. Only what is `wanted` is decoded,
/// and a step or call only once, in its last version.
pub(crate) fn read_history(txn: &ReadTransaction, key: &SessionKey, wanted: Wanted) -> Result<History, StoreError> {
    let mut messages = Vec::new();
    let mut steps = BTreeMap::new();
    let mut calls = BTreeMap::new();
    scan_log(txn, key, |frame| {
        match frame.kind {
            history::Kind::Message if wanted.messages => {
                messages.push((frame.seq, decode(name::MESSAGES, frame.payload)?));
            }
            history::Kind::Step if wanted.steps_from.is_some_and(|from| frame.seq >= from) => {
                steps.insert(frame.seq, frame.payload.to_vec());
            }
            history::Kind::Call | history::Kind::CallUpdate | history::Kind::CallGone if wanted.calls => {
                fold_call(&mut calls, &frame)?;
            }
            _ => {}
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(History {
        messages,
        steps: steps
            .into_iter()
            .take(wanted.steps_limit)
            .map(|(seq, value)| Ok((seq, decode(name::STEPS, &value)?)))
            .collect::<Result<_, _>>()?,
        calls: calls.values().map(CallFrames::decode).collect::<Result<_, _>>()?,
    })
}

/// A call as the frames of its log add up to: its last full record, and
/// the change stored after it, if any.
pub(crate) struct CallFrames {
    record: Vec<u8>,
    change: Option<Vec<u8>>,
}

impl CallFrames {
    fn decode(&self) -> Result<CallRecord, StoreError> {
        let record: CallRecord = decode(name::CALLS, &self.record)?;
        match &self.change {
            None => Ok(record),
            Some(change) => Ok(CallRecord::join(decode(name::CALLS, change)?, record.spec)),
        }
    }
}

/// Adds a call's `frame` to `calls`, by call id; frames of other kinds
/// are passed over.
pub(crate) fn fold_call(
    calls: &mut BTreeMap<String, CallFrames>,
    frame: &history::Frame<'_>,
) -> Result<(), StoreError> {
    match frame.kind {
        history::Kind::Call => {
            calls.insert(frame.id.to_owned(), CallFrames { record: frame.payload.to_vec(), change: None });
        }
        history::Kind::CallUpdate => match calls.get_mut(frame.id) {
            Some(call) => call.change = Some(frame.payload.to_vec()),
            None => {
                return Err(StoreError::Corrupt {
                    table: name::CALLS,
                    message: format!("call {:?} has a change stored with no record before it", frame.id),
                });
            }
        },
        history::Kind::CallGone => {
            calls.remove(frame.id);
        }
        history::Kind::Message | history::Kind::Step | history::Kind::Event => {}
    }
    Ok(())
}

/// Shows `visit` every frame of the session's log, oldest first, until it
/// breaks.
pub(crate) fn scan_log(
    txn: &ReadTransaction,
    key: &SessionKey,
    mut visit: impl FnMut(history::Frame<'_>) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let table = open_read(txn, LOG, name::LOG)?;
    let key = key.storage_key();
    let entries =
        table.range((key.as_str(), 0)..(key.as_str(), HISTORY_END)).map_err(|err| redb_error(name::LOG, err))?;
    for entry in entries {
        let (_, value) = entry.map_err(|err| redb_error(name::LOG, err))?;
        for frame in history::frames(value.value()) {
            if visit(frame?)?.is_break() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Every record of a (key, id) table whose key is `key` (all keys when
/// `None`), in id order.
pub(crate) fn scan_named<T: DeserializeOwned>(
    txn: &ReadTransaction,
    table: TableDefinition<(&'static str, &'static str), &'static [u8]>,
    name: &'static str,
    key: Option<&str>,
) -> Result<Vec<T>, StoreError> {
    let table = open_read(txn, table, name)?;
    let entries = match key {
        Some(key) => table.range((key, "")..),
        None => table.range::<(&str, &str)>(..),
    }
    .map_err(|err| redb_error(name, err))?;
    let mut records = Vec::new();
    for entry in entries {
        let (k, value) = entry.map_err(|err| redb_error(name, err))?;
        if key.is_some_and(|key| k.value().0 != key) {
            break;
        }
        records.push(decode(name, value.value())?);
    }
    Ok(records)
}
