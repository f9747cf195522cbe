//! Event streams that outlive what opened them. A tenant deleted by the
//! operator, or one of its keys revoked: an event-stream token minted
//! with that key is refused at the next connect, and streams already
//! open (by the token, the key itself or an end user's token) end at
//! once, while the tenant's other keys' streams go on.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use super::{Arena, OPERATOR};
use crate::{ADD, Server, TOOLS, http};

/// How long a stream may take to end once what opened it is gone.
const ENDS_WITHIN: Duration = Duration::from_secs(2);

/// A tenant made by the operator, with `keys` keys, its `tools` agent and
/// a session `s1` with one turn's events (owned by end user `u1`).
async fn tenant(url: &str, name: &str, keys: usize) -> Vec<String> {
    let (status, body) = call(url, Method::PUT, &format!("/v1/admin/tenants/{name}"), Some(OPERATOR), None).await;
    assert_eq!(status, 201, "{body}");
    let mut made = Vec::new();
    for _ in 0..keys {
        let (status, body) =
            call(url, Method::POST, "/v1/admin/keys", Some(OPERATOR), Some(json!({ "tenant": name }))).await;
        assert_eq!(status, 201, "{body}");
        made.push(body["key"].as_str().expect("a key").to_owned());
    }
    let tools = std::fs::read(TOOLS).expect("the tools component is built");
    let response = http()
        .put(format!("{url}/v1/agents/tools"))
        .bearer_auth(&made[0])
        .header("content-type", "application/wasm")
        .body(tools)
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap_or_default());
    // Streamed, so that the turn is over (and its events stored) here.
    let input = json!({"type": "client.message", "agent_id": "tools", "identity": {"id": "u1"}, "stream": true,
        "message": {"role": "user", "content": ADD}});
    let (status, body) = call(url, Method::POST, "/v1/sessions/s1/input", Some(&made[0]), Some(input)).await;
    assert!(status == 200 && body.to_string().contains("turn.done"), "{status} {body}");
    made
}

/// `method path` on the server at `url` with `key` and a JSON body.
async fn call(url: &str, method: Method, path: &str, key: Option<&str>, body: Option<Value>) -> (u16, Value) {
    let mut request = http().request(method, format!("{url}{path}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A stream token minted with `key`.
async fn stream_token(url: &str, key: &str) -> String {
    let (status, body) = call(url, Method::POST, "/v1/tokens", Some(key), None).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("a token").to_owned()
}

/// An end-user token of `u1`, minted with `key`.
async fn user_token(url: &str, key: &str) -> String {
    let (status, body) =
        call(url, Method::POST, "/v1/tokens", Some(key), Some(json!({"identity": {"id": "u1"}}))).await;
    assert_eq!(status, 200, "{body}");
    body["token"].as_str().expect("a token").to_owned()
}

/// An open event stream of session `s1`.
struct Open(reqwest::Response);

/// Connects to `s1`'s events with `?token=` or, given a key, with it as
/// `Authorization`; the status, and the stream when it is 200 (its first
/// bytes read).
async fn connect(url: &str, token: Option<&str>, key: Option<&str>) -> (u16, Option<Open>) {
    // Tokens are made of characters a query takes as they are.
    let query = token.map(|token| format!("?token={token}")).unwrap_or_default();
    let mut request = http().get(format!("{url}/v1/sessions/s1/events{query}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let mut response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    if status != 200 {
        return (status, None);
    }
    let first = tokio::time::timeout(Duration::from_secs(10), response.chunk()).await;
    assert!(matches!(first, Ok(Ok(Some(_)))), "the stored events come first: {first:?}");
    (status, Some(Open(response)))
}

impl Open {
    /// Reads until the stream ends; what it sent last, or `None` when it
    /// is still open after `within`.
    async fn ended(mut self, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        let mut last = String::new();
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.0.chunk()).await {
                Err(_) => return None,
                Ok(Ok(Some(chunk))) => last = String::from_utf8_lossy(&chunk).into_owned(),
                Ok(Ok(None) | Err(_)) => return Some(last),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streams_end_with_their_tenant_and_key_and_their_tokens_are_refused() {
    let arena = Arena::start("").await;
    let neighbour = arena.neighbour();

    // A victim tenant with three streams open: by a stream token, by its
    // key, by an end user's token.
    let keys = tenant(&arena.url, "victim", 1).await;
    let token = stream_token(&arena.url, &keys[0]).await;
    let user = user_token(&arena.url, &keys[0]).await;
    let (_, by_token) = connect(&arena.url, Some(&token), None).await;
    let (_, by_key) = connect(&arena.url, None, Some(&keys[0])).await;
    let (_, by_user) = connect(&arena.url, Some(&user), None).await;

    let (status, body) = arena.call(Method::DELETE, "/v1/admin/tenants/victim", Some(OPERATOR), None).await;
    assert_eq!(status, 200, "{body}");
    for (how, open) in [("a stream token", by_token), ("its key", by_key), ("an end-user token", by_user)] {
        let last = open.expect("open").ended(ENDS_WITHIN).await;
        let last = last.unwrap_or_else(|| panic!("the stream opened with {how} was still open {ENDS_WITHIN:?} on"));
        assert!(last.contains("revoked or its tenant deleted"), "opened with {how}, it ended with {last:?}");
    }
    for (token, what) in [(&token, "the stream token"), (&user, "the end-user token")] {
        let (status, _) = connect(&arena.url, Some(token), None).await;
        assert_eq!(status, 401, "{what} of a deleted tenant at connect");
    }

    // A key revoked: its token's stream ends, another key's goes on.
    let keys = tenant(&arena.url, "victim2", 2).await;
    let (revoked, kept) = (stream_token(&arena.url, &keys[0]).await, stream_token(&arena.url, &keys[1]).await);
    let (_, by_revoked) = connect(&arena.url, Some(&revoked), None).await;
    let (_, by_kept) = connect(&arena.url, Some(&kept), None).await;
    let (_, listed) = arena.call(Method::GET, "/v1/admin/keys?tenant=victim2", Some(OPERATOR), None).await;
    let hash = listed
        .as_array()
        .and_then(|keys| keys.iter().find(|k| keys_match(k, &revoked)))
        .and_then(|k| k["hash"].as_str())
        .expect("the first key is listed")
        .to_owned();
    let (status, body) = arena.call(Method::DELETE, &format!("/v1/admin/keys/{hash}"), Some(OPERATOR), None).await;
    assert_eq!(status, 200, "{body}");
    let last = by_revoked.expect("open").ended(ENDS_WITHIN).await;
    assert!(last.is_some_and(|l| l.contains("revoked")), "the revoked key's token's stream ended");
    assert_eq!(connect(&arena.url, Some(&revoked), None).await.0, 401, "the revoked key's token at connect");
    assert_eq!(by_kept.expect("open").ended(Duration::from_secs(1)).await, None, "another key's stream goes on");
    assert_eq!(connect(&arena.url, Some(&kept), None).await.0, 200, "another key's token works");

    let watched = neighbour.stop().await;
    watched.assert_within(Duration::from_secs(5), Duration::from_secs(1));
    arena.assert_peak_below(400 << 20);
}

/// Whether the listed key `key` minted the stream token `token`, which
/// names the key's hash.
fn keys_match(key: &Value, token: &str) -> bool {
    key["hash"].as_str().is_some_and(|hash| token.contains(hash))
}

/// Two servers on one PostgreSQL database: a tenant deleted through one
/// ends the streams open on the other as soon as the other hears of it,
/// and the other refuses its stream token from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenant_deleted_on_one_node_ends_its_streams_on_the_other() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let database = cluster.fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, format!("[admin]\nkey = \"{OPERATOR}\"\n")).unwrap();
    let node = |name: &str| {
        let data = dir.path().join(name);
        let args = ["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap(), "--store", &database];
        Server::start_with(&args, "127.0.0.1:0")
    };
    let (a, b) = (node("a"), node("b"));
    let keys = tenant(&a.url, "victim", 1).await;
    let token = stream_token(&a.url, &keys[0]).await;

    // The other node takes the token once it has heard of the key.
    let open = subs_tests::wait::eventually(Duration::from_secs(10), "b takes the token", || async {
        match connect(&b.url, Some(&token), None).await {
            (200, Some(open)) => Ok(open),
            (status, _) => Err(format!("b answers {status}")),
        }
    })
    .await;
    let (status, body) = call(&a.url, Method::DELETE, "/v1/admin/tenants/victim", Some(OPERATOR), None).await;
    assert_eq!(status, 200, "{body}");
    let last = open.ended(Duration::from_secs(5)).await;
    assert!(last.is_some_and(|l| l.contains("revoked")), "the stream on b ended");
    assert_eq!(connect(&b.url, Some(&token), None).await.0, 401, "b refuses the token");
}
