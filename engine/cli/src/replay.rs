//! `subs agents replay ID FILE.wasm`: the agent's recorded decisions
//! asked again of the component in FILE, and what it decides differently
//! (see docs/upgrades.md).
//!
//! Against a running server the component is uploaded as an inactive
//! version (`PUT …?activate=false`) and replayed there (`POST …/replay`);
//! with `--data DIR` the replay runs here, on that data directory, with no
//! server (which must not be running on it).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use reqwest::Method;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Value, json};
use subs_engine::agents::component_digest;
use subs_engine::replay::{self, Progress, Selection};
use subs_engine::worker::component::{AgentPolicy, ComponentHost, HostConfig};
use subs_protocol::sse::SseParser;
use subs_server::LOCAL_TENANT;

use crate::client::{Client, ClientArgs, checked_name};
use crate::error::{CliError, CliResult};
use crate::progress::Spinner;
use crate::{data, settings};

/// `subs agents replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// The agent whose recorded decisions to replay.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The candidate version: a component file (`.wasm`).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Replay these sessions (comma-separated, or the flag repeated).
    /// Default: the agent's most recently changed sessions.
    #[arg(long, value_name = "ID,…", value_delimiter = ',')]
    pub sessions: Vec<String>,
    /// Only decisions made at or after this instant (RFC 3339, e.g.
    /// 2026-12-01T00:00:00Z).
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// The most decisions to compare (at most 10,000).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
    /// Exit with code 1 when any decision differs or fails (for scripts
    /// and CI).
    #[arg(long)]
    pub check: bool,
    /// Replay here, on this data directory, with no server.
    #[arg(long, value_name = "DIR")]
    pub data: Option<PathBuf>,
    /// With `--data`: the tenant whose sessions to read.
    #[arg(long, value_name = "NAME", default_value = LOCAL_TENANT, requires = "data")]
    pub tenant: String,
    /// With `--data`: the config file `subs serve` runs with, for the
    /// sandbox limits (docs/configuration.md); unused without it.
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// With `--data`: where compiled components are kept between runs;
    /// unused without it.
    /// [default: a per-user cache directory, e.g. ~/.cache/subs/compiled]
    #[arg(long, value_name = "DIR", env = "SUBS_CACHE")]
    pub cache: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Runs the replay and prints its report.
pub async fn exec(args: ReplayArgs) -> CliResult {
    let id = checked_name("agent id", &args.id)?.to_owned();
    let since = match &args.since {
        None => None,
        Some(text) => {
            let at = humantime::parse_rfc3339_weak(text)
                .map_err(|e| CliError::usage(anyhow!("--since {text}: {e} (give an RFC 3339 time)")))?;
            let ms = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
            Some(u64::try_from(ms).unwrap_or(u64::MAX))
        }
    };
    if !(1..=replay::MAX_DECISIONS).contains(&args.limit) {
        return Err(CliError::usage(anyhow!("--limit must be 1 to {}", replay::MAX_DECISIONS)));
    }
    let bytes =
        std::fs::read(&args.file).map_err(|e| CliError::usage(anyhow!("reading {}: {e}", args.file.display())))?;
    let version = component_digest(&bytes);
    let report = match &args.data {
        Some(dir) => offline(&args, &id, bytes, &version, dir, since).await?,
        None => online(&args, &id, bytes, &version, since).await?,
    };
    if args.client.json {
        println!("{report}");
    } else {
        print!("{}", summary(&report, Paint::for_stdout()));
    }
    let count = |key: &str| report.get(key).and_then(Value::as_u64).unwrap_or(0);
    if args.check && count("different") + count("failed") > 0 {
        return Err(CliError::failed(anyhow!(
            "{} decisions differ and {} failed",
            count("different"),
            count("failed")
        )));
    }
    Ok(())
}

/// Uploads the component as an inactive version and replays on the
/// server.
async fn online(args: &ReplayArgs, id: &str, bytes: Vec<u8>, version: &str, since: Option<u64>) -> CliResult<Value> {
    let client = Client::new(&args.client)?;
    let spinner = Spinner::start(format!("uploading {} as an inactive version", args.file.display()));
    let upload = client
        .request(Method::PUT, &format!("/v1/agents/{id}?activate=false"))
        .header(CONTENT_TYPE, "application/wasm")
        .body(bytes);
    let agent = client.json(upload).await?;
    drop(spinner);
    // The digest names the version; the server answers the agent, whose
    // `versions` hold it.
    if !agent.get("versions").and_then(Value::as_array).is_some_and(|v| v.iter().any(|v| v["version"] == version)) {
        return Err(CliError::failed(anyhow!("the server did not keep the upload as a version of {id}")));
    }
    let mut body = json!({ "version": version, "limit": args.limit });
    if !args.sessions.is_empty() {
        body["sessions"] = json!(args.sessions);
    }
    if let Some(since) = since {
        body["since"] = json!(since);
    }
    // Followed as events, for the progress bar; the last is the report.
    let request = client
        .request(Method::POST, &format!("/v1/agents/{id}/replay"))
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(body.to_string());
    let mut response = client.send(request).await?;
    let bar = progress_bar();
    let mut parser = SseParser::with_limit(REPORT_BYTES);
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => return Err(client.transport(&e)),
        };
        let events =
            parser.push(&chunk).map_err(|e| CliError::unavailable(anyhow!("reading the replay's events: {e}")))?;
        for event in events {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            match event.event.as_str() {
                "progress" => bar.show(data["done"].as_u64().unwrap_or(0), data["total"].as_u64().unwrap_or(0)),
                "report" => return Ok(data),
                "error" => {
                    let status = data["status"].as_u64().unwrap_or(0);
                    let message = data["error"].as_str().unwrap_or("the replay failed");
                    return Err(CliError::failed(anyhow!("the server answered {status}: {message}")));
                }
                _ => {}
            }
        }
    }
    Err(CliError::unavailable(anyhow!("the server ended the replay's stream before its report")))
}

/// The largest report read from a server: the most a report can hold
/// (1,000 differences and failures each, 50 changes of at most about
/// 1 KiB each) with room to spare.
const REPORT_BYTES: usize = 256 << 20;

/// Replays here, on the data directory's store.
async fn offline(
    args: &ReplayArgs,
    id: &str,
    bytes: Vec<u8>,
    version: &str,
    dir: &std::path::Path,
    since: Option<u64>,
) -> CliResult<Value> {
    let file = settings::load(args.config.as_deref())?;
    let store = Arc::new(data::open_store(
        &dir.join(settings::STORE_FILE),
        "is a `subs serve` using this data directory? Stop it, or replay through it without --data",
    )?);
    let cache = args.cache.clone().or_else(|| settings::default_cache_dir().map(|d| d.join("compiled")));
    // A replay runs many decisions at once and then exits: optimized code
    // from the start (see `run`).
    let config = HostConfig { compile_cache: cache, baseline_first: false, ..file.host_config()? };
    let own = file.agent_policies().remove(&(args.tenant.clone(), id.to_owned())).unwrap_or_default();
    // No outgoing HTTP in a replay, whatever the agent may do when it runs.
    let policy = AgentPolicy { http_hosts: Some(Vec::new()), ..own };
    let (tenant, agent_id) = (args.tenant.clone(), id.to_owned());
    let spinner = Spinner::start(format!("loading {}", args.file.display()));
    let candidate = tokio::task::spawn_blocking(move || {
        let host = ComponentHost::with_config(config).map_err(|e| CliError::failed(anyhow!(e)))?;
        host.load_as(&tenant, &agent_id, &policy, &bytes).map_err(|e| CliError::usage(anyhow!("{e}")))
    })
    .await
    .map_err(|e| CliError::failed(anyhow!("compiling panicked: {e}")))??;
    drop(spinner);
    let selection = Selection {
        sessions: (!args.sessions.is_empty()).then(|| args.sessions.clone()),
        since_ms: since,
        limit: args.limit,
        // Nobody else waits on a local replay: it is bounded by count.
        time: Duration::from_secs(24 * 3600),
        ..Selection::default()
    };
    let bar = Arc::new(progress_bar());
    let shown = bar.clone();
    let progress: Progress = Arc::new(move |done, total| shown.show(done as u64, total as u64));
    let outcome = replay::replay(store.as_ref(), &args.tenant, id, &candidate, &selection, Some(progress)).await;
    drop(bar);
    store.close().await.map_err(|e| CliError::failed(anyhow!("closing the store: {e}")))?;
    let report = outcome.map_err(|e| CliError::failed(anyhow!("{e}")))?;
    let mut report = serde_json::to_value(&report).map_err(|e| CliError::failed(anyhow!(e)))?;
    report["agent_id"] = json!(id);
    report["version"] = json!(version);
    Ok(report)
}

/// A bar of decisions replayed, on stderr when it is a terminal.
fn progress_bar() -> Spinner {
    Spinner::counting("replaying {bar:40} {pos}/{len} decisions {elapsed}")
}

/// ANSI colours, or none (not a terminal, or `NO_COLOR` set).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Paint(pub bool);

impl Paint {
    /// Colours when stdout is a terminal and `NO_COLOR` is not set.
    pub(crate) fn for_stdout() -> Self {
        Self::for_stream(&std::io::stdout())
    }

    /// Colours when `stream` is a terminal and `NO_COLOR` is not set.
    pub(crate) fn for_stream(stream: &impl IsTerminal) -> Self {
        Self(stream.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
    }

    /// `text` in the colour (or style) of the ANSI `code`.
    pub(crate) fn paint(self, code: &str, text: &str) -> String {
        if self.0 { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
}

/// The report for people: the counts, then each differing decision with
/// its changes (`-` recorded only, `+` candidate only, `~` changed), then
/// each failure.
fn summary(report: &Value, paint: Paint) -> String {
    use std::fmt::Write as _;
    let count = |key: &str| report.get(key).and_then(Value::as_u64).unwrap_or(0);
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut out = String::new();
    let version = text(report, "version");
    let short = version.get(..19).unwrap_or(&version);
    let _ = writeln!(
        out,
        "replayed {} decisions of agent {} against {short}… ({} sessions, {:.1} s)",
        count("decisions"),
        text(report, "agent_id"),
        count("sessions"),
        count("elapsed_ms") as f64 / 1000.0
    );
    let rows = [
        ("same", "32", count("same")),
        ("different", "33", count("different")),
        ("failed", "31", count("failed")),
        ("skipped", "2", count("skipped")),
    ];
    for (name, colour, n) in rows {
        let line = format!("  {name:<10}{n:>6}");
        let _ = writeln!(out, "{}", if n > 0 { paint.paint(colour, &line) } else { line });
    }
    if count("http_refused") > 0 {
        let _ = writeln!(out, "  {} decisions tried outgoing HTTP, which a replay refuses", count("http_refused"));
    }
    if let Some(why) = report.get("stopped").and_then(Value::as_str) {
        let _ =
            writeln!(out, "{}", paint.paint("33", &format!("stopped early ({why}): not every decision was compared")));
    }
    let heading = |entry: &Value, what: &str| {
        format!(
            "{what}: session {} turn {} step {} {}",
            text(entry, "session_id"),
            entry.get("turn_id").and_then(Value::as_str).unwrap_or("-"),
            entry.get("step").and_then(Value::as_u64).unwrap_or(0),
            text(entry, "trigger"),
        )
    };
    for entry in report.get("differences").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(out, "\n{}", paint.paint("1", &heading(entry, "different")));
        write_changes(&mut out, entry, "  ", paint);
    }
    for entry in report.get("failures").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(out, "\n{}", paint.paint("1", &heading(entry, "failed")));
        let _ = writeln!(out, "{}", paint.paint("31", &format!("  {}", text(entry, "error"))));
    }
    out
}

/// The changes of a differing decision of a report (`entry`), a line
/// each after `indent`: `-` recorded only, `+` candidate only, `~`
/// changed; then how many more the report left out.
pub(crate) fn write_changes(out: &mut String, entry: &Value, indent: &str, paint: Paint) {
    use std::fmt::Write as _;
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    for change in entry.get("changes").and_then(Value::as_array).into_iter().flatten() {
        let path = text(change, "path");
        let (recorded, candidate) = (change.get("recorded"), change.get("candidate"));
        let line = match text(change, "change").as_str() {
            "added" => paint.paint("32", &format!("{indent}+ {path}: {}", shown(candidate))),
            "removed" => paint.paint("31", &format!("{indent}- {path}: {}", shown(recorded))),
            _ => paint.paint("33", &format!("{indent}~ {path}: {} → {}", shown(recorded), shown(candidate))),
        };
        let _ = writeln!(out, "{line}");
    }
    if let Some(more) = entry.get("more_changes").and_then(Value::as_u64).filter(|more| *more > 0) {
        let _ = writeln!(out, "{indent}… and {more} more changes");
    }
}

/// A value in one line, cut at 200 characters.
fn shown(value: Option<&Value>) -> String {
    let text = value.map_or_else(String::new, Value::to_string);
    if text.chars().count() > 200 { format!("{}…", text.chars().take(200).collect::<String>()) } else { text }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_and_shows_each_change() {
        let report = json!({
            "agent_id": "tools", "version": "sha256:0123456789abcdef0123", "decisions": 3, "same": 1,
            "different": 1, "failed": 1, "skipped": 0, "sessions": 1, "elapsed_ms": 1500, "http_refused": 0,
            "differences": [{"session_id": "s", "turn_id": "turn_1", "step": 4, "trigger": "tool.execute",
                "changes": [{"path": "/actions/0/result/sum", "change": "removed", "recorded": 3},
                            {"path": "/actions/0/result/total", "change": "added", "candidate": 3}]}],
            "failures": [{"session_id": "s", "step": 1, "trigger": "client.messages", "error": "trapped"}]
        });
        let plain = summary(&report, Paint(false));
        assert!(
            plain.starts_with("replayed 3 decisions of agent tools against sha256:0123456789ab… (1 sessions, 1.5 s)"),
            "{plain}"
        );
        assert!(plain.contains("  different      1"), "{plain}");
        assert!(plain.contains("different: session s turn turn_1 step 4 tool.execute"), "{plain}");
        assert!(plain.contains("  - /actions/0/result/sum: 3\n  + /actions/0/result/total: 3"), "{plain}");
        assert!(plain.contains("failed: session s turn - step 1 client.messages\n  trapped"), "{plain}");
        let coloured = summary(&report, Paint(true));
        assert!(coloured.contains("\x1b[31m  - /actions/0/result/sum: 3\x1b[0m"), "{coloured}");
    }
}
