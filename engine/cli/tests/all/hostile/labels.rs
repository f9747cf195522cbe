//! Metric labels from what tenants and strangers name: an agent asking
//! for LLM calls of models with names of any length, and of any number of
//! names, and a stranger inventing HTTP methods. Each name that became a
//! label value would be repeated in every line of its series at every
//! scrape of `/metrics` (which takes no key): a model name of megabytes
//! made each scrape hundreds of megabytes. Only configured model names of
//! bounded length become labels; the rest are `other`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{Arena, HOSTILE, connect_from, json_worker, streamed_turn};
use crate::http;

/// The long model names' length.
const LONG: usize = 1 << 20;
/// How many long names the agent asks for.
const LONG_NAMES: usize = 40;
/// How many short (unknown) names it asks for: more than labels may take.
const SHORT_NAMES: usize = 120;

/// The largest `/metrics` may get: a few hundred series of short labels.
/// Each long name as a label would be 17 lines of a megabyte.
const SCRAPE: usize = 512 << 10;
/// The server's peak: a scrape of the long names as labels would be
/// hundreds of MiB, twice over while it is encoded and sent.
const PEAK: u64 = 500 << 20;

/// An agent whose user message names the model of its one LLM call:
/// `long <n>` a name of [`LONG`] bytes ending in `n`, `short <n>` a short
/// one. The offline provider (`subs/…`) answers any name it is given:
/// its answer shows nothing about the name. The call's end ends the turn.
async fn asker() -> String {
    json_worker(|request: Value| async move {
        let trigger = &request["trigger"];
        match trigger["type"].as_str().unwrap_or_default() {
            "session.start" => json!({"agent": {"model": "subs/offline",
                "retry": {"max_retries": 0, "backoff_base_secs": 1, "backoff_max_secs": 1}}}),
            "client.messages" => {
                let text = trigger["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let model = match text.split_once(' ') {
                    Some(("long", n)) => format!("subs/{}-{n}", "x".repeat(LONG)),
                    Some((_, n)) => format!("subs/unknown-{n}"),
                    None => "subs/offline".to_owned(),
                };
                json!({"actions": [{"type": "llm.call", "model": model}]})
            }
            "llm.finished" => json!({"actions": [{"type": "done", "data": {"ok": trigger["ok"]}}]}),
            _ => json!({}),
        }
    })
    .await
}

/// `/metrics`, without a key.
async fn scrape(arena: &Arena) -> String {
    let response = http().get(format!("{}/metrics", arena.url)).send().await.expect("the server answers");
    assert_eq!(response.status(), 200);
    response.text().await.expect("the scrape")
}

/// The values of label `name` in a scrape.
fn values<'a>(scrape: &'a str, name: &str) -> HashSet<&'a str> {
    let key = format!("{name}=\"");
    scrape.lines().filter_map(|l| l.split(key.as_str()).nth(1)?.split('"').next()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_names_of_any_length_and_number_keep_metrics_small() {
    let arena = Arena::start("").await;
    let (status, body) = arena.put_worker(HOSTILE.1, "asker", &asker().await).await;
    assert!(status < 300, "the asker: {body}");
    let neighbour = arena.neighbour();
    // Four sessions at a time: the names' turns go faster, and the
    // neighbour shares the server with all of them.
    let texts: Vec<String> =
        (0..LONG_NAMES).map(|n| format!("long {n}")).chain((0..SHORT_NAMES).map(|n| format!("short {n}"))).collect();
    for (batch, texts) in texts.chunks(4).enumerate() {
        let turns = texts.iter().enumerate().map(|(i, text)| {
            let (url, session) = (arena.url.clone(), format!("ask-{batch}-{i}"));
            let text = text.clone();
            async move { streamed_turn(&url, HOSTILE.1, &session, "asker", &text).await }
        });
        for (status, end, data) in futures_join(turns).await {
            assert_eq!((status, end.as_str()), (200, "turn.done"), "{data}");
        }
    }
    let first = scrape(&arena).await;
    let second = scrape(&arena).await;
    let watched = neighbour.stop().await;
    eprintln!(
        "scrapes of {} and {} bytes; the server peaked at {} MiB; neighbour p50 {:?}",
        first.len(),
        second.len(),
        arena.peak_rss() >> 20,
        watched.turn_p50()
    );
    for scrape in [&first, &second] {
        assert!(scrape.len() < SCRAPE, "a scrape of {} bytes", scrape.len());
        let models = values(scrape, "model");
        assert!(models.iter().all(|m| m.len() <= 128), "a model label of more than 128 bytes");
        assert!(models.len() <= 101, "{} model labels", models.len());
        assert!(models.contains("other"), "the names are `other`: {models:?}");
        assert!(models.iter().all(|m| !m.starts_with("subs/unknown")), "a made-up name became a label: {models:?}");
    }
    arena.assert_peak_below(PEAK);
    watched.assert_within(Duration::from_secs(10), Duration::from_secs(2));
}

/// Strangers inventing HTTP methods (no key needed) add no series: any
/// method HTTP does not define is counted as `other`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invented_methods_add_no_series() {
    let arena = Arena::start("").await;
    let before = scrape(&arena).await;
    for n in 0..200 {
        let mut stream = connect_from(arena.addr, [127, 0, 0, 2].into()).await.expect("a connection");
        let method = format!("M{n}{}", "X".repeat(200));
        let request = format!("{method} /v1/nowhere-{n} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("the request is sent");
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
        assert!(answer.starts_with(b"HTTP/1.1 "), "{}", String::from_utf8_lossy(&answer));
    }
    let after = scrape(&arena).await;
    let methods = values(&after, "method");
    assert!(methods.iter().all(|m| m.len() <= 7), "a method label of its own: {methods:?}");
    assert!(methods.contains("other"), "{methods:?}");
    assert!(after.len() < before.len() + (16 << 10), "the scrape grew from {} to {} bytes", before.len(), after.len());
}

/// Awaits every future of `futures`, run together, in order.
async fn futures_join<T: Send + 'static>(
    futures: impl IntoIterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("the task"));
    }
    out
}
