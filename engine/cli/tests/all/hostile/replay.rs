//! Replay of a session built to make it expensive: one large message, then
//! hundreds of short turns, each a decision whose request carries the
//! whole tree. A replay that rebuilt every chosen request up front, each
//! with its own copy of the conversation, held hundreds of copies of the
//! large message at once; a replay that streams holds one session's
//! messages, shared by the few requests being decided.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Arena, HOSTILE, streamed_turn};
use crate::TOOLS;

/// The large message's size: its echo by the offline model doubles it.
const LARGE: usize = 3 << 20;

/// Short turns after it: each is one recorded decision (a `client.action`
/// the `tools` agent answers with nothing), whose request holds the tree.
const TURNS: u64 = 300;

/// What the server may reach while the replay runs: it holds about
/// 110 MiB with the session loaded, and peaks near 210 MiB replaying;
/// rebuilding every request with its own copy of the session's 6 MiB
/// would be some 2 GiB.
const PEAK: u64 = 400 << 20;

/// Waits until session `session` of the hostile tenant is idle with
/// `turns` turns, as the sessions listing says (a read that does not
/// load the session's messages).
async fn settled(arena: &Arena, session: &str, turns: u64) {
    subs_tests::wait::eventually(Duration::from_secs(120), "the session settles", || async {
        let (status, page) = arena.call(reqwest::Method::GET, "/v1/sessions?limit=1000", Some(HOSTILE.1), None).await;
        assert_eq!(status, 200, "{page}");
        let summary = page.as_array().and_then(|s| s.iter().find(|s| s["session_id"] == session)).cloned();
        let summary = summary.unwrap_or(Value::Null);
        if summary["status"] == "idle" && summary["turns"].as_u64() == Some(turns) { Ok(()) } else { Err(summary) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_a_large_message_and_many_turns_holds_a_window_not_every_request() {
    // Room in an event stream for the large turn's events: the test reads
    // its end from its stream.
    let arena = Arena::start(&format!("[streams]\nsubscriber_buffer_bytes = {}\n", 4 * LARGE)).await;
    let tools = std::fs::read(TOOLS).expect("the tools component is built");
    let (status, agent) = arena.upload(HOSTILE.1, "r", tools).await;
    assert_eq!(status, 201, "the replayed agent: {agent}");
    let version = agent["version"].as_str().expect("a version").to_owned();

    let (status, end, data) = streamed_turn(&arena.url, HOSTILE.1, "big", "r", &"x".repeat(LARGE)).await;
    assert_eq!((status, end.as_str()), (200, "turn.done"), "the large turn: {}", data["error"]);
    let started = Instant::now();
    for n in 0..TURNS {
        let input = json!({"type": "client.action", "agent_id": "r", "name": "noop", "turn_id": format!("a{n}")});
        let (status, body) =
            arena.call(reqwest::Method::POST, "/v1/sessions/big/input", Some(HOSTILE.1), Some(input)).await;
        assert_eq!(status, 202, "turn {n}: {body}");
    }
    settled(&arena, "big", TURNS + 1).await;
    eprintln!("{TURNS} turns in {:?}; the server holds {} MiB", started.elapsed(), arena.rss() >> 20);

    let neighbour = arena.neighbour();
    let started = Instant::now();
    let (status, report) = arena
        .call(
            reqwest::Method::POST,
            "/v1/agents/r/replay",
            Some(HOSTILE.1),
            Some(json!({"version": version, "limit": 10000, "timeout_secs": 120})),
        )
        .await;
    let took = started.elapsed();
    let watched = neighbour.stop().await;
    assert_eq!(status, 200, "{report}");
    eprintln!(
        "replayed {} decisions in {took:?}; the server peaked at {} MiB; neighbour p50 {:?}",
        report["decisions"],
        arena.peak_rss() >> 20,
        watched.turn_p50()
    );
    // session.start, the large turn's two decisions, then one a turn.
    let decisions = TURNS + 3;
    assert_eq!(report["decisions"], decisions, "{report}");
    assert_eq!(report["same"], decisions, "the agent replayed against itself decides as recorded: {report}");
    assert!(report.get("stopped").is_none(), "{report}");
    arena.assert_peak_below(PEAK);
    watched.assert_within(Duration::from_secs(5), Duration::from_secs(2));
}
