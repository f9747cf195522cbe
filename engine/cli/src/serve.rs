//! `subs serve`: the engine with its HTTP API.
//!
//! Order matters for the errors people see: the settings are checked
//! first (a bad config file, a bad address, a default model nobody
//! serves, a store URL that is not PostgreSQL's), then the data directory
//! and the store (unwritable, locked, a database unreachable), then the
//! address is bound (taken) — all before the engine resumes a single
//! session. Then the stored agents are loaded, the address is
//! printed, and requests are served until Ctrl-C or SIGTERM; the store
//! is closed on the way out.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use subs_engine::agents::AgentRegistry;
use subs_engine::model::{Models, ProvidersConfig, models_from_env};
use subs_engine::store::{KeyRecord, Store};
use subs_engine::worker::component::{Compiler, ComponentHost, HostConfig};
use subs_engine::{Engine, EngineConfig, StreamLimits};
use subs_server::{AppState, Keys, LiveConfig};

use crate::data::{self, ServedStore};
use crate::error::{CliError, CliResult};
use crate::settings::{self, ConfigFile};

/// How long in-flight requests may take to finish after a shutdown signal
/// before the server stops regardless. Open event streams never finish by
/// themselves, so this bounds how long Ctrl-C takes while someone tails.
const GRACE: Duration = Duration::from_secs(2);

/// `subs serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The address to listen on (`127.0.0.1:0` picks a free port). A
    /// non-loopback address needs API keys or an operator key. [default:
    /// 127.0.0.1:7878]
    #[arg(long, value_name = "ADDR", env = "SUBS_LISTEN")]
    pub listen: Option<String>,
    /// The data directory: the store (`subs.redb`, unless --store names
    /// another) and uploaded components (`components/`, this node's own
    /// even when the store is shared). [default: a per-user data
    /// directory, e.g. ~/.local/share/subs]
    #[arg(long, value_name = "DIR", env = "SUBS_DATA")]
    pub data: Option<PathBuf>,
    /// Keep sessions in this PostgreSQL database
    /// (postgres://user:password@host:port/database), which several
    /// servers may share, instead of redb in the data directory. Prefer
    /// the environment variable or the config file's `[store] url` when
    /// the URL holds a password: a flag shows in the process list.
    #[arg(long, value_name = "URL", env = "SUBS_STORE", hide_env_values = true)]
    pub store: Option<String>,
    /// The model for agents that name none. [default: subs/offline]
    #[arg(long, value_name = "MODEL", env = "SUBS_DEFAULT_MODEL")]
    pub default_model: Option<String>,
    /// A TOML config file (see docs/configuration.md); flags and
    /// environment variables override it.
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// An operator key, which enables the admin API (`/v1/admin`; `subs
    /// tenants`, `subs keys`); at least 16 characters. Prefer the
    /// environment variable: a flag shows in the process list. The config
    /// file's `[admin]` key works too.
    #[arg(long, value_name = "KEY", env = "SUBS_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
}

/// Serves until a shutdown signal.
pub async fn exec(args: ServeArgs) -> CliResult {
    let file = settings::load(args.config.as_deref())?;
    let listen = settings::listen(args.listen.as_deref(), &file);
    let dir = settings::data_dir(args.data.as_deref(), &file)?;
    let choice = settings::store(args.store.as_deref(), &file)?;
    let default_model = settings::default_model(args.default_model.as_deref(), &file);
    let addr = resolve(&listen).await?;
    let models = models(&file.providers_config())?;
    models.resolve(&default_model).map_err(|e| CliError::usage(anyhow!("the default model: {}", e.message)))?;
    let config_keys = file.key_records()?;
    let streams = file.streams.limits()?;
    let server_config = file.server_config()?;
    let admin_keys = file.admin_key_hashes(args.admin_key.as_deref())?;

    data::prepare(&dir)?;
    let store = ServedStore::open(
        &choice,
        &dir,
        "is another `subs serve` running on this data directory? Stop it, or pass another --data",
    )
    .await?;
    if let ServedStore::Postgres(store) = &store {
        let node = store.shared().map(|shared| shared.node().to_owned()).unwrap_or_default();
        eprintln!("sessions are kept in PostgreSQL at {} (this node: {node})", store.url());
    }
    let served = serve(Setup {
        store: store.store(),
        dir,
        addr,
        models,
        default_model,
        streams,
        config_keys,
        admin_keys,
        server_config,
        file,
    })
    .await;
    let closed = store.close().await.context("closing the store");
    served?;
    closed?;
    Ok(())
}

/// What `serve` needs, checked.
struct Setup {
    store: Arc<dyn Store>,
    dir: PathBuf,
    addr: SocketAddr,
    models: Models,
    default_model: String,
    streams: StreamLimits,
    config_keys: Vec<KeyRecord>,
    /// SHA-256 of the operator keys.
    admin_keys: Vec<String>,
    /// Limits, CORS and the HTTP edge's bounds.
    server_config: subs_server::ServerConfig,
    file: ConfigFile,
}

async fn serve(setup: Setup) -> CliResult {
    let Setup { store, dir, addr, models, default_model, streams, config_keys, admin_keys, server_config, file } =
        setup;
    let stored_keys = store.keys().await.map_err(CliError::unavailable)?;
    if stored_keys.iter().chain(&config_keys).any(|key| admin_keys.contains(&key.hash)) {
        return Err(CliError::usage(anyhow!(
            "the operator key is also a tenant's key: give the admin API a key of its own (`subs admin-key` makes one)"
        )));
    }
    // Where the file names a stored key, the file's tenant wins.
    let keys = Keys::new(stored_keys).with_config_keys(config_keys).with_admin_keys(admin_keys);
    if keys.is_open() && !addr.ip().is_loopback() {
        return Err(CliError::usage(anyhow!(
            "refusing to listen on {addr} without API keys: anyone who can reach it could use the server. \
             Listen on a loopback address (127.0.0.1, ::1), or add keys ([[keys]] in the config file, \
             `subs keys create`, or an operator key to create them with: `[admin]`, SUBS_ADMIN_KEY)"
        )));
    }
    // A large backlog: a burst of connections waits for the accept loop
    // (which answers or refuses each at once) rather than being retried.
    let listener = subs_server::edge::bind(addr).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::AddrInUse {
            "the address is already in use (is another server running on that port?)".to_owned()
        } else {
            e.to_string()
        };
        CliError::unavailable(anyhow!("cannot listen on {addr}: {why}"))
    })?;
    let local = listener.local_addr()?;

    // Uploads are compiled by a child process of this binary, which the
    // server can stop when a compile runs past its budget.
    let program = std::env::current_exe().context("finding this program, which compiles uploads")?;
    let compiler = Compiler::Child { program, args: vec![crate::COMPILE_CHILD.to_owned()] };
    let host = ComponentHost::with_config(HostConfig { compiler, ..file.host_config()? })
        .map_err(|e| CliError::failed(anyhow!(e)))?;
    let mut config = EngineConfig { default_model, streams, retry_cap: file.retry.cap(), ..EngineConfig::default() };
    file.timeouts.apply(&mut config)?;
    file.recovery.apply(&mut config)?;
    let exporting = crate::telemetry::exporting(&file.telemetry)?;
    config.spans = exporting.as_ref().map(crate::telemetry::Exporting::spans);
    config.telemetry = file.telemetry.limits()?;
    // Tenants' MCP servers, the tool sources of their agents.
    let mcp = Arc::new(
        subs_engine::mcp::McpServers::new(file.mcp_servers.limits(&file.private_hosts)?)
            .map_err(|e| CliError::failed(anyhow!(e)))?
            .with_store(store.clone()),
    );
    mcp.sync().await.map_err(CliError::unavailable)?;
    config.tool_sources = Some(mcp.clone());
    // Agents and limits are in place before any session resumes: a
    // resumed session's first delivery must find its agent, its first LLM
    // call its budget, its first spawn its session limit. (The router sets
    // the limits again; that is harmless.)
    let engine = Engine::open(store, models, config);
    // Nodes sharing a store sign tokens alike, so any node takes a token
    // another minted.
    let keys = match engine.admin().shared_secret("tokens").await.map_err(CliError::unavailable)? {
        Some(secret) => keys.with_token_secret(secret),
        None => keys,
    };
    let agents = AgentRegistry::new(engine.clone(), host, dir)
        .with_policies(file.agent_policies())
        .with_upload_policy(&file.upload_policy());
    // The config file's limits, with those the operator stored over them;
    // the sandbox's before any agent is loaded.
    let config = LiveConfig::load(server_config, &engine).await.map_err(CliError::unavailable)?;
    config.apply_sandboxes(&agents).map_err(|e| CliError::unavailable(anyhow!("a stored tenant sandbox: {e}")))?;
    for (tenant, agent, error) in agents.load_all().await.map_err(CliError::unavailable)? {
        eprintln!("warning: agent `{agent}` of tenant `{tenant}` was not loaded: {error}");
    }
    config.apply_to(&engine);
    engine.resume().await.map_err(CliError::unavailable)?;
    let (open, admin) = (keys.is_open(), keys.admin_enabled());
    // The server gets the engine and the registry, not the store: all it
    // keeps goes through them.
    let state = Arc::new(AppState {
        engine: engine.clone(),
        agents,
        keys,
        config,
        metrics: Default::default(),
        scans: Default::default(),
    });
    // What other nodes sharing the store change (agents, keys, tenants)
    // is served here too once reloaded.
    let reloading = {
        let (state, mut changed) = (state.clone(), engine.records_changed());
        let mcp = mcp.clone();
        tokio::spawn(async move {
            while changed.changed().await.is_ok() {
                if let Err(error) = mcp.sync().await {
                    tracing::warn!(%error, "the MCP servers other nodes changed could not be reloaded");
                }
                if let Err(error) = state.reload_records().await {
                    tracing::warn!(%error, "the agents, keys and tenants other nodes changed could not be reloaded");
                }
            }
        })
    };

    println!("subs listening on http://{local}");
    if let Some(exporting) = &exporting {
        eprintln!("OpenTelemetry spans go to {}", exporting.endpoint);
    }
    if open {
        eprintln!("no API keys are configured: serving the single tenant `local` without authentication");
    }
    if admin {
        eprintln!("the admin API is on (/v1/admin): `subs tenants` and `subs keys` manage tenants and keys");
    }

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(subs_server::serve_with_mcp(listener, state, mcp, async move {
        let _ = stopped.await;
    }));
    let result = tokio::select! {
        result = &mut server => Some(result),
        () = shutdown_signal() => None,
    };
    let result = match result {
        Some(result) => result,
        None => {
            eprintln!("shutting down");
            let _ = stop.send(());
            match tokio::time::timeout(GRACE, &mut server).await {
                Ok(result) => result,
                Err(_) => {
                    // Streams still open: they end with the process.
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    // Committed work is safe; what runs now resumes at the next start.
    reloading.abort();
    engine.kill().await;
    if let Some(exporting) = exporting {
        // Flushing waits on the exporter's thread, which sends on this
        // runtime: it must not hold one of the runtime's threads.
        let _ = tokio::task::spawn_blocking(move || exporting.shutdown()).await;
    }
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(CliError::failed(anyhow!("the server failed: {e}"))),
        Err(e) => Err(CliError::failed(anyhow!("the server panicked: {e}"))),
    }
}

/// Resolves `host:port` (`127.0.0.1:7878`, `[::1]:7878`, `localhost:7878`).
async fn resolve(listen: &str) -> CliResult<SocketAddr> {
    if let Ok(addr) = listen.parse() {
        return Ok(addr);
    }
    let bad = |why: String| CliError::usage(anyhow!("the listen address `{listen}` is not usable: {why}"));
    let mut addrs = tokio::net::lookup_host(listen).await.map_err(|e| bad(e.to_string()))?;
    addrs.next().ok_or_else(|| bad("it resolves to no address".to_owned()))
}

/// The LLM providers: the offline model, the built-in providers (their
/// base URLs and keys from the environment) and those of the config file.
pub fn models(config: &ProvidersConfig) -> CliResult<Models> {
    models_from_env(config).map_err(|e| CliError::usage(anyhow!("the providers: {e}")))
}

/// Resolves on Ctrl-C or (on Unix) SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
