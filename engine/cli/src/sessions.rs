//! `subs sessions …`: list, show and tail the sessions of a running
//! server.
//!
//! `tail` follows `GET /v1/sessions/{id}/events` and survives dropped
//! connections: it reconnects with backoff and sends `Last-Event-ID`, so
//! the server replays exactly what was committed in between — no event
//! lost, none printed twice. (Token deltas are live only: those sent while
//! disconnected are gone, but the message they add up to is replayed.)

use std::time::Duration;

use anyhow::anyhow;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::client::{Client, ClientArgs, checked_name, checked_session, session_path, sessions_page_path};
use crate::error::{CliError, CliResult};
use crate::render::{Audience, Human, TurnView, json_line};
use subs_protocol::sse::SseParser;

/// What the stream loop calls for each event: its id, name and data.
type OnEvent<'a> = dyn FnMut(Option<u64>, &str, &Value) -> std::io::Result<()> + 'a;

/// `subs sessions …`.
#[derive(Debug, clap::Subcommand)]
pub enum SessionsCommand {
    /// List the sessions.
    List(ListArgs),
    /// Show a session: its status and conversation.
    Show(ShowArgs),
    /// Send a user message to a session and print the turn as it happens
    /// (the session is created on first use, with --agent).
    Send(SendArgs),
    /// Print a session's events as they happen (from the first, or after
    /// `--after`), reconnecting when the connection drops. Stop with Ctrl-C.
    Tail(TailArgs),
}

/// `subs sessions list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs sessions show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// The session's id.
    #[arg(value_name = "ID")]
    pub id: String,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs sessions send`.
#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// The session's id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The user message.
    #[arg(value_name = "MESSAGE")]
    pub message: String,
    /// The agent the session runs (needed to start a session; default:
    /// the existing session's agent).
    #[arg(long, value_name = "AGENT")]
    pub agent: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// `subs sessions tail`.
#[derive(Debug, clap::Args)]
pub struct TailArgs {
    /// The session's id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// Start after this event id (default: from the session's first event).
    #[arg(long, value_name = "EVENT_ID")]
    pub after: Option<u64>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
}

/// Runs a sessions command.
pub async fn exec(command: SessionsCommand) -> CliResult {
    match command {
        SessionsCommand::List(args) => list(args).await,
        SessionsCommand::Show(args) => show(args).await,
        SessionsCommand::Send(args) => send(args).await,
        SessionsCommand::Tail(args) => tail(args).await,
    }
}

async fn list(args: ListArgs) -> CliResult {
    /// The API's largest page.
    const PAGE: usize = 1000;
    let client = Client::new(&args.client)?;
    // The API answers a page at a time; the command lists every session.
    let mut sessions: Vec<Value> = Vec::new();
    loop {
        let path = sessions_page_path(PAGE, sessions.last().map(|last| str_at(last, "session_id")));
        let page = client.json(client.request(Method::GET, &path)).await?;
        let page = page.as_array().cloned().unwrap_or_default();
        let full = page.len() == PAGE;
        sessions.extend(page);
        if !full {
            break;
        }
    }
    if args.client.json {
        println!("{}", Value::Array(sessions));
        return Ok(());
    }
    if sessions.is_empty() {
        println!("no sessions");
        return Ok(());
    }
    let rows: Vec<[String; 4]> = sessions
        .iter()
        .map(|s| {
            [
                str_at(s, "session_id").to_owned(),
                str_at(s, "agent_id").to_owned(),
                str_at(s, "status").to_owned(),
                s.get("updated_ms").and_then(Value::as_u64).map(time).unwrap_or_default(),
            ]
        })
        .collect();
    print!("{}", crate::table(["SESSION", "AGENT", "STATUS", "UPDATED"], &rows));
    Ok(())
}

async fn show(args: ShowArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_session(&args.id)?;
    let mut session = client.json(client.request(Method::GET, &session_path(id, ""))).await?;
    let answered = answered_interrupts(&client, id, &session).await?;
    if args.client.json {
        if let Some(fields) = session.as_object_mut() {
            fields.insert("answered_interrupts".to_owned(), Value::Array(answered));
        }
        println!("{session}");
        return Ok(());
    }
    let mut header = format!("session {id} · agent {} · {}", str_at(&session, "agent_id"), str_at(&session, "status"));
    if let Some(turn) = session.get("turn_id").and_then(Value::as_str) {
        header.push_str(&format!(" ({turn})"));
    }
    println!("{header}");
    if let Some(model) = session.pointer("/agent/model").and_then(Value::as_str) {
        println!("model {model}");
    }
    let usage = session.get("usage").filter(|u| u.as_object().is_some_and(|o| !o.is_empty()));
    if let Some(usage) = usage {
        let cost = session.get("cost").and_then(Value::as_str).map(|c| format!(", cost ${c}")).unwrap_or_default();
        println!("usage {usage}{cost}");
    }
    println!();
    let mut human = Human::new(std::io::stdout(), Audience::Watcher);
    for message in session.get("messages").and_then(Value::as_array).into_iter().flatten() {
        human.event("message", &json!({ "message": message }))?;
    }
    human.finish()?;
    for call in session.get("calls").and_then(Value::as_array).into_iter().flatten() {
        let deadline =
            call.get("deadline").and_then(Value::as_str).map(|d| format!(", deadline {d}")).unwrap_or_default();
        println!("call: {} {} ({}{deadline})", str_at(call, "kind"), str_at(call, "id"), str_at(call, "status"));
    }
    for interrupt in &answered {
        let by = interrupt.get("resumed_by").map(resumer).unwrap_or_default();
        println!(
            "answered: interrupt {} ({}) with {} by {by}",
            str_at(interrupt, "interrupt_id"),
            str_at(interrupt, "reason"),
            interrupt.get("payload").unwrap_or(&Value::Null)
        );
    }
    for interrupt in session.get("interrupts").and_then(Value::as_array).into_iter().flatten() {
        let payload = interrupt.get("payload").filter(|p| !p.is_null()).map(|p| format!(" {p}")).unwrap_or_default();
        let schema = interrupt.get("resume_schema").map(|s| format!(", resume schema {s}")).unwrap_or_default();
        println!(
            "waiting: interrupt {} ({}){payload}{schema}",
            interrupt.get("interrupt_id").and_then(Value::as_str).unwrap_or("?"),
            str_at(interrupt, "reason")
        );
    }
    Ok(())
}

/// The session's answered interrupts, oldest first, each
/// `{interrupt_id, reason, payload, resumed_by}`: its `interrupt.resumed`
/// events, with the reason of the `interrupt` event that opened it. Read
/// from the stored events up to the snapshot's last one (the snapshot
/// lists only the open ones).
async fn answered_interrupts(client: &Client, session: &str, snapshot: &Value) -> CliResult<Vec<Value>> {
    let Some(last) = snapshot.get("last_event_id").and_then(Value::as_u64) else {
        return Ok(Vec::new());
    };
    let request = client
        .request(Method::GET, &session_path(session, "/events"))
        .header(reqwest::header::ACCEPT, "text/event-stream");
    let mut response = client.send(request).await?;
    let mut parser = SseParser::new();
    let mut reasons = std::collections::HashMap::<String, String>::new();
    let mut answered = Vec::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            // A stream cut short (the server stopping, the session
            // dropped) lists what it had.
            Ok(None) => return Ok(answered),
            Err(e) => return Err(client.transport(&e)),
        };
        let events =
            parser.push(&chunk).map_err(|e| CliError::unavailable(anyhow!("reading the session's events: {e}")))?;
        for event in events {
            let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            match event.event.as_str() {
                "interrupt" => {
                    reasons.insert(str_at(&data, "interrupt_id").to_owned(), str_at(&data, "reason").to_owned());
                }
                "interrupt.resumed" => {
                    let id = str_at(&data, "interrupt_id").to_owned();
                    let reason = reasons.get(&id).cloned().unwrap_or_default();
                    answered.push(json!({
                        "interrupt_id": id,
                        "reason": reason,
                        "payload": data.get("payload").cloned().unwrap_or(Value::Null),
                        "resumed_by": data.get("resumed_by").cloned().unwrap_or(Value::Null),
                    }));
                }
                _ => {}
            }
            if event.id.as_deref().and_then(|id| id.parse::<u64>().ok()).is_some_and(|id| id >= last) {
                return Ok(answered);
            }
        }
    }
}

/// Who resumed an interrupt, as `show` prints it: `the tenant`, `the
/// tenant (key subs_ab12cd34) for user-1`, `end user user-1`.
fn resumer(by: &Value) -> String {
    let identity = by.pointer("/identity/id").and_then(Value::as_str);
    let key = by.get("key").and_then(Value::as_str).map(|k| format!(" (key {k})")).unwrap_or_default();
    match (str_at(by, "kind"), identity) {
        ("end_user", Some(id)) => format!("end user {id}"),
        ("end_user", None) => "an end user".to_owned(),
        (_, Some(id)) => format!("the tenant{key} for {id}"),
        _ => format!("the tenant{key}"),
    }
}

async fn send(args: SendArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_session(&args.id)?;
    let agent = match &args.agent {
        Some(agent) => checked_name("agent id", agent)?.to_owned(),
        None => {
            let response =
                client.request(Method::GET, &session_path(id, "")).send().await.map_err(|e| client.transport(&e))?;
            if response.status() == StatusCode::NOT_FOUND {
                return Err(CliError::usage(anyhow!(
                    "session `{id}` does not exist: pass --agent to start it with an agent"
                )));
            }
            if !response.status().is_success() {
                return Err(client.refused(response).await);
            }
            let session: Value = serde_json::from_slice(&response.bytes().await.map_err(|e| client.transport(&e))?)
                .map_err(|e| CliError::failed(anyhow!("the server's answer: {e}")))?;
            str_at(&session, "agent_id").to_owned()
        }
    };
    let input = json!({
        "type": "client.message",
        "agent_id": agent,
        "message": { "role": "user", "content": args.message },
        "stream": true,
    });
    let request = client
        .request(Method::POST, &session_path(id, "/input"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .body(input.to_string());
    let mut response = client.send(request).await?;
    let mut view = TurnView::new(args.client.json, None);
    let mut parser = SseParser::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                view.finish()?;
                return Err(client.transport(&e));
            }
        };
        for event in
            parser.push(&chunk).map_err(|e| CliError::unavailable(anyhow!("reading the turn's events: {e}")))?
        {
            let event_id = event.id.as_deref().and_then(|i| i.parse::<u64>().ok());
            let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            if let Some(end) = view.event(event_id, &event.event, &data)? {
                return end.result();
            }
        }
    }
    view.finish()?;
    Err(CliError::unavailable(anyhow!(
        "the stream ended before the turn did; it goes on in the server: follow it with `subs sessions tail {id}`"
    )))
}

/// How long to wait before reconnecting: doubling from the first to the
/// last, reset by a connection that works.
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

async fn tail(args: TailArgs) -> CliResult {
    let client = Client::new(&args.client)?;
    let id = checked_session(&args.id)?.to_owned();
    let mut printer = Printer { json: args.client.json, human: Human::new(std::io::stdout(), Audience::Watcher) };
    follow(&client, &id, args.after, &mut |id, event, data| printer.print(id, event, data)).await
}

/// Prints tailed events.
struct Printer {
    json: bool,
    human: Human<std::io::Stdout>,
}

impl Printer {
    fn print(&mut self, id: Option<u64>, event: &str, data: &Value) -> std::io::Result<()> {
        if self.json {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", json_line(id, event, data))?;
            out.flush()
        } else {
            self.human.event(event, data)
        }
    }
}

/// Follows the session's events, handing each to `on_event` once, until
/// the server refuses (an unknown session, a wrong key) or the first
/// connection fails. Returns only with an error: a dropped connection is
/// reconnected.
pub async fn follow(client: &Client, session: &str, after: Option<u64>, on_event: &mut OnEvent<'_>) -> CliResult {
    let mut last = after;
    let mut connected_once = false;
    let mut backoff = BACKOFF_FIRST;
    loop {
        let mut request = client
            .request(Method::GET, &session_path(session, "/events"))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        let lost = match request.send().await {
            Err(e) if !connected_once => return Err(client.transport(&e)),
            Err(e) => format!("{e}"),
            Ok(response) if response.status().is_success() => {
                connected_once = true;
                backoff = BACKOFF_FIRST;
                read(response, &mut last, on_event).await?
            }
            // Overloaded or restarting: worth another try.
            Ok(response) if response.status().is_server_error() && connected_once => {
                format!("the server answered {}", response.status())
            }
            Ok(response) if response.status() == StatusCode::NOT_FOUND => {
                return Err(CliError::failed(anyhow!("session `{session}` does not exist")));
            }
            Ok(response) => return Err(client.refused(response).await),
        };
        eprintln!("connection lost ({lost}); reconnecting in {} ms", backoff.as_millis());
        // A server restarting or a network down: reconnecting at once
        // would only fail again, and load a server coming back.
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Reads one connection's events until it ends; returns why it ended.
async fn read(
    mut response: reqwest::Response,
    last: &mut Option<u64>,
    on_event: &mut OnEvent<'_>,
) -> CliResult<String> {
    let mut parser = SseParser::new();
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok("the server closed the stream".to_owned()),
            Err(e) => return Ok(format!("{e}")),
        };
        let events = match parser.push(&chunk) {
            Ok(events) => events,
            Err(e) => return Ok(format!("{e}")),
        };
        for event in events {
            let id = event.id.as_deref().and_then(|id| id.parse::<u64>().ok());
            // The server replays after Last-Event-ID; this guards against
            // any overlap all the same.
            if let (Some(id), Some(last)) = (id, *last)
                && id <= last
            {
                continue;
            }
            let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data.clone()));
            on_event(id, &event.event, &data)?;
            if id.is_some() {
                *last = id;
            }
        }
    }
}

fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Unix milliseconds as RFC 3339 (UTC, seconds).
pub(crate) fn time(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms);
    humantime::format_rfc3339_seconds(at).to_string()
}
