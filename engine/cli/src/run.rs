//! `subs run`: an agent in this process, no server: one turn for a
//! message, or a chat at a terminal.
//!
//! The agent (a component file or an HTTP worker's URL) is registered as
//! agent `agent` of the local tenant on an engine over a temporary store
//! (or the one in `--data`), with each `--agent NAME=…` beside it (so its
//! sub-agents run offline too); then the message is sent, or, without one
//! at a terminal, each line typed is, in one session, until `/exit` or
//! Ctrl-D. The turn's events are printed as they happen. LLM calls stream
//! by default here, so the answer appears token by token even when the
//! agent does not ask for streaming.
//!
//! An interrupt the turn opens is answered here: at a terminal by asking
//! (`approve refund {…}? [y/N]` for an approval, a JSON value otherwise);
//! with `--json` or without a terminal by the `--resume` values in order,
//! then by lines of JSON on stdin; when neither has one left, the command
//! fails naming the interrupt rather than wait for an answer that cannot
//! come. A continued session (`--data`) that waits on interrupts is asked
//! for them before the message is sent.
//!
//! `--config` takes the same file as `subs serve`: its sandbox limits
//! (`[limits.sandbox]`, `[tenants.local.sandbox]`, `[agents.local.agent]`),
//! providers, default model, retry cap and stream limits apply. Compiled
//! components are kept in the user's cache directory (`--cache`), so a
//! second run of the same agent compiles nothing.

use std::collections::VecDeque;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use serde_json::{Value, json};
use subs_engine::events::Event;
use subs_engine::follow::{Follow, FollowError};
use subs_engine::store::SessionStatus;
use subs_engine::worker::Worker;
use subs_engine::worker::component::{ComponentAgent, ComponentHost, HostConfig};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use subs_engine::{Engine, EngineConfig, InputError};
use subs_protocol::client::{ClientMessage, InterruptResume};
use subs_protocol::{ClientInput, DraftMessage, NAME_RULE, WorkerIdentity, valid_name};
use subs_server::LOCAL_TENANT;
use subs_store_redb::RedbStore;

use crate::error::{CliError, CliResult};
use crate::progress::Spinner;
use crate::render::{TurnEnd, TurnView};
use crate::{data, settings};

/// The id the agent is registered under.
pub const AGENT_ID: &str = "agent";

/// What a person types at the chat's prompt to leave it.
pub const EXIT: &str = "/exit";

/// The chat's prompt.
pub(crate) const PROMPT: &str = ">>> ";

/// `subs run <agent.wasm|url> ["message"]`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The agent: a WebAssembly component file (`.wasm`), the URL of an
    /// HTTP worker (`http://…`, `https://…`), or `oci://REF`, a component
    /// in an OCI registry (pulled once into the cache, by digest).
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// The user message to send. Without one, at a terminal, a chat opens:
    /// each line is a message of the same session; `/exit` or Ctrl-D
    /// leaves.
    #[arg(value_name = "MESSAGE")]
    pub message: Option<String>,
    /// Another agent, registered as NAME beside the one run (a `.wasm`
    /// file or an HTTP worker's URL), so that sub-agents it delegates to
    /// run here too. Repeatable.
    #[arg(long = "agent", value_name = "NAME=AGENT")]
    pub agents: Vec<String>,
    /// The payload (JSON) that answers the next interrupt the turn opens,
    /// instead of asking. Repeatable: one per interrupt, in the order they
    /// open. Without a terminal or with `--json`, interrupts beyond these
    /// are answered by lines of JSON on stdin.
    #[arg(long, value_name = "JSON")]
    pub resume: Vec<String>,
    /// Print every event as one JSON object per line
    /// (`{"id":…,"event":…,"data":…}`) and nothing else.
    #[arg(long)]
    pub json: bool,
    /// Keep the session in this data directory (run again with the same
    /// `--session` to continue the conversation). Default: a temporary
    /// directory, deleted afterwards.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// The session id.
    #[arg(long, value_name = "ID", default_value = "run")]
    pub session: String,
    /// The model used when the agent names none. [default: the config
    /// file's, else subs/offline]
    #[arg(long, value_name = "MODEL", env = "SUBS_DEFAULT_MODEL")]
    pub default_model: Option<String>,
    /// Sign requests to an HTTP worker with this secret.
    #[arg(long, value_name = "SECRET", env = "SUBS_WORKER_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// A TOML config file, as `subs serve` takes (docs/configuration.md):
    /// sandbox limits, providers, the default model.
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where compiled components are kept between runs. [default: a
    /// per-user cache directory, e.g. ~/.cache/subs/compiled]
    #[arg(long, value_name = "DIR", env = "SUBS_CACHE")]
    pub cache: Option<PathBuf>,
    /// An MCP server whose tools the agent may name in its config's `mcp`
    /// (docs/mcp.md): `NAME=URL` (Streamable HTTP), or `NAME=stdio:COMMAND
    /// ARGS…` (one argument: a server over standard input and output that
    /// this run starts). Repeatable.
    #[arg(long = "mcp", value_name = "NAME=URL")]
    pub mcp: Vec<String>,
}

/// The longest line read from stdin (a message at the chat's prompt, an
/// interrupt's answer): 1 MiB, far past what anyone types, so a stream
/// piped in without newlines fails instead of filling memory.
const MAX_LINE_BYTES: u64 = 1 << 20;

/// Runs the turn, or the chat; `Ok` when it is done, an error when it
/// failed.
pub async fn exec(args: RunArgs) -> CliResult {
    let file = settings::load(args.config.as_deref())?;
    let answers = Answers::new(&args.resume, args.json)?;
    if args.message.is_none() && !answers.terminal {
        return Err(CliError::usage(anyhow!(
            "no message to send: give one, or run at a terminal without --json for a chat"
        )));
    }
    let specs = agent_specs(&args.agent, &args.agents)?;
    let workers = load_workers(specs, args.secret.as_deref(), None, args.cache.clone(), &file).await?;
    let temp;
    let dir = match &args.data {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().context("creating a temporary data directory")?;
            temp.path().to_path_buf()
        }
    };
    // The stdio servers live as long as the run.
    let (sources, _stdio) = mcp_servers(&args.mcp, &file).await?;
    let local = Local::open_with_sources(
        &file,
        args.default_model.as_deref(),
        &dir,
        "is a `subs serve` using this data directory? Run without --data, or send the message to the server",
        workers,
        sources,
    )
    .await?;
    let mut chat = Chat { engine: local.engine.clone(), session: args.session.clone(), json: args.json, answers };
    let outcome = tokio::select! {
        outcome = session(&mut chat, &args) => outcome,
        _ = tokio::signal::ctrl_c() => Err(interrupted()),
    };
    local.close().await?;
    outcome
}

/// The MCP servers of `--mcp NAME=URL`, registered for the local tenant;
/// `None` without any. The servers named on the command line are the
/// user's own: their hosts may be loopback or private, as if listed in
/// `private_hosts`.
async fn mcp_servers(
    specs: &[String],
    file: &settings::ConfigFile,
) -> CliResult<(Option<Arc<dyn subs_engine::tool_sources::ToolSources>>, Vec<crate::mcp_stdio::StdioServer>)> {
    if specs.is_empty() {
        return Ok((None, Vec::new()));
    }
    let mut servers = Vec::new();
    let mut spawned = Vec::new();
    let max_line = file.mcp_servers.limits(&file.private_hosts)?.max_result_bytes;
    for spec in specs {
        let Some((name, url)) = spec.split_once('=') else {
            return Err(CliError::usage(anyhow!("--mcp takes NAME=URL or NAME=stdio:COMMAND, not {spec:?}")));
        };
        let url = match url.strip_prefix("stdio:") {
            Some(command) => {
                let server = crate::mcp_stdio::start(name, command, max_line).await?;
                let url = server.url.clone();
                spawned.push(server);
                url
            }
            None => url.to_owned(),
        };
        let url = url.as_str();
        let host = reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_owned()))
            .ok_or_else(|| CliError::usage(anyhow!("--mcp {name}: {url:?} is not an http(s) URL")))?;
        servers.push((name.to_owned(), url.to_owned(), host));
    }
    let mut limits = file.mcp_servers.limits(&file.private_hosts)?;
    limits.private_hosts.extend(servers.iter().map(|(_, _, host)| host.clone()));
    let registry = subs_engine::mcp::McpServers::new(limits).map_err(|e| CliError::failed(anyhow!(e)))?;
    for (name, url, _) in &servers {
        registry.put(LOCAL_TENANT, name, url, &[]).await.map_err(|e| CliError::usage(anyhow!("--mcp {name}: {e}")))?;
    }
    Ok((Some(Arc::new(registry)), spawned))
}

/// The error of a command stopped by Ctrl-C (exit code 130, as a shell
/// reports SIGINT).
pub(crate) fn interrupted() -> CliError {
    CliError { code: 130, error: anyhow!("interrupted") }
}

/// An engine in this process on the store of a data directory, with the
/// agents it runs registered (as tenant `local`'s).
pub(crate) struct Local {
    /// The engine.
    pub engine: Engine,
    /// Its store.
    pub store: Arc<RedbStore>,
}

impl Local {
    /// Opens the store in `dir` (`locked_hint` says what to do when
    /// another process holds it) and an engine on it with `file`'s
    /// providers, limits and default model (`default_model` first),
    /// registers `workers` and resumes what the store left unfinished.
    pub async fn open(
        file: &settings::ConfigFile,
        default_model: Option<&str>,
        dir: &Path,
        locked_hint: &str,
        workers: Vec<(String, Arc<dyn Worker>)>,
    ) -> CliResult<Self> {
        Self::open_with_sources(file, default_model, dir, locked_hint, workers, None).await
    }

    /// As [`open`](Self::open), with the agents' tool sources (the MCP
    /// servers of `subs run --mcp`).
    pub async fn open_with_sources(
        file: &settings::ConfigFile,
        default_model: Option<&str>,
        dir: &Path,
        locked_hint: &str,
        workers: Vec<(String, Arc<dyn Worker>)>,
        sources: Option<Arc<dyn subs_engine::tool_sources::ToolSources>>,
    ) -> CliResult<Self> {
        let models = crate::serve::models(&file.providers_config())?;
        let default_model = settings::default_model(default_model, file);
        models.resolve(&default_model).map_err(|e| CliError::usage(anyhow!("the default model: {}", e.message)))?;
        data::prepare(dir)?;
        let store = Arc::new(data::open_store(&dir.join(settings::STORE_FILE), locked_hint)?);
        let mut config = EngineConfig {
            default_model,
            default_stream: true,
            streams: file.streams.limits()?,
            retry_cap: file.retry.cap(),
            ..EngineConfig::default()
        };
        file.timeouts.apply(&mut config)?;
        file.recovery.apply(&mut config)?;
        config.tool_sources = sources;
        let engine = Engine::open(store.clone(), models, config);
        for (name, worker) in workers {
            engine.register_agent(LOCAL_TENANT, &name, worker);
        }
        let local = Self { engine, store };
        if let Err(e) = local.engine.resume().await {
            local.close().await?;
            return Err(CliError::unavailable(e));
        }
        Ok(local)
    }

    /// Stops the engine and closes the store. Whatever happened is
    /// committed; stopping now loses nothing (a session in a kept data
    /// directory resumes on the next run).
    pub async fn close(self) -> CliResult {
        self.engine.kill().await;
        self.store.close().await.context("closing the store")?;
        Ok(())
    }
}

/// The session's work: the interrupts it waits on, then the message or
/// the chat.
async fn session(chat: &mut Chat, args: &RunArgs) -> CliResult {
    chat.open_interrupts().await?;
    match &args.message {
        Some(message) => chat.turn(message).await?.result(),
        None => {
            println!("Chatting with {}: {EXIT} or Ctrl-D leaves.", args.agent);
            loop {
                prompt(PROMPT)?;
                let Some(line) = read_line().await? else {
                    // Ctrl-D leaves the cursor after the prompt.
                    println!();
                    return Ok(());
                };
                match line.trim() {
                    EXIT => return Ok(()),
                    line => chat.say(line).await?,
                }
            }
        }
    }
}

/// One session of the local tenant's agent [`AGENT_ID`], talked to from
/// here: messages sent, their turns' events printed, the interrupts they
/// open answered.
pub(crate) struct Chat {
    /// The engine.
    pub engine: Engine,
    /// The session's id.
    pub session: String,
    /// Whether events are printed as JSON lines.
    pub json: bool,
    /// Where interrupts' answers come from.
    pub answers: Answers,
}

impl Chat {
    /// A line typed in the chat as a message (nothing for a blank one);
    /// a failed turn is reported and the chat goes on, the session
    /// keeping what was said. An error ends the chat.
    pub async fn say(&mut self, line: &str) -> CliResult {
        if line.is_empty() {
            return Ok(());
        }
        match self.turn(line).await? {
            TurnEnd::Done => Ok(()),
            TurnEnd::Failed { code, error } => {
                eprintln!("error: the turn failed ({code}): {error}");
                Ok(())
            }
            // A session waiting for a client tool takes no more messages.
            end => end.result(),
        }
    }

    /// Sends the message and prints the turn's events until it ends,
    /// answering the interrupts it opens.
    pub async fn turn(&mut self, message: &str) -> CliResult<TurnEnd> {
        // Subscribed before the input is sent, so no event of the turn is
        // missed.
        let mut events = Follower::new(self.engine.clone(), &self.session).await.map_err(CliError::failed)?;
        let input = ClientInput::ClientMessage(ClientMessage {
            agent_id: AGENT_ID.to_owned(),
            turn_id: None,
            message: DraftMessage::user(message),
            stream: None,
        });
        let accepted = self
            .engine
            .sessions()
            .input(LOCAL_TENANT, &self.session, input, WorkerIdentity::default())
            .await
            .map_err(refused)?;
        let turn_id = accepted.turn_id.ok_or_else(|| CliError::failed(anyhow!("the message started no turn")))?;
        let mut view = TurnView::new(self.json, Some(turn_id));
        self.follow(&mut events, &mut view).await
    }

    /// A session continued from a kept data directory may wait on
    /// interrupts its last run left open: they are answered, and their
    /// turn followed to its end, before anything is sent (a message sent
    /// now would wait behind them).
    pub async fn open_interrupts(&mut self) -> CliResult {
        let Some(snapshot) =
            self.engine.reads().snapshot(LOCAL_TENANT, &self.session).await.map_err(CliError::failed)?
        else {
            return Ok(());
        };
        let record = snapshot.record;
        let (SessionStatus::Waiting, Some(turn)) = (record.status, record.turn) else { return Ok(()) };
        if record.interrupts.is_empty() {
            return Err(CliError::failed(anyhow!(
                "session `{}` waits for a client tool's result, which this command cannot give: answer through the API",
                self.session
            )));
        }
        let mut events = Follower::new(self.engine.clone(), &self.session).await.map_err(CliError::failed)?;
        let mut view = TurnView::continuing(self.json, turn.turn_id);
        for interrupt in &record.interrupts {
            let data = serde_json::to_value(interrupt).context("reading an open interrupt")?;
            view.show_interrupt(&data)?;
            self.answers.answer(&self.engine, &self.session, &data).await?;
        }
        self.follow(&mut events, &mut view).await?.result()
    }

    /// Prints the turn's events until it ends or waits for a client tool,
    /// answering each interrupt it opens on the way.
    async fn follow(&mut self, events: &mut Follower, view: &mut TurnView) -> CliResult<TurnEnd> {
        loop {
            let event = events.next().await.map_err(CliError::failed)?;
            match view.event(event.seq, &event.name, &event.data)? {
                None => {}
                Some(TurnEnd::Interrupted(data)) => self.answers.answer(&self.engine, &self.session, &data).await?,
                Some(end) => return Ok(end),
            }
        }
    }
}

/// An input the engine refused, as the command's error.
fn refused(e: InputError) -> CliError {
    match e {
        InputError::Invalid { .. } | InputError::Conflict(_) => CliError::usage(anyhow!(e)),
        other => CliError::failed(anyhow!(other)),
    }
}

/// Where the answers to interrupts come from: the `--resume` values in
/// order, then the person at the terminal, or else lines on stdin.
pub(crate) struct Answers {
    /// The `--resume` values not used yet.
    given: VecDeque<Value>,
    /// Whether a person is at the terminal to be asked (stdin and stdout
    /// are terminals and the output is not `--json`).
    pub terminal: bool,
    /// Whether `--resume` was given at all, to word the error.
    any_given: bool,
}

impl Answers {
    /// The answers `resume` gives (each JSON), then the terminal's unless
    /// the output is `json`.
    pub fn new(resume: &[String], json: bool) -> CliResult<Self> {
        let given = resume
            .iter()
            .map(|text| {
                serde_json::from_str(text).map_err(|e| CliError::usage(anyhow!("--resume {text}: not JSON: {e}")))
            })
            .collect::<CliResult<VecDeque<Value>>>()?;
        let terminal = !json && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        Ok(Self { any_given: !given.is_empty(), given, terminal })
    }

    /// Resumes the interrupt whose `interrupt` event (or stored open
    /// interrupt) is `data`. At the terminal, an answer the engine refuses
    /// (a payload that fails the interrupt's schema) is shown and asked
    /// again; elsewhere it fails the command, nothing resumed.
    async fn answer(&mut self, engine: &Engine, session: &str, data: &Value) -> CliResult {
        let id = data.get("interrupt_id").and_then(Value::as_str).unwrap_or_default().to_owned();
        let reason = data.get("reason").and_then(Value::as_str).unwrap_or_default().to_owned();
        loop {
            let payload = match self.given.pop_front() {
                Some(payload) => payload,
                None if self.terminal => ask(&id, data).await?,
                None => self.read_stdin(&id, &reason).await?,
            };
            let input =
                ClientInput::InterruptResume(InterruptResume { interrupt_id: id.clone(), payload: Some(payload) });
            match engine.sessions().input(LOCAL_TENANT, session, input, WorkerIdentity::default()).await {
                Ok(_) => return Ok(()),
                Err(InputError::Invalid { message, .. }) if self.terminal => eprintln!("refused: {message}"),
                Err(e) => {
                    return Err(CliError {
                        error: refused(e).error.context(format!("resuming interrupt `{id}`")),
                        code: 1,
                    });
                }
            }
        }
    }

    /// The next line of stdin as the interrupt's payload.
    async fn read_stdin(&self, id: &str, reason: &str) -> CliResult<Value> {
        let Some(line) = read_line().await? else {
            let more = if self.any_given { " another --resume" } else { " --resume" };
            return Err(CliError::failed(anyhow!(
                "the turn waits for interrupt `{id}` ({reason}): answer it with{more} '<json>' or a line of JSON on stdin"
            )));
        };
        serde_json::from_str(line.trim())
            .map_err(|e| CliError::usage(anyhow!("the answer to interrupt `{id}` on stdin is not JSON: {e}")))
    }
}

/// Asks the person at the terminal for the interrupt's payload: yes or no
/// for an approval (a payload naming `tool`, `call_id` and `arguments`),
/// else a JSON value, asked again until it parses.
async fn ask(id: &str, data: &Value) -> CliResult<Value> {
    let payload = data.get("payload").unwrap_or(&Value::Null);
    let eof = || CliError::failed(anyhow!("interrupt `{id}` was left unanswered"));
    if let Some((tool, arguments)) = approval(payload) {
        prompt(&format!("approve {tool} {arguments}? [y/N] "))?;
        let line = read_line().await?.ok_or_else(eof)?;
        let approved = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
        return Ok(if approved {
            json!({"approved": true})
        } else {
            json!({"approved": false, "reason": "denied at the terminal"})
        });
    }
    if let Some(schema) = data.get("resume_schema").filter(|s| !s.is_null()) {
        println!("its answer must fit the schema {schema}");
    }
    loop {
        prompt(&format!("answer `{id}` (JSON): "))?;
        let line = read_line().await?.ok_or_else(eof)?;
        match serde_json::from_str(line.trim()) {
            Ok(value) => return Ok(value),
            Err(e) => eprintln!("not JSON: {e}"),
        }
    }
}

/// The tool and arguments an approval's payload names, the arguments as
/// the model wrote them.
fn approval(payload: &Value) -> Option<(&str, String)> {
    let tool = payload.get("tool")?.as_str()?;
    payload.get("call_id")?.as_str()?;
    let arguments = match payload.get("arguments")? {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    Some((tool, arguments))
}

/// Writes `text` with no newline and flushes it, so the answer is typed
/// after it.
pub(crate) fn prompt(text: &str) -> CliResult {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(|e| CliError::failed(anyhow!(e)))
}

/// A line of stdin, `None` at its end, or why it could not be read.
type Line = Result<Option<String>, String>;

/// The next line of stdin without its newline; `None` at its end.
///
/// Lines are read by one thread of their own and handed over one at a
/// time, so a caller that stops waiting (`subs dev` rebuilding while the
/// prompt waits) loses no line: the next call gets it. A read on stdin
/// cannot be cancelled, so it cannot be one of the futures a `select!`
/// drops.
pub(crate) async fn read_line() -> CliResult<Option<String>> {
    static LINES: std::sync::OnceLock<tokio::sync::Mutex<tokio::sync::mpsc::Receiver<Line>>> =
        std::sync::OnceLock::new();
    let lines = LINES.get_or_init(|| {
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        // Without the thread the sender is dropped, and reading fails below.
        let _ = std::thread::Builder::new()
            .name("stdin".to_owned())
            .spawn(move || while sender.blocking_send(read_stdin_line()).is_ok() {});
        tokio::sync::Mutex::new(receiver)
    });
    match lines.lock().await.recv().await {
        Some(line) => line.map_err(|e| CliError::failed(anyhow!("reading stdin: {e}"))),
        None => Err(CliError::failed(anyhow!("reading stdin: its reader stopped"))),
    }
}

/// Reads the next line of stdin, blocking.
fn read_stdin_line() -> Line {
    use std::io::{BufRead as _, Read as _};
    let mut line = String::new();
    let read = std::io::stdin().lock().take(MAX_LINE_BYTES).read_line(&mut line).map_err(|e| e.to_string())?;
    if read as u64 == MAX_LINE_BYTES && !line.ends_with('\n') {
        return Err(format!("a line of stdin is longer than {MAX_LINE_BYTES} bytes"));
    }
    Ok((read > 0).then(|| line.trim_end_matches(['\n', '\r']).to_owned()))
}

/// The agents to register: `agent`, as [`AGENT_ID`], then each of
/// `others` (`NAME=AGENT`, as `--agent` takes them).
pub(crate) fn agent_specs(agent: &str, others: &[String]) -> CliResult<Vec<(String, String)>> {
    let mut specs = vec![(AGENT_ID.to_owned(), agent.to_owned())];
    for spec in others {
        let bad = |why: String| CliError::usage(anyhow!("--agent {spec}: {why}"));
        let (name, source) = spec
            .split_once('=')
            .filter(|(name, source)| !name.is_empty() && !source.is_empty())
            .ok_or_else(|| bad("expected NAME=AGENT (a .wasm file or an HTTP worker's URL)".to_owned()))?;
        if !valid_name(name) {
            return Err(bad(format!("`{name}` is not an agent name ({NAME_RULE})")));
        }
        if specs.iter().any(|(taken, _)| taken == name) {
            return Err(bad(format!("the name `{name}` is taken (`{AGENT_ID}` is the agent run)")));
        }
        specs.push((name.to_owned(), source.to_owned()));
    }
    Ok(specs)
}

/// The agents' workers, `(name, source)` each: an HTTP worker for a URL
/// (signed with `secret`), else a component compiled by `host` (or a host
/// made for them, keeping compiled code in `cache`).
pub(crate) async fn load_workers(
    specs: Vec<(String, String)>,
    secret: Option<&str>,
    host: Option<&ComponentHost>,
    cache: Option<PathBuf>,
    file: &settings::ConfigFile,
) -> CliResult<Vec<(String, Arc<dyn Worker>)>> {
    let mut workers: Vec<(String, Arc<dyn Worker>)> = Vec::new();
    let mut components = Vec::new();
    for (name, source) in specs {
        if source.starts_with("http://") || source.starts_with("https://") {
            let mut options = HttpWorkerOptions::new();
            if let Some(secret) = secret {
                options = options.secret(secret);
            }
            let worker = HttpWorker::new(&source, options).map_err(|e| CliError::usage(anyhow!("{source}: {e}")))?;
            workers.push((name, Arc::new(worker)));
            continue;
        }
        let bytes = if let Some(reference) = source.strip_prefix(crate::oci::SCHEME) {
            crate::oci::cached_pull(reference, cache.clone(), file).await?
        } else {
            tokio::fs::read(&source).await.map_err(|e| CliError::usage(anyhow!("reading {source}: {e}")))?
        };
        components.push((name, source, bytes));
    }
    if components.is_empty() {
        return Ok(workers);
    }
    let host = match host {
        Some(host) => host.clone(),
        None => component_host(file, cache).await?,
    };
    for (name, agent) in load_components(&host, file, components).await? {
        workers.push((name, Arc::new(agent)));
    }
    Ok(workers)
}

/// The host that compiles and runs this process's components, with
/// `file`'s sandbox limits, keeping compiled code in `cache` (default:
/// the user's cache directory).
pub(crate) async fn component_host(file: &settings::ConfigFile, cache: Option<PathBuf>) -> CliResult<ComponentHost> {
    let cache = cache.or_else(|| settings::default_cache_dir().map(|d| d.join("compiled")));
    // A run may exit before a background optimizing compile would end:
    // each agent is compiled optimized at once, and cached for the next run.
    let config = HostConfig { compile_cache: cache, baseline_first: false, ..file.host_config()? };
    tokio::task::spawn_blocking(move || ComponentHost::with_config(config).map_err(|e| CliError::failed(anyhow!(e))))
        .await
        .map_err(|e| CliError::failed(anyhow!("starting the component host panicked: {e}")))?
}

/// Compiles and checks components, `(name, source, bytes)` each, as agents
/// of the local tenant under `file`'s policies for them; a spinner shows
/// meanwhile.
pub(crate) async fn load_components(
    host: &ComponentHost,
    file: &settings::ConfigFile,
    components: Vec<(String, String, Vec<u8>)>,
) -> CliResult<Vec<(String, ComponentAgent)>> {
    let mut policies = file.agent_policies();
    let sources: Vec<&str> = components.iter().map(|(_, source, _)| source.as_str()).collect();
    let _spinner = Spinner::start(format!("loading {}", sources.join(", ")));
    let components: Vec<_> = components
        .into_iter()
        .map(|(name, source, bytes)| {
            let policy = policies.remove(&(LOCAL_TENANT.to_owned(), name.clone())).unwrap_or_default();
            (name, source, policy, bytes)
        })
        .collect();
    let host = host.clone();
    tokio::task::spawn_blocking(move || {
        let mut loaded = Vec::new();
        for (name, source, policy, bytes) in components {
            let agent = host
                .load_as(LOCAL_TENANT, &name, &policy, &bytes)
                .map_err(|e| CliError::usage(anyhow!("{e}").context(format!("{source} is not a usable agent"))))?;
            loaded.push((name, agent));
        }
        Ok::<_, CliError>(loaded)
    })
    .await
    .map_err(|e| CliError::failed(anyhow!("compiling panicked: {e}")))?
}

/// A session's events in order, live; a reader that fell behind and was
/// dropped by the engine subscribes again and goes on from the store.
struct Follower {
    follow: Follow,
}

impl Follower {
    /// Follows `session` from what is stored next.
    async fn new(engine: Engine, session: &str) -> anyhow::Result<Self> {
        let after = engine.reads().last_event(LOCAL_TENANT, session).await?;
        Ok(Self { follow: engine.reads().follow(LOCAL_TENANT, session, after)? })
    }

    async fn next(&mut self) -> anyhow::Result<Event> {
        loop {
            match self.follow.next().await {
                Ok(frame) => return Ok(frame.event()),
                Err(FollowError::Dropped { .. }) => self.follow.resubscribe()?,
                Err(e) => return Err(e.into()),
            }
        }
    }
}
