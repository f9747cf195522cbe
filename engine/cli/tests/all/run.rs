//! `subs run`: one offline turn in-process, streamed to a pipe.

use serde_json::Value;

use crate::{ADD, TOOLS, output};

/// What the example agent and the offline model make of [`ADD`]: the call,
/// its result, the answer, each once.
const TRANSCRIPT: &str = "→ add {\"a\":1,\"b\":2}\n← add: {\"sum\":3}\nadd returned {\"sum\":3}.\n";

#[test]
fn a_tool_turn_prints_the_calls_and_the_streamed_answer_once() {
    let out = output(&["run", TOOLS, ADD]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, TRANSCRIPT);
    // A pipe is not a terminal: no spinner, no log lines.
    assert_eq!(out.stderr, "");
}

/// `subs run … | head -1`: the reader leaves early; `subs` ends quietly
/// with success instead of reporting a broken pipe.
#[test]
fn a_reader_that_leaves_early_is_not_an_error() {
    for args in [&["run", TOOLS, ADD][..], &["run", TOOLS, ADD, "--json"][..]] {
        let mut child = crate::subs()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("subs starts");
        // Closed before the turn prints anything.
        drop(child.stdout.take());
        let pid = child.id().to_string();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(child.wait_with_output()));
        let Ok(out) = finished.recv_timeout(crate::PATIENCE) else {
            let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
            panic!("{args:?}: subs did not end");
        };
        let out = out.expect("subs ran");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: stderr: {stderr}");
        assert_eq!(stderr, "", "{args:?}");
    }
}

#[test]
fn json_is_one_event_per_line_with_the_answer_streamed() {
    let out = output(&["run", TOOLS, ADD, "--json"]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    for event in &events {
        let keys: Vec<&String> = event.as_object().expect("an object").keys().collect();
        assert_eq!(keys, ["id", "event", "data"], "{event}");
    }
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"turn.started"));
    assert_eq!(names.last(), Some(&"turn.done"));

    // Stored events are numbered in order; token deltas carry no id.
    let ids: Vec<u64> = events.iter().filter_map(|e| e["id"].as_u64()).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let deltas: Vec<&Value> = events.iter().filter(|e| e["event"] == "llm.token.delta").collect();
    assert!(deltas.iter().all(|d| d["id"].is_null()));

    // The answer arrived in pieces, before the message that holds it.
    let answer = events
        .iter()
        .rposition(|e| e["event"] == "message" && e["data"]["message"]["role"] == "assistant")
        .expect("an answer");
    let streamed: String = events[..answer]
        .iter()
        .filter(|e| e["event"] == "llm.token.delta")
        .filter_map(|e| e["data"]["text"].as_str())
        .collect();
    assert_eq!(streamed, "add returned {\"sum\":3}.");
    assert!(deltas.iter().filter(|d| d["data"]["text"].is_string()).count() > 1, "more than one piece");
    assert_eq!(events[answer]["data"]["message"]["content"], "add returned {\"sum\":3}.");

    // The tool call and its result are recorded messages.
    let call = events.iter().find(|e| e["data"]["message"]["tool_calls"].is_array()).expect("the tool call");
    assert_eq!(call["data"]["message"]["tool_calls"][0]["function"]["name"], "add");
    let result = events.iter().find(|e| e["data"]["message"]["role"] == "tool").expect("the result");
    assert_eq!(result["data"]["message"]["content"], "{\"sum\":3}");
}

#[test]
fn a_failed_turn_exits_non_zero_with_the_error() {
    // The offline provider serves one model; any other fails the call.
    let out = output(&["run", TOOLS, "hello", "--default-model", "subs/other"]);
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(out.stderr.starts_with("error: the turn failed (provider_error):"), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "one line: {}", out.stderr);
}

#[test]
fn bad_arguments_exit_with_the_usage_code() {
    let out = output(&["run", "no/such/agent.wasm", "hi"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("reading no/such/agent.wasm"), "{}", out.stderr);

    let dir = tempfile::tempdir().unwrap();
    let not_wasm = dir.path().join("agent.wasm");
    std::fs::write(&not_wasm, b"not a component").unwrap();
    let out = output(&["run", not_wasm.to_str().unwrap(), "hi"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("is not a usable agent"), "{}", out.stderr);

    let out = output(&["run", TOOLS, "hi", "--default-model", "nobody/model"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no provider `nobody`"), "{}", out.stderr);
}

#[test]
fn a_data_dir_keeps_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let first = output(&["run", TOOLS, "first", "--data", data]);
    assert_eq!((first.code, first.stdout.as_str()), (Some(0), "You said: first\n"), "{}", first.stderr);
    let second = output(&["run", TOOLS, ADD, "--data", data, "--json"]);
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    // The second turn continues the first: its user message hangs under
    // the first turn's reply instead of starting a new conversation.
    let events: Vec<Value> = second.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let user = events
        .iter()
        .find(|e| e["event"] == "message" && e["data"]["message"]["role"] == "user")
        .expect("the turn's user message is printed");
    assert!(user["data"]["parent_id"].is_string(), "{user}");
    assert_ne!(events[0]["data"]["turn_id"], "turn_1");
}

/// A second run of the same agent loads it compiled from the cache: the
/// compiled file the first run wrote is not written again. (Beside it, the
/// cache keeps compiled functions in `functions/`.)
#[test]
fn a_second_run_of_the_same_agent_compiles_nothing() {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().to_str().unwrap();
    let compiled = || -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().extension().is_some_and(|ext| ext == "cwasm"))
            .map(|e| (e.path(), e.metadata().unwrap().modified().unwrap()))
            .collect()
    };
    let first = output(&["run", TOOLS, ADD, "--cache", dir]);
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    let after_first = compiled();
    assert_eq!(after_first.len(), 1, "{after_first:?}");
    let second = output(&["run", TOOLS, ADD, "--cache", dir]);
    assert_eq!(second.code, Some(0), "stderr: {}", second.stderr);
    assert_eq!(second.stdout, TRANSCRIPT);
    assert_eq!(compiled(), after_first, "nothing was compiled again");
}

/// `--config` takes the server's config file: its sandbox limits apply,
/// here one too small for the agent, which is refused naming the setting.
#[test]
fn the_config_file_sets_the_sandbox_limits() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, "[limits.sandbox]\ninstances = 1\n").unwrap();
    let out = output(&["run", TOOLS, ADD, "--config", config.to_str().unwrap()]);
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("core instances (its limit is 1, setting `instances`)"), "{}", out.stderr);
    std::fs::write(&config, "[limits.sandbox]\ninstances = 8\n").unwrap();
    let out = output(&["run", TOOLS, ADD, "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
}
