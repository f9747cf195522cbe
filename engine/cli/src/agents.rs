//! `subs agents …`: upload, list, show, activate and remove the agents of
//! a running server (`PUT`/`GET`/`DELETE /v1/agents`,
//! `PUT /v1/agents/{id}/current`).

use std::path::PathBuf;

use anyhow::anyhow;
use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};

use crate::client::{Client, ClientArgs, checked_name};
use crate::error::{CliError, CliResult};
use crate::progress::Spinner;

/// `subs agents …`.
#[derive(Debug, clap::Subcommand)]
pub enum AgentsCommand {
    /// Upload a component (`subs agents put ID FILE.wasm`), have the
    /// server pull one from an OCI registry (`subs agents put ID
    /// oci://REF`), or register an HTTP worker (`subs agents put ID --url
    /// URL`) as the agent's new version.
    Put(PutArgs),
    /// Push a stored version of an agent (the active one without
    /// `@VERSION`) to an OCI registry (`subs agents push ID[@VERSION]
    /// REF`).
    Push(crate::oci::AgentPushArgs),
    /// List the agents.
    List(ListArgs),
    /// Remove an agent (its sessions stay, and go on once an agent of that
    /// id is put again).
    Rm(AgentArgs),
    /// Show an agent and its stored versions, which one is active and how
    /// many decisions each made.
    Get(AgentArgs),
    /// Make a stored version the agent's current one (`subs agents
    /// activate ID VERSION`); rolling back is the same command with an
    /// earlier version.
    Activate(ActivateArgs),
    /// Replay the agent's recorded decisions against a component file and
    /// show what it decides differently (`subs agents replay ID FILE.wasm`;
    /// with `--data DIR`, offline on a data directory).
    Replay(crate::replay::ReplayArgs),
}

/// `subs agents put`.
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    /// The agent's id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The component file (`.wasm`), or `oci://REGISTRY/REPOSITORY:TAG`
    /// (or `@sha256:…`) for the server to pull.
    #[arg(value_name = "FILE", required_unless_present = "url", conflicts_with = "url")]
    pub file: Option<PathBuf>,
    /// Register the HTTP worker at this URL instead of a component.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// Sign requests to the HTTP worker with this secret.
    #[arg(long, value_name = "SECRET", requires = "url")]
    pub secret: Option<String>,
    /// Store the version without making it current; `subs agents activate`
    /// makes it current later. The agent must exist already.
    #[arg(long)]
    pub inactive: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs agents list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs agents rm` and `subs agents get`: one agent of a server.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// The agent's id.
    #[arg(value_name = "ID")]
    pub id: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs agents activate`.
#[derive(Debug, clap::Args)]
pub struct ActivateArgs {
    /// The agent's id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The stored version to make current: `sha256:<hex>`, as `subs agents
    /// get` lists them.
    #[arg(value_name = "VERSION")]
    pub version: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Runs an agents command.
pub async fn exec(command: AgentsCommand) -> CliResult {
    match command {
        AgentsCommand::Put(args) => put(args).await,
        AgentsCommand::Push(args) => crate::oci::agents_push(args).await,
        AgentsCommand::List(args) => list(args).await,
        AgentsCommand::Rm(args) => rm(args).await,
        AgentsCommand::Get(args) => get(args).await,
        AgentsCommand::Activate(args) => activate(args).await,
        AgentsCommand::Replay(args) => crate::replay::exec(args).await,
    }
}

async fn put(args: PutArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_name("agent id", &args.id)?;
    let path = if args.inactive { format!("/v1/agents/{id}?activate=false") } else { format!("/v1/agents/{id}") };
    // `uploaded`: the version this upload is, to name it when it is
    // stored inactive.
    let oci = args.file.as_ref().and_then(|f| f.to_str()).and_then(|f| f.strip_prefix(crate::oci::SCHEME));
    let (request, spinner, uploaded) = match (&args.file, &args.url) {
        (Some(_), _) if oci.is_some() => {
            let reference = oci.unwrap_or_default();
            let spinner = Spinner::start(format!("the server pulls {reference} and compiles it"));
            let body = json!({ "oci": reference });
            let request = client.request(Method::PUT, &path).header(CONTENT_TYPE, "application/json");
            (request.body(body.to_string()), Some(spinner), String::new())
        }
        (Some(file), _) => {
            let bytes = std::fs::read(file).map_err(|e| CliError::usage(anyhow!("reading {}: {e}", file.display())))?;
            let uploaded = subs_engine::agents::component_digest(&bytes);
            let spinner =
                Spinner::start(format!("uploading {} ({}); the server compiles it", file.display(), size(bytes.len())));
            let request = client.request(Method::PUT, &path).header(CONTENT_TYPE, "application/wasm").body(bytes);
            (request, Some(spinner), uploaded)
        }
        (None, Some(url)) => {
            let mut body = json!({ "url": url });
            if let Some(secret) = &args.secret {
                body["secret"] = json!(secret);
            }
            let uploaded = subs_engine::agents::http_digest(url, args.secret.as_deref());
            let request = client.request(Method::PUT, &path).header(CONTENT_TYPE, "application/json");
            (request.body(body.to_string()), None, uploaded)
        }
        (None, None) => return Err(CliError::usage(anyhow!("give a component FILE or --url"))),
    };
    let response = client.send(request).await?;
    let created = response.status() == reqwest::StatusCode::CREATED;
    let bytes = response.bytes().await.map_err(|e| client.transport(&e))?;
    drop(spinner);
    let agent: Value =
        serde_json::from_slice(&bytes).map_err(|e| CliError::failed(anyhow!("the server's answer: {e}")))?;
    if args.client.json {
        println!("{agent}");
    } else if args.inactive {
        let what = if created { "stored, not active" } else { "unchanged: that version is already stored" };
        let current = str_at(&agent, "version");
        // A pull's version is known once the server has it: the newest.
        let uploaded = if uploaded.is_empty() { newest_version(&agent) } else { uploaded };
        println!("agent {}: {uploaded} {what}; the active version is {current}", str_at(&agent, "agent_id"));
    } else {
        let what = if created { "a new version" } else { "unchanged: that version is already current" };
        println!("agent {}: {} ({}), {what}", str_at(&agent, "agent_id"), str_at(&agent, "version"), detail(&agent));
    }
    Ok(())
}

async fn get(args: AgentArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_name("agent id", &args.id)?;
    let agent = client.json(client.request(Method::GET, &format!("/v1/agents/{id}"))).await?;
    if args.client.json {
        println!("{agent}");
        return Ok(());
    }
    println!(
        "agent {} · {} ({})",
        str_at(&agent, "agent_id"),
        short_version(str_at(&agent, "version")),
        detail(&agent)
    );
    print!("{}", versions_table(&agent));
    print!("{}", pulled_from(&agent));
    Ok(())
}

/// A line for each version pulled from an OCI registry: the reference
/// given and the manifest digest it is pinned to.
fn pulled_from(agent: &Value) -> String {
    let versions = agent.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
    versions
        .iter()
        .filter_map(|v| {
            let oci = v.get("oci")?;
            Some(format!(
                "{} pulled from {} ({})\n",
                short_version(str_at(v, "version")),
                str_at(oci, "reference"),
                str_at(oci, "digest")
            ))
        })
        .collect()
}

/// The versions of an agent view, one row each in upload order, the
/// active one marked `*`.
fn versions_table(agent: &Value) -> String {
    let versions = agent.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
    let rows: Vec<[String; 6]> = versions
        .iter()
        .map(|v| {
            let active = if v.get("active").and_then(Value::as_bool) == Some(true) { "*" } else { "" };
            let bytes = v.get("bytes").and_then(Value::as_u64).map_or_else(String::new, |b| size(b as usize));
            let decisions = v.get("decisions").and_then(Value::as_u64).map_or_else(String::new, |n| n.to_string());
            [
                active.to_owned(),
                str_at(v, "version").to_owned(),
                str_at(v, "kind").to_owned(),
                bytes,
                crate::sessions::time(v.get("created_ms").and_then(Value::as_u64).unwrap_or(0)),
                decisions,
            ]
        })
        .collect();
    crate::table(["ACTIVE", "VERSION", "KIND", "SIZE", "UPLOADED", "DECISIONS"], &rows)
}

async fn activate(args: ActivateArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_name("agent id", &args.id)?;
    let body = json!({ "version": args.version });
    let request = client
        .request(Method::PUT, &format!("/v1/agents/{id}/current"))
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string());
    let agent = client.json(request).await?;
    if args.client.json {
        println!("{agent}");
    } else {
        println!("agent {}: {} is active ({})", str_at(&agent, "agent_id"), str_at(&agent, "version"), detail(&agent));
    }
    Ok(())
}

async fn list(args: ListArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let Some(agents) = client.list("/v1/agents", args.client.json, "agents").await? else { return Ok(()) };
    let rows: Vec<[String; 4]> = agents
        .iter()
        .map(|a| {
            let versions = a.get("versions").and_then(Value::as_array).map_or(0, Vec::len);
            [str_at(a, "agent_id").to_owned(), short_version(str_at(a, "version")), detail(a), versions.to_string()]
        })
        .collect();
    print!("{}", crate::table(["AGENT", "VERSION", "WHAT", "VERSIONS"], &rows));
    Ok(())
}

async fn rm(args: AgentArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_name("agent id", &args.id)?;
    client.send(client.request(Method::DELETE, &format!("/v1/agents/{id}"))).await?;
    if args.client.json {
        println!("{}", json!({ "agent_id": id, "removed": true }));
    } else {
        println!("removed agent {id}");
    }
    Ok(())
}

/// The version stored last, as the agent view lists them.
fn newest_version(agent: &Value) -> String {
    let versions = agent.get("versions").and_then(Value::as_array);
    versions.and_then(|v| v.last()).map_or_else(String::new, |v| str_at(v, "version").to_owned())
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `sha256:0123456789ab…` → `sha256:0123456789ab`.
fn short_version(version: &str) -> String {
    version.chars().take("sha256:".len() + 12).collect()
}

/// `component, 1.2 MB` or `http, https://… (signed)`.
fn detail(agent: &Value) -> String {
    match str_at(agent, "kind") {
        "component" => format!("component, {}", size(agent.get("bytes").and_then(Value::as_u64).unwrap_or(0) as usize)),
        "http" => {
            let signed = if agent.get("signed").and_then(Value::as_bool) == Some(true) { " (signed)" } else { "" };
            format!("http, {}{signed}", str_at(agent, "url"))
        }
        other => other.to_owned(),
    }
}

/// A byte count for people.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / f64::from(1 << 10)),
        b => format!("{b} bytes"),
    }
}
