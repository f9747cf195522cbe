//! HTTP-worker versions as a hostile tenant stores them: every `PUT`
//! counts against `max_uploads_per_hour` as an upload does, a URL past
//! `max_worker_url_bytes` is refused before anything is stored, an agent
//! keeps at most `max_agent_versions`, and while one tenant `PUT`s in a
//! loop another's agent `PUT`s (under a lock of its own tenant) stay fast.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use super::{Arena, HOSTILE, HOSTILE2, NEIGHBOUR};

/// A URL of `len` bytes with `n` in it.
fn url(n: usize, len: usize) -> String {
    let head = format!("http://127.0.0.1:9/{n}/");
    format!("{head}{}", "x".repeat(len.saturating_sub(head.len())))
}

async fn put(arena: &Arena, key: &str, agent: &str, url: &str, activate: bool) -> (u16, Value) {
    let path = if activate { format!("/v1/agents/{agent}") } else { format!("/v1/agents/{agent}?activate=false") };
    arena.call(Method::PUT, &path, Some(key), Some(json!({ "url": url }))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_versions_are_metered_bounded_and_do_not_hold_up_a_neighbour() {
    // The hostile tenant meters as everyone does; the second one (and the
    // neighbour, whose PUTs are timed) may upload all they like, so that
    // the second's loop reaches the registry.
    let arena = Arena::start(
        "[limits]\nmax_uploads_per_hour = 20\nmax_agent_versions = 6\n\
         [tenants.hostile2]\nmax_uploads_per_hour = 1000000\n\
         [tenants.neighbour]\nmax_uploads_per_hour = 1000000\n",
    )
    .await;
    let neighbour = arena.neighbour();

    // Metered: the 21st version of the hour is refused, naming the limit,
    // however small.
    assert_eq!(put(&arena, HOSTILE.1, "w", &url(0, 40), true).await.0, 201);
    for n in 1..20 {
        let (status, body) = put(&arena, HOSTILE.1, "w", &url(n, 40), false).await;
        assert_eq!(status, 201, "version {n}: {body}");
    }
    let (status, body) = put(&arena, HOSTILE.1, "w", &url(20, 40), false).await;
    assert_eq!(status, 429, "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("max_uploads_per_hour"), "{body}");
    // Bounded: 20 stored, 6 kept (the current one among them).
    let (_, agent) = arena.call(Method::GET, "/v1/agents/w", Some(HOSTILE.1), None).await;
    let versions = agent["versions"].as_array().expect("versions");
    assert_eq!(versions.len(), 6, "{agent}");
    assert_eq!(versions.iter().filter(|v| v["active"] == true).count(), 1, "{agent}");

    // A URL of 3.9 MB is refused before anything is stored.
    assert_eq!(put(&arena, HOSTILE2.1, "w", &url(0, 40), true).await.0, 201);
    let (status, body) = put(&arena, HOSTILE2.1, "w", &url(1, 3_900_000), false).await;
    assert_eq!((status, body["field"].as_str()), (400, Some("url")), "{body:.300}");
    assert!(body["error"].as_str().unwrap_or_default().contains("max_worker_url_bytes"), "{body}");

    // The neighbour's agent PUTs alone, then while the second hostile
    // tenant PUTs in two loops: big URLs, and versions that are stored
    // (and dropped) under its own tenant's lock.
    assert_eq!(put(&arena, NEIGHBOUR.1, "mine", &url(0, 40), true).await.0, 201);
    let idle = neighbour_puts(&arena, Duration::from_secs(2)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let stored = Arc::new(AtomicUsize::new(0));
    let mut loops = Vec::new();
    for task in 0..2 {
        let (url_base, stop, stored) = (arena.url.clone(), stop.clone(), stored.clone());
        loops.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let len = if n % 3 == 0 { 3_900_000 } else { 1_500 };
                let body = json!({ "url": url(task * 1_000_000 + n, len) }).to_string();
                let response = client
                    .put(format!("{url_base}/v1/agents/w?activate=false"))
                    .bearer_auth(HOSTILE2.1)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                if let Ok(response) = response
                    && response.status() == 201
                {
                    stored.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let busy = neighbour_puts(&arena, Duration::from_secs(6)).await;
    stop.store(true, Ordering::SeqCst);
    for task in loops {
        task.await.unwrap();
    }
    let watched = neighbour.stop().await;

    let stored = stored.load(Ordering::SeqCst);
    assert!(stored > 20, "the loops reached the registry ({stored} versions stored)");
    let (_, agent) = arena.call(Method::GET, "/v1/agents/w", Some(HOSTILE2.1), None).await;
    assert_eq!(agent["versions"].as_array().map(Vec::len), Some(6), "still bounded");
    let (idle_p50, p50, max) = (idle[idle.len() / 2], busy[busy.len() / 2], busy[busy.len() - 1]);
    eprintln!(
        "neighbour agent PUTs: p50 {idle_p50:?} alone; beside the loops {} made, p50 {p50:?}, max {max:?}; {stored} \
         hostile versions stored",
        busy.len()
    );
    // Within 3x its idle median (plus 50 ms of CPU the loops' bodies take
    // on two cores), and never a second: the loops hold no lock of its.
    let bound = idle_p50 * 3 + Duration::from_millis(50);
    assert!(p50 < bound, "the neighbour's agent PUT p50 was {p50:?}, over {bound:?}");
    assert!(max < Duration::from_secs(1), "a neighbour's agent PUT took {max:?}");
    watched.assert_within(Duration::from_secs(5), Duration::from_secs(1));
    arena.assert_peak_below(400 << 20);
}

/// The times of the neighbour's agent PUTs (made current, alternating
/// two URLs) for `how_long`, sorted.
async fn neighbour_puts(arena: &Arena, how_long: Duration) -> Vec<Duration> {
    let mut took = Vec::new();
    let started = Instant::now();
    let mut n = 0;
    // One PUT every 20 ms at most: a neighbour at work, not a flood.
    let mut every = tokio::time::interval(Duration::from_millis(20));
    while started.elapsed() < how_long {
        every.tick().await;
        n += 1;
        let at = Instant::now();
        let (status, body) = put(arena, NEIGHBOUR.1, "mine", &url(n % 2, 40), true).await;
        took.push(at.elapsed());
        // 200 when the version was current already (the first of a phase).
        assert!(status == 201 || status == 200, "{status} {body}");
    }
    took.sort();
    took
}
