//! Requests one node forwards to the node holding a session's lease, and
//! their answers: what goes through the session's inbox
//! ([`InboxItem::Request`](crate::store::InboxItem::Request)) and back
//! through [`Op::PutReply`](crate::store::Op::PutReply) when several nodes
//! share a store (see docs/deployment.md).
//!
//! The shapes are the engine's own and stay stable across versions of a
//! cluster being upgraded node by node: every field is named, and a reply
//! that cannot be read is an error naming the request, never a panic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use subs_protocol::{ClientInput, WorkerIdentity};
use tokio::sync::Notify;

use super::actor::Mailboxes;
use super::apply::{Accepted, InputError, Sender};
use super::env::Env;
use crate::model::Money;
use crate::store::{Batch, InboxItem, Op, SessionKey};

/// How often a forwarded request that has no answer yet looks for one in
/// the store and wakes the session on this node (which takes the session
/// over if its holder died or left): a notice that went missing costs at
/// most this much.
const POLL: Duration = Duration::from_millis(500);

/// How much longer than a lease a caller waits for the node holding a
/// session to answer a forwarded request (see [`wait`]).
pub(crate) const MARGIN: Duration = Duration::from_secs(5);

/// How long a caller waits for the node holding a session to answer a
/// forwarded request: the lease plus [`MARGIN`] (15 s with the default
/// 10 s lease). A live holder answers at once; a dead one's lease lapses
/// within the lease (at once when its death is seen), and this node then
/// takes the session and the request over itself. The request stays in
/// the session's inbox after that, and is acted on when a node takes the
/// session.
pub(crate) fn wait(env: &Env) -> Duration {
    env.store.shared().map_or(Duration::ZERO, |shared| shared.settings().lease) + MARGIN
}

/// Forwards `request` to the node holding the session's lease, through the
/// session's inbox, and waits for its answer (at most [`wait`]).
pub(crate) async fn send(
    env: &Env,
    mail: &dyn Mailboxes,
    key: &SessionKey,
    request: Request,
) -> Result<Reply, InputError> {
    let id = env.replies.new_id(env.store.shared().map_or("", |s| s.node()));
    let what = request.what();
    let request = serde_json::to_value(&request)
        .map_err(|e| InputError::Store(format!("the request could not be encoded: {e}")))?;
    let signal = env.replies.expect(&id);
    let _waiting = Waiting { replies: &env.replies, id: &id };
    let push = Batch::of([Op::PushInbox {
        session: key.clone(),
        item: Box::new(InboxItem::Request { id: id.clone(), request }),
    }]);
    if let Err(error) = env.store.commit(push).await {
        tracing::warn!(%error, request = %id, "a request could not be forwarded to the session's node");
        return Err(if error.may_have_written() {
            InputError::Unavailable(format!(
                "the store failed while the {what} was being passed to the node acting for session `{}`, and \
                 whether it was is unknown: if it was, it will be acted on. {}",
                key.session,
                resend(what)
            ))
        } else {
            InputError::Store("the store is unavailable; nothing of it was kept".to_owned())
        });
    }
    tracing::debug!(request = %id, "forwarded to the session's node");
    let wait = wait(env);
    let give_up = tokio::time::Instant::now() + wait;
    loop {
        let _ = tokio::time::timeout(POLL, signal.notified()).await;
        match env.store.reply(&id).await {
            Ok(Some(stored)) => {
                // Read once; the row is not needed again (a failure to
                // delete it leaves it to the store's sweep of old answers).
                let _ = env.store.commit(Batch::of([Op::DeleteReply { id: id.clone() }])).await;
                let reply: Reply = serde_json::from_value(stored).map_err(|e| {
                    InputError::Unavailable(format!(
                        "the {what} was acted on, but this node cannot read the answer to it (request {id}: {e})"
                    ))
                })?;
                return reply.into_result();
            }
            Ok(None) => {}
            // The store may answer again before the wait is over.
            Err(error) => tracing::debug!(%error, request = %id, "the answer to a forwarded request could not be read"),
        }
        if tokio::time::Instant::now() >= give_up {
            tracing::warn!(request = %id, session = %key, ?wait, "the node acting for the session did not answer in time");
            return Err(InputError::Unavailable(format!(
                "the {what} is stored, but the node acting for session `{}` did not answer within {}s: it will be \
                 acted on when a node takes the session. {}",
                key.session,
                wait.as_secs(),
                resend(what)
            )));
        }
        // The holder may have died or left meanwhile: waking the session
        // here claims it if it is free, and takes in the inbox.
        mail.wake(key);
    }
}

/// How a client learns what became of a request it was not answered: an
/// input sent again with the same `turn_id` is answered with its turn
/// (`existing: true` if the first was stored); one without a `turn_id`
/// would start another turn.
fn resend(what: &str) -> &'static str {
    if what == "input" {
        "Send it again with the same turn_id to learn its turn (without a turn_id, sending it again starts another \
         turn)."
    } else {
        "Read the session to learn whether it was."
    }
}

/// Forgets a waiter however its wait ends.
struct Waiting<'a> {
    replies: &'a Replies,
    id: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.replies.forget(self.id);
    }
}

/// Those on this node waiting for answers to forwarded requests, by
/// request id: woken when the answer is committed, by this node or
/// another (whose notice says so).
#[derive(Default)]
pub(crate) struct Replies {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
    next: AtomicU64,
}

impl Replies {
    /// A request id unique across the nodes sharing a store: the node's
    /// name (itself unique) and a counter.
    fn new_id(&self, node: &str) -> String {
        format!("{node}:{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn expect(&self, id: &str) -> Arc<Notify> {
        let notify = Arc::new(Notify::new());
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_owned(), notify.clone());
        notify
    }

    fn forget(&self, id: &str) {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
    }

    /// The answer to request `id` is in the store.
    pub fn signal(&self, id: &str) {
        if let Some(notify) = self.waiting.lock().unwrap_or_else(PoisonError::into_inner).get(id) {
            notify.notify_one();
        }
    }
}

/// What the session's actor is asked to do.
// Built once per forwarded request and moved into its encoding: boxing the
// input would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Take a client input (see `Engine::input_from`).
    Input {
        /// The input.
        input: ClientInput,
        /// Who sent it.
        sender: WireSender,
        /// The span it came with (its `traceparent`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<crate::store::SpanRef>,
    },
    /// Stop the open turn.
    Cancel,
    /// Set (or remove) the session's budget, a decimal string.
    SetBudget {
        /// The budget.
        budget: Option<String>,
    },
}

/// [`Sender`], as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum WireSender {
    /// [`Sender::Tenant`].
    Tenant {
        /// The prefix of its API key, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The identity it names, if any.
        identity: Option<WorkerIdentity>,
    },
    /// [`Sender::Owner`].
    Owner {
        /// The end user.
        identity: WorkerIdentity,
    },
}

impl Request {
    /// What the request is, for messages: `input`, `cancel`, `budget
    /// change`.
    fn what(&self) -> &'static str {
        match self {
            Request::Input { .. } => "input",
            Request::Cancel => "cancel",
            Request::SetBudget { .. } => "budget change",
        }
    }
}

impl From<Sender> for WireSender {
    fn from(sender: Sender) -> Self {
        match sender {
            Sender::Tenant { key, identity } => WireSender::Tenant { key, identity },
            Sender::Owner(identity) => WireSender::Owner { identity },
        }
    }
}

impl From<WireSender> for Sender {
    fn from(sender: WireSender) -> Self {
        match sender {
            WireSender::Tenant { key, identity } => Sender::Tenant { key, identity },
            WireSender::Owner { identity } => Sender::Owner(identity),
        }
    }
}

/// The answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// An input was accepted.
    Accepted {
        /// [`Accepted::turn_id`].
        turn_id: Option<String>,
        /// [`Accepted::existing`].
        existing: bool,
    },
    /// A cancel was done; whether a turn was open.
    Cancelled {
        /// Whether a turn was open.
        open: bool,
    },
    /// A budget was set.
    Done,
    /// The request was refused.
    Refused {
        /// Which [`InputError`].
        error: String,
        /// Its message.
        message: String,
        /// [`InputError::Invalid`]'s field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        field: Option<String>,
    },
}

impl Reply {
    /// The answer to an input.
    pub fn input(result: &Result<Accepted, InputError>) -> Self {
        match result {
            Ok(a) => Reply::Accepted { turn_id: a.turn_id.clone(), existing: a.existing },
            Err(e) => Reply::refused(e),
        }
    }

    /// The answer to a cancel.
    pub fn cancel(result: &Result<bool, InputError>) -> Self {
        match result {
            Ok(open) => Reply::Cancelled { open: *open },
            Err(e) => Reply::refused(e),
        }
    }

    /// The answer to a budget's change.
    pub fn done(result: &Result<(), InputError>) -> Self {
        match result {
            Ok(()) => Reply::Done,
            Err(e) => Reply::refused(e),
        }
    }

    fn refused(error: &InputError) -> Self {
        let (kind, message, field) = match error {
            InputError::Invalid { message, field } => ("invalid", message.clone(), field.clone()),
            InputError::NoSession(session) => ("no_session", session.clone(), None),
            InputError::Conflict(message) => ("conflict", message.clone(), None),
            InputError::Store(message) => ("store", message.clone(), None),
            InputError::Unavailable(message) => ("unavailable", message.clone(), None),
            InputError::LimitExceeded(message) => ("limit_exceeded", message.clone(), None),
            InputError::ShuttingDown => ("shutting_down", String::new(), None),
        };
        Reply::Refused { error: kind.to_owned(), message, field }
    }

    /// The error a refusal carries, as the caller on this node sees it;
    /// `Ok` with the reply when it is not a refusal.
    pub fn into_result(self) -> Result<Reply, InputError> {
        let Reply::Refused { error, message, field } = self else { return Ok(self) };
        Err(match error.as_str() {
            "invalid" => InputError::Invalid { message, field },
            "no_session" => InputError::NoSession(message),
            "conflict" => InputError::Conflict(message),
            "limit_exceeded" => InputError::LimitExceeded(message),
            "shutting_down" => InputError::ShuttingDown,
            "unavailable" => InputError::Unavailable(message),
            _ => InputError::Store(message),
        })
    }
}

/// Reads a budget as sent in a [`Request::SetBudget`]; one that does not
/// parse is refused naming it.
pub(crate) fn budget(budget: Option<String>) -> Result<Option<Money>, InputError> {
    budget
        .map(|b| {
            b.parse::<Money>().map_err(|_| InputError::Invalid {
                message: format!("`{b}` is not a budget in dollars"),
                field: Some("budget".to_owned()),
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_reads_back_as_it_was_sent() {
        let accepted = Ok(Accepted { turn_id: Some("t".to_owned()), existing: true });
        let json = serde_json::to_value(Reply::input(&accepted)).unwrap();
        let back: Reply = serde_json::from_value(json).unwrap();
        assert_eq!(back.into_result().unwrap(), Reply::Accepted { turn_id: Some("t".to_owned()), existing: true });

        for error in [
            InputError::Invalid { message: "bad".to_owned(), field: Some("turn_id".to_owned()) },
            InputError::NoSession("s".to_owned()),
            InputError::Conflict("busy".to_owned()),
            InputError::Store("disk".to_owned()),
            InputError::Unavailable("in doubt".to_owned()),
            InputError::LimitExceeded("full".to_owned()),
            InputError::ShuttingDown,
        ] {
            let json = serde_json::to_value(Reply::input(&Err(error.clone()))).unwrap();
            let back: Reply = serde_json::from_value(json).unwrap();
            assert_eq!(back.into_result().unwrap_err(), error);
        }
    }
}
