//! The conformance suite: every property of a [`Store`] the engine relies
//! on, as one function any backend's tests call.
//!
//! ```no_run
//! # async fn demo() {
//! use subs_store::conformance::{self, Backend};
//! use subs_store::MemStore;
//!
//! struct Mem;
//! impl Backend for Mem {
//!     type Store = MemStore;
//!     async fn open(&mut self) -> MemStore { MemStore::new() }
//!     async fn reopen(&mut self, store: MemStore) -> MemStore { store }
//! }
//! conformance::run(&mut Mem).await;
//! # }
//! ```
//!
//! Each property opens a fresh store and panics, naming itself, at the
//! first read that differs from what the trait promises. The properties:
//!
//! - **reads**: every read returns what the ops wrote, in the documented
//!   order, and nothing of another session or tenant (ids chosen so that
//!   one is a prefix of another, as strings and as storage keys);
//! - **any session id**: ids holding `/`, spaces, `%`, unicode, or being a
//!   prefix of another (`a` and `a/b`, `a.b`, `a b`) each read, list and
//!   page as their own session, before and after a reopen;
//! - **ops in order**: a batch applies its ops in order, and a later
//!   commit's writes replace an earlier one's;
//! - **atomic and durable**: a committed batch is wholly there after a
//!   reopen; a crash between any two commits (by [`FaultyStore`]) leaves
//!   exactly the commits before it, compared record by record with the
//!   same batches applied to a [`MemStore`];
//! - **concurrent commits**: many commits at once all land, each visible
//!   when its commit returns;
//! - **recovery**: `unfinished` follows status and inbox, across reopen;
//! - **paging**: `sessions_page` and `session_count` agree with `sessions`;
//! - **owners**: `sessions_of_identity` pages through one tenant's sessions
//!   of one owner, across reopen;
//! - **decision counts**: `CountDecisions` ops add up per tenant, agent and
//!   version, across batches and reopen, and `DeleteAgent` clears the
//!   agent's, including counts before it in the same batch but not those
//!   after it;
//! - **step pages**: `steps_page` ends before the step that would pass its
//!   bytes (each step at the size of its last write), with the first step
//!   whatever its size;
//! - **calls by id**: `calls_named` reads the open calls asked for, in id
//!   order, as last written;
//! - **event replay**: `events` from every id and with every page size
//!   returns exactly the events after it;
//! - **inbox numbers** increase across the store and across reopens, and
//!   are never reused;
//! - **agents, keys and tenants** are kept per tenant, replaced and
//!   removed;
//! - **agent configs**: a session's config reads as its last record had
//!   it, through every read that returns records, as it is set, kept by
//!   later records, replaced and removed, for sessions whose ids extend
//!   one another, before and after a reopen;
//! - **call updates**: an `UpdateCall` replaces a call but its spec, which
//!   reads as the last `PutCall` stored it, in the same batch or an
//!   earlier one, coalesced or not, before and after a reopen.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::fault::FaultyStore;
use crate::{
    AgentRecord, AgentVersion, AgentWorker, Batch, CallRecord, CallSpec, Counters, EventRecord, InboxItem, KeyRecord,
    MemStore, MessageRecord, Op, RequestBasis, SessionHead, SessionKey, SessionRecord, SessionStatus, SpanRef,
    StepRecord, Store, StoreAdmin, StoredTrigger, TenantRecord, TurnRecord, TurnStatus,
};
use subs_protocol::CallStatus;

/// How the suite makes stores of one backend.
pub trait Backend {
    /// The store under test.
    type Store: Store;

    /// A new, empty store.
    fn open(&mut self) -> impl Future<Output = Self::Store>;

    /// Closes `store` and opens its data again, as a restarted process
    /// would (for an in-memory store: the same store).
    fn reopen(&mut self, store: Self::Store) -> impl Future<Output = Self::Store>;
}

/// Runs every property against stores from `backend`; panics naming the
/// first property that does not hold.
pub async fn run<B: Backend>(backend: &mut B) {
    reads_return_what_the_ops_wrote(backend).await;
    any_session_id_keeps_its_own_records(backend).await;
    ops_apply_in_order(backend).await;
    a_committed_batch_survives_a_reopen(backend).await;
    a_crash_between_commits_keeps_exactly_the_commits_before_it(backend).await;
    concurrent_commits_all_land(backend).await;
    unfinished_follows_status_and_inbox_across_reopen(backend).await;
    events_replay_from_every_id(backend).await;
    sessions_are_listed_by_owner(backend).await;
    a_sessions_head_is_its_records(backend).await;
    decisions_are_counted_per_agent_version(backend).await;
    step_pages_end_at_their_bytes(backend).await;
    calls_are_read_by_id(backend).await;
    inbox_numbers_keep_increasing_across_reopen(backend).await;
    agents_and_keys_are_kept_per_tenant(backend).await;
    tenants_are_kept_replaced_and_removed(backend).await;
    mcp_servers_are_kept_per_tenant(backend).await;
    agent_configs_read_as_last_written(backend).await;
    updated_calls_keep_their_spec(backend).await;
}

/// Records to write in tests, each made from a name so that two calls with
/// the same name make equal records.
pub mod sample {
    use subs_protocol::{ClientContext, DraftMessage};

    use super::*;

    /// A session of tenant `t1`.
    pub fn key(session: &str) -> SessionKey {
        SessionKey::new("t1", session)
    }

    /// A session record with `status`.
    pub fn session(key: &SessionKey, status: SessionStatus) -> SessionRecord {
        SessionRecord {
            key: key.clone(),
            agent_id: "agent".to_owned(),
            identity: Default::default(),
            status,
            state: json!({"n": 1}),
            agent: None,
            head_id: None,
            ancestry: Vec::new(),
            parent: None,
            next: Default::default(),
            first_open_step: 0,
            turn: None,
            queued: Vec::new(),
            interrupts: Vec::new(),
            usage: json!({}),
            cost: None,
            budget: None,
            tree_cost: None,
            reported_cost: None,
            created_ms: 1,
            updated_ms: 2,
            versions: Default::default(),
            agent_version: None,
            message_bytes: 0,
        }
    }

    /// A user message with id `id`.
    pub fn message(id: &str) -> MessageRecord {
        MessageRecord {
            message: serde_json::from_value(json!({"id": id, "role": "user", "content": format!("text of {id}")}))
                .expect("a valid message"),
            parent_id: None,
        }
    }

    /// A pending step for a client message.
    pub fn step(decision_id: &str) -> StepRecord {
        let trigger = StoredTrigger::ClientMessages {
            fork_id: None,
            new: vec![DraftMessage::user("hi")],
            client: ClientContext::default(),
        };
        // With a request basis whose state is present and `null` and whose
        // config is absent: every backend must keep the two apart.
        let request = RequestBasis {
            head_id: None,
            messages: 0,
            state: Some(serde_json::Value::Null),
            agent: None,
            calls: Vec::new(),
            pending_calls: 0,
            proposed: subs_protocol::DecisionResponse::new(),
            trigger: None,
            attempts: 1,
            deadline: None,
        };
        StepRecord { request: Some(Box::new(request)), ..StepRecord::pending(None, decision_id.to_owned(), trigger) }
    }

    /// A sub-agent call in flight.
    pub fn call(id: &str) -> CallRecord {
        CallRecord {
            call: serde_json::from_value(json!({"id": id, "kind": "sub_agent", "status": "pending", "attempt": 1}))
                .expect("a valid call"),
            order: 0,
            deadline_ms: None,
            turn_id: None,
            retry: None,
            retry_at_ms: None,
            spec: CallSpec::SubAgent {
                tool_call_id: format!("tc-{id}"),
                arguments: None,
                budget: None,
                reported: None,
            },
            started_ms: None,
            span: None,
        }
    }

    /// The `n`th event.
    pub fn event(n: u64) -> EventRecord {
        EventRecord { name: "message".to_owned(), data: json!({"n": n}) }
    }

    /// A turn with `status`.
    pub fn turn(status: TurnStatus) -> TurnRecord {
        TurnRecord { status, data: Some(json!({"ok": true})), started_ms: 5, ended_ms: None }
    }

    /// A message from another session.
    pub fn item(text: &str) -> InboxItem {
        InboxItem::Message { message: DraftMessage::user(text), from: "other".to_owned() }
    }

    /// Agent `id` of `tenant`.
    pub fn agent(tenant: &str, id: &str) -> AgentRecord {
        AgentRecord {
            tenant: tenant.to_owned(),
            agent_id: id.to_owned(),
            current: AgentVersion {
                digest: format!("sha256:{id}"),
                worker: AgentWorker::Http { url: "http://127.0.0.1:1/".to_owned(), secret: None },
                created_ms: 1,
                activated_ms: Some(1),
                oci: None,
            },
            history: Vec::new(),
            created_ms: 1,
        }
    }

    /// A key of `tenant` with hash `hash`.
    pub fn api_key(tenant: &str, hash: &str, created_ms: u64) -> KeyRecord {
        KeyRecord {
            tenant: tenant.to_owned(),
            hash: hash.to_owned(),
            prefix: "subs_ab".to_owned(),
            name: None,
            created_ms,
        }
    }

    /// Tenant `name` with `limits` (a JSON object).
    pub fn tenant(name: &str, limits: Value, created_ms: u64) -> TenantRecord {
        let limits = limits.as_object().cloned().unwrap_or_default();
        TenantRecord { tenant: name.to_owned(), limits, created_ms, updated_ms: created_ms }
    }

    /// A batch of `ops`.
    pub fn batch(ops: impl IntoIterator<Item = Op>) -> Batch {
        Batch::of(ops)
    }

    /// One batch holding every kind of session op for `key`.
    pub fn full_batch(key: &SessionKey) -> Batch {
        let s = || key.clone();
        batch([
            Op::PutSession(Box::new(session(key, SessionStatus::Running))),
            Op::PutMessage { session: s(), seq: 0, record: message("m0") },
            Op::PutMessage { session: s(), seq: 1, record: message("m1") },
            Op::PutStep { session: s(), seq: 0, record: Box::new(step("d0")) },
            Op::PutCall { session: s(), record: Box::new(call("c1")) },
            Op::PutEvent { session: s(), seq: 0, record: event(0) },
            Op::PutTurn { session: s(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Running) },
            Op::PushInbox { session: s(), item: Box::new(item("hello")) },
        ])
    }
}

use sample::*;

/// Everything `store` holds for `sessions` and its tenants' agents, keys
/// and tenants, as JSON, for comparing two stores. Inbox items are listed
/// without their numbers, which each store picks.
pub async fn dump(store: &dyn Store, sessions: &[SessionKey], turns: &[&str]) -> Value {
    let mut per_session = Vec::new();
    for key in sessions {
        let record = store.session(key).await.expect("session");
        let first_open = record.as_ref().map_or(0, |r| r.first_open_step);
        let mut stored_turns = Vec::new();
        for id in turns {
            stored_turns.push(json!([id, store.turn(key, id).await.expect("turn")]));
        }
        let inbox: Vec<InboxItem> = store.inbox(key).await.expect("inbox").into_iter().map(|(_, i)| i).collect();
        per_session.push(json!({
            "session": record,
            "messages": store.messages(key).await.expect("messages"),
            "steps": store.steps(key, 0, usize::MAX).await.expect("steps"),
            "open_steps": store.steps(key, first_open, usize::MAX).await.expect("steps"),
            "calls": store.calls(key).await.expect("calls"),
            "events": store.events(key, None, usize::MAX).await.expect("events"),
            "turns": stored_turns,
            "inbox": inbox,
        }));
    }
    json!({
        "sessions": per_session,
        "all_sessions": store.sessions(None).await.expect("sessions"),
        "unfinished": store.unfinished().await.expect("unfinished"),
        "agents": store.agents(None).await.expect("agents"),
        "keys": store.keys().await.expect("keys"),
        "tenants": store.tenants().await.expect("tenants"),
    })
}

async fn assert_full_batch(property: &str, store: &dyn Store, key: &SessionKey) {
    let at = |what: &str| format!("conformance: {property}: {what} of the committed batch");
    assert_eq!(store.session(key).await.unwrap(), Some(session(key, SessionStatus::Running)), "{}", at("session"));
    assert_eq!(store.messages(key).await.unwrap(), [(0, message("m0")), (1, message("m1"))], "{}", at("messages"));
    assert_eq!(store.steps(key, 0, usize::MAX).await.unwrap(), [(0, step("d0"))], "{}", at("steps"));
    assert_eq!(store.calls(key).await.unwrap(), [call("c1")], "{}", at("calls"));
    assert_eq!(store.events(key, None, 10).await.unwrap(), [(0, event(0))], "{}", at("events"));
    assert_eq!(store.turn(key, "turn-1").await.unwrap(), Some(turn(TurnStatus::Running)), "{}", at("turn"));
    let inbox: Vec<_> = store.inbox(key).await.unwrap().into_iter().map(|(_, i)| i).collect();
    assert_eq!(inbox, [item("hello")], "{}", at("inbox"));
}

/// `session_head` answers the head of what `session` answers, for a
/// record with every part a head leaves out filled in, before and after a
/// reopen; and nothing for a session that does not exist.
async fn a_sessions_head_is_its_records<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: a session's head is its record's";
    let store = backend.open().await;
    let mut record = sample::session(&key("h1"), SessionStatus::Running);
    record.identity = subs_protocol::WorkerIdentity {
        id: Some("alice".to_owned()),
        metadata: Some(BTreeMap::from([("team".to_owned(), "blue".to_owned())])),
    };
    record.next = Counters { step: 7, event: 42, message: 9, id: 3, call: 2, turn: 1 };
    record.agent = Some(Arc::new(
        serde_json::from_value(json!({
            "model": "offline",
            "system": "be brief",
            "tools": [{"name": "add", "description": "adds", "input": {"type": "object"}}],
        }))
        .expect("an agent config"),
    ));
    record.state = json!({"deep": {"list": [1, 2, {"k": "v"}]}});
    record.usage = json!({"input_tokens": 10});
    store.commit(batch([Op::PutSession(Box::new(record.clone()))])).await.unwrap();
    let expected = Some(SessionHead::from(record));
    assert_eq!(store.session_head(&key("h1")).await.unwrap(), expected, "{P}: as committed");
    assert_eq!(store.session_head(&key("h2")).await.unwrap(), None, "{P}: no such session");
    let store = backend.reopen(store).await;
    assert_eq!(store.session_head(&key("h1")).await.unwrap(), expected, "{P}: after a reopen");
    backend.reopen(store).await;
}

/// A session's agent config is part of its record however a backend keeps
/// it (redb keeps it apart from the record and writes it only when it
/// changes): every read that returns a record returns the config the last
/// committed record had.
async fn agent_configs_read_as_last_written<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: agent configs read as last written";
    let config = |system: &str| -> Arc<subs_protocol::AgentConfig> {
        Arc::new(
            serde_json::from_value(json!({
                "model": "offline",
                "system": system,
                "tools": [{"name": "add", "description": "adds", "input": {"type": "object"}}],
            }))
            .expect("an agent config"),
        )
    };
    let record = |id: &str, agent: Option<Arc<subs_protocol::AgentConfig>>, n: u64| {
        let mut record = sample::session(&key(id), SessionStatus::Running);
        record.identity.id = Some("owner".to_owned());
        record.agent = agent;
        record.state = json!({"n": n});
        record
    };
    // `c` and `c/d` sit side by side in a backend that keys by
    // `tenant/session`; `c/d`'s config must never read as `c`'s.
    let first = config("first");
    let store = backend.open().await;
    let mut expected = BTreeMap::new();
    let commit = async |store: &B::Store,
                        expected: &mut BTreeMap<String, SessionRecord>,
                        id: &str,
                        agent: Option<Arc<subs_protocol::AgentConfig>>,
                        n| {
        let record = record(id, agent, n);
        store.commit(batch([Op::PutSession(Box::new(record.clone()))])).await.unwrap();
        expected.insert(id.to_owned(), record);
    };
    let check = async |store: &B::Store, expected: &BTreeMap<String, SessionRecord>, when: &str| {
        for (id, record) in expected {
            let read = store.session(&key(id)).await.unwrap();
            assert_eq!(read.as_ref(), Some(record), "{P}: session {id}, {when}");
            let loaded = store.load(&key(id)).await.unwrap().map(|loaded| loaded.record);
            assert_eq!(loaded.as_ref(), Some(record), "{P}: load {id}, {when}");
        }
        let listed: Vec<SessionRecord> = store.sessions(Some("t1")).await.unwrap();
        let listed: Vec<&SessionRecord> = listed.iter().filter(|r| expected.contains_key(&r.key.session)).collect();
        assert_eq!(listed, expected.values().collect::<Vec<_>>(), "{P}: sessions, {when}");
        let paged = store.sessions_page("t1", Some("b"), 1000).await.unwrap();
        let paged: Vec<&SessionRecord> = paged.iter().filter(|r| expected.contains_key(&r.key.session)).collect();
        assert_eq!(paged, expected.values().collect::<Vec<_>>(), "{P}: sessions_page, {when}");
        let owned = store.sessions_of_identity("t1", "owner", None, 1000).await.unwrap();
        let owned: Vec<&SessionRecord> = owned.iter().filter(|r| expected.contains_key(&r.key.session)).collect();
        assert_eq!(owned, expected.values().collect::<Vec<_>>(), "{P}: by owner, {when}");
    };
    commit(&store, &mut expected, "c", None, 0).await;
    commit(&store, &mut expected, "c/d", Some(Arc::clone(&first)), 0).await;
    check(&store, &expected, "set on one of two").await;
    // Kept: the same config (the same allocation, then an equal one) and
    // a new state.
    commit(&store, &mut expected, "c/d", Some(Arc::clone(&first)), 1).await;
    commit(&store, &mut expected, "c/d", Some(config("first")), 2).await;
    commit(&store, &mut expected, "c", Some(config("other")), 1).await;
    check(&store, &expected, "kept").await;
    let store = backend.reopen(store).await;
    check(&store, &expected, "kept, after a reopen").await;
    commit(&store, &mut expected, "c/d", Some(config("second")), 3).await;
    check(&store, &expected, "replaced").await;
    commit(&store, &mut expected, "c/d", None, 4).await;
    check(&store, &expected, "removed").await;
    let store = backend.reopen(store).await;
    check(&store, &expected, "removed, after a reopen").await;
    commit(&store, &mut expected, "c/d", Some(config("third")), 5).await;
    let store = backend.reopen(store).await;
    check(&store, &expected, "set again, after a reopen").await;
    backend.reopen(store).await;
}

async fn sessions_are_listed_by_owner<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: sessions are listed by owner";
    let store = backend.open().await;
    let owned = |id: &str, owner: Option<&str>| {
        let mut record = sample::session(&key(id), SessionStatus::Idle);
        record.identity.id = owner.map(str::to_owned);
        Op::PutSession(Box::new(record))
    };
    // Of t1's sessions a0..a9, alice owns a1, a4, a5 and a8; `alice` of
    // another tenant, and `alice2` (a prefix match), are not hers.
    let mut ops = Vec::new();
    for n in 0..10 {
        let owner = match n {
            1 | 4 | 5 | 8 => Some("alice"),
            2 => Some("alice2"),
            3 => Some("bob"),
            _ => None,
        };
        ops.push(owned(&format!("a{n}"), owner));
    }
    let mut elsewhere = sample::session(&SessionKey::new("t", "a0"), SessionStatus::Idle);
    elsewhere.identity.id = Some("alice".to_owned());
    ops.push(Op::PutSession(Box::new(elsewhere)));
    store.commit(batch(ops)).await.unwrap();
    // Written again (as every step of a session writes its record): still
    // listed once.
    store.commit(batch([owned("a4", Some("alice"))])).await.unwrap();

    let check = async |store: &B::Store, when: &str| {
        let page = async |identity, after, limit| {
            let page = store.sessions_of_identity("t1", identity, after, limit).await.unwrap();
            page.into_iter().map(|record| record.key.session).collect::<Vec<String>>()
        };
        let ids = |ids: &[&str]| ids.iter().map(|id| (*id).to_owned()).collect::<Vec<_>>();
        assert_eq!(page("alice", None, 10).await, ids(&["a1", "a4", "a5", "a8"]), "{P}: every one, {when}");
        assert_eq!(page("alice", None, 2).await, ids(&["a1", "a4"]), "{P}: a full page, {when}");
        assert_eq!(page("alice", Some("a4"), 2).await, ids(&["a5", "a8"]), "{P}: the next page, {when}");
        assert_eq!(page("alice", Some("a8"), 2).await, ids(&[]), "{P}: the last page, {when}");
        assert_eq!(page("alice", Some("a3x"), 1).await, ids(&["a4"]), "{P}: after an id not stored, {when}");
        assert_eq!(page("bob", None, 10).await, ids(&["a3"]), "{P}: another owner, {when}");
        assert_eq!(page("alice2", None, 10).await, ids(&["a2"]), "{P}: an owner whose id extends another, {when}");
        assert_eq!(page("carol", None, 10).await, ids(&[]), "{P}: no such owner, {when}");
        assert_eq!(page("alice", None, 0).await, ids(&[]), "{P}: an empty page, {when}");
        let other = store.sessions_of_identity("t", "alice", None, 10).await.unwrap();
        assert_eq!(other.len(), 1, "{P}: tenant t, {when}");
        assert!(store.sessions_of_identity("nobody", "alice", None, 10).await.unwrap().is_empty(), "{P}, {when}");
        // What is listed is the record as last written.
        let listed = store.sessions_of_identity("t1", "alice", Some("a1"), 1).await.unwrap();
        assert_eq!(listed, [store.session(&key("a4")).await.unwrap().unwrap()], "{P}: the record, {when}");
    };
    check(&store, "as written").await;
    let store = backend.reopen(store).await;
    check(&store, "after a reopen").await;
}

async fn decisions_are_counted_per_agent_version<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: decisions are counted per agent version";
    let store = backend.open().await;
    let count = |tenant: &str, agent: &str, version: &str, decisions: u64| Op::CountDecisions {
        tenant: tenant.to_owned(),
        agent_id: agent.to_owned(),
        version: version.to_owned(),
        decisions,
    };
    // Two counts of one version in one batch add up, as they do across
    // batches; other agents, other tenants and agents whose id extends
    // another's count apart.
    store
        .commit(batch([
            Op::PutAgent(agent("t1", "a")),
            count("t1", "a", "sha256:1", 1),
            count("t1", "a", "sha256:1", 2),
            count("t1", "a", "sha256:2", 1),
            count("t1", "ab", "sha256:1", 7),
            count("t2", "a", "sha256:1", 5),
        ]))
        .await
        .unwrap();
    store.commit(batch([count("t1", "a", "sha256:2", 10)])).await.unwrap();
    let counts = |pairs: &[(&str, u64)]| pairs.iter().map(|(v, n)| ((*v).to_owned(), *n)).collect::<BTreeMap<_, _>>();
    let check = async |store: &B::Store, when: &str| {
        assert_eq!(
            store.decision_counts("t1", "a").await.unwrap(),
            counts(&[("sha256:1", 3), ("sha256:2", 11)]),
            "{P}: agent a, {when}"
        );
        assert_eq!(store.decision_counts("t1", "ab").await.unwrap(), counts(&[("sha256:1", 7)]), "{P}: ab, {when}");
        assert_eq!(store.decision_counts("t2", "a").await.unwrap(), counts(&[("sha256:1", 5)]), "{P}: t2, {when}");
        assert_eq!(store.decision_counts("t1", "nobody").await.unwrap(), counts(&[]), "{P}: none, {when}");
    };
    check(&store, "as written").await;
    let store = backend.reopen(store).await;
    check(&store, "after a reopen").await;
    // Deleting the agent deletes its counts, and only its.
    store.commit(batch([Op::DeleteAgent { tenant: "t1".to_owned(), agent_id: "a".to_owned() }])).await.unwrap();
    assert_eq!(store.decision_counts("t1", "a").await.unwrap(), counts(&[]), "{P}: deleted");
    assert_eq!(store.decision_counts("t1", "ab").await.unwrap(), counts(&[("sha256:1", 7)]), "{P}: ab kept");
    assert_eq!(store.decision_counts("t2", "a").await.unwrap(), counts(&[("sha256:1", 5)]), "{P}: t2 kept");
    store.commit(batch([count("t1", "a", "sha256:2", 1)])).await.unwrap();
    assert_eq!(store.decision_counts("t1", "a").await.unwrap(), counts(&[("sha256:2", 1)]), "{P}: from zero");
    // Within one batch as well: a count before the deletion goes with it,
    // one after it stays.
    store
        .commit(batch([
            count("t1", "a", "sha256:2", 4),
            Op::DeleteAgent { tenant: "t1".to_owned(), agent_id: "a".to_owned() },
            count("t1", "a", "sha256:3", 2),
        ]))
        .await
        .unwrap();
    assert_eq!(
        store.decision_counts("t1", "a").await.unwrap(),
        counts(&[("sha256:3", 2)]),
        "{P}: deleted between two counts of one batch"
    );
}

async fn calls_are_read_by_id<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: calls are read by id";
    let store = backend.open().await;
    let (s, other) = (key("named"), key("named/other"));
    let mut ops = vec![Op::PutSession(Box::new(session(&s, SessionStatus::Running)))];
    for id in ["c3", "c1", "c2", "c10"] {
        ops.push(Op::PutCall { session: s.clone(), record: Box::new(call(id)) });
    }
    ops.push(Op::PutCall { session: other.clone(), record: Box::new(call("c1")) });
    store.commit(batch(ops)).await.unwrap();
    // c2 settled and forgotten; c3 written again.
    let mut again = call("c3");
    again.order = 7;
    store
        .commit(batch([
            Op::DeleteCall { session: s.clone(), call_id: "c2".to_owned() },
            Op::PutCall { session: s.clone(), record: Box::new(again.clone()) },
        ]))
        .await
        .unwrap();
    let named = async |ids: &[&str]| {
        let ids: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
        store.calls_named(&s, &ids).await.unwrap()
    };
    assert_eq!(named(&["c3", "c1", "c2", "nope"]).await, [call("c1"), again.clone()], "{P}: in id order, open ones");
    assert_eq!(named(&["c10"]).await, [call("c10")], "{P}: an id another extends");
    assert_eq!(named(&[]).await, Vec::<CallRecord>::new(), "{P}: none asked for");
    let all: Vec<String> = ["c1", "c10", "c2", "c3"].iter().map(|id| (*id).to_owned()).collect();
    assert_eq!(store.calls_named(&other, &all).await.unwrap(), [call("c1")], "{P}: another session's");
    assert!(store.calls_named(&key("nobody"), &all).await.unwrap().is_empty(), "{P}: no session");
}

/// `UpdateCall` stores a call whose spec has not changed since it was
/// put: every read returns the update with that spec, whether the put was
/// in an earlier commit or earlier in the same batch, and after
/// [`Batch::coalesce`] dropped that put.
async fn updated_calls_keep_their_spec<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: updated calls keep their spec";
    let store = backend.open().await;
    let s = key("updated");
    let with_spec = |id: &str, budget: &str| {
        let mut record = call(id);
        record.spec = CallSpec::SubAgent {
            tool_call_id: format!("tc-{id}"),
            arguments: None,
            budget: Some(budget.into()),
            reported: None,
        };
        record.order = 3;
        record.turn_id = Some("turn-1".to_owned());
        record
    };
    // What a new try, then a settlement, change.
    let tried = |record: &CallRecord, attempt: u32| {
        let mut record = record.clone();
        record.call.attempt = attempt;
        record.call.status = CallStatus::Pending;
        record.deadline_ms = Some(1_000 + u64::from(attempt));
        record.started_ms = Some(900);
        record.retry_at_ms = None;
        record.span = Some(SpanRef { trace_id: "0".repeat(32), span_id: "1".repeat(16), parent_id: None });
        record
    };
    let update = |record: &CallRecord| Op::UpdateCall { session: s.clone(), record: Box::new(record.clone()) };
    let put = |record: &CallRecord| Op::PutCall { session: s.clone(), record: Box::new(record.clone()) };
    let (a, b, c) = (with_spec("a", "1"), with_spec("b", "2"), with_spec("c", "3"));
    store.commit(batch([Op::PutSession(Box::new(session(&s, SessionStatus::Running))), put(&a)])).await.unwrap();
    // `a` updated in a later commit; `b` put and updated in one batch; `c`
    // put and updated in one coalesced batch, where the put is dropped.
    let (a1, b1, c1) = (tried(&a, 2), tried(&b, 2), tried(&c, 2));
    store.commit(batch([update(&a1), put(&b), update(&b1)])).await.unwrap();
    let mut coalesced = batch([put(&c), update(&c1)]);
    coalesced.coalesce();
    assert!(matches!(coalesced.ops[..], [Op::PutCall { .. }]), "{P}: coalescing makes the update a put");
    store.commit(coalesced).await.unwrap();
    let check = async |store: &B::Store, expected: &[&CallRecord], when: &str| {
        let expected: Vec<CallRecord> = expected.iter().map(|record| (*record).clone()).collect();
        assert_eq!(store.calls(&s).await.unwrap(), expected, "{P}: calls, {when}");
        let ids: Vec<String> = expected.iter().map(|record| record.call.id.clone()).collect();
        assert_eq!(store.calls_named(&s, &ids).await.unwrap(), expected, "{P}: calls_named, {when}");
        let loaded = store.load(&s).await.unwrap().expect("the session");
        assert_eq!(loaded.calls, expected, "{P}: load, {when}");
    };
    check(&store, &[&a1, &b1, &c1], "updated").await;
    // A put replaces the spec; the updates after it keep the new one.
    let a2 = with_spec("a", "9");
    let a3 = tried(&a2, 3);
    store.commit(batch([put(&a2)])).await.unwrap();
    store.commit(batch([update(&a3)])).await.unwrap();
    let mut b2 = b1.clone();
    b2.call.status = CallStatus::Completed;
    store.commit(batch([update(&b2), Op::DeleteCall { session: s.clone(), call_id: "c".to_owned() }])).await.unwrap();
    check(&store, &[&a3, &b2], "a new spec, settled, forgotten").await;
    let store = backend.reopen(store).await;
    check(&store, &[&a3, &b2], "after a reopen").await;
    backend.reopen(store).await;
}

async fn step_pages_end_at_their_bytes<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: step pages end at their bytes";
    let store = backend.open().await;
    let s = key("paged");
    // Steps 0..6 of growing sizes; step 2 is written small, then large
    // (the last write counts).
    let sized = |n: usize| {
        let mut step = step(&format!("d{n}"));
        step.error = Some("x".repeat(n * 100));
        step
    };
    let mut ops = vec![Op::PutSession(Box::new(session(&s, SessionStatus::Idle)))];
    for n in 0..6u64 {
        let record = if n == 2 { step("small") } else { sized(n as usize) };
        ops.push(Op::PutStep { session: s.clone(), seq: n, record: Box::new(record) });
    }
    store.commit(batch(ops)).await.unwrap();
    store.commit(batch([Op::PutStep { session: s.clone(), seq: 2, record: Box::new(sized(2)) }])).await.unwrap();
    let size = |n: usize| crate::encode_record("steps", &sized(n)).unwrap().len();
    let page = async |from, limit, max_bytes| {
        let steps = store.steps_page(&s, from, limit, max_bytes).await.unwrap();
        for (seq, step) in &steps {
            assert_eq!(*step, sized(*seq as usize), "{P}: step {seq} as last written");
        }
        steps.into_iter().map(|(seq, _)| seq).collect::<Vec<u64>>()
    };
    assert_eq!(page(0, 10, usize::MAX).await, [0, 1, 2, 3, 4, 5], "{P}: every step");
    assert_eq!(page(0, 3, usize::MAX).await, [0, 1, 2], "{P}: a limit");
    let two = size(0) + size(1);
    assert_eq!(page(0, 10, two).await, [0, 1], "{P}: exactly two steps' bytes");
    assert_eq!(page(0, 10, two + size(2) - 1).await, [0, 1], "{P}: a byte short of three");
    assert_eq!(page(2, 10, size(2) + size(3)).await, [2, 3], "{P}: from step 2, with its last size");
    assert_eq!(page(4, 10, 1).await, [4], "{P}: the first step whatever its size");
    assert_eq!(page(3, 1, 0).await, [3], "{P}: a limit of one");
    assert_eq!(page(6, 10, usize::MAX).await, Vec::<u64>::new(), "{P}: past the last");
    assert_eq!(page(0, 0, usize::MAX).await, Vec::<u64>::new(), "{P}: a limit of none");
    assert!(store.steps_page(&key("nobody"), 0, 10, 100).await.unwrap().is_empty(), "{P}: no session");
}

async fn reads_return_what_the_ops_wrote<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: reads return what the ops wrote";
    let store = backend.open().await;
    let s1 = key("s1");
    // `s10` shares `s1`'s prefix, tenant `t` is a prefix of `t1`, and
    // `t1-x` sorts before `t1/` as a storage key.
    let s10 = key("s10");
    let other = SessionKey::new("t", "s1");
    let dashed = SessionKey::new("t1-x", "s0");
    let mut ops = vec![
        Op::PutSession(Box::new(session(&s10, SessionStatus::Idle))),
        Op::PutSession(Box::new(session(&s1, SessionStatus::Idle))),
        Op::PutSession(Box::new(session(&other, SessionStatus::Idle))),
        Op::PutSession(Box::new(session(&dashed, SessionStatus::Idle))),
    ];
    for seq in 0..10 {
        ops.push(Op::PutStep { session: s1.clone(), seq, record: Box::new(step(&format!("d{seq}"))) });
        ops.push(Op::PutEvent { session: s1.clone(), seq, record: event(seq) });
        ops.push(Op::PutMessage { session: s1.clone(), seq, record: message(&format!("m{seq}")) });
    }
    ops.push(Op::PutStep { session: s10.clone(), seq: 3, record: Box::new(step("other")) });
    ops.push(Op::PutEvent { session: s10.clone(), seq: 3, record: event(99) });
    for id in ["c1", "c2", "c3"] {
        ops.push(Op::PutCall { session: s1.clone(), record: Box::new(call(id)) });
    }
    ops.push(Op::PutCall { session: s10.clone(), record: Box::new(call("c9")) });
    for text in ["first", "second", "third"] {
        ops.push(Op::PushInbox { session: s1.clone(), item: Box::new(item(text)) });
    }
    ops.push(Op::PushInbox { session: s10.clone(), item: Box::new(item("elsewhere")) });
    ops.push(Op::PutTurn { session: s1.clone(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Running) });
    store.commit(batch(ops)).await.unwrap();

    let tenant_keys = async |tenant| -> Vec<SessionKey> {
        store.sessions(tenant).await.unwrap().into_iter().map(|record| record.key).collect()
    };
    assert_eq!(tenant_keys(Some("t1")).await, [s1.clone(), s10.clone()], "{P}: sessions of t1");
    assert_eq!(tenant_keys(Some("t")).await, std::slice::from_ref(&other), "{P}: sessions of t");
    assert_eq!(tenant_keys(Some("nobody")).await, Vec::<SessionKey>::new(), "{P}: sessions of nobody");
    let all = [other.clone(), s1.clone(), s10.clone(), dashed.clone()];
    assert_eq!(tenant_keys(None).await, all, "{P}: every session, by tenant then id");
    // Pages of one tenant, in id order, from after any id (one stored or
    // not).
    let page = async |tenant, after, limit| -> Vec<SessionKey> {
        store.sessions_page(tenant, after, limit).await.unwrap().into_iter().map(|record| record.key).collect()
    };
    let none = Vec::<SessionKey>::new();
    assert_eq!(page("t1", None, 1).await, std::slice::from_ref(&s1), "{P}: first page");
    assert_eq!(page("t1", Some("s1"), 1).await, std::slice::from_ref(&s10), "{P}: page after s1");
    assert_eq!(page("t1", Some("s1-"), 5).await, std::slice::from_ref(&s10), "{P}: page after an id not stored");
    assert_eq!(page("t1", Some("a"), 5).await, [s1.clone(), s10.clone()], "{P}: page after a");
    assert_eq!(page("t1", Some("s10"), 5).await, none, "{P}: page after the last");
    assert_eq!(page("t1", None, 0).await, none, "{P}: empty page");
    assert_eq!(page("t", None, 5).await, std::slice::from_ref(&other), "{P}: page of t");
    assert_eq!(page("t1-x", None, 5).await, std::slice::from_ref(&dashed), "{P}: page of t1-x");
    for tenant in ["t1", "t", "t1-x", "nobody"] {
        let listed = tenant_keys(Some(tenant)).await.len() as u64;
        assert_eq!(store.session_count(tenant).await.unwrap(), listed, "{P}: session_count of {tenant}");
    }

    let seqs = |records: Vec<(u64, StepRecord)>| records.into_iter().map(|(seq, _)| seq).collect::<Vec<_>>();
    assert_eq!(seqs(store.steps(&s1, 0, usize::MAX).await.unwrap()), (0..10).collect::<Vec<_>>(), "{P}: steps");
    assert_eq!(seqs(store.steps(&s1, 7, usize::MAX).await.unwrap()), [7, 8, 9], "{P}: steps from 7");
    assert_eq!(seqs(store.steps(&s1, 3, 2).await.unwrap()), [3, 4], "{P}: two steps from 3");
    assert!(store.steps(&s1, 3, 0).await.unwrap().is_empty(), "{P}: no steps asked for");
    assert_eq!(store.steps(&s1, 7, 1).await.unwrap()[0].1, step("d7"), "{P}: step 7");
    assert!(store.steps(&s1, 10, usize::MAX).await.unwrap().is_empty(), "{P}: steps past the end");

    let events = store.events(&s1, Some(4), 3).await.unwrap();
    assert_eq!(events, [(5, event(5)), (6, event(6)), (7, event(7))], "{P}: events after 4");
    assert_eq!(store.events(&s1, None, 2).await.unwrap(), [(0, event(0)), (1, event(1))], "{P}: first events");
    assert_eq!(store.events(&s1, Some(9), 10).await.unwrap(), [], "{P}: events after the last");
    assert_eq!(store.events(&s1, Some(u64::MAX), 10).await.unwrap(), [], "{P}: events after u64::MAX");
    assert_eq!(store.events(&s1, None, 0).await.unwrap(), [], "{P}: no events asked for");
    assert_eq!(store.events(&s10, None, 10).await.unwrap(), [(3, event(99))], "{P}: events of s10");

    let messages = store.messages(&s1).await.unwrap();
    assert_eq!(messages.len(), 10, "{P}: messages");
    assert_eq!(messages[9], (9, message("m9")), "{P}: message 9");
    assert_eq!(store.calls(&s1).await.unwrap(), [call("c1"), call("c2"), call("c3")], "{P}: calls by id");
    assert_eq!(store.calls(&s10).await.unwrap(), [call("c9")], "{P}: calls of s10");
    assert_eq!(store.turn(&s1, "turn-1").await.unwrap(), Some(turn(TurnStatus::Running)), "{P}: turn");
    assert_eq!(store.turn(&s1, "turn-2").await.unwrap(), None, "{P}: a turn not stored");
    assert_eq!(store.turn(&s10, "turn-1").await.unwrap(), None, "{P}: another session's turn");

    let inbox = store.inbox(&s1).await.unwrap();
    let items: Vec<_> = inbox.iter().map(|(_, item)| item.clone()).collect();
    assert_eq!(items, [item("first"), item("second"), item("third")], "{P}: inbox, oldest first");
    assert!(inbox.windows(2).all(|pair| pair[0].0 < pair[1].0), "{P}: inbox numbers increase: {inbox:?}");

    let loaded = store.load(&s1).await.unwrap().expect("s1 loads");
    assert_eq!(loaded.record, session(&s1, SessionStatus::Idle), "{P}: load's record");
    assert_eq!(loaded.messages, messages, "{P}: load's messages");
    assert_eq!(loaded.calls.len(), 3, "{P}: load's calls");
    assert_eq!(loaded.steps.len(), 10, "{P}: load's steps");
    assert!(store.load(&key("nobody")).await.unwrap().is_none(), "{P}: load of a session not stored");

    // Replacing and deleting.
    let mut done = session(&s1, SessionStatus::Idle);
    done.state = json!({"n": 2});
    done.first_open_step = 8;
    store
        .commit(batch([
            Op::PutSession(Box::new(done.clone())),
            Op::DeleteCall { session: s1.clone(), call_id: "c2".to_owned() },
            Op::DeleteCall { session: s1.clone(), call_id: "never-existed".to_owned() },
            Op::DeleteInbox { session: s1.clone(), seq: inbox[0].0 },
            Op::PutTurn { session: s1.clone(), turn_id: "turn-1".to_owned(), record: turn(TurnStatus::Done) },
        ]))
        .await
        .unwrap();
    assert_eq!(store.session(&s1).await.unwrap(), Some(done), "{P}: a replaced session");
    assert_eq!(store.calls(&s1).await.unwrap(), [call("c1"), call("c3")], "{P}: calls after a delete");
    assert_eq!(store.inbox(&s1).await.unwrap(), inbox[1..], "{P}: inbox after a delete");
    assert_eq!(store.turn(&s1, "turn-1").await.unwrap(), Some(turn(TurnStatus::Done)), "{P}: a replaced turn");
    assert_eq!(store.inbox(&s10).await.unwrap().len(), 1, "{P}: another session's inbox");
    let loaded = store.load(&s1).await.unwrap().expect("s1 loads");
    assert_eq!(seqs(loaded.steps), [8, 9], "{P}: load reads steps from first_open_step");
    backend.reopen(store).await;
}

/// Session ids are any text without control characters (see
/// [`valid_id`](crate::valid_id)): each of these is one session, whose
/// reads see nothing of the others, although as strings (and as
/// `tenant/session` storage keys) many are prefixes of others.
const AWKWARD_IDS: [&str; 12] =
    ["a", "a/b", "a/", "a.b", "a b", "a/b/c", "/a", "ab", "chat/ü 1:x", "a%2Fb", " a ", "日本/語"];

async fn any_session_id_keeps_its_own_records<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: any session id keeps its own records";
    let store = backend.open().await;
    // Tenant `t` with session `1/a` is storage key `t/1/a`: it must not be
    // read as tenant `t1`'s session `a`.
    let foreign = SessionKey::new("t", "1/a");
    let mut ops = vec![Op::PutSession(Box::new(session(&foreign, SessionStatus::Running)))];
    ops.push(Op::PutEvent { session: foreign.clone(), seq: 0, record: event(1000) });
    for (n, id) in AWKWARD_IDS.iter().enumerate() {
        let s = key(id);
        let n = n as u64;
        // Every other session is running, so `unfinished` lists it.
        let status = if n.is_multiple_of(2) { SessionStatus::Running } else { SessionStatus::Idle };
        ops.push(Op::PutSession(Box::new(session(&s, status))));
        for seq in 0..2 {
            ops.push(Op::PutMessage { session: s.clone(), seq, record: message(&format!("{id}#{seq}")) });
            ops.push(Op::PutStep { session: s.clone(), seq, record: Box::new(step(&format!("{id}#{seq}"))) });
            ops.push(Op::PutEvent { session: s.clone(), seq, record: event(n * 10 + seq) });
        }
        ops.push(Op::PutCall { session: s.clone(), record: Box::new(call(&format!("{id}/call"))) });
        ops.push(Op::PutTurn { session: s.clone(), turn_id: id.to_string(), record: turn(TurnStatus::Running) });
        ops.push(Op::PushInbox { session: s.clone(), item: Box::new(item(id)) });
    }
    store.commit(batch(ops)).await.unwrap();

    let check = async |store: &B::Store, when: &str| {
        let mut sorted: Vec<&str> = AWKWARD_IDS.to_vec();
        sorted.sort_unstable();
        let listed: Vec<String> =
            store.sessions(Some("t1")).await.unwrap().into_iter().map(|r| r.key.session).collect();
        assert_eq!(listed, sorted, "{P} ({when}): sessions of t1, by id");
        assert_eq!(store.session_count("t1").await.unwrap(), sorted.len() as u64, "{P} ({when}): session_count");
        let listed: Vec<String> = store.sessions(Some("t")).await.unwrap().into_iter().map(|r| r.key.session).collect();
        assert_eq!(listed, ["1/a"], "{P} ({when}): sessions of t");
        for (at, after) in sorted.iter().enumerate() {
            let page: Vec<String> =
                store.sessions_page("t1", Some(after), 100).await.unwrap().into_iter().map(|r| r.key.session).collect();
            assert_eq!(page, sorted[at + 1..], "{P} ({when}): page after {after:?}");
            let page: Vec<String> =
                store.sessions_page("t1", Some(after), 1).await.unwrap().into_iter().map(|r| r.key.session).collect();
            assert_eq!(page, sorted[at + 1..].iter().take(1).copied().collect::<Vec<_>>(), "{P} ({when}): one after");
        }
        let unfinished = store.unfinished().await.unwrap();
        // Every `t1` session has an inbox item, `t`'s is running: each is
        // unfinished, once.
        let mut all: Vec<SessionKey> = AWKWARD_IDS.iter().map(|id| key(id)).chain([foreign.clone()]).collect();
        all.sort();
        assert_eq!(unfinished, all, "{P} ({when}): unfinished");
        for (n, id) in AWKWARD_IDS.iter().enumerate() {
            let s = key(id);
            let n = n as u64;
            let at = |what: &str| format!("{P} ({when}): {what} of session {id:?}");
            let record = store.session(&s).await.unwrap().expect("the session is stored");
            assert_eq!(record.key, s, "{}", at("record"));
            let messages = store.messages(&s).await.unwrap();
            assert_eq!(
                messages,
                [(0, message(&format!("{id}#0"))), (1, message(&format!("{id}#1")))],
                "{}",
                at("messages")
            );
            let steps = store.steps(&s, 0, usize::MAX).await.unwrap();
            assert_eq!(steps, [(0, step(&format!("{id}#0"))), (1, step(&format!("{id}#1")))], "{}", at("steps"));
            assert_eq!(store.steps(&s, 1, usize::MAX).await.unwrap(), steps[1..], "{}", at("steps from 1"));
            let events = store.events(&s, None, 10).await.unwrap();
            assert_eq!(events, [(0, event(n * 10)), (1, event(n * 10 + 1))], "{}", at("events"));
            assert_eq!(store.events(&s, Some(0), 10).await.unwrap(), events[1..], "{}", at("events after 0"));
            assert_eq!(store.calls(&s).await.unwrap(), [call(&format!("{id}/call"))], "{}", at("calls"));
            let inbox: Vec<InboxItem> = store.inbox(&s).await.unwrap().into_iter().map(|(_, i)| i).collect();
            assert_eq!(inbox, [item(id)], "{}", at("inbox"));
            for other in AWKWARD_IDS {
                let expected = (other == *id).then(|| turn(TurnStatus::Running));
                assert_eq!(store.turn(&s, other).await.unwrap(), expected, "{}", at(&format!("turn {other:?}")));
            }
            let loaded = store.load(&s).await.unwrap().expect("the session loads");
            assert_eq!((loaded.messages, loaded.steps), (messages, steps), "{}", at("load"));
        }
        assert_eq!(store.events(&foreign, None, 10).await.unwrap(), [(0, event(1000))], "{P} ({when}): t's events");
        assert!(store.session(&key("1/a")).await.unwrap().is_none(), "{P} ({when}): t1's `1/a` is not t's");
    };
    check(&store, "as committed").await;
    let store = backend.reopen(store).await;
    check(&store, "after a reopen").await;
    backend.reopen(store).await;
}

async fn ops_apply_in_order<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: ops apply in order";
    let store = backend.open().await;
    let s1 = key("s1");
    let with_state = |n: u64| {
        let mut record = session(&s1, SessionStatus::Running);
        record.state = json!({"n": n});
        record
    };
    // Within a batch: the later write wins, a delete after a put removes.
    store
        .commit(batch([
            Op::PutSession(Box::new(with_state(1))),
            Op::PutSession(Box::new(with_state(2))),
            Op::PutCall { session: s1.clone(), record: Box::new(call("gone")) },
            Op::DeleteCall { session: s1.clone(), call_id: "gone".to_owned() },
            Op::DeleteCall { session: s1.clone(), call_id: "kept".to_owned() },
            Op::PutCall { session: s1.clone(), record: Box::new(call("kept")) },
        ]))
        .await
        .unwrap();
    assert_eq!(store.session(&s1).await.unwrap(), Some(with_state(2)), "{P}: the last put of a batch wins");
    assert_eq!(store.calls(&s1).await.unwrap(), [call("kept")], "{P}: puts and deletes in batch order");
    // Across commits, each visible when its commit returns.
    for n in 3..20 {
        store
            .commit(batch([
                Op::PutSession(Box::new(with_state(n))),
                Op::PutEvent { session: s1.clone(), seq: n, record: event(n) },
            ]))
            .await
            .unwrap();
        assert_eq!(store.session(&s1).await.unwrap(), Some(with_state(n)), "{P}: commit {n} is read back at once");
        let last = store.events(&s1, Some(n - 1), 10).await.unwrap();
        assert_eq!(last, [(n, event(n))], "{P}: event {n} is read back at once");
    }
    let seqs: Vec<u64> = store.events(&s1, None, 100).await.unwrap().into_iter().map(|(seq, _)| seq).collect();
    assert_eq!(seqs, (3..20).collect::<Vec<_>>(), "{P}: events in sequence order");
    backend.reopen(store).await;
}

async fn a_committed_batch_survives_a_reopen<B: Backend>(backend: &mut B) {
    const P: &str = "a committed batch survives a reopen";
    let store = backend.open().await;
    store.commit(Batch::new()).await.unwrap_or_else(|e| panic!("conformance: {P}: an empty batch: {e}"));
    store.commit(full_batch(&key("s1"))).await.unwrap();
    assert_full_batch(P, &store, &key("s1")).await;
    let store = backend.reopen(store).await;
    assert_full_batch(P, &store, &key("s1")).await;
    backend.reopen(store).await;
}

/// The batches of the crash property: several sessions, every kind of op,
/// writes that replace and delete earlier ones.
fn crash_batches() -> Vec<Batch> {
    let (a, b) = (key("a"), key("b"));
    let mut batches = vec![full_batch(&a), full_batch(&b)];
    for n in 1..6u64 {
        let mut record = session(&a, if n % 2 == 0 { SessionStatus::Idle } else { SessionStatus::Running });
        record.state = json!({"n": n});
        record.first_open_step = n / 2;
        // Decisions counted per agent version are kept with the record.
        for v in 0..n {
            record.count_decision(Some(&format!("sha256:{}", v % 2)));
        }
        let mut ops = vec![
            Op::PutSession(Box::new(record)),
            Op::PutMessage { session: a.clone(), seq: n + 1, record: message(&format!("m{n}")) },
            Op::PutStep { session: a.clone(), seq: n, record: Box::new(step(&format!("d{n}"))) },
            Op::PutEvent { session: a.clone(), seq: n, record: event(n) },
            Op::PutCall { session: a.clone(), record: Box::new(call(&format!("c{}", n + 1))) },
            Op::DeleteCall { session: a.clone(), call_id: format!("c{n}") },
            Op::PutTurn { session: a.clone(), turn_id: format!("turn-{n}"), record: turn(TurnStatus::Done) },
            Op::PushInbox { session: b.clone(), item: Box::new(item(&format!("from a {n}"))) },
        ];
        if n == 3 {
            ops.push(Op::PutAgent(agent("t1", "agent")));
            ops.push(Op::PutKey(api_key("t1", "h1", n)));
            ops.push(Op::PutTenant(tenant("t1", json!({"max_sessions": n}), n)));
        }
        if n == 5 {
            ops.push(Op::DeleteKey { tenant: "t1".to_owned(), hash: "h1".to_owned() });
        }
        batches.push(batch(ops));
    }
    batches
}

async fn a_crash_between_commits_keeps_exactly_the_commits_before_it<B: Backend>(backend: &mut B) {
    let sessions = [key("a"), key("b")];
    let turns = ["turn-1", "turn-2", "turn-3", "turn-4", "turn-5"];
    let batches = crash_batches();
    for crash_at in 0..=batches.len() {
        let faulty = FaultyStore::new(backend.open().await);
        faulty.crash_after(crash_at as u64);
        let model = MemStore::new();
        for (n, batch) in batches.iter().enumerate() {
            let result = faulty.commit(batch.clone()).await;
            assert_eq!(result.is_ok(), n < crash_at, "conformance: crash after {crash_at} commits: commit {n}");
            if n < crash_at {
                model.commit(batch.clone()).await.unwrap();
            }
        }
        let store = backend.reopen(faulty.into_inner()).await;
        let expected = dump(&model, &sessions, &turns).await;
        let found = dump(&store, &sessions, &turns).await;
        assert!(
            found == expected,
            "conformance: a crash after {crash_at} commits leaves exactly them\nexpected: {expected:#}\nfound: {found:#}"
        );
        backend.reopen(store).await;
    }
}

async fn concurrent_commits_all_land<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: concurrent commits all land";
    let store = Arc::new(backend.open().await);
    let commits = (0..200).map(|n| {
        let store = Arc::clone(&store);
        async move {
            let key = key(&format!("s{n}"));
            let ops = [
                Op::PutSession(Box::new(session(&key, SessionStatus::Running))),
                Op::PutMessage { session: key.clone(), seq: 0, record: message(&format!("m{n}")) },
            ];
            store.commit(batch(ops)).await.unwrap();
            // Visible as soon as its own commit returned, whatever the
            // others are doing.
            let messages = store.messages(&key).await.unwrap();
            assert_eq!(messages, [(0, message(&format!("m{n}")))], "{P}: s{n} right after its commit");
        }
    });
    join_all(commits).await;
    assert_eq!(store.unfinished().await.unwrap().len(), 200, "{P}: every session is there");
    assert!(store.stored_bytes().await.unwrap() > 0, "{P}: stored_bytes counts them");
    let stats = store.stats().unwrap();
    assert_eq!(stats.batches, 200, "{P}: stats count every batch");
    assert!(stats.commits >= 1 && stats.commits <= stats.batches, "{P}: commits: {stats:?}");
    let store = Arc::into_inner(store).expect("no other owner");
    backend.reopen(store).await;
}

/// Polls every future to its end, concurrently on this task (the futures
/// need not be `'static`, so they are not spawned).
async fn join_all<F: Future<Output = ()>>(futures: impl IntoIterator<Item = F>) {
    let mut pending: Vec<_> = futures.into_iter().map(Box::pin).collect();
    std::future::poll_fn(move |cx| {
        pending.retain_mut(|future| future.as_mut().poll(cx).is_pending());
        if pending.is_empty() { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
}

async fn unfinished_follows_status_and_inbox_across_reopen<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: unfinished follows status and inbox";
    let store = backend.open().await;
    store
        .commit(batch([
            Op::PutSession(Box::new(session(&key("running"), SessionStatus::Running))),
            Op::PutSession(Box::new(session(&key("idle"), SessionStatus::Idle))),
            Op::PutSession(Box::new(session(&key("waiting"), SessionStatus::Waiting))),
            Op::PutSession(Box::new(session(&key("idle-with-mail"), SessionStatus::Idle))),
            Op::PushInbox { session: key("idle-with-mail"), item: Box::new(item("wake up")) },
            Op::PushInbox { session: key("idle-with-mail"), item: Box::new(item("again")) },
            // Mail for a session not created yet is not forgotten either.
            Op::PushInbox { session: key("unborn"), item: Box::new(item("start")) },
        ]))
        .await
        .unwrap();
    let expected = [key("idle-with-mail"), key("running"), key("unborn"), key("waiting")];
    assert_eq!(store.unfinished().await.unwrap(), expected, "{P}");
    let store = backend.reopen(store).await;
    assert_eq!(store.unfinished().await.unwrap(), expected, "{P}: after a reopen");

    let mail: Vec<_> = store.inbox(&key("idle-with-mail")).await.unwrap().into_iter().map(|(seq, _)| seq).collect();
    let unborn = store.inbox(&key("unborn")).await.unwrap()[0].0;
    let mut ops = vec![
        Op::PutSession(Box::new(session(&key("running"), SessionStatus::Idle))),
        Op::PutSession(Box::new(session(&key("waiting"), SessionStatus::Running))),
        Op::DeleteInbox { session: key("unborn"), seq: unborn },
    ];
    ops.extend(mail.iter().map(|&seq| Op::DeleteInbox { session: key("idle-with-mail"), seq }));
    store.commit(batch(ops)).await.unwrap();
    assert_eq!(store.unfinished().await.unwrap(), [key("waiting")], "{P}: after settling");
    let store = backend.reopen(store).await;
    assert_eq!(store.unfinished().await.unwrap(), [key("waiting")], "{P}: after settling and a reopen");
    backend.reopen(store).await;
}

async fn events_replay_from_every_id<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: events replay from every id";
    let store = backend.open().await;
    let s1 = key("s1");
    let mut next_event = 0;
    for commit in 0..200u64 {
        let mut ops = vec![Op::PutMessage { session: s1.clone(), seq: commit, record: message("m") }];
        // 0, 1, 2 or 3 events per commit.
        for _ in 0..commit % 4 {
            ops.push(Op::PutEvent { session: s1.clone(), seq: next_event, record: event(next_event) });
            next_event += 1;
        }
        ops.push(Op::PutSession(Box::new(session(&s1, SessionStatus::Running))));
        store.commit(batch(ops)).await.unwrap();
    }
    let all: Vec<_> = (0..next_event).map(|n| (n, event(n))).collect();
    assert_eq!(store.events(&s1, None, usize::MAX).await.unwrap(), all, "{P}: every event");
    for after in 0..next_event + 2 {
        for limit in [1, 3, 1000] {
            let expected: Vec<_> = all.iter().filter(|(n, _)| *n > after).take(limit).cloned().collect();
            let found = store.events(&s1, Some(after), limit).await.unwrap();
            assert_eq!(found, expected, "{P}: after {after}, limit {limit}");
        }
    }
    assert!(store.events(&key("nobody"), None, 10).await.unwrap().is_empty(), "{P}: no session, no events");
    backend.reopen(store).await;
}

async fn inbox_numbers_keep_increasing_across_reopen<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: inbox numbers keep increasing";
    let mut store = backend.open().await;
    let mut last = None;
    for round in 0..3 {
        for session in ["a", "b"] {
            store.commit(batch([Op::PushInbox { session: key(session), item: Box::new(item("x")) }])).await.unwrap();
            let inbox = store.inbox(&key(session)).await.unwrap();
            assert_eq!(inbox.len(), 1, "{P}: round {round}");
            let seq = inbox[0].0;
            assert!(last.is_none_or(|last| seq > last), "{P}: round {round}: {seq} after {last:?}");
            last = Some(seq);
            // Emptying the inbox must not let numbers be reused.
            store.commit(batch([Op::DeleteInbox { session: key(session), seq }])).await.unwrap();
        }
        store = backend.reopen(store).await;
    }
    backend.reopen(store).await;
}

async fn agents_and_keys_are_kept_per_tenant<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: agents and keys are kept per tenant";
    let store = backend.open().await;
    store
        .commit(batch([
            Op::PutAgent(agent("a", "x")),
            Op::PutAgent(agent("a", "y")),
            Op::PutAgent(agent("a-b", "x")),
            Op::PutKey(api_key("a", "h1", 1)),
            Op::PutKey(api_key("b", "h2", 1)),
        ]))
        .await
        .unwrap();
    let ids = async |tenant| store.agents(tenant).await.unwrap().into_iter().map(|a| a.agent_id).collect::<Vec<_>>();
    assert_eq!(ids(Some("a")).await, ["x", "y"], "{P}: agents of a");
    assert_eq!(ids(Some("a-b")).await, ["x"], "{P}: agents of a-b");
    assert_eq!(ids(None).await.len(), 3, "{P}: every agent");
    assert_eq!(store.agent("a", "y").await.unwrap(), Some(agent("a", "y")), "{P}: one agent");
    assert_eq!(store.agent("b", "y").await.unwrap(), None, "{P}: another tenant's agent");
    assert_eq!(store.keys().await.unwrap().len(), 2, "{P}: keys");
    store
        .commit(batch([
            Op::DeleteAgent { tenant: "a".to_owned(), agent_id: "x".to_owned() },
            Op::DeleteKey { tenant: "a".to_owned(), hash: "h1".to_owned() },
        ]))
        .await
        .unwrap();
    assert_eq!(ids(Some("a")).await, ["y"], "{P}: agents after a delete");
    assert_eq!(store.keys().await.unwrap(), [api_key("b", "h2", 1)], "{P}: keys after a delete");
    backend.reopen(store).await;
}

async fn tenants_are_kept_replaced_and_removed<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: tenants are kept, replaced and removed";
    let store = backend.open().await;
    let acme = tenant("acme", json!({"max_sessions": 5, "budget": "2.5"}), 1);
    store
        .commit(batch([
            Op::PutTenant(acme.clone()),
            Op::PutTenant(tenant("acme-b", json!({}), 2)),
            Op::PutTenant(tenant("zed", json!({}), 3)),
        ]))
        .await
        .unwrap();
    let names =
        async |store: &B::Store| store.tenants().await.unwrap().into_iter().map(|t| t.tenant).collect::<Vec<_>>();
    assert_eq!(names(&store).await, ["acme", "acme-b", "zed"], "{P}: by name");
    let lowered = tenant("acme", json!({"max_sessions": null}), 1);
    store.commit(batch([Op::PutTenant(lowered.clone()), Op::DeleteTenant { tenant: "zed".to_owned() }])).await.unwrap();
    assert_eq!(store.tenants().await.unwrap()[0], lowered, "{P}: replaced whole");
    assert_eq!(names(&store).await, ["acme", "acme-b"], "{P}: removed");
    let store = backend.reopen(store).await;
    assert_eq!(store.tenants().await.unwrap()[0], lowered, "{P}: replaced, after a reopen");
    assert_eq!(names(&store).await, ["acme", "acme-b"], "{P}: removed, after a reopen");
    backend.reopen(store).await;
}

async fn mcp_servers_are_kept_per_tenant<B: Backend>(backend: &mut B) {
    const P: &str = "conformance: MCP servers are kept per tenant, replaced and removed";
    let server = |tenant: &str, name: &str, url: &str| crate::McpServerRecord {
        tenant: tenant.to_owned(),
        name: name.to_owned(),
        url: url.to_owned(),
        headers: vec![("Authorization".to_owned(), format!("Bearer {name}")), ("X-Two".to_owned(), "2".to_owned())],
        updated_ms: 7,
    };
    let store = backend.open().await;
    store
        .commit(batch([
            Op::PutMcpServer(server("b", "gh", "https://b/")),
            Op::PutMcpServer(server("a", "zz", "https://a/zz")),
            Op::PutMcpServer(server("a", "gh", "https://a/gh")),
            Op::PutMcpServer(server("a-b", "gh", "https://ab/")),
        ]))
        .await
        .unwrap();
    let names = async |store: &B::Store| {
        store.mcp_servers().await.unwrap().into_iter().map(|s| format!("{}/{}", s.tenant, s.name)).collect::<Vec<_>>()
    };
    assert_eq!(names(&store).await, ["a/gh", "a/zz", "a-b/gh", "b/gh"], "{P}: by tenant and name");
    let replaced = server("a", "gh", "https://a/gh2");
    store
        .commit(batch([
            Op::PutMcpServer(replaced.clone()),
            Op::DeleteMcpServer { tenant: "a".to_owned(), name: "zz".to_owned() },
        ]))
        .await
        .unwrap();
    assert_eq!(store.mcp_servers().await.unwrap()[0], replaced, "{P}: replaced whole, headers in order");
    let store = backend.reopen(store).await;
    assert_eq!(names(&store).await, ["a/gh", "a-b/gh", "b/gh"], "{P}: after a reopen");
    assert_eq!(store.mcp_servers().await.unwrap()[0], replaced, "{P}: replaced, after a reopen");
    backend.reopen(store).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::FaultyStore;

    struct Mem;

    impl Backend for Mem {
        type Store = MemStore;
        async fn open(&mut self) -> MemStore {
            MemStore::new()
        }
        async fn reopen(&mut self, store: MemStore) -> MemStore {
            store
        }
    }

    #[tokio::test]
    async fn the_memory_store_conforms() {
        run(&mut Mem).await;
    }

    /// A store that reorders commits ([`FaultyStore::reorder_commits`]).
    struct Broken;

    impl Backend for Broken {
        type Store = FaultyStore<MemStore>;
        async fn open(&mut self) -> FaultyStore<MemStore> {
            let store = FaultyStore::new(MemStore::new());
            store.reorder_commits();
            store
        }
        async fn reopen(&mut self, store: FaultyStore<MemStore>) -> FaultyStore<MemStore> {
            store
        }
    }

    #[tokio::test]
    #[should_panic(expected = "conformance: reads return what the ops wrote")]
    async fn a_store_that_reorders_commits_fails() {
        run(&mut Broken).await;
    }
}
