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

/// The scenario component: `interrupt …` opens the interrupt `approval`
/// and ends the turn with `resumed with <payload>`; it delegates to the
/// sub-agent `helper`.
const SCENARIO: &str = subs_tests::guests::TEST_SCENARIO;

/// What makes the offline model call the scenario's sub-agent `helper`.
const DELEGATE: &str = r#"use tool helper with {"prompt": "say hi"}"#;

/// Runs `subs args…` with `stdin` written to its input, to its end.
fn output_with_stdin(args: &[&str], stdin: &str) -> crate::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = crate::subs()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("subs starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    input.write_all(stdin.as_bytes()).expect("stdin takes the input");
    drop(input);
    let mut process = crate::Process::new(child);
    let code = process.wait(crate::PATIENCE);
    crate::Output { code, stdout: process.stdout_text(), stderr: process.stderr_text() }
}

/// The last assistant message of `--json` output.
fn answer(stdout: &str) -> String {
    let events: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let answer = events
        .iter()
        .rfind(|e| e["event"] == "message" && e["data"]["message"]["role"] == "assistant")
        .unwrap_or_else(|| panic!("an answer in {stdout}"));
    answer["data"]["message"]["content"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn json_and_resume_answer_an_interrupt() {
    let out = output(&["run", SCENARIO, "interrupt please", "--json", "--resume", r#"{"ok":true}"#]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(out.stdout.lines().any(|l| l.contains(r#""event":"interrupt""#)), "{}", out.stdout);
    assert_eq!(answer(&out.stdout), r#"resumed with {"ok":true}"#);

    // Without --resume, a line of JSON on stdin answers it.
    let out = output_with_stdin(&["run", SCENARIO, "interrupt please", "--json"], "{\"ok\":2}\n");
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(answer(&out.stdout), r#"resumed with {"ok":2}"#);
}

/// Nothing to answer with and no one to ask: the command fails at once,
/// naming the interrupt and how to answer it, instead of waiting.
#[test]
fn an_interrupt_with_no_answer_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let out = output(&["run", SCENARIO, "interrupt please", "--data", data]);
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert_eq!(
        out.stderr,
        "error: the turn waits for interrupt `approval` (needs approval): answer it with --resume '<json>' or a \
         line of JSON on stdin\n"
    );
    assert!(out.stdout.contains("‖ interrupt approval: needs approval"), "{}", out.stdout);

    // The session in --data still waits: the next run answers the open
    // interrupt first, then sends its message.
    let out = output(&["run", SCENARIO, "hello", "--data", data, "--resume", r#""yes""#]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "‖ interrupt approval: needs approval\nresumed with \"yes\"\nYou said: hello\n");

    // Not JSON: refused before anything runs.
    let out = output(&["run", SCENARIO, "interrupt", "--resume", "{nope"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.starts_with("error: --resume {nope: not JSON"), "{}", out.stderr);
    let out = output_with_stdin(&["run", SCENARIO, "interrupt please"], "nope\n");
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.starts_with("error: the answer to interrupt `approval` on stdin is not JSON"), "{}", out.stderr);
}

#[test]
fn without_a_message_or_a_terminal_there_is_nothing_to_do() {
    let out = output(&["run", TOOLS]);
    assert_eq!(out.code, Some(2));
    assert_eq!(out.stderr, "error: no message to send: give one, or run at a terminal without --json for a chat\n");
}

/// `--agent NAME=FILE` registers a second agent, so the scenario's
/// sub-agent runs offline; without it the sub-agent's call fails.
#[test]
fn more_agents_make_delegation_work_offline() {
    let helper = format!("helper={TOOLS}");
    let out = output(&["run", SCENARIO, DELEGATE, "--agent", &helper]);
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stdout.starts_with("→ helper {\"prompt\":\"say hi\"}\n← helper: You said: {\"prompt\":\"say hi\"}\n"),
        "{}",
        out.stdout
    );

    // Without it, the sub-agent's call fails and the model is told why.
    let out = output(&["run", SCENARIO, DELEGATE]);
    assert!(out.stdout.contains("no agent `helper` is registered"), "{}", out.stdout);

    for (spec, error) in [
        ("helper", "expected NAME=AGENT"),
        ("=x.wasm", "expected NAME=AGENT"),
        ("agent=x.wasm", "the name `agent` is taken"),
        ("bad name=x.wasm", "`bad name` is not an agent name"),
    ] {
        let out = output(&["run", SCENARIO, "hi", "--agent", spec]);
        assert_eq!(out.code, Some(2), "{spec}");
        assert!(out.stderr.starts_with(&format!("error: --agent {spec}: {error}")), "{spec}: {}", out.stderr);
    }
    let out = output(&["run", SCENARIO, "hi", "--agent", "helper=no/such.wasm"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("reading no/such.wasm"), "{}", out.stderr);
}

/// `subs run` at a pseudo-terminal: its stdin, stdout and stderr are the
/// terminal's, as they are for a person; what it prints is gathered as it
/// comes.
pub struct Terminal {
    child: std::process::Child,
    master: std::fs::File,
    output: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// How much of the output earlier expectations consumed.
    seen: usize,
}

impl Terminal {
    pub fn spawn(args: &[&str]) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
        let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("a pty");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("the pty's name");
        let open = || {
            std::fs::OpenOptions::new().read(true).write(true).open(name.to_str().unwrap()).expect("the pty's slave")
        };
        let child = crate::subs().args(args).stdin(open()).stdout(open()).stderr(open()).spawn().expect("subs starts");
        let master = std::fs::File::from(master);
        let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut reader = master.try_clone().expect("the pty twice");
        let sink = output.clone();
        std::thread::spawn(move || {
            use std::io::Read as _;
            let mut buffer = [0u8; 4096];
            // EIO once the child closed the terminal: the end.
            while let Ok(n @ 1..) = reader.read(&mut buffer) {
                sink.lock().unwrap().extend_from_slice(&buffer[..n]);
            }
        });
        Self { child, master, output, seen: 0 }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    /// Waits for `text` after what was expected before; panics with the
    /// output after [`crate::PATIENCE`].
    pub fn expect(&mut self, text: &str) {
        let seen = self.seen;
        let at = subs_tests::wait::eventually_blocking(crate::PATIENCE, format!("the terminal shows {text:?}"), || {
            let output = self.text();
            output.get(seen..).and_then(|rest| rest.find(text)).ok_or(output)
        });
        self.seen += at + text.len();
    }

    /// Types `bytes` (a line needs its `\n`).
    pub fn type_in(&mut self, bytes: &str) {
        use std::io::Write as _;
        self.master.write_all(bytes.as_bytes()).expect("the terminal takes input");
    }

    /// The exit code, once it exits (at most [`crate::PATIENCE`]).
    pub fn wait(&mut self) -> Option<i32> {
        let exited = subs_tests::wait::eventually_blocking(crate::PATIENCE, "subs exits", || {
            self.child.try_wait().unwrap().ok_or_else(|| format!("the terminal shows:\n{}", self.text()))
        });
        exited.code()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An agent whose `refund` must be approved: `refund` opens an approval
/// naming the tool, its call and its arguments; on the answer it refunds
/// (counted) or says why not. `count` answers how many messages the
/// session holds; anything else goes the ordinary way.
struct Approver {
    refunds: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

impl subs_sdk::Agent for Approver {
    fn decide(
        &self,
        request: subs_sdk::DecisionRequest,
        _cx: &mut subs_sdk::Context<'_>,
    ) -> Result<subs_sdk::DecisionResponse, subs_sdk::DecideError> {
        use subs_sdk::prelude::*;
        match &request.trigger {
            Trigger::ClientMessages(input) => {
                let text = input.messages.last().map(DraftMessage::text).unwrap_or_default();
                if text == "refund" {
                    // From its wire form: the fields left out take their defaults.
                    let interrupt: subs_sdk::action::Interrupt = serde_json::from_value(json!({
                        "reason": "refund needs approval",
                        "payload": {
                            "tool": "refund",
                            "call_id": "call_refund",
                            "arguments": r#"{"order_id":"A1","amount":5}"#,
                        },
                    }))
                    .expect("an interrupt");
                    Ok(DecisionResponse::new().with_action(interrupt))
                } else if text == "count" {
                    let count = format!("{} messages", request.messages.len());
                    Ok(DecisionResponse::new().with_message(DraftMessage::assistant(count)).with_action(Action::done()))
                } else {
                    Ok(request.proposed)
                }
            }
            Trigger::InterruptResumed(resumed) => {
                let payload = resumed.payload.clone().unwrap_or_default();
                let reply = if payload["approved"] == true {
                    self.refunds.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    "refunded A1".to_owned()
                } else {
                    format!("refund denied: {}", payload["reason"].as_str().unwrap_or("no reason"))
                };
                Ok(DecisionResponse::new().with_message(DraftMessage::assistant(reply)).with_action(Action::done()))
            }
            _ => Ok(request.proposed),
        }
    }
}

/// The chat: two turns in one session (the second sees the first), one
/// refund approved and one denied at the `[y/N]` prompt, then `/exit`.
#[test]
fn a_chat_at_a_terminal_keeps_the_session_and_asks_for_approvals() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let refunds = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let agent = Approver { refunds: refunds.clone() };
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(subs_http_worker::serve(listener, agent));

    let mut t = Terminal::spawn(&["run", &url]);
    t.expect(&format!("Chatting with {url}: /exit or Ctrl-D leaves."));
    t.expect(">>> ");
    t.type_in("hello\n");
    t.expect("You said: hello");
    t.expect(">>> ");
    t.type_in("count\n");
    // The session before `count`: hello and its answer.
    t.expect("2 messages");
    t.expect(">>> ");

    t.type_in("refund\n");
    t.expect("‖ interrupt");
    t.expect(r#"approve refund {"order_id":"A1","amount":5}? [y/N] "#);
    t.type_in("y\n");
    t.expect("refunded A1");
    assert_eq!(refunds.load(std::sync::atomic::Ordering::SeqCst), 1);
    t.expect(">>> ");

    t.type_in("refund\n");
    t.expect(r#"approve refund {"order_id":"A1","amount":5}? [y/N] "#);
    t.type_in("n\n");
    t.expect("refund denied: denied at the terminal");
    t.expect(">>> ");
    assert_eq!(refunds.load(std::sync::atomic::Ordering::SeqCst), 1, "a denied refund is not made");

    t.type_in("/exit\n");
    assert_eq!(t.wait(), Some(0), "{}", t.text());
}

/// Any other interrupt asks for JSON, again until it parses; delegation
/// runs offline with `--agent`; Ctrl-D leaves.
#[test]
fn a_chat_asks_for_json_delegates_and_ends_at_ctrl_d() {
    let helper = format!("helper={TOOLS}");
    let mut t = Terminal::spawn(&["run", SCENARIO, "--agent", &helper]);
    t.expect(">>> ");
    t.type_in("interrupt me\n");
    t.expect("answer `approval` (JSON): ");
    t.type_in("{oops\n");
    t.expect("not JSON");
    t.expect("answer `approval` (JSON): ");
    t.type_in("{\"ok\": true}\n");
    t.expect(r#"resumed with {"ok":true}"#);
    t.expect(">>> ");
    t.type_in(&format!("{DELEGATE}\n"));
    t.expect(r#"← helper: You said: {"prompt":"say hi"}"#);
    t.expect(">>> ");
    // Ctrl-D at the start of a line: the end of input.
    t.type_in("\x04");
    assert_eq!(t.wait(), Some(0), "{}", t.text());
}
