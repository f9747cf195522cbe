//! Sub-agent fan-out: an agent listing itself as its own sub-agent spawns
//! copies of itself, which spawn copies in turn. The spawns of a turn, the
//! depth and the sessions of a tree are bounded; `max_sessions` holds
//! against many actors spawning (and clients creating sessions) at once;
//! and a restart on the same data resumes a few sessions at a time, within
//! the same bounds, while the server answers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Arena, HOSTILE, HOSTILE2, NEIGHBOUR, OPERATOR, json_worker, streamed_turn};

/// The agent id the fan worker is registered under (its own sub-agent).
const FAN: &str = "fan";

/// What the fan worker saw: decisions in flight (and the most at once),
/// and the errors of the `sub_agent.finished` it was told of.
#[derive(Default)]
struct Seen {
    in_flight: AtomicUsize,
    most: AtomicUsize,
    decisions: AtomicUsize,
    refusals: Mutex<Vec<String>>,
}

impl Seen {
    fn refusals(&self) -> Vec<String> {
        self.refusals.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

/// One decision in flight, counted out when dropped.
struct Flying(Arc<Seen>);

impl Drop for Flying {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves an agent that declares itself as its sub-agent and answers every
/// turn's messages by spawning `children` copies of itself, each decision
/// taking `delay`; its URL.
async fn fan_worker(children: usize, delay: Duration, seen: Arc<Seen>) -> String {
    json_worker(move |request: Value| {
        let seen = seen.clone();
        async move {
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most.fetch_max(now, Ordering::SeqCst);
            seen.decisions.fetch_add(1, Ordering::SeqCst);
            // Out of flight however the request ends: a server that dies
            // drops it mid-sleep.
            let _flying = Flying(seen.clone());
            // A slow agent: its decisions pile up in flight.
            subs_tests::wait::pace(delay).await;
            let trigger = &request["trigger"];
            match trigger["type"].as_str().unwrap_or_default() {
                "session.start" => json!({"agent": {"model": "subs/offline", "sub_agents": [{"id": FAN}]}}),
                "client.messages" => {
                    let session = request["session_id"].as_str().unwrap_or_default();
                    let spawns: Vec<Value> = (0..children)
                        .map(|i| {
                            json!({"type": "sub_agent.spawn", "session_id": format!("{session}.{i}"),
                                "agent_id": FAN, "tool_call_id": format!("c{i}")})
                        })
                        .collect();
                    json!({"actions": spawns})
                }
                "sub_agent.finished" => {
                    if let Some(error) = trigger["error"].as_str() {
                        seen.refusals.lock().unwrap_or_else(PoisonError::into_inner).push(error.to_owned());
                    }
                    json!({})
                }
                _ => json!({}),
            }
        }
    })
    .await
}

/// Every session of `key`'s tenant, as `GET /v1/sessions` lists them.
async fn sessions(arena: &Arena, key: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        // Ids here need no percent-encoding.
        let path = match &after {
            Some(after) => format!("/v1/sessions?limit=1000&after={after}"),
            None => "/v1/sessions?limit=1000".to_owned(),
        };
        let (status, page) = arena.call(reqwest::Method::GET, &path, Some(key), None).await;
        assert_eq!(status, 200, "{page}");
        let page = page.as_array().cloned().unwrap_or_default();
        let full = page.len() == 1000;
        if let Some(last) = page.last() {
            after = last["session_id"].as_str().map(str::to_owned);
        }
        all.extend(page);
        if !full {
            return all;
        }
    }
}

/// Waits until every session of `key`'s tenant is idle, at most `within`;
/// then lists them.
async fn settled(arena: &Arena, key: &str, within: Duration) -> Vec<Value> {
    subs_tests::wait::eventually(within, "every session is idle", || async {
        let all = sessions(arena, key).await;
        let busy = all.iter().filter(|s| s["status"] != "idle").count();
        if busy == 0 { Ok(all) } else { Err(format!("{busy} of {} sessions still busy", all.len())) }
    })
    .await
}

/// Sessions by depth below their root.
fn by_depth(sessions: &[Value]) -> BTreeMap<usize, usize> {
    let mut depths = BTreeMap::new();
    for session in sessions {
        *depths.entry(session["ancestry"].as_array().map_or(0, Vec::len)).or_default() += 1;
    }
    depths
}

const BOUNDS: &str = "[limits]\nmax_spawns_per_turn = 5\nmax_sub_agent_depth = 2\nmax_tree_sessions = 20\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_spawning_agent_is_bounded_per_turn_by_depth_and_per_tree() {
    let arena = Arena::start(BOUNDS).await;
    let seen = Arc::new(Seen::default());
    let worker = fan_worker(20, Duration::ZERO, seen.clone()).await;
    let (status, body) = arena.put_worker(HOSTILE.1, FAN, &worker).await;
    assert!(status < 300, "the fan agent: {body}");

    let neighbour = arena.neighbour();
    // One input: 20 children a turn, each spawning 20, with no end of its
    // own; unbounded, 20 + 400 + 8,000 + … sessions.
    let (status, event, data) =
        tokio::time::timeout(Duration::from_secs(60), streamed_turn(&arena.url, HOSTILE.1, "root", FAN, "go"))
            .await
            .expect("the root's turn ends once its bounded tree has");
    assert_eq!((status, event.as_str()), (200, "turn.done"), "{data}");
    let all = settled(&arena, HOSTILE.1, Duration::from_secs(30)).await;
    neighbour.stop().await.assert_within(Duration::from_secs(10), Duration::from_secs(2));

    assert_eq!(all.len(), 20, "the tree holds max_tree_sessions, its root included: {:?}", by_depth(&all));
    let depths = by_depth(&all);
    assert_eq!(depths.keys().max(), Some(&2), "max_sub_agent_depth: {depths:?}");
    assert_eq!(depths[&1], 5, "the root's turn spawned max_spawns_per_turn children: {depths:?}");
    let refusals = seen.refusals();
    for bound in ["`max_spawns_per_turn`", "`max_sub_agent_depth`", "`max_tree_sessions`"] {
        assert!(refusals.iter().any(|r| r.contains(bound)), "no spawn was refused naming {bound}: {refusals:?}");
    }
    // 20 sessions, each told of its 20 spawns: a few hundred decisions, not
    // an explosion.
    assert!(seen.decisions.load(Ordering::SeqCst) < 20 * 25, "{} decisions", seen.decisions.load(Ordering::SeqCst));
    eprintln!("the server peaked at {} MiB", arena.peak_rss() >> 20);
    arena.assert_peak_below(200 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_spawns_and_inputs_cannot_pass_max_sessions() {
    let extra = "[limits]\nmax_spawns_per_turn = 8\nmax_sub_agent_depth = 1\n\
                 [tenants.hostile]\nmax_sessions = 30\nmax_spawns_per_turn = 8\nmax_sub_agent_depth = 1\n\
                 [tenants.hostile2]\nmax_sessions = 25\n";
    let arena = Arena::start(extra).await;
    let seen = Arc::new(Seen::default());
    let worker = fan_worker(8, Duration::from_millis(20), seen.clone()).await;
    for key in [HOSTILE.1, HOSTILE2.1] {
        let (status, body) = arena.put_worker(key, FAN, &worker).await;
        assert!(status < 300, "the fan agent: {body}");
    }
    let neighbour = arena.neighbour();

    // 12 roots at once, each spawning 8 children: 108 sessions asked for,
    // their spawns applied by 12 actors side by side.
    let roots: Vec<_> = (0..12)
        .map(|i| {
            let url = arena.url.clone();
            tokio::spawn(async move { streamed_turn(&url, HOSTILE.1, &format!("r{i}"), FAN, "go").await })
        })
        .collect();
    for root in roots {
        let (status, event, data) = root.await.expect("a root's turn");
        assert_eq!((status, event.as_str()), (200, "turn.done"), "{data}");
    }
    // 40 clients creating sessions at once, 25 allowed.
    let clients: Vec<_> = (0..40)
        .map(|i| {
            let url = arena.url.clone();
            tokio::spawn(async move {
                let body =
                    json!({"type": "client.message", "agent_id": FAN, "message": {"role": "user", "content": "hi"}});
                let response = reqwest::Client::new()
                    .post(format!("{url}/v1/sessions/c{i}/input"))
                    .bearer_auth(HOSTILE2.1)
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await
                    .expect("the server answers");
                response.status().as_u16()
            })
        })
        .collect();
    let mut answers = BTreeMap::new();
    for client in clients {
        *answers.entry(client.await.expect("a client")).or_insert(0) += 1;
    }

    let hostile = settled(&arena, HOSTILE.1, Duration::from_secs(30)).await;
    let hostile2 = settled(&arena, HOSTILE2.1, Duration::from_secs(30)).await;
    neighbour.stop().await.assert_within(Duration::from_secs(10), Duration::from_secs(2));
    assert_eq!(hostile.len(), 30, "max_sessions, reached and not passed: {:?}", by_depth(&hostile));
    let refusals = seen.refusals();
    assert!(refusals.iter().any(|r| r.contains("maximum of 30 sessions (`max_sessions`)")), "{refusals:?}");
    assert_eq!(answers, BTreeMap::from([(202, 25), (429, 15)]), "the clients' answers");
    // Each accepted client spawned too (depth 1 allows it), and was refused.
    assert_eq!(hostile2.len(), 25, "{:?}", by_depth(&hostile2));
    eprintln!("the server peaked at {} MiB", arena.peak_rss() >> 20);
    arena.assert_peak_below(200 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_a_few_sessions_at_a_time_within_the_bounds() {
    let extra = format!("{BOUNDS}[recovery]\nconcurrent = 3\n");
    let mut arena = Arena::start(&extra).await;
    // Slow decisions, so that the kill finds much in flight.
    let seen = Arc::new(Seen::default());
    let worker = fan_worker(6, Duration::from_millis(60), seen.clone()).await;
    let slow_seen = Arc::new(Seen::default());
    let slow = fan_worker(0, Duration::from_millis(500), slow_seen.clone()).await;
    for (agent, url) in [(FAN, &worker), ("slow", &slow)] {
        let (status, body) = arena.put_worker(HOSTILE.1, agent, url).await;
        assert!(status < 300, "{agent}: {body}");
    }
    // A tree growing, and 15 sessions each with a turn under way.
    let input = |agent: &str| json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": "go"}});
    let (status, body) =
        arena.call(reqwest::Method::POST, "/v1/sessions/root/input", Some(HOSTILE.1), Some(input(FAN))).await;
    assert_eq!(status, 202, "{body}");
    for i in 0..15 {
        let path = format!("/v1/sessions/s{i}/input");
        let (status, body) = arena.call(reqwest::Method::POST, &path, Some(HOSTILE.1), Some(input("slow"))).await;
        assert_eq!(status, 202, "{body}");
    }
    subs_tests::wait::eventually(Duration::from_secs(10), "the sessions' decisions run side by side", || async {
        slow_seen.most.load(Ordering::SeqCst) > 10
    })
    .await;

    // Killed mid-decision; what the killed server had asked is over before
    // the new one starts, so the count is the new one's alone.
    let _ = arena.server.process.child.kill();
    subs_tests::wait::eventually(Duration::from_secs(10), "the killed server's requests end", || async {
        slow_seen.in_flight.load(Ordering::SeqCst) == 0
    })
    .await;
    slow_seen.most.store(0, Ordering::SeqCst);
    arena.kill_and_restart().await;
    let neighbour = arena.neighbour();
    let started = Instant::now();
    let mut admin = Vec::new();
    let mut every = tokio::time::interval(Duration::from_millis(100));
    while started.elapsed() < Duration::from_secs(2) {
        every.tick().await;
        let asked = Instant::now();
        let (status, body) = arena.call(reqwest::Method::GET, "/v1/admin/tenants", Some(OPERATOR), None).await;
        assert_eq!(status, 200, "{body}");
        admin.push(asked.elapsed());
    }
    let all = settled(&arena, HOSTILE.1, Duration::from_secs(60)).await;
    neighbour.stop().await.assert_within(Duration::from_secs(10), Duration::from_secs(2));

    let slowest = admin.iter().max().copied().unwrap_or_default();
    assert!(slowest < Duration::from_secs(1), "an admin call took {slowest:?} while sessions resumed");
    let most = slow_seen.most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} resumed sessions decided at once, more than [recovery] concurrent");
    let tree: Vec<Value> =
        all.iter().filter(|s| s["session_id"].as_str().is_some_and(|id| id.starts_with("root"))).cloned().collect();
    assert!(tree.len() <= 20, "the tree passed max_tree_sessions across the restart: {:?}", by_depth(&tree));
    assert!(by_depth(&tree).keys().max() <= Some(&2), "{:?}", by_depth(&tree));
    assert_eq!(all.len() - tree.len(), 15, "every slow session was resumed and finished");
    assert!(most >= 2, "the resumed sessions decided {most} at a time: were they resumed?");
    eprintln!("the server peaked at {} MiB", arena.peak_rss() >> 20);
    arena.assert_peak_below(200 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_bounds_are_tenant_limits_the_operator_sets() {
    let arena = Arena::start("").await;
    let path = "/v1/admin/tenants/hostile/limits";
    let (status, body) = arena.call(reqwest::Method::GET, path, Some(OPERATOR), None).await;
    assert_eq!(status, 200, "{body}");
    let limits = &body["limits"];
    assert_eq!(
        (&limits["max_spawns_per_turn"], &limits["max_sub_agent_depth"], &limits["max_tree_sessions"]),
        (&json!(16), &json!(4), &json!(256)),
        "the defaults: {body}"
    );
    let (status, body) =
        arena.call(reqwest::Method::PUT, path, Some(OPERATOR), Some(json!({"max_sub_agent_depth": 0}))).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) =
        arena.call(reqwest::Method::PUT, path, Some(OPERATOR), Some(json!({"max_tree_sessions": -1}))).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("max_tree_sessions")), "{body}");

    let seen = Arc::new(Seen::default());
    let worker = fan_worker(3, Duration::ZERO, seen.clone()).await;
    let (status, body) = arena.put_worker(HOSTILE.1, FAN, &worker).await;
    assert!(status < 300, "{body}");
    let (status, event, data) = streamed_turn(&arena.url, HOSTILE.1, "root", FAN, "go").await;
    assert_eq!((status, event.as_str()), (200, "turn.done"), "{data}");
    assert_eq!(sessions(&arena, HOSTILE.1).await.len(), 1, "depth 0: no sub-agent at all");
    let refusals = seen.refusals();
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(refusals.iter().all(|r| r.contains("`max_sub_agent_depth`")), "{refusals:?}");
    // The neighbour's own limits are untouched.
    let (_, neighbour) = arena
        .call(reqwest::Method::GET, &format!("/v1/admin/tenants/{}/limits", NEIGHBOUR.0), Some(OPERATOR), None)
        .await;
    assert_eq!(neighbour["limits"]["max_sub_agent_depth"], 4, "{neighbour}");
}
