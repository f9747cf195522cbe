//! `subs mcp …`: register, list and remove the MCP servers of a tenant on
//! a running server (`PUT`/`GET`/`DELETE /v1/mcp-servers`), whose tools
//! its agents name in their config's `mcp` (docs/mcp.md).

use anyhow::anyhow;
use reqwest::Method;
use reqwest::header::CONTENT_TYPE;
use serde_json::{Map, Value, json};

use crate::client::{Client, ClientArgs};
use crate::error::{CliError, CliResult};

/// `subs mcp …`.
#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Register (or replace) an MCP server: `subs mcp add NAME URL
    /// [--header "NAME: VALUE"]…`. The headers (its credentials) are
    /// stored by the server and never shown again.
    Add(AddArgs),
    /// List the MCP servers: name, URL, status, tool count, last error.
    List(ListArgs),
    /// Remove an MCP server.
    Rm(RmArgs),
}

/// `subs mcp add`.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The server's name (1-32 letters, digits and `-`); its tools are
    /// offered as `NAME__TOOL`.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Its Streamable HTTP endpoint.
    #[arg(value_name = "URL")]
    pub url: String,
    /// A header to send with each request, `NAME: VALUE` (repeatable).
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs mcp list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs mcp rm`.
#[derive(Debug, clap::Args)]
pub struct RmArgs {
    /// The server's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Runs an `mcp` command.
pub async fn exec(command: McpCommand) -> CliResult {
    match command {
        McpCommand::Add(args) => add(args).await,
        McpCommand::List(args) => list(args).await,
        McpCommand::Rm(args) => rm(args).await,
    }
}

/// A server name as a path segment: the API checks the rule, this only
/// keeps the path one segment.
fn path_name(name: &str) -> CliResult<&str> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(CliError::usage(anyhow!("an MCP server name is letters, digits and `-`, not {name:?}")));
    }
    Ok(name)
}

async fn add(args: AddArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let name = path_name(&args.name)?;
    let mut headers = Map::new();
    for header in &args.headers {
        let Some((key, value)) = header.split_once(':') else {
            return Err(CliError::usage(anyhow!("--header takes `NAME: VALUE`, not {header:?}")));
        };
        headers.insert(key.trim().to_owned(), Value::String(value.trim().to_owned()));
    }
    let body = json!({"url": args.url, "headers": headers});
    let request = client
        .request(Method::PUT, &format!("/v1/mcp-servers/{name}"))
        .header(CONTENT_TYPE, "application/json")
        .body(body.to_string());
    let server = client.json(request).await?;
    if args.client.json {
        println!("{server}");
    } else {
        println!("MCP server {name}: {}", server.get("url").and_then(Value::as_str).unwrap_or_default());
    }
    Ok(())
}

async fn list(args: ListArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let Some(servers) = client.list("/v1/mcp-servers", args.client.json, "MCP servers").await? else {
        return Ok(());
    };
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or("-").to_owned();
    let rows: Vec<[String; 5]> = servers
        .iter()
        .map(|s| {
            let tools = s.get("tool_count").and_then(Value::as_u64).map_or_else(|| "-".to_owned(), |n| n.to_string());
            [text(s, "name"), text(s, "url"), text(s, "status"), tools, text(s, "last_error")]
        })
        .collect();
    print!("{}", crate::table(["NAME", "URL", "STATUS", "TOOLS", "LAST ERROR"], &rows));
    Ok(())
}

async fn rm(args: RmArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let name = path_name(&args.name)?;
    client.send(client.request(Method::DELETE, &format!("/v1/mcp-servers/{name}"))).await?;
    if args.client.json {
        println!("{}", json!({"name": name, "removed": true}));
    } else {
        println!("removed MCP server {name}");
    }
    Ok(())
}
