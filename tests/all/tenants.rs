//! Tenants contained: what one tenant does to a shared server stays within
//! its bounds, and its neighbours' work goes on. Over real HTTP, with real
//! components uploaded through the API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use subs_engine::{EngineConfig, StreamLimits};
use subs_tests::guests;

use crate::api::{Server, SseEvent};

const HOSTILE: (&str, &str) = ("hostile", "subs_hostile_0123456789abcdef");
const NEIGHBOUR: (&str, &str) = ("neighbour", "subs_neighbour_0123456789abcdef");

const GET: reqwest::Method = reqwest::Method::GET;
const POST: reqwest::Method = reqwest::Method::POST;

/// What a client read from an event stream: the stored events (deltas are
/// counted, not kept: a flood would fill the test's own memory), the
/// comments, and whether the server ended the stream (cleanly: a stream
/// that breaks off fails the test).
#[derive(Debug, Default)]
struct Read {
    stored: Vec<SseEvent>,
    deltas: usize,
    comments: Vec<String>,
    ended: bool,
}

impl Read {
    fn ids(&self) -> Vec<u64> {
        self.stored.iter().map(|e| e.id.expect("stored events have ids")).collect()
    }
}

/// Reads `response` until a stored event `until` accepts (included) or
/// the stream ends, keeping the comments the server sends (it says there
/// why it cut a subscriber off).
async fn read(response: &mut reqwest::Response, until: impl Fn(&SseEvent) -> bool) -> Read {
    let mut read = Read::default();
    let mut parser = subs_protocol::sse::SseParser::new().keep_comments();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => {
                read.ended = true;
                return read;
            }
            Err(e) => panic!("the stream broke off instead of ending: {e}"),
        };
        let events = parser.push(&chunk).expect("events within the bound");
        read.comments.extend(parser.take_comments());
        for parsed in events {
            if parsed.event == "llm.token.delta" {
                assert_eq!(parsed.id, None, "deltas are live only");
                read.deltas += 1;
                continue;
            }
            let data = serde_json::from_str(&parsed.data).unwrap_or(Value::String(parsed.data));
            let event = SseEvent { id: parsed.id.and_then(|id| id.parse().ok()), event: parsed.event, data };
            let stop = until(&event);
            read.stored.push(event);
            if stop {
                return read;
            }
        }
    }
}

fn turn_ended(turn: &str) -> impl Fn(&SseEvent) -> bool + '_ {
    move |e| matches!(e.event.as_str(), "turn.done" | "turn.failed") && e.data["turn_id"] == turn
}

/// Sends `text` to `agent` in `session` as `tenant`; the turn's id.
async fn say(s: &Server, (_, key): (&str, &str), session: &str, agent: &str, text: &str) -> String {
    let (status, accepted) = s.say(session, agent, text, Some(key)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    accepted["turn_id"].as_str().unwrap().to_owned()
}

/// Opens the session's event stream after `last_event_id`.
async fn open(s: &Server, (_, key): (&str, &str), session: &str, last_event_id: Option<u64>) -> reqwest::Response {
    let mut request = s.request(GET, &format!("/v1/sessions/{session}/events"), Some(key));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    request.send().await.unwrap()
}

/// Turns of the neighbour's tool agent, one after another, until `stop`:
/// each must end, done, within `within`. Returns how many did.
async fn neighbour_turns(s: Arc<Server>, stop: Arc<AtomicBool>, within: Duration) -> usize {
    let (_, key) = NEIGHBOUR;
    let mut done = 0;
    while !stop.load(Ordering::SeqCst) || done == 0 {
        let turn = say(&s, NEIGHBOUR, "n", "tools", r#"use tool add with {"a": 2, "b": 3}"#).await;
        let started = Instant::now();
        let events = tokio::time::timeout(within, s.events("n", Some(key), None, turn_ended(&turn)))
            .await
            .unwrap_or_else(|_| panic!("the neighbour's turn {done} did not end within {within:?}"));
        assert_eq!(events.last().unwrap().event, "turn.done", "{events:?}");
        assert!(started.elapsed() < within);
        done += 1;
    }
    done
}

/// The last message of a session, as stored.
async fn reply(engine: &subs_engine::Engine, (tenant, _): (&str, &str), session: &str) -> String {
    engine.reads().snapshot(tenant, session).await.unwrap().unwrap().messages.last().unwrap().text()
}

/// Turns that flood the subscribers: each streams deltas until the
/// decision's delta bytes are spent (`max_call_delta_bytes`, 64 MiB by
/// default), so the server is handed four times that in all. Kept they
/// would be far over [`HEAP_BOUND`].
const FLOOD_TURNS: usize = 4;

/// How much more the test process may hold while the flood runs: the
/// engine, server and clients together, and any test running beside.
const HEAP_BOUND: i64 = 128 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_subscriber_under_a_delta_flood_is_dropped_and_its_reconnect_loses_nothing() {
    let limits = StreamLimits::default();
    let config = EngineConfig { streams: limits.clone(), ..EngineConfig::default() };
    // The host's work on 64 MiB of deltas counts against the decision's
    // CPU limit; in a debug build, beside other tests, it can take longer
    // than the default 10 s. The bound under test here is the streams'.
    let mut roomy = subs_engine::worker::component::AgentPolicy::default();
    roomy.limits.cpu = Some(Duration::from_secs(120));
    roomy.limits.wall_clock = Some(Duration::from_secs(120));
    let policies = [((HOSTILE.0.to_owned(), "flood".to_owned()), roomy)].into_iter().collect();
    let s = Server::builder().keys(&[HOSTILE, NEIGHBOUR]).policies(policies).engine_config(config).start().await;
    let engine = s.engine.clone();
    let s = Arc::new(s);
    assert_eq!(s.upload("flood", guests::TEST_FLOOD, Some(HOSTILE.1)).await.0, StatusCode::CREATED);
    assert_eq!(s.upload("tools", guests::TOOLS, Some(NEIGHBOUR.1)).await.0, StatusCode::CREATED);

    // A first, small turn creates the session and shows that the guest
    // hears why the host refuses its 12 MiB delta.
    let turn = say(&s, HOSTILE, "s", "flood", "100 3").await;
    assert_eq!(
        engine.reads().wait_turn(HOSTILE.0, "s", &turn).await.unwrap().status,
        subs_engine::store::TurnStatus::Done
    );
    let said = reply(&engine, HOSTILE, "s").await;
    assert!(said.starts_with("oversized: the delta is "), "{said}");
    assert!(said.contains("over the limit of 65536 per delta (`max_delta_bytes`)"), "{said}");
    assert!(said.ends_with("sent: 3; stopped: no"), "{said}");

    // The stalled client: it opens the session's stream and reads nothing.
    let mut stalled = open(&s, HOSTILE, "s", None).await;
    assert_eq!(stalled.status(), StatusCode::OK);

    // The neighbour works meanwhile.
    let stop = Arc::new(AtomicBool::new(false));
    let neighbour = tokio::spawn(neighbour_turns(s.clone(), stop.clone(), Duration::from_secs(20)));

    // What the process holds, sampled while the flood runs. The counter is
    // this binary's allocator's: no other test in it uses it.
    subs_tests::heap::start();
    let queued_peak = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, engine, queued_peak) = (stop.clone(), engine.clone(), queued_peak.clone());
        tokio::spawn(async move {
            let mut heap_peak = 0;
            let mut every = tokio::time::interval(Duration::from_millis(5));
            while !stop.load(Ordering::SeqCst) {
                every.tick().await;
                heap_peak = heap_peak.max(subs_tests::heap::live());
                queued_peak.fetch_max(engine.reads().queued_stream_bytes(HOSTILE.0), Ordering::SeqCst);
            }
            heap_peak
        })
    };

    let piece = 60_000;
    let started = Instant::now();
    let mut sent = 0;
    let mut last_turn = String::new();
    for _ in 0..FLOOD_TURNS {
        last_turn = say(&s, HOSTILE, "s", "flood", &format!("{piece} 1000000")).await;
        let ended =
            tokio::time::timeout(Duration::from_secs(120), engine.reads().wait_turn(HOSTILE.0, "s", &last_turn))
                .await
                .expect("a flood turn ends")
                .unwrap();
        assert_eq!(ended.status, subs_engine::store::TurnStatus::Done, "{ended:?}");
        let said = reply(&engine, HOSTILE, "s").await;
        assert!(said.contains("(`max_call_delta_bytes`)"), "the decision's deltas are bounded: {said}");
        let n: usize = said.split("sent: ").nth(1).and_then(|r| r.split(';').next()).unwrap().parse().unwrap();
        sent += n * piece;
    }
    let flood_time = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let heap_peak = sampler.await.unwrap();
    subs_tests::heap::stop();
    let neighbour_done = neighbour.await.unwrap();

    assert!(sent as i64 > HEAP_BOUND, "the flood ({sent} bytes) is larger than the bound it is held to");
    assert!(
        heap_peak < HEAP_BOUND,
        "the process held {} MiB more while {} MiB of deltas went by a stalled client",
        heap_peak >> 20,
        sent >> 20
    );
    // The engine's own count: the stalled subscriber never had more than
    // its buffer waiting, however long the flood.
    let queued_peak = queued_peak.load(Ordering::SeqCst);
    assert!(queued_peak <= limits.subscriber_buffer_bytes, "{queued_peak} bytes queued");
    assert!(neighbour_done >= 3, "the neighbour's turns went on during {flood_time:?}: {neighbour_done}");

    // The server ended the stalled client's stream: reading it now gives
    // what was sent before the drop, then the end.
    let got = tokio::time::timeout(Duration::from_secs(60), read(&mut stalled, |_| false))
        .await
        .expect("the stalled stream was ended by the server");
    assert!(got.ended);
    assert!(got.comments.iter().any(|c| c.contains("fell behind")), "{:?}", got.comments);
    let ids = got.ids();
    assert!(!ids.is_empty());
    assert_eq!(ids, (ids[0]..ids[0] + ids.len() as u64).collect::<Vec<_>>(), "what it got has no gap");
    let last = *ids.last().unwrap();

    // It reconnects from the last event it got: every stored event after
    // it, once, up to the end of the last flood turn.
    let mut again = open(&s, HOSTILE, "s", Some(last)).await;
    assert_eq!(again.status(), StatusCode::OK);
    let rest = tokio::time::timeout(Duration::from_secs(60), read(&mut again, turn_ended(&last_turn)))
        .await
        .expect("the reconnected stream reaches the last turn's end");
    drop(again);
    let rest_ids = rest.ids();
    assert_eq!(rest_ids.first(), Some(&(last + 1)), "it resumes right after the last event it got");
    assert_eq!(rest_ids, (last + 1..=last + rest_ids.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");

    // Together they are what the store holds, in order.
    let mut all = open(&s, HOSTILE, "s", None).await;
    let stored = tokio::time::timeout(Duration::from_secs(60), read(&mut all, turn_ended(&last_turn))).await.unwrap();
    let together: Vec<(Option<u64>, String)> =
        got.stored.iter().chain(&rest.stored).map(|e| (e.id, e.event.clone())).collect();
    let expected: Vec<(Option<u64>, String)> = stored.stored.iter().map(|e| (e.id, e.event.clone())).collect();
    assert_eq!(together, expected);
}

#[tokio::test]
async fn a_tenant_past_its_open_streams_is_refused_and_its_neighbour_is_not() {
    let streams = StreamLimits { max_streams_per_tenant: 2, ..StreamLimits::default() };
    let config = EngineConfig { streams, ..EngineConfig::default() };
    let s = Server::builder().keys(&[HOSTILE, NEIGHBOUR]).engine_config(config).start().await;
    let engine = s.engine.clone();
    for tenant in [HOSTILE, NEIGHBOUR] {
        assert_eq!(s.upload("tools", guests::TOOLS, Some(tenant.1)).await.0, StatusCode::CREATED);
        let turn = say(&s, tenant, "s", "tools", "hi").await;
        engine.reads().wait_turn(tenant.0, "s", &turn).await.unwrap();
    }
    let first = open(&s, HOSTILE, "s", None).await;
    let second = open(&s, HOSTILE, "s", None).await;
    assert_eq!((first.status(), second.status()), (StatusCode::OK, StatusCode::OK));

    let third = open(&s, HOSTILE, "s", None).await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = serde_json::from_str(&third.text().await.unwrap()).unwrap();
    assert_eq!(body["code"], "limit_exceeded");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("maximum of 2 open event streams"), "{error}");
    assert!(error.contains("max_streams_per_tenant"), "names the setting: {error}");

    // A streamed input is refused before it is stored: retrying it later
    // cannot send it twice.
    let messages = engine.reads().snapshot(HOSTILE.0, "s").await.unwrap().unwrap().messages.len();
    let body = json!({"type": "client.message", "agent_id": "tools", "message": {"role": "user", "content": "again"}, "stream": true});
    let (status, refused) = s.call(POST, "/v1/sessions/s/input", Some(HOSTILE.1), Some(body)).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(engine.reads().snapshot(HOSTILE.0, "s").await.unwrap().unwrap().messages.len(), messages);

    // Another tenant's streams are its own.
    let theirs = open(&s, NEIGHBOUR, "s", None).await;
    assert_eq!(theirs.status(), StatusCode::OK);

    // A client that leaves frees its place.
    drop(first);
    let _kept =
        subs_tests::wait::eventually(Duration::from_secs(10), "the place of a closed stream is freed", || async {
            let next = open(&s, HOSTILE, "s", None).await;
            if next.status() == StatusCode::OK { Ok(next) } else { Err(next.status()) }
        })
        .await;
    assert_eq!(engine.reads().open_streams(HOSTILE.0), 2);
}

/// An agent failing with a 20 MB error: what is stored, sent and logged of
/// it is cut to its 4 KiB bound, once (a `terminal` error is not retried).
#[tokio::test]
async fn a_20_mb_error_is_stored_and_sent_cut_to_its_bound() {
    let s = Server::start(&[HOSTILE]).await;
    let key = Some(HOSTILE.1);
    assert_eq!(s.upload("hostile", guests::TEST_HOSTILE, key).await.0, StatusCode::CREATED);
    let input = json!({"type": "client.action", "agent_id": "hostile", "name": "big-error", "args": null});
    let (status, accepted) = s.call(POST, "/v1/sessions/e/input", key, Some(input)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let events = s.wait_turn("e", accepted["turn_id"].as_str().unwrap(), key).await;
    let failed = events.last().unwrap();
    assert_eq!(failed.event, "turn.failed", "{failed:?}");
    let error = failed.data["error"].as_str().unwrap();
    assert!(error.len() < 5000 && error.contains("eeee") && error.contains("more bytes cut)"), "{}", error.len());
    // Everything stored about the session, replayed from the start, is
    // small: the 20 MB are nowhere.
    let replayed = s.events("e", key, None, |e| e.event == "turn.failed").await;
    let bytes: usize = replayed.iter().map(|e| e.data.to_string().len()).sum();
    assert!(bytes < 64 << 10, "{bytes} bytes of stored events");
    let (_, snapshot) = s.call(GET, "/v1/sessions/e", key, None).await;
    assert!(snapshot.to_string().len() < 64 << 10, "the snapshot is small");
}

/// Two uploads of one tenant that each fit its compiled-code quota, but
/// not together, cannot both be accepted: the second finishes compiling
/// while the first is still being stored (its commit slowed down), and is
/// held to the quota beside the first once that one is registered, not
/// beside what was registered when its own compile ended.
#[tokio::test]
async fn two_uploads_that_finish_together_are_held_to_the_quota_together() {
    use subs_engine::agents::{AgentError, AgentRegistry};
    use subs_engine::worker::component::{ComponentHost, HostConfig};

    let dir = tempfile::tempdir().unwrap();
    let host = ComponentHost::with_config(HostConfig {
        compile_cache: Some(dir.path().join("compiled")),
        ..HostConfig::default()
    })
    .unwrap();
    let bytes = std::fs::read(guests::TOOLS).unwrap();
    let one = {
        let (host, bytes) = (host.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || host.load(&bytes).unwrap()).await.unwrap().compiled_bytes()
    };
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let engine =
        subs_engine::Engine::start(store.clone(), subs_engine::model::Models::with_offline(), Default::default())
            .await
            .unwrap();
    let agents = Arc::new(AgentRegistry::new(engine, host, dir.path().join("agents")));
    // Room for one agent, not two; and the first one's record takes a
    // while to commit, so the second's compile ends before it is stored.
    let limits = subs_engine::agents::AgentLimits {
        max_compiled_bytes: one + one / 2,
        ..subs_engine::agents::AgentLimits::default()
    };
    store.inject_fsync_delay(Duration::from_millis(300));

    // Each retries while the other compiles (one compile per tenant at a
    // time), so the later one compiles while the earlier one is stored.
    let upload = |id: &'static str| {
        let (agents, bytes) = (agents.clone(), bytes.clone());
        tokio::spawn(async move {
            subs_tests::wait::eventually(
                Duration::from_secs(60),
                format!("{id} is not refused as compiling"),
                || async {
                    match agents.put_component("race", id, bytes.clone(), &limits, true).await {
                        Err(AgentError::Compiling) => Err("compiling"),
                        result => Ok(result.map(|_| ())),
                    }
                },
            )
            .await
        })
    };
    let (a, b) = (upload("a"), upload("b"));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let refused: Vec<_> = [&a, &b].into_iter().filter_map(|r| r.as_ref().err()).collect();
    assert_eq!(refused.len(), 1, "exactly one of them fits: {a:?}, {b:?}");
    assert!(matches!(refused[0], AgentError::CompiledQuota { .. }), "{}", refused[0]);
}
