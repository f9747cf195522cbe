//! OCI registries from the command line: `subs push FILE.wasm REF`,
//! `subs agents push ID[@VERSION] REF`, and the pulls behind
//! `subs run oci://REF` (kept in the user's cache by digest, so a second
//! run needs no registry).
//!
//! Credentials come from the config file's `[oci.credentials."HOST"]`
//! when it has them, else from the docker config file
//! (`$DOCKER_CONFIG/config.json` or `~/.docker/config.json`, credential
//! helpers included), as docker, oras and wkg read it. Plain HTTP is used
//! for a registry given `--plain-http`, or listed in the config file's
//! `[oci] insecure`.

use std::path::PathBuf;

use anyhow::anyhow;
use reqwest::Method;
use serde_json::{Value, json};
use subs_oci::{Credentials, Options, Reference, Registry};

use crate::client::{Client, ClientArgs, checked_name};
use crate::error::{CliError, CliResult};
use crate::progress::Spinner;
use crate::settings::{self, ConfigFile};

/// The prefix that makes an agent argument an OCI reference.
pub const SCHEME: &str = "oci://";

/// `subs push FILE.wasm REF`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The component (or module) file.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Where to push it: `REGISTRY/REPOSITORY:TAG` (`oci://` optional).
    #[arg(value_name = "REF")]
    pub reference: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub registry: RegistryArgs,
}

/// How a registry is reached from the command line.
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// Reach the registry over plain HTTP (a registry on loopback, say).
    #[arg(long)]
    pub plain_http: bool,
    /// A config file (docs/configuration.md) whose `[oci] insecure` and
    /// `[oci.credentials."HOST"]` apply.
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the result as one JSON object (`reference`, `digest`,
    /// `layer`, `bytes`).
    #[arg(long)]
    pub json: bool,
}

/// Parses `text` as a reference, with or without `oci://`.
///
/// # Errors
/// A usage error naming what is wrong with it.
pub fn reference(text: &str) -> CliResult<Reference> {
    Reference::parse(text.strip_prefix(SCHEME).unwrap_or(text)).map_err(|e| CliError::usage(anyhow!("{e}")))
}

/// How to reach `reference`'s registry: plain HTTP when asked for or
/// listed in `file`'s `[oci] insecure`, the file's credentials for it or
/// else the docker config file's, layers up to the file's
/// `max_component_bytes`, within its `pull_timeout_secs`.
pub fn options(reference: &Reference, plain_http: bool, file: &ConfigFile) -> CliResult<Options> {
    let oci = &file.oci;
    let listed = |list: &[String]| list.iter().any(|r| r.eq_ignore_ascii_case(&reference.registry));
    let credentials = match oci.credentials.get(&reference.registry) {
        Some(entry) => match (&entry.username, &entry.password, &entry.token) {
            (Some(username), Some(password), None) => {
                Some(Credentials::Basic { username: username.clone(), password: password.clone() })
            }
            (None, None, Some(token)) => Some(Credentials::Token(token.clone())),
            _ => {
                return Err(CliError::usage(anyhow!(
                    "`[oci.credentials.\"{}\"]` takes `username` and `password`, or `token`",
                    reference.registry
                )));
            }
        },
        None => subs_oci::auth::docker_credentials(&reference.registry),
    };
    let deadline = match oci.pull_timeout_secs {
        Some(secs) if secs > 0.0 && secs <= 3_600.0 => std::time::Duration::from_secs_f64(secs),
        Some(secs) => return Err(CliError::usage(anyhow!("`[oci] pull_timeout_secs` is out of range: {secs}"))),
        None => subs_oci::DEFAULT_DEADLINE,
    };
    let max_bytes = file.limits.over(&subs_server::Limits::default()).max_component_bytes as u64;
    Ok(Options { plain_http: plain_http || listed(&oci.insecure), credentials, max_bytes, deadline })
}

/// Runs `subs push`.
pub async fn push(args: PushArgs) -> CliResult {
    let reference = reference(&args.reference)?;
    let wasm =
        std::fs::read(&args.file).map_err(|e| CliError::usage(anyhow!("reading {}: {e}", args.file.display())))?;
    let file = settings::load(args.registry.config.as_deref())?;
    push_bytes(&reference, &wasm, &args.registry, &file, &args.file.display().to_string()).await
}

/// Pushes `wasm` (`what`, for messages) to `reference` and says so.
async fn push_bytes(
    reference: &Reference,
    wasm: &[u8],
    registry_args: &RegistryArgs,
    file: &ConfigFile,
    what: &str,
) -> CliResult {
    // A push is not held to the server's upload limit (the registry
    // judges what it takes), and sends a whole component, not just reads
    // a manifest: it gets at least 10 minutes.
    let options = options(reference, registry_args.plain_http, file)?;
    let deadline = options.deadline.max(std::time::Duration::from_secs(600));
    let options = Options { max_bytes: u64::MAX, deadline, ..options };
    let registry = Registry::new(&reference.registry, options).map_err(|e| CliError::failed(anyhow!("{e}")))?;
    let spinner = Spinner::start(format!("pushing {what} to {reference}"));
    let pushed = registry.push(reference, wasm).await.map_err(|e| CliError::failed(anyhow!("{e}")));
    drop(spinner);
    let pushed = pushed?;
    if registry_args.json {
        let answer = json!({
            "reference": reference.to_string(),
            "digest": pushed.manifest_digest,
            "layer": pushed.layer_digest,
            "bytes": wasm.len(),
        });
        println!("{answer}");
    } else {
        println!("pushed {what} to {reference}");
        println!("pinned: {}", reference.pinned(&pushed.manifest_digest));
    }
    Ok(())
}

/// `subs agents push ID[@VERSION] REF`.
#[derive(Debug, clap::Args)]
pub struct AgentPushArgs {
    /// The agent, and the stored version to push (`ID@sha256:…`); the
    /// active version without one.
    #[arg(value_name = "ID[@VERSION]")]
    pub agent: String,
    /// Where to push it: `REGISTRY/REPOSITORY:TAG` (`oci://` optional).
    #[arg(value_name = "REF")]
    pub reference: String,
    /// Reach the registry over plain HTTP (a registry on loopback, say).
    #[arg(long)]
    pub plain_http: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Runs `subs agents push`: the version's bytes from the server, then to
/// the registry from here (the server never pushes).
pub async fn agents_push(args: AgentPushArgs) -> CliResult {
    let reference = reference(&args.reference)?;
    let (id, version) = match args.agent.split_once('@') {
        Some((id, version)) => (id, Some(version.to_owned())),
        None => (args.agent.as_str(), None),
    };
    let client = Client::new(&args.client)?;
    let id = checked_name("agent id", id)?;
    let version = match version {
        Some(version) => version,
        None => {
            let agent = client.json(client.request(Method::GET, &format!("/v1/agents/{id}"))).await?;
            agent.get("version").and_then(Value::as_str).unwrap_or_default().to_owned()
        }
    };
    let response = client.send(client.request(Method::GET, &format!("/v1/agents/{id}/versions/{version}"))).await?;
    let wasm = response.bytes().await.map_err(|e| client.transport(&e))?;
    let file = settings::load(None)?;
    let registry_args = RegistryArgs { plain_http: args.plain_http, config: None, json: args.client.json };
    push_bytes(&reference, &wasm, &registry_args, &file, &format!("agent {id} version {version}")).await
}

/// The bytes of the artifact `reference` (`oci://` stripped) names, from
/// the cache under `cache` when it was pulled before, else pulled (and
/// kept there). A tag is resolved once: later runs use what it resolved
/// to then; a pinned reference never asks the registry again.
pub async fn cached_pull(text: &str, cache: Option<PathBuf>, file: &ConfigFile) -> CliResult<Vec<u8>> {
    let reference = reference(text)?;
    let dir = cache
        .map(|c| c.join("oci"))
        .or_else(|| settings::default_cache_dir().map(|d| d.join("oci")))
        .ok_or_else(|| CliError::usage(anyhow!("no cache directory for pulled agents: give --cache DIR")))?;
    let cache = subs_oci::cache::Cache::new(dir);
    if let Some((wasm, digest)) = cache.get(&reference) {
        tracing::debug!(%reference, %digest, "the agent from the cache");
        return Ok(wasm);
    }
    let options = options(&reference, false, file)?;
    let registry = Registry::new(&reference.registry, options).map_err(|e| CliError::failed(anyhow!("{e}")))?;
    let spinner = Spinner::start(format!("pulling {reference}"));
    let pulled = registry.pull(&reference).await.map_err(|e| CliError::failed(anyhow!("{e}")));
    drop(spinner);
    let pulled = pulled?;
    if let Err(error) = cache.put(&reference, &pulled) {
        // The run goes on; the next one pulls again.
        tracing::warn!(%reference, %error, "the pulled agent could not be cached");
    }
    Ok(pulled.wasm)
}
