//! The writer thread and group commit: every batch already queued goes
//! into one write transaction, made durable by one sync.

#[allow(unused_imports)]
use super::*;

/// A message to the writer thread.
pub(crate) enum Request {
    /// Commit these writes and answer.
    Commit {
        /// The batch, encoded.
        writes: Vec<Write>,
        /// Where the outcome goes.
        answer: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Finish what is queued before this, close the database and stop.
    Close {
        /// Where the outcome of closing goes.
        answer: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// A batch waiting in the writer's current group.
pub(crate) struct Pending {
    pub(crate) writes: Vec<Write>,
    pub(crate) answer: oneshot::Sender<Result<(), StoreError>>,
}

/// The writer thread: takes groups of queued batches and commits each
/// group in one transaction, until the store is shut; then closes the
/// database (its handle is the last one by then).
pub(crate) fn run_writer(mut writer: Writer, requests: mpsc::Receiver<Request>, counters: &Tally) {
    let mut closing = None;
    while closing.is_none() {
        // Disconnected: the store was dropped and the queue is drained.
        let Ok(first) = requests.recv() else { break };
        let mut group = Vec::new();
        let mut next = Some(first);
        let mut yielded = false;
        while let Some(request) = next.take() {
            match request {
                Request::Commit { writes, answer } => group.push(Pending { writes, answer }),
                // Everything queued before the close is in the group; nothing
                // can be queued after it.
                Request::Close { answer } => closing = Some(answer),
            }
            if closing.is_none() && group.len() < MAX_GROUP {
                next = requests.try_recv().ok();
                if next.is_none() && !yielded && group.len() > 1 {
                    // Several sessions commit at once. Where they share the
                    // CPU with this thread, letting them run before the sync
                    // puts their next batches in this group, not in a group
                    // (and a sync) of their own; on an idle CPU it returns
                    // at once.
                    yielded = true;
                    std::thread::yield_now();
                    next = requests.try_recv().ok();
                }
            }
        }
        if !group.is_empty() {
            writer.commit_group(group, counters);
        }
    }
    // The file alone then holds everything: nothing to replay at the next
    // open, and a copy of the file taken while the engine is stopped is
    // complete.
    let checkpointed = writer.checkpoint();
    if let Err(error) = &checkpointed {
        tracing::error!(%error, "the store's last checkpoint failed; the journal will be applied at the next open");
    }
    let closed = match Arc::try_unwrap(writer.db) {
        Ok(db) => db.close().map_err(|err| redb_error(name::DATABASE, err)),
        // A reader still holds it (only if the store was leaked half-shut):
        // the last holder closes it.
        Err(db) => {
            drop(db);
            Ok(())
        }
    };
    if let Some(answer) = closing {
        let _ = answer.send(checkpointed.and(closed));
    }
}

/// The writer thread's state.
pub(crate) struct Writer {
    pub(crate) db: Arc<Database>,
    pub(crate) journal: journal::Journal,
    /// Set when the journal may hold a group that redb did not commit and
    /// taking it back failed: committing anything more could make that
    /// group part of the store at the next open, though its waiters were
    /// told it failed. Every later commit fails with this message.
    pub(crate) broken: Option<String>,
    /// Where the logs written lately end.
    pub(crate) lsns: NextLsns,
}

impl Writer {
    /// Commits `group` and answers each of its waiters.
    pub(crate) fn commit_group(&mut self, group: Vec<Pending>, counters: &Tally) {
        let slow = counters.slow_disk_micros.load(Ordering::Relaxed);
        if slow > 0 {
            // A slow disk, injected by tests: the slowness is the point.
            std::thread::sleep(std::time::Duration::from_micros(slow));
        }
        let outcome = self.transaction(&group.iter().map(|pending| pending.writes.as_slice()).collect::<Vec<_>>());
        match outcome {
            Ok(()) => {
                counters.commits.fetch_add(1, Ordering::Relaxed);
                counters.batches.fetch_add(group.len() as u64, Ordering::Relaxed);
                for pending in group {
                    let _ = pending.answer.send(Ok(()));
                }
            }
            // Some batch's writes failed and nothing was committed: find out
            // which by committing each on its own.
            Err(Failure::Write(_)) if group.len() > 1 => {
                for pending in group {
                    let outcome = self.transaction(&[pending.writes.as_slice()]);
                    if outcome.is_ok() {
                        counters.commits.fetch_add(1, Ordering::Relaxed);
                        counters.batches.fetch_add(1, Ordering::Relaxed);
                    }
                    let _ = pending.answer.send(outcome.map_err(Failure::into_error));
                }
            }
            Err(failure) => {
                let error = failure.into_error();
                for pending in group {
                    let _ = pending.answer.send(Err(error.clone()));
                }
            }
        }
    }

    /// Writes `batches` in order in one transaction and makes it durable:
    /// through the journal (redb then commits without syncing), or, when a
    /// checkpoint is due, by a durable redb commit.
    pub(crate) fn transaction(&mut self, batches: &[&[Write]]) -> Result<(), Failure> {
        let outcome = self.try_transaction(batches);
        if outcome.is_err() {
            // Its appends are not in the log, but their numbers are known.
            self.lsns.forget();
        }
        outcome
    }

    pub(crate) fn try_transaction(&mut self, batches: &[&[Write]]) -> Result<(), Failure> {
        if let Some(broken) = &self.broken {
            return Err(Failure::Transaction(StoreError::io("cannot commit", broken.clone())));
        }
        let mut txn = self.db.begin_write().map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
        if let Err(error) = write_all(&txn, batches.iter().copied(), &mut self.lsns) {
            let _ = txn.abort();
            return Err(Failure::Write(error));
        }
        if self.journal.prepare(batches.iter().copied()) {
            // Redb's default, set anyway: the whole store rests on it.
            txn.set_durability(Durability::Immediate)
                .map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
            txn.commit().map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
            self.journal.checkpointed();
            self.lsns.forget();
            return Ok(());
        }
        if let Err(error) = set_journal_seq(&txn, self.journal.next_seq()) {
            let _ = txn.abort();
            return Err(Failure::Transaction(error));
        }
        txn.set_durability(Durability::None).map_err(|err| Failure::Transaction(redb_error(name::DATABASE, err)))?;
        let appended = match self.journal.append() {
            Ok(appended) => appended,
            Err((appended, err)) => {
                let _ = txn.abort();
                let error = StoreError::io(format!("cannot write the journal {}", self.journal.path().display()), err);
                self.revoke(appended, &error);
                return Err(Failure::Transaction(error));
            }
        };
        txn.commit().map_err(|err| {
            let error = redb_error(name::DATABASE, err);
            self.revoke(appended, &error);
            Failure::Transaction(error)
        })
    }

    /// Takes back a journal record whose group was not committed, or, if
    /// that fails, stops taking commits.
    pub(crate) fn revoke(&mut self, appended: journal::Appended, cause: &StoreError) {
        if let Err(err) = self.journal.revoke(appended) {
            let message = format!(
                "the store stopped taking commits: record {} of its journal {} could not be taken back after \
                 `{cause}`: {err}; restart the engine",
                appended.seq,
                self.journal.path().display()
            );
            tracing::error!("{message}");
            self.broken = Some(message);
        }
    }

    /// A durable redb commit that makes every journaled group durable in
    /// the file itself, so the journal can start over.
    pub(crate) fn checkpoint(&mut self) -> Result<(), StoreError> {
        if !self.journal.pending() || self.broken.is_some() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(|err| redb_error(name::DATABASE, err))?;
        set_journal_seq(&txn, self.journal.last_seq())?;
        txn.commit().map_err(|err| redb_error(name::DATABASE, err))?;
        self.journal.checkpointed();
        self.lsns.forget();
        Ok(())
    }
}

/// Why a write transaction committed nothing.
pub(crate) enum Failure {
    /// Writing a batch's ops failed; the other batches may be fine.
    Write(StoreError),
    /// The transaction could not begin or commit; nothing would succeed.
    Transaction(StoreError),
}

impl Failure {
    pub(crate) fn into_error(self) -> StoreError {
        match self {
            Failure::Write(error) | Failure::Transaction(error) => error,
        }
    }
}

/// The newest log number of each session the writer appended to since its
/// last checkpoint, so an append does not read the log's newest entry
/// back. It holds only what committed transactions wrote: a transaction
/// that fails forgets every number (its appends were rolled back), and a
/// checkpoint forgets them too, which bounds the map by the sessions
/// written between two checkpoints.
#[derive(Default)]
pub(crate) struct NextLsns(HashMap<String, u64>);

impl NextLsns {
    /// Session `key`'s log now ends with entry `lsn`.
    pub(crate) fn wrote(&mut self, key: &str, lsn: u64) {
        match self.0.get_mut(key) {
            Some(last) => *last = lsn,
            None => {
                self.0.insert(key.to_owned(), lsn);
            }
        }
    }

    pub(crate) fn forget(&mut self) {
        self.0 = HashMap::new();
    }
}

/// Applies `batches` in order in `txn`. Decision counts are summed over
/// the whole transaction and each sum added once at its end: every
/// decision of every session in a group counts for the same few agent
/// versions, and one read and one write of each beats one per decision.
/// A write that forgets an agent's counts takes the sums before it first,
/// so the order between them holds.
pub(crate) fn write_all<'a>(
    txn: &WriteTransaction,
    batches: impl Iterator<Item = &'a [Write]>,
    lsns: &mut NextLsns,
) -> Result<(), StoreError> {
    let mut tables = Tables::new(txn, lsns);
    // A group may hold the counts of many tenants' agents: summed by key,
    // not by scanning.
    let mut counts: HashMap<(&'a str, &'a str, &'a str), u64> = HashMap::new();
    for writes in batches {
        for write in writes {
            match write {
                Write::CountDecisions { tenant, agent, version, decisions } => {
                    let sum = counts.entry((tenant.as_str(), agent.as_str(), version.as_str())).or_default();
                    *sum = sum.saturating_add(*decisions);
                }
                Write::ForgetDecisions { .. } => {
                    tables.add_decisions(counts.drain())?;
                    tables.apply(write)?;
                }
                _ => tables.apply(write)?,
            }
            #[cfg(test)]
            tests::inject_failure(write.key())?;
        }
    }
    tables.add_decisions(counts)
}

/// The tables of one write transaction, each opened when first written:
/// a table opened in a transaction is flushed at its commit even if
/// nothing changed in it, and most commits write only `log`.
pub(crate) struct Tables<'txn, 'l> {
    pub(crate) txn: &'txn WriteTransaction,
    pub(crate) lsns: &'l mut NextLsns,
    pub(crate) active: Option<Table<'txn, &'static str, ()>>,
    pub(crate) log: Option<SeqTableOf<'txn>>,
    pub(crate) inbox: Option<SeqTableOf<'txn>>,
    pub(crate) turns: Option<NamedTableOf<'txn>>,
    pub(crate) agents: Option<NamedTableOf<'txn>>,
    pub(crate) keys: Option<NamedTableOf<'txn>>,
    pub(crate) tenants: Option<NamedTableOf<'txn>>,
    pub(crate) mcp_servers: Option<NamedTableOf<'txn>>,
    pub(crate) meta: Option<Table<'txn, &'static str, u64>>,
    pub(crate) owners: Option<Table<'txn, (&'static str, &'static str, &'static str), ()>>,
    pub(crate) decisions: Option<Table<'txn, (&'static str, &'static str, &'static str), u64>>,
    pub(crate) session_counts: Option<Table<'txn, &'static str, u64>>,
}

impl<'txn, 'l> Tables<'txn, 'l> {
    pub(crate) fn new(txn: &'txn WriteTransaction, lsns: &'l mut NextLsns) -> Self {
        Self {
            txn,
            lsns,
            active: None,
            log: None,
            inbox: None,
            turns: None,
            agents: None,
            keys: None,
            tenants: None,
            mcp_servers: None,
            meta: None,
            owners: None,
            decisions: None,
            session_counts: None,
        }
    }

    /// Creates every table that does not exist yet, so reads never meet a
    /// missing one.
    pub(crate) fn create_all(txn: &'txn WriteTransaction) -> Result<(), StoreError> {
        let mut lsns = NextLsns::default();
        let mut tables = Tables::new(txn, &mut lsns);
        tables.active()?;
        tables.log()?;
        tables.inbox()?;
        for table in
            [NamedTable::Turns, NamedTable::Agents, NamedTable::Keys, NamedTable::Tenants, NamedTable::McpServers]
        {
            tables.named(table)?;
        }
        tables.meta()?;
        tables.owners()?;
        tables.decisions()?;
        tables.session_counts()?;
        Ok(())
    }

    pub(crate) fn active(&mut self) -> Result<&mut Table<'txn, &'static str, ()>, StoreError> {
        opened(&mut self.active, self.txn, ACTIVE, name::ACTIVE)
    }

    pub(crate) fn log(&mut self) -> Result<&mut SeqTableOf<'txn>, StoreError> {
        opened(&mut self.log, self.txn, LOG, name::LOG)
    }

    pub(crate) fn inbox(&mut self) -> Result<&mut SeqTableOf<'txn>, StoreError> {
        opened(&mut self.inbox, self.txn, INBOX, name::INBOX)
    }

    pub(crate) fn meta(&mut self) -> Result<&mut Table<'txn, &'static str, u64>, StoreError> {
        opened(&mut self.meta, self.txn, META, name::META)
    }

    pub(crate) fn owners(
        &mut self,
    ) -> Result<&mut Table<'txn, (&'static str, &'static str, &'static str), ()>, StoreError> {
        opened(&mut self.owners, self.txn, OWNERS, name::OWNERS)
    }

    pub(crate) fn decisions(
        &mut self,
    ) -> Result<&mut Table<'txn, (&'static str, &'static str, &'static str), u64>, StoreError> {
        opened(&mut self.decisions, self.txn, DECISIONS, name::DECISIONS)
    }

    /// Adds each count to its (tenant, agent, version)'s.
    pub(crate) fn add_decisions<'k>(
        &mut self,
        counts: impl IntoIterator<Item = ((&'k str, &'k str, &'k str), u64)>,
    ) -> Result<(), StoreError> {
        for (key, decisions) in counts {
            add_to(self.decisions()?, key, decisions, name::DECISIONS)?;
        }
        Ok(())
    }

    pub(crate) fn session_counts(&mut self) -> Result<&mut Table<'txn, &'static str, u64>, StoreError> {
        opened(&mut self.session_counts, self.txn, SESSION_COUNTS, name::SESSION_COUNTS)
    }

    pub(crate) fn named(&mut self, table: NamedTable) -> Result<(&mut NamedTableOf<'txn>, &'static str), StoreError> {
        let (slot, definition, name) = match table {
            NamedTable::Turns => (&mut self.turns, TURNS, name::TURNS),
            NamedTable::Agents => (&mut self.agents, AGENTS, name::AGENTS),
            NamedTable::Keys => (&mut self.keys, KEYS, name::KEYS),
            NamedTable::Tenants => (&mut self.tenants, TENANTS, name::TENANTS),
            NamedTable::McpServers => (&mut self.mcp_servers, MCP_SERVERS, name::MCP_SERVERS),
        };
        Ok((opened(slot, self.txn, definition, name)?, name))
    }

    /// Counts the new session `key` (a storage key) in its tenant's
    /// sessions and lists it under its owner, read from its first record
    /// `value`, if it has one.
    fn index_new_session(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        /// The one field of a session record the index needs: its
        /// identity's id.
        #[derive(serde::Deserialize)]
        struct Owned {
            identity: Identity,
        }
        #[derive(serde::Deserialize)]
        struct Identity {
            #[serde(default)]
            id: Option<String>,
        }
        let session = parse_key(name::SESSIONS, key)?;
        add_to(self.session_counts()?, session.tenant.as_str(), 1, name::SESSION_COUNTS)?;
        let owned: Owned = decode(name::SESSIONS, value)?;
        let Some(owner) = owned.identity.id else { return Ok(()) };
        self.owners()?
            .insert((session.tenant.as_str(), owner.as_str(), session.session.as_str()), ())
            .map_err(|err| redb_error(name::OWNERS, err))?;
        Ok(())
    }

    /// The next log number of session `key`: one past its newest entry.
    /// Read from the log itself rather than kept in `meta`, so a commit
    /// writes no page outside the log for it, unless the writer still
    /// knows it from an earlier write.
    pub(crate) fn next_lsn(&mut self, key: &str) -> Result<u64, StoreError> {
        let last = match self.lsns.0.get(key) {
            Some(&last) => last,
            None => {
                let log = self.log()?;
                let newest =
                    log.range((key, 0)..(key, HISTORY_END)).map_err(|err| redb_error(name::LOG, err))?.next_back();
                match newest {
                    Some(entry) => entry.map_err(|err| redb_error(name::LOG, err))?.0.value().1,
                    None => 0,
                }
            }
        };
        match last.checked_add(1) {
            Some(next) if next < HISTORY_END => Ok(next),
            _ => Err(StoreError::Corrupt {
                table: name::LOG,
                message: format!("the log numbers of {key} are exhausted"),
            }),
        }
    }

    pub(crate) fn apply(&mut self, write: &Write) -> Result<(), StoreError> {
        match write {
            Write::Session { key, active, value } => {
                let key = key.as_str();
                let created = self
                    .log()?
                    .insert((key, SESSION_SLOT), value.as_slice())
                    .map_err(|err| redb_error(name::LOG, err))?
                    .is_none();
                // A session's owner is set when it is created and never
                // changes: its first record is the one to index.
                if created {
                    self.index_new_session(key, value)?;
                }
                // A read costs no page; a write, even of what is there,
                // dirties one. Most commits do not change the status.
                let table = self.active()?;
                let listed = table.get(key).map_err(|err| redb_error(name::ACTIVE, err))?.is_some();
                if *active && !listed {
                    table.insert(key, ()).map_err(|err| redb_error(name::ACTIVE, err))?;
                } else if !*active && listed {
                    table.remove(key).map_err(|err| redb_error(name::ACTIVE, err))?;
                }
            }
            Write::SessionAgent { key, value, unchanged } => {
                let log = self.log()?;
                let slot = (key.as_str(), AGENT_SLOT);
                let same = {
                    let stored = log.get(slot).map_err(|err| redb_error(name::LOG, err))?;
                    stored.as_ref().map(|stored| stored.value()) == value.as_deref()
                };
                // A read costs no page; a write, even of what is there,
                // dirties one, and the config nearly always is the same.
                if !same {
                    match value {
                        Some(value) => log.insert(slot, value.as_slice()).map(drop),
                        None => log.remove(slot).map(drop),
                    }
                    .map_err(|err| redb_error(name::LOG, err))?;
                }
                unchanged.store(same, Ordering::Relaxed);
            }
            Write::Log { key, value } => {
                let lsn = self.next_lsn(key)?;
                self.log()?.insert((key.as_str(), lsn), value.as_slice()).map_err(|err| redb_error(name::LOG, err))?;
                self.lsns.wrote(key, lsn);
            }
            Write::DeleteInbox { key, seq } => {
                self.inbox()?.remove((key.as_str(), *seq)).map_err(|err| redb_error(name::INBOX, err))?;
            }
            Write::PutNamed { table, key, id, value } => {
                let (table, name) = self.named(*table)?;
                table.insert((key.as_str(), id.as_str()), value.as_slice()).map_err(|err| redb_error(name, err))?;
            }
            Write::DeleteNamed { table, key, id } => {
                let (table, name) = self.named(*table)?;
                table.remove((key.as_str(), id.as_str())).map_err(|err| redb_error(name, err))?;
            }
            Write::CountDecisions { tenant, agent, version, decisions } => {
                let key = (tenant.as_str(), agent.as_str(), version.as_str());
                self.add_decisions([(key, *decisions)])?;
            }
            Write::ForgetDecisions { tenant, agent } => {
                // `agent` followed by NUL is the least id after `agent`:
                // the range holds every version of `agent`, and nothing of
                // another agent.
                let next = format!("{agent}\0");
                self.decisions()?
                    .retain_in((tenant.as_str(), agent.as_str(), "")..(tenant.as_str(), next.as_str(), ""), |_, _| {
                        false
                    })
                    .map_err(|err| redb_error(name::DECISIONS, err))?;
            }
            Write::PushInbox { key, value } => {
                let meta = self.meta()?;
                let seq = meta
                    .get(META_NEXT_INBOX)
                    .map_err(|err| redb_error(name::META, err))?
                    .map_or(1, |next| next.value());
                let next = seq.checked_add(1).ok_or_else(|| StoreError::Corrupt {
                    table: name::META,
                    message: "the inbox sequence number is exhausted".to_owned(),
                })?;
                meta.insert(META_NEXT_INBOX, next).map_err(|err| redb_error(name::META, err))?;
                self.inbox()?
                    .insert((key.as_str(), seq), value.as_slice())
                    .map_err(|err| redb_error(name::INBOX, err))?;
            }
        }
        Ok(())
    }
}
