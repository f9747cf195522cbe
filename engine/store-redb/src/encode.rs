//! Encoding: a batch's ops become the writes the writer applies (and
//! the journal records), records become JSON bytes and back.

#[allow(unused_imports)]
use super::*;

/// One op of a batch, encoded and ready to write. Encoding happens on the
/// committing task so the writer thread only touches the disk.
#[derive(Debug)]
pub(crate) enum Write {
    Session {
        key: String,
        active: bool,
        value: Vec<u8>,
    },
    /// The agent config of the session whose record the write before this
    /// one wrote: its JSON, or `None` for none. Applied only when it
    /// differs from what the session's [`AGENT_SLOT`] holds, and then
    /// journaled; otherwise the journal skips it too.
    SessionAgent {
        key: String,
        value: Option<Vec<u8>>,
        /// Set when applying found the slot already holding `value`.
        unchanged: AtomicBool,
    },
    /// A session's history writes of one batch, framed ([`history`]).
    Log {
        key: String,
        value: Vec<u8>,
    },
    PutNamed {
        table: NamedTable,
        key: String,
        id: String,
        value: Vec<u8>,
    },
    DeleteNamed {
        table: NamedTable,
        key: String,
        id: String,
    },
    PushInbox {
        key: String,
        value: Vec<u8>,
    },
    DeleteInbox {
        key: String,
        seq: u64,
    },
    /// Adds to the decisions of (tenant, agent, version).
    CountDecisions {
        tenant: String,
        agent: String,
        version: String,
        decisions: u64,
    },
    /// Forgets every decision count of (tenant, agent).
    ForgetDecisions {
        tenant: String,
        agent: String,
    },
}

impl Write {
    /// The storage key of the session the write touches.
    #[cfg(test)]
    pub(crate) fn key(&self) -> &str {
        match self {
            Write::Session { key, .. }
            | Write::SessionAgent { key, .. }
            | Write::Log { key, .. }
            | Write::PutNamed { key, .. }
            | Write::DeleteNamed { key, .. }
            | Write::PushInbox { key, .. }
            | Write::DeleteInbox { key, .. } => key,
            Write::CountDecisions { tenant, .. } | Write::ForgetDecisions { tenant, .. } => tenant,
        }
    }
}

/// Tables keyed by (session or tenant, id).
#[derive(Debug, Clone, Copy)]
pub(crate) enum NamedTable {
    Turns,
    Agents,
    Keys,
    Tenants,
    McpServers,
}

/// Encodes a batch's ops for the writer. A session's messages, steps,
/// events and call changes are framed into one log value, written after
/// the batch's other writes (they touch other tables, so the order between
/// them does not matter).
pub(crate) fn encode(batch: Batch) -> Result<Vec<Write>, StoreError> {
    let mut writes = Vec::with_capacity(batch.ops.len());
    let mut logs: Vec<(SessionKey, Vec<u8>)> = Vec::new();
    for op in batch.ops {
        let write = match op {
            Op::PutSession(mut record) => {
                // The config goes to its own slot, which the writer leaves
                // alone while it holds the same.
                let agent = record.agent.take();
                let key = storage_key(&record.key);
                writes.push(Write::Session {
                    key: key.clone(),
                    active: record.status != SessionStatus::Idle,
                    value: encode_value(name::SESSIONS, &record)?,
                });
                Write::SessionAgent {
                    key,
                    value: agent.as_ref().map(config_json).transpose()?,
                    unchanged: AtomicBool::new(false),
                }
            }
            Op::PutMessage { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Message, seq, "", &record, name::MESSAGES)?;
                continue;
            }
            Op::PutStep { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Step, seq, "", &record, name::STEPS)?;
                continue;
            }
            Op::PutEvent { session, seq, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Event, seq, "", &record, name::EVENTS)?;
                continue;
            }
            Op::PutCall { session, record } => {
                let log = log_of(&mut logs, session);
                history::push_json(log, history::Kind::Call, 0, &record.call.id, &record, name::CALLS)?;
                continue;
            }
            Op::UpdateCall { session, record } => {
                let log = log_of(&mut logs, session);
                let (change, _) = record.split();
                history::push_json(log, history::Kind::CallUpdate, 0, &change.call.id, &change, name::CALLS)?;
                continue;
            }
            Op::DeleteCall { session, call_id } => {
                history::push(log_of(&mut logs, session), history::Kind::CallGone, 0, &call_id, &[])?;
                continue;
            }
            Op::PutTurn { session, turn_id, record } => Write::PutNamed {
                table: NamedTable::Turns,
                key: storage_key(&session),
                id: turn_id,
                value: encode_value(name::TURNS, &record)?,
            },
            Op::PushInbox { session, item } => {
                Write::PushInbox { key: storage_key(&session), value: encode_value(name::INBOX, &item)? }
            }
            Op::DeleteInbox { session, seq } => Write::DeleteInbox { key: storage_key(&session), seq },
            Op::PutAgent(record) => Write::PutNamed {
                table: NamedTable::Agents,
                key: record.tenant.clone(),
                id: record.agent_id.clone(),
                value: encode_value(name::AGENTS, &record)?,
            },
            Op::DeleteAgent { tenant, agent_id } => {
                writes.push(Write::ForgetDecisions { tenant: tenant.clone(), agent: agent_id.clone() });
                Write::DeleteNamed { table: NamedTable::Agents, key: tenant, id: agent_id }
            }
            Op::CountDecisions { tenant, agent_id, version, decisions } => {
                Write::CountDecisions { tenant, agent: agent_id, version, decisions }
            }
            Op::PutKey(record) => Write::PutNamed {
                table: NamedTable::Keys,
                key: record.tenant.clone(),
                id: record.hash.clone(),
                value: encode_value(name::KEYS, &record)?,
            },
            Op::DeleteKey { tenant, hash } => Write::DeleteNamed { table: NamedTable::Keys, key: tenant, id: hash },
            Op::PutTenant(record) => Write::PutNamed {
                table: NamedTable::Tenants,
                key: record.tenant.clone(),
                id: TENANT_SLOT.to_owned(),
                value: encode_value(name::TENANTS, &record)?,
            },
            Op::PutMcpServer(record) => Write::PutNamed {
                table: NamedTable::McpServers,
                key: record.tenant.clone(),
                id: record.name.clone(),
                value: encode_value(name::MCP_SERVERS, &record)?,
            },
            Op::DeleteMcpServer { tenant, name } => {
                Write::DeleteNamed { table: NamedTable::McpServers, key: tenant, id: name }
            }
            Op::DeleteTenant { tenant } => {
                Write::DeleteNamed { table: NamedTable::Tenants, key: tenant, id: TENANT_SLOT.to_owned() }
            }
            // Only a store several nodes share is forwarded requests.
            Op::PutReply { .. } | Op::DeleteReply { .. } => {
                return Err(StoreError::Unsupported(
                    "answers to forwarded requests are kept only by a store several nodes share; a redb store has one \
                     node",
                ));
            }
        };
        writes.push(write);
    }
    writes.extend(logs.into_iter().map(|(session, value)| Write::Log { key: storage_key(&session), value }));
    Ok(writes)
}

/// The log value being built for `session` (a batch nearly always touches
/// one session, so a list is the cheapest map).
pub(crate) fn log_of(logs: &mut Vec<(SessionKey, Vec<u8>)>, session: SessionKey) -> &mut Vec<u8> {
    let at = match logs.iter().position(|(key, _)| *key == session) {
        Some(at) => at,
        None => {
            // A batch's frames (a step, a message, its event) usually come
            // to 1–2 KiB: growing from nothing would copy them several times.
            logs.push((session, Vec::with_capacity(2048)));
            logs.len() - 1
        }
    };
    &mut logs[at].1
}

/// The session's storage key, `tenant/session`. Tenant names are
/// validated where they enter the engine; one with a `/` here would be read
/// back as another tenant's session. Session ids may hold anything, `/`
/// included: the first `/` ends the tenant.
pub(crate) fn storage_key(key: &SessionKey) -> String {
    debug_assert!(!key.tenant.contains('/'), "tenant of session key {key:?} holds a '/'; tenants must pass valid_name");
    key.storage_key()
}

pub(crate) use subs_store::{decode_record as decode, encode_record as encode_value};

/// An agent config's JSON, for its session's slot. Each commit of a
/// session writes its record, and with it the config the session runs
/// with: nearly always the same shared one. So the JSON of the configs
/// encoded last on this thread is kept, found by the config's allocation,
/// and a commit copies it instead of writing the config out again. Only a
/// config of at most `KEPT_BYTES` is kept, so what a thread keeps is
/// bounded whatever configs tenants' agents set.
fn config_json(agent: &Arc<subs_protocol::AgentConfig>) -> Result<Vec<u8>, StoreError> {
    const KEPT: usize = 64;
    const KEPT_BYTES: usize = 16 << 10;
    type Kept = subs_protocol::wit::ByAddress<subs_protocol::AgentConfig, Vec<u8>>;
    thread_local! {
        static ENCODED: std::cell::RefCell<Kept> = const { std::cell::RefCell::new(Kept::new(KEPT)) };
    }
    if let Some(json) = ENCODED.with_borrow(|kept| kept.get(agent).cloned()) {
        return Ok(json);
    }
    let json = encode_value(name::SESSIONS, &**agent)?;
    if json.len() <= KEPT_BYTES {
        ENCODED.with_borrow_mut(|kept| kept.insert(agent, json.clone()));
    }
    Ok(json)
}

pub(crate) fn parse_key(table: &'static str, key: &str) -> Result<SessionKey, StoreError> {
    SessionKey::from_storage_key(key)
        .ok_or_else(|| StoreError::Corrupt { table, message: format!("{key:?} is not a session key") })
}
