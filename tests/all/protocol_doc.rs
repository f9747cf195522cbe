//! The two complete workers of docs/protocol.md ("Human approval",
//! "Delegating to another agent"), taken from the page as written and run
//! with `python3` against a real server: what the page shows is what the
//! engine does.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use reqwest::Method;
use serde_json::{Value, json};
use subs_tests::server::TestServer;

use crate::approval::{Passthrough, done, interrupts, resume, snapshot, texts};

/// The fenced block after `<!-- example: NAME -->` in docs/protocol.md.
fn example(name: &str) -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap();
    let marker = format!("<!-- example: {name} -->\n```python\n");
    let start = page.find(&marker).unwrap_or_else(|| panic!("docs/protocol.md has no example {name}")) + marker.len();
    let end = page[start..].find("\n```\n").expect("the block ends") + start;
    page[start..=end].to_owned()
}

/// A documented worker running under `python3`, and the lines it printed.
struct Worker {
    child: Child,
    url: String,
    printed: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl Worker {
    fn start(name: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(name);
        std::fs::write(&file, example(name)).unwrap();
        let mut child = Command::new("python3")
            .arg(&file)
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().expect("the worker says where it listens").unwrap();
        let port = first.strip_prefix("listening on ").unwrap_or_else(|| panic!("unexpected: {first}"));
        let printed = Arc::new(Mutex::new(Vec::new()));
        let sink = printed.clone();
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|line| sink.lock().unwrap().push(line)));
        Worker { child, url: format!("http://127.0.0.1:{port}/"), printed, _dir: dir }
    }

    fn printed(&self) -> Vec<String> {
        self.printed.lock().unwrap().clone()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn register(s: &TestServer, agent: &str, url: &str) {
    let (status, body) = s.call(Method::PUT, &format!("/v1/agents/{agent}"), None, Some(json!({ "url": url }))).await;
    assert!(status.is_success(), "{status}: {body}");
}

async fn say(s: &TestServer, session: &str, agent: &str, text: &str) -> String {
    let (status, body) = s.say(session, agent, text, None).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{body}");
    body["turn_id"].as_str().unwrap().to_owned()
}

/// The `tool` message answering the call `id`.
fn tool_message<'a>(view: &'a Value, id: &Value) -> &'a Value {
    view["messages"].as_array().unwrap().iter().find(|m| m["tool_call_id"] == *id).expect("the call's tool message")
}

#[tokio::test]
async fn the_documented_approval_holds_a_denied_refund_and_runs_an_approved_one() {
    let worker = Worker::start("approval.py");
    let s = TestServer::start(&[]).await;
    register(&s, "approver", &worker.url).await;

    let ask = r#"use tool refund with {"order_id": "A1", "amount": 5}"#;
    let turn = say(&s, "denied", "approver", ask).await;
    let open = interrupts(&s, "denied", 1).await;
    assert_eq!(open[0]["payload"]["tool"], "refund", "{open:?}");
    assert_eq!(open[0]["payload"]["call_id"], open[0]["interrupt_id"]);
    resume(&s, "denied", &open[0]["interrupt_id"], json!({"approved": false, "reason": "too large"})).await;
    done(&s, "denied", &turn).await;
    let view = snapshot(&s, "denied").await;
    let denial = tool_message(&view, &open[0]["interrupt_id"]);
    assert!(denial["content"].as_str().unwrap().contains("denied by the approver: too large"), "{view}");
    assert!(worker.printed().is_empty(), "a denied refund never runs: {:?}", worker.printed());

    let turn = say(&s, "approved", "approver", ask).await;
    let open = interrupts(&s, "approved", 1).await;
    resume(&s, "approved", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "approved", &turn).await;
    let view = snapshot(&s, "approved").await;
    assert_eq!(tool_message(&view, &open[0]["interrupt_id"])["content"], r#"{"refunded":5}"#, "{view}");
    assert_eq!(worker.printed(), ["refund A1"]);
}

#[tokio::test]
async fn the_documented_delegation_gives_the_child_the_text_and_returns_its_reply() {
    let worker = Worker::start("delegate.py");
    let s = TestServer::start(&[]).await;
    register(&s, "delegator", &worker.url).await;
    let summarizer = subs_tests::serve_loopback(subs_http_worker::router(Passthrough)).await;
    register(&s, "summarizer", &format!("http://{summarizer}/")).await;

    let turn = say(&s, "d", "delegator", "summarize: the order shipped on Monday").await;
    done(&s, "d", &turn).await;
    let view = snapshot(&s, "d").await;
    let call = view["messages"].as_array().unwrap().iter().find(|m| m["tool_calls"].is_array()).expect("the call");
    assert_eq!(call["tool_calls"][0]["function"]["name"], "summarizer", "{view}");
    let child = format!("d.{}", call["tool_calls"][0]["id"].as_str().unwrap());
    let child_view = snapshot(&s, &child).await;
    assert_eq!(texts(&child_view, "user"), ["the order shipped on Monday"], "{child_view}");
    let reply = texts(&child_view, "assistant").pop().expect("the child's reply");
    assert_eq!(texts(&view, "tool"), [reply], "the child's reply is the call's result: {view}");
}
