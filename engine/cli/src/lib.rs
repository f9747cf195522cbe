//! The `subs` command-line tool: a thin layer of clap-derived commands
//! over the engine (`subs-engine`) and its HTTP API (`subs-server`).
//!
//! Each subcommand has its args struct and one `exec`; every `exec`
//! returns a [`CliError`](error::CliError) carrying its exit code, which
//! [`main`] prints and exits with. The work itself is the libraries'.
//!
//! # Layout
//!
//! - [`serve`]: `subs serve`, the engine with the HTTP API.
//! - [`run`]: `subs run`, an agent in this process: one turn, or a chat.
//! - [`new`]: `subs new`, a new agent project from a template; [`dev`]:
//!   `subs dev`, such a project built, chatted with and rebuilt on change.
//! - [`oci`]: `subs push`, `subs agents push`, and the registry pulls
//!   behind `subs run oci://…`.
//! - [`agents`], [`sessions`]: clients of a running server (`sessions
//!   tail` follows events across dropped connections).
//! - [`tenants`], [`keys`]: tenants, their limits and their keys, through
//!   a running server's admin API (keys also in a stopped server's
//!   store); [`admin`]: what they share, and `subs admin-key`.
//! - [`settings`]: flags, environment, the TOML config file, defaults.
//! - [`data`]: the data directory and its store.
//! - [`client`]: the HTTP client of the API (its event streams are read
//!   with `subs_protocol::sse`).
//! - [`render`]: events for people and for machines; [`progress`]: a
//!   spinner while something slow happens.
//! - [`error`]: failures and their exit codes.

pub mod admin;
pub mod agents;
pub mod client;
pub mod data;
pub mod dev;
pub mod error;
pub mod keys;
pub mod mcp;
pub mod mcp_stdio;
pub mod new;
pub mod oci;
pub mod progress;
pub mod render;
pub mod replay;
pub mod run;
pub mod serve;
pub mod sessions;
pub mod settings;
pub mod telemetry;
pub mod tenants;

use std::process::ExitCode;

use clap::Parser;

use crate::error::CliResult;

/// `subs`: the command line.
#[derive(Debug, Parser)]
#[command(name = "subs", version, about = "The subs agent engine", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    #[allow(missing_docs)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the engine with its HTTP API.
    Serve(serve::ServeArgs),
    /// Run an agent (a .wasm component or an HTTP worker's URL) in this
    /// process, offline, streaming the reply: one turn for a message, a
    /// chat without one.
    Run(run::RunArgs),
    /// Make a new agent project (a tool, a state field, an approval-gated
    /// tool, its tests) from a template.
    New(new::NewArgs),
    /// Build a project made by `subs new`, chat with it, and on each change
    /// to its sources rebuild it and replay the conversation against the
    /// new build.
    Dev(dev::DevArgs),
    /// Push a component file to an OCI registry as a Wasm artifact
    /// (`subs push FILE.wasm REGISTRY/REPOSITORY:TAG`).
    Push(oci::PushArgs),
    /// Upload, list and remove the agents of a running server.
    #[command(subcommand)]
    Agents(agents::AgentsCommand),
    /// List, show and tail the sessions of a running server.
    #[command(subcommand)]
    Sessions(sessions::SessionsCommand),
    /// Register, list and remove the MCP servers whose tools a tenant's
    /// agents use.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Create, list and revoke tenants' API keys: through a running
    /// server's admin API, or with --data in a stopped server's store.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Create, show, limit and delete the tenants of a running server
    /// (its admin API, with the operator key).
    #[command(subcommand)]
    Tenants(tenants::TenantsCommand),
    /// Make an operator key, which enables a server's admin API: prints the
    /// key, and the config file lines that give it to the server.
    AdminKey(admin::AdminKeyArgs),
}

/// The first argument that makes `subs` a compile child of a server: the
/// engine's settings follow, the component comes on stdin, and the
/// compiled artifact goes to stdout. Not a command for people, so clap
/// never sees it.
pub const COMPILE_CHILD: &str = "__compile-component";

/// Parses the command line, runs the command, and returns the exit code.
pub fn main() -> ExitCode {
    let mut args = std::env::args();
    if args.nth(1).as_deref() == Some(COMPILE_CHILD) {
        let code = subs_engine::worker::component::run_child(&args.next().unwrap_or_default());
        return ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX));
    }
    let cli = Cli::parse();
    init_logging(matches!(cli.command, Command::Serve(_)));
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: the async runtime could not start: {e}");
            return ExitCode::from(error::FAILED);
        }
    };
    let result = runtime.block_on(exec(cli.command));
    // Tasks still running (a server's open streams) end here rather than
    // hold the process.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_closed_output() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.code)
        }
    }
}

async fn exec(command: Command) -> CliResult {
    match command {
        Command::Serve(args) => serve::exec(args).await,
        Command::Run(args) => run::exec(args).await,
        Command::New(args) => new::exec(args),
        Command::Dev(args) => dev::exec(args).await,
        Command::Push(args) => oci::push(args).await,
        Command::Agents(command) => agents::exec(command).await,
        Command::Sessions(command) => sessions::exec(command).await,
        Command::Mcp(command) => mcp::exec(command).await,
        Command::Keys(command) => keys::exec(command).await,
        Command::Tenants(command) => tenants::exec(command).await,
        Command::AdminKey(args) => admin::admin_key(&args),
    }
}

/// Logs go to stderr, filtered by `RUST_LOG`. The server logs what it
/// does, and what its agents print or log (target `subs::guest`, held to
/// each decision's log limits); other commands only errors, so their
/// output stays readable. Colours only on a terminal, and not with
/// `NO_COLOR` set: a log file or a collector gets plain text, and the
/// server does not format escape codes into every span's fields.
fn init_logging(server: bool) {
    let default = if server {
        "warn,subs_core=info,subs_host=info,subs_models=info,subs_engine=info,subs_server=info,subs_cli=info,\
         subs::guest=info"
    } else {
        "error"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(replay::Paint::for_stream(&std::io::stderr()).0)
        .try_init();
}

/// Rows under a header, in columns padded to their widest cell.
pub fn table<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn tables_are_aligned() {
        let rows = [["tools".to_owned(), "component".to_owned()], ["a".to_owned(), "http".to_owned()]];
        assert_eq!(table(["AGENT", "KIND"], &rows), "AGENT  KIND\ntools  component\na      http\n");
    }
}
