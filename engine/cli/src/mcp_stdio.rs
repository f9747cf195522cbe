//! `subs run --mcp NAME=stdio:COMMAND ARGS…`: an MCP server that speaks
//! over its standard input and output, started by `subs run` and reached
//! by the engine through a Streamable HTTP endpoint on 127.0.0.1 that
//! this module serves in front of it, so that the engine's one MCP client
//! serves both transports.
//!
//! The bridge writes each POSTed message to the server's stdin as one
//! line, and answers a request's POST with the server's response of the
//! same id; notifications are answered 202. What the server sends on its
//! own (progress, log messages) is dropped, and its requests (`ping`) are
//! answered here. A line longer than the run's `max_result_bytes` ends
//! the bridge, as a server's oversized answer fails a call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::anyhow;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::error::{CliError, CliResult};

type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Value>>>>;

/// A running stdio server and the bridge before it; the server is killed
/// when this is dropped.
pub struct StdioServer {
    /// The bridge's endpoint.
    pub url: String,
    _child: tokio::process::Child,
}

/// Starts `command` (split on whitespace: the program, then its
/// arguments) and the bridge before it.
pub async fn start(name: &str, command: &str, max_line_bytes: usize) -> CliResult<StdioServer> {
    let mut words = command.split_whitespace();
    let program = words.next().ok_or_else(|| CliError::usage(anyhow!("--mcp {name}=stdio: names no command")))?;
    let mut child = tokio::process::Command::new(program)
        .args(words)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::usage(anyhow!("--mcp {name}: cannot start `{program}`: {e}")))?;
    let stdin = Arc::new(tokio::sync::Mutex::new(child.stdin.take().expect("piped")));
    let stdout = child.stdout.take().expect("piped");
    let pending: Pending = Arc::default();
    {
        let (pending, stdin) = (pending.clone(), stdin.clone());
        let name = name.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut lines).take(max_line_bytes as u64 + 1).read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) if n > max_line_bytes => {
                        tracing::warn!(server = %name, "a stdio MCP server wrote a line over the size bound");
                        break;
                    }
                    Ok(_) => {}
                }
                let Ok(message) = serde_json::from_slice::<Value>(&line) else { continue };
                let id = message.get("id").map(Value::to_string);
                if message.get("method").is_some() {
                    // The server's own request: a ping is answered, the
                    // rest refused (the engine offers no client features).
                    if let Some(id) = message.get("id") {
                        let answer = if message["method"] == "ping" {
                            json!({"jsonrpc": "2.0", "id": id, "result": {}})
                        } else {
                            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "not supported"}})
                        };
                        let mut stdin = stdin.lock().await;
                        let _ = stdin.write_all(format!("{answer}\n").as_bytes()).await;
                    }
                    continue;
                }
                if let Some(tx) = id.and_then(|id| pending.lock().unwrap_or_else(PoisonError::into_inner).remove(&id)) {
                    let _ = tx.send(message);
                }
            }
        });
    }
    let handler = move |body: axum::body::Bytes| {
        let (pending, stdin) = (pending.clone(), stdin.clone());
        async move {
            use axum::response::IntoResponse;
            let Ok(message) = serde_json::from_slice::<Value>(&body) else {
                return axum::http::StatusCode::BAD_REQUEST.into_response();
            };
            let waiting = match (message.get("id"), message.get("method")) {
                (Some(id), Some(_)) => {
                    let (tx, rx) = oneshot::channel();
                    pending.lock().unwrap_or_else(PoisonError::into_inner).insert(id.to_string(), tx);
                    Some(rx)
                }
                _ => None,
            };
            let written = stdin.lock().await.write_all(format!("{message}\n").as_bytes()).await;
            if written.is_err() {
                return axum::http::StatusCode::BAD_GATEWAY.into_response();
            }
            match waiting {
                Some(rx) => match rx.await {
                    Ok(response) => axum::Json(response).into_response(),
                    Err(_) => axum::http::StatusCode::BAD_GATEWAY.into_response(),
                },
                None => axum::http::StatusCode::ACCEPTED.into_response(),
            }
        }
    };
    let app = axum::Router::new().route("/mcp", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| CliError::failed(anyhow!("--mcp {name}: no loopback port for the bridge: {e}")))?;
    let addr = listener.local_addr().map_err(|e| CliError::failed(anyhow!(e)))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(StdioServer { url: format!("http://{addr}/mcp"), _child: child })
}
