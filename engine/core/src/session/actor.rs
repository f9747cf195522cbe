//! The task that drives one session.
//!
//! Everything that happens to a session goes through its actor, one
//! message at a time, so the session's decisions are strictly serialized
//! while sessions run concurrently. Work that takes time runs beside the
//! actor's mailbox, so the actor stays free to take inputs and
//! cancellations meanwhile: the delivery in flight (asking the worker for a
//! decision) and the timer are futures the actor polls itself, engine-run
//! LLM calls are tasks of their own that report back with a message. (A
//! spawned task costs a wake-up of another runtime thread and a message
//! back, a few percent of a turn's CPU on a small VM; a session has at most
//! one delivery and one timer at a time.) An actor exits when its session
//! has nothing in flight and is reloaded from the store when something
//! happens to it again, so idle sessions cost no memory.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use subs_protocol::event::Resumer;
use subs_protocol::{CallKind, CallStatus, ClientInput, DecisionResponse, Handler, Trigger};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::apply::{Accepted, InputError, Outcome, Sender};
use super::env::Env;
use super::forward::{self, Reply, Request};
use super::{Change, Session, proposal, validate};
use crate::clock;
use crate::events::{DeltaGate, Event};
use crate::model::Money;
use crate::store::shared::Claim;
use crate::store::{
    CallRecord, Fence, InboxItem, Op, RequestBasis, SessionKey, SpanRef, StepRecord, StepStatus, StoreError,
    StoredTrigger,
};
use crate::tenants::SessionQuota;
use crate::tenants::{NewSession, Reservation};
use crate::worker::{BoxFuture, Delivery, DeltaSink, ERROR_TEXT_BYTES, WorkerError, clip};

/// Whether a delivery of `step` to `worker` may go out before the step is
/// durable: see [`Worker::contained`](crate::worker::Worker::contained).
/// Never an `llm.execute`, whose deltas clients see as they come.
fn contained(worker: Option<&dyn crate::worker::Worker>, step: &StepRecord) -> bool {
    !matches!(step.trigger, StoredTrigger::LlmExecute { .. }) && worker.is_some_and(|w| w.contained())
}

/// What a delivery brought back: the worker's answer, how long it took,
/// and the agent version that answered.
pub(crate) struct Delivered {
    result: Result<DecisionResponse, WorkerError>,
    took: Duration,
    version: Option<String>,
    /// The worker's kind (`component`, `http`).
    kind: &'static str,
    /// The decision's span, when its turn is traced, and when it was sent.
    span: Option<(SpanRef, std::time::SystemTime)>,
    /// What the step keeps of the request, should it decide.
    basis: RequestBasis,
    /// Whether the delivery ran a call and was cut at the call's deadline.
    cut_at_deadline: bool,
}

/// What an actor is told.
///
/// Large payloads are boxed: an actor's channel allocates room for 32
/// messages at once and keeps it while the actor lives, so the size of a
/// message is memory every active session holds (336 bytes unboxed: an
/// 11 KiB block per actor).
pub(crate) enum Msg {
    /// A client input; the reply says whether it was accepted.
    /// The span it came with, if any, rides along.
    Input { input: Box<(ClientInput, Sender, Option<SpanRef>)>, reply: oneshot::Sender<Result<Accepted, InputError>> },
    /// Stop the open turn; the reply says whether a turn was open.
    Cancel { reply: oneshot::Sender<Result<bool, InputError>> },
    /// An engine-run call ended (or failed a try).
    CallDone { call_id: String, attempt: u32, outcome: Box<Outcome> },
    /// Something may have changed: the inbox, or a timer came due.
    Wake,
    /// Sets (or removes) the session's budget.
    SetBudget { budget: Option<Money>, reply: oneshot::Sender<Result<(), InputError>> },
}

/// How an actor reaches the actors of other sessions (to wake them, or
/// cancel their turns) and tells that it leaves: the engine's
/// [`Directory`](super::directory::Directory), or a test's stand-in.
pub(crate) trait Mailboxes: Send + Sync {
    /// Wakes a session: its inbox has an item, or it was created.
    fn wake(&self, key: &SessionKey);
    /// Cancels a session's open turn without waiting for the answer.
    fn cancel(&self, key: &SessionKey);
    /// Lets an idle actor leave, unless a message reached it meanwhile
    /// (then it must go on).
    fn leave(&self, key: &SessionKey, rx: &mpsc::UnboundedReceiver<Msg>) -> bool;
    /// Forgets an actor that stopped on a store failure.
    fn forget(&self, key: &SessionKey);
    /// Whether the session was unfinished when the engine started and is
    /// loaded for the first time since (true once).
    fn take_recovering(&self, key: &SessionKey) -> bool;
}

/// What a caller is told when the commit acting on its request failed:
/// that nothing of it was stored, or, when the commit's outcome is in
/// doubt, that it may have been and how to find out. The store's own
/// words stay in the log: they name the database.
fn not_stored(error: &StoreError) -> InputError {
    match error {
        StoreError::Fenced { .. } => {
            InputError::Store("the session moved to another node meanwhile; nothing of it was kept".to_owned())
        }
        error if error.may_have_written() => InputError::Unavailable(
            "the store failed while this was being stored, and whether it was is unknown. An input sent again \
             with the same turn_id is answered with its turn if the first was stored (without a turn_id, sending \
             it again starts another turn)"
                .to_owned(),
        ),
        _ => InputError::Store("the store is unavailable; nothing of it was kept".to_owned()),
    }
}

/// Whether the session holds sub-agent calls an interrupt queued, which
/// a resume starts.
fn holds_spawns(session: &Session) -> bool {
    session.calls.values().any(|c| c.call.kind == CallKind::SubAgent && c.call.status == CallStatus::Queued)
}

/// How many decisions of a contained agent may be held in memory, applied
/// but not yet committed, before they are committed anyway: a bound on
/// what a crash can make the agent decide again, and on the held batch.
const MAX_HELD: u32 = 8;

/// How soon an actor whose store failed first tries to reload its session
/// (see [`Actor::fall`]); each further failure doubles the wait, up to
/// [`RELOAD_MAX`].
const RELOAD_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries to reload a session whose store
/// failed: what a store that comes back costs the session at most.
const RELOAD_MAX: Duration = Duration::from_secs(1);

/// An actor whose store failed: its session is not in memory, and it
/// reloads it from the store when the timer fires (or a wake comes).
struct Down {
    /// The wait before the next try.
    backoff: Duration,
    /// Fires when the next try is due.
    retry: Pin<Box<tokio::time::Sleep>>,
    /// Failures in a row.
    failures: u32,
}

struct InFlight {
    seq: u64,
    attempt: u32,
    /// Whether the worker is [contained](crate::worker::Worker::contained)
    /// and the step no `llm.execute` (whose deltas clients see at once):
    /// such a delivery may go out before its step is durable, and its
    /// decision may be held.
    contained: bool,
    /// The delivery itself; dropping it gives the delivery up.
    decided: BoxFuture<'static, Box<Delivered>>,
}

/// Decisions of a contained agent applied in memory and not yet committed,
/// with what they wrote: see [`Actor::hold`].
struct Held {
    change: Change,
    decisions: u32,
    /// What came from outside the engine and is held with the decisions
    /// it leads to: see [`Actor::hold_outside`].
    outside: Option<Outside>,
}

/// Tells one waiting for a held change's commit how it went.
type Told = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A client's input or a call's result held with the decisions it leads
/// to.
struct Outside {
    /// When it must be committed at the latest.
    due: tokio::time::Instant,
    /// The answers waiting for the commit (an input's acceptance).
    answers: Vec<Told>,
}

impl Outside {
    /// Answers those waiting for the held change's commit: that it was
    /// made, or why not.
    fn answer(self, committed: Result<(), &StoreError>) {
        for answer in self.answers {
            answer(committed);
        }
    }
}

/// What the actor's loop waits for, besides its mailbox.
enum Next {
    Msg(Option<Msg>),
    /// The delivery in flight ended.
    Decided(Box<Delivered>),
    /// The timer came due.
    Due,
    /// What came from outside and is held must be committed now.
    OutsideDue,
}

pub(crate) struct Actor {
    env: Arc<Env>,
    mail: Arc<dyn Mailboxes>,
    key: SessionKey,
    session: Option<Session>,
    rx: mpsc::UnboundedReceiver<Msg>,
    tx: mpsc::UnboundedSender<Msg>,
    delivery: Option<InFlight>,
    /// Decisions applied but not yet committed; committed before anything
    /// else happens that someone may see.
    held: Option<Held>,
    running: HashMap<String, (u32, JoinHandle<()>)>,
    /// The timer for the earliest backoff or deadline, and when it is due
    /// (ms, the engine's clock).
    timer: Option<(u64, Pin<Box<tokio::time::Sleep>>)>,
    loaded: bool,
    check_inbox: bool,
    /// On a shared store: the token of the session's lease, held by this
    /// node while the actor lives; every commit is fenced by it.
    lease: Option<u64>,
    /// On a shared store: another node holds the session's lease, so this
    /// actor only forwards what it is sent to that node (through the
    /// session's inbox) and leaves.
    remote: bool,
    /// For a session resumed after a restart: its place among the resumed
    /// sessions that may work at once, held until nothing is in flight
    /// (see [`Directory::resume`](super::directory::Directory::resume)).
    resuming: Option<tokio::sync::OwnedSemaphorePermit>,
    /// Set while the store fails: see [`Actor::fall`].
    down: Option<Down>,
    /// The step whose decision is being applied and committed.
    deciding: Option<u64>,
    /// After a failure: the step whose delivery was in flight or whose
    /// decision was not committed. If the reloaded session's front step
    /// is that one, its delivery may have reached the worker and counts,
    /// as after a crash.
    cut: Option<u64>,
}

/// Where the answer to a request goes: back to a caller on this node, or,
/// for a request another node forwarded through the inbox, into the store
/// in the commit that acts on it.
enum Answer<T> {
    Local(oneshot::Sender<Result<T, InputError>>),
    Forwarded { id: String, seq: u64 },
}

/// A request's result, as a forwarded request's stored answer.
trait Replied: Sized {
    fn reply(result: &Result<Self, InputError>) -> Reply;
}

impl Replied for Accepted {
    fn reply(result: &Result<Self, InputError>) -> Reply {
        Reply::input(result)
    }
}

impl Replied for bool {
    fn reply(result: &Result<Self, InputError>) -> Reply {
        Reply::cancel(result)
    }
}

impl Replied for () {
    fn reply(result: &Result<Self, InputError>) -> Reply {
        Reply::done(result)
    }
}

impl Drop for Actor {
    fn drop(&mut self) {
        // An aborted actor (the engine was killed) takes its tasks with it.
        self.stop_tasks();
    }
}

impl Actor {
    pub fn spawn(
        env: Arc<Env>,
        mail: Arc<dyn Mailboxes>,
        key: SessionKey,
        resuming: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> (mpsc::UnboundedSender<Msg>, JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let span = tracing::info_span!("session", tenant = %key.tenant, session = %key.session);
        let actor = Actor {
            env,
            mail,
            key,
            session: None,
            rx,
            tx: tx.clone(),
            delivery: None,
            held: None,
            running: HashMap::new(),
            timer: None,
            loaded: false,
            check_inbox: true,
            lease: None,
            remote: false,
            resuming,
            down: None,
            deciding: None,
            cut: None,
        };
        let task = tokio::spawn(actor.run().instrument(span));
        (tx, task)
    }

    async fn run(mut self) {
        self.serve().await;
        // Ends of the session's turns are no longer told from here.
        self.env.hub.forget_turns(&self.key);
    }

    async fn serve(&mut self) {
        loop {
            if self.down.is_some() {
                if !self.reload().await {
                    return;
                }
                continue;
            }
            if let Err(e) = self.pump().await {
                if !self.failed(&e) {
                    return;
                }
                continue;
            }
            if self.resuming.is_some() && self.delivery.is_none() && self.running.is_empty() && self.held.is_none() {
                // Resumed, and nothing in flight: what it waits for now
                // (children, clients, a backoff) costs no work; the next
                // resumed session may start.
                self.resuming = None;
            }
            let next = if self.is_quiet() {
                // A session that has just gone quiet is often touched again
                // soon (the client's next message); waiting a little before
                // leaving spares reloading it from the store then. A
                // session that does not exist has nothing worth keeping.
                let linger = if self.session.is_some() { self.env.config.session_linger } else { Duration::ZERO };
                match tokio::time::timeout(linger, self.rx.recv()).await {
                    Ok(msg) => Next::Msg(msg),
                    Err(_) if self.mail.leave(&self.key, &self.rx) => {
                        self.release().await;
                        return;
                    }
                    Err(_) => continue,
                }
            } else {
                // Disjoint fields, so they are polled side by side.
                let (rx, delivery, timer) = (&mut self.rx, &mut self.delivery, &mut self.timer);
                let outside = self.held.as_ref().and_then(|held| held.outside.as_ref()).map(|outside| outside.due);
                tokio::select! {
                    msg = rx.recv() => Next::Msg(msg),
                    delivered = async { delivery.as_mut().expect("guarded").decided.as_mut().await },
                        if delivery.is_some() => Next::Decided(delivered),
                    () = async { timer.as_mut().expect("guarded").1.as_mut().await }, if timer.is_some() => Next::Due,
                    () = async { tokio::time::sleep_until(outside.expect("guarded")).await },
                        if outside.is_some() => Next::OutsideDue,
                }
            };
            let handled = match next {
                Next::Msg(None) => return,
                Next::Msg(Some(msg)) => self.handle(msg).await,
                Next::Decided(delivered) => {
                    let d = self.delivery.take().expect("the delivery that ended");
                    // What a node that lost the session's lease decided is stale.
                    if self.remote {
                        Ok(())
                    } else {
                        if d.contained && delivered.took < self.env.config.contained_hold {
                            self.mark_decider(false);
                        }
                        self.deciding = Some(d.seq);
                        let decided = self.on_decided(d.seq, d.attempt, d.contained, *delivered).await;
                        if decided.is_ok() {
                            self.deciding = None;
                        }
                        decided
                    }
                }
                Next::Due => {
                    // Fired once: the next pump arms it again for whatever
                    // is still to come due.
                    self.timer = None;
                    self.check_inbox = true;
                    Ok(())
                }
                // Committed while the delivery waits; its decision is
                // applied when it comes. An agent this slow has the next
                // inputs to its sessions committed at once, until one of
                // its decisions comes in time again.
                Next::OutsideDue => {
                    if self.delivery.as_ref().is_some_and(|delivery| delivery.contained) {
                        self.mark_decider(true);
                    }
                    self.flush().await
                }
            };
            if let Err(e) = handled
                && !self.failed(&e)
            {
                return;
            }
        }
    }

    /// After a failed commit or read: gives the session up to the node
    /// that fenced it, waits for a failing store to answer again, or
    /// stops on one that is closed or unreadable. Whether the actor goes
    /// on.
    fn failed(&mut self, error: &StoreError) -> bool {
        if self.fenced(error) {
            return true;
        }
        if error.is_transient() {
            self.fall(error);
            return true;
        }
        self.halt(error);
        false
    }

    /// The store failed (it restarted, the connection was cut, a commit's
    /// outcome is in doubt): what is in memory may be ahead of the store,
    /// or behind it, so it is dropped, tasks in flight are stopped, and
    /// the session is reloaded from the store, as after a crash, as soon
    /// as the store answers: tried after [`RELOAD_FIRST`], then twice as
    /// long each time up to [`RELOAD_MAX`] (see [`reload`](Self::reload)).
    /// The lease is kept meanwhile (no other node acts for the session
    /// while this one lives), so nothing accepted waits for anything but
    /// the store.
    fn fall(&mut self, error: &StoreError) {
        let failures = self.down.as_ref().map_or(0, |down| down.failures).saturating_add(1);
        if failures == 1 {
            tracing::error!(%error, "the store failed; the session is reloaded from the store once it answers");
        } else {
            tracing::debug!(%error, failures, "the store failed again; the session waits for it");
        }
        let cut = self.delivery.as_ref().map(|delivery| delivery.seq).or(self.deciding.take());
        self.cut = self.cut.or(cut);
        self.env.hub.forget_turns(&self.key);
        self.stop_tasks();
        self.give_up_held(error);
        self.session = None;
        self.loaded = false;
        self.lease = None;
        self.remote = false;
        self.check_inbox = true;
        let backoff = self.down.as_ref().map_or(RELOAD_FIRST, |down| (down.backoff * 2).min(RELOAD_MAX));
        // Reloading at once from a failing store would only fail again.
        self.down = Some(Down { backoff, retry: Box::pin(tokio::time::sleep(backoff)), failures });
    }

    /// While the store fails: waits for the next try, and tries to reload
    /// the session. A request that comes meanwhile is refused at once,
    /// saying nothing of it was stored (trying the store for each would
    /// keep its client waiting for the store's timeout, and the next try
    /// is at most [`RELOAD_MAX`] away); a wake (the store's notices flow
    /// again, a scan found mail) tries at once. Whether the actor goes on.
    async fn reload(&mut self) -> bool {
        let down = self.down.as_mut().expect("called while down");
        let msg = tokio::select! {
            () = down.retry.as_mut() => None,
            msg = self.rx.recv() => match msg {
                Some(msg) => Some(msg),
                None => return false,
            },
        };
        match msg {
            None | Some(Msg::Wake) => {}
            // The reloaded session finds its calls in the store.
            Some(Msg::CallDone { .. }) => return true,
            Some(msg) => {
                self.refuse(msg);
                return true;
            }
        }
        if let Err(error) = self.pump().await {
            return self.failed(&error);
        }
        let failures = self.down.take().map_or(0, |down| down.failures);
        tracing::info!(failures, "the store answers again; the session was reloaded");
        // What the failed commit may have written was never published
        // here: followers read the store again, waiters for turns too.
        self.env.hub.resync(&self.key);
        true
    }

    /// Answers a message the actor cannot act on while its store fails.
    fn refuse(&self, msg: Msg) {
        let refused = || InputError::Store("the store is unavailable; nothing of it was kept".to_owned());
        match msg {
            Msg::Input { reply, .. } => {
                self.env.metrics.input_taken();
                let _ = reply.send(Err(refused()));
            }
            Msg::Cancel { reply } => {
                let _ = reply.send(Err(refused()));
            }
            Msg::SetBudget { reply, .. } => {
                let _ = reply.send(Err(refused()));
            }
            // Reloaded, the session finds what these were about in the
            // store.
            Msg::Wake | Msg::CallDone { .. } => {}
        }
    }

    /// After a commit refused because another node took the session's
    /// lease: what is in memory is given up (the other node acts for the
    /// session now, from the store), and the actor only forwards from
    /// here on. False for any other error.
    fn fenced(&mut self, error: &StoreError) -> bool {
        if !matches!(error, StoreError::Fenced { .. }) {
            return false;
        }
        tracing::warn!(%error, "the session's lease was lost to another node; giving the session up");
        self.env.hub.forget_turns(&self.key);
        self.stop_tasks();
        self.give_up_held(error);
        self.session = None;
        self.lease = None;
        self.remote = true;
        self.check_inbox = false;
        true
    }

    /// Gives the session's lease up as the actor leaves, so that the next
    /// input to any node claims it at once.
    async fn release(&mut self) {
        let (Some(token), Some(shared)) = (self.lease.take(), self.env.store.shared()) else { return };
        if let Err(error) = shared.release(&self.key, token).await {
            // The lease lapses with this node's heartbeat, or goes back to
            // this node at its next claim.
            tracing::warn!(%error, "the session's lease could not be released");
        }
    }

    /// A store closed (the engine is stopping) or unreadable (a corrupt
    /// record): what is in memory may be ahead of the store, so it is
    /// dropped, and the actor stops; the session is reloaded from the
    /// store when next touched. Tasks in flight are stopped, and the
    /// messages already sent to the actor are answered with the error.
    fn halt(&mut self, error: &StoreError) {
        tracing::error!(%error, "session stopped: the store failed");
        self.stop_tasks();
        self.mail.forget(&self.key);
        // Forgotten: nothing more is sent here.
        self.rx.close();
        while let Ok(msg) = self.rx.try_recv() {
            self.refuse(msg);
        }
    }

    fn stop_tasks(&mut self) {
        self.delivery = None;
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
        self.timer = None;
    }

    fn is_quiet(&self) -> bool {
        self.delivery.is_none()
            && self.held.is_none()
            && self.running.is_empty()
            && self.timer.is_none()
            && !self.check_inbox
            && self.session.as_ref().is_none_or(|s| s.next_step().is_none())
    }

    /// Drops what is held uncommitted, answering whoever waits for its
    /// commit with `error`.
    fn give_up_held(&mut self, error: &StoreError) {
        if let Some(outside) = self.held.take().and_then(|held| held.outside) {
            outside.answer(Err(error));
        }
    }

    /// Makes a change durable, then acts on it. A change without a session
    /// in memory (the answer to a forwarded request for a session that
    /// does not exist) is committed as it is.
    async fn commit(&mut self, mut change: Change) -> Result<(), StoreError> {
        let mut outside = None;
        if let Some(held) = self.held.take() {
            change = held.change.then(change);
            outside = held.outside;
        }
        let committed = self.commit_now(change).await;
        if let Some(outside) = outside {
            outside.answer(committed.as_ref().map(|_| ()));
        }
        committed
    }

    /// [`commit`](Self::commit) of a change that includes what was held.
    async fn commit_now(&mut self, mut change: Change) -> Result<(), StoreError> {
        match self.session.as_mut() {
            Some(session) => session.seal(&mut change, self.env.config.clock.now_ms()),
            None if change.batch.is_empty() => return Ok(()),
            None => {}
        }
        change.batch.fence = self.lease.map(|token| Fence { key: self.key.clone(), token });
        // Those waiting for a turn's end get its record from here rather
        // than reading the store again; and, told which turns are open
        // here, need not read it to learn that they are not over.
        let (mut ended, mut opened) = (Vec::new(), Vec::new());
        for op in &change.batch.ops {
            match op {
                Op::PutTurn { session, turn_id, record } if record.status.ended() => {
                    ended.push((session.clone(), turn_id.clone(), record.clone()));
                }
                Op::PutTurn { session, turn_id, .. } if *session == self.key => opened.push(turn_id.clone()),
                _ => {}
            }
        }
        // After the turns were read from it: a turn opened and ended in
        // this one change is announced as both.
        change.batch.coalesce();
        let (ops, began) = (change.batch.ops.len(), std::time::Instant::now());
        self.env.store.commit(change.batch).await?;
        self.env.metrics.committed(ops, began.elapsed());
        for span in change.spans {
            self.env.tracer.send(span);
        }
        self.env.hub.publish_all(change.events.into_iter().map(|(key, seq, record)| (key, Event::stored(seq, record))));
        for turn_id in opened {
            self.env.hub.turn_opened(&self.key, &turn_id);
        }
        for (key, turn_id, record) in ended {
            self.env.hub.turn_ended(&key, (turn_id, record));
        }
        for key in change.wake {
            self.mail.wake(&key);
        }
        for key in change.cancel {
            self.mail.cancel(&key);
        }
        if !change.spent.is_zero() {
            self.env.tenants.add_spend(&self.key.tenant, change.spent);
        }
        change.created.confirm();
        Ok(())
    }

    /// Commits the decisions held, if any.
    async fn flush(&mut self) -> Result<(), StoreError> {
        if self.held.is_none() {
            return Ok(());
        }
        self.commit(Change::default()).await
    }

    /// Keeps a contained agent's applied decision in memory instead of
    /// committing it, so that the next step goes to the agent at once.
    ///
    /// Why this keeps the promise that a step is durable before it is
    /// acted on: delivering a step to a contained agent is not acting on
    /// it. Its decision reaches nothing outside the engine, and is only
    /// applied in memory in turn. What the held decisions lead to, once it
    /// is something anyone else can see (a call started, an event
    /// published, a client or another session answered, a step sent to
    /// any other worker, a turn's end), waits for their commit, which
    /// [`pump`](Self::pump) and every message make first. A crash before
    /// that loses only decisions nobody saw: the session resumes from its
    /// last committed step, and the agent decides again. With
    /// [`hold_outside`](Self::hold_outside), a turn of the `tools` agent
    /// takes three commits where it would take nine.
    fn hold(&mut self, change: Change) {
        self.keep(change).decisions += 1;
    }

    /// Stamps `change` and adds it to what is held: the common part of
    /// [`hold`](Self::hold) and [`hold_outside`](Self::hold_outside).
    fn keep(&mut self, mut change: Change) -> &mut Held {
        let now = self.env.config.clock.now_ms();
        self.session.as_mut().expect("loaded").stamp(&mut change, now);
        let held = self.held.get_or_insert_with(|| Held { change: Change::default(), decisions: 0, outside: None });
        held.change = std::mem::take(&mut held.change).then(change);
        held
    }

    /// Keeps a change made by what came from outside the engine (a
    /// client's input, a call's result), already applied in memory,
    /// uncommitted until the decisions of a contained agent it leads to
    /// are made, and commits them all in one batch; `answer` is told the
    /// outcome of that commit.
    ///
    /// Why this keeps the promise that what comes from outside is durable
    /// before anything acts on it: as for [`hold`](Self::hold), the agent's
    /// decisions reach nothing outside the engine, and the input is
    /// answered, the call's result is acted on, only once the batch that
    /// holds it is committed. A crash before that loses an input no one was
    /// told was taken (its sender sees the request fail), or a result whose
    /// call then runs again, as a call cut short by a crash does. It is
    /// committed within the engine's `contained_hold` whatever the agent
    /// does. The caller checks [`may_hold_outside`](Self::may_hold_outside).
    fn hold_outside(&mut self, change: Change, answer: Option<Told>) {
        let hold = self.env.config.contained_hold;
        let outside = self
            .keep(change)
            .outside
            .get_or_insert_with(|| Outside { due: tokio::time::Instant::now() + hold, answers: Vec::new() });
        outside.answers.extend(answer);
    }

    /// Whether `change`, made by what came from outside, may be held (see
    /// [`hold_outside`](Self::hold_outside)): it tells no one else anything,
    /// and the session's next step goes to a contained agent at once.
    fn may_hold_outside(&self, change: &Change) -> bool {
        !change.tells_others()
            && self
                .session
                .as_ref()
                .is_some_and(|session| !self.env.slow_deciders.contains(&self.key.tenant, &session.record.agent_id))
            && self.delivery.is_none()
            && self.held.as_ref().is_none_or(|held| held.decisions < MAX_HELD)
            && self.deliverable().is_some()
            && !self.must_flush()
    }

    /// Marks the session's agent as one that decides too slowly for an
    /// input to wait for it, or forgets that.
    fn mark_decider(&self, slow: bool) {
        if let Some(session) = &self.session {
            self.env.slow_deciders.set(&self.key.tenant, &session.record.agent_id, slow);
        }
    }

    /// Whether the decisions held must be committed before what the pump
    /// is about to do: anything but delivering (or waiting for) the next
    /// step to a contained agent.
    fn must_flush(&self) -> bool {
        if self.engine_calls().next().is_some() {
            return true;
        }
        match &self.delivery {
            Some(delivery) => !delivery.contained,
            None => self.deliverable().is_none_or(|(_, step)| {
                let worker = self.env.agents.get(&self.key.tenant, &self.session().record.agent_id);
                !contained(worker.as_deref(), step)
            }),
        }
    }

    /// Does whatever can be done now: load, take in the inbox, retry calls
    /// whose backoff passed, start engine-run calls, deliver the next step,
    /// and arm the timer for what comes due later.
    async fn pump(&mut self) -> Result<(), StoreError> {
        if !self.loaded
            && let Some(shared) = self.env.store.shared()
        {
            match shared.claim(&self.key).await? {
                Claim::Granted(lease) => self.lease = Some(lease.token),
                Claim::HeldBy { node } => {
                    tracing::debug!(holder = %node, "the session is leased to another node; forwarding to it");
                    self.loaded = true;
                    self.remote = true;
                    self.cut = None;
                    self.mail.take_recovering(&self.key);
                }
            }
        }
        if self.remote {
            self.check_inbox = false;
            return Ok(());
        }
        if !self.loaded {
            self.session = Session::load(self.env.store.as_ref(), &self.key).await?;
            self.loaded = true;
            // Reloaded after a failure with the front step's delivery cut
            // short, as after a crash: it may have reached the worker.
            let recovering = self.mail.take_recovering(&self.key);
            let front = self.session.as_ref().and_then(|s| s.next_step()).map(|(seq, _)| *seq);
            if self.session.is_some() && (recovering || (front.is_some() && front == self.cut)) {
                self.mark_interrupted().await?;
            }
            self.cut = None;
        }
        // Requests forwarded by other nodes may wait in the inbox of a
        // session that does not exist yet (an input creating it).
        if std::mem::take(&mut self.check_inbox) && (self.session.is_some() || self.lease.is_some()) {
            self.take_inbox().await?;
        }
        if self.session.is_none() {
            return Ok(());
        }

        let now = self.env.config.clock.now_ms();
        let due: Vec<String> = self
            .session()
            .calls
            .values()
            .filter(|c| c.call.status == CallStatus::RetryScheduled && c.retry_at_ms.is_some_and(|t| t <= now))
            .map(|c| c.call.id.clone())
            .collect();
        if !due.is_empty() {
            let ctx = self.env.ctx();
            let mut change = Change::default();
            let session = self.session.as_mut().expect("loaded");
            for id in due {
                session.retry_call(&id, &ctx, &mut change);
            }
            self.commit(change).await?;
        }
        self.expire_calls(now).await?;

        self.refuse_over_budget().await?;
        let mut change = Change::default();
        if self.session.as_mut().expect("loaded").drop_stale_steps(&mut change) {
            self.commit(change).await?;
        }
        // A delivery whose step is gone (the call it runs was settled
        // meanwhile) is given up: its decision could settle nothing.
        let steps = &self.session.as_ref().expect("loaded").steps;
        self.delivery.take_if(|d| !steps.iter().any(|(seq, _)| *seq == d.seq));
        if self.held.is_some() && self.must_flush() {
            self.flush().await?;
        }
        self.start_engine_calls();
        self.list_source_tools().await;
        self.start_delivery();
        self.arm_timer();
        Ok(())
    }

    /// Lists the tools of the sources the agent's config names (its MCP
    /// servers) when a delivery is about to start, so that its proposal
    /// and the model's next call offer them as they are now. The sources
    /// cache their lists: most deliveries cost a lookup.
    async fn list_source_tools(&mut self) {
        if self.delivery.is_some() || self.deliverable().is_none() {
            return;
        }
        let uses = self.session().record.agent.as_ref().and_then(|a| a.mcp.clone()).unwrap_or_default();
        let tools = match (&self.env.config.tool_sources, uses.is_empty()) {
            (Some(sources), false) => sources.tools(&self.key.tenant, &uses).await,
            _ => Vec::new(),
        };
        self.session.as_mut().expect("loaded").source_tools = tools;
    }

    /// Takes in the inbox in order: items for the session are applied,
    /// requests forwarded by other nodes are answered, each in a commit
    /// of its own.
    async fn take_inbox(&mut self) -> Result<(), StoreError> {
        let items = self.env.store.inbox(&self.key).await?;
        if !items.is_empty() {
            // A refused input reloads the session from the store.
            self.flush().await?;
        }
        let env = self.env.clone();
        let mut change = Change::default();
        for (seq, item) in items {
            match item {
                InboxItem::Request { id, request } => {
                    if !change.batch.is_empty() {
                        self.commit(std::mem::take(&mut change)).await?;
                    }
                    self.on_request(seq, id, request).await?;
                }
                item => {
                    // Items for a session that does not exist wait, as
                    // they always have, until it does.
                    if let Some(session) = self.session.as_mut() {
                        session.take_inbox(seq, item, &env.ctx(), &mut change);
                    }
                }
            }
        }
        if !change.batch.is_empty() {
            self.commit(change).await?;
        }
        Ok(())
    }

    /// Acts on a request another node forwarded, and stores the answer
    /// with what it changed.
    async fn on_request(&mut self, seq: u64, id: String, request: serde_json::Value) -> Result<(), StoreError> {
        let request = match serde_json::from_value::<Request>(request) {
            Ok(request) => request,
            Err(e) => {
                let error = InputError::Store(format!("the forwarded request {id} is unreadable: {e}"));
                return self.respond::<()>(Answer::Forwarded { id, seq }, Err(error), Change::default(), false).await;
            }
        };
        match request {
            Request::Input { input, sender, trace } => {
                self.on_input(input, sender.into(), trace, Answer::Forwarded { id, seq }).await
            }
            Request::Cancel => self.on_cancel(Answer::Forwarded { id, seq }).await,
            Request::SetBudget { budget } => match forward::budget(budget) {
                Ok(budget) => self.on_set_budget(budget, Answer::Forwarded { id, seq }).await,
                Err(e) => self.respond::<()>(Answer::Forwarded { id, seq }, Err(e), Change::default(), false).await,
            },
        }
    }

    /// Answers a request once `change` (what acting on it wrote) is
    /// durable: a local caller after the commit, a forwarded request by
    /// storing its answer in that same commit. A failed commit answers a
    /// local caller with the store's error; a forwarded request stays in
    /// the inbox, to be acted on again when the session is reloaded.
    /// `always` commits even a change that writes nothing but the
    /// session's record.
    async fn respond<T: Replied + Send + 'static>(
        &mut self,
        answer: Answer<T>,
        result: Result<T, InputError>,
        mut change: Change,
        always: bool,
    ) -> Result<(), StoreError> {
        let reply = match &answer {
            Answer::Forwarded { id, seq } => {
                let reply = serde_json::to_value(T::reply(&result)).unwrap_or_default();
                change.batch.push(Op::DeleteInbox { session: self.key.clone(), seq: *seq });
                change.batch.push(Op::PutReply { id: id.clone(), reply });
                Some(id.clone())
            }
            Answer::Local(_) => None,
        };
        let answer = match answer {
            Answer::Local(tx) if result.is_ok() && self.may_hold_outside(&change) => {
                let told = move |committed: Result<(), &StoreError>| {
                    let _ = tx.send(committed.map_err(not_stored).and(result));
                };
                self.hold_outside(change, Some(Box::new(told)));
                return Ok(());
            }
            answer => answer,
        };
        let committed = if change.batch.is_empty() && !always { Ok(()) } else { self.commit(change).await };
        match (answer, committed) {
            (Answer::Local(tx), Ok(())) => {
                let _ = tx.send(result);
                Ok(())
            }
            (Answer::Local(tx), Err(e)) => {
                let _ = tx.send(Err(not_stored(&e)));
                Err(e)
            }
            (Answer::Forwarded { .. }, committed) => {
                if let Some(id) = reply
                    && committed.is_ok()
                {
                    self.env.replies.signal(&id);
                }
                committed
            }
        }
    }

    /// Fails the tries of calls whose deadline has passed. A delivery
    /// running one of them (its `tool.execute` or `llm.execute`) is given
    /// up with it.
    async fn expire_calls(&mut self, now: u64) -> Result<(), StoreError> {
        let expired: Vec<String> = self
            .session()
            .open_calls()
            .filter(|c| c.call.status == CallStatus::Pending && c.deadline_ms.is_some_and(|t| t <= now))
            .map(|c| c.call.id.clone())
            .collect();
        if expired.is_empty() {
            return Ok(());
        }
        let ctx = self.env.ctx();
        let mut change = Change::default();
        let session = self.session.as_mut().expect("loaded");
        for id in &expired {
            tracing::info!(call = %id, "a call's deadline passed");
            session.expire(id, &ctx, &mut change);
        }
        // Given up by dropping it.
        self.delivery.take_if(|d| !session.steps.iter().any(|(seq, _)| *seq == d.seq));
        self.commit(change).await
    }

    /// Counts a possibly cut-short delivery of the next step, durably, so
    /// that its redelivery (and one after a further crash) carries a higher
    /// `attempts` than any delivery before.
    async fn mark_interrupted(&mut self) -> Result<(), StoreError> {
        let session = self.session.as_mut().expect("loaded");
        let Some(&(seq, _)) = session.next_step() else { return Ok(()) };
        let Some((_, next)) = session.steps.iter_mut().find(|(s, _)| *s == seq) else { return Ok(()) };
        next.interrupted += 1;
        let mut change = Change::default();
        session.store_step(seq, &mut change);
        self.commit(change).await
    }

    /// Fails, without sending them, the engine-run LLM calls that would
    /// exceed the session's or the tenant's budget.
    async fn refuse_over_budget(&mut self) -> Result<(), StoreError> {
        let session = self.session();
        let waiting: Vec<String> = session
            .calls
            .values()
            .filter(|c| {
                c.call.kind == CallKind::LlmCall
                    && c.call.handler == Some(Handler::Server)
                    && c.call.status == CallStatus::Pending
                    && !self.running.contains_key(&c.call.id)
            })
            .map(|c| c.call.id.clone())
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        // A call's result held uncommitted is not in the tenant's spend
        // yet; a call waits to start, so it is committed now anyway.
        self.flush().await?;
        let session = self.session();
        let spent = session.spent();
        let over = match session.budget() {
            Some(budget) if spent >= budget => {
                Some(format!("the session's budget of ${budget} is spent (${spent} used)"))
            }
            _ => match self.env.tenants.budget(&self.key.tenant) {
                Some(budget) => {
                    let used = self.env.tenants.spent(&self.key.tenant).await?;
                    (used >= budget).then(|| format!("the tenant's budget of ${budget} is spent (${used} used)"))
                }
                None => None,
            },
        };
        let Some(error) = over else { return Ok(()) };
        let ctx = self.env.ctx();
        let mut change = Change::default();
        let session = self.session.as_mut().expect("loaded");
        for id in waiting {
            let outcome = Outcome::Failed {
                error: error.clone(),
                retryable: false,
                code: Some(subs_protocol::ErrorCode::BudgetExceeded),
                detail: None,
                retry_after_ms: None,
            };
            session.settle(&id, outcome, &ctx, &mut change);
        }
        self.commit(change).await
    }

    fn session(&self) -> &Session {
        self.session.as_ref().expect("the session is loaded")
    }

    /// Starts the server-handled LLM calls that are pending and not
    /// running (new ones, retries, and those interrupted by a restart).
    fn start_engine_calls(&mut self) {
        let to_start: Vec<_> = self.engine_calls().cloned().collect();
        for call in to_start {
            if call.call.kind == CallKind::ToolCall {
                self.start_source_call(&call);
                continue;
            }
            let Some(request) = self.session().llm_request(&call) else { continue };
            let now = self.env.config.clock.now_ms();
            let timeout = call.deadline_ms.map(|t| Duration::from_millis(t.saturating_sub(now)));
            let deltas = (call.call.stream == Some(true)).then(|| self.delta_sink(&call.call.id));
            let env = self.env.clone();
            let tx = self.tx.clone();
            let (call_id, attempt) = (call.call.id.clone(), call.call.attempt);
            let span = tracing::info_span!("llm_call", call = %call_id, attempt, model = %request.model);
            let trace = call.span.clone();
            let task = tokio::spawn(
                async move {
                    let running = env.run_llm(request, deltas, timeout);
                    let outcome = crate::telemetry::in_span(trace.as_ref(), running).await;
                    let _ = tx.send(Msg::CallDone { call_id, attempt, outcome: Box::new(outcome) });
                }
                .instrument(span),
            );
            if let Some((_, old)) = self.running.insert(call.call.id.clone(), (call.call.attempt, task)) {
                old.abort();
            }
        }
    }

    /// Starts a try of a call of a tool source's tool (an MCP server's):
    /// stored with its deadline before it starts, like an engine-run LLM
    /// call, and settled by what the source answers.
    fn start_source_call(&mut self, call: &CallRecord) {
        let now = self.env.config.clock.now_ms();
        let timeout = call.deadline_ms.map(|t| Duration::from_millis(t.saturating_sub(now)));
        let (call_id, attempt) = (call.call.id.clone(), call.call.attempt);
        let arguments = match &call.spec {
            super::CallSpec::Tool { arguments, .. } => arguments.clone(),
            _ => "{}".to_owned(),
        };
        let request = crate::tool_sources::SourceCall {
            tenant: self.key.tenant.clone(),
            session: self.key.session.clone(),
            call_id: call_id.clone(),
            attempt,
            name: call.call.name.clone().unwrap_or_default(),
            arguments,
            timeout,
        };
        let progress = self.progress_sink(&call_id);
        let env = self.env.clone();
        let tx = self.tx.clone();
        let span = tracing::info_span!("tool_call", call = %call_id, attempt, tool = %request.name);
        let trace = call.span.clone();
        let task = tokio::spawn(
            async move {
                let outcome = match env.config.tool_sources.clone() {
                    Some(sources) => {
                        let running = async {
                            match timeout {
                                Some(limit) => tokio::time::timeout(limit, sources.call(request, progress))
                                    .await
                                    .unwrap_or_else(|_| crate::tool_sources::SourceOutcome::Failed {
                                        error: format!("the tool call did not finish within {limit:?}"),
                                        retryable: true,
                                        code: Some(subs_protocol::ErrorCode::DeadlineExceeded),
                                    }),
                                None => sources.call(request, progress).await,
                            }
                        };
                        crate::telemetry::in_span(trace.as_ref(), running).await
                    }
                    None => crate::tool_sources::SourceOutcome::Failed {
                        error: "this engine has no tool sources (MCP servers)".to_owned(),
                        retryable: false,
                        code: None,
                    },
                };
                let outcome = match outcome {
                    crate::tool_sources::SourceOutcome::Ok(value) => Outcome::ToolOk(value),
                    crate::tool_sources::SourceOutcome::Failed { error, retryable, code } => {
                        Outcome::Failed { error, retryable, code, detail: None, retry_after_ms: None }
                    }
                };
                let _ = tx.send(Msg::CallDone { call_id, attempt, outcome: Box::new(outcome) });
            }
            .instrument(span),
        );
        if let Some((_, old)) = self.running.insert(call.call.id.clone(), (call.call.attempt, task)) {
            old.abort();
        }
    }

    /// Where a source's progress for call `call_id` goes: to the session's
    /// subscribers as a `tool.progress` frame, not stored.
    fn progress_sink(&self, call_id: &str) -> crate::tool_sources::ProgressSink {
        let env = self.env.clone();
        let key = self.key.clone();
        let call_id = call_id.to_owned();
        Arc::new(move |progress: crate::tool_sources::SourceProgress| {
            // Built from the protocol's own type, so the frame is what the
            // event schema says `tool.progress` is.
            let event = subs_protocol::LiveEvent::from(subs_protocol::event::ToolProgress {
                id: call_id.clone(),
                progress: progress.progress,
                total: progress.total,
                message: progress.message,
            });
            let frame = crate::events::Frame {
                seq: None,
                name: std::borrow::Cow::Borrowed(event.name()),
                data: event.data_json().into_boxed_str(),
            };
            env.hub.publish(&key, frame);
        })
    }

    /// The server-handled LLM and tool-source calls that are pending and
    /// not running.
    fn engine_calls(&self) -> impl Iterator<Item = &CallRecord> {
        self.session().calls.values().filter(|c| {
            matches!(c.call.kind, CallKind::LlmCall | CallKind::ToolCall)
                && c.call.handler == Some(Handler::Server)
                && c.call.status == CallStatus::Pending
                && self.running.get(&c.call.id).is_none_or(|(a, _)| *a != c.call.attempt)
        })
    }

    /// The step to deliver next, unless it waits for its backoff.
    fn deliverable(&self) -> Option<&(u64, StepRecord)> {
        let next = self.session().next_step()?;
        let now = self.env.config.clock.now_ms();
        next.1.retry_at_ms.is_none_or(|t| t <= now).then_some(next)
    }

    /// Where the deltas of one decision or one try of an engine-run call
    /// go: every delta enters the hub here, held to the engine's
    /// [`StreamLimits`](crate::events::StreamLimits) for this decision or
    /// call alone.
    fn delta_sink(&self, call_id: &str) -> DeltaSink {
        let env = self.env.clone();
        let key = self.key.clone();
        let gate = std::sync::Mutex::new(DeltaGate::new(env.config.streams.clone(), call_id));
        let warned = std::sync::atomic::AtomicBool::new(false);
        let call_id = call_id.to_owned();
        Arc::new(move |delta| {
            let admitted = gate.lock().unwrap_or_else(std::sync::PoisonError::into_inner).admit(&delta);
            match admitted {
                Ok(frame) => {
                    env.hub.publish(&key, frame);
                    Ok(())
                }
                Err(refused) => {
                    // Once per call: a flood would otherwise flood the logs.
                    if !warned.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(call = %call_id, reason = %refused, "deltas refused");
                    }
                    Err(refused)
                }
            }
        })
    }

    /// Sends the next step to the worker, unless a delivery is out or the
    /// step waits for its backoff.
    fn start_delivery(&mut self) {
        if self.delivery.is_some() {
            return;
        }
        let Some(&(seq, ref step)) = self.deliverable() else { return };
        let session = self.session();
        let now = self.env.config.clock.now_ms();
        let config = &self.env.config;
        let trigger = session.trigger(&step.trigger);
        let proposed = proposal::propose(session, seq, &trigger, &config.default_model);
        // A step that runs a call (a worker's `tool.execute`, `llm.execute`)
        // takes as long as the call may: until the try's deadline, when it
        // fails as `deadline_exceeded`. Any other step is a decision, bounded
        // by the agent's `timeout_secs`, else the engine's decision timeout.
        let runs_call = session.call_deadline(step).is_some();
        let (timeout, deadline_ms) = match session.call_deadline(step) {
            Some(deadline_ms) => (Duration::from_millis(deadline_ms.saturating_sub(now)), deadline_ms),
            None => {
                let policy = session.retry_policy(&config.default_retry, &config.retry_cap);
                let timeout = policy.timeout_secs.map_or(config.decision_timeout, clock::secs);
                (timeout, now.saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)))
            }
        };
        let deltas = match &trigger {
            Trigger::LlmExecute(t) if t.stream => Some(self.delta_sink(&t.id)),
            _ => None,
        };
        let kind = trigger.kind();
        // A decision's span is a child of the call it executes (a worker-run
        // tool or LLM call), else of its turn's.
        let span = session.record.turn.as_ref().and_then(|t| t.span.as_ref()).map(|turn| {
            let call = match &trigger {
                Trigger::ToolExecute(t) => session.calls.get(&t.id),
                Trigger::LlmExecute(t) => session.calls.get(&t.id),
                _ => None,
            };
            crate::telemetry::child_of(call.and_then(|c| c.span.as_ref()).unwrap_or(turn))
        });
        let request = session.request(step, trigger, proposed, deadline_ms);
        let basis = session.basis(&request);
        let attempt = request.attempts;
        let worker = self.env.agents.get(&self.key.tenant, &session.record.agent_id);
        let contained = contained(worker.as_deref(), step);
        let agent_id = session.record.agent_id.clone();
        let tenant = self.key.tenant.clone();
        let env = self.env.clone();
        let log_span = tracing::info_span!("decision", agent = %agent_id, step = seq, trigger = kind, attempt);
        let decided = Box::pin(
            async move {
                let (sent, sent_at) = (std::time::Instant::now(), std::time::SystemTime::now());
                let version = worker.as_ref().and_then(|w| w.version().map(str::to_owned));
                let worker_kind = worker.as_ref().map_or("none", |w| w.kind());
                let mut cut_at_deadline = false;
                let result = match worker {
                    None => Err(missing_agent(env.store.as_ref(), &tenant, agent_id).await),
                    Some(worker) => {
                        let decided = tokio::time::timeout(timeout, worker.decide(Delivery { request, deltas }));
                        match crate::telemetry::in_span(span.as_ref(), decided).await {
                            Ok(result) => result,
                            Err(_) => {
                                cut_at_deadline = runs_call;
                                Err(WorkerError::Timeout(timeout))
                            }
                        }
                    }
                };
                let took = sent.elapsed();
                env.metrics.delivered(worker_kind, took, result.as_ref().err());
                if let Err(e) = &result {
                    tracing::warn!(error = %clip(e.to_string(), ERROR_TEXT_BYTES), "delivery failed");
                }
                let span = span.map(|span| (span, sent_at));
                Box::new(Delivered { result, took, version, kind: worker_kind, span, basis, cut_at_deadline })
            }
            .instrument(log_span),
        );
        self.delivery = Some(InFlight { seq, attempt, contained, decided });
    }

    /// Arms one timer for the earliest backoff or deadline. One already
    /// behind (it passed while this pump stored something: a slow disk, a
    /// busy host) fires at once, and the next pump acts on it; left
    /// unarmed, nothing would wake the session for it.
    fn arm_timer(&mut self) {
        let session = self.session();
        let now = self.env.config.clock.now_ms();
        let step_due =
            if self.delivery.is_none() { session.next_step().and_then(|(_, s)| s.retry_at_ms) } else { None };
        let call_due = session
            .open_calls()
            .filter_map(|c| match c.call.status {
                CallStatus::RetryScheduled => c.retry_at_ms,
                CallStatus::Pending => c.deadline_ms,
                _ => None,
            })
            .min();
        let Some(due) = step_due.into_iter().chain(call_due).min() else {
            self.timer = None;
            return;
        };
        let at = tokio::time::Instant::now() + Duration::from_millis(due.saturating_sub(now));
        match &mut self.timer {
            Some((armed, _)) if *armed == due => {}
            // Moved rather than made anew: the runtime's timer entry is kept.
            Some((armed, sleep)) => {
                *armed = due;
                sleep.as_mut().reset(at);
            }
            None => self.timer = Some((due, Box::pin(tokio::time::sleep_until(at)))),
        }
    }

    /// Forwards a request to the node holding the session's lease, in a
    /// task of its own, and answers the caller when that node has.
    fn forward<T: Send + 'static>(
        &self,
        request: Request,
        reply: oneshot::Sender<Result<T, InputError>>,
        read: fn(Reply) -> Option<T>,
    ) {
        let (env, mail, key) = (self.env.clone(), self.mail.clone(), self.key.clone());
        tokio::spawn(
            async move {
                let answer = forward::send(&env, mail.as_ref(), &key, request).await.and_then(|reply| {
                    let shown = format!("{reply:?}");
                    read(reply).ok_or_else(|| InputError::Store(format!("the session's node answered {shown}")))
                });
                let _ = reply.send(answer);
            }
            .in_current_span(),
        );
    }

    async fn handle(&mut self, msg: Msg) -> Result<(), StoreError> {
        if self.remote {
            match msg {
                Msg::Input { input, reply } => {
                    self.env.metrics.input_taken();
                    let (input, sender, trace) = *input;
                    let request = Request::Input { input, sender: sender.into(), trace };
                    self.forward(request, reply, |r| match r {
                        Reply::Accepted { turn_id, existing } => Some(Accepted { turn_id, existing }),
                        _ => None,
                    });
                }
                Msg::Cancel { reply } => self.forward(Request::Cancel, reply, |r| match r {
                    Reply::Cancelled { open } => Some(open),
                    _ => None,
                }),
                Msg::SetBudget { budget, reply } => {
                    let request = Request::SetBudget { budget: budget.map(|b| b.to_string()) };
                    self.forward(request, reply, |r| matches!(r, Reply::Done).then_some(()));
                }
                // The holder hears of the store's changes itself; what
                // this node's own tasks report is stale.
                Msg::Wake | Msg::CallDone { .. } => {}
            }
            return Ok(());
        }
        // Whatever a message leads to may be seen, or reload the session.
        self.flush().await?;
        match msg {
            Msg::Input { input, reply } => {
                self.env.metrics.input_taken();
                let (input, sender, trace) = *input;
                self.on_input(input, sender, trace, Answer::Local(reply)).await
            }
            Msg::Cancel { reply } => self.on_cancel(Answer::Local(reply)).await,
            Msg::CallDone { call_id, attempt, outcome } => {
                if self.running.get(&call_id).is_some_and(|(a, _)| *a == attempt) {
                    self.running.remove(&call_id);
                }
                let current = self
                    .session
                    .as_ref()
                    .and_then(|s| s.calls.get(&call_id))
                    .is_some_and(|c| c.call.attempt == attempt && c.call.status == CallStatus::Pending);
                if !current {
                    return Ok(());
                }
                let ctx = self.env.ctx();
                let mut change = Change::default();
                self.session.as_mut().expect("loaded").settle(&call_id, *outcome, &ctx, &mut change);
                if self.may_hold_outside(&change) {
                    self.hold_outside(change, None);
                    return Ok(());
                }
                self.commit(change).await
            }
            Msg::SetBudget { budget, reply } => self.on_set_budget(budget, Answer::Local(reply)).await,
            Msg::Wake => {
                self.check_inbox = true;
                if let Some((due, _)) = &self.timer
                    && *due <= self.env.config.clock.now_ms()
                {
                    self.timer = None;
                }
                Ok(())
            }
        }
    }

    async fn on_cancel(&mut self, answer: Answer<bool>) -> Result<(), StoreError> {
        let open = self.session.as_ref().is_some_and(|s| s.record.turn.is_some());
        let mut change = Change::default();
        if open {
            self.stop_tasks();
            let ctx = self.env.ctx();
            let session = self.session.as_mut().expect("open turn");
            session.fail_turn("the turn was cancelled", "cancelled", &ctx, &mut change);
        }
        let result =
            if self.session.is_some() { Ok(open) } else { Err(InputError::NoSession(self.key.session.clone())) };
        self.respond(answer, result, change, false).await
    }

    async fn on_set_budget(&mut self, budget: Option<Money>, answer: Answer<()>) -> Result<(), StoreError> {
        let Some(session) = self.session.as_mut() else {
            let refused = Err(InputError::NoSession(self.key.session.clone()));
            return self.respond(answer, refused, Change::default(), false).await;
        };
        session.record.budget = budget.map(|b| b.to_string());
        // Nothing but the session's record changes: the commit stores it.
        self.respond(answer, Ok(()), Change::default(), true).await
    }

    async fn on_input(
        &mut self,
        input: ClientInput,
        sender: Sender,
        trace: Option<SpanRef>,
        answer: Answer<Accepted>,
    ) -> Result<(), StoreError> {
        let starts_turn = matches!(
            input,
            ClientInput::ClientMessage(_) | ClientInput::ClientMessages(_) | ClientInput::ClientAction(_)
        );
        let fresh = self.session.is_none();
        let mut created = Reservation::default();
        if let Some(session) = &self.session
            && let Some(refused) = sender.refuse(&self.key.session, &session.record.identity)
        {
            return self.respond(answer, Err(refused), Change::default(), false).await;
        }
        if fresh {
            if !starts_turn {
                let refused = Err(InputError::NoSession(self.key.session.clone()));
                return self.respond(answer, refused, Change::default(), false).await;
            }
            self.env.tenants.count_sessions(&self.key.tenant).await;
            // Reserved before the session exists, so that inputs creating
            // sessions at once cannot all pass the limit; released below
            // with the change, should the input be refused.
            created = match self.env.tenants.reserve(&self.key.tenant, NewSession::Root) {
                Ok(reserved) => reserved,
                Err(refused) => {
                    tracing::warn!(tenant = %self.key.tenant, session = %self.key.session, %refused, "a new session was refused");
                    let refused = Err(InputError::LimitExceeded(refused));
                    return self.respond(answer, refused, Change::default(), false).await;
                }
            };
            let agent_id = match &input {
                ClientInput::ClientMessage(m) => m.agent_id.clone(),
                ClientInput::ClientMessages(m) => m.agent_id.clone(),
                ClientInput::ClientAction(a) => a.agent_id.clone(),
                _ => unreachable!("checked above"),
            };
            let identity = sender.identity();
            self.session = Some(Session::fresh(self.key.clone(), agent_id, identity, self.env.config.clock.now_ms()));
        }
        let mut ctx = self.env.ctx();
        ctx.incoming = trace;
        ctx.resumer = match &sender {
            Sender::Tenant { key, identity } => Resumer::Tenant { key: key.clone(), identity: identity.clone() },
            Sender::Owner(identity) => Resumer::EndUser { identity: identity.clone() },
        };
        if self.session.as_ref().is_some_and(holds_spawns) {
            // A resume may start the sub-agent calls an interrupt held.
            self.env.tenants.count_trees(&self.key.tenant).await;
        }
        let mut change = Change { created, ..Change::default() };
        let session = self.session.as_mut().expect("created above");
        let result = match session.refuse_input_bytes(&input, ctx.history.max_bytes(&self.key.tenant)) {
            Some(refused) => {
                tracing::warn!(session = %self.key, %refused, "an input refused");
                Err(InputError::LimitExceeded(refused))
            }
            None => session.accept_input(input, &ctx, &mut change).await,
        };
        match result {
            Err(e) => {
                // Nothing of a refused input may linger in memory: the
                // session is as stored (what is in memory always is, after
                // each commit), so it is read again. Refusals are rare;
                // copying the whole session before every input, to restore
                // it, cost more than this.
                self.session = Session::load(self.env.store.as_ref(), &self.key).await?;
                self.respond(answer, Err(e), Change::default(), false).await
            }
            Ok(accepted) => self.respond(answer, Ok(accepted), change, false).await,
        }
    }

    async fn on_decided(
        &mut self,
        seq: u64,
        attempt: u32,
        contained: bool,
        delivered: Delivered,
    ) -> Result<(), StoreError> {
        let Delivered { result, took, version, kind, span, basis, cut_at_deadline } = delivered;
        let Some((_, step)) = self.session.as_ref().and_then(|s| s.steps.iter().find(|(s, _)| *s == seq).cloned())
        else {
            // Dropped meanwhile: the call it ran was settled, or the turn
            // ended. Its decision could settle nothing; it is discarded.
            tracing::debug!(step = seq, "a decision for a step no longer open was discarded");
            return Ok(());
        };
        // A delivery running a call that failed once the call's deadline
        // had passed (cut at it, most often) is the call's failure, not the
        // worker's: the try fails as `deadline_exceeded`, retried per the
        // call's policy, and the step goes with it.
        let now = self.env.config.clock.now_ms();
        let session = self.session.as_ref().expect("loaded");
        if result.is_err()
            && let Some(deadline_ms) = session.call_deadline(&step)
            && (cut_at_deadline || deadline_ms <= now)
            && let Some((call_id, _)) = super::apply::runs_call(&step.trigger)
        {
            let call_id = call_id.to_owned();
            tracing::info!(call = %call_id, step = seq, "a call's deadline passed while its worker ran it");
            let ctx = self.env.ctx();
            let mut change = Change::default();
            self.session.as_mut().expect("loaded").expire(&call_id, &ctx, &mut change);
            return self.commit(change).await;
        }
        // A decision may spawn sessions: the limits are checked against the
        // counts in memory.
        let spawns =
            |d: &DecisionResponse| d.actions().iter().any(|a| matches!(a, subs_protocol::Action::SubAgentSpawn(_)));
        if result.as_ref().is_ok_and(spawns) {
            self.env.tenants.count_trees(&self.key.tenant).await;
        }
        let mut ctx = self.env.ctx();
        ctx.decision = span.as_ref().map(|(span, _)| span.clone());
        let bounds = ctx.quota.decision_bounds(&self.key.tenant);
        let session = self.session.as_mut().expect("loaded");
        // The step moves into the session as it is applied; its stored
        // trigger holds only what the turn added, and is cheap to keep.
        let stored = step.trigger.clone();
        let trigger = validate::Answering::stored(&stored);
        // Built only for a traced turn: untraced, a decision costs nothing here.
        let attributes = span.is_some().then(|| {
            let mut attributes = vec![
                KeyValue::new("subs.trigger", trigger.kind),
                KeyValue::new("subs.agent.id", session.record.agent_id.clone()),
                KeyValue::new("subs.worker.kind", kind),
                KeyValue::new("subs.step", i64::try_from(seq).unwrap_or(i64::MAX)),
                KeyValue::new("subs.attempt", i64::from(attempt)),
            ];
            if let Some(version) = &version {
                attributes.push(KeyValue::new("subs.agent.version", version.clone()));
            }
            attributes
        });
        let outcome = match result {
            Ok(decision) => match validate::validate(session, &trigger, &decision, ctx.store, &bounds).await {
                Ok(()) => match session.refuse_decision_bytes(&decision, ctx.history.max_bytes(&self.key.tenant)) {
                    None => Ok(decision),
                    // Not retried: the session's bound is no worker's
                    // passing failure.
                    Some(refused) => Err((refused, false)),
                },
                // Not retried: the same request would break the same rule.
                Err(rule) => Err((clip(format!("the decision was rejected: {rule}"), ERROR_TEXT_BYTES), false)),
            },
            // A trap recurs for the same request: it is retried only when
            // the agent's own retry policy asks for retries.
            Err(e) => {
                let retryable = e.is_retryable() || (e.is_trap() && session.agent_retry().is_some());
                Err((clip(e.to_string(), ERROR_TEXT_BYTES), retryable))
            }
        };
        let mut change = Change::default();
        let failed = match outcome {
            Ok(decision) => {
                let mut step = step;
                step.attempts = attempt.saturating_sub(step.interrupted);
                step.error = None;
                step.retry_at_ms = None;
                step.latency_us = Some(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
                step.agent_version = version;
                session.based(&basis);
                step.request = Some(Box::new(basis));
                session.apply_decision(seq, step, decision, &trigger, &ctx, &mut change);
                None
            }
            Err((error, retryable)) => {
                tracing::warn!(step = seq, attempt, %error, "decision failed");
                let policy = session.retry_policy(ctx.default_retry, ctx.retry_cap);
                let (_, front) = session.steps.iter_mut().find(|(s, _)| *s == seq).expect("checked above");
                let deliveries = attempt.saturating_sub(front.interrupted);
                front.attempts = deliveries;
                front.error = Some(error.clone());
                if retryable && deliveries <= policy.max_retries {
                    front.retry_at_ms = Some(ctx.now_ms + clock::secs_to_ms(policy.backoff_secs(deliveries)));
                    session.store_step(seq, &mut change);
                    self.env.metrics.retried(kind);
                } else {
                    let failed = front.clone();
                    session.finish_step(failed, seq, StepStatus::Failed, &mut change);
                    let message = format!("no decision after {deliveries} deliveries: {error}");
                    session.fail_turn(&message, "decision_failed", &ctx, &mut change);
                }
                Some(error)
            }
        };
        let decided = failed.is_none();
        if let (Some((at, start)), Some(attributes)) = (span, attributes) {
            let name = format!("decision {}", trigger.kind);
            let kind = opentelemetry::trace::SpanKind::Internal;
            let end = start + took;
            change.spans.push(crate::telemetry::Span { at, name, kind, start, end, attributes, error: failed });
        }
        let held = self.held.as_ref().map_or(0, |h| h.decisions);
        if contained && decided && held < MAX_HELD && !change.must_commit() {
            self.hold(change);
            return Ok(());
        }
        self.commit(change).await
    }
}

/// Why no worker answers for `agent_id`: an agent that is nowhere in the
/// store is a deterministic failure, one the store holds is only not
/// loaded on this node yet (another node registered it a moment ago), so
/// the delivery is worth retrying.
async fn missing_agent(store: &dyn crate::store::Store, tenant: &str, agent_id: String) -> WorkerError {
    match store.agent(tenant, &agent_id).await {
        Ok(None) => WorkerError::NoAgent(agent_id),
        Ok(Some(_)) => {
            WorkerError::AgentNotLoaded(format!("agent `{agent_id}` is stored but not loaded on this node yet"))
        }
        Err(error) => WorkerError::AgentNotLoaded(format!(
            "agent `{agent_id}` is not loaded and the store could not say whether it exists: {error}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use subs_protocol::DraftMessage;
    use subs_protocol::client::ClientMessage;
    use tokio::sync::Notify;

    use super::*;
    use crate::EngineConfig;
    use crate::model::Models;
    use crate::session::directory::Directory;
    use crate::store::TurnStatus;
    use crate::store::{MemStore, Store, TurnRecord};
    use crate::worker::{BoxFuture, Worker};

    const TENANT: &str = "acme";

    /// Answers every delivery with the engine's proposal (a user message
    /// becomes an offline-model call whose reply ends the turn), and
    /// records each delivery's `attempts`.
    #[derive(Default)]
    struct Proposer {
        attempts: Mutex<Vec<u32>>,
    }

    impl Worker for Proposer {
        fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            self.attempts.lock().unwrap().push(delivery.request.attempts);
            Box::pin(async move { Ok(delivery.request.proposed) })
        }
    }

    /// Never answers; tells when a delivery starts and when it is given up.
    #[derive(Default)]
    struct Silent {
        started: Notify,
        given_up: Arc<Notify>,
    }

    struct NotifyOnDrop(Arc<Notify>);

    impl Drop for NotifyOnDrop {
        fn drop(&mut self) {
            self.0.notify_one();
        }
    }

    impl Worker for Silent {
        fn decide(&self, _: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            let guard = NotifyOnDrop(self.given_up.clone());
            self.started.notify_one();
            Box::pin(async move {
                let _guard = guard;
                std::future::pending().await
            })
        }
    }

    /// A contained agent that takes `pace_ms` (read when it is asked) to
    /// decide, then decides as [`Proposer`] does.
    #[derive(Default)]
    struct Paced {
        pace_ms: std::sync::atomic::AtomicU64,
        inner: Proposer,
    }

    impl Worker for Paced {
        fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            let pace = Duration::from_millis(self.pace_ms.load(std::sync::atomic::Ordering::Relaxed));
            let decided = self.inner.decide(delivery);
            Box::pin(async move {
                tokio::time::sleep(pace).await;
                decided.await
            })
        }

        fn contained(&self) -> bool {
            true
        }
    }

    fn start(store: &MemStore, agent: Arc<dyn Worker>) -> (Arc<Env>, Arc<Directory>) {
        let env = Env::new(Arc::new(store.clone()), Models::with_offline(), EngineConfig::default());
        env.agents.register(TENANT, "agent", agent);
        let env = Arc::new(env);
        (env.clone(), Directory::new(env))
    }

    fn key(session: &str) -> SessionKey {
        SessionKey::new(TENANT, session)
    }

    async fn say(directory: &Directory, session: &str, turn_id: &str) -> Result<Accepted, InputError> {
        let input = ClientInput::ClientMessage(ClientMessage {
            agent_id: "agent".to_owned(),
            turn_id: Some(turn_id.to_owned()),
            message: DraftMessage::user("hi"),
            stream: None,
        });
        let (reply, answer) = oneshot::channel();
        assert!(directory.send(
            &key(session),
            Msg::Input { input: Box::new((input, Sender::Tenant { key: None, identity: None }, None)), reply }
        ));
        answer.await.expect("the actor answers")
    }

    async fn cancel(directory: &Directory, session: &str) -> Result<bool, InputError> {
        let (reply, answer) = oneshot::channel();
        assert!(directory.send(&key(session), Msg::Cancel { reply }));
        answer.await.expect("the actor answers")
    }

    async fn ended(env: &Env, session: &str, turn_id: &str) -> TurnRecord {
        env.wait_turn(&key(session), turn_id).await.expect("a read of memory")
    }

    /// What one turn of a session whose branch holds `held` messages
    /// writes to the store: ops and bytes, from the input to the turn's end.
    async fn one_turn_at(held: usize) -> crate::store::fault::Written {
        let store = Arc::new(crate::store::fault::FaultyStore::new(MemStore::new()));
        let env = Env::new(store.clone(), Models::with_offline(), EngineConfig::default());
        env.agents.register(TENANT, "agent", Arc::new(Proposer::default()));
        let env = Arc::new(env);
        let directory = Directory::new(env.clone());
        let send = |input: ClientInput| {
            let (reply, answer) = oneshot::channel();
            let sender = Sender::Tenant { key: None, identity: None };
            assert!(directory.send(&key("s"), Msg::Input { input: Box::new((input, sender, None)), reply }));
            answer
        };
        // The branch, in one client view (its turn adds the model's reply).
        let view = (0..held.saturating_sub(1)).map(|i| DraftMessage::user(format!("message {i}"))).collect();
        let input = ClientInput::ClientMessages(subs_protocol::client::ClientMessages {
            agent_id: "agent".to_owned(),
            turn_id: Some("history".to_owned()),
            messages: view,
            stream: None,
            client: None,
        });
        send(input).await.expect("the actor answers").expect("accepted");
        assert_eq!(ended(&env, "s", "history").await.status, TurnStatus::Done);
        let before = store.written();
        send(ClientInput::ClientMessage(ClientMessage {
            agent_id: "agent".to_owned(),
            turn_id: Some("measured".to_owned()),
            message: DraftMessage::user("hi"),
            stream: None,
        }))
        .await
        .expect("the actor answers")
        .expect("accepted");
        assert_eq!(ended(&env, "s", "measured").await.status, TurnStatus::Done);
        store.written() - before
    }

    #[tokio::test]
    async fn a_turns_writes_do_not_grow_with_the_branch() {
        let short = one_turn_at(20).await;
        let long = one_turn_at(2000).await;
        // The same writes; their bytes differ only by the digits of ids,
        // counts and token usage that a longer session has.
        assert_eq!(short.ops, long.ops, "{short:?} against {long:?}");
        assert!(long.bytes <= short.bytes + short.bytes / 10, "{short:?} against {long:?}");
    }

    /// The offline model, noting how each request holds its messages.
    #[derive(Default)]
    struct Noting {
        /// Per request: how many messages, and how many read in place from
        /// the session's branch.
        seen: Mutex<Vec<(usize, usize)>>,
    }

    impl crate::model::Provider for Noting {
        fn complete(
            &self,
            request: subs_protocol::LlmRequest,
            deltas: Option<crate::worker::DeltaSink>,
        ) -> BoxFuture<'_, Result<crate::model::Completion, crate::model::ModelError>> {
            let messages = &request.messages;
            let in_place = messages.iter().filter(|m| matches!(m, subs_protocol::LlmMessage::Recorded(_))).count();
            self.seen.lock().unwrap().push((messages.len(), in_place));
            Box::pin(async move { crate::model::offline::OfflineProvider.complete(request, deltas).await })
        }
    }

    #[tokio::test]
    async fn an_llm_call_reads_the_branch_in_place_rather_than_copying_it() {
        let store = MemStore::new();
        let noting = Arc::new(Noting::default());
        let mut models = Models::with_offline();
        models.register("subs", noting.clone());
        let env = Env::new(Arc::new(store.clone()), models, EngineConfig::default());
        env.agents.register(TENANT, "agent", Arc::new(Proposer::default()));
        let env = Arc::new(env);
        let directory = Directory::new(env.clone());
        for turn in ["t1", "t2"] {
            say(&directory, "s", turn).await.expect("accepted");
            assert_eq!(ended(&env, "s", turn).await.status, TurnStatus::Done);
        }
        // Each call's conversation is the branch (no system prompt here),
        // every message of it the session's own, not a copy.
        let seen = noting.seen.lock().unwrap().clone();
        assert_eq!(seen, [(1, 1), (3, 3)]);
    }

    /// Answers as proposed; notes, of each `client.messages` trigger, the
    /// view's length, how many of its messages it shares with the
    /// request's branch (`None`: it holds its own), and the branch's length.
    #[derive(Default)]
    struct Viewing {
        seen: Mutex<Vec<(usize, Option<usize>, usize)>>,
    }

    impl Worker for Viewing {
        fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            let request = delivery.request;
            if let Trigger::ClientMessages(t) = &request.trigger {
                let shared = t.messages.shared_with(&request.messages).map(|(shared, _)| shared);
                self.seen.lock().unwrap().push((t.messages.len(), shared, request.messages.len()));
            }
            Box::pin(async move { Ok(request.proposed) })
        }
    }

    #[tokio::test]
    async fn a_client_view_shares_the_branch_it_extends_rather_than_copying_it() {
        let store = MemStore::new();
        let viewing = Arc::new(Viewing::default());
        let (env, directory) = start(&store, viewing.clone());
        for turn in ["t1", "t2", "t3"] {
            say(&directory, "s", turn).await.expect("accepted");
            assert_eq!(ended(&env, "s", turn).await.status, TurnStatus::Done);
        }
        // Each turn adds the user's message and the reply: the view is the
        // branch so far plus the new message, the branch's part shared.
        let seen = viewing.seen.lock().unwrap().clone();
        assert_eq!(seen, [(1, None, 0), (3, Some(2), 2), (5, Some(4), 4)]);
    }

    #[tokio::test]
    async fn an_input_is_stored_before_it_is_answered_and_its_turn_runs_to_its_end() {
        let store = MemStore::new();
        let (env, directory) = start(&store, Arc::new(Proposer::default()));
        say(&directory, "s", "t1").await.expect("accepted");
        // Answered: the session and its turn are in the store already.
        assert!(store.session(&key("s")).await.unwrap().is_some());
        assert!(store.turn(&key("s"), "t1").await.unwrap().is_some());
        assert_eq!(ended(&env, "s", "t1").await.status, TurnStatus::Done);
    }

    /// A worker that is [contained](Worker::contained), deciding as `W`.
    struct Contained<W>(W);

    impl<W: std::ops::Deref<Target: Worker> + Send + Sync> Worker for Contained<W> {
        fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            self.0.decide(delivery)
        }

        fn contained(&self) -> bool {
            true
        }
    }

    /// The commits of one turn of a contained agent that proposes: the
    /// input goes with the decision that asks the model, the model's reply
    /// with the decision that ends the turn. Each step is accepted and
    /// decided before the commit that holds it, which stores it once.
    #[tokio::test]
    async fn an_input_and_a_reply_are_committed_with_a_contained_agents_decisions() {
        let store = Arc::new(crate::store::fault::FaultyStore::new(MemStore::new()));
        // A hold no busy host outlasts: the count is the design's, not the
        // machine's speed.
        let config = EngineConfig { contained_hold: Duration::from_secs(30), ..EngineConfig::default() };
        let env = Env::new(store.clone(), Models::with_offline(), config);
        env.agents.register(TENANT, "agent", Arc::new(Contained(Arc::new(Proposer::default()))));
        let env = Arc::new(env);
        let directory = Directory::new(env.clone());
        say(&directory, "s", "t1").await.expect("accepted");
        // Answered: the session and its turn are in the store already.
        assert!(store.session(&key("s")).await.unwrap().is_some());
        assert!(store.turn(&key("s"), "t1").await.unwrap().is_some());
        assert_eq!(ended(&env, "s", "t1").await.status, TurnStatus::Done);
        assert_eq!(store.commits(), 2, "the input and a decision; the reply and a decision");
        let written = store.written();
        assert_eq!(written.superseded, 0, "a write a later one of its batch replaces: {written:?}");
    }

    /// An input waits for a contained agent's decision at most the
    /// engine's `contained_hold`: one that never decides still has the
    /// input stored and answered.
    #[tokio::test]
    async fn an_input_is_committed_and_answered_while_a_contained_agent_takes_its_time() {
        let store = MemStore::new();
        let silent = Arc::new(Silent::default());
        let (_, directory) = start(&store, Arc::new(Contained(silent.clone())));
        let started = silent.started.notified();
        let said = tokio::time::timeout(Duration::from_secs(5), say(&directory, "s", "t1")).await;
        said.expect("answered while the agent decides").expect("accepted");
        started.await;
        let stored = store.turn(&key("s"), "t1").await.unwrap().expect("stored when answered");
        assert_eq!(stored.status, TurnStatus::Running, "the decision never comes");
    }

    /// A contained agent that took longer to decide than an input may wait
    /// for it has the inputs to its sessions committed and answered at
    /// once, until one of its decisions comes in time again.
    #[tokio::test(start_paused = true)]
    async fn an_agent_slower_than_the_hold_has_inputs_answered_at_once_until_it_is_quick_again() {
        let store = MemStore::new();
        let paced = Arc::new(Paced::default());
        paced.pace_ms.store(50, std::sync::atomic::Ordering::Relaxed);
        let (env, directory) = start(&store, paced.clone());
        let slow = || env.slow_deciders.contains(TENANT, "agent");

        let began = tokio::time::Instant::now();
        say(&directory, "s1", "t1").await.expect("accepted");
        assert_eq!(
            began.elapsed(),
            env.config.contained_hold,
            "the first input waits for the decision as long as it may"
        );
        assert!(slow());

        let began = tokio::time::Instant::now();
        say(&directory, "s2", "t1").await.expect("accepted");
        assert_eq!(began.elapsed(), Duration::ZERO, "known to be slow: the input does not wait");

        paced.pace_ms.store(0, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(ended(&env, "s2", "t1").await.status, TurnStatus::Done);
        assert!(!slow(), "a decision came in time");
    }

    /// An input held with a contained agent's decision whose commit fails
    /// is answered with the store's error, and nothing of it is kept.
    #[tokio::test]
    async fn a_held_input_whose_commit_fails_is_answered_with_the_error() {
        let store = Arc::new(crate::store::fault::FaultyStore::new(MemStore::new()));
        store.fail_commits(1, false);
        let env = Env::new(store.clone(), Models::with_offline(), EngineConfig::default());
        env.agents.register(TENANT, "agent", Arc::new(Contained(Arc::new(Proposer::default()))));
        let directory = Directory::new(Arc::new(env));
        let refused = say(&directory, "s", "t1").await.expect_err("the commit fails");
        assert!(matches!(refused, InputError::Store(_)), "{refused:?}");
        assert!(store.session(&key("s")).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_session_that_does_not_exist_takes_no_cancel_and_keeps_no_actor() {
        let store = MemStore::new();
        let (_, directory) = start(&store, Arc::new(Proposer::default()));
        assert!(matches!(cancel(&directory, "nobody").await, Err(InputError::NoSession(s)) if s == "nobody"));
        tokio::task::yield_now().await;
        assert!(store.session(&key("nobody")).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn cancelling_gives_up_the_delivery_in_flight_and_fails_the_turn() {
        let store = MemStore::new();
        let silent = Arc::new(Silent::default());
        let (env, directory) = start(&store, silent.clone());
        let started = silent.started.notified();
        say(&directory, "s", "t1").await.expect("accepted");
        started.await;

        let given_up = silent.given_up.notified();
        assert!(cancel(&directory, "s").await.expect("cancelled"), "a turn was open");
        given_up.await;
        let turn = ended(&env, "s", "t1").await;
        assert_eq!(turn.status, TurnStatus::Failed);
        assert_eq!(turn.data.expect("the failure")["code"], "cancelled");
        assert!(!cancel(&directory, "s").await.expect("answered"), "no turn open any more");
    }

    #[tokio::test]
    async fn a_failed_commit_keeps_nothing_in_memory_or_in_the_store() {
        let store = MemStore::new();
        store.close();
        let (_, directory) = start(&store, Arc::new(Proposer::default()));
        let refused = say(&directory, "s", "t1").await.expect_err("the store refuses");
        assert!(matches!(refused, InputError::Store(_)), "{refused:?}");
        // The actor stopped and was forgotten: the next message starts a
        // new one, which loads the session from the store (none).
        tokio::time::timeout(Duration::from_secs(5), async {
            while directory.active() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the actor leaves");
        assert!(store.session(&key("s")).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_actor_leaves_after_lingering_and_its_session_is_reloaded_when_touched() {
        let store = MemStore::new();
        let (env, directory) = start(&store, Arc::new(Proposer::default()));
        say(&directory, "s", "t1").await.expect("accepted");
        assert_eq!(ended(&env, "s", "t1").await.status, TurnStatus::Done);
        assert_eq!(directory.active(), 1, "lingering for the client's next message");

        // Paused time: past the linger at once; then the actor runs (one
        // thread) until it has left.
        let linger = env.config.session_linger;
        tokio::time::advance(linger * 2).await;
        for _ in 0..100 {
            if directory.active() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(directory.active(), 0, "left once idle for {linger:?}");

        say(&directory, "s", "t2").await.expect("accepted by a new actor");
        assert_eq!(ended(&env, "s", "t2").await.status, TurnStatus::Done);
        let messages = store.load(&key("s")).await.unwrap().expect("stored").messages;
        assert_eq!(messages.len(), 4, "both turns' user and assistant messages: {messages:?}");
    }

    #[tokio::test]
    async fn a_recovered_session_redelivers_its_front_step_with_a_higher_attempt() {
        let store = MemStore::new();
        let silent = Arc::new(Silent::default());
        let (_, directory) = start(&store, silent.clone());
        let started = silent.started.notified();
        say(&directory, "s", "t1").await.expect("accepted");
        started.await;
        directory.kill().await; // Mid-delivery, as a crash.

        let proposer = Arc::new(Proposer::default());
        let (env, directory) = start(&store, proposer.clone());
        directory.resume(&key("s"), true).await;
        assert_eq!(ended(&env, "s", "t1").await.status, TurnStatus::Done);
        let attempts = proposer.attempts.lock().unwrap().clone();
        assert_eq!(attempts.first(), Some(&2), "the cut-short delivery counts: {attempts:?}");
    }

    /// Proposes, like [`Proposer`], once the gate is open; counts
    /// deliveries by their `attempts`.
    #[derive(Default)]
    struct GatedProposer {
        proposer: Proposer,
        arrived: Notify,
        open: tokio::sync::watch::Sender<bool>,
    }

    impl Worker for GatedProposer {
        fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
            self.arrived.notify_one();
            let mut open = self.open.subscribe();
            let decided = self.proposer.decide(delivery);
            Box::pin(async move {
                let _ = open.wait_for(|open| *open).await;
                decided.await
            })
        }
    }

    fn start_faulty(
        store: &Arc<crate::store::fault::FaultyStore<MemStore>>,
        agent: Arc<dyn Worker>,
    ) -> (Arc<Env>, Arc<Directory>) {
        let env = Env::new(store.clone(), Models::with_offline(), EngineConfig::default());
        env.agents.register(TENANT, "agent", agent);
        let env = Arc::new(env);
        (env.clone(), Directory::new(env))
    }

    /// A commit after the input's fails (the database restarted under the
    /// turn): the actor stays, reloads the session once the store answers,
    /// delivers the step again as after a crash, and the turn ends, with
    /// nothing but its own timer to wake it.
    async fn a_turn_outlives_a_failed_commit(written: bool) {
        let store = Arc::new(crate::store::fault::FaultyStore::new(MemStore::new()));
        let agent = Arc::new(GatedProposer::default());
        let (env, directory) = start_faulty(&store, agent.clone());
        let arrived = agent.arrived.notified();
        say(&directory, "s", "t1").await.expect("accepted");
        arrived.await;
        // The decision's commit fails; the one after goes through.
        store.fail_commits(1, written);
        agent.open.send_replace(true);
        let turn = tokio::time::timeout(Duration::from_secs(10), ended(&env, "s", "t1")).await;
        assert_eq!(turn.expect("the turn ends without another input").status, TurnStatus::Done);
        assert_eq!(directory.active(), 1, "the actor stayed");
        let attempts = agent.proposer.attempts.lock().unwrap().clone();
        let messages = store.load(&key("s")).await.unwrap().expect("stored").messages;
        assert_eq!(messages.len(), 2, "one user message and one answer: {messages:?}");
        if written {
            // The decision was stored: the reloaded session went on from it.
            assert_eq!(attempts, [1, 1, 1], "session start, message, the model's reply, once each");
        } else {
            // Delivered again, counted as a delivery that may have reached
            // the worker.
            assert_eq!(attempts, [1, 2, 1, 1], "session start twice, then message and reply");
        }
    }

    #[tokio::test]
    async fn a_turn_whose_commit_failed_unwritten_is_reloaded_and_ends() {
        a_turn_outlives_a_failed_commit(false).await;
    }

    #[tokio::test]
    async fn a_turn_whose_commit_is_in_doubt_but_written_is_reloaded_and_ends() {
        a_turn_outlives_a_failed_commit(true).await;
    }

    /// Returns once the longest reload backoff has passed, on paused time:
    /// at once, the actor running (and reloading) before the test goes on.
    async fn reloaded() {
        // Paused time: a timer the runtime jumps to once every task waits,
        // which `advance` does not (it may resume the test first).
        tokio::time::sleep(RELOAD_MAX).await;
    }

    #[tokio::test(start_paused = true)]
    async fn inputs_while_the_store_fails_are_answered_not_stored_and_the_next_is_taken() {
        let store = Arc::new(crate::store::fault::FaultyStore::new(MemStore::new()));
        let (env, directory) = start_faulty(&store, Arc::new(Proposer::default()));
        store.fail_commits(1, false);
        let refused = say(&directory, "s", "t1").await.expect_err("the store fails");
        assert!(matches!(&refused, InputError::Store(m) if m.contains("nothing of it was kept")), "{refused:?}");
        // Until the session is reloaded, inputs are refused at once.
        let refused = say(&directory, "s", "t1").await.expect_err("the store is not back yet");
        assert!(matches!(&refused, InputError::Store(m) if m.contains("nothing of it was kept")), "{refused:?}");
        assert_eq!(directory.active(), 1, "the actor waits for the store");

        store.fail_commits(1, true);
        reloaded().await;
        let doubt = say(&directory, "s", "t1").await.expect_err("the answer was lost");
        assert!(matches!(&doubt, InputError::Unavailable(m) if m.contains("same turn_id")), "{doubt:?}");
        // The same turn id again: the input was stored, its turn is told.
        reloaded().await;
        let again = say(&directory, "s", "t1").await.expect("the store answers");
        assert!(again.existing, "the first send was stored");
        assert_eq!(ended(&env, "s", "t1").await.status, TurnStatus::Done);
    }
}
