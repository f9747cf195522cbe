//! `subs sessions show` lists a session's interrupts: those waiting (with
//! their reason, payload and resume schema) and those answered (with what
//! and by whom), on a real `subs serve`.

use serde_json::{Value, json};

use crate::inspector::{input, settled};
use crate::{Server, http, output};

async fn post(url: &str, session: &str, body: Value) -> (u16, Value) {
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    (status, serde_json::from_slice(&response.bytes().await.unwrap()).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_show_lists_open_and_answered_interrupts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = &server.url;
    let put = output(&["agents", "put", "scenario", subs_tests::guests::TEST_SCENARIO, "--server", url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let say = json!({
        "type": "client.message",
        "agent_id": "scenario",
        "message": {"role": "user", "content": "interrupt with schema"},
    });
    assert_eq!(post(url, "ask", say).await.0, 202);
    settled(url, "ask", None, "waiting").await;

    let show = output(&["sessions", "show", "ask", "--server", url]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    let waiting = show.stdout.lines().find(|l| l.starts_with("waiting: interrupt approval")).unwrap_or_else(|| {
        panic!("the open interrupt is listed: {}", show.stdout);
    });
    assert!(waiting.contains("(needs approval)") && waiting.contains("resume schema {"), "{waiting}");
    assert!(!show.stdout.contains("answered:"), "{}", show.stdout);

    // A payload the schema refuses changes nothing.
    let resume = |payload: Value| json!({"type": "interrupt.resume", "interrupt_id": "approval", "payload": payload});
    let (status, refused) = post(url, "ask", resume(json!({"approved": "yes"}))).await;
    assert_eq!((status, &refused["field"]), (400, &json!("payload.approved")), "{refused}");
    let (status, _) = post(url, "ask", resume(json!({"approved": true, "reason": "ok"}))).await;
    assert_eq!(status, 202);
    settled(url, "ask", None, "idle").await;

    let show = output(&["sessions", "show", "ask", "--server", url]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(
        show.stdout.lines().any(|l| l
            == r#"answered: interrupt approval (needs approval) with {"approved":true,"reason":"ok"} by the tenant"#),
        "{}",
        show.stdout
    );
    assert!(!show.stdout.contains("waiting:"), "{}", show.stdout);
    let json = output(&["sessions", "show", "ask", "--server", url, "--json"]);
    let view: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(
        view["answered_interrupts"],
        json!([{
            "interrupt_id": "approval",
            "reason": "needs approval",
            "payload": {"approved": true, "reason": "ok"},
            "resumed_by": {"kind": "tenant"}
        }])
    );
    assert_eq!(view["interrupts"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answered_interrupt_names_the_key_that_resumed_it() {
    let (acme, second) = ("subs_acce55acce55acce55acce55acce55ac", "subs_5ec0nd5ec0nd5ec0nd5ec0nd5ec0nd5e");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    let keys =
        format!("[[keys]]\ntenant = \"acme\"\nkey = \"{acme}\"\n\n[[keys]]\ntenant = \"acme\"\nkey = \"{second}\"\n");
    std::fs::write(&config, keys).unwrap();
    let data = dir.path().join("data");
    let server =
        Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let url = &server.url;
    let put = output(&["agents", "put", "scenario", subs_tests::guests::TEST_SCENARIO, "--server", url, "--key", acme]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let say = json!({
        "type": "client.message",
        "agent_id": "scenario",
        "message": {"role": "user", "content": "interrupt with schema"},
    });
    input(url, "ask", Some(acme), say).await;
    settled(url, "ask", Some(acme), "waiting").await;
    // The second key of the same tenant answers it: the event names that
    // key by its listed prefix, never the key itself.
    let resume = json!({"type": "interrupt.resume", "interrupt_id": "approval", "payload": {"approved": false}});
    input(url, "ask", Some(second), resume).await;
    settled(url, "ask", Some(acme), "idle").await;

    let json = output(&["sessions", "show", "ask", "--server", url, "--key", acme, "--json"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let view: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(view["answered_interrupts"][0]["resumed_by"], json!({"kind": "tenant", "key": &second[..12]}));
    assert!(!json.stdout.contains(second), "the key itself is never shown: {}", json.stdout);
    let show = output(&["sessions", "show", "ask", "--server", url, "--key", acme]);
    let line = format!(
        r#"answered: interrupt approval (needs approval) with {{"approved":false}} by the tenant (key {})"#,
        &second[..12]
    );
    assert!(show.stdout.lines().any(|l| l == line), "{line}\n{}", show.stdout);
}
