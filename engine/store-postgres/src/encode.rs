//! A batch's ops become rows to write and notices to send, on the
//! committing task: the writer only touches the database.

use std::collections::BTreeMap;

use serde::Serialize;
use subs_store::shared::Notice;
use subs_store::{Batch, Fence, Op, SessionKey, SessionStatus, StoreError};

/// Names of the tables, for errors.
pub(crate) mod table {
    pub(crate) const SESSIONS: &str = "sessions";
    pub(crate) const MESSAGES: &str = "messages";
    pub(crate) const STEPS: &str = "steps";
    pub(crate) const EVENTS: &str = "events";
    pub(crate) const CALLS: &str = "calls";
    pub(crate) const TURNS: &str = "turns";
    pub(crate) const INBOX: &str = "inbox";
    pub(crate) const AGENTS: &str = "agents";
    pub(crate) const KEYS: &str = "api_keys";
    pub(crate) const TENANTS: &str = "tenants";
    pub(crate) const MCP_SERVERS: &str = "mcp_servers";
    pub(crate) const REPLIES: &str = "replies";
    pub(crate) const BLOBS: &str = "blobs";
    pub(crate) const LEASES: &str = "leases";
    pub(crate) const NODES: &str = "nodes";
    pub(crate) const DECISIONS: &str = "decisions";
}

/// Tables of a session's history keyed by sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SeqTable {
    Messages = 0,
    Steps = 1,
    Events = 2,
}

/// Tables keyed by text, which ops replace and delete: see [`Write::Named`]
/// for how their keys are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NamedTable {
    /// (tenant, session, call id)
    Calls = 0,
    /// (tenant, session, turn id)
    Turns = 1,
    /// (tenant, agent id, "")
    Agents = 2,
    /// (tenant, hash, "")
    Keys = 3,
    /// (tenant, "", "")
    Tenants = 4,
    /// (request id, "", "")
    Replies = 5,
    /// (tenant, server name, "")
    McpServers = 6,
}

/// One op, encoded.
#[derive(Debug)]
pub(crate) enum Write {
    Session {
        tenant: String,
        id: String,
        active: bool,
        /// The record's `first_open_step`, where `load` reads steps from
        /// (no step is numbered above `i64::MAX`: past it, none).
        open_step: i64,
        identity: Option<String>,
        record: Vec<u8>,
    },
    Seq {
        table: SeqTable,
        tenant: String,
        session: String,
        seq: i64,
        record: Vec<u8>,
    },
    /// A put (`Some`) or delete (`None`) in a table keyed by up to three
    /// texts; the parts a table does not use are empty.
    Named {
        table: NamedTable,
        key: (String, String, String),
        value: Option<Vec<u8>>,
    },
    PushInbox {
        tenant: String,
        session: String,
        item: Vec<u8>,
    },
    DeleteInbox {
        tenant: String,
        session: String,
        seq: i64,
    },
    /// Adds to the decisions of (tenant, agent, version).
    CountDecisions {
        tenant: String,
        agent: String,
        version: String,
        decisions: i64,
    },
    /// Forgets every decision count of (tenant, agent).
    ForgetDecisions {
        tenant: String,
        agent: String,
    },
}

/// A batch ready for the writer.
#[derive(Debug)]
pub(crate) struct Encoded {
    pub(crate) fence: Option<Fence>,
    /// The writes, in op order.
    pub(crate) writes: Vec<Write>,
    /// What the other nodes are told when the batch commits.
    pub(crate) notices: Vec<Notice>,
}

/// Encodes `batch`: its records as JSON, its keys checked (PostgreSQL's
/// text holds no NUL character, its int8 no number above `i64::MAX`),
/// and the notices its commit sends.
pub(crate) fn encode(batch: Batch) -> Result<Encoded, StoreError> {
    if let Some(fence) = &batch.fence {
        text(&fence.key.tenant, "a fenced session's tenant")?;
        text(&fence.key.session, "a fenced session's id")?;
    }
    let mut writes = Vec::with_capacity(batch.ops.len());
    let mut notices = Notices::default();
    for op in batch.ops {
        let write = match op {
            Op::PutSession(record) => {
                let identity = record.identity.id.clone();
                if let Some(identity) = &identity {
                    text(identity, "a session's owner")?;
                }
                let (tenant, id) = session_key(&record.key)?;
                Write::Session {
                    tenant,
                    id,
                    active: record.status != SessionStatus::Idle,
                    open_step: i64::try_from(record.first_open_step).unwrap_or(i64::MAX),
                    identity,
                    record: json(table::SESSIONS, &record)?,
                }
            }
            Op::PutMessage { session, seq, record } => seq_write(SeqTable::Messages, &session, seq, &record)?,
            Op::PutStep { session, seq, record } => seq_write(SeqTable::Steps, &session, seq, &record)?,
            Op::PutEvent { session, seq, record } => {
                let write = seq_write(SeqTable::Events, &session, seq, &record)?;
                notices.event(session, seq);
                write
            }
            // The spec is kept in the call's row with the rest.
            Op::PutCall { session, record } | Op::UpdateCall { session, record } => {
                let (tenant, session) = session_key(&session)?;
                let call_id = text(&record.call.id, "a call id")?.to_owned();
                Write::Named {
                    table: NamedTable::Calls,
                    key: (tenant, session, call_id),
                    value: Some(json(table::CALLS, &record)?),
                }
            }
            Op::DeleteCall { session, call_id } => {
                let (tenant, session) = session_key(&session)?;
                text(&call_id, "a call id")?;
                Write::Named { table: NamedTable::Calls, key: (tenant, session, call_id), value: None }
            }
            Op::PutTurn { session, turn_id, record } => {
                let (tenant, session) = session_key(&session)?;
                text(&turn_id, "a turn id")?;
                Write::Named {
                    table: NamedTable::Turns,
                    key: (tenant, session, turn_id),
                    value: Some(json(table::TURNS, &record)?),
                }
            }
            Op::PushInbox { session, item } => {
                let (tenant, id) = session_key(&session)?;
                notices.inbox(session);
                Write::PushInbox { tenant, session: id, item: json(table::INBOX, &item)? }
            }
            Op::DeleteInbox { session, seq } => {
                let (tenant, session) = session_key(&session)?;
                // No stored item has a number that large: nothing to delete.
                let Ok(seq) = i64::try_from(seq) else { continue };
                Write::DeleteInbox { tenant, session, seq }
            }
            Op::PutAgent(record) => {
                notices.records = true;
                let key =
                    (text(&record.tenant, "a tenant")?.to_owned(), text(&record.agent_id, "an agent id")?.to_owned());
                Write::Named {
                    table: NamedTable::Agents,
                    key: (key.0, key.1, String::new()),
                    value: Some(json(table::AGENTS, &record)?),
                }
            }
            Op::DeleteAgent { tenant, agent_id } => {
                notices.records = true;
                text(&tenant, "a tenant")?;
                text(&agent_id, "an agent id")?;
                writes.push(Write::ForgetDecisions { tenant: tenant.clone(), agent: agent_id.clone() });
                Write::Named { table: NamedTable::Agents, key: (tenant, agent_id, String::new()), value: None }
            }
            Op::CountDecisions { tenant, agent_id, version, decisions } => {
                text(&tenant, "a tenant")?;
                text(&agent_id, "an agent id")?;
                text(&version, "an agent version")?;
                // Counts past int8 stay at its largest, as the sum does.
                let decisions = i64::try_from(decisions).unwrap_or(i64::MAX);
                Write::CountDecisions { tenant, agent: agent_id, version, decisions }
            }
            Op::PutKey(record) => {
                notices.records = true;
                let key = (text(&record.tenant, "a tenant")?.to_owned(), text(&record.hash, "a key hash")?.to_owned());
                Write::Named {
                    table: NamedTable::Keys,
                    key: (key.0, key.1, String::new()),
                    value: Some(json(table::KEYS, &record)?),
                }
            }
            Op::DeleteKey { tenant, hash } => {
                notices.records = true;
                text(&tenant, "a tenant")?;
                text(&hash, "a key hash")?;
                Write::Named { table: NamedTable::Keys, key: (tenant, hash, String::new()), value: None }
            }
            Op::PutTenant(record) => {
                notices.records = true;
                let tenant = text(&record.tenant, "a tenant")?.to_owned();
                Write::Named {
                    table: NamedTable::Tenants,
                    key: (tenant, String::new(), String::new()),
                    value: Some(json(table::TENANTS, &record)?),
                }
            }
            Op::PutMcpServer(record) => {
                notices.records = true;
                let tenant = text(&record.tenant, "a tenant")?.to_owned();
                let name = text(&record.name, "an MCP server name")?.to_owned();
                Write::Named {
                    table: NamedTable::McpServers,
                    key: (tenant, name, String::new()),
                    value: Some(json(table::MCP_SERVERS, &record)?),
                }
            }
            Op::DeleteMcpServer { tenant, name } => {
                notices.records = true;
                text(&tenant, "a tenant")?;
                text(&name, "an MCP server name")?;
                Write::Named { table: NamedTable::McpServers, key: (tenant, name, String::new()), value: None }
            }
            Op::DeleteTenant { tenant } => {
                notices.records = true;
                text(&tenant, "a tenant")?;
                Write::Named { table: NamedTable::Tenants, key: (tenant, String::new(), String::new()), value: None }
            }
            Op::PutReply { id, reply } => {
                text(&id, "a request id")?;
                notices.reply(&id);
                Write::Named {
                    table: NamedTable::Replies,
                    key: (id, String::new(), String::new()),
                    value: Some(json(table::REPLIES, &reply)?),
                }
            }
            Op::DeleteReply { id } => {
                text(&id, "a request id")?;
                Write::Named { table: NamedTable::Replies, key: (id, String::new(), String::new()), value: None }
            }
        };
        writes.push(write);
    }
    Ok(Encoded { fence: batch.fence, writes, notices: notices.finish() })
}

/// The notices of one batch: one per session with events (the range of
/// its events in the batch), per session whose inbox got items, per
/// reply, and one if agents, keys or tenants changed.
#[derive(Default)]
struct Notices {
    events: BTreeMap<SessionKey, (u64, u64)>,
    inbox: Vec<SessionKey>,
    replies: Vec<String>,
    records: bool,
}

impl Notices {
    fn event(&mut self, key: SessionKey, seq: u64) {
        let range = self.events.entry(key).or_insert((seq, seq));
        range.0 = range.0.min(seq);
        range.1 = range.1.max(seq);
    }

    fn inbox(&mut self, key: SessionKey) {
        if !self.inbox.contains(&key) {
            self.inbox.push(key);
        }
    }

    fn reply(&mut self, id: &str) {
        if !self.replies.iter().any(|known| known == id) {
            self.replies.push(id.to_owned());
        }
    }

    fn finish(self) -> Vec<Notice> {
        let mut notices: Vec<Notice> =
            self.events.into_iter().map(|(key, (first, last))| Notice::Events { key, first, last }).collect();
        notices.extend(self.inbox.into_iter().map(|key| Notice::Inbox { key }));
        notices.extend(self.replies.into_iter().map(|id| Notice::Reply { id }));
        if self.records {
            notices.push(Notice::Records);
        }
        notices
    }
}

fn seq_write(table: SeqTable, session: &SessionKey, seq: u64, record: &impl Serialize) -> Result<Write, StoreError> {
    let name = match table {
        SeqTable::Messages => table::MESSAGES,
        SeqTable::Steps => table::STEPS,
        SeqTable::Events => table::EVENTS,
    };
    let (tenant, session_id) = session_key(session)?;
    let seq = i64::try_from(seq).map_err(|_| {
        StoreError::io(
            format!("cannot store {name} {seq} of session {session}"),
            "PostgreSQL's int8 holds sequence numbers up to 9223372036854775807",
        )
    })?;
    Ok(Write::Seq { table, tenant, session: session_id, seq, record: json(name, record)? })
}

/// The key's tenant and session id, checked.
pub(crate) fn session_key(key: &SessionKey) -> Result<(String, String), StoreError> {
    text(&key.tenant, "a tenant")?;
    text(&key.session, "a session id")?;
    Ok((key.tenant.clone(), key.session.clone()))
}

/// `value`, if PostgreSQL's text can hold it (no NUL character).
pub(crate) fn text<'a>(value: &'a str, what: &str) -> Result<&'a str, StoreError> {
    if value.contains('\0') {
        return Err(StoreError::io(
            format!("cannot store {what} {value:?}"),
            "PostgreSQL text cannot hold a NUL character",
        ));
    }
    Ok(value)
}

pub(crate) use subs_store::{decode_record as decode, encode_record as json};

#[cfg(test)]
mod tests {
    use serde_json::json;
    use subs_store::conformance::sample::*;

    use super::*;

    #[test]
    fn notices_sum_up_a_batch() {
        let (a, b) = (key("a"), key("b"));
        let mut batch = full_batch(&a);
        batch.push(Op::PutEvent { session: a.clone(), seq: 3, record: event(3) });
        batch.push(Op::PutEvent { session: b.clone(), seq: 7, record: event(7) });
        batch.push(Op::PushInbox { session: a.clone(), item: Box::new(item("again")) });
        batch.push(Op::PushInbox { session: b.clone(), item: Box::new(item("x")) });
        batch.push(Op::PutReply { id: "r1".to_owned(), reply: json!(1) });
        batch.push(Op::PutKey(api_key("t1", "h", 1)));
        batch.push(Op::DeleteAgent { tenant: "t1".to_owned(), agent_id: "x".to_owned() });
        let encoded = encode(batch).unwrap();
        assert_eq!(
            encoded.notices,
            [
                Notice::Events { key: a.clone(), first: 0, last: 3 },
                Notice::Events { key: b.clone(), first: 7, last: 7 },
                Notice::Inbox { key: a },
                Notice::Inbox { key: b },
                Notice::Reply { id: "r1".to_owned() },
                Notice::Records,
            ]
        );
        assert!(
            encode(Batch::of([Op::PutSession(Box::new(session(&key("s"), SessionStatus::Idle)))]))
                .unwrap()
                .notices
                .is_empty()
        );
    }

    #[test]
    fn what_postgresql_cannot_hold_is_refused_before_it_is_queued() {
        let nul = key("a\0b");
        let err = encode(Batch::of([Op::PutSession(Box::new(session(&nul, SessionStatus::Idle)))])).unwrap_err();
        assert!(err.to_string().contains("NUL"), "{err}");
        let big = Op::PutEvent { session: key("s"), seq: u64::MAX, record: event(0) };
        let err = encode(Batch::of([big])).unwrap_err();
        assert!(err.to_string().contains("int8"), "{err}");
        // Deleting what cannot exist is nothing to write.
        let gone = encode(Batch::of([Op::DeleteInbox { session: key("s"), seq: u64::MAX }])).unwrap();
        assert!(gone.writes.is_empty());
    }
}
