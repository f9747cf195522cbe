//! History without end: an HTTP worker records a large assistant message
//! in every turn of one session, then the session is read whole, many
//! times at once. A session's messages are bounded (`max_session_bytes`):
//! the decision that would pass the bound is refused, its turn fails naming
//! it, and nothing of it is stored; the requests that carry the session
//! share its messages; snapshots are written out as they are read, a
//! tenant's few at a time (`max_session_reads`), so that neither the
//! session nor its readers multiply the server's memory.

use std::time::{Duration, Instant};

use axum::extract::DefaultBodyLimit;
use serde_json::{Value, json};

use super::{Arena, HOSTILE, streamed_turn};
use crate::http;

/// Each turn's assistant message.
const MESSAGE: usize = 1_000_000;

/// The session's bound in the test: room for four such messages.
const BOUND: u64 = 4 << 20;

/// Turns tried: without the bound, 8 MB of messages, every decision
/// request carrying them (twice, as JSON), every snapshot reading them.
const TURNS: usize = 8;

/// Whole-session reads started at once.
const READERS: usize = 8;

/// What the server may reach: it peaks near 120 MiB with the session's
/// 4 MiB, a request of it to the worker (8 MiB of JSON) and two snapshots
/// being written out. Without the bounds (the session unbounded, eight
/// snapshots at once with their JSON held whole) it passed 240 MiB even
/// with the messages shared.
const PEAK: u64 = 200 << 20;

/// A worker that records a `MESSAGE`-byte assistant message in every turn
/// and ends it; its URL. Its requests grow with the session, past the
/// 2 MiB axum gives a JSON body by default; it reads only their trigger's
/// type, which comes before the conversation.
async fn hoarder() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::post(|body: axum::body::Bytes| async move {
                let decision = match trigger_type(&body) {
                    Some("client.messages") => json!({
                        "messages": [{"role": "assistant", "content": "y".repeat(MESSAGE)}],
                        "actions": [{"type": "done"}],
                    }),
                    _ => json!({}),
                };
                axum::Json(decision)
            }),
        )
        .layer(DefaultBodyLimit::disable());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/")
}

/// The type of the request's trigger.
fn trigger_type(request: &[u8]) -> Option<&str> {
    const AT: &[u8] = br#""trigger":{"type":""#;
    let start = request.windows(AT.len()).position(|w| w == AT)? + AT.len();
    let len = request[start..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&request[start..start + len]).ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_filling_a_session_is_refused_at_its_bound_and_reads_of_it_stay_bounded() {
    // Room in an event stream for a turn's events, its large message
    // among them: the test reads each turn's end from its stream.
    let config = format!(
        "[tenants.hostile]\nmax_session_bytes = {BOUND}\nmax_session_reads = 2\n\
         [streams]\nsubscriber_buffer_bytes = {}\n",
        4 * MESSAGE
    );
    let arena = Arena::start(&config).await;
    let (status, body) = arena.put_worker(HOSTILE.1, "hoarder", &hoarder().await).await;
    assert!(status < 300, "the hoarder: {body}");
    let neighbour = arena.neighbour();

    let (mut done, mut refused) = (0, 0);
    let started = Instant::now();
    for n in 0..TURNS {
        let (status, end, data) = streamed_turn(&arena.url, HOSTILE.1, "h", "hoarder", &format!("turn {n}")).await;
        assert_eq!(status, 200, "turn {n}: {}", data["error"]);
        match end.as_str() {
            "turn.done" => {
                assert_eq!(refused, 0, "turn {n} was done after a refusal");
                done += 1;
            }
            "turn.failed" => {
                let error = data["error"].as_str().unwrap_or_default();
                assert!(error.contains("max_session_bytes") && error.contains(&BOUND.to_string()), "turn {n}: {data}");
                refused += 1;
            }
            other => panic!("turn {n} ended with {other}: {}", data["error"]),
        }
    }
    eprintln!("{done} turns done, {refused} refused, in {:?}", started.elapsed());
    assert_eq!(done, (BOUND / MESSAGE as u64) as usize, "the turns that fit are done");

    // Nothing of a refused decision is stored: the session holds the
    // messages of the turns that fit.
    let (status, snapshot) = arena.call(reqwest::Method::GET, "/v1/sessions/h", Some(HOSTILE.1), None).await;
    assert_eq!(status, 200, "{snapshot}");
    assert_eq!(snapshot["messages"].as_array().map(Vec::len), Some(done), "{:.300}", snapshot.to_string());
    assert_eq!(snapshot["message_tree"]["nodes"].as_array().map(Vec::len), Some(done));

    // Readers that take their time: each answer is written out as it is
    // read, two of them at a time.
    let client = http();
    let mut slow = Vec::new();
    for _ in 0..READERS {
        let request = client.get(format!("{}/v1/sessions/h", arena.url)).bearer_auth(HOSTILE.1);
        slow.push(tokio::spawn(async move {
            let response = request.send().await.expect("the server answers");
            assert_eq!(response.status(), 200);
            // A slow reader: it holds the answer a second before reading.
            subs_tests::wait::pace(Duration::from_secs(1)).await;
            let text = response.text().await.expect("the whole snapshot");
            let body: Value = serde_json::from_str(&text).expect("a JSON snapshot");
            body["messages"].as_array().map(Vec::len)
        }));
    }
    for reader in slow {
        assert_eq!(reader.await.expect("a reader"), Some(done), "every reader gets the whole session");
    }

    let watched = neighbour.stop().await;
    eprintln!("the server peaked at {} MiB; neighbour p50 {:?}", arena.peak_rss() >> 20, watched.turn_p50());
    arena.assert_peak_below(PEAK);
    watched.assert_within(Duration::from_secs(5), Duration::from_secs(2));
}
