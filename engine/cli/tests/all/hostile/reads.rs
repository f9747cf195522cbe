//! Reads whose cost grew faster than what they return. A page of a
//! session's decisions matched every call a decision started against
//! every action of that decision (150,000 client tool calls: 150,000²
//! comparisons), on a thread that serves other connections, and went on
//! after its client left; an agent's read summed decision counts over
//! every session record of its tenant, and a listing by owner looked at
//! up to 10,000 records per page. Now a page of decisions indexes calls
//! by id and runs off the serving threads, stopping when its client goes;
//! decision counts and owners are kept by the store as sessions are
//! written; and listings that still look at many sessions (by status or
//! agent) are held to a rate per tenant.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_engine::store::conformance::sample;
use subs_engine::store::{Batch, Op, SessionKey, SessionStatus, Store as _};

use super::{Arena, HOSTILE, json_worker};
use crate::{TOOLS, http};

/// Client tool calls in the wide decision: some 7 MiB of JSON, under the
/// 16 MiB an HTTP worker's decision may take. Past the default
/// `max_actions_per_decision`, which the test's config raises for the
/// hostile tenant ([`WIDE`]) so that reading the decision is what is
/// tried: matched by scanning its actions for each call, one page of it
/// took minutes of CPU.
const CALLS: usize = 100_000;

/// The hostile tenant's bounds, raised to let the wide decision in.
const WIDE: &str = "[tenants.hostile]\nmax_actions_per_decision = 100000\nmax_calls_per_turn = 100000\n";

/// An agent whose first decision starts `calls` client tool calls; its
/// turn then waits for the client.
async fn wide(calls: usize) -> String {
    json_worker(move |request: Value| async move {
        match request["trigger"]["type"].as_str().unwrap_or_default() {
            "client.messages" => {
                let calls: Vec<Value> = (0..calls)
                    .map(|n| {
                        json!({"type": "tool.call", "id": format!("c{n}"), "name": "t", "arguments": {},
                            "handler": "client"})
                    })
                    .collect();
                json!({"actions": calls})
            }
            _ => json!({}),
        }
    })
    .await
}

/// Waits until session `session` of the hostile tenant has `status`, as
/// the sessions listing says (a read that loads none of its calls).
async fn reaches(arena: &Arena, session: &str, status: &str, within: Duration) {
    subs_tests::wait::eventually(within, format!("session {session} is {status}"), || async {
        let (code, page) = arena.call(reqwest::Method::GET, "/v1/sessions?limit=10", Some(HOSTILE.1), None).await;
        assert_eq!(code, 200, "{page}");
        let found = page.as_array().and_then(|s| s.iter().find(|s| s["session_id"] == session)).cloned();
        if found.as_ref().is_some_and(|s| s["status"] == status) { Ok(()) } else { Err(format!("{found:?}")) }
    })
    .await;
}

/// A decision of a page, as far as the wide test looks at it.
#[derive(Debug, serde::Deserialize)]
struct PagedDecision {
    calls: Vec<PagedCall>,
}

/// A call of a page's decision.
#[derive(Debug, serde::Deserialize)]
struct PagedCall {
    id: String,
    kind: String,
    name: Option<String>,
    arguments: Option<Value>,
}

/// `GET path` of a page of decisions as the hostile tenant: the status,
/// its decisions' calls (or the body, when it is not a page), its size,
/// and how long the answer took. Read into just those fields: a page of
/// the wide decision is some 26 MB of JSON.
async fn timed_page(url: &str, path: &str) -> (u16, Result<Vec<PagedDecision>, String>, usize, Duration) {
    let started = Instant::now();
    let response = http().get(format!("{url}{path}")).bearer_auth(HOSTILE.1).send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let took = started.elapsed();
    let page = serde_json::from_str(&text).map_err(|e| format!("{e}: {text:.300}"));
    (status, page, text.len(), took)
}

/// `GET path` as the hostile tenant: the status, the body, and how long
/// the answer took.
async fn timed_get(url: &str, path: &str) -> (u16, Value, Duration) {
    let started = Instant::now();
    let response = http().get(format!("{url}{path}")).bearer_auth(HOSTILE.1).send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), started.elapsed())
}

/// The wide decision is applied in seconds, holding memory in proportion
/// to it; its page answers in time linear in its calls, twice at once,
/// while the neighbour's turns and `/healthz` go on; a client that leaves
/// mid-page stops the work it asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_of_100k_calls_pages_beside_the_neighbour_and_stops_with_its_client() {
    let arena = Arena::start(WIDE).await;
    let (status, body) = arena.put_worker(HOSTILE.1, "wide", &wide(CALLS).await).await;
    assert!(status < 300, "the wide agent: {body}");
    let input = json!({"type": "client.message", "agent_id": "wide", "message": {"role": "user", "content": "go"}});
    let (status, body) =
        arena.call(reqwest::Method::POST, "/v1/sessions/wide/input", Some(HOSTILE.1), Some(input)).await;
    assert_eq!(status, 202, "{body}");
    let (started, cpu) = (Instant::now(), arena.cpu_time());
    reaches(&arena, "wide", "waiting", Duration::from_secs(60)).await;
    let (applied, applying) = (started.elapsed(), arena.cpu_time() - cpu);
    eprintln!(
        "the wide decision was applied in {applied:?} ({applying:?} of CPU); the server holds {} MiB, peaked at {} MiB",
        arena.rss() >> 20,
        arena.peak_rss() >> 20
    );
    // What one decision costs to parse, check, apply and store is linear
    // in its calls, a few KiB each: 100,000 of them applied in seconds of
    // a debug build's CPU, the server under 700 MiB.
    assert!(applying < Duration::from_secs(10), "the wide decision took {applying:?} of CPU");
    arena.assert_peak_below(700 << 20);

    // Two pages at once, beside the neighbour.
    let neighbour = arena.neighbour();
    let cpu = arena.cpu_time();
    let path = "/v1/sessions/wide/decisions?limit=2";
    // The quadratic match took minutes of CPU for one page: give up on a
    // page that takes that long rather than wait for it. The bound is on
    // the wall clock, which a loaded host stretches (the wide decision
    // took 32 s to apply for 9 s of CPU beside two busy loops on two
    // cores), so it leaves room; linearity is the CPU bound's to check.
    let patient = |url: String| async move {
        tokio::time::timeout(Duration::from_secs(120), timed_page(&url, path)).await.expect("a page within 120 s")
    };
    let (a, b) = tokio::join!(patient(arena.url.clone()), patient(arena.url.clone()));
    let cpu = arena.cpu_time() - cpu;
    let watched = neighbour.stop().await;
    eprintln!(
        "two pages in {:?} and {:?} ({cpu:?} of CPU); the server peaked at {} MiB; neighbour p50 {:?}",
        a.3,
        b.3,
        arena.peak_rss() >> 20,
        watched.turn_p50()
    );
    for (status, page, bytes, took) in [&a, &b] {
        assert_eq!(*status, 200, "{page:.300?}");
        let decisions = page.as_ref().expect("a page of decisions");
        let calls = &decisions[1].calls;
        assert_eq!(calls.len(), CALLS, "the wide decision's calls");
        let last = &calls[CALLS - 1];
        let shown = (last.id.as_str(), last.kind.as_str(), last.name.as_deref(), last.arguments.as_ref());
        assert_eq!(shown, (format!("c{}", CALLS - 1).as_str(), "tool_call", Some("t"), Some(&json!({}))), "{last:?}");
        eprintln!("a page of {bytes} bytes in {took:?}");
    }
    // Linear: seconds of CPU a page in a debug build, where the quadratic
    // match took minutes. Two pages took 21 s of a debug build's CPU on a
    // 2-core machine running other tests and a build beside them (CPU
    // time grows with contention), so the bound leaves room above that
    // and stays far below minutes.
    assert!(cpu < Duration::from_secs(30), "two pages took {cpu:?} of CPU");
    watched.assert_within(Duration::from_secs(15), Duration::from_secs(2));
    // Two pages add a few hundred MiB to what the session holds.
    arena.assert_peak_below(1200 << 20);

    // Clients that go away mid-page: the server stops working for them at
    // its next look (between its reads, between batches of calls, while
    // it encodes), instead of building pages nobody reads.
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().expect("a client");
    let left = arena.cpu_time();
    let (first, second) = tokio::join!(
        impatient.get(format!("{}{path}", arena.url)).bearer_auth(HOSTILE.1).send(),
        impatient.get(format!("{}{path}", arena.url)).bearer_auth(HOSTILE.1).send(),
    );
    assert!(first.is_err() && second.is_err(), "a page came within 300 ms");
    // Until the server is idle: less than 50 ms of CPU in half a second.
    subs_tests::wait::eventually(Duration::from_secs(60), "the server is idle after its clients left", || async {
        let before = arena.cpu_time();
        // The half second the CPU is measured over.
        subs_tests::wait::pace(Duration::from_millis(500)).await;
        let used = arena.cpu_time() - before;
        if used < Duration::from_millis(50) { Ok(()) } else { Err(format!("{used:?} of CPU in 500 ms")) }
    })
    .await;
    let spent = arena.cpu_time() - left;
    eprintln!("two pages whose clients left cost {spent:?} of CPU; two read to the end {cpu:?}");
    assert!(spent < cpu / 2, "the server went on for clients that left: {spent:?}, against {cpu:?} for two pages");
}

/// Sessions seeded into the hostile tenant's store.
const SESSIONS: usize = 20_000;
/// Owners of the seeded sessions, round robin.
const OWNERS: usize = 100;

/// At 20,000 sessions an agent's read and a listing by owner cost what
/// they return (a few milliseconds), four loops of them leave the
/// neighbour's turns as they were, and listings that look at many
/// sessions are held to the tenant's rate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_tenant_with_many_sessions_cost_what_they_return() {
    let mut arena = Arena::start("[tenants.hostile]\nmax_listing_scan_per_sec = 1000\n").await;
    let tools = std::fs::read(TOOLS).expect("the tools component is built");
    let (status, agent) = arena.upload(HOSTILE.1, "a", tools).await;
    assert_eq!(status, 201, "{agent}");
    let version = agent["version"].as_str().expect("a version").to_owned();
    // One real turn: the agent's version has decided once.
    let input = json!({"type": "client.action", "agent_id": "a", "name": "noop"});
    let (status, body) =
        arena.call(reqwest::Method::POST, "/v1/sessions/real/input", Some(HOSTILE.1), Some(input)).await;
    assert_eq!(status, 202, "{body}");
    reaches(&arena, "real", "idle", Duration::from_secs(30)).await;
    let (_, agent) = arena.call(reqwest::Method::GET, "/v1/agents/a", Some(HOSTILE.1), None).await;
    let decided = agent["versions"][0]["decisions"].as_u64().expect("counted");
    assert!(decided >= 1, "{agent}");

    let seeded = Instant::now();
    arena.while_stopped(|data| seed(data, &version));
    eprintln!("{SESSIONS} sessions seeded in {:?}", seeded.elapsed());

    // Beside four loops of a read that touches no session, then beside
    // four loops of these: what they cost the neighbour is what any read
    // costs, not what the tenant's sessions would.
    let (cheap, beside_cheap) = loops(&arena, |_| "/v1/agents".to_owned()).await;
    let (reads, beside_reads) = loops(&arena, |n| {
        if n % 2 == 0 {
            "/v1/agents/a".to_owned()
        } else {
            format!("/v1/sessions?identity=owner-{}&limit=100", n % OWNERS)
        }
    })
    .await;
    let median = |reads: &[(String, Value, Duration)], prefix: &str| {
        let mut times: Vec<Duration> = reads.iter().filter(|r| r.0.starts_with(prefix)).map(|r| r.2).collect();
        times.sort();
        times.get(times.len() / 2).copied().unwrap_or_default()
    };
    let (list_read, agent_read, owner_read) =
        (median(&cheap, "/v1/agents"), median(&reads, "/v1/agents/a"), median(&reads, "/v1/sessions"));
    eprintln!(
        "in 4 s: {} agent listings ({list_read:?} each), {} agent reads and owners' pages \
         ({agent_read:?}, {owner_read:?}); neighbour p50 {:?} beside the listings, {:?} beside the reads",
        cheap.len(),
        reads.len(),
        beside_cheap.turn_p50(),
        beside_reads.turn_p50()
    );
    // What the reads say: every seeded decision counted, an owner's page
    // of its own sessions.
    let (path, agent, _) = reads.iter().find(|r| r.0 == "/v1/agents/a").expect("an agent's read");
    let counted = agent["versions"].as_array().and_then(|v| v.iter().find(|v| v["version"] == *version.as_str()));
    assert_eq!(counted.map(|v| &v["decisions"]), Some(&json!(decided + SESSIONS as u64)), "{path}: {agent}");
    let (path, page, _) = reads.iter().find(|r| r.0.starts_with("/v1/sessions")).expect("an owner's page");
    assert_eq!(page.as_array().map(Vec::len), Some(100), "{path}");
    assert!(page.as_array().unwrap().iter().all(|s| s["identity"]["id"] == path[22..29]), "{path}: {page:.300}");
    // Each costs what it returns: milliseconds like a listing of agents,
    // where reading every session took the better part of a second.
    let bound = |read: Duration| read < list_read * 3 + Duration::from_millis(50);
    assert!(bound(agent_read), "an agent's read took {agent_read:?}, a listing {list_read:?}");
    assert!(bound(owner_read), "an owner's page took {owner_read:?}, a listing {list_read:?}");
    beside_reads.assert_within(Duration::from_secs(5), Duration::from_secs(2));
    let p50 = beside_cheap.turn_p50() * 2 + Duration::from_millis(50);
    assert!(
        beside_reads.turn_p50() < p50,
        "the neighbour's p50 was {:?} beside listings, {:?} beside reads of many sessions",
        beside_cheap.turn_p50(),
        beside_reads.turn_p50()
    );

    // A listing by status looks at up to 10,000 sessions: the tenant's
    // 1,000 a second allow one, and refuse the next for ten seconds.
    let (status, page, took) = timed_get(&arena.url, "/v1/sessions?status=running").await;
    assert_eq!(status, 200, "{page:.300}");
    eprintln!("a page by status in {took:?}");
    let (status, refused, _) = timed_get(&arena.url, "/v1/sessions?status=running").await;
    assert_eq!((status, refused["code"].as_str()), (429, Some("limit_exceeded")), "{refused}");
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("max_listing_scan_per_sec")), "{refused}");
}

/// Four loops of `GET path(n)` (the `n`th read of a loop) as the hostile
/// tenant for four seconds, beside the neighbour: each read's path, body
/// and time, and what the neighbour saw.
async fn loops(arena: &Arena, path: fn(usize) -> String) -> (Vec<(String, Value, Duration)>, super::Watched) {
    let neighbour = arena.neighbour();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loops: Vec<_> = (0..4)
        .map(|n| {
            let (url, stop) = (arena.url.clone(), stop.clone());
            tokio::spawn(async move {
                let mut took = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let path = path(n + 4 * took.len());
                    let (status, body, elapsed) = timed_get(&url, &path).await;
                    assert_eq!(status, 200, "{path}: {body:.300}");
                    took.push((path, body, elapsed));
                }
                took
            })
        })
        .collect();
    // The attack's four seconds.
    subs_tests::wait::pace(Duration::from_secs(4)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut reads = Vec::new();
    for handle in loops {
        reads.extend(handle.await.expect("a loop"));
    }
    (reads, neighbour.stop().await)
}

/// Seeds [`SESSIONS`] idle sessions of agent `a` into the store in `data`,
/// owned round robin by [`OWNERS`] owners, each with one decision of
/// `version` counted, as the engine counts them.
fn seed(data: &std::path::Path, version: &str) {
    let (data, version) = (data.to_owned(), version.to_owned());
    // A runtime of its own, on a thread of its own: the test's runtime
    // cannot block on it.
    std::thread::spawn(move || seed_on(&data, &version)).join().expect("seeded");
}

fn seed_on(data: &std::path::Path, version: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    runtime.block_on(async {
        let store = subs_store_redb::RedbStore::open(data.join("subs.redb")).expect("the store opens");
        for chunk in 0..SESSIONS / 1000 {
            let mut batch = Batch::new();
            for n in chunk * 1000..(chunk + 1) * 1000 {
                let mut record =
                    sample::session(&SessionKey::new(HOSTILE.0, format!("seeded-{n:05}")), SessionStatus::Idle);
                record.agent_id = "a".to_owned();
                record.identity.id = Some(format!("owner-{}", n % OWNERS));
                record.count_decision(Some(version));
                batch.push(Op::PutSession(Box::new(record)));
                batch.push(Op::CountDecisions {
                    tenant: HOSTILE.0.to_owned(),
                    agent_id: "a".to_owned(),
                    version: version.to_owned(),
                    decisions: 1,
                });
            }
            store.commit(batch).await.expect("seeded");
        }
        store.close().await.expect("the store closes");
    });
}
