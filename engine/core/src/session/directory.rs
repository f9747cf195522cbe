//! The running session actors: at most one per session, started by the
//! first message sent to a session and retired when it has been idle a
//! while (see [`actor`](super::actor)).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;

use super::actor::{Actor, Mailboxes, Msg};
use super::env::Env;
use crate::store::SessionKey;

/// The running actors: where to send, and the task to abort.
type ActorMap = HashMap<SessionKey, (mpsc::UnboundedSender<Msg>, JoinHandle<()>)>;

/// Every running actor of an engine, by session.
pub(crate) struct Directory {
    env: Arc<Env>,
    /// Itself, handed to the actors it starts as their [`Mailboxes`].
    me: Weak<Directory>,
    actors: Mutex<ActorMap>,
    /// Set by [`Directory::kill`]: nothing is started or sent any more.
    closed: AtomicBool,
    /// Sessions found unfinished at start and not loaded since: the first
    /// load counts a possibly cut-short delivery of their front step.
    recovering: Mutex<HashSet<SessionKey>>,
    /// One permit for each resumed session that may work at once
    /// ([`EngineConfig::resume_concurrency`](crate::EngineConfig::resume_concurrency)):
    /// see [`resume`](Self::resume).
    resuming: Arc<Semaphore>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Directory {
    /// No actors yet; those it starts work with `env`.
    pub fn new(env: Arc<Env>) -> Arc<Self> {
        let resuming = Arc::new(Semaphore::new(env.config.resume_concurrency.max(1)));
        Arc::new_cyclic(|me| Self {
            env,
            me: me.clone(),
            actors: Mutex::default(),
            closed: AtomicBool::new(false),
            recovering: Mutex::default(),
            resuming,
        })
    }

    /// Sends `msg` to the session's actor, starting one if none runs.
    /// Sending under the lock pairs with [`Mailboxes::leave`]: an actor
    /// leaves only when nothing was sent to it.
    pub fn send(&self, key: &SessionKey, msg: Msg) -> bool {
        self.send_resuming(key, msg, None)
    }

    /// [`send`](Self::send), handing a new actor `permit` to hold while it
    /// works (an actor already running has its session loaded and
    /// working: the permit is given back).
    fn send_resuming(&self, key: &SessionKey, msg: Msg, permit: Option<OwnedSemaphorePermit>) -> bool {
        if self.closed.load(Ordering::Acquire) {
            return false;
        }
        let mut actors = lock(&self.actors);
        let msg = match actors.get(key) {
            Some((tx, _)) => match tx.send(msg) {
                Ok(()) => return true,
                // The actor stopped (its store closed or unreadable) and
                // has not been forgotten yet: a new one takes the message.
                Err(mpsc::error::SendError(msg)) => {
                    actors.remove(key);
                    msg
                }
            },
            None => msg,
        };
        let Some(me) = self.me.upgrade() else { return false };
        let (tx, task) = Actor::spawn(self.env.clone(), me, key.clone(), permit);
        let sent = tx.send(msg).is_ok();
        actors.insert(key.clone(), (tx, task));
        sent
    }

    /// Marks a session that was unfinished when the store was opened: its
    /// first load counts a delivery the stop may have cut short.
    fn mark_recovering(&self, key: &SessionKey) {
        // An actor already running has loaded the session: nothing of a
        // crash is left for it to count.
        if !lock(&self.actors).contains_key(key) {
            lock(&self.recovering).insert(key.clone());
        }
    }

    /// Resumes a session with work left, found at start or taken over
    /// from a node that died (`crashed`: its first load counts a delivery
    /// the stop may have cut short), once
    /// fewer than `resume_concurrency` resumed sessions work: waits for
    /// one of them to have nothing in flight (or leave). A store full of
    /// unfinished sessions is so resumed a few at a time, not all loaded
    /// and run at once; sessions woken for any other reason (an input,
    /// a child's end) do not wait.
    pub async fn resume(&self, key: &SessionKey, crashed: bool) {
        let Ok(permit) = self.resuming.clone().acquire_owned().await else { return };
        if crashed {
            self.mark_recovering(key);
        }
        self.send_resuming(key, Msg::Wake, Some(permit));
    }

    /// Sessions with an actor in memory.
    pub fn active(&self) -> usize {
        lock(&self.actors).len()
    }

    /// Stops every actor where it is, as a crash would, and starts no
    /// more.
    pub async fn kill(&self) {
        self.closed.store(true, Ordering::Release);
        // Resumes waiting for a permit give up.
        self.resuming.close();
        let tasks: Vec<_> = lock(&self.actors).drain().map(|(_, (_, task))| task).collect();
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Mailboxes for Directory {
    fn wake(&self, key: &SessionKey) {
        self.send(key, Msg::Wake);
    }

    fn cancel(&self, key: &SessionKey) {
        let (reply, _) = oneshot::channel();
        self.send(key, Msg::Cancel { reply });
    }

    fn leave(&self, key: &SessionKey, rx: &mpsc::UnboundedReceiver<Msg>) -> bool {
        let mut actors = lock(&self.actors);
        if rx.is_empty() {
            actors.remove(key);
            true
        } else {
            false
        }
    }

    fn forget(&self, key: &SessionKey) {
        lock(&self.actors).remove(key);
    }

    fn take_recovering(&self, key: &SessionKey) -> bool {
        lock(&self.recovering).remove(key)
    }
}
