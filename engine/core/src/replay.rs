//! Replay: recorded decisions asked again of another agent version, and
//! the answers compared (see docs/upgrades.md).
//!
//! Every applied step keeps what its request held beyond the session's
//! constants and its stored trigger ([`RequestBasis`]), so the request the
//! agent answered is rebuilt exactly: the same trigger, proposal, state,
//! config, path, tree, calls, attempt, identity and ancestry. The
//! candidate, a component, decides it in the sandbox with a fresh
//! instance, under its tenant's limits and with no outgoing HTTP; nothing
//! is stored and no call runs. Its decision is compared with the recorded
//! one as JSON, path by path.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use subs_protocol::{AgentConfig, DecisionRequest, DecisionResponse, Trigger};

use crate::session::{KnownTurns, Session, Tree};
use crate::store::{MessageRecord, SessionKey, StepRecord, StepStatus, Store, StoreError};
use crate::worker::{BoxFuture, Delivery, WorkerError};

/// The most decisions one replay may compare.
pub const MAX_DECISIONS: usize = 10_000;

/// The most sessions one replay may read.
pub const MAX_SESSIONS: usize = 1_000;

/// The most changes reported for one decision; the rest are counted.
const MAX_CHANGES: usize = 50;

/// The most differences and failures a report lists (each); the rest are
/// counted.
const MAX_LISTED: usize = 1_000;

/// Which recorded decisions to replay, and how far to go.
#[derive(Debug, Clone)]
pub struct Selection {
    /// These sessions of the agent's tenant; `None`: the agent's most
    /// recently changed sessions, at most [`sessions_limit`](Self::sessions_limit).
    pub sessions: Option<Vec<String>>,
    /// How many sessions to take when none are named.
    pub sessions_limit: usize,
    /// Only decisions applied at or after this instant (Unix ms).
    pub since_ms: Option<u64>,
    /// The most decisions to compare (at most [`MAX_DECISIONS`]): the
    /// sessions are taken in order, each with all its selected decisions
    /// in order, until this many are taken.
    pub limit: usize,
    /// Stop starting decisions after this long; the report says it
    /// stopped.
    pub time: Duration,
}

impl Default for Selection {
    fn default() -> Self {
        Self { sessions: None, sessions_limit: 100, since_ms: None, limit: 1_000, time: Duration::from_secs(60) }
    }
}

impl Selection {
    /// Whether the selection is within a replay's bounds: at most
    /// [`MAX_SESSIONS`] sessions named. (Numbers past their bounds are
    /// cut to them.)
    ///
    /// # Errors
    /// Too many sessions named.
    pub fn check(&self) -> Result<(), ReplayError> {
        match &self.sessions {
            Some(named) if named.len() > MAX_SESSIONS => Err(ReplayError::TooManySessions { count: named.len() }),
            _ => Ok(()),
        }
    }
}

/// What a replay found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// Decisions compared: `same + different + failed`.
    pub decisions: usize,
    /// The candidate decided as recorded.
    pub same: usize,
    /// The candidate decided otherwise.
    pub different: usize,
    /// The candidate failed to decide (a trap, a limit, a malformed
    /// decision).
    pub failed: usize,
    /// Recorded decisions selected but not replayed: recorded before the
    /// engine kept what rebuilds their requests.
    pub skipped: usize,
    /// Decisions during which the candidate tried outgoing HTTP, which a
    /// replay refuses.
    pub http_refused: usize,
    /// Sessions read.
    pub sessions: usize,
    /// Why the replay stopped before every selected decision was compared
    /// (`"time"`); `None`: it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// How long it took, in milliseconds.
    pub elapsed_ms: u64,
    /// The differing decisions, in session and step order (at most 1,000;
    /// `different` counts them all).
    pub differences: Vec<Replayed>,
    /// The failed decisions, likewise.
    pub failures: Vec<Replayed>,
}

/// One replayed decision that differed or failed.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// The session.
    pub session_id: String,
    /// The turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// The step's number in its session.
    pub step: u64,
    /// The decision's id.
    pub decision_id: String,
    /// The trigger's type (`tool.execute`, …).
    pub trigger: String,
    /// The version that made the recorded decision, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded_version: Option<String>,
    /// How the candidate's decision differs from the recorded one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// Changes past the first 50, not listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub more_changes: usize,
    /// Why the candidate failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Outgoing HTTP the candidate tried, refused ("`destination`: why").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_refused: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde passes a reference
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One difference between two decisions, at a JSON Pointer into them
/// (`/actions/0/result/sum`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// Where.
    pub path: String,
    /// `added` (only the candidate has it), `removed` (only the recorded
    /// decision has it) or `changed`.
    pub change: ChangeKind,
    /// The recorded value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Value>,
    /// The candidate's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<Value>,
}

/// How a value differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Only the candidate has it.
    Added,
    /// Only the recorded decision has it.
    Removed,
    /// Both have it, differently.
    Changed,
}

/// Where a replay stands, for progress bars: decisions done of those
/// selected.
pub type Progress = Arc<dyn Fn(usize, usize) + Send + Sync>;

/// How many steps a replay reads from the store at a time.
const STEP_PAGE: usize = 32;

/// How many session records a replay reads at a time while it picks the
/// agent's most recently changed sessions.
const SESSION_PAGE: usize = 100;

/// A recorded decision and the request it answered, rebuilt.
struct Case {
    key: SessionKey,
    seq: u64,
    step: StepRecord,
    request: DecisionRequest,
}

/// The agent version a replay asks: a component (`subs-host` implements
/// this for its agents), decided in a sandbox that reaches nothing.
pub trait Candidate: Send + Sync {
    /// Decides as [`Worker::decide`](crate::worker::Worker::decide) does,
    /// and tells which outgoing HTTP requests were refused the guest
    /// meanwhile ("`destination`: why; …"), whether or not it decided.
    fn decide_reporting(
        &self,
        delivery: Delivery,
    ) -> BoxFuture<'_, (Result<DecisionResponse, WorkerError>, Option<String>)>;
}

/// Replays `tenant`'s recorded decisions of agent `agent_id` chosen by
/// `selection` against `candidate`, and compares. Only the tenant's own
/// sessions of that agent are read: a named session of another agent (or
/// none of that id) is an error naming it.
///
/// The replay streams: a first pass over the sessions' steps (a page at
/// a time) picks the steps to compare and keeps only their numbers; then
/// each session is read once, its steps a page at a time, and each picked
/// request is rebuilt just before the candidate is asked it and dropped
/// once answered. What a replay holds is one session's messages (shared
/// by every request rebuilt from them), one page of its steps, and at
/// most [`window`] requests being decided, whatever `limit` is.
///
/// # Errors
/// The store failed, or a named session is not one of the agent's.
pub async fn replay<C: Candidate + Clone + 'static>(
    store: &dyn Store,
    tenant: &str,
    agent_id: &str,
    candidate: &C,
    selection: &Selection,
    progress: Option<Progress>,
) -> Result<ReplayReport, ReplayError> {
    let started = Instant::now();
    let sessions = select_sessions(store, tenant, agent_id, selection).await?;
    // Which steps to compare, picked first so that progress has a total.
    let limit = selection.limit.min(MAX_DECISIONS);
    let mut chosen: Vec<(SessionKey, Vec<u64>)> = Vec::new();
    let (mut total, mut skipped) = (0, 0);
    for key in sessions {
        if total >= limit {
            break;
        }
        let picked = pick(store, &key, |step| {
            let decided = step.status == StepStatus::Applied && step.decision.is_some();
            let recent = selection.since_ms.is_none_or(|since| step.decided_ms.is_some_and(|at| at >= since));
            if !decided || !recent || total >= limit {
                return false;
            }
            if step.request.is_none() {
                skipped += 1;
                return false;
            }
            total += 1;
            true
        })
        .await?;
        chosen.push((key, picked));
    }
    let mut report = ReplayReport { sessions: chosen.len(), skipped, ..ReplayReport::default() };
    let done = Arc::new(AtomicUsize::new(0));
    let mut running = Window::new(window());
    let mut listed = Listed::default();
    'sessions: for (key, picked) in chosen {
        let Some(mut cases) = Cases::open(store, key, picked).await? else { continue };
        loop {
            if started.elapsed() >= selection.time {
                report.stopped = Some("time".to_owned());
                break 'sessions;
            }
            // Room first, then the request: no more than the window's
            // requests exist at once.
            for (key, outcome) in running.make_room().await {
                listed.add(&mut report, key, outcome);
            }
            let Some(case) = cases.next().await? else { break };
            let (candidate, done, progress) = (candidate.clone(), done.clone(), progress.clone());
            running.spawn(async move {
                let key = (case.key.session.clone(), case.seq);
                // Boxed: the guest call's future is large, and the task
                // would otherwise be moved whole as it is spawned.
                let outcome = Box::pin(compare(&candidate, case)).await;
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(progress) = &progress {
                    progress(n, total);
                }
                (key, outcome)
            });
        }
    }
    for (key, outcome) in running.finish().await {
        listed.add(&mut report, key, outcome);
    }
    report.differences = listed.differences.into_values().collect();
    report.failures = listed.failures.into_values().collect();
    report.elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    Ok(report)
}

/// How many decisions a replay has the candidate decide at once: two per
/// core, so that the cores stay busy while requests are built and
/// compared.
pub fn window() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZero::get) * 2
}

/// Tasks running at most `size` at a time: [`make_room`](Self::make_room)
/// waits for one to finish while the window is full, so that whatever
/// the next task takes is made only once there is room for it.
struct Window<T> {
    size: usize,
    running: tokio::task::JoinSet<T>,
}

impl<T: Send + 'static> Window<T> {
    fn new(size: usize) -> Self {
        Self { size: size.max(1), running: tokio::task::JoinSet::new() }
    }

    /// Waits until fewer than the window's tasks run; what those that
    /// finished meanwhile gave (a task that panicked gives nothing).
    async fn make_room(&mut self) -> Vec<T> {
        let mut finished = Vec::new();
        while self.running.len() >= self.size {
            if let Some(Ok(out)) = self.running.join_next().await {
                finished.push(out);
            }
        }
        finished
    }

    /// Starts `task`; call [`make_room`](Self::make_room) first.
    fn spawn(&mut self, task: impl Future<Output = T> + Send + 'static) {
        self.running.spawn(task);
    }

    /// Waits for every task; what they gave.
    async fn finish(mut self) -> Vec<T> {
        let mut finished = Vec::new();
        while let Some(joined) = self.running.join_next().await {
            if let Ok(out) = joined {
                finished.push(out);
            }
        }
        finished
    }
}

/// The differing and failed decisions a report lists: the first
/// [`MAX_LISTED`] of each, in session and step order, whatever order they
/// finish in; the rest are only counted.
#[derive(Default)]
struct Listed {
    differences: BTreeMap<(String, u64), Replayed>,
    failures: BTreeMap<(String, u64), Replayed>,
}

impl Listed {
    fn add(&mut self, report: &mut ReplayReport, key: (String, u64), outcome: Outcome) {
        report.decisions += 1;
        if outcome.replayed.http_refused.is_some() {
            report.http_refused += 1;
        }
        let list = match outcome.verdict {
            Verdict::Same => {
                report.same += 1;
                return;
            }
            Verdict::Different => {
                report.different += 1;
                &mut self.differences
            }
            Verdict::Failed => {
                report.failed += 1;
                &mut self.failures
            }
        };
        list.insert(key, outcome.replayed);
        if list.len() > MAX_LISTED {
            list.pop_last();
        }
    }
}

/// The numbers of the steps of session `key` that `wanted` picks, in
/// order, reading the steps a page at a time and keeping none of them.
async fn pick(
    store: &dyn Store,
    key: &SessionKey,
    mut wanted: impl FnMut(&StepRecord) -> bool,
) -> Result<Vec<u64>, StoreError> {
    let mut picked = Vec::new();
    let mut from = 0;
    loop {
        let page = store.steps(key, from, STEP_PAGE).await?;
        let Some(&(last, _)) = page.last() else { break };
        picked.extend(page.iter().filter(|(_, step)| wanted(step)).map(|(seq, _)| *seq));
        if page.len() < STEP_PAGE {
            break;
        }
        from = last + 1;
    }
    Ok(picked)
}

/// The requests the decided steps of session `key` answered, rebuilt as
/// a replay rebuilds them, by step number; steps stored before the engine
/// kept what rebuilds them are left out. Every request is held at once
/// (their messages shared): for tests and tools that look at a session's
/// requests side by side.
///
/// # Errors
/// The store failed.
pub async fn requests(store: &dyn Store, key: &SessionKey) -> Result<Vec<(u64, DecisionRequest)>, StoreError> {
    let picked = pick(store, key, |step| step.status == StepStatus::Applied).await?;
    let Some(mut cases) = Cases::open(store, key.clone(), picked).await? else { return Ok(Vec::new()) };
    let mut requests = Vec::new();
    while let Some(case) = cases.next().await? {
        requests.push((case.seq, case.request));
    }
    Ok(requests)
}

/// The sessions to read: those named, else the agent's most recently
/// changed. Only their keys are kept: each record is read again when its
/// session is replayed.
async fn select_sessions(
    store: &dyn Store,
    tenant: &str,
    agent_id: &str,
    selection: &Selection,
) -> Result<Vec<SessionKey>, ReplayError> {
    match &selection.sessions {
        Some(named) => {
            selection.check()?;
            let mut keys = Vec::with_capacity(named.len());
            for session in named {
                let key = SessionKey::new(tenant, session.clone());
                match store.session(&key).await? {
                    Some(record) if record.agent_id == agent_id => keys.push(key),
                    _ => {
                        return Err(ReplayError::NoSession { session: session.clone(), agent: agent_id.to_owned() });
                    }
                }
            }
            Ok(keys)
        }
        None => {
            // A page of records at a time; of each, the key and when it
            // changed.
            let mut found: Vec<(u64, SessionKey)> = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let page = store.sessions_page(tenant, after.as_deref(), SESSION_PAGE).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.key.session.clone());
                let full = page.len() == SESSION_PAGE;
                found.extend(page.into_iter().filter(|r| r.agent_id == agent_id).map(|r| (r.updated_ms, r.key)));
                if !full {
                    break;
                }
            }
            found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
            found.truncate(selection.sessions_limit.min(MAX_SESSIONS));
            Ok(found.into_iter().map(|(_, key)| key).collect())
        }
    }
}

/// The requests of the picked steps of one session, rebuilt one at a time
/// in step order: the state and config carried from step to step as the
/// session stored them, the tree grown message by message, and each
/// request made by the code that made the original. The steps are read a
/// page at a time; a request shares the tree's messages, so rebuilding
/// one costs a handle per message, not a copy.
struct Cases<'a> {
    store: &'a dyn Store,
    session: Session,
    /// The session's messages not in the tree yet, in recording order.
    messages: std::iter::Peekable<std::vec::IntoIter<(u64, MessageRecord)>>,
    /// The steps to rebuild.
    picked: HashSet<u64>,
    /// The last of them: no step after it is read.
    last: u64,
    /// The steps read and not yet gone through.
    page: VecDeque<(u64, StepRecord)>,
    /// Where the next page starts.
    from: u64,
    /// The state and config the steps so far left the session with.
    state: Option<Value>,
    agent: Option<Option<Arc<AgentConfig>>>,
}

impl<'a> Cases<'a> {
    /// The rebuilder of the `picked` steps of session `key`; `None` when
    /// the session is gone or no step is picked.
    async fn open(store: &'a dyn Store, key: SessionKey, picked: Vec<u64>) -> Result<Option<Self>, StoreError> {
        let Some(&last) = picked.iter().max() else { return Ok(None) };
        let Some(record) = store.session(&key).await? else { return Ok(None) };
        let messages = store.messages(&key).await?;
        let session = Session {
            record,
            tree: Tree::default(),
            calls: BTreeMap::new(),
            steps: VecDeque::new(),
            turns: KnownTurns::default(),
            based_on: None,
            deciding: None,
            source_tools: Vec::new(),
        };
        Ok(Some(Self {
            store,
            session,
            messages: messages.into_iter().peekable(),
            picked: picked.into_iter().collect(),
            last,
            page: VecDeque::new(),
            from: 0,
            state: None,
            agent: None,
        }))
    }

    /// The next picked step's request; `None` past the last.
    async fn next(&mut self) -> Result<Option<Case>, StoreError> {
        loop {
            let Some((seq, step)) = self.page.pop_front() else {
                if self.from > self.last {
                    return Ok(None);
                }
                let page = self.store.steps(&self.session.record.key, self.from, STEP_PAGE).await?;
                let Some(&(end, _)) = page.last() else { return Ok(None) };
                self.from = end + 1;
                self.page = page.into();
                continue;
            };
            if seq > self.last {
                self.page.clear();
                return Ok(None);
            }
            if let Some(case) = self.rebuild(seq, step) {
                return Ok(Some(case));
            }
        }
    }

    /// Carries step `seq`'s state and config, and rebuilds its request
    /// when it is picked.
    fn rebuild(&mut self, seq: u64, step: StepRecord) -> Option<Case> {
        let basis = step.request.as_ref()?;
        if let Some(s) = &basis.state {
            self.state = Some(s.clone());
        }
        if let Some(a) = &basis.agent {
            self.agent = Some(a.clone());
        }
        if !self.picked.contains(&seq) {
            return None;
        }
        // The first basis a process stores carries both; one without them
        // follows another that did.
        let (Some(state), Some(agent)) = (&self.state, &self.agent) else { return None };
        let session = &mut self.session;
        while let Some((_, message)) = self.messages.next_if(|(n, _)| *n < basis.messages) {
            session.tree.insert(message);
        }
        session.record.state.clone_from(state);
        session.record.agent.clone_from(agent);
        session.record.head_id.clone_from(&basis.head_id);
        let trigger = match (&basis.trigger, &step.trigger) {
            (Some(trigger), _) => trigger.clone(),
            (None, stored) => session.trigger(stored),
        };
        let mut request = session.request(&step, trigger, basis.proposed.clone(), 0);
        request.calls.clone_from(&basis.calls);
        request.pending_calls = basis.pending_calls;
        request.attempts = basis.attempts;
        request.deadline.clone_from(&basis.deadline);
        Some(Case { key: session.record.key.clone(), seq, step, request })
    }
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A named session is not the agent's (or does not exist).
    #[error("the tenant has no session `{session}` of agent `{agent}`")]
    NoSession {
        /// The session named.
        session: String,
        /// The agent replayed.
        agent: String,
    },
    /// Too many sessions named.
    #[error("{count} sessions named; a replay reads at most {MAX_SESSIONS}")]
    TooManySessions {
        /// How many were named.
        count: usize,
    },
}

/// What became of one replayed decision.
struct Outcome {
    verdict: Verdict,
    replayed: Replayed,
}

enum Verdict {
    Same,
    Different,
    Failed,
}

/// Asks `candidate` for the decision of `case` and compares it with the
/// recorded one.
async fn compare(candidate: &dyn Candidate, case: Case) -> Outcome {
    let Case { key, seq, step, request } = case;
    let trigger = request.trigger.kind().to_owned();
    // The request goes to the guest; what a diff needs of it is kept.
    let ids = request_ids(&request);
    let (result, http_refused) = candidate.decide_reporting(Delivery::new(request)).await;
    let mut replayed = Replayed {
        session_id: key.session,
        turn_id: step.turn_id,
        step: seq,
        decision_id: step.decision_id,
        trigger,
        recorded_version: step.agent_version,
        changes: Vec::new(),
        more_changes: 0,
        error: None,
        http_refused,
    };
    let recorded = step.decision.map(|decision| *decision).unwrap_or_default();
    let verdict = match result {
        Err(e) => {
            replayed.error = Some(e.to_string());
            Verdict::Failed
        }
        // Most decisions are the same: compared as they are before any
        // JSON is made of them.
        Ok(decision) if decision == recorded => Verdict::Same,
        Ok(decision) => {
            let mut changes = Vec::new();
            diff(
                &as_json(&recorded),
                &as_json(&decision),
                &mut String::new(),
                &ids,
                &mut Renames::default(),
                &mut changes,
            );
            if changes.is_empty() {
                Verdict::Same
            } else {
                replayed.more_changes = changes.len().saturating_sub(MAX_CHANGES);
                changes.truncate(MAX_CHANGES);
                replayed.changes = changes;
                Verdict::Different
            }
        }
    };
    Outcome { verdict, replayed }
}

fn as_json(decision: &DecisionResponse) -> Value {
    subs_protocol::to_value(decision)
}

/// The ids the request holds (messages, calls, the turn, the trigger's
/// call): ids a decision names as given, never renamed.
fn request_ids(request: &DecisionRequest) -> HashSet<String> {
    let mut ids: HashSet<String> =
        request.tree_nodes().filter_map(|node| node.ok().map(|(m, _)| m.id.clone())).collect();
    ids.extend(request.calls.iter().map(|c| c.id.clone()));
    ids.extend(request.turn_id.iter().cloned());
    match &request.trigger {
        Trigger::ToolExecute(t) => {
            ids.insert(t.id.clone());
        }
        Trigger::LlmExecute(t) => {
            ids.insert(t.id.clone());
        }
        _ => {}
    }
    ids
}

/// Engine-style ids (`call_7`, `msg_12`, …) the two decisions use for the
/// same thing, paired as they are met: an id neither request holds,
/// minted afresh by each run, is noise when it is used consistently.
#[derive(Default)]
struct Renames {
    recorded: BTreeMap<String, String>,
    candidate: BTreeMap<String, String>,
}

impl Renames {
    /// Whether `recorded` and `candidate` name the same thing: both minted
    /// ids of one kind, outside the request, paired with no other.
    fn pair<'a>(&mut self, recorded: &'a str, candidate: &'a str, ids: &HashSet<String>) -> bool {
        let kind = |id: &'a str| minted(id).filter(|_| !ids.contains(id));
        match (kind(recorded), kind(candidate)) {
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
        let forward = self.recorded.entry(recorded.to_owned()).or_insert_with(|| candidate.to_owned()).clone();
        let backward = self.candidate.entry(candidate.to_owned()).or_insert_with(|| recorded.to_owned()).clone();
        forward == candidate && backward == recorded
    }
}

/// The kind of an id the engine mints (`call`, `msg`, `int`, `llm`,
/// `turn`), or `None`.
fn minted(id: &str) -> Option<&str> {
    let (kind, n) = id.split_once('_')?;
    let known = matches!(kind, "call" | "msg" | "int" | "llm" | "turn");
    (known && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(kind)
}

/// Appends how `candidate` differs from `recorded` under `path` to
/// `changes`: objects key by key, arrays item by item.
fn diff(
    recorded: &Value,
    candidate: &Value,
    path: &mut String,
    ids: &HashSet<String>,
    renames: &mut Renames,
    changes: &mut Vec<Change>,
) {
    match (recorded, candidate) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let len = path.len();
                push_segment(path, key);
                match b.get(key) {
                    Some(other) => diff(value, other, path, ids, renames, changes),
                    None => changes.push(change(path, ChangeKind::Removed, Some(value), None)),
                }
                path.truncate(len);
            }
            for (key, value) in b.iter().filter(|(key, _)| !a.contains_key(*key)) {
                let len = path.len();
                push_segment(path, key);
                changes.push(change(path, ChangeKind::Added, None, Some(value)));
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let len = path.len();
                push_segment(path, &i.to_string());
                match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) => diff(x, y, path, ids, renames, changes),
                    (Some(x), None) => changes.push(change(path, ChangeKind::Removed, Some(x), None)),
                    (None, Some(y)) => changes.push(change(path, ChangeKind::Added, None, Some(y))),
                    (None, None) => {}
                }
                path.truncate(len);
            }
        }
        (Value::String(a), Value::String(b)) if a == b || renames.pair(a, b, ids) => {}
        (a, b) if a == b => {}
        (a, b) => changes.push(change(path, ChangeKind::Changed, Some(a), Some(b))),
    }
}

/// The most bytes of JSON a change shows of a value; a larger value is
/// shown as the start of its JSON text, so that a report stays small
/// whatever the decisions hold.
const MAX_SHOWN_BYTES: usize = 512;

/// `value`, or the first [`MAX_SHOWN_BYTES`] of its JSON as text when it
/// is longer.
fn shown(value: &Value) -> Value {
    let text = value.to_string();
    if text.len() <= MAX_SHOWN_BYTES {
        return value.clone();
    }
    let mut cut = MAX_SHOWN_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Value::String(format!("{}… ({} bytes of JSON)", &text[..cut], text.len()))
}

/// A change at `path`.
fn change(path: &str, change: ChangeKind, recorded: Option<&Value>, candidate: Option<&Value>) -> Change {
    Change { path: path.to_owned(), change, recorded: recorded.map(shown), candidate: candidate.map(shown) }
}

/// Appends a JSON Pointer segment (RFC 6901: `~` and `/` escaped).
fn push_segment(path: &mut String, key: &str) {
    path.push('/');
    path.push_str(&key.replace('~', "~0").replace('/', "~1"));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn changes(a: Value, b: Value) -> Vec<Change> {
        let ids: HashSet<String> = ["call_1".to_owned()].into();
        let mut out = Vec::new();
        diff(&a, &b, &mut String::new(), &ids, &mut Renames::default(), &mut out);
        out
    }

    #[test]
    fn a_renamed_key_is_one_removal_and_one_addition() {
        let found = changes(
            json!({"actions": [{"type": "tool.result", "result": {"sum": 3}}]}),
            json!({"actions": [{"type": "tool.result", "result": {"total": 3}}]}),
        );
        assert_eq!(
            found,
            [
                Change {
                    path: "/actions/0/result/sum".into(),
                    change: ChangeKind::Removed,
                    recorded: Some(json!(3)),
                    candidate: None
                },
                Change {
                    path: "/actions/0/result/total".into(),
                    change: ChangeKind::Added,
                    recorded: None,
                    candidate: Some(json!(3))
                },
            ]
        );
    }

    #[test]
    fn arrays_differ_item_by_item_and_pointers_are_escaped() {
        let found = changes(json!({"a/b": [1, 2]}), json!({"a/b": [1, 5, 6]}));
        let paths: Vec<_> = found.iter().map(|c| (c.path.as_str(), c.change)).collect();
        assert_eq!(paths, [("/a~1b/1", ChangeKind::Changed), ("/a~1b/2", ChangeKind::Added)]);
    }

    #[test]
    fn large_values_are_shown_cut() {
        let big = "é".repeat(600);
        let found = changes(json!({"a": big}), json!({"a": 1}));
        let Some(Value::String(shown)) = &found[0].recorded else { panic!("{found:?}") };
        assert!(shown.len() < 600 && shown.ends_with("… (1202 bytes of JSON)"), "{shown}");
        assert_eq!(found[0].candidate, Some(json!(1)));
    }

    #[tokio::test]
    async fn a_window_runs_at_most_its_size_and_the_next_task_is_made_only_with_room() {
        let (live, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut window = Window::new(3);
        let mut finished = 0;
        for n in 0..40 {
            finished += window.make_room().await.len();
            // What a task holds (a rebuilt request) is made here, after
            // the room: counted from now until the task is done with it.
            let now = live.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let live = live.clone();
            window.spawn(async move {
                for _ in 0..n % 4 {
                    tokio::task::yield_now().await;
                }
                live.fetch_sub(1, Ordering::SeqCst);
            });
        }
        finished += window.finish().await.len();
        assert_eq!(finished, 40, "every task's outcome is given");
        assert_eq!(peak.load(Ordering::SeqCst), 3, "never more than the window at once");
    }

    /// A session of one large message and then `turns` short ones, each
    /// step's request basis stored as the engine stores it.
    async fn stored_session(store: &crate::store::MemStore, turns: u64) -> SessionKey {
        use crate::store::conformance::sample;
        use crate::store::{Batch, Op, RequestBasis, SessionStatus};
        let key = SessionKey::new("t", "s");
        let mut batch = Batch::new();
        batch.push(Op::PutSession(Box::new(sample::session(&key, SessionStatus::Idle))));
        for n in 0..=turns {
            let content = if n == 0 { "x".repeat(1 << 20) } else { format!("turn {n}") };
            let message: subs_protocol::Message =
                serde_json::from_value(json!({"id": format!("m{n}"), "role": "user", "content": content})).unwrap();
            let parent_id = n.checked_sub(1).map(|p| format!("m{p}"));
            batch.push(Op::PutMessage {
                session: key.clone(),
                seq: n,
                record: MessageRecord { message: message.into(), parent_id },
            });
            let mut step = StepRecord::pending(
                None,
                format!("s:{n}"),
                crate::store::StoredTrigger::Plain { trigger: Trigger::SessionStart },
            );
            step.status = StepStatus::Applied;
            step.decision = Some(Box::new(DecisionResponse::default()));
            step.request = Some(Box::new(RequestBasis {
                head_id: Some(format!("m{n}")),
                messages: n + 1,
                // The first basis carries the state and config; the
                // others inherit them.
                state: (n == 0).then(|| json!({"since": 0})),
                agent: (n == 0).then_some(None),
                calls: Vec::new(),
                pending_calls: 0,
                proposed: DecisionResponse::default(),
                trigger: None,
                attempts: 1,
                deadline: None,
            }));
            batch.push(Op::PutStep { session: key.clone(), seq: n, record: Box::new(step) });
        }
        store.commit(batch).await.unwrap();
        key
    }

    #[tokio::test]
    async fn rebuilt_requests_share_the_sessions_messages_and_steps_are_read_by_page() {
        let store = crate::store::MemStore::new();
        let turns = 3 * STEP_PAGE as u64 + 5;
        let key = stored_session(&store, turns).await;
        let requests = requests(&store, &key).await.unwrap();
        assert_eq!(requests.len() as u64, turns + 1, "every step, across pages");
        let first = &requests[0].1.messages[0];
        assert_eq!(first.text().len(), 1 << 20);
        for (seq, request) in &requests {
            assert_eq!(request.messages.len() as u64, seq + 1, "step {seq}: the path as it was");
            assert_eq!(request.state, json!({"since": 0}), "step {seq}: the state carried");
            // The large message is one allocation, whatever the number
            // of requests holding it.
            let same = request.messages[0].shared().zip(first.shared()).is_some_and(|(a, b)| Arc::ptr_eq(a, b));
            assert!(same, "step {seq} copied the message");
        }
        // Picking reads every page and keeps only numbers.
        let odd = pick(&store, &key, |step| step.decision_id.ends_with(['1', '3', '5', '7', '9'])).await.unwrap();
        assert_eq!(odd, (0..=turns).filter(|n| n % 2 == 1).collect::<Vec<_>>());
        // A rebuilder of a few steps stops after the last of them.
        let mut cases = Cases::open(&store, key.clone(), vec![2, 40]).await.unwrap().unwrap();
        assert_eq!(cases.next().await.unwrap().map(|c| c.seq), Some(2));
        assert_eq!(cases.next().await.unwrap().map(|c| c.seq), Some(40));
        assert!(cases.next().await.unwrap().is_none());
        assert!(cases.from <= 40 + STEP_PAGE as u64 + 1, "no page past the last picked step was read");
    }

    #[test]
    fn fresh_minted_ids_pair_up_but_request_ids_and_swaps_do_not() {
        // Ids minted afresh, used consistently: no difference.
        assert!(changes(json!(["msg_4", "msg_4", "call_9"]), json!(["msg_7", "msg_7", "call_2"])).is_empty());
        // Paired once, then with another: a difference.
        assert_eq!(changes(json!(["msg_4", "msg_4"]), json!(["msg_7", "msg_8"])).len(), 1);
        // An id of the request is named as given.
        assert_eq!(changes(json!(["call_1"]), json!(["call_5"])).len(), 1);
        // Kinds do not mix, and other strings are compared as they are.
        assert_eq!(changes(json!(["msg_4", "x_1"]), json!(["call_4", "x_2"])).len(), 2);
    }
}
