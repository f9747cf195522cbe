//! Negative money: an HTTP worker runs its own LLM calls and states what
//! they cost. A negative (or not finite, or not decimal) cost, or negative
//! usage, is a rejected decision naming the field; a tenant's and a
//! session's spend never go down; the tenant's budget, once spent, stays
//! spent for the operator's own calls.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Arena, HOSTILE, json_worker, streamed_turn};

/// An agent whose user message says what to do: `worker <cost> [<usage>]`
/// runs a worker-handled LLM call and settles it stating that cost (and
/// usage, JSON); `server` runs an LLM call of the engine's (the offline
/// model, on the operator's account). Each turn ends with the outcome of
/// its call as `done` data.
async fn spender() -> String {
    json_worker(|request: Value| async move {
        let trigger = &request["trigger"];
        match trigger["type"].as_str().unwrap_or_default() {
            // No redelivery of a rejected decision: the turn fails at once.
            "session.start" => json!({"agent": {"model": "subs/offline",
                "retry": {"max_retries": 0, "backoff_base_secs": 1, "backoff_max_secs": 1}}}),
            "client.messages" => {
                let text = trigger["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .and_then(|m| m["content"].as_str())
                    .unwrap_or_default()
                    .to_owned();
                let mut words = text.splitn(3, ' ');
                match (words.next(), words.next(), words.next()) {
                    (Some("worker"), Some(cost), usage) => {
                        let usage: Value = usage.map_or(json!({"prompt_tokens": 1, "completion_tokens": 1}), |u| {
                            serde_json::from_str(u).expect("usage is JSON")
                        });
                        json!({"state": {"cost": cost, "usage": usage},
                            "actions": [{"type": "llm.call", "handler": "worker"}]})
                    }
                    _ => json!({"actions": [{"type": "llm.call"}]}),
                }
            }
            "llm.execute" => {
                let state = &request["state"];
                json!({"actions": [{"type": "llm.result", "response": {"model": "worker/own",
                    "content": "spent", "usage": state["usage"], "cost": state["cost"]}}]})
            }
            "llm.finished" => json!({"actions": [{"type": "done",
                "data": {"llm_ok": trigger["ok"], "llm_code": trigger["code"]}}]}),
            _ => json!({}),
        }
    })
    .await
}

/// What the hostile tenant has spent, as `GET /v1/usage` says.
async fn spent(arena: &Arena) -> String {
    let (status, usage) = arena.call(reqwest::Method::GET, "/v1/usage", Some(HOSTILE.1), None).await;
    assert_eq!(status, 200, "{usage}");
    usage["cost"].as_str().expect("a cost").to_owned()
}

/// What a session has spent, as its snapshot says.
async fn session_cost(arena: &Arena, session: &str) -> String {
    let path = format!("/v1/sessions/{session}");
    let (status, snapshot) = arena.call(reqwest::Method::GET, &path, Some(HOSTILE.1), None).await;
    assert_eq!(status, 200, "{snapshot}");
    snapshot["cost"].as_str().unwrap_or("0").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stating_negative_money_is_refused_and_the_budget_holds() {
    let arena = Arena::start("[tenants.hostile]\nbudget = \"0.01\"\n").await;
    let (status, body) = arena.put_worker(HOSTILE.1, "spender", &spender().await).await;
    assert!(status < 300, "the spender: {body}");
    let neighbour = arena.neighbour();
    let turn = |session: &'static str, text: String| {
        let url = arena.url.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(20), streamed_turn(&url, HOSTILE.1, session, "spender", &text))
                .await
                .expect("the turn ends")
        }
    };

    // An honest cost spends the budget.
    let (status, event, data) = turn("s", "worker 0.02".to_owned()).await;
    assert_eq!((status, event.as_str(), &data["data"]["llm_ok"]), (200, "turn.done", &json!(true)), "{data}");
    assert_eq!(session_cost(&arena, "s").await, "0.02");
    assert_eq!(spent(&arena).await, "0.02");

    // Stated costs that would take it back, or are no amount at all, and
    // usage below zero: each a rejected decision naming the field.
    for (said, field) in [
        ("worker -1500", "response.cost"),
        ("worker -0.000001", "response.cost"),
        ("worker NaN", "response.cost"),
        ("worker Infinity", "response.cost"),
        ("worker 1e3", "response.cost"),
        (r#"worker 0 {"prompt_tokens": -100000, "completion_tokens": 1}"#, "response.usage.prompt_tokens"),
        (r#"worker 0 {"cost": -3.5}"#, "response.usage.cost"),
    ] {
        let (status, event, data) = turn("s", said.to_owned()).await;
        assert_eq!((status, event.as_str()), (200, "turn.failed"), "{said}: {data}");
        let error = data["error"].as_str().unwrap_or_default();
        assert!(error.contains(field), "{said}: the error names {field}: {error}");
        assert_eq!(spent(&arena).await, "0.02", "{said}: the tenant's spend never goes down");
        assert_eq!(session_cost(&arena, "s").await, "0.02", "{said}: nor the session's");
    }

    // The budget is spent: the operator's own call is refused before it is
    // sent, as it was before the attempts.
    let (status, event, data) = turn("t", "server".to_owned()).await;
    assert_eq!((status, event.as_str()), (200, "turn.done"), "{data}");
    assert_eq!(data["data"], json!({"llm_ok": false, "llm_code": "budget_exceeded"}), "{data}");
    assert_eq!(spent(&arena).await, "0.02");

    neighbour.stop().await.assert_within(Duration::from_secs(10), Duration::from_secs(2));
    eprintln!("the server peaked at {} MiB", arena.peak_rss() >> 20);
    arena.assert_peak_below(160 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negative_budgets_and_prices_are_refused_where_they_are_read() {
    let arena = Arena::start("").await;
    let (status, body) = arena
        .call(
            reqwest::Method::PUT,
            "/v1/admin/tenants/hostile/limits",
            Some(super::OPERATOR),
            Some(json!({"budget": -5})),
        )
        .await;
    assert_eq!((status, body["field"].as_str()), (400, Some("budget")), "{body}");
    let (status, body) = arena.put_worker(HOSTILE.1, "spender", &spender().await).await;
    assert!(status < 300, "{body}");
    let (status, _, data) = streamed_turn(&arena.url, HOSTILE.1, "s", "spender", "worker 0.5").await;
    assert_eq!(status, 200, "{data}");
    for budget in [json!("-1"), json!(-0.25), json!("NaN")] {
        let (status, body) = arena
            .call(reqwest::Method::PUT, "/v1/sessions/s/budget", Some(HOSTILE.1), Some(json!({"budget": budget})))
            .await;
        assert_eq!(status, 400, "{budget}: {body}");
        assert!(body.to_string().contains("budget"), "{budget}: {body}");
    }

    // A config file with a negative price does not start a server.
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, "[prices.\"a/b\"]\ninput = -1\noutput = 1\n").expect("written");
    let mut child = crate::subs()
        .args(["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()])
        .args(["--data", dir.path().join("data").to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("subs runs");
    let exited = subs_tests::wait::until(Duration::from_secs(30), || {
        let exited = child.try_wait().expect("the child");
        async move { exited }
    })
    .await;
    if exited.is_err() {
        let _ = child.kill();
        panic!("a server started on a config file with a negative price");
    }
    let output = child.wait_with_output().expect("its output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success() && stderr.contains("negative"), "{stderr}");
}
