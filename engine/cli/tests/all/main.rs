//! Black-box tests of the `subs` binary: one test binary of modules, each
//! running the built `subs` as a subprocess with piped output.

mod admin;
mod approver;
mod browser;
mod chaos;
mod clients;
mod crash;
mod dev;
mod hostile;
mod inspector;
mod interrupts;
mod mcp_endpoint;
mod mcp_tools;
mod new;
mod observability;
mod oci;
mod openapi;
mod postgres;
mod replay;
mod run;
mod serve;
mod stream_default;
mod stream_frames;
mod tail;
mod telemetry;
mod uploads;
mod versions;

use std::io::{BufRead as _, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The example `tools` component (adds numbers).
pub const TOOLS: &str = subs_tests::guests::TOOLS;

/// How long a subprocess may take to say something before a test gives
/// up; generous, since the first start of a debug build compiles the
/// component.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// The message that makes the offline model call `add`.
pub const ADD: &str = r#"use tool add with {"a": 1, "b": 2}"#;

/// `subs` with no setting inherited from the environment of the test run.
pub fn subs() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_subs"));
    for var in [
        "SUBS_LISTEN",
        "SUBS_DATA",
        "SUBS_STORE",
        "SUBS_DEFAULT_MODEL",
        "SUBS_CONFIG",
        "SUBS_SERVER",
        "SUBS_API_KEY",
        "SUBS_ADMIN_KEY",
        "SUBS_WORKER_SECRET",
        "RUST_LOG",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_API_KEY",
        "OLLAMA_BASE_URL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SDK_DISABLED",
    ] {
        command.env_remove(var);
    }
    command.stdin(Stdio::null());
    // Compiled components go to one cache per test binary, not the
    // user's.
    command.env("SUBS_CACHE", cache_dir());
    command
}

/// The compile cache of this test binary's `subs run`s: one directory
/// under `target/tmp`, kept from run to run (its entries are named by the
/// component's digest and the engine's settings, so a stale one is never
/// read). A temporary directory held in a static is never dropped, so it
/// would leave hundreds of megabytes of compiled code in `/tmp` per run.
pub fn cache_dir() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("subs-cli-cache");
        std::fs::create_dir_all(&dir).expect("the tests' compile cache");
        dir
    })
}

/// What a finished `subs` printed.
pub struct Output {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
}

/// Runs `subs args…` to its end (at most [`PATIENCE`]).
pub fn output(args: &[&str]) -> Output {
    let child = subs().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("subs starts");
    let mut process = Process::new(child);
    let code = process.wait(PATIENCE);
    Output { code, stdout: process.stdout_text(), stderr: process.stderr_text() }
}

/// A running `subs` whose output is read line by line as it comes.
pub struct Process {
    /// The child; killed when this is dropped.
    pub child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    /// Stdout lines taken so far.
    pub lines: Vec<String>,
    /// Stderr taken so far.
    errors: String,
}

impl Process {
    /// Starts reading the child's stdout and stderr.
    pub fn new(mut child: Child) -> Self {
        let stdout = lines_of(child.stdout.take().expect("stdout is piped"));
        let stderr = lines_of(child.stderr.take().expect("stderr is piped"));
        Self { child, stdout, stderr, lines: Vec::new(), errors: String::new() }
    }

    /// The next stdout line, waiting at most `patience`.
    pub fn line(&mut self, patience: Duration) -> Option<String> {
        let line = self.stdout.recv_timeout(patience).ok()?;
        self.lines.push(line.clone());
        Some(line)
    }

    /// Reads stdout lines until one satisfies `done`; panics (with what
    /// the process printed) after [`PATIENCE`].
    pub fn until(&mut self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.line(left) {
                Some(line) if done(&line) => return line,
                Some(_) => {}
                None => break,
            }
        }
        let stderr = self.stderr_text();
        panic!("waiting for {what}: stdout so far {:#?}\nstderr {stderr}", self.lines);
    }

    /// Waits for the process to exit (at most `patience`); its code.
    pub fn wait(&mut self, patience: Duration) -> Option<i32> {
        let exited = subs_tests::wait::eventually_blocking(patience, "subs exits", || {
            self.child.try_wait().expect("the child can be waited for")
        });
        exited.code()
    }

    /// All stdout left (after exit: all of it).
    pub fn stdout_text(&mut self) -> String {
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
            self.lines.push(line);
        }
        self.lines.iter().map(|l| format!("{l}\n")).collect()
    }

    /// The stderr printed so far (after exit: all of it).
    pub fn stderr_text(&mut self) -> String {
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(200)) {
            self.errors.push_str(&line);
            self.errors.push('\n');
        }
        self.errors.clone()
    }

    /// Sends SIGTERM, as a service manager stops a server.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(status.success());
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines_of(stream: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// A running `subs serve`.
pub struct Server {
    /// The process.
    pub process: Process,
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// `127.0.0.1:<port>`.
    pub addr: String,
}

impl Server {
    /// Starts `subs serve --listen <listen> --data <data> extra…` and waits
    /// for it to print its address.
    pub fn start(data: &Path, listen: &str, extra: &[&str]) -> Self {
        let data = data.to_str().expect("a UTF-8 path");
        Self::start_with(&[&["--data", data][..], extra].concat(), listen)
    }

    /// Starts `subs serve --listen <listen> args…` and waits for it to
    /// print its address.
    pub fn start_with(args: &[&str], listen: &str) -> Self {
        let child = subs()
            .args(["serve", "--listen", listen])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("subs serve starts");
        Self::attach(child)
    }

    /// A `subs serve` started by the caller (with piped output), once it
    /// has printed its address.
    pub fn attach(child: Child) -> Self {
        let mut process = Process::new(child);
        let line = process.until("the listening address", |l| l.starts_with("subs listening on http://"));
        let url = line.trim_start_matches("subs listening on ").to_owned();
        let addr = url.trim_start_matches("http://").to_owned();
        Self { process, url, addr }
    }
}

/// An HTTP client for the tests' own requests.
pub fn http() -> reqwest::Client {
    reqwest::Client::new()
}

/// Sends `text` to session `session` of agent `agent` with `"stream":
/// true` and reads the turn's whole event stream; returns its events
/// (`(id, event, data)`).
pub async fn stream_turn(
    url: &str,
    session: &str,
    agent: &str,
    text: &str,
) -> Vec<(Option<u64>, String, serde_json::Value)> {
    let body = serde_json::json!({
        "type": "client.message",
        "agent_id": agent,
        "message": { "role": "user", "content": text },
        "stream": true,
    });
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    assert_eq!(response.status(), 200, "a streamed turn");
    let bytes =
        tokio::time::timeout(PATIENCE, response.bytes()).await.expect("the turn ends").expect("the stream reads");
    subs_protocol::sse::SseParser::new()
        .push(&bytes)
        .expect("events within the bound")
        .into_iter()
        .map(|e| (e.id.and_then(|i| i.parse().ok()), e.event, serde_json::from_str(&e.data).expect("JSON data")))
        .collect()
}
