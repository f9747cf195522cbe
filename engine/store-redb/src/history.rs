//! The session history log: how one commit's messages, steps, events and
//! call changes for a session are framed into one `log` value, read back,
//! and how a format-1 file (one table per record kind) is moved into it.
//!
//! Why one value per session per commit: redb's cost per commit is its
//! inserts and, above all, the B-tree pages they dirty (each is copied,
//! checksummed and written). With a table per record kind keyed by
//! session, one step dirtied a leaf in each of five tables, and the
//! sessions of a group commit each dirtied their own: about five pages per
//! step. Framed together, a session's history writes of one commit are one
//! insert at the end of its range of the log.
//!
//! A value is a sequence of frames, each with a fixed header so readers
//! skip what they do not want without parsing JSON:
//!
//! | bytes | field |
//! | --- | --- |
//! | 1 | kind ([`Kind`]) |
//! | 8 | sequence number (messages, steps, events; 0 otherwise), little-endian |
//! | 4 | length of the id (calls; 0 otherwise), little-endian |
//! | 4 | length of the payload, little-endian |
//! | id length | the call's id, UTF-8 |
//! | payload length | the record as JSON (empty when a call is forgotten) |
//!
//! Later frames win: a step stored pending and then decided appears twice,
//! and reads keep the last; a forgotten call's `CallGone` frame cancels
//! its earlier `Call`. A call stored again with its spec unchanged (a new
//! try, its outcome) is a `CallUpdate` frame, its record without the spec:
//! reads take the spec from the call's last `Call` frame, so an LLM call's
//! tool schemas are stored once however often the call changes.

use ::redb::{ReadableTable, Table, WriteTransaction};
use serde::Serialize;

use super::{SESSION_SLOT, name, open_write, redb_error};
use subs_store::StoreError;

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A [`MessageRecord`](subs_store::MessageRecord) under its sequence number.
    Message = 1,
    /// A [`StepRecord`](subs_store::StepRecord) under its sequence number.
    Step = 2,
    /// An [`EventRecord`](subs_store::EventRecord) under its sequence number.
    Event = 3,
    /// A [`CallRecord`](subs_store::CallRecord) under its id.
    Call = 4,
    /// The call of this id is settled and forgotten.
    CallGone = 5,
    /// A [`CallChange`](subs_store::CallChange) of the call of this id: its
    /// record but the spec, which is the one its last `Call` frame holds.
    CallUpdate = 6,
}

impl Kind {
    fn from_byte(byte: u8) -> Option<Self> {
        Some(match byte {
            1 => Kind::Message,
            2 => Kind::Step,
            3 => Kind::Event,
            4 => Kind::Call,
            5 => Kind::CallGone,
            6 => Kind::CallUpdate,
            _ => return None,
        })
    }
}

const HEADER: usize = 1 + 8 + 4 + 4;

/// One frame, borrowed from a log value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame<'a> {
    pub kind: Kind,
    pub seq: u64,
    pub id: &'a str,
    pub payload: &'a [u8],
}

/// Appends a frame to `value`. Fails only for an id or record over 4 GiB,
/// which nothing that passed the engine's limits can be.
pub(super) fn push(value: &mut Vec<u8>, kind: Kind, seq: u64, id: &str, payload: &[u8]) -> Result<(), StoreError> {
    let too_large = || StoreError::io("cannot store a record", format!("{} bytes is too large", payload.len()));
    let id_len = u32::try_from(id.len()).map_err(|_| too_large())?;
    let payload_len = u32::try_from(payload.len()).map_err(|_| too_large())?;
    value.reserve(HEADER + id.len() + payload.len());
    value.push(kind as u8);
    value.extend_from_slice(&seq.to_le_bytes());
    value.extend_from_slice(&id_len.to_le_bytes());
    value.extend_from_slice(&payload_len.to_le_bytes());
    value.extend_from_slice(id.as_bytes());
    value.extend_from_slice(payload);
    Ok(())
}

/// Appends a frame holding `record` as JSON, serialized straight into
/// `value` (no intermediate buffer). `label` names the record kind in the
/// error if it cannot be encoded.
pub(super) fn push_json(
    value: &mut Vec<u8>,
    kind: Kind,
    seq: u64,
    id: &str,
    record: &impl Serialize,
    label: &'static str,
) -> Result<(), StoreError> {
    let start = value.len();
    push(value, kind, seq, id, &[])?;
    let payload_at = value.len();
    if let Err(err) = serde_json::to_writer(&mut *value, record) {
        value.truncate(start);
        return Err(StoreError::io(format!("cannot encode a record for {label}"), err));
    }
    let Ok(len) = u32::try_from(value.len() - payload_at) else {
        let len = value.len() - payload_at;
        value.truncate(start);
        return Err(StoreError::io("cannot store a record", format!("{len} bytes is too large")));
    };
    // The payload length is the header's last word.
    value[start + HEADER - 4..start + HEADER].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// The frames of a log value, in order; an error names what is damaged
/// (the value is then unreadable from that frame on).
pub(super) fn frames(value: &[u8]) -> impl Iterator<Item = Result<Frame<'_>, StoreError>> {
    let mut rest = value;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let frame = next_frame(rest);
        match frame {
            Ok((frame, after)) => {
                rest = after;
                Some(Ok(frame))
            }
            Err(message) => {
                rest = &[];
                Some(Err(StoreError::Corrupt { table: name::LOG, message }))
            }
        }
    })
}

fn next_frame(bytes: &[u8]) -> Result<(Frame<'_>, &[u8]), String> {
    let Some((header, rest)) = bytes.split_first_chunk::<HEADER>() else {
        return Err(format!("a frame is cut short: {} bytes where a header takes {HEADER}", bytes.len()));
    };
    let kind = Kind::from_byte(header[0]).ok_or_else(|| format!("unknown frame kind {}", header[0]))?;
    let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]) as usize;
    let seq = u64::from_le_bytes(header[1..9].try_into().unwrap_or_default());
    let (id_len, payload_len) = (word(9), word(13));
    if rest.len() < id_len.saturating_add(payload_len) {
        return Err(format!(
            "a frame announces {} bytes but only {} follow",
            id_len.saturating_add(payload_len),
            rest.len()
        ));
    }
    let (id, rest) = rest.split_at(id_len);
    let (payload, rest) = rest.split_at(payload_len);
    let id = std::str::from_utf8(id).map_err(|_| "a call id is not UTF-8".to_owned())?;
    Ok((Frame { kind, seq, id, payload }, rest))
}

/// The format-1 tables, read only to move their records into the log.
mod v1 {
    use ::redb::TableDefinition;

    pub const SESSIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("sessions");
    pub const MESSAGES: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("messages");
    pub const STEPS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("steps");
    pub const EVENTS: TableDefinition<(&str, u64), &[u8]> = TableDefinition::new("events");
    pub const CALLS: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("calls");
}

/// Moves the records of format 1's `sessions`, `messages`, `steps`,
/// `events` and `calls` tables into `log` and deletes those tables, inside
/// `txn` (so a crash during the move leaves the file as it was). Each
/// session gets its record at [`SESSION_SLOT`] and at most one log entry
/// per old table, numbered 1, 2, … in that order; returns how many log
/// entries were written. Records are moved as stored, never re-encoded.
pub(super) fn migrate_v1(
    txn: &WriteTransaction,
    log: &mut Table<'_, (&'static str, u64), &'static [u8]>,
) -> Result<u64, StoreError> {
    let old = open_write(txn, v1::SESSIONS, name::SESSIONS)?;
    for entry in old.iter().map_err(|err| redb_error(name::SESSIONS, err))? {
        let (key, value) = entry.map_err(|err| redb_error(name::SESSIONS, err))?;
        log.insert((key.value(), SESSION_SLOT), value.value()).map_err(|err| redb_error(name::LOG, err))?;
    }
    drop(old);
    txn.delete_table(v1::SESSIONS).map_err(|err| redb_error(name::SESSIONS, err))?;
    let mut pending = Pending::default();
    for (table, kind, label) in [
        (v1::MESSAGES, Kind::Message, name::MESSAGES),
        (v1::STEPS, Kind::Step, name::STEPS),
        (v1::EVENTS, Kind::Event, name::EVENTS),
    ] {
        let old = open_write(txn, table, label)?;
        for entry in old.iter().map_err(|err| redb_error(label, err))? {
            let (key, value) = entry.map_err(|err| redb_error(label, err))?;
            let (session, seq) = key.value();
            pending.add(log, session, kind, seq, "", value.value())?;
        }
        pending.flush(log)?;
        drop(old);
        txn.delete_table(table).map_err(|err| redb_error(label, err))?;
    }
    let old = open_write(txn, v1::CALLS, name::CALLS)?;
    for entry in old.iter().map_err(|err| redb_error(name::CALLS, err))? {
        let (key, value) = entry.map_err(|err| redb_error(name::CALLS, err))?;
        let (session, id) = key.value();
        pending.add(log, session, Kind::Call, 0, id, value.value())?;
    }
    pending.flush(log)?;
    drop(old);
    txn.delete_table(v1::CALLS).map_err(|err| redb_error(name::CALLS, err))?;
    Ok(pending.written)
}

/// One session's frames being gathered during the migration.
#[derive(Default)]
struct Pending {
    session: String,
    value: Vec<u8>,
    /// The log number each session is at (old tables are read one after
    /// another, so a session comes back once per table).
    numbers: std::collections::HashMap<String, u64>,
    /// Log entries written so far.
    written: u64,
}

type LogTable<'txn> = Table<'txn, (&'static str, u64), &'static [u8]>;

impl Pending {
    fn add(
        &mut self,
        log: &mut LogTable<'_>,
        session: &str,
        kind: Kind,
        seq: u64,
        id: &str,
        payload: &[u8],
    ) -> Result<(), StoreError> {
        if session != self.session {
            self.flush(log)?;
            session.clone_into(&mut self.session);
        }
        push(&mut self.value, kind, seq, id, payload)
    }

    fn flush(&mut self, log: &mut LogTable<'_>) -> Result<(), StoreError> {
        if self.value.is_empty() {
            return Ok(());
        }
        let number = self.numbers.entry(self.session.clone()).or_insert(0);
        *number += 1;
        log.insert((self.session.as_str(), *number), self.value.as_slice())
            .map_err(|err| redb_error(name::LOG, err))?;
        self.written += 1;
        self.value.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn frames_read_back_as_written() {
        let mut value = Vec::new();
        push(&mut value, Kind::Message, 3, "", b"{\"m\":1}").unwrap();
        push(&mut value, Kind::Call, 0, "call_7", b"{}").unwrap();
        push(&mut value, Kind::CallGone, 0, "call_7", b"").unwrap();
        let read: Vec<_> = frames(&value).map(Result::unwrap).map(|f| (f.kind, f.seq, f.id, f.payload)).collect();
        assert_eq!(
            read,
            [
                (Kind::Message, 3, "", b"{\"m\":1}".as_slice()),
                (Kind::Call, 0, "call_7", b"{}".as_slice()),
                (Kind::CallGone, 0, "call_7", b"".as_slice()),
            ]
        );
    }

    fn kind() -> impl Strategy<Value = Kind> {
        prop_oneof![
            Just(Kind::Message),
            Just(Kind::Step),
            Just(Kind::Event),
            Just(Kind::Call),
            Just(Kind::CallGone),
            Just(Kind::CallUpdate)
        ]
    }

    proptest! {
        /// Any frames read back as written, in order.
        #[test]
        fn any_frames_read_back(
            written in proptest::collection::vec(
                (kind(), any::<u64>(), "[a-z0-9_:.-]{0,40}", proptest::collection::vec(any::<u8>(), 0..300)),
                0..12,
            )
        ) {
            let mut value = Vec::new();
            for (kind, seq, id, payload) in &written {
                push(&mut value, *kind, *seq, id, payload).unwrap();
            }
            let read: Vec<_> = frames(&value)
                .map(|f| f.map(|f| (f.kind, f.seq, f.id.to_owned(), f.payload.to_vec())))
                .collect::<Result<_, _>>()
                .unwrap();
            prop_assert_eq!(read, written);
        }

        /// Damaged or foreign bytes never panic the reader: every frame is
        /// either read or reported as corruption, and the reader stops at
        /// the first damage.
        #[test]
        fn any_bytes_read_or_report_corruption(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..60), 0..6),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            mask in any::<u8>(),
            noise in proptest::collection::vec(any::<u8>(), 0..100),
        ) {
            // Valid frames, then damaged: cut short, one byte changed, or
            // followed by noise.
            let mut bytes = Vec::new();
            for (n, payload) in payloads.iter().enumerate() {
                push(&mut bytes, Kind::Call, n as u64, "call_1", payload).unwrap();
            }
            if !bytes.is_empty() {
                let at = flip.index(bytes.len());
                bytes[at] ^= mask;
                bytes.truncate(cut.index(bytes.len() + 1));
            }
            bytes.extend_from_slice(&noise);
            let mut damaged = false;
            for frame in frames(&bytes) {
                prop_assert!(!damaged, "a frame was read after the damage");
                match frame {
                    Ok(frame) => prop_assert!(frame.payload.len() + frame.id.len() <= bytes.len()),
                    Err(StoreError::Corrupt { table: "log", message }) => {
                        prop_assert!(!message.is_empty());
                        damaged = true;
                    }
                    Err(other) => prop_assert!(false, "unexpected error {other:?}"),
                }
            }
        }
    }

    #[test]
    fn damaged_values_name_the_damage() {
        let mut value = Vec::new();
        push(&mut value, Kind::Step, 1, "", b"{\"a\":1}").unwrap();
        let error = |bytes: &[u8]| match frames(bytes).find_map(Result::err) {
            Some(StoreError::Corrupt { table: "log", message }) => message,
            other => panic!("no corruption reported: {other:?}"),
        };
        assert!(error(&value[..5]).contains("cut short"));
        assert!(error(&value[..value.len() - 1]).contains("announces"));
        let mut unknown = value.clone();
        unknown[0] = 9;
        assert!(error(&unknown).contains("unknown frame kind 9"));
        // Nothing after the damage is read.
        assert_eq!(frames(&value[..5]).count(), 1);
    }
}
