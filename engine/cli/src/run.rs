//! `subs run`: one turn of an agent, in this process, no server.
//!
//! The agent (a component file or an HTTP worker's URL) is registered as
//! agent `agent` of the local tenant on an engine over a temporary store
//! (or the one in `--data`), the message is sent, and the turn's events
//! are printed as they happen. LLM calls stream by default here, so the
//! answer appears token by token even when the agent does not ask for
//! streaming.
//!
//! `--config` takes the same file as `subs serve`: its sandbox limits
//! (`[limits.sandbox]`, `[tenants.local.sandbox]`, `[agents.local.agent]`),
//! providers, default model, retry cap and stream limits apply. Compiled
//! components are kept in the user's cache directory (`--cache`), so a
//! second run of the same agent compiles nothing.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use subs_engine::events::Event;
use subs_engine::follow::{Follow, FollowError};
use subs_engine::worker::Worker;
use subs_engine::worker::component::{ComponentHost, HostConfig};
use subs_engine::worker::http::{HttpWorker, HttpWorkerOptions};
use subs_engine::{Engine, EngineConfig, InputError};
use subs_protocol::client::ClientMessage;
use subs_protocol::{ClientInput, DraftMessage, WorkerIdentity};
use subs_server::LOCAL_TENANT;

use crate::error::{CliError, CliResult};
use crate::progress::Spinner;
use crate::render::TurnView;
use crate::{data, settings};

/// The id the agent is registered under.
pub const AGENT_ID: &str = "agent";

/// `subs run <agent.wasm|url> "message"`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The agent: a WebAssembly component file (`.wasm`), or the URL of an
    /// HTTP worker (`http://…`, `https://…`).
    #[arg(value_name = "AGENT")]
    pub agent: String,
    /// The user message to send.
    #[arg(value_name = "MESSAGE")]
    pub message: String,
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
}

/// Runs the turn; `Ok` when it is done, an error when it failed.
pub async fn exec(args: RunArgs) -> CliResult {
    let file = settings::load(args.config.as_deref())?;
    let worker = load_worker(&args, &file).await?;
    let models = crate::serve::models(&file.providers_config())?;
    let default_model = settings::default_model(args.default_model.as_deref(), &file);
    models.resolve(&default_model).map_err(|e| CliError::usage(anyhow!("the default model: {}", e.message)))?;

    let temp;
    let dir = match &args.data {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().context("creating a temporary data directory")?;
            temp.path().to_path_buf()
        }
    };
    data::prepare(&dir)?;
    let store = Arc::new(data::open_store(
        &dir.join(settings::STORE_FILE),
        "is a `subs serve` using this data directory? Run without --data, or send the message to the server",
    )?);
    let mut config = EngineConfig {
        default_model,
        default_stream: true,
        streams: file.streams.limits()?,
        retry_cap: file.retry.cap(),
        ..EngineConfig::default()
    };
    file.timeouts.apply(&mut config)?;
    file.recovery.apply(&mut config)?;
    let engine = Engine::open(store.clone(), models, config);
    engine.register_agent(LOCAL_TENANT, AGENT_ID, worker);
    engine.resume().await.map_err(CliError::unavailable)?;

    let outcome = tokio::select! {
        outcome = turn(&engine, &args) => outcome,
        _ = tokio::signal::ctrl_c() => Err(CliError { code: 130, error: anyhow!("interrupted") }),
    };
    // Whatever happened is committed; stopping now loses nothing (a
    // session in --data resumes on the next run).
    engine.kill().await;
    store.close().await.context("closing the store")?;
    outcome
}

/// The agent's worker: an HTTP worker for a URL, else a compiled component
/// (from the cache when it was compiled before).
async fn load_worker(args: &RunArgs, file: &settings::ConfigFile) -> CliResult<Arc<dyn Worker>> {
    let agent = args.agent.as_str();
    if agent.starts_with("http://") || agent.starts_with("https://") {
        let mut options = HttpWorkerOptions::new();
        if let Some(secret) = &args.secret {
            options = options.secret(secret);
        }
        let worker = HttpWorker::new(agent, options).map_err(|e| CliError::usage(anyhow!("{agent}: {e}")))?;
        return Ok(Arc::new(worker));
    }
    let bytes = tokio::fs::read(agent).await.map_err(|e| CliError::usage(anyhow!("reading {agent}: {e}")))?;
    let cache = args.cache.clone().or_else(|| settings::default_cache_dir().map(|d| d.join("compiled")));
    // A run may exit before a background optimizing compile would end:
    // the agent is compiled optimized at once, and cached for the next run.
    let config = HostConfig { compile_cache: cache, baseline_first: false, ..file.host_config()? };
    let policy = file.agent_policies().remove(&(LOCAL_TENANT.to_owned(), AGENT_ID.to_owned())).unwrap_or_default();
    let _spinner = Spinner::start(format!("loading {agent}"));
    let compiled = tokio::task::spawn_blocking(move || {
        let host = ComponentHost::with_config(config).map_err(|e| CliError::failed(anyhow!(e)))?;
        host.load_as(LOCAL_TENANT, AGENT_ID, &policy, &bytes).map_err(|e| CliError::usage(anyhow!("{e}")))
    })
    .await
    .map_err(|e| CliError::failed(anyhow!("compiling panicked: {e}")))?
    .map_err(|e| CliError { error: e.error.context(format!("{agent} is not a usable agent")), ..e })?;
    Ok(Arc::new(compiled))
}

/// Sends the message and prints the turn's events until it ends.
async fn turn(engine: &Engine, args: &RunArgs) -> CliResult {
    // Subscribed before the input is sent, so no event of the turn is
    // missed.
    let mut events = Follower::new(engine.clone(), &args.session).await.map_err(CliError::failed)?;
    let input = ClientInput::ClientMessage(ClientMessage {
        agent_id: AGENT_ID.to_owned(),
        turn_id: None,
        message: DraftMessage::user(args.message.as_str()),
        stream: None,
    });
    let accepted =
        engine.input(LOCAL_TENANT, &args.session, input, WorkerIdentity::default()).await.map_err(|e| match e {
            InputError::Invalid { .. } | InputError::Conflict(_) => CliError::usage(anyhow!(e)),
            other => CliError::failed(anyhow!(other)),
        })?;
    let turn_id = accepted.turn_id.ok_or_else(|| CliError::failed(anyhow!("the message started no turn")))?;

    let mut view = TurnView::new(args.json, Some(turn_id));
    loop {
        let event = events.next().await.map_err(CliError::failed)?;
        if let Some(end) = view.event(event.seq, &event.name, &event.data)? {
            return end.result();
        }
    }
}

/// A session's events in order, live; a reader that fell behind and was
/// dropped by the engine subscribes again and goes on from the store.
struct Follower {
    follow: Follow,
}

impl Follower {
    /// Follows `session` from what is stored next.
    async fn new(engine: Engine, session: &str) -> anyhow::Result<Self> {
        let after = engine.last_event(LOCAL_TENANT, session).await?;
        Ok(Self { follow: engine.follow(LOCAL_TENANT, session, after)? })
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
