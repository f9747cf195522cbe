//! `subs sessions tail` across a server that dies and comes back.

use std::collections::HashSet;
use std::process::Stdio;

use serde_json::Value;

use crate::{ADD, Process, Server, TOOLS, output, stream_turn, subs};

fn turn_done(line: &str, turn: &str) -> bool {
    let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
    event["event"] == "turn.done" && event["data"]["turn_id"] == turn
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_resumes_after_the_server_is_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let first = stream_turn(&server.url, "demo", "tools", ADD).await;

    let child = subs()
        .args(["sessions", "tail", "demo", "--json", "--server", &server.url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut tail = Process::new(child);
    tail.until("the first turn's end", |l| turn_done(l, "turn_1"));

    // A crash: the connection drops mid-stream.
    let addr = server.addr.clone();
    drop(server);
    let server = Server::start(dir.path(), &addr, &[]);
    let second = stream_turn(&server.url, "demo", "tools", "and again").await;
    let second_turn =
        second.iter().find_map(|(_, name, data)| (name == "turn.started").then(|| data["turn_id"].clone()));
    let second_turn = second_turn.expect("the second turn started");
    tail.until("the second turn's end", |l| turn_done(l, second_turn.as_str().unwrap()));
    assert!(tail.stderr_text().contains("connection lost"), "tail noticed the drop");

    let events: Vec<Value> = tail.lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    let ids: Vec<u64> = events.iter().filter_map(|e| e["id"].as_u64()).collect();
    // Every stored event once, in order, none missing.
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let seen: HashSet<u64> = ids.iter().copied().collect();
    for (id, name, _) in first.iter().chain(&second) {
        if let Some(id) = id {
            assert!(seen.contains(id), "{name} #{id} was printed");
        }
    }
    assert_eq!(ids.last().copied(), second.last().and_then(|e| e.0), "nothing after the last turn's end");
}

#[test]
fn tail_of_an_unknown_session_or_server_fails() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let missing = output(&["sessions", "tail", "nope", "--server", &server.url]);
    assert_eq!(missing.code, Some(1));
    assert!(missing.stderr.contains("session `nope` does not exist"), "{}", missing.stderr);
    let addr = server.addr.clone();
    drop(server);
    let down = output(&["sessions", "tail", "demo", "--server", &format!("http://{addr}")]);
    assert_eq!(down.code, Some(3));
    assert!(down.stderr.contains(&format!("cannot reach the server at http://{addr}")), "{}", down.stderr);
}
