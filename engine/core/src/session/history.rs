//! What a session may hold: the bound on the bytes of messages a session
//! stores (each tenant's `max_session_bytes`), and the bound on how many
//! whole-session reads (snapshots) a tenant may have running at once.
//!
//! A session's messages are what grows without end otherwise: a worker
//! may record a message as large as its decision in every turn, and every
//! message is held in memory while the session is, carried in every
//! decision request (shared, not copied: see [`super::tree`]) and read
//! whole by every snapshot. The count is the JSON length of each recorded
//! message, kept in the session's record
//! ([`SessionRecord::message_bytes`](crate::store::SessionRecord::message_bytes))
//! so that it survives restarts. A decision whose messages would take the
//! session past its bound is refused whole, and its turn fails naming the
//! bound; so is a client's input, with nothing of it stored.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use subs_protocol::{Action, ClientInput, DecisionResponse, DraftMessage, Message};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Session;
use crate::json::json_bytes;

/// The bytes of messages a session may store when its tenant's limits set
/// none: room for long conversations (thousands of turns of text, a few
/// inline images), small enough that a session held in memory, a decision
/// request built from it and a snapshot of it each cost tens of MiB at
/// most.
pub const DEFAULT_MAX_SESSION_BYTES: u64 = 32 << 20;

/// Whole-session reads a tenant may have running at once when its limits
/// set none: each holds the session's messages and their JSON (about
/// three times the session's stored bytes) while it runs.
pub const DEFAULT_MAX_SESSION_READS: usize = 2;

/// The room a message's id takes in its JSON (`"id":"…",`) when the
/// engine mints it: a `msg_` prefix and a 64-bit number, at most. A
/// decision is checked with this much for each message without an id, so
/// that it never records more than it was checked for.
const MINTED_ID_BYTES: u64 = (r#""id":"msg_","#.len() + 20) as u64;

/// Each tenant's bounds on what its sessions hold and on its whole-session
/// reads, with defaults for tenants without their own.
pub(crate) struct HistoryLimits {
    bytes: RwLock<PerTenant<u64>>,
    reads: RwLock<PerTenant<usize>>,
    /// Each tenant's whole-session reads running, as permits of a
    /// semaphore sized by its bound when first needed (and replaced when
    /// the bound changes: reads holding the old one finish under it).
    permits: RwLock<HashMap<String, (usize, Arc<Semaphore>)>>,
}

/// A value per tenant and a default.
struct PerTenant<T> {
    default: T,
    own: HashMap<String, T>,
}

impl<T: Copy> PerTenant<T> {
    fn get(&self, tenant: &str) -> T {
        self.own.get(tenant).copied().unwrap_or(self.default)
    }
}

impl Default for HistoryLimits {
    fn default() -> Self {
        Self {
            bytes: RwLock::new(PerTenant { default: DEFAULT_MAX_SESSION_BYTES, own: HashMap::new() }),
            reads: RwLock::new(PerTenant { default: DEFAULT_MAX_SESSION_READS, own: HashMap::new() }),
            permits: RwLock::default(),
        }
    }
}

impl HistoryLimits {
    /// The bytes of messages a session of `tenant` may store.
    pub fn max_bytes(&self, tenant: &str) -> u64 {
        self.bytes.read().unwrap_or_else(PoisonError::into_inner).get(tenant)
    }

    /// Sets the bytes of messages a session of `tenant` may store
    /// (`None`: the default).
    pub fn set_max_bytes(&self, tenant: &str, max: Option<u64>) {
        let mut bytes = self.bytes.write().unwrap_or_else(PoisonError::into_inner);
        match max {
            Some(max) => bytes.own.insert(tenant.to_owned(), max),
            None => bytes.own.remove(tenant),
        };
    }

    /// Sets the bytes of messages a session may store for tenants without
    /// their own bound.
    pub fn set_default_max_bytes(&self, max: u64) {
        self.bytes.write().unwrap_or_else(PoisonError::into_inner).default = max;
    }

    /// The whole-session reads `tenant` may have running at once.
    pub fn max_reads(&self, tenant: &str) -> usize {
        self.reads.read().unwrap_or_else(PoisonError::into_inner).get(tenant).max(1)
    }

    /// Sets the whole-session reads `tenant` may have running at once
    /// (`None`: the default).
    pub fn set_max_reads(&self, tenant: &str, max: Option<usize>) {
        let mut reads = self.reads.write().unwrap_or_else(PoisonError::into_inner);
        match max {
            Some(max) => reads.own.insert(tenant.to_owned(), max),
            None => reads.own.remove(tenant),
        };
    }

    /// Sets the whole-session reads a tenant without its own bound may
    /// have running at once.
    pub fn set_default_max_reads(&self, max: usize) {
        self.reads.write().unwrap_or_else(PoisonError::into_inner).default = max;
    }

    /// Waits until `tenant` may start one more whole-session read; the
    /// read runs while the permit is held. Reads past the bound wait
    /// their turn, in order: they hold nothing of a session meanwhile.
    pub async fn read_permit(&self, tenant: &str) -> OwnedSemaphorePermit {
        let max = self.max_reads(tenant);
        let current = self.permits.read().unwrap_or_else(PoisonError::into_inner).get(tenant).cloned();
        let semaphore = match current {
            Some((size, semaphore)) if size == max => semaphore,
            _ => {
                let mut permits = self.permits.write().unwrap_or_else(PoisonError::into_inner);
                let entry = permits.entry(tenant.to_owned()).or_insert_with(|| (max, Arc::new(Semaphore::new(max))));
                if entry.0 != max {
                    *entry = (max, Arc::new(Semaphore::new(max)));
                }
                entry.1.clone()
            }
        };
        // The semaphore is never closed.
        semaphore.acquire_owned().await.unwrap_or_else(|_| unreachable!("the semaphore is never closed"))
    }
}

/// The bytes a recorded message counts for: the length of its JSON.
pub(crate) fn message_bytes(message: &Message) -> u64 {
    json_bytes(message)
}

/// The most bytes recording `draft` counts for: its JSON, and room for an
/// id when the engine mints one.
fn draft_bytes(draft: &DraftMessage) -> u64 {
    json_bytes(draft) + if draft.id.is_none() { MINTED_ID_BYTES } else { 0 }
}

impl Session {
    /// The bytes of messages `decision` would record in this session:
    /// its `messages`, and those its `message.send` actions write into
    /// this session.
    fn decision_bytes(&self, decision: &DecisionResponse) -> u64 {
        let own = decision.messages().iter().map(draft_bytes).sum::<u64>();
        let sent = decision
            .actions()
            .iter()
            .filter_map(|a| match a {
                Action::MessageSend(send) if send.session_id == self.record.key.session => Some(&send.message),
                _ => None,
            })
            .map(draft_bytes)
            .sum::<u64>();
        own + sent
    }

    /// Why `decision` may not be applied, if it would take the session's
    /// messages past `max` bytes: the error names the bound, and what the
    /// session holds and the decision adds.
    pub fn refuse_decision_bytes(&self, decision: &DecisionResponse, max: u64) -> Option<String> {
        let adding = self.decision_bytes(decision);
        (adding > 0 && self.record.message_bytes.saturating_add(adding) > max).then(|| {
            format!(
                "the decision would record {adding} bytes of messages in a session holding {} of its \
                 {max} (max_session_bytes); nothing of it was applied",
                self.record.message_bytes
            )
        })
    }

    /// Why `message` (arriving from another session) may not be recorded,
    /// if it would take the session past `max` bytes.
    pub fn refuse_message_bytes(&self, message: &DraftMessage, max: u64) -> Option<String> {
        let adding = draft_bytes(message);
        (self.record.message_bytes.saturating_add(adding) > max).then(|| {
            format!(
                "a message of {adding} bytes would take the session past its {max} bytes of messages \
                 (max_session_bytes; it holds {})",
                self.record.message_bytes
            )
        })
    }

    /// Why the client's `input` may not be taken, if what it would store
    /// takes the session past `max` bytes. With a turn open, an input
    /// starting a turn waits in the session's record whole (its messages,
    /// an action's arguments, client tools), as do the inputs queued
    /// before it: all of them count. Otherwise the messages it adds to the
    /// tree are what its turn records. Inputs that settle something
    /// (results, resumes) record nothing themselves.
    pub fn refuse_input_bytes(&self, input: &ClientInput, max: u64) -> Option<String> {
        let held = self.record.message_bytes;
        match input {
            ClientInput::ClientMessage(_) | ClientInput::ClientMessages(_) | ClientInput::ClientAction(_)
                if self.record.turn.is_some() =>
            {
                let queued: u64 = self.record.queued.iter().map(|q| json_bytes(&q.input)).sum();
                let adding = json_bytes(input);
                (held.saturating_add(queued).saturating_add(adding) > max).then(|| {
                    format!(
                        "the input would wait for the open turn in the session's record with {adding} bytes, \
                         beside {queued} bytes of inputs queued before it and {held} bytes of messages, past \
                         its {max} (max_session_bytes); nothing of it was stored"
                    )
                })
            }
            ClientInput::ClientMessage(m) => {
                let is_new = match self.tree.reconcile_appended(self.record.head_id.as_deref(), &m.message) {
                    Some((_, is_new)) => is_new,
                    None => !m.message.id.as_deref().is_some_and(|id| self.tree.contains(id)),
                };
                self.refuse_new_messages(if is_new { draft_bytes(&m.message) } else { 0 }, max)
            }
            ClientInput::ClientMessages(m) => {
                let new_from = self.tree.reconcile(&m.messages).new_from;
                self.refuse_new_messages(m.messages.iter().skip(new_from).map(draft_bytes).sum(), max)
            }
            _ => None,
        }
    }

    /// Why a client's `adding` bytes of new messages may not be recorded,
    /// if they would take the session past `max`.
    fn refuse_new_messages(&self, adding: u64, max: u64) -> Option<String> {
        let held = self.record.message_bytes;
        (adding > 0 && held.saturating_add(adding) > max).then(|| {
            format!(
                "the input would add {adding} bytes of messages to a session holding {held} of its {max} \
                 (max_session_bytes); nothing of it was stored"
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use subs_protocol::action::MessageSend;
    use subs_protocol::client::{ClientAction, ClientMessages};

    use super::*;
    use crate::session::Change;
    use crate::store::SessionKey;

    fn session() -> Session {
        Session::fresh(SessionKey::new("t", "s"), "agent".to_owned(), Default::default(), 1)
    }

    #[test]
    fn a_recorded_message_counts_its_json_and_a_draft_is_never_counted_for_less() {
        let mut session = session();
        let mut change = Change::default();
        let drafts = [DraftMessage::user("hé \"quoted\"\n"), DraftMessage::assistant("x").with_id("given")];
        let checked: u64 = drafts.iter().map(draft_bytes).sum();
        for draft in drafts {
            session.record_message(draft, &mut change);
        }
        let json: u64 = session.tree.messages().map(|m| serde_json::to_vec(m).unwrap().len() as u64).sum();
        assert_eq!(session.record.message_bytes, json, "the count is the messages' JSON");
        assert!(checked >= json, "a decision is checked for at least what it records: {checked} < {json}");
        // A minted id costs at most its room.
        assert!(checked - json <= MINTED_ID_BYTES, "{checked} - {json}");
    }

    #[test]
    fn a_decision_past_the_bound_is_refused_naming_it_and_one_within_is_not() {
        let mut session = session();
        session.record.message_bytes = 900;
        let small = DecisionResponse::new().with_message(DraftMessage::assistant("ok"));
        assert_eq!(session.refuse_decision_bytes(&small, 1000), None);
        let big = DecisionResponse::new().with_message(DraftMessage::assistant("x".repeat(100)));
        let refused = session.refuse_decision_bytes(&big, 1000).expect("refused");
        assert!(refused.contains("max_session_bytes") && refused.contains("1000"), "{refused}");
        // Messages sent to this session count; those sent elsewhere do not.
        let send = |to: &str| {
            DecisionResponse::new().with_action(Action::MessageSend(MessageSend {
                session_id: to.to_owned(),
                message: DraftMessage::user("y".repeat(100)),
            }))
        };
        assert!(session.refuse_decision_bytes(&send("s"), 1000).is_some());
        assert_eq!(session.refuse_decision_bytes(&send("other"), 1000), None);
        // A decision recording nothing passes a session already past it
        // (one whose bound was lowered): it can still end its turn.
        session.record.message_bytes = 5000;
        assert_eq!(session.refuse_decision_bytes(&DecisionResponse::new().with_action(Action::done()), 1000), None);
    }

    #[test]
    fn an_input_counts_what_it_adds_and_a_queued_one_all_it_carries() {
        let mut session = session();
        let mut change = Change::default();
        session.record_message(DraftMessage::user("a".repeat(50)).with_id("m1"), &mut change);
        let held = session.record.message_bytes;
        let view = |text: &str| {
            ClientInput::ClientMessages(ClientMessages {
                agent_id: "agent".to_owned(),
                turn_id: None,
                messages: vec![DraftMessage::user("a".repeat(50)).with_id("m1"), DraftMessage::user(text)],
                stream: None,
                client: None,
            })
        };
        let added = draft_bytes(&DraftMessage::user("b"));
        // Only the new message counts: the one the tree has is not added again.
        assert_eq!(session.refuse_input_bytes(&view("b"), held + added), None);
        let refused = session.refuse_input_bytes(&view("b"), held + added - 1).expect("refused");
        assert!(refused.contains("max_session_bytes"), "{refused}");
        // An action adds no message.
        let action = ClientInput::ClientAction(ClientAction {
            agent_id: "agent".to_owned(),
            turn_id: None,
            name: "go".to_owned(),
            args: Some(serde_json::json!({"big": "x".repeat(100)})),
        });
        assert_eq!(session.refuse_input_bytes(&action, held), None);
        // With a turn open, the whole input waits in the record, beside
        // those queued before it.
        session.record.turn = Some(crate::store::TurnState {
            turn_id: "t".to_owned(),
            client_tools: Vec::new(),
            started_ms: 1,
            span: None,
            spawn: None,
        });
        let whole = json_bytes(&view("b"));
        assert_eq!(session.refuse_input_bytes(&view("b"), held + whole), None);
        assert!(session.refuse_input_bytes(&view("b"), held + whole - 1).is_some());
        let queued =
            crate::store::QueuedInput { turn_id: "q".to_owned(), input: action.clone(), trace: None, spawn: None };
        session.record.queued.push(queued);
        let refused = session.refuse_input_bytes(&view("b"), held + whole).expect("the queue counts");
        assert!(refused.contains("queued") && refused.contains("max_session_bytes"), "{refused}");
        // Results and resumes record nothing themselves.
        let result = ClientInput::ToolResult(subs_protocol::client::ToolResult {
            id: "c".to_owned(),
            result: Some(serde_json::json!("x".repeat(1000))),
            attempt: None,
        });
        assert_eq!(session.refuse_input_bytes(&result, 0), None);
    }

    #[tokio::test]
    async fn reads_past_a_tenants_bound_wait_for_one_to_finish() {
        let limits = HistoryLimits::default();
        limits.set_max_reads("t", Some(2));
        let first = limits.read_permit("t").await;
        let _second = limits.read_permit("t").await;
        let third = limits.read_permit("t");
        tokio::pin!(third);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(third.as_mut().poll(&mut cx).is_pending(), "a third read waits");
        // Another tenant's reads do not wait on these.
        let _other = limits.read_permit("u").await;
        drop(first);
        let _third = third.await;
        // A changed bound applies to reads started after it.
        limits.set_max_reads("t", Some(3));
        let _fourth = limits.read_permit("t").await;
        assert_eq!(limits.max_bytes("t"), DEFAULT_MAX_SESSION_BYTES);
        limits.set_max_bytes("t", Some(10));
        limits.set_default_max_bytes(20);
        assert_eq!((limits.max_bytes("t"), limits.max_bytes("u")), (10, 20));
        limits.set_max_bytes("t", None);
        assert_eq!(limits.max_bytes("t"), 20);
    }
}
